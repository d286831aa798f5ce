//! The project's Python for the subcommands that run the Python package (`train`, `adapt`: `python -m
//! stagewise.training`; `learn`: `python -m stagewise.rl`). Found in the same venv list as the ONNX Runtime
//! library (`stagewise_model::runtime::venv_candidates`: from the executable's path and the checkout it was built
//! from, never the working directory), and run with `-P` so the working directory is not on Python's path either.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The project's Python: `explicit` (`--python` / `STAGEWISE_PYTHON`) as given, else the first
/// `<venv>/bin/python` of the executable's venv candidates (the list that also finds ONNX Runtime) that has the
/// `stagewise` package.
pub fn find_python(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!(
                "{}: no such Python (named by --python or STAGEWISE_PYTHON); run scripts/setup.sh for the \
                 project's .venv, or name a Python that has the stagewise package",
                p.display()
            );
        }
        return Ok(p.to_owned());
    }
    let exe = std::env::current_exe().context("locating the stagewise executable")?;
    pick_python(&stagewise_model::runtime::venv_candidates(&exe))
}

/// The first `<venv>/bin/python` of `venvs` that can import `stagewise`; the error names every place tried.
fn pick_python(venvs: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let mut tried = Vec::new();
    for v in venvs {
        let py = v.join("bin/python");
        if !py.is_file() {
            tried.push(format!("{}: no such file", py.display()));
        } else if has_stagewise(&py) {
            return Ok(py);
        } else {
            tried.push(format!("{}: has no stagewise package", py.display()));
        }
    }
    bail!(
        "no Python with the stagewise package found (tried {}); run scripts/setup.sh in the checkout (it makes \
         .venv with the package and its pinned dependencies), install stagewise into a virtualenv with pip (the \
         binary then finds that venv: docs/install.md), or name a Python with STAGEWISE_PYTHON",
        if tried.is_empty() {
            "nothing: the executable's path has no parent".to_string()
        } else {
            tried.join("; ")
        }
    )
}

/// Whether `python` can import the `stagewise` package (found without importing it). `-P`: the working directory
/// is not on its path, so a `stagewise/` folder where the command runs does not count.
fn has_stagewise(python: &Path) -> bool {
    Command::new(python)
        .args([
            "-P",
            "-c",
            "import importlib.util as u, sys; sys.exit(u.find_spec('stagewise') is None)",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in interpreter that answers every question with "no" (exit 1), like a Python without the package.
    #[cfg(unix)]
    fn refusing_python(venv: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(venv.join("bin")).expect("mkdir");
        let p = venv.join("bin/python");
        std::fs::write(&p, "#!/bin/sh\nexit 1\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    #[cfg(unix)]
    #[test]
    fn the_first_venv_whose_python_has_the_package_is_taken_and_the_error_names_every_place_tried()
    {
        let tmp = tempfile::tempdir().expect("tmp");
        let none = tmp.path().join("none/.venv");
        let without = tmp.path().join("without");
        refusing_python(&without);
        let e = pick_python(&[none.clone(), without.clone()])
            .expect_err("no Python with the package")
            .to_string();
        assert!(
            e.contains(&format!(
                "{}: no such file",
                none.join("bin/python").display()
            )) && e.contains(&format!(
                "{}: has no stagewise package",
                without.join("bin/python").display()
            )) && e.contains("scripts/setup.sh")
                && e.contains("STAGEWISE_PYTHON"),
            "{e}"
        );
        // The project's own venv (scripts/setup.sh, which the tests need anyway) has it.
        let checkout = stagewise_model::runtime::build_checkout().expect("checkout");
        let venv = checkout.join(".venv");
        assert_eq!(
            pick_python(&[none, without, venv.clone()]).expect("found"),
            venv.join("bin/python")
        );
    }
}
