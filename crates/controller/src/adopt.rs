//! Adopt a StatefulSet's orphaned members (migration from marekvs's own operator, see
//! docs/migration.md): only when the cluster object opts in (`marekvs.io/adopt:
//! statefulset-orphans`) and only pods the core's `adoption::may_adopt` accepts. Adopting is one
//! metadata patch (the cluster becomes the pod's controller), conditional on the pod's uid and
//! resourceVersion as read: no pod is deleted, re-created or restarted. Its volume is stamped by
//! the next pass (`ownership`: a volume an adopted pod mounts).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use marekvs_api::MarekvsCluster;
use marekvs_core::adoption::{Orphan, Wanted, may_adopt};
use marekvs_core::ownership::PodController;
use marekvs_core::{EventKind, EventReason};
use serde_json::json;
use tracing::{info, warn};

use crate::build::{self, LABEL_ORDINAL};
use crate::ctx::Ctx;
use crate::observe::{Children, controller_of};
use crate::report;

pub use crate::build::opted_in;

/// Adopt the orphans `children` found; returns how many were adopted (the pass then starts
/// over, so that nothing is decided on the look-alikes they were).
pub async fn orphans(ctx: &Ctx, cr: &MarekvsCluster, children: &Children) -> usize {
    if !opted_in(cr) || children.orphans.is_empty() {
        return 0;
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    let mut adopted = 0;
    for ordinal in &children.orphans {
        let member = build::member_name(cr, *ordinal);
        if adopt(&api, cr, *ordinal, &member).await.is_some() {
            adopted += 1;
            ctx.metrics.actions.inc("adopt_pod");
            let message = format!(
                "{member}: its orphaned pod (no controller) is now controlled by this cluster, not restarted; its volume {} is stamped next",
                build::pvc_name(cr, *ordinal)
            );
            announce(ctx, cr, &message).await;
        }
    }
    adopted
}

/// The `MemberAdopted` Event, about the cluster; its note names the member, so it carries the
/// member's pod as `related` and is never folded with another member's (`report`).
async fn announce(ctx: &Ctx, cr: &MarekvsCluster, message: &str) {
    report::publish(
        ctx,
        &cr.object_ref(&()),
        EventKind::Normal,
        EventReason::MemberAdopted,
        message,
    )
    .await;
}

/// Adopt one orphan, read fresh; the pod as adopted. `None` when it is gone, already
/// controlled, may not be adopted (it stays a look-alike), or the patch failed (the reason is
/// logged; the next pass tries again).
async fn adopt(api: &Api<Pod>, cr: &MarekvsCluster, ordinal: u32, member: &str) -> Option<Pod> {
    let pod = match api.get_opt(member).await {
        Ok(pod) => pod?,
        Err(e) => {
            warn!(%member, "adopting: {e}");
            return None;
        }
    };
    if controller_of(&pod.metadata) != PodController::None {
        return None;
    }
    if let Err(why) = may_adopt(true, &orphan(&pod, ordinal), &wanted(cr, ordinal)) {
        info!(%member, "not adopted: {}", why.message());
        return None;
    }
    let owner = cr.controller_owner_ref(&())?;
    // Other (non-controller) owner references are kept; the list is replaced whole, so the
    // patch holds only if the pod is unchanged since it was read (uid and resourceVersion).
    let mut owners = pod.metadata.owner_references.clone().unwrap_or_default();
    owners.push(owner);
    let patch = json!({"metadata": {
        "uid": pod.uid(),
        "resourceVersion": pod.resource_version(),
        "ownerReferences": owners,
        // Labelled before (`act::apply_children`) so the client Service keeps routing to it;
        // kept here for an orphan that appeared since.
        "labels": {LABEL_ORDINAL: ordinal.to_string(),
            build::LABEL_CLIENT_TRAFFIC: build::CLIENT_TRAFFIC_ON},
    }});
    match api
        .patch(member, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(adopted) => Some(adopted),
        Err(e) => {
            warn!(%member, "adopting: {e}");
            None
        }
    }
}

/// What the orphan's pod says about itself, for the core.
fn orphan(pod: &Pod, ordinal: u32) -> Orphan {
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let marekvs = spec.and_then(|s| {
        s.containers.iter().find(|c| {
            c.env
                .iter()
                .flatten()
                .any(|e| e.name == "MAREKVS_REPLICAS_N")
        })
    });
    Orphan {
        ordinal,
        running: phase == Some("Running"),
        ready: crate::observe::pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        hostname: spec.and_then(|s| s.hostname.clone()),
        claims: spec
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.clone())
            .collect(),
        replicas_n: marekvs
            .and_then(|c| {
                c.env
                    .iter()
                    .flatten()
                    .find(|e| e.name == "MAREKVS_REPLICAS_N")
            })
            .and_then(|e| e.value.clone()),
    }
}

/// The member the cluster would run at `ordinal`: within its size (the autoscaler's maximum
/// when it autoscales).
fn wanted(cr: &MarekvsCluster, ordinal: u32) -> Wanted {
    let nodes = cr
        .spec
        .nodes
        .max(cr.spec.autoscale.as_ref().map_or(0, |a| a.max_nodes));
    Wanted {
        member: build::member_name(cr, ordinal),
        claim: build::pvc_name(cr, ordinal),
        size: u32::try_from(nodes).unwrap_or(0),
        replication_factor: cr.spec.replication_factor,
    }
}
