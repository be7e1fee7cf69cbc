//! HTTP routing: parses Kubernetes REST paths and query parameters and calls the verbs.

use super::accept::{self, Form};
use super::decode::{self, Format};
use super::fair::Flow;
use super::patch::PatchType;
use super::schema::{Checks, FieldValidation};
use super::selectors::{FieldSelector, LabelSelector};
use super::server::ApiServer;
use super::status::{ApiError, json_body, json_response, success_status};
use super::target::{DeleteOpts, ListOpts, Target};
use super::watch::{self, WatchOpts};
use super::{discovery, metrics, openapi, partial, requests, table};
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, header};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Decodes `a=b&c=d` with percent-escapes and `+` as space.
pub fn parse_query(q: &str) -> HashMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |c: u8| (c as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push((h * 16 + l) as u8);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn truthy(v: Option<&String>) -> bool {
    v.is_some_and(|v| v == "true" || v == "1")
}

/// A parsed resource path.
struct ResPath {
    group: String,
    version: String,
    namespace: Option<String>,
    resource: String,
    name: Option<String>,
    sub: Option<String>,
    watch: bool,
}

fn parse_resource_path(group: &str, version: &str, rest: &[&str]) -> Option<ResPath> {
    let mut rest = rest.to_vec();
    let watch = rest.first() == Some(&"watch");
    if watch {
        rest.remove(0);
    }
    let mut namespace = None;
    // `/api/v1/namespaces/{name}/status|finalize` address the namespace itself.
    let namespace_object = group.is_empty()
        && rest.len() == 3
        && rest[0] == "namespaces"
        && (rest[2] == "status" || rest[2] == "finalize");
    if rest.len() >= 3 && rest[0] == "namespaces" && !namespace_object {
        namespace = Some(rest[1].to_string());
        rest.drain(..2);
    }
    if rest.is_empty() || rest.len() > 3 {
        return None;
    }
    Some(ResPath {
        group: group.into(),
        version: version.into(),
        namespace,
        resource: rest[0].into(),
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
        watch,
    })
}

fn ok_json(code: StatusCode, v: &Value) -> Response {
    json_response(code, v)
}

/// Decodes a request body with the decoder its `Content-Type` names (JSON by default).
fn body_json(headers: &HeaderMap, body: &Bytes, what: &str) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let format = if body.is_empty() {
        Format::Json
    } else {
        Format::from_content_type(ct)?
    };
    decode::body(body, format, what)
}

/// The keys a JSON body repeats, when `fieldValidation` wants them reported (not Ignore).
fn duplicates(headers: &HeaderMap, body: &Bytes, checks: &Checks) -> Vec<String> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if checks.mode == FieldValidation::Ignore {
        return Vec::new();
    }
    decode::repeated_keys(ct, body)
}

/// The field manager of a write: the query parameter, else the user agent's program name.
fn manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    ua.split('/')
        .next()
        .unwrap_or("unknown")
        .chars()
        .take(128)
        .collect()
}

/// Entry point for every request after authentication.
pub async fn handle(
    srv: Arc<ApiServer>,
    flow: Flow,
    method: Method,
    path: &str,
    query: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match route(srv, flow, method, path, query, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn route(
    srv: Arc<ApiServer>,
    flow: Flow,
    method: Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let q = parse_query(query);
    let get = method == Method::GET;
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    };
    match segs.as_slice() {
        ["version"] if get => Ok(ok_json(StatusCode::OK, &discovery::version())),
        ["healthz"] | ["readyz"] | ["livez"] if get => Ok((StatusCode::OK, "ok").into_response()),
        ["api"] if get => Ok(ok_json(
            StatusCode::OK,
            &discovery::core_versions(&srv.address()),
        )),
        ["apis"] if get => Ok(ok_json(StatusCode::OK, &discovery::api_groups(&srv))),
        ["api", "v1"] if get => discovery::resource_list(&srv, "", "v1")
            .map(|v| ok_json(StatusCode::OK, &v))
            .ok_or_else(not_found),
        ["apis", g] if get => discovery::api_group(&srv, g)
            .map(|v| ok_json(StatusCode::OK, &v))
            .ok_or_else(not_found),
        ["apis", g, v] if get => discovery::resource_list(&srv, g, v)
            .map(|v| ok_json(StatusCode::OK, &v))
            .ok_or_else(not_found),
        ["openapi", "v3"] if get => Ok(ok_json(StatusCode::OK, &openapi::v3_index(&srv))),
        ["openapi", "v3", rest @ ..] if get => openapi::v3_doc(&srv, &rest.join("/"))
            .map(|v| ok_json(StatusCode::OK, &v))
            .ok_or_else(not_found),
        ["apis", metrics::GROUP, metrics::VERSION, rest @ ..] if get => {
            Ok(ok_json(StatusCode::OK, &metrics::get(&srv, rest, &q)?))
        }
        ["apis", metrics::GROUP, metrics::VERSION, ..] => Err(ApiError::method_not_allowed(
            format!("{method} is not supported on {}", metrics::GROUP),
        )),
        ["api", "v1", rest @ ..] => {
            let p = parse_resource_path("", "v1", rest).ok_or_else(not_found)?;
            resource(srv, flow, method, p, q, headers, body).await
        }
        ["apis", g, v, rest @ ..] => {
            let p = parse_resource_path(g, v, rest).ok_or_else(not_found)?;
            resource(srv, flow, method, p, q, headers, body).await
        }
        _ => Err(not_found()),
    }
}

fn list_opts(q: &HashMap<String, String>) -> Result<ListOpts, ApiError> {
    Ok(ListOpts {
        labels: LabelSelector::parse(
            q.get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?,
        fields: FieldSelector::parse(
            q.get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?,
        limit: q.get("limit").and_then(|l| l.parse().ok()),
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
    })
}

fn delete_opts(
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<DeleteOpts, ApiError> {
    let mut o = if body.is_empty() {
        DeleteOpts::default()
    } else {
        DeleteOpts::from_body(&body_json(headers, body, "delete")?)
    };
    if let Some(p) = q.get("propagationPolicy") {
        o.propagation = Some(p.clone());
    }
    if let Some(g) = q.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
        o.grace_seconds = Some(g);
    }
    if let Some(p) = &o.propagation
        && !["Foreground", "Background", "Orphan"].contains(&p.as_str())
    {
        return Err(ApiError::bad_request(format!(
            "invalid propagationPolicy {p:?}: must be Foreground, Background or Orphan"
        )));
    }
    Ok(o)
}

async fn resource(
    srv: Arc<ApiServer>,
    flow: Flow,
    method: Method,
    p: ResPath,
    q: HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let info = srv
        .registry
        .lookup(&p.group, &p.version, &p.resource)
        .ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({}/{}, resource {})",
                    p.group, p.version, p.resource
                ),
            )
        })?;
    if !info.namespaced && p.namespace.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "{} is cluster-scoped; it has no namespaced path",
                info.plural
            ),
        ));
    }
    let t = Target {
        info: info.clone(),
        version: p.version.clone(),
        namespace: p.namespace.clone().unwrap_or_default(),
    };
    let sub = p.sub.clone().unwrap_or_default();
    if !sub.is_empty() && !info.subresources.contains(&sub) {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!("{} has no subresource {sub:?}", info.plural),
        ));
    }
    if info.namespaced && p.namespace.is_none() && !(method == Method::GET && p.name.is_none()) {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "{} is namespaced: use /namespaces/{{namespace}}/{}",
                info.plural, info.plural
            ),
        ));
    }
    if sub == "log" && method != Method::GET {
        return Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on pods/log"
        )));
    }
    let is_watch = p.watch || truthy(q.get("watch"));
    srv.requests
        .record(&method, p.name.is_some(), is_watch, &info.plural, &sub);
    // The form a read answers in (objects, a Table, metadata only); writes answer objects.
    let form = if method == Method::GET {
        accept::requested(headers)
    } else {
        Form::Object
    };
    match (method.clone(), p.name.as_deref()) {
        (Method::GET, None) if is_watch => watch_response(srv, t, &q, form, None).await,
        (Method::GET, Some(name)) if is_watch => watch_response(srv, t, &q, form, Some(name)).await,
        (Method::GET, None) => {
            let opts = list_opts(&q)?;
            if let Some(rv) = q.get("resourceVersion") {
                fresh_enough(&srv, rv).await?;
            }
            if t.info.builtin && form == Form::Object {
                let list = srv.list_shared(&t, &opts)?;
                return Ok(json_response(StatusCode::OK, &list));
            }
            let list = srv.list(&t, &opts)?;
            Ok(ok_json(
                StatusCode::OK,
                &printed(&srv, &t, form, &q, list, true),
            ))
        }
        (Method::GET, Some(name)) if sub == "log" => super::logs::pod_log(&srv, &t, name, &q),
        (Method::GET, Some(name)) => {
            let obj = srv.get(&t, name)?;
            Ok(ok_json(
                StatusCode::OK,
                &printed(&srv, &t, form, &q, obj, false),
            ))
        }
        _ => {
            // Decoding, validation and storage are CPU and disk work: off the async workers,
            // so a hostile body cannot stall `/readyz` or other clients.
            let mut headers = headers.clone();
            let mut body = body;
            // Mutating admission webhooks see the decoded object before it is validated.
            let create = method == Method::POST && p.name.is_none() && sub.is_empty();
            let hooks = if create && t.info.plural != "bindings" {
                super::webhooks::configurations(&srv)
            } else {
                Vec::new()
            };
            if !hooks.is_empty() {
                let (h, b) = (headers.clone(), body.clone());
                let obj = tokio::task::spawn_blocking(move || body_json(&h, &b, "create"))
                    .await
                    .map_err(|e| {
                        ApiError::internal(format!("the request's worker failed: {e}"))
                    })??;
                let obj = super::webhooks::mutate_create(&srv, &hooks, &t, obj).await?;
                body = Bytes::from(obj.to_string());
                headers.insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
            }
            let _turn = srv.writers.turn(flow).await;
            let worker = srv.clone();
            srv.write_threads
                .run(move || {
                    let t0 = requests::thread_cpu_ns();
                    let (m, named, plural) =
                        (method.clone(), p.name.is_some(), t.info.plural.clone());
                    let out = write(&worker, method, t, p, &sub, &q, &headers, &body);
                    let ns = requests::thread_cpu_ns().saturating_sub(t0);
                    worker.requests.record_cpu(&m, named, &plural, &sub, ns);
                    out
                })
                .await
                .map_err(|e| ApiError::internal(format!("the request's write failed: {}", e.0)))?
        }
    }
}

/// A response with one `Warning: 299 - "..."` header per warning, as upstream sends them.
fn with_warnings(mut r: Response, checks: &Checks) -> Response {
    for w in &checks.warnings {
        let v = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = http::HeaderValue::from_str(&v) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

/// The verbs that write: create, bindings, evictions, update, patch, delete.
#[allow(clippy::too_many_arguments)]
fn write(
    srv: &ApiServer,
    method: Method,
    t: Target,
    p: ResPath,
    sub: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let info = t.info.clone();
    let mgr = manager(q, headers);
    let mut checks = Checks::new(FieldValidation::parse(
        q.get("fieldValidation").map(String::as_str),
    )?);
    match (method, p.name.as_deref()) {
        (Method::POST, None) if info.plural == "bindings" => {
            let b = body_json(headers, body, "binding")?;
            let pod = b
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let pods = pods_target(srv, &t)?;
            srv.bind(&pods, &pod, &b)?;
            Ok(ok_json(
                StatusCode::CREATED,
                &success_status(json!({"name": pod, "kind": "pods"})),
            ))
        }
        (Method::POST, None) => {
            checks.duplicates = duplicates(headers, body, &checks);
            let body = body_json(headers, body, "create")?;
            let obj = srv.create_checked(&t, body, &mgr, &mut checks)?;
            Ok(with_warnings(
                json_body(StatusCode::CREATED, obj.body()),
                &checks,
            ))
        }
        (Method::POST, Some(name)) if sub == "binding" => {
            srv.bind(&t, name, &body_json(headers, body, "binding")?)?;
            Ok(ok_json(
                StatusCode::CREATED,
                &success_status(json!({"name": name, "kind": "pods"})),
            ))
        }
        (Method::POST, Some(name)) if sub == "eviction" => {
            let ev = body_json(headers, body, "eviction")?;
            let opts = ev
                .get("deleteOptions")
                .map(DeleteOpts::from_body)
                .unwrap_or_default();
            srv.delete(&t, name, &opts)?;
            Ok(ok_json(
                StatusCode::CREATED,
                &success_status(json!({"name": name, "kind": "pods"})),
            ))
        }
        (Method::PUT, Some(name)) => {
            let sub = if sub == "finalize" { "" } else { sub };
            checks.duplicates = duplicates(headers, body, &checks);
            let body = body_json(headers, body, "update")?;
            let obj = srv.update_checked(&t, name, sub, body, &mgr, &mut checks)?;
            Ok(with_warnings(
                json_body(StatusCode::OK, obj.body()),
                &checks,
            ))
        }
        (Method::PATCH, Some(name)) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let kind = PatchType::from_content_type(ct)?;
            if body.len() > decode::MAX_REQUEST_BYTES {
                return Err(decode::too_large(decode::MAX_REQUEST_BYTES));
            }
            let manager = q
                .get("fieldManager")
                .cloned()
                .or_else(|| (kind != PatchType::Apply).then_some(mgr));
            let (obj, created) = srv.patch_checked(
                &t,
                name,
                sub,
                kind,
                body,
                manager.as_deref(),
                truthy(q.get("force")),
                &mut checks,
            )?;
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(with_warnings(json_body(code, obj.body()), &checks))
        }
        (Method::DELETE, Some(name)) => Ok(ok_json(
            StatusCode::OK,
            &srv.delete(&t, name, &delete_opts(q, headers, body)?)?,
        )),
        (Method::DELETE, None) => Ok(ok_json(
            StatusCode::OK,
            &srv.delete_collection(&t, &list_opts(q)?, &delete_opts(q, headers, body)?)?,
        )),
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "{m} is not supported on {}",
            info.plural
        ))),
    }
}

/// A GET answer as the client asked for it: the object or list, a `Table` of it
/// (`kubectl get`'s server-side printing), or its metadata only (`PartialObjectMetadata`).
fn printed(
    srv: &ApiServer,
    t: &Target,
    form: Form,
    q: &HashMap<String, String>,
    body: Value,
    is_list: bool,
) -> Value {
    let api_version = match form {
        Form::Object => return body,
        Form::Metadata(v) if is_list => return partial::list(&body, v),
        Form::Metadata(v) => return partial::object(&body, v),
        Form::Table(v) => v,
    };
    let crd = t.info.crd.as_deref().and_then(|name| {
        srv.store
            .get("apiextensions.k8s.io/customresourcedefinitions", "", name)
    });
    table::convert(
        t,
        crd.as_deref(),
        &body,
        api_version,
        table::Include::parse(q.get("includeObject").map(String::as_str)),
        chrono::Utc::now(),
    )
}

/// Upstream waits up to 3 s for a resourceVersion newer than its own to appear, then answers
/// 504 "Too large resource version" instead of serving stale data as if it were newer.
async fn fresh_enough(srv: &ApiServer, rv: &str) -> Result<(), ApiError> {
    let Ok(want) = rv.parse::<u64>() else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let current = srv.store.current_rv();
        if want <= current {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::new(
                504,
                "Timeout",
                format!("Too large resource version: {want}, current: {current}"),
            )
            .with_details(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            })));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn pods_target(srv: &ApiServer, t: &Target) -> Result<Target, ApiError> {
    let info = srv
        .registry
        .lookup("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not registered"))?;
    Ok(Target {
        info,
        version: "v1".into(),
        namespace: t.namespace.clone(),
    })
}

async fn watch_response(
    srv: Arc<ApiServer>,
    t: Target,
    q: &HashMap<String, String>,
    form: Form,
    name: Option<&str>,
) -> Result<Response, ApiError> {
    let mut fields = q.get("fieldSelector").cloned().unwrap_or_default();
    if let Some(n) = name {
        fields = if fields.is_empty() {
            format!("metadata.name={n}")
        } else {
            format!("{fields},metadata.name={n}")
        };
    }
    if let Some(rv) = q
        .get("resourceVersion")
        .filter(|rv| !rv.is_empty() && *rv != "0")
    {
        fresh_enough(&srv, rv).await?;
    }
    let opts = WatchOpts {
        resource_version: q.get("resourceVersion").cloned(),
        bookmarks: truthy(q.get("allowWatchBookmarks")),
        timeout: q
            .get("timeoutSeconds")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs),
        send_initial_events: q.get("sendInitialEvents").map(|v| v == "true"),
        labels: LabelSelector::parse(
            q.get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?,
        fields: FieldSelector::parse(&fields)?,
        metadata: match form {
            Form::Metadata(v) => Some(v),
            _ => None,
        },
    };
    let rx = watch::start(srv, t, opts)?;
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}
