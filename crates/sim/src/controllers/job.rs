//! The Job controller's core, pure: (Job, its pods) → how many pods to create, which to
//! delete, and the status (active/ready/succeeded/failed, Complete / Failed conditions).
//! Non-indexed completion mode; `suspend` and `backoffLimit` honoured.

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

pub const LABEL_CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const LABEL_JOB_NAME: &str = "batch.kubernetes.io/job-name";
pub const LABEL_LEGACY_CONTROLLER_UID: &str = "controller-uid";
pub const LABEL_LEGACY_JOB_NAME: &str = "job-name";
pub const DEFAULT_BACKOFF_LIMIT: i32 = 6;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub create: i32,
    pub delete: Vec<String>,
    pub status: JobStatus,
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn condition(status: &JobStatus, t: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == t && c.status == "True")
}

/// Whether the Job has finished (Complete or Failed).
pub fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .is_some_and(|s| condition(s, "Complete") || condition(s, "Failed"))
}

fn cond(t: &str, reason: &str, message: &str, now: &Time) -> JobCondition {
    JobCondition {
        type_: t.to_string(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The plan for one Job; `pods` are the pods it controls, `now` stamps new conditions.
pub fn plan(job: &Job, pods: &[Pod], now: &Time) -> Plan {
    let spec = job.spec.clone().unwrap_or_default();
    let prev = job.status.clone().unwrap_or_default();
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let active: Vec<&Pod> = live
        .iter()
        .copied()
        .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
        .collect();
    let succeeded = live.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
    let failed = live.iter().filter(|p| phase(p) == "Failed").count() as i32;
    let ready = active
        .iter()
        .filter(|p| super::daemonset::is_ready(p))
        .count() as i32;
    let terminating = (pods.len() - live.len()) as i32;
    let mut status = JobStatus {
        active: Some(active.len() as i32),
        ready: Some(ready),
        succeeded: Some(succeeded.max(prev.succeeded.unwrap_or(0))),
        failed: Some(failed.max(prev.failed.unwrap_or(0))),
        terminating: Some(terminating),
        start_time: prev.start_time.clone(),
        completion_time: prev.completion_time.clone(),
        conditions: prev.conditions.clone(),
        ..Default::default()
    };
    let mut out = Plan::default();
    if finished(job) {
        out.delete = active
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        status.active = Some(0);
        out.status = status;
        return out;
    }
    let succeeded = status.succeeded.unwrap_or(0);
    let failed = status.failed.unwrap_or(0);
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff = spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT);
    let suspended = spec.suspend.unwrap_or(false);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if failed > backoff {
        conditions.push(cond(
            "FailureTarget",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            now,
        ));
        conditions.push(cond(
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            now,
        ));
        out.delete = active
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        status.active = Some(0);
        out.status = status;
        return out;
    }
    // With completions unset (work queue), the Job is done once one pod succeeded and none runs.
    let complete = match spec.completions {
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active.is_empty(),
    };
    if complete {
        conditions.push(cond(
            "SuccessCriteriaMet",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        ));
        conditions.push(cond(
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        ));
        status.completion_time = Some(now.clone());
        out.status = status;
        return out;
    }
    if suspended {
        out.delete = active
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        status.active = Some(0);
        out.status = status;
        return out;
    }
    if status.start_time.is_none() {
        status.start_time = Some(now.clone());
    }
    let want_active = match spec.completions {
        Some(c) => parallelism.min(c - succeeded),
        None if succeeded > 0 => 0,
        None => parallelism,
    };
    let have = active.len() as i32;
    if want_active > have {
        out.create = want_active - have;
    } else if have > want_active {
        // Scale down: newest first.
        let mut a = active.clone();
        a.sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone()));
        out.delete = a
            .iter()
            .take((have - want_active) as usize)
            .filter_map(|p| p.metadata.name.clone())
            .collect();
    }
    out.status = status;
    out
}

/// A new pod from the Job's template.
pub fn new_pod(job: &Job, name: &str) -> Pod {
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    for (k, v) in [
        (LABEL_CONTROLLER_UID, &uid),
        (LABEL_JOB_NAME, &job_name),
        (LABEL_LEGACY_CONTROLLER_UID, &uid),
        (LABEL_LEGACY_JOB_NAME, &job_name),
    ] {
        labels.insert(k.to_string(), v.clone());
    }
    let mut spec = template.spec.unwrap_or_default();
    if spec.restart_policy.is_none() {
        spec.restart_policy = Some("Never".into());
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: job_name,
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: serde_json::Value) -> Job {
        let mut s = spec;
        s["template"] = json!({"metadata": {"labels": {"app": "train"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}});
        serde_json::from_value(
            json!({"metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"}, "spec": s}),
        )
        .unwrap()
    }
    fn pod(name: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"phase": phase}}))
            .unwrap()
    }
    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::now())
    }

    #[test]
    fn parallelism_and_completions() {
        let j = job(json!({"parallelism": 2, "completions": 3}));
        let p = plan(&j, &[], &now());
        assert_eq!(p.create, 2);
        assert!(p.status.start_time.is_some());
        let p = plan(
            &j,
            &[
                pod("a", "Succeeded"),
                pod("b", "Succeeded"),
                pod("c", "Running"),
            ],
            &now(),
        );
        assert_eq!(p.create, 0);
        assert_eq!((p.status.active, p.status.succeeded), (Some(1), Some(2)));
        let p = plan(
            &j,
            &[
                pod("a", "Succeeded"),
                pod("b", "Succeeded"),
                pod("c", "Succeeded"),
            ],
            &now(),
        );
        assert!(
            p.status
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "Complete")
        );
        assert!(p.status.completion_time.is_some());
        // defaults: one pod, one completion
        assert_eq!(plan(&job(json!({})), &[], &now()).create, 1);
    }

    #[test]
    fn failures_and_backoff_limit() {
        let j = job(json!({"backoffLimit": 1}));
        let p = plan(&j, &[pod("a", "Failed")], &now());
        assert_eq!(p.create, 1);
        let p = plan(
            &j,
            &[pod("a", "Failed"), pod("b", "Failed"), pod("c", "Running")],
            &now(),
        );
        assert_eq!(p.delete, ["c"]);
        let conds = p.status.conditions.unwrap();
        assert!(conds.iter().any(|c| c.type_ == "Failed" && c.reason.as_deref() == Some("BackoffLimitExceeded")));
    }

    #[test]
    fn work_queue_and_suspend() {
        let j = job(json!({"parallelism": 3}));
        assert_eq!(plan(&j, &[], &now()).create, 3);
        let p = plan(&j, &[pod("a", "Succeeded"), pod("b", "Running")], &now());
        assert_eq!(p.create, 0);
        assert!(p.status.conditions.unwrap_or_default().is_empty());
        let p = plan(&j, &[pod("a", "Succeeded")], &now());
        assert!(
            p.status
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "Complete")
        );
        let s = job(json!({"parallelism": 2, "suspend": true}));
        let p = plan(&s, &[pod("a", "Running")], &now());
        assert_eq!(
            (p.create, p.delete.as_slice()),
            (0, ["a".to_string()].as_slice())
        );
    }

    #[test]
    fn pod_labels_and_owner() {
        let p = new_pod(&job(json!({})), "j-abc");
        let l = p.metadata.labels.unwrap();
        assert_eq!(l[LABEL_JOB_NAME], "j");
        assert_eq!(l[LABEL_CONTROLLER_UID], "job-uid");
        assert_eq!(l["app"], "train");
        assert_eq!(p.metadata.owner_references.unwrap()[0].kind, "Job");
        assert_eq!(p.spec.unwrap().restart_policy.as_deref(), Some("Never"));
    }
}
