//! Writes a real API server refuses, answered as it answers them (issue #44): annotation
//! size, ConfigMap key syntax, repeated JSON keys under `fieldValidation`, a body naming
//! another namespace, strategic-merge `$patch` directives, and RBAC's escalation check.

use gantry_testkit::Cluster;
use kube::Client;
use serde_json::{Value, json};

type Result<T = ()> = anyhow::Result<T>;

const NS: &str = "/api/v1/namespaces/default";

/// Sends one request; the code and the body (or the Status's reason and message), and the
/// `Warning` headers.
async fn send(
    client: &Client,
    method: &str,
    path: &str,
    ct: &str,
    body: impl Into<Vec<u8>>,
) -> Result<(u16, Value, Vec<String>)> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(kube::client::Body::from(body.into()))?;
    let resp = client.send(req).await?;
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await?
        .to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Ok((code, body, warnings))
}

async fn post(client: &Client, path: &str, body: Value) -> Result<(u16, Value, Vec<String>)> {
    send(client, "POST", path, "application/json", body.to_string()).await
}

fn says(body: &Value) -> (&str, &str) {
    (
        body["reason"].as_str().unwrap_or_default(),
        body["message"].as_str().unwrap_or_default(),
    )
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_rules_are_upstreams() -> Result {
    let env = Cluster::builder().start().await?;
    let c = env.client().clone();
    let cms = format!("{NS}/configmaps");
    // metadata.annotations: 256 KiB in all (keys and values).
    let mut big = cm("big", json!({"a": "1"}));
    big["metadata"]["annotations"] = json!({"note": "x".repeat(300 << 10)});
    let (code, body, _) = post(&c, &cms, big).await?;
    assert_eq!((code, says(&body).0), (422, "Invalid"), "{body}");
    assert_eq!(
        says(&body).1,
        "ConfigMap \"big\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes"
    );
    let mut fits = cm("fits", json!({"a": "1"}));
    fits["metadata"]["annotations"] = json!({"note": "x".repeat(250 << 10)});
    assert_eq!(post(&c, &cms, fits).await?.0, 201);
    // ConfigMap keys: alphanumerics, '-', '_', '.'; never '.', '..' or a '..' prefix.
    let (code, body, _) = post(&c, &cms, cm("cyrillic", json!({"ключ": "v"}))).await?;
    assert_eq!((code, says(&body).0), (422, "Invalid"), "{body}");
    assert_eq!(
        says(&body).1,
        "ConfigMap \"cyrillic\" is invalid: data[ключ]: Invalid value: \"ключ\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    );
    let (code, body, _) = post(&c, &cms, cm("dots", json!({"..": "v"}))).await?;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        says(&body).1,
        "ConfigMap \"dots\" is invalid: data[..]: Invalid value: \"..\": must not be '..'"
    );
    let mut both = cm("both", json!({"k": "v"}));
    both["binaryData"] = json!({"k": "dg=="});
    let (code, body, _) = post(&c, &cms, both).await?;
    assert_eq!(code, 422, "{body}");
    assert!(
        says(&body)
            .1
            .contains("duplicate of key present in binaryData"),
        "{body}"
    );
    let (code, body, _) = post(&c, &cms, cm("fine", json!({"key.name_-1": "v"}))).await?;
    assert_eq!(code, 201, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_json_keys_follow_field_validation() -> Result {
    let env = Cluster::builder().start().await?;
    let c = env.client().clone();
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup"},"data":{"a":"1","a":"2"}}"#;
    let (code, status, _) = send(
        &c,
        "POST",
        &format!("{NS}/configmaps?fieldValidation=Strict"),
        "application/json",
        body,
    )
    .await?;
    assert_eq!((code, says(&status).0), (400, "BadRequest"), "{status}");
    assert_eq!(
        says(&status).1,
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: duplicate field \"data.a\""
    );
    // Warn (the default): stored with the last value, and a warning.
    let (code, stored, warnings) = send(
        &c,
        "POST",
        &format!("{NS}/configmaps"),
        "application/json",
        body,
    )
    .await?;
    assert_eq!(code, 201, "{stored}");
    assert_eq!(stored["data"], json!({"a": "2"}));
    assert_eq!(warnings, vec![r#"299 - "duplicate field \"data.a\"""#]);
    // Ignore: silently.
    let (code, _, warnings) = send(
        &c,
        "PUT",
        &format!("{NS}/configmaps/dup?fieldValidation=Ignore"),
        "application/json",
        body,
    )
    .await?;
    assert_eq!((code, warnings.len()), (200, 0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_naming_another_namespace_is_refused() -> Result {
    let env = Cluster::builder().namespace("other").start().await?;
    let c = env.client().clone();
    assert_eq!(
        post(
            &c,
            &format!("{NS}/configmaps"),
            cm("here", json!({"a": "1"}))
        )
        .await?
        .0,
        201
    );
    let mut moved = cm("here", json!({"a": "2"}));
    moved["metadata"]["namespace"] = json!("other");
    for (method, path) in [
        ("PUT", format!("{NS}/configmaps/here")),
        ("POST", format!("{NS}/configmaps")),
    ] {
        let (code, body, _) =
            send(&c, method, &path, "application/json", moved.to_string()).await?;
        assert_eq!(
            (code, says(&body).0),
            (400, "BadRequest"),
            "{method}: {body}"
        );
        assert_eq!(
            says(&body).1,
            "the namespace of the provided object does not match the namespace sent on the request"
        );
    }
    let (code, body, _) = send(
        &c,
        "GET",
        "/api/v1/namespaces/other/configmaps/here",
        "",
        "",
    )
    .await?;
    assert_eq!(code, 404, "nothing moved: {body}");
    let (_, here, _) = send(&c, "GET", &format!("{NS}/configmaps/here"), "", "").await?;
    assert_eq!(here["data"], json!({"a": "1"}));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_directives_apply_as_upstream() -> Result {
    let env = Cluster::builder().start().await?;
    let c = env.client().clone();
    let path = format!("{NS}/configmaps/c");
    let smp = |body: Value| {
        let (c, path) = (c.clone(), path.clone());
        async move {
            send(
                &c,
                "PATCH",
                &path,
                "application/strategic-merge-patch+json",
                body.to_string(),
            )
            .await
        }
    };
    let mut obj = cm("c", json!({"a": "1", "b": "2"}));
    obj["metadata"]["labels"] = json!({"x": "1", "y": "2"});
    obj["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"]);
    assert_eq!(post(&c, &format!("{NS}/configmaps"), obj).await?.0, 201);
    // A top-level delete leaves an empty object, which no longer names this one: 400.
    let (code, body, _) = smp(json!({"$patch": "delete"})).await?;
    assert_eq!((code, says(&body).0), (400, "BadRequest"), "{body}");
    assert_eq!(
        says(&body).1,
        "the name of the object () does not match the name on the URL (c)"
    );
    let (code, body, _) = smp(json!({"$patch": "replace", "data": {"z": "9"}})).await?;
    assert_eq!(code, 400, "a replaced object without metadata: {body}");
    let (_, now, _) = send(&c, "GET", &path, "", "").await?;
    assert_eq!(
        now["data"],
        json!({"a": "1", "b": "2"}),
        "nothing was wiped"
    );
    // Inside a map: replace swaps the map, delete removes it.
    let (code, now, _) = smp(json!({"data": {"$patch": "replace", "z": "9"}})).await?;
    assert_eq!((code, &now["data"]), (200, &json!({"z": "9"})), "{now}");
    let (code, now, _) = smp(json!({"data": {"$patch": "delete"}})).await?;
    assert_eq!(code, 200, "{now}");
    assert!(now.get("data").is_none(), "{now}");
    // $retainKeys clears the keys it does not list, then the patch merges in.
    let (code, now, _) =
        smp(json!({"metadata": {"labels": {"$retainKeys": ["x"], "z": "3"}}})).await?;
    assert_eq!(code, 200, "{now}");
    assert_eq!(now["metadata"]["labels"], json!({"x": "1", "z": "3"}));
    let (code, now, _) =
        smp(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a"]}}))
            .await?;
    assert_eq!(
        (code, &now["metadata"]["finalizers"]),
        (200, &json!(["example.com/b"]))
    );
    Ok(())
}

/// A client whose token is the ServiceAccount `name`'s (the TokenRequest API).
async fn as_service_account(env: &Cluster, ns: &str, name: &str) -> Result<Client> {
    let admin = env.client();
    let (code, body, _) = post(
        admin,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        json!({"metadata": {"name": name}}),
    )
    .await?;
    anyhow::ensure!(code == 201, "{body}");
    let (code, tr, _) = post(
        admin,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
    )
    .await?;
    anyhow::ensure!(code == 201, "{tr}");
    let mut cfg = env.cp().kube_config()?;
    cfg.auth_info.token = tr["status"]["token"].as_str().map(|t| t.to_string().into());
    Ok(Client::try_from(cfg)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_refuses_granting_what_the_granter_lacks() -> Result {
    let env = Cluster::builder().start().await?;
    let admin = env.client().clone();
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    let role = |name: &str, rules: Value| json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules});
    let binding = |name: &str, role: &str, sa: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}]})
    };
    let binder = as_service_account(&env, "default", "binder").await?;
    for (path, body) in [
        (
            "roles",
            role(
                "binder",
                json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"], "verbs": ["create"]}]),
            ),
        ),
        (
            "roles",
            role(
                "secrets",
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]),
            ),
        ),
        (
            "roles",
            role(
                "binding-creator",
                json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["create"]}]),
            ),
        ),
        ("rolebindings", binding("binder", "binder", "binder")),
    ] {
        let (code, b, _) = post(&admin, &format!("{rbac}/{path}"), body).await?;
        assert_eq!(code, 201, "{b}");
    }
    // The ServiceAccount may create RoleBindings, but not to a role granting what it lacks.
    let (code, body, _) = post(
        &binder,
        &format!("{rbac}/rolebindings"),
        binding("steal", "secrets", "binder"),
    )
    .await?;
    assert_eq!((code, says(&body).0), (403, "Forbidden"), "{body}");
    assert_eq!(
        says(&body).1,
        "rolebindings.rbac.authorization.k8s.io \"steal\" is forbidden: user \"system:serviceaccount:default:binder\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:default\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
    );
    let (code, _, _) = send(&binder, "GET", &format!("{NS}/secrets"), "", "").await?;
    assert_eq!(code, 403, "and it still cannot read Secrets");
    // A role whose every permission it holds may be bound, and so may a role it has `bind` on.
    let (code, body, _) = post(
        &binder,
        &format!("{rbac}/rolebindings"),
        binding("fine", "binding-creator", "binder"),
    )
    .await?;
    assert_eq!(code, 201, "{body}");
    // Creating a Role with rules it lacks is escalation too, unless it has `escalate`.
    let (code, body, _) = post(
        &binder,
        &format!("{rbac}/roles"),
        role(
            "mine",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        ),
    )
    .await?;
    assert_eq!((code, says(&body).0), (403, "Forbidden"), "{body}");
    assert!(
        says(&body)
            .1
            .starts_with("roles.rbac.authorization.k8s.io \"mine\" is forbidden: user"),
        "{body}"
    );
    let (code, b, _) = post(&admin, &format!("{rbac}/roles"), role("may-bind", json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "resourceNames": ["secrets"], "verbs": ["bind"]}]))).await?;
    assert_eq!(code, 201, "{b}");
    let (code, b, _) = post(
        &admin,
        &format!("{rbac}/rolebindings"),
        binding("may-bind", "may-bind", "binder"),
    )
    .await?;
    assert_eq!(code, 201, "{b}");
    let (code, body, _) = post(
        &binder,
        &format!("{rbac}/rolebindings"),
        binding("granted", "secrets", "binder"),
    )
    .await?;
    assert_eq!(code, 201, "bind on the role allows binding it: {body}");
    let (code, _, _) = send(&binder, "GET", &format!("{NS}/secrets"), "", "").await?;
    assert_eq!(code, 200);
    Ok(())
}
