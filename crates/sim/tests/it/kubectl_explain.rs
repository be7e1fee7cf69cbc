//! `kubectl explain` against the embedded API server: it reads the OpenAPI v3 document of
//! the kind's group (built-ins from k8s-openapi, custom resources from their CRDs).

use crate::kubectl::{KUBECTL, Kubectl};
use gantry_testkit::Cluster;
use std::path::Path;

type Result<T = ()> = anyhow::Result<T>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_reads_builtin_and_crd_schemas() -> Result {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} is not installed");
        return Ok(());
    }
    let env = Cluster::builder().start().await?;
    let k = Kubectl {
        kubeconfig: env.kubeconfig_path(),
        dir: env.dir(),
    };

    // Built-ins: a nested field through PodSpec to Container.
    let out = k.run(&["explain", "pod.spec.containers"]).await?;
    assert!(out.contains("KIND:       Pod"), "{out}");
    assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
    assert!(out.contains("image\t<string>"), "{out}");
    assert!(
        out.contains("List of containers belonging to the pod"),
        "{out}"
    );
    let out = k.run(&["explain", "deployment.spec.strategy"]).await?;
    assert!(out.contains("rollingUpdate"), "{out}");

    // Custom resources: the CRDs' own descriptions.
    let crds = k.write("crds.yaml", &gantry_api::crds::all_crds_yaml()?)?;
    k.run(&["apply", "-f", &crds]).await?;
    for crd in ["queues.scheduling.run.ai", "clusterpolicies.nvidia.com"] {
        k.run(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd}"),
            "--timeout=30s",
        ])
        .await?;
    }
    let out = k.run(&["explain", "queue.spec"]).await?;
    assert!(out.contains("GROUP:      scheduling.run.ai"), "{out}");
    assert!(out.contains("VERSION:    v2"), "{out}");
    for field in ["parentQueue", "priority", "resources"] {
        assert!(out.contains(field), "queue.spec lacks {field}: {out}");
    }
    let out = k
        .run(&["explain", "clusterpolicy.spec.devicePlugin"])
        .await?;
    assert!(out.contains("GROUP:      nvidia.com"), "{out}");
    for field in ["enabled", "config", "image"] {
        assert!(out.contains(field), "devicePlugin lacks {field}: {out}");
    }
    // metadata refers to ObjectMeta, as on a real server.
    let out = k.run(&["explain", "queue.metadata.labels"]).await?;
    assert!(out.contains("map[string]string"), "{out}");

    // A field that does not exist is an error naming it.
    let err = k
        .run(&["explain", "queue.spec.nosuchfield"])
        .await
        .expect_err("unknown field");
    assert!(err.to_string().contains("nosuchfield"), "{err}");
    Ok(())
}
