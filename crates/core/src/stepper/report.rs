//! The end of a pass: what `spec.paused` held, volumes to reclaim, and the decision as
//! reported (phase, progress, events, when to look again).

use crate::handoff::background_repair;
use crate::types::*;

use super::{HeldBy, Pass, REQUEUE_BUSY_MS, REQUEUE_GATE_MS, REQUEUE_IDLE_MS, normal};

impl Pass<'_> {
    /// Disruptive steps that `spec.paused` held back block the cluster, unless something
    /// else already does.
    pub(super) fn hold_for_pause(&mut self) {
        if self.blocked.is_none()
            && let Some(held) = self.held_by(HeldBy::Pause)
        {
            self.blocked = Some(Blocked {
                reason: BlockReason::Paused,
                message: format!("spec.paused is set: holding {held}"),
            });
        }
    }

    /// Disruptive steps that look-alikes held back block the cluster, unless something else
    /// already does.
    pub(super) fn hold_for_look_alikes(&mut self) {
        if self.blocked.is_none()
            && let Some(held) = self.held_by(HeldBy::LookAlikes)
        {
            self.blocked = self.look_alike_block(&held);
        }
    }

    /// Reclaim volumes of ordinals that are not members, once the cluster is fully replicated.
    pub(super) fn reclaim_volumes(&mut self) {
        if !self.spec.reclaim_pvcs
            || self.holder().is_some()
            || self.spec.hibernation
            || self.disruption.is_some()
            || self.members.len() != self.target
            || self.replacing
            || self.joining
            || self.gate_all(None).is_err()
        {
            return;
        }
        for (o, m) in self.observed {
            if !self.members.contains(o)
                && m.pod.is_none()
                && m.pvc.as_ref().is_some_and(|p| !p.terminating)
            {
                self.actions.insert(Action::DeletePvc(*o));
            }
        }
    }

    /// The decision, as reported.
    pub(super) fn report(mut self) -> Decision {
        self.note_hold_changes();
        self.note_block_changes();
        if let Some(held) = self.held_by(HeldBy::MassFailure) {
            self.progress.push(format!(
                "{} members down: holding {held}",
                self.mass.as_ref().map_or(0, |m| m.down.len()),
            ));
        }
        if let Some(held) = self.held_by(HeldBy::Views) {
            let why = match (&self.partition, &self.agreement) {
                (Some(p), _) => p.message.clone(),
                (None, crate::views::Agreement::Disagree(who)) => {
                    format!("members' views disagree: {who}")
                }
                (None, _) => "members' views disagree".into(),
            };
            self.progress.push(format!("{why}: holding {held}"));
        }
        let phase = self.cluster_phase();
        self.default_progress(phase);
        let requeue_ms = self.requeue_ms(phase);
        let members: Vec<u32> = self.members.iter().copied().collect();
        let background_repair =
            background_repair(&members, &self.samples, self.now, self.spec.settle_ms);
        Decision {
            memory: Memory {
                members: self.members,
                disruption: self.disruption,
                samples: self.samples,
                phases: self.phases,
                blocked: self.blocked.as_ref().map(|b| b.reason),
                views_split_since: self.views_split_since,
                hibernated: self.hibernated,
                hold_since: self.hold_report.as_ref().map(|h| (h.reason, h.since)),
            },
            actions: self.actions.into_iter().collect(),
            phase,
            blocked: self.blocked,
            progress: (!self.progress.is_empty()).then(|| self.progress.join("; ")),
            notes: self.notes,
            requeue_ms,
            plan: self.plan,
            mass_failure: self.mass,
            suspected_partition: self.partition,
            hold: self.hold_report,
            background_repair,
            kept_stale: self.kept_stale,
        }
    }

    /// A Normal `HandoffHeld` when the hand-off gate starts holding the scale-down or holds it
    /// for another reason (a new `since`); a Warning `HandoffStuck` once it turns stuck.
    fn note_hold_changes(&mut self) {
        let Some(h) = &self.hold_report else {
            return;
        };
        let member = self.removal().map(|r| r.ordinal);
        let names: Vec<String> = h
            .members
            .iter()
            .map(|o| self.spec.member_name(*o))
            .collect();
        let rate = match (h.moving, h.rate_per_sec) {
            (Moving::ClientTraffic, Some(w)) => format!(", {w:.1} writes/s"),
            (_, Some(r)) => format!(", {r:.1}/s"),
            (_, None) => String::new(),
        };
        let on = if names.is_empty() {
            String::new()
        } else {
            format!(" on {}", names.join(", "))
        };
        let what = format!(
            "{} moving{on}{rate}, held for {}s",
            h.moving.as_str(),
            (self.now - h.since) / 1000
        );
        if self.memory.hold_since.map(|(r, _)| r) != Some(h.reason) {
            self.notes.push(Note {
                kind: EventKind::Normal,
                reason: EventReason::HandoffHeld,
                member,
                message: format!("{}: {what}: {}", h.reason.as_str(), h.message),
            });
        }
        if h.stuck && self.memory.blocked != Some(BlockReason::HandoffTimeout) {
            self.notes.push(Note {
                kind: EventKind::Warning,
                reason: EventReason::HandoffStuck,
                member,
                message: format!(
                    "held longer than spec.scaleDown.handoffTimeoutSeconds ({}s): {what}: {}; not proceeding until the gate passes",
                    self.spec.handoff_timeout_ms / 1000,
                    h.message
                ),
            });
        }
    }

    /// An Event when the cluster becomes blocked for another reason, or unblocked.
    fn note_block_changes(&mut self) {
        if let Some(b) = &self.blocked
            && self.memory.blocked != Some(b.reason)
        {
            let reason = if b.reason == BlockReason::Paused {
                EventReason::Paused
            } else if b.reason == BlockReason::WakeRefused {
                EventReason::WakeRefused
            } else if b.reason == BlockReason::Fenced {
                EventReason::HeldByFence
            } else if self.removal().is_some() || self.members.len() > self.target {
                EventReason::ScaleDownBlocked
            } else {
                EventReason::UpdateBlocked
            };
            self.notes.push(Note {
                kind: EventKind::Warning,
                reason,
                message: format!("{}: {}", b.reason.as_str(), b.message),
                member: None,
            });
        }
        if self.blocked.is_none() && self.memory.blocked.is_some() {
            self.notes.push(normal(
                EventReason::Unblocked,
                "the held step may proceed".into(),
            ));
        }
    }

    fn cluster_phase(&self) -> ClusterPhase {
        let all_active = self.phases.values().all(|p| *p == MemberPhase::Active);
        match &self.blocked {
            Some(b) if b.reason == BlockReason::Paused => ClusterPhase::Paused,
            Some(_) => ClusterPhase::Blocked,
            None if self.hibernating() => ClusterPhase::Hibernated,
            None if self.upgrade().is_some() || self.upgraded.is_some() => ClusterPhase::Updating,
            None if self.removal().is_some() || self.completed.is_some() => {
                ClusterPhase::ScalingDown
            }
            None if self
                .roll()
                .or(self.rolled.as_ref())
                .is_some_and(Roll::requested) =>
            {
                ClusterPhase::Replacing
            }
            None if self.roll().is_some() || self.rolled.is_some() => ClusterPhase::Updating,
            // A restart about to start, its new pod being checked with the API server: a move
            // to a fresh volume asked for on the pod is a replacement.
            None if self.checking_new_pod() => {
                let asked = self.asked_fresh_volume();
                if self
                    .actions
                    .iter()
                    .any(|a| matches!(a, Action::CheckPod(o) if asked.contains(o)))
                {
                    ClusterPhase::Replacing
                } else {
                    ClusterPhase::Updating
                }
            }
            None if self.replacing => ClusterPhase::Replacing,
            None if self.joining || !self.created.is_empty() => ClusterPhase::ScalingUp,
            None if all_active
                && self.members.len() == self.target
                && self.outdated().is_empty()
                && self.asked_fresh_volume().is_empty()
                && self.asked_restart().is_empty()
                && self.underreplicated_on().is_empty() =>
            {
                ClusterPhase::Healthy
            }
            None => ClusterPhase::Reconciling,
        }
    }

    fn checking_new_pod(&self) -> bool {
        self.actions
            .iter()
            .any(|a| matches!(a, Action::CheckPod(_)))
    }

    /// Members whose own view counts partitions with too few owners (a peer it still holds
    /// as Joining, a member it lost): not Healthy yet, whatever else holds.
    fn underreplicated_on(&self) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|o| {
                self.obs(*o)
                    .scrape
                    .as_ref()
                    .is_some_and(|s| s.underreplicated > 0)
            })
            .collect()
    }

    /// Progress in words when no phase said any; a healthy cluster with nothing to do says
    /// nothing.
    fn default_progress(&mut self, phase: ClusterPhase) {
        if !self.progress.is_empty() {
            return;
        }
        if phase == ClusterPhase::Healthy && self.actions.is_empty() {
            return;
        }
        let under = self.underreplicated_on();
        let said = match phase {
            ClusterPhase::ScalingUp => "new members are joining".to_string(),
            ClusterPhase::Replacing => "a member is being replaced".to_string(),
            ClusterPhase::Reconciling if !under.is_empty() => format!(
                "partitions under-replicated in the view of {}: waiting for the views to converge",
                self.names(&under)
            ),
            ClusterPhase::Reconciling => "waiting for members to become ready".to_string(),
            _ => return,
        };
        self.progress.push(said);
    }

    fn requeue_ms(&self, phase: ClusterPhase) -> Millis {
        // Members that are only waiting for their pod to appear or turn ready: the pod watch
        // wakes the cluster when that happens, so looking every second would only add scrapes
        // (at 1,600 members coming up, 200 clusters a second, each scraping its members).
        let waiting_on_pods_only = matches!(
            phase,
            ClusterPhase::ScalingUp | ClusterPhase::Replacing | ClusterPhase::Reconciling
        ) && self.blocked.is_none()
            && self.actions.is_empty()
            && self.underreplicated_on().is_empty()
            && self.members.iter().all(|o| {
                self.phases.get(o) == Some(&MemberPhase::Active)
                    || self.obs(*o).pod.as_ref().is_none_or(|p| !p.ready)
            });
        // A hibernated cluster at rest is as quiet as a healthy one.
        let resting = matches!(phase, ClusterPhase::Healthy | ClusterPhase::Hibernated);
        let busy = (!resting || !self.actions.is_empty()) && !waiting_on_pods_only;
        if self.disruption.is_some() {
            REQUEUE_GATE_MS
        } else if busy {
            REQUEUE_BUSY_MS
        } else {
            REQUEUE_IDLE_MS
        }
    }
}
