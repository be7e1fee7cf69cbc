//! What a pod task works with: its node, what all pod tasks share, and the pod it watches.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::watch;

use super::status::{CState, Containers, InitStatus, StatusView, status_patch};
use crate::kubelet::env;
use crate::kubelet::in_process::AgentRegistry;
use crate::kubelet::lock::lock;
use crate::kubelet::node::NodeShared;
use crate::kubelet::pod_ref::PodRef;
use crate::written::Written;

/// The next simulated process id (and pod IP suffix).
pub(super) static NEXT_PID: AtomicU32 = AtomicU32::new(10_000);

/// What the pod tasks share beyond their node.
#[derive(Clone)]
pub struct PodEnv {
    pub client: kube::Client,
    pub agents: Arc<AgentRegistry>,
    /// Every Node, from one watch (a real kubelet's node lister): admission reads its node
    /// here instead of one GET per pod.
    pub nodes: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
    /// The kubelets' Events (`kubelet`, reported from each node).
    pub events: gantry_runtime::events::Recorder,
}

/// Now, as the API writes timestamps (UTC, whole seconds).
pub(super) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// One pod task's state.
pub(super) struct Ctx {
    pub(super) node: Arc<NodeShared>,
    pub(super) env: PodEnv,
    pub(super) r: PodRef,
    /// The pod's containers by name and image, for its status writes.
    pub(super) containers: Containers,
    /// Once admitted, what its containers' runs read of it as JSON (see [`Ctx::admitted`]).
    pub(super) admitted: Option<Arc<[u8]>>,
    /// The admitted pod's `restartPolicy` (`Always` when unset).
    pub(super) restart_policy: String,
    /// The pod's hostPath volumes, read once it is admitted.
    pub(super) host_volumes: HostVolumes,
    /// The latest version (`None` once it is gone from the API).
    pub(super) rx: watch::Receiver<Option<Arc<Pod>>>,
    pub(super) host_ip: String,
    pub(super) pod_ip: String,
    pub(super) started: String,
    /// Init container statuses, and whether all of them have completed.
    pub(super) inits: std::sync::Mutex<(Vec<InitStatus>, bool)>,
    /// The ConfigMaps and Secrets the containers' env names, read before they start.
    pub(super) sources: std::sync::Mutex<env::Sources>,
    /// Per container: the env its device plugins' Allocate answers gave.
    pub(super) device_env: std::sync::Mutex<
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    >,
    pub(super) status_out: Arc<StatusOut>,
}

impl Ctx {
    /// `pod` (as it arrived: later versions carry no spec, see [`super::on_pod`]) is
    /// admitted: keep of it only what its containers' runs and env read, as JSON, decoded
    /// again for each start of its sandbox or containers ([`Ctx::admitted_pod`]). A typed
    /// `Container` is 2 KB before its strings and a node's operand pods have 17 of them: kept
    /// typed, the running pods were the largest part of a simulated node's memory. Its
    /// volumes become [`HostVolumes`] (their ConfigMaps and Secrets were checked when they
    /// were mounted); placement and `managedFields` go; the status carries the IPs this
    /// kubelet gave the pod, which the downward API's `status.podIP` and `status.hostIP` read.
    pub(super) fn admitted(&mut self, pod: &Pod) {
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        self.host_volumes = HostVolumes::of(spec);
        self.restart_policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let kept = Pod {
            metadata: ObjectMeta {
                managed_fields: None,
                ..pod.metadata.clone()
            },
            spec: Some(PodSpec {
                volumes: None,
                affinity: None,
                tolerations: None,
                node_selector: None,
                ..spec.clone()
            }),
            status: Some(PodStatus {
                host_ip: Some(self.host_ip.clone()),
                pod_ip: Some(self.pod_ip.clone()),
                ..PodStatus::default()
            }),
        };
        // Encoding a typed Pod cannot fail.
        self.admitted = serde_json::to_vec(&kept).ok().map(Arc::from);
    }

    /// The admitted pod, decoded (see [`Ctx::admitted`]); `None` before admission.
    pub(super) fn admitted_pod(&self) -> Option<Pod> {
        let json = self.admitted.as_ref()?;
        match serde_json::from_slice(json) {
            Ok(p) => Some(p),
            Err(e) => {
                // Encoded above from a Pod: cannot fail short of a bug.
                tracing::error!(pod = %self.r.name, error = %e, "admitted pod does not decode");
                None
            }
        }
    }

    pub(super) fn api(&self) -> Api<Pod> {
        Api::namespaced(self.env.client.clone(), &self.r.namespace)
    }

    /// For writes whose answer is not read (see [`Written`]).
    pub(super) fn writes(&self) -> Api<Written<Pod>> {
        Api::namespaced(self.env.client.clone(), &self.r.namespace)
    }

    /// Hands the pod's status to its [`StatusOut`]: written at once when no write of it is in
    /// flight, else as soon as that one is answered, replacing any it superseded meanwhile.
    pub(super) fn patch_status(
        &self,
        phase: &str,
        state: &CState,
        last: Option<&CState>,
        restarts: u32,
        reason: Option<(&str, &str)>,
    ) {
        if self.rx.borrow().is_none() {
            return;
        }
        let n = now();
        let (inits, initialized) = lock(&self.inits).clone();
        let patch = status_patch(&StatusView {
            uid: &self.r.uid,
            containers: &self.containers,
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
        if self.status_out.offer(patch) {
            tokio::spawn(write_statuses(
                self.status_out.clone(),
                self.writes(),
                self.r.name.clone(),
                self.rx.clone(),
            ));
        }
    }

    /// Remove a pod that is being deleted: the kubelet's final delete with grace 0.
    pub(super) async fn finalize(&self) {
        // The status the pod ended with goes out before the pod does, as upstream's status
        // manager deletes a pod only once its final status is written.
        self.status_out.flushed().await;
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

/// A pod's hostPath volumes: (name, host path).
#[derive(Default)]
pub(super) struct HostVolumes(Vec<(String, PathBuf)>);

impl HostVolumes {
    pub(super) fn of(spec: &PodSpec) -> Self {
        Self(
            spec.volumes
                .iter()
                .flatten()
                .filter_map(|v| Some((v.name.clone(), PathBuf::from(&v.host_path.as_ref()?.path))))
                .collect(),
        )
    }

    /// The host path of the hostPath volume `name`.
    pub(super) fn path(&self, name: &str) -> Option<&Path> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_path())
    }
}

/// A pod's status writes, as the kubelet's status manager makes them: at most one in flight,
/// and only the latest status waits behind it. A pod whose init containers finish while
/// their first status is being written (a loaded API server) writes the next status once,
/// not once per container; and the pod task never waits on the API to run its containers.
#[derive(Default)]
pub(super) struct StatusOut {
    state: std::sync::Mutex<OutState>,
    idle: tokio::sync::Notify,
}

#[derive(Default)]
struct OutState {
    latest: Option<serde_json::Value>,
    writing: bool,
}

impl StatusOut {
    /// Keeps `patch` as the next status to write; true when no writer runs (start one).
    fn offer(&self, patch: serde_json::Value) -> bool {
        let mut s = lock(&self.state);
        s.latest = Some(patch);
        !std::mem::replace(&mut s.writing, true)
    }

    /// The next status to write, or `None` (and the writer stops) when there is none.
    fn next(&self) -> Option<serde_json::Value> {
        let mut s = lock(&self.state);
        let next = s.latest.take();
        if next.is_none() {
            s.writing = false;
            drop(s);
            self.idle.notify_waiters();
        }
        next
    }

    /// Puts back a status whose write failed, unless a newer one is waiting.
    fn retry(&self, patch: serde_json::Value) {
        let mut s = lock(&self.state);
        if s.latest.is_none() {
            s.latest = Some(patch);
        }
    }

    /// Returns once every status offered so far has been written (or refused).
    pub(super) async fn flushed(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !lock(&self.state).writing {
                return;
            }
            idle.await;
        }
    }
}

/// The writer [`StatusOut::offer`] asks for: writes until nothing is left to write. A write
/// that does not reach the API server (a connection lost) is tried again after a back-off
/// unless a newer status came meanwhile, as upstream's status manager re-sends a status the
/// API does not have; one the API refuses is not (it would be refused again).
async fn write_statuses(
    out: Arc<StatusOut>,
    api: Api<Written<Pod>>,
    name: String,
    mut rx: watch::Receiver<Option<Arc<Pod>>>,
) {
    let mut delay = RETRY_FIRST;
    while let Some(patch) = out.next() {
        if rx.borrow().is_none() {
            continue;
        }
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => delay = RETRY_FIRST,
            Err(e @ kube::Error::Api(_)) => {
                tracing::debug!(pod = %name, error = %e, "pod status patch refused");
            }
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, retry_in = ?delay, "pod status patch failed");
                out.retry(patch);
                // The pod gone from the API ends the wait: nothing is left to report.
                let _ = tokio::time::timeout(delay, rx.wait_for(Option::is_none)).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}

/// The first wait before a failed status write is tried again, and the longest.
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(500);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn only_the_latest_status_waits_behind_the_one_in_flight() {
        let out = Arc::new(StatusOut::default());
        assert!(
            out.offer(json!({"n": 1})),
            "the first status starts a writer"
        );
        assert_eq!(out.next(), Some(json!({"n": 1})));
        // While it is being written, two more come: the second replaces the first.
        assert!(!out.offer(json!({"n": 2})));
        assert!(!out.offer(json!({"n": 3})));
        let waiting = tokio::spawn({
            let out = out.clone();
            async move { out.flushed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a status is still to be written");
        assert_eq!(out.next(), Some(json!({"n": 3})));
        assert_eq!(out.next(), None, "nothing left: the writer stops");
        waiting.await.expect("flushed once the writer stopped");
        assert!(
            out.offer(json!({"n": 4})),
            "a later status starts a new writer"
        );
    }

    #[test]
    fn a_failed_status_is_tried_again_unless_a_newer_one_waits() {
        let out = StatusOut::default();
        out.offer(json!({"n": 1}));
        let failed = out.next().expect("the first status");
        out.retry(failed);
        assert_eq!(out.next(), Some(json!({"n": 1})), "tried again");
        out.offer(json!({"n": 2}));
        out.retry(json!({"n": 1}));
        assert_eq!(out.next(), Some(json!({"n": 2})), "the newer one wins");
        assert_eq!(out.next(), None);
    }
}
