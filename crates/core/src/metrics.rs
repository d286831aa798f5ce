//! Reward-model quality metrics: VOC, VROC, VOC-F1, NR, stage accuracy, progress MAE and the AUROC of final
//! progress for success vs failure episodes.
//!
//! Reference values come from `crates/core/reference/make_fixtures.py` (scipy / scikit-learn); the tests in
//! `crates/core/tests/metrics_fixtures.rs` match them to 1e-9.
//!
//! - Ranks are *average* ranks on ties (`scipy.stats.rankdata(method="average")`), and Spearman's rho is the
//!   Pearson correlation of those ranks, as `scipy.stats.spearmanr` computes it.
//! - Where either input is constant Spearman is undefined (scipy returns NaN); here it is 0, so that a model that
//!   outputs a flat line scores "no order" rather than poisoning an average.
//! - AUROC is the Mann-Whitney statistic with ties counted one half, which is what
//!   `sklearn.metrics.roc_auc_score` returns for binary labels.

/// What was wrong with a metric's input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricsError {
    #[error("{0} is empty")]
    Empty(&'static str),
    #[error("{what} has {got} values, need at least {min}")]
    TooShort {
        what: &'static str,
        got: usize,
        min: usize,
    },
    #[error("{what} has {got} values but {other} has {expected}: lengths must match")]
    Length {
        what: &'static str,
        other: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{what}[{index}] is {value}: values must be finite")]
    NotFinite {
        what: &'static str,
        index: usize,
        value: f64,
    },
    #[error(
        "AUROC needs at least one success and one failure episode, got {successes} successes and {failures} failures"
    )]
    OneClass { successes: usize, failures: usize },
}

fn check_finite(what: &'static str, values: &[f64]) -> Result<(), MetricsError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(MetricsError::NotFinite {
            what,
            index,
            value: values[index],
        }),
        None => Ok(()),
    }
}

fn check_len(
    what: &'static str,
    got: usize,
    other: &'static str,
    expected: usize,
) -> Result<(), MetricsError> {
    if got != expected {
        return Err(MetricsError::Length {
            what,
            other,
            expected,
            got,
        });
    }
    Ok(())
}

/// Average ranks, 1-based, like `scipy.stats.rankdata(values, method="average")`.
pub fn rankdata(values: &[f64]) -> Result<Vec<f64>, MetricsError> {
    check_finite("values", values)?;
    Ok(rank_finite(values))
}

/// `rankdata` for values already known to be finite.
fn rank_finite(values: &[f64]) -> Vec<f64> {
    let n = values.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; n];
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        // total_cmp would tell -0.0 from 0.0; scipy ties them, so compare with ==.
        while j < n && values[order[j]] == values[order[i]] {
            j += 1;
        }
        // positions i..j (0-based) share the average of ranks i+1..=j
        let avg = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            ranks[k] = avg;
        }
        i = j;
    }
    ranks
}

/// Pearson correlation; 0 when either side has zero variance.
fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        let (dx, dy) = (a - mx, b - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx <= 0.0 || syy <= 0.0 {
        return 0.0;
    }
    (sxy / (sxx.sqrt() * syy.sqrt())).clamp(-1.0, 1.0)
}

fn is_constant(values: &[f64]) -> bool {
    values.iter().all(|v| *v == values[0])
}

/// Spearman's rank correlation (average ranks on ties, as scipy). 0 when either input is constant.
/// Needs at least 2 finite values on each side and equal lengths.
pub fn spearman(x: &[f64], y: &[f64]) -> Result<f64, MetricsError> {
    check_len("y", y.len(), "x", x.len())?;
    if x.len() < 2 {
        return Err(MetricsError::TooShort {
            what: "x",
            got: x.len(),
            min: 2,
        });
    }
    check_finite("x", x)?;
    check_finite("y", y)?;
    if is_constant(x) || is_constant(y) {
        return Ok(0.0);
    }
    Ok(pearson(&rank_finite(x), &rank_finite(y)))
}

fn time_index(n: usize) -> Vec<f64> {
    (0..n).map(|t| t as f64).collect()
}

/// VOC (value-order correlation, GVL): Spearman of `phi_t` against `t`. 1 for progress that only rises,
/// 0 for a constant. Meaningful on successful episodes. Needs at least 2 steps.
pub fn voc(phi: &[f64]) -> Result<f64, MetricsError> {
    if phi.is_empty() {
        return Err(MetricsError::Empty("episode progress"));
    }
    spearman(phi, &time_index(phi.len()))
}

/// VROC: the same order test on the *reversed* episode. `phi_reversed[t]` is the model's progress for the
/// reversed playback (frame `T-1-t` of the original shown at step `t`); the reference order is the reversed time
/// index, so a model that judges frames by their content scores 1 here too, while a model that only learned
/// "later in the clip = more progress" scores -1. Equals `-spearman(phi_reversed, t)`.
pub fn vroc(phi_reversed: &[f64]) -> Result<f64, MetricsError> {
    if phi_reversed.is_empty() {
        return Err(MetricsError::Empty("reversed episode progress"));
    }
    let n = phi_reversed.len();
    let reversed_time: Vec<f64> = (0..n).map(|t| (n - 1 - t) as f64).collect();
    spearman(phi_reversed, &reversed_time)
}

/// VOC-F1 = `2 VOC VROC / (VOC + VROC)`, the harmonic mean; 0 unless both are > 0 (a harmonic mean of values
/// with mixed signs is not a score). Non-finite inputs give an error.
pub fn voc_f1(voc: f64, vroc: f64) -> Result<f64, MetricsError> {
    check_finite("voc, vroc", &[voc, vroc])?;
    if voc <= 0.0 || vroc <= 0.0 {
        return Ok(0.0);
    }
    Ok(2.0 * voc * vroc / (voc + vroc))
}

/// NR: the share of steps whose progress went down, `#{t : phi[t+1] < phi[t]} / (T - 1)`. Needs 2 values.
pub fn negative_rate(phi: &[f64]) -> Result<f64, MetricsError> {
    if phi.is_empty() {
        return Err(MetricsError::Empty("episode progress"));
    }
    if phi.len() < 2 {
        return Err(MetricsError::TooShort {
            what: "episode progress",
            got: phi.len(),
            min: 2,
        });
    }
    check_finite("episode progress", phi)?;
    let negative = phi.windows(2).filter(|w| w[1] < w[0]).count();
    Ok(negative as f64 / (phi.len() - 1) as f64)
}

/// Share of frames whose predicted stage equals the annotated stage.
pub fn stage_accuracy(predicted: &[usize], annotated: &[usize]) -> Result<f64, MetricsError> {
    if annotated.is_empty() {
        return Err(MetricsError::Empty("annotated stages"));
    }
    check_len(
        "predicted stages",
        predicted.len(),
        "annotated stages",
        annotated.len(),
    )?;
    let hits = predicted
        .iter()
        .zip(annotated)
        .filter(|(p, a)| p == a)
        .count();
    Ok(hits as f64 / annotated.len() as f64)
}

/// Mean absolute error between predicted and annotated progress.
pub fn progress_mae(predicted: &[f64], annotated: &[f64]) -> Result<f64, MetricsError> {
    if annotated.is_empty() {
        return Err(MetricsError::Empty("annotated progress"));
    }
    check_len(
        "predicted progress",
        predicted.len(),
        "annotated progress",
        annotated.len(),
    )?;
    check_finite("predicted progress", predicted)?;
    check_finite("annotated progress", annotated)?;
    let sum: f64 = predicted
        .iter()
        .zip(annotated)
        .map(|(p, a)| (p - a).abs())
        .sum();
    Ok(sum / annotated.len() as f64)
}

/// Area under the ROC curve of `scores` for the positive class (`labels[i] == true`), ties counted one half
/// (as `sklearn.metrics.roc_auc_score`). Needs both classes.
pub fn auroc(scores: &[f64], labels: &[bool]) -> Result<f64, MetricsError> {
    if scores.is_empty() {
        return Err(MetricsError::Empty("scores"));
    }
    check_len("labels", labels.len(), "scores", scores.len())?;
    check_finite("scores", scores)?;
    let successes = labels.iter().filter(|l| **l).count();
    let failures = labels.len() - successes;
    if successes == 0 || failures == 0 {
        return Err(MetricsError::OneClass {
            successes,
            failures,
        });
    }
    let ranks = rank_finite(scores);
    let rank_sum: f64 = ranks
        .iter()
        .zip(labels)
        .filter(|(_, l)| **l)
        .map(|(r, _)| r)
        .sum();
    let (p, n) = (successes as f64, failures as f64);
    Ok((rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

/// AUROC of each episode's *final* progress, successes against failures: does the model's last word separate
/// the episodes that worked from those that did not? An empty episode is an error.
pub fn final_progress_auroc(episodes: &[Vec<f64>], success: &[bool]) -> Result<f64, MetricsError> {
    if episodes.is_empty() {
        return Err(MetricsError::Empty("episodes"));
    }
    check_len("success flags", success.len(), "episodes", episodes.len())?;
    let finals = episodes
        .iter()
        .map(|e| e.last().copied().ok_or(MetricsError::Empty("an episode")))
        .collect::<Result<Vec<f64>, _>>()?;
    auroc(&finals, success)
}

/// Mean of a per-episode metric over episodes (e.g. VOC over the successful ones). Errors from any episode
/// are passed through; no episodes is an error.
pub fn mean_over_episodes(
    episodes: &[Vec<f64>],
    metric: impl Fn(&[f64]) -> Result<f64, MetricsError>,
) -> Result<f64, MetricsError> {
    if episodes.is_empty() {
        return Err(MetricsError::Empty("episodes"));
    }
    let mut sum = 0.0;
    for e in episodes {
        sum += metric(e)?;
    }
    Ok(sum / episodes.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_average_ties() {
        assert_eq!(
            rankdata(&[3.0, 1.0, 3.0, 2.0]).unwrap(),
            vec![3.5, 1.0, 3.5, 2.0]
        );
        assert_eq!(rankdata(&[0.0, -0.0]).unwrap(), vec![1.5, 1.5]);
    }

    #[test]
    fn spearman_basics() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(voc(&[0.0, 0.1, 0.5, 0.9]).unwrap(), 1.0));
        assert!(close(voc(&[0.9, 0.5, 0.1]).unwrap(), -1.0));
        assert_eq!(voc(&[0.3, 0.3, 0.3]).unwrap(), 0.0);
        assert!(close(vroc(&[0.9, 0.5, 0.1]).unwrap(), 1.0));
    }

    #[test]
    fn auroc_counts_ties_half() {
        assert_eq!(auroc(&[0.5, 0.5], &[true, false]).unwrap(), 0.5);
        assert_eq!(auroc(&[0.9, 0.1], &[true, false]).unwrap(), 1.0);
        assert!(matches!(
            auroc(&[0.9, 0.1], &[true, true]),
            Err(MetricsError::OneClass { .. })
        ));
    }
}
