//! Policies the actor can run, and the gate a learner's policy must pass before it may move anything.

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stagewise_core::{BoxSpec, Observation};
use stagewise_model::{ModelError, OrtRuntime, PolicyModel, SessionOptions};
use stagewise_stream::PolicyMsg;

/// Something that picks actions. `envs[i]` is the environment index of `obs[i]`, so a stateful policy (a
/// scripted expert) can keep state per environment.
pub trait Policy: Send {
    fn name(&self) -> String;
    fn act(&mut self, envs: &[usize], obs: &[&Observation]) -> Result<Vec<Vec<f32>>, PolicyError>;
    /// Env `env` starts a new episode with `seed`.
    fn reset(&mut self, _env: usize, _seed: u64) {}
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy version {version}: sha256 of the ONNX bytes is {actual}, the message says {claimed}")]
    Hash {
        version: u64,
        claimed: String,
        actual: String,
    },
    #[error("policy version {version} is unsigned, and this actor requires signed policies (a public key is configured)")]
    Unsigned { version: u64 },
    #[error("policy version {version}: the ed25519 signature does not verify with the configured public key")]
    BadSignature { version: u64 },
    #[error("policy version {version} is not newer than the running version {current}")]
    Stale { version: u64, current: u64 },
    #[error("policy version {version}: {source}")]
    Model { version: u64, source: ModelError },
    #[error("{0}")]
    Act(String),
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
}

impl OnnxPolicy {
    pub fn new(model: PolicyModel, name: impl Into<String>, version: u64) -> Self {
        Self {
            model,
            name: name.into(),
            version,
        }
    }

    pub fn version(&self) -> u64 {
        self.version
    }
}

impl Policy for OnnxPolicy {
    fn name(&self) -> String {
        format!("{} v{}", self.name, self.version)
    }

    fn act(&mut self, _envs: &[usize], obs: &[&Observation]) -> Result<Vec<Vec<f32>>, PolicyError> {
        let states: Vec<&[f32]> = obs.iter().map(|o| o.state.as_slice()).collect();
        self.model
            .act(&states)
            .map_err(|e| PolicyError::Act(e.to_string()))
    }
}

/// Checks a learner's policy before it may act: the sha256 of its bytes, its ed25519 signature when a public key
/// is configured (then unsigned policies are refused), that its version is newer than the running one, and that
/// its graph fits the environment's state and action sizes.
pub struct PolicyGate {
    key: Option<VerifyingKey>,
    state_size: usize,
    action_size: usize,
    current_version: Option<u64>,
    opts: SessionOptions,
}

impl PolicyGate {
    pub fn new(
        key: Option<VerifyingKey>,
        state_size: usize,
        action_size: usize,
        opts: SessionOptions,
    ) -> Self {
        Self {
            key,
            state_size,
            action_size,
            current_version: None,
            opts,
        }
    }

    /// Parses a hex-encoded 32-byte ed25519 public key.
    pub fn parse_key(hex_key: &str) -> Result<VerifyingKey, String> {
        let bytes =
            hex::decode(hex_key.trim()).map_err(|e| format!("public key is not hex: {e}"))?;
        let arr: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!("public key has {} bytes, ed25519 keys have 32", b.len())
        })?;
        VerifyingKey::from_bytes(&arr).map_err(|e| format!("not an ed25519 public key: {e}"))
    }

    pub fn current_version(&self) -> Option<u64> {
        self.current_version
    }

    /// Checks `msg`; on success the returned policy is the new running one (the gate records its version).
    pub fn admit(
        &mut self,
        msg: &PolicyMsg,
        runtime: &OrtRuntime,
    ) -> Result<OnnxPolicy, PolicyError> {
        let version = msg.version;
        let actual = stagewise_stream::wire::sha256_hex(&msg.onnx);
        if !actual.eq_ignore_ascii_case(&msg.sha256) {
            return Err(PolicyError::Hash {
                version,
                claimed: msg.sha256.clone(),
                actual,
            });
        }
        if let Some(key) = &self.key {
            let sig = msg
                .signature
                .as_deref()
                .ok_or(PolicyError::Unsigned { version })?;
            let sig =
                Signature::from_slice(sig).map_err(|_| PolicyError::BadSignature { version })?;
            key.verify(&msg.onnx, &sig)
                .map_err(|_| PolicyError::BadSignature { version })?;
        }
        if let Some(current) = self.current_version.filter(|&c| version <= c) {
            return Err(PolicyError::Stale { version, current });
        }
        let label = format!("policy v{version}");
        let model = PolicyModel::from_bytes(
            &msg.onnx,
            &label,
            self.state_size,
            self.action_size,
            runtime,
            &self.opts,
        )
        .map_err(|source| PolicyError::Model { version, source })?;
        self.current_version = Some(version);
        Ok(OnnxPolicy::new(model, "learner policy", version))
    }
}
