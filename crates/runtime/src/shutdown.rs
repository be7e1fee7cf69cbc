//! Shutdown: SIGTERM (what the kubelet sends) or Ctrl-C.

use std::future::Future;

use tokio::sync::watch;

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// A flag that turns true once `shutdown` resolves: one signal, any number of listeners.
pub fn flag(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            () = shutdown => { let _ = tx.send(true); }
            // Every listener is gone: nobody to tell.
            () = tx.closed() => {}
        }
    });
    rx
}

/// Resolves once `flag` is true (or its sender is gone).
pub async fn wait(mut flag: watch::Receiver<bool>) {
    let _ = flag.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_flag_follows_the_future() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let f = flag(async {
            let _ = rx.await;
        });
        assert!(!*f.borrow());
        tx.send(()).unwrap();
        wait(f.clone()).await;
        assert!(*f.borrow());
    }
}
