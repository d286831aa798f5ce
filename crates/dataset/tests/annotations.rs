//! `write_annotations`: SARM stage annotations set, replaced and cleared in an existing dataset; the episodes
//! parquet keeps its other columns, temporal_proportions_sparse.json follows the annotated episodes, bad input is
//! refused naming the episode.

use crate::common;

use common::*;
use stagewise_core::StageProportions;
use stagewise_dataset::{write_annotations, Dataset, Images, StageAnnotation};

fn ann(b: &[i64], len: i64) -> StageAnnotation {
    StageAnnotation {
        names: STAGES.iter().map(|s| s.to_string()).collect(),
        start_frames: vec![0, b[0], b[1]],
        end_frames: vec![b[0], b[1], len],
    }
}

#[test]
fn annotations_are_set_replaced_and_cleared() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    let before = Dataset::open(&dir).unwrap();
    assert!(before.episodes()[1].stages.is_none());
    let ep2 = before.episodes()[2].stages.clone();

    // Annotate episode 1 (7 frames), clear episode 0, keep episode 2.
    let new1 = ann(&[2, 5], 7);
    let s = write_annotations(&dir, &[(1, Some(new1.clone())), (0, None)]).unwrap();
    assert_eq!((s.annotated, s.episodes), (2, 3));
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.episodes()[0].stages, None);
    assert_eq!(ds.episodes()[1].stages.as_ref(), Some(&new1));
    assert_eq!(ds.episodes()[2].stages, ep2);
    // Everything else of the episode metadata and the frames is as it was.
    for (a, b) in before.episodes().iter().zip(ds.episodes()) {
        assert_eq!(
            (a.length, &a.tasks, a.success, a.dataset_from_index),
            (b.length, &b.tasks, b.success, b.dataset_from_index)
        );
    }
    assert_eq!(
        ds.read_episode(1, Images::Decode).unwrap().images,
        before.read_episode(1, Images::Decode).unwrap().images
    );
    // Proportions over the two annotated episodes (core's formula), in the file and in the summary.
    let want =
        StageProportions::from_durations(&[new1.durations(), ep2.unwrap().durations()]).unwrap();
    let got: Vec<f64> = ds
        .temporal_proportions_sparse()
        .unwrap()
        .iter()
        .map(|(_, a)| *a)
        .collect();
    for (g, w) in got.iter().zip(want.proportions()) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {:?}", want.proportions());
    }
    assert_eq!(s.proportions.unwrap().len(), 3);

    // Clearing every annotation removes the proportions file too.
    let s = write_annotations(&dir, &[(1, None), (2, None)]).unwrap();
    assert_eq!(s.annotated, 0);
    let ds = Dataset::open(&dir).unwrap();
    assert!(ds.episodes().iter().all(|e| e.stages.is_none()));
    assert!(ds.temporal_proportions_sparse().is_none());
    assert!(!dir.join("meta/temporal_proportions_sparse.json").exists());
}

#[test]
fn bad_annotations_name_the_episode() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    write_dataset(&dir);
    let msg = write_annotations(&dir, &[(1, Some(ann(&[2, 5], 9)))])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("episode 1") && msg.contains("0..7"), "{msg}");
    let mut other = ann(&[2, 5], 7);
    other.names[0] = "approach".into();
    let msg = write_annotations(&dir, &[(1, Some(other))])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("episode 1") && msg.contains("approach"),
        "{msg}"
    );
    let msg = write_annotations(&dir, &[(5, None)])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("episode 5") && msg.contains("3 episodes"),
        "{msg}"
    );
    // Nothing was changed by the refused calls.
    assert!(Dataset::open(&dir).unwrap().episodes()[1].stages.is_none());
}
