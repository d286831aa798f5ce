//! Metrics, RA-BC and hop fusion refuse bad input with a clear error instead of returning NaN.

use stagewise_core::metrics::{
    auroc, final_progress_auroc, mean_over_episodes, negative_rate, progress_mae, spearman,
    stage_accuracy, voc, voc_f1, vroc, MetricsError,
};
use stagewise_core::rabc::{progress_deltas, RabcConfig, RabcError, RabcWeights};
use stagewise_core::{HopConfig, HopFusion};

#[test]
fn metrics_refuse_non_finite_progress() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let phi = [0.1, bad, 0.3];
        assert!(matches!(
            voc(&phi),
            Err(MetricsError::NotFinite { index: 1, .. })
        ));
        assert!(vroc(&phi).is_err());
        assert!(negative_rate(&phi).is_err());
        assert!(progress_mae(&phi, &[0.0; 3]).is_err());
        assert!(progress_mae(&[0.0; 3], &phi).is_err());
        assert!(auroc(&phi, &[true, false, true]).is_err());
        assert!(voc_f1(bad, 0.5).is_err());
    }
    let msg = voc(&[0.1, f64::NAN]).unwrap_err().to_string();
    assert!(msg.contains("NaN"), "{msg}");
}

#[test]
fn metrics_refuse_empty_and_too_short_episodes() {
    assert_eq!(voc(&[]), Err(MetricsError::Empty("episode progress")));
    assert!(matches!(
        voc(&[0.5]),
        Err(MetricsError::TooShort { got: 1, min: 2, .. })
    ));
    assert!(vroc(&[]).is_err());
    assert!(negative_rate(&[]).is_err());
    assert!(negative_rate(&[0.2]).is_err());
    assert!(stage_accuracy(&[], &[]).is_err());
    assert!(progress_mae(&[], &[]).is_err());
    assert!(auroc(&[], &[]).is_err());
    assert!(final_progress_auroc(&[], &[]).is_err());
    assert_eq!(
        final_progress_auroc(&[vec![0.9], vec![]], &[true, false]),
        Err(MetricsError::Empty("an episode"))
    );
    assert!(mean_over_episodes(&[], voc).is_err());
    assert!(mean_over_episodes(&[vec![0.0, 1.0], vec![0.3]], voc).is_err());
    assert!((mean_over_episodes(&[vec![0.0, 1.0], vec![1.0, 0.0]], voc).unwrap()).abs() < 1e-12);
}

#[test]
fn metrics_refuse_mismatched_lengths() {
    assert!(matches!(
        spearman(&[0.1, 0.2, 0.3], &[1.0, 2.0]),
        Err(MetricsError::Length {
            expected: 3,
            got: 2,
            ..
        })
    ));
    assert!(stage_accuracy(&[0, 1], &[0, 1, 2]).is_err());
    assert!(progress_mae(&[0.1], &[0.1, 0.2]).is_err());
    assert!(auroc(&[0.1, 0.2], &[true]).is_err());
    assert!(final_progress_auroc(&[vec![0.1]], &[true, false]).is_err());
    assert!(matches!(
        auroc(&[0.1, 0.2], &[false, false]),
        Err(MetricsError::OneClass {
            successes: 0,
            failures: 2
        })
    ));
}

#[test]
fn rabc_refuses_bad_progress_and_config() {
    let c = RabcConfig::default();
    for bad in [f64::NAN, f64::INFINITY] {
        assert!(matches!(
            RabcWeights::compute(&[vec![0.1, 0.2], vec![0.3, bad]], &c),
            Err(RabcError::NotFinite {
                episode: 1,
                frame: 1,
                ..
            })
        ));
        assert!(progress_deltas(&[bad], 1).is_err());
    }
    assert_eq!(
        progress_deltas(&[], 1),
        Err(RabcError::EmptyEpisode { episode: 0 })
    );
    assert!(RabcWeights::compute(
        &[vec![0.1]],
        &RabcConfig {
            kappa: f64::NAN,
            ..c
        }
    )
    .is_err());
    assert!(RabcWeights::compute(&[vec![0.1]], &RabcConfig { epsilon: 0.0, ..c }).is_err());
    let msg = RabcWeights::compute(&[vec![0.1], vec![]], &c)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("episode 1"), "{msg}");
}

#[test]
fn hop_fusion_refuses_scores_outside_minus_one_one() {
    let mut f = HopFusion::new(HopConfig::default()).unwrap();
    assert!(f.step(1.01, 0.0, 0.0).is_err());
    assert!(f.step(0.0, f64::NAN, 0.0).is_err());
    let e = f.step(0.2, 0.3, -0.7).unwrap();
    assert!(e.phi.is_finite() && (0.0..=1.0).contains(&e.phi));
}
