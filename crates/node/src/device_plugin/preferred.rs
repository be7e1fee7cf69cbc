//! The pure core of GetPreferredAllocation. Whole GPUs: the set with the closest
//! interconnect (NVLink first) by the backend's topology. Replicas and MIG devices:
//! greedy by load of the physical GPU, spreading (`distributed`) or filling the fewest
//! GPUs (`packed`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use gantry_gpu::TopologyLevel;

use super::error::RequestError;
use super::resources::ResourceSet;
use super::settings::AllocationPolicy;

/// Pairwise GPU distances (lower is closer), from [`TopologyLevel::distance`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    dist: HashMap<(u32, u32), u32>,
}

/// Distance assumed when the backend did not report a pair (across sockets).
const UNKNOWN_DISTANCE: u32 = 60;
/// Above this many candidate sets, whole-GPU selection falls back to greedy search.
const EXHAUSTIVE_LIMIT: u64 = 4096;

impl Topology {
    pub fn from_levels(levels: impl IntoIterator<Item = ((u32, u32), TopologyLevel)>) -> Self {
        let mut dist = HashMap::new();
        for ((a, b), level) in levels {
            dist.insert((a, b), level.distance());
            dist.insert((b, a), level.distance());
        }
        Topology { dist }
    }

    pub fn distance(&self, a: u32, b: u32) -> u32 {
        if a == b {
            return 0;
        }
        self.dist.get(&(a, b)).copied().unwrap_or(UNKNOWN_DISTANCE)
    }

    fn score(&self, gpus: &[u32]) -> u32 {
        let mut total = 0;
        for (i, a) in gpus.iter().enumerate() {
            for b in &gpus[i + 1..] {
                total += self.distance(*a, *b);
            }
        }
        total
    }
}

/// One container's preferred device IDs.
pub fn preferred(
    set: &ResourceSet,
    available: &[String],
    must_include: &[String],
    size: usize,
    policy: AllocationPolicy,
    topology: &Topology,
) -> Result<Vec<String>, RequestError> {
    let unknown = |id: &String| RequestError::UnknownDevice {
        resource: set.name.clone(),
        id: id.clone(),
    };
    // Each offered ID is looked up once: its physical GPU.
    let gpus = available
        .iter()
        .map(|id| {
            set.device(id)
                .map(|d| d.physical.gpu())
                .ok_or_else(|| unknown(id))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    if let Some(id) = must_include.iter().find(|id| set.device(id).is_none()) {
        return Err(unknown(id));
    }
    let mut chosen: Vec<String> = Vec::with_capacity(size);
    for id in must_include {
        if !chosen.contains(id) {
            chosen.push(id.clone());
        }
    }
    let taken: HashSet<&str> = chosen.iter().map(String::as_str).collect();
    let (candidates, cand_gpus): (Vec<&String>, Vec<u32>) = available
        .iter()
        .zip(&gpus)
        .filter(|(id, _)| !taken.contains(id.as_str()))
        .unzip();
    if chosen.len() >= size {
        chosen.truncate(size.max(must_include.len()));
        return Ok(chosen);
    }
    let need = size - chosen.len();
    if candidates.len() < need {
        return Err(RequestError::NotEnoughDevices {
            resource: set.name.clone(),
            size,
            available: candidates.len() + chosen.len(),
        });
    }
    let whole_gpus = set
        .devices
        .iter()
        .all(|d| d.replica.is_none() && !d.physical.is_mig());
    if whole_gpus {
        chosen.extend(closest_gpus(set, &chosen, &candidates, need, topology));
    } else {
        let load = Offer {
            gpus: &gpus,
            candidates: &candidates,
            cand_gpus: &cand_gpus,
        };
        chosen.extend(by_load(set, &load, &chosen, need, policy));
    }
    Ok(chosen)
}

fn gpu_of(set: &ResourceSet, id: &str) -> u32 {
    set.device(id).map_or(u32::MAX, |d| d.physical.gpu())
}

/// Whole GPUs: the `need` candidates that, with `fixed`, have the least total distance.
fn closest_gpus(
    set: &ResourceSet,
    fixed: &[String],
    candidates: &[&String],
    need: usize,
    topology: &Topology,
) -> Vec<String> {
    let fixed_gpus: Vec<u32> = fixed.iter().map(|id| gpu_of(set, id)).collect();
    let cand_gpus: Vec<u32> = candidates.iter().map(|id| gpu_of(set, id)).collect();
    let pick = if binomial(candidates.len() as u64, need as u64) <= EXHAUSTIVE_LIMIT {
        exhaustive(&fixed_gpus, &cand_gpus, need, topology)
    } else {
        greedy(&fixed_gpus, &cand_gpus, need, topology)
    };
    pick.into_iter().map(|i| candidates[i].clone()).collect()
}

fn binomial(n: u64, k: u64) -> u64 {
    let k = k.min(n.saturating_sub(k));
    let mut acc: u64 = 1;
    for i in 0..k {
        acc = acc.saturating_mul(n - i) / (i + 1);
        if acc > EXHAUSTIVE_LIMIT {
            return u64::MAX;
        }
    }
    acc
}

/// Tries every combination (in lexicographic order, so ties go to lower positions).
fn exhaustive(fixed: &[u32], cands: &[u32], need: usize, topo: &Topology) -> Vec<usize> {
    let mut combo: Vec<usize> = (0..need).collect();
    let mut best = (u32::MAX, combo.clone());
    let mut gpus = Vec::with_capacity(fixed.len() + need);
    loop {
        gpus.clear();
        gpus.extend_from_slice(fixed);
        gpus.extend(combo.iter().map(|&i| cands[i]));
        let score = topo.score(&gpus);
        if score < best.0 {
            best = (score, combo.clone());
        }
        // Next combination: bump the rightmost position that can still move.
        let mut i = need;
        let movable = loop {
            if i == 0 {
                break None;
            }
            i -= 1;
            if combo[i] < cands.len() - need + i {
                break Some(i);
            }
        };
        let Some(i) = movable else { return best.1 };
        combo[i] += 1;
        for j in i + 1..need {
            combo[j] = combo[j - 1] + 1;
        }
    }
}

/// Seeds from each candidate (or from `fixed`), then adds the closest candidate each step.
fn greedy(fixed: &[u32], cands: &[u32], need: usize, topo: &Topology) -> Vec<usize> {
    let grow = |mut picked: Vec<usize>| {
        while picked.len() < need {
            let mut set: Vec<u32> = fixed.to_vec();
            set.extend(picked.iter().map(|&i| cands[i]));
            let next = (0..cands.len())
                .filter(|i| !picked.contains(i))
                .min_by_key(|&i| set.iter().map(|&g| topo.distance(g, cands[i])).sum::<u32>());
            match next {
                Some(i) => picked.push(i),
                None => break,
            }
        }
        picked
    };
    let seeds: Vec<Vec<usize>> = if fixed.is_empty() {
        (0..cands.len()).map(|i| vec![i]).collect()
    } else {
        vec![Vec::new()]
    };
    let mut best: Option<(u32, Vec<usize>)> = None;
    for seed in seeds {
        let picked = grow(seed);
        let mut gpus = fixed.to_vec();
        gpus.extend(picked.iter().map(|&i| cands[i]));
        let score = topo.score(&gpus);
        if best.as_ref().is_none_or(|(s, _)| score < *s) {
            best = Some((score, picked));
        }
    }
    let mut pick = best.map(|b| b.1).unwrap_or_default();
    pick.sort_unstable();
    pick
}

/// The offered IDs' GPUs, and the candidates (offered, not yet chosen) with theirs.
struct Offer<'a> {
    gpus: &'a [u32],
    candidates: &'a [&'a String],
    cand_gpus: &'a [u32],
}

/// Replicas / MIG devices: greedy by how loaded each physical GPU already is.
/// Each ID is looked up once; the picks then walk per-GPU queues, not every candidate
/// (a time-sliced node offers hundreds of replica IDs per call).
fn by_load(
    set: &ResourceSet,
    offer: &Offer<'_>,
    fixed: &[String],
    need: usize,
    policy: AllocationPolicy,
) -> Vec<String> {
    // Allocated elsewhere = devices of the GPU in the resource minus those still available.
    let mut allocated: BTreeMap<u32, i64> = BTreeMap::new();
    for d in &set.devices {
        *allocated.entry(d.physical.gpu()).or_default() += 1;
    }
    for &g in offer.gpus {
        *allocated.entry(g).or_default() -= 1;
    }
    let mut round: BTreeMap<u32, i64> = BTreeMap::new();
    for id in fixed {
        *round.entry(gpu_of(set, id)).or_default() += 1;
    }
    // Candidates per GPU, in offer order: a GPU's next pick is the front of its queue.
    let mut queues: BTreeMap<u32, VecDeque<usize>> = BTreeMap::new();
    for (i, &g) in offer.cand_gpus.iter().enumerate() {
        queues.entry(g).or_default().push_back(i);
    }
    let mut out = Vec::with_capacity(need);
    for _ in 0..need {
        // The least key wins; on a tie the candidate offered first (as a scan would pick).
        let best = queues
            .iter()
            .filter_map(|(gpu, q)| {
                let first = *q.front()?;
                let a = allocated.get(gpu).copied().unwrap_or(0);
                let r = round.get(gpu).copied().unwrap_or(0);
                let key = match policy {
                    AllocationPolicy::Distributed => (a + r, r),
                    AllocationPolicy::Packed => (-r, -a),
                };
                Some((key, first, *gpu))
            })
            .min();
        let Some((_, i, gpu)) = best else { break };
        if let Some(q) = queues.get_mut(&gpu) {
            q.pop_front();
        }
        *round.entry(gpu).or_default() += 1;
        out.push(offer.candidates[i].clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_plugin::resources::build;
    use crate::device_plugin::resources::tests::{inv, time_sliced};
    use crate::device_plugin::settings::Settings;

    /// Two NVLink islands {0,1,2,3} and {4,5,6,7}, PCIe across.
    fn islands() -> Topology {
        let mut levels = Vec::new();
        for a in 0..8u32 {
            for b in a + 1..8 {
                let level = if a / 4 == b / 4 {
                    TopologyLevel::NvLink { links: 4 }
                } else {
                    TopologyLevel::System
                };
                levels.push(((a, b), level));
            }
        }
        Topology::from_levels(levels)
    }

    fn gpu_ids(v: &[u32]) -> Vec<String> {
        v.iter().map(|i| format!("GPU-{i:08}")).collect()
    }

    #[test]
    fn whole_gpus_prefer_one_nvlink_island() {
        let set = &build(&inv(8), &Settings::default()).unwrap()[0];
        let avail = gpu_ids(&[0, 2, 4, 5, 6, 7]);
        let got = preferred(
            set,
            &avail,
            &[],
            3,
            AllocationPolicy::Distributed,
            &islands(),
        )
        .unwrap();
        assert_eq!(got, gpu_ids(&[4, 5, 6]));
        let got = preferred(
            set,
            &avail,
            &gpu_ids(&[0]),
            2,
            AllocationPolicy::Distributed,
            &islands(),
        )
        .unwrap();
        assert_eq!(got, gpu_ids(&[0, 2]));
        assert!(matches!(
            preferred(
                set,
                &avail,
                &[],
                7,
                AllocationPolicy::Distributed,
                &islands()
            ),
            Err(RequestError::NotEnoughDevices { .. })
        ));
    }

    #[test]
    fn greedy_search_for_large_sets() {
        let set = &build(&inv(32), &Settings::default()).unwrap()[0];
        let all: Vec<u32> = (0..32).collect();
        let topo = Topology::from_levels((0..32u32).flat_map(|a| {
            (a + 1..32).map(move |b| {
                (
                    (a, b),
                    if a / 8 == b / 8 {
                        TopologyLevel::NvLink { links: 2 }
                    } else {
                        TopologyLevel::Node
                    },
                )
            })
        }));
        let avail = gpu_ids(&all[3..]);
        let got = preferred(set, &avail, &[], 8, AllocationPolicy::Distributed, &topo).unwrap();
        assert_eq!(got, gpu_ids(&[8, 9, 10, 11, 12, 13, 14, 15]));
    }

    #[test]
    fn replicas_spread_or_pack() {
        let set = &build(&inv(2), &time_sliced(4, None)).unwrap()[0];
        let avail: Vec<String> = set
            .devices
            .iter()
            .map(|d| d.id.clone())
            .filter(|id| id != "GPU-00000000::0")
            .collect();
        let topo = Topology::default();
        // GPU 0 already has one replica in use: distributed starts on GPU 1 and alternates.
        let got = preferred(set, &avail, &[], 2, AllocationPolicy::Distributed, &topo).unwrap();
        assert_eq!(got, ["GPU-00000001::0", "GPU-00000000::1"]);
        // Packed fills the busiest GPU first and stays on it.
        let got = preferred(set, &avail, &[], 3, AllocationPolicy::Packed, &topo).unwrap();
        assert_eq!(
            got,
            ["GPU-00000000::1", "GPU-00000000::2", "GPU-00000000::3"]
        );
    }

    /// The plain definition: each step scans every unused candidate, least key first,
    /// ties to the one offered first.
    fn scan(
        set: &ResourceSet,
        avail: &[String],
        fixed: &[String],
        need: usize,
        policy: AllocationPolicy,
    ) -> Vec<String> {
        let gpu = |id: &String| gpu_of(set, id);
        let count = |ids: &mut dyn Iterator<Item = &String>, g: u32| {
            ids.filter(|id| gpu(id) == g).count() as i64
        };
        let cands: Vec<&String> = avail.iter().filter(|id| !fixed.contains(id)).collect();
        let mut out: Vec<String> = Vec::new();
        for _ in 0..need {
            let best = cands
                .iter()
                .filter(|id| !out.contains(id))
                .map(|id| {
                    let g = gpu(id);
                    let total = set.devices.iter().filter(|d| d.physical.gpu() == g).count();
                    let a = total as i64 - count(&mut avail.iter(), g);
                    let r = count(&mut fixed.iter().chain(&out), g);
                    let key = match policy {
                        AllocationPolicy::Distributed => (a + r, r),
                        AllocationPolicy::Packed => (-r, -a),
                    };
                    (key, *id)
                })
                .fold(
                    None,
                    |best: Option<((i64, i64), &String)>, (k, id)| match best {
                        Some((bk, _)) if bk <= k => best,
                        _ => Some((k, id)),
                    },
                );
            let Some((_, id)) = best else { break };
            out.push(id.clone());
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn replica_picks_match_the_plain_scan(
            keep in proptest::collection::vec(proptest::bool::ANY, 15),
            order in proptest::collection::vec(0u32..1000, 15),
            fixed_n in 0usize..3,
            size in 1usize..8,
            packed in proptest::bool::ANY,
        ) {
            let set = &build(&inv(3), &time_sliced(5, None)).unwrap()[0];
            let mut avail: Vec<(u32, String)> = set
                .devices
                .iter()
                .zip(&keep)
                .zip(&order)
                .filter(|((_, k), _)| **k)
                .map(|((d, _), o)| (*o, d.id.clone()))
                .collect();
            avail.sort();
            let avail: Vec<String> = avail.into_iter().map(|(_, id)| id).collect();
            let fixed: Vec<String> = avail.iter().take(fixed_n).cloned().collect();
            let policy = if packed { AllocationPolicy::Packed } else { AllocationPolicy::Distributed };
            let size = size.max(fixed.len());
            let got = preferred(set, &avail, &fixed, size, policy, &Topology::default());
            if avail.len() < size {
                proptest::prop_assert!(got.is_err());
            } else {
                let mut want = fixed.clone();
                want.extend(scan(set, &avail, &fixed, size - fixed.len(), policy));
                proptest::prop_assert_eq!(got.unwrap(), want);
            }
        }
    }
}
