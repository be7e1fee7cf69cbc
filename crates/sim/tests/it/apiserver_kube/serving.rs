//! What is served to whom: custom resources once their CRD exists, 401 without the token.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_served_once_their_crd_exists() -> Result {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let (_env, client) = start().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))?;
    let crd = crds.create(&PostParams::default(), &crd).await?;
    let established = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ignored": true}}))?;
    let w = widgets.create(&PostParams::default(), &w).await?;
    assert!(w.data.get("status").is_none(), "status is a subresource");
    let w = widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await?;
    assert_eq!(w.data["status"]["ready"], json!(true));
    assert_eq!(w.metadata.generation, Some(1));
    let err = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .expect_err("415");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 415),
        "{err:?}"
    );
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await?;
    // Once the garbage collector has deleted its objects, the CRD goes.
    eventually_secs("no longer served", 60, || async {
        widgets.list(&ListParams::default()).await.is_err()
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_token_get_401() -> Result {
    let (env, _client) = start().await?;
    let mut cfg = env.kube_config()?;
    cfg.auth_info.token = None;
    let anon = kube::Client::try_from(cfg)?;
    let err = Api::<ConfigMap>::default_namespaced(anon)
        .list(&ListParams::default())
        .await
        .expect_err("401");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 401),
        "{err:?}"
    );
    Ok(())
}
