//! Metrics against scipy / scikit-learn reference values (crates/core/reference/make_fixtures.py).

use serde::Deserialize;
use stagewise_core::metrics::{
    auroc, final_progress_auroc, negative_rate, progress_mae, rankdata, spearman, stage_accuracy,
    voc, voc_f1, vroc,
};

const TOL: f64 = 1e-9;

#[derive(Deserialize)]
struct Fixture {
    rankdata: Vec<RankCase>,
    spearman: Vec<SpearmanCase>,
    episodes: Vec<EpisodeCase>,
    stage_accuracy: Vec<StageCase>,
    progress_mae: Vec<MaeCase>,
    auroc: Vec<AurocCase>,
}

#[derive(Deserialize)]
struct RankCase {
    values: Vec<f64>,
    ranks: Vec<f64>,
}

#[derive(Deserialize)]
struct SpearmanCase {
    x: Vec<f64>,
    y: Vec<f64>,
    rho: f64,
}

#[derive(Deserialize)]
struct EpisodeCase {
    phi: Vec<f64>,
    phi_reversed: Vec<f64>,
    voc: f64,
    vroc: f64,
    voc_f1: f64,
    nr: f64,
}

#[derive(Deserialize)]
struct StageCase {
    predicted: Vec<usize>,
    annotated: Vec<usize>,
    accuracy: f64,
}

#[derive(Deserialize)]
struct MaeCase {
    predicted: Vec<f64>,
    annotated: Vec<f64>,
    mae: f64,
}

#[derive(Deserialize)]
struct AurocCase {
    scores: Vec<f64>,
    labels: Vec<bool>,
    auroc: f64,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/metrics.json")).expect("metrics.json parses")
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= TOL,
        "{what}: got {got}, reference {want} (diff {})",
        (got - want).abs()
    );
}

#[test]
fn ranks_match_scipy_average_method() {
    for c in fixture().rankdata {
        assert_eq!(rankdata(&c.values).unwrap(), c.ranks);
    }
}

#[test]
fn spearman_matches_scipy_including_ties_and_constants() {
    let f = fixture();
    assert!(f.spearman.len() >= 5);
    for (i, c) in f.spearman.iter().enumerate() {
        close(
            &format!("spearman case {i}"),
            spearman(&c.x, &c.y).unwrap(),
            c.rho,
        );
    }
}

#[test]
fn voc_vroc_f1_and_nr_match_the_reference() {
    for (i, c) in fixture().episodes.iter().enumerate() {
        let v = voc(&c.phi).unwrap();
        let r = vroc(&c.phi_reversed).unwrap();
        close(&format!("voc {i}"), v, c.voc);
        close(&format!("vroc {i}"), r, c.vroc);
        close(&format!("voc_f1 {i}"), voc_f1(v, r).unwrap(), c.voc_f1);
        close(&format!("nr {i}"), negative_rate(&c.phi).unwrap(), c.nr);
    }
}

#[test]
fn stage_accuracy_and_mae_match_sklearn() {
    let f = fixture();
    for c in f.stage_accuracy {
        close(
            "stage accuracy",
            stage_accuracy(&c.predicted, &c.annotated).unwrap(),
            c.accuracy,
        );
    }
    for c in f.progress_mae {
        close(
            "progress mae",
            progress_mae(&c.predicted, &c.annotated).unwrap(),
            c.mae,
        );
    }
}

#[test]
fn auroc_matches_sklearn_with_ties() {
    for (i, c) in fixture().auroc.iter().enumerate() {
        close(
            &format!("auroc {i}"),
            auroc(&c.scores, &c.labels).unwrap(),
            c.auroc,
        );
        // the same through final progress of one-frame "episodes"
        let episodes: Vec<Vec<f64>> = c.scores.iter().map(|s| vec![0.0, *s]).collect();
        close(
            &format!("final progress auroc {i}"),
            final_progress_auroc(&episodes, &c.labels).unwrap(),
            c.auroc,
        );
    }
}
