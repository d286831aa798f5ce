//! `HopModel::load` checks the graph against its manifest: a manifest that does not describe its graph is
//! refused with an error that names the graph and the manifest field (the shipped pick-place hop model, with
//! edited manifests).
use crate::common;
use common::*;
use stagewise_model::{HopModel, Manifest, ModelError};
use std::path::PathBuf;

/// Copies the shipped hop model into a temp dir with `edit` applied to its manifest; returns (dir, manifest).
fn edited_hop(edit: impl Fn(String) -> String) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("models/pick-place");
    std::fs::copy(
        src.join("pick-place-hop.onnx"),
        dir.path().join("pick-place-hop.onnx"),
    )
    .unwrap();
    let text = std::fs::read_to_string(src.join("pick-place-hop.toml")).unwrap();
    let path = dir.path().join("pick-place-hop.toml");
    std::fs::write(&path, edit(text)).unwrap();
    (dir, path)
}

fn load_err(edit: impl Fn(String) -> String) -> ModelError {
    let (_d, p) = edited_hop(edit);
    match HopModel::load(&p, runtime(), &cpu()) {
        Ok(_) => panic!("{} loaded, expected an error", p.display()),
        Err(e) => e,
    }
}

/// The shipped hop model's state size.
fn shipped_state_size() -> usize {
    Manifest::load(&root().join("models/pick-place/pick-place-hop.toml"))
        .unwrap()
        .state_size
}

/// `t` with its state given as `state_size = n` alone (any `state_size` / `state_names` line replaced).
fn with_state_size(t: &str, n: usize) -> String {
    let kept: Vec<&str> = t
        .lines()
        .filter(|l| !l.starts_with("state_size") && !l.starts_with("state_names"))
        .collect();
    format!("state_size = {n}\n{}\n", kept.join("\n"))
}

/// The error is a graph mismatch on `field` naming the graph file, and its text mentions `want`.
fn assert_mismatch(e: &ModelError, field: &str, want: &str) {
    match e {
        ModelError::GraphMismatch { path, field: f, .. } => {
            assert!(path.ends_with("pick-place-hop.onnx"), "{e}");
            assert_eq!(f, field, "{e}");
        }
        other => panic!("expected a graph mismatch on {field}, got {other}"),
    }
    assert!(e.to_string().contains(want), "{e} should mention {want}");
}

#[test]
fn the_shipped_manifest_describes_its_graph() {
    let (_d, p) = edited_hop(|t| t);
    HopModel::load(&p, runtime(), &cpu()).expect("the unedited copy loads");
}

#[test]
fn a_manifest_that_does_not_describe_the_graph_is_refused() {
    // Two views named: the graph takes three.
    let e = load_err(|t| {
        t.replace(
            "views = [\"front\", \"side\", \"wrist\"]",
            "views = [\"front\", \"side\"]",
        )
    });
    assert_mismatch(&e, "inputs.images", "axis 1 is 3");

    // Images of another size.
    let e = load_err(|t| t.replace("width = 32", "width = 48"));
    assert_mismatch(&e, "inputs.images", "axis 5 is 32");

    // A state of another length.
    let s = shipped_state_size();
    let e = load_err(|t| with_state_size(&t, s - 1));
    assert_mismatch(&e, "inputs.state", &format!("axis 2 is {s}"));

    // An output the graph does not have: the error lists the outputs it has.
    let e = load_err(|t| t.replace("hop = \"hop\"", "hop = \"score\""));
    assert_mismatch(&e, "outputs.hop", "[\"hop\"]");

    // An input name the graph does not have.
    let e = load_err(|t| t.replace("images = \"images\"", "images = \"frames\""));
    assert_mismatch(&e, "inputs.images", "no input named `frames`");

    // No state in the manifest, but the graph takes one.
    let e = load_err(|t| with_state_size(&t, 0).replace("state = \"state\"\n", ""));
    assert_mismatch(&e, "inputs", "`state`");
}

#[test]
fn a_state_size_without_a_state_input_is_a_manifest_error() {
    let e = load_err(|t| t.replace("state = \"state\"\n", ""));
    assert!(
        matches!(e, ModelError::ManifestField { ref field, .. } if field == "inputs.state"),
        "{e}"
    );
}
