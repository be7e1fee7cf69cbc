//! `helm template` with the default values: the components, and RBAC that is least
//! privilege and says why for every rule.

use super::*;

#[test]
fn every_rbac_rule_says_why() -> Result {
    // Least privilege is reviewable only when each rule carries its reason.
    for file in ["operator-rbac.yaml", "scheduler-rbac.yaml"] {
        let text = std::fs::read_to_string(chart().join("templates").join(file))?;
        let lines: Vec<&str> = text.lines().collect();
        let mut rules = 0;
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("- apiGroups:") {
                rules += 1;
                let prev = lines[..i]
                    .iter()
                    .rev()
                    .map(|l| l.trim_start())
                    .find(|l| !l.is_empty())
                    .unwrap_or_default();
                assert!(
                    prev.starts_with('#'),
                    "{file}:{}: rule without a comment above it",
                    i + 1
                );
            }
        }
        assert!(rules > 5, "{file}: only {rules} rules found");
    }
    Ok(())
}

#[test]
fn default_render_has_the_components_and_least_privilege_rbac() -> Result {
    let helm = helm_or_skip!();
    let docs = render(helm, "gantry", "gantry", &[])?;
    let mut kinds: Vec<(String, String)> = docs.iter().map(kind_name).collect();
    kinds.sort();
    let want: Vec<(String, String)> = [
        ("ClusterPolicy", "cluster-policy"),
        ("ClusterRole", "gantry-operator"),
        ("ClusterRole", "gantry-scheduler"),
        // The CRD upgrade hook's objects (helm.sh/hook: pre-upgrade; template renders hooks).
        ("ClusterRole", "gantry-upgrade-crd"),
        ("ClusterRoleBinding", "gantry-operator"),
        ("ClusterRoleBinding", "gantry-scheduler"),
        ("ClusterRoleBinding", "gantry-upgrade-crd"),
        ("ConfigMap", "gantry-exporter-metrics"),
        ("Deployment", "gantry-admission"),
        ("Deployment", "gantry-operator"),
        ("Deployment", "gantry-scheduler"),
        ("Job", "gantry-upgrade-crd"),
        ("MutatingWebhookConfiguration", "gantry-admission"),
        ("Namespace", "gantry-reservation"),
        ("PriorityClass", "build"),
        ("PriorityClass", "build-preemptible"),
        ("PriorityClass", "inference"),
        ("PriorityClass", "train"),
        ("Queue", "default-parent-queue"),
        ("Queue", "default-queue"),
        ("Role", "gantry-operator"),
        ("Role", "gantry-scheduler"),
        ("Role", "gantry-scheduler-reservation"),
        ("Role", "gantry-scheduler-reservation-pod"),
        ("RoleBinding", "gantry-operator"),
        ("RoleBinding", "gantry-scheduler"),
        ("RoleBinding", "gantry-scheduler-reservation"),
        ("RoleBinding", "gantry-scheduler-reservation-pod"),
        ("Secret", "gantry-admission-tls"),
        ("Service", "gantry-admission"),
        ("Service", "gantry-scheduler-metrics"),
        ("ServiceAccount", "gantry-operator"),
        ("ServiceAccount", "gantry-scheduler"),
        ("ServiceAccount", "gantry-scheduler-reservation"),
        ("ServiceAccount", "gantry-upgrade-crd"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    assert_eq!(kinds, want);

    // Namespaced objects land in the release namespace, except the reservation namespace's.
    for d in &docs {
        let (kind, name) = kind_name(d);
        let ns = d["metadata"]["namespace"].as_str();
        match kind.as_str() {
            "ClusterPolicy"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "Namespace"
            | "Queue"
            | "PriorityClass"
            | "MutatingWebhookConfiguration" => {
                assert_eq!(ns, None, "{kind} {name} is cluster-scoped")
            }
            _ if name.contains("-reservation") => assert_eq!(ns, Some("gantry-reservation")),
            _ => assert_eq!(ns, Some("gantry"), "{kind} {name}"),
        }
    }

    // The operator runs `gantry operator` as CONTRACTS.md says, with its namespace and image.
    let op = get(&docs, "Deployment", "gantry-operator")?;
    let c = &op["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "ghcr.io/gantry-dev/gantry:0.1.0");
    assert_eq!(c["command"], serde_json::json!(["gantry"]));
    assert_eq!(
        c["args"],
        serde_json::json!(["operator", "--metrics-address=0.0.0.0:8080"])
    );
    let env: BTreeMap<&str, &Value> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?, e)))
        .collect();
    assert_eq!(
        env["OPERATOR_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        env["GANTRY_IMAGE"]["value"],
        "ghcr.io/gantry-dev/gantry:0.1.0"
    );
    assert_eq!(
        op["spec"]["template"]["spec"]["serviceAccountName"],
        "gantry-operator"
    );

    let sched = get(&docs, "Deployment", "gantry-scheduler")?;
    let c = &sched["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["args"],
        serde_json::json!([
            "scheduler",
            "--scheduler-name=kai-scheduler",
            "--reservation-namespace=gantry-reservation",
            "--reservation-service-account=gantry-scheduler-reservation",
            "--install-crds=false",
            "--create-namespaces=false",
            "--metrics-address=0.0.0.0:8081"
        ])
    );
    assert_eq!(
        sched["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"],
        "scheduler"
    );

    // The ClusterPolicy and the queues pass Gantry's own validation (CRD schema + semantics).
    for (kind, name) in [
        ("ClusterPolicy", "cluster-policy"),
        ("Queue", "default-queue"),
        ("Queue", "default-parent-queue"),
    ] {
        let problems = gantry_api::validate::validate_value(get(&docs, kind, name)?);
        assert!(problems.is_empty(), "{kind} {name}: {problems:?}");
    }
    let cp = &get(&docs, "ClusterPolicy", "cluster-policy")?["spec"];
    assert_eq!(cp["mig"]["strategy"], "single");
    assert_eq!(cp["operator"]["runtimeClass"], "nvidia");
    assert_eq!(
        cp["dcgmExporter"]["config"]["name"],
        "gantry-exporter-metrics"
    );
    assert_eq!(cp["nodeStatusExporter"]["enabled"], true);
    assert_eq!(cp["driver"]["version"], "595.91.07");
    assert_eq!(
        cp["daemonsets"]["priorityClassName"],
        "system-node-critical"
    );
    assert!(cp["devicePlugin"].get("config").is_none());
    let csv = get(&docs, "ConfigMap", "gantry-exporter-metrics")?["data"]["dcgm-metrics.csv"]
        .as_str()
        .unwrap_or_default();
    let set = gantry_node::exporter::parse_csv(csv).map_err(anyhow::Error::msg)?;
    assert!(set.unsupported.is_empty(), "{:?}", set.unsupported);

    // RBAC: exactly these grants, nothing broader (no wildcards, no secrets).
    let operator_cluster = expand(&[
        ("nvidia.com/clusterpolicies", READ),
        (
            "nvidia.com/clusterpolicies/status",
            &["get", "update", "patch"],
        ),
        ("nvidia.com/clusterpolicies/finalizers", &["update"]),
        ("nvidia.com/nvidiadrivers", READ),
        (
            "nvidia.com/nvidiadrivers/status",
            &["get", "update", "patch"],
        ),
        ("nvidia.com/nvidiadrivers/finalizers", &["update"]),
        (
            "nvidia.com/migclusterpolicies",
            &["get", "list", "watch", "patch"],
        ),
        (
            "nvidia.com/migclusterpolicies/status",
            &["get", "update", "patch"],
        ),
        ("/nodes", &["get", "list", "watch", "patch", "update"]),
        ("/pods", READ),
        ("/pods/eviction", &["create"]),
        ("/events", &["create"]),
        ("rbac.authorization.k8s.io/clusterroles", CRUD),
        (
            "rbac.authorization.k8s.io/clusterroles",
            &["bind", "escalate"],
        ),
        ("rbac.authorization.k8s.io/clusterrolebindings", CRUD),
        ("node.k8s.io/runtimeclasses", CRUD),
        ("/namespaces", &["get", "create", "patch"]),
        ("apiextensions.k8s.io/customresourcedefinitions", &["get"]),
        ("apps/daemonsets", READ),
    ]);
    assert_eq!(
        grants(get(&docs, "ClusterRole", "gantry-operator")?),
        operator_cluster
    );
    let lease = &["get", "create", "update"][..];
    let operator_ns = expand(&[
        ("apps/daemonsets", CRUD),
        ("apps/controllerrevisions", &["list"]),
        ("/configmaps", CRUD),
        ("/services", CRUD),
        ("/serviceaccounts", CRUD),
        ("rbac.authorization.k8s.io/roles", CRUD),
        ("rbac.authorization.k8s.io/rolebindings", CRUD),
        ("/pods", &["create", "delete"]),
        ("monitoring.coreos.com/servicemonitors", CRUD),
        ("monitoring.coreos.com/prometheusrules", CRUD),
        ("coordination.k8s.io/leases", lease),
    ]);
    assert_eq!(grants(get(&docs, "Role", "gantry-operator")?), operator_ns);
    let owner = &["get"][..];
    let scheduler_cluster = expand(&[
        ("/pods", &["get", "list", "watch", "patch", "delete"]),
        ("/pods/binding", &["create"]),
        ("/nodes", &["list", "watch"]),
        ("/configmaps", &["create", "patch"]),
        ("scheduling.run.ai/queues", &["list", "watch", "create"]),
        ("scheduling.run.ai/queues/status", &["patch"]),
        (
            "scheduling.run.ai/podgroups",
            &["get", "list", "watch", "create", "patch"],
        ),
        ("scheduling.run.ai/podgroups/status", &["patch"]),
        ("kai.scheduler/topologies", &["list", "watch"]),
        (
            "scheduling.k8s.io/priorityclasses",
            &["list", "watch", "create"],
        ),
        ("/events", &["create"]),
        ("apps/statefulsets", owner),
        ("batch/jobs", owner),
        ("batch/cronjobs", owner),
        ("kubeflow.org/pytorchjobs", owner),
        ("kubeflow.org/mpijobs", owner),
        ("kubeflow.org/tfjobs", owner),
        ("kubeflow.org/xgboostjobs", owner),
        ("kubeflow.org/jaxjobs", owner),
        ("jobset.x-k8s.io/jobsets", owner),
    ]);
    assert_eq!(
        grants(get(&docs, "ClusterRole", "gantry-scheduler")?),
        scheduler_cluster
    );
    assert_eq!(
        grants(get(&docs, "Role", "gantry-scheduler")?),
        expand(&[
            ("coordination.k8s.io/leases", lease),
            // Time-based fair share's usage history (ConfigMap gantry-scheduler-usage).
            ("/configmaps", &["get", "patch", "create"]),
        ])
    );
    assert_eq!(
        grants(get(&docs, "Role", "gantry-scheduler-reservation")?),
        expand(&[("/pods", &["create"])])
    );
    // The reservation pods' own ServiceAccount may read and annotate pods there, nothing else.
    assert_eq!(
        grants(get(&docs, "Role", "gantry-scheduler-reservation-pod")?),
        expand(&[("/pods", &["get", "patch"])])
    );
    let b = get(&docs, "RoleBinding", "gantry-scheduler-reservation-pod")?;
    assert_eq!(b["subjects"][0]["name"], "gantry-scheduler-reservation");
    assert_eq!(b["subjects"][0]["namespace"], "gantry-reservation");
    for d in &docs {
        if d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding" {
            let (_, name) = kind_name(d);
            if name.ends_with("-reservation-pod") {
                continue;
            }
            assert_eq!(d["subjects"][0]["namespace"], "gantry", "{name}");
            assert!(
                d["roleRef"]["name"].as_str() == Some(name.as_str()),
                "{name}"
            );
        }
    }
    Ok(())
}
