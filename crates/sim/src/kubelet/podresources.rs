//! PodResources v1 (`List`, `GetAllocatableResources`, `Get`) on
//! `<node>/pod-resources/kubelet.sock`, answered from the device manager state, rate limited
//! like the kubelet's (100 QPS, burst 10).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use gantry_node::proto::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, NumaNode, PodResources, TopologyInfo,
    pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer},
};
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

use super::devices::{DeviceState, PodDevices};
use super::error::KubeletError;
use super::lock::lock;
use super::node::NodeShared;

const QPS: f64 = 100.0;
const BURST: f64 = 10.0;

/// A token bucket.
struct Limiter {
    tokens: f64,
    last: Instant,
}

impl Limiter {
    fn allow(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * QPS).min(BURST);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Service {
    node: Arc<NodeShared>,
    limiter: Mutex<Limiter>,
}

impl Service {
    fn admit(&self) -> Result<(), Status> {
        if lock(&self.limiter).allow(Instant::now()) {
            Ok(())
        } else {
            Err(Status::resource_exhausted("rejected by rate limit"))
        }
    }
}

fn topology(numa: &[i64]) -> Option<TopologyInfo> {
    (!numa.is_empty()).then(|| TopologyInfo {
        nodes: numa.iter().map(|id| NumaNode { id: *id }).collect(),
    })
}

/// One pod as PodResources reports it (the device IDs byte for byte as advertised).
pub fn pod_resources(state: &DeviceState, pod: &PodDevices) -> PodResources {
    let containers = pod
        .containers
        .iter()
        .map(|(name, c)| ContainerResources {
            name: name.clone(),
            devices: c
                .devices
                .iter()
                .map(|(resource, ids)| {
                    let numa: Vec<i64> = state
                        .resources
                        .get(resource)
                        .map(|r| {
                            let mut n: Vec<i64> = ids
                                .iter()
                                .filter_map(|id| r.devices.get(id))
                                .flat_map(|d| d.numa_nodes.iter().copied())
                                .collect();
                            n.sort_unstable();
                            n.dedup();
                            n
                        })
                        .unwrap_or_default();
                    ContainerDevices {
                        resource_name: resource.clone(),
                        device_ids: ids.clone(),
                        topology: topology(&numa),
                    }
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    PodResources {
        name: pod.name.clone(),
        namespace: pod.namespace.clone(),
        containers,
    }
}

/// Every device of every registered resource (capacity, not free), one entry per device.
pub fn allocatable(state: &DeviceState) -> Vec<ContainerDevices> {
    state
        .resources
        .iter()
        .flat_map(|(name, r)| {
            r.devices
                .values()
                .filter(|d| d.healthy)
                .map(move |d| ContainerDevices {
                    resource_name: name.clone(),
                    device_ids: vec![d.id.clone()],
                    topology: topology(&d.numa_nodes),
                })
        })
        .collect()
}

#[tonic::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        self.admit()?;
        let state = lock(&self.node.devices);
        let pod_resources = state
            .pods
            .values()
            .map(|p| pod_resources(&state, p))
            .collect();
        Ok(Response::new(ListPodResourcesResponse { pod_resources }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        self.admit()?;
        let state = lock(&self.node.devices);
        Ok(Response::new(AllocatableResourcesResponse {
            devices: allocatable(&state),
            ..Default::default()
        }))
    }

    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        self.admit()?;
        let req = request.into_inner();
        let state = lock(&self.node.devices);
        let pod = state
            .pods
            .values()
            .find(|p| p.name == req.pod_name && p.namespace == req.pod_namespace)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "pod {}/{} is not running on node {}",
                    req.pod_namespace, req.pod_name, self.node.name
                ))
            })?;
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(pod_resources(&state, pod)),
        }))
    }
}

/// Serve PodResources on the node's socket (replacing a stale socket file).
pub async fn start(node: &Arc<NodeShared>) -> Result<JoinHandle<()>, KubeletError> {
    let sock = node.dirs.pod_resources_socket();
    let io = |e: std::io::Error| KubeletError::Io {
        path: sock.clone(),
        reason: e.to_string(),
    };
    if let Some(dir) = sock.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(io)?;
    }
    let _ = tokio::fs::remove_file(&sock).await;
    let listener = tokio::net::UnixListener::bind(&sock).map_err(io)?;
    let svc = PodResourcesListerServer::new(Service {
        node: node.clone(),
        limiter: Mutex::new(Limiter {
            tokens: BURST,
            last: Instant::now(),
        }),
    });
    let name = node.name.clone();
    Ok(tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
        {
            tracing::warn!(node = %name, error = %e, "pod-resources server stopped");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn limiter_allows_burst_then_refills() {
        let t0 = Instant::now();
        let mut l = Limiter {
            tokens: BURST,
            last: t0,
        };
        for _ in 0..10 {
            assert!(l.allow(t0));
        }
        assert!(!l.allow(t0));
        assert!(l.allow(t0 + Duration::from_millis(20)));
    }
}
