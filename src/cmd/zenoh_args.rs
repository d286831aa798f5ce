//! zenoh flags shared by run, serve and replay: an embedded peer by default; routers with --connect or a
//! config file (e.g. TLS).

use stagewise_stream::{Mode, StreamConfig};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct ZenohArgs {
    /// Robot: a name (the simulator; messages go under `stagewise/<robot>/...`) or, for `run`, a firmware-bridge
    /// URL (`udp://HOST:PORT`, `serial:///dev/ttyACM0[@BAUD]`): the runtime then drives that robot and streams
    /// under `stagewise/<--robot-name>/...`.
    #[arg(long, default_value = "sim0")]
    pub robot: String,
    /// zenoh endpoint to connect to (a router or peer), e.g. tcp/10.0.0.2:7447; repeatable.
    #[arg(long, value_name = "ENDPOINT")]
    pub connect: Vec<String>,
    /// zenoh endpoint to listen on, e.g. tcp/127.0.0.1:7447; repeatable (default: zenoh's peer default).
    #[arg(long, value_name = "ENDPOINT")]
    pub listen: Vec<String>,
    /// zenoh configuration file (JSON5), e.g. router endpoints with TLS; the flags above override it.
    #[arg(long, value_name = "FILE")]
    pub zenoh_config: Option<PathBuf>,
    /// Join as a zenoh client (through routers only) instead of an embedded peer.
    #[arg(long)]
    pub client: bool,
    /// Turn multicast scouting off (find peers only through --connect/--listen).
    #[arg(long)]
    pub no_multicast: bool,
}

impl ZenohArgs {
    /// The firmware-bridge URL when `--robot` names one (a zenoh robot name never contains `://`).
    pub fn robot_url(&self) -> Option<&str> {
        self.robot.contains("://").then_some(self.robot.as_str())
    }

    pub fn config(&self) -> StreamConfig {
        StreamConfig {
            mode: self.client.then_some(Mode::Client),
            connect: self.connect.clone(),
            listen: self.listen.clone(),
            config_file: self.zenoh_config.clone(),
            multicast_scouting: self.no_multicast.then_some(false),
            max_message_size: None,
        }
    }
}
