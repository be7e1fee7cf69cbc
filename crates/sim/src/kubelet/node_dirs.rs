//! A node's host directories under the sim root, and what a fresh GPU host holds in them.

use std::path::{Path, PathBuf};

use super::error::KubeletError;

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
