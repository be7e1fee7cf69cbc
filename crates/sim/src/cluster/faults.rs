//! Faults (and repairs) injected into a running sim's nodes: GPU errors through the simulated
//! NVML backend, power and driver failures through the node's shared state.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::ClusterError;
use crate::kubelet::NodeShared;

/// A fault (or repair) to inject into a running sim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Fault {
    /// An XID error on a GPU.
    Xid { gpu: u32, xid: u64 },
    /// The GPU falls off the bus (XID 79; every NVML call on it fails).
    OffBus { gpu: u32 },
    /// A double-bit ECC error (XID 48, counters, pending row remap).
    EccDbe { gpu: u32 },
    /// Reset the GPU: clears a lost GPU, the last XID, volatile ECC counts.
    Clear { gpu: u32 },
    /// The node loses power: containers stop, no heartbeat, Ready becomes Unknown.
    PowerOff,
    /// Power returns: kubelet restarts (plugin sockets wiped), containers start again.
    PowerOn,
    /// The node's driver container fails (exits 1, so it crash-loops) until `DriverOk`.
    DriverFail,
    /// Clear `DriverFail`: the driver container's next restart installs the driver.
    DriverOk,
}

/// Apply a fault to a node; returns a one-line description of what happened.
pub async fn apply_fault(n: &Arc<NodeShared>, fault: &Fault) -> Result<String, ClusterError> {
    let err = |reason: String| ClusterError::Fault {
        node: n.name.clone(),
        reason,
    };
    let gpu_backend = || {
        n.backend
            .clone()
            .ok_or_else(|| err("is a CPU node; GPU faults need a GPU node".into()))
    };
    match fault {
        Fault::Xid { gpu, xid } => {
            gpu_backend()?
                .inject_xid(*gpu, *xid, None, None)
                .map_err(|e| err(e.to_string()))?;
            Ok(format!("{}: XID {xid} on GPU {gpu}", n.name))
        }
        Fault::OffBus { gpu } => {
            gpu_backend()?
                .inject_fallen_off_bus(*gpu)
                .map_err(|e| err(e.to_string()))?;
            Ok(format!("{}: GPU {gpu} fell off the bus (XID 79)", n.name))
        }
        Fault::EccDbe { gpu } => {
            gpu_backend()?
                .inject_ecc_dbe(*gpu)
                .map_err(|e| err(e.to_string()))?;
            Ok(format!(
                "{}: double-bit ECC error on GPU {gpu} (XID 48)",
                n.name
            ))
        }
        Fault::Clear { gpu } => {
            gpu_backend()?
                .reset_gpu(*gpu)
                .map_err(|e| err(e.to_string()))?;
            Ok(format!("{}: GPU {gpu} reset", n.name))
        }
        Fault::PowerOff => {
            if !n.is_powered() {
                return Ok(format!("{}: already powered off", n.name));
            }
            n.power.send_replace(false);
            n.stop_servers();
            n.changed.notify_one();
            Ok(format!("{}: powered off", n.name))
        }
        Fault::DriverFail => {
            let was = n.driver_fail.send_replace(true);
            Ok(format!(
                "{}: driver container fails{}",
                n.name,
                if was { " (already)" } else { "" }
            ))
        }
        Fault::DriverOk => {
            let was = n.driver_fail.send_replace(false);
            Ok(format!(
                "{}: driver fault cleared{}",
                n.name,
                if was { "" } else { " (none was set)" }
            ))
        }
        Fault::PowerOn => {
            if n.is_powered() {
                return Ok(format!("{}: already powered on", n.name));
            }
            n.start_servers().await?;
            n.power.send_replace(true);
            n.changed.notify_one();
            Ok(format!("{}: powered on", n.name))
        }
    }
}
