//! The actor's encoder cache: with a two-part model (manifest `[parts]`) the actor encodes only each step's new
//! frames and runs the head on the embeddings its window rings keep. Its readings must be the single graph's:
//! the shipped pick-place model, several simulated envs stepped as one batch, episodes of different lengths so
//! that envs reset (and are scored alone) while the others go on.

use stagewise_core::{Env, ShapingConfig};
use stagewise_model::ModelForm;
use stagewise_runtime::{
    Actor, ActorConfig, Clock, EpisodeLog, FrameStream, LogReader, ProgressSource, RandomPolicy,
};
use stagewise_sim::{SimConfig, SimEnv, Task};
use stagewise_wire::{decode, ProgressMsg, TransitionMsg};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

/// Three pick-place envs whose episodes are truncated after 9, 14 and 20 steps.
fn envs() -> Vec<Box<dyn Env>> {
    [9u64, 14, 20]
        .into_iter()
        .map(|max_steps| {
            let mut cfg = SimConfig::new(Task::PickPlace).with_resolution(48, 48);
            cfg.max_steps = max_steps;
            cfg.depth = false;
            Box::new(SimEnv::new(cfg).expect("sim config")) as Box<dyn Env>
        })
        .collect()
}

/// Runs the actor for 9 episodes with a seeded random policy and returns the log's progress and transition
/// messages, in the order they were emitted. Every transition names the model (`reward_model`: its manifest's
/// `sha256`, whatever the form it runs in).
fn run(form: ModelForm, log: PathBuf) -> (Vec<ProgressMsg>, Vec<TransitionMsg>) {
    let model = crate::common::pick_place_model(form);
    assert_eq!(model.form(), form);
    let sha256 = model.manifest().sha256.to_ascii_lowercase();
    assert_eq!(sha256.len(), 64);
    let envs = envs();
    let policy = RandomPolicy::new(&envs[0].spec().action, 7);
    let config = ActorConfig {
        robot: "cache-test".into(),
        base_seed: 100,
        shaping: ShapingConfig::new(0.99, 1.0).expect("shaping"),
        clock: Clock::Free,
        max_episodes: Some(9),
        max_steps: None,
        frames: FrameStream::Off,
    };
    let mut actor = Actor::new(
        envs,
        ProgressSource::Model(Box::new(model)),
        Box::new(policy),
        config,
    )
    .expect("actor")
    .with_log(EpisodeLog::create(&log).expect("log"));
    actor.run(&AtomicBool::new(false), |_, _| {}).expect("run");
    drop(actor);
    let mut reader = LogReader::open(&log).expect("open log");
    let (mut progress, mut transitions) = (Vec::new(), Vec::new());
    while let Some(rec) = reader.next_record().expect("record") {
        if rec.key.ends_with("/progress") {
            progress.push(decode::<ProgressMsg>(&rec.payload).expect("progress"));
        } else if rec.key.ends_with("/transition") {
            transitions.push(decode::<TransitionMsg>(&rec.payload).expect("transition"));
        }
    }
    assert!(!transitions.is_empty());
    for t in &transitions {
        assert_eq!(t.reward_model.as_deref(), Some(sha256.as_str()), "{form:?}");
    }
    (progress, transitions)
}

#[test]
fn two_part_actor_reads_what_the_single_graph_reads() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (single, single_t) = run(ModelForm::SingleGraph, tmp.path().join("single.swlog"));
    let (parts, parts_t) = run(ModelForm::TwoPart, tmp.path().join("parts.swlog"));
    assert_eq!(single.len(), parts.len());
    assert_eq!(single_t.len(), parts_t.len());
    // Every env reset at least once while the others were mid-episode (episodes of 9, 14 and 20 steps), and
    // the progress readings span a range: a comparison of constants would prove nothing.
    for env in 0..3u32 {
        let episodes: Vec<u64> = single_t
            .iter()
            .filter(|t| t.env == env)
            .map(|t| t.episode)
            .collect();
        assert!(episodes.first() != episodes.last(), "env {env} never reset");
    }
    let (lo, hi) = single.iter().fold((f32::MAX, f32::MIN), |(lo, hi), p| {
        (lo.min(p.phi), hi.max(p.phi))
    });
    assert!(hi - lo > 1e-3, "phi is constant ({lo}..{hi})");
    let mut worst = 0f32;
    for (a, b) in single.iter().zip(&parts) {
        assert_eq!((a.env, a.episode, a.step), (b.env, b.episode, b.step));
        assert_eq!(
            a.stage, b.stage,
            "env {} episode {} step {}",
            a.env, a.episode, a.step
        );
        assert_eq!(a.stage_probs.len(), b.stage_probs.len());
        let probs = a
            .stage_probs
            .iter()
            .zip(&b.stage_probs)
            .map(|(x, y)| (x - y).abs());
        let d = probs.fold((a.phi - b.phi).abs().max((a.tau - b.tau).abs()), f32::max);
        assert!(
            d < 1e-5,
            "env {} episode {} step {}: single graph {a:?}, two-part {b:?}",
            a.env,
            a.episode,
            a.step
        );
        worst = worst.max(d);
    }
    for (a, b) in single_t.iter().zip(&parts_t) {
        assert_eq!((a.env, a.episode, a.step), (b.env, b.episode, b.step));
        assert_eq!(a.action, b.action);
        assert!(
            (a.reward - b.reward).abs() < 1e-5,
            "{} vs {}",
            a.reward,
            b.reward
        );
    }
    eprintln!(
        "{} progress readings, largest difference two-part vs single graph {worst:e}",
        single.len()
    );
}
