//! A simulated kubelet, one per simulated node, all in one process: the device plugin API
//! (kubelet side) and PodResources over real gRPC on real unix sockets, the Node object and its
//! Lease, and the lifecycle of the pods bound to the node. Pod events come from one shared
//! watch (see [`crate::cluster`]); everything per node is a handful of tokio tasks.

pub mod admission;
pub mod component_pods;
pub mod devices;
pub mod driver;
pub mod env;
pub mod in_process;
pub mod node_agents;
pub mod node_status;
pub mod node_sync;
pub mod plugins;
pub mod podresources;
pub mod pods;
pub mod probe;
pub mod tools;
pub mod volumes;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use gantry_gpu::SimBackend;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use in_process::{AgentContext, AgentRegistry, AgentRunner};
pub use node_status::NodeResources;

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("node {node}: device plugin registration for {resource:?} refused: {reason}")]
    Registration {
        node: String,
        resource: String,
        reason: String,
    },
    #[error("cannot dial device plugin socket {socket}: {reason}")]
    Dial { socket: PathBuf, reason: String },
    #[error("device plugin for {resource}: {call} failed: {status}")]
    Plugin {
        resource: String,
        call: &'static str,
        status: String,
    },
    #[error("pod {pod} container {container}: cannot allocate {resource}: {reason}")]
    Allocate {
        pod: String,
        container: String,
        resource: String,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("node {node}: API call failed: {source}")]
    Api {
        node: String,
        #[source]
        source: kube::Error,
    },
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking task must not wedge the whole node.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The directories of one node under the sim root: `<root>/<node>` is the node's host root.
#[derive(Debug, Clone)]
pub struct NodeDirs {
    pub host_root: PathBuf,
    /// `<host>/device-plugins`: kubelet.sock and the plugins' sockets.
    pub device_plugins: PathBuf,
    /// `<host>/pod-resources`.
    pub pod_resources: PathBuf,
}

impl NodeDirs {
    pub fn new(root: &Path, node: &str) -> Self {
        let host_root = root.join(node);
        NodeDirs {
            device_plugins: host_root.join("device-plugins"),
            pod_resources: host_root.join("pod-resources"),
            host_root,
        }
    }
    pub fn kubelet_socket(&self) -> PathBuf {
        self.device_plugins
            .join(gantry_node::proto::deviceplugin::KUBELET_SOCKET_NAME)
    }
    pub fn pod_resources_socket(&self) -> PathBuf {
        self.pod_resources.join("kubelet.sock")
    }

    /// Make the node's host dir look like a GPU host's: a containerd config for the toolkit to
    /// edit (kept if one exists, so a restarted sim keeps its edits), the validations dir, and
    /// on a GPU node the `/dev/nvidia*` nodes the loaded driver creates (empty files).
    pub async fn seed_host(&self, gpus: u32) -> Result<(), KubeletError> {
        let io = |path: &Path, e: std::io::Error| KubeletError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let etc = self.host_root.join("etc/containerd");
        tokio::fs::create_dir_all(&etc)
            .await
            .map_err(|e| io(&etc, e))?;
        let config = etc.join("config.toml");
        if !tokio::fs::try_exists(&config).await.unwrap_or(false) {
            tokio::fs::write(&config, CONTAINERD_CONFIG)
                .await
                .map_err(|e| io(&config, e))?;
        }
        let validations = self.host_root.join("run/nvidia/validations");
        tokio::fs::create_dir_all(&validations)
            .await
            .map_err(|e| io(&validations, e))?;
        if gpus > 0 {
            let dev = self.host_root.join("dev");
            tokio::fs::create_dir_all(&dev)
                .await
                .map_err(|e| io(&dev, e))?;
            let control = [
                "nvidiactl",
                "nvidia-uvm",
                "nvidia-uvm-tools",
                "nvidia-modeset",
            ];
            let per_gpu = (0..gpus).map(|i| format!("nvidia{i}"));
            for name in control.iter().map(|s| s.to_string()).chain(per_gpu) {
                let path = dev.join(name);
                tokio::fs::write(&path, b"")
                    .await
                    .map_err(|e| io(&path, e))?;
            }
        }
        Ok(())
    }
}

/// What a freshly installed node's `/etc/containerd/config.toml` looks like (containerd 1.7,
/// config version 2, systemd cgroups as kubeadm sets them up).
pub const CONTAINERD_CONFIG: &str = r#"# containerd config written at node provisioning
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
"#;

/// Identity of a pod the kubelet runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub uid: String,
    pub name: String,
    pub namespace: String,
}

/// Everything one node's tasks share.
pub struct NodeShared {
    pub name: String,
    pub dirs: NodeDirs,
    pub resources: NodeResources,
    /// The node's simulated GPUs (`None` on a CPU node).
    pub backend: Option<Arc<SimBackend>>,
    pub devices: Mutex<devices::DeviceState>,
    pub endpoints: Mutex<BTreeMap<String, plugins::PluginEndpoint>>,
    /// Serialises device allocation so two pods never pick the same device.
    pub alloc_lock: tokio::sync::Mutex<()>,
    /// Node status needs writing.
    pub changed: Notify,
    /// Power: `false` stops every container and the node's heartbeat.
    pub power: watch::Sender<bool>,
    /// The `driver-fail` fault: the node's driver container fails while set.
    pub driver_fail: watch::Sender<bool>,
    /// Admitted pods' requests, by uid (admission accounting).
    pub admitted: Mutex<HashMap<String, admission::Requests>>,
    /// Pod tasks, by uid.
    pub pods: Mutex<HashMap<String, pods::PodHandle>>,
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
            devices: Mutex::new(devices::DeviceState::default()),
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

    /// Start the node-local servers: registration (with the restart wipe) and PodResources.
    pub async fn start_servers(self: &Arc<Self>) -> Result<(), KubeletError> {
        let reg = plugins::start_registration(self).await?;
        if let Some(old) = lock(&self.registration).replace(reg) {
            old.abort();
        }
        let pr = podresources::start(self).await?;
        if let Some(old) = lock(&self.pod_resources).replace(pr) {
            old.abort();
        }
        Ok(())
    }

    /// Stop the node-local servers and drop every plugin connection.
    pub fn stop_servers(&self) {
        for slot in [&self.registration, &self.pod_resources] {
            if let Some(h) = lock(slot).take() {
                h.abort();
            }
        }
        lock(&self.endpoints).clear();
        lock(&self.devices).forget_plugins();
        self.changed.notify_one();
        let _ = std::fs::remove_file(self.dirs.kubelet_socket());
        let _ = std::fs::remove_file(self.dirs.pod_resources_socket());
    }

    /// Kubelet restart: plugin sockets wiped, registrations forgotten, kubelet.sock recreated.
    /// Running pods keep their devices.
    pub async fn restart_device_manager(self: &Arc<Self>) -> Result<(), KubeletError> {
        if let Some(h) = lock(&self.registration).take() {
            h.abort();
        }
        let reg = plugins::start_registration(self).await?;
        *lock(&self.registration) = Some(reg);
        Ok(())
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
