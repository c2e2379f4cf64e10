//! Events that report a change between the status last written and the one about to be
//! written, beyond the stepper's own notes: the autoscaler's wish moving, a member starting to
//! refuse writes, and `spec.removeMembers` naming no current member. Each fires once, on the
//! transition.

use std::collections::BTreeSet;

use crate::autoscale::ScaleDecision;
use crate::mass::MassFailure;
use crate::ownership::LookAlikeSeen;
use crate::types::{ClusterSpec, EventKind, EventReason, Note};
use crate::views::SuspectedPartition;

/// What to do about a member that stopped writes, for its condition and its Event.
pub const DISK_WRITE_STOPPED_ADVICE: &str = "its volume reached the disk high-water mark and it refuses writes; grow storage.size (volumes expand in place), add members (spec.nodes or autoscale), or delete data";

/// What the last written status reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reported {
    /// The size the autoscaler asked for.
    pub autoscale_desired: Option<u32>,
    /// Members reported as refusing writes.
    pub write_stopped: BTreeSet<u32>,
    /// Whether unknown entries of `spec.removeMembers` were reported.
    pub unknown_choices: bool,
    /// Whether a mass failure was reported (the `MassFailure` condition True).
    pub mass_failure: bool,
    /// Whether a suspected partition was reported (the `SuspectedPartition` condition True).
    pub suspected_partition: bool,
    /// The look-alikes listed (`status.lookAlikes`).
    pub look_alikes: Vec<LookAlikeSeen>,
}

/// What this pass reports.
#[derive(Clone, Copy, Debug)]
pub struct Reporting<'a> {
    pub scaling: Option<&'a ScaleDecision>,
    pub write_stopped: &'a BTreeSet<u32>,
    pub unknown_choices: &'a [String],
    pub mass_failure: Option<&'a MassFailure>,
    pub suspected_partition: Option<&'a SuspectedPartition>,
}

pub fn transition_notes(spec: &ClusterSpec, before: &Reported, now: Reporting) -> Vec<Note> {
    let mut notes = Vec::new();
    if let (Some(sd), Some(was)) = (now.scaling, before.autoscale_desired)
        && was != sd.desired
    {
        notes.push(Note {
            kind: EventKind::Normal,
            reason: if sd.desired > was {
                EventReason::AutoscaleUp
            } else {
                EventReason::AutoscaleDown
            },
            message: format!("autoscaler: {was} → {} members: {}", sd.desired, sd.reason),
            member: None,
        });
    }
    for o in now.write_stopped.difference(&before.write_stopped) {
        notes.push(Note {
            kind: EventKind::Warning,
            reason: EventReason::DiskWriteStopped,
            message: format!("{}: {DISK_WRITE_STOPPED_ADVICE}", spec.member_name(*o)),
            member: Some(*o),
        });
    }
    if !now.unknown_choices.is_empty() && !before.unknown_choices {
        notes.push(Note {
            kind: EventKind::Warning,
            reason: EventReason::UnknownRemovalChoice,
            message: format!(
                "spec.removeMembers names no current member: {} (ignored)",
                now.unknown_choices.join(", ")
            ),
            member: None,
        });
    }
    match (now.mass_failure, before.mass_failure) {
        (Some(m), false) => notes.push(Note {
            kind: EventKind::Warning,
            reason: EventReason::MassFailure,
            message: m.message(spec),
            member: None,
        }),
        (None, true) => notes.push(Note {
            kind: EventKind::Normal,
            reason: EventReason::MassFailureOver,
            message: format!(
                "fewer than replicationFactor ({}) members down: replacements, removals and rollouts may proceed",
                spec.replication_factor
            ),
            member: None,
        }),
        _ => {}
    }
    match (now.suspected_partition, before.suspected_partition) {
        (Some(p), false) => notes.push(Note {
            kind: EventKind::Warning,
            reason: EventReason::SuspectedPartition,
            message: p.message.clone(),
            member: None,
        }),
        (None, true) => notes.push(Note {
            kind: EventKind::Normal,
            reason: EventReason::ViewsAgree,
            message: "every ready member's view holds the same members again: removals, restarts and volume replacements may proceed".into(),
            member: None,
        }),
        _ => {}
    }
    notes
}

/// Entries of `spec.removeMembers` (with the ordinal each names, if it parses) that are
/// members neither before nor after this pass.
pub fn unknown_removal_choices(
    choices: &[(String, Option<u32>)],
    before: &BTreeSet<u32>,
    after: &BTreeSet<u32>,
) -> Vec<String> {
    choices
        .iter()
        .filter(|(_, o)| o.is_none_or(|o| !after.contains(&o) && !before.contains(&o)))
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscale::ScaleMemory;

    fn spec() -> ClusterSpec {
        ClusterSpec {
            name: "demo".into(),
            nodes: 3,
            replication_factor: 2,
            remove_first: BTreeSet::new(),
            reclaim_pvcs: false,
            settle_ms: 1_000,
            handoff_timeout_ms: 60_000,
            paused: false,
            stale_volume_grace_ms: 3_600_000,
            hibernation: false,
            fresh_volumes_on_wake: false,
            scale_up_batch: crate::SCALE_UP_BATCH,
            whole_cluster_upgrade: false,
            image_release: None,
            allow_downgrade: false,
            fenced: Default::default(),
        }
    }

    fn wish(desired: u32) -> ScaleDecision {
        ScaleDecision {
            desired,
            memory: ScaleMemory::default(),
            reason: "load".into(),
        }
    }

    fn reasons(notes: &[Note]) -> Vec<&str> {
        notes.iter().map(|n| n.reason.as_str()).collect()
    }

    #[test]
    fn each_change_is_reported_once() {
        let none = BTreeSet::new();
        let stopped: BTreeSet<u32> = [1].into();
        let unknown = ["demo-9".to_string()];
        let before = Reported {
            autoscale_desired: Some(3),
            ..Reported::default()
        };
        let first = transition_notes(
            &spec(),
            &before,
            Reporting {
                scaling: Some(&wish(4)),
                write_stopped: &stopped,
                unknown_choices: &unknown,
                mass_failure: None,
                suspected_partition: None,
            },
        );
        assert_eq!(
            reasons(&first),
            ["AutoscaleUp", "DiskWriteStopped", "UnknownRemovalChoice"]
        );
        assert!(first[1].message.starts_with("demo-1: "));
        assert_eq!(first[1].member, Some(1));
        // The next pass, with the same figures: nothing new to say.
        let reported = Reported {
            autoscale_desired: Some(4),
            write_stopped: stopped.clone(),
            unknown_choices: true,
            mass_failure: false,
            suspected_partition: false,
            look_alikes: Vec::new(),
        };
        let again = Reporting {
            scaling: Some(&wish(4)),
            write_stopped: &stopped,
            unknown_choices: &unknown,
            mass_failure: None,
            suspected_partition: None,
        };
        assert!(transition_notes(&spec(), &reported, again).is_empty());
        let down = Reporting {
            scaling: Some(&wish(3)),
            write_stopped: &none,
            unknown_choices: &[],
            mass_failure: None,
            suspected_partition: None,
        };
        assert_eq!(
            reasons(&transition_notes(&spec(), &reported, down)),
            ["AutoscaleDown"]
        );
        // The autoscaler's first wish has nothing to compare with.
        let first_wish = Reporting {
            scaling: Some(&wish(5)),
            write_stopped: &none,
            unknown_choices: &[],
            mass_failure: None,
            suspected_partition: None,
        };
        assert!(transition_notes(&spec(), &Reported::default(), first_wish).is_empty());
    }

    #[test]
    fn a_mass_failure_is_reported_going_in_and_coming_out() {
        let m = MassFailure {
            down: vec![1, 2],
            members: 5,
            replication_factor: 2,
        };
        let none = BTreeSet::new();
        let now = |mass| Reporting {
            scaling: None,
            write_stopped: &none,
            unknown_choices: &[],
            mass_failure: mass,
            suspected_partition: None,
        };
        let was = |mass_failure| Reported {
            mass_failure,
            ..Reported::default()
        };
        let into = transition_notes(&spec(), &was(false), now(Some(&m)));
        assert_eq!(reasons(&into), ["MassFailure"]);
        assert_eq!(into[0].kind, EventKind::Warning);
        assert!(
            into[0]
                .message
                .starts_with("2 of 5 members down (demo-1, demo-2)")
        );
        assert!(transition_notes(&spec(), &was(true), now(Some(&m))).is_empty());
        let out = transition_notes(&spec(), &was(true), now(None));
        assert_eq!(reasons(&out), ["MassFailureOver"]);
        assert_eq!(out[0].kind, EventKind::Normal);
        assert!(transition_notes(&spec(), &was(false), now(None)).is_empty());
    }

    #[test]
    fn a_suspected_partition_is_reported_going_in_and_coming_out() {
        let p = SuspectedPartition {
            since: 0,
            message: "demo-0 sees demo-0; demo-1 sees demo-1".into(),
        };
        let none = BTreeSet::new();
        let now = |p| Reporting {
            scaling: None,
            write_stopped: &none,
            unknown_choices: &[],
            mass_failure: None,
            suspected_partition: p,
        };
        let was = |suspected_partition| Reported {
            suspected_partition,
            ..Reported::default()
        };
        let into = transition_notes(&spec(), &was(false), now(Some(&p)));
        assert_eq!(reasons(&into), ["SuspectedPartition"]);
        assert_eq!(into[0].kind, EventKind::Warning);
        assert_eq!(into[0].message, p.message);
        assert!(transition_notes(&spec(), &was(true), now(Some(&p))).is_empty());
        let out = transition_notes(&spec(), &was(true), now(None));
        assert_eq!(reasons(&out), ["ViewsAgree"]);
        assert_eq!(out[0].kind, EventKind::Normal);
        assert!(transition_notes(&spec(), &was(false), now(None)).is_empty());
    }

    #[test]
    fn a_removal_choice_is_unknown_unless_it_names_a_member_before_or_after() {
        let choices = [
            ("demo-1".to_string(), Some(1)),
            ("demo-4".to_string(), Some(4)),
            ("demo-x".to_string(), None),
            ("demo-7".to_string(), Some(7)),
        ];
        let before: BTreeSet<u32> = [0, 1, 2, 4].into();
        let after: BTreeSet<u32> = [0, 1, 2].into();
        assert_eq!(
            unknown_removal_choices(&choices, &before, &after),
            ["demo-x", "demo-7"]
        );
    }
}
