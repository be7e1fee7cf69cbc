//! A one-shot test kubelet for exercising a real device plugin without a cluster
//! (`gantry sim kubelet-probe`): serve the Registration service on `<dir>/kubelet.sock`, wait
//! for a plugin to register the wanted resource, then do what the kubelet does with it —
//! GetDevicePluginOptions, the first ListAndWatch response, and optionally
//! GetPreferredAllocation, Allocate and PreStartContainer for N healthy devices — and report
//! every answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gantry_node::proto::deviceplugin::{
    self as dp, AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, Empty, PreStartContainerRequest,
    PreferredAllocationRequest, RegisterRequest,
    device_plugin_client::DevicePluginClient,
    registration_server::{Registration, RegistrationServer},
};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use super::plugins::{dial, validate_resource_name};
use gantry_runtime::task::AbortOnDrop;

/// What to probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Directory of `kubelet.sock` and the plugin's socket.
    pub dir: PathBuf,
    /// The resource whose plugin to talk to.
    pub resource: String,
    /// Allocate this many healthy devices (0: stop after ListAndWatch).
    pub allocate: usize,
    /// For everything together, from the start.
    pub timeout: Duration,
}

impl ProbeOptions {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ProbeOptions {
            dir: dir.into(),
            resource: gantry_api::names::RESOURCE_GPU.to_string(),
            allocate: 0,
            timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error(
        "timed out after {secs}s waiting for {what}{}",
        last_rejection.as_ref().map(|r| format!(" (last registration refused: {r})")).unwrap_or_default()
    )]
    Timeout {
        what: String,
        secs: u64,
        last_rejection: Option<String>,
    },
    #[error("{0}")]
    Dial(#[from] super::KubeletError),
    #[error("device plugin for {resource}: {call} failed: {status}")]
    Plugin {
        resource: String,
        call: &'static str,
        status: String,
    },
    #[error("device plugin for {resource}: {reason}")]
    Protocol { resource: String, reason: String },
    #[error("cannot allocate {requested} {resource}: only {healthy} healthy device(s) advertised")]
    NotEnough {
        resource: String,
        requested: usize,
        healthy: usize,
    },
}

/// Everything the probe saw, in call order.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub registration: RegistrationSeen,
    pub options: OptionsSeen,
    pub devices: Vec<DeviceSeen>,
    /// GetPreferredAllocation's answer, when the plugin offers it and `allocate > 0`.
    pub preferred: Option<Vec<String>>,
    pub allocate: Option<AllocationSeen>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RegistrationSeen {
    pub version: String,
    pub endpoint: String,
    pub resource_name: String,
    /// Options sent in the RegisterRequest (may differ from GetDevicePluginOptions).
    pub options: Option<OptionsSeen>,
    /// Registrations for other resources accepted while waiting.
    pub other_resources: Vec<String>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct OptionsSeen {
    pub pre_start_required: bool,
    pub get_preferred_allocation_available: bool,
}

impl From<dp::DevicePluginOptions> for OptionsSeen {
    fn from(o: dp::DevicePluginOptions) -> Self {
        OptionsSeen {
            pre_start_required: o.pre_start_required,
            get_preferred_allocation_available: o.get_preferred_allocation_available,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceSeen {
    pub id: String,
    pub health: String,
    pub numa_nodes: Vec<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AllocationSeen {
    /// The device IDs sent in the Allocate request.
    pub device_ids: Vec<String>,
    pub containers: Vec<ContainerSeen>,
    /// Whether PreStartContainer was called (and succeeded).
    pub pre_start_called: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ContainerSeen {
    pub envs: BTreeMap<String, String>,
    pub mounts: Vec<MountSeen>,
    pub devices: Vec<DeviceSpecSeen>,
    pub annotations: BTreeMap<String, String>,
    pub cdi_devices: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MountSeen {
    pub container_path: String,
    pub host_path: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceSpecSeen {
    pub container_path: String,
    pub host_path: String,
    pub permissions: String,
}

impl From<ContainerAllocateResponse> for ContainerSeen {
    fn from(c: ContainerAllocateResponse) -> Self {
        ContainerSeen {
            envs: c.envs.into_iter().collect(),
            mounts: c
                .mounts
                .into_iter()
                .map(|m| MountSeen {
                    container_path: m.container_path,
                    host_path: m.host_path,
                    read_only: m.read_only,
                })
                .collect(),
            devices: c
                .devices
                .into_iter()
                .map(|d| DeviceSpecSeen {
                    container_path: d.container_path,
                    host_path: d.host_path,
                    permissions: d.permissions,
                })
                .collect(),
            annotations: c.annotations.into_iter().collect(),
            cdi_devices: c.cdi_devices.into_iter().map(|d| d.name).collect(),
        }
    }
}

/// What the Registration service hands to the probe.
enum Registered {
    Wanted(RegisterRequest),
    Other(String),
    Refused(String),
}

struct ProbeRegistration {
    resource: String,
    dir: PathBuf,
    tx: mpsc::UnboundedSender<Registered>,
}

#[tonic::async_trait]
impl Registration for ProbeRegistration {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        match check(&req, &self.dir) {
            Err(reason) => {
                let _ = self.tx.send(Registered::Refused(format!(
                    "{:?}: {reason}",
                    req.resource_name
                )));
                Err(Status::invalid_argument(reason))
            }
            Ok(()) => {
                let seen = if req.resource_name == self.resource {
                    Registered::Wanted(req)
                } else {
                    Registered::Other(req.resource_name)
                };
                let _ = self.tx.send(seen);
                Ok(Response::new(Empty {}))
            }
        }
    }
}

/// The kubelet's checks on a RegisterRequest.
fn check(req: &RegisterRequest, dir: &Path) -> Result<(), String> {
    if req.version != dp::VERSION {
        return Err(format!(
            "unsupported device plugin API version {:?} (supported: {})",
            req.version,
            dp::VERSION
        ));
    }
    validate_resource_name(&req.resource_name)?;
    let endpoint = Path::new(&req.endpoint);
    if req.endpoint.is_empty()
        || endpoint.is_absolute()
        || endpoint.components().count() != 1
        || req.endpoint == ".."
    {
        return Err(format!(
            "endpoint {:?} must be a socket file name inside {}",
            req.endpoint,
            dir.display()
        ));
    }
    Ok(())
}

/// Run the probe once. The Registration server stops when this returns.
pub fn run<'a>(
    opts: &'a ProbeOptions,
) -> futures::future::BoxFuture<'a, Result<ProbeReport, ProbeError>> {
    Box::pin(run_inner(opts))
}

async fn run_inner(opts: &ProbeOptions) -> Result<ProbeReport, ProbeError> {
    let deadline = Instant::now() + opts.timeout;
    let secs = opts.timeout.as_secs();
    let resource = opts.resource.clone();
    let timeout = |what: &str, last_rejection: Option<String>| ProbeError::Timeout {
        what: what.to_string(),
        secs,
        last_rejection,
    };
    let io = |path: &Path, e: std::io::Error| ProbeError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(&opts.dir).map_err(|e| io(&opts.dir, e))?;
    let sock = opts.dir.join(dp::KUBELET_SOCKET_NAME);
    match std::fs::remove_file(&sock) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&sock, e)),
    }
    let listener = tokio::net::UnixListener::bind(&sock).map_err(|e| io(&sock, e))?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let svc = RegistrationServer::new(ProbeRegistration {
        resource: resource.clone(),
        dir: opts.dir.clone(),
        tx,
    });
    let server = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        if let Err(e) = Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
        {
            tracing::warn!(error = %e, "probe registration server stopped");
        }
    });
    let _stop = AbortOnDrop(server);

    // 1. A registration for our resource.
    let mut others = Vec::new();
    let mut last_rejection = None;
    let req = loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Registered::Wanted(req))) => break req,
            Ok(Some(Registered::Other(name))) => others.push(name),
            Ok(Some(Registered::Refused(reason))) => {
                tracing::warn!("registration refused: {reason}");
                last_rejection = Some(reason);
            }
            Ok(None) | Err(_) => {
                let mut what = format!("a device plugin to register {resource}");
                if !others.is_empty() {
                    what.push_str(&format!(" (registered instead: {})", others.join(", ")));
                }
                return Err(timeout(&what, last_rejection));
            }
        }
    };
    let plugin_socket = opts.dir.join(&req.endpoint);
    let registration = RegistrationSeen {
        version: req.version,
        endpoint: req.endpoint,
        resource_name: req.resource_name,
        options: req.options.map(OptionsSeen::from),
        other_resources: others,
    };

    // 2. Options and the first device list.
    let plugin_err = |call: &'static str, s: Status| ProbeError::Plugin {
        resource: resource.clone(),
        call,
        status: s.message().to_string(),
    };
    let channel = tokio::time::timeout_at(deadline, dial(&plugin_socket))
        .await
        .map_err(|_| {
            timeout(
                &format!("a connection to {}", plugin_socket.display()),
                None,
            )
        })??;
    let mut client = DevicePluginClient::new(channel);
    let options: OptionsSeen =
        tokio::time::timeout_at(deadline, client.get_device_plugin_options(Empty {}))
            .await
            .map_err(|_| timeout("GetDevicePluginOptions", None))?
            .map_err(|s| plugin_err("GetDevicePluginOptions", s))?
            .into_inner()
            .into();
    let mut stream = tokio::time::timeout_at(deadline, client.list_and_watch(Empty {}))
        .await
        .map_err(|_| timeout("ListAndWatch", None))?
        .map_err(|s| plugin_err("ListAndWatch", s))?
        .into_inner();
    let first = tokio::time::timeout_at(deadline, stream.message())
        .await
        .map_err(|_| timeout("the first ListAndWatch response", None))?
        .map_err(|s| plugin_err("ListAndWatch", s))?
        .ok_or_else(|| ProbeError::Protocol {
            resource: resource.clone(),
            reason: "ListAndWatch stream ended before its first response".into(),
        })?;
    let devices: Vec<DeviceSeen> = first
        .devices
        .into_iter()
        .map(|d| DeviceSeen {
            numa_nodes: d
                .topology
                .map(|t| t.nodes.iter().map(|n| n.id).collect())
                .unwrap_or_default(),
            id: d.id,
            health: d.health,
        })
        .collect();
    let mut report = ProbeReport {
        registration,
        options,
        devices,
        preferred: None,
        allocate: None,
    };
    if opts.allocate == 0 {
        return Ok(report);
    }

    // 3. Allocate like the kubelet: preferred choice first when offered.
    let healthy: Vec<String> = report
        .devices
        .iter()
        .filter(|d| d.health == dp::HEALTHY)
        .map(|d| d.id.clone())
        .collect();
    if healthy.len() < opts.allocate {
        return Err(ProbeError::NotEnough {
            resource,
            requested: opts.allocate,
            healthy: healthy.len(),
        });
    }
    let size = i32::try_from(opts.allocate).map_err(|_| ProbeError::NotEnough {
        resource: resource.clone(),
        requested: opts.allocate,
        healthy: healthy.len(),
    })?;
    let mut ids: Vec<String> = healthy.iter().take(opts.allocate).cloned().collect();
    if options.get_preferred_allocation_available {
        let req = PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: healthy.clone(),
                must_include_device_i_ds: vec![],
                allocation_size: size,
            }],
        };
        let preferred = tokio::time::timeout_at(deadline, client.get_preferred_allocation(req))
            .await
            .map_err(|_| timeout("GetPreferredAllocation", None))?
            .map_err(|s| plugin_err("GetPreferredAllocation", s))?
            .into_inner()
            .container_responses
            .into_iter()
            .next()
            .map(|c| c.device_i_ds)
            .unwrap_or_default();
        // Advisory, as for the kubelet: used only when it is a valid choice.
        if preferred.len() == opts.allocate && preferred.iter().all(|id| healthy.contains(id)) {
            ids = preferred.clone();
        }
        report.preferred = Some(preferred);
    }
    let resp = tokio::time::timeout_at(
        deadline,
        client.allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids.clone(),
            }],
        }),
    )
    .await
    .map_err(|_| timeout("Allocate", None))?
    .map_err(|s| plugin_err("Allocate", s))?
    .into_inner();
    if resp.container_responses.len() != 1 {
        return Err(ProbeError::Protocol {
            resource,
            reason: format!(
                "Allocate for one container returned {} container responses",
                resp.container_responses.len()
            ),
        });
    }
    let mut pre_start_called = false;
    if options.pre_start_required {
        tokio::time::timeout_at(
            deadline,
            client.pre_start_container(PreStartContainerRequest {
                devices_ids: ids.clone(),
            }),
        )
        .await
        .map_err(|_| timeout("PreStartContainer", None))?
        .map_err(|s| plugin_err("PreStartContainer", s))?;
        pre_start_called = true;
    }
    report.allocate = Some(AllocationSeen {
        device_ids: ids,
        containers: resp
            .container_responses
            .into_iter()
            .map(ContainerSeen::from)
            .collect(),
        pre_start_called,
    });
    Ok(report)
}

/// The report as text, one fact a line.
pub fn render_text(r: &ProbeReport) -> String {
    let mut out = String::new();
    let reg = &r.registration;
    out.push_str(&format!(
        "registered: {} (API {}) on endpoint {}\n",
        reg.resource_name, reg.version, reg.endpoint
    ));
    if !reg.other_resources.is_empty() {
        out.push_str(&format!(
            "also registered: {}\n",
            reg.other_resources.join(", ")
        ));
    }
    out.push_str(&format!(
        "options: preStartRequired={} getPreferredAllocationAvailable={}\n",
        r.options.pre_start_required, r.options.get_preferred_allocation_available
    ));
    out.push_str(&format!("devices: {}\n", r.devices.len()));
    for d in &r.devices {
        let numa = if d.numa_nodes.is_empty() {
            String::new()
        } else {
            format!(
                " numa={}",
                d.numa_nodes
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        out.push_str(&format!("  {} {}{numa}\n", d.id, d.health));
    }
    if let Some(p) = &r.preferred {
        out.push_str(&format!("preferred: {}\n", p.join(",")));
    }
    if let Some(a) = &r.allocate {
        out.push_str(&format!("allocated: {}\n", a.device_ids.join(",")));
        if a.pre_start_called {
            out.push_str("PreStartContainer: ok\n");
        }
        for c in &a.containers {
            for (k, v) in &c.envs {
                out.push_str(&format!("  env {k}={v}\n"));
            }
            for m in &c.mounts {
                let ro = if m.read_only { " (ro)" } else { "" };
                out.push_str(&format!(
                    "  mount {} -> {}{ro}\n",
                    m.host_path, m.container_path
                ));
            }
            for d in &c.devices {
                out.push_str(&format!(
                    "  device {} -> {} {}\n",
                    d.host_path, d.container_path, d.permissions
                ));
            }
            for (k, v) in &c.annotations {
                out.push_str(&format!("  annotation {k}={v}\n"));
            }
            for n in &c.cdi_devices {
                out.push_str(&format!("  cdi {n}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: &str, endpoint: &str, resource: &str) -> RegisterRequest {
        RegisterRequest {
            version: version.into(),
            endpoint: endpoint.into(),
            resource_name: resource.into(),
            options: None,
        }
    }

    #[test]
    fn registration_checks_name_the_problem() {
        let dir = Path::new("/tmp/x");
        assert!(check(&req("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu"), dir).is_ok());
        assert!(
            check(&req("v1alpha", "a.sock", "nvidia.com/gpu"), dir)
                .unwrap_err()
                .contains("\"v1alpha\"")
        );
        assert!(
            check(&req("v1beta1", "/abs/a.sock", "nvidia.com/gpu"), dir)
                .unwrap_err()
                .contains("socket file name")
        );
        assert!(
            check(&req("v1beta1", "a.sock", "gpu"), dir)
                .unwrap_err()
                .contains("domain/name")
        );
    }
}
