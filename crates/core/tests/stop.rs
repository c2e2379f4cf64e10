//! Hibernation, wake and fencing through `decide`: pods stopped without removing members,
//! volumes kept, and every disruptive step held while a member is fenced.

mod common;

use std::collections::BTreeMap;

use marekvs_core::recreate::creations_before_scrapes;
use marekvs_core::*;

const NOW: Millis = 1_700_000_000_000;
const GRACE: Millis = 60_000;

fn spec(nodes: u32) -> ClusterSpec {
    ClusterSpec {
        stale_volume_grace_ms: GRACE,
        ..common::spec(nodes, 2)
    }
}

/// A member with a ready, scraped pod (or none), on volume `v<o>`.
fn member(o: u32, pod: bool, absent_since: Option<Millis>) -> MemberObs {
    MemberObs {
        pod: pod.then(|| PodObs {
            ready: true,
            ..PodObs::default()
        }),
        pvc: Some(PvcObs {
            uid: format!("v{o}"),
            absent_since,
            ..PvcObs::default()
        }),
        scrape: pod.then(Scrape::default),
        view: None,
        look_alike: false,
        password: Default::default(),
        client_input: Some(0),
        new_pod: PodAdmission::Admitted,
    }
}

/// `n` members, those in `down` without a pod (away since `since`).
fn world(n: u32, down: &[u32], since: Option<Millis>) -> BTreeMap<u32, MemberObs> {
    let up: Vec<u32> = (0..n).filter(|o| !down.contains(o)).collect();
    (0..n)
        .map(|o| {
            let mut m = member(
                o,
                up.contains(&o),
                down.contains(&o).then_some(since).flatten(),
            );
            if let Some(s) = m.scrape.as_mut() {
                s.view_members = up.len() as u64;
            }
            m.view = m
                .scrape
                .as_ref()
                .map(|_| View::of_ordinals(o, up.iter().copied()));
            (o, m)
        })
        .collect()
}

fn active(n: u32) -> Memory {
    let quiet = Sample::new(0, 0, NOW - 60_000);
    Memory {
        members: (0..n).collect(),
        phases: (0..n).map(|o| (o, MemberPhase::Active)).collect(),
        samples: (0..n).map(|o| (o, quiet)).collect(),
        ..Memory::default()
    }
}

fn decide_at(spec: &ClusterSpec, memory: &Memory, observed: &BTreeMap<u32, MemberObs>) -> Decision {
    decide(&Input {
        spec,
        memory,
        observed,
        now: NOW,
    })
}

fn reasons(d: &Decision) -> Vec<&'static str> {
    d.notes.iter().map(|n| n.reason.as_str()).collect()
}

#[test]
fn hibernation_stops_every_pod_and_keeps_volumes_and_membership() {
    let hibernate = ClusterSpec {
        hibernation: true,
        ..spec(4)
    };
    let d = decide_at(&hibernate, &active(4), &world(4, &[], None));
    assert_eq!(d.actions, (0..4).map(Action::DeletePod).collect::<Vec<_>>());
    assert_eq!(d.phase, ClusterPhase::Hibernated);
    assert!(d.memory.hibernated);
    assert_eq!(d.memory.members, (0..4).collect());
    assert!(
        d.memory
            .phases
            .values()
            .all(|p| *p == MemberPhase::Hibernated)
    );
    assert_eq!(reasons(&d), ["Hibernating"]);
    // Once the pods are gone: nothing is re-created, nothing else is said, and a scale-down
    // or a scale-up waits for the wake.
    let gone = world(4, &[0, 1, 2, 3], Some(NOW - 1_000));
    for nodes in [3, 4, 6] {
        let s = ClusterSpec {
            nodes,
            ..hibernate.clone()
        };
        let d2 = decide_at(&s, &d.memory, &gone);
        assert_eq!(d2.actions, [], "nodes {nodes}");
        assert_eq!(d2.phase, ClusterPhase::Hibernated);
        assert_eq!(d2.notes, []);
        assert_eq!(d2.mass_failure, None, "a hibernated cluster is not failing");
        assert_eq!(d2.memory.members, (0..4).collect());
        assert_eq!(d2.requeue_ms, stepper::REQUEUE_IDLE_MS);
    }
    // The pod watch's fast path re-creates nothing either.
    let c = creations_before_scrapes(&hibernate, &d.memory, &gone, NOW);
    assert_eq!(c.actions, []);
}

#[test]
fn hibernation_waits_for_the_removal_in_progress_and_paused_holds_it() {
    let mut memory = active(4);
    memory.disruption = Some(Disruption::Removal(Removal {
        ordinal: 3,
        reason: VictimReason::HighestOrdinal,
        step: RemovalStep::HandingOff,
        started_at: NOW - 10_000,
        step_started_at: NOW - 10_000,
        connections_cut_at: None,
    }));
    let mut obs = world(4, &[], None);
    let victim = obs.get_mut(&3).unwrap().pod.as_mut().unwrap();
    victim.drained = true;
    // Its client traffic was cut when its removal was recorded.
    victim.client_traffic_off = true;
    let s = ClusterSpec {
        hibernation: true,
        ..spec(3)
    };
    let d = decide_at(&s, &memory, &obs);
    assert!(d.memory.removal().is_some(), "the removal goes on");
    assert_ne!(d.phase, ClusterPhase::Hibernated);
    assert!(!d.memory.hibernated);
    assert!(
        d.actions.iter().all(|a| *a == Action::DeletePod(3)),
        "only the victim's pod, after its hand-off: {:?}",
        d.actions
    );
    // `spec.paused` deletes nothing, hibernation included.
    let paused = ClusterSpec {
        hibernation: true,
        paused: true,
        ..spec(4)
    };
    let d = decide_at(&paused, &active(4), &world(4, &[], None));
    assert_eq!(d.actions, []);
    assert_eq!(d.phase, ClusterPhase::Paused);
    assert!(d.blocked.unwrap().message.contains("spec.hibernation"));
}

/// Hibernated memory, every pod gone since `since`.
fn hibernated(since: Millis) -> (Memory, BTreeMap<u32, MemberObs>) {
    let mut memory = active(4);
    memory.hibernated = true;
    memory.phases = (0..4).map(|o| (o, MemberPhase::Hibernated)).collect();
    (memory, world(4, &[0, 1, 2, 3], Some(since)))
}

#[test]
fn a_wake_within_the_grace_restarts_every_member_on_its_own_volume() {
    let (memory, gone) = hibernated(NOW - GRACE);
    let d = decide_at(&spec(4), &memory, &gone);
    assert_eq!(d.actions, (0..4).map(Action::CreatePod).collect::<Vec<_>>());
    assert!(d.memory.hibernated, "until every pod is seen");
    assert!(!reasons(&d).contains(&"Woken"));
    let d2 = decide_at(&spec(4), &d.memory, &world(4, &[], None));
    assert!(!d2.memory.hibernated, "every member has its pod");
    assert_eq!(reasons(&d2), ["Woken"]);
    // Before the scrapes too (the same creations, nothing else).
    let c = creations_before_scrapes(&spec(4), &memory, &gone, NOW);
    assert_eq!(c.actions, d.actions);
}

#[test]
fn a_wake_past_the_grace_is_refused_unless_fresh_volumes_are_asked_for() {
    let (memory, gone) = hibernated(NOW - GRACE - 1);
    let d = decide_at(&spec(4), &memory, &gone);
    assert_eq!(
        d.actions,
        [],
        "nothing starts on a stale volume, nothing deleted"
    );
    assert_eq!(d.phase, ClusterPhase::Blocked);
    let b = d.blocked.clone().unwrap();
    assert_eq!(b.reason, BlockReason::WakeRefused);
    assert!(
        b.message.contains("demo-0, demo-1, demo-2, demo-3"),
        "{}",
        b.message
    );
    assert!(b.message.contains("freshVolumesOnWake"), "{}", b.message);
    assert!(d.memory.hibernated);
    assert_eq!(reasons(&d), ["WakeRefused"]);
    assert_eq!(
        creations_before_scrapes(&spec(4), &memory, &gone, NOW).actions,
        []
    );

    let fresh = ClusterSpec {
        fresh_volumes_on_wake: true,
        ..spec(4)
    };
    let d = decide_at(&fresh, &memory, &gone);
    assert_eq!(d.actions, (0..4).map(Action::DeletePvc).collect::<Vec<_>>());
    assert_eq!(
        reasons(&d)
            .iter()
            .filter(|r| **r == "FreshVolumeOnWake")
            .count(),
        4
    );
    assert!(d.notes.iter().all(|n| n.kind == EventKind::Warning));
    // The volumes gone, each member joins on a fresh one.
    let empty: BTreeMap<u32, MemberObs> = BTreeMap::new();
    let d2 = decide_at(&fresh, &d.memory, &empty);
    let mut want: Vec<Action> = (0..4).map(Action::CreatePvc).collect();
    want.extend((0..4).map(Action::CreatePod));
    want.sort();
    assert_eq!(d2.actions, want);
    assert!(
        d2.memory
            .phases
            .values()
            .all(|p| *p == MemberPhase::Joining),
        "they rejoin empty"
    );
}

#[test]
fn a_fenced_member_is_stopped_never_recreated_and_holds_every_disruptive_step() {
    let fenced = ClusterSpec {
        fenced: [1].into(),
        ..spec(3)
    };
    let d = decide_at(&fenced, &active(4), &world(4, &[], None));
    assert_eq!(d.actions, [Action::DeletePod(1)]);
    assert_eq!(reasons(&d), ["MemberFenced", "HeldByFence"]);
    assert_eq!(d.memory.phases[&1], MemberPhase::Fenced);
    assert_eq!(d.blocked.as_ref().unwrap().reason, BlockReason::Fenced);

    // Its pod gone: not re-created, the scale-down held, and the plan says why.
    let gone = world(4, &[1], Some(NOW - 1_000));
    let d = decide_at(&fenced, &d.memory, &gone);
    assert_eq!(d.actions, []);
    assert_eq!(d.memory.removal(), None);
    let b = d.blocked.unwrap();
    assert_eq!(b.reason, BlockReason::Fenced);
    assert!(b.message.contains("demo-1"), "{}", b.message);
    assert!(matches!(
        &d.plan[0].held_by,
        Some(Hold::Gate(g)) if g.reason == BlockReason::Fenced
    ));
    assert_eq!(
        creations_before_scrapes(&fenced, &d.memory, &gone, NOW).actions,
        []
    );

    // A removal in progress is held at its step: no drain, no pod deleted.
    let mut removing = active(4);
    removing.disruption = Some(Disruption::Removal(Removal {
        ordinal: 3,
        reason: VictimReason::HighestOrdinal,
        step: RemovalStep::Draining,
        started_at: NOW,
        step_started_at: NOW,
        connections_cut_at: None,
    }));
    let d = decide_at(&fenced, &removing, &gone);
    assert_eq!(d.actions, []);
    assert_eq!(d.blocked.unwrap().reason, BlockReason::Fenced);

    // Unfenced: back on its own volume (within the grace).
    let d = decide_at(&spec(3), &active(4), &gone);
    assert_eq!(d.actions, [Action::CreatePod(1)]);
}

#[test]
fn fencing_replication_factor_members_or_one_listed_for_removal_warns() {
    let s = ClusterSpec {
        fenced: [0, 1].into(),
        remove_first: [1].into(),
        ..spec(3)
    };
    let d = decide_at(&s, &active(4), &world(4, &[], None));
    let notes: Vec<&Note> = d
        .notes
        .iter()
        .filter(|n| n.reason == "MemberFenced")
        .collect();
    assert_eq!(notes.len(), 2);
    assert!(notes.iter().all(|n| n.kind == EventKind::Warning));
    assert!(
        notes[0]
            .message
            .contains("2 members fenced with replicationFactor 2")
    );
    assert!(notes[1].message.contains("spec.removeMembers"));
    assert_eq!(
        notes.iter().map(|n| n.member).collect::<Vec<_>>(),
        [Some(0), Some(1)]
    );
}

#[test]
fn the_autoscaler_holds_while_hibernated() {
    use marekvs_core::autoscale::{LoadMemory, LoadSample, Policy, ScaleMemory};
    use marekvs_core::sizing::{SizingInput, size};
    let policy = Policy {
        min_nodes: 3,
        max_nodes: 8,
        target_ops_per_node: 100.0,
        scale_down_stabilization_ms: 0,
        scale_up_cooldown_ms: 0,
        disk_high_water: 0.8,
    };
    let memory = ScaleMemory {
        desired: Some(4),
        ..ScaleMemory::default()
    };
    // 2,000 commands per member over the last 10 s: 800 ops/s.
    let mut observed = world(4, &[], None);
    for m in observed.values_mut() {
        m.scrape.as_mut().unwrap().commands_total = 2_000;
    }
    let load = LoadMemory {
        sample: Some(LoadSample {
            at: NOW - 10_000,
            totals: (0..4).map(|o| (o, 0)).collect(),
        }),
        ops_per_sec: None,
    };
    let at = |hibernation: bool| {
        let s = ClusterSpec {
            hibernation,
            ..spec(4)
        };
        size(&SizingInput {
            spec: &s,
            policy: Some(&policy),
            members: &(0..4).collect(),
            observed: &observed,
            load: &load,
            scale: &memory,
            now: NOW,
        })
        .scaling
        .unwrap()
        .desired
    };
    // Awake, a heavy load asks for more members; hibernated, the same figure moves nothing.
    assert_eq!(at(false), 8);
    assert_eq!(at(true), 4);
}
