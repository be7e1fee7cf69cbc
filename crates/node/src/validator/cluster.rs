//! The validator's one seam to the Kubernetes API: is the driver operator-managed, and what
//! does this node advertise.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use gantry_api::names;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use super::component::ValidatorError;

/// What the validator reads from the cluster.
pub trait ClusterView: Send + Sync {
    /// Does an operator-managed driver DaemonSet (label
    /// `app.kubernetes.io/component=nvidia-driver`) exist?
    fn driver_managed(&self) -> BoxFuture<'_, Result<bool, ValidatorError>>;
    /// The Node's `status.allocatable`.
    fn allocatable<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, ValidatorError>>;
}

/// [`ClusterView`] over a kube client.
#[derive(Clone)]
pub struct KubeView {
    client: kube::Client,
    /// Where driver DaemonSets are looked for (`OPERATOR_NAMESPACE`); `None`: everywhere.
    namespace: Option<String>,
    /// Set once a driver DaemonSet has been seen. A retry loop then asks no more: the answer
    /// only flips back when the operator removes the driver, and that restarts this pod.
    /// (At 1,000 nodes the repeated lists were the API server's largest list load.)
    managed_seen: Arc<AtomicBool>,
}

impl KubeView {
    pub fn new(client: kube::Client, namespace: Option<String>) -> Self {
        Self {
            client,
            namespace,
            managed_seen: Arc::default(),
        }
    }
}

impl ClusterView for KubeView {
    fn driver_managed(&self) -> BoxFuture<'_, Result<bool, ValidatorError>> {
        Box::pin(async move {
            if self.managed_seen.load(Ordering::Relaxed) {
                return Ok(true);
            }
            let api: Api<DaemonSet> = match &self.namespace {
                Some(ns) => Api::namespaced(self.client.clone(), ns),
                None => Api::all(self.client.clone()),
            };
            let selector = format!(
                "{}={}",
                names::LABEL_APP_COMPONENT,
                names::COMPONENT_NVIDIA_DRIVER
            );
            // One item answers the question.
            let list = api
                .list_metadata(&ListParams::default().labels(&selector).limit(1))
                .await
                .map_err(|source| ValidatorError::Api {
                    what: format!("listing DaemonSets labelled {selector}"),
                    source,
                })?;
            let managed = !list.items.is_empty();
            self.managed_seen.store(managed, Ordering::Relaxed);
            Ok(managed)
        })
    }

    fn allocatable<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, ValidatorError>> {
        Box::pin(async move {
            let api: Api<Node> = Api::all(self.client.clone());
            let n = api.get(node).await.map_err(|source| ValidatorError::Api {
                what: format!("reading Node {node}"),
                source,
            })?;
            Ok(n.status
                .and_then(|s| s.allocatable)
                .unwrap_or_default()
                .into_iter()
                .map(|(k, q)| (k, q.0))
                .collect())
        })
    }
}

/// A client from `kubeconfig`, else in-cluster config, else `KUBECONFIG` / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, ValidatorError> {
    gantry_runtime::client(kubeconfig)
        .await
        .map_err(|e| ValidatorError::NoApi(e.to_string()))
}
