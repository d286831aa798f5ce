//! Helpers shared by the end-to-end test binaries (each `tests/*.rs` that says `mod common;`).

use std::path::{Path, PathBuf};

/// `models/test/tiny3v.toml` (8 state values) with its state fields named: a manifest in `dir` that points at the
/// shipped test ONNX file.
pub fn tiny3v_reading(dir: &Path, names: &[&str]) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("models/test/tiny3v.toml")).unwrap();
    let onnx = root.join("models/test/tiny3v.onnx");
    let list: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let text = text
        .replace(
            "onnx = \"tiny3v.onnx\"",
            &format!("onnx = {:?}", onnx.to_str().unwrap()),
        )
        .replace(
            "state_size = 8",
            &format!("state_names = [{}]", list.join(", ")),
        );
    let path = dir.join("tiny3v-named.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A policy reading the state fields `names` by name: an untrained tanh MLP (`models/make_test_models.py`, state
/// `names.len()` -> action 4) and its manifest in `dir`.
pub fn named_policy(dir: &Path, names: &[&str]) -> PathBuf {
    policy_with_inputs(dir, names, None)
}

/// The same reading, before its state fields, the frame embeddings (every view's) of the two-part reward model
/// `model` (a manifest path relative to the checkout): its manifest's `embeddings` pin that model's encoder.
pub fn embedding_policy(dir: &Path, names: &[&str], model: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let m = stagewise_model::Manifest::load(&root.join(model)).unwrap();
    let parts = m.parts.expect("a two-part model");
    policy_with_inputs(
        dir,
        names,
        Some((parts.encoder_sha256, m.views.len(), parts.embedding)),
    )
}

fn policy_with_inputs(
    dir: &Path,
    names: &[&str],
    embeddings: Option<(String, usize, usize)>,
) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let inputs = names.len() + embeddings.as_ref().map_or(0, |e| e.1 * e.2);
    let onnx = dir.join("named-policy.onnx");
    let py = root.join(".venv/bin/python");
    let out = std::process::Command::new(&py)
        .arg(root.join("models/make_test_models.py"))
        .arg("--policy")
        .arg(&onnx)
        .args([&inputs.to_string(), "4", "--seed", "5"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", py.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sha = stagewise_stream::sha256_hex(&std::fs::read(&onnx).unwrap());
    let list: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let path = dir.join("named-policy.toml");
    std::fs::write(
        &path,
        format!(
            "kind = \"policy\"\ntask = \"push-target\"\nonnx = \"named-policy.onnx\"\nsha256 = \"{sha}\"\n\
             state_names = [{}]\n{}[inputs]\nstate = \"state\"\n[outputs]\naction = \"action\"\n",
            list.join(", "),
            embeddings.map_or(String::new(), |(e, v, n)| format!(
                "embeddings = {{ encoder_sha256 = \"{e}\", views = {v}, size = {n} }}\n"
            ))
        ),
    )
    .unwrap();
    path
}

/// models/test/pixel3v8's linear pixel policy (the hand's 4 fields after the front, side and wrist frames) at
/// `size` x `size` frames, written into `dir` by models/make_test_models.py: its manifest's path.
pub fn pixel_policy(dir: &Path, size: u32) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let py = root.join(".venv/bin/python");
    let out = std::process::Command::new(&py)
        .arg(root.join("models/make_test_models.py"))
        .arg("--pixel-policy")
        .arg(dir)
        .arg(size.to_string())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", py.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(format!("pixel3v{size}.toml"))
}
