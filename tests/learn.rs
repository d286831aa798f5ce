//! `stagewise learn`: the Rust side of the learner command. It runs `python -m stagewise.rl` from the project's
//! venv with every argument as typed, `STAGEWISE_BIN` and `ORT_DYLIB_PATH` in its environment, and its exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `stagewise learn ARGS` from a scratch directory, with `STAGEWISE_PYTHON` and `ORT_DYLIB_PATH` as given (unset
/// when `None`).
fn learn(cwd: &Path, args: &[&str], python: Option<&Path>, ort: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stagewise"));
    cmd.current_dir(cwd).arg("learn").args(args);
    cmd.env_remove("STAGEWISE_PYTHON")
        .env_remove("ORT_DYLIB_PATH");
    if let Some(p) = python {
        cmd.env("STAGEWISE_PYTHON", p);
    }
    if let Some(o) = ort {
        cmd.env("ORT_DYLIB_PATH", o);
    }
    cmd.output().expect("run stagewise learn")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A stand-in interpreter (a shell script): prints what it was given and exits with 7.
#[cfg(unix)]
fn echo_python(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("python");
    std::fs::write(
        &p,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"arg=$a\"; done\necho \"bin=$STAGEWISE_BIN\"\n\
         echo \"ort=$ORT_DYLIB_PATH\"\nexit 7\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn a_missing_python_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-venv/bin/python");
    let out = learn(tmp.path(), &["--help"], Some(&missing), None);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains(&missing.display().to_string())
            && stderr.contains("STAGEWISE_PYTHON")
            && stderr.contains("scripts/setup.sh")
            && stderr.contains("python -m stagewise.rl"),
        "{stderr}"
    );
}

/// Every argument reaches Python as typed (the global `--log` and `--help` included), with this executable and
/// the discovered ONNX Runtime library in the environment, and Python's exit code comes back.
#[cfg(unix)]
#[test]
fn arguments_environment_and_exit_code_pass_through() {
    let tmp = tempfile::tempdir().unwrap();
    let py = echo_python(tmp.path());
    let args = [
        "--log",
        "warn",
        "--help",
        "--task",
        "push-target",
        "--",
        "-x",
    ];
    let out = learn(tmp.path(), &args, Some(&py), None);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    let got: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("arg="))
        .collect();
    let mut want = vec!["-P", "-m", "stagewise.rl"];
    want.extend(args);
    assert_eq!(got, want, "{stdout}");
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_stagewise")).unwrap();
    let bin = stdout.lines().find_map(|l| l.strip_prefix("bin=")).unwrap();
    assert_eq!(std::fs::canonicalize(bin).unwrap(), exe, "{stdout}");
    // Unset: the library this executable loads (the project's venv, found from the executable).
    let ort = stdout.lines().find_map(|l| l.strip_prefix("ort=")).unwrap();
    assert!(
        ort.contains("onnxruntime/capi/libonnxruntime.so") && Path::new(ort).is_file(),
        "{stdout}"
    );
    // Set: left as it is.
    let out = learn(
        tmp.path(),
        &[],
        Some(&py),
        Some("/opt/ort/libonnxruntime.so.1.31.1"),
    );
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("ort=/opt/ort/libonnxruntime.so.1.31.1\n"),
        "{stdout}"
    );
}

/// `stagewise learn --help` runs the project venv's Python on the `stagewise.rl` module. Until that package is
/// in the tree, Python's own "No module named" error (and its exit code) comes back.
#[test]
fn help_reaches_the_python_module() {
    let tmp = tempfile::tempdir().unwrap();
    let out = learn(tmp.path(), &["--help"], None, None);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // stagewise.rl's own help (argparse), not clap's: its program name and flags that only the learner has.
    assert!(
        stdout.contains("python -m stagewise.rl")
            && stdout.contains("--resume")
            && stdout.contains("--potential-scale"),
        "{stdout}"
    );
}
