//! Leader election through a `coordination.k8s.io/v1` Lease, so several replicas can run and
//! only one acts.
//!
//! Every write to the Lease is a replace conditional on the resourceVersion read, so two
//! candidates never both win. The holder renews every `retry`; if it cannot renew for
//! `renew_deadline` (shorter than the lease duration), or finds the Lease held by someone else,
//! it must stop at once: the caller exits the process, so a deposed leader performs no further
//! writes. A candidate takes over only once the holder's last renewal is older than the lease
//! duration.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    pub duration: Duration,
    pub renew_deadline: Duration,
    pub retry: Duration,
}

impl Elector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration,
            // Stop well before anyone else may take over.
            renew_deadline: duration * 2 / 3,
            retry: (duration / 7).max(Duration::from_millis(500)),
        }
    }

    /// Wait until this process holds the lease.
    pub async fn acquire(&self) {
        let mut waiting_logged = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    info!(lease = %self.name, identity = %self.identity, "leading");
                    return;
                }
                Ok(false) if !waiting_logged => {
                    info!(lease = %self.name, "another replica leads; standing by");
                    waiting_logged = true;
                }
                Ok(false) => {}
                Err(e) => warn!(lease = %self.name, "leader election: {e}"),
            }
            tokio::time::sleep(self.retry).await;
        }
    }

    /// Keep renewing; returns only when leadership is lost (the caller must stop at once).
    pub async fn hold(&self) -> String {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.retry).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => return "the lease is held by another replica".into(),
                Err(e) if renewed.elapsed() >= self.renew_deadline => {
                    return format!(
                        "could not renew the lease for {:?}: {e}",
                        self.renew_deadline
                    );
                }
                Err(e) => warn!(lease = %self.name, "renewing the lease: {e}"),
            }
        }
    }

    /// Give the lease up on a clean shutdown, so another replica takes over at once.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = None;
            let _ = self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await;
        }
    }

    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return conflict_is_false(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !mine {
            let duration = SignedDuration::from_secs(i64::from(
                spec.lease_duration_seconds
                    .unwrap_or(self.duration.as_secs() as i32),
            ));
            let free = spec.holder_identity.as_deref().is_none_or(str::is_empty)
                || spec
                    .renew_time
                    .as_ref()
                    .is_none_or(|t| t.0.checked_add(duration).is_ok_and(|expiry| expiry < now));
            if !free {
                return Ok(false);
            }
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(self.duration.as_secs().max(1) as i32);
        spec.renew_time = Some(MicroTime(now));
        // The replace carries the resourceVersion just read: a concurrent change conflicts.
        let name = lease.name_any();
        conflict_is_false(
            self.api
                .replace(&name, &PostParams::default(), &lease)
                .await,
        )
    }
}

fn conflict_is_false(r: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
