//! The integration tests of `stagewise`, gathered in one test binary (each module was a `tests/*.rs` binary of
//! its own: one binary links the crate and its dependencies once). `autotests = false` in Cargo.toml, so a new
//! `tests/*.rs` file runs only once it is declared here (`tests/layout.rs` in the workspace root checks that). `tests/shipped_models.rs` is a
//! binary of its own (it asserts the shipped models' quality figures and is run alone, e.g. after models/train_all.sh).
//! Run one module with `cargo test -p stagewise --test integration <module>::`.

mod common;
mod install;
mod label_e2e;
mod layout;
mod learn;
mod log_export;
mod own_task;
mod robot_e2e;
mod runtime_e2e;
