//! Pure: which NVIDIADriver owns each GPU node.
//!
//! A non-default CR owns the GPU nodes its `nodeSelector` and `nodeAffinity` select; the default
//! CR (the oldest one with `default: true`; later ones are refused) owns GPU nodes no other CR
//! selects. A node two or more non-default CRs select is a conflict: its owner label is left as
//! it is, so its running driver is neither replaced nor removed, and every CR involved is told
//! which node and which other CRs.

use std::collections::{BTreeMap, BTreeSet};

use gantry_api::names;
use gantry_api::nvidia_driver::NVIDIADriverSpec;
use gantry_k8s_rules::affinity::NodeSelector;
use k8s_openapi::api::core::v1::NodeAffinity;

/// The inputs about one CR.
#[derive(Clone, Debug)]
pub struct CrView<'a> {
    pub name: &'a str,
    pub spec: &'a NVIDIADriverSpec,
    /// Creation time (Unix seconds; 0 when unknown): the oldest default wins.
    pub created: i64,
}

/// One GPU node: its name and labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIn<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// What should happen to a node's owner label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Set it to this CR.
    Cr(String),
    /// Leave it as it is (a conflict).
    Keep,
    /// No CR selects the node: remove it.
    None,
}

/// A node this CR selects together with other CRs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub node: String,
    pub others: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// GPU node -> what its owner label should be.
    pub nodes: BTreeMap<String, Owner>,
    /// CR -> the nodes it shares with other CRs.
    pub conflicts: BTreeMap<String, Vec<Conflict>>,
    /// Refused default CRs -> the default CR in charge.
    pub refused_defaults: BTreeMap<String, String>,
}

impl Assignment {
    /// The nodes whose owner label is (or stays) `cr` after the labels are written.
    pub fn owned_by<'a>(
        &'a self,
        cr: &'a str,
        current: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.nodes.iter().filter_map(move |(n, o)| {
            let owner = match o {
                Owner::Cr(c) => Some(c.as_str()),
                Owner::Keep => current.get(n).map(String::as_str),
                Owner::None => None,
            };
            (owner == Some(cr)).then_some(n.as_str())
        })
    }
}

/// Whether the CR's `nodeSelector` (default: `nvidia.com/gpu.present=true`) and required node
/// affinity select the node.
pub fn selects(spec: &NVIDIADriverSpec, node: &NodeIn<'_>) -> bool {
    spec.effective_node_selector()
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v))
        && spec
            .node_affinity
            .as_ref()
            .is_none_or(|a| node_affinity_matches(a, node))
}

/// `requiredDuringSchedulingIgnoredDuringExecution`, by Kubernetes' rules
/// (`gantry_k8s_rules`): any term matches; an empty or invalid term matches nothing.
pub fn node_affinity_matches(a: &NodeAffinity, node: &NodeIn<'_>) -> bool {
    a.required_during_scheduling_ignored_during_execution
        .as_ref()
        .is_none_or(|req| {
            NodeSelector::from_k8s(req)
                .0
                .matches(node.name, node.labels)
        })
}

/// Decide every GPU node's owner. `nodes` are the GPU nodes (`nvidia.com/gpu.present=true`).
pub fn assign(crs: &[CrView<'_>], nodes: &[NodeIn<'_>]) -> Assignment {
    let mut out = Assignment::default();
    let mut defaults: Vec<&CrView<'_>> = crs.iter().filter(|c| c.spec.default).collect();
    defaults.sort_by(|a, b| (a.created, a.name).cmp(&(b.created, b.name)));
    let default = defaults.first().map(|c| c.name);
    if let Some(d) = default {
        for c in defaults.iter().skip(1) {
            out.refused_defaults
                .insert(c.name.to_string(), d.to_string());
        }
    }
    for n in nodes {
        let selecting: BTreeSet<&str> = crs
            .iter()
            .filter(|c| !c.spec.default && selects(c.spec, n))
            .map(|c| c.name)
            .collect();
        let owner = match selecting.len() {
            0 => default.map_or(Owner::None, |d| Owner::Cr(d.to_string())),
            1 => Owner::Cr(
                selecting
                    .iter()
                    .next()
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
            ),
            _ => {
                for c in &selecting {
                    out.conflicts
                        .entry(c.to_string())
                        .or_default()
                        .push(Conflict {
                            node: n.name.to_string(),
                            others: selecting
                                .iter()
                                .filter(|o| *o != c)
                                .map(|o| o.to_string())
                                .collect(),
                        });
                }
                Owner::Keep
            }
        };
        out.nodes.insert(n.name.to_string(), owner);
    }
    out
}

/// Whether a node is a GPU node the NVIDIADriver CRs manage.
pub fn is_gpu_node(labels: &BTreeMap<String, String>) -> bool {
    labels.get(names::LABEL_GPU_PRESENT).map(String::as_str) == Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> NVIDIADriverSpec {
        serde_yaml::from_str(yaml).expect("spec parses")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut l: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.insert(names::LABEL_GPU_PRESENT.into(), "true".into());
        l
    }

    #[test]
    fn pools_default_and_conflicts() {
        let a100 = spec("{default: false, image: d, nodeSelector: {pool: a100}}");
        let h100 = spec(
            "{default: false, image: d, nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
             {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [h100]}]}]}}}",
        );
        let extra = spec("{default: false, image: d, nodeSelector: {kubernetes.io/hostname: h-0}}");
        let dflt = spec("{default: true, image: d}");
        let late_default = spec("{default: true, image: d}");
        let crs = [
            CrView {
                name: "a100",
                spec: &a100,
                created: 1,
            },
            CrView {
                name: "h100",
                spec: &h100,
                created: 1,
            },
            CrView {
                name: "extra",
                spec: &extra,
                created: 2,
            },
            CrView {
                name: "zz-default",
                spec: &dflt,
                created: 1,
            },
            CrView {
                name: "aa-default",
                spec: &late_default,
                created: 5,
            },
        ];
        let l = [
            ("a-0", labels(&[("pool", "a100")])),
            (
                "h-0",
                labels(&[("pool", "h100"), ("kubernetes.io/hostname", "h-0")]),
            ),
            (
                "h-1",
                labels(&[("pool", "h100"), ("kubernetes.io/hostname", "h-1")]),
            ),
            ("other", labels(&[])),
        ];
        let nodes: Vec<NodeIn<'_>> = l
            .iter()
            .map(|(n, l)| NodeIn { name: n, labels: l })
            .collect();
        let a = assign(&crs, &nodes);
        assert_eq!(a.nodes["a-0"], Owner::Cr("a100".into()));
        assert_eq!(a.nodes["h-1"], Owner::Cr("h100".into()));
        assert_eq!(a.nodes["h-0"], Owner::Keep);
        // The oldest default wins; a later one is refused and names it.
        assert_eq!(a.nodes["other"], Owner::Cr("zz-default".into()));
        assert_eq!(a.refused_defaults["aa-default"], "zz-default");
        assert_eq!(
            a.conflicts["extra"],
            vec![Conflict {
                node: "h-0".into(),
                others: vec!["h100".into()]
            }]
        );
        assert_eq!(
            a.conflicts["h100"],
            vec![Conflict {
                node: "h-0".into(),
                others: vec!["extra".into()]
            }]
        );
        // A conflicted node keeps whatever owner it had.
        let current = BTreeMap::from([("h-0".to_string(), "h100".to_string())]);
        let owned: Vec<&str> = a.owned_by("h100", &current).collect();
        assert_eq!(owned, ["h-0", "h-1"]);
        assert_eq!(a.owned_by("extra", &current).count(), 0);
    }

    #[test]
    fn affinity_operators() {
        let l = labels(&[("n", "5"), ("zone", "a")]);
        let node = NodeIn {
            name: "x",
            labels: &l,
        };
        let aff = |expr: &str| -> NodeAffinity {
            serde_yaml::from_str(&format!(
                "requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{expr}]}}"
            ))
            .expect("affinity parses")
        };
        let yes = [
            "{matchExpressions: [{key: n, operator: Gt, values: ['4']}]}",
            "{matchExpressions: [{key: zone, operator: NotIn, values: [b]}, {key: gone, operator: DoesNotExist}]}",
            "{matchFields: [{key: metadata.name, operator: In, values: [x]}]}",
            "{matchExpressions: [{key: zone, operator: Exists}]}",
        ];
        for e in yes {
            assert!(node_affinity_matches(&aff(e), &node), "{e}");
        }
        let no = [
            "{matchExpressions: [{key: n, operator: Lt, values: ['5']}]}",
            "{matchExpressions: [{key: zone, operator: In, values: [b]}]}",
            "{}",
            "{matchExpressions: [{key: zone, operator: Bogus}]}",
        ];
        for e in no {
            assert!(!node_affinity_matches(&aff(e), &node), "{e}");
        }
    }
}
