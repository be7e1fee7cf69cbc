//! The state and credential files the server writes are private to their owner.

use super::*;

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
