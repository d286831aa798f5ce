//! `stagewise serve`: one simulated env behind zenoh queryables (`stagewise/<robot>/env/reset` and
//! `.../env/step`), for remote learners such as the Python gymnasium adapter.

use super::sim_args::SimEnvArgs;
use super::zenoh_args::ZenohArgs;
use anyhow::Context;
use stagewise_sim::SimEnv;
use stagewise_stream::{EnvAdapter, Keys, Node};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub sim: SimEnvArgs,
    /// Stop after this many seconds (0 = until Ctrl-C).
    #[arg(long, default_value_t = 0.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub zenoh: ZenohArgs,
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let env = SimEnv::new(a.sim.config()).context("building the simulator")?;
    let keys = Keys::new(a.zenoh.robot.clone())?;
    let node = Node::open(&a.zenoh.config()).context("opening the zenoh session")?;
    let server = node.serve_env(&keys, EnvAdapter::new(env))?;
    println!(
        "serving {} on {} and {} (zenoh id {})",
        a.sim.task,
        keys.env_reset(),
        keys.env_step(),
        node.zid()
    );
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
            .context("installing the Ctrl-C handler")?;
    }
    let start = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed)
        && (a.seconds <= 0.0 || start.elapsed().as_secs_f64() < a.seconds)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    node.close().ok();
    Ok(())
}
