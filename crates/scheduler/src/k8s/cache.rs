//! The scheduler's cache: the core's [`ClusterInput`] kept up to date in place from watch
//! events (no rebuild per cycle), plus the little each pod needs beyond it (owner, queue
//! labels, GPU group) and the binds in flight, which are assumed placed until the API says so.

use super::convert::{self, CachedPod};
use crate::input::{ClusterInput, PodGroupInput, PodInput, PodPhase};
use gantry_api::kai::{PodGroup, Queue, Topology};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// `namespace/name`.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// A Vec the core reads directly, with a name index for in-place updates.
#[derive(Debug)]
pub struct Indexed<T> {
    index: HashMap<String, usize>,
    keys: Vec<String>,
    _of: std::marker::PhantomData<T>,
}

impl<T> Default for Indexed<T> {
    fn default() -> Self {
        Indexed {
            index: HashMap::new(),
            keys: Vec::new(),
            _of: std::marker::PhantomData,
        }
    }
}

impl<T> Indexed<T> {
    fn upsert(&mut self, vec: &mut Vec<T>, k: &str, v: T) {
        match self.index.get(k) {
            Some(&i) => vec[i] = v,
            None => {
                self.index.insert(k.to_string(), vec.len());
                self.keys.push(k.to_string());
                vec.push(v);
            }
        }
    }
    fn remove(&mut self, vec: &mut Vec<T>, k: &str) -> Option<T> {
        let i = self.index.remove(k)?;
        let v = vec.swap_remove(i);
        self.keys.swap_remove(i);
        if i < vec.len() {
            self.index.insert(self.keys[i].clone(), i);
        }
        Some(v)
    }
    fn get<'a>(&self, vec: &'a [T], k: &str) -> Option<&'a T> {
        self.index.get(k).map(|&i| &vec[i])
    }
    fn get_mut<'a>(&self, vec: &'a mut [T], k: &str) -> Option<&'a mut T> {
        self.index.get(k).map(|&i| &mut vec[i])
    }
    fn reorder(&mut self, vec: &mut [T], mut first: impl FnMut(&T) -> bool)
    where
        T: Clone,
    {
        let mut pairs: Vec<(String, T)> = self.keys.drain(..).zip(vec.iter().cloned()).collect();
        pairs.sort_by_key(|(_, v)| !first(v));
        self.index.clear();
        for (i, (k, v)) in pairs.into_iter().enumerate() {
            self.index.insert(k.clone(), i);
            self.keys.push(k);
            vec[i] = v;
        }
    }
}

/// A bind the scheduler decided and has not seen land yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assumed {
    pub node: String,
    pub gpu_indices: Vec<u32>,
    /// GPU groups (fractions) the bind uses.
    pub groups: Vec<String>,
}

/// One reservation pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub uuid: Option<String>,
    pub created: i64,
    pub phase_failed: bool,
}

#[derive(Default)]
pub struct Cache {
    pub scheduler_name: String,
    pub reservation_ns: String,
    /// What the core reads.
    pub input: ClusterInput,
    nodes: Indexed<crate::input::NodeInput>,
    queues: Indexed<crate::input::QueueInput>,
    groups: Indexed<PodGroupInput>,
    pods: Indexed<PodInput>,
    /// Every non-terminal pod we know, stripped.
    pub meta: HashMap<String, CachedPod>,
    /// PodGroup priority class names, to re-resolve when PriorityClasses change.
    group_classes: HashMap<String, Option<String>>,
    raw_groups: HashMap<String, PodGroup>,
    pub priority_classes: HashMap<String, i32>,
    pub assumed: HashMap<String, Assumed>,
    /// GPU group -> reservation pod.
    pub reservations: BTreeMap<String, Reservation>,
    /// Bumped on every change the scheduler should react to.
    pub version: u64,
    pub node_gpu_mib: HashMap<String, u64>,
    /// Pods (key) whose spec the pod grouper has not handled yet.
    pub ungrouped: BTreeSet<String>,
    /// PodGroup key -> pods that name it before it exists: placed when it arrives, without
    /// a scan of every pod per new group (10,000 bare pods would mean 10^8 comparisons).
    awaiting_group: HashMap<String, BTreeSet<String>>,
}

impl Cache {
    pub fn new(scheduler_name: &str, reservation_ns: &str) -> Cache {
        Cache {
            scheduler_name: scheduler_name.to_string(),
            reservation_ns: reservation_ns.to_string(),
            ..Default::default()
        }
    }

    pub fn apply_node(&mut self, n: &Node) {
        let input = convert::node(n);
        if let Some(mib) = input
            .labels
            .get(gantry_api::names::LABEL_GPU_MEMORY)
            .and_then(|v| v.parse().ok())
        {
            self.node_gpu_mib.insert(input.name.clone(), mib);
        }
        let k = input.name.clone();
        if self.nodes.get(&self.input.nodes, &k).is_some_and(|old| {
            old.gpus == input.gpus
                && old.schedulable == input.schedulable
                && old.labels == input.labels
                && old.taints == input.taints
                && old.cpu_milli == input.cpu_milli
                && old.memory_bytes == input.memory_bytes
                && old.mig == input.mig
        }) {
            return; // heartbeats and status noise
        }
        self.nodes.upsert(&mut self.input.nodes, &k, input);
        self.version += 1;
    }

    pub fn delete_node(&mut self, name: &str) {
        self.node_gpu_mib.remove(name);
        if self.nodes.remove(&mut self.input.nodes, name).is_some() {
            self.version += 1;
        }
    }

    pub fn apply_queue(&mut self, q: &Queue) {
        let input = convert::queue(q);
        let k = input.name.clone();
        self.queues.upsert(&mut self.input.queues, &k, input);
        self.version += 1;
    }

    pub fn delete_queue(&mut self, name: &str) {
        if self.queues.remove(&mut self.input.queues, name).is_some() {
            self.version += 1;
        }
    }

    pub fn apply_topology(&mut self, t: &Topology) {
        let input = convert::topology(t);
        match self
            .input
            .topologies
            .iter_mut()
            .find(|x| x.name == input.name)
        {
            Some(x) => *x = input,
            None => self.input.topologies.push(input),
        }
        self.version += 1;
    }

    pub fn delete_topology(&mut self, name: &str) {
        self.input.topologies.retain(|t| t.name != name);
        self.version += 1;
    }

    pub fn queue_names(&self) -> impl Iterator<Item = &str> {
        self.input.queues.iter().map(|q| q.name.as_str())
    }

    pub fn apply_priority_class(&mut self, name: &str, value: i32) {
        if self.priority_classes.insert(name.to_string(), value) != Some(value) {
            let keys: Vec<String> = self
                .group_classes
                .iter()
                .filter(|(_, c)| c.as_deref() == Some(name))
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                if let Some(pg) = self.raw_groups.get(&k).cloned() {
                    self.apply_pod_group(&pg);
                }
            }
            self.version += 1;
        }
    }

    pub fn apply_pod_group(&mut self, pg: &PodGroup) {
        let classes = &self.priority_classes;
        let input = convert::pod_group(pg, |c| classes.get(c).copied());
        let k = key(&input.namespace, &input.name);
        let mut slim = pg.clone();
        slim.metadata.managed_fields = None;
        slim.status = None;
        self.group_classes
            .insert(k.clone(), pg.spec.priority_class_name.clone());
        self.raw_groups.insert(k.clone(), slim);
        let new = !self.groups.index.contains_key(&k);
        self.groups.upsert(&mut self.input.pod_groups, &k, input);
        if new {
            // Pods that waited for their group can be scheduled now.
            for pk in self.awaiting_group.remove(&k).unwrap_or_default() {
                self.place_pod(&pk);
            }
        }
        self.version += 1;
    }

    pub fn delete_pod_group(&mut self, namespace: &str, name: &str) {
        let k = key(namespace, name);
        self.group_classes.remove(&k);
        self.raw_groups.remove(&k);
        if self.groups.remove(&mut self.input.pod_groups, &k).is_some() {
            self.version += 1;
        }
    }

    pub fn pod_group(&self, namespace: &str, name: &str) -> Option<&PodGroupInput> {
        self.groups
            .get(&self.input.pod_groups, &key(namespace, name))
    }

    pub fn raw_pod_group(&self, namespace: &str, name: &str) -> Option<&PodGroup> {
        self.raw_groups.get(&key(namespace, name))
    }

    pub fn apply_pod(&mut self, p: &Pod) {
        let mut c = convert::pod(p, &self.scheduler_name, &self.reservation_ns);
        let k = key(&c.input.namespace, &c.input.name);
        if c.reservation {
            if let Some(group) = &c.gpu_group {
                let r = Reservation {
                    namespace: c.input.namespace.clone(),
                    name: c.input.name.clone(),
                    node: c.input.node.clone(),
                    uuid: c.reserved_uuid.clone(),
                    created: c.input.creation,
                    phase_failed: c.terminal,
                };
                if c.terminating {
                    self.reservations.remove(group);
                } else {
                    self.reservations.insert(group.clone(), r);
                }
            }
            self.hold_reserved_gpu(&k, &c);
            return;
        }
        if c.terminal {
            self.delete_pod(&c.input.namespace, &c.input.name);
            return;
        }
        // A watch update for a whole-GPU pod carries no indices: keep the ones we chose.
        if let Some(old) = self.meta.get(&k)
            && c.input.gpu_indices.is_empty()
            && old.input.node == c.input.node
        {
            c.input.gpu_indices = old.input.gpu_indices.clone();
        }
        if let Some(a) = self.assumed.get(&k)
            && c.input.gpu_indices.is_empty()
            && c.input.node.as_ref() == Some(&a.node)
        {
            c.input.gpu_indices = a.gpu_indices.clone();
        }
        if c.input.node.is_some() {
            self.assumed.remove(&k);
        }
        if c.ours && c.input.node.is_none() && c.input.pod_group.is_empty() && !c.skip_podgrouper {
            self.ungrouped.insert(k.clone());
        } else {
            self.ungrouped.remove(&k);
        }
        if let Some(old) = self.meta.get(&k)
            && old.input.pod_group != c.input.pod_group
        {
            let (ns, group) = (old.input.namespace.clone(), old.input.pod_group.clone());
            self.unawait(&k, &ns, &group);
        }
        self.meta.insert(k.clone(), c);
        self.place_pod(&k);
        self.version += 1;
    }

    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let k = key(namespace, name);
        if namespace == self.reservation_ns {
            self.reservations.retain(|_, r| r.name != name);
        }
        self.ungrouped.remove(&k);
        self.assumed.remove(&k);
        if let Some(gone) = self.meta.remove(&k) {
            self.unawait(&k, &gone.input.namespace, &gone.input.pod_group);
        }
        if self.pods.remove(&mut self.input.pods, &k).is_some() {
            self.version += 1;
        }
    }

    /// A bound reservation pod holds its GPU on the node until the kubelet has released it,
    /// which is when the pod is gone (it is deleted gracefully, so the kubelet removes it
    /// after stopping it). The core sees it as Releasing and requesting nothing: fractions
    /// may join its GPU, but a whole-GPU bind onto that GPU waits (pipelined) until it is
    /// gone, so the kubelet is never asked for a device it still holds.
    fn hold_reserved_gpu(&mut self, k: &str, c: &CachedPod) {
        let holds = c.input.node.is_some() && !c.terminal && !c.input.gpu_indices.is_empty();
        if holds {
            let ghost = PodInput {
                namespace: c.input.namespace.clone(),
                name: c.input.name.clone(),
                node: c.input.node.clone(),
                gpu_indices: c.input.gpu_indices.clone(),
                gpu_uuids: c.reserved_uuid.clone().into_iter().collect(),
                reservation: true,
                phase: PodPhase::Running,
                creation: c.input.creation,
                releasing: true,
                ..PodInput::default()
            };
            self.pods.upsert(&mut self.input.pods, k, ghost);
            self.version += 1;
        } else if self.pods.remove(&mut self.input.pods, k).is_some() {
            self.version += 1;
        }
    }

    /// Put a pod into the core's input, or take it out, from its current state.
    fn place_pod(&mut self, k: &str) {
        let Some(c) = self.meta.get(k) else { return };
        let mut input = c.input.clone();
        if let Some(a) = self.assumed.get(k) {
            input.phase = PodPhase::Running;
            input.node = Some(a.node.clone());
            input.gpu_indices = a.gpu_indices.clone();
        }
        let bound = input.node.is_some();
        // Bound and terminating (deleted, or evicted by us): KAI's Releasing.
        input.releasing = bound && c.terminating;
        let eligible = if bound {
            true
        } else if c.ours && c.problem.is_none() && !c.terminating && !input.pod_group.is_empty() {
            let gk = key(&input.namespace, &input.pod_group);
            let known = self.groups.index.contains_key(&gk);
            if !known {
                self.awaiting_group
                    .entry(gk)
                    .or_default()
                    .insert(k.to_string());
            }
            known
        } else {
            false
        };
        if eligible {
            if !c.ours {
                input.pod_group.clear(); // foreign: holds capacity, never scheduled
            }
            self.pods.upsert(&mut self.input.pods, k, input);
        } else {
            self.pods.remove(&mut self.input.pods, k);
        }
    }

    /// Drop a pod from the pods waiting for `group` (it left, or names another group now).
    fn unawait(&mut self, k: &str, namespace: &str, group: &str) {
        if group.is_empty() {
            return;
        }
        let gk = key(namespace, group);
        if let Some(waiting) = self.awaiting_group.get_mut(&gk) {
            waiting.remove(k);
            if waiting.is_empty() {
                self.awaiting_group.remove(&gk);
            }
        }
    }

    /// The pod grouper annotated the pod: use it before the watch echoes it.
    pub fn set_pod_group(&mut self, k: &str, group: &str) {
        let Some(m) = self.meta.get_mut(k) else {
            return;
        };
        if m.input.pod_group.is_empty() {
            m.input.pod_group = group.to_string();
            self.ungrouped.remove(k);
            self.place_pod(k);
            self.version += 1;
        }
    }

    /// Record a bind in flight: the pod counts as placed until the watch confirms or the
    /// binder gives up.
    pub fn assume(&mut self, k: &str, a: Assumed) {
        if let Some(p) = self.pods.get_mut(&mut self.input.pods, k) {
            p.phase = PodPhase::Running;
            p.node = Some(a.node.clone());
            p.gpu_indices = a.gpu_indices.clone();
        }
        if let Some(m) = self.meta.get_mut(k)
            && m.input.node.is_none()
        {
            // Keep the indices for when the watch brings the bound pod without them.
            m.input.gpu_indices = a.gpu_indices.clone();
        }
        self.assumed.insert(k.to_string(), a);
        self.version += 1;
    }

    /// The binder failed: the pod is pending again.
    pub fn forget(&mut self, k: &str) {
        if self.assumed.remove(k).is_some() {
            if let Some(m) = self.meta.get_mut(k)
                && m.input.node.is_none()
            {
                m.input.gpu_indices.clear();
            }
            self.place_pod(k);
            self.version += 1;
        }
    }

    /// An evicted pod is Releasing at once (its deletion arrives later): what it holds is
    /// placed onto, but binds there wait until it is gone.
    pub fn evicted(&mut self, k: &str) {
        if let Some(m) = self.meta.get_mut(k) {
            m.terminating = true;
        }
        self.place_pod(k);
        self.version += 1;
    }

    /// Bound pods with known GPU indices first, so that running pods without indices (bound
    /// by someone else, or whole-GPU pods from before a restart) fill the remaining devices.
    pub fn settle_order(&mut self) {
        self.pods
            .reorder(&mut self.input.pods, |p| !p.gpu_indices.is_empty());
    }

    /// Pods in a GPU group that hold or are about to hold it.
    pub fn group_tenants(&self, group: &str) -> usize {
        let bound = self
            .meta
            .values()
            .filter(|m| {
                m.gpu_group.as_deref() == Some(group) && m.input.node.is_some() && !m.terminal
            })
            .count();
        let flying = self
            .assumed
            .values()
            .filter(|a| a.groups.iter().any(|g| g == group))
            .count();
        bound + flying
    }

    /// Pods with a problem the scheduler cannot schedule around (reported as Events).
    pub fn problems(&self) -> impl Iterator<Item = (&str, &CachedPod, &str)> {
        self.meta.iter().filter_map(|(k, c)| {
            let p = c.problem.as_deref()?;
            (c.ours && c.input.node.is_none()).then_some((k.as_str(), c, p))
        })
    }

    pub fn pod_count(&self) -> usize {
        self.input.pods.len()
    }
}

#[cfg(test)]
mod tests;
