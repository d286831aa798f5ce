//! `stagewise label` end to end: record a small sim dataset with `stagewise record`, label it with a test model,
//! and check the written `sarm_progress.parquet` (LeRobot's columns, `reward_model_path`, one row per frame in
//! `index` order), that batched labelling equals the runtime's step-by-step scoring, that `--stride` keeps the
//! scored frames and interpolates the rest, the RA-BC outputs, the plots, and clear errors on bad input.

use crate::common;
use common::tiny3v_reading;
use stagewise_core::{Observation, RabcConfig, RabcWeights, View};
use stagewise_dataset::{strided_frames, Dataset, Images, SarmProgress};
use stagewise_model::{OrtRuntime, RewardModel, SessionOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_stagewise")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const MODEL: &str = "models/test/tiny1v.toml";

fn stagewise(args: &[&str]) -> Output {
    Command::new(exe())
        .current_dir(root())
        .args(args)
        .output()
        .expect("run stagewise")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn err(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// A recorded pick-place dataset (4 episodes, half degraded, 32x32) under the target's test directory, shared
/// by the tests; never modified.
fn dataset() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("label_e2e_ds");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        ok(&stagewise(&[
            "record",
            "--task",
            "pick-place",
            "--episodes",
            "4",
            "--degraded",
            "0.5",
            "--seed",
            "7",
            "--width",
            "32",
            "--height",
            "32",
            "--threads",
            "2",
            "--out",
            dir.to_str().unwrap(),
        ]));
        dir
    })
}

/// A copy of the dataset's files (to label into, or to break).
fn copy_dataset(to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let dst = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &dst);
            } else {
                std::fs::copy(e.path(), dst).unwrap();
            }
        }
    }
    copy(dataset(), to);
}

#[test]
fn labels_every_frame_in_lerobots_format() {
    let tmp = tempfile::tempdir().unwrap();
    let ds_dir = tmp.path().join("ds");
    copy_dataset(&ds_dir);
    let weights_csv = tmp.path().join("w.csv");
    let summary = tmp.path().join("s.json");
    let stdout = ok(&stagewise(&[
        "label",
        "--dataset",
        ds_dir.to_str().unwrap(),
        "--model",
        MODEL,
        "--workers",
        "2",
        "--batch",
        "16",
        "--chunk-size",
        "10",
        "--plots",
        "2",
        "--weights-csv",
        weights_csv.to_str().unwrap(),
        "--summary-json",
        summary.to_str().unwrap(),
    ]));
    assert!(stdout.contains("RA-BC (chunk 10, kappa 0.01)"), "{stdout}");

    let ds = Dataset::open(&ds_dir).unwrap();
    let path = ds.sarm_progress_path();
    let sp = SarmProgress::read(&path).unwrap();
    assert_eq!(sp.reward_model_path.as_deref(), Some(MODEL));
    assert_eq!(sp.len() as u64, ds.num_frames());
    assert!(sp.progress_dense.is_none());
    assert!(sp.index.windows(2).all(|w| w[0] < w[1]), "rows by index");
    assert!(sp
        .progress_sparse
        .iter()
        .all(|p| p.is_finite() && (0.0..=1.0).contains(p)));

    // Rows match the dataset's own index / episode_index / frame_index, and the labels equal the runtime's
    // step-by-step scoring (RewardModel::score with per-env windows).
    let rt = OrtRuntime::init(None).unwrap();
    let mut model = RewardModel::load(
        &root().join(MODEL),
        rt,
        &SessionOptions {
            intra_threads: 1,
            ..SessionOptions::default()
        },
    )
    .unwrap();
    let groups = sp.per_episode(&path).unwrap();
    assert_eq!(groups.len(), ds.num_episodes());
    let mut per_episode = Vec::new();
    for (e, (ep_idx, progress)) in groups.iter().enumerate() {
        assert_eq!(*ep_idx, e as i64);
        let ep = ds.read_episode(e, Images::Decode).unwrap();
        assert_eq!(progress.len(), ep.len());
        let rows: Vec<usize> = (0..sp.len())
            .filter(|&i| sp.episode_index[i] == e as i64)
            .collect();
        let index: Vec<i64> = rows.iter().map(|&i| sp.index[i]).collect();
        assert_eq!(index, ep.index);
        let front = ep.images("observation.images.front").unwrap();
        model.reset_env(0);
        for (t, &p) in progress.iter().enumerate() {
            let obs = Observation {
                step: t as u64,
                time: t as f64 * 0.02,
                views: vec![View::new("front", front[t].clone())],
                state: vec![],
            };
            let want = model.score(&[&obs]).unwrap()[0].phi;
            assert!(
                (want - p).abs() < 1e-5,
                "episode {e} frame {t}: label {p}, runtime {want}"
            );
        }
        per_episode.push(progress.iter().map(|&p| f64::from(p)).collect::<Vec<_>>());
    }

    // The weights CSV and the summary are core's RA-BC on these labels.
    let core = RabcWeights::compute(
        &per_episode,
        &RabcConfig {
            chunk_size: 10,
            ..RabcConfig::default()
        },
    )
    .unwrap();
    let csv = std::fs::read_to_string(&weights_csv).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("index,episode_index,frame_index,progress,delta,weight")
    );
    let flat: Vec<f64> = core.weights.iter().flatten().copied().collect();
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), flat.len());
    for (r, w) in rows.iter().zip(&flat) {
        assert_eq!(r[5], *w);
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(json["frames"].as_u64(), Some(ds.num_frames()));
    assert_eq!(json["windows_scored"].as_u64(), Some(ds.num_frames()));
    assert_eq!(
        json["rabc"]["summary"]["mean_weight"].as_f64(),
        Some(core.summary.mean_weight)
    );

    // Plots for the first two episodes.
    for e in 0..2 {
        let png = ds_dir.join(format!("sarm_progress_plots/episode_{e:04}.png"));
        let img = image::open(&png).unwrap();
        assert_eq!((img.width(), img.height()), (800, 300));
    }
    assert!(!ds_dir.join("sarm_progress_plots/episode_0002.png").exists());
}

/// The shipped pick-place model has a two-part form (encoder + head); labels through it equal the single
/// graph's, at stride 1 and with a stride (where only some frames are encoded).
#[test]
fn two_part_labels_equal_the_single_graph() {
    let tmp = tempfile::tempdir().unwrap();
    let model = "models/pick-place/pick-place-progress.toml";
    let ds = dataset().to_str().unwrap();
    for stride in ["1", "3"] {
        let mut labels = Vec::new();
        for single in [false, true] {
            let out = tmp.path().join(format!("s{stride}-{single}.parquet"));
            let summary = tmp.path().join(format!("s{stride}-{single}.json"));
            let mut args = vec![
                "label",
                "--dataset",
                ds,
                "--model",
                model,
                "--stride",
                stride,
                "--batch",
                "7",
                "--plots",
                "0",
                "--out",
                out.to_str().unwrap(),
                "--summary-json",
                summary.to_str().unwrap(),
            ];
            if single {
                args.push("--single-graph");
            }
            let stdout = ok(&stagewise(&args));
            let form = if single { "single graph" } else { "two-part" };
            assert!(stdout.contains(form), "{stdout}");
            let json: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
            assert_eq!(json["two_part"], serde_json::Value::Bool(!single));
            labels.push(SarmProgress::read(&out).unwrap());
        }
        assert_eq!(labels[0].index, labels[1].index);
        let max = labels[0]
            .progress_sparse
            .iter()
            .zip(&labels[1].progress_sparse)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            max < 1e-5,
            "stride {stride}: two-part vs single graph differ by {max}"
        );
        let spread = labels[0]
            .progress_sparse
            .iter()
            .fold(0.0f32, |m, &p| m.max(p))
            - labels[0]
                .progress_sparse
                .iter()
                .fold(1.0f32, |m, &p| m.min(p));
        assert!(
            spread > 0.5,
            "the trained model's labels should span the task: {spread}"
        );
    }
    // A two-part manifest whose head file is missing is refused, naming the file.
    let dir = tmp.path().join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    for f in [
        "pick-place-progress.toml",
        "pick-place-progress.onnx",
        "pick-place-progress.encoder.onnx",
    ] {
        std::fs::copy(root().join("models/pick-place").join(f), dir.join(f)).unwrap();
    }
    let manifest = dir.join("pick-place-progress.toml");
    let e = err(&stagewise(&[
        "label",
        "--dataset",
        ds,
        "--model",
        manifest.to_str().unwrap(),
        "--out",
        tmp.path().join("x.parquet").to_str().unwrap(),
    ]));
    assert!(e.contains("pick-place-progress.head.onnx"), "{e}");
}

#[test]
fn stride_keeps_scored_frames_and_interpolates_between() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full.parquet");
    let strided = tmp.path().join("strided.parquet");
    let ds = dataset().to_str().unwrap();
    for (stride, out) in [("1", &full), ("5", &strided)] {
        ok(&stagewise(&[
            "label",
            "--dataset",
            ds,
            "--model",
            MODEL,
            "--stride",
            stride,
            "--plots",
            "0",
            "--out",
            out.to_str().unwrap(),
        ]));
    }
    let a = SarmProgress::read(&full).unwrap();
    let b = SarmProgress::read(&strided).unwrap();
    assert_eq!(a.index, b.index);
    let ga = a.per_episode(&full).unwrap();
    let gb = b.per_episode(&strided).unwrap();
    let mut interpolated_differs = false;
    for ((_, pa), (_, pb)) in ga.iter().zip(&gb) {
        let scored = strided_frames(pa.len(), 5);
        for w in scored.windows(2) {
            let (s, e) = (w[0], w[1]);
            assert!((pa[s] - pb[s]).abs() < 1e-5 && (pa[e] - pb[e]).abs() < 1e-5);
            for t in s + 1..e {
                let x = (t - s) as f32 / (e - s) as f32;
                let lin = pb[s] + x * (pb[e] - pb[s]);
                assert!((pb[t] - lin).abs() < 1e-5, "frame {t}: {} vs {lin}", pb[t]);
                interpolated_differs |= (pa[t] - pb[t]).abs() > 1e-4;
            }
        }
    }
    // The untrained test model is not linear in time: interpolation must have changed something.
    assert!(interpolated_differs);
}

#[test]
fn bad_input_gives_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset().to_str().unwrap();
    let out = tmp.path().join("p.parquet");
    let out = out.to_str().unwrap();

    // tiny3v takes an 8-value state; pick-place records 14.
    let msg = err(&stagewise(&[
        "label",
        "--dataset",
        ds,
        "--model",
        "models/test/tiny3v.toml",
        "--out",
        out,
    ]));
    assert!(
        msg.contains("info.json") && msg.contains("observation.state") && msg.contains("8"),
        "{msg}"
    );

    // A policy is not a reward model.
    let msg = err(&stagewise(&[
        "label",
        "--dataset",
        ds,
        "--model",
        "models/test/policy8x4.toml",
        "--out",
        out,
    ]));
    assert!(msg.contains("stage_progress"), "{msg}");

    let msg = err(&stagewise(&[
        "label",
        "--dataset",
        ds,
        "--model",
        MODEL,
        "--stride",
        "0",
        "--out",
        out,
    ]));
    assert!(msg.contains("--stride"), "{msg}");

    // A worker that cannot load ONNX Runtime (while it reads its first episode) fails the run, naming the
    // library, and writes nothing.
    let msg = err(&stagewise(&[
        "label",
        "--dataset",
        ds,
        "--model",
        MODEL,
        "--ort-lib",
        "/nonexistent/libonnxruntime.so",
        "--out",
        out,
    ]));
    assert!(
        msg.contains("could not load the ONNX Runtime library /nonexistent/libonnxruntime.so"),
        "{msg}"
    );
    assert!(!Path::new(out).exists());

    // Malformed info.json names the file.
    let broken = tmp.path().join("broken");
    copy_dataset(&broken);
    std::fs::write(broken.join("meta/info.json"), "{ not json").unwrap();
    let msg = err(&stagewise(&[
        "label",
        "--dataset",
        broken.to_str().unwrap(),
        "--model",
        MODEL,
    ]));
    assert!(msg.contains("info.json"), "{msg}");

    // A dataset without the model's camera names info.json, the camera and the keys it has.
    let nocam = tmp.path().join("nocam");
    copy_dataset(&nocam);
    let info_path = nocam.join("meta/info.json");
    let mut info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&info_path).unwrap()).unwrap();
    let features = info["features"].as_object_mut().unwrap();
    let front = features.remove("observation.images.front").unwrap();
    features.insert("observation.images.top".into(), front);
    std::fs::write(&info_path, serde_json::to_string(&info).unwrap()).unwrap();
    let msg = err(&stagewise(&[
        "label",
        "--dataset",
        nocam.to_str().unwrap(),
        "--model",
        MODEL,
    ]));
    assert!(
        msg.contains("info.json")
            && msg.contains("`front`")
            && msg.contains("observation.images.top"),
        "{msg}"
    );
    assert!(!nocam.join("sarm_progress.parquet").exists());
}

/// ONNX Runtime's telemetry stays off: loading a model writes nothing under the user's cache directory
/// (ONNX Runtime 1.31 creates ~/.cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db unless told not to).
#[test]
fn onnx_runtime_telemetry_writes_nothing_in_home() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(exe())
        .current_dir(root())
        .args(["models", "check", MODEL])
        .env("HOME", home.path())
        .env_remove("XDG_CACHE_HOME")
        .env_remove("ORT_DISABLE_TELEMETRY")
        .output()
        .expect("run stagewise");
    ok(&out);
    let left: Vec<_> = files_under(home.path());
    assert!(left.is_empty(), "written under HOME: {left:?}");
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        }
        out.push(p);
    }
    out
}

/// Eight of the recorded dataset's state fields, in another order than the dataset's.
fn eight_fields(ds: &Dataset) -> Vec<String> {
    let names = ds
        .state_names()
        .expect("the recorder names the state fields");
    assert!(names.len() > 8, "{names:?}");
    let mut picked: Vec<String> = names.iter().step_by(2).take(8).cloned().collect();
    if picked.len() < 8 {
        picked.extend(
            names
                .iter()
                .skip(1)
                .step_by(2)
                .take(8 - picked.len())
                .cloned(),
        );
    }
    picked.reverse();
    picked
}

#[test]
fn label_refuses_a_model_asking_for_a_field_the_dataset_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dataset()).unwrap();
    let mut fields = eight_fields(&ds);
    fields[3] = "block9_x".into();
    let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
    let model = tiny3v_reading(tmp.path(), &refs);
    let out = tmp.path().join("p.parquet");
    let msg = err(&stagewise(&[
        "label",
        "--dataset",
        dataset().to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]));
    let has = ds.state_names().unwrap().join(", ");
    assert!(
        msg.contains("reads state field \"block9_x\"")
            && msg.contains("observation.state")
            && msg.contains(&format!("(it has: {has})")),
        "{msg}"
    );
    assert!(!out.exists());
}

/// Labels of a model reading some of the dataset's state fields, in its own order, equal the runtime's
/// step-by-step scores with the state picked by hand.
#[test]
fn label_reads_the_models_state_fields_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dataset()).unwrap();
    let fields = eight_fields(&ds);
    let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
    let model = tiny3v_reading(tmp.path(), &refs);
    let out = tmp.path().join("p.parquet");
    ok(&stagewise(&[
        "label",
        "--dataset",
        dataset().to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--plots",
        "0",
    ]));
    let names = ds.state_names().unwrap();
    let at: Vec<usize> = fields
        .iter()
        .map(|f| names.iter().position(|n| n == f).unwrap())
        .collect();
    // The shipped test manifest (no names, 8 values) fed the picked values by hand.
    let mut plain = RewardModel::load(
        &root().join("models/test/tiny3v.toml"),
        OrtRuntime::init(None).unwrap(),
        &SessionOptions {
            intra_threads: 1,
            ..SessionOptions::default()
        },
    )
    .unwrap();
    let sp = SarmProgress::read(&out).unwrap();
    let (_, progress) = &sp.per_episode(&out).unwrap()[0];
    let ep = ds.read_episode(0, Images::Decode).unwrap();
    let cams: Vec<(&str, &[image::RgbImage])> = ["front", "side", "wrist"]
        .iter()
        .map(|v| (*v, ep.images(&format!("observation.images.{v}")).unwrap()))
        .collect();
    for (t, &p) in progress.iter().enumerate() {
        let obs = Observation {
            step: t as u64,
            time: t as f64 * 0.02,
            views: cams
                .iter()
                .map(|(v, f)| View::new(*v, f[t].clone()))
                .collect(),
            state: at.iter().map(|&i| ep.state(t)[i]).collect(),
        };
        let want = plain.score(&[&obs]).unwrap()[0].phi;
        assert!(
            (want - p).abs() < 1e-5,
            "frame {t}: label {p}, by hand {want}"
        );
    }
}

/// `stagewise eval` ablations: blanked views and held state fields, one at a time or side by side.
#[test]
fn eval_ablations_show_what_the_model_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dataset()).unwrap();
    let fields = eight_fields(&ds);
    let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
    let model = tiny3v_reading(tmp.path(), &refs);
    let unread = ds
        .state_names()
        .unwrap()
        .into_iter()
        .find(|n| !fields.contains(n))
        .unwrap();
    let eval = |out: &str, extra: &[&str]| {
        let out = tmp.path().join(out);
        let mut args = vec![
            "eval",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--dataset",
            dataset().to_str().unwrap(),
            "--max-episodes",
            "2",
            "--no-plots",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = stagewise(&args);
        (o, out)
    };
    let hold = format!("{},{unread}", fields[0]);
    let (o, dir) = eval("side", &["--ablations", "--hold-state", &hold]);
    let stdout = ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        stderr.contains(&format!("does not read state field {unread:?}")),
        "{stderr}"
    );
    for row in [
        "as is",
        "all views blanked",
        "blank front",
        "blank side",
        "blank wrist",
        "hold state read (8 fields)",
        &format!("hold {}", fields[0]),
        &format!("hold {unread}"),
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(row)),
            "no row {row:?}:\n{stdout}"
        );
    }
    let table: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ablations.json")).unwrap())
            .unwrap();
    assert_eq!(table.len(), 8);
    let mae = |i: usize| table[i]["summary"]["progress_mae"].as_f64().unwrap();
    let row = |name: &str| {
        table
            .iter()
            .position(|r| r["ablation"] == name)
            .unwrap_or_else(|| panic!("no {name} in {table:?}"))
    };
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary, table[0]["summary"],
        "summary.json is the data as is"
    );
    // The untrained model reads its views: blanking them all changes its output.
    assert_ne!(mae(row("all views blanked")), mae(0));
    // A field the model does not read changes nothing.
    assert_eq!(mae(row(&format!("hold {unread}"))), mae(0));

    // One view blanked alone (`--drop-view` is `--blank-view`) is the ablation table's row.
    let (o, dir) = eval("one", &["--drop-view", "wrist"]);
    let stdout = ok(&o);
    assert!(stdout.contains("with views blanked: [wrist]"), "{stdout}");
    let one: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(one, table[row("blank wrist")]["summary"]);
    // Holding a field by flag is the table's row too.
    let (o, dir) = eval("held", &["--hold-state", &fields[0]]);
    ok(&o);
    let held: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(held, table[row(&format!("hold {}", fields[0]))]["summary"]);

    // Unknown names are refused, naming them.
    let (o, _) = eval("bad", &["--hold-state", "block9_x"]);
    let msg = err(&o);
    assert!(
        msg.contains("block9_x") && msg.contains("it has: "),
        "{msg}"
    );
    let (o, _) = eval("bad2", &["--blank-view", "top"]);
    let msg = err(&o);
    assert!(msg.contains("\"top\"") && msg.contains("wrist"), "{msg}");
}
