//! `kubectl top` against the embedded API server's metrics API: a simulated container uses
//! what it requests, a node the sum over its running pods.

use crate::kubectl::{KUBECTL, Kubectl};
use gantry_sim::kubelet::AgentRegistry;
use gantry_testkit::{Cluster, eventually_secs};
use std::path::Path;

type Result<T = ()> = anyhow::Result<T>;

fn row<'a>(out: &'a str, name: &str) -> Option<Vec<&'a str>> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .map(|l| l.split_whitespace().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_shows_simulated_usage() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Cluster::builder()
        .nodes("2xcpu")
        .agents(AgentRegistry::new())
        .start()
        .await?;
    let k = Kubectl {
        kubeconfig: env.kubeconfig_path(),
        dir: env.dir(),
    };
    let pod = |name: &str, cpu: &str, mem: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: cpu-0\n  containers:\n  - name: c\n    image: x\n    resources:\n      requests: {{cpu: {cpu}, memory: {mem}}}\n"
        )
    };
    for (name, cpu, mem) in [("a", "1500m", "1Gi"), ("b", "250m", "512Mi")] {
        let f = k.write(&format!("{name}.yaml"), &pod(name, cpu, mem))?;
        k.run(&["apply", "-f", &f]).await?;
    }
    let out = eventually_secs("both pods in kubectl top pods", 60, || async {
        let out = k.run(&["top", "pods"]).await.unwrap_or_default();
        anyhow::Ok((row(&out, "a").is_some() && row(&out, "b").is_some()).then_some(out))
    })
    .await?;
    assert!(out.starts_with("NAME"), "{out}");
    assert_eq!(row(&out, "a"), Some(vec!["a", "1500m", "1024Mi"]), "{out}");
    assert_eq!(row(&out, "b"), Some(vec!["b", "250m", "512Mi"]), "{out}");

    let out = k.run(&["top", "nodes"]).await?;
    let busy = row(&out, "cpu-0").ok_or_else(|| anyhow::anyhow!("no cpu-0: {out}"))?;
    assert_eq!((busy[1], busy[3]), ("1750m", "1536Mi"), "{out}");
    let idle = row(&out, "cpu-1").ok_or_else(|| anyhow::anyhow!("no cpu-1: {out}"))?;
    assert_eq!((idle[1], idle[3]), ("0m", "0Mi"), "{out}");
    let c = k.run(&["top", "pod", "a", "--containers"]).await?;
    assert!(
        c.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["a", "c", "1500m", "1024Mi"]),
        "{c}"
    );
    Ok(())
}
