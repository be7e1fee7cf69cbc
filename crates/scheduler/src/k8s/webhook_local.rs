//! The admission webhook as `gantry up` and `gantry demo` run it beside their in-process
//! scheduler: the same server as `gantry admission` ([`super::webhook`]), in this process on a
//! loopback port, with a serving certificate the caller provides, registered as the chart's
//! MutatingWebhookConfiguration ([`configuration`]) called by URL (the scheduler runs
//! in-process, not as a pod behind a Service). So a fractional pod gets its share's
//! environment on every default path with no extra step.

use std::net::SocketAddr;

use gantry_api::names;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::admission::AdmissionConfig;
use super::webhook::{self, WebhookError};

/// The configuration's name: not the chart's (`<release>-admission`), so a cluster the chart
/// was installed into never has its configuration taken over or deleted.
pub const CONFIGURATION_NAME: &str = "gantry-admission-in-process";
/// The webhook's name in it.
pub const WEBHOOK_NAME: &str = "gpu-sharing.gantry.dev";
/// The route the server answers reviews on.
pub const PATH: &str = "/mutate-pod";

/// The webhook entry the chart renders (`deploy/helm/gantry/templates/admission.yaml`, default
/// values), with `client_config` (`{url|service, caBundle}`): only pod creates, and of those
/// only fractional pods of `scheduler_name` (`matchConditions`), failing closed.
pub fn webhook_entry(client_config: Value, scheduler_name: &str) -> Value {
    let name = serde_json::to_string(scheduler_name).unwrap_or_default();
    json!({
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
        "reinvocationPolicy": "Never",
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["pods"], "scope": "Namespaced"}],
        "matchConditions": [{
            "name": "fractional-gpu-pod",
            "expression": format!(
                "has(object.spec.schedulerName) && object.spec.schedulerName == {name} && \
                 has(object.metadata.annotations) && \
                 ('{}' in object.metadata.annotations || '{}' in object.metadata.annotations)",
                names::ANNOTATION_GPU_FRACTION,
                names::ANNOTATION_GPU_MEMORY
            ),
        }],
    })
}

/// The MutatingWebhookConfiguration for a webhook served at `url`, trusting `ca_pem`.
pub fn configuration(url: &str, ca_pem: &str, scheduler_name: &str) -> Value {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME,
                     "labels": {"app.kubernetes.io/managed-by": "gantry",
                                "app.kubernetes.io/component": "admission"}},
        "webhooks": [webhook_entry(json!({"url": url, "caBundle": ca}), scheduler_name)],
    })
}

/// PEM text of the serving certificate (valid for `127.0.0.1`), its key and its CA.
pub struct Certificates {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A running local webhook; [`Local::stop`] unregisters and stops it.
pub struct Local {
    pub address: SocketAddr,
    client: kube::Client,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Serves the webhook on `127.0.0.1` (any port) and registers it with the API server.
pub fn start<'a>(
    client: kube::Client,
    certs: &'a Certificates,
    cfg: AdmissionConfig,
) -> futures::future::BoxFuture<'a, Result<Local, WebhookError>> {
    Box::pin(start_inner(client, certs, cfg))
}

async fn start_inner(
    client: kube::Client,
    certs: &Certificates,
    cfg: AdmissionConfig,
) -> Result<Local, WebhookError> {
    let tls = webhook::tls_config(
        &certs.cert_pem,
        &certs.key_pem,
        "the local webhook's certificate",
    )?;
    let (stop, rx) = watch::channel(false);
    let scheduler_name = cfg.scheduler_name.clone();
    let any: SocketAddr = ([127, 0, 0, 1], 0).into();
    let (address, serve) = webhook::bind(any, tls, cfg, rx).await?;
    let task = tokio::spawn(serve);
    let url = format!("https://{address}{PATH}");
    let body = configuration(&url, &certs.ca_pem, &scheduler_name);
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let pp = PatchParams::apply(names::FIELD_MANAGER_SCHEDULER).force();
    if let Err(source) = api
        .patch(CONFIGURATION_NAME, &pp, &Patch::Apply(&body))
        .await
    {
        let _ = stop.send(true);
        return Err(WebhookError::Register {
            name: CONFIGURATION_NAME.into(),
            source,
        });
    }
    tracing::info!(%url, "admission webhook serving in-process");
    Ok(Local {
        address,
        client,
        stop,
        task,
    })
}

impl Local {
    /// Unregisters the webhook (a later create must not call a server that is gone) and stops
    /// it.
    pub async fn stop(self) {
        let api: Api<MutatingWebhookConfiguration> = Api::all(self.client);
        if let Err(e) = api
            .delete(CONFIGURATION_NAME, &DeleteParams::default())
            .await
        {
            tracing::debug!(error = %e, "unregistering the in-process admission webhook");
        }
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_calls_the_url_for_fractional_pods_of_the_scheduler() {
        let c = configuration("https://127.0.0.1:1/mutate-pod", "PEM", "kai-scheduler");
        let w = &c["webhooks"][0];
        assert_eq!(w["clientConfig"]["url"], "https://127.0.0.1:1/mutate-pod");
        assert_eq!(w["clientConfig"]["caBundle"], "UEVN");
        assert_eq!(w["failurePolicy"], "Fail");
        let expr = w["matchConditions"][0]["expression"]
            .as_str()
            .expect("expr");
        assert!(
            expr.contains("object.spec.schedulerName == \"kai-scheduler\""),
            "{expr}"
        );
        assert!(
            expr.contains("'gpu-fraction' in object.metadata.annotations"),
            "{expr}"
        );
        assert!(
            expr.contains("'gpu-memory' in object.metadata.annotations"),
            "{expr}"
        );
        let _: MutatingWebhookConfiguration =
            serde_json::from_value(c).expect("a valid MutatingWebhookConfiguration");
    }
}
