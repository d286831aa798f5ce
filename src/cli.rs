//! The shared command-line vocabulary: typed values for `--task`, `--provider`, `--reward` and `--shaping` (clap
//! refuses a wrong name and lists the valid ones; `--help` shows them), the scene-randomisation flags that the
//! simulator subcommands share, and the progress bar every long-running subcommand draws.
//!
//! One word, one meaning: `--reward` is where the reward's progress comes from (`sparse`, `model`, `oracle`) in
//! `run` and `serve` alike, `--model` is a reward-model manifest, `--shaping` is how progress becomes a reward
//! (`potential`, `naive`, `rank:W`), `--robot-name` is the robot's name on the stream and `--bridge` the URL of
//! its firmware bridge.

use clap::builder::{EnumValueParser, TypedValueParser};
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use stagewise_core::RewardMode;
use stagewise_model::Provider;
use stagewise_sim::{Randomization, Task};

/// The `--task` values: the simulator's task names, plus the spellings `Task::from_str` has always accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TaskName {
    #[value(name = "pick-place", alias = "pick_place", alias = "pickplace")]
    PickPlace,
    #[value(name = "push-target", alias = "push", alias = "push_target")]
    PushTarget,
    #[value(name = "stack")]
    Stack,
}

impl From<TaskName> for Task {
    fn from(t: TaskName) -> Self {
        match t {
            TaskName::PickPlace => Task::PickPlace,
            TaskName::PushTarget => Task::PushTarget,
            TaskName::Stack => Task::Stack,
        }
    }
}

/// Parser of every `--task`: `#[arg(long, value_parser = task_parser())] task: Task`.
pub fn task_parser() -> impl TypedValueParser<Value = Task> {
    EnumValueParser::<TaskName>::new().map(Task::from)
}

/// The `--provider` values (case-insensitive where the arg says `ignore_case = true`; `trt` = `tensorrt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderName {
    #[value(name = "auto")]
    Auto,
    #[value(name = "tensorrt", alias = "trt")]
    TensorRt,
    #[value(name = "cuda")]
    Cuda,
    #[value(name = "cpu")]
    Cpu,
}

impl From<ProviderName> for Provider {
    fn from(p: ProviderName) -> Self {
        match p {
            ProviderName::Auto => Provider::Auto,
            ProviderName::TensorRt => Provider::TensorRt,
            ProviderName::Cuda => Provider::Cuda,
            ProviderName::Cpu => Provider::Cpu,
        }
    }
}

/// Parser of every `--provider`.
pub fn provider_parser() -> impl TypedValueParser<Value = Provider> {
    EnumValueParser::<ProviderName>::new().map(Provider::from)
}

/// The `--reward` values: where the reward's progress comes from (`run` and `serve`; the `source` of the
/// reward spec a served env sends, docs/wire.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RewardSource {
    /// No progress: the env's task reward as it is (1 on success).
    Sparse,
    /// Shaped with progress from a reward model (the task's shipped one, or `--model MANIFEST`).
    Model,
    /// Shaped with the simulator's ground-truth progress (the upper bound; no robot has it).
    Oracle,
}

impl RewardSource {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sparse => "sparse",
            Self::Model => "model",
            Self::Oracle => "oracle",
        }
    }
}

impl std::fmt::Display for RewardSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The `--shaping` values: `potential` (policy-invariant), `naive` (phi' - phi: rewards stalling), `rank:W`
/// (windowed Spearman over the last W potentials). See docs/shaping.md.
pub fn parse_shaping(s: &str) -> Result<RewardMode, String> {
    match s {
        "potential" => Ok(RewardMode::Potential),
        "naive" => Ok(RewardMode::NaiveDelta),
        _ => match s.strip_prefix("rank:").map(str::parse) {
            Some(Ok(window)) => Ok(RewardMode::WindowedRank { window }),
            _ => Err(format!(
                "unknown shaping {s:?}: potential, naive or rank:W (W a window length in steps)"
            )),
        },
    }
}

/// `run --reward`: a [`RewardSource`], or (the old spelling, when `--reward` was run's shaping) a shaping mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewardArg {
    Source(RewardSource),
    /// `--reward potential|naive|rank:W`: the old spelling of `--shaping`.
    OldShaping(RewardMode),
}

/// Parser of `run --reward`: the [`RewardSource`] names (listed by `--help` and in the error), and the old
/// shaping spellings.
#[derive(Clone, Debug, Default)]
pub struct RunRewardParser;

impl TypedValueParser for RunRewardParser {
    type Value = RewardArg;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<RewardArg, clap::Error> {
        match EnumValueParser::<RewardSource>::new().parse_ref(cmd, arg, value) {
            Ok(s) => Ok(RewardArg::Source(s)),
            Err(e) => value
                .to_str()
                .and_then(|v| parse_shaping(v).ok())
                .map(RewardArg::OldShaping)
                .ok_or(e),
        }
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            RewardSource::value_variants()
                .iter()
                .filter_map(|v| v.to_possible_value()),
        ))
    }
}

/// Scene randomisation, the same flags (names, defaults, meaning) in `run`, `serve`, `sim` and `record`.
#[derive(clap::Args, Debug, Clone)]
pub struct SceneArgs {
    /// Camera-pose jitter in metres (std of the per-episode eye/target offset of fixed cameras; 0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub camera_jitter: f32,
    /// Randomise object and table colours.
    #[arg(long)]
    pub random_colors: bool,
    /// Block and table colours from the simulator's held-out palette (no shipped model was trained on them).
    #[arg(long)]
    pub held_out_colors: bool,
}

impl SceneArgs {
    /// Sets these flags in a simulator config's randomisation (its other fields stay as they are).
    pub fn apply(&self, r: &mut Randomization) {
        r.camera_jitter = self.camera_jitter;
        r.colors = self.random_colors;
        r.held_out_colors = self.held_out_colors;
    }
}

/// The house progress bar: `LABEL [elapsed] ████ pos/len UNIT rate/s (eta) MSG`, drawn on stderr (hidden when stderr
/// is not a terminal). `len` None: a spinner with the count so far (a run without an episode limit).
pub fn progress_bar(len: Option<u64>, label: impl Into<String>, unit: &str) -> ProgressBar {
    let bar = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template(&bar_template(len.is_some(), unit))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(label.into());
    bar
}

fn bar_template(bounded: bool, unit: &str) -> String {
    if bounded {
        format!("{{prefix}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} {{per_sec}} (eta {{eta}}) {{msg}}")
    } else {
        format!("{{spinner}} {{prefix}} [{{elapsed_precise}}] {{pos}} {unit} {{per_sec}} {{msg}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct T {
        #[arg(long, default_value = "pick-place", value_parser = task_parser())]
        task: Task,
        #[arg(long, default_value = "auto", ignore_case = true, value_parser = provider_parser())]
        provider: Provider,
    }

    fn parse(args: &[&str]) -> Result<T, clap::Error> {
        T::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
    }

    #[test]
    fn every_task_parses_by_its_name_and_old_spellings_still_work() {
        for task in Task::ALL {
            assert_eq!(parse(&["--task", task.name()]).unwrap().task, task);
        }
        assert_eq!(parse(&[]).unwrap().task, Task::PickPlace);
        for (s, want) in [
            ("pick_place", Task::PickPlace),
            ("pickplace", Task::PickPlace),
            ("push", Task::PushTarget),
            ("push_target", Task::PushTarget),
        ] {
            assert_eq!(parse(&["--task", s]).unwrap().task, want, "{s}");
            assert_eq!(s.parse::<Task>().unwrap(), want, "Task::from_str({s})");
        }
    }

    #[test]
    fn a_wrong_task_is_refused_with_the_valid_names() {
        let e = parse(&["--task", "pick-plce"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
        let msg = e.to_string();
        for task in Task::ALL {
            assert!(msg.contains(task.name()), "{msg}");
        }
    }

    #[test]
    fn providers_parse_as_before_and_a_wrong_one_is_refused() {
        for (s, want) in [
            ("auto", Provider::Auto),
            ("tensorrt", Provider::TensorRt),
            ("trt", Provider::TensorRt),
            ("TensorRT", Provider::TensorRt),
            ("cuda", Provider::Cuda),
            ("CPU", Provider::Cpu),
        ] {
            assert_eq!(parse(&["--provider", s]).unwrap().provider, want, "{s}");
            assert_eq!(
                s.parse::<Provider>().unwrap(),
                want,
                "Provider::from_str({s})"
            );
        }
        let msg = parse(&["--provider", "rocm"]).unwrap_err().to_string();
        for p in ["auto", "tensorrt", "cuda", "cpu"] {
            assert!(msg.contains(p), "{msg}");
        }
    }

    #[test]
    fn the_house_bar_templates_are_valid() {
        for bounded in [true, false] {
            let t = bar_template(bounded, "episodes");
            assert!(ProgressStyle::with_template(&t).is_ok(), "{t}");
        }
        let bar = progress_bar(Some(7), "recording stack", "episodes");
        assert_eq!(
            (bar.length(), bar.prefix()),
            (Some(7), "recording stack".to_string())
        );
        assert_eq!(progress_bar(None, "running", "episodes").length(), None);
    }
}
