//! Lifecycle of the pods bound to a node, one tokio task per pod: admission, device allocation
//! through the plugins, Pending → Running → Succeeded/Failed, restarts per restartPolicy,
//! in-process agents for operand pods, graceful deletion, and GPU load on the SimBackend.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use gantry_api::names;
use gantry_gpu::{Backend, SimProcess};
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::agents::{AgentContext, AgentRegistry, DRIVER, agent_command, driver_image};
use super::{NodeShared, PodRef, admission, lock, plugins, volumes};

/// How long an in-process agent gets to stop after its pod is deleted.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Restart back-off: doubles from here per restart, capped (the kubelet's 10 s / 5 min,
/// scaled down so simulations move).
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

static NEXT_PID: AtomicU32 = AtomicU32::new(10_000);

/// What the pod tasks share beyond their node.
#[derive(Clone)]
pub struct PodEnv {
    pub client: kube::Client,
    pub agents: Arc<AgentRegistry>,
}

/// A running pod task: the latest object (None = gone from the API) and the task.
pub struct PodHandle {
    tx: watch::Sender<Option<Arc<Pod>>>,
    task: JoinHandle<()>,
}

impl Drop for PodHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn pod_ref(pod: &Pod) -> Option<PodRef> {
    Some(PodRef {
        uid: pod.metadata.uid.clone()?,
        name: pod.metadata.name.clone()?,
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
    })
}

/// A pod bound to this node was added or changed.
pub fn on_pod(node: &Arc<NodeShared>, env: &PodEnv, pod: Pod) {
    let Some(r) = pod_ref(&pod) else { return };
    let pod = Arc::new(pod);
    let mut pods = lock(&node.pods);
    if let Some(h) = pods.get(&r.uid)
        && !h.task.is_finished()
    {
        h.tx.send_replace(Some(pod));
        return;
    }
    tracing::debug!(node = %node.name, pod = %r.name, "pod arrived");
    let (tx, rx) = watch::channel(Some(pod));
    let task = tokio::spawn(pod_task(node.clone(), env.clone(), r.clone(), rx));
    pods.insert(r.uid, PodHandle { tx, task });
}

/// A pod of this node is gone from the API.
pub fn on_pod_deleted(node: &Arc<NodeShared>, uid: &str) {
    if let Some(h) = lock(&node.pods).get(uid) {
        h.tx.send_replace(None);
    }
}

/// Uids of the pods this node runs.
pub fn known_pods(node: &NodeShared) -> Vec<String> {
    lock(&node.pods).keys().cloned().collect()
}

fn stopping(p: &Option<Arc<Pod>>) -> bool {
    p.as_ref()
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

/// Wait until the pod is being deleted (or gone).
async fn wait_stopping(rx: &mut watch::Receiver<Option<Arc<Pod>>>) {
    while !stopping(&rx.borrow_and_update()) {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Per-container state for the status.
#[derive(Debug, Clone, PartialEq)]
pub enum CState {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started: String,
    },
    Terminated {
        code: i32,
        reason: String,
        started: String,
        finished: String,
    },
}

impl CState {
    fn to_json(&self) -> Value {
        match self {
            CState::Waiting { reason, message } => {
                json!({"waiting": {"reason": reason, "message": message}})
            }
            CState::Running { started } => json!({"running": {"startedAt": started}}),
            CState::Terminated {
                code,
                reason,
                started,
                finished,
            } => json!({"terminated": {
                "exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished}}),
        }
    }
}

/// One init container's status.
#[derive(Debug, Clone, PartialEq)]
pub struct InitStatus {
    pub state: CState,
    pub last: Option<CState>,
    pub restarts: u32,
}

impl InitStatus {
    fn waiting() -> Self {
        InitStatus {
            state: CState::Waiting {
                reason: "PodInitializing".into(),
                message: String::new(),
            },
            last: None,
            restarts: 0,
        }
    }
}

/// The status patch for a pod, pure.
pub struct StatusView<'a> {
    pub pod: &'a Pod,
    pub phase: &'a str,
    /// State of every main container.
    pub state: &'a CState,
    pub last: Option<&'a CState>,
    pub restarts: u32,
    /// Init containers by position; missing entries have not started (`PodInitializing`).
    pub inits: &'a [InitStatus],
    /// Every init container has completed.
    pub initialized: bool,
    pub host_ip: &'a str,
    pub pod_ip: &'a str,
    pub started: &'a str,
    pub reason: Option<(&'a str, &'a str)>,
    pub now: &'a str,
}

fn container_status(
    v: &StatusView<'_>,
    c: &Container,
    state: &CState,
    last: Option<&CState>,
    ready: bool,
    restarts: u32,
) -> Value {
    let image = c.image.clone().unwrap_or_default();
    let mut s = json!({
        "name": c.name, "image": image,
        "imageID": format!("sim://{image}"),
        "containerID": format!("sim://{}-{}", v.pod.metadata.uid.clone().unwrap_or_default(), c.name),
        "ready": ready, "started": matches!(state, CState::Running { .. }),
        "restartCount": restarts, "state": state.to_json(),
    });
    if let Some(l) = last {
        s["lastState"] = l.to_json();
    }
    s
}

pub fn status_patch(v: &StatusView<'_>) -> Value {
    let spec = v.pod.spec.as_ref();
    let running = matches!(v.state, CState::Running { .. });
    let ready = running && v.phase == "Running" && v.initialized;
    let cond = |t: &str, ok: bool| json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": v.now});
    let containers: Vec<Value> = spec
        .map(|s| {
            s.containers
                .iter()
                .map(|c| container_status(v, c, v.state, v.last, ready, v.restarts))
                .collect()
        })
        .unwrap_or_default();
    let not_started = InitStatus::waiting();
    let inits: Vec<Value> = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let st = v.inits.get(i).unwrap_or(&not_started);
            let done = matches!(st.state, CState::Terminated { code: 0, .. });
            container_status(v, c, &st.state, st.last.as_ref(), done, st.restarts)
        })
        .collect();
    let initializing = !v.initialized && v.phase == "Pending";
    let mut status = json!({
        "phase": v.phase,
        "hostIP": v.host_ip,
        "hostIPs": [{"ip": v.host_ip}],
        "podIP": v.pod_ip,
        "podIPs": [{"ip": v.pod_ip}],
        "startTime": v.started,
        "conditions": [
            cond("PodReadyToStartContainers", running || initializing),
            cond("Initialized", v.initialized),
            cond("ContainersReady", ready),
            cond("Ready", ready),
            cond("PodScheduled", true),
        ],
        "containerStatuses": containers,
        "initContainerStatuses": inits,
        "qosClass": "BestEffort",
    });
    match v.reason {
        Some((reason, message)) => {
            status["reason"] = json!(reason);
            status["message"] = json!(message);
        }
        None => {
            status["reason"] = Value::Null;
            status["message"] = Value::Null;
        }
    }
    json!({ "status": status })
}

struct Ctx {
    node: Arc<NodeShared>,
    env: PodEnv,
    r: PodRef,
    rx: watch::Receiver<Option<Arc<Pod>>>,
    host_ip: String,
    pod_ip: String,
    started: String,
    /// Init container statuses, and whether all of them have completed.
    inits: std::sync::Mutex<(Vec<InitStatus>, bool)>,
}

impl Ctx {
    fn api(&self) -> Api<Pod> {
        Api::namespaced(self.env.client.clone(), &self.r.namespace)
    }

    async fn patch_status(
        &self,
        phase: &str,
        state: &CState,
        last: Option<&CState>,
        restarts: u32,
        reason: Option<(&str, &str)>,
    ) {
        let Some(pod) = self.rx.borrow().clone() else {
            return;
        };
        let n = now();
        let (inits, initialized) = lock(&self.inits).clone();
        let patch = status_patch(&StatusView {
            pod: &pod,
            phase,
            state,
            last,
            restarts,
            inits: &inits,
            initialized,
            host_ip: &self.host_ip,
            pod_ip: &self.pod_ip,
            started: &self.started,
            reason,
            now: &n,
        });
        if let Err(e) = self
            .api()
            .patch_status(&self.r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(node = %self.node.name, pod = %self.r.name, error = %e, "pod status patch failed");
        }
    }

    /// Remove a pod that is being deleted: the kubelet's final delete with grace 0.
    async fn finalize(&self) {
        if self.rx.borrow().is_none() {
            return;
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.r.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.api().delete(&self.r.name, &dp).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => tracing::debug!(pod = %self.r.name, error = %e, "final pod delete failed"),
        }
    }
}

async fn pod_task(
    node: Arc<NodeShared>,
    env: PodEnv,
    r: PodRef,
    rx: watch::Receiver<Option<Arc<Pod>>>,
) {
    // The pod's container logs go when the pod leaves the node (or the task is aborted).
    let _logs = crate::logs::PodLogs(r.uid.clone());
    let host_ip = node.resources.internal_ip();
    let Some(pod) = rx.borrow().clone() else {
        return;
    };
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
        rx,
        host_ip,
        pod_ip,
        started: now(),
        inits: std::sync::Mutex::new((Vec::new(), false)),
    };
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    if !stopping(&Some(pod.clone())) && phase != "Succeeded" && phase != "Failed" {
        run_pod(&mut ctx, &pod).await;
    }
    wait_stopping(&mut ctx.rx).await;
    ctx.finalize().await;
    // Drop our own handle (unless a new pod with the same uid replaced it: impossible).
    lock(&ctx.node.pods).remove(&ctx.r.uid);
}

/// Admit, allocate, run (with restarts), and release. Returns when the pod is terminal or
/// stopping.
async fn run_pod(ctx: &mut Ctx, pod: &Pod) {
    let Some(spec) = pod.spec.clone() else { return };
    let node = ctx.node.clone();
    let waiting = CState::Waiting {
        reason: "ContainerCreating".into(),
        message: String::new(),
    };
    // ---- admission: the node, then volumes (waiting, as the kubelet does) ----
    if let Ok(n) = Api::<Node>::all(ctx.env.client.clone())
        .get(&node.name)
        .await
        && let Some((reason, message)) = volumes::node_refuses(&spec, &n)
    {
        ctx.patch_status("Failed", &waiting, None, 0, Some((&reason, &message)))
            .await;
        return;
    }
    if !mount_volumes(ctx, &spec, &waiting).await {
        return;
    }
    let wanted = match admission::pod_requests(&spec) {
        Ok(w) => w,
        Err(e) => {
            ctx.patch_status(
                "Failed",
                &waiting,
                None,
                0,
                Some(("InvalidResourceRequests", &e)),
            )
            .await;
            return;
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
        ctx.patch_status(
            "Failed",
            &waiting,
            None,
            0,
            Some((&rej.reason, &rej.message)),
        )
        .await;
        return;
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
        allocate_all(&node, &ctx.r, &spec, &mut record, &mut gpu_ids).await
    };
    if let Err(e) = alloc_result {
        release(&node, &ctx.r.uid, &[]);
        ctx.patch_status(
            "Failed",
            &waiting,
            None,
            0,
            Some(("UnexpectedAdmissionError", &e)),
        )
        .await;
        return;
    }
    if !record.is_empty() {
        let body = Value::Object(record).to_string();
        let patch = json!({"metadata": {"annotations": {names::ANNOTATION_SIM_ALLOCATED: body}}});
        if let Err(e) = ctx
            .api()
            .patch(&ctx.r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(pod = %ctx.r.name, error = %e, "allocation annotation patch failed");
        }
    }
    let pids = start_gpu_load(&node, &gpu_ids);
    run_containers_with_restarts(ctx, pod, &spec).await;
    release(&node, &ctx.r.uid, &pids);
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
        volumes::warn_event(
            &ctx.env.client,
            &ctx.r,
            &ctx.node.name,
            "FailedMount",
            &message,
        )
        .await;
        ctx.patch_status("Pending", waiting, None, 0, None).await;
        let stopped = tokio::select! {
            _ = tokio::time::sleep(delay) => false,
            _ = wait_stopping(&mut ctx.rx) => true,
        };
        if stopped {
            return false;
        }
        delay = (delay * 2).min(Duration::from_secs(8));
    }
}

async fn allocate_all(
    node: &NodeShared,
    r: &PodRef,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    record: &mut serde_json::Map<String, Value>,
    gpu_ids: &mut Vec<String>,
) -> Result<(), String> {
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c, true))
        .chain(spec.containers.iter().map(|c| (c, false)));
    for (c, init) in all {
        let mut per_container = serde_json::Map::new();
        let requests = admission::pod_requests(&k8s_openapi::api::core::v1::PodSpec {
            containers: vec![c.clone()],
            ..Default::default()
        })?;
        for (resource, n) in requests {
            if n <= 0 || !lock(&node.devices).is_plugin_resource(&resource) {
                continue;
            }
            let a = plugins::allocate(node, r, &c.name, init, &resource, n as usize)
                .await
                .map_err(|e| e.to_string())?;
            if !init {
                gpu_ids.extend(a.device_ids.iter().cloned());
            }
            let resp = &a.response;
            per_container.insert(
                resource,
                json!({
                    "deviceIDs": a.device_ids,
                    "envs": resp.envs,
                    "annotations": resp.annotations,
                    "cdiDevices": resp.cdi_devices.iter().map(|d| d.name.clone()).collect::<Vec<_>>(),
                    "mounts": resp.mounts.iter().map(|m| json!({"containerPath": m.container_path, "hostPath": m.host_path, "readOnly": m.read_only})).collect::<Vec<_>>(),
                    "devices": resp.devices.iter().map(|d| json!({"containerPath": d.container_path, "hostPath": d.host_path, "permissions": d.permissions})).collect::<Vec<_>>(),
                }),
            );
        }
        if !per_container.is_empty() {
            record.insert(c.name.clone(), Value::Object(per_container));
        }
    }
    Ok(())
}

/// Register a busy process on each simulated GPU (or MIG device) the pod got, so NVML
/// utilisation, memory, power and the process list move. Returns the pids.
fn start_gpu_load(node: &NodeShared, ids: &[String]) -> Vec<u32> {
    let Some(backend) = &node.backend else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    let count = backend.device_count().unwrap_or(0);
    for id in ids {
        // Time-sliced replicas advertise `<uuid>::<n>`.
        let uuid = id.split("::").next().unwrap_or(id);
        for gpu in 0..count {
            let (gi, ci, mem) = match backend.device_info(gpu) {
                Ok(info) if info.uuid == uuid => (
                    None,
                    None,
                    backend.memory(gpu).map(|m| m.total_mib).unwrap_or(0),
                ),
                Ok(_) => match backend
                    .mig_devices(gpu)
                    .ok()
                    .and_then(|ds| ds.into_iter().find(|d| d.uuid == uuid))
                {
                    Some(d) => {
                        let mem = backend
                            .mig_device_memory(&d.uuid)
                            .map(|m| m.total_mib)
                            .unwrap_or(0);
                        (Some(d.gpu_instance_id), Some(d.compute_instance_id), mem)
                    }
                    None => continue,
                },
                Err(_) => continue,
            };
            let pid = NEXT_PID.fetch_add(1, Ordering::Relaxed);
            let p = SimProcess {
                pid,
                gpu,
                gpu_instance: gi,
                compute_instance: ci,
                memory_mib: mem * 7 / 10,
                utilization: 0.85,
            };
            if backend.start_process(p).is_ok() {
                pids.push(pid);
            }
            break;
        }
    }
    pids
}

fn release(node: &NodeShared, uid: &str, pids: &[u32]) {
    if let Some(b) = &node.backend {
        for pid in pids {
            b.stop_process(*pid);
        }
    }
    lock(&node.devices).release(uid);
    lock(&node.admitted).remove(uid);
}

/// One container's run: its exit code and a message.
type ContainerRun = std::pin::Pin<Box<dyn std::future::Future<Output = (i32, String)> + Send>>;

enum Outcome {
    Exited(i32, String),
    Stopped,
    PowerLost,
}

/// Back-off before restart number `restarts + 1`.
fn backoff(restarts: u32) -> Duration {
    BACKOFF_START
        .saturating_mul(1 << restarts.min(6))
        .min(BACKOFF_MAX)
}

fn crash_loop(backoff: Duration) -> CState {
    CState::Waiting {
        reason: "CrashLoopBackOff".into(),
        message: format!(
            "back-off {}s restarting failed container",
            backoff.as_secs()
        ),
    }
}

fn pod_initializing() -> CState {
    CState::Waiting {
        reason: "PodInitializing".into(),
        message: String::new(),
    }
}

/// Drive one run future to its end, or until the pod stops or the node loses power (then ask
/// it to stop and give it the grace period).
async fn supervise(
    run: ContainerRun,
    stop_tx: watch::Sender<bool>,
    rx: &mut watch::Receiver<Option<Arc<Pod>>>,
    power: &mut watch::Receiver<bool>,
) -> Outcome {
    tokio::pin!(run);
    let outcome = loop {
        tokio::select! {
            (code, msg) = &mut run => return Outcome::Exited(code, msg),
            changed = rx.changed() => {
                if changed.is_err() || stopping(&rx.borrow_and_update()) {
                    break Outcome::Stopped;
                }
            }
            changed = power.changed() => {
                if changed.is_err() || !*power.borrow_and_update() {
                    break Outcome::PowerLost;
                }
            }
        }
    };
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(STOP_GRACE, &mut run).await;
    outcome
}

/// After a power loss: wait for power (false: the pod stopped meanwhile).
async fn wait_power(
    rx: &mut watch::Receiver<Option<Arc<Pod>>>,
    power: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        tokio::select! {
            c = power.changed() => {
                if c.is_err() { return false; }
                if *power.borrow_and_update() { return true; }
            }
            _ = wait_stopping(rx) => return false,
        }
    }
}

enum InitResult {
    Done,
    /// An init container failed and the pod does not restart: the pod has failed.
    Failed,
    Stopped,
    PowerLost,
}

/// Run the init containers in order, each to completion; a failed one restarts with back-off
/// (unless restartPolicy is Never) and the pod stays Pending meanwhile.
async fn run_inits(
    ctx: &Ctx,
    pod: &Pod,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    policy: &str,
    rx: &mut watch::Receiver<Option<Arc<Pod>>>,
    power: &mut watch::Receiver<bool>,
) -> InitResult {
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    *lock(&ctx.inits) = (vec![InitStatus::waiting(); inits.len()], inits.is_empty());
    let set = |i: usize, f: &dyn Fn(&mut InitStatus)| {
        if let Some(st) = lock(&ctx.inits).0.get_mut(i) {
            f(st);
        }
    };
    let main_waiting = pod_initializing();
    for (i, c) in inits.iter().enumerate() {
        loop {
            let started = now();
            set(i, &|st| {
                st.state = CState::Running {
                    started: started.clone(),
                }
            });
            ctx.patch_status("Pending", &main_waiting, None, 0, None)
                .await;
            let (stop_tx, stop_rx) = watch::channel(false);
            let run = container_run(ctx, pod, c, stop_rx, PlainRun::Immediate);
            let (code, msg) = match supervise(run, stop_tx, rx, power).await {
                Outcome::Exited(code, msg) => (code, msg),
                Outcome::Stopped => return InitResult::Stopped,
                Outcome::PowerLost => return InitResult::PowerLost,
            };
            let term = CState::Terminated {
                code,
                reason: if code == 0 { "Completed" } else { "Error" }.into(),
                started,
                finished: now(),
            };
            if code == 0 {
                set(i, &|st| st.state = term.clone());
                break;
            }
            tracing::info!(node = %ctx.node.name, pod = %ctx.r.name, container = %c.name, code, %msg, "init container failed");
            if policy == "Never" {
                set(i, &|st| st.state = term.clone());
                ctx.patch_status("Failed", &main_waiting, None, 0, None)
                    .await;
                return InitResult::Failed;
            }
            let restarts = lock(&ctx.inits).0.get(i).map_or(0, |st| st.restarts);
            let wait = backoff(restarts);
            set(i, &|st| {
                st.restarts += 1;
                st.last = Some(term.clone());
                st.state = crash_loop(wait);
            });
            ctx.patch_status("Pending", &main_waiting, None, 0, None)
                .await;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = wait_stopping(rx) => return InitResult::Stopped,
            }
        }
    }
    lock(&ctx.inits).1 = true;
    InitResult::Done
}

async fn run_containers_with_restarts(
    ctx: &Ctx,
    pod: &Pod,
    spec: &k8s_openapi::api::core::v1::PodSpec,
) {
    let policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    let mut restarts = 0u32;
    let mut last: Option<CState> = None;
    let mut power = ctx.node.power.subscribe();
    let mut rx = ctx.rx.clone();
    // A new sandbox (first start, or after the node lost power) runs the init containers again.
    'sandbox: loop {
        match run_inits(ctx, pod, spec, &policy, &mut rx, &mut power).await {
            InitResult::Done => {}
            InitResult::Failed | InitResult::Stopped => return,
            InitResult::PowerLost => {
                if !wait_power(&mut rx, &mut power).await {
                    return;
                }
                continue 'sandbox;
            }
        }
        loop {
            let started = now();
            let running = CState::Running {
                started: started.clone(),
            };
            ctx.patch_status("Running", &running, last.as_ref(), restarts, None)
                .await;
            let (stop_tx, stop_rx) = watch::channel(false);
            let run = run_containers(ctx, pod, spec, stop_rx);
            match supervise(run, stop_tx, &mut rx, &mut power).await {
                Outcome::Exited(code, msg) => {
                    let reason = if code == 0 { "Completed" } else { "Error" };
                    let term = CState::Terminated {
                        code,
                        reason: reason.into(),
                        started,
                        finished: now(),
                    };
                    let restart = policy == "Always" || (policy == "OnFailure" && code != 0);
                    if !msg.is_empty() {
                        tracing::info!(node = %ctx.node.name, pod = %ctx.r.name, code, %msg, "container ended");
                    }
                    if !restart {
                        let phase = if code == 0 { "Succeeded" } else { "Failed" };
                        ctx.patch_status(phase, &term, last.as_ref(), restarts, None)
                            .await;
                        return;
                    }
                    let wait = backoff(restarts);
                    restarts += 1;
                    ctx.patch_status("Running", &crash_loop(wait), Some(&term), restarts, None)
                        .await;
                    last = Some(term);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = wait_stopping(&mut rx) => return,
                    }
                }
                Outcome::Stopped => return,
                Outcome::PowerLost => {
                    // Nothing runs (and nothing is reported) until power returns.
                    if !wait_power(&mut rx, &mut power).await {
                        return;
                    }
                    restarts += 1;
                    continue 'sandbox;
                }
            }
        }
    }
}

/// What a container that is not an in-process agent does.
#[derive(Clone, Copy)]
enum PlainRun {
    /// Completes at once (plain init containers).
    Immediate,
    /// Runs for the pod's `sim.gantry.dev/run-time` (forever without it), then exits with
    /// `sim.gantry.dev/exit-code`.
    Annotated,
}

/// The in-process context for a runner-run container.
fn agent_context(
    ctx: &Ctx,
    pod: &Pod,
    c: &Container,
    args: Vec<String>,
    stop: watch::Receiver<bool>,
) -> AgentContext {
    AgentContext {
        node_name: ctx.node.name.clone(),
        host_root: ctx.node.dirs.host_root.clone(),
        device_plugin_dir: ctx.node.dirs.device_plugins.clone(),
        kubelet_socket: ctx.node.dirs.kubelet_socket(),
        pod_resources_socket: ctx.node.dirs.pod_resources_socket(),
        backend: ctx.node.backend.clone(),
        client: ctx.env.client.clone(),
        args,
        env: container_env(c, pod, &ctx.node.name),
        pod_name: ctx.r.name.clone(),
        pod_namespace: ctx.r.namespace.clone(),
        shutdown: stop,
        image: c.image.clone().unwrap_or_default(),
        driver_fail: ctx.node.driver_fail.subscribe(),
    }
}

/// One container's run: its runner in-process when it has one, else the plain behaviour.
fn container_run(
    ctx: &Ctx,
    pod: &Pod,
    c: &Container,
    stop: watch::Receiver<bool>,
    plain: PlainRun,
) -> ContainerRun {
    let agent = match driver_image(c) {
        Some(_) => ctx
            .env
            .agents
            .get(DRIVER)
            .map(|r| (DRIVER.to_string(), Vec::new(), r)),
        None => agent_command(c)
            .and_then(|(name, args)| ctx.env.agents.get(&name).map(|r| (name, args, r))),
    };
    // Each run of the container has a log (`kubectl logs`): an agent's tracing events.
    let log = crate::logs::start(&ctx.r.uid, &c.name);
    if let Some((name, args, runner)) = agent {
        let fut = crate::logs::capture(
            log.clone(),
            runner.run(agent_context(ctx, pod, c, args, stop)),
        );
        return Box::pin(async move {
            let r = match fut.await {
                Ok(()) => (0, String::new()),
                Err(e) => {
                    // What the process would print on its way out.
                    log.push(format!("Error: {e}"));
                    (1, format!("agent {name}: {e}"))
                }
            };
            log.end_run();
            r
        });
    }
    if let PlainRun::Immediate = plain {
        log.end_run();
        return Box::pin(async { (0, String::new()) });
    }
    let run_time = annotation(pod, names::ANNOTATION_SIM_RUN_TIME).map(|d| {
        gantry_k8s_rules::duration::parse_std_duration(d.trim()).map_err(|e| e.to_string())
    });
    let exit_code = annotation(pod, names::ANNOTATION_SIM_EXIT_CODE)
        .and_then(|c| c.trim().parse::<i32>().ok())
        .unwrap_or(0);
    let mut stop = stop;
    Box::pin(async move {
        let run = async {
            match run_time {
                Some(Ok(d)) => {
                    tokio::time::sleep(d).await;
                    (exit_code, String::new())
                }
                Some(Err(e)) => (
                    1,
                    format!("annotation {}: {e}", names::ANNOTATION_SIM_RUN_TIME),
                ),
                // No run time: runs until deleted.
                None => std::future::pending().await,
            }
        };
        // A plain container stops at once when asked (SIGTERM honoured: exit 0).
        let stopped = async {
            while !*stop.borrow_and_update() {
                if stop.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let r = tokio::select! {
            r = run => r,
            () = stopped => (0, String::new()),
        };
        log.end_run();
        r
    })
}

/// Run every main container of the pod once; returns the pod's exit code (first non-zero)
/// and a message.
fn run_containers(
    ctx: &Ctx,
    pod: &Pod,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    stop: watch::Receiver<bool>,
) -> ContainerRun {
    let futs: Vec<ContainerRun> = spec
        .containers
        .iter()
        .map(|c| container_run(ctx, pod, c, stop.clone(), PlainRun::Annotated))
        .collect();
    Box::pin(async move {
        futures::future::join_all(futs)
            .await
            .into_iter()
            .find(|(code, _)| *code != 0)
            .unwrap_or((0, String::new()))
    })
}

/// A container's env with the downward-API fields agents commonly read resolved.
fn container_env(c: &Container, pod: &Pod, node: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let v = match (&e.value, &e.value_from) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(from)) => {
                from.field_ref
                    .as_ref()
                    .and_then(|f| match f.field_path.as_str() {
                        "spec.nodeName" => Some(node.to_string()),
                        "metadata.name" => pod.metadata.name.clone(),
                        "metadata.namespace" => pod.metadata.namespace.clone(),
                        _ => None,
                    })
            }
            _ => None,
        };
        if let Some(v) = v {
            out.insert(e.name.clone(), v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_patch_shapes() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "main", "image": "img"}],
                     "initContainers": [{"name": "init", "image": "i"}]}
        }))
        .unwrap();
        let st = CState::Running {
            started: "t0".into(),
        };
        let p = status_patch(&StatusView {
            pod: &pod,
            phase: "Running",
            state: &st,
            last: None,
            restarts: 2,
            inits: &[InitStatus {
                state: CState::Terminated {
                    code: 0,
                    reason: "Completed".into(),
                    started: "t0".into(),
                    finished: "t0".into(),
                },
                last: None,
                restarts: 1,
            }],
            initialized: true,
            host_ip: "10.0.0.1",
            pod_ip: "10.244.0.2",
            started: "t0",
            reason: None,
            now: "t1",
        });
        let s = &p["status"];
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["containerStatuses"][0]["ready"], true);
        assert_eq!(s["containerStatuses"][0]["restartCount"], 2);
        assert_eq!(
            s["containerStatuses"][0]["state"]["running"]["startedAt"],
            "t0"
        );
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(s["initContainerStatuses"][0]["restartCount"], 1);
        assert_eq!(s["initContainerStatuses"][0]["ready"], true);
        let ready = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let term = CState::Terminated {
            code: 3,
            reason: "Error".into(),
            started: "a".into(),
            finished: "b".into(),
        };
        let p = status_patch(&StatusView {
            phase: "Failed",
            state: &term,
            reason: Some(("OutOfpods", "m")),
            ..StatusView {
                pod: &pod,
                phase: "",
                state: &st,
                last: None,
                restarts: 0,
                inits: &[],
                initialized: true,
                host_ip: "h",
                pod_ip: "p",
                started: "t0",
                reason: None,
                now: "t1",
            }
        });
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
        assert_eq!(p["status"]["reason"], "OutOfpods");
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(ready["status"], "False");
    }

    #[test]
    fn status_while_initializing() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "main", "image": "img"}],
                     "initContainers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}
        }))
        .unwrap();
        let failed = CState::Terminated {
            code: 1,
            reason: "Error".into(),
            started: "t0".into(),
            finished: "t1".into(),
        };
        let inits = [InitStatus {
            state: crash_loop(backoff(0)),
            last: Some(failed),
            restarts: 1,
        }];
        let p = status_patch(&StatusView {
            pod: &pod,
            phase: "Pending",
            state: &pod_initializing(),
            last: None,
            restarts: 0,
            inits: &inits,
            initialized: false,
            host_ip: "h",
            pod_ip: "p",
            started: "t0",
            reason: None,
            now: "t1",
        });
        let s = &p["status"];
        assert_eq!(s["phase"], "Pending");
        let a = &s["initContainerStatuses"][0];
        assert_eq!(a["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(a["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(a["restartCount"], 1);
        assert_eq!(
            s["initContainerStatuses"][1]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        let cond = |t: &str| {
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(cond("Initialized"), "False");
        assert_eq!(cond("Ready"), "False");
        assert_eq!(backoff(0), BACKOFF_START);
        assert_eq!(backoff(100), BACKOFF_MAX);
    }
}
