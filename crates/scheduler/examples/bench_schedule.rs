//! Run the scheduler benchmark without the `gantry` binary:
//! `cargo run --release -p gantry-scheduler --example bench_schedule -- NODES GPUS RUNNING PENDING [skip-replay]`.
use gantry_scheduler::Policy;
use gantry_scheduler::bench::{BenchOptions, SynthSpec, Workload, run};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| a.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let spec = SynthSpec {
        nodes: num(1, 5000),
        gpus_per_node: num(2, 8) as u32,
        running: num(3, 0),
        pending: num(4, 20000),
        mix: std::env::var("MIX")
            .ok()
            .and_then(|m| m.parse().ok())
            .unwrap_or_default(),
        queues: 4,
        seed: 1,
    };
    let opts = BenchOptions {
        workload: Workload::Synthetic(spec),
        policies: if a.iter().any(|x| x == "kai-only") {
            vec![Policy::Kai]
        } else {
            vec![
                Policy::Kai,
                Policy::FragmentationAware,
                Policy::RandomFit,
                Policy::BestFit,
                Policy::FirstFit,
            ]
        },
        seed: 1,
        skip_replay: a.iter().any(|x| x == "skip-replay"),
        skip_cycle: a.iter().any(|x| x == "skip-cycle"),
    };
    match run(&opts) {
        Ok(r) => print!("{r}"),
        Err(e) => eprintln!("error: {e}"),
    }
}
