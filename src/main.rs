//! `stagewise`: the command line. The only place that wires a concrete environment (simulator or robot) into
//! the runtime; every subcommand lives in its own module under `cmd/`.

mod cli;
mod cmd;
mod plot;

// mimalloc instead of glibc malloc: glibc gives the ~80 KB image buffers of every transition back to the OS and
// page-faults them in again, which halved transition throughput (crates/stream/benches/RESULTS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "stagewise",
    version,
    about = "Real-time stage-aware progress rewards for robot RL"
)]
struct Cli {
    /// Log filter (tracing env-filter syntax), e.g. `info`, `stagewise_model=debug`.
    #[arg(long, global = true, default_value = "info", env = "STAGEWISE_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: simulated envs + reward model + shaping + policy, streamed over zenoh and logged.
    Run(Box<cmd::run::RunArgs>),
    /// Serve one simulated env as zenoh queryables (env/reset, env/step) for remote learners.
    Serve(Box<cmd::serve::ServeArgs>),
    /// Push a policy to a running actor, or make a signing key pair.
    Policy(cmd::policy::PolicyArgs),
    /// Put an episode log back on the stream, byte for byte.
    Replay(cmd::replay::ReplayArgs),
    /// Episode-log tools: `log export LOG --task TASK --out DIR` turns a run's log (`run --stream-images`) into
    /// a LeRobot v3 dataset.
    Log(cmd::log::LogArgs),
    /// Score a frame sequence (recorded PNGs or generated) with a reward model and print its progress.
    Score(cmd::score::ScoreArgs),
    /// Reward-model tools: `models check <manifest>`.
    Models(cmd::models::ModelsArgs),
    /// Measure reward-model latency and batched throughput on synthetic frames.
    Bench(cmd::bench::BenchArgs),
    /// Run a scripted expert in the simulator and write the episode as PNG frames per view.
    Sim(cmd::sim::SimArgs),
    /// Record expert and degraded sim demonstrations as a LeRobot-layout dataset with stage annotations.
    Record(cmd::record::RecordArgs),
    /// Evaluate: `eval model` scores a recorded dataset with a reward model (VOC, VROC, stage accuracy, MAE,
    /// AUROC, PNG plots); `eval policy` rolls a policy out in the simulator (success rate).
    Eval(cmd::eval::EvalArgs),
    /// Label every frame of a LeRobot dataset with progress (sarm_progress.parquet for RA-BC) and print RA-BC weights.
    Label(Box<cmd::label::LabelArgs>),
    /// The reference firmware emulator over UDP with the simulator as its plant (the `stagewise-emulator` program).
    Emulator(stagewise_firmware::cli::EmulatorArgs),
    /// Robot operator verbs: `robot keygen FILE` (a link key), `robot reset-estop --bridge URL`.
    Robot(cmd::robot::RobotArgs),
    /// Adapt a progress model to a task variant from one (or a few) annotated demonstrations.
    Adapt(Box<cmd::adapt::AdaptArgs>),
    /// Set, export or clear the SARM stage annotations of a LeRobot v3 dataset (from/to a JSON file).
    Annotate(cmd::annotate::AnnotateArgs),
    /// Train a progress model from a LeRobot v3 dataset (image or video cameras, SARM stage annotations).
    Train(Box<cmd::train::TrainArgs>),
    /// Train a policy on a served task with a reward model, the oracle or the sparse reward (`python -m stagewise.rl`).
    ///
    /// Runs the Python package's learner from the project's venv with every argument as given: `stagewise learn
    /// --help` lists them.
    Learn(cmd::learn::LearnArgs),
    /// Where this binary finds ONNX Runtime, its Python package and the shipped reward models, and what to do
    /// about what is missing (exit code 1).
    Doctor(cmd::doctor::DoctorArgs),
    /// Show a run's episode log, a LeRobot dataset or a running actor in Rerun (`python -m stagewise.view`).
    ///
    /// Runs the Python package's viewer from the project's venv with every argument as given: `stagewise view
    /// --help` lists them (docs/view.md).
    View(cmd::view::ViewArgs),
}

fn main() -> anyhow::Result<()> {
    // ONNX Runtime's Linux wheel (1.31) starts its telemetry (a sqlite store under ~/.cache/Microsoft) while it
    // creates the environment, before the `DisableTelemetryEvents` that `stagewise-model` calls can stop it;
    // this variable keeps it off. Set first, while the process has a single thread.
    if std::env::var_os("ORT_DISABLE_TELEMETRY").is_none() {
        std::env::set_var("ORT_DISABLE_TELEMETRY", "1");
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log)?)
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Run(a) => cmd::run::run(*a),
        Command::Serve(a) => cmd::serve::run(*a),
        Command::Replay(a) => cmd::replay::run(a),
        Command::Log(a) => cmd::log::run(a),
        Command::Policy(a) => cmd::policy::run(a),
        Command::Score(a) => cmd::score::run(a),
        Command::Models(a) => cmd::models::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::Label(a) => cmd::label::run(*a),
        Command::Emulator(a) => stagewise_firmware::cli::run(a),
        Command::Robot(a) => cmd::robot::run(a),
        Command::Adapt(a) => cmd::adapt::run(*a),
        Command::Annotate(a) => cmd::annotate::run(a),
        Command::Train(a) => cmd::train::run(*a),
        Command::Learn(a) => cmd::learn::run(a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::View(a) => cmd::view::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    /// Parses as `main` does.
    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(args)
    }

    fn refused(args: &[&str]) -> clap::Error {
        match parse(args) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(e) => e,
        }
    }

    /// Every subcommand that takes `--task` (or `--provider`) refuses a wrong value with the valid ones.
    #[test]
    fn every_task_and_provider_flag_is_typed() {
        for sub in [
            "run",
            "serve",
            "sim",
            "record",
            "eval policy",
            "log export x.swlog --out y",
        ] {
            let mut args: Vec<&str> = vec!["stagewise"];
            args.extend(sub.split(' '));
            args.extend(["--task", "pick-plce"]);
            let e = refused(&args);
            assert_eq!(e.kind(), ErrorKind::InvalidValue, "{sub}: {e}");
            assert!(e.to_string().contains("push-target"), "{sub}: {e}");
        }
        for sub in [
            "run",
            "serve",
            "score",
            "bench",
            "eval model",
            "eval policy",
            "label",
            "models check m.toml",
        ] {
            let mut args: Vec<&str> = vec!["stagewise"];
            args.extend(sub.split(' '));
            args.extend(["--provider", "rocm"]);
            let e = refused(&args);
            assert_eq!(e.kind(), ErrorKind::InvalidValue, "{sub}: {e}");
            assert!(e.to_string().contains("tensorrt"), "{sub}: {e}");
        }
    }

    /// The shared scene flags mean the same in every simulator subcommand.
    #[test]
    fn scene_flags_are_shared() {
        let scene = [
            "--camera-jitter",
            "0.02",
            "--random-colors",
            "--held-out-colors",
        ];
        let check = |s: &cli::SceneArgs| {
            assert_eq!(s.camera_jitter, 0.02);
            assert!(s.random_colors && s.held_out_colors);
        };
        let parse = |sub: &[&str]| {
            let mut args = vec!["stagewise"];
            args.extend(sub);
            args.extend(scene);
            match Cli::try_parse_from(&args) {
                Ok(c) => c.command,
                Err(e) => panic!("{args:?}: {e}"),
            }
        };
        match parse(&["run"]) {
            Command::Run(a) => check(&a.sim.scene),
            _ => unreachable!(),
        }
        match parse(&["serve"]) {
            Command::Serve(a) => check(&a.sim.scene),
            _ => unreachable!(),
        }
        match parse(&["sim", "--render", "x"]) {
            Command::Sim(a) => check(&a.scene),
            _ => unreachable!(),
        }
        match parse(&["record", "--task", "stack", "--episodes", "1", "--out", "x"]) {
            Command::Record(a) => check(&a.scene),
            _ => unreachable!(),
        }
    }

    fn command(args: &[&str]) -> Command {
        let mut argv = vec!["stagewise"];
        argv.extend(args);
        match parse(&argv) {
            Ok(c) => c.command,
            Err(e) => panic!("{argv:?}: {e}"),
        }
    }

    /// `--robot-name` names the robot on the stream, `--bridge` is its firmware link; 0.1.0's `--robot NAME|URL`
    /// and `--no-multicast` are gone.
    #[test]
    fn robot_name_and_bridge_are_two_flags() {
        let url = "udp://127.0.0.1:9100";
        let run_target = |args: &[&str]| {
            let mut argv = vec!["run"];
            argv.extend(args);
            match command(&argv) {
                Command::Run(a) => (a.zenoh.robot_target(a.bridge.as_deref()), a.bridge),
                _ => unreachable!(),
            }
        };
        let some = |s: &str| Some(s.to_string());
        assert_eq!(run_target(&[]), ("sim0".into(), None));
        assert_eq!(run_target(&["--robot-name", "arm3"]), ("arm3".into(), None));
        assert_eq!(run_target(&["--bridge", url]), ("robot0".into(), some(url)));
        assert_eq!(
            run_target(&["--bridge", url, "--robot-name", "arm0"]),
            ("arm0".into(), some(url))
        );
        let serve_name = |args: &[&str]| {
            let mut argv = vec!["serve"];
            argv.extend(args);
            match command(&argv) {
                Command::Serve(a) => a.zenoh.robot_name(),
                _ => unreachable!(),
            }
        };
        assert_eq!(serve_name(&[]), "sim0");
        assert_eq!(serve_name(&["--robot-name", "vec"]), "vec");
        match command(&[
            "policy",
            "push",
            "p.onnx",
            "--version",
            "1",
            "--robot-name",
            "arm3",
        ]) {
            Command::Policy(cmd::policy::PolicyArgs {
                command: cmd::policy::PolicyCommand::Push(p),
            }) => assert_eq!(p.zenoh.robot_name(), "arm3"),
            _ => unreachable!(),
        }
        match command(&["robot", "reset-estop", "--bridge", url]) {
            Command::Robot(cmd::robot::RobotArgs {
                command: cmd::robot::RobotCommand::ResetEstop { bridge, .. },
            }) => assert_eq!(bridge, url),
            _ => unreachable!(),
        }
        for args in [
            &["stagewise", "run", "--robot", "arm3"][..],
            &["stagewise", "run", "--robot", url],
            &["stagewise", "serve", "--robot", "vec"],
            &["stagewise", "robot", "reset-estop", "--robot", url],
            &["stagewise", "serve", "--no-multicast"],
        ] {
            assert_eq!(refused(args).kind(), ErrorKind::UnknownArgument, "{args:?}");
        }
    }

    /// `--reward` is the reward source in `run` and `serve` alike; a wrong one is refused with the valid ones.
    #[test]
    fn reward_is_one_typed_vocabulary() {
        use cli::RewardSource;
        for (s, want) in [
            ("sparse", RewardSource::Sparse),
            ("model", RewardSource::Model),
            ("oracle", RewardSource::Oracle),
        ] {
            match command(&["serve", "--reward", s]) {
                Command::Serve(a) => assert_eq!(a.reward, want),
                _ => unreachable!(),
            }
            match command(&["run", "--reward", s]) {
                Command::Run(a) => assert_eq!(a.reward, Some(want)),
                _ => unreachable!(),
            }
        }
        match command(&["serve"]) {
            Command::Serve(a) => assert_eq!(a.reward, RewardSource::Sparse),
            _ => unreachable!(),
        }
        for sub in ["run", "serve"] {
            let e = refused(&["stagewise", sub, "--reward", "dense"]);
            assert_eq!(e.kind(), ErrorKind::InvalidValue, "{sub}: {e}");
            for v in ["sparse", "model", "oracle"] {
                assert!(e.to_string().contains(v), "{sub}: {e}");
            }
        }
        // `--reward` names a source only (the shaping is --shaping); both take the same --shaping flags.
        refused(&["stagewise", "run", "--reward", "rank:8"]);
        refused(&["stagewise", "serve", "--reward", "potential"]);
        for sub in ["run", "serve"] {
            let args = [
                "--shaping",
                "progress",
                "--potential-scale",
                "0.1",
                "--success-progress-one",
            ];
            let shaping = match command(&[&[sub][..], &args].concat()) {
                Command::Run(a) => a.shaping,
                Command::Serve(a) => a.shaping,
                _ => unreachable!(),
            };
            assert_eq!(
                shaping.mode().unwrap(),
                stagewise_core::RewardMode::Progress {
                    potential_scale: 0.1,
                    success_progress_one: true
                },
                "{sub}"
            );
        }
        let e = refused(&["stagewise", "run", "--shaping", "rank:x"]);
        assert!(
            e.to_string()
                .contains("potential, value:K (K steps per whole task), progress or rank:W"),
            "{e}"
        );
    }

    /// `eval model` and `eval policy` are the two jobs; 0.1.0's `eval` without a subcommand is gone.
    #[test]
    fn eval_has_two_subcommands() {
        match command(&[
            "eval",
            "model",
            "--model",
            "m.toml",
            "--dataset",
            "data/d",
            "--ablations",
        ]) {
            Command::Eval(cmd::eval::EvalArgs {
                command: cmd::eval::EvalCommand::Model(m),
            }) => assert_eq!(
                (m.model, m.dataset, m.ablations),
                ("m.toml".into(), "data/d".into(), true)
            ),
            _ => panic!("not `eval model`"),
        }
        match command(&[
            "--log",
            "warn",
            "eval",
            "policy",
            "--policy=p.toml",
            "--task",
            "stack",
            "--episodes",
            "7",
        ]) {
            Command::Eval(cmd::eval::EvalArgs {
                command: cmd::eval::EvalCommand::Policy(p),
            }) => assert_eq!(
                (p.policy, p.task, p.episodes),
                ("p.toml".into(), stagewise_sim::Task::Stack, 7)
            ),
            _ => panic!("not `eval policy`"),
        }
        // The jobs' flags stay apart, and `eval` needs a subcommand.
        refused(&[
            "stagewise",
            "eval",
            "policy",
            "--policy",
            "p.toml",
            "--dataset",
            "d",
        ]);
        refused(&["stagewise", "eval", "model", "--model", "m.toml"]);
        refused(&["stagewise", "eval"]);
        for old in [
            &["stagewise", "eval", "--policy", "p.toml"][..],
            &["stagewise", "eval", "--model", "m.toml", "--dataset", "d"],
        ] {
            let e = refused(old);
            assert_eq!(e.kind(), ErrorKind::UnknownArgument, "{old:?}: {e}");
        }
    }
}
