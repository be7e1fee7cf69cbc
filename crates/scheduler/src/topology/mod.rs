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

use crate::input::{TopologyConstraintInput, TopologyInput};
use crate::predicates::static_check;
use crate::request::GpuRequest;
use crate::snapshot::{CPU, GPU, GroupId, MEM, NodeId, PodId, Snapshot};
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// A Topology's domains over the snapshot's nodes: built once per cycle and topology,
/// shared by every job that names it.
pub struct Index<'a> {
    topo: &'a TopologyInput,
    /// Nodes with a label for every level.
    members: Vec<NodeId>,
    /// Per node: its position in `members` (`u32::MAX`: outside the topology).
    member_of: Vec<u32>,
    /// Per depth (0: the whole topology; d: down to level d-1): each member's domain.
    dom: Vec<Vec<u32>>,
    /// Per depth: each domain's value path and members (positions in `members`).
    domains: Vec<Vec<(Vec<&'a str>, Vec<u32>)>>,
}

impl<'a> Index<'a> {
    pub fn build(s: &Snapshot<'a>, topo: &'a TopologyInput) -> Index<'a> {
        let mut members = Vec::new();
        let mut paths: Vec<Vec<&'a str>> = Vec::new();
        let mut member_of = vec![u32::MAX; s.nodes.len()];
        for (i, n) in s.nodes.iter().enumerate() {
            let labels: &'a BTreeMap<String, String> = n.labels;
            let path: Option<Vec<&'a str>> = topo
                .levels
                .iter()
                .map(|l| labels.get(l).map(String::as_str))
                .collect();
            if let Some(p) = path {
                member_of[i] = members.len() as u32;
                members.push(i as NodeId);
                paths.push(p);
            }
        }
        let depths = topo.levels.len() + 1;
        let mut dom = Vec::with_capacity(depths);
        let mut domains = Vec::with_capacity(depths);
        for depth in 0..depths {
            let mut ids: HashMap<&[&'a str], u32> = HashMap::new();
            let mut level: Vec<(Vec<&'a str>, Vec<u32>)> = Vec::new();
            let mut of = Vec::with_capacity(paths.len());
            for (m, p) in paths.iter().enumerate() {
                let key = &p[..depth];
                let id = *ids.entry(key).or_insert_with(|| {
                    level.push((key.to_vec(), Vec::new()));
                    (level.len() - 1) as u32
                });
                level[id as usize].1.push(m as u32);
                of.push(id);
            }
            dom.push(of);
            domains.push(level);
        }
        Index {
            topo,
            members,
            member_of,
            dom,
            domains,
        }
    }
}

/// The Topology indexes of one cycle, built when a job first names each.
#[derive(Default)]
pub struct Indexes<'a> {
    built: Vec<Index<'a>>,
}

impl<'a> Indexes<'a> {
    fn get(&mut self, s: &Snapshot<'a>, topo: &'a TopologyInput) -> &Index<'a> {
        let at = match self.built.iter().position(|i| i.topo.name == topo.name) {
            Some(at) => at,
            None => {
                self.built.push(Index::build(s, topo));
                self.built.len() - 1
            }
        };
        &self.built[at]
    }
}

/// What the job's pods need of a node (KAI's node accommodation: the per-resource maximum
/// over the pods, added up until it no longer fits).
struct Shape<'p> {
    classes: Vec<u32>,
    cpu: i64,
    mem: i64,
    gpu_milli: i64,
    gpu: &'p GpuRequest,
}

impl<'p> Shape<'p> {
    fn of(s: &'p Snapshot<'_>, tasks: &[PodId]) -> Shape<'p> {
        let pods = || tasks.iter().map(|&t| &s.pods[t as usize]);
        let mut classes: Vec<u32> = pods().map(|p| p.class).collect();
        classes.sort_unstable();
        classes.dedup();
        let max = |k: usize| pods().map(|p| p.res.0[k]).max().unwrap_or(0);
        Shape {
            classes,
            cpu: max(CPU),
            mem: max(MEM),
            gpu_milli: max(GPU),
            gpu: pods()
                .max_by_key(|p| p.res.0[GPU])
                .map_or(&GpuRequest::None, |p| &p.gpu),
        }
    }

    /// How many copies of the largest pod fit on node `n` now.
    fn room(&self, s: &Snapshot<'_>, st: &State, n: NodeId) -> u64 {
        let i = n as usize;
        let node = &s.nodes[i];
        if self
            .classes
            .iter()
            .any(|&c| static_check(node, &s.classes[c as usize]).is_err())
        {
            return 0;
        }
        let per = |free: i64, want: i64| {
            if want > 0 {
                (free.max(0) / want) as u64
            } else {
                u64::MAX
            }
        };
        let fit = (st.free_pods[i].max(0) as u64)
            .min(per(st.free_cpu[i], self.cpu))
            .min(per(st.free_mem[i], self.mem));
        let gpu = match self.gpu {
            GpuRequest::None => u64::MAX,
            GpuRequest::Whole(k) => u64::from(st.idle_gpus[i]) / u64::from((*k).max(1)),
            GpuRequest::Fraction { milli, devices } => {
                let slots: u64 = st
                    .node_gpus(n)
                    .iter()
                    .map(|g| u64::from(g.free_milli() / (*milli).max(1)))
                    .sum();
                slots / u64::from((*devices).max(1))
            }
            GpuRequest::Memory { .. } => per(st.free_gpu[i], self.gpu_milli),
            GpuRequest::Mig { profile, count } => st.mig_free[i]
                .iter()
                .find(|(p, _)| p == profile)
                .map_or(0, |&(_, c)| (c.max(0) / i64::from((*count).max(1))) as u64),
        };
        fit.min(gpu)
    }
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

/// Where job `g` may place `tasks` this cycle (builds the Topology's index; a cycle that
/// plans many jobs keeps one [`Indexes`] and calls [`plan_in`]).
pub fn plan(s: &Snapshot<'_>, st: &State, g: GroupId, tasks: &[PodId]) -> Plan {
    plan_in(&mut Indexes::default(), s, st, g, tasks)
}

/// [`plan`] with the cycle's Topology indexes.
pub fn plan_in<'a>(
    indexes: &mut Indexes<'a>,
    s: &Snapshot<'a>,
    st: &State,
    g: GroupId,
    tasks: &[PodId],
) -> Plan {
    let Some(c) = s.groups[g as usize].topology else {
        return Plan::Any;
    };
    let r = match resolve(s.topologies, c) {
        Ok(r) => r,
        Err(why) => return Plan::Unsatisfiable(why),
    };
    let ix = indexes.get(s, r.topo);
    let topo = r.topo;
    if ix.members.is_empty() {
        return Plan::Unsatisfiable(format!(
            "topology {}: no node has a label for every level ({})",
            topo.name,
            topo.levels.join(", ")
        ));
    }
    let want = tasks.len() as u64;
    let shape = Shape::of(s, tasks);
    let room: Vec<u64> = ix.members.iter().map(|&n| shape.room(s, st, n)).collect();
    // Required-level domains already holding this job's pods: it must stay in them.
    let held: BTreeSet<u32> = match r.required {
        Some(req) => s
            .pods_of(g)
            .iter()
            .filter_map(|&p| st.placement[p as usize].as_ref())
            .map(|pl| ix.member_of[pl.node as usize])
            .filter(|&m| m != u32::MAX)
            .map(|m| ix.dom[req + 1][m as usize])
            .collect(),
        None => BTreeSet::new(),
    };
    let inside = |m: usize| match r.required {
        Some(req) if !held.is_empty() => held.contains(&ix.dom[req + 1][m]),
        _ => true,
    };
    // Room per domain at `depth`, counting only members the job may use.
    let sums = |depth: usize| -> Vec<u64> {
        let mut out = vec![0u64; ix.domains[depth].len()];
        for (m, &d) in ix.dom[depth].iter().enumerate() {
            if inside(m) {
                out[d as usize] = out[d as usize].saturating_add(room[m]);
            }
        }
        out
    };
    // Depths to try, tightest first: preferred (else required) up to required (else root).
    let deepest = r.preferred.or(r.required).map_or(0, |l| l + 1);
    let widest = r.required.map_or(0, |l| l + 1);
    let preferred_depth = r.preferred.map(|p| p + 1);
    let mut below: Option<Vec<u64>> = None;
    for depth in (widest..=deepest).rev() {
        let here = sums(depth);
        let level = &ix.domains[depth];
        let mut fits: Vec<u32> = (0..level.len() as u32)
            .filter(|&d| here[d as usize] >= want)
            .collect();
        if fits.is_empty() {
            if depth == widest {
                let best = (0..level.len()).max_by_key(|&d| here[d]);
                return unsatisfiable(topo, &r, want, best.map(|d| (here[d], &level[d].0[..])));
            }
            below = Some(here);
            continue;
        }
        // Fullest first (least room), then by name: KAI's bin-packing across domains.
        fits.sort_by(|&a, &b| {
            (here[a as usize], &level[a as usize].0).cmp(&(here[b as usize], &level[b as usize].0))
        });
        let node_ids = |ms: &[u32]| -> Vec<NodeId> {
            let mut v: Vec<NodeId> = ms.iter().map(|&m| ix.members[m as usize]).collect();
            v.sort_unstable();
            v
        };
        let mut attempts = Vec::new();
        for d in fits {
            let (key, ms) = &level[d as usize];
            if preferred_depth.is_some_and(|p| p > depth) {
                let kids = below.get_or_insert_with(|| sums(depth + 1));
                if let Some(a) = fewest_children(ix, kids, depth, ms, want) {
                    attempts.push(a);
                }
            }
            attempts.push(Attempt {
                what: domain_name(topo, key),
                nodes: node_ids(ms),
            });
        }
        return Plan::Domains(attempts);
    }
    unsatisfiable(topo, &r, want, None)
}

fn unsatisfiable(
    topo: &TopologyInput,
    r: &Resolved<'_>,
    want: u64,
    best: Option<(u64, &[&str])>,
) -> Plan {
    let level = match r.required {
        Some(l) => format!("required level {}", topo.levels[l]),
        None => "any level".to_string(),
    };
    let largest = match best {
        Some((room, key)) if room > 0 => format!(
            "the largest, {}, has room for {room}",
            domain_name(topo, key)
        ),
        _ => "none has room for one".to_string(),
    };
    Plan::Unsatisfiable(format!(
        "topology {}: no domain at the {level} can hold all {want} pods of the job ({largest})",
        topo.name
    ))
}

/// Within the domain of members `ms` at `depth`, the fewest children (most room first) that
/// together hold `want` pods; `None` when that takes every child anyway.
fn fewest_children(
    ix: &Index<'_>,
    room: &[u64],
    depth: usize,
    ms: &[u32],
    want: u64,
) -> Option<Attempt> {
    let mut kids: Vec<u32> = ms.iter().map(|&m| ix.dom[depth + 1][m as usize]).collect();
    kids.sort_unstable();
    kids.dedup();
    if kids.len() < 2 {
        return None;
    }
    let level = &ix.domains[depth + 1];
    kids.sort_by(|&a, &b| {
        room[b as usize]
            .cmp(&room[a as usize])
            .then(level[a as usize].0.cmp(&level[b as usize].0))
    });
    let mut nodes = Vec::new();
    let mut names = Vec::new();
    let mut sum = 0;
    for &k in &kids {
        if sum >= want {
            break;
        }
        sum += room[k as usize];
        let (key, members) = &level[k as usize];
        nodes.extend(members.iter().map(|&m| ix.members[m as usize]));
        names.push(key.join("/"));
    }
    if names.len() == kids.len() {
        return None;
    }
    nodes.sort_unstable();
    let parent = &level[kids[0] as usize].0[..depth];
    Some(Attempt {
        what: format!(
            "{} {} of {}",
            short(&ix.topo.levels[depth]),
            names.join("+"),
            domain_name(ix.topo, parent)
        ),
        nodes,
    })
}

#[cfg(test)]
mod tests;
