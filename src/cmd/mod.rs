//! One module per subcommand.

pub mod bench;
pub mod models;
pub mod ort_args;
pub mod score;
pub mod sim;
