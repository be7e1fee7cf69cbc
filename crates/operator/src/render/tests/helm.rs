//! The Helm-default ClusterPolicy, rendered end to end.

use super::*;

#[test]
fn helm_defaults_render_every_expected_daemonset() {
    let out = render_helm();
    let mut got: Vec<String> = daemonsets(&out)
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "gpu-feature-discovery",
            "nvidia-container-toolkit-daemonset",
            "nvidia-dcgm-exporter",
            "nvidia-device-plugin-daemonset",
            "nvidia-device-plugin-mps-control-daemon",
            "nvidia-driver-daemonset",
            "nvidia-mig-manager",
            "nvidia-operator-validator",
        ]
    );
    // Chart: dcgm and nodeStatusExporter off, sandbox off.
    for s in [
        State::Dcgm,
        State::NodeStatusExporter,
        State::SandboxValidation,
        State::VgpuManager,
    ] {
        assert!(
            !state(&out, s).enabled && state(&out, s).objects.is_empty(),
            "{s:?}"
        );
    }
    assert_eq!(out.iter().map(|s| s.state).collect::<Vec<_>>(), State::ALL);
}
#[test]
fn every_object_is_labelled_and_placed() {
    let owner = OwnerReference {
        api_version: "nvidia.com/v1".into(),
        kind: "ClusterPolicy".into(),
        name: "cluster-policy".into(),
        uid: "u-1".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut f = facts(ubuntu_nodes());
    f.owner = Some(owner);
    let out = render(&policy(HELM), &f).unwrap();
    for s in &out {
        for o in &s.objects {
            let m = &o["metadata"];
            assert_eq!(m["labels"][LABEL_STATE], s.state.name(), "{o}");
            assert_eq!(m["labels"][LABEL_MANAGED_BY], MANAGED_BY, "{o}");
            // Exactly one owner, the policy, as the controller: deleting the policy
            // garbage-collects every object the operator made for it.
            assert_eq!(
                m["ownerReferences"].as_array().map(Vec::len),
                Some(1),
                "{o}"
            );
            assert_eq!(m["ownerReferences"][0]["uid"], "u-1", "{o}");
            assert_eq!(m["ownerReferences"][0]["kind"], "ClusterPolicy", "{o}");
            assert_eq!(m["ownerReferences"][0]["controller"], true, "{o}");
            let cluster_scoped = ["RuntimeClass", "ClusterRole", "ClusterRoleBinding"]
                .contains(&o["kind"].as_str().unwrap_or(""));
            assert_eq!(m.get("namespace").is_none(), cluster_scoped, "{o}");
            if !cluster_scoped {
                assert_eq!(m["namespace"], "gpu-operator");
            }
        }
    }
    // The template of the driver carries the component label the validator looks for.
    let d = ds(&out, "nvidia-driver-daemonset");
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"][names::LABEL_APP_COMPONENT],
        names::COMPONENT_NVIDIA_DRIVER
    );
    // The chart's daemonsets.labels try to take managed-by: ours wins.
    assert_eq!(d["metadata"]["labels"][LABEL_MANAGED_BY], MANAGED_BY);
    assert_eq!(
        d["metadata"]["labels"]["helm.sh/chart"],
        "gpu-operator-v26.7.0"
    );
}
#[test]
fn node_selectors_target_deploy_labels() {
    let out = render_helm();
    for (name, operand) in [
        ("nvidia-driver-daemonset", "driver"),
        ("nvidia-container-toolkit-daemonset", "container-toolkit"),
        ("nvidia-operator-validator", "operator-validator"),
        ("nvidia-device-plugin-daemonset", "device-plugin"),
        ("gpu-feature-discovery", "gpu-feature-discovery"),
        ("nvidia-dcgm-exporter", "dcgm-exporter"),
        ("nvidia-mig-manager", "mig-manager"),
        ("nvidia-device-plugin-mps-control-daemon", "device-plugin"),
    ] {
        let sel = &pod(ds(&out, name))["nodeSelector"];
        assert_eq!(
            sel[format!("nvidia.com/gpu.deploy.{operand}")],
            "true",
            "{name}"
        );
    }
    let driver = &pod(ds(&out, "nvidia-driver-daemonset"))["nodeSelector"];
    assert_eq!(driver[names::NFD_OS_RELEASE_ID], "ubuntu");
    assert_eq!(driver[names::NFD_OS_RELEASE_VERSION_ID], "24.04");
    let mps = &pod(ds(&out, "nvidia-device-plugin-mps-control-daemon"))["nodeSelector"];
    assert_eq!(mps[names::LABEL_MPS_CAPABLE], "true");
}
#[test]
fn init_containers_order_operands_per_node() {
    let out = render_helm();
    let inits = |name: &str| -> Vec<String> {
        pod(ds(&out, name))["initContainers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| c["name"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(inits("nvidia-driver-daemonset"), ["k8s-driver-manager"]);
    assert_eq!(
        inits("nvidia-container-toolkit-daemonset"),
        ["driver-validation"]
    );
    assert_eq!(
        inits("nvidia-operator-validator"),
        [
            "driver-validation",
            "toolkit-validation",
            "cuda-validation",
            "plugin-validation"
        ]
    );
    for name in [
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-dcgm-exporter",
        "nvidia-mig-manager",
    ] {
        assert_eq!(inits(name), ["toolkit-validation"], "{name}");
        let c = container(ds(&out, name), "initContainers", "toolkit-validation");
        assert_eq!(
            strings(&c["command"]),
            ["gantry", "node", "validator", "--wait-for", "toolkit"]
        );
        assert_eq!(c["image"], IMAGE);
    }
    let tk = container(
        ds(&out, "nvidia-container-toolkit-daemonset"),
        "initContainers",
        "driver-validation",
    );
    let cmd = strings(&tk["command"]);
    assert_eq!(
        &cmd[..6],
        [
            "gantry",
            "node",
            "validator",
            "--component",
            "driver",
            "--wait"
        ]
    );
    for (i, what) in ["driver", "toolkit", "cuda", "plugin"].iter().enumerate() {
        let c = &pod(ds(&out, "nvidia-operator-validator"))["initContainers"][i];
        assert_eq!(strings(&c["command"])[4], *what);
    }
    // The plugin check asks for the validator's per-check env.
    let plugin = container(
        ds(&out, "nvidia-operator-validator"),
        "initContainers",
        "plugin-validation",
    );
    assert_eq!(env_of(plugin, "WITH_WORKLOAD").as_deref(), Some("false"));
}
#[test]
fn agents_run_gantry_node_subcommands_on_gantrys_image() {
    let out = render_helm();
    for (ds_name, ctr, prefix) in [
        (
            "nvidia-container-toolkit-daemonset",
            "nvidia-container-toolkit-ctr",
            &["gantry", "node", "toolkit"][..],
        ),
        (
            "nvidia-operator-validator",
            "nvidia-operator-validator",
            &["gantry", "node", "validator"][..],
        ),
        (
            "nvidia-device-plugin-daemonset",
            "nvidia-device-plugin",
            &["gantry", "node", "device-plugin"][..],
        ),
        (
            "gpu-feature-discovery",
            "gpu-feature-discovery",
            &["gantry", "node", "discovery"][..],
        ),
        (
            "nvidia-dcgm-exporter",
            "nvidia-dcgm-exporter",
            &["gantry", "node", "exporter", "-a", ":9400"][..],
        ),
        (
            "nvidia-mig-manager",
            "nvidia-mig-manager",
            &[
                "gantry",
                "node",
                "mig-manager",
                "--config-map",
                "gpu-operator/default-mig-parted-config",
            ][..],
        ),
    ] {
        let c = container(ds(&out, ds_name), "containers", ctr);
        assert_eq!(c["image"], IMAGE, "{ds_name}");
        let cmd = strings(&c["command"]);
        assert_eq!(&cmd[..prefix.len()], prefix, "{ds_name}");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    }
    let tk = strings(
        &container(
            ds(&out, "nvidia-container-toolkit-daemonset"),
            "containers",
            "nvidia-container-toolkit-ctr",
        )["command"],
    );
    for w in [
        "--host-root",
        "/host",
        "--runtime",
        "containerd",
        "--enable-cdi",
        "--watch",
        "30",
    ] {
        assert!(tk.iter().any(|x| x == w), "{w} in {tk:?}");
    }
    // CONTAINERD_CONFIG from the chart becomes --config.
    let at = tk.iter().position(|x| x == "--config").expect("--config");
    assert_eq!(tk[at + 1], "/etc/containerd/config.toml");
    // The validator's own idle container has no --component.
    let v = strings(
        &container(
            ds(&out, "nvidia-operator-validator"),
            "containers",
            "nvidia-operator-validator",
        )["command"],
    );
    assert_eq!(v, ["gantry", "node", "validator"]);
    // Upstream-image operands keep NVIDIA's image.
    let drv = container(
        ds(&out, "nvidia-driver-daemonset"),
        "containers",
        "nvidia-driver-ctr",
    );
    assert_eq!(drv["image"], "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04");
    let mgr = container(
        ds(&out, "nvidia-driver-daemonset"),
        "initContainers",
        "k8s-driver-manager",
    );
    assert_eq!(
        mgr["image"],
        "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0"
    );
    assert_eq!(
        env_of(mgr, "ENABLE_GPU_POD_EVICTION").as_deref(),
        Some("true")
    );
    assert_eq!(env_of(mgr, "DRAIN_TIMEOUT_SECONDS").as_deref(), Some("0s"));
}
#[test]
fn least_privilege_rbac_per_agent() {
    let out = render_helm();
    let rules = |s: State, kind: &str| -> Vec<String> {
        state(&out, s)
            .objects
            .iter()
            .filter(|o| o["kind"] == kind)
            .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                format!(
                    "{}:{}",
                    strings(&r["resources"]).join(","),
                    strings(&r["verbs"]).join(",")
                )
            })
            .collect()
    };
    assert_eq!(rules(State::DevicePlugin, "Role"), ["configmaps:get"]);
    assert_eq!(
        rules(State::DevicePlugin, "ClusterRole"),
        ["nodes:get", "events:create"]
    );
    assert_eq!(rules(State::Gfd, "ClusterRole"), ["nodes:get,patch"]);
    assert_eq!(
        rules(State::MigManager, "ClusterRole"),
        [
            "nodes:get,list,watch,patch",
            "events:create",
            "pods:list,delete"
        ]
    );
    assert_eq!(
        rules(State::OperatorValidation, "Role"),
        ["pods:list,create", "daemonsets:list"]
    );
    assert!(rules(State::DcgmExporter, "ClusterRole").is_empty());
    assert!(rules(State::ContainerToolkit, "ClusterRole").is_empty());
    assert!(
        state(&out, State::DcgmExporter)
            .objects
            .iter()
            .any(|o| o["kind"] == "ServiceAccount")
    );
}
#[test]
fn service_monitors_only_with_the_crd() {
    let out = render_helm();
    assert!(!all(&out).iter().any(|o| o["kind"] == "ServiceMonitor"));
    let mut f = facts(ubuntu_nodes());
    f.has_service_monitor_crd = true;
    let out = render(&policy(HELM), &f).unwrap();
    let exporter = state(&out, State::DcgmExporter);
    let sm = exporter
        .objects
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor")
        .expect("exporter SM");
    assert_eq!(sm["spec"]["endpoints"][0]["interval"], "15s");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "gpu-metrics");
    let svc = exporter
        .objects
        .iter()
        .find(|o| o["kind"] == "Service")
        .expect("service");
    assert_eq!(svc["spec"]["ports"][0]["port"], 9400);
    assert_eq!(
        svc["metadata"]["labels"]["app"],
        sm["spec"]["selector"]["matchLabels"]["app"]
    );
    assert!(
        state(&out, State::OperatorMetrics)
            .objects
            .iter()
            .any(|o| o["kind"] == "ServiceMonitor")
    );
    // Apply order inside a state: ServiceAccount first, DaemonSet after Service/ServiceMonitor.
    let kinds: Vec<&str> = exporter
        .objects
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["ServiceAccount", "Service", "ServiceMonitor", "DaemonSet"]
    );
}
#[test]
fn daemonset_common_settings() {
    let out = render_helm();
    let dp = ds(&out, "nvidia-device-plugin-daemonset");
    assert_eq!(
        dp["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    assert_eq!(pod(dp)["priorityClassName"], "system-node-critical");
    assert_eq!(pod(dp)["tolerations"][0]["key"], "nvidia.com/gpu");
    assert_eq!(pod(dp)["runtimeClassName"], "nvidia");
    let mut p = policy(HELM);
    p.spec.daemonsets.update_strategy = Some(UpdateStrategy::OnDelete);
    p.spec.daemonsets.annotations = Some([("team".to_string(), "gpu".to_string())].into());
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    for d in daemonsets(&out) {
        assert_eq!(d["spec"]["updateStrategy"]["type"], "OnDelete");
        assert_eq!(
            d["spec"]["template"]["metadata"]["annotations"]["team"],
            "gpu"
        );
    }
    if let Some(r) = p.spec.daemonsets.rolling_update.as_mut() {
        r.max_unavailable = Some("25%".into());
    }
    p.spec.daemonsets.update_strategy = None;
    let out = render(&p, &facts(ubuntu_nodes())).unwrap();
    let dp = ds(&out, "nvidia-device-plugin-daemonset");
    assert_eq!(
        dp["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        "25%"
    );
    // The driver ignores the common strategy: the upgrade controller owns its restarts.
    assert_eq!(
        ds(&out, "nvidia-driver-daemonset")["spec"]["updateStrategy"]["type"],
        "OnDelete"
    );
}
#[test]
fn operator_metrics_and_alerts() {
    let mut f = facts(Vec::new());
    let out = render(&policy(HELM), &f).unwrap();
    let m = state(&out, State::OperatorMetrics);
    assert!(m.enabled);
    let kinds: Vec<&Value> = m.objects.iter().map(|o| &o["kind"]).collect();
    assert_eq!(kinds, ["Service"]);
    assert_eq!(m.objects[0]["spec"]["ports"][0]["port"], 8080);
    f.has_prometheus_rule_crd = true;
    f.operator_labels
        .insert("app".into(), "gantry-operator".into());
    let out = render(&policy(HELM), &f).unwrap();
    let m = state(&out, State::OperatorMetrics);
    assert_eq!(
        m.objects[0]["spec"]["selector"],
        serde_json::json!({ "app": "gantry-operator" })
    );
    let rule = m
        .objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("rule");
    let file: Value = serde_yaml::from_str(prereq::ALERTS).unwrap();
    assert_eq!(rule["spec"]["groups"], file["groups"]);
    assert!(
        rule["spec"]["groups"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
    );
}
