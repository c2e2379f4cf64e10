//! One pass of the operator over plain data: the only call the shell makes into the core.
//!
//! It sizes the cluster, decides, and works out everything the shell then records, reports and
//! carries out: the Events for what changed since the last report (look-alikes included),
//! the members refusing writes, what the autoscaler's status says, the absences to record and
//! when to look again. The shell translates; it decides nothing.

use std::collections::{BTreeMap, BTreeSet};

use crate::autoscale::{LoadMemory, Policy, ScaleMemory};
pub use crate::ownership::{LookAlikeSeen, ObjectKind};
use crate::pace::next_look_ms;
use crate::sizing::{Sizing, SizingInput, size};
use crate::stale::{AbsenceChange, absence_changes};
use crate::stepper::{Input, decide};
use crate::transitions::{Reported, Reporting, transition_notes, unknown_removal_choices};
use crate::types::{
    BlockReason, Blocked, ClusterSpec, Decision, EventKind, EventReason, MemberObs, Memory, Millis,
    Note,
};

pub struct PassInput<'a> {
    pub spec: &'a ClusterSpec,
    /// `spec.autoscale`, when set.
    pub policy: Option<&'a Policy>,
    /// What status remembers.
    pub memory: &'a Memory,
    /// Observations with this pass's scrapes.
    pub observed: &'a BTreeMap<u32, MemberObs>,
    pub load: &'a LoadMemory,
    pub scale: &'a ScaleMemory,
    /// What the last written status reported.
    pub reported: &'a Reported,
    /// `spec.removeMembers`: each entry, with the ordinal it names when it is one of ours.
    pub removal_choices: &'a [(String, Option<u32>)],
    /// Objects found holding members' names that are not the cluster's.
    pub look_alikes: &'a [LookAlikeSeen],
    /// The password recorded as the members', against the Secret's (see `password`).
    pub password: crate::password::PasswordRecord,
    pub now: Millis,
}

/// Everything one pass records, reports and carries out.
#[derive(Clone, Debug)]
pub struct PassPlan {
    pub sizing: Sizing,
    /// The decision; its notes are published after [`PassPlan::changes`].
    pub decision: Decision,
    /// Entries of `spec.removeMembers` that name no current member (ignored).
    pub unknown_choices: Vec<String>,
    /// Members refusing writes at the disk high-water mark: those whose scrape says so, and
    /// those not scraped this pass that were reported so (unknown keeps the last word).
    pub write_stopped: BTreeSet<u32>,
    /// What the autoscaler's status says, when it is on.
    pub autoscale: Option<AutoscaleReport>,
    /// Events for what changed since the last report, look-alikes included.
    pub changes: Vec<Note>,
    /// Absence records to write on volumes once the actions are sent.
    pub absences: Vec<AbsenceChange>,
    /// Where the password stands, and what to do about it.
    pub password: crate::password::PasswordPlan,
    /// Which release each member runs (`MixedVersions`).
    pub versions: crate::versions::Versions,
    /// When to look again.
    pub next_look_ms: Millis,
}

/// What the autoscaler's status says this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscaleReport {
    pub desired: u32,
    /// Members now.
    pub have: u32,
    pub says: AutoscaleSays,
    /// `spec.nodes`, when it differs from the wish: only the initial size under the autoscaler.
    pub spec_nodes_ignored: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AutoscaleSays {
    /// A removal it asked for is held by the hand-off gate (`Decision::hold` says why).
    HeldByGate(BlockReason),
    /// A change it asked for is blocked; the block's message says why.
    Blocked(String),
    /// The cluster is on its way to the wish; the autoscaler's reason.
    Moving(String),
    /// The cluster is at the wish; the autoscaler's reason.
    AtWish(String),
}

impl AutoscaleReport {
    /// The gate's reason when it holds a removal the autoscaler asked for
    /// (`status.autoscale.heldBy`).
    pub fn held_by(&self) -> Option<BlockReason> {
        match self.says {
            AutoscaleSays::HeldByGate(r) => Some(r),
            _ => None,
        }
    }
}

pub fn plan(input: &PassInput) -> PassPlan {
    let sizing = size(&SizingInput {
        spec: input.spec,
        policy: input.policy,
        members: &input.memory.members,
        observed: input.observed,
        load: input.load,
        scale: input.scale,
        now: input.now,
    });
    let mut decision = decide(&Input {
        spec: &sizing.spec,
        memory: input.memory,
        observed: input.observed,
        now: input.now,
    });
    let mut password = crate::password::plan(
        input.password,
        &decision.memory.members,
        input.observed,
        |o| sizing.spec.member_name(o),
    );
    refused_password_blocks(&mut decision, &password.state, &sizing.spec);
    decision.notes.append(&mut password.notes);
    let members = &decision.memory.members;
    let unknown_choices =
        unknown_removal_choices(input.removal_choices, &input.memory.members, members);
    let write_stopped = write_stopped(members, input.observed, &input.reported.write_stopped);
    let mut changes = transition_notes(
        &sizing.spec,
        input.reported,
        Reporting {
            scaling: sizing.scaling.as_ref(),
            write_stopped: &write_stopped,
            unknown_choices: &unknown_choices,
            mass_failure: decision.mass_failure.as_ref(),
            suspected_partition: decision.suspected_partition.as_ref(),
        },
    );
    changes.extend(look_alike_notes(
        &input.reported.look_alikes,
        input.look_alikes,
    ));
    let absences = absence_changes(members, &decision.memory.phases, input.observed);
    let autoscale = autoscale_report(&sizing, &decision, input.spec.nodes);
    let versions = crate::versions::versions(&decision.memory.members, input.observed);
    // The one pace the shell reads (the decision's own is an input to it).
    let next_look_ms = password.look_again(next_look_ms(input.memory, &decision));
    PassPlan {
        sizing,
        decision,
        unknown_choices,
        write_stopped,
        autoscale,
        changes,
        absences,
        password,
        versions,
        next_look_ms,
    }
}

/// A refused password is why views cannot be read: it names the block instead of the views
/// (and blocks with nothing else wanted, since every gated step would wait).
fn refused_password_blocks(
    d: &mut Decision,
    state: &crate::password::PasswordState,
    spec: &ClusterSpec,
) {
    let Some(message) = state.refusal(|o| spec.member_name(o)) else {
        return;
    };
    let views_or_nothing = d
        .blocked
        .as_ref()
        .is_none_or(|b| b.reason == BlockReason::ViewsNotConverged);
    if views_or_nothing {
        d.blocked = Some(Blocked {
            reason: BlockReason::PasswordRefused,
            message,
        });
    }
}

/// Members refusing writes: by their scrape, or, not scraped, as last reported.
pub fn write_stopped(
    members: &BTreeSet<u32>,
    observed: &BTreeMap<u32, MemberObs>,
    reported: &BTreeSet<u32>,
) -> BTreeSet<u32> {
    members
        .iter()
        .copied()
        .filter(|o| match observed.get(o).and_then(|m| m.scrape.as_ref()) {
            Some(s) => s.write_stopped,
            None => reported.contains(o),
        })
        .collect()
}

/// What the autoscaler's status says, when it is on.
pub fn autoscale_report(sizing: &Sizing, d: &Decision, spec_nodes: u32) -> Option<AutoscaleReport> {
    let sd = sizing.scaling.as_ref()?;
    let have = d.memory.members.len() as u32;
    let says = match (&d.blocked, &d.hold) {
        (_, Some(h)) if sd.desired < have => AutoscaleSays::HeldByGate(h.reason),
        (Some(b), _) if sd.desired != have => AutoscaleSays::Blocked(b.message.clone()),
        (None, _) if sd.desired != have => AutoscaleSays::Moving(sd.reason.clone()),
        _ => AutoscaleSays::AtWish(sd.reason.clone()),
    };
    Some(AutoscaleReport {
        desired: sd.desired,
        have,
        says,
        spec_nodes_ignored: (spec_nodes != sd.desired).then_some(spec_nodes),
    })
}

/// A Warning for each look-alike found now that was not reported, naming the member and the
/// object; a Normal one for each reported that went.
pub fn look_alike_notes(reported: &[LookAlikeSeen], now: &[LookAlikeSeen]) -> Vec<Note> {
    let key = |l: &LookAlikeSeen| (l.kind, l.name.clone());
    let was: BTreeSet<_> = reported.iter().map(key).collect();
    let is: BTreeSet<_> = now.iter().map(key).collect();
    let appeared = now.iter().filter(|l| !was.contains(&key(l)));
    let went = reported.iter().filter(|l| !is.contains(&key(l)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(kind: ObjectKind, name: &str) -> LookAlikeSeen {
        LookAlikeSeen {
            kind,
            name: name.into(),
            member: "demo-1".into(),
            why: "it has no controller".into(),
        }
    }

    #[test]
    fn look_alikes_are_reported_when_they_appear_and_when_they_go() {
        let pod = seen(ObjectKind::Pod, "demo-1");
        let pvc = seen(ObjectKind::PersistentVolumeClaim, "data-demo-1");
        let notes = look_alike_notes(std::slice::from_ref(&pod), std::slice::from_ref(&pvc));
        let reasons: Vec<_> = notes.iter().map(|n| (n.kind, n.reason)).collect();
        assert_eq!(
            reasons,
            [
                (EventKind::Warning, EventReason::LookAlike),
                (EventKind::Normal, EventReason::LookAlikeGone),
            ]
        );
        assert!(
            notes[0]
                .message
                .starts_with("PersistentVolumeClaim data-demo-1 holds the name of member demo-1"),
            "{}",
            notes[0].message
        );
        assert_eq!(
            notes[1].message,
            "Pod demo-1 (holding the name of member demo-1) is gone"
        );
        // The same list again says nothing.
        let same = std::slice::from_ref(&pod);
        assert!(look_alike_notes(same, same).is_empty());
    }

    #[test]
    fn a_member_not_scraped_keeps_the_write_stop_last_reported() {
        use crate::types::Scrape;
        let members: BTreeSet<u32> = [0, 1, 2, 3].into();
        let scraped = |stopped: bool| MemberObs {
            scrape: Some(Scrape {
                write_stopped: stopped,
                ..Scrape::default()
            }),
            ..MemberObs::default()
        };
        let observed: BTreeMap<u32, MemberObs> = [
            (0, scraped(true)),
            (1, scraped(false)),
            (2, MemberObs::default()),
            (3, MemberObs::default()),
            // Not a member: not reported.
            (4, scraped(true)),
        ]
        .into();
        let reported: BTreeSet<u32> = [1, 2].into();
        assert_eq!(
            write_stopped(&members, &observed, &reported),
            BTreeSet::from([0, 2])
        );
    }
}
