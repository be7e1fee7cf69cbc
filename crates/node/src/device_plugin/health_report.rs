//! Telling people about health changes: a Node event per fault and per recovery, and an
//! event on every pod that holds one of the withdrawn devices (found through the kubelet's
//! PodResources API, as dcgm-exporter attributes metrics). Best effort: a failed report is
//! logged, never retried, and never delays the device list the kubelet sees.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use super::health::{FaultKind, Target};
use super::node_api::{self, Report};
use crate::host::pod_resources::{self as pods, ResourceFilter};

pub const REASON_UNHEALTHY: &str = "GPUUnhealthy";
pub const REASON_RECOVERED: &str = "GPUHealthy";

/// One change of health of the devices one fault covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub target: Target,
    pub kind: FaultKind,
    /// `None` = withdrawn now; `Some(d)` = recovered after `d` withdrawn.
    pub recovered_after: Option<Duration>,
    /// Advertised device IDs the fault covers (replica IDs included).
    pub devices: BTreeSet<String>,
}

impl Change {
    /// The event for the Node (and, withdrawn, for the pods holding the devices).
    pub fn report(&self) -> Report {
        let what = match self.target {
            Target::Gpu(g) => format!("GPU {g}"),
            Target::GpuInstance { gpu, gi } => format!("GPU {gpu} instance {gi}"),
            Target::Mig { gpu, gi, ci } => format!("GPU {gpu} MIG device {gi}/{ci}"),
        };
        let why = match self.kind {
            FaultKind::Lost => "fell off the bus (XID 79)".to_string(),
            FaultKind::Memory => "uncorrectable memory error (double-bit ECC / row remap)".into(),
            FaultKind::Xid(x) => format!("fatal XID {x}"),
        };
        let ids: Vec<&str> = self.devices.iter().map(String::as_str).collect();
        match self.recovered_after {
            None => Report {
                warning: true,
                reason: REASON_UNHEALTHY,
                action: "Withdraw",
                message: format!(
                    "{what} {why}: devices {} marked Unhealthy and withdrawn",
                    ids.join(",")
                ),
            },
            Some(d) => Report {
                warning: false,
                reason: REASON_RECOVERED,
                action: "Restore",
                message: format!(
                    "{what} healthy again after {}s ({why}): devices {} advertised Healthy",
                    d.as_secs(),
                    ids.join(",")
                ),
            },
        }
    }
}

/// Sends the events of `change` (spawned: never blocks the caller).
pub fn spawn(client: kube::Client, node: String, pod_resources: Option<PathBuf>, change: Change) {
    tokio::spawn(async move {
        let report = change.report();
        if let Err(e) = node_api::event(&client, &node, node_api::node_ref(&node), &report).await {
            tracing::warn!(error = %e, "cannot post the GPU health event on the Node");
        }
        if change.recovered_after.is_some() {
            return;
        }
        let Some(sock) = pod_resources else { return };
        let resp = match pods::list(&sock, Duration::from_secs(5)).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list pod resources for GPU health events");
                return;
            }
        };
        let held: BTreeSet<(String, String)> = pods::assignments(&resp, &ResourceFilter::default())
            .into_iter()
            .filter(|a| {
                let full = match &a.owner.vgpu {
                    Some(n) => format!("{}::{n}", a.device),
                    None => a.device.clone(),
                };
                change.devices.contains(&full) || change.devices.contains(&a.device)
            })
            .map(|a| (a.owner.namespace, a.owner.pod))
            .collect();
        for (ns, pod) in held {
            let object = node_api::pod_ref(&ns, &pod);
            if let Err(e) = node_api::event(&client, &node, object, &report).await {
                tracing::warn!(error = %e, %ns, %pod, "cannot post the GPU health event on the pod");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_name_the_gpu_the_cause_and_the_devices() {
        let mut change = Change {
            target: Target::Gpu(1),
            kind: FaultKind::Xid(119),
            recovered_after: None,
            devices: ["GPU-b::0".to_string(), "GPU-b::1".to_string()].into(),
        };
        let r = change.report();
        assert!(r.warning);
        assert_eq!(r.reason, REASON_UNHEALTHY);
        assert_eq!(
            r.message,
            "GPU 1 fatal XID 119: devices GPU-b::0,GPU-b::1 marked Unhealthy and withdrawn"
        );
        change.recovered_after = Some(Duration::from_secs(61));
        let r = change.report();
        assert!(!r.warning);
        assert_eq!(r.reason, REASON_RECOVERED);
        assert!(
            r.message.starts_with("GPU 1 healthy again after 61s"),
            "{}",
            r.message
        );
    }
}
