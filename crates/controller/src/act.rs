//! Act: the API writes of a pass, after its record. Every write is idempotent: a create that
//! finds its object (409) and a delete that finds it gone (404) or replaced (409, the uid
//! precondition) are done.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use marekvs_api::MarekvsCluster;
use marekvs_core::ownership::{PodController, fixed_child_claim};
use marekvs_core::stale::AbsenceChange;
use marekvs_core::{Action, EventKind, EventReason, Millis};
use serde_json::json;
use tracing::warn;

use crate::build::{
    self, ANNOTATION_ABSENT_SINCE, ANNOTATION_CLUSTER_UID, ANNOTATION_DRAINED_AT,
    ANNOTATION_DRAINED_RESTARTS, ANNOTATION_PODS_MADE, ANNOTATION_SERVED_SINCE, MANAGER,
};
use crate::ctx::Ctx;
use crate::error::Error;
use crate::observe::{Children, controller_of, never_started, restarts, volume};
use crate::report::publish;
use crate::spec::storage_wish;

/// Server-side apply `desired`, unless the cached object already carries the hash of exactly
/// this content (an unchanged object is not written again).
pub async fn apply_if_changed<K>(
    ctx: &Ctx,
    cache: &Store<K>,
    desired: K,
    metric: &'static str,
) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let name = desired.name_any();
    let ns = desired.namespace().unwrap_or_default();
    let kind = K::kind(&()).to_string();
    let (value, hash) = build::applied(&desired).map_err(|source| Error::Serialize {
        what: format!("{kind} {name}"),
        source,
    })?;
    let cached = cache.get(&ObjectRef::new(&name).within(&ns));
    let api = Api::<K>::namespaced(ctx.client.clone(), &ns);
    // The watch sees only objects labelled as this operator's: one it does not show may still
    // exist (another operator's, a user's), so it is read once before it is applied.
    let found = match cached {
        Some(o) => Some(o.meta().clone()),
        None => match api.get_metadata(&name).await {
            Ok(o) => Some(o.metadata),
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(source) => {
                return Err(Error::Observe {
                    what: format!("{kind} {name}"),
                    source,
                });
            }
        },
    };
    if let Some(meta) = &found {
        let cluster_uid = owner_uid(&desired);
        fixed_child_claim(&controller_of(meta), &cluster_uid).map_err(
            |(owner_kind, owner_name)| Error::NameTaken {
                kind: kind.clone(),
                name: name.clone(),
                owner_kind,
                owner_name,
            },
        )?;
        let applied = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(build::ANNOTATION_APPLIED_HASH));
        if applied == Some(&hash) {
            return Ok(());
        }
    }
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(value),
    )
    .await
    .map_err(|source| Error::Apply { kind, name, source })?;
    ctx.metrics.actions.inc(metric);
    Ok(())
}

/// The uid of the cluster that controls `child` (the controller reference `build` gives it).
fn owner_uid<K: Resource>(child: &K) -> String {
    match controller_of(child.meta()) {
        PodController::Some { uid, .. } => uid,
        PodController::None => String::new(),
    }
}

/// The Services and the PDB: children that do not depend on the runbook. Member pods made
/// before the client-traffic label existed get it ("on") before the client Service, which
/// selects it, is applied: the Service never selects fewer members than it did.
pub async fn apply_children(ctx: &Ctx, cr: &MarekvsCluster) -> Result<(), Error> {
    apply_if_changed(
        ctx,
        &ctx.services,
        build::headless_service(cr)?,
        "apply_service",
    )
    .await?;
    label_client_traffic_on(ctx, cr).await?;
    apply_if_changed(
        ctx,
        &ctx.services,
        build::client_service(cr)?,
        "apply_service",
    )
    .await?;
    apply_if_changed(ctx, &ctx.pdbs, build::pdb(cr)?, "apply_pdb").await
}

/// The pods of the cluster (and the orphans it is about to adopt, which serve clients until
/// then) that carry no client-traffic label. A pod labelled either way is left alone: the core
/// decides off and on (`Action::SetClientTraffic`).
pub fn without_client_traffic_label(
    cr: &MarekvsCluster,
    pods: &Store<Pod>,
    pvcs: &Store<PersistentVolumeClaim>,
) -> Vec<Arc<Pod>> {
    let children = Children::of(cr, pods, pvcs);
    let ns = cr.namespace().unwrap_or_default();
    let orphans = children
        .orphans
        .iter()
        .filter_map(|o| pods.get(&ObjectRef::new(&build::member_name(cr, *o)).within(&ns)));
    children
        .pods
        .values()
        .cloned()
        .chain(orphans)
        .filter(|p| !p.labels().contains_key(build::LABEL_CLIENT_TRAFFIC))
        .collect()
}

/// Label "on" every pod [`without_client_traffic_label`] (level-triggered: once the cache
/// shows the label, nothing is sent). Each patch names the uid observed; a pod gone or
/// replaced since is done (a new pod is built with the label). Any other failure stops the
/// pass before the client Service is applied with the selector that would leave it out.
async fn label_client_traffic_on(ctx: &Ctx, cr: &MarekvsCluster) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    for pod in without_client_traffic_label(cr, &ctx.pods, &ctx.pvcs) {
        let name = pod.name_any();
        let patch = json!({"metadata": {"uid": pod.uid(),
            "labels": {build::LABEL_CLIENT_TRAFFIC: build::CLIENT_TRAFFIC_ON}}});
        let r = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ());
        ok_if(r, &[404, 409]).map_err(|source| Error::Apply {
            kind: "Pod".into(),
            name: name.clone(),
            source,
        })?;
        ctx.metrics.actions.inc("label_client_traffic");
    }
    Ok(())
}

/// What an action did.
#[derive(Debug, PartialEq, Eq)]
pub enum Made {
    Done,
    /// A pod to create was already there: the other path (the watch's fast re-creation, or
    /// the pass) made it.
    AlreadyThere,
}

/// Carry out `actions` in order; the first failure stops the rest (reported as an Event).
/// Returns the creations that found their pod already there.
pub async fn run_actions(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    actions: &[Action],
    children: &Children,
) -> Result<BTreeSet<Action>, Error> {
    let mut already_there = BTreeSet::new();
    // The volumes made in this pass with their pod already counted (`build::pvc`).
    let mut counted = BTreeSet::new();
    for action in actions {
        let pod_follows =
            matches!(action, Action::CreatePvc(o) if actions.contains(&Action::CreatePod(*o)));
        match act(ctx, cr, *action, children, pod_follows, &mut counted).await {
            Ok(Made::Done) => {}
            Ok(Made::AlreadyThere) => {
                already_there.insert(*action);
            }
            Err(e) => {
                warn!(cluster = %cr.name_any(), ?action, "action failed: {e}");
                let message = format!("{action:?}: {e}");
                publish(
                    ctx,
                    &cr.object_ref(&()),
                    EventKind::Warning,
                    EventReason::ActionFailed,
                    &message,
                )
                .await;
                return Err(e);
            }
        }
    }
    Ok(already_there)
}

async fn act(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    action: Action,
    children: &Children,
    pod_follows: bool,
    counted: &mut BTreeSet<u32>,
) -> Result<Made, Error> {
    ctx.metrics.actions.inc(match action {
        Action::CreatePvc(_) => "create_pvc",
        Action::CreatePod(_) => "create_pod",
        Action::Drain(_) => "drain",
        Action::CheckPod(_) => "check_pod",
        Action::DeletePod(_) => "delete_pod",
        Action::DeleteUnstartedPod(_) => "delete_unstarted_pod",
        Action::DeletePvc(_) => "delete_pvc",
        Action::SetClientTraffic { .. } => "set_client_traffic",
        Action::SetEviction { .. } => "set_eviction",
    });
    let ns = cr.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let failed = |object: String| {
        move |source| Error::Act {
            action,
            object,
            source,
        }
    };
    match action {
        Action::CreatePvc(o) => {
            let pvc = build::pvc(cr, o, u32::from(pod_follows))?;
            match pvcs.create(&post_params(), &pvc).await {
                Ok(_) if pod_follows => {
                    counted.insert(o);
                }
                r => ok_if(r.map(|_| ()), &[409]).map_err(failed(pvc.name_any()))?,
            }
        }
        Action::CreatePod(o) => {
            let pod = build::pod(cr, o, &ctx.cluster_domain)?;
            if !counted.contains(&o)
                && pod_there_or_counted(&pods, &pvcs, &pod.name_any(), &build::pvc_name(cr, o))
                    .await
                    .map_err(failed(pod.name_any()))?
            {
                return Ok(Made::AlreadyThere);
            }
            match pods.create(&post_params(), &pod).await {
                Err(kube::Error::Api(e)) if e.code == 409 => return Ok(Made::AlreadyThere),
                r => r.map(|_| ()).map_err(failed(pod.name_any()))?,
            }
        }
        Action::Drain(o) => {
            let Some(pod) = children.pods.get(&o) else {
                return Ok(Made::Done);
            };
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                return Ok(Made::Done);
            };
            // The address must still be this pod's: read past the cache that it is the pod
            // observed (its uid), still at that IP and not finished (a pod that ended let its
            // IP go), or drain no one this pass.
            if !still_the_pod(&pods, pod, &ip)
                .await
                .map_err(failed(pod.name_any()))?
            {
                return Ok(Made::Done);
            }
            // And the process at it must answer as this member (`CLUSTER MYID`).
            if !answers_as(ctx, cr, o, pod, &ip).await {
                return Ok(Made::Done);
            }
            if ctx.members.drain(&ip).await {
                // Recorded on the pod, so the next pass (or a restarted operator) knows.
                let patch = json!({"metadata": {"annotations": {
                    ANNOTATION_DRAINED_AT: Timestamp::now().to_string(),
                    ANNOTATION_DRAINED_RESTARTS: restarts(pod).to_string(),
                }}});
                patch_pod(&pods, pod, patch)
                    .await
                    .map_err(failed(pod.name_any()))?;
            }
        }
        Action::CheckPod(o) => {
            let pod = build::pod(cr, o, &ctx.cluster_domain)?;
            let answer = crate::admission::dry_run(&pods, &pod)
                .await
                .map_err(failed(pod.name_any()))?;
            let hash = build::desired_template_hash(cr, o, &ctx.cluster_domain)?;
            let key = (cr.uid().unwrap_or_default(), o, hash);
            ctx.admissions.remember(key, answer);
        }
        Action::DeletePod(o) => {
            if let Some(pod) = children.pods.get(&o) {
                let r = pods
                    .delete(&pod.name_any(), &delete_exactly(pod.uid()))
                    .await;
                ok_if(r.map(|_| ()), &[404, 409]).map_err(failed(pod.name_any()))?;
            }
        }
        Action::DeleteUnstartedPod(o) => {
            if let Some(pod) = children.pods.get(&o) {
                delete_if_never_started(&pods, pod)
                    .await
                    .map_err(failed(pod.name_any()))?;
            }
        }
        Action::SetClientTraffic { ordinal, on } => {
            if let Some(pod) = children.pods.get(&ordinal) {
                // A label only: the client Service selects "on"; the pod is not restarted.
                let value = if on {
                    build::CLIENT_TRAFFIC_ON
                } else {
                    build::CLIENT_TRAFFIC_OFF
                };
                let patch = json!({"metadata": {"labels": {build::LABEL_CLIENT_TRAFFIC: value}}});
                patch_pod(&pods, pod, patch)
                    .await
                    .map_err(failed(pod.name_any()))?;
            }
        }
        Action::SetEviction { ordinal, allowed } => {
            if let Some(pod) = children.pods.get(&ordinal) {
                // A label only: the member PDB leaves out the pod labelled "allowed".
                let value = allowed.then_some(build::EVICTION_ALLOWED);
                let patch = json!({"metadata": {"labels": {build::LABEL_EVICTION: value}}});
                patch_pod(&pods, pod, patch)
                    .await
                    .map_err(failed(pod.name_any()))?;
            }
        }
        Action::DeletePvc(o) => {
            if let Some(pvc) = children.pvcs.get(&o) {
                let r = pvcs
                    .delete(&pvc.name_any(), &delete_exactly(pvc.uid()))
                    .await;
                ok_if(r.map(|_| ()), &[404, 409]).map_err(failed(pvc.name_any()))?;
            }
        }
    }
    Ok(Made::Done)
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    }
}

/// Delete only the object observed (its uid), never one re-created under the same name since.
fn delete_exactly(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Before a pod is made on a volume that already exists: whether the pod is already there,
/// read past the cache (a pass right after a creation often still misses it in its cache), and
/// if not, count the pod about to be made on the volume. An attempt that would only find its
/// pod there is not counted, so a member's first pod counts as one.
async fn pod_there_or_counted(
    pods: &Api<Pod>,
    pvcs: &Api<PersistentVolumeClaim>,
    pod: &str,
    pvc: &str,
) -> Result<bool, kube::Error> {
    if pods.get_opt(pod).await?.is_some() {
        return Ok(true);
    }
    count_pod_made(pvcs, pvc).await?;
    Ok(false)
}

/// Count the pod about to be made on a member's volume (`ANNOTATION_PODS_MADE`) before it is
/// made: read past the cache, and written only over that version (a conflict reads again). A
/// volume without a count (made by an earlier version of the operator, or by a StatefulSet)
/// is left unknown; no volume yet, nothing to count (its pod cannot start without it).
async fn count_pod_made(pvcs: &Api<PersistentVolumeClaim>, name: &str) -> Result<(), kube::Error> {
    let mut attempts = 0;
    loop {
        let Some(pvc) = pvcs.get_opt(name).await? else {
            return Ok(());
        };
        let Some(n) = pvc
            .annotations()
            .get(ANNOTATION_PODS_MADE)
            .and_then(|n| n.parse::<u32>().ok())
        else {
            return Ok(());
        };
        let patch = json!({"metadata": {
            "uid": pvc.uid(),
            "resourceVersion": pvc.resource_version(),
            "annotations": {ANNOTATION_PODS_MADE: n.saturating_add(1).to_string()},
        }});
        attempts += 1;
        match pvcs
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 3 => continue,
            r => return r.map(|_| ()),
        }
    }
}

/// Delete a pod whose container never started, only if it still never has: read past the
/// cache (still the pod observed, by uid), and deleted only as the version read (uid and
/// resourceVersion), so a status saying the container started since keeps it.
async fn delete_if_never_started(pods: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let Some(now) = pods.get_opt(&pod.name_any()).await? else {
        return Ok(());
    };
    if now.uid() != pod.uid() || !never_started(&now) {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: now.uid(),
            resource_version: now.resource_version(),
        }),
        ..DeleteParams::default()
    };
    ok_if(
        pods.delete(&now.name_any(), &params).await.map(|_| ()),
        &[404, 409],
    )
}

/// Whether the pod named as `pod` is still `pod` (same uid), read from the API server.
async fn still_the_pod(pods: &Api<Pod>, pod: &Pod, ip: &str) -> Result<bool, kube::Error> {
    match pods.get(&pod.name_any()).await {
        Ok(now) => {
            let status = now.status.as_ref();
            let ended = status
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|p| p == "Succeeded" || p == "Failed");
            let same_ip = status.and_then(|s| s.pod_ip.as_deref()) == Some(ip);
            Ok(now.uid().is_some() && now.uid() == pod.uid() && same_ip && !ended)
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether member `o`'s address answers `CLUSTER MYID` with the member's own id (a node's id
/// is its hostname's ordinal). The bytes sent go to the client-input ledger, so that the
/// check never reads as a client's input on the leaver.
async fn answers_as(ctx: &Ctx, cr: &MarekvsCluster, o: u32, pod: &Pod, ip: &str) -> bool {
    let credentials = ctx.passwords.get(&ctx.client, cr).await;
    let read = crate::views::read_id(ip, &credentials, ctx.members.timeout()).await;
    let cluster = (cr.namespace().unwrap_or_default(), cr.name_any());
    let uid = pod.uid().unwrap_or_default();
    let now = crate::ctx::now_ms();
    ctx.inputs
        .sent_between_passes(&cluster, o, &uid, read.sent, now);
    let expected = marekvs_core::View::ordinal_id(o);
    if read.id.as_deref() == Some(expected.as_str()) {
        return true;
    }
    warn!(
        pod = pod.name_any(),
        ip,
        answered = ?read.id,
        expected,
        "not draining: the address does not answer as this member (CLUSTER MYID)"
    );
    false
}

/// A merge patch of a pod's metadata, only to the pod observed: the patch carries its uid, so
/// a pod re-created under the name since (a drain recorded on it would be a lie) refuses it
/// (409). That, or a pod already gone, is no failure: the next pass sees the new pod.
async fn patch_pod(
    pods: &Api<Pod>,
    pod: &Pod,
    mut patch: serde_json::Value,
) -> Result<(), kube::Error> {
    patch["metadata"]["uid"] = json!(pod.uid());
    let r = pods
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map(|_| ());
    ok_if(r, &[404, 409])
}

fn ok_if(r: Result<(), kube::Error>, codes: &[u16]) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(e)) if codes.contains(&e.code) => Ok(()),
        other => other,
    }
}

/// Write the volume records the core asks for (`stale::absence_changes`) on the PVCs: when a
/// member stopped serving, or nothing once it serves again, and when a member first served
/// from it. Only on those transitions: a cluster at rest writes none. One patch per PVC; each
/// names the uid observed, so a PVC re-created under the same name since is not stamped in its
/// place (the API server refuses the patch). A failure is logged and does not stop the pass:
/// the next one asks again.
pub async fn record_absences(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    changes: &[AbsenceChange],
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
    now: Millis,
) {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    let ordinals: std::collections::BTreeSet<u32> = changes.iter().map(|c| c.ordinal()).collect();
    for o in ordinals {
        let Some(pvc) = pvcs.get(&o) else {
            continue;
        };
        let mine: Vec<AbsenceChange> = changes
            .iter()
            .copied()
            .filter(|c| c.ordinal() == o)
            .collect();
        let annotations = absence_annotations(&mine, now);
        let patch = json!({"metadata": {"uid": pvc.uid(), "annotations": annotations}});
        let name = pvc.name_any();
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                for c in &mine {
                    ctx.metrics.actions.inc(match c {
                        AbsenceChange::Stamp(_) => "stamp_absence",
                        AbsenceChange::Clear(_) => "clear_absence",
                        AbsenceChange::FirstServed(_) => "stamp_served",
                    })
                }
            }
            Err(e) => warn!(pvc = %name, "recording its absence: {e}"),
        }
    }
}

/// The annotations one PVC's changes set (`null` removes one).
fn absence_annotations(
    changes: &[AbsenceChange],
    now: Millis,
) -> serde_json::Map<String, serde_json::Value> {
    let mut a = serde_json::Map::new();
    for change in changes {
        match change {
            AbsenceChange::Stamp(_) => {
                a.insert(
                    ANNOTATION_ABSENT_SINCE.into(),
                    json!(to_timestamp(now).to_string()),
                );
            }
            AbsenceChange::Clear(_) => {
                a.insert(ANNOTATION_ABSENT_SINCE.into(), serde_json::Value::Null);
            }
            AbsenceChange::FirstServed(_) => {
                a.insert(
                    ANNOTATION_SERVED_SINCE.into(),
                    json!(to_timestamp(now).to_string()),
                );
            }
        }
    }
    a
}

fn to_timestamp(ms: Millis) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Restamp volumes with this cluster's uid (`Children::to_stamp`: made for an earlier object
/// of the same name, or by an earlier version of the operator) with its uid, each with an
/// Event naming its member. A failure is reported and retried by the next pass (until then the
/// volume still counts as the cluster's).
pub async fn stamp_volumes(ctx: &Ctx, cr: &MarekvsCluster, children: &Children) {
    let Some(uid) = cr.uid() else {
        return;
    };
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    for (o, from) in &children.to_stamp {
        let Some(pvc) = children.pvcs.get(o) else {
            continue;
        };
        let name = pvc.name_any();
        let member = format!("{}-{o}", cr.name_any());
        // Only the object observed: not one re-created under the same name since.
        let patch =
            json!({"metadata": {"uid": pvc.uid(), "annotations": {ANNOTATION_CLUSTER_UID: uid}}});
        ctx.metrics.actions.inc("stamp_pvc");
        let (kind, reason, message) = match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => (
                EventKind::Normal,
                EventReason::VolumeRestamped,
                match from {
                    Some(old) => format!(
                        "{name} of {member} was created for an earlier {} (uid {old}): restamped with this object's uid",
                        cr.name_any()
                    ),
                    None => format!(
                        "{name} of {member} (not stamped: created by an earlier version of the operator, or by a StatefulSet's claim template; mounted by its pod): stamped with this object's uid"
                    ),
                },
            ),
            Err(e) => {
                warn!(pvc = %name, "stamping volume: {e}");
                (
                    EventKind::Warning,
                    EventReason::VolumeRestampFailed,
                    format!("{name} of {member}: {e}"),
                )
            }
        };
        publish(ctx, &cr.object_ref(&()), kind, reason, &message).await;
    }
}

/// Expand the volumes the core picks (spec.storage.size grew; shrinking or another class
/// needs `replaceVolumes`, which the rolling update carries out). A failure is reported and
/// does not stop the pass.
pub async fn grow_volumes(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
) {
    let wish = storage_wish(cr);
    let volumes = pvcs.iter().map(|(o, p)| (*o, volume(p))).collect();
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    for o in wish.to_grow(&volumes) {
        let name = pvcs[&o].name_any();
        let patch = json!({"spec": {"resources": {"requests": {"storage": wish.size}}}});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            warn!(pvc = %name, "expanding volume: {e}");
            let message = format!("{name}: {e}");
            publish(
                ctx,
                &cr.object_ref(&()),
                EventKind::Warning,
                EventReason::VolumeExpansionFailed,
                &message,
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn store<K: Resource<DynamicType = ()> + Clone + 'static>(objects: Vec<K>) -> Store<K> {
        let (reader, mut writer) = reflector::store::<K>();
        writer.apply_watcher_event(&Event::Init);
        for o in objects {
            writer.apply_watcher_event(&Event::InitApply(o));
        }
        writer.apply_watcher_event(&Event::InitDone);
        reader
    }

    /// `traffic`: the client-traffic label's value, if any; `owner`: its controller's uid.
    fn pod(o: u32, traffic: Option<&str>, owner: Option<&str>) -> Pod {
        let mut labels = json!({build::LABEL_NAME: "marekvs", build::LABEL_INSTANCE: "demo"});
        if let Some(t) = traffic {
            labels[build::LABEL_CLIENT_TRAFFIC] = json!(t);
        }
        let owners = owner.map_or(json!([]), |uid| {
            json!([{"apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
                "name": "demo", "uid": uid, "controller": true}])
        });
        serde_json::from_value(
            json!({"metadata": {"name": format!("demo-{o}"), "namespace": "ns",
            "uid": format!("pod-{o}"), "labels": labels, "ownerReferences": owners}}),
        )
        .unwrap()
    }

    fn cluster(adopting: bool) -> MarekvsCluster {
        let mut cr: MarekvsCluster = serde_json::from_value(json!({
            "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "u1"},
            "spec": {"image": "marekvs:1", "nodes": 4, "replicationFactor": 2},
        }))
        .unwrap();
        if adopting {
            cr.annotations_mut().insert(
                build::ANNOTATION_ADOPT.into(),
                build::ADOPT_STATEFULSET_ORPHANS.into(),
            );
        }
        cr
    }

    /// Only the cluster's pods without the label get "on" (a pod labelled off is the core's
    /// to turn back on); the orphans it adopts too, since they serve clients until then; a
    /// pod of another object never.
    #[test]
    fn the_pods_to_label_for_client_traffic() {
        let pods = store(vec![
            pod(0, None, Some("u1")),
            pod(1, Some("off"), Some("u1")),
            pod(2, Some("on"), Some("u1")),
            pod(3, None, None),
            pod(4, None, Some("u0")),
        ]);
        let pvcs = store(Vec::<PersistentVolumeClaim>::new());
        let names = |cr: &MarekvsCluster| -> Vec<String> {
            without_client_traffic_label(cr, &pods, &pvcs)
                .iter()
                .map(|p| p.name_any())
                .collect()
        };
        assert_eq!(names(&cluster(false)), ["demo-0"]);
        assert_eq!(names(&cluster(true)), ["demo-0", "demo-3"]);
    }
}

#[cfg(test)]
mod absence_tests {
    use super::*;

    /// One PVC's changes in one merge patch: a stamp with a first service, a clear alone.
    #[test]
    fn absence_changes_become_one_patch_of_annotations_per_volume() {
        let now: Millis = 1_795_000_000_250;
        let at = json!(to_timestamp(now).to_string());
        let a = absence_annotations(
            &[AbsenceChange::Stamp(2), AbsenceChange::FirstServed(2)],
            now,
        );
        assert_eq!(
            serde_json::Value::Object(a),
            json!({ANNOTATION_ABSENT_SINCE: at, ANNOTATION_SERVED_SINCE: at})
        );
        // Serving again drops the absence only: when it first served stays.
        let a = absence_annotations(&[AbsenceChange::Clear(2)], now);
        assert_eq!(
            serde_json::Value::Object(a),
            json!({ANNOTATION_ABSENT_SINCE: null})
        );
        // And what it writes is what the observation reads back.
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {
            "name": "data-demo-2",
            "annotations": {ANNOTATION_SERVED_SINCE: at, ANNOTATION_ABSENT_SINCE: at}}}))
        .unwrap();
        let wish = marekvs_core::volumes::StorageWish {
            size: "1Gi".into(),
            class_name: None,
        };
        let obs = crate::observe::pvc_obs(&pvc, false, &wish);
        assert_eq!(obs.served_since, Some(now));
        assert_eq!(obs.absent_since, Some(now));
    }

    /// The reads and writes around a pod made and a pod deleted as never started, against a
    /// scripted API server.
    mod never_started {
        use super::super::*;
        use http::{Request, Response};
        use kube::Client;
        use kube::client::Body;
        use serde_json::Value;
        use std::sync::Mutex;
        use tower_test::mock;

        /// (method, path, query, body) of each request.
        type Seen = Arc<Mutex<Vec<(String, String, String, Value)>>>;

        /// A client whose API server answers each request with the next of `replies`.
        fn scripted(replies: Vec<(u16, Value)>) -> (Client, Seen) {
            let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
            let seen: Seen = Arc::default();
            let log = seen.clone();
            tokio::spawn(async move {
                for (code, body) in replies {
                    let Some((request, respond)) = handle.next_request().await else {
                        return;
                    };
                    let method = request.method().to_string();
                    let path = request.uri().path().to_string();
                    let query = request.uri().query().unwrap_or_default().to_string();
                    let bytes = request.into_body().collect_bytes().await.unwrap();
                    let sent = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    log.lock().unwrap().push((method, path, query, sent));
                    let reason = if code == 404 { "NotFound" } else { "Conflict" };
                    let body = if code < 300 {
                        body
                    } else {
                        json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": "scripted", "reason": reason, "code": code})
                    };
                    respond.send_response(
                        Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(Body::from(serde_json::to_vec(&body).unwrap()))
                            .unwrap(),
                    );
                }
            });
            (Client::new(service, "ns"), seen)
        }

        fn pvc(made: Option<&str>, rv: &str) -> Value {
            let mut annotations = json!({ANNOTATION_CLUSTER_UID: "c1"});
            if let Some(n) = made {
                annotations[ANNOTATION_PODS_MADE] = json!(n);
            }
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data-demo-3", "namespace": "ns", "uid": "v1",
                    "resourceVersion": rv, "annotations": annotations}})
        }

        const PVC_PATH: &str = "/api/v1/namespaces/ns/persistentvolumeclaims/data-demo-3";
        const POD_PATH: &str = "/api/v1/namespaces/ns/pods/demo-3";

        /// Counted up from the count read past the cache, written only over that version; a
        /// conflict reads it again. No count (or no volume): nothing written.
        #[tokio::test]
        async fn a_pod_made_is_counted_on_its_volume_first_over_the_version_read() {
            let (client, seen) = scripted(vec![
                (200, pvc(Some("1"), "7")),
                (409, Value::Null),
                (200, pvc(Some("1"), "8")),
                (200, pvc(Some("2"), "9")),
            ]);
            count_pod_made(&Api::namespaced(client, "ns"), "data-demo-3")
                .await
                .unwrap();
            let seen = seen.lock().unwrap().clone();
            let lines: Vec<(&str, &str)> = seen
                .iter()
                .map(|(m, p, _, _)| (m.as_str(), p.as_str()))
                .collect();
            assert_eq!(
                lines,
                [
                    ("GET", PVC_PATH),
                    ("PATCH", PVC_PATH),
                    ("GET", PVC_PATH),
                    ("PATCH", PVC_PATH)
                ]
            );
            for ((_, _, _, body), rv) in [(&seen[1], "7"), (&seen[3], "8")] {
                assert_eq!(
                    body["metadata"],
                    json!({"uid": "v1", "resourceVersion": rv,
                        "annotations": {ANNOTATION_PODS_MADE: "2"}})
                );
            }

            for answer in [
                (200, pvc(None, "7")),
                (200, pvc(Some("many"), "7")),
                (404, Value::Null),
            ] {
                let (client, seen) = scripted(vec![answer]);
                count_pod_made(&Api::namespaced(client, "ns"), "data-demo-3")
                    .await
                    .unwrap();
                assert_eq!(seen.lock().unwrap().len(), 1, "only the read");
            }
        }

        /// `pod_there_or_counted` for demo-3 on data-demo-3.
        async fn there_or_counted(client: Client) -> bool {
            let (pods, pvcs) = (
                Api::namespaced(client.clone(), "ns"),
                Api::namespaced(client, "ns"),
            );
            pod_there_or_counted(&pods, &pvcs, "demo-3", "data-demo-3")
                .await
                .unwrap()
        }

        /// A pod already there (the cache missed it) is neither counted nor made again.
        #[tokio::test]
        async fn a_pod_already_there_is_not_counted_again() {
            let (client, seen) = scripted(vec![(200, pod("p1", json!({"phase": "Pending"})))]);
            let there = there_or_counted(client).await;
            assert!(there);
            assert_eq!(seen.lock().unwrap().len(), 1, "only the pod's read");

            let (client, seen) = scripted(vec![
                (404, Value::Null),
                (200, pvc(Some("1"), "7")),
                (200, pvc(Some("2"), "8")),
            ]);
            let there = there_or_counted(client).await;
            assert!(!there);
            let seen = seen.lock().unwrap().clone();
            let lines: Vec<(&str, &str)> = seen
                .iter()
                .map(|(m, p, _, _)| (m.as_str(), p.as_str()))
                .collect();
            assert_eq!(
                lines,
                [("GET", POD_PATH), ("GET", PVC_PATH), ("PATCH", PVC_PATH)]
            );
        }

        fn pod(uid: &str, status: Value) -> Value {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "demo-3", "namespace": "ns", "uid": uid, "resourceVersion": "12"},
                "status": status})
        }

        /// Deleted only when the pod read back is the one observed and still never started, and
        /// then only as the version read.
        #[tokio::test]
        async fn a_pod_is_deleted_as_never_started_only_if_it_still_is() {
            let pending = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable"}]});
            let observed: Pod = serde_json::from_value(pod("p1", pending.clone())).unwrap();

            let (client, seen) = scripted(vec![
                (200, pod("p1", pending.clone())),
                (200, pod("p1", pending.clone())),
            ]);
            delete_if_never_started(&Api::namespaced(client, "ns"), &observed)
                .await
                .unwrap();
            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.len(), 2);
            assert_eq!(
                (seen[1].0.as_str(), seen[1].1.as_str()),
                ("DELETE", POD_PATH)
            );
            assert_eq!(
                seen[1].3["preconditions"],
                json!({"uid": "p1", "resourceVersion": "12"})
            );

            // Started since (running, or ran and waits to restart), or another pod by now: kept.
            let started = json!({"phase": "Running", "containerStatuses": [{"name": "marekvs",
                "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"running": {}}}]});
            for answer in [pod("p1", started), pod("p2", pending.clone())] {
                let (client, seen) = scripted(vec![(200, answer)]);
                delete_if_never_started(&Api::namespaced(client, "ns"), &observed)
                    .await
                    .unwrap();
                assert_eq!(seen.lock().unwrap().len(), 1, "only the read");
            }
        }
    }
}
