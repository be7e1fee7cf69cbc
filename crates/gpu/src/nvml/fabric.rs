//! NVLink state and counters, and the topology between two GPUs.

use super::*;

impl NvmlBackend {
    pub(super) fn read_nvlinks(&self, gpu: u32) -> Result<Vec<NvLinkInfo>> {
        let d = self.dev(gpu)?;
        let mut links = Vec::new();
        for link in 0..MAX_NVLINKS {
            let l = d.link_wrapper_for(link);
            let Some(active) =
                optional(l.is_active()).map_err(|e| err(gpu, "nvmlDeviceGetNvLinkState", e))?
            else {
                continue;
            };
            let remote = if active {
                optional(l.remote_pci_info())
                    .map_err(|e| err(gpu, "nvmlDeviceGetNvLinkRemotePciInfo", e))?
                    .map(|p| p.bus_id)
                    .unwrap_or_default()
            } else {
                String::new()
            };
            let errors = |c: ErrorCounter| {
                optional(l.error_counter(c))
                    .map(|v| v.unwrap_or(0))
                    .map_err(|e| err(gpu, "nvmlDeviceGetNvLinkErrorCounter", e))
            };
            links.push(NvLinkInfo {
                link,
                active,
                remote_is_switch: active && !remote.is_empty() && !self.gpu_buses.contains(&remote),
                remote_pci_bus_id: remote,
                tx_kib: 0,
                rx_kib: 0,
                crc_flit_errors: errors(ErrorCounter::DlCrcFlit)?,
                crc_data_errors: errors(ErrorCounter::DlCrcData)?,
                replay_errors: errors(ErrorCounter::DlReplay)?,
                recovery_errors: errors(ErrorCounter::DlRecovery)?,
            });
        }
        let fields: Vec<(u32, u32)> = links
            .iter()
            .flat_map(|l| {
                [
                    (FI_NVLINK_THROUGHPUT_DATA_TX, l.link),
                    (FI_NVLINK_THROUGHPUT_DATA_RX, l.link),
                ]
            })
            .collect();
        if !fields.is_empty()
            && let Ok(values) = raw::field_values(self.nvml, &d, &fields)
        {
            for (l, pair) in links.iter_mut().zip(values.chunks(2)) {
                l.tx_kib = pair.first().copied().flatten().unwrap_or(0);
                l.rx_kib = pair.get(1).copied().flatten().unwrap_or(0);
            }
        }
        Ok(links)
    }

    pub(super) fn read_topology(&self, a: u32, b: u32) -> Result<TopologyLevel> {
        if a == b {
            self.dev(a)?;
            return Ok(TopologyLevel::Internal);
        }
        let (da, db) = (self.dev(a)?, self.dev(b)?);
        let nvlink = optional(da.p2p_status(&db, P2pCapabilitiesIndex::NvLink))
            .map_err(|e| err(a, "nvmlDeviceGetP2PStatus", e))?;
        if nvlink == Some(P2pStatus::Ok) {
            let b_bus = db
                .pci_info()
                .map_err(|e| err(b, "nvmlDeviceGetPciInfo", e))?
                .bus_id;
            let links = self.nvlinks(a)?;
            let direct = links
                .iter()
                .filter(|l| l.active && l.remote_pci_bus_id == b_bus)
                .count();
            let switched = links
                .iter()
                .filter(|l| l.active && l.remote_is_switch)
                .count();
            return Ok(TopologyLevel::NvLink {
                links: (direct + switched) as u32,
            });
        }
        let level = da
            .topology_common_ancestor(db)
            .map_err(|e| err(a, "nvmlDeviceGetTopologyCommonAncestor", e))?;
        Ok(match level {
            NvTopo::Internal => TopologyLevel::Internal,
            NvTopo::Single => TopologyLevel::Single,
            NvTopo::Multiple => TopologyLevel::Multiple,
            NvTopo::HostBridge => TopologyLevel::HostBridge,
            NvTopo::Node => TopologyLevel::Node,
            NvTopo::System => TopologyLevel::System,
        })
    }
}
