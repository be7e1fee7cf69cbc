//! Arrival replay: pods arrive one by one and are placed (or not) with a policy, until the
//! GPU requested reaches the cluster's capacity. Measures how much GPU is left unusable.

use gantry_scheduler::config::Config;
use gantry_scheduler::input::{
    ClusterInput, NodeInput, PodGroupInput, PodInput, QueueInput, QueueResourceInput,
};
use gantry_scheduler::placement::Placer;
use gantry_scheduler::snapshot::{GPU, PodId, Snapshot};
use gantry_scheduler::state::State;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayFigures {
    pub arrived: usize,
    pub placed: usize,
    pub elapsed: Duration,
    /// Share of GPU capacity allocated when the first pod did not fit.
    pub alloc_at_first_fail: Option<f64>,
    /// Unallocated share of GPU capacity when 90 %, 95 %, 100 % of it had been requested.
    pub unalloc_at: [Option<f64>; 3],
}

pub const THRESHOLDS: [f64; 3] = [0.90, 0.95, 1.00];

/// The replay cluster: one unlimited queue, a one-pod job per arrival.
pub fn replay_input(nodes: &[NodeInput], arrivals: &[PodInput]) -> ClusterInput {
    let any = QueueResourceInput {
        quota: -1.0,
        limit: -1.0,
        over_quota_weight: 1.0,
    };
    let queue = QueueInput {
        name: "replay".into(),
        gpu: any,
        cpu: any,
        memory: any,
        ..Default::default()
    };
    let mut pods = arrivals.to_vec();
    let mut groups = Vec::with_capacity(pods.len());
    for (i, p) in pods.iter_mut().enumerate() {
        p.namespace = "replay".into();
        p.name = format!("a{i:07}-{}", p.name);
        p.pod_group = p.name.clone();
        p.phase = gantry_scheduler::input::PodPhase::Pending;
        p.node = None;
        groups.push(PodGroupInput {
            namespace: "replay".into(),
            name: p.name.clone(),
            queue: "replay".into(),
            ..Default::default()
        });
    }
    ClusterInput {
        now: 0,
        nodes: nodes.to_vec(),
        queues: vec![queue],
        pod_groups: groups,
        pods,
        topologies: Vec::new(),
    }
}

pub fn replay(s: &Snapshot<'_>, cfg: &Config) -> ReplayFigures {
    let mut issues = Vec::new();
    let mut st = State::new(s, &mut issues);
    let mut placer = Placer::new(s, cfg);
    let capacity: i64 = s
        .nodes
        .iter()
        .filter(|n| n.schedulable)
        .map(|n| i64::from(n.gpus) * 1000)
        .sum();
    let mut out = ReplayFigures::default();
    if capacity == 0 {
        return out;
    }
    let cap = capacity as f64;
    let (mut requested, mut allocated) = (0i64, 0i64);
    let start = Instant::now();
    for pod in 0..s.pods.len() as PodId {
        let p = &s.pods[pod as usize];
        if p.invalid.is_some() {
            continue;
        }
        out.arrived += 1;
        requested += p.res.0[GPU];
        match placer.place(s, &st, pod) {
            Some(pl) => {
                st.apply(s, pod, pl);
                allocated += p.res.0[GPU];
                out.placed += 1;
            }
            None => {
                out.alloc_at_first_fail
                    .get_or_insert(allocated as f64 / cap);
            }
        }
        for (i, t) in THRESHOLDS.iter().enumerate() {
            if out.unalloc_at[i].is_none() && requested as f64 >= t * cap {
                out.unalloc_at[i] = Some(1.0 - allocated as f64 / cap);
            }
        }
        if out.unalloc_at[2].is_some() {
            break;
        }
    }
    out.elapsed = start.elapsed();
    out
}
