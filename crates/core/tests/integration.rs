//! The integration tests of `stagewise-core`, gathered in one test binary (each module was a `tests/*.rs` binary of
//! its own: one binary links the crate and its dependencies once). `autotests = false` in Cargo.toml, so a new
//! `tests/*.rs` file runs only once it is declared here (`tests/layout.rs` in the workspace root checks that).
//! Run one module with `cargo test -p stagewise-core --test integration <module>::`.

mod bad_input;
mod invariance;
mod metrics_fixtures;
mod rabc_fixtures;
mod report;
mod shaper;
