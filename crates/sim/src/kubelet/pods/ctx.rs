//! What a pod task works with: its node, what all pod tasks share, and the pod it watches.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::watch;

use super::status::{CState, InitStatus, StatusView, status_patch};
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
    /// The pod as it arrived: its spec is what runs (later versions carry no spec, see
    /// [`super::on_pod`]). Once admitted, only what its runs read (see [`Ctx::admitted`]).
    pub(super) pod: Arc<Pod>,
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
}

impl Ctx {
    /// The pod is admitted: keep of it only what its containers' runs, env and status read.
    /// Its volumes become [`HostVolumes`] (their ConfigMaps and Secrets were checked when they
    /// were mounted), and placement and `managedFields` go: a typed `Volume` is 3.2 KB with
    /// every source inline, so an operand pod's volumes were most of what a running pod held.
    pub(super) fn admitted(&mut self) {
        let Some(spec) = self.pod.spec.as_ref() else {
            return;
        };
        self.host_volumes = HostVolumes::of(spec);
        let spec = PodSpec {
            volumes: None,
            affinity: None,
            tolerations: None,
            node_selector: None,
            ..spec.clone()
        };
        let mut metadata = self.pod.metadata.clone();
        metadata.managed_fields = None;
        self.pod = Arc::new(Pod {
            metadata,
            spec: Some(spec),
            status: self.pod.status.clone(),
        });
    }

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
