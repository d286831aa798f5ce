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
