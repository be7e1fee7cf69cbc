//! MIG planning and applying on simulated GPUs: convergence, refusal before any change, and
//! repair after a failure part-way.

use gantry_api::mig_parted::{MigPartedConfig, default_config};
use gantry_gpu::*;
use gantry_node::mig::{self, ApplyError, GpuAction, ReadOnly};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// A backend that fails the Nth create call (GPU or compute instance), counting from 0.
struct FailNthCreate {
    inner: SimBackend,
    fail_at: AtomicU32,
    creates: AtomicU32,
    /// Every call that changes a GPU (mode, create, destroy).
    mutations: AtomicU32,
}

impl FailNthCreate {
    fn new(inner: SimBackend, n: u32) -> Self {
        FailNthCreate {
            inner,
            fail_at: AtomicU32::new(n),
            creates: AtomicU32::new(0),
            mutations: AtomicU32::new(0),
        }
    }
    fn mutated(&self) {
        self.mutations.fetch_add(1, Ordering::SeqCst);
    }
    fn maybe_fail(&self, gpu: u32) -> Result<()> {
        self.mutated();
        let n = self.creates.fetch_add(1, Ordering::SeqCst);
        if n == self.fail_at.load(Ordering::SeqCst) {
            return Err(GpuError::Nvml {
                call: format!("create on GPU {gpu}"),
                message: "injected failure".into(),
            });
        }
        Ok(())
    }
}

impl Backend for FailNthCreate {
    fn driver_version(&self) -> Result<String> {
        self.inner.driver_version()
    }
    fn cuda_driver_version(&self) -> Result<u32> {
        self.inner.cuda_driver_version()
    }
    fn nvml_version(&self) -> Result<String> {
        self.inner.nvml_version()
    }
    fn device_count(&self) -> Result<u32> {
        self.inner.device_count()
    }
    fn device_info(&self, g: u32) -> Result<DeviceInfo> {
        self.inner.device_info(g)
    }
    fn memory(&self, g: u32) -> Result<MemoryInfo> {
        self.inner.memory(g)
    }
    fn utilization(&self, g: u32) -> Result<Utilization> {
        self.inner.utilization(g)
    }
    fn temperature(&self, g: u32) -> Result<Temperature> {
        self.inner.temperature(g)
    }
    fn power(&self, g: u32) -> Result<Power> {
        self.inner.power(g)
    }
    fn total_energy_mj(&self, g: u32) -> Result<u64> {
        self.inner.total_energy_mj(g)
    }
    fn clocks(&self, g: u32) -> Result<Clocks> {
        self.inner.clocks(g)
    }
    fn violations(&self, g: u32) -> Result<Violations> {
        self.inner.violations(g)
    }
    fn ecc(&self, g: u32) -> Result<EccCounts> {
        self.inner.ecc(g)
    }
    fn row_remap(&self, g: u32) -> Result<RowRemap> {
        self.inner.row_remap(g)
    }
    fn pcie(&self, g: u32) -> Result<PcieInfo> {
        self.inner.pcie(g)
    }
    fn pcie_throughput(&self, g: u32) -> Result<PcieThroughput> {
        self.inner.pcie_throughput(g)
    }
    fn nvlinks(&self, g: u32) -> Result<Vec<NvLinkInfo>> {
        self.inner.nvlinks(g)
    }
    fn topology(&self, a: u32, b: u32) -> Result<TopologyLevel> {
        self.inner.topology(a, b)
    }
    fn processes(&self, g: u32) -> Result<Vec<ProcessInfo>> {
        self.inner.processes(g)
    }
    fn vgpu_license_status(&self, g: u32) -> Result<u32> {
        self.inner.vgpu_license_status(g)
    }
    fn profiling(&self, g: u32, gi: Option<u32>) -> Result<Profiling> {
        self.inner.profiling(g, gi)
    }
    fn mig_mode(&self, g: u32) -> Result<MigMode> {
        self.inner.mig_mode(g)
    }
    fn mig_profiles(&self, g: u32) -> Result<Vec<MigProfile>> {
        self.inner.mig_profiles(g)
    }
    fn gpu_instances(&self, g: u32) -> Result<Vec<GpuInstance>> {
        self.inner.gpu_instances(g)
    }
    fn compute_instances(&self, g: u32, gi: u32) -> Result<Vec<ComputeInstance>> {
        self.inner.compute_instances(g, gi)
    }
    fn mig_devices(&self, g: u32) -> Result<Vec<MigDevice>> {
        self.inner.mig_devices(g)
    }
    fn mig_device_memory(&self, uuid: &str) -> Result<MemoryInfo> {
        self.inner.mig_device_memory(uuid)
    }
    fn set_mig_mode(&self, g: u32, on: bool) -> Result<MigMode> {
        self.mutated();
        self.inner.set_mig_mode(g, on)
    }
    fn create_gpu_instance(&self, g: u32, p: &str, at: Option<Placement>) -> Result<GpuInstance> {
        self.maybe_fail(g)?;
        self.inner.create_gpu_instance(g, p, at)
    }
    fn destroy_gpu_instance(&self, g: u32, gi: u32) -> Result<()> {
        self.mutated();
        self.inner.destroy_gpu_instance(g, gi)
    }
    fn create_compute_instance(&self, g: u32, gi: u32, s: u32) -> Result<ComputeInstance> {
        self.maybe_fail(g)?;
        self.inner.create_compute_instance(g, gi, s)
    }
    fn destroy_compute_instance(&self, g: u32, gi: u32, ci: u32) -> Result<()> {
        self.mutated();
        self.inner.destroy_compute_instance(g, gi, ci)
    }
    fn subscribe(&self, mask: u64) -> Result<Box<dyn EventStream>> {
        self.inner.subscribe(mask)
    }
}

const MODELS: [&str; 4] = ["A100-40GB", "A100-80GB", "H100-80GB", "H200"];

fn sim(model: &str, gpus: u32) -> SimBackend {
    SimBackend::new(SimConfig::for_model(model, gpus, 7).unwrap())
}

fn config_names() -> Vec<String> {
    default_config().mig_configs.keys().cloned().collect()
}

/// After a successful reconcile a fresh plan changes nothing.
fn assert_converged(b: &dyn Backend, cfg: &MigPartedConfig, name: &str) {
    let facts = mig::observe(ReadOnly::new(b)).unwrap();
    let plan = mig::plan(cfg, name, &facts).unwrap();
    assert!(
        !plan.changes(),
        "{name} did not converge:\n{}",
        mig::render::render(&plan)
    );
}

fn wanted_counts_match(b: &dyn Backend, cfg: &MigPartedConfig, name: &str) {
    let facts = mig::observe(ReadOnly::new(b)).unwrap();
    let plan = mig::plan(cfg, name, &facts).unwrap();
    for g in &plan.gpus {
        if let Some(w) = &g.wanted {
            assert_eq!(&g.current, w, "GPU {} under {name}", g.gpu);
        }
    }
}

#[test]
fn all_balanced_on_h100_gives_the_balanced_devices() {
    let b = sim("H100-80GB", 2);
    let cfg = default_config();
    mig::reconcile(&b, &cfg, "all-balanced").unwrap();
    let layout = gantry_gpu::layout::current(&b, 1).unwrap();
    assert_eq!(
        layout,
        gantry_gpu::layout::MigLayout::enabled([("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)])
    );
    // A second apply is a no-op.
    let again = mig::reconcile(&b, &cfg, "all-balanced").unwrap();
    assert!(again.changed.is_empty());
}

#[test]
fn impossible_layout_is_refused_with_nothing_changed() {
    let b = sim("H100-80GB", 2);
    let cfg = default_config();
    mig::reconcile(&b, &cfg, "all-1g.10gb").unwrap();
    let before = mig::observe(ReadOnly::new(&b)).unwrap();
    // GPU 1 cannot hold this; GPU 0 could, but nothing may be touched on either.
    let yaml = "version: v1\nmig-configs:\n  bad:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"7g.80gb\": 1}\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"4g.40gb\": 1, \"3g.40gb\": 1, \"1g.10gb\": 1}\n";
    let bad: MigPartedConfig = serde_yaml::from_str(yaml).unwrap();
    let err = mig::reconcile(&b, &bad, "bad").unwrap_err();
    assert!(matches!(err, ApplyError::Plan(_)), "{err}");
    assert!(err.to_string().contains("GPU 1"), "{err}");
    assert_eq!(mig::observe(ReadOnly::new(&b)).unwrap(), before);
}

#[test]
fn pending_mode_change_is_reported_not_hidden() {
    let b = sim("A100-80GB", 1);
    b.start_process(SimProcess {
        pid: 42,
        gpu: 0,
        gpu_instance: None,
        compute_instance: None,
        memory_mib: 100,
        utilization: 0.5,
    })
    .unwrap();
    let err = mig::reconcile(&b, &default_config(), "all-1g.10gb").unwrap_err();
    assert!(err.to_string().contains("pending"), "{err}");
}

#[test]
fn dry_run_view_plans_without_changes() {
    let b = sim("H200", 1);
    let cfg = default_config();
    let before = mig::observe(ReadOnly::new(&b)).unwrap();
    let plan = mig::plan(&cfg, "all-1g.18gb", &before).unwrap();
    let text = mig::render::render(&plan);
    assert!(text.contains("MIG disabled -> 1g.18gb×7"), "{text}");
    assert!(matches!(plan.gpus[0].action, GpuAction::Change { .. }));
    assert_eq!(mig::observe(ReadOnly::new(&b)).unwrap(), before);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any layout, possible or not, on GPUs in any shipped state: either it is refused with no
    /// call that changes a GPU, or it is applied and a fresh plan changes nothing.
    #[test]
    fn random_layouts_are_refused_untouched_or_converge(
        model in 0..MODELS.len(),
        start in 0..64usize,
        picks in prop::collection::vec((0..16usize, 1..5i64), 1..5),
        only_gpu in prop::option::of(0..2u32),
    ) {
        let names = config_names();
        let cfg = default_config();
        let b = FailNthCreate::new(sim(MODELS[model], 2), u32::MAX);
        mig::reconcile(&b, &cfg, &names[start % names.len()]).unwrap();
        let profiles = b.mig_profiles(0).unwrap();
        let mut devices = std::collections::BTreeMap::new();
        for (i, n) in picks {
            devices.insert(profiles[i % profiles.len()].name.clone(), n);
        }
        let entry = serde_json::json!({
            "devices": only_gpu.map_or(serde_json::json!("all"), |g| serde_json::json!([g])),
            "mig-enabled": true,
            "mig-devices": devices,
        });
        let text = serde_json::json!({"version": "v1", "mig-configs": {"random": [entry]}}).to_string();
        let random: MigPartedConfig = serde_yaml::from_str(&text).unwrap();
        let before = mig::observe(ReadOnly::new(&b)).unwrap();
        b.mutations.store(0, Ordering::SeqCst);
        match mig::reconcile(&b, &random, "random") {
            Err(ApplyError::Plan(e)) => {
                prop_assert_eq!(b.mutations.load(Ordering::SeqCst), 0, "refused ({}) after changing a GPU", e);
                prop_assert_eq!(mig::observe(ReadOnly::new(&b)).unwrap(), before);
            }
            Err(e) => prop_assert!(false, "a plannable layout failed to apply: {e}"),
            Ok(_) => {
                assert_converged(&b, &random, "random");
                wanted_counts_match(&b, &random, "random");
            }
        }
    }

    #[test]
    fn any_sequence_of_shipped_configs_converges_in_one_apply(
        model in 0..MODELS.len(),
        seq in prop::collection::vec(0..64usize, 1..6),
    ) {
        let names = config_names();
        let b = sim(MODELS[model], 2);
        let cfg = default_config();
        for i in seq {
            let name = &names[i % names.len()];
            mig::reconcile(&b, &cfg, name).unwrap();
            assert_converged(&b, &cfg, name);
            wanted_counts_match(&b, &cfg, name);
        }
    }

    #[test]
    fn a_failure_part_way_is_repaired_by_the_next_apply(
        model in 0..MODELS.len(),
        first in 0..64usize,
        second in 0..64usize,
        fail_at in 0..24u32,
    ) {
        let names = config_names();
        let cfg = default_config();
        let b = FailNthCreate::new(sim(MODELS[model], 2), u32::MAX);
        let first = &names[first % names.len()];
        let second = &names[second % names.len()];
        mig::reconcile(&b, &cfg, first).unwrap();
        b.creates.store(0, Ordering::SeqCst);
        b.fail_at.store(fail_at, Ordering::SeqCst);
        let _ = mig::reconcile(&b, &cfg, second);
        b.fail_at.store(u32::MAX, Ordering::SeqCst);
        mig::reconcile(&b, &cfg, second).unwrap();
        assert_converged(&b, &cfg, second);
        wanted_counts_match(&b, &cfg, second);
    }
}
