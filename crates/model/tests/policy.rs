//! ONNX policies: loading from a manifest or from bytes (hot-swap), checked against the env's sizes.
use crate::common;
use common::*;
use stagewise_model::{ModelError, PolicyModel};

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(root().join("models/test").join(name)).unwrap()
}

#[test]
fn a_policy_acts_on_a_batch() {
    let mut p = PolicyModel::load(&model_path("policy8x4"), 8, 4, runtime(), &cpu()).unwrap();
    let s0 = [0.1f32; 8];
    let s1 = [-0.5f32; 8];
    let a = p.act(&[&s0, &s1]).unwrap();
    assert_eq!(a.len(), 2);
    assert!(a
        .iter()
        .all(|x| x.len() == 4 && x.iter().all(|v| (-1.0..=1.0).contains(v))));
    assert_ne!(a[0], a[1]);
    // the same state gives the same action whatever else is in the batch
    assert_eq!(p.act(&[&s1]).unwrap()[0], a[1]);
}

#[test]
fn a_policy_that_does_not_fit_the_env_is_refused() {
    let b = bytes("policy8x4.onnx");
    let e = PolicyModel::from_bytes(&b, "policy v7", 9, 4, runtime(), &cpu())
        .err()
        .unwrap();
    assert!(
        matches!(e, ModelError::GraphMismatch { ref field, .. } if field == "inputs.state"),
        "{e}"
    );
    assert!(e.to_string().contains("policy v7"), "{e}");
    let e = PolicyModel::from_bytes(&b, "policy v7", 8, 3, runtime(), &cpu())
        .err()
        .unwrap();
    assert!(
        matches!(e, ModelError::GraphMismatch { ref field, .. } if field == "outputs.action"),
        "{e}"
    );
    // a reward model is not a policy: two inputs
    let e = PolicyModel::from_bytes(&bytes("tiny3v.onnx"), "x", 8, 4, runtime(), &cpu())
        .err()
        .unwrap();
    assert!(
        matches!(e, ModelError::GraphMismatch { ref field, .. } if field == "inputs"),
        "{e}"
    );
    // garbage bytes
    let e = PolicyModel::from_bytes(b"not an onnx model", "x", 8, 4, runtime(), &cpu())
        .err()
        .unwrap();
    assert!(matches!(e, ModelError::InvalidOnnx { .. }), "{e}");
    // a reward manifest is not a policy manifest
    let e = PolicyModel::load(&model_path("tiny3v"), 8, 4, runtime(), &cpu())
        .err()
        .unwrap();
    assert!(matches!(e, ModelError::WrongKind { .. }), "{e}");
}

#[test]
fn bad_states_are_refused() {
    let mut p = PolicyModel::load(&model_path("policy8x4"), 8, 4, runtime(), &cpu()).unwrap();
    let short = [0.0f32; 7];
    assert!(matches!(
        p.act(&[&short]),
        Err(ModelError::BadObservation { env: 0, .. })
    ));
    let mut nan = [0.0f32; 8];
    nan[2] = f32::NAN;
    let ok = [0.0f32; 8];
    assert!(matches!(
        p.act(&[&ok, &nan]),
        Err(ModelError::BadObservation { env: 1, .. })
    ));
}

#[test]
fn scoring_a_subset_of_envs_advances_only_theirs() {
    let views = ["front", "side", "wrist"];
    let mut all = load("tiny3v");
    let mut subset = load("tiny3v");
    for step in 0..3 {
        let obs: Vec<_> = (0..3)
            .map(|e| observation(&views, e, step, 96, 96, 8))
            .collect();
        let refs: Vec<_> = obs.iter().collect();
        let a = all.score(&refs).unwrap();
        // env 1 scored alone, then envs 2 and 0 together (any order): same results as the full batch
        let b1 = subset.score_envs(&[1], &[&obs[1]]).unwrap();
        let b20 = subset.score_envs(&[2, 0], &[&obs[2], &obs[0]]).unwrap();
        assert_eq!(a[1], b1[0]);
        assert_eq!(a[2], b20[0]);
        assert_eq!(a[0], b20[1]);
    }
    let o = observation(&views, 0, 3, 96, 96, 8);
    assert!(subset.score_envs(&[0, 0], &[&o, &o]).is_err());
    assert!(subset.score_envs(&[0], &[]).is_err());
}

#[test]
fn a_policy_holds_each_action_for_its_declared_repeat() {
    // policy8x4r3 has policy8x4's weights and `stagewise.action_repeat = "3"` in its ONNX metadata
    let mut plain = PolicyModel::load(&model_path("policy8x4"), 8, 4, runtime(), &cpu()).unwrap();
    let mut held = PolicyModel::load(&model_path("policy8x4r3"), 8, 4, runtime(), &cpu()).unwrap();
    assert_eq!(plain.action_repeat(), 1);
    assert_eq!(held.action_repeat(), 3);
    let state = |t: usize, env: usize| [0.1 * t as f32 - 0.3 * env as f32; 8];
    // envs 0 and 2 step together; env 2 starts one step late
    let mut chosen = [Vec::new(), Vec::new(), Vec::new()];
    for t in 0..7 {
        let (envs, states): (Vec<usize>, Vec<[f32; 8]>) = if t == 0 {
            (vec![0], vec![state(t, 0)])
        } else {
            (vec![0, 2], vec![state(t, 0), state(t, 2)])
        };
        let refs: Vec<&[f32]> = states.iter().map(|s| s.as_slice()).collect();
        let out = held.act_held(&envs, &refs).unwrap();
        for (k, &e) in envs.iter().enumerate() {
            // a new action every third step of the env's own, from the state of that step
            let start = if e == 0 { 0 } else { 1 };
            let due = t - (t - start) % 3;
            let expect = plain.act(&[&state(due, e)]).unwrap().remove(0);
            assert_eq!(out[k], expect, "env {e} step {t}");
            chosen[e].push(out[k].clone());
        }
    }
    assert_ne!(
        chosen[0][2], chosen[0][3],
        "the held action ran out after 3 steps"
    );
    // a reset starts a new action at once
    held.reset_env(0);
    let s = state(9, 0);
    let fresh = held.act_held(&[0], &[&s]).unwrap().remove(0);
    assert_eq!(fresh, plain.act(&[&s]).unwrap().remove(0));
    // repeat 1 is `act`
    let s = [0.2f32; 8];
    assert_eq!(
        plain.act_held(&[5], &[&s]).unwrap(),
        plain.act(&[&s]).unwrap()
    );
    // a bad state is refused when the graph would read it, named by its position in the batch
    let mut nan = [0.0f32; 8];
    nan[1] = f32::NAN;
    let ok = [0.0f32; 8];
    held.reset_env(2);
    assert!(matches!(
        held.act_held(&[0, 2], &[&ok, &nan]),
        Err(ModelError::BadObservation { env: 1, .. })
    ));
}

#[test]
fn an_action_repeat_no_policy_may_declare_is_refused() {
    let e = PolicyModel::from_bytes(
        &bytes("policy8x4r0.onnx"),
        "policy v2",
        8,
        4,
        runtime(),
        &cpu(),
    )
    .err()
    .unwrap();
    assert!(
        matches!(e, ModelError::GraphMismatch { ref field, .. } if field == "metadata"),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("policy v2")
            && msg.contains("stagewise.action_repeat")
            && msg.contains("\"0\""),
        "{msg}"
    );
}

/// The simulator's state field names (the pixel test policy reads the hand's four of them).
fn hand_source() -> Vec<String> {
    ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped"]
        .map(String::from)
        .to_vec()
}

fn view(name: &str, w: u32, h: u32) -> stagewise_core::ViewSpec {
    stagewise_core::ViewSpec {
        name: name.into(),
        width: w,
        height: h,
    }
}

/// A `[pixels]` policy loads with its input width computed from the manifest (3 views x 3 x 8 x 8 + 4 state
/// values), and its frames, written channel-major as raw bytes, are what the graph acts on: pixel3v8's
/// action[k] is view k's channel k mean / 255 * 2 - 1, action[3] the gripper width.
#[test]
fn a_pixel_policy_loads_and_acts_on_its_frames() {
    let bound = PolicyModel::load_bound(
        &model_path("pixel3v8"),
        "the test source",
        &hand_source(),
        None,
        4,
        runtime(),
        &cpu(),
    )
    .unwrap();
    let pixels = bound.pixels.clone().expect("[pixels]");
    assert_eq!((pixels.len(), bound.state_map.model_len()), (576, 4));
    assert!(bound.embeddings.is_none());
    let solid = |rgb: [u8; 3]| image::RgbImage::from_pixel(8, 8, image::Rgb(rgb));
    let obs = stagewise_core::Observation {
        step: 0,
        time: 0.0,
        // Out of the policy's order, with a view it does not read: frames are picked by name.
        views: vec![
            stagewise_core::View::new("wrist", solid([0, 0, 51])),
            stagewise_core::View::new("top", solid([255, 255, 255])),
            stagewise_core::View::new("side", solid([9, 0, 9])),
            stagewise_core::View::new("front", solid([255, 7, 7])),
        ],
        state: vec![0.1, 0.2, 0.3, 0.04, 1.0],
    };
    let mut row = vec![0.0f32; pixels.len() + 4];
    pixels.write(&obs, &mut row[..576]).unwrap();
    assert_eq!(
        (row[0], row[64], row[128], row[192]),
        (255.0, 7.0, 7.0, 9.0)
    );
    bound.state_map.select(&obs.state, &mut row[576..]).unwrap();
    let mut model = bound.model;
    let a = model.act(&[&row]).unwrap().remove(0);
    let want = [1.0, -1.0, 51.0 / 255.0 * 2.0 - 1.0, 0.04];
    assert!(
        a.iter().zip(want).all(|(x, y)| (x - y).abs() < 1e-5),
        "{a:?} vs {want:?}"
    );
    // A frame of another size, or a missing view, is refused naming the view and both sizes.
    let mut small = obs.clone();
    small.views[3] = stagewise_core::View::new("front", image::RgbImage::new(16, 8));
    let e = pixels.write(&small, &mut row[..576]).unwrap_err();
    assert!(
        e.contains("\"front\"") && e.contains("16x8") && e.contains("8x8"),
        "{e}"
    );
    let mut blind = obs.clone();
    blind.views.remove(2);
    let e = pixels.write(&blind, &mut row[..576]).unwrap_err();
    assert!(
        e.contains("\"side\"") && e.contains("wrist, top, front"),
        "{e}"
    );
}

/// A source's cameras are checked against `[pixels]` before anything runs: a missing view names itself and the
/// views the source has; a view at another size names both sizes.
#[test]
fn a_pixel_policy_refuses_sources_without_its_views_at_its_size() {
    let bound = PolicyModel::load_bound(
        &model_path("pixel3v8"),
        "the test source",
        &hand_source(),
        None,
        4,
        runtime(),
        &cpu(),
    )
    .unwrap();
    let good = [view("front", 8, 8), view("side", 8, 8), view("wrist", 8, 8)];
    bound.check_views("the test cameras", &good).unwrap();
    let e = bound
        .check_views(
            "the test cameras",
            &[view("front", 8, 8), view("top", 8, 8)],
        )
        .unwrap_err();
    let t = e.to_string();
    assert!(
        matches!(e, ModelError::PolicyView { ref view, .. } if view == "side"),
        "{t}"
    );
    assert!(
        t.contains("pixel3v8.toml") && t.contains("it has: front, top"),
        "{t}"
    );
    let e = bound
        .check_views(
            "the test cameras",
            &[
                view("front", 8, 8),
                view("side", 32, 32),
                view("wrist", 8, 8),
            ],
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"side\" at 8x8") && e.contains("gives it at 32x32"),
        "{e}"
    );
}

/// A `[pixels]` manifest whose graph takes another input width is refused on the manifest, with the width it
/// computes and the graph's.
#[test]
fn a_pixel_policy_whose_graph_disagrees_with_its_pixels_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("models/test");
    std::fs::copy(src.join("pixel3v8.onnx"), dir.path().join("pixel3v8.onnx")).unwrap();
    let text = std::fs::read_to_string(src.join("pixel3v8.toml"))
        .unwrap()
        .replace("width = 8", "width = 16");
    let path = dir.path().join("wide.toml");
    std::fs::write(&path, text).unwrap();
    let e = PolicyModel::load_bound(
        &path,
        "the test source",
        &hand_source(),
        None,
        4,
        runtime(),
        &cpu(),
    )
    .err()
    .expect("a graph of another width");
    let t = e.to_string();
    assert!(
        matches!(e, ModelError::ManifestField { ref field, .. } if field == "pixels"),
        "{t}"
    );
    assert!(
        t.contains("wide.toml") && t.contains("= 1156 values") && t.contains("is 580"),
        "{t}"
    );
}

/// A graph that declares its inputs in its metadata must agree with its manifest (refused on the manifest, naming
/// the field), and is refused by `from_bytes`, which would read a state vector as it is: it is bound by name
/// (`bind_bytes`) as its manifest is.
#[test]
fn a_manifest_and_its_graphs_declared_inputs_must_agree() {
    use stagewise_model::{PIXELS_KEY, STATE_NAMES_KEY};
    let dir = tempfile::tempdir().unwrap();
    let manifest = std::fs::read_to_string(model_path("pixel3v8")).unwrap();
    let pixels = r#"{"views": ["front", "side", "wrist"], "width": 8, "height": 8}"#;
    let hand = r#"["ee_x", "ee_y", "ee_z", "gripper_width"]"#;
    let write = |name: &str, entries: &[(&str, &str)]| {
        let onnx = with_metadata(&bytes("pixel3v8.onnx"), entries);
        std::fs::write(dir.path().join(format!("{name}.onnx")), &onnx).unwrap();
        let sha = sha2_hex(&onnx);
        let text = manifest
            .lines()
            .map(|l| match l {
                l if l.starts_with("sha256") => format!("sha256 = \"{sha}\""),
                l if l.starts_with("onnx") => format!("onnx = \"{name}.onnx\""),
                l => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let load = |path: &std::path::Path| {
        PolicyModel::load_bound(
            path,
            "the test source",
            &hand_source(),
            None,
            4,
            runtime(),
            &cpu(),
        )
    };
    let agrees = write("agrees", &[(PIXELS_KEY, pixels), (STATE_NAMES_KEY, hand)]);
    let bound = load(&agrees).expect("metadata and manifest agree");
    assert_eq!(bound.pixels.as_ref().map(|p| p.len()), Some(576));
    let cases = [
        (
            "names",
            vec![
                (PIXELS_KEY, pixels),
                (
                    STATE_NAMES_KEY,
                    r#"["ee_y", "ee_x", "ee_z", "gripper_width"]"#,
                ),
            ],
            "state_names",
        ),
        (
            "size",
            vec![
                (
                    PIXELS_KEY,
                    r#"{"views": ["front", "side", "wrist"], "width": 16, "height": 8}"#,
                ),
                (STATE_NAMES_KEY, hand),
            ],
            "pixels",
        ),
        // Declaring inputs declares all: a graph without pixels reads none, whatever the manifest says.
        ("nopixels", vec![(STATE_NAMES_KEY, hand)], "pixels"),
    ];
    for (name, entries, field) in cases {
        let path = write(name, &entries);
        let e = load(&path).err().expect("a disagreement");
        let t = e.to_string();
        assert!(
            matches!(e, ModelError::ManifestField { field: ref f, .. } if f == field),
            "{name}: {t}"
        );
        assert!(
            t.contains(&format!("{name}.toml"))
                && t.contains(&format!("{name}.onnx"))
                && t.contains("must agree"),
            "{name}: {t}"
        );
    }
    let declared = std::fs::read(dir.path().join("agrees.onnx")).unwrap();
    let e = PolicyModel::from_bytes(&declared, "policy v3", 580, 4, runtime(), &cpu())
        .err()
        .expect("declared inputs are bound by name");
    assert!(e.to_string().contains("bind_bytes"), "{e}");
    let b = PolicyModel::bind_bytes(
        &declared,
        "policy v3",
        "the test source",
        &hand_source(),
        None,
        4,
        runtime(),
        &cpu(),
    )
    .expect("bound by name");
    assert_eq!(b.pixels, bound.pixels);
    assert_eq!(b.state_map.model_len(), 4);
}

fn sha2_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}
