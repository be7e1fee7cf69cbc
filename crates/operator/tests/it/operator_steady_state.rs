//! Steady state: with 200 simulated GPU nodes labelled and their operands deployed, a fresh
//! operator's full resync (every node, object and status compared) sends zero writes.

use crate::support;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_of_200_gpu_nodes_makes_zero_writes() -> Res {
    // Shown only when the test fails: which cache or reconcile got stuck.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("gantry_operator=debug,kube_runtime=debug")
        .try_init();
    let env = Env::start("200xT4:1").await?;
    let first = env.operator()?;
    // Operands this test does not need are off so 200 nodes stay cheap.
    let mut policy = fixture("clusterpolicy-minimal.yaml")?;
    for (k, v) in [
        ("driver", json!({"enabled": false})),
        ("dcgmExporter", json!({"enabled": false})),
        ("dcgm", json!({"enabled": false})),
        ("gfd", json!({"enabled": false})),
        ("migManager", json!({"enabled": false})),
        ("nodeStatusExporter", json!({"enabled": false})),
    ] {
        policy["spec"][k] = v;
    }
    env.create_policy(policy).await?;
    // Settled: every node labelled and the operator idle for a while.
    eventually_secs("200 GPU nodes labelled", 300, || {
        let m = first.metrics.clone();
        async move {
            m.render()
                .contains("gpu_operator_gpu_nodes_total 200")
                .then_some(())
        }
    })
    .await?;
    // The operands' pods come up after the labels; a status that still says notReady would
    // rightly be rewritten by the next operator, so settle on ready first.
    // 600 operand pods on 200 nodes: on a saturated machine this is the slow part.
    eventually_secs("policy ready", 420, || {
        let c = env.client().clone();
        async move {
            match policy_state(&c, "minimal").await {
                Some(s) if s == "ready" => Look::Done(()),
                other => Look::Seen(format!("policy state {other:?}")),
            }
        }
    })
    .await?;
    let last = wait_quiet("the first operator's writes", 8, 300, || first.api_writes()).await?;
    assert!(last >= 200, "labelling 200 nodes took {last} writes");
    first.stop().await;

    let second = env.operator()?;
    eventually_secs("the start-up resync", 120, || {
        let m = second.metrics.clone();
        async move { (m.reconciles() >= 1).then_some(()) }
    })
    .await?;
    // A ready policy only resyncs every few minutes; a user's annotation edit forces the second.
    let patch = json!({"metadata": {"annotations": {"example.com/touched": "yes"}}});
    policies(env.client())
        .patch("minimal", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually_secs("a second reconcile", 120, || {
        let m = second.metrics.clone();
        async move { (m.reconciles() >= 2).then_some(()) }
    })
    .await?;
    assert_eq!(
        second.api_writes(),
        0,
        "a resync wrote: {:?}",
        second.recorder.writes()
    );
    assert_eq!(second.metrics.writes(), 0);
    second.stop().await;
    Ok(())
}
