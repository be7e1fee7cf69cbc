//! Kill -9 durability: a server process on a SQLite data dir acknowledges N creates, is
//! killed with SIGKILL, restarts on the same dir, and still has all N at their versions.
//! The server runs in a child process: this test binary re-executed on `child_server`.

use gantry_sim::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const DIR_ENV: &str = "GANTRY_DURABILITY_DATA_DIR";

#[test]
#[ignore = "helper process for sigkill_loses_no_acknowledged_write"]
fn child_server() -> anyhow::Result<()> {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return Ok(());
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let cp = ControlPlane::start(ControlPlaneOptions {
            data_dir: Some(PathBuf::from(dir)),
            ..Default::default()
        })
        .await?;
        println!("READY {}", cp.kubeconfig_path().display());
        std::future::pending::<()>().await;
        Ok(())
    })
}

/// Starts the child server; returns it and its kubeconfig path.
fn spawn_server(dir: &Path) -> anyhow::Result<(Child, PathBuf)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "durability::child_server",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("child has no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        // libtest prints `test child_server ... ` before it, on the same line.
        let line = line?;
        if let Some((_, path)) = line.split_once("READY ") {
            // Keep draining the child's stdout so it never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return Ok((child, PathBuf::from(path)));
        }
    }
    let _ = child.kill();
    anyhow::bail!("child server exited before it was ready")
}

async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_write() -> anyhow::Result<()> {
    const N: usize = 300;
    let dir = tempfile::tempdir()?;
    let (mut child, kubeconfig) = spawn_server(dir.path())?;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&kubeconfig).await?);
    let mut acked = BTreeMap::new();
    for i in 0..N {
        let cm: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": format!("d{i}")}, "data": {"i": i.to_string()}}),
        )?;
        let created = api.create(&PostParams::default(), &cm).await?;
        acked.insert(
            format!("d{i}"),
            created.metadata.resource_version.unwrap_or_default(),
        );
    }
    // Child::kill sends SIGKILL on Unix: no shutdown code runs.
    child.kill()?;
    child.wait()?;

    let (mut child, kubeconfig) = spawn_server(dir.path())?;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&kubeconfig).await?);
    let list = api.list(&ListParams::default()).await?;
    let found: BTreeMap<String, String> = list
        .items
        .into_iter()
        .filter_map(|c| Some((c.metadata.name?, c.metadata.resource_version?)))
        .collect();
    child.kill()?;
    child.wait()?;
    assert_eq!(found.len(), N, "objects lost across SIGKILL");
    assert_eq!(found, acked);
    // Versions keep increasing after the restart.
    let last: u64 = acked
        .values()
        .filter_map(|v| v.parse().ok())
        .max()
        .unwrap_or(0);
    let rv: u64 = list.metadata.resource_version.unwrap_or_default().parse()?;
    assert!(rv >= last);
    Ok(())
}
