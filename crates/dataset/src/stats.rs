//! Per-feature statistics as LeRobot stores them (`compute_stats.py`): min, max, mean, std (population) and
//! count per dimension; images per channel in [0, 1] with shape (3, 1, 1). Episodes are merged with Chan's
//! parallel variance formula, which is what LeRobot's `aggregate_stats` does with weighted means/variances.

use serde_json::{json, Value};

/// Running statistics of a `dim`-dimensional feature.
#[derive(Debug, Clone)]
pub struct FeatureStats {
    pub count: u64,
    pub mean: Vec<f64>,
    m2: Vec<f64>,
    pub min: Vec<f64>,
    pub max: Vec<f64>,
}

impl FeatureStats {
    pub fn new(dim: usize) -> Self {
        Self {
            count: 0,
            mean: vec![0.0; dim],
            m2: vec![0.0; dim],
            min: vec![f64::INFINITY; dim],
            max: vec![f64::NEG_INFINITY; dim],
        }
    }

    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// Adds one sample (`x.len() == dim`; Welford's update). Non-finite values are skipped per dimension
    /// only in min/max, so a NaN shows up in mean/std where the data has one, as numpy would.
    pub fn push(&mut self, x: &[f64]) {
        self.count += 1;
        let n = self.count as f64;
        for (d, &v) in x.iter().enumerate().take(self.dim()) {
            let delta = v - self.mean[d];
            self.mean[d] += delta / n;
            self.m2[d] += delta * (v - self.mean[d]);
            if v < self.min[d] {
                self.min[d] = v;
            }
            if v > self.max[d] {
                self.max[d] = v;
            }
        }
    }

    /// Merges another set of statistics over the same feature (Chan et al.).
    pub fn merge(&mut self, other: &FeatureStats) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = other.clone();
            return;
        }
        let (na, nb) = (self.count as f64, other.count as f64);
        let n = na + nb;
        for d in 0..self.dim().min(other.dim()) {
            let delta = other.mean[d] - self.mean[d];
            self.mean[d] += delta * nb / n;
            self.m2[d] += other.m2[d] + delta * delta * na * nb / n;
            self.min[d] = self.min[d].min(other.min[d]);
            self.max[d] = self.max[d].max(other.max[d]);
        }
        self.count += other.count;
    }

    /// Population standard deviation (numpy's default, as LeRobot uses).
    pub fn std(&self) -> Vec<f64> {
        let n = self.count.max(1) as f64;
        self.m2.iter().map(|m| (m / n).max(0.0).sqrt()).collect()
    }

    fn finite(v: &[f64]) -> Vec<f64> {
        v.iter()
            .map(|x| if x.is_finite() { *x } else { 0.0 })
            .collect()
    }

    /// `{min, max, mean, std, count}` with flat lists (vector and scalar features: shape `(dim,)`).
    pub fn to_json(&self) -> Value {
        json!({
            "min": Self::finite(&self.min),
            "max": Self::finite(&self.max),
            "mean": self.mean,
            "std": self.std(),
            "count": [self.count],
        })
    }

    /// Image statistics with LeRobot's per-channel shape `(3, 1, 1)`.
    pub fn to_json_image(&self) -> Value {
        let nest = |v: Vec<f64>| Value::Array(v.into_iter().map(|x| json!([[x]])).collect());
        json!({
            "min": nest(Self::finite(&self.min)),
            "max": nest(Self::finite(&self.max)),
            "mean": nest(self.mean.clone()),
            "std": nest(self.std()),
            "count": [self.count],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welford_and_merge_match_direct() {
        let xs = [1.0, 2.0, 4.0, 8.0, -3.0, 0.5];
        let mut all = FeatureStats::new(1);
        let (mut a, mut b) = (FeatureStats::new(1), FeatureStats::new(1));
        for (i, x) in xs.iter().enumerate() {
            all.push(&[*x]);
            if i < 2 {
                a.push(&[*x])
            } else {
                b.push(&[*x])
            }
        }
        a.merge(&b);
        let mean = xs.iter().sum::<f64>() / 6.0;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 6.0;
        for s in [&all, &a] {
            assert!((s.mean[0] - mean).abs() < 1e-12);
            assert!((s.std()[0] - var.sqrt()).abs() < 1e-12);
            assert_eq!((s.min[0], s.max[0], s.count), (-3.0, 8.0, 6));
        }
    }
}
