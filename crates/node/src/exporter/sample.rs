//! Reading the backend into an immutable [`Snapshot`]: one entity per GPU, or one per GPU
//! instance on a GPU with MIG on (as dcgm-exporter reports them). Only the selected fields
//! are read. Runs on the sampler thread; scrapes never call in here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_gpu::{Backend, EventStream, GpuError, MigDevice, Profiling, event_kind};

use super::fields::{FIELD_COUNT, Field, LABEL_FIELD_COUNT, LabelField, MetricSet};

/// One field value: integer fields print as integers, doubles with six decimals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
}

pub type Values = [Option<Value>; FIELD_COUNT];

/// A GPU instance an entity stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInstanceRef {
    /// GI profile name (`GPU_I_PROFILE`), e.g. `3g.71gb`.
    pub profile: String,
    /// NVML GPU-instance id (`GPU_I_ID`).
    pub id: u32,
}

/// One exported entity: a whole GPU or a GPU instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Entity {
    pub gpu: u32,
    /// UUID of the physical GPU (also on GPU-instance entities).
    pub uuid: String,
    pub pci_bus_id: String,
    pub model: String,
    pub gpu_instance: Option<GpuInstanceRef>,
    pub values: Values,
    pub labels: [Option<String>; LABEL_FIELD_COUNT],
}

impl Entity {
    pub fn get(&self, f: Field) -> Option<Value> {
        self.values[f as usize]
    }

    /// The key pod attribution matches on: the GPU UUID, or `<gpu>-<gi>` for an instance.
    pub fn pod_key(&self) -> String {
        match &self.gpu_instance {
            Some(gi) => format!("{}-{}", self.gpu, gi.id),
            None => self.uuid.clone(),
        }
    }
}

/// Everything one sampling pass read.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub entities: Vec<Entity>,
    /// GPU UUID by NVML index.
    pub gpu_uuids: Vec<String>,
    /// MIG device UUID → (GPU index, GPU-instance id, MIG device index).
    pub mig: HashMap<String, (u32, u32, u32)>,
}

impl Snapshot {
    /// Resolve a device-plugin device id (replica suffix already stripped) to an entity key.
    pub fn key_for_device(&self, id: &str) -> Option<String> {
        if let Some((gpu, gi, _)) = self.mig.get(id) {
            return Some(format!("{gpu}-{gi}"));
        }
        if self.gpu_uuids.iter().any(|u| u == id) {
            return Some(id.to_string());
        }
        // deviceIDStrategy=index: `i` for a GPU, `i:j` for MIG device j of GPU i.
        match id.split_once(':') {
            None => id
                .parse::<usize>()
                .ok()
                .and_then(|i| self.gpu_uuids.get(i).cloned()),
            Some((g, j)) => {
                let (g, j) = (g.parse::<u32>().ok()?, j.parse::<u32>().ok()?);
                self.mig
                    .values()
                    .find(|(gpu, _, idx)| *gpu == g && *idx == j)
                    .map(|(gpu, gi, _)| format!("{gpu}-{gi}"))
            }
        }
    }
}

/// Last XID seen per (GPU, GPU instance); `None` instance = not attributed to one.
#[derive(Debug, Default)]
pub struct XidLog {
    last: Mutex<HashMap<(u32, Option<u32>), u64>>,
}

impl XidLog {
    pub fn record(&self, gpu: u32, gpu_instance: Option<u32>, xid: u64) {
        if let Ok(mut m) = self.last.lock() {
            m.insert((gpu, gpu_instance), xid);
        }
    }

    /// The last XID for an instance, else the GPU-wide one, else 0.
    pub fn get(&self, gpu: u32, gpu_instance: Option<u32>) -> u64 {
        let Ok(m) = self.last.lock() else { return 0 };
        gpu_instance
            .and_then(|gi| m.get(&(gpu, Some(gi))))
            .or_else(|| m.get(&(gpu, None)))
            .copied()
            .unwrap_or(0)
    }
}

/// Records every XID event `stream` holds now, without waiting.
pub fn drain_xids(stream: &mut dyn EventStream, log: &XidLog) -> Result<(), GpuError> {
    while let Some(ev) = stream.wait(Duration::ZERO)? {
        if ev.kind == event_kind::XID_CRITICAL {
            log.record(ev.gpu, ev.gpu_instance_id, ev.xid);
        }
    }
    Ok(())
}

/// Follow XID events on `stream` until `stop` says so (a thread blocking in the wait).
pub fn follow_xids(
    stream: &mut dyn EventStream,
    log: &XidLog,
    stop: &std::sync::atomic::AtomicBool,
) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match stream.wait(Duration::from_millis(500)) {
            Ok(Some(ev)) if ev.kind == event_kind::XID_CRITICAL => {
                log.record(ev.gpu, ev.gpu_instance_id, ev.xid)
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "XID event wait failed; retrying");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// Which fields are wanted, so unselected NVML calls are skipped.
#[derive(Debug, Clone, Copy)]
struct Want([bool; FIELD_COUNT], [bool; LABEL_FIELD_COUNT]);

impl Want {
    fn any(&self, fields: &[Field]) -> bool {
        fields.iter().any(|f| self.0[*f as usize])
    }
}

/// Reads the backend. Keeps the NVLink counters of the previous pass to turn them into a rate.
pub struct Sampler {
    backend: Arc<dyn Backend>,
    want: Want,
    xids: Arc<XidLog>,
    nvlink_prev: HashMap<u32, (Instant, u64)>,
}

impl Sampler {
    pub fn new(backend: Arc<dyn Backend>, set: &MetricSet, xids: Arc<XidLog>) -> Self {
        let mut want = Want([false; FIELD_COUNT], [false; LABEL_FIELD_COUNT]);
        for m in &set.metrics {
            want.0[m.field as usize] = true;
        }
        for l in &set.labels {
            want.1[l.field as usize] = true;
        }
        let mut s = Sampler {
            backend,
            want,
            xids,
            nvlink_prev: HashMap::new(),
        };
        s.prime_nvlink();
        s
    }

    /// Take a baseline of the NVLink counters so the first pass already has a rate.
    fn prime_nvlink(&mut self) {
        if !self.want.any(&[Field::NvlinkBandwidthTotal]) {
            return;
        }
        let n = self.backend.device_count().unwrap_or(0);
        for gpu in 0..n {
            if let Ok(links) = self.backend.nvlinks(gpu) {
                let total = links.iter().map(|l| l.tx_kib + l.rx_kib).sum();
                self.nvlink_prev.insert(gpu, (Instant::now(), total));
            }
        }
    }

    /// One pass over all GPUs. Fails only when the GPU list itself cannot be read; a GPU that
    /// cannot be read is left out, a field that cannot be read has no series.
    pub fn sample(&mut self) -> Result<Snapshot, GpuError> {
        let b = self.backend.clone();
        let count = b.device_count()?;
        let mut sys_labels: [Option<String>; LABEL_FIELD_COUNT] = Default::default();
        if self.want.1[LabelField::DriverVersion as usize] {
            sys_labels[LabelField::DriverVersion as usize] = b.driver_version().ok();
        }
        if self.want.1[LabelField::NvmlVersion as usize] {
            sys_labels[LabelField::NvmlVersion as usize] = b.nvml_version().ok();
        }
        let mut snap = Snapshot::default();
        for gpu in 0..count {
            if let Err(e) = self.sample_gpu(gpu, &sys_labels, &mut snap) {
                tracing::warn!(gpu, error = %e, "cannot read GPU; leaving it out of this sample");
            }
        }
        Ok(snap)
    }

    fn sample_gpu(
        &mut self,
        gpu: u32,
        sys_labels: &[Option<String>; LABEL_FIELD_COUNT],
        snap: &mut Snapshot,
    ) -> Result<(), GpuError> {
        let b = self.backend.clone();
        let info = b.device_info(gpu)?;
        snap.gpu_uuids.resize(gpu as usize + 1, String::new());
        snap.gpu_uuids[gpu as usize] = info.uuid.clone();
        let mut labels = sys_labels.clone();
        if self.want.1[LabelField::Brand as usize] {
            labels[LabelField::Brand as usize] = Some(info.brand.clone());
        }
        if self.want.1[LabelField::Serial as usize] {
            labels[LabelField::Serial as usize] = Some(info.serial.clone());
        }
        if self.want.1[LabelField::VbiosVersion as usize] {
            labels[LabelField::VbiosVersion as usize] = Some(info.vbios_version.clone());
        }
        let common = self.device_values(gpu);
        let mig_on = info.mig_capable && b.mig_mode(gpu).is_ok_and(|m| m.current);
        let mig_devices = if mig_on {
            b.mig_devices(gpu)?
        } else {
            Vec::new()
        };
        let entity = |gi: Option<GpuInstanceRef>, values: Values| Entity {
            gpu,
            uuid: info.uuid.clone(),
            pci_bus_id: info.pci_bus_id.clone(),
            model: info.name.clone(),
            gpu_instance: gi,
            values,
            labels: labels.clone(),
        };
        if mig_devices.is_empty() {
            let mut values = common;
            self.memory_values(&mut values, b.memory(gpu));
            self.utilization_values(gpu, &mut values);
            self.profiling_values(gpu, None, &mut values);
            self.xid_value(gpu, None, &mut values);
            snap.entities.push(entity(None, values));
            return Ok(());
        }
        // One entity per GPU instance; its compute instances share its memory.
        let mut by_gi: BTreeMap<u32, &MigDevice> = BTreeMap::new();
        for d in &mig_devices {
            snap.mig
                .insert(d.uuid.clone(), (gpu, d.gpu_instance_id, d.index));
            by_gi.entry(d.gpu_instance_id).or_insert(d);
        }
        for (gi, d) in by_gi {
            let mut values = common;
            self.memory_values(&mut values, b.mig_device_memory(&d.uuid));
            self.profiling_values(gpu, Some(gi), &mut values);
            self.xid_value(gpu, Some(gi), &mut values);
            let gi_ref = GpuInstanceRef {
                profile: d.gi_profile.clone(),
                id: gi,
            };
            snap.entities.push(entity(Some(gi_ref), values));
        }
        Ok(())
    }

    /// Fields that belong to the physical GPU (shared by its GPU instances).
    fn device_values(&mut self, gpu: u32) -> Values {
        use Field::*;
        let b = self.backend.clone();
        let w = self.want;
        let mut v: Values = [None; FIELD_COUNT];
        let mut set = |f: Field, val: Value| v[f as usize] = Some(val);
        if w.any(&[SmClock, MemClock, ClockThrottleReasons])
            && let Ok(c) = b.clocks(gpu)
        {
            set(SmClock, Value::Int(c.sm_mhz.into()));
            set(MemClock, Value::Int(c.mem_mhz.into()));
            set(ClockThrottleReasons, Value::Int(c.throttle_reasons as i64));
        }
        if w.any(&[GpuTemp, MemoryTemp])
            && let Ok(t) = b.temperature(gpu)
        {
            // DCGM drops readings above 200 °C as sensor garbage.
            if t.gpu_c <= 200 {
                set(GpuTemp, Value::Int(t.gpu_c.into()));
            }
            if let Some(m) = t.memory_c.filter(|m| *m <= 200) {
                set(MemoryTemp, Value::Int(m.into()));
            }
        }
        if w.any(&[PowerUsage, PowerMgmtLimit])
            && let Ok(p) = b.power(gpu)
        {
            set(PowerUsage, Value::Float(f64::from(p.usage_mw) / 1000.0));
            set(PowerMgmtLimit, Value::Float(f64::from(p.limit_mw) / 1000.0));
        }
        if w.any(&[TotalEnergy])
            && let Ok(e) = b.total_energy_mj(gpu)
        {
            set(TotalEnergy, Value::Int(e as i64));
        }
        if w.any(&[PcieReplay, PcieLinkGen, PcieLinkWidth])
            && let Ok(p) = b.pcie(gpu)
        {
            set(PcieReplay, Value::Int(p.replay_counter as i64));
            set(PcieLinkGen, Value::Int(p.link_gen.into()));
            set(PcieLinkWidth, Value::Int(p.link_width.into()));
        }
        if w.any(&[
            EccSbeVolTotal,
            EccDbeVolTotal,
            EccSbeAggTotal,
            EccDbeAggTotal,
        ]) && let Ok(e) = b.ecc(gpu)
            && e.enabled
        {
            set(EccSbeVolTotal, Value::Int(e.sbe_volatile as i64));
            set(EccDbeVolTotal, Value::Int(e.dbe_volatile as i64));
            set(EccSbeAggTotal, Value::Int(e.sbe_aggregate as i64));
            set(EccDbeAggTotal, Value::Int(e.dbe_aggregate as i64));
        }
        if w.any(&[
            UncorrectableRemappedRows,
            CorrectableRemappedRows,
            RowRemapFailure,
            RowRemapPending,
            RetiredSbe,
            RetiredDbe,
            RetiredPending,
        ]) && let Ok(r) = b.row_remap(gpu)
        {
            set(
                UncorrectableRemappedRows,
                Value::Int(r.uncorrectable_rows as i64),
            );
            set(
                CorrectableRemappedRows,
                Value::Int(r.correctable_rows as i64),
            );
            set(RowRemapFailure, Value::Int(r.failure.into()));
            set(RowRemapPending, Value::Int(r.pending.into()));
            set(RetiredSbe, Value::Int(r.retired_sbe_pages as i64));
            set(RetiredDbe, Value::Int(r.retired_dbe_pages as i64));
            set(RetiredPending, Value::Int(r.retired_pending.into()));
        }
        // Not a vGPU guest (the backend exposes no vGPU licensing): DCGM reports 0 then.
        set(VgpuLicenseStatus, Value::Int(0));
        if w.any(&[NvlinkBandwidthTotal])
            && let Ok(links) = b.nvlinks(gpu)
        {
            let total: u64 = links.iter().map(|l| l.tx_kib + l.rx_kib).sum();
            let now = Instant::now();
            if links.is_empty() {
                set(NvlinkBandwidthTotal, Value::Int(0));
            } else if let Some((then, before)) = self.nvlink_prev.insert(gpu, (now, total)) {
                // DCGM's rate: KiB delta over seconds, / 1000 (about MB/s).
                let secs = now.duration_since(then).as_secs_f64();
                if secs > 0.0 {
                    let rate = total.saturating_sub(before) as f64 / secs / 1000.0;
                    set(NvlinkBandwidthTotal, Value::Int(rate.round() as i64));
                }
            }
        }
        v
    }

    fn memory_values(&self, v: &mut Values, mem: Result<gantry_gpu::MemoryInfo, GpuError>) {
        if let Ok(m) = mem {
            v[Field::FbFree as usize] = Some(Value::Int(m.free_mib as i64));
            v[Field::FbUsed as usize] = Some(Value::Int(m.used_mib as i64));
            v[Field::FbReserved as usize] = Some(Value::Int(m.reserved_mib as i64));
            v[Field::FbTotal as usize] = Some(Value::Int(m.total_mib as i64));
        }
    }

    fn utilization_values(&self, gpu: u32, v: &mut Values) {
        use Field::*;
        if !self.want.any(&[GpuUtil, MemCopyUtil, EncUtil, DecUtil]) {
            return;
        }
        if let Ok(u) = self.backend.utilization(gpu) {
            v[GpuUtil as usize] = Some(Value::Int(u.gpu_pct.into()));
            v[MemCopyUtil as usize] = Some(Value::Int(u.memory_pct.into()));
            v[EncUtil as usize] = Some(Value::Int(u.encoder_pct.into()));
            v[DecUtil as usize] = Some(Value::Int(u.decoder_pct.into()));
        }
    }

    fn profiling_values(&self, gpu: u32, gi: Option<u32>, v: &mut Values) {
        use Field::*;
        let prof_fields = [
            ProfGrEngineActive,
            ProfSmActive,
            ProfSmOccupancy,
            ProfPipeTensorActive,
            ProfDramActive,
            ProfPipeFp64Active,
            ProfPipeFp32Active,
            ProfPipeFp16Active,
            ProfPcieTxBytes,
            ProfPcieRxBytes,
        ];
        if !self.want.any(&prof_fields) {
            return;
        }
        let Ok(p) = self.backend.profiling(gpu, gi) else {
            return; // before Hopper NVML has no GPM: no DCP series, as in DCGM without its module
        };
        let Profiling {
            graphics_active,
            sm_active,
            sm_occupancy,
            tensor_active,
            dram_active,
            fp64_active,
            fp32_active,
            fp16_active,
            pcie_tx_bytes_per_sec,
            pcie_rx_bytes_per_sec,
        } = p;
        for (f, x) in [
            (ProfGrEngineActive, graphics_active),
            (ProfSmActive, sm_active),
            (ProfSmOccupancy, sm_occupancy),
            (ProfPipeTensorActive, tensor_active),
            (ProfDramActive, dram_active),
            (ProfPipeFp64Active, fp64_active),
            (ProfPipeFp32Active, fp32_active),
            (ProfPipeFp16Active, fp16_active),
        ] {
            v[f as usize] = Some(Value::Float(x));
        }
        v[ProfPcieTxBytes as usize] = Some(Value::Int(pcie_tx_bytes_per_sec.round() as i64));
        v[ProfPcieRxBytes as usize] = Some(Value::Int(pcie_rx_bytes_per_sec.round() as i64));
    }

    fn xid_value(&self, gpu: u32, gi: Option<u32>, v: &mut Values) {
        v[Field::XidErrors as usize] = Some(Value::Int(self.xids.get(gpu, gi) as i64));
    }
}
