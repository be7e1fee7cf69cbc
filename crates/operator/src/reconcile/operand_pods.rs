//! The operand pod cache's own pod type: only what DaemonSet readiness and crash-loop naming
//! read. Deserialized straight from the watch, so the rest of a pod (spec, managed fields,
//! conditions, images) is never allocated. At 1,000 nodes the cache holds ~8,000 pods; as
//! thinned `k8s_openapi` Pods they took ~4 KB each (every optional field of PodSpec and
//! ContainerStatus is inline), as this type well under 1 KB.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, Pod, PodSpec,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// The label an OnDelete DaemonSet's pods carry their template revision in.
const REVISION_LABEL: &str = "controller-revision-hash";

#[derive(Clone, Debug, Deserialize)]
pub struct OperandPod {
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<Spec>,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    node_name: Option<String>,
}

// Every field optional and null-tolerant, as in `k8s_openapi`: one odd pod must not fail
// the whole watch (and with it the cache's first list).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    phase: Option<String>,
    container_statuses: Option<Vec<Container>>,
    init_container_statuses: Option<Vec<Container>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Container {
    name: Option<String>,
    ready: Option<bool>,
    state: Option<State>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct State {
    waiting: Option<Waiting>,
    running: Option<Running>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Waiting {
    reason: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Running {
    started_at: Option<Time>,
}

/// The metadata the cache and the watch need: identity, the resource version the watch
/// resumes from, the controller, and the revision label.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    labels: Option<BTreeMap<String, String>>,
}

fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    let owners: Vec<OwnerReference> = m
        .owner_references
        .into_iter()
        .flatten()
        .filter(|o| o.controller == Some(true))
        .collect();
    let labels: BTreeMap<String, String> = m
        .labels
        .into_iter()
        .flatten()
        .filter(|(k, _)| k == REVISION_LABEL)
        .collect();
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        owner_references: (!owners.is_empty()).then_some(owners),
        labels: (!labels.is_empty()).then_some(labels),
        ..Default::default()
    })
}

impl kube::Resource for OperandPod {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl OperandPod {
    /// Whether `uid` is this pod's controller.
    pub fn controlled_by(&self, uid: &str) -> bool {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == uid)
    }

    /// Whether a container of this pod waits in `CrashLoopBackOff` (what
    /// [`crate::status::crash_looping`] names), read without building a Pod.
    pub fn crash_looping(&self) -> bool {
        let Some(s) = &self.status else {
            return false;
        };
        [&s.init_container_statuses, &s.container_statuses]
            .into_iter()
            .flatten()
            .flatten()
            .any(Container::crash_looping)
    }

    /// As a `k8s_openapi` Pod with only the cached fields set, for the status rules.
    pub fn to_pod(&self) -> Pod {
        let statuses = |cs: &Option<Vec<Container>>| -> Option<Vec<ContainerStatus>> {
            cs.as_ref()
                .map(|cs| cs.iter().map(Container::to_status).collect())
        };
        Pod {
            metadata: ObjectMeta {
                name: self.metadata.name.clone(),
                labels: self.metadata.labels.clone(),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: self.spec.as_ref().and_then(|s| s.node_name.clone()),
                ..Default::default()
            }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                container_statuses: statuses(&s.container_statuses),
                init_container_statuses: statuses(&s.init_container_statuses),
                ..Default::default()
            }),
        }
    }
}

impl Container {
    fn crash_looping(&self) -> bool {
        let waiting = self.state.as_ref().and_then(|st| st.waiting.as_ref());
        waiting.and_then(|w| w.reason.as_deref()) == Some(crate::status::CRASH_LOOP_BACK_OFF)
    }

    fn to_status(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone().unwrap_or_default(),
            ready: self.ready.unwrap_or(false),
            state: self.state.as_ref().map(|st| ContainerState {
                waiting: st.waiting.as_ref().map(|w| ContainerStateWaiting {
                    reason: w.reason.clone(),
                    message: None,
                }),
                running: st.running.as_ref().map(|r| ContainerStateRunning {
                    started_at: r.started_at.clone(),
                }),
                terminated: None,
            }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_what_the_status_rules_read_and_drops_the_rest() {
        let full = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "nvidia-device-plugin-daemonset-x1", "namespace": "gpu-operator",
                "resourceVersion": "42", "uid": "u1",
                "labels": {"app": "nvidia-device-plugin-daemonset", "controller-revision-hash": "abc"},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-uid", "controller": true},
                    {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o-uid"}],
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "plugin", "image": "x"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "plugin", "ready": false, "restartCount": 7,
                    "image": "x", "imageID": "y",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]
            }
        });
        let p: OperandPod = serde_json::from_value(full).unwrap();
        let nulls = json!({"metadata": {"name": "p", "labels": null, "ownerReferences": null},
            "spec": null, "status": {"containerStatuses": null, "phase": null}});
        assert!(serde_json::from_value::<OperandPod>(nulls).is_ok());
        assert!(p.controlled_by("ds-uid") && !p.controlled_by("o-uid"));
        assert!(p.crash_looping());
        let mut healthy = p.clone();
        if let Some(s) = healthy.status.as_mut() {
            s.container_statuses = None;
        }
        assert!(!healthy.crash_looping());
        assert!(crate::status::crash_looping(&healthy.to_pod()).is_empty());
        assert_eq!(p.metadata.resource_version.as_deref(), Some("42"));
        assert!(p.metadata.managed_fields.is_none());
        let pod = p.to_pod();
        assert_eq!(
            pod.metadata.labels.unwrap().into_iter().collect::<Vec<_>>(),
            [("controller-revision-hash".to_string(), "abc".to_string())]
        );
        assert_eq!(
            crate::status::crash_looping(&p.to_pod()),
            [(
                "n1".to_string(),
                "nvidia-device-plugin-daemonset-x1/plugin".to_string()
            )]
        );
    }
}
