//! Upstream-shaped objects through the API server with Gantry's CRDs (issue #19): a ClusterPolicy
//! and NVIDIADrivers that leave fields to upstream's schema defaults read back with them (the
//! NVIDIADriver sample, which omits the required `default`, is accepted), and a PodGroup with
//! every field of KAI's CRD keeps them all, where a field KAI's CRD lacks is pruned as there.
//! The objects are the corpus fixtures in `crates/gantry/tests/fixtures/upstream/`.

use gantry_testkit::Cluster;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

type Result<T = ()> = anyhow::Result<T>;

const CLUSTER_POLICY: &str =
    include_str!("../../../gantry/tests/fixtures/upstream/clusterpolicy-sections.yaml");
const DRIVER_MINIMAL: &str =
    include_str!("../../../gantry/tests/fixtures/upstream/nvidiadriver-minimal.yaml");
const DRIVER_SAMPLE: &str =
    include_str!("../../../api/tests/fixtures/nvidiadriver-upstream-sample.yaml");
const POD_GROUP: &str =
    include_str!("../../../gantry/tests/fixtures/upstream/kai-podgroup-every-field.yaml");

async fn start() -> Result<(Cluster, Client)> {
    let env = Cluster::builder().crds().start().await?;
    let client = env.client().clone();
    Ok((env, client))
}

/// Creates the YAML object and returns it as the server stored it.
async fn create(client: &Client, yaml: &str, plural: &str) -> Result<DynamicObject> {
    let obj: DynamicObject = serde_yaml::from_str(yaml)?;
    let types = obj
        .types
        .clone()
        .ok_or_else(|| anyhow::anyhow!("no apiVersion/kind"))?;
    let gvk = GroupVersionKind::try_from(&types)?;
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = match obj.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.create(&PostParams::default(), &obj).await?;
    Ok(api.get(&obj.name_any()).await?)
}

fn upgrade_policy(auto_upgrade: bool) -> Value {
    json!({
        "autoUpgrade": auto_upgrade, "maxParallelUpgrades": 1, "maxUnavailable": "25%",
        "waitForCompletion": {"timeoutSeconds": 0},
        "podDeletion": {"force": false, "timeoutSeconds": 300, "deleteEmptyDir": false},
        "drain": {"enable": false, "force": false, "timeoutSeconds": 300, "deleteEmptyDir": false}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_shaped_objects_read_back_with_upstream_defaults() -> Result {
    let (env, client) = start().await?;

    let policy = create(&client, CLUSTER_POLICY, "clusterpolicies").await?;
    assert_eq!(
        policy.data["spec"],
        json!({
            "operator": {"defaultRuntime": "docker", "runtimeClass": "nvidia"},
            "daemonsets": {"updateStrategy": "RollingUpdate"},
            "driver": {"kernelModuleType": "auto", "upgradePolicy": upgrade_policy(false)},
            "toolkit": {"installDir": "/usr/local/nvidia"},
            "devicePlugin": {"mps": {"root": "/run/nvidia/mps"}},
            "dcgmExporter": {}, "dcgm": {}, "nodeStatusExporter": {}, "gfd": {},
            "migManager": {"config": {"name": "default-mig-parted-config", "default": "all-disabled"}},
            "vgpuDeviceManager": {"config": {"default": "default"}},
            "cdi": {"enabled": true, "default": false, "nriPluginEnabled": false},
            "sandboxWorkloads": {"defaultWorkload": "container", "mode": "kubevirt"},
            "hostPaths": {"kubeletRootDir": "/var/lib/kubelet"}
        })
    );
    // Gantry's own types read the defaulted object back as they read the sparse one.
    let typed: gantry_api::cluster_policy::ClusterPolicy =
        serde_json::from_value(serde_json::to_value(&policy)?)?;
    assert!(typed.spec.cdi_enabled());
    assert!(!typed.spec.mig_manager_has_custom_config());

    let minimal = create(&client, DRIVER_MINIMAL, "nvidiadrivers").await?;
    assert_eq!(
        minimal.data["spec"],
        json!({
            "default": false, "driverType": "gpu", "image": "nvcr.io/nvidia/driver",
            "kernelModuleType": "auto", "upgradePolicy": upgrade_policy(true)
        })
    );

    // Upstream's sample leaves out `default` (required): accepted, read back false.
    let sample = create(&client, DRIVER_SAMPLE, "nvidiadrivers").await?;
    let spec = &sample.data["spec"];
    assert_eq!(
        (
            &spec["default"],
            &spec["kernelModuleType"],
            &spec["image"],
            &spec["version"]
        ),
        (
            &json!(false),
            &json!("auto"),
            &json!("driver"),
            &json!("570.148.08")
        )
    );
    env.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_group_keeps_every_field_of_kais_crd() -> Result {
    let (env, client) = start().await?;
    let sent: Value = serde_yaml::from_str(POD_GROUP)?;
    let stored = create(&client, POD_GROUP, "podgroups").await?;
    assert_eq!(stored.data["spec"], sent["spec"]);

    // KAI's status fields, written through the status subresource, survive too.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.run.ai", "v2alpha2", "PodGroup"),
        "podgroups",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let status = json!({
        "phase": "Running", "running": 2, "pending": 0, "succeeded": 1, "failed": 0,
        "resourcesStatus": {"allocated": {"nvidia.com/gpu": "2"}}
    });
    let patch = kube::api::Patch::Merge(json!({"status": status}));
    api.patch_status("every-field", &Default::default(), &patch)
        .await?;
    let got = api.get("every-field").await?;
    assert_eq!(got.data["status"], status);

    // A field KAI's CRD does not have is pruned, as a real server with KAI's CRD (which has no
    // x-kubernetes-preserve-unknown-fields) does: same answer, same object.
    let mut extra: Value = sent.clone();
    extra["metadata"]["name"] = json!("with-extra");
    extra["spec"]["notAKaiField"] = json!(7);
    let stored = create(&client, &serde_yaml::to_string(&extra)?, "podgroups").await?;
    assert!(stored.data["spec"].get("notAKaiField").is_none());
    assert_eq!(stored.data["spec"], sent["spec"]);
    env.shutdown().await;
    Ok(())
}
