//! Leader election through a `coordination.k8s.io/v1` Lease, so several replicas can run and
//! only one acts.
//!
//! Every write to the Lease is a replace conditional on the resourceVersion read, so two
//! candidates never both win.
//!
//! No wall clock is trusted. A candidate times the holder from when it last saw the holder's
//! record (the Lease's spec) change, on its own monotonic clock: it keeps the record it last
//! observed and the instant it observed it, and takes the Lease over only once
//! `observed_at + lease_duration < now` (client-go's rule). The holder's `renewTime` is only
//! something that changes; how far it is from anyone's wall clock does not matter, so replicas
//! whose clocks disagree by any amount still never both act. Each renewal writes a `renewTime`
//! strictly later than the one before it, so every renewal is a visible change even if the
//! holder's wall clock stands still or steps back.
//!
//! The holder renews every `retry`. Its term runs until `renew_deadline` (shorter than the lease
//! duration) after the start of its last successful renewal, on its own monotonic clock; when a
//! renewal has not succeeded by then, or it finds the Lease held by someone else, it stops at
//! once: the caller exits the process, so a deposed leader performs no further writes. Since a
//! candidate can only have observed that renewal after it started, the holder's term ends before
//! any candidate's lease duration from it can.
//!
//! [`judge`] and [`next_record`] are the rule, with the clock passed in; [`Elector`] is the shell
//! that reads and writes the Lease through a [`LeaseStore`].

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tracing::{info, warn};

/// The record a candidate last saw, and when (on its own monotonic clock).
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub record: LeaseSpec,
    pub at: Instant,
}

/// What to do with the Lease, as [`judge`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It is ours: renew it.
    Renew,
    /// Free, or its holder has shown no sign of life for a lease duration: take it.
    Acquire,
    /// Someone else holds it; it cannot be taken before `until` (later if its record changes).
    Wait { until: Instant },
}

/// The rule. `record` is the Lease's spec as just read (`None` fields for a missing spec),
/// `now` the local monotonic instant it was read at (taken after the read returned), and
/// `observed` what this candidate saw before; it is updated when the record changed. A record
/// held by someone else expires a lease duration after it was first seen in its current form —
/// the longer of the duration the holder declared and our own — whatever its `renewTime` says.
pub fn judge(
    observed: &mut Option<Observed>,
    record: &LeaseSpec,
    me: &str,
    now: Instant,
    lease_duration: Duration,
) -> Verdict {
    let holder = record.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() {
        return Verdict::Acquire;
    }
    if holder == me {
        return Verdict::Renew;
    }
    let at = match observed {
        Some(o) if o.record == *record => o.at,
        _ => {
            *observed = Some(Observed {
                record: record.clone(),
                at: now,
            });
            now
        }
    };
    let declared = record
        .lease_duration_seconds
        .map_or(Duration::ZERO, |s| Duration::from_secs(s.max(0) as u64));
    let until = at + declared.max(lease_duration);
    if until < now {
        Verdict::Acquire
    } else {
        Verdict::Wait { until }
    }
}

/// The record `me` writes to renew (`record` is ours) or acquire (anything else) the Lease, at
/// wall time `wall_now`. A renewal's `renewTime` is strictly after the one it replaces, so that
/// the write is a change others can see even if this wall clock stands still or goes back.
pub fn next_record(
    record: &LeaseSpec,
    me: &str,
    wall_now: Timestamp,
    lease_duration: Duration,
) -> LeaseSpec {
    let mut next = record.clone();
    if record.holder_identity.as_deref() == Some(me) {
        let after_previous = record
            .renew_time
            .as_ref()
            .and_then(|t| t.0.checked_add(SignedDuration::from_micros(1)).ok());
        next.renew_time = Some(MicroTime(
            after_previous.map_or(wall_now, |t| t.max(wall_now)),
        ));
    } else {
        next.holder_identity = Some(me.into());
        next.acquire_time = Some(MicroTime(wall_now));
        next.renew_time = Some(MicroTime(wall_now));
        next.lease_transitions = Some(record.lease_transitions.map_or(0, |n| n + 1));
    }
    next.lease_duration_seconds = Some(lease_duration.as_millis().div_ceil(1000).max(1) as i32);
    next
}

/// Where the Lease lives. Writes report a conflict (the Lease changed since it was read, or it
/// already exists) as `Ok(false)`.
pub trait LeaseStore {
    fn get(&self) -> impl Future<Output = anyhow::Result<Option<Lease>>> + Send;
    fn create(&self, lease: &Lease) -> impl Future<Output = anyhow::Result<bool>> + Send;
    /// Conditional on `lease.metadata.resource_version`.
    fn replace(&self, lease: &Lease) -> impl Future<Output = anyhow::Result<bool>> + Send;
}

/// The Lease on the API server.
pub struct KubeLease {
    api: Api<Lease>,
    name: String,
}

impl LeaseStore for KubeLease {
    async fn get(&self) -> anyhow::Result<Option<Lease>> {
        Ok(self.api.get_opt(&self.name).await?)
    }

    async fn create(&self, lease: &Lease) -> anyhow::Result<bool> {
        conflict_is_false(self.api.create(&PostParams::default(), lease).await)
    }

    async fn replace(&self, lease: &Lease) -> anyhow::Result<bool> {
        conflict_is_false(
            self.api
                .replace(&self.name, &PostParams::default(), lease)
                .await,
        )
    }
}

fn conflict_is_false(r: Result<Lease, kube::Error>) -> anyhow::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn lost_by_deadline(renew_deadline: Duration, last_error: Option<anyhow::Error>) -> String {
    match last_error {
        Some(e) => format!("could not renew the lease within {renew_deadline:?}: {e:#}"),
        None => format!("could not renew the lease within {renew_deadline:?}"),
    }
}

type WallClock = Box<dyn Fn() -> Timestamp + Send + Sync>;

pub struct Elector<S = KubeLease> {
    store: S,
    name: String,
    identity: String,
    /// Only written into the record (`acquireTime`, `renewTime`), never compared.
    wall: WallClock,
    pub duration: Duration,
    pub renew_deadline: Duration,
    pub retry: Duration,
    /// Told when the term starts, is renewed and ends (the client's guard on changes).
    term: Option<std::sync::Arc<crate::term::Term>>,
}

impl Elector<KubeLease> {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        let store = KubeLease {
            api: Api::namespaced(client, namespace),
            name: name.into(),
        };
        Elector::with_store(store, name, identity, duration, Box::new(Timestamp::now))
    }
}

impl<S: LeaseStore> Elector<S> {
    pub fn with_store(
        store: S,
        name: &str,
        identity: &str,
        duration: Duration,
        wall: WallClock,
    ) -> Self {
        Elector {
            store,
            name: name.into(),
            identity: identity.into(),
            wall,
            duration,
            // Stop well before anyone else may take over.
            renew_deadline: duration * 2 / 3,
            retry: (duration / 7).max(Duration::from_millis(500)),
            term: None,
        }
    }

    /// Keep `term` up to date with this elector's term.
    pub fn with_term(mut self, term: std::sync::Arc<crate::term::Term>) -> Self {
        self.term = Some(term);
        self
    }

    fn term_until(&self, deadline: Instant) {
        if let Some(t) = &self.term {
            t.lead_until(deadline);
        }
    }

    fn term_over(&self) {
        if let Some(t) = &self.term {
            t.end();
        }
    }

    /// Wait until this process holds the lease. Returns the instant the winning attempt
    /// started: the start of the term, which [`Elector::hold`] goes on from.
    pub async fn acquire(&self) -> Instant {
        let mut observed = None;
        let mut waiting_logged = false;
        loop {
            let started = Instant::now();
            match self.try_once(&mut observed, true).await {
                // An answer that came back after the term it began was over (a stalled call)
                // is no term: renew first.
                Ok(true) if Instant::now() >= started + self.renew_deadline => {
                    warn!(lease = %self.name, "acquired the lease too late to lead; renewing");
                    continue;
                }
                Ok(true) => {
                    info!(lease = %self.name, identity = %self.identity, "leading");
                    self.term_until(started + self.renew_deadline);
                    return started;
                }
                Ok(false) if !waiting_logged => {
                    info!(lease = %self.name, "another replica leads; standing by");
                    waiting_logged = true;
                }
                Ok(false) => {}
                Err(e) => warn!(lease = %self.name, "leader election: {e:#}"),
            }
            tokio::time::sleep(self.retry).await;
        }
    }

    /// Keep renewing; returns only when leadership is lost (the caller must stop at once):
    /// found held by someone else, or not renewed within `renew_deadline` of the start of the
    /// last successful renewal (`term_start` at first), a hung call included.
    pub async fn hold(&self, term_start: Instant) -> String {
        let lost = self.hold_until_lost(term_start).await;
        self.term_over();
        lost
    }

    async fn hold_until_lost(&self, mut term_start: Instant) -> String {
        let mut last_error = None;
        loop {
            let deadline = term_start + self.renew_deadline;
            tokio::time::sleep_until((Instant::now() + self.retry).min(deadline)).await;
            let started = Instant::now();
            if started >= deadline {
                return lost_by_deadline(self.renew_deadline, last_error);
            }
            // A holder has nothing to observe: anyone else's record means it lost.
            let mut unobserved = None;
            let attempt = self.try_once(&mut unobserved, false);
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(true)) => {
                    term_start = started;
                    self.term_until(started + self.renew_deadline);
                    last_error = None;
                }
                Ok(Ok(false)) => return "the lease is held by another replica".into(),
                Ok(Err(e)) => {
                    warn!(lease = %self.name, "renewing the lease: {e:#}");
                    last_error = Some(e);
                }
                Err(_) => return lost_by_deadline(self.renew_deadline, last_error),
            }
        }
    }

    /// Give the lease up on a clean shutdown (after acting has stopped), so another replica
    /// takes over at once.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.store.get().await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = None;
            let _ = self.store.replace(&lease).await;
        }
    }

    /// One read, one [`judge`]ment, at most one conditional write. `Ok(true)`: this process
    /// holds the lease. Without `may_acquire` only a renewal is written.
    async fn try_once(
        &self,
        observed: &mut Option<Observed>,
        may_acquire: bool,
    ) -> anyhow::Result<bool> {
        let Some(mut lease) = self.store.get().await.context("reading the lease")? else {
            if !may_acquire {
                return Ok(false);
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(next_record(
                    &LeaseSpec::default(),
                    &self.identity,
                    (self.wall)(),
                    self.duration,
                )),
            };
            return self
                .store
                .create(&lease)
                .await
                .context("creating the lease");
        };
        // Observed now, after the read returned: never before the write that produced it.
        let now = Instant::now();
        let record = lease.spec.take().unwrap_or_default();
        match judge(observed, &record, &self.identity, now, self.duration) {
            Verdict::Renew => {}
            Verdict::Acquire if may_acquire => {}
            Verdict::Acquire | Verdict::Wait { .. } => return Ok(false),
        }
        lease.spec = Some(next_record(
            &record,
            &self.identity,
            (self.wall)(),
            self.duration,
        ));
        // The replace carries the resourceVersion just read: a concurrent change conflicts.
        self.store
            .replace(&lease)
            .await
            .context("writing the lease")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Duration = Duration::from_secs(15);

    fn at(wall: Timestamp, offset: Duration, skew_leases: i32) -> Timestamp {
        let skew = SignedDuration::try_from(L).unwrap() * skew_leases;
        wall.checked_add(SignedDuration::try_from(offset).unwrap())
            .unwrap()
            .checked_add(skew)
            .unwrap()
    }

    fn held_by(holder: &str, renew: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(L.as_secs() as i32),
            acquire_time: Some(MicroTime(renew)),
            renew_time: Some(MicroTime(renew)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    /// A holder whose clock is off by ± several lease durations keeps the lease as long as its
    /// record keeps changing, and loses it once it has not changed for a lease duration as
    /// timed here.
    #[test]
    fn renew_time_far_in_the_past_or_future_is_not_judged_only_changes_are() {
        let wall = Timestamp::from_second(1_800_000_000).unwrap();
        for skew in [-10, -3, -2, 0, 2, 3, 10] {
            let t0 = Instant::now();
            let mut observed = None;
            let mut record = held_by("other", at(wall, Duration::ZERO, skew));
            // Renewals every third of a lease for 20 leases: never taken over.
            let mut last_change = t0;
            for step in 0..60u32 {
                let now = t0 + L / 3 * step;
                if step > 0 {
                    record = next_record(&record, "other", at(wall, L / 3 * step, skew), L);
                    last_change = now;
                }
                // Read a little later than the change, as a poll would.
                let read = now + Duration::from_millis(400);
                assert_eq!(
                    judge(&mut observed, &record, "me", read, L),
                    Verdict::Wait {
                        until: last_change + Duration::from_millis(400) + L
                    },
                    "skew {skew} leases, step {step}"
                );
            }
            // Then it stops: nothing until a lease duration after the change was seen, here.
            let seen = last_change + Duration::from_millis(400);
            for ms in [500, 5_000, 14_999, 15_000] {
                let now = seen + Duration::from_millis(ms);
                assert!(
                    matches!(
                        judge(&mut observed, &record, "me", now, L),
                        Verdict::Wait { .. }
                    ),
                    "skew {skew}, {ms} ms after the last change"
                );
            }
            let now = seen + L + Duration::from_millis(1);
            assert_eq!(
                judge(&mut observed, &record, "me", now, L),
                Verdict::Acquire,
                "skew {skew}"
            );
        }
    }

    /// A candidate that has just started has seen no change yet: it waits a whole lease duration
    /// from its first read, even if renewTime says the holder died long ago.
    #[test]
    fn a_record_seen_for_the_first_time_is_timed_from_then() {
        let ancient = Timestamp::from_second(1_000_000_000).unwrap();
        let record = held_by("other", ancient);
        let t0 = Instant::now();
        let mut observed = None;
        assert_eq!(
            judge(&mut observed, &record, "me", t0, L),
            Verdict::Wait { until: t0 + L }
        );
        assert_eq!(observed.as_ref().map(|o| o.at), Some(t0));
        // Reading the same record again does not restart the clock.
        assert_eq!(
            judge(&mut observed, &record, "me", t0 + L, L),
            Verdict::Wait { until: t0 + L }
        );
        assert_eq!(
            judge(
                &mut observed,
                &record,
                "me",
                t0 + L + Duration::from_micros(1),
                L
            ),
            Verdict::Acquire
        );
    }

    #[test]
    fn free_and_own_leases_and_the_longer_duration() {
        let wall = Timestamp::from_second(1_800_000_000).unwrap();
        let t0 = Instant::now();
        let mut released = held_by("other", wall);
        released.holder_identity = None;
        assert_eq!(judge(&mut None, &released, "me", t0, L), Verdict::Acquire);
        released.holder_identity = Some(String::new());
        assert_eq!(judge(&mut None, &released, "me", t0, L), Verdict::Acquire);
        assert_eq!(
            judge(&mut None, &held_by("me", wall), "me", t0, L),
            Verdict::Renew
        );
        // The holder declared 60 s: a candidate configured for 15 s still waits 60 s.
        let mut long = held_by("other", wall);
        long.lease_duration_seconds = Some(60);
        assert_eq!(
            judge(&mut None, &long, "me", t0, L),
            Verdict::Wait {
                until: t0 + Duration::from_secs(60)
            }
        );
        // And one that declared less is given our own duration.
        long.lease_duration_seconds = Some(1);
        assert_eq!(
            judge(&mut None, &long, "me", t0, L),
            Verdict::Wait { until: t0 + L }
        );
    }

    /// Each renewal is a change others can see, even when the holder's wall clock stands still
    /// or steps back.
    #[test]
    fn renewals_always_move_renew_time_forward() {
        let wall = Timestamp::from_second(1_800_000_000).unwrap();
        let mut record = next_record(&LeaseSpec::default(), "me", wall, L);
        assert_eq!(record.holder_identity.as_deref(), Some("me"));
        assert_eq!(record.lease_transitions, Some(0));
        assert_eq!(record.lease_duration_seconds, Some(15));
        for back in [0, 0, 1, 3600, 0] {
            let stuck = wall.checked_sub(SignedDuration::from_secs(back)).unwrap();
            let next = next_record(&record, "me", stuck, L);
            assert!(next.renew_time.as_ref().unwrap().0 > record.renew_time.as_ref().unwrap().0);
            assert_ne!(next, record);
            assert_eq!(next.acquire_time, record.acquire_time);
            record = next;
        }
        let taken = next_record(&record, "other", wall, Duration::from_millis(2500));
        assert_eq!(taken.holder_identity.as_deref(), Some("other"));
        assert_eq!(taken.lease_transitions, Some(1));
        assert_eq!(taken.renew_time, Some(MicroTime(wall)));
        assert_eq!(taken.lease_duration_seconds, Some(3));
    }
}
