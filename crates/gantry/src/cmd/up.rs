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
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let opts = ControlPlaneOptions {
            data_dir: args.data_dir.clone(),
            port: args.port,
            kubeconfig: Some(args.kubeconfig.clone()),
            ..Default::default()
        };
        let cp = ControlPlane::start(opts)
            .await
            .context("starting the control plane")?;
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
        let _sim = match &args.nodes {
            Some(spec) => {
                let up = gantry_sim::cluster::up(&cp, args.data_dir.as_deref(), spec)
                    .await
                    .context("starting the simulated nodes")?;
                println!(
                    "simulated nodes: {} (faults: gantry sim fault NODE ..., control socket {})",
                    up.cluster.nodes().count(),
                    up.cluster.control_socket().display()
                );
                Some(up)
            }
            None => None,
        };
        wait_for_signal().await?;
        println!("stopping");
        cp.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
