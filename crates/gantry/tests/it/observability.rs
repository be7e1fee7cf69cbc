//! The Grafana dashboard (`deploy/grafana/gantry.json`) and the alerts
//! (`deploy/helm/gantry/files/alerts.yaml`) only use what Gantry exports: every query and alert
//! expression parses as PromQL (known functions, balanced parentheses), every metric it names is
//! one a Gantry component exports, and every label it filters or groups GPU metrics by is a
//! label the exporter writes.
//!
//! Where the names come from:
//! - GPU metrics: the exporter itself, run on a simulated backend with the metric set the chart
//!   configures (`files/exporter-metrics.csv`), plus what that set selects (fields the simulated
//!   GPU has no value for, e.g. page retirement on Hopper, are still exported on real GPUs).
//! - The operator, the scheduler and the node status exporter: their registries and renderers,
//!   encoded (see `component_names`).
//! - `up`: the series Prometheus writes for every scrape target.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::{SimBackend, SimConfig, catalog};
use gantry_node::exporter::{Exporter, ExporterOptions, MetricSet, RenderOptions, parse_csv};
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::Value;

type Result<T = ()> = anyhow::Result<T>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> Result<String> {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Series Prometheus itself attaches to every target.
const PROMETHEUS_SERIES: &[&str] = &["up"];
/// Labels Prometheus adds to every scraped series (target labels).
const TARGET_LABELS: &[&str] = &["instance", "job", "namespace", "pod", "service", "endpoint"];

/// What Gantry exports: metric names, and the label names of the GPU (DCGM_*) series.
struct Exported {
    metrics: BTreeSet<String>,
    gpu_labels: BTreeSet<String>,
}

/// The chart's exporter metric set.
fn chart_metric_set() -> Result<MetricSet> {
    let set = parse_csv(&read("deploy/helm/gantry/files/exporter-metrics.csv")?)
        .map_err(|e| anyhow::anyhow!("files/exporter-metrics.csv: {e}"))?;
    anyhow::ensure!(
        set.unsupported.is_empty(),
        "files/exporter-metrics.csv names fields the exporter cannot fill: {:?}",
        set.unsupported
    );
    Ok(set)
}

/// Run the exporter on two simulated H100s with the chart's metric set and read its scrape.
fn exporter_scrape(set: &MetricSet) -> Result<String> {
    let backend = Arc::new(SimBackend::new(SimConfig::new(
        &catalog::H100_SXM5_80GB,
        2,
        7,
    )));
    let opts = ExporterOptions {
        collect_interval: Duration::from_secs(3600),
        metrics: set.clone(),
        render: RenderOptions {
            hostname: Some("gpu-node-1".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let exporter = Exporter::start(opts, backend)?;
    Ok(String::from_utf8(exporter.body().to_vec())?)
}

/// Metric and label names of an exposition body.
fn scrape_names(body: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut metrics = BTreeSet::new();
    let mut labels = BTreeSet::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = line.split_once('{').unwrap_or((line, ""));
        metrics.insert(name.split_whitespace().next().unwrap_or(name).to_string());
        // label="value",... : names are what precedes `="` after a separator.
        let mut s = rest;
        while let Some((k, v)) = s.split_once("=\"") {
            labels.insert(k.trim_start_matches(',').to_string());
            let bytes = v.as_bytes();
            let mut end = 0;
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            s = v.get(end + 1..).unwrap_or_default();
        }
    }
    (metrics, labels)
}

/// Metric names in an exposition, with the series names their TYPE implies: prometheus-client
/// appends `_total` to counters, histograms expose `_bucket`, `_sum` and `_count`.
fn exposed_names(body: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                continue;
            };
            match kind {
                "counter" => {
                    names.insert(format!("{}_total", name.trim_end_matches("_total")));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_string());
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            names.insert(name.to_string());
        }
    }
    names
}

/// What the operator, the scheduler and the node status exporter expose, from their own
/// registries and renderers (families without series still print their TYPE line).
fn component_names() -> BTreeSet<String> {
    use gantry_node::validator::Component;
    use gantry_node::validator::metrics::{NodeStatus, render};
    use gantry_scheduler::k8s::metrics::{PhaseLabel, QueueLabel, QueueResourceLabel, ReasonLabel};
    let mut names = exposed_names(&gantry_operator::metrics::Metrics::default().render());
    // prometheus-client leaves families without series out of a scrape: give each one a series.
    let sched = gantry_scheduler::k8s::metrics::Metrics::new();
    let queue = QueueResourceLabel {
        queue: "team-a".into(),
        resource: "gpu".into(),
    };
    sched.fair_share.get_or_create(&queue).set(2.0);
    sched.allocated.get_or_create(&queue).set(1.0);
    sched
        .pending
        .get_or_create(&QueueLabel {
            queue: "team-a".into(),
        })
        .set(1.0);
    sched
        .phase_seconds
        .get_or_create(&PhaseLabel {
            phase: "actions".into(),
        })
        .observe(0.01);
    sched
        .evictions
        .get_or_create(&ReasonLabel {
            reason: "reclaim".into(),
        })
        .inc();
    names.extend(exposed_names(&sched.encode()));
    names.extend(exposed_names(&render(&NodeStatus {
        ready: Component::ALL.into_iter().map(|c| (c, true)).collect(),
        plugin_devices: Some(8),
    })));
    names
}

fn exported() -> Result<Exported> {
    let set = chart_metric_set()?;
    let body = exporter_scrape(&set)?;
    let (mut metrics, mut gpu_labels) = scrape_names(&body);
    assert!(
        metrics.contains("DCGM_FI_DEV_GPU_UTIL"),
        "the exporter's scrape has no GPU series:\n{body}"
    );
    metrics.extend(set.metrics.iter().map(|m| m.name.clone()));
    // Labels the exporter writes only in some situations: pod attribution, XID details
    // (always on the XID series), MIG instances.
    for l in [
        "pod",
        "namespace",
        "container",
        "err_code",
        "err_msg",
        "GPU_I_PROFILE",
        "GPU_I_ID",
    ] {
        gpu_labels.insert(l.to_string());
    }
    gpu_labels.extend(TARGET_LABELS.iter().map(|s| s.to_string()));
    metrics.extend(component_names());
    metrics.extend(PROMETHEUS_SERIES.iter().map(|s| s.to_string()));
    Ok(Exported {
        metrics,
        gpu_labels,
    })
}

/// What one expression names.
#[derive(Default, Debug)]
struct Names {
    metrics: BTreeSet<String>,
    /// Labels in selectors of GPU (DCGM_*) metrics.
    gpu_selector_labels: BTreeSet<String>,
    /// Labels in by/without/on/ignoring clauses.
    grouping_labels: BTreeSet<String>,
}

fn walk(e: &Expr, out: &mut Names) {
    let modifier = |m: &Option<LabelModifier>, out: &mut Names| {
        if let Some(m) = m {
            out.grouping_labels
                .extend(m.labels().labels.iter().cloned());
        }
    };
    match e {
        Expr::Aggregate(a) => {
            modifier(&a.modifier, out);
            walk(&a.expr, out);
            if let Some(p) = &a.param {
                walk(p, out);
            }
        }
        Expr::Unary(u) => walk(&u.expr, out),
        Expr::Binary(b) => {
            if let Some(m) = &b.modifier {
                modifier(&m.matching, out);
            }
            walk(&b.lhs, out);
            walk(&b.rhs, out);
        }
        Expr::Paren(p) => walk(&p.expr, out),
        Expr::Subquery(s) => walk(&s.expr, out),
        Expr::Call(c) => c.args.args.iter().for_each(|a| walk(a, out)),
        Expr::VectorSelector(vs) => selector(vs, out),
        Expr::MatrixSelector(ms) => selector(&ms.vs, out),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

fn selector(vs: &parser::VectorSelector, out: &mut Names) {
    let mut name = vs.name.clone();
    let mut labels = Vec::new();
    for m in vs
        .matchers
        .matchers
        .iter()
        .chain(vs.matchers.or_matchers.iter().flatten())
    {
        if m.name == "__name__" {
            name = Some(m.value.clone());
        } else {
            labels.push(m.name.clone());
        }
    }
    let name = name.unwrap_or_default();
    if name.starts_with("DCGM_") {
        out.gpu_selector_labels.extend(labels);
    }
    out.metrics.insert(name);
}

/// Grafana's built-in interval variables, replaced by a duration so the query parses.
fn expand_grafana(q: &str) -> String {
    q.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
}

fn check(source: &str, query: &str, exported: &Exported) -> Result<Names> {
    let parsed = parser::parse(query)
        .map_err(|e| anyhow::anyhow!("{source}: does not parse as PromQL: {e}\n  {query}"))?;
    let mut names = Names::default();
    walk(&parsed, &mut names);
    anyhow::ensure!(
        !names.metrics.is_empty(),
        "{source}: names no metric: {query}"
    );
    for m in &names.metrics {
        anyhow::ensure!(
            exported.metrics.contains(m),
            "{source}: `{m}` is not a metric Gantry exports\n  {query}"
        );
    }
    let touches_gpu = names.metrics.iter().any(|m| m.starts_with("DCGM_"));
    for l in names
        .gpu_selector_labels
        .iter()
        .chain(names.grouping_labels.iter().filter(|_| touches_gpu))
    {
        anyhow::ensure!(
            exported.gpu_labels.contains(l),
            "{source}: label `{l}` is not one the exporter writes\n  {query}"
        );
    }
    Ok(names)
}

/// Every `expr` in the dashboard (panels, rows' panels) and every variable query.
fn dashboard_queries(dash: &Value) -> Vec<(String, String)> {
    fn panels(v: &Value, out: &mut Vec<(String, String)>) {
        for p in v.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?");
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    let id = t["refId"].as_str().unwrap_or("?");
                    out.push((format!("panel {title:?} query {id}"), e.to_string()));
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dash["panels"], &mut out);
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let q = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .unwrap_or_default();
        // label_values(<selector>, <label>): the selector is the PromQL part.
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.rsplit_once(','))
            .map(|(sel, _)| sel.trim())
            .unwrap_or(q);
        out.push((format!("variable {}", v["name"]), inner.to_string()));
    }
    out
}

#[test]
fn dashboard_queries_name_only_exported_metrics() -> Result {
    let exported = exported()?;
    let dash: Value = serde_json::from_str(&read("deploy/grafana/gantry.json")?)?;
    let queries = dashboard_queries(&dash);
    assert!(queries.len() >= 15, "only {} queries found", queries.len());
    let mut used = BTreeSet::new();
    for (source, q) in &queries {
        let names = check(source, &expand_grafana(q), &exported)?;
        used.extend(names.metrics);
    }
    // What the issue asks the dashboard to show.
    for m in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "gantry_scheduler_queue_fair_share",
        "gantry_scheduler_queue_allocated",
        "gantry_scheduler_cycle_duration_seconds_bucket",
    ] {
        assert!(used.contains(m), "the dashboard does not show {m}");
    }
    // Per-pod attribution: some panel groups GPU series by pod.
    assert!(
        queries
            .iter()
            .any(|(_, q)| q.contains("by (namespace, pod")),
        "no per-pod panel"
    );
    Ok(())
}

#[test]
fn alert_expressions_name_only_exported_metrics() -> Result {
    let exported = exported()?;
    let rules: Value = serde_yaml::from_str(&read("deploy/helm/gantry/files/alerts.yaml")?)?;
    let mut alerts = BTreeSet::new();
    let mut used = BTreeSet::new();
    for group in rules["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let name = rule["alert"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("a rule without `alert` in {}", group["name"]))?;
            assert!(alerts.insert(name.to_string()), "alert {name} twice");
            let expr = rule["expr"].as_str().unwrap_or_default();
            let names = check(&format!("alert {name}"), expr, &exported)?;
            used.extend(names.metrics);
            for key in ["summary", "description", "runbook_url"] {
                assert!(
                    rule["annotations"][key]
                        .as_str()
                        .is_some_and(|s| !s.is_empty()),
                    "alert {name}: no {key}"
                );
            }
            assert!(
                matches!(
                    rule["labels"]["severity"].as_str(),
                    Some("critical" | "warning" | "info")
                ),
                "alert {name}: severity"
            );
            if let Some(f) = rule["for"].as_str() {
                promql_parser::util::parse_duration(f)
                    .map_err(|e| anyhow::anyhow!("alert {name}: for {f:?}: {e}"))?;
            }
        }
    }
    // The signals the issue lists, each covered by some alert.
    for m in [
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gpu_operator_node_plugin_ready",
        "gpu_operator_node_device_plugin_devices_total",
        "gantry_scheduler_queue_fair_share",
        "up",
    ] {
        assert!(used.contains(m), "no alert reads {m}");
    }
    // Every alert is documented, under a heading whose anchor its runbook_url points at.
    let doc = read("docs/alerts.md")?;
    for a in &alerts {
        assert!(
            doc.contains(&format!("### {a}")),
            "docs/alerts.md does not document {a}"
        );
    }
    Ok(())
}

#[test]
fn the_checker_rejects_what_it_should() -> Result {
    let exported = exported()?;
    for bad in [
        "DCGM_FI_DEV_GPU_UTILISATION > 1",               // no such metric
        "sum(rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[5m])", // unbalanced
        "frobnicate(DCGM_FI_DEV_GPU_UTIL)",              // unknown function
        "sum by (hostname) (DCGM_FI_DEV_GPU_UTIL)",      // dcgm-exporter spells it Hostname
        "DCGM_FI_DEV_GPU_UTIL{node=\"a\"}",              // not an exporter label
    ] {
        assert!(check("test", bad, &exported).is_err(), "accepted: {bad}");
    }
    check(
        "test",
        "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"})",
        &exported,
    )?;
    Ok(())
}

#[test]
fn the_chart_metric_set_extends_the_default() -> Result {
    // The chart's set keeps dcgm-exporter's default rows, so existing dashboards keep working.
    let set = chart_metric_set()?;
    let names: BTreeSet<&str> = set.metrics.iter().map(|m| m.name.as_str()).collect();
    for m in gantry_node::exporter::default_set().metrics {
        assert!(
            names.contains(m.name.as_str()),
            "chart set lacks {}",
            m.name
        );
    }
    Ok(())
}
