//! The status a pod's kubelet writes: container states, conditions, phase. Pure.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{Value, json};

/// Per-container state for the status.
#[derive(Debug, Clone, PartialEq)]
pub enum CState {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started: String,
    },
    Terminated {
        code: i32,
        reason: String,
        /// The termination message (see `containers::termination_message`); empty: none.
        message: String,
        started: String,
        finished: String,
    },
}

impl CState {
    fn to_json(&self) -> Value {
        match self {
            CState::Waiting { reason, message } => {
                json!({"waiting": {"reason": reason, "message": message}})
            }
            CState::Running { started } => json!({"running": {"startedAt": started}}),
            CState::Terminated {
                code,
                reason,
                message,
                started,
                finished,
            } => {
                let mut t = json!({
                    "exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished});
                if !message.is_empty() {
                    t["message"] = json!(message);
                }
                json!({ "terminated": t })
            }
        }
    }
}

/// One init container's status.
#[derive(Debug, Clone, PartialEq)]
pub struct InitStatus {
    pub state: CState,
    pub last: Option<CState>,
    pub restarts: u32,
}

impl InitStatus {
    pub(super) fn waiting() -> Self {
        InitStatus {
            state: CState::Waiting {
                reason: "PodInitializing".into(),
                message: String::new(),
            },
            last: None,
            restarts: 0,
        }
    }
}

/// A container as a status names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub name: String,
    pub image: String,
}

/// A pod's containers and init containers, by name and image: all that its status reads of
/// the spec (a running pod keeps its spec only as JSON, see `Ctx::admitted`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Containers {
    pub main: Vec<Named>,
    pub init: Vec<Named>,
}

impl Containers {
    pub fn of(pod: &Pod) -> Self {
        let named = |cs: &[Container]| {
            cs.iter()
                .map(|c| Named {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                })
                .collect()
        };
        let spec = pod.spec.as_ref();
        Containers {
            main: spec.map(|s| named(&s.containers)).unwrap_or_default(),
            init: named(
                spec.and_then(|s| s.init_containers.as_deref())
                    .unwrap_or_default(),
            ),
        }
    }
}

/// The status patch for a pod, pure.
pub struct StatusView<'a> {
    pub uid: &'a str,
    pub containers: &'a Containers,
    pub phase: &'a str,
    /// State of every main container.
    pub state: &'a CState,
    pub last: Option<&'a CState>,
    pub restarts: u32,
    /// Init containers by position; missing entries have not started (`PodInitializing`).
    pub inits: &'a [InitStatus],
    /// Every init container has completed.
    pub initialized: bool,
    pub host_ip: &'a str,
    pub pod_ip: &'a str,
    pub started: &'a str,
    pub reason: Option<(&'a str, &'a str)>,
    pub now: &'a str,
}

fn container_status(
    v: &StatusView<'_>,
    c: &Named,
    state: &CState,
    last: Option<&CState>,
    ready: bool,
    restarts: u32,
) -> Value {
    let image = &c.image;
    let mut s = json!({
        "name": c.name, "image": image,
        "imageID": format!("sim://{image}"),
        "containerID": format!("sim://{}-{}", v.uid, c.name),
        "ready": ready, "started": matches!(state, CState::Running { .. }),
        "restartCount": restarts, "state": state.to_json(),
    });
    if let Some(l) = last {
        s["lastState"] = l.to_json();
    }
    s
}

pub fn status_patch(v: &StatusView<'_>) -> Value {
    let running = matches!(v.state, CState::Running { .. });
    let ready = running && v.phase == "Running" && v.initialized;
    let cond = |t: &str, ok: bool| json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": v.now});
    let containers: Vec<Value> = v
        .containers
        .main
        .iter()
        .map(|c| container_status(v, c, v.state, v.last, ready, v.restarts))
        .collect();
    let not_started = InitStatus::waiting();
    let inits: Vec<Value> = v
        .containers
        .init
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let st = v.inits.get(i).unwrap_or(&not_started);
            let done = matches!(st.state, CState::Terminated { code: 0, .. });
            container_status(v, c, &st.state, st.last.as_ref(), done, st.restarts)
        })
        .collect();
    let initializing = !v.initialized && v.phase == "Pending";
    let mut status = json!({
        "phase": v.phase,
        "hostIP": v.host_ip,
        "hostIPs": [{"ip": v.host_ip}],
        "podIP": v.pod_ip,
        "podIPs": [{"ip": v.pod_ip}],
        "startTime": v.started,
        "conditions": [
            cond("PodReadyToStartContainers", running || initializing),
            cond("Initialized", v.initialized),
            cond("ContainersReady", ready),
            cond("Ready", ready),
            cond("PodScheduled", true),
        ],
        "containerStatuses": containers,
        "initContainerStatuses": inits,
        "qosClass": "BestEffort",
    });
    match v.reason {
        Some((reason, message)) => {
            status["reason"] = json!(reason);
            status["message"] = json!(message);
        }
        None => {
            status["reason"] = Value::Null;
            status["message"] = Value::Null;
        }
    }
    json!({ "status": status })
}

pub(super) fn crash_loop(backoff: Duration) -> CState {
    CState::Waiting {
        reason: "CrashLoopBackOff".into(),
        message: format!(
            "back-off {}s restarting failed container",
            backoff.as_secs()
        ),
    }
}

pub(super) fn pod_initializing() -> CState {
    CState::Waiting {
        reason: "PodInitializing".into(),
        message: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::pods::restarts::BACKOFF_START;

    #[test]
    fn status_patch_shapes() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "main", "image": "img"}],
                     "initContainers": [{"name": "init", "image": "i"}]}
        }))
        .unwrap();
        let st = CState::Running {
            started: "t0".into(),
        };
        let p = status_patch(&StatusView {
            uid: "u",
            containers: &Containers::of(&pod),
            phase: "Running",
            state: &st,
            last: None,
            restarts: 2,
            inits: &[InitStatus {
                state: CState::Terminated {
                    code: 0,
                    reason: "Completed".into(),
                    message: String::new(),
                    started: "t0".into(),
                    finished: "t0".into(),
                },
                last: None,
                restarts: 1,
            }],
            initialized: true,
            host_ip: "10.0.0.1",
            pod_ip: "10.244.0.2",
            started: "t0",
            reason: None,
            now: "t1",
        });
        let s = &p["status"];
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["containerStatuses"][0]["ready"], true);
        assert_eq!(s["containerStatuses"][0]["restartCount"], 2);
        assert_eq!(
            s["containerStatuses"][0]["state"]["running"]["startedAt"],
            "t0"
        );
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(s["initContainerStatuses"][0]["restartCount"], 1);
        assert_eq!(s["initContainerStatuses"][0]["ready"], true);
        let ready = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let term = CState::Terminated {
            code: 3,
            reason: "Error".into(),
            message: String::new(),
            started: "a".into(),
            finished: "b".into(),
        };
        let p = status_patch(&StatusView {
            phase: "Failed",
            state: &term,
            reason: Some(("OutOfpods", "m")),
            ..StatusView {
                uid: "u",
                containers: &Containers::of(&pod),
                phase: "",
                state: &st,
                last: None,
                restarts: 0,
                inits: &[],
                initialized: true,
                host_ip: "h",
                pod_ip: "p",
                started: "t0",
                reason: None,
                now: "t1",
            }
        });
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
        assert_eq!(p["status"]["reason"], "OutOfpods");
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(ready["status"], "False");
    }

    #[test]
    fn status_while_initializing() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "main", "image": "img"}],
                     "initContainers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}
        }))
        .unwrap();
        let failed = CState::Terminated {
            code: 1,
            reason: "Error".into(),
            message: String::new(),
            started: "t0".into(),
            finished: "t1".into(),
        };
        let inits = [InitStatus {
            state: crash_loop(BACKOFF_START),
            last: Some(failed),
            restarts: 1,
        }];
        let p = status_patch(&StatusView {
            uid: "u",
            containers: &Containers::of(&pod),
            phase: "Pending",
            state: &pod_initializing(),
            last: None,
            restarts: 0,
            inits: &inits,
            initialized: false,
            host_ip: "h",
            pod_ip: "p",
            started: "t0",
            reason: None,
            now: "t1",
        });
        let s = &p["status"];
        assert_eq!(s["phase"], "Pending");
        let a = &s["initContainerStatuses"][0];
        assert_eq!(a["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(a["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(a["restartCount"], 1);
        assert_eq!(
            s["initContainerStatuses"][1]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        let cond = |t: &str| {
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(cond("Initialized"), "False");
        assert_eq!(cond("Ready"), "False");
    }
}
