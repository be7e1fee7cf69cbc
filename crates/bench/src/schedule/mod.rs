//! `gantry bench schedule`: throughput of one full cycle and fragmentation under arrival
//! replay, for Gantry's policies and built-in baselines, on synthetic clusters or a trace.

pub mod paper;
pub mod replay;

use gantry_scheduler::config::{Config, Policy};
use gantry_scheduler::input::{ClusterInput, NodeInput, PodInput};
use gantry_scheduler::snapshot::Snapshot;
pub use gantry_scheduler::workload::synth::{self, MixSpec, SynthSpec};
use gantry_scheduler::workload::trace;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use replay::{ReplayFigures, replay, replay_input};
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub enum Workload {
    Synthetic(SynthSpec),
    /// Node and pod CSV files; the pods are the pending workload and the arrival stream.
    Trace {
        nodes: PathBuf,
        pods: PathBuf,
    },
}

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub workload: Workload,
    pub policies: Vec<Policy>,
    pub seed: u64,
    /// Skip the arrival replay (fragmentation columns).
    pub skip_replay: bool,
    /// Skip the full-cycle run (throughput columns).
    pub skip_cycle: bool,
}

#[derive(Clone, Debug)]
pub struct Row {
    pub policy: Policy,
    pub binds: usize,
    pub evictions: usize,
    pub build: Duration,
    pub cycle: Duration,
    pub replay: Option<ReplayFigures>,
}

impl Row {
    /// Binds per second of the whole cycle, snapshot build included.
    pub fn placements_per_sec(&self) -> f64 {
        self.binds as f64 / (self.build + self.cycle).as_secs_f64().max(1e-9)
    }
}

#[derive(Clone, Debug)]
pub struct Report {
    pub description: String,
    pub nodes: usize,
    pub gpus: u64,
    pub running: usize,
    pub pending: usize,
    pub rows: Vec<Row>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    #[error("trace {0}: no GPU nodes")]
    NoGpus(String),
}

pub fn policy_name(p: Policy) -> &'static str {
    match p {
        Policy::Auto => "gantry (auto)",
        Policy::Kai => "gantry (kai binpack)",
        Policy::FragmentationAware => "gantry (frag-aware)",
        Policy::RandomFit => "baseline: random fit",
        Policy::BestFit => "baseline: best fit",
        Policy::FirstFit => "baseline: plain bin-pack",
    }
}

/// Arrival stream for the replay: the trace (repeated) or fresh draws from the mix, until
/// the requested GPU passes the cluster's capacity.
fn arrivals(opts: &BenchOptions, nodes: &[NodeInput], base: &[PodInput]) -> Vec<PodInput> {
    let capacity: i64 = nodes.iter().map(|n| i64::from(n.gpus) * 1000).sum();
    // The scheduler's own reading of the request (one parser of the sharing annotations).
    let gpu_of = |p: &PodInput| -> i64 {
        use gantry_scheduler::request::{GpuRequest, parse_gpu_request};
        match parse_gpu_request(&p.extended, &p.annotations, |_| 0) {
            Ok(GpuRequest::Whole(n)) => i64::from(n) * 1000,
            Ok(GpuRequest::Fraction { milli, devices }) => i64::from(milli) * i64::from(devices),
            Ok(GpuRequest::Memory { mib, devices }) => {
                i64::try_from(mib).unwrap_or(0) * 1000 / 80_000 * i64::from(devices)
            }
            _ => 0,
        }
    };
    let mut out = Vec::new();
    let mut sum = 0i64;
    match &opts.workload {
        Workload::Trace { .. } => {
            let per_round: i64 = base.iter().map(gpu_of).sum();
            if per_round == 0 {
                return out;
            }
            'outer: for round in 0..64 {
                for p in base {
                    let mut p = p.clone();
                    p.name = format!("r{round}-{}", p.name);
                    sum += gpu_of(&p);
                    out.push(p);
                    if sum > capacity {
                        break 'outer;
                    }
                }
            }
        }
        Workload::Synthetic(spec) => {
            let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5eed);
            let mut chunk = 0;
            while sum <= capacity && chunk < 1000 {
                let mut tmp = ClusterInput::default();
                synth::add_pending(&mut tmp, 2000, spec.mix, 1, &mut rng, &format!("c{chunk}-"));
                for p in tmp.pods {
                    sum += gpu_of(&p);
                    out.push(p);
                    if sum > capacity {
                        break;
                    }
                }
                chunk += 1;
            }
        }
    }
    out
}

pub fn run(opts: &BenchOptions) -> Result<Report, BenchError> {
    let (input, description) = match &opts.workload {
        Workload::Synthetic(spec) => (
            synth::synth(spec),
            format!(
                "synthetic: {} nodes x {} GPUs, {} running, {} pending, mix whole:{},fraction:{},gang:{}, {} queues, seed {}",
                spec.nodes,
                spec.gpus_per_node,
                spec.running,
                spec.pending,
                spec.mix.whole,
                spec.mix.fraction,
                spec.mix.gang,
                spec.queues,
                opts.seed
            ),
        ),
        Workload::Trace { nodes, pods } => {
            let n = trace::read_nodes(nodes)?;
            if n.iter().all(|x| x.gpus == 0) {
                return Err(BenchError::NoGpus(nodes.display().to_string()));
            }
            let p = trace::read_pods(pods)?;
            let input = replay_input(&n, &p);
            (
                input,
                format!(
                    "trace: {} ({} nodes), {} ({} pods)",
                    nodes.display(),
                    n.len(),
                    pods.display(),
                    p.len()
                ),
            )
        }
    };
    let stream = if opts.skip_replay {
        Vec::new()
    } else {
        arrivals(opts, &input.nodes, &input.pods)
    };
    let replay_cluster = (!opts.skip_replay).then(|| replay_input(&input.nodes, &stream));
    let replay_snapshot = replay_cluster.as_ref().map(Snapshot::build);
    let mut rows = Vec::new();
    for &policy in &opts.policies {
        let cfg = Config {
            policy,
            seed: opts.seed,
            ..Config::default()
        };
        let (mut binds, mut evictions, mut build, mut cycle) =
            (0, 0, Duration::ZERO, Duration::ZERO);
        if !opts.skip_cycle {
            let t0 = Instant::now();
            let snap = Snapshot::build(&input);
            build = t0.elapsed();
            let t1 = Instant::now();
            let d = gantry_scheduler::schedule(&snap, &cfg);
            cycle = t1.elapsed();
            binds = d.binds.len();
            evictions = d.evictions.len();
        }
        let replay = replay_snapshot.as_ref().map(|s| replay(s, &cfg));
        rows.push(Row {
            policy,
            binds,
            evictions,
            build,
            cycle,
            replay,
        });
    }
    let running = input
        .pods
        .iter()
        .filter(|p| p.phase == gantry_scheduler::input::PodPhase::Running)
        .count();
    Ok(Report {
        description,
        nodes: input.nodes.len(),
        gpus: input.nodes.iter().map(|n| u64::from(n.gpus)).sum(),
        running,
        pending: input.pods.len() - running,
        rows,
    })
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.2}%", v * 100.0))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.description)?;
        writeln!(
            f,
            "cluster: {} nodes, {} GPUs, {} running pods, {} pending pods",
            self.nodes, self.gpus, self.running, self.pending
        )?;
        writeln!(
            f,
            "{:<26} {:>8} {:>10} {:>9} {:>9} {:>13} {:>12} {:>12} {:>12} {:>13}",
            "policy",
            "binds",
            "place/s",
            "build ms",
            "cycle ms",
            "alloc@1stfail",
            "unalloc@90%",
            "unalloc@95%",
            "unalloc@100%",
            "replay pods/s"
        )?;
        for r in &self.rows {
            let rp = r.replay.as_ref();
            writeln!(
                f,
                "{:<26} {:>8} {:>10.0} {:>9.1} {:>9.1} {:>13} {:>12} {:>12} {:>12} {:>13}",
                policy_name(r.policy),
                r.binds,
                r.placements_per_sec(),
                r.build.as_secs_f64() * 1e3,
                r.cycle.as_secs_f64() * 1e3,
                pct(rp.and_then(|x| x.alloc_at_first_fail)),
                pct(rp.and_then(|x| x.unalloc_at[0])),
                pct(rp.and_then(|x| x.unalloc_at[1])),
                pct(rp.and_then(|x| x.unalloc_at[2])),
                rp.map_or("-".into(), |x| format!(
                    "{:.0}",
                    x.arrived as f64 / x.elapsed.as_secs_f64().max(1e-9)
                )),
            )?;
        }
        // Headline comparison the fragmentation target is judged on.
        let at100 = |p: Policy| {
            self.rows
                .iter()
                .find(|r| r.policy == p)
                .and_then(|r| r.replay.as_ref())
                .and_then(|x| x.unalloc_at[2])
        };
        if let (Some(fa), Some(bf)) = (at100(Policy::FragmentationAware), at100(Policy::BestFit))
            && bf > 0.0
        {
            writeln!(
                f,
                "frag-aware leaves {:.1}% fewer unallocated GPUs than best fit at 100% requested",
                (1.0 - fa / bf) * 100.0
            )?;
        }
        Ok(())
    }
}
