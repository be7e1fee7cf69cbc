//! `gantry bench operator`: an in-memory control plane with simulated GPU nodes in this
//! process, the operator as a child process (`gantry operator`), so its RSS is its own.

mod steps;

pub use steps::{BenchError, DEFAULT_POLICY, Progress, create_policy, install_crds, wait_ready};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

/// What to run.
#[derive(Clone, Debug)]
pub struct OperatorBench {
    /// Simulated GPU nodes.
    pub nodes: u32,
    /// GPU model and count per node (`MODEL:GPUS`).
    pub gpu: String,
    /// The ClusterPolicy's YAML.
    pub policy: String,
    /// The `gantry` binary to run as `gantry operator`.
    pub exe: PathBuf,
    pub timeout: Duration,
}

/// Run it; the table is printed by the caller. The error, when the run did not complete,
/// carries the memory figures seen so far.
pub fn run<'a>(b: &'a OperatorBench) -> futures::future::BoxFuture<'a, anyhow::Result<String>> {
    Box::pin(run_inner(b))
}

async fn run_inner(b: &OperatorBench) -> anyhow::Result<String> {
    let dir = crate::scratch("operator")?;
    let cp = gantry_sim::ControlPlane::start(gantry_sim::ControlPlaneOptions {
        port: 0,
        kubeconfig: Some(dir.join("kubeconfig")),
        ..Default::default()
    })
    .await
    .context("starting the control plane")?;
    let client = cp.client()?;
    install_crds(&client).await?;
    let t_setup = Instant::now();
    let spec = format!("{}x{}", b.nodes, b.gpu);
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

    let mut child = tokio::process::Command::new(&b.exe)
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
    let t0 = Instant::now();
    let name = create_policy(&client, &b.policy).await?;
    let mut peak = 0u64;
    let progress = wait_ready(&client, &name, b.nodes as usize, t0, b.timeout, || {
        peak = peak.max(crate::rss_of(pid).0.unwrap_or(0))
    })
    .await;
    let (rss, hwm) = crate::rss_of(pid);
    let cpu = (
        crate::cpu_seconds(std::process::id()),
        crate::cpu_seconds(pid),
    );
    let _ = child.start_kill();
    drop(sim);
    let _ = std::fs::remove_dir_all(&dir);
    let mib = |b: Option<u64>| {
        b.map_or("n/a".to_string(), |b| {
            format!("{:.1} MiB", b as f64 / 1048576.0)
        })
    };
    let progress = progress.map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "operator RSS at end {}, peak {} (no complete run)",
            mib(rss),
            mib(hwm.or(Some(peak)))
        ))
    })?;
    let cpu_s = |s: Option<f64>| s.map_or("n/a".to_string(), |s| format!("{s:.1} s"));
    let secs =
        |d: Option<Duration>| d.map_or("n/a".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
    let rows = [
        ("simulated GPU nodes", format!("{} ({})", b.nodes, b.gpu)),
        (
            "sim setup (not timed)",
            format!("{:.1} s", setup.as_secs_f64()),
        ),
        (
            "policy -> every node allocatable",
            secs(progress.to_allocatable),
        ),
        ("policy -> ClusterPolicy ready", secs(progress.to_ready)),
        ("allocatable GPUs", progress.allocatable_gpus.to_string()),
        ("operator RSS at end", mib(rss)),
        ("operator peak RSS (VmHWM)", mib(hwm.or(Some(peak)))),
        (
            "CPU: this process (API server, nodes, controllers)",
            cpu_s(cpu.0),
        ),
        ("CPU: operator", cpu_s(cpu.1)),
    ];
    let mut out = String::from("| metric | value |\n|---|---|\n");
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    // Where the simulated API server's time went.
    out.push_str("\n| API requests (top 12) | count |\n|---|---|\n");
    for ((verb, res, sub), n) in cp.api().requests.sorted().into_iter().take(12) {
        let res = if sub.is_empty() {
            res
        } else {
            format!("{res}/{sub}")
        };
        out.push_str(&format!("| {verb} {res} | {n} |\n"));
    }
    Ok(out)
}
