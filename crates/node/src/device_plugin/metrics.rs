//! The device plugin's `/metrics` (prometheus-client), `/healthz` and `/readyz`: devices
//! withdrawn by a fault and restored by a recovery, and how many are Unhealthy now. Names
//! follow the node status exporter's `gpu_operator_node_device_plugin_*`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::health::FaultKind;

/// Why devices were withdrawn: `lost` (off the bus), `memory` (double-bit ECC / row remap)
/// or `xid` (another fatal XID, the number in `xid`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FaultLabel {
    pub reason: String,
    pub xid: String,
}

impl FaultLabel {
    pub fn of(kind: FaultKind) -> FaultLabel {
        let (reason, xid) = match kind {
            FaultKind::Lost => ("lost", "79".to_string()),
            FaultKind::Memory => ("memory", "48".to_string()),
            FaultKind::Xid(x) => ("xid", x.to_string()),
        };
        FaultLabel {
            reason: reason.to_string(),
            xid,
        }
    }
}

/// Shared handle; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    withdrawn: Family<FaultLabel, Counter>,
    recovered: Family<FaultLabel, Counter>,
    unhealthy: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let withdrawn = Family::<FaultLabel, Counter>::default();
        let recovered = Family::<FaultLabel, Counter>::default();
        let unhealthy = Gauge::default();
        registry.register(
            "gpu_operator_node_device_plugin_devices_withdrawn",
            "Devices the device plugin marked Unhealthy because of a GPU fault (each device once per fault)",
            withdrawn.clone(),
        );
        registry.register(
            "gpu_operator_node_device_plugin_devices_recovered",
            "Withdrawn devices advertised Healthy again after their GPU recovered",
            recovered.clone(),
        );
        registry.register(
            "gpu_operator_node_device_plugin_devices_unhealthy",
            "Devices the device plugin advertises Unhealthy now",
            unhealthy.clone(),
        );
        Metrics(Arc::new(Inner {
            registry,
            withdrawn,
            recovered,
            unhealthy,
        }))
    }
}

impl Metrics {
    pub fn withdrawn(&self, kind: FaultKind, devices: usize) {
        self.0
            .withdrawn
            .get_or_create(&FaultLabel::of(kind))
            .inc_by(devices as u64);
    }
    pub fn recovered(&self, kind: FaultKind, devices: usize) {
        self.0
            .recovered
            .get_or_create(&FaultLabel::of(kind))
            .inc_by(devices as u64);
    }
    pub fn set_unhealthy(&self, devices: usize) {
        self.0.unhealthy.set(devices as i64);
    }
    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.0.registry);
        out
    }
}

/// Serve `/metrics`, `/healthz` and `/readyz` on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use gantry_runtime::health::{self, Endpoints};
    let endpoints = Endpoints::new(health::OPENMETRICS, move || metrics.render());
    health::serve(listener, endpoints, shutdown).await
}

/// Binds `address` (port 0: any free port); the error names the address.
pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("device plugin metrics: cannot listen on {address}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_xid() {
        let m = Metrics::default();
        m.withdrawn(FaultKind::Xid(119), 2);
        m.withdrawn(FaultKind::Lost, 1);
        m.recovered(FaultKind::Xid(119), 2);
        m.set_unhealthy(1);
        let t = m.render();
        assert!(
            t.contains(r#"gpu_operator_node_device_plugin_devices_withdrawn_total{reason="xid",xid="119"} 2"#),
            "{t}"
        );
        assert!(t.contains(
            r#"gpu_operator_node_device_plugin_devices_withdrawn_total{reason="lost",xid="79"} 1"#
        ));
        assert!(t.contains(
            r#"gpu_operator_node_device_plugin_devices_recovered_total{reason="xid",xid="119"} 2"#
        ));
        assert!(t.contains("gpu_operator_node_device_plugin_devices_unhealthy 1"));
    }
}
