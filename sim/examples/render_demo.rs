//! Writes the reset frame of each task's views as PNGs into DIR (default /tmp/sim_demo).
use stagewise_core::Env;
use stagewise_sim::{save_png, SimConfig, SimEnv, Task};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/sim_demo".into());
    std::fs::create_dir_all(&dir)?;
    for task in Task::ALL {
        let mut env = SimEnv::new(SimConfig::new(task).with_resolution(160, 120))?;
        let obs = env.reset(3)?;
        for v in &obs.views {
            save_png(
                v,
                &std::path::Path::new(&dir).join(format!("{}_{}.png", task, v.name)),
            )?;
        }
    }
    Ok(())
}
