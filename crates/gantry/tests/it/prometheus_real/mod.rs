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

#[test]
fn prometheus_scrapes_gantry_and_fires_the_xid_alert() -> Result {
    if !installed("prometheus", &["--version"]) {
        eprintln!("skipping: no prometheus on PATH (scripts/test.sh installs Debian's)");
        return Ok(());
    }
    if !installed("kubectl", &["version", "--client"]) {
        eprintln!("skipping: no kubectl on PATH");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let kubeconfig = d.join("kubeconfig");
    let data = d.join("data");
    let mut procs = Procs(Vec::new(), d.to_path_buf());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let wait = |what: &str, secs: u64, f: &mut dyn FnMut() -> Look<Value>| {
        rt.block_on(eventually_secs(what, secs, || {
            let look = f();
            async move {
                if matches!(look, Look::Seen(_)) {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                look
            }
        }))
    };

    procs.spawn(
        "gantry-up",
        gantry()
            .args([
                "up",
                "--port",
                "0",
                "--no-ui",
                "--no-operator",
                "--no-scheduler",
            ])
            .args(["--nodes", "1xH100-80GB:2,1xcpu", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--data-dir")
            .arg(&data),
    )?;
    let kubectl = |args: &[&str], stdin: Option<&str>| -> std::result::Result<String, String> {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(&kubeconfig).args(args);
        c.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|e| e.to_string())?;
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().ok_or("no stdin")?;
            pipe.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    let up = wait("gantry up serving two nodes", 120, &mut || match kubectl(
        &["get", "nodes", "-o", "name"],
        None,
    ) {
        Ok(out) if out.lines().count() == 2 => Look::Done(Value::Null),
        Ok(out) => Look::Seen(out),
        Err(e) => Look::Seen(e),
    });
    up.map_err(|e| anyhow::anyhow!("{e}\n{}", procs.logs()))?;

    let (operator_port, scheduler_port, prom_port) = (free_port()?, free_port()?, free_port()?);
    procs.spawn(
        "operator",
        gantry()
            .args(["operator", "--leader-elect=false", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg(format!("--metrics-address=127.0.0.1:{operator_port}")),
    )?;
    procs.spawn(
        "scheduler",
        gantry()
            .args(["scheduler", "--leader-elect=false", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg(format!("--metrics-address=127.0.0.1:{scheduler_port}")),
    )?;
    let crds = gantry().arg("crds").output()?;
    anyhow::ensure!(crds.status.success(), "gantry crds failed");
    let examples = repo().join("deploy/examples");
    for (what, input) in [
        ("CRDs", String::from_utf8(crds.stdout)?),
        (
            "time-slicing config",
            std::fs::read_to_string(examples.join("demo/01-time-slicing-config.yaml"))?,
        ),
        ("ClusterPolicy", cluster_policy()?),
        ("queues and a GPU pod", WORKLOAD.to_string()),
    ] {
        // The scheduler installs the Queue CRD when it starts: retry until it is served.
        wait(
            &format!("kubectl apply ({what})"),
            120,
            &mut || match kubectl(&["apply", "-f", "-"], Some(&input)) {
                Ok(_) => Look::Done(Value::Null),
                Err(e) => Look::Seen(e),
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}\n{}", procs.logs()))?;
    }

    let config = serde_json::json!({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [d.join("alerts.yaml")],
        "scrape_configs": serde_json::to_value(scrape_configs(
            &d.join("pods.json"),
            &[("operator", operator_port), ("scheduler", scheduler_port)],
        )?)?,
    });
    std::fs::write(d.join("prometheus.yml"), serde_yaml::to_string(&config)?)?;
    std::fs::write(d.join("alerts.yaml"), test_rules()?)?;
    procs.spawn(
        "prometheus",
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                d.join("prometheus.yml").display()
            ))
            .arg(format!("--storage.tsdb.path={}", d.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}")),
    )?;
    let fail = |e: gantry_testkit::Timeout| anyhow::anyhow!("{e}\n{}", procs.logs());

    // Every target of every job is up: one exporter and one node status exporter per GPU
    // node (one here), the operator and the scheduler.
    let want_jobs = [
        "nvidia-dcgm-exporter",
        "nvidia-node-status-exporter",
        "operator",
        "scheduler",
    ];
    let pods_file = d.join("pods.json");
    std::fs::write(&pods_file, "[]")?;
    wait("every Gantry target up", 240, &mut || {
        // The pod role's view, refreshed while the operands come and go.
        match kubectl(&["get", "pods", "-A", "-o", "json"], None)
            .map_err(anyhow::Error::msg)
            .and_then(|out| Ok(serde_json::from_str::<Value>(&out)?))
        {
            Ok(pods) => {
                let text = pod_role_targets(&pods).to_string();
                if std::fs::read_to_string(&pods_file).ok().as_deref() != Some(text.as_str()) {
                    // Whole files only: Prometheus re-reads on every change.
                    let tmp = pods_file.with_extension("tmp");
                    let _ =
                        std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &pods_file));
                }
            }
            Err(e) => return Look::Seen(format!("listing pods: {e}")),
        }
        let targets = match get_json(prom_port, "/api/v1/targets?state=active") {
            Ok(v) => v["data"]["activeTargets"].clone(),
            Err(e) => return Look::Seen(e.to_string()),
        };
        let list = targets.as_array().cloned().unwrap_or_default();
        let seen: Vec<String> = list
            .iter()
            .map(|t| {
                format!(
                    "{} {} {} {}",
                    t["labels"]["job"], t["scrapeUrl"], t["health"], t["lastError"]
                )
            })
            .collect();
        let all_up = list.iter().all(|t| t["health"] == "up");
        let jobs_up = want_jobs.iter().all(|j| {
            list.iter()
                .filter(|t| t["labels"]["job"] == *j && t["health"] == "up")
                .count()
                == 1
        });
        if all_up && jobs_up && list.len() == want_jobs.len() {
            Look::Done(targets)
        } else {
            Look::Seen(seen.join("\n"))
        }
    })
    .map_err(fail)?;

    // dcgm-exporter's GPU series, one per GPU, with its labels; KAI's queue series.
    wait(
        "DCGM_FI_DEV_* series of both GPUs",
        60,
        &mut || match query(prom_port, "DCGM_FI_DEV_GPU_TEMP") {
            Ok(r) if r.len() == 2 && r.iter().all(|s| s["metric"]["Hostname"] == NODE) => {
                Look::Done(Value::Null)
            }
            Ok(r) => Look::Seen(format!("{r:?}")),
            Err(e) => Look::Seen(e.to_string()),
        },
    )
    .map_err(fail)?;
    for name in [
        "kai_queue_info",
        "kai_queue_deserved_gpus",
        "kai_queue_allocated_gpus",
        "kai_queue_fair_share_gpu",
    ] {
        wait(&format!("{name} for queue prom-team"), 120, &mut || {
            let q = format!("{name}{{queue_name=\"prom-team\"}}");
            match query(prom_port, &q) {
                Ok(r) if !r.is_empty() => Look::Done(Value::Null),
                Ok(_) => Look::Seen(format!("{q}: no series")),
                Err(e) => Look::Seen(e.to_string()),
            }
        })
        .map_err(fail)?;
    }
    // The pod got its GPU: the scheduler's allocation and the exporter's attribution.
    wait("the trainer pod on a GPU", 120, &mut || {
        let alloc = query(
            prom_port,
            "kai_queue_allocated_gpus{queue_name=\"prom-team\"} == 1",
        );
        let attributed = query(prom_port, "DCGM_FI_DEV_GPU_UTIL{pod=\"trainer\"}");
        match (alloc, attributed) {
            (Ok(a), Ok(p)) if a.len() == 1 && p.len() == 1 => Look::Done(Value::Null),
            (a, p) => Look::Seen(format!("allocated {a:?}; attributed {p:?}")),
        }
    })
    .map_err(fail)?;

    // An XID on GPU 1: the alert goes pending (its `for:` running), then firing.
    let fault = gantry()
        .args([
            "sim",
            "fault",
            NODE,
            "--xid",
            "119",
            "--gpu",
            "1",
            "--data-dir",
        ])
        .arg(&data)
        .output()?;
    anyhow::ensure!(
        fault.status.success(),
        "gantry sim fault: {}",
        String::from_utf8_lossy(&fault.stderr)
    );
    let xid_alert = |state: &'static str| {
        move || -> Look<Value> {
            let alerts = match get_json(prom_port, "/api/v1/alerts") {
                Ok(v) => v["data"]["alerts"].clone(),
                Err(e) => return Look::Seen(e.to_string()),
            };
            let found = alerts.as_array().into_iter().flatten().find(|a| {
                a["labels"]["alertname"] == XID_ALERT
                    && a["labels"]["gpu"] == "1"
                    && a["labels"]["err_code"] == "119"
            });
            match found {
                Some(a) if a["state"] == state => Look::Done(a.clone()),
                _ => Look::Seen(format!("{alerts}")),
            }
        }
    };
    let pending = wait("GantryGpuXidError pending", 60, &mut xid_alert("pending")).map_err(fail)?;
    assert_eq!(pending["labels"]["Hostname"], NODE, "{pending}");
    assert_eq!(pending["labels"]["severity"], "warning", "{pending}");
    let firing = wait("GantryGpuXidError firing", 60, &mut xid_alert("firing")).map_err(fail)?;
    assert_eq!(
        firing["annotations"]["summary"],
        format!("GPU 1 on {NODE} reported XID 119")
    );

    // Every dashboard query returns data, but one: the evictions panel counts evictions by
    // reason, and nothing was evicted here, so the family has no series yet (Prometheus still
    // ran the query without error).
    for (title, expr) in dashboard_queries()? {
        wait(
            &format!("dashboard panel {title:?}: {expr}"),
            30,
            &mut || match query(prom_port, &expr) {
                Ok(r) if !r.is_empty() || expr.contains(EVICTIONS) => Look::Done(Value::Null),
                Ok(_) => Look::Seen("no data".into()),
                Err(e) => Look::Seen(e.to_string()),
            },
        )
        .map_err(fail)?;
    }
    Ok(())
}
