//! Issue 49: a `stagewise` binary installed into a virtualenv (what `pip install` of the wheel does: the binary in
//! `<venv>/bin/`, the onnxruntime and stagewise Python packages in its site-packages, the shipped reward models in
//! `<venv>/share/stagewise/models/`) uses that venv, from any working directory and without flags. The venv here
//! is a real `python -m venv`; its site-packages reach the project's packages (installed by scripts/setup.sh) by
//! symlink and a `.pth` file, and the binary is this build's, linked into its `bin/`. The checkout the binary was
//! built from comes later in the search, so each answer must name the venv's own path.
//! `scripts/wheel-check.sh` does the same with the real wheel (docs/install.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `<venv>/lib/python3.X/site-packages` (the one folder `python -m venv` made).
fn site_packages(venv: &Path) -> PathBuf {
    let lib = venv.join("lib");
    let py = std::fs::read_dir(&lib)
        .unwrap_or_else(|e| panic!("{}: {e}", lib.display()))
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
        })
        .unwrap_or_else(|| panic!("no python3* in {}", lib.display()));
    py.join("site-packages")
}

/// A fresh venv laid out as a wheel install would leave it, with this build's binary in its `bin/`.
fn installed_venv(dir: &Path) -> PathBuf {
    let project_python = root().join(".venv/bin/python");
    let venv = dir.join("env");
    let out = Command::new(&project_python)
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", project_python.display()));
    assert!(out.status.success(), "python -m venv: {}", text(&out));
    let project_site = site_packages(&root().join(".venv"));
    let site = site_packages(&venv);
    // The onnxruntime wheel's package, where the wheel install puts it; the rest of the project's packages
    // (stagewise, torch, ...) through a .pth that adds the project's site-packages after this venv's own.
    std::os::unix::fs::symlink(project_site.join("onnxruntime"), site.join("onnxruntime"))
        .expect("symlink onnxruntime");
    std::fs::write(
        site.join("project_packages.pth"),
        format!(
            "import site; site.addsitedir({:?})\n",
            project_site.display().to_string()
        ),
    )
    .expect("write .pth");
    // The wheel's data files: <venv>/share/stagewise/models.
    std::fs::create_dir_all(venv.join("share/stagewise")).expect("mkdir share");
    std::os::unix::fs::symlink(root().join("models"), venv.join("share/stagewise/models"))
        .expect("symlink models");
    // The binary: hard-linked (a debug build is ~100 MB), copied where the file system refuses.
    let bin = venv.join("bin/stagewise");
    let exe = Path::new(env!("CARGO_BIN_EXE_stagewise"));
    if std::fs::hard_link(exe, &bin).is_err() {
        std::fs::copy(exe, &bin).expect("copy the binary");
    }
    venv
}

/// The binary in a venv's `bin/`, run from an unrelated directory with no discovery variables set.
fn stagewise(venv: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(venv.join("bin/stagewise"))
        .current_dir(cwd)
        .args(["--log", "warn"])
        .args(args)
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("STAGEWISE_PYTHON")
        .env_remove("STAGEWISE_BIN")
        .env_remove("VIRTUAL_ENV")
        .output()
        .expect("run the installed stagewise")
}

#[test]
fn a_binary_in_a_venv_finds_that_venvs_onnx_runtime_python_and_models_from_any_directory() {
    let tmp = tempfile::tempdir().expect("tmp");
    let venv = installed_venv(tmp.path());
    let cwd = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&cwd).expect("mkdir");
    let site = site_packages(&venv);

    let out = stagewise(&venv, &cwd, &["doctor"]);
    let doc = text(&out);
    assert!(out.status.success(), "{doc}");
    let line = |key: &str| -> String {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} line: {doc}"))
            .to_string()
    };
    let ort = site.join("onnxruntime/capi/libonnxruntime.so");
    assert!(
        line("onnxruntime").contains(&ort.display().to_string()),
        "{doc}"
    );
    assert!(
        line("python").contains(&venv.join("bin/python").display().to_string()),
        "{doc}"
    );
    let model = venv.join("share/stagewise/models/push-target/push-target-progress.toml");
    assert!(doc.contains(&model.display().to_string()), "{doc}");

    // The learner module runs from that venv's Python (`python -P -m stagewise.rl --help`, the working directory
    // off its path), and the training module runs there too (its job list; torch is imported by a job).
    let out = stagewise(&venv, &cwd, &["learn", "--help"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--task"),
        "{}",
        text(&out)
    );
    let out = Command::new(venv.join("bin/python"))
        .current_dir(&cwd)
        .args(["-P", "-m", "stagewise.training", "--help"])
        .output()
        .expect("python -m stagewise.training");
    assert!(out.status.success(), "{}", text(&out));

    // The main job with the task's shipped model, from that directory: the model comes from the venv's share/.
    let log = cwd.join("run.swlog");
    let out = stagewise(
        &venv,
        &cwd,
        &[
            "run",
            "--task",
            "push-target",
            "--envs",
            "1",
            "--episodes",
            "1",
            "--no-stream",
            "--log-file",
            log.to_str().expect("utf-8 path"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(log.is_file(), "no episode log: {}", text(&out));
}

/// `cargo install --path .` puts the binary in `~/.cargo/bin/`, beside no venv: it uses the checkout it was
/// compiled from (its `.venv` from scripts/setup.sh, its `models/`), from any directory.
#[test]
fn a_binary_outside_any_venv_uses_the_checkout_it_was_built_from() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bin = tmp.path().join("cargo/bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let exe = Path::new(env!("CARGO_BIN_EXE_stagewise"));
    if std::fs::hard_link(exe, bin.join("stagewise")).is_err() {
        std::fs::copy(exe, bin.join("stagewise")).expect("copy the binary");
    }
    let venv = tmp.path().join("cargo");
    let out = stagewise(&venv, tmp.path(), &["doctor"]);
    let doc = text(&out);
    assert!(out.status.success(), "{doc}");
    let checkout = root();
    for want in [
        checkout.join(".venv/lib"),
        checkout.join(".venv/bin/python"),
        checkout.join("models/push-target/push-target-progress.toml"),
    ] {
        assert!(doc.contains(&want.display().to_string()), "{want:?}: {doc}");
    }
}

/// Where nothing is found the binary says what to do: the ONNX Runtime error names the flags and the install,
/// the missing-model error names `--model` and the places it looked.
#[test]
fn what_is_missing_is_said_with_its_fix() {
    use stagewise_model::runtime::{find_library_in, find_shipped_model_in, models_dirs_with};
    let tmp = tempfile::tempdir().expect("tmp");
    let exe = tmp.path().join("bin/stagewise");
    let e = find_library_in(None, None, Some(&[tmp.path().to_path_buf()]))
        .expect_err("nothing there")
        .to_string();
    for needle in [
        "--ort-lib",
        "ORT_DYLIB_PATH",
        "pip",
        "scripts/setup.sh",
        "stagewise doctor",
        "docs/install.md",
    ] {
        assert!(e.contains(needle), "{needle}: {e}");
    }
    let dirs = models_dirs_with(&exe, None);
    assert_eq!(dirs, vec![tmp.path().join("share/stagewise/models")]);
    let e = find_shipped_model_in("push-target", &dirs)
        .expect_err("no models there")
        .to_string();
    assert!(
        e.contains("--model")
            && e.contains(
                &dirs[0]
                    .join("push-target/push-target-progress.toml")
                    .display()
                    .to_string()
            ),
        "{e}"
    );
}
