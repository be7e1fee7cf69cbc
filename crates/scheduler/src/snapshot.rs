//! The indexed, immutable model one cycle works on. Everything refers to everything else by
//! dense `u32` ids; strings are only kept for output and are borrowed from the cache
//! (`ClusterInput`), so building a snapshot copies no names. Built once per cycle.

use crate::input::{ClusterInput, NodeInput, NodeSelector, PodInput, PodPhase, Taint, Toleration};
use crate::request::{GpuRequest, gpu_memory_mib, memory_to_milli, parse_gpu_request};
use gantry_api::names;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

pub(crate) mod devices;
mod gpu_idx;
mod groups;
pub use gpu_idx::GpuIdx;
mod index;
#[cfg(test)]
mod tests;
use groups::{build_queues, group_pods, mig_slices};
pub use index::{FastHasher, FastMap};
use index::{GroupIndex, fast_map};

pub type NodeId = u32;
pub type QueueId = u32;
pub type GroupId = u32;
pub type PodId = u32;
pub type ClassId = u32;

/// Resource indices used throughout: GPU in milli-GPUs, CPU in millicores, memory in bytes.
pub const GPU: usize = 0;
pub const CPU: usize = 1;
pub const MEM: usize = 2;
pub const RESOURCE_NAMES: [&str; 3] = [names::RESOURCE_GPU, "cpu", "memory"];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Res(pub [i64; 3]);

impl Res {
    pub fn add(&mut self, o: &Res) {
        for i in 0..3 {
            self.0[i] += o.0[i];
        }
    }
    pub fn sub(&mut self, o: &Res) {
        for i in 0..3 {
            self.0[i] -= o.0[i];
        }
    }
    pub fn plus(mut self, o: &Res) -> Res {
        self.add(o);
        self
    }
    /// Natural units for fair share: GPUs, millicores, bytes.
    pub fn to_f(&self) -> [f64; 3] {
        [
            self.0[GPU] as f64 / 1000.0,
            self.0[CPU] as f64,
            self.0[MEM] as f64,
        ]
    }
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 3]
    }
}

#[derive(Clone, Debug)]
pub struct Node<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    pub schedulable: bool,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub pods: u32,
    pub gpus: u32,
    pub gpu_model: &'a str,
    /// `None` when the GFD memory label is missing: `gpu-memory` pods cannot fit.
    pub gpu_memory_mib: Option<u64>,
    /// MIG resources (profile index, allocatable count).
    pub mig: Vec<(u16, u32)>,
    /// MIG nodes never host fractions.
    pub mig_enabled: bool,
    /// GPU slots that take no new work (see [`devices::Slots`]); only on nodes that publish
    /// their GPUs, where slot `i` is GPU `i`.
    pub withdrawn: Vec<u8>,
    /// Fraction groups on the node: (group index, GPU), where the node says.
    pub groups: Vec<(u32, u32)>,
}

impl Node<'_> {
    /// GPUs that can take new work.
    pub fn usable_gpus(&self) -> u32 {
        self.gpus.saturating_sub(self.withdrawn.len() as u32)
    }
}

#[derive(Clone, Debug)]
pub struct Queue {
    pub name: String,
    pub parent: Option<QueueId>,
    pub children: Vec<QueueId>,
    pub priority: i32,
    /// Per resource, natural units (GPUs, millicores, bytes); `-1` kept as-is.
    pub quota: [f64; 3],
    pub limit: [f64; 3],
    pub weight: [f64; 3],
    pub creation: i64,
    pub usage: [f64; 3],
    /// `preemptMinRuntime` / `reclaimMinRuntime` in nanoseconds (`None`: inherited).
    pub preempt_min_runtime: Option<i64>,
    pub reclaim_min_runtime: Option<i64>,
}

impl Queue {
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
}

#[derive(Clone, Debug)]
pub struct SubGroup<'a> {
    pub name: &'a str,
    pub min_member: u32,
}

/// A range of a flat array of the snapshot (a group's pods or sub-groups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }
    pub fn is_empty(self) -> bool {
        self.end == self.start
    }
}

#[derive(Clone, Debug)]
pub struct PodGroup<'a> {
    pub namespace: &'a str,
    /// Owned only for the holder groups the build invents (`<pod>`).
    pub name: Cow<'a, str>,
    /// `None`: the queue does not exist, or a foreign (other scheduler) pod's holder group.
    pub queue: Option<QueueId>,
    pub queue_name: &'a str,
    pub priority: i32,
    pub preemptible: bool,
    /// Into `Snapshot::sub_groups` (see [`Snapshot::sub_groups_of`]); the first is the
    /// implicit default sub-group.
    pub sub_groups: Span,
    pub creation: i64,
    /// `None` = never evict as stale.
    pub staleness_grace: Option<i64>,
    pub stale_since: Option<i64>,
    /// When the job last started running (annotation `kai.scheduler/last-start-timestamp`),
    /// Unix seconds: the start of its minimum runtime.
    pub last_start: Option<i64>,
    /// Into `Snapshot::group_pods` (see [`Snapshot::pods_of`]): the group's pods in task
    /// order (task priority, creation, name).
    pub pods: Span,
    /// Holder for running pods of other schedulers: never scheduled, never a victim.
    pub foreign: bool,
    /// Required/preferred topology placement (see [`crate::topology`]).
    pub topology: Option<&'a crate::input::TopologyConstraintInput>,
}

#[derive(Clone, Debug)]
pub struct Pod<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub group: GroupId,
    pub sub_group: u16,
    pub gpu: GpuRequest,
    /// What the pod counts against its queue (GPU milli incl. fractions, CPU, memory).
    pub res: Res,
    pub class: ClassId,
    pub running: bool,
    /// Bound and terminating: holds `node` until gone; never pending, never a victim.
    pub releasing: bool,
    pub node: Option<NodeId>,
    /// The GPUs it holds (physical where the node publishes its GPUs).
    pub gpu_indices: Cow<'a, [u32]>,
    pub creation: i64,
    pub task_priority: i32,
    /// Why this pod can never be scheduled as given (bad annotation, missing group ...).
    pub invalid: Option<String>,
}

/// The static placement constraints shared by many pods.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConstraintClass {
    pub node_selector: Vec<(String, String)>,
    pub affinity: Option<NodeSelector>,
    pub tolerations: Vec<Toleration>,
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot<'a> {
    pub now: i64,
    pub nodes: Vec<Node<'a>>,
    pub queues: Vec<Queue>,
    pub groups: Vec<PodGroup<'a>>,
    pub pods: Vec<Pod<'a>>,
    /// Every group's sub-groups, group after group.
    pub sub_groups: Vec<SubGroup<'a>>,
    /// Every group's pods, group after group.
    pub group_pods: Vec<PodId>,
    pub classes: Vec<ConstraintClass>,
    /// MIG resource names (`nvidia.com/mig-1g.10gb`) and their GPU-slice count (the `1` of `1g`).
    pub mig_profiles: Vec<String>,
    pub mig_profile_gpus: Vec<u32>,
    /// Problems in the input that did not stop the cycle (object named, what is wrong).
    pub issues: Vec<String>,
    /// KAI `Topology` objects, as given.
    pub topologies: &'a [crate::input::TopologyInput],
}

impl<'a> Snapshot<'a> {
    /// A group's pods in task order.
    pub fn pods_of(&self, g: GroupId) -> &[PodId] {
        &self.group_pods[self.groups[g as usize].pods.range()]
    }
    /// A group's sub-groups (the first is the default one).
    pub fn sub_groups_of(&self, g: GroupId) -> &[SubGroup<'a>] {
        &self.sub_groups[self.groups[g as usize].sub_groups.range()]
    }
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| i as NodeId)
    }
    pub fn pod_by_name(&self, namespace: &str, name: &str) -> Option<PodId> {
        self.pods
            .iter()
            .position(|p| p.namespace == namespace && p.name == name)
            .map(|i| i as PodId)
    }
    pub fn queue_by_name(&self, name: &str) -> Option<QueueId> {
        self.queues
            .iter()
            .position(|q| q.name == name)
            .map(|i| i as QueueId)
    }
    /// Queue ids from `q` up to its root, `q` first.
    pub fn ancestry(&self, q: QueueId) -> impl Iterator<Item = QueueId> + '_ {
        std::iter::successors(Some(q), move |&q| self.queues[q as usize].parent)
    }
    /// Total schedulable capacity (natural units) of all schedulable nodes.
    pub fn cluster_total(&self) -> Res {
        let mut t = Res::default();
        for n in self.nodes.iter().filter(|n| n.schedulable) {
            let mig: i64 = n
                .mig
                .iter()
                .map(|&(p, c)| i64::from(self.mig_profile_gpus[p as usize]) * i64::from(c))
                .sum();
            t.add(&Res([
                (i64::from(n.usable_gpus()) + mig) * 1000,
                n.cpu_milli,
                n.memory_bytes,
            ]));
        }
        t
    }

    /// Index the cache. Never fails: bad objects are reported in `issues` and their pods
    /// carry an `invalid` reason.
    pub fn build(input: &'a ClusterInput) -> Snapshot<'a> {
        let mut s = Snapshot {
            now: input.now,
            topologies: &input.topologies,
            ..Default::default()
        };
        let mut mig_ids: FastMap<String, u16> = fast_map(8);
        let mut intern = |name: &str, s: &mut Snapshot<'a>| -> u16 {
            *mig_ids.entry(name.to_string()).or_insert_with(|| {
                s.mig_profiles.push(name.to_string());
                s.mig_profile_gpus.push(mig_slices(name));
                (s.mig_profiles.len() - 1) as u16
            })
        };
        s.nodes.reserve_exact(input.nodes.len());
        s.groups.reserve_exact(input.pod_groups.len() + 16);
        s.sub_groups.reserve(input.pod_groups.len() + 16);
        s.pods.reserve_exact(input.pods.len());
        let mut node_ids: FastMap<&str, NodeId> = fast_map(input.nodes.len());
        // Per snapshot node: its input and, when it publishes its GPUs, its slots.
        let mut physical: Vec<(&NodeInput, Option<devices::Slots>)> = Vec::new();
        for n in &input.nodes {
            if node_ids.insert(&n.name, s.nodes.len() as NodeId).is_some() {
                s.issues.push(format!(
                    "node {}: duplicate name, later entry ignored",
                    n.name
                ));
                continue;
            }
            let mig: Vec<(u16, u32)> = n
                .mig
                .iter()
                .filter(|(_, c)| **c > 0)
                .map(|(k, c)| (intern(k, &mut s), *c))
                .collect();
            // MIG is on when the node exposes MIG resources (mixed), says so (KAI's
            // `node-role.kubernetes.io/mig-enabled`), or advertises MIG slices as `nvidia.com/gpu`
            // (single: GFD's product gets a `-MIG-<profile>` suffix). The strategy label alone
            // is not enough: GFD sets it on every node, MIG-capable or not.
            let label = |k: &str| n.labels.get(k).map(String::as_str);
            let single_mig = label(names::LABEL_MIG_STRATEGY) == Some("single")
                && label(names::LABEL_GPU_PRODUCT).is_some_and(|p| p.contains("-MIG-"));
            let mig_enabled = !mig.is_empty()
                || label("node-role.kubernetes.io/mig-enabled") == Some("true")
                || single_mig;
            let slots = devices::physical(n);
            let (gpus, withdrawn) = match &slots {
                Some(sl) => (sl.count, sl.withdrawn.clone()),
                None => (n.gpus.min(255), Vec::new()),
            };
            physical.push((n, slots));
            s.nodes.push(Node {
                name: &n.name,
                labels: &n.labels,
                taints: &n.taints,
                schedulable: n.schedulable,
                cpu_milli: n.cpu_milli.max(0),
                memory_bytes: n.memory_bytes.max(0),
                pods: n.pods,
                gpus,
                gpu_model: n
                    .labels
                    .get(names::LABEL_GPU_PRODUCT)
                    .map_or("", String::as_str),
                gpu_memory_mib: gpu_memory_mib(n.labels.get(names::LABEL_GPU_MEMORY)),
                mig,
                mig_enabled,
                withdrawn,
                groups: Vec::new(),
            });
        }
        let mut bound_to: Vec<Vec<&PodInput>> = vec![Vec::new(); s.nodes.len()];
        for p in input.pods.iter().filter(|p| p.phase == PodPhase::Running) {
            if let Some(&id) = p.node.as_deref().and_then(|n| node_ids.get(n))
                && physical[id as usize].1.is_some()
            {
                bound_to[id as usize].push(p);
            }
        }
        for (id, (n, slots)) in physical.iter().enumerate() {
            if let Some(sl) = slots {
                s.nodes[id].groups = devices::groups(n, sl, bound_to[id].iter().copied());
            }
        }
        build_queues(input, &mut s);
        let queue_ids: FastMap<&str, QueueId> = s
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| (q.name.as_str(), i as QueueId))
            .collect();
        let mut group_ids = GroupIndex::with_capacity(input.pod_groups.len());
        for g in &input.pod_groups {
            let next = s.groups.len() as GroupId;
            let hash = GroupIndex::hash(&g.namespace, &g.name);
            let groups = &s.groups;
            let same = |id: GroupId| {
                let o = &groups[id as usize];
                o.name == g.name.as_str() && o.namespace == g.namespace
            };
            if let Err(slot) = group_ids.find(hash, same) {
                group_ids.insert_at(slot, hash, next);
            } else {
                s.issues.push(format!(
                    "podgroup {}/{}: duplicate, later entry ignored",
                    g.namespace, g.name
                ));
                continue;
            }
            let queue = queue_ids.get(g.queue.as_str()).copied();
            match queue {
                None => s.issues.push(format!(
                    "podgroup {}/{}: queue {:?} does not exist",
                    g.namespace, g.name, g.queue
                )),
                Some(q) if !s.queues[q as usize].is_leaf() => s.issues.push(format!(
                    "podgroup {}/{}: queue {} is not a leaf queue",
                    g.namespace, g.name, g.queue
                )),
                _ => {}
            }
            let queue = queue.filter(|&q| s.queues[q as usize].is_leaf());
            let priority = g.priority.unwrap_or(names::DEFAULT_POD_GROUP_PRIORITY);
            let min_member = g.min_member.unwrap_or(1);
            let sub_start = s.sub_groups.len() as u32;
            s.sub_groups.push(SubGroup {
                name: "default",
                min_member: if g.sub_groups.is_empty() {
                    min_member
                } else {
                    0
                },
            });
            s.sub_groups.extend(g.sub_groups.iter().map(|sg| SubGroup {
                name: &sg.name,
                min_member: sg.min_member,
            }));
            s.groups.push(PodGroup {
                namespace: &g.namespace,
                name: Cow::Borrowed(&g.name),
                queue,
                queue_name: &g.queue,
                priority,
                preemptible: g
                    .preemptible
                    .unwrap_or(priority < names::NON_PREEMPTIBLE_PRIORITY_THRESHOLD),
                sub_groups: Span {
                    start: sub_start,
                    end: s.sub_groups.len() as u32,
                },
                creation: g.creation,
                staleness_grace: match g.staleness_grace_secs {
                    Some(v) if v < 0 => None,
                    Some(v) => Some(v),
                    None => Some(60),
                },
                stale_since: g.stale_since,
                last_start: g.last_start,
                pods: Span::default(),
                foreign: false,
                topology: g.topology.as_ref(),
            });
        }
        let max_gpu_mib = s.nodes.iter().filter_map(|n| n.gpu_memory_mib).max();
        let mut class_ids: FastMap<ConstraintClass, ClassId> = fast_map(16);
        let mut empty_class: Option<ClassId> = None;
        // Only the input's groups are looked up by name (not the holders invented below).
        let real_groups = s.groups.len() as GroupId;
        let mut last_group: GroupId = 0;
        for p in &input.pods {
            let mut invalid = None;
            let gpu =
                match parse_gpu_request(&p.extended, &p.annotations, |name| intern(name, &mut s)) {
                    Ok(r) => r,
                    Err(e) => {
                        invalid = Some(format!("pod {}/{}: {e}", p.namespace, p.name));
                        GpuRequest::None
                    }
                };
            let node = match &p.node {
                Some(n) => match node_ids.get(n.as_str()) {
                    Some(&id) => Some(id),
                    None => {
                        s.issues.push(format!(
                            "pod {}/{}: bound to unknown node {n}",
                            p.namespace, p.name
                        ));
                        None
                    }
                },
                None => None,
            };
            let bound = p.phase == PodPhase::Running && node.is_some();
            let running = bound && !p.releasing;
            let releasing = bound && p.releasing;
            if p.phase == PodPhase::Running && node.is_none() {
                // A running pod on a node we do not know holds nothing we can see.
                continue;
            }
            let groups = &s.groups;
            let is = |id: GroupId| {
                let o = &groups[id as usize];
                o.name == p.pod_group.as_str() && o.namespace == p.namespace
            };
            // The cache keeps pods and groups in arrival order, so a pod's group is mostly the
            // previous pod's or the next one: try those before hashing (a sequential walk
            // instead of a random probe per pod; same answer, the names are unique).
            let found = match [last_group, last_group + 1]
                .into_iter()
                .find(|&id| id < real_groups && is(id))
            {
                Some(id) => Ok(id),
                None => group_ids.find(GroupIndex::hash(&p.namespace, &p.pod_group), is),
            };
            let group = match found {
                Ok(g) => {
                    last_group = g;
                    g
                }
                Err(_) => {
                    if !running && invalid.is_none() {
                        invalid = Some(format!(
                            "pod {}/{}: podgroup {:?} does not exist",
                            p.namespace, p.name, p.pod_group
                        ));
                    }
                    // Holder group so the pod is still accounted for (capacity, decisions).
                    let sub_start = s.sub_groups.len() as u32;
                    s.sub_groups.push(SubGroup {
                        name: "default",
                        min_member: 1,
                    });
                    s.groups.push(PodGroup {
                        namespace: &p.namespace,
                        name: Cow::Owned(format!("<{}>", p.name)),
                        queue: None,
                        queue_name: "",
                        priority: i32::MAX,
                        preemptible: false,
                        sub_groups: Span {
                            start: sub_start,
                            end: sub_start + 1,
                        },
                        creation: p.creation,
                        staleness_grace: None,
                        stale_since: None,
                        last_start: None,
                        topology: None,
                        pods: Span::default(),
                        foreign: true,
                    });
                    (s.groups.len() - 1) as GroupId
                }
            };
            let grp = &s.groups[group as usize];
            let sub_group = match &p.sub_group {
                None => 0,
                Some(name) => match s.sub_groups[grp.sub_groups.range()]
                    .iter()
                    .position(|sg| sg.name == name)
                {
                    Some(i) => i as u16,
                    None => {
                        if invalid.is_none() {
                            invalid = Some(format!(
                                "pod {}/{}: sub-group {name:?} is not in podgroup {}",
                                p.namespace, p.name, grp.name
                            ));
                        }
                        0
                    }
                },
            };
            if invalid.is_none() && !grp.foreign && grp.queue.is_none() {
                invalid = Some(format!(
                    "queue {:?} of podgroup {} does not exist or is not a leaf queue",
                    grp.queue_name, grp.name
                ));
            }
            let gpu_mib = node
                .and_then(|n| s.nodes[n as usize].gpu_memory_mib)
                .or(max_gpu_mib);
            let gpu_milli: i64 = match &gpu {
                GpuRequest::None => 0,
                GpuRequest::Whole(n) => i64::from(*n) * 1000,
                GpuRequest::Fraction { milli, devices } => i64::from(*milli) * i64::from(*devices),
                GpuRequest::Memory { mib, devices } => {
                    let m = gpu_mib
                        .and_then(|g| memory_to_milli(*mib, g))
                        .unwrap_or(1000);
                    i64::from(m) * i64::from(*devices)
                }
                GpuRequest::Mig { profile, count } => {
                    i64::from(s.mig_profile_gpus[*profile as usize]) * i64::from(*count) * 1000
                }
            };
            let class =
                if p.node_selector.is_empty() && p.affinity.is_none() && p.tolerations.is_empty() {
                    // The common unconstrained pod skips hashing.
                    let next = class_ids.len() as ClassId;
                    *empty_class.get_or_insert_with(|| {
                        class_ids.insert(ConstraintClass::default(), next);
                        next
                    })
                } else {
                    let key = ConstraintClass {
                        node_selector: p
                            .node_selector
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                        affinity: p.affinity.clone(),
                        tolerations: p.tolerations.clone(),
                    };
                    let next = class_ids.len() as ClassId;
                    *class_ids.entry(key).or_insert(next)
                };
            s.pods.push(Pod {
                namespace: &p.namespace,
                name: &p.name,
                group,
                sub_group,
                gpu,
                res: Res([gpu_milli, p.cpu_milli.max(0), p.memory_bytes.max(0)]),
                class,
                running,
                releasing,
                node: if bound { node } else { None },
                gpu_indices: match (bound, node) {
                    (true, Some(id)) if physical[id as usize].1.is_some() => {
                        devices::pod_gpus(p, physical[id as usize].0, &s.nodes[id as usize].groups)
                    }
                    (true, _) => Cow::Borrowed(&p.gpu_indices),
                    _ => Cow::Borrowed(&[]),
                },
                creation: p.creation,
                task_priority: p.task_priority,
                invalid: if bound { None } else { invalid },
            });
        }
        let mut classes: Vec<(ClassId, ConstraintClass)> =
            class_ids.into_iter().map(|(k, v)| (v, k)).collect();
        classes.sort_by_key(|(id, _)| *id);
        s.classes = classes.into_iter().map(|(_, c)| c).collect();
        group_pods(&mut s);
        s
    }
}
