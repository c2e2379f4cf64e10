//! `Decision::plan` (`status.plan`): which members would leave next, in order, and what holds
//! each step right now.

mod common;

use std::collections::BTreeMap;

use marekvs_core::*;

const NOW: Millis = 1_700_000_000_000;

use common::spec;

/// `n` members, ready, scraped, views converged, counters quiet for a minute.
fn healthy(n: u32) -> (Memory, BTreeMap<u32, MemberObs>) {
    let mut memory = Memory::default();
    let mut observed = BTreeMap::new();
    for o in 0..n {
        memory.members.insert(o);
        memory.phases.insert(o, MemberPhase::Active);
        memory.samples.insert(o, Sample::new(0, 0, NOW - 60_000));
        observed.insert(
            o,
            MemberObs {
                pod: Some(PodObs {
                    ready: true,
                    ..PodObs::default()
                }),
                pvc: Some(PvcObs {
                    uid: format!("uid-{o}"),
                    ..PvcObs::default()
                }),
                scrape: Some(Scrape {
                    view_members: u64::from(n),
                    ..Scrape::default()
                }),
                view: Some(View::of_ordinals(o, 0..n)),
                look_alike: false,
                password: Default::default(),
                client_input: Some(0),
                new_pod: PodAdmission::Admitted,
            },
        );
    }
    (memory, observed)
}

fn decide_now(
    spec: &ClusterSpec,
    memory: &Memory,
    observed: &BTreeMap<u32, MemberObs>,
) -> Decision {
    decide(&Input {
        spec,
        memory,
        observed,
        now: NOW,
    })
}

/// The plan as (ordinal, reason, hold in short).
fn steps(d: &Decision) -> Vec<(u32, VictimReason, String)> {
    d.plan
        .iter()
        .map(|p| {
            let held = match &p.held_by {
                None => "-".to_string(),
                Some(Hold::Gate(b)) => format!("gate {}", b.reason.as_str()),
                Some(Hold::Floor { floor }) => format!("floor {floor}"),
                Some(Hold::Paused) => "paused".to_string(),
                Some(Hold::InProgress { message }) => message.clone(),
            };
            (p.ordinal, p.reason, held)
        })
        .collect()
}

use VictimReason::*;

#[test]
fn at_or_below_the_target_the_plan_is_empty() {
    let (memory, observed) = healthy(3);
    assert!(decide_now(&spec(3, 2), &memory, &observed).plan.is_empty());
    assert!(decide_now(&spec(5, 2), &memory, &observed).plan.is_empty());
}

#[test]
fn the_plan_starts_with_the_removal_it_starts_then_the_next_ones_in_order() {
    let (memory, observed) = healthy(5);
    let d = decide_now(&spec(3, 2), &memory, &observed);
    // Recorded first (status is written before anything is done to it).
    assert_eq!(d.memory.removal().map(|r| r.ordinal), Some(4));
    assert_eq!(
        steps(&d),
        vec![
            (4, HighestOrdinal, "-".into()),
            (
                3,
                HighestOrdinal,
                "the removal of demo-4 comes first".into()
            ),
        ]
    );
    // The next pass, the removal under way: the same plan.
    // Its client traffic is cut with the record, and again while its pod is not seen off.
    assert_eq!(
        d.actions,
        vec![Action::SetClientTraffic {
            ordinal: 4,
            on: false
        }]
    );
    let again = decide_now(&spec(3, 2), &d.memory, &observed);
    assert_eq!(
        again.actions,
        vec![
            Action::Drain(4),
            Action::SetClientTraffic {
                ordinal: 4,
                on: false
            }
        ]
    );
    assert_eq!(steps(&again), steps(&d));
}

#[test]
fn user_choices_come_first_then_not_ready_then_highest_and_the_gate_holds_the_first() {
    let (memory, mut observed) = healthy(7);
    // replicationFactor 2 (at 1 every removal is refused, SingleCopy): 7 → 3 members.
    let mut s = spec(3, 2);
    s.remove_first = [5, 1].into_iter().collect();
    observed.get_mut(&2).unwrap().pod.as_mut().unwrap().ready = false;
    let d = decide_now(&s, &memory, &observed);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(
        steps(&d),
        vec![
            (1, UserChosen, "gate NotAllReady".into()),
            (5, UserChosen, "the removal of demo-1 comes first".into()),
            (2, NotReady, "the removal of demo-5 comes first".into()),
            (
                6,
                HighestOrdinal,
                "the removal of demo-2 comes first".into()
            ),
        ]
    );
    let Some(Hold::Gate(b)) = &d.plan[0].held_by else {
        panic!("{:?}", d.plan[0]);
    };
    assert_eq!(
        Some(b),
        d.blocked.as_ref(),
        "the gate's own reason and message"
    );
}

#[test]
fn a_re_replication_in_progress_holds_the_first_step_with_the_gate_message() {
    let (mut memory, observed) = healthy(4);
    // Anti-entropy repairs moving hold nothing (gate v3): the removal starts.
    for s in memory.samples.values_mut() {
        s.changed_at = NOW - 1_000;
        s.repairs_changed_at = NOW - 1_000;
    }
    let d = decide_now(&spec(3, 2), &memory, &observed);
    assert_eq!(d.memory.removal().map(|r| r.ordinal), Some(3));
    // Partition bootstraps moving hold it, with the gate's message.
    for s in memory.samples.values_mut() {
        s.bootstraps_changed_at = NOW - 1_000;
    }
    let d = decide_now(&spec(3, 2), &memory, &observed);
    assert!(d.actions.is_empty());
    let Some(Hold::Gate(b)) = &d.plan[0].held_by else {
        panic!("{:?}", d.plan);
    };
    assert_eq!(b.reason, BlockReason::RepairInProgress);
    assert!(
        b.message.contains("partition hand-off not settled"),
        "{}",
        b.message
    );
}

#[test]
fn paused_holds_every_step_and_acts_on_none() {
    let (memory, observed) = healthy(5);
    let mut s = spec(3, 2);
    s.paused = true;
    let d = decide_now(&s, &memory, &observed);
    assert!(d.actions.is_empty());
    assert_eq!(d.phase, ClusterPhase::Paused);
    assert_eq!(
        steps(&d),
        vec![
            (4, HighestOrdinal, "paused".into()),
            (3, HighestOrdinal, "paused".into()),
        ]
    );
    // Unpaused, the first step listed is the one that starts.
    s.paused = false;
    let d = decide_now(&s, &d.memory, &observed);
    assert_eq!(d.memory.removal().map(|r| r.ordinal), Some(4));
}

#[test]
fn paused_holds_the_removal_under_way() {
    let (memory, observed) = healthy(5);
    let d = decide_now(&spec(3, 2), &memory, &observed);
    let mut s = spec(3, 2);
    s.paused = true;
    let d = decide_now(&s, &d.memory, &observed);
    assert!(d.actions.is_empty());
    assert_eq!(
        steps(&d),
        vec![
            (4, HighestOrdinal, "paused".into()),
            (3, HighestOrdinal, "paused".into()),
        ]
    );
}

#[test]
fn steps_below_the_floor_are_listed_held_by_it() {
    let (memory, observed) = healthy(4);
    // Floor 3: one removal happens, two more are asked for and never happen.
    let d = decide_now(&spec(1, 2), &memory, &observed);
    assert_eq!(d.memory.removal().map(|r| r.ordinal), Some(3));
    assert_eq!(
        steps(&d),
        vec![
            (3, HighestOrdinal, "-".into()),
            (2, HighestOrdinal, "floor 3".into()),
            (1, HighestOrdinal, "floor 3".into()),
        ]
    );
}

#[test]
fn a_restart_in_progress_holds_the_first_step() {
    let (mut memory, observed) = healthy(4);
    memory.disruption = Some(Disruption::Roll(Roll {
        ordinal: 0,
        reason: RollReason::SpecChanged,
        step: RollStep::Rejoining,
        handed_off_pvc: None,
        started_at: NOW - 10_000,
        step_started_at: NOW - 10_000,
        connections_cut_at: None,
    }));
    let mut observed = observed;
    observed.get_mut(&0).unwrap().pod.as_mut().unwrap().outdated = false;
    let mut s = spec(3, 2);
    s.settle_ms = 60_000;
    let d = decide_now(&s, &memory, &observed);
    assert_eq!(d.memory.roll().map(|r| r.ordinal), Some(0), "{d:?}");
    assert_eq!(
        steps(&d),
        vec![(
            3,
            HighestOrdinal,
            "the restart of demo-0 comes first".into()
        )]
    );
}
