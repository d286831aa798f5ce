use std::path::PathBuf;

/// Everything that can go wrong loading or running a model. Each variant names the file, tensor or field.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "no ONNX Runtime library found (searched beside the executable, the venv it is installed in and the \
         checkout it was built from, never the current directory; tried: {searched}). To fix: install stagewise \
         into a virtualenv with pip (its wheel brings the onnxruntime wheel: docs/install.md), run scripts/setup.sh \
         in the checkout this binary was built from, or name the library with --ort-lib PATH or ORT_DYLIB_PATH \
         (libonnxruntime.so.<version> in the capi/ folder of any venv's onnxruntime package); `stagewise doctor` \
         shows every lookup"
    )]
    LibraryNotFound { searched: String },
    /// `--reward model` without `--model` and no shipped model for the task where the binary looks.
    #[error(
        "no shipped reward model for {task} (tried {searched}; the binary looks in its install's \
         share/stagewise/models and in the checkout it was built from, never the current directory): pass \
         --model MANIFEST or --reward oracle, or install stagewise with pip (its wheel ships the models: \
         docs/install.md)"
    )]
    ShippedModelNotFound { task: String, searched: String },
    #[error("could not load the ONNX Runtime library {path}")]
    LibraryLoad {
        path: PathBuf,
        #[source]
        source: ort::LoadDynamicError,
    },
    /// `--ort-lib` or `ORT_DYLIB_PATH` names a file that is not there.
    #[error(
        "could not load the ONNX Runtime library {path}: {origin} names a file that does not exist"
    )]
    LibraryMissing { path: PathBuf, origin: String },
    #[error("ONNX Runtime could not create its environment")]
    Environment(#[source] ort::Error),
    /// Loading ONNX Runtime failed (it is loaded once per process: every later call reports the same failure).
    #[error(transparent)]
    RuntimeUnavailable(std::sync::Arc<ModelError>),
    #[error(
        "execution provider {provider} is not available in this ONNX Runtime build (available: {available}); \
         use --provider auto or install onnxruntime-gpu with CUDA/TensorRT"
    )]
    ProviderUnavailable { provider: String, available: String },
    #[error("execution provider {provider} failed for {path}")]
    ProviderFailed {
        provider: String,
        path: PathBuf,
        #[source]
        source: ort::Error,
    },
    #[error("unknown execution provider {0:?}: expected auto, tensorrt, cuda or cpu")]
    UnknownProvider(String),

    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("manifest {path} is not valid TOML for a model manifest")]
    ManifestSyntax {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("manifest {path}: field `{field}`: {reason}")]
    ManifestField {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// `stages.proportions` of a manifest are not valid stage proportions.
    #[error("manifest {path}: field `stages.proportions`")]
    ManifestProportions {
        path: PathBuf,
        #[source]
        source: stagewise_core::ProgressError,
    },
    #[error("{path}: sha256 is {actual}, manifest {manifest} says {expected}")]
    Checksum {
        path: PathBuf,
        manifest: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{path} is not a valid ONNX model")]
    InvalidOnnx {
        path: PathBuf,
        #[source]
        source: ort::Error,
    },
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
    /// A policy graph's metadata (its `stagewise.*` keys: [`crate::policy::PolicyInputs`]) that does not parse,
    /// names an unknown key, is out of bounds, or declares inputs the loader cannot give it.
    #[error("policy {path}: ONNX metadata {key}: {reason}")]
    PolicyMetadata {
        path: PathBuf,
        key: String,
        reason: String,
    },
    /// A policy that reads a reward model's frame embeddings, where none are computed or another encoder's.
    #[error("policy {policy} reads the frame embeddings of encoder {encoder} ({views} views x {size}), but {reason}")]
    PolicyEmbeddingSource {
        policy: PathBuf,
        encoder: String,
        views: usize,
        size: usize,
        reason: String,
    },
    /// A policy's `[pixels]` view that its source lacks or gives at another size.
    #[error("policy {policy} reads camera view {view:?} at {size}, but {reason}")]
    PolicyView {
        policy: PathBuf,
        view: String,
        size: String,
        reason: String,
    },
    #[error("model kind `{kind}` cannot be used as {wanted}")]
    WrongKind { kind: String, wanted: &'static str },

    #[error("observation for env {env}: {reason}")]
    BadObservation { env: usize, reason: String },
    #[error("input `{tensor}`: {reason}")]
    BadInput { tensor: String, reason: String },
    #[error("cannot decode image {path}")]
    ImageDecode {
        path: PathBuf,
        #[source]
        source: image::ImageError,
    },
    #[error("ONNX Runtime failed running {path}")]
    Run {
        path: PathBuf,
        #[source]
        source: ort::Error,
    },
    #[error("output `{tensor}` of {path}: {reason}")]
    BadOutput {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
    /// An output tensor that ONNX Runtime could not hand over as f32 values.
    #[error("output `{tensor}` of {path} cannot be read as f32")]
    OutputRead {
        path: PathBuf,
        tensor: String,
        #[source]
        source: ort::Error,
    },
    /// Output values that do not make a progress estimate (softmax or phi of the stage outputs failed).
    #[error("output `{tensor}` of {path}: its values make no progress estimate")]
    OutputProgress {
        path: PathBuf,
        tensor: String,
        #[source]
        source: stagewise_core::ProgressError,
    },
    /// The hop fusion of a hop model's outputs could not be set up.
    #[error("output `{tensor}` of {path}: hop fusion")]
    HopFusion {
        path: PathBuf,
        tensor: String,
        #[source]
        source: stagewise_core::HopError,
    },
}
