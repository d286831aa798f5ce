//! One module per subcommand.

pub mod adapt;
pub mod annotate;
pub mod bench;
pub mod doctor;
pub mod eval;
pub mod label;
pub mod learn;
pub mod log;
pub mod models;
pub mod ort_args;
pub mod policy;
pub mod python;
pub mod record;
pub mod replay;
pub mod robot;
pub mod run;
pub mod score;
pub mod serve;
pub mod sim;
pub mod sim_args;
pub mod train;
pub mod view;
pub mod zenoh_args;
