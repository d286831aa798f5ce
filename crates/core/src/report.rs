//! Reward-model quality reports over a set of scored episodes (what `stagewise eval` prints and writes): the
//! metrics of [`crate::metrics`] aggregated as DESIGN.md "Reward-model quality metrics" asks, and the ablations
//! that go with a quality bar (DESIGN.md: "a quality bar always comes with an ablation that a cheating model
//! would fail": views blanked, state fields held).
//!
//! - VOC and VROC: mean over the successful clean (not degraded) episodes of at least 2 frames; `voc_min` the
//!   lowest VOC; VOC-F1 of the two means.
//! - Stage accuracy (stage models only) and progress MAE: over all frames of all episodes.
//! - AUROC of the final progress, success vs failure: over all episodes, when both classes are present.

use crate::metrics::{self, MetricsError};
use crate::types::Observation;

/// What the dataset says about one episode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodeTruth {
    /// Annotated progress per frame.
    pub progress_gt: Vec<f64>,
    /// Annotated stage per frame.
    pub stage_gt: Vec<usize>,
    pub success: bool,
    /// A degraded (perturbed) episode: not a clean expert demonstration, left out of VOC/VROC.
    pub degraded: bool,
}

/// A model's outputs for one episode, forward and on reversed playback.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodeScores {
    pub phi: Vec<f64>,
    /// Predicted stage per frame (stage models; None for hop models).
    pub stage: Option<Vec<usize>>,
    /// Progress of the reversed episode (its last frame first).
    pub phi_reversed: Vec<f64>,
}

/// The metrics of DESIGN.md over a set of episodes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub episodes: usize,
    /// Successful clean episodes (those VOC and VROC are taken over).
    pub expert_successes: usize,
    pub failures: usize,
    pub voc: f64,
    pub voc_min: f64,
    pub vroc: f64,
    pub voc_f1: f64,
    pub stage_accuracy: Option<f64>,
    pub progress_mae: f64,
    pub auroc: Option<f64>,
}

/// Computes the metrics (see the module doc). NaN where a mean has no episodes; refuses a different number of
/// scores than episodes, and any metric's bad input.
pub fn summarise(
    truth: &[EpisodeTruth],
    scored: &[EpisodeScores],
) -> Result<Summary, MetricsError> {
    if scored.len() != truth.len() {
        return Err(MetricsError::Length {
            what: "scored episodes",
            other: "episodes",
            expected: truth.len(),
            got: scored.len(),
        });
    }
    let mut vocs = Vec::new();
    let mut vrocs = Vec::new();
    let (mut pred_phi, mut gt_phi, mut pred_k, mut gt_k) = (vec![], vec![], vec![], vec![]);
    let mut finals = Vec::new();
    let mut labels = Vec::new();
    for (e, s) in truth.iter().zip(scored) {
        if e.success && !e.degraded && s.phi.len() >= 2 {
            vocs.push(metrics::voc(&s.phi)?);
            vrocs.push(metrics::vroc(&s.phi_reversed)?);
        }
        pred_phi.extend_from_slice(&s.phi);
        gt_phi.extend_from_slice(&e.progress_gt);
        if let Some(k) = &s.stage {
            pred_k.extend_from_slice(k);
            gt_k.extend_from_slice(&e.stage_gt);
        }
        finals.push(s.phi.clone());
        labels.push(e.success);
    }
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let voc = mean(&vocs);
    let vroc = mean(&vrocs);
    let auroc = if labels.iter().any(|&l| l) && labels.iter().any(|&l| !l) {
        Some(metrics::final_progress_auroc(&finals, &labels)?)
    } else {
        None
    };
    Ok(Summary {
        episodes: truth.len(),
        expert_successes: vocs.len(),
        failures: labels.iter().filter(|&&l| !l).count(),
        voc,
        voc_min: vocs.iter().copied().fold(f64::INFINITY, f64::min),
        vroc,
        voc_f1: if voc.is_finite() && vroc.is_finite() {
            metrics::voc_f1(voc, vroc)?
        } else {
            f64::NAN
        },
        stage_accuracy: if pred_k.is_empty() {
            None
        } else {
            Some(metrics::stage_accuracy(&pred_k, &gt_k)?)
        },
        progress_mae: metrics::progress_mae(&pred_phi, &gt_phi)?,
        auroc,
    })
}

/// The observations in reverse order, renumbered from step 0, `dt` seconds apart (the dataset's `1 / fps`):
/// reversed playback for VROC.
pub fn reversed(ep: &[Observation], dt: f64) -> Vec<Observation> {
    ep.iter()
        .rev()
        .enumerate()
        .map(|(t, o)| Observation {
            step: t as u64,
            time: t as f64 * dt,
            views: o.views.clone(),
            state: o.state.clone(),
        })
        .collect()
}

/// One way of taking information away from the model: views blanked, state fields held.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Ablation {
    /// What the row is called ("as is", "blank front", "hold ee_x", ...).
    pub name: String,
    /// Views whose every frame becomes the blank colour.
    pub blank_views: Vec<String>,
    /// Indices in the source's state held at the episode's first-frame value.
    pub hold_state: Vec<usize>,
}

impl Ablation {
    /// Takes nothing away.
    pub fn is_none(&self) -> bool {
        self.blank_views.is_empty() && self.hold_state.is_empty()
    }

    /// `ep` with this ablation applied; `blank` is the colour of a blanked frame.
    pub fn apply(&self, ep: &[Observation], blank: image::Rgb<u8>) -> Vec<Observation> {
        let first: Vec<f32> = ep.first().map(|o| o.state.clone()).unwrap_or_default();
        ep.iter()
            .map(|o| {
                let mut o = o.clone();
                for v in o.views.iter_mut() {
                    if self.blank_views.contains(&v.name) {
                        v.rgb.pixels_mut().for_each(|p| *p = blank);
                    }
                }
                for &i in &self.hold_state {
                    if let (Some(x), Some(&x0)) = (o.state.get_mut(i), first.get(i)) {
                        *x = x0;
                    }
                }
                o
            })
            .collect()
    }
}

/// The rows of an ablation study: as is, every view blanked, each view blanked (when there are several), all
/// state fields the model reads held (`read`: their indices in the source's state, named from `source_names`
/// when there are at most 4), and each `hold` field held.
pub fn ablation_rows(
    views: &[String],
    read: &[usize],
    source_names: Option<&[String]>,
    hold: &[(String, usize)],
) -> Vec<Ablation> {
    let mut rows = vec![Ablation {
        name: "as is".into(),
        ..Ablation::default()
    }];
    rows.push(Ablation {
        name: "all views blanked".into(),
        blank_views: views.to_vec(),
        ..Ablation::default()
    });
    for v in views.iter().filter(|_| views.len() > 1) {
        rows.push(Ablation {
            name: format!("blank {v}"),
            blank_views: vec![v.clone()],
            ..Ablation::default()
        });
    }
    let mut read: Vec<usize> = read.to_vec();
    read.sort_unstable();
    read.dedup();
    if !read.is_empty() {
        let what = match source_names {
            Some(names) if read.len() <= 4 => read
                .iter()
                .filter_map(|&i| names.get(i).map(String::as_str))
                .collect::<Vec<_>>()
                .join(", "),
            _ => format!("{} fields", read.len()),
        };
        rows.push(Ablation {
            name: format!("hold state read ({what})"),
            hold_state: read,
            ..Ablation::default()
        });
    }
    for (name, i) in hold {
        rows.push(Ablation {
            name: format!("hold {name}"),
            hold_state: vec![*i],
            ..Ablation::default()
        });
    }
    rows
}

/// A metric with 4 decimals, "n/a" when not finite.
pub fn format_metric(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "n/a".into()
    }
}

/// The metrics of every ablation side by side, a header and one line each, with the MAE as a multiple of the
/// first row's (the data as is).
pub fn ablation_table(rows: &[(&Ablation, &Summary)]) -> String {
    let base_mae = rows.first().map_or(f64::NAN, |(_, s)| s.progress_mae);
    let width = rows
        .iter()
        .map(|(a, _)| a.name.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let mut out = format!(
        "{:<width$}  {:>8}  {:>8}  {:>8}  {:>9}  {:>8}  {:>8}  {:>8}\n",
        "ablation", "VOC", "VROC", "VOC-F1", "stage acc", "MAE", "MAE x", "AUROC"
    );
    for (a, s) in rows {
        let ratio = s.progress_mae / base_mae;
        out += &format!(
            "{:<width$}  {:>8}  {:>8}  {:>8}  {:>9}  {:>8}  {:>8}  {:>8}\n",
            a.name,
            format_metric(s.voc),
            format_metric(s.vroc),
            format_metric(s.voc_f1),
            s.stage_accuracy.map_or("n/a".into(), format_metric),
            format_metric(s.progress_mae),
            if ratio.is_finite() {
                format!("{ratio:.2}x")
            } else {
                "n/a".into()
            },
            s.auroc.map_or("n/a".into(), format_metric),
        );
    }
    out
}
