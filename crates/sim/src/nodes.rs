//! The `--nodes` spec: `4xH100-80GB:8,2xA100-80GB:8,1xL4:1,2xcpu` — comma-separated groups of
//! `COUNT x MODEL [: GPUS_PER_NODE]`. `cpu` is a node without GPUs. A missing count means one
//! node; a missing GPU count means 8 (a typical HGX board). Pure parsing, no I/O.

use gantry_gpu::{GpuModel, catalog};

/// GPUs per node when the spec leaves it out.
pub const DEFAULT_GPUS_PER_NODE: u32 = 8;
/// Refuse absurd specs before allocating anything.
pub const MAX_NODES: u32 = 100_000;
pub const MAX_GPUS_PER_NODE: u32 = 64;

/// One simulated node to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    /// Node name, DNS-1123: `h100-80gb-0`, `cpu-1`.
    pub name: String,
    /// `None` for a CPU-only node.
    pub gpu: Option<&'static GpuModel>,
    pub gpus: u32,
    /// Seeds the simulated GPUs (UUIDs, serials): the node's position in the whole spec.
    pub seed: u64,
    /// Extra node labels, as the kubelet's `--node-labels` (topology: [`crate::node_topology`]).
    pub labels: std::collections::BTreeMap<String, String>,
}

/// A group of the spec as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroup {
    pub count: u32,
    pub gpu: Option<&'static GpuModel>,
    pub gpus: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("node spec is empty; write e.g. `2xH100-80GB:8,1xcpu`")]
    Empty,
    #[error("node spec group {group:?}: {problem}")]
    Group { group: String, problem: String },
    #[error("topology spec {group:?}: {problem}")]
    Topology { group: String, problem: String },
    #[error("node spec asks for {0} nodes; at most {MAX_NODES} are supported")]
    TooMany(u64),
}

fn bad(group: &str, problem: impl Into<String>) -> SpecError {
    SpecError::Group {
        group: group.to_string(),
        problem: problem.into(),
    }
}

/// Parse the spec into its groups.
pub fn parse(spec: &str) -> Result<Vec<NodeGroup>, SpecError> {
    let mut groups = Vec::new();
    let mut total: u64 = 0;
    for raw in spec.split(',') {
        let group = raw.trim();
        if group.is_empty() {
            if spec.trim().is_empty() {
                return Err(SpecError::Empty);
            }
            return Err(bad(raw, "empty group (stray comma?)"));
        }
        let g = parse_group(group)?;
        total += u64::from(g.count);
        groups.push(g);
    }
    if total > u64::from(MAX_NODES) {
        return Err(SpecError::TooMany(total));
    }
    Ok(groups)
}

fn parse_group(group: &str) -> Result<NodeGroup, SpecError> {
    // `COUNT x REST` — the count is the leading digits followed by `x`/`X`.
    let digits = group.chars().take_while(char::is_ascii_digit).count();
    let (count, rest) = if digits > 0 && matches!(group[digits..].chars().next(), Some('x' | 'X')) {
        let count: u32 = group[..digits]
            .parse()
            .map_err(|_| bad(group, "node count is too large"))?;
        (count, &group[digits + 1..])
    } else if digits > 0 {
        return Err(bad(
            group,
            "expected `x` after the node count, as in `4xH100-80GB:8`",
        ));
    } else {
        (1, group)
    };
    if count == 0 {
        return Err(bad(group, "node count must be at least 1"));
    }
    let (model, gpus) = match rest.split_once(':') {
        Some((m, n)) => {
            let n = n.trim();
            let gpus: u32 = n
                .parse()
                .map_err(|_| bad(group, format!("GPUs per node {n:?} is not a number")))?;
            (m.trim(), Some(gpus))
        }
        None => (rest.trim(), None),
    };
    if model.is_empty() {
        return Err(bad(
            group,
            "missing model; write e.g. `4xH100-80GB:8` or `2xcpu`",
        ));
    }
    if model.eq_ignore_ascii_case("cpu") {
        if let Some(n) = gpus.filter(|n| *n != 0) {
            return Err(bad(
                group,
                format!("a cpu node has no GPUs, but {n} were asked for"),
            ));
        }
        return Ok(NodeGroup {
            count,
            gpu: None,
            gpus: 0,
        });
    }
    let found = catalog::find(model).ok_or_else(|| {
        bad(
            group,
            format!(
                "unknown GPU model {model:?}; known: cpu, {}",
                catalog::keys().join(", ")
            ),
        )
    })?;
    let gpus = gpus.unwrap_or(DEFAULT_GPUS_PER_NODE);
    if gpus == 0 || gpus > MAX_GPUS_PER_NODE {
        return Err(bad(
            group,
            format!("GPUs per node must be 1–{MAX_GPUS_PER_NODE}, got {gpus}"),
        ));
    }
    Ok(NodeGroup {
        count,
        gpu: Some(found),
        gpus,
    })
}

/// Expand groups into named nodes. Names are the lower-cased model key (or `cpu`) and a
/// running index per model, so `2xL4:1,1xL4:1` gives `l4-0`, `l4-1`, `l4-2`.
pub fn expand(groups: &[NodeGroup]) -> Vec<NodePlan> {
    let mut next: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for g in groups {
        let prefix = g
            .gpu
            .map_or_else(|| "cpu".to_string(), |m| m.key.to_ascii_lowercase());
        for _ in 0..g.count {
            let i = next.entry(prefix.clone()).or_insert(0);
            out.push(NodePlan {
                name: format!("{prefix}-{i}"),
                gpu: g.gpu,
                gpus: g.gpus,
                seed: out.len() as u64,
                labels: Default::default(),
            });
            *i += 1;
        }
    }
    out
}

/// Parse and expand in one go.
pub fn plan(spec: &str) -> Result<Vec<NodePlan>, SpecError> {
    Ok(expand(&parse(spec)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issue_example() {
        let nodes = plan("4xH100-80GB:8,2xA100-80GB:8,1xL4:1,2xcpu").unwrap();
        assert_eq!(nodes.len(), 9);
        let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "h100-80gb-0",
                "h100-80gb-1",
                "h100-80gb-2",
                "h100-80gb-3",
                "a100-80gb-0",
                "a100-80gb-1",
                "l4-0",
                "cpu-0",
                "cpu-1"
            ]
        );
        assert_eq!(nodes[0].gpu.unwrap().key, "H100-80GB");
        assert_eq!(nodes[6].gpus, 1);
        assert!(nodes[8].gpu.is_none());
        assert_eq!(nodes[8].gpus, 0);
        let seeds: Vec<_> = nodes.iter().map(|n| n.seed).collect();
        assert_eq!(seeds, (0..9).collect::<Vec<_>>());
    }

    #[test]
    fn defaults_and_aliases() {
        let g = parse("H100").unwrap();
        assert_eq!(
            g,
            vec![NodeGroup {
                count: 1,
                gpu: catalog::find("H100-80GB"),
                gpus: 8
            }]
        );
        let g = parse(" 3Xl4:2 , cpu ").unwrap();
        assert_eq!(g[0].count, 3);
        assert_eq!(g[0].gpus, 2);
        assert_eq!(g[1].gpu, None);
    }

    #[test]
    fn numbering_continues_across_groups_of_one_model() {
        let names: Vec<_> = plan("2xL4:1,1xL4:1")
            .unwrap()
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, ["l4-0", "l4-1", "l4-2"]);
    }

    #[test]
    fn clear_errors() {
        let err = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(parse("").unwrap_err(), SpecError::Empty);
        assert!(
            err("2xV100:8").contains("unknown GPU model \"V100\""),
            "{}",
            err("2xV100:8")
        );
        assert!(err("2xV100:8").contains("H100-80GB"));
        assert!(err("0xL4:1").contains("at least 1"));
        assert!(err("2xL4:many").contains("\"many\" is not a number"));
        assert!(err("2xL4:0").contains("1–64"));
        assert!(err("2L4").contains("expected `x`"));
        assert!(err("2xcpu:4").contains("no GPUs"));
        assert!(err("2xL4:1,,cpu").contains("stray comma"));
        assert!(err("3x").contains("missing model"));
        assert_eq!(
            parse("100001xcpu").unwrap_err(),
            SpecError::TooMany(100_001)
        );
        assert!(err("99999999999xcpu").contains("too large"));
    }
}
