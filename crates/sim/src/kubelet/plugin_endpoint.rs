//! A device plugin registered with a node's kubelet: its client and options.

use std::path::PathBuf;

use gantry_node::proto::deviceplugin::DevicePluginOptions;
use gantry_node::proto::deviceplugin::device_plugin_client::DevicePluginClient;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// A registered plugin.
pub struct PluginEndpoint {
    pub client: DevicePluginClient<Channel>,
    pub options: DevicePluginOptions,
    pub socket: PathBuf,
    /// The ListAndWatch stream's task, stopped with the endpoint.
    pub(super) stream: JoinHandle<()>,
}

impl Drop for PluginEndpoint {
    fn drop(&mut self) {
        self.stream.abort();
    }
}
