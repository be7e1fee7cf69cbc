//! The snapshot's data model: dense ids, resource vectors, and the node, queue, group and pod
//! records (with their lookups) that one cycle reads. Built by `Snapshot::build` in the parent.

use crate::input::{NodeSelector, Taint, Toleration};
use crate::request::GpuRequest;
use gantry_api::names;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

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
    /// GPU slots that take no new work (see [`super::devices::Slots`]); only on nodes that publish
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
}
