//! Throughput figures for benches/sim_vs_mujoco.py, printed as one JSON object:
//! physics steps/s on the comparable scene (gripper + two free boxes on a table, 2 ms step, 10 substeps per
//! 50 Hz control step, the gripper tracing a circle above the boxes), with and without sleeping; control
//! steps/s of the expert-driven pick-place env without rendering and with 3 views at 96x96, for 1 env and
//! for N envs on all cores.
//! `cargo run --release -p stagewise-sim --example sim_throughput [CONTROL_STEPS]`

use stagewise_core::Env;
use stagewise_sim::{Degradation, Expert, SimConfig, SimEnv, Task, VecEnv};
use std::time::Instant;

/// Process CPU seconds (user + system) from /proc/self/stat (Linux, 100 ticks/s); None elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Wall-clock and CPU-time rates of `work` items.
struct Rate {
    wall: f64,
    cpu: f64,
}

fn measure<F: FnOnce() -> Result<u64, Box<dyn std::error::Error>>>(
    f: F,
) -> Result<Rate, Box<dyn std::error::Error>> {
    let c0 = cpu_seconds();
    let t0 = Instant::now();
    let n = f()? as f64;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (c0, cpu_seconds()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => wall,
    };
    Ok(Rate {
        wall: n / wall,
        cpu: n / cpu,
    })
}

fn comparable_scene(steps: u64, sleeping: bool) -> Result<Rate, Box<dyn std::error::Error>> {
    let mut cfg = SimConfig::headless(Task::Stack);
    cfg.sleeping = sleeping;
    cfg.max_steps = u64::MAX;
    let substeps = cfg.substeps;
    let mut env = SimEnv::new(cfg)?;
    env.reset(0)?;
    measure(|| {
        for k in 0..steps {
            let t = k as f32 * 0.02;
            let goal = [
                0.12 * (t * 1.5).cos(),
                0.12 * (t * 1.5).sin(),
                0.15 + 0.03 * (t * 0.7).sin(),
            ];
            let tcp = env.world().ok_or("no world")?.tcp();
            let a = [
                (goal[0] - tcp.x) / 0.006,
                (goal[1] - tcp.y) / 0.006,
                (goal[2] - tcp.z) / 0.006,
                1.0,
            ];
            let a = a.map(|v: f32| v.clamp(-1.0, 1.0));
            env.step(&a)?;
        }
        Ok(steps * substeps as u64)
    })
}

fn expert_env(steps: u64, render: bool) -> Result<Rate, Box<dyn std::error::Error>> {
    let cfg = if render {
        SimConfig::new(Task::PickPlace)
    } else {
        SimConfig::headless(Task::PickPlace)
    };
    let mut env = SimEnv::new(cfg)?;
    let mut seed = 0;
    env.reset(seed)?;
    let mut ex = Expert::with_seed(Task::PickPlace, Degradation::none(), seed);
    measure(|| {
        for _ in 0..steps {
            let a = ex.act_env(&env);
            let r = env.step(&a)?;
            if r.terminated || r.truncated {
                seed += 1;
                env.reset(seed)?;
                ex = Expert::with_seed(Task::PickPlace, Degradation::none(), seed);
            }
        }
        Ok(steps)
    })
}

fn vec_env(n: usize, steps: u64, render: bool) -> Result<Rate, Box<dyn std::error::Error>> {
    let cfg = if render {
        SimConfig::new(Task::PickPlace)
    } else {
        SimConfig::headless(Task::PickPlace)
    };
    let mut v = VecEnv::new(cfg, n, 0)?;
    let seeds: Vec<u64> = (0..n as u64).collect();
    v.reset(&seeds)?;
    let experts: Vec<std::sync::Mutex<Expert>> = seeds
        .iter()
        .map(|&s| std::sync::Mutex::new(Expert::with_seed(Task::PickPlace, Degradation::none(), s)))
        .collect();
    measure(|| {
        for _ in 0..steps {
            let res = v.step_with(|i, env| match experts[i].lock() {
                Ok(mut e) => e.act_env(env).to_vec(),
                Err(_) => vec![0.0; 4],
            })?;
            for (i, r) in res.iter().enumerate() {
                if r.terminated || r.truncated {
                    let s = seeds[i] + 1000;
                    v.envs_mut()[i].reset(s)?;
                    if let Ok(mut e) = experts[i].lock() {
                        *e = Expert::with_seed(Task::PickPlace, Degradation::none(), s);
                    }
                }
            }
        }
        Ok(steps * n as u64)
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let n = cores.max(2) * 2;
    let phys_sleep = comparable_scene(steps, true)?;
    let phys_awake = comparable_scene(steps, false)?;
    let headless = expert_env(steps, false)?;
    let render = expert_env(steps / 5, true)?;
    let vec_headless = vec_env(n, steps / 2, false)?;
    let vec_render = vec_env(n, steps / 20, true)?;
    let mut out = format!("{{\"cores\": {cores}, \"n_envs\": {n}, \"substeps\": 10, \"dt\": 0.002");
    for (key, r) in [
        ("physics_steps_per_s_sleeping", phys_sleep),
        ("physics_steps_per_s_no_sleeping", phys_awake),
        ("control_steps_per_s_headless_1env", headless),
        ("control_steps_per_s_3x96_1env", render),
        ("control_steps_per_s_headless_nenv", vec_headless),
        ("control_steps_per_s_3x96_nenv", vec_render),
    ] {
        out += &format!(
            ", \"{key}\": {:.1}, \"{key}_per_cpu_s\": {:.1}",
            r.wall, r.cpu
        );
    }
    println!("{out}}}");
    Ok(())
}
