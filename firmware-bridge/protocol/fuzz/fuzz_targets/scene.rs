//! Arbitrary bytes into the scene-channel decoders (see bodies.rs).
#![no_main]

mod bodies;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bodies::scene(data));
