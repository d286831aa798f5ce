//! The shared command-line vocabulary: typed values for `--task`, `--provider`, `--reward` and `--shaping` (clap
//! refuses a wrong name and lists the valid ones; `--help` shows them), the scene-randomisation flags that the
//! simulator subcommands share, and the progress bar every long-running subcommand draws.
//!
//! One word, one meaning: `--reward` is where the reward's progress comes from (`sparse`, `model`, `oracle`) in
//! `run` and `serve` alike, `--model` is a reward-model manifest, `--shaping` is how progress becomes a reward
//! (`potential`, `progress`, `rank:W`, with `--potential-scale`, `--success-progress-one` and `--phi-offset`:
//! [`ShapingArgs`], the same flags in `run` and `serve`), `--robot-name` is the robot's name on the stream and
//! `--bridge` the URL of its firmware bridge.

use clap::builder::{EnumValueParser, TypedValueParser};
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use stagewise_core::{RewardMode, ShapingConfig, SuccessDetection};
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

/// The `--shaping` names; their parameters are flags of their own ([`ShapingArgs`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShapingName {
    /// Potential-based (policy-invariant), `--phi-offset X` optional.
    Potential,
    /// Potential-based with the value-like potential gamma^(K (1 - phi)) (policy-invariant), K steps per task.
    Value(f64),
    /// The progress form (NOT policy-invariant), `--potential-scale S` and `--success-progress-one` optional.
    Progress,
    /// Windowed Spearman over the last W potentials (NOT policy-invariant).
    Rank(usize),
}

/// The `--shaping` values: `potential`, `value:K`, `progress`, `rank:W`. See docs/shaping.md.
pub fn parse_shaping(s: &str) -> Result<ShapingName, String> {
    let unknown = || {
        format!(
            "unknown shaping {s:?}: potential, value:K (K steps per whole task), progress or rank:W (W a \
             window length in steps)"
        )
    };
    match s {
        "potential" => Ok(ShapingName::Potential),
        "progress" => Ok(ShapingName::Progress),
        _ => {
            if let Some(k) = s.strip_prefix("value:") {
                return k.parse().map(ShapingName::Value).map_err(|_| unknown());
            }
            match s.strip_prefix("rank:").map(str::parse) {
                Some(Ok(window)) => Ok(ShapingName::Rank(window)),
                _ => Err(unknown()),
            }
        }
    }
}

/// How progress becomes a reward: the same flags, names, defaults and checks in `run` and `serve`
/// (docs/shaping.md has the formulas).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct ShapingArgs {
    /// Discount for shaping: must equal the learner's (potential-based shaping is policy-invariant only then).
    #[arg(long, default_value_t = 0.99)]
    pub gamma: f64,
    /// Shaping scale c in r = r_task + c (gamma phi' - phi).
    #[arg(long, default_value_t = 1.0)]
    pub shaping_scale: f64,
    /// How progress becomes a reward: `potential` (r_task + c (gamma phi' - phi), terminal potential 0;
    /// policy-invariant), `value:K` (the same with the potential gamma^(K (1 - phi)), the value of a success
    /// K (1 - phi) steps away; policy-invariant), `progress` (adds the level c (1 - gamma) phi', c phi' at the end: NOT policy-invariant;
    /// with S = 1 it is r_task + c (phi' - phi)), `rank:W` (windowed Spearman; NOT policy-invariant).
    /// Default: potential.
    #[arg(long, value_name = "potential|value:K|progress|rank:W", value_parser = parse_shaping)]
    pub shaping: Option<ShapingName>,
    /// `--shaping progress` only: scale S of its potential part, r_task + S c (gamma phi' - phi) + c (1 - gamma)
    /// phi' (the same optimal policy for every S). Default 1.
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub potential_scale: Option<f64>,
    /// `--shaping progress` only: a terminated success counts as progress 1 (phi* = 1), not the model's reading.
    #[arg(long)]
    pub success_progress_one: bool,
    /// `--shaping potential` only: the potential is phi - X (terminal potential 0; still policy-invariant). Adds
    /// c X (1 - gamma) to a non-terminal step and c X to a terminated one. Default 0.
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub phi_offset: Option<f64>,
    /// Success detection (every form): once phi >= 1 - delta for --success-steps steps in a row the episode
    /// terminates as a success with r_task = 1.
    #[arg(long, value_name = "DELTA")]
    pub success_delta: Option<f64>,
    /// Steps in a row --success-delta needs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub success_steps: usize,
}

impl ShapingArgs {
    /// The reward mode the flags name; a parameter of another form is refused, naming both.
    pub fn mode(&self) -> anyhow::Result<RewardMode> {
        let name = self.shaping.unwrap_or(ShapingName::Potential);
        let spelled = match name {
            ShapingName::Potential => "potential".to_string(),
            ShapingName::Value(k) => format!("value:{k}"),
            ShapingName::Progress => "progress".to_string(),
            ShapingName::Rank(w) => format!("rank:{w}"),
        };
        if let (Some(s), false) = (self.potential_scale, name == ShapingName::Progress) {
            anyhow::bail!(
                "--potential-scale {s} needs --shaping progress (this is --shaping {spelled})"
            );
        }
        if self.success_progress_one && name != ShapingName::Progress {
            anyhow::bail!(
                "--success-progress-one needs --shaping progress (this is --shaping {spelled})"
            );
        }
        if let (Some(x), false) = (self.phi_offset, name == ShapingName::Potential) {
            anyhow::bail!(
                "--phi-offset {x} needs --shaping potential (this is --shaping {spelled})"
            );
        }
        Ok(match name {
            ShapingName::Potential => RewardMode::Potential {
                offset: self.phi_offset.unwrap_or(0.0),
            },
            ShapingName::Progress => RewardMode::Progress {
                potential_scale: self.potential_scale.unwrap_or(1.0),
                success_progress_one: self.success_progress_one,
            },
            ShapingName::Value(horizon) => RewardMode::ValuePotential { horizon },
            ShapingName::Rank(window) => RewardMode::WindowedRank { window },
        })
    }

    /// The checked configuration: gamma, c, the mode and success detection (core refuses a bad value and names
    /// it).
    pub fn config(&self) -> anyhow::Result<ShapingConfig> {
        self.config_with(self.mode()?)
    }

    /// The same with `mode` in place of the one the flags name.
    pub fn config_with(&self, mode: RewardMode) -> anyhow::Result<ShapingConfig> {
        let mut config = ShapingConfig::new(self.gamma, self.shaping_scale)?.with_mode(mode);
        if let Some(delta) = self.success_delta {
            config = config.with_success(SuccessDetection {
                delta,
                consecutive: self.success_steps,
            });
        }
        config.validate()?;
        Ok(config)
    }

    /// Whether any flag that chooses or parameterises the shaping form was given (a sparse reward refuses them).
    pub fn names_a_form(&self) -> bool {
        self.shaping.is_some()
            || self.potential_scale.is_some()
            || self.success_progress_one
            || self.phi_offset.is_some()
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
    fn every_task_parses_by_its_name_and_the_spellings_task_from_str_accepts() {
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

    #[derive(Parser, Debug)]
    struct S {
        #[command(flatten)]
        shaping: ShapingArgs,
    }

    fn shaping(args: &[&str]) -> anyhow::Result<ShapingConfig> {
        S::try_parse_from(std::iter::once("t").chain(args.iter().copied()))?
            .shaping
            .config()
    }

    #[test]
    fn every_shaping_form_and_its_parameters_parse() {
        let c = shaping(&[]).unwrap();
        assert_eq!((c.gamma, c.scale), (0.99, 1.0));
        assert_eq!(c.mode, RewardMode::Potential { offset: 0.0 });
        let c = shaping(&["--shaping", "potential", "--phi-offset", "0.5"]).unwrap();
        assert_eq!(c.mode, RewardMode::Potential { offset: 0.5 });
        assert_eq!(
            shaping(&["--phi-offset", "-1"]).unwrap().mode,
            RewardMode::Potential { offset: -1.0 }
        );
        assert_eq!(
            shaping(&["--shaping", "progress"]).unwrap().mode,
            RewardMode::PLAIN_PROGRESS
        );
        let c = shaping(&[
            "--shaping",
            "progress",
            "--potential-scale",
            "0.1",
            "--success-progress-one",
            "--gamma",
            "0.98",
            "--shaping-scale",
            "10",
        ])
        .unwrap();
        assert_eq!((c.gamma, c.scale), (0.98, 10.0));
        assert_eq!(
            c.mode,
            RewardMode::Progress {
                potential_scale: 0.1,
                success_progress_one: true
            }
        );
        assert_eq!(
            shaping(&["--shaping", "rank:8"]).unwrap().mode,
            RewardMode::WindowedRank { window: 8 }
        );
        let value = shaping(&["--shaping", "value:100"]).unwrap();
        assert_eq!(value.mode, RewardMode::ValuePotential { horizon: 100.0 });
        assert!(value.mode.is_policy_invariant());
    }

    #[test]
    fn a_parameter_of_another_form_or_a_bad_value_is_refused_by_name() {
        for (args, want) in [
            (
                &["--potential-scale", "0.1"][..],
                "--potential-scale 0.1 needs --shaping progress (this is --shaping potential)",
            ),
            (
                &["--shaping", "rank:4", "--success-progress-one"],
                "--success-progress-one needs --shaping progress (this is --shaping rank:4)",
            ),
            (
                &["--shaping", "progress", "--phi-offset", "0.2"],
                "--phi-offset 0.2 needs --shaping potential (this is --shaping progress)",
            ),
            (
                &["--shaping", "naive"],
                "unknown shaping \"naive\": potential, value:K (K steps per whole task), progress or rank:W",
            ),
            (&["--shaping", "rank:x"], "progress or rank:W"),
            (&["--shaping", "value:x"], "unknown shaping \"value:x\""),
            (&["--shaping", "value:0"], "value-potential horizon K is 0"),
            (&["--shaping", "value:inf"], "value-potential horizon K is inf"),
            (
                &["--shaping", "value:50", "--phi-offset", "0.5"],
                "--phi-offset 0.5 needs --shaping potential (this is --shaping value:50)",
            ),
            (
                &["--shaping", "progress", "--potential-scale", "inf"],
                "potential scale S is inf",
            ),
            (&["--phi-offset", "NaN"], "potential offset X is NaN"),
            (&["--shaping", "rank:1"], "rank window is 1"),
            (&["--gamma", "1.5"], "gamma is 1.5"),
        ] {
            let e = shaping(args).unwrap_err();
            assert!(format!("{e:#}").contains(want), "{args:?}: {e:#}");
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
