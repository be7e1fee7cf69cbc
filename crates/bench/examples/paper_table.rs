//! The FGD paper's protocol without the `gantry` binary (same library call as
//! `gantry bench schedule --protocol paper`):
//! `cargo run --release -p gantry-bench --example paper_table -- NODES.csv RESULTS.md SEEDS PODS.csv...`;
//! `POLICIES=FGD,Gantry` runs only those (all by default); `FIRST_SEED=N` starts the seeds
//! at N (42, the paper's, by default); `STREAMS=chacha8` draws the seeds from ChaCha8
//! instead of Go's `math/rand` (the paper's own draws, the default); `MIXES=oracle,online`
//! reports FGD and Gantry with the whole trace's mix in advance and with the arrivals' mix
//! the product's scheduler sees (oracle only by default).
use gantry_bench::replay::MixMode;
use gantry_bench::schedule::paper::{PaperOptions, run_paper};
use gantry_scheduler::gpushare::SharePolicy;
use std::path::PathBuf;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 4 {
        eprintln!("usage: paper_table NODES.csv RESULTS.md SEEDS PODS.csv...");
        std::process::exit(2);
    }
    let opts = PaperOptions {
        nodes: PathBuf::from(&a[0]),
        paper_results: Some(PathBuf::from(&a[1])),
        seeds: a[2].parse().unwrap_or(10),
        pods: a[3..].iter().map(PathBuf::from).collect(),
        policies: env_or("POLICIES", SharePolicy::ALL.to_vec(), |list| {
            list.split(',').map(str::parse).collect()
        }),
        first_seed: env_or("FIRST_SEED", 42, str::parse),
        tune_ratio: 1.3,
        streams: env_or("STREAMS", Default::default(), str::parse),
        mixes: env_or("MIXES", vec![MixMode::Oracle], |list| {
            list.split(',').map(str::parse).collect()
        }),
    };
    match run_paper(&opts) {
        Ok(r) => print!("{r}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

/// The variable's value parsed, or `default` when it is unset; exits 2 naming the variable
/// and its value when the value does not parse.
fn env_or<T, E: std::fmt::Display>(
    name: &str,
    default: T,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> T {
    match std::env::var(name) {
        Ok(s) => parse(&s).unwrap_or_else(|e| {
            eprintln!("error: {name}={s:?}: {e}");
            std::process::exit(2)
        }),
        Err(_) => default,
    }
}
