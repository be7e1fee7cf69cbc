//! The Kubernetes API server: REST verbs, watches, patches, discovery, over one
//! [`Store`]. `router()` gives the axum service the control plane serves over HTTPS.
//!
//! Layers, top down: this module builds the server and runs the request path
//! (authentication, authorization, then [`routes`]); the handlers (`objects`, `watch`,
//! `deletion`, `table`...) below it; at the bottom the shared state ([`server`]), the verbs'
//! arguments ([`target`]) and object metadata helpers ([`meta`]).

pub mod accept;
mod checks;
pub mod decode;
pub mod defaults;
mod deletion;
pub mod discovery;
pub mod fair;
pub mod logs;
pub mod match_conditions;
pub mod meta;
pub mod metrics;
pub mod objects;
pub mod openapi;
mod paging;
pub mod partial;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod requests;
pub mod resources;
pub mod routes;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod services;
pub mod status;
pub mod table;
pub mod target;
pub mod validate;
pub mod watch;
pub mod webhooks;
pub mod writers;

use crate::store::Store;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use resources::Registry;
use serde_json::json;
use status::ApiError;
use std::sync::{Arc, OnceLock};

pub use meta::now;
pub use server::ApiServer;

impl ApiServer {
    /// An API server over `store`; requests must carry `token` (None: no auth, for
    /// in-process use only). Creates the system namespaces if missing.
    pub fn new(store: Store, token: Option<String>) -> Arc<Self> {
        let srv = Arc::new(Self {
            store,
            registry: Registry::default(),
            token,
            address: OnceLock::new(),
            rbac: rbac::state::Rbac::default(),
            watches: watch::state::WatchCounts::default(),
            requests: requests::RequestCounts::default(),
            writers: fair::FairGate::new(server::WRITERS),
            write_threads: writers::WriteThreads::for_this_machine(),
        });
        srv.refresh_crds();
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if srv.store.get_stub("/namespaces", "", ns).is_none() {
                let t = srv.target("", "v1", "namespaces", "");
                if let Some(t) = t {
                    // Only fails if storage fails; the next write would report that too.
                    let _ = srv.create(&t, json!({"metadata": {"name": ns}}), "gantry-sim");
                }
            }
        }
        srv
    }

    /// The HTTP service: authentication, then routing.
    pub fn router(self: Arc<Self>) -> axum::Router {
        axum::Router::new().fallback(entry).with_state(self)
    }

    /// Whose token `bearer` is, as the connection limits count connections (None: the server
    /// does not accept it).
    pub fn credential(&self, bearer: &str) -> Option<Credential> {
        let user = rbac::authenticate(self, self.token.as_deref(), Some(bearer))?;
        // Without a token configured everyone is admin; then each token is its own client.
        Some(if self.token.is_some() && user.is_master() {
            Credential::Cluster
        } else {
            Credential::Client
        })
    }

    /// Who sent the request (None: no valid token).
    fn user(&self, req: &Request) -> Option<rbac::User> {
        let bearer = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        rbac::authenticate(self, self.token.as_deref(), bearer)
    }
}

/// Whose token a connection carries ([`ApiServer::credential`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// The cluster's own (the admin token): held to no per-client share of connections.
    Cluster,
    /// Any other accepted token: one client, held to its share.
    Client,
}

async fn entry(State(srv): State<Arc<ApiServer>>, req: Request) -> Response {
    let Some(user) = srv.user(&req) else {
        return ApiError::unauthorized().into_response();
    };
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or_default().to_string();
    if let Err(e) = rbac::authorize(&srv, &user, parts.method.as_str(), &path, &query) {
        return e.into_response();
    }
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    tracing::debug!(method = %parts.method, %path, %query, "request");
    let ct = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if let Err(e) =
        rbac::escalation::check(&srv, &user, parts.method.as_str(), &path, &query, ct, &body)
    {
        return e.into_response();
    }
    if let Some(r) = rbac::serve(&srv, parts.method.as_str(), &path, ct, &body) {
        return r;
    }
    let flow = parts.extensions.get().copied().unwrap_or_default();
    routes::handle(srv, flow, parts.method, &path, &query, parts.headers, body).await
}

/// The request body, at most [`decode::MAX_REQUEST_BYTES`]. A larger one is read on and
/// dropped (up to [`DRAIN_BYTES`]) before the 413 goes out: a client still writing its body
/// when the server closes the connection sees a broken pipe instead of the answer.
async fn read_body(mut body: axum::body::Body) -> Result<bytes::Bytes, ApiError> {
    use http_body_util::BodyExt;
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen <= decode::MAX_REQUEST_BYTES {
            buf.extend_from_slice(&data);
        } else {
            buf = bytes::BytesMut::new();
            if seen > DRAIN_BYTES {
                break;
            }
        }
    }
    if seen > decode::MAX_REQUEST_BYTES {
        tracing::debug!(bytes = seen, "request body refused");
        return Err(decode::too_large(decode::MAX_REQUEST_BYTES));
    }
    Ok(buf.freeze())
}

/// How much of an oversized body is read and dropped before answering 413.
const DRAIN_BYTES: usize = 64 << 20;
