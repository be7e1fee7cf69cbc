//! Whether the pod a task watches is being deleted (or gone from the API).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

/// Whether the pod (None: gone) is being deleted.
pub(super) fn stopping(p: &Option<Arc<Pod>>) -> bool {
    p.as_ref()
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

/// Wait until the pod is being deleted (or gone).
pub(super) async fn wait_stopping(rx: &mut watch::Receiver<Option<Arc<Pod>>>) {
    while !stopping(&rx.borrow_and_update()) {
        if rx.changed().await.is_err() {
            return;
        }
    }
}
