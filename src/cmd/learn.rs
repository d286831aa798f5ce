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

/// `<python> -P -m MODULE ARGS...` with the environment every Python subcommand gets. `-P`: the working
/// directory is not on Python's path (a `stagewise/` folder where the command runs is not imported).
pub fn module_command(
    python: &std::path::Path,
    module: &str,
    args: &[OsString],
) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("locating the stagewise executable")?;
    let mut cmd = Command::new(python);
    cmd.args(["-P", "-m", module]).args(args);
    cmd.env("STAGEWISE_BIN", &exe);
    let ort = stagewise_model::runtime::ORT_DYLIB_ENV;
    if std::env::var_os(ort).is_none_or(|v| v.is_empty()) {
        match stagewise_model::runtime::find_library(None) {
            Ok(lib) => {
                cmd.env(ort, lib);
            }
            // The module may not need it (the learner's `serve` finds the library itself): say so and go on.
            Err(e) => tracing::debug!(error = %e, "no ONNX Runtime library to hand to {module}"),
        }
    }
    Ok(cmd)
}

/// The project's Python (`STAGEWISE_PYTHON`, as `train --python` reads it, else the venv search), for `what`.
pub fn project_python(what: &str) -> anyhow::Result<std::path::PathBuf> {
    let explicit = std::env::var_os("STAGEWISE_PYTHON")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    super::python::find_python(explicit.as_deref()).with_context(|| what.to_string())
}

/// Runs `python -m module` with the arguments after `word` on the command line as typed (clap takes the global
/// `--log` out of the subcommand's arguments), else `parsed`; on Unix this process becomes Python.
pub fn run_module(module: &str, word: &str, parsed: Vec<OsString>) -> anyhow::Result<()> {
    let python = project_python(&format!("stagewise {word} runs `python -m {module}`"))?;
    let forwarded = forwarded_after(std::env::args_os(), word).unwrap_or(parsed);
    let mut cmd = module_command(&python, module, &forwarded)?;
    tracing::debug!(command = ?cmd, "{word}");
    exec(&mut cmd, &python, module)
}

pub fn run(args: LearnArgs) -> anyhow::Result<()> {
    // Every flag here belongs to the learner.
    run_module(MODULE, "learn", args.args)
}

/// The arguments after the subcommand `word` of `stagewise [--log L] WORD ARGS...`, as typed (`None`: the
/// command line is not a `word` one).
pub fn forwarded_after(
    argv: impl IntoIterator<Item = OsString>,
    word: &str,
) -> Option<Vec<OsString>> {
    let mut it = argv.into_iter().skip(1);
    loop {
        let a = it.next()?;
        match a.to_str() {
            Some("--log") => {
                it.next()?;
            }
            Some(s) if s.starts_with("--log=") => {}
            Some(w) if w == word => return Some(it.collect()),
            _ => return None,
        }
    }
}

#[cfg(unix)]
fn exec(cmd: &mut Command, python: &std::path::Path, module: &str) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    // Returns only when the exec failed.
    let e = cmd.exec();
    Err(e).with_context(|| format!("running {} -m {module}", python.display()))
}

#[cfg(not(unix))]
fn exec(cmd: &mut Command, python: &std::path::Path, module: &str) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("running {} -m {module}", python.display()))?;
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
        let fwd = |s: &[&str]| forwarded_after(args(s), "learn");
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
        assert_eq!(
            forwarded_after(args(&["stagewise", "view", "log", "a.swlog"]), "view"),
            Some(args(&["log", "a.swlog"]))
        );
    }
}
