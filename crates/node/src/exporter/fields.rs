//! The DCGM fields the exporter can fill from NVML, under dcgm-exporter's names (and the
//! DCGM 4.6 names as aliases), and the metrics CSV that selects them.

/// A numeric field. The discriminant indexes [`crate::exporter::sample::Values`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    SmClock,
    MemClock,
    MemoryTemp,
    GpuTemp,
    PowerUsage,
    PowerMgmtLimit,
    TotalEnergy,
    PcieReplay,
    GpuUtil,
    MemCopyUtil,
    EncUtil,
    DecUtil,
    XidErrors,
    FbFree,
    FbUsed,
    FbReserved,
    FbTotal,
    NvlinkBandwidthTotal,
    VgpuLicenseStatus,
    UncorrectableRemappedRows,
    CorrectableRemappedRows,
    RowRemapFailure,
    RowRemapPending,
    EccSbeVolTotal,
    EccDbeVolTotal,
    EccSbeAggTotal,
    EccDbeAggTotal,
    RetiredSbe,
    RetiredDbe,
    RetiredPending,
    ClockThrottleReasons,
    PcieLinkGen,
    PcieLinkWidth,
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
}

/// Number of [`Field`]s.
pub const FIELD_COUNT: usize = Field::ProfPcieRxBytes as usize + 1;

/// A string field, exported as a label on every series (CSV type `label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelField {
    DriverVersion,
    NvmlVersion,
    Brand,
    Serial,
    VbiosVersion,
}

/// Number of [`LabelField`]s.
pub const LABEL_FIELD_COUNT: usize = LabelField::VbiosVersion as usize + 1;

/// What a CSV row names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Value(Field),
    Label(LabelField),
}

/// dcgm-exporter names first, then DCGM 4.6 names, for every field we fill.
const NAMES: &[(&str, Known)] = {
    use Field::*;
    use Known::{Label, Value};
    use LabelField::*;
    &[
        ("DCGM_FI_DEV_SM_CLOCK", Value(SmClock)),
        ("DCGM_FI_DEV_MEM_CLOCK", Value(MemClock)),
        ("DCGM_FI_DEV_MEMORY_TEMP", Value(MemoryTemp)),
        ("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", Value(MemoryTemp)),
        ("DCGM_FI_DEV_GPU_TEMP", Value(GpuTemp)),
        ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", Value(GpuTemp)),
        ("DCGM_FI_DEV_POWER_USAGE", Value(PowerUsage)),
        ("DCGM_FI_DEV_BOARD_POWER_WATTS", Value(PowerUsage)),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT", Value(PowerMgmtLimit)),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Value(TotalEnergy)),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Value(PcieReplay)),
        ("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", Value(PcieReplay)),
        ("DCGM_FI_DEV_GPU_UTIL", Value(GpuUtil)),
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", Value(GpuUtil)),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", Value(MemCopyUtil)),
        ("DCGM_FI_DEV_ENC_UTIL", Value(EncUtil)),
        ("DCGM_FI_DEV_DEC_UTIL", Value(DecUtil)),
        ("DCGM_FI_DEV_XID_ERRORS", Value(XidErrors)),
        ("DCGM_FI_DEV_XID_ERROR", Value(XidErrors)),
        ("DCGM_FI_DEV_FB_FREE", Value(FbFree)),
        ("DCGM_FI_DEV_FB_USED", Value(FbUsed)),
        ("DCGM_FI_DEV_FB_RESERVED", Value(FbReserved)),
        ("DCGM_FI_DEV_FB_TOTAL", Value(FbTotal)),
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            Value(NvlinkBandwidthTotal),
        ),
        (
            "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
            Value(NvlinkBandwidthTotal),
        ),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", Value(VgpuLicenseStatus)),
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            Value(UncorrectableRemappedRows),
        ),
        (
            "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
            Value(UncorrectableRemappedRows),
        ),
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            Value(CorrectableRemappedRows),
        ),
        (
            "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
            Value(CorrectableRemappedRows),
        ),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", Value(RowRemapFailure)),
        ("DCGM_FI_DEV_ROW_REMAP_FAILED", Value(RowRemapFailure)),
        ("DCGM_FI_DEV_ROW_REMAP_PENDING", Value(RowRemapPending)),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", Value(EccSbeVolTotal)),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Value(EccDbeVolTotal)),
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", Value(EccSbeAggTotal)),
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", Value(EccDbeAggTotal)),
        ("DCGM_FI_DEV_RETIRED_SBE", Value(RetiredSbe)),
        ("DCGM_FI_DEV_RETIRED_DBE", Value(RetiredDbe)),
        ("DCGM_FI_DEV_RETIRED_PENDING", Value(RetiredPending)),
        (
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            Value(ClockThrottleReasons),
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            Value(ClockThrottleReasons),
        ),
        ("DCGM_FI_DEV_PCIE_LINK_GEN", Value(PcieLinkGen)),
        ("DCGM_FI_DEV_PCIE_LINK_WIDTH", Value(PcieLinkWidth)),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", Value(ProfGrEngineActive)),
        (
            "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
            Value(ProfGrEngineActive),
        ),
        ("DCGM_FI_PROF_SM_ACTIVE", Value(ProfSmActive)),
        ("DCGM_FI_PROF_SM_OCCUPANCY", Value(ProfSmOccupancy)),
        (
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            Value(ProfPipeTensorActive),
        ),
        (
            "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
            Value(ProfPipeTensorActive),
        ),
        ("DCGM_FI_PROF_DRAM_ACTIVE", Value(ProfDramActive)),
        ("DCGM_FI_PROF_DRAM_UTIL_RATIO", Value(ProfDramActive)),
        ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", Value(ProfPipeFp64Active)),
        ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", Value(ProfPipeFp32Active)),
        ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", Value(ProfPipeFp16Active)),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", Value(ProfPcieTxBytes)),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", Value(ProfPcieRxBytes)),
        ("DCGM_FI_DRIVER_VERSION", Label(DriverVersion)),
        ("DCGM_FI_SYSTEM_DRIVER_VERSION", Label(DriverVersion)),
        ("DCGM_FI_NVML_VERSION", Label(NvmlVersion)),
        ("DCGM_FI_DEV_BRAND", Label(Brand)),
        ("DCGM_FI_DEV_SERIAL", Label(Serial)),
        ("DCGM_FI_DEV_VBIOS_VERSION", Label(VbiosVersion)),
    ]
};

/// Look a CSV field name up: a DCGM field name, or a dcgm-exporter 1.x name (its
/// `1.x-compatibility-metrics.csv`, go-dcgm's old field names: `dcgm_sm_clock`).
pub fn lookup(name: &str) -> Option<Known> {
    let name = old_name(name).unwrap_or(name);
    NAMES.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}

/// The DCGM field a dcgm-exporter 1.x metric name stands for. The metric keeps the CSV's
/// name, as dcgm-exporter exposes it.
fn old_name(name: &str) -> Option<&'static str> {
    const OLD: &[(&str, &str)] = &[
        ("dcgm_sm_clock", "DCGM_FI_DEV_SM_CLOCK"),
        ("dcgm_memory_clock", "DCGM_FI_DEV_MEM_CLOCK"),
        ("dcgm_memory_temp", "DCGM_FI_DEV_MEMORY_TEMP"),
        ("dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP"),
        ("dcgm_power_usage", "DCGM_FI_DEV_POWER_USAGE"),
        (
            "dcgm_total_energy_consumption",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        ),
        ("dcgm_pcie_tx_throughput", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"),
        ("dcgm_pcie_rx_throughput", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"),
        (
            "dcgm_pcie_replay_counter",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        ),
        ("dcgm_gpu_utilization", "DCGM_FI_DEV_GPU_UTIL"),
        ("dcgm_mem_copy_utilization", "DCGM_FI_DEV_MEM_COPY_UTIL"),
        ("dcgm_enc_utilization", "DCGM_FI_DEV_ENC_UTIL"),
        ("dcgm_dec_utilization", "DCGM_FI_DEV_DEC_UTIL"),
        ("dcgm_xid_errors", "DCGM_FI_DEV_XID_ERRORS"),
        ("dcgm_power_violation", "DCGM_FI_DEV_POWER_VIOLATION"),
        ("dcgm_thermal_violation", "DCGM_FI_DEV_THERMAL_VIOLATION"),
        (
            "dcgm_sync_boost_violation",
            "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
        ),
        (
            "dcgm_board_limit_violation",
            "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        ),
        ("dcgm_low_util_violation", "DCGM_FI_DEV_LOW_UTIL_VIOLATION"),
        (
            "dcgm_reliability_violation",
            "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        ),
        ("dcgm_fb_free", "DCGM_FI_DEV_FB_FREE"),
        ("dcgm_fb_used", "DCGM_FI_DEV_FB_USED"),
        (
            "dcgm_ecc_sbe_volatile_total",
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        ),
        (
            "dcgm_ecc_dbe_volatile_total",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        ),
        (
            "dcgm_ecc_sbe_aggregate_total",
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        ),
        (
            "dcgm_ecc_dbe_aggregate_total",
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        ),
        ("dcgm_retired_pages_sbe", "DCGM_FI_DEV_RETIRED_SBE"),
        ("dcgm_retired_pages_dbe", "DCGM_FI_DEV_RETIRED_DBE"),
        ("dcgm_retired_pages_pending", "DCGM_FI_DEV_RETIRED_PENDING"),
        (
            "dcgm_nvlink_flit_crc_error_count_total",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        ),
        (
            "dcgm_nvlink_data_crc_error_count_total",
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        ),
        (
            "dcgm_nvlink_replay_error_count_total",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        ),
        (
            "dcgm_nvlink_recovery_error_count_total",
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        ),
        (
            "dcgm_nvlink_bandwidth_total",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        ),
        (
            "dcgm_fi_prof_gr_engine_active",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        ),
        ("dcgm_fi_prof_sm_active", "DCGM_FI_PROF_SM_ACTIVE"),
        ("dcgm_fi_prof_sm_occupancy", "DCGM_FI_PROF_SM_OCCUPANCY"),
        (
            "dcgm_fi_prof_pipe_tensor_active",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        ),
        ("dcgm_fi_prof_dram_active", "DCGM_FI_PROF_DRAM_ACTIVE"),
        ("dcgm_fi_prof_pcie_tx_bytes", "DCGM_FI_PROF_PCIE_TX_BYTES"),
        ("dcgm_fi_prof_pcie_rx_bytes", "DCGM_FI_PROF_PCIE_RX_BYTES"),
    ];
    OLD.iter().find(|(o, _)| *o == name).map(|(_, n)| *n)
}

/// A selected series: its exposed name (as the CSV spells it), TYPE and HELP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricDef {
    pub name: String,
    pub field: Field,
    /// The CSV type, printed verbatim in `# TYPE` (`gauge`, `counter`).
    pub kind: String,
    pub help: String,
}

/// A selected label field and the label name it is exported under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelDef {
    pub name: String,
    pub field: LabelField,
}

/// What a metrics CSV selects.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricSet {
    pub metrics: Vec<MetricDef>,
    pub labels: Vec<LabelDef>,
    /// Rows naming fields this exporter cannot fill (logged, then ignored).
    pub unsupported: Vec<String>,
}

/// dcgm-exporter's default set (`default-counters.csv` / `dcp-metrics-included.csv`, the
/// enabled rows), in its order.
pub const DEFAULT_CSV: &str = "\
# Gantry's built-in metric set: the rows dcgm-exporter enables by default, same names and types.
# Format: DCGM field name, Prometheus type (gauge, counter, or label = attach as a label), help text.

DCGM_FI_DEV_SM_CLOCK, gauge, Current SM clock in MHz.
DCGM_FI_DEV_MEM_CLOCK, gauge, Current memory clock in MHz.
DCGM_FI_DEV_MEMORY_TEMP, gauge, Device memory temperature in degrees C.
DCGM_FI_DEV_GPU_TEMP, gauge, GPU core temperature in degrees C.
DCGM_FI_DEV_POWER_USAGE, gauge, Board power draw in watts.
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy used since the driver was loaded in mJ.
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, PCIe replays (retries) since the driver was loaded.
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilisation in percent.
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory controller utilisation in percent.
DCGM_FI_DEV_ENC_UTIL, gauge, Video encoder utilisation in percent.
DCGM_FI_DEV_DEC_UTIL, gauge, Video decoder utilisation in percent.
DCGM_FI_DEV_XID_ERRORS, gauge, Number of the most recent XID error (0 = none seen).
DCGM_FI_DEV_FB_FREE, gauge, Free framebuffer memory in MiB.
DCGM_FI_DEV_FB_USED, gauge, Used framebuffer memory in MiB.
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved by the driver in MiB.
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, NVLink traffic over all links (rate in MB/s as DCGM reports it).
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU license state (0 = not licensed or not a vGPU).
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Memory rows remapped after uncorrectable errors.
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Memory rows remapped after correctable errors.
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, 1 when a row remap has failed.
DCGM_FI_DRIVER_VERSION, label, NVIDIA driver version.
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Fraction of time the graphics or compute engine was busy (0-1).
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Fraction of cycles the tensor pipes were busy (0-1).
DCGM_FI_PROF_DRAM_ACTIVE, gauge, Fraction of cycles device memory was reading or writing (0-1).
DCGM_FI_PROF_PCIE_TX_BYTES, gauge, PCIe bytes sent per second including protocol overhead.
DCGM_FI_PROF_PCIE_RX_BYTES, gauge, PCIe bytes received per second including protocol overhead.
";

/// Parse a metrics CSV: `field, type, help` per line; `#` starts a comment. Errors name the line.
pub fn parse_csv(text: &str) -> Result<MetricSet, String> {
    let mut set = MetricSet::default();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.splitn(3, ',');
        let name = cols.next().unwrap_or_default().trim();
        let kind = cols.next().map(str::trim).unwrap_or_default();
        let help = cols.next().map(str::trim).unwrap_or_default();
        if name.is_empty() || kind.is_empty() {
            return Err(format!(
                "line {}: want `field, type, help`, got {line:?}",
                n + 1
            ));
        }
        if !matches!(
            kind,
            "gauge" | "counter" | "label" | "histogram" | "summary" | "untyped"
        ) {
            return Err(format!(
                "line {}: field {name}: unknown type {kind:?} (gauge, counter or label)",
                n + 1
            ));
        }
        match (lookup(name), kind) {
            (Some(Known::Label(field)), "label") => set.labels.push(LabelDef {
                name: name.to_string(),
                field,
            }),
            (Some(Known::Value(field)), k) if k != "label" => {
                if set.metrics.iter().any(|m| m.name == name) {
                    continue;
                }
                set.metrics.push(MetricDef {
                    name: name.to_string(),
                    field,
                    kind: kind.to_string(),
                    help: help.to_string(),
                })
            }
            (Some(_), _) => {
                return Err(format!(
                    "line {}: field {name} cannot have type {kind}",
                    n + 1
                ));
            }
            (None, _) => set.unsupported.push(name.to_string()),
        }
    }
    Ok(set)
}

/// The built-in default set.
pub fn default_set() -> MetricSet {
    parse_csv(DEFAULT_CSV).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_set_is_the_26_rows() {
        let set = parse_csv(DEFAULT_CSV).expect("default csv parses");
        assert_eq!(set.metrics.len(), 25);
        assert_eq!(set.labels.len(), 1);
        assert!(set.unsupported.is_empty());
        assert_eq!(set.labels[0].name, "DCGM_FI_DRIVER_VERSION");
        let counters: Vec<&str> = set
            .metrics
            .iter()
            .filter(|m| m.kind == "counter")
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(
            counters,
            [
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            ]
        );
    }

    /// dcgm-exporter's `1.x-compatibility-metrics.csv` names fields the 1.x way; each row maps
    /// to its DCGM field and keeps its own metric name.
    #[test]
    fn one_x_compatibility_names() {
        let set = parse_csv("# Clocks\ndcgm_sm_clock,     gauge, SM clock frequency (in MHz).\ndcgm_fi_prof_dram_active, gauge, DRAM.\ndcgm_nvlink_bandwidth_total, counter, NVLink.\n").unwrap();
        let names: Vec<_> = set.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "dcgm_sm_clock",
                "dcgm_fi_prof_dram_active",
                "dcgm_nvlink_bandwidth_total"
            ]
        );
        assert_eq!(set.metrics[0].field, default_set().metrics[0].field);
        assert!(set.unsupported.is_empty());
    }

    #[test]
    fn csv_errors_and_unknown_fields() {
        let set = parse_csv("DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, t\nDCGM_FI_DEV_FOO, gauge, x\n")
            .expect("parses");
        assert_eq!(set.metrics[0].field, Field::GpuTemp);
        assert_eq!(set.metrics[0].name, "DCGM_FI_DEV_GPU_TEMP_CELSIUS");
        assert_eq!(set.unsupported, ["DCGM_FI_DEV_FOO"]);
        let err = parse_csv("\nDCGM_FI_DEV_GPU_TEMP\n").expect_err("no type");
        assert!(err.starts_with("line 2"), "{err}");
        let err = parse_csv("DCGM_FI_DEV_GPU_TEMP, gaug, x\n").expect_err("bad type");
        assert!(err.contains("gaug"), "{err}");
        let err = parse_csv("DCGM_FI_DEV_GPU_TEMP, label, x\n").expect_err("wrong kind");
        assert!(err.contains("cannot have type"), "{err}");
    }
}
