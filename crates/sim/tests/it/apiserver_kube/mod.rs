//! The embedded API server driven by kube-rs over HTTPS, the way Gantry's components use it.

use futures::{StreamExt, TryStreamExt};
use gantry_sim::ControlPlaneOptions;
use gantry_testkit::{Cluster, Look, eventually_secs};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

type Result<T = ()> = anyhow::Result<T>;

async fn start() -> Result<(Cluster, kube::Client)> {
    let env = Cluster::builder().start().await?;
    let client = env.client().clone();
    Ok((env, client))
}

fn cm(name: &str, data: serde_json::Value) -> Result<ConfigMap> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "data": data}),
    )?)
}

mod by_node;
mod lifecycle;
mod lists_and_watches;
mod serving;
mod writes;
