//! Values switch what the chart renders: the ClusterPolicy, components, monitoring, the
//! operator's environment, PSA and the CRD upgrade hook.

use super::*;

#[test]
fn cluster_policy_and_objects_follow_values() -> Result {
    let helm = helm_or_skip!();
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        r#"
mig:
  strategy: mixed
driver:
  enabled: false
toolkit:
  env:
    - name: CONTAINERD_CONFIG
      value: /var/lib/rancher/k3s/agent/etc/containerd/config.toml
devicePlugin:
  config:
    create: true
    name: time-slicing-config
    default: any
    data:
      any:
        version: v1
        sharing:
          timeSlicing:
            resources:
              - name: nvidia.com/gpu
                replicas: 4
daemonsets:
  priorityClassName: gpu-critical
operator:
  repository: registry.example.com/gpu
  image: gantry
  version: v9.9.9
  leaderElect: false
scheduler:
  schedulerName: gantry-batch
  reservationNamespace: gpu-reserve
"#,
    )?;
    let docs = render(
        helm,
        "prod",
        "gpu",
        &[
            "-f",
            &values.to_string_lossy(),
            "--set",
            "cdi.enabled=false",
        ],
    )?;
    let cp = get(&docs, "ClusterPolicy", "cluster-policy")?;
    let problems = gantry_api::validate::validate_value(cp);
    assert!(problems.is_empty(), "{problems:?}");
    let spec = &cp["spec"];
    assert_eq!(spec["mig"]["strategy"], "mixed");
    assert_eq!(spec["driver"]["enabled"], false);
    assert_eq!(spec["cdi"]["enabled"], false);
    assert_eq!(spec["daemonsets"]["priorityClassName"], "gpu-critical");
    assert_eq!(
        spec["toolkit"]["env"][0]["value"],
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    );
    assert_eq!(
        spec["devicePlugin"]["config"],
        serde_json::json!({"name": "time-slicing-config", "default": "any"})
    );
    // The chart-only keys do not leak into the ClusterPolicy.
    assert!(spec["devicePlugin"]["config"].get("create").is_none());

    // The device plugin ConfigMap the policy names, in the operator's namespace, holding a
    // config Gantry's device plugin accepts.
    let cm = get(&docs, "ConfigMap", "time-slicing-config")?;
    assert_eq!(cm["metadata"]["namespace"], "gpu");
    let any = cm["data"]["any"].as_str().unwrap_or_default();
    let cfg: serde_json::Value = serde_yaml::from_str(any)?;
    assert_eq!(cfg["sharing"]["timeSlicing"]["resources"][0]["replicas"], 4);
    let problems = gantry_api::validate::validate_value(cm);
    assert!(problems.is_empty(), "{problems:?}");

    // Release-qualified names, the image from operator.*, leader election off.
    let op = get(&docs, "Deployment", "prod-gantry-operator")?;
    let c = &op["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example.com/gpu/gantry:v9.9.9");
    assert!(
        c["args"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--leader-elect=false"))
    );
    let crb = get(&docs, "ClusterRoleBinding", "prod-gantry-operator")?;
    assert_eq!(crb["subjects"][0]["namespace"], "gpu");
    let s = get(&docs, "Deployment", "prod-gantry-scheduler")?;
    let args = &s["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[1], "--scheduler-name=gantry-batch");
    assert_eq!(args[2], "--reservation-namespace=gpu-reserve");
    assert!(find(&docs, "Namespace", "gpu-reserve").is_some());
    assert_eq!(
        get(&docs, "Role", "prod-gantry-scheduler-reservation")?["metadata"]["namespace"],
        "gpu-reserve"
    );
    Ok(())
}

#[test]
fn components_and_monitoring_switch_with_values() -> Result {
    let helm = helm_or_skip!();
    let kinds =
        |docs: &[Value]| -> BTreeSet<String> { docs.iter().map(|d| kind_name(d).0).collect() };

    // No scheduler: no scheduler objects and no queues; no ClusterPolicy when deployCR=false.
    let docs = render(
        helm,
        "gantry",
        "gantry",
        &[
            "--set",
            "scheduler.enabled=false",
            "--set",
            "clusterPolicy.deployCR=false",
        ],
    )?;
    assert!(docs.iter().all(|d| {
        let (_, n) = kind_name(d);
        !n.contains("scheduler") && !n.contains("reservation")
    }));
    let k = kinds(&docs);
    assert!(
        !k.contains("Queue") && !k.contains("PriorityClass") && !k.contains("ClusterPolicy"),
        "{k:?}"
    );

    // The scheduler's ServiceMonitor is automatic when the cluster serves the CRD; the
    // PrometheusRule (which the operator renders too) only on request, `auto` included.
    let apis = [
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
    ];
    let docs = render(helm, "gantry", "gantry", &apis)?;
    assert!(find(&docs, "PrometheusRule", "gantry-alerts").is_none());
    assert!(find(&docs, "ServiceMonitor", "gantry-scheduler").is_some());
    let mut auto = apis.to_vec();
    auto.extend(["--set", "monitoring.prometheusRule=auto"]);
    let docs = render(helm, "gantry", "gantry", &auto)?;
    let rule = get(&docs, "PrometheusRule", "gantry-alerts")?;
    let file: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("files/alerts.yaml"))?)?;
    assert_eq!(
        rule["spec"], file,
        "the PrometheusRule's spec is files/alerts.yaml"
    );
    assert!(
        rule["spec"]["groups"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
    );
    let sm = get(&docs, "ServiceMonitor", "gantry-scheduler")?;
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");

    // Without the CRD: auto renders nothing, true does.
    let docs = render(
        helm,
        "gantry",
        "gantry",
        &["--set", "monitoring.prometheusRule=auto"],
    )?;
    assert!(!kinds(&docs).contains("PrometheusRule"));
    assert!(!kinds(&docs).contains("ServiceMonitor"));
    let docs = render(
        helm,
        "gantry",
        "gantry",
        &["--set", "monitoring.prometheusRule=true"],
    )?;
    assert!(find(&docs, "PrometheusRule", "gantry-alerts").is_some());

    // Exporter metric set: a user's ConfigMap name replaces the chart's.
    let docs = render(
        helm,
        "gantry",
        "gantry",
        &[
            "--set",
            "dcgmExporter.config.create=false",
            "--set",
            "dcgmExporter.config.name=my-metrics",
        ],
    )?;
    assert!(find(&docs, "ConfigMap", "gantry-exporter-metrics").is_none());
    assert_eq!(
        get(&docs, "ClusterPolicy", "cluster-policy")?["spec"]["dcgmExporter"]["config"]["name"],
        "my-metrics"
    );
    Ok(())
}

/// operator.env reaches the operator's container (and the CRD hook's), as upstream's chart does
/// for proxy setups.
#[test]
fn operator_env_reaches_the_operator_container() -> Result {
    let helm = helm_or_skip!();
    let docs = render(
        helm,
        "gantry",
        "gantry",
        &[
            "--set-json",
            r#"operator.env=[{"name":"HTTPS_PROXY","value":"http://proxy.example:3128"},{"name":"NO_PROXY","value":"10.0.0.0/8"}]"#,
        ],
    )?;
    let env_of = |kind: &str, name: &str| -> Result<Vec<(String, String)>> {
        let d = get(&docs, kind, name)?;
        let env = d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(env
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default().to_string(),
                    e["value"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect())
    };
    let operator = env_of("Deployment", "gantry-operator")?;
    for want in [
        ("HTTPS_PROXY", "http://proxy.example:3128"),
        ("NO_PROXY", "10.0.0.0/8"),
        ("GANTRY_LOG", "info"),
    ] {
        assert!(
            operator.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {operator:?}"
        );
    }
    let hook = env_of("Job", "gantry-upgrade-crd")?;
    assert!(hook.iter().any(|(k, _)| k == "HTTPS_PROXY"), "{hook:?}");
    Ok(())
}

/// psa.enabled reaches the ClusterPolicy, whose operator then labels its namespace (the
/// operator's e2e test `psa_enabled_labels_the_namespace_privileged`); the CRD upgrade hook is
/// a pre-upgrade Job running `gantry crds --apply` with its own least-privilege RBAC.
#[test]
fn psa_and_the_crd_upgrade_hook_follow_values() -> Result {
    let helm = helm_or_skip!();
    let docs = render(helm, "gantry", "gantry", &["--set", "psa.enabled=true"])?;
    let cp = get(&docs, "ClusterPolicy", "cluster-policy")?;
    assert_eq!(cp["spec"]["psa"]["enabled"], true);
    let job = get(&docs, "Job", "gantry-upgrade-crd")?;
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"],
        "pre-upgrade"
    );
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"], serde_json::json!(["crds", "--apply"]));
    assert_eq!(
        c["image"],
        format!("ghcr.io/gantry-dev/gantry:{}", env!("CARGO_PKG_VERSION"))
    );
    let role = get(&docs, "ClusterRole", "gantry-upgrade-crd")?;
    assert_eq!(
        grants(role),
        expand(&[(
            "apiextensions.k8s.io/customresourcedefinitions",
            &["get", "create", "patch"]
        )])
    );
    let off = render(
        helm,
        "gantry",
        "gantry",
        &["--set", "operator.upgradeCRD=false"],
    )?;
    assert!(find(&off, "Job", "gantry-upgrade-crd").is_none());
    Ok(())
}
