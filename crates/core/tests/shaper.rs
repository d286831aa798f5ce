//! The vectorised shaper as an actor loop uses it: per-env episodes, cached potentials, the terminal rule,
//! success detection, the alternative modes, and refusal of bad input.

use stagewise_core::shaping::{
    shape_episode, RewardMode, ShapedStep, ShapingConfig, ShapingError, SuccessDetection, VecShaper,
};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn config(gamma: f64, scale: f64) -> ShapingConfig {
    ShapingConfig::new(gamma, scale).unwrap()
}

#[test]
fn potential_reward_follows_the_formula_and_the_terminal_rule() {
    let mut s = VecShaper::new(1, config(0.9, 2.0)).unwrap();
    assert_eq!(s.reset(0, 0.2).unwrap(), 0);
    let a = s.step(0, 0.5, 0.0, false, false).unwrap();
    assert!(close(a.reward, 2.0 * (0.9 * 0.5 - 0.2)));
    assert_eq!((a.phi, a.phi_next, a.step, a.episode), (0.2, 0.5, 0, 0));
    // terminated: Phi(s') = 0 whatever the model said
    let b = s.step(0, 0.8, 1.0, true, false).unwrap();
    assert!(close(b.reward, 1.0 + 2.0 * (0.0 - 0.5)));
    assert_eq!(b.phi_next, 0.0);
    assert_eq!(b.phi_next_observed, 0.8);
    assert!(b.terminated && !b.success && b.done());
    // truncated: Phi(s') kept
    s.reset(0, 0.2).unwrap();
    let c = s.step(0, 0.7, 0.0, false, true).unwrap();
    assert!(close(c.reward, 2.0 * (0.9 * 0.7 - 0.2)));
    assert_eq!(c.phi_next, 0.7);
    assert_eq!(c.episode, 1);
    // terminated and truncated together: termination wins
    s.reset(0, 0.2).unwrap();
    let d = s.step(0, 0.7, 0.0, true, true).unwrap();
    assert!(close(d.reward, -2.0 * 0.2));
}

#[test]
fn gamma_and_scale_travel_with_every_transition() {
    let mut s = VecShaper::new(1, config(0.97, 0.5)).unwrap();
    s.reset(0, 0.0).unwrap();
    let step = s.step(0, 0.1, 0.0, false, false).unwrap();
    let t = step.to_transition(vec![0.5, -0.5], Some(2));
    assert_eq!((t.gamma, t.shaping_scale), (0.97, 0.5));
    assert_eq!((t.env, t.episode, t.step, t.stage), (0, 0, 0, Some(2)));
    assert_eq!(t.reward, step.reward);
    assert_eq!(t.action, vec![0.5, -0.5]);
}

#[test]
fn potentials_are_cached_when_visited_and_never_rewritten() {
    // A "model swap" mid-episode: later phis come from a different model. The reward for each step uses the
    // potential cached when the state was visited, never a re-evaluation.
    let mut s = VecShaper::new(1, config(1.0, 1.0)).unwrap();
    s.reset(0, 0.1).unwrap();
    s.step(0, 0.3, 0.0, false, false).unwrap(); // old model
    let swapped = s.step(0, 0.9, 0.0, false, false).unwrap(); // new model reads the next state
    assert_eq!(
        swapped.phi, 0.3,
        "the previous state's potential stays the old model's"
    );
    assert_eq!(s.potentials(0).unwrap(), &[0.1, 0.3, 0.9]);
    // potentials start over with each episode
    s.reset(0, 0.0).unwrap();
    assert_eq!(s.potentials(0).unwrap(), &[0.0]);
}

#[test]
fn envs_have_independent_episodes() {
    let mut s = VecShaper::new(3, config(0.99, 1.0)).unwrap();
    for env in 0..3 {
        s.reset(env, 0.1 * env as f64).unwrap();
    }
    let steps = s
        .step_all(
            &[0.2, 0.3, 0.4],
            &[0.0; 3],
            &[false, true, false],
            &[false; 3],
        )
        .unwrap();
    assert!(close(steps[0].reward, 0.99 * 0.2 - 0.0));
    assert!(close(steps[1].reward, -0.1));
    assert!(close(steps[2].reward, 0.99 * 0.4 - 0.2));
    // env 1 ended: batch steps are refused until it is reset, and nothing changed
    let before = s.potentials(0).unwrap().to_vec();
    assert_eq!(
        s.step_all(&[0.5; 3], &[0.0; 3], &[false; 3], &[false; 3]),
        Err(ShapingError::EpisodeOver { env: 1, episode: 0 })
    );
    assert_eq!(s.potentials(0).unwrap(), before.as_slice());
    // the others go on; env 1 restarts alone
    s.step(0, 0.3, 0.0, false, false).unwrap();
    assert_eq!(s.reset(1, 0.0).unwrap(), 1);
    let again = s.step(1, 0.1, 0.0, false, false).unwrap();
    assert_eq!((again.episode, again.step), (1, 0));
    assert_eq!(s.potentials(0).unwrap().len(), 3);
    assert_eq!(s.episode(2).unwrap(), Some(0));
    assert!(!s.is_done(1).unwrap());
}

#[test]
fn success_detection_terminates_with_task_reward_one() {
    let cfg = config(0.9, 1.0).with_success(SuccessDetection::default());
    let mut s = VecShaper::new(1, cfg).unwrap();
    s.reset(0, 0.5).unwrap();
    let a = s.step(0, 0.94, 0.0, false, false).unwrap();
    assert!(!a.success && !a.terminated);
    let b = s.step(0, 0.95, 0.0, false, false).unwrap();
    assert!(b.success && b.terminated);
    assert_eq!(b.task_reward, 1.0);
    // terminal rule applies: Phi(s') = 0
    assert!(close(b.reward, 1.0 + (0.0 - 0.94)));
    assert!(s.step(0, 0.99, 0.0, false, false).is_err());
}

#[test]
fn success_detection_needs_n_consecutive_steps() {
    let cfg = config(0.9, 1.0).with_success(SuccessDetection {
        delta: 0.1,
        consecutive: 3,
    });
    let mut s = VecShaper::new(1, cfg).unwrap();
    s.reset(0, 0.0).unwrap();
    let seq = [0.95, 0.92, 0.5, 0.91, 0.93, 0.97];
    let out: Vec<ShapedStep> = seq
        .iter()
        .map(|p| s.step(0, *p, 0.0, false, false).unwrap())
        .collect();
    let fired: Vec<bool> = out.iter().map(|o| o.success).collect();
    assert_eq!(fired, vec![false, false, false, false, false, true]);
    assert_eq!(out[5].task_reward, 1.0);
}

#[test]
fn progress_with_s_one_is_the_plain_difference_and_keeps_the_terminal_potential() {
    let cfg = config(0.9, 2.0).with_mode(RewardMode::PLAIN_PROGRESS);
    let steps = shape_episode(cfg, &[0.1, 0.4, 0.3, 0.8], &[0.0, 0.0, 1.0], true).unwrap();
    let rewards: Vec<f64> = steps.iter().map(|s| s.reward).collect();
    let want = [0.6, -0.2, 1.0 + 1.0];
    for (a, b) in rewards.iter().zip(want) {
        assert!(close(*a, b), "{rewards:?}");
    }
    assert_eq!(steps[2].phi_next, 0.8);
    assert!(!RewardMode::PLAIN_PROGRESS.is_policy_invariant());
}

/// `r_task + S c (gamma phi' - phi) + c (1 - gamma) phi'`; terminated `r_task - S c phi + c phi*`.
fn progress_formula(g: f64, c: f64, s: f64, phi: f64, next: f64, r: f64, terminated: bool) -> f64 {
    if terminated {
        r - s * c * phi + c * next
    } else {
        r + s * c * (g * next - phi) + c * (1.0 - g) * next
    }
}

#[test]
fn progress_follows_its_formula_on_every_kind_of_step() {
    let (g, c, big_s) = (0.95, 3.0, 0.1);
    for one in [false, true] {
        let cfg = config(g, c).with_mode(RewardMode::Progress {
            potential_scale: big_s,
            success_progress_one: one,
        });
        let mut s = VecShaper::new(1, cfg).unwrap();
        // going on, then truncated (the level and the kept potential as on any non-terminal step)
        s.reset(0, 0.2).unwrap();
        let a = s.step(0, 0.5, 0.0, false, false).unwrap();
        assert!(close(
            a.reward,
            progress_formula(g, c, big_s, 0.2, 0.5, 0.0, false)
        ));
        let b = s.step(0, 0.4, 0.0, false, true).unwrap();
        assert!(close(
            b.reward,
            progress_formula(g, c, big_s, 0.5, 0.4, 0.0, false)
        ));
        assert_eq!(b.phi_next, 0.4);
        // terminated without success (a failure): phi* is the model's phi' with or without the flag
        s.reset(0, 0.2).unwrap();
        let f = s
            .step_with_success(0, 0.6, 0.0, true, false, false)
            .unwrap();
        assert!(close(
            f.reward,
            progress_formula(g, c, big_s, 0.2, 0.6, 0.0, true)
        ));
        assert_eq!((f.phi_next, f.success), (0.6, false));
        // terminated with a success: phi* = 1 only with success_progress_one
        s.reset(0, 0.2).unwrap();
        let w = s.step_with_success(0, 0.7, 1.0, true, false, true).unwrap();
        let star = if one { 1.0 } else { 0.7 };
        assert!(
            close(
                w.reward,
                progress_formula(g, c, big_s, 0.2, star, 1.0, true)
            ),
            "{one}: {w:?}"
        );
        assert_eq!(
            (w.phi_next, w.phi_next_observed, w.success),
            (star, 0.7, true)
        );
        // the single-transition formula agrees with the shaper
        assert!(close(
            cfg.reward(0.2, 0.7, 1.0, true, true).unwrap(),
            w.reward
        ));
    }
}

#[test]
fn success_detection_counts_as_a_success_for_the_progress_form() {
    let cfg = config(0.9, 1.0)
        .with_mode(RewardMode::Progress {
            potential_scale: 0.5,
            success_progress_one: true,
        })
        .with_success(SuccessDetection::default());
    let mut s = VecShaper::new(1, cfg).unwrap();
    s.reset(0, 0.5).unwrap();
    let d = s.step(0, 0.97, 0.0, false, false).unwrap();
    assert!(d.success && d.terminated);
    assert!(close(d.reward, 1.0 - 0.5 * 0.5 + 1.0), "{d:?}");
}

#[test]
fn potential_with_an_offset_follows_its_formula() {
    let (g, c, x) = (0.9, 2.0, 0.3);
    let cfg = config(g, c).with_mode(RewardMode::Potential { offset: x });
    assert!(cfg.mode.is_policy_invariant());
    let mut s = VecShaper::new(1, cfg).unwrap();
    s.reset(0, 0.2).unwrap();
    let a = s.step(0, 0.5, 0.0, false, false).unwrap();
    assert!(close(a.reward, c * (g * 0.5 - 0.2) + c * x * (1.0 - g)));
    let b = s.step(0, 0.6, 0.0, false, true).unwrap(); // truncated: as any non-terminal step
    assert!(close(b.reward, c * (g * 0.6 - 0.5) + c * x * (1.0 - g)));
    s.reset(0, 0.2).unwrap();
    let t = s.step_with_success(0, 0.8, 1.0, true, false, true).unwrap();
    assert!(close(t.reward, 1.0 - c * 0.2 + c * x));
    assert_eq!(t.phi_next, 0.0);
    // offset 0 is the plain potential form
    let plain = config(g, c);
    assert_eq!(plain.mode, RewardMode::Potential { offset: 0.0 });
    assert!(close(
        plain.reward(0.2, 0.5, 0.0, false, false).unwrap(),
        c * (g * 0.5 - 0.2)
    ));
}

#[test]
fn windowed_rank_mode_rewards_monotone_windows() {
    let cfg = config(0.9, 1.0).with_mode(RewardMode::WindowedRank { window: 3 });
    let steps = shape_episode(cfg, &[0.1, 0.2, 0.3, 0.25, 0.4], &[0.0; 4], false).unwrap();
    let r: Vec<f64> = steps.iter().map(|s| s.reward).collect();
    // windows: [0.1,0.2] -> 1; [0.1,0.2,0.3] -> 1; [0.2,0.3,0.25] -> 0.5; [0.3,0.25,0.4] -> 0.5
    for (a, b) in r.iter().zip([1.0, 1.0, 0.5, 0.5]) {
        assert!(close(*a, b), "{r:?}");
    }
}

#[test]
fn offline_episode_matches_the_online_shaper() {
    let phis = [0.0, 0.2, 0.1, 0.6, 0.9];
    let rewards = [0.0, 0.0, 0.0, 1.0];
    let cfg = config(0.95, 1.5);
    let offline = shape_episode(cfg, &phis, &rewards, true).unwrap();
    let mut s = VecShaper::new(1, cfg).unwrap();
    s.reset(0, phis[0]).unwrap();
    for (t, o) in offline.iter().enumerate() {
        let last = t == rewards.len() - 1;
        let on = s.step(0, phis[t + 1], rewards[t], last, false).unwrap();
        assert_eq!(&on, o);
    }
}

// ----- bad input: clear errors, never a poisoned reward -----

#[test]
fn gamma_outside_zero_one_is_refused() {
    for g in [0.0, -0.5, 1.0000001, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(ShapingConfig::new(g, 1.0), Err(ShapingError::BadGamma(_))),
            "{g}"
        );
        let bad = ShapingConfig {
            gamma: g,
            ..ShapingConfig::default()
        };
        assert!(matches!(
            VecShaper::new(1, bad),
            Err(ShapingError::BadGamma(_))
        ));
        assert!(bad.reward(0.0, 0.0, 0.0, false, false).is_err());
    }
    assert!(ShapingConfig::new(1.0, 1.0).is_ok());
    let msg = ShapingConfig::new(1.5, 1.0).unwrap_err().to_string();
    assert!(msg.contains("1.5") && msg.contains("(0, 1]"), "{msg}");
}

#[test]
fn other_bad_configs_are_refused() {
    assert!(matches!(
        ShapingConfig::new(0.9, f64::NAN),
        Err(ShapingError::BadScale(_))
    ));
    let c = config(0.9, 1.0);
    assert!(matches!(
        VecShaper::new(
            1,
            c.with_success(SuccessDetection {
                delta: 1.5,
                consecutive: 1
            })
        ),
        Err(ShapingError::BadSuccessDelta(_))
    ));
    assert_eq!(
        VecShaper::new(
            1,
            c.with_success(SuccessDetection {
                delta: 0.05,
                consecutive: 0
            })
        )
        .err(),
        Some(ShapingError::BadSuccessSteps)
    );
    assert_eq!(
        VecShaper::new(1, c.with_mode(RewardMode::WindowedRank { window: 1 })).err(),
        Some(ShapingError::BadWindow(1))
    );
    let progress = |potential_scale| RewardMode::Progress {
        potential_scale,
        success_progress_one: false,
    };
    for bad in [f64::NAN, f64::INFINITY] {
        let e = VecShaper::new(1, c.with_mode(progress(bad))).unwrap_err();
        assert!(matches!(e, ShapingError::BadPotentialScale(_)), "{e}");
        let e = VecShaper::new(1, c.with_mode(RewardMode::Potential { offset: bad })).unwrap_err();
        assert!(matches!(e, ShapingError::BadOffset(_)), "{e}");
        assert!(e.to_string().contains(&bad.to_string()), "{e}");
    }
    assert_eq!(
        c.with_mode(RewardMode::WindowedRank { window: 3 })
            .reward(0.0, 0.1, 0.0, false, false),
        Err(ShapingError::NeedsHistory { window: 3 })
    );
    assert_eq!(VecShaper::new(0, c).err(), Some(ShapingError::NoEnvs));
}

#[test]
fn nan_and_inf_progress_are_refused_and_change_nothing() {
    let mut s = VecShaper::new(2, config(0.9, 1.0)).unwrap();
    assert!(matches!(
        s.reset(0, f64::NAN),
        Err(ShapingError::NotFinite { env: 0, .. })
    ));
    s.reset(0, 0.1).unwrap();
    s.reset(1, 0.1).unwrap();
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let e = s.step(0, bad, 0.0, false, false).unwrap_err();
        assert!(matches!(
            e,
            ShapingError::NotFinite {
                env: 0,
                what: "phi_next",
                ..
            }
        ));
        assert!(
            s.step(0, 0.2, bad, false, false).is_err(),
            "task reward {bad}"
        );
        // a bad value for env 1 in a batch leaves env 0 untouched too
        assert!(s
            .step_all(&[0.2, bad], &[0.0, 0.0], &[false; 2], &[false; 2])
            .is_err());
    }
    assert_eq!(s.potentials(0).unwrap(), &[0.1]);
    assert_eq!(s.potentials(1).unwrap(), &[0.1]);
    // the episode goes on normally afterwards
    assert!(s
        .step(0, 0.2, 0.0, false, false)
        .unwrap()
        .reward
        .is_finite());
    let cfg = config(0.9, 1.0);
    assert!(matches!(
        cfg.reward(f64::NAN, 0.0, 0.0, false, false),
        Err(ShapingError::NotFiniteAt { what: "phi", .. })
    ));
}

#[test]
fn misuse_of_env_indices_and_episodes_is_refused() {
    let mut s = VecShaper::new(2, config(0.9, 1.0)).unwrap();
    assert_eq!(
        s.step(0, 0.1, 0.0, false, false),
        Err(ShapingError::NotReset { env: 0 })
    );
    assert_eq!(
        s.reset(2, 0.0),
        Err(ShapingError::EnvOutOfRange { env: 2, n_envs: 2 })
    );
    assert!(s.potentials(5).is_err());
    s.reset(0, 0.0).unwrap();
    s.step(0, 0.1, 0.0, false, true).unwrap();
    assert_eq!(
        s.step(0, 0.1, 0.0, false, false),
        Err(ShapingError::EpisodeOver { env: 0, episode: 0 })
    );
}

#[test]
fn mismatched_lengths_and_empty_episodes_are_refused() {
    let mut s = VecShaper::new(2, config(0.9, 1.0)).unwrap();
    s.reset(0, 0.0).unwrap();
    s.reset(1, 0.0).unwrap();
    assert_eq!(
        s.step_all(&[0.1], &[0.0, 0.0], &[false; 2], &[false; 2]),
        Err(ShapingError::Length {
            what: "phi_next",
            expected: 2,
            got: 1
        })
    );
    assert!(s
        .step_all(&[0.1, 0.1], &[0.0, 0.0], &[false; 3], &[false; 2])
        .is_err());
    let cfg = config(0.9, 1.0);
    assert!(matches!(
        shape_episode(cfg, &[0.0], &[], true),
        Err(ShapingError::Empty(_))
    ));
    assert!(matches!(
        shape_episode(cfg, &[0.0, 0.1], &[0.0, 0.0], true),
        Err(ShapingError::Length { .. })
    ));
    assert!(matches!(
        shape_episode(cfg, &[0.0, f64::NAN], &[0.0], true),
        Err(ShapingError::NotFiniteAt {
            what: "phis",
            index: 1,
            ..
        })
    ));
}
