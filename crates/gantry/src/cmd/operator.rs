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
        run::run(client, options(&args), shutdown_signal())
            .await
            .context("operator")?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
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
}

/// `gantry bench operator`: an in-memory control plane with simulated GPU nodes in this
/// process, the operator as a child process (`gantry operator`), so its RSS is its own.
pub fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    use gantry_operator::bench;
    let policy = match &args.policy {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => bench::DEFAULT_POLICY.to_string(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let dir =
            std::env::temp_dir().join(format!("gantry-bench-operator-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let cp = gantry_sim::ControlPlane::start(gantry_sim::ControlPlaneOptions {
            port: 0,
            kubeconfig: Some(dir.join("kubeconfig")),
            ..Default::default()
        })
        .await
        .context("starting the control plane")?;
        let client = cp.client()?;
        bench::install_crds(&client).await?;
        let t_setup = std::time::Instant::now();
        let spec = format!("{}x{}", args.nodes, args.gpu);
        let sim = gantry_sim::cluster::start(
            client.clone(),
            &dir.join("nodes"),
            gantry_sim::nodes::plan(&spec)?,
            gantry_sim::kubelet::runners::default_registry(),
        )
        .await
        .context("starting the simulated nodes")?;
        let _controllers = gantry_sim::controllers::start(client.clone());
        let setup = t_setup.elapsed();

        let exe = std::env::current_exe().context("locating the gantry binary")?;
        let mut child = tokio::process::Command::new(exe)
            .args([
                "operator",
                "--leader-elect=false",
                "--metrics-address",
                "127.0.0.1:0",
            ])
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .kill_on_drop(true)
            .spawn()
            .context("starting `gantry operator`")?;
        let pid = child.id().unwrap_or(0);
        let t0 = std::time::Instant::now();
        let name = bench::create_policy(&client, &policy).await?;
        let mut peak = 0u64;
        let progress = bench::wait_ready(
            &client,
            &name,
            args.nodes as usize,
            t0,
            std::time::Duration::from_secs(args.timeout),
            || peak = peak.max(bench::rss_of(pid).0.unwrap_or(0)),
        )
        .await;
        let (rss, hwm) = bench::rss_of(pid);
        let _ = child.start_kill();
        drop(sim);
        let _ = std::fs::remove_dir_all(&dir);
        let mib = |b: Option<u64>| {
            b.map_or("n/a".to_string(), |b| {
                format!("{:.1} MiB", b as f64 / 1048576.0)
            })
        };
        let progress = match progress {
            Ok(p) => p,
            Err(e) => {
                println!(
                    "operator RSS at end {}, peak {} (no complete run: see the error)",
                    mib(rss),
                    mib(hwm.or(Some(peak)))
                );
                return Err(e.into());
            }
        };
        let secs = |d: Option<std::time::Duration>| {
            d.map_or("n/a".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
        };
        println!("| metric | value |");
        println!("|---|---|");
        println!("| simulated GPU nodes | {} ({}) |", args.nodes, args.gpu);
        println!("| sim setup (not timed) | {:.1} s |", setup.as_secs_f64());
        println!(
            "| policy -> every node allocatable | {} |",
            secs(progress.to_allocatable)
        );
        println!(
            "| policy -> ClusterPolicy ready | {} |",
            secs(progress.to_ready)
        );
        println!("| allocatable GPUs | {} |", progress.allocatable_gpus);
        println!("| operator RSS at end | {} |", mib(rss));
        println!(
            "| operator peak RSS (VmHWM) | {} |",
            mib(hwm.or(Some(peak)))
        );
        Ok(ExitCode::SUCCESS)
    })
}
