//! GPU requests of a pod: whole GPUs, MIG profiles, and KAI's sharing annotations
//! (`gpu-fraction`, `gpu-memory`, `gpu-fraction-num-devices`), read by the one parser in
//! `gantry_api::kai`. A fraction is kept in thousandths of a GPU ("milli").

use gantry_api::kai::{SharePortion, SharingError, parse_gpu_sharing};
use gantry_api::names;
use std::collections::BTreeMap;

/// A GPU is 1000 milli.
pub const GPU_MILLI: u32 = 1000;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuRequest {
    None,
    /// `nvidia.com/gpu: n`.
    Whole(u32),
    /// `gpu-fraction` (milli per device) on `devices` GPUs.
    Fraction {
        milli: u32,
        devices: u32,
    },
    /// `gpu-memory` MiB on each of `devices` GPUs.
    Memory {
        mib: u64,
        devices: u32,
    },
    /// `nvidia.com/mig-<profile>: count` (profile index into `Snapshot::mig_profiles`).
    Mig {
        profile: u16,
        count: u32,
    },
}

impl GpuRequest {
    pub fn is_shared(&self) -> bool {
        matches!(
            self,
            GpuRequest::Fraction { .. } | GpuRequest::Memory { .. }
        )
    }
    pub fn wants_gpu(&self) -> bool {
        !matches!(self, GpuRequest::None)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The sharing annotations are invalid (the first problem `gantry_api`'s parser found).
    #[error(transparent)]
    Sharing(#[from] SharingError),
    #[error("a GPU-sharing annotation cannot be combined with a {0} request")]
    SharingWithMig(String),
    #[error("request {resource}={value} must be a positive integer")]
    BadCount { resource: String, value: i64 },
    #[error("a pod may request only one of nvidia.com/gpu and one MIG profile, got {0}")]
    MixedGpuResources(String),
}

/// Parse the GPU request of a pod. `intern_mig` maps a MIG resource name to its profile index.
/// The sharing annotations go through [`gantry_api::kai::parse_gpu_sharing`], the parser
/// admission uses, so the scheduler accepts exactly the values admission lets in.
pub fn parse_gpu_request(
    extended: &BTreeMap<String, i64>,
    annotations: &BTreeMap<String, String>,
    mut intern_mig: impl FnMut(&str) -> u16,
) -> Result<GpuRequest, RequestError> {
    let mut whole = None;
    let mut mig = None;
    for (name, &value) in extended {
        let is_gpu = name == names::RESOURCE_GPU;
        let is_mig = name.starts_with(names::RESOURCE_MIG_PREFIX);
        if !is_gpu && !is_mig || value == 0 {
            continue;
        }
        let count = u32::try_from(value)
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| RequestError::BadCount {
                resource: name.clone(),
                value,
            })?;
        if whole.is_some() || mig.is_some() {
            return Err(RequestError::MixedGpuResources(
                extended.keys().cloned().collect::<Vec<_>>().join(", "),
            ));
        }
        if is_gpu {
            whole = Some(count);
        } else {
            mig = Some((name.clone(), count));
        }
    }
    // The parser reports at least one problem on `Err`; the scheduler surfaces the first.
    // KAI's rule: an nvidia.com/gpu limit (even 0) excludes a share; limits fill requests here.
    let whole_limit = extended.contains_key(names::RESOURCE_GPU);
    let sharing = match parse_gpu_sharing(annotations, whole_limit) {
        Ok(sharing) => sharing,
        Err(errs) => match errs.into_iter().next() {
            Some(first) => return Err(first.into()),
            None => None,
        },
    };
    let Some(sharing) = sharing else {
        return Ok(match (whole, mig) {
            (Some(n), _) => GpuRequest::Whole(n),
            (None, Some((name, count))) => GpuRequest::Mig {
                profile: intern_mig(&name),
                count,
            },
            (None, None) => GpuRequest::None,
        });
    };
    if let Some((name, _)) = mig {
        return Err(RequestError::SharingWithMig(name));
    }
    let devices = sharing.num_devices;
    Ok(match sharing.portion {
        SharePortion::Fraction(f) => GpuRequest::Fraction {
            milli: fraction_milli(f),
            devices,
        },
        SharePortion::MemoryMib(mib) => GpuRequest::Memory { mib, devices },
    })
}

/// A portion 0 < f < 1 in milli, rounded, kept within 1..=999 (a share never rounds to
/// nothing or to a whole GPU).
fn fraction_milli(f: f64) -> u32 {
    let milli = (f * f64::from(GPU_MILLI)).round() as u32;
    milli.clamp(1, GPU_MILLI - 1)
}

/// Node GPU memory from the GFD label (MiB; very large values are bytes), floored to 100 MiB.
pub fn gpu_memory_mib(label: Option<&String>) -> Option<u64> {
    let raw: u64 = label?.trim().parse().ok()?;
    let mib = if raw >= 1 << 20 { raw / (1 << 20) } else { raw };
    let floored = mib / 100 * 100;
    (floored > 0).then_some(floored)
}

/// Milli of a GPU with `gpu_mib` that a `gpu-memory` request of `mib` takes (rounded up).
pub fn memory_to_milli(mib: u64, gpu_mib: u64) -> Option<u32> {
    if gpu_mib == 0 || mib > gpu_mib {
        return None;
    }
    let milli = (mib * u64::from(GPU_MILLI)).div_ceil(gpu_mib);
    u32::try_from(milli).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn parse(ext: &[(&str, i64)], a: &[(&str, &str)]) -> Result<GpuRequest, RequestError> {
        let ext = ext.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        parse_gpu_request(&ext, &ann(a), |_| 0)
    }

    #[test]
    fn invalid_fractions_rejected_with_reason() {
        for raw in ["0", "1.5", "1", "abc", "NaN", "-0.5", "500m"] {
            let err = parse(&[], &[("gpu-fraction", raw)]).unwrap_err();
            assert_eq!(
                err,
                RequestError::Sharing(SharingError::Fraction(raw.into()))
            );
            assert!(err.to_string().contains("gpu-fraction"));
        }
        assert_eq!(
            parse(&[], &[("gpu-fraction", "5e-1")]),
            Ok(GpuRequest::Fraction {
                milli: 500,
                devices: 1
            })
        );
    }

    #[test]
    fn valid_sharing_requests() {
        assert_eq!(
            parse(&[], &[("gpu-fraction", "0.5")]),
            Ok(GpuRequest::Fraction {
                milli: 500,
                devices: 1
            })
        );
        assert_eq!(
            parse(
                &[],
                &[("gpu-fraction", "0.25"), ("gpu-fraction-num-devices", "2")]
            ),
            Ok(GpuRequest::Fraction {
                milli: 250,
                devices: 2
            })
        );
        assert_eq!(
            parse(&[], &[("gpu-memory", "20000")]),
            Ok(GpuRequest::Memory {
                mib: 20000,
                devices: 1
            })
        );
        assert_eq!(
            parse(&[("nvidia.com/gpu", 2)], &[]),
            Ok(GpuRequest::Whole(2))
        );
        assert_eq!(
            parse(&[("nvidia.com/mig-1g.10gb", 3)], &[]),
            Ok(GpuRequest::Mig {
                profile: 0,
                count: 3
            })
        );
        assert_eq!(parse(&[("cpu-ish", 2)], &[]), Ok(GpuRequest::None));
    }

    #[test]
    fn conflicting_requests_rejected() {
        assert_eq!(
            parse(&[], &[("gpu-fraction", "0.5"), ("gpu-memory", "100")]),
            Err(SharingError::FractionAndMemory.into())
        );
        assert!(matches!(
            parse(&[("nvidia.com/gpu", 1)], &[("gpu-fraction", "0.5")]),
            Err(RequestError::Sharing(SharingError::WithWholeGpu(_)))
        ));
        assert_eq!(
            parse(&[("nvidia.com/mig-1g.10gb", 1)], &[("gpu-memory", "10")]),
            Err(RequestError::SharingWithMig(
                "nvidia.com/mig-1g.10gb".into()
            ))
        );
        assert_eq!(
            parse(&[], &[("gpu-fraction-num-devices", "2")]),
            Err(SharingError::NumDevicesWithoutShare.into())
        );
        assert_eq!(
            parse(&[], &[("gpu-memory", "0")]),
            Err(SharingError::Memory("0".into()).into())
        );
        assert!(matches!(
            parse(&[("nvidia.com/gpu", -1)], &[]),
            Err(RequestError::BadCount { .. })
        ));
    }

    #[test]
    fn gpu_memory_label_and_conversion() {
        assert_eq!(gpu_memory_mib(Some(&"81559".to_string())), Some(81500));
        assert_eq!(
            gpu_memory_mib(Some(&(80u64 << 30).to_string())),
            Some(81900)
        );
        assert_eq!(gpu_memory_mib(None), None);
        assert_eq!(memory_to_milli(20000, 80000), Some(250));
        assert_eq!(memory_to_milli(90000, 80000), None);
    }
}
