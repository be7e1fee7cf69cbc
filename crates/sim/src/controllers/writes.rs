//! The writes every controller here makes: pods created in bursts, pods deleted, statuses
//! patched (only when they changed). Events go through `gantry_runtime::events::Recorder`.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Pod creations in flight at once (per pass of one owner).
pub const CREATE_BURST: usize = 32;

/// Creates `pods` (each with the node it is for), up to [`CREATE_BURST`] at a time: the real
/// controllers create in growing batches too, and one at a time left the last DaemonSet's
/// pods of a 1,000-node rollout waiting for every other DaemonSet's. Returns the created ones
/// as (namespace, name, node).
pub async fn create_pods(
    client: &kube::Client,
    pods: Vec<(Pod, Option<String>)>,
) -> Vec<(String, String, Option<String>)> {
    let results: Vec<_> = futures::stream::iter(pods)
        .map(|(pod, node)| {
            let client = client.clone();
            async move {
                let ns = pod
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                let name = pod.name_any();
                let api: Api<Pod> = Api::namespaced(client, &ns);
                let r = api.create(&PostParams::default(), &pod).await;
                (ns, name, node, r)
            }
        })
        .buffer_unordered(CREATE_BURST)
        .collect()
        .await;
    let mut created = Vec::new();
    for (ns, name, node, r) in results {
        match r {
            Ok(_) => {
                tracing::debug!(pod = %name, namespace = %ns, node = ?node, "controller created pod");
                created.push((ns, name, node));
            }
            // A random name taken already (thousands of pods share a prefix): the next pass
            // tries another one, as the real controllers do with generateName.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(pod = %name, namespace = %ns, "pod name taken; retrying")
            }
            Err(e) => {
                tracing::warn!(pod = %name, namespace = %ns, error = %e, "controller could not create pod")
            }
        }
    }
    created
}

pub async fn delete_pod(client: &kube::Client, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => tracing::debug!(pod = %name, namespace = %ns, "controller deleted pod"),
        Err(kube::Error::Api(_)) => {}
        Err(e) => tracing::debug!(pod = %name, error = %e, "controller could not delete pod"),
    }
}

pub async fn patch_status<K, S>(client: &kube::Client, obj: &K, current: Option<&S>, status: &S)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if current == Some(status) {
        return;
    }
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    let body = serde_json::json!({ "status": status });
    if let Err(e) = api
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await
    {
        tracing::debug!(object = %obj.name_any(), error = %e, "status update failed");
    }
}
