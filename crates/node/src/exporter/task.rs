//! The sampler and the XID watch as one task, where the GPU backend's event stream wakes its
//! reader (the simulated backend): it sleeps until the next sample is due, an XID event
//! arrives or the exporter is dropped. NVML's streams block, so there they are two threads
//! (see [`super::Exporter::start`]); thousands of simulated nodes in one process would hold
//! two threads a node.

use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::{Backend, EventStream, event_kind};
use tokio::sync::{Notify, oneshot};

use gantry_gpu::GpuError;

use super::sample::{self, XidLog};

/// Takes a sample and renders it.
pub(super) type Sample = Arc<dyn Fn() -> Result<(), GpuError> + Send + Sync>;

/// Dropping it stops the task.
pub(super) type Stop = oneshot::Sender<()>;

/// Starts the task if this runs on a tokio runtime and the backend's XID stream can wake its
/// reader; None: the caller starts threads instead.
pub(super) fn spawn(
    sample: Sample,
    interval: Duration,
    backend: &Arc<dyn Backend>,
    xids: &Arc<XidLog>,
) -> Option<Stop> {
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let mut stream = match backend.subscribe(event_kind::XID_CRITICAL) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot subscribe to XID events; DCGM_FI_DEV_XID_ERRORS stays 0");
            return None;
        }
    };
    let wake = Arc::new(Notify::new());
    let w = wake.clone();
    if !stream.on_event(Arc::new(move || w.notify_one())) {
        return None;
    }
    let (stop, stopped) = oneshot::channel();
    rt.spawn(run(sample, interval, stream, wake, xids.clone(), stopped));
    Some(stop)
}

async fn run(
    sample: Sample,
    interval: Duration,
    mut stream: Box<dyn EventStream>,
    wake: Arc<Notify>,
    xids: Arc<XidLog>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut xid_stream = true;
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = tick.tick() => {
                if let Err(e) = sample() {
                    crate::warn_limited!(
                        "exporter sampling",
                        error = %e,
                        "sampling GPUs failed; serving the previous sample"
                    );
                }
            }
            _ = wake.notified(), if xid_stream => {
                if let Err(e) = sample::drain_xids(stream.as_mut(), &xids) {
                    tracing::warn!(error = %e, "the XID event stream ended; DCGM_FI_DEV_XID_ERRORS stops changing");
                    xid_stream = false;
                }
            }
        }
    }
}
