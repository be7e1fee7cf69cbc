//! Pure: an NVIDIADriver's status from what the reconcile found — upstream's shape: `state`
//! (`ready` / `notReady`, `ignored` while the ClusterPolicy does not hand drivers to CRs),
//! `namespace`, and the conditions `Ready` and `Error` with reasons, each carrying the CR's
//! generation it describes.

use gantry_api::nvidia_driver::{NVIDIADriverState, NVIDIADriverStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_ERROR: &str = "Error";
pub const REASON_RECONCILED: &str = "Reconciled";
pub const REASON_NOT_READY: &str = "DriverNotReady";
pub const REASON_CONFLICT: &str = "ConflictingNodeSelector";
pub const REASON_DEFAULT: &str = "MultipleDefaults";
pub const REASON_INVALID: &str = "InvalidSpec";
pub const REASON_DISABLED: &str = "NVIDIADriverCRDDisabled";
pub const REASON_NO_ERROR: &str = "NoError";

/// What went wrong with a CR, most serious first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The spec or its image cannot be rendered.
    Invalid(String),
    /// Another default CR is in charge.
    SecondDefault { default: String },
    /// (node, the other CRs selecting it).
    Conflicts(Vec<(String, Vec<String>)>),
}

/// What the reconcile saw for one CR.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub namespace: String,
    pub generation: Option<i64>,
    /// The ClusterPolicy's `useNvidiaDriverCRD` is off (or there is no ClusterPolicy): why.
    pub disabled: Option<String>,
    pub problems: Vec<Problem>,
    /// Each rendered DaemonSet: (name, why it is not ready yet; `None` when ready).
    pub daemonsets: Vec<(String, Option<String>)>,
    /// GPU nodes the CR owns.
    pub nodes: usize,
}

fn describe(p: &Problem) -> (&'static str, String) {
    match p {
        Problem::Invalid(m) => (REASON_INVALID, m.clone()),
        Problem::SecondDefault { default } => (
            REASON_DEFAULT,
            format!(
                "only one NVIDIADriver may set default: true and NVIDIADriver {default} already \
                 does; this one manages no nodes"
            ),
        ),
        Problem::Conflicts(list) => {
            let parts: Vec<String> = list
                .iter()
                .map(|(node, others)| {
                    let others: Vec<String> =
                        others.iter().map(|o| format!("NVIDIADriver {o}")).collect();
                    format!("node {node} is also selected by {}", others.join(", "))
                })
                .collect();
            (
                REASON_CONFLICT,
                format!(
                    "{}; the driver of such a node is left unchanged until only one \
                     NVIDIADriver selects it",
                    parts.join("; ")
                ),
            )
        }
    }
}

fn cond(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        observed_generation: generation,
    }
}

/// The status; transition times are kept from `old` where a condition's status did not change.
pub fn compute(
    o: &Observed,
    old: Option<&NVIDIADriverStatus>,
    now: Timestamp,
) -> NVIDIADriverStatus {
    let g = o.generation;
    let (state, conditions) = if let Some(why) = &o.disabled {
        (
            NVIDIADriverState::Ignored,
            vec![
                cond(CONDITION_READY, false, REASON_DISABLED, why.clone(), g),
                cond(CONDITION_ERROR, false, REASON_NO_ERROR, String::new(), g),
            ],
        )
    } else if !o.problems.is_empty() {
        let described: Vec<(&str, String)> = o.problems.iter().map(describe).collect();
        let reason = described[0].0;
        let message: Vec<String> = described.into_iter().map(|(_, m)| m).collect();
        let message = message.join("; ");
        (
            NVIDIADriverState::NotReady,
            vec![
                cond(CONDITION_READY, false, reason, message.clone(), g),
                cond(CONDITION_ERROR, true, reason, message, g),
            ],
        )
    } else {
        let waiting: Vec<String> = o
            .daemonsets
            .iter()
            .filter_map(|(n, why)| why.as_ref().map(|w| format!("DaemonSet {n}: {w}")))
            .collect();
        let ok = cond(CONDITION_ERROR, false, REASON_NO_ERROR, String::new(), g);
        if o.daemonsets.is_empty() && o.nodes > 0 {
            // Pools come from NFD's OS labels: without them there is nothing to run.
            let msg = format!(
                "{} selected GPU node(s) lack NFD's system-os_release ID / VERSION_ID labels, \
                 so they form no driver pool; install NFD (or label them)",
                o.nodes
            );
            (
                NVIDIADriverState::NotReady,
                vec![cond(CONDITION_READY, false, REASON_NOT_READY, msg, g), ok],
            )
        } else if waiting.is_empty() {
            let msg = if o.daemonsets.is_empty() {
                "no GPU node is selected: nothing to deploy".to_string()
            } else {
                format!("{} driver DaemonSet(s) ready", o.daemonsets.len())
            };
            (
                NVIDIADriverState::Ready,
                vec![cond(CONDITION_READY, true, REASON_RECONCILED, msg, g), ok],
            )
        } else {
            (
                NVIDIADriverState::NotReady,
                vec![
                    cond(
                        CONDITION_READY,
                        false,
                        REASON_NOT_READY,
                        waiting.join("; "),
                        g,
                    ),
                    ok,
                ],
            )
        }
    };
    let mut conditions = conditions;
    let old_conds = old.and_then(|s| s.conditions.as_ref());
    for c in &mut conditions {
        let prev = old_conds
            .into_iter()
            .flatten()
            .find(|p| p.type_ == c.type_ && p.status == c.status);
        c.last_transition_time = prev.map_or(Time(now), |p| p.last_transition_time.clone());
    }
    NVIDIADriverStatus {
        state,
        namespace: Some(o.namespace.clone()),
        conditions: Some(conditions),
        ..Default::default()
    }
}

/// Whether two statuses say the same thing (unknown fields ignored).
pub fn same(a: &NVIDIADriverStatus, b: &NVIDIADriverStatus) -> bool {
    a.state == b.state && a.namespace == b.namespace && a.conditions == b.conditions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn conflicts_name_the_node_and_the_other_cr() {
        let o = Observed {
            namespace: "gpu-operator".into(),
            generation: Some(3),
            problems: vec![Problem::Conflicts(vec![(
                "h100-80gb-0".into(),
                vec!["h100-extra".into()],
            )])],
            ..Default::default()
        };
        let st = compute(&o, None, at(10));
        assert_eq!(st.state, NVIDIADriverState::NotReady);
        let conds = st.conditions.unwrap();
        let err = conds.iter().find(|c| c.type_ == CONDITION_ERROR).unwrap();
        assert_eq!(err.status, "True");
        assert_eq!(err.reason, REASON_CONFLICT);
        assert!(
            err.message
                .contains("node h100-80gb-0 is also selected by NVIDIADriver h100-extra"),
            "{}",
            err.message
        );
        assert_eq!(err.observed_generation, Some(3));
    }

    #[test]
    fn ready_when_every_daemonset_is_and_times_are_kept() {
        let mut o = Observed {
            namespace: "ns".into(),
            generation: Some(1),
            daemonsets: vec![("a".into(), Some("1 of 2 pods ready".into()))],
            ..Default::default()
        };
        let first = compute(&o, None, at(10));
        assert_eq!(first.state, NVIDIADriverState::NotReady);
        let ready = first.conditions.as_ref().unwrap()[0].clone();
        assert!(ready.message.contains("DaemonSet a: 1 of 2 pods ready"));
        o.daemonsets[0].1 = None;
        let second = compute(&o, Some(&first), at(20));
        assert_eq!(second.state, NVIDIADriverState::Ready);
        let conds = second.conditions.as_ref().unwrap();
        assert_eq!(conds[0].last_transition_time, Time(at(20)));
        // Error stayed False: its time is the first one.
        assert_eq!(conds[1].last_transition_time, Time(at(10)));
        assert!(!same(&first, &second));
        assert!(same(&second, &compute(&o, Some(&second), at(30))));
    }

    #[test]
    fn owned_nodes_without_pools_are_not_ready() {
        let o = Observed {
            nodes: 2,
            ..Default::default()
        };
        let st = compute(&o, None, at(1));
        assert_eq!(st.state, NVIDIADriverState::NotReady);
        assert!(
            st.conditions.unwrap()[0]
                .message
                .contains("2 selected GPU node(s) lack")
        );
        let none = compute(&Observed::default(), None, at(1));
        assert_eq!(none.state, NVIDIADriverState::Ready);
    }

    #[test]
    fn disabled_is_ignored_not_an_error() {
        let o = Observed {
            disabled: Some("ClusterPolicy cluster-policy does not set useNvidiaDriverCRD".into()),
            ..Default::default()
        };
        let st = compute(&o, None, at(1));
        assert_eq!(st.state, NVIDIADriverState::Ignored);
        assert_eq!(st.conditions.unwrap()[1].status, "False");
    }
}
