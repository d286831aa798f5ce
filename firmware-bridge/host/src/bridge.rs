//! The async bridge: authenticated handshake and frames, commands through the limiter, heartbeats carrying the
//! actor's step counter, the telemetry watchdog, stops repeated until telemetry shows them, and the operator's
//! e-stop reset.

use crate::limits::{LimitError, LimitHit, LimitState, Limits};
use crate::transport::{Endpoint, Transport, TransportError};
use stagewise_protocol::{
    check_hello, Ack, AckStatus, Arm, Capabilities, Command, Direction, EStop, Faults,
    FirmwareState, FrameDecoder, HandshakeError, Heartbeat, Hello, LinkKey, Message, MessageKind,
    ReplayWindow, ResetEStop, Role, Sender, Setpoint, StopReason, Telemetry, MAX_FRAME,
    PROTOCOL_VERSION,
};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

/// Bridge settings.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The pre-shared link key (the firmware has the same one): every frame is authenticated with it.
    pub key: LinkKey,
    pub limits: Limits,
    /// No telemetry for this long -> a protective stop (reason `HostWatchdog`) and a latched
    /// [`HostFault::TelemetryTimeout`].
    pub watchdog: Duration,
    /// Heartbeat period (keeps the firmware's link watchdog fed when no commands flow; a pending stop is
    /// repeated at this period until telemetry shows it).
    pub heartbeat: Duration,
    /// How long to wait for the firmware's answer to a `Hello`, an `Arm`, an `EStop` or a `ResetEStop` (per try).
    pub reply_timeout: Duration,
    /// Tries for a `Hello`, `Arm` or `ResetEStop` (UDP may drop one).
    pub retries: u32,
    /// Stop frames sent at once when a stop is asked for (then repeated every heartbeat until acknowledged).
    pub estop_burst: u32,
}

impl BridgeConfig {
    /// The defaults (the emulated Cartesian robot's limits, 200 ms watchdog, 10 ms heartbeat) with `key`.
    pub fn new(key: LinkKey) -> Self {
        Self {
            key,
            limits: Limits::cartesian_default(),
            watchdog: Duration::from_millis(200),
            heartbeat: Duration::from_millis(10),
            reply_timeout: Duration::from_millis(100),
            retries: 20,
            estop_burst: 5,
        }
    }
}

/// A fault the host latched. Commands are refused while one is latched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostFault {
    /// No telemetry within the watchdog time; a protective stop was sent. Cleared by [`Bridge::arm`].
    TelemetryTimeout { silent_for: Duration },
    /// [`Bridge::estop`] was called. The firmware latches the e-stop: [`Bridge::arm`] succeeds only after an
    /// operator's [`Bridge::reset_estop`].
    EStop,
    /// The receive task ended (link I/O error).
    LinkDown,
    /// The firmware no longer knows this session (it rebooted, or another host opened a session after a stop),
    /// or refused it because another session is armed. Reconnect.
    SessionLost,
    /// Telemetry carried a value that is not finite (refused, not used): `field[index]` was `value`.
    /// Cleared by [`Bridge::arm`] (the firmware refuses to arm while its sensors read non-finite values).
    TelemetryNotFinite {
        field: &'static str,
        index: usize,
        value: f32,
    },
}

/// The firmware left `Armed` on its own after an [`Bridge::arm`] (seen in its telemetry): link loss, a stalled
/// actor, a sensor fault, a local disarm. Reported by [`Bridge::firmware_stop`] and logged as a warning;
/// commands are still sent (the firmware ignores them until the next arm, whose command floor drops them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirmwareStop {
    pub state: FirmwareState,
    pub faults: Faults,
    /// The telemetry that showed it.
    pub telemetry_seq: u32,
}

impl std::fmt::Display for FirmwareStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.faults.names().collect();
        write!(
            f,
            "the firmware is {:?} (faults {}; telemetry {})",
            self.state,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
            self.telemetry_seq
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("link I/O failed")]
    Io(#[from] std::io::Error),
    #[error("handshake refused: {0}")]
    Handshake(HandshakeError),
    #[error("firmware at {endpoint} refused our protocol version {ours}: it speaks {theirs}")]
    FirmwareRefusedVersion {
        endpoint: String,
        ours: u16,
        theirs: u16,
    },
    #[error(
        "no answer from the firmware at {endpoint} to {what} after {tries} tries (is it running, with the same link key? a firmware ignores frames it cannot authenticate)"
    )]
    NoAnswer {
        endpoint: String,
        what: &'static str,
        tries: u32,
    },
    #[error(
        "the firmware at {endpoint} answered with {frames} frames that do not verify with our link key (fingerprint {fingerprint}): the two ends have different keys"
    )]
    WrongKey {
        endpoint: String,
        frames: u64,
        fingerprint: String,
    },
    #[error(
        "the firmware at {endpoint} is armed by another session and refuses a new one until that one stops (link timeout, stop, e-stop)"
    )]
    SessionBusy { endpoint: String },
    #[error(
        "the robot at {endpoint} is e-stopped (latched): an operator clears it with `stagewise robot reset-estop --bridge {endpoint}`, then the next arm works"
    )]
    EStopLatched { endpoint: String },
    #[error(
        "an e-stop to {endpoint} is still being repeated (no telemetry has shown it yet): nothing is armed until it is acknowledged and an operator clears it with `stagewise robot reset-estop --bridge {endpoint}`"
    )]
    EStopPending { endpoint: String },
    #[error("the firmware refused {what}: {status:?}")]
    Refused {
        what: &'static str,
        status: AckStatus,
    },
    #[error("command refused by the host limits")]
    Limit(#[from] LimitError),
    #[error("the bridge has a latched fault ({0:?})")]
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
    /// Frames sent (every kind), and authentic frames of the session taken in (each counter at most once).
    pub frames_sent: u64,
    pub frames_received: u64,
    pub commands_sent: u64,
    pub heartbeats_sent: u64,
    pub telemetry_received: u64,
    /// Telemetry older than (or equal to) the newest one seen: dropped.
    pub telemetry_stale: u64,
    /// Telemetry with a non-finite value: refused.
    pub telemetry_not_finite: u64,
    /// Frames that failed COBS, CRC or decoding (noise).
    pub bad_frames: u64,
    /// Intact frames whose MAC did not verify (another key, a forgery).
    pub auth_failures: u64,
    /// Authentic frames of our session with a counter seen before (replays, duplicates).
    pub replays: u64,
    /// Authentic frames of another session, or handshake frames not for us.
    pub foreign_frames: u64,
    pub limit_hits: u64,
    pub watchdog_trips: u64,
    /// Stop frames sent (bursts and repeats).
    pub stop_frames: u64,
    /// Stops that telemetry has shown.
    pub stops_acknowledged: u64,
    /// Times the firmware left `Armed` on its own ([`FirmwareStop`]).
    pub firmware_stops: u64,
}

struct Shared {
    endpoint: String,
    fault: Mutex<Option<HostFault>>,
    stats: Mutex<BridgeStats>,
    limiter: Mutex<(LimitState, Option<Instant>)>,
    last_rx: Mutex<Instant>,
    /// The session id (0 until the firmware offered one).
    session: AtomicU32,
    /// `arm()` succeeded and, as far as the host knows, the firmware has not stopped since.
    armed: AtomicBool,
    /// Telemetry showed `Armed` since the last arm (so a later non-armed telemetry is a real stop).
    seen_armed: AtomicBool,
    /// The firmware refused a command issued after the last arm as not armed.
    not_armed_ack: AtomicBool,
    /// Command floor of the last arm.
    arm_floor: AtomicU32,
    firmware_stop: Mutex<Option<FirmwareStop>>,
    /// A stop not yet shown by telemetry: repeated with every heartbeat.
    stop_pending: Mutex<Option<StopReason>>,
    /// Commands the actor has made this session (carried by heartbeats).
    actor_step: AtomicU32,
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
    /// Seconds since the previous command, by the limiter's clock (`None`: the first since an arm); what
    /// [`Limits::apply`] integrated over (bounded as it documents).
    pub interval: Option<f32>,
}

/// The link and the sending half of its authentication (key, frame counter).
struct Link {
    transport: Transport,
    tx: Mutex<Sender>,
}

impl Link {
    async fn send(&self, session: u32, msg: &Message) -> Result<(), BridgeError> {
        let mut buf = [0u8; MAX_FRAME];
        let n = lock(&self.tx)
            .seal(session, msg, &mut buf)
            .map_err(BridgeError::Encode)?;
        self.transport.send(&buf[..n]).await?;
        Ok(())
    }

    /// Frames sealed so far.
    fn sent(&self) -> u64 {
        lock(&self.tx).next_counter() - 1
    }
}

/// An open session with a robot's firmware.
pub struct Bridge {
    endpoint: String,
    link: Arc<Link>,
    cfg: BridgeConfig,
    firmware: Hello,
    seq: Arc<AtomicU32>,
    ctl_seq: Arc<AtomicU32>,
    shared: Arc<Shared>,
    telemetry: watch::Receiver<Option<TelemetrySample>>,
    replies: broadcast::Sender<Message>,
    tasks: Vec<JoinHandle<()>>,
    started: Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// A random non-zero `u32` (the handshake nonce).
fn nonce() -> u32 {
    loop {
        let n: u32 = rand::random();
        if n != 0 {
            return n;
        }
    }
}

/// The `Hello` exchange: a `Hello` with a fresh nonce, retried `cfg.retries` times, until the firmware answers
/// with a session (or refuses: version, busy). On a refusal or no answer, `rx_task` is stopped.
async fn handshake(
    link: &Link,
    replies: &mut broadcast::Receiver<Message>,
    rx_task: &JoinHandle<()>,
    cfg: &BridgeConfig,
    endpoint: &str,
    shared: &Shared,
) -> Result<Hello, BridgeError> {
    let tries = cfg.retries.max(1);
    let nonce = nonce();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        role: Role::Host,
        nonce,
        session: 0,
        capabilities: Capabilities(
            Capabilities::JOINT_POSITION | Capabilities::EE_VELOCITY | Capabilities::GRIPPER,
        ),
        n_joints: 0,
        control_hz: 0,
    };
    let fail = |e: BridgeError| {
        rx_task.abort();
        Err(e)
    };
    let mut firmware = None;
    'tries: for _ in 0..tries {
        link.send(0, &Message::Hello(hello)).await?;
        let deadline = tokio::time::Instant::now() + cfg.reply_timeout;
        loop {
            match tokio::time::timeout_at(deadline, replies.recv()).await {
                Err(_) => break,
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(broadcast::error::RecvError::Closed)) => break 'tries,
                Ok(Ok(Message::Hello(h))) if h.role == Role::Firmware && h.nonce == nonce => {
                    if let Err(e) = check_hello(&h) {
                        return fail(BridgeError::Handshake(e));
                    }
                    if h.session != 0 {
                        firmware = Some(h);
                        break 'tries;
                    }
                }
                Ok(Ok(Message::Ack(Ack {
                    seq,
                    kind: MessageKind::Hello,
                    status,
                }))) if seq == nonce => match status {
                    AckStatus::VersionMismatch { ours } => {
                        return fail(BridgeError::FirmwareRefusedVersion {
                            endpoint: endpoint.to_string(),
                            ours: PROTOCOL_VERSION,
                            theirs: ours,
                        })
                    }
                    AckStatus::SessionBusy => {
                        return fail(BridgeError::SessionBusy {
                            endpoint: endpoint.to_string(),
                        })
                    }
                    _ => {}
                },
                Ok(Ok(_)) => {}
            }
        }
    }
    let Some(firmware) = firmware else {
        let forged = lock(&shared.stats).auth_failures;
        if forged > 0 {
            let fp = cfg.key.fingerprint_hex();
            return fail(BridgeError::WrongKey {
                endpoint: endpoint.to_string(),
                frames: forged,
                fingerprint: String::from_utf8_lossy(&fp).into_owned(),
            });
        }
        return fail(BridgeError::NoAnswer {
            endpoint: endpoint.to_string(),
            what: "Hello",
            tries,
        });
    };
    Ok(firmware)
}

/// The state the bridge's tasks share, before the handshake.
fn new_shared(endpoint: &str) -> Arc<Shared> {
    let now = Instant::now();
    Arc::new(Shared {
        endpoint: endpoint.to_string(),
        fault: Mutex::new(None),
        stats: Mutex::new(BridgeStats::default()),
        limiter: Mutex::new((LimitState::default(), None)),
        last_rx: Mutex::new(now),
        session: AtomicU32::new(0),
        armed: AtomicBool::new(false),
        seen_armed: AtomicBool::new(false),
        not_armed_ack: AtomicBool::new(false),
        arm_floor: AtomicU32::new(0),
        firmware_stop: Mutex::new(None),
        stop_pending: Mutex::new(None),
        actor_step: AtomicU32::new(0),
    })
}

impl Bridge {
    /// Opens `endpoint` and performs the handshake. Must be called inside a tokio runtime.
    pub async fn connect(endpoint: &Endpoint, cfg: BridgeConfig) -> Result<Self, BridgeError> {
        let link = Transport::open(endpoint).await?;
        Self::over(link, endpoint.to_string(), cfg).await
    }

    /// Performs the handshake over an open transport: a `Hello` with a fresh nonce (retried), the firmware's
    /// answer naming a session, then heartbeats of that session until its first telemetry arrives.
    pub async fn over(
        transport: Transport,
        endpoint: String,
        cfg: BridgeConfig,
    ) -> Result<Self, BridgeError> {
        let link = Arc::new(Link {
            transport,
            tx: Mutex::new(Sender::new(cfg.key.clone(), Direction::HostToFirmware)),
        });
        let (tel_tx, tel_rx) = watch::channel(None);
        let (rep_tx, _) = broadcast::channel(256);
        let shared = new_shared(&endpoint);
        let mut replies = rep_tx.subscribe();
        let rx_task = tokio::spawn(rx_loop(
            link.clone(),
            cfg.key.clone(),
            tel_tx,
            rep_tx.clone(),
            shared.clone(),
        ));
        let tries = cfg.retries.max(1);
        let firmware = handshake(&link, &mut replies, &rx_task, &cfg, &endpoint, &shared).await?;
        if firmware.capabilities.has(Capabilities::JOINT_POSITION)
            && usize::from(firmware.n_joints) != cfg.limits.pos_min.len()
        {
            rx_task.abort();
            return Err(BridgeError::JointMismatch {
                firmware: firmware.n_joints,
                host: cfg.limits.pos_min.len(),
            });
        }
        shared.session.store(firmware.session, Ordering::SeqCst);
        *lock(&shared.last_rx) = Instant::now();
        let seq = Arc::new(AtomicU32::new(0));
        let ctl_seq = Arc::new(AtomicU32::new(0));
        let started = Instant::now();
        let hb_task = tokio::spawn(heartbeat_loop(
            link.clone(),
            shared.clone(),
            cfg.heartbeat,
            ctl_seq.clone(),
        ));
        let wd_task = tokio::spawn(watchdog_loop(
            link.clone(),
            shared.clone(),
            cfg.watchdog,
            ctl_seq.clone(),
            cfg.estop_burst,
        ));
        let bridge = Self {
            endpoint,
            link,
            cfg,
            firmware,
            seq,
            ctl_seq,
            shared,
            telemetry: tel_rx,
            replies: rep_tx,
            tasks: vec![rx_task, hb_task, wd_task],
            started,
        };
        // The first heartbeat opens the session; its first telemetry confirms it.
        bridge.first_telemetry(tries).await?;
        Ok(bridge)
    }

    /// Waits for the session's first telemetry: the first heartbeat opens the session, its first telemetry
    /// confirms it.
    async fn first_telemetry(&self, tries: u32) -> Result<(), BridgeError> {
        let wait = self.cfg.reply_timeout * tries;
        let deadline = Instant::now() + wait;
        loop {
            if self
                .next_telemetry(0, Duration::from_millis(20))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if self.fault() == Some(HostFault::SessionLost) {
                return Err(BridgeError::SessionBusy {
                    endpoint: self.endpoint.clone(),
                });
            }
            if Instant::now() > deadline {
                return Err(BridgeError::NoAnswer {
                    endpoint: self.endpoint.clone(),
                    what: "the first telemetry of the session",
                    tries,
                });
            }
        }
    }

    /// The firmware's `Hello`.
    pub fn firmware(&self) -> &Hello {
        &self.firmware
    }

    /// The session id the firmware gave this bridge.
    pub fn session(&self) -> u32 {
        self.shared.session.load(Ordering::SeqCst)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn config(&self) -> &BridgeConfig {
        &self.cfg
    }

    pub fn stats(&self) -> BridgeStats {
        let mut s = *lock(&self.shared.stats);
        s.frames_sent = self.link.sent();
        s
    }

    /// The latched host fault, if any.
    pub fn fault(&self) -> Option<HostFault> {
        *lock(&self.shared.fault)
    }

    /// Set when the firmware left `Armed` on its own since the last [`Bridge::arm`] (cleared by the next one).
    pub fn firmware_stop(&self) -> Option<FirmwareStop> {
        *lock(&self.shared.firmware_stop)
    }

    /// A stop that no telemetry has shown yet (it is repeated with every heartbeat until one does).
    pub fn stop_pending(&self) -> Option<StopReason> {
        *lock(&self.shared.stop_pending)
    }

    /// The actor step counter the heartbeats carry (advanced by every [`Bridge::command`]).
    pub fn actor_step(&self) -> u32 {
        self.shared.actor_step.load(Ordering::Relaxed)
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

    /// Sends `msg` (built with a fresh control seq) until the firmware acknowledges it; each try first waits for
    /// fresh telemetry (the firmware refuses an arm or reset from a host that has not seen its state since it
    /// stopped). Returns the final status (`StaleArm` is retried).
    async fn request(
        &self,
        what: &'static str,
        kind: MessageKind,
        build: impl Fn(u32, u32) -> Message,
    ) -> Result<AckStatus, BridgeError> {
        let mut replies = self.replies.subscribe();
        for _ in 0..self.cfg.retries.max(1) {
            if let Some(f @ (HostFault::SessionLost | HostFault::LinkDown)) = self.fault() {
                return Err(BridgeError::Faulted(f));
            }
            let after = self.telemetry().map(|s| s.telemetry.seq).unwrap_or(0);
            let seen_telemetry = match self.next_telemetry(after, self.cfg.reply_timeout).await {
                Ok(s) => s.telemetry.seq,
                Err(_) => continue,
            };
            let seq = self.ctl_seq.fetch_add(1, Ordering::Relaxed) + 1;
            self.link
                .send(self.session(), &build(seq, seen_telemetry))
                .await?;
            let deadline = tokio::time::Instant::now() + self.cfg.reply_timeout;
            loop {
                match tokio::time::timeout_at(deadline, replies.recv()).await {
                    Err(_) => break,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                    Ok(Err(broadcast::error::RecvError::Closed)) => {
                        return Err(BridgeError::Faulted(HostFault::LinkDown))
                    }
                    Ok(Ok(Message::Ack(a))) if a.kind == kind && a.seq == seq => {
                        if a.status == AckStatus::StaleArm {
                            // Telemetry crossed a stop on the way: try again with newer telemetry.
                            break;
                        }
                        return Ok(a.status);
                    }
                    Ok(Ok(_)) => {}
                }
            }
        }
        Err(BridgeError::NoAnswer {
            endpoint: self.endpoint.clone(),
            what,
            tries: self.cfg.retries.max(1),
        })
    }

    /// Sends `Arm` until the firmware acknowledges it; clears a host fault and the limiter history. Each try
    /// first waits for fresh telemetry, and sets the command floor to the last command sent (older commands are
    /// never followed after the arm). A latched e-stop is refused ([`BridgeError::EStopLatched`]): only
    /// [`Bridge::reset_estop`] clears it, and an e-stop still being repeated refuses the arm here.
    pub async fn arm(&self) -> Result<(), BridgeError> {
        if self.stop_pending() == Some(StopReason::Operator)
            && !self.wait_stop_acknowledged(self.cfg.reply_timeout).await
        {
            return Err(BridgeError::EStopPending {
                endpoint: self.endpoint.clone(),
            });
        }
        let floor = self.seq.load(Ordering::Relaxed);
        let status = self
            .request("Arm", MessageKind::Arm, |seq, seen_telemetry| {
                Message::Arm(Arm {
                    seq,
                    seen_telemetry,
                    command_floor: floor,
                })
            })
            .await?;
        match status {
            AckStatus::Ok => {}
            AckStatus::EStopLatched => {
                return Err(BridgeError::EStopLatched {
                    endpoint: self.endpoint.clone(),
                })
            }
            status => {
                return Err(BridgeError::Refused {
                    what: "Arm",
                    status,
                })
            }
        }
        {
            // A protective stop still pending (watchdog, shutdown) is moot now: the firmware is armed again.
            let mut p = lock(&self.shared.stop_pending);
            if *p != Some(StopReason::Operator) {
                *p = None;
            }
        }
        *lock(&self.shared.fault) = None;
        *lock(&self.shared.firmware_stop) = None;
        *lock(&self.shared.last_rx) = Instant::now();
        self.shared.arm_floor.store(floor, Ordering::SeqCst);
        self.shared.seen_armed.store(false, Ordering::SeqCst);
        self.shared.not_armed_ack.store(false, Ordering::SeqCst);
        self.shared.armed.store(true, Ordering::SeqCst);
        let mut l = lock(&self.shared.limiter);
        l.0.reset();
        l.1 = None;
        Ok(())
    }

    /// The operator's e-stop reset: sends `ResetEStop` until the firmware acknowledges it (`EStopped` ->
    /// `Disarmed`; nothing moves until an [`Bridge::arm`]). Also ends a pending e-stop repetition of this bridge.
    /// Never called by [`crate::RobotEnv`]: clearing an e-stop is an explicit operator action
    /// (`stagewise robot reset-estop`).
    pub async fn reset_estop(&self) -> Result<(), BridgeError> {
        *lock(&self.shared.stop_pending) = None;
        let status = self
            .request(
                "ResetEStop",
                MessageKind::ResetEStop,
                |seq, seen_telemetry| {
                    Message::ResetEStop(ResetEStop {
                        seq,
                        seen_telemetry,
                    })
                },
            )
            .await?;
        if status != AckStatus::Ok {
            return Err(BridgeError::Refused {
                what: "ResetEStop",
                status,
            });
        }
        let mut f = lock(&self.shared.fault);
        if *f == Some(HostFault::EStop) {
            *f = None;
        }
        Ok(())
    }

    /// Emergency stop: latches [`HostFault::EStop`] (commands are refused), sends `EStop{Operator}`
    /// `estop_burst` times, and keeps repeating it with every heartbeat until telemetry shows `EStopped`
    /// ([`Bridge::stop_pending`]). The firmware latches it until an operator's [`Bridge::reset_estop`].
    /// Returns once the burst is sent.
    pub async fn estop(&self) -> Result<(), BridgeError> {
        *lock(&self.shared.fault) = Some(HostFault::EStop);
        self.stop(StopReason::Operator).await
    }

    /// Asks for a stop with `reason` (an operator e-stop, or a protective stop: `HostWatchdog`/`Shutdown`,
    /// which the firmware clears with an arm): a burst now, repeated with every heartbeat until telemetry shows
    /// it. An operator e-stop already pending is never downgraded.
    pub async fn stop(&self, reason: StopReason) -> Result<(), BridgeError> {
        request_stop(&self.shared, reason);
        self.shared.armed.store(false, Ordering::SeqCst);
        let reason = self.stop_pending().unwrap_or(reason);
        send_stops(
            &self.link,
            &self.shared,
            &self.ctl_seq,
            reason,
            self.cfg.estop_burst,
        )
        .await
    }

    /// Waits until telemetry has shown the pending stop (at most `timeout`); true when it has.
    pub async fn wait_stop_acknowledged(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.stop_pending().is_some() {
            if Instant::now() > deadline {
                return false;
            }
            let _ = self
                .next_telemetry(
                    self.telemetry().map(|s| s.telemetry.seq).unwrap_or(0),
                    Duration::from_millis(5),
                )
                .await;
        }
        true
    }

    /// Checks `setpoint` against the host limits and sends it with the next sequence number (and advances the
    /// actor step counter the heartbeats carry). Nothing is sent when the limits refuse it or the bridge has a
    /// latched fault.
    pub async fn command(
        &self,
        setpoint: &Setpoint,
        gripper: f32,
    ) -> Result<CommandReport, BridgeError> {
        if let Some(f) = self.fault() {
            return Err(BridgeError::Faulted(f));
        }
        let tel = self.telemetry();
        let (sent, g, hits, interval) = {
            let mut l = lock(&self.shared.limiter);
            let now = Instant::now();
            let dt = l.1.map(|t| now.duration_since(t).as_secs_f32());
            let (state, last) = &mut *l;
            let r = self.cfg.limits.apply(
                state,
                setpoint,
                gripper,
                tel.as_ref().map(|s| &s.telemetry),
                dt,
            )?;
            *last = Some(now);
            (r.0, r.1, r.2, dt)
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.shared.actor_step.fetch_add(1, Ordering::Relaxed);
        let time_us = self.started.elapsed().as_micros() as u64;
        let cmd = Command {
            seq,
            time_us,
            setpoint: sent.clone(),
            gripper: g,
        };
        self.link
            .send(self.session(), &Message::Command(cmd))
            .await?;
        let mut st = lock(&self.shared.stats);
        st.commands_sent += 1;
        st.limit_hits += hits.len() as u64;
        Ok(CommandReport {
            seq,
            time_us,
            sent,
            gripper: g,
            hits,
            interval,
        })
    }

    /// The sequence number of the last command sent.
    pub fn last_command_seq(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }

    /// A protective stop (reason `Shutdown`; waits up to `reply_timeout` for telemetry to show it), then stops
    /// the background tasks. Returns the final counters.
    pub async fn close(mut self) -> BridgeStats {
        if self.stop(StopReason::Shutdown).await.is_ok() {
            self.wait_stop_acknowledged(self.cfg.reply_timeout).await;
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.stats()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

/// Records a stop to repeat until acknowledged; an operator e-stop is never replaced by a protective stop.
fn request_stop(shared: &Shared, reason: StopReason) {
    let mut p = lock(&shared.stop_pending);
    if *p != Some(StopReason::Operator) {
        *p = Some(reason);
    }
}

async fn send_stops(
    link: &Link,
    shared: &Shared,
    ctl: &AtomicU32,
    reason: StopReason,
    repeats: u32,
) -> Result<(), BridgeError> {
    let mut last = Ok(());
    let session = shared.session.load(Ordering::SeqCst);
    for _ in 0..repeats.max(1) {
        let seq = ctl.fetch_add(1, Ordering::Relaxed) + 1;
        last = link
            .send(session, &Message::EStop(EStop { seq, reason }))
            .await;
        lock(&shared.stats).stop_frames += 1;
    }
    last
}

/// The first non-finite value of a telemetry frame, by field.
fn non_finite(t: &Telemetry) -> Option<(&'static str, usize, f32)> {
    let fields: [(&'static str, &[f32]); 5] = [
        ("positions", &t.positions),
        ("velocities", &t.velocities),
        ("efforts", &t.efforts),
        ("ee", &t.ee),
        ("gripper", std::slice::from_ref(&t.gripper)),
    ];
    for (name, values) in fields {
        if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Some((name, i, *v));
        }
    }
    None
}

fn latch(shared: &Shared, fault: HostFault) {
    let mut f = lock(&shared.fault);
    if f.is_none() {
        *f = Some(fault);
    }
}

fn on_telemetry(shared: &Shared, t: &Telemetry) {
    if shared.armed.load(Ordering::SeqCst) {
        if t.state == FirmwareState::Armed {
            shared.seen_armed.store(true, Ordering::SeqCst);
        } else if shared.seen_armed.load(Ordering::SeqCst)
            || shared.not_armed_ack.load(Ordering::SeqCst)
        {
            shared.armed.store(false, Ordering::SeqCst);
            let stop = FirmwareStop {
                state: t.state,
                faults: t.faults,
                telemetry_seq: t.seq,
            };
            lock(&shared.stats).firmware_stops += 1;
            tracing::warn!(endpoint = %shared.endpoint, "the firmware left Armed on its own: {stop}");
            *lock(&shared.firmware_stop) = Some(stop);
        }
    }
    let mut pending = lock(&shared.stop_pending);
    let shown = match *pending {
        Some(StopReason::Operator) => t.state == FirmwareState::EStopped,
        Some(_) => t.state != FirmwareState::Armed,
        None => false,
    };
    if shown {
        *pending = None;
        lock(&shared.stats).stops_acknowledged += 1;
    }
}

async fn rx_loop(
    link: Arc<Link>,
    key: LinkKey,
    tel: watch::Sender<Option<TelemetrySample>>,
    replies: broadcast::Sender<Message>,
    shared: Arc<Shared>,
) {
    let mut dec = FrameDecoder::new(key, Direction::FirmwareToHost);
    let mut buf = vec![0u8; 4096];
    let stream = link.transport.is_stream();
    let mut newest: Option<u32> = None;
    let mut window = ReplayWindow::new();
    let mut window_session = 0u32;
    loop {
        let n = match link.transport.recv(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                // ECONNREFUSED on UDP (nothing listening yet) is transient; anything else ends the link.
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                tracing::warn!(error = %stagewise_core::ErrorChain(&e), "bridge receive failed; link down");
                *lock(&shared.fault) = Some(HostFault::LinkDown);
                return;
            }
        };
        if !stream {
            dec.reset();
        }
        let mut frames = Vec::new();
        dec.feed(&buf[..n], |r| frames.push(r));
        if !stream && dec.pending() > 0 {
            lock(&shared.stats).bad_frames += 1;
            dec.reset();
        }
        for r in frames {
            let f = match r {
                Ok(f) => f,
                Err(e) if e.is_auth() => {
                    lock(&shared.stats).auth_failures += 1;
                    continue;
                }
                Err(_) => {
                    lock(&shared.stats).bad_frames += 1;
                    continue;
                }
            };
            let session = shared.session.load(Ordering::SeqCst);
            if f.header.session == 0 {
                // Handshake frames: answers to our Hello, or the firmware telling us our session is gone.
                match &f.message {
                    Message::Hello(h) if h.role == Role::Firmware => {
                        let _ = replies.send(f.message);
                    }
                    Message::Ack(a) if a.kind == MessageKind::Hello => {
                        let _ = replies.send(f.message);
                    }
                    Message::Ack(a)
                        if session != 0
                            && a.seq == session
                            && matches!(
                                a.status,
                                AckStatus::NoSession | AckStatus::SessionBusy
                            ) =>
                    {
                        if lock(&shared.fault).is_none() {
                            tracing::warn!(
                                endpoint = %shared.endpoint,
                                status = ?a.status,
                                "the firmware no longer accepts this session"
                            );
                        }
                        latch(&shared, HostFault::SessionLost);
                        shared.armed.store(false, Ordering::SeqCst);
                    }
                    _ => lock(&shared.stats).foreign_frames += 1,
                }
                continue;
            }
            if session == 0 || f.header.session != session {
                lock(&shared.stats).foreign_frames += 1;
                continue;
            }
            if window_session != session {
                window = ReplayWindow::new();
                window_session = session;
                newest = None;
            }
            if !window.accept(f.header.counter) {
                lock(&shared.stats).replays += 1;
                continue;
            }
            lock(&shared.stats).frames_received += 1;
            match f.message {
                Message::Telemetry(t) => {
                    if let Some((field, index, value)) = non_finite(&t) {
                        lock(&shared.stats).telemetry_not_finite += 1;
                        if lock(&shared.fault).is_none() {
                            tracing::warn!(
                                endpoint = %shared.endpoint,
                                "telemetry {} refused: {field}[{index}] is {value}",
                                t.seq
                            );
                        }
                        latch(
                            &shared,
                            HostFault::TelemetryNotFinite {
                                field,
                                index,
                                value,
                            },
                        );
                        continue;
                    }
                    // Reordered or duplicated telemetry must not roll the state back.
                    if newest.is_some_and(|s| t.seq <= s) {
                        lock(&shared.stats).telemetry_stale += 1;
                        continue;
                    }
                    newest = Some(t.seq);
                    let now = Instant::now();
                    *lock(&shared.last_rx) = now;
                    lock(&shared.stats).telemetry_received += 1;
                    on_telemetry(&shared, &t);
                    tel.send_replace(Some(TelemetrySample {
                        telemetry: t,
                        received: now,
                    }));
                }
                Message::Ack(a) => {
                    if a.kind == MessageKind::Command
                        && a.status == AckStatus::NotArmed
                        && shared.armed.load(Ordering::SeqCst)
                        && a.seq > shared.arm_floor.load(Ordering::SeqCst)
                    {
                        // A command issued after the arm met a firmware that is not armed.
                        shared.not_armed_ack.store(true, Ordering::SeqCst);
                    }
                    let _ = replies.send(Message::Ack(a));
                }
                other => {
                    let _ = replies.send(other);
                }
            }
        }
    }
}

/// Heartbeats (with the actor's step counter) every `every`; a pending stop is repeated first.
async fn heartbeat_loop(
    link: Arc<Link>,
    shared: Arc<Shared>,
    every: Duration,
    ctl: Arc<AtomicU32>,
) {
    let mut iv = tokio::time::interval(every.max(Duration::from_millis(1)));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let t0 = Instant::now();
    loop {
        iv.tick().await;
        let pending = *lock(&shared.stop_pending);
        if let Some(reason) = pending {
            let _ = send_stops(&link, &shared, &ctl, reason, 1).await;
        }
        let seq = ctl.fetch_add(1, Ordering::Relaxed) + 1;
        let hb = Message::Heartbeat(Heartbeat {
            seq,
            time_us: t0.elapsed().as_micros() as u64,
            actor_step: shared.actor_step.load(Ordering::Relaxed),
        });
        let session = shared.session.load(Ordering::SeqCst);
        if link.send(session, &hb).await.is_ok() {
            lock(&shared.stats).heartbeats_sent += 1;
        }
    }
}

async fn watchdog_loop(
    link: Arc<Link>,
    shared: Arc<Shared>,
    timeout: Duration,
    ctl: Arc<AtomicU32>,
    burst: u32,
) {
    let mut iv = tokio::time::interval((timeout / 4).max(Duration::from_millis(1)));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        iv.tick().await;
        let silent_for = lock(&shared.last_rx).elapsed();
        if silent_for > timeout && lock(&shared.fault).is_none() {
            *lock(&shared.fault) = Some(HostFault::TelemetryTimeout { silent_for });
            lock(&shared.stats).watchdog_trips += 1;
            shared.armed.store(false, Ordering::SeqCst);
            tracing::warn!(?silent_for, "no telemetry: protective stop");
            request_stop(&shared, StopReason::HostWatchdog);
            let reason = lock(&shared.stop_pending).unwrap_or(StopReason::HostWatchdog);
            let _ = send_stops(&link, &shared, &ctl, reason, burst).await;
        }
    }
}

/// True when the firmware reports it will follow commands.
pub fn is_armed(t: &Telemetry) -> bool {
    t.state == FirmwareState::Armed
}
