//! A whole-cluster upgrade (`spec.upgrade.strategy: WholeCluster`) through `decide`: client
//! traffic cut everywhere, a flush held to the leaver checks on every member, every pod stopped
//! before any new one starts, and traffic back only once the views converged.

mod common;

use std::collections::BTreeMap;

use marekvs_core::*;

const T0: Millis = 1_700_000_000_000;

fn spec(whole_cluster: bool) -> ClusterSpec {
    ClusterSpec {
        whole_cluster_upgrade: whole_cluster,
        ..common::spec(3, 2)
    }
}

/// The pods of a simulated 3-member cluster: which image each runs, its client-traffic label,
/// whether it is there; the anti-entropy rounds each member has begun.
#[derive(Clone)]
struct World {
    /// Per member: `Some((new_image, traffic_off, terminating))`, `None`: no pod.
    pods: BTreeMap<u32, Option<(bool, bool, bool)>>,
    rounds: u64,
    client_input: u64,
    /// Pods deleted stay terminating (a slow exit).
    slow_exit: bool,
    /// New pods not ready yet, with the passes they stay so.
    unready: BTreeMap<u32, u32>,
    /// Client input counts as write commands.
    writes_counted: bool,
    /// The releases the old and the new image run.
    releases: (&'static str, &'static str),
    /// Members drained (`/drain` answered), until their pod goes.
    drained: std::collections::BTreeSet<u32>,
}

impl World {
    fn old() -> Self {
        World {
            pods: (0..3).map(|o| (o, Some((false, false, false)))).collect(),
            rounds: 100,
            client_input: 0,
            slow_exit: false,
            unready: BTreeMap::new(),
            writes_counted: true,
            releases: ("0.2.0", "0.3.0"),
            drained: Default::default(),
        }
    }

    fn observed(&self) -> BTreeMap<u32, MemberObs> {
        let up: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.is_some_and(|(_, _, t)| !t))
            .map(|(o, _)| *o)
            .collect();
        self.pods
            .iter()
            .map(|(&o, p)| {
                let running = p.filter(|(_, _, t)| !t && !self.unready.contains_key(&o));
                let m = MemberObs {
                    pod: p.map(|(new, off, terminating)| PodObs {
                        ready: running.is_some(),
                        terminating,
                        outdated: !new,
                        image_outdated: !new,
                        client_traffic_off: off,
                        drained: self.drained.contains(&o),
                        ..PodObs::default()
                    }),
                    pvc: Some(PvcObs {
                        uid: format!("v{o}"),
                        ..PvcObs::default()
                    }),
                    scrape: running.map(|(new, _, _)| Scrape {
                        view_members: up.len() as u64,
                        ae_rounds: Some(self.rounds),
                        // Write commands keep counting while clients write.
                        write_commands: if self.client_input > 0 && self.writes_counted {
                            self.rounds * 50
                        } else {
                            0
                        },
                        version: Some(
                            if new {
                                self.releases.1
                            } else {
                                self.releases.0
                            }
                            .into(),
                        ),
                        ..Scrape::default()
                    }),
                    view: running.map(|_| View::of_ordinals(o, up.iter().copied())),
                    client_input: Some(self.client_input),
                    new_pod: PodAdmission::Admitted,
                    ..MemberObs::default()
                };
                (o, m)
            })
            .collect()
    }

    /// Carry out what the operator asked: labels set, pods deleted (terminating), pods created
    /// (on the new image, traffic off while an upgrade is recorded, as the shell builds them).
    fn apply(&mut self, d: &Decision) {
        let upgrading = d.memory.upgrade().is_some();
        for a in &d.actions {
            match *a {
                Action::SetClientTraffic { ordinal, on } => {
                    if let Some(Some(p)) = self.pods.get_mut(&ordinal) {
                        p.1 = !on;
                    }
                }
                Action::DeletePod(o) => {
                    if let Some(Some(p)) = self.pods.get_mut(&o) {
                        p.2 = true;
                    }
                }
                Action::Drain(o) => {
                    self.drained.insert(o);
                }
                Action::CheckPod(_) => {}
                Action::CreatePod(o) => {
                    self.drained.remove(&o);
                    self.pods.insert(o, Some((true, upgrading, false)));
                    self.unready.insert(o, 3);
                }
                ref other => panic!("unexpected action {other:?}"),
            }
        }
    }

    /// Terminating pods are gone.
    fn reap(&mut self) {
        self.unready.retain(|_, n| {
            *n -= 1;
            *n > 0
        });
        if self.slow_exit {
            return;
        }
        for p in self.pods.values_mut() {
            if p.is_some_and(|(_, _, t)| t) {
                *p = None;
            }
        }
    }
}

fn active() -> Memory {
    let settled = Sample::new(0, 0, T0 - 60_000);
    Memory {
        members: (0..3).collect(),
        phases: (0..3).map(|o| (o, MemberPhase::Active)).collect(),
        samples: (0..3).map(|o| (o, settled)).collect(),
        ..Memory::default()
    }
}

fn reasons(d: &Decision) -> Vec<&'static str> {
    d.notes.iter().map(|n| n.reason.as_str()).collect()
}

/// Passes every 2 s (a round begun every other pass) until `until` holds of a decision, or
/// `limit` passes; returns the decisions.
fn run(
    spec: &ClusterSpec,
    memory: &mut Memory,
    world: &mut World,
    now: &mut Millis,
    limit: usize,
    until: impl Fn(&Decision) -> bool,
) -> Vec<Decision> {
    let mut out = Vec::new();
    for i in 0..limit {
        world.reap();
        let d = decide(&Input {
            spec,
            memory,
            observed: &world.observed(),
            now: *now,
        });
        world.apply(&d);
        *memory = d.memory.clone();
        *now += 2_000;
        if i % 2 == 1 {
            world.rounds += 1;
        }
        let stop = until(&d);
        out.push(d);
        if stop {
            break;
        }
    }
    out
}

#[test]
fn a_whole_cluster_upgrade_cuts_traffic_flushes_stops_all_then_starts_all() {
    let spec = spec(true);
    let (mut memory, mut world, mut now) = (active(), World::old(), T0);
    // Clients wrote until the cut.
    world.client_input = 4_096;

    // It starts: every member's client traffic is cut, nothing is deleted yet.
    let d = &run(&spec, &mut memory, &mut world, &mut now, 1, |_| true)[0];
    world.client_input = 0;
    assert_eq!(reasons(d), ["WholeClusterUpgradeStarted"]);
    assert_eq!(
        d.memory.upgrade().map(|u| u.step),
        Some(UpgradeStep::Flushing)
    );
    assert_eq!(d.phase, ClusterPhase::Updating);
    assert_eq!(
        d.actions,
        (0..3)
            .map(|o| Action::SetClientTraffic {
                ordinal: o,
                on: false
            })
            .collect::<Vec<_>>()
    );
    assert!(
        d.memory
            .phases
            .values()
            .all(|p| *p == MemberPhase::Draining)
    );

    // The flush holds until every member's own rounds covered what it holds; then every pod
    // is deleted at once.
    let flush = run(&spec, &mut memory, &mut world, &mut now, 200, |d| {
        !d.actions.is_empty()
    });
    let stop = flush.last().unwrap();
    assert!(
        flush.len() > 3,
        "the flush waited for anti-entropy rounds ({} passes)",
        flush.len()
    );
    assert!(
        flush[..flush.len() - 1].iter().all(|d| d
            .hold
            .as_ref()
            .is_some_and(|h| h.moving == Moving::AntiEntropy)),
        "the flush held on the members' own rounds"
    );
    assert_eq!(reasons(stop), ["WholeClusterStopping"]);
    assert_eq!(
        stop.actions,
        (0..3).map(Action::DeletePod).collect::<Vec<_>>()
    );
    assert!(stop.memory.hibernated);

    // While any old pod is left, no new pod is created; then all three start at once, with
    // their traffic still off, and no member is counted as failed meanwhile.
    world.slow_exit = true;
    for d in run(&spec, &mut memory, &mut world, &mut now, 3, |_| false) {
        assert_eq!(
            d.memory.upgrade().map(|u| u.step),
            Some(UpgradeStep::Stopping)
        );
        assert_eq!(d.actions, [], "nothing created while an old pod is left");
        assert_eq!(d.mass_failure, None);
        assert_eq!(d.phase, ClusterPhase::Updating);
    }
    world.slow_exit = false;
    let starting = run(&spec, &mut memory, &mut world, &mut now, 10, |d| {
        d.actions.iter().any(|a| matches!(a, Action::CreatePod(_)))
    });
    assert_eq!(
        starting.len(),
        2,
        "the step moves on, then every pod starts"
    );
    for d in &starting {
        assert_eq!(d.mass_failure, None);
        assert_eq!(d.phase, ClusterPhase::Updating);
    }
    let create = starting.last().unwrap();
    assert_eq!(
        create.actions,
        (0..3).map(Action::CreatePod).collect::<Vec<_>>()
    );
    assert_eq!(
        create.memory.upgrade().map(|u| u.step),
        Some(UpgradeStep::Starting)
    );
    assert!(
        !reasons(create).contains(&"Woken"),
        "the start is the upgrade's"
    );

    // Once the new members are ready and the gate passes, traffic returns: the upgrade is
    // done, with its down time in the Event.
    let end = run(&spec, &mut memory, &mut world, &mut now, 20, |d| {
        d.memory.upgrade().is_none()
    });
    assert!(end.len() > 2, "it waited for the new members to turn ready");
    for d in &end {
        assert_eq!(d.mass_failure, None, "members starting on purpose");
        assert_eq!(
            d.actions.len(),
            if d.memory.upgrade().is_some() { 0 } else { 3 }
        );
    }
    let done = end.last().unwrap();
    assert_eq!(reasons(done), ["WholeClusterUpgraded"]);
    assert!(done.notes[0].message.contains("members down"));
    assert_eq!(
        done.actions,
        (0..3)
            .map(|o| Action::SetClientTraffic {
                ordinal: o,
                on: true
            })
            .collect::<Vec<_>>()
    );
    assert!(
        world
            .pods
            .values()
            .all(|p| p.is_some_and(|(new, _, _)| new))
    );
    // Nothing more to do.
    let after = run(&spec, &mut memory, &mut world, &mut now, 1, |_| true);
    assert_eq!(after[0].actions, []);
    assert_eq!(after[0].phase, ClusterPhase::Healthy);
}

#[test]
fn without_the_strategy_a_new_image_rolls_one_member_at_a_time() {
    let spec = spec(false);
    let (mut memory, mut world, mut now) = (active(), World::old(), T0);
    let d = &run(&spec, &mut memory, &mut world, &mut now, 1, |_| true)[0];
    assert_eq!(reasons(d), ["UpdateStarted"]);
    assert!(d.memory.roll().is_some());
    assert!(d.memory.upgrade().is_none());
}

#[test]
fn pooled_writers_hold_the_flush_15s_then_the_stop_closes_them_and_the_start_hands_on() {
    let spec = spec(true);
    let (mut memory, mut world, mut now) = (active(), World::old(), T0);
    world.client_input = 4_096;
    let ds = run(&spec, &mut memory, &mut world, &mut now, 60, |d| {
        d.actions.iter().any(|a| matches!(a, Action::DeletePod(_)))
    });
    let stop = ds.last().unwrap();
    assert_eq!(reasons(stop), ["WholeClusterStopping"]);
    let waited = (ds.len() as i64 - 1) * 2_000;
    assert!(
        (15_000..=20_000).contains(&waited),
        "held {waited} ms for the pooled writers"
    );
    assert!(
        ds[1..ds.len() - 1]
            .iter()
            .all(|d| d.hold.as_ref().map(|h| h.moving) == Some(Moving::ClientTraffic))
    );
    assert!(
        stop.progress
            .as_deref()
            .unwrap_or("")
            .contains("connections opened before the cut")
    );
    // The stop closed their connections.
    world.client_input = 0;
    let back = run(&spec, &mut memory, &mut world, &mut now, 60, |d| {
        d.memory.upgrade().is_none()
    });
    let started = back
        .iter()
        .position(|d| d.actions.iter().any(|a| matches!(a, Action::CreatePod(_))))
        .unwrap();
    // Ready 3 passes after creation; then the members' own rounds since their restart.
    let done = back.len() - 1;
    assert!(
        done - started > 6,
        "traffic returned {} passes after the start: before the rounds",
        done - started
    );
    assert!(
        back[started + 4..done].iter().any(|d| d
            .progress
            .as_deref()
            .unwrap_or("")
            .contains("anti-entropy")),
        "the start waited on the members' own anti-entropy rounds"
    );
    assert_eq!(reasons(&back[done]), ["WholeClusterUpgraded"]);
}

#[test]
fn the_flush_holds_while_a_member_takes_client_input_and_the_stop_waits_for_it() {
    let spec = spec(true);
    let (mut memory, mut world, mut now) = (active(), World::old(), T0);
    // Input the node counts but no write command (a client sending reads, or unknown bytes):
    // nothing says the stop would close it, so the flush holds.
    world.client_input = 4_096;
    world.writes_counted = false;
    let ds = run(&spec, &mut memory, &mut world, &mut now, 60, |_| false);
    assert!(
        ds.iter()
            .all(|d| !d.actions.contains(&Action::DeletePod(0)))
    );
    let last = ds.last().unwrap();
    assert_eq!(
        last.memory.upgrade().map(|u| u.step),
        Some(UpgradeStep::Flushing)
    );
    assert_eq!(
        last.hold.as_ref().map(|h| h.moving),
        Some(Moving::ClientTraffic)
    );
    // Held past the hand-off timeout (60 s): Blocked, saying what.
    let b = last.blocked.as_ref().expect("blocked after the timeout");
    assert_eq!(b.reason, BlockReason::HandoffTimeout);
    assert!(b.message.contains("whole-cluster upgrade"), "{}", b.message);
}

#[test]
fn a_pause_or_a_fence_holds_the_upgrade_before_anything_is_touched() {
    for (paused, fenced, reason) in [
        (true, false, BlockReason::Paused),
        (false, true, BlockReason::Fenced),
    ] {
        let spec = ClusterSpec {
            paused,
            fenced: if fenced {
                [1].into()
            } else {
                Default::default()
            },
            ..spec(true)
        };
        let (mut memory, mut world, mut now) = (active(), World::old(), T0);
        if fenced {
            world.pods.insert(1, None);
        }
        let d = &run(&spec, &mut memory, &mut world, &mut now, 1, |_| true)[0];
        assert_eq!(d.memory.disruption, None);
        assert_eq!(d.blocked.as_ref().map(|b| b.reason), Some(reason));
        assert!(
            d.blocked
                .as_ref()
                .unwrap()
                .message
                .contains("whole-cluster upgrade")
        );
        assert!(!d.actions.iter().any(|a| matches!(
            a,
            Action::DeletePod(0 | 2) | Action::SetClientTraffic { .. } | Action::Drain(_)
        )));
    }
}

/// Back to an older release: held before any member restarts when the tag names it, after the
/// first member when only what it reports does; allowed with `allowDowngrade`.
#[test]
fn a_downgrade_restarts_no_member_unless_allowed() {
    for whole in [true, false] {
        let held = ClusterSpec {
            image_release: Some("0.2.0".into()),
            ..spec(whole)
        };
        let (mut memory, mut world, mut now) = (active(), World::old(), T0);
        world.releases = ("0.3.0", "0.2.0");
        let ds = run(&held, &mut memory, &mut world, &mut now, 5, |_| false);
        for d in &ds {
            assert_eq!(d.memory.disruption, None, "whole {whole}");
            assert_eq!(d.actions, [], "whole {whole}");
            let b = d.blocked.as_ref().unwrap();
            assert_eq!(b.reason, BlockReason::DowngradeNotAllowed);
            assert!(
                b.message
                    .contains("runs marekvs 0.2.0 where demo-0, demo-1, demo-2 run 0.3.0"),
                "{}",
                b.message
            );
        }
        assert_eq!(reasons(&ds[0]), ["UpdateBlocked"]);
        // Allowed: it goes ahead.
        let allowed = ClusterSpec {
            allow_downgrade: true,
            ..held
        };
        let d = &run(&allowed, &mut memory, &mut world, &mut now, 1, |_| true)[0];
        assert!(d.memory.disruption.is_some(), "whole {whole}");
        assert_eq!(d.blocked, None);
    }
    // A tag that names no release, rolling: the first member restarts, then reports the older
    // release, and the next is held.
    let untagged = spec(false);
    let (mut memory, mut world, mut now) = (active(), World::old(), T0);
    world.releases = ("0.3.0", "0.2.0");
    let ds = run(&untagged, &mut memory, &mut world, &mut now, 200, |d| {
        d.blocked
            .as_ref()
            .is_some_and(|b| b.reason == BlockReason::DowngradeNotAllowed)
    });
    let last = ds.last().unwrap();
    assert!(
        last.blocked.is_some(),
        "held once a member reported the older release"
    );
    let new_pods = world
        .pods
        .values()
        .filter(|p| p.is_some_and(|(new, _, _)| new))
        .count();
    assert_eq!(new_pods, 1, "one member restarted, no more");
    assert_eq!(last.memory.disruption, None);
}

/// The image changes again while the members start: a pod created on the newer image beside
/// one on the earlier would mesh two releases. No pod is created beside them; every member
/// stops again, and all start on the newer image.
#[test]
fn an_image_changed_again_while_members_start_stops_them_all_again() {
    let spec = spec(true);
    let (mut memory, mut world, mut now) = (active(), World::old(), T0);
    let created = run(&spec, &mut memory, &mut world, &mut now, 400, |d| {
        d.actions.iter().any(|a| matches!(a, Action::CreatePod(_)))
    });
    let d = created.last().unwrap();
    assert_eq!(
        d.memory.upgrade().map(|u| u.step),
        Some(UpgradeStep::Starting)
    );
    // Members 0 and 1 started on what is now the earlier image; member 2's pod is gone.
    for o in [0, 1] {
        world.pods.get_mut(&o).unwrap().as_mut().unwrap().0 = false;
    }
    world.pods.insert(2, None);
    let d = &run(&spec, &mut memory, &mut world, &mut now, 1, |_| true)[0];
    assert_eq!(d.actions, [Action::DeletePod(0), Action::DeletePod(1)]);
    assert_eq!(
        d.memory.upgrade().map(|u| u.step),
        Some(UpgradeStep::Stopping)
    );
    assert!(
        d.progress
            .as_deref()
            .is_some_and(|p| p.contains("the member image changed again while demo-0, demo-1")),
        "{:?}",
        d.progress
    );
    // Once they are gone, all three start on the newer image, and the upgrade completes.
    let end = run(&spec, &mut memory, &mut world, &mut now, 60, |d| {
        d.memory.upgrade().is_none()
    });
    assert!(end.iter().all(|d| {
        d.actions
            .iter()
            .all(|a| !matches!(a, Action::CreatePod(_)) || d.actions.len() == 3)
    }));
    assert_eq!(reasons(end.last().unwrap()), ["WholeClusterUpgraded"]);
    assert!(
        world
            .pods
            .values()
            .all(|p| p.is_some_and(|(new, _, _)| new))
    );
}
