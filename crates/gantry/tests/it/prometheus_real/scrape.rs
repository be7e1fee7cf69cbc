//! The whole run: Prometheus scrapes every Gantry target, the XID alert goes pending then
//! firing, and the dashboard's queries are answered.

use super::*;

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
