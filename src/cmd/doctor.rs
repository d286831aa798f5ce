//! `stagewise doctor`: what this binary finds on its own (the ONNX Runtime library, the Python with the
//! `stagewise` package for `learn`/`train`/`adapt`, the shipped reward models), where it looked, and what to do
//! about what is missing. Every lookup is the one the other subcommands make (`stagewise_model::runtime`,
//! [`super::python::find_python`]); the exit code is 1 when something is missing.

use anyhow::{bail, Context};
use stagewise_model::runtime;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// ONNX Runtime library to check instead of the search (as `--ort-lib` of the model commands; default:
    /// $ORT_DYLIB_PATH, else the venvs below).
    #[arg(long, value_name = "PATH")]
    pub ort_lib: Option<PathBuf>,
    /// Python to check instead of the search (as `train --python`).
    #[arg(long, env = "STAGEWISE_PYTHON", value_name = "PATH")]
    pub python: Option<PathBuf>,
}

fn list(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

pub fn run(a: DoctorArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the stagewise executable")?;
    println!("executable   {}", exe.display());
    println!(
        "venvs        {} (in this order; never the current directory)",
        list(&runtime::venv_candidates(&exe))
    );
    println!("models dirs  {}", list(&runtime::models_dirs(&exe)));
    let mut missing = Vec::new();
    // Loaded, not only found: a library that is there but does not load (wrong file, too old) is missing too.
    match stagewise_model::OrtRuntime::init(a.ort_lib.as_deref()) {
        Ok(rt) => println!(
            "onnxruntime  {} (ONNX Runtime {})",
            rt.library().display(),
            rt.version()
        ),
        Err(e) => {
            println!("onnxruntime  MISSING: {}", stagewise_core::ErrorChain(&e));
            missing.push("ONNX Runtime");
        }
    }
    match super::python::find_python(a.python.as_deref())
        .and_then(|py| super::train::check_python(&py).map(|()| py))
    {
        Ok(py) => println!(
            "python       {} (stagewise, torch, onnx: learn, train, adapt)",
            py.display()
        ),
        Err(e) => {
            println!("python       MISSING: {e:#}");
            missing.push("the Python package");
        }
    }
    for task in stagewise_sim::Task::ALL {
        match runtime::find_shipped_model(task.name()) {
            Ok(m) => println!("model        {}: {}", task.name(), m.display()),
            Err(e) => {
                println!("model        {}: MISSING: {e}", task.name());
                missing.push("a shipped reward model");
            }
        }
    }
    missing.dedup();
    if !missing.is_empty() {
        bail!(
            "missing: {} (each line above says where it looked and how to fix it)",
            missing.join(", ")
        );
    }
    Ok(())
}
