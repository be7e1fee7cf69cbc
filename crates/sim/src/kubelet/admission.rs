//! Pod admission, pure: a pod's effective requests and whether they fit what the node has
//! left. Quantities are integers in base units: cpu in millicores, memory in bytes, everything
//! else (pods, extended resources) in units.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name → amount in base units.
pub type Requests = BTreeMap<String, i128>;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";

/// The largest quantity the API server keeps: it caps any larger one (`1e100`) at
/// 2^63-1 units, so such a request is simply more than any node has.
pub const MAX_UNITS: i128 = i64::MAX as i128;

/// `q` times `10^scale`, rounded up as Kubernetes rounds, with values past [`MAX_UNITS`]
/// capped there first (as the API server stores them).
pub fn scaled_capped(q: &gantry_k8s_rules::Quantity, scale: u32) -> Option<i128> {
    let cap = MAX_UNITS * 10i128.pow(scale);
    match q.ceil_scaled(scale as i32) {
        Some(v) => Some(v.min(cap)),
        None if !q.is_negative() => Some(cap),
        None => None,
    }
}

/// A quantity in the base unit of `resource` (millicores for cpu), rounded up as Kubernetes
/// rounds (`MilliValue` / `Value`).
pub fn base_units(resource: &str, q: &Quantity) -> Result<i128, String> {
    let v = gantry_k8s_rules::Quantity::parse(&q.0).map_err(|e| e.to_string())?;
    scaled_capped(&v, if resource == CPU { 3 } else { 0 })
        .ok_or_else(|| format!("quantity {:?} is out of range", q.0))
}

fn container_requests(c: &Container) -> Result<Requests, String> {
    let mut out = Requests::new();
    let Some(res) = &c.resources else {
        return Ok(out);
    };
    // A limit without a request means request = limit.
    for src in [&res.limits, &res.requests].into_iter().flatten() {
        for (k, q) in src {
            let v = base_units(k, q).map_err(|e| format!("container {}: {k}: {e}", c.name))?;
            // The API refuses these; a stored one must never free capacity for other pods.
            if v < 0 {
                return Err(format!("container {}: {k}: {:?} is negative", c.name, q.0));
            }
            out.insert(k.clone(), v);
        }
    }
    Ok(out)
}

/// The pod's effective requests: per resource, the larger of the biggest init container and
/// the sum of the app containers; plus one `pods`.
pub fn pod_requests(spec: &PodSpec) -> Result<Requests, String> {
    let mut sum = Requests::new();
    for c in &spec.containers {
        for (k, v) in container_requests(c)? {
            let e = sum.entry(k).or_insert(0);
            *e = e.saturating_add(v);
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in container_requests(c)? {
            let e = sum.entry(k).or_insert(0);
            *e = (*e).max(v);
        }
    }
    if let Some(overhead) = &spec.overhead {
        for (k, q) in overhead {
            let e = sum.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(base_units(k, q)?);
        }
    }
    sum.insert(PODS.to_string(), 1);
    Ok(sum)
}

/// Why a pod does not fit: the kubelet's `OutOf<resource>` reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// Check `wanted` against `allocatable` minus what `admitted` pods hold.
pub fn admit<'a>(
    wanted: &Requests,
    allocatable: &Requests,
    admitted: impl IntoIterator<Item = &'a Requests>,
) -> Result<(), Rejection> {
    let mut used = Requests::new();
    for r in admitted {
        for (k, v) in r {
            let e = used.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }
    for (k, want) in wanted {
        if *want <= 0 {
            continue;
        }
        let cap = allocatable.get(k).copied().unwrap_or(0);
        let in_use = used.get(k).copied().unwrap_or(0);
        if in_use.saturating_add(*want) > cap {
            return Err(Rejection {
                reason: format!("OutOf{k}"),
                message: format!(
                    "Pod was rejected: Node didn't have enough resource: {k}, requested: {want}, used: {in_use}, capacity: {cap}"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn c(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let m = |xs: &[(&str, &str)]| {
            (!xs.is_empty()).then(|| {
                xs.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: m(req),
                limits: m(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn quantities() {
        let q = |s: &str| Quantity(s.into());
        assert_eq!(base_units("memory", &q("1Gi")), Ok(1 << 30));
        assert_eq!(base_units("pods", &q("1e3")), Ok(1000));
        assert_eq!(base_units("cpu", &q("0.1")), Ok(100));
        assert!(
            base_units("cpu", &q("lots"))
                .unwrap_err()
                .contains("\"lots\"")
        );
        assert_eq!(base_units("cpu", &Quantity("250m".into())).unwrap(), 250);
        assert_eq!(base_units("cpu", &Quantity("1.5".into())).unwrap(), 1500);
        // Past int64, capped as the API server stores it (and so more than any node has).
        assert_eq!(base_units("cpu", &q("1e100")), Ok(MAX_UNITS * 1000));
        assert_eq!(base_units("memory", &q("1e100")), Ok(MAX_UNITS));
        assert_eq!(
            base_units("memory", &q("9223372036854775808")),
            Ok(MAX_UNITS)
        );
        assert!(base_units("cpu", &q("-1e100")).is_err());
    }

    #[test]
    fn a_huge_request_is_out_of_cpu() {
        let spec = PodSpec {
            containers: vec![
                c("a", &[("cpu", "1e100")], &[]),
                c("b", &[("cpu", "1e100")], &[]),
            ],
            ..Default::default()
        };
        let want = pod_requests(&spec).unwrap();
        let alloc: Requests = [("cpu".to_string(), 8000), ("pods".to_string(), 10)]
            .into_iter()
            .collect();
        let err = admit(&want, &alloc, [&want]).unwrap_err();
        assert_eq!(err.reason, "OutOfcpu");
        assert!(err.message.contains("capacity: 8000"), "{}", err.message);
    }

    #[test]
    fn effective_requests() {
        let spec = PodSpec {
            containers: vec![
                c(
                    "a",
                    &[("cpu", "1"), ("memory", "1Gi")],
                    &[("nvidia.com/gpu", "2")],
                ),
                c("b", &[("cpu", "500m")], &[]),
            ],
            init_containers: Some(vec![c("i", &[("cpu", "4")], &[("nvidia.com/gpu", "1")])]),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r["cpu"], 4000);
        assert_eq!(r["memory"], 1073741824);
        assert_eq!(r["nvidia.com/gpu"], 2);
        assert_eq!(r["pods"], 1);
    }

    #[test]
    fn admission_against_allocatable() {
        let alloc: Requests = [("cpu", 8000), ("pods", 2), ("nvidia.com/gpu", 8)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let want: Requests = [("cpu", 1000), ("pods", 1), ("nvidia.com/gpu", 6)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert!(admit(&want, &alloc, []).is_ok());
        let err = admit(&want, &alloc, [&want]).unwrap_err();
        assert_eq!(err.reason, "OutOfnvidia.com/gpu");
        assert!(err.message.contains("requested: 6, used: 6, capacity: 8"));
        let mut mig = want.clone();
        mig.insert("nvidia.com/mig-1g.10gb".into(), 1);
        assert_eq!(
            admit(&mig, &alloc, []).unwrap_err().reason,
            "OutOfnvidia.com/mig-1g.10gb"
        );
        let one: Requests = [("pods".to_string(), 1)].into_iter().collect();
        assert_eq!(
            admit(&one, &alloc, [&one, &one]).unwrap_err().reason,
            "OutOfpods"
        );
    }
}
