//! The kubelet's PodResources API (`v1.PodResourcesLister/List`) as every agent that needs it
//! reads it: which pod's container holds which GPU device (the exporter's pod labels, the
//! device plugin's health events on the pods that hold a withdrawn device).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::podresources::{
    ListPodResourcesRequest, ListPodResourcesResponse,
    pod_resources_lister_client::PodResourcesListerClient,
};
use gantry_api::names;

/// The container a device is assigned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub pod: String,
    pub namespace: String,
    pub container: String,
    /// Replica number of a shared device id (`GPU-…::3` → `3`).
    pub vgpu: Option<String>,
}

/// One device id as the device plugin advertised it, and who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Device id without the replica suffix.
    pub device: String,
    pub owner: PodRef,
}

/// Which resource names count as GPUs.
#[derive(Debug, Clone, Default)]
pub struct ResourceFilter {
    /// Extra names (dcgm-exporter's `--nvidia-resource-names`).
    pub extra: Vec<String>,
}

impl ResourceFilter {
    /// `nvidia.com/gpu`, `nvidia.com/gpu.shared` (time-slicing with renameByDefault, which
    /// dcgm-exporter misses), `nvidia.com/mig-*`, and the extra names.
    pub fn accepts(&self, resource: &str) -> bool {
        resource == names::RESOURCE_GPU
            || resource == names::RESOURCE_GPU_SHARED
            || resource.starts_with(names::RESOURCE_MIG_PREFIX)
            || self.extra.iter().any(|e| e == resource)
    }
}

/// Split `<id>::<n>` into `(id, Some(n))`.
pub fn split_replica(id: &str) -> (&str, Option<&str>) {
    match id.rsplit_once("::") {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => {
            (base, Some(n))
        }
        _ => (id, None),
    }
}

/// Flatten a List response into GPU device assignments, in response order.
pub fn assignments(resp: &ListPodResourcesResponse, filter: &ResourceFilter) -> Vec<Assignment> {
    let mut out = Vec::new();
    for pod in &resp.pod_resources {
        for c in &pod.containers {
            for d in c
                .devices
                .iter()
                .filter(|d| filter.accepts(&d.resource_name))
            {
                for id in &d.device_ids {
                    let (base, replica) = split_replica(id);
                    out.push(Assignment {
                        device: base.to_string(),
                        owner: PodRef {
                            pod: pod.name.clone(),
                            namespace: pod.namespace.clone(),
                            container: c.name.clone(),
                            vgpu: replica.map(str::to_string),
                        },
                    });
                }
            }
        }
    }
    out
}

/// Errors talking to the kubelet; they only skip attribution, never fail a scrape.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("connecting to the kubelet PodResources socket {path}: {message}")]
    Connect { path: String, message: String },
    #[error("PodResources List on {path}: {message}")]
    List { path: String, message: String },
}

/// Call `List` on the kubelet socket over a connection of its own. `Ok(None)` when the
/// socket does not exist (no kubelet, or attribution not mounted): no pod labels, no error,
/// as dcgm-exporter does.
pub async fn list(
    socket: &Path,
    timeout: Duration,
) -> Result<Option<ListPodResourcesResponse>, PodResourcesError> {
    if !socket.exists() {
        return Ok(None);
    }
    let mut client = PodResourcesListerClient::new(connect(socket, timeout).await?);
    let resp =
        client
            .list(ListPodResourcesRequest {})
            .await
            .map_err(|e| PodResourcesError::List {
                path: socket.display().to_string(),
                message: e.message().to_string(),
            })?;
    Ok(Some(resp.into_inner()))
}

async fn connect(socket: &Path, timeout: Duration) -> Result<Channel, PodResourcesError> {
    let sock: PathBuf = socket.to_path_buf();
    Endpoint::from_static("http://localhost")
        .timeout(timeout)
        .connect_timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let sock = sock.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(sock).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| PodResourcesError::Connect {
            path: socket.display().to_string(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::podresources::{ContainerDevices, ContainerResources, PodResources};

    #[test]
    fn replica_suffixes() {
        assert_eq!(split_replica("GPU-abc::3"), ("GPU-abc", Some("3")));
        assert_eq!(split_replica("MIG-abc"), ("MIG-abc", None));
        assert_eq!(split_replica("weird::x"), ("weird::x", None));
    }

    #[test]
    fn flattens_only_gpu_resources() {
        let resp = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "p".into(),
                namespace: "ns".into(),
                containers: vec![ContainerResources {
                    name: "c".into(),
                    devices: vec![
                        ContainerDevices {
                            resource_name: "nvidia.com/gpu.shared".into(),
                            device_ids: vec!["GPU-1::2".into()],
                            topology: None,
                        },
                        ContainerDevices {
                            resource_name: "example.com/nic".into(),
                            device_ids: vec!["nic0".into()],
                            topology: None,
                        },
                    ],
                    ..Default::default()
                }],
            }],
        };
        let a = assignments(&resp, &ResourceFilter::default());
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].device, "GPU-1");
        assert_eq!(a[0].owner.vgpu.as_deref(), Some("2"));
    }
}
