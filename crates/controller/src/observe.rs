//! Observe: a cluster's children from the watch caches, and its members' figures from their
//! `/metrics`, as the core's plain data.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    Node, NodeSpec, PersistentVolumeClaim, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use marekvs_api::{LookAlikeKind, MarekvsCluster};
use marekvs_core::LookAlikeSeen;
use marekvs_core::ownership::{
    LookAlikeWhy, Ownership, PodController, PvcClaim, pod_ownership, pvc_ownership,
};
use marekvs_core::volumes::{StorageWish, Volume};
use marekvs_core::{MemberObs, Memory, NodeObs, PodObs, PvcObs, Scrape};

use crate::build::{
    self, ANNOTATION_ABSENT_SINCE, ANNOTATION_CLUSTER_UID, ANNOTATION_DRAINED_AT,
    ANNOTATION_DRAINED_RESTARTS, ANNOTATION_PODS_MADE, ANNOTATION_REPLACE_VOLUME,
    ANNOTATION_RESTART, ANNOTATION_SERVED_SINCE, ANNOTATION_TEMPLATE_HASH,
};
use crate::error::Error;
use crate::scrape::MemberClient;
use crate::spec::storage_wish;

/// Whether a cache holds its first LIST: until then an absent pod may only be not-yet-seen.
pub fn synced<K: kube::Resource<DynamicType = ()> + Clone>(cache: &Store<K>) -> bool {
    futures::FutureExt::now_or_never(cache.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// A cluster's pods and PVCs by ordinal, shared with the caches, not copied: a reconcile at
/// 1,600 members used to deep-copy every pod and PVC of its cluster (the largest item of the
/// operator's heap profile). Only the cluster's own (`marekvs_core::ownership`): an object
/// with a member's name that is not the cluster's is a look-alike, never acted on.
pub struct Children {
    pub pods: BTreeMap<u32, Arc<Pod>>,
    pub pvcs: BTreeMap<u32, Arc<PersistentVolumeClaim>>,
    /// Objects with a member's name and the cluster's labels that are not the cluster's.
    pub look_alikes: Vec<LookAlike>,
    /// Volumes of the cluster to stamp with its uid (restamped), with the uid they carried.
    pub to_stamp: Vec<(u32, Option<String>)>,
    /// Ordinals whose pod has no controller, when the cluster opts in to adopting them
    /// (`adopt`); look-alikes until adopted.
    pub orphans: Vec<u32>,
}

/// An object with a member's name that is not the cluster's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookAlike {
    pub ordinal: u32,
    pub kind: LookAlikeKind,
    pub name: String,
    pub why: LookAlikeWhy,
}

impl Children {
    pub fn of(cr: &MarekvsCluster, pods: &Store<Pod>, pvcs: &Store<PersistentVolumeClaim>) -> Self {
        Children::sorted(cr, named(pods, cr, ""), named(pvcs, cr, "data-"))
    }

    /// Sort the objects with members' names into the cluster's own and look-alikes.
    fn sorted(
        cr: &MarekvsCluster,
        pods: BTreeMap<u32, Arc<Pod>>,
        pvcs: BTreeMap<u32, Arc<PersistentVolumeClaim>>,
    ) -> Self {
        let uid = cr.uid().unwrap_or_default();
        let adopting = crate::build::opted_in(cr);
        let mut children = Children {
            pods: BTreeMap::new(),
            pvcs: BTreeMap::new(),
            look_alikes: Vec::new(),
            to_stamp: Vec::new(),
            orphans: Vec::new(),
        };
        for (o, p) in pods {
            match pod_ownership(&controller_of(&p.metadata), &uid) {
                Ownership::LookAlike(why) => {
                    if adopting && why == LookAlikeWhy::NoController {
                        children.orphans.push(o);
                    }
                    children.look_alike(o, LookAlikeKind::Pod, &p.metadata, why)
                }
                Ownership::Ours | Ownership::Restamp { .. } => {
                    children.pods.insert(o, p);
                }
            }
        }
        let members = status_members(cr);
        for (o, v) in pvcs {
            let claim = PvcClaim {
                stamped_uid: v.annotations().get(ANNOTATION_CLUSTER_UID).cloned(),
                member: members.contains(&o),
                // A pod of the cluster mounts its member's PVC by name.
                mounted_by_ours: children.pods.contains_key(&o),
                adopting,
            };
            match pvc_ownership(&claim, &uid) {
                Ownership::LookAlike(why) => {
                    children.look_alike(o, LookAlikeKind::PersistentVolumeClaim, &v.metadata, why)
                }
                Ownership::Restamp { from } => {
                    children.to_stamp.push((o, from));
                    children.pvcs.insert(o, v);
                }
                Ownership::Ours => {
                    children.pvcs.insert(o, v);
                }
            }
        }
        children
    }

    /// The look-alikes as status lists them (and the core compares them), in order.
    pub fn look_alikes_seen(&self, cluster: &str) -> Vec<LookAlikeSeen> {
        let mut list: Vec<LookAlikeSeen> = self
            .look_alikes
            .iter()
            .map(|l| LookAlikeSeen {
                kind: l.kind.into(),
                name: l.name.clone(),
                member: format!("{cluster}-{}", l.ordinal),
                why: l.why.message(),
            })
            .collect();
        list.sort();
        list
    }

    fn look_alike(
        &mut self,
        ordinal: u32,
        kind: LookAlikeKind,
        meta: &ObjectMeta,
        why: LookAlikeWhy,
    ) {
        self.look_alikes.push(LookAlike {
            ordinal,
            kind,
            name: meta.name.clone().unwrap_or_default(),
            why,
        });
    }
}

/// What an object's owner references say about its controller.
pub fn controller_of(meta: &ObjectMeta) -> PodController {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map_or(PodController::None, |r| PodController::Some {
            kind: r.kind.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        })
}

/// The members `status.instanceNames` lists.
fn status_members(cr: &MarekvsCluster) -> std::collections::BTreeSet<u32> {
    let name = cr.name_any();
    cr.status
        .iter()
        .flat_map(|s| s.instance_names.iter())
        .filter_map(|n| build::ordinal_from_name(&name, "", n))
        .collect()
}

/// The cached objects with the cluster's labels whose name is `<prefix><cr>-<ordinal>`.
fn named<K: kube::Resource<DynamicType = ()> + Clone>(
    cache: &Store<K>,
    cr: &MarekvsCluster,
    prefix: &str,
) -> BTreeMap<u32, Arc<K>> {
    let ns = cr.namespace();
    let name = cr.name_any();
    let selector = build::selector_labels(cr);
    cache
        .state()
        .into_iter()
        .filter(|o| {
            o.meta().namespace == ns
                && selector
                    .iter()
                    .all(|(k, v)| o.meta().labels.as_ref().and_then(|l| l.get(k)) == Some(v))
        })
        .filter_map(|o| {
            build::ordinal_from_name(&name, prefix, o.meta().name.as_deref()?)
                .map(|ord| (ord, o.clone()))
        })
        .collect()
}

/// What is known of each member from the caches, before any scrape.
pub fn unscraped(
    cr: &MarekvsCluster,
    cluster_domain: &str,
    memory: &Memory,
    children: &Children,
    admissions: &crate::admission::Admissions,
    nodes: &Store<Node>,
) -> Result<BTreeMap<u32, MemberObs>, Error> {
    let wish = storage_wish(cr);
    let uid = cr.uid().unwrap_or_default();
    let (pods, pvcs) = (&children.pods, &children.pvcs);
    let mut observed: BTreeMap<u32, MemberObs> = BTreeMap::new();
    for o in pods.keys().chain(pvcs.keys()).chain(memory.members.iter()) {
        let m = observed.entry(*o).or_default();
        m.pod = match pods.get(o) {
            Some(p) => {
                let hash = build::desired_template_hash(cr, *o, cluster_domain)?;
                m.new_pod = admissions.get(&(uid.clone(), *o, hash.clone()));
                Some(pod_obs(p, &hash, &cr.spec.image, node_of(p, nodes)))
            }
            None => None,
        };
        m.pvc = pvcs
            .get(o)
            .map(|p| pvc_obs(p, cr.spec.storage.replace_volumes, &wish));
    }
    for l in &children.look_alikes {
        observed.entry(l.ordinal).or_default().look_alike = true;
    }
    Ok(observed)
}

/// What one pass read of one member.
#[derive(Clone, Debug, Default)]
pub struct MemberRead {
    pub scrape: Option<Scrape>,
    pub view: crate::views::ViewRead,
}

/// Each member read once: its view over RESP first, then its `/metrics`, so that the figure of
/// RESP input the scrape reads already holds the bytes the view read sent (`input.rs`).
/// Members are read concurrently, each read with its own short timeout: k dead members cost
/// about one timeout, not k. A pod without an IP is not read, nor one that ended (`Succeeded`
/// or `Failed`): its IP was let go and may be another pod's (the password is never sent to it).
pub async fn read_members(
    client: &MemberClient,
    pods: &BTreeMap<u32, Arc<Pod>>,
    credentials: &crate::views::Credentials,
) -> BTreeMap<u32, MemberRead> {
    let futs = pods.iter().map(|(o, p)| {
        let ip = live_ip(p);
        async move {
            let Some(ip) = ip else {
                return (*o, MemberRead::default());
            };
            let view = crate::views::read_one(client, &ip, credentials).await;
            let scrape = client.scrape(&ip).await;
            (*o, MemberRead { scrape, view })
        }
    });
    join_all(futs).await.into_iter().collect()
}

/// A pod's IP while it can still be its own: not once the pod ended.
pub fn live_ip(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    status.pod_ip.clone()
}

/// What the input ledger needs of this pass's reads (`input.rs`).
pub fn ledger_reads(
    pods: &BTreeMap<u32, Arc<Pod>>,
    reads: &BTreeMap<u32, MemberRead>,
) -> BTreeMap<u32, crate::input::Read> {
    reads
        .iter()
        .filter_map(|(o, r)| {
            let uid = pods.get(o)?.metadata.uid.clone()?;
            Some((
                *o,
                crate::input::Read {
                    pod_uid: uid,
                    input: r.scrape.as_ref().and_then(|s| s.client_input_bytes),
                    sent: r.view.sent,
                },
            ))
        })
        .collect()
}

/// Add this pass's reads, and the client input the ledger worked out, to the observations.
pub fn with_reads(
    mut observed: BTreeMap<u32, MemberObs>,
    reads: &BTreeMap<u32, MemberRead>,
    inputs: &BTreeMap<u32, Option<u64>>,
) -> BTreeMap<u32, MemberObs> {
    for (o, m) in observed.iter_mut() {
        let read = reads.get(o);
        m.scrape = read.and_then(|r| r.scrape.clone());
        m.view = read.and_then(|r| r.view.view.clone());
        m.password = read.map(|r| r.view.taken).unwrap_or_default();
        m.client_input = inputs.get(o).copied().flatten();
    }
    observed
}

/// Container restarts of a pod, summed.
pub fn restarts(p: &Pod) -> i64 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| i64::from(c.restart_count)).sum())
        .unwrap_or(0)
}

/// The pod's Ready condition is True.
pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's container restarts when the operator drained it, as recorded on the pod (a
/// record without the count was made at 0); `None`: not drained.
fn restarts_at_drain(p: &Pod) -> Option<u64> {
    p.annotations().get(ANNOTATION_DRAINED_AT)?;
    let at = p
        .annotations()
        .get(ANNOTATION_DRAINED_RESTARTS)
        .and_then(|r| r.parse::<i64>().ok())
        .unwrap_or(0);
    // A negative count (edited by hand) matches no pod: not drained.
    u64::try_from(at).ok()
}

/// The node pod `p` is scheduled to, as the node cache holds it; `None` while unscheduled or
/// when the node is not in the cache.
fn node_of(p: &Pod, nodes: &Store<Node>) -> Option<NodeObs> {
    let name = p.spec.as_ref()?.node_name.as_deref()?;
    let node = nodes.get(&ObjectRef::new(name))?;
    Some(node_obs(&node))
}

/// What a drain of a node shows on it: cordoned, and its scheduling taints.
pub fn node_obs(n: &Node) -> NodeObs {
    let spec = n.spec.as_ref();
    NodeObs {
        name: n.name_any(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .map(|t| t.key.clone())
            .collect(),
    }
}

/// What a node cache keeps: its name, whether it is cordoned, its taints. Its status (images,
/// conditions, addresses) is most of its size, and the operator reads none of it.
pub fn slim_node(n: &mut Node) {
    n.status = None;
    n.metadata.annotations = None;
    if let Some(s) = n.spec.take() {
        n.spec = Some(NodeSpec {
            unschedulable: s.unschedulable,
            taints: s.taints,
            ..NodeSpec::default()
        });
    }
}

/// The image of the pod's member container (`marekvs`), if its spec names one.
fn member_image(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == crate::build::MEMBER_CONTAINER)?
        .image
        .as_deref()
}

pub fn pod_obs(p: &Pod, desired_hash: &str, desired_image: &str, node: Option<NodeObs>) -> PodObs {
    PodObs {
        image_outdated: member_image(p).is_some_and(|i| i != desired_image),
        ready: pod_ready(p),
        terminating: p.metadata.deletion_timestamp.is_some(),
        drained: PodObs::drain_stands(restarts_at_drain(p), restarts(p).max(0) as u64),
        outdated: p
            .annotations()
            .get(ANNOTATION_TEMPLATE_HASH)
            .is_none_or(|h| h != desired_hash),
        replace_volume: p
            .annotations()
            .get(ANNOTATION_REPLACE_VOLUME)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        restart: p
            .annotations()
            .get(ANNOTATION_RESTART)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        client_traffic_off: p
            .labels()
            .get(crate::build::LABEL_CLIENT_TRAFFIC)
            .is_some_and(|v| v == "off"),
        never_started: never_started(p),
        node,
        eviction_allowed: p
            .labels()
            .get(crate::build::LABEL_EVICTION)
            .is_some_and(|v| v == crate::build::EVICTION_ALLOWED),
    }
}

/// No container of the pod has ever started, as its status says: Pending (or no status yet),
/// and each container reported (if any) waiting, never running or exited, never restarted.
/// Init containers are not counted: the member's process is the main container.
pub fn never_started(p: &Pod) -> bool {
    let Some(status) = p.status.as_ref() else {
        return true;
    };
    if status.phase.as_deref().is_some_and(|ph| ph != "Pending") {
        return false;
    }
    let ran = |s: Option<&ContainerState>| {
        s.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    };
    status.container_statuses.iter().flatten().all(|c| {
        c.restart_count == 0
            && c.started != Some(true)
            && !ran(c.state.as_ref())
            && !ran(c.last_state.as_ref())
    })
}

pub(crate) fn pvc_obs(
    p: &PersistentVolumeClaim,
    replace_volumes: bool,
    wish: &StorageWish,
) -> PvcObs {
    PvcObs {
        uid: p.uid().unwrap_or_default(),
        terminating: p.metadata.deletion_timestamp.is_some(),
        outdated: replace_volumes && !wish.fits_in_place(&volume(p)),
        absent_since: annotated_time(p, ANNOTATION_ABSENT_SINCE),
        served_since: annotated_time(p, ANNOTATION_SERVED_SINCE),
        pods_made: p
            .annotations()
            .get(ANNOTATION_PODS_MADE)
            .and_then(|n| n.parse().ok()),
    }
}

/// The absence recorded on a PVC. One that cannot be read counts as none: the volume is
/// stamped again from now if its member is away (an under-estimate, said in docs/storage.md).
pub fn absent_since(p: &PersistentVolumeClaim) -> Option<marekvs_core::Millis> {
    annotated_time(p, ANNOTATION_ABSENT_SINCE)
}

/// A time recorded in one of the PVC's annotations; one that cannot be read counts as none
/// (a served-since record unreadable holds a stale volume for the user: the safe side).
fn annotated_time(p: &PersistentVolumeClaim, key: &str) -> Option<marekvs_core::Millis> {
    p.annotations()
        .get(key)?
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// A PVC as the volume decisions see it.
pub fn volume(p: &PersistentVolumeClaim) -> Volume {
    let spec = p.spec.as_ref();
    Volume {
        requested: spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone()),
        class_name: spec.and_then(|s| s.storage_class_name.clone()),
        terminating: p.metadata.deletion_timestamp.is_some(),
    }
}

/// The size a PVC's volume has (its status capacity).
pub fn capacity(p: &PersistentVolumeClaim) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone())
}

/// Drops from a cached pod what the operator never reads: the spec (it builds that itself and
/// tracks it by the `marekvs.io/template-hash` annotation) and all of the status but the Ready
/// condition, the pod IP and the restart counts. Kept: the metadata (owner, labels,
/// annotations, uid, deletion). At 1,600 members the cached pods were half the live heap
/// (25 MiB of 49, heaptrack), about 16 KiB each.
pub fn slim_pod(p: &mut Pod) {
    // Only the node it runs on (a drain of that node moves the member off) and each
    // container's name and image (a new member image may upgrade the whole cluster at once).
    p.spec = p.spec.take().map(|s| PodSpec {
        node_name: s.node_name,
        containers: s
            .containers
            .into_iter()
            .map(|c| Container {
                name: c.name,
                image: c.image,
                ..Container::default()
            })
            .collect(),
        ..PodSpec::default()
    });
    if let Some(s) = p.status.take() {
        p.status = Some(PodStatus {
            conditions: s
                .conditions
                .map(|cs| cs.into_iter().filter(|c| c.type_ == "Ready").collect()),
            pod_ip: s.pod_ip,
            phase: s.phase,
            container_statuses: s.container_statuses.map(|cs| {
                cs.into_iter()
                    .map(|c| ContainerStatus {
                        name: c.name,
                        ready: c.ready,
                        restart_count: c.restart_count,
                        started: c.started,
                        state: c.state.map(ran_only),
                        last_state: c.last_state.map(ran_only),
                        ..ContainerStatus::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
    }
}

/// Of a container state, only whether it is (or was) running or exited, without its texts.
fn ran_only(s: ContainerState) -> ContainerState {
    ContainerState {
        running: s.running.map(|_| ContainerStateRunning::default()),
        terminated: s.terminated.map(|t| ContainerStateTerminated {
            exit_code: t.exit_code,
            ..ContainerStateTerminated::default()
        }),
        waiting: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod counts as never started only while its status says no container ever ran:
    /// unscheduled, or waiting for its image, with no restart and no earlier state. The
    /// cache's slimmed pod says the same.
    #[test]
    fn a_pod_never_started_only_while_no_container_ever_ran() {
        let pod = |status: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "demo-3"}, "status": status}))
                .unwrap()
        };
        let waiting = json!({"waiting": {"reason": "ErrImagePull", "message": "not found"}});
        let cases = [
            (json!(null), true),
            (
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
                true,
            ),
            (
                json!({"phase": "Pending", "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": waiting}]}),
                true,
            ),
            // Running, or ran once and is waiting to run again.
            (
                json!({"phase": "Running", "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"running": {}}}]}),
                false,
            ),
            (
                json!({"phase": "Pending", "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "started": true, "state": waiting}]}),
                false,
            ),
            (
                json!({"phase": "Pending", "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "", "ready": false, "restartCount": 1, "state": waiting}]}),
                false,
            ),
            (
                json!({"phase": "Pending", "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": waiting, "lastState": {"terminated": {"exitCode": 1}}}]}),
                false,
            ),
            (
                json!({"phase": "Pending", "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}]}),
                false,
            ),
            (json!({"phase": "Failed"}), false),
        ];
        for (status, expected) in cases {
            let full = pod(status.clone());
            assert_eq!(never_started(&full), expected, "{status}");
            let mut slim = full.clone();
            slim_pod(&mut slim);
            assert_eq!(never_started(&slim), expected, "slimmed: {status}");
            assert_eq!(
                pod_obs(&slim, "h", "marekvs:1", None).never_started,
                expected
            );
        }
    }

    /// The count of pods made, as the volume records it; unknown when missing or unreadable.
    #[test]
    fn a_volumes_count_of_pods_made_is_read_or_unknown() {
        let wish = StorageWish {
            size: "1Gi".into(),
            class_name: None,
        };
        for (value, expected) in [
            (Some("1"), Some(1)),
            (Some("2"), Some(2)),
            (Some("x"), None),
            (None, None),
        ] {
            let mut annotations = serde_json::Map::new();
            if let Some(v) = value {
                annotations.insert(ANNOTATION_PODS_MADE.into(), json!(v));
            }
            let pvc: PersistentVolumeClaim = serde_json::from_value(
                json!({"metadata": {"name": "data-demo-3", "annotations": annotations}}),
            )
            .unwrap();
            assert_eq!(pvc_obs(&pvc, false, &wish).pods_made, expected, "{value:?}");
        }
    }

    /// A node is being drained when cordoned or tainted by a drain tool; its slimmed copy in
    /// the cache says the same, without its status.
    #[test]
    fn a_node_reads_as_drained_when_cordoned_or_tainted_for_a_drain() {
        let node = |spec: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "node-a",
                "annotations": {"a": "b"}}, "spec": spec,
                "status": {"images": [{"names": ["x"], "sizeBytes": 1}]}}))
            .unwrap()
        };
        let cases = [
            (json!({}), false),
            (json!({"unschedulable": true}), true),
            (
                json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}),
                true,
            ),
            (
                json!({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}),
                true,
            ),
            // Soft, or not a drain's.
            (
                json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "PreferNoSchedule"}]}),
                false,
            ),
            (
                json!({"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}),
                false,
            ),
        ];
        for (spec, draining) in cases {
            let full = node(spec.clone());
            let mut slim = full.clone();
            slim_node(&mut slim);
            assert!(slim.status.is_none() && slim.metadata.annotations.is_none());
            assert_eq!(node_obs(&slim), node_obs(&full), "{spec}");
            assert_eq!(node_obs(&full).draining(), draining, "{spec}");
            assert_eq!(node_obs(&full).name, "node-a");
        }
    }

    /// The slimmed pod of the cache tells the operator everything the full one does.
    #[test]
    fn a_slimmed_pod_reads_the_same() {
        let full: Pod = serde_json::from_value(json!({
            "metadata": {"name": "demo-1", "namespace": "ns", "uid": "u1",
                "labels": {"app.kubernetes.io/instance": "demo"},
                "annotations": {ANNOTATION_TEMPLATE_HASH: "h1", ANNOTATION_DRAINED_AT: "2026-11-23T00:00:00Z",
                    ANNOTATION_DRAINED_RESTARTS: "2"},
                "deletionTimestamp": "2026-11-23T00:00:01Z"},
            "spec": {"containers": [{"name": "marekvs", "image": "x",
                "env": [{"name": "A", "value": "b"}]}], "hostname": "demo-1",
                "nodeName": "node-a"},
            "status": {"phase": "Running", "podIP": "127.1.0.7", "hostIP": "127.0.0.2",
                "conditions": [{"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "y",
                    "ready": true, "restartCount": 2, "state": {"running": {}}}]}
        }))
        .unwrap();
        let mut slim = full.clone();
        slim_pod(&mut slim);
        // Of its spec, only the node it runs on (a drain of that node moves it) and each
        // container's name and image (a new member image may upgrade the whole cluster).
        let spec = slim.spec.as_ref().expect("the node it runs on");
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.containers[0].image.as_deref(), Some("x"));
        assert!(spec.containers[0].env.is_none() && spec.hostname.is_none());
        assert!(!pod_obs(&slim, "h1", "x", None).image_outdated);
        assert!(pod_obs(&slim, "h1", "x:2", None).image_outdated);
        assert!(
            serde_json::to_string(&slim).unwrap().len()
                < serde_json::to_string(&full).unwrap().len()
        );
        for hash in ["h1", "h2"] {
            assert_eq!(
                pod_obs(&slim, hash, "marekvs:1", None),
                pod_obs(&full, hash, "marekvs:1", None)
            );
        }
        assert_eq!(restarts(&slim), 2);
        assert_eq!(
            slim.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
            Some("127.1.0.7")
        );
        assert_eq!(slim.metadata, full.metadata);
        // Not ready, and no status at all, stay so.
        let mut unready = full.clone();
        unready
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[1]
            .status = "False".into();
        let mut slim_unready = unready.clone();
        slim_pod(&mut slim_unready);
        assert_eq!(
            pod_obs(&slim_unready, "h1", "marekvs:1", None),
            pod_obs(&unready, "h1", "marekvs:1", None)
        );
        assert!(!pod_obs(&slim_unready, "h1", "marekvs:1", None).ready);
        let mut bare = Pod::default();
        slim_pod(&mut bare);
        assert_eq!(bare, Pod::default());
    }

    /// The absence recorded on a PVC is read back to the millisecond; none, or one that
    /// cannot be read, is none.
    #[test]
    fn the_absence_recorded_on_a_pvc_is_read_back() {
        let pvc = |annotations: serde_json::Value| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "data-demo-3",
                "annotations": annotations}}))
            .unwrap()
        };
        assert_eq!(
            absent_since(&pvc(
                json!({ANNOTATION_ABSENT_SINCE: "2026-11-23T10:00:00.250Z"})
            )),
            Some(1_795_428_000_250)
        );
        assert_eq!(absent_since(&pvc(json!({}))), None);
        assert_eq!(
            absent_since(&pvc(json!({ANNOTATION_ABSENT_SINCE: "yesterday"}))),
            None
        );
    }

    /// `marekvs.io/replace-volume: "true"` on a pod asks for a fresh volume; any other value,
    /// or none, does not.
    #[test]
    fn the_replace_volume_annotation_asks_for_a_fresh_volume() {
        let pod = |value: Option<&str>| -> Pod {
            let mut ann = serde_json::Map::new();
            ann.insert(ANNOTATION_TEMPLATE_HASH.into(), json!("h"));
            if let Some(v) = value {
                ann.insert(ANNOTATION_REPLACE_VOLUME.into(), json!(v));
            }
            serde_json::from_value(json!({"metadata": {"name": "demo-2", "annotations": ann}}))
                .unwrap()
        };
        assert!(pod_obs(&pod(Some("true")), "h", "marekvs:1", None).replace_volume);
        assert!(pod_obs(&pod(Some("True")), "h", "marekvs:1", None).replace_volume);
        for other in [None, Some("false"), Some(""), Some("yes")] {
            assert!(
                !pod_obs(&pod(other), "h", "marekvs:1", None).replace_volume,
                "{other:?}"
            );
        }
        // It says nothing else about the pod.
        let asked = pod_obs(&pod(Some("true")), "h", "marekvs:1", None);
        assert_eq!(
            PodObs {
                replace_volume: false,
                ..asked
            },
            pod_obs(&pod(None), "h", "marekvs:1", None)
        );
        // It survives the slimming of the cache.
        let mut slim = pod(Some("true"));
        slim_pod(&mut slim);
        assert!(pod_obs(&slim, "h", "marekvs:1", None).replace_volume);
    }

    /// `marekvs.io/restart: "true"` on a pod asks for a safe restart on its own volume; it
    /// says nothing else about the pod.
    #[test]
    fn the_restart_annotation_asks_for_a_restart() {
        let pod = |value: Option<&str>| -> Pod {
            let mut ann = serde_json::Map::new();
            ann.insert(ANNOTATION_TEMPLATE_HASH.into(), json!("h"));
            if let Some(v) = value {
                ann.insert(ANNOTATION_RESTART.into(), json!(v));
            }
            serde_json::from_value(json!({"metadata": {"name": "demo-2", "annotations": ann}}))
                .unwrap()
        };
        let asked = pod_obs(&pod(Some("true")), "h", "marekvs:1", None);
        assert!(asked.restart && !asked.replace_volume);
        for other in [None, Some("false"), Some("yes")] {
            assert!(
                !pod_obs(&pod(other), "h", "marekvs:1", None).restart,
                "{other:?}"
            );
        }
        assert_eq!(
            PodObs {
                restart: false,
                ..asked
            },
            pod_obs(&pod(None), "h", "marekvs:1", None)
        );
        let mut slim = pod(Some("true"));
        slim_pod(&mut slim);
        assert!(pod_obs(&slim, "h", "marekvs:1", None).restart);
    }

    fn cluster(uid: &str, instance_names: &[&str]) -> MarekvsCluster {
        let mut cr: MarekvsCluster = serde_json::from_value(json!({
            "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
            "metadata": {"name": "demo", "namespace": "ns", "uid": uid},
            "spec": {"image": "marekvs:1", "nodes": 3, "replicationFactor": 2, "storage": {"size": "1Gi"}},
        }))
        .unwrap();
        cr.status = Some(marekvs_api::MarekvsClusterStatus {
            instance_names: instance_names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        });
        cr
    }

    fn pod_controlled_by(o: u32, uid: Option<&str>) -> Arc<Pod> {
        let owners = match uid {
            Some(uid) => json!([{"apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
                "name": "demo", "uid": uid, "controller": true}]),
            None => json!([]),
        };
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": format!("demo-{o}"),
                "uid": format!("pod-{o}"), "ownerReferences": owners}}))
            .unwrap(),
        )
    }

    fn pvc_stamped(o: u32, uid: Option<&str>) -> Arc<PersistentVolumeClaim> {
        let ann = match uid {
            Some(uid) => json!({ANNOTATION_CLUSTER_UID: uid}),
            None => json!({}),
        };
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": format!("data-demo-{o}"),
                "uid": format!("pvc-{o}"), "annotations": ann}}))
            .unwrap(),
        )
    }

    /// Only the cluster's own pods and PVCs are its children; the rest are look-alikes, and
    /// their members are observed as held by one.
    #[test]
    fn look_alikes_are_sorted_out_and_earlier_volumes_restamped() {
        let cr = cluster("u2", &["demo-0", "demo-1", "demo-2", "demo-3"]);
        let pods = BTreeMap::from([
            (0, pod_controlled_by(0, Some("u2"))),
            (1, pod_controlled_by(1, Some("u2"))),
            // Orphaned, or made by hand.
            (2, pod_controlled_by(2, None)),
            // Controlled by the deleted object of the same name.
            (4, pod_controlled_by(4, Some("u1"))),
        ]);
        let pvcs = BTreeMap::from([
            (0, pvc_stamped(0, Some("u2"))),
            // Made for the earlier object of the same name: restamped.
            (1, pvc_stamped(1, Some("u1"))),
            // Unstamped, a member's, but its pod is a look-alike: not ours.
            (2, pvc_stamped(2, None)),
            // Unstamped, a member's, no pod: not ours.
            (3, pvc_stamped(3, None)),
            // Unstamped, not a member.
            (5, pvc_stamped(5, None)),
        ]);
        let c = Children::sorted(&cr, pods.clone(), pvcs.clone());
        assert_eq!(c.pods.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(c.pvcs.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(c.to_stamp, [(1, Some("u1".to_string()))]);
        let seen: Vec<(u32, LookAlikeKind, &str)> = c
            .look_alikes
            .iter()
            .map(|l| (l.ordinal, l.kind, l.name.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (2, LookAlikeKind::Pod, "demo-2"),
                (4, LookAlikeKind::Pod, "demo-4"),
                (2, LookAlikeKind::PersistentVolumeClaim, "data-demo-2"),
                (3, LookAlikeKind::PersistentVolumeClaim, "data-demo-3"),
                (5, LookAlikeKind::PersistentVolumeClaim, "data-demo-5"),
            ]
        );
        assert_eq!(c.look_alikes[0].why, LookAlikeWhy::NoController);
        let observed = unscraped(
            &cr,
            "cluster.local",
            &Memory::default(),
            &c,
            &Default::default(),
            &kube::runtime::reflector::store::<Node>().0,
        )
        .unwrap();
        for o in [2, 3, 4, 5] {
            assert!(observed[&o].look_alike, "{o}");
            assert!(
                observed[&o].pod.is_none() && observed[&o].pvc.is_none(),
                "{o}"
            );
        }
        assert!(!observed[&0].look_alike && observed[&0].pod.is_some());
        assert!(!observed[&1].look_alike && observed[&1].pvc.is_some());

        // An upgrade: unstamped volumes of members whose pods the cluster controls are
        // stamped, the others stay look-alikes.
        let pods = BTreeMap::from([
            (0, pod_controlled_by(0, Some("u2"))),
            (1, pod_controlled_by(1, Some("u2"))),
        ]);
        let pvcs = BTreeMap::from([(0, pvc_stamped(0, None)), (1, pvc_stamped(1, None))]);
        let c = Children::sorted(&cluster("u2", &["demo-0"]), pods, pvcs);
        assert_eq!(c.to_stamp, [(0, None)]);
        assert_eq!(c.pvcs.keys().copied().collect::<Vec<_>>(), [0]);
        assert_eq!(c.look_alikes.len(), 1);
        assert_eq!(c.look_alikes[0].why, LookAlikeWhy::NotStamped);
    }

    /// Orphans are adoption candidates only when the cluster opts in; until adopted they are
    /// look-alikes, and the volume an adopted pod mounts is stamped though its member is not
    /// yet in status.
    #[test]
    fn orphans_are_candidates_only_for_a_cluster_that_opts_in() {
        let pods = || {
            BTreeMap::from([
                (0, pod_controlled_by(0, Some("u2"))),
                (1, pod_controlled_by(1, None)),
                (2, pod_controlled_by(2, Some("sts"))),
            ])
        };
        let pvcs = || BTreeMap::from([(0, pvc_stamped(0, None)), (1, pvc_stamped(1, None))]);
        // No status members: a migrated object has none yet.
        let plain = cluster("u2", &[]);
        let c = Children::sorted(&plain, pods(), pvcs());
        assert!(c.orphans.is_empty());
        assert!(c.to_stamp.is_empty());
        assert_eq!(c.look_alikes.len(), 4);

        let mut opted = cluster("u2", &[]);
        opted.metadata.annotations = Some(BTreeMap::from([(
            crate::build::ANNOTATION_ADOPT.to_string(),
            crate::build::ADOPT_STATEFULSET_ORPHANS.to_string(),
        )]));
        let c = Children::sorted(&opted, pods(), pvcs());
        // Only the pod without a controller, never one another object controls.
        assert_eq!(c.orphans, [1]);
        assert_eq!(c.pods.keys().copied().collect::<Vec<_>>(), [0]);
        // demo-0's pod is ours: its unstamped volume is stamped; demo-1's waits for its pod.
        assert_eq!(c.to_stamp, [(0, None)]);
        let looks: Vec<(u32, LookAlikeKind)> =
            c.look_alikes.iter().map(|l| (l.ordinal, l.kind)).collect();
        assert_eq!(
            looks,
            [
                (1, LookAlikeKind::Pod),
                (2, LookAlikeKind::Pod),
                (1, LookAlikeKind::PersistentVolumeClaim)
            ]
        );
        // Another value does not opt in.
        let mut other = opted.clone();
        other
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(crate::build::ANNOTATION_ADOPT.into(), "everything".into());
        assert!(Children::sorted(&other, pods(), pvcs()).orphans.is_empty());
    }

    #[test]
    fn an_ended_pods_ip_is_not_read() {
        let pod = |phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "demo-1"},
                "status": {"phase": phase, "podIP": "127.0.0.9"}
            }))
            .unwrap()
        };
        for phase in ["Pending", "Running", "Unknown"] {
            assert_eq!(
                live_ip(&pod(phase)).as_deref(),
                Some("127.0.0.9"),
                "{phase}"
            );
        }
        for phase in ["Succeeded", "Failed"] {
            assert_eq!(live_ip(&pod(phase)), None, "{phase}");
        }
    }

    #[test]
    fn a_drain_does_not_survive_a_restart_of_the_node() {
        let pod = |restarts: i32, recorded: Option<&str>| -> Pod {
            let mut ann = serde_json::Map::new();
            ann.insert(ANNOTATION_DRAINED_AT.into(), json!("2026-11-23T10:00:00Z"));
            if let Some(r) = recorded {
                ann.insert(ANNOTATION_DRAINED_RESTARTS.into(), json!(r));
            }
            serde_json::from_value(json!({
                "metadata": {"name": "demo-1", "annotations": ann},
                "status": {"containerStatuses": [{"name": "marekvs", "restartCount": restarts, "ready": true, "image": "x", "imageID": "", "started": true}]}
            }))
            .unwrap()
        };
        assert!(pod_obs(&pod(2, Some("2")), "h", "marekvs:1", None).drained);
        assert!(
            !pod_obs(&pod(3, Some("2")), "h", "marekvs:1", None).drained,
            "restarted since the drain"
        );
        assert!(!pod_obs(&pod(1, None), "h", "marekvs:1", None).drained);
        assert!(pod_obs(&pod(0, None), "h", "marekvs:1", None).drained);
    }
}
