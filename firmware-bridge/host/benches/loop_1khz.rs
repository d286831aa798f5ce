//! The 1 kHz command/telemetry loop over UDP loopback, host bridge <-> firmware emulator (kinematic plant).
//!
//! Reports (release build: `cargo bench -p stagewise-bridge --bench loop_1khz`):
//! - command -> acknowledging telemetry latency (the firmware acknowledges a command in the telemetry of its next
//!   1 ms control tick, so this includes up to one period of tick quantisation);
//! - link round trip without the tick: a repeated `Hello` is answered at once (seal with the MAC, UDP, decode and
//!   authenticate, firmware handling, and back);
//! - jitter of the host's 1 kHz command sends and of the telemetry arrivals (interval standard deviation).
//!
//! `STAGEWISE_BENCH_SECONDS` (default 5) sets the length of the 1 kHz run.

use stagewise_bridge::protocol::*;
use stagewise_bridge::{Bridge, BridgeConfig, Endpoint};
use stagewise_firmware::emulator::{Emulator, EmulatorConfig};
use stagewise_firmware::{FirmwareConfig, KinematicPlant};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn std_dev(v: &[f64]) -> f64 {
    let m = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

fn summary(name: &str, v: &mut [f64]) {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "{name:<44} n={:>6} mean={:>8.1} p50={:>8.1} p90={:>8.1} p99={:>8.1} max={:>8.1} (us)",
        v.len(),
        mean,
        pct(v, 0.5),
        pct(v, 0.9),
        pct(v, 0.99),
        pct(v, 1.0)
    );
}

fn key() -> LinkKey {
    LinkKey::new(&[0x5a; KEY_LEN])
}

fn emulator() -> Emulator {
    Emulator::spawn(
        EmulatorConfig {
            firmware: FirmwareConfig::cartesian_1khz(),
            bind: "127.0.0.1:0".parse().expect("addr"),
            record_commands: false,
            key: key(),
        },
        KinematicPlant::new([0.0, 0.0, 0.2]),
    )
    .expect("emulator")
}

fn raw_round_trip(n: usize) -> Vec<f64> {
    let emu = emulator();
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.connect(emu.local_addr()).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let hello = Message::Hello(Hello {
        version: PROTOCOL_VERSION,
        role: Role::Host,
        nonce: 77,
        session: 0,
        capabilities: Capabilities(0),
        n_joints: 0,
        control_hz: 0,
    });
    let mut out = [0u8; MAX_FRAME];
    let mut tx = Sender::new(key(), Direction::HostToFirmware);
    let mut buf = [0u8; 2048];
    let mut rtts = Vec::with_capacity(n);
    let mut dec = FrameDecoder::new(key(), Direction::FirmwareToHost);
    for i in 0..n + 100 {
        let t = Instant::now();
        let k = tx.seal(0, &hello, &mut out).expect("seal");
        sock.send(&out[..k]).expect("send");
        // Wait for the Hello answer (telemetry may arrive in between).
        'wait: loop {
            let Ok(m) = sock.recv(&mut buf) else {
                break 'wait;
            };
            let mut got = false;
            dec.reset();
            dec.feed(&buf[..m], |r| {
                got |= matches!(
                    r,
                    Ok(Frame {
                        message: Message::Hello(_),
                        ..
                    })
                )
            });
            if got {
                if i >= 100 {
                    rtts.push(t.elapsed().as_secs_f64() * 1e6);
                }
                break 'wait;
            }
        }
    }
    rtts
}

fn main() {
    let secs: f64 = std::env::var("STAGEWISE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let mut raw = raw_round_trip(2000);
    summary("link round trip (Hello -> Hello, no tick wait)", &mut raw);

    let emu = emulator();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (sends, tels) = rt.block_on(async {
        let bridge = std::sync::Arc::new(
            Bridge::connect(&Endpoint::Udp(emu.local_addr()), BridgeConfig::new(key()))
                .await
                .expect("connect"),
        );
        bridge.arm().await.expect("arm");
        let b2 = bridge.clone();
        let end = Instant::now() + Duration::from_secs_f64(secs + 0.2);
        let watcher = tokio::spawn(async move {
            let mut tels: Vec<(Instant, u32)> = Vec::new();
            let mut last = 0;
            while Instant::now() < end {
                if let Ok(s) = b2.next_telemetry(last, Duration::from_millis(100)).await {
                    last = s.telemetry.seq;
                    tels.push((s.received, s.telemetry.last_command_seq));
                }
            }
            tels
        });
        let mut sends: Vec<(Instant, u32)> = Vec::new();
        let mut iv = tokio::time::interval(Duration::from_millis(1));
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let stop = Instant::now() + Duration::from_secs_f64(secs);
        let mut t = 0f32;
        while Instant::now() < stop {
            iv.tick().await;
            t += 1e-3;
            let v = [0.05 * (t * 3.0).sin(), 0.05 * (t * 2.0).cos(), 0.0];
            let r = bridge
                .command(&Setpoint::EeVelocity(v), 1.0)
                .await
                .expect("command");
            sends.push((Instant::now(), r.seq));
        }
        let tels = watcher.await.expect("watcher");
        (sends, tels)
    });
    let log = emu.stop().expect("stop");
    // Command -> first telemetry acknowledging it (last_command_seq >= seq).
    let mut lat = Vec::new();
    let mut j = 0;
    let mut unacked = 0;
    for (ts, seq) in &sends {
        while j < tels.len() && (tels[j].1 < *seq || tels[j].0 < *ts) {
            j += 1;
        }
        match tels.get(j) {
            Some((tr, _)) => lat.push(tr.duration_since(*ts).as_secs_f64() * 1e6),
            None => unacked += 1,
        }
    }
    summary("command -> acknowledging telemetry (1 kHz)", &mut lat);
    let mut send_iv: Vec<f64> = sends
        .windows(2)
        .map(|w| w[1].0.duration_since(w[0].0).as_secs_f64() * 1e6)
        .collect();
    let mut tel_iv: Vec<f64> = tels
        .windows(2)
        .map(|w| w[1].0.duration_since(w[0].0).as_secs_f64() * 1e6)
        .collect();
    println!(
        "host send interval: std {:.1} us; telemetry interval: std {:.1} us",
        std_dev(&send_iv),
        std_dev(&tel_iv)
    );
    summary("host command send interval", &mut send_iv);
    summary("telemetry arrival interval", &mut tel_iv);
    println!(
        "commands sent {} (over {secs} s: {:.0} Hz), firmware accepted {}, telemetry {}, unacknowledged {unacked}, late firmware ticks {}",
        sends.len(),
        sends.len() as f64 / secs,
        log.counters.accepted_commands,
        tels.len(),
        log.late_ticks
    );
}
