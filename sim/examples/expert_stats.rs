//! Success rate, episode length and stage shares of the scripted experts (rendering off).
//! `cargo run --release -p stagewise-sim --example expert_stats [SEEDS] [DEGRADATION]`

use stagewise_sim::{rollout, Degradation, Task};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(40);
    let deg_name = args.get(2).map(String::as_str).unwrap_or("none");
    let deg = Degradation::preset(deg_name).ok_or("unknown degradation preset")?;
    for task in Task::ALL {
        let mut ok = 0;
        let mut len = 0usize;
        let mut shares = vec![0f32; task.stage_names().len()];
        let mut fails = Vec::new();
        for seed in 0..n {
            let r = rollout(task, seed, deg, false)?;
            if r.success {
                ok += 1;
                len += r.len();
                for (s, x) in shares.iter_mut().zip(r.stage_shares()) {
                    *s += x;
                }
            } else {
                fails.push((seed, *r.stages.last().unwrap_or(&0), r.terminated));
            }
        }
        let k = ok.max(1) as f32;
        println!(
            "{task:12} {deg_name:12} success {ok}/{n}  mean len {:.0}  shares {:?}  failures (seed, stage, terminated) {:?}",
            len as f32 / k,
            shares.iter().map(|s| (s / k * 100.0).round() / 100.0).collect::<Vec<_>>(),
            fails
        );
    }
    Ok(())
}
