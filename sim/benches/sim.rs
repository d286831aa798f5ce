//! Criterion benches: control steps/s of the simulator (expert-driven pick-place) without rendering and with
//! 3 views at 96x96, for 1 env and for N envs on all cores. Run with `cargo bench -p stagewise-sim`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stagewise_core::Env;
use stagewise_sim::{Degradation, Expert, SimConfig, SimEnv, Task, VecEnv};
use std::sync::Mutex;
use std::time::Duration;

struct Driven {
    env: SimEnv,
    expert: Expert,
    seed: u64,
}

impl Driven {
    fn new(cfg: SimConfig, seed: u64) -> Self {
        let mut env = SimEnv::new(cfg).expect("config");
        env.reset(seed).expect("reset");
        Self {
            env,
            expert: Expert::with_seed(Task::PickPlace, Degradation::none(), seed),
            seed,
        }
    }

    fn step(&mut self) {
        let a = self.expert.act_env(&self.env);
        let r = self.env.step(&a).expect("step");
        if r.terminated || r.truncated {
            self.seed += 1;
            self.env.reset(self.seed).expect("reset");
            self.expert = Expert::with_seed(Task::PickPlace, Degradation::none(), self.seed);
        }
    }
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim_1env");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(1));
    let mut d = Driven::new(SimConfig::headless(Task::PickPlace), 0);
    g.bench_function("control_step_headless", |b| b.iter(|| d.step()));
    let mut d = Driven::new(SimConfig::new(Task::PickPlace), 0);
    g.bench_function("control_step_3views_96x96", |b| b.iter(|| d.step()));
    g.finish();
}

fn vectorised(c: &mut Criterion) {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let n = cores.max(2) * 2;
    let mut g = c.benchmark_group(format!("sim_{n}envs_{cores}threads"));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(n as u64));
    for (name, cfg) in [
        (
            "control_step_headless",
            SimConfig::headless(Task::PickPlace),
        ),
        ("control_step_3views_96x96", SimConfig::new(Task::PickPlace)),
    ] {
        let mut v = VecEnv::new(cfg, n, 0).expect("vec env");
        let seeds: Vec<u64> = (0..n as u64).collect();
        v.reset(&seeds).expect("reset");
        let experts: Vec<Mutex<Expert>> = seeds
            .iter()
            .map(|&s| Mutex::new(Expert::with_seed(Task::PickPlace, Degradation::none(), s)))
            .collect();
        let mut next_seed = 1000;
        g.bench_function(name, |b| {
            b.iter(|| {
                let res = v
                    .step_with(|i, env| {
                        experts[i]
                            .lock()
                            .map(|mut e| e.act_env(env).to_vec())
                            .unwrap_or_else(|_| vec![0.0; 4])
                    })
                    .expect("step");
                for (i, r) in res.iter().enumerate() {
                    if r.terminated || r.truncated {
                        next_seed += 1;
                        v.envs_mut()[i].reset(next_seed).expect("reset");
                        if let Ok(mut e) = experts[i].lock() {
                            *e = Expert::with_seed(Task::PickPlace, Degradation::none(), next_seed);
                        }
                    }
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, single, vectorised);
criterion_main!(benches);
