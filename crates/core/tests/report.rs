//! Quality reports (`stagewise_core::report`): the aggregation `stagewise eval` prints, on episodes whose metrics
//! are known by construction, and the ablation rows and table.

use stagewise_core::report::{
    ablation_rows, ablation_table, format_metric, reversed, summarise, Ablation, EpisodeScores,
    EpisodeTruth,
};
use stagewise_core::{MetricsError, Observation, View};

fn truth(len: usize, success: bool, degraded: bool) -> EpisodeTruth {
    EpisodeTruth {
        progress_gt: (0..len).map(|t| t as f64 / (len - 1) as f64).collect(),
        stage_gt: (0..len).map(|t| usize::from(t >= len / 2)).collect(),
        success,
        degraded,
    }
}

fn scores(phi: Vec<f64>, stage: Option<Vec<usize>>) -> EpisodeScores {
    let phi_reversed = phi.iter().rev().copied().collect();
    EpisodeScores {
        phi,
        stage,
        phi_reversed,
    }
}

#[test]
fn summary_of_known_episodes() {
    // Episode 0: a perfect model on a success. Episode 1: a degraded success, flat at 0.5 (left out of VOC).
    // Episode 2: a failure whose progress falls (final 0.1 < the successes' finals).
    let eps = [
        truth(5, true, false),
        truth(5, true, true),
        truth(4, false, false),
    ];
    let perfect: Vec<f64> = eps[0].progress_gt.clone();
    let s = summarise(
        &eps,
        &[
            scores(perfect, Some(eps[0].stage_gt.clone())),
            scores(vec![0.5; 5], Some(vec![0; 5])),
            scores(vec![0.4, 0.3, 0.2, 0.1], Some(vec![1, 1, 0, 0])),
        ],
    )
    .unwrap();
    assert_eq!((s.episodes, s.expert_successes, s.failures), (3, 1, 1));
    assert!(
        (s.voc - 1.0).abs() < 1e-12 && (s.voc_min - 1.0).abs() < 1e-12,
        "{s:?}"
    );
    // The reversed playback of a content-reading model scores 1 too.
    assert!(
        (s.vroc - 1.0).abs() < 1e-12 && (s.voc_f1 - 1.0).abs() < 1e-12,
        "{s:?}"
    );
    // Stages (annotated: stage 1 from frame len / 2): 5 of 5, 2 of 5 and 0 of 4 right.
    assert!(
        (s.stage_accuracy.unwrap() - 7.0 / 14.0).abs() < 1e-12,
        "{s:?}"
    );
    let gt2 = &eps[2].progress_gt;
    let mae = (eps[1]
        .progress_gt
        .iter()
        .map(|g| (g - 0.5).abs())
        .sum::<f64>()
        + [0.4, 0.3, 0.2, 0.1]
            .iter()
            .zip(gt2)
            .map(|(p, g)| (p - g).abs())
            .sum::<f64>())
        / 14.0;
    assert!((s.progress_mae - mae).abs() < 1e-12, "{s:?} vs {mae}");
    // Both successes end above the failure.
    assert_eq!(s.auroc, Some(1.0));
    let json = serde_json::to_value(&s).unwrap();
    for key in [
        "episodes",
        "expert_successes",
        "failures",
        "voc",
        "voc_min",
        "vroc",
        "voc_f1",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
}

#[test]
fn what_cannot_be_measured_is_nan_or_none() {
    let eps = [truth(3, false, false)];
    let s = summarise(&eps, &[scores(vec![0.1, 0.2, 0.3], None)]).unwrap();
    assert!(
        s.voc.is_nan() && s.vroc.is_nan() && s.voc_f1.is_nan(),
        "{s:?}"
    );
    assert_eq!(s.voc_min, f64::INFINITY);
    assert_eq!((s.stage_accuracy, s.auroc), (None, None));
    assert_eq!(format_metric(s.voc), "n/a");
    assert_eq!(format_metric(0.123456), "0.1235");
}

#[test]
fn bad_input_is_refused() {
    let eps = [truth(3, true, false), truth(3, true, false)];
    let e = summarise(&eps, &[scores(vec![0.1, 0.2, 0.3], None)]).unwrap_err();
    assert!(
        matches!(
            e,
            MetricsError::Length {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
    let e = summarise(&eps[..1], &[scores(vec![0.1, f64::NAN, 0.3], None)]).unwrap_err();
    assert!(matches!(e, MetricsError::NotFinite { index: 1, .. }), "{e}");
    // Scores shorter than the annotations.
    let e = summarise(&eps[..1], &[scores(vec![0.1, 0.2], None)]).unwrap_err();
    assert!(matches!(e, MetricsError::Length { .. }), "{e}");
}

fn obs(t: u64, state: Vec<f32>) -> Observation {
    let frame = |c: u8| image::RgbImage::from_pixel(2, 2, image::Rgb([c, c, c]));
    Observation {
        step: t,
        time: t as f64 * 0.1,
        views: vec![
            View::new("front", frame(t as u8)),
            View::new("wrist", frame(100)),
        ],
        state,
    }
}

#[test]
fn ablations_blank_views_and_hold_state() {
    let ep: Vec<Observation> = (0..3)
        .map(|t| obs(t, vec![t as f32, 10.0 + t as f32]))
        .collect();
    let a = Ablation {
        name: "x".into(),
        blank_views: vec!["front".into()],
        hold_state: vec![1],
    };
    assert!(!a.is_none() && Ablation::default().is_none());
    let out = a.apply(&ep, image::Rgb([7, 8, 9]));
    for (t, o) in out.iter().enumerate() {
        assert!(o.views[0].rgb.pixels().all(|p| p.0 == [7, 8, 9]));
        assert_eq!(o.views[1].rgb, ep[t].views[1].rgb);
        assert_eq!(o.state, vec![t as f32, 10.0]);
    }
    // Reversed playback: last frame first, renumbered, `dt` apart (the dataset's 1 / fps).
    let r = reversed(&ep, 1.0 / 30.0);
    assert_eq!(r[0].views[0].rgb, ep[2].views[0].rgb);
    assert_eq!((r[2].step, r[2].time), (2, 2.0 / 30.0));
}

#[test]
fn ablation_rows_and_table() {
    let views = vec!["front".to_string(), "wrist".to_string()];
    let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let rows = ablation_rows(&views, &[2, 0, 2], Some(&names), &[("b".into(), 1)]);
    let got: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        got,
        [
            "as is",
            "all views blanked",
            "blank front",
            "blank wrist",
            "hold state read (a, c)",
            "hold b"
        ]
    );
    assert_eq!(rows[4].hold_state, [0, 2]);
    // One view: no per-view rows; more than 4 fields read are counted.
    let rows1 = ablation_rows(&views[..1], &[0, 1, 2, 3, 4], Some(&names), &[]);
    assert_eq!(rows1.len(), 3);
    assert_eq!(rows1[2].name, "hold state read (5 fields)");

    let eps = [truth(3, true, false)];
    let base = summarise(&eps, &[scores(vec![0.0, 0.6, 1.0], Some(vec![0, 1, 1]))]).unwrap();
    let worse = summarise(&eps, &[scores(vec![0.5, 0.5, 0.5], Some(vec![0, 0, 0]))]).unwrap();
    let table = ablation_table(&[(&rows[0], &base), (&rows[1], &worse)]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("ablation") && lines[0].contains("MAE x"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("as is") && lines[1].contains("1.00x"),
        "{table}"
    );
    let ratio = worse.progress_mae / base.progress_mae;
    assert!(lines[2].contains(&format!("{ratio:.2}x")), "{table}");
    assert!(lines[2].starts_with("all views blanked"), "{table}");
}
