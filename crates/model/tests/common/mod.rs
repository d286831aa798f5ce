//! Shared helpers for the model crate's integration tests: the real ONNX Runtime from the project's .venv,
//! the generated test models, and deterministic synthetic observations.
#![allow(dead_code)]

use stagewise_core::Observation;
use stagewise_model::{OrtRuntime, Provider, RewardModel, SessionOptions};
use std::path::PathBuf;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn model_path(name: &str) -> PathBuf {
    root().join("models/test").join(format!("{name}.toml"))
}

pub fn runtime() -> &'static OrtRuntime {
    OrtRuntime::init(None).expect("ONNX Runtime: run scripts/setup.sh first")
}

pub fn cpu() -> SessionOptions {
    SessionOptions {
        provider: Provider::Cpu,
        intra_threads: 1,
        tensorrt_cache: None,
    }
}

pub fn load(name: &str) -> RewardModel {
    RewardModel::load(&model_path(name), runtime(), &cpu()).expect("load test model")
}

pub fn observation(
    views: &[&str],
    seed: u64,
    step: u64,
    w: u32,
    h: u32,
    state_size: usize,
) -> Observation {
    let names: Vec<String> = views.iter().map(|v| v.to_string()).collect();
    stagewise_model::synthetic::observation(&names, seed, step, w, h, state_size)
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
