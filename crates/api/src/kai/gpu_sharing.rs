//! KAI GPU-sharing requests on a pod: the `gpu-fraction`, `gpu-memory`,
//! `gpu-fraction-num-devices`, `gpu-fraction-container-name` and `mps` annotations, parsed
//! and checked with upstream's rules so the scheduler and the validator agree.

use std::collections::BTreeMap;

use crate::names;

/// A pod's fractional GPU request.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSharingRequest {
    /// Portion of each GPU, 0 < f < 1 (from `gpu-fraction`).
    pub fraction: Option<f64>,
    /// MiB of GPU memory per device (from `gpu-memory`).
    pub memory_mib: Option<u64>,
    /// Number of GPUs that each get the portion (default 1).
    pub num_devices: u32,
    /// Container that receives the GPU; `None` ⇒ the first container.
    pub container_name: Option<String>,
    /// MPS requested (`mps: "true"`).
    pub mps: bool,
}

/// Parse the sharing annotations. `Ok(None)` when the pod asks for no fraction;
/// `whole_gpu_limit` says whether a container also limits `nvidia.com/gpu`.
/// Errors are (annotation key, message).
pub fn parse_gpu_sharing(
    annotations: &BTreeMap<String, String>,
    whole_gpu_limit: bool,
) -> Result<Option<GpuSharingRequest>, Vec<(String, String)>> {
    let mut errs = Vec::new();
    let get = |k: &str| annotations.get(k).map(|v| v.trim());
    let fraction = get(names::ANNOTATION_GPU_FRACTION).and_then(|v| match v.parse::<f64>() {
        Ok(f) if f > 0.0 && f < 1.0 => Some(f),
        _ => {
            errs.push((
                names::ANNOTATION_GPU_FRACTION.to_string(),
                format!("must be a decimal > 0 and < 1, got {v:?}"),
            ));
            None
        }
    });
    let memory_mib = get(names::ANNOTATION_GPU_MEMORY).and_then(|v| match v.parse::<u64>() {
        Ok(m) if m > 0 => Some(m),
        _ => {
            errs.push((
                names::ANNOTATION_GPU_MEMORY.to_string(),
                format!("must be a positive integer number of MiB, got {v:?}"),
            ));
            None
        }
    });
    let asked = get(names::ANNOTATION_GPU_FRACTION).is_some()
        || get(names::ANNOTATION_GPU_MEMORY).is_some();
    let num_devices = match get(names::ANNOTATION_GPU_FRACTION_NUM_DEVICES) {
        None => 1,
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n > 0 && asked => n,
            Ok(n) if n > 0 => {
                errs.push((
                    names::ANNOTATION_GPU_FRACTION_NUM_DEVICES.to_string(),
                    "requires gpu-fraction or gpu-memory".to_string(),
                ));
                n
            }
            _ => {
                errs.push((
                    names::ANNOTATION_GPU_FRACTION_NUM_DEVICES.to_string(),
                    format!("must be a positive integer, got {v:?}"),
                ));
                1
            }
        },
    };
    let mps = match get(names::ANNOTATION_MPS) {
        None => false,
        Some("true") if asked => true,
        Some("true") => {
            errs.push((
                names::ANNOTATION_MPS.to_string(),
                "is only valid with gpu-fraction or gpu-memory".to_string(),
            ));
            true
        }
        Some(_) => false,
    };
    if asked
        && get(names::ANNOTATION_GPU_FRACTION).is_some()
        && get(names::ANNOTATION_GPU_MEMORY).is_some()
    {
        errs.push((
            names::ANNOTATION_GPU_MEMORY.to_string(),
            "cannot be combined with gpu-fraction".to_string(),
        ));
    }
    if asked && whole_gpu_limit {
        let key = if get(names::ANNOTATION_GPU_FRACTION).is_some() {
            names::ANNOTATION_GPU_FRACTION
        } else {
            names::ANNOTATION_GPU_MEMORY
        };
        errs.push((
            key.to_string(),
            format!(
                "cannot be combined with a whole {} limit",
                names::RESOURCE_GPU
            ),
        ));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    if !asked {
        return Ok(None);
    }
    Ok(Some(GpuSharingRequest {
        fraction,
        memory_mib,
        num_devices,
        container_name: get(names::ANNOTATION_GPU_FRACTION_CONTAINER_NAME).map(str::to_string),
        mps,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn fractions() {
        let r = parse_gpu_sharing(&ann(&[("gpu-fraction", "0.5")]), false);
        assert_eq!(r.ok().flatten().and_then(|r| r.fraction), Some(0.5));
        for bad in ["1", "1.5", "0", "-0.2", "NaN", "half"] {
            assert!(
                parse_gpu_sharing(&ann(&[("gpu-fraction", bad)]), false).is_err(),
                "{bad}"
            );
        }
        assert_eq!(parse_gpu_sharing(&ann(&[]), false), Ok(None));
    }

    #[test]
    fn combinations() {
        assert!(parse_gpu_sharing(&ann(&[("gpu-fraction", "0.5")]), true).is_err());
        assert!(
            parse_gpu_sharing(
                &ann(&[("gpu-fraction", "0.5"), ("gpu-memory", "100")]),
                false
            )
            .is_err()
        );
        assert!(parse_gpu_sharing(&ann(&[("gpu-fraction-num-devices", "2")]), false).is_err());
        assert!(parse_gpu_sharing(&ann(&[("mps", "true")]), false).is_err());
        let r = parse_gpu_sharing(
            &ann(&[
                ("gpu-memory", "4096"),
                ("gpu-fraction-num-devices", "2"),
                ("mps", "true"),
            ]),
            false,
        );
        let r = r.ok().flatten().unwrap_or_else(|| panic!("request"));
        assert_eq!((r.memory_mib, r.num_devices, r.mps), (Some(4096), 2, true));
    }
}
