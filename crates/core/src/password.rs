//! Password rotation. A node reads its password (`MAREKVS_REQUIREPASS`) once, at start, and
//! takes a new one live with `CONFIG SET requirepass` (that process only; connections already
//! authenticated stay so). A node holds one password at a time, and members never present it
//! to each other (replication, anti-entropy and gossip carry no credential), so members on
//! different passwords still replicate: only clients see the difference.
//!
//! So a change of the password's Secret is a rotation the operator carries out: the shell
//! keeps the password members last all ran and every value it has started to set since
//! (recorded outside the Secret), tries the Secret's first and the recorded ones where the
//! Secret's is refused, and this module says when to remember the Secret's value (before it
//! is set on anyone, so that a second change of the Secret mid-rotation never leaves a member
//! on a value nobody recorded), which members to set it on, when the rotation is over (record
//! the Secret's as the one members run, alone), and what to report.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{EventKind, EventReason, MemberObs, Millis, Note};

pub use crate::types::PasswordTaken;

/// The password the operator recorded as the one its members run, against the Secret's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PasswordRecord {
    /// The cluster has no password, or its Secret cannot be read (every view is unknown).
    #[default]
    NoPassword,
    /// The recorded password is the Secret's.
    Current,
    /// The recorded password differs from the Secret's, or other values set since are
    /// recorded beside it: a rotation is under way. `listed`: the Secret's value is among the
    /// recorded ones (it may be set on members).
    Older { listed: bool },
    /// None recorded yet (a new cluster, or one made before rotations were recorded).
    Missing,
}

/// Where the cluster's password stands this pass (the `PasswordCurrent` condition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordState {
    NoPassword,
    /// Every member that runs takes the Secret's password, and it is recorded.
    Current,
    /// The Secret's password is being set on the members that run the recorded one.
    Rotating {
        on_secret: BTreeSet<u32>,
        on_recorded: BTreeSet<u32>,
        unknown: BTreeSet<u32>,
    },
    /// These members refuse the Secret's password and the recorded one (if any): the operator
    /// cannot read their views, so every gated step waits.
    Refused {
        members: BTreeSet<u32>,
        recorded: bool,
    },
}

/// What one pass does about the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordPlan {
    /// Record the Secret's value among the ones members may run, before it is set on any.
    pub remember: bool,
    /// Members to set the Secret's password on (`AUTH` with the recorded one, then `CONFIG
    /// SET requirepass`).
    pub set_on: BTreeSet<u32>,
    /// Record the Secret's password as the one the members run: every member whose pod has
    /// started takes it (a pod that starts later reads it from the Secret).
    pub record: bool,
    pub state: PasswordState,
    pub notes: Vec<Note>,
}

/// How soon to look again while a rotation runs: each step (remember, set, record) takes a
/// pass of its own.
pub const ROTATION_LOOK_MS: Millis = 1_000;

impl PasswordPlan {
    /// Whether a rotation still has a step to take.
    pub fn rotating(&self) -> bool {
        self.remember
            || !self.set_on.is_empty()
            || matches!(self.state, PasswordState::Rotating { .. })
    }

    /// When to look again, given the decision's wish: soon while a rotation runs.
    pub fn look_again(&self, wish: Millis) -> Millis {
        if self.rotating() {
            wish.min(ROTATION_LOOK_MS)
        } else {
            wish
        }
    }
}

/// The pass's password plan for `members` as observed.
pub fn plan(
    record: PasswordRecord,
    members: &BTreeSet<u32>,
    observed: &BTreeMap<u32, MemberObs>,
    name: impl Fn(u32) -> String,
) -> PasswordPlan {
    let mut plan = PasswordPlan {
        remember: false,
        set_on: BTreeSet::new(),
        record: false,
        state: PasswordState::NoPassword,
        notes: Vec::new(),
    };
    if record == PasswordRecord::NoPassword {
        return plan;
    }
    let mut by_taken: BTreeMap<PasswordTaken, BTreeSet<u32>> = BTreeMap::new();
    for &o in members {
        let Some(m) = observed.get(&o) else { continue };
        // A pod whose container never started reads the Secret when it starts.
        if m.pod.as_ref().is_none_or(|p| p.never_started) {
            continue;
        }
        by_taken.entry(m.password).or_default().insert(o);
    }
    let of = |t| by_taken.get(&t).cloned().unwrap_or_default();
    let refused = of(PasswordTaken::Neither);
    if !refused.is_empty() {
        plan.state = PasswordState::Refused {
            members: refused,
            recorded: record != PasswordRecord::Missing,
        };
        return plan;
    }
    let (on_secret, on_recorded, unknown) = (
        of(PasswordTaken::Secret),
        of(PasswordTaken::Recorded),
        of(PasswordTaken::Unknown),
    );
    let rotating = matches!(record, PasswordRecord::Older { .. });
    plan.record = record != PasswordRecord::Current && on_recorded.is_empty() && unknown.is_empty();
    // Remembered the first pass it is seen (unless it settles now), in a pass of its own: set
    // on members only once it is recorded. A member may start on it from the Secret any time.
    plan.remember = record == PasswordRecord::Older { listed: false } && !plan.record;
    if record == (PasswordRecord::Older { listed: true }) {
        for &o in &on_recorded {
            plan.notes.push(Note {
                kind: EventKind::Normal,
                reason: EventReason::PasswordSet,
                member: Some(o),
                message: format!(
                    "{}: setting the Secret's new password live (CONFIG SET requirepass); connections already open stay authenticated",
                    name(o)
                ),
            });
        }
        plan.set_on = on_recorded.clone();
    }
    if plan.record && rotating {
        plan.notes.push(Note {
            kind: EventKind::Normal,
            reason: EventReason::PasswordRotated,
            member: None,
            message: format!(
                "every running member takes the Secret's new password ({} of them); the previous one is no longer kept",
                on_secret.len()
            ),
        });
    }
    plan.state = if record == PasswordRecord::Current || plan.record {
        PasswordState::Current
    } else {
        PasswordState::Rotating {
            on_secret,
            on_recorded,
            unknown,
        }
    };
    plan
}

impl PasswordState {
    /// The message of a refusal: which members, and what to do.
    pub fn refusal(&self, name: impl Fn(u32) -> String) -> Option<String> {
        let PasswordState::Refused { members, recorded } = self else {
            return None;
        };
        let names: Vec<String> = members.iter().map(|&o| name(o)).collect();
        let tried = if *recorded {
            "the password in the Secret and every previous one the operator recorded"
        } else {
            "the password in the Secret (and the operator has recorded no earlier one its members ran)"
        };
        Some(format!(
            "{} refuse{} {tried}: the password was never valid for them, or was changed on them by hand. Their views cannot be read, so every gated step waits. Put the members' password back in the Secret, or restart a member (delete its pod) to start it on the Secret's",
            names.join(", "),
            if names.len() == 1 { "s" } else { "" },
        ))
    }
}
