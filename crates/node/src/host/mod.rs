//! The host side that every agent shares: where the agent's paths are on the machine it runs
//! on ([`HostPaths`]), the kubelet's PodResources API ([`pod_resources`]), and the node's name.

pub mod paths;
pub mod pod_resources;

pub use paths::HostPaths;

/// The `Hostname` label: `NODE_NAME`, else the kernel's host name.
pub fn hostname_from_env() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "localhost".into())
}
