//! Ray-cast cameras: one ray per pixel; Lambert shading from the hit normal, a directional light and the
//! collider's colour; depth in metres along the ray. Pixels are independent, so the picture is the same
//! whatever the thread count.
//!
//! Rays are cast against each collider directly (parry's own per-shape ray cast, the one rapier's query
//! pipeline calls at its leaves, so hits, distances and normals are the same as through the pipeline), and
//! only inside the collider's screen rectangle: the scene is a handful of boxes, and walking rapier's BVH per
//! ray cost far more than the box tests themselves (the wrist view took 3.0-3.6 ms of CPU per 3.6-4.3 ms control
//! step; now about 0.3 ms, see README "Rendering speed").
//! A collider is skipped for a pixel when something already hit is nearer than the collider's bounding box.

use crate::config::{CameraConfig, CameraMount};
use crate::world::{unpack_rgb, World};
use image::RgbImage;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use rapier3d::glamx::{Quat, Vec3};
use rapier3d::parry::shape::Shape;
use rapier3d::prelude::{Collider, Pose, Ray};
use stagewise_core::View;

const MAX_DEPTH: f32 = 5.0;
const AMBIENT: f32 = 0.35;
const DIFFUSE: f32 = 0.65;

/// A camera prepared for one episode: its (jittered) pose and the unit ray direction of every pixel.
#[derive(Debug, Clone)]
pub struct Camera {
    pub config: CameraConfig,
    /// Eye position (world frame for fixed cameras, offset from the TCP for wrist cameras).
    pub eye: Vec3,
    dirs: Vec<Vec3>,
    /// `1 / dir` per component (the slab test's factors for boxes that are not rotated).
    inv_dirs: Vec<Vec3>,
    /// Background colour per pixel (a function of the ray direction only).
    sky: Vec<[u8; 3]>,
    light: Vec3,
    basis: [Vec3; 3],
    /// Fixed cameras: colour and depth of the fixed scene (table, floor, target) per pixel, cast once per
    /// episode; each frame then casts rays only where moving bodies can appear.
    static_cache: Option<(Vec<u8>, Vec<f32>)>,
}

/// A pixel rectangle `[u0, u1) x [v0, v1)`.
type Rect = [usize; 4];

/// Which colliders a cast considers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Select {
    All,
    Fixed,
    Moving,
}

/// The shape of a collider as a caster sees it.
enum Geometry<'a> {
    /// A box, given relative to the ray origin in its own frame: `lo = mins - origin`, `hi = maxs - origin`.
    /// `aligned`: its rotation is the identity, so rays need no rotating (their reciprocal directions are
    /// the camera's, computed once).
    Cuboid {
        aligned: bool,
        inv_rot: Quat,
        lo: Vec3,
        hi: Vec3,
    },
    /// Anything else: parry's generic `cast_ray_and_get_normal`.
    Other(&'a dyn Shape),
}

/// One collider prepared for one frame of one camera.
struct Caster<'a> {
    geometry: Geometry<'a>,
    pose: Pose,
    albedo: [f32; 3],
    rect: Rect,
    /// A lower bound of the distance from the camera origin to any point of the collider.
    near: f32,
}

impl Caster<'_> {
    /// Time of impact and world normal of the ray `origin + t * dir`, `t <= max`, against the solid shape
    /// (`inv_dir = 1 / dir` per component). Same result, bit for bit, as
    /// `Shape::cast_ray_and_get_normal(pose, ray, max, true)`, which rapier's query pipeline calls.
    #[inline]
    fn cast(&self, origin: Vec3, dir: Vec3, inv_dir: Vec3, max: f32) -> Option<(f32, Vec3)> {
        match &self.geometry {
            Geometry::Cuboid {
                aligned: true,
                lo,
                hi,
                ..
            } => cast_local_box(*lo, *hi, dir, inv_dir, max),
            Geometry::Cuboid {
                aligned: false,
                inv_rot,
                lo,
                hi,
            } => {
                // parry: `ray.inverse_transform_by(pose)` (the origin part is in lo and hi)
                let d = *inv_rot * dir;
                let inv = Vec3::new(1.0 / d.x, 1.0 / d.y, 1.0 / d.z);
                cast_local_box(*lo, *hi, d, inv, max).map(|(t, n)| (t, self.pose.rotation * n))
            }
            Geometry::Other(shape) => shape
                .cast_ray_and_get_normal(&self.pose, &Ray::new(origin, dir), max, true)
                .map(|hit| (hit.time_of_impact, hit.normal)),
        }
    }
}

/// parry 0.31's `clip_aabb_line` followed by its solid `ray_aabb` (what `Cuboid::cast_local_ray_and_get_normal`
/// does) for the box `lo = mins - origin`, `hi = maxs - origin` and the ray direction `dir` with
/// `inv = 1 / dir`: the same operations in the same order on the same values, so the same time of impact and
/// normal (local frame), without the generic code's per-call set-up.
#[inline(always)]
fn cast_local_box(lo: Vec3, hi: Vec3, dir: Vec3, inv: Vec3, max: f32) -> Option<(f32, Vec3)> {
    let mut tmax = f32::MAX;
    let mut tmin = -tmax;
    let mut near_side = 0i32;
    let mut far_side = 0i32;
    let mut near_diag = false;
    let mut far_diag = false;
    for i in 0..3 {
        if dir[i] == 0.0 {
            // origin outside the slab (origin < mins or origin > maxs)
            if lo[i] > 0.0 || hi[i] < 0.0 {
                return None;
            }
        } else {
            let side = i as i32 + 1;
            let mut near = lo[i] * inv[i];
            let mut far = hi[i] * inv[i];
            let flip = near > far;
            if flip {
                std::mem::swap(&mut near, &mut far);
            }
            if near > tmin {
                tmin = near;
                near_side = if flip { -side } else { side };
                near_diag = false;
            } else if near == tmin {
                near_diag = true;
            }
            if far < tmax {
                tmax = far;
                far_side = if flip { side } else { -side };
                far_diag = false;
            } else if far == tmax {
                far_diag = true;
            }
            if tmax < 0.0 || tmin > tmax {
                return None;
            }
        }
    }
    // dir zero or NaN: a hit at 0 when the origin is inside
    let inside = || (0..3).all(|i| lo[i] <= 0.0 && hi[i] >= 0.0);
    let normal = if near_diag {
        -dir.normalize()
    } else if near_side == 0 {
        return (inside() && 0.0 <= max).then_some((0.0, Vec3::ZERO));
    } else {
        let mut n = Vec3::ZERO;
        if near_side < 0 {
            n[(-near_side - 1) as usize] = 1.0;
        } else {
            n[(near_side - 1) as usize] = -1.0;
        }
        n
    };
    if !far_diag && far_side == 0 {
        return (inside() && 0.0 <= max).then_some((0.0, Vec3::ZERO));
    }
    if tmin < 0.0 {
        // the origin is inside the (solid) box
        Some((0.0, Vec3::ZERO))
    } else if tmin <= max {
        Some((tmin, normal))
    } else {
        None
    }
}

/// True for colliders of the fixed scene (no parent, or a fixed parent).
fn is_fixed(world: &World, c: &Collider) -> bool {
    c.parent()
        .map(|b| world.phys.bodies[b].is_fixed())
        .unwrap_or(true)
}

/// One pixel row being rendered: row index, RGB bytes, depth (metres; infinity = no hit).
type Row<'a> = (usize, &'a mut [u8], &'a mut [f32]);

impl Camera {
    /// Prepares `config`; `jitter` (metres, std) perturbs eye and target of fixed cameras.
    pub fn new(config: &CameraConfig, jitter: f32, rng: &mut ChaCha8Rng) -> Self {
        let mut eye = Vec3::from(config.eye);
        let mut target = Vec3::from(config.target);
        if jitter > 0.0 && config.mount == CameraMount::World {
            if let Ok(n) = Normal::new(0.0f32, jitter) {
                eye += Vec3::new(n.sample(rng), n.sample(rng), n.sample(rng));
                target += Vec3::new(n.sample(rng), n.sample(rng), n.sample(rng)) * 0.5;
            }
        } else if jitter > 0.0 {
            // keep the random stream identical in length whatever the mount
            let _: f32 = rng.random();
        }
        let fwd = (target - eye).normalize_or(Vec3::X);
        let mut right = fwd.cross(Vec3::from(config.up));
        if right.length_squared() < 1e-8 {
            right = fwd.cross(Vec3::X);
        }
        let right = right.normalize();
        let down = fwd.cross(right);
        let [fx, fy, cx, cy] = config.intrinsics();
        let (w, h) = (config.width as usize, config.height as usize);
        let mut dirs = Vec::with_capacity(w * h);
        for v in 0..h {
            for u in 0..w {
                let x = (u as f32 + 0.5 - cx) / fx;
                let y = (v as f32 + 0.5 - cy) / fy;
                dirs.push((fwd + right * x + down * y).normalize());
            }
        }
        let sky = dirs.iter().map(|&d| sky(d)).collect();
        let inv_dirs = dirs
            .iter()
            .map(|d| Vec3::new(1.0 / d.x, 1.0 / d.y, 1.0 / d.z))
            .collect();
        Self {
            config: config.clone(),
            eye,
            dirs,
            inv_dirs,
            sky,
            light: Vec3::new(0.35, 0.25, 1.0).normalize(),
            basis: [fwd, right, down],
            static_cache: None,
        }
    }

    /// Casts the fixed scene once (fixed cameras only); later frames reuse it.
    pub fn prepare_static(&mut self, world: &World) {
        if self.config.mount != CameraMount::World {
            return;
        }
        let (w, h) = (self.config.width as usize, self.config.height as usize);
        let mut rgb: Vec<u8> = self.sky.iter().flatten().copied().collect();
        let mut dep = vec![f32::INFINITY; w * h];
        let casters = self.casters(world, self.eye, Select::Fixed);
        self.cast_rows(self.eye, &casters, split_rows(&mut rgb, &mut dep, w));
        self.static_cache = Some((rgb, dep));
    }

    /// The colliders `select` names, with their screen rectangles from `origin`, nearest first.
    fn casters<'w>(&self, world: &'w World, origin: Vec3, select: Select) -> Vec<Caster<'w>> {
        let mut out: Vec<Caster<'w>> = Vec::new();
        for (_, c) in world.phys.colliders.iter() {
            if !c.is_enabled() {
                continue;
            }
            let fixed = is_fixed(world, c);
            if (select == Select::Fixed && !fixed) || (select == Select::Moving && fixed) {
                continue;
            }
            let pose = *c.position();
            let aabb = c.compute_aabb();
            let cuboid = c.shape().as_cuboid();
            let geometry = match cuboid {
                Some(cuboid) => {
                    // as parry: the ray origin in the box's frame, and the box as an AABB there
                    let local_origin = pose.inverse_transform_point(origin);
                    let mins = -cuboid.half_extents;
                    let maxs = cuboid.half_extents;
                    Geometry::Cuboid {
                        aligned: pose.rotation == Quat::IDENTITY,
                        inv_rot: pose.rotation.inverse(),
                        lo: mins - local_origin,
                        hi: maxs - local_origin,
                    }
                }
                None => Geometry::Other(c.shape()),
            };
            // Corners to project: the box itself, else its world AABB.
            let corners: [Vec3; 8] = std::array::from_fn(|k| match cuboid {
                Some(cuboid) => {
                    let e = cuboid.half_extents;
                    let local = Vec3::new(
                        if k & 1 == 0 { -e.x } else { e.x },
                        if k & 2 == 0 { -e.y } else { e.y },
                        if k & 4 == 0 { -e.z } else { e.z },
                    );
                    pose * local
                }
                None => Vec3::new(
                    if k & 1 == 0 { aabb.mins.x } else { aabb.maxs.x },
                    if k & 2 == 0 { aabb.mins.y } else { aabb.maxs.y },
                    if k & 4 == 0 { aabb.mins.z } else { aabb.maxs.z },
                ),
            });
            let Some(rect) = self.screen_rect(origin, &corners) else {
                continue;
            };
            // Distance from the origin to the AABB, a little short of it (float rounding of the hit time).
            let gap = (aabb.mins - origin).max(origin - aabb.maxs).max(Vec3::ZERO);
            let near = (gap.length() * (1.0 - 1e-4) - 1e-4).max(0.0);
            out.push(Caster {
                geometry,
                pose,
                albedo: unpack_rgb(c.user_data),
                rect,
                near,
            });
        }
        out.sort_by(|a, b| a.near.total_cmp(&b.near));
        out
    }

    /// The pixel rectangle that can show a convex body with these corners seen from `origin` (the whole image
    /// when a corner is not in front of the camera); None when it is off screen.
    fn screen_rect(&self, origin: Vec3, corners: &[Vec3; 8]) -> Option<Rect> {
        let (w, h) = (self.config.width as f32, self.config.height as f32);
        let full = [
            0,
            self.config.width as usize,
            0,
            self.config.height as usize,
        ];
        let [fx, fy, cx, cy] = self.config.intrinsics();
        let [fwd, right, down] = self.basis;
        let (mut u0, mut v0, mut u1, mut v1) = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
        for &p in corners {
            let d = p - origin;
            let z = d.dot(fwd);
            if z < 1e-3 {
                return Some(full);
            }
            // pixel index whose centre the corner projects onto
            let u = d.dot(right) / z * fx + cx - 0.5;
            let v = d.dot(down) / z * fy + cy - 0.5;
            u0 = u0.min(u);
            u1 = u1.max(u);
            v0 = v0.min(v);
            v1 = v1.max(v);
        }
        if u1 < -1.0 || v1 < -1.0 || u0 > w || v0 > h {
            return None;
        }
        let clampu = |x: f32| x.clamp(0.0, w) as usize;
        let clampv = |x: f32| x.clamp(0.0, h) as usize;
        Some([
            clampu(u0.floor() - 1.0),
            clampu(u1.ceil() + 2.0),
            clampv(v0.floor() - 1.0),
            clampv(v1.ceil() + 2.0),
        ])
    }

    /// Casts `casters` into `rows`, which already hold what lies behind them (colour and depth; infinity for
    /// the background): a pixel takes a collider's colour when its ray hits it nearer than the depth so far.
    fn cast_rows(&self, origin: Vec3, casters: &[Caster<'_>], mut rows: Vec<Row<'_>>) {
        let w = self.config.width as usize;
        for c in casters {
            let [u0, u1, v0, v1] = c.rect;
            for (v, rgb_row, depth_row) in rows.iter_mut() {
                let v = *v;
                if v < v0 || v >= v1 {
                    continue;
                }
                let dirs = &self.dirs[v * w..(v + 1) * w];
                let inv_dirs = &self.inv_dirs[v * w..(v + 1) * w];
                for u in u0..u1 {
                    let d = depth_row[u];
                    let max = if d.is_finite() { d } else { MAX_DEPTH };
                    if max < c.near {
                        continue;
                    }
                    if let Some((toi, normal)) = c.cast(origin, dirs[u], inv_dirs[u], max) {
                        rgb_row[u * 3..u * 3 + 3]
                            .copy_from_slice(&self.shade(c.albedo, toi, normal));
                        depth_row[u] = toi;
                    }
                }
            }
        }
    }

    /// Colour of a hit at distance `toi` with world normal `normal` on a surface of colour `albedo`.
    #[inline]
    fn shade(&self, albedo: [f32; 3], toi: f32, normal: Vec3) -> [u8; 3] {
        let lambert = normal.dot(self.light).max(0.0);
        let fog = 1.0 - (toi / MAX_DEPTH) * 0.3;
        let k = (AMBIENT + DIFFUSE * lambert) * fog;
        albedo.map(|a| to_u8(a * k))
    }

    /// Renders this camera's view of `world` (RGB, and depth when `depth`) using `threads` threads.
    pub fn render(&self, world: &World, depth: bool, threads: usize) -> View {
        let (w, h) = (self.config.width as usize, self.config.height as usize);
        let origin = match self.config.mount {
            CameraMount::World => self.eye,
            CameraMount::Wrist => world.tcp() + self.eye,
        };
        // What lies behind the moving bodies: the cached fixed scene, or the background (then every collider
        // is cast).
        let (mut rgb, mut dep, casters) = match &self.static_cache {
            Some((rgb, dep)) => (
                rgb.clone(),
                dep.clone(),
                self.casters(world, origin, Select::Moving),
            ),
            None => (
                self.sky.iter().flatten().copied().collect(),
                vec![f32::INFINITY; w * h],
                self.casters(world, origin, Select::All),
            ),
        };
        let threads = threads.clamp(1, h.max(1));
        let rows = split_rows(&mut rgb, &mut dep, w);
        if threads == 1 {
            self.cast_rows(origin, &casters, rows);
        } else {
            let mut per_thread: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
            for (i, r) in rows.into_iter().enumerate() {
                per_thread[i % threads].push(r);
            }
            let casters = &casters;
            std::thread::scope(|s| {
                for rows in per_thread {
                    s.spawn(move || self.cast_rows(origin, casters, rows));
                }
            });
        }
        let img = RgbImage::from_raw(w as u32, h as u32, rgb)
            .unwrap_or_else(|| RgbImage::new(w as u32, h as u32));
        View {
            name: self.config.name.clone(),
            rgb: img,
            depth: if depth { Some(dep) } else { None },
        }
    }
}

#[inline]
fn to_u8(x: f32) -> u8 {
    (x.clamp(0.0, 1.0) * 255.0 + 0.5) as u8
}

/// Background colour for rays that hit nothing (a vertical gradient).
fn sky(dir: Vec3) -> [u8; 3] {
    let t = 0.5 + 0.5 * dir.z;
    [
        to_u8(0.55 + 0.25 * t),
        to_u8(0.62 + 0.25 * t),
        to_u8(0.75 + 0.2 * t),
    ]
}

fn split_rows<'a>(rgb: &'a mut [u8], dep: &'a mut [f32], w: usize) -> Vec<Row<'a>> {
    rgb.chunks_mut(w * 3)
        .zip(dep.chunks_mut(w))
        .enumerate()
        .map(|(i, (r, d))| (i, r, d))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SimConfig, Task};
    use rand::SeedableRng;

    use rapier3d::prelude::QueryPipeline;

    /// The renderer before direct casting: every pixel's ray through rapier's query pipeline.
    fn reference_render(cam: &Camera, world: &World) -> (Vec<[u8; 3]>, Vec<f32>) {
        let origin = match cam.config.mount {
            CameraMount::World => cam.eye,
            CameraMount::Wrist => world.tcp() + cam.eye,
        };
        let qp: QueryPipeline<'_> = world.phys.query_pipeline();
        cam.dirs
            .iter()
            .map(
                |&dir| match qp.cast_ray_and_get_normal(&Ray::new(origin, dir), MAX_DEPTH, true) {
                    Some((handle, hit)) => {
                        let albedo = unpack_rgb(world.phys.colliders[handle].user_data);
                        (
                            cam.shade(albedo, hit.time_of_impact, hit.normal),
                            hit.time_of_impact,
                        )
                    }
                    None => (sky(dir), f32::INFINITY),
                },
            )
            .unzip()
    }

    #[test]
    fn direct_casting_renders_like_the_query_pipeline() {
        let mut differ = 0;
        let mut total = 0;
        for task in Task::ALL {
            let cfg = SimConfig::new(task).with_resolution(48, 36);
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            let mut world = World::new(&cfg, &mut rng);
            let mut cams: Vec<Camera> = cfg
                .cameras
                .iter()
                .map(|c| Camera::new(c, 0.0, &mut ChaCha8Rng::seed_from_u64(1)))
                .collect();
            for c in &mut cams {
                c.prepare_static(&world);
            }
            // move the gripper down onto the blocks and around, rendering on the way
            for k in 0..40 {
                let t = k as f32 * 0.2;
                world.control(Vec3::new(0.01 * t.cos(), 0.01 * t.sin(), -0.004), 0.03);
                for (i, cam) in cams.iter().enumerate() {
                    let (want_rgb, want_dep) = reference_render(cam, &world);
                    let view = cam.render(&world, true, 1 + (k + i) % 3);
                    let dep = view.depth.as_ref().expect("depth");
                    for (p, (px, (wc, wd))) in view
                        .rgb
                        .pixels()
                        .zip(want_rgb.iter().zip(&want_dep))
                        .enumerate()
                    {
                        total += 1;
                        if px.0 != *wc || dep[p].to_bits() != wd.to_bits() {
                            differ += 1;
                        }
                    }
                }
            }
        }
        // Equal hit times on two colliders may resolve either way; nothing else may differ.
        assert!(
            differ * 10_000 <= total,
            "{differ} of {total} pixels differ"
        );
        eprintln!("{differ} of {total} pixels differ from the query pipeline's picture");
    }

    #[test]
    fn intrinsics_follow_the_field_of_view() {
        let c = CameraConfig::fixed("x", [1.0, 0.0, 0.5], [0.0; 3], 64, 48);
        let [fx, fy, cx, cy] = c.intrinsics();
        assert_eq!((cx, cy), (32.0, 24.0));
        assert!((fx - 24.0 / (25f32.to_radians()).tan()).abs() < 1e-3 && fx == fy);
    }
}
