//! Mutating admission webhooks on create, as the real API server calls them: every
//! `MutatingWebhookConfiguration` webhook whose rules, `namespaceSelector` and
//! `objectSelector` match gets an `admission.k8s.io/v1` AdmissionReview over HTTPS (the
//! `caBundle` is the only trusted root), and its JSON patch is applied before the object is
//! validated and stored. A webhook that cannot be reached or answers nonsense fails the
//! request when its `failurePolicy` is `Fail` (the default) and is skipped when `Ignore`; one
//! that denies fails it with its status.
//!
//! `clientConfig.url` is dialled as written; `clientConfig.service` is called as
//! `https://<name>.<namespace>.svc:<port><path>` (the name the serving certificate must
//! hold), dialled at the endpoint [`super::services`] resolves: the ready pod behind the
//! Service, whose in-process component serves the port on loopback.
//!
//! Differences, on purpose: `matchConditions` are evaluated for a CEL subset
//! ([`super::match_conditions`]) and an expression outside it counts as true (the webhook is
//! called); webhooks run once, in name order, with no reinvocation.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use gantry_k8s_rules::selector::Selector;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::server::ApiServer;
use super::status::ApiError;
use super::target::Target;

const CONFIGS: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";

/// The stored MutatingWebhookConfigurations (none: the request needs no decoding for them).
pub fn configurations(srv: &ApiServer) -> Vec<Arc<Value>> {
    srv.store.list(CONFIGS, None, None).0
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn has(list: &[&str], want: &str) -> bool {
    list.iter().any(|x| *x == "*" || *x == want)
}

/// Whether one of `webhook`'s rules covers a create of `t`.
pub fn rules_match(webhook: &Value, t: &Target) -> bool {
    webhook
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            let scope = r.get("scope").and_then(Value::as_str).unwrap_or("*");
            let scope_ok = match scope {
                "Namespaced" => t.info.namespaced,
                "Cluster" => !t.info.namespaced,
                _ => true,
            };
            scope_ok
                && (has(&strings(r.get("operations")), "CREATE"))
                && has(&strings(r.get("apiGroups")), &t.info.group)
                && has(&strings(r.get("apiVersions")), &t.version)
                && has(&strings(r.get("resources")), &t.info.plural)
        })
}

fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A selector field (`namespaceSelector` / `objectSelector`) against labels; absent or
/// empty selects everything, a malformed one nothing.
fn selects(sel: Option<&Value>, labels: &std::collections::BTreeMap<String, String>) -> bool {
    match sel {
        None => true,
        Some(v) => serde_json::from_value::<LabelSelector>(v.clone())
            .ok()
            .and_then(|s| Selector::from_label_selector(&s).ok())
            .is_some_and(|s| s.matches(labels)),
    }
}

/// Every `matchConditions` entry holds (one the sim cannot evaluate counts as holding).
fn conditions_hold(hook: &Value, obj: &Value) -> bool {
    hook.get("matchConditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("expression").and_then(Value::as_str))
        .all(|e| super::match_conditions::eval(e, obj).unwrap_or(true))
}

/// What calling one webhook gave.
enum Call {
    Patched(Value),
    Denied(ApiError),
    Failed(String),
}

/// Runs every matching webhook of `configs` on `obj` (a create of `t`) and returns the result.
pub async fn mutate_create(
    srv: &ApiServer,
    configs: &[Arc<Value>],
    t: &Target,
    mut obj: Value,
) -> Result<Value, ApiError> {
    if configs.is_empty() {
        return Ok(obj);
    }
    if t.info.namespaced && obj.pointer("/metadata/namespace").is_none() {
        obj["metadata"]["namespace"] = json!(t.namespace);
    }
    let ns_labels = if t.info.namespaced {
        srv.store
            .get("/namespaces", "", &t.namespace)
            .map(|n| labels(&n))
            .unwrap_or_default()
    } else {
        Default::default()
    };
    let mut hooks: Vec<(String, Value)> = configs
        .iter()
        .flat_map(|c| {
            let cfg = c
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            c.get("webhooks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |w| (cfg.clone(), w))
        })
        .collect();
    hooks.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, hook) in hooks {
        if !rules_match(&hook, t)
            || (t.info.namespaced && !selects(hook.get("namespaceSelector"), &ns_labels))
            || !selects(hook.get("objectSelector"), &labels(&obj))
            || !conditions_hold(&hook, &obj)
        {
            continue;
        }
        let name = hook
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("webhook")
            .to_string();
        match call(srv, &hook, t, &obj, &name).await {
            Call::Patched(o) => obj = o,
            Call::Denied(e) => return Err(e),
            Call::Failed(why) => {
                let ignore = hook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
                if ignore {
                    tracing::debug!(webhook = %name, %why, "webhook failed; ignored by its failurePolicy");
                    continue;
                }
                return Err(ApiError::internal(format!(
                    "Internal error occurred: failed calling webhook \"{name}\": {why}"
                )));
            }
        }
    }
    Ok(obj)
}

/// The URL a webhook is called at and, for a Service, the endpoint address to dial.
fn destination(
    srv: &ApiServer,
    cc: &Value,
) -> Result<(String, Option<std::net::SocketAddr>), String> {
    if let Some(url) = cc.get("url").and_then(Value::as_str) {
        return Ok((url.to_string(), None));
    }
    let Some(svc) = cc.get("service") else {
        return Err("clientConfig has neither url nor service".into());
    };
    let field = |f: &str| svc.get(f).and_then(Value::as_str).unwrap_or_default();
    let (ns, svc_name) = (field("namespace"), field("name"));
    let port = svc.get("port").and_then(Value::as_u64).unwrap_or(443);
    let port = u16::try_from(port).map_err(|_| format!("clientConfig.service.port {port}"))?;
    let path = svc.get("path").and_then(Value::as_str).unwrap_or("/");
    let url = format!("https://{svc_name}.{ns}.svc:{port}{path}");
    let ep = super::services::resolve(srv, ns, svc_name, port)
        .map_err(|e| format!("Post {url:?}: {e}"))?;
    Ok((url, Some(ep.address)))
}

async fn call(srv: &ApiServer, hook: &Value, t: &Target, obj: &Value, name: &str) -> Call {
    let cc = hook.get("clientConfig").cloned().unwrap_or_default();
    let (url, dial) = match destination(srv, &cc) {
        Ok(d) => d,
        Err(e) => return Call::Failed(e),
    };
    let url = url.as_str();
    let uid = uuid::Uuid::new_v4().to_string();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": t.info.group, "version": t.version, "kind": kind},
            "resource": {"group": t.info.group, "version": t.version, "resource": t.info.plural},
            "requestKind": {"group": t.info.group, "version": t.version, "kind": kind},
            "name": obj.pointer("/metadata/name"),
            "namespace": t.namespace,
            "operation": "CREATE",
            "object": obj,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    });
    let timeout = hook
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(10)
        .clamp(1, 30);
    let ca = cc
        .get("caBundle")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let sent =
        tokio::time::timeout(Duration::from_secs(timeout), post(url, dial, ca, &review)).await;
    let body = match sent {
        Err(_) => return Call::Failed(format!("Post {url:?}: context deadline exceeded")),
        Ok(Err(e)) => return Call::Failed(format!("Post {url:?}: {e}")),
        Ok(Ok(b)) => b,
    };
    let Some(resp) = body.get("response") else {
        return Call::Failed("the AdmissionReview answer has no response".into());
    };
    if resp.get("uid").and_then(Value::as_str) != Some(uid.as_str()) {
        return Call::Failed(format!("expected response.uid={uid:?}"));
    }
    if resp.get("allowed").and_then(Value::as_bool) != Some(true) {
        let st = resp.get("status").cloned().unwrap_or_default();
        let code = st.get("code").and_then(Value::as_u64).unwrap_or(400) as u16;
        let msg = st
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Call::Denied(ApiError::new(
            code,
            "BadRequest",
            format!("admission webhook \"{name}\" denied the request: {msg}"),
        ));
    }
    let Some(p64) = resp.get("patch").and_then(Value::as_str) else {
        return Call::Patched(obj.clone());
    };
    if resp.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
        return Call::Failed("patchType must be JSONPatch".into());
    }
    let patch = base64::engine::general_purpose::STANDARD
        .decode(p64)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<json_patch::Patch>(&b).map_err(|e| e.to_string()));
    let mut out = obj.clone();
    match patch.and_then(|p| json_patch::patch(&mut out, &p).map_err(|e| e.to_string())) {
        Ok(()) => Call::Patched(out),
        Err(e) => Call::Failed(format!("the webhook's JSON patch does not apply: {e}")),
    }
}

/// POSTs `body` as JSON to an `https://` URL (dialled at `dial` when given, as a Service's
/// endpoint), trusting only `ca_b64` (base64 PEM) for the URL's host name.
async fn post(
    url: &str,
    dial: Option<std::net::SocketAddr>,
    ca_b64: &str,
    body: &Value,
) -> Result<Value, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("webhook URLs must use https".into());
    }
    let host = uri.host().ok_or("the URL has no host")?.to_string();
    let port = uri.port_u16().unwrap_or(443);
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca_b64)
        .map_err(|e| format!("caBundle is not base64: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        let c = c.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(c).map_err(|e| format!("caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("x509: certificate signed by unknown authority (empty caBundle)".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name = rustls::pki_types::ServerName::try_from(host.clone())
        .map_err(|e| format!("server name {host:?}: {e}"))?;
    let tcp = match dial {
        Some(addr) => tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("dial tcp {addr}: {e}"))?,
        None => tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?,
    };
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let req = http::Request::post(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string());
    let out = match resp {
        Ok(r) => {
            let status = r.status();
            let bytes = r
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if !status.is_success() {
                Err(format!(
                    "the server answered {status}: {}",
                    String::from_utf8_lossy(&bytes)
                ))
            } else {
                serde_json::from_slice(&bytes).map_err(|e| format!("the answer is not JSON: {e}"))
            }
        }
        Err(e) => Err(e),
    };
    driver.abort();
    out
}
