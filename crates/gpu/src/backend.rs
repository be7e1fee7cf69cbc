//! The seam: everything node agents ask of NVML, as one object-safe trait.

use std::time::Duration;

use crate::error::Result;
use crate::types::{
    Clocks, ComputeInstance, DeviceInfo, EccCounts, Event, GpuInstance, MemoryInfo, MigDevice,
    MigMode, MigProfile, NvLinkInfo, PcieInfo, PcieThroughput, Placement, Power, ProcessInfo,
    Profiling, RowRemap, Temperature, TopologyLevel, Utilization, Violations,
};

/// A source of GPU facts and the MIG controls. Shared as `Arc<dyn Backend>`.
///
/// GPUs are addressed by NVML index (`0..device_count()`); MIG devices by UUID or by
/// (GPU index, GPU-instance id, compute-instance id).
///
/// Cost on real hardware (NVML, H200, driver 580, warm; `examples/nvml_probe.rs`): memory,
/// utilisation, temperature, power, processes ≈ 1–8 µs; ECC, row remap, device info, MIG mode,
/// NVLinks ≈ 130–170 µs; clocks ≈ 3 ms, total energy ≈ 4 ms, violations ≈ 4 ms; PCIe
/// throughput ≈ 40 ms. Sample in the background, never per scrape.
pub trait Backend: Send + Sync {
    // ---- system ----
    /// Driver version, e.g. `580.159.04`.
    fn driver_version(&self) -> Result<String>;
    /// CUDA driver API version as NVML encodes it (`13000` = 13.0).
    fn cuda_driver_version(&self) -> Result<u32>;
    /// NVML library version, e.g. `13.580.159.04`.
    fn nvml_version(&self) -> Result<String>;
    fn device_count(&self) -> Result<u32>;

    // ---- per-GPU identity and state ----
    fn device_info(&self, gpu: u32) -> Result<DeviceInfo>;
    fn memory(&self, gpu: u32) -> Result<MemoryInfo>;
    /// Not supported on a GPU with MIG enabled (as on hardware).
    fn utilization(&self, gpu: u32) -> Result<Utilization>;
    fn temperature(&self, gpu: u32) -> Result<Temperature>;
    fn power(&self, gpu: u32) -> Result<Power>;
    /// Energy in millijoules since the driver was loaded.
    fn total_energy_mj(&self, gpu: u32) -> Result<u64>;
    fn clocks(&self, gpu: u32) -> Result<Clocks>;
    /// Accumulated clock-violation times per policy.
    fn violations(&self, gpu: u32) -> Result<Violations>;
    fn ecc(&self, gpu: u32) -> Result<EccCounts>;
    fn row_remap(&self, gpu: u32) -> Result<RowRemap>;
    fn pcie(&self, gpu: u32) -> Result<PcieInfo>;
    /// PCIe throughput. Slow on hardware: NVML samples each direction for 20 ms (about 40 ms a
    /// call on our H200), so call it from a background sampler, not per scrape.
    fn pcie_throughput(&self, gpu: u32) -> Result<PcieThroughput>;
    /// All NVLinks of the GPU (empty on PCIe-only boards).
    fn nvlinks(&self, gpu: u32) -> Result<Vec<NvLinkInfo>>;
    /// How GPU `a` reaches GPU `b`.
    fn topology(&self, a: u32, b: u32) -> Result<TopologyLevel>;
    /// Compute processes on the GPU (with their MIG instance when MIG is on).
    fn processes(&self, gpu: u32) -> Result<Vec<ProcessInfo>>;
    /// vGPU license state as dcgm-exporter reports it (`DCGM_FI_DEV_VGPU_LICENSE_STATUS`): the
    /// state of the vGPU licensable feature, 0 when the GPU is not a licensed vGPU.
    fn vgpu_license_status(&self, gpu: u32) -> Result<u32>;
    /// GPM profiling ratios for the GPU, or for one GPU instance of it, averaged since the
    /// previous call for the same target. `NotSupported` before Hopper.
    fn profiling(&self, gpu: u32, gpu_instance: Option<u32>) -> Result<Profiling>;

    // ---- MIG (read) ----
    fn mig_mode(&self, gpu: u32) -> Result<MigMode>;
    /// GPU-instance profiles of this GPU's model (empty when not MIG-capable).
    fn mig_profiles(&self, gpu: u32) -> Result<Vec<MigProfile>>;
    fn gpu_instances(&self, gpu: u32) -> Result<Vec<GpuInstance>>;
    fn compute_instances(&self, gpu: u32, gpu_instance: u32) -> Result<Vec<ComputeInstance>>;
    /// MIG devices (GI+CI pairs) of the GPU, in NVML MIG-index order.
    fn mig_devices(&self, gpu: u32) -> Result<Vec<MigDevice>>;
    /// Memory of one MIG device, by its `MIG-…` UUID.
    fn mig_device_memory(&self, uuid: &str) -> Result<MemoryInfo>;

    // ---- MIG (write; the MIG manager's calls) ----
    /// Request MIG on/off. Returns the new mode: `pending` is set at once, `current` follows
    /// when the GPU can be reset (no processes on it).
    fn set_mig_mode(&self, gpu: u32, enabled: bool) -> Result<MigMode>;
    /// Create a GPU instance of `profile` (name as in [`MigProfile::name`]), at `placement` or
    /// at the first free valid placement when `None`.
    fn create_gpu_instance(
        &self,
        gpu: u32,
        profile: &str,
        placement: Option<Placement>,
    ) -> Result<GpuInstance>;
    /// Destroy a GPU instance; refused while it still has compute instances.
    fn destroy_gpu_instance(&self, gpu: u32, gpu_instance: u32) -> Result<()>;
    /// Create a compute instance of `slices` compute slices inside a GPU instance.
    fn create_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        slices: u32,
    ) -> Result<ComputeInstance>;
    fn destroy_compute_instance(
        &self,
        gpu: u32,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<()>;

    // ---- events ----
    /// A new event stream over all GPUs for the kinds in `mask` (bits of
    /// [`crate::types::event_kind`]). Each subscriber gets every event from now on.
    fn subscribe(&self, mask: u64) -> Result<Box<dyn EventStream>>;
}

/// Called when an event arrives on a stream (see [`EventStream::on_event`]).
pub type Wake = std::sync::Arc<dyn Fn() + Send + Sync>;

/// A subscription to GPU events.
pub trait EventStream: Send {
    /// Wait up to `timeout` for the next event; `Ok(None)` on timeout.
    fn wait(&mut self, timeout: Duration) -> Result<Option<Event>>;

    /// Asks the stream to call `wake` whenever an event arrives, so a reader can sleep until
    /// then and take it with `wait(Duration::ZERO)`, instead of a thread blocking in `wait`.
    /// False where the stream can only be waited on (NVML's event sets): the reader needs a
    /// thread of its own. The simulated backend says yes: thousands of simulated nodes in one
    /// process would otherwise hold a thread per stream.
    fn on_event(&mut self, wake: Wake) -> bool {
        let _ = wake;
        false
    }
}
