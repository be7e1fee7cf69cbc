//! The `--topology` spec: labels that place the simulated nodes in zones, racks and other
//! levels of a KAI `Topology`. `zone=8,rack=2` puts nodes, in spec order, 8 to a zone and 2
//! to a rack: `topology.kubernetes.io/zone=zone-0` and `topology.gantry.dev/rack=rack-0` on
//! the first two nodes. Levels are outermost first; each level's size must be a multiple of
//! the next one's so racks never straddle zones. A level is a short name (`zone` and
//! `region` are Kubernetes' well-known labels, others go under `topology.gantry.dev/`) or a
//! full label key (`cloud.provider.com/topology-rack=4`). Pure, no I/O.

use crate::nodes::NodePlan;
pub use crate::nodes::SpecError;

/// Domain name prefix for short level names that are not Kubernetes' own.
pub const LABEL_PREFIX: &str = "topology.gantry.dev/";

/// One level of the spec: its node label key, what its values are called, nodes per domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Level {
    pub label: String,
    pub short: String,
    pub size: u32,
}

fn bad(group: &str, problem: impl Into<String>) -> SpecError {
    SpecError::Topology {
        group: group.to_string(),
        problem: problem.into(),
    }
}

/// Parse `level=nodes-per-domain,...`.
pub fn parse(spec: &str) -> Result<Vec<Level>, SpecError> {
    let mut out: Vec<Level> = Vec::new();
    for raw in spec.split(',') {
        let g = raw.trim();
        let (name, size) = g
            .split_once('=')
            .ok_or_else(|| bad(g, "expected LEVEL=NODES, as in `rack=4`"))?;
        let size: u32 = size
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(g, "nodes per domain must be a whole number of at least 1"))?;
        let name = name.trim();
        let (label, short) = match name {
            "zone" | "region" => (format!("topology.kubernetes.io/{name}"), name.to_string()),
            n if n.contains('/') => (n.to_string(), n.rsplit('/').next().unwrap_or(n).to_string()),
            n => (format!("{LABEL_PREFIX}{n}"), n.to_string()),
        };
        let valid = !short.is_empty()
            && short
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            return Err(bad(g, format!("level {name:?} is not a label name")));
        }
        if out.iter().any(|l| l.label == label) {
            return Err(bad(g, format!("level {label} is given twice")));
        }
        if let Some(outer) = out.last()
            && outer.size % size != 0
        {
            return Err(bad(
                g,
                format!(
                    "{}={} is not a multiple of {short}={size}: a {short} would straddle two {}s",
                    outer.short, outer.size, outer.short
                ),
            ));
        }
        out.push(Level { label, short, size });
    }
    Ok(out)
}

/// The labels of the node at position `index`: its domain at every level (`rack-3`: the
/// fourth rack).
pub fn labels_of(levels: &[Level], index: usize) -> impl Iterator<Item = (String, String)> + '_ {
    levels.iter().map(move |l| {
        let domain = index / l.size as usize;
        (l.label.clone(), format!("{}-{domain}", l.short))
    })
}

/// Label each planned node with its domain at every level.
pub fn apply(plan: &mut [NodePlan], spec: &str) -> Result<Vec<Level>, SpecError> {
    let levels = parse(spec)?;
    for (i, node) in plan.iter_mut().enumerate() {
        node.labels.extend(labels_of(&levels, i));
    }
    Ok(levels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_and_racks_in_node_order() {
        let mut plan = crate::nodes::plan("6xH100-80GB:8").unwrap();
        let levels = apply(&mut plan, "zone=4, rack=2").unwrap();
        assert_eq!(levels[0].label, "topology.kubernetes.io/zone");
        assert_eq!(levels[1].label, "topology.gantry.dev/rack");
        let racks: Vec<&str> = plan
            .iter()
            .map(|n| n.labels["topology.gantry.dev/rack"].as_str())
            .collect();
        assert_eq!(
            racks,
            ["rack-0", "rack-0", "rack-1", "rack-1", "rack-2", "rack-2"]
        );
        assert_eq!(plan[3].labels["topology.kubernetes.io/zone"], "zone-0");
        assert_eq!(plan[4].labels["topology.kubernetes.io/zone"], "zone-1");
    }

    #[test]
    fn full_label_keys_and_bad_specs() {
        let l = parse("cloud.provider.com/topology-rack=3").unwrap();
        assert_eq!(l[0].label, "cloud.provider.com/topology-rack");
        assert_eq!(l[0].short, "topology-rack");
        for (spec, want) in [
            ("rack", "LEVEL=NODES"),
            ("rack=0", "at least 1"),
            ("zone=6,rack=4", "straddle"),
            ("rack=2,rack=1", "twice"),
            ("ra ck=2", "not a label name"),
        ] {
            let e = parse(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e}");
        }
    }
}
