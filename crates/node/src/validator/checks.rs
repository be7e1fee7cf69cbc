//! Pure checks of the validator: what the `driver-ready` file says, whether a runtime config
//! or CDI spec gives containers the GPUs, and how many devices the device plugin advertises.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gantry_api::names::{self, driver_ready_key as key};

/// Where the driver lives, as written into `driver-ready` (reference §3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// `false` when an operator-managed driver container provides the driver.
    pub is_host_driver: bool,
    /// Host path of the driver root (`/` or `/run/nvidia/driver`).
    pub driver_root: PathBuf,
    /// Host path the `/dev/nvidia*` nodes live under.
    pub dev_root: PathBuf,
}

/// Where a host path is seen inside the validator's container: the host's `/` is mounted at
/// `/host`, the driver container's root at its own path.
fn ctr_path(host_path: &Path) -> String {
    if host_path == Path::new("/") {
        "/host".to_string()
    } else {
        host_path.display().to_string()
    }
}

/// The `driver-ready` file's `KEY=VALUE` lines.
pub fn driver_ready_contents(info: &DriverInfo) -> String {
    let lines = [
        (key::IS_HOST_DRIVER, info.is_host_driver.to_string()),
        (
            key::NVIDIA_DRIVER_ROOT,
            info.driver_root.display().to_string(),
        ),
        (key::DRIVER_ROOT_CTR_PATH, ctr_path(&info.driver_root)),
        (key::NVIDIA_DEV_ROOT, info.dev_root.display().to_string()),
        (key::DEV_ROOT_CTR_PATH, ctr_path(&info.dev_root)),
    ];
    lines.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// Parse `KEY=VALUE` lines (blank lines and `#` comments skipped).
pub fn parse_ready_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Does a TOML runtime config (containerd v2/v3, CRI-O) register runtime `name`? Looks for a
/// `runtimes.<name>` table anywhere, which covers every config version's plugin path.
/// `Err` names what is wrong with the text.
pub fn toml_has_runtime(text: &str, name: &str) -> Result<bool, String> {
    let doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
    Ok(table_has_runtime(doc.as_table(), name))
}

fn table_has_runtime(t: &dyn toml_edit::TableLike, name: &str) -> bool {
    t.iter().any(|(k, item)| {
        let Some(sub) = item.as_table_like() else {
            return false;
        };
        (k == "runtimes" && sub.get(name).is_some_and(|r| r.is_table_like()))
            || table_has_runtime(sub, name)
    })
}

/// Does a Docker `daemon.json` register runtime `name`?
pub fn daemon_json_has_runtime(text: &str, name: &str) -> Result<bool, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    Ok(v.get("runtimes").and_then(|r| r.get(name)).is_some())
}

/// Devices the device plugin advertises on a Node: `nvidia.com/gpu` plus every
/// `nvidia.com/mig-*` in its allocatable (quantities that are not whole numbers count 0).
pub fn plugin_devices(allocatable: &BTreeMap<String, String>) -> u64 {
    allocatable
        .iter()
        .filter(|(k, _)| {
            k.as_str() == names::RESOURCE_GPU || k.starts_with(names::RESOURCE_MIG_PREFIX)
        })
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_ready_for_host_and_container_drivers() {
        let host = driver_ready_contents(&DriverInfo {
            is_host_driver: true,
            driver_root: "/".into(),
            dev_root: "/".into(),
        });
        assert_eq!(
            host,
            "IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH=/host\nNVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH=/host\n"
        );
        let ctr = driver_ready_contents(&DriverInfo {
            is_host_driver: false,
            driver_root: "/run/nvidia/driver".into(),
            dev_root: "/".into(),
        });
        let kv = parse_ready_file(&ctr);
        assert_eq!(kv["IS_HOST_DRIVER"], "false");
        assert_eq!(kv["NVIDIA_DRIVER_ROOT"], "/run/nvidia/driver");
        assert_eq!(kv["DRIVER_ROOT_CTR_PATH"], "/run/nvidia/driver");
        assert_eq!(kv["DEV_ROOT_CTR_PATH"], "/host");
        assert_eq!(kv.len(), 5);
    }

    #[test]
    fn finds_runtimes_in_every_config_shape() {
        let v2 = r#"
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
"#;
        let v3 = r#"
version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
"#;
        let runc_only = r#"
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"#;
        let crio = "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n";
        assert_eq!(toml_has_runtime(v2, "nvidia"), Ok(true));
        assert_eq!(toml_has_runtime(v3, "nvidia"), Ok(true));
        assert_eq!(toml_has_runtime(crio, "nvidia"), Ok(true));
        assert_eq!(toml_has_runtime(runc_only, "nvidia"), Ok(false));
        assert_eq!(toml_has_runtime("", "nvidia"), Ok(false));
        assert!(toml_has_runtime("[plugins", "nvidia").is_err());
        assert_eq!(
            daemon_json_has_runtime(
                r#"{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}"#,
                "nvidia"
            ),
            Ok(true)
        );
        assert_eq!(daemon_json_has_runtime("{}", "nvidia"), Ok(false));
        assert!(daemon_json_has_runtime("{", "nvidia").is_err());
    }

    #[test]
    fn counts_gpu_and_mig_devices() {
        let m = |xs: &[(&str, &str)]| {
            xs.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(plugin_devices(&m(&[("cpu", "8"), ("memory", "1Gi")])), 0);
        assert_eq!(plugin_devices(&m(&[("nvidia.com/gpu", "8")])), 8);
        assert_eq!(
            plugin_devices(&m(&[
                ("nvidia.com/gpu", "0"),
                ("nvidia.com/mig-1g.10gb", "7"),
                ("nvidia.com/mig-3g.40gb", "2")
            ])),
            9
        );
        assert_eq!(plugin_devices(&m(&[("nvidia.com/gpu", "lots")])), 0);
    }
}
