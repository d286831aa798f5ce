//! The two-part form of a stage-progress model (manifest `[parts]`: per-frame encoder + head) against its single
//! graph, on the shipped pick-place model, and the errors for bad parts and bad input.

use crate::common;

use common::{cpu, observation, root, runtime};
use stagewise_model::{ModelError, ModelForm, RewardModel, TwoPartModel};
use std::path::{Path, PathBuf};

fn shipped() -> PathBuf {
    root().join("models/pick-place/pick-place-progress.toml")
}

/// Copies the shipped model's files into `dir` with the manifest edited by `edit`; returns the manifest path.
fn edited_copy(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let src = root().join("models/pick-place");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let manifest = dir.join("pick-place-progress.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, edit(text)).unwrap();
    manifest
}

#[test]
fn encoder_plus_head_equals_the_single_graph() {
    let mut single =
        RewardModel::load_as(&shipped(), runtime(), &cpu(), ModelForm::SingleGraph).unwrap();
    let mut parts = TwoPartModel::load(&shipped(), runtime(), &cpu()).unwrap();
    let m = single.manifest().clone();
    let (views, frames, e) = (m.views.len(), m.frames, parts.embedding_len());
    let img = m.image.clone().unwrap();
    let frame_len = parts.normaliser().frame_len();
    let names: Vec<&str> = m.views.iter().map(String::as_str).collect();
    let n = 5;
    // n windows of normalised synthetic frames, [n, views, frames, CHW], and their states
    let mut windows = vec![0.0f32; n * views * frames * frame_len];
    let mut state = Vec::new();
    for (i, w) in windows.chunks_mut(frame_len).enumerate() {
        let o = observation(&names, i as u64, 1, img.width, img.height, m.state_size);
        parts
            .normaliser()
            .write_chw(&o.views[i % views].rgb, w)
            .unwrap();
    }
    for i in 0..n {
        let o = observation(&names, 100 + i as u64, 1, 4, 4, m.state_size);
        state.extend_from_slice(&o.state);
    }
    let want = single.score_windows(&windows, &state, n).unwrap();
    let mut emb = Vec::new();
    parts
        .encode(&windows, n * views * frames, &mut emb)
        .unwrap();
    assert_eq!(emb.len(), n * views * frames * e);
    let got = parts.score_embeddings(&emb, &state, n).unwrap();
    for (a, b) in want.iter().zip(&got) {
        assert_eq!(a.stage, b.stage);
        assert!((a.phi - b.phi).abs() < 1e-5, "{} vs {}", a.phi, b.phi);
        assert!((a.tau - b.tau).abs() < 1e-5);
    }
}

#[test]
fn bad_input_is_refused_and_the_model_keeps_working() {
    let mut parts = TwoPartModel::load(&shipped(), runtime(), &cpu()).unwrap();
    let mut emb = Vec::new();
    let e = parts.encode(&[0.0; 10], 1, &mut emb).unwrap_err();
    assert!(
        matches!(e, ModelError::BadInput { ref tensor, .. } if tensor == "frames"),
        "{e}"
    );
    let e = parts.score_embeddings(&[0.0; 3], &[], 1).unwrap_err();
    assert!(
        matches!(e, ModelError::BadInput { ref tensor, .. } if tensor == "embeddings"),
        "{e}"
    );
    let m = parts.manifest().clone();
    let len = m.views.len() * m.frames * parts.embedding_len();
    let e = parts
        .score_embeddings(&vec![0.0; len], &[0.0; 3], 1)
        .unwrap_err();
    assert!(
        matches!(e, ModelError::BadInput { ref tensor, .. } if tensor == "state"),
        "{e}"
    );
    let out = parts
        .score_embeddings(&vec![0.0; len], &vec![0.0; m.state_size], 1)
        .unwrap();
    assert!(out[0].phi.is_finite());
}

#[test]
fn bad_parts_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    // the manifest's embedding size disagrees with the graphs
    let path = edited_copy(dir.path(), |t| {
        t.replace("embedding = 64", "embedding = 32")
    });
    let e = TwoPartModel::load(&path, runtime(), &cpu()).err().unwrap();
    match e {
        ModelError::GraphMismatch { field, .. } => assert_eq!(field, "parts.embedding"),
        other => panic!("expected a graph mismatch, got {other}"),
    }
    // no [parts] at all: a clear error, and the single graph still loads
    let dir = tempfile::tempdir().unwrap();
    let path = edited_copy(dir.path(), |t| {
        t.split("\n[parts]\n").next().unwrap().to_string()
    });
    let e = TwoPartModel::load(&path, runtime(), &cpu()).err().unwrap();
    assert!(e.to_string().contains("parts"), "{e}");
    RewardModel::load(&path, runtime(), &cpu()).unwrap();
    // encoder and head swapped: the encoder graph has no `frames` input
    let dir = tempfile::tempdir().unwrap();
    let path = edited_copy(dir.path(), |t| {
        let enc = t
            .lines()
            .find(|l| l.starts_with("encoder "))
            .unwrap()
            .to_string();
        let enc_sha = t
            .lines()
            .find(|l| l.starts_with("encoder_sha256"))
            .unwrap()
            .to_string();
        let head = t
            .lines()
            .find(|l| l.starts_with("head "))
            .unwrap()
            .to_string();
        let head_sha = t
            .lines()
            .find(|l| l.starts_with("head_sha256"))
            .unwrap()
            .to_string();
        t.replace(&enc, &head.replacen("head", "encoder", 1))
            .replace(&enc_sha, &head_sha.replacen("head", "encoder", 1))
            .replace(&head, &enc.replacen("encoder", "head", 1))
            .replace(&head_sha, &enc_sha.replacen("encoder", "head", 1))
    });
    let e = TwoPartModel::load(&path, runtime(), &cpu()).err().unwrap();
    match e {
        ModelError::GraphMismatch { field, .. } => assert_eq!(field, "parts.encoder"),
        other => panic!("expected a graph mismatch, got {other}"),
    }
}

/// Steps `models` through the same observations: 4 envs whose episodes start at different steps (so some calls
/// mix envs at their first step with envs past it), then env 2 alone starting over (a call of fresh envs only).
/// Returns every call's progress, per model.
fn lockstep(models: &mut [&mut RewardModel], steps: u64) -> Vec<Vec<stagewise_core::Progress>> {
    let m = models[0].manifest().clone();
    let img = m.image.clone().unwrap();
    let names: Vec<&str> = m.views.iter().map(String::as_str).collect();
    let starts = [0u64, 0, 3, 7];
    let mut out = vec![Vec::new(); models.len()];
    for t in 0..steps {
        let envs: Vec<usize> = (0..4).filter(|&e| t >= starts[e]).collect();
        let obs: Vec<_> = envs
            .iter()
            .map(|&e| {
                let step = t - starts[e];
                observation(
                    &names,
                    10 * e as u64 + step,
                    step,
                    img.width,
                    img.height,
                    m.state_size,
                )
            })
            .collect();
        let refs: Vec<_> = obs.iter().collect();
        for (model, out) in models.iter_mut().zip(&mut out) {
            out.extend(model.score_envs(&envs, &refs).unwrap());
        }
    }
    let o = observation(&names, 99, 0, img.width, img.height, m.state_size);
    for (model, out) in models.iter_mut().zip(&mut out) {
        out.extend(model.score_envs(&[2], &[&o]).unwrap());
    }
    out
}

#[test]
fn the_fused_step_graph_equals_encoder_plus_head_and_the_single_graph() {
    let mut fused = RewardModel::load(&shipped(), runtime(), &cpu()).unwrap();
    assert_eq!(fused.form(), ModelForm::TwoPart);
    let mut two = RewardModel::load(&shipped(), runtime(), &cpu()).unwrap();
    two.use_step_graph(false);
    let mut single =
        RewardModel::load_as(&shipped(), runtime(), &cpu(), ModelForm::SingleGraph).unwrap();
    let got = lockstep(&mut [&mut fused, &mut two, &mut single], 14);
    assert!(!two.last_step_fused());
    for (what, other) in [("encoder + head", &got[1]), ("single graph", &got[2])] {
        assert_eq!(got[0].len(), other.len());
        for (i, (a, b)) in got[0].iter().zip(other).enumerate() {
            assert_eq!(a.stage, b.stage, "{what}: call row {i}");
            assert!(
                (a.phi - b.phi).abs() < 1e-5,
                "{what} {i}: {} vs {}",
                a.phi,
                b.phi
            );
            assert!(
                (a.tau - b.tau).abs() < 1e-5,
                "{what} {i}: {} vs {}",
                a.tau,
                b.tau
            );
            for (p, q) in a.stage_probs.iter().zip(&b.stage_probs) {
                assert!((p - q).abs() < 1e-5, "{what} {i}: stage probs {p} vs {q}");
            }
        }
    }
    // A steady step (all envs past their first) is one run of the step graph, and its bare rerun is too.
    let m = fused.manifest().clone();
    let img = m.image.clone().unwrap();
    let names: Vec<&str> = m.views.iter().map(String::as_str).collect();
    let o = observation(&names, 5, 1, img.width, img.height, m.state_size);
    fused.score_envs(&[2], &[&o]).unwrap();
    assert!(fused.last_step_fused());
    assert!(fused.time_bare_run(1).unwrap() > std::time::Duration::ZERO);
}

#[test]
fn a_manifest_without_a_step_graph_runs_encoder_and_head_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = edited_copy(dir.path(), |t| {
        t.lines()
            .filter(|l| !l.starts_with("step"))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    let mut old = RewardModel::load(&path, runtime(), &cpu()).unwrap();
    let mut fused = RewardModel::load(&shipped(), runtime(), &cpu()).unwrap();
    let got = lockstep(&mut [&mut old, &mut fused], 6);
    assert!(!old.last_step_fused());
    for (a, b) in got[0].iter().zip(&got[1]) {
        assert!((a.phi - b.phi).abs() < 1e-5, "{} vs {}", a.phi, b.phi);
    }
    // a tampered step graph fails its checksum
    let dir = tempfile::tempdir().unwrap();
    let path = edited_copy(dir.path(), |t| t);
    let step = dir.path().join("pick-place-progress.step.onnx");
    std::fs::write(&step, b"not a graph").unwrap();
    match RewardModel::load(&path, runtime(), &cpu()).err().unwrap() {
        ModelError::Checksum { path, .. } => assert_eq!(path, step),
        other => panic!("expected a checksum error, got {other}"),
    }
    // the head named as the step graph: its inputs are not the step graph's
    let dir = tempfile::tempdir().unwrap();
    let path = edited_copy(dir.path(), |t| {
        let head_sha = t
            .lines()
            .find(|l| l.starts_with("head_sha256"))
            .unwrap()
            .replacen("head_sha256", "step_sha256", 1);
        t.lines()
            .map(|l| match l {
                l if l.starts_with("step =") => "step = \"pick-place-progress.head.onnx\"".into(),
                l if l.starts_with("step_sha256") => head_sha.clone(),
                l => l.to_string(),
            })
            .map(|l| format!("{l}\n"))
            .collect()
    });
    match TwoPartModel::load(&path, runtime(), &cpu()).err().unwrap() {
        ModelError::GraphMismatch { field, .. } => assert_eq!(field, "parts.step"),
        other => panic!("expected a graph mismatch, got {other}"),
    }
}

/// A step graph of the right shapes but other weights (here: the shipped one with its weights nudged, as another
/// training run's export would be) passes its checksum and shape checks; the load-time agreement check with the
/// model's own encoder + head refuses it.
#[test]
fn a_step_graph_from_other_weights_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let step = dir.path().join("pick-place-progress.step.onnx");
    let path = edited_copy(dir.path(), |t| t);
    let python = root().join(".venv/bin/python");
    let script = "import hashlib, sys, onnx, numpy as np\n\
                  from onnx import numpy_helper as nh\n\
                  m = onnx.load(sys.argv[1])\n\
                  for i, t in enumerate(m.graph.initializer):\n    \
                      a = nh.to_array(t)\n    \
                      if a.dtype == np.float32 and a.size > 1000:\n        \
                          m.graph.initializer[i].CopyFrom(nh.from_array(a * 1.5 + 0.05, t.name))\n\
                  onnx.save(m, sys.argv[1])\n\
                  print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\n";
    let out = std::process::Command::new(&python)
        .args(["-c", script])
        .arg(&step)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (run scripts/setup.sh)",
                python.display()
            )
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sha = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let text = std::fs::read_to_string(&path).unwrap();
    let text: String = text
        .lines()
        .map(|l| match l {
            l if l.starts_with("step_sha256") => format!("step_sha256 = \"{sha}\"\n"),
            l => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&path, text).unwrap();
    match TwoPartModel::load(&path, runtime(), &cpu()).err().unwrap() {
        ModelError::GraphMismatch { field, reason, .. } => {
            assert_eq!(field, "parts.step");
            assert!(
                reason.contains("disagrees with this model's encoder + head"),
                "{reason}"
            );
        }
        other => panic!("expected a graph mismatch, got {other}"),
    }
    // the shipped step graph agrees with its own parts
    TwoPartModel::load(&shipped(), runtime(), &cpu()).unwrap();
}
