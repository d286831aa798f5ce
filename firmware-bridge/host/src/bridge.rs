//! The async bridge: handshake, commands through the limiter, heartbeats, the telemetry watchdog, e-stop.

use crate::limits::{LimitError, LimitHit, LimitState, Limits};
use crate::transport::{Endpoint, Transport, TransportError};
use stagewise_protocol::{
    check_hello, encode_frame, Ack, AckStatus, Arm, Capabilities, Command, EStop, FirmwareState,
    FrameDecoder, HandshakeError, Heartbeat, Hello, Message, MessageKind, Role, Setpoint,
    StopReason, Telemetry, MAX_FRAME, PROTOCOL_VERSION,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

/// Bridge settings.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    pub limits: Limits,
    /// No telemetry for this long -> e-stop (reason `HostWatchdog`) and a latched [`HostFault::TelemetryTimeout`].
    pub watchdog: Duration,
    /// Heartbeat period (keeps the firmware's link watchdog fed when no commands flow).
    pub heartbeat: Duration,
    /// How long to wait for the firmware's answer to a `Hello`, an `Arm` or an `EStop` (per try).
    pub reply_timeout: Duration,
    /// Tries for a `Hello` or `Arm` (UDP may drop one).
    pub retries: u32,
    /// How many times an e-stop is sent (it is not retried on an answer; it is simply repeated).
    pub estop_repeats: u32,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            limits: Limits::cartesian_default(),
            watchdog: Duration::from_millis(200),
            heartbeat: Duration::from_millis(10),
            reply_timeout: Duration::from_millis(100),
            retries: 20,
            estop_repeats: 5,
        }
    }
}

/// A fault the host latched. Commands are refused until [`Bridge::arm`] clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFault {
    /// No telemetry within the watchdog time; an e-stop was sent.
    TelemetryTimeout { silent_for: Duration },
    /// [`Bridge::estop`] was called.
    EStop,
    /// The receive task ended (link I/O error).
    LinkDown,
}

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("link I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("handshake refused: {0}")]
    Handshake(HandshakeError),
    #[error("firmware at {endpoint} refused our protocol version {ours}: it speaks {theirs}")]
    FirmwareRefusedVersion {
        endpoint: String,
        ours: u16,
        theirs: u16,
    },
    #[error("no answer from the firmware at {endpoint} to {what} after {tries} tries")]
    NoAnswer {
        endpoint: String,
        what: &'static str,
        tries: u32,
    },
    #[error("the firmware refused {what}: {status:?}")]
    Refused {
        what: &'static str,
        status: AckStatus,
    },
    #[error("command refused by the host limits: {0}")]
    Limit(#[from] LimitError),
    #[error("the bridge has a latched fault ({0:?}): call arm() to clear it")]
    Faulted(HostFault),
    #[error("no telemetry yet")]
    NoTelemetry,
    #[error("no telemetry within {0:?}")]
    TelemetryTimeout(Duration),
    #[error("frame encoding failed: {0}")]
    Encode(stagewise_protocol::FrameError),
    #[error("the firmware has {firmware} joints, the host limits cover {host}")]
    JointMismatch { firmware: u8, host: usize },
}

/// The latest telemetry and when it arrived.
#[derive(Debug, Clone)]
pub struct TelemetrySample {
    pub telemetry: Telemetry,
    pub received: Instant,
}

/// Counters of the host side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeStats {
    pub commands_sent: u64,
    pub heartbeats_sent: u64,
    pub telemetry_received: u64,
    /// Telemetry older than (or equal to) the newest one seen: dropped.
    pub telemetry_stale: u64,
    pub bad_frames: u64,
    pub limit_hits: u64,
    pub watchdog_trips: u64,
}

struct Shared {
    fault: Mutex<Option<HostFault>>,
    stats: Mutex<BridgeStats>,
    limiter: Mutex<(LimitState, Option<Instant>)>,
    last_rx: Mutex<Instant>,
}

/// What [`Bridge::command`] sent.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandReport {
    pub seq: u32,
    /// The command's `time_us` (microseconds since the bridge connected).
    pub time_us: u64,
    pub sent: Setpoint,
    pub gripper: f32,
    /// Clamps applied by the host limits (empty when the command was within them).
    pub hits: Vec<LimitHit>,
}

/// An open session with a robot's firmware.
pub struct Bridge {
    endpoint: String,
    link: Arc<Transport>,
    cfg: BridgeConfig,
    firmware: Hello,
    session: u32,
    seq: Arc<AtomicU32>,
    ctl_seq: Arc<AtomicU32>,
    shared: Arc<Shared>,
    telemetry: watch::Receiver<Option<TelemetrySample>>,
    replies: broadcast::Sender<Message>,
    tasks: Vec<JoinHandle<()>>,
    started: Instant,
}

async fn send_msg(link: &Transport, msg: &Message) -> Result<(), BridgeError> {
    let mut buf = [0u8; MAX_FRAME];
    let n = encode_frame(msg, &mut buf).map_err(BridgeError::Encode)?;
    link.send(&buf[..n]).await?;
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Bridge {
    /// Opens `endpoint` and performs the handshake. Must be called inside a tokio runtime.
    pub async fn connect(endpoint: &Endpoint, cfg: BridgeConfig) -> Result<Self, BridgeError> {
        let link = Transport::open(endpoint).await?;
        Self::over(link, endpoint.to_string(), cfg).await
    }

    /// Performs the handshake over an open transport.
    pub async fn over(
        link: Transport,
        endpoint: String,
        cfg: BridgeConfig,
    ) -> Result<Self, BridgeError> {
        let link = Arc::new(link);
        let (tel_tx, tel_rx) = watch::channel(None);
        let (rep_tx, _) = broadcast::channel(256);
        let now = Instant::now();
        let shared = Arc::new(Shared {
            fault: Mutex::new(None),
            stats: Mutex::new(BridgeStats::default()),
            limiter: Mutex::new((LimitState::default(), None)),
            last_rx: Mutex::new(now),
        });
        let rx_task = tokio::spawn(rx_loop(
            link.clone(),
            tel_tx,
            rep_tx.clone(),
            shared.clone(),
        ));
        // Session id: time-based, distinct per connect.
        let session = (now.elapsed().as_nanos() as u32)
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u32)
                .unwrap_or(1))
            | 1;
        let hello = Hello {
            version: PROTOCOL_VERSION,
            role: Role::Host,
            session,
            capabilities: Capabilities(
                Capabilities::JOINT_POSITION | Capabilities::EE_VELOCITY | Capabilities::GRIPPER,
            ),
            n_joints: 0,
            control_hz: 0,
        };
        let mut replies = rep_tx.subscribe();
        let mut firmware = None;
        'tries: for _ in 0..cfg.retries.max(1) {
            send_msg(&link, &Message::Hello(hello)).await?;
            let deadline = tokio::time::Instant::now() + cfg.reply_timeout;
            loop {
                match tokio::time::timeout_at(deadline, replies.recv()).await {
                    Err(_) => break,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                    Ok(Err(broadcast::error::RecvError::Closed)) => break 'tries,
                    Ok(Ok(Message::Hello(h))) if h.role == Role::Firmware => {
                        if let Err(e) = check_hello(&h) {
                            rx_task.abort();
                            return Err(BridgeError::Handshake(e));
                        }
                        if h.session == session {
                            firmware = Some(h);
                            break 'tries;
                        }
                    }
                    Ok(Ok(Message::Ack(Ack {
                        kind: MessageKind::Hello,
                        status: AckStatus::VersionMismatch { ours },
                        ..
                    }))) => {
                        rx_task.abort();
                        return Err(BridgeError::FirmwareRefusedVersion {
                            endpoint,
                            ours: PROTOCOL_VERSION,
                            theirs: ours,
                        });
                    }
                    Ok(Ok(_)) => {}
                }
            }
        }
        let Some(firmware) = firmware else {
            rx_task.abort();
            return Err(BridgeError::NoAnswer {
                endpoint,
                what: "Hello",
                tries: cfg.retries.max(1),
            });
        };
        if firmware.capabilities.has(Capabilities::JOINT_POSITION)
            && usize::from(firmware.n_joints) != cfg.limits.pos_min.len()
        {
            rx_task.abort();
            return Err(BridgeError::JointMismatch {
                firmware: firmware.n_joints,
                host: cfg.limits.pos_min.len(),
            });
        }
        *lock(&shared.last_rx) = Instant::now();
        let seq = Arc::new(AtomicU32::new(0));
        let ctl_seq = Arc::new(AtomicU32::new(0));
        let started = Instant::now();
        let hb_task = tokio::spawn(heartbeat_loop(link.clone(), cfg.heartbeat, ctl_seq.clone()));
        let wd_task = tokio::spawn(watchdog_loop(
            link.clone(),
            shared.clone(),
            cfg.watchdog,
            ctl_seq.clone(),
            cfg.estop_repeats,
        ));
        Ok(Self {
            endpoint,
            link,
            cfg,
            firmware,
            session,
            seq,
            ctl_seq,
            shared,
            telemetry: tel_rx,
            replies: rep_tx,
            tasks: vec![rx_task, hb_task, wd_task],
            started,
        })
    }

    /// The firmware's `Hello`.
    pub fn firmware(&self) -> &Hello {
        &self.firmware
    }

    pub fn session(&self) -> u32 {
        self.session
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn config(&self) -> &BridgeConfig {
        &self.cfg
    }

    pub fn stats(&self) -> BridgeStats {
        *lock(&self.shared.stats)
    }

    /// The latched host fault, if any.
    pub fn fault(&self) -> Option<HostFault> {
        *lock(&self.shared.fault)
    }

    /// The newest telemetry.
    pub fn telemetry(&self) -> Option<TelemetrySample> {
        self.telemetry.borrow().clone()
    }

    /// Waits for telemetry newer than `after_seq` (firmware telemetry seq), at most `timeout`.
    pub async fn next_telemetry(
        &self,
        after_seq: u32,
        timeout: Duration,
    ) -> Result<TelemetrySample, BridgeError> {
        let mut rx = self.telemetry.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(s) = rx.borrow_and_update().clone() {
                if s.telemetry.seq > after_seq {
                    return Ok(s);
                }
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(BridgeError::TelemetryTimeout(timeout)),
            }
        }
    }

    /// Sends `Arm` until the firmware acknowledges it; clears the host fault and the limiter history. Each try
    /// first waits for fresh telemetry (the firmware refuses an arm from a host that has not seen its state
    /// since it stopped), and sets the command floor to the last command sent (older commands are never
    /// followed after the arm).
    pub async fn arm(&self) -> Result<(), BridgeError> {
        let mut replies = self.replies.subscribe();
        for _ in 0..self.cfg.retries.max(1) {
            let after = self.telemetry().map(|s| s.telemetry.seq).unwrap_or(0);
            let seen_telemetry = match self.next_telemetry(after, self.cfg.reply_timeout).await {
                Ok(s) => s.telemetry.seq,
                Err(_) => continue,
            };
            let seq = self.ctl_seq.fetch_add(1, Ordering::Relaxed) + 1;
            let arm = Arm {
                seq,
                seen_telemetry,
                command_floor: self.seq.load(Ordering::Relaxed),
            };
            send_msg(&self.link, &Message::Arm(arm)).await?;
            let deadline = tokio::time::Instant::now() + self.cfg.reply_timeout;
            loop {
                match tokio::time::timeout_at(deadline, replies.recv()).await {
                    Err(_) => break,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                    Ok(Err(broadcast::error::RecvError::Closed)) => {
                        return Err(BridgeError::Faulted(HostFault::LinkDown))
                    }
                    Ok(Ok(Message::Ack(a))) if a.kind == MessageKind::Arm && a.seq == seq => {
                        if a.status == AckStatus::StaleArm {
                            // Telemetry crossed a stop on the way: try again with newer telemetry.
                            break;
                        }
                        if a.status != AckStatus::Ok {
                            return Err(BridgeError::Refused {
                                what: "Arm",
                                status: a.status,
                            });
                        }
                        *lock(&self.shared.fault) = None;
                        *lock(&self.shared.last_rx) = Instant::now();
                        let mut l = lock(&self.shared.limiter);
                        l.0.reset();
                        l.1 = None;
                        return Ok(());
                    }
                    Ok(Ok(_)) => {}
                }
            }
        }
        Err(BridgeError::NoAnswer {
            endpoint: self.endpoint.clone(),
            what: "Arm",
            tries: self.cfg.retries.max(1),
        })
    }

    /// Emergency stop: sends `EStop` `estop_repeats` times and latches [`HostFault::EStop`] (commands are refused
    /// until [`Bridge::arm`]). Returns once the frames are sent.
    pub async fn estop(&self) -> Result<(), BridgeError> {
        *lock(&self.shared.fault) = Some(HostFault::EStop);
        send_estop(
            &self.link,
            &self.ctl_seq,
            StopReason::Operator,
            self.cfg.estop_repeats,
        )
        .await
    }

    /// Checks `setpoint` against the host limits and sends it with the next sequence number. Nothing is sent when
    /// the limits refuse it or the bridge has a latched fault.
    pub async fn command(
        &self,
        setpoint: &Setpoint,
        gripper: f32,
    ) -> Result<CommandReport, BridgeError> {
        if let Some(f) = self.fault() {
            return Err(BridgeError::Faulted(f));
        }
        let tel = self.telemetry();
        let (sent, g, hits) = {
            let mut l = lock(&self.shared.limiter);
            let now = Instant::now();
            let dt =
                l.1.map(|t| now.duration_since(t).as_secs_f32())
                    .unwrap_or(1e-3);
            let (state, last) = &mut *l;
            let r = self.cfg.limits.apply(
                state,
                setpoint,
                gripper,
                tel.as_ref().map(|s| &s.telemetry),
                dt,
            )?;
            *last = Some(now);
            r
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let time_us = self.started.elapsed().as_micros() as u64;
        let cmd = Command {
            seq,
            time_us,
            setpoint: sent.clone(),
            gripper: g,
        };
        send_msg(&self.link, &Message::Command(cmd)).await?;
        let mut st = lock(&self.shared.stats);
        st.commands_sent += 1;
        st.limit_hits += hits.len() as u64;
        Ok(CommandReport {
            seq,
            time_us,
            sent,
            gripper: g,
            hits,
        })
    }

    /// The sequence number of the last command sent.
    pub fn last_command_seq(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Stops the background tasks after a best-effort e-stop (reason `Shutdown`).
    pub async fn close(mut self) {
        let _ = send_estop(&self.link, &self.ctl_seq, StopReason::Shutdown, 1).await;
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

async fn send_estop(
    link: &Transport,
    ctl: &AtomicU32,
    reason: StopReason,
    repeats: u32,
) -> Result<(), BridgeError> {
    let mut last = Ok(());
    for _ in 0..repeats.max(1) {
        let seq = ctl.fetch_add(1, Ordering::Relaxed) + 1;
        last = send_msg(link, &Message::EStop(EStop { seq, reason })).await;
    }
    last
}

async fn rx_loop(
    link: Arc<Transport>,
    tel: watch::Sender<Option<TelemetrySample>>,
    replies: broadcast::Sender<Message>,
    shared: Arc<Shared>,
) {
    let mut dec = FrameDecoder::new();
    let mut buf = vec![0u8; 4096];
    let stream = link.is_stream();
    let mut newest: Option<u32> = None;
    loop {
        let n = match link.recv(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                // ECONNREFUSED on UDP (nothing listening yet) is transient; anything else ends the link.
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                tracing::warn!(error = %e, "bridge receive failed; link down");
                *lock(&shared.fault) = Some(HostFault::LinkDown);
                return;
            }
        };
        if !stream {
            dec.reset();
        }
        let mut msgs = Vec::new();
        dec.feed(&buf[..n], |r| msgs.push(r));
        if !stream && dec.pending() > 0 {
            lock(&shared.stats).bad_frames += 1;
            dec.reset();
        }
        for m in msgs {
            match m {
                Err(_) => lock(&shared.stats).bad_frames += 1,
                Ok(Message::Telemetry(t)) => {
                    // Reordered or duplicated telemetry must not roll the state back.
                    if newest.is_some_and(|s| t.seq <= s) {
                        lock(&shared.stats).telemetry_stale += 1;
                        continue;
                    }
                    newest = Some(t.seq);
                    let now = Instant::now();
                    *lock(&shared.last_rx) = now;
                    lock(&shared.stats).telemetry_received += 1;
                    tel.send_replace(Some(TelemetrySample {
                        telemetry: t,
                        received: now,
                    }));
                }
                Ok(other) => {
                    if let Message::Hello(_) = other {
                        // A new firmware session (reboot) restarts its telemetry numbering.
                        newest = None;
                    }
                    let _ = replies.send(other);
                }
            }
        }
    }
}

async fn heartbeat_loop(link: Arc<Transport>, every: Duration, ctl: Arc<AtomicU32>) {
    let mut iv = tokio::time::interval(every.max(Duration::from_millis(1)));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let t0 = Instant::now();
    loop {
        iv.tick().await;
        let seq = ctl.fetch_add(1, Ordering::Relaxed) + 1;
        let hb = Message::Heartbeat(Heartbeat {
            seq,
            time_us: t0.elapsed().as_micros() as u64,
        });
        let _ = send_msg(&link, &hb).await;
    }
}

async fn watchdog_loop(
    link: Arc<Transport>,
    shared: Arc<Shared>,
    timeout: Duration,
    ctl: Arc<AtomicU32>,
    repeats: u32,
) {
    let mut iv = tokio::time::interval((timeout / 4).max(Duration::from_millis(1)));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        iv.tick().await;
        let silent_for = lock(&shared.last_rx).elapsed();
        if silent_for > timeout && lock(&shared.fault).is_none() {
            *lock(&shared.fault) = Some(HostFault::TelemetryTimeout { silent_for });
            lock(&shared.stats).watchdog_trips += 1;
            tracing::warn!(?silent_for, "no telemetry: safe stop");
            let _ = send_estop(&link, &ctl, StopReason::HostWatchdog, repeats).await;
        }
    }
}

/// True when the firmware reports it will follow commands.
pub fn is_armed(t: &Telemetry) -> bool {
    t.state == FirmwareState::Armed
}
