//! `stagewise serve`: simulated envs behind zenoh queryables (`stagewise/<robot>/env/reset` and
//! `.../env/step`), for remote learners such as the Python gymnasium adapter (`python/`).
//!
//! The reward a learner gets is chosen here (`--reward`): the env's sparse task reward, or progress from the
//! task's reward model or from the simulator's oracle, shaped as `--shaping` says (the same flags as `run`;
//! potential-based by default). The learner takes the served reward as it is. Each served env is a
//! one-env `stagewise_runtime::ShapedEnv`, the reward path of `stagewise run` too; this file parses arguments
//! and answers the queryables. `--envs N` serves N independent envs, each on its own thread (and, with a
//! reward model, its own ONNX Runtime session), under the robot names `<robot>-0 .. <robot>-(N-1)` (`<robot>` is
//! --robot-name, default sim0).

use super::ort_args::OrtArgs;
use super::sim_args::SimEnvArgs;
use super::zenoh_args::{Role, ZenohArgs};
use crate::cli::{RewardSource, ShapingArgs};
use anyhow::{bail, Context};
use stagewise_core::{Env, EnvSpec, Observation};
use stagewise_model::StateMap;
use stagewise_runtime::clock::{Clock, Ticker};
use stagewise_runtime::{ProgressSource, RuntimeError, ShapedEnv};
use stagewise_sim::SimEnv;
use stagewise_stream::wire::{
    EnvSpecMsg, ResetReply, ResetRequest, RewardSpecMsg, StepReply, StepRequest,
};
use stagewise_stream::{EnvHandler, Keys, ObservationMsg};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub sim: SimEnvArgs,
    /// Where the served reward's progress comes from: `sparse` (none: the task reward), `model` (shaped with the
    /// task's shipped reward model, or the manifest given by --model), `oracle` (shaped with the simulator's
    /// ground-truth progress: the upper bound). The same values as `run --reward`; --shaping says how progress
    /// becomes the reward.
    #[arg(long, value_enum, default_value_t = RewardSource::Sparse)]
    pub reward: RewardSource,
    /// Reward model manifest for `--reward model` (default: the task's shipped model, models/<task>/<task>-progress.toml
    /// of the checkout the binary was built from or <venv>/share/stagewise/models of a pip install).
    #[arg(long, value_name = "MANIFEST")]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub shaping: ShapingArgs,
    /// Environments served, each on its own thread; with N > 1 env i answers as robot `<robot-name>-<i>`.
    #[arg(long, default_value_t = 1)]
    pub envs: usize,
    /// Put the camera frames on the observations (default: state only; the spec then lists no views).
    #[arg(long)]
    pub images: bool,
    /// Seed of env i's first server-chosen reset is seed + i; later ones count up by --envs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Pace each env's steps at this rate like a real robot (0 = as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    pub hz: f64,
    /// Stop after this many seconds (0 = until Ctrl-C).
    #[arg(long, default_value_t = 0.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub zenoh: ZenohArgs,
    #[command(flatten)]
    pub ort: OrtArgs,
}

/// One served env: a one-env [`ShapedEnv`] (simulator, progress source, shaper) and what its replies carry.
struct ServedEnv {
    shaped: ShapedEnv,
    spec: EnvSpecMsg,
    reward: RewardSpecMsg,
    images: bool,
    next_seed: u64,
    seed_step: u64,
    ticker: Ticker,
}

/// A reply's error: the env's own message for an env error (no `environment 0:` prefix: a served env is one).
fn reply_error(e: RuntimeError) -> String {
    match e {
        RuntimeError::Env { source, .. } => stagewise_core::ErrorChain(&source).to_string(),
        e => stagewise_core::ErrorChain(&e).to_string(),
    }
}

impl ServedEnv {
    fn obs_msg(&self, obs: Observation) -> ObservationMsg {
        let mut msg = ObservationMsg::from_observation_owned(obs);
        if !self.images {
            msg.images = Default::default();
        }
        msg.depth = Default::default();
        msg
    }
}

impl EnvHandler for ServedEnv {
    fn reset(&mut self, req: &ResetRequest) -> ResetReply {
        let seed = req.seed.unwrap_or_else(|| {
            let s = self.next_seed;
            self.next_seed = self.next_seed.wrapping_add(self.seed_step);
            s
        });
        let r = match self.shaped.reset_one(0, seed) {
            Ok(r) => r,
            Err(e) => return ResetReply::error(reply_error(e)),
        };
        ResetReply {
            spec: Some(self.spec.clone()),
            obs: Some(self.obs_msg(r.obs)),
            reward: Some(self.reward.clone()),
            phi: r.progress.map(|p| f64::from(p.phi)),
            ..ResetReply::default()
        }
    }

    fn step(&mut self, req: &StepRequest) -> StepReply {
        self.ticker.tick();
        let out = match self.shaped.step(&[req.action.as_slice()]) {
            Ok(mut out) => out.remove(0),
            Err(e) => return StepReply::error(reply_error(e)),
        };
        let (step, shaped) = (out.result, out.shaped);
        let task_reward = step.reward;
        let mut reply = StepReply {
            reward: task_reward,
            terminated: step.terminated,
            truncated: step.truncated,
            info: (&step.info).into(),
            ..StepReply::default()
        };
        // Sparse: the env's reward as it is, and no progress.
        if let Some(p) = out.progress {
            reply.reward = shaped.reward;
            reply.task_reward = Some(task_reward);
            reply.phi = Some(f64::from(p.phi));
        }
        reply.obs = Some(self.obs_msg(step.obs));
        reply
    }
}

fn spec_msg(spec: &EnvSpec, images: bool) -> EnvSpecMsg {
    let mut m = EnvSpecMsg::from(spec);
    if !images {
        m.views.clear();
    }
    m
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    if a.envs == 0 {
        bail!("--envs must be >= 1");
    }
    // The shaper checks gamma, the scale and the form (sparse serves the task reward but keeps the same checks).
    let shaping = a.shaping.config()?;
    if a.reward == RewardSource::Sparse && a.shaping.names_a_form() {
        bail!("--reward sparse has no progress to shape: drop --shaping and its parameters (or pass --reward model|oracle)");
    }
    let mut cfg = a.sim.config();
    // Render only when someone reads the frames; depth is never served.
    cfg.render = a.images || a.reward == RewardSource::Model;
    cfg.depth = false;
    let manifest = match (a.reward, &a.model) {
        (RewardSource::Model, Some(m)) => Some(m.clone()),
        (RewardSource::Model, None) => Some(stagewise_model::runtime::find_shipped_model(
            a.sim.task.name(),
        )?),
        (_, Some(_)) => bail!("--model needs --reward model"),
        _ => None,
    };
    let mut reward = RewardSpecMsg {
        source: a.reward.name().to_string(),
        model: manifest.as_ref().map(|m| m.display().to_string()),
        gamma: shaping.gamma,
        shaping_scale: 0.0,
        ..RewardSpecMsg::default()
    };
    if a.reward != RewardSource::Sparse {
        reward.shaping_scale = shaping.scale;
        reward = reward.with_mode(&shaping.mode);
    }
    let base = Keys::new(a.zenoh.robot_name())?;
    let node = a.zenoh.open(Role::Listen, None)?;
    let mut servers = Vec::with_capacity(a.envs);
    for i in 0..a.envs {
        let env = SimEnv::new(cfg.clone()).context("building the simulator")?;
        let progress = match (a.reward, &manifest) {
            (RewardSource::Oracle, _) => ProgressSource::Oracle,
            (_, Some(m)) => {
                let mut model = a.ort.load_reward_model(m)?;
                // The model's state by name from the simulator's (refused here, naming the field it lacks).
                let source = format!("the simulator's state (task {})", env.spec().task);
                let map =
                    StateMap::bind_source(model.manifest(), &source, &env.spec().state.names, None)
                        .with_context(|| format!("binding the state fields of {}", m.display()))?;
                model.set_state_map(map)?;
                ProgressSource::Model(Box::new(model))
            }
            _ => ProgressSource::Sparse,
        };
        let keys = if a.envs == 1 {
            base.clone()
        } else {
            Keys::new(format!("{}-{i}", base.robot()))?
        };
        let handler = ServedEnv {
            spec: spec_msg(env.spec(), a.images),
            shaped: ShapedEnv::new(vec![Box::new(env) as Box<dyn Env>], progress, shaping)?,
            reward: reward.clone(),
            images: a.images,
            next_seed: a.seed.wrapping_add(i as u64),
            seed_step: a.envs as u64,
            ticker: Ticker::new(Clock::from_hz(a.hz)),
        };
        servers.push(node.serve_env(&keys, handler)?);
        println!(
            "serving {} ({} reward{}) on {} and {}",
            a.sim.task,
            a.reward,
            reward
                .shaping
                .as_deref()
                .map(|s| format!(", {s} shaping"))
                .unwrap_or_default(),
            keys.env_reset(),
            keys.env_step()
        );
    }
    println!("zenoh id {}", node.zid());
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
    drop(servers);
    node.close().ok();
    Ok(())
}
