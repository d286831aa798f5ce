//! The integration tests of `stagewise-runtime`, gathered in one test binary (`autotests = false` in Cargo.toml: a
//! new `tests/*.rs` file runs only once it is declared here). Run one module with
//! `cargo test -p stagewise-runtime --test integration <module>::`.

mod common;
mod encoder_cache;
mod log_corpus;
mod pixel_policy;
mod pushed_inputs;
mod shaped_env;
