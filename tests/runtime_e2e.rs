//! The main job across real processes: `stagewise run` publishes over zenoh; this test process (a separate
//! zenoh peer) subscribes, pushes policies, and replays the episode log. Loopback only, multicast off.

use crate::common;
use common::tiny3v_reading;
use stagewise_runtime::LogReader;
use stagewise_stream::wire::decode;
use stagewise_stream::{EpisodeMsg, Keys, Mode, Node, PolicyMsg, StreamConfig, TransitionMsg};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zenoh::Wait;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_stagewise")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A peer in this process that connects to the actor's listening endpoint.
fn node(port: u16) -> Node {
    Node::open(&StreamConfig {
        mode: Some(Mode::Peer),
        connect: vec![format!("tcp/127.0.0.1:{port}")],
        listen: vec![],
        config_file: None,
        multicast_scouting: Some(false),
        max_message_size: None,
    })
    .expect("zenoh session")
}

/// `stagewise run` on the simulator with oracle progress (no ONNX needed), small frames, fast episodes.
fn spawn_run(robot: &str, port: u16, log: &Path, extra: &[&str]) -> Child {
    spawn_run_at(32, robot, port, log, extra)
}

/// [`spawn_run`] rendering `size` x `size` frames.
fn spawn_run_at(size: u32, robot: &str, port: u16, log: &Path, extra: &[&str]) -> Child {
    let size = size.to_string();
    let mut cmd = Command::new(exe());
    cmd.current_dir(root())
        .args(["--log", "info", "run", "--reward", "oracle"])
        .args(["--width", &size, "--height", &size])
        .args([
            "--robot-name",
            robot,
            "--listen",
            &format!("tcp/127.0.0.1:{port}"),
        ])
        .arg("--log-file")
        .arg(log)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn stagewise run")
}

fn finish(child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    let mut child = child;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "stagewise run did not finish in {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Payloads received so far, in arrival order.
type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// Raw payloads received on `key`, in arrival order (and the subscriber that keeps receiving them).
fn collect_raw(node: &Node, key: &str) -> (Received, zenoh::pubsub::Subscriber<()>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let sub = node
        .session()
        .declare_subscriber(key.to_string())
        .callback(move |s| sink.lock().unwrap().push(s.payload().to_bytes().to_vec()))
        .wait()
        .expect("subscriber");
    (got, sub)
}

fn log_payloads(log: &Path, key: &str) -> Vec<Vec<u8>> {
    let mut r = LogReader::open(log).expect("episode log");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("record") {
        if rec.key == key {
            out.push(rec.payload);
        }
    }
    out
}

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

#[test]
fn transitions_reach_another_process_and_replay_is_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.swlog");
    let port = free_port();
    let robot = "e2e-stream";
    let keys = Keys::new(robot).unwrap();
    let child = spawn_run(
        robot,
        port,
        &log,
        &[
            "--envs",
            "2",
            "--episodes",
            "4",
            "--max-steps",
            "25",
            "--wait-subscribers",
            "30",
            "--gamma",
            "0.97",
        ],
    );
    let n = node(port);
    let (live, sub) = collect_raw(&n, &keys.transition());
    let (episodes, esub) = collect_raw(&n, &keys.episode());
    let out = finish(child, Duration::from_secs(240));
    assert!(out.status.success(), "{}", text(&out));
    let logged = log_payloads(&log, &keys.transition());
    assert!(!logged.is_empty());
    assert!(wait_until(Duration::from_secs(10), || live
        .lock()
        .unwrap()
        .len()
        >= logged.len()));
    let live_bytes = live.lock().unwrap().clone();
    // What went on the wire is exactly what was logged.
    assert_eq!(live_bytes, logged, "live stream and log differ");
    // Fields: decode every transition and check them against the run's configuration.
    let msgs: Vec<TransitionMsg> = live_bytes
        .iter()
        .map(|b| decode(b).expect("decode"))
        .collect();
    for m in &msgs {
        assert_eq!(m.robot, robot);
        assert!(m.env < 2);
        assert_eq!(m.action.len(), 4);
        assert_eq!(m.gamma, 0.97);
        assert!(m.reward.is_finite() && (0.0..=1.0).contains(&m.phi));
        if m.terminated {
            assert_eq!(m.phi_next, 0.0, "terminated transitions use Phi(s') = 0");
        }
    }
    let ends = msgs.iter().filter(|m| m.terminated || m.truncated).count();
    assert!(wait_until(Duration::from_secs(5), || episodes
        .lock()
        .unwrap()
        .len()
        >= 4));
    let eps: Vec<EpisodeMsg> = episodes
        .lock()
        .unwrap()
        .iter()
        .map(|b| decode(b).unwrap())
        .collect();
    assert_eq!(ends, eps.len());
    assert_eq!(eps.iter().map(|e| e.length).sum::<u64>(), msgs.len() as u64);
    drop((sub, esub));

    // Replay the log onto the stream: the same bytes arrive again. The actor (and its listening endpoint) is
    // gone, so this process listens and `replay` connects to it.
    let port3 = free_port();
    let n3 = node_listen(port3);
    let (replayed, _rsub) = collect_raw(&n3, &keys.transition());
    let out = Command::new(exe())
        .current_dir(root())
        .args([
            "replay",
            "--robot-name",
            robot,
            "--connect",
            &format!("tcp/127.0.0.1:{port3}"),
        ])
        .arg(&log)
        .output()
        .expect("replay");
    assert!(out.status.success(), "{}", text(&out));
    assert!(wait_until(Duration::from_secs(10), || replayed
        .lock()
        .unwrap()
        .len()
        >= logged.len()));
    assert_eq!(
        *replayed.lock().unwrap(),
        logged,
        "replayed stream differs from the log"
    );
}

/// A peer in this process that listens (for a process that connects to it).
fn node_listen(port: u16) -> Node {
    Node::open(&StreamConfig {
        mode: Some(Mode::Peer),
        connect: vec![],
        listen: vec![format!("tcp/127.0.0.1:{port}")],
        config_file: None,
        multicast_scouting: Some(false),
        max_message_size: None,
    })
    .expect("zenoh session")
}

fn make_policy(path: &Path, state: usize, action: usize, seed: u64) {
    let py = root().join(".venv/bin/python");
    let out = Command::new(&py)
        .arg(root().join("models/make_test_models.py"))
        .arg("--policy")
        .arg(path)
        .args([state.to_string(), action.to_string()])
        .args(["--seed", &seed.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", py.display()));
    assert!(out.status.success(), "{}", text(&out));
}

/// `msg` signed with the hex ed25519 `secret` for `robot` (the signature covers robot, version and sha256).
fn sign_for(robot: &str, secret: &str, msg: PolicyMsg) -> PolicyMsg {
    use ed25519_dalek::Signer;
    let seed: [u8; 32] = hex::decode(secret).unwrap().try_into().unwrap();
    let sig =
        ed25519_dalek::SigningKey::from_bytes(&seed).sign(&msg.signing_message(robot).unwrap());
    msg.with_signature(sig.to_bytes().to_vec())
}

/// A fresh key pair from `stagewise policy keygen`: (secret, public), hex.
fn keygen() -> (String, String) {
    let out = Command::new(exe())
        .args(["policy", "keygen"])
        .output()
        .unwrap();
    let kg = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| {
        kg.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .trim()
            .to_string()
    };
    (field("secret "), field("public "))
}

/// The version recorded in a policy state file, once it is there.
fn state_version(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("version = "))
        .and_then(|v| v.trim().parse().ok())
}

/// Sends SIGINT (what Ctrl-C does) and returns the output of a clean exit.
fn interrupt(child: Child) -> String {
    let pid = child.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let out = finish(child, Duration::from_secs(60));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    t
}

/// Refusals of the policy gate across a restart: an oversized message (refused unread), a signature made for
/// another robot, then after a restart with the same state file the accepted version replayed byte for byte
/// and an older one (a rollback). Only newer versions get through.
#[test]
fn policy_versions_survive_a_restart_and_oversized_or_misaddressed_policies_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = stagewise_sim::state_spec(stagewise_sim::Task::PickPlace).len();
    let good = dir.path().join("good.onnx");
    make_policy(&good, state, 4, 3);
    let good_bytes = std::fs::read(&good).unwrap();
    let (secret, public) = keygen();
    let robot = "e2e-restart";
    let keys = Keys::new(robot).unwrap();
    let state_file = dir.path().join(format!("{robot}.policy-state"));
    let max = good_bytes.len() + 4096;
    let max_arg = max.to_string();
    let args = [
        "--policy",
        "random",
        "--envs",
        "1",
        "--episodes",
        "0",
        "--max-steps",
        "10",
        "--policy-key",
        &public,
        "--policy-max-bytes",
        &max_arg,
    ];
    let wait_version = |v: u64| {
        assert!(
            wait_until(Duration::from_secs(90), || state_version(&state_file)
                == Some(v)),
            "version {v} never recorded in {}",
            state_file.display()
        );
        // Let the actor pick it up from the worker before it is stopped.
        std::thread::sleep(Duration::from_secs(1));
    };

    let port = free_port();
    let child = spawn_run(robot, port, &dir.path().join("run1.swlog"), &args);
    let n = node(port);
    assert!(
        n.wait_for_subscribers(&keys.policy(), Duration::from_secs(60))
            .unwrap(),
        "actor never subscribed"
    );
    // Oversized (refused before it is decoded or hashed), then signed for another robot, then good.
    n.put(
        &keys.policy(),
        &sign_for(robot, &secret, PolicyMsg::new(1, vec![7; max + 1])),
    )
    .unwrap();
    n.put(
        &keys.policy(),
        &sign_for(
            "another-robot",
            &secret,
            PolicyMsg::new(2, good_bytes.clone()),
        ),
    )
    .unwrap();
    let v3 = sign_for(robot, &secret, PolicyMsg::new(3, good_bytes.clone()));
    n.put(&keys.policy(), &v3).unwrap();
    wait_version(3);
    drop(n);
    let t = interrupt(child);
    assert!(t.contains("policies: 1 accepted, 2 rejected"), "{t}");
    assert!(t.contains("larger than the limit"), "{t}");
    assert!(t.contains("does not verify"), "{t}");
    assert!(t.contains("learner policy v3"), "{t}");

    // Restart: same state file (beside the log), a new log.
    let port = free_port();
    let child = spawn_run(robot, port, &dir.path().join("run2.swlog"), &args);
    let n = node(port);
    assert!(
        n.wait_for_subscribers(&keys.policy(), Duration::from_secs(60))
            .unwrap(),
        "actor never subscribed"
    );
    n.put(&keys.policy(), &v3).unwrap();
    n.put(
        &keys.policy(),
        &sign_for(robot, &secret, PolicyMsg::new(2, good_bytes.clone())),
    )
    .unwrap();
    n.put(
        &keys.policy(),
        &sign_for(robot, &secret, PolicyMsg::new(4, good_bytes.clone())),
    )
    .unwrap();
    wait_version(4);
    drop(n);
    let t = interrupt(child);
    assert!(t.contains("policy versions up to 3 are refused"), "{t}");
    assert!(t.contains("policies: 1 accepted, 2 rejected"), "{t}");
    assert!(
        t.contains("policy version 3 is not newer than the last accepted version 3"),
        "{t}"
    );
    assert!(
        t.contains("policy version 2 is not newer than the last accepted version 3"),
        "{t}"
    );
    assert!(t.contains("learner policy v4"), "{t}");
}

/// Over a robot, unsigned policies are refused at start (before the robot is contacted) unless the operator
/// opts out, loudly; a weak public key is refused; the simulator accepts unsigned policies and says so.
#[test]
fn unsigned_policies_over_a_robot_need_an_explicit_opt_out() {
    let run = |args: &[&str]| {
        let out = Command::new(exe())
            .current_dir(root())
            .args(["--log", "info", "run"])
            .args(args)
            .output()
            .expect("stagewise run");
        (out.status.success(), text(&out))
    };
    // Nothing listens there: every refusal below must come before the robot is contacted.
    let url = format!("udp://127.0.0.1:{}", free_port());
    let (ok, t) = run(&["--bridge", &url, "--policy", "random"]);
    assert!(!ok, "{t}");
    assert!(
        t.contains("refusing to drive the robot")
            && t.contains("--policy-key HEX")
            && t.contains("--allow-unsigned-policies"),
        "{t}"
    );
    assert!(!t.contains("no answer from the firmware"), "{t}");
    // The opt-out gets past the check (to the next refusal: --reward oracle over a robot) and says so loudly.
    let (ok, t) = run(&[
        "--bridge",
        &url,
        "--policy",
        "random",
        "--reward",
        "oracle",
        "--allow-unsigned-policies",
    ]);
    assert!(!ok, "{t}");
    assert!(t.contains("UNSIGNED POLICIES ACCEPTED"), "{t}");
    assert!(
        t.contains("--reward oracle reads the simulator's ground-truth progress")
            && t.contains(&url),
        "{t}"
    );
    // A weak (small-order) key is no key.
    let weak = format!("01{}", "00".repeat(31));
    let (ok, t) = run(&[
        "--bridge",
        &url,
        "--policy",
        "random",
        "--policy-key",
        &weak,
    ]);
    assert!(!ok && t.contains("weak"), "{t}");
    // The simulator accepts unsigned policies, and says so at start.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim.swlog");
    let (ok, t) = run(&[
        "--robot-name",
        "e2e-unsigned-sim",
        "--reward",
        "oracle",
        "--policy",
        "random",
        "--envs",
        "1",
        "--episodes",
        "1",
        "--max-steps",
        "5",
        "--width",
        "16",
        "--height",
        "16",
        "--listen",
        "tcp/127.0.0.1:0",
        "--log-file",
        log.to_str().unwrap(),
    ]);
    assert!(ok, "{t}");
    assert!(
        t.contains("unsigned policies on stagewise/e2e-unsigned-sim/policy are accepted"),
        "{t}"
    );
}

#[test]
fn policies_are_checked_and_swapped_between_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.swlog");
    let state = stagewise_sim::state_spec(stagewise_sim::Task::PickPlace).len();
    let good = dir.path().join("good.onnx");
    make_policy(&good, state, 4, 1);
    let wrong = dir.path().join("wrong.onnx");
    make_policy(&wrong, state + 1, 4, 2);
    let (secret, public) = keygen();
    let (other_secret, _) = keygen();

    let port = free_port();
    let robot = "e2e-policy";
    let keys = Keys::new(robot).unwrap();
    let child = spawn_run(
        robot,
        port,
        &log,
        &[
            "--policy",
            "random",
            "--envs",
            "1",
            "--episodes",
            "0",
            "--max-steps",
            "10",
            "--policy-key",
            &public,
        ],
    );
    let n = node(port);
    assert!(
        n.wait_for_subscribers(&keys.policy(), Duration::from_secs(60))
            .unwrap(),
        "actor never subscribed"
    );
    let sign = |secret: &str, msg: PolicyMsg| sign_for(robot, secret, msg);
    let good_bytes = std::fs::read(&good).unwrap();
    // 1. malformed bytes
    n.put_bytes(&keys.policy(), b"\x93\x01\x02garbage".to_vec())
        .unwrap();
    // 2. unsigned
    n.put(&keys.policy(), &PolicyMsg::new(1, good_bytes.clone()))
        .unwrap();
    // 3. signed with another key
    n.put(
        &keys.policy(),
        &sign(&other_secret, PolicyMsg::new(1, good_bytes.clone())),
    )
    .unwrap();
    // 4. hash that does not match the bytes
    let mut bad_hash = sign(&secret, PolicyMsg::new(1, good_bytes.clone()));
    bad_hash.sha256 = "00".repeat(32);
    n.put(&keys.policy(), &bad_hash).unwrap();
    // 5. a signed policy whose state size does not fit the env
    let wrong_bytes = std::fs::read(&wrong).unwrap();
    n.put(
        &keys.policy(),
        &sign(&secret, PolicyMsg::new(1, wrong_bytes.clone())),
    )
    .unwrap();
    // 6. the good one, signed: accepted
    n.put(
        &keys.policy(),
        &sign(&secret, PolicyMsg::new(2, good_bytes.clone())),
    )
    .unwrap();
    // 7. the same version again: stale
    n.put(
        &keys.policy(),
        &sign(&secret, PolicyMsg::new(2, good_bytes.clone())),
    )
    .unwrap();
    // Let it run a few episodes with the new policy, then stop it as a user would (Ctrl-C).
    std::thread::sleep(Duration::from_secs(4));
    let pid = child.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let out = finish(child, Duration::from_secs(60));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("policies: 1 accepted, 6 rejected"), "{t}");
    for reason in [
        "malformed policy message",
        "unsigned",
        "does not verify",
        "sha256",
        "inputs.state",
        "not newer",
    ] {
        assert!(
            t.contains(reason),
            "missing rejection reason {reason:?} in:\n{t}"
        );
    }
    assert!(
        t.contains("learner policy v2"),
        "no episode ran the new policy:\n{t}"
    );
    // Ctrl-C left a complete log: every record reads.
    let mut r = LogReader::open(&log).unwrap();
    while r.next_record().unwrap().is_some() {}
}

#[test]
fn a_subscriber_killed_mid_stream_leaves_the_actor_running() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.swlog");
    let probe = Path::new(exe()).with_file_name("stagewise-stream-probe");
    assert!(
        probe.exists(),
        "{} missing: build it with cargo build -p stagewise-stream",
        probe.display()
    );
    let port = free_port();
    let robot = "e2e-kill";
    let child = spawn_run(
        robot,
        port,
        &log,
        &[
            "--envs",
            "2",
            "--episodes",
            "6",
            "--max-steps",
            "30",
            "--wait-subscribers",
            "30",
            "--stream-images",
        ],
    );
    let mut sub = Command::new(&probe)
        .args([
            "--robot",
            robot,
            "--connect",
            &format!("tcp/127.0.0.1:{port}"),
            "--slow-ms",
            "20",
            "--timeout-s",
            "120",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("probe");
    // Let it receive a little, then kill it.
    let mut stdout = std::io::BufReader::new(sub.stdout.take().unwrap());
    let mut lines = 0;
    let mut line = String::new();
    while lines < 5 {
        line.clear();
        if std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() == 0 {
            break;
        }
        if line.starts_with('T') {
            lines += 1;
        }
    }
    assert_eq!(lines, 5, "the subscriber received nothing");
    sub.kill().unwrap();
    sub.wait().unwrap();
    let out = finish(child, Duration::from_secs(240));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("6 episodes"), "{t}");
    // every transition is accounted for: sent or dropped
    let logged = log_payloads(&log, &Keys::new(robot).unwrap().transition()).len();
    let line = t
        .lines()
        .find(|l| l.starts_with("stream:"))
        .expect("stream summary");
    let num = |label: &str| -> usize {
        let before = line.split(label).next().unwrap();
        before.split_whitespace().last().unwrap().parse().unwrap()
    };
    assert_eq!(num(" transitions sent") + num(" dropped"), logged, "{line}");
}

#[test]
fn the_default_main_job_runs_with_the_shipped_reward_model() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.swlog");
    let out = Command::new(exe())
        .current_dir(root())
        .args([
            "--log",
            "warn",
            "run",
            "--envs",
            "2",
            "--episodes",
            "2",
            "--max-steps",
            "40",
            "--no-stream",
        ])
        .arg("--log-file")
        .arg(&log)
        .output()
        .expect("stagewise run");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("2 episodes, 80 env-steps"), "{t}");
    let transitions = log_payloads(&log, &Keys::new("sim0").unwrap().transition());
    assert_eq!(transitions.len(), 80);
    // Each names the model that shaped its reward: the shipped manifest's `sha256`.
    let manifest =
        std::fs::read_to_string(root().join("models/pick-place/pick-place-progress.toml")).unwrap();
    let sha256 = manifest
        .lines()
        .find_map(|l| l.strip_prefix("sha256 = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("the manifest's sha256");
    for p in &transitions {
        let m: TransitionMsg = decode(p).expect("transition");
        assert_eq!(m.reward_model.as_deref(), Some(sha256));
    }
}

/// The actor builds the model's state by name from the simulator's: a model asking for a field the env lacks
/// is refused before the first step, naming the field and listing the env's; one whose fields are all there
/// (in another order, a subset) runs.
#[test]
fn run_binds_the_models_state_fields_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |model: &Path| {
        Command::new(exe())
            .current_dir(root())
            .args(["--log", "warn", "run", "--no-stream", "--envs", "1"])
            .args(["--episodes", "1", "--width", "32", "--height", "32"])
            .arg("--model")
            .arg(model)
            .arg("--log-file")
            .arg(tmp.path().join("run.swlog"))
            .output()
            .expect("stagewise run")
    };
    let fields = [
        "gripper_width",
        "ee_z",
        "ee_y",
        "ee_x",
        "block9_x",
        "grasped",
        "block0_x",
        "block0_y",
    ];
    let out = run(&tiny3v_reading(tmp.path(), &fields));
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("reads state field \"block9_x\"")
            && t.contains("task pick-place")
            && t.contains("it has: ee_x, ee_y, ee_z, gripper_width"),
        "{t}"
    );
    assert!(!tmp.path().join("run.swlog").exists(), "nothing ran: {t}");
    let mut fields = fields;
    fields[4] = "block0_z";
    let out = run(&tiny3v_reading(tmp.path(), &fields));
    assert!(out.status.success(), "{}", text(&out));
}

/// SIGKILL mid-episode (issue 19 item 5): the episode log reads back to its last complete record without an
/// error (a torn tail, when the kill cut a record, is reported and accounts for every remaining byte), every
/// record decodes, and every episode that had ended before the kill is in the log whole: its episode message
/// and all its transitions (the log is fsynced at every episode end; an episode counts as ended once the stream
/// carried a transition of a later one, which the actor produces only after that fsync). `replay` of a log cut
/// inside its last record replays every complete record and warns about the rest.
#[test]
fn a_run_killed_mid_episode_leaves_a_log_that_reads_to_its_last_complete_record() {
    use std::os::unix::process::ExitStatusExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.swlog");
    let port = free_port();
    let robot = "e2e-sigkill";
    let keys = Keys::new(robot).unwrap();
    let mut child = spawn_run(
        robot,
        port,
        &log,
        &[
            "--envs",
            "1",
            "--episodes",
            "1000",
            "--max-steps",
            "40",
            "--wait-subscribers",
            "30",
        ],
    );
    let n = node(port);
    // Episodes announced on the stream, and the highest episode index seen on a transition.
    // (episode index, the episode message's bytes)
    type Announced = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;
    let announced: Announced = Arc::new(Mutex::new(Vec::new()));
    let newest = Arc::new(AtomicUsize::new(0));
    let later = Arc::new(AtomicUsize::new(0));
    let (a, nw, lt) = (announced.clone(), newest.clone(), later.clone());
    let (tkey, ekey) = (keys.transition(), keys.episode());
    let _sub = n
        .session()
        .declare_subscriber(keys.all())
        .callback(move |s| {
            let bytes = s.payload().to_bytes().to_vec();
            let key = s.key_expr().as_str();
            if key == ekey {
                let m: EpisodeMsg = decode(&bytes).expect("episode message");
                a.lock().unwrap().push((m.episode, bytes));
            } else if key == tkey {
                let m: TransitionMsg = decode(&bytes).expect("transition");
                nw.fetch_max(m.episode as usize, Ordering::AcqRel);
                // transitions of an episode after the first announced one
                let first_ended = a.lock().unwrap().first().map(|(e, _)| *e);
                if first_ended.is_some_and(|e| m.episode > e) {
                    lt.fetch_add(1, Ordering::AcqRel);
                }
            }
        })
        .wait()
        .expect("subscriber");
    // Kill once a few transitions of a later episode have gone out: mid-episode, after at least one fsync.
    let mid = wait_until(Duration::from_secs(180), || {
        later.load(Ordering::Acquire) >= 3 || child.try_wait().ok().flatten().is_some()
    });
    assert!(
        mid && later.load(Ordering::Acquire) >= 3,
        "the run never got past its first episode"
    );
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), Some(9), "{status:?}");
    let ended: Vec<(u64, Vec<u8>)> = {
        let newest = newest.load(Ordering::Acquire) as u64;
        announced
            .lock()
            .unwrap()
            .iter()
            .filter(|(e, _)| *e < newest)
            .cloned()
            .collect()
    };
    assert!(!ended.is_empty());

    // The log reads to its last complete record.
    let size = std::fs::metadata(&log).unwrap().len();
    let mut r = LogReader::open(&log).unwrap();
    let mut records = Vec::new();
    while let Some(rec) = r
        .next_record()
        .expect("a killed run's log reads without an error")
    {
        records.push(rec);
    }
    match r.torn_tail() {
        Some(t) => {
            assert_eq!((t.offset, t.records), (r.offset(), records.len() as u64));
            assert_eq!(t.offset + t.bytes, size, "{t}");
        }
        None => assert_eq!(r.offset(), size, "the log ends on a record boundary"),
    }
    eprintln!(
        "killed: {} complete records, {} episodes ended before the kill, torn tail: {}",
        records.len(),
        ended.len(),
        r.torn_tail()
            .map_or_else(|| "none".to_string(), |t| t.to_string())
    );
    let mut logged_episodes = Vec::new();
    let mut transitions_per_episode = std::collections::BTreeMap::<u64, u64>::new();
    for rec in &records {
        if rec.key == keys.transition() {
            let m: TransitionMsg = decode(&rec.payload).expect("logged transition decodes");
            *transitions_per_episode.entry(m.episode).or_default() += 1;
        } else if rec.key == keys.episode() {
            let m: EpisodeMsg = decode(&rec.payload).expect("logged episode decodes");
            logged_episodes.push((m, rec.payload.clone()));
        } else {
            assert_eq!(rec.key, keys.progress(), "unexpected key");
            decode::<stagewise_stream::ProgressMsg>(&rec.payload).expect("logged progress decodes");
        }
    }
    for (episode, bytes) in &ended {
        let (m, logged) = logged_episodes
            .iter()
            .find(|(m, _)| m.episode == *episode)
            .unwrap_or_else(|| {
                panic!("episode {episode} ended before the kill but is not in the log")
            });
        assert_eq!(logged, bytes, "episode {episode}: log and stream differ");
        assert_eq!(
            transitions_per_episode.get(episode).copied(),
            Some(m.length),
            "episode {episode}: all its transitions are in the log"
        );
    }

    // `replay` of the log cut inside its last record: every complete record goes out, the cut one is reported.
    let cut = dir.path().join("cut.swlog");
    let end = r.offset();
    let bytes = std::fs::read(&log).unwrap();
    let last_len = records
        .last()
        .map_or(0, |l| 8 + l.key.len() + l.payload.len()) as u64;
    assert!(last_len > 0);
    std::fs::write(&cut, &bytes[..(end - last_len / 2) as usize]).unwrap();
    let out = Command::new(exe())
        .current_dir(root())
        .args([
            "--log",
            "warn",
            "replay",
            "--robot-name",
            robot,
            "--wait",
            "0",
            "--listen",
            &format!("tcp/127.0.0.1:{}", free_port()),
        ])
        .arg(&cut)
        .output()
        .expect("replay");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains(&format!("replayed {} messages", records.len() - 1)),
        "{t}"
    );
    assert!(t.contains("torn last record"), "{t}");
}

/// A policy manifest's `state_names` are read by name: a policy of the hand's 4 fields (in another order than the
/// simulator's) runs in `eval policy`, `run` and `record --policy`, which before fed every policy the whole state
/// vector; a name the simulator does not have is refused, naming it.
#[test]
fn policies_read_their_state_fields_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let policy = common::named_policy(dir.path(), &["gripper_width", "ee_z", "ee_x", "ee_y"]);
    let p = policy.to_str().unwrap();
    let runs: [&[&str]; 3] = [
        &[
            "eval",
            "policy",
            "--task",
            "push-target",
            "--episodes",
            "2",
            "--policy",
            p,
        ],
        &[
            "run",
            "--task",
            "push-target",
            "--envs",
            "2",
            "--episodes",
            "2",
            "--max-steps",
            "30",
            "--no-stream",
            "--width",
            "32",
            "--height",
            "32",
            "--policy",
            p,
        ],
        &[
            "record",
            "--task",
            "push-target",
            "--episodes",
            "1",
            "--width",
            "16",
            "--height",
            "16",
            "--policy",
            p,
        ],
    ];
    for (k, args) in runs.iter().enumerate() {
        let mut cmd = Command::new(exe());
        cmd.current_dir(root()).args(*args);
        if k == 1 {
            cmd.arg("--log-file").arg(dir.path().join("run.swlog"));
        }
        if k == 2 {
            cmd.arg("--out").arg(dir.path().join("rec"));
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    let bad = common::named_policy(dir.path(), &["gripper_width", "block7_x"]);
    let out = Command::new(exe())
        .current_dir(root())
        .args([
            "eval",
            "policy",
            "--task",
            "push-target",
            "--episodes",
            "1",
            "--policy",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(!out.status.success() && t.contains("block7_x"), "{t}");
}

/// A pixel policy (`[pixels]`: camera frames, then the hand's fields) runs in `eval policy` (the simulator renders
/// its views at its size) and in `run` when the run renders at its size; a run at another size, a view the
/// simulator lacks and `record --policy` (whose driver feeds no frames) are refused, naming what differs.
#[test]
fn pixel_policies_run_where_their_frames_are_rendered_and_are_refused_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let p = "models/test/pixel3v8.toml";
    let log = dir.path().join("run.swlog");
    let stagewise = |args: &[&str]| {
        Command::new(exe())
            .current_dir(root())
            .env("RUST_BACKTRACE", "0")
            .args(args)
            .output()
            .unwrap()
    };
    let eval = [
        "eval",
        "policy",
        "--task",
        "pick-place",
        "--episodes",
        "2",
        "--policy",
    ];
    let out = stagewise(&[&eval[..], &[p]].concat());
    let t = text(&out);
    assert!(out.status.success() && t.contains("/2 successes"), "{t}");
    let run = [
        "run",
        "--reward",
        "oracle",
        "--envs",
        "2",
        "--episodes",
        "2",
        "--max-steps",
        "20",
        "--no-stream",
        "--log-file",
        log.to_str().unwrap(),
        "--policy",
        p,
    ];
    let out = stagewise(&[&run[..], &["--width", "8", "--height", "8"]].concat());
    let t = text(&out);
    assert!(
        out.status.success() && t.contains("2 episodes, 40 env-steps"),
        "{t}"
    );
    let out = stagewise(&run);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("\"front\" at 8x8")
            && t.contains("at 96x96")
            && t.contains("--width 8 --height 8"),
        "{t}"
    );
    // A view the simulator's camera rig does not have: named, with the rig's.
    std::fs::copy(
        root().join("models/test/pixel3v8.onnx"),
        dir.path().join("pixel3v8.onnx"),
    )
    .unwrap();
    let top = dir.path().join("top.toml");
    let text_top = std::fs::read_to_string(root().join(p))
        .unwrap()
        .replace("\"wrist\"]", "\"top\"]");
    std::fs::write(&top, text_top).unwrap();
    let out = stagewise(&[&eval[..], &[top.to_str().unwrap()]].concat());
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("\"top\"") && t.contains("it has: front, side, wrist"),
        "{t}"
    );
    let rec = dir.path().join("rec");
    let out = stagewise(&[
        "record",
        "--task",
        "pick-place",
        "--episodes",
        "1",
        "--out",
        rec.to_str().unwrap(),
        "--policy",
        p,
    ]);
    let t = text(&out);
    assert!(
        !out.status.success() && t.contains("reads camera frames"),
        "{t}"
    );
    assert!(!rec.exists(), "record refuses before it writes");
}

/// `eval policy` holds each action of a policy that declares an action repeat in its graph (ONNX metadata
/// `stagewise.action_repeat`) as long as it says: the committed push-target policy was trained with 4.
#[test]
fn eval_policy_holds_the_actions_of_a_policy_trained_at_a_lower_rate() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("eval.json");
    let out = Command::new(exe())
        .current_dir(root())
        .args([
            "eval",
            "policy",
            "--task",
            "push-target",
            "--policy",
            "models/policies/push-target-learned/push-target-learned.toml",
            "--episodes",
            "4",
            "--seed",
            "7400000",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("each action held 4 step(s)"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["action_repeat"], 4, "{v}");
    assert_eq!(v["episodes"], 4, "{v}");
}

/// `record --policy` drives every episode with the policy, each action held for its declared repeat: without
/// noise it reproduces `eval policy`'s episodes on the same seeds (outcome and length), with noise the actions
/// change but are still held; bad flags and a reward model given as the policy are refused, naming them.
#[test]
fn record_with_a_policy_rolls_out_the_policy_and_labels_its_states() {
    const POLICY: &str = "models/policies/push-target-learned/push-target-learned.toml";
    let dir = tempfile::tempdir().unwrap();
    let record = |out: &Path, noise: &str| {
        Command::new(exe())
            .current_dir(root())
            .args([
                "record",
                "--task",
                "push-target",
                "--policy",
                POLICY,
                "--policy-noise",
                noise,
                "--episodes",
                "3",
                "--seed",
                "7400000",
                "--width",
                "16",
                "--height",
                "16",
                "--threads",
                "2",
                "--out",
            ])
            .arg(out)
            .output()
            .unwrap()
    };
    let (clean, noisy) = (dir.path().join("clean"), dir.path().join("noisy"));
    for (out, noise) in [(&clean, "0"), (&noisy, "0.3")] {
        let o = record(out, noise);
        assert!(
            o.status.success(),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let json = dir.path().join("eval.json");
    let o = Command::new(exe())
        .current_dir(root())
        .args([
            "eval",
            "policy",
            "--task",
            "push-target",
            "--policy",
            POLICY,
        ])
        .args(["--episodes", "3", "--seed", "7400000", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let eval: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let meta = |d: &Path| -> serde_json::Value {
        let p = d.join("meta").join("stagewise_record.json");
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let m = meta(&clean);
    assert_eq!(m["policy"]["action_repeat"], 4, "{m}");
    let eval_eps = eval["per_episode"].as_array().expect("per_episode");
    let ds = stagewise_dataset::Dataset::open(&clean).unwrap();
    let noisy_ds = stagewise_dataset::Dataset::open(&noisy).unwrap();
    let mut differs = false;
    for i in 0..3 {
        let rec = &m["episodes"][i];
        assert_eq!(rec["degradation"], "policy", "{m}");
        assert_eq!(rec["seed"], 7400000 + i as u64, "{m}");
        let e = &eval_eps[i];
        assert_eq!(rec["success"], e["success"], "record {rec} vs eval {e}");
        assert_eq!(
            rec["frames"].as_u64().unwrap() - 1,
            e["steps"].as_u64().unwrap(),
            "record {rec} vs eval {e}"
        );
        for d in [&ds, &noisy_ds] {
            let ep = d.read_episode(i, stagewise_dataset::Images::Skip).unwrap();
            assert!(ep.extra("degraded").unwrap().iter().all(|&x| x == 1.0));
            // the last frame has no action (zeros); every other one repeats its decision's action
            for t in 0..ep.len() - 1 {
                assert_eq!(ep.action(t), ep.action(t - t % 4), "episode {i} frame {t}");
            }
        }
        let (a, b) = (
            ds.read_episode(i, stagewise_dataset::Images::Skip).unwrap(),
            noisy_ds
                .read_episode(i, stagewise_dataset::Images::Skip)
                .unwrap(),
        );
        differs |= a.action(0) != b.action(0);
    }
    assert!(differs, "--policy-noise 0.3 changed no action");

    let fail = |args: &[&str]| {
        let o = Command::new(exe())
            .current_dir(root())
            .arg("record")
            .args(["--task", "push-target", "--episodes", "1", "--out"])
            .arg(dir.path().join("bad"))
            .args(args)
            .output()
            .unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let e = fail(&["--policy-noise", "0.1"]);
    assert!(e.contains("--policy"), "{e}");
    let e = fail(&["--policy", POLICY, "--degraded", "0.5"]);
    assert!(e.contains("--degraded"), "{e}");
    let e = fail(&["--policy", POLICY, "--policy-noise=-1"]);
    assert!(e.contains("--policy-noise"), "{e}");
    let reward = "models/push-target/push-target-progress.toml";
    let e = fail(&["--policy", reward]);
    assert!(e.contains(reward), "{e}");
    assert!(
        !dir.path().join("bad").exists(),
        "a refused policy left an output directory"
    );
}

/// The transitions `run` logs with the given shaping flags (oracle progress, the scripted expert, one env).
fn shaped_transitions(shaping: &[&str]) -> Vec<TransitionMsg> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.swlog");
    let out = Command::new(exe())
        .current_dir(root())
        .args(["--log", "warn", "run", "--reward", "oracle", "--envs", "1"])
        .args(["--episodes", "2", "--width", "32", "--height", "32"])
        .args(["--gamma", "0.95", "--shaping-scale", "2", "--no-stream"])
        .args(shaping)
        .arg("--log-file")
        .arg(&log)
        .output()
        .expect("stagewise run");
    assert!(out.status.success(), "{}", text(&out));
    let transitions: Vec<TransitionMsg> =
        log_payloads(&log, &Keys::new("sim0").unwrap().transition())
            .iter()
            .map(|p| decode::<TransitionMsg>(p).expect("transition"))
            .collect();
    // The oracle's reward is no model's: no transition names one.
    assert!(transitions.iter().all(|t| t.reward_model.is_none()));
    transitions
}

/// `--shaping progress --potential-scale S --success-progress-one` and `--phi-offset X` reach the streamed
/// reward: every logged transition's reward is its form's formula (docs/shaping.md) of the phi it carries.
#[test]
fn run_streams_the_reward_form_its_flags_name() {
    let (g, c, s) = (0.95, 2.0, 0.1);
    let progress = shaped_transitions(&[
        "--shaping",
        "progress",
        "--potential-scale",
        "0.1",
        "--success-progress-one",
    ]);
    let successes = progress
        .iter()
        .filter(|t| t.terminated && t.success)
        .count();
    assert!(successes > 0, "the expert should succeed at least once");
    for t in &progress {
        assert_eq!((t.gamma, t.shaping_scale), (g, c));
        let want = if t.terminated {
            // phi* = 1 on a success, whatever the oracle read
            assert!(!t.success || t.phi_next == 1.0, "{t:?}");
            t.task_reward - s * c * t.phi + c * t.phi_next
        } else {
            t.task_reward + s * c * (g * t.phi_next - t.phi) + c * (1.0 - g) * t.phi_next
        };
        assert!(
            (t.reward - want).abs() < 1e-9,
            "{} != {want}: {t:?}",
            t.reward
        );
    }
    let x = 0.5;
    let offset = shaped_transitions(&["--phi-offset", "0.5"]);
    assert!(!offset.is_empty());
    for t in &offset {
        let want = if t.terminated {
            assert_eq!(t.phi_next, 0.0, "{t:?}");
            t.task_reward - c * t.phi + c * x
        } else {
            t.task_reward + c * (g * t.phi_next - t.phi) + c * x * (1.0 - g)
        };
        assert!(
            (t.reward - want).abs() < 1e-9,
            "{} != {want}: {t:?}",
            t.reward
        );
    }
}

/// `models/test/<name>` with `expr` applied by Python (`b`: its bytes; `with_inputs`: the helper a learner calls;
/// `raw(b, props)`: metadata set as given, for malformed entries the helper would refuse to write).
fn py_policy(name: &str, expr: &str) -> Vec<u8> {
    let code = "import sys, onnx\nfrom onnx import helper\nfrom stagewise.export import with_inputs\n\
        def raw(b, props):\n    m = onnx.load_from_string(b)\n    helper.set_model_props(m, props)\n    return m.SerializeToString()\n\
        b = open(sys.argv[1], 'rb').read()\nsys.stdout.buffer.write(eval(sys.argv[2]))\n";
    let out = Command::new(root().join(".venv/bin/python"))
        .current_dir(root())
        .env("PYTHONPATH", root().join("python"))
        .args(["-c", code])
        .arg(root().join("models/test").join(name))
        .arg(expr)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    out.stdout
}

/// Each transition of `log` (one env) with the observation its action was chosen on: the episode's reset
/// observation for its first step, the previous step's next observation after that (`--stream-images`).
fn acted_on(log: &Path, robot: &str) -> Vec<(TransitionMsg, stagewise_core::Observation)> {
    let mut out = Vec::new();
    let mut prev: Option<stagewise_core::Observation> = None;
    for p in log_payloads(log, &Keys::new(robot).unwrap().transition()) {
        let t: TransitionMsg = decode(&p).unwrap();
        let seen = match &t.obs {
            Some(o) => o.to_observation().unwrap(),
            None => prev.take().expect("the previous step's next observation"),
        };
        prev = t.next_obs.as_ref().map(|o| o.to_observation().unwrap());
        out.push((t, seen));
    }
    out
}

/// The transitions of the last episode of `acted`, which must have some.
fn last_episode<T>(acted: &[(TransitionMsg, T)]) -> &[(TransitionMsg, T)] {
    let last = acted.last().expect("transitions").0.episode;
    let first = acted.iter().position(|(t, _)| t.episode == last).unwrap();
    &acted[first..]
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-4)
}

/// Bare ONNX bytes pushed over zenoh that declare their inputs in their metadata (written by the Python helper
/// a learner calls, `stagewise.export.with_inputs`): a state policy naming three fields in another order is
/// accepted and acts on exactly those fields; malformed metadata and a pixel policy of another size than the
/// actor renders are refused with their reasons while the accepted policy keeps running.
#[test]
fn pushed_policies_bind_the_inputs_their_metadata_declares() {
    let dir = tempfile::tempdir().unwrap();
    let names = stagewise_sim::state_spec(stagewise_sim::Task::PickPlace).names;
    let at = |o: &stagewise_core::Observation, n: &str| {
        o.state[names.iter().position(|x| x == n).unwrap()]
    };
    let linear = py_policy(
        "linear3x4.onnx",
        r#"with_inputs(b, state_names=["gripper_width", "ee_z", "ee_x"])"#,
    );
    let pixel8 = py_policy(
        "pixel3v8.onnx",
        r#"with_inputs(b, pixels={"views": ["front", "side", "wrist"], "width": 8, "height": 8}, state_names=["ee_x", "ee_y", "ee_z", "gripper_width"])"#,
    );
    let bad_json = py_policy(
        "linear3x4.onnx",
        r#"raw(b, {"stagewise.state_names": "ee_x, ee_y"})"#,
    );
    let bad_field = py_policy(
        "linear3x4.onnx",
        r#"raw(b, {"stagewise.pixels": '{"views": ["front"], "width": 8, "height": 8, "fps": 30}'})"#,
    );

    // 1. An actor rendering 32x32.
    let robot = "e2e-inputs";
    let keys = Keys::new(robot).unwrap();
    let log = dir.path().join("run.swlog");
    let args = [
        "--policy",
        "random",
        "--envs",
        "1",
        "--episodes",
        "0",
        "--max-steps",
        "8",
        "--stream-images",
    ];
    let port = free_port();
    let child = spawn_run_at(32, robot, port, &log, &args);
    let n = node(port);
    assert!(
        n.wait_for_subscribers(&keys.policy(), Duration::from_secs(60))
            .unwrap(),
        "actor never subscribed"
    );
    n.put(&keys.policy(), &PolicyMsg::new(1, bad_json)).unwrap();
    n.put(&keys.policy(), &PolicyMsg::new(2, bad_field))
        .unwrap();
    n.put(&keys.policy(), &PolicyMsg::new(3, linear)).unwrap();
    let state_file = dir.path().join(format!("{robot}.policy-state"));
    assert!(
        wait_until(Duration::from_secs(90), || state_version(&state_file)
            == Some(3)),
        "version 3 never accepted"
    );
    n.put(&keys.policy(), &PolicyMsg::new(4, pixel8.clone()))
        .unwrap();
    // Episodes of 8 steps: several run on v3 after v4 is refused.
    std::thread::sleep(Duration::from_secs(4));
    drop(n);
    let t = interrupt(child);
    assert!(t.contains("policies: 1 accepted, 3 rejected"), "{t}");
    for reason in [
        "policy v1: ONNX metadata stagewise.state_names: \"ee_x, ee_y\" is not a JSON list",
        "unknown field `fps`",
        "reads camera view \"front\" at 8x8, but this run's simulator (task pick-place, --width 32 --height 32) gives it at 32x32",
        "learner policy v3",
    ] {
        assert!(t.contains(reason), "missing {reason:?} in:\n{t}");
    }
    let acted = acted_on(&log, robot);
    let linear_acts = |(tr, o): &(TransitionMsg, stagewise_core::Observation)| {
        close(
            &tr.action,
            &[at(o, "gripper_width"), at(o, "ee_z"), at(o, "ee_x"), 0.0],
        )
    };
    let last = last_episode(&acted);
    assert!(
        last.iter().all(linear_acts),
        "the last episode ran the state policy v3 (v4 refused): {:?}",
        last.iter().map(|(t, _)| &t.action).collect::<Vec<_>>()
    );
    assert!(
        acted.iter().filter(|a| linear_acts(a)).count() >= 16,
        "two episodes or more on v3"
    );
    assert!(!linear_acts(&acted[0]), "the run started on random actions");

    // 2. An actor rendering 8x8 takes the pixel policy and is driven by its frames.
    let robot = "e2e-inputs-8";
    let keys = Keys::new(robot).unwrap();
    let log = dir.path().join("run8.swlog");
    let port = free_port();
    let child = spawn_run_at(8, robot, port, &log, &args);
    let n = node(port);
    assert!(
        n.wait_for_subscribers(&keys.policy(), Duration::from_secs(60))
            .unwrap(),
        "actor never subscribed"
    );
    n.put(&keys.policy(), &PolicyMsg::new(1, pixel8)).unwrap();
    let state_file = dir.path().join(format!("{robot}.policy-state"));
    assert!(
        wait_until(Duration::from_secs(90), || state_version(&state_file)
            == Some(1)),
        "the pixel policy was never accepted"
    );
    std::thread::sleep(Duration::from_secs(3));
    drop(n);
    let t = interrupt(child);
    assert!(t.contains("policies: 1 accepted, 0 rejected"), "{t}");
    let pixel_acts = |(tr, o): &(TransitionMsg, stagewise_core::Observation)| {
        let mut want = [0.0f32; 4];
        for (k, view) in ["front", "side", "wrist"].into_iter().enumerate() {
            let v = o.view(view).expect("the view");
            let sum: f32 = v.rgb.pixels().map(|p| f32::from(p.0[k])).sum();
            want[k] = sum / 64.0 / 255.0 * 2.0 - 1.0;
        }
        want[3] = at(o, "gripper_width");
        close(&tr.action, &want)
    };
    let acted = acted_on(&log, robot);
    let last = last_episode(&acted);
    assert!(
        last.iter().all(pixel_acts),
        "the last episode ran the pixel policy: {:?}",
        last.iter().map(|(t, _)| &t.action).collect::<Vec<_>>()
    );
}
