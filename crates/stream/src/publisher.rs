//! The actor's side: progress (dropped under congestion), transitions and episodes (bounded queue to a
//! publisher thread; a full queue drops, or first waits a bounded time: [`PublisherOptions`]), the robot's
//! liveliness token, counters.

use crate::keys::Keys;
use crate::node::{wait_matching, zerr, Node, StreamError};
use crate::wire::{encode, EpisodeMsg, ProgressMsg, TransitionMsg, WireError};
use crate::zero_copy::WireParts;
use crossbeam_channel::{SendTimeoutError, Sender, TrySendError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zenoh::bytes::ZBytes;
use zenoh::qos::CongestionControl;
use zenoh::Wait;

/// Options of a [`RobotPublisher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherOptions {
    /// Transitions and episodes waiting for the publisher thread.
    pub queue_capacity: usize,
    /// How long `publish_transition` / `publish_episode` wait for room in a full queue before the message is
    /// dropped and counted. Zero (the default): never wait, as an actor on a fixed control rate needs.
    pub full_queue_wait: Duration,
    /// Declare the liveliness token `stagewise/<robot>/alive`.
    pub liveliness: bool,
}

impl Default for PublisherOptions {
    /// A deep queue that drops when full and never waits: for actors on a fixed control rate (robots).
    fn default() -> Self {
        Self {
            queue_capacity: 1024,
            full_queue_wait: Duration::ZERO,
            liveliness: true,
        }
    }
}

impl PublisherOptions {
    /// For an actor that runs as fast as it can (simulation): a short queue whose producer waits for room (up
    /// to a second, then drops and counts), so the actor runs at the stream's pace instead of producing
    /// transitions only to drop them, and the few queued messages are still in cache when they are sent (a
    /// 1024-deep queue of 83 KB transitions is 85 MB of memory going cold: the loopback bench measured 12-14 k
    /// transitions/s with it against 17-20 k/s with 4-16).
    pub fn backpressure() -> Self {
        Self {
            queue_capacity: 16,
            full_queue_wait: Duration::from_secs(1),
            liveliness: true,
        }
    }
}

/// A snapshot of a publisher's counters. `*_queued` are accepted but not yet handed to zenoh; every accepted
/// message ends up in exactly one of `sent`/`failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub transitions_sent: u64,
    /// Refused because the queue was full (slow or vanished subscriber) or the publisher was closing.
    pub transitions_dropped: u64,
    /// Encoding or the zenoh put failed.
    pub transitions_failed: u64,
    pub transitions_queued: u64,
    pub episodes_sent: u64,
    pub episodes_dropped: u64,
    pub episodes_failed: u64,
    pub episodes_queued: u64,
    /// Progress messages handed to zenoh (which may still drop them under congestion, uncounted).
    pub progress_sent: u64,
    pub progress_failed: u64,
}

#[derive(Default)]
struct Cells {
    t_enqueued: AtomicU64,
    t_sent: AtomicU64,
    t_dropped: AtomicU64,
    t_failed: AtomicU64,
    e_enqueued: AtomicU64,
    e_sent: AtomicU64,
    e_dropped: AtomicU64,
    e_failed: AtomicU64,
    p_sent: AtomicU64,
    p_failed: AtomicU64,
}

impl Cells {
    fn snapshot(&self) -> Counters {
        let g = |a: &AtomicU64| a.load(Ordering::Acquire);
        // Read the finished counts before the enqueued ones so that `queued` never goes negative.
        let (t_sent, t_failed, e_sent, e_failed) = (
            g(&self.t_sent),
            g(&self.t_failed),
            g(&self.e_sent),
            g(&self.e_failed),
        );
        Counters {
            transitions_sent: t_sent,
            transitions_dropped: g(&self.t_dropped),
            transitions_failed: t_failed,
            transitions_queued: g(&self.t_enqueued).saturating_sub(t_sent + t_failed),
            episodes_sent: e_sent,
            episodes_dropped: g(&self.e_dropped),
            episodes_failed: e_failed,
            episodes_queued: g(&self.e_enqueued).saturating_sub(e_sent + e_failed),
            progress_sent: g(&self.p_sent),
            progress_failed: g(&self.p_failed),
        }
    }
}

enum Outgoing {
    Transition(Body<Box<TransitionMsg>>),
    Episode(Body<EpisodeMsg>),
}

/// A message for the publisher thread to encode, or its wire bytes when the caller already has them (the actor
/// encodes once for its log and hands the same bytes over).
enum Body<M> {
    Message(M),
    Encoded(Vec<u8>),
}

/// Publishes one robot's stream. Transitions and episodes go through a bounded queue to a publisher thread
/// (zenoh `CongestionControl::Block` there): when the queue is full they are dropped and counted, at once or
/// after waiting at most [`PublisherOptions::full_queue_wait`] for room, so a slow or vanished learner stalls
/// the caller by that much at most; progress goes straight out with `CongestionControl::Drop`.
pub struct RobotPublisher {
    keys: Keys,
    progress: zenoh::pubsub::Publisher<'static>,
    transition: Arc<zenoh::pubsub::Publisher<'static>>,
    tx: Option<Sender<Outgoing>>,
    full_queue_wait: Duration,
    worker: Option<JoinHandle<()>>,
    closing: Arc<AtomicBool>,
    cells: Arc<Cells>,
    _alive: Option<zenoh::liveliness::LivelinessToken>,
}

impl std::fmt::Debug for RobotPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobotPublisher")
            .field("keys", &self.keys)
            .field("counters", &self.counters())
            .finish()
    }
}

/// Whether a message was accepted by the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Queued,
    /// The queue was full (or the publisher is closing): the message was dropped and counted.
    Dropped,
}

impl Node {
    /// Declares the robot's publishers (and liveliness token) and starts the publisher thread.
    pub fn publisher(
        &self,
        keys: &Keys,
        options: PublisherOptions,
    ) -> Result<RobotPublisher, StreamError> {
        let s = self.session();
        let progress = s
            .declare_publisher(keys.progress())
            .congestion_control(CongestionControl::Drop)
            .wait()
            .map_err(zerr(format!(
                "declaring a publisher on `{}`",
                keys.progress()
            )))?;
        let transition = Arc::new(
            s.declare_publisher(keys.transition())
                .congestion_control(CongestionControl::Block)
                .wait()
                .map_err(zerr(format!(
                    "declaring a publisher on `{}`",
                    keys.transition()
                )))?,
        );
        let episode = s
            .declare_publisher(keys.episode())
            .congestion_control(CongestionControl::Block)
            .wait()
            .map_err(zerr(format!(
                "declaring a publisher on `{}`",
                keys.episode()
            )))?;
        let alive = if options.liveliness {
            Some(
                s.liveliness()
                    .declare_token(keys.alive())
                    .wait()
                    .map_err(zerr(format!(
                        "declaring the liveliness token `{}`",
                        keys.alive()
                    )))?,
            )
        } else {
            None
        };
        let (tx, rx) = crossbeam_channel::bounded::<Outgoing>(options.queue_capacity.max(1));
        let cells = Arc::new(Cells::default());
        let closing = Arc::new(AtomicBool::new(false));
        let worker = {
            let (cells, closing, transition) = (cells.clone(), closing.clone(), transition.clone());
            std::thread::Builder::new()
                .name(format!("stagewise-pub-{}", keys.robot()))
                .spawn(move || {
                    for out in rx {
                        let closing = closing.load(Ordering::Acquire);
                        match out {
                            Outgoing::Transition(m) => {
                                // The images' buffers go out as parts of the payload, not copied.
                                let payload = m.into_payload(|m| {
                                    (*m).encode_parts().map(WireParts::into_zbytes)
                                });
                                let ok = !closing && send(&transition, payload);
                                let c = if ok { &cells.t_sent } else { &cells.t_failed };
                                c.fetch_add(1, Ordering::AcqRel);
                            }
                            Outgoing::Episode(m) => {
                                let payload = m.into_payload(|m| encode(&m).map(ZBytes::from));
                                let ok = !closing && send(&episode, payload);
                                let c = if ok { &cells.e_sent } else { &cells.e_failed };
                                c.fetch_add(1, Ordering::AcqRel);
                            }
                        }
                    }
                })
                .map_err(|e| StreamError::Zenoh {
                    what: "starting the publisher thread".into(),
                    reason: e.to_string(),
                })?
        };
        Ok(RobotPublisher {
            keys: keys.clone(),
            progress,
            transition,
            tx: Some(tx),
            full_queue_wait: options.full_queue_wait,
            worker: Some(worker),
            closing,
            cells,
            _alive: alive,
        })
    }
}

impl<M> Body<M> {
    fn into_payload(
        self,
        encode: impl FnOnce(M) -> Result<ZBytes, WireError>,
    ) -> Result<ZBytes, WireError> {
        match self {
            Body::Message(m) => encode(m),
            Body::Encoded(bytes) => Ok(bytes.into()),
        }
    }
}

fn send(publisher: &zenoh::pubsub::Publisher<'_>, encoded: Result<ZBytes, WireError>) -> bool {
    match encoded {
        Ok(bytes) => match publisher.put(bytes).wait() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(key = %publisher.key_expr(), "put failed: {e}");
                false
            }
        },
        Err(e) => {
            tracing::warn!(key = %publisher.key_expr(), "{e}");
            false
        }
    }
}

impl RobotPublisher {
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Queues a transition for the publisher thread. Full queue: dropped and counted, at once or after waiting
    /// up to [`PublisherOptions::full_queue_wait`] for room. The thread
    /// encodes it with [`TransitionMsg::encode_parts`]: the images' buffers become parts of the zenoh payload
    /// instead of being copied into one buffer (the bytes on the wire are those of `encode`).
    pub fn publish_transition(&self, msg: TransitionMsg) -> Enqueued {
        self.enqueue(
            Outgoing::Transition(Body::Message(Box::new(msg))),
            &self.cells.t_enqueued,
            &self.cells.t_dropped,
        )
    }

    /// Like [`Self::publish_transition`] with the message's wire bytes (`encode(&msg)`), for a caller that
    /// already encoded it (e.g. for its log): the bytes go out unchanged.
    pub fn publish_transition_encoded(&self, bytes: Vec<u8>) -> Enqueued {
        self.enqueue(
            Outgoing::Transition(Body::Encoded(bytes)),
            &self.cells.t_enqueued,
            &self.cells.t_dropped,
        )
    }

    /// Queues an episode summary (same queue and rules as transitions).
    pub fn publish_episode(&self, msg: EpisodeMsg) -> Enqueued {
        self.enqueue(
            Outgoing::Episode(Body::Message(msg)),
            &self.cells.e_enqueued,
            &self.cells.e_dropped,
        )
    }

    /// Like [`Self::publish_episode`] with the message's wire bytes.
    pub fn publish_episode_encoded(&self, bytes: Vec<u8>) -> Enqueued {
        self.enqueue(
            Outgoing::Episode(Body::Encoded(bytes)),
            &self.cells.e_enqueued,
            &self.cells.e_dropped,
        )
    }

    fn enqueue(&self, out: Outgoing, enqueued: &AtomicU64, dropped: &AtomicU64) -> Enqueued {
        let Some(tx) = &self.tx else {
            dropped.fetch_add(1, Ordering::AcqRel);
            return Enqueued::Dropped;
        };
        // Count first so that `queued` (enqueued - finished) never underflows in a snapshot.
        enqueued.fetch_add(1, Ordering::AcqRel);
        let sent = match tx.try_send(out) {
            Ok(()) => true,
            Err(TrySendError::Full(out)) if !self.full_queue_wait.is_zero() => {
                match tx.send_timeout(out, self.full_queue_wait) {
                    Ok(()) => true,
                    Err(SendTimeoutError::Timeout(_) | SendTimeoutError::Disconnected(_)) => false,
                }
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        };
        if sent {
            Enqueued::Queued
        } else {
            enqueued.fetch_sub(1, Ordering::AcqRel);
            dropped.fetch_add(1, Ordering::AcqRel);
            Enqueued::Dropped
        }
    }

    /// Encodes and puts a progress message now, with `CongestionControl::Drop` (zenoh drops it rather than wait).
    pub fn publish_progress(&self, msg: &ProgressMsg) -> Result<(), StreamError> {
        match encode(msg) {
            Ok(bytes) => self.publish_progress_encoded(bytes),
            Err(e) => {
                self.cells.p_failed.fetch_add(1, Ordering::AcqRel);
                Err(e.into())
            }
        }
    }

    /// Like [`Self::publish_progress`] with the message's wire bytes.
    pub fn publish_progress_encoded(&self, bytes: Vec<u8>) -> Result<(), StreamError> {
        // The error text is built only on failure: this runs once per env step.
        let res = self
            .progress
            .put(bytes)
            .wait()
            .map_err(|e| zerr(format!("put on `{}`", self.keys.progress()))(e));
        let c = if res.is_ok() {
            &self.cells.p_sent
        } else {
            &self.cells.p_failed
        };
        c.fetch_add(1, Ordering::AcqRel);
        res
    }

    pub fn counters(&self) -> Counters {
        self.cells.snapshot()
    }

    /// Waits until a subscriber matches the transition key (true) or `timeout` passes (false). Anything put
    /// before that is lost: zenoh does not store messages for subscribers that come later.
    pub fn wait_for_subscribers(&self, timeout: Duration) -> bool {
        wait_matching(&self.transition, timeout)
    }

    /// Whether a subscriber matches the transition key now.
    pub fn has_subscribers(&self) -> bool {
        self.transition
            .matching_status()
            .wait()
            .map(|s| s.matching())
            .unwrap_or(false)
    }

    /// Waits until the queue is empty (true) or `timeout` passes (false).
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.counters();
            if c.transitions_queued == 0 && c.episodes_queued == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl RobotPublisher {
    /// Waits up to `flush_timeout` for the queue to drain, stops the publisher thread and returns the final
    /// counters (what was still queued is counted as failed).
    pub fn close(mut self, flush_timeout: Duration) -> Counters {
        self.flush(flush_timeout);
        self.stop();
        self.counters()
    }

    fn stop(&mut self) {
        self.closing.store(true, Ordering::Release);
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for RobotPublisher {
    /// Stops the publisher thread; what is still queued is counted as failed, not sent.
    fn drop(&mut self) {
        self.stop();
    }
}
