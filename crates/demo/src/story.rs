//! Phases 2–10 of the story: CRDs, the operator, queues, the workloads, reclaim, the MIG
//! re-slice, the driver upgrade and the GPU fault. Each phase ends on a frame that shows
//! what its sentence claims.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gantry_api::names;
use gantry_sim::cluster::{Fault, Up};
use gantry_sim::nodes::NodePlan;
use gantry_sim::ui::Snapshot;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::DemoError;
use crate::apply;
use crate::frames::{self};
use crate::manifests;
use crate::steps::{Role, Run, alloc, gpu_node_names};
use crate::view::Update;
use crate::wait::{Progress, until};

/// Phases 2–10. Returns the time from applying the ClusterPolicy to GPUs advertised.
pub(crate) async fn story(run: &mut Run<'_>, up: &Up) -> Result<Duration, DemoError> {
    // 2: CRDs
    run.begin("Install the CRDs (ClusterPolicy, MigClusterPolicy, Queue, PodGroup, ...)");
    let crds = gantry_api::crds::all_crds_yaml()
        .map_err(|e| DemoError::Start(format!("rendering the CRDs: {e}")))?;
    let n = apply::apply_all(&run.client, "gantry crds", &crds).await?;
    run.step(format!("{n} CRDs applied"));
    let ready = run.all_ready();
    run.end("CRDs", "every node Ready", ready).await?;

    // 3: the operator turns bare GPU nodes into a GPU pool
    run.begin("Apply a ClusterPolicy: the operator deploys the GPU stack on the GPU nodes");
    let ts = run
        .nodes_with(Role::TimeSliced)
        .into_iter()
        .map(|p| p.name.clone())
        .collect::<Vec<_>>();
    let mig = run
        .nodes_with(Role::Mig)
        .into_iter()
        .map(|p| p.name.clone())
        .collect::<Vec<_>>();
    for n in &ts {
        run.label_node(n, names::LABEL_DEVICE_PLUGIN_CONFIG, "l4-time-sliced")
            .await?;
    }
    for n in &mig {
        run.label_node(n, names::LABEL_MIG_CONFIG, "all-balanced")
            .await?;
    }
    run.step(format!(
        "time-slicing x4 on {ts:?}, MIG all-balanced on {mig:?}"
    ));
    apply::apply_all(
        &run.client,
        manifests::TIME_SLICING.0,
        manifests::TIME_SLICING.1,
    )
    .await?;
    let applied = Instant::now();
    apply::apply_all(
        &run.client,
        manifests::CLUSTER_POLICY.0,
        manifests::CLUSTER_POLICY.1,
    )
    .await?;
    run.step("ClusterPolicy cluster-policy applied; waiting for every GPU node to advertise GPUs");
    until("every GPU node to advertise its GPUs", run.timeout, || {
        run.gpus_advertised()
    })
    .await?;
    let gpu_ready = applied.elapsed();
    run.step(format!(
        "GPU-ready in {:.1} s; waiting for ClusterPolicy state=ready",
        gpu_ready.as_secs_f64()
    ));
    until("ClusterPolicy status.state=ready", run.timeout, || async {
        let s = run.cluster_policy_state().await?;
        Ok(if s == "ready" {
            Progress::Done(())
        } else {
            Progress::NotYet(format!("state {s:?}"))
        })
    })
    .await?;
    let gpu_nodes = gpu_node_names(run.plan);
    run.end(
        "GPU operator",
        "the ClusterPolicy ready and a device plugin Running on every GPU node",
        move |s| {
            match &s.cluster_policy {
                Some(p) if p.state == "ready" => {}
                p => {
                    return Err(format!(
                        "ClusterPolicy state {:?}",
                        p.as_ref().map(|p| &p.state)
                    ));
                }
            }
            for name in &gpu_nodes {
                let op = s
                    .nodes
                    .iter()
                    .find(|n| &n.name == name)
                    .and_then(|n| n.operands.get(names::operand::DEVICE_PLUGIN));
                if op.map(String::as_str) != Some("Running") {
                    return Err(format!("{name}: device plugin {op:?}"));
                }
            }
            Ok(())
        },
    )
    .await?;

    // 4: queues
    run.begin("Create the teams' queues (team-a: 16 GPUs guaranteed, team-b: 12)");
    apply::apply_all(&run.client, manifests::QUEUES.0, manifests::QUEUES.1).await?;
    run.end("queues", "the teams' queues", |s| {
        for q in ["team-a", "team-b"] {
            if !s.queues.iter().any(|v| v.name == q) {
                return Err(format!("queue {q} not there yet"));
            }
        }
        Ok(())
    })
    .await?;

    // 5: team B over quota + MIG
    run.begin("Team B borrows idle H100s (24 GPUs on a 12-GPU quota) and takes MIG slices");
    apply::apply_all(&run.client, manifests::TEAM_B.0, manifests::TEAM_B.1).await?;
    run.job_running("team-b", "batch-b", 6).await?;
    if !mig.is_empty() {
        run.job_running("team-b", "mig-b", 4).await?;
    }
    let has_mig = !mig.is_empty();
    run.end(
        "team B",
        "team B holding 24 whole H100s (and 4 MIG slices)",
        move |s| {
            frames::expect_held(s, "team-b", "whole", 24)?;
            if has_mig {
                frames::expect_held(s, "team-b", "mig", 4)?;
            }
            match frames::queue_allocated(s, "team-b") {
                a if a >= 24.0 => Ok(()),
                a => Err(format!("queue team-b reports {a} allocated")),
            }
        },
    )
    .await?;

    // 6: team A fractions + time-sliced
    run.begin("Team A: fractional inference (0.5 GPU, 20 GB) and pods on time-sliced L4s");
    apply::apply_all(
        &run.client,
        manifests::TEAM_A_INFERENCE.0,
        manifests::TEAM_A_INFERENCE.1,
    )
    .await?;
    run.job_running("team-a", "infer-half", 2).await?;
    run.job_running("team-a", "infer-mem", 2).await?;
    if !ts.is_empty() {
        run.job_running("team-a", "l4-a", 3).await?;
    }
    let reservations = run
        .pods(Some(names::DEFAULT_RESERVATION_NAMESPACE), "")
        .await?;
    run.step(format!(
        "{} reservation pod(s) hold the shared GPUs",
        reservations.len()
    ));
    let has_ts = !ts.is_empty();
    run.end(
        "team A inference",
        "team A's 4 fractional pods and 3 time-sliced replicas",
        move |s| {
            frames::expect_held(s, "team-a", "fraction", 4)?;
            if has_ts {
                frames::expect_held(s, "team-a", "replica", 3)?;
            }
            Ok(())
        },
    )
    .await?;

    // 7: gang + reclaim
    run.begin("Team A's gang training job reclaims GPUs from team B");
    apply::apply_all(
        &run.client,
        manifests::TEAM_A_TRAINING.0,
        manifests::TEAM_A_TRAINING.1,
    )
    .await?;
    run.job_running("team-a", "train-a", 2).await?;
    run.end("gang + reclaim", "team A's gang on 8 whole H100s", |s| {
        frames::expect_held(s, "team-a", "whole", 8)
    })
    .await?;

    // 8: MIG re-slice
    if !mig.is_empty() {
        run.begin("MigClusterPolicy: re-slice the A100s into 1g.10gb, one node at a time");
        // Team B's MIG job finishes first: a GPU cannot be re-sliced under running processes
        // (the MIG manager would report the node failed, as on real hardware).
        let jobs: Api<k8s_openapi::api::batch::v1::Job> =
            Api::namespaced(run.client.clone(), "team-b");
        jobs.delete("mig-b", &kube::api::DeleteParams::background())
            .await
            .map_err(|e| DemoError::kube("deleting Job team-b/mig-b", e))?;
        until("Job team-b/mig-b's pods to finish", run.timeout, || async {
            let left = run.pods(Some("team-b"), "job-name=mig-b").await?.len();
            Ok(if left == 0 {
                Progress::Done(())
            } else {
                Progress::NotYet(format!("{left} pods left"))
            })
        })
        .await?;
        run.step("team B's MIG job finished; applying the MigClusterPolicy");
        apply::apply_all(
            &run.client,
            manifests::MIG_POLICY.0,
            manifests::MIG_POLICY.1,
        )
        .await?;
        let policies = run.dynamic(
            "nvidia.com",
            "v1alpha1",
            "MigClusterPolicy",
            "migclusterpolicies",
        );
        until(
            "the MigClusterPolicy to report success on every A100 node",
            run.timeout,
            || async {
                let p = policies
                    .get("a100-small-slices")
                    .await
                    .map_err(|e| DemoError::kube("reading MigClusterPolicy", e))?;
                let nodes = p.data["status"]["nodes"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let ok = nodes.iter().filter(|n| n["state"] == "success").count();
                Ok(if ok == mig.len() {
                    Progress::Done(())
                } else {
                    Progress::NotYet(format!("{ok} of {} nodes at success", mig.len()))
                })
            },
        )
        .await?;
        let want = |p: &NodePlan| 7 * p.gpus as i64;
        until(
            "the A100 nodes to advertise nvidia.com/mig-1g.10gb",
            run.timeout,
            || async {
                let nodes = run.nodes().await?;
                for p in run.nodes_with(Role::Mig) {
                    let have = nodes
                        .get(&p.name)
                        .map(|n| alloc(n, "nvidia.com/mig-1g.10gb"))
                        .unwrap_or(0);
                    if have != want(p) {
                        return Ok(Progress::NotYet(format!(
                            "{}: {have} of {}",
                            p.name,
                            want(p)
                        )));
                    }
                }
                Ok(Progress::Done(()))
            },
        )
        .await?;
        run.step("team B submits its MIG job again, onto the new 1g.10gb slices");
        apply::apply_all(&run.client, manifests::TEAM_B.0, manifests::TEAM_B.1).await?;
        run.job_running("team-b", "mig-b", 4).await?;
        let a100s = mig.clone();
        run.end(
            "MIG re-slice",
            "every A100 in 7 × 1g.10gb and team B on 4 of them",
            move |s| {
                for name in &a100s {
                    let Some(n) = s.nodes.iter().find(|n| &n.name == name) else {
                        return Err(format!("node {name} missing"));
                    };
                    for g in &n.gpus {
                        if g.mig.len() != 7 || g.mig.iter().any(|p| p != "1g.10gb") {
                            return Err(format!("{name} GPU {}: MIG {:?}", g.index, g.mig));
                        }
                    }
                }
                frames::expect_held(s, "team-b", "mig:1g.10gb", 4)
            },
        )
        .await?;
    } else {
        run.begin("MigClusterPolicy (skipped: no A100 nodes in --nodes)");
        let ready = run.all_ready();
        run.end("MIG re-slice", "every node Ready", ready).await?;
    }

    // 9: driver upgrade
    run.begin(&format!(
        "Driver upgrade to {} rolls through the GPU nodes",
        manifests::UPGRADED_DRIVER
    ));
    let cps = run.dynamic("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies");
    let patch = json!({"spec": {"driver": {"version": manifests::UPGRADED_DRIVER}}});
    cps.patch(
        "cluster-policy",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| DemoError::kube("changing driver.version", e))?;
    let gpu_nodes = gpu_node_names(run.plan);
    until(
        "every GPU node to reach upgrade-done on the new driver",
        run.timeout * 2,
        || async {
            let nodes = run.nodes().await?;
            let mut states: BTreeMap<String, usize> = BTreeMap::new();
            let mut done = 0;
            for name in &gpu_nodes {
                let n = nodes.get(name);
                let st = n
                    .and_then(|n| n.metadata.labels.as_ref())
                    .and_then(|l| l.get(names::LABEL_UPGRADE_STATE))
                    .cloned()
                    .unwrap_or_default();
                let cordoned = n
                    .and_then(|n| n.spec.as_ref())
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false);
                let version_ok = up
                    .cluster
                    .node(name)
                    .and_then(|s| s.backend.as_ref())
                    .map(|b| {
                        use gantry_gpu::Backend as _;
                        b.driver_version()
                            .map(|v| v == manifests::UPGRADED_DRIVER)
                            .unwrap_or(false)
                    })
                    == Some(true);
                // A node still labelled done from before has not been picked up yet.
                let st = match st.as_str() {
                    "upgrade-done" if !version_ok => "queued".to_string(),
                    "" => "-".to_string(),
                    _ => st,
                };
                if st == "upgrade-done" && !cordoned {
                    done += 1;
                }
                *states.entry(st).or_default() += 1;
            }
            let now: Vec<String> = states.iter().map(|(k, v)| format!("{v} {k}")).collect();
            run.step(format!(
                "{done}/{} nodes on {}",
                gpu_nodes.len(),
                manifests::UPGRADED_DRIVER
            ));
            let _ = run.report.send(Update::Progress(now.join(", ")));
            Ok(if done == gpu_nodes.len() {
                Progress::Done(())
            } else {
                Progress::NotYet(format!("{states:?}"))
            })
        },
    )
    .await?;
    run.job_running("team-a", "train-a", 2).await?;
    let upgraded = gpu_node_names(run.plan);
    run.end(
        "driver upgrade",
        "every GPU node upgraded, uncordoned and Ready, team A's gang running",
        move |s| {
            for name in &upgraded {
                let Some(n) = s.nodes.iter().find(|n| &n.name == name) else {
                    return Err(format!("node {name} missing"));
                };
                if !n.ready || n.unschedulable {
                    return Err(format!("{name} not Ready or still cordoned"));
                }
                if n.upgrade_state.as_deref() != Some("upgrade-done") {
                    return Err(format!("{name} upgrade state {:?}", n.upgrade_state));
                }
            }
            frames::expect_held(s, "team-a", "whole", 8)
        },
    )
    .await?;

    // 10: a GPU fault
    run.begin("A GPU falls off the bus; the device plugin withdraws it; a reset brings it back");
    if let Some(p) = run.nodes_with(Role::Whole).first().map(|p| (*p).clone()) {
        let full = p.gpus as i64;
        up.cluster
            .fault(&p.name, &Fault::OffBus { gpu: 0 })
            .await
            .map_err(|e| DemoError::Start(format!("injecting the fault: {e}")))?;
        run.step(format!("{} GPU 0: XID 79 (fallen off the bus)", p.name));
        let node = p.name.clone();
        run.show(
            &format!(
                "{} GPU 0 withdrawn ({} of {full} advertised)",
                p.name,
                full - 1
            ),
            move |s| gpu0_state(s, &node, false, full - 1),
        )
        .await?;
        up.cluster
            .fault(&p.name, &Fault::Clear { gpu: 0 })
            .await
            .map_err(|e| DemoError::Start(format!("resetting the GPU: {e}")))?;
        run.step(format!("{} GPU 0 reset", p.name));
        let node = p.name.clone();
        run.end(
            "GPU fault",
            &format!("{} GPU 0 back ({full} of {full} advertised)", p.name),
            move |s| gpu0_state(s, &node, true, full),
        )
        .await?;
    } else {
        let ready = run.all_ready();
        run.end("GPU fault", "every node Ready", ready).await?;
    }
    Ok(gpu_ready)
}

/// `Ok` when `node`'s GPU 0 reads `healthy` and the node advertises `advertised` GPUs.
fn gpu0_state(s: &Snapshot, node: &str, healthy: bool, advertised: i64) -> Result<(), String> {
    let Some(n) = s.nodes.iter().find(|n| n.name == node) else {
        return Err(format!("node {node} missing"));
    };
    let gpu0 = n.gpus.first().map(|g| g.healthy);
    let have = n
        .allocatable
        .get(names::RESOURCE_GPU)
        .and_then(|q| q.parse::<i64>().ok())
        .unwrap_or(0);
    if gpu0 != Some(healthy) || have != advertised {
        return Err(format!(
            "{node}: GPU 0 healthy {gpu0:?}, {have} GPUs advertised"
        ));
    }
    Ok(())
}
