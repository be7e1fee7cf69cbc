//! KAI `Topology` (kai.scheduler/v1alpha1, cluster-scoped): the levels of a cluster's
//! physical layout, outermost first (zone → rack → host), each named by the node label that
//! carries it. Jobs name a Topology and a required and/or preferred level
//! (`kai.scheduler/topology*` annotations, PodGroup `spec.topologyConstraint`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Upstream's bound on the number of levels.
pub const MAX_TOPOLOGY_LEVELS: usize = 16;
/// The only label upstream allows below every other level.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Spec of a [`Topology`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    derive = "PartialEq",
    group = "kai.scheduler",
    version = "v1alpha1",
    kind = "Topology",
    plural = "topologies",
    singular = "topology",
    doc = "Topology is the Schema for the topology API: the levels of the cluster's physical layout, outermost first."
)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    /// The levels of the topology, outermost first; immutable, unique, `kubernetes.io/hostname` only as the last.
    #[schemars(length(min = 1, max = 16))]
    pub levels: Vec<TopologyLevel>,
}

/// One level of a [`Topology`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// The name of the node label for this topology level (e.g. cloud.provider.com/topology-rack).
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        )
    )]
    pub node_label: String,
}

impl TopologySpec {
    /// The level labels, outermost first.
    pub fn labels(&self) -> Vec<&str> {
        self.levels.iter().map(|l| l.node_label.as_str()).collect()
    }

    /// Upstream's schema and CEL rules, as (path, message) pairs: 1 to 16 levels, each a
    /// valid label key, no level twice, `kubernetes.io/hostname` only as the lowest level.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let n = self.levels.len();
        if n == 0 {
            out.push(("spec.levels".into(), "must have at least 1 item".into()));
        }
        if n > MAX_TOPOLOGY_LEVELS {
            out.push((
                "spec.levels".into(),
                format!("must have at most {MAX_TOPOLOGY_LEVELS} items, got {n}"),
            ));
        }
        for (i, l) in self.levels.iter().enumerate() {
            let path = format!("spec.levels[{i}].nodeLabel");
            if let Err(why) = label_key_problem(&l.node_label) {
                out.push((path.clone(), why));
            }
            if self.levels[..i].contains(l) {
                out.push((
                    path.clone(),
                    format!("{:?} is listed twice: levels must be unique", l.node_label),
                ));
            }
            if l.node_label == HOSTNAME_LABEL && i + 1 != n {
                out.push((
                    path,
                    "the kubernetes.io/hostname label can only be used at the lowest level of topology".into(),
                ));
            }
        }
        out
    }
}

/// Why `key` is not a Kubernetes label key (`[prefix/]name`), as upstream's pattern and
/// length bound check it.
fn label_key_problem(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("must not be empty".into());
    }
    if key.len() > 316 {
        return Err(format!("must be at most 316 characters, got {}", key.len()));
    }
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !super::is_dns_subdomain(p)
    {
        return Err(format!(
            "{key:?}: the prefix must be a DNS subdomain (lowercase alphanumerics, '-' and '.')"
        ));
    }
    let b = name.as_bytes();
    let edge_ok = |c: u8| c.is_ascii_alphanumeric();
    let ok = !b.is_empty()
        && edge_ok(b[0])
        && edge_ok(b[b.len() - 1])
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !ok {
        return Err(format!(
            "{key:?}: the name must be alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(labels: &[&str]) -> TopologySpec {
        TopologySpec {
            levels: labels
                .iter()
                .map(|l| TopologyLevel {
                    node_label: l.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn upstream_sample_is_valid() {
        let s = spec(&[
            "cloud.provider.com/topology-block",
            "cloud.provider.com/topology-rack",
            HOSTNAME_LABEL,
        ]);
        assert!(s.validate().is_empty(), "{:?}", s.validate());
        assert_eq!(s.labels()[1], "cloud.provider.com/topology-rack");
    }

    #[test]
    fn bad_levels_name_the_level() {
        let e = spec(&[]).validate();
        assert_eq!(e[0].0, "spec.levels");
        let e = spec(&["zone", "zone"]).validate();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0, "spec.levels[1].nodeLabel");
        assert!(e[0].1.contains("unique"), "{e:?}");
        let e = spec(&[HOSTNAME_LABEL, "rack"]).validate();
        assert_eq!(e[0].0, "spec.levels[0].nodeLabel");
        assert!(e[0].1.contains("lowest level"), "{e:?}");
        let e = spec(&["Bad Prefix/rack", "rack-"]).validate();
        assert_eq!(e.len(), 2, "{e:?}");
        let many: Vec<String> = (0..17).map(|i| format!("l{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(spec(&refs).validate()[0].1.contains("at most 16"));
    }
}
