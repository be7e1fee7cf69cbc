//! The node-local servers a kubelet runs (device plugin Registration, PodResources) and the
//! kubelet-restart semantics; they start with the node and stop with its power.

use std::sync::Arc;

use super::NodeShared;
use crate::kubelet::error::KubeletError;
use crate::kubelet::lock::lock;
use crate::kubelet::{plugins, podresources};

impl NodeShared {
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
}
