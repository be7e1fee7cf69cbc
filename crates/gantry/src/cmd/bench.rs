//! `gantry bench <what>`: speed and memory benchmarks that print a table.

use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Bring up simulated nodes (kubelets + device plugins through a DaemonSet) and time how
    /// long until all are Ready and all GPUs allocatable; report memory.
    Nodes(NodesArgs),
    /// Allocate and GetPreferredAllocation latency (p50/p99) of the device plugin over gRPC,
    /// on 8 whole GPUs and on 1,000 time-sliced replicas.
    DevicePlugin(DevicePluginBenchArgs),
    /// Embedded API server throughput: creates/s, updates/s and watch events/s delivered to
    /// many watchers, over HTTPS with kube-rs clients, in memory and on SQLite.
    Apiserver(ApiserverBenchArgs),
    /// Scheduler core: placements/s and cycle time of one full cycle, and GPU left unusable
    /// under arrival replay, for Gantry's placement policies and baselines (random fit, best
    /// fit, plain bin-pack), on a synthetic cluster or a two-CSV trace.
    Schedule(ScheduleBenchArgs),
    /// Scheduler through the API: pending one-GPU pods on simulated 8-GPU nodes, a
    /// `gantry scheduler` child process binds them; binds/s and the scheduler's RSS.
    SchedulerApi(super::scheduler::BenchArgs),
    /// The operator from bare simulated GPU nodes to every node allocatable and the
    /// ClusterPolicy ready; time and the operator's RSS (`gantry operator` child process).
    Operator(super::operator::BenchArgs),
    /// The embedded API server's write path in process (no HTTP, no watchers): CPU per write
    /// of a simulated GPU node's bring-up (Node, Lease, operand pods and their status patches).
    Writes(WritesBenchArgs),
}

#[derive(clap::Args)]
pub struct WritesBenchArgs {
    /// Simulated nodes whose writes are made.
    #[arg(long, default_value_t = 500)]
    nodes: usize,
    /// Threads writing at once, each its share of the nodes.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

#[derive(clap::Args)]
pub struct ScheduleBenchArgs {
    /// Synthetic cluster: number of GPU nodes.
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Pending pods drawn from --mix (gang pods count one each).
    #[arg(long, default_value_t = 20_000)]
    pending: usize,
    /// Pods already running (bound) before the cycle.
    #[arg(long, default_value_t = 0)]
    running: usize,
    /// Pending workload mix in percent of jobs: whole-GPU, fractional, gang.
    #[arg(long, default_value = "whole:40,fraction:40,gang:20")]
    mix: gantry_bench::workload::synth::MixSpec,
    /// Leaf queues (two per parent), each with an equal GPU quota.
    #[arg(long, default_value_t = 4)]
    queues: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Trace replay instead of a synthetic cluster: nodes CSV as published (sn or name,
    /// cpu_milli, memory_mib, gpu, model).
    #[arg(long, requires = "trace_pods")]
    trace_nodes: Option<std::path::PathBuf>,
    /// Trace pods CSV as published (name, cpu_milli, memory_mib, num_gpu, gpu_milli, and
    /// optionally gpu_spec, qos, pod_phase, creation_time, ...). `--protocol paper` takes
    /// several, comma-separated; trace order takes one.
    #[arg(long, requires = "trace_nodes", value_delimiter = ',')]
    trace_pods: Vec<std::path::PathBuf>,
    /// `trace`: pods arrive in creation order through the scheduler core (policies from
    /// --policies). `paper`: the FGD paper's protocol (all pods, no departures, tuned to
    /// --tune-ratio of GPU capacity, shuffled per seed) for --share-policies.
    #[arg(long, default_value = "trace")]
    protocol: Protocol,
    /// Paper protocol: number of seeds, from --first-seed.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    #[arg(long, default_value_t = 42)]
    first_seed: u64,
    #[arg(long, default_value_t = 1.3)]
    tune_ratio: f64,
    /// Paper protocol: GPU-sharing policies to compare, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "Random,DotProd,GpuClustering,GpuPacking,BestFit,FirstFit,FGD,Gantry"
    )]
    share_policies: Vec<gantry_scheduler::gpushare::SharePolicy>,
    /// Paper protocol: the paper's result table (fgd-paper-results.md), printed alongside.
    #[arg(long)]
    paper_results: Option<std::path::PathBuf>,
    /// Paper protocol: `go` draws each seed's shuffle, samples and node order from Go's
    /// math/rand as the authors' simulator does (seeds 42-51 are then the paper's own);
    /// `chacha8` from independent ChaCha8 streams.
    #[arg(long, default_value = "go")]
    streams: gantry_bench::replay::Streams,
    /// Paper protocol: what FGD and Gantry know of the workload, comma-separated, a row
    /// each: `oracle` the whole trace's mix in advance (the paper's setting), `online` the
    /// mix of the pods that have arrived, as the scheduler sees them each cycle.
    #[arg(long, value_delimiter = ',', default_value = "oracle")]
    share_mix: Vec<gantry_bench::replay::MixMode>,
    /// Policies to compare, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kai,fragmentation-aware,random-fit,best-fit,first-fit"
    )]
    policies: Vec<gantry_scheduler::Policy>,
    /// Skip the arrival replay (fragmentation columns).
    #[arg(long)]
    skip_replay: bool,
    /// Skip the full cycle (throughput columns).
    #[arg(long)]
    skip_cycle: bool,
    /// Topology-constrained cycle: nodes labelled into levels, outermost first, as nodes per
    /// domain (`zone=64,rack=8`); gangs require the innermost level, single pods prefer it.
    #[arg(long)]
    topology: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Protocol {
    Trace,
    Paper,
}

#[derive(clap::Args)]
pub struct ApiserverBenchArgs {
    /// Objects created (then updated) per store.
    #[arg(long, default_value_t = 20_000)]
    objects: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Concurrent watchers in the watch phase.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Writes every watcher must observe in the watch phase.
    #[arg(long, default_value_t = 2_000)]
    watch_writes: usize,
}

#[derive(clap::Args)]
pub struct DevicePluginBenchArgs {
    /// Measured calls per RPC and configuration.
    #[arg(long, default_value_t = 5000)]
    calls: usize,
}

#[derive(clap::Args)]
pub struct NodesArgs {
    /// Node spec, e.g. `1000xH100-80GB:8` or `4xH100-80GB:8,2xcpu`.
    #[arg(long, default_value = "1000xH100-80GB:8")]
    nodes: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Keep the API server's state in SQLite in this directory (a new or empty one) instead of
    /// in memory.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Print where the run stands every this many seconds (0: only the result).
    #[arg(long, default_value_t = 5)]
    progress: u64,
    /// Run the simulated kubelets in this many child processes (`gantry sim kubelets`), each
    /// with a share of the nodes; 0 runs them in this process. Every node holds five file
    /// descriptors, so past ~3,500 nodes one process reaches a 20,000 limit.
    #[arg(long, default_value_t = 0)]
    kubelet_processes: usize,
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(
        || "not reached".to_string(),
        |d| format!("{:.1} s", d.as_secs_f64()),
    )
}

fn mib(b: Option<u64>) -> String {
    b.map_or_else(
        || "n/a".to_string(),
        |b| format!("{} MiB", b / (1024 * 1024)),
    )
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::DevicePlugin(args) => device_plugin(args),
        BenchCommand::Apiserver(args) => apiserver(args),
        BenchCommand::Schedule(args) => schedule(args),
        BenchCommand::SchedulerApi(args) => super::scheduler::bench(args),
        BenchCommand::Operator(args) => super::operator::bench(args),
        BenchCommand::Writes(args) => writes(args),
        BenchCommand::Nodes(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            use gantry_bench::nodes::{NodesBenchOpts, nodes_bench};
            let opts = NodesBenchOpts {
                spec: args.nodes.clone(),
                timeout: Duration::from_secs(args.timeout),
                data_dir: args.data_dir.clone(),
                progress: (args.progress > 0).then(|| Duration::from_secs(args.progress)),
                kubelet_processes: gantry_bench::nodes::KubeletProcesses::of_this_binary(
                    args.kubelet_processes,
                )?,
            };
            let r = rt.block_on(nodes_bench(&opts))?;
            println!("{:<28} {}", "spec", args.nodes);
            let store = args.data_dir.as_ref().map_or_else(
                || "memory".to_string(),
                |d| format!("sqlite in {}", d.display()),
            );
            println!("{:<28} {store}", "store");
            println!("{:<28} {}/{}", "ready nodes", r.ready_nodes, r.nodes);
            println!(
                "{:<28} {}/{}",
                "allocatable GPUs", r.allocatable_gpus, r.gpus
            );
            println!("{:<28} {}", "time to all nodes Ready", secs(r.to_ready));
            println!("{:<28} {}", "time to all GPUs allocatable", secs(r.to_gpus));
            println!("{:<28} {}", "RSS at end", mib(r.rss_bytes));
            println!("{:<28} {}", "peak RSS", mib(r.peak_rss_bytes));
            let cpu = r.cpu_seconds.map_or("n/a".into(), |c| format!("{c:.1} s"));
            println!("{:<28} {cpu}", "CPU time (user + system)");
            println!("{:<28} {}", "peak open fds", r.peak_fds);
            let load = r.load_average.as_deref().unwrap_or("n/a");
            println!("{:<28} {load}", "load average at end");
            let ok = r.to_ready.is_some() && r.to_gpus.is_some();
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn writes(args: WritesBenchArgs) -> anyhow::Result<ExitCode> {
    let rows = gantry_bench::writes::run(args.nodes.max(1), args.threads)?;
    println!(
        "{} nodes' writes, in process, {} thread(s) at once",
        args.nodes.max(1),
        args.threads.clamp(1, args.nodes.max(1))
    );
    println!(
        "{:<20} {:>8} {:>12} {:>22}",
        "write", "count", "CPU µs each", "stored bytes (last)"
    );
    for r in rows {
        println!(
            "{:<20} {:>8} {:>12.1} {:>22}",
            r.write, r.count, r.cpu_us, r.stored_bytes
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn device_plugin(args: DevicePluginBenchArgs) -> anyhow::Result<ExitCode> {
    use gantry_bench::device_plugin as bench;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let rows = rt.block_on(bench::run_bench(&bench::default_cases(), args.calls.max(1)))?;
    println!(
        "{:<16} {:<24} {:>7} {:>10} {:>10} {:>10}",
        "config", "rpc", "calls", "p50 µs", "p99 µs", "max µs"
    );
    for r in rows {
        println!(
            "{:<16} {:<24} {:>7} {:>10.1} {:>10.1} {:>10.1}",
            r.case, r.rpc, r.calls, r.p50_us, r.p99_us, r.max_us
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn apiserver(args: ApiserverBenchArgs) -> anyhow::Result<ExitCode> {
    use gantry_bench::apiserver as bench;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let opts = bench::BenchOpts {
        objects: args.objects.max(1),
        concurrency: args.concurrency.max(1),
        watchers: args.watchers,
        watch_writes: args.watch_writes,
    };
    let rows = rt.block_on(bench::run(&opts))?;
    println!(
        "{} objects, {} in flight, {} watchers x {} writes",
        opts.objects, opts.concurrency, opts.watchers, opts.watch_writes
    );
    println!(
        "{:<8} {:>12} {:>12} {:>16} {:>14} {:>18}",
        "store", "creates/s", "updates/s", "watch events/s", "pod status/s", "CPU µs per status"
    );
    for r in rows {
        println!(
            "{:<8} {:>12.0} {:>12.0} {:>16.0} {:>14.0} {:>18.0}",
            r.store,
            r.creates_per_s,
            r.updates_per_s,
            r.watch_events_per_s,
            r.pod_status_per_s,
            r.pod_status_cpu_us
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn schedule(args: ScheduleBenchArgs) -> anyhow::Result<ExitCode> {
    use gantry_bench::schedule::{BenchOptions, SynthSpec, Workload, run};
    if args.protocol == Protocol::Paper {
        let Some(nodes) = args.trace_nodes else {
            anyhow::bail!("--protocol paper needs --trace-nodes and --trace-pods");
        };
        let opts = gantry_bench::schedule::paper::PaperOptions {
            nodes,
            pods: args.trace_pods,
            policies: args.share_policies,
            first_seed: args.first_seed,
            seeds: args.seeds.max(1),
            tune_ratio: args.tune_ratio,
            paper_results: args.paper_results,
            streams: args.streams,
            mixes: args.share_mix,
        };
        print!("{}", gantry_bench::schedule::paper::run_paper(&opts)?);
        return Ok(ExitCode::SUCCESS);
    }
    if args.trace_pods.len() > 1 {
        anyhow::bail!(
            "--protocol trace replays one pods file; got {}",
            args.trace_pods.len()
        );
    }
    let workload = match (args.trace_nodes, args.trace_pods.into_iter().next()) {
        (Some(nodes), Some(pods)) => Workload::Trace { nodes, pods },
        _ => Workload::Synthetic(SynthSpec {
            nodes: args.nodes.max(1),
            gpus_per_node: args.gpus_per_node,
            pending: args.pending,
            running: args.running,
            mix: args.mix,
            queues: args.queues.max(1),
            seed: args.seed,
        }),
    };
    let opts = BenchOptions {
        workload,
        policies: args.policies,
        seed: args.seed,
        skip_replay: args.skip_replay,
        skip_cycle: args.skip_cycle,
        topology: args.topology,
    };
    print!("{}", run(&opts)?);
    Ok(ExitCode::SUCCESS)
}
