//! `stagewise models check`: load a model the way the runtime would and show what it is.

use super::ort_args::OrtArgs;
use stagewise_model::synthetic;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ModelsCommand {
    /// Check a model against its manifest and print provider, tensors and a latency sample.
    Check(CheckArgs),
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The model's manifest (TOML beside the .onnx).
    pub manifest: PathBuf,
    /// Scoring runs for the latency sample (one env, synthetic frames).
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    #[command(flatten)]
    pub ort: OrtArgs,
}

pub fn run(args: ModelsArgs) -> anyhow::Result<()> {
    match args.command {
        ModelsCommand::Check(a) => check(a),
    }
}

fn check(a: CheckArgs) -> anyhow::Result<()> {
    let rt = a.ort.runtime()?;
    let mut model = a.ort.load_reward_model(&a.manifest)?;
    let m = model.manifest().clone();
    println!("model      {}", a.manifest.display());
    println!("onnx       {} (sha256 {} ok)", m.onnx.display(), m.sha256);
    println!(
        "runtime    ONNX Runtime {} from {}",
        rt.version(),
        rt.library().display()
    );
    println!(
        "providers  available: {}",
        rt.available_providers().join(", ")
    );
    println!(
        "provider   {} (requested {})",
        model.provider(),
        a.ort.provider
    );
    println!(
        "kind       {}  views {:?}  frames {} stride {}  state {}",
        m.kind, m.views, m.frames, m.stride, m.state_size
    );
    match m.state_names() {
        Some(names) => println!("state      {}", names.join(", ")),
        None if m.state_size > 0 => println!(
            "state      unnamed: read as the source's vector (binds only to a source of {} fields)",
            m.state_size
        ),
        None => {}
    }
    if let Some(st) = &m.stages {
        println!(
            "stages     {:?}  proportions {:?}  progress {:?}",
            st.names, st.proportions, st.progress
        );
    }
    for (graph, session) in model.graphs() {
        println!("graph      {} ({})", graph.display(), model.form());
        println!("inputs");
        for i in session.inputs() {
            println!("  {:<14} {:?}", i.name(), i.dtype());
        }
        println!("outputs");
        for o in session.outputs() {
            println!("  {:<14} {:?}", o.name(), o.dtype());
        }
    }
    let (w, h) = m
        .image
        .as_ref()
        .map(|i| (i.width, i.height))
        .unwrap_or((64, 64));
    let mut times = Vec::with_capacity(a.runs);
    for step in 0..a.runs.max(1) as u64 {
        let obs = synthetic::observation(&m.views, 0, step, w, h, m.state_size);
        let t0 = Instant::now();
        model.score(&[&obs])?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let pct = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "latency    1 env, {} runs: p50 {:.3} ms  p99 {:.3} ms  (incl. preprocessing, {} intra-op thread(s))",
        times.len(),
        pct(0.5),
        pct(0.99),
        a.ort.threads
    );
    Ok(())
}
