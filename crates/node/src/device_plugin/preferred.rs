//! The pure core of GetPreferredAllocation. Whole GPUs: the set with the closest
//! interconnect (NVLink first) by the backend's topology. Replicas and MIG devices:
//! greedy by load of the physical GPU, spreading (`distributed`) or filling the fewest
//! GPUs (`packed`).

use std::collections::{HashMap, HashSet};

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
    for id in available.iter().chain(must_include) {
        if set.device(id).is_none() {
            return Err(RequestError::UnknownDevice {
                resource: set.name.clone(),
                id: id.clone(),
            });
        }
    }
    let mut chosen: Vec<String> = Vec::with_capacity(size);
    for id in must_include {
        if !chosen.contains(id) {
            chosen.push(id.clone());
        }
    }
    let taken: HashSet<&str> = chosen.iter().map(String::as_str).collect();
    let candidates: Vec<&String> = available
        .iter()
        .filter(|id| !taken.contains(id.as_str()))
        .collect();
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
        chosen.extend(by_load(set, available, &chosen, &candidates, need, policy));
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

/// Replicas / MIG devices: greedy by how loaded each physical GPU already is.
fn by_load(
    set: &ResourceSet,
    available: &[String],
    fixed: &[String],
    candidates: &[&String],
    need: usize,
    policy: AllocationPolicy,
) -> Vec<String> {
    // Allocated elsewhere = devices of the GPU in the resource minus those still available.
    let mut allocated: HashMap<u32, i64> = HashMap::new();
    for d in &set.devices {
        *allocated.entry(d.physical.gpu()).or_default() += 1;
    }
    for id in available {
        *allocated.entry(gpu_of(set, id)).or_default() -= 1;
    }
    let mut round: HashMap<u32, i64> = HashMap::new();
    for id in fixed {
        *round.entry(gpu_of(set, id)).or_default() += 1;
    }
    let mut used = vec![false; candidates.len()];
    let mut out = Vec::with_capacity(need);
    for _ in 0..need {
        let mut best: Option<(usize, (i64, i64))> = None;
        for (i, id) in candidates.iter().enumerate() {
            if used[i] {
                continue;
            }
            let gpu = gpu_of(set, id);
            let (a, r) = (
                allocated.get(&gpu).copied().unwrap_or(0),
                round.get(&gpu).copied().unwrap_or(0),
            );
            let key = match policy {
                AllocationPolicy::Distributed => (a + r, r),
                AllocationPolicy::Packed => (-r, -a),
            };
            if best.as_ref().is_none_or(|(_, k)| key < *k) {
                best = Some((i, key));
            }
        }
        let Some((i, _)) = best else { break };
        used[i] = true;
        *round.entry(gpu_of(set, candidates[i])).or_default() += 1;
        out.push(candidates[i].clone());
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
}
