//! Bad requests through the raw client and kubectl get upstream's code, reason and field path.

use super::*;

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
