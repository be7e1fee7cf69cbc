//! The pod grouper: a PodGroup for every pod of ours that has none, from the pod's top owner
//! (KAI's conventions: name `pg-<owner>-<uid>`, owner reference to the top owner, queue from
//! the `kai.scheduler/queue` label of the owner then the pod, else `default-queue`), then the
//! pod's `pod-group-name` annotation. A PodGroup that already exists (the user's) wins.

use super::convert::{CachedPod, OwnerRef};
use gantry_api::names;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What the grouper learned about the top owner of a pod.
#[derive(Clone, Debug, Default)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The owner's spec (Job parallelism, Kubeflow replica specs).
    pub spec: Value,
}

/// The PodGroup a pod belongs in.
#[derive(Clone, Debug, PartialEq)]
pub struct Grouping {
    pub name: String,
    pub object: Value,
}

fn label<'a>(owner: Option<&'a Owner>, pod: &'a CachedPod, key: &str) -> Option<&'a String> {
    owner
        .and_then(|o| o.labels.get(key))
        .or_else(|| pod.labels.get(key))
        .filter(|v| !v.is_empty())
}

/// Gang size by owner kind: Job -> parallelism (annotation `kai.scheduler/batch-min-member`
/// overrides); Kubeflow PyTorchJob/MPIJob/TFJob/XGBoostJob/JAXJob ->
/// `runPolicy.schedulingPolicy.minAvailable`, else the sum of replicas; anything else 1.
pub fn min_member(owner: &Owner) -> i64 {
    if let Some(v) = owner
        .annotations
        .get(names::ANNOTATION_BATCH_MIN_MEMBER)
        .and_then(|v| v.parse::<i64>().ok())
    {
        return v.max(0);
    }
    let group = owner.api_version.split('/').next().unwrap_or_default();
    match (group, owner.kind.as_str()) {
        ("batch", "Job") => owner.spec["parallelism"].as_i64().unwrap_or(1).max(1),
        ("kubeflow.org", "PyTorchJob" | "MPIJob" | "TFJob" | "XGBoostJob" | "JAXJob") => {
            if let Some(m) = owner.spec["runPolicy"]["schedulingPolicy"]["minAvailable"].as_i64() {
                return m.max(1);
            }
            let specs = [
                "pytorchReplicaSpecs",
                "mpiReplicaSpecs",
                "tfReplicaSpecs",
                "xgbReplicaSpecs",
                "jaxReplicaSpecs",
            ];
            let total: i64 = specs
                .iter()
                .filter_map(|k| owner.spec[*k].as_object())
                .flat_map(|m| m.values())
                .map(|r| r["replicas"].as_i64().unwrap_or(1))
                .sum();
            total.max(1)
        }
        _ => 1,
    }
}

/// The PodGroup for `pod` whose top owner is `owner` (`None` for a bare pod).
pub fn grouping(pod: &CachedPod, owner: Option<&Owner>) -> Grouping {
    let (name, owner_ref, min) = match owner {
        Some(o) => (
            format!("pg-{}-{}", o.name, o.uid),
            json!({"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid,
                   "controller": false, "blockOwnerDeletion": false}),
            min_member(o),
        ),
        None => (
            format!("pg-{}-{}", pod.input.name, pod.uid),
            json!({"apiVersion": "v1", "kind": "Pod", "name": pod.input.name, "uid": pod.uid,
                   "controller": false, "blockOwnerDeletion": false}),
            1,
        ),
    };
    let name = truncate_name(&name);
    let queue = label(owner, pod, names::LABEL_QUEUE)
        .cloned()
        .or_else(|| label(owner, pod, names::LABEL_PROJECT).cloned())
        .unwrap_or_else(|| names::DEFAULT_QUEUE.to_string());
    let mut spec = json!({"minMember": min, "queue": queue});
    let class = label(owner, pod, names::LABEL_PRIORITY_CLASS_NAME)
        .cloned()
        .or_else(|| pod.priority_class.clone());
    if let Some(c) = class {
        spec["priorityClassName"] = json!(c);
    }
    if let Some(p) = label(owner, pod, names::LABEL_PREEMPTIBILITY) {
        spec["preemptibility"] = json!(p);
    }
    if let Some(c) = topology_constraint(owner, pod) {
        spec["topologyConstraint"] = c;
    }
    let mut labels = serde_json::Map::new();
    if let Some(o) = owner {
        for (k, v) in &o.labels {
            labels.insert(k.clone(), json!(v));
        }
    }
    let top = owner.map_or_else(
        || format!("kind: Pod\nname: {}\nuid: {}\n", pod.input.name, pod.uid),
        |o| {
            format!(
                "apiVersion: {}\nkind: {}\nname: {}\nuid: {}\n",
                o.api_version, o.kind, o.name, o.uid
            )
        },
    );
    let object = json!({
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {
            "name": name, "namespace": pod.input.namespace,
            "labels": labels,
            "annotations": {names::ANNOTATION_TOP_OWNER_METADATA: top},
            "ownerReferences": [owner_ref],
        },
        "spec": spec,
    });
    Grouping { name, object }
}

/// KAI's `kai.scheduler/topology*` annotations (the top owner's, else the pod's) as the
/// PodGroup's `topologyConstraint`; `None` without a topology name.
fn topology_constraint(owner: Option<&Owner>, pod: &CachedPod) -> Option<Value> {
    let ann = |key: &str| {
        owner
            .and_then(|o| o.annotations.get(key))
            .or_else(|| pod.input.annotations.get(key))
            .filter(|v| !v.is_empty())
    };
    let mut c = json!({"topology": ann(names::ANNOTATION_TOPOLOGY)?});
    if let Some(r) = ann(names::ANNOTATION_TOPOLOGY_REQUIRED_PLACEMENT) {
        c["requiredTopologyLevel"] = json!(r);
    }
    if let Some(p) = ann(names::ANNOTATION_TOPOLOGY_PREFERRED_PLACEMENT) {
        c["preferredTopologyLevel"] = json!(p);
    }
    Some(c)
}

/// Object names are at most 253 characters; keep the unique uid tail.
fn truncate_name(n: &str) -> String {
    if n.len() <= 253 {
        return n.to_string();
    }
    n[n.len() - 253..].trim_start_matches('-').to_string()
}

/// The owner chain is walked this deep at most (pod -> Job -> CronJob, pod -> RS -> Deployment).
pub const MAX_OWNER_DEPTH: usize = 4;

/// Owner kinds whose pods get one PodGroup each (KAI: Deployments are served pod by pod).
pub fn per_pod_owner(o: &OwnerRef) -> bool {
    o.kind == "ReplicaSet" || o.kind == "Deployment"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::PodInput;

    fn pod(labels: &[(&str, &str)]) -> CachedPod {
        CachedPod {
            uid: "u1".into(),
            input: PodInput {
                namespace: "ns".into(),
                name: "p".into(),
                ..Default::default()
            },
            ours: true,
            terminal: false,
            terminating: false,
            owner: None,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            priority_class: None,
            skip_podgrouper: false,
            gpu_group: None,
            reservation: false,
            reserved_uuid: None,
            problem: None,
        }
    }

    #[test]
    fn bare_pod_gets_its_own_group_in_the_default_queue() {
        let g = grouping(&pod(&[]), None);
        assert_eq!(g.name, "pg-p-u1");
        assert_eq!(g.object["spec"]["queue"], "default-queue");
        assert_eq!(g.object["spec"]["minMember"], 1);
        assert_eq!(g.object["metadata"]["ownerReferences"][0]["kind"], "Pod");
    }

    #[test]
    fn job_is_a_gang_of_its_parallelism_and_owner_labels_win() {
        let owner = Owner {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "train".into(),
            uid: "j1".into(),
            labels: [(names::LABEL_QUEUE.to_string(), "team-a".to_string())].into(),
            spec: json!({"parallelism": 2}),
            ..Default::default()
        };
        let g = grouping(&pod(&[(names::LABEL_QUEUE, "team-b")]), Some(&owner));
        assert_eq!(g.name, "pg-train-j1");
        assert_eq!(g.object["spec"]["minMember"], 2);
        assert_eq!(g.object["spec"]["queue"], "team-a");
    }

    #[test]
    fn topology_annotations_become_the_constraint_owner_first() {
        let mut p = pod(&[]);
        assert!(grouping(&p, None).object["spec"]["topologyConstraint"].is_null());
        p.input.annotations = [
            (
                names::ANNOTATION_TOPOLOGY.to_string(),
                "cluster".to_string(),
            ),
            (
                names::ANNOTATION_TOPOLOGY_PREFERRED_PLACEMENT.to_string(),
                "rack".to_string(),
            ),
        ]
        .into();
        let c = &grouping(&p, None).object["spec"]["topologyConstraint"];
        assert_eq!(
            *c,
            json!({"topology": "cluster", "preferredTopologyLevel": "rack"})
        );
        let owner = Owner {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            annotations: [(
                names::ANNOTATION_TOPOLOGY_REQUIRED_PLACEMENT.to_string(),
                "zone".to_string(),
            )]
            .into(),
            ..Default::default()
        };
        let c = &grouping(&p, Some(&owner)).object["spec"]["topologyConstraint"];
        assert_eq!(c["requiredTopologyLevel"], "zone");
        assert_eq!(c["topology"], "cluster");
    }

    #[test]
    fn kubeflow_gang_sums_replicas_unless_min_available() {
        let mut o = Owner {
            api_version: "kubeflow.org/v1".into(),
            kind: "PyTorchJob".into(),
            spec: json!({"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}),
            ..Default::default()
        };
        assert_eq!(min_member(&o), 4);
        o.spec["runPolicy"] = json!({"schedulingPolicy": {"minAvailable": 2}});
        assert_eq!(min_member(&o), 2);
        o.annotations
            .insert(names::ANNOTATION_BATCH_MIN_MEMBER.into(), "3".into());
        assert_eq!(min_member(&o), 3);
    }
}
