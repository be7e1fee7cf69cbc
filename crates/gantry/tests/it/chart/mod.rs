//! The Helm chart `deploy/helm/gantry`: its CRDs are the generated ones, `helm lint` passes,
//! `helm template` with the default and other values renders the objects and RBAC the values
//! ask for (the ClusterPolicy and Queues pass Gantry's own validation), and the chart installs
//! on the embedded cluster and uninstalls again.
//!
//! helm comes from `GANTRY_HELM`, else the cache `scripts/tools.sh` fills (it is run when the
//! cache is empty). Tests that need helm skip with the reason only when it cannot be had.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

type Result<T = ()> = anyhow::Result<T>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn chart() -> PathBuf {
    repo().join("deploy/helm/gantry")
}

/// helm's path, or why there is none.
pub(crate) fn helm() -> std::result::Result<&'static Path, &'static str> {
    static HELM: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let found = HELM.get_or_init(|| {
        if let Some(p) = std::env::var_os("GANTRY_HELM").filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(p)
            } else {
                Err(format!("GANTRY_HELM={} is not a file", p.display()))
            };
        }
        let out = Command::new("bash")
            .arg(repo().join("scripts/tools.sh"))
            .output()
            .map_err(|e| format!("cannot run scripts/tools.sh: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let path = stdout.lines().last().unwrap_or_default().trim();
        if out.status.success() && Path::new(path).is_file() {
            Ok(PathBuf::from(path))
        } else {
            Err(format!(
                "scripts/tools.sh could not provide helm: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    });
    match found {
        Ok(p) => Ok(p.as_path()),
        Err(why) => Err(why.as_str()),
    }
}

macro_rules! helm_or_skip {
    () => {
        match helm() {
            Ok(p) => p,
            Err(why) => {
                eprintln!("skipping: {why}");
                return Ok(());
            }
        }
    };
}

/// Runs helm with a private HOME (no user repositories or plugins); fails with its stderr.
pub(crate) fn run_helm(helm: &Path, args: &[&str], env: &[(&str, &Path)]) -> Result<String> {
    let home = tempfile::tempdir()?;
    let mut cmd = Command::new(helm);
    cmd.args(args)
        .env("HOME", home.path())
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    gantry_testkit::stdout_of("helm", args, &cmd.output()?)
}

/// `helm template <release> <chart> -n <ns> <extra...>` parsed into its documents.
pub(crate) fn render(helm: &Path, release: &str, ns: &str, extra: &[&str]) -> Result<Vec<Value>> {
    let chart = chart();
    let chart = chart.to_string_lossy();
    let mut args = vec!["template", release, chart.as_ref(), "-n", ns];
    args.extend_from_slice(extra);
    let text = run_helm(helm, &args, &[])?;
    let (docs, problem) = gantry_api::validate::parse_documents(&text);
    anyhow::ensure!(problem.is_none(), "rendered YAML: {problem:?}\n{text}");
    Ok(docs)
}

fn kind_name(d: &Value) -> (String, String) {
    (
        d["kind"].as_str().unwrap_or_default().to_string(),
        d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

pub(crate) fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| kind_name(d) == (kind.to_string(), name.to_string()))
}

pub(crate) fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    find(docs, kind, name).ok_or_else(|| anyhow::anyhow!("no {kind} {name} rendered"))
}

/// A Role's or ClusterRole's rules as (group/resource, verb) pairs.
fn grants(role: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for rule in role["rules"].as_array().into_iter().flatten() {
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                for v in strs(&rule["verbs"]) {
                    out.insert((format!("{g}/{r}"), v));
                }
            }
        }
    }
    out
}

fn expand(list: &[(&str, &[&str])]) -> BTreeSet<(String, String)> {
    list.iter()
        .flat_map(|(res, verbs)| verbs.iter().map(move |v| (res.to_string(), v.to_string())))
        .collect()
}

const CRUD: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const READ: &[&str] = &["get", "list", "watch"];

#[test]
fn chart_crds_are_the_generated_crds() -> Result {
    let generated: BTreeMap<String, String> = gantry_api::crds::crd_files()?.into_iter().collect();
    for dir in [chart().join("crds"), repo().join("deploy/crds")] {
        let mut on_disk = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            on_disk.insert(name, std::fs::read_to_string(&path)?);
        }
        assert_eq!(
            on_disk.keys().collect::<Vec<_>>(),
            generated.keys().collect::<Vec<_>>(),
            "{}: CRD files differ from `gantry crds`",
            dir.display()
        );
        for (name, body) in &generated {
            assert!(
                on_disk.get(name) == Some(body),
                "{}/{name} is stale: run `gantry crds --output-dir {}`",
                dir.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

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
fn helm_lint_passes() -> Result {
    let helm = helm_or_skip!();
    let chart = chart();
    let out = run_helm(helm, &["lint", "--strict", &chart.to_string_lossy()], &[])?;
    assert!(out.contains("0 chart(s) failed"), "{out}");
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

/// kubectl against the embedded cluster; fails with its stderr.
fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> Result<String> {
    gantry_testkit::Kubectl {
        kubeconfig,
        dir: home,
    }
    .run_blocking(args)
}

fn names_of(list_json: &str) -> Result<BTreeSet<String>> {
    let v: Value = serde_json::from_str(list_json)?;
    Ok(v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_and_uninstalls_on_the_embedded_cluster() -> Result {
    let helm = helm_or_skip!().to_path_buf();
    if !gantry_testkit::Kubectl::installed() {
        eprintln!("skipping: {} is not installed", gantry_testkit::KUBECTL);
        return Ok(());
    }
    let env = gantry_testkit::Cluster::builder().start().await?;
    let kc = env.kubeconfig_path().to_path_buf();
    let home_path = env.dir().to_path_buf();
    // helm and kubectl block; the API server needs this runtime meanwhile.
    let result = tokio::task::spawn_blocking(move || -> Result {
        let chart = chart();
        let chart = chart.to_string_lossy();
        let kcs = kc.to_string_lossy();
        let out = run_helm(
            &helm,
            &[
                "install",
                "gantry",
                chart.as_ref(),
                "-n",
                "gantry",
                "--create-namespace",
                "--kubeconfig",
                kcs.as_ref(),
                // An upstream version pin that has no effect: the notes say so by name.
                "--set",
                "devicePlugin.version=v0.17.0",
            ],
            &[],
        )?;
        assert!(out.contains("STATUS: deployed"), "{out}");
        assert!(
            out.contains("WARNING: these values are accepted for compatibility")
                && out
                    .contains("  - devicePlugin.version=v0.17.0 (Gantry runs its own devicePlugin"),
            "{out}"
        );
        // nfd.enabled (upstream's default): the notes say NFD's API is missing and how to
        // install it, since this chart does not ship it as upstream's does.
        assert!(
            out.contains(
                "Node Feature Discovery: nfd.enabled=true, but the cluster does not serve"
            ) && out.contains("oci://registry.k8s.io/nfd/charts/node-feature-discovery"),
            "{out}"
        );
        let k = |args: &[&str]| kubectl(&kc, &home_path, args);

        let deployments = names_of(&k(&["-n", "gantry", "get", "deployments", "-o", "json"])?)?;
        assert_eq!(
            deployments,
            BTreeSet::from([
                "gantry-admission".to_string(),
                "gantry-operator".to_string(),
                "gantry-scheduler".to_string()
            ])
        );
        let cp_yaml = k(&["get", "clusterpolicy", "cluster-policy", "-o", "json"])?;
        let cp: Value = serde_json::from_str(&cp_yaml)?;
        assert_eq!(cp["spec"]["mig"]["strategy"], "single");
        assert_eq!(
            cp["metadata"]["annotations"]["meta.helm.sh/release-name"],
            "gantry"
        );
        let queues = names_of(&k(&["get", "queues", "-o", "json"])?)?;
        assert!(queues.contains("default-queue") && queues.contains("default-parent-queue"));
        for (kind, ns, name) in [
            ("clusterrole", None, "gantry-operator"),
            ("clusterrolebinding", None, "gantry-scheduler"),
            ("role", Some("gantry"), "gantry-operator"),
            (
                "role",
                Some("gantry-reservation"),
                "gantry-scheduler-reservation",
            ),
            ("serviceaccount", Some("gantry"), "gantry-scheduler"),
            ("configmap", Some("gantry"), "gantry-exporter-metrics"),
            ("namespace", None, "gantry-reservation"),
            ("crd", None, "clusterpolicies.nvidia.com"),
        ] {
            let mut args = vec!["get", kind, name, "-o", "name"];
            if let Some(ns) = ns {
                args.extend(["-n", ns]);
            }
            k(&args)?;
        }
        let list = run_helm(
            &helm,
            &[
                "list",
                "-n",
                "gantry",
                "--kubeconfig",
                kcs.as_ref(),
                "-o",
                "json",
            ],
            &[],
        )?;
        let releases: Value = serde_json::from_str(&list)?;
        assert_eq!(releases[0]["name"], "gantry");
        assert_eq!(releases[0]["status"], "deployed");

        run_helm(
            &helm,
            &[
                "uninstall",
                "gantry",
                "-n",
                "gantry",
                "--kubeconfig",
                kcs.as_ref(),
            ],
            &[],
        )?;
        let deployments = names_of(&k(&["-n", "gantry", "get", "deployments", "-o", "json"])?)?;
        assert!(deployments.is_empty(), "{deployments:?}");
        let policies = names_of(&k(&["get", "clusterpolicies", "-o", "json"])?)?;
        assert!(policies.is_empty(), "{policies:?}");
        let roles = names_of(&k(&["get", "clusterroles", "-o", "json"])?)?;
        assert!(!roles.contains("gantry-operator"), "{roles:?}");
        // Kept on purpose: the default queues (resource-policy keep) and the CRDs.
        let queues = names_of(&k(&["get", "queues", "-o", "json"])?)?;
        assert!(queues.contains("default-queue"), "{queues:?}");
        k(&["get", "crd", "queues.scheduling.run.ai", "-o", "name"])?;
        let list = run_helm(
            &helm,
            &[
                "list",
                "-n",
                "gantry",
                "--kubeconfig",
                kcs.as_ref(),
                "-o",
                "json",
            ],
            &[],
        )?;
        assert_eq!(serde_json::from_str::<Value>(&list)?, serde_json::json!([]));
        Ok(())
    })
    .await?;
    env.shutdown().await;
    result
}

/// `helm template deploy/helm/gantry | gantry validate -f -`: every document is valid or
/// skipped with a note (ServiceAccount, Role, Service …), the workloads' pod templates are
/// checked.
#[test]
fn helm_template_piped_into_gantry_validate_exits_zero() -> Result {
    use std::io::Write;
    let helm = helm_or_skip!();
    let chart = chart();
    let chart = chart.to_string_lossy();
    let text = run_helm(
        helm,
        &["template", "gantry", chart.as_ref(), "-n", "gantry"],
        &[],
    )?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["validate", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("note: document"), "{stdout}");
    assert!(stdout.contains("ServiceAccount v1 skipped"), "{stdout}");
    assert!(stdout.trim_end().ends_with("<stdin>: ok"), "{stdout}");
    Ok(())
}

/// `helm template` failing: its stderr (run_helm turns a failure into an error with it).
fn render_error(helm: &Path, extra: &[&str]) -> String {
    match render(helm, "gantry", "gantry", extra) {
        Ok(_) => String::new(),
        Err(e) => format!("{e:#}"),
    }
}

/// values.schema.json: a misspelled key is refused by name, at the top level and inside a
/// ClusterPolicy section; a wrong type too.
#[test]
fn misspelled_values_fail_with_the_schema_error() -> Result {
    let helm = helm_or_skip!();
    for (set, key, parent) in [
        ("operator.replicass=2", "replicass", "operator"),
        ("devicePlugin.verison=v1", "verison", "devicePlugin"),
        ("migManger.enabled=false", "migManger", ""),
    ] {
        let err = render_error(helm, &["--set", set]);
        assert!(
            err.contains(&format!("Additional property {key} is not allowed"))
                && err.contains("values don't meet the specifications of the schema"),
            "{set}: {err}"
        );
        if !parent.is_empty() {
            assert!(err.contains(&format!("- {parent}:")), "{set}: {err}");
        }
    }
    let err = render_error(helm, &["--set", "mig.strategy=halves"]);
    assert!(err.contains("mig.strategy"), "{err}");
    // Upstream keys Gantry accepts without acting on them pass the schema (the notes name them).
    render(
        helm,
        "gantry",
        "gantry",
        &[
            "--set",
            "operator.cleanupCRD=true",
            "--set",
            "psp.enabled=true",
            "--set",
            "node-feature-discovery.worker.config.sources.pci.deviceClassWhitelist={0300}",
        ],
    )?;
    Ok(())
}

/// The schema's ClusterPolicy sections are the CRD's: every CRD field is accepted, and the only
/// extra keys are the chart's own (config.create/data, nvidiaDriverCRD, gpuPodDeletion).
#[test]
fn values_schema_tracks_the_cluster_policy_crd() -> Result {
    fn names(s: &Value, at: &str, out: &mut BTreeSet<String>) {
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{at}.{k}");
                out.insert(p.clone());
                names(v, &p, out);
            }
        }
        if let Some(items) = s.get("items") {
            names(items, &format!("{at}[]"), out);
        }
    }
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(
        chart().join("values.schema.json"),
    )?)?;
    assert_eq!(schema["additionalProperties"], false);
    let crd = gantry_api::crds::schema_for("nvidia.com/v1", "ClusterPolicy")
        .ok_or_else(|| anyhow::anyhow!("no ClusterPolicy schema"))?;
    let sections = crd["properties"]["spec"]["properties"]
        .as_object()
        .ok_or_else(|| anyhow::anyhow!("no spec"))?;
    let chart_only: BTreeSet<String> = [
        ".devicePlugin.config.create",
        ".devicePlugin.config.data",
        ".migManager.config.create",
        ".migManager.config.data",
        ".dcgmExporter.config.create",
        ".dcgmExporter.config.data",
        ".driver.nvidiaDriverCRD",
        ".driver.nvidiaDriverCRD.enabled",
        ".driver.nvidiaDriverCRD.deployDefaultCR",
        ".driver.nvidiaDriverCRD.driverType",
        ".driver.nvidiaDriverCRD.nodeSelector",
        ".driver.upgradePolicy.gpuPodDeletion",
        ".driver.upgradePolicy.gpuPodDeletion.force",
        ".driver.upgradePolicy.gpuPodDeletion.timeoutSeconds",
        ".driver.upgradePolicy.gpuPodDeletion.deleteEmptyDir",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for (section, crd_schema) in sections {
        if section == "operator" {
            continue; // the chart's operator.* configure the Deployment, not spec.operator
        }
        let ours = &schema["properties"][section];
        assert!(ours.is_object(), "values.schema.json lacks {section}");
        let (mut want, mut have) = (BTreeSet::new(), BTreeSet::new());
        names(crd_schema, "", &mut want);
        names(ours, "", &mut have);
        let missing: Vec<_> = want.difference(&have).collect();
        let extra: Vec<_> = have
            .difference(&want)
            .filter(|k| !chart_only.contains(&format!(".{section}{k}")))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{section}: missing {missing:?}, extra {extra:?}"
        );
    }
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
