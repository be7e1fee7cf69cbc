//! Events on pods, written the way kube-scheduler's recorder writes them: `Scheduled`
//! ("Successfully assigned NS/NAME to NODE") once a pod is bound, `FailedScheduling` with the
//! reason the cycle gives while it is pending, and the scheduler's own reasons (evicted,
//! invalid input). Counting and spacing of repeats are `gantry_runtime::events`' (one Event
//! per pod and (type, reason, message), growing gaps); `FailedScheduling` is an *attempt*,
//! further spaced by kube-scheduler's 1–10 s pod backoff however often its message changes.

use gantry_runtime::events::{Recorder, object_ref};

pub use gantry_runtime::events::Said;

use super::status::reason;

/// Writes pod Events as `component` (the scheduler's name), instance `instance`.
pub struct Events {
    recorder: Recorder,
}

/// The Event `action` kube-scheduler gives a reason.
fn action(reason: &str) -> &str {
    match reason {
        reason::SCHEDULED => "Binding",
        reason::FAILED_SCHEDULING => "Scheduling",
        other => other,
    }
}

impl Events {
    pub fn new(client: kube::Client, component: &str, instance: &str) -> Events {
        let attempts = [reason::FAILED_SCHEDULING];
        Events {
            recorder: Recorder::with_attempt_reasons(client, component, instance, &attempts),
        }
    }

    /// Report `said` about a pod (written, counted, or held back by the recorder).
    pub async fn pod(&mut self, namespace: &str, name: &str, uid: &str, said: Said) {
        let pod = object_ref("Pod", Some(namespace), name, Some(uid));
        let action = action(&said.reason).to_string();
        self.recorder.publish(&pod, &said, Some(&action)).await;
    }

    pub fn forget(&mut self, namespace: &str, name: &str) {
        self.recorder
            .forget(&object_ref("Pod", Some(namespace), name, None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_kube_schedulers() {
        assert_eq!(action(reason::SCHEDULED), "Binding");
        assert_eq!(action(reason::FAILED_SCHEDULING), "Scheduling");
        assert_eq!(action(reason::INVALID), reason::INVALID);
    }
}
