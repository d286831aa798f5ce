//! Pairwise "hop" progress fusion (Robo-Dopamine-style multi-perspective progress).
//!
//! A hop model scores a pair of states, `H(s_p, s_q)` in [-1, 1] (how far `s_q` moved toward the goal from `s_p`,
//! relative to what was left, or back toward the start when negative). Three estimates of `phi_t`:
//!
//! - incremental: `phi_t = phi_{t-g} + (1 - phi_{t-g}) H` if `H >= 0`, else `phi_{t-g} + phi_{t-g} H`, with
//!   `H = H(s_{t-g}, s_t)` and `phi = 0` before the first state. Stays in [0, 1] by construction; errors
//!   accumulate. The gap `g` (default 1) is the distance between the sampled states of Robo-Dopamine's chunked
//!   trajectories: per-step hops at a high control rate are tiny next to the model's noise, and integrating
//!   every one of them drifts; with `g` steps the fusion keeps `g` interleaved chains, each `1/g` as long.
//! - forward-anchored: `H(s_init, s_t)` (progress from the start; clamped to [0, 1]).
//! - backward-anchored: `1 + H(s_goal, s_t)` (distance to the goal; clamped to [0, 1]).
//!
//! The fused progress is their mean. The optional consistency weight
//! `w = exp(-alpha * (|phi_B - phi_F| / (mean(phi_F, phi_B) + eps))^2)` (alpha = 20) says how much the two
//! anchored views agree. Folding it into the potential (`Phi = consistency * phi`, cached at the visit) keeps
//! shaping policy-invariant; multiplying the shaping term by it does not (see `docs/shaping.md`).
//!
//! Caveat: the fused `phi` is a valid potential (any finite function of the visited state works), but the
//! incremental estimate depends on the path, not only on the state, so "same state, same potential" holds only
//! approximately. The shaper caches whatever `phi` it was given, so the invariance argument over the realised
//! trajectory still holds.

/// What was wrong with hop scores or the fusion configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HopError {
    #[error("hop score {what} is {value}: it must be finite and in [-1, 1]")]
    BadScore { what: &'static str, value: f64 },
    #[error("consistency alpha is {0}: it must be finite and >= 0")]
    BadAlpha(f64),
    #[error("consistency eps is {0}: it must be finite and > 0")]
    BadEps(f64),
    #[error("the incremental estimate's gap is 0 steps: it must be >= 1")]
    BadGap,
}

/// Fusion settings. `consistency_alpha: None` turns the consistency weight off (it is then 1).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HopConfig {
    pub consistency_alpha: Option<f64>,
    pub eps: f64,
}

impl Default for HopConfig {
    fn default() -> Self {
        Self {
            consistency_alpha: Some(20.0),
            eps: 1e-6,
        }
    }
}

/// One step's fused reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HopEstimate {
    pub incremental: f64,
    pub forward: f64,
    pub backward: f64,
    /// Mean of the three, in [0, 1]: use it as the potential.
    pub phi: f64,
    /// Consistency weight in (0, 1]; 1 when disabled.
    pub consistency: f64,
}

/// Per-episode fusion state (the incremental estimate carries over between steps): the last `gap` incremental
/// estimates, one per interleaved chain.
#[derive(Debug, Clone, PartialEq)]
pub struct HopFusion {
    config: HopConfig,
    chains: Vec<f64>,
    /// The chain the next step extends (the one whose last state is `gap` steps back).
    next: usize,
    latest: f64,
}

fn check_score(what: &'static str, value: f64) -> Result<f64, HopError> {
    if !value.is_finite() || !(-1.0..=1.0).contains(&value) {
        return Err(HopError::BadScore { what, value });
    }
    Ok(value)
}

impl HopFusion {
    /// Fusion whose incremental estimate takes consecutive states (`H(s_{t-1}, s_t)`).
    pub fn new(config: HopConfig) -> Result<Self, HopError> {
        Self::with_gap(config, 1)
    }

    /// Fusion whose incremental estimate takes states `gap` steps apart: each [`HopFusion::step`] then expects
    /// `h_prev = H(s_{t-gap}, s_t)` (the episode's first state while `t < gap`).
    pub fn with_gap(config: HopConfig, gap: usize) -> Result<Self, HopError> {
        if gap == 0 {
            return Err(HopError::BadGap);
        }
        if let Some(a) = config.consistency_alpha {
            if !a.is_finite() || a < 0.0 {
                return Err(HopError::BadAlpha(a));
            }
        }
        if !config.eps.is_finite() || config.eps <= 0.0 {
            return Err(HopError::BadEps(config.eps));
        }
        Ok(Self {
            config,
            chains: vec![0.0; gap],
            next: 0,
            latest: 0.0,
        })
    }

    /// Starts a new episode: every incremental chain goes back to `phi = 0`.
    pub fn reset(&mut self) {
        self.chains.fill(0.0);
        self.next = 0;
        self.latest = 0.0;
    }

    /// The latest incremental estimate.
    pub fn incremental(&self) -> f64 {
        self.latest
    }

    /// Fuses one step. `h_prev = H(s_{t-1}, s_t)`, `h_init = H(s_init, s_t)`, `h_goal = H(s_goal, s_t)`.
    /// A bad score leaves the state untouched.
    pub fn step(&mut self, h_prev: f64, h_init: f64, h_goal: f64) -> Result<HopEstimate, HopError> {
        let h_prev = check_score("H(s_prev, s_t)", h_prev)?;
        let h_init = check_score("H(s_init, s_t)", h_init)?;
        let h_goal = check_score("H(s_goal, s_t)", h_goal)?;
        let p = self.chains[self.next];
        let incremental = if h_prev >= 0.0 {
            p + (1.0 - p) * h_prev
        } else {
            p + p * h_prev
        }
        .clamp(0.0, 1.0);
        let forward = h_init.clamp(0.0, 1.0);
        let backward = (1.0 + h_goal).clamp(0.0, 1.0);
        let phi = ((incremental + forward + backward) / 3.0).clamp(0.0, 1.0);
        let consistency = match self.config.consistency_alpha {
            None => 1.0,
            Some(alpha) => {
                let rel =
                    (backward - forward).abs() / ((forward + backward) / 2.0 + self.config.eps);
                (-alpha * rel * rel).exp()
            }
        };
        self.chains[self.next] = incremental;
        self.next = (self.next + 1) % self.chains.len();
        self.latest = incremental;
        Ok(HopEstimate {
            incremental,
            forward,
            backward,
            phi,
            consistency,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_follows_the_hop_rule() {
        let mut f = HopFusion::new(HopConfig::default()).unwrap();
        let e = f.step(0.5, 0.5, -0.5).unwrap();
        assert_eq!(e.incremental, 0.5);
        assert_eq!(e.forward, 0.5);
        assert_eq!(e.backward, 0.5);
        assert_eq!(e.phi, 0.5);
        assert!((e.consistency - 1.0).abs() < 1e-12);
        // 0.5 + (1 - 0.5) * 0.5 = 0.75, then 0.75 + 0.75 * (-0.2) = 0.6
        assert_eq!(f.step(0.5, 0.7, -0.3).unwrap().incremental, 0.75);
        assert!((f.step(-0.2, 0.6, -0.4).unwrap().incremental - 0.6).abs() < 1e-15);
        f.reset();
        assert_eq!(f.incremental(), 0.0);
    }

    #[test]
    fn a_gap_keeps_interleaved_chains() {
        let config = HopConfig {
            consistency_alpha: None,
            eps: 1e-6,
        };
        assert_eq!(HopFusion::with_gap(config, 0), Err(HopError::BadGap));
        let mut f = HopFusion::with_gap(config, 2).unwrap();
        // t = 0, 1: both chains start at 0 (H from the first state)
        assert_eq!(f.step(0.0, 0.0, -1.0).unwrap().incremental, 0.0);
        assert_eq!(f.step(0.2, 0.2, -0.8).unwrap().incremental, 0.2);
        // t = 2 extends t = 0's chain (0), t = 3 extends t = 1's (0.2)
        assert_eq!(f.step(0.5, 0.5, -0.5).unwrap().incremental, 0.5);
        assert!((f.step(0.5, 0.6, -0.4).unwrap().incremental - 0.6).abs() < 1e-15);
        assert!((f.incremental() - 0.6).abs() < 1e-15);
        // gap 1 is the consecutive rule
        let (mut a, mut b) = (
            HopFusion::new(config).unwrap(),
            HopFusion::with_gap(config, 1).unwrap(),
        );
        for h in [0.1, -0.3, 0.4, 0.0, 0.9] {
            assert_eq!(a.step(h, 0.3, -0.2), b.step(h, 0.3, -0.2));
        }
        f.reset();
        assert_eq!(f.step(0.5, 0.5, -0.5).unwrap().incremental, 0.5);
    }

    #[test]
    fn disagreement_lowers_the_weight() {
        let mut f = HopFusion::new(HopConfig::default()).unwrap();
        let e = f.step(0.1, 0.2, -0.4).unwrap(); // forward 0.2, backward 0.6
        let rel: f64 = 0.4 / (0.4 + 1e-6);
        assert!((e.consistency - (-20.0 * rel * rel).exp()).abs() < 1e-12);
        let mut off = HopFusion::new(HopConfig {
            consistency_alpha: None,
            eps: 1e-6,
        })
        .unwrap();
        assert_eq!(off.step(0.1, 0.2, -0.4).unwrap().consistency, 1.0);
    }

    #[test]
    fn bad_scores_and_config_are_refused() {
        let mut f = HopFusion::new(HopConfig::default()).unwrap();
        assert!(f.step(f64::NAN, 0.0, 0.0).is_err());
        assert!(f.step(0.0, 1.5, 0.0).is_err());
        assert!(f.step(0.0, 0.0, f64::NEG_INFINITY).is_err());
        assert_eq!(f.incremental(), 0.0);
        assert!(HopFusion::new(HopConfig {
            consistency_alpha: Some(-1.0),
            eps: 1e-6
        })
        .is_err());
        assert!(HopFusion::new(HopConfig {
            consistency_alpha: None,
            eps: 0.0
        })
        .is_err());
    }
}
