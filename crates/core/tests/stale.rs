//! Stale volumes through `decide`: a volume away longer than the grace is never mounted again.

mod common;

use std::collections::BTreeMap;

use marekvs_core::*;

const NOW: Millis = 1_700_000_000_000;
const GRACE: Millis = 60_000;

fn spec(nodes: u32, rf: u32) -> ClusterSpec {
    ClusterSpec {
        stale_volume_grace_ms: GRACE,
        ..common::spec(nodes, rf)
    }
}

fn member(pod: bool, absent_since: Option<Millis>) -> MemberObs {
    MemberObs {
        pod: pod.then(|| PodObs {
            ready: true,
            ..PodObs::default()
        }),
        pvc: Some(PvcObs {
            uid: "v".into(),
            absent_since,
            // Every volume served long before any absence here.
            served_since: Some(NOW - 100 * GRACE),
            ..PvcObs::default()
        }),
        scrape: pod.then(|| Scrape {
            view_members: 3,
            ..Scrape::default()
        }),
        view: None,
        look_alike: false,
        password: Default::default(),
        client_input: Some(0),
        new_pod: PodAdmission::Admitted,
    }
}

/// Every member Active, its re-replication counters quiet for a minute.
fn active(members: &[u32]) -> Memory {
    let quiet = Sample::new(0, 0, NOW - 60_000);
    Memory {
        members: members.iter().copied().collect(),
        phases: members.iter().map(|o| (*o, MemberPhase::Active)).collect(),
        samples: members.iter().map(|o| (*o, quiet)).collect(),
        ..Memory::default()
    }
}

fn decide_at(spec: &ClusterSpec, memory: &Memory, observed: &BTreeMap<u32, MemberObs>) -> Decision {
    // Every scraped member sees every scraped member: views agree by identity.
    let scraped: Vec<u32> = observed
        .iter()
        .filter(|(_, m)| m.scrape.is_some())
        .map(|(o, _)| *o)
        .collect();
    let mut observed = observed.clone();
    for (o, m) in observed.iter_mut() {
        m.view = m
            .scrape
            .as_ref()
            .map(|_| View::of_ordinals(*o, scraped.iter().copied()));
    }
    decide(&Input {
        spec,
        memory,
        observed: &observed,
        now: NOW,
    })
}

fn stale_note(d: &Decision) -> Option<&Note> {
    d.notes.iter().find(|n| n.reason == "StaleVolumeReplaced")
}

#[test]
fn a_scale_up_reuses_a_kept_volume_within_the_grace_and_replaces_a_stale_one() {
    let memory = active(&[0, 1, 2]);
    let mut observed: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, member(true, None))).collect();
    observed.insert(3, member(false, Some(NOW - GRACE)));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(
        d.actions,
        [Action::CreatePod(3)],
        "within the grace: reused"
    );
    assert!(stale_note(&d).is_none());

    observed.insert(3, member(false, Some(NOW - GRACE - 1)));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(
        d.actions,
        [Action::DeletePvc(3)],
        "stale: deleted, no pod on it"
    );
    assert_eq!(d.memory.phases[&3], MemberPhase::Joining);
    let note = stale_note(&d).expect("announced");
    assert_eq!(note.member, Some(3));
    assert_eq!(note.kind, EventKind::Warning);
    assert!(
        note.message
            .contains("data-demo-3 has been away from the cluster for 1m 0s"),
        "{}",
        note.message
    );
    assert!(d.notes.iter().any(|n| {
        n.reason == "MemberCreated"
            && n.message
                .contains("fresh volume (its kept volume is stale)")
    }));

    // The next pass: the volume is gone, a fresh one and the pod on it.
    observed.remove(&3);
    let d = decide_at(&spec(4, 2), &d.memory, &observed);
    assert_eq!(d.actions, [Action::CreatePvc(3), Action::CreatePod(3)]);
    assert_eq!(d.memory.phases[&3], MemberPhase::Joining);
}

#[test]
fn a_member_away_longer_than_the_grace_rejoins_on_a_fresh_volume() {
    let memory = active(&[0, 1, 2, 3]);
    let mut observed: BTreeMap<u32, MemberObs> = (0..4).map(|o| (o, member(true, None))).collect();
    // Pod gone within the grace: re-created on its own volume.
    observed.insert(3, member(false, Some(NOW - GRACE + 1_000)));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(d.actions, [Action::CreatePod(3)]);
    // Past it, while another member reports under-replication: unknown is never safe, the
    // volume waits for the others to hold its data.
    observed.insert(3, member(false, Some(NOW - 2 * GRACE)));
    observed
        .get_mut(&0)
        .unwrap()
        .scrape
        .as_mut()
        .unwrap()
        .underreplicated = 4;
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    let progress = d.progress.unwrap_or_default();
    assert!(
        progress
            .contains("the volume of demo-3 is stale; replacing it once the others hold its data"),
        "{progress}"
    );
    // Then its volume goes, and it rejoins as new.
    observed
        .get_mut(&0)
        .unwrap()
        .scrape
        .as_mut()
        .unwrap()
        .underreplicated = 0;
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(d.actions, [Action::DeletePvc(3)]);
    assert_eq!(d.memory.phases[&3], MemberPhase::Joining);
    assert!(stale_note(&d).is_some());
    // Its pod exists but has not served for that long (crash loop): deleted first, so kubelet
    // does not restart it on the stale data.
    let mut m = member(true, Some(NOW - 2 * GRACE));
    m.pod.as_mut().unwrap().ready = false;
    m.scrape = None;
    observed.insert(3, m.clone());
    let mut unready = memory.clone();
    unready.phases.insert(3, MemberPhase::Unready);
    let d = decide_at(&spec(4, 2), &unready, &observed);
    assert_eq!(d.actions, [Action::DeletePod(3)]);
    assert!(stale_note(&d).is_none(), "announced with its volume");
    // A joining pod is left to join.
    let mut joining = memory.clone();
    joining.phases.insert(3, MemberPhase::Joining);
    let d = decide_at(&spec(4, 2), &joining, &observed);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn a_mass_failure_or_a_pause_holds_a_stale_volume_and_says_so() {
    // RF 2, two members down, one of them away past the grace: neither deleted nor mounted.
    let memory = active(&[0, 1, 2, 3]);
    let mut observed: BTreeMap<u32, MemberObs> = (0..4).map(|o| (o, member(true, None))).collect();
    observed.insert(2, member(false, Some(NOW - 1_000)));
    observed.insert(3, member(false, Some(NOW - 2 * GRACE)));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(
        d.actions,
        [Action::CreatePod(2)],
        "only the pod on its own, fresh-enough volume"
    );
    assert!(d.mass_failure.is_some());
    let progress = d.progress.unwrap_or_default();
    assert!(
        progress.contains("a fresh volume for demo-3 (its volume has been away 2m 0s"),
        "{progress}"
    );
    assert_eq!(d.memory.phases[&3], MemberPhase::Replacing);

    let paused = ClusterSpec {
        paused: true,
        ..spec(4, 2)
    };
    observed.insert(2, member(true, None));
    let d = decide_at(&paused, &memory, &observed);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.phase, ClusterPhase::Paused);
    assert!(
        d.blocked
            .unwrap()
            .message
            .contains("a fresh volume for demo-3")
    );
}

#[test]
fn a_removal_cancelled_past_its_hand_off_brings_its_member_back_as_new() {
    let mut memory = active(&[0, 1]);
    memory.members.insert(2);
    memory.phases.insert(2, MemberPhase::Leaving);
    memory.disruption = Some(Disruption::Removal(Removal {
        ordinal: 2,
        reason: VictimReason::HighestOrdinal,
        step: RemovalStep::Settling,
        started_at: NOW - 3 * GRACE,
        step_started_at: NOW - 2 * GRACE,
        connections_cut_at: None,
    }));
    let mut observed: BTreeMap<u32, MemberObs> = (0..2).map(|o| (o, member(true, None))).collect();
    observed.insert(2, member(false, Some(NOW - 2 * GRACE)));
    // RF 1: with the victim counted down this would be a mass failure holding it for good.
    let d = decide_at(&spec(3, 1), &memory, &observed);
    assert_eq!(d.memory.disruption, None);
    assert_eq!(d.memory.phases[&2], MemberPhase::Joining);
    assert_eq!(d.actions, [Action::DeletePvc(2)]);
    assert!(d.mass_failure.is_none());
}

/// A member asked to move to a fresh volume that lost its pod before its hand-off is normally
/// restarted on its old volume (its data is not on the others yet); not on a stale one.
#[test]
fn a_restart_before_the_hand_off_is_not_made_on_a_stale_volume() {
    let mut memory = active(&[0, 1, 2, 3]);
    memory.phases.insert(3, MemberPhase::Updating);
    memory.disruption = Some(Disruption::Roll(Roll {
        ordinal: 3,
        reason: RollReason::VolumeRequested { pvc: "v".into() },
        step: RollStep::Rejoining,
        handed_off_pvc: None,
        started_at: NOW - 3 * GRACE,
        step_started_at: NOW - 2 * GRACE,
        connections_cut_at: None,
    }));
    let mut observed: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, member(true, None))).collect();
    observed.insert(3, member(false, Some(NOW - GRACE / 2)));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(
        d.actions,
        [Action::CreatePod(3)],
        "within the grace: on its old volume"
    );
    observed.insert(3, member(false, Some(NOW - 2 * GRACE)));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(
        d.actions,
        [Action::DeletePvc(3)],
        "stale: a fresh volume instead"
    );
    assert!(stale_note(&d).is_some());
}

/// A removal past its hand-off counts on one surviving owner per partition until it settles:
/// a member that went away meanwhile (here fenced, then unfenced past the grace) may hold the
/// only copy of what the victim handed off, the victim's volume being stale too. Its volume is
/// not replaced while the removal is unsettled (DST seed 3559: partitions held by demo-1 and
/// demo-4 alone were lost with data-demo-1).
#[test]
fn a_stale_volume_is_not_replaced_while_a_removal_past_its_hand_off_is_unsettled() {
    let mut memory = active(&[0, 1, 2, 3, 4]);
    memory.phases.insert(4, MemberPhase::Leaving);
    let settling = Removal {
        ordinal: 4,
        reason: VictimReason::HighestOrdinal,
        step: RemovalStep::Settling,
        started_at: NOW - 4 * GRACE,
        step_started_at: NOW - 3 * GRACE,
        connections_cut_at: None,
    };
    memory.disruption = Some(Disruption::Removal(settling.clone()));
    let mut observed: BTreeMap<u32, MemberObs> = [0, 2, 3]
        .into_iter()
        .map(|o| (o, member(true, None)))
        .collect();
    observed.insert(1, member(false, Some(NOW - 2 * GRACE)));
    observed.insert(4, member(false, Some(NOW - 3 * GRACE)));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert!(d.mass_failure.is_none());
    assert!(
        !d.actions.contains(&Action::DeletePvc(1)),
        "{:?}",
        d.actions
    );
    assert!(stale_note(&d).is_none());
    let progress = d.progress.unwrap_or_default();
    assert!(
        progress.contains(
            "the volume of demo-1 is stale; it is not replaced while the removal of demo-4 is unsettled"
        ),
        "{progress}"
    );
    assert_eq!(
        d.memory.disruption,
        Some(Disruption::Removal(settling)),
        "the removal waits for demo-1"
    );
    // Once the removal completed (or before its hand-off), the others' gate decides.
    let mut done = active(&[0, 1, 2, 3]);
    done.disruption = None;
    observed.remove(&4);
    let d = decide_at(&spec(4, 2), &done, &observed);
    assert_eq!(d.actions, [Action::DeletePvc(1)]);
}

/// A fresh-volume restart past its hand-off replaces the old volume only while every other
/// member that held data has a ready pod: one away since (here fenced right after the hand-off,
/// its volume stale by now) may hold the only other copy of what the member handed off (DST
/// seed 6734: partition 3, on data-demo-1 and data-demo-4 alone, was lost with data-demo-4).
#[test]
fn a_restart_past_its_hand_off_keeps_the_old_volume_while_another_member_is_away() {
    let mut memory = active(&[0, 1, 2, 3, 4]);
    memory.phases.insert(4, MemberPhase::Updating);
    let roll = Roll {
        ordinal: 4,
        reason: RollReason::VolumeRequested { pvc: "v".into() },
        step: RollStep::Rejoining,
        handed_off_pvc: Some("v".into()),
        started_at: NOW - 3 * GRACE,
        step_started_at: NOW - 2 * GRACE,
        connections_cut_at: None,
    };
    memory.disruption = Some(Disruption::Roll(roll));
    let mut observed: BTreeMap<u32, MemberObs> = [0, 2, 3]
        .into_iter()
        .map(|o| (o, member(true, None)))
        .collect();
    observed.insert(1, member(false, Some(NOW - 2 * GRACE)));
    observed.insert(4, member(false, Some(NOW - 2 * GRACE)));
    let d = decide_at(&spec(5, 2), &memory, &observed);
    assert!(d.mass_failure.is_none(), "{:?}", d.mass_failure);
    assert!(
        !d.actions.iter().any(|a| matches!(a, Action::DeletePvc(_))),
        "{:?}",
        d.actions
    );
    let progress = d.progress.unwrap_or_default();
    assert!(
        progress.contains(
            "keeping the old volume of demo-4 while demo-1 has no ready pod: what demo-4 handed off may be there alone"
        ),
        "{progress}"
    );
    // demo-1 back within the grace, ready: the old volume of demo-4 goes.
    observed.insert(1, member(true, None));
    let d = decide_at(&spec(5, 2), &memory, &observed);
    assert!(d.actions.contains(&Action::DeletePvc(4)), "{:?}", d.actions);
}

/// DST seed 2543 before the world's joins were corrected: demo-0 came back on a fresh volume
/// (its bootstraps asked the first other owner of each partition, which took nothing from
/// demo-2, fenced meanwhile), then demo-2 stayed away past the grace. Its stale volume held the
/// last copy of a partition, and the gate over the others (all ready, quiet) let it go.
#[test]
fn a_stale_volume_is_kept_for_the_user_while_another_volume_first_served_after_it_left() {
    let memory = active(&[0, 1, 2, 3]);
    let mut observed: BTreeMap<u32, MemberObs> = (0..4).map(|o| (o, member(true, None))).collect();
    observed.insert(2, member(false, Some(NOW - 2 * GRACE)));
    // demo-0's volume first served after demo-2 went away.
    observed
        .get_mut(&0)
        .unwrap()
        .pvc
        .as_mut()
        .unwrap()
        .served_since = Some(NOW - 2 * GRACE + 30_000);
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.kept_stale, [2]);
    assert!(stale_note(&d).is_none());
    let progress = d.progress.unwrap_or_default();
    assert!(
        progress.contains(
            "the volume of demo-2 is stale and is kept: the volume of demo-0 first served after demo-2 went away"
        ),
        "{progress}"
    );
    // The user keeps it (the absence record removed): it is mounted again.
    observed.insert(2, member(false, None));
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(d.actions, [Action::CreatePod(2)]);
    // Had demo-0's volume served before demo-2 left, the others hold its data: replaced.
    observed.insert(2, member(false, Some(NOW - 2 * GRACE)));
    observed
        .get_mut(&0)
        .unwrap()
        .pvc
        .as_mut()
        .unwrap()
        .served_since = Some(NOW - 2 * GRACE - 1);
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert_eq!(d.actions, [Action::DeletePvc(2)]);
    assert!(d.kept_stale.is_empty());
    // A volume whose first service was never recorded (an operator before this record, or an
    // annotation that does not parse) counts as rebuilt: kept.
    observed
        .get_mut(&1)
        .unwrap()
        .pvc
        .as_mut()
        .unwrap()
        .served_since = None;
    let d = decide_at(&spec(4, 2), &memory, &observed);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.kept_stale, [2]);
}

/// Healthy means every member's own view counts every partition with its owners: right after a
/// cluster formed, a member may still hold a peer as Joining (4,096 under-replicated, measured
/// on real members), and the phase says Reconciling, why, and looks again within a second.
#[test]
fn a_member_counting_under_replicated_partitions_keeps_the_cluster_from_healthy() {
    let memory = active(&[0, 1, 2]);
    let mut observed: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, member(true, None))).collect();
    let d = decide_at(&spec(3, 2), &memory, &observed);
    assert_eq!(d.phase, ClusterPhase::Healthy);
    observed
        .get_mut(&1)
        .unwrap()
        .scrape
        .as_mut()
        .unwrap()
        .underreplicated = 4_096;
    let d = decide_at(&spec(3, 2), &memory, &observed);
    assert_eq!(d.phase, ClusterPhase::Reconciling);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    let progress = d.progress.unwrap_or_default();
    assert!(
        progress.contains("partitions under-replicated in the view of demo-1"),
        "{progress}"
    );
    assert!(d.requeue_ms <= 1_000, "{}", d.requeue_ms);
}
