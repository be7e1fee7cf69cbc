//! Two in-memory `gantry up --nodes …` in one process: each has its own state directory and
//! control socket, so a fault sent to one never reaches the other's GPUs.

use gantry_sim::cluster::{self, Fault, control};
use gantry_sim::{ControlPlane, ControlPlaneOptions};
use gantry_testkit::eventually_secs;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

type Result<T = ()> = anyhow::Result<T>;

fn ready(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_in_memory_ups_run_side_by_side() -> Result {
    let cp1 = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let cp2 = ControlPlane::start(ControlPlaneOptions::default()).await?;
    let up1 = cluster::up(&cp1, None, "1xL4:1").await?;
    let up2 = cluster::up(&cp2, None, "1xL4:1").await?;
    let (root1, root2) = (
        up1.cluster.root().to_path_buf(),
        up2.cluster.root().to_path_buf(),
    );
    assert_ne!(root1, root2);
    assert_ne!(up1.cluster.control_socket(), up2.cluster.control_socket());
    for r in [&root1, &root2] {
        assert!(
            r.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(cluster::TEMP_PREFIX)),
            "{}",
            r.display()
        );
        assert!(
            cluster::running_temp_sims().iter().any(|s| &s.dir == r),
            "{} not found running",
            r.display()
        );
    }
    // Each records its API server, so `gantry sim fault` can pick the one kubectl talks to.
    let running = cluster::running_temp_sims();
    let server_of = |r: &std::path::Path| {
        running
            .iter()
            .find(|s| s.dir == r)
            .and_then(|s| s.server.clone())
    };
    assert_eq!(server_of(&root1), Some(cp1.base_url()));
    assert_eq!(server_of(&root2), Some(cp2.base_url()));

    // Through the first one's socket, as `gantry sim fault --sim-dir` sends it.
    let msg = control::send(
        &root1,
        &control::Request {
            node: "l4-0".into(),
            fault: Fault::OffBus { gpu: 0 },
        },
    )
    .await?;
    assert!(msg.contains("fell off the bus"), "{msg}");
    let gpu = |up: &cluster::Up| {
        up.cluster
            .node("l4-0")
            .and_then(|n| n.backend.clone())
            .map(|b| b.is_lost(0))
    };
    assert!(matches!(gpu(&up1), Some(Ok(true))));
    assert!(
        matches!(gpu(&up2), Some(Ok(false))),
        "the other cluster's GPU is untouched"
    );

    // Power off the second one's node: only its node goes Unknown.
    control::send(
        &root2,
        &control::Request {
            node: "l4-0".into(),
            fault: Fault::PowerOff,
        },
    )
    .await?;
    let nodes2: Api<Node> = Api::all(cp2.client()?);
    let nodes1: Api<Node> = Api::all(cp1.client()?);
    eventually_secs("cluster 2's node not Ready", 90, || async {
        let n = nodes2.get("l4-0").await?;
        anyhow::Ok(ready(&n).filter(|s| s != "True"))
    })
    .await?;
    assert_eq!(ready(&nodes1.get("l4-0").await?).as_deref(), Some("True"));

    // Each cleans up its own directory.
    drop(up1);
    assert!(!root1.exists(), "{} left behind", root1.display());
    assert!(root2.exists());
    Ok(())
}
