//! The offline episode scorer (`stagewise_model::scoring`, behind `label`, `eval` and `score`) against the actor's
//! step-by-step `RewardModel::score` on the same episode, in both forms, with strides, batches and reversed
//! playback; its errors; and the worker pool.

use crate::common;

use common::{cpu, model_path, observation, root, runtime};
use stagewise_core::{Observation, Progress};
use stagewise_model::scoring::{self, ObservationFrames, Reversed, ViewFrames};
use stagewise_model::{
    EpisodeScorer, FrameSource, Manifest, ModelForm, RewardModel, ScoringError, StateMap,
};

const VIEWS3: [&str; 3] = ["front", "side", "wrist"];

fn shipped() -> std::path::PathBuf {
    root().join("models/pick-place/pick-place-progress.toml")
}

fn scorer(path: &std::path::Path, form: ModelForm, batch: usize) -> EpisodeScorer {
    let m = Manifest::load(path).unwrap();
    EpisodeScorer::from_manifest(m, runtime(), &cpu(), form, batch).unwrap()
}

/// An episode of `len` synthetic observations (a new episode at step 0).
fn episode(views: &[&str], seed: u64, len: u64, state: usize) -> Vec<Observation> {
    (0..len)
        .map(|t| observation(views, seed, t, 32, 32, state))
        .collect()
}

/// The actor's progress over the episode: one `RewardModel::score` per step.
fn stepwise(model: &mut RewardModel, ep: &[Observation]) -> Vec<Progress> {
    model.reset_env(0);
    ep.iter()
        .map(|o| model.score(&[o]).unwrap().remove(0))
        .collect()
}

fn assert_close(a: &[Progress], b: &[Progress], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (t, (a, b)) in a.iter().zip(b).enumerate() {
        assert_eq!(a.stage, b.stage, "{what}: frame {t}");
        assert!(
            (a.phi - b.phi).abs() <= tol,
            "{what}: frame {t}: {} vs {}",
            a.phi,
            b.phi
        );
        assert!((a.tau - b.tau).abs() <= tol, "{what}: frame {t}");
    }
}

#[test]
fn episode_scores_equal_the_actors_step_by_step_scores() {
    // tiny3v: 4 frames, stride 2, a state of 8 (the windows of the first steps repeat frame 0).
    let ep = episode(&VIEWS3, 3, 23, 8);
    let mut actor = RewardModel::load(&model_path("tiny3v"), runtime(), &cpu()).unwrap();
    let want = stepwise(&mut actor, &ep);
    let names: Vec<String> = VIEWS3.iter().map(|v| v.to_string()).collect();
    let src = ObservationFrames::new(&ep, &names).unwrap();
    for batch in [1, 5, 64] {
        let mut s = scorer(&model_path("tiny3v"), ModelForm::Auto, batch);
        assert_eq!(s.form(), ModelForm::SingleGraph);
        let got = s.score_all(&src).unwrap();
        assert_close(&got, &want, 1e-6, &format!("tiny3v batch {batch}"));
        // A subset of frames, in any order, gives those frames' windows.
        let some = s.score(&src, &[22, 0, 7]).unwrap();
        assert_close(
            &some,
            &[want[22].clone(), want[0].clone(), want[7].clone()],
            1e-6,
            "subset",
        );
    }
}

#[test]
fn two_part_episode_scores_equal_the_single_graph_and_the_actor() {
    let m = Manifest::load(&shipped()).unwrap();
    let names = m.views.clone();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ep = episode(&refs, 11, 30, m.state_size);
    let src = ObservationFrames::new(&ep, &names).unwrap();
    let mut two = scorer(&shipped(), ModelForm::Auto, 7);
    assert_eq!(two.form(), ModelForm::TwoPart);
    let mut single = scorer(&shipped(), ModelForm::SingleGraph, 7);
    let a = two.score_all(&src).unwrap();
    let b = single.score_all(&src).unwrap();
    assert_close(&a, &b, 1e-5, "two-part vs single graph");
    let mut actor = RewardModel::load(&shipped(), runtime(), &cpu()).unwrap();
    assert_close(
        &a,
        &stepwise(&mut actor, &ep),
        1e-5,
        "two-part vs the actor",
    );
    let t = two.last_timing();
    assert!(t.model > std::time::Duration::ZERO, "{t:?}");

    // Reversed playback is the reversed episode renumbered from step 0.
    let rev: Vec<Observation> = ep
        .iter()
        .rev()
        .enumerate()
        .map(|(t, o)| Observation {
            step: t as u64,
            ..o.clone()
        })
        .collect();
    let want = stepwise(&mut actor, &rev);
    let got = two.score_all(&Reversed(src.clone())).unwrap();
    assert_close(&got, &want, 1e-5, "reversed");
}

#[test]
fn view_frames_and_a_bound_state_read_the_models_fields() {
    // The shipped model reads 4 named fields; the source has them in another order among others.
    let m = Manifest::load(&shipped()).unwrap();
    let source_names: Vec<String> = ["junk", "gripper_width", "ee_z", "ee_y", "ee_x", "more"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let map = StateMap::bind(&m, &source_names).unwrap();
    let refs: Vec<&str> = m.views.iter().map(String::as_str).collect();
    let ep = episode(&refs, 5, 12, source_names.len());
    let per_view: Vec<Vec<_>> = (0..m.views.len())
        .map(|v| ep.iter().map(|o| o.views[v].rgb.clone()).collect())
        .collect();
    let slices: Vec<&[_]> = per_view.iter().map(Vec::as_slice).collect();
    let state: Vec<f32> = ep.iter().flat_map(|o| o.state.clone()).collect();
    let src = ViewFrames::new(&slices, &m.views, &state, source_names.len()).unwrap();
    let mut s = scorer(&shipped(), ModelForm::Auto, 64);
    s.set_state_map(map.clone()).unwrap();
    assert_eq!(s.source_state_len(), 6);
    let got = s.score(&src, &[0, 4, 11]).unwrap();
    let mut actor = RewardModel::load(&shipped(), runtime(), &cpu()).unwrap();
    actor.set_state_map(map).unwrap();
    let want = stepwise(&mut actor, &ep);
    assert_close(
        &got,
        &[want[0].clone(), want[4].clone(), want[11].clone()],
        1e-5,
        "bound",
    );

    // Views of different lengths and a short state are refused.
    let short: Vec<&[_]> = vec![slices[0], &slices[1][..3], slices[2]];
    let e = ViewFrames::new(&short, &m.views, &state, 6).unwrap_err();
    assert!(
        matches!(&e, ScoringError::ViewLength { view, got: 3, len: 12 } if view == "side"),
        "{e}"
    );
    let e = ViewFrames::new(&slices, &m.views, &state[1..], 6).unwrap_err();
    assert!(matches!(e, ScoringError::StateLength { .. }), "{e}");
}

#[test]
fn bad_episodes_are_refused_before_any_run() {
    let mut s = scorer(&model_path("tiny3v"), ModelForm::Auto, 8);
    let names: Vec<String> = VIEWS3.iter().map(|v| v.to_string()).collect();
    let empty: Vec<Observation> = Vec::new();
    let e = s
        .score_all(&ObservationFrames::new(&empty, &names).unwrap())
        .unwrap_err();
    assert!(matches!(e, ScoringError::Empty), "{e}");

    let mut ep = episode(&VIEWS3, 1, 6, 8);
    let src = ObservationFrames::new(&ep, &names).unwrap();
    let e = s.score(&src, &[2, 6]).unwrap_err();
    assert!(
        matches!(e, ScoringError::FrameOutOfRange { frame: 6, len: 6 }),
        "{e}"
    );

    ep[4].state[3] = f32::NAN;
    let src = ObservationFrames::new(&ep, &names).unwrap();
    let e = s.score_all(&src).unwrap_err();
    assert!(
        matches!(
            e,
            ScoringError::StateNotFinite {
                frame: 4,
                index: 3,
                ..
            }
        ),
        "{e}"
    );
    ep[4].state.pop();
    let src = ObservationFrames::new(&ep, &names).unwrap();
    let e = s.score_all(&src).unwrap_err();
    assert!(
        matches!(
            e,
            ScoringError::StateLength {
                frame: 4,
                got: 7,
                want: 8
            }
        ),
        "{e}"
    );

    ep[2].views.remove(1);
    let e = ObservationFrames::new(&ep, &names).unwrap_err();
    assert!(
        e.to_string().contains("frame 2 has no view named \"side\""),
        "{e}"
    );

    // An empty frame names its frame and view.
    let mut ep = episode(&VIEWS3, 1, 3, 8);
    ep[1].views[2].rgb = image::RgbImage::new(0, 0);
    let src = ObservationFrames::new(&ep, &names).unwrap();
    let e = s.score_all(&src).unwrap_err();
    assert!(e.to_string().starts_with("frame 1, view `wrist`"), "{e}");
    // The scorer still works.
    let ep = episode(&VIEWS3, 1, 3, 8);
    assert_eq!(
        s.score_all(&ObservationFrames::new(&ep, &names).unwrap())
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn the_worker_pool_returns_items_in_order_and_stops_on_the_first_error() {
    let names: Vec<String> = VIEWS3.iter().map(|v| v.to_string()).collect();
    let eps: Vec<Vec<Observation>> = (0..7).map(|i| episode(&VIEWS3, i, 5 + i, 8)).collect();
    let load = |_: usize| -> Result<EpisodeScorer, String> {
        Ok(scorer(&model_path("tiny3v"), ModelForm::Auto, 4))
    };
    let mut seen = 0;
    let out = scoring::score_in_workers(
        eps.len(),
        3,
        2,
        load,
        |i| Ok(&eps[i]),
        |m: &mut EpisodeScorer, _, ep: &Vec<Observation>| {
            let src = ObservationFrames::new(ep, &names).map_err(|e| e.to_string())?;
            m.score_all(&src).map_err(|e| e.to_string())
        },
        |_, _: &Vec<Progress>| seen += 1,
    )
    .unwrap();
    assert_eq!(seen, 7);
    let mut one = scorer(&model_path("tiny3v"), ModelForm::Auto, 4);
    for (ep, got) in eps.iter().zip(&out) {
        let want = one
            .score_all(&ObservationFrames::new(ep, &names).unwrap())
            .unwrap();
        assert_eq!(got, &want);
    }

    // A failing read, and a failing load, fail the run with their error.
    let r = scoring::score_in_workers(
        eps.len(),
        2,
        2,
        load,
        |i| {
            if i == 4 {
                Err(format!("no episode {i}"))
            } else {
                Ok(i)
            }
        },
        |_: &mut EpisodeScorer, _, i| Ok(i),
        |_, _| {},
    );
    assert_eq!(r.unwrap_err(), "no episode 4");
    let r = scoring::score_in_workers(
        3,
        2,
        4,
        |w| Err::<EpisodeScorer, _>(format!("worker {w} has no model")),
        Ok,
        |_, _, i| Ok(i),
        |_, _| {},
    );
    assert!(r.unwrap_err().ends_with("has no model"));
}

/// FrameSource gives the frames by the model's view order, whatever the observation's order.
#[test]
fn observation_frames_follow_the_models_view_order() {
    let names: Vec<String> = VIEWS3.iter().map(|v| v.to_string()).collect();
    let mut ep = episode(&VIEWS3, 9, 4, 8);
    let want: Vec<_> = ep.iter().map(|o| o.views[2].rgb.clone()).collect();
    for o in &mut ep {
        o.views.reverse();
    }
    let src = ObservationFrames::new(&ep, &names).unwrap();
    assert_eq!(src.len(), 4);
    for (t, w) in want.iter().enumerate() {
        assert_eq!(src.frame(t, 2), w);
        assert_eq!(Reversed(src.clone()).frame(3 - t, 2), w);
    }
}
