//! Policy invariance of potential-based shaping, shown by value iteration rather than claimed.
//!
//! - Property tests on random finite episodic MDPs with absorbing terminal states and a time limit (states are
//!   time-indexed, so the optimal policy may depend on the time left): the shaped reward computed by
//!   [`ShapingConfig::reward`] (the formulas the `VecShaper` uses) leads value iteration to the same optimal
//!   actions as the task reward, for arbitrary (even time-varying) potentials and any potential offset; and the
//!   progress form's optimal policy is the same for every potential scale `S`.
//! - Constructed MDPs where the plain `phi' - phi` delta (the progress form, `S = 1`), and a kept terminal
//!   potential, each change the optimal policy: the failures the terminal rule and the potential form prevent.

use proptest::prelude::*;
use stagewise_core::shaping::{shape_episode, RewardMode, ShapingConfig};

/// A finite MDP. `p[s][a]` lists `(s', prob)`; entering a terminal state ends the episode (absorbing, value 0).
#[derive(Debug, Clone)]
struct Mdp {
    n_actions: usize,
    p: Vec<Vec<Vec<(usize, f64)>>>,
    r: Vec<Vec<Vec<f64>>>, // r[s][a][s'] task reward
    terminal: Vec<bool>,
}

/// Reward of one transition: (s, t, a, s', s' is terminal) -> r.
type RewardFn<'a> = dyn Fn(usize, usize, usize, usize, bool) -> f64 + 'a;

impl Mdp {
    fn n(&self) -> usize {
        self.terminal.len()
    }

    fn q(
        &self,
        s: usize,
        t: usize,
        a: usize,
        gamma: f64,
        reward: &RewardFn,
        v_next: &[f64],
    ) -> f64 {
        self.p[s][a]
            .iter()
            .map(|&(s2, pr)| {
                let term = self.terminal[s2];
                let cont = if term { 0.0 } else { v_next[s2] };
                pr * (reward(s, t, a, s2, term) + gamma * cont)
            })
            .sum()
    }

    /// Finite-horizon value iteration over time-indexed states. `v_limit` is the value at the time limit `h`
    /// (0 when the limit ends the task, the bootstrap value when it only truncates). Returns `q[t][s][a]`.
    fn finite_horizon_q(
        &self,
        h: usize,
        gamma: f64,
        reward: &RewardFn,
        v_limit: &[f64],
    ) -> Vec<Vec<Vec<f64>>> {
        let mut v = v_limit.to_vec();
        let mut q = vec![vec![vec![0.0; self.n_actions]; self.n()]; h];
        for t in (0..h).rev() {
            let mut v_t = vec![0.0; self.n()];
            for s in 0..self.n() {
                if self.terminal[s] {
                    continue;
                }
                for (a, q_a) in q[t][s].iter_mut().enumerate() {
                    *q_a = self.q(s, t, a, gamma, reward, &v);
                }
                v_t[s] = q[t][s].iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            }
            v = v_t;
        }
        q
    }

    /// Infinite-horizon discounted value iteration (gamma < 1) with a stationary reward `reward(s, ·, a, s')`.
    fn infinite_horizon_v(&self, gamma: f64, reward: &RewardFn) -> Vec<f64> {
        let mut v = vec![0.0; self.n()];
        for _ in 0..100_000 {
            let mut delta: f64 = 0.0;
            let mut v2 = vec![0.0; self.n()];
            for s in 0..self.n() {
                if self.terminal[s] {
                    continue;
                }
                v2[s] = (0..self.n_actions)
                    .map(|a| self.q(s, 0, a, gamma, reward, &v))
                    .fold(f64::NEG_INFINITY, f64::max);
                delta = delta.max((v2[s] - v[s]).abs());
            }
            v = v2;
            if delta < 1e-13 {
                break;
            }
        }
        v
    }

    fn greedy_infinite(&self, gamma: f64, reward: &RewardFn, s: usize) -> usize {
        let v = self.infinite_horizon_v(gamma, reward);
        argmax(
            &(0..self.n_actions)
                .map(|a| self.q(s, 0, a, gamma, reward, &v))
                .collect::<Vec<_>>(),
        )
    }
}

/// Greedy action (first on ties), via the crate's own argmax.
fn argmax(q: &[f64]) -> usize {
    stagewise_core::progress::argmax(q).unwrap_or(0)
}

/// Small deterministic generator for the MDP contents (proptest draws the seed and the shape).
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_mdp(seed: u64, n_live: usize, n_term: usize, n_actions: usize) -> Mdp {
    let mut rng = SplitMix(seed);
    let n = n_live + n_term;
    let terminal: Vec<bool> = (0..n).map(|s| s >= n_live).collect();
    let mut p = vec![vec![Vec::new(); n_actions]; n];
    let mut r = vec![vec![vec![0.0; n]; n_actions]; n];
    for s in 0..n_live {
        for a in 0..n_actions {
            if rng.unit() < 0.3 {
                p[s][a] = vec![(rng.below(n), 1.0)]; // deterministic
            } else {
                let w: Vec<f64> = (0..n)
                    .map(|_| if rng.unit() < 0.3 { 0.0 } else { rng.unit() })
                    .collect();
                let sum: f64 = w.iter().sum();
                p[s][a] = if sum > 0.0 {
                    w.iter()
                        .enumerate()
                        .filter(|(_, x)| **x > 0.0)
                        .map(|(i, x)| (i, x / sum))
                        .collect()
                } else {
                    vec![(rng.below(n), 1.0)]
                };
            }
            for s2 in 0..n {
                // sparse-ish task reward: mostly 0, success-like rewards into terminals
                r[s][a][s2] = if terminal[s2] || rng.unit() < 0.3 {
                    rng.range(-1.0, 1.0)
                } else {
                    0.0
                };
            }
        }
    }
    Mdp {
        n_actions,
        p,
        r,
        terminal,
    }
}

/// `a` and `b` rank the actions the same way: each one's greedy action is optimal for the other (up to float
/// noise), and the gap between any two actions is the same.
fn assert_same_policy(q: &[f64], q_shaped: &[f64], what: &str) {
    let (a, b) = (argmax(q), argmax(q_shaped));
    let max_q = q[a];
    let max_qs = q_shaped[b];
    assert!(
        q[b] >= max_q - 1e-9,
        "{what}: shaped greedy action {b} is not optimal for the task ({q:?} vs {q_shaped:?})"
    );
    assert!(
        q_shaped[a] >= max_qs - 1e-9,
        "{what}: task-optimal action {a} is not optimal when shaped"
    );
    for i in 0..q.len() {
        for j in 0..q.len() {
            let d = (q[i] - q[j]) - (q_shaped[i] - q_shaped[j]);
            assert!(d.abs() < 1e-9, "{what}: action gaps differ by {d}");
        }
    }
}

/// Shapes `mdp`'s reward with `config` under a time limit that ends the task (reaching it is termination, so the
/// potential there is 0 by the terminal rule), the potentials `phi[t][s]` taken when each state is visited, and
/// checks Ng et al.'s `Q_shaped = Q - c Phi` at every (t, s, a) of a live state, `Phi = potential(phi[t][s])`, and
/// that the optimal actions agree.
fn assert_shaped_q_is_q_minus_c_potential(
    mdp: &Mdp,
    config: &ShapingConfig,
    phi: &[Vec<f64>],
    horizon: usize,
    potential: impl Fn(f64) -> f64,
) {
    let task = |s: usize, _t: usize, a: usize, s2: usize, _term: bool| mdp.r[s][a][s2];
    let shaped = |s: usize, t: usize, a: usize, s2: usize, term: bool| {
        let ends = term || t + 1 == horizon;
        config
            .reward(phi[t][s], phi[t + 1][s2], mdp.r[s][a][s2], ends, false)
            .unwrap()
    };
    let zeros = vec![0.0; mdp.n()];
    let q = mdp.finite_horizon_q(horizon, config.gamma, &task, &zeros);
    let qs = mdp.finite_horizon_q(horizon, config.gamma, &shaped, &zeros);
    for t in 0..horizon {
        for s in (0..mdp.n()).filter(|&s| !mdp.terminal[s]) {
            assert_same_policy(&q[t][s], &qs[t][s], &format!("t {t} s {s}"));
            let bill = config.scale * potential(phi[t][s]);
            for (a, (shaped_q, task_q)) in qs[t][s].iter().zip(&q[t][s]).enumerate() {
                let d = shaped_q - (task_q - bill);
                assert!(
                    d.abs() < 1e-9,
                    "t {t} s {s} a {a}: Q_shaped - (Q - c Phi) = {d}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The time limit ends the task (it is part of the time-indexed state): reaching it is termination, so the
    /// potential there is 0 by the terminal rule. Potentials may differ per state *and* step (a model swapped
    /// mid-episode), taken when each state is visited. Any gamma in (0, 1].
    #[test]
    fn shaping_keeps_the_optimal_policy_under_a_terminating_time_limit(
        seed in any::<u64>(),
        n_live in 1usize..6,
        n_term in 1usize..3,
        n_actions in 2usize..4,
        horizon in 1usize..7,
        gamma in 0.3f64..=1.0,
        scale in -3.0f64..3.0,
        offset in prop_oneof![Just(0.0), -2.0f64..2.0],
    ) {
        let mdp = random_mdp(seed, n_live, n_term, n_actions);
        let mut rng = SplitMix(seed ^ 0xABCD);
        let phi: Vec<Vec<f64>> = (0..=horizon).map(|_| (0..mdp.n()).map(|_| rng.range(-2.0, 2.0)).collect()).collect();
        let config = ShapingConfig::new(gamma, scale).unwrap().with_mode(RewardMode::Potential { offset });
        // Ng et al.: Q_shaped = Q - c * Phi(s), Phi = phi - offset
        assert_shaped_q_is_q_minus_c_potential(&mdp, &config, &phi, horizon, |p| p - offset);
    }

    /// The value-like potential `gamma^(K (1 - phi))` is a potential like any other: the shaped Q is
    /// `Q - c Phi_V(s)` at every (t, s, a) under a terminating time limit, for any horizon K > 0 (progress in
    /// [0, 1], so the potential stays in (0, 1]).
    #[test]
    fn the_value_potential_keeps_the_optimal_policy(
        seed in any::<u64>(),
        n_live in 1usize..6,
        n_term in 1usize..3,
        n_actions in 2usize..4,
        horizon in 1usize..7,
        gamma in 0.3f64..=1.0,
        scale in -3.0f64..3.0,
        k in 0.5f64..200.0,
    ) {
        let mdp = random_mdp(seed, n_live, n_term, n_actions);
        let mut rng = SplitMix(seed ^ 0x5A5A);
        let phi: Vec<Vec<f64>> = (0..=horizon).map(|_| (0..mdp.n()).map(|_| rng.range(0.0, 1.0)).collect()).collect();
        let config = ShapingConfig::new(gamma, scale).unwrap().with_mode(RewardMode::ValuePotential { horizon: k });
        assert_shaped_q_is_q_minus_c_potential(&mdp, &config, &phi, horizon, |p| gamma.powf(k * (1.0 - p)));
    }

    /// The time limit only truncates (training convenience): the potential of the last state is kept and the
    /// learner bootstraps from it. With each learner bootstrapping from its own exact value (computed
    /// independently by infinite-horizon value iteration on its own reward), the time-limited problems agree.
    #[test]
    fn shaping_keeps_the_optimal_policy_under_a_truncating_time_limit(
        seed in any::<u64>(),
        n_live in 1usize..5,
        n_term in 1usize..3,
        n_actions in 2usize..4,
        horizon in 1usize..6,
        gamma in 0.3f64..0.95,
        scale in -3.0f64..3.0,
    ) {
        let mdp = random_mdp(seed, n_live, n_term, n_actions);
        let mut rng = SplitMix(seed ^ 0x1234);
        let phi: Vec<f64> = (0..mdp.n()).map(|_| rng.range(-2.0, 2.0)).collect();
        let config = ShapingConfig::new(gamma, scale).unwrap();
        let task = |s: usize, _t: usize, a: usize, s2: usize, _term: bool| mdp.r[s][a][s2];
        // truncation is not termination: only entering an absorbing terminal zeroes the next potential
        let shaped = |s: usize, _t: usize, a: usize, s2: usize, term: bool| {
            config.reward(phi[s], phi[s2], mdp.r[s][a][s2], term, false).unwrap()
        };
        let boot = mdp.infinite_horizon_v(gamma, &task);
        let boot_shaped = mdp.infinite_horizon_v(gamma, &shaped);
        let q = mdp.finite_horizon_q(horizon, gamma, &task, &boot);
        let qs = mdp.finite_horizon_q(horizon, gamma, &shaped, &boot_shaped);
        for t in 0..horizon {
            for s in 0..n_live {
                assert_same_policy(&q[t][s], &qs[t][s], &format!("t {t} s {s}"));
            }
        }
    }

    /// The progress form is not policy-invariant, but its potential scale `S` does not move its optimal policy:
    /// `Progress { S }` is `Progress { 1 }` plus `(S - 1)` times potential-based shaping with the terminal rule,
    /// so `Q_S = Q_1 - (S - 1) c phi(s)` at every (t, s, a). A success (a rewarded terminal step) read as
    /// progress 1 changes the level only, so the same holds with `success_progress_one`.
    #[test]
    fn the_progress_form_has_the_same_optimal_policy_for_every_potential_scale(
        seed in any::<u64>(),
        n_live in 1usize..6,
        n_term in 1usize..3,
        n_actions in 2usize..4,
        horizon in 1usize..7,
        gamma in 0.3f64..=1.0,
        scale in -3.0f64..3.0,
        potential_scale in -2.0f64..2.0,
        success_progress_one in any::<bool>(),
    ) {
        let mdp = random_mdp(seed, n_live, n_term, n_actions);
        let mut rng = SplitMix(seed ^ 0x5EED);
        let phi: Vec<f64> = (0..mdp.n()).map(|_| rng.range(0.0, 1.0)).collect();
        let form = |s: f64| ShapingConfig::new(gamma, scale).unwrap().with_mode(RewardMode::Progress {
            potential_scale: s,
            success_progress_one,
        });
        let (one, scaled) = (form(1.0), form(potential_scale));
        let reward = |config: ShapingConfig, s: usize, t: usize, a: usize, s2: usize, term: bool| {
            let ends = term || t + 1 == horizon;
            let r = mdp.r[s][a][s2];
            config.reward(phi[s], phi[s2], r, ends, term && r > 0.0).unwrap()
        };
        let r_one = |s: usize, t: usize, a: usize, s2: usize, term: bool| reward(one, s, t, a, s2, term);
        let r_scaled = |s: usize, t: usize, a: usize, s2: usize, term: bool| reward(scaled, s, t, a, s2, term);
        let zeros = vec![0.0; mdp.n()];
        let q = mdp.finite_horizon_q(horizon, gamma, &r_one, &zeros);
        let qs = mdp.finite_horizon_q(horizon, gamma, &r_scaled, &zeros);
        for t in 0..horizon {
            for s in 0..n_live {
                assert_same_policy(&q[t][s], &qs[t][s], &format!("t {t} s {s}"));
                for a in 0..n_actions {
                    let want = q[t][s][a] - (potential_scale - 1.0) * scale * phi[s];
                    prop_assert!((qs[t][s][a] - want).abs() < 1e-9);
                }
            }
        }
    }

    /// The shaper's own bookkeeping: over any recorded episode the discounted shaped return is the task return
    /// minus `c * Phi(s_0)`, plus `c * gamma^T * Phi(s_T)` only when the episode was truncated.
    #[test]
    fn shaped_return_telescopes(
        phis in prop::collection::vec(-2.0f64..2.0, 2..40),
        rewards_seed in any::<u64>(),
        gamma in 0.3f64..=1.0,
        scale in -3.0f64..3.0,
        terminated in any::<bool>(),
    ) {
        let mut rng = SplitMix(rewards_seed);
        let rewards: Vec<f64> = (1..phis.len()).map(|_| rng.range(-1.0, 1.0)).collect();
        let steps = shape_episode(ShapingConfig::new(gamma, scale).unwrap(), &phis, &rewards, terminated).unwrap();
        prop_assert_eq!(steps.len(), rewards.len());
        let (mut shaped, mut task, mut g) = (0.0, 0.0, 1.0);
        for (s, r) in steps.iter().zip(&rewards) {
            shaped += g * s.reward;
            task += g * r;
            g *= gamma;
        }
        let tail = if terminated { 0.0 } else { scale * g * phis[phis.len() - 1] };
        prop_assert!((shaped - (task - scale * phis[0] + tail)).abs() < 1e-9);
    }
}

/// Deterministic MDP helper: `edges[s][a] = (s', task reward)`.
fn deterministic(edges: &[Vec<(usize, f64)>], terminal: &[bool]) -> Mdp {
    let n = terminal.len();
    let n_actions = edges.iter().map(Vec::len).max().unwrap_or(1);
    let mut p = vec![vec![Vec::new(); n_actions]; n];
    let mut r = vec![vec![vec![0.0; n]; n_actions]; n];
    for (s, acts) in edges.iter().enumerate() {
        for a in 0..n_actions {
            // states with fewer actions repeat their last one
            let (s2, rew) = acts[a.min(acts.len() - 1)];
            p[s][a] = vec![(s2, 1.0)];
            r[s][a][s2] = rew;
        }
    }
    Mdp {
        n_actions,
        p,
        r,
        terminal: terminal.to_vec(),
    }
}

/// Robo-Dopamine's "semantic trap": near the goal, finishing needs a dip in progress (e.g. letting go before
/// re-grasping). The plain delta (the progress form with `S = 1`) pays for the drop now and the recovery only later, so under discounting the
/// agent prefers to hover at high progress forever. Potential-based shaping still finishes.
#[test]
fn naive_delta_rewards_stalling_where_potential_shaping_does_not() {
    const NEAR: usize = 0;
    const GOAL: usize = 4;
    const STALL: usize = 0;
    const GO: usize = 1;
    // 0: near goal (phi 0.9): stall (stay) or go into the dip; 1-3: dip (phi 0.3); 4: goal, terminal
    let mdp = deterministic(
        &[
            vec![(NEAR, 0.0), (1, 0.0)],
            vec![(2, 0.0)],
            vec![(3, 0.0)],
            vec![(GOAL, 1.0)],
            vec![(GOAL, 0.0)],
        ],
        &[false, false, false, false, true],
    );
    let phi = [0.9, 0.3, 0.3, 0.3, 1.0];
    let (gamma, scale) = (0.9, 10.0);
    let config = ShapingConfig::new(gamma, scale).unwrap();
    let task = |s: usize, _t: usize, a: usize, s2: usize, _term: bool| mdp.r[s][a][s2];
    let potential = |s: usize, _t: usize, a: usize, s2: usize, term: bool| {
        config
            .reward(phi[s], phi[s2], mdp.r[s][a][s2], term, false)
            .unwrap()
    };
    let delta = config.with_mode(RewardMode::PLAIN_PROGRESS);
    let naive = |s: usize, _t: usize, a: usize, s2: usize, term: bool| {
        let r = delta
            .reward(phi[s], phi[s2], mdp.r[s][a][s2], term, false)
            .unwrap();
        // the plain delta it is: r_task + c (phi' - phi), the terminal potential kept
        assert!((r - (mdp.r[s][a][s2] + scale * (phi[s2] - phi[s]))).abs() < 1e-12);
        r
    };
    assert_eq!(mdp.greedy_infinite(gamma, &task, NEAR), GO);
    assert_eq!(mdp.greedy_infinite(gamma, &potential, NEAR), GO);
    assert_eq!(
        mdp.greedy_infinite(gamma, &naive, NEAR),
        STALL,
        "the naive delta should prefer stalling here"
    );
}

/// Without the terminal rule (keeping `Phi(s_N)` when the episode terminates) the final `gamma * c * Phi(s_N)`
/// is a bonus for *which* terminal state is reached: a failure that the model scores high beats a real success.
#[test]
fn a_kept_terminal_potential_changes_the_policy() {
    const START: usize = 0;
    const SUCCEED: usize = 0;
    const FAIL: usize = 1;
    // 0: start; 1: success (task reward 1), the model reads it as 0.2; 2: failure the model reads as 0.9
    let mdp = deterministic(
        &[vec![(1, 1.0), (2, 0.0)], vec![(1, 0.0)], vec![(2, 0.0)]],
        &[false, true, true],
    );
    let phi = [0.1, 0.2, 0.9];
    let (gamma, scale) = (0.9, 2.0);
    let config = ShapingConfig::new(gamma, scale).unwrap();
    let task = |s: usize, _t: usize, a: usize, s2: usize, _term: bool| mdp.r[s][a][s2];
    let rule = |s: usize, _t: usize, a: usize, s2: usize, term: bool| {
        config
            .reward(phi[s], phi[s2], mdp.r[s][a][s2], term, false)
            .unwrap()
    };
    let kept = |s: usize, _t: usize, a: usize, s2: usize, _term: bool| {
        config
            .reward(phi[s], phi[s2], mdp.r[s][a][s2], false, false)
            .unwrap()
    };
    assert_eq!(mdp.greedy_infinite(gamma, &task, START), SUCCEED);
    assert_eq!(mdp.greedy_infinite(gamma, &rule, START), SUCCEED);
    assert_eq!(
        mdp.greedy_infinite(gamma, &kept, START),
        FAIL,
        "a kept terminal potential should flip the choice"
    );
}

/// The same failure through time: with a kept terminal potential, *when* the episode ends changes the final
/// `gamma^N c Phi(s_N)` term. Here a low-potential terminal pays more the later it is reached, so the agent
/// takes the slow road; with the rule, the task's preference for the quick road stands.
#[test]
fn a_kept_terminal_potential_changes_when_to_finish() {
    const START: usize = 0;
    const QUICK: usize = 0;
    const SLOW: usize = 1;
    // 0: start: quick -> goal (3) now, or slow via 1, 2 -> goal. Goal is terminal with task reward 1.
    let mdp = deterministic(
        &[
            vec![(3, 1.0), (1, 0.0)],
            vec![(2, 0.0)],
            vec![(3, 1.0)],
            vec![(3, 0.0)],
        ],
        &[false, false, false, true],
    );
    // a potential that is negative at the goal (any real-valued potential is allowed)
    let phi = [0.0, 0.0, 0.0, -5.0];
    let (gamma, scale) = (0.9, 1.0);
    let config = ShapingConfig::new(gamma, scale).unwrap();
    let task = |s: usize, _t: usize, a: usize, s2: usize, _term: bool| mdp.r[s][a][s2];
    let rule = |s: usize, _t: usize, a: usize, s2: usize, term: bool| {
        config
            .reward(phi[s], phi[s2], mdp.r[s][a][s2], term, false)
            .unwrap()
    };
    let kept = |s: usize, _t: usize, a: usize, s2: usize, _term: bool| {
        config
            .reward(phi[s], phi[s2], mdp.r[s][a][s2], false, false)
            .unwrap()
    };
    assert_eq!(mdp.greedy_infinite(gamma, &task, START), QUICK);
    assert_eq!(mdp.greedy_infinite(gamma, &rule, START), QUICK);
    assert_eq!(mdp.greedy_infinite(gamma, &kept, START), SLOW);
}
