//! Static node filters (labels, affinity, taints, readiness): they do not change during a
//! cycle, so each constraint class is evaluated against every node once. The rules
//! themselves are `gantry_k8s_rules`'.

use gantry_k8s_rules::taints::untolerated_taint;

use crate::decisions::NodeReason;
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
    if let Some(a) = &c.affinity
        && !a.matches(node.name, node.labels)
    {
        return Err(NodeReason::Affinity);
    }
    if let Some(t) = untolerated_taint(node.taints, &c.tolerations) {
        return Err(NodeReason::Taint(t.key.clone()));
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
    use crate::input::{
        NodeSelector, NodeSelectorTerm, Taint, TaintEffect, Toleration, TolerationOperator,
    };
    use gantry_k8s_rules::fields::FieldRequirement;
    use gantry_k8s_rules::{Operator, Requirement};
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
            withdrawn: vec![],
            groups: vec![],
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
        let term = |key: &str, op: Operator, value: &str| NodeSelectorTerm {
            match_expressions: vec![Requirement::new(key, op, &[value.into()]).expect("valid")],
            match_fields: vec![],
        };
        let mut a = NodeSelector {
            terms: vec![term("nvidia.com/gpu.product", Operator::In, "A100")],
        };
        c.affinity = Some(a.clone());
        assert_eq!(static_check(&n, &c), Err(NodeReason::Affinity));
        a.terms.push(term("zone", Operator::NotIn, "b"));
        c.affinity = Some(a);
        assert_eq!(static_check(&n, &c), Ok(()), "terms are OR-ed");
        c.affinity = Some(NodeSelector::default());
        assert_eq!(
            static_check(&n, &c),
            Err(NodeReason::Affinity),
            "a required affinity without usable terms matches no node"
        );
    }

    #[test]
    fn match_fields_pin_the_node_and_gt_is_numeric() {
        let labels = BTreeMap::from([("cores".to_string(), "64".to_string())]);
        let n = node(&labels, &[]);
        let pin = |name: &str| NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![],
                match_fields: vec![FieldRequirement {
                    field: "metadata.name".into(),
                    equal: true,
                    value: name.into(),
                }],
            }],
        };
        let mut c = ConstraintClass {
            affinity: Some(pin("n")),
            ..Default::default()
        };
        assert_eq!(static_check(&n, &c), Ok(()));
        c.affinity = Some(pin("cpu-2"));
        assert_eq!(static_check(&n, &c), Err(NodeReason::Affinity));
        let gt = |v: &str| NodeSelector {
            terms: vec![NodeSelectorTerm {
                match_expressions: vec![
                    Requirement::new("cores", Operator::GreaterThan, &[v.into()]).expect("valid"),
                ],
                match_fields: vec![],
            }],
        };
        c.affinity = Some(gt("32"));
        assert_eq!(static_check(&n, &c), Ok(()));
        c.affinity = Some(gt("64"));
        assert_eq!(static_check(&n, &c), Err(NodeReason::Affinity));
    }
}
