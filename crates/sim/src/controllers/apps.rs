//! The shell of the Deployment and ReplicaSet controllers and of the default scheduler: apply
//! the pure plans through the API (ReplicaSets created / scaled / deleted, pods created and
//! deleted, statuses, pod bindings).

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use gantry_runtime::events::{Said, object_ref};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::apps_runner::{Reconciler, controlled_by, random_suffix};
use super::default_scheduler;
use super::deployment::{self, Action};
use super::replicaset;

/// Binds in flight at once.
const BIND_BURST: usize = 16;

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Reconciler {
    pub(super) async fn reconcile_apps(&mut self, pods: &[Arc<Pod>]) {
        let rss = self.rss.state();
        for d in self.deployments.state() {
            if d.metadata.deletion_timestamp.is_none() {
                self.reconcile_deployment(&d, &rss).await;
            }
        }
        for rs in rss {
            if rs.metadata.deletion_timestamp.is_none() {
                self.reconcile_rs(&rs, pods).await;
            }
        }
    }

    async fn reconcile_deployment(&self, d: &Deployment, rss: &[Arc<ReplicaSet>]) {
        let Some(uid) = d.metadata.uid.as_deref() else {
            return;
        };
        let ns = d.namespace().unwrap_or_default();
        let mine: Vec<&ReplicaSet> = rss
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .filter(|r| controlled_by(&r.metadata, uid))
            .map(|r| &**r)
            .collect();
        let plan = deployment::plan(d, &mine, &now());
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
        for a in &plan.actions {
            let r = match a {
                Action::Create(rs) => api.create(&PostParams::default(), rs).await.map(|_| ()),
                Action::Scale { name, replicas } => api
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                    )
                    .await
                    .map(|_| ()),
                Action::Delete(name) => api
                    .delete(name, &DeleteParams::background())
                    .await
                    .map(|_| ()),
            };
            match r {
                Ok(()) => {
                    tracing::debug!(deployment = %d.name_any(), action = ?a, "deployment step")
                }
                // Created already (a slow cache): the next pass sees it.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    if !self.unreached.note(&e) {
                        tracing::warn!(deployment = %d.name_any(), namespace = %ns, error = %e, "deployment step failed")
                    }
                }
            }
        }
        // The revision `kubectl rollout history` shows: the new ReplicaSet's.
        let hash = deployment::template_hash(&d.spec.clone().unwrap_or_default().template);
        let revision = mine
            .iter()
            .find(|r| r.labels().get(deployment::LABEL_POD_TEMPLATE_HASH) == Some(&hash))
            .and_then(|r| {
                r.annotations()
                    .get(deployment::ANNOTATION_REVISION)
                    .cloned()
            });
        if let Some(rev) = revision
            && d.annotations().get(deployment::ANNOTATION_REVISION) != Some(&rev)
        {
            let body = json!({"metadata": {"annotations": {deployment::ANNOTATION_REVISION: rev}}});
            let dapi: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
            if let Err(e) = dapi
                .patch(&d.name_any(), &PatchParams::default(), &Patch::Merge(&body))
                .await
                && !self.unreached.note(&e)
            {
                tracing::debug!(deployment = %d.name_any(), error = %e, "revision annotation");
            }
        }
        self.patch_status(d, d.status.as_ref(), &plan.status).await;
    }

    async fn reconcile_rs(&mut self, rs: &ReplicaSet, pods: &[Arc<Pod>]) {
        let Some(uid) = rs.metadata.uid.clone() else {
            return;
        };
        let ns = rs.namespace().unwrap_or_default();
        let mine: Vec<&Pod> = pods
            .iter()
            .filter(|p| controlled_by(&p.metadata, &uid))
            .map(|p| &**p)
            .collect();
        let plan = replicaset::plan(rs, &mine, k8s_openapi::jiff::Timestamp::now().as_second());
        let pending = self.pending(&uid).len() as i32;
        let new = (0..(plan.create - pending).max(0))
            .map(|_| {
                let name = format!("{}-{}", rs.name_any(), random_suffix());
                (replicaset::new_pod(rs, &name), None)
            })
            .collect();
        self.create_pods(&uid, new).await;
        for name in &plan.delete {
            self.delete_pod(&ns, name).await;
        }
        self.patch_status(rs, rs.status.as_ref(), &plan.status)
            .await;
    }

    /// kube-scheduler's part for pods nobody else schedules: bind each to a node that fits.
    pub(super) async fn schedule_defaults(&self, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) {
        let mut bound: Vec<Pod> = pods.iter().map(|p| (**p).clone()).collect();
        let mut binds = Vec::new();
        let mut unschedulable = Vec::new();
        let mut seen = HashSet::new();
        for p in pods.iter().filter(|p| default_scheduler::wants(p)) {
            let key = (p.namespace().unwrap_or_default(), p.name_any());
            if !seen.insert(key.clone()) {
                continue;
            }
            match default_scheduler::pick(p, nodes, &bound) {
                Ok(node) => {
                    // Later pods of this pass see this one's requests on its node.
                    let mut placed = (**p).clone();
                    if let Some(s) = placed.spec.as_mut() {
                        s.node_name = Some(node.clone());
                    }
                    bound.push(placed);
                    binds.push((key, node));
                }
                Err(why) => {
                    tracing::debug!(pod = %key.1, namespace = %key.0, %why, "default scheduler: no node");
                    if default_scheduler::report_due(p, &why) {
                        unschedulable.push((p.clone(), why));
                    }
                }
            }
        }
        let client = self.client.clone();
        let unreached = &self.unreached;
        futures::stream::iter(binds)
            .map(|((ns, name), node)| {
                let client = client.clone();
                async move {
                    let api: Api<Pod> = Api::namespaced(client, &ns);
                    let body = json!({"apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name, "namespace": ns},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                    match api
                        .create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &body)
                        .await
                    {
                        Ok(_) => tracing::debug!(pod = %name, namespace = %ns, %node, "default scheduler bound pod"),
                        Err(e) => {
                            if !unreached.note(&e) {
                                tracing::debug!(pod = %name, error = %e, "default scheduler: bind failed")
                            }
                        }
                    }
                }
            })
            .buffer_unordered(BIND_BURST)
            .collect::<Vec<()>>()
            .await;
        for (p, why) in unschedulable {
            self.report_unschedulable(&p, &why).await;
        }
    }

    /// kube-scheduler's report of a pod that fits no node: `PodScheduled=False`
    /// (`Unschedulable`) and a `FailedScheduling` Warning, once per distinct reason.
    async fn report_unschedulable(&self, p: &Pod, why: &str) {
        let (ns, name) = (p.namespace().unwrap_or_default(), p.name_any());
        let patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": why, "lastTransitionTime": now()}]}});
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            if !self.unreached.note(&e) {
                tracing::debug!(pod = %name, error = %e, "default scheduler: condition not set");
            }
            return;
        }
        let pod = object_ref("Pod", Some(&ns), &name, p.metadata.uid.as_deref());
        let said = Said::warning("FailedScheduling", why);
        self.events.publish(&pod, &said, Some("Scheduling")).await;
    }
}
