//! Condition types and reasons, as constants (metav1.Condition shape).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Cluster: every member is Active, the count matches, nothing is under-replicated.
pub const READY: &str = "Ready";
/// Cluster: members are being created, replaced or removed.
pub const PROGRESSING: &str = "Progressing";
/// Cluster: a disruptive step (removing or restarting a member) is wanted but may not happen
/// now; the reason says why (`Paused` when `spec.paused` holds it).
pub const BLOCKED: &str = "Blocked";
/// Cluster (with spec.autoscale): what the autoscaler wants and what holds it.
pub const AUTOSCALING: &str = "Autoscaling";
/// Cluster: replicationFactor or more members are down, so copies may be missing; only pods
/// on their own volumes are re-created (no fresh volume, no removal, no rollout, no pod
/// deleted) until enough members are up again.
pub const MASS_FAILURE: &str = "MassFailure";
/// Cluster: the ready members' views (by identity) have disagreed for 30 s or more; every
/// removal, restart and volume replacement is held until they agree. The message says who
/// sees whom.
pub const SUSPECTED_PARTITION: &str = "SuspectedPartition";
/// Cluster: whether every entry of spec.removeMembers names a current member.
/// Whether every running member takes the password in the Secret (present only when the
/// cluster has a password).
pub const PASSWORD_CURRENT: &str = "PasswordCurrent";
pub const REASON_PASSWORD_CURRENT: &str = "EveryMemberOnSecret";
pub const REASON_PASSWORD_ROTATING: &str = "Rotating";
pub const REASON_PASSWORD_REFUSED: &str = "Refused";
pub const REASON_PASSWORD_UNREADABLE: &str = "SecretUnreadable";
pub const REMOVAL_CHOICES: &str = "RemovalChoices";
/// Cluster: True while members run different marekvs releases (`status.members[].version`);
/// Unknown while a member's version is not read and the rest agree.
pub const MIXED_VERSIONS: &str = "MixedVersions";
pub const REASON_MIXED_VERSIONS: &str = "MixedVersions";
pub const REASON_ONE_VERSION: &str = "OneVersion";
pub const REASON_VERSIONS_UNKNOWN: &str = "VersionsUnknown";
/// True while objects that are not the cluster's hold members' names (`status.lookAlikes`).
pub const LOOK_ALIKES: &str = "LookAlikes";
/// Cluster: True while `spec.hibernation` keeps every pod stopped (`Hibernated`), and while a
/// wake has not yet started every member again (`Waking`, or the refusal's message).
pub const HIBERNATED: &str = "Hibernated";
pub const REASON_HIBERNATED: &str = "Hibernated";
pub const REASON_WAKING: &str = "Waking";
pub const REASON_AWAKE: &str = "Awake";
/// Cluster: True while `spec.fencedMembers` lists members (their pods stopped, every
/// disruptive step held).
pub const FENCED: &str = "Fenced";
pub const REASON_MEMBERS_FENCED: &str = "MembersFenced";
pub const REASON_NONE_FENCED: &str = "NoneFenced";
pub const REASON_LOOK_ALIKES_FOUND: &str = "NotThisClusters";
pub const REASON_NO_LOOK_ALIKES: &str = "NoneFound";

/// Member: its pod is Ready.
pub const MEMBER_READY: &str = "Ready";
/// Member: its /metrics was read in the last reconcile.
pub const MEMBER_SCRAPED: &str = "Scraped";
/// Member: it is being removed or restarted (drained first).
pub const MEMBER_DRAINING: &str = "Draining";
/// Member: it reports `marekvs_disk_write_stopped 1` (writes refused at its disk high-water mark).
pub const MEMBER_DISK_WRITE_STOPPED: &str = "DiskWriteStopped";
/// What to do about a member that stopped writes, for the condition and the event.
pub use marekvs_core::transitions::DISK_WRITE_STOPPED_ADVICE;
/// Member: its PVC asks for more than its volume has yet (an expansion in progress).
pub const MEMBER_VOLUME_RESIZING: &str = "VolumeResizing";
/// Member: its pod runs the current pod spec (template hash).
pub const MEMBER_UPDATED: &str = "Updated";

pub const REASON_HEALTHY: &str = "Healthy";
pub const REASON_NOT_READY: &str = "NotReady";
pub const REASON_IDLE: &str = "Idle";
pub const REASON_SCALING_UP: &str = "ScalingUp";
pub const REASON_SCALING_DOWN: &str = "ScalingDown";
pub const REASON_REPLACING: &str = "Replacing";
pub const REASON_RECONCILING: &str = "Reconciling";
pub const REASON_NOT_BLOCKED: &str = "NotBlocked";
pub const REASON_MEMBERS_DOWN: &str = "MembersDown";
pub const REASON_ENOUGH_MEMBERS_UP: &str = "EnoughMembersUp";
pub const REASON_VALID: &str = "Valid";
pub const REASON_VIEWS_DISAGREE: &str = "ViewsDisagree";
pub const REASON_VIEWS_AGREE: &str = "ViewsAgree";
pub const REASON_UNKNOWN_MEMBER: &str = "UnknownMember";
pub const REASON_POD_READY: &str = "PodReady";
pub const REASON_POD_NOT_READY: &str = "PodNotReady";
pub const REASON_NO_POD: &str = "NoPod";
pub const REASON_SCRAPED: &str = "Scraped";
pub const REASON_SCRAPE_FAILED: &str = "ScrapeFailed";
pub const REASON_NOT_REMOVING: &str = "NotRemoving";
pub const REASON_UP_TO_DATE: &str = "UpToDate";
pub const REASON_OUTDATED: &str = "Outdated";
pub const REASON_UPDATING: &str = "Updating";
pub const REASON_PAUSED: &str = "Paused";
pub const REASON_DISK_HIGH_WATER: &str = "DiskHighWater";
pub const REASON_WRITES_ACCEPTED: &str = "WritesAccepted";
pub const REASON_AUTOSCALING_ACTIVE: &str = "Active";
pub const REASON_EXPANDING: &str = "Expanding";
pub const REASON_CAPACITY_MATCHES: &str = "CapacityMatches";
/// Ready is False: the spec cannot be acted on; the operator waits for it to change.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// Ready is False: a Service or the PDB the cluster derives its name for already exists,
/// controlled by another object; nothing is applied over it, and the operator looks again.
pub const REASON_NAME_TAKEN: &str = "NameTaken";

/// The longest condition message kept, in bytes. Messages can carry what members answered (a
/// view's strangers): each is bounded so the status stays far below etcd's object limit.
pub const CONDITION_MESSAGE_MAX_BYTES: usize = 4096;

/// `text` whole if it fits in `max` bytes, else cut on a character boundary and ended with "…".
pub fn cut_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    const MORE: &str = "…";
    let mut end = max.saturating_sub(MORE.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MORE}", &text[..end])
}

/// Set a condition in `conds`, keeping its lastTransitionTime unless its status changed.
pub fn set_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
    generation: Option<i64>,
) {
    let status_s = if status { "True" } else { "False" };
    set_condition_status(conds, type_, status_s, reason, message, now, generation);
}

/// [`set_condition`] with the status as written: `"True"`, `"False"` or `"Unknown"`.
pub fn set_condition_status(
    conds: &mut Vec<Condition>,
    type_: &str,
    status_s: &str,
    reason: &str,
    message: &str,
    now: &Time,
    generation: Option<i64>,
) {
    let next = |ltt: Time| Condition {
        type_: type_.to_string(),
        status: status_s.to_string(),
        reason: reason.to_string(),
        message: cut_text(message, CONDITION_MESSAGE_MAX_BYTES),
        last_transition_time: ltt,
        observed_generation: generation,
    };
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status_s => *c = next(c.last_transition_time.clone()),
        Some(c) => *c = next(now.clone()),
        None => conds.push(next(now.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_on_a_character_boundary_within_their_bound() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let mut c = Vec::new();
        let long = "é→".repeat(5_000);
        set_condition(&mut c, READY, false, REASON_NOT_READY, &long, &t0, Some(1));
        let m = &c[0].message;
        assert!(
            m.len() <= CONDITION_MESSAGE_MAX_BYTES && m.len() > CONDITION_MESSAGE_MAX_BYTES - 8
        );
        assert!(m.ends_with('…') && long.starts_with(m.trim_end_matches('…')));
        assert_eq!(cut_text("short", 10), "short");
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        let mut c = Vec::new();
        set_condition(&mut c, READY, false, REASON_NOT_READY, "a", &t0, Some(1));
        set_condition(&mut c, READY, false, REASON_NOT_READY, "b", &t1, Some(2));
        assert_eq!(c[0].last_transition_time, t0);
        assert_eq!(c[0].message, "b");
        set_condition(&mut c, READY, true, REASON_HEALTHY, "", &t1, Some(2));
        assert_eq!(c[0].last_transition_time, t1);
        assert_eq!(c.len(), 1);
    }
}
