//! Pure: operand readiness and the ClusterPolicy status (`reference/gpu-operator.md` §1.12,
//! §3.1). The reconciler feeds it what it read and writes the result only when it differs
//! from what is stored ([`same_status`]).

use std::collections::BTreeMap;

use gantry_api::cluster_policy::{ClusterPolicyState, ClusterPolicyStatus, condition};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::render::State;

/// Readiness of one operand state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotReady,
    /// The state is off in the policy (upstream's per-state `disabled`).
    Disabled,
}

/// Upstream's DaemonSet readiness: ready with nothing to schedule; not ready while any pod is
/// unavailable; RollingUpdate: the latest generation observed and every pod updated and
/// available; OnDelete: every owned pod runs the current revision, is Running and all its
/// containers are Ready. `pods` are the DaemonSet's pods; `revision` its current
/// controller-revision hash (OnDelete only; `None` skips the revision check).
pub fn daemonset_ready(ds: &DaemonSet, pods: &[&Pod], revision: Option<&str>) -> bool {
    let Some(st) = ds.status.as_ref() else {
        return false;
    };
    if st.desired_number_scheduled == 0 {
        return true;
    }
    if st.number_unavailable.unwrap_or(0) != 0 {
        return false;
    }
    let on_delete = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        == Some("OnDelete");
    if !on_delete {
        let generation = ds.metadata.generation.unwrap_or(0);
        return st.observed_generation.unwrap_or(0) >= generation
            && st.updated_number_scheduled.unwrap_or(0) == st.desired_number_scheduled
            && st.number_available.unwrap_or(0) == st.desired_number_scheduled;
    }
    if (pods.len() as i32) < st.desired_number_scheduled {
        return false;
    }
    pods.iter().all(|p| {
        let rev_ok = match revision {
            Some(r) => {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("controller-revision-hash"))
                    .map(String::as_str)
                    == Some(r)
            }
            None => true,
        };
        let s = p.status.as_ref();
        let running = s.and_then(|s| s.phase.as_deref()) == Some("Running");
        let all_ready = s
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.ready));
        rev_ok && running && all_ready
    })
}

/// The waiting reason of a container the kubelet restarts with back-off.
pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";

/// `(node, "pod/container")` for every container of `pod` in CrashLoopBackOff.
pub fn crash_looping(pod: &Pod) -> Vec<(String, String)> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let Some(s) = pod.status.as_ref() else {
        return Vec::new();
    };
    s.init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .filter(|c| {
            c.state
                .as_ref()
                .and_then(|st| st.waiting.as_ref())
                .and_then(|w| w.reason.as_deref())
                == Some(CRASH_LOOP_BACK_OFF)
        })
        .map(|c| (node.clone(), format!("{name}/{}", c.name)))
        .collect()
}

/// Crash-looping nodes named in the status message; the rest are counted.
pub const MAX_NAMED_NODES: usize = 10;

/// What the reconciler observed, for [`compute`].
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Every state with its readiness, in order.
    pub states: Vec<(State, Readiness)>,
    /// node -> its crash-looping `pod/container`s.
    pub crash_looping: BTreeMap<String, Vec<String>>,
    pub gpu_nodes: usize,
    /// Some node carries an NFD label.
    pub nfd_present: bool,
    /// States held back (not applied) and why: the policy is `notReady` with this reason.
    pub held: Option<Held>,
}

/// States the reconciler holds back until something they read is fixed.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    pub reason: &'static str,
    /// What is wrong, naming the object (the condition's message starts with it).
    pub message: String,
    pub states: Vec<State>,
}

/// Conditions `Ready`/`Error` without timestamps (set by [`with_times`]).
fn pair(ok: bool, reason: &str, message: String) -> Vec<Condition> {
    let c = |type_: &str, status: bool, reason: &str, message: String| Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        observed_generation: None,
    };
    if ok {
        vec![
            c(condition::READY, true, reason, message),
            c(
                condition::ERROR,
                false,
                condition::REASON_READY,
                String::new(),
            ),
        ]
    } else {
        vec![
            c(
                condition::READY,
                false,
                condition::REASON_ERROR,
                message.clone(),
            ),
            c(condition::ERROR, true, reason, message),
        ]
    }
}

/// The active policy's status from what was observed.
pub fn compute(namespace: &str, obs: &Observed) -> ClusterPolicyStatus {
    let held: &[State] = obs.held.as_ref().map_or(&[], |h| &h.states);
    let not_ready: Vec<&str> = obs
        .states
        .iter()
        .filter(|(s, r)| *r == Readiness::NotReady && !held.contains(s))
        .map(|(s, _)| s.name())
        .collect();
    let (state, conditions) = if obs.held.is_some()
        || !not_ready.is_empty()
        || !obs.crash_looping.is_empty()
    {
        let mut parts = Vec::new();
        if let Some(h) = &obs.held {
            let names: Vec<&str> = h.states.iter().map(|s| s.name()).collect();
            parts.push(format!("{}; held back: [{}]", h.message, names.join(" ")));
        }
        if !not_ready.is_empty() {
            parts.push(format!("states not ready: [{}]", not_ready.join(" ")));
        }
        if !obs.crash_looping.is_empty() {
            // Name the first few nodes; the status must stay small on big clusters.
            let mut nodes: Vec<String> = obs
                .crash_looping
                .iter()
                .take(MAX_NAMED_NODES)
                .map(|(n, cs)| format!("{n} ({})", cs.join(", ")))
                .collect();
            if obs.crash_looping.len() > MAX_NAMED_NODES {
                nodes.push(format!(
                    "and {} more",
                    obs.crash_looping.len() - MAX_NAMED_NODES
                ));
            }
            parts.push(format!(
                "operand pods crash-looping on nodes: [{}]",
                nodes.join(", ")
            ));
        }
        let reason = match &obs.held {
            Some(h) => h.reason,
            None if not_ready == [State::Driver.name()] => condition::REASON_DRIVER_NOT_READY,
            None => condition::REASON_OPERAND_NOT_READY,
        };
        (
            ClusterPolicyState::NotReady,
            pair(false, reason, parts.join("; ")),
        )
    } else if obs.gpu_nodes == 0 {
        let (reason, msg) = if obs.nfd_present {
            (
                condition::REASON_NO_GPU_NODES,
                "no GPU nodes found (no node has an NVIDIA PCI NFD label or nvidia.com/gpu.present=true)",
            )
        } else {
            (
                condition::REASON_NFD_LABELS_MISSING,
                "no NFD labels found on any node; install node-feature-discovery or label GPU nodes nvidia.com/gpu.present=true",
            )
        };
        (ClusterPolicyState::Ready, pair(true, reason, msg.into()))
    } else {
        (
            ClusterPolicyState::Ready,
            pair(
                true,
                condition::REASON_RECONCILED,
                "all enabled operands are ready".into(),
            ),
        )
    };
    ClusterPolicyStatus {
        state,
        namespace: Some(namespace.to_string()),
        conditions: Some(conditions),
        ..Default::default()
    }
}

/// The status of a policy that failed before anything was applied (invalid spec, API error).
pub fn failed(namespace: &str, reason: &str, message: String) -> ClusterPolicyStatus {
    ClusterPolicyStatus {
        state: ClusterPolicyState::NotReady,
        namespace: Some(namespace.to_string()),
        conditions: Some(pair(false, reason, message)),
        ..Default::default()
    }
}

/// The status of a policy that is not the active one.
pub fn ignored(namespace: &str, active: &str) -> ClusterPolicyStatus {
    ClusterPolicyStatus {
        state: ClusterPolicyState::Ignored,
        namespace: Some(namespace.to_string()),
        conditions: Some(pair(
            false,
            condition::REASON_RECONCILE_FAILED,
            format!(
                "ClusterPolicy {active} is older and is the active one; only one ClusterPolicy is reconciled"
            ),
        )),
        ..Default::default()
    }
}

/// Carry each condition's lastTransitionTime over from `old` when its status did not change;
/// otherwise stamp `now`.
pub fn with_times(
    mut new: ClusterPolicyStatus,
    old: Option<&ClusterPolicyStatus>,
    now: Timestamp,
) -> ClusterPolicyStatus {
    let old_conds = old.and_then(|o| o.conditions.as_ref());
    for c in new.conditions.iter_mut().flatten() {
        let prev = old_conds
            .into_iter()
            .flatten()
            .find(|o| o.type_ == c.type_ && o.status == c.status);
        c.last_transition_time = prev.map_or(Time(now), |p| p.last_transition_time.clone());
    }
    new
}

/// Whether two statuses say the same (extra fields ignored).
pub fn same_status(a: &ClusterPolicyStatus, b: &ClusterPolicyStatus) -> bool {
    a.state == b.state && a.namespace == b.namespace && a.conditions == b.conditions
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(v: serde_json::Value) -> DaemonSet {
        serde_json::from_value(v).unwrap()
    }
    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }
    fn running(rev: &str, ready: bool) -> Pod {
        pod(json!({
            "metadata": {"name": "p", "labels": {"controller-revision-hash": rev}},
            "spec": {"nodeName": "n0", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "ready": ready,
                "restartCount": 0, "image": "i", "imageID": ""}]}
        }))
    }

    #[test]
    fn rolling_update_readiness() {
        let base = json!({"metadata": {"name": "d", "generation": 2},
            "spec": {"selector": {}, "template": {}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberMisscheduled": 0,
                "numberReady": 3, "numberAvailable": 3, "numberUnavailable": 0,
                "updatedNumberScheduled": 3, "observedGeneration": 2}});
        assert!(daemonset_ready(&ds(base.clone()), &[], None));
        let mut v = base.clone();
        v["status"]["observedGeneration"] = json!(1);
        assert!(!daemonset_ready(&ds(v), &[], None), "old generation");
        let mut v = base.clone();
        v["status"]["updatedNumberScheduled"] = json!(2);
        assert!(!daemonset_ready(&ds(v), &[], None), "not all updated");
        let mut v = base.clone();
        v["status"]["numberUnavailable"] = json!(1);
        assert!(!daemonset_ready(&ds(v), &[], None), "unavailable");
        let mut v = base;
        v["status"] = json!({"desiredNumberScheduled": 0, "currentNumberScheduled": 0,
            "numberMisscheduled": 0, "numberReady": 0});
        assert!(daemonset_ready(&ds(v), &[], None), "nothing to schedule");
        assert!(!daemonset_ready(
            &ds(json!({"metadata": {"name": "d"}})),
            &[],
            None
        ));
    }

    #[test]
    fn on_delete_readiness_checks_pods() {
        let d = ds(json!({"metadata": {"name": "d", "generation": 5},
            "spec": {"selector": {}, "template": {}, "updateStrategy": {"type": "OnDelete"}},
            "status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "numberMisscheduled": 0,
                "numberReady": 1, "numberUnavailable": 0, "updatedNumberScheduled": 0, "observedGeneration": 4}}));
        let good = running("r2", true);
        assert!(daemonset_ready(&d, &[&good], Some("r2")));
        let old = running("r1", true);
        assert!(!daemonset_ready(&d, &[&old], Some("r2")), "old revision");
        let unready = running("r2", false);
        assert!(!daemonset_ready(&d, &[&unready], Some("r2")));
        assert!(!daemonset_ready(&d, &[], Some("r2")), "pod missing");
    }

    #[test]
    fn crash_loops_are_named_by_node() {
        let p = pod(json!({
            "metadata": {"name": "nvidia-driver-daemonset-x"},
            "spec": {"nodeName": "h100-0", "containers": [{"name": "nvidia-driver-ctr"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "nvidia-driver-ctr", "ready": false,
                "restartCount": 3, "image": "i", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        }));
        assert_eq!(
            crash_looping(&p),
            vec![(
                "h100-0".to_string(),
                "nvidia-driver-daemonset-x/nvidia-driver-ctr".to_string()
            )]
        );
        assert!(crash_looping(&running("r", true)).is_empty());
        let obs = Observed {
            states: vec![
                (State::Driver, Readiness::NotReady),
                (State::DevicePlugin, Readiness::Ready),
            ],
            crash_looping: BTreeMap::from([(
                "h100-0".to_string(),
                vec!["nvidia-driver-daemonset-x/nvidia-driver-ctr".to_string()],
            )]),
            gpu_nodes: 1,
            nfd_present: true,
            held: None,
        };
        let s = compute("gpu-operator", &obs);
        assert_eq!(s.state, ClusterPolicyState::NotReady);
        let conds = s.conditions.unwrap();
        let err = conds.iter().find(|c| c.type_ == condition::ERROR).unwrap();
        assert_eq!(err.status, "True");
        assert_eq!(err.reason, condition::REASON_DRIVER_NOT_READY);
        assert_eq!(
            err.message,
            "states not ready: [state-driver]; operand pods crash-looping on nodes: [h100-0 (nvidia-driver-daemonset-x/nvidia-driver-ctr)]"
        );
    }

    #[test]
    fn held_states_name_their_cause_first() {
        let obs = Observed {
            states: vec![
                (State::Driver, Readiness::Ready),
                (State::DevicePlugin, Readiness::NotReady),
                (State::Gfd, Readiness::NotReady),
            ],
            gpu_nodes: 1,
            nfd_present: true,
            held: Some(Held {
                reason: "DevicePluginConfigInvalid",
                message: "ConfigMap gpu-operator/ts does not exist".into(),
                states: vec![State::DevicePlugin],
            }),
            ..Default::default()
        };
        let s = compute("gpu-operator", &obs);
        assert_eq!(s.state, ClusterPolicyState::NotReady);
        let conds = s.conditions.unwrap();
        let err = conds.iter().find(|c| c.type_ == condition::ERROR).unwrap();
        assert_eq!(err.reason, "DevicePluginConfigInvalid");
        assert_eq!(
            err.message,
            "ConfigMap gpu-operator/ts does not exist; held back: [state-device-plugin]; \
             states not ready: [gpu-feature-discovery]"
        );
        // Held even when every state is ready (a device plugin still on its old config).
        let mut ready = obs.clone();
        ready.states = vec![(State::DevicePlugin, Readiness::Ready)];
        assert_eq!(compute("ns", &ready).state, ClusterPolicyState::NotReady);
    }

    #[test]
    fn ready_and_no_gpu_nodes() {
        let obs = Observed {
            states: vec![
                (State::Driver, Readiness::Ready),
                (State::Gfd, Readiness::Disabled),
            ],
            gpu_nodes: 2,
            nfd_present: true,
            ..Default::default()
        };
        let s = compute("ns", &obs);
        assert_eq!(s.state, ClusterPolicyState::Ready);
        let conds = s.conditions.unwrap();
        assert_eq!(conds[0].type_, condition::READY);
        assert_eq!(
            (conds[0].status.as_str(), conds[0].reason.as_str()),
            ("True", "Reconciled")
        );
        assert_eq!(
            (conds[1].status.as_str(), conds[1].reason.as_str()),
            ("False", "Ready")
        );
        let none = compute("ns", &Observed::default());
        assert_eq!(none.state, ClusterPolicyState::Ready);
        assert_eq!(
            none.conditions.unwrap()[0].reason,
            condition::REASON_NFD_LABELS_MISSING
        );
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let obs = Observed {
            gpu_nodes: 1,
            nfd_present: true,
            ..Default::default()
        };
        let first = with_times(compute("ns", &obs), None, t0);
        let again = with_times(compute("ns", &obs), Some(&first), t1);
        assert!(same_status(&first, &again));
        let broken = with_times(
            failed("ns", "ReconcileFailed", "x".into()),
            Some(&first),
            t1,
        );
        assert!(!same_status(&first, &broken));
        assert_eq!(broken.conditions.unwrap()[0].last_transition_time, Time(t1));
    }
}
