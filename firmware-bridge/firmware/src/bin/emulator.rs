//! `stagewise-emulator`: the reference firmware on this machine, over UDP, with the simulator as the plant
//! (the same program as `stagewise emulator`; arguments and behaviour in [`stagewise_firmware::cli`]).
//!
//! ```text
//! stagewise-emulator --bind 127.0.0.1:9100 --task pick-place --seed 0
//! ```

use clap::Parser;
use stagewise_firmware::cli::EmulatorArgs;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Stagewise reference firmware emulator (UDP) with the simulator as its plant"
)]
struct Cli {
    #[command(flatten)]
    args: EmulatorArgs,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    stagewise_firmware::cli::run(Cli::parse().args)
}
