//! What a pod task works with: its node, what all pod tasks share, and the pod it watches.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::watch;

use super::status::{CState, InitStatus, StatusView, status_patch};
use crate::kubelet::env;
use crate::kubelet::in_process::AgentRegistry;
use crate::kubelet::lock::lock;
use crate::kubelet::node::NodeShared;
use crate::kubelet::pod_ref::PodRef;
use crate::kubelet::written::Written;

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
    /// The pod as it arrived: its spec is what runs (later versions carry no spec, see
    /// [`super::on_pod`]).
    pub(super) pod: Arc<Pod>,
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
}

impl Ctx {
    pub(super) fn api(&self) -> Api<Pod> {
        Api::namespaced(self.env.client.clone(), &self.r.namespace)
    }

    /// For writes whose answer is not read (see [`Written`]).
    pub(super) fn writes(&self) -> Api<Written<Pod>> {
        Api::namespaced(self.env.client.clone(), &self.r.namespace)
    }

    pub(super) async fn patch_status(
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
        let pod = &self.pod;
        let n = now();
        let (inits, initialized) = lock(&self.inits).clone();
        let patch = status_patch(&StatusView {
            pod,
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
            .writes()
            .patch_status(&self.r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(node = %self.node.name, pod = %self.r.name, error = %e, "pod status patch failed");
        }
    }

    /// Remove a pod that is being deleted: the kubelet's final delete with grace 0.
    pub(super) async fn finalize(&self) {
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
