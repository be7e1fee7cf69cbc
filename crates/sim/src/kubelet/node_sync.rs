//! One task per node: register the Node, then keep its status (capacity, allocatable,
//! conditions) and its heartbeat Lease in `kube-node-lease` current. Status is written when it
//! changes and at least every [`STATUS_HEARTBEAT`]; the Lease every [`LEASE_RENEW`].

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::node_status::{self, StatusInputs};
use super::{KubeletError, NodeShared};
use crate::written::Written;

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// An unchanged node status is posted again after this long: upstream's
/// `nodeStatusReportFrequency` default (the Lease carries liveness; a change posts at once).
pub const STATUS_HEARTBEAT: Duration = Duration::from_secs(300);
/// Coalesce bursts of device updates into one write.
const DEBOUNCE: Duration = Duration::from_millis(50);

fn micro_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn api_err(node: &str) -> impl Fn(kube::Error) -> KubeletError + '_ {
    move |source| KubeletError::Api {
        node: node.to_string(),
        source,
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Create the Node (or merge our labels into an existing one, as a restarted kubelet does).
pub async fn register(node: &NodeShared, client: &kube::Client) -> Result<Node, KubeletError> {
    let api: Api<Node> = Api::all(client.clone());
    let obj = node_status::node_object(&node.name, &node.resources);
    match api.create(&PostParams::default(), &obj).await {
        Ok(n) => Ok(n),
        Err(e) if is_status(&e, 409) => {
            let patch = json!({"metadata": {"labels": obj.metadata.labels}});
            api.patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_err(&node.name))
        }
        Err(e) => Err(api_err(&node.name)(e)),
    }
}

async fn write_status(
    node: &NodeShared,
    client: &kube::Client,
    s: &StatusInputs,
    boot_id: &str,
) -> Result<(), KubeletError> {
    let api: Api<Written<Node>> = Api::all(client.clone());
    let patch = node_status::status_patch(&node.name, &node.resources, s, boot_id, &micro_now());
    api.patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(api_err(&node.name))
}

async fn renew_lease(
    node: &NodeShared,
    client: &kube::Client,
    node_uid: &str,
) -> Result<(), KubeletError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let renewals: Api<Written<Lease>> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let now = micro_now();
    let spec = json!({"holderIdentity": node.name, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": now});
    match renewals
        .patch(
            &node.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => {
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": node.name, "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node_uid}]},
                "spec": spec,
            }))
            .map_err(|e| KubeletError::Io {
                path: LEASE_NAMESPACE.into(),
                reason: e.to_string(),
            })?;
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(()),
                Err(e) if is_status(&e, 409) => Ok(()),
                Err(e) => Err(api_err(&node.name)(e)),
            }
        }
        Err(e) => Err(api_err(&node.name)(e)),
    }
}

/// Register, then heartbeat until the task is aborted. Errors are retried (logged).
pub async fn run(node: Arc<NodeShared>, client: kube::Client) {
    let boot_id = uuid::Uuid::new_v4().to_string();
    let registered = loop {
        match register(&node, &client).await {
            Ok(n) => break n,
            Err(e) => {
                gantry_node::warn_limited!("sim node registration", error = %e, node = %node.name, "node registration failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let uid = registered.metadata.uid.unwrap_or_default();
    let mut power = node.power.subscribe();
    let mut written: Option<StatusInputs> = None;
    let mut last_status = tokio::time::Instant::now();
    let mut next_lease = tokio::time::Instant::now();
    let mut lease_ok = true;
    loop {
        let powered = *power.borrow_and_update();
        let (cap, alloc) = node.extended();
        let s = node_status::inputs(&node.resources, powered, &cap, &alloc);
        let due = last_status.elapsed() >= STATUS_HEARTBEAT;
        // Powered off: write the Unknown status once (as the node lifecycle controller
        // would), then nothing — not even the Lease.
        if written.as_ref() != Some(&s) || (due && powered) {
            match write_status(&node, &client, &s, &boot_id).await {
                Ok(()) => {
                    written = Some(s);
                    last_status = tokio::time::Instant::now();
                }
                Err(e) => tracing::debug!(error = %e, "node status write failed"),
            }
        }
        if powered && tokio::time::Instant::now() >= next_lease {
            match renew_lease(&node, &client, &uid).await {
                Ok(()) => lease_ok = true,
                Err(e) => {
                    if lease_ok {
                        gantry_node::warn_limited!("sim lease renewal", error = %e, "lease renewal failed");
                    }
                    lease_ok = false;
                }
            }
            next_lease = tokio::time::Instant::now() + LEASE_RENEW;
        }
        let wake = if powered {
            next_lease.min(last_status + STATUS_HEARTBEAT)
        } else {
            last_status + Duration::from_secs(3600)
        };
        tokio::select! {
            _ = node.changed.notified() => tokio::time::sleep(DEBOUNCE).await,
            _ = power.changed() => {}
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}
