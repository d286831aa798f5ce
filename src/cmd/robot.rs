//! `stagewise robot`: operator verbs for a robot behind the firmware bridge. `keygen FILE` makes a link key
//! file; `reset-estop --bridge URL` clears a latched e-stop (an explicit operator action: an env reset never
//! does it). [`LinkKeyArgs`] are the link-key flags `run --bridge URL` shares.

use anyhow::{bail, Context};
use stagewise_bridge::protocol::{FirmwareState, LinkKey};
use stagewise_bridge::{link_key, operator, BridgeConfig, Endpoint};
use std::path::PathBuf;

/// The pre-shared key of the firmware link (`run --bridge URL`, `robot reset-estop`).
#[derive(clap::Args, Debug, Clone)]
pub struct LinkKeyArgs {
    /// With --bridge: file with the pre-shared link key the robot's firmware holds (64 hex digits; make one
    /// with `stagewise robot keygen FILE`). Every frame on the firmware link is authenticated with it.
    #[arg(long, value_name = "FILE", env = "STAGEWISE_LINK_KEY_FILE")]
    pub link_key_file: Option<PathBuf>,
    /// With --bridge: use the public all-zero key instead, i.e. no authentication: anyone who can reach the
    /// robot's link can command it. Only for a bench nobody else can reach; logged as a warning.
    #[arg(long)]
    pub allow_unauthenticated_link: bool,
}

impl LinkKeyArgs {
    /// The key for the robot at `url`; refused without one (unless the explicit, logged opt-out).
    pub fn key(&self, url: &str) -> anyhow::Result<LinkKey> {
        match (&self.link_key_file, self.allow_unauthenticated_link) {
            (Some(_), true) => bail!(
                "--link-key-file and --allow-unauthenticated-link contradict each other: pass one"
            ),
            (Some(path), false) => {
                let key = link_key::load(path)?;
                tracing::info!(
                    fingerprint = %link_key::fingerprint(&key),
                    "firmware link key from {}",
                    path.display()
                );
                Ok(key)
            }
            (None, true) => {
                tracing::warn!(
                    "UNAUTHENTICATED FIRMWARE LINK (--allow-unauthenticated-link): the link to {url} uses the public all-zero key, so anyone who can reach it can arm the robot and send it commands"
                );
                Ok(LinkKey::unauthenticated())
            }
            (None, false) => bail!(
                "refusing to drive the robot at {url} over an unauthenticated link: pass --link-key-file FILE (the key its firmware holds; `stagewise robot keygen FILE` makes one, `stagewise emulator --link-key-file FILE` uses it), or --allow-unauthenticated-link on a bench nobody else can reach"
            ),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct RobotArgs {
    #[command(subcommand)]
    pub command: RobotCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum RobotCommand {
    /// Make a new random link key file (mode 0600; an existing file is never overwritten). The robot's
    /// firmware (or `stagewise emulator --link-key-file`) and `stagewise run --link-key-file` need the same file.
    Keygen {
        /// Where to write the key.
        path: PathBuf,
    },
    /// Clear a latched e-stop (EStopped -> Disarmed; the next run arms it). It opens its own session, so a run
    /// still connected to the robot loses its session: restart the run afterwards.
    ResetEstop {
        /// The robot's firmware bridge: udp://HOST:PORT or serial:///dev/ttyACM0[@BAUD].
        #[arg(long, value_name = "URL")]
        bridge: String,
        #[command(flatten)]
        key: LinkKeyArgs,
        /// Seconds to wait for the handshake and each answer.
        #[arg(long, default_value_t = 2.0)]
        robot_timeout: f64,
    },
}

pub fn run(a: RobotArgs) -> anyhow::Result<()> {
    match a.command {
        RobotCommand::Keygen { path } => {
            let key = link_key::generate(&path)?;
            println!(
                "wrote a new link key to {} (fingerprint {}); give the robot's firmware the same key",
                path.display(),
                link_key::fingerprint(&key)
            );
            Ok(())
        }
        RobotCommand::ResetEstop {
            bridge,
            key,
            robot_timeout,
        } => reset_estop(&bridge, &key, robot_timeout),
    }
}

fn reset_estop(url: &str, key: &LinkKeyArgs, timeout: f64) -> anyhow::Result<()> {
    let endpoint: Endpoint = url.parse().with_context(|| format!("--bridge {url}"))?;
    let key = key.key(url)?;
    if !(timeout > 0.0 && timeout.is_finite()) {
        bail!("--robot-timeout must be > 0 seconds");
    }
    let mut cfg = BridgeConfig::new(key);
    cfg.retries = ((timeout / cfg.reply_timeout.as_secs_f64()).ceil() as u32).max(1);
    let r = operator::reset_estop(&endpoint, cfg)
        .with_context(|| format!("resetting the e-stop of the robot at {url}"))?;
    match r.before {
        FirmwareState::EStopped => println!(
            "e-stop cleared on {url}: the firmware is {:?} (was EStopped); the next run arms it",
            r.after
        ),
        b => println!(
            "no e-stop was latched on {url} (the firmware was {b:?}); it is {:?}",
            r.after
        ),
    }
    Ok(())
}
