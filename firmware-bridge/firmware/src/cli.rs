//! The emulator's command line, shared by the `stagewise-emulator` binary and the `stagewise emulator`
//! subcommand (the end-to-end tests start the latter: a binary of the package under test, no nested build).
//!
//! ```text
//! stagewise-emulator --bind 127.0.0.1:9100 --task pick-place --seed 0 --link-key-file robot.key
//! ```
//!
//! Like a robot's firmware it needs the pre-shared link key (`--link-key-file`, or the environment variable
//! `STAGEWISE_LINK_KEY_FILE`; `stagewise robot keygen FILE` makes one); without one it refuses to start unless
//! `--allow-unauthenticated-link` (the public all-zero key; logged as a warning).
//!
//! With the simulator plant it also serves the scene channel (camera frames, object state, scene resets;
//! [`crate::scene`]) over TCP, by default on the same address and port number as the UDP link. This is a
//! program's entry point: it returns `anyhow` errors with context, and the caller sets up logging.

use crate::emulator::{sim_plant_with, Emulator, EmulatorConfig};
use crate::scene::{SceneServer, SceneShared};
use crate::{FirmwareConfig, KinematicPlant};
use anyhow::Context;
use clap::{Args, ValueEnum};
use stagewise_core::Env;
use stagewise_protocol::LinkKey;
use std::format;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::prelude::rust_2021::*;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PlantKind {
    /// The rapier3d simulator (stagewise-sim), headless.
    Sim,
    /// An ideal kinematic 3-axis stage (no physics).
    Kinematic,
}

/// The emulator's command-line arguments (the `stagewise-emulator` binary and `stagewise emulator`).
#[derive(Debug, Clone, Args)]
pub struct EmulatorArgs {
    /// UDP address to listen on.
    #[arg(long, default_value = "127.0.0.1:9100")]
    pub bind: SocketAddr,
    /// Simulator task (pick-place, push-target, stack).
    #[arg(long, default_value = "pick-place")]
    pub task: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, value_enum, default_value = "sim")]
    pub plant: PlantKind,
    /// Firmware control rate, Hz.
    #[arg(long, default_value_t = 1000)]
    pub control_hz: u16,
    /// Link timeout (no authentic frame of the session -> hold), milliseconds.
    #[arg(long, default_value_t = 50)]
    pub link_timeout_ms: u64,
    /// Actor stall timeout (armed, and the host's step counter did not advance -> hold), milliseconds.
    #[arg(long, default_value_t = 500)]
    pub stall_timeout_ms: u64,
    /// File with the pre-shared link key (64 hex digits; `stagewise robot keygen FILE` makes one). The host
    /// (`stagewise run --bridge URL --link-key-file FILE`) needs the same key.
    #[arg(long, value_name = "FILE", env = "STAGEWISE_LINK_KEY_FILE")]
    pub link_key_file: Option<PathBuf>,
    /// Use the public all-zero key instead: no authentication at all. Only for a bench nobody else can reach;
    /// logged as a warning. The host must opt out the same way.
    #[arg(long)]
    pub allow_unauthenticated_link: bool,
    /// Stop after this many seconds (0 = run until killed).
    #[arg(long, default_value_t = 0.0)]
    pub duration_s: f64,
    /// TCP address of the scene channel (camera frames, object state, scene resets) of the simulator plant;
    /// default: the --bind address (same port number, TCP).
    #[arg(long)]
    pub scene_bind: Option<SocketAddr>,
    /// Do not serve the scene channel (the plant then renders nothing).
    #[arg(long)]
    pub no_scene: bool,
    /// Camera resolution of the scene channel (every view); use the same as the simulator run to compare.
    #[arg(long, default_value_t = 96)]
    pub width: u32,
    #[arg(long, default_value_t = 96)]
    pub height: u32,
}

/// The link key of `--link-key-file` / `--allow-unauthenticated-link` (refused: neither, or both).
pub fn link_key(args: &EmulatorArgs) -> anyhow::Result<LinkKey> {
    match (&args.link_key_file, args.allow_unauthenticated_link) {
        (Some(_), true) => anyhow::bail!(
            "--link-key-file and --allow-unauthenticated-link contradict each other: pass one"
        ),
        (Some(path), false) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the link key file {}", path.display()))?;
            let key = LinkKey::parse_hex(&text)
                .with_context(|| format!("link key file {}", path.display()))?;
            let fp = key.fingerprint_hex();
            tracing::info!(
                fingerprint = std::str::from_utf8(&fp).unwrap_or("?"),
                "link key loaded from {}",
                path.display()
            );
            Ok(key)
        }
        (None, true) => {
            tracing::warn!(
                "UNAUTHENTICATED FIRMWARE LINK (--allow-unauthenticated-link): the emulator uses the public all-zero key, so anyone who can reach {} can arm it and send it commands",
                args.bind
            );
            Ok(LinkKey::unauthenticated())
        }
        (None, false) => anyhow::bail!(
            "refusing to start without a link key: pass --link-key-file FILE (64 hex digits; make one with `stagewise robot keygen FILE` and give the host the same file), or --allow-unauthenticated-link on a bench nobody else can reach"
        ),
    }
}

/// Runs the emulator until `--duration-s` has passed (or forever with 0), logging its counters every 5000 ticks.
pub fn run(args: EmulatorArgs) -> anyhow::Result<()> {
    let key = link_key(&args)?;
    let mut fw = FirmwareConfig::cartesian_1khz();
    fw.control_hz = args.control_hz;
    fw.link_timeout_us = args.link_timeout_ms * 1000;
    fw.stall_timeout_us = args.stall_timeout_ms * 1000;
    let cfg = EmulatorConfig {
        firmware: fw,
        bind: args.bind,
        record_commands: false,
        key,
    };
    let mut _scene_server = None;
    let emu = match args.plant {
        PlantKind::Sim => {
            let task: stagewise_sim::Task = args
                .task
                .parse()
                .with_context(|| format!("--task {}", args.task))?;
            let mut sim = if args.no_scene {
                stagewise_sim::SimConfig::headless(task)
            } else {
                stagewise_sim::SimConfig::new(task).with_resolution(args.width, args.height)
            };
            // The same render settings as `stagewise run` on the simulator: identical worlds, identical frames.
            sim.render_threads = 1;
            let mut plant = sim_plant_with(sim, args.control_hz, args.seed)
                .context("building the simulator plant")?;
            if !args.no_scene {
                let spec = plant.env().spec();
                // The robot reports [x, y, z, gripper_width] itself; the scene serves the rest of the state.
                let scene = SceneShared::new(task.name(), spec.views.clone(), &spec.state, 4);
                let bind = args.scene_bind.unwrap_or(args.bind);
                let server = SceneServer::spawn(bind, scene.clone())
                    .with_context(|| format!("binding the scene channel to tcp {bind}"))?;
                tracing::info!(addr = %server.local_addr(), views = spec.views.len(), "scene channel listening (tcp)");
                _scene_server = Some(server);
                plant = plant.with_scene(scene);
            }
            Emulator::spawn(cfg, plant)?
        }
        PlantKind::Kinematic => Emulator::spawn(cfg, KinematicPlant::new([0.0, 0.0, 0.2]))?,
    };
    tracing::info!(addr = %emu.local_addr(), plant = ?args.plant, "firmware emulator listening (udp)");
    let start = Instant::now();
    let mut last = 0u64;
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let log = emu.log();
        let c = log.counters;
        if c.ticks / 5000 != last {
            last = c.ticks / 5000;
            tracing::info!(
                ticks = c.ticks,
                accepted = c.accepted_commands,
                stale = c.stale_commands,
                bad_frames = c.bad_frames,
                rejected_frames = c.rejected(),
                link_losses = c.link_losses,
                actor_stalls = c.actor_stalls,
                estops = c.estops,
                late_ticks = log.late_ticks,
                "status"
            );
        }
        if !emu.is_running() {
            anyhow::bail!("the emulator loop stopped");
        }
        if args.duration_s > 0.0 && start.elapsed().as_secs_f64() >= args.duration_s {
            break;
        }
    }
    let log = emu.stop()?;
    tracing::info!(ticks = log.counters.ticks, "stopped");
    Ok(())
}
