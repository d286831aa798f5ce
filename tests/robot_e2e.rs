//! `stagewise run --bridge udp://...` across real processes: the firmware emulator (`stagewise emulator`, the
//! simulator as its plant, camera frames and object state on its scene channel) on a free loopback port, the
//! runtime driving it through the bridge with the shipped reward model, and a zenoh subscriber in this process.
//! The same run on the simulator (same seed, policy and model) is the reference: same stream and log schema,
//! the same first observation of every episode, and rewards that follow the same model.
//!
//! The firmware link is authenticated with a key file made by `stagewise robot keygen`; a run without a key is
//! refused, and the operator verbs (`robot keygen`, `robot reset-estop`) run against the emulator.
//!
//! Loopback only, multicast off. Needs the ONNX Runtime library (ORT_DYLIB_PATH or the project's .venv) and
//! the .venv's Python for the test policy, like tests/runtime_e2e.rs.

use crate::common;
use common::tiny3v_reading;
use stagewise_runtime::LogReader;
use stagewise_stream::wire::{decode, encode, WireMessage};
use stagewise_stream::{EpisodeMsg, Keys, Mode, Node, ProgressMsg, StreamConfig, TransitionMsg};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zenoh::Wait;

const MODEL: &str = "models/pick-place/pick-place-progress.toml";
const STEPS: usize = 60;
const SEED: u64 = 11;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_stagewise")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A port free for both UDP (the firmware link) and TCP (the scene channel) on loopback.
fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp bind");
        let port = tcp.local_addr().expect("addr").port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Kills the emulator when the test ends, whatever happens.
struct Emulator(Child);

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `stagewise robot keygen DIR/robot.key`: a fresh link key file.
fn keygen(dir: &Path) -> PathBuf {
    let path = dir.join("robot.key");
    let out = Command::new(exe())
        .args(["--log", "warn", "robot", "keygen"])
        .arg(&path)
        .output()
        .expect("stagewise robot keygen");
    assert!(out.status.success(), "{}", text(&out));
    path
}

/// `stagewise emulator` with the simulator plant and 32x32 views (the shipped model's input size) and the link
/// key `key`, up and answering on its scene channel.
fn spawn_emulator(port: u16, key: &Path, extra: &[&str]) -> Emulator {
    let child = Command::new(exe())
        .args(["emulator", "--log", "warn"])
        .arg("--link-key-file")
        .arg(key)
        .env_remove("STAGEWISE_LINK_KEY_FILE")
        .args(["--bind", &format!("127.0.0.1:{port}")])
        // This test is about the runtime over a robot, not the link watchdog (the bridge's fault-injection
        // suite checks the 50 ms default): a timeout a loaded machine's scheduling gaps do not trip (250 ms did
        // trip, 2 of 3 runs at load 6 on 2 cores: the emulator thread starved for ~244 ms).
        .args(["--link-timeout-ms", "1000"])
        .args(["--task", "pick-place", "--width", "32", "--height", "32"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn stagewise emulator");
    let mut emu = Emulator(child);
    let start = Instant::now();
    loop {
        if let Some(status) = emu.0.try_wait().expect("wait") {
            panic!("stagewise emulator exited early: {status}");
        }
        let up = extra.contains(&"--no-scene")
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        if up {
            // The UDP socket is bound before the scene channel; a short settle for the --no-scene case.
            std::thread::sleep(Duration::from_millis(200));
            return emu;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "stagewise emulator did not come up on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An untrained tanh MLP policy (state 14 -> action 4): deterministic and continuous in the state, so the
/// robot and the simulator get the same policy.
fn make_policy(path: &Path) {
    let py = root().join(".venv/bin/python");
    let out = Command::new(&py)
        .arg(root().join("models/make_test_models.py"))
        .arg("--policy")
        .arg(path)
        .args(["14", "4", "--seed", "5"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", py.display()));
    assert!(out.status.success(), "{}", text(&out));
}

fn run_cmd(log: &Path, policy: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(exe());
    cmd.current_dir(root())
        .env_remove("STAGEWISE_LINK_KEY_FILE")
        .args(["--log", "info", "run", "--model", MODEL, "--policy"])
        .arg(policy)
        .args(["--episodes", "2", "--max-steps", &STEPS.to_string()])
        .args([
            "--seed",
            &SEED.to_string(),
            "--width",
            "32",
            "--height",
            "32",
        ])
        .arg("--log-file")
        .arg(log)
        .args(extra);
    cmd
}

fn finish(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("stagewise run did not finish in {limit:?}\n{}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (key, payload) of every record, in order.
fn records(log: &Path) -> Vec<(String, Vec<u8>)> {
    let mut r = LogReader::open(log).expect("episode log");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("record") {
        out.push((rec.key, rec.payload));
    }
    out
}

/// Decodes every payload on `key` and checks that it re-encodes to the same bytes: the message has exactly
/// the fields (and schema version) of the wire type.
fn decode_all<M: WireMessage>(recs: &[(String, Vec<u8>)], key: &str) -> Vec<M> {
    recs.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, b)| {
            let m: M = decode(b).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(
                &encode(&m).expect("encode"),
                b,
                "{key}: not exactly the wire type"
            );
            m
        })
        .collect()
}

struct Run {
    transitions: Vec<TransitionMsg>,
    progress: Vec<ProgressMsg>,
    episodes: Vec<EpisodeMsg>,
}

fn read_run(log: &Path, robot: &str) -> Run {
    let recs = records(log);
    let keys = Keys::new(robot).unwrap();
    let mut kinds: Vec<&str> = recs.iter().map(|(k, _)| k.as_str()).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            keys.episode().as_str(),
            keys.progress().as_str(),
            keys.transition().as_str()
        ],
        "keys in {}",
        log.display()
    );
    Run {
        transitions: decode_all(&recs, &keys.transition()),
        progress: decode_all(&recs, &keys.progress()),
        episodes: decode_all(&recs, &keys.episode()),
    }
}

/// Per-episode progress readings `phi` in step order (step 0 = the reset observation).
fn phis(run: &Run, episode: u64) -> Vec<f32> {
    // The actor publishes progress for each step's observation; the reset observation's reading is the first
    // transition's `phi`.
    let mut t: Vec<&TransitionMsg> = run
        .transitions
        .iter()
        .filter(|m| m.episode == episode)
        .collect();
    t.sort_by_key(|m| m.step);
    t.first()
        .map(|m| m.phi as f32)
        .into_iter()
        .chain(t.iter().map(|m| m.phi_next as f32))
        .collect()
}

/// The shaped rewards are `gamma * phi' - phi` of the model's readings (potential shaping, no task reward on
/// a robot), and the progress messages are the model's (6 stage probabilities summing to 1).
fn check_rewards_are_the_models(run: &Run) {
    for m in &run.progress {
        assert_eq!(m.stage_probs.len(), 6, "the shipped model has 6 stages");
        let sum: f32 = m.stage_probs.iter().sum();
        assert!((sum - 1.0).abs() < 1e-4, "stage probabilities sum to {sum}");
        let argmax = m
            .stage_probs
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32);
        assert_eq!(Some(m.stage), argmax);
    }
    // Each step's progress message carries the reading the transition was shaped with.
    for m in &run.progress {
        let p = phis(run, m.episode);
        assert_eq!(
            p.get(m.step as usize),
            Some(&m.phi),
            "progress step {}",
            m.step
        );
    }
    for t in &run.transitions {
        let p: Vec<f32> = phis(run, t.episode);
        let (phi, next) = (p[t.step as usize] as f64, p[t.step as usize + 1] as f64);
        assert_eq!(t.phi, phi, "transition phi is the model's reading");
        assert_eq!(t.phi_next, next);
        let want = t.task_reward + t.shaping_scale * (t.gamma * next - phi);
        assert!(
            (t.reward - want).abs() < 1e-12,
            "reward {} != {want}",
            t.reward
        );
    }
}

fn stats(a: &[f32], b: &[f32]) -> (f64, f64, f64) {
    let d: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).abs())
        .collect();
    let mean = d.iter().sum::<f64>() / d.len().max(1) as f64;
    let max = d.iter().cloned().fold(0.0, f64::max);
    let n = a.len().min(b.len()) as f64;
    let (ma, mb) = (
        a.iter().map(|x| *x as f64).sum::<f64>() / n,
        b.iter().map(|x| *x as f64).sum::<f64>() / n,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (*x as f64 - ma, *y as f64 - mb);
        sab += x * y;
        saa += x * x;
        sbb += y * y;
    }
    let corr = if saa > 0.0 && sbb > 0.0 {
        sab / (saa * sbb).sqrt()
    } else {
        f64::NAN
    };
    (mean, max, corr)
}

#[test]
fn the_runtime_drives_the_emulated_robot_like_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.onnx");
    make_policy(&policy);

    // Reference: the simulator, one env.
    let sim_log = dir.path().join("sim.swlog");
    let out = run_cmd(
        &sim_log,
        &policy,
        &["--envs", "1", "--no-stream", "--robot-name", "ref-sim"],
    )
    .output()
    .expect("stagewise run (sim)");
    assert!(out.status.success(), "{}", text(&out));

    // The robot: emulator + bridge + scene channel, streaming to a subscriber in this process.
    let key = keygen(dir.path());
    let port = free_port();
    let emu = spawn_emulator(port, &key, &[]);
    let zport = free_port();
    let robot = "e2e-robot";
    let keys = Keys::new(robot).unwrap();
    let robot_log = dir.path().join("robot.swlog");
    let child = run_cmd(
        &robot_log,
        &policy,
        &[
            "--bridge",
            &format!("udp://127.0.0.1:{port}"),
            "--robot-name",
            robot,
            "--listen",
            &format!("tcp/127.0.0.1:{zport}"),
            "--wait-subscribers",
            "30",
            // A bench on loopback: no learner pushes policies here (a real robot needs --policy-key).
            "--allow-unsigned-policies",
            // The same state policy as the simulator's: it reads the scene channel's object state.
            "--policy-reads-scene",
            "--link-key-file",
            key.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn stagewise run (robot)");
    let node = Node::open(&StreamConfig {
        mode: Some(Mode::Peer),
        connect: vec![format!("tcp/127.0.0.1:{zport}")],
        listen: vec![],
        config_file: None,
        multicast_scouting: Some(false),
        max_message_size: None,
    })
    .expect("zenoh session");
    let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let _sub = node
        .session()
        .declare_subscriber(keys.transition())
        .callback(move |s| sink.lock().unwrap().push(s.payload().to_bytes().to_vec()))
        .wait()
        .expect("subscriber");
    let out = finish(child, Duration::from_secs(240));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains(&format!("2 episodes, {} env-steps", 2 * STEPS)),
        "{t}"
    );
    assert!(!t.contains("panicked"), "{t}");
    drop(emu);

    // Same stream and log schema as the simulator run (only the robot name differs).
    let sim = read_run(&sim_log, "ref-sim");
    let rob = read_run(&robot_log, robot);
    for r in [&sim, &rob] {
        assert_eq!(r.transitions.len(), 2 * STEPS);
        assert_eq!(r.progress.len(), 2 * STEPS, "one progress message per step");
        assert_eq!(r.episodes.len(), 2);
    }
    assert!(rob.transitions.iter().all(|m| m.robot == robot));
    // What the subscriber got is what the log holds, byte for byte.
    let logged: Vec<Vec<u8>> = records(&robot_log)
        .into_iter()
        .filter(|(k, _)| *k == keys.transition())
        .map(|(_, b)| b)
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || got.lock().unwrap().len()
            >= logged.len()),
        "subscriber got {} of {} transitions",
        got.lock().unwrap().len(),
        logged.len()
    );
    assert_eq!(*got.lock().unwrap(), logged);

    // The rewards are the model's.
    check_rewards_are_the_models(&rob);
    check_rewards_are_the_models(&sim);
    for (s, r) in sim.episodes.iter().zip(&rob.episodes) {
        assert_eq!((s.episode, s.length), (r.episode, r.length));
        assert!(r.truncated && !r.terminated);
    }

    // Robot vs simulator, step by step.
    let mut all = (Vec::new(), Vec::new());
    let mut rew = (Vec::new(), Vec::new());
    for ep in 0..2u64 {
        let (ps, pr) = (phis(&sim, ep), phis(&rob, ep));
        assert_eq!(ps.len(), STEPS + 1);
        assert_eq!(pr.len(), STEPS + 1);
        // The scene channel reset the plant with the episode's seed: the first observation is the simulator's
        // (same world, same frames; the robot's own state came over the firmware link as f32).
        assert!(
            (ps[0] - pr[0]).abs() < 1e-3,
            "episode {ep}: phi at reset {} (robot) vs {} (sim)",
            pr[0],
            ps[0]
        );
        let (mean, max, corr) = stats(&ps, &pr);
        let ret = |r: &Run| r.episodes[ep as usize].episode_return;
        eprintln!(
            "episode {ep}: phi robot vs sim: mean |d| {mean:.4}, max |d| {max:.4}, corr {corr:.3}; final phi {:.3} vs {:.3}; return {:+.4} vs {:+.4}",
            pr[STEPS], ps[STEPS], ret(&rob), ret(&sim)
        );
        all.0.extend(ps);
        all.1.extend(pr);
        let rs = |r: &Run| -> Vec<f32> {
            r.transitions
                .iter()
                .filter(|t| t.episode == ep)
                .map(|t| t.reward as f32)
                .collect()
        };
        rew.0.extend(rs(&sim));
        rew.1.extend(rs(&rob));
    }
    let (mean, max, corr) = stats(&all.0, &all.1);
    let (rmean, rmax, rcorr) = stats(&rew.0, &rew.1);
    eprintln!(
        "all steps: phi mean |d| {mean:.4}, max |d| {max:.4}, corr {corr:.3}; reward mean |d| {rmean:.5}, max |d| {rmax:.5}, corr {rcorr:.3}"
    );
    // The control path is real time (1 kHz firmware, 50 Hz plant and host on separate clocks), so the two
    // runs are close, not equal; see firmware-bridge/README.md for measured figures.
    assert!(mean < 0.05, "phi differs by {mean} on average");
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

/// `stagewise run` with extra arguments, expected to fail within `limit`; returns its output.
fn run_fails(args: &[&str], limit: Duration) -> String {
    let start = Instant::now();
    let child = Command::new(exe())
        .current_dir(root())
        .env_remove("STAGEWISE_LINK_KEY_FILE")
        .args(["--log", "warn", "run", "--no-stream", "--episodes", "1"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stagewise run");
    let out = finish(child, limit + Duration::from_secs(30));
    let t = text(&out);
    assert!(!out.status.success(), "expected a failure:\n{t}");
    assert!(!t.contains("panicked"), "{t}");
    assert!(
        start.elapsed() < limit,
        "took {:?} to fail:\n{t}",
        start.elapsed()
    );
    t
}

/// Over a robot a policy may read only what the robot measures: a bare .onnx (it names no inputs) and a manifest
/// naming the block's pose are refused, naming the fields; `--policy-reads-scene` is the explicit way round.
#[test]
fn a_policy_reading_what_the_robot_does_not_measure_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let port = free_port();
    let _emu = spawn_emulator(port, &key, &[]);
    let url = format!("udp://127.0.0.1:{port}");
    let policy = dir.path().join("policy.onnx");
    make_policy(&policy);
    let manifest = common::named_policy(
        dir.path(),
        &[
            "ee_x",
            "ee_y",
            "ee_z",
            "gripper_width",
            "grasped",
            "block0_x",
            "block0_y",
            "block0_z",
            "block0_qw",
            "block0_qx",
            "block0_qy",
            "block0_qz",
            "target_x",
            "target_y",
        ],
    );
    let link = ["--bridge", &url, "--link-key-file", key.to_str().unwrap()];
    let t = run_fails(
        &[&link[..], &["--policy", policy.to_str().unwrap()]].concat(),
        Duration::from_secs(30),
    );
    assert!(
        t.contains("bare ONNX file") && t.contains("--policy-reads-scene"),
        "{t}"
    );
    let t = run_fails(
        &[&link[..], &["--policy", manifest.to_str().unwrap()]].concat(),
        Duration::from_secs(30),
    );
    assert!(
        t.contains("grasped, block0_x") && t.contains("does not measure"),
        "{t}"
    );
}

/// A policy that reads the reward model's frame embeddings and the robot's own fields drives the emulated robot
/// over the bridge: the embeddings of the scene channel's frames from the run's reward model, the hand's fields
/// from its proprioception; no `--policy-reads-scene` needed.
#[test]
fn a_policy_of_embeddings_and_proprioception_drives_the_robot() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let port = free_port();
    let _emu = spawn_emulator(port, &key, &[]);
    let policy = common::embedding_policy(
        dir.path(),
        &["ee_x", "ee_y", "ee_z", "gripper_width"],
        MODEL,
    );
    let out = Command::new(exe())
        .current_dir(root())
        .env_remove("STAGEWISE_LINK_KEY_FILE")
        .args([
            "--log",
            "warn",
            "run",
            "--no-stream",
            "--model",
            MODEL,
            "--policy",
        ])
        .arg(&policy)
        .args([
            "--episodes",
            "1",
            "--max-steps",
            "20",
            "--width",
            "32",
            "--height",
            "32",
        ])
        .args([
            "--bridge",
            &format!("udp://127.0.0.1:{port}"),
            "--link-key-file",
        ])
        .arg(&key)
        .arg("--log-file")
        .arg(dir.path().join("emb.swlog"))
        .output()
        .expect("stagewise run");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("1 episodes, 20 env-steps"), "{t}");
}

/// A pixel policy of the scene channel's frames (at the emulator's 32x32) and the robot's own fields drives the
/// emulated robot over the bridge, with no `--policy-reads-scene`: its state names are proprioception only. One of
/// another frame size is refused before it acts, naming both sizes.
#[test]
fn a_pixel_policy_of_camera_frames_and_proprioception_drives_the_robot() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let port = free_port();
    let _emu = spawn_emulator(port, &key, &[]);
    let policy = common::pixel_policy(dir.path(), 32);
    let out = Command::new(exe())
        .current_dir(root())
        .env_remove("STAGEWISE_LINK_KEY_FILE")
        .args([
            "--log",
            "warn",
            "run",
            "--no-stream",
            "--model",
            MODEL,
            "--policy",
        ])
        .arg(&policy)
        .args(["--episodes", "1", "--max-steps", "20"])
        .args([
            "--bridge",
            &format!("udp://127.0.0.1:{port}"),
            "--link-key-file",
        ])
        .arg(&key)
        .arg("--log-file")
        .arg(dir.path().join("pix.swlog"))
        .output()
        .expect("stagewise run");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("1 episodes, 20 env-steps"), "{t}");
    let small = common::pixel_policy(dir.path(), 16);
    let url = format!("udp://127.0.0.1:{port}");
    let t = run_fails(
        &[
            "--model",
            MODEL,
            "--policy",
            small.to_str().unwrap(),
            "--bridge",
            &url,
            "--link-key-file",
            key.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(
        t.contains("at 16x16") && t.contains("the robot's cameras") && t.contains("at 32x32"),
        "{t}"
    );
}

#[test]
fn a_robot_that_does_not_answer_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let port = free_port();
    let url = format!("udp://127.0.0.1:{port}");
    let t = run_fails(
        &[
            "--bridge",
            &url,
            "--robot-timeout",
            "1",
            "--policy",
            "random",
            "--link-key-file",
            key.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(t.contains(&url), "{t}");
    assert!(t.contains("no answer from the firmware"), "{t}");
}

#[test]
fn an_emulator_without_its_scene_channel_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let port = free_port();
    let _emu = spawn_emulator(port, &key, &["--no-scene"]);
    let t = run_fails(
        &[
            "--bridge",
            &format!("udp://127.0.0.1:{port}"),
            "--robot-timeout",
            "1",
            "--policy",
            "random",
            "--link-key-file",
            key.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(
        t.contains(&format!("scene channel tcp://127.0.0.1:{port}")),
        "{t}"
    );
    assert!(t.contains("cannot connect"), "{t}");
}

#[test]
fn what_a_robot_cannot_give_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let url = "udp://127.0.0.1:9";
    let t = run_fails(
        &["--bridge", url, "--reward", "oracle"],
        Duration::from_secs(20),
    );
    assert!(
        t.contains("--reward oracle reads the simulator's ground-truth progress")
            && t.contains(url),
        "{t}"
    );
    // A robot has no task reward: a sparse run would stream 0 at every step.
    let t = run_fails(
        &["--bridge", url, "--reward", "sparse"],
        Duration::from_secs(20),
    );
    assert!(
        t.contains("--reward sparse") && t.contains("reports none"),
        "{t}"
    );
    let t = run_fails(
        &["--bridge", url, "--policy", "expert"],
        Duration::from_secs(20),
    );
    assert!(t.contains("--policy expert") && t.contains(url), "{t}");
    let t = run_fails(
        &["--bridge", url, "--policy", "random", "--envs", "2"],
        Duration::from_secs(20),
    );
    assert!(t.contains("--envs must be 1"), "{t}");
    let t = run_fails(
        &[
            "--bridge",
            url,
            "--policy",
            "random",
            "--cameras",
            "v4l2:/dev/video0",
            "--link-key-file",
            key.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(t.contains("camera /dev/video0: not built with v4l2"), "{t}");
}

/// Over a robot a reward model reads camera frames and the robot's proprioception only: object poses from the
/// scene channel stay on the observation for the log, and a model asking for one is refused before the robot is
/// even contacted, naming the field and listing what the robot measures.
#[test]
fn a_model_reading_object_poses_is_refused_over_a_robot() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny3v_reading(
        tmp.path(),
        &[
            "ee_x",
            "ee_y",
            "ee_z",
            "gripper_width",
            "block0_x",
            "block0_y",
            "block0_z",
            "grasped",
        ],
    );
    // Nothing listens on this port: the refusal must come first.
    let key = keygen(tmp.path());
    let url = format!("udp://127.0.0.1:{}", free_port());
    let t = run_fails(
        &[
            "--bridge",
            &url,
            "--policy",
            "random",
            "--model",
            model.to_str().unwrap(),
            "--link-key-file",
            key.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(
        t.contains("reads state field \"block0_x\"")
            && t.contains(&url)
            && t.contains("it has: ee_x, ee_y, ee_z, gripper_width"),
        "{t}"
    );
    assert!(!t.contains("no answer from the firmware"), "{t}");
}

/// A robot run without a link key is refused before the robot is contacted; the opt-out is explicit and logged,
/// and a host with the public key gets no answer from a firmware that has a real one.
#[test]
fn a_robot_run_needs_the_link_key() {
    let url = format!("udp://127.0.0.1:{}", free_port());
    let t = run_fails(
        &["--bridge", &url, "--policy", "random"],
        Duration::from_secs(20),
    );
    assert!(
        t.contains("refusing to drive the robot")
            && t.contains("--link-key-file")
            && t.contains(&url),
        "{t}"
    );
    assert!(!t.contains("no answer from the firmware"), "{t}");
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let port = free_port();
    let _emu = spawn_emulator(port, &key, &[]);
    let url = format!("udp://127.0.0.1:{port}");
    let t = run_fails(
        &[
            "--bridge",
            &url,
            "--policy",
            "random",
            "--robot-timeout",
            "1",
            "--allow-unauthenticated-link",
        ],
        Duration::from_secs(20),
    );
    assert!(t.contains("UNAUTHENTICATED FIRMWARE LINK"), "{t}");
    assert!(
        t.contains("no answer from the firmware") && t.contains("link key"),
        "{t}"
    );
}

/// The emulator, like a firmware, refuses to start without a key; `robot keygen` never overwrites a key file
/// and writes it for the owner only; `robot reset-estop` clears nothing when nothing is latched, and cannot
/// reach a firmware with another key.
#[test]
fn the_operator_verbs_and_the_emulator_need_keys() {
    let out = Command::new(exe())
        .args([
            "--log",
            "warn",
            "emulator",
            "--bind",
            "127.0.0.1:0",
            "--plant",
            "kinematic",
        ])
        .env_remove("STAGEWISE_LINK_KEY_FILE")
        .output()
        .expect("stagewise emulator");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("refusing to start without a link key"),
        "{}",
        text(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let again = Command::new(exe())
        .args(["--log", "warn", "robot", "keygen"])
        .arg(&key)
        .output()
        .expect("keygen");
    assert!(!again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("never overwritten"),
        "{}",
        text(&again)
    );
    let port = free_port();
    let _emu = spawn_emulator(port, &key, &["--no-scene"]);
    let url = format!("udp://127.0.0.1:{port}");
    let reset = |key: &Path| {
        Command::new(exe())
            .args([
                "--log",
                "warn",
                "robot",
                "reset-estop",
                "--bridge",
                &url,
                "--robot-timeout",
                "1",
            ])
            .arg("--link-key-file")
            .arg(key)
            .env_remove("STAGEWISE_LINK_KEY_FILE")
            .output()
            .expect("stagewise robot reset-estop")
    };
    let out = reset(&key);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("no e-stop was latched"),
        "{}",
        text(&out)
    );
    let other_dir = tempfile::tempdir().unwrap();
    let other = keygen(other_dir.path());
    let out = reset(&other);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("no answer from the firmware"),
        "{}",
        text(&out)
    );
}
