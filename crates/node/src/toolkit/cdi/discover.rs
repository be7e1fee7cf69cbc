//! Finds the driver's files on the host: libraries, binaries, firmware, IPC sockets and device
//! nodes. Filesystem only; what the GPUs are comes from elsewhere (`gpu::Backend`, or the
//! device nodes as a fallback).

use crate::toolkit::error::ToolkitError;
use crate::toolkit::hostfs::HostRoot;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Directories searched for driver libraries, in order (the first copy of a file wins).
pub const LIBRARY_DIRS: &[&str] = &[
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/lib",
];
/// Directories searched for driver binaries.
pub const BINARY_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/bin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];
/// The `bin` of the `/usr/local/nvidia/{bin,lib64}` layout (GKE-style installs, and GPU machines
/// whose `/usr/bin/nvidia-smi` is a wrapper that execs the binary there). Binaries found here are
/// mounted too, at the same path, so such a wrapper still finds what it execs in a container.
pub const DRIVER_BINARY_DIRS: &[&str] = &["/usr/local/nvidia/bin"];
/// The driver binaries containers get.
pub const BINARIES: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
];
/// Daemon sockets / directories containers talk to.
pub const IPC_PATHS: &[&str] = &[
    "/run/nvidia-persistenced/socket",
    "/var/run/nvidia-persistenced/socket",
    "/run/nvidia-fabricmanager/socket",
    "/var/run/nvidia-fabricmanager/socket",
    "/tmp/nvidia-mps",
];
/// Control device nodes, in the order they are listed in the spec.
pub const CONTROL_NODES: &[&str] = &[
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];
const FIRMWARE_DIRS: &[&str] = &["/lib/firmware/nvidia", "/usr/lib/firmware/nvidia"];

/// What the driver put on the host. Paths are as seen inside the driver root (for files) or
/// the dev root (for device nodes), e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverFiles {
    /// Host path of the driver root (`/`, or `/run/nvidia/driver` for the driver container).
    pub driver_root: PathBuf,
    /// Host path the `/dev` nodes live under (usually the driver root).
    pub dev_root: PathBuf,
    pub version: Option<String>,
    pub libraries: Vec<PathBuf>,
    pub binaries: Vec<PathBuf>,
    pub firmware: Vec<PathBuf>,
    pub ipc: Vec<PathBuf>,
    pub control_nodes: Vec<PathBuf>,
    /// Minors N of the `/dev/nvidiaN` nodes present.
    pub gpu_minors: BTreeSet<u32>,
    /// Minors N of the `/dev/nvidia-caps/nvidia-capN` nodes present.
    pub cap_minors: BTreeSet<u32>,
}

fn is_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

fn list(root: &HostRoot, dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.real_path(dir))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn is_file(root: &HostRoot, path: &Path) -> bool {
    root.resolve(path).is_some_and(|p| !root.path(&p).is_dir())
}

/// The kernel module's version from `/proc/driver/nvidia/version` text.
pub fn parse_proc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| is_version(w))
        .map(str::to_string)
}

/// Scans `driver_root` and `dev_root` (host paths) under `host`. `version` overrides the
/// driver version, which is otherwise read from `/proc/driver/nvidia/version` or the
/// `libnvidia-ml.so.<version>` / `libcuda.so.<version>` file names.
pub fn discover(
    host: &HostRoot,
    driver_root: &Path,
    dev_root: &Path,
    version: Option<&str>,
) -> Result<DriverFiles, ToolkitError> {
    let driver = HostRoot::new(host.real_path(driver_root));
    let dev = HostRoot::new(host.real_path(dev_root));
    if !driver.root().is_dir() {
        return Err(ToolkitError::Cdi(format!(
            "driver root {} does not exist",
            driver.root().display()
        )));
    }

    // Library directories, each once (on merged-/usr systems /lib is /usr/lib): those the
    // dynamic linker is configured with first, as ldconfig orders them, then the usual ones.
    let mut lib_dirs: Vec<PathBuf> = Vec::new();
    let configured = ld_so_conf_dirs(&driver, Path::new("/etc/ld.so.conf"), 0);
    for dir in configured
        .iter()
        .map(PathBuf::as_path)
        .chain(LIBRARY_DIRS.iter().map(Path::new))
    {
        if let Some(real) = driver.resolve(dir)
            && driver.path(&real).is_dir()
            && !lib_dirs.contains(&real)
        {
            lib_dirs.push(real);
        }
    }
    let version = match version {
        Some(v) => Some(v.to_string()),
        None => host
            .read(Path::new("/proc/driver/nvidia/version"))?
            .and_then(|b| parse_proc_version(&String::from_utf8_lossy(&b)))
            .or_else(|| version_from_libraries(&driver, &lib_dirs)),
    };

    let mut files = DriverFiles {
        driver_root: driver_root.to_path_buf(),
        dev_root: dev_root.to_path_buf(),
        version: version.clone(),
        ..Default::default()
    };
    if let Some(v) = &version {
        let suffix = format!(".so.{v}");
        let mut seen = BTreeSet::new();
        for dir in &lib_dirs {
            for name in list(&driver, dir) {
                let path = dir.join(&name);
                // One copy of each library: the first the linker would find.
                if name.ends_with(&suffix) && is_file(&driver, &path) && seen.insert(name) {
                    files.libraries.push(path);
                }
            }
        }
        for dir in FIRMWARE_DIRS {
            let Some(real) = driver.resolve(&Path::new(dir).join(v)) else {
                continue;
            };
            for name in list(&driver, &real) {
                let path = real.join(&name);
                if name.starts_with("gsp")
                    && name.ends_with(".bin")
                    && is_file(&driver, &path)
                    && !files.firmware.contains(&path)
                {
                    files.firmware.push(path);
                }
            }
        }
    }
    let mut bin_dirs: Vec<PathBuf> = Vec::new();
    for dir in BINARY_DIRS {
        if let Some(real) = driver.resolve(Path::new(dir))
            && !bin_dirs.contains(&real)
        {
            bin_dirs.push(real);
        }
    }
    let driver_bin_dirs: Vec<PathBuf> = DRIVER_BINARY_DIRS
        .iter()
        .filter_map(|d| driver.resolve(Path::new(d)))
        .filter(|d| !bin_dirs.contains(d))
        .collect();
    for name in BINARIES {
        // The first on the usual search path, then the driver's own directory.
        let first = bin_dirs
            .iter()
            .map(|d| d.join(name))
            .find(|p| is_file(&driver, p));
        let own = driver_bin_dirs
            .iter()
            .map(|d| d.join(name))
            .filter(|p| is_file(&driver, p));
        for path in first.into_iter().chain(own) {
            if !files.binaries.contains(&path) {
                files.binaries.push(path);
            }
        }
    }
    for p in IPC_PATHS {
        if let Some(real) = driver.resolve(Path::new(p))
            && !files.ipc.contains(&real)
        {
            files.ipc.push(real);
        }
    }
    for node in CONTROL_NODES {
        if dev.resolve(Path::new(node)).is_some() {
            files.control_nodes.push(PathBuf::from(node));
        }
    }
    files.gpu_minors = numbered(&list(&dev, Path::new("/dev")), "nvidia");
    files.cap_minors = numbered(&list(&dev, Path::new("/dev/nvidia-caps")), "nvidia-cap");
    Ok(files)
}

/// The directories listed in an `ld.so.conf` (following `include` lines, whose globs may use
/// `*` in the file name), in order.
pub fn ld_so_conf_dirs(root: &HostRoot, conf: &Path, depth: usize) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(root.real_path(conf)) else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include").filter(|_| depth < 4) {
            for pattern in pattern.split_whitespace() {
                let pattern = Path::new(pattern);
                let pattern = if pattern.is_absolute() {
                    pattern.to_path_buf()
                } else {
                    conf.parent().unwrap_or(Path::new("/")).join(pattern)
                };
                for file in glob_files(root, &pattern) {
                    dirs.extend(ld_so_conf_dirs(root, &file, depth + 1));
                }
            }
        } else {
            dirs.extend(
                line.split([' ', '\t', ':', ','])
                    .filter(|d| d.starts_with('/'))
                    .map(PathBuf::from),
            );
        }
    }
    dirs
}

/// Files matching a path whose last component may hold one `*`, sorted.
fn glob_files(root: &HostRoot, pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (
        pattern.parent(),
        pattern.file_name().and_then(|n| n.to_str()),
    ) else {
        return Vec::new();
    };
    let Some((head, tail)) = name.split_once('*') else {
        return vec![pattern.to_path_buf()];
    };
    list(root, dir)
        .into_iter()
        .filter(|n| n.len() >= head.len() + tail.len() && n.starts_with(head) && n.ends_with(tail))
        .map(|n| dir.join(n))
        .collect()
}

fn numbered(names: &[String], prefix: &str) -> BTreeSet<u32> {
    names
        .iter()
        .filter_map(|n| n.strip_prefix(prefix))
        .filter(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
        .filter_map(|rest| rest.parse().ok())
        .collect()
}

fn version_from_libraries(driver: &HostRoot, lib_dirs: &[PathBuf]) -> Option<String> {
    for lib in ["libnvidia-ml.so.", "libcuda.so."] {
        for dir in lib_dirs {
            let mut found: Vec<String> = list(driver, dir)
                .into_iter()
                .filter_map(|n| n.strip_prefix(lib).map(str::to_string))
                .filter(|v| is_version(v))
                .collect();
            found.sort_by_key(|v| {
                v.split('.')
                    .map(|p| p.parse::<u64>().unwrap_or(0))
                    .collect::<Vec<_>>()
            });
            if let Some(v) = found.pop() {
                return Some(v);
            }
        }
    }
    None
}

/// Parses `/proc/driver/nvidia-caps/mig-minors` (`gpu0/gi1/ci0/access 13` lines).
pub fn parse_mig_minors(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|l| {
            let (name, minor) = l.trim().rsplit_once(' ')?;
            Some((name.trim().to_string(), minor.trim().parse().ok()?))
        })
        .collect()
}

/// The GI and CI access cap minors of a MIG device on the GPU with device minor `gpu_minor`.
pub fn mig_cap_minors(
    minors: &BTreeMap<String, u32>,
    gpu_minor: u32,
    gi: u32,
    ci: u32,
) -> Option<(u32, u32)> {
    let gi_cap = minors.get(&format!("gpu{gpu_minor}/gi{gi}/access"))?;
    let ci_cap = minors.get(&format!("gpu{gpu_minor}/gi{gi}/ci{ci}/access"))?;
    Some((*gi_cap, *ci_cap))
}

/// The DRM card and render node numbers of a PCI device (`/sys/bus/pci/devices/<bus>/drm`).
/// Accepts NVML's 8-digit PCI domain (`00000000:17:00.0`).
pub fn drm_nodes(host: &HostRoot, pci_bus_id: &str) -> (Option<u32>, Option<u32>) {
    let bus = pci_bus_id.to_ascii_lowercase();
    let bus = match bus.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => bus,
    };
    let names = list(
        host,
        &Path::new("/sys/bus/pci/devices").join(bus).join("drm"),
    );
    let card = numbered(&names, "card").into_iter().next();
    let render = numbered(&names, "renderD").into_iter().next();
    (card, render)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_version_line() {
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  (dvs-builder@U16-I3-B13-4-3)  Fri Mar 21 2025\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(parse_proc_version(text).as_deref(), Some("570.133.20"));
    }

    #[test]
    fn ld_so_conf_includes_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        root.write_atomic(
            Path::new("/etc/ld.so.conf"),
            b"include /etc/ld.so.conf.d/*.conf\n/opt/extra/lib # trailing\n",
        )
        .unwrap();
        root.write_atomic(
            Path::new("/etc/ld.so.conf.d/nvidia.conf"),
            b"/usr/local/nvidia/lib64\n/usr/local/nvidia/lib\n",
        )
        .unwrap();
        root.write_atomic(
            Path::new("/etc/ld.so.conf.d/a.conf"),
            b"# nothing\n/usr/local/lib\n",
        )
        .unwrap();
        root.write_atomic(Path::new("/etc/ld.so.conf.d/skip.txt"), b"/nope\n")
            .unwrap();
        let dirs = ld_so_conf_dirs(&root, Path::new("/etc/ld.so.conf"), 0);
        let want: Vec<PathBuf> = [
            "/usr/local/lib",
            "/usr/local/nvidia/lib64",
            "/usr/local/nvidia/lib",
            "/opt/extra/lib",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(dirs, want);
    }

    #[test]
    fn binaries_in_the_usr_local_nvidia_layout_are_found_beside_wrappers() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        let file = |p: &str, body: &[u8]| root.write_atomic(Path::new(p), body).unwrap();
        // /usr/bin/nvidia-smi is a wrapper; the binaries live in /usr/local/nvidia/bin.
        file(
            "/usr/bin/nvidia-smi",
            b"#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n",
        );
        file("/usr/local/nvidia/bin/nvidia-smi", b"\x7fELF");
        file("/usr/local/nvidia/bin/nvidia-debugdump", b"\x7fELF");
        file("/usr/local/nvidia/lib64/libcuda.so.580.1.2", b"");
        let files = discover(&root, Path::new("/"), Path::new("/"), Some("580.1.2")).unwrap();
        let want: Vec<PathBuf> = [
            "/usr/bin/nvidia-smi",
            "/usr/local/nvidia/bin/nvidia-smi",
            "/usr/local/nvidia/bin/nvidia-debugdump",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(files.binaries, want);
    }

    #[test]
    fn mig_minor_lookup() {
        let m =
            parse_mig_minors("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n");
        assert_eq!(mig_cap_minors(&m, 0, 1, 0), Some((12, 13)));
        assert_eq!(mig_cap_minors(&m, 0, 2, 0), None);
    }
}
