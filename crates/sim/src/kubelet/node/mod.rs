//! Everything one node's tasks share: its identity, directories, GPUs, plugin devices and
//! endpoints, admitted pods and pod tasks, power and faults.

mod servers;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use gantry_gpu::SimBackend;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::admission::Requests;
use super::devices::DeviceState;
use super::lock::lock;
use super::node_dirs::NodeDirs;
use super::node_status::NodeResources;
use super::plugin_endpoint::PluginEndpoint;
use super::pods::handle::PodHandle;

/// Everything one node's tasks share.
pub struct NodeShared {
    pub name: String,
    pub dirs: NodeDirs,
    pub resources: NodeResources,
    /// The node's simulated GPUs (`None` on a CPU node).
    pub backend: Option<Arc<SimBackend>>,
    pub devices: Mutex<DeviceState>,
    pub endpoints: Mutex<BTreeMap<String, PluginEndpoint>>,
    /// Serialises device allocation so two pods never pick the same device.
    pub alloc_lock: tokio::sync::Mutex<()>,
    /// Node status needs writing.
    pub changed: Notify,
    /// Power: `false` stops every container and the node's heartbeat.
    pub power: watch::Sender<bool>,
    /// The `driver-fail` fault: the node's driver container fails while set.
    pub driver_fail: watch::Sender<bool>,
    /// Admitted pods' requests, by uid (admission accounting).
    pub admitted: Mutex<HashMap<String, Requests>>,
    /// Pod tasks, by uid.
    pub pods: Mutex<HashMap<String, PodHandle>>,
    /// The Registration and PodResources servers (started and stopped in `servers.rs`).
    registration: Mutex<Option<JoinHandle<()>>>,
    pod_resources: Mutex<Option<JoinHandle<()>>>,
}

impl NodeShared {
    pub fn new(
        root: &Path,
        name: &str,
        resources: NodeResources,
        backend: Option<Arc<SimBackend>>,
    ) -> Arc<Self> {
        Arc::new(NodeShared {
            name: name.to_string(),
            dirs: NodeDirs::new(root, name),
            resources,
            backend,
            devices: Mutex::new(DeviceState::default()),
            endpoints: Mutex::new(BTreeMap::new()),
            alloc_lock: tokio::sync::Mutex::new(()),
            changed: Notify::new(),
            power: watch::Sender::new(true),
            driver_fail: watch::Sender::new(false),
            admitted: Mutex::new(HashMap::new()),
            pods: Mutex::new(HashMap::new()),
            registration: Mutex::new(None),
            pod_resources: Mutex::new(None),
        })
    }

    pub fn is_powered(&self) -> bool {
        *self.power.borrow()
    }

    /// Capacity and allocatable of the plugin resources.
    pub fn extended(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let d = lock(&self.devices);
        (d.capacity(), d.allocatable())
    }
}

impl Drop for NodeShared {
    fn drop(&mut self) {
        for slot in [&self.registration, &self.pod_resources] {
            if let Some(h) = lock(slot).take() {
                h.abort();
            }
        }
    }
}
