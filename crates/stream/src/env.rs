//! A remote gymnasium-style environment: `env/reset` and `env/step` queryables (server) and a client.

use crate::keys::Keys;
use crate::node::{zerr, Node, StreamError};
use crate::wire::ObservationMsg;
use crate::wire::{
    decode, encode, ResetReply, ResetRequest, StepReply, StepRequest, WireError, WireMessage,
};
use stagewise_core::{Env, ErrorChain};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use zenoh::Wait;

/// What `stagewise serve` plugs in: answers reset and step requests. Called on one thread, one request at a
/// time, in arrival order. Failures go into the reply's `error` field.
pub trait EnvHandler: Send + 'static {
    fn reset(&mut self, req: &ResetRequest) -> ResetReply;
    fn step(&mut self, req: &StepRequest) -> StepReply;
}

/// Serves any core [`Env`]. A reset without a seed uses `next_seed` and increments it.
#[derive(Debug)]
pub struct EnvAdapter<E> {
    pub env: E,
    pub next_seed: u64,
}

impl<E: Env> EnvAdapter<E> {
    pub fn new(env: E) -> Self {
        Self { env, next_seed: 0 }
    }
}

impl<E: Env + 'static> EnvHandler for EnvAdapter<E> {
    fn reset(&mut self, req: &ResetRequest) -> ResetReply {
        let seed = req.seed.unwrap_or_else(|| {
            let s = self.next_seed;
            self.next_seed = self.next_seed.wrapping_add(1);
            s
        });
        match self.env.reset(seed) {
            Ok(obs) => ResetReply::ok(self.env.spec(), ObservationMsg::from_observation_owned(obs)),
            Err(e) => ResetReply::error(ErrorChain(&e).to_string()),
        }
    }

    fn step(&mut self, req: &StepRequest) -> StepReply {
        match self.env.step(&req.action) {
            Ok(r) => StepReply::ok(r),
            Err(e) => StepReply::error(ErrorChain(&e).to_string()),
        }
    }
}

/// The running `env/*` queryable; dropping it stops serving.
pub struct EnvServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    key: String,
}

impl std::fmt::Debug for EnvServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvServer").field("key", &self.key).finish()
    }
}

impl Drop for EnvServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn reply_bytes<M: WireMessage>(msg: &M, fallback: impl FnOnce(String) -> M) -> Vec<u8> {
    match encode(msg) {
        Ok(b) => b,
        // Only reachable if serialisation itself breaks; tell the client instead of staying silent.
        Err(e) => encode(&fallback(ErrorChain(&e).to_string())).unwrap_or_default(),
    }
}

fn handle(handler: &mut dyn EnvHandler, suffix: &str, payload: &[u8]) -> Vec<u8> {
    match suffix {
        "reset" => {
            let reply = match decode::<ResetRequest>(payload) {
                Ok(req) => handler.reset(&req),
                Err(e) => ResetReply::error(format!("bad reset request: {}", ErrorChain(&e))),
            };
            reply_bytes(&reply, ResetReply::error)
        }
        _ => {
            let reply = match decode::<StepRequest>(payload) {
                Ok(req) => handler.step(&req),
                Err(e) => StepReply::error(format!("bad step request: {}", ErrorChain(&e))),
            };
            reply_bytes(&reply, StepReply::error)
        }
    }
}

impl Node {
    /// Declares the queryables `stagewise/<robot>/env/reset` and `.../env/step` and answers them with
    /// `handler` on a dedicated thread. A request that does not decode gets a reply whose `error` says why.
    pub fn serve_env<H: EnvHandler>(
        &self,
        keys: &Keys,
        mut handler: H,
    ) -> Result<EnvServer, StreamError> {
        let reset_key = keys.env_reset();
        let step_key = keys.env_step();
        let any = keys.env_any();
        let queryable = self
            .session()
            .declare_queryable(any.clone())
            .wait()
            .map_err(zerr(format!("declaring the queryable `{any}`")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("stagewise-env-{}", keys.robot()))
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        let query = match queryable.recv_timeout(Duration::from_millis(50)) {
                            Ok(Some(q)) => q,
                            Ok(None) => continue,
                            Err(_) => break,
                        };
                        let key = query.key_expr().as_str().to_string();
                        let suffix = if key == reset_key {
                            "reset"
                        } else if key == step_key {
                            "step"
                        } else {
                            // `env/*` also matches e.g. `env/spec`: not ours to answer.
                            continue;
                        };
                        let payload = query.payload().map(|p| p.to_bytes()).unwrap_or_default();
                        let bytes = handle(&mut handler, suffix, &payload);
                        if let Err(e) = query.reply(key.clone(), bytes).wait() {
                            tracing::warn!(%key, "reply failed: {e}");
                        }
                    }
                })
                .map_err(|source| StreamError::Thread {
                    what: "env server",
                    source,
                })?
        };
        Ok(EnvServer {
            stop,
            thread: Some(thread),
            key: any,
        })
    }

    /// A client for a robot's remote env.
    pub fn env_client(&self, keys: &Keys, timeout: Duration) -> EnvClient {
        EnvClient {
            node: self.clone(),
            keys: keys.clone(),
            timeout,
        }
    }
}

/// Calls a remote env's `reset`/`step` (what the Python gymnasium adapter does, in Rust).
#[derive(Debug, Clone)]
pub struct EnvClient {
    node: Node,
    keys: Keys,
    timeout: Duration,
}

impl EnvClient {
    /// Resets the remote env. An `error` in the reply becomes [`StreamError::Remote`].
    pub fn reset(&self, seed: Option<u64>) -> Result<ResetReply, StreamError> {
        let key = self.keys.env_reset();
        let reply: ResetReply = self.query(&key, &ResetRequest::new(seed))?;
        match reply.error {
            Some(reason) => Err(StreamError::Remote { key, reason }),
            None => Ok(reply),
        }
    }

    /// Steps the remote env. An `error` in the reply becomes [`StreamError::Remote`].
    pub fn step(&self, action: &[f32]) -> Result<StepReply, StreamError> {
        let key = self.keys.env_step();
        let reply: StepReply = self.query(&key, &StepRequest::new(action.to_vec()))?;
        match reply.error {
            Some(reason) => Err(StreamError::Remote { key, reason }),
            None => Ok(reply),
        }
    }

    /// Sends raw bytes to `env/reset` or `env/step` and returns the raw reply (for tests of bad requests).
    pub fn query_bytes(&self, key: &str, payload: Vec<u8>) -> Result<Vec<u8>, StreamError> {
        let replies = self
            .node
            .session()
            .get(key)
            .payload(payload)
            .timeout(self.timeout)
            .wait()
            .map_err(zerr(format!("query on `{key}`")))?;
        match replies.recv() {
            Ok(reply) => match reply.result() {
                Ok(sample) => Ok(sample.payload().to_bytes().into_owned()),
                Err(e) => Err(StreamError::Remote {
                    key: key.to_string(),
                    reason: String::from_utf8_lossy(&e.payload().to_bytes()).into_owned(),
                }),
            },
            Err(_) => Err(StreamError::NoReply {
                key: key.to_string(),
                timeout: self.timeout,
            }),
        }
    }

    fn query<Q: WireMessage, R: WireMessage>(&self, key: &str, req: &Q) -> Result<R, StreamError> {
        let bytes = self.query_bytes(key, encode(req)?)?;
        decode::<R>(&bytes).map_err(|e: WireError| e.into())
    }

    /// Waits until a server's queryable is reachable (true) or `timeout` passes (false).
    pub fn wait_for_server(&self, timeout: Duration) -> Result<bool, StreamError> {
        let key = self.keys.env_step();
        let querier = self
            .node
            .session()
            .declare_querier(key.clone())
            .wait()
            .map_err(zerr(format!("declaring a querier on `{key}`")))?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if querier
                .matching_status()
                .wait()
                .map(|s| s.matching())
                .unwrap_or(false)
            {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::{decode, encode, RewardSpecMsg, StepReply};

    /// The shaped-reward fields were added within schema 1: a reply from an older server (without them)
    /// still decodes, and a new one carries them by name.
    #[test]
    fn shaped_reward_fields_are_optional_and_named() {
        let old = rmpv::Value::Map(vec![
            (rmpv::Value::from("schema"), rmpv::Value::from(1)),
            (rmpv::Value::from("kind"), rmpv::Value::from("step_reply")),
            (rmpv::Value::from("obs"), rmpv::Value::Nil),
            (rmpv::Value::from("reward"), rmpv::Value::F64(1.0)),
            (rmpv::Value::from("terminated"), rmpv::Value::from(true)),
            (rmpv::Value::from("truncated"), rmpv::Value::from(false)),
            (
                rmpv::Value::from("info"),
                rmpv::Value::Map(vec![
                    (rmpv::Value::from("stage"), rmpv::Value::Nil),
                    (rmpv::Value::from("progress_oracle"), rmpv::Value::Nil),
                    (rmpv::Value::from("success"), rmpv::Value::from(true)),
                    (
                        rmpv::Value::from("action_clipped"),
                        rmpv::Value::from(false),
                    ),
                ]),
            ),
            (rmpv::Value::from("error"), rmpv::Value::Nil),
        ]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &old).expect("encode");
        let r: StepReply = decode(&bytes).expect("an old step_reply decodes");
        assert_eq!((r.task_reward, r.phi), (None, None));

        let new = StepReply {
            reward: 0.5,
            task_reward: Some(0.0),
            phi: Some(0.25),
            ..StepReply::default()
        };
        let back: StepReply = decode(&encode(&new).expect("encode")).expect("decode");
        assert_eq!(back, new);
        let v = rmpv::decode::read_value(&mut &encode(&new).expect("encode")[..]).expect("value");
        let keys: Vec<&str> = v
            .as_map()
            .expect("map")
            .iter()
            .filter_map(|(k, _)| k.as_str())
            .collect();
        assert!(keys.ends_with(&["error", "task_reward", "phi"]), "{keys:?}");

        let spec = RewardSpecMsg {
            source: "model".into(),
            model: Some("m.toml".into()),
            gamma: 0.99,
            shaping_scale: 1.0,
            ..Default::default()
        }
        .with_mode(&stagewise_core::RewardMode::Progress {
            potential_scale: 0.1,
            success_progress_one: true,
        });
        let reply = crate::wire::ResetReply {
            reward: Some(spec.clone()),
            phi: Some(0.1),
            ..Default::default()
        };
        let back: crate::wire::ResetReply =
            decode(&encode(&reply).expect("encode")).expect("decode");
        assert_eq!(back.reward, Some(spec));
    }
}
