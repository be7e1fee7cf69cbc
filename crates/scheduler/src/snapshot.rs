//! The indexed, immutable model one cycle works on. Everything refers to everything else by
//! dense `u32` ids; strings are only kept for output and are borrowed from the cache
//! (`ClusterInput`), so building a snapshot copies no names. Built once per cycle.

use crate::input::{ClusterInput, NodeInput, PodInput, PodPhase};
use crate::request::{GpuRequest, gpu_memory_mib, memory_to_milli, parse_gpu_request};
use gantry_api::names;
use std::borrow::Cow;

pub(crate) mod devices;
mod gpu_idx;
mod groups;
pub use gpu_idx::GpuIdx;
mod index;
mod model;
#[cfg(test)]
mod tests;
use groups::{build_queues, group_pods, mig_slices};
pub use index::{FastHasher, FastMap};
use index::{GroupIndex, fast_map};
pub use model::*;

impl<'a> Snapshot<'a> {
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
