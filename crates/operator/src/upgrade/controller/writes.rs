//! What a round writes: node patches, Events, and the plan's actions.

use super::*;
use gantry_runtime::events::{Recorder, Said, object_ref};

pub(super) async fn patch_node(
    client: &kube::Client,
    node: &str,
    body: serde_json::Value,
) -> Result<(), kube::Error> {
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    Api::<Node>::all(client.clone())
        .patch(node, &pp, &Patch::Merge(&body))
        .await
        .map(|_| ())
}

/// A Node event about the driver upgrade, through the one recorder. Each is a transition
/// of the node's upgrade state, written as it comes.
pub(super) async fn event(
    client: &kube::Client,
    node: &str,
    uid: Option<&String>,
    warning: bool,
    message: &str,
) {
    let said = if warning {
        Said::warning(EVENT_REASON, message)
    } else {
        Said::normal(EVENT_REASON, message)
    };
    let node = object_ref("Node", None, node, uid.map(String::as_str));
    Recorder::new(client.clone(), crate::FIELD_MANAGER, crate::FIELD_MANAGER)
        .publish(&node, &said, None)
        .await;
}

/// Apply actions in order; a failed action skips the rest of its node's actions this round
/// (so the state label, which comes last, is not advanced past work that did not happen).
pub(super) async fn apply(
    client: &kube::Client,
    actions: &[Action],
    uids: &BTreeMap<String, String>,
) -> Result<usize, UpgradeError> {
    let mut broken: HashSet<String> = HashSet::new();
    let mut failures: Vec<String> = Vec::new();
    let mut done = 0usize;
    for a in actions {
        let node = a.node();
        if broken.contains(node) {
            continue;
        }
        let result: Result<(), kube::Error> = match a {
            Action::SetState { node, state } => {
                let r = patch_node(
                    client,
                    node,
                    json!({"metadata": {"labels": {names::LABEL_UPGRADE_STATE: state.label()}}}),
                )
                .await;
                if r.is_ok() {
                    tracing::info!(node, state = %state, "driver upgrade state");
                    let warning = *state == UpgradeState::UpgradeFailed;
                    let msg = format!("Successfully updated node state label to {state}");
                    event(client, node, uids.get(node), warning, &msg).await;
                }
                r
            }
            Action::ClearState { node } => {
                patch_node(
                    client,
                    node,
                    json!({"metadata": {"labels": {names::LABEL_UPGRADE_STATE: null}}}),
                )
                .await
            }
            Action::Annotate { node, key, value } => {
                patch_node(
                    client,
                    node,
                    json!({"metadata": {"annotations": {*key: value}}}),
                )
                .await
            }
            Action::Cordon { node } => {
                patch_node(client, node, json!({"spec": {"unschedulable": true}})).await
            }
            Action::Uncordon { node } => {
                patch_node(client, node, json!({"spec": {"unschedulable": null}})).await
            }
            Action::Evict { pod, .. } => {
                let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
                match api.evict(&pod.name, &EvictParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(e) if not_found(&e) => Ok(()),
                    // A PodDisruptionBudget says not now: try again next round (the timeout
                    // annotation bounds how long).
                    Err(kube::Error::Api(s)) if s.code == 429 => {
                        tracing::info!(pod = %pod, "eviction blocked by a disruption budget; retrying");
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Action::DeletePod { pod, .. } => {
                let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
                match api.delete(&pod.name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(e) if not_found(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Action::Event {
                node,
                warning,
                message,
            } => {
                event(client, node, uids.get(node), *warning, message).await;
                Ok(())
            }
        };
        match result {
            Ok(()) => done += 1,
            Err(e) => {
                broken.insert(node.to_string());
                failures.push(format!("node {node}: {a:?}: {e}"));
            }
        }
    }
    match failures.first() {
        None => Ok(done),
        Some(first) => Err(UpgradeError::Apply {
            count: failures.len(),
            first: first.clone(),
        }),
    }
}
