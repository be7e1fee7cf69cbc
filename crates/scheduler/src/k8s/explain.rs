//! `gantry explain pod NS/NAME`: why a pod is where it is — its queue with fair share and
//! usage, the reason the last cycle gives, and why each node was rejected. Reads the cluster
//! once, fills a cache the way the scheduler does and asks the pure core.
//!
//! `gantry explain queues`: the queue tree with what the scheduler last published in each
//! Queue's status (fair share, deserved, allocated, requested, child queues).

use super::cache::Cache;
use crate::decisions::NodeReason;
use crate::predicates::static_check;
use crate::sharing::can_fit_gpu;
use crate::snapshot::{CPU, MEM, PodId, Snapshot};
use crate::state::State;
use gantry_api::kai::{PodGroup, Queue, Topology};
use gantry_api::lenient::Lenient;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams};
use std::fmt::Write;

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("reading {what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("pod {0} not found")]
    NotFound(String),
}

/// Why `pod` cannot go to each node right now (`Ok` = it fits).
pub fn node_verdicts(
    s: &Snapshot<'_>,
    st: &State,
    pod: PodId,
) -> Vec<(String, Result<(), NodeReason>)> {
    let p = &s.pods[pod as usize];
    let class = &s.classes[p.class as usize];
    s.nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let v = static_check(n, class).and_then(|_| {
                if st.free_cpu[i] < p.res.0[CPU] {
                    Err(NodeReason::InsufficientCpu)
                } else if st.free_mem[i] < p.res.0[MEM] {
                    Err(NodeReason::InsufficientMemory)
                } else if st.free_pods[i] < 1 {
                    Err(NodeReason::TooManyPods)
                } else {
                    can_fit_gpu(s, st, i as u32, &p.gpu)
                }
            });
            (n.name.to_string(), v)
        })
        .collect()
}

fn fmt3(v: [f64; 3]) -> String {
    format!(
        "gpu {:.2}, cpu {:.0}m, memory {:.2} GiB",
        v[0],
        v[1],
        v[2] / (1u64 << 30) as f64
    )
}

/// The report for one pod, as text.
pub fn explain_pod<'a>(
    client: &'a kube::Client,
    namespace: &'a str,
    name: &'a str,
    scheduler_name: &'a str,
    reservation_ns: &'a str,
) -> futures::future::BoxFuture<'a, Result<String, ExplainError>> {
    Box::pin(explain_pod_inner(
        client,
        namespace,
        name,
        scheduler_name,
        reservation_ns,
    ))
}

async fn explain_pod_inner(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    scheduler_name: &str,
    reservation_ns: &str,
) -> Result<String, ExplainError> {
    let err = |what: &str| {
        let what = what.to_string();
        move |source| ExplainError::Api { what, source }
    };
    let lp = ListParams::default();
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(err("the pod"))?
        .ok_or_else(|| ExplainError::NotFound(format!("{namespace}/{name}")))?;
    let mut cache = Cache::new(scheduler_name, reservation_ns);
    for pc in Api::<PriorityClass>::all(client.clone())
        .list(&lp)
        .await
        .map_err(err("priority classes"))?
    {
        if let Some(n) = &pc.metadata.name {
            cache.apply_priority_class(n, pc.value);
        }
    }
    for n in Api::<Node>::all(client.clone())
        .list(&lp)
        .await
        .map_err(err("nodes"))?
    {
        cache.apply_node(&n);
    }
    // Missing CRDs simply mean no queues / groups.
    if let Ok(qs) = Api::<Queue>::all(client.clone()).list(&lp).await {
        for q in qs {
            cache.apply_queue(&q);
        }
    }
    if let Ok(ts) = Api::<Topology>::all(client.clone()).list(&lp).await {
        for t in ts {
            cache.apply_topology(&t);
        }
    }
    if let Ok(gs) = Api::<PodGroup>::all(client.clone()).list(&lp).await {
        for g in gs {
            cache.apply_pod_group(&g);
        }
    }
    for p in Api::<Lenient<Pod>>::all(client.clone())
        .list(&lp)
        .await
        .map_err(err("pods"))?
        .into_iter()
        .filter_map(Lenient::salvaged)
    {
        cache.apply_pod(&p);
    }
    cache.settle_order();
    cache.input.now = chrono::Utc::now().timestamp();
    let k = super::cache::key(namespace, name);
    let mut out = String::new();
    let _ = writeln!(out, "Pod:        {namespace}/{name}");
    let meta = cache.meta.get(&k);
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let sched = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_default();
    if sched != scheduler_name {
        let _ = writeln!(
            out,
            "Scheduler:  {sched} (not {scheduler_name}: this scheduler ignores the pod)"
        );
    }
    if let Some(n) = &bound {
        let _ = writeln!(out, "Node:       {n} (bound)");
    }
    let group = meta.and_then(|m| cache.pod_group(namespace, &m.input.pod_group));
    match (meta, group) {
        (Some(m), None) if m.input.pod_group.is_empty() => {
            let _ = writeln!(out, "PodGroup:   none yet (the pod grouper creates one)");
        }
        (Some(m), None) => {
            let _ = writeln!(out, "PodGroup:   {} (does not exist)", m.input.pod_group);
        }
        (_, Some(g)) => {
            let _ = writeln!(
                out,
                "PodGroup:   {} (minMember {}, priority {}, {})",
                g.name,
                g.min_member.unwrap_or(1),
                g.priority.unwrap_or(50),
                if g.preemptible == Some(false) {
                    "non-preemptible"
                } else {
                    "preemptible"
                }
            );
        }
        _ => {}
    }
    if let Some(p) = meta.and_then(|m| m.problem.as_deref()) {
        let _ = writeln!(out, "Problem:    {p}");
    }
    let snap = Snapshot::build(&cache.input);
    let decisions = crate::schedule(&snap, &crate::Config::default());
    if let Some(g) = group {
        match decisions.queues.iter().find(|q| q.name == g.queue) {
            Some(q) => {
                let _ = writeln!(out, "Queue:      {}", q.name);
                let _ = writeln!(out, "  deserved:   {}", fmt3(q.deserved));
                let _ = writeln!(out, "  fair share: {}", fmt3(q.fair_share));
                let _ = writeln!(out, "  allocated:  {}", fmt3(q.allocated));
                let _ = writeln!(out, "  requested:  {}", fmt3(q.requested));
            }
            None => {
                let _ = writeln!(
                    out,
                    "Queue:      {} (does not exist or is not a leaf queue)",
                    g.queue
                );
            }
        }
    }
    if let Some(u) = decisions
        .unschedulable
        .iter()
        .find(|u| u.namespace == namespace && u.name == name)
    {
        let _ = writeln!(out, "Pending:    {}", u.message);
    } else if decisions
        .binds
        .iter()
        .any(|b| b.namespace == namespace && b.name == name)
    {
        let _ = writeln!(out, "Pending:    no: the next cycle binds it");
    }
    if bound.is_none()
        && let Some(id) = snap.pod_by_name(namespace, name)
    {
        let mut issues = Vec::new();
        let st = State::new(&snap, &mut issues);
        out.push_str(&topology_report(&snap, &st, id));
        let _ = writeln!(out, "Nodes:");
        for (n, v) in node_verdicts(&snap, &st, id) {
            match v {
                Ok(()) => {
                    let _ = writeln!(out, "  {n}: fits");
                }
                Err(r) => {
                    let _ = writeln!(out, "  {n}: {r}");
                }
            }
        }
    }
    let evs = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut evs: Vec<&Event> = evs
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .collect();
    evs.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
    if !evs.is_empty() {
        let _ = writeln!(out, "Events:");
        for e in evs.iter().rev().take(5).rev() {
            let _ = writeln!(
                out,
                "  {} {}: {}",
                e.type_.as_deref().unwrap_or(""),
                e.reason.as_deref().unwrap_or(""),
                e.message.as_deref().unwrap_or("")
            );
        }
    }
    Ok(out)
}

/// The pod's job's topology constraint and what it allows now: the domains that hold the
/// job's pending pods, or the level that cannot be satisfied. Empty without a constraint.
pub fn topology_report(s: &Snapshot<'_>, st: &State, pod: PodId) -> String {
    let g = s.pods[pod as usize].group;
    let Some(c) = s.groups[g as usize].topology else {
        return String::new();
    };
    let mut out = String::new();
    let level = |l: &Option<String>| l.as_deref().unwrap_or("-").to_string();
    let _ = writeln!(
        out,
        "Topology:   {} (required {}, preferred {})",
        c.topology,
        level(&c.required),
        level(&c.preferred)
    );
    let pending: Vec<PodId> = s
        .pods_of(g)
        .iter()
        .copied()
        .filter(|&p| st.placement[p as usize].is_none() && !s.pods[p as usize].running)
        .collect();
    match crate::topology::plan(s, st, g, &pending) {
        crate::topology::Plan::Any => {}
        crate::topology::Plan::Unsatisfiable(why) => {
            let _ = writeln!(out, "  cannot be satisfied: {why}");
        }
        crate::topology::Plan::Domains(a) => {
            let what: Vec<&str> = a.iter().map(|a| a.what.as_str()).collect();
            let _ = writeln!(
                out,
                "  domains with room for its {} pending pods, in the order tried: {}",
                pending.len(),
                what.join(", ")
            );
        }
    }
    out
}

fn gpus(
    m: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> String {
    m.and_then(|m| m.get(gantry_api::names::RESOURCE_GPU))
        .and_then(|q| gantry_k8s_rules::quantity::parse_f64(&q.0).ok())
        .map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// The queue tree as a table (GPUs; `-` where the scheduler has not written the status
/// yet). Children are indented under their parent; a queue whose parent does not exist is
/// listed at the top level and marked.
pub fn queue_table(queues: &[Queue]) -> String {
    use std::collections::BTreeMap;
    let name = |q: &Queue| q.metadata.name.clone().unwrap_or_default();
    let by_name: BTreeMap<String, &Queue> = queues.iter().map(|q| (name(q), q)).collect();
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut roots = Vec::new();
    for (n, q) in &by_name {
        match q.spec.parent() {
            Some(p) if by_name.contains_key(p) => children.entry(p).or_default().push(n),
            _ => roots.push(n.as_str()),
        }
    }
    let mut rows = vec![
        [
            "QUEUE",
            "PRIORITY",
            "QUOTA",
            "DESERVED",
            "FAIR SHARE",
            "ALLOCATED",
            "REQUESTED",
            "CHILDREN",
        ]
        .map(str::to_string),
    ];
    let mut stack: Vec<(&str, usize)> = roots.iter().rev().map(|r| (*r, 0)).collect();
    while let Some((n, depth)) = stack.pop() {
        let q = by_name[n];
        let st = q.status.as_ref();
        let quota = match q
            .spec
            .resource(gantry_api::kai::QueueResourceKind::Gpu)
            .quota
        {
            gantry_api::kai::Quota::AllAvailable => "all".to_string(),
            gantry_api::kai::Quota::Amount(v) => format!("{v:.2}"),
        };
        let orphan = match q.spec.parent() {
            Some(p) if !by_name.contains_key(p) => format!(" (parent {p} missing)"),
            _ => String::new(),
        };
        rows.push([
            format!("{}{n}{orphan}", "  ".repeat(depth)),
            q.spec.priority().to_string(),
            quota,
            gpus(st.and_then(|s| s.deserved.as_ref())),
            gpus(st.and_then(|s| s.fair_share.as_ref())),
            gpus(st.and_then(|s| s.allocated.as_ref())),
            gpus(st.and_then(|s| s.requested.as_ref())),
            st.and_then(|s| s.child_queues.as_ref())
                .filter(|c| !c.is_empty())
                .map_or_else(|| "-".to_string(), |c| c.join(",")),
        ]);
        for c in children.get(n).into_iter().flatten().rev() {
            stack.push((*c, depth + 1));
        }
    }
    let widths: Vec<usize> = (0..8)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::from(
        "Queues (GPUs; fair share, deserved, allocated and requested as the scheduler last wrote them):\n",
    );
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| match i {
                0 | 7 => format!("{c:<w$}"),
                _ => format!("{c:>w$}"),
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// `gantry explain queues`.
pub fn explain_queues<'a>(
    client: &'a kube::Client,
) -> futures::future::BoxFuture<'a, Result<String, ExplainError>> {
    Box::pin(explain_queues_inner(client))
}

async fn explain_queues_inner(client: &kube::Client) -> Result<String, ExplainError> {
    let queues = Api::<Queue>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| ExplainError::Api {
            what: "queues".into(),
            source,
        })?;
    Ok(queue_table(&queues.items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn queue_table_shows_the_tree_and_the_published_figures() {
        let q = |v: serde_json::Value| serde_json::from_value::<Queue>(v).unwrap();
        let queues = vec![
            q(
                json!({"metadata": {"name": "team-b"}, "spec": {"parentQueue": "root",
                "resources": {"gpu": {"quota": 8}}}}),
            ),
            q(
                json!({"metadata": {"name": "root"}, "spec": {"resources": {"gpu": {"quota": -1}}},
                "status": {"childQueues": ["team-a", "team-b"], "allocated": {"nvidia.com/gpu": "12"}}}),
            ),
            q(
                json!({"metadata": {"name": "team-a"}, "spec": {"parentQueue": "root",
                "resources": {"gpu": {"quota": 4}}},
                "status": {"fairShare": {"nvidia.com/gpu": "6.500"}, "allocated": {"nvidia.com/gpu": "4"},
                           "deserved": {"nvidia.com/gpu": "4"}, "requested": {"nvidia.com/gpu": "10"}}}),
            ),
            q(json!({"metadata": {"name": "lost"}, "spec": {"parentQueue": "gone"}})),
        ];
        let t = queue_table(&queues);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].starts_with("QUEUE"), "{t}");
        let rows = [
            "lost (parent gone missing)",
            "root ",
            "  team-a",
            "  team-b",
        ]
        .map(|n| lines.iter().position(|l| l.starts_with(n)));
        assert_eq!(rows, [2, 3, 4, 5].map(Some), "the tree, in order: {t}");
        let team_a = lines.iter().find(|l| l.contains("team-a ")).unwrap();
        let cols: Vec<&str> = team_a.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "team-a", "100", "4.00", "4.00", "6.50", "4.00", "10.00", "-"
            ],
            "{t}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("root") && l.ends_with("team-a,team-b")),
            "{t}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("team-b") && l.contains("8.00")),
            "{t}"
        );
    }
}
