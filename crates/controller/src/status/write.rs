//! Write: the status a decision is reported as, member by member, with the plan, the kept
//! volumes, the look-alikes and the load; and the form two statuses are compared in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use marekvs_api::conditions::*;
use marekvs_api::convert::{drained_node, replaced_pvc};
use marekvs_api::{
    AutoscaleStatus, BackgroundRepairStatus, CounterSample, HandoffHoldStatus, KeptVolume,
    LoadSampleStatus, MarekvsClusterStatus, MemberMetrics, MemberStatus, PlanHold, PlanHoldKind,
    PlanStep, RemovalStatus, RolloutStatus, WindowLoss,
};
use marekvs_core::pass::{AutoscaleReport, AutoscaleSays};
use marekvs_core::{Hold, HoldReport, Millis, PlannedRemoval};

use crate::build;
use crate::observe::{capacity, volume};

use super::StatusInput;
use super::conditions::*;

pub fn to_time(ms: Millis) -> Time {
    Time(Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH))
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
        last_pass_time: Some(t.clone()),
        operator_version: Some(crate::VERSION.to_string()),
        desired_nodes: Some(input.sizing.spec.target() as i32),
        password: input.password.clone(),
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
            node: drained_node(&r.reason),
            handed_off_pvc: r.handed_off_pvc.clone(),
            started_at: to_time(r.started_at),
            step_started_at: to_time(r.step_started_at),
            connections_cut_at: r.connections_cut_at.map(to_time),
        }),
        upgrade: d.memory.upgrade().map(|u| marekvs_api::UpgradeStatus {
            step: u.step.into(),
            started_at: to_time(u.started_at),
            step_started_at: to_time(u.step_started_at),
            stopped_at: u.stopped_at.map(to_time),
        }),
        plan: d.plan.iter().map(|p| plan_step(&name, p)).collect(),
        views_disagree_since: d.memory.views_split_since.map(to_time),
        kept_volumes: kept_volumes(input),
        look_alikes: input
            .children
            .look_alikes_seen(&name)
            .iter()
            .map(Into::into)
            .collect(),
        hibernated: d.memory.hibernated,
        gossip_cluster: input.prev.gossip_cluster.clone(),
    };
    load_and_autoscale(input, &mut st, &t);
    st
}

/// The volumes of non-members (`status.keptVolumes`): constant while nothing changes (the
/// times are recorded ones, no age that would change every pass), so a cluster at rest writes
/// no status for them.
pub(super) fn kept_volumes(input: &StatusInput) -> Vec<KeptVolume> {
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

/// One step of the core's plan as `status.plan` shows it.
pub(super) fn plan_step(name: &str, p: &PlannedRemoval) -> PlanStep {
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

pub(super) fn member_status(input: &StatusInput, o: u32, t: &Time) -> MemberStatus {
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
            ring_bytes: s.ring_bytes.map(|r| r as i64),
            repl_ops_applied_total: s.repl_applied.map(|r| r as i64),
        }),
        None => prev_m.and_then(|pm| pm.metrics.clone()),
    };
    let version = match (&m.scrape, pod) {
        (Some(s), _) => s.version.clone(),
        (None, Some(_)) => prev_m.and_then(|pm| pm.version.clone()),
        (None, None) => None,
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
        password_hash: crate::password::member_hash(input.password.as_ref(), m.password),
        version,
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
        window_lost: sample.and_then(|s| s.window_lost).map(|w| WindowLoss {
            cause: w.cause.into(),
            at: to_time(w.at),
        }),
        conditions: conditions.list,
    }
}

/// The load figures, the autoscaler's state, and what the Ready and Autoscaling conditions
/// say about them.
pub(super) fn load_and_autoscale(input: &StatusInput, st: &mut MarekvsClusterStatus, t: &Time) {
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
    match input.autoscale {
        Some(a) => {
            let sd = sizing.scaling.as_ref();
            let mut message = autoscale_message(a, d.hold.as_ref(), &name);
            if let Some(nodes) = a.spec_nodes_ignored {
                message.push_str(&format!(
                    "; spec.nodes ({nodes}) is only the initial size while spec.autoscale is set"
                ));
            }
            st.autoscale = Some(AutoscaleStatus {
                desired_nodes: Some(a.desired as i32),
                last_scale_up_time: sd.and_then(|s| s.memory.last_scale_up_at).map(to_time),
                last_scale_down_time: sd.and_then(|s| s.memory.last_scale_down_at).map(to_time),
                low_load_since: sd.and_then(|s| s.memory.low_since).map(to_time),
                message: Some(cut_text(&message, HOLD_MESSAGE_MAX_BYTES)),
                held_by: a.held_by().map(Into::into),
            });
            c.set(AUTOSCALING, true, REASON_AUTOSCALING_ACTIVE, message);
        }
        None => {
            st.autoscale = None;
            c.remove(AUTOSCALING);
        }
    }
    if !input.write_stopped.is_empty() {
        let stopped: Vec<String> = input
            .write_stopped
            .iter()
            .map(|o| format!("{name}-{o}"))
            .collect();
        let message = format!(
            "writes refused by {} at the disk high-water mark: {DISK_WRITE_STOPPED_ADVICE}",
            stopped.join(", ")
        );
        c.set(READY, false, REASON_DISK_HIGH_WATER, message);
    }
    st.conditions = c.list;
}

/// What the autoscaler's status says, in words.
fn autoscale_message(a: &AutoscaleReport, hold: Option<&HoldReport>, cluster: &str) -> String {
    let (desired, have) = (a.desired, a.have);
    match &a.says {
        AutoscaleSays::HeldByGate(_) => {
            let why = hold.map_or("", |h| h.message.as_str());
            format!(
                "autoscaler wants {desired}, holding at {have}: {}",
                with_hold(why, hold, cluster)
            )
        }
        AutoscaleSays::Blocked(why) => {
            format!("autoscaler wants {desired}, holding at {have}: {why}")
        }
        AutoscaleSays::Moving(why) => {
            format!("autoscaler wants {desired}, cluster has {have}: {why}")
        }
        AutoscaleSays::AtWish(why) => format!("autoscaler: {why}"),
    }
}

/// Status as JSON (as the API server stores it: times in whole seconds), without the time of
/// each member's scrape: figures read again and found the same are no reason to write.
pub fn for_comparison(status: &MarekvsClusterStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_default();
    // Moves every pass; written with a change or as the heartbeat (`pace::heartbeat_due`).
    if let Some(top) = v.as_object_mut() {
        top.remove("lastPassTime");
    }
    if let Some(members) = v.get_mut("members").and_then(|m| m.as_array_mut()) {
        for m in members {
            // Figures that move every pass or round without changing what is decided: the
            // samples read back keep older values, which only makes a restart more likely to
            // be seen (`memory_from_status`).
            if let Some(metrics) = m.get_mut("metrics").and_then(|x| x.as_object_mut()) {
                metrics.remove("scrapedAt");
                metrics.remove("aeRoundsTotal");
                metrics.remove("commandsTotal");
                // Whether the ring is near a cap decides (gate v4, at a restart): a crossing
                // is a change, the occupancy alone is not.
                let figure = |key: &str| metrics.get(key).and_then(|v| v.as_u64());
                let near_cap =
                    marekvs_core::handoff::near_cap(figure("ringOps"), figure("ringBytes"));
                metrics.remove("ringOps");
                metrics.remove("ringBytes");
                metrics.remove("replOpsAppliedTotal");
                metrics.insert("ringNearCap".into(), near_cap.into());
            }
        }
    }
    v
}
