//! How to run the device plugin ([`Options`]) and what it is doing ([`PluginStatus`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

use super::health::HealthPolicy;
use super::load::{ConfigInputs, ConfigSource, Overrides};
use crate::proto::deviceplugin as pb;

/// How to run the device plugin.
#[derive(Clone)]
pub struct Options {
    /// The kubelet's device-plugins directory (our sockets go here).
    pub plugin_dir: PathBuf,
    /// `kubelet.sock`; `None` = serve only, never register.
    pub kubelet_socket: Option<PathBuf>,
    pub config: ConfigSource,
    /// Flags / env that beat the config file.
    pub overrides: Overrides,
    pub health: HealthPolicy,
    /// This node's name (for the config label and Node events).
    pub node_name: Option<String>,
    /// Kubernetes client, when running against an API server.
    pub kube: Option<kube::Client>,
    /// How often to check the kubelet socket, our sockets, the inventory and the config.
    pub poll_interval: Duration,
    /// The driver's `mig-minors` file (for MIG device specs); absent → the fixed layout.
    pub mig_minors_file: Option<PathBuf>,
    /// Where the IMEX channel device nodes are (`channel<N>`).
    pub imex_channel_dir: PathBuf,
    /// Receives a status snapshot after every change (tests, the sim kubelet, `/readyz`).
    pub status: Option<watch::Sender<PluginStatus>>,
    /// The kubelet's PodResources socket: which pods hold a withdrawn device (for events).
    pub pod_resources_socket: Option<PathBuf>,
    /// Serve `/metrics`, `/healthz`, `/readyz` here (port 0: any free port; the status says
    /// which).
    pub metrics_address: Option<std::net::SocketAddr>,
}

impl Options {
    /// Plugin in `plugin_dir`, registering with `plugin_dir/kubelet.sock`, built-in config.
    pub fn new(plugin_dir: impl Into<PathBuf>) -> Self {
        let plugin_dir = plugin_dir.into();
        // The kubelet keeps `pod-resources/` beside `device-plugins/`.
        let pod_resources = plugin_dir
            .parent()
            .map(|p| p.join("pod-resources").join("kubelet.sock"));
        Options {
            kubelet_socket: Some(plugin_dir.join(pb::KUBELET_SOCKET_NAME)),
            plugin_dir,
            config: ConfigSource::default(),
            overrides: Overrides::default(),
            health: HealthPolicy::default(),
            node_name: None,
            kube: None,
            poll_interval: Duration::from_millis(500),
            mig_minors_file: Some(PathBuf::from("/proc/driver/nvidia-caps/mig-minors")),
            imex_channel_dir: PathBuf::from(super::imex::CHANNEL_DIR),
            status: None,
            pod_resources_socket: pod_resources,
            metrics_address: None,
        }
    }

    /// What loading the config needs of these options.
    pub fn config_inputs(&self) -> ConfigInputs {
        ConfigInputs {
            source: self.config.clone(),
            overrides: self.overrides.clone(),
            imex_channel_dir: self.imex_channel_dir.clone(),
            kube: self.kube.clone(),
            node_name: self.node_name.clone(),
        }
    }
}

/// What the plugin is doing now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginStatus {
    /// Served resources and their device counts.
    pub resources: BTreeMap<String, usize>,
    /// Resources the kubelet accepted.
    pub registered: Vec<String>,
    /// The last config problem (kept until a good config is applied).
    pub config_error: Option<String>,
    /// Starts of the serving generation (1 = first start; +1 per restart).
    pub generation: u64,
    /// Number of devices currently Unhealthy, over all resources.
    pub unhealthy: usize,
    /// Devices withdrawn by a fault / restored by a recovery since the plugin started
    /// (each device counted once per fault).
    pub withdrawn_total: u64,
    pub recovered_total: u64,
    /// Where `/metrics` is served, once bound.
    pub metrics_address: Option<std::net::SocketAddr>,
}
