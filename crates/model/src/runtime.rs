//! Finding and loading the ONNX Runtime library, the process-wide environment, and execution providers.
//!
//! The library is never downloaded: it comes from the `onnxruntime` PyPI wheel that `scripts/setup.sh`
//! installs into the project's `.venv` (`onnxruntime/capi/libonnxruntime.so.<version>`), or from a path the
//! user names with `--ort-lib` or `ORT_DYLIB_PATH`.

use crate::ModelError;
use ort::ep::ExecutionProvider;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::Session;
use stagewise_core::ErrorChain;
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

static RUNTIME: OnceLock<Result<OrtRuntime, std::sync::Arc<ModelError>>> = OnceLock::new();

impl OrtRuntime {
    /// Loads the library once per process. `explicit` (a `--ort-lib` flag) wins over `ORT_DYLIB_PATH`, which wins
    /// over the project's `.venv`. Later calls return the runtime loaded first, whatever they pass.
    pub fn init(explicit: Option<&Path>) -> Result<&'static OrtRuntime, ModelError> {
        // A failure is kept too (ModelError is not Clone: shared), so every call reports the first load's error.
        match RUNTIME.get_or_init(|| Self::load(explicit).map_err(std::sync::Arc::new)) {
            Ok(rt) => Ok(rt),
            Err(first) => Err(ModelError::RuntimeUnavailable(std::sync::Arc::clone(first))),
        }
    }

    fn load(explicit: Option<&Path>) -> Result<Self, ModelError> {
        let library = find_library(explicit)?;
        let builder = ort::init_from(&library).map_err(|source| ModelError::LibraryLoad {
            path: library.clone(),
            source,
        })?;
        let env = builder
            .with_name("stagewise")
            .with_telemetry(false)
            .build()
            .map_err(ModelError::Environment)?;
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
                    tracing::warn!(provider = %p, error = %ErrorChain(&e), "execution provider failed, trying the next one");
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
        let fail = |source: ort::Error| ModelError::ProviderFailed {
            provider: p.to_string(),
            path: model.to_path_buf(),
            source,
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
                    source: e,
                }
            } else {
                ModelError::ProviderFailed {
                    provider: p.to_string(),
                    path: model.to_path_buf(),
                    source: e,
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

/// Finds the ONNX Runtime library, in this order and nowhere else:
///
/// 1. `explicit` (the `--ort-lib` flag);
/// 2. the `ORT_DYLIB_PATH` environment variable;
/// 3. the project's own `.venv` ([`venv_candidates`]): beside the executable, then the checkout the executable
///    was built in (`<checkout>/target/{debug,release}[/deps]/<exe>` -> `<checkout>/.venv`, the checkout having
///    a `Cargo.toml`).
///
/// Never the current directory or its parents: a `.venv` planted where a command happens to run does not get
/// to load code into it. The error lists exactly what was tried.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf, ModelError> {
    let env = std::env::var_os(ORT_DYLIB_ENV);
    let exe = std::env::current_exe().ok();
    find_library_in(explicit, env.as_deref(), exe.as_deref())
}

/// [`find_library`] with its inputs given: the flag, the environment variable's value, the executable's path.
pub fn find_library_in(
    explicit: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    exe: Option<&Path>,
) -> Result<PathBuf, ModelError> {
    if let Some(p) = explicit {
        return existing(p, "--ort-lib");
    }
    if let Some(p) = env.filter(|v| !v.is_empty()) {
        return existing(Path::new(p), ORT_DYLIB_ENV);
    }
    let mut tried = vec![
        "--ort-lib: not given".to_string(),
        format!("{ORT_DYLIB_ENV}: not set"),
    ];
    let candidates = exe.map(venv_candidates).unwrap_or_default();
    if exe.is_none() {
        tried.push("the executable's path: unknown".into());
    }
    for venv in candidates {
        if !venv.is_dir() {
            tried.push(format!("{}: no such directory", venv.display()));
            continue;
        }
        if let Some(lib) = library_in_venv(&venv) {
            return Ok(lib);
        }
        tried.push(format!(
            "{}: no lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*",
            venv.display()
        ));
    }
    Err(ModelError::LibraryNotFound {
        searched: tried.join("; "),
    })
}

/// The project `.venv`s that may hold the library for the executable at `exe`: `<exe dir>/.venv`, then, when
/// the executable sits in a cargo target directory of a checkout (`<checkout>/target/<profile>/`,
/// `.../<profile>/deps/` for test binaries, or `.../<triple>/<profile>/[deps/]`) and that checkout has a
/// `Cargo.toml`, `<checkout>/.venv`.
pub fn venv_candidates(exe: &Path) -> Vec<PathBuf> {
    let Some(dir) = exe.parent() else {
        return Vec::new();
    };
    let mut out = vec![dir.join(".venv")];
    // At most four levels up: target/<profile>/deps and target/<triple>/<profile>/deps.
    if let Some(target) = dir
        .ancestors()
        .take(4)
        .find(|a| a.file_name().is_some_and(|n| n == "target"))
    {
        if let Some(checkout) = target.parent() {
            if checkout.join("Cargo.toml").is_file() {
                out.push(checkout.join(".venv"));
            }
        }
    }
    out
}

fn existing(p: &Path, source: &str) -> Result<PathBuf, ModelError> {
    if p.is_file() {
        // Absolute, so that the loader opens the file that was checked (ort looks a relative name up next to
        // the executable first).
        Ok(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
    } else {
        Err(ModelError::LibraryMissing {
            path: p.to_path_buf(),
            origin: source.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake wheel layout: `<venv>/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1`.
    fn fake_venv(venv: &Path) -> PathBuf {
        let capi = venv.join("lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).expect("mkdir");
        let lib = capi.join("libonnxruntime.so.1.31.1");
        std::fs::write(&lib, b"not really").expect("write");
        std::fs::write(capi.join("libonnxruntime_providers_shared.so"), b"x").expect("write");
        lib
    }

    #[test]
    fn the_checkout_venv_is_found_from_the_executable_and_never_from_the_working_directory() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("target/debug/deps")).expect("mkdir");
        std::fs::write(ws.join("Cargo.toml"), "[workspace]\n").expect("write");
        let lib = fake_venv(&ws.join(".venv"));
        let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
        // target/debug/stagewise, a test binary in target/debug/deps, a cross build's target/<triple>/release.
        for exe in [
            "target/debug/stagewise",
            "target/debug/deps/stagewise_model-0123",
            "target/x86_64-unknown-linux-gnu/release/stagewise",
        ] {
            let found = find_library_in(None, None, Some(&ws.join(exe))).expect(exe);
            assert_eq!(std::fs::canonicalize(&found).unwrap_or(found), lib, "{exe}");
        }
        // An executable somewhere else, with a .venv in a parent directory (where a working directory might
        // be): not searched. The error lists exactly what was tried.
        let elsewhere = tmp.path().join("planted");
        fake_venv(&elsewhere.join(".venv"));
        std::fs::create_dir_all(elsewhere.join("sub/bin")).expect("mkdir");
        let exe = elsewhere.join("sub/bin/stagewise");
        let e = find_library_in(None, None, Some(&exe)).expect_err("not found");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!(
                "{}: no such directory",
                elsewhere.join("sub/bin/.venv").display()
            )),
            "{msg}"
        );
        assert!(
            msg.contains("--ort-lib: not given") && msg.contains("ORT_DYLIB_PATH: not set"),
            "{msg}"
        );
        assert!(
            !msg.contains(&elsewhere.join(".venv").display().to_string()),
            "{msg}"
        );
        assert_eq!(venv_candidates(&exe), vec![elsewhere.join("sub/bin/.venv")]);
        // A directory named target without a Cargo.toml beside it is not a checkout.
        let loose = tmp.path().join("loose");
        fake_venv(&loose.join(".venv"));
        std::fs::create_dir_all(loose.join("target/debug")).expect("mkdir");
        assert!(find_library_in(None, None, Some(&loose.join("target/debug/stagewise"))).is_err());
        // Beside the executable.
        let beside = tmp.path().join("opt/stagewise");
        let lib2 = fake_venv(&beside.join(".venv"));
        let found = find_library_in(None, None, Some(&beside.join("stagewise"))).expect("beside");
        assert_eq!(
            std::fs::canonicalize(found).expect("canon"),
            std::fs::canonicalize(lib2).expect("canon")
        );
    }

    #[test]
    fn the_flag_wins_over_the_variable_which_wins_over_the_venv() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("target/debug")).expect("mkdir");
        std::fs::write(ws.join("Cargo.toml"), "").expect("write");
        fake_venv(&ws.join(".venv"));
        let exe = ws.join("target/debug/stagewise");
        let a = tmp.path().join("a.so");
        let b = tmp.path().join("b.so");
        std::fs::write(&a, b"a").expect("write");
        std::fs::write(&b, b"b").expect("write");
        let canon = |p: &Path| std::fs::canonicalize(p).expect("canon");
        let got = find_library_in(Some(&a), Some(b.as_os_str()), Some(&exe)).expect("flag");
        assert_eq!(canon(&got), canon(&a));
        let got = find_library_in(None, Some(b.as_os_str()), Some(&exe)).expect("env");
        assert_eq!(canon(&got), canon(&b));
        let e = find_library_in(
            None,
            Some(tmp.path().join("nope.so").as_os_str()),
            Some(&exe),
        )
        .expect_err("missing");
        assert!(
            e.to_string()
                .contains("ORT_DYLIB_PATH names a file that does not exist"),
            "{e}"
        );
        // An empty variable counts as unset.
        assert!(find_library_in(None, Some(std::ffi::OsStr::new("")), Some(&exe)).is_ok());
    }
}
