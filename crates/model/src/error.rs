use std::path::PathBuf;

/// Everything that can go wrong loading or running a model. Each variant names the file, tensor or field.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "no ONNX Runtime library found: pass --ort-lib PATH, set ORT_DYLIB_PATH, or run scripts/setup.sh to \
         install the onnxruntime wheel into the project's .venv (beside the executable or its checkout; the \
         current directory is never searched). Tried: {searched}"
    )]
    LibraryNotFound { searched: String },
    #[error("could not load the ONNX Runtime library {path}: {reason}")]
    LibraryLoad { path: PathBuf, reason: String },
    #[error("ONNX Runtime could not create its environment: {0}")]
    Environment(String),
    #[error(
        "execution provider {provider} is not available in this ONNX Runtime build (available: {available}); \
         use --provider auto or install onnxruntime-gpu with CUDA/TensorRT"
    )]
    ProviderUnavailable { provider: String, available: String },
    #[error("execution provider {provider} failed for {path}: {reason}")]
    ProviderFailed {
        provider: String,
        path: PathBuf,
        reason: String,
    },
    #[error("unknown execution provider {0:?}: expected auto, tensorrt, cuda or cpu")]
    UnknownProvider(String),

    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("manifest {path}: {reason}")]
    ManifestSyntax { path: PathBuf, reason: String },
    #[error("manifest {path}: field `{field}`: {reason}")]
    ManifestField {
        path: PathBuf,
        field: String,
        reason: String,
    },
    #[error("{path}: sha256 is {actual}, manifest {manifest} says {expected}")]
    Checksum {
        path: PathBuf,
        manifest: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{path} is not a valid ONNX model: {reason}")]
    InvalidOnnx { path: PathBuf, reason: String },
    #[error("{path} disagrees with its manifest: field `{field}`: {reason}")]
    GraphMismatch {
        path: PathBuf,
        field: String,
        reason: String,
    },
    #[error(
        "model {model} reads state field {field:?}, which {origin} does not have (it has: {has})"
    )]
    StateFieldMissing {
        model: PathBuf,
        field: String,
        origin: String,
        has: String,
    },
    #[error(
        "model {model} has no state_names and reads a state of {state_size} values as it is, but {origin} has \
         {source_len} ({has}): name the fields the model reads with state_names in its manifest"
    )]
    StateSize {
        model: PathBuf,
        state_size: usize,
        origin: String,
        source_len: usize,
        has: String,
    },
    #[error("model kind `{kind}` cannot be used as {wanted}")]
    WrongKind { kind: String, wanted: &'static str },

    #[error("observation for env {env}: {reason}")]
    BadObservation { env: usize, reason: String },
    #[error("input `{tensor}`: {reason}")]
    BadInput { tensor: String, reason: String },
    #[error("ONNX Runtime failed running {path}: {reason}")]
    Run { path: PathBuf, reason: String },
    #[error("output `{tensor}` of {path}: {reason}")]
    BadOutput {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
}
