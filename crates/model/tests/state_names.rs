//! State by name (manifest `state_names`, `StateMap`): a model bound to a source with extra fields in another
//! order scores exactly like the model fed its own state; fields the source lacks and sizes that disagree are
//! refused at bind time, naming the field or both sizes; after binding, checks apply to the source's size and
//! to the values the model reads. For `RewardModel`, `HopModel` and `TwoPartModel`.

use crate::common;

use common::{cpu, observation, root, runtime};
use stagewise_core::Observation;
use stagewise_model::{HopModel, Manifest, ModelError, RewardModel, TwoPartModel};
use std::path::PathBuf;

/// Copies the files of `dir_in_models` next to a manifest `name.toml` whose state fields are named
/// `m0 .. m{S-1}` (replacing any `state_size` / `state_names` line); returns (temp dir, manifest path, S).
fn named_copy(dir_in_models: &str, name: &str) -> (tempfile::TempDir, PathBuf, usize) {
    let src = root().join("models").join(dir_in_models);
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
    }
    let path = dir.path().join(format!("{name}.toml"));
    let s = Manifest::load(&path).unwrap().state_size;
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("state_size") && !l.starts_with("state_names"))
        .collect();
    let names: Vec<String> = (0..s).map(|i| format!("\"m{i}\"")).collect();
    let edited = format!(
        "state_names = [{}]\n{}\n",
        names.join(", "),
        kept.join("\n")
    );
    std::fs::write(&path, edited).unwrap();
    (dir, path, s)
}

/// A source with the model's `s` fields in reverse order among extra fields: (names, where model field i is).
fn source_names(s: usize) -> (Vec<String>, Vec<usize>) {
    let mut names = vec!["x_first".to_string()];
    for i in (0..s).rev() {
        names.push(format!("m{i}"));
        if i % 3 == 0 {
            names.push(format!("x{i}"));
        }
    }
    names.push("x_last".into());
    let at = (0..s)
        .map(|i| names.iter().position(|n| *n == format!("m{i}")).unwrap())
        .collect();
    (names, at)
}

/// `o` with its (model-ordered) state spread over the source's layout; extra fields get NaN, which the model
/// never reads.
fn as_source(o: &Observation, names: &[String], at: &[usize]) -> Observation {
    let mut state = vec![f32::NAN; names.len()];
    for (i, &j) in at.iter().enumerate() {
        state[j] = o.state[i];
    }
    Observation { state, ..o.clone() }
}

#[test]
fn a_bound_reward_model_scores_the_sources_state_like_its_own() {
    let (_d, path, s) = named_copy("test", "tiny3v");
    assert_eq!(s, 8);
    let mut plain = RewardModel::load(&path, runtime(), &cpu()).unwrap();
    let mut bound = RewardModel::load(&path, runtime(), &cpu()).unwrap();
    let (names, at) = source_names(s);
    bound.bind_state(&names).unwrap();
    assert_eq!(bound.state_map().unwrap().indices(), &at[..]);
    assert_eq!(bound.source_state_len(), names.len());
    let views = ["front", "side", "wrist"];
    for step in 0..6u64 {
        let own: Vec<Observation> = (0..2)
            .map(|e| observation(&views, e, step, 40, 30, s))
            .collect();
        let src: Vec<Observation> = own.iter().map(|o| as_source(o, &names, &at)).collect();
        let want = plain.score(&own.iter().collect::<Vec<_>>()).unwrap();
        let got = bound.score(&src.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(want, got, "step {step}");
        // One env alone (its window read in place) too.
        let want = plain.score_envs(&[0], &[&own[0]]).unwrap();
        let got = bound.score_envs(&[0], &[&src[0]]).unwrap();
        assert_eq!(want, got, "step {step}, one env");
    }
    // score_windows takes rows of the source's state once bound.
    let n = 3;
    let images = vec![0.1f32; n * plain.window_len()];
    let own: Vec<f32> = (0..n * s).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut src = Vec::new();
    for row in own.chunks(s) {
        let o = Observation {
            step: 0,
            time: 0.0,
            views: Vec::new(),
            state: row.to_vec(),
        };
        src.extend(as_source(&o, &names, &at).state);
    }
    let want = plain.score_windows(&images, &own, n).unwrap();
    let got = bound.score_windows(&images, &src, n).unwrap();
    assert_eq!(want, got);
    // The model's own layout is now the wrong size.
    let e = bound.score_windows(&images, &own, n).unwrap_err();
    assert!(matches!(e, ModelError::BadInput { .. }), "{e}");
}

#[test]
fn after_binding_checks_apply_to_the_source_and_the_values_read() {
    let (_d, path, s) = named_copy("test", "tiny3v");
    let mut bound = RewardModel::load(&path, runtime(), &cpu()).unwrap();
    let (names, at) = source_names(s);
    bound.bind_state(&names).unwrap();
    let views = ["front", "side", "wrist"];
    // The model's own 8 values are not the source's 12.
    let own = observation(&views, 1, 0, 40, 30, s);
    let e = bound.score(&[&own]).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, ModelError::BadObservation { env: 0, .. })
            && msg.contains(&format!("state has {s} values"))
            && msg.contains(&names.len().to_string()),
        "{msg}"
    );
    // NaN in a field the model reads is refused, naming the source index.
    let mut src = as_source(&own, &names, &at);
    src.state[at[2]] = f32::NAN;
    let msg = bound.score(&[&src]).unwrap_err().to_string();
    assert!(msg.contains(&format!("state[{}]", at[2])), "{msg}");
}

#[test]
fn binding_refuses_missing_fields_and_sizes_that_disagree() {
    let (_d, path, s) = named_copy("test", "tiny3v");
    let mut m = RewardModel::load(&path, runtime(), &cpu()).unwrap();
    let (mut names, _) = source_names(s);
    names.retain(|n| n != "m5");
    let e = m.bind_state(&names).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(&e, ModelError::StateFieldMissing { field, .. } if field == "m5")
            && msg.contains("\"m5\"")
            && msg.contains("it has: x_first, m7")
            && msg.contains(path.to_str().unwrap()),
        "{msg}"
    );
    assert!(
        m.state_map().is_none(),
        "a failed bind leaves the model as it was"
    );

    // The shipped test manifest has no names: it binds only to a source of its size (identity).
    let mut plain = common::load("tiny3v");
    let eight: Vec<String> = (0..8).map(|i| format!("f{i}")).collect();
    plain.bind_state(&eight).unwrap();
    assert!(plain.state_map().unwrap().is_identity());
    let nine: Vec<String> = (0..9).map(|i| format!("f{i}")).collect();
    let e = plain.bind_state(&nine).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            ModelError::StateSize {
                state_size: 8,
                source_len: 9,
                ..
            }
        ) && msg.contains("state_names"),
        "{msg}"
    );
    // A model without a state input binds to any source, and then ignores the source's state.
    let mut stateless = common::load("tiny1v");
    stateless.bind_state(&nine).unwrap();
    let o = observation(&["front"], 3, 0, 20, 20, 9);
    stateless.score(&[&o]).unwrap();
}

#[test]
fn a_bound_hop_model_scores_the_sources_state_like_its_own() {
    let (_d, path, s) = named_copy("pick-place", "pick-place-hop");
    let mut plain = HopModel::load(&path, runtime(), &cpu()).unwrap();
    let mut bound = HopModel::load(&path, runtime(), &cpu()).unwrap();
    let (names, at) = source_names(s);
    let mut short = names.clone();
    short.retain(|n| n != "m0");
    let e = bound.bind_state(&short).unwrap_err();
    assert!(e.to_string().contains("\"m0\""), "{e}");
    bound.bind_state(&names).unwrap();
    let m = plain.manifest().clone();
    let img = m.image.clone().unwrap();
    let views: Vec<&str> = m.views.iter().map(String::as_str).collect();
    let own: Vec<Observation> = (0..4)
        .map(|t| observation(&views, 5, t, img.width, img.height, s))
        .collect();
    let src: Vec<Observation> = own.iter().map(|o| as_source(o, &names, &at)).collect();
    let pairs =
        |v: &[Observation]| -> Vec<(usize, usize)> { (1..v.len()).map(|t| (0, t)).collect() };
    let want = plain
        .score_pairs(
            &pairs(&own)
                .iter()
                .map(|&(p, q)| (&own[p], &own[q]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let got = bound
        .score_pairs(
            &pairs(&src)
                .iter()
                .map(|&(p, q)| (&src[p], &src[q]))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    assert_eq!(want, got);
    // Unbound, the source's layout is the wrong size.
    let e = plain.score_pairs(&[(&src[0], &src[1])]).unwrap_err();
    assert!(matches!(e, ModelError::BadObservation { .. }), "{e}");
}

#[test]
fn a_bound_two_part_model_takes_the_sources_rows() {
    let (_d, path, s) = named_copy("pick-place", "pick-place-progress");
    let mut plain = TwoPartModel::load(&path, runtime(), &cpu()).unwrap();
    let mut bound = TwoPartModel::load(&path, runtime(), &cpu()).unwrap();
    let (names, at) = source_names(s);
    bound.bind_state(&names).unwrap();
    let m = plain.manifest().clone();
    let n = 3;
    let emb = vec![0.05f32; n * m.views.len() * m.frames * plain.embedding_len()];
    let own: Vec<f32> = (0..n * s).map(|i| (i as f32 * 0.21).cos()).collect();
    let mut src = vec![f32::NAN; n * names.len()];
    for (row, vals) in own.chunks(s).enumerate() {
        for (i, &j) in at.iter().enumerate() {
            src[row * names.len() + j] = vals[i];
        }
    }
    let want = plain.score_embeddings(&emb, &own, n).unwrap();
    let got = bound.score_embeddings(&emb, &src, n).unwrap();
    assert_eq!(want, got);
    let e = bound.score_embeddings(&emb, &own, n).unwrap_err();
    assert!(matches!(e, ModelError::BadInput { .. }), "{e}");
}
