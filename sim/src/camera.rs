//! Ray-cast cameras: one ray per pixel through rapier's query pipeline; Lambert shading from the hit normal,
//! a directional light and the collider's colour; depth in metres along the ray. Pixels are independent, so
//! the picture is the same whatever the thread count.

use crate::config::{CameraConfig, CameraMount};
use crate::world::{unpack_rgb, World};
use image::RgbImage;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use rapier3d::glamx::Vec3;
use rapier3d::prelude::{QueryFilter, QueryPipeline, Ray};
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
    light: Vec3,
    basis: [Vec3; 3],
    /// Fixed cameras: colour and depth of the fixed scene (table, floor, target) per pixel, cast once per
    /// episode; each frame then casts rays only where moving bodies can appear.
    static_cache: Option<Vec<([u8; 3], f32)>>,
}

/// A pixel rectangle `[u0, u1) x [v0, v1)`.
type Rect = [usize; 4];

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
        Self {
            config: config.clone(),
            eye,
            dirs,
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
        let qp = world
            .phys
            .query_pipeline_with_filter(QueryFilter::only_fixed());
        let cache = self
            .dirs
            .iter()
            .map(|&dir| {
                let (c, d) = self.shade(world, &qp, self.eye, dir, MAX_DEPTH);
                (c.unwrap_or_else(|| sky(self.eye, dir)), d)
            })
            .collect();
        self.static_cache = Some(cache);
    }

    /// Screen rectangles that may show a moving (non-fixed) collider; None = the whole image.
    fn moving_rects(&self, world: &World) -> Option<Vec<Rect>> {
        let (w, h) = (self.config.width as f32, self.config.height as f32);
        let [fx, fy, cx, cy] = self.config.intrinsics();
        let [fwd, right, down] = self.basis;
        let mut rects = Vec::new();
        for (_, c) in world.phys.colliders.iter() {
            let fixed = c
                .parent()
                .map(|b| world.phys.bodies[b].is_fixed())
                .unwrap_or(true);
            if fixed {
                continue;
            }
            let aabb = c.compute_aabb();
            let (mut u0, mut v0, mut u1, mut v1) = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
            for k in 0..8 {
                let p = Vec3::new(
                    if k & 1 == 0 { aabb.mins.x } else { aabb.maxs.x },
                    if k & 2 == 0 { aabb.mins.y } else { aabb.maxs.y },
                    if k & 4 == 0 { aabb.mins.z } else { aabb.maxs.z },
                );
                let d = p - self.eye;
                let z = d.dot(fwd);
                if z < 1e-3 {
                    return None;
                }
                let u = d.dot(right) / z * fx + cx - 0.5;
                let v = d.dot(down) / z * fy + cy - 0.5;
                u0 = u0.min(u);
                u1 = u1.max(u);
                v0 = v0.min(v);
                v1 = v1.max(v);
            }
            if u1 < -1.0 || v1 < -1.0 || u0 > w || v0 > h {
                continue;
            }
            let clampu = |x: f32| x.clamp(0.0, w) as usize;
            let clampv = |x: f32| x.clamp(0.0, h) as usize;
            rects.push([
                clampu(u0.floor() - 1.0),
                clampu(u1.ceil() + 2.0),
                clampv(v0.floor() - 1.0),
                clampv(v1.ceil() + 2.0),
            ]);
        }
        Some(rects)
    }

    /// Casts one ray; returns the shaded colour (None for no hit) and the hit distance.
    #[inline]
    fn shade(
        &self,
        world: &World,
        qp: &QueryPipeline<'_>,
        origin: Vec3,
        dir: Vec3,
        max: f32,
    ) -> (Option<[u8; 3]>, f32) {
        let ray = Ray::new(origin, dir);
        match qp.cast_ray_and_get_normal(&ray, max, true) {
            Some((handle, hit)) => {
                let albedo = world
                    .phys
                    .colliders
                    .get(handle)
                    .map(|c| unpack_rgb(c.user_data))
                    .unwrap_or([1.0, 0.0, 1.0]);
                let lambert = hit.normal.dot(self.light).max(0.0);
                let fog = 1.0 - (hit.time_of_impact / MAX_DEPTH) * 0.3;
                let k = (AMBIENT + DIFFUSE * lambert) * fog;
                (Some(albedo.map(|a| to_u8(a * k))), hit.time_of_impact)
            }
            None => (None, f32::INFINITY),
        }
    }

    /// Renders this camera's view of `world` (RGB, and depth when `depth`) using `threads` threads.
    pub fn render(&self, world: &World, depth: bool, threads: usize) -> View {
        let (w, h) = (self.config.width as usize, self.config.height as usize);
        let origin = match self.config.mount {
            CameraMount::World => self.eye,
            CameraMount::Wrist => world.tcp() + self.eye,
        };
        let mut rgb = vec![0u8; w * h * 3];
        let mut dep = if depth { vec![0f32; w * h] } else { Vec::new() };
        let threads = threads.clamp(1, h.max(1));
        if threads == 1 {
            let rows: Vec<Row<'_>> = split_rows(&mut rgb, &mut dep, w, depth);
            self.render_rows(world, origin, rows);
        } else {
            let rows = split_rows(&mut rgb, &mut dep, w, depth);
            let mut per_thread: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
            for (i, r) in rows.into_iter().enumerate() {
                per_thread[i % threads].push(r);
            }
            std::thread::scope(|s| {
                for rows in per_thread {
                    s.spawn(move || self.render_rows(world, origin, rows));
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

    fn render_rows(&self, world: &World, origin: Vec3, rows: Vec<Row<'_>>) {
        let w = self.config.width as usize;
        match (&self.static_cache, self.moving_rects(world)) {
            (Some(cache), Some(rects)) => {
                // Fixed camera: the cached fixed scene, plus rays against moving bodies inside their rectangles.
                let qp = world
                    .phys
                    .query_pipeline_with_filter(QueryFilter::exclude_fixed());
                for (v, rgb_row, mut depth_row) in rows {
                    for u in 0..w {
                        let (mut c, mut d) = cache[v * w + u];
                        if rects
                            .iter()
                            .any(|r| u >= r[0] && u < r[1] && v >= r[2] && v < r[3])
                        {
                            let max = if d.is_finite() { d } else { MAX_DEPTH };
                            if let (Some(hc), hd) =
                                self.shade(world, &qp, origin, self.dirs[v * w + u], max)
                            {
                                c = hc;
                                d = hd;
                            }
                        }
                        rgb_row[u * 3..u * 3 + 3].copy_from_slice(&c);
                        if let Some(dr) = depth_row.as_deref_mut() {
                            dr[u] = d;
                        }
                    }
                }
            }
            _ => {
                // One query pipeline per thread (it borrows the world's broad phase; it is not shared).
                let qp = world.phys.query_pipeline();
                for (v, rgb_row, mut depth_row) in rows {
                    for u in 0..w {
                        let dir = self.dirs[v * w + u];
                        let (c, d) = self.shade(world, &qp, origin, dir, MAX_DEPTH);
                        let c = c.unwrap_or_else(|| sky(origin, dir));
                        rgb_row[u * 3..u * 3 + 3].copy_from_slice(&c);
                        if let Some(dr) = depth_row.as_deref_mut() {
                            dr[u] = d;
                        }
                    }
                }
            }
        }
    }
}

#[inline]
fn to_u8(x: f32) -> u8 {
    (x.clamp(0.0, 1.0) * 255.0 + 0.5) as u8
}

/// Background colour for rays that hit nothing (a vertical gradient).
fn sky(_origin: Vec3, dir: Vec3) -> [u8; 3] {
    let t = 0.5 + 0.5 * dir.z;
    [
        to_u8(0.55 + 0.25 * t),
        to_u8(0.62 + 0.25 * t),
        to_u8(0.75 + 0.2 * t),
    ]
}

type Row<'a> = (usize, &'a mut [u8], Option<&'a mut [f32]>);

fn split_rows<'a>(rgb: &'a mut [u8], dep: &'a mut [f32], w: usize, depth: bool) -> Vec<Row<'a>> {
    let rgb_rows = rgb.chunks_mut(w * 3);
    if depth {
        rgb_rows
            .zip(dep.chunks_mut(w))
            .enumerate()
            .map(|(i, (r, d))| (i, r, Some(d)))
            .collect()
    } else {
        rgb_rows.enumerate().map(|(i, r)| (i, r, None)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SimConfig, Task};
    use rand::SeedableRng;

    #[test]
    fn cached_fixed_scene_renders_like_a_full_cast() {
        for task in Task::ALL {
            let cfg = SimConfig::new(task).with_resolution(48, 36);
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            let mut world = World::new(&cfg, &mut rng);
            world.control(Vec3::new(0.02, 0.01, -0.05), 0.03);
            for c in cfg.cameras.iter().filter(|c| c.mount == CameraMount::World) {
                let mut cam_rng = ChaCha8Rng::seed_from_u64(1);
                let full = Camera::new(c, 0.0, &mut cam_rng);
                let mut cached = full.clone();
                cached.prepare_static(&world);
                let a = full.render(&world, true, 1);
                let b = cached.render(&world, true, 2);
                let differ = a
                    .rgb
                    .pixels()
                    .zip(b.rgb.pixels())
                    .filter(|(x, y)| x != y)
                    .count();
                assert!(differ <= 2, "{task} {}: {differ} pixels differ", c.name);
            }
        }
    }

    #[test]
    fn intrinsics_follow_the_field_of_view() {
        let c = CameraConfig::fixed("x", [1.0, 0.0, 0.5], [0.0; 3], 64, 48);
        let [fx, fy, cx, cy] = c.intrinsics();
        assert_eq!((cx, cy), (32.0, 24.0));
        assert!((fx - 24.0 / (25f32.to_radians()).tan()).abs() < 1e-3 && fx == fy);
    }
}
