//! Lifecycle of the pods bound to a node, one tokio task per pod: admission, device allocation
//! through the plugins, Pending → Running → Succeeded/Failed, restarts per restartPolicy,
//! in-process agents for operand pods, graceful deletion, and GPU load on the SimBackend.
//!
//! - [`lifecycle`]: the pod task (admission, volumes, allocation, final delete);
//! - [`allocation`]: device allocation through the plugins and GPU load on the backend;
//! - [`restarts`]: init and main containers run with restarts and back-off;
//! - [`containers`]: what one container run is (in-process agent or plain);
//! - [`status`]: the pod status patch, pure;
//! - [`ctx`]: what a pod task works with (its node, the shared env, its watched pod);
//! - [`deletion`]: whether the watched pod is being deleted;
//! - [`handle`]: the running task as its node holds it.

mod allocation;
mod containers;
mod ctx;
mod deletion;
pub(super) mod handle;
mod lifecycle;
mod restarts;
mod status;

use std::sync::Arc;

use gantry_api::lenient::Lenient;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Preconditions};
use tokio::sync::watch;

use super::lock::lock;
use super::node::NodeShared;
use super::pod_ref::PodRef;

pub use ctx::PodEnv;
pub use handle::PodHandle;
pub use status::{CState, Containers, InitStatus, Named, StatusView, status_patch};

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

/// A pod bound to this node was added or changed. The pod's task runs the spec it arrived
/// with (as the kubelet, which does not restart containers for a spec change the API allows);
/// of later versions its task reads only whether the pod is being deleted ([`deletion`]), so
/// that is all it is sent, and only when it changes.
pub fn on_pod(node: &Arc<NodeShared>, env: &PodEnv, pod: Pod) {
    let Some(r) = pod_ref(&pod) else { return };
    if on_running_pod(node, latest_of(&pod.metadata)) {
        return;
    }
    let mut pods = lock(&node.pods);
    tracing::debug!(node = %node.name, pod = %r.name, "pod arrived");
    let (tx, rx) = watch::channel(Some(Arc::new(latest_of(&pod.metadata))));
    let task = tokio::spawn(lifecycle::pod_task(
        node.clone(),
        env.clone(),
        r.clone(),
        Arc::new(pod),
        rx,
    ));
    pods.insert(r.uid, PodHandle { tx, task });
}

/// A new version of a pod whose task runs: the task is sent `next` (the pod's [`latest_of`]
/// version) if that changed. False when no task of the pod runs (the pod is new here).
pub fn on_running_pod(node: &NodeShared, next: Pod) -> bool {
    let pods = lock(&node.pods);
    let Some(h) = next
        .metadata
        .uid
        .as_ref()
        .and_then(|uid| pods.get(uid))
        .filter(|h| !h.task.is_finished())
    else {
        return false;
    };
    h.tx.send_if_modified(|cur| {
        let same = cur.as_ref().is_some_and(|c| c.metadata == next.metadata);
        if !same {
            *cur = Some(Arc::new(next));
        }
        !same
    });
    true
}

/// What a pod task watches of the pod's latest version, from its metadata: who it is and
/// whether it is being deleted (a typed pod's metadata and status alone are several KB).
pub fn latest_of(m: &ObjectMeta) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            ..ObjectMeta::default()
        },
        spec: None,
        status: None,
    }
}

/// A pod of this node is gone from the API.
pub fn on_pod_deleted(node: &Arc<NodeShared>, uid: &str) {
    if let Some(h) = lock(&node.pods).get(uid) {
        h.tx.send_replace(None);
    }
}

/// A pod of this node that cannot be decoded (stored before the API server checked it): it is
/// not run (what runs of it stops), and once it is being deleted the kubelet removes it, so it
/// never stays Terminating.
pub fn on_undecodable(node: &Arc<NodeShared>, env: &PodEnv, meta: &ObjectMeta, error: &str) {
    let (Some(uid), Some(name)) = (meta.uid.clone(), meta.name.clone()) else {
        return;
    };
    on_pod_deleted(node, &uid);
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    if meta.deletion_timestamp.is_none() {
        tracing::warn!(node = %node.name, pod = %name, %namespace, %error, "pod cannot be decoded; not running it");
        return;
    }
    let api: Api<Lenient<Pod>> = Api::namespaced(env.client.clone(), &namespace);
    tokio::spawn(async move {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&name, &dp).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "final delete of an undecodable pod failed")
            }
        }
    });
}

/// Uids of the pods this node runs.
pub fn known_pods(node: &NodeShared) -> Vec<String> {
    lock(&node.pods).keys().cloned().collect()
}
