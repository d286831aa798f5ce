//! `stagewise log export` on real logs of `stagewise run` (push-target, the shipped reward model on the CPU
//! provider, --no-stream): the dataset read back with stagewise-dataset's reader and checked against the log
//! decoded here, `stagewise label` on it reproducing the run's progress, a torn copy, a log without frames, a
//! corrupt record.

use stagewise_dataset::{Dataset, Images};
use stagewise_runtime::LogReader;
use stagewise_stream::wire::{decode, EpisodeMsg, ObservationMsg, ProgressMsg, TransitionMsg};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_stagewise")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stagewise(args: &[&str]) -> Output {
    Command::new(exe())
        .current_dir(root())
        .args(["--log", "warn"])
        .args(args)
        .output()
        .expect("stagewise")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `stagewise run` on push-target with the shipped reward model (CPU): 2 envs, 20-step episodes, 32x32 frames.
fn run_log(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let log = dir.join(name);
    let mut args = vec![
        "run",
        "--task",
        "push-target",
        "--provider",
        "cpu",
        "--envs",
        "2",
        "--max-steps",
        "20",
        "--width",
        "32",
        "--height",
        "32",
        "--no-stream",
        "--log-file",
        s(&log),
    ];
    args.extend(extra);
    let out = stagewise(&args);
    assert!(out.status.success(), "{}", text(&out));
    log
}

/// One log with frames, made once for the module: 4 episodes (2 per env).
fn framed_log() -> &'static Path {
    static LOG: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &LOG.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let log = run_log(
            dir.path(),
            "run.swlog",
            &["--episodes", "4", "--stream-images"],
        );
        (dir, log)
    })
    .1
}

fn export(log: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "log",
        "export",
        s(log),
        "--task",
        "push-target",
        "--out",
        s(out),
    ];
    args.extend(extra);
    stagewise(&args)
}

/// A logged episode, decoded here independently of the exporter.
#[derive(Default)]
struct Logged {
    transitions: Vec<TransitionMsg>,
    progress: BTreeMap<u64, ProgressMsg>,
    summary: Option<EpisodeMsg>,
}

fn read_log(path: &Path) -> BTreeMap<(u32, u64), Logged> {
    let mut r = LogReader::open(path).unwrap();
    let mut by = BTreeMap::<(u32, u64), Logged>::new();
    while let Some(rec) = r.next_record().unwrap() {
        if rec.key.ends_with("/transition") {
            let m: TransitionMsg = decode(&rec.payload).unwrap();
            by.entry((m.env, m.episode))
                .or_default()
                .transitions
                .push(m);
        } else if rec.key.ends_with("/progress") {
            let m: ProgressMsg = decode(&rec.payload).unwrap();
            by.entry((m.env, m.episode))
                .or_default()
                .progress
                .insert(m.step, m);
        } else if rec.key.ends_with("/episode") {
            let m: EpisodeMsg = decode(&rec.payload).unwrap();
            let key = (m.env, m.episode);
            by.entry(key).or_default().summary = Some(m);
        }
    }
    by
}

/// `meta/stagewise_export.json`'s episodes: dataset index -> (env, episode).
fn origins(ds: &Path) -> Vec<(u32, u64)> {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ds.join("meta/stagewise_export.json")).unwrap())
            .unwrap();
    meta["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, e)| {
            assert_eq!(e["episode_index"], i);
            (
                e["env"].as_u64().unwrap() as u32,
                e["episode"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// No dataset at `out` and no temporary export directory beside it.
fn nothing_left(out: &Path) {
    assert!(!out.exists(), "{} was left behind", out.display());
    let name = format!(".{}.export-", out.file_name().unwrap().to_str().unwrap());
    let left: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&name))
        .collect();
    assert!(left.is_empty(), "temporary export left behind: {left:?}");
}

#[test]
fn a_run_log_exports_frame_by_frame_as_the_run_logged_it() {
    let log = framed_log();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let o = export(log, &out, &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("4 episodes"), "{t}");
    assert!(!t.contains("skipped") && !t.contains("cut"), "{t}");

    let logged = read_log(log);
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.num_episodes(), 4);
    assert_eq!(ds.tasks(), ["push-target"]);
    assert_eq!(ds.fps(), 50);
    let features: Vec<&str> = ds.info().features.keys().collect();
    for key in [
        "observation.images.front",
        "observation.state",
        "action",
        "next.reward",
        "next.task_reward",
        "next.done",
        "next.terminated",
        "next.success",
        "stagewise.progress",
        "stagewise.stage",
    ] {
        assert!(features.contains(&key), "{key} missing: {features:?}");
    }
    // The model's reading is never written as the recorder's ground truth.
    assert!(!features.contains(&"progress_gt") && !features.contains(&"stage_gt"));
    assert_eq!(
        ds.state_names().unwrap(),
        stagewise_sim::state_spec(stagewise_sim::Task::PushTarget).names
    );

    let origins = origins(&out);
    assert_eq!(origins.len(), 4);
    for (i, key) in origins.iter().enumerate() {
        let l = &logged[key];
        let summary = l.summary.as_ref().expect("an ended episode");
        let ep = ds.read_episode(i, Images::Decode).unwrap();
        let n = l.transitions.len();
        assert_eq!(ep.len(), n, "episode {i}");
        assert_eq!(ds.episodes()[i].success, Some(summary.success));
        let views: Vec<String> = ep.images.iter().map(|(k, _)| k.clone()).collect();
        for (k, t) in l.transitions.iter().enumerate() {
            assert_eq!(t.step, k as u64);
            // Frame k: the observation action k was taken in (the reset observation for k = 0).
            let obs: &ObservationMsg = if k == 0 {
                t.obs.as_ref().expect("the reset observation")
            } else {
                l.transitions[k - 1].next_obs.as_ref().unwrap()
            };
            assert_eq!(ep.state(k), obs.state.to_f32_vec().unwrap(), "{i}:{k}");
            assert_eq!(ep.action(k), t.action.as_slice(), "{i}:{k}");
            for (v, (name, tensor)) in obs.images.iter().enumerate() {
                assert_eq!(views[v], format!("observation.images.{name}"));
                assert_eq!(
                    ep.images[v].1[k],
                    tensor.to_rgb().unwrap(),
                    "{i}:{k} {name}"
                );
            }
            let col = |c: &str| ep.extra(c).unwrap()[k];
            assert_eq!(col("next.reward"), f64::from(t.reward as f32));
            assert_eq!(col("next.task_reward"), f64::from(t.task_reward as f32));
            assert_eq!(col("next.success"), f64::from(u8::from(t.success)));
            let last = k + 1 == n;
            assert_eq!(col("next.done"), f64::from(u8::from(last)), "{i}:{k}");
            assert_eq!(
                col("next.terminated"),
                f64::from(u8::from(last && summary.terminated))
            );
            let p = &l.progress[&(k as u64)];
            assert_eq!(col("stagewise.progress"), f64::from(p.phi), "{i}:{k}");
            assert_eq!(col("stagewise.stage"), f64::from(p.stage), "{i}:{k}");
            assert!((f64::from(ep.timestamp[k]) - k as f64 / 50.0).abs() < 1e-6);
        }
    }

    // `stagewise label` with the run's own model reads the exported frames and state as the run's model read
    // them: its progress is the run's, frame by frame (the frames are aligned and stored losslessly).
    let o = stagewise(&[
        "label",
        "--dataset",
        s(&out),
        "--model",
        "models/push-target/push-target-progress.toml",
        "--provider",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let labels = stagewise_dataset::SarmProgress::read(ds.sarm_progress_path()).unwrap();
    let by_index: BTreeMap<i64, f32> = labels
        .index
        .iter()
        .copied()
        .zip(labels.progress_sparse.iter().copied())
        .collect();
    let mut worst = 0.0f64;
    for (i, _) in origins.iter().enumerate() {
        let ep = ds.read_episode(i, Images::Skip).unwrap();
        let run = ep.extra("stagewise.progress").unwrap();
        for (k, idx) in ep.index.iter().enumerate() {
            let label = by_index.get(idx).expect("a label per frame");
            worst = worst.max((f64::from(*label) - run[k]).abs());
        }
    }
    assert!(
        worst < 1e-4,
        "label and the run's progress differ by {worst}"
    );
}

#[test]
fn a_torn_log_exports_every_complete_episode_and_says_what_was_cut() {
    let bytes = std::fs::read(framed_log()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.swlog");
    // Inside the last record (the last episode's summary): that episode never ended in the log.
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let out = dir.path().join("ds");
    let o = export(&cut, &out, &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("the log is cut"), "{t}");
    assert!(t.contains("bytes lost"), "{t}");
    assert!(t.contains("3 episodes"), "{t}");
    assert!(t.contains("skipped 1 unfinished episode"), "{t}");
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.num_episodes(), 3);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("meta/stagewise_export.json")).unwrap())
            .unwrap();
    assert_eq!(meta["unfinished_skipped"].as_array().unwrap().len(), 1);
    assert!(meta["torn_tail"]["bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_log_without_frames_is_refused_naming_the_file_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let log = run_log(dir.path(), "bare.swlog", &["--episodes", "2"]);
    let out = dir.path().join("ds");
    let o = export(&log, &out, &[]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains(s(&log)), "{t}");
    assert!(t.contains("--stream-images"), "{t}");
    nothing_left(&out);
}

#[test]
fn a_corrupt_record_is_an_error_with_its_offset_and_leaves_nothing_behind() {
    let bytes = std::fs::read(framed_log()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.swlog");
    // Every episode is complete (and written to the temporary dataset) before the corrupt record.
    std::fs::write(&bad, [bytes.clone(), 0u32.to_le_bytes().to_vec()].concat()).unwrap();
    let out = dir.path().join("ds");
    let o = export(&bad, &out, &[]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains(s(&bad)), "{t}");
    assert!(t.contains(&format!("at byte {}", bytes.len())), "{t}");
    assert!(t.contains("corrupt log"), "{t}");
    nothing_left(&out);
}

#[test]
fn bad_arguments_are_refused_before_anything_is_written() {
    let log = framed_log();
    let dir = tempfile::tempdir().unwrap();
    // Another task (pick-place has push-target's state size, not its stages).
    let out = dir.path().join("ds");
    let o = stagewise(&[
        "log",
        "export",
        s(log),
        "--task",
        "pick-place",
        "--out",
        s(&out),
    ]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("task pick-place has 6 stages"), "{t}");
    nothing_left(&out);
    // An --out that holds something.
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"x").unwrap();
    let o = export(log, &full, &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("exists and is not empty"), "{}", text(&o));
    // --env picks envs.
    let o = export(log, &out, &["--env", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(origins(&out).iter().all(|&(env, _)| env == 1));
    assert_eq!(origins(&out).len(), 2);
}
