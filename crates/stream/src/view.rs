//! [`ViewPublisher`]: what a viewer of served envs reads (`serve --rerun`, docs/view.md): batches of steps
//! ([`StepsMsg`], `stagewise/<robot>/steps`) and episode summaries, put by the caller's thread with
//! `CongestionControl::Drop`. A learner stepping as fast as it can makes a batch every tenth of a second per env;
//! under congestion zenoh drops it rather than make the caller (a learner's reply) wait.

use crate::keys::Keys;
use crate::node::{wait_matching, zerr, Node, StreamError};
use crate::wire::{encode, EpisodeMsg, Message, StepsMsg};
use zenoh::qos::CongestionControl;
use zenoh::Wait;

/// What a [`ViewPublisher`] sent; `*_failed` did not encode or the put failed (zenoh's drops under congestion
/// are not seen here: the viewer counts the steps it never got).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ViewCounters {
    /// Steps (rows) in the batches sent.
    pub steps_sent: u64,
    pub batches_sent: u64,
    pub batches_failed: u64,
    pub episodes_sent: u64,
    pub episodes_failed: u64,
}

/// One robot's stream to a viewer (see the module doc).
pub struct ViewPublisher {
    keys: Keys,
    steps: zenoh::pubsub::Publisher<'static>,
    episode: zenoh::pubsub::Publisher<'static>,
    counters: ViewCounters,
}

impl Node {
    /// Declares `keys`' `steps` and `episode` publishers for a viewer.
    pub fn view_publisher(&self, keys: &Keys) -> Result<ViewPublisher, StreamError> {
        let declare = |key: String| {
            self.session()
                .declare_publisher(key.clone())
                .congestion_control(CongestionControl::Drop)
                .wait()
                .map_err(zerr(format!("declaring a publisher on `{key}`")))
        };
        Ok(ViewPublisher {
            keys: keys.clone(),
            steps: declare(keys.steps())?,
            episode: declare(keys.episode())?,
            counters: ViewCounters::default(),
        })
    }
}

impl ViewPublisher {
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Puts a batch of steps now (dropped by zenoh under congestion); false when it did not go out.
    pub fn steps(&mut self, msg: &StepsMsg) -> bool {
        let ok = put(&self.steps, msg);
        let c = &mut self.counters;
        if ok {
            c.steps_sent += msg.rows() as u64;
            c.batches_sent += 1;
        } else {
            c.batches_failed += 1;
        }
        ok
    }

    /// Puts an episode summary now; false when it did not go out.
    pub fn episode(&mut self, msg: &EpisodeMsg) -> bool {
        let ok = put(&self.episode, msg);
        let c = &mut self.counters;
        *(if ok {
            &mut c.episodes_sent
        } else {
            &mut c.episodes_failed
        }) += 1;
        ok
    }

    /// Waits until a subscriber matches the steps key (true) or `timeout` passes (false).
    pub fn wait_for_subscribers(&self, timeout: std::time::Duration) -> bool {
        wait_matching(&self.steps, timeout)
    }

    pub fn counters(&self) -> ViewCounters {
        self.counters
    }
}

fn put<M: Message>(publisher: &zenoh::pubsub::Publisher<'_>, msg: &M) -> bool {
    let bytes = match encode(msg) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(key = %publisher.key_expr(), "not encoded: {e}");
            return false;
        }
    };
    match publisher.put(bytes).wait() {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(key = %publisher.key_expr(), "put failed: {e}");
            false
        }
    }
}
