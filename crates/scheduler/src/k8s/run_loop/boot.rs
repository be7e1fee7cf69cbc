//! What start-up creates when missing: KAI's CRDs, the default queues, KAI's
//! PriorityClasses.

use gantry_api::kai::Queue;
use gantry_api::names;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;

pub(super) async fn install_crds(client: &kube::Client) {
    let Ok(all) = gantry_api::crds::all_crds() else {
        return;
    };
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    // KAI's own: Queue and PodGroup (scheduling.run.ai) and Topology (kai.scheduler).
    let topology_group = <gantry_api::kai::Topology as kube::Resource>::group(&());
    let kai = |g: &str| g == names::KAI_GROUP || g == topology_group;
    for crd in all.into_iter().filter(|c| kai(&c.spec.group)) {
        if let Err(e) = api.create(&PostParams::default(), &crd).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(crd = ?crd.metadata.name, error = %e, "could not install CRD");
        }
    }
}

pub(super) async fn create_default_queues(client: &kube::Client) {
    let api: Api<Queue> = Api::all(client.clone());
    let open = json!({"quota": 0, "limit": -1, "overQuotaWeight": 1});
    for (name, parent) in [
        (names::DEFAULT_PARENT_QUEUE, None),
        (names::DEFAULT_QUEUE, Some(names::DEFAULT_PARENT_QUEUE)),
    ] {
        let mut spec = json!({"resources": {"gpu": open, "cpu": open, "memory": open}});
        if let Some(p) = parent {
            spec["parentQueue"] = json!(p);
        }
        let q: Result<Queue, _> = serde_json::from_value(json!({
            "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name}, "spec": spec,
        }));
        if let Ok(q) = q
            && let Err(e) = api.create(&PostParams::default(), &q).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(queue = name, error = %e, "could not create default queue");
        }
    }
}

/// KAI's PriorityClasses (`train` 50, `build-preemptible` 75, `build` 100, `inference` 125),
/// created when missing so KAI's examples and docs work as written. Existing classes of those
/// names are left as they are.
pub(super) async fn create_priority_classes(client: &kube::Client) {
    let api: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in names::KAI_PRIORITY_CLASSES {
        let preemptible = value < names::NON_PREEMPTIBLE_PRIORITY_THRESHOLD;
        let pc: Result<PriorityClass, _> = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": false,
            "description": format!(
                "KAI workload priority {name} ({})",
                if preemptible { "preemptible" } else { "non-preemptible, runs only within its queue's quota" }
            ),
        }));
        if let Ok(pc) = pc
            && let Err(e) = api.create(&PostParams::default(), &pc).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            tracing::warn!(priority_class = name, error = %e, "could not create KAI priority class");
        }
    }
}
