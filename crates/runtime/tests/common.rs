//! What the integration test modules share.

use stagewise_model::{ModelForm, OrtRuntime, Provider, RewardModel, SessionOptions};
use std::path::Path;

/// The shipped pick-place progress model in `form`, on the CPU provider with one thread.
pub fn pick_place_model(form: ModelForm) -> RewardModel {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/pick-place/pick-place-progress.toml");
    let rt = OrtRuntime::init(None).expect("ONNX Runtime (run scripts/setup.sh)");
    let opts = SessionOptions {
        provider: Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    };
    RewardModel::load_as(&manifest, rt, &opts, form).expect("the shipped pick-place model")
}
