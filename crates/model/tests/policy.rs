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
