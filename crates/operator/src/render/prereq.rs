//! `pre-requisites` (RuntimeClasses) and `state-operator-metrics` (the operator's metrics
//! Service, ServiceMonitor and alert rules).

use gantry_api::common::ServiceMonitorConfig;
use gantry_api::names;
use serde_json::{Map, Value, json};

use super::RenderError;
use super::meta::{Ctx, to_json};

/// RuntimeClass `<operator.runtimeClass>`, plus `nvidia-cdi` and `nvidia-legacy` with CDI on.
pub(crate) fn runtime_classes(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let mut handlers = vec![ctx.spec.runtime_class()];
    if ctx.spec.cdi_enabled() {
        handlers.extend([
            names::RUNTIME_CLASS_NVIDIA_CDI,
            names::RUNTIME_CLASS_NVIDIA_LEGACY,
        ]);
    }
    handlers
        .into_iter()
        .map(|h| {
            ctx.object(
                "node.k8s.io/v1",
                "RuntimeClass",
                h,
                false,
                json!({ "handler": h }),
            )
        })
        .collect()
}

/// Name and port of the operator metrics Service (upstream's).
pub(crate) const METRICS_SERVICE: &str = "gpu-operator";
pub(crate) const METRICS_PORT: i32 = 8080;
pub(crate) const METRICS_PORT_NAME: &str = "gpu-operator-metrics";

/// The operator's own alert rules: a Prometheus rule file whose `groups` become the
/// PrometheusRule's `spec.groups` (the same file the Helm chart ships).
pub(crate) const ALERTS: &str = include_str!("../../../../deploy/helm/gantry/files/alerts.yaml");
/// Name of the PrometheusRule with those alerts.
pub(crate) const ALERTS_RULE: &str = "gantry-operator-alerts";

pub(crate) fn operator_metrics(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let selector: Map<String, Value> = if ctx.facts.operator_labels.is_empty() {
        [(names::LABEL_APP.to_string(), Value::from("gpu-operator"))]
            .into_iter()
            .collect()
    } else {
        ctx.facts
            .operator_labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect()
    };
    let mut spec = Map::new();
    spec.insert(
        "ports".into(),
        json!([{ "name": METRICS_PORT_NAME, "port": METRICS_PORT, "targetPort": METRICS_PORT, "protocol": "TCP" }]),
    );
    let mut out = vec![ctx.service(METRICS_SERVICE, &selector, spec, None)?];
    let sm = ctx
        .spec
        .operator
        .metrics
        .as_ref()
        .and_then(|m| m.service_monitor.as_ref());
    // Rendered whenever the CRD exists, unless switched off explicitly.
    if ctx.facts.has_service_monitor_crd && sm.is_none_or(|s| s.enabled != Some(false)) {
        out.push(service_monitor(
            ctx,
            METRICS_SERVICE,
            METRICS_PORT_NAME,
            &selector,
            sm,
            "spec.operator.metrics.serviceMonitor",
        )?);
    }
    if ctx.facts.has_prometheus_rule_crd {
        out.push(prometheus_rule(ctx, ALERTS)?);
    }
    Ok(out)
}

fn prometheus_rule(ctx: &Ctx<'_>, text: &str) -> Result<Value, RenderError> {
    let doc: Value = serde_yaml::from_str(text).map_err(|e| RenderError {
        path: "deploy/helm/gantry/files/alerts.yaml".into(),
        message: format!("is not valid YAML: {e}"),
    })?;
    let groups = doc
        .pointer("/spec/groups")
        .or_else(|| doc.get("groups"))
        .cloned()
        .unwrap_or_else(|| json!([]));
    ctx.object(
        "monitoring.coreos.com/v1",
        "PrometheusRule",
        ALERTS_RULE,
        true,
        json!({ "spec": { "groups": groups } }),
    )
}

/// A ServiceMonitor scraping `port` of the Service selected by `selector`, with the
/// interval, timeout, honorLabels, relabelings and extra labels of `cfg`.
pub(crate) fn service_monitor(
    ctx: &Ctx<'_>,
    name: &str,
    port: &str,
    selector: &Map<String, Value>,
    cfg: Option<&ServiceMonitorConfig>,
    path: &str,
) -> Result<Value, RenderError> {
    let mut endpoint = Map::new();
    endpoint.insert("port".into(), port.into());
    endpoint.insert("path".into(), "/metrics".into());
    if let Some(c) = cfg {
        if let Some(i) = c.interval.as_deref().filter(|s| !s.is_empty()) {
            endpoint.insert("interval".into(), i.into());
        }
        if let Some(t) = c.scrape_timeout.as_deref().filter(|s| !s.is_empty()) {
            endpoint.insert("scrapeTimeout".into(), t.into());
        }
        if let Some(h) = c.honor_labels {
            endpoint.insert("honorLabels".into(), h.into());
        }
        if let Some(r) = c.relabelings.as_ref().filter(|r| !r.is_empty()) {
            endpoint.insert(
                "relabelings".into(),
                to_json(&format!("{path}.relabelings"), r)?,
            );
        }
    }
    let mut obj = ctx.object(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        name,
        true,
        json!({
            "spec": {
                "selector": { "matchLabels": selector },
                "namespaceSelector": { "matchNames": [ctx.namespace()] },
                "endpoints": [endpoint],
            },
        }),
    )?;
    if let Some(extra) = cfg.and_then(|c| c.additional_labels.as_ref())
        && let Some(labels) = obj
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
    {
        for (k, v) in extra {
            // The operator's own labels stay authoritative.
            labels
                .entry(k.clone())
                .or_insert_with(|| Value::from(v.as_str()));
        }
    }
    Ok(obj)
}
