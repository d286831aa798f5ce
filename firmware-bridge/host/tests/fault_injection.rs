//! Fault injection: host bridge <-> lossy proxy <-> firmware emulator (kinematic plant), over UDP loopback, with
//! the link authenticated (HMAC, frame counters) as always.
//!
//! Each seeded trial draws fault rates (loss up to 20%, corruption, duplication, reordering, delay spikes; both
//! directions), then: arm and drive at 1 kHz (A), cut the link for 200 ms while still sending (B), restore it and
//! keep sending *without* re-arming (C), re-arm and drive again (D), and one attack or fault scenario picked by
//! the seed (E, [`Scenario`]): frames sealed with another key from another address and from the host's own
//! address; replays of recorded traffic in both directions; a takeover attempt (the session's own Hello replayed
//! from elsewhere, and a second host with the right key while armed); an e-stop whose whole burst is lost; a
//! stalled actor whose heartbeat task lives on; a pause followed by full-speed commands. Checked in every trial
//! (a failed check is a violation; the tests require none):
//! - every command the firmware acted on is bit-identical to one the host sent (nothing corrupted, forged or
//!   replayed was acted on), and acted-on sequence numbers strictly increase;
//! - the firmware held within 2 control periods of its link-timeout deadline, every time it lost the link;
//! - the plant never moved while the firmware was not armed, and no command sent during B or C was acted on;
//!   after the re-arm motion resumes;
//! - the tool tip never exceeded the firmware's speed (vector norm) or acceleration limit;
//! - only the host's own session was ever opened (unless a takeover found the firmware not armed);
//! - neither side took in more authentic frames than the other sent (no replay was ever taken in);
//! - the scenario's own checks (see [`scenario`]).
//!
//! `STAGEWISE_FAULT_TRIALS` sets the trials per test function (default 2; three functions run in parallel, six
//! trials cover the six scenarios). `cargo bench -p stagewise-bridge --bench fault_trials` runs >= 1000.
#![allow(dead_code)]

use crate::common;

use common::{Faults, Proxy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stagewise_bridge::protocol::{
    Arm, Command, Direction, EStop, FirmwareState, Heartbeat, Hello, LinkKey, Message, ResetEStop,
    Role, Sender, Setpoint, StopReason, Telemetry, KEY_LEN, MAX_FRAME, PROTOCOL_VERSION,
};
use stagewise_bridge::{Bridge, BridgeConfig, BridgeError, Endpoint, HostFault, Limits};
use stagewise_firmware::emulator::{Emulator, EmulatorConfig};
use stagewise_firmware::{FirmwareConfig, KinematicPlant};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The attack or fault of a trial's last phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Frames sealed with another key (Hello, commands, e-stop, arm, reset; to the emulator from another
    /// address and from the host's, telemetry to the host): all refused and counted, none acted on.
    WrongKey,
    /// The last recorded datagrams of both directions replayed from the proxy: every clean one refused as a
    /// replay, none acted on.
    Replay,
    /// The session's own Hello replayed from another address, and a second host with the right key, while the
    /// first is armed: refused (`SessionBusy`); the first host keeps its session.
    Takeover,
    /// An e-stop while the link toward the firmware is cut for 30 ms: its whole burst is lost; the repetition
    /// gets it through, and telemetry acknowledges it.
    LostEStop,
    /// The actor stops commanding while its heartbeats go on: the firmware holds (`ACTOR_STALLED`) within the
    /// stall timeout, and the host reports it.
    StalledActor,
    /// A 150 ms pause, then full-speed commands: the first is at most `acc * max_dt`, every one within the host's
    /// speed and acceleration norms, and the plant within the firmware's.
    PauseFullSpeed,
}

pub const SCENARIOS: [Scenario; 6] = [
    Scenario::WrongKey,
    Scenario::Replay,
    Scenario::Takeover,
    Scenario::LostEStop,
    Scenario::StalledActor,
    Scenario::PauseFullSpeed,
];

impl Scenario {
    pub fn of(seed: u64) -> Self {
        SCENARIOS[(seed % SCENARIOS.len() as u64) as usize]
    }
}

/// What one trial did and saw.
#[derive(Debug, Clone)]
pub struct Trial {
    pub seed: u64,
    pub scenario: Scenario,
    pub to_emu: Faults,
    pub to_host: Faults,
    pub proxy: common::ProxyStats,
    pub sent: usize,
    pub accepted: usize,
    pub accepted_after_rearm: usize,
    pub bad_frames: u32,
    pub stale: u32,
    pub replays: u32,
    pub auth_failures: u32,
    pub not_armed: u32,
    pub link_losses: usize,
    pub max_periods_late: f64,
    /// Wall clock: worst delay from (last valid frame + timeout) to the hold, microseconds.
    pub max_wall_late_us: i64,
    pub re_arms: u32,
    pub host_bad_frames: u64,
    pub host_rejected: u64,
    pub moved_after_rearm: f32,
    pub max_speed: f32,
    pub max_accel: f32,
    /// Frames of the scenario (forged, replayed, takeover attempts) sent, and how many the receivers refused.
    pub attack_frames: u64,
    pub attack_refused: u64,
    /// Milliseconds from the e-stop call to telemetry showing it (LostEStop), or from the last command to the
    /// host reporting the hold (StalledActor).
    pub stop_ms: f64,
    pub violations: Vec<String>,
}

macro_rules! check {
    ($t:expr, $cond:expr, $($fmt:tt)+) => {{
        // A NaN makes a comparison false: that is a violation too.
        let ok: bool = $cond;
        if !ok {
            let seed = $t.seed;
            $t.violations.push(format!("seed {seed}: {}", format!($($fmt)+)));
        }
    }};
}

pub fn trials_per_fn() -> u64 {
    std::env::var("STAGEWISE_FAULT_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2)
}

/// The link key of the trials (the attacker's is another one).
pub fn key() -> LinkKey {
    LinkKey::new(&[0x5c; KEY_LEN])
}

/// The firmware of the trials: 1 kHz, 50 ms link timeout, 200 ms stall timeout.
pub fn firmware() -> FirmwareConfig {
    FirmwareConfig {
        stall_timeout_us: 200_000,
        ..FirmwareConfig::cartesian_1khz()
    }
}

struct Driver<'a> {
    bridge: &'a Bridge,
    rng: ChaCha8Rng,
    sent: HashMap<u32, Command>,
    re_arms: u32,
    arm_failures: u32,
    t0: Instant,
}

impl Driver<'_> {
    fn record(&mut self, r: &stagewise_bridge::CommandReport) {
        self.sent.insert(
            r.seq,
            Command {
                seq: r.seq,
                time_us: r.time_us,
                setpoint: r.sent.clone(),
                gripper: r.gripper,
            },
        );
    }

    /// Sends commands at 1 kHz for `d`; re-arms when the firmware holds if `rearm`.
    async fn drive(&mut self, d: Duration, rearm: bool) {
        let mut iv = tokio::time::interval(Duration::from_millis(1));
        let end = Instant::now() + d;
        let phase: f32 = self.rng.random_range(0.0..std::f32::consts::TAU);
        while Instant::now() < end {
            iv.tick().await;
            let t = self.t0.elapsed().as_secs_f32();
            let v = [
                0.05 * (t * 3.0 + phase).sin(),
                0.05 * (t * 2.0).cos(),
                0.02 * (t * 5.0).sin(),
            ];
            let g = self.rng.random_range(0.0..1.0);
            match self.bridge.command(&Setpoint::EeVelocity(v), g).await {
                Ok(r) => self.record(&r),
                Err(BridgeError::Faulted(_)) if rearm => self.arm().await,
                Err(_) => {}
            }
            if rearm {
                if let Some(s) = self.bridge.telemetry() {
                    if matches!(
                        s.telemetry.state,
                        FirmwareState::Hold | FirmwareState::Disarmed
                    ) && s.received.elapsed() < Duration::from_millis(5)
                    {
                        self.arm().await;
                    }
                }
            }
        }
    }

    async fn arm(&mut self) {
        for _ in 0..20 {
            if self.bridge.fault() == Some(HostFault::SessionLost) {
                // Another session opened while this one was not armed (allowed; the trial checks that no
                // session ever opened while the firmware was armed): nothing to arm any more.
                return;
            }
            if self.bridge.arm().await.is_ok() {
                self.re_arms += 1;
                return;
            }
        }
        self.arm_failures += 1;
    }
}

fn stranger_key(seed: u64) -> LinkKey {
    let mut k = [0u8; KEY_LEN];
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xbad_c0de);
    rng.fill(&mut k[..]);
    k[0] ^= 0x01; // never the trials' key (0x5c...)
    LinkKey::new(&k)
}

fn seal(tx: &mut Sender, session: u32, m: &Message) -> Vec<u8> {
    let mut buf = [0u8; MAX_FRAME];
    let n = tx.seal(session, m, &mut buf).expect("seals");
    buf[..n].to_vec()
}

/// One trial (see the module doc); violations are collected, not panicked on.
pub async fn trial(seed: u64) -> Trial {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let to_emu = Faults::random(&mut rng);
    let to_host = Faults::random(&mut rng);
    let scenario = Scenario::of(seed);
    let fw = firmware();
    let fw_limits = fw.limits.clone();
    let period_us = fw.period_us();
    let emu = Emulator::spawn(
        EmulatorConfig {
            firmware: fw,
            bind: "127.0.0.1:0".parse().expect("addr"),
            record_commands: true,
            key: key(),
        },
        KinematicPlant::new([0.0, 0.0, 0.2]),
    )
    .expect("emulator");
    let proxy = Proxy::spawn(emu.local_addr(), seed ^ 0x5eed, to_emu, to_host).expect("proxy");
    let cfg = BridgeConfig {
        // Long enough that the host keeps sending through the 200 ms cut (the firmware side is under test).
        watchdog: Duration::from_secs(2),
        reply_timeout: Duration::from_millis(50),
        retries: 40,
        ..BridgeConfig::new(key())
    };
    let limits = cfg.limits.clone();
    let mut t = Trial {
        seed,
        scenario,
        to_emu,
        to_host,
        proxy: Default::default(),
        sent: 0,
        accepted: 0,
        accepted_after_rearm: 0,
        bad_frames: 0,
        stale: 0,
        replays: 0,
        auth_failures: 0,
        not_armed: 0,
        link_losses: 0,
        max_periods_late: 0.0,
        max_wall_late_us: 0,
        re_arms: 0,
        host_bad_frames: 0,
        host_rejected: 0,
        moved_after_rearm: 0.0,
        max_speed: 0.0,
        max_accel: 0.0,
        attack_frames: 0,
        attack_refused: 0,
        stop_ms: 0.0,
        violations: Vec::new(),
    };
    let bridge = match Bridge::connect(&Endpoint::Udp(proxy.addr()), cfg).await {
        Ok(b) => b,
        Err(e) => {
            check!(t, false, "handshake through the proxy failed: {e}");
            return t;
        }
    };
    let mut d = Driver {
        bridge: &bridge,
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0xd21e),
        sent: HashMap::new(),
        re_arms: 0,
        arm_failures: 0,
        t0: Instant::now(),
    };
    d.arm().await;
    d.drive(Duration::from_millis(250), true).await;
    // B: cut.
    proxy.set_blackout(true);
    let last_before_cut = bridge.last_command_seq();
    d.drive(Duration::from_millis(200), false).await;
    // C: restored, no re-arm.
    proxy.set_blackout(false);
    d.drive(Duration::from_millis(200), false).await;
    match bridge.telemetry() {
        Some(s) => check!(
            t,
            s.telemetry.state == FirmwareState::Hold,
            "firmware is {:?} after reconnect without re-arm",
            s.telemetry.state
        ),
        None => check!(t, false, "no telemetry after the cut"),
    }
    check!(
        t,
        bridge
            .fault()
            .is_none_or(|f| matches!(f, HostFault::TelemetryTimeout { .. })),
        "host fault {:?} after the cut",
        bridge.fault()
    );
    check!(
        t,
        bridge
            .firmware_stop()
            .is_some_and(|s| s.state == FirmwareState::Hold),
        "the host did not report the hold: {:?}",
        bridge.firmware_stop()
    );
    // D: explicit re-arm.
    let floor = bridge.last_command_seq();
    let before = bridge
        .telemetry()
        .map(|s| s.telemetry.ee)
        .unwrap_or([0.0; 3]);
    d.arm().await;
    d.drive(Duration::from_millis(200), true).await;
    // Liveness: on a loaded machine the firmware may hold again (a real 50 ms silence); re-arm until a command
    // issued after the re-arm is acted on (bounded).
    for _ in 0..10 {
        let acked = bridge
            .telemetry()
            .map(|s| s.telemetry.last_command_seq)
            .unwrap_or(0);
        if acked > floor {
            break;
        }
        d.arm().await;
        d.drive(Duration::from_millis(100), true).await;
    }
    let after = bridge
        .telemetry()
        .map(|s| s.telemetry.ee)
        .unwrap_or([0.0; 3]);
    // E: the scenario.
    scenario_phase(&mut t, &mut d, &proxy, &emu, &limits, &fw_limits).await;
    let sent = std::mem::take(&mut d.sent);
    t.re_arms = d.re_arms;
    check!(
        t,
        d.arm_failures == 0,
        "{} arms failed 20 times in a row",
        d.arm_failures
    );
    let hs = bridge.close().await;
    t.host_bad_frames = hs.bad_frames;
    t.host_rejected = hs.auth_failures + hs.replays + hs.foreign_frames;
    t.proxy = proxy.stats();
    drop(proxy);
    let log = match emu.stop() {
        Ok(l) => l,
        Err(e) => {
            check!(t, false, "emulator: {e}");
            return t;
        }
    };

    // 1. Nothing corrupted, forged or replayed was acted on: each accepted command equals what the host sent
    //    under that seq.
    for c in &log.accepted {
        match sent.get(&c.seq) {
            Some(s) => check!(
                t,
                s == c,
                "acted-on command {c:?} differs from the one sent {s:?}"
            ),
            None => check!(t, false, "firmware acted on unknown seq {}", c.seq),
        }
    }
    // 2. Strictly increasing: no stale or duplicate command acted on.
    for w in log.accepted.windows(2) {
        check!(
            t,
            w[1].seq > w[0].seq,
            "seq {} acted on after {}",
            w[1].seq,
            w[0].seq
        );
    }
    // 3. Hold within 2 control periods of the deadline, every time.
    check!(t, !log.link_losses.is_empty(), "the cut was not detected");
    let max_late = log
        .link_losses
        .iter()
        .map(|l| l.periods_late())
        .fold(0.0, f64::max);
    check!(
        t,
        max_late <= 2.0,
        "held {max_late} periods after the deadline"
    );
    for l in &log.link_losses {
        check!(t, l.period_us == period_us, "period {}", l.period_us);
    }
    // 4. No motion while not armed; nothing sent during the cut or before the re-arm was acted on.
    check!(
        t,
        log.moved_while_not_armed == 0,
        "plant moved while not armed (max step {})",
        log.max_unarmed_step
    );
    for c in &log.accepted {
        check!(
            t,
            c.seq <= last_before_cut || c.seq > floor,
            "command {} (sent between the cut and the re-arm) was acted on",
            c.seq
        );
    }
    let accepted_after_rearm = log.accepted.iter().filter(|c| c.seq > floor).count();
    check!(t, accepted_after_rearm > 0, "no motion after the re-arm");
    // 5. The tool tip within the firmware's limits (vector norms), every driven tick.
    check!(
        t,
        log.max_speed <= fw_limits.ee_speed_max * 1.001 + 1e-4,
        "tool-tip speed {} > {}",
        log.max_speed,
        fw_limits.ee_speed_max
    );
    check!(
        t,
        log.max_accel <= fw_limits.ee_acc_max * 1.01 + 0.05,
        "tool-tip acceleration {} > {}",
        log.max_accel,
        fw_limits.ee_acc_max
    );
    // 5b. Every stalled-actor hold within 2 periods after the stall timeout (firmware clock).
    let stall_us = firmware().stall_timeout_us;
    for &(progress, detected) in &log.stalls {
        let late = detected.saturating_sub(progress);
        check!(
            t,
            late > stall_us && late <= stall_us + 2 * period_us,
            "stall held {late} us after the last progress (timeout {stall_us} us)"
        );
    }
    // 5c. Each frame counter taken in at most once, end to end: neither side ever took in more authentic frames
    //     than the other sent (a replay taken in would make it more; a socket may drop, never add). The scenario
    //     counts above need not be equal: a replayed burst can overflow a socket's receive buffer.
    check!(
        t,
        log.counters.frames <= hs.frames_sent,
        "the firmware took in {} frames, the host sent {}",
        log.counters.frames,
        hs.frames_sent
    );
    check!(
        t,
        hs.frames_received <= log.counters.frames_sent,
        "the host took in {} frames, the firmware sent {}",
        hs.frames_received,
        log.counters.frames_sent
    );
    // 6. No session ever opened while the firmware was armed (an armed session is never taken over); outside
    //    the takeover scenario only ours opened.
    for &(at, state) in &log.sessions_opened {
        check!(
            t,
            state != FirmwareState::Armed,
            "a session opened at {at} us while the firmware was armed"
        );
    }
    check!(
        t,
        log.counters.sessions == 1 || scenario == Scenario::Takeover,
        "{} sessions were opened",
        log.counters.sessions
    );
    t.sent = sent.len();
    t.accepted = log.accepted.len();
    t.accepted_after_rearm = accepted_after_rearm;
    t.bad_frames = log.counters.bad_frames;
    t.stale = log.counters.stale_commands;
    t.replays = log.counters.replays;
    t.auth_failures = log.counters.auth_failures;
    t.not_armed = log.counters.not_armed_commands;
    t.link_losses = log.link_losses.len();
    t.max_periods_late = max_late;
    t.max_wall_late_us = log
        .link_losses
        .iter()
        .map(|l| l.wall_late_us)
        .max()
        .unwrap_or(0);
    t.moved_after_rearm = (0..3)
        .map(|i| (after[i] - before[i]).abs())
        .fold(0.0, f32::max);
    t.max_speed = log.max_speed;
    t.max_accel = log.max_accel;
    t
}

/// Phase E: the trial's scenario, with its own checks.
async fn scenario_phase(
    t: &mut Trial,
    d: &mut Driver<'_>,
    proxy: &Proxy,
    emu: &Emulator,
    limits: &Limits,
    fw_limits: &stagewise_firmware::FirmwareLimits,
) {
    let bridge = d.bridge;
    let session = bridge.session();
    let spoof = std::net::UdpSocket::bind("127.0.0.1:0").expect("spoof socket");
    let before = emu.log().counters;
    let host_before = bridge.stats();
    match t.scenario {
        Scenario::WrongKey => {
            let mut tx = Sender::new(stranger_key(t.seed), Direction::HostToFirmware);
            let mut fw_tx = Sender::new(stranger_key(t.seed), Direction::FirmwareToHost);
            let floor = bridge.last_command_seq();
            let mut to_emu = 0u64;
            let mut to_host = 0u64;
            for i in 0..40u32 {
                let m = match i % 6 {
                    0 => Message::Hello(Hello {
                        version: PROTOCOL_VERSION,
                        role: Role::Host,
                        nonce: 1 + i,
                        session: 0,
                        capabilities: Default::default(),
                        n_joints: 0,
                        control_hz: 0,
                    }),
                    1 => Message::EStop(EStop {
                        seq: 10_000 + i,
                        reason: StopReason::Operator,
                    }),
                    2 => Message::Arm(Arm {
                        seq: 10_000 + i,
                        seen_telemetry: u32::MAX,
                        command_floor: 0,
                    }),
                    3 => Message::ResetEStop(ResetEStop {
                        seq: 10_000 + i,
                        seen_telemetry: u32::MAX,
                    }),
                    4 => Message::Heartbeat(Heartbeat {
                        seq: 10_000 + i,
                        time_us: 0,
                        actor_step: i,
                    }),
                    _ => Message::Command(Command {
                        seq: floor + 100_000 + i,
                        time_us: 0,
                        setpoint: Setpoint::EeVelocity([0.3, -0.3, 0.3]),
                        gripper: 0.0,
                    }),
                };
                let s = if matches!(m, Message::Hello(_)) {
                    0
                } else {
                    session
                };
                let bytes = seal(&mut tx, s, &m);
                if i % 2 == 0 {
                    let _ = spoof.send_to(&bytes, emu.local_addr());
                } else {
                    proxy.inject(true, bytes);
                }
                to_emu += 1;
                if i % 4 == 0 {
                    // Forged telemetry toward the host: a firmware that says it is e-stopped.
                    let tel = forged_telemetry(i);
                    proxy.inject(false, seal(&mut fw_tx, session, &Message::Telemetry(tel)));
                    to_host += 1;
                }
                d.drive(Duration::from_millis(3), true).await;
            }
            d.drive(Duration::from_millis(30), true).await;
            let after = emu.log().counters;
            let host = bridge.stats();
            let fw_refused = u64::from(after.auth_failures - before.auth_failures);
            let host_refused = host.auth_failures - host_before.auth_failures;
            t.attack_frames = to_emu + to_host;
            t.attack_refused = fw_refused.min(to_emu) + host_refused.min(to_host);
            check!(
                t,
                fw_refused > 0,
                "firmware refused none of {to_emu} forged frames"
            );
            check!(
                t,
                host_refused > 0,
                "host refused none of {to_host} forged frames"
            );
            check!(
                t,
                after.estops == before.estops,
                "a forged e-stop was acted on"
            );
            check!(
                t,
                after.sessions == before.sessions,
                "a forged Hello opened a session"
            );
            check!(
                t,
                bridge
                    .telemetry()
                    .is_none_or(|s| s.telemetry.state != FirmwareState::EStopped),
                "forged telemetry reached the host"
            );
        }
        Scenario::Replay => {
            let to_emu = proxy.recorded(true);
            let to_host = proxy.recorded(false);
            let n = 200;
            let pick = |r: &common::Recorded| -> Vec<(Vec<u8>, bool)> {
                r.iter().rev().take(n).rev().cloned().collect()
            };
            let (a, b) = (pick(&to_emu), pick(&to_host));
            let clean_a = a.iter().filter(|(_, c)| !c).count() as u64;
            let clean_b = b.iter().filter(|(_, c)| !c).count() as u64;
            for (i, (bytes, _)) in a.into_iter().enumerate() {
                proxy.inject(true, bytes);
                if i % 20 == 19 {
                    d.drive(Duration::from_millis(2), true).await;
                }
            }
            for (i, (bytes, _)) in b.into_iter().enumerate() {
                proxy.inject(false, bytes);
                if i % 20 == 19 {
                    d.drive(Duration::from_millis(2), true).await;
                }
            }
            // Wait (bounded) until both sides have worked through the replays.
            let mut waited = 0;
            loop {
                d.drive(Duration::from_millis(10), true).await;
                waited += 1;
                let fw = emu.log().counters.replays - before.replays;
                let host = bridge.stats().replays - host_before.replays;
                if (fw > 0 || clean_a == 0) && (host > 0 || clean_b == 0) || waited >= 50 {
                    break;
                }
            }
            let after = emu.log().counters;
            let host = bridge.stats();
            let fw_refused = u64::from(after.replays - before.replays);
            let host_refused = (host.replays - host_before.replays)
                + (host.telemetry_stale - host_before.telemetry_stale);
            t.attack_frames = clean_a + clean_b;
            t.attack_refused = fw_refused.min(clean_a) + host_refused.min(clean_b);
            check!(
                t,
                fw_refused > 0 || clean_a == 0,
                "firmware refused none of {clean_a} clean replayed frames"
            );
            check!(
                t,
                host_refused > 0 || clean_b == 0,
                "host refused none of {clean_b} clean replayed frames"
            );
            check!(
                t,
                after.sessions == before.sessions,
                "a replay opened a session"
            );
            check!(
                t,
                after.estops == before.estops,
                "a replay e-stopped the firmware"
            );
        }
        Scenario::Takeover => {
            // Wait until the firmware reports Armed (the checks below need an armed session).
            for _ in 0..20 {
                if bridge
                    .telemetry()
                    .is_some_and(|s| s.telemetry.state == FirmwareState::Armed)
                {
                    break;
                }
                d.drive(Duration::from_millis(10), true).await;
            }
            let before = emu.log().counters;
            let mut attempts = 0u64;
            if let Some(hello) = proxy.first_to_emulator() {
                // The session's own Hello, replayed from another address.
                let _ = spoof.send_to(&hello, emu.local_addr());
                attempts += 1;
            }
            let second_cfg = BridgeConfig {
                retries: 5,
                reply_timeout: Duration::from_millis(100),
                ..BridgeConfig::new(key())
            };
            let second = Bridge::connect(&Endpoint::Udp(emu.local_addr()), second_cfg).await;
            attempts += 1;
            d.drive(Duration::from_millis(30), true).await;
            let after = emu.log().counters;
            let refused = u64::from(after.takeovers_refused - before.takeovers_refused);
            t.attack_frames = attempts;
            // The replayed Hello is this session's own: answered with the session, nothing changes. The second
            // host is refused. Held back = the session stayed the first host's.
            t.attack_refused = if after.sessions == before.sessions {
                attempts
            } else {
                0
            };
            match second {
                Err(BridgeError::SessionBusy { .. }) => {
                    check!(t, refused >= 1, "the takeover was refused but not counted");
                    check!(
                        t,
                        after.sessions == before.sessions,
                        "a second session opened"
                    );
                    check!(
                        t,
                        bridge.fault().is_none(),
                        "the first host lost its session: {:?}",
                        bridge.fault()
                    );
                }
                // The firmware was not armed when the second host came (a real link loss under the injected
                // faults, a re-arm in flight): a new session is then allowed; check 6 verifies after the trial
                // that no session ever opened while the firmware was armed. A machine stall can also leave the
                // second handshake unanswered.
                Ok(_) | Err(BridgeError::NoAnswer { .. }) => t.stop_ms = -1.0,
                Err(e) => check!(t, false, "the second host got {e}, not SessionBusy"),
            }
        }
        Scenario::LostEStop => {
            proxy.set_cut_to_emulator(true);
            let cut_before = proxy.stats().cut_to_emulator;
            let burst = u64::from(bridge.config().estop_burst);
            let t0 = Instant::now();
            let _ = bridge.estop().await;
            // The cut lasts 30 ms, and until the proxy has dropped at least the whole burst (a descheduled proxy
            // thread may read the datagrams late).
            tokio::time::sleep(Duration::from_millis(30)).await;
            let cut_end = Instant::now() + Duration::from_secs(1);
            while proxy.stats().cut_to_emulator - cut_before < burst && Instant::now() < cut_end {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let lost = proxy.stats().cut_to_emulator - cut_before;
            proxy.set_cut_to_emulator(false);
            let acked = bridge.wait_stop_acknowledged(Duration::from_secs(2)).await;
            t.stop_ms = t0.elapsed().as_secs_f64() * 1e3;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let after = emu.log();
            t.attack_frames = burst;
            t.attack_refused = lost.min(burst);
            check!(
                t,
                lost >= burst,
                "the cut dropped {lost} frames, not the whole burst"
            );
            check!(
                t,
                acked,
                "telemetry never showed the e-stop ({:.0} ms)",
                t.stop_ms
            );
            check!(
                t,
                after.counters.estops > before.estops,
                "the firmware never got the repeated e-stop"
            );
            check!(
                t,
                after
                    .states
                    .iter()
                    .any(|(_, s)| *s == FirmwareState::EStopped),
                "the firmware never latched EStopped"
            );
            check!(
                t,
                bridge.arm().await.is_err(),
                "an arm cleared the latched e-stop"
            );
        }
        Scenario::StalledActor => {
            // From an armed robot (a hold at the end of D is re-armed first): one last command, then nothing
            // but heartbeats (the bridge's own task keeps sending them).
            for _ in 0..20 {
                let armed = bridge
                    .telemetry()
                    .is_some_and(|s| s.telemetry.state == FirmwareState::Armed);
                if armed && bridge.firmware_stop().is_none() {
                    break;
                }
                d.arm().await;
                d.drive(Duration::from_millis(10), true).await;
            }
            d.drive(Duration::from_millis(5), true).await;
            let before = emu.log().counters;
            let t0 = Instant::now();
            let hb = bridge.stats().heartbeats_sent;
            let mut noticed = false;
            while t0.elapsed() < Duration::from_secs(2) {
                if bridge.firmware_stop().is_some() {
                    noticed = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            t.stop_ms = t0.elapsed().as_secs_f64() * 1e3;
            // The host can see the hold's telemetry before the emulator's log of that tick is published (and a
            // starved emulator thread publishes late): wait for it, bounded.
            let mut after = emu.log().counters;
            for _ in 0..100 {
                if after.actor_stalls + after.link_losses > before.actor_stalls + before.link_losses
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                after = emu.log().counters;
            }
            t.attack_frames = 1;
            t.attack_refused = u64::from(noticed);
            check!(
                t,
                noticed,
                "the host never reported a stop of the stalled actor's robot"
            );
            check!(
                t,
                after.actor_stalls + after.link_losses > before.actor_stalls + before.link_losses,
                "the firmware stayed armed with a stalled actor"
            );
            // With a clean hold (no link loss meanwhile, heartbeats going on) the cause must be the stall.
            let heartbeats_went_on = bridge.stats().heartbeats_sent > hb + 5;
            if after.link_losses == before.link_losses && heartbeats_went_on {
                check!(
                    t,
                    after.actor_stalls == before.actor_stalls + 1,
                    "held without ACTOR_STALLED"
                );
                check!(
                    t,
                    bridge.firmware_stop().is_some_and(|s| s
                        .faults
                        .has(stagewise_bridge::protocol::Faults::ACTOR_STALLED)),
                    "the report lacks ACTOR_STALLED: {:?}",
                    bridge.firmware_stop()
                );
            }
        }
        Scenario::PauseFullSpeed => {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let mut iv = tokio::time::interval(Duration::from_millis(1));
            let mut reports = Vec::new();
            for _ in 0..100 {
                iv.tick().await;
                if let Ok(r) = bridge
                    .command(&Setpoint::EeVelocity([0.3, 0.3, 0.3]), 1.0)
                    .await
                {
                    d.record(&r);
                    reports.push(r);
                }
            }
            let norm = |v: &Setpoint| match v {
                Setpoint::EeVelocity(v) => (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt(),
                Setpoint::Joints(_) => f32::NAN,
            };
            let vec3 = |v: &Setpoint| match v {
                Setpoint::EeVelocity(v) => *v,
                Setpoint::Joints(_) => [f32::NAN; 3],
            };
            check!(
                t,
                !reports.is_empty(),
                "no command after the pause was sent"
            );
            if let Some(first) = reports.first() {
                let allowed = limits.ee_acc_max * limits.max_dt;
                check!(
                    t,
                    norm(&first.sent) <= allowed + 1e-5,
                    "first command after the pause at {} m/s (allowed {allowed})",
                    norm(&first.sent)
                );
            }
            for w in reports.windows(2) {
                let (a, b) = (vec3(&w[0].sent), vec3(&w[1].sent));
                // The interval the limiter integrated over (its own clock), and whether it started from rest.
                let (dt, from_rest) = limits.interval(w[1].interval);
                let a = if from_rest { [0.0; 3] } else { a };
                let dv =
                    ((b[0] - a[0]).powi(2) + (b[1] - a[1]).powi(2) + (b[2] - a[2]).powi(2)).sqrt();
                check!(
                    t,
                    dv <= limits.ee_acc_max * dt + 1e-5,
                    "velocity step {dv} in {dt} s"
                );
                check!(
                    t,
                    norm(&w[1].sent) <= limits.ee_vel_max + 1e-5,
                    "speed {}",
                    norm(&w[1].sent)
                );
            }
            d.drive(Duration::from_millis(10), true).await;
            let log = emu.log();
            t.attack_frames = reports.len() as u64;
            t.attack_refused = reports
                .iter()
                .filter(|r| norm(&r.sent) < 0.3 * 3f32.sqrt())
                .count() as u64;
            check!(
                t,
                log.max_speed <= fw_limits.ee_speed_max * 1.001 + 1e-4,
                "plant speed {}",
                log.max_speed
            );
        }
    }
}

fn forged_telemetry(i: u32) -> Telemetry {
    let j = stagewise_bridge::protocol::joints(&[0.0, 0.0, 0.2]).expect("fits");
    Telemetry {
        seq: u32::MAX - 100 + i,
        time_us: 0,
        state: FirmwareState::EStopped,
        last_command_seq: 0,
        positions: j.clone(),
        velocities: j.clone(),
        efforts: j,
        ee: [0.0, 0.0, 0.2],
        gripper: 0.0,
        faults: Default::default(),
        bad_frames: 0,
        stale_commands: 0,
        rejected_frames: 0,
    }
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// One line per trial.
pub fn line(t: &Trial) -> String {
    format!(
        "trial seed={:>4} {:<14} loss={:.2}/{:.2} corrupt={:.3}/{:.3} dup={:.3}/{:.3} proxy[drop={} corrupt={} dup={} reorder={} spikes={} cut={}] \
         sent={} acted={} after_rearm={} fw[bad_frames={} replays={} auth={} stale={} not_armed={} link_losses={} max_late={:.2}p wall_late={}us speed={:.3} acc={:.2}] \
         re_arms={} host[bad={} rejected={}] moved_after_rearm={:.4} attack={}/{} stop_ms={:.1} violations={}",
        t.seed, format!("{:?}", t.scenario), t.to_emu.loss, t.to_host.loss, t.to_emu.corrupt, t.to_host.corrupt, t.to_emu.duplicate, t.to_host.duplicate,
        t.proxy.dropped, t.proxy.corrupted, t.proxy.duplicated, t.proxy.reordered, t.proxy.spikes, t.proxy.blackout_dropped,
        t.sent, t.accepted, t.accepted_after_rearm, t.bad_frames, t.replays, t.auth_failures, t.stale, t.not_armed, t.link_losses, t.max_periods_late,
        t.max_wall_late_us, t.max_speed, t.max_accel, t.re_arms, t.host_bad_frames, t.host_rejected, t.moved_after_rearm,
        t.attack_refused, t.attack_frames, t.stop_ms, t.violations.len()
    )
}

/// The summary of many trials (what the README quotes).
pub fn summary(all: &[Trial]) -> String {
    let mut s = String::new();
    let violations: usize = all.iter().map(|t| t.violations.len()).sum();
    let _ = writeln!(
        s,
        "SUMMARY trials={} violations={violations} (trials with a violation: {})",
        all.len(),
        all.iter().filter(|t| !t.violations.is_empty()).count()
    );
    let sum = |f: &dyn Fn(&Trial) -> u64| all.iter().map(f).sum::<u64>();
    let _ = writeln!(
        s,
        "  commands sent={} acted_on={} not_armed={}; corrupted injected={} bad frames dropped fw={} host={}; duplicates injected={} refused as replays={} stale={}",
        sum(&|t| t.sent as u64),
        sum(&|t| t.accepted as u64),
        sum(&|t| u64::from(t.not_armed)),
        sum(&|t| t.proxy.corrupted),
        sum(&|t| u64::from(t.bad_frames)),
        sum(&|t| t.host_bad_frames),
        sum(&|t| t.proxy.duplicated),
        sum(&|t| u64::from(t.replays)),
        sum(&|t| u64::from(t.stale)),
    );
    let walls: Vec<i64> = all.iter().map(|t| t.max_wall_late_us).collect();
    let _ = writeln!(
        s,
        "  link losses={} max hold delay={:.2} periods (firmware clock); wall-clock hold delay p50={}us max={}us; re-arms={}",
        sum(&|t| t.link_losses as u64),
        all.iter().map(|t| t.max_periods_late).fold(0.0, f64::max),
        median(walls.clone()),
        walls.iter().max().copied().unwrap_or(0),
        sum(&|t| u64::from(t.re_arms)),
    );
    let _ = writeln!(
        s,
        "  tool tip: max speed {:.4} m/s (limit 0.3), max acceleration {:.3} m/s^2 (limit 10)",
        all.iter().map(|t| t.max_speed).fold(0.0, f32::max),
        all.iter().map(|t| t.max_accel).fold(0.0, f32::max),
    );
    for sc in SCENARIOS {
        let of: Vec<&Trial> = all.iter().filter(|t| t.scenario == sc).collect();
        if of.is_empty() {
            continue;
        }
        let frames: u64 = of.iter().map(|t| t.attack_frames).sum();
        let refused: u64 = of.iter().map(|t| t.attack_refused).sum();
        let stops: Vec<f64> = of.iter().map(|t| t.stop_ms).filter(|x| *x > 0.0).collect();
        let max_stop = stops.iter().copied().fold(0.0, f64::max);
        let not_armed = of.iter().filter(|t| t.stop_ms < 0.0).count();
        let _ = writeln!(
            s,
            "  {:<14} trials={:>4} violations={} scenario frames={frames} refused/held back={refused}{}",
            format!("{sc:?}"),
            of.len(),
            of.iter().map(|t| t.violations.len()).sum::<usize>(),
            if stops.is_empty() {
                String::new()
            } else {
                format!(" stop reported after max {max_stop:.1} ms")
            } + &if not_armed > 0 {
                format!(" (in {not_armed} the firmware was not armed when the second host came)")
            } else {
                String::new()
            }
        );
    }
    for t in all.iter().filter(|t| !t.violations.is_empty()).take(20) {
        for v in &t.violations {
            let _ = writeln!(s, "  VIOLATION {v}");
        }
    }
    s
}

/// Runs `n` trials from `first_seed` on one tokio runtime, in order.
pub fn run(first_seed: u64, n: u64) -> Vec<Trial> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    (first_seed..first_seed + n)
        .map(|seed| rt.block_on(trial(seed)))
        .collect()
}

fn run_trials(first_seed: u64) {
    let n = trials_per_fn();
    let all = run(first_seed, n);
    for t in &all {
        println!("{}", line(t));
    }
    print!("{}", summary(&all));
    if n >= 4 {
        let bad: u32 = all.iter().map(|t| t.bad_frames).sum();
        let dup: u32 = all.iter().map(|t| t.replays + t.stale).sum();
        assert!(bad > 0, "corruption was injected but no bad frame was seen");
        assert!(dup > 0, "duplicates were injected but none was refused");
    }
    let violations: Vec<&String> = all.iter().flat_map(|t| &t.violations).collect();
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn fault_injection_trials_a() {
    run_trials(0);
}

#[test]
fn fault_injection_trials_b() {
    run_trials(1000);
}

#[test]
fn fault_injection_trials_c() {
    run_trials(2000);
}
