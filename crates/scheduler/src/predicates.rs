//! Static node filters (labels, affinity, taints, readiness): they do not change during a
//! cycle, so each constraint class is evaluated against every node once.

use crate::decisions::NodeReason;
use crate::input::{LabelOperator, TaintEffect, TolerationOperator};
use crate::snapshot::{ClassId, ConstraintClass, Node, NodeId, Snapshot};

/// Nodes a class may use, and why the others were rejected.
#[derive(Clone, Debug, Default)]
pub struct ClassNodes {
    pub nodes: Vec<NodeId>,
    pub rejected: Vec<(NodeReason, u32)>,
}

pub fn static_check(node: &Node<'_>, c: &ConstraintClass) -> Result<(), NodeReason> {
    if !node.schedulable {
        return Err(NodeReason::NotSchedulable);
    }
    for (k, v) in &c.node_selector {
        if node.labels.get(k) != Some(v) {
            return Err(NodeReason::NodeSelector);
        }
    }
    if !c.affinity.is_empty()
        && !c.affinity.iter().any(|t| {
            t.requirements.iter().all(|r| {
                let val = node.labels.get(&r.key);
                match r.operator {
                    LabelOperator::In => val.is_some_and(|v| r.values.contains(v)),
                    LabelOperator::NotIn => !val.is_some_and(|v| r.values.contains(v)),
                    LabelOperator::Exists => val.is_some(),
                    LabelOperator::DoesNotExist => val.is_none(),
                }
            })
        })
    {
        return Err(NodeReason::Affinity);
    }
    for t in node.taints {
        if t.effect == TaintEffect::PreferNoSchedule {
            continue;
        }
        let tolerated = c.tolerations.iter().any(|tol| {
            let effect_ok = tol.effect.is_none_or(|e| e == t.effect);
            let key_ok = match tol.operator {
                TolerationOperator::Exists => tol.key.is_empty() || tol.key == t.key,
                TolerationOperator::Equal => tol.key == t.key && tol.value == t.value,
            };
            effect_ok && key_ok
        });
        if !tolerated {
            return Err(NodeReason::Taint(t.key.clone()));
        }
    }
    Ok(())
}

/// Lazily computed static node lists, one per constraint class.
#[derive(Debug, Default)]
pub struct ClassCache {
    lists: Vec<Option<ClassNodes>>,
    /// Visiting order of nodes; every class list keeps it.
    order: Vec<NodeId>,
}

impl ClassCache {
    pub fn new(s: &Snapshot<'_>, order: Vec<NodeId>) -> ClassCache {
        ClassCache {
            lists: vec![None; s.classes.len()],
            order,
        }
    }
    pub fn get(&mut self, s: &Snapshot<'_>, class: ClassId) -> &mut ClassNodes {
        let ClassCache { lists, order } = self;
        lists[class as usize].get_or_insert_with(|| {
            let c = &s.classes[class as usize];
            let mut out = ClassNodes::default();
            for &i in order.iter() {
                match static_check(&s.nodes[i as usize], c) {
                    Ok(()) => out.nodes.push(i),
                    Err(r) => match out.rejected.iter_mut().find(|(x, _)| *x == r) {
                        Some(e) => e.1 += 1,
                        None => out.rejected.push((r, 1)),
                    },
                }
            }
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{LabelRequirement, NodeSelectorTerm, Taint, Toleration};
    use std::collections::BTreeMap;

    fn node<'a>(labels: &'a BTreeMap<String, String>, taints: &'a [Taint]) -> Node<'a> {
        Node {
            name: "n",
            labels,
            taints,
            schedulable: true,
            cpu_milli: 1000,
            memory_bytes: 1000,
            pods: 10,
            gpus: 0,
            gpu_model: "",
            gpu_memory_mib: None,
            mig: vec![],
            mig_enabled: false,
        }
    }

    #[test]
    fn selector_affinity_and_taints() {
        let taint = Taint {
            key: "nvidia.com/gpu".into(),
            value: "".into(),
            effect: TaintEffect::NoSchedule,
        };
        let labels: BTreeMap<String, String> = [("zone", "a"), ("nvidia.com/gpu.product", "H100")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let taints = [taint];
        let n = node(&labels, &taints);
        let mut c = ConstraintClass::default();
        assert_eq!(
            static_check(&n, &c),
            Err(NodeReason::Taint("nvidia.com/gpu".into()))
        );
        c.tolerations.push(Toleration {
            key: "nvidia.com/gpu".into(),
            operator: TolerationOperator::Exists,
            value: "".into(),
            effect: None,
        });
        assert_eq!(static_check(&n, &c), Ok(()));
        c.node_selector.push(("zone".into(), "b".into()));
        assert_eq!(static_check(&n, &c), Err(NodeReason::NodeSelector));
        c.node_selector.clear();
        c.affinity.push(NodeSelectorTerm {
            requirements: vec![LabelRequirement {
                key: "nvidia.com/gpu.product".into(),
                operator: LabelOperator::In,
                values: vec!["A100".into()],
            }],
        });
        assert_eq!(static_check(&n, &c), Err(NodeReason::Affinity));
        c.affinity.push(NodeSelectorTerm {
            requirements: vec![LabelRequirement {
                key: "zone".into(),
                operator: LabelOperator::NotIn,
                values: vec!["b".into()],
            }],
        });
        assert_eq!(static_check(&n, &c), Ok(()), "terms are OR-ed");
    }
}
