//! Topology-aware placement, as KAI's `topology` plugin does it. A `Topology` names node
//! labels, outermost first (zone → rack → host); nodes carrying every one of them form a
//! tree of domains (a domain is one value path, e.g. zone `a` / rack `3`). A job may name a
//! required level (all its pods inside one domain of that level) and a preferred level
//! (the tightest domain tried first, wider ones after).
//!
//! Pure: [`plan`] turns the snapshot, the cycle's state and the job's pods into the node
//! sets the placer may use, in the order to try them, or says which level cannot be
//! satisfied. KAI's rules:
//! - only nodes with a label for every level belong to the topology;
//! - each domain's room is how many copies of the job's largest pod its nodes take;
//! - levels are walked from the preferred (else the required) level up to the required
//!   level (else the whole topology); the first level with a domain that holds every pod
//!   wins, and its domains are tried fullest first (bin-packing across domains);
//! - on a level wider than the preferred one, the fewest children that hold the job are
//!   tried before the whole domain (the pods stay in as few preferred domains as possible);
//! - a job with running pods stays in the required-level domain(s) that hold them.

pub mod session;

use crate::input::{TopologyConstraintInput, TopologyInput};
use crate::predicates::static_check;
use crate::request::GpuRequest;
use crate::snapshot::{CPU, GPU, GroupId, MEM, NodeId, PodId, Snapshot};
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet};

/// Where a job may go.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// No topology constraint: every node.
    Any,
    /// Node sets to try in order (each sorted by node id), with what each is.
    Domains(Vec<Attempt>),
    /// Nothing can hold the job: why, naming the level.
    Unsatisfiable(String),
}

/// One node set the job's pods may use.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// "rack zone-a/r1", "racks zone-a/r1+zone-a/r2 of zone zone-a", "the whole topology".
    pub what: String,
    pub nodes: Vec<NodeId>,
}

/// The resolved constraint: level indices into the Topology's labels.
struct Resolved<'a> {
    topo: &'a TopologyInput,
    required: Option<usize>,
    preferred: Option<usize>,
}

fn resolve<'a>(
    topologies: &'a [TopologyInput],
    c: &TopologyConstraintInput,
) -> Result<Resolved<'a>, String> {
    let topo = topologies
        .iter()
        .find(|t| t.name == c.topology)
        .ok_or_else(|| format!("topology {} does not exist", c.topology))?;
    if let Some(p) = &topo.problem {
        return Err(p.clone());
    }
    let index = |what: &str, level: &Option<String>| -> Result<Option<usize>, String> {
        let Some(l) = level else { return Ok(None) };
        match topo.levels.iter().position(|x| x == l) {
            Some(i) => Ok(Some(i)),
            None => Err(format!(
                "topology {} has no level {l:?} (the {what} level); its levels are {}",
                topo.name,
                topo.levels.join(", ")
            )),
        }
    };
    let required = index("required", &c.required)?;
    let preferred = index("preferred", &c.preferred)?;
    if required.is_none() && preferred.is_none() {
        return Err(format!(
            "topology {}: the job names neither a required nor a preferred level",
            topo.name
        ));
    }
    // A preferred level wider than the required one adds nothing (KAI ignores it too).
    let preferred = match (required, preferred) {
        (Some(r), Some(p)) if p < r => None,
        _ => preferred,
    };
    Ok(Resolved {
        topo,
        required,
        preferred,
    })
}

/// How many copies of the job's largest pod fit on node `n` now (KAI's node
/// accommodation: the per-resource maximum over the pods, added up until it no longer fits).
fn room(s: &Snapshot<'_>, st: &State, n: NodeId, tasks: &[PodId]) -> u32 {
    let i = n as usize;
    let node = &s.nodes[i];
    if tasks
        .iter()
        .any(|&t| static_check(node, &s.classes[s.pods[t as usize].class as usize]).is_err())
    {
        return 0;
    }
    let max = |k: usize| tasks.iter().map(|&t| s.pods[t as usize].res.0[k]).max();
    let per = |free: i64, want: Option<i64>| match want {
        Some(w) if w > 0 => (free.max(0) / w) as u64,
        _ => u64::MAX,
    };
    let mut fit = (st.free_pods[i].max(0) as u64)
        .min(per(st.free_cpu[i], max(CPU)))
        .min(per(st.free_mem[i], max(MEM)));
    // The GPU side of the largest GPU request.
    let gpu = tasks
        .iter()
        .map(|&t| &s.pods[t as usize])
        .max_by_key(|p| p.res.0[GPU])
        .map(|p| &p.gpu);
    let slots = st.node_gpus(n);
    let gpu_fit = match gpu {
        None | Some(GpuRequest::None) => u64::MAX,
        Some(GpuRequest::Whole(k)) => u64::from(st.idle_gpus[i]) / u64::from((*k).max(1)),
        Some(GpuRequest::Fraction { milli, devices }) => {
            let per_dev: u64 = slots
                .iter()
                .map(|g| u64::from(g.free_milli() / (*milli).max(1)))
                .sum();
            per_dev / u64::from((*devices).max(1))
        }
        Some(GpuRequest::Memory { devices, .. }) => {
            // Memory shares: the pod's milli as the scheduler accounts it.
            let want = max(GPU).unwrap_or(0) / i64::from((*devices).max(1));
            per(st.free_gpu[i], Some(want))
        }
        Some(GpuRequest::Mig { profile, count }) => st.mig_free[i]
            .iter()
            .find(|(p, _)| p == profile)
            .map_or(0, |(_, c)| (c.max(&0) / i64::from((*count).max(1))) as u64),
    };
    fit = fit.min(gpu_fit);
    fit.min(u64::from(u32::MAX)) as u32
}

/// The domains of one level: key (label values down to the level) → (nodes, room).
type Level<'k> = BTreeMap<Vec<&'k str>, (Vec<NodeId>, u64)>;

/// Group topology nodes by their value path down to `depth` levels (0 = the whole topology).
fn domains<'k>(members: &[(NodeId, Vec<&'k str>, u32)], depth: usize) -> Level<'k> {
    let mut out: Level<'k> = BTreeMap::new();
    for (n, path, room) in members {
        let e = out.entry(path[..depth].to_vec()).or_default();
        e.0.push(*n);
        e.1 += u64::from(*room);
    }
    out
}

fn domain_name(topo: &TopologyInput, key: &[&str]) -> String {
    if key.is_empty() {
        "the whole topology".into()
    } else {
        format!("{} {}", short(&topo.levels[key.len() - 1]), key.join("/"))
    }
}

/// `cloud.provider.com/topology-rack` → `topology-rack` (for messages).
fn short(label: &str) -> &str {
    label.rsplit('/').next().unwrap_or(label)
}

/// Where job `g` may place `tasks` this cycle.
pub fn plan(s: &Snapshot<'_>, st: &State, g: GroupId, tasks: &[PodId]) -> Plan {
    let Some(c) = s.groups[g as usize].topology else {
        return Plan::Any;
    };
    let r = match resolve(s.topologies, c) {
        Ok(r) => r,
        Err(why) => return Plan::Unsatisfiable(why),
    };
    let topo = r.topo;
    let want = tasks.len() as u64;
    // Topology nodes with their value paths and room for this job.
    let members: Vec<(NodeId, Vec<&str>, u32)> = s
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            let path: Option<Vec<&str>> = topo
                .levels
                .iter()
                .map(|l| n.labels.get(l).map(String::as_str))
                .collect();
            Some((i as NodeId, path?, room(s, st, i as NodeId, tasks)))
        })
        .collect();
    if members.is_empty() {
        return Plan::Unsatisfiable(format!(
            "topology {}: no node has a label for every level ({})",
            topo.name,
            topo.levels.join(", ")
        ));
    }
    // Required-level domains already holding this job's running pods (they must stay there).
    let held: BTreeSet<Vec<&str>> = match r.required {
        Some(req) => s
            .pods_of(g)
            .iter()
            .filter_map(|&p| st.placement[p as usize].as_ref().map(|pl| pl.node))
            .filter_map(|n| members.iter().find(|m| m.0 == n))
            .map(|m| m.1[..=req].to_vec())
            .collect(),
        None => BTreeSet::new(),
    };
    let inside_held = |key: &[&str]| match r.required {
        Some(req) if !held.is_empty() => {
            let k = key.len().min(req + 1);
            held.iter().any(|h| h[..k] == key[..k])
        }
        _ => true,
    };
    // Depths to try, tightest first: preferred (else required) up to required (else root).
    let deepest = r.preferred.or(r.required).map_or(0, |l| l + 1);
    let widest = r.required.map_or(0, |l| l + 1);
    let mut best_room = (0u64, String::new());
    for depth in (widest..=deepest).rev() {
        let level = domains(&members, depth);
        let mut fits: Vec<(&Vec<&str>, &(Vec<NodeId>, u64))> = level
            .iter()
            .filter(|(k, _)| inside_held(k))
            .inspect(|(k, d)| {
                if depth == widest && d.1 > best_room.0 {
                    best_room = (d.1, domain_name(topo, k));
                }
            })
            .filter(|(_, d)| d.1 >= want)
            .collect();
        if fits.is_empty() {
            continue;
        }
        // Fullest first (least room), then by name: KAI's bin-packing across domains.
        fits.sort_by(|a, b| a.1.1.cmp(&b.1.1).then(a.0.cmp(b.0)));
        let preferred_depth = r.preferred.map(|p| p + 1);
        let mut attempts = Vec::new();
        for (key, (nodes, _)) in fits {
            if preferred_depth.is_some_and(|p| p > depth) {
                if let Some(a) = fewest_children(topo, &members, key, want) {
                    attempts.push(a);
                }
            }
            attempts.push(Attempt {
                what: domain_name(topo, key),
                nodes: nodes.clone(),
            });
        }
        return Plan::Domains(attempts);
    }
    let level = match r.required {
        Some(l) => format!("required level {}", topo.levels[l]),
        None => "any level".to_string(),
    };
    let largest = if best_room.0 == 0 {
        "none has room for one".to_string()
    } else {
        format!("the largest, {}, has room for {}", best_room.1, best_room.0)
    };
    Plan::Unsatisfiable(format!(
        "topology {}: no domain at the {level} can hold all {want} pods of the job ({largest})",
        topo.name
    ))
}

/// Within domain `key`, the fewest children (most room first) that together hold `want`
/// pods; `None` when one child is the whole domain anyway.
fn fewest_children(
    topo: &TopologyInput,
    members: &[(NodeId, Vec<&str>, u32)],
    key: &[&str],
    want: u64,
) -> Option<Attempt> {
    let inside: Vec<(NodeId, Vec<&str>, u32)> = members
        .iter()
        .filter(|m| m.1[..key.len()] == *key)
        .cloned()
        .collect();
    let children = domains(&inside, key.len() + 1);
    if children.len() < 2 {
        return None;
    }
    let mut kids: Vec<_> = children.into_iter().collect();
    kids.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(a.0.cmp(&b.0)));
    let mut nodes = Vec::new();
    let mut names = Vec::new();
    let mut sum = 0;
    for (k, (ns, room)) in &kids {
        if sum >= want {
            break;
        }
        sum += room;
        nodes.extend_from_slice(ns);
        names.push(k.join("/"));
    }
    if names.len() == kids.len() {
        return None;
    }
    nodes.sort_unstable();
    let level = short(&topo.levels[key.len()]);
    Some(Attempt {
        what: format!("{level} {} of {}", names.join("+"), domain_name(topo, key)),
        nodes,
    })
}

#[cfg(test)]
mod tests;
