//! The writes every controller here makes: pods created in bursts, pods deleted, statuses
//! patched (only when they changed). Events go through `gantry_runtime::events::Recorder`.
//! A write the API server answers (a conflict, a rejection) concerns one object: logged here,
//! retried by the next pass. A write that never reached it is the pass failing: noted in
//! [`Unreached`], and the pass's round fails, so the round loop logs it (rate-limited) and
//! retries with backoff.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::written::Written;

/// Writes of one pass that did not reach the API server.
#[derive(Debug, Default)]
pub struct Unreached(std::sync::Mutex<Tally>);

/// How many writes of a pass did not reach the API server, and the first one's error.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub writes: usize,
    pub first: String,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} controller write(s) did not reach the API server (first: {})",
            self.writes, self.first
        )
    }
}

impl Unreached {
    /// Note `e` unless it is the API server's answer; true if noted (the pass's round fails
    /// and the loop logs it, so the caller need not).
    pub fn note(&self, e: &kube::Error) -> bool {
        if matches!(e, kube::Error::Api(_)) {
            return false;
        }
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if t.writes == 0 {
            t.first = e.to_string();
        }
        t.writes += 1;
        true
    }

    /// The pass's outcome: `Err` if some write did not reach the API server. Starts afresh.
    pub fn take(&self) -> Result<(), Tally> {
        let t = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        if t.writes == 0 { Ok(()) } else { Err(t) }
    }
}

/// Pod creations in flight at once (per pass of one owner).
pub const CREATE_BURST: usize = 32;

/// Creates `pods` (each with the node it is for), up to [`CREATE_BURST`] at a time: the real
/// controllers create in growing batches too, and one at a time left the last DaemonSet's
/// pods of a 1,000-node rollout waiting for every other DaemonSet's. Returns the created ones
/// as (namespace, name, node).
///
/// `pods` is drawn as requests go out and each pod is encoded before its request waits: a
/// typed pod is ~50 KB, and a 5,000-node DaemonSet's pods built up front, with the created
/// objects the server answered, held half a GB until the last was written. The answers are
/// not decoded ([`Written`]).
pub async fn create_pods<I>(
    client: &kube::Client,
    unreached: &Unreached,
    pods: I,
) -> Vec<(String, String, Option<String>)>
where
    I: IntoIterator<Item = (Pod, Option<String>)>,
    I::IntoIter: Send,
{
    let results: Vec<_> = futures::stream::iter(pods)
        .map(|(pod, node)| {
            let ns = pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = pod.name_any();
            let request = serde_json::to_vec(&pod)
                .map_err(kube::Error::SerdeError)
                .and_then(|body| {
                    kube::core::Request::new(Pod::url_path(&(), Some(&ns)))
                        .create(&PostParams::default(), body)
                        .map_err(kube::Error::BuildRequest)
                });
            let client = client.clone();
            async move {
                let r = match request {
                    Ok(req) => client.request::<Written<Pod>>(req).await.map(drop),
                    Err(e) => Err(e),
                };
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
                if !unreached.note(&e) {
                    tracing::warn!(pod = %name, namespace = %ns, error = %e, "controller could not create pod")
                }
            }
        }
    }
    created
}

pub async fn delete_pod(client: &kube::Client, unreached: &Unreached, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => tracing::debug!(pod = %name, namespace = %ns, "controller deleted pod"),
        Err(e) => {
            unreached.note(&e);
        }
    }
}

pub async fn patch_status<K, S>(
    client: &kube::Client,
    unreached: &Unreached,
    obj: &K,
    current: Option<&S>,
    status: &S,
) where
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
        && !unreached.note(&e)
    {
        tracing::debug!(object = %obj.name_any(), error = %e, "status update failed");
    }
}
