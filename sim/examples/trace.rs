//! Prints a per-step trace of one expert episode (debugging aid).
use stagewise_core::Env;
use stagewise_sim::{Degradation, Expert, SimConfig, SimEnv, Task};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let task: Task = args
        .get(1)
        .map(|s| s.as_str())
        .unwrap_or("pick-place")
        .parse()?;
    let seed: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
    let deg =
        Degradation::preset(args.get(3).map(|s| s.as_str()).unwrap_or("none")).ok_or("preset")?;
    let mut cfg = SimConfig::headless(task);
    cfg.sleeping = std::env::var("NOSLEEP").is_err();
    let mut env = SimEnv::new(cfg)?;
    let mut ex = Expert::with_seed(task, deg, seed);
    env.reset(seed)?;
    for t in 0..400 {
        let a = ex.act_env(&env);
        let r = env.step(&a)?;
        let w = env.world().ok_or("no world")?;
        let p = w.block_pos(0);
        let pp = w.place_point();
        println!(
            "{t:3} st {} prog {:.3} a [{:5.2} {:5.2} {:5.2} {:4.1}] tcp [{:.3} {:.3} {:.3}] w {:.4} att {:?} blk [{:.3} {:.3} {:.4}] place [{:.3} {:.3} {:.4}]",
            r.info.stage.unwrap_or(9), r.info.progress_oracle.unwrap_or(-1.0), a[0], a[1], a[2], a[3],
            w.tcp().x, w.tcp().y, w.tcp().z, w.gripper_width(), w.attached(), p.x, p.y, p.z, pp.x, pp.y, pp.z
        );
        if r.terminated || r.truncated {
            println!(
                "end success {} term {} trunc {}",
                r.info.success, r.terminated, r.truncated
            );
            break;
        }
    }
    Ok(())
}
