//! Conditions: the cluster's and each member's `metav1.Condition`s, set through one small
//! builder at one instant for one generation.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use marekvs_api::conditions::*;
use marekvs_core::volumes::expanding;
use marekvs_core::{ClusterPhase, Decision, HoldReport, MemberObs, Moving};

use crate::observe::{capacity, volume};

use super::StatusInput;

/// One list of conditions, all set at one instant for one generation.
pub(super) struct Conditions<'a> {
    pub(super) list: Vec<Condition>,
    at: &'a Time,
    generation: Option<i64>,
}

impl<'a> Conditions<'a> {
    pub(super) fn new(list: Vec<Condition>, at: &'a Time, generation: Option<i64>) -> Self {
        Conditions {
            list,
            at,
            generation,
        }
    }

    pub(super) fn set(
        &mut self,
        type_: &str,
        status: bool,
        reason: &str,
        message: impl AsRef<str>,
    ) {
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

    /// A condition whose status is not known.
    pub(super) fn set_unknown(&mut self, type_: &str, reason: &str, message: impl AsRef<str>) {
        set_condition_status(
            &mut self.list,
            type_,
            "Unknown",
            reason,
            message.as_ref(),
            self.at,
            self.generation,
        );
    }

    pub(super) fn remove(&mut self, type_: &str) {
        self.list.retain(|c| c.type_ != type_);
    }
}

pub(super) fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Ready, Scraped, Draining, Updated, VolumeResizing and DiskWriteStopped of one member.
pub(super) fn member_conditions(
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
            } else if r.drained_node().is_some() {
                "being moved off its node, which is being drained"
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
        if expanding(&req, &cap) {
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
pub(super) fn cluster_conditions(input: &StatusInput, t: &Time) -> Vec<Condition> {
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
    password_condition(&mut c, input);
    versions_condition(&mut c, input);
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

/// MixedVersions: which release each member runs, by this pass's scrapes.
fn versions_condition(c: &mut Conditions, input: &StatusInput) {
    use marekvs_core::versions::Mix;
    let cluster = input.cr.name_any();
    let message = input.versions.describe(|o| format!("{cluster}-{o}"));
    match input.versions.mix() {
        Mix::Mixed => c.set(MIXED_VERSIONS, true, REASON_MIXED_VERSIONS, message),
        Mix::One(_) => c.set(MIXED_VERSIONS, false, REASON_ONE_VERSION, message),
        Mix::Unknown => c.set_unknown(MIXED_VERSIONS, REASON_VERSIONS_UNKNOWN, message),
    }
}

/// PasswordCurrent, only for a cluster with a password.
fn password_condition(c: &mut Conditions, input: &StatusInput) {
    use marekvs_core::password::PasswordState;
    let Some(status) = &input.password else {
        c.remove(PASSWORD_CURRENT);
        return;
    };
    let spec = &input.sizing.spec;
    let names = |ords: &std::collections::BTreeSet<u32>| {
        ords.iter()
            .map(|o| spec.member_name(*o))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if status.secret_hash.is_none() {
        let msg = "the password's Secret or key cannot be read: no member's view can be read";
        c.set(PASSWORD_CURRENT, false, REASON_PASSWORD_UNREADABLE, msg);
        return;
    }
    match input.password_state {
        PasswordState::NoPassword => c.remove(PASSWORD_CURRENT),
        PasswordState::Current => c.set(
            PASSWORD_CURRENT,
            true,
            REASON_PASSWORD_CURRENT,
            "every running member takes the password in the Secret",
        ),
        PasswordState::Rotating {
            on_secret,
            on_recorded,
            unknown,
        } => {
            let mut msg = format!(
                "rotating to the Secret's new password: {} of {} running members take it",
                on_secret.len(),
                on_secret.len() + on_recorded.len() + unknown.len()
            );
            if !on_recorded.is_empty() {
                msg += &format!("; still on the previous one: {}", names(on_recorded));
            }
            if !unknown.is_empty() {
                msg += &format!("; not read yet: {}", names(unknown));
            }
            c.set(PASSWORD_CURRENT, false, REASON_PASSWORD_ROTATING, msg);
        }
        PasswordState::Refused { .. } => {
            let msg = input
                .password_state
                .refusal(|o| spec.member_name(o))
                .unwrap_or_default();
            c.set(PASSWORD_CURRENT, false, REASON_PASSWORD_REFUSED, msg);
        }
    }
}

/// Hibernated and Fenced of the cluster.
pub(super) fn stop_conditions(c: &mut Conditions, input: &StatusInput) {
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

pub(super) fn with_hold(message: &str, hold: Option<&HoldReport>, cluster: &str) -> String {
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
