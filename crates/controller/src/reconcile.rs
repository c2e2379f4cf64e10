//! The reconcile pipeline: observe → decide (pure core) → record → act → report.
//!
//! Level-triggered and idempotent: every pass re-reads the pods, PVCs and member metrics, and
//! the only memory is the object's status (members, the removal record, counter samples). The
//! decision's memory is written to status before any action, so an operator restarted at any
//! point re-derives the same next step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod, PodStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use marekvs_api::conditions::*;
use marekvs_api::{
    AutoscaleSpec, AutoscaleStatus, LoadSampleStatus, MarekvsCluster, MarekvsClusterStatus,
    MemberMetrics, MemberStatus, RemovalStatus, RolloutStatus,
};
use marekvs_core::autoscale::{
    LoadMemory, LoadSample, Policy, ScaleDecision, ScaleInput, ScaleMemory, decide_size,
    update_load,
};
use marekvs_core::units::quantity_bytes;
use marekvs_core::{
    Action, BlockReason, ClusterPhase, ClusterSpec, Decision, Disk, EventKind, Input, MemberObs,
    MemberPhase, Memory, Millis, Note, PodObs, PvcObs, Removal, RemovalStep, Roll, RollStep,
    Sample, Scrape, VictimReason, decide,
};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::build::{
    self, ANNOTATION_DRAINED_AT, ANNOTATION_DRAINED_RESTARTS, ANNOTATION_TEMPLATE_HASH, MANAGER,
};
use crate::scrape::MemberClient;
use crate::telemetry::Metrics;

pub struct Ctx {
    pub client: Client,
    pub recorder: Recorder,
    pub members: MemberClient,
    pub cluster_domain: String,
    /// Watch caches of the operator's children (labelled managed-by): read here instead of
    /// listing on every pass.
    pub pods: Store<Pod>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub services: Store<Service>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub metrics: Arc<Metrics>,
    /// Held while a deleted pod of a cluster is being re-created; a pass waits for it.
    pub gate: Arc<crate::fastpath::Gate>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
    #[error("watch caches not synced yet")]
    NotSynced,
}

fn now_ms() -> Millis {
    Timestamp::now().as_millisecond()
}

fn to_time(ms: Millis) -> Time {
    Time(Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn from_time(t: &Time) -> Millis {
    t.0.as_millisecond()
}

pub async fn reconcile(cr: Arc<MarekvsCluster>, ctx: Arc<Ctx>) -> Result<Requeue, Error> {
    let ns = cr.namespace().unwrap_or_default();
    let name = cr.name_any();
    ctx.metrics.started(&ns, &name);
    let start = std::time::Instant::now();
    let result = reconcile_inner(&cr, &ctx).await;
    ctx.metrics.reconcile_duration.observe(start.elapsed());
    ctx.metrics
        .reconciles
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match &result {
        Ok(requeue_after) => ctx.metrics.scheduled(&ns, &name, *requeue_after),
        Err(e) => ctx.metrics.errors.inc(e.kind()),
    }
    result.map(|after| {
        if after == Duration::MAX {
            Requeue::await_change()
        } else {
            Requeue::requeue(after)
        }
    })
}

impl Error {
    /// For the errors metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(e)) if e.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(e)) if e.code == 404 => "not_found",
            Error::Kube(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => "invalid",
            Error::Kube(kube::Error::Api(e)) if e.code == 403 => "forbidden",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::Invalid(_) => "invalid_spec",
            Error::NotSynced => "not_synced",
        }
    }
}

/// Server-side apply `desired`, unless the cached object already carries the hash of exactly
/// this content (an unchanged object is not written again).
async fn apply_if_changed<K>(
    ctx: &Ctx,
    cache: &Store<K>,
    ns: &str,
    desired: K,
    what: &str,
) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let name = desired.name_any();
    let mut value = serde_json::to_value(&desired).map_err(|e| Error::Invalid(e.to_string()))?;
    let hash = build::template_hash(&value);
    value["metadata"]["annotations"] = json!({ build::ANNOTATION_APPLIED_HASH: hash });
    let applied = cache
        .get(&ObjectRef::new(&name).within(ns))
        .and_then(|o| o.annotations().get(build::ANNOTATION_APPLIED_HASH).cloned());
    if applied.as_deref() == Some(hash.as_str()) {
        return Ok(());
    }
    Api::<K>::namespaced(ctx.client.clone(), ns)
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(value),
        )
        .await?;
    ctx.metrics.actions.inc(what);
    Ok(())
}

fn synced<K: kube::Resource<DynamicType = ()> + Clone>(cache: &Store<K>) -> bool {
    futures::FutureExt::now_or_never(cache.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// The cached children of `cr` whose name is `<prefix><cr>-<ordinal>`.
/// Shared with the cache, not copied: a reconcile at 1,600 members used to deep-copy every
/// pod and PVC of its cluster (the largest item of the operator's heap profile).
fn children<K: kube::Resource<DynamicType = ()> + Clone>(
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

async fn reconcile_inner(cr: &MarekvsCluster, ctx: &Ctx) -> Result<Duration, Error> {
    if cr.metadata.deletion_timestamp.is_some() {
        // Pods and Services go with it (owner references); PVCs stay on purpose.
        return Ok(Duration::MAX);
    }
    let ns = cr
        .namespace()
        .ok_or_else(|| Error::Invalid("MarekvsCluster must be namespaced".into()))?;
    let name = cr.name_any();
    let mut spec = core_spec(cr)?;
    // Until every cache holds its first LIST, an absent pod may only be not-yet-seen.
    if !(synced(&ctx.pods) && synced(&ctx.pvcs) && synced(&ctx.services) && synced(&ctx.pdbs)) {
        return Err(Error::NotSynced);
    }
    // A deleted pod being re-created goes first: its POST is what a user waits for.
    ctx.gate.wait(&ns, &name).await;

    // Children that do not depend on the runbook: server-side apply, one field manager.
    apply_if_changed(
        ctx,
        &ctx.services,
        &ns,
        build::headless_service(cr),
        "apply_service",
    )
    .await?;
    apply_if_changed(
        ctx,
        &ctx.services,
        &ns,
        build::client_service(cr),
        "apply_service",
    )
    .await?;
    apply_if_changed(ctx, &ctx.pdbs, &ns, build::pdb(cr), "apply_pdb").await?;

    // Observe.
    let pods: BTreeMap<u32, Arc<Pod>> = children(&ctx.pods, cr, "");
    let pvcs: BTreeMap<u32, Arc<PersistentVolumeClaim>> = children(&ctx.pvcs, cr, "data-");
    let status = cr.status.clone().unwrap_or_default();
    let memory = memory_from_status(&name, &status);
    let mut observed = observe(cr, ctx, &memory, &pods, &pvcs);

    // A missing pod or PVC of an unchanged membership is re-created before the members are
    // scraped: no member figure bears on it, and a deleted pod comes back sooner.
    let recreated =
        recreate_missing(ctx, cr, &spec, &status, &memory, &observed, &pods, &pvcs).await?;

    let scrapes = scrape_all(&ctx.members, &pods).await;
    for (o, m) in observed.iter_mut() {
        m.scrape = scrapes.get(o).cloned().flatten();
    }

    // Load, and the autoscaler's wish: it only moves the target, the stepper still decides.
    let now = now_ms();
    let member_scrape = |o: &u32| observed.get(o).and_then(|m| m.scrape.as_ref());
    // Only ready members count: a joining member's counter says nothing about the load yet.
    let counters: BTreeMap<u32, Option<u64>> = memory
        .members
        .iter()
        .map(|o| {
            let ready = observed
                .get(o)
                .and_then(|m| m.pod.as_ref())
                .is_some_and(|p| p.ready);
            (
                *o,
                member_scrape(o).filter(|_| ready).map(|s| s.commands_total),
            )
        })
        .collect();
    let load = update_load(&load_from_status(&name, &status), &counters, now);
    let scaling = cr.spec.autoscale.as_ref().map(|a| {
        let disks: BTreeMap<u32, Option<Disk>> = memory
            .members
            .iter()
            .map(|o| (*o, member_scrape(o).and_then(|s| s.disk)))
            .collect();
        decide_size(&ScaleInput {
            policy: &policy(a),
            rf_floor: spec.floor(),
            initial: spec.nodes,
            members: memory.members.len() as u32,
            ops_per_sec: load.ops_per_sec,
            disks: &disks,
            memory: &scale_from_status(&status),
            now,
        })
    });
    if let Some(sd) = &scaling {
        spec.nodes = sd.desired;
    }

    // Decide.
    let decision = decide(&Input {
        spec: &spec,
        memory: &memory,
        observed: &observed,
        now,
    });

    // Record, before acting.
    let unknown_choices: Vec<String> = cr
        .spec
        .remove_members
        .iter()
        .filter(|m| {
            build::ordinal_from_name(&name, "", m).is_none_or(|o| {
                !decision.memory.members.contains(&o) && !memory.members.contains(&o)
            })
        })
        .cloned()
        .collect();
    let new_status = status_from(
        cr,
        &status,
        &decision,
        &observed,
        &pods,
        &pvcs,
        &unknown_choices,
        now,
    );
    let new_status = with_load_and_autoscale(
        cr,
        new_status,
        &spec,
        &decision,
        &load,
        scaling.as_ref(),
        &name,
        now,
    );
    let reference = cr.object_ref(&());

    // Written only when it changed: a quiet cluster costs no write per pass.
    let unchanged = status_for_comparison(&new_status)
        == status_for_comparison(&cr.status.clone().unwrap_or_default());
    if unchanged {
        ctx.metrics.actions.inc("status_unchanged");
    } else {
        // A pass that began before a pod's deletion lets its re-creation go first here.
        ctx.gate.wait(&ns, &name).await;
        patch_status(&ctx.client, cr, &new_status).await?;
        ctx.metrics.actions.inc("status_write");
    }

    // Events, on transitions only.
    if let Some(sd) = &scaling {
        let before = status.autoscale.as_ref().and_then(|a| a.desired_nodes);
        if let Some(before) = before
            && before != sd.desired as i32
        {
            let up = sd.desired as i32 > before;
            publish(
                &ctx.recorder,
                &reference,
                EventKind::Normal,
                if up { "AutoscaleUp" } else { "AutoscaleDown" },
                &format!(
                    "autoscaler: {before} → {} members: {}",
                    sd.desired, sd.reason
                ),
            )
            .await;
        }
    }
    for m in &new_status.members {
        let stopped = |ms: &MemberStatus| {
            ms.conditions
                .iter()
                .any(|c| c.type_ == MEMBER_DISK_WRITE_STOPPED && c.status == "True")
        };
        let was = status
            .members
            .iter()
            .find(|p| p.ordinal == m.ordinal)
            .is_some_and(stopped);
        if stopped(m) && !was {
            publish(
                &ctx.recorder,
                &reference,
                EventKind::Warning,
                "DiskWriteStopped",
                &format!("{}: {DISK_WRITE_STOPPED_ADVICE}", m.name),
            )
            .await;
        }
    }
    publish_notes(ctx, &reference, &decision.notes, &recreated).await;
    let choices_were_valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == REMOVAL_CHOICES)
        .is_none_or(|c| c.status == "True");
    if !unknown_choices.is_empty() && choices_were_valid {
        publish(
            &ctx.recorder,
            &reference,
            EventKind::Warning,
            "UnknownRemovalChoice",
            &format!(
                "spec.removeMembers names no current member: {} (ignored)",
                unknown_choices.join(", ")
            ),
        )
        .await;
    }

    // Act (what was re-created before the scrapes is not sent again).
    let remaining: Vec<Action> = decision
        .actions
        .iter()
        .filter(|a| !recreated.actions.contains(a))
        .copied()
        .collect();
    run_actions(ctx, cr, &remaining, &pods, &pvcs, &reference).await?;
    grow_volumes(ctx, cr, &pvcs).await;

    let stepped = (decision.memory.removal.is_some()
        && decision.memory.removal.as_ref().map(|r| r.step)
            != memory.removal.as_ref().map(|r| r.step))
        || (decision.memory.roll.is_some()
            && decision.memory.roll.as_ref().map(|r| (r.ordinal, r.step))
                != memory.roll.as_ref().map(|r| (r.ordinal, r.step)));
    let requeue = if stepped {
        // A new step was recorded: act on it at once.
        Duration::from_millis(50)
    } else {
        Duration::from_millis(decision.requeue_ms.max(50) as u64)
    };
    Ok(requeue)
}

pub fn error_policy(_cr: Arc<MarekvsCluster>, err: &Error, _ctx: Arc<Ctx>) -> Requeue {
    if let Error::NotSynced = err {
        return Requeue::requeue(Duration::from_millis(100));
    }
    if let Error::Kube(kube::Error::Api(e)) = err
        && e.code == 409
    {
        // Our copy was stale: look again as soon as the watch catches up.
        return Requeue::requeue(Duration::from_millis(200));
    }
    warn!("reconcile failed: {err}");
    Requeue::requeue(Duration::from_secs(3))
}

fn core_spec(cr: &MarekvsCluster) -> Result<ClusterSpec, Error> {
    let s = &cr.spec;
    if s.replication_factor < 1 || s.nodes < 1 {
        return Err(Error::Invalid(
            "replicationFactor and nodes must be positive".into(),
        ));
    }
    let name = cr.name_any();
    Ok(ClusterSpec {
        name: name.clone(),
        nodes: s.nodes as u32,
        replication_factor: s.replication_factor as u32,
        remove_first: s
            .remove_members
            .iter()
            .filter_map(|m| build::ordinal_from_name(&name, "", m))
            .collect(),
        reclaim_pvcs: s.reclaim_pvcs,
        settle_ms: i64::from(s.scale_down.settle_seconds.max(1)) * 1000,
        handoff_timeout_ms: i64::from(s.scale_down.handoff_timeout_seconds.max(1)) * 1000,
        paused: s.paused,
    })
}

fn policy(a: &AutoscaleSpec) -> Policy {
    Policy {
        min_nodes: a.min_nodes.max(1) as u32,
        max_nodes: a.max_nodes.max(1) as u32,
        target_ops_per_node: a.target_ops_per_node.max(1) as f64,
        scale_down_stabilization_ms: i64::from(
            a.scale_down_stabilization_seconds.unwrap_or(300).max(0),
        ) * 1000,
        scale_up_cooldown_ms: i64::from(a.scale_up_cooldown_seconds.unwrap_or(60).max(0)) * 1000,
        disk_high_water: f64::from(a.disk_high_water_percent.unwrap_or(80).clamp(10, 99)) / 100.0,
    }
}

fn load_from_status(name: &str, status: &MarekvsClusterStatus) -> LoadMemory {
    LoadMemory {
        sample: status.load_sample.as_ref().map(|l| LoadSample {
            at: from_time(&l.sampled_at),
            totals: l
                .command_totals
                .iter()
                .filter_map(|(n, c)| {
                    Some((build::ordinal_from_name(name, "", n)?, (*c).max(0) as u64))
                })
                .collect(),
        }),
        ops_per_sec: status.ops_per_second.map(|o| o as f64),
    }
}

fn scale_from_status(status: &MarekvsClusterStatus) -> ScaleMemory {
    let a = status.autoscale.clone().unwrap_or_default();
    ScaleMemory {
        desired: a.desired_nodes.and_then(|d| u32::try_from(d).ok()),
        last_scale_up_at: a.last_scale_up_time.as_ref().map(from_time),
        last_scale_down_at: a.last_scale_down_time.as_ref().map(from_time),
        low_since: a.low_load_since.as_ref().map(from_time),
    }
}

/// The load figures, the autoscaler's state, and what the Ready and Autoscaling conditions
/// say about them.
#[allow(clippy::too_many_arguments)]
fn with_load_and_autoscale(
    cr: &MarekvsCluster,
    mut st: MarekvsClusterStatus,
    spec: &ClusterSpec,
    d: &Decision,
    load: &LoadMemory,
    scaling: Option<&ScaleDecision>,
    name: &str,
    now: Millis,
) -> MarekvsClusterStatus {
    let t = to_time(now);
    let gen_ = cr.metadata.generation;
    st.desired_nodes = Some(spec.target() as i32);
    st.ops_per_second = load.ops_per_sec.map(|o| o.round() as i64);
    st.load_sample = load.sample.as_ref().map(|s| LoadSampleStatus {
        sampled_at: to_time(s.at),
        command_totals: s
            .totals
            .iter()
            .map(|(o, c)| (format!("{name}-{o}"), *c as i64))
            .collect(),
    });
    match scaling {
        Some(sd) => {
            let have = d.memory.members.len();
            let mut message = match &d.blocked {
                Some(b) if sd.desired as usize != have => format!(
                    "autoscaler wants {}, holding at {have}: {}",
                    sd.desired, b.message
                ),
                _ if sd.desired as usize != have => {
                    format!(
                        "autoscaler wants {}, cluster has {have}: {}",
                        sd.desired, sd.reason
                    )
                }
                _ => format!("autoscaler: {}", sd.reason),
            };
            if cr.spec.nodes as u32 != sd.desired {
                message.push_str(&format!(
                    "; spec.nodes ({}) is only the initial size while spec.autoscale is set",
                    cr.spec.nodes
                ));
            }
            st.autoscale = Some(AutoscaleStatus {
                desired_nodes: Some(sd.desired as i32),
                last_scale_up_time: sd.memory.last_scale_up_at.map(to_time),
                last_scale_down_time: sd.memory.last_scale_down_at.map(to_time),
                low_load_since: sd.memory.low_since.map(to_time),
                message: Some(message.clone()),
            });
            set_condition(
                &mut st.conditions,
                AUTOSCALING,
                true,
                REASON_AUTOSCALING_ACTIVE,
                &message,
                &t,
                gen_,
            );
        }
        None => {
            st.autoscale = None;
            st.conditions.retain(|c| c.type_ != AUTOSCALING);
        }
    }
    let stopped: Vec<&str> = st
        .members
        .iter()
        .filter(|m| {
            m.conditions
                .iter()
                .any(|c| c.type_ == MEMBER_DISK_WRITE_STOPPED && c.status == "True")
        })
        .map(|m| m.name.as_str())
        .collect();
    if !stopped.is_empty() {
        let message = format!(
            "writes refused by {} at the disk high-water mark: {DISK_WRITE_STOPPED_ADVICE}",
            stopped.join(", ")
        );
        set_condition(
            &mut st.conditions,
            READY,
            false,
            REASON_DISK_HIGH_WATER,
            &message,
            &t,
            gen_,
        );
    }
    st
}

/// Container restarts of a pod, summed.
fn restarts(p: &Pod) -> i64 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| i64::from(c.restart_count)).sum())
        .unwrap_or(0)
}

/// What is known of each member from the caches (scrapes are added by the caller).
fn observe(
    cr: &MarekvsCluster,
    ctx: &Ctx,
    memory: &Memory,
    pods: &BTreeMap<u32, Arc<Pod>>,
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
) -> BTreeMap<u32, MemberObs> {
    let mut observed: BTreeMap<u32, MemberObs> = BTreeMap::new();
    for o in pods.keys().chain(pvcs.keys()).chain(memory.members.iter()) {
        let m = observed.entry(*o).or_default();
        m.pod = pods.get(o).map(|p| {
            pod_obs(
                p,
                &build::desired_template_hash(cr, *o, &ctx.cluster_domain),
            )
        });
        m.pvc = pvcs.get(o).map(|p| PvcObs {
            uid: p.uid().unwrap_or_default(),
            terminating: p.metadata.deletion_timestamp.is_some(),
            outdated: cr.spec.storage.replace_volumes && !volume_fits_in_place(cr, p),
        });
    }
    observed
}

/// The creations a pass would make before any member is scraped, when that is all it would
/// do: the membership, the removal and the rollout stay as recorded, so there is nothing to
/// record first, and doing them again is harmless (409). Whatever else the pass decides
/// waits for the scrapes. Returns the actions carried out.
#[allow(clippy::too_many_arguments)]
async fn recreate_missing(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    spec: &ClusterSpec,
    status: &MarekvsClusterStatus,
    memory: &Memory,
    unscraped: &BTreeMap<u32, MemberObs>,
    pods: &BTreeMap<u32, Arc<Pod>>,
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
) -> Result<Recreated, Error> {
    let (actions, notes) = creations_only(spec, status, memory, unscraped, now_ms());
    let mut already_there = BTreeSet::new();
    if !actions.is_empty() {
        already_there = run_actions(ctx, cr, &actions, pods, pvcs, &cr.object_ref(&())).await?;
    }
    Ok(Recreated {
        actions,
        notes,
        already_there,
    })
}

/// What [`recreate_missing`] did.
struct Recreated {
    /// The creations sent.
    actions: Vec<Action>,
    /// The decision's notes about them.
    notes: Vec<Note>,
    /// Of those, the pods that were already there (the other path made them first).
    already_there: BTreeSet<Action>,
}

impl Recreated {
    /// Members whose pod this path did not make: their replacement is announced by the
    /// path that made it.
    fn made_elsewhere(&self, note: &Note) -> bool {
        note.member
            .is_some_and(|o| self.already_there.contains(&Action::CreatePod(o)))
    }
}

/// The fast path for a deleted pod, run from the pod watch's delete event, outside the
/// controller's queue (one pass per cluster at a time): a pass in flight for the same
/// cluster, often writing status for 10–20 ms, no longer delays the new pod. It makes the
/// same creations, from the same caches, as a pass's first step ([`recreate_missing`]):
/// only those of an unchanged membership, removal and rollout; anything else waits for the
/// pass that the same event triggers. Whichever path creates the pod second gets 409.
pub async fn recreate_deleted(ctx: &Ctx, cr: &MarekvsCluster) -> Result<(), Error> {
    if cr.metadata.deletion_timestamp.is_some() || !(synced(&ctx.pods) && synced(&ctx.pvcs)) {
        return Ok(());
    }
    let spec = core_spec(cr)?;
    let pods: BTreeMap<u32, Arc<Pod>> = children(&ctx.pods, cr, "");
    let pvcs: BTreeMap<u32, Arc<PersistentVolumeClaim>> = children(&ctx.pvcs, cr, "data-");
    let status = cr.status.clone().unwrap_or_default();
    let memory = memory_from_status(&cr.name_any(), &status);
    let observed = observe(cr, ctx, &memory, &pods, &pvcs);
    let done = recreate_missing(ctx, cr, &spec, &status, &memory, &observed, &pods, &pvcs).await?;
    if !done.actions.is_empty() {
        ctx.metrics.actions.inc("fast_recreate");
        debug!(cluster = %cr.name_any(), actions = ?done.actions, already_there = ?done.already_there, "fast re-creation");
    }
    publish_notes(ctx, &cr.object_ref(&()), &done.notes, &done).await;
    Ok(())
}

/// See [`recreate_missing`]; pure, for the tests.
fn creations_only(
    spec: &ClusterSpec,
    status: &MarekvsClusterStatus,
    memory: &Memory,
    unscraped: &BTreeMap<u32, MemberObs>,
    now: Millis,
) -> (Vec<Action>, Vec<Note>) {
    let mut spec = spec.clone();
    // Under the autoscaler, the size it last asked for (its load figures come with the scrapes).
    if let Some(desired) = status.autoscale.as_ref().and_then(|a| a.desired_nodes) {
        spec.nodes = desired.max(1) as u32;
    }
    let d = decide(&Input {
        spec: &spec,
        memory,
        observed: unscraped,
        now,
    });
    let only_creations = d
        .actions
        .iter()
        .all(|a| matches!(a, Action::CreatePod(_) | Action::CreatePvc(_)));
    if only_creations
        && d.memory.members == memory.members
        && d.memory.removal == memory.removal
        && d.memory.roll == memory.roll
    {
        (d.actions.into_iter().collect(), d.notes)
    } else {
        (Vec::new(), Vec::new())
    }
}

/// Drops from a cached pod what the operator never reads: the spec (it builds that itself and
/// tracks it by the `marekvs.io/template-hash` annotation) and all of the status but the Ready
/// condition, the pod IP and the restart counts. Kept: the metadata (owner, labels,
/// annotations, uid, deletion). At 1,600 members the cached pods were half the live heap
/// (25 MiB of 49, heaptrack), about 16 KiB each.
pub fn slim_pod(p: &mut Pod) {
    p.spec = None;
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
                        ..ContainerStatus::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
    }
}

fn pod_obs(p: &Pod, desired_hash: &str) -> PodObs {
    PodObs {
        ready: p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        terminating: p.metadata.deletion_timestamp.is_some(),
        drained: p.annotations().contains_key(ANNOTATION_DRAINED_AT)
            && p.annotations()
                .get(ANNOTATION_DRAINED_RESTARTS)
                .and_then(|r| r.parse::<i64>().ok())
                .unwrap_or(0)
                == restarts(p),
        outdated: p
            .annotations()
            .get(ANNOTATION_TEMPLATE_HASH)
            .is_none_or(|h| h != desired_hash),
    }
}

pub(crate) async fn scrape_all(
    client: &MemberClient,
    pods: &BTreeMap<u32, Arc<Pod>>,
) -> BTreeMap<u32, Option<Scrape>> {
    // Concurrently, each with its own short timeout: k dead members cost one timeout, not k.
    let futs = pods.iter().map(|(o, p)| {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
        async move {
            let s = match ip {
                Some(ip) => client.scrape(&ip).await,
                None => None,
            };
            (*o, s)
        }
    });
    join_all(futs).await.into_iter().collect()
}

fn phase_str(p: MemberPhase) -> &'static str {
    match p {
        MemberPhase::Joining => "Joining",
        MemberPhase::Active => "Active",
        MemberPhase::Unready => "Unready",
        MemberPhase::Replacing => "Replacing",
        MemberPhase::Draining => "Draining",
        MemberPhase::Leaving => "Leaving",
        MemberPhase::Updating => "Updating",
    }
}

fn parse_phase(s: &str) -> Option<MemberPhase> {
    Some(match s {
        "Joining" => MemberPhase::Joining,
        "Active" => MemberPhase::Active,
        "Unready" => MemberPhase::Unready,
        "Replacing" => MemberPhase::Replacing,
        "Draining" => MemberPhase::Draining,
        "Leaving" => MemberPhase::Leaving,
        "Updating" => MemberPhase::Updating,
        _ => return None,
    })
}

fn step_str(s: RemovalStep) -> &'static str {
    match s {
        RemovalStep::Draining => "Draining",
        RemovalStep::HandingOff => "HandingOff",
        RemovalStep::Deleting => "Deleting",
        RemovalStep::Settling => "Settling",
    }
}

fn roll_step_str(s: RollStep) -> &'static str {
    match s {
        RollStep::Draining => "Draining",
        RollStep::HandingOff => "HandingOff",
        RollStep::Deleting => "Deleting",
        RollStep::Rejoining => "Rejoining",
    }
}

fn reason_str(r: VictimReason) -> &'static str {
    match r {
        VictimReason::UserChosen => "UserChosen",
        VictimReason::NotReady => "NotReady",
        VictimReason::HighestOrdinal => "HighestOrdinal",
    }
}

fn parse_block(s: &str) -> Option<BlockReason> {
    [
        BlockReason::NotAllReady,
        BlockReason::MetricsUnavailable,
        BlockReason::Underreplicated,
        BlockReason::JoinPending,
        BlockReason::ViewsNotConverged,
        BlockReason::RepairInProgress,
        BlockReason::Replacing,
        BlockReason::HandoffTimeout,
        BlockReason::Paused,
    ]
    .into_iter()
    .find(|r| r.as_str() == s)
}

/// What the operator remembers, read back from status.
pub fn memory_from_status(name: &str, status: &MarekvsClusterStatus) -> Memory {
    let members: BTreeSet<u32> = status
        .instance_names
        .iter()
        .filter_map(|n| build::ordinal_from_name(name, "", n))
        .collect();
    let removal = status.removal.as_ref().and_then(|r| {
        Some(Removal {
            ordinal: u32::try_from(r.ordinal).ok()?,
            reason: match r.reason.as_str() {
                "UserChosen" => VictimReason::UserChosen,
                "NotReady" => VictimReason::NotReady,
                _ => VictimReason::HighestOrdinal,
            },
            step: match r.step.as_str() {
                "Draining" => RemovalStep::Draining,
                "HandingOff" => RemovalStep::HandingOff,
                "Deleting" => RemovalStep::Deleting,
                "Settling" => RemovalStep::Settling,
                _ => return None,
            },
            started_at: from_time(&r.started_at),
            step_started_at: from_time(&r.step_started_at),
        })
    });
    let roll = status.rollout.as_ref().and_then(|r| {
        Some(Roll {
            ordinal: u32::try_from(r.ordinal).ok()?,
            step: [
                RollStep::Draining,
                RollStep::HandingOff,
                RollStep::Deleting,
                RollStep::Rejoining,
            ]
            .into_iter()
            .find(|s| roll_step_str(*s) == r.step)?,
            handed_off_pvc: r.handed_off_pvc.clone(),
            started_at: from_time(&r.started_at),
            step_started_at: from_time(&r.step_started_at),
        })
    });
    let mut samples = BTreeMap::new();
    let mut phases = BTreeMap::new();
    for m in &status.members {
        let Ok(o) = u32::try_from(m.ordinal) else {
            continue;
        };
        if let (Some(metrics), Some(changed)) = (&m.metrics, &m.counters_changed_at) {
            samples.insert(
                o,
                Sample {
                    bootstraps_total: metrics.bootstraps_completed_total.max(0) as u64,
                    repairs_total: metrics.ae_repair_ops_total.max(0) as u64,
                    changed_at: from_time(changed),
                },
            );
        }
        if let Some(p) = parse_phase(&m.phase) {
            phases.insert(o, p);
        }
    }
    let blocked = status
        .conditions
        .iter()
        .find(|c| c.type_ == BLOCKED && c.status == "True")
        .and_then(|c| parse_block(&c.reason));
    Memory {
        members,
        removal,
        roll,
        samples,
        phases,
        blocked,
    }
}

#[allow(clippy::too_many_arguments)]
fn status_from(
    cr: &MarekvsCluster,
    prev: &MarekvsClusterStatus,
    d: &Decision,
    observed: &BTreeMap<u32, MemberObs>,
    pods: &BTreeMap<u32, Arc<Pod>>,
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
    unknown_choices: &[String],
    now: Millis,
) -> MarekvsClusterStatus {
    let name = cr.name_any();
    let gen_ = cr.metadata.generation;
    let t = to_time(now);
    let mut members = Vec::new();
    let mut ready_nodes = 0;
    let mut updated_nodes = 0;
    let mut max_underrep: Option<u64> = None;
    for o in &d.memory.members {
        let m = observed.get(o).cloned().unwrap_or_default();
        let pod = pods.get(o);
        let ready = m.pod.as_ref().is_some_and(|p| p.ready);
        if ready {
            ready_nodes += 1;
        }
        let updated = m.pod.as_ref().is_some_and(|p| !p.outdated);
        if updated {
            updated_nodes += 1;
        }
        if let Some(s) = &m.scrape {
            max_underrep = Some(max_underrep.unwrap_or(0).max(s.underreplicated));
        }
        let prev_m = prev.members.iter().find(|pm| pm.ordinal == *o as i32);
        let mut conditions = prev_m.map(|pm| pm.conditions.clone()).unwrap_or_default();
        let (r_status, r_reason, r_msg) = match &m.pod {
            None => (false, REASON_NO_POD, "no pod".to_string()),
            Some(p) if p.ready => (true, REASON_POD_READY, String::new()),
            Some(_) => (
                false,
                REASON_POD_NOT_READY,
                "the pod's readiness probe (/ready) does not pass".to_string(),
            ),
        };
        set_condition(
            &mut conditions,
            MEMBER_READY,
            r_status,
            r_reason,
            &r_msg,
            &t,
            gen_,
        );
        match &m.scrape {
            Some(_) => set_condition(
                &mut conditions,
                MEMBER_SCRAPED,
                true,
                REASON_SCRAPED,
                "",
                &t,
                gen_,
            ),
            None => set_condition(
                &mut conditions,
                MEMBER_SCRAPED,
                false,
                REASON_SCRAPE_FAILED,
                "its /metrics could not be read",
                &t,
                gen_,
            ),
        }
        let rolling = d.memory.roll.as_ref().filter(|r| r.ordinal == *o);
        match d.memory.removal.as_ref().filter(|r| r.ordinal == *o) {
            Some(r) => set_condition(
                &mut conditions,
                MEMBER_DRAINING,
                true,
                step_str(r.step),
                "chosen for removal",
                &t,
                gen_,
            ),
            None if rolling.is_some() => set_condition(
                &mut conditions,
                MEMBER_DRAINING,
                true,
                roll_step_str(rolling.map(|r| r.step).unwrap_or(RollStep::Draining)),
                "being restarted with the current pod spec",
                &t,
                gen_,
            ),
            None => set_condition(
                &mut conditions,
                MEMBER_DRAINING,
                false,
                REASON_NOT_REMOVING,
                "",
                &t,
                gen_,
            ),
        }
        match (&m.pod, rolling) {
            (Some(p), _) if !p.outdated => set_condition(
                &mut conditions,
                MEMBER_UPDATED,
                true,
                REASON_UP_TO_DATE,
                "its pod runs the current pod spec",
                &t,
                gen_,
            ),
            (_, Some(_)) => set_condition(
                &mut conditions,
                MEMBER_UPDATED,
                false,
                REASON_UPDATING,
                "being restarted with the current pod spec",
                &t,
                gen_,
            ),
            (Some(_), None) => set_condition(
                &mut conditions,
                MEMBER_UPDATED,
                false,
                REASON_OUTDATED,
                "its pod runs an older pod spec; a rolling update restarts it",
                &t,
                gen_,
            ),
            (None, None) => set_condition(
                &mut conditions,
                MEMBER_UPDATED,
                false,
                REASON_NO_POD,
                "no pod",
                &t,
                gen_,
            ),
        }
        let pvc_obj = pvcs.get(o);
        let volume_request = pvc_obj
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone());
        let volume_capacity = pvc_obj
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .map(|q| q.0.clone());
        if let (Some(req), Some(cap)) = (&volume_request, &volume_capacity) {
            let growing = match (quantity_bytes(req), quantity_bytes(cap)) {
                (Some(r), Some(c)) => c < r,
                _ => false,
            };
            if growing {
                set_condition(
                    &mut conditions,
                    MEMBER_VOLUME_RESIZING,
                    true,
                    REASON_EXPANDING,
                    &format!("its volume is being expanded from {cap} to {req}"),
                    &t,
                    gen_,
                );
            } else {
                set_condition(
                    &mut conditions,
                    MEMBER_VOLUME_RESIZING,
                    false,
                    REASON_CAPACITY_MATCHES,
                    &format!("capacity {cap}"),
                    &t,
                    gen_,
                );
            }
        }
        if let Some(s) = &m.scrape {
            if s.write_stopped {
                set_condition(
                    &mut conditions,
                    MEMBER_DISK_WRITE_STOPPED,
                    true,
                    REASON_DISK_HIGH_WATER,
                    DISK_WRITE_STOPPED_ADVICE,
                    &t,
                    gen_,
                );
            } else {
                set_condition(
                    &mut conditions,
                    MEMBER_DISK_WRITE_STOPPED,
                    false,
                    REASON_WRITES_ACCEPTED,
                    "",
                    &t,
                    gen_,
                );
            }
        }
        let metrics = match &m.scrape {
            Some(s) => Some(MemberMetrics {
                scraped_at: t.clone(),
                view_members: s.view_members as i64,
                underreplicated_partitions: s.underreplicated as i64,
                join_gate_pending: s.join_pending as i64,
                bootstraps_completed_total: s.bootstraps_total as i64,
                ae_repair_ops_total: s.repairs_total as i64,
                commands_total: s.commands_total as i64,
            }),
            None => prev_m.and_then(|pm| pm.metrics.clone()),
        };
        members.push(MemberStatus {
            name: format!("{name}-{o}"),
            ordinal: *o as i32,
            pod: pod.map(|p| p.name_any()),
            pvc: pvcs.get(o).map(|p| p.name_any()),
            pvc_uid: m.pvc.as_ref().map(|p| p.uid.clone()),
            volume_request,
            volume_capacity,
            pod_ip: pod
                .and_then(|p| p.status.as_ref())
                .and_then(|s| s.pod_ip.clone()),
            phase: d
                .memory
                .phases
                .get(o)
                .map(|p| phase_str(*p))
                .unwrap_or("Joining")
                .into(),
            ready,
            updated,
            metrics,
            counters_changed_at: d.memory.samples.get(o).map(|s| to_time(s.changed_at)),
            conditions,
        });
    }

    let mut conditions = prev.conditions.clone();
    let healthy = d.phase == ClusterPhase::Healthy;
    let ready_msg = if healthy {
        format!(
            "{} members Active, fully replicated",
            d.memory.members.len()
        )
    } else {
        format!(
            "phase {}: {}",
            d.phase.as_str(),
            d.progress
                .clone()
                .or_else(|| d.blocked.as_ref().map(|b| b.message.clone()))
                .unwrap_or_default()
        )
    };
    set_condition(
        &mut conditions,
        READY,
        healthy,
        if healthy {
            REASON_HEALTHY
        } else {
            REASON_NOT_READY
        },
        &ready_msg,
        &t,
        gen_,
    );
    let (p_status, p_reason) = match d.phase {
        ClusterPhase::ScalingUp => (true, REASON_SCALING_UP),
        ClusterPhase::ScalingDown => (true, REASON_SCALING_DOWN),
        ClusterPhase::Replacing => (true, REASON_REPLACING),
        ClusterPhase::Updating => (true, REASON_UPDATING),
        ClusterPhase::Paused => (false, REASON_PAUSED),
        ClusterPhase::Reconciling => (true, REASON_RECONCILING),
        ClusterPhase::Blocked => (false, "Blocked"),
        ClusterPhase::Healthy => (false, REASON_IDLE),
    };
    set_condition(
        &mut conditions,
        PROGRESSING,
        p_status,
        p_reason,
        &d.progress.clone().unwrap_or_default(),
        &t,
        gen_,
    );
    match &d.blocked {
        Some(b) => set_condition(
            &mut conditions,
            BLOCKED,
            true,
            b.reason.as_str(),
            &b.message,
            &t,
            gen_,
        ),
        None => set_condition(
            &mut conditions,
            BLOCKED,
            false,
            REASON_NOT_BLOCKED,
            "",
            &t,
            gen_,
        ),
    }
    if unknown_choices.is_empty() {
        set_condition(
            &mut conditions,
            REMOVAL_CHOICES,
            true,
            REASON_VALID,
            "",
            &t,
            gen_,
        );
    } else {
        set_condition(
            &mut conditions,
            REMOVAL_CHOICES,
            false,
            REASON_UNKNOWN_MEMBER,
            &format!(
                "not current members (ignored): {}",
                unknown_choices.join(", ")
            ),
            &t,
            gen_,
        );
    }

    MarekvsClusterStatus {
        phase: Some(d.phase.as_str().into()),
        conditions,
        observed_generation: gen_,
        desired_nodes: Some(cr.spec.nodes.max(cr.spec.replication_factor + 1)),
        ready_nodes: Some(ready_nodes),
        updated_nodes: Some(updated_nodes),
        replicas: Some(d.memory.members.len() as i32),
        selector: Some(build::selector_string(cr)),
        underreplicated_partitions: max_underrep.map(|u| u as i64),
        instance_names: d
            .memory
            .members
            .iter()
            .map(|o| format!("{name}-{o}"))
            .collect(),
        members,
        removal: d.memory.removal.as_ref().map(|r| RemovalStatus {
            member: format!("{name}-{}", r.ordinal),
            ordinal: r.ordinal as i32,
            reason: reason_str(r.reason).into(),
            step: step_str(r.step).into(),
            started_at: to_time(r.started_at),
            step_started_at: to_time(r.step_started_at),
        }),
        // Filled in by with_load_and_autoscale.
        ops_per_second: None,
        load_sample: None,
        autoscale: None,
        rollout: d.memory.roll.as_ref().map(|r| RolloutStatus {
            member: format!("{name}-{}", r.ordinal),
            ordinal: r.ordinal as i32,
            step: roll_step_str(r.step).into(),
            handed_off_pvc: r.handed_off_pvc.clone(),
            started_at: to_time(r.started_at),
            step_started_at: to_time(r.step_started_at),
        }),
    }
}

/// Status as JSON (as the API server stores it: times in whole seconds), without the time of
/// each member's scrape: figures read again and found the same are no reason to write.
fn status_for_comparison(status: &MarekvsClusterStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_default();
    if let Some(members) = v.get_mut("members").and_then(|m| m.as_array_mut()) {
        for m in members {
            if let Some(metrics) = m.get_mut("metrics").and_then(|x| x.as_object_mut()) {
                metrics.remove("scrapedAt");
            }
        }
    }
    v
}

async fn patch_status(
    client: &Client,
    cr: &MarekvsCluster,
    status: &MarekvsClusterStatus,
) -> Result<(), Error> {
    let api: Api<MarekvsCluster> =
        Api::namespaced(client.clone(), &cr.namespace().unwrap_or_default());
    // Conditional on the resourceVersion the decision was based on: a decision made on a stale
    // copy (the watch cache lags our own last write) conflicts instead of overwriting newer
    // status, and nothing is acted on.
    let body = json!({
        "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
        "metadata": {"resourceVersion": cr.resource_version()},
        "status": status,
    });
    api.patch_status(
        &cr.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// A pass's notes as Events, but not those of creations the other path made (announced there).
async fn publish_notes(
    ctx: &Ctx,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    notes: &[Note],
    recreated: &Recreated,
) {
    for note in notes.iter().filter(|n| !recreated.made_elsewhere(n)) {
        publish(
            &ctx.recorder,
            reference,
            note.kind,
            note.reason,
            &note.message,
        )
        .await;
    }
}

async fn publish(
    recorder: &Recorder,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    kind: EventKind,
    reason: &str,
    message: &str,
) {
    let ev = Event {
        type_: match kind {
            EventKind::Normal => EventType::Normal,
            EventKind::Warning => EventType::Warning,
        },
        reason: reason.into(),
        note: Some(message.chars().take(1000).collect()),
        action: reason.into(),
        secondary: None,
    };
    info!(reason, message, "event");
    if let Err(e) = recorder.publish(&ev, reference).await {
        warn!("publishing event {reason}: {e}");
    }
}

async fn act(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    action: Action,
    pods: &BTreeMap<u32, Arc<Pod>>,
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
) -> Result<Made, Error> {
    let ns = cr.namespace().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pvcs_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    };
    let ok_if = |r: Result<(), kube::Error>, codes: &[u16]| match r {
        Err(kube::Error::Api(e)) if codes.contains(&e.code) => Ok(()),
        other => other,
    };
    ctx.metrics.actions.inc(match action {
        Action::CreatePvc(_) => "create_pvc",
        Action::CreatePod(_) => "create_pod",
        Action::Drain(_) => "drain",
        Action::DeletePod(_) => "delete_pod",
        Action::DeletePvc(_) => "delete_pvc",
    });
    match action {
        Action::CreatePvc(o) => {
            let r = pvcs_api.create(&pp, &build::pvc(cr, o)).await.map(|_| ());
            ok_if(r, &[409])?;
        }
        Action::CreatePod(o) => {
            let r = pods_api
                .create(&pp, &build::pod(cr, o, &ctx.cluster_domain))
                .await
                .map(|_| ());
            if let Err(kube::Error::Api(e)) = &r
                && e.code == 409
            {
                return Ok(Made::AlreadyThere);
            }
            r?;
        }
        Action::Drain(o) => {
            let Some(pod) = pods.get(&o) else {
                return Ok(Made::Done);
            };
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                return Ok(Made::Done);
            };
            if ctx.members.drain(&ip).await {
                // Recorded on the pod, so the next pass (or a restarted operator) knows.
                let patch = json!({"metadata": {"annotations": {
                    ANNOTATION_DRAINED_AT: Timestamp::now().to_string(),
                    ANNOTATION_DRAINED_RESTARTS: restarts(pod).to_string(),
                }}});
                let r = pods_api
                    .patch(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    .map(|_| ());
                ok_if(r, &[404])?;
            }
        }
        Action::DeletePod(o) => {
            let Some(pod) = pods.get(&o) else {
                return Ok(Made::Done);
            };
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: pod.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let r = pods_api.delete(&pod.name_any(), &dp).await.map(|_| ());
            ok_if(r, &[404, 409])?;
        }
        Action::DeletePvc(o) => {
            let Some(pvc) = pvcs.get(&o) else {
                return Ok(Made::Done);
            };
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: pvc.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let r = pvcs_api.delete(&pvc.name_any(), &dp).await.map(|_| ());
            ok_if(r, &[404, 409])?;
        }
    }
    Ok(Made::Done)
}

async fn run_actions(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    actions: &[Action],
    pods: &BTreeMap<u32, Arc<Pod>>,
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
) -> Result<BTreeSet<Action>, Error> {
    let mut already_there = BTreeSet::new();
    for action in actions {
        match act(ctx, cr, *action, pods, pvcs).await {
            Ok(Made::Done) => {}
            Ok(Made::AlreadyThere) => {
                already_there.insert(*action);
            }
            Err(e) => {
                warn!(cluster = %cr.name_any(), ?action, "action failed: {e}");
                publish(
                    &ctx.recorder,
                    reference,
                    EventKind::Warning,
                    "ActionFailed",
                    &format!("{action:?}: {e}"),
                )
                .await;
                return Err(e);
            }
        }
    }
    Ok(already_there)
}

/// What an action did.
enum Made {
    Done,
    /// A pod to create was already there: the other path (the watch's fast re-creation, or
    /// the pass) made it.
    AlreadyThere,
}

fn requested_bytes(pvc: &PersistentVolumeClaim) -> Option<u128> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| quantity_bytes(&q.0))
}

/// Whether the volume can be what the spec asks without replacing it: the same class (when
/// one is asked for) and not larger than asked (growing is done in place).
fn volume_fits_in_place(cr: &MarekvsCluster, pvc: &PersistentVolumeClaim) -> bool {
    let class_ok = match &cr.spec.storage.class_name {
        Some(want) => {
            pvc.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_ref())
                == Some(want)
        }
        None => true,
    };
    let size_ok = match (quantity_bytes(&cr.spec.storage.size), requested_bytes(pvc)) {
        (Some(want), Some(have)) => have <= want,
        _ => true,
    };
    class_ok && size_ok
}

/// Expand existing volumes when spec.storage.size grew (shrinking or another class needs
/// `replaceVolumes`, which the rolling update carries out).
async fn grow_volumes(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    pvcs: &BTreeMap<u32, Arc<PersistentVolumeClaim>>,
) {
    let want = cr.spec.storage.size.clone();
    let Some(want_b) = quantity_bytes(&want) else {
        return;
    };
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    for pvc in pvcs.values() {
        let have = pvc
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"));
        let other_class = cr.spec.storage.class_name.as_ref().is_some_and(|want| {
            pvc.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_ref())
                != Some(want)
        });
        if pvc.metadata.deletion_timestamp.is_some()
            || other_class
            || have
                .and_then(|q| quantity_bytes(&q.0))
                .is_none_or(|h| h >= want_b)
        {
            continue;
        }
        let patch = json!({"spec": {"resources": {"requests": {"storage": want}}}});
        if let Err(e) = api
            .patch(
                &pvc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            warn!(pvc = %pvc.name_any(), "expanding volume: {e}");
            publish(
                &ctx.recorder,
                &cr.object_ref(&()),
                EventKind::Warning,
                "VolumeExpansionFailed",
                &format!("{}: {e}", pvc.name_any()),
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use marekvs_api::MarekvsClusterSpec;
    use serde_json::Value;

    fn cr(spec: Value) -> MarekvsCluster {
        let spec: MarekvsClusterSpec = serde_json::from_value(spec).unwrap();
        let mut c = MarekvsCluster::new("demo", spec);
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c.metadata.generation = Some(4);
        c
    }

    #[test]
    fn a_rescrape_with_the_same_figures_is_no_reason_to_write_status() {
        let member = |at: i64, under: i64| MemberStatus {
            name: "demo-0".into(),
            metrics: Some(MemberMetrics {
                scraped_at: to_time(at),
                view_members: 3,
                underreplicated_partitions: under,
                join_gate_pending: 0,
                bootstraps_completed_total: 1,
                ae_repair_ops_total: 0,
                commands_total: 5,
            }),
            ..MemberStatus::default()
        };
        let status = |m: MemberStatus| MarekvsClusterStatus {
            members: vec![m],
            ..MarekvsClusterStatus::default()
        };
        let first = status_for_comparison(&status(member(1_000, 0)));
        assert_eq!(first, status_for_comparison(&status(member(11_000, 0))));
        assert_ne!(first, status_for_comparison(&status(member(11_000, 4))));
    }

    fn scraped(view: u64, boots: u64) -> MemberObs {
        MemberObs {
            pod: Some(PodObs {
                ready: true,
                ..PodObs::default()
            }),
            pvc: None,
            scrape: Some(Scrape {
                view_members: view,
                bootstraps_total: boots,
                commands_total: 100,
                ..Scrape::default()
            }),
        }
    }

    /// Before the scrapes, only the re-creation of a missing child of an unchanged membership
    /// is done; anything that needs a record first (a new member) waits for the full pass.
    #[test]
    fn a_missing_pod_is_recreated_before_the_scrapes_but_a_new_member_is_not() {
        let up = |ready: bool| MemberObs {
            pod: Some(PodObs {
                ready,
                ..PodObs::default()
            }),
            pvc: Some(PvcObs {
                uid: "v".into(),
                ..PvcObs::default()
            }),
            scrape: None,
        };
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let mut observed: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, up(true))).collect();
        let status = MarekvsClusterStatus::default();
        let spec_of = |nodes: u32| core_spec(&cr(json!({"image": "x", "nodes": nodes}))).unwrap();
        let now: Millis = 1_700_000_000_000;
        assert!(
            creations_only(&spec_of(3), &status, &memory, &observed, now)
                .0
                .is_empty()
        );

        observed.get_mut(&1).unwrap().pod = None;
        assert_eq!(
            creations_only(&spec_of(3), &status, &memory, &observed, now).0,
            [Action::CreatePod(1)]
        );
        // A scale-down is wanted: still only the re-creation (no removal starts meanwhile).
        assert_eq!(
            creations_only(&spec_of(2), &status, &memory, &observed, now).0,
            [Action::CreatePod(1)]
        );
        // A scale-up would add a member, which is recorded in status before it is created.
        assert!(
            creations_only(&spec_of(4), &status, &memory, &observed, now)
                .0
                .is_empty()
        );
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
                "env": [{"name": "A", "value": "b"}]}], "hostname": "demo-1"},
            "status": {"phase": "Running", "podIP": "127.1.0.7", "hostIP": "127.0.0.2",
                "conditions": [{"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "marekvs", "image": "x", "imageID": "y",
                    "ready": true, "restartCount": 2, "state": {"running": {}}}]}
        }))
        .unwrap();
        let mut slim = full.clone();
        slim_pod(&mut slim);
        assert!(slim.spec.is_none());
        assert!(
            serde_json::to_string(&slim).unwrap().len()
                < serde_json::to_string(&full).unwrap().len()
        );
        for hash in ["h1", "h2"] {
            assert_eq!(pod_obs(&slim, hash), pod_obs(&full, hash));
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
        assert_eq!(pod_obs(&slim_unready, "h1"), pod_obs(&unready, "h1"));
        assert!(!pod_obs(&slim_unready, "h1").ready);
        let mut bare = Pod::default();
        slim_pod(&mut bare);
        assert_eq!(bare, Pod::default());
    }

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
            kind: EventKind::Normal,
            reason: "MemberReplaced",
            message: String::new(),
            member,
        };
        assert!(done.made_elsewhere(&note(Some(1))));
        assert!(!done.made_elsewhere(&note(Some(2))));
        assert!(!done.made_elsewhere(&note(None)));
    }

    /// Everything the stepper remembers survives a trip through status: a restarted operator
    /// continues the same removal or rolling update from the same step and settle clock.
    #[test]
    fn memory_survives_a_round_trip_through_status() {
        let c = cr(json!({"image": "x", "nodes": 3}));
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2, 3].into(),
            removal: Some(Removal {
                ordinal: 3,
                reason: VictimReason::UserChosen,
                step: RemovalStep::Settling,
                started_at: now - 9_000,
                step_started_at: now - 2_000,
            }),
            roll: Some(Roll {
                ordinal: 1,
                step: RollStep::Rejoining,
                handed_off_pvc: Some("pvc-uid-1".into()),
                started_at: now - 30_000,
                step_started_at: now - 4_000,
            }),
            samples: (0..4)
                .map(|o| {
                    (
                        o,
                        Sample {
                            bootstraps_total: u64::from(o) * 10,
                            repairs_total: 0,
                            changed_at: now - 1_000 * i64::from(o),
                        },
                    )
                })
                .collect(),
            phases: [
                (0, MemberPhase::Active),
                (1, MemberPhase::Updating),
                (2, MemberPhase::Active),
                (3, MemberPhase::Leaving),
            ]
            .into(),
            blocked: Some(BlockReason::Paused),
        };
        let observed: BTreeMap<u32, MemberObs> =
            (0..4).map(|o| (o, scraped(4, u64::from(o) * 10))).collect();
        let d = Decision {
            memory: memory.clone(),
            actions: vec![],
            phase: ClusterPhase::Paused,
            blocked: Some(marekvs_core::Blocked {
                reason: BlockReason::Paused,
                message: "held".into(),
            }),
            progress: None,
            notes: vec![],
            requeue_ms: 1_000,
        };
        let st = status_from(
            &c,
            &MarekvsClusterStatus::default(),
            &d,
            &observed,
            &BTreeMap::new(),
            &BTreeMap::new(),
            &[],
            now,
        );
        assert_eq!(st.rollout.as_ref().unwrap().member, "demo-1");
        assert_eq!(st.instance_names, ["demo-0", "demo-1", "demo-2", "demo-3"]);
        assert_eq!(memory_from_status("demo", &st), memory);
    }

    #[test]
    fn load_and_autoscaler_state_survive_a_round_trip_through_status() {
        let c = cr(
            json!({"image": "x", "nodes": 3, "autoscale": {"minNodes": 3, "maxNodes": 6, "targetOpsPerNode": 100}}),
        );
        let now: Millis = 1_700_000_000_000;
        let load = LoadMemory {
            sample: Some(LoadSample {
                at: now,
                totals: [(0, 5), (1, 7), (2, 9)].into(),
            }),
            ops_per_sec: Some(420.0),
        };
        let scale = ScaleDecision {
            desired: 5,
            memory: ScaleMemory {
                desired: Some(5),
                last_scale_up_at: Some(now - 60_000),
                last_scale_down_at: None,
                low_since: Some(now - 5_000),
            },
            reason: "scaling up to 5: 420 ops/s over 100 per member".into(),
        };
        let d = Decision {
            memory: Memory {
                members: [0, 1, 2].into(),
                ..Memory::default()
            },
            actions: vec![],
            phase: ClusterPhase::ScalingUp,
            blocked: None,
            progress: None,
            notes: vec![],
            requeue_ms: 1_000,
        };
        let spec = core_spec(&c).unwrap();
        let st = with_load_and_autoscale(
            &c,
            MarekvsClusterStatus::default(),
            &spec,
            &d,
            &load,
            Some(&scale),
            "demo",
            now,
        );
        assert_eq!(load_from_status("demo", &st), load);
        assert_eq!(scale_from_status(&st), scale.memory);
        assert_eq!(st.ops_per_second, Some(420));
        let msg = &condition_of(&st, AUTOSCALING).message;
        assert!(
            msg.starts_with("autoscaler wants 5, cluster has 3"),
            "{msg}"
        );
        assert!(
            msg.contains("spec.nodes (3) is only the initial size"),
            "{msg}"
        );
    }

    fn condition_of<'a>(st: &'a MarekvsClusterStatus, t: &str) -> &'a Condition {
        st.conditions.iter().find(|c| c.type_ == t).unwrap()
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
        assert!(pod_obs(&pod(2, Some("2")), "h").drained);
        assert!(
            !pod_obs(&pod(3, Some("2")), "h").drained,
            "restarted since the drain"
        );
        assert!(!pod_obs(&pod(1, None), "h").drained);
        assert!(pod_obs(&pod(0, None), "h").drained);
    }

    #[test]
    fn a_volume_fits_in_place_unless_its_class_differs_or_it_is_larger() {
        let pvc = |class: &str, size: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "data-demo-0"}, "spec": {"storageClassName": class, "resources": {"requests": {"storage": size}}}})).unwrap()
        };
        let c = cr(json!({"image": "x", "storage": {"size": "2Gi", "className": "fast"}}));
        assert!(volume_fits_in_place(&c, &pvc("fast", "2Gi")));
        assert!(
            volume_fits_in_place(&c, &pvc("fast", "1Gi")),
            "growing is done in place"
        );
        assert!(!volume_fits_in_place(&c, &pvc("standard", "2Gi")));
        assert!(
            !volume_fits_in_place(&c, &pvc("fast", "4Gi")),
            "shrinking needs a new volume"
        );
        let default_class = cr(json!({"image": "x", "storage": {"size": "2Gi"}}));
        assert!(volume_fits_in_place(
            &default_class,
            &pvc("standard", "2Gi")
        ));
    }
}
