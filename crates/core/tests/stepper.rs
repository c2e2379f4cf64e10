//! The stepper against a small in-memory world, and properties over random observations.

use std::collections::{BTreeMap, BTreeSet};

use marekvs_core::*;
use proptest::prelude::*;

fn spec(nodes: u32, rf: u32) -> ClusterSpec {
    ClusterSpec {
        name: "demo".into(),
        nodes,
        replication_factor: rf,
        remove_first: BTreeSet::new(),
        reclaim_pvcs: false,
        settle_ms: 3_000,
        handoff_timeout_ms: 60_000,
    }
}

/// A toy world: pods and PVCs appear and disappear as actions ask; every running member sees
/// all running members; repair counters move for `copying_ms` after every membership change.
struct World {
    obs: BTreeMap<u32, MemberObs>,
    pvc_seq: u32,
    copying_until: Millis,
    copying_ms: Millis,
    repairs: u64,
    last_repair_at: Millis,
}

impl World {
    fn new(copying_ms: Millis) -> Self {
        World {
            obs: BTreeMap::new(),
            pvc_seq: 0,
            copying_until: 0,
            copying_ms,
            repairs: 0,
            last_repair_at: 0,
        }
    }

    fn apply(&mut self, actions: &[Action], now: Millis) {
        for a in actions {
            match *a {
                Action::CreatePvc(o) => {
                    self.pvc_seq += 1;
                    self.obs.entry(o).or_default().pvc = Some(PvcObs {
                        uid: format!("uid-{}", self.pvc_seq),
                        terminating: false,
                    });
                }
                Action::CreatePod(o) => {
                    self.obs.entry(o).or_default().pod = Some(PodObs {
                        ready: true,
                        terminating: false,
                        drained: false,
                    });
                    self.copying_until = now + self.copying_ms;
                }
                Action::Drain(o) => {
                    if let Some(p) = self.obs.get_mut(&o).and_then(|m| m.pod.as_mut()) {
                        p.drained = true;
                    }
                    self.copying_until = now + self.copying_ms;
                }
                Action::DeletePod(o) => {
                    if let Some(m) = self.obs.get_mut(&o) {
                        m.pod = None;
                        m.scrape = None;
                    }
                    self.copying_until = now + self.copying_ms;
                }
                Action::DeletePvc(o) => {
                    if let Some(m) = self.obs.get_mut(&o) {
                        m.pvc = None;
                    }
                }
            }
        }
        self.obs.retain(|_, m| m.pod.is_some() || m.pvc.is_some());
    }

    fn scrape(&mut self, now: Millis) {
        let running = self.obs.values().filter(|m| m.pod.is_some()).count() as u64;
        if now < self.copying_until {
            self.repairs += 1;
            self.last_repair_at = now;
        }
        let repairs = self.repairs;
        for m in self.obs.values_mut() {
            m.scrape = m.pod.as_ref().map(|_| Scrape {
                view_members: running,
                repairs_total: repairs,
                ..Scrape::default()
            });
        }
    }
}

/// Run reconciles every second until `done` or `limit` rounds; returns the decisions.
fn drive(
    spec: &ClusterSpec,
    world: &mut World,
    memory: &mut Memory,
    start: Millis,
    limit: usize,
) -> Vec<Decision> {
    let mut out = Vec::new();
    let mut now = start;
    for _ in 0..limit {
        world.scrape(now);
        let d = decide(&Input {
            spec,
            memory,
            observed: &world.obs,
            now,
        });
        *memory = d.memory.clone();
        world.apply(&d.actions, now);
        let done = d.phase == ClusterPhase::Healthy && d.actions.is_empty();
        out.push(d);
        if done {
            break;
        }
        now += 1_000;
    }
    out
}

fn names(m: &Memory) -> Vec<u32> {
    m.members.iter().copied().collect()
}

#[test]
fn creates_three_members_and_becomes_healthy() {
    let s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    let ds = drive(&s, &mut w, &mut mem, 0, 30);
    assert_eq!(
        ds[0].actions,
        vec![
            Action::CreatePvc(0),
            Action::CreatePvc(1),
            Action::CreatePvc(2),
            Action::CreatePod(0),
            Action::CreatePod(1),
            Action::CreatePod(2)
        ]
    );
    assert_eq!(ds[0].phase, ClusterPhase::ScalingUp);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 1, 2]);
}

#[test]
fn scales_down_one_at_a_time_user_choice_first_and_waits_for_quiet_counters() {
    let mut s = spec(5, 2);
    let mut w = World::new(4_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    assert_eq!(names(&mem), vec![0, 1, 2, 3, 4]);

    s.nodes = 3;
    s.remove_first = [1].into();
    let ds = drive(&s, &mut w, &mut mem, 100_000, 200);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 2, 3]);

    // The order of pod deletions: the user's choice, then the highest ordinal; never two at once.
    let deletions: Vec<u32> = ds
        .iter()
        .flat_map(|d| d.actions.iter())
        .filter_map(|a| {
            if let Action::DeletePod(o) = a {
                Some(*o)
            } else {
                None
            }
        })
        .collect();
    let mut distinct = deletions.clone();
    distinct.dedup();
    assert_eq!(distinct, vec![1, 4]);
    // Every pod deletion came only after the counters had been still for the settle window.
    for d in &ds {
        assert!(
            d.actions
                .iter()
                .filter(|a| matches!(a, Action::DeletePod(_)))
                .count()
                <= 1
        );
    }
    // Volumes are kept by default.
    assert!(w.obs.get(&1).and_then(|m| m.pvc.as_ref()).is_some());
}

#[test]
fn the_gauge_alone_does_not_release_a_step_while_counters_move() {
    let mut s = spec(4, 2);
    // Copying takes 20 s after each change.
    let mut w = World::new(20_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 120);
    s.nodes = 3;
    let mut now = 200_000;
    // Drain, then hand-off: the pod may not be deleted while counters still move.
    let mut deleted_at = None;
    let mut drained_at = None;
    for _ in 0..120 {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        mem = d.memory.clone();
        if d.actions.contains(&Action::Drain(3)) && drained_at.is_none() {
            drained_at = Some(now);
        }
        if d.actions.contains(&Action::DeletePod(3)) && deleted_at.is_none() {
            deleted_at = Some(now);
        }
        w.apply(&d.actions, now);
        now += 1_000;
    }
    let (drained, deleted) = (drained_at.unwrap(), deleted_at.unwrap());
    assert!(
        deleted - drained >= 19_000,
        "deleted only {} ms after drain, while copying",
        deleted - drained
    );
    // The deletion came a full settle window after the counters last moved (before the
    // deletion itself restarted copying).
    let last_move_before_delete = drained + 19_000;
    assert!(deleted - last_move_before_delete >= s.settle_ms);
}

#[test]
fn blocked_while_underreplicated_then_proceeds() {
    let mut s = spec(4, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    s.nodes = 3;
    w.scrape(100_000);
    for m in w.obs.values_mut() {
        m.scrape.as_mut().unwrap().underreplicated = 7;
    }
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now: 100_000,
    });
    assert_eq!(d.phase, ClusterPhase::Blocked);
    assert_eq!(
        d.blocked.as_ref().unwrap().reason,
        BlockReason::Underreplicated
    );
    assert!(d.memory.removal.is_none());
    assert!(d.notes.iter().any(|n| n.reason == "ScaleDownBlocked"));
    mem = d.memory;
    // Once the gauge clears, the removal starts (recorded first, nothing done yet).
    let ds = drive(&s, &mut w, &mut mem, 101_000, 1);
    assert!(ds[0].memory.removal.is_some());
    assert!(ds[0].actions.is_empty());
    assert!(ds[0].notes.iter().any(|n| n.reason == "ScaleDownUnblocked"));
}

#[test]
fn never_below_the_floor() {
    let s = spec(2, 2); // asks for 2, floor is 3
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    assert_eq!(names(&mem), vec![0, 1, 2]);
}

#[test]
fn a_deleted_pod_comes_back_on_its_volume_and_a_deleted_pvc_is_replaced() {
    let s = spec(3, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let uid = w.obs[&1].pvc.clone().unwrap().uid;
    w.obs.get_mut(&1).unwrap().pod = None;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 60);
    assert_eq!(ds[0].actions, vec![Action::CreatePod(1)]);
    assert_eq!(ds[0].phase, ClusterPhase::Replacing);
    assert!(ds[0].notes.iter().any(|n| n.reason == "MemberReplaced"));
    assert_eq!(w.obs[&1].pvc.clone().unwrap().uid, uid, "same volume");

    // Pod and PVC deleted; the PVC lingers Terminating first: nothing is created on it.
    w.obs.get_mut(&2).unwrap().pod = None;
    w.obs.get_mut(&2).unwrap().pvc.as_mut().unwrap().terminating = true;
    w.scrape(200_000);
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now: 200_000,
    });
    assert!(
        d.actions.is_empty(),
        "waits for the terminating PVC: {:?}",
        d.actions
    );
    mem = d.memory;
    w.obs.get_mut(&2).unwrap().pvc = None;
    w.obs.remove(&2);
    let ds = drive(&s, &mut w, &mut mem, 201_000, 60);
    assert_eq!(
        ds[0].actions,
        vec![Action::CreatePvc(2), Action::CreatePod(2)]
    );
    assert_ne!(w.obs[&2].pvc.clone().unwrap().uid, uid);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
}

#[test]
fn growing_back_during_a_drain_cancels_and_recycles_the_drained_member() {
    let mut s = spec(4, 2);
    let mut w = World::new(30_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 100);
    s.nodes = 3;
    // Until the victim is drained and handing off.
    let mut now = 200_000;
    while mem
        .removal
        .as_ref()
        .is_none_or(|r| r.step != RemovalStep::HandingOff)
    {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        mem = d.memory;
        w.apply(&d.actions, now);
        now += 1_000;
    }
    s.nodes = 4;
    w.scrape(now);
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now,
    });
    assert!(d.memory.removal.is_none());
    assert!(d.notes.iter().any(|n| n.reason == "RemovalCancelled"));
    assert_eq!(
        d.actions,
        vec![Action::DeletePod(3)],
        "the drained node restarts on its volume"
    );
    assert_eq!(d.memory.members.len(), 4);
}

#[test]
fn reclaims_the_volume_only_after_the_hand_off_settled() {
    let mut s = spec(4, 2);
    s.reclaim_pvcs = true;
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    s.nodes = 3;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 120);
    let del_pod = ds
        .iter()
        .position(|d| d.actions.contains(&Action::DeletePod(3)))
        .unwrap();
    let del_pvc = ds
        .iter()
        .position(|d| d.actions.contains(&Action::DeletePvc(3)))
        .unwrap();
    assert!(del_pvc > del_pod);
    assert!(
        ds[del_pvc]
            .notes
            .iter()
            .any(|n| n.reason == "MemberRemoved")
    );
    assert!(!w.obs.contains_key(&3));
}

// ---- properties over arbitrary observations ----

fn arb_obs() -> impl Strategy<Value = MemberObs> {
    (
        prop::option::weighted(
            0.85,
            (
                any::<bool>(),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
            ),
        ),
        prop::option::weighted(0.9, prop::bool::weighted(0.05)),
        prop::option::weighted(
            0.8,
            (
                2u64..7,
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
                0u64..3,
            ),
        ),
    )
        .prop_map(|(pod, pvc, scrape)| MemberObs {
            pod: pod.map(|(ready, terminating, drained)| PodObs {
                ready,
                terminating,
                drained,
            }),
            pvc: pvc.map(|terminating| PvcObs {
                uid: "u".into(),
                terminating,
            }),
            scrape: scrape.map(|(view, under, join, rep)| Scrape {
                view_members: view,
                underreplicated: u64::from(under) * 5,
                join_pending: u64::from(join) * 3,
                bootstraps_total: 0,
                repairs_total: rep,
                commands_total: 0,
            }),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// No sequence of observations makes the stepper take a step while anything is unknown or
    /// unsafe, remove two members at once, or go below replicationFactor + 1.
    #[test]
    fn no_unsafe_step_under_any_observations(
        rf in 1u32..4,
        extra in 1u32..4,
        spec_changes in prop::collection::vec(0u32..8, 1..4),
        rounds in prop::collection::vec((prop::collection::btree_map(0u32..8, arb_obs(), 0..8), 0i64..5_000), 1..40),
    ) {
        let mut s = spec(rf + extra, rf);
        let mut mem = Memory::default();
        let mut now: Millis = 1_000_000;
        for (i, (observed, dt)) in rounds.iter().enumerate() {
            s.nodes = (spec_changes[i % spec_changes.len()]).max(rf + 1);
            now += dt;
            let d = decide(&Input { spec: &s, memory: &mem, observed, now });

            // At most one removal, and at most one pod deleted per decision.
            let deletes: Vec<u32> = d.actions.iter().filter_map(|a| if let Action::DeletePod(o) = a { Some(*o) } else { None }).collect();
            prop_assert!(deletes.len() <= 1, "deletes {:?}", deletes);

            // A new removal starts only above the floor and with every member known and safe.
            let started = mem.removal.is_none() && d.memory.removal.is_some();
            if started {
                prop_assert!(d.memory.members.len() as u32 > s.floor());
                prop_assert!(d.actions.is_empty(), "the record is written before acting");
                for o in &d.memory.members {
                    let m = observed.get(o).expect("a victim-eligible member is observed");
                    prop_assert!(m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating));
                    let sc = m.scrape.as_ref().expect("scraped");
                    prop_assert_eq!(sc.underreplicated, 0);
                    prop_assert_eq!(sc.join_pending, 0);
                    prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
                }
            }
            // Deleting the victim's pod (leaving the hand-off step) needs every other member known and settled.
            if let Some(r) = &mem.removal {
                if r.step == RemovalStep::HandingOff && d.actions.contains(&Action::DeletePod(r.ordinal)) {
                    for o in d.memory.members.iter().filter(|o| **o != r.ordinal) {
                        let m = &observed[o];
                        prop_assert!(m.pod.as_ref().is_some_and(|p| p.ready));
                        let sc = m.scrape.as_ref().expect("scraped");
                        prop_assert_eq!(sc.underreplicated, 0);
                        prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
                        let q = d.memory.samples[o].changed_at.max(r.step_started_at);
                        prop_assert!(now - q >= s.settle_ms);
                    }
                }
                // Completing a removal needs the others known, converged without it and settled.
                if d.memory.removal.is_none() && !d.memory.members.contains(&r.ordinal) {
                    prop_assert!(observed.get(&r.ordinal).is_none_or(|m| m.pod.is_none()));
                    for o in &d.memory.members {
                        let sc = observed[o].scrape.as_ref().expect("scraped");
                        prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
                        prop_assert_eq!(sc.underreplicated, 0);
                    }
                    prop_assert!(d.memory.members.len() as u32 >= s.floor());
                }
            }
            // A member's pod is only deleted if it is the victim or a drained pod being recycled.
            for o in deletes {
                let victim = d.memory.removal.as_ref().is_some_and(|r| r.ordinal == o);
                let recycled = observed.get(&o).and_then(|m| m.pod.as_ref()).is_some_and(|p| p.drained);
                prop_assert!(victim || recycled);
            }
            mem = d.memory;
        }
    }
}
