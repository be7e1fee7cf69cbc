//! `gantry bench nodes`: bring up a control plane (in memory, or SQLite with a data dir) with
//! simulated nodes, deploy the device plugin as a DaemonSet (as the operator would), and time
//! how long until every node is Ready and every GPU is allocatable; report the process's memory
//! and, every few seconds, where the run is (for finding what is slow). The kubelets run in
//! the bench's process, or in child processes ([`KubeletProcesses`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use gantry_sim::cluster::{ClusterError, SimCluster, start};
use gantry_sim::kubelet::node_agents::default_registry;
use gantry_sim::{ControlPlane, ControlPlaneOptions, controllers, nodes};

use crate::tally::Tally;

/// What `bench nodes` measured.
#[derive(Debug, Clone)]
pub struct NodesReport {
    pub nodes: usize,
    pub gpus: u64,
    pub ready_nodes: usize,
    pub allocatable_gpus: u64,
    /// From start until every node was Ready.
    pub to_ready: Option<Duration>,
    /// From start until every GPU was allocatable (device plugins registered).
    pub to_gpus: Option<Duration>,
    /// Resident memory at the end and its peak (`VmRSS`, `VmHWM`), bytes.
    pub rss_bytes: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    /// CPU time the process used (user + system): what the run cost whatever else the
    /// machine was doing.
    pub cpu_seconds: Option<f64>,
    /// The most file descriptors open at a progress sample (every socket of every node, and
    /// both ends of every connection to the API server, are in this one process).
    pub peak_fds: usize,
    /// `/proc/loadavg` at the end (1, 5, 15 minutes): how busy the machine was.
    pub load_average: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Spec(#[from] nodes::SpecError),
    #[error(transparent)]
    Sim(#[from] gantry_sim::SimError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("bench: {0}")]
    Api(#[from] kube::Error),
    #[error("bench: {0}")]
    Io(#[from] std::io::Error),
}

/// The processes whose use the bench adds up: itself and its kubelet processes.
fn procs(children: &[u32]) -> Vec<String> {
    std::iter::once("self".to_string())
        .chain(children.iter().map(u32::to_string))
        .collect()
}

fn proc_status_kib(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|k| k * 1024)
}

/// User + system CPU seconds of a process (`/proc/PID/stat`, clock ticks of 1/100 s).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn open_fds(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Summed over `procs`: resident memory (`field` of `/proc/PID/status`), CPU seconds; and
/// the most file descriptors one of them holds (the limit is per process).
fn usage(procs: &[String], field: &str) -> (u64, f64, usize) {
    procs.iter().fold((0, 0.0, 0), |(m, c, f), p| {
        (
            m + proc_status_kib(p, field).unwrap_or(0),
            c + cpu_seconds(p).unwrap_or(0.0),
            f.max(open_fds(p)),
        )
    })
}

fn load_average() -> Option<String> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// The device plugin DaemonSet the bench deploys (GPU nodes only, like the operator's).
fn plugin_daemonset() -> Result<DaemonSet, serde_json::Error> {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "bench-device-plugin", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "bench-device-plugin"}},
            "template": {
                "metadata": {"labels": {"app": "bench-device-plugin"}},
                "spec": {
                    "nodeSelector": {gantry_api::names::NFD_GPU_LABELS[0]: "true"},
                    "containers": [{"name": "device-plugin", "image": "gantry",
                                    "command": ["gantry", "node", "device-plugin"]}]
                }
            }
        }
    }))
}

/// What `bench nodes` runs.
#[derive(Debug, Clone)]
pub struct NodesBenchOpts {
    /// Node spec (`nodes::plan`), e.g. `5000xH100-80GB:8`.
    pub spec: String,
    /// Give up after this long.
    pub timeout: Duration,
    /// Keep the API's state in SQLite here (None: in memory). Must not hold an earlier run.
    pub data_dir: Option<PathBuf>,
    /// Print a progress line this often (None: quiet).
    pub progress: Option<Duration>,
    /// Run the simulated kubelets in child processes instead of this one (None: in-process).
    pub kubelet_processes: Option<KubeletProcesses>,
}

/// The simulated kubelets in `count` child processes, each with every `count`-th node of the
/// spec. Every node holds five file descriptors (its `kubelet.sock`, pod-resources and plugin
/// sockets, both ends of the kubelet's connection to its plugin), so 5,000 nodes need more
/// than one process may open where the hard limit is 20,000; real kubelets are separate
/// processes too.
#[derive(Debug, Clone)]
pub struct KubeletProcesses {
    pub count: usize,
    /// Program and leading arguments of the command that runs one share; the bench appends
    /// `--kubeconfig PATH --nodes SPEC --share I/COUNT --dir DIR` (see [`run_kubelets`]).
    pub command: Vec<std::ffi::OsString>,
}

/// File descriptors one simulated node holds with every operand running (sockets of the
/// kubelet, device plugin, PodResources and exporter, and their clients).
pub const FDS_PER_NODE: usize = 8;

/// How many kubelet processes `nodes` need so that none holds more than half of
/// `open_file_limit` descriptors for its nodes (0: they fit in this process).
pub fn processes_needed(nodes: usize, open_file_limit: usize) -> usize {
    let per_process = (open_file_limit / 2).max(FDS_PER_NODE);
    let fds = nodes * FDS_PER_NODE;
    if fds <= per_process {
        0
    } else {
        fds.div_ceil(per_process)
    }
}

impl KubeletProcesses {
    /// `count` processes of this binary's `gantry sim kubelets` (None for 0: in-process).
    pub fn of_this_binary(count: usize) -> std::io::Result<Option<Self>> {
        if count == 0 {
            return Ok(None);
        }
        Ok(Some(KubeletProcesses {
            count,
            command: vec![
                std::env::current_exe()?.into_os_string(),
                "sim".into(),
                "kubelets".into(),
            ],
        }))
    }
}

/// One share of a bench's nodes, in a process of its own (see [`KubeletProcesses`]): every
/// `of`-th node of `spec` from the `share`-th, against the API server of `kubeconfig`, with
/// their host directories under `dir`.
pub fn run_kubelets<'a>(
    kubeconfig: &'a Path,
    spec: &'a str,
    share: usize,
    of: usize,
    dir: &'a Path,
) -> futures::future::BoxFuture<'a, Result<SimCluster, BenchError>> {
    Box::pin(run_kubelets_inner(kubeconfig, spec, share, of, dir))
}

async fn run_kubelets_inner(
    kubeconfig: &Path,
    spec: &str,
    share: usize,
    of: usize,
    dir: &Path,
) -> Result<SimCluster, BenchError> {
    let other = |e: &dyn std::fmt::Display| {
        std::io::Error::other(format!("kubeconfig {}: {e}", kubeconfig.display()))
    };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| other(&e))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| other(&e))?;
    let client = gantry_sim::client::http2_client(config)?;
    let mut plan: Vec<_> = nodes::plan(spec)?
        .into_iter()
        .filter(|p| p.seed as usize % of.max(1) == share)
        .collect();
    // The share's nodes say so: this process then watches only its own Nodes.
    let ours = format!("{share}-of-{of}");
    for p in &mut plan {
        p.labels
            .insert(gantry_api::names::LABEL_SIM_KUBELETS.into(), ours.clone());
    }
    Ok(start(client, dir, plan, default_registry()).await?)
}

/// Where the run stands, read from the API server's store (a list over HTTPS of thousands of
/// Nodes several times a second would load the server it measures).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Progress {
    nodes: usize,
    ready: usize,
    gpus: u64,
    pods: usize,
    running: usize,
}

fn allocatable_gpus(n: &Value) -> u64 {
    n.pointer("/status/allocatable")
        .and_then(|a| a.get(gantry_api::names::RESOURCE_GPU))
        .and_then(Value::as_str)
        .and_then(|q| q.parse::<u64>().ok())
        .unwrap_or(0)
}

fn node_ready(n: &Value) -> bool {
    n.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Nodes (ready, allocatable GPUs) and kube-system pods (running), followed from the store's
/// events rather than listed every poll (see [`Tally`]).
struct Watched {
    nodes: Tally<(bool, u64)>,
    pods: Tally<bool>,
}

impl Watched {
    fn new(cp: &ControlPlane) -> Self {
        let store = &cp.api().store;
        Watched {
            nodes: Tally::new(store, "/nodes", None, |n| {
                (node_ready(n), allocatable_gpus(n))
            }),
            pods: Tally::new(store, "/pods", Some("kube-system"), |p| {
                p.pointer("/status/phase") == Some(&json!("Running"))
            }),
        }
    }

    fn progress(&self) -> Progress {
        let (nodes, ready, gpus) = self.nodes.read(|n| {
            let ready = n.values().filter(|(r, _)| *r).count();
            (n.len(), ready, n.values().map(|(_, g)| g).sum())
        });
        let (pods, running) = self
            .pods
            .read(|p| (p.len(), p.values().filter(|r| **r).count()));
        Progress {
            nodes,
            ready,
            gpus,
            pods,
            running,
        }
    }
}

/// Start the kubelet processes; they stop when their stdin closes (this side dropped) and
/// are killed if the bench is.
pub(crate) fn spawn_kubelets(
    k: &KubeletProcesses,
    cp: &ControlPlane,
    spec: &str,
    dir: &Path,
) -> Result<Vec<tokio::process::Child>, BenchError> {
    let Some((program, args)) = k.command.split_first() else {
        return Err(std::io::Error::other("no command for the kubelet processes").into());
    };
    (0..k.count)
        .map(|i| {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args)
                .arg("--kubeconfig")
                .arg(cp.kubeconfig_path())
                .arg("--nodes")
                .arg(spec)
                .arg("--share")
                .arg(format!("{i}/{}", k.count))
                .arg("--dir")
                .arg(dir.join(format!("share-{i}")))
                .stdin(std::process::Stdio::piped())
                .kill_on_drop(true);
            Ok(cmd.spawn()?)
        })
        .collect()
}

/// Run the benchmark.
pub fn nodes_bench<'a>(
    opts: &'a NodesBenchOpts,
) -> futures::future::BoxFuture<'a, Result<NodesReport, BenchError>> {
    Box::pin(nodes_bench_inner(opts))
}

async fn nodes_bench_inner(opts: &NodesBenchOpts) -> Result<NodesReport, BenchError> {
    let plan = nodes::plan(&opts.spec)?;
    let want_nodes = plan.len();
    let want_gpus: u64 = plan.iter().map(|p| u64::from(p.gpus)).sum();
    let timeout = opts.timeout;
    let t0 = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions {
        data_dir: opts.data_dir.clone(),
        ..Default::default()
    })
    .await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("gb").tempdir_in("/tmp")?;
    let _ctl = controllers::start(client.clone());
    gantry_runtime::ensure_namespace(&client, "kube-system")
        .await
        .map_err(|source| ClusterError::Namespace {
            namespace: "kube-system".into(),
            source,
        })?;
    let (cluster, children) = match &opts.kubelet_processes {
        None => (
            Some(start(client.clone(), tmp.path(), plan, default_registry()).await?),
            Vec::new(),
        ),
        Some(k) => (None, spawn_kubelets(k, &cp, &opts.spec, tmp.path())?),
    };
    let pids: Vec<u32> = children.iter().filter_map(|c| c.id()).collect();
    let procs = procs(&pids);
    let say = |what: &str| {
        if opts.progress.is_some() {
            println!("{:>7.1} s  {what}", t0.elapsed().as_secs_f64());
        }
    };
    say(&format!("{want_nodes} simulated kubelets started"));
    if want_gpus > 0 {
        let ds = plugin_daemonset().map_err(|e| std::io::Error::other(e.to_string()))?;
        Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
            .create(&PostParams::default(), &ds)
            .await?;
    }
    say("device plugin DaemonSet created");
    let mut report = NodesReport {
        nodes: want_nodes,
        gpus: want_gpus,
        ready_nodes: 0,
        allocatable_gpus: 0,
        to_ready: None,
        to_gpus: None,
        rss_bytes: None,
        peak_rss_bytes: None,
        cpu_seconds: None,
        peak_fds: 0,
        load_average: None,
    };
    let watched = Watched::new(&cp);
    let mut next_say = Instant::now();
    while t0.elapsed() < timeout {
        let p = watched.progress();
        report.ready_nodes = p.ready;
        report.allocatable_gpus = p.gpus;
        if let Some(every) = opts.progress
            && Instant::now() >= next_say
        {
            let (rss, cpu, fds) = usage(&procs, "VmRSS:");
            report.peak_fds = report.peak_fds.max(fds);
            say(&format!(
                "nodes {}/{want_nodes} registered, {} Ready; plugin pods {} created, {} Running; GPUs {}/{want_gpus}; RSS {} MiB; {fds} fds; CPU {cpu:.1} s; load {}",
                p.nodes,
                p.ready,
                p.pods,
                p.running,
                p.gpus,
                rss >> 20,
                load_average().unwrap_or_default()
            ));
            next_say = Instant::now() + every;
        }
        if report.to_ready.is_none() && report.ready_nodes >= want_nodes {
            report.to_ready = Some(t0.elapsed());
        }
        if report.to_gpus.is_none() && report.allocatable_gpus >= want_gpus {
            report.to_gpus = Some(t0.elapsed());
        }
        if report.to_ready.is_some() && report.to_gpus.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (rss, cpu, fds) = usage(&procs, "VmRSS:");
    // Summed peaks: at least the peak of the sum.
    let (peak, _, _) = usage(&procs, "VmHWM:");
    report.rss_bytes = Some(rss);
    report.peak_rss_bytes = Some(peak);
    report.cpu_seconds = Some(cpu);
    report.peak_fds = report.peak_fds.max(fds);
    report.load_average = load_average();
    drop(children);
    drop(cluster);
    drop(cp);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_that_fit_half_the_limit_stay_in_process() {
        assert_eq!(processes_needed(1000, 20_000), 0);
        assert_eq!(processes_needed(1250, 20_000), 0);
        // 40,000 descriptors, 10,000 a process.
        assert_eq!(processes_needed(5000, 20_000), 4);
        assert_eq!(processes_needed(5001, 20_000), 5);
        // A tiny limit still gives every process at least one node.
        assert_eq!(processes_needed(3, 1), 3);
    }
}
