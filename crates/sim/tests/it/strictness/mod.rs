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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_upstream_answers() -> Result {
    let env = Cluster::builder().crds().start().await?;
    let (cp, client) = (env.cp(), env.client().clone());
    let (code, sa) = send(
        &client,
        "POST",
        &format!("{NS}/serviceaccounts"),
        "application/json",
        br#"{"metadata":{"name":"sa"}}"#.to_vec(),
    )
    .await?;
    assert_eq!(code, 200, "{sa}");
    for c in cases() {
        let t = Instant::now();
        // A client of its own per case: a refused body (413) ends its connection, and a pooled
        // connection the server has closed must not stall the next case. Without kube's retry
        // of 429/503/504: the 504 "Too large resource version" is the answer under test.
        let mut cfg = cp.kube_config()?;
        cfg.default_retry = false;
        let own = Client::try_from(cfg)?;
        let (code, status) = send(&own, c.method, &c.path, c.content_type, c.body).await?;
        let msg = status["message"].as_str().unwrap_or_default();
        assert_eq!(
            (code, status["reason"].as_str().unwrap_or_default()),
            (c.code, c.reason),
            "{}: {msg}",
            c.mirrors
        );
        assert!(
            msg.contains(c.says),
            "{}: {msg:?} should say {:?}",
            c.mirrors,
            c.says
        );
        // A new connection each time: a 413 closes the connection its body came on.
        let ready = ready_in(&cp.client()?)
            .await
            .map_err(|e| anyhow::anyhow!("{}: unhealthy afterwards: {e}", c.mirrors))?;
        println!(
            "{:>3} {:<22} {:>9.1?} then /readyz {ready:?}: {}",
            c.code,
            c.reason,
            t.elapsed(),
            c.mirrors
        );
    }
    // Nothing bad was stored, and the valid forms still work.
    let (code, list) = send(
        &client,
        "GET",
        &format!("{NS}/configmaps"),
        "application/json",
        vec![],
    )
    .await?;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
    let (code, _) = send(
        &client,
        "POST",
        &format!("{NS}/configmaps"),
        "application/yaml",
        b"metadata:\n  name: from-yaml\n".to_vec(),
    )
    .await?;
    assert_eq!(code, 200, "YAML under a YAML content type");
    let body = policy(
        "ok",
        r#""mig":{"strategy":"mixed"},"devicePlugin":{"enabeld":true}"#,
    );
    let (code, cp_obj) = send(
        &client,
        "POST",
        "/apis/nvidia.com/v1/clusterpolicies",
        "application/json",
        body,
    )
    .await?;
    assert_eq!(code, 200, "{cp_obj}");
    assert!(
        cp_obj.pointer("/spec/devicePlugin/enabeld").is_none(),
        "unknown field pruned: {cp_obj}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_schema_errors_and_warnings() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Cluster::builder().crds().start().await?;
    let (cp, dir) = (env.cp(), env.dir());
    let run = |args: Vec<String>| {
        let kc = cp.kubeconfig_path().to_path_buf();
        let home = dir.to_path_buf();
        async move {
            let out = tokio::process::Command::new(KUBECTL)
                .arg("--kubeconfig")
                .arg(kc)
                .args(args)
                .env("HOME", home)
                .output()
                .await?;
            anyhow::Ok((
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ))
        }
    };
    let file = dir.join("cp.yaml");
    std::fs::write(
        &file,
        "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata:\n  name: cluster-policy\nspec:\n  devicePlugin:\n    enabeld: true\n  operator: {}\n  daemonsets: {}\n  driver: {}\n  toolkit: {}\n  dcgmExporter: {}\n  dcgm: {}\n  nodeStatusExporter: {}\n  gfd: {}\n",
    )?;
    let f = file.display().to_string();
    let (ok, err) = run(vec![
        "apply".into(),
        "--validate=strict".into(),
        "-f".into(),
        f.clone(),
    ])
    .await?;
    assert!(
        !ok && err.contains("unknown field \"spec.devicePlugin.enabeld\""),
        "strict: {err}"
    );
    let (ok, err) = run(vec![
        "apply".into(),
        "--validate=warn".into(),
        "-f".into(),
        f.clone(),
    ])
    .await?;
    assert!(
        ok && err.contains("Warning: unknown field \"spec.devicePlugin.enabeld\""),
        "warn: {err}"
    );
    // Built-in kinds too: upstream's strict decoder refuses, the default mode warns.
    let cm = dir.join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\ndatta:\n  a: \"1\"\n",
    )?;
    let c = cm.display().to_string();
    let (ok, err) = run(vec![
        "apply".into(),
        "--validate=strict".into(),
        "-f".into(),
        c.clone(),
    ])
    .await?;
    assert!(
        !ok && err.contains("unknown field \"datta\""),
        "strict ConfigMap: {err}"
    );
    let (ok, err) = run(vec![
        "apply".into(),
        "--validate=warn".into(),
        "-f".into(),
        c,
    ])
    .await?;
    assert!(
        ok && err.contains("Warning: unknown field \"datta\""),
        "warn ConfigMap: {err}"
    );
    let (ok, err) = run(vec![
        "patch".into(),
        "clusterpolicy".into(),
        "cluster-policy".into(),
        "--type=merge".into(),
        "-p".into(),
        r#"{"spec":{"mig":{"strategy":"sometimes"}}}"#.into(),
    ])
    .await?;
    assert!(
        !ok && err.contains("spec.mig.strategy: Unsupported value: \"sometimes\""),
        "enum: {err}"
    );
    Ok(())
}

/// The issue's bound for `/readyz` under attack.
const READY_WITHIN: Duration = Duration::from_millis(100);

/// Twenty `/readyz` answers on `client`; each must come within 1 s, and 18 of them within
/// [`READY_WITHIN`]. (The slack is for the test process itself being descheduled on a shared
/// 2-core machine, which no server change prevents; the failure this guards against held
/// every answer for tens of seconds.)
async fn readyz_samples(client: &Client, during: &str) -> Result<Vec<Duration>> {
    let mut took = Vec::new();
    for _ in 0..20 {
        let t = ready_in(client).await?;
        anyhow::ensure!(t < Duration::from_secs(1), "{during}: /readyz took {t:?}");
        took.push(t);
    }
    took.sort();
    let fast = took.iter().filter(|t| **t <= READY_WITHIN).count();
    anyhow::ensure!(
        fast >= 18,
        "{during}: only {fast} of 20 /readyz answers within {READY_WITHIN:?}: {took:?}"
    );
    Ok(took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_during_nesting_and_idle_connection_attacks() -> Result {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = Cluster::builder().start().await?;
    let (cp, client) = (env.cp(), env.client().clone());
    ready_in(&client).await?;
    // Two clients keep sending 720 KB `{"a":{"a":...}}` bodies (the issue's freeze: 77 s).
    let refused = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..2)
        .map(|_| {
            let c = client.clone();
            let refused = refused.clone();
            tokio::spawn(async move {
                loop {
                    if let Ok((400, _)) = send(
                        &c,
                        "POST",
                        &format!("{NS}/configmaps"),
                        "application/json",
                        deep(120_000),
                    )
                    .await
                    {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // The attack is under way before and while /readyz is sampled.
    eventually_secs("the nesting attack has started", 30, || async {
        anyhow::Ok(refused.load(Ordering::Relaxed) > 0)
    })
    .await?;
    // Sample in rounds until a round overlapped an answered attack body (a round of 20 fast
    // answers can fall between two slow refusals); every round must meet the bound.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (took, during) = loop {
        let before = refused.load(Ordering::Relaxed);
        let took = readyz_samples(&client, "nesting attack").await;
        let during = refused.load(Ordering::Relaxed) - before;
        match took {
            Ok(t) if during == 0 && std::time::Instant::now() < deadline => drop(t),
            took => break (took, during),
        }
    };
    attackers.iter().for_each(|a| a.abort());
    let took = took?;
    assert!(
        during > 0,
        "no attack body was answered while /readyz was sampled"
    );
    println!(
        "/readyz during the nesting attack ({during} bodies refused meanwhile): median {:?}, slowest {:?}",
        took[10], took[19]
    );
    // Idle connections that never start TLS: the server keeps answering others.
    let mut idle = Vec::new();
    for _ in 0..500 {
        idle.push(tokio::net::TcpStream::connect(cp.addr()).await?);
    }
    let took = readyz_samples(&cp.client()?, "500 idle connections").await?;
    println!(
        "/readyz on a new client with 500 idle connections open: median {:?}, slowest {:?}",
        took[10], took[19]
    );
    drop(idle);
    Ok(())
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_credential_files_are_private() -> Result {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("state");
    let env = Cluster::builder()
        .options(ControlPlaneOptions {
            data_dir: Some(dir.clone()),
            ..Default::default()
        })
        .start()
        .await?;
    let (cp, client) = (env.cp(), env.client().clone());
    let secret =
        br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"k":"v"}}"#;
    let (code, _) = send(
        &client,
        "POST",
        &format!("{NS}/secrets"),
        "application/json",
        secret.to_vec(),
    )
    .await?;
    assert_eq!(code, 200);
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode(&dir)?, 0o700, "data dir");
    for f in [
        "state.db",
        "state.db-wal",
        "kubeconfig",
        "token",
        "server.key",
        "ca.crt",
        "server.crt",
    ] {
        assert_eq!(mode(&dir.join(f))?, 0o600, "{f}");
    }
    // A wrong token of the right length is refused like any other.
    let mut cfg = cp.kube_config()?;
    cfg.auth_info.token = Some("0".repeat(cp.token().len()).into());
    let (code, _) = send(
        &Client::try_from(cfg)?,
        "GET",
        "/api/v1/namespaces",
        "application/json",
        vec![],
    )
    .await?;
    assert_eq!(code, 401);
    Ok(())
}
