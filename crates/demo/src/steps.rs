//! The demo's working parts: what kind of node each planned node is, and `Run`, which
//! applies, waits, reads the cluster and reports a phase's frames.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gantry_api::names;
use gantry_sim::kubelet::NodeShared;
use gantry_sim::nodes::NodePlan;
use gantry_sim::ui::{Collector, Snapshot};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::sync::Arc;

use crate::DemoError;
use crate::frames::{self, Frame};
use crate::scenario::PHASES;
use crate::view::{Reporter, Update};
use crate::wait::{Progress, until};

/// What kind of GPU node the demo makes of each model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Whole,
    Mig,
    TimeSliced,
}

pub(crate) fn role(p: &NodePlan) -> Option<Role> {
    let m = p.gpu.filter(|_| p.gpus > 0)?;
    Some(if m.key.starts_with("A100") {
        Role::Mig
    } else if m.key == "L4" || m.key == "T4" {
        Role::TimeSliced
    } else {
        Role::Whole
    })
}

pub(crate) fn alloc(node: &Node, resource: &str) -> i64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn mig_alloc(node: &Node) -> i64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| {
            a.iter()
                .filter(|(k, _)| k.starts_with("nvidia.com/mig-"))
                .filter_map(|(_, q)| q.0.parse::<i64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

pub(crate) struct Run<'a> {
    pub(crate) client: kube::Client,
    pub(crate) collector: Collector,
    pub(crate) sim_nodes: Vec<Arc<NodeShared>>,
    pub(crate) frames: Vec<Frame>,
    pub(crate) plan: &'a [NodePlan],
    pub(crate) report: Reporter,
    pub(crate) timeout: Duration,
    pub(crate) phase: usize,
    pub(crate) phases: Vec<(String, Duration)>,
    pub(crate) started: Instant,
}

impl Run<'_> {
    pub(crate) fn begin(&mut self, name: &str) {
        self.phase += 1;
        self.started = Instant::now();
        let _ = self.report.send(Update::Phase {
            index: self.phase,
            total: PHASES,
            name: name.to_string(),
        });
    }

    pub(crate) fn step(&self, s: impl Into<String>) {
        let _ = self.report.send(Update::Step(s.into()));
    }

    /// Read the cluster until `check` passes on what was read; that reading. The reasons
    /// it has not passed yet show in the live view and, on timeout, in the error.
    pub(crate) async fn frame_when<F>(&self, what: &str, check: F) -> Result<Snapshot, DemoError>
    where
        F: Fn(&Snapshot) -> Result<(), String>,
    {
        until(what, self.timeout, || async {
            let s = self
                .collector
                .collect(&self.client, &self.sim_nodes)
                .await
                .map_err(|e| DemoError::kube("reading the cluster for the picture", e))?;
            Ok(match check(&s) {
                Ok(()) => Progress::Done(s),
                Err(why) => {
                    let _ = self.report.send(Update::Progress(why.clone()));
                    Progress::NotYet(why)
                }
            })
        })
        .await
    }

    /// A frame in the middle of a phase, once the cluster shows what `caption` says.
    pub(crate) async fn show<F>(&mut self, caption: &str, check: F) -> Result<(), DemoError>
    where
        F: Fn(&Snapshot) -> Result<(), String>,
    {
        let snap = self.frame_when(caption, check).await?;
        self.frames.push(Frame {
            caption: caption.to_string(),
            snapshot: snap.clone(),
        });
        let _ = self.report.send(Update::Frame {
            caption: caption.to_string(),
            snapshot: Box::new(snap),
        });
        Ok(())
    }

    /// End the phase once the cluster shows what the phase claims (`shows`, checked by
    /// `check`); that reading is the phase's frame.
    pub(crate) async fn end<F>(
        &mut self,
        name: &str,
        shows: &str,
        check: F,
    ) -> Result<(), DemoError>
    where
        F: Fn(&Snapshot) -> Result<(), String>,
    {
        let snap = self.frame_when(shows, check).await?;
        let d = self.started.elapsed();
        self.phases.push((name.to_string(), d));
        self.frames.push(Frame {
            caption: format!("done: {name}"),
            snapshot: snap.clone(),
        });
        let _ = self.report.send(Update::PhaseDone {
            name: name.to_string(),
            secs: d.as_secs_f64(),
            snapshot: Box::new(snap),
        });
        Ok(())
    }

    pub(crate) fn node_names(&self) -> Vec<String> {
        self.plan.iter().map(|p| p.name.clone()).collect()
    }

    pub(crate) fn all_ready(&self) -> impl Fn(&Snapshot) -> Result<(), String> + use<> {
        let names = self.node_names();
        move |s| frames::nodes_ready(s, names.iter().map(String::as_str))
    }

    pub(crate) fn nodes_with(&self, r: Role) -> Vec<&NodePlan> {
        self.plan.iter().filter(|p| role(p) == Some(r)).collect()
    }

    pub(crate) async fn label_node(
        &self,
        node: &str,
        key: &str,
        value: &str,
    ) -> Result<(), DemoError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"labels": {key: value}}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| DemoError::kube(&format!("labelling node {node}"), e))?;
        Ok(())
    }

    pub(crate) async fn nodes(&self) -> Result<BTreeMap<String, Node>, DemoError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| DemoError::kube("listing nodes", e))?;
        Ok(list
            .items
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
            .collect())
    }

    pub(crate) async fn pods(
        &self,
        ns: Option<&str>,
        selector: &str,
    ) -> Result<Vec<Pod>, DemoError> {
        let api: Api<Pod> = match ns {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let lp = if selector.is_empty() {
            ListParams::default()
        } else {
            ListParams::default().labels(selector)
        };
        Ok(api
            .list(&lp)
            .await
            .map_err(|e| DemoError::kube("listing pods", e))?
            .items)
    }

    /// Wait until Job `ns/job` has `want` Running pods.
    pub(crate) async fn job_running(
        &self,
        ns: &str,
        job: &str,
        want: usize,
    ) -> Result<(), DemoError> {
        let what = format!("Job {ns}/{job} to have {want} running pods");
        until(&what, self.timeout, || async {
            let pods = self.pods(Some(ns), &format!("job-name={job}")).await?;
            let running = pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            Ok(if running >= want {
                Progress::Done(())
            } else {
                Progress::NotYet(format!("{running} of {want} running"))
            })
        })
        .await
    }

    pub(crate) fn dynamic(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
    ) -> Api<DynamicObject> {
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        Api::all_with(self.client.clone(), &ar)
    }

    /// Every GPU node advertises what its role promises.
    pub(crate) async fn gpus_advertised(&self) -> Result<Progress<()>, DemoError> {
        let nodes = self.nodes().await?;
        for p in self.plan {
            let Some(r) = role(p) else { continue };
            let Some(n) = nodes.get(&p.name) else {
                return Ok(Progress::NotYet(format!("node {} not registered", p.name)));
            };
            let gpus = alloc(n, names::RESOURCE_GPU);
            let ok = match r {
                Role::Whole => gpus == p.gpus as i64,
                Role::TimeSliced => gpus == 4 * p.gpus as i64,
                Role::Mig => mig_alloc(n) > 0,
            };
            if !ok {
                return Ok(Progress::NotYet(format!(
                    "{} advertises nvidia.com/gpu={gpus}, mig={}",
                    p.name,
                    mig_alloc(n)
                )));
            }
        }
        Ok(Progress::Done(()))
    }

    pub(crate) async fn cluster_policy_state(&self) -> Result<String, DemoError> {
        let api = self.dynamic("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies");
        let cp = api
            .get("cluster-policy")
            .await
            .map_err(|e| DemoError::kube("reading ClusterPolicy cluster-policy", e))?;
        Ok(cp.data["status"]["state"]
            .as_str()
            .unwrap_or("")
            .to_string())
    }
}

pub(crate) fn gpu_node_names(plan: &[NodePlan]) -> Vec<String> {
    plan.iter()
        .filter(|p| role(p).is_some())
        .map(|p| p.name.clone())
        .collect()
}
