//! Python reads what Rust writes, and Rust reads what Python writes, following docs/wire.md. Runs
//! `tests/python/check_wire.py` with `$STAGEWISE_PYTHON` (default: the project's `.venv`, which
//! scripts/setup.sh fills with msgpack and numpy); fails when that Python lacks them.

use crate::common;

use common::*;
use stagewise_core::Progress;
use stagewise_stream::{
    decode, encode, EpisodeMsg, PolicyMsg, ProgressMsg, ResetRequest, Schema, StepRequest,
};
use std::process::Command;

fn python() -> String {
    std::env::var("STAGEWISE_PYTHON").unwrap_or_else(|_| {
        let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
        venv.display().to_string()
    })
}

#[test]
fn python_decodes_rust_and_rust_decodes_python() {
    let py = python();
    let has_deps = Command::new(&py)
        .args(["-c", "import msgpack, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        has_deps,
        "`{py}` cannot import msgpack and numpy: run scripts/setup.sh (or set STAGEWISE_PYTHON)"
    );
    let dir = std::env::temp_dir().join(format!("stagewise-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let write = |name: &str, bytes: Vec<u8>| std::fs::write(dir.join(name), bytes).expect("write");
    let mut t = transition("py-arm", 5, true);
    t.stage = Some(1);
    t.oracle_phi = Some(0.75);
    write("transition.msgpack", encode(&t).expect("encode"));
    let p = ProgressMsg::new(
        "py-arm",
        0,
        1,
        2,
        &Progress {
            stage: 2,
            stage_probs: vec![0.1, 0.2, 0.7],
            tau: 0.3,
            phi: 0.8,
        },
    );
    let bytes = encode(&p).expect("encode");
    write("progress.msgpack", bytes.clone());
    let mut newer = bytes;
    let at = newer
        .windows(7)
        .position(|w| w == b"\xa6schema")
        .expect("schema key")
        + 7;
    newer[at] = 2;
    write("newer.msgpack", newer);
    let ep = EpisodeMsg {
        schema: Schema,
        kind: Default::default(),
        robot: "py-arm".into(),
        env: 0,
        episode: 1,
        episode_return: 2.5,
        task_return: 1.0,
        length: 10,
        success: true,
        terminated: true,
        truncated: false,
        final_phi: 0.96,
        stamp_ns: 1,
    };
    write("episode.msgpack", encode(&ep).expect("encode"));
    write(
        "policy.msgpack",
        encode(&PolicyMsg::new(1, vec![1, 2, 3])).expect("encode"),
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/check_wire.py");
    let out = Command::new(&py)
        .arg(script)
        .arg(&dir)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| std::fs::read(dir.join(name)).expect("python wrote it");
    let step: StepRequest = decode(&read("py_step_request.msgpack")).expect("python step request");
    assert_eq!(step.action, vec![0.5, 1.0, -2.0]);
    let reset: ResetRequest = decode(&read("py_reset_request.msgpack")).expect("python reset");
    assert_eq!(reset.seed, Some(7));
    let pol: PolicyMsg = decode(&read("py_policy.msgpack")).expect("python policy");
    pol.verify_sha256().expect("python's hash");
    assert_eq!(pol.onnx, b"not really onnx");
    let _ = std::fs::remove_dir_all(&dir);
}
