//! MIG placement rules, as pure functions over a profile table and the instances that exist.
//!
//! The hardware model: 8 memory slices and 7 compute slices per GPU. A GPU instance of a profile
//! occupies `memory_slices` consecutive memory slices starting at one of the profile's valid
//! starts, and `slices` compute slices. Instances may not share memory slices, the compute
//! slices in use may not exceed 7, and no profile may exceed its maximum count.

use std::collections::BTreeMap;

use crate::types::{MigProfile, Placement};

/// Compute slices of every MIG-capable GPU we model.
pub const COMPUTE_SLICES: u32 = 7;
/// Memory slices of every MIG-capable GPU we model.
pub const MEMORY_SLICES: u32 = 8;

/// An existing GPU instance, as far as placement is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant {
    pub profile: String,
    pub placement: Placement,
    pub slices: u32,
}

/// Why a GPU instance cannot be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("profile {profile} does not exist on this GPU (valid: {valid})")]
    UnknownProfile { profile: String, valid: String },
    #[error("profile {profile} cannot start at memory slice {start} (valid starts: {valid:?})")]
    InvalidPlacement {
        profile: String,
        start: u32,
        valid: Vec<u32>,
    },
    #[error("profile {profile} at {start}:{size} overlaps {other} at {other_start}:{other_size}")]
    Overlap {
        profile: String,
        start: u32,
        size: u32,
        other: String,
        other_start: u32,
        other_size: u32,
    },
    #[error("profile {profile} allows at most {max} instance(s) per GPU")]
    CountExceeded { profile: String, max: u32 },
    #[error("not enough compute slices for {profile}: {used} of {total} in use, it needs {needs}")]
    ComputeExhausted {
        profile: String,
        used: u32,
        total: u32,
        needs: u32,
    },
    #[error("no free placement for profile {profile}")]
    NoFreePlacement { profile: String },
    #[error("layout {layout} does not fit on one GPU: {reason}")]
    LayoutDoesNotFit { layout: String, reason: String },
}

/// Find a profile by name in a table.
pub fn find_profile<'a>(
    profiles: &'a [MigProfile],
    name: &str,
) -> Result<&'a MigProfile, PlacementError> {
    profiles
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| PlacementError::UnknownProfile {
            profile: name.to_string(),
            valid: profiles
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Check that `profile` may be placed at `placement` next to `existing`.
pub fn check_placement(
    profile: &MigProfile,
    placement: Placement,
    existing: &[Occupant],
) -> Result<(), PlacementError> {
    if placement.size != profile.memory_slices
        || !profile.placement_starts.contains(&placement.start)
    {
        return Err(PlacementError::InvalidPlacement {
            profile: profile.name.clone(),
            start: placement.start,
            valid: profile.placement_starts.clone(),
        });
    }
    let count = existing
        .iter()
        .filter(|o| o.profile == profile.name)
        .count() as u32;
    if count >= profile.max_count {
        return Err(PlacementError::CountExceeded {
            profile: profile.name.clone(),
            max: profile.max_count,
        });
    }
    if let Some(o) = existing.iter().find(|o| o.placement.overlaps(placement)) {
        return Err(PlacementError::Overlap {
            profile: profile.name.clone(),
            start: placement.start,
            size: placement.size,
            other: o.profile.clone(),
            other_start: o.placement.start,
            other_size: o.placement.size,
        });
    }
    let used: u32 = existing.iter().map(|o| o.slices).sum();
    if used + profile.slices > COMPUTE_SLICES {
        return Err(PlacementError::ComputeExhausted {
            profile: profile.name.clone(),
            used,
            total: COMPUTE_SLICES,
            needs: profile.slices,
        });
    }
    Ok(())
}

/// Pick a placement for `profile`: the one asked for (checked), or the first valid free one.
pub fn choose_placement(
    profile: &MigProfile,
    wanted: Option<Placement>,
    existing: &[Occupant],
) -> Result<Placement, PlacementError> {
    if let Some(p) = wanted {
        check_placement(profile, p, existing)?;
        return Ok(p);
    }
    let mut last_err = None;
    for p in profile.placements() {
        match check_placement(profile, p, existing) {
            Ok(()) => return Ok(p),
            Err(
                e
                @ (PlacementError::CountExceeded { .. } | PlacementError::ComputeExhausted { .. }),
            ) => {
                return Err(e);
            }
            Err(e) => last_err = Some(e),
        }
    }
    Err(match last_err {
        Some(PlacementError::Overlap { .. }) | None => PlacementError::NoFreePlacement {
            profile: profile.name.clone(),
        },
        Some(e) => e,
    })
}

/// The GPU-instance id the driver gives an instance at `placement`: its node in the binary tree
/// of memory slices (whole GPU 0; halves 1–2; quarters 3–6; single slices 7–14).
pub fn gpu_instance_id(placement: Placement) -> u32 {
    match placement.size {
        8.. => 0,
        4..=7 => 1 + placement.start / 4,
        2..=3 => 3 + placement.start / 2,
        _ => 7 + placement.start,
    }
}

/// Plan placements for a whole layout (`profile → count`) on an empty GPU, or say why it cannot
/// fit. Searches all placements, so layouts that need a particular order still fit.
pub fn plan_layout(
    profiles: &[MigProfile],
    layout: &BTreeMap<String, u32>,
) -> Result<Vec<(MigProfile, Placement)>, PlacementError> {
    let describe = || {
        layout
            .iter()
            .map(|(p, n)| format!("{p}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut wanted: Vec<&MigProfile> = Vec::new();
    for (name, &count) in layout {
        let profile = find_profile(profiles, name)?;
        if count > profile.max_count {
            return Err(PlacementError::LayoutDoesNotFit {
                layout: describe(),
                reason: format!(
                    "{count} × {name} requested, the GPU allows at most {}",
                    profile.max_count
                ),
            });
        }
        wanted.extend(std::iter::repeat_n(profile, count as usize));
    }
    let slices: u32 = wanted.iter().map(|p| p.slices).sum();
    if slices > COMPUTE_SLICES {
        return Err(PlacementError::LayoutDoesNotFit {
            layout: describe(),
            reason: format!("needs {slices} compute slices, the GPU has {COMPUTE_SLICES}"),
        });
    }
    let memory: u32 = wanted.iter().map(|p| p.memory_slices).sum();
    if memory > MEMORY_SLICES {
        return Err(PlacementError::LayoutDoesNotFit {
            layout: describe(),
            reason: format!("needs {memory} memory slices, the GPU has {MEMORY_SLICES}"),
        });
    }
    // Biggest first keeps the search small.
    wanted.sort_by(|a, b| {
        (b.memory_slices, b.slices, &b.name).cmp(&(a.memory_slices, a.slices, &a.name))
    });
    let mut placed: Vec<Occupant> = Vec::new();
    let mut out = Vec::new();
    if search(&wanted, &mut placed, &mut out) {
        Ok(out)
    } else {
        Err(PlacementError::LayoutDoesNotFit {
            layout: describe(),
            reason: "no combination of valid placements avoids overlapping memory slices"
                .to_string(),
        })
    }
}

fn search(
    wanted: &[&MigProfile],
    placed: &mut Vec<Occupant>,
    out: &mut Vec<(MigProfile, Placement)>,
) -> bool {
    let Some((first, rest)) = wanted.split_first() else {
        return true;
    };
    for p in first.placements() {
        // Same profile twice: only try ascending starts, to avoid permutations.
        if let Some(prev) = out.last()
            && prev.0.name == first.name
            && p.start <= prev.1.start
        {
            continue;
        }
        if check_placement(first, p, placed).is_ok() {
            placed.push(Occupant {
                profile: first.name.clone(),
                placement: p,
                slices: first.slices,
            });
            out.push(((*first).clone(), p));
            if search(rest, placed, out) {
                return true;
            }
            placed.pop();
            out.pop();
        }
    }
    false
}

/// Parse a mig-parted profile string into (compute slices of the CI, GI profile name):
/// `1g.10gb` → (1, `1g.10gb`); `1c.2g.20gb` → (1, `2g.20gb`); `1g.10gb+me` → (1, `1g.10gb+me`).
pub fn parse_profile(s: &str) -> Option<(u32, String)> {
    let (ci, gi) = match s.split_once("c.") {
        Some((c, rest)) if c.chars().all(|ch| ch.is_ascii_digit()) && !c.is_empty() => {
            (Some(c.parse::<u32>().ok()?), rest)
        }
        _ => (None, s),
    };
    let g: u32 = gi.split_once('g')?.0.parse().ok()?;
    let ci = ci.unwrap_or(g);
    if ci == 0 || ci > g {
        return None;
    }
    Some((ci, gi.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn instance_ids_follow_the_memory_slice_tree() {
        let id = |start, size| gpu_instance_id(Placement { start, size });
        assert_eq!(id(0, 8), 0);
        assert_eq!((id(0, 4), id(4, 4)), (1, 2));
        assert_eq!((id(0, 2), id(2, 2), id(4, 2), id(6, 2)), (3, 4, 5, 6));
        assert_eq!((id(0, 1), id(6, 1)), (7, 13));
    }

    #[test]
    fn profile_strings_parse() {
        assert_eq!(parse_profile("1g.10gb"), Some((1, "1g.10gb".to_string())));
        assert_eq!(
            parse_profile("1c.2g.20gb"),
            Some((1, "2g.20gb".to_string()))
        );
        assert_eq!(
            parse_profile("1g.10gb+me"),
            Some((1, "1g.10gb+me".to_string()))
        );
        assert_eq!(parse_profile("3c.2g.20gb"), None);
        assert_eq!(parse_profile("bogus"), None);
    }

    #[test]
    fn first_free_placement_skips_taken_slices() {
        let profiles = catalog::H100_SXM5_80GB.mig_profiles();
        let two = find_profile(&profiles, "2g.20gb").expect("2g");
        let taken = [Occupant {
            profile: "3g.40gb".into(),
            placement: Placement { start: 0, size: 4 },
            slices: 3,
        }];
        assert_eq!(
            choose_placement(two, None, &taken),
            Ok(Placement { start: 4, size: 2 })
        );
        let seven = find_profile(&profiles, "7g.80gb").expect("7g");
        assert_eq!(
            choose_placement(seven, None, &taken),
            Err(PlacementError::NoFreePlacement {
                profile: "7g.80gb".into()
            })
        );
    }

    #[test]
    fn layouts_needing_backtracking_are_planned() {
        let profiles = catalog::A100_SXM4_80GB.mig_profiles();
        let layout: BTreeMap<String, u32> =
            [("3g.40gb".to_string(), 1), ("2g.20gb".to_string(), 2)].into();
        let plan = plan_layout(&profiles, &layout).expect("fits");
        let three = plan.iter().find(|(p, _)| p.name == "3g.40gb").expect("3g");
        assert_eq!(three.1.start, 4);
    }
}
