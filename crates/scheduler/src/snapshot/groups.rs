//! The parts of a snapshot build that lay out groups and queues: pods in group and task
//! order, MIG slice counts, and the queue tree.

use super::model::{PodId, Queue, QueueId, Snapshot, Span};
use crate::input::ClusterInput;
use gantry_api::names;
use std::collections::HashMap;

/// Lay out every group's pods in one array (counting sort by group, pod ids ascending
/// within a group), then put each group's pods in task order.
pub(super) fn group_pods(s: &mut Snapshot<'_>) {
    let mut end = vec![0u32; s.groups.len() + 1];
    for p in &s.pods {
        end[p.group as usize + 1] += 1;
    }
    for g in 0..s.groups.len() {
        end[g + 1] += end[g];
    }
    let mut next = end.clone();
    let mut flat = vec![0 as PodId; s.pods.len()];
    for (id, p) in s.pods.iter().enumerate() {
        let slot = &mut next[p.group as usize];
        flat[*slot as usize] = id as PodId;
        *slot += 1;
    }
    let pods = &s.pods;
    for (g, grp) in s.groups.iter_mut().enumerate() {
        grp.pods = Span {
            start: end[g],
            end: end[g + 1],
        };
        let slice = &mut flat[grp.pods.range()];
        if slice.len() > 1 {
            slice.sort_by(|&a, &b| {
                let (pa, pb) = (&pods[a as usize], &pods[b as usize]);
                pb.task_priority
                    .cmp(&pa.task_priority)
                    .then(pa.creation.cmp(&pb.creation))
                    .then(pa.name.cmp(pb.name))
            });
        }
    }
    s.group_pods = flat;
}

/// `nvidia.com/mig-3g.40gb` -> 3.
pub(super) fn mig_slices(name: &str) -> u32 {
    let rest = name
        .strip_prefix(names::RESOURCE_MIG_PREFIX)
        .unwrap_or(name);
    rest.split('g')
        .next()
        .and_then(|g| g.parse().ok())
        .unwrap_or(1)
}

pub(super) fn build_queues(input: &ClusterInput, s: &mut Snapshot<'_>) {
    let mut ids: HashMap<&str, QueueId> = HashMap::new();
    for q in &input.queues {
        if ids.contains_key(q.name.as_str()) {
            s.issues
                .push(format!("queue {}: duplicate, later entry ignored", q.name));
            continue;
        }
        ids.insert(&q.name, s.queues.len() as QueueId);
        let conv = |r: &crate::input::QueueResourceInput, scale: f64| -> [f64; 3] {
            let f = |v: f64| if v < 0.0 { -1.0 } else { v * scale };
            [f(r.quota), f(r.limit), r.over_quota_weight.max(0.0)]
        };
        let per = [conv(&q.gpu, 1.0), conv(&q.cpu, 1.0), conv(&q.memory, 1e6)];
        s.queues.push(Queue {
            name: q.name.clone(),
            parent: None,
            children: Vec::new(),
            priority: q.priority.unwrap_or(100),
            quota: [per[0][0], per[1][0], per[2][0]],
            limit: [per[0][1], per[1][1], per[2][1]],
            weight: [per[0][2], per[1][2], per[2][2]],
            creation: q.creation,
            usage: q.usage,
            preempt_min_runtime: q.preempt_min_runtime,
            reclaim_min_runtime: q.reclaim_min_runtime,
        });
    }
    for q in &input.queues {
        let Some(&id) = ids.get(q.name.as_str()) else {
            continue;
        };
        if let Some(parent) = &q.parent {
            match ids.get(parent.as_str()) {
                Some(&p) if p != id => s.queues[id as usize].parent = Some(p),
                _ => s.issues.push(format!(
                    "queue {}: parent queue {parent} does not exist (treated as top level)",
                    q.name
                )),
            }
        }
    }
    // Break cycles: a queue whose ancestry loops becomes top level.
    for id in 0..s.queues.len() {
        let mut seen = vec![false; s.queues.len()];
        let mut cur = Some(id as QueueId);
        while let Some(c) = cur {
            if seen[c as usize] {
                s.issues.push(format!(
                    "queue {}: parent chain has a cycle (treated as top level)",
                    s.queues[id].name
                ));
                s.queues[id].parent = None;
                break;
            }
            seen[c as usize] = true;
            cur = s.queues[c as usize].parent;
        }
    }
    for id in 0..s.queues.len() {
        if let Some(p) = s.queues[id].parent {
            s.queues[p as usize].children.push(id as QueueId);
        }
    }
}
