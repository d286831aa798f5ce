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
use rapier3d::prelude::Ray;
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
}

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
            let rows: Vec<(usize, &mut [u8], Option<&mut [f32]>)> =
                split_rows(&mut rgb, &mut dep, w, depth);
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

    fn render_rows(
        &self,
        world: &World,
        origin: Vec3,
        rows: Vec<(usize, &mut [u8], Option<&mut [f32]>)>,
    ) {
        // One query pipeline per thread (it borrows the world's broad phase; it is not shared).
        let qp = world.phys.query_pipeline();
        let colliders = &world.phys.colliders;
        let w = self.config.width as usize;
        for (v, rgb_row, mut depth_row) in rows {
            for u in 0..w {
                let dir = self.dirs[v * w + u];
                let ray = Ray::new(origin, dir);
                let (c, d) = match qp.cast_ray_and_get_normal(&ray, MAX_DEPTH, true) {
                    Some((handle, hit)) => {
                        let albedo = colliders
                            .get(handle)
                            .map(|c| unpack_rgb(c.user_data))
                            .unwrap_or([1.0, 0.0, 1.0]);
                        let lambert = hit.normal.dot(self.light).max(0.0);
                        let fog = 1.0 - (hit.time_of_impact / MAX_DEPTH) * 0.3;
                        let k = (AMBIENT + DIFFUSE * lambert) * fog;
                        (
                            [albedo[0] * k, albedo[1] * k, albedo[2] * k],
                            hit.time_of_impact,
                        )
                    }
                    None => {
                        let t = 0.5 + 0.5 * dir.z;
                        (
                            [0.55 + 0.25 * t, 0.62 + 0.25 * t, 0.75 + 0.2 * t],
                            f32::INFINITY,
                        )
                    }
                };
                let px = &mut rgb_row[u * 3..u * 3 + 3];
                for k in 0..3 {
                    px[k] = (c[k].clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
                }
                if let Some(dr) = depth_row.as_deref_mut() {
                    dr[u] = d;
                }
            }
        }
    }
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
