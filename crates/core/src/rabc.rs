//! Reward-aligned behaviour cloning (RA-BC) sample weights, computed the way LeRobot computes them
//! (`src/lerobot/policies/sarm/rabc.py`, class `RABCWeights`, in huggingface/lerobot):
//!
//! - `r_i = phi[i + chunk] - phi[i]`; where `i + chunk` runs past the episode, the episode's **last frame** is
//!   used instead (so the last frame's own delta is 0). Deltas never cross episodes.
//! - Global statistics over every frame of the dataset: `mu = max(mean r, 0)`, `sigma = max(std r, eps)` with
//!   numpy's default population std (`ddof = 0`).
//! - `soft = clip((r - (mu - 2 sigma)) / (4 sigma + eps), 0, 1)`; `w = 1` if `r > kappa`, `soft` if
//!   `0 <= r <= kappa`, `0` if `r < 0`. Defaults kappa = 0.01, eps = 1e-6, chunk = 50 (LeRobot's default; set it
//!   to the policy's action chunk size).
//! - LeRobot casts the deltas to `float32` before weighting (`np.array(deltas, dtype=np.float32)`), and numpy
//!   then does the arithmetic and the comparisons with kappa in float32 (the Python-float constants are cast
//!   to float32). [`RabcPrecision::LeRobotF32`] (the default) reproduces that bit for bit;
//!   [`RabcPrecision::F64`] does the same formula in f64.
//!
//! Differences, on purpose: LeRobot gives a frame with missing (NaN) progress the fallback weight 1 and leaves it
//! out of the statistics; here non-finite progress is an error (a poisoned progress file should be noticed, not
//! averaged over). LeRobot reports mean weight and the counts at 0 and 1 per training batch; [`RabcSummary`]
//! reports them over the whole dataset (mean in f64). [`normalize_batch`] is LeRobot's per-batch normalisation
//! `w * B / (sum w + eps)`.

use serde::{Deserialize, Serialize};

/// What was wrong with RA-BC input or configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RabcError {
    #[error("chunk size is 0: it must be at least 1 frame")]
    BadChunk,
    #[error("kappa is {0}: it must be finite")]
    BadKappa(f64),
    #[error("epsilon is {0}: it must be finite and > 0")]
    BadEpsilon(f64),
    #[error("the dataset has no episodes")]
    NoEpisodes,
    #[error("episode {episode} has no frames")]
    EmptyEpisode { episode: usize },
    #[error("episode {episode}, frame {frame}: progress is {value}, it must be finite")]
    NotFinite {
        episode: usize,
        frame: usize,
        value: f64,
    },
}

/// Arithmetic used for the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RabcPrecision {
    /// float32 deltas, thresholds and soft weights, exactly as LeRobot's numpy code.
    #[default]
    LeRobotF32,
    /// The same formula in f64.
    F64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RabcConfig {
    /// Frames ahead for the progress delta (the policy's action chunk size).
    pub chunk_size: usize,
    pub kappa: f64,
    pub epsilon: f64,
    #[serde(default)]
    pub precision: RabcPrecision,
}

impl Default for RabcConfig {
    /// chunk 50, kappa 0.01, eps 1e-6, LeRobot's float32 arithmetic (LeRobot's defaults).
    fn default() -> Self {
        Self {
            chunk_size: 50,
            kappa: 0.01,
            epsilon: 1e-6,
            precision: RabcPrecision::LeRobotF32,
        }
    }
}

impl RabcConfig {
    pub fn validate(&self) -> Result<(), RabcError> {
        if self.chunk_size == 0 {
            return Err(RabcError::BadChunk);
        }
        if !self.kappa.is_finite() {
            return Err(RabcError::BadKappa(self.kappa));
        }
        if !(self.epsilon.is_finite() && self.epsilon > 0.0) {
            return Err(RabcError::BadEpsilon(self.epsilon));
        }
        Ok(())
    }
}

/// Dataset-wide summary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RabcSummary {
    pub frames: usize,
    /// Mean weight over all frames (before any batch normalisation).
    pub mean_weight: f64,
    /// Frames with weight exactly 0.
    pub num_zero_weight: usize,
    /// Frames with weight exactly 1.
    pub num_full_weight: usize,
    /// `max(mean r, 0)`.
    pub delta_mean: f64,
    /// `max(std r, eps)`, population std.
    pub delta_std: f64,
}

/// Per-frame deltas and weights, one inner vector per episode, plus the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct RabcWeights {
    pub deltas: Vec<Vec<f64>>,
    pub weights: Vec<Vec<f64>>,
    pub summary: RabcSummary,
}

/// `phi[min(i + chunk, T - 1)] - phi[i]` for every frame `i` of one episode. Checks the episode.
pub fn progress_deltas(episode: &[f64], chunk_size: usize) -> Result<Vec<f64>, RabcError> {
    if chunk_size == 0 {
        return Err(RabcError::BadChunk);
    }
    check_episode(0, episode)?;
    Ok(deltas_unchecked(episode, chunk_size))
}

fn check_episode(index: usize, episode: &[f64]) -> Result<(), RabcError> {
    if episode.is_empty() {
        return Err(RabcError::EmptyEpisode { episode: index });
    }
    if let Some(frame) = episode.iter().position(|v| !v.is_finite()) {
        return Err(RabcError::NotFinite {
            episode: index,
            frame,
            value: episode[frame],
        });
    }
    Ok(())
}

fn deltas_unchecked(episode: &[f64], chunk_size: usize) -> Vec<f64> {
    let last = episode.len() - 1;
    (0..episode.len())
        .map(|i| episode[i.saturating_add(chunk_size).min(last)] - episode[i])
        .collect()
}

/// The weight of one delta given the (already clamped) global `delta_mean` and `delta_std`.
pub fn rabc_weight(delta: f64, delta_mean: f64, delta_std: f64, config: &RabcConfig) -> f64 {
    let lower = delta_mean - 2.0 * delta_std;
    let denom = 4.0 * delta_std + config.epsilon;
    match config.precision {
        RabcPrecision::F64 => {
            if delta > config.kappa {
                1.0
            } else if delta >= 0.0 {
                ((delta - lower) / denom).clamp(0.0, 1.0)
            } else {
                0.0
            }
        }
        RabcPrecision::LeRobotF32 => {
            let d = delta as f32;
            let kappa = config.kappa as f32;
            let w = if d > kappa {
                1.0
            } else if d >= 0.0 {
                ((d - lower as f32) / denom as f32).clamp(0.0, 1.0)
            } else {
                0.0
            };
            f64::from(w)
        }
    }
}

impl RabcWeights {
    /// Weights for a dataset given per-episode progress (`episodes[e][frame]`, frames in order).
    pub fn compute(episodes: &[Vec<f64>], config: &RabcConfig) -> Result<Self, RabcError> {
        config.validate()?;
        if episodes.is_empty() {
            return Err(RabcError::NoEpisodes);
        }
        for (index, e) in episodes.iter().enumerate() {
            check_episode(index, e)?;
        }
        let deltas: Vec<Vec<f64>> = episodes
            .iter()
            .map(|e| deltas_unchecked(e, config.chunk_size))
            .collect();
        let frames: usize = deltas.iter().map(Vec::len).sum();
        let n = frames as f64;
        let mean = deltas.iter().flatten().sum::<f64>() / n;
        let var = deltas
            .iter()
            .flatten()
            .map(|d| (d - mean) * (d - mean))
            .sum::<f64>()
            / n;
        let delta_mean = mean.max(0.0);
        let delta_std = var.sqrt().max(config.epsilon);
        let weights: Vec<Vec<f64>> = deltas
            .iter()
            .map(|ep| {
                ep.iter()
                    .map(|&d| rabc_weight(d, delta_mean, delta_std, config))
                    .collect()
            })
            .collect();
        let all = || weights.iter().flatten();
        let summary = RabcSummary {
            frames,
            mean_weight: all().sum::<f64>() / n,
            num_zero_weight: all().filter(|w| **w == 0.0).count(),
            num_full_weight: all().filter(|w| **w == 1.0).count(),
            delta_mean,
            delta_std,
        };
        Ok(Self {
            deltas,
            weights,
            summary,
        })
    }
}

/// LeRobot's per-batch normalisation: `w * B / (sum w + eps)`, so a batch's weights sum to about `B`.
pub fn normalize_batch(weights: &[f64], epsilon: f64) -> Vec<f64> {
    let sum: f64 = weights.iter().sum();
    let b = weights.len() as f64;
    weights.iter().map(|w| w * b / (sum + epsilon)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_use_the_last_frame_near_the_end() {
        let d = progress_deltas(&[0.0, 0.1, 0.3, 0.6], 2).unwrap();
        assert_eq!(d, vec![0.3, 0.5, 0.6 - 0.3, 0.0]);
    }

    #[test]
    fn weights_follow_the_three_cases() {
        let c = RabcConfig {
            precision: RabcPrecision::F64,
            ..RabcConfig::default()
        };
        assert_eq!(rabc_weight(0.5, 0.1, 0.1, &c), 1.0);
        assert_eq!(rabc_weight(-0.001, 0.1, 0.1, &c), 0.0);
        let soft = rabc_weight(0.005, 0.1, 0.1, &c);
        assert!((soft - (0.005 - (0.1 - 0.2)) / (0.4 + 1e-6)).abs() < 1e-15);
    }

    #[test]
    fn bad_input_is_refused() {
        let c = RabcConfig::default();
        assert_eq!(RabcWeights::compute(&[], &c), Err(RabcError::NoEpisodes));
        assert_eq!(
            RabcWeights::compute(&[vec![0.1], vec![]], &c),
            Err(RabcError::EmptyEpisode { episode: 1 })
        );
        assert!(matches!(
            RabcWeights::compute(&[vec![0.1, f64::NAN]], &c),
            Err(RabcError::NotFinite {
                episode: 0,
                frame: 1,
                ..
            })
        ));
        let zero = RabcConfig { chunk_size: 0, ..c };
        assert_eq!(
            RabcWeights::compute(&[vec![0.1]], &zero),
            Err(RabcError::BadChunk)
        );
    }
}
