//! `gantry bench writes`: the embedded API server's write path, in process, from one thread or
//! several: the CPU of each write a simulated GPU node's bring-up makes (its Node, its Lease,
//! the operator's operand pods as the DaemonSet controller creates them, their kubelet status
//! patches, the labels and the allocatable the node's agents write), one kind at a time over
//! all nodes as a bring-up goes. No HTTP, no watchers: what one write costs the server, to
//! compare builds of the write path.

use gantry_operator::render::{ClusterFacts, NodeFacts, render};
use gantry_sim::ApiServer;
use gantry_sim::apiserver::patch::PatchType;
use gantry_sim::apiserver::requests::thread_cpu_ns;
use gantry_sim::apiserver::schema::Checks;
use gantry_sim::apiserver::status::ApiError;
use gantry_sim::apiserver::target::Target;
use gantry_sim::controllers::daemonset::new_pod;
use gantry_sim::kubelet::NodeResources;
use gantry_sim::kubelet::node_status;
use gantry_sim::kubelet::pods::{CState, Containers, InitStatus, StatusView, status_patch};
use gantry_sim::store::Store;
use k8s_openapi::api::apps::v1::DaemonSet;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const NS: &str = "gpu-operator";

/// One kind of write: how many, and the CPU each took on average.
#[derive(Debug, Clone)]
pub struct WriteRow {
    pub write: &'static str,
    pub count: usize,
    pub cpu_us: f64,
    /// Bytes of the stored object after the last write of this kind.
    pub stored_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum WritesError {
    #[error("rendering the bench policy: {0}")]
    Render(String),
    #[error("{what}: {message}")]
    Write { what: String, message: String },
}

/// Count, CPU nanoseconds and the last stored size, by kind of write.
#[derive(Default)]
struct Tally(BTreeMap<&'static str, (usize, u64, usize)>);

impl Tally {
    /// Runs one write of kind `write` and adds its CPU; `what` names it in an error.
    fn time(
        &mut self,
        write: &'static str,
        what: &str,
        f: impl FnOnce() -> Result<bytes::Bytes, ApiError>,
    ) -> Result<(), WritesError> {
        let t0 = thread_cpu_ns();
        let stored = f().map_err(|e| WritesError::Write {
            what: format!("{write} {what}"),
            message: e.message,
        })?;
        let row = self.0.entry(write).or_default();
        row.0 += 1;
        row.1 += thread_cpu_ns().saturating_sub(t0);
        row.2 = stored.len();
        Ok(())
    }

    fn add(&mut self, other: Tally) {
        for (k, (n, ns, bytes)) in other.0 {
            let row = self.0.entry(k).or_default();
            row.0 += n;
            row.1 += ns;
            row.2 = bytes;
        }
    }
}

/// The DaemonSets the operator renders for the bench's policy (`gantry bench operator`'s).
fn daemonsets() -> Result<Vec<DaemonSet>, WritesError> {
    let policy: gantry_api::cluster_policy::ClusterPolicy =
        serde_yaml::from_str(crate::operator::DEFAULT_POLICY)
            .map_err(|e| WritesError::Render(e.to_string()))?;
    let facts = ClusterFacts {
        namespace: NS.into(),
        operator_image: "ghcr.io/gantry-dev/gantry:0.1.0".into(),
        gpu_nodes: vec![NodeFacts {
            name: "n".into(),
            labels: BTreeMap::new(),
        }],
        ..ClusterFacts::default()
    };
    let states = render(&policy, &facts).map_err(|e| WritesError::Render(e.to_string()))?;
    let mut out = Vec::new();
    for o in states.into_iter().flat_map(|s| s.objects) {
        if o["kind"] == "DaemonSet" {
            out.push(serde_json::from_value(o).map_err(|e| WritesError::Render(e.to_string()))?);
        }
    }
    Ok(out)
}

/// Runs the writes of `nodes` simulated nodes' bring-up from `threads` threads at once (as
/// the API server's writers run side by side) and returns CPU per write kind.
pub fn run(nodes: usize, threads: usize) -> Result<Vec<WriteRow>, WritesError> {
    let srv = ApiServer::new(Store::memory(100_000), None);
    let target = |group: &str, version: &str, plural: &str, ns: &str| {
        srv.target(group, version, plural, ns)
            .ok_or_else(|| WritesError::Render(format!("{plural} not served")))
    };
    let (t_ns, t_node, t_pod, t_lease) = (
        target("", "v1", "namespaces", "")?,
        target("", "v1", "nodes", "")?,
        target("", "v1", "pods", NS)?,
        target("coordination.k8s.io", "v1", "leases", "kube-node-lease")?,
    );
    let mut tally = Tally::default();
    let fail = |what: &str, e: ApiError| WritesError::Write {
        what: what.into(),
        message: e.message,
    };
    for ns in [NS, "kube-node-lease"] {
        match srv.create(&t_ns, json!({"metadata": {"name": ns}}), "bench") {
            Err(e) if e.code != 409 => return Err(fail(ns, e)),
            _ => {}
        }
    }
    let dss = daemonsets()?;
    let threads = threads.clamp(1, nodes.max(1));
    let ts = Targets {
        node: t_node,
        pod: t_pod,
        lease: t_lease,
    };
    let results: Vec<Result<Tally, WritesError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (srv, dss, ts) = (&srv, &dss, &ts);
                s.spawn(move || node_writes(srv, dss, ts, (t..nodes).step_by(threads)))
            })
            .collect();
        let panicked = || Err(WritesError::Render("a writer thread panicked".into()));
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| panicked()))
            .collect()
    });
    for r in results {
        tally.add(r?);
    }
    Ok(tally
        .0
        .into_iter()
        .map(|(write, (count, ns, stored_bytes))| WriteRow {
            write,
            count,
            cpu_us: ns as f64 / 1e3 / count.max(1) as f64,
            stored_bytes,
        })
        .collect())
}

struct Targets {
    node: Target,
    pod: Target,
    lease: Target,
}

/// The writes of the nodes numbered `nodes`, on this thread, one kind at a time over all of
/// them, as a bring-up goes: thousands of other writes pass between two writes of one pod, so
/// its stored object is no longer held decoded and is decoded again, as in a real run.
fn node_writes(
    srv: &ApiServer,
    dss: &[DaemonSet],
    ts: &Targets,
    nodes: impl Iterator<Item = usize>,
) -> Result<Tally, WritesError> {
    let (t_node, t_pod, t_lease) = (&ts.node, &ts.pod, &ts.lease);
    let mut tally = Tally::default();
    let gpu = gantry_gpu::catalog::find("L4");
    let create = |t: &Target, obj: Value, manager: &str| {
        srv.create_checked(t, obj, manager, &mut Checks::default())
            .map(|s| s.body())
    };
    let render = |e: serde_json::Error| WritesError::Render(e.to_string());
    let mut names = Vec::new();
    let mut pods = Vec::new();
    for i in nodes {
        let name = format!("gpu-node-{i:05}");
        let res = NodeResources::for_gpus(gpu, 1, i as u32);
        let node = serde_json::to_value(node_status::node_object(&name, &res)).map_err(render)?;
        tally.time("create nodes", &name, || create(t_node, node, "kubelet"))?;
        let lease = json!({"metadata": {"name": name}, "spec": {"holderIdentity": name,
            "leaseDurationSeconds": 40, "renewTime": "2026-12-07T00:00:00.000000Z"}});
        tally.time("create leases", &name, || create(t_lease, lease, "kubelet"))?;
        let ext = BTreeMap::from([("nvidia.com/gpu".to_string(), 1u64)]);
        let inputs = node_status::inputs(&res, true, &ext, &ext);
        let st = node_status::status_patch(&name, &res, &inputs, "boot", "2026-12-07T00:00:01Z");
        let body = st.to_string().into_bytes();
        tally.time("patch nodes/status", &name, || {
            merge(srv, t_node, (&name, "status"), &body, "kubelet")
        })?;
        for (k, ds) in dss.iter().enumerate() {
            let pod_name = format!("{}-{i:05}", ds.metadata.name.as_deref().unwrap_or("ds"));
            let pod = new_pod(ds, &name, &pod_name);
            pods.push((pod_name, Containers::of(&pod), i, k));
            let body = serde_json::to_value(&pod).map_err(render)?;
            let name = &pods[pods.len() - 1].0;
            tally.time("create pods", name, || {
                create(t_pod, body, "kube-controller-manager")
            })?;
        }
        names.push(name);
    }
    for phase in ["Pending", "Running"] {
        for (pod_name, containers, i, k) in &pods {
            let body = pod_status(containers, phase, *i, *k)
                .to_string()
                .into_bytes();
            tally.time("patch pods/status", pod_name, || {
                merge(srv, t_pod, (pod_name, "status"), &body, "kubelet")
            })?;
        }
    }
    let labels: serde_json::Map<String, Value> = (0..40)
        .map(|l| {
            (
                format!("nvidia.com/gfd.label-{l:02}"),
                json!(format!("value-{l}")),
            )
        })
        .collect();
    let body = json!({"metadata": {"labels": labels}})
        .to_string()
        .into_bytes();
    for name in &names {
        tally.time("patch nodes", name, || {
            merge(srv, t_node, (name, ""), &body, "gpu-feature-discovery")
        })?;
    }
    for r in 1..=3 {
        let at = format!("2026-12-07T00:00:{:02}.000000Z", r * 10);
        let body = json!({"spec": {"renewTime": at}}).to_string().into_bytes();
        for name in &names {
            tally.time("patch leases", name, || {
                merge(srv, t_lease, (name, ""), &body, "kubelet")
            })?;
        }
    }
    Ok(tally)
}

/// A merge patch as the HTTP route makes it: the answer is the stored JSON.
fn merge(
    srv: &ApiServer,
    t: &Target,
    (name, sub): (&str, &str),
    body: &[u8],
    manager: &str,
) -> Result<bytes::Bytes, ApiError> {
    let mut checks = Checks::default();
    let kind = PatchType::Merge;
    let (served, _) =
        srv.patch_checked(t, name, sub, kind, body, Some(manager), false, &mut checks)?;
    Ok(served.body())
}

/// The sim kubelet's status patch of operand pod `k` on node `i`: waiting, then running.
fn pod_status(containers: &Containers, phase: &str, i: usize, k: usize) -> Value {
    let at = format!("2026-12-07T00:{:02}:{:02}Z", (i / 60) % 60, i % 60);
    let (state, inits, initialized) = if phase == "Pending" {
        let waiting = CState::Waiting {
            reason: "PodInitializing".into(),
            message: String::new(),
        };
        (waiting, Vec::new(), containers.init.is_empty())
    } else {
        let done = InitStatus {
            state: CState::Terminated {
                code: 0,
                reason: "Completed".into(),
                message: String::new(),
                started: at.clone(),
                finished: at.clone(),
            },
            last: None,
            restarts: 0,
        };
        let running = CState::Running {
            started: at.clone(),
        };
        (running, vec![done; containers.init.len()], true)
    };
    status_patch(&StatusView {
        uid: "",
        containers,
        phase,
        state: &state,
        last: None,
        restarts: 0,
        inits: &inits,
        initialized,
        host_ip: "10.64.0.1",
        pod_ip: &format!("10.65.{}.{}", i % 256, k),
        started: &at,
        reason: None,
        now: &at,
    })
}
