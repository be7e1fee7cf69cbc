//! Profiling metrics (DCGM's `DCGM_FI_PROF_*`) from GPM samples.

use super::*;

impl NvmlBackend {
    pub(super) fn read_profiling(&self, gpu: u32, gpu_instance: Option<u32>) -> Result<Profiling> {
        let d = self.dev(gpu)?;
        if !d
            .gpm_support()
            .map_err(|e| err(gpu, "nvmlGpmQueryDeviceSupport", e))?
        {
            return Err(GpuError::NotSupported {
                gpu,
                what: "GPM profiling metrics".to_string(),
            });
        }
        let key = (gpu, gpu_instance);
        let previous = self
            .gpm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        let first = match previous {
            Some(s) => s,
            None => {
                let s = self.gpm_sample(gpu, &d, gpu_instance)?;
                // GPM needs two samples some time apart; on the first call take both now.
                std::thread::sleep(Duration::from_millis(100));
                s
            }
        };
        let second = self.gpm_sample(gpu, &d, gpu_instance)?;
        use GpmMetricId as M;
        let ids = [
            M::GraphicsUtil,
            M::SmUtil,
            M::SmOccupancy,
            M::AnyTensorUtil,
            M::DramBwUtil,
            M::Fp64Util,
            M::Fp32Util,
            M::Fp16Util,
            M::PcieTxPerSec,
            M::PcieRxPerSec,
        ];
        let values = gpm_metrics_get(self.nvml, &first, &second, &ids)
            .map_err(|e| err(gpu, "nvmlGpmMetricsGet", e))?;
        let v = |i: usize| {
            values
                .get(i)
                .and_then(|r| r.as_ref().ok())
                .map(|m| m.value)
                .unwrap_or(0.0)
        };
        self.gpm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, second);
        // Utilisations come in percent, PCIe rates in MiB/s.
        Ok(Profiling {
            graphics_active: v(0) / 100.0,
            sm_active: v(1) / 100.0,
            sm_occupancy: v(2) / 100.0,
            tensor_active: v(3) / 100.0,
            dram_active: v(4) / 100.0,
            fp64_active: v(5) / 100.0,
            fp32_active: v(6) / 100.0,
            fp16_active: v(7) / 100.0,
            pcie_tx_bytes_per_sec: v(8) * MIB as f64,
            pcie_rx_bytes_per_sec: v(9) * MIB as f64,
        })
    }
}
