//! The index of nodes by free GPU that binpack and the fraction paths walk instead of every
//! node: kept in step with the state's change log, one node at a time.

use super::choose::{Best, Order};
use super::scorers::{Kai, KaiKey};
use crate::request::GpuRequest;
use crate::snapshot::NodeId;
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet};

/// Nodes ordered by (free GPU milli, seeded rank): binpack's best node for a GPU pod is the
/// first one in this order that fits. `shared` holds nodes with a partly used shared GPU.
/// (free GPU milli, seeded rank, node).
pub(super) type Entry = (i64, u32, NodeId);

/// How a node is filed in the index: free milli, partly used shared device, idle devices,
/// most free milli on one shared device, most free milli on one device that is not whole.
type IndexKey = (i64, bool, u16, u32, u32);

#[derive(Default)]
pub(super) struct GpuIndex {
    pub(super) all: BTreeSet<Entry>,
    pub(super) shared: BTreeSet<Entry>,
    /// The same nodes split by what can fit at all, so a pod only walks nodes that might
    /// take it instead of every node whose free GPU is scattered: by idle device count
    /// (whole GPUs), by most free milli on one shared device (`shared` nodes, fractions
    /// joining a share) and by most free milli on one device (fractions).
    pub(super) by_idle: Vec<BTreeSet<Entry>>,
    pub(super) by_shared_free: BTreeMap<u32, BTreeSet<Entry>>,
    pub(super) by_device_free: BTreeMap<u32, BTreeSet<Entry>>,
    key: Vec<Option<IndexKey>>,
    cursor: usize,
}

fn bucket_remove(map: &mut BTreeMap<u32, BTreeSet<Entry>>, k: u32, e: &Entry) {
    if let Some(set) = map.get_mut(&k) {
        set.remove(e);
        if set.is_empty() {
            map.remove(&k);
        }
    }
}

impl GpuIndex {
    /// Offer KAI's binpack choice for a GPU pod the candidates in the scorer's order (least
    /// free GPU, then seeded rank), only from the buckets that can hold the request, so
    /// the choice is the same as scanning every node: whole GPUs walk the nodes with
    /// enough idle devices; a share walks nodes whose shared device takes it (KAI's
    /// sharing bonus) and only then nodes with a device that takes it; a memory share,
    /// whose size depends on the node, walks shared nodes that take it, then all nodes.
    pub(super) fn offer(
        &self,
        best: &mut Best<KaiKey>,
        kai: &mut Kai<'_, '_>,
        rank: &[u32],
        req: &GpuRequest,
        eligible: &impl Fn(NodeId) -> bool,
    ) {
        let from = (
            match req {
                GpuRequest::Whole(k) => i64::from(*k) * 1000,
                _ => 1,
            },
            0u32,
            0 as NodeId,
        );
        let walk = |best: &mut Best<KaiKey>,
                    kai: &mut Kai<'_, '_>,
                    set: &BTreeSet<Entry>,
                    ok: &dyn Fn(NodeId) -> bool| {
            let nodes = set.range(from..).map(|e| e.2).filter(|&n| ok(n));
            best.offer(kai, rank, nodes, Order::BestFirst);
        };
        match *req {
            // Nodes with fewer than k idle devices never fit.
            GpuRequest::Whole(k) => {
                for set in self.by_idle.iter().skip(k as usize) {
                    walk(best, kai, set, eligible);
                }
            }
            // A share fits only where one device (shared, for the bonus) has `milli` free.
            GpuRequest::Fraction { milli, .. } => {
                for set in self.by_shared_free.range(milli..).map(|(_, set)| set) {
                    walk(best, kai, set, eligible);
                }
                if !best.found() {
                    for set in self.by_device_free.range(milli..).map(|(_, set)| set) {
                        walk(best, kai, set, eligible);
                    }
                }
            }
            _ => {
                let view = *kai;
                walk(best, kai, &self.shared, &|n| eligible(n) && view.bonus(n));
                if !best.found() {
                    walk(best, kai, &self.all, eligible);
                }
            }
        }
    }

    pub(super) fn sync(&mut self, st: &State, rank: &[u32]) {
        if self.key.len() != st.free_gpu.len() {
            self.key = vec![None; st.free_gpu.len()];
            self.all.clear();
            self.shared.clear();
            self.by_idle.clear();
            self.by_shared_free.clear();
            self.by_device_free.clear();
            self.cursor = 0;
            for n in 0..st.free_gpu.len() as NodeId {
                self.update(st, rank, n);
            }
            self.cursor = st.changes.len();
        }
        if self.cursor > st.changes.len() {
            self.cursor = 0;
        }
        while self.cursor < st.changes.len() {
            let n = st.changes[self.cursor];
            self.cursor += 1;
            self.update(st, rank, n);
        }
    }
    fn update(&mut self, st: &State, rank: &[u32], n: NodeId) {
        let r = rank[n as usize];
        if let Some((free, shared, idle, shared_free, device_free)) = self.key[n as usize].take() {
            let e = (free, r, n);
            self.all.remove(&e);
            if shared {
                self.shared.remove(&e);
                bucket_remove(&mut self.by_shared_free, shared_free, &e);
            }
            if let Some(set) = self.by_idle.get_mut(usize::from(idle)) {
                set.remove(&e);
            }
            bucket_remove(&mut self.by_device_free, device_free, &e);
        }
        let free = st.free_gpu[n as usize];
        let e = (free, r, n);
        let (mut shared_free, mut device_free) = (0u32, 0u32);
        for g in st.node_gpus(n).iter().filter(|g| !g.whole) {
            device_free = device_free.max(g.free_milli());
            if g.shared_pods > 0 {
                shared_free = shared_free.max(g.free_milli());
            }
        }
        let shared = shared_free > 0;
        let idle = st.idle_gpus[n as usize];
        self.all.insert(e);
        if shared {
            self.shared.insert(e);
            self.by_shared_free
                .entry(shared_free)
                .or_default()
                .insert(e);
        }
        if self.by_idle.len() <= usize::from(idle) {
            self.by_idle
                .resize_with(usize::from(idle) + 1, BTreeSet::new);
        }
        self.by_idle[usize::from(idle)].insert(e);
        self.by_device_free
            .entry(device_free)
            .or_default()
            .insert(e);
        self.key[n as usize] = Some((free, shared, idle, shared_free, device_free));
    }
}
