//! Stage-aware progress (SARM-style): stage logits + within-stage `tau` -> task progress `phi`.
//!
//! Stage proportions `a_k` (normalised to sum 1) give breakpoints `P_0 = 0`, `P_k = a_0 + .. + a_{k-1}`.
//! Hard progress: `phi = P_k + a_k * tau` with `k = argmax l`. Soft progress:
//! `phi = sum_k p_k (P_k + a_k tau_k)` with `p = softmax(l)`. Both are clamped to [0, 1].

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProgressError {
    #[error("stage proportions are empty")]
    NoStages,
    #[error("stage proportion {index} is {value}: proportions must be finite and >= 0")]
    BadProportion { index: usize, value: f64 },
    #[error("stage proportions sum to {0}: at least one must be > 0")]
    ZeroSum(f64),
    #[error("{what} has {got} values, expected {expected} (one per stage)")]
    Length {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{what} contains a non-finite value ({value})")]
    NotFinite { what: &'static str, value: f64 },
    #[error("episode {episode}: {reason}")]
    BadAnnotation { episode: usize, reason: String },
}

/// Normalised stage proportions and their breakpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct StageProportions {
    proportions: Vec<f64>,
    starts: Vec<f64>,
}

impl StageProportions {
    /// Normalises `raw` to sum 1. Refuses empty, negative, non-finite or all-zero proportions.
    pub fn new(raw: &[f64]) -> Result<Self, ProgressError> {
        if raw.is_empty() {
            return Err(ProgressError::NoStages);
        }
        for (index, &value) in raw.iter().enumerate() {
            if !value.is_finite() || value < 0.0 {
                return Err(ProgressError::BadProportion { index, value });
            }
        }
        let sum: f64 = raw.iter().sum();
        if sum <= 0.0 {
            return Err(ProgressError::ZeroSum(sum));
        }
        let proportions: Vec<f64> = raw.iter().map(|a| a / sum).collect();
        let mut starts = Vec::with_capacity(proportions.len());
        let mut acc = 0.0;
        for a in &proportions {
            starts.push(acc);
            acc += a;
        }
        Ok(Self {
            proportions,
            starts,
        })
    }

    /// Equal proportions for `k` stages.
    pub fn uniform(k: usize) -> Result<Self, ProgressError> {
        Self::new(&vec![1.0; k])
    }

    /// Proportions from annotated stage durations: `a_k = (1/M) sum_i L_{i,k} / T_i`, where `durations[i][k]`
    /// is the length of stage `k` in episode `i` and `T_i` the episode's total length.
    pub fn from_durations(durations: &[Vec<f64>]) -> Result<Self, ProgressError> {
        let k = durations
            .first()
            .map(Vec::len)
            .ok_or(ProgressError::NoStages)?;
        let mut acc = vec![0.0; k];
        for (episode, d) in durations.iter().enumerate() {
            if d.len() != k {
                return Err(ProgressError::BadAnnotation {
                    episode,
                    reason: format!("has {} stage durations, the first episode has {k}", d.len()),
                });
            }
            if let Some(bad) = d.iter().find(|x| !x.is_finite() || **x < 0.0) {
                return Err(ProgressError::BadAnnotation {
                    episode,
                    reason: format!("stage duration {bad} is not a finite value >= 0"),
                });
            }
            let total: f64 = d.iter().sum();
            if total <= 0.0 {
                return Err(ProgressError::BadAnnotation {
                    episode,
                    reason: "total length is 0".into(),
                });
            }
            for (a, l) in acc.iter_mut().zip(d) {
                *a += l / total;
            }
        }
        let m = durations.len() as f64;
        Self::new(&acc.iter().map(|a| a / m).collect::<Vec<_>>())
    }

    pub fn len(&self) -> usize {
        self.proportions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.proportions.is_empty()
    }

    /// `a_k`, summing to 1.
    pub fn proportions(&self) -> &[f64] {
        &self.proportions
    }

    /// `P_k`, the progress at which stage `k` starts.
    pub fn starts(&self) -> &[f64] {
        &self.starts
    }

    /// Hard progress `P_k + a_k * tau`, clamped to [0, 1]. `tau` is clamped to [0, 1] first.
    pub fn hard_phi(&self, stage: usize, tau: f64) -> Result<f64, ProgressError> {
        if stage >= self.len() {
            return Err(ProgressError::Length {
                what: "stage index",
                expected: self.len(),
                got: stage + 1,
            });
        }
        if !tau.is_finite() {
            return Err(ProgressError::NotFinite {
                what: "tau",
                value: tau,
            });
        }
        Ok((self.starts[stage] + self.proportions[stage] * tau.clamp(0.0, 1.0)).clamp(0.0, 1.0))
    }

    /// Soft progress `sum_k p_k (P_k + a_k tau_k)` with `p = softmax(logits)`, clamped to [0, 1].
    /// `taus` holds one value per stage, or a single value shared by all stages.
    pub fn soft_phi(&self, logits: &[f64], taus: &[f64]) -> Result<f64, ProgressError> {
        let p = softmax(logits)?;
        if p.len() != self.len() {
            return Err(ProgressError::Length {
                what: "stage logits",
                expected: self.len(),
                got: p.len(),
            });
        }
        if taus.len() != 1 && taus.len() != self.len() {
            return Err(ProgressError::Length {
                what: "tau",
                expected: self.len(),
                got: taus.len(),
            });
        }
        let mut phi = 0.0;
        for k in 0..self.len() {
            let tau = if taus.len() == 1 { taus[0] } else { taus[k] };
            if !tau.is_finite() {
                return Err(ProgressError::NotFinite {
                    what: "tau",
                    value: tau,
                });
            }
            phi += p[k] * (self.starts[k] + self.proportions[k] * tau.clamp(0.0, 1.0));
        }
        Ok(phi.clamp(0.0, 1.0))
    }
}

/// Numerically stable softmax. Refuses empty or non-finite logits.
pub fn softmax(logits: &[f64]) -> Result<Vec<f64>, ProgressError> {
    if logits.is_empty() {
        return Err(ProgressError::NoStages);
    }
    if let Some(&bad) = logits.iter().find(|x| !x.is_finite()) {
        return Err(ProgressError::NotFinite {
            what: "stage logits",
            value: bad,
        });
    }
    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    Ok(exps.into_iter().map(|e| e / sum).collect())
}

/// Index of the largest value (the first one on ties). `None` for an empty slice.
pub fn argmax(values: &[f64]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &v) in values.iter().enumerate() {
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

/// Training target for within-stage progress: `clip((t - start) / (end - start), 0, 1)`.
/// A stage of zero length counts as done once reached.
pub fn tau_target(t: f64, start: f64, end: f64) -> f64 {
    if end <= start {
        return if t >= start { 1.0 } else { 0.0 };
    }
    ((t - start) / (end - start)).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions_are_normalised_with_breakpoints() {
        let s = StageProportions::new(&[1.0, 3.0]).unwrap();
        assert_eq!(s.proportions(), &[0.25, 0.75]);
        assert_eq!(s.starts(), &[0.0, 0.25]);
    }

    #[test]
    fn hard_phi_follows_the_formula() {
        let s = StageProportions::new(&[0.2, 0.3, 0.5]).unwrap();
        assert!((s.hard_phi(0, 0.5).unwrap() - 0.1).abs() < 1e-12);
        assert!((s.hard_phi(1, 0.5).unwrap() - 0.35).abs() < 1e-12);
        assert!((s.hard_phi(2, 1.0).unwrap() - 1.0).abs() < 1e-12);
        // tau out of range is clamped, a stage out of range refused
        assert!((s.hard_phi(1, 7.0).unwrap() - 0.5).abs() < 1e-12);
        assert!(s.hard_phi(3, 0.0).is_err());
        assert!(s.hard_phi(0, f64::NAN).is_err());
    }

    #[test]
    fn soft_phi_matches_hand_computation() {
        let s = StageProportions::new(&[0.5, 0.5]).unwrap();
        // logits equal -> p = [0.5, 0.5]; taus [1, 0] -> 0.5*(0+0.5) + 0.5*(0.5+0) = 0.5
        assert!((s.soft_phi(&[0.0, 0.0], &[1.0, 0.0]).unwrap() - 0.5).abs() < 1e-12);
        // a confident stage reduces soft to hard
        let soft = s.soft_phi(&[-50.0, 50.0], &[0.3]).unwrap();
        assert!((soft - s.hard_phi(1, 0.3).unwrap()).abs() < 1e-12);
        assert!(s.soft_phi(&[0.0], &[0.3]).is_err());
        assert!(s.soft_phi(&[0.0, f64::INFINITY], &[0.3]).is_err());
    }

    #[test]
    fn proportions_from_durations_average_per_episode_shares() {
        // episode 0: 10 of 20 then 10 of 20 (0.5, 0.5); episode 1: 1 of 4 then 3 of 4 (0.25, 0.75)
        let s = StageProportions::from_durations(&[vec![10.0, 10.0], vec![1.0, 3.0]]).unwrap();
        assert!((s.proportions()[0] - 0.375).abs() < 1e-12);
        assert!((s.proportions()[1] - 0.625).abs() < 1e-12);
        assert!(StageProportions::from_durations(&[vec![1.0, 1.0], vec![1.0]]).is_err());
        assert!(StageProportions::from_durations(&[vec![0.0, 0.0]]).is_err());
        assert!(StageProportions::from_durations(&[]).is_err());
    }

    #[test]
    fn bad_proportions_are_refused() {
        assert_eq!(StageProportions::new(&[]), Err(ProgressError::NoStages));
        assert!(matches!(
            StageProportions::new(&[1.0, -1.0]),
            Err(ProgressError::BadProportion { index: 1, .. })
        ));
        assert!(matches!(
            StageProportions::new(&[0.0, 0.0]),
            Err(ProgressError::ZeroSum(_))
        ));
        assert!(StageProportions::new(&[f64::NAN]).is_err());
    }

    #[test]
    fn tau_target_clips() {
        assert_eq!(tau_target(5.0, 0.0, 10.0), 0.5);
        assert_eq!(tau_target(-1.0, 0.0, 10.0), 0.0);
        assert_eq!(tau_target(11.0, 0.0, 10.0), 1.0);
        assert_eq!(tau_target(3.0, 3.0, 3.0), 1.0);
    }

    #[test]
    fn softmax_and_argmax() {
        let p = softmax(&[1000.0, 1000.0]).unwrap();
        assert!((p[0] - 0.5).abs() < 1e-12);
        assert_eq!(argmax(&[0.1, 0.7, 0.7]), Some(1));
        assert_eq!(argmax(&[]), None);
    }
}
