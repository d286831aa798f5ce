//! Bad input gets a typed error that names the file, tensor or field, never a panic, and loses nothing.
use crate::common;
use common::*;
use stagewise_core::Frame;
use stagewise_model::{ModelError, Provider, RewardModel, SessionOptions};
use std::path::{Path, PathBuf};

const VIEWS3: [&str; 3] = ["front", "side", "wrist"];

/// Copies test model `name` into a temp dir, applies `edit` to its manifest text, returns (dir, manifest path).
fn edited(name: &str, edit: impl Fn(String) -> String) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("models/test");
    std::fs::copy(
        src.join(format!("{name}.onnx")),
        dir.path().join(format!("{name}.onnx")),
    )
    .unwrap();
    let text = std::fs::read_to_string(src.join(format!("{name}.toml"))).unwrap();
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, edit(text)).unwrap();
    (dir, path)
}

fn load_err(path: &Path) -> ModelError {
    match RewardModel::load(path, runtime(), &cpu()) {
        Ok(_) => panic!("{} loaded, expected an error", path.display()),
        Err(e) => e,
    }
}

#[test]
fn missing_onnx_file_names_the_file() {
    let (_d, p) = edited("tiny3v", |t| {
        t.replace("onnx = \"tiny3v.onnx\"", "onnx = \"gone.onnx\"")
    });
    let e = load_err(&p);
    assert!(
        matches!(e, ModelError::Io { ref path, .. } if path.ends_with("gone.onnx")),
        "{e}"
    );
}

#[test]
fn missing_manifest_names_the_file() {
    let e = load_err(Path::new("/nonexistent/model.toml"));
    assert!(e.to_string().contains("/nonexistent/model.toml"), "{e}");
}

#[test]
fn corrupt_onnx_is_refused() {
    let garbage: Vec<u8> = (0..4000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let (_d, p) = edited("tiny3v", |t| t);
    let onnx = p.with_file_name("tiny3v.onnx");
    std::fs::write(&onnx, &garbage).unwrap();
    // the manifest carries the garbage's own sha256, so the refusal comes from ONNX Runtime's parser
    let sha = stagewise_model::manifest::sha256_file(&onnx).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    let old = text
        .lines()
        .find(|l| l.starts_with("sha256"))
        .unwrap()
        .to_string();
    std::fs::write(&p, text.replace(&old, &format!("sha256 = \"{sha}\""))).unwrap();
    let e = load_err(&p);
    assert!(
        matches!(e, ModelError::InvalidOnnx { ref path, .. } if path.ends_with("tiny3v.onnx")),
        "{e}"
    );
}

#[test]
fn checksum_mismatch_is_refused() {
    let (_d, p) = edited("tiny3v", |t| {
        let old = t
            .lines()
            .find(|l| l.starts_with("sha256"))
            .unwrap()
            .to_string();
        t.replace(&old, &format!("sha256 = \"{}\"", "ab".repeat(32)))
    });
    let e = load_err(&p);
    assert!(matches!(e, ModelError::Checksum { .. }), "{e}");
    assert!(e.to_string().contains("abab"), "{e}");
}

#[test]
fn manifest_that_disagrees_with_the_graph_names_the_field() {
    type Edit = Box<dyn Fn(String) -> String>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "tiny3v",
            Box::new(|t: String| {
                t.replace(
                    "views = [\"front\", \"side\", \"wrist\"]",
                    "views = [\"front\", \"side\"]",
                )
            }),
            "inputs.images",
        ),
        (
            "tiny3v",
            Box::new(|t: String| t.replace("frames = 4", "frames = 3")),
            "inputs.images",
        ),
        (
            "tiny3v",
            Box::new(|t: String| t.replace("width = 96", "width = 64")),
            "inputs.images",
        ),
        (
            "tiny3v",
            Box::new(|t: String| t.replace("state_size = 8", "state_size = 5")),
            "inputs.state",
        ),
        (
            "tiny3v",
            Box::new(|t: String| t.replace("images = \"images\"", "images = \"pixels\"")),
            "inputs.images",
        ),
        (
            "tiny3v",
            Box::new(|t: String| t.replace("tau = \"tau\"", "tau = \"progress\"")),
            "outputs.tau",
        ),
        (
            "tiny3v",
            Box::new(|t: String| {
                t.replace(
                    "names = [\"reach\", \"grasp\", \"lift\", \"place\"]",
                    "names = [\"reach\", \"grasp\", \"lift\"]",
                )
                .replace(
                    "proportions = [0.2, 0.2, 0.25, 0.35]",
                    "proportions = [0.2, 0.2, 0.6]",
                )
            }),
            "outputs.stage_logits",
        ),
        // the graph takes a state input the manifest does not name
        (
            "tiny3v",
            Box::new(|t: String| {
                t.replace("state_size = 8", "state_size = 0")
                    .replace("state = \"state\"\n", "")
            }),
            "inputs",
        ),
    ];
    for (model, edit, field) in cases {
        let (_d, p) = edited(model, edit);
        match load_err(&p) {
            ModelError::GraphMismatch {
                field: f,
                ref reason,
                ..
            } => assert_eq!(f, field, "{reason}"),
            other => panic!("expected GraphMismatch on {field}, got {other}"),
        }
    }
}

#[test]
fn wrong_model_kind_is_refused() {
    let (_d, p) = edited("tiny3v", |t| {
        t.replace("kind = \"stage_progress\"", "kind = \"hop\"")
            .replace("tau = \"tau\"", "tau = \"tau\"\nhop = \"tau\"")
    });
    assert!(matches!(load_err(&p), ModelError::WrongKind { .. }));
}

#[test]
fn bad_observations_are_refused_and_lose_nothing() {
    let mut m = load("tiny3v");
    let mut reference = load("tiny3v");
    let good = |step| observation(&VIEWS3, 2, step, 96, 96, 8);
    let check = |m: &mut RewardModel, o: &stagewise_core::Observation, want: &str| {
        let e = m.score(&[o]).unwrap_err();
        assert!(
            matches!(e, ModelError::BadObservation { env: 0, .. }),
            "{e}"
        );
        assert!(e.to_string().contains(want), "{e} should mention {want}");
    };
    for step in 0..4 {
        let mut two_views = good(step);
        two_views.views.pop();
        check(&mut m, &two_views, "2 views");
        let mut renamed = good(step);
        renamed.views[1].name = "top".into();
        check(&mut m, &renamed, "\"side\"");
        let mut short_state = good(step);
        short_state.state.pop();
        check(&mut m, &short_state, "state has 7 values");
        let mut nan_state = good(step);
        nan_state.state[3] = f32::NAN;
        check(&mut m, &nan_state, "state[3]");
        let mut empty = good(step);
        empty.views[2].rgb = Frame::new(0, 0);
        check(&mut m, &empty, "0x0");
        // after all that, the window is exactly where a model that never saw bad input is
        assert_eq!(
            m.score(&[&good(step)]).unwrap(),
            reference.score(&[&good(step)]).unwrap()
        );
    }
}

#[test]
fn a_bad_env_in_a_batch_names_its_index() {
    let mut m = load("tiny3v");
    let a = observation(&VIEWS3, 1, 0, 96, 96, 8);
    let mut b = observation(&VIEWS3, 2, 0, 96, 96, 8);
    b.state.clear();
    let e = m.score(&[&a, &b]).unwrap_err();
    assert!(
        matches!(e, ModelError::BadObservation { env: 1, .. }),
        "{e}"
    );
}

#[test]
fn nan_outputs_are_refused() {
    let mut m = load("nan1v");
    let e = m
        .score(&[&observation(&["front"], 1, 0, 16, 16, 0)])
        .unwrap_err();
    match e {
        ModelError::BadOutput {
            ref tensor,
            ref reason,
            ..
        } => {
            assert_eq!(tensor, "tau");
            assert!(reason.contains("NaN"), "{reason}");
        }
        other => panic!("expected BadOutput, got {other}"),
    }
}

#[test]
fn wrong_window_buffer_sizes_are_refused() {
    let mut m = load("tiny1v");
    let e = m.score_windows(&[0.0; 10], &[], 1).unwrap_err();
    assert!(
        matches!(e, ModelError::BadInput { ref tensor, .. } if tensor == "images"),
        "{e}"
    );
}

#[test]
fn missing_gpu_provider_named_explicitly_is_an_error() {
    let rt = runtime();
    for provider in [Provider::Cuda, Provider::TensorRt] {
        let opts = SessionOptions { provider, ..cpu() };
        let available = rt.available_providers();
        let gpu = if provider == Provider::Cuda {
            "CUDAExecutionProvider"
        } else {
            "TensorrtExecutionProvider"
        };
        if available.contains(&gpu) {
            continue; // a GPU build: nothing to check here (the device check covers it)
        }
        let e = RewardModel::load(&model_path("tiny1v"), rt, &opts)
            .err()
            .expect("explicit missing provider must fail");
        assert!(matches!(e, ModelError::ProviderUnavailable { .. }), "{e}");
        assert!(e.to_string().contains("CPUExecutionProvider"), "{e}");
    }
    // auto falls back to CPU
    let m = RewardModel::load(
        &model_path("tiny1v"),
        rt,
        &SessionOptions {
            provider: Provider::Auto,
            ..cpu()
        },
    )
    .unwrap();
    assert!(matches!(
        m.provider(),
        Provider::Cpu | Provider::Cuda | Provider::TensorRt
    ));
}

#[test]
fn library_errors_name_all_three_places() {
    let e =
        stagewise_model::runtime::find_library(Some(Path::new("/nonexistent/libonnxruntime.so")))
            .unwrap_err();
    assert!(e.to_string().contains("--ort-lib"), "{e}");
    let msg = ModelError::LibraryNotFound {
        searched: "x".into(),
    }
    .to_string();
    for needle in ["--ort-lib", "ORT_DYLIB_PATH", "scripts/setup.sh"] {
        assert!(msg.contains(needle), "{msg}");
    }
    assert!("gpu".parse::<Provider>().is_err());
    assert_eq!("TensorRT".parse::<Provider>().unwrap(), Provider::TensorRt);
}

/// A manifest that is not TOML: the error names the file, keeps the TOML parser's error as its source, and
/// the parser's message is printed once (by the chain), not again in the outer message.
#[test]
fn malformed_manifest_keeps_the_parser_error_as_its_source() {
    let (_d, p) = edited("tiny3v", |t| t.replace("frames = ", "frames = = "));
    let e = load_err(&p);
    assert!(
        matches!(e, ModelError::ManifestSyntax { ref path, .. } if path == &p),
        "{e}"
    );
    let msgs = stagewise_core::chain_messages(&e);
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(msgs[0].contains(&p.display().to_string()), "{msgs:?}");
    let cause = &msgs[1];
    assert!(!cause.is_empty());
    assert!(
        !msgs[0].contains(cause.as_str()),
        "the cause is printed twice: {msgs:?}"
    );
    assert!(
        std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<toml::de::Error>())
            .is_some(),
        "the source is the TOML parser's error"
    );
    // One line for a log: outer message, then the cause, once.
    let line = stagewise_core::ErrorChain(&e).to_string();
    assert_eq!(line.matches(cause.as_str()).count(), 1, "{line}");
}

/// Bad stage proportions: the manifest error names the file and the field; the core error with the value is
/// its source.
#[test]
fn bad_proportions_keep_the_core_error_as_their_source() {
    let (_d, p) = edited("tiny3v", |t| {
        let start = t
            .find("proportions = [")
            .expect("proportions in tiny3v.toml");
        let end = start + t[start..].find(']').expect("]");
        let n = t[start..end].matches(',').count() + 1;
        let bad = vec!["-1.0"; n].join(", ");
        format!("{}proportions = [{bad}{}", &t[..start], &t[end..])
    });
    let e = load_err(&p);
    let msgs = stagewise_core::chain_messages(&e);
    assert!(
        msgs[0].contains("stages.proportions") && msgs[0].contains(&p.display().to_string()),
        "{msgs:?}"
    );
    let core = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<stagewise_core::ProgressError>())
        .unwrap_or_else(|| panic!("the source is the core error: {msgs:?}"));
    assert!(core.to_string().contains("-1"), "{core}");
    assert!(!msgs[0].contains(&core.to_string()), "{msgs:?}");
}
