//! Node labelling shell: plans every node with [`crate::nodes::plan`], writes only the nodes
//! whose plan is not a no-op (a merge patch removing keys, a server-side apply of the keys
//! the operator owns).

use std::collections::BTreeMap;
use std::sync::Arc;

use gantry_api::cluster_policy::ClusterPolicySpec;
use gantry_api::names;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use serde_json::{Map, Value, json};

use super::{Ctx, Error};
use crate::FIELD_MANAGER;
use crate::nodes::{self, NodePlan};
use crate::render::{self, NodeFacts};

/// Every node's plan, and what the render needs to know.
pub(crate) struct Plans {
    /// Nodes whose plan writes something.
    pub changes: Vec<(String, NodePlan)>,
    /// GPU nodes (`gpu.present=true` once the plans are written), with those labels.
    pub gpu_nodes: Vec<NodeFacts>,
    pub nfd_present: bool,
}

static NONE: BTreeMap<String, String> = BTreeMap::new();

pub(crate) fn plan_all(spec: &ClusterPolicySpec, all: &[Arc<PartialObjectMeta<Node>>]) -> Plans {
    let mut out = Plans {
        changes: Vec::new(),
        gpu_nodes: Vec::new(),
        nfd_present: false,
    };
    let mut sorted: Vec<&Arc<PartialObjectMeta<Node>>> = all.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for n in sorted {
        let Some(name) = n.metadata.name.clone() else {
            continue;
        };
        // Borrowed, not cloned: at 1,000 nodes every copy of the labels is megabytes a round.
        let labels = n.metadata.labels.as_ref().unwrap_or(&NONE);
        let annotations = n.metadata.annotations.as_ref().unwrap_or(&NONE);
        out.nfd_present |= nodes::has_nfd_labels(labels);
        let plan = nodes::plan(spec, labels, annotations);
        if plan.label_after(labels, names::LABEL_GPU_PRESENT) == Some("true") {
            let facts = render::NODE_LABELS
                .iter()
                .filter_map(|k| Some((k.to_string(), plan.label_after(labels, k)?.to_string())))
                .collect();
            out.gpu_nodes.push(NodeFacts {
                name: name.clone(),
                labels: facts,
            });
        }
        if !plan.is_noop() {
            out.changes.push((name, plan));
        }
    }
    out
}

pub(crate) async fn write_all(ctx: &Ctx, changes: &[(String, NodePlan)]) -> Result<(), Error> {
    use futures::StreamExt;
    let api: Api<Node> = Api::all(ctx.client.clone());
    // A few at a time: one by one, labelling a new 1,000-node cluster took as many round trips
    // back to back. Every node is tried; the first failure is reported.
    let writes: Vec<_> = changes
        .iter()
        .map(|(name, plan)| write(ctx, &api, name, plan))
        .collect();
    let results: Vec<Result<(), Error>> = futures::stream::iter(writes)
        .buffered(NODE_WRITES_IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Node label writes in flight at once.
const NODE_WRITES_IN_FLIGHT: usize = 16;

fn nulls<'a>(keys: impl Iterator<Item = &'a String>) -> Map<String, Value> {
    keys.map(|k| (k.clone(), Value::Null)).collect()
}

async fn write(ctx: &Ctx, api: &Api<Node>, name: &str, plan: &NodePlan) -> Result<(), Error> {
    let what = format!("Node {name}");
    if !plan.remove_labels.is_empty() || !plan.remove_annotations.is_empty() {
        let body = json!({"metadata": {
            "labels": nulls(plan.remove_labels.iter()),
            "annotations": nulls(plan.remove_annotations.iter()),
        }});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        ctx.metrics.wrote();
        api.patch(name, &pp, &Patch::Merge(&body))
            .await
            .map_err(|e| Error::api("removing operator labels from", what.clone(), e))?;
    }
    if plan.apply_needed {
        let body = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": plan.labels, "annotations": plan.annotations},
        });
        ctx.metrics.wrote();
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(|e| Error::api("labelling", what, e))?;
    }
    Ok(())
}
