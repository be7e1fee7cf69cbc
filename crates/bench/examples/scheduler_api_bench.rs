//! The `gantry bench scheduler-api` measurement without the `gantry` binary: an in-memory
//! control plane here, the scheduler as a child process (this example re-run with
//! `--scheduler KUBECONFIG`), so the RSS measured is the scheduler's own.
//!
//! `cargo run --release -p gantry-bench --example scheduler_api_bench -- [NODES [PODS]]`

use gantry_bench::scheduler_api as bench;
use gantry_scheduler::k8s;
use std::time::Duration;

type Res = Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
async fn main() -> Res {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--scheduler") {
        let kc = args.get(2).ok_or("--scheduler KUBECONFIG")?;
        let client = k8s::client(Some(std::path::Path::new(kc))).await?;
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let opts = k8s::Options {
            leader_elect: false,
            ..Default::default()
        };
        k8s::run(client, opts, rx).await?;
        return Ok(());
    }
    let nodes = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(1000);
    let pods = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir()?;
    let cp = gantry_sim::ControlPlane::start(gantry_sim::ControlPlaneOptions {
        port: 0,
        kubeconfig: Some(dir.path().join("kubeconfig")),
        ..Default::default()
    })
    .await?;
    let client = cp.client()?;
    let o = bench::ApiBenchOptions {
        nodes,
        gpus_per_node: 8,
        pods,
        namespace: "bench".into(),
        concurrency: 64,
    };
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("--scheduler").arg(cp.kubeconfig_path());
    let r = bench::drive(&client, &o, cmd, Duration::from_secs(600)).await?;
    print!("{}", bench::table(&o, &r));
    Ok(())
}
