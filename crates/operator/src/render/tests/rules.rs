//! One render rule at a time: images, driver pools, enable flags, time-slicing, MIG, sandbox.

use super::*;

#[test]
fn image_rule_gantry_named_block_wins_else_operator_image() {
    let mut p = policy(HELM);
    p.spec.device_plugin.image.repository = Some("ghcr.io/me".into());
    p.spec.device_plugin.image.image = Some("gantry".into());
    p.spec.device_plugin.image.version = Some("dev".into());
    p.spec.device_plugin.image.image_pull_policy = Some("Always".into());
    p.spec.device_plugin.image.image_pull_secrets = Some(vec!["pull".into()]);
    let mut f = facts(ubuntu_nodes());
    f.operator_image = String::new();
    let out = render(&p, &f).unwrap();
    let d = ds(&out, "nvidia-device-plugin-daemonset");
    let c = container(d, "containers", "nvidia-device-plugin");
    assert_eq!(c["image"], "ghcr.io/me/gantry:dev");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(pod(d)["imagePullSecrets"][0]["name"], "pull");
    let g = container(
        ds(&out, "gpu-feature-discovery"),
        "containers",
        "gpu-feature-discovery",
    );
    assert_eq!(g["image"], image::DEFAULT_IMAGE);
    assert!(image::DEFAULT_IMAGE.starts_with("ghcr.io/gantry-dev/gantry:"));
    // The MPS daemon is NVIDIA's: a Gantry device plugin block does not feed it.
    let mps = container(
        ds(&out, "nvidia-device-plugin-mps-control-daemon"),
        "containers",
        "mps-control-daemon-ctr",
    );
    assert_eq!(mps["image"], "nvcr.io/nvidia/k8s-device-plugin:v0.20.0");
}
#[test]
fn driver_tags_follow_os_pools() {
    let p = policy(HELM);
    let out = render(
        &p,
        &facts(vec![
            node("a", "ubuntu", "22.04", "5.15.0-1043-azure"),
            node("b", "ubuntu", "24.04", "6.8.0-60-generic"),
            node("c", "rhel", "9.4", "5.14.0-427.el9.x86_64"),
            node("d", "ubuntu", "24.04", "6.8.0-60-generic"),
        ]),
    )
    .unwrap();
    let images: BTreeMap<String, String> = daemonsets(&out)
        .into_iter()
        .filter(|d| {
            d["metadata"]["labels"][names::LABEL_APP_COMPONENT] == names::COMPONENT_NVIDIA_DRIVER
        })
        .map(|d| {
            let c = container(d, "containers", "nvidia-driver-ctr");
            (
                d["metadata"]["name"].as_str().unwrap_or("").to_string(),
                c["image"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want: BTreeMap<String, String> = [
        (
            "nvidia-driver-daemonset-rhel9",
            "nvcr.io/nvidia/driver:595.91.07-rhel9",
        ),
        (
            "nvidia-driver-daemonset-ubuntu22.04",
            "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04",
        ),
        (
            "nvidia-driver-daemonset-ubuntu24.04",
            "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04",
        ),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(images, want);
    let rhel = ds(&out, "nvidia-driver-daemonset-rhel9");
    assert_eq!(
        pod(rhel)["nodeSelector"][names::NFD_OS_RELEASE_VERSION_ID],
        "9.4"
    );
    assert_eq!(rhel["spec"]["updateStrategy"]["type"], "OnDelete");
    assert_eq!(
        rhel["spec"]["selector"]["matchLabels"]["app"],
        "nvidia-driver-daemonset-rhel9"
    );
}
#[test]
fn precompiled_and_digest_driver_images() {
    let mut p = policy(HELM);
    p.spec.driver.use_precompiled = Some(true);
    p.spec.driver.image.version = Some("595".into());
    let out = render(
        &p,
        &facts(vec![node("a", "ubuntu", "22.04", "5.15.0-1043-azure")]),
    )
    .unwrap();
    let d = ds(
        &out,
        "nvidia-driver-daemonset-5.15.0-1043-azure-ubuntu22.04",
    );
    assert_eq!(
        container(d, "containers", "nvidia-driver-ctr")["image"],
        "nvcr.io/nvidia/driver:595-5.15.0-1043-azure-ubuntu22.04"
    );
    assert_eq!(
        pod(d)["nodeSelector"][names::NFD_KERNEL_VERSION_FULL],
        "5.15.0-1043-azure"
    );

    let digest = format!("sha256:{}", "ab".repeat(32));
    let mut p = policy(HELM);
    p.spec.driver.image.version = Some(digest.clone());
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    assert_eq!(
        container(
            ds(&out, "nvidia-driver-daemonset"),
            "containers",
            "nvidia-driver-ctr"
        )["image"],
        format!("nvcr.io/nvidia/driver@{digest}")
    );
    p.spec.driver.use_precompiled = Some(true);
    assert_eq!(
        render(&p, &facts(ubuntu_nodes())).unwrap_err().path,
        "spec.driver.version"
    );
}
#[test]
fn disabled_operands_render_nothing() {
    let mut p = policy(HELM);
    p.spec.toolkit.enabled = Some(false);
    p.spec.device_plugin.enabled = Some(false);
    p.spec.driver.use_nvidia_driver_crd = Some(true);
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    for s in [
        State::ContainerToolkit,
        State::DevicePlugin,
        State::MpsControlDaemon,
        State::Driver,
    ] {
        let so = state(&out, s);
        assert!(!so.enabled && so.objects.is_empty(), "{s:?}");
    }
    // Without a device plugin, the validator does not wait for one.
    let v = ds(&out, "nvidia-operator-validator");
    assert_eq!(pod(v)["initContainers"].as_array().map(Vec::len), Some(3));
    // NVIDIADriver CRs run the driver container: agents find it at its install dir.
    let driver_root = |out: &[StateObjects]| {
        let v = ds(out, "nvidia-operator-validator");
        let cmd = strings(&container(v, "initContainers", "driver-validation")["command"]);
        let at = cmd.iter().position(|x| x == "--driver-root").unwrap();
        cmd[at + 1].clone()
    };
    assert_eq!(driver_root(&out), "/run/nvidia/driver");
    // With no driver managed by the operator, agents look for it under the host root.
    p.spec.driver.enabled = Some(false);
    assert_eq!(
        driver_root(&render(&p, &facts(ubuntu_nodes())).unwrap()),
        "/host"
    );
}
#[test]
fn time_slicing_config_reaches_device_plugin_and_gfd() {
    let out = render_helm();
    for (name, ctr) in [
        ("nvidia-device-plugin-daemonset", "nvidia-device-plugin"),
        ("gpu-feature-discovery", "gpu-feature-discovery"),
    ] {
        let c = container(ds(&out, name), "containers", ctr);
        let cmd = strings(&c["command"]).join(" ");
        assert!(
            cmd.contains("--config-map gpu-operator/time-slicing-config --default-config any"),
            "{cmd}"
        );
        assert_eq!(env_of(c, "DEFAULT_CONFIG").as_deref(), Some("any"));
        assert_eq!(env_of(c, "MIG_STRATEGY").as_deref(), Some("single"));
    }
    // The chart's device plugin env reaches the container.
    let dp = container(
        ds(&out, "nvidia-device-plugin-daemonset"),
        "containers",
        "nvidia-device-plugin",
    );
    assert_eq!(
        env_of(dp, "DEVICE_LIST_STRATEGY").as_deref(),
        Some("envvar")
    );
    // Without a config there are no config flags, and GFD gets no ConfigMap access.
    let mut p = policy(HELM);
    p.spec.device_plugin.config = None;
    p.spec.mig = None;
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    let dp = container(
        ds(&out, "nvidia-device-plugin-daemonset"),
        "containers",
        "nvidia-device-plugin",
    );
    assert_eq!(strings(&dp["command"]), ["gantry", "node", "device-plugin"]);
    assert_eq!(env_of(dp, "MIG_STRATEGY").as_deref(), Some("none"));
    assert!(
        !state(&out, State::Gfd)
            .objects
            .iter()
            .any(|o| o["kind"] == "Role")
    );
}
#[test]
fn mig_manager_ships_default_config_maps() {
    let out = render_helm();
    let cms: Vec<&Value> = state(&out, State::MigManager)
        .objects
        .iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .collect();
    assert_eq!(cms.len(), 2);
    let parted = cms
        .iter()
        .find(|c| c["metadata"]["name"] == names::CONFIG_MAP_DEFAULT_MIG_PARTED)
        .expect("default mig-parted config");
    let text = parted["data"][names::MIG_PARTED_CONFIG_KEY]
        .as_str()
        .unwrap_or("");
    let parsed: gantry_api::mig_parted::MigPartedConfig = serde_yaml::from_str(text).unwrap();
    assert_eq!(parsed, gantry_api::mig_parted::default_config());
    // A custom layout ConfigMap: the default one is not shipped.
    let mut p = policy(HELM);
    if let Some(c) = p.spec.mig_manager.as_mut().and_then(|m| m.config.as_mut()) {
        c.name = Some("my-layouts".into());
    }
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    let names: Vec<&Value> = state(&out, State::MigManager)
        .objects
        .iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .map(|o| &o["metadata"]["name"])
        .collect();
    assert_eq!(names, [names::CONFIG_MAP_DEFAULT_GPU_CLIENTS]);
    let c = container(
        ds(&out, "nvidia-mig-manager"),
        "containers",
        "nvidia-mig-manager",
    );
    assert!(strings(&c["command"]).contains(&"gpu-operator/my-layouts".to_string()));
}
#[test]
fn no_gpu_nodes_no_daemonsets_but_everything_else() {
    let out = render(&policy(HELM), &facts(Vec::new())).unwrap();
    assert!(daemonsets(&out).is_empty());
    let kinds: Vec<&str> = all(&out)
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    for k in [
        "RuntimeClass",
        "ServiceAccount",
        "ClusterRole",
        "ConfigMap",
        "Service",
    ] {
        assert!(kinds.contains(&k), "{k}");
    }
    let rc: Vec<&Value> = state(&out, State::PreRequisites)
        .objects
        .iter()
        .map(|o| &o["metadata"]["name"])
        .collect();
    assert_eq!(rc, ["nvidia", "nvidia-cdi", "nvidia-legacy"]);
}
#[test]
fn upstream_image_fallbacks() {
    // The smallest CR names no images: chart defaults stand in, the env overrides them.
    let p = policy(MINIMAL);
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    let drv = container(
        ds(&out, "nvidia-driver-daemonset"),
        "containers",
        "nvidia-driver-ctr",
    );
    assert_eq!(drv["image"], "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04");
    assert!(
        state(&out, State::Dcgm).enabled,
        "dcgm nil means true in the API"
    );
    let mut f = facts(ubuntu_nodes());
    f.image_env
        .insert("DRIVER_IMAGE".into(), "mirror.local/driver:580.1".into());
    f.image_env
        .insert("DCGM_IMAGE".into(), "mirror.local/dcgm:4".into());
    let out = render(&p, &f).unwrap();
    let drv = container(
        ds(&out, "nvidia-driver-daemonset"),
        "containers",
        "nvidia-driver-ctr",
    );
    assert_eq!(drv["image"], "mirror.local/driver:580.1-ubuntu24.04");
    assert_eq!(
        container(ds(&out, "nvidia-dcgm"), "containers", "nvidia-dcgm-ctr")["image"],
        "mirror.local/dcgm:4"
    );
}
#[test]
fn sandbox_states_follow_mode() {
    let mut p = policy(HELM);
    p.spec.sandbox_workloads = Some(SandboxWorkloadsSpec {
        enabled: Some(true),
        ..Default::default()
    });
    if let Some(v) = p.spec.vgpu_manager.as_mut() {
        v.enabled = Some(true);
        v.image.repository = Some("registry.example/nvidia".into());
        v.image.version = Some("550.1".into());
    }
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    for s in [
        State::VgpuManager,
        State::VgpuDeviceManager,
        State::SandboxValidation,
        State::VfioManager,
        State::SandboxDevicePlugin,
    ] {
        assert!(state(&out, s).enabled, "{s:?}");
    }
    assert!(!state(&out, State::KataDevicePlugin).enabled);
    assert!(
        !state(&out, State::CcManager).enabled,
        "cc-manager runs in kata mode"
    );
    let v = container(
        ds(&out, "nvidia-vgpu-manager-daemonset"),
        "containers",
        "nvidia-vgpu-manager-daemonset",
    );
    assert_eq!(
        v["image"],
        "registry.example/nvidia/vgpu-manager:550.1-ubuntu24.04"
    );
    assert_eq!(
        pod(ds(&out, "nvidia-sandbox-device-plugin-daemonset"))["nodeSelector"]["nvidia.com/gpu.deploy.sandbox-device-plugin"],
        "true"
    );
    let sv = ds(&out, "nvidia-sandbox-validator");
    let inits: Vec<&Value> = pod(sv)["initContainers"]
        .as_array()
        .map(|a| a.iter().map(|c| &c["name"]).collect())
        .unwrap_or_default();
    assert_eq!(
        inits,
        [
            "vfio-pci-validation",
            "vgpu-manager-validation",
            "vgpu-devices-validation"
        ]
    );
    // vGPU manager without an image is an error naming the section.
    if let Some(v) = p.spec.vgpu_manager.as_mut() {
        v.image = Default::default();
    }
    assert_eq!(
        render(&p, &facts(ubuntu_nodes())).unwrap_err().path,
        "spec.vgpuManager"
    );
}
#[test]
fn render_is_deterministic() {
    let p = policy(HELM);
    let mut f = facts(vec![
        node("b", "ubuntu", "22.04", "k1"),
        node("a", "ubuntu", "24.04", "k2"),
        node("c", "rhel", "9.4", "k3"),
    ]);
    f.has_service_monitor_crd = true;
    let first = serde_json::to_string(
        &render(&p, &f)
            .unwrap()
            .iter()
            .map(|s| &s.objects)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let second = serde_json::to_string(
        &render(&p, &f)
            .unwrap()
            .iter()
            .map(|s| &s.objects)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert_eq!(first, second);
    f.gpu_nodes.reverse();
    let reordered = serde_json::to_string(
        &render(&p, &f)
            .unwrap()
            .iter()
            .map(|s| &s.objects)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert_eq!(first, reordered, "node order must not matter");
}
#[test]
fn nodes_without_os_labels_get_no_driver_pool() {
    let mut bare = node("x", "ubuntu", "24.04", "k");
    bare.labels.remove(names::NFD_OS_RELEASE_ID);
    let out = render(&policy(HELM), &facts(vec![bare])).unwrap();
    assert!(
        state(&out, State::Driver)
            .objects
            .iter()
            .all(|o| o["kind"] != "DaemonSet")
    );
    // The rest of the stack still renders for that node.
    assert!(
        daemonsets(&out)
            .iter()
            .any(|d| d["metadata"]["name"] == "nvidia-device-plugin-daemonset")
    );
}
