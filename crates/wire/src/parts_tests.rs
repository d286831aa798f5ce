//! The multi-part encode against `encode`.

use super::*;
use crate::encode;
use crate::tensor::ObservationMsg;
use proptest::prelude::*;
use stagewise_core::{Frame, Observation, Transition, View};

fn frame(w: u32, h: u32, seed: u8) -> Frame {
    Frame::from_fn(w, h, |x, y| {
        image::Rgb([x as u8 ^ seed, y as u8, seed.wrapping_mul(7)])
    })
}

/// Views `(width, height, with depth)`; state of `state_len` values.
fn observation(step: u64, views: &[(u32, u32, bool)], state_len: usize) -> ObservationMsg {
    let views = views
        .iter()
        .enumerate()
        .map(|(i, &(w, h, depth))| {
            let mut v = View::new(format!("cam{i}"), frame(w, h, i as u8));
            if depth {
                v.depth = Some((0..w * h).map(|k| k as f32 * 0.5).collect());
            }
            v
        })
        .collect();
    ObservationMsg::from_observation(&Observation {
        step,
        time: step as f64 * 0.05,
        views,
        state: (0..state_len).map(|k| k as f32 - 1.5).collect(),
    })
}

fn transition(obs: Option<ObservationMsg>, next_obs: Option<ObservationMsg>) -> TransitionMsg {
    let t = Transition {
        env: 2,
        episode: 5,
        step: 9,
        action: vec![0.5, -1.0, 0.25],
        reward: 0.125,
        task_reward: 0.0,
        phi: 0.4,
        phi_next: 0.45,
        gamma: 0.99,
        shaping_scale: 1.0,
        terminated: false,
        truncated: true,
        success: false,
        stage: Some(2),
    };
    let mut m = TransitionMsg::from_transition("arm-0", &t);
    m.obs = obs;
    m.next_obs = next_obs;
    m
}

/// The bench's transition: three 96x96 RGB views and a 7-value state as `next_obs` (83 KB).
fn bench_transition() -> TransitionMsg {
    let views = [(96, 96, false); 3];
    transition(None, Some(observation(3, &views, 7)))
}

fn arb_obs() -> impl Strategy<Value = Option<ObservationMsg>> {
    let views = proptest::collection::vec((1u32..=24, 1u32..=24, any::<bool>()), 0..4);
    proptest::option::of(
        (any::<u64>(), views, 0usize..9).prop_map(|(step, v, n)| observation(step, &v, n)),
    )
}

fn arb_transition() -> impl Strategy<Value = TransitionMsg> {
    (
        (
            "[a-z0-9._-]{1,40}",
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<f32>(), 0..12),
        ),
        (
            any::<f64>(),
            any::<f64>(),
            any::<f64>(),
            any::<[bool; 3]>(),
            any::<Option<u32>>(),
        ),
        arb_obs(),
        arb_obs(),
    )
        .prop_map(
            |((robot, env, episode, step, action), (reward, phi, gamma, flags, stage), o, n)| {
                let mut m = transition(o, n);
                m.robot = robot;
                m.env = env;
                m.episode = episode;
                m.step = step;
                m.stamp_ns = step ^ episode;
                m.action = action;
                m.reward = reward;
                m.phi = phi;
                m.phi_next = phi * 0.5;
                m.gamma = gamma;
                m.terminated = flags[0];
                m.truncated = flags[1];
                m.success = flags[2];
                m.stage = stage;
                m.oracle_phi = stage.map(|s| (s % 101) as f32 / 100.0);
                m
            },
        )
}

fn big_buffers(m: &mut TransitionMsg) -> Vec<usize> {
    m.tensors_mut()
        .map(|t| t.data())
        .filter(|d| d.len() >= PART_MIN)
        .map(|d| d.as_ptr() as usize)
        .collect()
}

/// The bench's transition (three 96x96 RGB views and a 7-value state as `next_obs`, 83 KB) in parts: header,
/// image, header, image, header, image, the rest; the images' own buffers, not copies.
#[test]
fn bench_transition_encodes_in_parts() {
    let m = bench_transition();
    let bytes = encode(&m).expect("encode");
    assert!(bytes.len() > 3 * 96 * 96 * 3, "{}", bytes.len());
    let mut c = m.clone();
    let big = big_buffers(&mut c);
    assert_eq!(big.len(), 3, "the three images, not the 28-byte state");
    let parts = c.encode_parts().expect("parts");
    assert_eq!(parts.to_vec(), bytes);
    assert_eq!(parts.len(), bytes.len());
    assert_eq!(parts.parts().len(), 7);
    let ptrs: Vec<usize> = parts.parts().iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!([ptrs[1], ptrs[3], ptrs[5]], big[..]);
    assert_eq!(parts.into_parts().concat(), bytes);
}

#[test]
fn transitions_without_big_tensors_are_one_part() {
    for m in [
        transition(None, None),
        transition(Some(observation(0, &[(4, 4, true)], 3)), None),
    ] {
        let parts = m.clone().encode_parts().expect("parts");
        assert_eq!(parts.parts().len(), 1);
        assert_eq!(parts.to_vec(), encode(&m).expect("encode"));
    }
}

#[test]
fn bytes_are_one_part() {
    let bytes = encode(&transition(None, None)).expect("encode");
    let parts = WireParts::from(bytes.clone());
    assert_eq!(parts.parts(), [bytes]);
    assert!(WireParts::from(Vec::new()).is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// The parts concatenate to `encode`'s bytes, and every tensor of at least `PART_MIN` bytes is a part of
    /// its own, its own buffer (moved, not copied).
    #[test]
    fn encode_parts_writes_the_bytes_of_encode(m in arb_transition()) {
        let want = encode(&m).expect("encode");
        let mut c = m.clone();
        let big = big_buffers(&mut c);
        let parts = c.encode_parts().expect("parts");
        prop_assert_eq!(parts.to_vec(), want.clone());
        prop_assert_eq!(parts.parts().len(), 2 * big.len() + 1);
        let ptrs: Vec<usize> = parts.parts().iter().skip(1).step_by(2).map(|p| p.as_ptr() as usize).collect();
        prop_assert_eq!(ptrs, big);
        prop_assert!(parts.parts().iter().all(|p| !p.is_empty()));
    }
}
