//! The shared vocabulary: the field manager, labels, annotations and ports, and the names
//! derived from a cluster's (members, volumes, the headless Service).

use std::collections::BTreeMap;

use kube::ResourceExt;
use marekvs_api::MarekvsCluster;

pub const MANAGER: &str = "marekvs-operator";
/// The member container of a member pod.
pub const MEMBER_CONTAINER: &str = "marekvs";
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_ORDINAL: &str = "marekvs.io/ordinal";
/// `"on"` or `"off"`: whether the client Service routes to the member (off for a leaver, so
/// that no new client writes originate on it before its hand-off).
pub const LABEL_CLIENT_TRAFFIC: &str = "marekvs.io/client-traffic";
pub const CLIENT_TRAFFIC_ON: &str = "on";
pub const CLIENT_TRAFFIC_OFF: &str = "off";
/// `"allowed"` on the one member pod that a drain's eviction may take: handed off and being
/// moved off a node being drained. The member PDB, which allows no eviction, selects every
/// member pod without it.
pub const LABEL_EVICTION: &str = "marekvs.io/eviction";
pub const EVICTION_ALLOWED: &str = "allowed";
/// Set on a member's pod once its node answered `/drain` with 200.
pub const ANNOTATION_DRAINED_AT: &str = "marekvs.io/drained-at";
/// The pod's container restart count when it was drained: a node that restarted since is no
/// longer Leaving (the drain does not survive a restart) and must be drained again.
pub const ANNOTATION_DRAINED_RESTARTS: &str = "marekvs.io/drained-restarts";
/// A hash of the pod spec the member was created from; a different desired hash means the
/// member is outdated and a rolling update restarts it.
pub const ANNOTATION_TEMPLATE_HASH: &str = "marekvs.io/template-hash";
/// Set by a user on a member's pod (`"true"`): move this member to a fresh, empty volume,
/// safely (drained, its data handed off first, one member at a time). Read into
/// `PodObs::replace_volume`; once the replacement is recorded in `status.rollout`, the record
/// carries the request (the annotation goes with the pod that is deleted).
pub const ANNOTATION_REPLACE_VOLUME: &str = "marekvs.io/replace-volume";
/// Set by a user on a member's pod (`"true"`): restart this member on its own volume, safely
/// (drained, its data handed off first, one member at a time, like one step of a rolling
/// update). Read into `PodObs::restart`; once recorded in `status.rollout` (reason
/// `RestartRequested`) the record carries the request.
pub const ANNOTATION_RESTART: &str = "marekvs.io/restart";
/// On a member's PVC: since when its member has been away from the cluster (RFC 3339), written
/// when it stops serving or is removed and dropped when it serves again (`core::stale`). A
/// volume away longer than `storage.staleVolumeGraceSeconds` is never mounted again. Removing
/// the annotation by hand accepts the volume as it is (it is stamped again from then).
pub const ANNOTATION_ABSENT_SINCE: &str = marekvs_core::stale::ANNOTATION_ABSENT_SINCE;
/// On a member's PVC: since when a member has served from it (RFC 3339), written once, the
/// first time its member is seen ready on it. A stale volume whose member left before another
/// member's volume first served is kept for the user instead of replaced (`core::stale`).
pub const ANNOTATION_SERVED_SINCE: &str = marekvs_core::stale::ANNOTATION_SERVED_SINCE;
/// On a member's PVC: the uid of the cluster object it was created for. PVCs have no owner
/// reference (data outlives the object), so this is how the operator tells its own volumes
/// from look-alikes (`marekvs_core::ownership`); a later object of the same name restamps a
/// volume stamped with an earlier uid and stamps it again.
pub const ANNOTATION_CLUSTER_UID: &str = "marekvs.io/cluster-uid";
/// On a member's PVC: how many pods the operator has made for it, counted up before each
/// attempt to create one ("0" when the PVC is made; an attempt that reads its pod already
/// there is not counted; two racing attempts may both count: never fewer). `"1"` with that pod's container never started
/// proves that no process ever ran on the volume (`PvcObs::pods_made`).
pub const ANNOTATION_PODS_MADE: &str = "marekvs.io/pods-made";
/// On the Services and the PDB: the hash of the content last applied, so an unchanged object is
/// not applied again on every pass.
pub const ANNOTATION_APPLIED_HASH: &str = "marekvs.io/applied-hash";

/// On the cluster object: adopt the orphaned pods of a StatefulSet that ran its members
/// (migration from marekvs's own operator, docs/migration.md). Only this value opts in.
pub const ANNOTATION_ADOPT: &str = "marekvs.io/adopt";
pub const ADOPT_STATEFULSET_ORPHANS: &str = "statefulset-orphans";

/// The cluster object opts in to adopting a StatefulSet's orphaned members.
pub fn opted_in(cr: &MarekvsCluster) -> bool {
    cr.annotations()
        .get(ANNOTATION_ADOPT)
        .is_some_and(|v| v.trim() == ADOPT_STATEFULSET_ORPHANS)
}
pub const PORT_RESP: i32 = 6379;
pub const PORT_MESH: i32 = 7373;
pub const PORT_GOSSIP: i32 = 7946;
pub const PORT_METRICS: i32 = 9121;
pub fn selector_labels(cr: &MarekvsCluster) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.into(), "marekvs".into()),
        (LABEL_INSTANCE.into(), cr.name_any()),
    ])
}

/// `app.kubernetes.io/name=marekvs,app.kubernetes.io/instance=<name>`
pub fn selector_string(cr: &MarekvsCluster) -> String {
    selector_labels(cr)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn labels(cr: &MarekvsCluster, ordinal: Option<u32>) -> BTreeMap<String, String> {
    let mut l = selector_labels(cr);
    l.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
    if let Some(o) = ordinal {
        l.insert(LABEL_ORDINAL.into(), o.to_string());
    }
    l
}

pub fn headless_service_name(cr: &MarekvsCluster) -> String {
    format!("{}-headless", cr.name_any())
}

pub fn member_name(cr: &MarekvsCluster, ordinal: u32) -> String {
    format!("{}-{ordinal}", cr.name_any())
}

pub fn pvc_name(cr: &MarekvsCluster, ordinal: u32) -> String {
    format!("data-{}-{ordinal}", cr.name_any())
}

/// Ordinal from `<cluster>-<n>` (or `data-<cluster>-<n>` with `prefix = "data-"`).
pub fn ordinal_from_name(cr_name: &str, prefix: &str, name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix(prefix)?
        .strip_prefix(cr_name)?
        .strip_prefix('-')?;
    if rest.is_empty()
        || (rest.len() > 1 && rest.starts_with('0'))
        || !rest.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    rest.parse().ok()
}
