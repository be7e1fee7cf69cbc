//! Leader election on a coordination.k8s.io Lease: take it when free or expired, renew it
//! while leading, give it back on shutdown so a successor starts at once.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Whether `l` is free for `me` (unheld, ours, or expired).
pub fn available(l: &Lease, me: &str, at: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(spec) = &l.spec else { return true };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == me {
        return true;
    }
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    match &spec.renew_time {
        Some(t) => t.0.as_second() + secs < at.as_second(),
        None => true,
    }
}

/// Try once to hold the lease. `Ok(true)`: we lead until the next renewal is due.
pub async fn try_acquire(client: &kube::Client, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let secs = cfg.duration.as_secs().max(1) as i32;
    match api.get_opt(&cfg.name).await? {
        None => {
            let l: Lease = serde_json::from_value(json!({
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": {"holderIdentity": cfg.identity, "leaseDurationSeconds": secs,
                          "acquireTime": now(), "renewTime": now(), "leaseTransitions": 0}
            }))
            .map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &l).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut l) => {
            if !available(&l, &cfg.identity, k8s_openapi::jiff::Timestamp::now()) {
                return Ok(false);
            }
            let spec = l.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
                spec.acquire_time = Some(now());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.holder_identity = Some(cfg.identity.clone());
            spec.lease_duration_seconds = Some(secs);
            spec.renew_time = Some(now());
            // resourceVersion makes this a compare-and-swap: two candidates cannot both win.
            match api.replace(&cfg.name, &PostParams::default(), &l).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Give the lease back (best effort).
pub async fn release(client: &kube::Client, cfg: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    if let Ok(Some(mut l)) = api.get_opt(&cfg.name).await
        && let Some(spec) = l.spec.as_mut()
        && spec.holder_identity.as_deref() == Some(cfg.identity.as_str())
    {
        spec.holder_identity = None;
        spec.renew_time = None;
        let _ = api.replace(&cfg.name, &PostParams::default(), &l).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    #[test]
    fn expired_or_own_leases_are_available() {
        let t0 = k8s_openapi::jiff::Timestamp::from_second(1000).unwrap();
        let l = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("a".into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(t0)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let at = |s| k8s_openapi::jiff::Timestamp::from_second(s).unwrap();
        assert!(available(&l, "a", at(1001)));
        assert!(!available(&l, "b", at(1010)));
        assert!(available(&l, "b", at(1016)));
    }
}
