//! Loopback throughput and latency: Stagewise messages next to plain zenoh put/subscribe of the same payload
//! sizes, in one run. `cargo bench -p stagewise-stream --bench loopback` (release; `LOOPBACK_ONLY=progress` or
//! `=transition` for one payload). Two zenoh peers in this process, connected over TCP on 127.0.0.1, multicast
//! scouting off.
//!
//! - throughput: a burst of N messages; rate = delivered / (last arrival - first send).
//! - latency: one message at a time (the next is sent when the previous arrived); one-way latency from the
//!   send stamp (taken before encoding) to the end of decoding on the subscriber side; p50/p99.
//!
//! Stagewise progress goes through `Encoded::new` + `RobotPublisher::publish_progress` (encode + put, `Drop`).
//! Transitions go through `Encoded::new` + `publish_transition` (`encode_parts` + put: the images' buffers are
//! parts of the payload, not copied; `Block`) to four subscribers, each on its own robot's key, in the same
//! interleaved runs. The publishers are set up as `stagewise run` sets them up when it runs as fast as it can,
//! `PublisherOptions::backpressure()` (the sending thread puts, as raw zenoh's does), except `deep queue`:
//!
//! - `stagewise`: `Node::subscribe_transitions_borrowed`, the decoder with the tensors borrowed (their data are
//!   slices of the payload, `TransitionMsg<Borrowed>`);
//! - `deep queue`: the same with the publisher an actor on a fixed rate gets (a bounded queue to a publisher
//!   thread that never makes the sender wait; 65536 deep here, so that the burst drops nothing);
//! - `owned decode`: `Node::subscribe`, the same decoder with the tensors owned (copied out of the payload);
//! - `logged+owned`: the sender also copies the encoded message into one buffer, as the actor does for its
//!   episode log (`Encoded::to_vec`), then publishes it; owned decode.
//!
//! Besides rate and latency the table gives the process's CPU time per delivered message (all threads, from
//! `/proc/self/task/*/schedstat`; median of the runs).
//!
//! Plain zenoh puts a pre-sized byte buffer with the same congestion control and only reads an 8-byte stamp on
//! arrival (`payload().to_bytes()`, which copies when zenoh delivers the payload in pieces: the bench counts
//! how often).

use stagewise_core::{Frame, Observation, Progress, Transition, View};

// The allocator the `stagewise` binary uses (see its main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use stagewise_stream::wire::Borrowed;
use stagewise_stream::{
    decode, encode, now_ns, Encoded, Keys, Node, ObservationMsg, ProgressMsg, PublisherOptions,
    StreamConfig, TransitionMsg,
};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zenoh::qos::CongestionControl;
use zenoh::Wait;

#[derive(Default)]
struct Rx {
    count: u64,
    last_ns: u64,
    lat_ns: Vec<u64>,
}

type Shared = Arc<Mutex<Rx>>;

fn record(rx: &Shared, stamp: u64) {
    let now = now_ns();
    if let Ok(mut r) = rx.lock() {
        r.count += 1;
        r.last_ns = now;
        r.lat_ns.push(now.saturating_sub(stamp));
    }
}

/// CPU time of all of this process's threads so far, in ns (Linux `schedstat`; 0 where it cannot be read).
/// On a machine where the bench's threads compete with other work for the cores, CPU time per message says
/// what a path costs better than its rate.
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn reset(rx: &Shared) {
    if let Ok(mut r) = rx.lock() {
        *r = Rx::default();
    }
}

fn count(rx: &Shared) -> u64 {
    rx.lock().map(|r| r.count).unwrap_or(0)
}

/// Waits until `want` arrived or nothing arrived for `idle`.
fn wait_for(rx: &Shared, want: u64, idle: Duration) {
    let mut last = count(rx);
    let mut since = Instant::now();
    loop {
        let c = count(rx);
        if c >= want {
            return;
        }
        if c != last {
            last = c;
            since = Instant::now();
        } else if since.elapsed() > idle {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

struct Result {
    sent: u64,
    delivered: u64,
    rate: f64,
}

fn summarize(rx: &Shared, sent: u64, t0_ns: u64) -> Result {
    let r = rx.lock().expect("stats lock");
    let secs = (r.last_ns.saturating_sub(t0_ns)) as f64 * 1e-9;
    Result {
        sent,
        delivered: r.count,
        rate: if secs > 0.0 {
            r.count as f64 / secs
        } else {
            0.0
        },
    }
}

fn percentiles(rx: &Shared) -> (f64, f64) {
    let mut v = rx.lock().expect("stats lock").lat_ns.clone();
    v.sort_unstable();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 * 1e-3;
    (p(0.5), p(0.99))
}

fn observation(step: u64) -> Observation {
    Observation {
        step,
        time: 0.0,
        views: ["front", "wrist", "top"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                View::new(
                    *n,
                    Frame::from_fn(96, 96, |x, y| {
                        image::Rgb([(x + i as u32) as u8, y as u8, (x ^ y) as u8])
                    }),
                )
            })
            .collect(),
        state: vec![0.1; 7],
    }
}

fn transition_msg() -> TransitionMsg {
    let t = Transition {
        env: 0,
        episode: 1,
        step: 2,
        action: vec![0.1; 7],
        reward: 0.5,
        task_reward: 0.0,
        phi: 0.4,
        phi_next: 0.41,
        gamma: 0.99,
        shaping_scale: 1.0,
        terminated: false,
        truncated: false,
        success: false,
        stage: Some(1),
    };
    TransitionMsg::from_transition("bench", &t)
        .with_next_obs(ObservationMsg::from_observation_owned(observation(3)))
}

fn progress_msg() -> ProgressMsg {
    let p = Progress {
        stage: 1,
        stage_probs: vec![0.2, 0.5, 0.3],
        tau: 0.5,
        phi: 0.45,
    };
    ProgressMsg::new("bench", 0, 1, 2, &p)
}

fn raw_payload(len: usize) -> Vec<u8> {
    let mut v = vec![7u8; len.max(8)];
    v[..8].copy_from_slice(&now_ns().to_le_bytes());
    v
}

fn stamp_of(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes)
}

/// A path under test: its name, what its subscriber records, and how to send one message.
type BenchPath<'a> = (&'static str, &'a Shared, &'a dyn Fn(Kind));

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Progress,
    Transition,
}

fn main() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let a = Node::open(&StreamConfig::loopback(port)).expect("publisher node");
    let b = Node::open(&StreamConfig::loopback_connect(&[format!(
        "tcp/127.0.0.1:{port}"
    )]))
    .expect("subscriber node");
    let keys = Keys::new("bench").expect("keys");
    // Stagewise publishers are configured as `stagewise run` configures them when it runs as fast as it can
    // (the caller puts); `deep queue` is the configuration of an actor on a fixed rate (a queue to a publisher
    // thread that never makes the caller wait, here deep enough that the burst drops nothing).
    let fast = || PublisherOptions {
        liveliness: false,
        ..PublisherOptions::backpressure()
    };
    let publisher = a.publisher(&keys, fast()).expect("publisher");

    // Subscribers: Stagewise ones decode fully; raw ones read the stamp.
    let sw_prog: Shared = Default::default();
    let sw_tr: Shared = Default::default();
    let raw_prog: Shared = Default::default();
    let raw_tr: Shared = Default::default();
    let _s1 = {
        let rx = sw_prog.clone();
        b.subscribe::<ProgressMsg, _>(&keys.progress(), move |r| {
            if let Ok(m) = r.msg {
                record(&rx, m.stamp_ns)
            }
        })
        .expect("sub")
    };
    // The stamp is recorded after the decode and validation, as for every Stagewise path.
    let ref_sub = |key: String, rx: Shared| {
        b.subscribe_transitions_borrowed(&key, move |r| {
            if let Ok(m) = r.msg {
                record(&rx, m.stamp_ns)
            }
        })
        .expect("sub")
    };
    let _s2 = ref_sub(keys.transition(), sw_tr.clone());
    // Transitions decoded into owned tensors: one publisher fed as the actor without a log feeds it, one as the
    // actor with a log does (the encoded message also copied into one buffer).
    let owned_keys = Keys::new("bench-owned").expect("keys");
    let owned_publisher = a.publisher(&owned_keys, fast()).expect("publisher");
    let enc_keys = Keys::new("bench-encoded").expect("keys");
    let enc_publisher = a.publisher(&enc_keys, fast()).expect("publisher");
    let deep_keys = Keys::new("bench-deep").expect("keys");
    let deep_publisher = a
        .publisher(
            &deep_keys,
            PublisherOptions {
                liveliness: false,
                ..PublisherOptions::queue(1 << 16)
            },
        )
        .expect("publisher");
    let owned_tr: Shared = Default::default();
    let enc_tr: Shared = Default::default();
    let deep_tr: Shared = Default::default();
    let _s8 = ref_sub(deep_keys.transition(), deep_tr.clone());
    let owned_sub = |key: String, rx: Shared| {
        b.subscribe::<TransitionMsg, _>(&key, move |r| {
            if let Ok(m) = r.msg {
                record(&rx, m.stamp_ns)
            }
        })
        .expect("sub")
    };
    let _s6 = owned_sub(owned_keys.transition(), owned_tr.clone());
    let _s7 = owned_sub(enc_keys.transition(), enc_tr.clone());
    // How many raw transition payloads zenoh delivers in more than one piece (then `to_bytes` copies).
    let raw_pieces = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let raw_sub = |key: &'static str, rx: Shared, pieces: Option<Arc<(AtomicU64, AtomicU64)>>| {
        b.session()
            .declare_subscriber(key)
            .callback(move |s| {
                record(&rx, stamp_of(&s.payload().to_bytes()));
                if let Some(p) = &pieces {
                    p.0.fetch_add(1, Ordering::Relaxed);
                    if s.payload().slices().nth(1).is_some() {
                        p.1.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .wait()
            .expect("raw sub")
    };
    let _s3 = raw_sub("bench/raw/progress", raw_prog.clone(), None);
    let _s4 = raw_sub(
        "bench/raw/transition",
        raw_tr.clone(),
        Some(raw_pieces.clone()),
    );
    let raw_pub = |key: &'static str, cc| {
        a.session()
            .declare_publisher(key)
            .congestion_control(cc)
            .wait()
            .expect("raw pub")
    };
    let rp_prog = raw_pub("bench/raw/progress", CongestionControl::Drop);
    let rp_tr = raw_pub("bench/raw/transition", CongestionControl::Block);
    for (what, ok) in [
        (
            "progress",
            publisher.wait_for_subscribers(Duration::from_secs(30)),
        ),
        (
            "raw",
            a.wait_for_subscribers("bench/raw/transition", Duration::from_secs(30))
                .unwrap_or(false),
        ),
        (
            "raw",
            a.wait_for_subscribers("bench/raw/progress", Duration::from_secs(30))
                .unwrap_or(false),
        ),
        (
            "progress",
            a.wait_for_subscribers(&keys.progress(), Duration::from_secs(30))
                .unwrap_or(false),
        ),
        (
            "owned transition",
            owned_publisher.wait_for_subscribers(Duration::from_secs(30)),
        ),
        (
            "encoded transition",
            enc_publisher.wait_for_subscribers(Duration::from_secs(30)),
        ),
        (
            "deep-queue transition",
            deep_publisher.wait_for_subscribers(Duration::from_secs(30)),
        ),
        (
            "transition",
            a.wait_for_subscribers(&keys.transition(), Duration::from_secs(30))
                .unwrap_or(false),
        ),
    ] {
        assert!(ok, "{what} subscriber did not match");
    }

    let tmsg = transition_msg();
    let pmsg = progress_msg();
    let t_len = encode(&tmsg).expect("encode").len();
    let p_len = encode(&pmsg).expect("encode").len();
    assert!(decode::<TransitionMsg>(&encode(&tmsg).expect("encode")).is_ok());
    let n_for = |k: Kind| {
        if k == Kind::Progress {
            100_000u64
        } else {
            3_000
        }
    };
    let lat_n = |k: Kind| if k == Kind::Progress { 2_000u64 } else { 1_000 };

    let sw_send = |k: Kind| match k {
        Kind::Progress => {
            let mut m = pmsg.clone();
            m.stamp_ns = now_ns();
            let _ = publisher.publish_progress(Encoded::new(m).expect("encode"));
        }
        Kind::Transition => {
            let mut m = tmsg.clone();
            m.stamp_ns = now_ns();
            let _ = publisher.publish_transition(Encoded::new(m).expect("encode"));
        }
    };
    let deep_send = |_: Kind| {
        let mut m = tmsg.clone();
        m.stamp_ns = now_ns();
        let _ = deep_publisher.publish_transition(Encoded::new(m).expect("encode"));
    };
    let owned_send = |_: Kind| {
        let mut m = tmsg.clone();
        m.stamp_ns = now_ns();
        let _ = owned_publisher.publish_transition(Encoded::new(m).expect("encode"));
    };
    let enc_send = |_: Kind| {
        let mut m = tmsg.clone();
        m.stamp_ns = now_ns();
        let e = Encoded::new(m).expect("encode");
        std::hint::black_box(e.to_vec());
        let _ = enc_publisher.publish_transition(e);
    };
    let raw_send = |k: Kind| match k {
        Kind::Progress => {
            let _ = rp_prog.put(raw_payload(p_len)).wait();
        }
        Kind::Transition => {
            let _ = rp_tr.put(raw_payload(t_len)).wait();
        }
    };

    println!("stagewise-stream loopback bench: progress message {p_len} B, transition (3 x 96x96 RGB + state) {t_len} B");
    println!("two zenoh peers in one process over tcp/127.0.0.1; median of 5 interleaved runs");
    println!();
    println!(
        "{:<11} {:<18} {:>12} {:>10} {:>11} {:>10} {:>10} {:>11}",
        "payload", "path", "msg/s", "MB/s", "delivered", "p50 us", "p99 us", "cpu us/msg"
    );
    // `LOOPBACK_ONLY=progress` (or `transition`) runs one payload only.
    let only = std::env::var("LOOPBACK_ONLY").unwrap_or_default();
    for kind in [Kind::Progress, Kind::Transition] {
        let (name, len) = match kind {
            Kind::Progress => ("progress", p_len),
            Kind::Transition => ("transition", t_len),
        };
        if !only.is_empty() && only != name {
            continue;
        }
        // Path 0 is raw zenoh, path 1 Stagewise; the ratios are to path 0.
        let paths: Vec<BenchPath> = match kind {
            Kind::Progress => vec![
                ("zenoh raw", &raw_prog, &raw_send),
                ("stagewise", &sw_prog, &sw_send),
            ],
            Kind::Transition => vec![
                ("zenoh raw", &raw_tr, &raw_send),
                ("stagewise", &sw_tr, &sw_send),
                ("owned decode", &owned_tr, &owned_send),
                ("deep queue", &deep_tr, &deep_send),
                ("logged+owned", &enc_tr, &enc_send),
            ],
        };
        let mut rates: Vec<Vec<(f64, u64, u64)>> = vec![Vec::new(); paths.len()];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
        let mut lats: Vec<(f64, f64)> = vec![(0.0, 0.0); paths.len()];
        for rep in 0..5 {
            // Raw first, then the other paths in an order that rotates from run to run: a path's burst finds
            // the allocator in the state the burst before it left (e.g. 250 MB of queued transitions just
            // freed, or not), and no path should always come second.
            let others = paths.len() - 1;
            let order = std::iter::once(0).chain((0..others).map(|k| 1 + (k + rep) % others));
            for i in order {
                let (_, rx, send) = &paths[i];
                // Throughput: a burst.
                reset(rx);
                let n = n_for(kind);
                let c0 = cpu_ns();
                let t0 = now_ns();
                for _ in 0..n {
                    send(kind);
                }
                for p in [
                    &publisher,
                    &owned_publisher,
                    &enc_publisher,
                    &deep_publisher,
                ] {
                    let _ = p.flush(Duration::from_secs(120));
                }
                wait_for(rx, n, Duration::from_secs(2));
                let r = summarize(rx, n, t0);
                cpu[i].push(cpu_ns().saturating_sub(c0) as f64 / r.delivered.max(1) as f64 * 1e-3);
                rates[i].push((r.rate, r.delivered, r.sent));
                // Latency: one at a time (first run only).
                if rep == 0 {
                    reset(rx);
                    for j in 0..lat_n(kind) {
                        send(kind);
                        wait_for(rx, j + 1, Duration::from_secs(1));
                    }
                    lats[i] = percentiles(rx);
                }
            }
        }
        let run_rates: Vec<Vec<f64>> = rates
            .iter()
            .map(|r| r.iter().map(|x| x.0).collect())
            .collect();
        let mut medians = vec![0.0f64; paths.len()];
        for (i, (path, _, _)) in paths.iter().enumerate() {
            rates[i].sort_by(|x, y| x.0.total_cmp(&y.0));
            let (rate, delivered, sent) = rates[i][rates[i].len() / 2];
            cpu[i].sort_by(f64::total_cmp);
            let cpu_med = cpu[i][cpu[i].len() / 2];
            medians[i] = rate;
            println!(
                "{:<11} {:<18} {:>12.0} {:>10.1} {:>5}/{:<5} {:>10.1} {:>10.1} {:>11.1}",
                name,
                path,
                rate,
                rate * len as f64 / 1e6,
                delivered,
                sent,
                lats[i].0,
                lats[i].1,
                cpu_med
            );
        }
        // Runs are interleaved (raw, then the others, then raw again, ...): the ratio of each run to the raw
        // run of the same round shares the machine's load of that moment; report their median next to the
        // ratio of the medians.
        for (i, (path, _, _)) in paths.iter().enumerate().skip(1) {
            let mut pairs: Vec<f64> = (0..run_rates[0].len())
                .map(|k| run_rates[i][k] / run_rates[0][k].max(1e-9))
                .collect();
            let per_run: Vec<String> = pairs.iter().map(|r| format!("{r:.2}")).collect();
            pairs.sort_by(f64::total_cmp);
            println!(
                "{:<11} {:<18} {:>12.2}x  (median of per-run ratios {:.2}x; runs {})",
                name,
                format!("{path}/raw"),
                medians[i] / medians[0].max(1e-9),
                pairs[pairs.len() / 2],
                per_run.join(" ")
            );
        }
    }
    // Codec cost alone (no zenoh): encode and decode per message.
    let codec = |n: u32, enc: &dyn Fn() -> Vec<u8>, dec: &dyn Fn(&[u8]) -> bool| {
        let bytes = enc();
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(enc());
        }
        let e = t.elapsed().as_nanos() as f64 / f64::from(n);
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(dec(&bytes));
        }
        (e, t.elapsed().as_nanos() as f64 / f64::from(n))
    };
    let (pe, pd) = codec(200_000, &|| encode(&pmsg).expect("encode"), &|b| {
        decode::<ProgressMsg>(b).is_ok()
    });
    let (te, td) = codec(2_000, &|| encode(&tmsg).expect("encode"), &|b| {
        decode::<TransitionMsg>(b).is_ok()
    });
    let (_, tr) = codec(2_000, &|| encode(&tmsg).expect("encode"), &|b| {
        decode::<TransitionMsg<Borrowed>>(b).is_ok()
    });
    // `encode_parts` consumes the message: timed on clones made beforehand (and dropped with the parts, as
    // `encode`'s timing drops its buffer), 100 at a time.
    let (mut tp, mut tc) = (0.0, 0.0);
    for _ in 0..20 {
        let t = Instant::now();
        let msgs: Vec<TransitionMsg> = (0..100).map(|_| tmsg.clone()).collect();
        tc += t.elapsed().as_nanos() as f64 / 2_000.0;
        let t = Instant::now();
        for m in msgs {
            std::hint::black_box(m.encode_parts().expect("encode"));
        }
        tp += t.elapsed().as_nanos() as f64 / 2_000.0;
    }
    println!();
    println!(
        "codec alone: progress encode {pe:.0} ns, decode {pd:.0} ns; transition encode {:.1} us, decode \
         (owned) {:.1} us, encode_parts {:.1} us, decode borrowed {:.1} us (clone of the message {:.1} us)",
        te / 1e3,
        td / 1e3,
        tp / 1e3,
        tr / 1e3,
        tc / 1e3,
    );
    let (all, pieces) = (
        raw_pieces.0.load(Ordering::Relaxed),
        raw_pieces.1.load(Ordering::Relaxed),
    );
    println!("raw transition payloads delivered in more than one piece: {pieces} of {all}");
    let c = publisher.counters();
    println!();
    println!(
        "stagewise counters: transitions sent {} dropped {} failed {}; progress sent {} failed {}",
        c.transitions_sent,
        c.transitions_dropped,
        c.transitions_failed,
        c.progress_sent,
        c.progress_failed
    );
}
