//! Loading the generated test models into the real ONNX Runtime and scoring observation sequences.
use crate::common;
use common::*;
use stagewise_model::{Provider, RewardModel};

const VIEWS3: [&str; 3] = ["front", "side", "wrist"];

#[test]
fn scores_a_batch_of_envs_with_valid_progress() {
    let mut m = load("tiny3v");
    assert_eq!(m.provider(), Provider::Cpu);
    for step in 0..6 {
        let obs: Vec<_> = (0..3)
            .map(|e| observation(&VIEWS3, e, step, 96, 96, 8))
            .collect();
        let refs: Vec<_> = obs.iter().collect();
        let out = m.score(&refs).unwrap();
        assert_eq!(out.len(), 3);
        for p in &out {
            assert!((0.0..=1.0).contains(&p.phi), "{p:?}");
            assert!((0.0..=1.0).contains(&p.tau));
            assert_eq!(p.stage_probs.len(), 4);
            assert!((p.stage_probs.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            let best = p.stage_probs.iter().cloned().fold(f32::MIN, f32::max);
            assert_eq!(p.stage_probs[p.stage], best);
        }
        // different envs see different frames: their progress differs
        assert_ne!(out[0], out[1]);
    }
}

#[test]
fn batching_gives_the_same_result_as_one_env_at_a_time() {
    let mut batched = load("tiny3v");
    let mut single: Vec<RewardModel> = (0..4).map(|_| load("tiny3v")).collect();
    for step in 0..5 {
        let obs: Vec<_> = (0..4)
            .map(|e| observation(&VIEWS3, e + 10, step, 96, 96, 8))
            .collect();
        let refs: Vec<_> = obs.iter().collect();
        let b = batched.score(&refs).unwrap();
        for e in 0..4 {
            let s = single[e].score(&[&obs[e]]).unwrap();
            assert!(
                (s[0].phi - b[e].phi).abs() < 1e-5,
                "step {step} env {e}: {:?} vs {:?}",
                s[0],
                b[e]
            );
            assert_eq!(s[0].stage, b[e].stage);
        }
    }
}

#[test]
fn any_frame_size_is_resized() {
    let mut m = load("tiny3v");
    let obs = observation(&VIEWS3, 1, 0, 160, 120, 8);
    let p = m.score(&[&obs]).unwrap();
    assert!((0.0..=1.0).contains(&p[0].phi));
}

#[test]
fn view_order_is_by_name_not_position() {
    let mut a = load("tiny3v");
    let mut b = load("tiny3v");
    let obs = observation(&VIEWS3, 4, 0, 96, 96, 8);
    let mut shuffled = obs.clone();
    shuffled.views.reverse();
    assert_eq!(a.score(&[&obs]).unwrap(), b.score(&[&shuffled]).unwrap());
}

#[test]
fn a_new_episode_forgets_the_old_window() {
    let mut fresh = load("tiny3v");
    let mut reused = load("tiny3v");
    for step in 0..5 {
        reused
            .score(&[&observation(&VIEWS3, 7, step, 96, 96, 8)])
            .unwrap();
    }
    // step 0 starts a new episode: same result as a model that never saw the old one
    let start = observation(&VIEWS3, 8, 0, 96, 96, 8);
    assert_eq!(
        fresh.score(&[&start]).unwrap(),
        reused.score(&[&start]).unwrap()
    );
    // and reset_env does the same for an observation that does not say step 0
    let mut later = observation(&VIEWS3, 9, 17, 96, 96, 8);
    reused.reset_env(0);
    let mut fresh2 = load("tiny3v");
    later.step = 17;
    assert_eq!(
        fresh2.score(&[&later]).unwrap(),
        reused.score(&[&later]).unwrap()
    );
}

#[test]
fn the_window_holds_history() {
    // Two episodes that end on the same frame but got there differently score differently (window of 4 frames).
    let mut a = load("tiny3v");
    let mut b = load("tiny3v");
    let last = observation(&VIEWS3, 3, 6, 96, 96, 8);
    for step in 0..6 {
        a.score(&[&observation(&VIEWS3, 1, step, 96, 96, 8)])
            .unwrap();
        b.score(&[&observation(&VIEWS3, 2, step, 96, 96, 8)])
            .unwrap();
    }
    assert_ne!(a.score(&[&last]).unwrap(), b.score(&[&last]).unwrap());
}

#[test]
fn soft_progress_model_without_state() {
    let mut m = load("tiny1v");
    for step in 0..3 {
        let p = m
            .score(&[&observation(&["front"], 5, step, 32, 32, 0)])
            .unwrap();
        assert!((0.0..=1.0).contains(&p[0].phi));
        assert_eq!(p[0].stage_probs.len(), 3);
    }
}

#[test]
fn score_windows_matches_score() {
    let mut a = load("tiny1v");
    let mut b = load("tiny1v");
    let obs = observation(&["front"], 6, 0, 32, 32, 0);
    let pa = a.score(&[&obs]).unwrap();
    // the same window built by hand: one frame, normalised
    let spec = b.manifest().image.clone().unwrap();
    let norm = stagewise_model::preprocess::Normaliser::new(&spec);
    let mut buf = vec![0.0; norm.frame_len()];
    norm.write_chw(&obs.views[0].rgb, &mut buf).unwrap();
    let pb = b.score_windows(&buf, &[], 1).unwrap();
    assert_eq!(pa, pb);
    let t = b.last_timing();
    assert!(t.run > std::time::Duration::ZERO);
}
