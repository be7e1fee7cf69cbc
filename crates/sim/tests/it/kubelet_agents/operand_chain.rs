//! The operand stack in dependency order (driver, toolkit, validator, device plugin) and the
//! driver-fail fault.

use super::*;

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
    let addr = metrics_address(
        &client,
        "nvidia-node-status-exporter",
        node,
        "the node status exporter's address",
    )
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
