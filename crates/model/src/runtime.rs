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
/// 3. the project's own `.venv`s, [`venv_candidates`] in order (the same list the CLI searches for its Python).
///
/// Never the current directory or its parents: a `.venv` planted where a command happens to run does not get
/// to load code into it. The error lists exactly what was tried.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf, ModelError> {
    let env = std::env::var_os(ORT_DYLIB_ENV);
    let venvs = std::env::current_exe().ok().map(|e| venv_candidates(&e));
    find_library_in(explicit, env.as_deref(), venvs.as_deref())
}

/// [`find_library`] with its inputs given: the flag, the environment variable's value, the venvs to search
/// (`None`: the executable's path is unknown).
pub fn find_library_in(
    explicit: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    venvs: Option<&[PathBuf]>,
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
    if venvs.is_none() {
        tried.push("the executable's path: unknown".into());
    }
    for venv in venvs.unwrap_or_default() {
        if !venv.is_dir() {
            tried.push(format!("{}: no such directory", venv.display()));
            continue;
        }
        if let Some(lib) = library_in_venv(venv) {
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

/// The project virtualenvs for the executable at `exe`, most specific first; the ONNX Runtime library
/// ([`find_library`]) and the CLI's Python (`stagewise train`, `adapt`, `learn`) are both looked up in this list
/// and nowhere else:
///
/// 1. `<exe dir>/.venv` (an unpacked release: the binary beside its venv);
/// 2. the venv the executable is installed in: `<venv>/bin/<exe>` with `<venv>/pyvenv.cfg`;
/// 3. the checkout whose cargo target directory holds the executable: `<checkout>/target/<profile>/`,
///    `.../<profile>/deps/` (test binaries) or `.../<triple>/<profile>/[deps/]`, when `<checkout>/Cargo.toml`
///    exists: `<checkout>/.venv`;
/// 4. the checkout this crate was compiled from ([`build_checkout`]): `<checkout>/.venv`. This is what finds the
///    project's venv when `CARGO_TARGET_DIR` is outside the checkout.
///
/// Every entry comes from the executable's own path or from the build; none from the current directory.
/// Duplicates are dropped.
pub fn venv_candidates(exe: &Path) -> Vec<PathBuf> {
    venv_candidates_with(exe, build_checkout().as_deref())
}

/// [`venv_candidates`] with the build-time checkout given (`None`: no fourth entry).
pub fn venv_candidates_with(exe: &Path, build_checkout: Option<&Path>) -> Vec<PathBuf> {
    let Some(dir) = exe.parent() else {
        return Vec::new();
    };
    let mut out = vec![dir.join(".venv")];
    if let Some(venv) = dir
        .parent()
        .filter(|_| dir.file_name().is_some_and(|n| n == "bin"))
    {
        if venv.join("pyvenv.cfg").is_file() {
            out.push(venv.to_path_buf());
        }
    }
    if let Some(checkout) = target_checkout(dir) {
        out.push(checkout.join(".venv"));
    }
    if let Some(checkout) = build_checkout {
        out.push(checkout.join(".venv"));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|v| seen.insert(v.clone()));
    out
}

/// The workspace this crate was compiled in (`crates/model` -> the root, which holds the `stagewise` package and
/// `scripts/setup.sh`'s `.venv`), when it still has its `Cargo.toml`. A fixed path taken at build time: it does
/// not depend on where a command runs. `None` for a binary moved to a machine without that checkout.
pub fn build_checkout() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2)?;
    root.join("Cargo.toml")
        .is_file()
        .then(|| root.to_path_buf())
}

/// Where the shipped reward models are (`<dir>/<task>/<task>-progress.toml`) for the executable at `exe`, most
/// specific first; [`find_shipped_model`] takes the first that has the task's model:
///
/// 1. `<prefix>/share/stagewise/models` when the executable is `<prefix>/bin/stagewise`: the wheel's data files
///    (`pip install` puts the binary in `<venv>/bin/` and the models in `<venv>/share/stagewise/models/`);
/// 2. `<checkout>/models` of the checkout whose cargo target directory holds the executable (as in
///    [`venv_candidates`]);
/// 3. `<checkout>/models` of the checkout this crate was compiled from ([`build_checkout`]).
///
/// Like the venvs, every entry comes from the executable's own path or from the build, none from the current
/// directory: `stagewise run` from any directory runs the model that came with the binary.
pub fn models_dirs(exe: &Path) -> Vec<PathBuf> {
    models_dirs_with(exe, build_checkout().as_deref())
}

/// [`models_dirs`] with the build-time checkout given (`None`: no third entry).
pub fn models_dirs_with(exe: &Path, build_checkout: Option<&Path>) -> Vec<PathBuf> {
    let Some(dir) = exe.parent() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(prefix) = dir
        .parent()
        .filter(|_| dir.file_name().is_some_and(|n| n == "bin"))
    {
        out.push(prefix.join("share/stagewise/models"));
    }
    if let Some(checkout) = target_checkout(dir) {
        out.push(checkout.join("models"));
    }
    if let Some(checkout) = build_checkout {
        out.push(checkout.join("models"));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|v| seen.insert(v.clone()));
    out
}

/// The shipped reward model of `task` (`<dir>/<task>/<task>-progress.toml` of the first of [`models_dirs`] that
/// has it): what `run` and `serve` load for `--reward model` without `--model`.
pub fn find_shipped_model(task: &str) -> Result<PathBuf, ModelError> {
    let dirs = std::env::current_exe()
        .ok()
        .map(|e| models_dirs(&e))
        .unwrap_or_default();
    find_shipped_model_in(task, &dirs)
}

/// [`find_shipped_model`] in the directories given; the error names every place tried.
pub fn find_shipped_model_in(task: &str, dirs: &[PathBuf]) -> Result<PathBuf, ModelError> {
    let file = format!("{task}/{task}-progress.toml");
    let mut tried = Vec::new();
    for d in dirs {
        let m = d.join(&file);
        if m.is_file() {
            return Ok(m);
        }
        tried.push(m.display().to_string());
    }
    Err(ModelError::ShippedModelNotFound {
        task: task.to_string(),
        searched: if tried.is_empty() {
            "nothing: the executable's path is unknown".into()
        } else {
            tried.join(", ")
        },
    })
}

/// `<checkout>` when `dir` (an executable's directory) is in `<checkout>/target/` at most four levels down
/// (`<profile>/`, `<profile>/deps/`, `<triple>/<profile>/[deps/]`) and `<checkout>/Cargo.toml` exists.
fn target_checkout(dir: &Path) -> Option<&Path> {
    let target = dir
        .ancestors()
        .take(4)
        .find(|a| a.file_name().is_some_and(|n| n == "target"))?;
    let checkout = target.parent()?;
    checkout.join("Cargo.toml").is_file().then_some(checkout)
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

    /// The library found for `exe` with no build-time checkout (so a test sees only the tree it made).
    fn find_for(exe: &Path) -> Result<PathBuf, ModelError> {
        let venvs = venv_candidates_with(exe, None);
        find_library_in(None, None, Some(&venvs))
    }

    fn canon(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).expect("canon")
    }

    #[test]
    fn the_checkout_venv_is_found_from_the_executable_and_never_from_the_working_directory() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("target/debug/deps")).expect("mkdir");
        std::fs::write(ws.join("Cargo.toml"), "[workspace]\n").expect("write");
        let lib = canon(&fake_venv(&ws.join(".venv")));
        // target/debug/stagewise, a test binary in target/debug/deps, a cross build's target/<triple>/release.
        for exe in [
            "target/debug/stagewise",
            "target/debug/deps/stagewise_model-0123",
            "target/x86_64-unknown-linux-gnu/release/stagewise",
        ] {
            let found = find_for(&ws.join(exe)).expect(exe);
            assert_eq!(canon(&found), lib, "{exe}");
        }
        // An executable somewhere else, with a .venv in a parent directory (where a working directory might
        // be): not searched. The error lists exactly what was tried.
        let elsewhere = tmp.path().join("planted");
        fake_venv(&elsewhere.join(".venv"));
        std::fs::create_dir_all(elsewhere.join("sub/bin")).expect("mkdir");
        let exe = elsewhere.join("sub/bin/stagewise");
        let msg = find_for(&exe).expect_err("not found").to_string();
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
        // sub/bin is no venv (no pyvenv.cfg): only the .venv beside the executable.
        assert_eq!(
            venv_candidates_with(&exe, None),
            vec![elsewhere.join("sub/bin/.venv")]
        );
        // A directory named target without a Cargo.toml beside it is not a checkout.
        let loose = tmp.path().join("loose");
        fake_venv(&loose.join(".venv"));
        std::fs::create_dir_all(loose.join("target/debug")).expect("mkdir");
        assert!(find_for(&loose.join("target/debug/stagewise")).is_err());
        // Beside the executable.
        let beside = tmp.path().join("opt/stagewise");
        let lib2 = fake_venv(&beside.join(".venv"));
        let found = find_for(&beside.join("stagewise")).expect("beside");
        assert_eq!(canon(&found), canon(&lib2));
    }

    /// `CARGO_TARGET_DIR` outside the checkout: the target directory says nothing about the checkout, the
    /// build-time checkout does (issue 45, item 8).
    #[test]
    fn a_target_dir_outside_the_checkout_finds_the_checkout_it_was_built_from() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::write(ws.join("Cargo.toml"), "[workspace]\n").expect("write");
        let lib = canon(&fake_venv(&ws.join(".venv")));
        let target = tmp.path().join("sw-target");
        for exe in [
            "debug/stagewise",
            "debug/deps/integration-0123",
            "release/stagewise",
        ] {
            let exe = target.join(exe);
            std::fs::create_dir_all(exe.parent().expect("parent")).expect("mkdir");
            let venvs = venv_candidates_with(&exe, Some(&ws));
            assert_eq!(
                venvs,
                vec![
                    exe.parent().expect("parent").join(".venv"),
                    ws.join(".venv")
                ]
            );
            let found = find_library_in(None, None, Some(&venvs)).expect("found");
            assert_eq!(canon(&found), lib);
            // Without the build-time checkout nothing is found: the target directory alone does not lead there.
            assert!(find_for(&exe).is_err());
        }
        // The same checkout reached both ways is listed once.
        let inside = ws.join("target/debug/stagewise");
        assert_eq!(
            venv_candidates_with(&inside, Some(&ws)),
            vec![ws.join("target/debug/.venv"), ws.join(".venv")]
        );
    }

    /// A binary installed into a venv (`<venv>/bin/stagewise`, issue 49) finds that venv, and only when it is
    /// one (`pyvenv.cfg`).
    #[test]
    fn a_binary_in_a_venv_bin_finds_that_venv() {
        let tmp = tempfile::tempdir().expect("tmp");
        let venv = tmp.path().join("env");
        let lib = canon(&fake_venv(&venv));
        std::fs::create_dir_all(venv.join("bin")).expect("mkdir");
        let exe = venv.join("bin/stagewise");
        // Not yet a venv: no pyvenv.cfg.
        assert_eq!(
            venv_candidates_with(&exe, None),
            vec![venv.join("bin/.venv")]
        );
        assert!(find_for(&exe).is_err());
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("write");
        let ws = tmp.path().join("ws");
        assert_eq!(
            venv_candidates_with(&exe, Some(&ws)),
            vec![venv.join("bin/.venv"), venv.clone(), ws.join(".venv")]
        );
        assert_eq!(canon(&find_for(&exe).expect("found")), lib);
    }

    /// The shipped models: the wheel's data files of the prefix the executable is installed in, the checkout
    /// whose target directory holds it, the checkout it was built from; never the working directory.
    #[test]
    fn shipped_models_are_found_from_the_executable() {
        let tmp = tempfile::tempdir().expect("tmp");
        let model = |dir: &Path, task: &str| {
            let d = dir.join(task);
            std::fs::create_dir_all(&d).expect("mkdir");
            let m = d.join(format!("{task}-progress.toml"));
            std::fs::write(&m, "kind = \"stage_progress\"\n").expect("write");
            m
        };
        // A pip install: <prefix>/bin/stagewise, <prefix>/share/stagewise/models.
        let venv = tmp.path().join("env");
        let share = venv.join("share/stagewise/models");
        let exe = venv.join("bin/stagewise");
        let ws = tmp.path().join("ws");
        assert_eq!(
            models_dirs_with(&exe, Some(&ws)),
            vec![share.clone(), ws.join("models")]
        );
        let m = model(&share, "push-target");
        assert_eq!(
            find_shipped_model_in("push-target", &models_dirs_with(&exe, Some(&ws)))
                .expect("found"),
            m
        );
        // A task the install lacks: the build checkout's, and the error lists both places when neither has it.
        let m2 = model(&ws.join("models"), "stack");
        assert_eq!(
            find_shipped_model_in("stack", &models_dirs_with(&exe, Some(&ws))).expect("found"),
            m2
        );
        let e = find_shipped_model_in("pick-place", &models_dirs_with(&exe, Some(&ws)))
            .expect_err("none")
            .to_string();
        assert!(
            e.contains(
                &share
                    .join("pick-place/pick-place-progress.toml")
                    .display()
                    .to_string()
            ) && e.contains(
                &ws.join("models/pick-place/pick-place-progress.toml")
                    .display()
                    .to_string()
            ),
            "{e}"
        );
        // A checkout build: <checkout>/target/<profile>/stagewise; no `bin` folder, no share/.
        std::fs::write(ws.join("Cargo.toml"), "[workspace]\n").expect("write");
        let built = ws.join("target/release/stagewise");
        assert_eq!(models_dirs_with(&built, Some(&ws)), vec![ws.join("models")]);
        // Elsewhere, with models/ in a parent (where a working directory might be): nothing.
        let loose = tmp.path().join("loose");
        model(&loose.join("models"), "push-target");
        assert!(models_dirs_with(&loose.join("tool/stagewise"), None).is_empty());
        assert!(find_shipped_model_in("push-target", &[]).is_err());
    }

    /// The build-time checkout is this workspace's root, wherever the target directory is.
    #[test]
    fn the_build_checkout_is_the_workspace_root() {
        let root = build_checkout().expect("this checkout has its Cargo.toml");
        assert!(
            root.join("crates/model/Cargo.toml").is_file(),
            "{}",
            root.display()
        );
        assert!(
            root.join("scripts/setup.sh").is_file(),
            "{}",
            root.display()
        );
        let exe = Path::new("/nonexistent/bin/stagewise");
        assert_eq!(
            venv_candidates(exe).last(),
            Some(&root.join(".venv")),
            "the build checkout comes last"
        );
    }

    #[test]
    fn the_flag_wins_over_the_variable_which_wins_over_the_venv() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("target/debug")).expect("mkdir");
        std::fs::write(ws.join("Cargo.toml"), "").expect("write");
        fake_venv(&ws.join(".venv"));
        let venvs = venv_candidates_with(&ws.join("target/debug/stagewise"), None);
        let venvs = Some(venvs.as_slice());
        let a = tmp.path().join("a.so");
        let b = tmp.path().join("b.so");
        std::fs::write(&a, b"a").expect("write");
        std::fs::write(&b, b"b").expect("write");
        let got = find_library_in(Some(&a), Some(b.as_os_str()), venvs).expect("flag");
        assert_eq!(canon(&got), canon(&a));
        let got = find_library_in(None, Some(b.as_os_str()), venvs).expect("env");
        assert_eq!(canon(&got), canon(&b));
        let e = find_library_in(None, Some(tmp.path().join("nope.so").as_os_str()), venvs)
            .expect_err("missing");
        assert!(
            e.to_string()
                .contains("ORT_DYLIB_PATH names a file that does not exist"),
            "{e}"
        );
        // An empty variable counts as unset.
        assert!(find_library_in(None, Some(std::ffi::OsStr::new("")), venvs).is_ok());
    }
}
