//! Scenarios from KAI's documented behaviour, each run through a full cycle.

use crate::common;
use common::*;
use gantry_api::names;
use gantry_scheduler::input::*;
use gantry_scheduler::{Config, Decisions, EvictReason, GpuBinding, Snapshot, schedule};
use std::collections::BTreeSet;

fn run(input: &ClusterInput) -> Decisions {
    schedule(&Snapshot::build(input), &Config::default())
}

fn two_queue_cluster() -> ClusterInput {
    ClusterInput {
        nodes: vec![gpu_node("n0", 8)],
        queues: vec![
            queue("a", None, 4.0, -1.0, 1.0),
            queue("b", None, 4.0, -1.0, 1.0),
        ],
        ..Default::default()
    }
}

mod demo;
mod placement;
mod queues;
mod sharing;
