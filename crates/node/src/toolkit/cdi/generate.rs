//! The CDI spec for a node's GPUs, as a pure function of what the GPUs are and which driver
//! files exist.

use super::discover::DriverFiles;
use super::spec::{
    ContainerEdits, Device, DeviceNode, Hook, Mount, Spec, minimum_version, validate,
};
use crate::toolkit::error::ToolkitError;
use std::collections::BTreeSet;
use std::path::Path;

/// A full GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gpu {
    pub index: u32,
    /// `GPU-…` as NVML reports it; no UUID-named device without it.
    pub uuid: Option<String>,
    /// Device minor: the GPU's node is `/dev/nvidia<minor>`.
    pub minor: u32,
    pub pci_bus_id: Option<String>,
    /// `/dev/dri/card<N>` and `/dev/dri/renderD<N>` of the GPU, if it has them.
    pub drm_card: Option<u32>,
    pub drm_render: Option<u32>,
}

/// A MIG device (GPU instance + compute instance) on the GPU with index `parent`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigDevice {
    pub parent: u32,
    /// Position among the parent's MIG devices: the `j` of the `<i>:<j>` name.
    pub index: u32,
    pub gi: u32,
    pub ci: u32,
    /// `MIG-…` as NVML reports it.
    pub uuid: Option<String>,
    /// Minors of `/dev/nvidia-caps/nvidia-cap<N>` granting access to the GI and the CI
    /// (see [`super::discover::mig_cap_minors`]).
    pub gi_cap_minor: u32,
    pub ci_cap_minor: u32,
}

/// Everything the spec is computed from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Input {
    pub gpus: Vec<Gpu>,
    pub migs: Vec<MigDevice>,
    pub driver: DriverFiles,
}

/// Naming and hook settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `nvidia.com/gpu`.
    pub kind: String,
    /// Host path of `nvidia-cdi-hook`.
    pub hook_path: String,
    /// Emit the `all` device.
    pub all_device: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            kind: "nvidia.com/gpu".to_string(),
            hook_path: format!("{}/nvidia-cdi-hook", crate::toolkit::DEFAULT_TOOLKIT_DIR),
            all_device: true,
        }
    }
}

const MOUNT_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "rbind", "rprivate"];
const IPC_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "bind", "noexec"];

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn under(root: &Path, inner: &Path) -> String {
    s(&root.join(inner.strip_prefix("/").unwrap_or(inner)))
}

fn node(dev_root: &Path, path: &str) -> DeviceNode {
    DeviceNode {
        path: path.to_string(),
        host_path: Some(under(dev_root, Path::new(path))),
        ..Default::default()
    }
}

fn hook(opts: &Options, args: Vec<String>) -> Hook {
    let mut full = vec!["nvidia-cdi-hook".to_string()];
    full.extend(args);
    Hook {
        hook_name: "createContainer".to_string(),
        path: opts.hook_path.clone(),
        args: full,
        env: vec!["NVIDIA_CTK_DEBUG=false".to_string()],
        timeout: None,
    }
}

fn gpu_edits(
    gpu: &Gpu,
    driver: &DriverFiles,
    opts: &Options,
) -> Result<ContainerEdits, ToolkitError> {
    if !driver.gpu_minors.contains(&gpu.minor) {
        return Err(ToolkitError::Cdi(format!(
            "GPU {} (minor {}): /dev/nvidia{} not found under {}",
            gpu.index,
            gpu.minor,
            gpu.minor,
            driver.dev_root.display()
        )));
    }
    let mut edits = ContainerEdits {
        device_nodes: vec![node(&driver.dev_root, &format!("/dev/nvidia{}", gpu.minor))],
        ..Default::default()
    };
    let mut links = Vec::new();
    for (n, kind, prefix) in [
        (gpu.drm_card, "card", "card"),
        (gpu.drm_render, "render", "renderD"),
    ] {
        let Some(n) = n else { continue };
        edits
            .device_nodes
            .push(node(&driver.dev_root, &format!("/dev/dri/{prefix}{n}")));
        if let Some(bus) = &gpu.pci_bus_id {
            links.push("--link".to_string());
            links.push(format!(
                "../{prefix}{n}::/dev/dri/by-path/pci-{}-{kind}",
                bus.to_ascii_lowercase()
            ));
        }
    }
    if !links.is_empty() {
        let mut args = vec!["create-symlinks".to_string()];
        args.extend(links);
        edits.hooks.push(hook(opts, args));
    }
    Ok(edits)
}

fn mig_edits(
    mig: &MigDevice,
    parent: &Gpu,
    driver: &DriverFiles,
) -> Result<ContainerEdits, ToolkitError> {
    if !driver.gpu_minors.contains(&parent.minor) {
        return Err(ToolkitError::Cdi(format!(
            "GPU {}: /dev/nvidia{} not found",
            parent.index, parent.minor
        )));
    }
    let mut nodes = vec![node(
        &driver.dev_root,
        &format!("/dev/nvidia{}", parent.minor),
    )];
    for cap in [mig.gi_cap_minor, mig.ci_cap_minor] {
        if !driver.cap_minors.contains(&cap) {
            return Err(ToolkitError::Cdi(format!(
                "MIG device {}:{} (GI {}, CI {}): /dev/nvidia-caps/nvidia-cap{cap} not found under {}",
                mig.parent,
                mig.index,
                mig.gi,
                mig.ci,
                driver.dev_root.display()
            )));
        }
        nodes.push(node(
            &driver.dev_root,
            &format!("/dev/nvidia-caps/nvidia-cap{cap}"),
        ));
    }
    Ok(ContainerEdits {
        device_nodes: nodes,
        ..Default::default()
    })
}

/// The edits every container using any of the spec's devices gets: control nodes, driver
/// libraries, binaries, firmware and sockets, and the hooks that make the libraries usable.
fn common_edits(driver: &DriverFiles, opts: &Options) -> ContainerEdits {
    let mut edits = ContainerEdits {
        env: vec!["NVIDIA_VISIBLE_DEVICES=void".to_string()],
        ..Default::default()
    };
    let libcuda = driver.libraries.iter().find(|l| {
        l.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("libcuda.so."))
    });
    let libcuda_dir = libcuda.and_then(|l| l.parent());
    if let Some(dir) = libcuda_dir {
        edits.env.push(format!("NVIDIA_CTK_LIBCUDA_DIR={}", s(dir)));
    }
    for n in &driver.control_nodes {
        edits.device_nodes.push(node(&driver.dev_root, &s(n)));
    }
    let mount = |p: &Path, options: &[&str]| Mount {
        host_path: under(&driver.driver_root, p),
        container_path: s(p),
        kind: None,
        options: options.iter().map(|o| o.to_string()).collect(),
    };
    for p in driver
        .libraries
        .iter()
        .chain(&driver.binaries)
        .chain(&driver.firmware)
    {
        edits.mounts.push(mount(p, MOUNT_OPTIONS));
    }
    for p in &driver.ipc {
        edits.mounts.push(mount(p, IPC_OPTIONS));
    }
    if let Some(dir) = libcuda_dir {
        edits.hooks.push(hook(
            opts,
            vec![
                "create-symlinks".into(),
                "--link".into(),
                format!("libcuda.so.1::{}", s(&dir.join("libcuda.so"))),
            ],
        ));
        if let Some(v) = &driver.version {
            edits.hooks.push(hook(
                opts,
                vec![
                    "enable-cuda-compat".into(),
                    format!("--host-driver-version={v}"),
                ],
            ));
        }
    }
    let folders: BTreeSet<String> = driver
        .libraries
        .iter()
        .filter_map(|l| l.parent())
        .map(s)
        .collect();
    if !folders.is_empty() {
        let mut args = vec!["update-ldcache".to_string()];
        for f in folders {
            args.push("--folder".into());
            args.push(f);
        }
        edits.hooks.push(hook(opts, args));
    }
    edits
}

fn merge_into(all: &mut ContainerEdits, edits: &ContainerEdits) {
    for n in &edits.device_nodes {
        if !all.device_nodes.iter().any(|m| m.path == n.path) {
            all.device_nodes.push(n.clone());
        }
    }
    for h in &edits.hooks {
        if !all.hooks.contains(h) {
            all.hooks.push(h.clone());
        }
    }
}

/// Builds the spec: per GPU the devices `<index>` and its UUID, per MIG device `<gpu>:<mig>` and
/// its UUID, then `all`; with the shared edits at the top level. The result is validated.
pub fn generate(input: &Input, opts: &Options) -> Result<Spec, ToolkitError> {
    let mut gpus = input.gpus.clone();
    gpus.sort_by_key(|g| g.index);
    let mut migs = input.migs.clone();
    migs.sort_by_key(|m| (m.parent, m.index));

    let mut devices = Vec::new();
    let mut push = |name: String, edits: &ContainerEdits| {
        devices.push(Device {
            name,
            container_edits: edits.clone(),
            ..Default::default()
        })
    };
    for gpu in &gpus {
        let edits = gpu_edits(gpu, &input.driver, opts)?;
        push(gpu.index.to_string(), &edits);
        if let Some(uuid) = &gpu.uuid {
            push(uuid.clone(), &edits);
        }
        for mig in migs.iter().filter(|m| m.parent == gpu.index) {
            let edits = mig_edits(mig, gpu, &input.driver)?;
            push(format!("{}:{}", mig.parent, mig.index), &edits);
            if let Some(uuid) = &mig.uuid {
                push(uuid.clone(), &edits);
            }
        }
    }
    if let Some(orphan) = migs
        .iter()
        .find(|m| !gpus.iter().any(|g| g.index == m.parent))
    {
        return Err(ToolkitError::Cdi(format!(
            "MIG device {}:{} names GPU {}, which is not in the list",
            orphan.parent, orphan.index, orphan.parent
        )));
    }
    if opts.all_device && !devices.is_empty() && !devices.iter().any(|d| d.name == "all") {
        let mut all = ContainerEdits::default();
        for d in &devices {
            merge_into(&mut all, &d.container_edits);
        }
        devices.push(Device {
            name: "all".to_string(),
            container_edits: all,
            ..Default::default()
        });
    }

    let mut spec = Spec {
        cdi_version: String::new(),
        kind: opts.kind.clone(),
        devices,
        container_edits: common_edits(&input.driver, opts),
        ..Default::default()
    };
    spec.cdi_version = minimum_version(&spec).to_string();
    validate(&spec).map_err(|problems| {
        ToolkitError::Cdi(format!(
            "generated spec is invalid: {}",
            problems.join("; ")
        ))
    })?;
    Ok(spec)
}

/// GPUs as the device nodes show them, for when no GPU backend is at hand: index by minor
/// order, no UUIDs (so no UUID-named devices) and no PCI information.
pub fn gpus_from_device_nodes(driver: &DriverFiles) -> Vec<Gpu> {
    driver
        .gpu_minors
        .iter()
        .enumerate()
        .map(|(i, minor)| Gpu {
            index: i as u32,
            minor: *minor,
            ..Default::default()
        })
        .collect()
}
