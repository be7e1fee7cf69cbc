//! The sampler and the XID watch as one task, where the GPU backend's event stream wakes its
//! reader (the simulated backend): it sleeps until the next sample is due, an XID event
//! arrives or the exporter is dropped. NVML's streams block, so there they are two threads
//! (see [`super::Exporter::start`]); thousands of simulated nodes in one process would hold
//! two threads a node.

use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::{EventStream, GpuError};
use tokio::sync::{Notify, oneshot};

use super::sample::{self, XidLog};

/// Takes a sample and renders it.
pub(super) type Sample = Arc<dyn Fn() -> Result<(), GpuError> + Send + Sync>;

/// Dropping it stops the task.
pub(super) type Stop = oneshot::Sender<()>;

/// Starts the task if this runs on a tokio runtime and the XID stream can wake its reader
/// (it is then taken); None: the caller starts threads instead, with the stream.
pub(super) fn spawn(
    sample: Sample,
    interval: Duration,
    xid_events: &mut Option<Box<dyn EventStream>>,
    xids: &Arc<XidLog>,
) -> Option<Stop> {
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let wake = Arc::new(Notify::new());
    let w = wake.clone();
    if !xid_events
        .as_mut()?
        .on_event(Arc::new(move || w.notify_one()))
    {
        return None;
    }
    let stream = xid_events.take()?;
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
