//! Leader election on a `coordination.k8s.io/v1` Lease: take it when free or expired, renew it
//! while held, give it back on shutdown so a successor starts at once. Updates carry the
//! resourceVersion read (a compare-and-swap), so two replicas never both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease as LeaseObj, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a holder's claim lasts without renewal.
    pub duration: Duration,
}

pub struct Lease {
    api: Api<LeaseObj>,
    cfg: LeaseConfig,
}

#[derive(Debug, thiserror::Error)]
#[error("Lease {namespace}/{name}: {source}")]
pub struct LeaseError {
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// Whether `spec` lets `me` hold the lease at `now`.
pub fn may_take(spec: &LeaseSpec, me: &str, now: Timestamp) -> bool {
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == me {
        return true;
    }
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    match spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) {
        Some(t) => t.0.as_second() + secs < now.as_second(),
        None => true,
    }
}

impl Lease {
    pub fn new(client: kube::Client, cfg: LeaseConfig) -> Self {
        Lease {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    fn err(&self, source: kube::Error) -> LeaseError {
        LeaseError {
            namespace: self.cfg.namespace.clone(),
            name: self.cfg.name.clone(),
            source,
        }
    }

    /// Take or renew the lease; `Ok(true)` while this replica holds it.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaseError> {
        let now = Timestamp::now();
        let secs = self.cfg.duration.as_secs().max(1) as i32;
        let Some(mut lease) = self
            .api
            .get_opt(&self.cfg.name)
            .await
            .map_err(|e| self.err(e))?
        else {
            let lease = LeaseObj {
                metadata: kube::api::ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.cfg.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.err(e)),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if !may_take(spec, &self.cfg.identity, now) {
            return Ok(false);
        }
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            spec.holder_identity = Some(self.cfg.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(secs);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Someone else wrote it first.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Give the lease up (on shutdown) so another replica takes over at once.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.cfg.name)
            .await
            .map_err(|e| self.err(e))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        self.api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_free_own_or_expired_leases_only() {
        let now = Timestamp::now();
        let spec = |holder: Option<&str>, renewed_ago: i64| LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                Timestamp::from_second(now.as_second() - renewed_ago).unwrap(),
            )),
            ..Default::default()
        };
        assert!(may_take(&spec(None, 1), "me", now));
        assert!(may_take(&spec(Some("me"), 1), "me", now));
        assert!(!may_take(&spec(Some("other"), 1), "me", now));
        assert!(may_take(&spec(Some("other"), 16), "me", now));
    }
}
