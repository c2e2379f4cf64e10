//! The membership and each member's children: count members with pods, cancel, scale up, create PVCs and pods,
//! recycle a drained member, and phase every member.

use std::collections::BTreeSet;

use crate::plan::free_ordinals;
use crate::stale::{ANNOTATION_ABSENT_SINCE, absence_in_words, is_stale, rebuilt_since_absence};
use crate::types::*;

use super::{HeldBy, Pass, normal};

impl Pass<'_> {
    /// Members: what status remembers, plus any ordinal that has a pod (counted: a running
    /// node is part of the data plane whatever the status says). A removal or a rollout of a
    /// member that is none of them is a stale record, dropped.
    pub(super) fn count_members_with_pods(&mut self) {
        for (o, m) in self.observed {
            if m.pod.is_some() && self.members.insert(*o) {
                self.notes.push(normal(
                    EventReason::MemberCounted,
                    format!(
                        "counted {} as a member: its pod exists",
                        self.spec.member_name(*o)
                    ),
                ));
            }
        }
        if let Some(d) = &self.disruption
            && d.ordinal().is_some_and(|o| !self.members.contains(&o))
        {
            self.disruption = None;
        }
    }

    /// Cancel a removal when the spec grew back: the victim stays. A drained node cannot be
    /// un-drained, so its pod is recycled (it restarts on its own PVC and rejoins).
    pub(super) fn cancel_removal(&mut self) {
        if let Some((v, step)) = self.removal().map(|r| (r.ordinal, r.step))
            && self.members.len() <= self.target
        {
            // Past its hand-off the others hold its data: it comes back as a new member
            // (Joining), whose volume holds nothing they rely on (a stale one may go).
            if step >= RemovalStep::Deleting {
                self.fresh.insert(v);
            }
            self.notes.push(normal(
                EventReason::RemovalCancelled,
                format!(
                    "spec.nodes grew back to {}: {} stays; if it was drained it restarts on its own volume",
                    self.spec.nodes,
                    self.spec.member_name(v)
                ),
            ));
            self.disruption = None;
        }
    }

    /// Scale up, lowest free ordinals first, in batches: at most as many members joining at
    /// once as already serve (the donors their bootstraps read from), and never fewer than
    /// `spec.scale_up_batch` or replicationFactor + 1 (a new cluster's first members).
    pub(super) fn scale_up(&mut self) {
        if self.removal().is_some() || self.members.len() >= self.target || self.spec.hibernation {
            return;
        }
        let want = self.target - self.members.len();
        if self.mass.is_some() {
            self.held_back(HeldBy::MassFailure, format!("adding {want} members"));
            return;
        }
        let want = self.scale_up_batch(want);
        if want == 0 {
            return;
        }
        let taken: BTreeSet<u32> = self
            .members
            .iter()
            .copied()
            .chain(
                self.observed
                    .iter()
                    // A name a look-alike holds is skipped, unless the cluster's own volume
                    // is there: the member's data is on it, so it is chosen and waits for
                    // its name (after `kubectl delete mkv --cascade=orphan` and a new object,
                    // the orphaned pods hold every name: no fresh member is made beside them).
                    .filter(|(_, m)| m.pod.is_some() || (m.look_alike && m.pvc.is_none()))
                    .map(|(o, _)| *o),
            )
            .collect();
        for o in free_ordinals(&taken, &self.spec.remove_first, want) {
            self.members.insert(o);
            self.created.insert(o);
            let on = match &self.obs(o).pvc {
                Some(v) if self.stale(v) => " on a fresh volume (its kept volume is stale)",
                Some(_) => " on its existing volume",
                None => "",
            };
            self.notes.push(normal(
                EventReason::MemberCreated,
                format!("creating {}{on}", self.spec.member_name(o)),
            ));
        }
    }

    /// How many of `want` missing members join now: the rest wait until those joining serve.
    fn scale_up_batch(&mut self, want: usize) -> usize {
        let joining = self
            .members
            .iter()
            .filter(|o| self.memory.phases.get(o) == Some(&MemberPhase::Joining))
            .count();
        let serving = self.members.len() - joining;
        let cap = (self.spec.scale_up_batch.max(self.spec.floor()) as usize).max(serving);
        let now = want.min(cap.saturating_sub(joining));
        if now < want {
            self.progress.push(format!(
                "adding {now} of {want} members now: at most {cap} join at once (as many as serve already), the rest as those joining become Active"
            ));
        }
        now
    }

    /// Children of every member: PVC first, then the pod on it. Returns the members whose pod
    /// was drained and is not going away: the removal that drained them was cancelled.
    pub(super) fn children(&mut self) -> Vec<u32> {
        // The victim's pod is not re-created once its data was handed off.
        let handed_off = self
            .removal()
            .filter(|r| r.step >= RemovalStep::Deleting)
            .map(|r| r.ordinal);
        let roll = self.roll().cloned();
        let members: Vec<u32> = self.members.iter().copied().collect();
        let mut drained = Vec::new();
        for o in members {
            let rolling = roll.as_ref().filter(|r| r.ordinal == o);
            if Some(o) != handed_off && self.children_of(o, rolling) {
                drained.push(o);
            }
        }
        drained
    }

    /// One member's PVC and pod (`rolling`: the restart in progress is this member's); true
    /// if its pod is drained and stays.
    fn children_of(&mut self, o: u32, rolling: Option<&Roll>) -> bool {
        let m = self.obs(o);
        let name = self.spec.member_name(o);
        if self.fence(o) {
            return false;
        }
        if m.look_alike {
            // Its pod or PVC cannot be created (the name is taken), and a pod of ours must
            // never mount a volume that is not.
            self.progress.push(format!(
                "{name}: an object that is not this cluster's holds its name; nothing is created for it until that is deleted"
            ));
            return false;
        }
        // A member that never held data (new, still Joining) may get its volume in a mass
        // failure; any other gets a fresh volume only once enough members are up.
        let new_member =
            self.created.contains(&o) || self.memory.phases.get(&o) == Some(&MemberPhase::Joining);
        let pvc_ok = match &m.pvc {
            None if self.mass.is_some() && !new_member => {
                self.held_back(
                    HeldBy::MassFailure,
                    format!("a fresh volume for {name} (its volume is missing)"),
                );
                return false;
            }
            None => {
                self.actions.insert(Action::CreatePvc(o));
                true
            }
            // A stale volume is never mounted again: no pod is created on it.
            Some(p) if !p.terminating && self.stale(p) => {
                if self.waking() && self.spec.fresh_volumes_on_wake && m.pod.is_none() {
                    self.fresh_volume_on_wake(o, p);
                } else {
                    self.leave_stale_volume(o, p, m.pod.as_ref());
                }
                return false;
            }
            // A member moving to a fresh volume gets its new pod only on the new volume.
            Some(p) if rolling.is_some_and(|r| self.leaves_volume(r, p)) => false,
            Some(p) => !p.terminating,
        };
        let rolling = rolling.is_some();
        match &m.pod {
            None if pvc_ok => {
                self.actions.insert(Action::CreatePod(o));
                if !self.created.contains(&o) && !rolling {
                    let on = if m.pvc.is_some() {
                        "on its own volume"
                    } else {
                        "on a fresh volume (it rejoins empty)"
                    };
                    self.notes.push(Note {
                        kind: EventKind::Normal,
                        reason: EventReason::MemberReplaced,
                        member: Some(o),
                        message: format!("{name} has no pod: re-creating it {on}"),
                    });
                }
                false
            }
            None => {
                if !rolling {
                    self.progress.push(format!(
                        "waiting for the old volume of {name} to be deleted"
                    ));
                }
                false
            }
            Some(p) => p.drained && !p.terminating && !rolling,
        }
    }

    /// Whether the volume has been away longer than the grace.
    pub(super) fn stale(&self, v: &PvcObs) -> bool {
        is_stale(v, self.spec.stale_volume_grace_ms, self.now)
    }

    /// A member on a stale volume moves to a fresh one and rejoins as new: its pod, if one is
    /// left that does not serve, is deleted first (kubelet would otherwise restart it on the
    /// stale data), then the volume. A joining pod is left to join; one that serves is back
    /// already. Held by `spec.paused` and by a mass failure (neither data thrown away nor
    /// resurrected: the member stays down and the hold is reported).
    fn leave_stale_volume(&mut self, o: u32, v: &PvcObs, pod: Option<&PodObs>) {
        let name = self.spec.member_name(o);
        let away = absence_in_words(v, self.now);
        let grace = self.spec.stale_volume_grace_ms / 1000;
        let what = format!(
            "a fresh volume for {name} (its volume has been away {away}, longer than the stale-volume grace of {grace}s)"
        );
        let action = match pod {
            None => Action::DeletePvc(o),
            Some(p)
                if !p.ready
                    && !p.terminating
                    && self.memory.phases.get(&o) != Some(&MemberPhase::Joining)
                    && self.disruption.is_none() =>
            {
                Action::DeletePod(o)
            }
            Some(_) => return,
        };
        if self.hold(what) || !self.others_hold_the_data_of(o, &name) {
            return;
        }
        self.actions.insert(action);
        self.progress.push(format!(
            "moving {name} to a fresh volume: its volume is stale"
        ));
        if action == Action::DeletePvc(o) {
            self.fresh.insert(o);
            self.notes.push(Note {
                kind: EventKind::Warning,
                reason: EventReason::StaleVolumeReplaced,
                member: Some(o),
                message: format!(
                    "data-{name} has been away from the cluster for {away}, longer than the stale-volume grace of {grace}s: it may hold keys deleted since, so it is deleted and {name} rejoins on a fresh volume (Joining)"
                ),
            });
        }
    }

    /// Whether the others are known to hold what a stale member's volume may hold: the
    /// hand-off gate over every other recorded member (ready, scraped, 0 under-replicated,
    /// views without it, re-replication quiet). Unknown is never safe: the volume waits. A
    /// member that never held data (new, or `Joining`) needs no gate: a kept volume's data was
    /// handed off when its member was removed.
    fn others_hold_the_data_of(&mut self, o: u32, name: &str) -> bool {
        let new_member = self.created.contains(&o)
            || self.fresh.contains(&o)
            || self.memory.phases.get(&o) == Some(&MemberPhase::Joining);
        if new_member {
            return true;
        }
        // replicationFactor 1: its volume holds the only copy of every partition it owned (a
        // drained member's partitions move only once it has exited, and then no one has them to
        // copy from), whatever the gauges say. Found by the DST once a new pod could be refused
        // past the grace, mid-restart. The user decides, as with `SingleCopy`.
        if self.spec.replication_factor < 2 {
            self.progress.push(format!(
                "the volume of {name} is stale and is kept: with replicationFactor 1 it holds the only copy of what {name} owned. Keep it by removing the annotation {ANNOTATION_ABSENT_SINCE} (the member rejoins on it and may bring back keys deleted since), or delete data-{name} (what only it holds is lost)"
            ));
            self.kept_stale.push(o);
            return false;
        }
        // It left without a hand-off, and another member's volume first served after that (a
        // fresh volume, a new member): that one's bootstraps could not copy from it and may
        // have taken nothing, so this volume may hold the last copy. No gauge tells; the user
        // decides, as in a mass failure.
        let rebuilt = rebuilt_since_absence(o, &self.memory.members, self.observed);
        if !rebuilt.is_empty() {
            self.progress.push(format!(
                "the volume of {name} is stale and is kept: the volume of {} first served after {name} went away, so data-{name} may hold the last copy of some data. Keep it by removing the annotation {ANNOTATION_ABSENT_SINCE} (the member rejoins on it and may bring back keys deleted since), or delete data-{name} (what only it holds is lost)",
                self.names(&rebuilt)
            ));
            self.kept_stale.push(o);
            return false;
        }
        // The member of a removal or restart past its pod's deletion handed its data to the
        // others, one surviving owner per partition being enough (`handoff::rounds_needed`):
        // until that step's own gate passes (views without it, every member ready again), a
        // partition it held may be on this member's volume alone, and its own volume counts
        // for nothing (it is stale too, or never mounted again). The gate below cannot see
        // that (the gauges are membership counts): the volume waits for the step to settle,
        // which needs this member back, so the user decides, as in a mass failure.
        if let Some((v, what)) = self.handed_off_disruption().filter(|(v, _)| *v != o) {
            self.progress.push(format!(
                "the volume of {name} is stale; it is not replaced while the {what} of {} is unsettled: what it handed off may be on {name} alone (keep the data by removing the annotation {ANNOTATION_ABSENT_SINCE}, or delete data-{name})",
                self.spec.member_name(v)
            ));
            return false;
        }
        // Another member away on a stale volume holds nothing the gate can count on and is
        // in no view: the others are those that can hold the data (two members unfenced or
        // back after the grace would otherwise wait on each other for ever). Not so for the
        // member whose own hand-off is in progress: what it handed off may be on such a
        // member alone, so every other member counts, and the user decides.
        let handed_off = self.handed_off_disruption().is_some_and(|(v, _)| v == o);
        let others: Vec<u32> = self
            .memory
            .members
            .iter()
            .copied()
            .filter(|m| *m != o && (handed_off || !self.away_on_a_stale_volume(*m)))
            .collect();
        match self.gate(others.iter().copied(), others.len(), None) {
            Ok(()) => true,
            Err(b) => {
                self.progress.push(format!(
                    "the volume of {name} is stale; replacing it once the others hold its data: {}",
                    b.message
                ));
                false
            }
        }
    }

    /// The member of the removal or restart in progress once its data was handed off (its pod
    /// deleted after the hand-off gate passed), with what the step is called.
    fn handed_off_disruption(&self) -> Option<(u32, &'static str)> {
        match &self.disruption {
            Some(Disruption::Removal(r)) if r.step >= RemovalStep::Deleting => {
                Some((r.ordinal, "removal"))
            }
            Some(Disruption::Roll(r)) if r.handed_off_pvc.is_some() => Some((r.ordinal, "restart")),
            _ => None,
        }
    }

    /// A member without a pod whose volume is stale.
    fn away_on_a_stale_volume(&self, o: u32) -> bool {
        let m = self.obs(o);
        m.pod.is_none()
            && m.pvc
                .as_ref()
                .is_some_and(|v| !v.terminating && self.stale(v))
    }

    /// A drained member that is no longer leaving (the removal was cancelled) is restarted so
    /// it rejoins Active on its own volume: one at a time, never beside another pod going away
    /// nor beside a removal or a rollout (whose next step may delete a pod in this very pass).
    pub(super) fn recycle(&mut self, drained: &[u32]) {
        let other_terminating = self
            .members
            .iter()
            .any(|o| self.obs(*o).pod.as_ref().is_some_and(|p| p.terminating));
        if self.disruption.is_some() || other_terminating {
            return;
        }
        let Some(&o) = drained.first() else {
            return;
        };
        let name = self.spec.member_name(o);
        if !self.hold(format!("restarting the drained {name}")) {
            self.actions.insert(Action::DeletePod(o));
        }
        self.progress.push(format!(
            "restarting {name}: it was drained for a removal that was cancelled"
        ));
    }

    /// Member phases, before any removal or rollout step moves this pass.
    pub(super) fn member_phases(&mut self) {
        self.phases = self
            .members
            .iter()
            .map(|o| (*o, self.phase_of(*o)))
            .collect();
        self.replacing = self.phases.values().any(|p| *p == MemberPhase::Replacing);
        self.joining = self.phases.values().any(|p| *p == MemberPhase::Joining);
    }

    fn phase_of(&self, o: u32) -> MemberPhase {
        match &self.disruption {
            Some(Disruption::Removal(r)) if r.ordinal == o => {
                return if r.step <= RemovalStep::HandingOff {
                    MemberPhase::Draining
                } else {
                    MemberPhase::Leaving
                };
            }
            Some(Disruption::Roll(r)) if r.ordinal == o => {
                return if r.step <= RollStep::HandingOff {
                    MemberPhase::Draining
                } else {
                    MemberPhase::Updating
                };
            }
            Some(Disruption::Upgrade(u)) if !self.spec.fenced.contains(&o) => {
                return if u.step == UpgradeStep::Flushing {
                    MemberPhase::Draining
                } else {
                    MemberPhase::Updating
                };
            }
            _ => {}
        }
        if self.created.contains(&o) || self.fresh.contains(&o) {
            return MemberPhase::Joining;
        }
        if self.spec.fenced.contains(&o) {
            return MemberPhase::Fenced;
        }
        // Still stopped by a wake in progress; a member that rejoins empty (a fresh-volume
        // wake) stays Joining: it holds nothing a mass failure would wait for.
        let joining = self.memory.phases.get(&o) == Some(&MemberPhase::Joining);
        if self.hibernating() || (self.waking() && self.obs(o).pod.is_none() && !joining) {
            return MemberPhase::Hibernated;
        }
        let m = self.obs(o);
        let prev = self.memory.phases.get(&o).copied();
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
    }
}
