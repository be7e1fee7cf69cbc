//! Service → endpoint, as the real API server's service resolver finds where to send a
//! webhook call (or any call a component makes through a Service): the Service's port (by
//! number) gives its `targetPort`; the ready pods its selector picks are the endpoints; a
//! named `targetPort` is the pod's container port of that name.
//!
//! The sim has no pod network: an in-process component that serves a container port listens
//! on a loopback port of its own and the sim kubelet publishes it on the pod as
//! `sim.gantry.dev/port-<containerPort>: 127.0.0.1:<port>` ([`names::ANNOTATION_SIM_PORT_PREFIX`]).
//! That address is the endpoint; a ready pod that has not published the port yet is not one
//! (as a pod is out of the Endpoints until it is ready). Pure: the Service and pods in.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use gantry_api::names;
use serde_json::Value;

use super::server::ApiServer;

/// Where a Service's port leads: the pod picked and the address to dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `namespace/name` of the pod behind the Service.
    pub pod: String,
    pub address: SocketAddr,
}

/// Resolves `namespace/name:port` against the stored Service and pods.
pub fn resolve(
    srv: &ApiServer,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<Endpoint, String> {
    let svc = srv
        .store
        .get("/services", namespace, name)
        .ok_or_else(|| format!("service \"{name}\" not found"))?;
    let pods = srv.store.list("/pods", Some(namespace), None).0;
    endpoint(&svc, &pods, port)
}

fn str_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn ready(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The container port `target` (a number, or a port name) means on `pod`.
fn container_port(pod: &Value, target: &Value) -> Option<u16> {
    if let Some(n) = target.as_u64() {
        return u16::try_from(n).ok();
    }
    let want = target.as_str()?;
    if let Ok(n) = want.parse::<u16>() {
        return Some(n);
    }
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .find(|p| p.get("name").and_then(Value::as_str) == Some(want))
        .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
        .and_then(|n| u16::try_from(n).ok())
}

/// The endpoint behind `svc`'s port `port` among `pods` (the Service's namespace's): the
/// first ready pod, in name order, that serves it.
pub fn endpoint(svc: &Value, pods: &[Arc<Value>], port: u16) -> Result<Endpoint, String> {
    let name = svc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let spec = svc.get("spec").cloned().unwrap_or_default();
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return Err(format!(
            "service \"{name}\" is an ExternalName service: the simulated cluster has no DNS to resolve it"
        ));
    }
    let sp = spec
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
    let target = sp
        .get("targetPort")
        .cloned()
        .unwrap_or_else(|| Value::from(port));
    let selector = str_map(spec.get("selector"));
    if selector.is_empty() {
        return Err(format!(
            "service \"{name}\" has no selector: the simulated cluster routes a Service only to the pods its selector picks"
        ));
    }
    let mut picked: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| {
            let labels = str_map(p.pointer("/metadata/labels"));
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .filter(|p| ready(p))
        .collect();
    picked.sort_by_key(|p| {
        p.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    });
    picked
        .into_iter()
        .find_map(|p| {
            let cport = container_port(p, &target)?;
            let key = format!("{}{cport}", names::ANNOTATION_SIM_PORT_PREFIX);
            let address = str_map(p.pointer("/metadata/annotations"))
                .get(&key)?
                .parse()
                .ok()?;
            let meta = |f: &str| {
                p.pointer(&format!("/metadata/{f}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            Some(Endpoint {
                pod: format!("{}/{}", meta("namespace"), meta("name")),
                address,
            })
        })
        .ok_or_else(|| format!("no endpoints available for service \"{name}\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(target: Value) -> Value {
        json!({"metadata": {"name": "hook", "namespace": "ns"},
               "spec": {"selector": {"app": "hook"},
                        "ports": [{"name": "https", "port": 443, "targetPort": target}]}})
    }

    fn pod(name: &str, ready: bool, published: Option<&str>) -> Arc<Value> {
        let mut ann = serde_json::Map::new();
        if let Some(a) = published {
            ann.insert("sim.gantry.dev/port-9443".into(), json!(a));
        }
        let status = if ready { "True" } else { "False" };
        Arc::new(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "hook"}, "annotations": ann},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "webhook", "containerPort": 9443}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status}]},
        }))
    }

    #[test]
    fn a_named_target_port_leads_to_the_ready_pod_that_serves_it() {
        let pods = [
            pod("a-unready", false, Some("127.0.0.1:1001")),
            pod("b-unpublished", true, None),
            pod("c-serving", true, Some("127.0.0.1:1003")),
        ];
        let e = endpoint(&svc(json!("webhook")), &pods, 443).expect("resolved");
        assert_eq!(e.pod, "ns/c-serving");
        assert_eq!(e.address, "127.0.0.1:1003".parse().expect("addr"));
        // A numeric target port is the container port itself.
        let e = endpoint(&svc(json!(9443)), &pods, 443).expect("resolved");
        assert_eq!(e.pod, "ns/c-serving");
    }

    #[test]
    fn what_cannot_be_routed_says_why() {
        let pods = [pod("a", false, Some("127.0.0.1:1"))];
        assert_eq!(
            endpoint(&svc(json!("webhook")), &pods, 443).unwrap_err(),
            "no endpoints available for service \"hook\""
        );
        assert_eq!(
            endpoint(&svc(json!("webhook")), &pods, 8443).unwrap_err(),
            "no service port 8443 found for service \"hook\""
        );
        let other = pod("x", true, Some("127.0.0.1:1"));
        let mut unnamed = (*other).clone();
        unnamed["metadata"]["labels"]["app"] = json!("other");
        assert!(
            endpoint(&svc(json!("webhook")), &[Arc::new(unnamed)], 443)
                .unwrap_err()
                .starts_with("no endpoints")
        );
        let mut bare = svc(json!(9443));
        bare["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("selector");
        assert!(
            endpoint(&bare, &[other], 443)
                .unwrap_err()
                .contains("has no selector")
        );
    }
}
