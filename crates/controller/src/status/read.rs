//! Read: what the operator remembers, read back from the object's status (typed, no string
//! parsing): the decision's memory, the load and autoscaler memory, and what was reported.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use marekvs_api::MarekvsClusterStatus;
use marekvs_api::conditions::*;
use marekvs_api::convert::roll_reason;
use marekvs_core::autoscale::{LoadMemory, LoadSample, ScaleMemory};
use marekvs_core::transitions::Reported;
use marekvs_core::{Disruption, Memory, Millis, Removal, Roll, Sample};

use crate::build;

use super::conditions::*;

pub fn from_time(t: &Time) -> Millis {
    t.0.as_millisecond()
}

/// What the operator remembers, read back from status: a removal and a rollout both recorded
/// are read as [`Disruption::recorded`] says, and a rollout for a fresh volume that does not
/// say which volume to leave is dropped ([`roll_reason`]).
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
        let reason = roll_reason(r.reason, r.replaced_pvc.as_deref(), r.node.as_deref())?;
        Some(Roll {
            ordinal: u32::try_from(r.ordinal).ok()?,
            reason,
            step: r.step.into(),
            handed_off_pvc: r.handed_off_pvc.clone(),
            started_at: from_time(&r.started_at),
            step_started_at: from_time(&r.step_started_at),
            connections_cut_at: r.connections_cut_at.as_ref().map(from_time),
        })
    });
    let upgrade = status.upgrade.as_ref().map(|u| marekvs_core::Upgrade {
        step: u.step.into(),
        started_at: from_time(&u.started_at),
        step_started_at: from_time(&u.step_started_at),
        stopped_at: u.stopped_at.as_ref().map(from_time),
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
                    inflight_bytes: metrics.repl_inflight_bytes.map(|r| r.max(0) as u64),
                    ring_bytes: metrics.ring_bytes.map(|r| r.max(0) as u64),
                    applied_total: metrics.repl_ops_applied_total.map(|r| r.max(0) as u64),
                    window_lost: m.window_lost.as_ref().map(|w| marekvs_core::WindowLoss {
                        at: from_time(&w.at),
                        cause: w.cause.into(),
                    }),
                },
            );
        }
        phases.insert(o, m.phase.into());
    }
    Memory {
        members,
        disruption: Disruption::recorded(removal, roll, upgrade),
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
        look_alikes: status.look_alikes.iter().map(Into::into).collect(),
    }
}
