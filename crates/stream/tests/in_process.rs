//! Two zenoh sessions in one process (peer to peer over 127.0.0.1, scouting off): progress, episodes, the
//! policy subscription, the remote env queryables and liveliness.

use crate::common;

use common::*;
use stagewise_core::{
    BoxSpec, Env, EnvError, EnvSpec, Observation, Progress, StepInfo, StepResult, ViewSpec,
};
use stagewise_stream::{
    Encoded, EnvAdapter, EpisodeMsg, Keys, Node, PolicyMsg, ProgressMsg, Published,
    PublisherOptions, ResetReply, ResetRequest, Schema, StepReply, StreamConfig, StreamError,
    TransitionMsg, WireError,
};
use std::time::Duration;
use zenoh::Wait;

const LONG: Duration = Duration::from_secs(60);

fn pair() -> (Node, Node) {
    let port = free_port();
    let a = Node::open(&StreamConfig::loopback(port)).expect("node a");
    let b = Node::open(&StreamConfig::loopback_connect(&[endpoint(port)])).expect("node b");
    (a, b)
}

#[test]
fn progress_and_episodes_arrive() {
    let (actor, learner) = pair();
    let keys = Keys::new("inproc-arm").expect("keys");
    let publisher = actor
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    let (_ps, progress_rx) = learner
        .subscribe_channel::<ProgressMsg>(&Keys::any_robot("progress"))
        .expect("subscribe progress");
    let (_es, episode_rx) = learner
        .subscribe_channel::<EpisodeMsg>(&keys.episode())
        .expect("subscribe episodes");
    assert!(actor
        .wait_for_subscribers(&keys.progress(), LONG)
        .expect("matching"));
    assert!(actor
        .wait_for_subscribers(&keys.episode(), LONG)
        .expect("matching"));
    let p = Progress {
        stage: 2,
        stage_probs: vec![0.1, 0.2, 0.7],
        tau: 0.3,
        phi: 0.8,
    };
    for step in 0..10 {
        let msg = ProgressMsg::new("inproc-arm", 0, 1, step, &p);
        publisher
            .publish_progress(Encoded::new(msg).expect("encode"))
            .expect("progress put");
    }
    let ep = EpisodeMsg {
        schema: Schema,
        kind: Default::default(),
        robot: "inproc-arm".into(),
        env: 0,
        episode: 1,
        episode_return: 2.5,
        task_return: 1.0,
        length: 10,
        success: true,
        terminated: true,
        truncated: false,
        final_phi: 0.96,
        stamp_ns: stagewise_stream::now_ns(),
    };
    publisher.publish_episode(Encoded::new(ep.clone()).expect("encode"));
    let ep2 = EpisodeMsg {
        episode: 2,
        ..ep.clone()
    };
    publisher.publish_episode(Encoded::new(ep2.clone()).expect("encode"));
    assert!(publisher.flush(LONG));
    // Progress may be dropped under congestion; on an idle loopback all 10 arrive, in order.
    let mut steps = Vec::new();
    while steps.len() < 10 {
        let r = progress_rx.recv_timeout(LONG).expect("progress");
        assert_eq!(r.key, "stagewise/inproc-arm/progress");
        let m = r.msg.expect("decoded");
        assert_eq!(m.to_progress(), p);
        steps.push(m.step);
    }
    assert_eq!(steps, (0..10).collect::<Vec<_>>());
    let got = episode_rx.recv_timeout(LONG).expect("episode");
    assert_eq!(got.msg.expect("decoded"), ep);
    let got = episode_rx.recv_timeout(LONG).expect("second episode");
    assert_eq!(got.msg.expect("decoded"), ep2);
    let c = publisher.counters();
    assert_eq!(
        (c.progress_sent, c.episodes_sent, c.episodes_dropped),
        (10, 2, 0)
    );
}

#[test]
fn policy_subscription_reports_bad_bytes_and_keeps_going() {
    let (actor, learner) = pair();
    let keys = Keys::new("policy-inproc").expect("keys");
    let (_sub, rx) = actor
        .subscribe_policy_channel(&keys)
        .expect("subscribe policy");
    assert!(learner
        .wait_for_subscribers(&keys.policy(), LONG)
        .expect("matching"));
    learner
        .put_bytes(&keys.policy(), vec![0xc1, 0x00])
        .expect("put");
    let signed = PolicyMsg::new(2, vec![1; 1000]).with_signature(vec![9; 64]);
    learner.put(&keys.policy(), &signed).expect("put");
    let first = rx.recv_timeout(LONG).expect("first");
    assert!(
        matches!(first, Err(WireError::NotAMessage { .. })),
        "{first:?}"
    );
    let second = rx
        .recv_timeout(LONG)
        .expect("second")
        .expect("a good policy");
    assert_eq!(second, signed);
}

/// A tiny deterministic env: one 4x3 view, state = [position], action moves the position.
struct Line {
    spec: EnvSpec,
    pos: f32,
    step: u64,
    started: bool,
}

impl Line {
    fn new() -> Self {
        Self {
            spec: EnvSpec {
                task: "line".into(),
                action: BoxSpec {
                    names: vec!["dx".into()],
                    low: vec![-1.0],
                    high: vec![1.0],
                },
                state: BoxSpec {
                    names: vec!["x".into()],
                    low: vec![-10.0],
                    high: vec![10.0],
                },
                views: vec![ViewSpec {
                    name: "cam".into(),
                    width: 4,
                    height: 3,
                }],
                stage_names: vec![],
                control_hz: 10.0,
                max_steps: 5,
            },
            pos: 0.0,
            step: 0,
            started: false,
        }
    }
    fn obs(&self) -> Observation {
        Observation {
            step: self.step,
            time: self.step as f64 * 0.1,
            views: vec![stagewise_core::View::new("cam", frame(4, 3, self.step))],
            state: vec![self.pos],
        }
    }
}

impl Env for Line {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        self.pos = seed as f32;
        self.step = 0;
        self.started = true;
        Ok(self.obs())
    }
    fn step(&mut self, action: &[f32]) -> Result<StepResult, EnvError> {
        if !self.started {
            return Err(EnvError::NeedsReset);
        }
        let [dx] = action else {
            return Err(EnvError::ActionSize {
                expected: 1,
                got: action.len(),
                names: "dx".into(),
            });
        };
        let clipped = dx.clamp(-1.0, 1.0);
        self.pos += clipped;
        self.step += 1;
        Ok(StepResult {
            obs: self.obs(),
            reward: f64::from(clipped),
            terminated: false,
            truncated: self.step >= self.spec.max_steps,
            info: StepInfo {
                stage: None,
                progress_oracle: Some(0.5),
                success: false,
                action_clipped: clipped != *dx,
            },
        })
    }
}

#[test]
fn remote_env_reset_and_step() {
    let (server_node, client_node) = pair();
    let keys = Keys::new("env-arm").expect("keys");
    let _server = server_node
        .serve_env(&keys, EnvAdapter::new(Line::new()))
        .expect("serve");
    let client = client_node.env_client(&keys, Duration::from_secs(20));
    assert!(
        client.wait_for_server(LONG).expect("querier"),
        "server not reachable"
    );

    let err = client.step(&[0.5]).expect_err("step before reset");
    assert!(
        matches!(&err, StreamError::Remote { reason, .. } if reason.contains("call reset first")),
        "{err}"
    );
    let reset: ResetReply = client.reset(Some(3)).expect("reset");
    let spec: EnvSpec = reset.spec.as_ref().expect("spec").into();
    assert_eq!(spec, Line::new().spec);
    let obs = reset.obs.expect("obs").to_observation().expect("obs");
    assert_eq!(obs.state, vec![3.0]);
    assert_eq!(obs.views[0].rgb, frame(4, 3, 0));

    let r: StepReply = client.step(&[2.0]).expect("step");
    assert_eq!(r.reward, 1.0);
    assert!(r.info.action_clipped);
    assert_eq!(r.info.progress_oracle, Some(0.5));
    let o = r.obs.expect("obs").to_observation().expect("obs");
    assert_eq!((o.step, o.state[0]), (1, 4.0));
    for _ in 0..4 {
        client.step(&[-0.5]).expect("step");
    }
    let r = client.step(&[0.0]).expect("step");
    assert!(r.truncated || r.obs.is_some());

    let err = client.step(&[1.0, 2.0]).expect_err("wrong size");
    assert!(err.to_string().contains("action has 2 values"), "{err}");

    // Garbage on the step key gets a reply that says why, not silence.
    let raw = client
        .query_bytes(&keys.env_step(), b"junk".to_vec())
        .expect("a reply");
    let reply: StepReply = stagewise_stream::decode(&raw).expect("a step reply");
    assert!(
        reply
            .error
            .as_deref()
            .is_some_and(|e| e.contains("bad step request")),
        "{reply:?}"
    );
    // A reset without a seed uses the adapter's counter.
    let r = client.reset(None).expect("reset");
    assert_eq!(
        r.obs.expect("obs").state.to_f32_vec().expect("state"),
        vec![0.0]
    );
    let _ = ResetRequest::new(None);
}

#[test]
fn no_server_is_a_clear_error() {
    let (_a, b) = pair();
    let keys = Keys::new("nobody").expect("keys");
    let client = b.env_client(&keys, Duration::from_millis(300));
    let err = client.reset(Some(0)).expect_err("no server");
    assert!(matches!(err, StreamError::NoReply { .. }), "{err}");
    assert!(
        err.to_string().contains("stagewise/nobody/env/reset"),
        "{err}"
    );
}

#[test]
fn liveliness_token_follows_the_publisher() {
    let (actor, learner) = pair();
    let keys = Keys::new("alive-arm").expect("keys");
    assert!(!learner
        .wait_for_alive(&keys, Duration::from_millis(200))
        .expect("query"));
    let publisher = actor
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    assert!(learner.wait_for_alive(&keys, LONG).expect("query"));
    drop(publisher);
    // Gone once the publisher is dropped.
    let deadline = std::time::Instant::now() + LONG;
    loop {
        if !learner
            .wait_for_alive(&keys, Duration::from_millis(100))
            .expect("query")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "token still alive");
    }
}

#[test]
fn every_transition_is_counted_once_and_publishing_never_blocks() {
    let (actor, _learner) = pair();
    let keys = Keys::new("queue-arm").expect("keys");
    let publisher = actor
        .publisher(
            &keys,
            PublisherOptions {
                liveliness: false,
                ..PublisherOptions::queue(2)
            },
        )
        .expect("publisher");
    let msg = transition("queue-arm", 0, true);
    let t0 = std::time::Instant::now();
    for _ in 0..2000 {
        let _ = publisher.publish_transition(Encoded::new(msg.clone()).expect("encode"));
    }
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert!(publisher.flush(LONG));
    let c = publisher.close(LONG);
    assert_eq!(
        c.transitions_sent + c.transitions_dropped + c.transitions_failed,
        2000
    );
    assert_eq!(c.transitions_queued, 0);
}

/// With backpressure the caller puts each transition itself: a burst of transitions with images arrives
/// whole and in order, nothing is queued or dropped (a 2-deep queue would drop most of it).
#[test]
fn with_backpressure_the_caller_puts_and_a_burst_arrives_whole() {
    let (actor, learner) = pair();
    let keys = Keys::new("paced-arm").expect("keys");
    let publisher = actor
        .publisher(
            &keys,
            PublisherOptions {
                liveliness: false,
                ..PublisherOptions::backpressure()
            },
        )
        .expect("publisher");
    let (tx, rx) = std::sync::mpsc::channel();
    let _sub = learner
        .subscribe::<TransitionMsg, _>(&keys.transition(), move |r| {
            let _ = tx.send(r.msg.map(|m| m.step));
        })
        .expect("subscribe");
    assert!(publisher.wait_for_subscribers(LONG));
    let n = 500;
    for step in 0..n {
        let mut msg = transition("paced-arm", 0, true);
        msg.step = step;
        assert_eq!(
            publisher.publish_transition(Encoded::new(msg).expect("encode")),
            Published::Sent,
            "transition {step} was not put by the caller"
        );
        assert_eq!(publisher.counters().transitions_queued, 0);
    }
    let steps: Vec<u64> = (0..n)
        .map(|_| {
            rx.recv_timeout(LONG)
                .expect("a transition")
                .expect("decodes")
        })
        .collect();
    assert_eq!(steps, (0..n).collect::<Vec<_>>(), "all arrive, in order");
    let c = publisher.close(LONG);
    assert_eq!((c.transitions_sent, c.transitions_dropped), (n, 0));
}

/// Transitions with images leave the publisher as multi-part payloads (the images' buffers, not copies) and
/// arrive as the bytes of `encode`; the borrowed subscription, the owned one and a plain zenoh subscriber see
/// the same messages, and malformed bytes reach both subscriptions as the same error.
#[test]
fn transitions_arrive_byte_for_byte_through_the_borrowed_subscription() {
    let (actor, learner) = pair();
    let keys = Keys::new("zero-copy-arm").expect("keys");
    let publisher = actor
        .publisher(&keys, PublisherOptions::default())
        .expect("publisher");
    let (tx, by_ref) = std::sync::mpsc::channel();
    let _r = learner
        .subscribe_transitions_borrowed(&Keys::any_robot("transition"), move |r| {
            // What must outlive the callback is copied out; the flag says the tensors borrowed the payload.
            let borrowed = r.msg.as_ref().ok().map(|t| {
                t.next_obs.as_ref().is_some_and(|o| {
                    o.images
                        .iter()
                        .all(|(_, i)| matches!(i.storage(), std::borrow::Cow::Borrowed(_)))
                })
            });
            let _ = tx.send((r.key, r.msg.map(TransitionMsg::into_owned), borrowed));
        })
        .expect("subscribe borrowed");
    let (_o, owned) = learner
        .subscribe_channel::<TransitionMsg>(&keys.transition())
        .expect("subscribe");
    let (rtx, raw) = std::sync::mpsc::channel();
    let _raw = learner
        .session()
        .declare_subscriber(keys.transition())
        .callback(move |s| {
            let _ = rtx.send(s.payload().to_bytes().into_owned());
        })
        .wait()
        .expect("raw subscriber");
    assert!(publisher.wait_for_subscribers(LONG));
    // Three subscribers on the learner: wait until the last one declared is routed as well.
    std::thread::sleep(Duration::from_millis(300));
    let sent: Vec<TransitionMsg> = (0..6)
        .map(|step| common::transition("zero-copy-arm", step, step != 3))
        .collect();
    for m in &sent {
        publisher.publish_transition(Encoded::new(m.clone()).expect("encode"));
    }
    assert!(publisher.flush(LONG));
    for m in &sent {
        let want = stagewise_stream::encode(m).expect("encode");
        let bytes = raw.recv_timeout(LONG).expect("raw sample");
        assert_eq!(bytes, want, "step {}", m.step);
        let (key, got, borrowed) = by_ref.recv_timeout(LONG).expect("borrowed sample");
        assert_eq!(key, keys.transition());
        assert_eq!(got.as_ref(), Ok(m));
        assert_eq!(borrowed, Some(m.next_obs.is_some()), "step {}", m.step);
        assert_eq!(
            owned.recv_timeout(LONG).expect("owned sample").msg.as_ref(),
            Ok(m)
        );
    }
    // Bytes that are not a transition: the decoder's error, in both subscriptions.
    let mut bad = stagewise_stream::encode(&sent[0]).expect("encode");
    bad.truncate(bad.len() / 2);
    let want = stagewise_stream::decode::<TransitionMsg>(&bad).expect_err("cut");
    actor
        .put_bytes(&keys.transition(), bad)
        .expect("put bad bytes");
    let (_, got, _) = by_ref.recv_timeout(LONG).expect("bad sample");
    assert_eq!(got, Err(want.clone()));
    assert_eq!(owned.recv_timeout(LONG).expect("bad sample").msg, Err(want));
    let c = publisher.close(LONG);
    assert_eq!((c.transitions_sent, c.transitions_failed), (6, 0));
}

/// The hostile inputs of the wire corpus (`crates/wire/tests/corpus/`: nesting thousands deep, lengths that promise
/// gigabytes, overflowing shapes, wrong types ...) sent to a serving node's env queryables and policy subscription:
/// each query gets a reply that says what was wrong, each put arrives as an error, and the node goes on serving.
/// (Before the decoder's depth limit, the nested maps overflowed the zenoh thread's stack: an abort of the node.)
#[test]
fn hostile_wire_bytes_get_errors_and_the_node_keeps_serving() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/tests/corpus");
    let mut hostile: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("entry").path();
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    hostile.sort();
    assert!(hostile.len() >= 12, "{} hostile inputs", hostile.len());
    let (server_node, client_node) = pair();
    let keys = Keys::new("env-hostile").expect("keys");
    let _server = server_node
        .serve_env(&keys, EnvAdapter::new(Line::new()))
        .expect("serve");
    let (_sub, rx) = server_node
        .subscribe_policy_channel(&keys)
        .expect("subscribe policy");
    let client = client_node.env_client(&keys, Duration::from_secs(20));
    assert!(client.wait_for_server(LONG).expect("querier"));
    assert!(client_node
        .wait_for_subscribers(&keys.policy(), LONG)
        .expect("matching"));
    for (name, bytes) in &hostile {
        let raw = client
            .query_bytes(&keys.env_step(), bytes.clone())
            .unwrap_or_else(|e| panic!("{name}: no reply: {e}"));
        let reply: StepReply = stagewise_stream::decode(&raw).expect("a step reply");
        assert!(
            reply
                .error
                .as_deref()
                .is_some_and(|e| e.contains("bad step request")),
            "{name}: {reply:?}"
        );
        let raw = client
            .query_bytes(&keys.env_reset(), bytes.clone())
            .unwrap_or_else(|e| panic!("{name}: no reply: {e}"));
        let reply: ResetReply = stagewise_stream::decode(&raw).expect("a reset reply");
        assert!(reply.error.is_some(), "{name}: {reply:?}");
        client_node
            .put_bytes(&keys.policy(), bytes.clone())
            .expect("put");
        let got = rx.recv_timeout(LONG).expect("the put arrives");
        assert!(got.is_err(), "{name}: {got:?}");
    }
    let r = client.reset(Some(2)).expect("still serving");
    assert_eq!(
        r.obs.expect("obs").state.to_f32_vec().expect("state"),
        vec![2.0]
    );
}
