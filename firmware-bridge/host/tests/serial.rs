//! The serial transport over a pty pair: the firmware core runs on the master side, the bridge opens the slave.

use nix::pty::openpty;
use stagewise_bridge::protocol::{
    Direction, FirmwareState, FrameDecoder, LinkKey, Setpoint, KEY_LEN, MAX_FRAME,
};
use stagewise_bridge::{Bridge, BridgeConfig, Endpoint};
use stagewise_firmware::{Firmware, FirmwareConfig, KinematicPlant};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn key() -> LinkKey {
    LinkKey::new(&[0x33; KEY_LEN])
}

/// Runs the firmware on the pty master until `stop`; every 7th telemetry frame is preceded by line noise.
fn firmware_on_master(master: OwnedFd, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        let mut f = File::from(master);
        nix::fcntl::fcntl(
            &f,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .expect("nonblocking master");
        // This test is about the serial transport, not the watchdog (firmware/tests/core.rs and the fault suite
        // cover that): timeouts long enough that a loaded machine's scheduling gaps do not trip `Hold`.
        let mut fw = Firmware::new(
            FirmwareConfig {
                link_timeout_us: 2_000_000,
                command_timeout_us: 2_000_000,
                stall_timeout_us: 2_000_000,
                ..FirmwareConfig::cartesian_1khz()
            },
            key(),
            [9; 16],
        );
        let mut plant = KinematicPlant::new([0.0, 0.0, 0.2]);
        let mut dec = FrameDecoder::new(key(), Direction::HostToFirmware);
        let t0 = Instant::now();
        let mut k = 0u64;
        let mut buf = [0u8; 1024];
        let mut out = [0u8; MAX_FRAME];
        while !stop.load(Ordering::Relaxed) {
            let now_us = t0.elapsed().as_micros() as u64;
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut frames = Vec::new();
                dec.feed(&buf[..n], |r| frames.push(r));
                for r in frames {
                    if let Some(r) = fw.receive(r, now_us).reply {
                        if let Ok(n) = fw.seal(&r, &mut out) {
                            let _ = f.write_all(&out[..n]);
                        }
                    }
                }
            }
            k += 1;
            if let Some(t) = fw.tick(now_us.max(k), &mut plant) {
                if t.seq % 7 == 0 {
                    let _ = f.write_all(&[0x42, 0x13, 0x00, 0x99, 0x01]);
                }
                if let Ok(n) = fw.seal_telemetry(t, &mut out) {
                    let _ = f.write_all(&out[..n]);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        fw.counters().accepted_commands as u32
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_over_a_pty_pair() {
    let pty = openpty(None, None).expect("openpty");
    let path = nix::unistd::ttyname(&pty.slave).expect("slave name");
    let stop = Arc::new(AtomicBool::new(false));
    let fw = firmware_on_master(pty.master, stop.clone());
    let endpoint = Endpoint::Serial {
        path,
        baud: 921_600,
    };
    // The host watchdog long too (the transport is under test; emulator.rs tests the watchdog).
    let cfg = BridgeConfig {
        watchdog: Duration::from_secs(2),
        ..BridgeConfig::new(key())
    };
    let bridge = Bridge::connect(&endpoint, cfg)
        .await
        .expect("handshake over serial");
    assert_eq!(bridge.firmware().n_joints, 3);
    bridge.arm().await.expect("arm over serial");
    let start = bridge.telemetry().expect("telemetry").telemetry.ee;
    // At least 300 commands at 1 kHz, and on until 100 telemetry frames came back (bounded): on a loaded machine
    // the firmware thread (it ticks by wall clock) is starved and a full pty buffer drops telemetry.
    let mut iv = tokio::time::interval(Duration::from_millis(1));
    let t0 = Instant::now();
    let mut sent = 0;
    while (sent < 300 || bridge.stats().telemetry_received < 100)
        && t0.elapsed() < Duration::from_secs(10)
    {
        iv.tick().await;
        bridge
            .command(&Setpoint::EeVelocity([0.1, 0.0, 0.0]), 1.0)
            .await
            .expect("command");
        sent += 1;
    }
    let s = bridge
        .next_telemetry(0, Duration::from_secs(1))
        .await
        .expect("telemetry");
    assert_eq!(s.telemetry.state, FirmwareState::Armed);
    assert!(
        // A millimetre at least (the firmware thread ticks by wall clock: a starved one moves less).
        s.telemetry.ee[0] > start[0] + 0.001,
        "moved over serial: {:?} -> {:?}",
        start,
        s.telemetry.ee
    );
    let st = bridge.stats();
    assert!(st.telemetry_received >= 100, "{st:?}");
    assert!(
        st.bad_frames > 0,
        "line noise was injected and dropped: {st:?}"
    );
    bridge.close().await;
    stop.store(true, Ordering::SeqCst);
    let accepted = fw.join().expect("firmware thread");
    assert!(
        accepted > 200,
        "firmware accepted {accepted} of {sent} commands"
    );
    drop(pty.slave);
}

#[test]
fn opening_a_missing_device_names_it() {
    let e =
        stagewise_bridge::Transport::serial(std::path::Path::new("/dev/nonexistent-tty"), 115_200)
            .err()
            .expect("fails");
    assert!(e.to_string().contains("/dev/nonexistent-tty"), "{e}");
}
