//! Operand pods: a DaemonSet running `gantry node device-plugin` makes the sim kubelet run the
//! real device plugin in-process on each GPU node; it registers over the node's kubelet socket
//! and the GPUs become allocatable. A GPU fault then shows up as an unhealthy device. A GFD
//! DaemonSet runs the real discovery agent, which labels its own Node.

use gantry_api::names;
use gantry_sim::cluster::Fault;
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn allocatable(api: &Api<Node>, node: &str) -> Option<String> {
    let n = api.get(node).await.ok()?;
    Some(n.status?.allocatable?.get(names::RESOURCE_GPU)?.0.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugin_daemonset_makes_gpus_allocatable() -> Res<()> {
    let env = Cluster::builder()
        .nodes("2xH100-80GB:8,1xcpu")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let sim = env.sim()?;
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"},
        "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}},
                 "template": {"metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "nvidia-device-plugin", "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"], "args": ["node", "device-plugin"]}]}}}
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &ds)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    for n in ["h100-80gb-0", "h100-80gb-1"] {
        eventually_secs("8 GPUs from the real plugin", 60, || async {
            allocatable(&nodes_api, n).await.as_deref() == Some("8")
        })
        .await?;
    }
    assert_eq!(allocatable(&nodes_api, "cpu-0").await, None);

    // A 2-GPU pod gets two real device IDs and the plugin's env.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cuda", "namespace": "default"},
        "spec": {"nodeName": "h100-80gb-0", "containers": [{"name": "c", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let allocated = eventually_secs("pod running with its allocation recorded", 60, || async {
        let p = pods.get("cuda").await?;
        let phase = p.status.and_then(|s| s.phase);
        let allocated = p
            .metadata
            .annotations
            .and_then(|mut a| a.remove(names::ANNOTATION_SIM_ALLOCATED));
        Ok::<_, kube::Error>(match allocated {
            Some(a) if phase.as_deref() == Some("Running") => Look::Done(a),
            _ => Look::Seen(format!("phase {phase:?}, allocation {allocated:?}")),
        })
    })
    .await?;
    let rec: serde_json::Value = serde_json::from_str(&allocated)?;
    let ids = rec["c"]["nvidia.com/gpu"]["deviceIDs"]
        .as_array()
        .ok_or("no ids")?
        .clone();
    assert_eq!(ids.len(), 2);
    assert!(
        ids.iter()
            .all(|i| i.as_str().is_some_and(|s| s.starts_with("GPU-"))),
        "{ids:?}"
    );

    // A GPU falls off the bus: the plugin marks it unhealthy, allocatable drops.
    sim.fault("h100-80gb-1", &Fault::OffBus { gpu: 2 }).await?;
    eventually_secs("7 allocatable after XID 79", 60, || async {
        allocatable(&nodes_api, "h100-80gb-1").await.as_deref() == Some("7")
    })
    .await?;
    Ok(())
}

/// A GFD DaemonSet: the sim kubelet runs the real discovery agent in-process, which labels its
/// own Node through server-side apply; the CPU node gets no GPU labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_daemonset_labels_gpu_nodes() -> Res<()> {
    let env = Cluster::builder()
        .nodes("1xH100-80GB:8,1xL4:1,1xcpu")
        .controllers()
        .start()
        .await?;
    let client = env.client().clone();
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "gpu-feature-discovery", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "gpu-feature-discovery"}},
                 "template": {"metadata": {"labels": {"app": "gpu-feature-discovery"}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "gfd", "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"],
                                                       "args": ["node", "discovery", "--mig-strategy", "mixed"],
                                                       // As on a node: GFD learns its Node from the downward API.
                                                       "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}}
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &ds)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let label = |node: Node, key: &str| node.metadata.labels.and_then(|l| l.get(key).cloned());
    for (node, product, count) in [
        ("h100-80gb-0", "NVIDIA-H100-80GB-HBM3", "8"),
        ("l4-0", "NVIDIA-L4", "1"),
    ] {
        eventually_secs("GFD labels on the GPU node", 60, || async {
            let n = nodes_api.get(node).await?;
            let now = (
                label(n.clone(), names::LABEL_GPU_PRODUCT),
                label(n.clone(), names::LABEL_GPU_COUNT),
                label(n.clone(), names::LABEL_MIG_CAPABLE),
                label(n, names::LABEL_MIG_STRATEGY),
            );
            let mig_ok = node != "h100-80gb-0"
                || (now.2.as_deref() == Some("true") && now.3.as_deref() == Some("mixed"));
            Ok::<_, kube::Error>(
                if now.0.as_deref() == Some(product) && now.1.as_deref() == Some(count) && mig_ok {
                    Look::Done(())
                } else {
                    Look::Seen(format!(
                        "(product, count, mig.capable, mig.strategy) = {now:?}"
                    ))
                },
            )
        })
        .await?;
    }
    let h100 = nodes_api.get("h100-80gb-0").await?;
    // The kubelet's own labels survive the agent's apply.
    assert_eq!(
        label(h100, names::NFD_GPU_LABELS[0]).as_deref(),
        Some("true")
    );
    let cpu = nodes_api.get("cpu-0").await?;
    assert_eq!(label(cpu, names::LABEL_GPU_PRODUCT), None);
    Ok(())
}

fn daemonset(name: &str, labels: serde_json::Value, pod_spec: serde_json::Value) -> Res<DaemonSet> {
    let mut spec = pod_spec;
    spec["nodeSelector"] = json!({names::NFD_GPU_LABELS[0]: "true"});
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    }))?)
}

fn gantry(name: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["node"];
    all.extend_from_slice(args);
    json!({"name": name, "image": "ghcr.io/gantry/gantry:dev", "command": ["gantry"], "args": all,
           "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]})
}

/// The host's `/` mounted at `/host` (the pod needs the `host-root` volume), as the
/// operator renders the toolkit.
fn host_root_mounted(mut c: serde_json::Value) -> serde_json::Value {
    c["volumeMounts"] = json!([{"name": "host-root", "mountPath": "/host"}]);
    c
}

async fn operand_pod(client: &kube::Client, app: &str, node: &str) -> Option<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "gpu-operator");
    let lp = kube::api::ListParams::default().labels(&format!("app={app}"));
    pods.list(&lp)
        .await
        .ok()?
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

/// The operand stack in dependency order, as the operator renders it: a driver container
/// (installs 580.95.05), the toolkit gated on the driver validation, the validator's init
/// chain, and the device plugin gated on `toolkit-ready`. Then the driver-fail fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_toolkit_validator_chain_and_driver_fault() -> Res<()> {
    let env = Cluster::builder()
        .nodes("1xH100-80GB:8")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let sim = env.sim()?;
    let node = "h100-80gb-0";
    let host = env.dir().join(node);
    let validations = host.join("run/nvidia/validations");
    let ds_api = Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator");
    let driver = daemonset(
        "nvidia-driver-daemonset",
        json!({names::LABEL_APP_COMPONENT: names::COMPONENT_NVIDIA_DRIVER}),
        json!({"containers": [{"name": "nvidia-driver-ctr",
                               "image": "nvcr.io/nvidia/driver:580.95.05-ubuntu24.04"}]}),
    )?;
    let toolkit = daemonset(
        "nvidia-container-toolkit-daemonset",
        json!({}),
        json!({"initContainers": [gantry("driver-validation", &["validator", "--component", "driver", "--wait"])],
               "containers": [host_root_mounted(gantry("toolkit", &["toolkit", "--host-root", "/host", "--runtime", "containerd", "--watch", "30"]))],
               "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}]}),
    )?;
    let validator = daemonset(
        "nvidia-operator-validator",
        json!({}),
        json!({"initContainers": [
                   gantry("driver-validation", &["validator", "--component", "driver", "--wait"]),
                   gantry("toolkit-validation", &["validator", "--component", "toolkit", "--wait"]),
                   gantry("cuda-validation", &["validator", "--component", "cuda", "--wait"]),
                   gantry("plugin-validation", &["validator", "--component", "plugin", "--wait"])],
               "containers": [gantry("nvidia-operator-validator", &["validator"])]}),
    )?;
    let plugin = daemonset(
        "nvidia-device-plugin-daemonset",
        json!({}),
        json!({"initContainers": [gantry("toolkit-validation", &["validator", "--wait-for", "toolkit"])],
               "containers": [gantry("nvidia-device-plugin", &["device-plugin"])]}),
    )?;
    let status_exporter = daemonset(
        "nvidia-node-status-exporter",
        json!({}),
        json!({"initContainers": [gantry("toolkit-validation", &["validator", "--wait-for", "toolkit"])],
               "containers": [gantry("node-status-exporter", &["validator", "--component", "metrics"])]}),
    )?;
    // Reverse order: every layer must wait for the one below.
    for ds in [&status_exporter, &plugin, &validator, &toolkit, &driver] {
        ds_api.create(&PostParams::default(), ds).await?;
    }
    let backend = sim
        .node(node)
        .and_then(|n| n.backend.clone())
        .ok_or("no backend")?;
    for f in [
        "driver-ready",
        "toolkit-ready",
        "cuda-ready",
        "plugin-ready",
    ] {
        eventually_secs(f, 60, || async { validations.join(f).exists() }).await?;
    }
    assert!(validations.join(".driver-ctr-ready").exists());
    assert_eq!(
        gantry_gpu::Backend::driver_version(backend.as_ref())?,
        "580.95.05"
    );
    let ready = std::fs::read_to_string(validations.join("driver-ready"))?;
    assert!(ready.contains("IS_HOST_DRIVER=false\n"), "{ready}");
    assert!(
        ready.contains("NVIDIA_DRIVER_ROOT=/run/nvidia/driver\n"),
        "{ready}"
    );
    // The toolkit edited the seeded containerd config and wrote the CDI spec.
    let config = std::fs::read_to_string(host.join("etc/containerd/config.toml"))?;
    assert!(config.contains("runtimes.nvidia]"), "{config}");
    assert!(config.contains("# containerd config written at node provisioning"));
    let spec_path = host.join("var/run/cdi/nvidia.yaml");
    let uuid = gantry_gpu::Backend::device_info(backend.as_ref(), 0)?.uuid;
    eventually_secs("the CDI spec naming GPU 0", 60, || async {
        match std::fs::read_to_string(&spec_path) {
            Ok(spec) if spec.contains(&uuid) => Look::Done(()),
            Ok(spec) => Look::Seen(spec),
            Err(e) => {
                let tk = std::process::Command::new("find")
                    .arg(&host)
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
                Look::Seen(format!("{}: {e}; host: {tk:?}", spec_path.display()))
            }
        }
    })
    .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    eventually_secs("8 allocatable GPUs", 60, || async {
        let a = allocatable(&nodes_api, node).await;
        if a.as_deref() == Some("8") {
            Look::Done(())
        } else {
            Look::Seen(format!("allocatable {a:?}"))
        }
    })
    .await?;
    eventually_secs("validator pod running", 60, || async {
        operand_pod(&client, "nvidia-operator-validator", node)
            .await
            .and_then(|p| p.status?.phase)
            .as_deref()
            == Some("Running")
    })
    .await?;

    // The node status exporter serves the ready states on its published address.
    let addr = eventually_secs("the node status exporter's address", 60, || async {
        operand_pod(&client, "nvidia-node-status-exporter", node)
            .await
            .and_then(|p| {
                p.metadata
                    .annotations?
                    .get(names::ANNOTATION_SIM_METRICS_ADDRESS)
                    .cloned()
            })
    })
    .await?;
    // The exporter refreshes on its own schedule: wait for every ready state.
    eventually_secs(
        "every ready state on the node status exporter",
        60,
        || async {
            let body = scrape(&addr).await?;
            let missing: Vec<&str> = [
                "\ngpu_operator_node_driver_ready 1\n",
                "\ngpu_operator_node_toolkit_ready 1\n",
                "\ngpu_operator_node_cuda_ready 1\n",
                "\ngpu_operator_node_plugin_ready 1\n",
                "\ngpu_operator_node_device_plugin_devices_total 8\n",
            ]
            .into_iter()
            .filter(|line| !body.contains(line))
            .collect();
            Res::Ok(if missing.is_empty() {
                Look::Done(())
            } else {
                Look::Seen(format!("{missing:?} missing from {body}"))
            })
        },
    )
    .await?;

    // driver-fail: the driver container exits 1 and crash-loops; its ready file goes away.
    sim.fault(node, &Fault::DriverFail).await?;
    // The restart count, the last state and the ready file are separate writes: wait for all.
    eventually_secs(
        "driver container restarted after exit 1, its ready file gone",
        60,
        || async {
            let Some(p) = operand_pod(&client, "nvidia-driver-daemonset", node).await else {
                return Look::Seen("no driver pod".into());
            };
            let n = restarts(&p);
            let exit = p
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.into_iter().next())
                .and_then(|c| c.last_state)
                .and_then(|s| s.terminated)
                .map(|t| t.exit_code);
            let ready_file = validations.join(".driver-ctr-ready").exists();
            if n >= 1 && exit == Some(1) && !ready_file {
                Look::Done(())
            } else {
                Look::Seen(format!(
                    "restarts {n}, last exit {exit:?}, .driver-ctr-ready exists: {ready_file}"
                ))
            }
        },
    )
    .await?;
    sim.fault(node, &Fault::DriverOk).await?;
    eventually_secs("driver back after the fault clears", 60, || async {
        validations.join(".driver-ctr-ready").exists()
    })
    .await?;
    Ok(())
}

async fn scrape(addr: &str) -> Res<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n")
        .await?;
    let mut body = String::new();
    s.read_to_string(&mut body).await?;
    Ok(body)
}

/// An exporter DaemonSet: each node's exporter serves on its own loopback port, published on
/// its pod; a scrape shows the node's GPUs and attributes a GPU to the workload pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporter_daemonset_serves_per_node_with_attribution() -> Res<()> {
    let env = Cluster::builder()
        .nodes("2xL4:2")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let ds_api = Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator");
    ds_api
        .create(
            &PostParams::default(),
            &daemonset(
                "nvidia-device-plugin-daemonset",
                json!({}),
                json!({"containers": [gantry("nvidia-device-plugin", &["device-plugin"])]}),
            )?,
        )
        .await?;
    ds_api
        .create(
            &PostParams::default(),
            &daemonset(
                "nvidia-dcgm-exporter",
                json!({}),
                json!({"containers": [gantry("nvidia-dcgm-exporter", &["exporter", "-a", ":9400"])]}),
            )?,
        )
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    eventually_secs("GPUs allocatable", 60, || async {
        allocatable(&nodes_api, "l4-1").await.as_deref() == Some("2")
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {"nodeName": "l4-1", "containers": [{"name": "main", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let mut addrs = Vec::new();
    for node in ["l4-0", "l4-1"] {
        let addr = eventually_secs("a metrics address on the exporter pod", 60, || async {
            operand_pod(&client, "nvidia-dcgm-exporter", node)
                .await
                .and_then(|p| {
                    p.metadata
                        .annotations?
                        .get(names::ANNOTATION_SIM_METRICS_ADDRESS)
                        .cloned()
                })
        })
        .await?;
        addrs.push(addr);
    }
    assert_ne!(addrs[0], addrs[1]);
    let body = scrape(&addrs[0]).await?;
    assert!(body.contains("DCGM_FI_DEV_GPU_TEMP{"), "{body}");
    assert!(body.contains("Hostname=\"l4-0\""), "{body}");
    assert!(body.contains("gpu=\"1\""), "{body}");
    assert!(!body.contains("trainer"));
    let attributed = eventually_secs("the workload pod attributed", 60, || async {
        scrape(&addrs[1])
            .await
            .is_ok_and(|b| b.contains("pod=\"trainer\"") && b.contains("namespace=\"default\""))
    })
    .await;
    if let Err(e) = attributed {
        return Err(format!("{e}: {}", scrape(&addrs[1]).await?).into());
    }
    Ok(())
}

/// GFD with `--config-map NS/NAME --default-config NAME`, as the operator renders it with a
/// device plugin config: the node label picks the key, else the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_reads_its_config_from_a_config_map() -> Res<()> {
    let env = Cluster::builder()
        .nodes("2xL4:1")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let sliced = |n: u32| {
        format!(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
        )
    };
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "plugin-config", "namespace": "gpu-operator"},
        "data": {"shared-4": sliced(4), "shared-2": sliced(2)}
    }))?;
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &cm)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {names::LABEL_DEVICE_PLUGIN_CONFIG: "shared-2"}}});
    nodes_api
        .patch(
            "l4-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator")
        .create(
            &PostParams::default(),
            &daemonset(
                "gpu-feature-discovery",
                json!({}),
                json!({"containers": [gantry("gfd", &["discovery", "--config-map", "gpu-operator/plugin-config",
                                                       "--default-config", "shared-4"])]}),
            )?,
        )
        .await?;
    let replicas = |n: Node| {
        n.metadata
            .labels
            .and_then(|l| l.get(names::LABEL_GPU_REPLICAS).cloned())
    };
    for (node, want) in [("l4-0", "4"), ("l4-1", "2")] {
        eventually_secs("replicas label from the ConfigMap", 60, || async {
            nodes_api
                .get(node)
                .await
                .is_ok_and(|n| replicas(n).as_deref() == Some(want))
        })
        .await?;
    }
    Ok(())
}

/// Issue #24: XID 119 (a GSP timeout; volatile ECC counters stay 0 through a reset) then
/// `gantry sim fault --clear`: the GPU comes back after the quiet period, with no plugin
/// restart. The Node and the pod holding the GPU get a `GPUUnhealthy` event, the Node a
/// `GPUHealthy` one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_119_then_clear_recovers_without_a_plugin_restart() -> Res<()> {
    let env = Cluster::builder()
        .nodes("1xL4:2")
        .controllers()
        .namespace("gpu-operator")
        .start()
        .await?;
    let client = env.client().clone();
    let sim = env.sim()?;
    let mut c = gantry("nvidia-device-plugin", &["device-plugin"]);
    c["env"]
        .as_array_mut()
        .ok_or("env")?
        .push(json!({"name": "XID_RECOVERY_HOLD", "value": "3"}));
    let app = "nvidia-device-plugin-daemonset";
    let ds = daemonset(app, json!({}), json!({"containers": [c]}))?;
    Api::<DaemonSet>::namespaced(client.clone(), "gpu-operator")
        .create(&PostParams::default(), &ds)
        .await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let node = "l4-0";
    eventually_secs("2 GPUs allocatable", 60, || async {
        allocatable(&nodes_api, node).await.as_deref() == Some("2")
    })
    .await?;
    let plugin = operand_pod(&client, app, node)
        .await
        .ok_or("no plugin pod")?;
    let plugin_uid = plugin.metadata.uid.clone();

    // A pod on both GPUs, so the fault on GPU 0 hits it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    eventually_secs("train Running", 60, || async {
        let p = pods.get("train").await?;
        Ok::<_, kube::Error>(p.status.and_then(|s| s.phase).as_deref() == Some("Running"))
    })
    .await?;

    sim.fault(node, &Fault::Xid { gpu: 0, xid: 119 }).await?;
    eventually_secs("1 allocatable after XID 119", 60, || async {
        allocatable(&nodes_api, node).await.as_deref() == Some("1")
    })
    .await?;
    sim.fault(node, &Fault::Clear { gpu: 0 }).await?;
    eventually_secs("2 allocatable again after the reset", 60, || async {
        allocatable(&nodes_api, node).await.as_deref() == Some("2")
    })
    .await?;

    let same = operand_pod(&client, app, node)
        .await
        .ok_or("no plugin pod")?;
    assert_eq!(same.metadata.uid, plugin_uid, "the plugin pod was replaced");
    assert_eq!(restarts(&same), 0, "the plugin restarted");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
    let reasons = |kind: &'static str, name: &'static str| {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await?;
            Ok::<_, kube::Error>(
                list.items
                    .into_iter()
                    .filter(|e| {
                        e.involved_object.kind.as_deref() == Some(kind)
                            && e.involved_object.name.as_deref() == Some(name)
                    })
                    .filter_map(|e| e.reason)
                    .collect::<Vec<_>>(),
            )
        }
    };
    eventually_secs("GPUUnhealthy and GPUHealthy on the Node", 30, || async {
        let r = reasons("Node", node).await?;
        Ok::<_, kube::Error>(
            if r.iter().any(|x| x == "GPUUnhealthy") && r.iter().any(|x| x == "GPUHealthy") {
                Look::Done(())
            } else {
                Look::Seen(format!("{r:?}"))
            },
        )
    })
    .await?;
    eventually_secs("GPUUnhealthy on the pod holding GPU 0", 30, || async {
        let r = reasons("Pod", "train").await?;
        Ok::<_, kube::Error>(if r.iter().any(|x| x == "GPUUnhealthy") {
            Look::Done(())
        } else {
            Look::Seen(format!("{r:?}"))
        })
    })
    .await?;
    Ok(())
}
