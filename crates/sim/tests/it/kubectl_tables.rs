//! `kubectl get` against the embedded API server prints what it prints against a real one:
//! the server answers the `Table` form, so pods show READY / STATUS / RESTARTS, nodes STATUS /
//! ROLES / VERSION, events their OBJECT, and custom resources their CRD's printer columns.

use crate::kubectl::{KUBECTL, Kubectl};
use gantry_sim::kubelet::AgentRegistry;
use gantry_testkit::{Cluster, eventually_secs};
use std::path::Path;

type Result<T = ()> = anyhow::Result<T>;

/// The header line's column names.
fn header(out: &str) -> Vec<String> {
    out.lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The row whose first cell is `name`, split on runs of spaces.
fn row<'a>(out: &'a str, name: &str) -> Option<Vec<&'a str>> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .map(|l| l.split_whitespace().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_the_servers_columns() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Cluster::builder()
        .nodes("1xL4:1")
        .agents(AgentRegistry::new())
        .start()
        .await?;
    let k = Kubectl {
        kubeconfig: env.kubeconfig_path(),
        dir: env.dir(),
    };

    // Nodes: STATUS, ROLES, AGE, VERSION.
    let out = eventually_secs("the node Ready in kubectl get nodes", 60, || async {
        let out = k.run(&["get", "nodes"]).await?;
        anyhow::Ok(out.contains(" Ready ").then_some(out))
    })
    .await?;
    assert_eq!(
        header(&out),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{out}"
    );
    let wide = k.run(&["get", "nodes", "-o", "wide"]).await?;
    assert!(header(&wide).contains(&"INTERNAL-IP".to_string()), "{wide}");

    // Pods: READY, STATUS, RESTARTS, AGE; -o wide adds IP and NODE.
    let pod = k.write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  nodeName: l4-0\n  containers:\n  - name: web\n    image: nginx\n",
    )?;
    k.run(&["apply", "-f", &pod]).await?;
    let out = eventually_secs("pod web Running in kubectl get pods", 60, || async {
        let out = k.run(&["get", "pods"]).await?;
        anyhow::Ok(
            row(&out, "web")
                .is_some_and(|r| r.get(2) == Some(&"Running"))
                .then_some(out),
        )
    })
    .await?;
    assert_eq!(
        header(&out),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    assert_eq!(
        row(&out, "web").and_then(|r| r.get(1).copied()),
        Some("1/1"),
        "{out}"
    );
    let wide = k.run(&["get", "pods", "-o", "wide"]).await?;
    let h = header(&wide);
    assert!(
        h.contains(&"IP".to_string()) && h.contains(&"NODE".to_string()),
        "{wide}"
    );
    assert!(wide.contains("l4-0"), "{wide}");

    // Namespaces and ConfigMaps.
    let ns = k.run(&["get", "namespaces"]).await?;
    assert_eq!(header(&ns), ["NAME", "STATUS", "AGE"], "{ns}");
    assert_eq!(
        row(&ns, "default").and_then(|r| r.get(1).copied()),
        Some("Active")
    );
    k.run(&[
        "create",
        "configmap",
        "two",
        "--from-literal=a=1",
        "--from-literal=b=2",
    ])
    .await?;
    let cms = k.run(&["get", "configmap", "two"]).await?;
    assert_eq!(header(&cms), ["NAME", "DATA", "AGE"], "{cms}");
    assert_eq!(row(&cms, "two").and_then(|r| r.get(1).copied()), Some("2"));

    // Custom resources: the CRD's printer columns (KAI's Queue: PRIORITY, PARENT …).
    let crds = k.write("crds.yaml", &gantry_api::crds::all_crds_yaml()?)?;
    k.run(&["apply", "-f", &crds]).await?;
    k.run(&[
        "wait",
        "--for=condition=Established",
        "crd/queues.scheduling.run.ai",
        "--timeout=30s",
    ])
    .await?;
    let q = k.write(
        "q.yaml",
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata:\n  name: team-a\nspec:\n  parentQueue: research\n  priority: 7\n  resources:\n    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}\n    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}\n    memory: {quota: -1, limit: -1, overQuotaWeight: 1}\n",
    )?;
    k.run(&["apply", "-f", &q]).await?;
    let out = k.run(&["get", "queues"]).await?;
    assert_eq!(
        header(&out),
        ["NAME", "PRIORITY", "PARENT", "CHILDREN", "DISPLAYNAME"],
        "{out}"
    );
    assert_eq!(
        row(&out, "team-a").map(|r| r[..3].to_vec()),
        Some(vec!["team-a", "7", "research"]),
        "{out}"
    );

    // Events: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE.
    let ev = k.write(
        "ev.yaml",
        "apiVersion: v1\nkind: Event\nmetadata:\n  name: web.1\ntype: Warning\nreason: BackOff\nmessage: restarting failed container\ninvolvedObject:\n  kind: Pod\n  name: web\n  namespace: default\nsource:\n  component: kubelet\n  host: l4-0\ncount: 3\n",
    )?;
    k.run(&["apply", "-f", &ev]).await?;
    let ev = k.run(&["get", "events"]).await?;
    assert_eq!(
        header(&ev),
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{ev}"
    );
    let line = ev
        .lines()
        .find(|l| l.contains("BackOff"))
        .unwrap_or_default();
    assert!(
        line.contains("Warning")
            && line.contains("pod/web")
            && line.contains("restarting failed container"),
        "{ev}"
    );
    Ok(())
}
