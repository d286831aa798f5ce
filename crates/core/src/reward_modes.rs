//! The formulas of every reward form, one function each; [`crate::shaping`] picks one per
//! [`RewardMode`](crate::shaping::RewardMode) and `docs/shaping.md` says where each comes from. `c` is the shaping
//! scale, `gamma` the learner's discount, `phi` / `phi'` the cached potentials of the state and the next state.
//!
//! - [`potential_reward`] (policy-invariant): the potential `phi - X` (`X` the offset), terminal potential 0:
//!   `r_task + c (gamma phi' - phi) + c X (1 - gamma)` on a non-terminal step, `r_task - c phi + c X` on a
//!   terminated one. `X = 0` is Ng et al.'s form with the terminal rule; `X` moves the shaping's `-c phi(s_0)`
//!   "bill" from the end of an episode to its start without moving the optimal policy.
//! - [`progress_reward`] (NOT policy-invariant): `r_task + S c (gamma phi' - phi) + c (1 - gamma) phi'` on a
//!   non-terminal step, `r_task - S c phi + c phi*` on a terminated one (`phi*` is `phi'`, or 1 for a success when
//!   the mode says so). With `S = 1` it is the plain delta `r_task + c (phi' - phi)` with the terminal potential
//!   kept, which rewards stalling near the goal (Robo-Dopamine's "semantic trap"; `tests/invariance.rs` builds an
//!   MDP where it changes the optimal policy). The level `c (1 - gamma) phi'` (`c phi*` at the end) is what moves
//!   the optimal policy; the part `S` scales is potential-based, so every `S` has the same optimal policy.
//! - [`value_potential_reward`] (policy-invariant): the potential `gamma^(K (1 - phi))`, terminal potential 0:
//!   the value of a success reached `K (1 - phi)` steps from now, i.e. progress read as time to go at the pace
//!   of `K` steps per whole task (`K` from the demonstrations' lengths). Ng et al. (1999) show that the
//!   potential nearest the optimal value `V*` shapes best: the shaped critic then learns `Q* - V*` (the
//!   advantage, near 0) instead of `Q* - c phi`, so the per-step reward is itself an advantage-like signal
//!   rather than a part the critic must learn to cancel. `c = 1` matches a task reward of 1.
//! - [`windowed_rank_reward`] (NOT policy-invariant): the Rank-Then-Act signal, Spearman's rho of the last `W`
//!   progress values against their time indices, in [-1, 1]. It rewards monotone progress regardless of its
//!   size, is blind to how far the task is from done and pays the same for a tiny steady creep as for a
//!   decisive move.
//!
//! Values must be finite; the caller checks (the shaper does).

use crate::metrics::{spearman, MetricsError};

/// The potential-based reward with potential `phi - offset` and terminal potential 0 (see the module docs).
pub fn potential_reward(
    gamma: f64,
    scale: f64,
    offset: f64,
    phi: f64,
    phi_next: f64,
    task_reward: f64,
    terminated: bool,
) -> f64 {
    // (gamma (phi' - X) - (phi - X)) when the episode goes on, (0 - (phi - X)) when it ended.
    if terminated {
        task_reward + scale * (offset - phi)
    } else {
        task_reward + scale * (gamma * phi_next - phi) + scale * offset * (1.0 - gamma)
    }
}

/// The value-like potential `gamma^(horizon (1 - phi))` of progress `phi` (see the module docs).
pub fn value_potential(gamma: f64, horizon: f64, phi: f64) -> f64 {
    gamma.powf(horizon * (1.0 - phi))
}

/// The potential-based reward with the value-like potential and terminal potential 0 (see the module docs).
pub fn value_potential_reward(
    gamma: f64,
    scale: f64,
    horizon: f64,
    phi: f64,
    phi_next: f64,
    task_reward: f64,
    terminated: bool,
) -> f64 {
    let next = if terminated {
        0.0
    } else {
        value_potential(gamma, horizon, phi_next)
    };
    task_reward + scale * (gamma * next - value_potential(gamma, horizon, phi))
}

/// The progress form: potential part scaled by `potential_scale` plus the level (see the module docs). When
/// `terminated`, `phi_end` is `phi*` (the next state's progress, or 1 for a success read as done); otherwise it
/// is the next state's progress.
pub fn progress_reward(
    gamma: f64,
    scale: f64,
    potential_scale: f64,
    phi: f64,
    phi_end: f64,
    task_reward: f64,
    terminated: bool,
) -> f64 {
    if terminated {
        task_reward - potential_scale * scale * phi + scale * phi_end
    } else {
        task_reward
            + potential_scale * scale * (gamma * phi_end - phi)
            + scale * (1.0 - gamma) * phi_end
    }
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

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

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
    fn progress_with_s_one_is_the_plain_difference_with_the_terminal_potential_kept() {
        for terminated in [false, true] {
            let r = progress_reward(0.9, 2.0, 1.0, 0.25, 0.5, 1.0, terminated);
            assert!(close(r, 1.0 + 2.0 * (0.5 - 0.25)), "{terminated}: {r}");
        }
    }

    #[test]
    fn progress_scales_only_the_potential_part() {
        // gamma 0.9, c 2, S 0.1, phi 0.25 -> 0.5, r_task 0
        let r = progress_reward(0.9, 2.0, 0.1, 0.25, 0.5, 0.0, false);
        assert!(
            close(r, 0.1 * 2.0 * (0.9 * 0.5 - 0.25) + 2.0 * 0.1 * 0.5),
            "{r}"
        );
        let end = progress_reward(0.9, 2.0, 0.1, 0.25, 1.0, 1.0, true);
        assert!(close(end, 1.0 - 0.1 * 2.0 * 0.25 + 2.0 * 1.0), "{end}");
    }

    #[test]
    fn the_value_potential_is_the_discounted_success_k_steps_per_task_away() {
        let (g, k) = (0.99, 50.0);
        assert!(close(value_potential(g, k, 1.0), 1.0));
        assert!(close(value_potential(g, k, 0.0), 0.99f64.powi(50)));
        assert!(close(value_potential(g, k, 0.5), 0.99f64.powi(25)));
        // moving at the pace of K steps per task earns exactly nothing, standing still pays (gamma - 1) Phi
        let pace = value_potential_reward(g, 1.0, k, 0.5, 0.5 + 1.0 / k, 0.0, false);
        assert!(pace.abs() < 1e-12, "{pace}");
        let still = value_potential_reward(g, 1.0, k, 0.5, 0.5, 0.0, false);
        assert!(
            close(still, (g - 1.0) * value_potential(g, k, 0.5)),
            "{still}"
        );
        // the success step: task reward 1, terminal potential 0
        let end = value_potential_reward(g, 1.0, k, 0.98, 1.0, 1.0, true);
        assert!(close(end, 1.0 - value_potential(g, k, 0.98)), "{end}");
    }

    #[test]
    fn potential_with_an_offset_adds_its_level() {
        let (g, c, x) = (0.9, 2.0, 0.5);
        let r = potential_reward(g, c, x, 0.25, 0.5, 0.0, false);
        // potentials phi - X: c (g (0.5 - X) - (0.25 - X))
        assert!(close(r, c * (g * (0.5 - x) - (0.25 - x))), "{r}");
        let end = potential_reward(g, c, x, 0.25, 0.5, 1.0, true);
        assert!(close(end, 1.0 + c * (0.0 - (0.25 - x))), "{end}");
        assert!(close(
            potential_reward(g, c, 0.0, 0.25, 0.5, 0.0, false),
            c * (g * 0.5 - 0.25)
        ));
    }
}
