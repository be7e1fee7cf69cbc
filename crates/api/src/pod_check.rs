//! Offline checks of pods and of the pod templates inside workloads (Deployment, DaemonSet,
//! StatefulSet, ReplicaSet, Job, CronJob): KAI's GPU-sharing annotations as its admission
//! webhook reads them, GPU resource names and quantities as the kubelet takes them, and the
//! scheduler name that KAI-only features need.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::names;
use crate::problem::{Problem, index, join};

/// Where a workload kind keeps its pod template (JSON pointer, dotted path), or `None` for
/// kinds that have none.
pub fn template_path(kind: &str) -> Option<(&'static str, &'static str)> {
    match kind {
        "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet" | "Job" => {
            Some(("/spec/template", "spec.template"))
        }
        "CronJob" => Some((
            "/spec/jobTemplate/spec/template",
            "spec.jobTemplate.spec.template",
        )),
        _ => None,
    }
}

/// Problems of a workload's pod template, with paths from the workload's root.
pub fn workload(kind: &str, v: &Value) -> Vec<Problem> {
    let Some((ptr, path)) = template_path(kind) else {
        return Vec::new();
    };
    match v.pointer(ptr) {
        Some(t) => pod(t)
            .into_iter()
            .map(|p| Problem::new(format!("{path}.{}", p.path), p.message))
            .collect(),
        None => vec![Problem::new(path, "is required")],
    }
}

/// Problems of a Pod (or pod template): paths `metadata.…` / `spec.…`.
pub fn pod(v: &Value) -> Vec<Problem> {
    let annotations: BTreeMap<String, String> = v
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let s = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    (k.clone(), s)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut whole = false;
    for group in ["containers", "initContainers"] {
        let list = v
            .pointer(&format!("/spec/{group}"))
            .and_then(Value::as_array);
        for (i, c) in list.into_iter().flatten().enumerate() {
            let base = index(&format!("spec.{group}"), i);
            for section in ["limits", "requests"] {
                let Some(m) = c
                    .pointer(&format!("/resources/{section}"))
                    .and_then(Value::as_object)
                else {
                    continue;
                };
                for (name, q) in m {
                    let path = join(&format!("{base}.resources.{section}"), name);
                    // KAI's rule: a whole-GPU *limit* (the key's presence) excludes a share.
                    whole |= section == "limits" && name == names::RESOURCE_GPU;
                    if let Some(p) = resource_problem(name, q) {
                        out.push(Problem::new(path, p));
                    }
                }
            }
        }
    }
    if let Err(errs) = crate::kai::parse_gpu_sharing(&annotations, whole) {
        out.extend(
            errs.into_iter()
                .map(|e| Problem::new(join("metadata.annotations", e.annotation()), e.reason())),
        );
    }
    let kai_only = [names::ANNOTATION_GPU_FRACTION, "gpu-memory"]
        .into_iter()
        .find(|a| annotations.contains_key(*a));
    let scheduler = v.pointer("/spec/schedulerName").and_then(Value::as_str);
    if let Some(a) = kai_only
        && matches!(scheduler, None | Some("default-scheduler"))
    {
        out.push(Problem::new(
            "spec.schedulerName",
            format!(
                "the {a:?} annotation is honoured only by the KAI scheduler: set schedulerName: {} (or the name Gantry's scheduler is configured with)",
                names::DEFAULT_SCHEDULER_NAME
            ),
        ));
    }
    out
}

/// Why a GPU resource request cannot work, if it cannot.
fn resource_problem(name: &str, q: &Value) -> Option<String> {
    let nvidia = name.starts_with("nvidia.com/");
    if !nvidia {
        return None;
    }
    if let Some(rest) = name.strip_prefix(names::RESOURCE_MIG_PREFIX) {
        let rest = rest.strip_suffix(".shared").unwrap_or(rest);
        if mig_resource_profile(rest).is_none() {
            return Some(format!(
                "{name:?} is not a MIG resource: expected nvidia.com/mig-<G>g.<GB>gb (e.g. nvidia.com/mig-1g.10gb)"
            ));
        }
    }
    let text = q.as_str().map_or_else(|| q.to_string(), str::to_string);
    match text.parse::<u64>() {
        Ok(_) => None,
        Err(_) => Some(format!(
            "{name} must be a whole number, got {text}: extended resources cannot be split (use the gpu-fraction or gpu-memory annotation with the KAI scheduler)"
        )),
    }
}

/// `1g.10gb`, `1g.5gb.me`, `1g.24gb-me`, `2g.48gb.me.all` → the profile, if well formed.
fn mig_resource_profile(s: &str) -> Option<crate::mig_parted::MigProfile> {
    let profile = [".me.all", ".gfx", ".me"]
        .iter()
        .find_map(|suffix| {
            s.strip_suffix(suffix)
                .map(|base| format!("{base}+{}", &suffix[1..]))
        })
        .unwrap_or_else(|| s.to_string());
    profile.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(ps: &[Problem]) -> Vec<String> {
        ps.iter().map(|p| p.path.clone()).collect()
    }

    #[test]
    fn deployment_template_is_checked_with_its_path() {
        let d = json!({"spec": {"template": {
            "metadata": {"annotations": {"gpu-fraction": "1.5"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "0.5", "nvidia.com/mig-1g.10gb": 1}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/mig-9x": 1}}}]}}}});
        let p = workload("Deployment", &d);
        let ps = paths(&p);
        assert!(
            ps.contains(&"spec.template.metadata.annotations.gpu-fraction".to_string()),
            "{p:?}"
        );
        assert!(
            ps.contains(
                &"spec.template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]"
                    .to_string()
            ),
            "{p:?}"
        );
        assert!(
            ps.contains(
                &"spec.template.spec.containers[1].resources.limits[\"nvidia.com/mig-9x\"]"
                    .to_string()
            ),
            "{p:?}"
        );
        // The fraction is also refused beside a whole nvidia.com/gpu limit.
        assert_eq!(p.len(), 4, "{p:?}");
    }

    #[test]
    fn cronjob_template_and_scheduler_name() {
        let c = json!({"spec": {"jobTemplate": {"spec": {"template": {
            "metadata": {"annotations": {"gpu-fraction": "0.5"}},
            "spec": {"containers": [{"name": "a"}]}}}}}});
        let p = workload("CronJob", &c);
        assert_eq!(
            paths(&p),
            ["spec.jobTemplate.spec.template.spec.schedulerName"]
        );
        assert!(workload("Service", &c).is_empty());
        assert_eq!(
            paths(&workload("Job", &json!({"spec": {}}))),
            ["spec.template"]
        );
    }

    #[test]
    fn good_pods_pass() {
        let p = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {
            "nvidia.com/gpu": 2, "nvidia.com/mig-1g.5gb.me": "1", "nvidia.com/mig-2g.48gb.me.all": 1,
            "nvidia.com/mig-1g.24gb-me": 1, "nvidia.com/gpu.shared": 1, "cpu": "500m"}}}]}});
        assert_eq!(pod(&p), vec![]);
    }
}
