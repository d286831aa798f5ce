//! One module per subcommand.

pub mod bench;
pub mod eval;
pub mod models;
pub mod ort_args;
pub mod record;
pub mod score;
pub mod sim;
