//! KAI's proportion plugin: fair share per queue and resource, divided top-down through the
//! queue tree, plus the dominant-resource share and queue ordering built on it.

use crate::snapshot::{QueueId, Res, Snapshot};
use std::cmp::Ordering;

/// Per queue and resource (natural units: GPUs, millicores, bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FairShare {
    pub fair: Vec<[f64; 3]>,
    /// Requested (allocated + pending), rolled up to ancestors.
    pub requested: Vec<[f64; 3]>,
    /// Cluster total the top level divided.
    pub total: [f64; 3],
}

const EPS: f64 = 1e-9;

fn requestable(limit: f64, request: f64) -> f64 {
    if limit < 0.0 {
        request
    } else {
        request.min(limit)
    }
}

/// Divide `total` of resource `r` among sibling queues, then recurse into each one's children.
fn divide(
    s: &Snapshot<'_>,
    req: &[[f64; 3]],
    k: f64,
    r: usize,
    siblings: &[QueueId],
    total: f64,
    fair: &mut [[f64; 3]],
) {
    if siblings.is_empty() {
        return;
    }
    let mut remaining = total;
    // Deserved pass: priority is irrelevant here.
    for &q in siblings {
        let qq = &s.queues[q as usize];
        let deserved = if qq.quota[r] < 0.0 {
            total
        } else {
            qq.quota[r]
        };
        let share = deserved
            .min(requestable(qq.limit[r], req[q as usize][r]))
            .max(0.0);
        fair[q as usize][r] = share;
        remaining -= share;
    }
    // Over-quota pass by priority bucket, highest first; lower buckets see what is left.
    let mut prios: Vec<i32> = siblings
        .iter()
        .map(|&q| s.queues[q as usize].priority)
        .collect();
    prios.sort_unstable_by(|a, b| b.cmp(a));
    prios.dedup();
    for prio in prios {
        if remaining <= EPS {
            break;
        }
        let mut bucket: Vec<QueueId> = siblings
            .iter()
            .copied()
            .filter(|&q| s.queues[q as usize].priority == prio)
            .collect();
        bucket.sort_by(|&a, &b| older(s, a, b));
        remaining = over_quota_rounds(s, req, k, r, &bucket, remaining, fair);
    }
    for &q in siblings {
        let children = &s.queues[q as usize].children;
        divide(s, req, k, r, children, fair[q as usize][r], fair);
    }
}

fn older(s: &Snapshot<'_>, a: QueueId, b: QueueId) -> Ordering {
    let (qa, qb) = (&s.queues[a as usize], &s.queues[b as usize]);
    qa.creation.cmp(&qb.creation).then(qa.name.cmp(&qb.name))
}

/// Rounds of weighted offers in whole units; then the remembered fractional leftovers get
/// one more unit each, largest leftover first (ties: older queue).
fn over_quota_rounds(
    s: &Snapshot<'_>,
    req: &[[f64; 3]],
    k: f64,
    r: usize,
    bucket: &[QueueId],
    mut remaining: f64,
    fair: &mut [[f64; 3]],
) -> f64 {
    let need = |q: QueueId, fair: &[[f64; 3]]| {
        let qq = &s.queues[q as usize];
        requestable(qq.limit[r], req[q as usize][r]) - fair[q as usize][r]
    };
    let mut leftover: Vec<(QueueId, f64)> = Vec::new();
    loop {
        let unsatisfied: Vec<QueueId> = bucket
            .iter()
            .copied()
            .filter(|&q| s.queues[q as usize].weight[r] > 0.0 && need(q, fair) > EPS)
            .collect();
        if unsatisfied.is_empty() || remaining <= EPS {
            break;
        }
        let total_w: f64 = unsatisfied
            .iter()
            .map(|&q| s.queues[q as usize].weight[r])
            .sum();
        let shares: Vec<f64> = unsatisfied
            .iter()
            .map(|&q| {
                let w = s.queues[q as usize].weight[r] / total_w;
                (w + k * (w - s.queues[q as usize].usage[r])).max(0.0)
            })
            .collect();
        let total_s: f64 = shares.iter().sum();
        if total_s <= EPS {
            break;
        }
        let round = remaining;
        let mut again = false;
        leftover.clear();
        for (&q, &sh) in unsatisfied.iter().zip(&shares) {
            let offer = round * sh / total_s;
            let n = need(q, fair);
            if n <= offer + EPS {
                fair[q as usize][r] += n;
                remaining -= n;
                again = true;
            } else {
                let whole = offer.floor();
                fair[q as usize][r] += whole;
                remaining -= whole;
                if offer - whole > EPS {
                    leftover.push((q, offer - whole));
                }
            }
        }
        if !again {
            break;
        }
    }
    leftover.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(Ordering::Equal)
            .then(older(s, a.0, b.0))
    });
    for (q, _) in leftover {
        if remaining <= EPS {
            break;
        }
        let give = remaining.min(1.0).min(need(q, fair));
        if give > 0.0 {
            fair[q as usize][r] += give;
            remaining -= give;
        }
    }
    remaining
}

impl FairShare {
    /// `requested` per leaf queue (natural units); rolled up here.
    pub fn compute(s: &Snapshot<'_>, leaf_requested: &[Res], k_value: f64) -> FairShare {
        let n = s.queues.len();
        let mut req = vec![[0.0; 3]; n];
        for (q, r) in leaf_requested.iter().enumerate() {
            let v = r.to_f();
            for a in s.ancestry(q as QueueId) {
                for i in 0..3 {
                    req[a as usize][i] += v[i];
                }
            }
        }
        let total = s.cluster_total().to_f();
        let roots: Vec<QueueId> = (0..n as QueueId)
            .filter(|&q| s.queues[q as usize].parent.is_none())
            .collect();
        let mut fair = vec![[0.0; 3]; n];
        for (r, &t) in total.iter().enumerate() {
            divide(s, &req, k_value, r, &roots, t, &mut fair);
        }
        FairShare {
            fair,
            requested: req,
            total,
        }
    }

    /// Deserved amount (quota; `-1` = the parent's share, i.e. all that the level divides).
    pub fn deserved(&self, s: &Snapshot<'_>, q: QueueId) -> [f64; 3] {
        let qq = &s.queues[q as usize];
        let level_total = |r: usize| {
            qq.parent
                .map_or(self.total[r], |p| self.fair[p as usize][r])
        };
        std::array::from_fn(|r| {
            if qq.quota[r] < 0.0 {
                level_total(r)
            } else {
                qq.quota[r]
            }
        })
    }

    /// Deserved amount as KAI compares it: quota `-1` is unlimited (`f64::INFINITY`), so
    /// nothing is ever "over deserved" in that resource and nothing is "below" it.
    pub fn deserved_bound(&self, s: &Snapshot<'_>, q: QueueId) -> [f64; 3] {
        let qq = &s.queues[q as usize];
        std::array::from_fn(|r| {
            if qq.quota[r] < 0.0 {
                f64::INFINITY
            } else {
                qq.quota[r]
            }
        })
    }

    /// KAI's allocatable share as the reclaim strategies compare it: quota `-1` means the
    /// limit (unlimited when the limit is `-1` too), otherwise max(deserved, fair share)
    /// capped by the limit.
    pub fn allocatable_bound(&self, s: &Snapshot<'_>, q: QueueId) -> [f64; 3] {
        let qq = &s.queues[q as usize];
        std::array::from_fn(|r| {
            let limit = if qq.limit[r] < 0.0 {
                f64::INFINITY
            } else {
                qq.limit[r]
            };
            if qq.quota[r] < 0.0 {
                limit
            } else {
                qq.quota[r].max(self.fair[q as usize][r]).min(limit)
            }
        })
    }

    /// What the DRF denominator uses: max(deserved, fair share) capped by the limit.
    pub fn allocatable(&self, s: &Snapshot<'_>, q: QueueId) -> [f64; 3] {
        let qq = &s.queues[q as usize];
        std::array::from_fn(|r| {
            let limit = qq.limit[r];
            let deserved = if qq.quota[r] < 0.0 {
                if limit < 0.0 { self.total[r] } else { limit }
            } else {
                qq.quota[r]
            };
            let a = deserved.max(self.fair[q as usize][r]);
            if limit < 0.0 { a } else { a.min(limit) }
        })
    }

    /// Max over resources of allocated / allocatable; a resource with nothing allocatable
    /// weighs allocated × 1000.
    pub fn dominant_share(&self, s: &Snapshot<'_>, q: QueueId, allocated: [f64; 3]) -> f64 {
        let a = self.allocatable(s, q);
        (0..3)
            .map(|r| {
                if a[r] > EPS {
                    allocated[r] / a[r]
                } else {
                    allocated[r] * 1000.0
                }
            })
            .fold(0.0, f64::max)
    }
}

/// Order two sibling queues for the next allocation, each with its best pending job's
/// request (KAI proportion `QueueOrderFn`). `Less` means `a` goes first.
pub fn compare_queues(
    s: &Snapshot<'_>,
    fs: &FairShare,
    alloc: &[Res],
    a: (QueueId, &Res),
    b: (QueueId, &Res),
) -> Ordering {
    let view = |(q, job): (QueueId, &Res)| {
        let cur = alloc[q as usize].to_f();
        let with = alloc[q as usize].plus(job).to_f();
        let fair = fs.fair[q as usize];
        let deserved = fs.deserved_bound(s, q);
        let above_fair = (0..3).any(|r| cur[r] > fair[r] + EPS);
        let over_deserved = (0..3).any(|r| with[r] > deserved[r] + EPS && job.0[r] > 0);
        let alloc_share = fs.allocatable(s, q);
        let zero_share = (0..3).any(|r| job.0[r] > 0 && alloc_share[r] <= EPS);
        let dom_with = fs.dominant_share(s, q, with);
        let dom_now = fs.dominant_share(s, q, cur);
        (
            above_fair,
            over_deserved,
            std::cmp::Reverse(s.queues[q as usize].priority),
            zero_share,
            dom_with,
            dom_now,
        )
    };
    let (va, vb) = (view(a), view(b));
    va.0.cmp(&vb.0)
        .then(va.1.cmp(&vb.1))
        .then(va.2.cmp(&vb.2))
        .then(va.3.cmp(&vb.3))
        .then(va.4.partial_cmp(&vb.4).unwrap_or(Ordering::Equal))
        .then(va.5.partial_cmp(&vb.5).unwrap_or(Ordering::Equal))
        .then(older(s, a.0, b.0))
}
