//! Topology-aware scheduling end to end, from manifests applied with kubectl: a KAI
//! `Topology` of racks and hosts over nodes the sim labels into racks, and Jobs whose
//! `kai.scheduler/topology*` annotations the pod grouper turns into the PodGroup's
//! constraint. A gang that requires one rack lands inside one rack (the rack with room,
//! though bin-packing alone would start on the fuller one); a second gang no rack can hold
//! waits, and its PodGroup condition and `gantry explain` name the required level. A
//! Topology with no levels is refused, naming the object.

use crate::cluster;

use cluster::{Cluster, Result, node_of};
use gantry_testkit::Look;
use std::collections::BTreeSet;
use std::time::Duration;

const RACK: &str = "topology.gantry.dev/rack";

fn gang(name: &str, pods: u32) -> String {
    format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels: {{kai.scheduler/queue: default-queue}}
  annotations:
    kai.scheduler/topology: cluster-topology
    kai.scheduler/topology-required-placement: {RACK}
spec:
  parallelism: {pods}
  completions: {pods}
  template:
    metadata:
      labels: {{kai.scheduler/queue: default-queue}}
    spec:
      schedulerName: kai-scheduler
      restartPolicy: Never
      containers:
      - name: main
        image: ubuntu
        resources: {{limits: {{nvidia.com/gpu: 1}}}}
"#
    )
}

const TOPOLOGY: &str = r#"
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata: {name: cluster-topology}
spec:
  levels:
  - nodeLabel: topology.gantry.dev/rack
  - nodeLabel: kubernetes.io/hostname
"#;

const FILLER: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: filler
  labels: {kai.scheduler/queue: default-queue}
spec:
  schedulerName: kai-scheduler
  nodeSelector: {kubernetes.io/hostname: h100-80gb-0}
  containers:
  - name: main
    image: ubuntu
    resources: {limits: {nvidia.com/gpu: 1}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_with_required_rack_lands_in_one_rack_and_waits_when_none_fits() -> Result {
    // Racks of two nodes with two GPUs each: rack-0 = h100-80gb-0/1, rack-1 = -2/3.
    let c = Cluster::start_with_topology("4xH100-80GB:2", "rack=2").await?;
    let nodes = c.kubectl(&["get", "nodes", "-L", RACK]).await?;
    assert!(nodes.contains("rack-1"), "{nodes}");
    let (stop, handle) = c.scheduler(c.options());
    c.wait("Topology CRD served", Duration::from_secs(60), || async {
        match c.kubectl(&["get", "topologies"]).await {
            Ok(out) => Look::Done(out),
            Err(e) => Look::Seen(e.to_string()),
        }
    })
    .await?;
    c.wait("default queue", Duration::from_secs(20), || async {
        c.kubectl(&["get", "queue", "default-queue"]).await.ok()
    })
    .await?;

    // A Topology without levels breaks the CRD's schema: refused, naming the object.
    let bad = "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: flat}\nspec: {levels: []}\n";
    let err = c
        .apply("bad-topology.yaml", bad)
        .await
        .err()
        .ok_or("accepted")?;
    let err = err.to_string();
    assert!(err.contains("flat") && err.contains("spec.levels"), "{err}");

    c.apply("topology.yaml", TOPOLOGY).await?;
    let shown = c
        .kubectl(&["get", "topology", "cluster-topology", "-o", "yaml"])
        .await?;
    assert!(
        shown.contains("nodeLabel: topology.gantry.dev/rack"),
        "{shown}"
    );

    // rack-0 keeps 3 free GPUs, rack-1 all 4: a gang of 4 fits rack-1 only.
    c.apply("filler.yaml", FILLER).await?;
    c.wait_running("default", "filler").await?;
    c.apply("gang-a.yaml", &gang("gang-a", 4)).await?;
    let placed = c
        .wait("gang-a bound", Duration::from_secs(60), || async {
            let pods = c.pods("default", "job-name=gang-a").await;
            let nodes: Vec<String> = pods.iter().filter_map(node_of).collect();
            if pods.len() == 4 && nodes.len() == 4 {
                Look::Done(nodes)
            } else {
                Look::Seen(format!("{} pods, bound to {nodes:?}", pods.len()))
            }
        })
        .await?;
    let on: BTreeSet<&str> = placed.iter().map(String::as_str).collect();
    assert_eq!(
        on,
        BTreeSet::from(["h100-80gb-2", "h100-80gb-3"]),
        "gang-a must stay inside rack-1"
    );

    // No rack has room for another gang of 4 (rack-0: 3 GPUs): it waits, and says why.
    c.apply("gang-b.yaml", &gang("gang-b", 4)).await?;
    // (jsonpath over all PodGroups stops at the first without a status: read JSON.)
    let cond = c
        .wait(
            "gang-b's podgroup condition",
            Duration::from_secs(60),
            || async {
                match c.kubectl(&["get", "podgroups", "-o", "json"]).await {
                    Ok(out) if out.contains("required level") => Look::Done(out),
                    Ok(out) => Look::Seen(out),
                    Err(e) => Look::Seen(e.to_string()),
                }
            },
        )
        .await?;
    assert!(
        cond.contains(&format!("no domain at the required level {RACK}")),
        "{cond}"
    );
    assert!(cond.contains("room for 3"), "{cond}");
    let waiting = c.pods("default", "job-name=gang-b").await;
    assert_eq!(waiting.len(), 4);
    assert!(
        waiting.iter().all(|p| node_of(p).is_none()),
        "gang-b stays unbound"
    );

    let first = waiting[0].metadata.name.clone().unwrap_or_default();
    let text = gantry_scheduler::k8s::explain::explain_pod(
        &c.client,
        "default",
        &first,
        "kai-scheduler",
        "gantry-reservation",
    )
    .await?;
    assert!(
        text.contains(&format!("Topology:   cluster-topology (required {RACK}")),
        "{text}"
    );
    assert!(text.contains("cannot be satisfied"), "{text}");
    assert!(text.contains("required level"), "{text}");

    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    Ok(())
}
