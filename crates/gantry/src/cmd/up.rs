use anyhow::Context;
use gantry_sim::{ControlPlane, ControlPlaneOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Keep the cluster state (SQLite), certificates and token in this directory;
    /// without it everything lives in memory and is gone on exit.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Port on 127.0.0.1 to serve the Kubernetes API on (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Where to write the kubeconfig for kubectl and clients.
    #[arg(long, default_value = "gantry.kubeconfig")]
    kubeconfig: PathBuf,
    /// Simulated nodes, e.g. `4xH100-80GB:8,2xA100-80GB:8,1xL4:1,2xcpu` (COUNT x MODEL : GPUs).
    #[arg(long)]
    nodes: Option<String>,
    /// Topology labels for the nodes, outermost level first, as nodes per domain: `zone=8,rack=2`
    /// puts the nodes (in `--nodes` order) 8 to a zone, 2 to a rack (a KAI `Topology` names
    /// `topology.kubernetes.io/zone` and `topology.gantry.dev/rack`).
    #[arg(long, requires = "nodes")]
    topology: Option<String>,
    /// The control plane and nodes only, for `helm install` of Gantry's chart: no in-process
    /// operator or scheduler, and none of the objects they would create (namespaces, default
    /// queues). The chart's operator and scheduler pods then run in-process as their
    /// ServiceAccounts (docs/install.md).
    #[arg(long)]
    bare: bool,
    /// Do not run the scheduler (`gantry scheduler`) in-process.
    #[arg(long)]
    no_scheduler: bool,
    /// Do not run the operator (`gantry operator`) in-process.
    #[arg(long)]
    no_operator: bool,
    /// The image the operator's operand DaemonSets run.
    #[arg(long, env = "GANTRY_IMAGE", default_value = gantry_operator::run::DEFAULT_IMAGE)]
    image: String,
    /// Port of the read-only web view on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    ui_port: u16,
    /// Do not serve the web view.
    #[arg(long)]
    no_ui: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Bad input fails before anything starts (and before anything says "serving").
    if let Some(spec) = &args.nodes {
        gantry_sim::nodes::plan(spec).with_context(|| format!("--nodes {spec:?}"))?;
    }
    if let Some(t) = &args.topology {
        gantry_sim::node_topology::parse(t).with_context(|| format!("--topology {t:?}"))?;
    }
    // Without a data dir the sim lives in a temporary directory (`serve` says which): a Ctrl-C
    // during the start drops the start while node tasks it spawned may still write there, so
    // what is left is removed once the runtime has stopped them all.
    let mut leftover = None;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let out = rt.block_on(serve(&args, &mut leftover));
    rt.shutdown_timeout(std::time::Duration::from_secs(10));
    if let Some(dir) = leftover.filter(|d: &PathBuf| d.exists()) {
        let _ = std::fs::remove_dir_all(dir);
    }
    out
}

async fn serve(args: &Args, temp_path: &mut Option<PathBuf>) -> anyhow::Result<ExitCode> {
    {
        // Ctrl-C (or SIGTERM) while starting stops the start and cleans up what it made (the
        // sim's temporary directory), as it does once serving.
        let mut signal = std::pin::pin!(gantry_runtime::shutdown::signal());
        let opts = ControlPlaneOptions {
            data_dir: args.data_dir.clone(),
            port: args.port,
            kubeconfig: Some(args.kubeconfig.clone()),
            ..Default::default()
        };
        // `biased`, signal first: its first poll installs the handlers, and must come before
        // the start's, which can run a while before it first waits (a Ctrl-C before the
        // handlers exist would kill the process and leave the sim's directory behind).
        let cp = tokio::select! {
            biased;
            () = &mut signal => return Ok(interrupted()),
            cp = ControlPlane::start(opts) => cp.context("starting the control plane")?,
        };
        println!("gantry control plane serving at {}", cp.base_url());
        println!("kubeconfig: {}", cp.kubeconfig_path().display());
        match &args.data_dir {
            Some(d) => println!("state: {} (SQLite)", d.display()),
            None => println!("state: in memory (use --data-dir to keep it)"),
        }
        println!(
            "try: KUBECONFIG={} kubectl get namespaces",
            cp.kubeconfig_path().display()
        );
        let sim = match &args.nodes {
            Some(spec) => {
                // Deployments' pods need kube-scheduler's part; pods of Gantry's image (the
                // chart's) run their component in-process.
                let temp = match &args.data_dir {
                    Some(_) => None,
                    None => Some(gantry_sim::cluster::temp_dir()?),
                };
                *temp_path = temp.as_ref().map(|t| t.path().to_path_buf());
                let opts = gantry_sim::cluster::UpOptions {
                    default_scheduler: true,
                    components: super::in_process::runners(),
                    topology: args.topology.clone(),
                    temp,
                };
                let start = gantry_sim::cluster::up_with(&cp, args.data_dir.as_deref(), spec, opts);
                let up = tokio::select! {
                    biased;
                    () = &mut signal => return Ok(interrupted()),
                    up = start => up.context("starting the simulated nodes")?,
                };
                let target = match &args.data_dir {
                    Some(d) => format!("--data-dir {}", d.display()),
                    None => format!("--sim-dir {}", up.cluster.root().display()),
                };
                println!(
                    "simulated nodes: {} (faults: gantry sim fault NODE {target} ...)",
                    up.cluster.nodes().count(),
                );
                Some(up)
            }
            None => None,
        };
        let ui = if args.no_ui {
            None
        } else {
            let nodes = sim
                .as_ref()
                .map(|u| u.cluster.nodes().cloned().collect())
                .unwrap_or_default();
            let (collector, task) = gantry_sim::ui::Collector::start(
                cp.client().context("client for the web view")?,
                nodes,
                std::time::Duration::from_secs(1),
            );
            let server = gantry_sim::ui::serve(collector, args.ui_port)
                .await
                .with_context(|| format!("serving the web view on 127.0.0.1:{}", args.ui_port))?;
            println!("web view: {} (read-only, loopback only)", server.url());
            Some((server, task))
        };
        let (stop_scheduler, scheduler_stop) = tokio::sync::watch::channel(false);
        if args.bare {
            println!(
                "bare: no in-process operator or scheduler (install them: helm install gantry deploy/helm/gantry -n gantry --create-namespace)"
            );
        }
        let mut admission = None;
        let scheduler = if args.no_scheduler || args.bare {
            None
        } else {
            let opts = gantry_scheduler::k8s::Options {
                leader_elect: false,
                ..Default::default()
            };
            let client = gantry_scheduler::k8s::client(Some(cp.kubeconfig_path()))
                .await
                .context("building the scheduler's client")?;
            println!("scheduler: {} (in-process)", opts.scheduler_name);
            // Its GPU-sharing webhook, as the chart deploys it: fractional pods get their
            // share's environment (the same startup as `gantry demo`'s).
            let hook = gantry_demo::components::admission(
                cp.client().context("client for the admission webhook")?,
                &opts.scheduler_name,
            )
            .await
            .map_err(anyhow::Error::msg)?;
            println!(
                "admission webhook: https://{} (in-process; fractional pods get their GPU share)",
                hook.address
            );
            admission = Some(hook);
            Some(tokio::spawn(async move {
                if let Err(e) = gantry_scheduler::k8s::run(client, opts, scheduler_stop).await {
                    eprintln!("scheduler stopped: {e}");
                }
            }))
        };
        let (stop_operator, operator_stop) = tokio::sync::oneshot::channel::<()>();
        let operator = if args.no_operator || args.bare {
            None
        } else {
            let client = gantry_operator::run::client(Some(cp.kubeconfig_path()))
                .await
                .context("building the operator's client")?;
            let mut opts = gantry_operator::run::RunOptions::new(
                gantry_operator::run::DEFAULT_NAMESPACE,
                &args.image,
            );
            opts.leader_elect = false;
            println!(
                "operator: in-process, namespace {} (apply a ClusterPolicy to deploy the GPU stack)",
                opts.namespace
            );
            Some(tokio::spawn(async move {
                let stop = async move {
                    let _ = operator_stop.await;
                };
                if let Err(e) = gantry_operator::run::run(client, opts, stop).await {
                    eprintln!("operator stopped: {e}");
                }
            }))
        };
        signal.await;
        println!("stopping");
        let _ = stop_operator.send(());
        if let Some(o) = operator {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), o).await;
        }
        if let Some(hook) = admission {
            hook.stop().await;
        }
        let _ = stop_scheduler.send(true);
        if let Some(s) = scheduler {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s).await;
        }
        // Every client before the API server, so no watch sees it go away: a quiet stop.
        if let Some((server, task)) = ui {
            task.abort();
            let _ = task.await;
            drop(server);
        }
        if let Some(up) = sim {
            up.stop().await;
        }
        cp.shutdown().await;
        Ok(ExitCode::SUCCESS)
    }
}

/// A signal during the start: what was started is dropped (and cleaned up) on return.
fn interrupted() -> ExitCode {
    eprintln!("interrupted while starting; stopped");
    ExitCode::from(130)
}
