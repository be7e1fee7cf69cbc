//! A real Prometheus (Debian's, installed by scripts/test.sh) scrapes a `gantry up` cluster
//! with the scrape jobs Gantry ships (deploy/prometheus/gantry-scrape.yaml), evaluates the
//! alerts Gantry ships (deploy/helm/gantry/files/alerts.yaml) and answers the Grafana
//! dashboard's queries (deploy/grafana/gantry.json):
//! - every Gantry target is `up`: the exporter and the node status exporter of each GPU node,
//!   the operator and the scheduler;
//! - the GPU series under dcgm-exporter's names and KAI's `kai_queue_*` series are there;
//! - an XID injected with `gantry sim fault` takes `GantryGpuXidError` from pending to firing;
//! - every dashboard query returns data (the evictions panel's aside: nothing is evicted).
//!
//! What differs from a real cluster, and why:
//! - Debian builds Prometheus without Kubernetes service discovery (`kubernetes_sd_configs` is
//!   not a field there). The test stands in for it: it lists the pods through the API and writes
//!   what the `pod` role would produce (a target per container port, `podIP:port`, with the
//!   `__meta_kubernetes_*` labels) into a `file_sd_configs` file, so the shipped relabel rules
//!   pick Gantry's pods out of all the others exactly as they would on a cluster.
//! - The sim's pods have no network of their own: an exporter listens on a loopback port and
//!   publishes it as the pod annotation `sim.gantry.dev/metrics-address`. The test appends one
//!   relabel rule to each discovered job that points `__address__` there.
//! - The operator and the scheduler run as plain `gantry operator` / `gantry scheduler`
//!   processes beside `gantry up` (no pods), so their two jobs get static targets instead of
//!   pod discovery; job names and everything else are the shipped file's.
//! - The rule file is the shipped one with only `GantryGpuXidError`'s `for:` shortened from
//!   1m to 10s, and Prometheus scrapes and evaluates every second.
//!
//! Everything listens on 127.0.0.1 only.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gantry_testkit::{Look, eventually_secs};
use serde_json::Value;
use serde_yaml::Value as Yaml;

type Result<T = ()> = anyhow::Result<T>;

const NODE: &str = "h100-80gb-0";
/// The alert the test drives, and its `for:` in the test's copy of the rules.
const XID_ALERT: &str = "GantryGpuXidError";
const XID_FOR: &str = "10s";
/// The one dashboard series that stays empty here: nothing gets evicted.
const EVICTIONS: &str = "gantry_scheduler_evictions_total";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn gantry() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gantry"));
    c.env("GANTRY_LOG", "warn");
    c
}

/// Processes the test started; each gets SIGTERM, then SIGKILL, when the test ends.
struct Procs(Vec<(String, Child)>, PathBuf);

impl Procs {
    fn spawn(&mut self, name: &str, cmd: &mut Command) -> Result {
        let log = std::fs::File::create(self.1.join(format!("{name}.log")))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {name}: {e}"))?;
        self.0.push((name.to_string(), child));
        Ok(())
    }

    /// Every log, for a failure message.
    fn logs(&self) -> String {
        self.0
            .iter()
            .map(|(name, _)| {
                let text =
                    std::fs::read_to_string(self.1.join(format!("{name}.log"))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name} ---\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        // Reverse order: Prometheus and the components before the cluster they talk to.
        for (_, c) in self.0.iter_mut().rev() {
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            for _ in 0..100 {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn installed(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A GET on 127.0.0.1:`port`; the body of a 200 as JSON.
fn get_json(port: u16, path_and_query: &str) -> Result<Value> {
    Ok(serde_json::from_str(&get(port, path_and_query)?)?)
}

/// A GET on 127.0.0.1:`port`; the body of a 200.
fn get(port: u16, path_and_query: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP header end in {text:?}"))?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "GET {path_and_query}: {head}\n{body}"
    );
    Ok(body.to_string())
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query's result vector.
fn query(port: u16, promql: &str) -> Result<Vec<Value>> {
    let v = get_json(port, &format!("/api/v1/query?query={}", encode(promql)))?;
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The shipped scrape jobs, pointed at the sim as the module doc says.
fn scrape_configs(pod_targets: &Path, statics: &[(&str, u16)]) -> Result<Yaml> {
    let path = repo().join("deploy/prometheus/gantry-scrape.yaml");
    let text = std::fs::read_to_string(&path)?;
    let mut doc: Yaml = serde_yaml::from_str(&text)?;
    let jobs = doc["scrape_configs"]
        .as_sequence_mut()
        .ok_or_else(|| anyhow::anyhow!("{}: no scrape_configs list", path.display()))?;
    for job in jobs.iter_mut() {
        let name = job["job_name"].as_str().unwrap_or_default().to_string();
        let map = job
            .as_mapping_mut()
            .ok_or_else(|| anyhow::anyhow!("job {name} is not a mapping"))?;
        if let Some((_, port)) = statics.iter().find(|(n, _)| *n == name) {
            map.remove("kubernetes_sd_configs");
            map.remove("relabel_configs");
            map.insert(
                "static_configs".into(),
                serde_yaml::from_str(&format!("[{{targets: ['127.0.0.1:{port}']}}]"))?,
            );
            continue;
        }
        let roles: Vec<&str> = map
            .get("kubernetes_sd_configs")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(|sd| sd["role"].as_str())
            .collect();
        anyhow::ensure!(
            roles == ["pod"],
            "job {name}: pod discovery expected, found {roles:?}"
        );
        map.remove("kubernetes_sd_configs");
        map.insert(
            "file_sd_configs".into(),
            serde_yaml::from_str(&format!("[{{files: ['{}']}}]", pod_targets.display()))?,
        );
        let relabel = map
            .get_mut("relabel_configs")
            .and_then(Yaml::as_sequence_mut)
            .ok_or_else(|| anyhow::anyhow!("job {name} has no relabel_configs"))?;
        relabel.push(serde_yaml::from_str(
            "{source_labels: [__meta_kubernetes_pod_annotation_sim_gantry_dev_metrics_address], \
             regex: '(.+)', target_label: __address__}",
        )?);
    }
    Ok(doc["scrape_configs"].clone())
}

/// Prometheus' Kubernetes `pod` role, from a pod list: one target per container port of each
/// running pod, with the meta labels that role sets (label and annotation names sanitized).
fn pod_role_targets(pods: &Value) -> Value {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    let mut out = Vec::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let (meta, status) = (&pod["metadata"], &pod["status"]);
        let ip = status["podIP"].as_str().unwrap_or_default();
        if status["phase"] != "Running" || ip.is_empty() {
            continue;
        }
        let mut common = serde_json::Map::new();
        let mut put = |k: String, v: &Value| {
            common.insert(k, Value::from(v.as_str().unwrap_or_default()));
        };
        put("__meta_kubernetes_namespace".into(), &meta["namespace"]);
        put("__meta_kubernetes_pod_name".into(), &meta["name"]);
        put("__meta_kubernetes_pod_uid".into(), &meta["uid"]);
        put("__meta_kubernetes_pod_ip".into(), &status["podIP"]);
        put("__meta_kubernetes_pod_host_ip".into(), &status["hostIP"]);
        put("__meta_kubernetes_pod_phase".into(), &status["phase"]);
        put(
            "__meta_kubernetes_pod_node_name".into(),
            &pod["spec"]["nodeName"],
        );
        for (kind, map) in [
            ("label", &meta["labels"]),
            ("annotation", &meta["annotations"]),
        ] {
            for (k, v) in map.as_object().into_iter().flatten() {
                put(format!("__meta_kubernetes_pod_{kind}_{}", clean(k)), v);
                put(
                    format!("__meta_kubernetes_pod_{kind}present_{}", clean(k)),
                    &"true".into(),
                );
            }
        }
        for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
            for port in c["ports"].as_array().into_iter().flatten() {
                let number = port["containerPort"].as_u64().unwrap_or_default();
                let mut labels = common.clone();
                labels.insert(
                    "__meta_kubernetes_pod_container_name".into(),
                    c["name"].clone(),
                );
                labels.insert(
                    "__meta_kubernetes_pod_container_port_name".into(),
                    Value::from(port["name"].as_str().unwrap_or_default()),
                );
                labels.insert(
                    "__meta_kubernetes_pod_container_port_number".into(),
                    Value::from(number.to_string()),
                );
                out.push(serde_json::json!({
                    "targets": [format!("{ip}:{number}")],
                    "labels": labels,
                }));
            }
        }
    }
    Value::Array(out)
}

/// The shipped rules with only the driven alert's `for:` shortened.
fn test_rules() -> Result<String> {
    let path = repo().join("deploy/helm/gantry/files/alerts.yaml");
    let mut doc: Yaml = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    let mut found = 0;
    for group in doc["groups"].as_sequence_mut().into_iter().flatten() {
        for rule in group["rules"].as_sequence_mut().into_iter().flatten() {
            if rule["alert"].as_str() == Some(XID_ALERT) {
                rule["for"] = XID_FOR.into();
                found += 1;
            }
        }
    }
    anyhow::ensure!(
        found == 1,
        "{}: {XID_ALERT} found {found} times",
        path.display()
    );
    Ok(serde_yaml::to_string(&doc)?)
}

/// Every query target of the dashboard, with Grafana's variables filled in.
fn dashboard_queries() -> Result<Vec<(String, String)>> {
    let path = repo().join("deploy/grafana/gantry.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for p in panels {
            let title = p["title"].as_str().unwrap_or_default();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    let expr = expr
                        .replace("$node", ".*")
                        .replace("$gpu", ".*")
                        .replace("$__rate_interval", "30s");
                    out.push((title.to_string(), expr));
                }
            }
            walk(
                p["panels"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                out,
            );
        }
    }
    let mut out = Vec::new();
    walk(
        d["panels"].as_array().map(Vec::as_slice).unwrap_or(&[]),
        &mut out,
    );
    anyhow::ensure!(out.len() >= 10, "{}: too few queries", path.display());
    Ok(out)
}

/// The example ClusterPolicy (upstream's Helm defaults) with the node status exporter on, as
/// Gantry's chart sets it (`nodeStatusExporter.enabled`): the device plugin alerts read it.
/// (A text edit: re-serializing would unquote values such as `"on"`, which kubectl's YAML 1.1
/// then reads as booleans.)
fn cluster_policy() -> Result<String> {
    let path = repo().join("deploy/examples/clusterpolicy.yaml");
    let text = std::fs::read_to_string(&path)?;
    let off = "\n  nodeStatusExporter:\n    enabled: false\n";
    anyhow::ensure!(text.contains(off), "{}: no `{off}`", path.display());
    Ok(text.replace(off, "\n  nodeStatusExporter:\n    enabled: true\n"))
}

/// A queue and a pod on one GPU, so the per-pod and per-queue panels have something to show.
const WORKLOAD: &str = r#"apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: prom-parent}
spec:
  resources:
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: prom-team}
spec:
  parentQueue: prom-parent
  resources:
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  namespace: default
  labels: {kai.scheduler/queue: prom-team}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: train
    image: nvcr.io/nvidia/pytorch:25.01-py3
    resources:
      limits: {nvidia.com/gpu: 1}
"#;

mod scrape;
