//! `stagewise learn [ARGS...]`: the policy learners of the Python package (`python -m stagewise.rl`), run by the
//! project venv's Python. Every argument goes to the module as it is (`--help` included: the learner's flags
//! are its own); the child gets `STAGEWISE_BIN` (this executable, for the `stagewise serve` it starts) and
//! `ORT_DYLIB_PATH` (the ONNX Runtime library this executable would load, unless already set). On Unix the
//! process becomes Python (exec): Ctrl-C and the exit code are the learner's own.

use anyhow::Context;
use std::ffi::OsString;
use std::process::Command;

/// The Python module `learn` runs.
pub const MODULE: &str = "stagewise.rl";

#[derive(clap::Args, Debug, Clone)]
#[command(disable_help_flag = true)]
pub struct LearnArgs {
    /// Arguments for `python -m stagewise.rl` (`stagewise learn --help` lists them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The learner's command line: `<python> -P -m stagewise.rl ARGS...` with its environment. `-P`: the working
/// directory is not on Python's path (a `stagewise/` folder where the command runs is not imported).
pub fn command(python: &std::path::Path, args: &[OsString]) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("locating the stagewise executable")?;
    let mut cmd = Command::new(python);
    cmd.args(["-P", "-m", MODULE]).args(args);
    cmd.env("STAGEWISE_BIN", &exe);
    let ort = stagewise_model::runtime::ORT_DYLIB_ENV;
    if std::env::var_os(ort).is_none_or(|v| v.is_empty()) {
        match stagewise_model::runtime::find_library(None) {
            Ok(lib) => {
                cmd.env(ort, lib);
            }
            // The learner may not need it (its `serve` finds the library itself): say so and go on.
            Err(e) => tracing::debug!(error = %e, "no ONNX Runtime library to hand to the learner"),
        }
    }
    Ok(cmd)
}

pub fn run(args: LearnArgs) -> anyhow::Result<()> {
    // STAGEWISE_PYTHON, as `train --python` reads it; every flag here belongs to the learner.
    let explicit = std::env::var_os("STAGEWISE_PYTHON")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    let python = super::python::find_python(explicit.as_deref())
        .context("stagewise learn runs `python -m stagewise.rl`")?;
    // Clap takes the global `--log` out of the subcommand's arguments; the learner gets them as typed.
    let forwarded = forwarded(std::env::args_os()).unwrap_or(args.args);
    let mut cmd = command(&python, &forwarded)?;
    tracing::debug!(command = ?cmd, "learn");
    exec(&mut cmd, &python)
}

/// The arguments after the `learn` word of `stagewise [--log L] learn ARGS...`, as typed (`None`: the command
/// line is not a `learn` one).
pub fn forwarded(argv: impl IntoIterator<Item = OsString>) -> Option<Vec<OsString>> {
    let mut it = argv.into_iter().skip(1);
    loop {
        let a = it.next()?;
        match a.to_str() {
            Some("--log") => {
                it.next()?;
            }
            Some(s) if s.starts_with("--log=") => {}
            Some("learn") => return Some(it.collect()),
            _ => return None,
        }
    }
}

#[cfg(unix)]
fn exec(cmd: &mut Command, python: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    // Returns only when the exec failed.
    let e = cmd.exec();
    Err(e).with_context(|| format!("running {} -m {MODULE}", python.display()))
}

#[cfg(not(unix))]
fn exec(cmd: &mut Command, python: &std::path::Path) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("running {} -m {MODULE}", python.display()))?;
    std::process::exit(status.code().unwrap_or(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(Into::into).collect()
    }

    #[test]
    fn everything_after_learn_is_forwarded_as_typed() {
        let fwd = |s: &[&str]| forwarded(args(s));
        let rest = ["--log", "warn", "--help", "--", "-x"];
        let mut argv = vec!["stagewise", "learn"];
        argv.extend(rest);
        assert_eq!(fwd(&argv), Some(args(&rest)));
        assert_eq!(
            fwd(&["stagewise", "--log", "debug", "learn", "--steps", "5"]),
            Some(args(&["--steps", "5"]))
        );
        assert_eq!(
            fwd(&["stagewise", "--log=debug", "learn"]),
            Some(Vec::new())
        );
        assert_eq!(fwd(&["stagewise", "train", "learn"]), None);
        assert_eq!(fwd(&["stagewise", "--log"]), None);
    }
}
