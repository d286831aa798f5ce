//! Tests across real processes: the publisher is this test, the subscriber is the `stagewise-stream-probe`
//! binary. Everything listens on 127.0.0.1 with multicast scouting off.

use crate::common;

use common::*;
use stagewise_stream::{
    Encoded, Keys, Mode, Node, PolicyMsg, ProgressMsg, PublisherOptions, StreamConfig,
    SCHEMA_VERSION,
};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

#[test]
fn transitions_with_images_reach_a_subscriber_in_another_process() {
    let port = free_port();
    let node = Node::open(&StreamConfig::loopback(port)).expect("open publisher node");
    let keys = Keys::new("xproc-arm").expect("keys");
    let publisher = node
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    const N: u64 = 150;
    let n = N.to_string();
    let mut probe = Probe::spawn(&[
        "--robot",
        "xproc-arm",
        "--connect",
        &endpoint(port),
        "--count",
        &n,
        "--timeout-s",
        "120",
    ]);
    assert!(
        publisher.wait_for_subscribers(LONG),
        "the probe's subscriber never matched"
    );
    for step in 0..N {
        assert_eq!(
            publisher.publish_transition(
                Encoded::new(transition("xproc-arm", step, true)).expect("encode")
            ),
            stagewise_stream::Published::Queued
        );
        // The default queue (1024) holds all of them; pace a little so that this checks delivery, not drops.
        if step % 32 == 31 {
            assert!(publisher.flush(LONG), "queue did not drain");
        }
    }
    assert!(publisher.flush(LONG), "queue did not drain");
    let lines = probe.lines_until_done(Duration::from_secs(120));
    let got: Vec<&String> = lines.iter().filter(|l| l.starts_with("T ")).collect();
    assert_eq!(got.len() as u64, N, "lines: {lines:?}");
    for (i, line) in got.iter().enumerate() {
        let step = i as u64;
        let want = transition("xproc-arm", step, true);
        assert_eq!(
            field(line, "step"),
            Some(step.to_string().as_str()),
            "{line}"
        );
        assert_eq!(field(line, "robot"), Some("xproc-arm"));
        assert_eq!(field(line, "env"), Some("1"));
        assert_eq!(field(line, "episode"), Some("4"));
        assert_eq!(
            field(line, "action"),
            Some(format!("{:?}", want.action).replace(' ', "").as_str())
        );
        assert_eq!(
            field(line, "reward"),
            Some(want.reward.to_string().as_str())
        );
        assert_eq!(field(line, "gamma"), Some("0.99"));
        assert_eq!(
            field(line, "truncated"),
            Some(want.truncated.to_string().as_str())
        );
        assert_eq!(
            field(line, "stage"),
            Some(format!("{:?}", want.stage).as_str())
        );
        let obs = want.next_obs.as_ref().expect("obs");
        let views: Vec<String> = obs
            .images
            .iter()
            .map(|(n, t)| format!("{n}:96x96x3:{}", checksum(t.data())))
            .collect();
        assert_eq!(
            field(line, "next_views"),
            Some(views.join(",").as_str()),
            "{line}"
        );
        let state = obs.state.to_f32_vec().expect("state");
        assert_eq!(
            field(line, "state"),
            Some(format!("{state:?}").replace(' ', "").as_str())
        );
    }
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("DONE ok={N} err=0").as_str())
    );
    let c = publisher.counters();
    assert_eq!(c.transitions_sent, N);
    assert_eq!(c.transitions_dropped, 0);
    assert_eq!(c.transitions_failed, 0);
}

#[test]
fn a_killed_subscriber_never_stalls_the_publisher_and_drops_are_counted() {
    let port = free_port();
    let node = Node::open(&StreamConfig::loopback(port)).expect("open publisher node");
    let keys = Keys::new("kill-arm").expect("keys");
    let publisher = node
        .publisher(&keys, PublisherOptions::queue(8))
        .expect("publisher");
    // A slow learner: 20 ms per transition (50/s) while we offer them as fast as we can.
    let mut probe = Probe::spawn(&[
        "--robot",
        "kill-arm",
        "--connect",
        &endpoint(port),
        "--slow-ms",
        "20",
    ]);
    assert!(publisher.wait_for_subscribers(LONG), "no subscriber");
    let msg = transition("kill-arm", 0, true);
    let mut attempts = 0u64;
    let mut worst = Duration::ZERO;
    let mut offer = |n: u64, attempts: &mut u64| {
        for _ in 0..n {
            let t0 = Instant::now();
            let _ = publisher.publish_transition(Encoded::new(msg.clone()).expect("encode"));
            worst = worst.max(t0.elapsed());
            *attempts += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    // Phase 1: the subscriber is alive but slow; it must have received something before we kill it.
    offer(1500, &mut attempts);
    let mut received = 0;
    while let Some(line) = probe.next_line(Duration::from_secs(30)) {
        if line.starts_with("T ") {
            received += 1;
            break;
        }
    }
    assert!(received > 0, "the slow subscriber got nothing");
    let before_kill = publisher.counters();
    assert!(
        before_kill.transitions_dropped > 0,
        "a 50/s subscriber fed 1500 x 83 KiB should cause drops: {before_kill:?}"
    );
    // Phase 2: kill it mid-stream and keep publishing.
    probe.kill();
    let t_kill = Instant::now();
    offer(1500, &mut attempts);
    assert!(
        worst < Duration::from_secs(1),
        "publish_transition took {worst:?}: it must never block"
    );
    assert!(
        publisher.flush(Duration::from_secs(60)),
        "the publisher thread is stuck {:?} after the subscriber died: {:?}",
        t_kill.elapsed(),
        publisher.counters()
    );
    let c = publisher.counters();
    assert_eq!(
        c.transitions_sent + c.transitions_dropped + c.transitions_failed,
        attempts,
        "every attempt is counted once: {c:?}"
    );
    assert!(
        c.transitions_sent > before_kill.transitions_sent,
        "publishing went on after the kill: {c:?}"
    );
    // Once the peer is gone, nobody matches any more.
    let deadline = Instant::now() + LONG;
    while publisher.has_subscribers() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!publisher.has_subscribers());
}

#[test]
fn malformed_policy_bytes_are_reported_and_the_subscriber_carries_on() {
    let port = free_port();
    // The learner side puts policies; the probe plays the actor (subscribe_policy).
    let learner = Node::open(&StreamConfig::loopback(port)).expect("open learner node");
    let keys = Keys::new("policy-arm").expect("keys");
    let mut probe = Probe::spawn(&[
        "--robot",
        "policy-arm",
        "--what",
        "policy",
        "--connect",
        &endpoint(port),
        "--count",
        "5",
    ]);
    assert!(
        learner
            .wait_for_subscribers(&keys.policy(), LONG)
            .expect("matching"),
        "the probe's policy subscriber never matched"
    );
    learner
        .put_bytes(&keys.policy(), b"definitely not msgpack".to_vec())
        .expect("put garbage");
    let good = PolicyMsg::new(7, b"onnx bytes stand-in".to_vec());
    let mut newer = stagewise_stream::encode(&good).expect("encode");
    // Patch schema 1 -> 2 (the value right after the `schema` key, a positive fixint).
    let at = newer
        .windows(7)
        .position(|w| w == b"\xa6schema")
        .expect("schema key")
        + 7;
    assert_eq!(newer[at], SCHEMA_VERSION as u8);
    newer[at] = 2;
    learner.put_bytes(&keys.policy(), newer).expect("put newer");
    let mut tampered = good.clone();
    tampered.onnx.push(0);
    learner
        .put(&keys.policy(), &tampered)
        .expect("put tampered");
    learner
        .put(
            &keys.policy(),
            &ProgressMsg::new("policy-arm", 0, 0, 0, &progress()),
        )
        .expect("put wrong kind");
    learner.put(&keys.policy(), &good).expect("put good");
    let lines = probe.lines_until_done(LONG);
    let p: Vec<&String> = lines.iter().filter(|l| l.starts_with("P ")).collect();
    assert_eq!(p.len(), 5, "{lines:?}");
    assert!(
        p[0].starts_with("P err") && p[0].contains("not a Stagewise message"),
        "{}",
        p[0]
    );
    assert!(
        p[1].starts_with("P err") && p[1].contains("schema 2"),
        "{}",
        p[1]
    );
    assert!(
        p[2].starts_with("P err") && p[2].contains("sha256"),
        "{}",
        p[2]
    );
    assert!(
        p[3].starts_with("P err") && p[3].contains("got kind `progress`"),
        "{}",
        p[3]
    );
    assert_eq!(
        p[4].as_str(),
        format!("P ok version=7 sha256={} bytes=19", good.sha256)
    );
    assert_eq!(lines.last().map(String::as_str), Some("DONE ok=1 err=4"));
}

fn progress() -> stagewise_core::Progress {
    stagewise_core::Progress {
        stage: 0,
        stage_probs: vec![1.0],
        tau: 0.0,
        phi: 0.0,
    }
}

#[test]
fn two_clients_talk_through_a_router() {
    let port = free_port();
    let router = Node::open(&StreamConfig::loopback(port).with_mode(Mode::Router)).expect("router");
    let client = |cfg: StreamConfig| {
        Node::open(&StreamConfig {
            mode: Some(Mode::Client),
            listen: Vec::new(),
            ..cfg
        })
        .expect("client")
    };
    let actor = client(StreamConfig::loopback_connect(&[endpoint(port)]));
    let keys = Keys::new("routed-arm").expect("keys");
    let publisher = actor
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    // The learner is another process, a client of the same router.
    let mut probe = Probe::spawn(&[
        "--robot",
        "routed-arm",
        "--mode",
        "client",
        "--connect",
        &endpoint(port),
        "--count",
        "20",
    ]);
    assert!(
        publisher.wait_for_subscribers(LONG),
        "no subscriber through the router"
    );
    for step in 0..20 {
        publisher.publish_transition(
            Encoded::new(transition("routed-arm", step, step.is_multiple_of(2))).expect("encode"),
        );
    }
    assert!(publisher.flush(LONG));
    let lines = probe.lines_until_done(LONG);
    let steps: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("T "))
        .filter_map(|l| field(l, "step"))
        .collect();
    let want: Vec<String> = (0..20).map(|s| s.to_string()).collect();
    assert_eq!(steps, want, "{lines:?}");
    // A second in-process client sees the actor's liveliness token through the router too.
    let learner = client(StreamConfig::loopback_connect(&[endpoint(port)]));
    assert!(learner
        .wait_for_alive(&keys, LONG)
        .expect("liveliness query"));
    // Clients only ever connect to the router: everything above went through it.
    assert_eq!(
        actor.connected_count(),
        1,
        "the actor client is connected to the router only"
    );
    drop(router);
}
