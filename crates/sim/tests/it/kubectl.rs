//! The real `kubectl` against the embedded API server, through the generated kubeconfig.

use gantry_testkit::Cluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

type Result<T = ()> = anyhow::Result<T>;

pub(crate) use gantry_testkit::{KUBECTL, Kubectl};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_round_trip() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Cluster::builder().start().await?;
    let k = Kubectl {
        kubeconfig: env.kubeconfig_path(),
        dir: env.dir(),
    };

    let cm = k.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: k1\ndata:\n  a: \"1\"\n",
    )?;
    assert!(
        k.run(&["create", "-f", &cm])
            .await?
            .contains("configmap/k1 created")
    );
    let yaml = k.run(&["get", "configmap", "k1", "-o", "yaml"]).await?;
    assert!(
        yaml.contains("name: k1") && yaml.contains("resourceVersion"),
        "{yaml}"
    );
    assert!(k.run(&["get", "configmaps"]).await?.contains("k1"));
    // Requests served, named as kube-apiserver names them.
    let metrics = k.run(&["get", "--raw", "/metrics"]).await?;
    let count = |verb: &str| {
        let key = format!(
            "apiserver_request_total{{verb=\"{verb}\",resource=\"configmaps\",subresource=\"\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(key.as_str())?.parse::<u64>().ok())
    };
    assert_eq!(count("CREATE"), Some(1), "{metrics}");
    assert!(count("GET").is_some_and(|n| n >= 1), "{metrics}");
    assert!(count("LIST").is_some_and(|n| n >= 1), "{metrics}");

    let deploy = |image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: web\n        image: {image}\n        env:\n        - name: A\n          value: \"1\"\n      - name: side\n        image: side:1\n"
        )
    };
    let d1 = k.write("d1.yaml", &deploy("web:1"))?;
    assert!(
        k.run(&["apply", "-f", &d1])
            .await?
            .contains("deployment.apps/web created")
    );
    let d2 = k.write("d2.yaml", &deploy("web:2"))?;
    assert!(
        k.run(&["apply", "-f", &d2])
            .await?
            .contains("deployment.apps/web configured")
    );
    let image = k
        .run(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[*].image}",
        ])
        .await?;
    assert_eq!(image, "web:2 side:1");
    assert!(k.run(&["apply", "-f", &d2]).await?.contains("unchanged"));

    let ssa = k.write(
        "ssa.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: k2\ndata:\n  x: \"1\"\n  y: \"2\"\n",
    )?;
    assert!(
        k.run(&["apply", "--server-side", "-f", &ssa])
            .await?
            .contains("serverside-applied")
    );
    let ssa2 = k.write(
        "ssa2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: k2\ndata:\n  x: \"1\"\n",
    )?;
    k.run(&["apply", "--server-side", "-f", &ssa2]).await?;
    assert_eq!(
        k.run(&["get", "cm", "k2", "-o", "jsonpath={.data}"])
            .await?,
        r#"{"x":"1"}"#
    );

    k.run(&["label", "configmap", "k1", "env=prod"]).await?;
    k.run(&["annotate", "configmap", "k1", "note=hello"])
        .await?;
    assert_eq!(
        k.run(&[
            "get",
            "cm",
            "-l",
            "env=prod",
            "-o",
            "jsonpath={.items[*].metadata.annotations.note}"
        ])
        .await?,
        "hello"
    );
    k.run(&[
        "patch",
        "configmap",
        "k1",
        "--type=merge",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ])
    .await?;
    k.run(&[
        "patch",
        "configmap",
        "k1",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/data/a","value":"9"}]"#,
    ])
    .await?;
    assert_eq!(
        k.run(&["get", "cm", "k1", "-o", "jsonpath={.data.a}{.data.b}"])
            .await?,
        "92"
    );

    // get -w sees an update made while it watches.
    let mut watch = k
        .cmd(&[
            "get",
            "configmap",
            "k1",
            "-w",
            "-o",
            "jsonpath={.data.a}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = watch
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await??;
    assert_eq!(first.as_deref(), Some("9"));
    k.run(&[
        "patch",
        "configmap",
        "k1",
        "--type=merge",
        "-p",
        r#"{"data":{"a":"10"}}"#,
    ])
    .await?;
    let next = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await??;
    assert_eq!(next.as_deref(), Some("10"));
    watch.kill().await?;

    // wait --for=condition while a "kubelet" reports the pod Ready.
    let pod = k.write("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n")?;
    k.run(&["create", "-f", &pod]).await?;
    let pods: Api<Pod> = Api::default_namespaced(env.client().clone());
    let waiter = k
        .cmd(&["wait", "--for=condition=Ready", "pod/p", "--timeout=60s"])
        .output();
    let marker = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status("p", &PatchParams::default(), &Patch::Merge(status))
            .await
    };
    let (out, marked) = tokio::join!(waiter, marker);
    marked?;
    let out = out?;
    assert!(
        out.status.success(),
        "wait failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));

    assert!(
        k.run(&["delete", "configmap", "k1"])
            .await?
            .contains("deleted")
    );
    assert!(k.run(&["get", "configmap", "k1"]).await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_gantry_crds_then_instances() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Cluster::builder().start().await?;
    let k = Kubectl {
        kubeconfig: env.kubeconfig_path(),
        dir: env.dir(),
    };
    let crds = k.write("crds.yaml", &gantry_api::crds::all_crds_yaml()?)?;
    let out = k.run(&["apply", "-f", &crds]).await?;
    assert!(out.contains("clusterpolicies.nvidia.com created"), "{out}");
    assert!(out.contains("queues.scheduling.run.ai created"), "{out}");
    k.run(&[
        "wait",
        "--for=condition=Established",
        "crd/clusterpolicies.nvidia.com",
        "--timeout=10s",
    ])
    .await?;
    let cp_yaml = k.write(
        "cp.yaml",
        // The CRD requires these nine spec keys, as upstream's does.
        "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata:\n  name: cluster-policy\nspec:\n  driver:\n    enabled: true\n  operator: {}\n  daemonsets: {}\n  toolkit: {}\n  devicePlugin: {}\n  dcgmExporter: {}\n  dcgm: {}\n  nodeStatusExporter: {}\n  gfd: {}\n",
    )?;
    assert!(
        k.run(&["apply", "-f", &cp_yaml])
            .await?
            .contains("clusterpolicy.nvidia.com/cluster-policy created")
    );
    let q = k.write(
        "q.yaml",
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata:\n  name: team-a\nspec:\n  resources:\n    gpu:\n      quota: 4\n      limit: -1\n      overQuotaWeight: 1\n",
    )?;
    assert!(
        k.run(&["apply", "-f", &q])
            .await?
            .contains("queue.scheduling.run.ai/team-a created")
    );
    let q2 = k.write(
        "q2.yaml",
        &std::fs::read_to_string(&q)?.replace("quota: 4", "quota: 8"),
    )?;
    assert!(k.run(&["apply", "-f", &q2]).await?.contains("configured"));
    assert_eq!(
        k.run(&[
            "get",
            "queue",
            "team-a",
            "-o",
            "jsonpath={.spec.resources.gpu.quota}"
        ])
        .await?,
        "8"
    );
    assert!(
        k.run(&["get", "clusterpolicies"])
            .await?
            .contains("cluster-policy")
    );
    Ok(())
}

/// A malformed selector is a 400 BadRequest naming the problem, as from a real API server:
/// `kubectl delete -l '!app=web'` fails and deletes nothing instead of matching everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rejects_malformed_selectors() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Cluster::builder().start().await?;
    let k = Kubectl {
        kubeconfig: env.kubeconfig_path(),
        dir: env.dir(),
    };
    for (name, app) in [("web", "web"), ("db", "db")] {
        k.run(&["create", "configmap", name, "--from-literal=a=1"])
            .await?;
        k.run(&["label", "configmap", name, &format!("app={app}")])
            .await?;
    }
    for bad in ["!app=web", "!!!(((", "app in web", "bad key=x"] {
        let out = k.cmd(&["delete", "cm", "-l", bad]).output().await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: kubectl succeeded");
        assert!(
            stderr.contains("BadRequest") || stderr.contains("unable to parse requirement"),
            "{bad}: {stderr}"
        );
    }
    let out = k
        .cmd(&["get", "cm", "--field-selector", "metadata.name"])
        .output()
        .await?;
    assert!(
        !out.status.success(),
        "a field selector without an operator"
    );
    let left = k
        .run(&["get", "cm", "-o", "jsonpath={.items[*].metadata.name}"])
        .await?;
    assert!(
        left.contains("web") && left.contains("db"),
        "nothing deleted: {left}"
    );
    // A well-formed selector still works.
    k.run(&["delete", "cm", "-l", "app notin (db)"]).await?;
    let left = k
        .run(&[
            "get",
            "cm",
            "-l",
            "app",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await?;
    assert_eq!(left, "db");
    Ok(())
}
