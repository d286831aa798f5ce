//! The tabletop scene: a fixed table, a kinematic Cartesian gripper (palm + two fingers), free blocks and a
//! target patch, stepped by rapier3d. Blocks are held by an attach joint that engages only when both fingers
//! touch the same block while the gripper is closing.

use crate::config::{SimConfig, Task};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rapier3d::prelude::*;

pub use rapier3d::glamx::{Quat, Vec3};

/// Half extent of the square table top (metres); its top surface is at z = 0.
pub const TABLE_HALF: f32 = 0.45;
/// Half thickness of the table slab.
pub const TABLE_THICK: f32 = 0.02;
/// Workspace bounds of the tool centre point (TCP, the point midway between the fingertips' pads).
/// (Wider than the table in the plane, so a degraded expert can drop a block off the edge.)
pub const WS_LO: [f32; 3] = [-0.52, -0.52, 0.022];
pub const WS_HI: [f32; 3] = [0.52, 0.52, 0.35];
/// Finger half extents (x, y = thickness, z).
pub const FINGER_HALF: [f32; 3] = [0.010, 0.005, 0.020];
/// Palm half extents.
pub const PALM_HALF: [f32; 3] = [0.016, 0.058, 0.008];
/// Largest inner gap between the fingers.
pub const MAX_WIDTH: f32 = 0.08;
/// Top TCP speed for an action of magnitude 1 (m/s).
pub const MAX_SPEED: f32 = 0.3;
/// Finger closing/opening speed (m/s, of the gap).
pub const GRIP_SPEED: f32 = 0.25;
/// TCP height above a block's centre when it is grasped.
pub const GRASP_DZ: f32 = 0.005;
/// Half extent of the target patch.
pub const TARGET_HALF: f32 = 0.035;

/// Packs an RGB colour into a collider's user data (read by the cameras).
pub(crate) fn pack_rgb(c: [u8; 3]) -> u128 {
    ((c[0] as u128) << 16) | ((c[1] as u128) << 8) | c[2] as u128
}

pub(crate) fn unpack_rgb(u: u128) -> [f32; 3] {
    [
        ((u >> 16) & 0xff) as f32 / 255.0,
        ((u >> 8) & 0xff) as f32 / 255.0,
        (u & 0xff) as f32 / 255.0,
    ]
}

const OBJECT_PALETTE: [[u8; 3]; 6] = [
    [205, 52, 42],
    [40, 92, 205],
    [225, 190, 40],
    [140, 60, 170],
    [235, 120, 30],
    [30, 170, 180],
];

/// Block colours of no training set (pink, near-white, navy, brown): [`crate::Randomization::held_out_colors`].
pub const HELD_OUT_PALETTE: [[u8; 3]; 4] = [
    [235, 100, 175],
    [228, 228, 222],
    [38, 44, 96],
    [118, 70, 36],
];
/// Table colours of no training set (blue-grey, light grey; the training table is brown, [150, 120, 90]).
pub const HELD_OUT_TABLE_COLORS: [[u8; 3]; 2] = [[96, 116, 138], [182, 180, 172]];

/// One free block.
#[derive(Debug, Clone)]
pub struct Block {
    pub body: RigidBodyHandle,
    pub collider: ColliderHandle,
    pub half: Vec3,
    pub color: [u8; 3],
    pub mass: f32,
}

/// The physical scene of one environment.
pub struct World {
    pub(crate) phys: PhysicsWorld,
    pub(crate) task: Task,
    palm: RigidBodyHandle,
    fingers: [RigidBodyHandle; 2],
    finger_colliders: [ColliderHandle; 2],
    pub(crate) blocks: Vec<Block>,
    /// Target patch centre (z = 0) for tasks with a target.
    pub(crate) target: Vec3,
    tcp: Vec3,
    width: f32,
    grip_target: f32,
    attached: Option<(usize, ImpulseJointHandle)>,
    substeps: u32,
    control_dt: f32,
    /// Episode constants used by the oracle (distances at reset).
    pub(crate) d0_reach: f32,
    pub(crate) d0_carry: f32,
}

fn rand_color(rng: &mut ChaCha8Rng, base: [u8; 3], amount: f32) -> [u8; 3] {
    let mut out = base;
    for c in &mut out {
        let j: f32 = rng.random_range(-amount..=amount);
        *c = (*c as f32 + j * 255.0).clamp(0.0, 255.0) as u8;
    }
    out
}

/// Points already placed on the table; a new one is drawn away from them.
struct Layout {
    pts: Vec<Vec3>,
}

impl Layout {
    /// A point in `[-lim, lim]^2` at least `min_d` from every placed one (the last of 200 draws if none is).
    fn draw_far(&mut self, rng: &mut ChaCha8Rng, min_d: f32, lim: f32) -> Vec3 {
        let mut p = Vec3::ZERO;
        for _ in 0..200 {
            p = Vec3::new(
                rng.random_range(-lim..lim),
                rng.random_range(-lim..lim),
                0.0,
            );
            if self.pts.iter().all(|q| (p - *q).length() >= min_d) {
                break;
            }
        }
        self.pts.push(p);
        p
    }
}

/// Block `i`'s half extents for `task`: a larger top block for stack, larger blocks to push.
fn block_half(task: Task, i: usize, rng: &mut ChaCha8Rng) -> Vec3 {
    match (task, i) {
        (Task::Stack, 1) => Vec3::new(
            rng.random_range(0.024..0.028),
            rng.random_range(0.024..0.028),
            rng.random_range(0.018..0.022),
        ),
        (Task::PushTarget, _) => Vec3::new(
            rng.random_range(0.020..0.026),
            rng.random_range(0.020..0.026),
            rng.random_range(0.018..0.024),
        ),
        _ => Vec3::new(
            rng.random_range(0.017..0.022),
            rng.random_range(0.017..0.022),
            rng.random_range(0.018..0.024),
        ),
    }
}

impl World {
    /// Builds a fresh scene for `cfg.task` with the layout drawn from `rng`.
    pub(crate) fn new(cfg: &SimConfig, rng: &mut ChaCha8Rng) -> Self {
        let task = cfg.task;
        let mut phys = PhysicsWorld::new();
        phys.gravity = Vec3::new(0.0, 0.0, -9.81);
        phys.integration_parameters.dt = cfg.physics_dt();
        phys.integration_parameters.num_solver_iterations = cfg.solver_iterations.max(1);

        // The order of the draws from `rng` is the scene's seed contract: table, gripper, blocks, target.
        let table = Self::add_table(&mut phys, cfg, rng);
        let tcp = Vec3::new(
            rng.random_range(-0.06..0.06),
            rng.random_range(-0.06..0.06),
            rng.random_range(0.16..0.22),
        );
        let width = MAX_WIDTH;
        let (palm, fingers, finger_colliders) = Self::add_gripper(&mut phys, tcp, width);
        let mut layout = Layout { pts: Vec::new() };
        let (blocks, block_xy) = Self::add_blocks(&mut phys, cfg, rng, table, &mut layout);
        let target = if task.has_target() {
            Self::add_target(&mut phys, cfg, rng, &block_xy, &mut layout)
        } else {
            Vec3::ZERO
        };

        let control_dt = (1.0 / cfg.control_hz) as f32;
        let mut w = Self {
            phys,
            task,
            palm,
            fingers,
            finger_colliders,
            blocks,
            target,
            tcp,
            width,
            grip_target: width,
            attached: None,
            substeps: cfg.substeps.max(1),
            control_dt,
            d0_reach: 1.0,
            d0_carry: 1.0,
        };
        // Settle the blocks onto the table (and fill the query pipeline's BVH).
        for _ in 0..5 {
            w.phys.step();
        }
        w.d0_reach = w.initial_reach();
        w.d0_carry = (w.place_point_xy() - w.block_pos(0))
            .truncate()
            .length()
            .max(0.05);
        w
    }

    /// The table (its colour drawn from `rng`) and the floor far below; returns the table's collider.
    fn add_table(phys: &mut PhysicsWorld, cfg: &SimConfig, rng: &mut ChaCha8Rng) -> ColliderHandle {
        let colors = cfg.randomization.colors;
        // Colour draws happen whether or not colours are randomised, so the layout does not depend on it.
        let table_color = rand_color(rng, [150, 120, 90], if colors { 0.12 } else { 0.0 });
        let (_, table) = phys.insert(
            RigidBodyBuilder::fixed().translation(Vec3::new(0.0, 0.0, -TABLE_THICK)),
            ColliderBuilder::cuboid(TABLE_HALF, TABLE_HALF, TABLE_THICK)
                .friction(0.8)
                .user_data(pack_rgb(table_color)),
        );
        // Floor far below (catches blocks pushed off the table; gives the cameras a background).
        phys.insert(
            RigidBodyBuilder::fixed().translation(Vec3::new(0.0, 0.0, -0.80)),
            ColliderBuilder::cuboid(3.0, 3.0, 0.05).user_data(pack_rgb([70, 72, 78])),
        );
        table
    }

    /// Gripper: three kinematic bodies moved every substep (palm, two fingers `width` apart at `tcp`).
    fn add_gripper(
        phys: &mut PhysicsWorld,
        tcp: Vec3,
        width: f32,
    ) -> (RigidBodyHandle, [RigidBodyHandle; 2], [ColliderHandle; 2]) {
        let gray = pack_rgb([72, 74, 84]);
        let palm = phys
            .insert(
                RigidBodyBuilder::kinematic_position_based().translation(Self::palm_pos(tcp)),
                ColliderBuilder::cuboid(PALM_HALF[0], PALM_HALF[1], PALM_HALF[2])
                    .friction(1.0)
                    .user_data(gray),
            )
            .0;
        let mut fingers = [palm; 2];
        let mut finger_colliders = [ColliderHandle::invalid(); 2];
        for (i, side) in [-1.0f32, 1.0].into_iter().enumerate() {
            let (b, c) = phys.insert(
                RigidBodyBuilder::kinematic_position_based()
                    .translation(Self::finger_pos(tcp, width, side)),
                ColliderBuilder::cuboid(FINGER_HALF[0], FINGER_HALF[1], FINGER_HALF[2])
                    .friction(1.2)
                    .user_data(pack_rgb([96, 98, 110])),
            );
            fingers[i] = b;
            finger_colliders[i] = c;
        }
        (palm, fingers, finger_colliders)
    }

    /// The task's blocks, placed apart on the table, with their colours (and, for held-out colours or a fixed
    /// table colour, the table's); returns them and their xy positions.
    fn add_blocks(
        phys: &mut PhysicsWorld,
        cfg: &SimConfig,
        rng: &mut ChaCha8Rng,
        table: ColliderHandle,
        layout: &mut Layout,
    ) -> (Vec<Block>, Vec<Vec3>) {
        let task = cfg.task;
        let colors = cfg.randomization.colors;
        let held_out = cfg.randomization.held_out_colors;
        let n = task.num_objects();
        let mut blocks = Vec::with_capacity(n);
        let first_color = rng.random_range(0..OBJECT_PALETTE.len());
        if held_out {
            // Chosen from a draw already made, so the layout is the same as without held-out colours.
            let c = HELD_OUT_TABLE_COLORS[first_color % HELD_OUT_TABLE_COLORS.len()];
            if let Some(t) = phys.colliders.get_mut(table) {
                t.user_data = pack_rgb(c);
            }
        }
        if let Some(c) = cfg.randomization.table_color {
            if let Some(t) = phys.colliders.get_mut(table) {
                t.user_data = pack_rgb(c);
            }
        }
        let mut block_xy = Vec::with_capacity(n);
        for i in 0..n {
            block_xy.push(layout.draw_far(rng, 0.12, 0.15));
            let half = block_half(task, i, rng);
            let base = if held_out {
                HELD_OUT_PALETTE[(first_color + i) % HELD_OUT_PALETTE.len()]
            } else {
                OBJECT_PALETTE[(first_color + i * 2) % OBJECT_PALETTE.len()]
            };
            let color = rand_color(rng, base, if colors { 0.15 } else { 0.04 });
            let mass = rng.random_range(0.05..0.20f32);
            let yaw = rng.random_range(-0.35..0.35f32);
            let p = block_xy[i];
            let (body, collider) = phys.insert(
                RigidBodyBuilder::dynamic()
                    .translation(Vec3::new(p.x, p.y, half.z + 0.0005))
                    .rotation(Vec3::new(0.0, 0.0, yaw))
                    .can_sleep(cfg.sleeping)
                    .angular_damping(0.5),
                ColliderBuilder::cuboid(half.x, half.y, half.z)
                    .friction(if task == Task::PushTarget { 0.5 } else { 0.9 })
                    .mass(mass)
                    .user_data(pack_rgb(color)),
            );
            blocks.push(Block {
                body,
                collider,
                half,
                color,
                mass,
            });
        }
        (blocks, block_xy)
    }

    /// The target patch (no collisions) of a task with a target; returns its centre.
    fn add_target(
        phys: &mut PhysicsWorld,
        cfg: &SimConfig,
        rng: &mut ChaCha8Rng,
        block_xy: &[Vec3],
        layout: &mut Layout,
    ) -> Vec3 {
        let p = match cfg.task {
            Task::PushTarget => {
                // PUSH_START_DIST from the block in a random direction, inside the reachable area. A fixed
                // distance keeps push progress a function of what the cameras see (see oracle::push).
                let b = block_xy[0];
                let mut t = b;
                let d = PUSH_START_DIST;
                for _ in 0..200 {
                    let ang = rng.random_range(0.0..std::f32::consts::TAU);
                    t = b + Vec3::new(ang.cos() * d, ang.sin() * d, 0.0);
                    if t.x.abs() < 0.2 && t.y.abs() < 0.2 {
                        break;
                    }
                }
                t
            }
            _ => layout.draw_far(rng, 0.12, 0.17),
        };
        let colors = cfg.randomization.colors;
        let target_color = rand_color(rng, [70, 190, 90], if colors { 0.12 } else { 0.0 });
        phys.insert(
            RigidBodyBuilder::fixed().translation(Vec3::new(p.x, p.y, 0.0005)),
            ColliderBuilder::cuboid(TARGET_HALF, TARGET_HALF, 0.0005)
                .collision_groups(InteractionGroups::none())
                .user_data(pack_rgb(target_color)),
        );
        p
    }

    /// The episode's reach distance at reset (the oracle's scale): to the pre-push pose for push-target, to the
    /// grasp point of block 0 otherwise.
    fn initial_reach(&self) -> f32 {
        match self.task {
            Task::PushTarget => {
                let g = push_geometry(self);
                let pre = self.block_pos(0).truncate() - g.dir * (g.standoff + 0.02);
                (self.tcp - Vec3::new(pre.x, pre.y, HOVER_Z))
                    .length()
                    .max(0.05)
            }
            _ => (self.tcp - self.grasp_point(0)).length().max(0.05),
        }
    }

    fn palm_pos(tcp: Vec3) -> Vec3 {
        tcp + Vec3::new(0.0, 0.0, FINGER_HALF[2] + PALM_HALF[2])
    }

    fn finger_pos(tcp: Vec3, width: f32, side: f32) -> Vec3 {
        tcp + Vec3::new(0.0, side * (width * 0.5 + FINGER_HALF[1]), 0.0)
    }

    /// Advances one control step: the TCP moves by `delta` (metres, clipped to the workspace), the finger gap
    /// moves toward `grip_target` (metres). Returns nothing; read the new state through the accessors.
    pub(crate) fn control(&mut self, delta: Vec3, grip_target: f32) {
        let start = self.tcp;
        let lo = Vec3::from(WS_LO);
        let hi = Vec3::from(WS_HI);
        let end = (start + delta).clamp(lo, hi);
        self.grip_target = grip_target.clamp(0.0, MAX_WIDTH);
        let sub_dt = self.control_dt / self.substeps as f32;
        let grip_step = GRIP_SPEED * sub_dt;
        // Resting blocks may sleep, but kinematic fingers do not wake them: wake the ones within reach.
        for b in &self.blocks {
            let p = self.phys.bodies[b.body].translation();
            if self.phys.bodies[b.body].is_sleeping()
                && (p - start).length() < 0.06 + delta.length() + 0.05
            {
                self.phys.bodies[b.body].wake_up(true);
            }
        }
        for s in 1..=self.substeps {
            let f = s as f32 / self.substeps as f32;
            let p = start.lerp(end, f);
            if let Some((_, joint)) = self.attached {
                if self.grip_target > self.width + 0.004 {
                    self.phys.remove_impulse_joint(joint);
                    self.attached = None;
                }
            }
            let closing = self.attached.is_none() && self.grip_target < self.width;
            if self.attached.is_none() {
                let d = (self.grip_target - self.width).clamp(-grip_step, grip_step);
                self.width += d;
            }
            self.phys.bodies[self.palm].set_next_kinematic_translation(Self::palm_pos(p));
            for (i, side) in [-1.0f32, 1.0].into_iter().enumerate() {
                self.phys.bodies[self.fingers[i]]
                    .set_next_kinematic_translation(Self::finger_pos(p, self.width, side));
            }
            self.phys.step();
            if closing {
                self.try_attach();
            }
        }
        self.tcp = end;
    }

    /// Engages the attach joint when both fingers touch the same block from its sides, the block between them.
    fn try_attach(&mut self) {
        let touching = |w: &World, f: usize, b: usize| {
            w.phys
                .contact_pair(w.finger_colliders[f], w.blocks[b].collider)
                .and_then(|p| p.find_deepest_contact())
                .is_some_and(|(_, c)| c.dist < 0.001)
        };
        // Fingers closed on a block's top touch it too; a real gripper cannot lift it that way.
        let between = |w: &World, b: usize| {
            let p = w.block_pos(b);
            let half = w.blocks[b].half;
            let hand_y = w.phys.bodies[w.palm].translation().y;
            (p.y - hand_y).abs() < w.width * 0.5 && w.width > half.x.min(half.y)
        };
        for b in 0..self.blocks.len() {
            if between(self, b) && touching(self, 0, b) && touching(self, 1, b) {
                let palm_pose = *self.phys.bodies[self.palm].position();
                let block_pose = *self.phys.bodies[self.blocks[b].body].position();
                let joint = FixedJointBuilder::new()
                    .local_frame1(palm_pose.inv_mul(&block_pose))
                    .local_frame2(Pose::IDENTITY)
                    .contacts_enabled(false);
                let h = self
                    .phys
                    .insert_impulse_joint(self.palm, self.blocks[b].body, joint);
                self.attached = Some((b, h));
                // Stop squeezing: hold the gap a hair wider than the contact.
                self.width += 0.0005;
                return;
            }
        }
    }

    /// Tool centre point (world, metres).
    pub fn tcp(&self) -> Vec3 {
        self.tcp
    }

    /// Inner gap between the fingers (metres).
    pub fn gripper_width(&self) -> f32 {
        self.width
    }

    /// The block held by the attach joint, if any.
    pub fn attached(&self) -> Option<usize> {
        self.attached.map(|(b, _)| b)
    }

    /// Seconds per control step.
    pub fn control_dt(&self) -> f32 {
        self.control_dt
    }

    pub fn task(&self) -> Task {
        self.task
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    pub fn block(&self, i: usize) -> &Block {
        &self.blocks[i]
    }

    pub fn block_pos(&self, i: usize) -> Vec3 {
        self.phys.bodies[self.blocks[i].body].translation()
    }

    pub fn block_rot(&self, i: usize) -> Quat {
        *self.phys.bodies[self.blocks[i].body].rotation()
    }

    pub fn block_linvel(&self, i: usize) -> Vec3 {
        self.phys.bodies[self.blocks[i].body].linvel()
    }

    /// Target patch centre (tasks with a target).
    pub fn target(&self) -> Vec3 {
        self.target
    }

    /// Where the TCP must be to grasp block `i` as it lies now.
    pub fn grasp_point(&self, i: usize) -> Vec3 {
        self.block_pos(i) + Vec3::new(0.0, 0.0, GRASP_DZ)
    }

    /// Where block 0 must end up (centre): the target patch (pick-place), on top of block 1 (stack), the
    /// target (push).
    pub fn place_point(&self) -> Vec3 {
        let h = self.blocks[0].half.z;
        match self.task {
            Task::Stack => {
                let b = self.block_pos(1);
                Vec3::new(b.x, b.y, b.z + self.blocks[1].half.z + h)
            }
            _ => Vec3::new(self.target.x, self.target.y, h),
        }
    }

    fn place_point_xy(&self) -> Vec3 {
        let p = self.place_point();
        Vec3::new(p.x, p.y, self.block_pos(0).z)
    }

    /// True when any block has left the table (irrecoverable).
    pub fn block_off_table(&self) -> bool {
        (0..self.blocks.len()).any(|i| {
            let p = self.block_pos(i);
            p.z < -0.05 || p.x.abs() > TABLE_HALF + 0.02 || p.y.abs() > TABLE_HALF + 0.02
        })
    }

    /// Number of rigid bodies that are awake (diagnostics).
    pub fn awake_bodies(&self) -> usize {
        self.phys
            .bodies
            .iter()
            .filter(|(_, b)| b.is_dynamic() && !b.is_sleeping())
            .count()
    }
}

/// Block-target distance at reset in the push task (metres). Fixed, so that push progress depends only on the
/// current distance, which the cameras see: with a per-episode start distance as the normaliser, the same frames
/// would carry different labels in different episodes and no frame-window model could learn them.
pub const PUSH_START_DIST: f32 = 0.14;

/// Push geometry shared by the oracle, the expert and the target placement.
pub struct PushGeometry {
    /// Unit push direction (block to target) in the plane.
    pub dir: rapier3d::glamx::Vec2,
    /// Distance from the block centre to the pusher's centre at contact.
    pub standoff: f32,
    /// Block-to-target distance in the plane.
    pub dist: f32,
}

pub fn push_geometry(world: &World) -> PushGeometry {
    let b = world.block_pos(0).truncate();
    let t = world.target().truncate();
    let d = t - b;
    let dist = d.length();
    let dir = if dist > 1e-6 {
        d / dist
    } else {
        rapier3d::glamx::Vec2::X
    };
    let half = world.block(0).half;
    // Support distance of the (rotated) block along `dir`.
    let local = world.block_rot(0).inverse() * rapier3d::glamx::Vec3::new(dir.x, dir.y, 0.0);
    let r = (local.x.abs() * half.x + local.y.abs() * half.y).min(half.truncate().length());
    PushGeometry {
        dir,
        standoff: r + 0.012,
        dist,
    }
}

/// TCP height while pushing and while hovering before the push.
pub const PUSH_Z: f32 = 0.024;
pub const HOVER_Z: f32 = 0.09;
