//! A running pod task as its node holds it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running pod task: the latest object (None = gone from the API) and the task.
pub struct PodHandle {
    pub(super) tx: watch::Sender<Option<Arc<Pod>>>,
    pub(super) task: JoinHandle<()>,
}

impl Drop for PodHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}
