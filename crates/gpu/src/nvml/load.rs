//! Finding and loading `libnvidia-ml.so.1` under a driver root.

use std::path::{Path, PathBuf};

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use crate::error::GpuError;

/// The NVML soname.
pub const SONAME: &str = "libnvidia-ml.so.1";

/// Where to look, in order: under the driver root (`/run/nvidia/driver` when the driver runs
/// in a container, `/` on a host install), the GPU Operator's host mount, then the plain soname
/// through the dynamic loader's own search.
pub fn candidate_paths(driver_root: Option<&Path>) -> Vec<PathBuf> {
    let root = driver_root.unwrap_or(Path::new("/"));
    let mut out = vec![
        root.join("usr/lib64").join(SONAME),
        root.join("usr/lib/x86_64-linux-gnu").join(SONAME),
        root.join("usr/lib/aarch64-linux-gnu").join(SONAME),
        PathBuf::from("/usr/local/nvidia/lib64").join(SONAME),
        PathBuf::from(SONAME),
    ];
    out.dedup();
    out
}

/// Load and initialise NVML from the first candidate that loads.
pub fn load(candidates: &[PathBuf]) -> Result<(Nvml, PathBuf), GpuError> {
    let mut tried = Vec::new();
    let mut last_error = String::from("no candidate paths");
    for path in candidates {
        tried.push(path.display().to_string());
        // Absolute paths that are not there need no loader round-trip.
        if path.is_absolute() && !path.exists() {
            last_error = format!("{}: no such file", path.display());
            continue;
        }
        match Nvml::builder().lib_path(path.as_os_str()).init() {
            Ok(nvml) => return Ok((nvml, path.clone())),
            Err(NvmlError::LibloadingError(e)) => last_error = e.to_string(),
            Err(NvmlError::FailedToLoadSymbol(e)) => last_error = e,
            Err(NvmlError::DriverNotLoaded) => {
                return Err(GpuError::Init(format!(
                    "{} loaded but the NVIDIA kernel driver is not loaded",
                    path.display()
                )));
            }
            Err(e) => {
                return Err(GpuError::Init(format!("{}: {e}", path.display())));
            }
        }
    }
    Err(GpuError::LibraryNotFound { tried, last_error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_start_under_the_driver_root_and_end_with_the_soname() {
        let c = candidate_paths(Some(Path::new("/run/nvidia/driver")));
        assert_eq!(
            c[0],
            PathBuf::from("/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1")
        );
        assert_eq!(
            c[1],
            PathBuf::from("/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
        );
        assert!(c.contains(&PathBuf::from("/usr/local/nvidia/lib64/libnvidia-ml.so.1")));
        assert_eq!(c.last(), Some(&PathBuf::from(SONAME)));
        let host = candidate_paths(None);
        assert_eq!(host[0], PathBuf::from("/usr/lib64/libnvidia-ml.so.1"));
    }

    #[test]
    fn bogus_paths_give_library_not_found_with_every_path() {
        let dir = std::env::temp_dir().join("gantry-gpu-no-nvml");
        let paths = vec![
            dir.join("usr/lib64").join(SONAME),
            dir.join("usr/lib/x86_64-linux-gnu").join(SONAME),
            PathBuf::from("libgantry-definitely-missing.so.1"),
        ];
        let err = match load(&paths) {
            Err(e) => e,
            Ok(_) => panic!("a missing library must not load"),
        };
        let GpuError::LibraryNotFound { tried, .. } = &err else {
            panic!("wrong error: {err:?}");
        };
        assert_eq!(tried.len(), 3);
        let msg = err.to_string();
        assert!(msg.starts_with("NVML library not found: "), "{msg}");
        assert!(
            msg.contains("gantry-gpu-no-nvml/usr/lib64/libnvidia-ml.so.1"),
            "{msg}"
        );
        assert!(msg.contains("libgantry-definitely-missing.so.1"), "{msg}");
        assert!(
            msg.ends_with("; is the NVIDIA driver installed? set --driver-root"),
            "{msg}"
        );
    }

    #[test]
    fn a_file_that_is_not_a_library_is_skipped_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("gantry-gpu-fake-{}", std::process::id()));
        let lib = dir.join("usr/lib64");
        std::fs::create_dir_all(&lib).expect("temp dir");
        std::fs::write(lib.join(SONAME), b"not an ELF file").expect("fake lib");
        let err = load(&[lib.join(SONAME)]).err();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            matches!(err, Some(GpuError::LibraryNotFound { .. })),
            "{err:?}"
        );
    }
}
