//! `--component metrics`: the node status exporter. Each scrape reads the ready files and the
//! Node's advertised devices and renders them as Prometheus gauges.

use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use super::checks;
use super::component::{Component, ValidatorError};
use super::options::{Seams, ValidatorOptions};

/// What one scrape reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// Ready state per component, in [`Component::ALL`] order.
    pub ready: Vec<(Component, bool)>,
    /// Devices the device plugin advertises (`None`: unknown, the gauge is left out).
    pub plugin_devices: Option<u64>,
}

/// The exposition text, pure.
pub fn render(s: &NodeStatus) -> String {
    let mut out = String::new();
    for (c, ready) in &s.ready {
        let name = format!("gpu_operator_node_{}_ready", c.name());
        let _ = writeln!(
            out,
            "# HELP {name} 1 when the {c} validation has passed on this node\n# TYPE {name} gauge\n{name} {}",
            u8::from(*ready)
        );
    }
    if let Some(n) = s.plugin_devices {
        let name = "gpu_operator_node_device_plugin_devices_total";
        let _ = writeln!(
            out,
            "# HELP {name} GPU and MIG devices the device plugin advertises on this node\n# TYPE {name} gauge\n{name} {n}"
        );
    }
    out
}

/// Read the node's current status through the seams.
pub async fn collect(opts: &ValidatorOptions, seams: &Seams) -> NodeStatus {
    let ready = Component::ALL
        .into_iter()
        .map(|c| (c, opts.output_dir.join(c.ready_file()).exists()))
        .collect();
    let plugin_devices = match (&seams.cluster, &opts.node_name) {
        (Some(cluster), Some(node)) => match cluster.allocatable(node).await {
            Ok(a) => Some(checks::plugin_devices(&a)),
            Err(e) => {
                tracing::warn!("device count left out of this scrape: {e}");
                None
            }
        },
        _ => None,
    };
    NodeStatus {
        ready,
        plugin_devices,
    }
}

pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, ValidatorError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ValidatorError::Bind { address, source })
}

/// Serve `/metrics`, `/healthz` and `/readyz` on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    opts: ValidatorOptions,
    seams: Seams,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ValidatorError> {
    use gantry_runtime::health::{self, Endpoints};
    let address = listener.local_addr().unwrap_or(opts.metrics_address);
    let state = Arc::new((opts, seams));
    let endpoints = Endpoints::new_async(health::PROMETHEUS_TEXT, move || {
        let state = state.clone();
        async move { render(&collect(&state.0, &state.1).await) }
    });
    tracing::info!(%address, "serving node validation metrics");
    health::serve(listener, endpoints, shutdown)
        .await
        .map_err(|source| ValidatorError::Bind { address, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_gauges() {
        let text = render(&NodeStatus {
            ready: vec![(Component::Driver, true), (Component::Plugin, false)],
            plugin_devices: Some(8),
        });
        assert!(
            text.contains("\ngpu_operator_node_driver_ready 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\ngpu_operator_node_plugin_ready 0\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE gpu_operator_node_driver_ready gauge"));
        assert!(text.contains("\ngpu_operator_node_device_plugin_devices_total 8\n"));
        let none = render(&NodeStatus {
            ready: vec![],
            plugin_devices: None,
        });
        assert!(!none.contains("devices_total"));
    }
}
