//! One pod's task: admission (node, volumes, resources), device allocation, the run with
//! restarts, release, and the kubelet's final delete.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gantry_api::names;
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::allocation::{allocate_all, release, start_gpu_load};
use super::ctx::{Ctx, NEXT_PID, PodEnv, now};
use super::deletion::{stopping, wait_stopping};
use super::restarts::run_containers_with_restarts;
use super::status::{CState, Containers};
use crate::kubelet::lock::lock;
use crate::kubelet::node::NodeShared;
use crate::kubelet::pod_ref::PodRef;
use crate::kubelet::{admission, env, volumes};

pub(super) async fn pod_task(
    node: Arc<NodeShared>,
    env: PodEnv,
    r: PodRef,
    pod: Arc<Pod>,
    rx: watch::Receiver<Option<Arc<Pod>>>,
) {
    // The pod's container logs go when the pod leaves the node (or the task is aborted).
    let _logs = crate::logs::PodLogs(r.uid.clone());
    let host_ip = node.resources.internal_ip();
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let pod_ip = if host_network {
        host_ip.clone()
    } else {
        let n = NEXT_PID.fetch_add(1, Ordering::Relaxed);
        format!("10.244.{}.{}", node.resources.index % 256, 2 + n % 250)
    };
    let mut ctx = Ctx {
        node,
        env,
        r,
        containers: Containers::of(&pod),
        admitted: None,
        restart_policy: String::new(),
        rx,
        host_volumes: Default::default(),
        host_ip,
        pod_ip,
        started: now(),
        inits: std::sync::Mutex::new((Vec::new(), false)),
        sources: Default::default(),
        device_env: Default::default(),
        status_out: Default::default(),
    };
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    // The latest version: the pod may be stopping already.
    let latest = ctx.rx.borrow().clone();
    if !stopping(&latest) && phase != "Succeeded" && phase != "Failed" {
        run_pod(&mut ctx, pod).await;
    } else {
        drop(pod);
    }
    wait_stopping(&mut ctx.rx).await;
    wait_powered(&mut ctx).await;
    Box::pin(ctx.finalize()).await;
    // Drop our own handle (unless a new pod with the same uid replaced it: impossible).
    lock(&ctx.node.pods).remove(&ctx.r.uid);
}

/// A kubelet without power confirms no deletion: the pod stays Terminating until the node
/// is back (or the pod is force-deleted, e.g. by the pod GC once the node is deleted).
async fn wait_powered(ctx: &mut Ctx) {
    let mut power = ctx.node.power.subscribe();
    while !*power.borrow_and_update() && ctx.rx.borrow().is_some() {
        tokio::select! {
            c = power.changed() => if c.is_err() { return },
            c = ctx.rx.changed() => if c.is_err() { return },
        }
    }
}

/// Does the node refuse the pod (affinity, NoExecute taints)? The cached Node answers when it
/// admits; a refusal is confirmed against the API, so a label added just before the pod was
/// bound, not yet in the cache, never fails a pod.
async fn node_refuses(ctx: &Ctx, spec: &PodSpec) -> Option<(String, String)> {
    let cached = ctx.env.nodes.get(&ObjectRef::new(&ctx.node.name));
    if let Some(n) = &cached
        && volumes::node_refuses(spec, n).is_none()
    {
        return None;
    }
    let n = Api::<Node>::all(ctx.env.client.clone())
        .get(&ctx.node.name)
        .await
        .ok()?;
    volumes::node_refuses(spec, &n)
}

/// Admit, allocate, run (with restarts), and release. Returns when the pod is terminal or
/// stopping.
async fn run_pod(ctx: &mut Ctx, pod: Arc<Pod>) {
    // Admission's API and device plugin calls are boxed (as are the init containers' run and
    // the final delete): inline, they made every pod task's future 5-6 KB for as long as the
    // pod ran; it is ~2 KB.
    let Some(pids) = Box::pin(admit(ctx, &pod)).await else {
        return;
    };
    drop(pod);
    run_containers_with_restarts(ctx).await;
    release(&ctx.node, &ctx.r.uid, &pids);
}

/// Admission (the node, volumes, env sources, resources) and device allocation; the pod's
/// GPU processes once admitted, `None` when it was rejected or began stopping.
async fn admit(ctx: &mut Ctx, pod: &Pod) -> Option<Vec<u32>> {
    let spec = pod.spec.as_ref()?;
    let node = ctx.node.clone();
    let waiting = CState::Waiting {
        reason: "ContainerCreating".into(),
        message: String::new(),
    };
    // ---- admission: the node, then volumes (waiting, as the kubelet does) ----
    if let Some((reason, message)) = node_refuses(ctx, spec).await {
        reject(ctx, &waiting, &reason, &message).await;
        return None;
    }
    if !mount_volumes(ctx, spec, &waiting).await {
        return None;
    }
    if !read_env_sources(ctx, pod).await {
        return None;
    }
    let wanted = match admission::pod_requests(spec) {
        Ok(w) => w,
        Err(e) => {
            reject(ctx, &waiting, "InvalidResourceRequests", &e).await;
            return None;
        }
    };
    let rejection = {
        let (_, ext) = node.extended();
        let mut alloc = node.resources.native();
        alloc.extend(ext.into_iter().map(|(k, v)| (k, v as i128)));
        let mut admitted = lock(&node.admitted);
        let r = admission::admit(&wanted, &alloc, admitted.values());
        if r.is_ok() {
            admitted.insert(ctx.r.uid.clone(), wanted.clone());
        }
        r.err()
    };
    if let Some(rej) = rejection {
        reject(ctx, &waiting, &rej.reason, &rej.message).await;
        return None;
    }
    // ---- devices ----
    let mut record = serde_json::Map::new();
    let mut gpu_ids: Vec<String> = Vec::new();
    let alloc_result = {
        let _guard = node.alloc_lock.lock().await;
        let containers: Vec<(String, bool)> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), true))
            .chain(spec.containers.iter().map(|c| (c.name.clone(), false)))
            .collect();
        lock(&node.devices).track(&ctx.r.uid, &ctx.r.name, &ctx.r.namespace, &containers);
        allocate_all(&node, &ctx.r, spec, &mut record, &mut gpu_ids).await
    };
    if let Err(e) = alloc_result {
        release(&node, &ctx.r.uid, &[]);
        reject(ctx, &waiting, "UnexpectedAdmissionError", &e).await;
        return None;
    }
    {
        let mut dev = lock(&ctx.device_env);
        for (container, per) in &record {
            let envs = per
                .as_object()
                .into_iter()
                .flat_map(|m| m.values())
                .filter_map(|a| a.get("envs").and_then(Value::as_object))
                .flatten()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())));
            dev.entry(container.clone()).or_default().extend(envs);
        }
    }
    if !record.is_empty() {
        let body = Value::Object(record).to_string();
        let patch = json!({"metadata": {"annotations": {names::ANNOTATION_SIM_ALLOCATED: body}}});
        if let Err(e) = ctx
            .writes()
            .patch(&ctx.r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(pod = %ctx.r.name, error = %e, "allocation annotation patch failed");
        }
    }
    let pids = start_gpu_load(&node, &gpu_ids);
    ctx.admitted(pod);
    Some(pids)
}

/// The kubelet's `rejectPod`: a Warning Event with the reason, and the pod Failed with it.
async fn reject(ctx: &Ctx, waiting: &CState, reason: &str, message: &str) {
    let event = message
        .strip_prefix("Pod was rejected: ")
        .unwrap_or(message);
    volumes::warn_event(&ctx.env.events, &ctx.r, &ctx.node.name, reason, event).await;
    ctx.patch_status("Failed", waiting, None, 0, Some((reason, message)));
}

/// Waits until every ConfigMap and Secret the pod mounts exists, leaving the pod Pending
/// in `ContainerCreating` with a `FailedMount` event per failed attempt (retried with
/// back-off). False: the pod began stopping first.
async fn mount_volumes(ctx: &mut Ctx, spec: &PodSpec, waiting: &CState) -> bool {
    let mut delay = Duration::from_millis(500);
    loop {
        let Some((_, message)) =
            volumes::first_missing(&ctx.env.client, &ctx.r.namespace, spec).await
        else {
            return true;
        };
        if !back_off(ctx, waiting, "FailedMount", &message, &mut delay).await {
            return false;
        }
    }
}

/// Waits until every container's env resolves (its ConfigMaps, Secrets and keys exist),
/// leaving the pod Pending with `CreateContainerConfigError` and a `Failed` event per attempt,
/// as the kubelet does. False: the pod began stopping first.
async fn read_env_sources(ctx: &mut Ctx, pod: &Pod) -> bool {
    if env::referenced(pod).is_empty() {
        return true;
    }
    let mut delay = Duration::from_millis(500);
    loop {
        let attempt = env::fetch(&ctx.env.client, &ctx.r.namespace, pod).await;
        let problem = match &attempt {
            Err(e) => e.clone(),
            Ok(sources) => {
                let spec = pod.spec.iter();
                let first = spec
                    .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                    .find_map(|c| env::resolve(c, pod, &ctx.node.name, sources).err());
                match first {
                    None => {
                        if let Ok(s) = attempt {
                            *lock(&ctx.sources) = s;
                        }
                        return true;
                    }
                    Some(e) => e,
                }
            }
        };
        let waiting = CState::Waiting {
            reason: "CreateContainerConfigError".into(),
            message: problem.clone(),
        };
        let message = format!("Error: {problem}");
        if !back_off(ctx, &waiting, "Failed", &message, &mut delay).await {
            return false;
        }
    }
}

/// One failed attempt to start the containers: a `Warning` event with `reason`, the pod
/// Pending with `waiting`, then the back-off (doubling to 8 s). False: the pod began stopping.
async fn back_off(
    ctx: &mut Ctx,
    waiting: &CState,
    reason: &str,
    message: &str,
    delay: &mut Duration,
) -> bool {
    volumes::warn_event(&ctx.env.events, &ctx.r, &ctx.node.name, reason, message).await;
    ctx.patch_status("Pending", waiting, None, 0, None);
    let stopped = tokio::select! {
        _ = tokio::time::sleep(*delay) => false,
        _ = wait_stopping(&mut ctx.rx) => true,
    };
    *delay = (*delay * 2).min(Duration::from_secs(8));
    !stopped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::node_status::NodeResources;

    /// A pod task's future lives as long as its pod runs, for every pod of every simulated
    /// node (35,000 at 5,000 nodes). It stays small: with admission's calls, the final delete
    /// and a decoded `Pod` inline it was 5-6 KB.
    #[tokio::test]
    async fn a_pod_tasks_future_stays_small() {
        let nowhere = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no server"))
        });
        let client = kube::Client::new(nowhere, "default");
        let dir = tempfile::tempdir().unwrap();
        let node = NodeShared::new(dir.path(), "n", NodeResources::for_gpus(None, 0, 0), None);
        let env = PodEnv {
            client: client.clone(),
            agents: Arc::new(crate::kubelet::AgentRegistry::new()),
            nodes: kube::runtime::reflector::store::Writer::default().as_reader(),
            events: gantry_runtime::events::Recorder::new(client, "kubelet", "kubelet"),
        };
        let r = PodRef {
            name: "p".into(),
            namespace: "default".into(),
            uid: "u".into(),
        };
        let (_tx, rx) = watch::channel(None);
        let task = pod_task(node, env, r, Arc::new(Pod::default()), rx);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 3 * 1024, "a pod task's future is {size} bytes");
    }
}
