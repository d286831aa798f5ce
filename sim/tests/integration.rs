//! The integration tests of `stagewise-sim`, gathered in one test binary (each module was a `tests/*.rs` binary of
//! its own: one binary links the crate and its dependencies once). `autotests = false` in Cargo.toml, so a new
//! `tests/*.rs` file runs only once it is declared here (`tests/layout.rs` in the workspace root checks that).
//! Run one module with `cargo test -p stagewise-sim --test integration <module>::`.

mod render_golden;
mod sim;
