//! RA-BC weights against a numpy re-implementation of LeRobot's RABCWeights
//! (src/lerobot/policies/sarm/rabc.py; generator: crates/core/reference/make_fixtures.py).

use std::collections::HashMap;

use serde::Deserialize;
use stagewise_core::rabc::{normalize_batch, RabcConfig, RabcPrecision, RabcSummary, RabcWeights};

const TOL: f64 = 1e-9;

#[derive(Deserialize)]
struct Fixture {
    datasets: HashMap<String, Vec<Vec<f64>>>,
    cases: Vec<Case>,
    normalize_batch: Norm,
}

#[derive(Deserialize)]
struct Case {
    dataset: String,
    chunk_size: usize,
    kappa: f64,
    epsilon: f64,
    precision: RabcPrecision,
    deltas: Vec<Vec<f64>>,
    weights: Vec<Vec<f64>>,
    summary: RabcSummary,
}

#[derive(Deserialize)]
struct Norm {
    weights: Vec<f64>,
    epsilon: f64,
    normalized: Vec<f64>,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/rabc.json")).expect("rabc.json parses")
}

fn close_all(what: &str, got: &[Vec<f64>], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len(), "{what}: episode count");
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: episode {e} length");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= TOL,
                "{what}: episode {e} frame {i}: got {a}, reference {b}"
            );
        }
    }
}

#[test]
fn weights_and_summary_match_lerobot() {
    let f = fixture();
    assert!(f.cases.len() >= 20);
    for c in &f.cases {
        let what = format!(
            "{} chunk {} kappa {} {:?}",
            c.dataset, c.chunk_size, c.kappa, c.precision
        );
        let episodes = &f.datasets[&c.dataset];
        let config = RabcConfig {
            chunk_size: c.chunk_size,
            kappa: c.kappa,
            epsilon: c.epsilon,
            precision: c.precision,
        };
        let w = RabcWeights::compute(episodes, &config).unwrap();
        close_all(&format!("{what} deltas"), &w.deltas, &c.deltas);
        close_all(&format!("{what} weights"), &w.weights, &c.weights);
        let (s, r) = (w.summary, &c.summary);
        assert_eq!(s.frames, r.frames, "{what}");
        assert_eq!(s.num_zero_weight, r.num_zero_weight, "{what}: count at 0");
        assert_eq!(s.num_full_weight, r.num_full_weight, "{what}: count at 1");
        for (name, a, b) in [
            ("mean weight", s.mean_weight, r.mean_weight),
            ("delta mean", s.delta_mean, r.delta_mean),
            ("delta std", s.delta_std, r.delta_std),
        ] {
            assert!(
                (a - b).abs() <= TOL,
                "{what}: {name}: got {a}, reference {b}"
            );
        }
    }
}

#[test]
fn f32_weights_are_bit_exact() {
    // LeRobot's arithmetic is float32 throughout the weighting: the result should be identical, not just close.
    let f = fixture();
    for c in f
        .cases
        .iter()
        .filter(|c| c.precision == RabcPrecision::LeRobotF32)
    {
        let config = RabcConfig {
            chunk_size: c.chunk_size,
            kappa: c.kappa,
            epsilon: c.epsilon,
            precision: c.precision,
        };
        let w = RabcWeights::compute(&f.datasets[&c.dataset], &config).unwrap();
        assert_eq!(w.weights, c.weights, "{} chunk {}", c.dataset, c.chunk_size);
    }
}

#[test]
fn batch_normalisation_matches_lerobot() {
    let n = fixture().normalize_batch;
    let got = normalize_batch(&n.weights, n.epsilon);
    for (a, b) in got.iter().zip(&n.normalized) {
        assert!((a - b).abs() <= TOL);
    }
}
