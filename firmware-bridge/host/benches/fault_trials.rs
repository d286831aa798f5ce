//! The fault-injection benchmark: >= 1000 seeded trials of tests/fault_injection.rs (the same trial, the same
//! checks and scenarios the tests run on a short subset), with a printed summary and a non-zero exit on any
//! violation.
//!
//! ```text
//! cargo bench -p stagewise-bridge --bench fault_trials
//! STAGEWISE_FAULT_TRIALS=1002 STAGEWISE_FAULT_FIRST_SEED=0 STAGEWISE_FAULT_JOBS=1 cargo bench -p stagewise-bridge --bench fault_trials
//! ```
//!
//! `STAGEWISE_FAULT_JOBS` runs trials in parallel threads (each its own runtime, emulator and proxy); the
//! default 1 keeps the 1 kHz loops of one trial from competing with another's.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/fault_injection.rs"]
mod fault_injection;

use std::time::Instant;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let n = env("STAGEWISE_FAULT_TRIALS", 1002);
    let first = env("STAGEWISE_FAULT_FIRST_SEED", 0);
    let jobs = env("STAGEWISE_FAULT_JOBS", 1).max(1);
    let t0 = Instant::now();
    let handles: Vec<_> = (0..jobs)
        .map(|j| {
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("runtime");
                let mut out = Vec::new();
                let mut seed = first + j;
                while seed < first + n {
                    let t = rt.block_on(fault_injection::trial(seed));
                    println!("{}", fault_injection::line(&t));
                    out.push(t);
                    seed += jobs;
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().expect("trial thread"));
    }
    all.sort_by_key(|t| t.seed);
    print!("{}", fault_injection::summary(&all));
    println!(
        "  {} trials in {:.0} s ({} jobs), seeds {first}..{}",
        all.len(),
        t0.elapsed().as_secs_f64(),
        jobs,
        first + n
    );
    if all.iter().any(|t| !t.violations.is_empty()) {
        std::process::exit(1);
    }
}
