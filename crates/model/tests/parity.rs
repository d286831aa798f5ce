//! Rust and Python onnxruntime agree on the same inputs (to 1e-5): windows, normalisation, the model, and the
//! progress math, recomputed independently by models/parity.py.
use crate::common;
use common::*;
use std::io::Write;

fn dump_and_check(model: &str, views: &[&str], size: u32, state: usize) {
    let mut m = load(model);
    let dir = tempfile::tempdir().unwrap();
    let (steps, envs) = (9usize, 3usize);
    let mut frames = std::fs::File::create(dir.path().join("frames.bin")).unwrap();
    let mut states = std::fs::File::create(dir.path().join("state.bin")).unwrap();
    let mut results = Vec::new();
    let mut step_index = Vec::new();
    for t in 0..steps {
        // env 2 starts a second episode at t = 5
        let obs: Vec<_> = (0..envs)
            .map(|e| {
                let step = if e == 2 && t >= 5 { t - 5 } else { t } as u64;
                observation(
                    views,
                    e as u64 + 40 * (t as u64 / 5),
                    step,
                    size,
                    size,
                    state,
                )
            })
            .collect();
        for o in &obs {
            step_index.push(o.step);
            for v in &o.views {
                frames.write_all(v.rgb.as_raw()).unwrap();
            }
            for x in &o.state {
                states.write_all(&x.to_le_bytes()).unwrap();
            }
        }
        let refs: Vec<_> = obs.iter().collect();
        results.push(m.score(&refs).unwrap());
    }
    drop((frames, states));
    let meta = serde_json::json!({
        "manifest": model_path(model).canonicalize().unwrap(),
        "steps": steps, "envs": envs, "step_index": step_index, "results": results,
    });
    std::fs::write(dir.path().join("meta.json"), meta.to_string()).unwrap();
    let python = root().join(".venv/bin/python");
    let out = std::process::Command::new(&python)
        .arg(root().join("models/parity.py"))
        .arg(dir.path())
        .args(["--tol", "1e-5"])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (run scripts/setup.sh)",
                python.display()
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "parity failed for {model}: {text}");
    println!("{model}: {text}");
}

#[test]
fn rust_matches_python_onnxruntime_multi_view_windowed() {
    dump_and_check("tiny3v", &["front", "side", "wrist"], 96, 8);
}

#[test]
fn rust_matches_python_onnxruntime_soft_progress() {
    dump_and_check("tiny1v", &["front"], 32, 0);
}
