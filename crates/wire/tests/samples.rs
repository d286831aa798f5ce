//! The wire bytes do not move: the committed samples in `tests/samples/*.msgpack` were written by the encoder as
//! it stood before this crate existed (`stagewise-stream`'s, commit 80592d8). Today's [`encode`] must write them
//! byte for byte, [`decode`] must read them back to the same messages, and each must have the layout of
//! docs/wire.md (checked field by field in `src/message_tests.rs`).

use crate::sample_messages::sample_messages;
use stagewise_wire::*;
use std::path::PathBuf;

fn sample(name: &str) -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/samples/{name}.msgpack"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Decodes `bytes` as `M`, and checks that encoding the result gives `bytes` again.
fn reads_back<M: WireMessage + std::fmt::Debug>(name: &str, bytes: &[u8]) {
    let m: M = decode(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(encode(&m).expect("encode"), bytes, "{name}: re-encoded");
}

#[test]
fn encoder_writes_the_committed_bytes() {
    let messages = sample_messages();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples");
    let committed = std::fs::read_dir(&dir).expect("samples dir").count();
    assert_eq!(committed, messages.len(), "one sample file per message");
    for (name, bytes) in messages {
        let want = sample(name);
        assert!(
            bytes == want,
            "{name}: encoded {} bytes, the committed sample has {}; first difference at byte {:?}",
            bytes.len(),
            want.len(),
            bytes.iter().zip(&want).position(|(a, b)| a != b)
        );
    }
}

#[test]
fn decoder_reads_the_committed_bytes() {
    for (name, _) in sample_messages() {
        let bytes = sample(name);
        let (schema, kind) = peek_header(&bytes).expect("a message");
        assert_eq!(schema, u64::from(SCHEMA_VERSION), "{name}");
        match kind.as_str() {
            "transition" => {
                reads_back::<TransitionMsg>(name, &bytes);
                let view: TransitionMsg<Borrowed> = decode(&bytes).expect("borrowed");
                assert_eq!(
                    encode(&view).expect("encode"),
                    bytes,
                    "{name}: borrowed, re-encoded"
                );
                assert_eq!(
                    view.into_owned(),
                    decode::<TransitionMsg>(&bytes).expect("owned")
                );
            }
            "progress" => reads_back::<ProgressMsg>(name, &bytes),
            "episode" => reads_back::<EpisodeMsg>(name, &bytes),
            "policy" => reads_back::<PolicyMsg>(name, &bytes),
            "reset_request" => reads_back::<ResetRequest>(name, &bytes),
            "reset_reply" => reads_back::<ResetReply>(name, &bytes),
            "step_request" => reads_back::<StepRequest>(name, &bytes),
            "step_reply" => reads_back::<StepReply>(name, &bytes),
            other => panic!("{name}: unknown kind {other}"),
        }
    }
    // A few values read back as they were written.
    let t: TransitionMsg = decode(&sample("transition_obs")).expect("transition");
    let next = t
        .next_obs
        .as_ref()
        .expect("next_obs")
        .to_observation()
        .expect("observation");
    assert_eq!((t.step, t.stage, next.step), (300, Some(2), 301));
    // Written before `oracle_phi` existed: it reads as absent.
    assert_eq!(t.oracle_phi, None);
    // Written before `reward_model` existed: it reads as absent too.
    assert_eq!(t.reward_model, None);
    assert_eq!(next.views[1].name, "wrist");
    assert_eq!(next.views[1].depth.as_ref().map(Vec::len), Some(12));
    let p: ProgressMsg = decode(&sample("progress")).expect("progress");
    assert_eq!(
        (p.episode, p.step, p.stage, p.stamp_ns),
        (70_000, 65_536, 1, 42)
    );
    let pol: PolicyMsg = decode(&sample("policy_signed")).expect("policy");
    pol.verify_sha256().expect("hash");
    assert_eq!(pol.signature.as_deref().map(<[u8]>::len), Some(64));
    let r: StepReply = decode(&sample("step_reply_error")).expect("step reply");
    assert_eq!(r.error.as_deref(), Some("env closed"));
}
