//! Flags shared by every subcommand that runs an ONNX model.

use anyhow::Context;
use stagewise_model::{OrtRuntime, Provider, RewardModel, SessionOptions};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct OrtArgs {
    /// ONNX Runtime library (libonnxruntime.so). Default: $ORT_DYLIB_PATH, else the onnxruntime wheel in the
    /// project's .venv (installed by scripts/setup.sh).
    #[arg(long, value_name = "PATH")]
    pub ort_lib: Option<PathBuf>,
    /// Execution provider: auto tries tensorrt, then cuda, then cpu; a provider named explicitly must be there.
    #[arg(long, default_value = "auto", ignore_case = true, value_parser = crate::cli::provider_parser())]
    pub provider: Provider,
    /// Intra-op threads per ONNX Runtime session (0 = one per core).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// TensorRT engine cache directory (engines take minutes to build; the cache makes restarts fast).
    #[arg(long, value_name = "DIR", default_value = ".stagewise/trt-cache")]
    pub trt_cache: PathBuf,
}

impl OrtArgs {
    pub fn runtime(&self) -> anyhow::Result<&'static OrtRuntime> {
        Ok(OrtRuntime::init(self.ort_lib.as_deref())?)
    }

    pub fn session_options(&self) -> SessionOptions {
        SessionOptions {
            provider: self.provider,
            intra_threads: self.threads,
            tensorrt_cache: Some(self.trt_cache.clone()),
        }
    }

    pub fn load_reward_model(&self, manifest: &Path) -> anyhow::Result<RewardModel> {
        let rt = self.runtime()?;
        RewardModel::load(manifest, rt, &self.session_options())
            .with_context(|| format!("loading reward model {}", manifest.display()))
    }
}
