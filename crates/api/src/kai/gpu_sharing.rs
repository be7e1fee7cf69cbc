//! KAI GPU-sharing requests on a pod: the `gpu-fraction`, `gpu-memory`,
//! `gpu-fraction-num-devices`, `gpu-fraction-container-name` and `mps` annotations. This is
//! the one parser of them: admission (`pod_check`, the API server's and `gantry validate`'s
//! checks), the scheduler's pod conversion and request model, and the binder all take its
//! typed result, so a value one of them accepts none of the others rejects.
//!
//! Grammar, as KAI's admission (`gpurequesthandler.ValidateGpuRequests`) reads it:
//! - `gpu-fraction`: Go's `strconv.ParseFloat`, and (v0.17) also a Kubernetes quantity, so
//!   only what both take: an optionally signed decimal with an optional exponent (`0.5`,
//!   `.5`, `5e-1`, `+0.25`), no spaces, no suffix (`500m`), no hex float, `NaN` or `Inf`;
//!   then 0 < v < 1.
//! - `gpu-memory` and `gpu-fraction-num-devices`: `strconv.ParseUint(v, 10, 64)`: ASCII
//!   digits only (no sign, no spaces), > 0. A device count must also fit in 32 bits (no node
//!   has more GPUs; KAI would accept it and never place the pod).
//! - `mps`: only `"true"` asks for MPS, and only with `gpu-fraction` or `gpu-memory`; any
//!   other value is ignored.
//! - An annotation counts as present even when empty (an empty value is then invalid).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::names;

/// What share of each GPU a pod asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SharePortion {
    /// `gpu-fraction`: a portion 0 < f < 1 of each GPU.
    Fraction(f64),
    /// `gpu-memory`: MiB of GPU memory on each GPU.
    MemoryMib(u64),
}

/// A pod's fractional GPU request.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSharingRequest {
    pub portion: SharePortion,
    /// Number of GPUs that each get the portion (default 1).
    pub num_devices: u32,
    /// Container that receives the GPU; `None` ⇒ the first container.
    pub container_name: Option<String>,
    /// MPS requested (`mps: "true"`).
    pub mps: bool,
}

impl GpuSharingRequest {
    /// Index of the container that receives the share among `containers` (by name, else 0).
    pub fn container_index<'a>(&self, mut containers: impl Iterator<Item = &'a str>) -> usize {
        self.container_name
            .as_deref()
            .and_then(|want| containers.position(|c| c == want))
            .unwrap_or(0)
    }
}

/// Why a pod's sharing annotations are invalid. Each names its annotation
/// ([`SharingError::annotation`]); the message says what is wrong and shows the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharingError {
    #[error("annotation gpu-fraction must be a decimal > 0 and < 1, got {0:?}")]
    Fraction(String),
    #[error("annotation gpu-memory must be a positive integer number of MiB, got {0:?}")]
    Memory(String),
    #[error("annotation gpu-fraction-num-devices must be a positive integer, got {0:?}")]
    NumDevices(String),
    #[error("annotation gpu-fraction-num-devices requires gpu-fraction or gpu-memory")]
    NumDevicesWithoutShare,
    #[error("annotation mps is only valid with gpu-fraction or gpu-memory")]
    MpsWithoutShare,
    #[error("annotation gpu-memory cannot be combined with gpu-fraction")]
    FractionAndMemory,
    #[error("annotation {0} cannot be combined with a whole nvidia.com/gpu limit")]
    WithWholeGpu(&'static str),
}

impl SharingError {
    /// The annotation the error is about.
    pub fn annotation(&self) -> &'static str {
        match self {
            SharingError::Fraction(_) => names::ANNOTATION_GPU_FRACTION,
            SharingError::Memory(_) | SharingError::FractionAndMemory => {
                names::ANNOTATION_GPU_MEMORY
            }
            SharingError::NumDevices(_) | SharingError::NumDevicesWithoutShare => {
                names::ANNOTATION_GPU_FRACTION_NUM_DEVICES
            }
            SharingError::MpsWithoutShare => names::ANNOTATION_MPS,
            SharingError::WithWholeGpu(key) => key,
        }
    }

    /// The message without the leading "annotation <key>" (for a field path that names it).
    pub fn reason(&self) -> String {
        let full = self.to_string();
        let head = format!("annotation {} ", self.annotation());
        full.strip_prefix(&head).map(str::to_string).unwrap_or(full)
    }
}

/// Parse the sharing annotations. `Ok(None)` when the pod asks for no share;
/// `whole_gpu_limit` says whether a container also limits `nvidia.com/gpu`.
/// Every problem is reported, in annotation order.
pub fn parse_gpu_sharing(
    annotations: &BTreeMap<String, String>,
    whole_gpu_limit: bool,
) -> Result<Option<GpuSharingRequest>, Vec<SharingError>> {
    let get = |k: &str| annotations.get(k).map(String::as_str);
    let fraction_raw = get(names::ANNOTATION_GPU_FRACTION);
    let memory_raw = get(names::ANNOTATION_GPU_MEMORY);
    let asked = fraction_raw.is_some() || memory_raw.is_some();
    let mut errs = Vec::new();
    let fraction = fraction_raw.and_then(|v| {
        let f = go_decimal(v).filter(|f| *f > 0.0 && *f < 1.0);
        if f.is_none() {
            errs.push(SharingError::Fraction(v.to_string()));
        }
        f
    });
    let memory = memory_raw.and_then(|v| {
        let m = go_uint(v).filter(|m| *m > 0);
        if m.is_none() {
            errs.push(SharingError::Memory(v.to_string()));
        }
        m
    });
    let num_devices = match get(names::ANNOTATION_GPU_FRACTION_NUM_DEVICES) {
        None => 1,
        Some(v) => {
            let n = go_uint(v)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0);
            if n.is_none() {
                errs.push(SharingError::NumDevices(v.to_string()));
            } else if !asked {
                errs.push(SharingError::NumDevicesWithoutShare);
            }
            n.unwrap_or(1)
        }
    };
    let mps = get(names::ANNOTATION_MPS) == Some("true");
    if mps && !asked {
        errs.push(SharingError::MpsWithoutShare);
    }
    if fraction_raw.is_some() && memory_raw.is_some() {
        errs.push(SharingError::FractionAndMemory);
    }
    if asked && whole_gpu_limit {
        errs.push(SharingError::WithWholeGpu(if fraction_raw.is_some() {
            names::ANNOTATION_GPU_FRACTION
        } else {
            names::ANNOTATION_GPU_MEMORY
        }));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let portion = match (fraction, memory) {
        (Some(f), _) => SharePortion::Fraction(f),
        (None, Some(m)) => SharePortion::MemoryMib(m),
        (None, None) => return Ok(None),
    };
    Ok(Some(GpuSharingRequest {
        portion,
        num_devices,
        container_name: get(names::ANNOTATION_GPU_FRACTION_CONTAINER_NAME).map(str::to_string),
        mps,
    }))
}

/// [`parse_gpu_sharing`] on a pod: its annotations, and a whole-GPU limit on any container
/// or init container (KAI's `getFirstGPULimit`: the key's presence counts).
pub fn pod_gpu_sharing(pod: &Pod) -> Result<Option<GpuSharingRequest>, Vec<SharingError>> {
    let empty = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    parse_gpu_sharing(annotations, pod_has_whole_gpu_limit(pod))
}

/// Whether a container or init container of the pod limits `nvidia.com/gpu`.
pub fn pod_has_whole_gpu_limit(pod: &Pod) -> bool {
    pod.spec.iter().any(|s| {
        let init = s.init_containers.iter().flatten();
        s.containers.iter().chain(init).any(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_some_and(|l| l.contains_key(names::RESOURCE_GPU))
        })
    })
}

/// A number both Go's `ParseFloat` and a Kubernetes quantity accept: `[+-]? digits? (.
/// digits?)? ([eE] [+-]? digits)?` with at least one mantissa digit, and finite.
fn go_decimal(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let mut mantissa = digits(b, &mut i);
    if b.get(i) == Some(&b'.') {
        i += 1;
        mantissa += digits(b, &mut i);
    }
    if mantissa == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        i += usize::from(matches!(b.get(i), Some(b'+' | b'-')));
        if digits(b, &mut i) == 0 {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Go's `ParseUint(s, 10, 64)`: ASCII digits only, no sign, within 64 bits.
fn go_uint(s: &str) -> Option<u64> {
    let mut i = 0;
    (digits(s.as_bytes(), &mut i) == s.len() && !s.is_empty())
        .then(|| s.parse().ok())
        .flatten()
}

fn digits(b: &[u8], i: &mut usize) -> usize {
    let start = *i;
    while b.get(*i).is_some_and(u8::is_ascii_digit) {
        *i += 1;
    }
    *i - start
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn fraction(v: &str) -> Option<f64> {
        match parse_gpu_sharing(&ann(&[("gpu-fraction", v)]), false) {
            Ok(Some(GpuSharingRequest {
                portion: SharePortion::Fraction(f),
                ..
            })) => Some(f),
            _ => None,
        }
    }

    #[test]
    fn fraction_grammar_is_go_parse_float_and_a_quantity() {
        for (raw, want) in [
            ("0.5", 0.5),
            (".5", 0.5),
            ("5e-1", 0.5),
            ("5E-1", 0.5),
            ("+0.25", 0.25),
            ("0.001", 0.001),
            ("0.999", 0.999),
            ("25e-2", 0.25),
        ] {
            assert_eq!(fraction(raw), Some(want), "{raw}");
        }
        for bad in [
            "", "1", "1.0", "1.5", "0", "0.0", "-0.2", "NaN", "Inf", "half", " 0.5", "0.5 ",
            "500m", "0x1p-1", "0.5e", "e-1", ".", "+", "0_5", "1e-400", "0.5Gi",
        ] {
            assert_eq!(fraction(bad), None, "{bad:?}");
            let errs = parse_gpu_sharing(&ann(&[("gpu-fraction", bad)]), false).unwrap_err();
            assert_eq!(errs, vec![SharingError::Fraction(bad.to_string())]);
        }
        assert_eq!(parse_gpu_sharing(&ann(&[]), false), Ok(None));
    }

    #[test]
    fn integers_are_plain_digits() {
        let mem = |v: &str| parse_gpu_sharing(&ann(&[("gpu-memory", v)]), false);
        assert!(matches!(
            mem("007"),
            Ok(Some(GpuSharingRequest {
                portion: SharePortion::MemoryMib(7),
                ..
            }))
        ));
        for bad in [
            "0",
            "+5",
            "-5",
            " 5",
            "5Gi",
            "1.5",
            "",
            "99999999999999999999",
        ] {
            assert_eq!(
                mem(bad),
                Err(vec![SharingError::Memory(bad.into())]),
                "{bad}"
            );
        }
        let dev = |v: &str| {
            parse_gpu_sharing(
                &ann(&[("gpu-fraction", "0.5"), ("gpu-fraction-num-devices", v)]),
                false,
            )
        };
        assert_eq!(dev("3").ok().flatten().map(|r| r.num_devices), Some(3));
        for bad in ["0", "+2", "2.0", "4294967296"] {
            assert_eq!(dev(bad), Err(vec![SharingError::NumDevices(bad.into())]));
        }
    }

    #[test]
    fn combinations() {
        assert_eq!(
            parse_gpu_sharing(&ann(&[("gpu-fraction", "0.5")]), true),
            Err(vec![SharingError::WithWholeGpu("gpu-fraction")])
        );
        assert_eq!(
            parse_gpu_sharing(
                &ann(&[("gpu-fraction", "0.5"), ("gpu-memory", "100")]),
                false
            ),
            Err(vec![SharingError::FractionAndMemory])
        );
        assert_eq!(
            parse_gpu_sharing(&ann(&[("gpu-fraction-num-devices", "2")]), false),
            Err(vec![SharingError::NumDevicesWithoutShare])
        );
        let e = parse_gpu_sharing(&ann(&[("mps", "true")]), false).unwrap_err();
        assert_eq!(e, vec![SharingError::MpsWithoutShare]);
        assert_eq!(
            (e[0].annotation(), e[0].reason().as_str()),
            ("mps", "is only valid with gpu-fraction or gpu-memory")
        );
        assert_eq!(parse_gpu_sharing(&ann(&[("mps", "yes")]), false), Ok(None));
        let r = parse_gpu_sharing(
            &ann(&[
                ("gpu-memory", "4096"),
                ("gpu-fraction-num-devices", "2"),
                ("gpu-fraction-container-name", "b"),
                ("mps", "true"),
            ]),
            false,
        );
        let r = r.ok().flatten().unwrap_or_else(|| panic!("request"));
        assert_eq!(
            (r.portion, r.num_devices, r.mps),
            (SharePortion::MemoryMib(4096), 2, true)
        );
        assert_eq!(r.container_index(["a", "b"].into_iter()), 1);
        assert_eq!(r.container_index(["a"].into_iter()), 0);
    }
}
