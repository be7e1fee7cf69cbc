//! Carry a [`MigPlan`] out through the backend, then check that the GPUs look as planned.
//!
//! Each changing GPU is torn down completely and rebuilt (as mig-parted does), so whatever an
//! interrupted apply left behind is repaired by the next plan + apply.

use gantry_api::mig_parted::MigPartedConfig;
use gantry_gpu::{Backend, GpuError};

use super::plan::{self, GpuAction, MigPlan, PlanError};
use super::state::{self, ReadOnly};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("reading GPU state: {0}")]
    Observe(GpuError),
    #[error("GPU {gpu}: {step} failed: {source}")]
    Step {
        gpu: u32,
        step: String,
        source: GpuError,
    },
    #[error("GPU {gpu}: after applying MIG config {config:?} it shows {got}, wanted {wanted}")]
    Mismatch {
        gpu: u32,
        config: String,
        got: String,
        wanted: String,
    },
}

/// What an apply did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApplyReport {
    /// GPUs that were changed.
    pub changed: Vec<u32>,
    /// Whether any MIG mode was changed.
    pub mode_changed: bool,
}

/// Carry out `plan`. Stops at the first failing step; the GPU is then in a state the next
/// [`reconcile`] repairs.
pub fn apply(backend: &dyn Backend, plan: &MigPlan) -> Result<ApplyReport, ApplyError> {
    let mut report = ApplyReport::default();
    for g in &plan.gpus {
        let GpuAction::Change {
            set_mode,
            destroy,
            create,
        } = &g.action
        else {
            continue;
        };
        let gpu = g.gpu;
        let step = |step: String| move |source| ApplyError::Step { gpu, step, source };
        for d in destroy {
            let gi = d.instance.id;
            for &ci in &d.compute_instances {
                backend
                    .destroy_compute_instance(gpu, gi, ci)
                    .map_err(step(format!(
                        "destroying compute instance {ci} of GPU instance {gi}"
                    )))?;
            }
            backend.destroy_gpu_instance(gpu, gi).map_err(step(format!(
                "destroying GPU instance {gi} ({})",
                d.instance.profile
            )))?;
        }
        if let Some(on) = *set_mode {
            let what = if on { "enabling" } else { "disabling" };
            let mode = backend
                .set_mig_mode(gpu, on)
                .map_err(step(format!("{what} MIG mode")))?;
            report.mode_changed = true;
            if mode.current != on {
                return Err(ApplyError::Step {
                    gpu,
                    step: format!("{what} MIG mode"),
                    source: GpuError::InUse {
                        gpu,
                        reason: "the mode change is pending; stop the GPU's processes and reset it"
                            .to_string(),
                    },
                });
            }
        }
        for c in create {
            let name = &c.profile.name;
            let at = format!("{}:{}", c.placement.start, c.placement.size);
            let gi = backend
                .create_gpu_instance(gpu, name, Some(c.placement))
                .map_err(step(format!("creating GPU instance {name} at {at}")))?;
            for &slices in &c.compute_instances {
                backend
                    .create_compute_instance(gpu, gi.id, slices)
                    .map_err(step(format!(
                        "creating a {slices}-slice compute instance in GPU instance {} ({name})",
                        gi.id
                    )))?;
            }
        }
        report.changed.push(gpu);
    }
    Ok(report)
}

/// Read the GPUs, plan `config_name`, apply, and check the result.
pub fn reconcile(
    backend: &dyn Backend,
    config: &MigPartedConfig,
    config_name: &str,
) -> Result<ApplyReport, ApplyError> {
    let facts = state::observe(ReadOnly::new(backend)).map_err(ApplyError::Observe)?;
    let planned = plan::plan(config, config_name, &facts)?;
    let report = apply(backend, &planned)?;
    let after = state::observe(ReadOnly::new(backend)).map_err(ApplyError::Observe)?;
    let check = plan::plan(config, config_name, &after)?;
    if let Some(g) = check.gpus.iter().find(|g| g.changes()) {
        return Err(ApplyError::Mismatch {
            gpu: g.gpu,
            config: config_name.to_string(),
            got: plan::describe(&g.current),
            wanted: g.wanted.as_ref().map(plan::describe).unwrap_or_default(),
        });
    }
    Ok(report)
}
