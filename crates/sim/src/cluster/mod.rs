//! Simulated nodes against a running API server: one kubelet per node (sharing one
//! `kube::Client` and one Node watch, each watching its own pods), their GPUs, and the
//! fault-injection control socket.
//!
//! ```text
//! let cluster = gantry_sim::cluster::start(client, &data_dir, nodes::plan("2xH100-80GB:8")?, agents).await?;
//! ```

pub mod control;
pub mod error;
pub mod faults;
pub mod routed;

pub use error::ClusterError;
pub use faults::{Fault, apply_fault};

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use gantry_api::lenient::Lenient;
use gantry_gpu::{SimBackend, SimConfig};
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::task::JoinHandle;

use crate::kubelet::node_sync::{self, LEASE_NAMESPACE};
use crate::kubelet::pods::{self, PodEnv};
use crate::kubelet::{AgentRegistry, NodeResources, NodeShared};
use crate::nodes::NodePlan;

/// Where a sim keeps its nodes' host directories and its control socket: `<data-dir>/sim`.
/// An in-memory `gantry up` uses a fresh `$TMPDIR/gantry-sim-XXXXXX` instead (see [`up`]),
/// so any number of them run side by side.
pub fn sim_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("sim")
}

/// Name prefix of the temporary directories of in-memory sims.
pub const TEMP_PREFIX: &str = "gantry-sim-";

/// In an in-memory sim's directory: the URL of its API server (`gantry sim fault` matches it
/// against the kubeconfig's server to find the sim kubectl is talking to).
pub const SERVER_FILE: &str = "api-server";

/// An in-memory sim running on this machine (its control socket answers).
#[derive(Debug, Clone, PartialEq)]
pub struct TempSim {
    pub dir: PathBuf,
    /// Its API server's URL, from [`SERVER_FILE`].
    pub server: Option<String>,
}

/// The in-memory sims running on this machine, for `gantry sim fault` without `--data-dir`.
pub fn running_temp_sims() -> Vec<TempSim> {
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    let mut out: Vec<TempSim> = dir
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
        .map(|e| e.path())
        .filter(|root| std::os::unix::net::UnixStream::connect(control::socket_path(root)).is_ok())
        .map(|dir| TempSim {
            server: std::fs::read_to_string(dir.join(SERVER_FILE))
                .ok()
                .map(|s| s.trim().to_string()),
            dir,
        })
        .collect();
    out.sort_by(|a, b| a.dir.cmp(&b.dir));
    out
}

#[derive(Debug, thiserror::Error)]
pub enum UpError {
    #[error(transparent)]
    Spec(#[from] crate::nodes::SpecError),
    #[error(transparent)]
    Sim(#[from] crate::SimError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("the sim's temporary directory {dir}: {error}")]
    TempDir { dir: PathBuf, error: std::io::Error },
}

/// Simulated nodes plus the controllers they need, started for a running control plane.
pub struct Up {
    pub cluster: SimCluster,
    _controllers: crate::controllers::Controllers,
    /// The in-memory sim's own directory, removed after the cluster stops (fields drop in
    /// order).
    _temp: Option<tempfile::TempDir>,
}

impl Up {
    /// Stop the nodes and controllers, then remove the in-memory sim's directory once nothing
    /// writes to it any more (dropping removes it at once, which can race the nodes' sockets).
    pub async fn stop(self) {
        let Up {
            cluster,
            _controllers,
            _temp,
        } = self;
        drop(cluster);
        drop(_controllers);
        if let Some(t) = _temp {
            remove_temp(t).await;
        }
    }
}

/// What [`up_with`] adds to the plain [`up`].
#[derive(Default)]
pub struct UpOptions {
    /// Bind pods of the default scheduler (Deployments' pods, plain pods), as kube-scheduler.
    pub default_scheduler: bool,
    /// In-process runners of Gantry's components by subcommand (`operator`, `scheduler`), for
    /// pods of Gantry's image (the Helm chart's): see [`crate::kubelet::component_pods`].
    pub components: BTreeMap<String, crate::kubelet::component_pods::ComponentRunner>,
    /// Topology labels for the nodes (`zone=8,rack=2`, see [`crate::node_topology`]).
    pub topology: Option<String>,
    /// Without a data dir: the temporary directory to use (from [`temp_dir`]), so a caller
    /// that may cancel the start knows what to remove once its runtime has stopped.
    pub temp: Option<tempfile::TempDir>,
}

/// An in-memory sim's directory, removed when dropped.
pub use tempfile::TempDir;

/// A fresh `$TMPDIR/gantry-sim-XXXXXX` for an in-memory sim.
pub fn temp_dir() -> Result<tempfile::TempDir, UpError> {
    tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempdir()
        .map_err(|error| UpError::TempDir {
            dir: std::env::temp_dir(),
            error,
        })
}

/// `gantry up --nodes SPEC`: the workload controllers and one kubelet per node of `spec`,
/// with every agent runner the sim has. State lives under `<data_dir>/sim`, or without a
/// data dir in a fresh temporary directory of its own.
pub fn up<'a>(
    cp: &'a crate::ControlPlane,
    data_dir: Option<&'a Path>,
    spec: &'a str,
) -> futures::future::BoxFuture<'a, Result<Up, UpError>> {
    Box::pin(up_inner(cp, data_dir, spec))
}

async fn up_inner(
    cp: &crate::ControlPlane,
    data_dir: Option<&Path>,
    spec: &str,
) -> Result<Up, UpError> {
    up_with(cp, data_dir, spec, UpOptions::default()).await
}

/// [`up`] with a default scheduler and component runners as `opts` says.
// A plain fn returning a boxed future: the body compiles once, here, not again in
// every crate that awaits it (docs/benchmarks.md, "Build time").
pub fn up_with<'a>(
    cp: &'a crate::ControlPlane,
    data_dir: Option<&'a Path>,
    spec: &'a str,
    opts: UpOptions,
) -> futures::future::BoxFuture<'a, Result<Up, UpError>> {
    Box::pin(up_with_inner(cp, data_dir, spec, opts))
}

async fn up_with_inner(
    cp: &crate::ControlPlane,
    data_dir: Option<&Path>,
    spec: &str,
    opts: UpOptions,
) -> Result<Up, UpError> {
    let mut plan = crate::nodes::plan(spec)?;
    if let Some(t) = &opts.topology {
        crate::node_topology::apply(&mut plan, t)?;
    }
    let (root, temp) = match data_dir {
        Some(d) => (sim_dir(d), None),
        None => {
            let t = match opts.temp {
                Some(t) => t,
                None => temp_dir()?,
            };
            let server = t.path().join(SERVER_FILE);
            std::fs::write(&server, cp.base_url()).map_err(|error| UpError::TempDir {
                dir: server.clone(),
                error,
            })?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let client = cp.client()?;
    let controllers = crate::controllers::start_with(
        client.clone(),
        crate::controllers::Options {
            default_scheduler: opts.default_scheduler,
        },
    );
    let mut agents = crate::kubelet::node_agents::default_registry();
    if !opts.components.is_empty() {
        crate::kubelet::component_pods::register(&mut agents, cp.kube_config()?, opts.components);
    }
    let cluster = match start(client, &root, plan, agents).await {
        Ok(c) => c,
        Err(e) => {
            if let Some(t) = temp {
                remove_temp(t).await;
            }
            return Err(e.into());
        }
    };
    Ok(Up {
        cluster,
        _controllers: controllers,
        _temp: temp,
    })
}

/// Removes a failed start's temporary directory. The nodes that did start are stopped, but
/// their aborted servers close their sockets only when next polled (and at 100,000 nodes
/// those hold every file descriptor `remove_dir_all` needs): retry while they go.
async fn remove_temp(t: tempfile::TempDir) {
    let path = t.path().to_path_buf();
    let t = t.keep();
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir_all(&t) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    if let Some(e) = last {
        tracing::warn!(dir = %path.display(), error = %e, "could not remove the sim's temporary directory");
    }
}

/// A running set of simulated nodes.
pub struct SimCluster {
    root: PathBuf,
    nodes: BTreeMap<String, Arc<NodeShared>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for n in self.nodes.values() {
            lock_pods_clear(n);
            n.stop_servers();
        }
    }
}

fn lock_pods_clear(n: &NodeShared) {
    crate::kubelet::lock(&n.pods).clear();
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), ClusterError> {
    gantry_runtime::ensure_namespace(client, name)
        .await
        .map_err(|source| ClusterError::Namespace {
            namespace: name.to_string(),
            source,
        })
}

/// Start one kubelet per planned node under `root` (`<root>/<node>/…`), each with its pod watch,
/// and the control socket `<root>/sim-control.sock`.
pub fn start<'a>(
    client: kube::Client,
    root: &'a Path,
    plan: Vec<NodePlan>,
    agents: AgentRegistry,
) -> futures::future::BoxFuture<'a, Result<SimCluster, ClusterError>> {
    Box::pin(start_inner(client, root, plan, agents))
}

async fn start_inner(
    client: kube::Client,
    root: &Path,
    plan: Vec<NodePlan>,
    agents: AgentRegistry,
) -> Result<SimCluster, ClusterError> {
    ensure_namespace(&client, LEASE_NAMESPACE).await?;
    // Agents get absolute paths whatever the caller's working directory.
    let abs = std::path::absolute(root).map_err(|e| ClusterError::Control {
        path: root.to_path_buf(),
        reason: e.to_string(),
    })?;
    let root = abs.as_path();
    // Built up as nodes start: a failure part-way drops it, which stops what did start (and
    // lets the caller remove the directory with nothing still writing to it).
    let mut cluster = SimCluster {
        root: root.to_path_buf(),
        nodes: BTreeMap::new(),
        tasks: Vec::new(),
    };
    for p in &plan {
        let backend = p
            .gpu
            .filter(|_| p.gpus > 0)
            .map(|m| Arc::new(SimBackend::new(SimConfig::new(m, p.gpus, p.seed))));
        // The node's position in the whole spec (not in `plan`, which may be one share of it).
        let mut res = NodeResources::for_gpus(p.gpu, p.gpus, p.seed as u32);
        res.labels = p.labels.clone();
        let node = NodeShared::new(root, &p.name, res, backend);
        node.dirs
            .seed_host(if p.gpu.is_some() { p.gpus } else { 0 })
            .await?;
        cluster.nodes.insert(p.name.clone(), node.clone());
        node.start_servers().await?;
    }
    let nodes = cluster.nodes.clone();
    let tasks = &mut cluster.tasks;
    for node in nodes.values() {
        tasks.push(tokio::spawn(node_sync::run(node.clone(), client.clone())));
    }
    // This process's nodes only: one share of a large cluster need not hold every Node, nor
    // decode the others' ([`routed::RoutedNode`]). Where the nodes carry their process's
    // label, the server sends only ours; the names still pick them (a label can be edited).
    let (node_store, node_writer) = reflector::store();
    let own: HashSet<String> = nodes.keys().cloned().collect();
    let node_watch = match process_label(&plan) {
        Some(v) => watcher::Config::default()
            .labels(&format!("{}={v}", gantry_api::names::LABEL_SIM_KUBELETS)),
        None => watcher::Config::default(),
    };
    tasks.push(tokio::spawn(
        reflector(
            node_writer,
            watcher(Api::<routed::RoutedNode>::all(client.clone()), node_watch)
                .try_filter_map(move |ev| std::future::ready(Ok(own_node_event(ev, &own)))),
        )
        .default_backoff()
        .for_each(|_| std::future::ready(())),
    ));
    let env = PodEnv {
        client: client.clone(),
        agents: Arc::new(agents),
        nodes: node_store,
        events: gantry_runtime::events::Recorder::new(client.clone(), "kubelet", "kubelet"),
    };
    for node in nodes.values() {
        tasks.push(tokio::spawn(watch_pods(
            client.clone(),
            node.clone(),
            env.clone(),
        )));
    }
    let nodes_arc = Arc::new(nodes);
    let control = control::serve(root, nodes_arc).await?;
    cluster.tasks.push(control);
    Ok(cluster)
}

/// The value of [`gantry_api::names::LABEL_SIM_KUBELETS`] that every planned node carries
/// (`None`: not every node has the same one, as when one process runs the whole cluster).
fn process_label(plan: &[NodePlan]) -> Option<&str> {
    let mut values = plan
        .iter()
        .map(|p| p.labels.get(gantry_api::names::LABEL_SIM_KUBELETS));
    let first = values.next()??;
    values.all(|v| v == Some(first)).then_some(first.as_str())
}

/// A Node watch's event as this process's node cache takes it: of its own nodes only,
/// decoded; `None` for another process's node (or one of ours that does not decode).
fn own_node_event(
    ev: watcher::Event<routed::RoutedNode>,
    own: &HashSet<String>,
) -> Option<watcher::Event<Node>> {
    let ours = |n: &routed::RoutedNode| n.meta().name.as_ref().is_some_and(|n| own.contains(n));
    Some(match ev {
        watcher::Event::Apply(n) if ours(&n) => watcher::Event::Apply(n.decode()?),
        watcher::Event::InitApply(n) if ours(&n) => watcher::Event::InitApply(n.decode()?),
        watcher::Event::Delete(n) if ours(&n) => watcher::Event::Delete(n.decode()?),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
        _ => return None,
    })
}

/// The pods bound to `node`, watched as upstream's kubelet watches them
/// (`fieldSelector=spec.nodeName=<node>`, which the API server indexes): one watch over all
/// pods made every process of a large cluster receive, and read, every pod event. A running
/// pod's later versions are not decoded ([`routed::RoutedPod`]), and a pod is read as
/// [`Lenient`], so one stored pod that does not decode (written before the API server
/// checked it) neither fails the relist nor is lost: its kubelet still finishes its deletion.
async fn watch_pods(client: kube::Client, node: Arc<NodeShared>, env: PodEnv) {
    let api: Api<routed::RoutedPod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", node.name));
    let mut stream = watcher(api, config).boxed();
    let mut seen_in_init: HashSet<String> = HashSet::new();
    // The server filters; a pod that names another node (never sent) is not run here.
    let ours = |p: &routed::RoutedPod| p.node() == Some(node.name.as_str());
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                if !ours(&p) {
                    continue;
                }
                if let Some(uid) = &p.meta().uid {
                    seen_in_init.insert(uid.clone());
                }
                // A pod already running here is followed by its deletion only: not decoded.
                if pods::on_running_pod(&node, p.latest()) {
                    continue;
                }
                match p.decode() {
                    Lenient::Decoded(p) => pods::on_pod(&node, &env, p),
                    Lenient::Undecodable { meta, error, .. } => {
                        pods::on_undecodable(&node, &env, &meta, &error)
                    }
                }
            }
            Ok(watcher::Event::Delete(p)) => {
                if let Some(uid) = p.meta().uid.as_ref().filter(|_| ours(&p)) {
                    pods::on_pod_deleted(&node, uid);
                }
            }
            Ok(watcher::Event::Init) => seen_in_init.clear(),
            Ok(watcher::Event::InitDone) => {
                // After a re-list, pods we run that no longer exist were deleted meanwhile.
                for uid in pods::known_pods(&node) {
                    if !seen_in_init.contains(&uid) {
                        pods::on_pod_deleted(&node, &uid);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(node = %node.name, error = %e, "pod watch error (the watcher retries)");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    }
}

impl SimCluster {
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn node(&self, name: &str) -> Option<&Arc<NodeShared>> {
        self.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Arc<NodeShared>> {
        self.nodes.values()
    }

    pub fn control_socket(&self) -> PathBuf {
        control::socket_path(&self.root)
    }

    /// Inject a fault into one node.
    pub async fn fault(&self, node: &str, fault: &Fault) -> Result<String, ClusterError> {
        let n = self
            .nodes
            .get(node)
            .ok_or_else(|| ClusterError::NoSuchNode(node.to_string()))?;
        apply_fault(n, fault).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::names::LABEL_SIM_KUBELETS;

    #[test]
    fn a_process_watches_by_its_label_only_when_every_node_carries_it() {
        let mut plan = crate::nodes::plan("3xL4:1").unwrap();
        assert_eq!(
            process_label(&plan),
            None,
            "no label: every Node is watched"
        );
        for p in &mut plan {
            p.labels.insert(LABEL_SIM_KUBELETS.into(), "1-of-4".into());
        }
        assert_eq!(process_label(&plan), Some("1-of-4"));
        plan[2]
            .labels
            .insert(LABEL_SIM_KUBELETS.into(), "2-of-4".into());
        assert_eq!(
            process_label(&plan),
            None,
            "two values: every Node is watched"
        );
        plan[2].labels.remove(LABEL_SIM_KUBELETS);
        assert_eq!(process_label(&plan), None, "one node without it");
        assert_eq!(process_label(&[]), None);
    }
}
