//! End to end: the embedded control plane, two simulated H100 nodes, a minimal device plugin
//! per node registering over the real kubelet socket, the real kubectl reading allocatable,
//! and a GPU pod running through Allocate and PodResources.

use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use gantry_api::names;
use gantry_gpu::Backend;
use gantry_node::proto::deviceplugin::{
    self as dp, AllocateRequest, AllocateResponse, CdiDevice, ContainerAllocateResponse,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse, RegisterRequest,
    device_plugin_server::{DevicePlugin, DevicePluginServer},
    registration_client::RegistrationClient,
};
use gantry_node::proto::podresources::{
    ListPodResourcesRequest, pod_resources_lister_client::PodResourcesListerClient,
};
use gantry_sim::cluster::{Fault, SimCluster};
use gantry_sim::kubelet::{AgentRegistry, plugins};
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A minimal device plugin: advertises fixed IDs, prefers the last IDs offered, records calls.
#[derive(Clone)]
struct TestPlugin {
    devices: watch::Receiver<Vec<(String, bool)>>,
    allocs: Arc<Mutex<Vec<Vec<String>>>>,
    pre_starts: Arc<Mutex<Vec<Vec<String>>>>,
}

#[tonic::async_trait]
impl DevicePlugin for TestPlugin {
    type ListAndWatchStream =
        Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, tonic::Status>> + Send + 'static>>;

    async fn get_device_plugin_options(
        &self,
        _: tonic::Request<Empty>,
    ) -> Result<tonic::Response<DevicePluginOptions>, tonic::Status> {
        Ok(tonic::Response::new(DevicePluginOptions {
            pre_start_required: true,
            get_preferred_allocation_available: true,
        }))
    }

    async fn list_and_watch(
        &self,
        _: tonic::Request<Empty>,
    ) -> Result<tonic::Response<Self::ListAndWatchStream>, tonic::Status> {
        // Every value of the watch, starting with the current one.
        let first = self.devices.borrow().clone();
        let rest = futures::stream::unfold(self.devices.clone(), |mut rx| async move {
            rx.changed().await.ok()?;
            let v = rx.borrow_and_update().clone();
            Some((v, rx))
        });
        let s = futures::stream::once(async move { first })
            .chain(rest)
            .map(|devs| {
                Ok(ListAndWatchResponse {
                    devices: devs
                        .into_iter()
                        .map(|(id, ok)| Device {
                            id,
                            health: if ok { dp::HEALTHY } else { dp::UNHEALTHY }.into(),
                            topology: None,
                        })
                        .collect(),
                })
            });
        Ok(tonic::Response::new(Box::pin(s)))
    }

    async fn get_preferred_allocation(
        &self,
        r: tonic::Request<PreferredAllocationRequest>,
    ) -> Result<tonic::Response<PreferredAllocationResponse>, tonic::Status> {
        let container_responses = r
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| {
                let n = c.allocation_size as usize;
                let avail = c.available_device_i_ds;
                ContainerPreferredAllocationResponse {
                    device_i_ds: avail[avail.len().saturating_sub(n)..].to_vec(),
                }
            })
            .collect();
        Ok(tonic::Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        r: tonic::Request<AllocateRequest>,
    ) -> Result<tonic::Response<AllocateResponse>, tonic::Status> {
        let mut out = Vec::new();
        for c in r.into_inner().container_requests {
            self.allocs.lock().unwrap().push(c.devices_ids.clone());
            out.push(ContainerAllocateResponse {
                envs: [(
                    "NVIDIA_VISIBLE_DEVICES".to_string(),
                    c.devices_ids.join(","),
                )]
                .into_iter()
                .collect(),
                cdi_devices: c
                    .devices_ids
                    .iter()
                    .map(|id| CdiDevice {
                        name: format!("nvidia.com/gpu={id}"),
                    })
                    .collect(),
                ..Default::default()
            });
        }
        Ok(tonic::Response::new(AllocateResponse {
            container_responses: out,
        }))
    }

    async fn pre_start_container(
        &self,
        r: tonic::Request<PreStartContainerRequest>,
    ) -> Result<tonic::Response<PreStartContainerResponse>, tonic::Status> {
        self.pre_starts
            .lock()
            .unwrap()
            .push(r.into_inner().devices_ids);
        Ok(tonic::Response::new(PreStartContainerResponse {}))
    }
}

struct RunningPlugin {
    plugin: TestPlugin,
    tx: watch::Sender<Vec<(String, bool)>>,
    server: JoinHandle<()>,
    ids: Vec<String>,
}

/// Serve the plugin on `<dir>/test-gpu.sock` and register it with the kubelet.
async fn start_plugin(dir: &Path, ids: Vec<String>) -> Res<RunningPlugin> {
    let (tx, rx) = watch::channel(ids.iter().map(|id| (id.clone(), true)).collect());
    let plugin = TestPlugin {
        devices: rx,
        allocs: Default::default(),
        pre_starts: Default::default(),
    };
    let sock = dir.join("test-gpu.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = tokio::net::UnixListener::bind(&sock)?;
    let svc = DevicePluginServer::new(plugin.clone());
    let server = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await;
    });
    register(dir).await?;
    Ok(RunningPlugin {
        plugin,
        tx,
        server,
        ids,
    })
}

async fn register(dir: &Path) -> Res<()> {
    let ch = plugins::dial(&dir.join("kubelet.sock")).await?;
    RegistrationClient::new(ch)
        .register(RegisterRequest {
            version: dp::VERSION.into(),
            endpoint: "test-gpu.sock".into(),
            resource_name: names::RESOURCE_GPU.into(),
            options: Some(DevicePluginOptions {
                pre_start_required: true,
                get_preferred_allocation_available: true,
            }),
        })
        .await?;
    Ok(())
}

async fn gpu_alloc(api: &Api<Node>, node: &str) -> (Option<String>, Option<String>) {
    let Ok(n) = api.get(node).await else {
        return (None, None);
    };
    let s = n.status.unwrap_or_default();
    let get = |m: Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| { m.and_then(|m| m.get(names::RESOURCE_GPU).map(|q| q.0.clone())) };
    (get(s.capacity), get(s.allocatable))
}

async fn pod_phase(api: &Api<Pod>, name: &str) -> Option<String> {
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|p| p.status?.phase)
}

fn gpu_pod(name: &str, node: &str, gpus: u32, run_time: Option<&str>) -> Res<Pod> {
    let mut annotations = serde_json::Map::new();
    if let Some(rt) = run_time {
        annotations.insert(names::ANNOTATION_SIM_RUN_TIME.into(), json!(rt));
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"nodeName": node, "restartPolicy": "Never",
                 "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.8.0-base",
                                 "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
    }))?)
}

/// Two H100 nodes whose pods run no agents (the tests start their own device plugins).
async fn setup() -> Res<Cluster> {
    Ok(Cluster::builder()
        .nodes("2xH100-80GB:8")
        .agents(AgentRegistry::new())
        .start()
        .await?)
}

fn uuids(sim: &SimCluster, node: &str) -> Res<Vec<String>> {
    let b = sim
        .node(node)
        .and_then(|n| n.backend.clone())
        .ok_or("no backend")?;
    Ok((0..b.device_count()?)
        .map(|i| b.device_info(i).map(|d| d.uuid))
        .collect::<Result<_, _>>()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_register_and_gpu_pod_runs() -> Res<()> {
    let env = setup().await?;
    let (client, sim) = (env.client().clone(), env.sim()?);
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut plugs = Vec::new();
    for name in ["h100-80gb-0", "h100-80gb-1"] {
        let dir = sim.node(name).ok_or("node")?.dirs.device_plugins.clone();
        plugs.push(start_plugin(&dir, uuids(sim, name)?).await?);
    }
    for name in ["h100-80gb-0", "h100-80gb-1"] {
        eventually_secs("8 allocatable GPUs", 60, || async {
            gpu_alloc(&nodes_api, name).await.1.as_deref() == Some("8")
        })
        .await?;
    }
    // The real kubectl reads the same thing.
    let out = std::process::Command::new("kubectl")
        .env("KUBECONFIG", env.kubeconfig_path())
        .args([
            "get",
            "nodes",
            "-o",
            r"jsonpath={.items[*].status.allocatable.nvidia\.com/gpu}",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "8 8");

    // NFD labels on GPU nodes, Ready, a Lease.
    eventually_secs("the GPU node labelled and Ready", 60, || async {
        let n0 = nodes_api.get("h100-80gb-0").await?;
        let nfd = n0
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::NFD_GPU_LABELS[0]))
            .cloned();
        let ready = gantry_sim::kubelet::node_status::is_ready(&n0);
        Ok::<_, kube::Error>(if nfd.as_deref() == Some("true") && ready {
            Look::Done(())
        } else {
            Look::Seen(format!("NFD label {nfd:?}, ready {ready}"))
        })
    })
    .await?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    eventually_secs("node lease", 60, || async {
        leases.get_opt("h100-80gb-0").await.ok().flatten().is_some()
    })
    .await?;

    // A 2-GPU pod.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &gpu_pod("train", "h100-80gb-0", 2, Some("3s"))?,
    )
    .await?;
    eventually_secs("pod Running", 60, || async {
        pod_phase(&pods, "train").await.as_deref() == Some("Running")
    })
    .await?;
    let plugin = &plugs[0];
    let allocs = plugin.plugin.allocs.lock().unwrap().clone();
    assert_eq!(allocs.len(), 1);
    let ids = allocs[0].clone();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|id| plugin.ids.contains(id)));
    // The plugin's preference (the last two offered, in ID order) was used, and
    // PreStartContainer was called.
    let mut offered = plugin.ids.clone();
    offered.sort();
    assert_eq!(ids, offered[6..].to_vec());
    assert_eq!(
        plugin.plugin.pre_starts.lock().unwrap().clone(),
        vec![ids.clone()]
    );
    // Recorded on the pod.
    let p = pods.get("train").await?;
    let ann = p.metadata.annotations.unwrap_or_default();
    let rec: serde_json::Value = serde_json::from_str(
        ann.get(names::ANNOTATION_SIM_ALLOCATED)
            .ok_or("no allocation annotation")?,
    )?;
    assert_eq!(rec["cuda"]["nvidia.com/gpu"]["deviceIDs"], json!(ids));
    assert_eq!(
        rec["cuda"]["nvidia.com/gpu"]["envs"]["NVIDIA_VISIBLE_DEVICES"],
        json!(ids.join(","))
    );
    assert_eq!(
        rec["cuda"]["nvidia.com/gpu"]["cdiDevices"][0],
        json!(format!("nvidia.com/gpu={}", ids[0]))
    );
    // PodResources lists the pod with those IDs.
    let node0 = sim.node("h100-80gb-0").ok_or("node")?.clone();
    let ch = plugins::dial(&node0.dirs.pod_resources_socket()).await?;
    let mut pr = PodResourcesListerClient::new(ch);
    let list = pr.list(ListPodResourcesRequest {}).await?.into_inner();
    let train = list
        .pod_resources
        .iter()
        .find(|p| p.name == "train")
        .ok_or("pod not in PodResources")?;
    assert_eq!(train.namespace, "default");
    assert_eq!(
        train.containers[0].devices[0].resource_name,
        names::RESOURCE_GPU
    );
    assert_eq!(train.containers[0].devices[0].device_ids, ids);
    // The simulated GPUs are busy.
    let backend = node0.backend.clone().ok_or("backend")?;
    assert_eq!(backend.sim_processes().len(), 2);
    // It ends; the devices are free again.
    eventually_secs("pod Succeeded", 60, || async {
        pod_phase(&pods, "train").await.as_deref() == Some("Succeeded")
    })
    .await?;
    eventually_secs("devices freed", 60, || {
        let mut pr = pr.clone();
        async move {
            let list = pr
                .list(ListPodResourcesRequest {})
                .await
                .map(|r| r.into_inner());
            list.is_ok_and(|l| l.pod_resources.iter().all(|p| p.name != "train"))
        }
    })
    .await?;
    eventually_secs("the GPU processes stopped", 60, || async {
        backend.sim_processes().is_empty()
    })
    .await?;
    // All 8 can be taken now.
    pods.create(
        &PostParams::default(),
        &gpu_pod("all8", "h100-80gb-0", 8, None)?,
    )
    .await?;
    eventually_secs("8-GPU pod Running", 60, || async {
        pod_phase(&pods, "all8").await.as_deref() == Some("Running")
    })
    .await?;
    // One more GPU does not fit.
    pods.create(
        &PostParams::default(),
        &gpu_pod("toomany", "h100-80gb-0", 1, None)?,
    )
    .await?;
    eventually_secs("rejected pod", 60, || async {
        pod_phase(&pods, "toomany").await.as_deref() == Some("Failed")
    })
    .await?;
    assert_eq!(
        pods.get("toomany")
            .await?
            .status
            .and_then(|s| s.reason)
            .as_deref(),
        Some("OutOfnvidia.com/gpu")
    );
    // Deleting the running pod stops it, frees its GPUs and removes it.
    pods.delete("all8", &DeleteParams::default()).await?;
    eventually_secs("pod gone", 60, || async {
        pods.get_opt("all8").await.ok().flatten().is_none()
    })
    .await?;
    eventually_secs("GPUs idle", 60, || async {
        backend.sim_processes().is_empty()
    })
    .await?;

    // Plugin health: one device unhealthy → allocatable 7, capacity 8.
    let mut devs: Vec<(String, bool)> = plugin.ids.iter().map(|id| (id.clone(), true)).collect();
    devs[0].1 = false;
    plugin.tx.send_replace(devs);
    eventually_secs("7 allocatable", 60, || async {
        gpu_alloc(&nodes_api, "h100-80gb-0").await == (Some("8".into()), Some("7".into()))
    })
    .await?;
    drop(env);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_death_restart_and_kubelet_restart() -> Res<()> {
    let env = setup().await?;
    let (client, sim) = (env.client().clone(), env.sim()?);
    let nodes_api: Api<Node> = Api::all(client.clone());
    let node = sim.node("h100-80gb-1").ok_or("node")?.clone();
    let dir = node.dirs.device_plugins.clone();
    let ids = uuids(sim, "h100-80gb-1")?;
    let p = start_plugin(&dir, ids.clone()).await?;
    eventually_secs("8 allocatable", 60, || async {
        gpu_alloc(&nodes_api, "h100-80gb-1").await == (Some("8".into()), Some("8".into()))
    })
    .await?;
    // The plugin dies: allocatable 0, capacity kept.
    p.server.abort();
    drop(p);
    eventually_secs("0 allocatable, capacity 8", 60, || async {
        gpu_alloc(&nodes_api, "h100-80gb-1").await == (Some("8".into()), Some("0".into()))
    })
    .await?;
    // It comes back and registers again.
    let p = start_plugin(&dir, ids.clone()).await?;
    eventually_secs("8 allocatable again", 60, || async {
        gpu_alloc(&nodes_api, "h100-80gb-1").await.1.as_deref() == Some("8")
    })
    .await?;
    // Kubelet restart: plugin sockets wiped, capacity 0 until the plugin registers again.
    node.restart_device_manager().await?;
    assert!(!dir.join("test-gpu.sock").exists());
    assert!(dir.join("kubelet.sock").exists());
    eventually_secs("capacity 0 after kubelet restart", 60, || async {
        gpu_alloc(&nodes_api, "h100-80gb-1").await == (Some("0".into()), Some("0".into()))
    })
    .await?;
    p.server.abort();
    let _p = start_plugin(&dir, ids).await?;
    eventually_secs("8 allocatable after re-registration", 60, || async {
        gpu_alloc(&nodes_api, "h100-80gb-1").await.1.as_deref() == Some("8")
    })
    .await?;

    // Bad registrations are refused with a reason.
    let ch = plugins::dial(&dir.join("kubelet.sock")).await?;
    let err = RegistrationClient::new(ch)
        .register(RegisterRequest {
            version: "v1alpha".into(),
            endpoint: "x.sock".into(),
            resource_name: "nvidia.com/gpu".into(),
            options: None,
        })
        .await
        .err()
        .ok_or("bad version accepted")?;
    assert!(
        err.message()
            .contains("unsupported device plugin API version"),
        "{}",
        err.message()
    );

    // Faults reach the simulated GPUs; power off makes the node NotReady (Unknown).
    let msg = sim
        .fault("h100-80gb-1", &Fault::Xid { gpu: 3, xid: 79 })
        .await?;
    assert!(msg.contains("XID 79"));
    assert_eq!(node.backend.clone().ok_or("backend")?.last_xid(3)?, 79);
    let reply = gantry_sim::cluster::control::send(
        sim.root(),
        &gantry_sim::cluster::control::Request {
            node: "h100-80gb-1".into(),
            fault: Fault::PowerOff,
        },
    )
    .await?;
    assert!(reply.contains("powered off"));
    eventually_secs("node not ready", 60, || async {
        nodes_api
            .get("h100-80gb-1")
            .await
            .is_ok_and(|n| !gantry_sim::kubelet::node_status::is_ready(&n))
    })
    .await?;
    sim.fault("h100-80gb-1", &Fault::PowerOn).await?;
    eventually_secs("node ready again", 60, || async {
        nodes_api
            .get("h100-80gb-1")
            .await
            .is_ok_and(|n| gantry_sim::kubelet::node_status::is_ready(&n))
    })
    .await?;
    let err = sim
        .fault("h100-80gb-1", &Fault::Xid { gpu: 9, xid: 13 })
        .await
        .err()
        .ok_or("GPU 9 accepted")?;
    assert!(err.to_string().contains("GPU 9"), "{err}");
    Ok(())
}
