//! Status in both directions: what the operator remembers, read back from the object's status
//! (typed, no string parsing), and the status a decision is reported as.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use marekvs_api::conditions::*;
use marekvs_api::convert::{replaced_pvc, roll_reason};
use marekvs_api::{
    AutoscaleStatus, BackgroundRepairStatus, CounterSample, HandoffHoldStatus, KeptVolume,
    LoadSampleStatus, LookAlikeStatus, MarekvsCluster, MarekvsClusterStatus, MemberMetrics,
    MemberStatus, PlanHold, PlanHoldKind, PlanStep, RemovalStatus, RolloutStatus,
};
use marekvs_core::EventReason;
use marekvs_core::autoscale::{LoadMemory, LoadSample, ScaleMemory};
use marekvs_core::sizing::Sizing;
use marekvs_core::transitions::Reported;
use marekvs_core::units::quantity_bytes;
use marekvs_core::{
    ClusterPhase, Decision, Disruption, EventKind, Hold, HoldReport, MemberObs, Memory, Millis,
    Moving, Note, PlannedRemoval, Removal, Roll, Sample,
};

use crate::build;
use crate::observe::{Children, capacity, volume};

pub fn to_time(ms: Millis) -> Time {
    Time(Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH))
}

pub fn from_time(t: &Time) -> Millis {
    t.0.as_millisecond()
}

/// What a held scale-down step waits on, where, how fast and since when, in words: e.g.
/// `Repairs moving on demo-0, demo-2 at 12.5/s since 2026-11-25T17:00:00Z`, or for a client
/// still writing to the leaver `ClientTraffic moving on demo-3 at 800.0 writes/s since ...`.
/// No age in it: a message that changed on every pass would write status on every pass.
pub fn hold_summary(h: &HoldReport, cluster: &str) -> String {
    let members = if h.members.is_empty() {
        "-".to_string()
    } else {
        let names: Vec<String> = h.members.iter().map(|o| format!("{cluster}-{o}")).collect();
        names.join(", ")
    };
    let rate = match (h.moving, h.rate_per_sec) {
        (Moving::ClientTraffic, Some(r)) => format!(" at {r:.1} writes/s"),
        (_, Some(r)) => format!(" at {r:.1}/s"),
        (_, None) => String::new(),
    };
    let since = Timestamp::from_second(h.since.div_euclid(1000)).unwrap_or(Timestamp::UNIX_EPOCH);
    let stuck = if h.stuck {
        " (stuck: past spec.scaleDown.handoffTimeoutSeconds)"
    } else {
        ""
    };
    format!(
        "{} moving on {members}{rate} since {since}{stuck}",
        h.moving.as_str()
    )
}

/// `message`, followed by the hold's summary unless it already says it.
/// The longest hold message kept in status (`handoffHold`, `plan[].heldBy`, `autoscale`), in
/// bytes: it can carry what members answered. Conditions are bounded by
/// `CONDITION_MESSAGE_MAX_BYTES`.
pub const HOLD_MESSAGE_MAX_BYTES: usize = 2048;

fn with_hold(message: &str, hold: Option<&HoldReport>, cluster: &str) -> String {
    match hold {
        Some(h) => {
            let summary = hold_summary(h, cluster);
            match message {
                "" => format!("held: {summary}"),
                m if m.contains(&summary) => m.to_string(),
                m => format!("{m}; held: {summary}"),
            }
        }
        None => message.to_string(),
    }
}

/// One list of conditions, all set at one instant for one generation.
struct Conditions<'a> {
    list: Vec<Condition>,
    at: &'a Time,
    generation: Option<i64>,
}

impl<'a> Conditions<'a> {
    fn new(list: Vec<Condition>, at: &'a Time, generation: Option<i64>) -> Self {
        Conditions {
            list,
            at,
            generation,
        }
    }

    fn set(&mut self, type_: &str, status: bool, reason: &str, message: impl AsRef<str>) {
        set_condition(
            &mut self.list,
            type_,
            status,
            reason,
            message.as_ref(),
            self.at,
            self.generation,
        );
    }

    fn remove(&mut self, type_: &str) {
        self.list.retain(|c| c.type_ != type_);
    }
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// What the operator remembers, read back from status.
///
/// The operator never writes both `status.removal` and `status.rollout`; a status that holds
/// both (edited by hand) is read as the removal, and the rollout is dropped: it starts again
/// once the removal is done, if a member is still outdated. A rollout for a fresh volume that
/// does not say which volume to leave (edited by hand) is dropped too: no volume is deleted on
/// a guess (a drained member is then restarted on its own volume).
pub fn memory_from_status(name: &str, status: &MarekvsClusterStatus) -> Memory {
    let members: BTreeSet<u32> = status
        .instance_names
        .iter()
        .filter_map(|n| build::ordinal_from_name(name, "", n))
        .collect();
    let removal = status.removal.as_ref().and_then(|r| {
        Some(Removal {
            ordinal: u32::try_from(r.ordinal).ok()?,
            reason: r.reason.into(),
            step: r.step.into(),
            started_at: from_time(&r.started_at),
            step_started_at: from_time(&r.step_started_at),
            connections_cut_at: r.connections_cut_at.as_ref().map(from_time),
        })
    });
    let roll = status.rollout.as_ref().and_then(|r| {
        let reason = roll_reason(r.reason, r.replaced_pvc.as_deref())?;
        Some(Roll {
            ordinal: u32::try_from(r.ordinal).ok()?,
            reason,
            step: r.step.into(),
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
            let changed = from_time(changed);
            // A status written before the split clocks: both counters moved at `changed`.
            let or_changed = |t: &Option<Time>| t.as_ref().map_or(changed, from_time);
            samples.insert(
                o,
                Sample {
                    bootstraps_total: metrics.bootstraps_completed_total.max(0) as u64,
                    repairs_total: metrics.ae_repair_ops_total.max(0) as u64,
                    changed_at: changed,
                    bootstraps_changed_at: or_changed(&m.bootstraps_changed_at),
                    repairs_changed_at: or_changed(&m.repairs_changed_at),
                    repairs_prev: m
                        .repairs_previous
                        .as_ref()
                        .map(|p| (p.value.max(0) as u64, from_time(&p.at))),
                    ring_ops: metrics.ring_ops.map(|r| r.max(0) as u64),
                    // Status is written only when it changes (these two are left out of the
                    // comparison), so they may be older than the last scrape: a restart is
                    // then only the more likely to be seen.
                    sampled_at: from_time(&metrics.scraped_at),
                    ae_rounds: metrics.ae_rounds_total.map(|r| r.max(0) as u64),
                    view_digest: m
                        .view_digest
                        .as_deref()
                        .and_then(|d| u64::from_str_radix(d, 16).ok()),
                    writes_total: metrics.write_commands_total.max(0) as u64,
                    writes_prev: m
                        .writes_previous
                        .as_ref()
                        .map(|p| (p.value.max(0) as u64, from_time(&p.at))),
                    // A status written before gate v3: unknown, counted from the next
                    // reading of its rounds.
                    quiet_since: m.quiet_since.as_ref().map_or(changed, from_time),
                    quiet_reset: m
                        .quiet_reset
                        .map_or(marekvs_core::QuietReset::Unknown, Into::into),
                    rounds_at_quiet: m
                        .rounds_at_quiet
                        .filter(|_| m.quiet_since.is_some())
                        .map(|r| r.max(0) as u64),
                    // Without its time (a status written before it), sent as if it just moved.
                    sent_total: metrics
                        .repl_ops_sent_total
                        .filter(|_| m.sent_changed_at.is_some())
                        .map(|r| r.max(0) as u64),
                    sent_changed_at: m.sent_changed_at.as_ref().map_or(changed, from_time),
                },
            );
        }
        phases.insert(o, m.phase.into());
    }
    Memory {
        members,
        disruption: removal
            .map(Disruption::Removal)
            .or(roll.map(Disruption::Roll)),
        samples,
        phases,
        blocked: status.block_reason.map(Into::into),
        views_split_since: status.views_disagree_since.as_ref().map(from_time),
        hibernated: status.hibernated,
        hold_since: status
            .handoff_hold
            .as_ref()
            .map(|h| (h.reason.into(), from_time(&h.since))),
    }
}

pub fn load_from_status(name: &str, status: &MarekvsClusterStatus) -> LoadMemory {
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

pub fn scale_from_status(status: &MarekvsClusterStatus) -> ScaleMemory {
    let a = status.autoscale.clone().unwrap_or_default();
    ScaleMemory {
        desired: a.desired_nodes.and_then(|d| u32::try_from(d).ok()),
        last_scale_up_at: a.last_scale_up_time.as_ref().map(from_time),
        last_scale_down_at: a.last_scale_down_time.as_ref().map(from_time),
        low_since: a.low_load_since.as_ref().map(from_time),
    }
}

/// The size the autoscaler last asked for, if it did.
pub fn autoscale_last_asked(status: &MarekvsClusterStatus) -> Option<u32> {
    let desired = status.autoscale.as_ref()?.desired_nodes?;
    Some(desired.max(1) as u32)
}

/// Members whose status says they refuse writes.
pub fn write_stopped(status: &MarekvsClusterStatus) -> BTreeSet<u32> {
    status
        .members
        .iter()
        .filter(|m| is_true(&m.conditions, MEMBER_DISK_WRITE_STOPPED))
        .filter_map(|m| u32::try_from(m.ordinal).ok())
        .collect()
}

/// What a status reported, for the Events on changes.
pub fn reported(status: &MarekvsClusterStatus) -> Reported {
    Reported {
        autoscale_desired: status
            .autoscale
            .as_ref()
            .and_then(|a| a.desired_nodes)
            .map(|d| d.max(0) as u32),
        write_stopped: write_stopped(status),
        unknown_choices: status
            .conditions
            .iter()
            .find(|c| c.type_ == REMOVAL_CHOICES)
            .is_some_and(|c| c.status != "True"),
        mass_failure: is_true(&status.conditions, MASS_FAILURE),
        suspected_partition: is_true(&status.conditions, SUSPECTED_PARTITION),
    }
}

/// Everything a status is made from.
pub struct StatusInput<'a> {
    pub cr: &'a MarekvsCluster,
    pub prev: &'a MarekvsClusterStatus,
    pub decision: &'a Decision,
    pub observed: &'a BTreeMap<u32, MemberObs>,
    pub children: &'a Children,
    pub unknown_choices: &'a [String],
    pub sizing: &'a Sizing,
    pub now: Millis,
}

pub fn status_from(input: &StatusInput) -> MarekvsClusterStatus {
    let StatusInput {
        cr,
        decision: d,
        now,
        ..
    } = *input;
    let t = to_time(now);
    let members: Vec<MemberStatus> = d
        .memory
        .members
        .iter()
        .map(|o| member_status(input, *o, &t))
        .collect();
    let count = |f: fn(&MemberStatus) -> bool| members.iter().filter(|m| f(m)).count() as i32;
    let max_underrep = d
        .memory
        .members
        .iter()
        .filter_map(|o| input.observed.get(o)?.scrape.as_ref())
        .map(|s| s.underreplicated as i64)
        .max();
    let name = cr.name_any();
    let names = |ords: &[u32]| ords.iter().map(|o| format!("{name}-{o}")).collect();
    let mut st = MarekvsClusterStatus {
        handoff_hold: d.hold.as_ref().map(|h| HandoffHoldStatus {
            reason: h.reason.into(),
            message: cut_text(&h.message, HOLD_MESSAGE_MAX_BYTES),
            moving: h.moving.into(),
            members: names(&h.members),
            rate_per_second: h.rate_per_sec,
            since: to_time(h.since),
            stuck: h.stuck,
        }),
        background_repair: d
            .background_repair
            .as_ref()
            .map(|b| BackgroundRepairStatus {
                members: names(&b.members),
                rate_per_second: b.rate_per_sec,
                since: to_time(b.since),
            }),
        phase: Some(d.phase.into()),
        block_reason: d.blocked.as_ref().map(|b| b.reason.into()),
        conditions: cluster_conditions(input, &t),
        observed_generation: cr.metadata.generation,
        desired_nodes: Some(input.sizing.spec.target() as i32),
        ready_nodes: Some(count(|m| m.ready)),
        updated_nodes: Some(count(|m| m.updated)),
        replicas: Some(d.memory.members.len() as i32),
        selector: Some(build::selector_string(cr)),
        underreplicated_partitions: max_underrep,
        instance_names: d
            .memory
            .members
            .iter()
            .map(|o| format!("{name}-{o}"))
            .collect(),
        members,
        removal: d.memory.removal().map(|r| RemovalStatus {
            member: format!("{name}-{}", r.ordinal),
            ordinal: r.ordinal as i32,
            reason: r.reason.into(),
            step: r.step.into(),
            started_at: to_time(r.started_at),
            step_started_at: to_time(r.step_started_at),
            connections_cut_at: r.connections_cut_at.map(to_time),
        }),
        ops_per_second: None,
        load_sample: None,
        autoscale: None,
        rollout: d.memory.roll().map(|r| RolloutStatus {
            member: format!("{name}-{}", r.ordinal),
            ordinal: r.ordinal as i32,
            step: r.step.into(),
            reason: (&r.reason).into(),
            replaced_pvc: replaced_pvc(&r.reason),
            handed_off_pvc: r.handed_off_pvc.clone(),
            started_at: to_time(r.started_at),
            step_started_at: to_time(r.step_started_at),
        }),
        plan: d.plan.iter().map(|p| plan_step(&name, p)).collect(),
        views_disagree_since: d.memory.views_split_since.map(to_time),
        kept_volumes: kept_volumes(input),
        look_alikes: look_alikes_status(&name, input.children),
        hibernated: d.memory.hibernated,
        gossip_cluster: input.prev.gossip_cluster.clone(),
    };
    load_and_autoscale(input, &mut st, &t);
    st
}

/// The volumes of non-members (`status.keptVolumes`): constant while nothing changes (the
/// times are recorded ones, no age that would change every pass), so a cluster at rest writes
/// no status for them.
fn kept_volumes(input: &StatusInput) -> Vec<KeptVolume> {
    let spec = &input.sizing.spec;
    let grace = spec.stale_volume_grace_ms;
    marekvs_core::stale::kept_volumes(
        &input.decision.memory.members,
        input.observed,
        grace,
        input.now,
    )
    .into_iter()
    .map(|k| {
        let member = spec.member_name(k.ordinal);
        KeptVolume {
            name: format!("data-{member}"),
            member,
            absent_since: k.absent_since.map(to_time),
            stale_at: k.absent_since.map(|since| to_time(since + grace)),
            reusable: k.reusable,
        }
    })
    .collect()
}

/// The look-alikes as `status.lookAlikes` lists them, in order.
fn look_alikes_status(name: &str, children: &Children) -> Vec<LookAlikeStatus> {
    let mut list: Vec<LookAlikeStatus> = children
        .look_alikes
        .iter()
        .map(|l| LookAlikeStatus {
            kind: l.kind,
            name: l.name.clone(),
            member: format!("{name}-{}", l.ordinal),
            why: l.why.message(),
        })
        .collect();
    list.sort();
    list
}

/// A Warning for each look-alike that `next` lists and `prev` did not, naming the member and
/// the object; a Normal one for each that went.
pub fn look_alike_notes(prev: &MarekvsClusterStatus, next: &MarekvsClusterStatus) -> Vec<Note> {
    let key = |l: &LookAlikeStatus| (l.kind, l.name.clone());
    let was: BTreeSet<_> = prev.look_alikes.iter().map(key).collect();
    let is: BTreeSet<_> = next.look_alikes.iter().map(key).collect();
    let appeared = next.look_alikes.iter().filter(|l| !was.contains(&key(l)));
    let went = prev.look_alikes.iter().filter(|l| !is.contains(&key(l)));
    appeared
        .map(|l| Note {
            kind: EventKind::Warning,
            reason: EventReason::LookAlike,
            member: None,
            message: format!(
                "{:?} {} holds the name of member {} but {}: never adopted, scraped, drained or deleted; nothing is created for {} and every disruptive step waits until it is deleted",
                l.kind, l.name, l.member, l.why, l.member
            ),
        })
        .chain(went.map(|l| Note {
            kind: EventKind::Normal,
            reason: EventReason::LookAlikeGone,
            member: None,
            message: format!(
                "{:?} {} (holding the name of member {}) is gone",
                l.kind, l.name, l.member
            ),
        }))
        .collect()
}

/// One step of the core's plan as `status.plan` shows it.
fn plan_step(name: &str, p: &PlannedRemoval) -> PlanStep {
    PlanStep {
        member: format!("{name}-{}", p.ordinal),
        ordinal: p.ordinal as i32,
        reason: p.reason.into(),
        held_by: p.held_by.as_ref().map(|h| PlanHold {
            kind: match h {
                Hold::Gate(_) => PlanHoldKind::Gate,
                Hold::Floor { .. } => PlanHoldKind::Floor,
                Hold::Paused => PlanHoldKind::Paused,
                Hold::InProgress { .. } => PlanHoldKind::InProgress,
            },
            reason: match h {
                Hold::Gate(b) => Some(b.reason.into()),
                _ => None,
            },
            message: cut_text(&h.message(), HOLD_MESSAGE_MAX_BYTES),
        }),
    }
}

fn member_status(input: &StatusInput, o: u32, t: &Time) -> MemberStatus {
    let StatusInput {
        cr,
        prev,
        decision: d,
        observed,
        children,
        ..
    } = *input;
    let m = observed.get(&o).cloned().unwrap_or_default();
    let pod = children.pods.get(&o);
    let pvc = children.pvcs.get(&o);
    let prev_m = prev.members.iter().find(|pm| pm.ordinal == o as i32);
    let mut conditions = Conditions::new(
        prev_m.map(|pm| pm.conditions.clone()).unwrap_or_default(),
        t,
        cr.metadata.generation,
    );
    member_conditions(&mut conditions, d, &m, o, pvc.map(|p| p.as_ref()));
    let metrics = match &m.scrape {
        Some(s) => Some(MemberMetrics {
            scraped_at: t.clone(),
            view_members: s.view_members as i64,
            underreplicated_partitions: s.underreplicated as i64,
            join_gate_pending: s.join_pending as i64,
            bootstraps_completed_total: s.bootstraps_total as i64,
            ae_repair_ops_total: s.repairs_total as i64,
            commands_total: s.commands_total as i64,
            write_commands_total: s.write_commands as i64,
            ae_rounds_total: s.ae_rounds.map(|r| r as i64),
            ring_ops: s.ring_ops.map(|r| r as i64),
            repl_ops_sent_total: s.repl_sent.map(|r| r as i64),
            repl_inflight_bytes: s.repl_inflight_bytes.map(|r| r as i64),
        }),
        None => prev_m.and_then(|pm| pm.metrics.clone()),
    };
    let sample = d.memory.samples.get(&o);
    MemberStatus {
        name: format!("{}-{o}", cr.name_any()),
        ordinal: o as i32,
        pod: pod.map(|p| p.name_any()),
        pvc: pvc.map(|p| p.name_any()),
        pvc_uid: m.pvc.as_ref().map(|p| p.uid.clone()),
        volume_request: pvc.and_then(|p| volume(p).requested),
        volume_capacity: pvc.and_then(|p| capacity(p)),
        pod_ip: pod
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.pod_ip.clone()),
        phase: d
            .memory
            .phases
            .get(&o)
            .map(|p| (*p).into())
            .unwrap_or_default(),
        ready: m.pod.as_ref().is_some_and(|p| p.ready),
        updated: m.pod.as_ref().is_some_and(|p| !p.outdated),
        metrics,
        counters_changed_at: sample.map(|s| to_time(s.changed_at)),
        bootstraps_changed_at: sample.map(|s| to_time(s.bootstraps_changed_at)),
        repairs_changed_at: sample.map(|s| to_time(s.repairs_changed_at)),
        repairs_previous: sample
            .and_then(|s| s.repairs_prev)
            .map(|(value, at)| CounterSample {
                value: value as i64,
                at: to_time(at),
            }),
        quiet_since: sample.map(|s| to_time(s.quiet_since)),
        quiet_reset: sample.map(|s| s.quiet_reset.into()),
        rounds_at_quiet: sample.and_then(|s| s.rounds_at_quiet).map(|r| r as i64),
        view_digest: sample
            .and_then(|s| s.view_digest)
            .map(|d| format!("{d:016x}")),
        writes_previous: sample
            .and_then(|s| s.writes_prev)
            .map(|(value, at)| CounterSample {
                value: value as i64,
                at: to_time(at),
            }),
        sent_changed_at: sample.map(|s| to_time(s.sent_changed_at)),
        conditions: conditions.list,
    }
}

/// Ready, Scraped, Draining, Updated, VolumeResizing and DiskWriteStopped of one member.
fn member_conditions(
    c: &mut Conditions,
    d: &Decision,
    m: &MemberObs,
    o: u32,
    pvc: Option<&PersistentVolumeClaim>,
) {
    match &m.pod {
        None => c.set(MEMBER_READY, false, REASON_NO_POD, "no pod"),
        Some(p) if p.ready => c.set(MEMBER_READY, true, REASON_POD_READY, ""),
        Some(_) => c.set(
            MEMBER_READY,
            false,
            REASON_POD_NOT_READY,
            "the pod's readiness probe (/ready) does not pass",
        ),
    }
    match &m.scrape {
        Some(_) => c.set(MEMBER_SCRAPED, true, REASON_SCRAPED, ""),
        None => c.set(
            MEMBER_SCRAPED,
            false,
            REASON_SCRAPE_FAILED,
            "its /metrics could not be read",
        ),
    }
    let rolling = d.memory.roll().filter(|r| r.ordinal == o);
    match (d.memory.removal().filter(|r| r.ordinal == o), rolling) {
        (Some(r), _) => c.set(
            MEMBER_DRAINING,
            true,
            marekvs_api::RemovalStep::from(r.step).as_str(),
            "chosen for removal",
        ),
        (None, Some(r)) => c.set(
            MEMBER_DRAINING,
            true,
            marekvs_api::RolloutStep::from(r.step).as_str(),
            if r.requested() {
                "being moved to a fresh volume, as its pod asked"
            } else if r.restart_requested() {
                "being restarted on its own volume, as its pod asked"
            } else {
                "being restarted with the current pod spec"
            },
        ),
        (None, None) => c.set(MEMBER_DRAINING, false, REASON_NOT_REMOVING, ""),
    }
    match (&m.pod, rolling) {
        (Some(p), _) if !p.outdated => c.set(
            MEMBER_UPDATED,
            true,
            REASON_UP_TO_DATE,
            "its pod runs the current pod spec",
        ),
        (_, Some(_)) => c.set(
            MEMBER_UPDATED,
            false,
            REASON_UPDATING,
            "being restarted with the current pod spec",
        ),
        (Some(_), None) => c.set(
            MEMBER_UPDATED,
            false,
            REASON_OUTDATED,
            "its pod runs an older pod spec; a rolling update restarts it",
        ),
        (None, None) => c.set(MEMBER_UPDATED, false, REASON_NO_POD, "no pod"),
    }
    if let Some((req, cap)) = pvc.and_then(|p| Some((volume(p).requested?, capacity(p)?))) {
        let growing = matches!(
            (quantity_bytes(&req), quantity_bytes(&cap)),
            (Some(r), Some(c)) if c < r
        );
        if growing {
            let msg = format!("its volume is being expanded from {cap} to {req}");
            c.set(MEMBER_VOLUME_RESIZING, true, REASON_EXPANDING, msg);
        } else {
            let msg = format!("capacity {cap}");
            c.set(MEMBER_VOLUME_RESIZING, false, REASON_CAPACITY_MATCHES, msg);
        }
    }
    match &m.scrape {
        Some(s) if s.write_stopped => c.set(
            MEMBER_DISK_WRITE_STOPPED,
            true,
            REASON_DISK_HIGH_WATER,
            DISK_WRITE_STOPPED_ADVICE,
        ),
        Some(_) => c.set(MEMBER_DISK_WRITE_STOPPED, false, REASON_WRITES_ACCEPTED, ""),
        None => {}
    }
}

/// Ready, Progressing, Blocked, MassFailure and RemovalChoices of the cluster.
fn cluster_conditions(input: &StatusInput, t: &Time) -> Vec<Condition> {
    let StatusInput {
        cr,
        prev,
        decision: d,
        unknown_choices,
        ..
    } = *input;
    let mut c = Conditions::new(prev.conditions.clone(), t, cr.metadata.generation);
    let healthy = d.phase == ClusterPhase::Healthy;
    if healthy {
        let msg = format!(
            "{} members Active, fully replicated",
            d.memory.members.len()
        );
        c.set(READY, true, REASON_HEALTHY, msg);
    } else {
        let why = d
            .progress
            .clone()
            .or_else(|| d.blocked.as_ref().map(|b| b.message.clone()))
            .unwrap_or_default();
        let msg = format!("phase {}: {why}", d.phase.as_str());
        c.set(READY, false, REASON_NOT_READY, msg);
    }
    let (progressing, reason) = match d.phase {
        ClusterPhase::ScalingUp => (true, REASON_SCALING_UP),
        ClusterPhase::ScalingDown => (true, REASON_SCALING_DOWN),
        ClusterPhase::Replacing => (true, REASON_REPLACING),
        ClusterPhase::Updating => (true, REASON_UPDATING),
        ClusterPhase::Paused => (false, REASON_PAUSED),
        ClusterPhase::Reconciling => (true, REASON_RECONCILING),
        ClusterPhase::Blocked => (false, "Blocked"),
        ClusterPhase::Healthy => (false, REASON_IDLE),
        ClusterPhase::Hibernated => (false, REASON_HIBERNATED),
    };
    // A held scale-down step says what keeps moving, where, how fast, since when.
    let (cluster, hold) = (cr.name_any(), d.hold.as_ref());
    let progress = d.progress.clone().unwrap_or_default();
    c.set(
        PROGRESSING,
        progressing,
        reason,
        with_hold(&progress, hold, &cluster),
    );
    match &d.blocked {
        Some(b) => c.set(
            BLOCKED,
            true,
            b.reason.as_str(),
            with_hold(&b.message, hold, &cluster),
        ),
        None => c.set(BLOCKED, false, REASON_NOT_BLOCKED, ""),
    }
    match &d.mass_failure {
        Some(m) => c.set(
            MASS_FAILURE,
            true,
            REASON_MEMBERS_DOWN,
            m.message(&input.sizing.spec),
        ),
        None => c.set(MASS_FAILURE, false, REASON_ENOUGH_MEMBERS_UP, ""),
    }
    stop_conditions(&mut c, input);
    match &d.suspected_partition {
        Some(p) => c.set(
            SUSPECTED_PARTITION,
            true,
            REASON_VIEWS_DISAGREE,
            p.message.clone(),
        ),
        None => c.set(SUSPECTED_PARTITION, false, REASON_VIEWS_AGREE, ""),
    }
    let look_alikes = &input.children.look_alikes;
    if look_alikes.is_empty() {
        c.set(LOOK_ALIKES, false, REASON_NO_LOOK_ALIKES, "");
    } else {
        let names: Vec<String> = look_alikes
            .iter()
            .map(|l| format!("{:?} {}", l.kind, l.name))
            .collect();
        let msg = format!(
            "not this cluster's, holding members' names (status.lookAlikes; delete them): {}",
            names.join(", ")
        );
        c.set(LOOK_ALIKES, true, REASON_LOOK_ALIKES_FOUND, msg);
    }
    if unknown_choices.is_empty() {
        c.set(REMOVAL_CHOICES, true, REASON_VALID, "");
    } else {
        let msg = format!(
            "not current members (ignored): {}",
            unknown_choices.join(", ")
        );
        c.set(REMOVAL_CHOICES, false, REASON_UNKNOWN_MEMBER, msg);
    }
    c.list
}

/// Hibernated and Fenced of the cluster.
fn stop_conditions(c: &mut Conditions, input: &StatusInput) {
    let d = input.decision;
    if d.phase == ClusterPhase::Hibernated {
        let msg = format!(
            "spec.hibernation: every member's pod is stopped; {} volumes and the membership are kept",
            d.memory.members.len()
        );
        c.set(HIBERNATED, true, REASON_HIBERNATED, msg);
    } else if d.memory.hibernated {
        let why = d.blocked.as_ref().map_or_else(
            || "waking: members start again on their own volumes".to_string(),
            |b| b.message.clone(),
        );
        c.set(HIBERNATED, true, REASON_WAKING, why);
    } else {
        c.set(HIBERNATED, false, REASON_AWAKE, "");
    }
    let spec = &input.sizing.spec;
    if spec.fenced.is_empty() {
        c.set(FENCED, false, REASON_NONE_FENCED, "");
    } else {
        let names: Vec<String> = spec.fenced.iter().map(|o| spec.member_name(*o)).collect();
        let msg = format!(
            "spec.fencedMembers: {} stopped, volumes and membership kept; no drain, removal, restart or volume replacement runs until they are unfenced",
            names.join(", ")
        );
        c.set(FENCED, true, REASON_MEMBERS_FENCED, msg);
    }
}

/// The load figures, the autoscaler's state, and what the Ready and Autoscaling conditions
/// say about them.
fn load_and_autoscale(input: &StatusInput, st: &mut MarekvsClusterStatus, t: &Time) {
    let StatusInput {
        cr,
        decision: d,
        sizing,
        ..
    } = *input;
    let name = cr.name_any();
    let mut c = Conditions::new(
        std::mem::take(&mut st.conditions),
        t,
        cr.metadata.generation,
    );
    st.ops_per_second = sizing.load.ops_per_sec.map(|o| o.round() as i64);
    st.load_sample = sizing.load.sample.as_ref().map(|s| LoadSampleStatus {
        sampled_at: to_time(s.at),
        command_totals: s
            .totals
            .iter()
            .map(|(o, c)| (format!("{name}-{o}"), *c as i64))
            .collect(),
    });
    match &sizing.scaling {
        Some(sd) => {
            let have = d.memory.members.len();
            // A removal it asked for, held by the gate: the hold says why.
            let held = d.hold.as_ref().filter(|_| (sd.desired as usize) < have);
            let mut message = match (&d.blocked, held) {
                (_, Some(h)) => format!(
                    "autoscaler wants {}, holding at {have}: {}",
                    sd.desired,
                    with_hold(&h.message, Some(h), &name)
                ),
                (Some(b), None) if sd.desired as usize != have => format!(
                    "autoscaler wants {}, holding at {have}: {}",
                    sd.desired, b.message
                ),
                (None, None) if sd.desired as usize != have => format!(
                    "autoscaler wants {}, cluster has {have}: {}",
                    sd.desired, sd.reason
                ),
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
                message: Some(cut_text(&message, HOLD_MESSAGE_MAX_BYTES)),
                held_by: held.map(|h| h.reason.into()),
            });
            c.set(AUTOSCALING, true, REASON_AUTOSCALING_ACTIVE, message);
        }
        None => {
            st.autoscale = None;
            c.remove(AUTOSCALING);
        }
    }
    let stopped: Vec<&str> = st
        .members
        .iter()
        .filter(|m| is_true(&m.conditions, MEMBER_DISK_WRITE_STOPPED))
        .map(|m| m.name.as_str())
        .collect();
    if !stopped.is_empty() {
        let message = format!(
            "writes refused by {} at the disk high-water mark: {DISK_WRITE_STOPPED_ADVICE}",
            stopped.join(", ")
        );
        c.set(READY, false, REASON_DISK_HIGH_WATER, message);
    }
    st.conditions = c.list;
}

/// Status as JSON (as the API server stores it: times in whole seconds), without the time of
/// each member's scrape: figures read again and found the same are no reason to write.
pub fn for_comparison(status: &MarekvsClusterStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_default();
    if let Some(members) = v.get_mut("members").and_then(|m| m.as_array_mut()) {
        for m in members {
            // Figures that move every pass or round without changing what is decided: the
            // samples read back keep older values, which only makes a restart more likely to
            // be seen (`memory_from_status`).
            if let Some(metrics) = m.get_mut("metrics").and_then(|x| x.as_object_mut()) {
                metrics.remove("scrapedAt");
                metrics.remove("aeRoundsTotal");
                metrics.remove("commandsTotal");
                metrics.remove("ringOps");
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use marekvs_api::MarekvsClusterSpec;
    use marekvs_core::RollReason;
    use marekvs_core::autoscale::ScaleDecision;
    use marekvs_core::{
        BlockReason, Blocked, MemberPhase, PodAdmission, PodObs, QuietReset, RemovalStep, RollStep,
        Scrape, VictimReason,
    };
    use serde_json::{Value, json};

    use crate::spec::{autoscale_policy, cluster_spec};

    fn cr(spec: Value) -> MarekvsCluster {
        let spec: MarekvsClusterSpec = serde_json::from_value(spec).unwrap();
        let mut c = MarekvsCluster::new("demo", spec);
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c.metadata.generation = Some(4);
        c
    }

    fn no_children() -> Children {
        Children {
            pods: BTreeMap::new(),
            pvcs: BTreeMap::new(),
            look_alikes: Vec::new(),
            to_stamp: Vec::new(),
            orphans: Vec::new(),
        }
    }

    fn decision(memory: Memory, phase: ClusterPhase, blocked: Option<Blocked>) -> Decision {
        Decision {
            memory,
            actions: vec![],
            phase,
            blocked,
            progress: None,
            notes: vec![],
            requeue_ms: 1_000,
            plan: vec![],
            mass_failure: None,
            suspected_partition: None,
            hold: None,
            background_repair: None,
            kept_stale: vec![],
        }
    }

    fn status_of(
        cr: &MarekvsCluster,
        d: &Decision,
        sizing: &Sizing,
        observed: &BTreeMap<u32, MemberObs>,
        now: Millis,
    ) -> MarekvsClusterStatus {
        status_from(&StatusInput {
            cr,
            prev: &MarekvsClusterStatus::default(),
            decision: d,
            observed,
            children: &no_children(),
            unknown_choices: &[],
            sizing,
            now,
        })
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
            view: None,
            look_alike: false,
            client_input: Some(0),
            new_pod: PodAdmission::Admitted,
        }
    }

    /// A look-alike is announced once when it appears and once when it goes, naming the
    /// member and the object.
    #[test]
    fn look_alikes_are_announced_on_their_transitions_only() {
        let listed = |names: &[&str]| MarekvsClusterStatus {
            look_alikes: names
                .iter()
                .map(|n| LookAlikeStatus {
                    kind: marekvs_api::LookAlikeKind::Pod,
                    name: n.to_string(),
                    member: n.to_string(),
                    why: "has no controller".into(),
                })
                .collect(),
            ..MarekvsClusterStatus::default()
        };
        let notes = look_alike_notes(&listed(&[]), &listed(&["demo-3"]));
        assert_eq!(notes.len(), 1);
        assert_eq!(
            (notes[0].kind, notes[0].reason),
            (EventKind::Warning, EventReason::LookAlike)
        );
        assert!(
            notes[0]
                .message
                .contains("Pod demo-3 holds the name of member demo-3"),
            "{}",
            notes[0].message
        );
        assert!(look_alike_notes(&listed(&["demo-3"]), &listed(&["demo-3"])).is_empty());
        let notes = look_alike_notes(&listed(&["demo-3"]), &listed(&["demo-4"]));
        let reasons: Vec<_> = notes.iter().map(|n| (n.reason, n.kind)).collect();
        assert_eq!(
            reasons,
            [
                (EventReason::LookAlike, EventKind::Warning),
                (EventReason::LookAlikeGone, EventKind::Normal)
            ]
        );
        assert!(notes[1].message.contains("demo-3"));
    }

    #[test]
    fn a_rescrape_with_the_same_figures_is_no_reason_to_write_status() {
        // Time, rounds, commands (the operator's own reads count there) and ring occupancy
        // move with every pass or round: they alone write nothing.
        let member = |at: i64, under: i64| MemberStatus {
            name: "demo-0".into(),
            metrics: Some(MemberMetrics {
                scraped_at: to_time(at),
                view_members: 3,
                underreplicated_partitions: under,
                join_gate_pending: 0,
                bootstraps_completed_total: 1,
                ae_repair_ops_total: 0,
                commands_total: 5 + at,
                write_commands_total: 0,
                ae_rounds_total: Some(at / 6_000),
                ring_ops: Some(at),
                repl_ops_sent_total: Some(0),
                repl_inflight_bytes: Some(0),
            }),
            ..MemberStatus::default()
        };
        let status = |m: MemberStatus| MarekvsClusterStatus {
            members: vec![m],
            ..MarekvsClusterStatus::default()
        };
        let first = for_comparison(&status(member(1_000, 0)));
        assert_eq!(first, for_comparison(&status(member(11_000, 0))));
        assert_ne!(first, for_comparison(&status(member(11_000, 4))));
    }

    /// Everything the stepper remembers survives a trip through status: a restarted operator
    /// continues the same removal or rolling update from the same step and settle clock.
    #[test]
    fn memory_survives_a_round_trip_through_status() {
        let c = cr(json!({"image": "x", "nodes": 3}));
        let now: Millis = 1_700_000_000_000;
        let base = Memory {
            members: [0, 1, 2, 3].into(),
            samples: (0..4)
                .map(|o| {
                    let sample = Sample {
                        bootstraps_total: u64::from(o) * 10,
                        repairs_total: u64::from(o),
                        changed_at: now - 1_000 * i64::from(o),
                        bootstraps_changed_at: now - 2_000 * i64::from(o),
                        repairs_changed_at: now - 1_000 * i64::from(o),
                        repairs_prev: (o > 1).then(|| (1, now - 9_000)),
                        ring_ops: Some(0),
                        // The scrape's own figures (below): status keeps them in `metrics`.
                        sampled_at: now,
                        ae_rounds: Some(40 + u64::from(o)),
                        view_digest: (o != 1).then_some(0x0123_4567_89ab_cdef + u64::from(o)),
                        writes_total: 100 * u64::from(o),
                        writes_prev: (o > 2).then(|| (250, now - 3_000)),
                        quiet_since: now - 30_000 * i64::from(o),
                        quiet_reset: [
                            QuietReset::FirstSeen,
                            QuietReset::ClientInput,
                            QuietReset::Shipping,
                            QuietReset::ViewChanged,
                        ][o as usize],
                        rounds_at_quiet: (o != 2).then_some(30 + u64::from(o)),
                        // The scrape's figure (kept in `metrics`), and when it last moved.
                        sent_total: (o != 3).then_some(500 + u64::from(o)),
                        sent_changed_at: now - 5_000 * i64::from(o),
                    };
                    (o, sample)
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
            views_split_since: Some(now - 12_000),
            hibernated: true,
            ..Memory::default()
        };
        let removing = Memory {
            disruption: Some(Disruption::Removal(Removal {
                ordinal: 3,
                reason: VictimReason::UserChosen,
                step: RemovalStep::Settling,
                started_at: now - 9_000,
                step_started_at: now - 2_000,
                connections_cut_at: None,
            })),
            ..base.clone()
        };
        let replacing = Memory {
            disruption: Some(Disruption::Roll(Roll {
                ordinal: 2,
                reason: RollReason::VolumeRequested {
                    pvc: "pvc-uid-2".into(),
                },
                step: RollStep::HandingOff,
                handed_off_pvc: None,
                started_at: now - 20_000,
                step_started_at: now - 3_000,
            })),
            ..base.clone()
        };
        let rolling = Memory {
            disruption: Some(Disruption::Roll(Roll {
                ordinal: 1,
                reason: RollReason::SpecChanged,
                step: RollStep::Rejoining,
                handed_off_pvc: Some("pvc-uid-1".into()),
                started_at: now - 30_000,
                step_started_at: now - 4_000,
            })),
            ..base.clone()
        };
        let observed: BTreeMap<u32, MemberObs> = (0..4)
            .map(|o| {
                let mut m = scraped(4, u64::from(o) * 10);
                let s = m.scrape.as_mut().unwrap();
                s.repairs_total = u64::from(o);
                s.ae_rounds = Some(40 + u64::from(o));
                s.repl_sent = (o != 3).then_some(500 + u64::from(o));
                s.write_commands = 100 * u64::from(o);
                (o, m)
            })
            .collect();
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        for memory in [base.clone(), removing, rolling, replacing] {
            let blocked = Blocked {
                reason: BlockReason::Paused,
                message: "held".into(),
            };
            let d = decision(memory.clone(), ClusterPhase::Paused, Some(blocked));
            let st = status_of(&c, &d, &sizing, &observed, now);
            assert_eq!(st.instance_names, ["demo-0", "demo-1", "demo-2", "demo-3"]);
            assert_eq!(memory_from_status("demo", &st), memory);
        }
    }

    /// The core's plan is written as `status.plan`: members by name, in order, each with its
    /// reason and a typed hold (the gate's own reason and message); it survives the JSON the
    /// API server stores, and an empty plan is left out.
    #[test]
    fn the_plan_is_written_in_order_with_typed_holds() {
        use marekvs_api::{BlockReason as ApiBlock, VictimReason as ApiVictim};
        let c = cr(json!({"image": "x", "nodes": 3}));
        let now: Millis = 1_700_000_000_000;
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let gate = Blocked {
            reason: BlockReason::RepairInProgress,
            message: "re-replication not settled".into(),
        };
        let step = |ordinal, reason, held_by| PlannedRemoval {
            ordinal,
            reason,
            held_by,
        };
        let mut d = decision(Memory::default(), ClusterPhase::Blocked, Some(gate.clone()));
        d.plan = vec![
            step(5, VictimReason::UserChosen, Some(Hold::Gate(gate))),
            step(
                2,
                VictimReason::NotReady,
                Some(Hold::InProgress {
                    message: "the removal of demo-5 comes first".into(),
                }),
            ),
            step(4, VictimReason::HighestOrdinal, Some(Hold::Paused)),
            step(
                3,
                VictimReason::HighestOrdinal,
                Some(Hold::Floor { floor: 3 }),
            ),
            step(1, VictimReason::HighestOrdinal, None),
        ];
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        type Row<'a> = (
            &'a str,
            i32,
            ApiVictim,
            Option<(PlanHoldKind, Option<ApiBlock>)>,
        );
        let got: Vec<Row> = st
            .plan
            .iter()
            .map(|p| {
                (
                    p.member.as_str(),
                    p.ordinal,
                    p.reason,
                    p.held_by.as_ref().map(|h| (h.kind, h.reason)),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "demo-5",
                    5,
                    ApiVictim::UserChosen,
                    Some((PlanHoldKind::Gate, Some(ApiBlock::RepairInProgress)))
                ),
                (
                    "demo-2",
                    2,
                    ApiVictim::NotReady,
                    Some((PlanHoldKind::InProgress, None))
                ),
                (
                    "demo-4",
                    4,
                    ApiVictim::HighestOrdinal,
                    Some((PlanHoldKind::Paused, None))
                ),
                (
                    "demo-3",
                    3,
                    ApiVictim::HighestOrdinal,
                    Some((PlanHoldKind::Floor, None))
                ),
                ("demo-1", 1, ApiVictim::HighestOrdinal, None),
            ]
        );
        assert_eq!(
            st.plan[0].held_by.as_ref().unwrap().message,
            "re-replication not settled"
        );
        assert_eq!(
            st.plan[1].held_by.as_ref().unwrap().message,
            "the removal of demo-5 comes first"
        );
        let stored = serde_json::to_value(&st).unwrap();
        assert_eq!(stored["plan"][0]["heldBy"]["kind"], "Gate");
        assert_eq!(stored["plan"][0]["heldBy"]["reason"], "RepairInProgress");
        assert_eq!(stored["plan"][4].get("heldBy"), None);
        let back: MarekvsClusterStatus = serde_json::from_value(stored).unwrap();
        assert_eq!(back.plan, st.plan);
        // At the target: no plan, and no field.
        d.plan.clear();
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(serde_json::to_value(&st).unwrap().get("plan").is_none());
    }

    /// The operator never records a removal and a rollout at once; a status edited to hold
    /// both is read as the removal alone.
    #[test]
    fn a_status_with_both_a_removal_and_a_rollout_is_read_as_the_removal() {
        let c = cr(json!({"image": "x", "nodes": 3}));
        let now: Millis = 1_700_000_000_000;
        let removal = Removal {
            ordinal: 3,
            reason: VictimReason::HighestOrdinal,
            step: RemovalStep::HandingOff,
            started_at: now - 9_000,
            step_started_at: now - 2_000,
            connections_cut_at: None,
        };
        let roll = Roll {
            ordinal: 1,
            reason: RollReason::SpecChanged,
            step: RollStep::Draining,
            handed_off_pvc: None,
            started_at: now - 30_000,
            step_started_at: now - 4_000,
        };
        let base = Memory {
            members: [0, 1, 2, 3].into(),
            ..Memory::default()
        };
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let status = |memory: Memory| {
            let d = decision(memory, ClusterPhase::ScalingDown, None);
            status_of(&c, &d, &sizing, &BTreeMap::new(), now)
        };
        let mut st = status(Memory {
            disruption: Some(Disruption::Removal(removal.clone())),
            ..base.clone()
        });
        st.rollout = status(Memory {
            disruption: Some(Disruption::Roll(roll.clone())),
            ..base.clone()
        })
        .rollout;
        assert!(st.removal.is_some() && st.rollout.is_some());
        let memory = memory_from_status("demo", &st);
        assert_eq!(memory.removal(), Some(&removal));
        assert_eq!(memory.roll(), None);
    }

    /// A fresh volume asked for is recorded with its reason and the volume to leave, and read
    /// back from a status stored as JSON; a rollout recorded before rollouts had a reason is a
    /// rolling update; one asking for a fresh volume without naming the volume is dropped.
    #[test]
    fn a_fresh_volume_asked_for_is_read_back_from_the_stored_rollout() {
        let stored = |rollout: serde_json::Value| -> MarekvsClusterStatus {
            serde_json::from_value(json!({
                "instanceNames": ["demo-0", "demo-1", "demo-2"],
                "rollout": rollout,
            }))
            .unwrap()
        };
        let mut rollout = json!({"member": "demo-2", "ordinal": 2, "step": "Deleting",
            "handedOffPvc": "uid-2", "startedAt": "2026-11-23T10:00:00Z",
            "stepStartedAt": "2026-11-23T10:00:05Z"});
        let reason = |st: &MarekvsClusterStatus| {
            memory_from_status("demo", st)
                .roll()
                .map(|r| r.reason.clone())
        };
        assert_eq!(
            reason(&stored(rollout.clone())),
            Some(RollReason::SpecChanged)
        );
        rollout["reason"] = json!("VolumeRequested");
        assert_eq!(reason(&stored(rollout.clone())), None);
        rollout["replacedPvc"] = json!("uid-2");
        let st = stored(rollout);
        assert_eq!(
            reason(&st),
            Some(RollReason::VolumeRequested {
                pvc: "uid-2".into()
            })
        );
        assert_eq!(
            serde_json::to_value(&st).unwrap()["rollout"]["reason"],
            json!("VolumeRequested")
        );
        // A restart asked for on a pod: no volume to remember.
        let mut restart = serde_json::to_value(&st).unwrap()["rollout"].clone();
        restart["reason"] = json!("RestartRequested");
        restart.as_object_mut().unwrap().remove("replacedPvc");
        assert_eq!(reason(&stored(restart)), Some(RollReason::RestartRequested));
        let unknown = json!({"instanceNames": [], "rollout": {"member": "demo-2", "ordinal": 2,
            "step": "Deleting", "reason": "Whim", "startedAt": "2026-11-23T10:00:00Z",
            "stepStartedAt": "2026-11-23T10:00:05Z"}});
        assert!(serde_json::from_value::<MarekvsClusterStatus>(unknown).is_err());
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
        let scaling = ScaleDecision {
            desired: 5,
            memory: ScaleMemory {
                desired: Some(5),
                last_scale_up_at: Some(now - 60_000),
                last_scale_down_at: None,
                low_since: Some(now - 5_000),
            },
            reason: "scaling up to 5: 420 ops/s over 100 per member".into(),
        };
        assert!(c.spec.autoscale.as_ref().map(autoscale_policy).is_some());
        let mut spec = cluster_spec(&c).unwrap();
        spec.nodes = 5;
        let sizing = Sizing {
            spec,
            load: load.clone(),
            scaling: Some(scaling.clone()),
        };
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let d = decision(memory, ClusterPhase::ScalingUp, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert_eq!(load_from_status("demo", &st), load);
        assert_eq!(scale_from_status(&st), scaling.memory);
        assert_eq!(autoscale_last_asked(&st), Some(5));
        assert_eq!(st.ops_per_second, Some(420));
        assert_eq!(st.desired_nodes, Some(5));
        let condition = st
            .conditions
            .iter()
            .find(|c| c.type_ == AUTOSCALING)
            .unwrap();
        let msg = &condition.message;
        assert!(
            msg.starts_with("autoscaler wants 5, cluster has 3"),
            "{msg}"
        );
        assert!(
            msg.contains("spec.nodes (3) is only the initial size"),
            "{msg}"
        );
    }

    /// A removal the autoscaler asked for, held by the gate: `handoffHold`, the autoscaler's
    /// `heldBy` and message, and the Progressing condition say what keeps moving, where, how
    /// fast and since when; once stuck, the Blocked condition says it too. Repairs that hold
    /// nothing are `backgroundRepair`. Without a hold, `heldBy` is absent.
    #[test]
    fn a_held_scale_down_says_what_moves_where_how_fast_and_since_when() {
        let c = cr(
            json!({"image": "x", "nodes": 4, "autoscale": {"minNodes": 3, "maxNodes": 6, "targetOpsPerNode": 100}}),
        );
        let now: Millis = 1_764_090_000_000;
        let mut spec = cluster_spec(&c).unwrap();
        spec.nodes = 3;
        let sizing = Sizing {
            spec,
            load: LoadMemory::default(),
            scaling: Some(ScaleDecision {
                desired: 3,
                memory: ScaleMemory::default(),
                reason: "scaling down to 3: 100 ops/s".into(),
            }),
        };
        let memory = Memory {
            members: [0, 1, 2, 3].into(),
            ..Memory::default()
        };
        let hold = HoldReport {
            reason: BlockReason::LeaverBacklog,
            message: "demo-3 still receives client commands past its Service".into(),
            moving: Moving::ClientTraffic,
            members: vec![3],
            rate_per_sec: Some(1200.0),
            since: now - 95_000,
            stuck: false,
        };
        let mut d = decision(memory.clone(), ClusterPhase::ScalingDown, None);
        d.progress = Some("removing demo-3: handing off".into());
        d.hold = Some(hold.clone());
        d.background_repair = Some(marekvs_core::BackgroundRepair {
            members: vec![0, 2],
            rate_per_sec: 12.5,
            since: now - 30_000,
        });
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let summary =
            "ClientTraffic moving on demo-3 at 1200.0 writes/s since 2025-11-25T16:58:25Z";
        assert_eq!(hold_summary(&hold, "demo"), summary);
        let h = st.handoff_hold.as_ref().unwrap();
        assert_eq!(h.reason, marekvs_api::BlockReason::LeaverBacklog);
        assert_eq!(h.moving, marekvs_api::Moving::ClientTraffic);
        assert_eq!(h.members, ["demo-3"]);
        assert_eq!(h.rate_per_second, Some(1200.0));
        assert!(!h.stuck);
        let b = st.background_repair.as_ref().unwrap();
        assert_eq!(
            (b.members.as_slice(), b.rate_per_second),
            (&["demo-0".to_string(), "demo-2".to_string()][..], 12.5)
        );
        let auto = st.autoscale.as_ref().unwrap();
        assert_eq!(auto.held_by, Some(marekvs_api::BlockReason::LeaverBacklog));
        let message = auto.message.as_deref().unwrap();
        assert!(
            message.starts_with(
                "autoscaler wants 3, holding at 4: demo-3 still receives client commands"
            ),
            "{message}"
        );
        assert!(message.contains(summary), "{message}");
        let condition = |st: &MarekvsClusterStatus, t: &str| {
            st.conditions.iter().find(|c| c.type_ == t).unwrap().clone()
        };
        assert_eq!(
            condition(&st, PROGRESSING).message,
            format!("removing demo-3: handing off; held: {summary}")
        );
        assert_eq!(condition(&st, BLOCKED).status, "False");

        // Stuck: Blocked (HandoffTimeout, from the core) carries the hold too.
        let stuck = HoldReport {
            moving: Moving::Repairs,
            members: vec![0, 1],
            rate_per_sec: Some(7.5),
            stuck: true,
            ..hold
        };
        let mut d = decision(
            memory.clone(),
            ClusterPhase::Blocked,
            Some(Blocked {
                reason: BlockReason::HandoffTimeout,
                message: "hand-off of demo-3 past 600s".into(),
            }),
        );
        d.hold = Some(stuck);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let blocked = condition(&st, BLOCKED);
        assert_eq!(blocked.reason, "HandoffTimeout");
        assert_eq!(
            blocked.message,
            "hand-off of demo-3 past 600s; held: Repairs moving on demo-0, demo-1 at 7.5/s since 2025-11-25T16:58:25Z (stuck: past spec.scaleDown.handoffTimeoutSeconds)"
        );
        assert!(st.handoff_hold.unwrap().stuck);

        // No hold: nothing held by, and the conditions say nothing of one.
        let d = decision(memory, ClusterPhase::ScalingDown, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert_eq!(st.autoscale.as_ref().unwrap().held_by, None);
        assert!(st.handoff_hold.is_none() && st.background_repair.is_none());
        assert!(!condition(&st, PROGRESSING).message.contains("held"));
    }

    /// A suspected partition is a condition naming who sees whom, read back so its Events
    /// fire only on transitions; the start of the disagreement is in status.
    #[test]
    fn hibernation_and_fences_are_conditions_and_the_hibernation_is_read_back() {
        let c = cr(json!({
            "image": "x", "nodes": 3, "replicationFactor": 2,
            "hibernation": true, "fencedMembers": ["demo-1", "other-2"],
        }));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        assert_eq!(
            sizing.spec.fenced,
            [1].into(),
            "only this cluster's members"
        );
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            phases: [
                (0, MemberPhase::Hibernated),
                (1, MemberPhase::Fenced),
                (2, MemberPhase::Hibernated),
            ]
            .into(),
            hibernated: true,
            ..Memory::default()
        };
        let cond = |st: &MarekvsClusterStatus, t: &str| {
            let c = st.conditions.iter().find(|c| c.type_ == t).unwrap();
            (c.status.clone(), c.reason.clone(), c.message.clone())
        };
        let d = decision(memory.clone(), ClusterPhase::Hibernated, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(st.hibernated);
        assert_eq!(st.phase, Some(marekvs_api::ClusterPhase::Hibernated));
        assert_eq!(st.members[1].phase, marekvs_api::MemberPhase::Fenced);
        let (status, reason, _) = cond(&st, HIBERNATED);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", REASON_HIBERNATED)
        );
        let (status, reason, message) = cond(&st, FENCED);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", REASON_MEMBERS_FENCED)
        );
        assert!(message.contains("demo-1 stopped"), "{message}");
        assert_eq!(memory_from_status("demo", &st), memory);
        // A refused wake: still hibernated, the condition says why.
        let refused = Blocked {
            reason: BlockReason::WakeRefused,
            message: "not waking: ...".into(),
        };
        let d = decision(memory, ClusterPhase::Blocked, Some(refused));
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert_eq!(st.block_reason, Some(marekvs_api::BlockReason::WakeRefused));
        let (status, reason, message) = cond(&st, HIBERNATED);
        assert_eq!(
            (status.as_str(), reason.as_str(), message.as_str()),
            ("True", REASON_WAKING, "not waking: ...")
        );
        // Awake, nothing fenced.
        let awake = cr(json!({"image": "x", "nodes": 3, "replicationFactor": 2}));
        let sizing = Sizing {
            spec: cluster_spec(&awake).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let d = decision(Memory::default(), ClusterPhase::Healthy, None);
        let st = status_of(&awake, &d, &sizing, &BTreeMap::new(), now);
        assert!(!st.hibernated);
        assert_eq!(cond(&st, HIBERNATED).1, REASON_AWAKE);
        assert_eq!(cond(&st, FENCED).1, REASON_NONE_FENCED);
    }

    #[test]
    fn a_suspected_partition_is_a_condition_read_back_for_its_events() {
        let c = cr(json!({"image": "x", "nodes": 3, "replicationFactor": 2}));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            views_split_since: Some(now - 40_000),
            ..Memory::default()
        };
        let mut d = decision(memory, ClusterPhase::Healthy, None);
        d.suspected_partition = Some(marekvs_core::views::SuspectedPartition {
            since: now - 40_000,
            message: "demo-0 sees demo-0, demo-1; demo-2 sees demo-2".into(),
        });
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let sp = st
            .conditions
            .iter()
            .find(|c| c.type_ == SUSPECTED_PARTITION)
            .unwrap();
        assert_eq!(
            (sp.status.as_str(), sp.reason.as_str(), sp.message.as_str()),
            (
                "True",
                REASON_VIEWS_DISAGREE,
                "demo-0 sees demo-0, demo-1; demo-2 sees demo-2"
            )
        );
        assert_eq!(st.views_disagree_since, Some(to_time(now - 40_000)));
        assert!(reported(&st).suspected_partition);
        d.suspected_partition = None;
        d.memory.views_split_since = None;
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(!reported(&st).suspected_partition);
        assert_eq!(st.views_disagree_since, None);
    }

    /// The mass failure is a condition, read back so its Events fire only on transitions.
    #[test]
    fn a_mass_failure_is_a_condition_read_back_for_its_events() {
        let c = cr(json!({"image": "x", "nodes": 3, "replicationFactor": 2}));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let mut d = decision(memory.clone(), ClusterPhase::Replacing, None);
        d.mass_failure = Some(marekvs_core::MassFailure {
            down: vec![1, 2],
            members: 3,
            replication_factor: 2,
        });
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let mf = st
            .conditions
            .iter()
            .find(|c| c.type_ == MASS_FAILURE)
            .unwrap();
        assert_eq!(
            (mf.status.as_str(), mf.reason.as_str()),
            ("True", REASON_MEMBERS_DOWN)
        );
        assert!(
            mf.message
                .starts_with("2 of 3 members down (demo-1, demo-2) with replicationFactor 2"),
            "{}",
            mf.message
        );
        assert!(reported(&st).mass_failure);
        let d = decision(memory, ClusterPhase::Healthy, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(!reported(&st).mass_failure);
        let mf = st
            .conditions
            .iter()
            .find(|c| c.type_ == MASS_FAILURE)
            .unwrap();
        assert_eq!(mf.status, "False");
    }

    /// Kept volumes of non-members, with when they left and whether they are reusable; a
    /// later pass over the same world yields the same list (no age that would need a write).
    #[test]
    fn kept_volumes_list_non_members_with_their_absence_and_reusability() {
        let c = cr(json!({"image": "x", "nodes": 3,
            "storage": {"size": "1Gi", "staleVolumeGraceSeconds": 60}}));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let kept = |since: Option<Millis>| MemberObs {
            pod: None,
            pvc: Some(marekvs_core::PvcObs {
                uid: "v".into(),
                absent_since: since,
                ..Default::default()
            }),
            ..MemberObs::default()
        };
        let mut observed: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, scraped(3, 0))).collect();
        observed.insert(3, kept(Some(now - 30_000)));
        observed.insert(4, kept(Some(now - 61_000)));
        observed.insert(5, kept(None));
        let d = decision(memory, ClusterPhase::Healthy, None);
        let st = status_of(&c, &d, &sizing, &observed, now);
        type Row<'a> = (&'a str, &'a str, Option<Millis>, Option<Millis>, bool);
        let summary: Vec<Row> = st
            .kept_volumes
            .iter()
            .map(|k| {
                (
                    k.name.as_str(),
                    k.member.as_str(),
                    k.absent_since.as_ref().map(from_time),
                    k.stale_at.as_ref().map(from_time),
                    k.reusable,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "data-demo-3",
                    "demo-3",
                    Some(now - 30_000),
                    Some(now + 30_000),
                    true
                ),
                (
                    "data-demo-4",
                    "demo-4",
                    Some(now - 61_000),
                    Some(now - 1_000),
                    false
                ),
                ("data-demo-5", "demo-5", None, None, true),
            ]
        );
        let later = status_of(&c, &d, &sizing, &observed, now + 10_000);
        assert_eq!(later.kept_volumes, st.kept_volumes);
    }
}
