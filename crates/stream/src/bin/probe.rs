//! stagewise-stream-probe: subscribes to one robot's stream and prints one line per message (a test helper
//! for the cross-process tests, and handy by hand).
//!
//! ```text
//! stagewise-stream-probe [--robot NAME] [--what transition|progress|episode|policy]
//!                        [--connect ENDPOINT]... [--listen ENDPOINT]... [--mode peer|client]
//!                        [--zenoh-config FILE] [--count N] [--timeout-s S] [--slow-ms MS]
//! stagewise-stream-probe --put transition|policy [--robot NAME] [--count N] [--first N] [--wait-s S] ...
//! ```
//!
//! Prints `READY <zid>` once subscribed, then per message `T ...`, `G ...` (progress), `E ...` (episode),
//! `P ok ...` / `P err ...` (policy), or `X err ...` for undecodable bytes; `DONE ok=N err=M` at the end
//! (after `--count` messages, or `--timeout-s`). `--zenoh-config` reads a zenoh JSON5 config as
//! `stagewise run --zenoh-config` does (e.g. TLS endpoints and certificates); its mode holds unless `--mode`
//! is given.
//!
//! With `--put` it publishes instead (what a learner or an intruder sends): `--count` messages (default 1),
//! transitions with steps `--first`, `--first`+1, ... or unsigned policies with versions from `--first` (a few
//! bytes standing for the ONNX, hashed). It waits up to `--wait-s` (default 5) for a matching subscriber and
//! puts either way, printing `READY <zid>`, then `PUT key=K n=N matched=yes|no`, then `DONE ok=N err=0`.

use stagewise_core::Transition;
use stagewise_stream::{
    EpisodeMsg, Keys, Mode, Node, PolicyMsg, ProgressMsg, Received, StreamConfig, TransitionMsg,
};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

struct Args {
    robot: String,
    what: String,
    put: Option<String>,
    first: u64,
    wait: Duration,
    config: StreamConfig,
    count: Option<u64>,
    timeout: Duration,
    slow: Duration,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        robot: "robot".into(),
        what: "transition".into(),
        put: None,
        first: 0,
        wait: Duration::from_secs(5),
        config: StreamConfig {
            mode: Some(Mode::Peer),
            multicast_scouting: Some(false),
            ..StreamConfig::default()
        },
        count: None,
        timeout: Duration::from_secs(300),
        slow: Duration::ZERO,
    };
    let mut config_file: Option<std::path::PathBuf> = None;
    let mut mode_given = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--robot" => a.robot = value()?,
            "--what" => a.what = value()?,
            "--put" => a.put = Some(value()?),
            "--first" => a.first = value()?.parse().map_err(|e| format!("--first: {e}"))?,
            "--wait-s" => {
                a.wait =
                    Duration::from_secs_f64(value()?.parse().map_err(|e| format!("--wait-s: {e}"))?)
            }
            "--connect" => a.config.connect.push(value()?),
            "--listen" => a.config.listen.push(value()?),
            "--zenoh-config" => config_file = Some(value()?.into()),
            "--mode" => {
                mode_given = true;
                a.config.mode = Some(match value()?.as_str() {
                    "peer" => Mode::Peer,
                    "client" => Mode::Client,
                    other => return Err(format!("--mode {other}: expected peer or client")),
                })
            }
            "--count" => a.count = Some(value()?.parse().map_err(|e| format!("--count: {e}"))?),
            "--timeout-s" => {
                a.timeout = Duration::from_secs_f64(
                    value()?.parse().map_err(|e| format!("--timeout-s: {e}"))?,
                )
            }
            "--slow-ms" => {
                a.slow =
                    Duration::from_millis(value()?.parse().map_err(|e| format!("--slow-ms: {e}"))?)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if config_file.is_some() && !mode_given {
        a.config.mode = None;
    }
    a.config.config_file = config_file;
    if a.config.listen.is_empty() && a.config.mode == Some(Mode::Peer) {
        a.config.listen.push("tcp/127.0.0.1:0".into());
    }
    Ok(a)
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |s, &b| s.wrapping_mul(31).wrapping_add(u64::from(b)))
}

fn describe_transition(m: &TransitionMsg) -> String {
    let views = |o: &Option<stagewise_stream::ObservationMsg>| match o {
        None => "-".to_string(),
        Some(o) => o
            .images
            .iter()
            .map(|(n, t)| {
                let s: Vec<String> = t.shape().iter().map(u64::to_string).collect();
                format!("{n}:{}:{}", s.join("x"), checksum(t.data()))
            })
            .collect::<Vec<_>>()
            .join(","),
    };
    let state = m
        .next_obs
        .as_ref()
        .and_then(|o| o.state.to_f32_vec().ok())
        .map_or_else(|| "-".into(), |v| format!("{v:?}").replace(' ', ""));
    format!(
        "T robot={} env={} episode={} step={} action={:?} reward={} phi={} phi_next={} gamma={} \
         terminated={} truncated={} success={} stage={:?} next_views={} state={} stamp_ns={}",
        m.robot,
        m.env,
        m.episode,
        m.step,
        m.action,
        m.reward,
        m.phi,
        m.phi_next,
        m.gamma,
        m.terminated,
        m.truncated,
        m.success,
        m.stage,
        views(&m.next_obs),
        state,
        m.stamp_ns
    )
    .replace(", ", ",")
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("stagewise-stream-probe: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("stagewise-stream-probe: {e}");
        std::process::exit(1);
    }
}

/// `--put`: publishes `--count` transitions or policies.
fn put(args: &Args, what: &str) -> Result<(), Box<dyn std::error::Error>> {
    let keys = Keys::new(&args.robot)?;
    let node = Node::open(&args.config)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {}", node.zid())?;
    out.flush()?;
    let n = args.count.unwrap_or(1);
    let key = match what {
        "transition" => keys.transition(),
        "policy" => keys.policy(),
        other => return Err(format!("--put {other}: expected transition or policy").into()),
    };
    let matched = node.wait_for_subscribers(&key, args.wait)?;
    for i in 0..n {
        let k = args.first + i;
        if what == "transition" {
            let t = Transition {
                env: 0,
                episode: 0,
                step: k,
                action: vec![0.0; 3],
                reward: 0.0,
                task_reward: 0.0,
                phi: 0.0,
                phi_next: 0.0,
                gamma: 0.99,
                shaping_scale: 1.0,
                terminated: false,
                truncated: false,
                success: false,
                stage: None,
            };
            node.put(&key, &TransitionMsg::from_transition(&args.robot, &t))?;
        } else {
            let onnx = format!("policy {k} from {}", node.zid()).into_bytes();
            node.put(&key, &PolicyMsg::new(k, onnx))?;
        }
    }
    // Let zenoh hand the messages to the network before the session closes.
    std::thread::sleep(Duration::from_millis(300));
    writeln!(
        out,
        "PUT key={key} n={n} matched={}",
        if matched { "yes" } else { "no" }
    )?;
    node.close()?;
    writeln!(out, "DONE ok={n} err=0")?;
    out.flush()?;
    Ok(())
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(what) = args.put.clone() {
        return put(&args, &what);
    }
    let keys = Keys::new(&args.robot)?;
    let node = Node::open(&args.config)?;
    let (tx, rx) = mpsc::channel::<String>();
    let tx = Arc::new(Mutex::new(tx));
    let ok = Arc::new(AtomicU64::new(0));
    let err = Arc::new(AtomicU64::new(0));
    let slow = args.slow;
    let emit = {
        let (tx, ok, err) = (tx.clone(), ok.clone(), err.clone());
        move |line: Result<String, String>| {
            match &line {
                Ok(_) => ok.fetch_add(1, Ordering::AcqRel),
                Err(_) => err.fetch_add(1, Ordering::AcqRel),
            };
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(line.unwrap_or_else(|e| e));
            }
            if !slow.is_zero() {
                std::thread::sleep(slow);
            }
        }
    };
    let _sub = match args.what.as_str() {
        "transition" => {
            node.subscribe::<TransitionMsg, _>(&keys.transition(), move |r: Received<_>| {
                emit(
                    r.msg
                        .map(|m| describe_transition(&m))
                        .map_err(|e| format!("X err {e}")),
                )
            })?
        }
        "progress" => {
            node.subscribe::<ProgressMsg, _>(&keys.progress(), move |r: Received<_>| {
                emit(
                    r.msg
                        .map(|m| {
                            format!(
                                "G env={} step={} stage={} phi={}",
                                m.env, m.step, m.stage, m.phi
                            )
                        })
                        .map_err(|e| format!("X err {e}")),
                )
            })?
        }
        "episode" => node.subscribe::<EpisodeMsg, _>(&keys.episode(), move |r: Received<_>| {
            emit(
                r.msg
                    .map(|m| {
                        format!(
                            "E env={} episode={} return={} length={} success={}",
                            m.env, m.episode, m.episode_return, m.length, m.success
                        )
                    })
                    .map_err(|e| format!("X err {e}")),
            )
        })?,
        "policy" => node.subscribe_policy(&keys, move |r| {
            emit(
                r.map(|p| {
                    format!(
                        "P ok version={} sha256={} bytes={}",
                        p.version,
                        p.sha256,
                        p.onnx.len()
                    )
                })
                .map_err(|e| format!("P err {e}")),
            )
        })?,
        other => {
            return Err(
                format!("--what {other}: expected transition, progress, episode or policy").into(),
            )
        }
    };
    drop(tx);
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {}", node.zid())?;
    out.flush()?;
    let deadline = Instant::now() + args.timeout;
    let mut lines = 0u64;
    while args.count.is_none_or(|n| lines < n) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match rx.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(line) => {
                lines += 1;
                writeln!(out, "{line}")?;
                out.flush()?;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    writeln!(
        out,
        "DONE ok={} err={}",
        ok.load(Ordering::Acquire),
        err.load(Ordering::Acquire)
    )?;
    out.flush()?;
    Ok(())
}
