//! Run the scheduler benchmark without the `gantry` binary:
//! `cargo run --release -p gantry-bench --example bench_schedule -- NODES GPUS RUNNING PENDING [skip-replay|skip-cycle] [kai-only|frag-only]`.
//! With `DUMP=<file>` it also writes the KAI policy's (or `DUMP_POLICY`'s) decisions on the synthetic cluster as
//! JSON, to check that a change to the core leaves every bind, eviction and reason as it was.
//! `TOPOLOGY=zone=64,rack=8` constrains the jobs to a topology (`--topology`).
use gantry_bench::schedule::{BenchOptions, SynthSpec, Workload, run, synth};
use gantry_scheduler::{Config, Policy, Snapshot, schedule};

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
    if let Ok(path) = std::env::var("DUMP") {
        let cfg = Config {
            seed: 1,
            policy: std::env::var("DUMP_POLICY")
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or(Policy::Kai),
            ..Config::default()
        };
        let d = schedule(&Snapshot::build(&synth::synth(&spec)), &cfg);
        let json = serde_json::to_string_pretty(&d).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, json) {
            eprintln!("error: writing {path}: {e}");
        }
    }
    let opts = BenchOptions {
        workload: Workload::Synthetic(spec),
        policies: if a.iter().any(|x| x == "kai-only") {
            vec![Policy::Kai]
        } else if a.iter().any(|x| x == "frag-only") {
            vec![Policy::FragmentationAware]
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
        topology: std::env::var("TOPOLOGY").ok(),
    };
    match run(&opts) {
        Ok(r) => print!("{r}"),
        Err(e) => eprintln!("error: {e}"),
    }
}
