//! A client that records the writes it sends.

use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;

/// A `kube::Client` whose requests pass through a layer that records each write (every
/// method but GET and HEAD) as `METHOD uri`. Clones share the record.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    writes: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    /// A recording client for `config` (e.g. `ControlPlane::kube_config()`).
    pub fn new(config: kube::Config) -> anyhow::Result<Recorder> {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let log = writes.clone();
        let layer =
            tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
                let m = req.method();
                if m != http::Method::GET && m != http::Method::HEAD {
                    lock(&log).push(format!("{m} {}", req.uri()));
                }
                req
            });
        let client = kube::client::ClientBuilder::try_from(config)
            .context("a client for the recorder")?
            .with_layer(&layer)
            .build();
        Ok(Recorder { client, writes })
    }

    /// The recording client; requests sent through any clone of it are recorded.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// `METHOD uri` of each write since the start or the last [`Recorder::clear`], in order.
    pub fn writes(&self) -> Vec<String> {
        lock(&self.writes).clone()
    }

    /// How many writes [`Recorder::writes`] holds.
    pub fn count(&self) -> u64 {
        lock(&self.writes).len() as u64
    }

    /// Forget the writes recorded so far.
    pub fn clear(&self) {
        lock(&self.writes).clear();
    }
}

/// The record, even if a thread panicked while holding it (a push cannot leave it invalid).
fn lock(m: &Mutex<Vec<String>>) -> MutexGuard<'_, Vec<String>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use crate::Cluster;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, ListParams, PostParams};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_writes_but_not_reads_and_clears() -> anyhow::Result<()> {
        let c = Cluster::builder().namespace("t").start().await?;
        let rec = c.recorder()?;
        let api: Api<ConfigMap> = Api::namespaced(rec.client(), "t");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}}))?;
        api.create(&PostParams::default(), &cm).await?;
        api.get("a").await?;
        api.list(&ListParams::default()).await?;
        assert_eq!(rec.count(), 1, "{:?}", rec.writes());
        assert!(
            rec.writes()[0].starts_with("POST /api/v1/namespaces/t/configmaps"),
            "{:?}",
            rec.writes()
        );
        // Writes through the cluster's own client are not recorded.
        Api::<ConfigMap>::namespaced(c.client().clone(), "t")
            .delete("a", &DeleteParams::default())
            .await?;
        assert_eq!(rec.count(), 1);
        rec.clear();
        assert_eq!(rec.count(), 0);
        api.create(&PostParams::default(), &cm).await?;
        assert_eq!(rec.writes().len(), 1);
        Ok(())
    }
}
