//! `gantry scheduler`: the KAI-compatible batch scheduler against a cluster.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Pods with this `spec.schedulerName` are scheduled.
    #[arg(long, default_value = gantry_api::names::DEFAULT_SCHEDULER_NAME)]
    scheduler_name: String,
    /// Namespace of the GPU reservation pods that hold shared GPUs.
    #[arg(long, default_value = gantry_api::names::DEFAULT_RESERVATION_NAMESPACE)]
    reservation_namespace: String,
    /// Image of the reservation pods (KAI's resource-reservation image reports the GPU UUID).
    #[arg(long, env = "RESERVATION_IMAGE")]
    reservation_image: Option<String>,
    /// ServiceAccount of the reservation pods (KAI's reservation image annotates its own pod
    /// with its GPU, so it needs pods get/patch in the reservation namespace; the chart
    /// creates one). Empty: the namespace's `default`.
    #[arg(long, default_value = "")]
    reservation_service_account: String,
    /// Serves /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8081")]
    metrics_address: SocketAddr,
    /// Take the Lease `gantry-scheduler` before scheduling (`--leader-elect=false` to skip).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "gantry")]
    namespace: String,
    /// Kubeconfig; without it: in-cluster config, else KUBECONFIG / ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// API writes in flight at once, for binds and for the pod grouper each.
    #[arg(long, default_value_t = 64)]
    api_concurrency: usize,
    /// Create the Queue and PodGroup CRDs when missing (`=false` where an installer owns them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    install_crds: bool,
    /// Create the Lease's and the reservation pods' namespaces when missing (`=false` where an
    /// installer owns them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    create_namespaces: bool,
    /// Where pods go: `auto` (Gantry's fragmentation-aware GPU-sharing policy once the cluster
    /// runs pods that ask for GPU shares, else KAI's bin-pack), `kai`, or
    /// `fragmentation-aware` (docs/configuration.md).
    #[arg(long, env = "GANTRY_PLACEMENT_POLICY", default_value = "auto", value_parser = placement_policy)]
    placement_policy: gantry_scheduler::Policy,
    /// Scheduling-shard settings, KAI's `SchedulingShard.spec` keys (`kValue`, `minRuntime`,
    /// `usageDBConfig`, ...) in a YAML or JSON file (docs/configuration.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The same settings given inline as YAML or JSON (the Helm chart's `scheduler.shard`).
    #[arg(long, env = "GANTRY_SCHEDULER_CONFIG")]
    config_inline: Option<String>,
}

/// The core `Config` from `--config` / `--config-inline` (both: the inline keys win).
fn core_config(args: &Args) -> anyhow::Result<gantry_scheduler::Config> {
    let mut v = serde_json::Value::Object(Default::default());
    let mut merge = |text: &str, origin: &str| -> anyhow::Result<()> {
        let y: serde_json::Value =
            serde_yaml::from_str(text).with_context(|| format!("{origin}: not YAML or JSON"))?;
        match (y, &mut v) {
            (serde_json::Value::Object(m), serde_json::Value::Object(all)) => all.extend(m),
            (serde_json::Value::Null, _) => {}
            _ => anyhow::bail!("{origin}: must be a mapping of scheduling-shard keys"),
        }
        Ok(())
    };
    if let Some(p) = &args.config {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("reading scheduler config {}", p.display()))?;
        merge(&text, &p.display().to_string())?;
    }
    if let Some(t) = &args.config_inline {
        merge(t, "--config-inline")?;
    }
    gantry_scheduler::Config::from_shard_spec(v).map_err(anyhow::Error::msg)
}

/// The policies a running scheduler offers (the benchmark baselines are not among them).
fn placement_policy(s: &str) -> Result<gantry_scheduler::Policy, String> {
    use gantry_scheduler::Policy;
    match s.parse::<Policy>().map_err(|e| e.to_string())? {
        p @ (Policy::Auto | Policy::Kai | Policy::FragmentationAware) => Ok(p),
        _ => Err(format!(
            "placement policy {s:?} is a benchmark baseline; use auto, kai or fragmentation-aware"
        )),
    }
}

pub fn options(args: &Args) -> anyhow::Result<gantry_scheduler::k8s::Options> {
    let mut o = gantry_scheduler::k8s::Options {
        config: core_config(args)?,
        scheduler_name: args.scheduler_name.clone(),
        reservation_namespace: args.reservation_namespace.clone(),
        reservation_service_account: args.reservation_service_account.clone(),
        metrics_address: Some(args.metrics_address),
        leader_elect: args.leader_elect,
        namespace: args.namespace.clone(),
        bind_concurrency: args.api_concurrency.max(1),
        install_crds: args.install_crds,
        create_namespaces: args.create_namespaces,
        ..Default::default()
    };
    o.config.policy = args.placement_policy;
    if let Some(i) = &args.reservation_image {
        o.reservation_image = i.clone();
    }
    Ok(o)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = options(&args)?;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let client = gantry_scheduler::k8s::client(args.kubeconfig.as_deref()).await?;
        let rx = gantry_runtime::shutdown::flag(gantry_runtime::shutdown::signal());
        gantry_scheduler::k8s::run(client, opts, rx)
            .await
            .context("scheduler")?;
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(clap::Args)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Pending one-GPU pods (bare pods: the pod grouper makes a PodGroup for each).
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Passed to the scheduler's `--api-concurrency`.
    #[arg(long, default_value_t = 64)]
    api_concurrency: usize,
}

/// `gantry bench scheduler-api` (the harness is `gantry_bench::scheduler_api`).
pub fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    use gantry_bench::scheduler_api::{ApiBenchOptions, SchedulerApiBench, run};
    let b = SchedulerApiBench {
        options: ApiBenchOptions {
            nodes: args.nodes,
            gpus_per_node: args.gpus_per_node,
            pods: args.pods,
            namespace: "bench".into(),
            concurrency: 64,
        },
        exe: std::env::current_exe().context("locating the gantry binary")?,
        api_concurrency: args.api_concurrency,
        timeout: std::time::Duration::from_secs(args.timeout),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (table, ok) = rt.block_on(run(&b))?;
    print!("{table}");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
