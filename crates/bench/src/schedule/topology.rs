//! `gantry bench schedule --topology zone=64,rack=8`: the synthetic cluster's nodes labelled
//! into zones and racks (as `gantry up --topology` does, nodes in order), a KAI `Topology`
//! of those levels, and every pending job constrained by it: gangs require the innermost
//! level (a rack), single pods prefer it. Measures what topology-aware placement costs.

use gantry_scheduler::input::{ClusterInput, TopologyConstraintInput, TopologyInput};
use gantry_sim::node_topology;

/// The Topology object's name in the bench input.
pub const TOPOLOGY_NAME: &str = "bench-topology";

/// Label the nodes, add the Topology and constrain the pending jobs. Returns the number of
/// innermost domains.
pub fn apply(input: &mut ClusterInput, spec: &str) -> Result<usize, node_topology::SpecError> {
    let levels = node_topology::parse(spec)?;
    for (i, n) in input.nodes.iter_mut().enumerate() {
        n.labels.extend(node_topology::labels_of(&levels, i));
    }
    let innermost = levels.last().map(|l| l.label.clone()).unwrap_or_default();
    input.topologies.push(TopologyInput {
        name: TOPOLOGY_NAME.into(),
        levels: levels.iter().map(|l| l.label.clone()).collect(),
        problem: None,
    });
    let mut pods_per_group: std::collections::HashMap<&str, usize> = Default::default();
    for p in &input.pods {
        *pods_per_group.entry(p.pod_group.as_str()).or_default() += 1;
    }
    let sizes: Vec<usize> = input
        .pod_groups
        .iter()
        .map(|g| pods_per_group.get(g.name.as_str()).copied().unwrap_or(0))
        .collect();
    for (g, size) in input.pod_groups.iter_mut().zip(sizes) {
        let gang = size > 1;
        g.topology = Some(TopologyConstraintInput {
            topology: TOPOLOGY_NAME.into(),
            required: gang.then(|| innermost.clone()),
            preferred: (!gang).then(|| innermost.clone()),
        });
    }
    let per = levels.last().map_or(1, |l| l.size as usize);
    Ok(input.nodes.len().div_ceil(per))
}
