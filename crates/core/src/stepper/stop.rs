//! Stopping members without removing them: `spec.hibernation` (every pod) and
//! `spec.fencedMembers` (some pods). Volumes and the membership are kept; the pods come back
//! on their own volumes, subject to the stale-volume grace like any member away.
//!
//! - Hibernation waits for the removal or restart in progress to finish (it only starts
//!   between disruptions, so no pod is stopped mid hand-off), then stops every pod at once:
//!   the data stays on the volumes and a hibernating cluster serves nothing, so there is no
//!   hand-off to order. While it lasts nothing is created, removed, restarted or reclaimed.
//! - A wake (`hibernation: false` after a hibernation) whose members' volumes have been away
//!   longer than the grace is refused: nothing starts (`WakeRefused`), unless
//!   `storage.freshVolumesOnWake`, which replaces every stale volume by a fresh one.
//! - A fenced member's pod is deleted and never re-created; while any member is fenced, every
//!   disruptive step (drain, pod or volume deletion, removal, restart) is held (`Fenced`).

use crate::stale::absence_in_words;
use crate::types::*;

use super::{HeldBy, Pass, normal};

impl Pass<'_> {
    /// `spec.hibernation` is in effect: no disruption is in progress (one that is finishes
    /// first, its pods re-created as usual).
    pub(super) fn hibernating(&self) -> bool {
        self.spec.hibernation && self.disruption.is_none()
    }

    /// A wake in progress: hibernated, and `spec.hibernation` is false again.
    pub(super) fn waking(&self) -> bool {
        self.memory.hibernated && !self.spec.hibernation
    }

    /// Stop every member's pod (`spec.paused` holds the deletions: it deletes nothing).
    pub(super) fn hibernate(&mut self) {
        let running: Vec<u32> = self
            .members
            .iter()
            .copied()
            .filter(|o| self.obs(*o).pod.as_ref().is_some_and(|p| !p.terminating))
            .collect();
        self.hibernated = true;
        if running.is_empty() {
            return;
        }
        let names = self.names(&running);
        if self.spec.paused {
            self.held_back(
                HeldBy::Pause,
                format!("stopping {names} for spec.hibernation"),
            );
            return;
        }
        self.actions
            .extend(running.iter().map(|o| Action::DeletePod(*o)));
        self.progress.push(format!("hibernating: stopping {names}"));
        self.notes.push(normal(
            EventReason::Hibernating,
            format!(
                "spec.hibernation: stopping {names}; their volumes and the membership are kept"
            ),
        ));
    }

    /// A fenced member's pod is deleted, never re-created. True: `o` is fenced (its children
    /// are left alone).
    pub(super) fn fence(&mut self, o: u32) -> bool {
        if !self.spec.fenced.contains(&o) {
            return false;
        }
        let name = self.spec.member_name(o);
        if self.obs(o).pod.as_ref().is_some_and(|p| !p.terminating) {
            self.actions.insert(Action::DeletePod(o));
            self.notes.push(self.fence_note(o, &name));
        }
        self.progress
            .push(format!("{name} is fenced (spec.fencedMembers)"));
        true
    }

    /// The Event of a member being fenced, with what is risky about it.
    fn fence_note(&self, o: u32, name: &str) -> Note {
        let mut message =
            format!("spec.fencedMembers: stopping {name}; its volume and membership are kept");
        let rf = self.spec.replication_factor as usize;
        let fenced = self.spec.fenced.len();
        if fenced >= rf {
            message.push_str(&format!(
                "; {fenced} members fenced with replicationFactor {rf}: keys whose every copy is on them are unavailable until they are unfenced"
            ));
        }
        if self.spec.remove_first.contains(&o) {
            message.push_str(
                "; it is listed in spec.removeMembers: its removal waits until it is unfenced (its data must be handed off from a running node)",
            );
        }
        Note {
            kind: if fenced >= rf || self.spec.remove_first.contains(&o) {
                EventKind::Warning
            } else {
                EventKind::Normal
            },
            reason: EventReason::MemberFenced,
            message,
            member: Some(o),
        }
    }

    /// What blocks a disruptive step while members are fenced (`None`: none is).
    pub(super) fn fence_block(&self, holding: &str) -> Option<Blocked> {
        (!self.spec.fenced.is_empty()).then(|| Blocked {
            reason: BlockReason::Fenced,
            message: format!(
                "spec.fencedMembers lists {}: holding {holding} until they are unfenced",
                self.names(&self.spec.fenced.iter().copied().collect::<Vec<_>>())
            ),
        })
    }

    /// A refused wake blocks the cluster, whatever else is wanted (a scale-down would only
    /// wait for members that are not started): the user has to decide.
    pub(super) fn hold_for_wake(&mut self) {
        if let Some(b) = self.wake_refused.take() {
            self.blocked = Some(b);
        }
    }

    /// Disruptive steps the fence held back block the cluster, unless something else does.
    pub(super) fn hold_for_fence(&mut self) {
        if self.blocked.is_none()
            && let Some(held) = self.held_by(HeldBy::Fence)
        {
            self.blocked = self.fence_block(&held);
        }
    }

    /// Members a wake would start on volumes away longer than the grace.
    fn stale_on_wake(&self) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|o| !self.spec.fenced.contains(o))
            .filter(|o| {
                let m = self.obs(*o);
                m.pod.is_none()
                    && m.pvc
                        .as_ref()
                        .is_some_and(|v| !v.terminating && self.stale(v))
            })
            .collect()
    }

    /// A wake past the grace without `freshVolumesOnWake`: nothing starts, and the cluster
    /// says why and what the user can do. True: refused.
    pub(super) fn refuse_stale_wake(&mut self) -> bool {
        if !self.waking() || self.spec.fresh_volumes_on_wake {
            return false;
        }
        let stale = self.stale_on_wake();
        let Some(first) = stale.first() else {
            return false;
        };
        let away = self
            .obs(*first)
            .pvc
            .as_ref()
            .map_or_else(String::new, |v| absence_in_words(v, self.now));
        self.wake_refused = Some(Blocked {
            reason: BlockReason::WakeRefused,
            message: format!(
                "not waking: the volumes of {} have been away {away}, longer than storage.staleVolumeGraceSeconds ({}s), and may hold keys deleted since; the cluster stays stopped. Set spec.storage.freshVolumesOnWake: true to start them on fresh, empty volumes (their data is lost), or spec.hibernation: true to keep it hibernated (docs/hibernation.md)",
                self.names(&stale),
                self.spec.stale_volume_grace_ms / 1000
            ),
        });
        true
    }

    /// A wake past the grace with `freshVolumesOnWake`: the stale volume goes, its member
    /// rejoins empty (`Joining`), whatever the gate says: the user chose it.
    pub(super) fn fresh_volume_on_wake(&mut self, o: u32, v: &PvcObs) {
        let name = self.spec.member_name(o);
        // `spec.paused`, a fence or a look-alike hold it like any volume deletion.
        if self.hold(format!("a fresh volume for {name} (waking past the grace)")) {
            return;
        }
        self.actions.insert(Action::DeletePvc(o));
        self.fresh.insert(o);
        self.progress
            .push(format!("waking {name} on a fresh volume"));
        self.notes.push(Note {
            kind: EventKind::Warning,
            reason: EventReason::FreshVolumeOnWake,
            member: Some(o),
            message: format!(
                "data-{name} has been away {}, longer than the stale-volume grace: storage.freshVolumesOnWake is set, so it is deleted and {name} starts on a fresh, empty volume; the data it held is gone",
                absence_in_words(v, self.now)
            ),
        });
    }

    /// Whether the wake is over: every member but the fenced has a pod (observed: creations
    /// of this pass may not all be made, should the operator stop half-way).
    pub(super) fn woken(&self) -> bool {
        self.members
            .iter()
            .all(|o| self.spec.fenced.contains(o) || self.obs(*o).pod.is_some())
    }

    /// The hibernation record to keep, and the Event of a wake that is over.
    pub(super) fn settle_hibernation(&mut self) {
        // A whole-cluster upgrade keeps the record until its members are back and checked
        // (`upgrade.rs`): until then they are down on purpose, no mass failure.
        if self.upgrade().is_some() {
            return;
        }
        if self.waking() && self.woken() {
            self.hibernated = false;
            // The start of a whole-cluster upgrade: its own Events say so.
            if self.upgrade().is_some() || self.upgraded.is_some() {
                return;
            }
            self.notes.push(normal(
                EventReason::Woken,
                format!(
                    "every member of {} runs again; disruptive steps wait for the hand-off gate as after any restart",
                    self.spec.name
                ),
            ));
        }
    }

    /// Member names, comma-separated.
    pub(super) fn names(&self, ordinals: &[u32]) -> String {
        ordinals
            .iter()
            .map(|o| self.spec.member_name(*o))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
