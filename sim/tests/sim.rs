//! Behaviour tests of the simulator: experts, oracle, determinism, bad input, cameras.

use stagewise_core::{Env, EnvError};
use stagewise_sim::world::HELD_OUT_PALETTE;
use stagewise_sim::{
    rollout, rollout_driven, rollout_with, save_png, CameraConfig, ConfigError, Degradation,
    Expert, FailureMode, SimConfig, SimEnv, Task, VecEnv,
};

fn small(task: Task) -> SimConfig {
    SimConfig::new(task).with_resolution(24, 16)
}

#[test]
fn clean_experts_succeed_on_at_least_95_percent_of_40_seeds() {
    for task in Task::ALL {
        let mut ok = 0;
        for seed in 0..40 {
            let r = rollout(task, seed, Degradation::none(), false).expect("rollout");
            ok += r.success as usize;
        }
        assert!(ok >= 38, "{task}: {ok}/40");
    }
}

#[test]
fn episode_record_is_annotated_consistently() {
    for task in Task::ALL {
        let r = rollout(task, 7, Degradation::none(), false).expect("rollout");
        assert!(r.success && r.terminated && !r.truncated);
        assert_eq!(r.states.len(), r.len() + 1);
        assert_eq!(r.stages.len(), r.states.len());
        assert_eq!(r.progress.len(), r.states.len());
        assert_eq!(
            r.rewards.iter().filter(|&&x| x > 0.0).count(),
            1,
            "sparse success reward"
        );
        assert!(r.progress.iter().all(|p| (0.0..=1.0).contains(p)));
        assert_eq!(*r.progress.last().expect("progress"), 1.0);
        // every stage is visited, in order, for a clean run
        let bounds = r.stage_bounds();
        assert!(bounds.iter().all(|b| b.is_some()), "{task}: {bounds:?}");
        let firsts: Vec<usize> = bounds.iter().map(|b| b.map(|x| x.0).unwrap_or(0)).collect();
        assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{task}: {firsts:?}");
        let spans = r.stage_spans();
        assert_eq!(spans.first().map(|s| s.start), Some(0));
        assert_eq!(spans.last().map(|s| s.end), Some(r.len()));
        // smooth-ish: progress rarely drops and never by much in a clean run
        let drops = r.progress.windows(2).filter(|w| w[1] < w[0] - 1e-4).count();
        let worst = r
            .progress
            .windows(2)
            .map(|w| w[0] - w[1])
            .fold(0f32, f32::max);
        assert!(
            drops * 10 <= r.len() && worst < 0.1,
            "{task}: {drops} drops, worst {worst}"
        );
        assert!((r.stage_shares().iter().sum::<f32>() - 1.0).abs() < 1e-4);
        assert_eq!(r.state_names.len(), r.states[0].len());
        let json = serde_json::to_string(&r).expect("serialise");
        assert!(json.contains("\"stages\""));
    }
}

#[test]
fn gripper_really_carries_the_block() {
    let r = rollout(Task::PickPlace, 3, Degradation::none(), false).expect("rollout");
    let z = r
        .state_names
        .iter()
        .position(|n| n == "block0_z")
        .expect("block0_z");
    let g = r
        .state_names
        .iter()
        .position(|n| n == "grasped")
        .expect("grasped");
    let rest = r.states[0][z];
    let top = r.states.iter().map(|s| s[z]).fold(0f32, f32::max);
    assert!(top > rest + 0.05, "block rose from {rest} to {top}");
    assert!(r.states.iter().any(|s| s[g] == 1.0));
    assert_eq!(
        r.states.last().map(|s| s[g]),
        Some(0.0),
        "released at the end"
    );
}

#[test]
fn degraded_experts_fail_or_recover_as_described() {
    let off = rollout(
        Task::PickPlace,
        1,
        Degradation::failure(FailureMode::OffTable),
        false,
    )
    .expect("rollout");
    assert!(
        off.terminated && !off.success,
        "off-table ends the episode as a failure"
    );
    let frozen = rollout(
        Task::Stack,
        1,
        Degradation::failure(FailureMode::Freeze),
        false,
    )
    .expect("rollout");
    assert!(frozen.truncated && !frozen.success);
    let wrong = rollout(
        Task::PickPlace,
        1,
        Degradation::failure(FailureMode::WrongPlace),
        false,
    )
    .expect("rollout");
    assert!(!wrong.success);
    let miss = rollout(
        Task::Stack,
        2,
        Degradation::failure(FailureMode::MissGrasp),
        false,
    )
    .expect("rollout");
    assert!(!miss.success && miss.stages.iter().all(|&s| s <= 1));
    // regress-and-recover: the oracle goes back a stage, and the expert still finishes
    let reg = rollout(Task::PickPlace, 4, Degradation::regress(), false).expect("rollout");
    assert!(reg.success);
    assert!(
        reg.stages.windows(2).any(|w| w[1] < w[0]),
        "a regression shows in the stages"
    );
    let noisy = rollout(Task::PushTarget, 4, Degradation::noisy(0.3), false).expect("rollout");
    assert!(
        noisy.clipped.iter().any(|&c| c),
        "noise pushes actions out of bounds: clipped and reported"
    );
    let paused =
        rollout(Task::PushTarget, 4, Degradation::pauses(0.05, 10), false).expect("rollout");
    assert!(paused.actions.iter().any(|a| a[..3] == [0.0, 0.0, 0.0]));
    for name in Degradation::PRESETS {
        assert!(Degradation::preset(name).is_some());
    }
    assert!(Degradation::preset("nope").is_none());
    // random play: no expert; each uniformly random action held 4 steps; never reaches the goal here
    let play = rollout(
        Task::PushTarget,
        4,
        Degradation::preset("random").unwrap(),
        false,
    )
    .expect("rollout");
    assert!(play.actions.len() > 8);
    for (i, chunk) in play.actions.chunks(4).enumerate() {
        assert!(chunk.iter().all(|a| a == &chunk[0]), "hold {i}: {chunk:?}");
        assert!(chunk[0].iter().all(|v| (-1.0..=1.0).contains(v)));
    }
    assert_ne!(play.actions[0], play.actions[4]);
    assert!(!play.success && play.clipped.iter().all(|&c| !c));
}

#[test]
fn near_place_lands_on_both_sides_of_the_tolerance_and_the_oracle_tells_them_apart() {
    // put down (pushed to) 0.5-5 cm from the place point (target): success exactly when inside the tolerance (up
    // to the block settling a few millimetres from where it was let go), and both sides occur
    for (task, tol) in [
        (Task::PickPlace, stagewise_sim::oracle::PLACE_TOL),
        (Task::PushTarget, stagewise_sim::oracle::PUSH_TOL),
    ] {
        let (mut inside, mut outside) = (0, 0);
        for seed in 0..16 {
            let r = rollout(
                task,
                seed,
                Degradation::failure(FailureMode::NearPlace),
                false,
            )
            .expect("rollout");
            let col = |name: &str| {
                r.state_names
                    .iter()
                    .position(|n| n == name)
                    .unwrap_or_else(|| panic!("{task}: no state {name}"))
            };
            let last = r.states.last().expect("states");
            let dx = last[col("block0_x")] - last[col("target_x")];
            let dy = last[col("block0_y")] - last[col("target_y")];
            let d = dx.hypot(dy);
            assert!((0.002..0.06).contains(&d), "{task} seed {seed}: {d} m off");
            if (d - tol).abs() > 0.004 {
                assert_eq!(r.success, d < tol, "{task} seed {seed}: {d} m off");
            }
            if r.success {
                inside += 1;
            } else {
                outside += 1;
                assert!(
                    r.truncated,
                    "{task} seed {seed}: a near miss runs to the time limit"
                );
            }
        }
        assert!(
            inside >= 2 && outside >= 2,
            "{task}: {inside} inside, {outside} outside"
        );
    }
}

/// The push expert's "miss-grasp" variant pushes 6 cm off the block-target line; where the gripper still meets
/// the block the push works, and the oracle labels it as the push it is (no fall back to "not started" while
/// the pusher is lowered beside the block, no jump when the block starts moving).
#[test]
fn off_centre_pushes_are_labelled_as_pushes() {
    let mut succeeded = 0;
    for seed in 0..12 {
        let r = rollout(
            Task::PushTarget,
            seed,
            Degradation::failure(FailureMode::MissGrasp),
            false,
        )
        .expect("rollout");
        if !r.success {
            continue;
        }
        succeeded += 1;
        let worst_jump = r
            .progress
            .windows(2)
            .map(|w| (w[1] - w[0]).abs())
            .fold(0f32, f32::max);
        // (clean runs stay under 0.06; the old oracle jumped by ~0.34 from "not started" into the push)
        assert!(
            worst_jump < 0.15,
            "seed {seed}: progress jumps by {worst_jump}"
        );
        let first_push = r.stages.iter().position(|&s| s == 2).expect("a push");
        assert!(
            r.stages[first_push..].iter().all(|&s| s == 2),
            "seed {seed}: the push stage is left mid-push"
        );
    }
    assert!(
        succeeded >= 3,
        "only {succeeded} off-centre pushes succeeded"
    );
}

/// A block let go over the place point a few centimetres up (the place stage 60% done) is being placed, not fetched
/// again: while it falls the oracle stays in the place stage and its progress does not drop (before, the falling
/// block read as the grasp or reach stage until it landed), and once it has landed it reads as the retreat. (The
/// same branch covers a block a learner had pressed into the table, rising back out of it after the release:
/// seen in a learner's rollout, not reproducible with the expert's gripper here.)
#[test]
fn a_block_released_over_the_place_point_is_read_as_placed_while_it_falls() {
    let cfg = SimConfig::headless(Task::PickPlace);
    let mut landed = 0;
    for seed in 0..6 {
        let mut expert = Expert::with_seed(Task::PickPlace, Degradation::none(), seed);
        let mut released = false;
        let r = rollout_driven::<EnvError>(&cfg, seed, Degradation::none(), |env| {
            let o = env.oracle().expect("oracle");
            released |= o.stage == 4 && o.tau >= 0.6;
            // open and stay: the block falls the rest of the way
            Ok(if released {
                [0.0, 0.0, 0.0, 1.0]
            } else {
                expert.act_env(env)
            })
        })
        .expect("rollout");
        // the first state after an opening action
        let release = 1 + r
            .actions
            .iter()
            .position(|a| a[3] == 1.0 && a[..3] == [0.0; 3])
            .expect("a release");
        let after = &r.stages[release..];
        assert!(
            after.iter().all(|&s| s >= 4),
            "seed {seed}: stages after the release {after:?}"
        );
        landed += (*after.last().unwrap() == 5) as usize;
        let before = r.progress[release - 1];
        let lowest = r.progress[release..]
            .iter()
            .cloned()
            .fold(f32::MAX, f32::min);
        assert!(
            lowest > before - 0.02,
            "seed {seed}: progress {before} -> {lowest} after the release"
        );
    }
    // (one of six blocks here stays leaning on an open finger, tilted, 1.7 cm up: still "being placed")
    assert!(landed >= 4, "{landed} of 6 released blocks landed in place");
}

#[test]
fn bad_actions_are_errors_and_out_of_bounds_are_clipped() {
    let mut env = SimEnv::new(SimConfig::headless(Task::PickPlace)).expect("env");
    assert!(matches!(env.step(&[0.0; 4]), Err(EnvError::NeedsReset)));
    env.reset(0).expect("reset");
    match env.step(&[0.0; 3]) {
        Err(EnvError::ActionSize {
            expected: 4,
            got: 3,
            ..
        }) => {}
        other => panic!("expected ActionSize, got {other:?}"),
    }
    match env.step(&[0.0, f32::NAN, 0.0, 0.0]) {
        Err(EnvError::ActionNotFinite {
            index: 1, ref name, ..
        }) if name == "dy" => {}
        other => panic!("expected ActionNotFinite, got {other:?}"),
    }
    assert!(env.step(&[0.0, 0.0, f32::INFINITY, 0.0]).is_err());
    let r = env.step(&[5.0, 0.0, 0.0, 1.0]).expect("step");
    assert!(r.info.action_clipped);
    let r = env.step(&[0.5, 0.0, 0.0, 1.0]).expect("step");
    assert!(!r.info.action_clipped);
    assert!(r.info.stage.is_some() && r.info.progress_oracle.is_some());
}

#[test]
fn truncates_at_the_time_limit() {
    let mut cfg = SimConfig::headless(Task::PushTarget);
    cfg.max_steps = 5;
    let mut env = SimEnv::new(cfg).expect("env");
    env.reset(1).expect("reset");
    for t in 1..=5 {
        let r = env.step(&[0.0, 0.0, 0.0, 0.0]).expect("step");
        assert_eq!(r.truncated, t == 5);
        assert!(!r.terminated);
    }
    assert!(matches!(env.step(&[0.0; 4]), Err(EnvError::NeedsReset)));
}

/// `end_on_task = false` (a robot's episodes end on its reward model, not on the simulator's success): the
/// expert's success is in `info` and the episode goes on to the time limit, never terminated.
#[test]
fn without_ending_on_the_task_only_the_time_limit_ends_an_episode() {
    let mut cfg = SimConfig::headless(Task::PushTarget);
    cfg.end_on_task = false;
    cfg.max_steps = 300;
    let mut env = SimEnv::new(cfg).expect("env");
    let mut expert = Expert::with_seed(Task::PushTarget, Degradation::none(), 3);
    env.reset(3).expect("reset");
    let (mut successes, mut steps) = (0, 0);
    loop {
        let a = expert.act_env(&env);
        let r = env.step(&a).expect("step");
        steps += 1;
        assert!(!r.terminated, "step {steps}");
        successes += r.info.success as usize;
        if r.truncated {
            break;
        }
    }
    assert_eq!(steps, 300);
    assert!(
        successes > 0,
        "the expert succeeded and the episode went on"
    );
}

#[test]
fn specs_describe_observations() {
    for task in Task::ALL {
        let mut env = SimEnv::new(small(task)).expect("env");
        let obs = env.reset(5).expect("reset");
        let spec = env.spec().clone();
        assert_eq!(spec.task, task.name());
        assert_eq!(spec.action.names, ["dx", "dy", "dz", "gripper"]);
        assert_eq!(spec.state.len(), obs.state.len());
        assert_eq!(spec.state.low.len(), spec.state.len());
        assert_eq!(spec.stage_names.len(), task.stage_proportions().len());
        assert!((task.stage_proportions().iter().sum::<f32>() - 1.0).abs() < 1e-4);
        assert_eq!(spec.views.len(), 3);
        assert_eq!(obs.views.len(), 3);
        for (v, s) in obs.views.iter().zip(&spec.views) {
            assert_eq!(v.name, s.name);
            assert_eq!((v.rgb.width(), v.rgb.height()), (s.width, s.height));
            let d = v.depth.as_ref().expect("depth");
            assert_eq!(d.len(), (s.width * s.height) as usize);
        }
        assert_eq!(obs.step, 0);
        assert_eq!(spec.control_hz, 50.0);
    }
}

#[test]
fn cameras_render_the_scene_and_export_png() {
    let mut env = SimEnv::new(SimConfig::new(Task::Stack).with_resolution(40, 30)).expect("env");
    let obs = env.reset(2).expect("reset");
    let front = obs.view("front").expect("front");
    let depth = front.depth.as_ref().expect("depth");
    // the table fills the middle of the fixed views: finite depth there, plausible range
    let mid = depth[15 * 40 + 20];
    assert!(mid.is_finite() && mid > 0.2 && mid < 1.5, "depth {mid}");
    assert!(
        front
            .rgb
            .pixels()
            .any(|p| p.0 != front.rgb.get_pixel(0, 0).0),
        "not a flat image"
    );
    assert_ne!(
        obs.view("front").map(|v| &v.rgb),
        obs.view("side").map(|v| &v.rgb)
    );
    // the wrist camera moves with the gripper
    let wrist0 = obs.view("wrist").expect("wrist").rgb.clone();
    let r = env.step(&[1.0, 0.0, -1.0, 1.0]).expect("step");
    assert_ne!(r.obs.view("wrist").expect("wrist").rgb, wrist0);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("front.png");
    save_png(front, &path).expect("png");
    let back = image::open(&path).expect("read back").to_rgb8();
    assert_eq!(back, front.rgb);
}

#[test]
fn randomisation_options_change_pictures_not_layout() {
    let mut plain = SimEnv::new(small(Task::PickPlace)).expect("env");
    let mut cfg = small(Task::PickPlace);
    cfg.randomization.camera_jitter = 0.02;
    cfg.randomization.colors = true;
    let mut jit = SimEnv::new(cfg).expect("env");
    let a = plain.reset(9).expect("reset");
    let b = jit.reset(9).expect("reset");
    assert_ne!(a.views[0].rgb, b.views[0].rgb);
    // the layout (state) is the same: randomisation only touches cameras and colours
    assert_eq!(a.state, b.state);
    let mut cfg = SimConfig::headless(Task::PickPlace);
    cfg.randomization.colors = true;
    let r = rollout_with(&cfg, 0, Degradation::none()).expect("rollout");
    assert!(r.success);
}

#[test]
fn held_out_colours_change_block_and_table_colours_not_layout() {
    for task in Task::ALL {
        let mut cfg = small(task);
        cfg.randomization.held_out_colors = true;
        let (mut plain, mut held) = (
            SimEnv::new(small(task)).expect("env"),
            SimEnv::new(cfg).expect("env"),
        );
        for seed in 0..6 {
            let a = plain.reset(seed).expect("reset");
            let b = held.reset(seed).expect("reset");
            assert_eq!(a.state, b.state, "{task} seed {seed}: same layout");
            assert_ne!(a.views[0].rgb, b.views[0].rgb, "{task} seed {seed}");
            let world = held.world().expect("world");
            for i in 0..task.num_objects() {
                // within the renderer's small jitter of a held-out base colour
                let c = world.block(i).color;
                let near = HELD_OUT_PALETTE.iter().any(|p| {
                    p.iter()
                        .zip(&c)
                        .all(|(&p, &c)| (i32::from(p) - i32::from(c)).abs() <= 11)
                });
                assert!(
                    near,
                    "{task} seed {seed}: block {i} colour {c:?} is not a held-out colour"
                );
            }
        }
    }
    let mut cfg = SimConfig::headless(Task::Stack);
    cfg.randomization.held_out_colors = true;
    assert!(
        rollout_with(&cfg, 0, Degradation::none())
            .expect("rollout")
            .success
    );
}

#[test]
fn vec_env_is_bit_identical_across_thread_counts() {
    let cfg = small(Task::Stack);
    let seeds = [11u64, 12, 13, 14];
    let run = |threads: usize| {
        let mut v = VecEnv::new(cfg.clone(), seeds.len(), threads).expect("vec env");
        let mut out = Vec::new();
        let obs = v.reset(&seeds).expect("reset");
        out.push(obs);
        for t in 0..6 {
            let actions: Vec<f32> = (0..seeds.len())
                .flat_map(|i| {
                    [
                        0.3 * (i as f32 - 1.5),
                        0.2,
                        -0.5,
                        if t > 3 { -1.0 } else { 1.0 },
                    ]
                })
                .collect();
            let res = v.step(&actions).expect("step");
            out.push(res.into_iter().map(|r| r.obs).collect());
        }
        out
    };
    let one = run(1);
    let three = run(3);
    assert_eq!(one.len(), three.len());
    for (a, b) in one.iter().zip(&three) {
        for (x, y) in a.iter().zip(b) {
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&x.state), bits(&y.state));
            for (vx, vy) in x.views.iter().zip(&y.views) {
                assert_eq!(vx.rgb, vy.rgb);
                assert_eq!(
                    vx.depth.as_deref().map(bits),
                    vy.depth.as_deref().map(bits),
                    "depth of {}",
                    vx.name
                );
            }
        }
    }
    // rendering with several threads inside one env gives the same picture too
    let mut cfg2 = cfg.clone();
    cfg2.render_threads = 3;
    let mut e1 = SimEnv::new(cfg.clone()).expect("env");
    let mut e3 = SimEnv::new(cfg2).expect("env");
    assert_eq!(e1.reset(4).expect("reset"), e3.reset(4).expect("reset"));
    // wrong sizes are errors
    let mut v = VecEnv::new(cfg, 2, 2).expect("vec env");
    assert!(v.reset(&[1]).is_err());
    v.reset(&[1, 2]).expect("reset");
    assert!(matches!(
        v.step(&[0.0; 7]),
        Err(EnvError::ActionSize { .. })
    ));
}

#[test]
fn rollout_with_rendering_records_frames() {
    let cfg = small(Task::PushTarget);
    let r = rollout_with(&cfg, 3, Degradation::none()).expect("rollout");
    let frames = r.frames.as_ref().expect("frames");
    assert_eq!(frames.len(), r.states.len());
    assert!(frames.iter().all(|f| f.len() == 3));
}

#[test]
fn invalid_configs_are_refused() {
    let mut cfg = SimConfig::new(Task::Stack);
    cfg.substeps = 0;
    assert!(matches!(
        SimEnv::new(cfg).err(),
        Some(ConfigError::Substeps)
    ));
    let mut cfg = SimConfig::new(Task::Stack);
    cfg.cameras.push(CameraConfig::fixed(
        "front",
        [1.0, 0.0, 0.0],
        [0.0; 3],
        8,
        8,
    ));
    assert!(SimEnv::new(cfg).is_err());
    let mut cfg = SimConfig::new(Task::Stack);
    cfg.cameras[0].width = 0;
    assert!(SimEnv::new(cfg).is_err());
    assert!("pick-place".parse::<Task>().is_ok());
    assert!("juggle".parse::<Task>().is_err());
}

#[test]
fn fingers_closing_on_a_block_top_do_not_pick_it_up() {
    use stagewise_sim::world::{Vec3, MAX_SPEED};
    let mut env = SimEnv::new(SimConfig::headless(Task::PickPlace)).expect("env");
    env.reset(5).expect("reset");
    // drives the TCP toward `to` with gripper command `grip`
    let goto = |env: &mut SimEnv, to: Vec3, grip: f32, steps: usize| {
        for _ in 0..steps {
            let w = env.world().expect("world");
            let d = (to - w.tcp()) / (MAX_SPEED * w.control_dt());
            let a = [
                d.x.clamp(-1.0, 1.0),
                d.y.clamp(-1.0, 1.0),
                d.z.clamp(-1.0, 1.0),
                grip,
            ];
            env.step(&a).expect("step");
        }
    };
    let block = env.world().expect("world").block_pos(0);
    // fingers 1 cm apart, narrower than the block, come down on its top (the TCP is 2 cm above the fingertips)
    goto(&mut env, block + Vec3::new(0.0, 0.0, 0.12), -0.75, 60);
    goto(&mut env, block + Vec3::new(0.0, 0.0, 0.03), -0.75, 30);
    // then close while pressing, and lift
    goto(&mut env, block + Vec3::new(0.0, 0.0, 0.02), -1.0, 10);
    goto(&mut env, block + Vec3::new(0.0, 0.0, 0.15), -1.0, 40);
    let w = env.world().expect("world");
    assert_eq!(w.attached(), None, "a block lifted by its top");
    assert!(w.block_pos(0).z < 0.03, "block at z {}", w.block_pos(0).z);
}

#[test]
fn the_oracle_trap_over_reads_a_raised_hand_and_nothing_else() {
    use stagewise_sim::OracleTrap;
    let phi_after_raising = |trap: Option<OracleTrap>| {
        let mut cfg = small(Task::PushTarget);
        cfg.oracle_trap = trap;
        let mut env = SimEnv::new(cfg).expect("env");
        env.reset(3).expect("reset");
        let mut last = None;
        for _ in 0..60 {
            // straight up at full speed: the hand leaves the block and the target behind
            let r = env.step(&[0.0, 0.0, 1.0, 1.0]).expect("step");
            last = Some(r);
        }
        let r = last.expect("a step");
        (
            r.info.progress_oracle.expect("oracle"),
            r.info.success,
            r.reward,
        )
    };
    let (clean, _, _) = phi_after_raising(None);
    assert!(
        clean < 0.2,
        "the raised hand is early progress for the oracle: {clean}"
    );
    let (over, success, reward) = phi_after_raising(Some(OracleTrap {
        min_tcp_z: 0.2,
        phi: 0.9,
    }));
    assert!((over - 0.9).abs() < 1e-6, "the trap reads {over}");
    assert!(!success && reward == 0.0, "the trap is not success");
    // below the trap's height (here above the workspace's ceiling, 0.35 m) the oracle is its own
    let (low, _, _) = phi_after_raising(Some(OracleTrap {
        min_tcp_z: 0.36,
        phi: 0.9,
    }));
    assert!(low < 0.2, "{low}");
}
