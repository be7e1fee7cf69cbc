//! `gantry operator`: the ClusterPolicy operator against a cluster.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use gantry_operator::run::{self, RunOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Namespace of the operand objects and the Lease (created if missing).
    #[arg(long, env = "OPERATOR_NAMESPACE", default_value = run::DEFAULT_NAMESPACE)]
    namespace: String,
    /// The image the operand DaemonSets run (`gantry node …`).
    #[arg(long, env = "GANTRY_IMAGE", default_value = run::DEFAULT_IMAGE)]
    image: String,
    /// Serves /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_address: SocketAddr,
    /// Take the Lease `gantry-operator` before reconciling (`--leader-elect=false` to skip).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_elect: bool,
    /// Kubeconfig; without it: in-cluster config, else KUBECONFIG / ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// The run options `args` stand for (also used by the sim's in-process runner).
pub fn options(args: &Args) -> RunOptions {
    let mut opts = RunOptions::new(&args.namespace, &args.image);
    opts.metrics_address = Some(args.metrics_address);
    opts.leader_elect = args.leader_elect;
    opts
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::purge_freed_memory_promptly();
    // One reconcile at a time and a few watch streams: two workers are plenty, and a worker
    // per core on a big node only adds allocator arenas (resident memory) and idle threads.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let client = run::client(args.kubeconfig.as_deref()).await?;
        run::run(client, options(&args), gantry_runtime::shutdown::signal())
            .await
            .context("operator")?;
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Simulated GPU nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: u32,
    /// GPU model and count per node, as in `gantry up --nodes` (`MODEL:GPUS`).
    #[arg(long, default_value = "L4:1")]
    gpu: String,
    /// ClusterPolicy YAML to apply (default: upstream's defaults).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Run a second `gantry up` beside the bench, busy with a stream of short GPU pods through
    /// its scheduler (a shared machine). Its nodes, as `gantry up --nodes`.
    #[arg(long, num_args = 0..=1, default_missing_value = "100xH100-80GB:8")]
    beside_up: Option<String>,
    /// Pods per second the second `gantry up` gets (with --beside-up).
    #[arg(long, default_value_t = 10)]
    beside_pods_per_sec: u32,
    /// Print a progress line to stderr every this many seconds (0: none).
    #[arg(long, default_value_t = 10)]
    progress: u64,
    /// Run the simulated kubelets in this many child processes (`gantry sim kubelets`); 0
    /// runs them in the bench process. A node with every operand holds ~8 file descriptors,
    /// so 5,000 nodes need several processes where one may open 20,000. Default: in this
    /// process while the nodes need at most half the open-file limit, else enough processes
    /// that none needs more.
    #[arg(long)]
    kubelet_processes: Option<usize>,
    /// Once ready, keep the cluster running this many seconds and report its CPU and API
    /// requests at rest (the agents' and kubelets' periodic work); 0: stop at ready.
    #[arg(long, default_value_t = 0)]
    at_rest: u64,
}

/// `gantry bench operator` (the harness is `gantry_bench::operator`).
pub fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let policy = match &args.policy {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => gantry_bench::operator::DEFAULT_POLICY.to_string(),
    };
    let b = gantry_bench::operator::OperatorBench {
        nodes: args.nodes,
        gpu: args.gpu,
        policy,
        exe: std::env::current_exe().context("locating the gantry binary")?,
        timeout: std::time::Duration::from_secs(args.timeout),
        beside_up: args
            .beside_up
            .map(|nodes| gantry_bench::operator::BesideUp {
                nodes,
                pods_per_sec: args.beside_pods_per_sec,
                ..Default::default()
            }),
        progress: (args.progress > 0).then(|| std::time::Duration::from_secs(args.progress)),
        kubelet_processes: gantry_bench::nodes::KubeletProcesses::of_this_binary(
            args.kubelet_processes.unwrap_or_else(|| {
                gantry_bench::nodes::processes_needed(
                    args.nodes as usize,
                    gantry_sim::serve::open_file_limit(),
                )
            }),
        )?,
        at_rest: (args.at_rest > 0).then(|| std::time::Duration::from_secs(args.at_rest)),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    print!("{}", rt.block_on(gantry_bench::operator::run(&b))?);
    Ok(ExitCode::SUCCESS)
}
