//! `stagewise policy`: push an ONNX policy to a running actor (what a learner does), and make the ed25519 key
//! pair that signs policies.

use super::zenoh_args::{Role, ZenohArgs};
use anyhow::{bail, Context};
use ed25519_dalek::{Signer, SigningKey};
use stagewise_stream::{Keys, PolicyMsg};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum PolicyCommand {
    /// Put an ONNX policy on stagewise/<robot-name>/policy; the actor checks it and swaps between episodes.
    Push(PushArgs),
    /// Print a new ed25519 key pair (hex): give the public key to `run --policy-key`, keep the secret.
    Keygen,
}

#[derive(clap::Args, Debug)]
pub struct PushArgs {
    /// The ONNX policy file (state f32 [N, S] in, action f32 [N, A] out; or the inputs its ONNX metadata declares:
    /// state fields by name, camera frames or embeddings, docs/wire.md#policy).
    pub onnx: PathBuf,
    /// Policy version; the actor refuses versions not newer than the last one it accepted (kept across its
    /// restarts).
    #[arg(long)]
    pub version: u64,
    /// Hex ed25519 secret key (32 bytes) to sign the policy with, for the robot named by --robot-name (the
    /// actor's --robot-name): the signature covers robot, version and sha256.
    #[arg(
        long,
        value_name = "HEX",
        env = "STAGEWISE_POLICY_SECRET",
        hide_env_values = true
    )]
    pub secret_key: Option<String>,
    /// Seconds to wait for the actor's policy subscriber.
    #[arg(long, default_value_t = 10.0)]
    pub wait: f64,
    #[command(flatten)]
    pub zenoh: ZenohArgs,
}

pub fn run(a: PolicyArgs) -> anyhow::Result<()> {
    match a.command {
        PolicyCommand::Keygen => {
            let mut seed = [0u8; 32];
            rand::fill(&mut seed);
            let key = SigningKey::from_bytes(&seed);
            println!("secret {}", hex::encode(key.to_bytes()));
            println!("public {}", hex::encode(key.verifying_key().to_bytes()));
            Ok(())
        }
        PolicyCommand::Push(p) => push(p),
    }
}

fn push(p: PushArgs) -> anyhow::Result<()> {
    let onnx = std::fs::read(&p.onnx).with_context(|| format!("reading {}", p.onnx.display()))?;
    let robot = p.zenoh.robot_name();
    let mut msg = PolicyMsg::new(p.version, onnx);
    if let Some(hex_key) = &p.secret_key {
        let bytes = hex::decode(hex_key.trim()).context("--secret-key is not hex")?;
        let Ok(seed) = <[u8; 32]>::try_from(bytes.as_slice()) else {
            bail!(
                "--secret-key has {} bytes, an ed25519 secret key has 32",
                bytes.len()
            );
        };
        // The signature covers robot name, version and sha256 (stagewise_stream::policy_signing_message).
        let sig = SigningKey::from_bytes(&seed).sign(&msg.signing_message(&robot)?);
        msg = msg.with_signature(sig.to_bytes().to_vec());
    }
    let keys = Keys::new(robot)?;
    let node = p.zenoh.open(Role::Connect, None)?;
    if !node.wait_for_subscribers(&keys.policy(), Duration::from_secs_f64(p.wait))? {
        bail!(
            "no actor subscribed to {} within {} s",
            keys.policy(),
            p.wait
        );
    }
    node.put(&keys.policy(), &msg)?;
    std::thread::sleep(Duration::from_millis(200));
    node.close().ok();
    println!(
        "pushed policy v{} ({} bytes, sha256 {}) to {}",
        p.version,
        msg.onnx.len(),
        msg.sha256,
        keys.policy()
    );
    Ok(())
}
