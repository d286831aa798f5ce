//! `stagewise sim`: run a scripted expert in the simulator and write the episode as PNG frames per view
//! (`DIR/<view>/frame_00000.png`, ...) plus `DIR/episode.json` (states, actions, oracle stages and progress).

use anyhow::{bail, Context};
use stagewise_sim::{rollout_with, save_png, Degradation, SimConfig, Task};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Simulated task.
    #[arg(long, default_value = "pick-place", value_parser = crate::cli::task_parser())]
    pub task: Task,
    /// Directory to write the frames into (created if missing).
    #[arg(long)]
    pub render: PathBuf,
    /// Episode seed (layout, sizes, colours, masses).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Image width of every view.
    #[arg(long, default_value_t = 160)]
    pub width: u32,
    /// Image height of every view.
    #[arg(long, default_value_t = 120)]
    pub height: u32,
    /// Expert degradation preset: none, noisy, pauses, regress, miss-grasp, wrong-place, freeze, off-table,
    /// near-place, mixed, random.
    #[arg(long, default_value = "none")]
    pub degradation: String,
    #[command(flatten)]
    pub scene: crate::cli::SceneArgs,
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let task = args.task;
    let Some(deg) = Degradation::preset(&args.degradation) else {
        bail!(
            "unknown degradation {:?}: expected one of {}",
            args.degradation,
            Degradation::PRESETS.join(", ")
        );
    };
    let mut cfg = SimConfig::new(task).with_resolution(args.width, args.height);
    cfg.depth = false;
    args.scene.apply(&mut cfg.randomization);
    cfg.render_threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let rec =
        rollout_with(&cfg, args.seed, deg).with_context(|| format!("running the {task} expert"))?;
    std::fs::create_dir_all(&args.render)
        .with_context(|| format!("creating {}", args.render.display()))?;
    let frames = rec
        .frames
        .as_ref()
        .context("the rollout recorded no frames")?;
    for (t, views) in frames.iter().enumerate() {
        for v in views {
            let dir = args.render.join(&v.name);
            if t == 0 {
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let path = dir.join(format!("frame_{t:05}.png"));
            save_png(v, &path).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let json = args.render.join("episode.json");
    std::fs::write(&json, rec.to_json()?).with_context(|| format!("writing {}", json.display()))?;
    let spans: Vec<String> = rec
        .stage_spans()
        .iter()
        .map(|s| format!("{} {}..={}", rec.stage_names[s.stage], s.start, s.end))
        .collect();
    println!(
        "{task} seed {} ({}): {} steps, success {}, {} frames x {} views in {}",
        args.seed,
        args.degradation,
        rec.len(),
        rec.success,
        frames.len(),
        cfg.cameras.len(),
        args.render.display()
    );
    println!("stages: {}", spans.join(", "));
    Ok(())
}
