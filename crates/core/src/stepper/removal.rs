//! Scale-down: advance the removal in progress one step, or start the next one.

use crate::handoff::{Coverage, GateHold, Leaver, covered};
use crate::plan::{choose_victim, removal_order};
use crate::types::*;

use super::{HeldBy, Pass, normal, restarted_while_draining};

fn enter(r: &mut Removal, step: RemovalStep, now: Millis) {
    r.step = step;
    r.step_started_at = now;
}

/// How long a drained victim may keep taking client writes, with its client traffic cut,
/// before the operator restarts it to close its connections: long enough for clients that
/// re-resolve their endpoints (and kube-proxy's rules) to have moved, far shorter than a
/// pooled connection's life.
pub const CUT_CONNECTIONS_AFTER_MS: Millis = 15_000;
/// How long after that restart the victim's pod may still be missing (it exits within 9 s and
/// is re-created at once) without being reported lost.
const CUT_RECREATION_MS: Millis = 60_000;

impl Pass<'_> {
    /// Advance the removal in progress.
    pub(super) fn advance_removal(&mut self) {
        let Some(Disruption::Removal(mut r)) = self
            .disruption
            .take_if(|d| matches!(d, Disruption::Removal(_)))
        else {
            return;
        };
        let name = self.spec.member_name(r.ordinal);
        match r.step {
            RemovalStep::Draining => self.drain_victim(&mut r, &name),
            RemovalStep::HandingOff => self.hand_off_victim(&mut r, &name),
            // Given up when its container started meanwhile: no removal is left in progress.
            RemovalStep::Deleting if r.reason == VictimReason::NeverStarted => {
                if !self.delete_never_started(&mut r, &name) {
                    return;
                }
            }
            RemovalStep::Deleting => self.delete_victim(&mut r, &name),
            // It held nothing: its pod gone, nothing is left to settle. In a mass failure no
            // member leaves the membership, this one neither. A pod seen again is deleted
            // again, as never started, or the removal is given up.
            RemovalStep::Settling if r.reason == VictimReason::NeverStarted => {
                if self.obs(r.ordinal).pod.is_some() {
                    enter(&mut r, RemovalStep::Deleting, self.now);
                    if !self.delete_never_started(&mut r, &name) {
                        return;
                    }
                } else if self.mass.is_none() {
                    self.complete_removal(&r);
                    return;
                } else {
                    self.held_back(
                        HeldBy::MassFailure,
                        format!("removing {name} from the membership"),
                    );
                }
            }
            RemovalStep::Settling => {
                if self.settled_without_victim(&r, &name) {
                    self.complete_removal(&r);
                    return;
                }
            }
        }
        self.disruption = Some(Disruption::Removal(r));
    }

    /// Calling `/drain` on the victim until its pod records it.
    fn drain_victim(&mut self, r: &mut Removal, name: &str) {
        match &self.obs(r.ordinal).pod {
            // Restarted to close its client connections a moment ago: not re-created yet.
            None if r
                .connections_cut_at
                .is_some_and(|t| self.now - t < CUT_RECREATION_MS) =>
            {
                self.progress
                    .push(format!("restarting {name} to close its client connections"));
            }
            None => {
                self.notes.push(lost_before_hand_off(name));
                enter(r, RemovalStep::Draining, self.now);
            }
            Some(p) if p.drained => {
                self.notes.push(normal(
                    EventReason::Draining,
                    format!("{name} drained: handing its data off"),
                ));
                enter(r, RemovalStep::HandingOff, self.now);
            }
            Some(_) => {
                if !self.hold(format!("draining {name}")) {
                    self.actions.insert(Action::Drain(r.ordinal));
                    self.progress.push(format!("draining {name}"));
                }
            }
        }
    }

    /// The victim is drained and still serving: delete its pod once the others hold its data.
    fn hand_off_victim(&mut self, r: &mut Removal, name: &str) {
        match &self.obs(r.ordinal).pod {
            // Gone since the operator restarted it to close its client connections: it comes
            // back on its own volume, to be drained and handed off again.
            None if r.connections_cut_at.is_some_and(|t| t >= r.step_started_at) => {
                self.progress
                    .push(format!("restarting {name} to close its client connections"));
                enter(r, RemovalStep::Draining, self.now);
                return;
            }
            None => {
                self.notes.push(lost_before_hand_off(name));
                enter(r, RemovalStep::Draining, self.now);
                return;
            }
            // Its node restarted since the drain and is a placement candidate again: the
            // others may have handed its data back. Drain again, gate again.
            Some(p) if !p.drained && !p.terminating => {
                self.notes.push(restarted_while_draining(name));
                enter(r, RemovalStep::Draining, self.now);
                return;
            }
            Some(_) => {}
        }
        // Every member, the victim too: it must still be up and serving as the source of the
        // copies (a crashed victim stalls them silently).
        let leaver = Leaver {
            ordinal: r.ordinal,
            traffic_cut: true,
            keeps_volume: false,
        };
        match self.gate_leaving(Some(r.step_started_at), leaver) {
            Ok(()) => {
                if !self.hold(format!("deleting the pod of {name}")) {
                    enter(r, RemovalStep::Deleting, self.now);
                    self.actions.insert(Action::DeletePod(r.ordinal));
                }
            }
            Err(h) if self.cut_client_connections(r, name, &h) => {}
            Err(h) => self.wait_on_removal_gate(
                h,
                &format!("handing off {name}"),
                "hand-off before deleting its pod",
                r,
            ),
        }
    }

    /// The victim still takes client writes over connections opened before its traffic was
    /// cut: a pooled client keeps its connections, and a marekvs node closes one only when its
    /// process exits (no `CLIENT KILL`, no idle timeout). So, once a removal and once the
    /// hand-off has waited `CUT_CONNECTIONS_AFTER_MS` with its label off, it is restarted on its
    /// own volume: its clients reconnect through the client Service, which no longer selects
    /// it, and what it took stays on its volume, which it comes back on to be drained and
    /// handed off again. Only while every member, the victim too, passes the gate's readiness,
    /// scrape, under-replication, views and bootstrap checks (one member down at a time) and
    /// nothing holds disruptive steps. A client writing to its pod address comes
    /// back with it: that one holds the removal, reported, until it stops.
    fn cut_client_connections(&mut self, r: &mut Removal, name: &str, h: &GateHold) -> bool {
        if r.connections_cut_at.is_some()
            || !self.restart_would_close_connections(r.ordinal, h, r.step_started_at)
            || self.hold(format!("restarting {name} to close its client connections"))
        {
            return false;
        }
        self.actions.insert(Action::DeletePod(r.ordinal));
        r.connections_cut_at = Some(self.now);
        self.note_connections_cut(r.ordinal, h, r.step_started_at, "its hand-off starts over");
        self.progress
            .push(format!("restarting {name} to close its client connections"));
        true
    }

    /// Whether member `o`'s hand-off (its step begun at `step_started`) is held only by
    /// client writes that a restart would stop: its client traffic label has been off for
    /// `CUT_CONNECTIONS_AFTER_MS` of the step, its pod is ready and not going, writes still
    /// arrive (so over connections opened before the label), and every member, `o` too, is
    /// up, scraped and settled, so that the restart is the only disruption. The caller
    /// decides whether what `o` took may stay on its volume meanwhile.
    pub(super) fn restart_would_close_connections(
        &self,
        o: u32,
        h: &GateHold,
        step_started: Millis,
    ) -> bool {
        let label_off = self
            .obs(o)
            .pod
            .as_ref()
            .is_some_and(|p| p.client_traffic_off && p.ready && !p.terminating);
        let writes_arrive = h.moving == Moving::ClientTraffic && h.rate_per_sec.is_some();
        label_off
            && writes_arrive
            && self.now - step_started >= CUT_CONNECTIONS_AFTER_MS
            && self.gate_all(None).is_ok()
    }

    /// The Event for a restart taken to close member `o`'s client connections: `then` says
    /// what follows it.
    pub(super) fn note_connections_cut(
        &mut self,
        o: u32,
        h: &GateHold,
        step_started: Millis,
        then: &str,
    ) {
        let name = self.spec.member_name(o);
        let rate = h
            .rate_per_sec
            .map_or(String::new(), |w| format!(" ({w:.0} write commands/s)"));
        self.notes.push(Note {
            kind: EventKind::Normal,
            reason: EventReason::ClientConnectionsCut,
            member: Some(o),
            message: format!(
                "{name} still took client input{rate} {}s after its client traffic was cut, over connections opened before: restarting it on its own volume closes them (a marekvs node closes a client connection only when it exits); its clients reconnect through the client Service to the other members, and {then}",
                (self.now - step_started) / 1000
            ),
        });
    }

    /// Deleting the victim's pod; its node flushes and exits on SIGTERM.
    fn delete_victim(&mut self, r: &mut Removal, name: &str) {
        match &self.obs(r.ordinal).pod {
            None => enter(r, RemovalStep::Settling, self.now),
            Some(p) if !p.drained && !p.terminating => {
                self.notes.push(restarted_while_draining(name));
                enter(r, RemovalStep::Draining, self.now);
            }
            Some(p) if p.terminating => {
                self.progress
                    .push(format!("waiting for {name} to flush and exit"));
            }
            // The deletion was held (or the operator stopped) after the hand-off passed: a
            // client writing to it directly may have sent it data since. Gate it again.
            Some(_) if !self.covered_now(r.ordinal) => {
                self.progress.push(format!(
                    "{name} is no longer known to be handed on (client input, a restart or an unknown reading since): handing off again"
                ));
                enter(r, RemovalStep::HandingOff, self.now);
            }
            Some(_) => {
                if !self.hold(format!("deleting the pod of {name}")) {
                    self.actions.insert(Action::DeletePod(r.ordinal));
                    self.progress
                        .push(format!("waiting for {name} to flush and exit"));
                }
            }
        }
    }

    /// Deleting the pod of a victim whose container never started, without drain or gate,
    /// while it still has not (`Action::DeleteUnstartedPod` checks that again, past the cache).
    /// One that started meanwhile may hold data now: its removal is given up, and the next
    /// one starts behind the gate like any other.
    fn delete_never_started(&mut self, r: &mut Removal, name: &str) -> bool {
        let pod = self.obs(r.ordinal).pod.clone();
        match pod {
            None => enter(r, RemovalStep::Settling, self.now),
            Some(p) if p.terminating => {
                self.progress
                    .push(format!("waiting for the pod of {name} to go"));
            }
            Some(_) if !self.never_started(r.ordinal) => {
                self.phases.insert(r.ordinal, MemberPhase::Joining);
                self.notes.push(normal(
                    EventReason::ScaleDownDeferred,
                    format!(
                        "{name} started before its pod was deleted: it may hold data now, so it is removed only behind the hand-off gate, like any other member"
                    ),
                ));
                return false;
            }
            Some(_) => {
                if !self.hold(format!("deleting the pod of {name}, which never started")) {
                    self.actions.insert(Action::DeleteUnstartedPod(r.ordinal));
                    self.progress
                        .push(format!("deleting the pod of {name}, which never started"));
                }
            }
        }
        true
    }

    /// Whether no process can ever have run as member `o`: its pod is seen, not ready, not
    /// going, and its container never started; and the pod is the first the operator made for
    /// its volume (the count on the volume, made before each pod), or it has no volume. Such
    /// a member never joined and holds no data. Its volume's count is what rules out an
    /// earlier pod on the same volume, one that ran and crashed between two passes, unseen.
    pub(super) fn never_started(&self, o: u32) -> bool {
        let m = self.obs(o);
        m.pod
            .as_ref()
            .is_some_and(|p| p.never_started && !p.ready && !p.terminating)
            && m.pvc
                .as_ref()
                .is_none_or(|v| v.pods_made == Some(1) && v.served_since.is_none())
    }

    /// The member's own anti-entropy has handed on what it holds, read in this pass
    /// (`handoff::covered`): nothing came in since it went quiet, and enough rounds began.
    pub(super) fn covered_now(&self, o: u32) -> bool {
        let rounds = self.obs(o).scrape.as_ref().and_then(|s| s.ae_rounds);
        match (self.samples.get(&o), rounds) {
            (Some(sample), Some(rounds)) => {
                sample.sampled_at == self.now && covered(sample, rounds) == Coverage::Covered
            }
            _ => false,
        }
    }

    /// The victim's pod is gone: has every other view dropped it, and re-replication gone
    /// quiet?
    fn settled_without_victim(&mut self, r: &Removal, name: &str) -> bool {
        let v = r.ordinal;
        let others = self.members.iter().copied().filter(|o| *o != v);
        match self.gate_with(
            others,
            self.members.len() - 1,
            Some(r.step_started_at),
            None,
        ) {
            Ok(()) => true,
            Err(h) => {
                self.wait_on_removal_gate(
                    h,
                    &format!("settling after {name} left"),
                    "hand-off after its pod was deleted",
                    r,
                );
                false
            }
        }
    }

    fn complete_removal(&mut self, r: &Removal) {
        let (v, never_started) = (r.ordinal, r.reason == VictimReason::NeverStarted);
        self.completed = Some(v);
        self.members.remove(&v);
        self.phases.remove(&v);
        let volume = if self.spec.reclaim_pvcs {
            "; deleting its volume"
        } else {
            "; its volume is kept"
        };
        let how = if never_started {
            "its container never started, so it held no data"
        } else {
            "every remaining view converged and re-replication settled"
        };
        self.notes.push(normal(
            EventReason::MemberRemoved,
            format!("{} removed; {how}{volume}", self.spec.member_name(v)),
        ));
        if self.spec.reclaim_pvcs
            && self.obs(v).pvc.is_some()
            && !self.spec.paused
            && self.mass.is_none()
            && !self.views_disagree()
            && self.look_alikes.is_empty()
            && self.spec.fenced.is_empty()
        {
            self.actions.insert(Action::DeletePvc(v));
        }
    }

    /// Start the next removal, if one is wanted and every precondition holds.
    pub(super) fn start_removal(&mut self) {
        if self.disruption.is_some()
            || self.completed.is_some()
            || self.members.len() <= self.target
            || self.drained_bystander()
            || self.spec.hibernation
        {
            return;
        }
        if self.start_never_started_removal() {
            return;
        }
        match self.start_check() {
            Ok(()) => {}
            Err(StartHeld::Spec(b)) => {
                self.blocked = Some(b);
                return;
            }
            Err(StartHeld::Gate(h)) => {
                let report = self.report_hold(&h);
                self.blocked = Some(if report.stuck {
                    super::timeout(
                        "the scale-down",
                        "the hand-off",
                        self.now - report.since,
                        &h.blocked,
                    )
                } else {
                    h.blocked
                });
                return;
            }
        }
        if self.mass.is_some() {
            self.held_back(HeldBy::MassFailure, "the scale-down");
            return;
        }
        if self.views_disagree() {
            self.held_back(HeldBy::Views, "the scale-down");
            return;
        }
        let (o, reason) = choose_victim(&self.members, &self.spec.remove_first, |o| {
            self.obs(o)
                .pod
                .as_ref()
                .is_some_and(|p| p.ready && !p.terminating)
        });
        self.disruption = Some(Disruption::Removal(Removal {
            ordinal: o,
            reason,
            step: RemovalStep::Draining,
            started_at: self.now,
            step_started_at: self.now,
            connections_cut_at: None,
        }));
        self.phases.insert(o, MemberPhase::Draining);
        let why = match reason {
            VictimReason::UserChosen => "listed in spec.removeMembers",
            VictimReason::NotReady => "not ready",
            VictimReason::NeverStarted => "its container never started",
            VictimReason::HighestOrdinal => "highest ordinal",
        };
        let n = self.members.len();
        self.notes.push(normal(
            EventReason::ScaleDownStarted,
            format!(
                "removing {} ({why}): {n} → {} members",
                self.spec.member_name(o),
                n - 1
            ),
        ));
    }

    /// The victim the next removal would choose never started: it is removed at once, without
    /// the hand-off gate and whatever the other members' state (it holds nothing to hand off),
    /// unless something holds every disruptive step (`hold`). Not at replicationFactor 1, where
    /// every scale-down is refused. True if the start was handled (made or held).
    fn start_never_started_removal(&mut self) -> bool {
        let Some(o) = self.never_started_victim() else {
            return false;
        };
        let name = self.spec.member_name(o);
        if self.hold(format!("removing {name}, which never started")) {
            return true;
        }
        // Its volume, if missing, is not made for a member on its way out.
        self.actions.remove(&Action::CreatePvc(o));
        self.actions.insert(Action::DeleteUnstartedPod(o));
        self.disruption = Some(Disruption::Removal(Removal {
            ordinal: o,
            reason: VictimReason::NeverStarted,
            step: RemovalStep::Deleting,
            started_at: self.now,
            step_started_at: self.now,
            connections_cut_at: None,
        }));
        self.phases.insert(o, MemberPhase::Leaving);
        let n = self.members.len();
        self.notes.push(normal(
            EventReason::ScaleDownStarted,
            format!(
                "removing {name} (its container never started: it holds no data, so no drain and no hand-off gate): {n} → {} members",
                n - 1
            ),
        ));
        true
    }

    /// The member the next removal would choose, if its container never started and the
    /// replication factor allows a scale-down at all. Only with its pod seen (`never_started`):
    /// a pod created a moment ago may not be in the cache yet, and would run on, unseen, as
    /// no member (a DST world found it: the member removed at once, its pod serving writes).
    fn never_started_victim(&self) -> Option<u32> {
        let (o, _) = choose_victim(&self.members, &self.spec.remove_first, |o| {
            self.obs(o)
                .pod
                .as_ref()
                .is_some_and(|p| p.ready && !p.terminating)
        });
        (self.never_started(o) && self.spec.replication_factor >= 2).then_some(o)
    }

    /// The removals that would come next, in order, and what would hold each right now:
    /// reported only (`status.plan`). The removal in progress comes first; then the members
    /// `choose_victim` would pick, one after the other, down to `spec.nodes`. Steps that would
    /// go below replicationFactor + 1 are listed, held by the floor, and never happen.
    pub(super) fn plan_removals(&mut self) {
        let floor = self.spec.floor() as usize;
        let wanted = (self.spec.nodes as usize).min(self.target);
        let n = self.members.len().saturating_sub(wanted);
        if n == 0 {
            return;
        }
        let current = self.removal().map(|r| (r.ordinal, r.reason));
        let mut left = self.members.clone();
        let mut steps: Vec<(u32, VictimReason)> = Vec::new();
        if let Some((o, reason)) = current {
            left.remove(&o);
            steps.push((o, reason));
        }
        let ready = |o: u32| {
            self.obs(o)
                .pod
                .as_ref()
                .is_some_and(|p| p.ready && !p.terminating)
        };
        steps.extend(removal_order(
            &left,
            &self.spec.remove_first,
            ready,
            n - steps.len(),
        ));
        let mut plan = Vec::with_capacity(steps.len());
        for (k, (o, reason)) in steps.iter().copied().enumerate() {
            let held_by = if self.members.len() - k - 1 < floor {
                Some(Hold::Floor {
                    floor: floor as u32,
                })
            } else if k == 0 && current.is_some() {
                // Under way: held only by what holds the removal itself.
                self.blocked
                    .as_ref()
                    .map(|b| match b.reason {
                        BlockReason::Paused => Hold::Paused,
                        _ => Hold::Gate(b.clone()),
                    })
                    .or_else(|| {
                        self.hold_report.as_ref().map(|h| {
                            Hold::Gate(Blocked {
                                reason: h.reason,
                                message: h.message.clone(),
                            })
                        })
                    })
            } else if self.spec.paused {
                Some(Hold::Paused)
            } else if let Some(d) = &self.disruption {
                Some(Hold::InProgress {
                    message: match d {
                        Disruption::Removal(r) => format!(
                            "the removal of {} comes first",
                            self.spec.member_name(r.ordinal)
                        ),
                        Disruption::Roll(r) => format!(
                            "the restart of {} comes first",
                            self.spec.member_name(r.ordinal)
                        ),
                        Disruption::Upgrade(_) => "the whole-cluster upgrade comes first".into(),
                    },
                })
            } else if k > 0 {
                Some(Hold::InProgress {
                    message: format!(
                        "the removal of {} comes first",
                        self.spec.member_name(steps[k - 1].0)
                    ),
                })
            } else if self.drained_bystander() {
                Some(Hold::InProgress {
                    message: "a drained member is being restarted first".into(),
                })
            } else if self.never_started_victim() == Some(o) {
                self.never_started_hold()
            } else {
                self.may_start_removal().err().map(Hold::Gate)
            };
            // A member that never started is removed without the gate (`start_removal`).
            let reason = if !(k == 0 && current.is_some())
                && self.never_started(o)
                && self.spec.replication_factor >= 2
            {
                VictimReason::NeverStarted
            } else {
                reason
            };
            plan.push(PlannedRemoval {
                ordinal: o,
                reason,
                held_by,
            });
        }
        self.plan = plan;
    }

    /// What holds the removal of a member that never started: only what holds every
    /// disruptive step (`hold`), never the gate.
    fn never_started_hold(&self) -> Option<Hold> {
        if self.spec.paused {
            return Some(Hold::Paused);
        }
        let blocked = |reason, message: &str| Blocked {
            reason,
            message: message.into(),
        };
        self.fence_block("the scale-down")
            .or_else(|| {
                self.mass.is_some().then(|| {
                    blocked(
                        BlockReason::NotAllReady,
                        "replicationFactor or more members are down (a mass failure)",
                    )
                })
            })
            .or_else(|| {
                self.views_disagree().then(|| {
                    blocked(
                        BlockReason::ViewsNotConverged,
                        "the members' views disagree by identity",
                    )
                })
            })
            .or_else(|| self.look_alike_block("the scale-down"))
            .map(Hold::Gate)
    }

    fn may_start_removal(&self) -> Result<(), Blocked> {
        self.start_check().map_err(|held| match held {
            StartHeld::Spec(b) => b,
            StartHeld::Gate(h) => h.blocked,
        })
    }

    /// Whether the next removal may start. The gate knows its victim, but only for what
    /// applies before its traffic is cut: its ring must be known (it still takes client
    /// writes, so its ring may be busy).
    fn start_check(&self) -> Result<(), StartHeld> {
        self.may_start_removal_by_spec().map_err(StartHeld::Spec)?;
        let (victim, _) = choose_victim(&self.members, &self.spec.remove_first, |o| {
            self.obs(o)
                .pod
                .as_ref()
                .is_some_and(|p| p.ready && !p.terminating)
        });
        let leaver = Leaver {
            ordinal: victim,
            traffic_cut: false,
            keeps_volume: false,
        };
        self.gate_leaving(None, leaver).map_err(StartHeld::Gate)
    }

    fn may_start_removal_by_spec(&self) -> Result<(), Blocked> {
        if self.spec.replication_factor < 2 {
            Err(single_copy(&format!(
                "the scale-down from {} to {} members",
                self.members.len(),
                self.target
            )))
        } else if self.spec.paused {
            Err(Blocked {
                reason: BlockReason::Paused,
                message: format!(
                    "spec.paused is set: holding the scale-down from {} to {} members",
                    self.members.len(),
                    self.target
                ),
            })
        } else if let Some(b) = self.fence_block("the scale-down") {
            Err(b)
        } else if let Some(b) = self.look_alike_block("the scale-down") {
            Err(b)
        } else if self.creating() {
            Err(Blocked {
                reason: BlockReason::Replacing,
                message: "members are being (re-)created".into(),
            })
        } else if self.replacing {
            Err(Blocked {
                reason: BlockReason::Replacing,
                message: "a member is being replaced; waiting until it is Active and the cluster fully replicated".into(),
            })
        } else {
            Ok(())
        }
    }
}

/// Refusal of `what` at replication factor 1: the leaver's partitions have no other copy, and
/// marekvs 0.2 moves partitions only after a member has exited.
pub(super) fn single_copy(what: &str) -> Blocked {
    Blocked {
        reason: BlockReason::SingleCopy,
        message: format!(
            "refused: {what} would lose data. With replicationFactor 1 each partition has one copy, on its owner, and marekvs moves a member's partitions only after it has exited (a drained member still owns them). Raise replicationFactor first, or keep the members"
        ),
    }
}

/// What holds the start of a removal: the spec or the cluster's state, or the hand-off gate.
enum StartHeld {
    Spec(Blocked),
    Gate(GateHold),
}

fn lost_before_hand_off(name: &str) -> Note {
    Note {
        kind: EventKind::Warning,
        reason: EventReason::LostBeforeHandOff,
        member: None,
        message: format!(
            "{name} lost its pod before its data was handed off: re-creating it on its volume and draining it again"
        ),
    }
}
