//! The integration tests of `stagewise-wire`, gathered in one test binary (`autotests = false` in Cargo.toml: a
//! new `tests/*.rs` file runs only once it is declared here). Run one module with
//! `cargo test -p stagewise-wire --test integration <module>::`.

mod corpus;
mod sample_messages;
mod samples;
