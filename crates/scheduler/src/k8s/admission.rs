//! GPU-sharing admission, as KAI's pod webhook does it: a fractional pod (`gpu-fraction` /
//! `gpu-memory`) gains, at creation, the references through which its container will receive
//! the share the binder writes at bind time (see [`super::binder`]):
//!
//! - annotation `runai/shared-gpu-configmap` = the ConfigMap name prefix (the pod's, or its
//!   owner's, name, a random part, `-shared-gpu`), so generated pod names work;
//! - `NVIDIA_VISIBLE_DEVICES`, `GPU_PORTION`, `RUNAI_NUM_OF_GPUS` from ConfigMap
//!   `<prefix>-<container index>` (`configMapKeyRef`), and every other key of the share
//!   (memory limits, MPS limits) through `envFrom` of `<prefix>-<index>-evar`;
//! - `runtimeClassName` (default `nvidia`) so the NVIDIA runtime honours the variable.
//!
//! The references are mandatory, so the kubelet cannot start the container before the binder
//! has written the ConfigMaps: the container sees exactly the GPU it was bound to.
//! Pure: the pod and a random suffix in, an RFC 6902 JSON patch out.

use gantry_api::names;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// Variables read one by one from `<prefix>-<index>` (KAI's list).
pub const SHARE_KEYS: [&str; 3] = ["NVIDIA_VISIBLE_DEVICES", "GPU_PORTION", "RUNAI_NUM_OF_GPUS"];

/// What the webhook injects and for which pods.
#[derive(Clone, Debug)]
pub struct AdmissionConfig {
    /// Only pods with this `spec.schedulerName` are changed.
    pub scheduler_name: String,
    /// Set on fractional pods that name none (`None`: leave it).
    pub runtime_class: Option<String>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            scheduler_name: names::DEFAULT_SCHEDULER_NAME.into(),
            runtime_class: Some(names::RUNTIME_CLASS_NVIDIA.into()),
        }
    }
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The ConfigMap prefix for a new pod: its name, else its `generateName`, else its first
/// owner's name (at most 40 characters, no trailing `-`), a random part, `-shared-gpu`.
pub fn new_prefix(pod: &Pod, random: &str) -> String {
    let m = &pod.metadata;
    let base = m
        .name
        .clone()
        .or_else(|| m.generate_name.clone())
        .or_else(|| {
            m.owner_references
                .as_ref()
                .and_then(|o| o.first())
                .map(|o| o.name.clone())
        })
        .unwrap_or_else(|| "pod".into());
    let trimmed: String = base.chars().take(40).collect();
    format!("{}-{random}-shared-gpu", trimmed.trim_end_matches('-'))
}

/// `/` and `~` escaped for a JSON pointer (RFC 6901).
fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that prepares a fractional pod, or `None` when the pod is not one of ours,
/// not fractional, or already prepared (the webhook may be called again).
pub fn mutate(pod: &Pod, cfg: &AdmissionConfig, random: &str) -> Option<Vec<Value>> {
    let spec = pod.spec.as_ref()?;
    let ours = spec.scheduler_name.as_deref() == Some(cfg.scheduler_name.as_str());
    if !ours || spec.containers.is_empty() {
        return None;
    }
    // Invalid sharing annotations are not prepared: the scheduler reports them on the pod.
    let Ok(Some(share)) = gantry_api::kai::pod_gpu_sharing(pod) else {
        return None;
    };
    let index = share.container_index(spec.containers.iter().map(|c| c.name.as_str()));
    let container = &spec.containers[index];
    let mut ops = Vec::new();
    let prefix = match annotation(pod, names::ANNOTATION_SHARED_GPU_CONFIGMAP) {
        Some(p) => p.to_string(),
        None => {
            let p = new_prefix(pod, random);
            ops.push(json!({
                "op": "add",
                "path": format!("/metadata/annotations/{}", pointer_token(names::ANNOTATION_SHARED_GPU_CONFIGMAP)),
                "value": p,
            }));
            p
        }
    };
    let share_cm = format!("{prefix}-{index}");
    let evar_cm = format!("{share_cm}-evar");
    let wanted_env: Vec<Value> = SHARE_KEYS
        .iter()
        .map(|k| json!({"name": k, "valueFrom": {"configMapKeyRef": {"name": share_cm, "key": k}}}))
        .collect();
    // Keep the user's other variables; the share's own ones come from the ConfigMap.
    let mut env: Vec<Value> = container
        .env
        .iter()
        .flatten()
        .filter(|e| !SHARE_KEYS.contains(&e.name.as_str()))
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    let current: Vec<Value> = container
        .env
        .iter()
        .flatten()
        .filter(|e| SHARE_KEYS.contains(&e.name.as_str()))
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    if current != wanted_env {
        env.extend(wanted_env);
        ops.push(
            json!({"op": "add", "path": format!("/spec/containers/{index}/env"), "value": env}),
        );
    }
    let has_evar = container
        .env_from
        .iter()
        .flatten()
        .any(|f| f.config_map_ref.as_ref().is_some_and(|r| r.name == evar_cm));
    if !has_evar {
        let mut from: Vec<Value> = container
            .env_from
            .iter()
            .flatten()
            .filter_map(|f| serde_json::to_value(f).ok())
            .collect();
        from.push(json!({"configMapRef": {"name": evar_cm, "optional": false}}));
        ops.push(
            json!({"op": "add", "path": format!("/spec/containers/{index}/envFrom"), "value": from}),
        );
    }
    if let Some(rc) = &cfg.runtime_class
        && spec.runtime_class_name.is_none()
    {
        ops.push(json!({"op": "add", "path": "/spec/runtimeClassName", "value": rc}));
    }
    (!ops.is_empty()).then_some(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    fn apply(p: &Pod, ops: &[Value]) -> Pod {
        let mut doc = serde_json::to_value(p).expect("json");
        let patch: json_patch::Patch = serde_json::from_value(json!(ops)).expect("patch");
        json_patch::patch(&mut doc, &patch).expect("applies");
        serde_json::from_value(doc).expect("pod")
    }

    fn fraction(extra: Value) -> Pod {
        let mut v = json!({
            "metadata": {"generateName": "infer-7d9f-", "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [
                {"name": "side", "image": "busybox"},
                {"name": "main", "image": "cuda", "env": [
                    {"name": "KEEP", "value": "1"},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]},
        });
        json_patch::merge(&mut v, &extra);
        pod(v)
    }

    #[test]
    fn a_fraction_gets_the_share_references_on_its_container() {
        let p =
            fraction(json!({"metadata": {"annotations": {"gpu-fraction-container-name": "main"}}}));
        let ops = mutate(&p, &AdmissionConfig::default(), "abc1234").expect("patched");
        let got = apply(&p, &ops);
        let ann = got.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(
            ann[names::ANNOTATION_SHARED_GPU_CONFIGMAP],
            "infer-7d9f-abc1234-shared-gpu"
        );
        let spec = got.spec.as_ref().expect("spec");
        assert_eq!(spec.runtime_class_name.as_deref(), Some("nvidia"));
        assert!(
            spec.containers[0].env.is_none(),
            "only the fraction container changes"
        );
        let c = &spec.containers[1];
        let env = c.env.as_ref().expect("env");
        assert_eq!(env[0].name, "KEEP");
        let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "KEEP",
                "NVIDIA_VISIBLE_DEVICES",
                "GPU_PORTION",
                "RUNAI_NUM_OF_GPUS"
            ]
        );
        let r = env[1]
            .value_from
            .as_ref()
            .and_then(|f| f.config_map_key_ref.as_ref())
            .expect("ref");
        assert_eq!(r.name, "infer-7d9f-abc1234-shared-gpu-1");
        assert_eq!(env[1].value, None, "the user's `all` is replaced");
        let from = c.env_from.as_ref().expect("envFrom");
        let cm = from[0].config_map_ref.as_ref().expect("cm");
        assert_eq!(
            (cm.name.as_str(), cm.optional),
            ("infer-7d9f-abc1234-shared-gpu-1-evar", Some(false))
        );
        assert_eq!(
            mutate(&got, &AdmissionConfig::default(), "zzzzzzz"),
            None,
            "idempotent"
        );
    }

    #[test]
    fn other_pods_are_left_alone() {
        let cfg = AdmissionConfig::default();
        let whole = pod(
            json!({"metadata": {"name": "w"}, "spec": {"schedulerName": "kai-scheduler",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}),
        );
        assert_eq!(mutate(&whole, &cfg, "r"), None);
        let other = fraction(json!({"spec": {"schedulerName": "default-scheduler"}}));
        assert_eq!(mutate(&other, &cfg, "r"), None);
        // Invalid shares are not prepared: the scheduler reports them on the pod.
        let invalid = fraction(json!({"metadata": {"annotations": {"gpu-fraction": "1.5"}}}));
        assert_eq!(mutate(&invalid, &cfg, "r"), None);
    }

    #[test]
    fn a_named_prefix_and_runtime_class_are_kept() {
        // A gpu-memory pod (merge patch: `null` drops the base pod's gpu-fraction).
        let p = fraction(
            json!({"metadata": {"name": "p", "annotations": {"gpu-fraction": null,
            "gpu-memory": "2000", "runai/shared-gpu-configmap": "mine"}},
            "spec": {"runtimeClassName": "nvidia-cdi"}}),
        );
        let ops = mutate(&p, &AdmissionConfig::default(), "r").expect("patched");
        let got = apply(&p, &ops);
        assert_eq!(
            got.metadata.annotations.as_ref().expect("a")["runai/shared-gpu-configmap"],
            "mine"
        );
        assert_eq!(
            got.spec
                .as_ref()
                .and_then(|s| s.runtime_class_name.as_deref()),
            Some("nvidia-cdi")
        );
        let c = &got.spec.as_ref().expect("spec").containers[0];
        let r = c.env.as_ref().expect("env")[0]
            .value_from
            .as_ref()
            .expect("from");
        assert_eq!(r.config_map_key_ref.as_ref().expect("ref").name, "mine-0");
    }

    #[test]
    fn prefixes_fall_back_to_the_owner_and_stay_short() {
        let p = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet",
            "name": "a-very-long-replicaset-name-that-goes-on-and-on-and-on", "uid": "u"}]}}),
        );
        let prefix = new_prefix(&p, "r");
        assert_eq!(
            prefix,
            "a-very-long-replicaset-name-that-goes-on-r-shared-gpu"
        );
    }
}
