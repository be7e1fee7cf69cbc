//! The validator's one seam to the Kubernetes API: is the driver operator-managed, and what
//! does this node advertise.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use gantry_api::names;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use super::ValidatorError;

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
    pub client: kube::Client,
    /// Where driver DaemonSets are looked for (`OPERATOR_NAMESPACE`); `None`: everywhere.
    pub namespace: Option<String>,
}

impl ClusterView for KubeView {
    fn driver_managed(&self) -> BoxFuture<'_, Result<bool, ValidatorError>> {
        Box::pin(async move {
            let api: Api<DaemonSet> = match &self.namespace {
                Some(ns) => Api::namespaced(self.client.clone(), ns),
                None => Api::all(self.client.clone()),
            };
            let selector = format!(
                "{}={}",
                names::LABEL_APP_COMPONENT,
                names::COMPONENT_NVIDIA_DRIVER
            );
            let list = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|source| ValidatorError::Api {
                    what: format!("listing DaemonSets labelled {selector}"),
                    source,
                })?;
            Ok(!list.items.is_empty())
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
