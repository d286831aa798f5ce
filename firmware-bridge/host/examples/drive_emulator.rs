//! Drives a running firmware emulator as an `Env`: `cargo run -p stagewise-bridge --example drive_emulator --
//! udp://127.0.0.1:9100 robot.key` (start `stagewise-emulator --bind 127.0.0.1:9100 --link-key-file robot.key`
//! first; `stagewise robot keygen robot.key` makes the key). Moves +x for one second, then -x, printing the
//! end-effector state.

use stagewise_bridge::{link_key, Endpoint, RobotEnv, RobotEnvConfig};
use stagewise_core::Env;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint: Endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "udp://127.0.0.1:9100".into())
        .parse()?;
    let key_file = std::env::args()
        .nth(2)
        .ok_or("usage: drive_emulator udp://HOST:PORT KEY_FILE")?;
    let key = link_key::load(std::path::Path::new(&key_file))?;
    let mut env = RobotEnv::connect(
        RobotEnvConfig::sim_like(endpoint, "pick-place", Vec::new(), key),
        Vec::new(),
    )?;
    let obs = env.reset(0)?;
    println!("reset: state {:?}", obs.state);
    for i in 0..100 {
        let dir = if i < 50 { 1.0 } else { -1.0 };
        let r = env.step(&[dir, 0.0, 0.0, 1.0])?;
        if i % 10 == 9 {
            println!(
                "step {:>3}: state {:?} clipped={}",
                r.obs.step, r.obs.state, r.info.action_clipped
            );
        }
    }
    println!("bridge stats: {:?}", env.bridge().stats());
    Ok(())
}
