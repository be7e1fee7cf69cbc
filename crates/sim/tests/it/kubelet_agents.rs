//! Operand pods: a DaemonSet running `gantry node device-plugin` makes the sim kubelet run the
//! real device plugin in-process on each GPU node; it registers over the node's kubelet socket
//! and the GPUs become allocatable. A GPU fault then shows up as an unhealthy device. A GFD
//! DaemonSet runs the real discovery agent, which labels its own Node.

use std::time::Duration;

use gantry_api::names;
use gantry_sim::cluster::{self, Fault};
use gantry_sim::kubelet::runners::default_registry;
use gantry_sim::{ControlPlane, ControlPlaneOptions, controllers, nodes};
use gantry_testkit::eventually_secs;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn allocatable(api: &Api<Node>, node: &str) -> Option<String> {
    let n = api.get(node).await.ok()?;
    Some(n.status?.allocatable?.get(names::RESOURCE_GPU)?.0.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugin_daemonset_makes_gpus_allocatable() -> Res<()> {
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("ga").tempdir_in("/tmp")?;
    let sim = cluster::start(
        client.clone(),
        tmp.path(),
        nodes::plan("2xH100-80GB:8,1xcpu")?,
        default_registry(),
    )
    .await?;
    let _ctl = controllers::start(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "gpu-operator"}}))?;
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
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
    eventually_secs("pod running", 60, || async {
        pods.get("cuda")
            .await
            .is_ok_and(|p| p.status.and_then(|s| s.phase).as_deref() == Some("Running"))
    })
    .await?;
    let p = pods.get("cuda").await?;
    let rec: serde_json::Value = serde_json::from_str(
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::ANNOTATION_SIM_ALLOCATED))
            .ok_or("no allocation")?,
    )?;
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
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("gd").tempdir_in("/tmp")?;
    let _sim = cluster::start(
        client.clone(),
        tmp.path(),
        nodes::plan("1xH100-80GB:8,1xL4:1,1xcpu")?,
        default_registry(),
    )
    .await?;
    let _ctl = controllers::start(client.clone());
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "gpu-feature-discovery", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "gpu-feature-discovery"}},
                 "template": {"metadata": {"labels": {"app": "gpu-feature-discovery"}},
                              "spec": {"nodeSelector": {names::NFD_GPU_LABELS[0]: "true"},
                                       "containers": [{"name": "gfd", "image": "ghcr.io/gantry/gantry:dev",
                                                       "command": ["gantry"],
                                                       "args": ["node", "discovery", "--mig-strategy", "mixed"]}]}}}
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
            nodes_api.get(node).await.is_ok_and(|n| {
                label(n.clone(), names::LABEL_GPU_PRODUCT).as_deref() == Some(product)
                    && label(n, names::LABEL_GPU_COUNT).as_deref() == Some(count)
            })
        })
        .await?;
    }
    let h100 = nodes_api.get("h100-80gb-0").await?;
    assert_eq!(
        label(h100.clone(), names::LABEL_MIG_CAPABLE).as_deref(),
        Some("true")
    );
    assert_eq!(
        label(h100.clone(), names::LABEL_MIG_STRATEGY).as_deref(),
        Some("mixed")
    );
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
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("gv").tempdir_in("/tmp")?;
    let sim = cluster::start(
        client.clone(),
        tmp.path(),
        nodes::plan("1xH100-80GB:8")?,
        default_registry(),
    )
    .await?;
    let _ctl = controllers::start(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "gpu-operator"}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let node = "h100-80gb-0";
    let host = tmp.path().join(node);
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
               "containers": [gantry("toolkit", &["toolkit", "--host-root", "/host", "--runtime", "containerd", "--watch", "30"])]}),
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
    let spec = std::fs::read_to_string(&spec_path).map_err(|e| {
        let tk = std::process::Command::new("find")
            .arg(&host)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        format!("{}: {e}; host: {tk:?}", spec_path.display())
    })?;
    let uuid = gantry_gpu::Backend::device_info(backend.as_ref(), 0)?.uuid;
    assert!(spec.contains(&uuid), "{spec}");
    let nodes_api: Api<Node> = Api::all(client.clone());
    assert_eq!(allocatable(&nodes_api, node).await.as_deref(), Some("8"));
    eventually_secs("validator pod running", 60, || async {
        operand_pod(&client, "nvidia-operator-validator", node)
            .await
            .and_then(|p| p.status?.phase)
            .as_deref()
            == Some("Running")
    })
    .await?;

    // The node status exporter serves the ready states on its published address.
    let mut addr = None;
    for _ in 0..300 {
        addr = operand_pod(&client, "nvidia-node-status-exporter", node)
            .await
            .and_then(|p| {
                p.metadata
                    .annotations?
                    .get(names::ANNOTATION_SIM_METRICS_ADDRESS)
                    .cloned()
            });
        if addr.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = scrape(&addr.ok_or("no node status exporter address")?).await?;
    for line in [
        "\ngpu_operator_node_driver_ready 1\n",
        "\ngpu_operator_node_toolkit_ready 1\n",
        "\ngpu_operator_node_cuda_ready 1\n",
        "\ngpu_operator_node_plugin_ready 1\n",
        "\ngpu_operator_node_device_plugin_devices_total 8\n",
    ] {
        assert!(body.contains(line), "{line:?} missing from {body}");
    }

    // driver-fail: the driver container exits 1 and crash-loops; its ready file goes away.
    sim.fault(node, &Fault::DriverFail).await?;
    eventually_secs("driver container restarted", 60, || async {
        operand_pod(&client, "nvidia-driver-daemonset", node)
            .await
            .is_some_and(|p| restarts(&p) >= 1)
    })
    .await?;
    assert!(!validations.join(".driver-ctr-ready").exists());
    let p = operand_pod(&client, "nvidia-driver-daemonset", node)
        .await
        .ok_or("no driver pod")?;
    let last = p
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.into_iter().next())
        .ok_or("no status")?;
    assert_eq!(
        last.last_state
            .and_then(|s| s.terminated)
            .map(|t| t.exit_code),
        Some(1)
    );
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
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("ge").tempdir_in("/tmp")?;
    let _sim = cluster::start(
        client.clone(),
        tmp.path(),
        nodes::plan("2xL4:2")?,
        default_registry(),
    )
    .await?;
    let _ctl = controllers::start(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "gpu-operator"}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
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
        let mut addr = None;
        for _ in 0..300 {
            addr = operand_pod(&client, "nvidia-dcgm-exporter", node)
                .await
                .and_then(|p| {
                    p.metadata
                        .annotations?
                        .get(names::ANNOTATION_SIM_METRICS_ADDRESS)
                        .cloned()
                });
            if addr.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        addrs.push(addr.ok_or("no metrics address on the exporter pod")?);
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
    let cp = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let client = cp.client()?;
    let tmp = tempfile::Builder::new().prefix("gc").tempdir_in("/tmp")?;
    let _sim = cluster::start(
        client.clone(),
        tmp.path(),
        nodes::plan("2xL4:1")?,
        default_registry(),
    )
    .await?;
    let _ctl = controllers::start(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "gpu-operator"}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
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
