//! The writer side: decisions become binds, evictions and deletions in spawned tasks that
//! report back to the loop; pods get their PodGroups.

use super::state::{Loop, Msg};
use super::status_task::StatusMsg;
use crate::decisions::{Bind, Decisions, EvictReason, GpuBinding};
use crate::k8s::cache::{Assumed, key};
use crate::k8s::metrics::{QueueLabel, QueueResourceLabel, ReasonLabel};
use crate::k8s::status::{child_queues, reason};
use crate::k8s::{binder, podgrouper};
use gantry_api::kai::PodGroup;
use gantry_api::names;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::collections::HashMap;
use std::time::Instant;

impl Loop {
    pub(super) fn apply(&mut self, d: Decisions) {
        for b in d.binds.iter().filter(|b| !b.pipelined) {
            self.dispatch_bind(b);
        }
        for e in &d.evictions {
            let k = key(&e.namespace, &e.name);
            if !self.deleting.insert(k.clone()) {
                continue;
            }
            let (rsn, label) = match &e.reason {
                EvictReason::Reclaim { .. } => (reason::RECLAIMED, "reclaim"),
                EvictReason::Preempt { .. } => (reason::PREEMPTED, "preempt"),
                EvictReason::Consolidation { .. } => (reason::CONSOLIDATED, "consolidation"),
                EvictReason::StaleGang { .. } => (reason::STALE, "stale-gang"),
            };
            self.metrics
                .evictions
                .get_or_create(&ReasonLabel {
                    reason: label.into(),
                })
                .inc();
            self.pod_event(&k, "Warning", rsn, format!("Evicted: {}", e.reason));
            self.cache.evicted(&k);
            let (client, tx, ns, name) = (
                self.client.clone(),
                self.tx.clone(),
                e.namespace.clone(),
                e.name.clone(),
            );
            tokio::spawn(async move {
                let api: Api<Pod> = Api::namespaced(client, &ns);
                if let Err(err) = api.delete(&name, &DeleteParams::default()).await
                    && !matches!(&err, kube::Error::Api(s) if s.code == 404)
                {
                    tracing::warn!(pod = %name, error = %err, "evicting failed");
                }
                let _ = tx
                    .send(Msg::Deleted {
                        key: key(&ns, &name),
                    })
                    .await;
            });
        }
        let mut group_msgs: HashMap<(String, String), Option<String>> = HashMap::new();
        let mut pending_per_queue: HashMap<String, f64> = HashMap::new();
        for u in &d.unschedulable {
            let k = key(&u.namespace, &u.name);
            let Some(meta) = self.cache.meta.get(&k) else {
                continue;
            };
            if let Some(g) = self
                .cache
                .pod_group(&meta.input.namespace, &meta.input.pod_group)
            {
                *pending_per_queue.entry(g.queue.clone()).or_default() += 1.0;
                group_msgs.insert(
                    (g.namespace.clone(), g.name.clone()),
                    Some(u.message.clone()),
                );
            }
            self.pod_event(&k, "Warning", reason::FAILED_SCHEDULING, u.message.clone());
        }
        for b in &d.binds {
            if let Some(meta) = self.cache.meta.get(&key(&b.namespace, &b.name)) {
                group_msgs
                    .entry((meta.input.namespace.clone(), meta.input.pod_group.clone()))
                    .or_insert(None);
            }
        }
        for ((ns, name), msg) in group_msgs {
            let _ = self.status_tx.send(StatusMsg::Group {
                namespace: ns,
                name,
                unschedulable: msg,
            });
        }
        for m in &d.stale_marks {
            let patch = json!({"metadata": {"annotations": {
                names::ANNOTATION_STALE_PODGROUP_TIMESTAMP: m.since.and_then(|s| chrono::DateTime::from_timestamp(s, 0)).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            }}});
            let api: Api<PodGroup> = Api::namespaced(self.client.clone(), &m.namespace);
            let name = m.pod_group.clone();
            tokio::spawn(async move {
                let _ = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            });
        }
        super::super::status::mark_started(&self.client, &self.cache.input, &d.binds);
        self.metrics.kai.update(&d.queues);
        let mut children = child_queues(&self.cache.input.queues);
        for q in &d.queues {
            self.metrics
                .pending
                .get_or_create(&QueueLabel {
                    queue: q.name.clone(),
                })
                .set(pending_per_queue.get(&q.name).copied().unwrap_or(0.0));
            for (i, r) in ["gpu", "cpu", "memory"].iter().enumerate() {
                let l = QueueResourceLabel {
                    queue: q.name.clone(),
                    resource: r.to_string(),
                };
                self.metrics
                    .fair_share
                    .get_or_create(&l)
                    .set(q.fair_share[i]);
                self.metrics.allocated.get_or_create(&l).set(q.allocated[i]);
            }
            let _ = self.status_tx.send(StatusMsg::Queue {
                report: q.clone(),
                children: children.remove(&q.name).unwrap_or_default(),
            });
        }
        for issue in &d.issues {
            tracing::debug!(%issue, "input issue");
        }
    }

    pub(super) fn dispatch_bind(&mut self, b: &Bind) {
        let k = key(&b.namespace, &b.name);
        if self.cache.assumed.contains_key(&k) {
            return;
        }
        let (indices, groups) = match &b.gpu {
            GpuBinding::Whole { indices } => (indices.clone(), Vec::new()),
            GpuBinding::Fraction { indices, .. } => (
                indices.clone(),
                indices
                    .iter()
                    .map(|&i| binder::gpu_group(&b.node, i))
                    .collect(),
            ),
            _ => (Vec::new(), Vec::new()),
        };
        self.cache.assume(
            &k,
            Assumed {
                node: b.node.clone(),
                gpu_indices: indices,
                groups,
            },
        );
        let mps = self
            .cache
            .input
            .nodes
            .iter()
            .find(|n| n.name == b.node)
            .and_then(|n| n.labels.get(names::LABEL_GPU_SHARING_STRATEGY))
            .is_some_and(|v| v == "mps");
        let ctx = binder::BindContext {
            reservation_ns: self.opts.reservation_namespace.clone(),
            reservation_image: self.opts.reservation_image.clone(),
            reservation_service_account: self.opts.reservation_service_account.clone(),
            reservation_timeout: self.opts.reservation_timeout,
            node_gpu_mib: self.cache.node_gpu_mib.get(&b.node).copied(),
            node_mps: mps,
        };
        let (client, tx, slots, b) = (
            self.client.clone(),
            self.tx.clone(),
            self.bind_slots.clone(),
            b.clone(),
        );
        let started = Instant::now();
        tokio::spawn(async move {
            let _permit = slots.acquire_owned().await;
            let result = binder::bind(&client, &ctx, &b)
                .await
                .map_err(|e| e.to_string());
            let _ = tx
                .send(Msg::Bound {
                    key: k,
                    node: b.node,
                    result,
                    started,
                })
                .await;
        });
    }
}

/// Fetch an owner object (any kind) as JSON.
pub(super) async fn fetch_owner(
    client: &kube::Client,
    namespace: &str,
    o: &crate::k8s::convert::OwnerRef,
) -> Result<DynamicObject, kube::Error> {
    let (group, version) = match o.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", o.api_version.as_str()),
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &o.kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    api.get(&o.name).await
}

/// Create (or adopt) the pod's PodGroup, then annotate the pod.
pub(super) async fn group_one(
    client: &kube::Client,
    pod: &crate::k8s::convert::CachedPod,
) -> Result<Box<PodGroup>, String> {
    let ns = &pod.input.namespace;
    let mut owner: Option<podgrouper::Owner> = None;
    let mut next = pod.owner.clone();
    for _ in 0..podgrouper::MAX_OWNER_DEPTH {
        let Some(o) = next.take() else { break };
        if podgrouper::per_pod_owner(&o) {
            break; // one group per pod, like KAI's Deployment grouper
        }
        match fetch_owner(client, ns, &o).await {
            Ok(obj) => {
                let meta = &obj.metadata;
                next = meta
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|r| r.controller == Some(true))
                    .map(|r| crate::k8s::convert::OwnerRef {
                        api_version: r.api_version.clone(),
                        kind: r.kind.clone(),
                        name: r.name.clone(),
                        uid: r.uid.clone(),
                    });
                owner = Some(podgrouper::Owner {
                    api_version: o.api_version.clone(),
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    labels: meta.labels.clone().unwrap_or_default(),
                    annotations: meta.annotations.clone().unwrap_or_default(),
                    spec: obj.data.get("spec").cloned().unwrap_or_default(),
                });
            }
            // An owner we cannot read: group under the last one we could.
            Err(e) => {
                tracing::debug!(owner = %o.name, error = %e, "owner not readable");
                break;
            }
        }
    }
    let g = podgrouper::grouping(pod, owner.as_ref());
    let api: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let obj: PodGroup = serde_json::from_value(g.object)
        .map_err(|e| format!("pod {ns}/{}: building its PodGroup: {e}", pod.input.name))?;
    let created = match api.create(&PostParams::default(), &obj).await {
        Ok(c) => c,
        // Exists: the user's or ours; it wins.
        Err(kube::Error::Api(s)) if s.code == 409 => api.get(&g.name).await.map_err(|e| {
            format!(
                "pod {ns}/{}: reading PodGroup {}: {e}",
                pod.input.name, g.name
            )
        })?,
        Err(e) => {
            return Err(format!(
                "pod {ns}/{}: creating PodGroup {}: {e}",
                pod.input.name, g.name
            ));
        }
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {names::ANNOTATION_POD_GROUP_NAME: g.name}}});
    pods.patch(
        &pod.input.name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| {
        format!(
            "pod {ns}/{}: setting {}: {e}",
            pod.input.name,
            names::ANNOTATION_POD_GROUP_NAME
        )
    })?;
    Ok(Box::new(created))
}
