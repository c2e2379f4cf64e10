//! Password rotation through `password::plan` and the pass: which members get the Secret's
//! password, when the rotation is recorded as over, and a refusal naming its members.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use marekvs_core::pass::{PassInput, plan as pass_plan};
use marekvs_core::password::{
    PasswordRecord, PasswordState, PasswordTaken, ROTATION_LOOK_MS, plan,
};
use marekvs_core::*;

fn member(taken: PasswordTaken) -> MemberObs {
    MemberObs {
        pod: Some(PodObs {
            ready: true,
            ..PodObs::default()
        }),
        password: taken,
        ..MemberObs::default()
    }
}

fn world(taken: &[PasswordTaken]) -> (BTreeSet<u32>, BTreeMap<u32, MemberObs>) {
    let observed: BTreeMap<u32, MemberObs> = taken
        .iter()
        .enumerate()
        .map(|(o, t)| (o as u32, member(*t)))
        .collect();
    (observed.keys().copied().collect(), observed)
}

fn name(o: u32) -> String {
    format!("demo-{o}")
}

fn set(of: &[u32]) -> BTreeSet<u32> {
    of.iter().copied().collect()
}

use PasswordTaken::{Neither, Recorded, Secret, Unknown};

/// A rotation whose new value is already recorded beside the old one.
const OLDER: PasswordRecord = PasswordRecord::Older { listed: true };

/// A new value is remembered before it is set on anyone: a second change of the Secret in
/// the middle of a rotation must never leave a member on a value nobody recorded.
#[test]
fn a_new_value_is_remembered_in_a_pass_of_its_own_before_it_is_set_on_anyone() {
    let (members, observed) = world(&[Recorded, Recorded, Secret]);
    let p = plan(
        PasswordRecord::Older { listed: false },
        &members,
        &observed,
        name,
    );
    assert!(p.remember);
    assert!(p.set_on.is_empty(), "{:?}", p.set_on);
    assert!(!p.record);
    assert!(p.notes.is_empty(), "{:?}", p.notes);
    let p = plan(OLDER, &members, &observed, name);
    assert!(!p.remember);
    assert_eq!(p.set_on, set(&[0, 1]));
    // Nobody left to set it on: nothing to remember, the rotation is recorded as over.
    let (members, observed) = world(&[Secret, Secret, Secret]);
    let p = plan(
        PasswordRecord::Older { listed: false },
        &members,
        &observed,
        name,
    );
    assert!(!p.remember && p.record);
    // A member not read: remembered all the same (it may have started on it).
    let (members, observed) = world(&[Secret, Unknown, Secret]);
    let p = plan(
        PasswordRecord::Older { listed: false },
        &members,
        &observed,
        name,
    );
    assert!(p.remember && !p.record);
}

#[test]
fn a_rotation_sets_the_secrets_password_on_every_member_still_on_the_recorded_one() {
    let (members, observed) = world(&[Secret, Recorded, Recorded]);
    let p = plan(OLDER, &members, &observed, name);
    assert_eq!(p.set_on, set(&[1, 2]));
    assert!(!p.record, "members still run the recorded password");
    assert_eq!(
        p.state,
        PasswordState::Rotating {
            on_secret: set(&[0]),
            on_recorded: set(&[1, 2]),
            unknown: set(&[]),
        }
    );
    let set_notes: Vec<_> = p
        .notes
        .iter()
        .filter(|n| n.reason == EventReason::PasswordSet)
        .map(|n| n.member)
        .collect();
    assert_eq!(set_notes, [Some(1), Some(2)]);
    assert!(
        p.notes[0]
            .message
            .starts_with("demo-1: setting the Secret's new password")
    );
}

#[test]
fn a_rotation_is_recorded_once_every_started_member_takes_the_secrets_password() {
    let (members, mut observed) = world(&[Secret, Secret, Unknown]);
    // Unknown is never done: the member may still run the recorded password.
    let p = plan(OLDER, &members, &observed, name);
    assert!(!p.record);
    assert!(p.set_on.is_empty());
    assert!(
        matches!(p.state, PasswordState::Rotating { ref unknown, .. } if *unknown == set(&[2]))
    );
    // A pod whose container never started reads the Secret when it starts.
    observed
        .get_mut(&2)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .never_started = true;
    let p = plan(OLDER, &members, &observed, name);
    assert!(p.record);
    assert_eq!(p.state, PasswordState::Current);
    let rotated: Vec<_> = p
        .notes
        .iter()
        .filter(|n| n.reason == EventReason::PasswordRotated)
        .collect();
    assert_eq!(rotated.len(), 1, "{:?}", p.notes);
    assert!(
        rotated[0].message.contains("(2 of them)"),
        "{}",
        rotated[0].message
    );
    // A member without a pod starts on the Secret's too.
    observed.get_mut(&2).unwrap().pod = None;
    assert!(plan(OLDER, &members, &observed, name).record);
}

#[test]
fn a_first_record_is_written_silently_and_a_current_one_is_not_written_again() {
    let (members, observed) = world(&[Secret, Secret, Secret]);
    let p = plan(PasswordRecord::Missing, &members, &observed, name);
    assert!(p.record);
    assert!(p.notes.is_empty(), "{:?}", p.notes);
    let p = plan(PasswordRecord::Current, &members, &observed, name);
    assert!(!p.record);
    assert_eq!(p.state, PasswordState::Current);
    let p = plan(PasswordRecord::NoPassword, &members, &observed, name);
    assert_eq!(
        (p.record, p.set_on.len(), p.state),
        (false, 0, PasswordState::NoPassword)
    );
}

#[test]
fn a_member_refusing_both_passwords_sets_nothing_records_nothing_and_names_itself() {
    let (members, observed) = world(&[Secret, Neither, Recorded]);
    let p = plan(OLDER, &members, &observed, name);
    assert!(p.set_on.is_empty() && !p.record);
    let message = p.state.refusal(name).expect("a refusal");
    assert!(
        message.starts_with("demo-1 refuses the password in the Secret and every previous one"),
        "{message}"
    );
    // With nothing recorded, it says so: the password was never valid for the member.
    let p = plan(PasswordRecord::Missing, &members, &observed, name);
    let message = p.state.refusal(name).expect("a refusal");
    assert!(message.contains("recorded no earlier one"), "{message}");
}

/// Through the pass: the refusal is the block's reason, in place of the views it hides, even
/// with nothing else wanted; a rotation's notes go out with the decision.
#[test]
fn the_pass_blocks_on_a_refused_password_and_publishes_a_rotations_notes() {
    let spec = common::spec(3, 2);
    let memory = Memory {
        members: set(&[0, 1, 2]),
        ..Memory::default()
    };
    let (_, mut observed) = world(&[Secret, Neither, Secret]);
    let input = |observed: &BTreeMap<u32, MemberObs>, record| {
        pass_plan(&PassInput {
            spec: &spec,
            policy: None,
            memory: &memory,
            observed,
            load: &Default::default(),
            scale: &Default::default(),
            reported: &Default::default(),
            removal_choices: &[],
            look_alikes: &[],
            password: record,
            now: 1_700_000_000_000,
        })
    };
    let p = input(&observed, OLDER);
    let blocked = p.decision.blocked.expect("blocked");
    assert_eq!(blocked.reason, BlockReason::PasswordRefused);
    assert!(
        blocked.message.starts_with("demo-1 refuses"),
        "{}",
        blocked.message
    );

    observed.get_mut(&1).unwrap().password = Recorded;
    let p = input(&observed, OLDER);
    assert_ne!(
        p.decision.blocked.map(|b| b.reason),
        Some(BlockReason::PasswordRefused)
    );
    assert_eq!(p.password.set_on, set(&[1]));
    // Each step of a rotation is a pass of its own: the next comes soon.
    assert!(p.next_look_ms <= ROTATION_LOOK_MS);
    assert_eq!(p.password.look_again(30_000), ROTATION_LOOK_MS);
    let (members, done) = world(&[Secret, Secret, Secret]);
    let settled = plan(PasswordRecord::Current, &members, &done, name);
    assert_eq!(
        settled.look_again(30_000),
        30_000,
        "nothing to rotate: no hurry"
    );
    let remembering = plan(
        PasswordRecord::Older { listed: false },
        &members,
        &observed,
        name,
    );
    assert!(remembering.remember);
    assert_eq!(remembering.look_again(30_000), ROTATION_LOOK_MS);
    assert!(
        p.decision
            .notes
            .iter()
            .any(|n| n.reason == EventReason::PasswordSet && n.member == Some(1))
    );
}
