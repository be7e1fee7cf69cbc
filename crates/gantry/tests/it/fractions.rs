//! GPU fractions on the default paths a user takes first, each as the `gantry` binary runs it:
//! `gantry up` (its in-process scheduler and admission webhook) and the Helm chart installed
//! with its default values into `gantry up --bare` (the chart's admission Deployment, reached
//! by the API server through its Service). On each, a `gpu-fraction: "0.5"` pod and a
//! `gpu-memory: "20000"` pod, as a user writes them, run and their containers print the share
//! the scheduler gave them. (`gantry demo`'s components: crates/demo/tests/it/fractions.rs.)

use gantry_testkit::eventually_secs;
use gantry_testkit::share::{self, Share};

use super::install::{Bare, helm_and_kubectl, kubectl_missing};

type Result<T = ()> = anyhow::Result<T>;

const NODES: &str = "1xH100-80GB:2";

fn repo_file(rel: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// Waits for the node's two GPUs, creates the two pods and checks what they print.
async fn fractions_get_their_share(b: &Bare) -> Result {
    let node_mib = eventually_secs("the node's 2 GPUs advertised and labelled", 180, || async {
        let gpus = b.kubectl(&[
            "get",
            "nodes",
            "-o",
            r"jsonpath={.items[*].status.allocatable.nvidia\.com/gpu}",
        ])?;
        let mib = b.kubectl(&[
            "get",
            "nodes",
            "-o",
            r"jsonpath={.items[*].metadata.labels.nvidia\.com/gpu\.memory}",
        ])?;
        anyhow::Ok((gpus == "2").then(|| share::node_gpu_mib(&mib)).flatten())
    })
    .await?;
    eventually_secs("the scheduler's default queue", 60, || async {
        b.kubectl(&["get", "queue", "default-queue"]).map(|_| true)
    })
    .await?;
    let file = b.dir.path().join("fractions.yaml");
    std::fs::write(&file, share::fraction_pods_yaml("default-queue"))?;
    b.kubectl(&["apply", "-f", &file.to_string_lossy()])?;
    let printed = |name: &'static str| async move {
        let what = format!("pod {name} running and printing its share");
        eventually_secs(&what, 120, || async {
            let phase = b.kubectl(&[
                "-n",
                "default",
                "get",
                "pod",
                name,
                "-o",
                "jsonpath={.status.phase}",
            ])?;
            anyhow::ensure!(phase == "Running", "phase {phase:?}");
            let log = b.kubectl(&["-n", "default", "logs", name])?;
            let lines: Vec<String> = log.lines().map(str::to_string).collect();
            share::parse_share(&lines)
                .map(Some)
                .map_err(anyhow::Error::msg)
        })
        .await
    };
    let half: Share = printed("half").await?;
    let mem: Share = printed("mem").await?;
    share::check_shares(&half, &mem, node_mib).map_err(anyhow::Error::msg)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gantry_up_gives_fractional_pods_their_share() -> Result {
    if kubectl_missing() {
        eprintln!("skipping: kubectl is not installed");
        return Ok(());
    }
    let b = Bare::start_with(&[], Some(NODES))?;
    b.wait_ready(1).await?;
    let crds = std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("crds")
        .output()?;
    anyhow::ensure!(crds.status.success(), "gantry crds failed");
    let file = b.dir.path().join("crds.yaml");
    std::fs::write(&file, &crds.stdout)?;
    b.kubectl(&["apply", "-f", &file.to_string_lossy()])?;
    // The GPU Operator's Helm defaults (naming the demo's time-slicing config), as the
    // quickstart applies them.
    for file in [
        "deploy/examples/demo/01-time-slicing-config.yaml",
        "deploy/examples/clusterpolicy.yaml",
    ] {
        let file = repo_file(file);
        eventually_secs(
            &format!("{file} applied (CRDs established)"),
            60,
            || async { b.kubectl(&["apply", "-f", &file]).map(|_| true) },
        )
        .await?;
    }
    let hooks = b.kubectl(&["get", "mutatingwebhookconfigurations", "-o", "name"])?;
    assert!(hooks.contains("gantry-admission-in-process"), "{hooks}");
    fractions_get_their_share(&b).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_defaults_on_gantry_up_bare_give_fractional_pods_their_share() -> Result {
    let Some(helm) = helm_and_kubectl() else {
        return Ok(());
    };
    let b = Bare::start(Some(NODES))?;
    b.wait_ready(1).await?;
    // Default values: the admission webhook on, called through its Service.
    b.install_chart(helm, &[])?;
    let svc = b.kubectl(&[
        "get",
        "mutatingwebhookconfiguration",
        "gantry-admission",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.service.name}",
    ])?;
    assert_eq!(
        svc, "gantry-admission",
        "the chart's webhook is called through its Service"
    );
    fractions_get_their_share(&b).await?;
    assert_eq!(b.denials()?, 0, "RBAC denials:\n{}", b.denial_log());
    Ok(())
}
