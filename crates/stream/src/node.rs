//! A zenoh session built from a [`StreamConfig`], with typed put/subscribe helpers.

use crate::keys::{KeyError, Keys};
use crate::wire::{decode, encode, Borrowed, PolicyMsg, TransitionMsg, WireError, WireMessage};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zenoh::qos::CongestionControl;
use zenoh::Wait;

/// The zenoh role of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Embedded peer: talks to other peers directly, no router needed (the default).
    #[default]
    Peer,
    /// Client: talks only through the routers in `connect`.
    Client,
    /// Router: routes for clients and peers (what `zenohd` is); used by tests and small deployments.
    Router,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Peer => "peer",
            Mode::Client => "client",
            Mode::Router => "router",
        }
    }
}

/// How to join the zenoh network. Fields set here override the same settings of `config_file`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamConfig {
    /// Overrides the file's mode when set; without a file, `None` means [`Mode::Peer`].
    pub mode: Option<Mode>,
    /// Endpoints to connect to, e.g. `tcp/192.168.1.10:7447` (routers or peers).
    pub connect: Vec<String>,
    /// Endpoints to listen on, e.g. `tcp/127.0.0.1:7447`. Empty: without a config file a peer or router
    /// listens on [`LOOPBACK_EPHEMERAL`] (loopback only, never all interfaces), a client nowhere; with a
    /// config file, the file decides.
    pub listen: Vec<String>,
    /// A zenoh configuration file (JSON5), e.g. to join routers with TLS; loaded first.
    pub config_file: Option<PathBuf>,
    /// Multicast scouting (discovering peers on the LAN). `None`: off without a config file (nothing is
    /// discovered unless connected explicitly); with a config file, the file decides.
    pub multicast_scouting: Option<bool>,
    /// The largest message this session reassembles (zenoh's `transport/link/rx/max_message_size`, 1 GiB by
    /// default); larger fragmented messages are dropped by zenoh. `None` keeps the file's or zenoh's default.
    pub max_message_size: Option<usize>,
}

/// Where a peer listens when nothing else is said: loopback, an ephemeral port.
pub const LOOPBACK_EPHEMERAL: &str = "tcp/127.0.0.1:0";

/// Errors of the zenoh layer.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("zenoh config file {path}")]
    ConfigFile {
        path: PathBuf,
        #[source]
        source: zenoh::Error,
    },
    #[error("zenoh config `{key}` = {value}")]
    Config {
        key: &'static str,
        value: String,
        #[source]
        source: zenoh::Error,
    },
    #[error("zenoh: {what}")]
    Zenoh {
        what: String,
        #[source]
        source: zenoh::Error,
    },
    /// A worker thread (env server, publisher) could not be started.
    #[error("starting the {what} thread")]
    Thread {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("no reply on `{key}` within {timeout:?} (is the server running and connected?)")]
    NoReply { key: String, timeout: Duration },
    #[error("the server on `{key}` answered with an error: {reason}")]
    Remote { key: String, reason: String },
}

pub(crate) fn zerr(what: impl Into<String>) -> impl FnOnce(zenoh::Error) -> StreamError {
    let what = what.into();
    move |source| StreamError::Zenoh { what, source }
}

impl StreamConfig {
    /// An embedded peer listening on `tcp/127.0.0.1:<port>` with multicast scouting off (`port` 0 picks a free
    /// one). What tests use.
    pub fn loopback(port: u16) -> Self {
        Self {
            mode: Some(Mode::Peer),
            listen: vec![format!("tcp/127.0.0.1:{port}")],
            multicast_scouting: Some(false),
            ..Self::default()
        }
    }

    /// An embedded peer that connects to `endpoints` (and listens on an ephemeral loopback port), multicast
    /// scouting off.
    pub fn loopback_connect(endpoints: &[String]) -> Self {
        Self {
            connect: endpoints.to_vec(),
            ..Self::loopback(0)
        }
    }

    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The zenoh configuration this describes.
    pub fn to_zenoh(&self) -> Result<zenoh::Config, StreamError> {
        let mut cfg = match &self.config_file {
            Some(path) => {
                zenoh::Config::from_file(path).map_err(|source| StreamError::ConfigFile {
                    path: path.clone(),
                    source,
                })?
            }
            None => zenoh::Config::default(),
        };
        let mut set = |key: &'static str, value: String| {
            cfg.insert_json5(key, &value)
                .map_err(|source| StreamError::Config { key, value, source })
        };
        let mode = match (self.mode, &self.config_file) {
            (Some(m), _) => Some(m),
            (None, None) => Some(Mode::Peer),
            (None, Some(_)) => None,
        };
        if let Some(mode) = mode {
            set("mode", json_str(mode.as_str()))?;
        }
        if !self.connect.is_empty() {
            set("connect/endpoints", json_list(&self.connect))?;
        }
        // Trust nobody by default: without a config file, a peer or router listens on loopback only and does
        // not scout (zenoh's own defaults: all interfaces, multicast scouting on).
        let no_file = self.config_file.is_none();
        if !self.listen.is_empty() {
            set("listen/endpoints", json_list(&self.listen))?;
        } else if no_file && matches!(mode, Some(Mode::Peer | Mode::Router)) {
            set(
                "listen/endpoints",
                json_list(&[LOOPBACK_EPHEMERAL.to_string()]),
            )?;
        }
        match (self.multicast_scouting, no_file) {
            (Some(on), _) => set("scouting/multicast/enabled", on.to_string())?,
            (None, true) => set("scouting/multicast/enabled", "false".into())?,
            (None, false) => {}
        }
        if let Some(n) = self.max_message_size {
            set("transport/link/rx/max_message_size", n.to_string())?;
        }
        Ok(cfg)
    }
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn json_list(items: &[String]) -> String {
    serde_json::Value::Array(
        items
            .iter()
            .map(|s| serde_json::Value::String(s.clone()))
            .collect(),
    )
    .to_string()
}

/// A declared subscription; dropping it undeclares.
pub struct Subscription {
    _sub: zenoh::pubsub::Subscriber<()>,
    key: String,
}

impl Subscription {
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("key", &self.key)
            .finish()
    }
}

/// What [`Node::subscribe_policy_bytes`] hands over: the raw message, or only its size when it was larger than
/// the limit (then it was neither copied, decoded nor hashed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyPayload {
    Bytes(Vec<u8>),
    Oversized { len: usize, max: usize },
}

/// What a typed subscription hands over: the concrete key the sample came on, and the decoded message or
/// why the bytes were rejected.
#[derive(Debug, Clone)]
pub struct Received<M> {
    pub key: String,
    pub msg: Result<M, WireError>,
}

/// One open zenoh session. Cheap to clone (the session is reference-counted); all calls are synchronous
/// (zenoh's `Wait`), so callers need no async runtime. Do not call blocking methods of a `Node` from inside a
/// subscription callback: callbacks run on zenoh's own threads.
#[derive(Clone)]
pub struct Node {
    session: zenoh::Session,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("zid", &self.session.zid().to_string())
            .finish()
    }
}

impl Node {
    /// Opens a session (connects to `connect`, listens on `listen`).
    pub fn open(config: &StreamConfig) -> Result<Self, StreamError> {
        let cfg = config.to_zenoh()?;
        let session = zenoh::open(cfg).wait().map_err(zerr("opening a session"))?;
        Ok(Self { session })
    }

    /// The underlying zenoh session, for what these helpers do not cover.
    pub fn session(&self) -> &zenoh::Session {
        &self.session
    }

    /// This session's zenoh id.
    pub fn zid(&self) -> String {
        self.session.zid().to_string()
    }

    /// Number of routers and peers this session is connected to.
    pub fn connected_count(&self) -> usize {
        let info = self.session.info();
        info.routers_zid().wait().count() + info.peers_zid().wait().count()
    }

    /// Encodes and puts one message on `key`, reliable, blocking under congestion.
    pub fn put<M: WireMessage>(&self, key: &str, msg: &M) -> Result<(), StreamError> {
        let bytes = encode(msg)?;
        self.put_bytes(key, bytes)
    }

    /// Puts raw bytes on `key` (reliable, blocking under congestion).
    pub fn put_bytes(&self, key: &str, bytes: Vec<u8>) -> Result<(), StreamError> {
        self.session
            .put(key, bytes)
            .congestion_control(CongestionControl::Block)
            .wait()
            .map_err(zerr(format!("put on `{key}`")))
    }

    /// Subscribes to `key` (wildcards allowed) and hands every sample, decoded as `M`, to `callback`. Bytes
    /// that do not decode arrive as `Err`; the subscription carries on.
    pub fn subscribe<M, F>(&self, key: &str, callback: F) -> Result<Subscription, StreamError>
    where
        M: WireMessage + 'static,
        F: Fn(Received<M>) + Send + Sync + 'static,
    {
        let sub = self
            .session
            .declare_subscriber(key)
            .callback(move |sample| {
                let bytes = sample.payload().to_bytes();
                callback(Received {
                    key: sample.key_expr().as_str().to_string(),
                    msg: decode::<M>(&bytes),
                })
            })
            .wait()
            .map_err(zerr(format!("subscribing to `{key}`")))?;
        Ok(Subscription {
            _sub: sub,
            key: key.to_string(),
        })
    }

    /// Like [`Node::subscribe`] for transitions, without copying their tensors: the callback gets a
    /// [`TransitionMsg<Borrowed>`] whose tensor data are slices of the received payload (the same decoder as
    /// `subscribe::<TransitionMsg, _>`, which copies them out; `into_owned()` copies what must outlive the
    /// callback). The payload is read in place when zenoh holds it in one piece and copied once otherwise (a
    /// message larger than a zenoh batch, 64 KB by default, arrives in fragments).
    pub fn subscribe_transitions_borrowed<F>(
        &self,
        key: &str,
        callback: F,
    ) -> Result<Subscription, StreamError>
    where
        F: for<'a> Fn(Received<TransitionMsg<Borrowed<'a>>>) + Send + Sync + 'static,
    {
        let sub = self
            .session
            .declare_subscriber(key)
            .callback(move |sample| {
                let bytes = sample.payload().to_bytes();
                callback(Received {
                    key: sample.key_expr().as_str().to_string(),
                    msg: decode(&bytes),
                })
            })
            .wait()
            .map_err(zerr(format!("subscribing to `{key}`")))?;
        Ok(Subscription {
            _sub: sub,
            key: key.to_string(),
        })
    }

    /// Like [`Node::subscribe`], delivering into an unbounded channel.
    pub fn subscribe_channel<M>(
        &self,
        key: &str,
    ) -> Result<(Subscription, mpsc::Receiver<Received<M>>), StreamError>
    where
        M: WireMessage + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        // `Sender` is `Sync`: zenoh's threads send without a lock. A dropped receiver just means nobody
        // listens any more.
        let sub = self.subscribe::<M, _>(key, move |r| {
            let _ = tx.send(r);
        })?;
        Ok((sub, rx))
    }

    /// Subscribes to the robot's policy key. Each put arrives as a decoded [`PolicyMsg`] whose sha256 has been
    /// checked, or as the reason it was rejected (malformed bytes, wrong schema, hash mismatch). Signature
    /// checking is the caller's (the actor's) job.
    pub fn subscribe_policy<F>(&self, keys: &Keys, callback: F) -> Result<Subscription, StreamError>
    where
        F: Fn(Result<PolicyMsg, WireError>) + Send + Sync + 'static,
    {
        self.subscribe::<PolicyMsg, _>(&keys.policy(), move |r| {
            callback(r.msg.and_then(|p| p.verify_sha256().map(|()| p)))
        })
    }

    /// Subscribes to the robot's policy key and hands over each put's raw bytes, undecoded, or only its size
    /// when it is larger than `max_bytes` (checked before anything is copied, decoded or hashed). The actor's
    /// policy worker decodes and checks what it gets off zenoh's threads.
    pub fn subscribe_policy_bytes<F>(
        &self,
        keys: &Keys,
        max_bytes: usize,
        callback: F,
    ) -> Result<Subscription, StreamError>
    where
        F: Fn(PolicyPayload) + Send + Sync + 'static,
    {
        let key = keys.policy();
        let sub = self
            .session
            .declare_subscriber(key.clone())
            .callback(move |sample| {
                let len = sample.payload().len();
                callback(if len > max_bytes {
                    PolicyPayload::Oversized {
                        len,
                        max: max_bytes,
                    }
                } else {
                    PolicyPayload::Bytes(sample.payload().to_bytes().into_owned())
                })
            })
            .wait()
            .map_err(zerr(format!("subscribing to `{key}`")))?;
        Ok(Subscription { _sub: sub, key })
    }

    /// Like [`Node::subscribe_policy`], delivering into an unbounded channel (the actor polls it between
    /// episodes with `try_recv`).
    pub fn subscribe_policy_channel(
        &self,
        keys: &Keys,
    ) -> Result<(Subscription, mpsc::Receiver<Result<PolicyMsg, WireError>>), StreamError> {
        let (tx, rx) = mpsc::channel();
        let sub = self.subscribe_policy(keys, move |r| {
            let _ = tx.send(r);
        })?;
        Ok((sub, rx))
    }

    /// Waits until at least one subscriber matches `key` (true) or `timeout` passes (false).
    pub fn wait_for_subscribers(&self, key: &str, timeout: Duration) -> Result<bool, StreamError> {
        let publisher = self
            .session
            .declare_publisher(key.to_string())
            .wait()
            .map_err(zerr(format!("declaring a publisher on `{key}`")))?;
        Ok(wait_matching(&publisher, timeout))
    }

    /// Waits until the liveliness token `stagewise/<robot>/alive` is seen (true) or `timeout` passes.
    pub fn wait_for_alive(&self, keys: &Keys, timeout: Duration) -> Result<bool, StreamError> {
        let deadline = Instant::now() + timeout;
        loop {
            let replies = self
                .session
                .liveliness()
                .get(keys.alive())
                .timeout(
                    deadline
                        .saturating_duration_since(Instant::now())
                        .clamp(Duration::from_millis(50), Duration::from_millis(500)),
                )
                .wait()
                .map_err(zerr(format!("liveliness query on `{}`", keys.alive())))?;
            if replies.recv().is_ok() {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes the session (also happens when the last clone is dropped).
    pub fn close(self) -> Result<(), StreamError> {
        self.session
            .close()
            .wait()
            .map_err(zerr("closing the session"))
    }
}

pub(crate) fn wait_matching(publisher: &zenoh::pubsub::Publisher<'_>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if publisher
            .matching_status()
            .wait()
            .map(|s| s.matching())
            .unwrap_or(false)
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_sets_what_it_says() {
        let mut c = StreamConfig::loopback(7447);
        c.connect = vec!["tcp/127.0.0.1:7448".into()];
        let z = c.to_zenoh().expect("config");
        assert_eq!(z.get_json("mode").expect("mode"), "\"peer\"");
        assert!(z
            .get_json("listen/endpoints")
            .expect("listen")
            .contains("tcp/127.0.0.1:7447"));
        assert!(z
            .get_json("connect/endpoints")
            .expect("connect")
            .contains("tcp/127.0.0.1:7448"));
        assert_eq!(
            z.get_json("scouting/multicast/enabled").expect("scouting"),
            "false"
        );
        c.max_message_size = Some(16 << 20);
        let z = c.to_zenoh().expect("config");
        assert_eq!(
            z.get_json("transport/link/rx/max_message_size")
                .expect("max_message_size"),
            (16u64 << 20).to_string()
        );
    }

    #[test]
    fn the_default_peer_listens_on_loopback_and_does_not_scout() {
        let z = StreamConfig::default().to_zenoh().expect("config");
        assert_eq!(z.get_json("mode").expect("mode"), "\"peer\"");
        assert_eq!(
            z.get_json("listen/endpoints").expect("listen"),
            "[\"tcp/127.0.0.1:0\"]"
        );
        assert_eq!(
            z.get_json("scouting/multicast/enabled").expect("scouting"),
            "false"
        );
        // Opening up is explicit.
        let z = StreamConfig {
            listen: vec!["tcp/0.0.0.0:7447".into()],
            multicast_scouting: Some(true),
            ..StreamConfig::default()
        }
        .to_zenoh()
        .expect("config");
        assert!(z
            .get_json("listen/endpoints")
            .expect("listen")
            .contains("0.0.0.0:7447"));
        assert_eq!(
            z.get_json("scouting/multicast/enabled").expect("scouting"),
            "true"
        );
        // A client listens nowhere.
        let z = StreamConfig::default()
            .with_mode(Mode::Client)
            .to_zenoh()
            .expect("config");
        assert!(!z
            .get_json("listen/endpoints")
            .expect("listen")
            .contains("127.0.0.1:0"));
    }

    #[test]
    fn bad_endpoint_and_missing_file_are_clear_errors() {
        let c = StreamConfig {
            connect: vec!["not an endpoint".into()],
            ..StreamConfig::default()
        };
        let err = c.to_zenoh().expect_err("bad endpoint");
        assert!(err.to_string().contains("connect/endpoints"), "{err}");
        let c = StreamConfig {
            config_file: Some("/nonexistent/zenoh.json5".into()),
            ..StreamConfig::default()
        };
        let err = c.to_zenoh().expect_err("missing file");
        assert!(
            err.to_string().contains("/nonexistent/zenoh.json5"),
            "{err}"
        );
    }

    #[test]
    fn config_file_is_read_and_overridden() {
        let dir = std::env::temp_dir().join(format!("stagewise-stream-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let path = dir.join("zenoh.json5");
        std::fs::write(
            &path,
            r#"{ mode: "client", connect: { endpoints: ["tcp/127.0.0.1:7999"] } }"#,
        )
        .expect("write");
        let c = StreamConfig {
            config_file: Some(path.clone()),
            ..StreamConfig::default()
        };
        let z = c.to_zenoh().expect("config");
        assert_eq!(z.get_json("mode").expect("mode"), "\"client\"");
        let z = c.clone().with_mode(Mode::Peer).to_zenoh().expect("config");
        assert_eq!(z.get_json("mode").expect("mode"), "\"peer\"");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
