//! Tasks tied to the value that owns them.

use tokio::task::JoinHandle;

/// Aborts its task when dropped: a watch or server that lives exactly as long as its owner
/// (a cache, a loop, a test's scope) and never outlives it.
pub struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_it_aborts_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(AbortOnDrop(task));
        // The sender is dropped with the aborted task: the receiver sees the channel close.
        assert!(rx.await.is_err());
    }
}
