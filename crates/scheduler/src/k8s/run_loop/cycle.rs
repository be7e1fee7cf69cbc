//! One scheduling cycle (snapshot, actions, the decisions applied) and the housekeeping
//! after it: problems said once, pods grouped, idle reservation pods removed.

use super::state::{Loop, Msg};
use super::writer::group_one;
use crate::k8s::cache::key;
use crate::k8s::metrics::PhaseLabel;
use crate::k8s::status::reason;
use gantry_api::names;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use std::time::Instant;

/// Grace for deleting an idle reservation pod: short, but not 0 (see `collect_reservations`).
const RESERVATION_GRACE_SECONDS: u32 = 1;

impl Loop {
    pub(super) fn cycle(&mut self) {
        let t0 = Instant::now();
        self.cache.input.now = chrono::Utc::now().timestamp();
        self.usage.apply(&mut self.cache.input);
        let snap = crate::Snapshot::build(&self.cache.input);
        let t1 = Instant::now();
        let d = crate::schedule(&snap, &self.opts.config);
        let t2 = Instant::now();
        drop(snap);
        self.usage.record(&self.cache.input, &d.queues);
        self.apply(d);
        self.report_problems();
        self.group_pods();
        self.collect_reservations();
        let t3 = Instant::now();
        tracing::debug!(
            pods = self.cache.input.pods.len(),
            snapshot = ?(t1 - t0),
            actions = ?(t2 - t1),
            apply = ?(t3 - t2),
            binds_in_flight = self.cache.assumed.len(),
            ungrouped = self.cache.ungrouped.len(),
            "cycle"
        );
        let ph = |p: &str| PhaseLabel { phase: p.into() };
        self.metrics
            .phase_seconds
            .get_or_create(&ph("snapshot"))
            .observe((t1 - t0).as_secs_f64());
        self.metrics
            .phase_seconds
            .get_or_create(&ph("actions"))
            .observe((t2 - t1).as_secs_f64());
        self.metrics
            .phase_seconds
            .get_or_create(&ph("apply"))
            .observe((t3 - t2).as_secs_f64());
        self.metrics.cycle_seconds.observe((t3 - t0).as_secs_f64());
    }

    /// Pods of ours the scheduler cannot consider at all: say why, once.
    fn report_problems(&mut self) {
        let now = self.cache.input.now;
        let mut out = Vec::new();
        for (k, c, p) in self.cache.problems() {
            out.push((k.to_string(), p.to_string()));
            let _ = c;
        }
        for (k, c) in &self.cache.meta {
            if c.ours
                && c.input.node.is_none()
                && c.problem.is_none()
                && !c.input.pod_group.is_empty()
                && now - c.input.creation > 5
                && self
                    .cache
                    .pod_group(&c.input.namespace, &c.input.pod_group)
                    .is_none()
            {
                out.push((
                    k.clone(),
                    format!(
                        "pod {k}: podgroup {:?} (annotation {}) does not exist",
                        c.input.pod_group,
                        names::ANNOTATION_POD_GROUP_NAME
                    ),
                ));
            }
        }
        for (k, msg) in out {
            if self.said_problem.insert(format!("{k}\u{0}{msg}")) {
                self.pod_event(&k, "Warning", reason::INVALID, msg);
            }
        }
    }

    fn group_pods(&mut self) {
        let todo: Vec<String> = self
            .cache
            .ungrouped
            .iter()
            .filter(|k| !self.grouping.contains(*k))
            .cloned()
            .collect();
        for k in todo {
            let Some(pod) = self.cache.meta.get(&k).cloned() else {
                continue;
            };
            self.grouping.insert(k.clone());
            let (client, tx, slots) =
                (self.client.clone(), self.tx.clone(), self.api_slots.clone());
            tokio::spawn(async move {
                let _permit = slots.acquire_owned().await;
                let result = group_one(&client, &pod).await;
                let _ = tx.send(Msg::Grouped { key: k, result }).await;
            });
        }
    }

    /// Remove reservation pods whose GPU has no fractional tenants (bound or being bound).
    fn collect_reservations(&mut self) {
        let now = self.cache.input.now;
        let idle: Vec<(String, String, String)> = self
            .cache
            .reservations
            .iter()
            .filter(|(g, r)| {
                (r.phase_failed || now - r.created > 5) && self.cache.group_tenants(g) == 0
            })
            .map(|(g, r)| (g.clone(), r.namespace.clone(), r.name.clone()))
            .collect();
        for (_, ns, name) in idle {
            let k = key(&ns, &name);
            if !self.deleting.insert(k.clone()) {
                continue;
            }
            let (client, tx) = (self.client.clone(), self.tx.clone());
            tokio::spawn(async move {
                let api: Api<Pod> = Api::namespaced(client, &ns);
                // Graceful, so the pod stays (Terminating, a Releasing holder of its GPU)
                // until the kubelet has stopped it and released the device; with grace 0 it
                // would vanish at once while the node still holds the device.
                let dp = DeleteParams {
                    grace_period_seconds: Some(RESERVATION_GRACE_SECONDS),
                    ..Default::default()
                };
                if let Err(e) = api.delete(&name, &dp).await
                    && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                {
                    tracing::warn!(pod = %name, error = %e, "removing reservation pod failed");
                }
                let _ = tx.send(Msg::Deleted { key: k }).await;
            });
        }
    }
}
