//! `gantry bench operator`: an in-memory control plane with simulated GPU nodes in this
//! process, the operator as a child process (`gantry operator`), so its RSS is its own.

mod at_rest;
mod beside;
mod steps;

pub use beside::BesideUp;
pub use steps::{
    BenchError, DEFAULT_POLICY, Progress, create_policy, install_crds, progress, wait_ready,
};

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
    /// A second `gantry up` under load beside the bench.
    pub beside_up: Option<BesideUp>,
    /// Print a progress line to stderr this often.
    pub progress: Option<Duration>,
    /// Run the simulated kubelets in child processes (None: in this process).
    pub kubelet_processes: Option<crate::nodes::KubeletProcesses>,
    /// Once ready, keep everything running this long and report the CPU and API requests
    /// of the cluster at rest (the agents' and kubelets' periodic work).
    pub at_rest: Option<Duration>,
}

/// Memory and load seen while the bench ran.
#[derive(Default)]
struct Samples {
    /// Largest RSS of this process and the operator together.
    peak_whole: u64,
    /// Largest RSS together with the simulated nodes' files where they are on tmpfs (memory
    /// too), and those files' bytes then.
    peak_with_files: u64,
    files_at_peak: u64,
    /// Largest 1-minute load average.
    peak_load: f64,
}

fn load_average() -> Option<(f64, String)> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let three: Vec<&str> = s.split_whitespace().take(3).collect();
    Some((three.first()?.parse().ok()?, three.join(" ")))
}

fn mib(b: Option<u64>) -> String {
    b.map_or("n/a".to_string(), |b| {
        format!("{:.1} MiB", b as f64 / 1048576.0)
    })
}

/// Run it; the table is printed by the caller. The error, when the run did not complete,
/// carries the memory figures seen so far.
pub fn run<'a>(b: &'a OperatorBench) -> futures::future::BoxFuture<'a, anyhow::Result<String>> {
    Box::pin(run_inner(b))
}

async fn run_inner(b: &OperatorBench) -> anyhow::Result<String> {
    let dir = crate::scratch("operator")?;
    let tmpfs_base = crate::tmpfs_used(&dir);
    let me = std::process::id();
    let load_at_start = load_average().map(|l| l.1).unwrap_or_default();
    let beside = match &b.beside_up {
        Some(up) => Some(
            beside::start(&b.exe, &dir, up, &b.policy)
                .await
                .context("--beside-up")?,
        ),
        None => None,
    };
    let cp = gantry_sim::ControlPlane::start(gantry_sim::ControlPlaneOptions {
        port: 0,
        kubeconfig: Some(dir.join("kubeconfig")),
        ..Default::default()
    })
    .await
    .context("starting the control plane")?;
    let client = cp.client()?;
    install_crds(&client).await?;
    let rss_before_nodes = crate::rss_of(me).0.unwrap_or(0);
    let t_setup = Instant::now();
    let spec = format!("{}x{}", b.nodes, b.gpu);
    let (sim, kubelets) = match &b.kubelet_processes {
        None => (
            Some(
                gantry_sim::cluster::start(
                    client.clone(),
                    &dir.join("nodes"),
                    gantry_sim::nodes::plan(&spec)?,
                    gantry_sim::kubelet::node_agents::default_registry(),
                )
                .await
                .context("starting the simulated nodes")?,
            ),
            Vec::new(),
        ),
        Some(k) => (
            None,
            crate::nodes::spawn_kubelets(k, &cp, &spec, &dir.join("nodes"))?,
        ),
    };
    // Every process of the bench but the operator: this one and the kubelet processes.
    let mut sim_pids = vec![me];
    sim_pids.extend(kubelets.iter().filter_map(|c| c.id()));
    let rss_sum = |pids: &[u32]| {
        pids.iter()
            .map(|p| crate::rss_of(*p).0.unwrap_or(0))
            .sum::<u64>()
    };
    let cpu_of = |pids: &[u32]| {
        pids.iter()
            .map(|p| crate::cpu_seconds(*p).unwrap_or(0.0))
            .sum::<f64>()
    };
    let _controllers = gantry_sim::controllers::start(client.clone());
    let setup = t_setup.elapsed();
    let cpu_setup = cpu_of(&sim_pids);

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
    let mut s = Samples::default();
    let mut next_say = Instant::now();
    let progress = wait_ready(
        &cp.api().store,
        &name,
        b.nodes as usize,
        t0,
        b.timeout,
        |p| {
            let whole = rss_sum(&sim_pids) + crate::rss_of(pid).0.unwrap_or(0);
            s.peak_whole = s.peak_whole.max(whole);
            let files = tmpfs_base
                .and_then(|b| Some(crate::tmpfs_used(&dir)?.saturating_sub(b)))
                .unwrap_or(0);
            if whole + files > s.peak_with_files {
                (s.peak_with_files, s.files_at_peak) = (whole + files, files);
            }
            let load = load_average();
            s.peak_load = s.peak_load.max(load.as_ref().map_or(0.0, |l| l.0));
            if let Some(every) = b.progress
                && Instant::now() >= next_say
            {
                next_say = Instant::now() + every;
                eprintln!(
                    "{:>6.1} s  {p}; RSS bench+operator {} MiB; CPU {:.1} s; load {}{}",
                    t0.elapsed().as_secs_f64(),
                    whole >> 20,
                    cpu_of(&sim_pids) + crate::cpu_seconds(pid).unwrap_or(0.0),
                    load.map(|l| l.1).unwrap_or_default(),
                    beside
                        .as_ref()
                        .map(|r| format!("; beside: {} load pods created", r.created()))
                        .unwrap_or_default(),
                );
            }
        },
    )
    .await;
    let (rss, hwm) = crate::rss_of(pid);
    let (my_rss, my_hwm) = crate::rss_of(me);
    let sim_rss = rss_sum(&sim_pids);
    let cpu = (Some(cpu_of(&sim_pids)), crate::cpu_seconds(pid));
    let threads = crate::cpu_by_thread(me);
    let kubelet_count = kubelets.len();
    let store_stats = cp.api().store.stats();
    let requests = cp.api().requests.sorted_with_cpu();
    let beside_figures = beside.as_ref().map(|r| {
        (
            r.created(),
            crate::rss_of(r.pid()).1,
            crate::cpu_seconds(r.pid()),
        )
    });
    // Sampled at ready (above); the cluster at rest is measured on its own.
    let at_rest = match (&progress, b.at_rest) {
        (Ok(_), Some(window)) => {
            let kubelet_pids = &sim_pids[1..];
            let cpus = || {
                [
                    cpu_of(&[me]),
                    cpu_of(kubelet_pids),
                    crate::cpu_seconds(pid).unwrap_or(0.0),
                ]
            };
            let before = cpus();
            tokio::time::sleep(window).await;
            let after = cpus();
            let spent = [0, 1, 2].map(|i| after[i] - before[i]);
            let now = cp.api().requests.sorted_with_cpu();
            Some(at_rest::AtRest::new(window, spent, &requests, now))
        }
        _ => None,
    };
    drop(beside);
    let _ = child.start_kill();
    drop(sim);
    drop(kubelets);
    let _ = std::fs::remove_dir_all(&dir);
    let progress = progress.map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "operator RSS at end {}, peak {}; bench+operator peak {} (no complete run)",
            mib(rss),
            mib(hwm),
            mib(Some(s.peak_whole)),
        ))
    })?;
    let cpu_s = |s: Option<f64>| s.map_or("n/a".to_string(), |s| format!("{s:.1} s"));
    let secs =
        |d: Option<Duration>| d.map_or("n/a".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
    let n = f64::from(b.nodes.max(1));
    let per_node_kib = sim_rss.saturating_sub(rss_before_nodes) as f64 / 1024.0 / n;
    let per_node_cpu_ms = (cpu.0.unwrap_or(0.0) - cpu_setup) * 1000.0 / n;
    let mut rows = vec![
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
        ("operator peak RSS (VmHWM)", mib(hwm)),
        (
            "bench process RSS at end / peak",
            format!("{} / {}", mib(my_rss), mib(my_hwm)),
        ),
        ("kubelet processes", kubelet_count.to_string()),
        (
            "peak RSS, bench + operator (sampled)",
            mib(Some(s.peak_whole)),
        ),
        (
            "scratch directory (the simulated nodes' files)",
            match tmpfs_base {
                Some(_) => format!("{} (tmpfs)", dir.display()),
                None => dir.display().to_string(),
            },
        ),
        (
            "peak memory with the nodes' files on tmpfs (sampled)",
            match tmpfs_base {
                Some(_) => format!(
                    "{} (files {})",
                    mib(Some(s.peak_with_files)),
                    mib(Some(s.files_at_peak))
                ),
                None => "- (not on tmpfs)".into(),
            },
        ),
        (
            "simulated side's RSS per node (end)",
            format!("{per_node_kib:.0} KiB"),
        ),
        (
            "CPU: simulated side (API server, nodes, controllers)",
            cpu_s(cpu.0),
        ),
        (
            "CPU per simulated node after setup",
            format!("{per_node_cpu_ms:.0} ms"),
        ),
        ("CPU: operator", cpu_s(cpu.1)),
        ("load average at start", load_at_start),
        ("peak 1-minute load average", format!("{:.1}", s.peak_load)),
    ];
    if let Some((created, hwm, cpu)) = beside_figures {
        rows.push(("beside: load pods created", created.to_string()));
        rows.push((
            "beside: `gantry up` peak RSS / CPU",
            format!("{} / {}", mib(hwm), cpu_s(cpu)),
        ));
    }
    let mut out = String::from("| metric | value |\n|---|---|\n");
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    // Where the simulated side's CPU went, by thread name.
    out.push_str("\n| CPU by thread (this process, top 8) | threads | seconds |\n|---|---|---|\n");
    for (name, count, secs) in threads.into_iter().take(8) {
        out.push_str(&format!("| {name} | {count} | {secs:.1} |\n"));
    }
    // What the simulated API server keeps, by resource.
    out.push('\n');
    out.push_str(&store_stats.table());
    // Where the simulated API server's time went.
    // The CPU column is the write's own work on its worker thread (decode, checks, store,
    // encode), not the connection's or the watches' share.
    out.push_str(
        "\n| API requests (top 12, then every list) | count | CPU in the write, s | µs each |\n|---|---|---|---|\n",
    );
    // Lists beyond the top 12 too: a relist of a large resource is rare but costs memory.
    let rows = requests.into_iter().enumerate();
    for (_, ((verb, res, sub), n, cpu)) in
        rows.filter(|(i, ((v, _, _), _, _))| *i < 12 || *v == "list")
    {
        let res = if sub.is_empty() {
            res
        } else {
            format!("{res}/{sub}")
        };
        let (cpu, each) = if cpu > 0.0 {
            (
                format!("{cpu:.1}"),
                format!("{:.0}", cpu * 1e6 / n.max(1) as f64),
            )
        } else {
            ("-".into(), "-".into())
        };
        out.push_str(&format!("| {verb} {res} | {n} | {cpu} | {each} |\n"));
    }
    if let Some(r) = at_rest {
        out.push('\n');
        out.push_str(&r.table(n));
    }
    Ok(out)
}
