//! `stagewise replay`: puts an episode log back on the stream, byte for byte, on the keys it was published on.

use super::zenoh_args::{Role, ZenohArgs};
use stagewise_runtime::LogReader;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The episode log written by `stagewise run` (named `file`: `--log` is the global log-level flag).
    #[arg(value_name = "LOG_FILE")]
    pub file: PathBuf,
    /// Messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Seconds to wait for a subscriber on the transition key before starting (messages put before a
    /// subscriber is matched are lost).
    #[arg(long, default_value_t = 10.0)]
    pub wait: f64,
    #[command(flatten)]
    pub zenoh: ZenohArgs,
}

pub fn run(a: ReplayArgs) -> anyhow::Result<()> {
    let mut reader = LogReader::open(&a.file)?;
    let node = a.zenoh.open(Role::Listen, None)?;
    let mut first = reader.next_record()?;
    if let Some(r) = &first {
        if !node.wait_for_subscribers(&r.key, Duration::from_secs_f64(a.wait.max(0.0)))? {
            tracing::warn!(key = %r.key, "no subscriber after {} s; replaying anyway", a.wait);
        }
    }
    let period = (a.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / a.rate));
    let mut sent = 0u64;
    while let Some(rec) = first
        .take()
        .map_or_else(|| reader.next_record(), |r| Ok(Some(r)))?
    {
        node.put_bytes(&rec.key, rec.payload)?;
        sent += 1;
        if let Some(p) = period {
            std::thread::sleep(p);
        }
    }
    // Give zenoh a moment to hand the last messages to the network before the session closes.
    std::thread::sleep(Duration::from_millis(300));
    node.close().ok();
    println!("replayed {sent} messages from {}", a.file.display());
    Ok(())
}
