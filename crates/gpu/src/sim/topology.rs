//! Interconnect of a simulated node: NVSwitch (all pairs) for 8-GPU SXM boards, direct NVLink
//! mesh for 2–4 SXM GPUs, PCIe (switch pairs under two CPU sockets) otherwise.

use crate::catalog::GpuModel;
use crate::sim::ids;
use crate::types::{NvLinkInfo, TopologyLevel};

/// NVSwitch chips on an HGX board of this many NVLinks per GPU (A100: 6, H100/H200: 4).
fn nvswitches(model: &GpuModel) -> u32 {
    if model.nvlinks >= 18 { 4 } else { 6 }
}

fn uses_switch(count: u32) -> bool {
    count > 4
}

/// How GPU `a` reaches GPU `b` on a node of `count` GPUs of `model`.
pub fn level(model: &GpuModel, count: u32, a: u32, b: u32) -> TopologyLevel {
    if a == b {
        return TopologyLevel::Internal;
    }
    if model.nvlinks > 0 && count > 1 {
        let links = if uses_switch(count) {
            model.nvlinks
        } else {
            model.nvlinks / (count - 1)
        };
        return TopologyLevel::NvLink { links };
    }
    let half = count.div_ceil(2).max(1);
    if a / 2 == b / 2 {
        TopologyLevel::Single
    } else if a / half == b / half {
        TopologyLevel::Node
    } else {
        TopologyLevel::System
    }
}

/// The NVLinks of GPU `gpu`, with the KiB counters split evenly over active links.
pub fn nvlinks(
    model: &GpuModel,
    gpu: u32,
    buses: &[String],
    tx_kib: u64,
    rx_kib: u64,
) -> Vec<NvLinkInfo> {
    let count = buses.len() as u32;
    if model.nvlinks == 0 {
        return Vec::new();
    }
    let peers: Vec<u32> = (0..count).filter(|&p| p != gpu).collect();
    let active_links = if count <= 1 {
        0
    } else if uses_switch(count) {
        model.nvlinks
    } else {
        (model.nvlinks / (count - 1)) * (count - 1)
    };
    let per_link = |v: u64| {
        if active_links == 0 {
            0
        } else {
            v / u64::from(active_links)
        }
    };
    (0..model.nvlinks)
        .map(|link| {
            let active = link < active_links;
            let (remote, is_switch) = if !active {
                (String::new(), false)
            } else if uses_switch(count) {
                (ids::nvswitch_bus_id(link % nvswitches(model)), true)
            } else {
                let per_peer = model.nvlinks / (count - 1);
                let peer = peers[(link / per_peer.max(1)) as usize % peers.len()];
                (buses[peer as usize].clone(), false)
            };
            NvLinkInfo {
                link,
                active,
                remote_pci_bus_id: remote,
                remote_is_switch: is_switch,
                tx_kib: if active { per_link(tx_kib) } else { 0 },
                rx_kib: if active { per_link(rx_kib) } else { 0 },
                crc_flit_errors: 0,
                crc_data_errors: 0,
                replay_errors: 0,
                recovery_errors: 0,
            }
        })
        .collect()
}
