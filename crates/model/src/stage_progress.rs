//! What a stage-progress model's manifest and outputs mean, shared by every form that runs one (the single graph
//! and fused step graph in [`crate::reward`], the two parts in [`crate::two_part`], the episode engine in
//! [`crate::scoring`]): the image spec and stage proportions a manifest gives, and `Progress` from a run's stage
//! logits and taus. It uses none of those modules.

use crate::manifest::{ImageSpec, Manifest, ProgressMode};
use crate::ModelError;
use stagewise_core::progress::{argmax, softmax};
use stagewise_core::{Progress, StageProportions};
use std::path::Path;

/// `Progress` per env from a run's outputs: `logits` `[n, K]` and `taus` `[n]`, `[n, 1]` or `[n, K]` (the graph
/// may leave the axis dynamic). Refuses wrong sizes and non-finite values; `graph` names the file in errors.
pub(crate) fn progress_from_outputs(
    manifest: &Manifest,
    proportions: &StageProportions,
    graph: &Path,
    n: usize,
    logits: &[f32],
    taus: &[f32],
) -> Result<Vec<Progress>, ModelError> {
    let k = proportions.len();
    let tau_width = if taus.len() == n { 1 } else { k };
    let logits_name = manifest.outputs.stage_logits.clone().unwrap_or_default();
    let tau_name = manifest.outputs.tau.clone().unwrap_or_default();
    let bad = |tensor: &str, reason: String| ModelError::BadOutput {
        path: graph.to_path_buf(),
        tensor: tensor.into(),
        reason,
    };
    if logits.len() != n * k {
        return Err(bad(
            &logits_name,
            format!(
                "has {} values, expected {} ([{n}, {k}])",
                logits.len(),
                n * k
            ),
        ));
    }
    if taus.len() != n * tau_width {
        return Err(bad(
            &tau_name,
            format!(
                "has {} values, expected {n} or {} ([{n}, {k}])",
                taus.len(),
                n * k
            ),
        ));
    }
    let mode = manifest
        .stages
        .as_ref()
        .map(|s| s.progress)
        .unwrap_or_default();
    let mut out = Vec::with_capacity(n);
    for env in 0..n {
        let l: Vec<f64> = logits[env * k..(env + 1) * k]
            .iter()
            .map(|&x| x as f64)
            .collect();
        let t: Vec<f64> = taus[env * tau_width..(env + 1) * tau_width]
            .iter()
            .map(|&x| x as f64)
            .collect();
        if let Some(x) = l.iter().find(|x| !x.is_finite()) {
            return Err(bad(
                &logits_name,
                format!("env {env}: value {x} is not finite"),
            ));
        }
        if let Some(x) = t.iter().find(|x| !x.is_finite()) {
            return Err(bad(
                &tau_name,
                format!("env {env}: value {x} is not finite"),
            ));
        }
        let progress_err = |tensor: &str, source| ModelError::OutputProgress {
            path: graph.to_path_buf(),
            tensor: tensor.into(),
            source,
        };
        let probs = softmax(&l).map_err(|e| progress_err(&logits_name, e))?;
        let stage = argmax(&l).unwrap_or(0);
        let tau = if tau_width == k { t[stage] } else { t[0] };
        let phi = match mode {
            ProgressMode::Hard => proportions.hard_phi(stage, tau),
            ProgressMode::Soft => proportions.soft_phi(&l, &t),
        }
        .map_err(|e| progress_err(&tau_name, e))?;
        out.push(Progress {
            stage,
            stage_probs: probs.iter().map(|&p| p as f32).collect(),
            tau: tau.clamp(0.0, 1.0) as f32,
            phi: phi as f32,
        });
    }
    Ok(out)
}

/// What a stage-progress manifest says about its images and stages: the image spec, the number of stages K
/// and the (normalised) stage proportions.
pub(crate) fn progress_spec(
    m: &Manifest,
) -> Result<(ImageSpec, usize, StageProportions), ModelError> {
    let field = |field: &str, reason: String| ModelError::ManifestField {
        path: m.path.clone(),
        field: field.into(),
        reason,
    };
    let (Some(image), Some(stages)) = (&m.image, &m.stages) else {
        return Err(field(
            "image",
            "a stage_progress model needs [image] and [stages]".into(),
        ));
    };
    let proportions = StageProportions::new(&stages.proportions).map_err(|source| {
        ModelError::ManifestProportions {
            path: m.path.clone(),
            source,
        }
    })?;
    Ok((image.clone(), stages.names.len(), proportions))
}
