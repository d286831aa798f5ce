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

/// `onnx` with `entries` added to its metadata (`metadata_props`, field 14 of ModelProto: a repeated field, so
/// entries appended to the serialised message are read as part of it). For graphs that lack these keys.
pub fn with_metadata(onnx: &[u8], entries: &[(&str, &str)]) -> Vec<u8> {
    fn varint(mut n: usize, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut out = onnx.to_vec();
    for (k, v) in entries {
        let mut entry = vec![0x0a];
        varint(k.len(), &mut entry);
        entry.extend_from_slice(k.as_bytes());
        entry.push(0x12);
        varint(v.len(), &mut entry);
        entry.extend_from_slice(v.as_bytes());
        out.push(0x72);
        varint(entry.len(), &mut out);
        out.extend_from_slice(&entry);
    }
    out
}
