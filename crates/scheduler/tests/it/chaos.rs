//! Issue #24's chaos run through the full sim: two 2-GPU nodes running the real device
//! plugin and GFD, the scheduler in-process, and at random — seeded, the seed printed —
//! GPU faults (fatal and ignored XIDs, off the bus, double-bit ECC), resets, pod churn
//! (whole GPUs, fractions, GPU memory), deletions of idle reservation pods, device-plugin
//! restarts. After every step: no pod Failed, no GPU over-committed (a device held by two
//! pods, a whole-GPU pod on a GPU with shares, shares over one GPU). At the end every GPU is
//! reset, and every GPU must be advertised Healthy and take a whole-GPU pod within a deadline.

use crate::cluster::{Cluster, Look, Result, eventually_secs};
use gantry_api::gpu_devices;
use gantry_api::names;
use gantry_scheduler::k8s::binder::configmap_prefix;
use gantry_scheduler::k8s::convert::allocated_uuids;
use gantry_sim::cluster::Fault;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

const RES_NS: &str = names::DEFAULT_RESERVATION_NAMESPACE;
const GPUS_PER_NODE: u32 = 2;
/// Every healthy GPU is advertised and takes a pod within this many seconds at the end.
const SETTLE_SECS: u64 = 60;

#[derive(Default, Debug)]
struct Tally {
    rounds: u32,
    pods: u32,
    faults: u32,
    resets: u32,
    reservation_deletions: u32,
    plugin_restarts: u32,
    max_running: usize,
    violations: Vec<String>,
}

fn workload(name: &str, kind: u32) -> serde_json::Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {names::LABEL_QUEUE: "default-queue"}},
        "spec": {"schedulerName": "kai-scheduler",
                 "containers": [{"name": "main", "image": "ubuntu"}]},
    });
    match kind {
        0 => {
            pod["spec"]["containers"][0]["resources"] =
                json!({"limits": {names::RESOURCE_GPU: "1"}});
        }
        1 => pod["metadata"]["annotations"] = json!({names::ANNOTATION_GPU_FRACTION: "0.25"}),
        2 => pod["metadata"]["annotations"] = json!({names::ANNOTATION_GPU_FRACTION: "0.5"}),
        3 => pod["metadata"]["annotations"] = json!({names::ANNOTATION_GPU_FRACTION: "0.75"}),
        _ => pod["metadata"]["annotations"] = json!({names::ANNOTATION_GPU_MEMORY: "20000"}),
    }
    pod
}

fn whole(p: &Pod) -> bool {
    p.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_some_and(|l| l.contains_key(names::RESOURCE_GPU))
        })
    })
}

async fn list<K>(c: &Cluster, ns: &str) -> Vec<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(c.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// What one look at the cluster finds.
#[derive(Default)]
struct Seen {
    /// Over-commitment, each named once per look.
    overcommit: Vec<String>,
    /// Pods newly seen Failed: (pod, node, why).
    failed: Vec<(String, String, String)>,
    running: usize,
}

async fn check(c: &Cluster, failed_seen: &mut BTreeSet<String>) -> Seen {
    let mut seen = Seen::default();
    let out = &mut seen.overcommit;
    let work: Vec<Pod> = list(c, "default").await;
    let reservations: Vec<Pod> = list(c, RES_NS).await;
    let cms: BTreeMap<String, ConfigMap> = list::<ConfigMap>(c, "default")
        .await
        .into_iter()
        .map(|m| (m.metadata.name.clone().unwrap_or_default(), m))
        .collect();
    let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut shares: BTreeMap<String, (f64, Vec<String>)> = BTreeMap::new();
    for p in work.iter().chain(&reservations) {
        let name = format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or(""),
            p.metadata.name.as_deref().unwrap_or("")
        );
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        if phase.as_deref() == Some("Failed") && failed_seen.insert(name.clone()) {
            let why = p.status.as_ref().and_then(|s| s.message.clone());
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            seen.failed.push((
                name.clone(),
                node.unwrap_or_default(),
                why.unwrap_or_default(),
            ));
        }
        if phase.as_deref() != Some("Running") {
            continue;
        }
        seen.running += 1;
        let is_reservation = p.metadata.namespace.as_deref() == Some(RES_NS);
        if is_reservation || whole(p) {
            for u in allocated_uuids(p) {
                holders.entry(u).or_default().push(name.clone());
            }
        } else if let Some(cm) = cms.get(&format!("{}-0", configmap_prefix(p))) {
            let data = cm.data.clone().unwrap_or_default();
            let portion: f64 = data
                .get("GPU_PORTION")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            for u in data
                .get("NVIDIA_VISIBLE_DEVICES")
                .map(|v| v.split(',').map(str::to_string).collect::<Vec<_>>())
                .unwrap_or_default()
            {
                let e = shares.entry(u).or_default();
                e.0 += portion;
                e.1.push(name.clone());
            }
        }
    }
    for (u, h) in &holders {
        if h.len() > 1 {
            out.push(format!("GPU {u} held by {h:?}"));
        }
        let whole_here: Vec<&String> = h.iter().filter(|n| !n.starts_with(RES_NS)).collect();
        if let (Some(w), Some((_, s))) = (whole_here.first(), shares.get(u)) {
            out.push(format!("GPU {u} held whole by {w} and shared by {s:?}"));
        }
    }
    for (u, (sum, pods)) in &shares {
        // GPU_PORTION has two decimals: allow their rounding.
        if *sum > 1.0 + 0.005 * pods.len() as f64 {
            out.push(format!("GPU {u} shared {sum:.2} by {pods:?}"));
        }
    }
    seen
}

/// A pod refused by the kubelet this soon after its node lost a GPU (or its plugin) raced
/// that fault: the GPU was free when the scheduler chose it. Counted apart, never hidden.
const RACE_SECS: f64 = 3.0;

async fn plugin_pod(c: &Cluster, node: &str) -> Option<String> {
    list::<Pod>(c, "kube-system")
        .await
        .into_iter()
        .find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("device-plugin"))
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                && p.metadata.deletion_timestamp.is_none()
        })
        .and_then(|p| p.metadata.name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_faults_churn_and_restarts_overcommit_nothing_and_recover() -> Result {
    let seed: u64 = std::env::var("GANTRY_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let rounds: u32 = std::env::var("GANTRY_CHAOS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(80);
    println!("chaos seed {seed} (GANTRY_CHAOS_SEED), {rounds} rounds (GANTRY_CHAOS_ROUNDS)");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let c = Cluster::start_with_plugin_args(
        &format!("2xH100-80GB:{GPUS_PER_NODE}"),
        &["--xid-recovery-hold", "2"],
    )
    .await?;
    let (stop, handle) = c.scheduler(c.options());
    eventually_secs("default queue", 60, || async {
        c.kubectl(&["get", "queue", "default-queue"]).await.ok()
    })
    .await?;
    let nodes: Vec<String> = Api::<Node>::all(c.client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let mut t = Tally::default();
    let mut failed_seen = BTreeSet::new();
    let mut live: Vec<String> = Vec::new();
    let mut disrupted: BTreeMap<String, std::time::Instant> = BTreeMap::new();
    let mut raced: Vec<String> = Vec::new();
    for round in 0..rounds {
        t.rounds += 1;
        let node = &nodes[rng.random_range(0..nodes.len())];
        let gpu = rng.random_range(0..GPUS_PER_NODE);
        match rng.random_range(0..100u32) {
            0..40 => {
                let name = format!("c{round}");
                let kind = rng.random_range(0..5u32);
                let p: Pod = serde_json::from_value(workload(&name, kind))?;
                pods.create(&PostParams::default(), &p).await?;
                live.push(name);
                t.pods += 1;
            }
            40..60 if !live.is_empty() => {
                let name = live.swap_remove(rng.random_range(0..live.len()));
                let _ = pods.delete(&name, &DeleteParams::default()).await;
            }
            60..68 => {
                // An idle reservation (no fraction bound to its group), racing the
                // scheduler's own collection and its binder adopting it for a new share.
                // One under running fractions is out of scope: see device-plugin.md.
                let tenants: BTreeSet<String> = list::<Pod>(&c, "default")
                    .await
                    .iter()
                    .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                    .filter_map(|p| {
                        p.metadata
                            .labels
                            .as_ref()?
                            .get(names::LABEL_GPU_GROUP)
                            .cloned()
                    })
                    .collect();
                let res: Vec<Pod> = list::<Pod>(&c, RES_NS)
                    .await
                    .into_iter()
                    .filter(|r| {
                        r.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(names::LABEL_GPU_GROUP))
                            .is_some_and(|g| !tenants.contains(g))
                    })
                    .collect();
                if !res.is_empty() {
                    let r = &res[rng.random_range(0..res.len())];
                    let name = r.metadata.name.clone().unwrap_or_default();
                    let _ = Api::<Pod>::namespaced(c.client.clone(), RES_NS)
                        .delete(&name, &DeleteParams::default())
                        .await;
                    t.reservation_deletions += 1;
                }
            }
            68..86 => {
                let fault = match rng.random_range(0..6u32) {
                    0 => Fault::OffBus { gpu },
                    1 => Fault::EccDbe { gpu },
                    2 => Fault::Xid { gpu, xid: 13 },
                    3 => Fault::Xid { gpu, xid: 31 },
                    4 => Fault::Xid { gpu, xid: 79 },
                    _ => Fault::Xid { gpu, xid: 119 },
                };
                let ignored = matches!(fault, Fault::Xid { xid: 13 | 31, .. });
                c.sim()?.fault(node, &fault).await?;
                if !ignored {
                    disrupted.insert(node.clone(), std::time::Instant::now());
                }
                t.faults += 1;
            }
            86..95 => {
                c.sim()?.fault(node, &Fault::Clear { gpu }).await?;
                t.resets += 1;
            }
            _ => {
                if let Some(p) = plugin_pod(&c, node).await {
                    let _ = Api::<Pod>::namespaced(c.client.clone(), "kube-system")
                        .delete(&p, &DeleteParams::default())
                        .await;
                    disrupted.insert(node.clone(), std::time::Instant::now());
                    t.plugin_restarts += 1;
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(rng.random_range(100..300))).await;
        let seen = check(&c, &mut failed_seen).await;
        t.max_running = t.max_running.max(seen.running);
        for x in seen.overcommit {
            t.violations.push(format!("round {round}: {x}"));
        }
        for (pod, node, why) in seen.failed {
            let recent = disrupted
                .get(&node)
                .is_some_and(|at| at.elapsed().as_secs_f64() < RACE_SECS);
            let line = format!("round {round}: {pod} on {node:?} Failed: {why}");
            if recent {
                raced.push(line)
            } else {
                t.violations.push(line)
            }
        }
    }

    // The end: every GPU reset, every workload pod gone; each GPU must come back advertised
    // Healthy and take a whole-GPU pod.
    for node in &nodes {
        for gpu in 0..GPUS_PER_NODE {
            c.sim()?.fault(node, &Fault::Clear { gpu }).await?;
        }
    }
    for name in live.drain(..) {
        let _ = pods.delete(&name, &DeleteParams::default()).await;
    }
    let settle = std::time::Instant::now();
    eventually_secs(
        "every GPU advertised and published Healthy",
        SETTLE_SECS,
        || async {
            let all = Api::<Node>::all(c.client.clone())
                .list(&ListParams::default())
                .await?;
            let mut seen = Vec::new();
            let mut ok = true;
            for n in &all.items {
                let alloc = n
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| a.get(names::RESOURCE_GPU))
                    .map(|q| q.0.clone())
                    .unwrap_or_default();
                let healthy = n
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(names::ANNOTATION_GPU_DEVICES))
                    .and_then(|v| gpu_devices::parse(v).ok())
                    .map_or(0, |d| d.iter().filter(|g| g.healthy).count());
                ok &= alloc == GPUS_PER_NODE.to_string() && healthy == GPUS_PER_NODE as usize;
                seen.push(format!(
                    "{:?}: allocatable {alloc}, {healthy} published Healthy",
                    n.metadata.name
                ));
            }
            Ok::<_, kube::Error>(if ok {
                Look::Done(())
            } else {
                Look::Seen(seen.join("; "))
            })
        },
    )
    .await?;
    let total = nodes.len() as u32 * GPUS_PER_NODE;
    for i in 0..total {
        let p: Pod = serde_json::from_value(workload(&format!("final{i}"), 0))?;
        pods.create(&PostParams::default(), &p).await?;
    }
    let final_gpus = eventually_secs(
        "a whole-GPU pod Running on every GPU",
        SETTLE_SECS,
        || async {
            let mut gpus = BTreeSet::new();
            let mut running = 0;
            for i in 0..total {
                if let Some(p) = c.pod("default", &format!("final{i}")).await
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                {
                    running += 1;
                    gpus.extend(allocated_uuids(&p));
                }
            }
            if running == total {
                Look::Done(gpus)
            } else {
                Look::Seen(format!("{running} of {total} Running"))
            }
        },
    )
    .await?;
    let settle_s = settle.elapsed().as_secs_f64();
    let seen = check(&c, &mut failed_seen).await;
    t.violations
        .extend(seen.overcommit.into_iter().map(|x| format!("end: {x}")));
    t.violations.extend(
        seen.failed
            .into_iter()
            .map(|(p, n, why)| format!("end: {p} on {n:?} Failed: {why}")),
    );
    if final_gpus.len() != total as usize {
        t.violations.push(format!(
            "final pods on {} distinct GPUs of {total}",
            final_gpus.len()
        ));
    }
    println!(
        "chaos seed {seed}: {} rounds, {} pods, {} faults, {} resets, {} reservation deletions, \
         {} plugin restarts, at most {} pods running; all {total} GPUs Healthy and taken by \
         whole-GPU pods {settle_s:.1} s after the last reset; {} pods refused racing a fault \
         on their node (< {RACE_SECS} s); violations {}",
        t.rounds,
        t.pods,
        t.faults,
        t.resets,
        t.reservation_deletions,
        t.plugin_restarts,
        t.max_running,
        raced.len(),
        t.violations.len()
    );
    for r in &raced {
        println!("  raced: {r}");
    }
    assert!(
        t.violations.is_empty(),
        "chaos seed {seed} (rerun with GANTRY_CHAOS_SEED={seed}): {:#?}",
        t.violations
    );
    stop.send(true)?;
    let _ = handle.await;
    Ok(())
}
