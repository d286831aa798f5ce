//! Policies the actor can run, and the gate a learner's policy must pass before it may move anything
//! ([`PolicyGate`]; the signed bytes are `stagewise_wire::policy_signing_message`).

use ed25519_dalek::{Signature, VerifyingKey};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stagewise_core::{BoxSpec, Observation, ViewSpec};
use stagewise_model::{
    BoundPolicy, ModelError, OrtRuntime, PolicyEmbeddings, PolicyModel, PolicyPixels,
    SessionOptions, StateMap,
};
use stagewise_wire::PolicyMsg;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Something that picks actions. `envs[i]` is the environment index of `obs[i]`, so a stateful policy (a
/// scripted expert) can keep state per environment.
pub trait Policy: Send {
    fn name(&self) -> String;
    fn act(&mut self, envs: &[usize], obs: &[&Observation]) -> Result<Vec<Vec<f32>>, PolicyError>;
    /// Env `env` starts a new episode with `seed`.
    fn reset(&mut self, _env: usize, _seed: u64) {}
    /// The reward model's frame embeddings the policy reads beside the state (None: it reads none).
    fn embeddings(&self) -> Option<&PolicyEmbeddings> {
        None
    }
    /// [`Self::act`] given each observation's frame embeddings too (`embeddings[i]`: env `envs[i]`'s, every view's
    /// in the model's view order), for a policy whose [`Self::embeddings`] is Some; others ignore them.
    fn act_embedded(
        &mut self,
        envs: &[usize],
        obs: &[&Observation],
        _embeddings: &[&[f32]],
    ) -> Result<Vec<Vec<f32>>, PolicyError> {
        self.act(envs, obs)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy message of {len} bytes is larger than the limit of {max} bytes (--policy-max-bytes); not read")]
    Oversized { len: usize, max: usize },
    #[error("malformed policy message")]
    Malformed(#[source] stagewise_wire::WireError),
    #[error("policy version {version}: sha256 of the ONNX bytes is {actual}, the message says {claimed}")]
    Hash {
        version: u64,
        claimed: String,
        actual: String,
    },
    #[error("policy version {version} is unsigned, and this actor requires signed policies (a public key is configured)")]
    Unsigned { version: u64 },
    #[error("policy version {version}: the ed25519 signature does not verify with the configured public key for robot {robot:?} (signed for another robot, version or hash, or with another key)")]
    BadSignature { version: u64, robot: String },
    #[error("policy version {version} is not newer than the last accepted version {current}{}", state_note(.state_file))]
    Stale {
        version: u64,
        current: u64,
        state_file: Option<PathBuf>,
    },
    #[error("policy state file {}: {reason}", .path.display())]
    State { path: PathBuf, reason: String },
    /// Reading or writing the policy state file failed.
    #[error("policy state file {}: {what}", .path.display())]
    StateIo {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("policy state file {}: line {line}: version {value:?}", .path.display())]
    StateVersion {
        path: PathBuf,
        line: usize,
        value: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("policy version {version}")]
    Model {
        version: u64,
        #[source]
        source: ModelError,
    },
    /// Running the policy's ONNX model failed.
    #[error("running the policy model")]
    Run(#[source] ModelError),
    /// A policy implemented outside this crate could not act; the source says why.
    #[error("the policy could not act")]
    Act(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl PolicyError {
    /// A [`PolicyError::Act`] from an error or a message.
    pub fn act(source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Self::Act(source.into())
    }
}

/// Why a configured ed25519 public key (`--policy-key`) is refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyKeyError {
    #[error("public key is not hex")]
    NotHex(#[source] hex::FromHexError),
    #[error("public key has {0} bytes, ed25519 keys have 32")]
    Length(usize),
    #[error("not an ed25519 public key")]
    NotEd25519(#[source] ed25519_dalek::SignatureError),
    #[error(
        "public key {0} is a weak (small-order) ed25519 key: signatures forged without the secret verify against \
         it; make a key pair with `stagewise policy keygen`"
    )]
    Weak(String),
}

fn state_note(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!(" (recorded in {})", p.display()))
        .unwrap_or_default()
}

/// Uniform random actions within the action bounds (seeded: the same seed gives the same actions).
pub struct RandomPolicy {
    rng: ChaCha8Rng,
    low: Vec<f32>,
    high: Vec<f32>,
}

impl RandomPolicy {
    pub fn new(action: &BoxSpec, seed: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            low: action.low.clone(),
            high: action.high.clone(),
        }
    }
}

impl Policy for RandomPolicy {
    fn name(&self) -> String {
        "random".into()
    }

    fn act(&mut self, envs: &[usize], _obs: &[&Observation]) -> Result<Vec<Vec<f32>>, PolicyError> {
        Ok(envs
            .iter()
            .map(|_| {
                self.low
                    .iter()
                    .zip(&self.high)
                    .map(|(&lo, &hi)| {
                        if hi > lo {
                            self.rng.random_range(lo..=hi)
                        } else {
                            lo
                        }
                    })
                    .collect()
            })
            .collect())
    }
}

/// An ONNX policy on the observation's state vector.
pub struct OnnxPolicy {
    model: PolicyModel,
    name: String,
    version: u64,
    /// The policy's state fields by name from the source's state (its manifest's `state_names`,
    /// [`PolicyModel::load_bound`]); None: the source's state vector as it is.
    state_map: Option<StateMap>,
    /// The reward-model embeddings the policy reads before its state (its manifest's `[embeddings]`).
    embeddings: Option<PolicyEmbeddings>,
    /// The camera frames the policy reads before its state, from each observation (its manifest's `[pixels]`).
    pixels: Option<PolicyPixels>,
    /// `pixels.remember_first`: each env's row (frames, state) of its episode's first observation, which follows
    /// the current row; kept from the first observation the policy sees after [`Policy::reset`] (or at step 0).
    first: HashMap<usize, Vec<f32>>,
    /// The inputs of a call, one row per env.
    rows: Vec<f32>,
}

impl OnnxPolicy {
    pub fn new(model: PolicyModel, name: impl Into<String>, version: u64) -> Self {
        Self {
            model,
            name: name.into(),
            version,
            state_map: None,
            embeddings: None,
            pixels: None,
            first: HashMap::new(),
            rows: Vec::new(),
        }
    }

    /// A policy bound to a source (from its manifest, or from bytes whose graph declares its inputs): its state
    /// fields by name, its embeddings or frames input.
    pub fn bound(policy: BoundPolicy, name: impl Into<String>) -> Self {
        let mut p = Self::new(policy.model, name, 0);
        let reads_more = policy.embeddings.is_some() || policy.pixels.is_some();
        p.state_map = (!policy.state_map.is_identity() || reads_more).then_some(policy.state_map);
        p.embeddings = policy.embeddings;
        p.pixels = policy.pixels;
        p
    }

    /// The version a learner gave the policy (0: not a learner's).
    pub fn with_version(mut self, version: u64) -> Self {
        self.version = version;
        self
    }

    /// The camera frames the policy reads (its manifest's `[pixels]`), None when it reads none.
    pub fn pixels(&self) -> Option<&PolicyPixels> {
        self.pixels.as_ref()
    }

    /// The graph's input rows: each env's embeddings or frames (when the policy reads them), then its state
    /// fields; with `pixels.remember_first` followed by the env's episode's first such row.
    fn inputs(
        &mut self,
        envs: &[usize],
        obs: &[&Observation],
        embeddings: &[&[f32]],
    ) -> Result<usize, PolicyError> {
        let e = self.embeddings.as_ref().map_or(0, PolicyEmbeddings::len);
        let f = self.pixels.as_ref().map_or(0, PolicyPixels::len);
        let now = e + f + self.state_map.as_ref().map_or(0, StateMap::model_len);
        let remember = self.pixels.as_ref().is_some_and(|p| p.remember_first);
        let width = if remember { 2 * now } else { now };
        self.rows.resize(obs.len() * width, 0.0);
        for (i, o) in obs.iter().enumerate() {
            let env = envs.get(i).copied().unwrap_or(i);
            let bad = |reason: String| PolicyError::Run(ModelError::BadObservation { env, reason });
            let row = &mut self.rows[i * width..(i + 1) * width];
            if e > 0 {
                let emb = embeddings.get(i).copied().unwrap_or_default();
                if emb.len() != e {
                    return Err(bad(format!(
                        "{} embedding values from the reward model, the policy reads {e}",
                        emb.len()
                    )));
                }
                row[..e].copy_from_slice(emb);
            }
            if let Some(p) = &self.pixels {
                p.write(o, &mut row[e..e + f]).map_err(bad)?;
            }
            if let Some(map) = &self.state_map {
                map.select(&o.state, &mut row[e + f..now]).map_err(bad)?;
            }
            if remember {
                let (current, first) = row.split_at_mut(now);
                let kept = self.first.entry(env).or_insert_with(|| current.to_vec());
                if o.step == 0 {
                    kept.copy_from_slice(current); // a new episode, whether or not reset was called
                }
                first.copy_from_slice(kept);
            }
        }
        Ok(width)
    }

    pub fn version(&self) -> u64 {
        self.version
    }
}

impl Policy for OnnxPolicy {
    fn name(&self) -> String {
        match self.model.action_repeat() {
            1 => format!("{} v{}", self.name, self.version),
            k => format!(
                "{} v{} (each action held {k} steps)",
                self.name, self.version
            ),
        }
    }

    /// Each env's action is held for the graph's action repeat ([`PolicyModel::act_held`]).
    fn act(&mut self, envs: &[usize], obs: &[&Observation]) -> Result<Vec<Vec<f32>>, PolicyError> {
        self.act_embedded(envs, obs, &[])
    }

    fn embeddings(&self) -> Option<&PolicyEmbeddings> {
        self.embeddings.as_ref()
    }

    fn act_embedded(
        &mut self,
        envs: &[usize],
        obs: &[&Observation],
        embeddings: &[&[f32]],
    ) -> Result<Vec<Vec<f32>>, PolicyError> {
        if self.state_map.is_none() {
            let states: Vec<&[f32]> = obs.iter().map(|o| o.state.as_slice()).collect();
            return self.model.act_held(envs, &states).map_err(PolicyError::Run);
        }
        let width = self.inputs(envs, obs, embeddings)?;
        let rows: Vec<&[f32]> = (0..obs.len())
            .map(|i| &self.rows[i * width..(i + 1) * width])
            .collect();
        self.model.act_held(envs, &rows).map_err(PolicyError::Run)
    }

    fn reset(&mut self, env: usize, _seed: u64) {
        self.model.reset_env(env);
        self.first.remove(&env);
    }
}

/// The default limit on a policy message's size (16 MiB): checked before anything is hashed.
pub const DEFAULT_POLICY_MAX_BYTES: usize = 16 << 20;

/// How many policy messages may wait for the checking worker; more are dropped (counted and logged).
pub const POLICY_QUEUE: usize = 8;

/// What an actor gives a policy to read, against which a learner's policy is bound when its graph declares its
/// inputs in its metadata ([`stagewise_model::PolicyInputs`]): the same checks as a manifest policy at start.
#[derive(Debug, Clone, Default)]
pub struct PolicySource {
    /// The state, for errors (e.g. "the env's state (task pick-place)").
    pub origin: String,
    /// The env's state fields, in the order of its state vector: a policy without declared inputs reads all of
    /// them as they are.
    pub state_names: Vec<String>,
    /// The fields a policy may read by name (over a robot: what it measures itself); None: every one.
    pub readable: Option<Vec<String>>,
    /// The cameras, for errors (e.g. "this run's simulator (task pick-place, --width/--height)").
    pub views_origin: String,
    /// The camera views each observation carries, at their size: a pixel policy must find its views at its size.
    pub views: Vec<ViewSpec>,
    /// The reward model, for errors (e.g. "this run's reward model m.toml", "this run (--reward oracle)").
    pub embeddings_origin: String,
    /// The frame embeddings the run's reward model computes (a two-part model's encoder, views, size); None: none.
    pub embeddings: Option<PolicyEmbeddings>,
}

impl PolicySource {
    /// A source of these state fields alone (no cameras, no embeddings), described as `origin`.
    pub fn state(origin: impl Into<String>, state_names: Vec<String>) -> Self {
        Self {
            origin: origin.into(),
            state_names,
            views_origin: "this actor (no cameras)".into(),
            embeddings_origin: "this actor (no reward model)".into(),
            ..Self::default()
        }
    }

    /// Binds a policy's bytes (`label` names them) to this source: its declared inputs by name, its frames
    /// against the views, its embeddings against the reward model's ([`PolicyModel::bind_bytes`]).
    pub fn bind(
        &self,
        onnx: &[u8],
        label: &str,
        action_size: usize,
        runtime: &OrtRuntime,
        opts: &SessionOptions,
    ) -> Result<BoundPolicy, ModelError> {
        let bound = PolicyModel::bind_bytes(
            onnx,
            label,
            &self.origin,
            &self.state_names,
            self.readable.as_deref(),
            action_size,
            runtime,
            opts,
        )?;
        bound.check_views(&self.views_origin, &self.views)?;
        bound.check_embeddings(&self.embeddings_origin, self.embeddings.as_ref())?;
        Ok(bound)
    }
}

/// What a [`PolicyGate`] checks a learner's policy against.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// The robot this actor drives: the signed message names it.
    pub robot: String,
    /// Public key that must have signed every policy; `None` accepts unsigned policies (the caller decides
    /// whether that is allowed: `stagewise run` refuses it over a robot unless the operator opts out).
    pub key: Option<VerifyingKey>,
    /// Messages larger than this are refused before they are decoded or hashed.
    pub max_bytes: usize,
    /// Where the last accepted version is kept across restarts (`None`: in memory only).
    pub state_file: Option<PathBuf>,
    /// What a policy may read: its graph is bound to it ([`PolicySource::bind`]).
    pub source: PolicySource,
    pub action_size: usize,
    pub opts: SessionOptions,
}

/// Checks a learner's policy before it may act, in this order: its size (before anything else), that it
/// decodes, the sha256 of its bytes, its ed25519 signature when a public key is configured (strict verification
/// of [`stagewise_wire::policy_signing_message`]: robot, version, sha256; unsigned policies are then refused), that its version
/// is newer than the last accepted one (persisted in the state file, so a restart does not reopen old versions),
/// and that its graph fits what the actor gives it ([`PolicySource`]: the whole state, or the inputs its metadata
/// declares, bound by name, frames and embeddings checked as a manifest policy's) and the action size. An
/// accepted version is written to the state file before the policy is handed over.
pub struct PolicyGate {
    config: GateConfig,
    current_version: Option<u64>,
}

impl PolicyGate {
    /// A gate; reads the last accepted version from the state file when there is one (a missing file means
    /// none yet; an unreadable one, or one written for another robot, is an error).
    pub fn new(config: GateConfig) -> Result<Self, PolicyError> {
        let current_version = match &config.state_file {
            Some(path) => PolicyState::load(path, &config.robot)?.map(|s| s.version),
            None => None,
        };
        Ok(Self {
            config,
            current_version,
        })
    }

    /// Parses a hex-encoded 32-byte ed25519 public key; weak (small-order) keys are refused: anything verifies
    /// against them.
    pub fn parse_key(hex_key: &str) -> Result<VerifyingKey, PolicyKeyError> {
        let bytes = hex::decode(hex_key.trim()).map_err(PolicyKeyError::NotHex)?;
        let arr: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| PolicyKeyError::Length(b.len()))?;
        let key = VerifyingKey::from_bytes(&arr).map_err(PolicyKeyError::NotEd25519)?;
        if key.is_weak() {
            return Err(PolicyKeyError::Weak(hex_key.trim().to_string()));
        }
        Ok(key)
    }

    pub fn config(&self) -> &GateConfig {
        &self.config
    }

    /// The last accepted version (from the state file at start, then from this gate).
    pub fn current_version(&self) -> Option<u64> {
        self.current_version
    }

    /// Every check but loading the graph, on the raw message bytes: size, decoding, hash, signature, version.
    pub fn check(&self, bytes: &[u8]) -> Result<PolicyMsg, PolicyError> {
        if bytes.len() > self.config.max_bytes {
            return Err(PolicyError::Oversized {
                len: bytes.len(),
                max: self.config.max_bytes,
            });
        }
        let msg = stagewise_wire::decode::<PolicyMsg>(bytes).map_err(PolicyError::Malformed)?;
        self.check_msg(&msg)?;
        Ok(msg)
    }

    /// [`PolicyGate::check`] on a decoded message (the size limit applies to its ONNX bytes).
    pub fn check_msg(&self, msg: &PolicyMsg) -> Result<(), PolicyError> {
        let version = msg.version;
        if msg.onnx.len() > self.config.max_bytes {
            return Err(PolicyError::Oversized {
                len: msg.onnx.len(),
                max: self.config.max_bytes,
            });
        }
        let actual = stagewise_wire::sha256_hex(&msg.onnx);
        if !actual.eq_ignore_ascii_case(&msg.sha256) {
            return Err(PolicyError::Hash {
                version,
                claimed: msg.sha256.clone(),
                actual,
            });
        }
        if let Some(key) = &self.config.key {
            let bad = || PolicyError::BadSignature {
                version,
                robot: self.config.robot.clone(),
            };
            let sig = msg
                .signature
                .as_deref()
                .ok_or(PolicyError::Unsigned { version })?;
            let sig = Signature::from_slice(sig).map_err(|_| bad())?;
            let signed = msg
                .signing_message(&self.config.robot)
                .map_err(PolicyError::Malformed)?;
            key.verify_strict(&signed, &sig).map_err(|_| bad())?;
        }
        if let Some(current) = self.current_version.filter(|&c| version <= c) {
            return Err(PolicyError::Stale {
                version,
                current,
                state_file: self.config.state_file.clone(),
            });
        }
        Ok(())
    }

    /// Checks raw message bytes, loads the graph, records the version (state file first); on success the
    /// returned policy is the new running one.
    pub fn admit_bytes(
        &mut self,
        bytes: &[u8],
        runtime: &OrtRuntime,
    ) -> Result<OnnxPolicy, PolicyError> {
        let msg = self.check(bytes)?;
        self.load_and_record(&msg, runtime)
    }

    /// [`PolicyGate::admit_bytes`] for a message decoded already.
    pub fn admit(
        &mut self,
        msg: &PolicyMsg,
        runtime: &OrtRuntime,
    ) -> Result<OnnxPolicy, PolicyError> {
        self.check_msg(msg)?;
        self.load_and_record(msg, runtime)
    }

    fn load_and_record(
        &mut self,
        msg: &PolicyMsg,
        runtime: &OrtRuntime,
    ) -> Result<OnnxPolicy, PolicyError> {
        let version = msg.version;
        let label = format!("policy v{version}");
        let bound = self
            .config
            .source
            .bind(
                &msg.onnx,
                &label,
                self.config.action_size,
                runtime,
                &self.config.opts,
            )
            .map_err(|source| PolicyError::Model { version, source })?;
        self.record(version, &msg.sha256)?;
        Ok(OnnxPolicy::bound(bound, "learner policy").with_version(version))
    }

    /// Records `version` as accepted: the state file first (atomically), then memory.
    fn record(&mut self, version: u64, sha256: &str) -> Result<(), PolicyError> {
        if let Some(path) = &self.config.state_file {
            PolicyState {
                robot: self.config.robot.clone(),
                version,
                sha256: sha256.to_ascii_lowercase(),
            }
            .store(path)?;
        }
        self.current_version = Some(version);
        Ok(())
    }
}

/// The last accepted policy of a robot, as kept on disk: three `key = value` lines.
///
/// ```text
/// # stagewise: the last policy version accepted for this robot; delete the file to accept older versions again
/// robot = "arm0"
/// version = 7
/// sha256 = "<64 hex digits>"
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyState {
    pub robot: String,
    pub version: u64,
    pub sha256: String,
}

impl PolicyState {
    /// Reads `path`; `Ok(None)` when it does not exist. A file for another robot, or one that does not parse,
    /// is an error (never silently treated as "no version yet").
    pub fn load(path: &Path, robot: &str) -> Result<Option<Self>, PolicyError> {
        let err = |reason: String| PolicyError::State {
            path: path.to_path_buf(),
            reason,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(PolicyError::StateIo {
                    path: path.to_path_buf(),
                    what: "cannot read it",
                    source,
                })
            }
        };
        let (mut r, mut v, mut h) = (None, None, None);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, val)) = line.split_once('=') else {
                return Err(err(format!("line {}: expected `key = value`", n + 1)));
            };
            let val = val.trim();
            let unquote = || {
                val.strip_prefix('"')
                    .and_then(|s| s.strip_suffix('"'))
                    .map(str::to_string)
                    .ok_or_else(|| err(format!("line {}: {val} is not a quoted string", n + 1)))
            };
            match k.trim() {
                "robot" => r = Some(unquote()?),
                "version" => {
                    v = Some(
                        val.parse::<u64>()
                            .map_err(|source| PolicyError::StateVersion {
                                path: path.to_path_buf(),
                                line: n + 1,
                                value: val.to_string(),
                                source,
                            })?,
                    )
                }
                "sha256" => h = Some(unquote()?),
                other => return Err(err(format!("line {}: unknown key {other:?}", n + 1))),
            }
        }
        let (Some(r), Some(version), Some(sha256)) = (r, v, h) else {
            return Err(err("needs robot, version and sha256".into()));
        };
        if r != robot {
            return Err(err(format!(
                "it records robot {r:?}, this actor drives {robot:?} (pass --policy-state FILE for this robot)"
            )));
        }
        Ok(Some(Self {
            robot: r,
            version,
            sha256,
        }))
    }

    /// Writes `path` atomically: a temporary file beside it, fsynced, renamed over it, and the directory
    /// fsynced, so a crash leaves either the old or the new version, never a torn file.
    pub fn store(&self, path: &Path) -> Result<(), PolicyError> {
        use std::io::Write;
        let err = |what: &'static str, source: std::io::Error| PolicyError::StateIo {
            path: path.to_path_buf(),
            what,
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(|e| err("creating its directory", e))?;
        let mut tmp_name = path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let text = format!(
            "# stagewise: the last policy version accepted for this robot; delete the file to accept older versions again\nrobot = \"{}\"\nversion = {}\nsha256 = \"{}\"\n",
            self.robot, self.version, self.sha256
        );
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(err("writing a temporary file", e));
        }
        if let Err(e) = std::fs::rename(&tmp, path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(err("renaming the temporary file over it", e));
        }
        // The rename is durable once the directory is synced (not possible on every platform: best effort).
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    const RFC_SECRET: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

    fn signing_key() -> SigningKey {
        let seed: [u8; 32] = hex::decode(RFC_SECRET)
            .expect("hex")
            .try_into()
            .expect("32");
        SigningKey::from_bytes(&seed)
    }

    fn signed(robot: &str, version: u64, onnx: &[u8], key: &SigningKey) -> PolicyMsg {
        let msg = PolicyMsg::new(version, onnx.to_vec());
        let sig = key.sign(&msg.signing_message(robot).expect("message"));
        msg.with_signature(sig.to_bytes().to_vec())
    }

    fn gate(robot: &str, key: Option<VerifyingKey>, state_file: Option<PathBuf>) -> PolicyGate {
        PolicyGate::new(GateConfig {
            robot: robot.into(),
            key,
            max_bytes: 1000,
            state_file,
            source: PolicySource::state("the test state", vec!["a".into(), "b".into(), "c".into()]),
            action_size: 2,
            opts: SessionOptions::default(),
        })
        .expect("gate")
    }

    fn enc(msg: &PolicyMsg) -> Vec<u8> {
        stagewise_wire::encode(msg).expect("encode")
    }

    /// The same signature as python/tests/test_policy.py pins for its signer: both sign the same bytes.
    #[test]
    fn the_signature_covers_the_pinned_domain_separated_message() {
        let msg = signed("arm0", 7, b"onnx", &signing_key());
        assert_eq!(
            hex::encode(msg.signature.as_deref().expect("signed")),
            "8331abf8393af70951ded5b0a2e637d4d3fa3482924c7cdad100f3d408d49623\
             f6a58629c8b815018a6de92d15834fe3365c7436d13e7ef97c04340f97734d0e"
        );
    }

    #[test]
    fn weak_and_malformed_keys_are_refused() {
        // The identity point: small order, every "signature" with s = 0 verifies against it.
        let weak = format!("01{}", "00".repeat(31));
        let e = PolicyGate::parse_key(&weak).expect_err("weak key");
        assert!(e.to_string().contains("weak"), "{e}");
        // The hex decoder's error is the source, printed once by a chain walker.
        let e = PolicyGate::parse_key("zz").expect_err("not hex");
        assert!(matches!(e, PolicyKeyError::NotHex(_)), "{e}");
        let chain = stagewise_core::ErrorChain(&e).to_string();
        assert!(chain.starts_with("public key is not hex: "), "{chain}");
        assert!(PolicyGate::parse_key(&"00".repeat(31)).is_err());
        let good = hex::encode(signing_key().verifying_key().to_bytes());
        assert!(PolicyGate::parse_key(&good).is_ok());
    }

    #[test]
    fn oversized_messages_are_refused_before_decoding() {
        let g = gate("arm0", None, None);
        // Not even msgpack: the size is all that is looked at.
        let e = g.check(&[0xc1; 1001]).expect_err("oversized");
        assert!(
            matches!(
                e,
                PolicyError::Oversized {
                    len: 1001,
                    max: 1000
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("larger than the limit"), "{e}");
        let e = g.check(&[0xc1; 10]).expect_err("malformed");
        assert!(e.to_string().contains("malformed policy message"), "{e}");
    }

    #[test]
    fn signatures_bind_robot_version_and_key() {
        let key = signing_key();
        let g = gate("arm0", Some(key.verifying_key()), None);
        g.check(&enc(&signed("arm0", 3, b"policy", &key)))
            .expect("signed for this robot");
        // Signed for another robot.
        let e = g
            .check(&enc(&signed("arm1", 3, b"policy", &key)))
            .expect_err("other robot");
        assert!(matches!(e, PolicyError::BadSignature { .. }), "{e}");
        assert!(e.to_string().contains("does not verify"), "{e}");
        // An old signed policy replayed under a higher version number.
        let mut replay = signed("arm0", 3, b"policy", &key);
        replay.version = 9;
        assert!(matches!(
            g.check(&enc(&replay)),
            Err(PolicyError::BadSignature { .. })
        ));
        // The signature of the bare ONNX bytes (the old scheme) does not verify.
        let old = PolicyMsg::new(4, b"policy".to_vec())
            .with_signature(key.sign(b"policy").to_bytes().to_vec());
        assert!(matches!(
            g.check(&enc(&old)),
            Err(PolicyError::BadSignature { .. })
        ));
        // Unsigned, with a key configured.
        assert!(matches!(
            g.check(&enc(&PolicyMsg::new(5, b"policy".to_vec()))),
            Err(PolicyError::Unsigned { version: 5 })
        ));
        // Without a key, unsigned is accepted (the caller decides whether that is allowed).
        gate("arm0", None, None)
            .check(&enc(&PolicyMsg::new(5, b"policy".to_vec())))
            .expect("unsigned, no key");
    }

    #[test]
    fn the_last_accepted_version_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("state").join("arm0.policy-state");
        let key = signing_key();
        let mut g = gate("arm0", Some(key.verifying_key()), Some(path.clone()));
        assert_eq!(g.current_version(), None);
        let v5 = signed("arm0", 5, b"policy", &key);
        g.check_msg(&v5).expect("v5 is new");
        g.record(5, &v5.sha256).expect("record");
        // No temporary file left beside it.
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("arm0.policy-state")]);

        // "Restart": a new gate reads the file and refuses v5 (replayed) and v4 (rollback); v6 passes.
        let g = gate("arm0", Some(key.verifying_key()), Some(path.clone()));
        assert_eq!(g.current_version(), Some(5));
        for v in [4, 5] {
            let e = g
                .check(&enc(&signed("arm0", v, b"policy", &key)))
                .expect_err("stale");
            assert!(
                e.to_string()
                    .contains("not newer than the last accepted version 5"),
                "{e}"
            );
            assert!(e.to_string().contains("arm0.policy-state"), "{e}");
        }
        g.check(&enc(&signed("arm0", 6, b"policy", &key)))
            .expect("v6");
        assert_eq!(
            PolicyState::load(&path, "arm0").expect("load"),
            Some(PolicyState {
                robot: "arm0".into(),
                version: 5,
                sha256: v5.sha256.clone(),
            })
        );

        // A state file of another robot, or a torn one, is an error, never "no version yet".
        let e = PolicyGate::new(GateConfig {
            robot: "arm1".into(),
            ..g.config().clone()
        })
        .err()
        .expect("other robot's file");
        assert!(e.to_string().contains("records robot \"arm0\""), "{e}");
        std::fs::write(&path, "robot = \"arm0\"\nversion = x\n").expect("write");
        assert!(PolicyState::load(&path, "arm0").is_err());
        std::fs::write(&path, "robot = \"arm0\"\n").expect("write");
        assert!(PolicyState::load(&path, "arm0").is_err());
    }
}
