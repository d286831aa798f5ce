//! Helpers shared by the integration tests: free ports, test messages, the probe subprocess.
#![allow(dead_code)]

use stagewise_core::{Frame, Observation, Transition, View};
use stagewise_stream::{ObservationMsg, TransitionMsg};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A TCP port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

pub fn endpoint(port: u16) -> String {
    format!("tcp/127.0.0.1:{port}")
}

pub fn frame(w: u32, h: u32, seed: u64) -> Frame {
    Frame::from_fn(w, h, |x, y| {
        let v = (x as u64 * 7 + y as u64 * 13 + seed * 31) as u8;
        image::Rgb([v, v.wrapping_add(1), v.wrapping_add(2)])
    })
}

/// Three 96x96 views (front, wrist, top) and a 7-value state.
pub fn observation(step: u64) -> Observation {
    Observation {
        step,
        time: step as f64 * 0.05,
        views: ["front", "wrist", "top"]
            .iter()
            .enumerate()
            .map(|(i, n)| View::new(*n, frame(96, 96, step * 3 + i as u64)))
            .collect(),
        state: (0..7).map(|i| i as f32 * 0.5 + step as f32).collect(),
    }
}

pub fn transition(robot: &str, step: u64, with_images: bool) -> TransitionMsg {
    let t = Transition {
        env: 1,
        episode: 4,
        step,
        action: vec![step as f32 * 0.25, -1.0, 0.5],
        reward: step as f64 * 0.5,
        task_reward: 0.0,
        phi: 0.25,
        phi_next: 0.5,
        gamma: 0.99,
        shaping_scale: 1.0,
        terminated: false,
        truncated: step % 2 == 1,
        success: step.is_multiple_of(3),
        stage: Some((step % 4) as u32),
    };
    let m = TransitionMsg::from_transition(robot, &t);
    if with_images {
        m.with_next_obs(ObservationMsg::from_observation_owned(observation(
            step + 1,
        )))
    } else {
        m
    }
}

pub fn checksum(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |s, &b| s.wrapping_mul(31).wrapping_add(u64::from(b)))
}

/// The probe subprocess; killed when dropped.
pub struct Probe {
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Probe {
    pub fn spawn(args: &[&str]) -> Probe {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stagewise-stream-probe"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn stagewise-stream-probe");
        let stdout: ChildStdout = child.stdout.take().expect("probe stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut p = Probe { child, lines: rx };
        let ready = p
            .next_line(Duration::from_secs(60))
            .expect("probe says READY");
        assert!(ready.starts_with("READY"), "probe said {ready:?}");
        p
    }

    pub fn next_line(&mut self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Lines until `DONE ...` (included) or the timeout.
    pub fn lines_until_done(&mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while let Some(line) = self.next_line(deadline.saturating_duration_since(Instant::now())) {
            let done = line.starts_with("DONE");
            out.push(line);
            if done {
                break;
            }
        }
        out
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `key=value` field of a probe line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}
