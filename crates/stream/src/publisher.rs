//! The actor's side: progress (dropped under congestion), transitions and episodes (bounded queue to a
//! publisher thread that drops when full, or put by the caller itself: [`Delivery`]), the robot's liveliness
//! token, counters.
//!
//! The publisher puts messages already encoded ([`Encoded`]): the caller encodes each message once and hands the
//! same bytes to every sink (the actor's episode log and this publisher). A transition is encoded in parts
//! ([`TransitionMsg::encode_parts`]): its images' buffers become parts of the zenoh payload, not copied.

use crate::keys::Keys;
use crate::node::{wait_matching, zerr, Node, StreamError};
use crate::wire::{Encoded, EpisodeMsg, ProgressMsg, TransitionMsg, WireParts};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zenoh::bytes::ZBytes;
use zenoh::qos::CongestionControl;
use zenoh::Wait;

/// How transitions and episodes reach zenoh (both with `CongestionControl::Block`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Through a bounded queue to a publisher thread, so the caller never waits on zenoh: when the queue is
    /// full (a slow or vanished learner) the message is dropped and counted at once. For actors on a fixed
    /// control rate (robots).
    Queue { capacity: usize },
    /// Put by the caller's own thread: nothing is queued or dropped, a slower learner paces the caller (a
    /// learner that blocks the link for zenoh's `wait_before_close`, 5 s by default, gets its link closed, and
    /// the caller goes on). For actors that run as fast as they can (simulation): no hand-off to another
    /// thread, which the loopback bench measured at 30-40 us of CPU per 83 KB transition, half of what raw
    /// zenoh's put and delivery cost.
    Caller,
}

/// Options of a [`RobotPublisher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherOptions {
    pub delivery: Delivery,
    /// Declare the liveliness token `stagewise/<robot>/alive`.
    pub liveliness: bool,
}

impl Default for PublisherOptions {
    /// A deep queue that drops when full and never waits: for actors on a fixed control rate (robots).
    fn default() -> Self {
        Self {
            delivery: Delivery::Queue { capacity: 1024 },
            liveliness: true,
        }
    }
}

impl PublisherOptions {
    /// For an actor that runs as fast as it can (simulation): the caller puts ([`Delivery::Caller`]), so a
    /// slower learner paces the actor instead of transitions being produced only to be dropped.
    pub fn backpressure() -> Self {
        Self {
            delivery: Delivery::Caller,
            liveliness: true,
        }
    }

    /// The default options with a queue of `capacity` messages.
    pub fn queue(capacity: usize) -> Self {
        Self {
            delivery: Delivery::Queue { capacity },
            ..Self::default()
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
    /// The zenoh put failed.
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
    Transition(WireParts),
    Episode(WireParts),
}

/// One zenoh payload made of the parts, without copying them.
fn payload(parts: WireParts) -> ZBytes {
    let mut parts = parts.into_parts();
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default().into();
    }
    let mut w = ZBytes::writer();
    for p in parts {
        w.append(p.into());
    }
    w.finish()
}

/// The transition and episode publishers and the counters: used by the publisher thread, or by the caller
/// with [`Delivery::Caller`].
struct Lines {
    transition: zenoh::pubsub::Publisher<'static>,
    episode: zenoh::pubsub::Publisher<'static>,
    cells: Cells,
}

impl Lines {
    /// Puts one message (not when `closing`) and counts it as sent or failed; true when sent.
    fn put(&self, out: Outgoing, closing: bool) -> bool {
        let (ok, sent, failed) = match out {
            Outgoing::Transition(parts) => {
                let ok = !closing && send(&self.transition, payload(parts));
                (ok, &self.cells.t_sent, &self.cells.t_failed)
            }
            Outgoing::Episode(parts) => {
                let ok = !closing && send(&self.episode, payload(parts));
                (ok, &self.cells.e_sent, &self.cells.e_failed)
            }
        };
        (if ok { sent } else { failed }).fetch_add(1, Ordering::AcqRel);
        ok
    }
}

fn send(publisher: &zenoh::pubsub::Publisher<'_>, bytes: ZBytes) -> bool {
    match publisher.put(bytes).wait() {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(key = %publisher.key_expr(), "put failed: {e}");
            false
        }
    }
}

/// Publishes one robot's stream. Transitions and episodes go out as [`Delivery`] says (zenoh
/// `CongestionControl::Block`): through a bounded queue to a publisher thread, dropped and counted when it is
/// full, so a slow or vanished learner never stalls the caller; or put by the caller, whom a slow learner then
/// paces. Progress goes straight out with `CongestionControl::Drop`.
pub struct RobotPublisher {
    keys: Keys,
    progress: zenoh::pubsub::Publisher<'static>,
    lines: Arc<Lines>,
    /// The queue to the publisher thread; `None` with [`Delivery::Caller`] and once closing.
    tx: Option<SyncSender<Outgoing>>,
    caller_puts: bool,
    worker: Option<JoinHandle<()>>,
    closing: Arc<AtomicBool>,
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

/// What became of a transition or episode handed to the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Queued for the publisher thread ([`Delivery::Queue`]).
    Queued,
    /// Put by the caller's thread ([`Delivery::Caller`]).
    Sent,
    /// The queue was full (or the publisher is closing): the message was dropped and counted.
    Dropped,
    /// The put failed ([`Delivery::Caller`]; logged and counted).
    Failed,
}

impl Node {
    /// Declares the robot's publishers (and liveliness token) and, with [`Delivery::Queue`], starts the
    /// publisher thread.
    pub fn publisher(
        &self,
        keys: &Keys,
        options: PublisherOptions,
    ) -> Result<RobotPublisher, StreamError> {
        let s = self.session();
        let declare = |key: String, cc| {
            s.declare_publisher(key.clone())
                .congestion_control(cc)
                .wait()
                .map_err(zerr(format!("declaring a publisher on `{key}`")))
        };
        let progress = declare(keys.progress(), CongestionControl::Drop)?;
        let lines = Arc::new(Lines {
            transition: declare(keys.transition(), CongestionControl::Block)?,
            episode: declare(keys.episode(), CongestionControl::Block)?,
            cells: Cells::default(),
        });
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
        let closing = Arc::new(AtomicBool::new(false));
        let (tx, worker) = match options.delivery {
            Delivery::Caller => (None, None),
            Delivery::Queue { capacity } => {
                let (tx, rx) = sync_channel::<Outgoing>(capacity.max(1));
                let (lines, closing) = (lines.clone(), closing.clone());
                let worker = std::thread::Builder::new()
                    .name(format!("stagewise-pub-{}", keys.robot()))
                    .spawn(move || {
                        for out in rx {
                            lines.put(out, closing.load(Ordering::Acquire));
                        }
                    })
                    .map_err(|source| StreamError::Thread {
                        what: "publisher",
                        source,
                    })?;
                (Some(tx), Some(worker))
            }
        };
        Ok(RobotPublisher {
            keys: keys.clone(),
            progress,
            lines,
            caller_puts: tx.is_none(),
            tx,
            worker,
            closing,
            _alive: alive,
        })
    }
}

impl RobotPublisher {
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Publishes an encoded transition ([`Encoded::new`], which encodes it in parts: the images' buffers become
    /// parts of the zenoh payload instead of being copied; the bytes on the wire are those of `encode`) as
    /// [`Delivery`] says: queued for the publisher thread (a full queue drops and counts it), or put now by this
    /// thread.
    pub fn publish_transition(&self, msg: Encoded<TransitionMsg>) -> Published {
        self.publish(Outgoing::Transition(msg.into_parts()))
    }

    /// Publishes an encoded episode summary (same rules as transitions).
    pub fn publish_episode(&self, msg: Encoded<EpisodeMsg>) -> Published {
        self.publish(Outgoing::Episode(msg.into_parts()))
    }

    fn publish(&self, out: Outgoing) -> Published {
        let cells = &self.lines.cells;
        let (enqueued, dropped) = match out {
            Outgoing::Transition(_) => (&cells.t_enqueued, &cells.t_dropped),
            Outgoing::Episode(_) => (&cells.e_enqueued, &cells.e_dropped),
        };
        // Count first so that `queued` (enqueued - finished) never underflows in a snapshot.
        enqueued.fetch_add(1, Ordering::AcqRel);
        if self.caller_puts {
            return if self.lines.put(out, false) {
                Published::Sent
            } else {
                Published::Failed
            };
        }
        match self.tx.as_ref().map(|tx| tx.try_send(out)) {
            Some(Ok(())) => Published::Queued,
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                enqueued.fetch_sub(1, Ordering::AcqRel);
                dropped.fetch_add(1, Ordering::AcqRel);
                Published::Dropped
            }
        }
    }

    /// Puts an encoded progress message now, with `CongestionControl::Drop` (zenoh drops it rather than wait).
    pub fn publish_progress(&self, msg: Encoded<ProgressMsg>) -> Result<(), StreamError> {
        // The error text is built only on failure: this runs once per env step.
        let res = self
            .progress
            .put(payload(msg.into_parts()))
            .wait()
            .map_err(|e| zerr(format!("put on `{}`", self.keys.progress()))(e));
        let c = if res.is_ok() {
            &self.lines.cells.p_sent
        } else {
            &self.lines.cells.p_failed
        };
        c.fetch_add(1, Ordering::AcqRel);
        res
    }

    pub fn counters(&self) -> Counters {
        self.lines.cells.snapshot()
    }

    /// Waits until a subscriber matches the transition key (true) or `timeout` passes (false). Anything put
    /// before that is lost: zenoh does not store messages for subscribers that come later.
    pub fn wait_for_subscribers(&self, timeout: Duration) -> bool {
        wait_matching(&self.lines.transition, timeout)
    }

    /// Whether a subscriber matches the transition key now.
    pub fn has_subscribers(&self) -> bool {
        self.lines
            .transition
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
