//! Host-side limits, enforced on every command before it is encoded: joint position, velocity and acceleration,
//! end-effector (tool-tip) speed and acceleration as vector norms, and a workspace box. Velocity and acceleration
//! integrate over the time since the previous command, bounded by `max_dt` (a pause never allows a jump to full
//! speed), and after `stopped_after` without a command the previous velocity counts as zero (the firmware's
//! command timeout has stopped the robot). The firmware enforces its own limits again.

use stagewise_protocol::{joints, Setpoint, Telemetry};

/// What to do with a command that breaks a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitMode {
    /// Send the nearest command inside the limits and report what was clamped.
    Clamp,
    /// Refuse the command (nothing is sent).
    Reject,
}

/// An axis-aligned box for the end effector, metres in the base frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkspaceBox {
    pub min: [f32; 3],
    pub max: [f32; 3],
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub pos_min: Vec<f32>,
    pub pos_max: Vec<f32>,
    /// Joint speed, units per second.
    pub vel_max: Vec<f32>,
    /// Joint acceleration, units per second squared.
    pub acc_max: Vec<f32>,
    /// End-effector (tool-tip) speed, m/s: the norm of the velocity vector (for Cartesian joints also the norm
    /// of the first three joints' velocity).
    pub ee_vel_max: f32,
    /// End-effector acceleration, m/s^2: the norm of the change of the velocity vector per second.
    pub ee_acc_max: f32,
    /// Longest interval (s) the velocity and acceleration limits integrate over: a command after a pause may
    /// change the velocity by at most `acc * max_dt`, and move a joint target by at most `vel * max_dt`.
    pub max_dt: f32,
    /// After this long (s) without a command the robot has stopped (the firmware's command timeout), so the next
    /// command accelerates from rest.
    pub stopped_after: f32,
    pub workspace: Option<WorkspaceBox>,
    /// The first three joints are the end-effector x, y, z (a Cartesian robot): the workspace box then applies
    /// to joint targets as well.
    pub cartesian_joints: bool,
    pub mode: LimitMode,
}

impl Limits {
    /// The emulated 3-axis Cartesian robot (the simulator's workspace, 0.3 m/s, 3 m/s^2), clamping.
    pub fn cartesian_default() -> Self {
        let lo = [-0.52, -0.52, 0.022];
        let hi = [0.52, 0.52, 0.35];
        Self {
            pos_min: lo.to_vec(),
            pos_max: hi.to_vec(),
            vel_max: vec![0.3; 3],
            acc_max: vec![3.0; 3],
            ee_vel_max: 0.3,
            ee_acc_max: 3.0,
            max_dt: 0.05,
            stopped_after: 0.1,
            workspace: Some(WorkspaceBox { min: lo, max: hi }),
            cartesian_joints: true,
            mode: LimitMode::Clamp,
        }
    }
}

/// Which limit changed a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Position,
    Velocity,
    Acceleration,
    Workspace,
    Gripper,
}

/// A clamp that was applied (or, in `Reject` mode, the reason for refusal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitHit {
    pub kind: LimitKind,
    /// Joint or axis index.
    pub axis: usize,
    pub requested: f32,
    pub allowed: f32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitError {
    #[error("setpoint value {index} is {value}: setpoints must be finite")]
    NotFinite { index: usize, value: f32 },
    #[error("joint setpoint has {got} values, the limits cover {expected} joints")]
    JointCount { expected: usize, got: usize },
    #[error("{:?} limit on axis {}: requested {}, allowed {}", .0.kind, .0.axis, .0.requested, .0.allowed)]
    Violation(LimitHit),
}

/// What the limiter remembers between commands.
#[derive(Debug, Clone, Default)]
pub struct LimitState {
    last_joint_target: Option<Vec<f32>>,
    last_joint_vel: Vec<f32>,
    last_ee_vel: [f32; 3],
}

impl LimitState {
    /// Forgets history (after a stop or re-arm: motion starts from rest).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

impl Limits {
    /// The interval [`Limits::apply`] integrates over for a command `dt` seconds after the previous one, and
    /// whether it starts from rest (see there).
    pub fn interval(&self, dt: Option<f32>) -> (f32, bool) {
        match dt {
            None => (1e-3, true),
            Some(d) if !d.is_finite() || d > self.stopped_after => (self.max_dt.max(1e-3), true),
            Some(d) => (d.clamp(1e-3, self.max_dt.max(1e-3)), false),
        }
    }

    /// Applies the limits to `setpoint` sent `dt` seconds after the previous command (`None`: the first one since
    /// the history was reset, from rest over 1 ms). The interval counts at least 1 ms and at most `max_dt`; after
    /// more than `stopped_after` the previous velocity is taken as zero. `telemetry` gives the current position
    /// (joint reference before any target was sent, end-effector position for the workspace). Returns the
    /// command to send and the clamps applied.
    pub fn apply(
        &self,
        state_out: &mut LimitState,
        setpoint: &Setpoint,
        gripper: f32,
        telemetry: Option<&Telemetry>,
        dt: Option<f32>,
    ) -> Result<(Setpoint, f32, Vec<LimitHit>), LimitError> {
        let mut scratch = state_out.clone();
        let state = &mut scratch;
        let (dt, from_rest) = self.interval(dt);
        if from_rest {
            state.last_joint_vel.iter_mut().for_each(|v| *v = 0.0);
            state.last_ee_vel = [0.0; 3];
        }
        let mut hits = Vec::new();
        if !gripper.is_finite() {
            return Err(LimitError::NotFinite {
                index: usize::MAX,
                value: gripper,
            });
        }
        let g = gripper.clamp(0.0, 1.0);
        if g != gripper {
            hits.push(LimitHit {
                kind: LimitKind::Gripper,
                axis: 0,
                requested: gripper,
                allowed: g,
            });
        }
        let out = match setpoint {
            Setpoint::Joints(q) => self.limit_joints(state, q, telemetry, dt, &mut hits)?,
            Setpoint::EeVelocity(v) => {
                self.limit_ee_velocity(state, v, telemetry, dt, &mut hits)?
            }
        };
        if self.mode == LimitMode::Reject {
            if let Some(h) = hits.first() {
                // Nothing is sent; the history stays as it was before this command.
                return Err(LimitError::Violation(*h));
            }
        }
        *state_out = scratch;
        Ok((out, g, hits))
    }

    /// [`Self::apply`] for joint targets: position, then velocity per joint (and for Cartesian joints the tool
    /// tip's speed as a vector), then acceleration per joint (and as a vector), from the last target.
    fn limit_joints(
        &self,
        state: &mut LimitState,
        q: &[f32],
        telemetry: Option<&Telemetry>,
        dt: f32,
        hits: &mut Vec<LimitHit>,
    ) -> Result<Setpoint, LimitError> {
        if let Some((i, v)) = q.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(LimitError::NotFinite {
                index: i,
                value: *v,
            });
        }
        let n = self.pos_min.len();
        if q.len() != n
            || self.pos_max.len() != n
            || self.vel_max.len() != n
            || self.acc_max.len() != n
        {
            return Err(LimitError::JointCount {
                expected: n,
                got: q.len(),
            });
        }
        let reference: Vec<f32> = match (&state.last_joint_target, telemetry) {
            (Some(t), _) => t.clone(),
            (None, Some(t)) if t.positions.len() == n => t.positions.to_vec(),
            _ => q.to_vec(),
        };
        if state.last_joint_vel.len() != n {
            state.last_joint_vel = vec![0.0; n];
        }
        // Position, then velocity per joint (and for Cartesian joints the tool tip's speed as a vector),
        // then acceleration per joint (and as a vector).
        let mut vels = Vec::with_capacity(n);
        for i in 0..n {
            let mut lo = self.pos_min[i];
            let mut hi = self.pos_max[i];
            if let (true, Some(ws)) = (self.cartesian_joints && i < 3, self.workspace) {
                lo = lo.max(ws.min[i]);
                hi = hi.min(ws.max[i]);
            }
            let p = clamp_hit(hits, LimitKind::Position, i, q[i], lo, hi);
            let v_req = (p - reference[i]) / dt;
            vels.push(clamp_hit(
                hits,
                LimitKind::Velocity,
                i,
                v_req,
                -self.vel_max[i],
                self.vel_max[i],
            ));
        }
        let cart = self.cartesian_joints && n >= 3;
        if cart {
            norm_hit(
                hits,
                LimitKind::Velocity,
                &mut vels[..3],
                None,
                self.ee_vel_max,
            );
        }
        for (i, v) in vels.iter_mut().enumerate() {
            let prev = state.last_joint_vel[i];
            let dv = self.acc_max[i] * dt;
            *v = clamp_hit(hits, LimitKind::Acceleration, i, *v, prev - dv, prev + dv);
        }
        if cart {
            let prev = [
                state.last_joint_vel[0],
                state.last_joint_vel[1],
                state.last_joint_vel[2],
            ];
            norm_hit(
                hits,
                LimitKind::Acceleration,
                &mut vels[..3],
                Some(&prev),
                self.ee_acc_max * dt,
            );
        }
        if cart {
            // The speed limit is the hard one: per-joint acceleration clamps can turn the vector.
            norm_hit(
                hits,
                LimitKind::Velocity,
                &mut vels[..3],
                None,
                self.ee_vel_max,
            );
        }
        let target: Vec<f32> = (0..n).map(|i| reference[i] + vels[i] * dt).collect();
        state.last_joint_vel = vels;
        state.last_joint_target = Some(target.clone());
        // n == pos_min.len() and the Setpoint came in with n <= MAX_JOINTS values.
        Ok(Setpoint::Joints(joints(&target).ok_or(
            LimitError::JointCount {
                expected: n,
                got: target.len(),
            },
        )?))
    }

    /// [`Self::apply`] for an end-effector velocity: the tool tip's speed and acceleration as vectors (direction
    /// kept), then the workspace per axis.
    fn limit_ee_velocity(
        &self,
        state: &mut LimitState,
        v: &[f32; 3],
        telemetry: Option<&Telemetry>,
        dt: f32,
        hits: &mut Vec<LimitHit>,
    ) -> Result<Setpoint, LimitError> {
        if let Some((i, x)) = v.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            return Err(LimitError::NotFinite {
                index: i,
                value: *x,
            });
        }
        // The tool tip's speed and acceleration as vectors (direction kept), then the workspace per axis.
        let mut out = *v;
        norm_hit(hits, LimitKind::Velocity, &mut out, None, self.ee_vel_max);
        let prev = state.last_ee_vel;
        norm_hit(
            hits,
            LimitKind::Acceleration,
            &mut out,
            Some(&prev),
            self.ee_acc_max * dt,
        );
        if let (Some(ws), Some(t)) = (self.workspace, telemetry) {
            for (i, x) in out.iter_mut().enumerate() {
                // Never command a velocity that leaves the box within this period.
                let p = t.ee[i];
                let lo = ((ws.min[i] - p) / dt).min(0.0);
                let hi = ((ws.max[i] - p) / dt).max(0.0);
                *x = clamp_hit(hits, LimitKind::Workspace, i, *x, lo, hi);
            }
        }
        state.last_ee_vel = out;
        Ok(Setpoint::EeVelocity(out))
    }
}

fn clamp_hit(
    hits: &mut Vec<LimitHit>,
    kind: LimitKind,
    axis: usize,
    v: f32,
    lo: f32,
    hi: f32,
) -> f32 {
    let c = v.clamp(lo.min(hi), hi.max(lo));
    if c != v {
        hits.push(LimitHit {
            kind,
            axis,
            requested: v,
            allowed: c,
        });
    }
    c
}

/// Limits the norm of `v - reference` (`reference` = 0 when `None`) to `max`, scaling that difference (its
/// direction kept); records a hit for every component that changed.
fn norm_hit(
    hits: &mut Vec<LimitHit>,
    kind: LimitKind,
    v: &mut [f32],
    reference: Option<&[f32]>,
    max: f32,
) {
    let r = |i: usize| reference.map_or(0.0, |r| r[i]);
    let n = v
        .iter()
        .enumerate()
        .map(|(i, x)| (x - r(i)) * (x - r(i)))
        .sum::<f32>()
        .sqrt();
    if n <= max || n == 0.0 {
        return;
    }
    let k = max.max(0.0) / n;
    for (i, x) in v.iter_mut().enumerate() {
        let allowed = r(i) + (*x - r(i)) * k;
        if allowed != *x {
            hits.push(LimitHit {
                kind,
                axis: i,
                requested: *x,
                allowed,
            });
        }
        *x = allowed;
    }
}
