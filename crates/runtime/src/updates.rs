//! Policy updates off the control thread. zenoh's callback hands each policy message (already refused when it
//! is over the size limit, before it is copied) to a bounded queue ([`PolicyIntake`]); a full queue drops the
//! message and counts it. One worker thread decodes, hashes, verifies and loads each message through the
//! [`PolicyGate`] and passes finished [`OnnxPolicy`] objects (or the reason for a refusal) to the actor
//! ([`PolicyUpdates`]), which only installs them: the swap itself happens at each env's next episode start.

use crate::policy::{OnnxPolicy, PolicyError, PolicyGate};
use stagewise_model::OrtRuntime;
use stagewise_stream::PolicyPayload;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// Counts kept by the intake (written on zenoh's threads, read by the actor).
#[derive(Debug, Default)]
struct IntakeCounters {
    /// Messages dropped because the queue was full.
    dropped: AtomicU64,
    /// Messages refused for their size before being read.
    oversized: AtomicU64,
    /// Size of the last oversized message.
    last_oversized_len: AtomicU64,
}

/// The sending end: cheap to clone, never blocks (called from zenoh's callback threads).
#[derive(Clone)]
pub struct PolicyIntake {
    tx: SyncSender<Vec<u8>>,
    max_bytes: usize,
    counters: Arc<IntakeCounters>,
}

impl PolicyIntake {
    /// Queues a message for checking. Oversized messages are counted and forgotten; when the queue is full the
    /// message is dropped and counted.
    pub fn offer(&self, payload: PolicyPayload) {
        match payload {
            PolicyPayload::Oversized { len, .. } => self.oversized(len),
            PolicyPayload::Bytes(bytes) if bytes.len() > self.max_bytes => {
                self.oversized(bytes.len())
            }
            PolicyPayload::Bytes(bytes) => match self.tx.try_send(bytes) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                Err(TrySendError::Full(_)) => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
    }

    fn oversized(&self, len: usize) {
        self.counters
            .last_oversized_len
            .store(len as u64, Ordering::Relaxed);
        self.counters.oversized.fetch_add(1, Ordering::Relaxed);
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

/// What the actor polls each step: checked policies (or why they were refused), and the intake's counts.
pub struct PolicyUpdates {
    results: Receiver<Result<OnnxPolicy, PolicyError>>,
    counters: Arc<IntakeCounters>,
    queue: usize,
    max_bytes: usize,
    seen_dropped: u64,
    seen_oversized: u64,
}

/// One poll's worth of news.
#[derive(Default)]
pub struct Polled {
    pub results: Vec<Result<OnnxPolicy, PolicyError>>,
    /// Messages refused for their size since the last poll, and the size of the last one.
    pub oversized: u64,
    pub last_oversized_len: u64,
    /// Messages dropped on a full queue since the last poll.
    pub dropped: u64,
}

impl PolicyUpdates {
    /// Starts the checking worker (thread `policy-check`) with a queue of `queue` messages.
    pub fn spawn(
        gate: PolicyGate,
        runtime: &'static OrtRuntime,
        queue: usize,
    ) -> std::io::Result<(PolicyIntake, PolicyUpdates)> {
        let (intake, inbox, mut updates) = Self::bounded(gate.config().max_bytes, queue);
        let (out_tx, out_rx) = sync_channel(queue.max(1));
        updates.results = out_rx;
        let mut gate = gate;
        std::thread::Builder::new()
            .name("policy-check".into())
            .spawn(move || {
                // Ends when the intake (zenoh's subscription) or the actor goes.
                for bytes in inbox {
                    let result = gate.admit_bytes(&bytes, runtime);
                    drop(bytes);
                    if out_tx.send(result).is_err() {
                        break;
                    }
                }
            })?;
        Ok((intake, updates))
    }

    /// The queue alone, without a worker (tests; `spawn` builds on it).
    fn bounded(max_bytes: usize, queue: usize) -> (PolicyIntake, Receiver<Vec<u8>>, Self) {
        let (tx, rx) = sync_channel(queue.max(1));
        let counters = Arc::new(IntakeCounters::default());
        let (_, empty) = sync_channel(0);
        (
            PolicyIntake {
                tx,
                max_bytes,
                counters: counters.clone(),
            },
            rx,
            Self {
                results: empty,
                counters,
                queue: queue.max(1),
                max_bytes,
                seen_dropped: 0,
                seen_oversized: 0,
            },
        )
    }

    /// Everything that arrived since the last poll; never blocks.
    pub fn poll(&mut self) -> Polled {
        let mut polled = Polled::default();
        while let Ok(r) = self.results.try_recv() {
            polled.results.push(r);
        }
        let dropped = self.counters.dropped.load(Ordering::Relaxed);
        let oversized = self.counters.oversized.load(Ordering::Relaxed);
        polled.dropped = dropped - self.seen_dropped;
        polled.oversized = oversized - self.seen_oversized;
        polled.last_oversized_len = self.counters.last_oversized_len.load(Ordering::Relaxed);
        self.seen_dropped = dropped;
        self.seen_oversized = oversized;
        polled
    }

    /// The queue's capacity (for messages).
    pub fn queue(&self) -> usize {
        self.queue
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_and_oversized_messages_are_not_queued() {
        let (intake, inbox, mut updates) = PolicyUpdates::bounded(100, 2);
        for i in 0..5u8 {
            intake.offer(PolicyPayload::Bytes(vec![i; 10]));
        }
        intake.offer(PolicyPayload::Oversized {
            len: 5000,
            max: 100,
        });
        intake.offer(PolicyPayload::Bytes(vec![0; 101]));
        let p = updates.poll();
        assert_eq!((p.dropped, p.oversized, p.last_oversized_len), (3, 2, 101));
        let queued: Vec<Vec<u8>> = inbox.try_iter().collect();
        assert_eq!(queued, vec![vec![0; 10], vec![1; 10]]);
        // Counts are reported once.
        let p = updates.poll();
        assert_eq!((p.dropped, p.oversized), (0, 0));
    }
}
