//! The gRPC `v1beta1.DevicePlugin` service of one resource: a thin shell over the pure
//! cores. The device list lives in a watch channel so every health change reaches every
//! open ListAndWatch stream at once.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::allocate::{AllocateContext, MigMinors, allocate};
use super::health::Faults;
use super::preferred::{Topology, preferred};
use super::resources::ResourceSet;
use super::settings::Settings;
use crate::proto::deviceplugin as pb;
use crate::proto::deviceplugin::device_plugin_server::DevicePlugin;

/// What one resource's service answers from; immutable while the server runs.
#[derive(Debug)]
pub struct ResourceContext {
    pub set: ResourceSet,
    pub settings: Arc<Settings>,
    pub topology: Arc<Topology>,
    pub mig_minors: Arc<MigMinors>,
    /// The configured IMEX channels present on the node.
    pub imex_channels: Arc<Vec<u32>>,
}

/// The device list with each device's current health.
pub fn device_list(set: &ResourceSet, faults: &Faults) -> Vec<pb::Device> {
    set.devices
        .iter()
        .map(|d| pb::Device {
            id: d.id.clone(),
            health: if faults.unhealthy(&d.physical) {
                pb::UNHEALTHY
            } else {
                pb::HEALTHY
            }
            .to_string(),
            topology: None,
        })
        .collect()
}

/// Options every plugin advertises (and registers with).
pub fn plugin_options() -> pb::DevicePluginOptions {
    pb::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

#[derive(Clone)]
pub struct PluginService {
    ctx: Arc<ResourceContext>,
    devices: watch::Receiver<Vec<pb::Device>>,
    stop: watch::Receiver<bool>,
}

impl PluginService {
    pub fn new(
        ctx: Arc<ResourceContext>,
        devices: watch::Receiver<Vec<pb::Device>>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        PluginService { ctx, devices, stop }
    }
}

#[tonic::async_trait]
impl DevicePlugin for PluginService {
    async fn get_device_plugin_options(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::DevicePluginOptions>, Status> {
        Ok(Response::new(plugin_options()))
    }

    type ListAndWatchStream = ReceiverStream<Result<pb::ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut devices = self.devices.clone();
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                let list = devices.borrow_and_update().clone();
                if tx
                    .send(Ok(pb::ListAndWatchResponse { devices: list }))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::select! {
                    changed = devices.changed() => if changed.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<pb::PreferredAllocationRequest>,
    ) -> Result<Response<pb::PreferredAllocationResponse>, Status> {
        let ctx = &self.ctx;
        let mut container_responses = Vec::new();
        for req in request.into_inner().container_requests {
            let size = usize::try_from(req.allocation_size).map_err(|_| {
                Status::invalid_argument(format!(
                    "resource {}: allocation_size {} is negative",
                    ctx.set.name, req.allocation_size
                ))
            })?;
            let ids = preferred(
                &ctx.set,
                &req.available_device_i_ds,
                &req.must_include_device_i_ds,
                size,
                ctx.settings.allocation_policy,
                &ctx.topology,
            )
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
            container_responses.push(pb::ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(Response::new(pb::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<pb::AllocateRequest>,
    ) -> Result<Response<pb::AllocateResponse>, Status> {
        let ctx = &self.ctx;
        let mut container_responses = Vec::new();
        for req in request.into_inner().container_requests {
            let annotation_id = uuid::Uuid::new_v4().to_string();
            let actx = AllocateContext {
                annotation_id: &annotation_id,
                mig_minors: &ctx.mig_minors,
                imex_channels: &ctx.imex_channels,
            };
            let resp = allocate(&ctx.set, &ctx.settings, &req.devices_ids, actx)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            container_responses.push(resp);
        }
        Ok(Response::new(pb::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<pb::PreStartContainerRequest>,
    ) -> Result<Response<pb::PreStartContainerResponse>, Status> {
        Ok(Response::new(pb::PreStartContainerResponse {}))
    }
}
