//! The status task: one writer that sends Events and queue / PodGroup status in order
//! (deduplicated there).

use crate::decisions::QueueReport;
use crate::k8s::events::{Events, Said};
use crate::k8s::status::StatusWriter;
use tokio::sync::mpsc;

/// Work for the status task (one writer, in order, deduplicated there).
pub(super) enum StatusMsg {
    PodEvent {
        namespace: String,
        name: String,
        uid: String,
        said: Said,
    },
    Forget {
        namespace: String,
        name: String,
    },
    Queue {
        report: QueueReport,
        children: Vec<String>,
    },
    Group {
        namespace: String,
        name: String,
        unschedulable: Option<String>,
    },
}

/// `component` names the writer in Events (`source.component`, `reportingComponent`: the
/// scheduler's name, as kube-scheduler's `default-scheduler`); `instance` is this replica.
pub(super) async fn status_task(
    client: kube::Client,
    component: String,
    instance: String,
    mut rx: mpsc::UnboundedReceiver<StatusMsg>,
) {
    let mut events = Events::new(client.clone(), &component, &instance);
    let mut status = StatusWriter::new(client);
    while let Some(m) = rx.recv().await {
        match m {
            StatusMsg::PodEvent {
                namespace,
                name,
                uid,
                said,
            } => events.pod(&namespace, &name, &uid, said).await,
            StatusMsg::Forget { namespace, name } => events.forget(&namespace, &name),
            StatusMsg::Queue { report, children } => status.queue(&report, &children).await,
            StatusMsg::Group {
                namespace,
                name,
                unschedulable,
            } => {
                status
                    .pod_group(&namespace, &name, unschedulable.as_deref())
                    .await
            }
        }
    }
}
