//! Arbitrary bytes into the frame decoders (see bodies.rs: authentication, re-encoding, the replay window).
#![no_main]

mod bodies;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bodies::frames(data));
