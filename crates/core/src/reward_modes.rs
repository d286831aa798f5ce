//! Reward modes other than potential-based shaping. Each is an explicit choice with a caveat: **none of them is
//! policy-invariant.** The default, and the only mode whose optimal policy provably equals the task's, is
//! [`RewardMode::Potential`](crate::shaping::RewardMode::Potential) (see `docs/shaping.md`).
//!
//! - [`naive_delta_reward`]: `r_task + c * (phi' - phi)`. With a discount `gamma < 1` it is potential-based
//!   shaping with the *wrong* discount (1 instead of the learner's) and it keeps the terminal potential, so the
//!   return no longer telescopes: it pays for reaching high progress early and for postponing the drops, which
//!   rewards stalling near the goal instead of finishing (Robo-Dopamine's "semantic trap"). A test in
//!   `tests/invariance.rs` builds an MDP where it changes the optimal policy.
//! - [`windowed_rank_reward`]: the Rank-Then-Act signal, Spearman's rho of the last `W` progress values against
//!   their time indices, in [-1, 1]. It rewards monotone progress regardless of its size, is blind to how far the
//!   task is from done and pays the same for a tiny steady creep as for a decisive move. Not potential-based.

use crate::metrics::{spearman, MetricsError};

/// The naive progress delta `r_task + c * (phi_next - phi)`. Not policy-invariant (see the module docs).
/// Values must be finite; the caller checks (the shaper does).
pub fn naive_delta_reward(scale: f64, phi: f64, phi_next: f64, task_reward: f64) -> f64 {
    task_reward + scale * (phi_next - phi)
}

/// Rank-Then-Act windowed rank reward: Spearman's rho of the last `window` values of `history` (oldest first)
/// against their time indices. Fewer than two values, or a constant window, give 0. `window` must be >= 2.
pub fn windowed_rank_reward(history: &[f64], window: usize) -> Result<f64, MetricsError> {
    if window < 2 {
        return Err(MetricsError::TooShort {
            what: "rank window",
            got: window,
            min: 2,
        });
    }
    let start = history.len().saturating_sub(window);
    let tail = &history[start..];
    if tail.len() < 2 {
        if let Some((index, &value)) = tail.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(MetricsError::NotFinite {
                what: "progress history",
                index: start + index,
                value,
            });
        }
        return Ok(0.0);
    }
    let t: Vec<f64> = (0..tail.len()).map(|i| i as f64).collect();
    spearman(tail, &t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_reward_uses_only_the_window() {
        // the early drop falls outside a window of 3
        let h = [0.9, 0.1, 0.2, 0.3, 0.4];
        assert!((windowed_rank_reward(&h, 3).unwrap() - 1.0).abs() < 1e-12);
        assert!(windowed_rank_reward(&h, 5).unwrap() < 0.9);
        assert_eq!(windowed_rank_reward(&[0.5], 3).unwrap(), 0.0);
        assert!(windowed_rank_reward(&h, 1).is_err());
        assert!(windowed_rank_reward(&[0.1, f64::NAN], 3).is_err());
    }

    #[test]
    fn naive_delta_is_the_plain_difference() {
        assert!((naive_delta_reward(2.0, 0.25, 0.5, 1.0) - 1.5).abs() < 1e-15);
    }
}
