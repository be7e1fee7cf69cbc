//! GPU requests of a pod: whole GPUs, MIG profiles, and KAI's sharing annotations
//! (`gpu-fraction`, `gpu-memory`, `gpu-fraction-num-devices`), validated as KAI's
//! admission does. A fraction is kept in thousandths of a GPU ("milli").

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
    #[error("annotation gpu-fraction={0:?} is not a number")]
    FractionNotANumber(String),
    #[error("annotation gpu-fraction={0:?} must be greater than 0 and less than 1")]
    FractionOutOfRange(String),
    #[error("annotation gpu-memory={0:?} must be a positive integer number of MiB")]
    BadMemory(String),
    #[error("annotation gpu-fraction-num-devices={0:?} must be a positive integer")]
    BadNumDevices(String),
    #[error("annotation gpu-fraction-num-devices needs gpu-fraction or gpu-memory")]
    NumDevicesWithoutFraction,
    #[error("annotations gpu-fraction and gpu-memory are mutually exclusive")]
    FractionAndMemory,
    #[error("a GPU-sharing annotation cannot be combined with a {0} request")]
    SharingWithResource(String),
    #[error("request {resource}={value} must be a positive integer")]
    BadCount { resource: String, value: i64 },
    #[error("a pod may request only one of nvidia.com/gpu and one MIG profile, got {0}")]
    MixedGpuResources(String),
}

/// Parse the GPU request of a pod. `intern_mig` maps a MIG resource name to its profile index.
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
    let fraction = annotations.get(names::ANNOTATION_GPU_FRACTION);
    let memory = annotations.get(names::ANNOTATION_GPU_MEMORY);
    let devices = annotations.get(names::ANNOTATION_GPU_FRACTION_NUM_DEVICES);
    if fraction.is_none() && memory.is_none() {
        if devices.is_some() {
            return Err(RequestError::NumDevicesWithoutFraction);
        }
        return Ok(match (whole, mig) {
            (Some(n), _) => GpuRequest::Whole(n),
            (None, Some((name, count))) => GpuRequest::Mig {
                profile: intern_mig(&name),
                count,
            },
            (None, None) => GpuRequest::None,
        });
    }
    if let Some(n) = whole {
        let _ = n;
        return Err(RequestError::SharingWithResource(
            names::RESOURCE_GPU.to_string(),
        ));
    }
    if let Some((name, _)) = mig {
        return Err(RequestError::SharingWithResource(name));
    }
    let devices = match devices {
        None => 1,
        Some(raw) => raw
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|d| *d > 0)
            .ok_or_else(|| RequestError::BadNumDevices(raw.clone()))?,
    };
    match (fraction, memory) {
        (Some(_), Some(_)) => Err(RequestError::FractionAndMemory),
        (Some(raw), None) => Ok(GpuRequest::Fraction {
            milli: parse_fraction(raw)?,
            devices,
        }),
        (None, Some(raw)) => {
            let mib = raw
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|m| *m > 0)
                .ok_or_else(|| RequestError::BadMemory(raw.clone()))?;
            Ok(GpuRequest::Memory { mib, devices })
        }
        (None, None) => Ok(GpuRequest::None),
    }
}

/// `0 < v < 1`, a plain decimal (as a Kubernetes quantity would accept), rounded to milli.
fn parse_fraction(raw: &str) -> Result<u32, RequestError> {
    let s = raw.trim();
    let plain = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
        && s.matches('.').count() <= 1;
    let value: f64 = s
        .parse()
        .ok()
        .filter(|v: &f64| plain && v.is_finite())
        .ok_or_else(|| RequestError::FractionNotANumber(raw.to_string()))?;
    if value <= 0.0 || value >= 1.0 {
        return Err(RequestError::FractionOutOfRange(raw.to_string()));
    }
    let milli = (value * f64::from(GPU_MILLI)).round() as u32;
    Ok(milli.clamp(1, GPU_MILLI - 1))
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
        for (raw, want) in [
            ("0", RequestError::FractionOutOfRange("0".into())),
            ("1.5", RequestError::FractionOutOfRange("1.5".into())),
            ("1", RequestError::FractionOutOfRange("1".into())),
            ("abc", RequestError::FractionNotANumber("abc".into())),
            ("NaN", RequestError::FractionNotANumber("NaN".into())),
            ("-0.5", RequestError::FractionNotANumber("-0.5".into())),
        ] {
            let err = parse(&[], &[("gpu-fraction", raw)]).unwrap_err();
            assert_eq!(err, want, "{raw}");
            assert!(err.to_string().contains("gpu-fraction"));
        }
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
            Err(RequestError::FractionAndMemory)
        );
        assert!(matches!(
            parse(&[("nvidia.com/gpu", 1)], &[("gpu-fraction", "0.5")]),
            Err(RequestError::SharingWithResource(_))
        ));
        assert_eq!(
            parse(&[], &[("gpu-fraction-num-devices", "2")]),
            Err(RequestError::NumDevicesWithoutFraction)
        );
        assert_eq!(
            parse(&[], &[("gpu-memory", "0")]),
            Err(RequestError::BadMemory("0".into()))
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
