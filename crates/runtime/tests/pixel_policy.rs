//! Pixel policies (`[pixels]` in the manifest): the policy reads each observation's camera frames by view name,
//! then its named state fields, all envs of a step in one batch. models/test/pixel3v8 is linear, so the tests
//! compute its action from the frames it was fed: action[k] = view k's channel k mean / 255 * 2 - 1 (front red,
//! side green, wrist blue), action[3] = the gripper width.

use stagewise_core::{Env, Frame, Observation, ShapingConfig, View};
use stagewise_model::{OrtRuntime, PolicyModel, Provider, SessionOptions};
use stagewise_runtime::{
    Actor, ActorConfig, Clock, FrameStream, OnnxPolicy, Policy, PolicyError, ProgressSource,
};
use stagewise_sim::{SimConfig, SimEnv, Task};
use std::path::Path;
use std::sync::atomic::AtomicBool;

fn pixel_policy(names: &[String]) -> OnnxPolicy {
    test_policy("pixel3v8", names)
}

fn test_policy(name: &str, names: &[String]) -> OnnxPolicy {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../models/test/{name}.toml"));
    let rt = OrtRuntime::init(None).expect("ONNX Runtime (run scripts/setup.sh)");
    let opts = SessionOptions {
        provider: Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    };
    let bound = PolicyModel::load_bound(&manifest, "the test source", names, None, 4, rt, &opts)
        .expect("the pixel test policy");
    OnnxPolicy::bound(bound, name)
}

/// What pixel3v8 does with `obs` (the hand's gripper width is state field 3 of the simulator's state).
fn expected(obs: &Observation) -> [f32; 4] {
    let mut a = [0.0f32; 4];
    for (k, name) in ["front", "side", "wrist"].into_iter().enumerate() {
        let v = obs.view(name).expect("the view");
        let sum: f32 = v.rgb.pixels().map(|p| f32::from(p.0[k])).sum();
        a[k] = sum / (v.rgb.width() * v.rgb.height()) as f32 / 255.0 * 2.0 - 1.0;
    }
    a[3] = obs.state[3];
    a
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-4)
}

fn solid(rgb: [u8; 3]) -> Frame {
    Frame::from_raw(8, 8, rgb.repeat(64)).expect("8x8")
}

/// `remember_first`: each env's frames of its episode's first observation follow the current row; pixel3v8first
/// acts on those (its gripper on the current state), kept per env until the env resets or an observation of
/// step 0 comes.
#[test]
fn a_remember_first_policy_reads_each_envs_first_observation() {
    let names: Vec<String> = ["ee_x", "ee_y", "ee_z", "gripper_width"]
        .map(String::from)
        .to_vec();
    let mut policy = test_policy("pixel3v8first", &names);
    assert!(policy.pixels().is_some_and(|p| p.remember_first));
    let obs = |step: u64, front: u8, width: f32| Observation {
        step,
        time: 0.0,
        views: vec![
            View::new("front", solid([front, 0, 0])),
            View::new("side", solid([0, 0, 0])),
            View::new("wrist", solid([0, 0, 0])),
        ],
        state: vec![0.0, 0.0, 0.0, width],
    };
    let red = |acts: &[Vec<f32>], i: usize| (acts[i][0], acts[i][3]);
    // env 0 starts red, env 1 black: both keep them while their frames change
    let acts = policy
        .act(&[0, 1], &[&obs(0, 255, 0.01), &obs(0, 0, 0.02)])
        .expect("act");
    assert_eq!((red(&acts, 0), red(&acts, 1)), ((1.0, 0.01), (-1.0, 0.02)));
    let acts = policy
        .act(&[0, 1], &[&obs(1, 0, 0.03), &obs(1, 255, 0.04)])
        .expect("act");
    assert_eq!((red(&acts, 0), red(&acts, 1)), ((1.0, 0.03), (-1.0, 0.04)));
    // env 0 resets: its next observation is its first; env 1's step 0 starts its new episode without a reset
    policy.reset(0, 7);
    let acts = policy
        .act(&[0, 1], &[&obs(5, 0, 0.05), &obs(0, 255, 0.06)])
        .expect("act");
    assert_eq!((red(&acts, 0), red(&acts, 1)), ((-1.0, 0.05), (1.0, 0.06)));
    let acts = policy.act(&[1], &[&obs(1, 0, 0.07)]).expect("act");
    assert_eq!(red(&acts, 0), (1.0, 0.07));
}

/// Two envs in one call, each acting on its own frames; a frame of another size is refused naming the env's
/// view and both sizes.
#[test]
fn a_pixel_policy_acts_on_each_envs_frames_in_one_batch() {
    let names: Vec<String> = ["ee_x", "ee_y", "ee_z", "gripper_width"]
        .map(String::from)
        .to_vec();
    let mut policy = pixel_policy(&names);
    assert_eq!(policy.pixels().map(|p| p.len()), Some(576));
    let obs = |front: u8, width: f32| Observation {
        step: 0,
        time: 0.0,
        views: vec![
            View::new("side", solid([0, 102, 0])),
            View::new("front", solid([front, 0, 0])),
            View::new("wrist", solid([0, 0, 255])),
        ],
        state: vec![0.0, 0.0, 0.0, width],
    };
    let (a, b) = (obs(0, 0.01), obs(255, 0.07));
    let acts = policy.act(&[0, 1], &[&a, &b]).expect("act");
    assert!(close(&acts[0], &expected(&a)), "{:?}", acts[0]);
    assert!(close(&acts[1], &expected(&b)), "{:?}", acts[1]);
    assert!(close(&acts[1], &[1.0, -0.2, 1.0, 0.07]), "{:?}", acts[1]);
    let mut big = obs(9, 0.0);
    big.views[0] = View::new("side", Frame::new(32, 32));
    let e = policy.act(&[3], &[&big]).expect_err("a 32x32 frame");
    assert!(matches!(e, PolicyError::Run(_)), "{e}");
    let t = stagewise_core::ErrorChain(&e).to_string();
    assert!(
        t.contains("env 3") && t.contains("\"side\" is 32x32") && t.contains("8x8"),
        "{t}"
    );
}

fn sims(n: usize, max_steps: u64) -> Vec<SimEnv> {
    let mut cfg = SimConfig::new(Task::PickPlace).with_resolution(8, 8);
    cfg.depth = false;
    cfg.max_steps = max_steps;
    (0..n)
        .map(|_| SimEnv::new(cfg.clone()).expect("sim"))
        .collect()
}

/// The simulator rendered at the policy's size feeds it: its actions are what its frames say, and the actor
/// runs it over several envs (episodes end, envs reset) with the oracle's progress.
#[test]
fn a_pixel_policy_drives_simulated_envs() {
    let mut envs = sims(2, 6);
    let names = envs[0].spec().state.names.clone();
    let mut policy = pixel_policy(&names);
    let obs: Vec<Observation> = envs
        .iter_mut()
        .zip([5u64, 6])
        .map(|(e, seed)| e.reset(seed).expect("reset"))
        .collect();
    let refs: Vec<&Observation> = obs.iter().collect();
    let acts = policy.act(&[0, 1], &refs).expect("act");
    for (a, o) in acts.iter().zip(&obs) {
        assert!(close(a, &expected(o)), "{a:?} vs {:?}", expected(o));
        // A rendered scene, not a blank frame: the front view's red mean is above black's -1.
        assert!(a[0] > -0.99, "{a:?}");
    }
    let envs: Vec<Box<dyn Env>> = envs
        .into_iter()
        .map(|e| Box::new(e) as Box<dyn Env>)
        .collect();
    let config = ActorConfig {
        robot: "pixel-test".into(),
        base_seed: 40,
        shaping: ShapingConfig::new(0.99, 1.0).expect("shaping"),
        clock: Clock::Free,
        max_episodes: Some(4),
        max_steps: None,
        frames: FrameStream::Off,
    };
    let mut actor = Actor::new(
        envs,
        ProgressSource::Oracle,
        Box::new(pixel_policy(&names)),
        config,
    )
    .expect("actor");
    let stats = actor.run(&AtomicBool::new(false), |_, _| {}).expect("run");
    assert!(stats.episodes >= 4, "{stats:?}");
}
