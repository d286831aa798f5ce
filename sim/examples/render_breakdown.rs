//! Where a rendered control step's time goes (expert-driven pick-place, 3 views at 96x96 with depth, one
//! thread): each step is timed, then each view of the same world is rendered once more and timed alone; the
//! rest of the step (physics, oracle, state) is the step minus those renders. Times are this thread's CPU
//! time (Linux /proc/thread-self/schedstat, ns), so a loaded machine does not inflate them.
//! `cargo run --release -p stagewise-sim --example render_breakdown [STEPS]`
use stagewise_core::Env;
use stagewise_sim::{Degradation, Expert, SimConfig, SimEnv, Task};

/// CPU time of this thread in seconds (Linux: /proc/thread-self/schedstat, nanoseconds); 0 elsewhere.
fn cpu() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns * 1e-9)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let mut cfg = SimConfig::new(Task::PickPlace);
    cfg.render = true;
    let depth = cfg.depth;
    let mut env = SimEnv::new(cfg)?;
    let mut seed = 0;
    env.reset(seed)?;
    let mut ex = Expert::with_seed(Task::PickPlace, Degradation::none(), seed);
    let names: Vec<String> = env
        .cameras()
        .iter()
        .map(|c| c.config.name.clone())
        .collect();
    let mut t_view = vec![0f64; names.len()];
    let mut t_step = 0f64;
    let mut t_reset = 0f64;
    for _ in 0..steps {
        let a = ex.act_env(&env);
        let t0 = cpu();
        let r = env.step(&a)?;
        t_step += cpu() - t0;
        let w = env.world().ok_or("world")?;
        for (k, c) in env.cameras().iter().enumerate() {
            let t0 = cpu();
            std::hint::black_box(c.render(w, depth, 1));
            t_view[k] += cpu() - t0;
        }
        if r.terminated || r.truncated {
            seed += 1;
            let t0 = cpu();
            env.reset(seed)?;
            t_reset += cpu() - t0;
            ex = Expert::with_seed(Task::PickPlace, Degradation::none(), seed);
        }
    }
    let n = steps as f64;
    let render: f64 = t_view.iter().sum();
    println!("step incl. render (us CPU): {:.1}", t_step / n * 1e6);
    println!(
        "physics etc = step - renders (us CPU): {:.1}",
        (t_step - render) / n * 1e6
    );
    for (k, name) in names.iter().enumerate() {
        println!("view {name} (us CPU): {:.1}", t_view[k] / n * 1e6);
    }
    println!(
        "reset (us CPU per step, amortised): {:.1}",
        t_reset / n * 1e6
    );
    Ok(())
}
