//! The resource metrics API (`metrics.k8s.io/v1beta1`, what metrics-server serves) for
//! `kubectl top nodes|pods`. A simulated container uses what it requests: a pod's usage is
//! its running containers' CPU and memory requests, a node's the sum over its running pods.
//! Read-only and computed per request from the stored pods and nodes.

use super::selectors::{FieldSelector, LabelSelector};
use super::server::ApiServer;
use super::status::ApiError;
use super::target::{ListOpts, Target};
use gantry_k8s_rules::quantity::Quantity;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
/// The window metrics-server averages over; ours is an instant, reported as its default.
const WINDOW: &str = "15s";

/// `/apis/metrics.k8s.io/v1beta1`.
pub fn resource_list() -> Value {
    let r = |name: &str, kind: &str, namespaced: bool| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list"]});
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"),
           "resources": [r("nodes", "NodeMetrics", false), r("pods", "PodMetrics", true)]})
}

/// CPU in millicores and memory in bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    pub cpu_milli: i128,
    pub memory: i128,
}

impl Usage {
    fn add(&mut self, o: Usage) {
        self.cpu_milli += o.cpu_milli;
        self.memory += o.memory;
    }
    fn to_json(self) -> Value {
        json!({"cpu": format!("{}m", self.cpu_milli), "memory": format!("{}Ki", self.memory / 1024)})
    }
}

/// Each main container's usage: its requests (unparseable ones count as zero; the API server
/// validated them on write).
pub fn container_usage(pod: &Value) -> Vec<(String, Usage)> {
    let q = |c: &Value, r: &str, milli: bool| {
        c.pointer(&format!("/resources/requests/{r}"))
            .and_then(Value::as_str)
            .and_then(|s| Quantity::parse(s).ok())
            .and_then(|q| if milli { q.milli_value() } else { q.value() })
            .unwrap_or(0)
    };
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            (
                name.to_string(),
                Usage {
                    cpu_milli: q(c, "cpu", true),
                    memory: q(c, "memory", false),
                },
            )
        })
        .collect()
}

fn running(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

fn meta(obj: &Value, namespaced: bool) -> Value {
    let mut m = json!({"name": obj.pointer("/metadata/name"), "labels": obj.pointer("/metadata/labels"),
                       "creationTimestamp": super::meta::now()});
    if namespaced {
        m["namespace"] = obj
            .pointer("/metadata/namespace")
            .cloned()
            .unwrap_or_default();
    }
    m
}

pub fn pod_metrics(pod: &Value, now: &str) -> Value {
    let containers: Vec<Value> = container_usage(pod)
        .into_iter()
        .map(|(name, u)| json!({"name": name, "usage": u.to_json()}))
        .collect();
    json!({"kind": "PodMetrics", "apiVersion": format!("{GROUP}/{VERSION}"), "metadata": meta(pod, true),
           "timestamp": now, "window": WINDOW, "containers": containers})
}

/// Per node name, the summed usage of the running pods on it.
pub fn node_usage<'a>(pods: impl IntoIterator<Item = &'a Value>) -> BTreeMap<String, Usage> {
    let mut out: BTreeMap<String, Usage> = BTreeMap::new();
    for p in pods.into_iter().filter(|p| running(p)) {
        let Some(node) = p.pointer("/spec/nodeName").and_then(Value::as_str) else {
            continue;
        };
        let u = out.entry(node.to_string()).or_default();
        for (_, c) in container_usage(p) {
            u.add(c);
        }
    }
    out
}

fn target(srv: &ApiServer, plural: &str, namespace: &str) -> Result<Target, ApiError> {
    srv.target("", "v1", plural, namespace)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not registered")))
}

fn items(list: &Value) -> Vec<Value> {
    list.get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn opts(q: &HashMap<String, String>) -> Result<ListOpts, ApiError> {
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or_default();
    Ok(ListOpts {
        labels: LabelSelector::parse(get("labelSelector"))?,
        fields: FieldSelector::parse(get("fieldSelector"))?,
        limit: None,
        continue_token: None,
    })
}

fn not_found(resource: &str, name: &str) -> ApiError {
    ApiError::not_found(resource, GROUP, name)
}

/// GET under `/apis/metrics.k8s.io/v1beta1/`: `nodes[/NAME]`, `[namespaces/NS/]pods[/NAME]`.
pub fn get(srv: &ApiServer, rest: &[&str], q: &HashMap<String, String>) -> Result<Value, ApiError> {
    let now = super::meta::now();
    let all_pods = || -> Result<Vec<Value>, ApiError> {
        Ok(items(
            &srv.list(&target(srv, "pods", "")?, &ListOpts::default())?,
        ))
    };
    match rest {
        ["nodes", name @ ..] if name.len() <= 1 => {
            let nodes = match name.first() {
                Some(n) => vec![
                    srv.get(&target(srv, "nodes", "")?, n)
                        .map_err(|_| not_found("nodes", n))?,
                ],
                None => items(&srv.list(&target(srv, "nodes", "")?, &opts(q)?)?),
            };
            let usage = node_usage(all_pods()?.iter());
            let metrics: Vec<Value> = nodes
                .iter()
                .map(|n| {
                    let name = n.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
                    json!({"kind": "NodeMetrics", "apiVersion": format!("{GROUP}/{VERSION}"), "metadata": meta(n, false),
                           "timestamp": now, "window": WINDOW,
                           "usage": usage.get(name).copied().unwrap_or_default().to_json()})
                })
                .collect();
            Ok(match name.first() {
                Some(_) => metrics.into_iter().next().unwrap_or_default(),
                None => list("NodeMetricsList", metrics),
            })
        }
        ["pods"] => pods(srv, "", q, &now),
        ["namespaces", ns, "pods"] => pods(srv, ns, q, &now),
        ["namespaces", ns, "pods", name] => {
            let pod = srv
                .get(&target(srv, "pods", ns)?, name)
                .map_err(|_| not_found("pods", name))?;
            if !running(&pod) {
                return Err(not_found("pods", name));
            }
            Ok(pod_metrics(&pod, &now))
        }
        _ => Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({GROUP}/{VERSION}/{})",
                rest.join("/")
            ),
        )),
    }
}

fn pods(
    srv: &ApiServer,
    ns: &str,
    q: &HashMap<String, String>,
    now: &str,
) -> Result<Value, ApiError> {
    let listed = srv.list(&target(srv, "pods", ns)?, &opts(q)?)?;
    let metrics = items(&listed)
        .iter()
        .filter(|p| running(p))
        .map(|p| pod_metrics(p, now))
        .collect();
    Ok(list("PodMetricsList", metrics))
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": format!("{GROUP}/{VERSION}"), "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_the_running_containers_requests() {
        let pod = |node: &str, phase: &str, cpu: &str, mem: &str| {
            json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": node, "containers": [
                {"name": "a", "resources": {"requests": {"cpu": cpu, "memory": mem}}},
                {"name": "b"}]}, "status": {"phase": phase}})
        };
        let pods = [
            pod("n1", "Running", "500m", "1Gi"),
            pod("n1", "Running", "2", "512Mi"),
            pod("n1", "Pending", "4", "1Gi"),
            pod("n2", "Running", "100m", "128Mi"),
        ];
        let by_node = node_usage(pods.iter());
        assert_eq!(
            by_node["n1"],
            Usage {
                cpu_milli: 2500,
                memory: 1536 * 1024 * 1024
            }
        );
        assert_eq!(by_node["n2"].cpu_milli, 100);
        let m = pod_metrics(&pods[0], "t");
        assert_eq!(
            m["containers"][0]["usage"],
            json!({"cpu": "500m", "memory": "1048576Ki"})
        );
        assert_eq!(
            m["containers"][1]["usage"],
            json!({"cpu": "0m", "memory": "0Ki"})
        );
        assert_eq!(m["metadata"]["namespace"], "d");
    }
}
