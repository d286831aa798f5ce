//! Quality bars of the shipped reward models (issue 5), on a small held-out set generated fresh by the simulator
//! (seeds from 1_000_000 on; training used seeds below 600_000): clean expert episodes, failures, and clean
//! episodes with camera-pose jitter beyond the training range.
//!
//! Bars: VOC >= 0.95 on expert episodes; stage accuracy >= 0.90; progress MAE <= 0.06; AUROC of the final
//! progress (success vs failure) >= 0.95; VOC >= 0.90 with camera jitter beyond training (VOC = mean over the
//! episodes, as `stagewise eval` reports it), for every shipped progress model (models/README.md).
//!
//! Needs ONNX Runtime (scripts/setup.sh installs the wheel into .venv).

use rayon::prelude::*;
use stagewise_core::{metrics, Observation};
use stagewise_model::{HopModel, OrtRuntime, Provider, RewardModel, SessionOptions};
use stagewise_sim::{rollout_with, Degradation, EpisodeRecord, SimConfig, Task};
use std::path::PathBuf;

const HELD_OUT_SEED: u64 = 1_000_000;
/// Camera jitter (m) of the training data (models/README.md) and of the held-out jitter test (beyond it).
const TEST_JITTER: f32 = 0.03;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cpu() -> SessionOptions {
    SessionOptions {
        provider: Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    }
}

fn runtime() -> &'static OrtRuntime {
    OrtRuntime::init(None).expect("ONNX Runtime: run scripts/setup.sh first")
}

struct Ep {
    rec: EpisodeRecord,
    obs: Vec<Observation>,
}

fn episode(task: Task, seed: u64, preset: &str, jitter: f32) -> Ep {
    let mut cfg = SimConfig::new(task).with_resolution(32, 32);
    cfg.depth = false;
    cfg.randomization.camera_jitter = jitter;
    let deg = Degradation::preset(preset).expect("preset");
    let mut rec = rollout_with(&cfg, seed, deg).expect("rollout");
    let frames = rec.frames.take().expect("frames");
    let obs = frames
        .into_iter()
        .zip(&rec.states)
        .enumerate()
        .map(|(t, (views, state))| Observation {
            step: t as u64,
            time: t as f64 / 50.0,
            views,
            state: state.clone(),
        })
        .collect();
    Ep { rec, obs }
}

/// (preset, jitter) of the held-out episodes: 4 clean, 3 failures, 2 clean with jitter beyond training.
const PLAN: [(&str, f32); 9] = [
    ("none", 0.0),
    ("none", 0.0),
    ("none", 0.0),
    ("none", 0.0),
    ("miss-grasp", 0.0),
    ("wrong-place", 0.0),
    ("freeze", 0.0),
    ("none", TEST_JITTER),
    ("none", TEST_JITTER),
];

fn held_out(task: Task) -> Vec<Ep> {
    PLAN.par_iter()
        .enumerate()
        .map(|(i, &(preset, jitter))| episode(task, HELD_OUT_SEED + i as u64, preset, jitter))
        .collect()
}

fn score(model: &mut RewardModel, obs: &[Observation]) -> (Vec<f64>, Vec<usize>) {
    model.reset_env(0);
    let mut phi = Vec::with_capacity(obs.len());
    let mut stage = Vec::with_capacity(obs.len());
    for o in obs {
        let p = model.score(&[o]).expect("score").remove(0);
        phi.push(f64::from(p.phi));
        stage.push(p.stage);
    }
    (phi, stage)
}

fn check_progress_model(task: Task) {
    let manifest = root()
        .join("models")
        .join(task.name())
        .join(format!("{}-progress.toml", task.name()));
    let mut model = RewardModel::load(&manifest, runtime(), &cpu()).expect("load shipped model");
    let eps = held_out(task);
    let scores = eps
        .iter()
        .map(|ep| {
            let (phi, stage) = score(&mut model, &ep.obs);
            (phi, Some(stage))
        })
        .collect();
    check_bars(&format!("{task} progress"), &eps, scores);
}

/// Checks the bars on the held-out episodes' scores (`(phi, stages)` per episode; stage accuracy only for
/// models with stages).
fn check_bars(name: &str, eps: &[Ep], scores: Vec<(Vec<f64>, Option<Vec<usize>>)>) {
    let (mut vocs, mut jitter_vocs) = (Vec::new(), Vec::new());
    let (mut pk, mut gk, mut pp, mut gp) = (vec![], vec![], vec![], vec![]);
    let (mut finals, mut labels) = (Vec::new(), Vec::new());
    for ((ep, &(preset, jitter)), (phi, stage)) in eps.iter().zip(&PLAN).zip(scores) {
        let gt: Vec<f64> = ep.rec.progress.iter().map(|&x| f64::from(x)).collect();
        eprintln!(
            "{name} {preset} jitter {jitter}: success {}, final progress {:.3} (truth {:.3}), {} frames, MAE \
             {:.3}, stage acc {:.3?}",
            ep.rec.success,
            phi.last().copied().unwrap_or(0.0),
            gt.last().copied().unwrap_or(0.0),
            phi.len(),
            metrics::progress_mae(&phi, &gt).expect("mae"),
            stage
                .as_ref()
                .map(|k| metrics::stage_accuracy(k, &ep.rec.stages).expect("acc")),
        );
        // VOC on successful expert episodes (the clean expert fails now and then: such an episode counts
        // as a failure below)
        if preset == "none" && ep.rec.success {
            let v = metrics::voc(&phi).expect("voc");
            if jitter > 0.0 {
                jitter_vocs.push(v);
            } else {
                vocs.push(v);
            }
        }
        if jitter == 0.0 {
            if let Some(stage) = stage {
                pk.extend(stage);
                gk.extend(ep.rec.stages.iter().copied());
            }
            pp.extend(phi.iter().copied());
            gp.extend(ep.rec.progress.iter().map(|&x| f64::from(x)));
            finals.push(phi);
            labels.push(ep.rec.success);
        }
    }
    assert!(
        vocs.len() >= 3 && !jitter_vocs.is_empty(),
        "{name}: too few successful expert episodes ({} clean, {} with jitter)",
        vocs.len(),
        jitter_vocs.len()
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let voc = mean(&vocs);
    let jitter_voc = mean(&jitter_vocs);
    let acc = (!pk.is_empty()).then(|| metrics::stage_accuracy(&pk, &gk).expect("acc"));
    let mae = metrics::progress_mae(&pp, &gp).expect("mae");
    let auroc = metrics::final_progress_auroc(&finals, &labels).expect("auroc");
    eprintln!(
        "{name}: VOC {voc:.4}, jitter VOC {jitter_voc:.4}, stage acc {acc:.4?}, MAE {mae:.4}, AUROC {auroc:.4}"
    );
    assert!(voc >= 0.95, "{name}: VOC {voc} < 0.95");
    if let Some(acc) = acc {
        assert!(acc >= 0.90, "{name}: stage accuracy {acc} < 0.90");
    }
    assert!(mae <= 0.06, "{name}: progress MAE {mae} > 0.06");
    assert!(auroc >= 0.95, "{name}: AUROC {auroc} < 0.95");
    assert!(
        jitter_voc >= 0.90,
        "{name}: VOC with camera jitter {jitter_voc} < 0.90"
    );
}

#[test]
fn pick_place_model_meets_the_bars() {
    check_progress_model(Task::PickPlace);
}

#[test]
fn push_target_model_meets_the_bars() {
    check_progress_model(Task::PushTarget);
}

#[test]
fn stack_model_meets_the_bars() {
    check_progress_model(Task::Stack);
}

/// The pick-place hop model, fused into progress by core's `HopFusion` (as `stagewise eval` does), against the
/// same bars except stage accuracy (a hop model has no stages). The goal frame is the last frame of a clean
/// episode outside the held-out set.
#[test]
fn pick_place_hop_model_meets_the_bars() {
    let manifest = root().join("models/pick-place/pick-place-hop.toml");
    let mut model = HopModel::load(&manifest, runtime(), &cpu()).expect("load shipped hop model");
    let goal_ep = episode(Task::PickPlace, HELD_OUT_SEED + 100, "none", 0.0);
    let goal = goal_ep.obs.last().expect("goal frame").clone();
    let eps = held_out(Task::PickPlace);
    let scores = eps
        .iter()
        .map(|ep| (model.fused_progress(&ep.obs, &goal).expect("hop"), None))
        .collect();
    check_bars("pick-place hop", &eps, scores);
}
