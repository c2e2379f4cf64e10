//! The runbook as one pure function: from what was observed and what was remembered, decide
//! what to remember, what to do, and how to report it.
//!
//! - Scale up: every missing member at once, lowest free ordinals first (adding members never
//!   removes copies).
//! - Scale down: one member at a time, never below replicationFactor + 1, and only while every
//!   member is ready, scraped, and the hand-off gate passes. The victim is recorded (in the
//!   returned memory, which the shell writes to status first) before anything is done to it;
//!   then: drain → hand-off gate (victim still serving) → delete its pod → hand-off gate
//!   (views without it, re-replication quiet) → drop it from the members.
//! - Replacement: a member without a pod gets a new pod on its PVC; without a PVC, a fresh
//!   PVC (it rejoins empty). A PVC that is still terminating delays the re-creation.

use std::collections::{BTreeMap, BTreeSet};

use crate::handoff::{HandoffGate, update_samples};
use crate::plan::{choose_victim, free_ordinals};
use crate::types::*;

/// How soon to look again. While a removal or a restart is waiting on a hand-off gate, the
/// pace bounds how late the next step starts after the cluster became safe (a counter's last
/// move is seen at most this late, and the quiet window's end at most this late again): 250 ms
/// keeps that under 1 s. Other busy states (members being created or joining) are also woken
/// by pod events, so once a second is enough; a quiet cluster's health is polled every 10 s.
pub const REQUEUE_GATE_MS: Millis = 250;
pub const REQUEUE_BUSY_MS: Millis = 1_000;
pub const REQUEUE_IDLE_MS: Millis = 10_000;

pub struct Input<'a> {
    pub spec: &'a ClusterSpec,
    pub memory: &'a Memory,
    /// Every ordinal that has a pod or a PVC, or is remembered as a member.
    pub observed: &'a BTreeMap<u32, MemberObs>,
    pub now: Millis,
}

pub fn decide(input: &Input) -> Decision {
    let Input {
        spec,
        memory,
        observed,
        now,
    } = *input;
    let now = now.max(0);
    let empty = MemberObs::default();
    let obs = |o: u32| observed.get(&o).unwrap_or(&empty);
    let mut notes: Vec<Note> = Vec::new();
    let mut actions: BTreeSet<Action> = BTreeSet::new();
    let mut progress: Vec<String> = Vec::new();
    let samples = update_samples(&memory.samples, observed, now);
    // The hand-off gate over `ordinals`, every view expected to hold `expected_view` members.
    let gate =
        |ordinals: &mut dyn Iterator<Item = u32>, expected_view: usize, since: Option<Millis>| {
            HandoffGate {
                members: ordinals.map(|o| (o, obs(o))).collect(),
                samples: &samples,
                expected_view: expected_view as u64,
                since,
                now,
                settle_ms: spec.settle_ms,
                name: &spec.name,
            }
            .check()
        };

    // Members: what status remembers, plus any ordinal that has a pod (adopted: a running
    // node is part of the data plane whatever the status says).
    let mut members: BTreeSet<u32> = memory.members.clone();
    for (o, m) in observed {
        if m.pod.is_some() && !members.contains(o) {
            members.insert(*o);
            notes.push(Note {
                kind: EventKind::Normal,
                reason: "MemberAdopted",
                member: None,
                message: format!("adopted {} (its pod exists)", spec.member_name(*o)),
            });
        }
    }
    let mut removal = memory.removal().cloned();
    if let Some(r) = &removal
        && !members.contains(&r.ordinal)
    {
        removal = None; // stale record
    }
    let mut roll = memory.roll().cloned();
    if let Some(r) = &roll
        && !members.contains(&r.ordinal)
    {
        roll = None; // stale record
    }
    // Disruptive actions that `spec.paused` holds back, in words.
    let mut held: Vec<String> = Vec::new();
    let target = spec.target() as usize;

    // Cancel a removal when the spec grew back: the victim stays. A drained node cannot be
    // un-drained, so its pod is recycled below (it restarts on its own PVC and rejoins).
    if let Some(r) = &removal
        && members.len() <= target
    {
        notes.push(Note {
            kind: EventKind::Normal,
            reason: "RemovalCancelled",
            member: None,
            message: format!(
                "spec.nodes grew back to {}: {} stays; if it was drained it restarts on its own volume",
                spec.nodes,
                spec.member_name(r.ordinal)
            ),
        });
        removal = None;
    }

    // Scale up: all missing members at once, lowest free ordinals first.
    let mut created: BTreeSet<u32> = BTreeSet::new();
    if removal.is_none() && members.len() < target {
        let want = target - members.len();
        let taken: BTreeSet<u32> = members
            .iter()
            .copied()
            .chain(observed.keys().filter(|o| obs(**o).pod.is_some()).copied())
            .collect();
        for o in free_ordinals(&taken, &spec.remove_first, want) {
            members.insert(o);
            created.insert(o);
            notes.push(Note {
                kind: EventKind::Normal,
                reason: "MemberCreated",
                member: None,
                message: format!(
                    "creating {}{}",
                    spec.member_name(o),
                    if obs(o).pvc.is_some() {
                        " on its existing volume"
                    } else {
                        ""
                    }
                ),
            });
        }
    }

    let victim = removal.as_ref().map(|r| r.ordinal);

    // Children of every member: PVC first, then the pod on it.
    let mut recycle: Vec<u32> = Vec::new();
    for &o in &members {
        let m = obs(o);
        let is_victim = Some(o) == victim;
        let handed_off = removal
            .as_ref()
            .is_some_and(|r| r.step >= RemovalStep::Deleting);
        if is_victim && handed_off {
            continue; // the victim's pod is not re-created once its data was handed off
        }
        let rolling = roll.as_ref().is_some_and(|r| r.ordinal == o);
        let pvc_ok = match &m.pvc {
            None => {
                actions.insert(Action::CreatePvc(o));
                true
            }
            // A member moving to a fresh volume gets its new pod only on the new volume.
            Some(p) if rolling && p.outdated => false,
            Some(p) => !p.terminating,
        };
        match &m.pod {
            None if pvc_ok => {
                actions.insert(Action::CreatePod(o));
                if !created.contains(&o) && !rolling {
                    notes.push(Note {
                        kind: EventKind::Normal,
                        reason: "MemberReplaced",
                        member: Some(o),
                        message: format!(
                            "{} has no pod: re-creating it {}",
                            spec.member_name(o),
                            if m.pvc.is_some() {
                                "on its own volume"
                            } else {
                                "on a fresh volume (it rejoins empty)"
                            }
                        ),
                    });
                }
            }
            None if !rolling => progress.push(format!(
                "waiting for the old volume of {} to be deleted",
                spec.member_name(o)
            )),
            None => {}
            Some(p) if p.drained && !p.terminating && !rolling => recycle.push(o),
            Some(_) => {}
        }
    }

    // A drained member that is no longer leaving (the removal was cancelled) is restarted so
    // it rejoins Active on its own volume: one at a time, never beside another pod going away.
    let other_terminating = members
        .iter()
        .any(|o| obs(*o).pod.as_ref().is_some_and(|p| p.terminating));
    if removal.is_none()
        && !other_terminating
        && let Some(o) = recycle.first()
    {
        if spec.paused {
            held.push(format!("restarting the drained {}", spec.member_name(*o)));
        } else {
            actions.insert(Action::DeletePod(*o));
        }
        progress.push(format!(
            "restarting {}: it was drained for a removal that was cancelled",
            spec.member_name(*o)
        ));
    }

    // Member phases.
    let mut phases: BTreeMap<u32, MemberPhase> = BTreeMap::new();
    for &o in &members {
        let m = obs(o);
        let prev = memory.phases.get(&o).copied();
        let phase = if let Some(r) = removal.as_ref().filter(|r| r.ordinal == o) {
            if r.step <= RemovalStep::HandingOff {
                MemberPhase::Draining
            } else {
                MemberPhase::Leaving
            }
        } else if let Some(r) = roll.as_ref().filter(|r| r.ordinal == o) {
            if r.step <= RollStep::HandingOff {
                MemberPhase::Draining
            } else {
                MemberPhase::Updating
            }
        } else if created.contains(&o) {
            MemberPhase::Joining
        } else {
            match &m.pod {
                None if prev == Some(MemberPhase::Joining) => MemberPhase::Joining,
                None => MemberPhase::Replacing,
                Some(p) if p.terminating || p.drained => MemberPhase::Replacing,
                Some(p) if p.ready && m.scrape.is_some() => MemberPhase::Active,
                Some(_) => match prev {
                    Some(MemberPhase::Joining) => MemberPhase::Joining,
                    Some(MemberPhase::Replacing) => MemberPhase::Replacing,
                    _ if m.pvc.is_none() => MemberPhase::Replacing,
                    _ => MemberPhase::Unready,
                },
            }
        };
        phases.insert(o, phase);
    }
    let replacing = phases.values().any(|p| *p == MemberPhase::Replacing);
    let joining = phases.values().any(|p| *p == MemberPhase::Joining);

    let mut blocked: Option<Blocked> = None;
    let mut completed: Option<u32> = None;

    // Advance the removal in progress.
    if let Some(r) = removal.as_mut() {
        let v = r.ordinal;
        let vm = obs(v);
        let name = spec.member_name(v);
        let step_age = now - r.step_started_at;
        let advance = |r: &mut Removal, step: RemovalStep| {
            r.step = step;
            r.step_started_at = now;
        };
        match r.step {
            RemovalStep::Draining => match &vm.pod {
                None => {
                    notes.push(lost_before_hand_off(&name));
                    advance(r, RemovalStep::Draining);
                }
                Some(p) if p.drained => {
                    notes.push(Note {
                        kind: EventKind::Normal,
                        reason: "Draining",
                        member: None,
                        message: format!("{name} drained: handing its data off"),
                    });
                    advance(r, RemovalStep::HandingOff);
                }
                Some(_) if spec.paused => held.push(format!("draining {name}")),
                Some(_) => {
                    actions.insert(Action::Drain(v));
                    progress.push(format!("draining {name}"));
                }
            },
            RemovalStep::HandingOff => {
                if vm.pod.is_none() {
                    notes.push(lost_before_hand_off(&name));
                    advance(r, RemovalStep::Draining);
                } else if vm
                    .pod
                    .as_ref()
                    .is_some_and(|p| !p.drained && !p.terminating)
                {
                    // Its node restarted since the drain and is a placement candidate again:
                    // the others may have handed its data back. Drain again, gate again.
                    notes.push(restarted_while_draining(&name));
                    advance(r, RemovalStep::Draining);
                } else {
                    // Every member, the victim too: it must still be up and serving as the
                    // source of the copies (a crashed victim stalls them silently).
                    match gate(
                        &mut members.iter().copied(),
                        members.len(),
                        Some(r.step_started_at),
                    ) {
                        Ok(()) if spec.paused => held.push(format!("deleting the pod of {name}")),
                        Ok(()) => {
                            advance(r, RemovalStep::Deleting);
                            actions.insert(Action::DeletePod(v));
                        }
                        Err(b) => {
                            progress.push(format!("handing off {name}: {}", b.message));
                            if step_age > spec.handoff_timeout_ms {
                                blocked = Some(timeout(
                                    &format!("removing {name}"),
                                    "hand-off before deleting its pod",
                                    step_age,
                                    &b,
                                ));
                            }
                        }
                    }
                }
            }
            RemovalStep::Deleting => match &vm.pod {
                None => advance(r, RemovalStep::Settling),
                Some(p) if !p.drained && !p.terminating => {
                    notes.push(restarted_while_draining(&name));
                    advance(r, RemovalStep::Draining);
                }
                Some(p) => {
                    if p.terminating {
                        progress.push(format!("waiting for {name} to flush and exit"));
                    } else if spec.paused {
                        held.push(format!("deleting the pod of {name}"));
                    } else {
                        actions.insert(Action::DeletePod(v));
                        progress.push(format!("waiting for {name} to flush and exit"));
                    }
                }
            },
            RemovalStep::Settling => {
                match gate(
                    &mut members.iter().copied().filter(|o| *o != v),
                    members.len() - 1,
                    Some(r.step_started_at),
                ) {
                    Ok(()) => completed = Some(v),
                    Err(b) => {
                        progress.push(format!("settling after {name} left: {}", b.message));
                        if step_age > spec.handoff_timeout_ms {
                            blocked = Some(timeout(
                                &format!("removing {name}"),
                                "hand-off after its pod was deleted",
                                step_age,
                                &b,
                            ));
                        }
                    }
                }
            }
        }
    }
    if let Some(v) = completed {
        members.remove(&v);
        phases.remove(&v);
        removal = None;
        notes.push(Note {
            kind: EventKind::Normal,
            reason: "MemberRemoved",
            member: None,
            message: format!(
                "{} removed; every remaining view converged and re-replication settled{}",
                spec.member_name(v),
                if spec.reclaim_pvcs {
                    "; deleting its volume"
                } else {
                    "; its volume is kept"
                }
            ),
        });
        if spec.reclaim_pvcs && obs(v).pvc.is_some() && !spec.paused {
            actions.insert(Action::DeletePvc(v));
        }
    }

    // Advance the rolling update in progress.
    let mut rolled: Option<u32> = None;
    if let Some(r) = roll.as_mut() {
        let o = r.ordinal;
        let m = obs(o);
        let name = spec.member_name(o);
        let step_age = now - r.step_started_at;
        let advance = |r: &mut Roll, step: RollStep| {
            r.step = step;
            r.step_started_at = now;
        };
        if m.pod.is_none() && r.step != RollStep::Rejoining {
            // Its pod is gone (deleted by this step or by hand): a new one is created above.
            advance(r, RollStep::Rejoining);
            notes.push(Note {
                kind: EventKind::Normal,
                reason: "MemberRestarting",
                member: None,
                message: format!("re-creating {name} with the current spec on its own volume"),
            });
        }
        if r.step == RollStep::Rejoining && m.pod.is_some() {
            // It runs again on its volume and may own data again: the hand-off no longer holds.
            r.handed_off_pvc = None;
        }
        let cancelled = r.step == RollStep::Draining
            && m.pod.as_ref().is_some_and(|p| !p.outdated && !p.drained)
            && !m.pvc.as_ref().is_some_and(|v| v.outdated);
        if cancelled {
            // The spec went back to what this member runs before it was drained.
            notes.push(Note {
                kind: EventKind::Normal,
                reason: "UpdateCancelled",
                member: None,
                message: format!("{name} already runs the current spec; not restarting it"),
            });
        }
        let gate_failed =
            |b: Blocked, what: &str, progress: &mut Vec<String>, blocked: &mut Option<Blocked>| {
                progress.push(format!("updating {name}: {}", b.message));
                if step_age > spec.handoff_timeout_ms {
                    *blocked = Some(timeout(&format!("updating {name}"), what, step_age, &b));
                }
            };
        match r.step {
            _ if cancelled => {}
            RollStep::Draining => match &m.pod {
                Some(p) if p.drained => {
                    notes.push(Note {
                        kind: EventKind::Normal,
                        reason: "Draining",
                        member: None,
                        message: format!("{name} drained before its restart: handing its data off"),
                    });
                    advance(r, RollStep::HandingOff);
                }
                Some(_) if spec.paused => held.push(format!("draining {name} for the update")),
                Some(_) => {
                    actions.insert(Action::Drain(o));
                    progress.push(format!(
                        "draining {name} before restarting it with the current spec"
                    ));
                }
                None => {}
            },
            RollStep::HandingOff
                if m.pod.as_ref().is_some_and(|p| !p.drained && !p.terminating) =>
            {
                notes.push(restarted_while_draining(&name));
                advance(r, RollStep::Draining);
            }
            // Every member, this one too: it must still be up as the source of the copies.
            RollStep::HandingOff => match gate(
                &mut members.iter().copied(),
                members.len(),
                Some(r.step_started_at),
            ) {
                Ok(()) if spec.paused => held.push(format!("restarting {name}")),
                Ok(()) => {
                    advance(r, RollStep::Deleting);
                    r.handed_off_pvc = m.pvc.as_ref().map(|v| v.uid.clone());
                    actions.insert(Action::DeletePod(o));
                }
                Err(b) => gate_failed(
                    b,
                    "hand-off before its restart",
                    &mut progress,
                    &mut blocked,
                ),
            },
            RollStep::Deleting => match &m.pod {
                Some(p) if p.terminating => {
                    progress.push(format!("waiting for {name} to flush and exit"))
                }
                Some(p) if p.drained => {
                    if spec.paused {
                        held.push(format!("restarting {name}"));
                    } else {
                        actions.insert(Action::DeletePod(o));
                    }
                }
                Some(p) if p.outdated || m.pvc.as_ref().is_some_and(|v| v.outdated) => {
                    notes.push(restarted_while_draining(&name));
                    advance(r, RollStep::Draining);
                }
                _ => advance(r, RollStep::Rejoining),
            },
            RollStep::Rejoining => match &m.pod {
                None => match &m.pvc {
                    // Its data was handed off: the old volume can go, a fresh one replaces it.
                    Some(v)
                        if v.outdated
                            && !v.terminating
                            && r.handed_off_pvc.as_deref() == Some(v.uid.as_str()) =>
                    {
                        if spec.paused {
                            held.push(format!("replacing the volume of {name}"));
                        } else {
                            actions.insert(Action::DeletePvc(o));
                            progress.push(format!("replacing the volume of {name}"));
                        }
                    }
                    Some(v) if v.outdated && !v.terminating => {
                        // Its pod went before the hand-off: keep its data, restart it on it.
                        actions.insert(Action::CreatePod(o));
                        progress.push(format!(
                            "{name} lost its pod before its data was handed off: restarting it on its old volume"
                        ));
                    }
                    Some(v) if v.terminating => {
                        progress.push(format!("waiting for the old volume of {name} to go"))
                    }
                    _ => progress.push(format!("re-creating {name} with the current spec")),
                },
                Some(p) if p.terminating => {
                    progress.push(format!("waiting for the old pod of {name} to go"))
                }
                // The spec changed again while it was out of service: it holds nothing the
                // others rely on (they took its data over before it was deleted).
                Some(p) if p.outdated && !p.ready => {
                    if spec.paused {
                        held.push(format!("restarting {name} again"));
                    } else {
                        actions.insert(Action::DeletePod(o));
                    }
                }
                Some(_) => match gate(
                    &mut members.iter().copied(),
                    members.len(),
                    Some(r.step_started_at),
                ) {
                    Ok(()) => rolled = Some(o),
                    Err(b) => {
                        gate_failed(b, "rejoin after its restart", &mut progress, &mut blocked)
                    }
                },
            },
        }
        if cancelled {
            roll = None;
        }
    }
    if let Some(o) = rolled {
        roll = None;
        notes.push(Note {
            kind: EventKind::Normal,
            reason: "MemberUpdated",
            member: None,
            message: format!(
                "{} runs the current spec; the cluster is fully replicated again",
                spec.member_name(o)
            ),
        });
    }

    // Start the next removal, if one is wanted and every precondition holds.
    let creating = !created.is_empty()
        || actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod(_) | Action::CreatePvc(_)));
    if removal.is_none() && roll.is_none() && completed.is_none() && members.len() > target {
        let pre = if spec.paused {
            Err(Blocked {
                reason: BlockReason::Paused,
                message: format!(
                    "spec.paused is set: holding the scale-down from {} to {target} members",
                    members.len()
                ),
            })
        } else if creating {
            Err(Blocked {
                reason: BlockReason::Replacing,
                message: "members are being (re-)created".into(),
            })
        } else if replacing {
            Err(Blocked {
                reason: BlockReason::Replacing,
                message: "a member is being replaced; waiting until it is Active and the cluster fully replicated".into(),
            })
        } else {
            gate(&mut members.iter().copied(), members.len(), None)
        };
        match pre {
            Ok(()) => {
                let (o, reason) = choose_victim(&members, &spec.remove_first, |o| {
                    obs(o)
                        .pod
                        .as_ref()
                        .is_some_and(|p| p.ready && !p.terminating)
                });
                removal = Some(Removal {
                    ordinal: o,
                    reason,
                    step: RemovalStep::Draining,
                    started_at: now,
                    step_started_at: now,
                });
                phases.insert(o, MemberPhase::Draining);
                notes.push(Note {
                    kind: EventKind::Normal,
                    reason: "ScaleDownStarted",
                    member: None,
                    message: format!(
                        "removing {} ({}): {} → {} members",
                        spec.member_name(o),
                        match reason {
                            VictimReason::UserChosen => "listed in spec.removeMembers",
                            VictimReason::NotReady => "not ready",
                            VictimReason::HighestOrdinal => "highest ordinal",
                        },
                        members.len(),
                        members.len() - 1
                    ),
                });
            }
            Err(b) => blocked = Some(b),
        }
    }

    // Start the next rolling update: after any scale-down (only members that stay are
    // restarted), with the membership complete, highest outdated ordinal first.
    let outdated: Vec<u32> = members
        .iter()
        .copied()
        .filter(|o| {
            let m = obs(*o);
            m.pod.as_ref().is_some_and(|p| p.outdated)
                || m.pvc.as_ref().is_some_and(|v| v.outdated && !v.terminating)
        })
        .collect();
    if roll.is_none()
        && rolled.is_none()
        && removal.is_none()
        && completed.is_none()
        && blocked.is_none()
        && members.len() == target
        && !outdated.is_empty()
    {
        let pre = if spec.paused {
            Err(Blocked {
                reason: BlockReason::Paused,
                message: format!(
                    "spec.paused is set: holding the rolling update of {} outdated members",
                    outdated.len()
                ),
            })
        } else if creating || replacing {
            Err(Blocked {
                reason: BlockReason::Replacing,
                message: "a member is being (re-)created; waiting until it is Active and the cluster fully replicated".into(),
            })
        } else {
            gate(&mut members.iter().copied(), members.len(), None)
        };
        match pre {
            Ok(()) => {
                let o = *outdated.last().expect("not empty");
                roll = Some(Roll {
                    ordinal: o,
                    step: RollStep::Draining,
                    handed_off_pvc: None,
                    started_at: now,
                    step_started_at: now,
                });
                phases.insert(o, MemberPhase::Draining);
                notes.push(Note {
                    kind: EventKind::Normal,
                    reason: "UpdateStarted",
                    member: None,
                    message: format!(
                        "restarting {} with the current spec ({} of {} members outdated)",
                        spec.member_name(o),
                        outdated.len(),
                        members.len()
                    ),
                });
            }
            Err(b) => blocked = Some(b),
        }
    }
    if blocked.is_none() && !held.is_empty() {
        blocked = Some(Blocked {
            reason: BlockReason::Paused,
            message: format!("spec.paused is set: holding {}", held.join("; ")),
        });
    }

    // Reclaim volumes of ordinals that are not members, once the cluster is fully replicated.
    if spec.reclaim_pvcs
        && !spec.paused
        && roll.is_none()
        && removal.is_none()
        && members.len() == target
        && !replacing
        && !joining
    {
        let healthy = gate(&mut members.iter().copied(), members.len(), None).is_ok();
        if healthy {
            for (o, m) in observed {
                if !members.contains(o)
                    && m.pod.is_none()
                    && m.pvc.as_ref().is_some_and(|p| !p.terminating)
                {
                    actions.insert(Action::DeletePvc(*o));
                }
            }
        }
    }

    // Report.
    if let Some(b) = &blocked
        && memory.blocked != Some(b.reason)
    {
        notes.push(Note {
            kind: EventKind::Warning,
            reason: if b.reason == BlockReason::Paused {
                "Paused"
            } else if removal.is_some() || members.len() > target {
                "ScaleDownBlocked"
            } else {
                "UpdateBlocked"
            },
            message: format!("{}: {}", b.reason.as_str(), b.message),
            member: None,
        });
    }
    if blocked.is_none() && memory.blocked.is_some() {
        notes.push(Note {
            kind: EventKind::Normal,
            reason: "Unblocked",
            member: None,
            message: "the held step may proceed".into(),
        });
    }
    let all_active = phases.values().all(|p| *p == MemberPhase::Active);
    let phase = if blocked
        .as_ref()
        .is_some_and(|b| b.reason == BlockReason::Paused)
    {
        ClusterPhase::Paused
    } else if blocked.is_some() {
        ClusterPhase::Blocked
    } else if removal.is_some() || completed.is_some() {
        ClusterPhase::ScalingDown
    } else if roll.is_some() || rolled.is_some() {
        ClusterPhase::Updating
    } else if replacing {
        ClusterPhase::Replacing
    } else if joining || !created.is_empty() {
        ClusterPhase::ScalingUp
    } else if all_active && members.len() == target && outdated.is_empty() {
        ClusterPhase::Healthy
    } else {
        ClusterPhase::Reconciling
    };
    if phase == ClusterPhase::Healthy && actions.is_empty() && progress.is_empty() {
        // Healthy: nothing to say.
    } else if progress.is_empty() {
        match phase {
            ClusterPhase::ScalingUp => progress.push("new members are joining".into()),
            ClusterPhase::Replacing => progress.push("a member is being replaced".into()),
            ClusterPhase::Reconciling => {
                progress.push("waiting for members to become ready".into())
            }
            _ => {}
        }
    }
    // Members that are only waiting for their pod to appear or turn ready: the pod watch wakes
    // the cluster when that happens, so looking every second would only add scrapes (at 1,600
    // members coming up, 200 clusters a second, each scraping its members).
    let waiting_on_pods_only = matches!(
        phase,
        ClusterPhase::ScalingUp | ClusterPhase::Replacing | ClusterPhase::Reconciling
    ) && blocked.is_none()
        && actions.is_empty()
        && members.iter().all(|o| {
            phases.get(o) == Some(&MemberPhase::Active)
                || obs(*o).pod.as_ref().is_none_or(|p| !p.ready)
        });
    let busy = (phase != ClusterPhase::Healthy || !actions.is_empty()) && !waiting_on_pods_only;
    let gating = removal.is_some() || roll.is_some();
    Decision {
        memory: Memory {
            members,
            disruption: match (removal, roll) {
                (Some(r), None) => Some(Disruption::Removal(r)),
                (None, Some(r)) => Some(Disruption::Roll(r)),
                (None, None) => None,
                (Some(_), Some(_)) => unreachable!("a removal and a rolling update at once"),
            },
            samples,
            phases,
            blocked: blocked.as_ref().map(|b| b.reason),
        },
        actions: actions.into_iter().collect(),
        phase,
        blocked,
        progress: (!progress.is_empty()).then(|| progress.join("; ")),
        notes,
        requeue_ms: if gating {
            REQUEUE_GATE_MS
        } else if busy {
            REQUEUE_BUSY_MS
        } else {
            REQUEUE_IDLE_MS
        },
    }
}

fn lost_before_hand_off(name: &str) -> Note {
    Note {
        kind: EventKind::Warning,
        reason: "LostBeforeHandOff",
        member: None,
        message: format!(
            "{name} lost its pod before its data was handed off: re-creating it on its volume and draining it again"
        ),
    }
}

fn restarted_while_draining(name: &str) -> Note {
    Note {
        kind: EventKind::Warning,
        reason: "RestartedWhileDraining",
        member: None,
        message: format!(
            "{name} restarted after its drain and may own data again: draining it again, then waiting for a fresh hand-off"
        ),
    }
}

fn timeout(subject: &str, what: &str, age: Millis, cause: &Blocked) -> Blocked {
    Blocked {
        reason: BlockReason::HandoffTimeout,
        message: format!(
            "{subject}: {what} has not settled after {}s ({}); not proceeding",
            age / 1000,
            cause.message
        ),
    }
}
