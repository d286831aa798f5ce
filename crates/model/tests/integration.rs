//! The integration tests of `stagewise-model`, gathered in one test binary (each module was a `tests/*.rs` binary of
//! its own: one binary links the crate and its dependencies once). `autotests = false` in Cargo.toml, so a new
//! `tests/*.rs` file runs only once it is declared here (`tests/layout.rs` in the workspace root checks that).
//! Run one module with `cargo test -p stagewise-model --test integration <module>::`.

mod bad_input;
mod common;
mod hop_graph;
mod manifest_corpus;
mod parity;
mod policy;
mod score;
mod scoring;
mod state_names;
mod two_part;
