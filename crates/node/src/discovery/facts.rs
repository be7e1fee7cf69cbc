//! Reading node facts: NVML through the backend seam, DMI and PCI class from sysfs under a
//! host root (so tests and the sim can point it at a temp dir).

use std::path::Path;

use gantry_gpu::{Backend, GpuError};

use super::labels::{GpuFacts, NodeFacts, sanitise};

/// Gather everything [`super::compute_labels`] needs.
/// Where GFD reads the machine type, under the host root.
pub const MACHINE_TYPE_FILE: &str = "sys/class/dmi/id/product_name";

pub fn collect(
    backend: &dyn Backend,
    host_root: &Path,
    machine_file: &Path,
) -> Result<NodeFacts, GpuError> {
    let count = backend.device_count()?;
    let mut gpus = Vec::with_capacity(count as usize);
    for i in 0..count {
        let info = backend.device_info(i)?;
        let memory_total_mib = backend.memory(i)?.total_mib;
        let mig_enabled = info.mig_capable && backend.mig_mode(i)?.current;
        let mig_devices = if mig_enabled {
            backend.mig_devices(i)?
        } else {
            Vec::new()
        };
        let pci_class = read_pci_class(host_root, &info.pci_bus_id);
        gpus.push(GpuFacts {
            info,
            memory_total_mib,
            mig_enabled,
            mig_devices,
            pci_class,
        });
    }
    Ok(NodeFacts {
        driver_version: backend.driver_version()?,
        cuda_driver_version: backend.cuda_driver_version()?,
        gpus,
        machine: read_machine(machine_file),
        vgpu_present: false,
    })
}

/// The machine type file (`/sys/class/dmi/id/product_name`), sanitised; `unknown` when
/// unreadable or empty.
pub fn read_machine(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) if !sanitise(&s).is_empty() => sanitise(&s),
        _ => "unknown".into(),
    }
}

/// The PCI class of a GPU from `/sys/bus/pci/devices/<bdf>/class` (`0x030200`).
/// NVML prints an 8-digit domain (`00000000:19:00.0`); sysfs uses 4 digits, lower case.
pub fn read_pci_class(host_root: &Path, nvml_bus_id: &str) -> Option<u32> {
    let bdf = sysfs_bdf(nvml_bus_id)?;
    let path = host_root
        .join("sys/bus/pci/devices")
        .join(bdf)
        .join("class");
    let text = std::fs::read_to_string(path).ok()?;
    u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

fn sysfs_bdf(nvml_bus_id: &str) -> Option<String> {
    let (domain, rest) = nvml_bus_id.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    Some(format!("{domain:04x}:{}", rest.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_conversion() {
        assert_eq!(
            sysfs_bdf("00000000:19:00.0").as_deref(),
            Some("0000:19:00.0")
        );
        assert_eq!(
            sysfs_bdf("00000001:AB:00.0").as_deref(),
            Some("0001:ab:00.0")
        );
        assert_eq!(sysfs_bdf("garbage"), None);
    }

    #[test]
    fn machine_and_class_from_host_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let machine = dir.path().join(MACHINE_TYPE_FILE);
        assert_eq!(read_machine(&machine), "unknown");
        let dmi = dir.path().join("sys/class/dmi/id");
        std::fs::create_dir_all(&dmi).expect("mkdir");
        std::fs::write(dmi.join("product_name"), "PowerEdge XE9680\n").expect("write");
        assert_eq!(read_machine(&machine), "PowerEdge-XE9680");
        let dev = dir.path().join("sys/bus/pci/devices/0000:19:00.0");
        std::fs::create_dir_all(&dev).expect("mkdir");
        std::fs::write(dev.join("class"), "0x030200\n").expect("write");
        assert_eq!(
            read_pci_class(dir.path(), "00000000:19:00.0"),
            Some(0x030200)
        );
        assert_eq!(read_pci_class(dir.path(), "00000000:1A:00.0"), None);
    }
}
