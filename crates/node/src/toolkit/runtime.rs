//! The container runtimes we configure, and how (paths, names, options).

use super::error::ToolkitError;
use super::hostfs::HostRoot;
use super::{containerd, docker};
use std::fmt;
use std::path::{Path, PathBuf};

/// A container runtime we know how to configure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Containerd,
    Docker,
    Crio,
}

impl Runtime {
    pub fn default_config(self) -> &'static str {
        match self {
            Runtime::Containerd => "/etc/containerd/config.toml",
            Runtime::Docker => "/etc/docker/daemon.json",
            Runtime::Crio => "/etc/crio/crio.conf",
        }
    }

    /// The drop-in upstream writes (Docker has none).
    pub fn default_drop_in(self) -> Option<&'static str> {
        match self {
            Runtime::Containerd => Some("/etc/containerd/conf.d/99-nvidia.toml"),
            Runtime::Crio => Some("/etc/crio/crio.conf.d/99-nvidia.toml"),
            Runtime::Docker => None,
        }
    }

    /// The daemon's process name (`/proc/<pid>/comm`).
    pub fn process_name(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::Docker => "dockerd",
            Runtime::Crio => "crio",
        }
    }

    pub fn default_pid_file(self) -> &'static str {
        match self {
            Runtime::Containerd => "/run/containerd/containerd.pid",
            Runtime::Docker => "/var/run/docker.pid",
            Runtime::Crio => "/var/run/crio/crio.pid",
        }
    }

    fn sockets(self) -> &'static [&'static str] {
        match self {
            Runtime::Containerd => &[
                "/run/containerd/containerd.sock",
                "/var/run/containerd/containerd.sock",
            ],
            Runtime::Docker => &["/var/run/docker.sock", "/run/docker.sock"],
            Runtime::Crio => &["/var/run/crio/crio.sock", "/run/crio/crio.sock"],
        }
    }

    /// Picks the node's runtime: the first (containerd, CRI-O, Docker) whose socket or config
    /// file exists under the host root. containerd comes first because Docker runs on it.
    pub fn detect(host: &HostRoot) -> Result<Runtime, ToolkitError> {
        [Runtime::Containerd, Runtime::Crio, Runtime::Docker]
            .into_iter()
            .find(|r| {
                r.sockets()
                    .iter()
                    .chain([r.default_config()].iter())
                    .any(|p| host.resolve(Path::new(p)).is_some())
            })
            .ok_or_else(|| {
                ToolkitError::config(
                    host.root(),
                    "no container runtime found (looked for containerd, CRI-O and Docker sockets and \
                     config files under this host root); pass --runtime",
                )
            })
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Containerd => "containerd",
            Runtime::Docker => "docker",
            Runtime::Crio => "crio",
        })
    }
}

/// How to configure one runtime. Paths are host paths (resolved under the host root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    pub runtime: Runtime,
    /// The runtime's main config file.
    pub config: PathBuf,
    /// containerd: write the drop-in here plus an `imports` line (else edit `config` in place).
    /// CRI-O: our drop-in (always used). Docker: ignored.
    pub drop_in: Option<PathBuf>,
    pub runtime_name: String,
    /// Absolute host path of `nvidia-container-runtime`.
    pub binary_path: String,
    pub set_as_default: bool,
    pub enable_cdi: bool,
}

impl RuntimeConfig {
    /// Upstream defaults for `runtime` with the runtime binary in `toolkit_dir`; containerd is
    /// edited in place unless `drop_in` is set afterwards.
    pub fn new(runtime: Runtime, toolkit_dir: &Path) -> Self {
        Self {
            runtime,
            config: PathBuf::from(runtime.default_config()),
            drop_in: match runtime {
                Runtime::Crio => runtime.default_drop_in().map(PathBuf::from),
                _ => None,
            },
            runtime_name: super::names::DEFAULT_RUNTIME_NAME.to_string(),
            binary_path: toolkit_dir
                .join("nvidia-container-runtime")
                .to_string_lossy()
                .into_owned(),
            set_as_default: false,
            enable_cdi: false,
        }
    }

    pub(crate) fn containerd(&self, set_as_default: bool, enable_cdi: bool) -> containerd::Options {
        containerd::Options {
            runtime_name: self.runtime_name.clone(),
            binary_path: self.binary_path.clone(),
            set_as_default,
            enable_cdi,
        }
    }

    pub(crate) fn docker(&self, set_as_default: bool, enable_cdi: bool) -> docker::Options {
        docker::Options {
            runtime_name: self.runtime_name.clone(),
            binary_path: self.binary_path.clone(),
            set_as_default,
            enable_cdi,
        }
    }

    /// Every option combination an earlier install may have used (for "is this file exactly
    /// what we wrote?" on uninstall).
    pub(crate) fn variants(&self) -> [(bool, bool); 4] {
        [
            (self.set_as_default, self.enable_cdi),
            (!self.set_as_default, self.enable_cdi),
            (self.set_as_default, !self.enable_cdi),
            (!self.set_as_default, !self.enable_cdi),
        ]
    }
}
