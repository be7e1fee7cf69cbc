//! Gantry's fragmentation measure: the free GPU of a node expected to stay unused while the
//! workload keeps arriving.
//!
//! FGD counts a device's free milli as lost in proportion to the share of the mix that
//! cannot use it: the chance that the *next* pod cannot. That says nothing of what a pod
//! that does fit leaves behind: 320 milli placed beside a 470 leaves 210 that almost nothing
//! fills, where beside a 650 it leaves 30. Here the device is followed through a stream of
//! arrivals drawn from the mix: one that can run on the node and fits the device takes its
//! milli there, one that cannot passes by, and after each arrival the stream ends with
//! probability `1 / (1 + FILL_HORIZON)`. What is free when it ends is the device's expected
//! waste. One table per set of types that can run on a node maps a device's free milli to
//! that expectation; tables are built once per set and kept.
//!
//! Two facts of the cluster enter as well. A type confined to some GPU models arrives at
//! their devices as often as its share of the workload over their share of the capacity
//! ([`TaskMix::set_reach`]), so a small pool that a constrained type depends on counts as
//! filling fast and unconstrained pods go elsewhere. And the tables ignore CPU: a node whose
//! free CPU cannot feed its free GPU at the runnable types' GPU-per-CPU rate wastes at least
//! the difference, so CPU taken beside free GPUs counts as the GPU it strands. The policy
//! also charges a pod for the GPU it takes from pods confined to the node's pool
//! ([`TaskMix::displaced`]).

use super::fgd::{ALL_TYPES, TaskMix, cpu_fits, gpu_fits, type_key};
use super::fill_tables::{FillTables, Table};
use super::model::{MILLI, NodeFree, PodShape};
use std::collections::{BTreeMap, HashMap};

/// Mean number of arrivals the measure follows a device through. Chosen on seeds 100-129 of
/// the published trace against the measure it replaced: 16 to 24 are lower on every trace,
/// 8 and 12 gain less, 32 and 64 lose on some (`docs/benchmarks.md`, issue 25).
pub const FILL_HORIZON: f64 = 20.0;

/// Whether a type could take GPU on the node: model, CPU (and memory where the mix looks at
/// it), and for a pod of several devices enough devices with its milli free. Whether one
/// device has room is the table's part.
fn can_run(t: &PodShape, n: &NodeFree, check_mem: bool) -> bool {
    t.wants_gpu()
        && t.models.allows(n.model)
        && cpu_fits(t, n, check_mem)
        && (t.num_gpu <= 1 || gpu_fits(t, n))
}

impl TaskMix {
    /// Gantry's mix from the pods a scheduler knows of and the cluster's nodes (GPU model,
    /// device count): every request type of `pods` (CPU-only ones included) with its share,
    /// and each type's reach over the nodes; empty when no pod asks for a GPU. The product
    /// builds it each cycle from the running and pending pods of its snapshot
    /// (`crate::frag::Mix`); the paper-protocol benchmark from the same pods as they arrive, or
    /// from the whole trace in advance.
    pub fn observed(pods: &[PodShape], nodes: impl IntoIterator<Item = (u8, u8)>) -> TaskMix {
        let mut count: HashMap<PodShape, u64> = HashMap::new();
        for p in pods {
            *count.entry(type_key(p, false)).or_default() += 1;
        }
        TaskMix::observed_counts(&count, nodes)
    }

    /// [`TaskMix::observed`] from the pods counted by type ([`type_key`] without memory).
    pub fn observed_counts(
        count: &HashMap<PodShape, u64>,
        nodes: impl IntoIterator<Item = (u8, u8)>,
    ) -> TaskMix {
        if !count.keys().any(PodShape::wants_gpu) {
            return TaskMix::default();
        }
        let mut mix = TaskMix::from_counts(count, ALL_TYPES, false);
        mix.set_reach(nodes);
        mix
    }

    /// Tells the measure where each type may run: `nodes` are the cluster's (GPU model,
    /// device count). A type confined to some models arrives at their devices as often as
    /// its share of the workload over their share of the capacity: a pool that a constrained
    /// type's whole demand falls on fills faster than the cluster at large, and a pod that
    /// could go anywhere is better placed elsewhere. Types that may use every model are
    /// unchanged, as is every type on a cluster of one model.
    pub fn set_reach(&mut self, nodes: impl IntoIterator<Item = (u8, u8)>) {
        // GPU counts are whole numbers: the sums are exact in any order.
        let mut by_model: BTreeMap<u8, f64> = BTreeMap::new();
        for (model, gpus) in nodes {
            *by_model.entry(model).or_default() += f64::from(gpus);
        }
        self.capacity = by_model;
        self.reach = self.types.iter().map(|t| self.reach_of(&t.shape)).collect();
        if self.reach.iter().all(|&r| r >= 1.0) {
            // No type is confined: nothing is ever displaced, and scoring skips that pass.
            self.capacity.clear();
        }
        self.fill = FillTables::default();
    }

    /// The share of the GPU capacity on models `p` may use (1 when unknown or none).
    fn reach_of(&self, p: &PodShape) -> f64 {
        let total: f64 = self.capacity.values().sum();
        let on: f64 = self
            .capacity
            .iter()
            .filter(|(m, _)| p.models.allows(**m))
            .map(|(_, g)| g)
            .sum();
        if on > 0.0 { (on / total).min(1.0) } else { 1.0 }
    }

    /// The share of the arrivals at a `model` device that come from types confined to less
    /// of the cluster than `p`. Those have nowhere else to go: GPU that `p` takes there is, in
    /// that share, GPU one of them will not get (0 when no type is more confined, as on a
    /// cluster of one model or a workload without model constraints).
    pub fn displaced(&self, p: &PodShape, model: u8) -> f64 {
        if self.capacity.is_empty() {
            return 0.0;
        }
        let reach = self.reach_of(p);
        let (mut all, mut confined) = (0.0, 0.0);
        for (i, t) in self.types.iter().enumerate() {
            if t.shape.wants_gpu() && t.shape.models.allows(model) {
                let rate = t.weight / self.reach(i);
                all += rate;
                if self.reach(i) < reach {
                    confined += rate;
                }
            }
        }
        if all > 0.0 { confined / all } else { 0.0 }
    }

    /// Expected free milli of the node still unused when the arrivals stop (see the module
    /// comment); 0 for a node with no free GPU, all of it where no type can run.
    pub fn node_waste(&self, n: &NodeFree) -> f64 {
        if self.types.is_empty() {
            return n.gpu_free() as f64;
        }
        if n.gpu_free() == 0 {
            return 0.0;
        }
        // One pass over the types: which can run here (the table's key), and their CPU and
        // GPU per arrival (what the node's CPU can feed).
        let mut key = vec![0u64; self.types.len().div_ceil(64)].into_boxed_slice();
        let (mut cpu, mut gpu) = (0.0, 0.0);
        for (i, t) in self.types.iter().enumerate() {
            if can_run(&t.shape, n, self.check_mem) {
                key[i / 64] |= 1 << (i % 64);
                let rate = t.weight / self.reach(i);
                cpu += rate * t.shape.cpu as f64;
                gpu += rate * t.shape.gpu_total() as f64;
            }
        }
        // The tables fill each device as if CPU never ran out; a node whose CPU gives out
        // first wastes at least the GPU its free CPU cannot feed at the runnable types' rate.
        let cpu_stranded = if cpu > 0.0 {
            (n.gpu_free() as f64 - n.cpu as f64 * gpu / cpu).max(0.0)
        } else {
            0.0
        };
        let table = self.fill.get_or_build(key, |key| self.waste_table(key));
        let devices: f64 = n.gpus().iter().map(|&g| table[usize::from(g)]).sum();
        devices.max(cpu_stranded)
    }

    /// Type `i`'s share of the GPU capacity (1 when reach was not set).
    fn reach(&self, i: usize) -> f64 {
        self.reach.get(i).copied().unwrap_or(1.0)
    }

    /// Expected waste of one device by its free milli, when only the types in `runs` can
    /// take GPU: with `g` the chance the stream goes on after an arrival,
    /// `w(f) = (1 - g) f + g (sum over fitting types of weight * w(f - milli)
    ///                       + weight of the rest * w(f))`, solved for `w(f)` from 0 up.
    fn waste_table(&self, runs: &[u64]) -> Table {
        let g = FILL_HORIZON / (FILL_HORIZON + 1.0);
        // Types that differ only in CPU or models take the same milli: one item per size keeps
        // a table's cost to the sizes, however many types a varied workload has.
        let mut by_milli = vec![0.0f64; usize::from(MILLI) + 1];
        for (i, t) in self.types.iter().enumerate() {
            // A size above a whole device never fits one: no item.
            let size = by_milli.get_mut(usize::from(t.shape.milli));
            if let (true, Some(weight)) = (runs[i / 64] & (1 << (i % 64)) != 0, size) {
                *weight += t.weight / self.reach(i);
            }
        }
        let items: Vec<(usize, f64)> = (1..by_milli.len())
            .filter(|&m| by_milli[m] > 0.0)
            .map(|m| (m, by_milli[m]))
            .collect();
        let all: f64 = self.types.iter().map(|t| t.weight).sum();
        let mut w = vec![0.0f64; usize::from(MILLI) + 1];
        for f in 0..w.len() {
            let (mut next, mut fit) = (0.0, 0.0);
            for &(milli, weight) in &items {
                if milli <= f {
                    next += weight * w[f - milli];
                    fit += weight;
                }
            }
            w[f] = ((1.0 - g) * f as f64 + g * next) / (1.0 - g * (all - fit));
        }
        w.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpushare::fgd::tests::shape;
    use crate::gpushare::fgd::{ALL_TYPES, TaskType};
    use crate::gpushare::model::Models;
    use crate::gpushare::policy::SharePolicy;

    fn one(s: PodShape) -> TaskMix {
        TaskMix {
            types: vec![TaskType {
                shape: s,
                weight: 1.0,
            }],
            ..TaskMix::default()
        }
    }

    fn device(free: u16) -> NodeFree {
        let mut n = NodeFree::new(8000, 0, 0, 1);
        n.gpu[0] = free;
        n
    }

    #[test]
    fn one_type_fills_in_steps_until_it_no_longer_fits() {
        let mix = one(shape(1000, 1, 400));
        let g = FILL_HORIZON / (FILL_HORIZON + 1.0);
        // Below 400 nothing fits: all of it stays.
        assert_eq!(mix.node_waste(&device(399)), 399.0);
        // 1000 -> 600 -> 200 while the stream goes on.
        let w600 = (1.0 - g) * 600.0 + g * 200.0;
        let w1000 = (1.0 - g) * 1000.0 + g * w600;
        assert!((mix.node_waste(&device(600)) - w600).abs() < 1e-9);
        assert!((mix.node_waste(&device(1000)) - w1000).abs() < 1e-9);
        assert_eq!(mix.node_waste(&device(0)), 0.0);
    }

    #[test]
    fn types_of_one_size_fill_as_one() {
        // Two types that differ only in CPU, both able to run: the same as one type of that
        // size; on a node with CPU for one of them only, that one fills alone.
        let pods = [shape(1000, 1, 400), shape(6000, 1, 400)];
        let two = TaskMix::from_workload(&pods, ALL_TYPES, false);
        let one = one(shape(1000, 1, 400));
        let n = device(1000);
        assert!((two.node_waste(&n) - one.node_waste(&n)).abs() < 1e-9);
        let mut short = n;
        short.cpu = 2000;
        assert!(two.node_waste(&short) > one.node_waste(&short));
    }

    #[test]
    fn a_small_pool_that_a_constrained_type_needs_fills_faster() {
        let mut m = Models::default();
        let t4 = m.intern("T4").unwrap();
        let g2 = m.intern("G2").unwrap();
        let only = |name: &str| PodShape {
            models: m.set_of(&[name]),
            ..shape(1000, 1, MILLI)
        };
        // Half the pods go anywhere, a quarter need T4 (2 GPUs), a quarter G2 (64 GPUs).
        let pods = [
            shape(1000, 1, MILLI),
            shape(1000, 1, MILLI),
            only("T4"),
            only("G2"),
        ];
        let mut mix = TaskMix::from_workload(&pods, ALL_TYPES, false);
        let on = |model| NodeFree::new(8000, 0, model, 1);
        // Without the cluster's shape both pools look alike.
        assert!((mix.node_waste(&on(t4)) - mix.node_waste(&on(g2))).abs() < 1e-9);
        let mut nodes = vec![(t4, 2)];
        nodes.extend(std::iter::repeat_n((g2, 8), 8));
        mix.set_reach(nodes);
        // The T4 device will be taken by T4 pods: less is wasted there than on a G2 device,
        // so a pod that may go anywhere gains more by taking the G2 one.
        assert!(mix.node_waste(&on(t4)) < mix.node_waste(&on(g2)));
    }

    #[test]
    fn gpu_taken_from_a_pool_its_confined_pods_need_is_displaced() {
        let mut m = Models::default();
        let t4 = m.intern("T4").unwrap();
        let g2 = m.intern("G2").unwrap();
        let only_t4 = PodShape {
            models: m.set_of(&["T4"]),
            ..shape(1000, 1, MILLI)
        };
        let any = shape(1000, 1, MILLI);
        let mut mix = TaskMix::from_workload(&[any, any, only_t4], ALL_TYPES, false);
        // Not known where the models are: nothing is displaced.
        assert_eq!(mix.displaced(&any, t4), 0.0);
        mix.set_reach([(t4, 2), (g2, 62)]);
        // On T4, T4-only pods arrive at 1/3 / (2/64) against 2/3 for the rest.
        let share = (1.0 / 3.0 * 32.0) / (1.0 / 3.0 * 32.0 + 2.0 / 3.0);
        assert!((mix.displaced(&any, t4) - share).abs() < 1e-9);
        assert_eq!(mix.displaced(&any, g2), 0.0);
        // A T4-only pod displaces nobody: no type is more confined than it.
        assert_eq!(mix.displaced(&only_t4, t4), 0.0);
        // So a pod that may go anywhere scores the G2 device above the T4 one.
        let on = |model| NodeFree::new(8000, 0, model, 1);
        let score = |model| {
            super::super::policy::score_node(SharePolicy::Gantry, &on(model), &any, &mix, &[])
                .unwrap()
                .0
        };
        assert!(score(g2).beats(&score(t4)));
        // A workload without model constraints: nothing is displaced anywhere.
        let mut plain = TaskMix::from_workload(&[any, shape(1000, 1, 500)], ALL_TYPES, false);
        plain.set_reach([(t4, 2), (g2, 62)]);
        assert_eq!(plain.displaced(&any, t4), 0.0);
    }

    #[test]
    fn gpu_the_free_cpu_cannot_feed_is_wasted() {
        // One GPU per 8 cores: 16 cores feed two of four idle devices.
        let mix = one(shape(8000, 1, MILLI));
        let mut n = NodeFree::new(16_000, 0, 0, 4);
        assert!(mix.node_waste(&n) >= 2000.0);
        n.cpu = 32_000;
        assert!(mix.node_waste(&n) < 1000.0);
    }

    #[test]
    fn types_that_cannot_run_there_fill_nothing() {
        let mut m = Models::default();
        let a100 = m.intern("A100").unwrap();
        let t4 = m.intern("T4").unwrap();
        let mut n = NodeFree::new(8000, 0, t4, 2);
        // No workload, or CPU-only pods: nothing ever takes GPU.
        assert_eq!(TaskMix::default().node_waste(&n), 2000.0);
        assert_eq!(one(shape(1000, 0, 0)).node_waste(&n), 2000.0);
        // Too much CPU, the wrong model, more devices than the node has free.
        assert_eq!(one(shape(9000, 1, 500)).node_waste(&n), 2000.0);
        let on_a100 = PodShape {
            models: m.set_of(&["A100"]),
            ..shape(1000, 1, 500)
        };
        assert!(on_a100.models.allows(a100));
        assert_eq!(one(on_a100).node_waste(&n), 2000.0);
        n.gpu[0] = 0;
        assert_eq!(one(shape(1000, 2, MILLI)).node_waste(&n), 1000.0);
        // Two whole devices fit an idle pair.
        n.gpu[0] = MILLI;
        assert!(one(shape(1000, 2, MILLI)).node_waste(&n) < 2000.0);
    }

    #[test]
    fn waste_stays_within_the_free_milli_and_tables_are_kept() {
        let pods: Vec<PodShape> = [810, 470, 470, 320, 650, 230, 160, 1000]
            .iter()
            .map(|&m| shape(2000, 1, m))
            .chain([shape(4000, 0, 0), shape(8000, 2, MILLI)])
            .collect();
        let mix = TaskMix::from_workload(&pods, ALL_TYPES, false);
        let mut n = NodeFree::new(16_000, 0, 0, 4);
        for free in (0..=MILLI).step_by(10) {
            n.gpu[1] = free;
            let w = mix.node_waste(&n);
            assert!(w >= 0.0 && w <= n.gpu_free() as f64 + 1e-9, "{free}: {w}");
        }
        // The same answer from the kept table and from a fresh clone.
        assert_eq!(mix.node_waste(&n), mix.clone().node_waste(&n));
        // Capacity a common type fills is less wasted than a gap nothing fits.
        assert!(mix.node_waste(&device(470)) < mix.node_waste(&device(150)));
    }

    #[test]
    fn a_share_goes_where_what_it_leaves_gets_filled() {
        // Roughly the proportions of the published `gpushare100` trace. A 320 beside a 470
        // (530 free) leaves 210 that only the rare 160s fill, and takes the place of the next
        // 470; beside another 320 (680 free) it leaves 360 for a third 320 or a 230. FGD's
        // measure ranks the 530 first (the 680 is "usable by fewer types"), the waste
        // measure the other way round.
        let mut pods = Vec::new();
        for (milli, count) in [(810, 24), (470, 17), (320, 8), (650, 6), (230, 3), (460, 3)] {
            pods.extend(std::iter::repeat_n(shape(1000, 1, milli), count));
        }
        pods.extend(std::iter::repeat_n(shape(1000, 1, 160), 2));
        pods.extend(std::iter::repeat_n(shape(1000, 0, 0), 11));
        let mix = TaskMix::from_workload(&pods, ALL_TYPES, false);
        let p = shape(1000, 1, 320);
        let drop = |measure: &dyn Fn(&NodeFree) -> f64, free: u16| {
            let n = device(free);
            measure(&n) - measure(&n.after(&p, 1))
        };
        let waste = |n: &NodeFree| mix.node_waste(n);
        let fgd = |n: &NodeFree| mix.node_frag(n);
        assert!(drop(&waste, 680) > drop(&waste, 530));
        assert!(drop(&fgd, 680) < drop(&fgd, 530));
        // Beside a 650 (350 free) it leaves 30: best under both.
        assert!(drop(&waste, 350) > drop(&waste, 680));
        assert!(drop(&fgd, 350) > drop(&fgd, 530));
    }
}
