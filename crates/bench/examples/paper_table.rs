//! The FGD paper's protocol without the `gantry` binary (same library call as
//! `gantry bench schedule --protocol paper`):
//! `cargo run --release -p gantry-bench --example paper_table -- NODES.csv RESULTS.md SEEDS PODS.csv...`;
//! `POLICIES=FGD,Gantry` runs only those (all by default); `FIRST_SEED=N` starts the seeds
//! at N (42, the paper's, by default); `STREAMS=chacha8` draws the seeds from ChaCha8
//! instead of Go's `math/rand` (the paper's own draws, the default).
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
        policies: match std::env::var("POLICIES") {
            Ok(list) => match list.split(',').map(str::parse).collect() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: POLICIES: {e}");
                    std::process::exit(2);
                }
            },
            Err(_) => SharePolicy::ALL.to_vec(),
        },
        first_seed: match std::env::var("FIRST_SEED") {
            Ok(s) => match s.parse() {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("error: FIRST_SEED={s:?}: {e}");
                    std::process::exit(2);
                }
            },
            Err(_) => 42,
        },
        tune_ratio: 1.3,
        streams: match std::env::var("STREAMS") {
            Ok(s) => match s.parse() {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("error: STREAMS: {e}");
                    std::process::exit(2);
                }
            },
            Err(_) => Default::default(),
        },
    };
    match run_paper(&opts) {
        Ok(r) => print!("{r}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
