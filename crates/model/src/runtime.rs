//! Finding and loading the ONNX Runtime library, the process-wide environment, and execution providers.
//!
//! The library is never downloaded: it comes from the `onnxruntime` PyPI wheel that `scripts/setup.sh`
//! installs into the project's `.venv` (`onnxruntime/capi/libonnxruntime.so.<version>`), or from a path the
//! user names with `--ort-lib` or `ORT_DYLIB_PATH`.

use crate::ModelError;
use ort::ep::ExecutionProvider;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::Session;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::OnceLock;

/// The environment variable naming the ONNX Runtime library (the same one `ort` itself reads).
pub const ORT_DYLIB_ENV: &str = "ORT_DYLIB_PATH";

/// Execution provider choice. `Auto` tries TensorRT, then CUDA, then CPU and logs what it got; a provider
/// named explicitly and missing is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    #[default]
    Auto,
    TensorRt,
    Cuda,
    Cpu,
}

impl FromStr for Provider {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "tensorrt" | "trt" => Ok(Self::TensorRt),
            "cuda" => Ok(Self::Cuda),
            "cpu" => Ok(Self::Cpu),
            _ => Err(ModelError::UnknownProvider(s.to_string())),
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::TensorRt => "tensorrt",
            Self::Cuda => "cuda",
            Self::Cpu => "cpu",
        })
    }
}

/// How to build a session.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub provider: Provider,
    /// Intra-op threads per session (0 = ONNX Runtime's default: one per core).
    pub intra_threads: usize,
    /// Where TensorRT keeps its engine cache (engines take minutes to build; the cache makes restarts fast).
    pub tensorrt_cache: Option<PathBuf>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            provider: Provider::Auto,
            intra_threads: 1,
            tensorrt_cache: None,
        }
    }
}

/// The loaded ONNX Runtime: one per process (ONNX Runtime allows a single environment).
pub struct OrtRuntime {
    env: ort::environment::Environment,
    library: PathBuf,
    version: String,
}

static RUNTIME: OnceLock<Result<OrtRuntime, String>> = OnceLock::new();

impl OrtRuntime {
    /// Loads the library once per process. `explicit` (a `--ort-lib` flag) wins over `ORT_DYLIB_PATH`, which wins
    /// over the project's `.venv`. Later calls return the runtime loaded first, whatever they pass.
    pub fn init(explicit: Option<&Path>) -> Result<&'static OrtRuntime, ModelError> {
        let mut first_error = None;
        let result = RUNTIME.get_or_init(|| match Self::load(explicit) {
            Ok(rt) => Ok(rt),
            Err(e) => {
                let msg = e.to_string();
                first_error = Some(e);
                Err(msg)
            }
        });
        match result {
            Ok(rt) => Ok(rt),
            Err(msg) => Err(first_error.unwrap_or_else(|| ModelError::Environment(msg.clone()))),
        }
    }

    fn load(explicit: Option<&Path>) -> Result<Self, ModelError> {
        let library = find_library(explicit)?;
        let builder = ort::init_from(&library).map_err(|e| ModelError::LibraryLoad {
            path: library.clone(),
            reason: e.to_string(),
        })?;
        let env = builder
            .with_name("stagewise")
            .with_telemetry(false)
            .build()
            .map_err(|e| ModelError::Environment(e.to_string()))?;
        let version = library_version(&library);
        tracing::info!(library = %library.display(), %version, "loaded ONNX Runtime");
        Ok(Self {
            env,
            library,
            version,
        })
    }

    pub fn library(&self) -> &Path {
        &self.library
    }

    /// Version of the loaded library, read from its file name (e.g. `1.31.1`), or `unknown`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Execution providers compiled into the loaded library, e.g. `CPUExecutionProvider`.
    pub fn available_providers(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if ort::ep::TensorRT::is_available().unwrap_or(false) {
            out.push(ort::ep::TensorRT::NAME);
        }
        if ort::ep::CUDA::is_available().unwrap_or(false) {
            out.push(ort::ep::CUDA::NAME);
        }
        out.push(ort::ep::CPU::NAME);
        out
    }

    /// Builds a session for the model file `model` with the requested provider. Returns the session and the
    /// provider it got.
    pub fn session(
        &self,
        model: &Path,
        opts: &SessionOptions,
    ) -> Result<(Session, Provider), ModelError> {
        let bytes = std::fs::read(model).map_err(|source| ModelError::Io {
            path: model.to_path_buf(),
            source,
        })?;
        self.session_from_bytes(&bytes, model, opts)
    }

    /// Builds a session from ONNX bytes; `label` names them in errors (a file, or a policy's key and version).
    pub fn session_from_bytes(
        &self,
        bytes: &[u8],
        label: &Path,
        opts: &SessionOptions,
    ) -> Result<(Session, Provider), ModelError> {
        let model = label;
        let candidates: &[Provider] = match opts.provider {
            Provider::Auto => &[Provider::TensorRt, Provider::Cuda, Provider::Cpu],
            Provider::TensorRt => &[Provider::TensorRt],
            Provider::Cuda => &[Provider::Cuda],
            Provider::Cpu => &[Provider::Cpu],
        };
        let explicit = opts.provider != Provider::Auto;
        let mut last_err = None;
        for &p in candidates {
            let available = match p {
                Provider::TensorRt => ort::ep::TensorRT::is_available().unwrap_or(false),
                Provider::Cuda => ort::ep::CUDA::is_available().unwrap_or(false),
                _ => true,
            };
            if !available {
                if explicit {
                    return Err(ModelError::ProviderUnavailable {
                        provider: p.to_string(),
                        available: self.available_providers().join(", "),
                    });
                }
                tracing::debug!(provider = %p, "execution provider not in this ONNX Runtime build, skipping");
                continue;
            }
            match self.try_session(bytes, model, p, opts) {
                Ok(s) => {
                    if opts.provider == Provider::Auto {
                        tracing::info!(provider = %p, model = %model.display(), "execution provider selected");
                    }
                    return Ok((s, p));
                }
                Err(e @ (ModelError::Io { .. } | ModelError::InvalidOnnx { .. })) => return Err(e),
                Err(e) if explicit => return Err(e),
                Err(e) => {
                    tracing::warn!(provider = %p, error = %e, "execution provider failed, trying the next one");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| ModelError::ProviderUnavailable {
            provider: opts.provider.to_string(),
            available: self.available_providers().join(", "),
        }))
    }

    fn try_session(
        &self,
        bytes: &[u8],
        model: &Path,
        p: Provider,
        opts: &SessionOptions,
    ) -> Result<Session, ModelError> {
        let fail = |e: ort::Error| ModelError::ProviderFailed {
            provider: p.to_string(),
            path: model.to_path_buf(),
            reason: e.to_string(),
        };
        let fail_b = |e: ort::Error<SessionBuilder>| fail(e.into());
        let mut builder = Session::builder(&self.env)
            .map_err(fail)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(fail_b)?
            .with_intra_threads(opts.intra_threads)
            .map_err(fail_b)?;
        builder = match p {
            Provider::TensorRt => {
                let mut trt = ort::ep::TensorRT::default();
                if let Some(dir) = &opts.tensorrt_cache {
                    std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
                        path: dir.clone(),
                        source,
                    })?;
                    trt = trt
                        .with_engine_cache(true)
                        .with_engine_cache_path(dir.display())
                        .with_timing_cache(true);
                }
                builder
                    .with_execution_providers([trt.build().error_on_failure()])
                    .map_err(fail_b)?
            }
            Provider::Cuda => builder
                .with_execution_providers([ort::ep::CUDA::default().build().error_on_failure()])
                .map_err(fail_b)?,
            Provider::Cpu | Provider::Auto => builder,
        };
        builder.commit_from_memory(bytes).map_err(|e| {
            let reason = e.to_string();
            // An unparsable or invalid graph is the model's fault whatever the provider; on the CPU provider any
            // failure to build the session is.
            if p == Provider::Cpu
                || matches!(
                    e.code(),
                    ort::ErrorCode::InvalidProtobuf | ort::ErrorCode::InvalidGraph
                )
            {
                ModelError::InvalidOnnx {
                    path: model.to_path_buf(),
                    reason,
                }
            } else {
                ModelError::ProviderFailed {
                    provider: p.to_string(),
                    path: model.to_path_buf(),
                    reason,
                }
            }
        })
    }
}

fn library_version(path: &Path) -> String {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name.split_once(".so.")
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Resolves the library path: `explicit`, then `ORT_DYLIB_PATH`, then a `.venv` in the current directory, the
/// executable's directory or any of their ancestors.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf, ModelError> {
    if let Some(p) = explicit {
        return existing(p, "--ort-lib");
    }
    if let Some(p) = std::env::var_os(ORT_DYLIB_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&p), ORT_DYLIB_ENV);
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    let mut searched = Vec::new();
    for root in roots {
        let venv = root.join(".venv");
        if !venv.is_dir() {
            continue;
        }
        searched.push(venv.display().to_string());
        if let Some(lib) = library_in_venv(&venv) {
            return Ok(lib);
        }
    }
    let searched = if searched.is_empty() {
        "no .venv in the current directory, the executable's directory or their parents".to_string()
    } else {
        searched.join(", ")
    };
    Err(ModelError::LibraryNotFound { searched })
}

fn existing(p: &Path, source: &str) -> Result<PathBuf, ModelError> {
    if p.is_file() {
        Ok(p.to_path_buf())
    } else {
        Err(ModelError::LibraryLoad {
            path: p.to_path_buf(),
            reason: format!("{source} names a file that does not exist"),
        })
    }
}

/// `<venv>/lib/python3.*/site-packages/onnxruntime/capi/libonnxruntime.so*`.
fn library_in_venv(venv: &Path) -> Option<PathBuf> {
    let lib = venv.join("lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    pythons.sort();
    for py in pythons {
        let capi = py.join("site-packages/onnxruntime/capi");
        let Ok(entries) = std::fs::read_dir(&capi) else {
            continue;
        };
        let mut libs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libonnxruntime.so") && !n.contains("providers"))
            })
            .collect();
        libs.sort();
        if let Some(l) = libs.pop() {
            return Some(l);
        }
    }
    None
}
