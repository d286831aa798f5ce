//! The firmware emulator: the no_std [`Firmware`] core on a host thread, talking UDP, with any [`Plant`] —
//! normally an [`EnvPlant`] around the simulator, so the whole stack runs against "a robot" on one machine.
//!
//! Every frame is authenticated with the configured [`LinkKey`] (the core refuses the rest); the session's
//! peer is the address whose frame opened the session, and frames of the session from any other address are
//! dropped (counted in [`EmulatorLog::foreign_datagrams`]) before the core sees them. Telemetry goes to the peer.
//!
//! Timing: a control tick every `1 / control_hz` seconds on a deadline schedule (late ticks catch up). The
//! firmware clock is `ticks * period`, like a microcontroller's tick timer; frames that arrive between two ticks
//! are handled at once with the current firmware time, and telemetry leaves after each tick.

use std::format;
use std::prelude::rust_2021::*;

use crate::scene::SceneShared;
use crate::{Counters, Drive, Firmware, FirmwareConfig, Outgoing, Plant, PlantState};
use stagewise_core::{Env, EnvError, Observation};
use stagewise_protocol::{
    Command, Direction, FirmwareState, FrameDecoder, LinkKey, Message, MAX_FRAME,
};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Errors of the emulator.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("cannot bind the emulator's UDP socket to {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("UDP socket setup failed")]
    Socket(#[source] std::io::Error),
    #[error("the plant environment failed")]
    Plant(#[from] EnvError),
    #[error("cannot build the simulator plant")]
    Sim(#[source] stagewise_sim::ConfigError),
    #[error("the emulator thread panicked")]
    Panicked,
}

/// A link loss the firmware detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkLoss {
    /// Firmware time of the last valid frame before the loss.
    pub last_rx_us: u64,
    /// Firmware time of the tick that switched to `Hold`.
    pub detected_us: u64,
    /// The configured link timeout.
    pub timeout_us: u64,
    pub period_us: u64,
    /// The same in wall-clock time on this host: microseconds from (arrival of the last valid frame + timeout)
    /// to the end of the tick that switched to `Hold` (includes host scheduling delays of the emulator thread).
    pub wall_late_us: i64,
}

impl LinkLoss {
    /// Control periods between the watchdog deadline (`last_rx + timeout`) and the hold.
    pub fn periods_late(&self) -> f64 {
        (self.detected_us as f64 - (self.last_rx_us + self.timeout_us) as f64)
            / self.period_us.max(1) as f64
    }
}

/// What the emulator saw and did; tests read it to check the safety properties.
#[derive(Debug, Clone, Default)]
pub struct EmulatorLog {
    /// Every command the firmware accepted (acted on), in order.
    pub accepted: Vec<Command>,
    pub link_losses: Vec<LinkLoss>,
    /// Holds for a stalled actor: (firmware time the actor's step counter last advanced, firmware time of the
    /// tick that held).
    pub stalls: Vec<(u64, u64)>,
    /// Sessions opened: (firmware time, the firmware's state just before the frame that opened it).
    pub sessions_opened: Vec<(u64, FirmwareState)>,
    /// Firmware state changes, on a message or a tick: (firmware time, new state).
    pub states: Vec<(u64, FirmwareState)>,
    /// Ticks in which the plant moved although the firmware was not armed.
    pub moved_while_not_armed: u64,
    /// Largest joint displacement of one such tick.
    pub max_unarmed_step: f32,
    pub datagrams: u64,
    /// Frames of the session from an address other than the session's peer (dropped before the core).
    pub foreign_datagrams: u64,
    /// Largest tool-tip speed (norm of the first three joints' per-tick displacement / dt) while driving, m/s.
    /// Per-tick finite differences: meaningful for plants that move every tick (the kinematic plant).
    pub max_speed: f32,
    /// Largest change of that velocity between two driven ticks, m/s^2 (same caveat).
    pub max_accel: f32,
    pub counters: Counters,
    /// Ticks that started more than one period late (host scheduling).
    pub late_ticks: u64,
    pub send_errors: u64,
}

/// Emulator settings.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    pub firmware: FirmwareConfig,
    /// Where to listen, e.g. `127.0.0.1:0`.
    pub bind: SocketAddr,
    /// Keep the full list of accepted commands (tests); off keeps memory flat for long runs.
    pub record_commands: bool,
    /// The pre-shared link key every frame is authenticated with.
    pub key: LinkKey,
}

/// Something done to the running emulator from outside (tests, fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// A local disarm (an enable switch, a drive fault): `Armed` -> `Disarmed`.
    Disarm,
    /// A firmware reboot: a new core (`Idle`, no session, fresh boot entropy; a latched e-stop is lost with the
    /// RAM, as on a microcontroller).
    Reboot,
}

/// 16 bytes of boot entropy from the host (std's randomly keyed hasher, mixed with the time and a counter).
pub fn boot_entropy() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    static DRAWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut out = [0u8; 16];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(DRAWS.fetch_add(1, Ordering::Relaxed));
        h.write_usize(i);
        if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(d.as_nanos());
        }
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

/// A running emulator thread.
pub struct Emulator {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<EmulatorLog>>,
    controls: Arc<Mutex<Vec<Control>>>,
    thread: Option<JoinHandle<()>>,
}

impl Emulator {
    /// Binds the socket and starts the control loop on its own thread.
    pub fn spawn<P: Plant + Send + 'static>(
        cfg: EmulatorConfig,
        plant: P,
    ) -> Result<Self, EmulatorError> {
        let socket = UdpSocket::bind(cfg.bind).map_err(|source| EmulatorError::Bind {
            addr: cfg.bind,
            source,
        })?;
        let addr = socket.local_addr().map_err(EmulatorError::Socket)?;
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(EmulatorLog::default()));
        let controls = Arc::new(Mutex::new(Vec::new()));
        let (s, l, c) = (stop.clone(), log.clone(), controls.clone());
        let thread = std::thread::Builder::new()
            .name("stagewise-emulator".into())
            .spawn(move || run(socket, cfg, plant, &s, &l, &c))
            .map_err(EmulatorError::Socket)?;
        Ok(Self {
            addr,
            stop,
            log,
            controls,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Applies `c` at the next control tick.
    pub fn control(&self, c: Control) {
        match self.controls.lock() {
            Ok(mut g) => g.push(c),
            Err(p) => p.into_inner().push(c),
        }
    }

    /// A snapshot of the log so far.
    pub fn log(&self) -> EmulatorLog {
        match self.log.lock() {
            Ok(l) => l.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// True while the control loop runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the loop and returns the final log.
    pub fn stop(mut self) -> Result<EmulatorLog, EmulatorError> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| EmulatorError::Panicked)?;
        }
        Ok(self.log())
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Loop<'a, P> {
    fw: Firmware,
    key: LinkKey,
    firmware_cfg: FirmwareConfig,
    plant: P,
    socket: UdpSocket,
    peer: Option<SocketAddr>,
    decoder: FrameDecoder,
    log: &'a Mutex<EmulatorLog>,
    controls: &'a Mutex<Vec<Control>>,
    local: EmulatorLog,
    record: bool,
    /// Wall-clock arrival of the last frame that fed the firmware's link watchdog.
    last_rx_wall: Instant,
    /// Tool-tip velocity of the previous tick (None: it was not driven).
    prev_vel: Option<[f32; 3]>,
    /// Counters of the firmware lifetimes before the last reboot.
    rebooted: Counters,
    /// The state last written to the log.
    last_state: FirmwareState,
}

impl<P: Plant> Loop<'_, P> {
    fn send(&mut self, out: &Outgoing, to: SocketAddr) {
        let mut buf = [0u8; MAX_FRAME];
        match self.fw.seal(out, &mut buf) {
            Ok(n) => {
                if self.socket.send_to(&buf[..n], to).is_err() {
                    self.local.send_errors += 1;
                }
            }
            Err(_) => self.local.send_errors += 1,
        }
    }

    fn datagram(&mut self, bytes: &[u8], from: SocketAddr, now_us: u64) {
        self.local.datagrams += 1;
        self.decoder.reset();
        let mut frames = Vec::new();
        self.decoder.feed(bytes, |r| frames.push(r));
        if self.decoder.pending() > 0 {
            // A datagram must end on a delimiter; the unfinished tail is a malformed frame.
            self.fw.bad_frame();
            self.decoder.reset();
        }
        for r in frames {
            if let Ok(f) = &r {
                let s = f.header.session;
                if s != 0 && s == self.fw.session() && self.peer != Some(from) {
                    // The session belongs to its peer's address.
                    self.local.foreign_datagrams += 1;
                    continue;
                }
            }
            let command = match &r {
                Ok(f) => match &f.message {
                    Message::Command(c) => Some(c.clone()),
                    _ => None,
                },
                Err(_) => None,
            };
            let state_before = self.fw.state();
            let h = self.fw.receive(r, now_us);
            if h.opened {
                self.local.sessions_opened.push((now_us, state_before));
            }
            self.note_state(now_us);
            // The firmware stamps `last_rx_us = now_us` exactly when a frame of the session feeds its watchdog.
            if self.fw.last_rx_us() == now_us {
                self.last_rx_wall = Instant::now();
            }
            if h.opened {
                self.peer = Some(from);
            }
            if h.accepted {
                if let Some(c) = command {
                    self.plant.command_accepted();
                    if self.record {
                        self.local.accepted.push(c);
                    }
                }
            }
            if let Some(r) = h.reply {
                self.send(&r, from);
            }
        }
    }

    /// Logs a state change since the last one logged.
    fn note_state(&mut self, now_us: u64) {
        let s = self.fw.state();
        if s != self.last_state {
            self.last_state = s;
            self.local.states.push((now_us, s));
        }
    }

    fn apply_controls(&mut self) {
        let pending: Vec<Control> = match self.controls.lock() {
            Ok(mut g) => g.drain(..).collect(),
            Err(p) => p.into_inner().drain(..).collect(),
        };
        for c in pending {
            match c {
                Control::Disarm => self.fw.local_disarm(),
                Control::Reboot => {
                    // The counters live on in the log (cumulative), the state does not.
                    let before = self.fw.counters();
                    self.rebooted = add_counters(self.rebooted, before);
                    self.fw =
                        Firmware::new(self.firmware_cfg.clone(), self.key.clone(), boot_entropy());
                    self.peer = None;
                }
            }
        }
    }

    fn tick(&mut self, now_us: u64) {
        self.apply_controls();
        self.note_state(now_us);
        let last_rx = self.fw.last_rx_us();
        let losses = self.fw.counters().link_losses;
        let stalls = self.fw.counters().actor_stalls;
        let progress = self.fw.last_progress_us();
        let mut probe = PlantState::default();
        self.plant.read(&mut probe);
        let tel = self.fw.tick(now_us, &mut self.plant);
        let after = self.fw.state();
        self.note_state(now_us);
        if self.fw.counters().actor_stalls > stalls {
            self.local.stalls.push((progress, now_us));
        }
        if self.fw.counters().link_losses > losses {
            let cfg = self.fw.config();
            let deadline = self.last_rx_wall + Duration::from_micros(cfg.link_timeout_us);
            let now = Instant::now();
            let wall_late_us = if now >= deadline {
                now.duration_since(deadline).as_micros() as i64
            } else {
                -(deadline.duration_since(now).as_micros() as i64)
            };
            self.local.link_losses.push(LinkLoss {
                last_rx_us: last_rx,
                detected_us: now_us,
                timeout_us: cfg.link_timeout_us,
                period_us: cfg.period_us(),
                wall_late_us,
            });
        }
        let dt = self.fw.config().period_us() as f32 * 1e-6;
        let now_pos = &self.fw.plant_state().positions;
        if self.fw.driving() && probe.positions.len() >= 3 && now_pos.len() >= 3 {
            let v = [
                (now_pos[0] - probe.positions[0]) / dt,
                (now_pos[1] - probe.positions[1]) / dt,
                (now_pos[2] - probe.positions[2]) / dt,
            ];
            let speed = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
            self.local.max_speed = self.local.max_speed.max(speed);
            if let Some(p) = self.prev_vel {
                let d = [v[0] - p[0], v[1] - p[1], v[2] - p[2]];
                let acc = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt() / dt;
                self.local.max_accel = self.local.max_accel.max(acc);
            }
            self.prev_vel = Some(v);
        } else {
            self.prev_vel = None;
        }
        if after != FirmwareState::Armed {
            let moved = probe
                .positions
                .iter()
                .zip(self.fw.plant_state().positions.iter())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            if moved > 1e-6 {
                self.local.moved_while_not_armed += 1;
                self.local.max_unarmed_step = self.local.max_unarmed_step.max(moved);
            }
        }
        if let (Some(t), Some(peer)) = (tel, self.peer) {
            let mut buf = [0u8; MAX_FRAME];
            match self.fw.seal_telemetry(t, &mut buf) {
                Ok(n) => {
                    if self.socket.send_to(&buf[..n], peer).is_err() {
                        self.local.send_errors += 1;
                    }
                }
                Err(_) => self.local.send_errors += 1,
            }
        }
    }

    fn publish(&mut self) {
        self.local.counters = add_counters(self.rebooted, self.fw.counters());
        let mut g = match self.log.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        // Move the accumulated vectors over; keep the scalars cumulative.
        g.accepted.append(&mut self.local.accepted);
        g.link_losses.append(&mut self.local.link_losses);
        g.stalls.append(&mut self.local.stalls);
        g.sessions_opened.append(&mut self.local.sessions_opened);
        g.states.append(&mut self.local.states);
        g.moved_while_not_armed = self.local.moved_while_not_armed;
        g.max_unarmed_step = self.local.max_unarmed_step;
        g.datagrams = self.local.datagrams;
        g.foreign_datagrams = self.local.foreign_datagrams;
        g.max_speed = self.local.max_speed;
        g.max_accel = self.local.max_accel;
        g.counters = self.local.counters;
        g.late_ticks = self.local.late_ticks;
        g.send_errors = self.local.send_errors;
    }
}

/// Counters of two firmware lifetimes (before and after a reboot), added.
fn add_counters(a: Counters, b: Counters) -> Counters {
    Counters {
        ticks: a.ticks + b.ticks,
        frames: a.frames + b.frames,
        frames_sent: a.frames_sent + b.frames_sent,
        accepted_commands: a.accepted_commands + b.accepted_commands,
        stale_commands: a.stale_commands + b.stale_commands,
        not_armed_commands: a.not_armed_commands + b.not_armed_commands,
        bad_frames: a.bad_frames + b.bad_frames,
        auth_failures: a.auth_failures + b.auth_failures,
        replays: a.replays + b.replays,
        foreign_sessions: a.foreign_sessions + b.foreign_sessions,
        takeovers_refused: a.takeovers_refused + b.takeovers_refused,
        sessions: a.sessions + b.sessions,
        link_losses: a.link_losses + b.link_losses,
        actor_stalls: a.actor_stalls + b.actor_stalls,
        sensor_faults: a.sensor_faults + b.sensor_faults,
        estops: a.estops + b.estops,
        estop_resets: a.estop_resets + b.estop_resets,
        protective_stops: a.protective_stops + b.protective_stops,
        local_disarms: a.local_disarms + b.local_disarms,
        version_refusals: a.version_refusals + b.version_refusals,
    }
}

fn run<P: Plant>(
    socket: UdpSocket,
    cfg: EmulatorConfig,
    plant: P,
    stop: &AtomicBool,
    log: &Mutex<EmulatorLog>,
    controls: &Mutex<Vec<Control>>,
) {
    let period_us = cfg.firmware.period_us();
    let period = Duration::from_micros(period_us);
    let mut lp = Loop {
        fw: Firmware::new(cfg.firmware.clone(), cfg.key.clone(), boot_entropy()),
        firmware_cfg: cfg.firmware,
        decoder: FrameDecoder::new(cfg.key.clone(), Direction::HostToFirmware),
        key: cfg.key,
        plant,
        socket,
        peer: None,
        log,
        controls,
        local: EmulatorLog::default(),
        record: cfg.record_commands,
        last_rx_wall: Instant::now(),
        prev_vel: None,
        rebooted: Counters::default(),
        last_state: FirmwareState::Idle,
    };
    let start = Instant::now();
    let mut k: u64 = 0;
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let deadline = start + Duration::from_micros((k + 1) * period_us);
        let now_us = k * period_us;
        // Drain what is queued first, even when this tick is late: a microcontroller's receive interrupt keeps
        // running while its main loop catches up, so a host-side stall must not look like a silent link.
        if lp.socket.set_nonblocking(true).is_ok() {
            while let Ok((n, from)) = lp.socket.recv_from(&mut buf) {
                let bytes = buf[..n].to_vec();
                lp.datagram(&bytes, from, now_us);
            }
            let _ = lp.socket.set_nonblocking(false);
        }
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let wait = (deadline - now).max(Duration::from_micros(20));
            if lp.socket.set_read_timeout(Some(wait)).is_err() {
                break;
            }
            match lp.socket.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let bytes = buf[..n].to_vec();
                    lp.datagram(&bytes, from, now_us);
                }
                Err(_) => break,
            }
        }
        if Instant::now() > deadline + period {
            lp.local.late_ticks += 1;
        }
        k += 1;
        lp.tick(k * period_us);
        // Every tick: a snapshot lags the firmware by at most one period.
        lp.publish();
    }
    lp.publish();
}

/// Runs any core [`Env`] whose action is `[vx, vy, vz, gripper]` (fractions of `max_speed`, gripper -1 closed ..
/// +1 open) and whose state starts `[x, y, z, gripper_width, ...]` as a plant — the simulator's layout.
/// The env steps at its own `control_hz` (the firmware usually ticks faster): the commanded velocity is averaged
/// over the ticks of one env step (a zero-order hold of the mean, so the displacement is the integral of what the
/// firmware commanded). When an episode ends the env is reset with the next seed.
///
/// `Drive::Hold` (disarmed, link lost, e-stopped, no fresh command) brakes everything: no motion, and the
/// gripper stays at its current opening (it does not chase a target nobody has commanded yet).
///
/// With [`EnvPlant::with_scene`], every observation (its camera frames and the state the robot does not report
/// itself) is published to a [`SceneShared`] for the scene channel, and scene resets requested there are applied
/// at the next control tick. After a scene reset the plant holds still (as if braked; the command still in force
/// from the previous episode does not move the new scene) until the firmware accepts a new command.
pub struct EnvPlant<E> {
    env: E,
    seed: u64,
    episodes: u64,
    ticks_per_step: u32,
    tick: u32,
    max_speed: f32,
    max_width: f32,
    acc: [f32; 3],
    state: Vec<f32>,
    prev: [f32; 3],
    vel: [f32; 3],
    errors: u64,
    steps: u64,
    /// After a scene reset: hold still until the firmware accepts a new command.
    braked: bool,
    scene: Option<Arc<SceneShared>>,
    initial: Option<Observation>,
    /// The seed of the plant's current episode and the env steps it has taken (for [`PlantOutcome`]).
    episode_seed: u64,
    episode_steps: u64,
    outcomes: Vec<PlantOutcome>,
}

/// How many [`PlantOutcome`]s an [`EnvPlant`] keeps in memory.
pub const MAX_OUTCOMES: usize = 10_000;

/// How one of the plant env's episodes ended: the simulator's own success and failure, which a real robot does
/// not report. For evaluation only (`stagewise emulator` logs each one, so a robot run's task success can be
/// counted against the same policy's success in simulation); nothing of it reaches the host or a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlantOutcome {
    /// The seed the episode was reset with (a scene reset's, or the plant's own after an episode ended).
    pub seed: u64,
    pub success: bool,
    /// Terminated (success or failure) rather than replaced by a scene reset before it ended.
    pub terminated: bool,
    /// Env steps the episode took.
    pub steps: u64,
}

impl<E: Env> EnvPlant<E> {
    /// Resets `env` with `seed` and wraps it. `firmware_hz` is the firmware's control rate.
    pub fn new(
        mut env: E,
        firmware_hz: u16,
        max_speed: f32,
        max_width: f32,
        seed: u64,
    ) -> Result<Self, EnvError> {
        let obs = env.reset(seed)?;
        if obs.state.len() < 4 || env.spec().action.len() != 4 {
            return Err(EnvError::backend(
                "emulator plant",
                format!(
                    "EnvPlant needs state [x, y, z, gripper_width, ..] and action [vx, vy, vz, gripper]; got {} state and {} action values",
                    obs.state.len(),
                    env.spec().action.len()
                ),
            ));
        }
        let env_hz = env.spec().control_hz.max(1e-3);
        let ticks_per_step = ((f64::from(firmware_hz) / env_hz).round() as u32).max(1);
        let prev = [obs.state[0], obs.state[1], obs.state[2]];
        Ok(Self {
            state: obs.state.clone(),
            initial: Some(obs),
            steps: 0,
            braked: false,
            scene: None,
            env,
            seed,
            episodes: 0,
            ticks_per_step,
            tick: 0,
            max_speed,
            max_width,
            acc: [0.0; 3],
            prev,
            vel: [0.0; 3],
            errors: 0,
            episode_seed: seed,
            episode_steps: 0,
            outcomes: Vec::new(),
        })
    }

    pub fn env(&self) -> &E {
        &self.env
    }

    /// Episodes the plant went through (resets after termination or truncation).
    pub fn episodes(&self) -> u64 {
        self.episodes
    }

    /// Env errors swallowed (the plant then holds).
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// The episodes that ended so far (terminated, or cut short by a scene reset after at least one step), oldest
    /// first; a long-running emulator keeps the last [`MAX_OUTCOMES`] (every one is also logged).
    pub fn outcomes(&self) -> &[PlantOutcome] {
        &self.outcomes
    }

    fn episode_ended(&mut self, success: bool, terminated: bool) {
        let o = PlantOutcome {
            seed: self.episode_seed,
            success,
            terminated,
            steps: self.episode_steps,
        };
        tracing::info!(
            seed = o.seed,
            success = o.success,
            terminated = o.terminated,
            steps = o.steps,
            "plant episode ended"
        );
        if self.outcomes.len() >= MAX_OUTCOMES {
            self.outcomes.drain(..MAX_OUTCOMES / 2);
        }
        self.outcomes.push(o);
    }

    /// Publishes observations to `scene` (the current one at once) and applies its reset requests.
    pub fn with_scene(mut self, scene: Arc<SceneShared>) -> Self {
        if let Some(obs) = self.initial.take() {
            scene.publish(self.steps, &obs);
        }
        self.scene = Some(scene);
        self
    }

    fn observed(&mut self, obs: Observation) {
        self.state.clear();
        self.state.extend_from_slice(&obs.state);
        if let Some(s) = &self.scene {
            s.publish(self.steps, &obs);
        }
    }

    /// A scene reset requested over the scene channel: a new episode of the env with `seed`, at rest.
    fn scene_reset(&mut self, seed: u64) {
        if self.episode_steps > 0 {
            self.episode_ended(false, false);
        }
        let result = self.env.reset(seed);
        let error = match result {
            Ok(obs) => {
                self.episode_seed = seed;
                self.episode_steps = 0;
                self.observed(obs);
                self.prev = [self.state[0], self.state[1], self.state[2]];
                self.vel = [0.0; 3];
                self.acc = [0.0; 3];
                self.tick = 0;
                self.braked = true;
                None
            }
            Err(e) => {
                self.errors += 1;
                Some(format!(
                    "the plant env refused reset({seed}): {}",
                    stagewise_core::ErrorChain(&e)
                ))
            }
        };
        if let Some(s) = &self.scene {
            s.reset_applied(error);
        }
    }
}

impl<E: Env> Plant for EnvPlant<E> {
    fn apply(&mut self, drive: &Drive, gripper: f32, dt: f32) {
        if let Some(seed) = self.scene.as_ref().and_then(|s| s.take_reset()) {
            self.scene_reset(seed);
        }
        let drive = if self.braked { &Drive::Hold } else { drive };
        let v = match drive {
            Drive::Hold => [0.0; 3],
            Drive::EeVelocity(v) => *v,
            Drive::Joints(q) => {
                // Joints are x, y, z: the rate-limited goal becomes the velocity that reaches it this tick.
                let mut v = [0.0; 3];
                for (i, t) in q.iter().take(3).enumerate() {
                    v[i] = (t - self.state[i]) / dt.max(1e-6);
                }
                v
            }
        };
        for (a, v) in self.acc.iter_mut().zip(v) {
            *a += v;
        }
        self.tick += 1;
        if self.tick < self.ticks_per_step {
            return;
        }
        let n = self.tick as f32;
        self.tick = 0;
        let mut action = [0.0f32; 4];
        for (a, acc) in action.iter_mut().zip(self.acc) {
            *a = (acc / n / self.max_speed).clamp(-1.0, 1.0);
        }
        self.acc = [0.0; 3];
        let g = match drive {
            Drive::Hold => self.state[3] / self.max_width,
            _ => gripper,
        };
        action[3] = (g.clamp(0.0, 1.0) * 2.0 - 1.0).clamp(-1.0, 1.0);
        let env_dt = dt * n;
        self.prev = [self.state[0], self.state[1], self.state[2]];
        match self.env.step(&action) {
            Ok(r) => {
                self.steps += 1;
                self.episode_steps += 1;
                self.observed(r.obs);
                if r.terminated || r.truncated {
                    self.episode_ended(r.info.success, r.terminated);
                    self.episodes += 1;
                    self.episode_seed = self.seed.wrapping_add(self.episodes);
                    self.episode_steps = 0;
                    if let Ok(obs) = self.env.reset(self.episode_seed) {
                        self.observed(obs);
                    } else {
                        self.errors += 1;
                    }
                }
            }
            Err(_) => self.errors += 1,
        }
        for i in 0..3 {
            self.vel[i] = (self.state[i] - self.prev[i]) / env_dt.max(1e-6);
        }
    }

    /// Releases the brake of a scene reset, and starts the plant's step period at this command: the robot
    /// was put down at rest, and its first step integrates the new episode's first command only.
    fn command_accepted(&mut self) {
        if self.braked {
            self.braked = false;
            self.tick = 0;
            self.acc = [0.0; 3];
        }
    }

    fn read(&mut self, out: &mut PlantState) {
        out.positions.clear();
        out.velocities.clear();
        out.efforts.clear();
        for i in 0..3 {
            let _ = out.positions.push(self.state[i]);
            let _ = out.velocities.push(self.vel[i]);
            let _ = out.efforts.push(0.0);
        }
        out.ee = [self.state[0], self.state[1], self.state[2]];
        out.gripper = (self.state[3] / self.max_width).clamp(0.0, 1.0);
    }
}

/// The simulator as a plant: a headless [`stagewise_sim::SimEnv`] for `task` (50 Hz physics control, episodes
/// never truncated by time), wrapped in an [`EnvPlant`].
pub fn sim_plant(
    task: stagewise_sim::Task,
    firmware_hz: u16,
    seed: u64,
) -> Result<EnvPlant<stagewise_sim::SimEnv>, EmulatorError> {
    sim_plant_with(stagewise_sim::SimConfig::headless(task), firmware_hz, seed)
}

/// The simulator as a plant with any configuration (e.g. rendering cameras for the scene channel: the same
/// `SimConfig` as a simulator run renders the same frames). Episodes are never truncated by time.
pub fn sim_plant_with(
    mut cfg: stagewise_sim::SimConfig,
    firmware_hz: u16,
    seed: u64,
) -> Result<EnvPlant<stagewise_sim::SimEnv>, EmulatorError> {
    cfg.max_steps = u64::MAX;
    let env = stagewise_sim::SimEnv::new(cfg).map_err(EmulatorError::Sim)?;
    Ok(EnvPlant::new(
        env,
        firmware_hz,
        stagewise_sim::world::MAX_SPEED,
        stagewise_sim::world::MAX_WIDTH,
        seed,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewise_core::{BoxSpec, EnvSpec, StepInfo, StepResult};

    /// An env whose episode with seed `s` terminates after `s % 10` steps, successfully when `s` is even.
    struct Countdown {
        spec: EnvSpec,
        seed: u64,
        step: u64,
    }

    impl Countdown {
        fn new() -> Self {
            let b = |n: usize| BoxSpec {
                names: (0..n).map(|i| format!("x{i}")).collect(),
                low: vec![-1.0; n],
                high: vec![1.0; n],
            };
            let spec = EnvSpec {
                task: "countdown".into(),
                action: b(4),
                state: b(4),
                views: Vec::new(),
                stage_names: Vec::new(),
                control_hz: 50.0,
                max_steps: u64::MAX,
            };
            Self {
                spec,
                seed: 0,
                step: 0,
            }
        }
        fn obs(&self) -> Observation {
            Observation {
                step: self.step,
                time: 0.0,
                views: Vec::new(),
                state: vec![0.0, 0.0, 0.1, 0.05],
            }
        }
    }

    impl Env for Countdown {
        fn spec(&self) -> &EnvSpec {
            &self.spec
        }
        fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
            self.seed = seed;
            self.step = 0;
            Ok(self.obs())
        }
        fn step(&mut self, _: &[f32]) -> Result<StepResult, EnvError> {
            self.step += 1;
            let terminated = self.step >= self.seed % 10;
            let success = terminated && self.seed.is_multiple_of(2);
            Ok(StepResult {
                obs: self.obs(),
                reward: 0.0,
                terminated,
                truncated: false,
                info: StepInfo {
                    success,
                    ..StepInfo::default()
                },
            })
        }
    }

    #[test]
    fn the_plant_records_how_each_episode_ended() {
        // firmware at the env's rate: one env step per tick.
        let mut plant = EnvPlant::new(Countdown::new(), 50, 1.0, 0.1, 4).expect("plant");
        let go = Drive::EeVelocity([0.0; 3]);
        for _ in 0..4 {
            plant.apply(&go, 0.0, 0.02);
        }
        // seed 4 ended after 4 steps (success); the plant went on with seed 5 on its own, 2 steps in.
        for _ in 0..2 {
            plant.apply(&go, 0.0, 0.02);
        }
        // A scene reset (the host's next episode) cuts seed 5 short; seed 12 then ends after 2 steps (success).
        plant.scene_reset(12);
        for _ in 0..2 {
            plant.apply(&go, 0.0, 0.02);
        }
        let got: Vec<_> = plant
            .outcomes()
            .iter()
            .map(|o| (o.seed, o.success, o.terminated, o.steps))
            .collect();
        assert_eq!(
            got,
            vec![
                (4, true, true, 4),
                (5, false, false, 2),
                (12, true, true, 2)
            ]
        );
    }
}
