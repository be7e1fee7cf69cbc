//! `gantry admission`: the mutating webhook that prepares fractional pods (see
//! [`super::admission`]), served over TLS as the API server requires. `POST /mutate-pod`
//! takes and answers an `admission.k8s.io/v1` AdmissionReview; `GET /healthz` for probes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::core::v1::Pod;
use rand::Rng;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::admission::{AdmissionConfig, mutate};

/// Webhook errors: each names the file or address it concerns.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("reading {path}: {message}")]
    Certificate { path: String, message: String },
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("registering MutatingWebhookConfiguration {name}: {source}")]
    Register { name: String, source: kube::Error },
}

/// The webhook's TLS server configuration.
pub type ServerTls = Arc<rustls::ServerConfig>;

/// A TLS server configuration from PEM text (`what` names where it came from).
pub fn tls_config(
    cert_pem: &str,
    key_pem: &str,
    what: &str,
) -> Result<Arc<rustls::ServerConfig>, WebhookError> {
    gantry_runtime::tls::server_config(cert_pem, key_pem).map_err(|e| {
        let part = match e.part {
            gantry_runtime::tls::Part::Certificate => "certificate",
            gantry_runtime::tls::Part::Key => "key",
        };
        WebhookError::Certificate {
            path: what.to_string(),
            message: format!("{part}: {e}"),
        }
    })
}

/// Reads `tls.crt` and `tls.key` (a `kubernetes.io/tls` Secret's keys) from `dir`.
pub fn tls_config_from_dir(
    dir: &std::path::Path,
) -> Result<Arc<rustls::ServerConfig>, WebhookError> {
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read_to_string(&p).map_err(|x| WebhookError::Certificate {
            path: p.display().to_string(),
            message: x.to_string(),
        })
    };
    tls_config(
        &read("tls.crt")?,
        &read("tls.key")?,
        &dir.display().to_string(),
    )
}

/// The answer to one AdmissionReview body: (HTTP status, body).
pub fn review(body: &[u8], cfg: &AdmissionConfig, random: &str) -> (StatusCode, Value) {
    let bad = |m: String| (StatusCode::BAD_REQUEST, json!({"error": m}));
    let rev: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return bad(format!("AdmissionReview body is not JSON: {e}")),
    };
    let Some(req) = rev.get("request") else {
        return bad("AdmissionReview has no request".into());
    };
    let Some(uid) = req.get("uid").and_then(Value::as_str) else {
        return bad("AdmissionReview request has no uid".into());
    };
    let api_version = rev
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("admission.k8s.io/v1");
    let mut response = json!({"uid": uid, "allowed": true});
    let is_pod = req.pointer("/kind/kind").and_then(Value::as_str) == Some("Pod");
    let op = req.get("operation").and_then(Value::as_str);
    if is_pod && op == Some("CREATE") {
        let pod: Result<Pod, _> = req
            .get("object")
            .cloned()
            .map_or(Err(None), |o| serde_json::from_value(o).map_err(Some));
        match pod {
            Ok(pod) => {
                if let Some(ops) = mutate(&pod, cfg, random) {
                    let patch = serde_json::to_vec(&ops).unwrap_or_default();
                    response["patchType"] = json!("JSONPatch");
                    response["patch"] =
                        json!(base64::engine::general_purpose::STANDARD.encode(patch));
                }
            }
            // A pod the webhook cannot read is left to the API server's own validation.
            Err(e) => tracing::debug!(uid, error = ?e.map(|e| e.to_string()), "pod not decoded"),
        }
    }
    (
        StatusCode::OK,
        json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response}),
    )
}

/// A random part for ConfigMap prefixes: 7 lower-case letters and digits, as KAI's.
fn random_part() -> String {
    const ABC: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut r = rand::rng();
    (0..7)
        .map(|_| ABC[r.random_range(0..ABC.len())] as char)
        .collect()
}

async fn mutate_pod(State(cfg): State<Arc<AdmissionConfig>>, body: axum::body::Bytes) -> Response {
    let (code, body) = review(&body, &cfg, &random_part());
    (code, axum::Json(body)).into_response()
}

/// The webhook's routes.
pub fn router(cfg: AdmissionConfig) -> Router {
    Router::new()
        .route("/mutate-pod", post(mutate_pod))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .with_state(Arc::new(cfg))
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` (port 0: any) and returns the bound address and the serving future, which
/// runs until `stop` flips.
// Plain fn returning boxed futures: the bodies compile once, here, not again in every crate
// that awaits them (docs/benchmarks.md, "Build time").
pub fn bind(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    cfg: AdmissionConfig,
    stop: watch::Receiver<bool>,
) -> futures::future::BoxFuture<
    'static,
    Result<(SocketAddr, futures::future::BoxFuture<'static, ()>), WebhookError>,
> {
    Box::pin(async move {
        let (local, serve) = bind_inner(addr, tls, cfg, stop).await?;
        Ok((
            local,
            Box::pin(serve) as futures::future::BoxFuture<'static, ()>,
        ))
    })
}

async fn bind_inner(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    cfg: AdmissionConfig,
    mut stop: watch::Receiver<bool>,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static), WebhookError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| WebhookError::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| WebhookError::Listen { addr, source })?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let app = router(cfg);
    let serve = async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (tcp, peer) = tokio::select! {
                _ = stop.changed() => break,
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(app.clone());
            conns.spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(t)) => t,
                    _ => {
                        tracing::debug!(%peer, "webhook TLS handshake failed or timed out");
                        return;
                    }
                };
                let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                b.http1().timer(TokioTimer::new());
                if let Err(e) = b.serve_connection(TokioIo::new(tls), service).await {
                    tracing::debug!(%peer, error = %e, "webhook connection ended");
                }
            });
            while conns.try_join_next().is_some() {}
        }
    };
    Ok((local, serve))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(object: Value, operation: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": operation, "object": object},
        }))
        .expect("json")
    }

    #[test]
    fn a_fraction_gets_a_json_patch_and_others_are_allowed_as_they_are() {
        let cfg = AdmissionConfig::default();
        let frac = json!({"metadata": {"name": "f", "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}});
        let (code, out) = review(&body(frac.clone(), "CREATE"), &cfg, "abcdefg");
        assert_eq!(code, StatusCode::OK);
        let r = &out["response"];
        assert_eq!(
            (r["uid"].as_str(), r["allowed"].as_bool()),
            (Some("u-1"), Some(true))
        );
        assert_eq!(r["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(r["patch"].as_str().expect("patch"))
            .expect("base64");
        let ops: Vec<Value> = serde_json::from_slice(&patch).expect("ops");
        assert!(ops.iter().any(|o| o["value"] == "f-abcdefg-shared-gpu"));
        let (_, upd) = review(&body(frac, "UPDATE"), &cfg, "x");
        assert!(
            upd["response"].get("patch").is_none(),
            "only creates are changed"
        );
        let plain = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        let (_, out) = review(&body(plain, "CREATE"), &cfg, "x");
        assert_eq!(out["response"]["allowed"], true);
        assert!(out["response"].get("patch").is_none());
    }

    #[test]
    fn malformed_reviews_are_refused_with_a_reason() {
        let cfg = AdmissionConfig::default();
        let (code, out) = review(b"{", &cfg, "x");
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(out["error"].as_str().expect("msg").contains("not JSON"));
        let (code, _) = review(br#"{"request": {}}"#, &cfg, "x");
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert_eq!(random_part().len(), 7);
    }
}
