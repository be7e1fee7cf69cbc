//! The binder: turns a [`Bind`] into API writes. Whole GPUs and CPU pods: one `pods/binding`.
//! Fractions (KAI's mechanics): a reservation pod per shared GPU holds the device through
//! `nvidia.com/gpu: 1` and learns its UUID; the fraction pod gets a per-pod ConfigMap with
//! `NVIDIA_VISIBLE_DEVICES` and its share, the `runai-gpu-group` label, then its binding.
//! Every step is idempotent, so a retry or a restarted scheduler never doubles anything, and
//! `pods/binding` itself refuses a second node.

use crate::decisions::{Bind, GpuBinding};
use gantry_api::names;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("binding pod {pod} to node {node}: {source}")]
    Api {
        pod: String,
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "reservation pod {namespace}/{name} on node {node} did not report its GPU within {secs}s"
    )]
    ReservationTimeout {
        namespace: String,
        name: String,
        node: String,
        secs: u64,
    },
    #[error("reservation pod {namespace}/{name} on node {node} failed: {reason}")]
    ReservationFailed {
        namespace: String,
        name: String,
        node: String,
        reason: String,
    },
    #[error("pod {pod} is already bound to node {bound} (not {node})")]
    AlreadyBound {
        pod: String,
        node: String,
        bound: String,
    },
}

/// What the binder needs besides the bind itself.
#[derive(Clone, Debug)]
pub struct BindContext {
    pub reservation_ns: String,
    pub reservation_image: String,
    /// ServiceAccount of the reservation pods (KAI's image annotates its own pod with the GPU
    /// it got, so it needs `get`/`patch` on pods there); empty: the namespace's `default`.
    pub reservation_service_account: String,
    pub reservation_timeout: Duration,
    /// GPU memory of the node in MiB (GFD label), for the memory limit of a share.
    pub node_gpu_mib: Option<u64>,
    /// The node's GPUs run MPS (GFD `nvidia.com/gpu.sharing-strategy=mps`).
    pub node_mps: bool,
}

/// 64-bit FNV-1a: stable names (GPU groups, reservation pods) every replica derives alike.
pub fn names_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// GPU group id of device `index` on `node`: stable, so every scheduler derives the same one.
pub fn gpu_group(node: &str, index: u32) -> String {
    format!("{:016x}", names_hash(&format!("{node}/{index}")))
}

pub fn reservation_name(node: &str, group: &str) -> String {
    format!(
        "gpu-reservation-{:016x}",
        names_hash(&format!("{node}/{group}"))
    )
}

/// The reservation pod for one shared GPU (KAI's shape: preset node, `app` and group labels,
/// one container that takes `nvidia.com/gpu: 1`).
pub fn reservation_pod(
    ctx: &BindContext,
    node: &str,
    group: &str,
    index: u32,
    tolerations: &serde_json::Value,
) -> serde_json::Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": reservation_name(node, group),
            "namespace": ctx.reservation_ns,
            "labels": {names::LABEL_APP: names::RESERVATION_APP, names::LABEL_GPU_GROUP: group},
            "annotations": {"karpenter.sh/do-not-disrupt": "true",
                            names::ANNOTATION_SCHEDULER_GPU_INDICES: index.to_string()},
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": tolerations,
            "containers": [{
                "name": "resource-reservation",
                "image": ctx.reservation_image,
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                ],
                "resources": {"limits": {names::RESOURCE_GPU: "1"}, "requests": {names::RESOURCE_GPU: "1"}},
            }],
        },
    });
    if !ctx.reservation_service_account.is_empty() {
        pod["spec"]["serviceAccountName"] = json!(ctx.reservation_service_account);
    }
    pod
}

/// The env a fractional container receives (KAI's keys, plus the limits that enforce the
/// share: a memory limit for HAMi-core-style enforcement and, under MPS, MPS client limits).
pub fn share_env(
    uuids: &[String],
    milli: u32,
    node_gpu_mib: Option<u64>,
    mps: bool,
) -> BTreeMap<String, String> {
    let portion = format!("{:.2}", f64::from(milli) / 1000.0);
    let mut env = BTreeMap::new();
    env.insert("NVIDIA_VISIBLE_DEVICES".to_string(), uuids.join(","));
    env.insert("GPU_PORTION".to_string(), portion.clone());
    env.insert("RUNAI_NUM_OF_GPUS".to_string(), portion);
    if let Some(total) = node_gpu_mib {
        let mib = total * u64::from(milli) / 1000;
        env.insert("GPU_MEMORY_LIMIT".to_string(), format!("{mib}Mi"));
        env.insert("CUDA_DEVICE_MEMORY_LIMIT".to_string(), format!("{mib}m"));
        if mps {
            let per_dev: Vec<String> = (0..uuids.len()).map(|i| format!("{i}={mib}M")).collect();
            env.insert(
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                per_dev.join(","),
            );
        }
    }
    if mps {
        env.insert(
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(),
            (milli.div_ceil(10)).to_string(),
        );
    }
    env
}

/// KAI's ConfigMap prefix when the pod does not name one.
pub fn configmap_prefix(pod: &Pod) -> String {
    if let Some(p) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_SHARED_GPU_CONFIGMAP))
    {
        return p.clone();
    }
    let name = pod.metadata.name.as_deref().unwrap_or("pod");
    let trimmed: String = name.chars().take(40).collect();
    format!("{}-shared-gpu", trimmed.trim_end_matches('-'))
}

fn api_err(b: &Bind, source: kube::Error) -> BindError {
    BindError::Api {
        pod: format!("{}/{}", b.namespace, b.name),
        node: b.node.clone(),
        source,
    }
}

/// POST `pods/binding`. A pod already bound to this node counts as done (a retry after a
/// lost reply); bound elsewhere is an error.
pub async fn post_binding(
    client: &kube::Client,
    b: &Bind,
    annotations: &BTreeMap<String, String>,
) -> Result<(), BindError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &b.namespace);
    let body = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": b.name, "namespace": b.namespace, "annotations": annotations},
        "target": {"apiVersion": "v1", "kind": "Node", "name": b.node},
    });
    match pods
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &b.name,
            &PostParams::default(),
            &body,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let cur = pods.get(&b.name).await.map_err(|e| api_err(b, e))?;
            match cur.spec.and_then(|s| s.node_name) {
                Some(n) if n == b.node => Ok(()),
                Some(n) => Err(BindError::AlreadyBound {
                    pod: format!("{}/{}", b.namespace, b.name),
                    node: b.node.clone(),
                    bound: n,
                }),
                None => Err(api_err(b, kube::Error::Api(s))),
            }
        }
        Err(e) => Err(api_err(b, e)),
    }
}

/// Bind one pod (any kind of GPU binding).
pub async fn bind(client: &kube::Client, ctx: &BindContext, b: &Bind) -> Result<(), BindError> {
    match &b.gpu {
        GpuBinding::Fraction { indices, milli } => {
            bind_fraction(client, ctx, b, indices, *milli).await
        }
        GpuBinding::Whole { .. } | GpuBinding::None | GpuBinding::Mig { .. } => {
            let rtype = match &b.gpu {
                GpuBinding::Whole { .. } => "Regular",
                GpuBinding::Mig { .. } => "MigInstance",
                _ => "",
            };
            let mut ann = BTreeMap::new();
            if !rtype.is_empty() {
                ann.insert(
                    names::ANNOTATION_RECEIVED_RESOURCE_TYPE.to_string(),
                    rtype.to_string(),
                );
            }
            if let GpuBinding::Whole { indices } = &b.gpu {
                ann.insert(
                    names::ANNOTATION_SCHEDULER_GPU_INDICES.to_string(),
                    join(indices),
                );
            }
            post_binding(client, b, &ann).await
        }
    }
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Make sure the reservation pod of (`node`, `index`) exists and return its GPU UUID.
pub async fn reserve(
    client: &kube::Client,
    ctx: &BindContext,
    node: &str,
    index: u32,
    tolerations: &serde_json::Value,
) -> Result<String, BindError> {
    let group = gpu_group(node, index);
    let name = reservation_name(node, &group);
    let api: Api<Pod> = Api::namespaced(client.clone(), &ctx.reservation_ns);
    let err = |source| BindError::Api {
        pod: format!("{}/{}", ctx.reservation_ns, name),
        node: node.to_string(),
        source,
    };
    let want = reservation_pod(ctx, node, &group, index, tolerations);
    let pod: Pod = serde_json::from_value(want).map_err(|e| err(kube::Error::SerdeError(e)))?;
    let deadline = tokio::time::Instant::now() + ctx.reservation_timeout;
    loop {
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Adopt: same name = same GPU; but not one being deleted, which is about
                // to release the device: wait until it is gone and reserve anew.
                let dying = api
                    .get_opt(&name)
                    .await
                    .map_err(err)?
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
                if !dying {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(BindError::ReservationTimeout {
                        namespace: ctx.reservation_ns.clone(),
                        name,
                        node: node.to_string(),
                        secs: ctx.reservation_timeout.as_secs(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(err(e)),
        }
    }
    loop {
        let cur = api.get(&name).await.map_err(err)?;
        if let Some(u) = super::convert::reserved_uuid(&cur) {
            return Ok(u);
        }
        let status = cur.status.as_ref();
        if status.and_then(|s| s.phase.as_deref()) == Some("Failed") {
            let reason = status
                .and_then(|s| s.reason.clone().or(s.message.clone()))
                .unwrap_or_else(|| "Failed".into());
            // A failed reservation holds nothing; remove it so the next attempt starts clean.
            let _ = api.delete(&name, &Default::default()).await;
            return Err(BindError::ReservationFailed {
                namespace: ctx.reservation_ns.clone(),
                name,
                node: node.to_string(),
                reason,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BindError::ReservationTimeout {
                namespace: ctx.reservation_ns.clone(),
                name,
                node: node.to_string(),
                secs: ctx.reservation_timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn bind_fraction(
    client: &kube::Client,
    ctx: &BindContext,
    b: &Bind,
    indices: &[u32],
    milli: u32,
) -> Result<(), BindError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &b.namespace);
    let pod = pods.get(&b.name).await.map_err(|e| api_err(b, e))?;
    let tolerations = json!(pod.spec.as_ref().and_then(|s| s.tolerations.clone()));
    let mut uuids = Vec::new();
    for &i in indices {
        uuids.push(reserve(client, ctx, &b.node, i, &tolerations).await?);
    }
    // The scheduler placed this pod from the same parse, so its annotations are valid here.
    let share = gantry_api::kai::pod_gpu_sharing(&pod).ok().flatten();
    let mps = ctx.node_mps || share.as_ref().is_some_and(|s| s.mps);
    let env = share_env(&uuids, milli, ctx.node_gpu_mib, mps);
    let prefix = configmap_prefix(&pod);
    let containers = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.as_str()));
    let container = share.map_or(0, |s| s.container_index(containers));
    let owner = json!([{
        "apiVersion": "v1", "kind": "Pod", "name": b.name,
        "uid": pod.metadata.uid, "controller": false, "blockOwnerDeletion": false,
    }]);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &b.namespace);
    for name in [
        format!("{prefix}-{container}"),
        format!("{prefix}-{container}-evar"),
    ] {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": b.namespace, "ownerReferences": owner},
            "data": env,
        });
        cms.patch(
            &name,
            &PatchParams::apply(names::FIELD_MANAGER_SCHEDULER).force(),
            &Patch::Apply(&cm),
        )
        .await
        .map_err(|e| api_err(b, e))?;
    }
    let groups: Vec<String> = indices.iter().map(|&i| gpu_group(&b.node, i)).collect();
    let mut labels = serde_json::Map::new();
    if let [g] = groups.as_slice() {
        labels.insert(names::LABEL_GPU_GROUP.into(), json!(g));
    } else {
        for g in &groups {
            labels.insert(format!("{}/{g}", names::LABEL_GPU_GROUP), json!(g));
        }
    }
    let patch = json!({"metadata": {
        "labels": labels,
        "annotations": {
            names::ANNOTATION_SHARED_GPU_CONFIGMAP: prefix,
            names::ANNOTATION_RECEIVED_RESOURCE_TYPE: "Fraction",
            names::ANNOTATION_SCHEDULER_GPU_INDICES: join(indices),
        },
    }});
    pods.patch(&b.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_err(b, e))?;
    post_binding(client, b, &BTreeMap::new()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_reservation_names_are_stable_and_valid() {
        let g = gpu_group("node-a", 3);
        assert_eq!(g, gpu_group("node-a", 3));
        assert_ne!(g, gpu_group("node-a", 4));
        assert_eq!(g.len(), 16);
        let n = reservation_name("node-a", &g);
        assert!(n.len() <= 63 && n.starts_with("gpu-reservation-"));
    }

    #[test]
    fn share_env_states_the_share() {
        let e = share_env(&["GPU-1".into()], 500, Some(81920), false);
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-1");
        assert_eq!(e["GPU_PORTION"], "0.50");
        assert_eq!(e["GPU_MEMORY_LIMIT"], "40960Mi");
        assert!(!e.contains_key("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
        let m = share_env(&["GPU-1".into()], 250, Some(40000), true);
        assert_eq!(m["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
        assert_eq!(m["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10000M");
    }

    #[test]
    fn reservation_pod_takes_one_gpu_on_its_node() {
        let ctx = BindContext {
            reservation_ns: "gantry-reservation".into(),
            reservation_image: "img".into(),
            reservation_service_account: String::new(),
            reservation_timeout: Duration::from_secs(1),
            node_gpu_mib: None,
            node_mps: false,
        };
        let p = reservation_pod(&ctx, "n1", "g", 2, &json!(null));
        assert_eq!(p["spec"]["nodeName"], "n1");
        assert_eq!(p["spec"].get("serviceAccountName"), None);
        let sa = BindContext {
            reservation_service_account: "gantry-scheduler-reservation".into(),
            ..ctx
        };
        assert_eq!(
            reservation_pod(&sa, "n1", "g", 2, &json!(null))["spec"]["serviceAccountName"],
            "gantry-scheduler-reservation"
        );
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            "1"
        );
        assert_eq!(p["metadata"]["labels"]["runai-gpu-group"], "g");
    }
}
