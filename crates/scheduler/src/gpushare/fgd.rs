//! Fragmentation as FGD defines it (Weng et al., ATC '23): the free GPU of a node that the
//! expected task types could not use, weighted by how often each type arrives. The types
//! ("typical pods") come from the workload itself, CPU-only pods included.

use super::fill_tables::FillTables;
use super::model::{ModelSet, NodeFree, PodShape};
use std::collections::{BTreeMap, HashMap};

/// One task type and its share of the workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskType {
    pub shape: PodShape,
    pub weight: f64,
}

/// The expected pod mix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskMix {
    pub types: Vec<TaskType>,
    /// Count a type as able to run only where its memory fits too (the paper looks at CPU
    /// and GPU alone).
    pub check_mem: bool,
    /// Per type, the share of the cluster's GPU capacity on models it may use (empty: all
    /// of it); see [`TaskMix::set_reach`].
    pub(super) reach: Vec<f64>,
    /// GPU capacity per model (empty: not known); see [`TaskMix::set_reach`].
    pub(super) capacity: BTreeMap<u8, f64>,
    /// Gantry's waste tables, built on demand ([`TaskMix::node_waste`]).
    pub(super) fill: FillTables,
}

/// Share of pods the most common types must cover (the paper's popularity threshold).
pub const COVERAGE: f64 = 0.95;
/// Gantry's policy looks at every type: rare large requests are the ones fragmentation
/// starves first.
pub const ALL_TYPES: f64 = 1.0;

impl TaskMix {
    /// The most common request shapes, most common first, until they cover `coverage` of the
    /// pods; weights renormalised over the kept types. Without `with_mem` the shape is
    /// (CPU, GPU per device, device count, models), as in the paper.
    pub fn from_workload(pods: &[PodShape], coverage: f64, with_mem: bool) -> TaskMix {
        let mut count: HashMap<PodShape, u64> = HashMap::new();
        for p in pods {
            *count.entry(type_key(p, with_mem)).or_default() += 1;
        }
        TaskMix::from_counts(&count, coverage, with_mem)
    }

    /// [`TaskMix::from_workload`] from pods already counted by type ([`type_key`]), for a
    /// caller that keeps the counts as pods come.
    pub fn from_counts(count: &HashMap<PodShape, u64>, coverage: f64, with_mem: bool) -> TaskMix {
        let total = count.values().sum::<u64>() as f64;
        let mut v: Vec<(PodShape, u64)> = count.iter().map(|(k, c)| (*k, *c)).collect();
        // Most common first; equal counts: the larger request first (the paper's order).
        v.sort_by(|a, b| {
            b.1.cmp(&a.1).then_with(|| {
                let k = |s: &PodShape| (s.cpu, s.milli, s.num_gpu, s.spec, s.models, s.mem);
                k(&b.0).cmp(&k(&a.0))
            })
        });
        let mut kept = 0usize;
        let mut covered = 0u64;
        while kept < v.len() && (covered as f64) < coverage * total {
            covered += v[kept].1;
            kept += 1;
        }
        // Weights as the paper's simulator computes them, division for division: a share of
        // all pods, renormalised over the kept types only when some were cut. Its integer
        // score truncates, so the last bit of a weight can decide a tie.
        let cut = kept < v.len();
        v.truncate(kept);
        let types = v
            .into_iter()
            .map(|(shape, c)| {
                let share = c as f64 / total;
                let weight = if cut {
                    share / (covered as f64 / total)
                } else {
                    share
                };
                TaskType { shape, weight }
            })
            .collect();
        TaskMix {
            types,
            check_mem: with_mem,
            reach: Vec::new(),
            capacity: BTreeMap::new(),
            fill: FillTables::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// Expected unusable free GPU milli of a node: for each type, the free milli it cannot
    /// use there (all of it when the type cannot run on the node at all), weighted.
    pub fn node_frag(&self, n: &NodeFree) -> f64 {
        let total = n.gpu_free();
        if total == 0 {
            return 0.0;
        }
        // Summed the way the paper's simulator sums: each type's part into its fragment
        // category (lacking GPU and CPU, lacking GPU, lacking CPU, CPU-only fits, CPU-only
        // lacks CPU, wrong model), then the categories in that order. The same value to the
        // last bit keeps the integer score's ties and truncations the paper's.
        let mut bins = [0.0f64; 6];
        for t in &self.types {
            let (bin, milli) = category(&t.shape, n, total, self.check_mem);
            bins[bin] += t.weight * milli as f64;
        }
        bins.iter().fold(0.0, |a, b| a + b)
    }
}

/// A pod's task type: its request, memory left out unless the mix looks at it.
pub fn type_key(p: &PodShape, with_mem: bool) -> PodShape {
    PodShape {
        mem: if with_mem { p.mem } else { 0 },
        ..*p
    }
}

/// The type's CPU (and memory where the mix looks at it) fits the node's free.
pub(super) fn cpu_fits(t: &PodShape, n: &NodeFree, check_mem: bool) -> bool {
    n.cpu >= t.cpu && (!check_mem || n.mem >= t.mem)
}

/// The node has as many devices with the type's per-device milli free as it asks for.
pub(super) fn gpu_fits(t: &PodShape, n: &NodeFree) -> bool {
    n.fitting(t.milli) >= usize::from(t.num_gpu)
}

/// A type's fragment category on a node and the free milli it counts there: all of it,
/// except where the type fits, which loses only the devices too small for it.
fn category(t: &PodShape, n: &NodeFree, total: i64, check_mem: bool) -> (usize, i64) {
    const LACK_BOTH: usize = 0;
    const LACK_GPU: usize = 1;
    const LACK_CPU: usize = 2;
    const CPU_FITS: usize = 3;
    const CPU_LACKS: usize = 4;
    const NO_ACCESS: usize = 5;
    let cpu_ok = cpu_fits(t, n, check_mem);
    if !t.wants_gpu() {
        return (if cpu_ok { CPU_FITS } else { CPU_LACKS }, total);
    }
    if !t.models.allows(n.model) {
        return (NO_ACCESS, total);
    }
    match (gpu_fits(t, n), cpu_ok) {
        (true, true) => {
            let small = n.gpus().iter().filter(|&&g| g < t.milli);
            (LACK_GPU, small.map(|&g| i64::from(g)).sum())
        }
        (true, false) => (LACK_CPU, total),
        (false, true) => (LACK_GPU, total),
        (false, false) => (LACK_BOTH, total),
    }
}

/// Whether any type of the mix asks for specific models (then model scarcity matters).
pub fn any_constrained(mix: &TaskMix) -> bool {
    mix.types
        .iter()
        .any(|t| matches!(t.shape.models, ModelSet::Only(_)))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::gpushare::model::{MILLI, Models};

    /// A pod shape on any GPU model (shared with `fill`'s tests).
    pub(in crate::gpushare) fn shape(cpu: i64, num_gpu: u8, milli: u16) -> PodShape {
        PodShape {
            cpu,
            mem: 0,
            num_gpu,
            milli,
            models: ModelSet::Any,
            spec: 0,
        }
    }

    #[test]
    fn types_cover_the_threshold_and_renormalise() {
        let mut pods = vec![shape(1000, 1, 500); 6];
        pods.extend(vec![shape(2000, 1, 1000); 3]);
        pods.push(shape(4000, 0, 0));
        let mix = TaskMix::from_workload(&pods, 0.85, false);
        // 6 + 3 = 90 % >= 85 %: the CPU-only type is dropped, weights over the 9 kept.
        assert_eq!(mix.types.len(), 2);
        assert_eq!(mix.types[0].shape, shape(1000, 1, 500));
        assert!((mix.types[0].weight - 6.0 / 9.0).abs() < 1e-12);
        let all = TaskMix::from_workload(&pods, 0.95, false);
        assert_eq!(all.types.len(), 3);
        // The simulator's arithmetic to the bit: a share of all pods, then renormalised.
        assert_eq!(mix.types[0].weight, (6.0 / 10.0) / (9.0 / 10.0));
        assert_eq!(all.types[2].weight, 1.0 / 10.0);
    }

    #[test]
    fn equal_counts_keep_the_simulators_order() {
        // Same count, CPU, GPU: the request written later in string order comes first, so
        // the cut at the threshold keeps the same types the simulator keeps.
        let a = PodShape {
            spec: 1,
            ..shape(1000, 1, 500)
        };
        let b = PodShape {
            spec: 2,
            ..shape(1000, 1, 500)
        };
        let pods = vec![shape(8000, 1, MILLI), shape(8000, 1, MILLI), a, b];
        let mix = TaskMix::from_workload(&pods, 0.7, false);
        let kept: Vec<PodShape> = mix.types.iter().map(|t| t.shape).collect();
        assert_eq!(kept, vec![shape(8000, 1, MILLI), b]);
    }

    #[test]
    fn fragment_categories_sum_to_the_plain_measure() {
        let mut m = Models::default();
        let (t4, g2) = (m.intern("T4").unwrap(), m.intern("G2").unwrap());
        let pods = vec![
            shape(1000, 1, 300),
            shape(6000, 1, 700),
            shape(9000, 1, MILLI),
            shape(2000, 2, MILLI),
            shape(4000, 0, 0),
            PodShape {
                models: m.set_of(&["G2"]),
                spec: 1,
                ..shape(1000, 1, 500)
            },
        ];
        let mix = TaskMix::from_workload(&pods, ALL_TYPES, false);
        for model in [t4, g2] {
            for (cpu, gpus) in [(8000, [1000, 400, 0, 650]), (1500, [200, 1000, 1000, 0])] {
                let mut n = NodeFree::new(cpu, 0, model, 4);
                n.gpu[..4].copy_from_slice(&gpus);
                let total = n.gpu_free() as f64;
                // Straightforward: all free GPU for a type that cannot run here, else the
                // devices too small for it.
                let plain: f64 = mix
                    .types
                    .iter()
                    .map(|t| {
                        let s = &t.shape;
                        let runs = s.wants_gpu()
                            && s.models.allows(n.model)
                            && n.cpu >= s.cpu
                            && n.fitting(s.milli) >= usize::from(s.num_gpu);
                        let lost = if runs {
                            n.gpus()
                                .iter()
                                .filter(|&&g| g < s.milli)
                                .map(|&g| f64::from(g))
                                .sum()
                        } else {
                            total
                        };
                        t.weight * lost
                    })
                    .sum();
                assert!(
                    (mix.node_frag(&n) - plain).abs() < 1e-9,
                    "{model} {cpu} {gpus:?}"
                );
            }
        }
    }

    #[test]
    fn fragment_per_type_follows_the_paper() {
        let mut m = Models::default();
        let t4 = m.intern("T4").unwrap();
        let g2 = m.intern("G2").unwrap();
        let mut n = NodeFree::new(8000, 0, t4, 2);
        n.gpu[0] = 300;
        let half = shape(1000, 1, 500);
        let mix = |s: PodShape| TaskMix {
            types: vec![TaskType {
                shape: s,
                weight: 1.0,
            }],
            ..TaskMix::default()
        };
        // The 300 left on device 0 is too small for a half-GPU pod.
        assert_eq!(mix(half).node_frag(&n), 300.0);
        // A whole-GPU pod can use device 1 only.
        assert_eq!(mix(shape(1000, 1, MILLI)).node_frag(&n), 300.0);
        // Two whole GPUs do not fit: everything free is a fragment.
        assert_eq!(mix(shape(1000, 2, MILLI)).node_frag(&n), 1300.0);
        // Not enough CPU left, or the wrong model: everything.
        assert_eq!(mix(shape(9000, 1, 500)).node_frag(&n), 1300.0);
        let on_g2 = PodShape {
            models: m.set_of(&["G2"]),
            spec: 0,
            ..half
        };
        assert!(on_g2.models.allows(g2));
        assert_eq!(mix(on_g2).node_frag(&n), 1300.0);
        // CPU-only types count all free GPU.
        assert_eq!(mix(shape(1000, 0, 0)).node_frag(&n), 1300.0);
    }
}
