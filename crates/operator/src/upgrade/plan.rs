//! The pure core: (cluster view, policy, now) → what to do to each node this round.
//!
//! Stateless like upstream: everything it needs to remember lives on the Node (the state label
//! and the annotations of reference §4.1), so a restarted operator carries on where it left off.
//! Each round moves a node at most one state; within a node's actions the state label comes
//! last, so a half-applied round is simply redone.

use std::collections::BTreeMap;

use gantry_api::common::EffectiveUpgradePolicy;
use gantry_api::names;
use gantry_k8s_rules::{Operator, Requirement, Selector, SelectorError};

use super::removal::{Removal, names_of, remove_pods};
use super::slots::{self, SlotInput};
use super::state::UpgradeState;
use super::view::{ClusterView, DriverPod, NodeView, PodKey, PodView};

/// Knobs that are not part of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How long validation may take before the node is `upgrade-failed` (upstream: fixed 600 s).
    pub validation_timeout_s: i64,
    /// A new driver pod that is not Ready after more restarts than this fails the node
    /// (upstream: 10).
    pub max_driver_restarts: i32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            validation_timeout_s: 600,
            max_driver_restarts: 10,
        }
    }
}

/// One thing to do. The shell applies a node's actions in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    SetState {
        node: String,
        state: UpgradeState,
    },
    /// Remove the state label (auto-upgrade turned off).
    ClearState {
        node: String,
    },
    /// Set (`Some`) or remove (`None`) a node annotation.
    Annotate {
        node: String,
        key: &'static str,
        value: Option<String>,
    },
    Cordon {
        node: String,
    },
    Uncordon {
        node: String,
    },
    /// Evict through the Eviction API (PodDisruptionBudgets apply).
    Evict {
        node: String,
        pod: PodKey,
    },
    /// Delete a pod so its DaemonSet recreates it (the driver pod, validator pods).
    DeletePod {
        node: String,
        pod: PodKey,
    },
    /// A Node event with reason `GPUDriverUpgrade`.
    Event {
        node: String,
        warning: bool,
        message: String,
    },
}

impl Action {
    pub fn node(&self) -> &str {
        match self {
            Action::SetState { node, .. }
            | Action::ClearState { node }
            | Action::Annotate { node, .. }
            | Action::Cordon { node }
            | Action::Uncordon { node }
            | Action::Evict { node, .. }
            | Action::DeletePod { node, .. }
            | Action::Event { node, .. } => node,
        }
    }
}

/// Where the upgrade policy lives, so messages name the field a user sets: the ClusterPolicy's
/// `spec.driver.upgradePolicy` or an NVIDIADriver's `spec.upgradePolicy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyAt {
    /// `ClusterPolicy cluster-policy`, `NVIDIADriver a100`.
    pub object: String,
    pub path: &'static str,
}

impl PolicyAt {
    pub fn cluster_policy(name: &str) -> Self {
        PolicyAt {
            object: format!("ClusterPolicy {name}"),
            path: "spec.driver.upgradePolicy",
        }
    }
    pub fn nvidia_driver(name: &str) -> Self {
        PolicyAt {
            object: format!("NVIDIADriver {name}"),
            path: "spec.upgradePolicy",
        }
    }
    /// `field` of the policy, in full: `ClusterPolicy cluster-policy spec.driver.upgradePolicy.drain`.
    pub fn field(&self, field: &str) -> String {
        format!("{} {}.{field}", self.object, self.path)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{field}: {source}")]
    Selector {
        /// The policy field, in full ([`PolicyAt::field`]).
        field: String,
        #[source]
        source: SelectorError,
    },
    #[error("{field}: {value:?} is not a count or a percentage like \"25%\"")]
    MaxUnavailable { field: String, value: String },
}

/// The result of one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// Why nothing moved at all this round, when that is the case.
    pub waiting: Option<String>,
}

/// Remove the state label from every node (upstream does this when auto-upgrade is off).
pub fn disable(view: &ClusterView) -> Plan {
    let actions = view
        .nodes
        .iter()
        .filter(|n| n.labels.contains_key(names::LABEL_UPGRADE_STATE))
        .map(|n| Action::ClearState {
            node: n.name.clone(),
        })
        .collect();
    Plan {
        actions,
        waiting: None,
    }
}

pub(super) struct Ctx<'a> {
    policy: &'a EffectiveUpgradePolicy,
    at: &'a PolicyAt,
    cfg: &'a Config,
    now: i64,
    wait_selector: Selector,
    drain_selector: Selector,
    validator_expected: bool,
    pods_by_node: BTreeMap<&'a str, Vec<&'a PodView>>,
}

fn state_of(n: &NodeView) -> UpgradeState {
    UpgradeState::parse(n.label(names::LABEL_UPGRADE_STATE).unwrap_or(""))
}

fn is_true(v: Option<&str>) -> bool {
    v == Some("true")
}

impl Ctx<'_> {
    /// The (non-driver) pods bound to `node`.
    pub(super) fn pods_on(&self, node: &str) -> &[&PodView] {
        self.pods_by_node
            .get(node)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// Plan one round under `policy`, which lives `at` (for messages).
pub fn plan(
    view: &ClusterView,
    policy: &EffectiveUpgradePolicy,
    at: &PolicyAt,
    cfg: &Config,
    now: i64,
) -> Result<Plan, PlanError> {
    let sel = |field: &str, s: &str| {
        Selector::parse(s).map_err(|source| PlanError::Selector {
            field: at.field(field),
            source,
        })
    };
    let wait_selector = sel(
        "waitForCompletion.podSelector",
        &policy.wait_for_completion_pod_selector,
    )?;
    // Pods labelled to be skipped are never drained.
    let skip = Requirement::new(
        names::LABEL_UPGRADE_DRAIN_SKIP,
        Operator::NotEquals,
        &["true".into()],
    )
    .map_err(|reason| PlanError::Selector {
        field: at.field("drain.podSelector"),
        source: SelectorError {
            input: names::LABEL_UPGRADE_DRAIN_SKIP.into(),
            reason,
        },
    })?;
    let drain_selector = sel("drain.podSelector", &policy.drain_pod_selector)?.and(skip);
    if !view.driver_pods_complete {
        return Ok(Plan {
            actions: Vec::new(),
            waiting: Some("a driver DaemonSet does not have all its pods yet".into()),
        });
    }
    // One driver pod per node; should a leaving one overlap its successor, the successor counts.
    let mut driver: BTreeMap<&str, &DriverPod> = BTreeMap::new();
    for d in &view.driver_pods {
        let slot = driver.entry(d.node.as_str()).or_insert(d);
        if slot.terminating && !d.terminating {
            *slot = d;
        }
    }
    let mut managed: Vec<(&NodeView, &DriverPod)> = view
        .nodes
        .iter()
        .filter_map(|n| driver.get(n.name.as_str()).map(|d| (n, *d)))
        .collect();
    managed.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let counts = SlotInput::count(managed.iter().map(|(n, d)| {
        let state = state_of(n);
        (state, (n.unschedulable || !n.ready) && !parked(state, d))
    }));
    let max_unavailable =
        slots::max_unavailable(policy, counts.total).ok_or_else(|| PlanError::MaxUnavailable {
            field: at.field("maxUnavailable"),
            value: match &policy.max_unavailable {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
            },
        })?;
    let mut slots_left = slots::available(policy, counts, max_unavailable);
    let mut pods_by_node: BTreeMap<&str, Vec<&PodView>> = BTreeMap::new();
    for p in &view.pods {
        pods_by_node.entry(p.node.as_str()).or_default().push(p);
    }
    let ctx = Ctx {
        policy,
        at,
        cfg,
        now,
        wait_selector,
        drain_selector,
        validator_expected: view.validator_expected,
        pods_by_node,
    };
    let mut actions = Vec::new();
    for (node, dp) in managed {
        step(&ctx, node, dp, &mut slots_left, &mut actions);
    }
    Ok(Plan {
        actions,
        waiting: None,
    })
}

/// A failed node whose driver was never replaced (its pods would not leave): parked, it does
/// not count against `maxUnavailable`, so the rollout goes on past it. A node whose *new*
/// driver failed still counts: a version that breaks every node it reaches stops after
/// `maxUnavailable` nodes instead of cordoning the whole cluster one node at a time.
fn parked(state: UpgradeState, driver: &DriverPod) -> bool {
    state == UpgradeState::UpgradeFailed && !driver.in_sync
}

pub(super) fn set(out: &mut Vec<Action>, node: &NodeView, state: UpgradeState) {
    out.push(Action::SetState {
        node: node.name.clone(),
        state,
    });
}

pub(super) fn annotate(
    out: &mut Vec<Action>,
    node: &NodeView,
    key: &'static str,
    value: Option<String>,
) {
    // Only write what changes, so a quiet round makes no calls.
    if node.annotation(key) != value.as_deref() {
        out.push(Action::Annotate {
            node: node.name.clone(),
            key,
            value,
        });
    }
}

fn warn(out: &mut Vec<Action>, node: &NodeView, message: String) {
    out.push(Action::Event {
        node: node.name.clone(),
        warning: true,
        message,
    });
}

/// Seconds since the Unix-seconds timestamp in annotation `key`; `None` when absent or unreadable
/// (an unreadable value restarts the clock).
fn elapsed(ctx: &Ctx<'_>, node: &NodeView, key: &str) -> Option<i64> {
    node.annotation(key)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(|t| ctx.now - t)
}

/// Start (or read) a timer kept in annotation `key`; true when `timeout_s` (> 0) has passed.
pub(super) fn timed_out(
    ctx: &Ctx<'_>,
    node: &NodeView,
    key: &'static str,
    timeout_s: i64,
    out: &mut Vec<Action>,
) -> bool {
    match elapsed(ctx, node, key) {
        None => {
            annotate(out, node, key, Some(ctx.now.to_string()));
            false
        }
        Some(e) => timeout_s > 0 && e >= timeout_s,
    }
}

/// Where a node goes once its driver is back: uncordon, or straight to done when it was
/// cordoned before the upgrade began (that cordon is the user's and stays).
fn finish(node: &NodeView, out: &mut Vec<Action>) {
    if node
        .annotation(names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE)
        .is_some()
    {
        annotate(
            out,
            node,
            names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE,
            None,
        );
        set(out, node, UpgradeState::UpgradeDone);
    } else {
        set(out, node, UpgradeState::UncordonRequired);
    }
}

fn step(
    ctx: &Ctx<'_>,
    node: &NodeView,
    dp: &DriverPod,
    slots_left: &mut u32,
    out: &mut Vec<Action>,
) {
    let pods = ctx.pods_on(&node.name);
    let p = ctx.policy;
    match state_of(node) {
        s @ (UpgradeState::Unknown | UpgradeState::UpgradeDone) => {
            let requested = is_true(node.annotation(names::ANNOTATION_UPGRADE_REQUESTED));
            let safe_load = node
                .annotation(names::ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD)
                .is_some();
            if !dp.in_sync || requested || safe_load {
                if node.unschedulable {
                    annotate(
                        out,
                        node,
                        names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE,
                        Some("true".into()),
                    );
                }
                set(out, node, UpgradeState::UpgradeRequired);
            } else if s == UpgradeState::Unknown {
                set(out, node, UpgradeState::UpgradeDone);
            }
        }
        UpgradeState::UpgradeRequired => {
            annotate(out, node, names::ANNOTATION_UPGRADE_REQUESTED, None);
            if is_true(node.label(names::LABEL_UPGRADE_SKIP)) {
                return;
            }
            // Nodes someone already cordoned cost no extra availability: they go regardless.
            if *slots_left == 0 && !node.unschedulable {
                return;
            }
            *slots_left = slots_left.saturating_sub(1);
            set(out, node, UpgradeState::CordonRequired);
        }
        UpgradeState::CordonRequired => {
            if !node.unschedulable {
                out.push(Action::Cordon {
                    node: node.name.clone(),
                });
            }
            set(out, node, UpgradeState::WaitForJobsRequired);
        }
        UpgradeState::WaitForJobsRequired => {
            let key = names::ANNOTATION_UPGRADE_WAIT_FOR_POD_COMPLETION_START;
            let running: Vec<&PodView> = if ctx.wait_selector.is_empty() {
                Vec::new()
            } else {
                pods.iter()
                    .copied()
                    .filter(|q| !q.finished() && ctx.wait_selector.matches(&q.labels))
                    .collect()
            };
            if running.is_empty() {
                annotate(out, node, key, None);
                set(out, node, UpgradeState::PodDeletionRequired);
            } else if timed_out(
                ctx,
                node,
                key,
                i64::from(p.wait_for_completion_timeout_seconds),
                out,
            ) {
                annotate(out, node, key, None);
                warn(
                    out,
                    node,
                    format!(
                        "gave up waiting for jobs after {}s: {}",
                        p.wait_for_completion_timeout_seconds,
                        names_of(&running)
                    ),
                );
                set(out, node, UpgradeState::PodDeletionRequired);
            }
        }
        UpgradeState::PodDeletionRequired => {
            let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
            let gpu = pods.iter().copied().filter(|q| {
                q.uses_gpu && !q.daemonset && matches!(q.phase.as_str(), "Running" | "Pending")
            });
            let fail = |out: &mut Vec<Action>, why: String| {
                annotate(out, node, key, None);
                warn(out, node, format!("GPU pod deletion failed: {why}"));
                let next = if p.drain_enable {
                    UpgradeState::DrainRequired
                } else {
                    UpgradeState::UpgradeFailed
                };
                set(out, node, next);
            };
            let step = Removal {
                key,
                force: p.pod_deletion_force,
                delete_empty_dir: p.pod_deletion_delete_empty_dir,
                option: ctx.at.field("podDeletion"),
                timeout_s: p.pod_deletion_timeout_seconds,
            };
            remove_pods(ctx, node, &step, gpu, out, fail);
        }
        UpgradeState::DrainRequired => {
            let key = names::ANNOTATION_UPGRADE_DRAIN_START;
            if !p.drain_enable {
                annotate(out, node, key, None);
                set(out, node, UpgradeState::PodRestartRequired);
                return;
            }
            let targets = pods.iter().copied().filter(|q| {
                !q.daemonset && !q.mirror && !q.finished() && ctx.drain_selector.matches(&q.labels)
            });
            let fail = |out: &mut Vec<Action>, why: String| {
                annotate(out, node, key, None);
                warn(out, node, format!("drain failed: {why}"));
                set(out, node, UpgradeState::UpgradeFailed);
            };
            let step = Removal {
                key,
                force: p.drain_force,
                delete_empty_dir: p.drain_delete_empty_dir,
                option: ctx.at.field("drain"),
                timeout_s: p.drain_timeout_seconds,
            };
            remove_pods(ctx, node, &step, targets, out, fail);
        }
        UpgradeState::PodRestartRequired => {
            if !dp.in_sync {
                if !dp.terminating {
                    out.push(Action::DeletePod {
                        node: node.name.clone(),
                        pod: dp.key.clone(),
                    });
                }
            } else if dp.ready {
                annotate(
                    out,
                    node,
                    names::ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD,
                    None,
                );
                // Validator pods that ran against the old driver run again on the new one.
                for v in pods
                    .iter()
                    .filter(|q| is_validator(q) && !q.terminating && q.created < dp.created)
                {
                    out.push(Action::DeletePod {
                        node: node.name.clone(),
                        pod: v.key.clone(),
                    });
                }
                set(out, node, UpgradeState::ValidationRequired);
            } else if dp.restarts > ctx.cfg.max_driver_restarts {
                warn(
                    out,
                    node,
                    format!(
                        "driver pod {} is not ready after {} restarts",
                        dp.key, dp.restarts
                    ),
                );
                set(out, node, UpgradeState::UpgradeFailed);
            }
        }
        UpgradeState::ValidationRequired => {
            let key = names::ANNOTATION_UPGRADE_VALIDATION_START;
            let validators: Vec<&PodView> = pods
                .iter()
                .copied()
                .filter(|q| is_validator(q) && !q.terminating && q.created >= dp.created)
                .collect();
            let passed = if validators.is_empty() {
                !ctx.validator_expected && dp.ready
            } else {
                dp.ready && validators.iter().all(|q| q.phase == "Running" && q.ready)
            };
            if passed {
                annotate(out, node, key, None);
                finish(node, out);
            } else if timed_out(ctx, node, key, ctx.cfg.validation_timeout_s, out) {
                annotate(out, node, key, None);
                warn(
                    out,
                    node,
                    format!(
                        "validation did not pass within {}s",
                        ctx.cfg.validation_timeout_s
                    ),
                );
                set(out, node, UpgradeState::UpgradeFailed);
            }
        }
        UpgradeState::UncordonRequired => {
            if node.unschedulable {
                out.push(Action::Uncordon {
                    node: node.name.clone(),
                });
            }
            set(out, node, UpgradeState::UpgradeDone);
        }
        UpgradeState::UpgradeFailed => {
            if dp.in_sync && dp.ready {
                finish(node, out);
            }
        }
    }
}

fn is_validator(p: &PodView) -> bool {
    p.labels.get(names::LABEL_APP).map(String::as_str) == Some(names::app::OPERATOR_VALIDATOR)
}
