//! [`Sink`]: where the actor's messages go, the episode log and the zenoh publisher as one. Each message is
//! encoded once ([`Encoded`]); the log appends its exact wire bytes under its key expression and the publisher
//! puts the same bytes (a transition's images as parts of the zenoh payload, not copied), so a replayed log is
//! the stream bit for bit. Either part may be absent; with neither, nothing is encoded.

use crate::log::EpisodeLog;
use crate::RuntimeError;
use stagewise_stream::{Counters, Keys, RobotPublisher};
use stagewise_wire::{Encoded, EpisodeMsg, Message, ProgressMsg, TransitionMsg};
use std::time::Duration;

/// The episode log and the publisher of one robot's stream (see the module doc).
pub struct Sink {
    keys: Keys,
    log: Option<EpisodeLog>,
    publisher: Option<RobotPublisher>,
}

impl Sink {
    /// A sink with neither a log nor a publisher yet: messages go nowhere (and are not encoded).
    pub fn new(keys: Keys) -> Self {
        Self {
            keys,
            log: None,
            publisher: None,
        }
    }

    pub fn with_log(mut self, log: EpisodeLog) -> Self {
        self.log = Some(log);
        self
    }

    pub fn with_publisher(mut self, publisher: RobotPublisher) -> Self {
        self.publisher = Some(publisher);
        self
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Logs and publishes a transition: through the publisher's bounded queue (drops are counted there) or put
    /// now, as its [`stagewise_stream::PublisherOptions`] say.
    pub fn transition(&mut self, msg: TransitionMsg) -> Result<(), RuntimeError> {
        if self.is_empty() {
            return Ok(());
        }
        let e = encode_and_log(&mut self.log, msg, self.keys.transition())?;
        if let Some(p) = self.publisher.as_ref() {
            p.publish_transition(e);
        }
        Ok(())
    }

    /// Logs and publishes a progress message; publishing is best-effort (dropped under congestion).
    pub fn progress(&mut self, msg: ProgressMsg) -> Result<(), RuntimeError> {
        if self.is_empty() {
            return Ok(());
        }
        let e = encode_and_log(&mut self.log, msg, self.keys.progress())?;
        if let Some(p) = self.publisher.as_ref() {
            if let Err(e) = p.publish_progress(e) {
                tracing::debug!(error = %stagewise_core::ErrorChain(&e), "progress message not sent");
            }
        }
        Ok(())
    }

    /// Logs and publishes an episode summary (same rules as transitions).
    pub fn episode(&mut self, msg: EpisodeMsg) -> Result<(), RuntimeError> {
        if self.is_empty() {
            return Ok(());
        }
        let e = encode_and_log(&mut self.log, msg, self.keys.episode())?;
        if let Some(p) = self.publisher.as_ref() {
            p.publish_episode(e);
        }
        Ok(())
    }

    /// An episode ended: the log is fsynced, so that a finished episode survives a crash.
    pub fn end_episode(&mut self) -> Result<(), RuntimeError> {
        match self.log.as_mut() {
            Some(log) => log.flush(),
            None => Ok(()),
        }
    }

    /// The run stops: the log is fsynced and the publisher's queue drained (waiting up to `timeout`), so no
    /// record is cut in half.
    pub fn finish(&mut self, timeout: Duration) -> Result<(), RuntimeError> {
        if let Some(log) = self.log.as_mut() {
            log.flush()?;
        }
        if let Some(p) = self.publisher.as_ref() {
            p.flush(timeout);
        }
        Ok(())
    }

    /// Waits until a subscriber matches the transition key (true), or `timeout` passes or there is no publisher
    /// (false).
    pub fn wait_for_subscribers(&self, timeout: Duration) -> bool {
        self.publisher
            .as_ref()
            .is_some_and(|p| p.wait_for_subscribers(timeout))
    }

    /// The publisher's counters (None without one).
    pub fn counters(&self) -> Option<Counters> {
        self.publisher.as_ref().map(RobotPublisher::counters)
    }

    /// Records in the log so far (0 without one).
    pub fn log_records(&self) -> u64 {
        self.log.as_ref().map_or(0, EpisodeLog::records)
    }

    /// Neither a log nor a publisher.
    pub fn is_empty(&self) -> bool {
        self.log.is_none() && self.publisher.is_none()
    }
}

/// Encodes `msg` once and appends its wire bytes to `log` under `key`, if there is a log.
fn encode_and_log<M: Message>(
    log: &mut Option<EpisodeLog>,
    msg: M,
    key: String,
) -> Result<Encoded<M>, RuntimeError> {
    let e = Encoded::new(msg).map_err(|source| RuntimeError::Encode {
        key: key.clone(),
        source,
    })?;
    if let Some(log) = log.as_mut() {
        log.append(&key, &e.contiguous())?;
    }
    Ok(e)
}
