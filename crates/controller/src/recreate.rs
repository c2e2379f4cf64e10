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
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use marekvs_api::MarekvsCluster;
use marekvs_api::MarekvsClusterStatus;
use marekvs_core::ownership::{Ownership, pod_ownership};
use marekvs_core::recreate::{Creations, creations_before_scrapes, still_to_do};
use marekvs_core::sizing::unscraped_target;
use marekvs_core::{Action, ClusterSpec, MemberObs, Memory, Note};
use tracing::debug;

use crate::act::run_actions;
use crate::build;
use crate::ctx::{Ctx, now_ms};
use crate::error::Error;
use crate::observe::{Children, controller_of, synced, unscraped};
pub use crate::recreate_lock::{LOCK_TIMEOUT, RecreationGuard, RecreationLock};
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
    let observed = unscraped(
        cr,
        &ctx.cluster_domain,
        &memory,
        &children,
        &ctx.admissions,
        &ctx.nodes,
    )?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use marekvs_core::EventReason;

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
            reason: EventReason::MemberReplaced,
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
}
