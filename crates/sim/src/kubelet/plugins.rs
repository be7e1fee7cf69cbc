//! The kubelet side of the device plugin API v1beta1: the Registration service on
//! `<node>/device-plugins/kubelet.sock`, one connection per registered plugin (options,
//! ListAndWatch, GetPreferredAllocation, Allocate, PreStartContainer), and the kubelet-restart
//! semantics (wipe the plugin sockets, recreate kubelet.sock).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gantry_node::proto::deviceplugin::{
    self as dp, AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, Empty, PreStartContainerRequest,
    PreferredAllocationRequest, RegisterRequest,
    device_plugin_client::DevicePluginClient,
    registration_server::{Registration, RegistrationServer},
};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status};

use super::devices::{self, Device};
use super::error::KubeletError;
use super::lock::lock;
use super::node::NodeShared;
pub use super::plugin_endpoint::PluginEndpoint;
use super::pod_ref::PodRef;

const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The kubelet's checkpoint file, never wiped on restart.
pub const CHECKPOINT_FILE: &str = "kubelet_internal_checkpoint";

/// Dial a gRPC server on a unix socket.
pub async fn dial(path: &Path) -> Result<Channel, KubeletError> {
    let p = path.to_path_buf();
    let endpoint = Endpoint::from_static("http://localhost").connect_timeout(DIAL_TIMEOUT);
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let p = p.clone();
        async move {
            let s = UnixStream::connect(p).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
        }
    }));
    match tokio::time::timeout(DIAL_TIMEOUT, connect).await {
        Ok(Ok(ch)) => Ok(ch),
        Ok(Err(e)) => Err(KubeletError::Dial {
            socket: path.to_path_buf(),
            reason: e.to_string(),
        }),
        Err(_) => Err(KubeletError::Dial {
            socket: path.to_path_buf(),
            reason: "timed out after 5s".into(),
        }),
    }
}

/// Whether `name` is a valid extended resource name: `domain/name`, outside `kubernetes.io`.
pub fn validate_resource_name(name: &str) -> Result<(), String> {
    let Some((domain, short)) = name.split_once('/') else {
        return Err(format!(
            "{name:?} is not an extended resource name (expected `domain/name`)"
        ));
    };
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        return Err(format!(
            "{name:?} is in the kubernetes.io namespace, reserved for native resources"
        ));
    }
    if name.starts_with("requests.") {
        return Err(format!("{name:?} must not start with `requests.`"));
    }
    let dns_ok = !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if !dns_ok {
        return Err(format!(
            "{name:?}: prefix {domain:?} is not a DNS subdomain"
        ));
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let name_ok = !short.is_empty()
        && short.len() <= 63
        && short
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && short.starts_with(alnum)
        && short.ends_with(alnum);
    if !name_ok {
        return Err(format!(
            "{name:?}: {short:?} is not a valid name (alphanumerics, `-_.`, at most 63)"
        ));
    }
    Ok(())
}

/// The Registration service.
struct RegistrationService {
    node: Arc<NodeShared>,
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        register(&self.node, req)
            .await
            .map(|()| Response::new(Empty {}))
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

async fn register(node: &Arc<NodeShared>, req: RegisterRequest) -> Result<(), KubeletError> {
    let reject = |reason: String| KubeletError::Registration {
        node: node.name.clone(),
        resource: req.resource_name.clone(),
        reason,
    };
    if req.version != dp::VERSION {
        return Err(reject(format!(
            "unsupported device plugin API version {:?} (supported: {})",
            req.version,
            dp::VERSION
        )));
    }
    validate_resource_name(&req.resource_name).map_err(reject)?;
    let endpoint = Path::new(&req.endpoint);
    if req.endpoint.is_empty()
        || endpoint.is_absolute()
        || endpoint.components().count() != 1
        || req.endpoint == ".."
    {
        return Err(reject(format!(
            "endpoint {:?} must be a socket file name inside {}",
            req.endpoint,
            node.dirs.device_plugins.display()
        )));
    }
    let socket = node.dirs.device_plugins.join(endpoint);
    let channel = dial(&socket).await?;
    let mut client = DevicePluginClient::new(channel);
    let options = client
        .get_device_plugin_options(Empty {})
        .await
        .map_err(|s| KubeletError::Plugin {
            resource: req.resource_name.clone(),
            call: "GetDevicePluginOptions",
            status: s.message().to_string(),
        })?
        .into_inner();
    let stream = client
        .list_and_watch(Empty {})
        .await
        .map_err(|s| KubeletError::Plugin {
            resource: req.resource_name.clone(),
            call: "ListAndWatch",
            status: s.message().to_string(),
        })?
        .into_inner();
    let resource = req.resource_name.clone();
    let generation = lock(&node.devices).register(&resource);
    let task = tokio::spawn(watch_devices(
        node.clone(),
        resource.clone(),
        generation,
        stream,
    ));
    tracing::debug!(node = %node.name, %resource, socket = %socket.display(), "device plugin registered");
    // Replacing an endpoint drops (and stops) the previous one's stream.
    lock(&node.endpoints).insert(
        resource,
        PluginEndpoint {
            client,
            options,
            socket,
            stream: task,
        },
    );
    node.changed.notify_one();
    Ok(())
}

async fn watch_devices(
    node: Arc<NodeShared>,
    resource: String,
    generation: u64,
    mut stream: tonic::Streaming<dp::ListAndWatchResponse>,
) {
    while let Ok(Some(msg)) = stream.message().await {
        {
            {
                let devices = msg
                    .devices
                    .into_iter()
                    .map(|d| Device {
                        healthy: d.health == dp::HEALTHY,
                        numa_nodes: d
                            .topology
                            .map(|t| t.nodes.iter().map(|n| n.id).collect())
                            .unwrap_or_default(),
                        id: d.id,
                    })
                    .collect();
                if lock(&node.devices).update(&resource, generation, devices) {
                    node.changed.notify_one();
                }
            }
        }
    }
    tracing::debug!(node = %node.name, %resource, "device plugin stream ended");
    if lock(&node.devices).disconnect(&resource, generation) {
        node.changed.notify_one();
    }
}

/// What one container got from a plugin.
#[derive(Debug, Clone)]
pub struct Allocation {
    pub resource: String,
    pub device_ids: Vec<String>,
    pub response: ContainerAllocateResponse,
}

/// Allocate `count` devices of `resource` to one container through its plugin:
/// GetPreferredAllocation when offered, Allocate, PreStartContainer when required.
/// Callers serialise allocations per node (`NodeShared::alloc_lock`).
pub async fn allocate(
    node: &NodeShared,
    pod: &PodRef,
    container: &str,
    init: bool,
    resource: &str,
    count: usize,
) -> Result<Allocation, KubeletError> {
    let fail = |reason: String| KubeletError::Allocate {
        pod: format!("{}/{}", pod.namespace, pod.name),
        container: container.to_string(),
        resource: resource.to_string(),
        reason,
    };
    let (mut client, options) = {
        let eps = lock(&node.endpoints);
        let ep = eps
            .get(resource)
            .ok_or_else(|| fail("no device plugin is registered for it".into()))?;
        (ep.client.clone(), ep.options)
    };
    let available = lock(&node.devices).available(resource, &pod.uid, init);
    if available.len() < count {
        return Err(fail(format!(
            "{count} requested, {} available",
            available.len()
        )));
    }
    let preferred = if options.get_preferred_allocation_available {
        let req = PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: available.clone(),
                must_include_device_i_ds: vec![],
                allocation_size: count as i32,
            }],
        };
        match client.get_preferred_allocation(req).await {
            Ok(r) => r
                .into_inner()
                .container_responses
                .into_iter()
                .next()
                .map(|c| c.device_i_ds),
            // Advisory: fall back to our own choice.
            Err(s) => {
                tracing::debug!(resource, error = %s.message(), "GetPreferredAllocation failed");
                None
            }
        }
    } else {
        None
    };
    let ids = devices::pick(&available, count, preferred.as_deref())
        .ok_or_else(|| fail(format!("{count} requested, {} available", available.len())))?;
    let resp = client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids.clone(),
            }],
        })
        .await
        .map_err(|s| fail(format!("Allocate failed: {}", s.message())))?
        .into_inner();
    let response = resp
        .container_responses
        .into_iter()
        .next()
        .ok_or_else(|| fail("Allocate returned no container response".into()))?;
    if options.pre_start_required {
        let call = client.pre_start_container(PreStartContainerRequest {
            devices_ids: ids.clone(),
        });
        match tokio::time::timeout(PRE_START_TIMEOUT, call).await {
            Ok(Ok(_)) => {}
            Ok(Err(s)) => return Err(fail(format!("PreStartContainer failed: {}", s.message()))),
            Err(_) => return Err(fail("PreStartContainer timed out after 30s".into())),
        }
    }
    lock(&node.devices).record(
        &pod.uid,
        &pod.name,
        &pod.namespace,
        container,
        init,
        resource,
        ids.clone(),
    );
    Ok(Allocation {
        resource: resource.to_string(),
        device_ids: ids,
        response,
    })
}

/// Start (or restart) the registration server: wipe stale plugin sockets (not sub-directories,
/// not the checkpoint), forget registered plugins, recreate `kubelet.sock`.
pub async fn start_registration(node: &Arc<NodeShared>) -> Result<JoinHandle<()>, KubeletError> {
    let dir = &node.dirs.device_plugins;
    let io = |e: std::io::Error| KubeletError::Io {
        path: dir.clone(),
        reason: e.to_string(),
    };
    tokio::fs::create_dir_all(dir).await.map_err(io)?;
    let mut entries = tokio::fs::read_dir(dir).await.map_err(io)?;
    while let Some(e) = entries.next_entry().await.map_err(io)? {
        let is_dir = e.file_type().await.map(|t| t.is_dir()).unwrap_or(true);
        if !is_dir && e.file_name() != CHECKPOINT_FILE {
            // A plugin may remove its own socket concurrently.
            let _ = tokio::fs::remove_file(e.path()).await;
        }
    }
    lock(&node.endpoints).clear();
    lock(&node.devices).forget_plugins();
    node.changed.notify_one();
    let sock = node.dirs.kubelet_socket();
    let listener = tokio::net::UnixListener::bind(&sock).map_err(|e| KubeletError::Io {
        path: sock.clone(),
        reason: e.to_string(),
    })?;
    let svc = RegistrationServer::new(RegistrationService { node: node.clone() });
    let name = node.name.clone();
    Ok(tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        if let Err(e) = Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
        {
            tracing::warn!(node = %name, error = %e, "registration server stopped");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resource_names() {
        assert!(validate_resource_name("nvidia.com/gpu").is_ok());
        assert!(validate_resource_name("nvidia.com/mig-1g.10gb").is_ok());
        assert!(validate_resource_name("nvidia.com/gpu.shared").is_ok());
        assert!(
            validate_resource_name("gpu")
                .unwrap_err()
                .contains("domain/name")
        );
        assert!(
            validate_resource_name("kubernetes.io/gpu")
                .unwrap_err()
                .contains("reserved")
        );
        assert!(validate_resource_name("foo.kubernetes.io/gpu").is_err());
        assert!(
            validate_resource_name("Nvidia.com/gpu")
                .unwrap_err()
                .contains("DNS")
        );
        assert!(validate_resource_name("nvidia.com/-gpu").is_err());
        assert!(validate_resource_name("nvidia.com/").is_err());
    }
}
