//! `ShapedEnv`, the reward path of both `stagewise run` (all envs in one) and `stagewise serve` (one env each):
//! real simulated envs, the oracle, the sparse source and the shipped pick-place reward model. A one-env
//! `ShapedEnv` per env must give what one batched `ShapedEnv` over all of them gives; the rewards are the
//! potential-based formula on the cached potentials (terminated: `Phi(s') = 0`, truncated: kept).

use stagewise_core::{Env, EnvError, EnvSpec, Observation, ShapingConfig, StepResult};
use stagewise_model::{ModelForm, RewardModel, StateMap};
use stagewise_runtime::{ProgressSource, RuntimeError, ShapedEnv, StepOutcome};
use stagewise_sim::{Degradation, Expert, SimConfig, SimEnv, Task};
use std::sync::{Arc, Mutex};

fn sim(task: Task, max_steps: u64, render: bool) -> SimEnv {
    let mut cfg = SimConfig::new(task).with_resolution(32, 32);
    cfg.max_steps = max_steps;
    cfg.render = render;
    cfg.depth = false;
    SimEnv::new(cfg).expect("sim config")
}

fn boxed(envs: Vec<SimEnv>) -> Vec<Box<dyn Env>> {
    envs.into_iter()
        .map(|e| Box::new(e) as Box<dyn Env>)
        .collect()
}

fn pick_place_model() -> RewardModel {
    crate::common::pick_place_model(ModelForm::SingleGraph)
}

/// A fixed, seeded action sequence that moves the gripper (so that progress changes).
fn action(t: usize, env: usize) -> Vec<f32> {
    let k = (t * 7 + env * 3) % 11;
    let s = |i: usize| ((k + i * 5) % 11) as f32 / 5.0 - 1.0;
    vec![s(0), s(1), s(2), if t % 4 < 2 { 1.0 } else { -1.0 }]
}

/// Every shaped step keeps core's potential-based formula on the potentials it reported.
fn check_formula(out: &StepOutcome, shaping: &ShapingConfig, phi_before: f64) {
    let s = &out.shaped;
    assert_eq!(
        s.phi, phi_before,
        "the potential cached at the previous step"
    );
    assert_eq!(s.task_reward, out.result.reward);
    let next = if out.result.terminated {
        0.0
    } else {
        s.phi_next_observed
    };
    assert_eq!(s.phi_next, next);
    let expected = s.task_reward + shaping.scale * (shaping.gamma * next - s.phi);
    assert_eq!(s.reward, expected, "{s:?}");
    assert_eq!(s.gamma, shaping.gamma);
    assert_eq!(s.terminated, out.result.terminated);
    assert_eq!(s.truncated, out.result.truncated);
}

/// Steps `batched` (N envs) and `single[i]` (env i alone) with the same actions and seeds through resets, and
/// returns every outcome of the batched one after checking that the single ones agree to `tol`.
fn lockstep(
    batched: &mut ShapedEnv,
    single: &mut [ShapedEnv],
    steps: usize,
    tol: f64,
) -> Vec<Vec<StepOutcome>> {
    let n = batched.len();
    let shaping = *batched.shaping();
    let seeds: Vec<(usize, u64)> = (0..n).map(|i| (i, 40 + i as u64)).collect();
    let b = batched.reset(&seeds).expect("batched reset");
    let mut phi = Vec::new();
    for (i, r) in b.iter().enumerate() {
        let s = single[i].reset_one(0, 40 + i as u64).expect("single reset");
        assert_eq!(r.obs, s.obs);
        assert_eq!(r.episode, s.episode);
        let (pb, ps) = (r.progress.as_ref(), s.progress.as_ref());
        assert_eq!(pb.is_some(), ps.is_some());
        if let (Some(pb), Some(ps)) = (pb, ps) {
            assert!((pb.phi - ps.phi).abs() as f64 <= tol, "{pb:?} {ps:?}");
        }
        phi.push(pb.map_or(0.0, |p| f64::from(p.phi)));
    }
    let mut all = Vec::new();
    let mut next_seed = 100;
    for t in 0..steps {
        let actions: Vec<Vec<f32>> = (0..n).map(|i| action(t, i)).collect();
        let outs = batched.step(&actions).expect("batched step");
        let mut done = Vec::new();
        for (i, out) in outs.iter().enumerate() {
            let s = single[i]
                .step(&[actions[i].as_slice()])
                .expect("single step");
            let s = &s[0];
            assert_eq!(out.result.obs, s.result.obs);
            assert_eq!(out.result.reward, s.result.reward);
            assert_eq!(out.progress.is_some(), s.progress.is_some());
            let (a, b) = (&out.shaped, &s.shaped);
            assert_eq!((a.episode, a.step), (b.episode, b.step));
            assert_eq!(
                (a.terminated, a.truncated, a.success),
                (b.terminated, b.truncated, b.success)
            );
            for (x, y) in [
                (a.reward, b.reward),
                (a.phi, b.phi),
                (a.phi_next, b.phi_next),
            ] {
                assert!((x - y).abs() <= tol, "env {i} step {t}: {a:?} vs {b:?}");
            }
            check_formula(out, &shaping, phi[i]);
            phi[i] = out.shaped.phi_next_observed;
            if out.shaped.done() {
                done.push((i, next_seed));
                next_seed += 1;
            }
        }
        if !done.is_empty() {
            for (r, &(i, seed)) in batched.reset(&done).expect("reset").iter().zip(&done) {
                single[i].reset_one(0, seed).expect("single reset");
                phi[i] = r.progress.as_ref().map_or(0.0, |p| f64::from(p.phi));
            }
        }
        all.push(outs);
    }
    all
}

#[test]
fn oracle_one_env_each_steps_as_the_batch_and_is_zero_at_reset() {
    let shaping = ShapingConfig::new(0.97, 2.0).expect("shaping");
    let make = |n: usize| {
        (0..n)
            .map(|i| sim(Task::PickPlace, 9 + 4 * i as u64, false))
            .collect()
    };
    let mut batched = ShapedEnv::new(boxed(make(3)), ProgressSource::Oracle, shaping).unwrap();
    let mut single: Vec<ShapedEnv> = make(3)
        .into_iter()
        .map(|e| ShapedEnv::new(boxed(vec![e]), ProgressSource::Oracle, shaping).unwrap())
        .collect();
    for (shaped, env) in [(&mut batched, 1), (&mut single[1], 0)] {
        let r = shaped.reset_one(env, 5).expect("reset");
        let p = r.progress.expect("oracle progress");
        assert_eq!(
            (p.phi, p.stage),
            (0.0, 0),
            "the oracle's progress is 0 at reset"
        );
    }
    let all = lockstep(&mut batched, &mut single, 30, 0.0);
    let mut moved = false;
    let mut truncations = 0;
    for outs in &all {
        for out in outs {
            let p = out.progress.as_ref().expect("oracle progress");
            assert_eq!(Some(p.phi), out.result.info.progress_oracle);
            assert_eq!(p.stage, out.result.info.stage.unwrap_or(0));
            moved |= p.phi > 0.0;
            if out.result.truncated {
                truncations += 1;
                assert_eq!(out.shaped.phi_next, out.shaped.phi_next_observed, "kept");
            }
        }
    }
    assert!(moved, "the oracle's progress never moved");
    assert!(
        truncations >= 4,
        "episodes of 9, 13 and 17 steps were truncated"
    );
}

#[test]
fn sparse_serves_the_task_reward_and_no_progress() {
    let shaping = ShapingConfig::new(0.99, 1.0).expect("shaping");
    let mut batched = ShapedEnv::new(
        boxed(vec![
            sim(Task::PushTarget, 6, false),
            sim(Task::PushTarget, 8, false),
        ]),
        ProgressSource::Sparse,
        shaping,
    )
    .unwrap();
    let mut single: Vec<ShapedEnv> = [6, 8]
        .into_iter()
        .map(|m| {
            let envs = boxed(vec![sim(Task::PushTarget, m, false)]);
            ShapedEnv::new(envs, ProgressSource::Sparse, shaping).unwrap()
        })
        .collect();
    assert_eq!(batched.progress_source().name(), "sparse");
    for outs in lockstep(&mut batched, &mut single, 20, 0.0) {
        for out in outs {
            assert!(out.progress.is_none());
            assert_eq!((out.shaped.phi, out.shaped.phi_next), (0.0, 0.0));
            assert_eq!(out.shaped.reward, out.result.reward);
        }
    }
}

#[test]
fn reward_model_one_env_each_reads_what_the_batch_reads() {
    let shaping = ShapingConfig::new(0.97, 2.0).expect("shaping");
    let make = |n: usize| {
        (0..n)
            .map(|i| sim(Task::PickPlace, 7 + 5 * i as u64, true))
            .collect()
    };
    let model = ProgressSource::Model(Box::new(pick_place_model()));
    let mut batched = ShapedEnv::new(boxed(make(2)), model, shaping).unwrap();
    let mut single: Vec<ShapedEnv> = make(2)
        .into_iter()
        .map(|e| {
            let model = ProgressSource::Model(Box::new(pick_place_model()));
            ShapedEnv::new(boxed(vec![e]), model, shaping).unwrap()
        })
        .collect();
    let all = lockstep(&mut batched, &mut single, 20, 1e-6);
    let phis: Vec<f32> = all
        .iter()
        .flatten()
        .map(|o| o.progress.as_ref().expect("model progress").phi)
        .collect();
    let (lo, hi) = phis
        .iter()
        .fold((f32::MAX, f32::MIN), |(l, h), &p| (l.min(p), h.max(p)));
    assert!(hi - lo > 1e-4, "the model's progress never moved: {phis:?}");
}

/// A simulator shared with the test, so that the scripted expert can read its world between steps.
struct Shared(Arc<Mutex<SimEnv>>, EnvSpec);

impl Env for Shared {
    fn spec(&self) -> &EnvSpec {
        &self.1
    }
    fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        self.0.lock().expect("sim lock").reset(seed)
    }
    fn step(&mut self, action: &[f32]) -> Result<StepResult, EnvError> {
        self.0.lock().expect("sim lock").step(action)
    }
}

#[test]
fn terminated_episodes_take_no_potential_from_the_final_state() {
    let shaping = ShapingConfig::new(0.95, 3.0).expect("shaping");
    let env = Arc::new(Mutex::new(sim(Task::PushTarget, 400, false)));
    let spec = env.lock().unwrap().spec().clone();
    let envs: Vec<Box<dyn Env>> = vec![Box::new(Shared(env.clone(), spec))];
    let mut shaped = ShapedEnv::new(envs, ProgressSource::Oracle, shaping).unwrap();
    let mut terminated = 0;
    for seed in [1u64, 2] {
        let mut expert = Expert::with_seed(Task::PushTarget, Degradation::none(), seed);
        let mut phi = f64::from(shaped.reset_one(0, seed).unwrap().progress.unwrap().phi);
        for _ in 0..400 {
            let a = expert.act_env(&env.lock().unwrap());
            let out = shaped.step(&[a.as_slice()]).unwrap().remove(0);
            check_formula(&out, &shaping, phi);
            phi = out.shaped.phi_next_observed;
            if out.result.terminated {
                assert_eq!(out.shaped.phi_next, 0.0);
                assert!(out.shaped.phi_next_observed > 0.9, "{:?}", out.shaped);
                terminated += 1;
            }
            if out.shaped.done() {
                break;
            }
        }
    }
    assert_eq!(terminated, 2, "the expert pushes the block onto the target");
}

#[test]
fn bad_calls_are_errors_that_name_the_env() {
    let shaping = ShapingConfig::new(0.99, 1.0).expect("shaping");
    let two = || {
        boxed(vec![
            sim(Task::PickPlace, 5, false),
            sim(Task::PickPlace, 5, false),
        ])
    };
    let err = ShapedEnv::new(Vec::new(), ProgressSource::Oracle, shaping)
        .err()
        .expect("no envs");
    assert!(
        err.to_string().contains("at least one environment"),
        "{err}"
    );
    let mut shaped = ShapedEnv::new(two(), ProgressSource::Oracle, shaping).unwrap();
    let err = shaped.reset_one(2, 0).expect_err("env 2 of 2");
    assert!(
        err.to_string().contains("reset of env 2: there are 2 envs"),
        "{err}"
    );
    shaped.reset(&[(0, 1), (1, 2)]).unwrap();
    let err = shaped.step(&[action(0, 0)]).expect_err("one action");
    assert!(err.to_string().contains("1 actions for 2 envs"), "{err}");
    let err = shaped
        .step(&[action(0, 0), vec![0.0; 2]])
        .expect_err("a short action");
    assert!(
        matches!(&err, RuntimeError::Env { env: 1, .. }),
        "env 1's action is short: {err}"
    );
    // The env's own error is the source, printed once by a chain walker.
    let chain = stagewise_core::ErrorChain(&err).to_string();
    assert!(chain.contains("action has 2 values"), "{chain}");
    // One model reads one state layout: envs that name different state fields are refused, and so is a model
    // bound by the caller to a state of another size.
    let mixed = boxed(vec![
        sim(Task::PickPlace, 5, false),
        sim(Task::Stack, 5, false),
    ]);
    let model = ProgressSource::Model(Box::new(pick_place_model()));
    let err = ShapedEnv::new(mixed, model, shaping)
        .err()
        .expect("two layouts");
    assert!(
        err.to_string().contains("env 1 names its state fields"),
        "{err}"
    );
    let mut model = pick_place_model();
    let stack = sim(Task::Stack, 5, false);
    let names = stack.spec().state.names.clone();
    let map = StateMap::bind_source(model.manifest(), "stack", &names, None).expect("bind");
    model.set_state_map(map).expect("set");
    let err = ShapedEnv::new(two(), ProgressSource::Model(Box::new(model)), shaping)
        .err()
        .expect("bound to 19 values");
    assert!(
        err.to_string()
            .contains("was bound to a state of 19 values; the env's state has 14"),
        "{err}"
    );
}

/// Runs an actor (random policy, the sparse source) over `envs` until `max_episodes` have ended, with `frames`;
/// its statistics and every record of its log, in order.
fn actor_log(
    envs: Vec<Box<dyn Env>>,
    frames: stagewise_runtime::FrameStream,
    max_episodes: u64,
) -> (
    stagewise_runtime::RunStats,
    Vec<stagewise_runtime::LogRecord>,
) {
    use stagewise_runtime::{Actor, ActorConfig, Clock, EpisodeLog, LogReader, RandomPolicy};
    let policy = RandomPolicy::new(&envs[0].spec().action, 3);
    let config = ActorConfig {
        robot: "actor-test".into(),
        base_seed: 0,
        shaping: ShapingConfig::new(0.99, 1.0).expect("shaping"),
        clock: Clock::Free,
        max_episodes: Some(max_episodes),
        max_steps: None,
        frames,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("actor.swlog");
    let mut actor = Actor::new(envs, ProgressSource::Sparse, Box::new(policy), config)
        .expect("actor")
        .with_log(EpisodeLog::create(&log).expect("log"));
    let stats = actor
        .run(&std::sync::atomic::AtomicBool::new(false), |_, _| {})
        .expect("run");
    drop(actor);
    let mut reader = LogReader::open(&log).expect("open log");
    let mut records = Vec::new();
    while let Some(rec) = reader.next_record().expect("record") {
        records.push(rec);
    }
    (stats, records)
}

/// The transitions among a log's records, decoded.
fn transitions_of(records: &[stagewise_runtime::LogRecord]) -> Vec<stagewise_wire::TransitionMsg> {
    records
        .iter()
        .filter(|r| r.key.ends_with("/transition"))
        .map(|r| stagewise_wire::decode(&r.payload).expect("transition"))
        .collect()
}

#[test]
fn an_actor_on_the_sparse_source_streams_the_task_reward_and_no_progress() {
    use stagewise_runtime::FrameStream;
    let envs = boxed(vec![
        sim(Task::PickPlace, 6, false),
        sim(Task::PickPlace, 9, false),
    ]);
    let (stats, records) = actor_log(envs, FrameStream::Off, 4);
    assert!(stats.episodes >= 4 && stats.env_steps > 0);
    for rec in &records {
        assert!(
            !rec.key.ends_with("/progress"),
            "no progress on {}",
            rec.key
        );
    }
    let transitions = transitions_of(&records);
    for t in &transitions {
        assert_eq!(t.reward, t.task_reward);
        assert_eq!((t.phi, t.phi_next, t.stage), (0.0, 0.0, None));
        // No model shaped the reward: the transition names none.
        assert_eq!(t.reward_model, None);
    }
    assert_eq!(ProgressSource::Oracle.reward_model(), None);
    let episodes = records
        .iter()
        .filter(|r| r.key.ends_with("/episode"))
        .count() as u64;
    assert_eq!(
        (transitions.len() as u64, episodes),
        (stats.env_steps, stats.episodes)
    );
}

/// Transitions and whether each carried frames (and depth), in log order, of two rendering pick-place envs.
fn frames_on_transitions(frames: stagewise_runtime::FrameStream) -> Vec<(u64, bool, bool, bool)> {
    let with_depth = || {
        let mut cfg = SimConfig::new(Task::PickPlace).with_resolution(32, 32);
        (cfg.max_steps, cfg.render, cfg.depth) = (7, true, true);
        SimEnv::new(cfg).expect("sim config")
    };
    let (_, records) = actor_log(boxed(vec![with_depth(), with_depth()]), frames, 2);
    let out: Vec<_> = transitions_of(&records)
        .iter()
        .map(|t| {
            let (has, depth) = t.next_obs.as_ref().map_or((false, false), |o| {
                assert_eq!(o.images.len(), 3, "every view's RGB");
                (true, !o.depth.is_empty())
            });
            (t.step, t.terminated || t.truncated, has, depth)
        })
        .collect();
    assert!(!out.is_empty());
    out
}

#[test]
fn the_actor_streams_frames_on_every_transition_on_a_sample_of_them_or_on_none() {
    use stagewise_runtime::FrameStream;
    let every = frames_on_transitions(FrameStream::Every);
    assert!(
        every.iter().all(|&(_, _, has, depth)| has && depth),
        "{every:?}"
    );
    let off = frames_on_transitions(FrameStream::Off);
    assert!(off.iter().all(|&(_, _, has, _)| !has), "{off:?}");
    // The viewer's sample: every third step of an episode and its last, RGB only.
    let sampled = frames_on_transitions(FrameStream::Sampled { every: 3 });
    for &(step, done, has, depth) in &sampled {
        assert_eq!(
            has,
            (step + 1) % 3 == 0 || done,
            "step {step} done {done}: {sampled:?}"
        );
        assert!(!depth, "no depth in the sample");
    }
    assert!(sampled.iter().any(|&(_, done, has, _)| has && !done));
}

/// A simulator that, like a robot, knows no ground-truth progress.
struct NoOracle(SimEnv);

impl Env for NoOracle {
    fn spec(&self) -> &EnvSpec {
        self.0.spec()
    }
    fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        self.0.reset(seed)
    }
    fn step(&mut self, action: &[f32]) -> Result<StepResult, EnvError> {
        let mut r = self.0.step(action)?;
        r.info.progress_oracle = None;
        Ok(r)
    }
}

/// The transitions of an actor's log (random policy, sparse reward, 2 envs of 12 steps, 2 episodes).
fn logged_transitions(envs: Vec<Box<dyn Env>>) -> Vec<stagewise_wire::TransitionMsg> {
    transitions_of(&actor_log(envs, stagewise_runtime::FrameStream::Off, 2).1)
}

/// The actor puts the simulator's ground-truth progress of the next state on each transition (`oracle_phi`,
/// whatever the reward's source), equal step by step to what the simulator's `info` says when the same episode is
/// replayed with the logged actions; an env without an oracle (a robot) gives transitions without it.
#[test]
fn the_actors_transitions_carry_the_simulators_oracle_progress() {
    let transitions = logged_transitions(boxed(vec![
        sim(Task::PickPlace, 12, false),
        sim(Task::PickPlace, 12, false),
    ]));
    assert_eq!(transitions.len(), 2 * 12);
    for env in 0..2u32 {
        // Env e's first episode has seed e (base seed 0, resets in env order).
        let mine: Vec<_> = transitions.iter().filter(|t| t.env == env).collect();
        assert_eq!(mine.len(), 12);
        let mut replay = sim(Task::PickPlace, 12, false);
        replay.reset(u64::from(env)).expect("reset");
        let mut moved = false;
        for t in mine {
            let info = replay.step(&t.action).expect("step").info;
            let want = info.progress_oracle.expect("the simulator has an oracle");
            assert_eq!(t.oracle_phi, Some(want), "env {env} step {}", t.step);
            moved |= want != 0.0;
        }
        assert!(moved, "the oracle's progress never moved in env {env}");
    }
    let without = logged_transitions(vec![
        Box::new(NoOracle(sim(Task::PickPlace, 12, false))) as Box<dyn Env>,
        Box::new(NoOracle(sim(Task::PickPlace, 12, false))),
    ]);
    assert_eq!(without.len(), 2 * 12);
    assert!(without.iter().all(|t| t.oracle_phi.is_none()));
}
