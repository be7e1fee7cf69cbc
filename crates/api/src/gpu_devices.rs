//! The physical GPUs of a node as its device plugin publishes them (Node annotation
//! `node.gantry.dev/gpu-devices`), so that the scheduler places onto real devices rather than
//! onto slots `0..allocatable-1`: after a GPU is withdrawn, it knows which one.
//!
//! Format: comma-separated `INDEX:UUID:STATE` in index order, STATE `Healthy` or
//! `Unhealthy`, e.g. `0:GPU-1f0c…:Healthy,1:GPU-9a3e…:Unhealthy`. Only GPUs advertised whole
//! under `nvidia.com/gpu` are listed (not MIG-enabled ones).

use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct GpuDevice {
    /// NVML index on the node.
    pub index: u32,
    pub uuid: String,
    pub healthy: bool,
}

/// The annotation value, devices in index order.
pub fn format(devices: &[GpuDevice]) -> String {
    let mut sorted: Vec<&GpuDevice> = devices.iter().collect();
    sorted.sort_by_key(|d| d.index);
    let mut out = String::new();
    for (i, d) in sorted.into_iter().enumerate() {
        let state = if d.healthy { "Healthy" } else { "Unhealthy" };
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(out, "{sep}{}:{}:{state}", d.index, d.uuid);
    }
    out
}

/// Parses an annotation value; the error names the entry and what is wrong with it.
pub fn parse(value: &str) -> Result<Vec<GpuDevice>, String> {
    let mut out: Vec<GpuDevice> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut parts = entry.split(':');
        let (Some(index), Some(uuid), Some(state), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "entry {entry:?}: expected INDEX:UUID:Healthy|Unhealthy"
            ));
        };
        let index: u32 = index
            .parse()
            .map_err(|_| format!("entry {entry:?}: index {index:?} is not a number"))?;
        let healthy = match state {
            "Healthy" => true,
            "Unhealthy" => false,
            other => {
                return Err(format!(
                    "entry {entry:?}: state {other:?} is neither Healthy nor Unhealthy"
                ));
            }
        };
        if uuid.is_empty() {
            return Err(format!("entry {entry:?}: empty UUID"));
        }
        if out.iter().any(|d| d.index == index || d.uuid == uuid) {
            return Err(format!("entry {entry:?}: index or UUID listed twice"));
        }
        out.push(GpuDevice {
            index,
            uuid: uuid.to_string(),
            healthy,
        });
    }
    out.sort_by_key(|d| d.index);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors_name_the_entry() {
        let d = vec![
            GpuDevice {
                index: 1,
                uuid: "GPU-b".into(),
                healthy: false,
            },
            GpuDevice {
                index: 0,
                uuid: "GPU-a".into(),
                healthy: true,
            },
        ];
        let s = format(&d);
        assert_eq!(s, "0:GPU-a:Healthy,1:GPU-b:Unhealthy");
        let back = parse(&s).unwrap();
        assert_eq!(back[0].uuid, "GPU-a");
        assert!(!back[1].healthy);
        assert_eq!(parse("").unwrap(), vec![]);
        assert!(parse("x:GPU-a:Healthy").unwrap_err().contains("\"x\""));
        assert!(parse("0:GPU-a:Sick").unwrap_err().contains("Sick"));
        assert!(parse("0:GPU-a").unwrap_err().contains("expected"));
        assert!(
            parse("0:GPU-a:Healthy,0:GPU-b:Healthy")
                .unwrap_err()
                .contains("twice")
        );
    }
}
