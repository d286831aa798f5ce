//! `stagewise view [ARGS...]`: a run, an episode log or a LeRobot dataset in Rerun (`python -m stagewise.view`,
//! run by the project venv's Python like `learn`; every argument goes to the module as it is, docs/view.md).
//! Also the viewer child of `run --rerun`: a `stagewise.view live` process started beside the actor, subscribed to
//! its stream at a lower CPU priority. The actor never waits for it: it is not waited for beyond a bounded
//! start-up, a viewer that fails is reported and the run goes on, and at the end it gets a bounded time to
//! finish writing.

use anyhow::{bail, Context};
use stagewise_runtime::FrameStream;
use stagewise_stream::StreamConfig;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The Python module `view` runs.
pub const MODULE: &str = "stagewise.view";

/// Where `stagewise view` and `rerun` listen for SDKs by default.
pub const DEFAULT_VIEWER: &str = "127.0.0.1:9876";

#[derive(clap::Args, Debug, Clone)]
#[command(disable_help_flag = true)]
pub struct ViewArgs {
    /// Arguments for `python -m stagewise.view` (`stagewise view --help` lists them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

pub fn run(args: ViewArgs) -> anyhow::Result<()> {
    super::learn::run_module(MODULE, "view", args.args)
}

/// Where a recording goes (`--rerun MODE [ARG]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RerunSink {
    /// A Rerun viewer started on this machine (needs a display).
    Spawn,
    /// A viewer (or `rerun --serve-grpc`) already listening at `HOST:PORT` or a `rerun+http://` URL.
    Connect(String),
    /// An `.rrd` file.
    Save(PathBuf),
}

impl RerunSink {
    /// `spawn`, `connect [ADDR]` or `save FILE.rrd`.
    pub fn parse(words: &[String]) -> anyhow::Result<Self> {
        match words {
            [m] if m == "spawn" => Ok(Self::Spawn),
            [m] if m == "connect" => Ok(Self::Connect(DEFAULT_VIEWER.into())),
            [m, addr] if m == "connect" => Ok(Self::Connect(addr.clone())),
            [m, file] if m == "save" => Ok(Self::Save(file.into())),
            _ => bail!(
                "--rerun {}: expected `spawn`, `connect [ADDR]` (default {DEFAULT_VIEWER}) or `save FILE.rrd`",
                words.join(" ")
            ),
        }
    }

    fn args(&self) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec!["--rerun".into()];
        match self {
            Self::Spawn => v.push("spawn".into()),
            Self::Connect(a) => v.extend(["connect".into(), a.into()]),
            Self::Save(p) => v.extend(["save".into(), p.into()]),
        }
        v
    }
}

/// How the viewer reaches the actor's zenoh session: its listening endpoint (on loopback when it listens on
/// every interface), else the routers it connects to, else its config file.
pub fn viewer_endpoints(config: &StreamConfig) -> anyhow::Result<Vec<OsString>> {
    let mut args: Vec<OsString> = Vec::new();
    let fixed = config.listen.iter().find(|e| {
        e.rsplit_once(':')
            .is_some_and(|(_, port)| port.parse::<u16>().is_ok_and(|p| p != 0))
    });
    if let Some(e) = fixed {
        let e = e.replace("0.0.0.0", "127.0.0.1").replace("[::]", "[::1]");
        args.extend(["--connect".into(), e.into()]);
    } else {
        for e in &config.connect {
            args.extend(["--connect".into(), e.into()]);
        }
    }
    if let Some(f) = &config.config_file {
        args.extend(["--zenoh-config".into(), f.into()]);
    }
    if args.is_empty() {
        bail!(
            "--rerun: this run listens on no fixed endpoint and connects nowhere, so its viewer cannot reach it: \
             pass --listen tcp/127.0.0.1:PORT"
        );
    }
    Ok(args)
}

/// `run --rerun` (without `--stream-images`) puts RGB frames (no depth) on every 10th step of an episode and its
/// last (`serve --rerun` sends them by time instead, `--rerun-frames-per-s`): 5 frames/s per env at a 50 Hz control rate
/// (a person watching follows that), about a twentieth of the bytes of every step's RGB and depth.
pub const VIEWER_FRAMES: FrameStream = FrameStream::Sampled { every: 10 };

/// `serve --rerun` sends a served env's steps in a batch when its last batch went out this long ago (and at an
/// episode's end): a learner steps as fast as it can, often hundreds of steps a second per env, where a message a
/// step would cost the viewer more than the learner (docs/view.md, "cost").
pub const VIEWER_BATCH_GAP: Duration = Duration::from_millis(100);

/// How long `run`/`serve --rerun` wait for their viewer to subscribe before the first step (Python, rerun and zenoh
/// start in a few seconds on a busy machine), and how long they give the viewer to finish at the end.
pub const VIEWER_START: Duration = Duration::from_secs(30);
pub const VIEWER_FINISH: Duration = Duration::from_secs(60);

/// The `stagewise view live` child of `run --rerun` and `serve --rerun`.
pub struct LiveViewer {
    child: Child,
    /// Closed when the run ends: the viewer then shows what it has and exits.
    stdin: Option<ChildStdin>,
    /// Its early exit was already reported.
    reported: bool,
}

impl LiveViewer {
    /// Starts `python -m stagewise.view live` for the streams of `robots` at `endpoints`, sending to `sink`
    /// (with more than one robot, the viewer puts each under its robot's name).
    pub fn spawn(
        sink: &RerunSink,
        robots: &[&str],
        endpoints: Vec<OsString>,
    ) -> anyhow::Result<Self> {
        let python =
            super::learn::project_python("--rerun starts `python -m stagewise.view live`")?;
        let mut args: Vec<OsString> = vec!["live".into()];
        for robot in robots {
            args.extend(["--robot".into(), (*robot).into()]);
        }
        args.extend(endpoints);
        args.push("--until-stdin-closes".into());
        args.extend(sink.args());
        let mut cmd = super::learn::module_command(&python, MODULE, &args)?;
        cmd.stdin(Stdio::piped());
        tracing::debug!(command = ?cmd, "rerun viewer");
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {} -m {MODULE} live", python.display()))?;
        let stdin = child.stdin.take();
        Ok(Self {
            child,
            stdin,
            reported: false,
        })
    }

    /// The viewer's exit status, when it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until `subscribed(slice)` says the viewer's subscriber is matched, the viewer exits, or `timeout`
    /// passes; whether it subscribed. Bounded: a viewer that never comes costs the run `timeout` at most.
    pub fn wait_subscribed(
        &mut self,
        timeout: Duration,
        subscribed: impl Fn(Duration) -> bool,
    ) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if subscribed(Duration::from_millis(200)) {
                return true;
            }
            if let Some(status) = self.exited() {
                self.reported = true;
                tracing::warn!(
                    "the Rerun viewer exited ({status}) before it subscribed (its error is above): the run goes \
                     on without it"
                );
                return false;
            }
        }
        tracing::warn!(
            "the Rerun viewer did not subscribe within {timeout:?}: the run goes on (it may still join)"
        );
        false
    }

    /// Tells the viewer the run is over (its stdin closes), gives it `timeout` to show what it has, then stops
    /// it; reports how it ended.
    pub fn finish(mut self, timeout: Duration) {
        drop(self.stdin.take());
        let end = Instant::now() + timeout;
        loop {
            match self.exited() {
                Some(s) if s.success() || self.reported => return,
                Some(s) => {
                    tracing::warn!(
                        "the Rerun viewer exited with {s} (its error is above); the run was not affected"
                    );
                    return;
                }
                None if Instant::now() >= end => break,
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        tracing::warn!("the Rerun viewer did not finish within {timeout:?}: stopping it");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn rerun_sinks_parse_and_bad_ones_name_the_choices() {
        assert_eq!(
            RerunSink::parse(&words(&["spawn"])).unwrap(),
            RerunSink::Spawn
        );
        assert_eq!(
            RerunSink::parse(&words(&["connect"])).unwrap(),
            RerunSink::Connect(DEFAULT_VIEWER.into())
        );
        assert_eq!(
            RerunSink::parse(&words(&["save", "a.rrd"])).unwrap(),
            RerunSink::Save("a.rrd".into())
        );
        for bad in [&["save"][..], &["spawn", "x"], &["show"], &[]] {
            let e = RerunSink::parse(&words(bad)).unwrap_err().to_string();
            assert!(e.contains("spawn") && e.contains("save FILE.rrd"), "{e}");
        }
    }

    #[test]
    fn the_viewer_connects_where_the_run_listens_or_to_its_routers() {
        let mut c = StreamConfig {
            mode: None,
            connect: vec![],
            listen: vec!["tcp/0.0.0.0:7447".into()],
            config_file: None,
            multicast_scouting: Some(false),
            max_message_size: None,
        };
        assert_eq!(
            viewer_endpoints(&c).unwrap(),
            vec![OsString::from("--connect"), "tcp/127.0.0.1:7447".into()]
        );
        c.listen = vec!["tcp/127.0.0.1:0".into()];
        c.connect = vec!["tcp/10.0.0.1:7447".into()];
        assert_eq!(
            viewer_endpoints(&c).unwrap(),
            vec![OsString::from("--connect"), "tcp/10.0.0.1:7447".into()]
        );
        c.connect.clear();
        let e = viewer_endpoints(&c).unwrap_err().to_string();
        assert!(e.contains("--listen"), "{e}");
    }
}
