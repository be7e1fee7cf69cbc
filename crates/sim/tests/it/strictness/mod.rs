//! Negative tests: bad input gets the answer the real API server gives (code, reason,
//! field path), through kube-rs and kubectl, and the server stays healthy — also while
//! deeply nested bodies and idle connections hammer it. Each case names the upstream
//! behaviour it mirrors (issue #23, items 1–7).

use gantry_sim::ControlPlaneOptions;
use gantry_testkit::{Cluster, eventually_secs};
use kube::Client;
use std::path::Path;
use std::time::{Duration, Instant};

type Result<T = ()> = anyhow::Result<T>;

const KUBECTL: &str = "/usr/bin/kubectl";
const NS: &str = "/api/v1/namespaces/default";
/// The spec keys the ClusterPolicy CRD requires (as upstream's), empty.
const REQUIRED: &str = r#""operator":{},"daemonsets":{},"driver":{},"toolkit":{},"dcgmExporter":{},"dcgm":{},"nodeStatusExporter":{},"gfd":{}"#;

fn policy(name: &str, spec: &str) -> Vec<u8> {
    format!(r#"{{"apiVersion":"nvidia.com/v1","kind":"ClusterPolicy","metadata":{{"name":"{name}"}},"spec":{{{REQUIRED},{spec}}}}}"#).into_bytes()
}

/// One bad request: what upstream does, and what must come back.
struct Case {
    mirrors: &'static str,
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    code: u16,
    reason: &'static str,
    /// Text the Status message must contain (a field path, usually).
    says: &'static str,
}

fn case(
    mirrors: &'static str,
    method: &'static str,
    path: impl Into<String>,
    body: impl Into<Vec<u8>>,
    code: u16,
    reason: &'static str,
    says: &'static str,
) -> Case {
    Case {
        mirrors,
        method,
        path: path.into(),
        content_type: "application/json",
        body: body.into(),
        code,
        reason,
        says,
    }
}

fn pod(name: &str, spec: serde_json::Value) -> Vec<u8> {
    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
        .to_string()
        .into_bytes()
}

fn with_resources(req: serde_json::Value, lim: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"containers": [{"name": "c", "image": "busybox", "resources": {"requests": req, "limits": lim}}]})
}

fn cm(name: &str, extra: &str) -> Vec<u8> {
    format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"{extra}}},"data":{{"a":"1"}}}}"#).into_bytes()
}

fn deep(levels: usize) -> Vec<u8> {
    let mut s = "{\"a\":".repeat(levels);
    s.push('1');
    s.push_str(&"}".repeat(levels));
    s.into_bytes()
}

fn cases() -> Vec<Case> {
    use serde_json::json;
    let pods = format!("{NS}/pods");
    let cms = format!("{NS}/configmaps");
    let mut big = cm("big", "");
    big.splice(big.len() - 3..big.len() - 3, "x".repeat(1_200_000).bytes());
    vec![
        // 1. selectors
        case(
            "labels.Parse: '!' takes a key, not a requirement",
            "DELETE",
            format!("{cms}?labelSelector=%21app%3Dweb"),
            "",
            400,
            "BadRequest",
            "!app=web",
        ),
        case(
            "labels.Parse rejects unbalanced input",
            "GET",
            format!("{cms}?labelSelector=%21%21%21%28%28%28"),
            "",
            400,
            "BadRequest",
            "",
        ),
        case(
            "fields.ParseSelector needs an operator",
            "GET",
            format!("{cms}?fieldSelector=metadata.name"),
            "",
            400,
            "BadRequest",
            "",
        ),
        // 2. nesting: JSON decoding only, depth-limited, never retried as YAML
        case(
            "json decoding fails fast on deep nesting",
            "POST",
            cms.clone(),
            deep(150_000),
            400,
            "BadRequest",
            "levels deep",
        ),
        case(
            "JSON content is decoded as JSON only (trailing comma)",
            "POST",
            cms.clone(),
            r#"{"metadata":{"name":"t"},}"#,
            400,
            "BadRequest",
            "not valid JSON",
        ),
        case(
            "YAML is not accepted under a JSON content type",
            "POST",
            cms.clone(),
            "metadata:\n  name: y\n",
            400,
            "BadRequest",
            "not valid JSON",
        ),
        // 5. core validation
        case(
            "ValidateNonnegativeQuantity on requests",
            "POST",
            pods.clone(),
            pod("neg", with_resources(json!({"cpu": "-32"}), json!({}))),
            422,
            "Invalid",
            "spec.containers[0].resources.requests[cpu]",
        ),
        case(
            "resource.ParseQuantity at decode",
            "POST",
            pods.clone(),
            pod("lots", with_resources(json!({"memory": "lots"}), json!({}))),
            400,
            "BadRequest",
            "cannot be handled as a Pod",
        ),
        case(
            "extended resources are non-negative",
            "POST",
            pods.clone(),
            pod(
                "gneg",
                with_resources(
                    json!({"nvidia.com/gpu": "-1"}),
                    json!({"nvidia.com/gpu": "-1"}),
                ),
            ),
            422,
            "Invalid",
            "requests[nvidia.com/gpu]",
        ),
        case(
            "extended resources must be integers",
            "POST",
            pods.clone(),
            pod(
                "gfrac",
                with_resources(
                    json!({"nvidia.com/gpu": "1.5"}),
                    json!({"nvidia.com/gpu": "1.5"}),
                ),
            ),
            422,
            "Invalid",
            "must be an integer",
        ),
        case(
            "ValidatePodSpec: containers required",
            "POST",
            pods.clone(),
            pod("empty", json!({"containers": []})),
            422,
            "Invalid",
            "spec.containers: Required value",
        ),
        case(
            "typed decoding: spec is a PodSpec",
            "POST",
            pods.clone(),
            pod("str", json!("x")),
            400,
            "BadRequest",
            "cannot be handled as a Pod",
        ),
        case(
            "ValidateObjectMeta: DNS-1123 subdomain names",
            "POST",
            cms.clone(),
            cm("dots..dots", ""),
            422,
            "Invalid",
            "metadata.name",
        ),
        case(
            "ObjectMeta decoding: labels are strings",
            "POST",
            cms.clone(),
            cm("l", r#","labels":{"a":1}"#),
            400,
            "BadRequest",
            "metadata.labels",
        ),
        case(
            "ObjectMeta decoding of custom resources: labels are strings",
            "POST",
            "/apis/nvidia.com/v1/clusterpolicies",
            {
                let mut p: serde_json::Value =
                    serde_json::from_slice(&policy("lbl", r#""devicePlugin":{}"#))
                        .unwrap_or_default();
                p["metadata"]["labels"] = json!({"a": 1});
                p.to_string()
            },
            400,
            "BadRequest",
            "metadata.labels",
        ),
        Case {
            content_type: "application/merge-patch+json",
            ..case(
                "labels are strings on update too (merge patch of an existing object)",
                "PATCH",
                format!("{NS}/serviceaccounts/sa"),
                r#"{"metadata":{"labels":{"tier":1}}}"#,
                400,
                "BadRequest",
                "metadata.labels",
            )
        },
        case(
            "ValidateLabels: qualified keys",
            "POST",
            cms.clone(),
            cm("k", r#","labels":{"bad key":"x"}"#),
            422,
            "Invalid",
            "metadata.labels",
        ),
        case(
            "apiVersion must match the URL",
            "POST",
            cms.clone(),
            r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"av"}}"#,
            400,
            "BadRequest",
            "does not match the expected API version",
        ),
        case(
            "MaxRequestBodyBytes (3 MiB)",
            "POST",
            cms.clone(),
            vec![b' '; 4 << 20],
            413,
            "RequestEntityTooLarge",
            "limit is 3145728",
        ),
        case(
            "ValidateConfigMap: data at most 1 MiB",
            "POST",
            cms.clone(),
            big,
            422,
            "Invalid",
            "Too long",
        ),
        case(
            "watch cache: too large resource version",
            "GET",
            format!("{cms}?watch=1&resourceVersion=99999999"),
            "",
            504,
            "Timeout",
            "Too large resource version",
        ),
        case(
            "fieldValidation=Strict on built-in kinds: the strict decoder names unknown fields",
            "POST",
            format!("{pods}?fieldValidation=Strict"),
            pod(
                "strict",
                json!({"containers": [{"name": "c", "image": "busybox", "imagePullPolicyy": "Always"}]}),
            ),
            400,
            "BadRequest",
            "strict decoding error: unknown field \"spec.containers[0].imagePullPolicyy\"",
        ),
        case(
            "watch cache: too large resource version (list with resourceVersionMatch=NotOlderThan)",
            "GET",
            format!("{cms}?resourceVersion=99999999&resourceVersionMatch=NotOlderThan"),
            "",
            504,
            "Timeout",
            "Too large resource version",
        ),
        case(
            "fieldValidation takes Ignore, Warn or Strict",
            "POST",
            format!("{cms}?fieldValidation=Sometimes"),
            cm("fv", ""),
            400,
            "BadRequest",
            "fieldValidation",
        ),
        Case {
            content_type: "text/plain",
            ..case(
                "unknown content types are 415",
                "POST",
                cms.clone(),
                cm("ct", ""),
                415,
                "UnsupportedMediaType",
                "",
            )
        },
        // 4. CRD structural schemas (the ClusterPolicy CRD is installed first)
        case(
            "CRD enum",
            "POST",
            "/apis/nvidia.com/v1/clusterpolicies",
            policy("p1", r#""devicePlugin":{},"mig":{"strategy":"sometimes"}"#),
            422,
            "Invalid",
            "spec.mig.strategy: Unsupported value: \"sometimes\"",
        ),
        case(
            "CRD types",
            "POST",
            "/apis/nvidia.com/v1/clusterpolicies",
            policy("p2", r#""devicePlugin":{"enabled":"yes"}"#),
            422,
            "Invalid",
            "spec.devicePlugin.enabled",
        ),
        case(
            "fieldValidation=Strict: unknown fields are errors",
            "POST",
            "/apis/nvidia.com/v1/clusterpolicies?fieldValidation=Strict",
            policy("p3", r#""devicePlugin":{"enabeld":true}"#),
            400,
            "BadRequest",
            "strict decoding error: unknown field \"spec.devicePlugin.enabeld\"",
        ),
    ]
}

async fn send(
    client: &Client,
    method: &str,
    path: &str,
    ct: &str,
    body: Vec<u8>,
) -> Result<(u16, serde_json::Value)> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(body)?;
    let answer = tokio::time::timeout(Duration::from_secs(60), client.request_text(req))
        .await
        .map_err(|_| anyhow::anyhow!("{method} {path}: no answer within 60 s"))?;
    match answer {
        Ok(text) => Ok((
            200,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )),
        Err(kube::Error::Api(s)) => Ok((
            s.code,
            serde_json::json!({"reason": s.reason, "message": s.message}),
        )),
        Err(e) => Err(e.into()),
    }
}

async fn ready_in(client: &Client) -> Result<Duration> {
    let t = Instant::now();
    let req = http::Request::get("/readyz").body(Vec::new())?;
    let text = tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await??;
    anyhow::ensure!(text == "ok", "/readyz said {text}");
    Ok(t.elapsed())
}

mod attacks;
mod files;
mod requests;
