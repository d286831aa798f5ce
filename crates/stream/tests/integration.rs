//! The integration tests of `stagewise-stream`, gathered in one test binary (each module was a `tests/*.rs` binary of
//! its own: one binary links the crate and its dependencies once). `autotests = false` in Cargo.toml, so a new
//! `tests/*.rs` file runs only once it is declared here (`tests/layout.rs` in the workspace root checks that).
//! Run one module with `cargo test -p stagewise-stream --test integration <module>::`.

mod common;
mod cross_process;
mod in_process;
mod python_interop;
mod tls_router;
