//! A plan as text, for `--dry-run` and logs.

use std::fmt::Write;

use super::plan::{GpuAction, MigPlan, describe};

/// Per GPU: current layout → wanted layout, then the steps.
pub fn render(plan: &MigPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "MIG config {:?}:", plan.config);
    for g in &plan.gpus {
        let now = describe(&g.current);
        match (&g.action, &g.wanted) {
            (GpuAction::NotSelected, _) | (_, None) => {
                let _ = writeln!(
                    s,
                    "GPU {} ({}): {now}; not selected by this config, left as is",
                    g.gpu, g.model
                );
            }
            (GpuAction::Unchanged, Some(_)) => {
                let _ = writeln!(s, "GPU {} ({}): {now}; already as wanted", g.gpu, g.model);
            }
            (
                GpuAction::Change {
                    set_mode,
                    destroy,
                    create,
                },
                Some(w),
            ) => {
                let _ = writeln!(s, "GPU {} ({}): {now} -> {}", g.gpu, g.model, describe(w));
                for d in destroy {
                    let i = &d.instance;
                    let _ = writeln!(
                        s,
                        "  destroy GPU instance {} ({} at {}:{}) and its {} compute instance(s)",
                        i.id,
                        i.profile,
                        i.placement.start,
                        i.placement.size,
                        d.compute_instances.len()
                    );
                }
                if let Some(on) = set_mode {
                    let _ = writeln!(
                        s,
                        "  {} MIG mode (GPU reset; needs the GPU idle)",
                        if *on { "enable" } else { "disable" }
                    );
                }
                for c in create {
                    let cis = c
                        .compute_instances
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join("+");
                    let _ = writeln!(
                        s,
                        "  create GPU instance {} at {}:{} with compute instance(s) of {cis} slice(s)",
                        c.profile.name, c.placement.start, c.placement.size
                    );
                }
            }
        }
    }
    let _ = if plan.changes() {
        writeln!(
            s,
            "{} GPU(s) change; GPU clients must be stopped first{}",
            plan.gpus.iter().filter(|g| g.changes()).count(),
            if plan.mode_change() {
                "; MIG mode changes"
            } else {
                ""
            }
        )
    } else {
        writeln!(s, "nothing to change")
    };
    s
}
