//! Every re-creation path in one place. A member whose pod or PVC is missing, while the
//! membership, the removal and the rollout stay as recorded, is re-created:
//!
//! 1. from the pod watch's delete event, beside the controller's queue ([`on_pod_deleted`]);
//! 2. at the start of a pass, before the scrapes ([`before_scrapes`]);
//! 3. by the pass's own actions, for everything else (a new member, a member moved to a fresh
//!    volume), minus what 1 or 2 made ([`Recreated::still_to_do`]).
//!
//! What to create is decided by the core (`marekvs_core::recreate`); whichever path creates a
//! pod second gets 409, and a replacement is announced only by the path that made it.
//!
//! The [`RecreationLock`] lets a deleted pod's re-creation reach the API server before the
//! pass that the same deletion triggers. Measured from the API server's audit log
//! (docs/benchmarks.md), that pass's status write landed in the middle of the re-creation's
//! POST, and the pass then created the pod a second time (409) in 14 of 20 replacements; with
//! the lock, 1 of 20. It is held from the moment the watch reports the deletion
//! (synchronously, before the controller sees the event) until the re-creation's request is
//! answered; a pass of the same cluster waits for it before it writes anything. It is a
//! scheduling hint, not state: lost on a restart, nothing is owed. A pass never waits longer
//! than [`LOCK_TIMEOUT`].

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use marekvs_api::MarekvsCluster;
use marekvs_api::MarekvsClusterStatus;
use marekvs_core::ownership::{Ownership, pod_ownership};
use marekvs_core::recreate::{Creations, creations_before_scrapes, still_to_do};
use marekvs_core::sizing::unscraped_target;
use marekvs_core::{Action, ClusterSpec, MemberObs, Memory, Note};
use tokio::sync::OwnedMutexGuard;
use tracing::debug;

use crate::act::run_actions;
use crate::build;
use crate::error::Error;
use crate::observe::{Children, controller_of, synced, unscraped};
use crate::reconcile::{Ctx, now_ms};
use crate::report::publish_notes;
use crate::spec::cluster_spec;
use crate::status::{autoscale_last_asked, memory_from_status};

/// What [`before_scrapes`] did.
pub struct Recreated {
    /// The creations sent.
    pub actions: Vec<Action>,
    /// The decision's notes about them.
    pub notes: Vec<Note>,
    /// Of those, the pods that were already there (the other path made them first).
    pub already_there: BTreeSet<Action>,
}

impl Recreated {
    /// Members whose pod this path did not make: their replacement is announced by the
    /// path that made it.
    pub fn made_elsewhere(&self, note: &Note) -> bool {
        note.member
            .is_some_and(|o| self.already_there.contains(&Action::CreatePod(o)))
    }

    /// A pass's actions that are left once these creations are made.
    pub fn still_to_do(&self, decided: &[Action]) -> Vec<Action> {
        still_to_do(decided, &self.actions)
    }
}

/// Create what the core says may be created before the scrapes (see
/// `marekvs_core::recreate`). Returns what was sent.
pub async fn before_scrapes(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    spec: &ClusterSpec,
    status: &MarekvsClusterStatus,
    memory: &Memory,
    unscraped: &std::collections::BTreeMap<u32, MemberObs>,
    children: &Children,
) -> Result<Recreated, Error> {
    let target = unscraped_target(spec, autoscale_last_asked(status));
    let Creations { actions, notes } =
        creations_before_scrapes(&target, memory, unscraped, now_ms());
    let mut already_there = BTreeSet::new();
    if !actions.is_empty() {
        already_there = run_actions(ctx, cr, &actions, children).await?;
    }
    Ok(Recreated {
        actions,
        notes,
        already_there,
    })
}

/// The fast path for a deleted pod, outside the controller's queue (one pass per cluster at a
/// time): a pass in flight for the same cluster, often writing status for 10–20 ms, no longer
/// delays the new pod. The same creations, from the same caches, as [`before_scrapes`].
async fn recreate_deleted(ctx: &Ctx, cr: &MarekvsCluster) -> Result<(), Error> {
    if cr.metadata.deletion_timestamp.is_some() || !(synced(&ctx.pods) && synced(&ctx.pvcs)) {
        return Ok(());
    }
    let spec = cluster_spec(cr)?;
    let children = Children::of(cr, &ctx.pods, &ctx.pvcs);
    let status = cr.status.clone().unwrap_or_default();
    let memory = memory_from_status(&cr.name_any(), &status);
    let observed = unscraped(cr, &ctx.cluster_domain, &memory, &children, &ctx.admissions)?;
    let done = before_scrapes(ctx, cr, &spec, &status, &memory, &observed, &children).await?;
    if !done.actions.is_empty() {
        ctx.metrics.actions.inc("fast_recreate");
        debug!(cluster = %cr.name_any(), actions = ?done.actions, already_there = ?done.already_there, "fast re-creation");
    }
    publish_notes(ctx, &cr.object_ref(&()), &done.notes, |n| {
        done.made_elsewhere(n)
    })
    .await;
    Ok(())
}

/// A deleted pod, with its cluster's lock if this deletion took it.
pub type DeletedPod = (Pod, Option<RecreationGuard>);

/// Re-creates the pod of a member as soon as the watch reports it deleted, beside the
/// controller rather than behind it. The pass that the same event triggers still runs and
/// re-derives everything, after the re-creation's POST (the lock); what it finds made already
/// is not made again (409) nor announced twice.
pub async fn on_pod_deleted(
    mut deleted: tokio::sync::mpsc::UnboundedReceiver<DeletedPod>,
    crs: Store<MarekvsCluster>,
    ctx: Arc<Ctx>,
) {
    while let Some((pod, held)) = deleted.recv().await {
        debug!(pod = %pod.name_any(), "pod deleted");
        let (Some(ns), Some(cluster)) = (
            pod.namespace(),
            pod.labels().get(build::LABEL_INSTANCE).cloned(),
        ) else {
            continue;
        };
        let Some(cr) = crs.get(&ObjectRef::new(&cluster).within(&ns)) else {
            continue;
        };
        // The same ownership rule as a pass: only the deletion of a pod this cluster controls
        // is a member's pod to re-create at once (a look-alike's is the pass's to notice).
        if !controlled_by(&pod, &cr) {
            continue;
        }
        let ctx = ctx.clone();
        tokio::spawn(async move {
            if let Err(e) = recreate_deleted(&ctx, &cr).await {
                // The pass triggered by the same event retries it.
                debug!(cluster = %cr.name_any(), "fast re-creation: {e}");
            }
            drop(held);
        });
    }
}

/// Whether `cr` (this very object, by uid) is the controller of `pod`.
fn controlled_by(pod: &Pod, cr: &MarekvsCluster) -> bool {
    let controller = controller_of(&pod.metadata);
    pod_ownership(&controller, &cr.uid().unwrap_or_default()) == Ownership::Ours
}

/// The longest a reconcile waits for a re-creation in flight.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// A cluster's namespace and name.
type ClusterKey = (String, String);

/// Per cluster: held while its deleted pods are being re-created. An entry lives only while
/// someone holds or waits on it: every pod deletion takes one, whatever cluster its label
/// names, so entries kept until their cluster is deleted would grow without bound.
#[derive(Default)]
pub struct RecreationLock {
    clusters: Mutex<HashMap<ClusterKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// A cluster's lock, held; dropping it frees the lock and, when no one else holds or waits on
/// it, its entry.
pub struct RecreationGuard {
    guard: Option<OwnedMutexGuard<()>>,
    lock: Arc<RecreationLock>,
    key: ClusterKey,
}

impl Drop for RecreationGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.lock.release(&self.key);
    }
}

impl RecreationLock {
    fn entries(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ClusterKey, Arc<tokio::sync::Mutex<()>>>> {
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops `key`'s entry if the map's is its only reference: every holder and waiter clones
    /// it under the same map lock, so no one can be about to use it.
    fn release(&self, key: &ClusterKey) {
        let mut clusters = self.entries();
        if clusters.get(key).is_some_and(|e| Arc::strong_count(e) == 1) {
            clusters.remove(key);
        }
    }

    /// Taken synchronously, in the watch's event handler. `None` when a re-creation for the
    /// same cluster already holds it: that one's guard covers this deletion's pass too.
    pub fn hold(self: &Arc<Self>, ns: &str, cluster: &str) -> Option<RecreationGuard> {
        let key = (ns.to_owned(), cluster.to_owned());
        let entry = self.entries().entry(key.clone()).or_default().clone();
        match entry.try_lock_owned() {
            Ok(guard) => Some(RecreationGuard {
                guard: Some(guard),
                lock: self.clone(),
                key,
            }),
            Err(_) => {
                // `entry` is gone with the failed try; the holder may have let go meanwhile,
                // and then the map's was the last reference.
                self.release(&key);
                None
            }
        }
    }

    /// Returns once no re-creation of this cluster is in flight, or after [`LOCK_TIMEOUT`].
    pub async fn wait(&self, ns: &str, cluster: &str) {
        let key = (ns.to_owned(), cluster.to_owned());
        let Some(lock) = self.entries().get(&key).cloned() else {
            return;
        };
        let _ = tokio::time::timeout(LOCK_TIMEOUT, lock.lock()).await;
        drop(lock);
        self.release(&key);
    }

    /// A deleted cluster's entry goes with it.
    pub fn forget(&self, ns: &str, cluster: &str) {
        self.entries().remove(&(ns.to_owned(), cluster.to_owned()));
    }

    /// How many clusters have an entry.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replacement is announced once, by the path whose create made the pod: the pass
    /// drops its note for a pod the fast path made first (and the other way round).
    #[test]
    fn a_replacement_made_elsewhere_is_not_announced_again() {
        let done = Recreated {
            actions: vec![Action::CreatePod(1), Action::CreatePod(2)],
            notes: Vec::new(),
            already_there: [Action::CreatePod(1)].into(),
        };
        let note = |member| Note {
            kind: marekvs_core::EventKind::Normal,
            reason: "MemberReplaced",
            message: String::new(),
            member,
        };
        assert!(done.made_elsewhere(&note(Some(1))));
        assert!(!done.made_elsewhere(&note(Some(2))));
        assert!(!done.made_elsewhere(&note(None)));
        assert_eq!(
            done.still_to_do(&[Action::CreatePod(2), Action::DeletePod(0)]),
            [Action::DeletePod(0)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_waits_for_the_recreation_in_flight_of_its_own_cluster_only() {
        let lock = Arc::new(RecreationLock::default());
        // Nothing in flight: no wait.
        let t0 = tokio::time::Instant::now();
        lock.wait("ns", "a").await;
        assert_eq!(t0.elapsed(), Duration::ZERO);

        let held = lock.hold("ns", "a").expect("free");
        assert!(lock.hold("ns", "a").is_none(), "one holder per cluster");
        let other = lock.hold("ns", "b").expect("another cluster is not held");
        drop(other);
        lock.wait("ns", "b").await;
        assert_eq!(t0.elapsed(), Duration::ZERO);

        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                lock.wait("ns", "a").await;
                tokio::time::Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            !waiter.is_finished(),
            "waits while the re-creation is in flight"
        );
        drop(held);
        let released = waiter.await.unwrap();
        assert_eq!(released - t0, Duration::from_millis(30));
        assert!(lock.hold("ns", "a").is_some(), "free again");
        assert_eq!(lock.len(), 0, "no entry outlives its holders and waiters");
    }

    /// Every pod deletion takes its cluster's lock, whatever cluster its label names: entries
    /// kept until a cluster is deleted would grow with every name ever seen.
    #[tokio::test(start_paused = true)]
    async fn the_lock_keeps_no_entry_once_nobody_holds_or_waits_on_it() {
        let lock = Arc::new(RecreationLock::default());
        for i in 0..1000 {
            let held = lock.hold("ns", &format!("c{i}")).expect("free");
            assert_eq!(lock.len(), 1);
            drop(held);
        }
        assert_eq!(lock.len(), 0);

        // A second deletion finds the cluster held, and the holder's drop frees the entry.
        let held = lock.hold("ns", "a").expect("free");
        assert!(lock.hold("ns", "a").is_none());
        drop(held);
        assert_eq!(lock.len(), 0);

        // A waiter that times out against a stuck holder leaves the entry to the holder.
        let held = lock.hold("ns", "a").expect("free");
        lock.wait("ns", "a").await;
        assert_eq!(lock.len(), 1, "still held");
        drop(held);
        assert_eq!(lock.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_recreation_holds_a_pass_back_no_longer_than_the_timeout() {
        let lock = Arc::new(RecreationLock::default());
        let _held = lock.hold("ns", "a").unwrap();
        let t0 = tokio::time::Instant::now();
        lock.wait("ns", "a").await;
        assert_eq!(t0.elapsed(), LOCK_TIMEOUT);
        lock.forget("ns", "a");
        let t1 = tokio::time::Instant::now();
        lock.wait("ns", "a").await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
}
