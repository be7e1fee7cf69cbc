//! `gantry bench scheduler-api`: an in-memory control plane in this process, the scheduler as
//! a child process (`gantry scheduler`), so its RSS is its own.

mod steps;

pub use steps::{ApiBenchOptions, ApiBenchReport, BenchError, drive, setup, table, wait_bound};

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

/// What to run.
#[derive(Clone, Debug)]
pub struct SchedulerApiBench {
    pub options: ApiBenchOptions,
    /// The `gantry` binary to run as `gantry scheduler`.
    pub exe: PathBuf,
    /// Passed to the scheduler's `--api-concurrency`.
    pub api_concurrency: usize,
    pub timeout: Duration,
}

/// Run it: the table, and whether no node ended overcommitted.
pub fn run<'a>(
    b: &'a SchedulerApiBench,
) -> futures::future::BoxFuture<'a, anyhow::Result<(String, bool)>> {
    Box::pin(run_inner(b))
}

async fn run_inner(b: &SchedulerApiBench) -> anyhow::Result<(String, bool)> {
    let dir = crate::scratch("sched")?;
    let cp = gantry_sim::ControlPlane::start(gantry_sim::ControlPlaneOptions {
        port: 0,
        kubeconfig: Some(dir.join("kubeconfig")),
        ..Default::default()
    })
    .await
    .context("starting the control plane")?;
    let client = gantry_runtime::client(Some(cp.kubeconfig_path())).await?;
    let mut cmd = tokio::process::Command::new(&b.exe);
    cmd.args([
        "scheduler",
        "--leader-elect=false",
        "--metrics-address",
        "127.0.0.1:0",
    ])
    .arg("--kubeconfig")
    .arg(cp.kubeconfig_path())
    .arg(format!("--api-concurrency={}", b.api_concurrency));
    let r = drive(&client, &b.options, cmd, b.timeout).await?;
    std::fs::remove_dir_all(&dir).ok();
    Ok((table(&b.options, &r), r.overcommitted_nodes == 0))
}
