//! `DevicePluginConfig::validate`: what upstream's plugin would reject in a config file,
//! each problem with the field path it concerns.

use super::*;

impl DevicePluginConfig {
    /// Every problem with its path.
    pub fn validate(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if let Some(v) = self.version.as_deref()
            && v != "v1"
        {
            out.push(Problem::new(
                "version",
                format!("must be \"v1\", got {v:?}"),
            ));
        }
        if let Some(f) = &self.flags {
            if let Some(g) = f.gfd.as_ref().and_then(|g| g.sleep_interval.as_ref()) {
                let ok = match g {
                    Value::String(s) => {
                        s == "infinite" || parse_go_duration(s).is_ok_and(|n| n > 0)
                    }
                    Value::Number(n) => n.as_i64().is_some_and(|n| n > 0),
                    _ => false,
                };
                if !ok {
                    out.push(Problem::new(
                        "flags.gfd.sleepInterval",
                        format!("must be a positive duration like \"60s\", nanoseconds, or \"infinite\", got {g}"),
                    ));
                }
            }
            let list = self.device_list_strategies();
            let cdi = list.iter().any(|s| {
                matches!(
                    s,
                    DeviceListStrategy::CdiAnnotations | DeviceListStrategy::CdiCri
                )
            });
            if cdi && f.device_discovery_strategy == Some(DeviceDiscoveryStrategy::Tegra) {
                out.push(Problem::new(
                    "flags.plugin.deviceListStrategy",
                    "CDI strategies need NVML device discovery, not tegra",
                ));
            }
        }
        if let Some(r) = &self.resources {
            for (key, list) in [("gpus", &r.gpus), ("mig", &r.mig)] {
                for (i, p) in list.iter().flatten().enumerate() {
                    let base = format!("resources.{key}[{i}]");
                    if p.pattern.is_empty() {
                        out.push(Problem::new(format!("{base}.pattern"), "must not be empty"));
                    }
                    if let Some(m) = check_resource_name(&p.name) {
                        out.push(Problem::new(format!("{base}.name"), m));
                    }
                }
            }
        }
        if let Some(s) = &self.sharing {
            for (key, r) in [("timeSlicing", &s.time_slicing), ("mps", &s.mps)] {
                let Some(r) = r else { continue };
                let base = format!("sharing.{key}");
                if r.resources.is_empty() {
                    out.push(Problem::new(
                        format!("{base}.resources"),
                        "must list at least one resource",
                    ));
                }
                for (i, x) in r.resources.iter().enumerate() {
                    let p = index(&format!("{base}.resources"), i);
                    if x.replicas < 2 {
                        out.push(Problem::new(
                            format!("{p}.replicas"),
                            format!("must be >= 2, got {}", x.replicas),
                        ));
                    } else if x.replicas > MAX_REPLICAS {
                        out.push(Problem::new(
                            format!("{p}.replicas"),
                            format!(
                                "must be <= {MAX_REPLICAS}, got {} (each replica is one advertised \
                                 device; the list must fit the kubelet's ListAndWatch messages)",
                                x.replicas
                            ),
                        ));
                    }
                    if let Some(m) = check_resource_name(&x.name) {
                        out.push(Problem::new(format!("{p}.name"), m));
                    }
                    if let Some(rn) = &x.rename
                        && let Some(m) = check_resource_name(rn)
                    {
                        out.push(Problem::new(format!("{p}.rename"), m));
                    }
                    if let Some(d) = &x.devices {
                        check_devices(d, &format!("{p}.devices"), &mut out);
                    }
                    if key == "mps"
                        && full_resource_name(&x.name).starts_with(names::RESOURCE_MIG_PREFIX)
                    {
                        out.push(Problem::new(
                            format!("{p}.name"),
                            "MPS sharing is not supported on MIG devices",
                        ));
                    }
                }
                let mut seen = std::collections::BTreeSet::new();
                for (i, x) in r.resources.iter().enumerate() {
                    if !seen.insert(full_resource_name(&x.name)) {
                        out.push(Problem::new(
                            format!("{base}.resources[{i}].name"),
                            format!("duplicate resource {:?}", x.name),
                        ));
                    }
                }
            }
            if s.mps.is_some() {
                if let Some(why) = sharing_refused(SharingStrategy::Mps, self.mig_strategy()) {
                    out.push(Problem::new("sharing.mps", why));
                }
                if self.mps_root().is_none() {
                    out.push(Problem::new(
                        "flags.mpsRoot",
                        "is required for MPS sharing (e.g. /run/nvidia/mps)",
                    ));
                }
            }
        }
        if let Some(ids) = self.imex.as_ref().and_then(|i| i.channel_ids.as_ref())
            && !(ids.is_empty() || ids.as_slice() == [0])
        {
            out.push(Problem::new(
                "imex.channelIDs",
                format!("only [] or [0] are supported, got {ids:?}"),
            ));
        }
        out
    }
}

fn check_devices(d: &ReplicatedDevices, path: &str, out: &mut Vec<Problem>) {
    match d {
        ReplicatedDevices::All(s) if s != "all" => {
            out.push(Problem::new(
                path,
                format!("must be \"all\", a positive count or a list of device IDs, got {s:?}"),
            ));
        }
        ReplicatedDevices::Count(n) if *n <= 0 => {
            out.push(Problem::new(path, format!("count must be > 0, got {n}")));
        }
        ReplicatedDevices::List(ids) => {
            for (i, id) in ids.iter().enumerate() {
                let is_index = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
                let ok = is_index(id)
                    || id
                        .split_once(':')
                        .is_some_and(|(a, b)| is_index(a) && is_index(b))
                    || id.starts_with("GPU-")
                    || id.starts_with("MIG-");
                if !ok {
                    out.push(Problem::new(
                        index(path, i),
                        format!("must be a GPU index (\"0\"), MIG index (\"0:1\"), GPU-… or MIG-… UUID, got {id:?}"),
                    ));
                }
            }
        }
        _ => {}
    }
}

/// A resource name must be ≤ 63 characters in full and a DNS subdomain after the `/`.
fn check_resource_name(name: &str) -> Option<String> {
    let full = full_resource_name(name);
    let suffix = full.split_once('/').map_or("", |(_, s)| s);
    if full.len() > 63 {
        return Some(format!(
            "resource name {full:?} is longer than 63 characters"
        ));
    }
    let valid = !suffix.is_empty()
        && suffix.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    (!valid).then(|| {
        format!("{name:?} is not a valid resource name (lowercase DNS subdomain after the prefix)")
    })
}
