//! zenoh flags shared by run, serve, replay and policy push. Defaults trust nobody: the embedded peer listens on
//! loopback only and does not scout; `--listen`/`--connect` name endpoints, `--scout` turns multicast
//! discovery on, `--open-network` opens a lab network in one flag, `--zenoh-config FILE` (e.g. TLS) decides
//! everything the flags do not. `--robot-name` is the robot's name on the stream (the key prefix
//! `stagewise/<NAME>/`, what policies are signed for); the firmware-bridge URL is `run --bridge`, not a zenoh flag.

use anyhow::Context;
use stagewise_stream::{Mode, Node, StreamConfig, LOOPBACK_EPHEMERAL};
use std::path::PathBuf;

/// The well-known port: where `run`, `serve` and `replay` listen on loopback by default, and where `policy push`
/// and the Python package connect by default.
pub const DEFAULT_PORT: u16 = 7447;

/// What a command does on the network, for its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `run`, `serve`, `replay`: learners connect to it. Listens on `tcp/127.0.0.1:7447` (an ephemeral loopback
    /// port when it connects somewhere itself).
    Listen,
    /// `policy push`: connects to an actor, `tcp/127.0.0.1:7447` by default; listens on an ephemeral loopback port.
    Connect,
}

/// The name `run` streams under when it drives a robot through `--bridge` and no `--robot-name` is given.
pub const DEFAULT_BRIDGE_ROBOT: &str = "robot0";
/// The name everything else uses when no `--robot-name` is given (the simulator).
pub const DEFAULT_SIM_ROBOT: &str = "sim0";

#[derive(clap::Args, Debug, Clone)]
pub struct ZenohArgs {
    /// The robot's name on the stream: messages go under `stagewise/<NAME>/...` and learner policies are signed
    /// for it. Default: `sim0` (`robot0` for `run --bridge URL`).
    #[arg(long, value_name = "NAME")]
    pub robot_name: Option<String>,
    /// zenoh endpoint to connect to (a router or peer), e.g. tcp/10.0.0.2:7447; repeatable. Default: none
    /// (`policy push`: tcp/127.0.0.1:7447).
    #[arg(long, value_name = "ENDPOINT")]
    pub connect: Vec<String>,
    /// zenoh endpoint to listen on, e.g. tcp/127.0.0.1:7448; repeatable. Default: tcp/127.0.0.1:7447 (loopback
    /// only; an ephemeral loopback port with --connect, and for `policy push`).
    #[arg(long, value_name = "ENDPOINT")]
    pub listen: Vec<String>,
    /// zenoh configuration file (JSON5), e.g. mutual TLS with a router; it decides what the flags do not set
    /// (no loopback/scouting defaults are added to it).
    #[arg(long, value_name = "FILE")]
    pub zenoh_config: Option<PathBuf>,
    /// Join as a zenoh client (through routers only) instead of an embedded peer.
    #[arg(long)]
    pub client: bool,
    /// Discover peers by multicast scouting (off by default: only --connect/--listen endpoints are used).
    #[arg(long)]
    pub scout: bool,
    /// A lab network: listen on all interfaces (tcp/0.0.0.0:7447 unless --listen) and scout by multicast.
    /// Anyone on that network can then reach this process: see SECURITY.md (signed policies, mutual TLS).
    #[arg(long)]
    pub open_network: bool,
}

impl ZenohArgs {
    /// The robot's name on the stream, for a command that drives no robot through a bridge (`serve`, `replay`,
    /// `policy push`, and `run` in the simulator): `--robot-name`, else `sim0`.
    pub fn robot_name(&self) -> String {
        self.name_or(DEFAULT_SIM_ROBOT)
    }

    /// The robot's name on the stream for `run`, whose firmware-bridge URL is `bridge` (`run --bridge URL`):
    /// `--robot-name`, else `robot0` with a bridge and `sim0` without.
    pub fn robot_target(&self, bridge: Option<&str>) -> String {
        self.name_or(if bridge.is_some() {
            DEFAULT_BRIDGE_ROBOT
        } else {
            DEFAULT_SIM_ROBOT
        })
    }

    fn name_or(&self, default: &str) -> String {
        self.robot_name
            .clone()
            .unwrap_or_else(|| default.to_string())
    }

    /// The session configuration of a command with `role`.
    pub fn config(&self, role: Role) -> StreamConfig {
        let mut connect = self.connect.clone();
        let mut listen = self.listen.clone();
        let scout = self.scout || self.open_network;
        // A config file decides what the flags leave unsaid; so does client mode (it listens nowhere).
        if self.zenoh_config.is_none() && !self.client {
            if connect.is_empty() && role == Role::Connect && !scout {
                connect.push(format!("tcp/127.0.0.1:{DEFAULT_PORT}"));
            }
            if listen.is_empty() {
                listen.push(match (role, self.open_network, self.connect.is_empty()) {
                    (Role::Listen, true, true) => format!("tcp/0.0.0.0:{DEFAULT_PORT}"),
                    (_, true, _) => "tcp/0.0.0.0:0".to_string(),
                    (Role::Listen, false, true) => format!("tcp/127.0.0.1:{DEFAULT_PORT}"),
                    _ => LOOPBACK_EPHEMERAL.to_string(),
                });
            }
        }
        StreamConfig {
            mode: self.client.then_some(Mode::Client),
            connect,
            listen,
            config_file: self.zenoh_config.clone(),
            multicast_scouting: if scout {
                Some(true)
            } else if self.zenoh_config.is_none() {
                Some(false)
            } else {
                None
            },
            max_message_size: None,
        }
    }

    /// Opens the session of a command with `role`, logging where it listens and connects (a warning when the
    /// network is open); errors say which endpoints were tried.
    pub fn open(&self, role: Role, max_message_size: Option<usize>) -> anyhow::Result<Node> {
        let mut config = self.config(role);
        config.max_message_size = max_message_size;
        let what = Self::describe(&config);
        if self.open_network {
            tracing::warn!("zenoh open to the network (--open-network): {what}");
        } else {
            tracing::info!("zenoh: {what}");
        }
        Node::open(&config).with_context(|| {
            format!("opening the zenoh session ({what}; is another stagewise process listening there? pass --listen tcp/127.0.0.1:PORT)")
        })
    }

    /// Where this session listens, for the start-up log line.
    pub fn describe(config: &StreamConfig) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(", ")
            }
        };
        format!(
            "listen [{}], connect [{}], multicast scouting {}{}",
            list(&config.listen),
            list(&config.connect),
            match config.multicast_scouting {
                Some(true) => "on",
                Some(false) => "off",
                None => "as the config file says",
            },
            config
                .config_file
                .as_ref()
                .map(|p| format!(", config file {}", p.display()))
                .unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        z: ZenohArgs,
    }

    fn args(a: &[&str]) -> ZenohArgs {
        Cli::try_parse_from(std::iter::once("x").chain(a.iter().copied()))
            .expect("parse")
            .z
    }

    #[test]
    fn defaults_are_loopback_without_scouting() {
        let c = args(&[]).config(Role::Listen);
        assert_eq!(c.listen, vec!["tcp/127.0.0.1:7447"]);
        assert!(c.connect.is_empty());
        assert_eq!(c.multicast_scouting, Some(false));
        let c = args(&[]).config(Role::Connect);
        assert_eq!(c.connect, vec!["tcp/127.0.0.1:7447"]);
        assert_eq!(c.listen, vec!["tcp/127.0.0.1:0"]);
        assert_eq!(c.multicast_scouting, Some(false));
        // Connecting somewhere: listen on an ephemeral loopback port, not the well-known one.
        let c = args(&["--connect", "tcp/10.0.0.1:7447"]).config(Role::Listen);
        assert_eq!(c.listen, vec!["tcp/127.0.0.1:0"]);
    }

    #[test]
    fn opening_the_network_is_one_flag() {
        let c = args(&["--open-network"]).config(Role::Listen);
        assert_eq!(c.listen, vec!["tcp/0.0.0.0:7447"]);
        assert_eq!(c.multicast_scouting, Some(true));
        let c = args(&["--open-network"]).config(Role::Connect);
        assert!(c.connect.is_empty());
        assert_eq!(c.multicast_scouting, Some(true));
        let c = args(&["--scout"]).config(Role::Listen);
        assert_eq!(c.listen, vec!["tcp/127.0.0.1:7447"]);
        assert_eq!(c.multicast_scouting, Some(true));
        // A config file decides what the flags do not say.
        let c = args(&["--zenoh-config", "z.json5"]).config(Role::Listen);
        assert!(c.listen.is_empty() && c.connect.is_empty());
        assert_eq!(c.multicast_scouting, None);
        // A client listens nowhere.
        let c = args(&["--client", "--connect", "tcp/10.0.0.1:7447"]).config(Role::Listen);
        assert!(c.listen.is_empty());
    }
}
