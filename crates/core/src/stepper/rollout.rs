//! Rolling update: advance the restart in progress one step, or start the next one. A fresh
//! volume asked for on a member's pod takes the same path, its volume replaced like one the
//! spec cannot have in place.

use crate::handoff::Leaver;
use crate::types::*;

use super::{HeldBy, Pass, normal, restarted_while_draining};

/// How long a member moved off a node being drained, once handed off and let go to
/// evictions, waits for the drain to evict it before the operator deletes its pod itself.
/// `kubectl drain` asks again every 5 s. The drain must be the one to take it: a drain that
/// asks only after the member's new pod exists (same name, on another node) asks to evict
/// that one, and `kubectl drain` then retries it for ever.
pub const EVICTION_WAIT_MS: Millis = 20_000;

fn enter(r: &mut Roll, step: RollStep, now: Millis) {
    r.step = step;
    r.step_started_at = now;
    if step == RollStep::Draining {
        // Drained again (its node restarted and served since): what was handed off before
        // no longer covers what it holds now, and a cut taken before is over.
        r.handed_off_pvc = None;
        r.connections_cut_at = None;
    }
}

impl Pass<'_> {
    /// Whether the restart in progress moves its member off volume `v` to a fresh one: never
    /// with replicationFactor 1, where a drained member still owns the only copy of its
    /// partitions until it exits (the member restarts on its volume; a new restart that would
    /// move it is refused, `SingleCopy`).
    pub(super) fn leaves_volume(&self, r: &Roll, v: &PvcObs) -> bool {
        self.spec.replication_factor >= 2 && r.leaves_volume(v)
    }

    /// Advance the rolling update in progress.
    pub(super) fn advance_roll(&mut self) {
        let Some(Disruption::Roll(mut r)) = self
            .disruption
            .take_if(|d| matches!(d, Disruption::Roll(_)))
        else {
            return;
        };
        let name = self.spec.member_name(r.ordinal);
        self.follow_its_pod(&mut r, &name);
        if self.update_cancelled(&r, &name) {
            return;
        }
        match r.step {
            RollStep::Draining => self.drain_for_update(&mut r, &name),
            RollStep::HandingOff => self.hand_off_for_update(&mut r, &name),
            RollStep::Deleting => self.delete_for_update(&mut r, &name),
            RollStep::Rejoining => {
                if self.rejoined(&mut r, &name) {
                    self.rolled = Some(r.clone());
                    self.notes.push(if let Some(node) = r.drained_node() {
                        normal(
                            EventReason::MemberMovedOffNode,
                            format!(
                                "{name} left node {node}, which is being drained, and runs again on its own volume; the cluster is fully replicated again"
                            ),
                        )
                    } else if r.restart_requested() {
                        normal(
                            EventReason::MemberRestarted,
                            format!(
                                "{name} restarted on its own volume; the cluster is fully replicated again"
                            ),
                        )
                    } else if r.requested() {
                        normal(
                            EventReason::VolumeReplaced,
                            format!(
                                "{name} runs on a fresh volume; the cluster is fully replicated again"
                            ),
                        )
                    } else {
                        normal(
                            EventReason::MemberUpdated,
                            format!(
                                "{name} runs the current spec; the cluster is fully replicated again"
                            ),
                        )
                    });
                    return;
                }
            }
        }
        self.disruption = Some(Disruption::Roll(r));
    }

    /// Whatever the step, a member whose pod is gone is rejoining, and one that runs again has
    /// no handed-off volume any more.
    fn follow_its_pod(&mut self, r: &mut Roll, name: &str) {
        let m = self.obs(r.ordinal);
        if m.pod.is_none() && r.step != RollStep::Rejoining {
            // Its pod is gone (deleted by this step or by hand): the children phase, earlier
            // in this pass, created a new one.
            enter(r, RollStep::Rejoining, self.now);
            let message = if let Some(node) = r.drained_node() {
                format!(
                    "re-creating {name} on its own volume, off node {node}, which is being drained"
                )
            } else if r.restart_requested() {
                format!("re-creating {name} on its own volume, as its pod asked")
            } else if r.requested() {
                format!("re-creating {name} on a fresh volume once its data was handed off")
            } else {
                format!("re-creating {name} with the current spec on its own volume")
            };
            self.notes
                .push(normal(EventReason::MemberRestarting, message));
        }
        if r.step == RollStep::Rejoining && m.pod.is_some() {
            // It runs again on its volume and may own data again: the hand-off no longer holds.
            r.handed_off_pvc = None;
        }
    }

    /// The spec went back to what this member runs before it was drained, or its pod no
    /// longer asks for the restart. A fresh volume asked for is never cancelled: its request
    /// went with the pod it was on.
    fn update_cancelled(&mut self, r: &Roll, name: &str) -> bool {
        let m = self.obs(r.ordinal);
        let cancelled = r.step == RollStep::Draining
            && m.pod
                .as_ref()
                .is_some_and(|p| !p.outdated && !p.drained && !still_asked(r, p))
            && !m.pvc.as_ref().is_some_and(|v| self.leaves_volume(r, v));
        if cancelled {
            let message = match r.drained_node() {
                Some(node) => {
                    format!("{name}: node {node} is no longer being drained; not moving it")
                }
                None => format!("{name} already runs the current spec; not restarting it"),
            };
            self.notes
                .push(normal(EventReason::UpdateCancelled, message));
        }
        cancelled
    }

    /// Calling `/drain` on the member until its pod records it, once the API server has said
    /// it admits the pod that will replace it: a pod that cannot be made must never cost a
    /// member (drained, then deleted, then refused on every pass).
    fn drain_for_update(&mut self, r: &mut Roll, name: &str) {
        let m = self.obs(r.ordinal);
        match &m.pod {
            Some(p) if p.drained => {
                self.notes.push(normal(
                    EventReason::Draining,
                    format!("{name} drained before its restart: handing its data off"),
                ));
                enter(r, RollStep::HandingOff, self.now);
            }
            Some(_)
                if !self.hold(format!("draining {name} for the update"))
                    && self.new_pod_admitted(r.ordinal) =>
            {
                self.actions.insert(Action::Drain(r.ordinal));
                self.progress.push(format!(
                    "draining {name} before restarting it with the current spec"
                ));
            }
            _ => {}
        }
    }

    /// Whether the API server admits the pod the spec now builds for member `o`. Unknown: ask
    /// it (a dry run, `Action::CheckPod`) and wait. Refused: the cluster is Blocked with the
    /// server's words, and nothing is touched until the spec changes.
    pub(super) fn new_pod_admitted(&mut self, o: u32) -> bool {
        let name = self.spec.member_name(o);
        match self.obs(o).new_pod.clone() {
            PodAdmission::Admitted => true,
            PodAdmission::Unchecked => {
                self.actions.insert(Action::CheckPod(o));
                self.progress.push(format!(
                    "asking the API server whether it admits {name}'s new pod before draining it"
                ));
                false
            }
            PodAdmission::Refused { message, ask_again } => {
                if ask_again {
                    self.actions.insert(Action::CheckPod(o));
                }
                self.blocked = Some(Blocked {
                    reason: BlockReason::PodRefused,
                    message: format!(
                        "the API server refuses the pod the spec now builds for {name}, so no member is drained until the spec is fixed: {message}"
                    ),
                });
                false
            }
        }
    }

    /// It is drained and still serving: delete its pod once the others hold its data.
    fn hand_off_for_update(&mut self, r: &mut Roll, name: &str) {
        let m = self.obs(r.ordinal);
        if m.pod.as_ref().is_some_and(|p| !p.drained && !p.terminating) {
            self.notes.push(restarted_while_draining(name));
            enter(r, RollStep::Draining, self.now);
            return;
        }
        // Every member, this one too: it must still be up as the source of the copies, its
        // client traffic cut and its ring empty.
        let leaver = Leaver {
            ordinal: r.ordinal,
            traffic_cut: true,
            keeps_volume: m.pvc.as_ref().is_some_and(|v| !self.leaves_volume(r, v)),
        };
        match self.gate_leaving(Some(r.step_started_at), leaver) {
            Ok(()) => {
                if !self.hold(format!("restarting {name}")) {
                    enter(r, RollStep::Deleting, self.now);
                    r.handed_off_pvc = m.pvc.as_ref().map(|v| v.uid.clone());
                    // Off a node being drained, the drain's eviction takes it (the eviction
                    // steering lets it through from this step on): see `EVICTION_WAIT_MS`.
                    if r.drained_node().is_none() {
                        self.actions.insert(Action::DeletePod(r.ordinal));
                    }
                }
            }
            // Pooled clients keep connections opened before its traffic was cut, and a
            // marekvs node closes one only when it exits: waiting for them would hold the
            // update for good. Its own volume comes back with what they wrote, to be handed
            // on by its rounds, so its restart is the cut (as a removal's restart is).
            Err(h)
                if leaver.keeps_volume
                    && self.restart_would_close_connections(r.ordinal, &h, r.step_started_at)
                    && !self.hold(format!(
                        "restarting {name}, which closes its client connections"
                    )) =>
            {
                self.note_connections_cut(
                    r.ordinal,
                    &h,
                    r.step_started_at,
                    "it comes back on its own volume with what they wrote",
                );
                r.connections_cut_at = Some(self.now);
                enter(r, RollStep::Deleting, self.now);
                // Not left to a drain's eviction: the writes would hold it again meanwhile.
                self.actions.insert(Action::DeletePod(r.ordinal));
            }
            Err(h) => self.wait_gate_for_update(h.blocked, r, name, "hand-off before its restart"),
        }
    }

    /// Deleting its outdated pod.
    fn delete_for_update(&mut self, r: &mut Roll, name: &str) {
        let m = self.obs(r.ordinal);
        match &m.pod {
            Some(p) if p.terminating => self
                .progress
                .push(format!("waiting for {name} to flush and exit")),
            // Held after its hand-off passed: a client may have sent it data since. (Not
            // after a restart taken to close its connections: its writes are what it cuts.)
            Some(p)
                if p.drained && r.connections_cut_at.is_none() && !self.covered_now(r.ordinal) =>
            {
                self.progress.push(format!(
                    "{name} is no longer known to be handed on (client input, a restart or an unknown reading since): handing off again"
                ));
                enter(r, RollStep::HandingOff, self.now);
            }
            Some(p) if p.drained => {
                let waited = self.now - r.step_started_at;
                // The drain's eviction takes it while its node is still being drained; once
                // uncordoned, nothing will: the operator deletes it.
                match r.drained_node() {
                    Some(node)
                        if waited < EVICTION_WAIT_MS && p.draining_node() == Some(node) =>
                    {
                        self.progress.push(format!(
                        "{name} is handed off and may be evicted now: waiting up to {} s for the drain of node {node} to evict it",
                        (EVICTION_WAIT_MS - waited + 999) / 1_000
                        ))
                    }
                    _ => {
                        if !self.hold(format!("restarting {name}")) {
                            self.actions.insert(Action::DeletePod(r.ordinal));
                        }
                    }
                }
            }
            // Still the pod that asked for the restart, or one the spec or volume still
            // wants gone: it restarted by itself and serves again.
            Some(p)
                if p.outdated
                    || still_asked(r, p)
                    || m.pvc.as_ref().is_some_and(|v| self.leaves_volume(r, v)) =>
            {
                self.notes.push(restarted_while_draining(name));
                enter(r, RollStep::Draining, self.now);
            }
            _ => enter(r, RollStep::Rejoining, self.now),
        }
    }

    /// Its new pod runs on the same volume, or is on its way: true once it is Active and the
    /// cluster settled.
    fn rejoined(&mut self, r: &mut Roll, name: &str) -> bool {
        let m = self.obs(r.ordinal);
        match &m.pod {
            None => self.rejoin_without_pod(r, name),
            Some(p) if p.terminating => self
                .progress
                .push(format!("waiting for the old pod of {name} to go")),
            // The spec changed again while it was out of service: it holds nothing the
            // others rely on (they took its data over before it was deleted).
            Some(p) if p.outdated && !p.ready => {
                if !self.hold(format!("restarting {name} again")) {
                    self.actions.insert(Action::DeletePod(r.ordinal));
                }
            }
            Some(_) => match self.gate_all(Some(r.step_started_at)) {
                Ok(()) if self.back_on_the_volume_asked_to_go(r) => {
                    self.notes.push(Note {
                        kind: EventKind::Warning,
                        reason: EventReason::RestartedOnOldVolume,
                        member: None,
                        message: format!(
                            "{name} came back on the volume it was asked to leave (its pod went before its data was handed off): draining it again"
                        ),
                    });
                    enter(r, RollStep::Draining, self.now);
                }
                Ok(()) => return true,
                Err(b) => self.wait_gate_for_update(b, r, name, "rejoin after its restart"),
            },
        }
        false
    }

    /// A member asked to move to a fresh volume whose pod runs on the old one again: its pod
    /// went before its data was handed off, so it was restarted on it.
    fn back_on_the_volume_asked_to_go(&self, r: &Roll) -> bool {
        r.requested()
            && self
                .obs(r.ordinal)
                .pvc
                .as_ref()
                .is_some_and(|v| self.leaves_volume(r, v))
    }

    /// The other members that held data and have no ready pod now.
    pub(super) fn away_since_hand_off(&self, o: u32) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|m| *m != o && self.memory.phases.get(m) != Some(&MemberPhase::Joining))
            .filter(|m| {
                !self
                    .obs(*m)
                    .pod
                    .as_ref()
                    .is_some_and(|p| p.ready && !p.terminating)
            })
            .collect()
    }

    /// Its pod is gone: replace its volume if its data was handed off, else wait for the pod
    /// to be re-created on it.
    fn rejoin_without_pod(&mut self, r: &Roll, name: &str) {
        match &self.obs(r.ordinal).pvc {
            // Its data was handed off: the old volume can go, a fresh one replaces it.
            Some(v)
                if self.leaves_volume(r, v)
                    && !v.terminating
                    && r.handed_off_pvc.as_deref() == Some(v.uid.as_str()) =>
            {
                // What it handed off went to members that stayed; one of them away since (a
                // fence, a crash) may be the only other holder, its volume perhaps stale.
                let away = self.away_since_hand_off(r.ordinal);
                if !away.is_empty() {
                    let who: Vec<String> = away.iter().map(|o| self.spec.member_name(*o)).collect();
                    let has = if away.len() == 1 { "has" } else { "have" };
                    self.progress.push(format!(
                        "keeping the old volume of {name} while {} {has} no ready pod: what {name} handed off may be there alone",
                        who.join(", ")
                    ));
                } else if !self.hold(format!("replacing the volume of {name}")) {
                    self.actions.insert(Action::DeletePvc(r.ordinal));
                    self.progress
                        .push(format!("replacing the volume of {name}"));
                }
            }
            Some(v) if self.leaves_volume(r, v) && !v.terminating && !self.stale(v) => {
                // Its pod went before the hand-off: keep its data, restart it on it (unless it
                // is stale: the children phase then replaces it; or a look-alike took its name:
                // `children_of` says so).
                if !self.obs(r.ordinal).look_alike && !self.spec.fenced.contains(&r.ordinal) {
                    self.actions.insert(Action::CreatePod(r.ordinal));
                }
                self.progress.push(format!(
                    "{name} lost its pod before its data was handed off: restarting it on its old volume"
                ));
            }
            Some(v) if v.terminating => self
                .progress
                .push(format!("waiting for the old volume of {name} to go")),
            _ => self
                .progress
                .push(format!("re-creating {name} with the current spec")),
        }
    }

    fn wait_gate_for_update(&mut self, gate: Blocked, r: &Roll, name: &str, what: &str) {
        let updating = format!("updating {name}");
        self.wait_on_gate(gate, &updating, &updating, what, r.step_started_at);
    }

    /// Start the next rolling update: after any scale-down (only members that stay are
    /// restarted), with the membership complete; a fresh volume asked for first, then a
    /// restart asked for, then the highest outdated ordinal.
    pub(super) fn start_roll(&mut self) {
        let outdated = self.outdated();
        let asked = self.asked_fresh_volume();
        let restarts = self.asked_restart();
        let drains = self.on_draining_nodes();
        if self.disruption.is_some()
            || self.rolled.is_some()
            || self.upgraded.is_some()
            || self.completed.is_some()
            || self.blocked.is_some()
            || self.members.len() != self.target
            || (outdated.is_empty() && asked.is_empty() && restarts.is_empty() && drains.is_empty())
            || self.drained_bystander()
            || self.spec.hibernation
        {
            return;
        }
        // A new image with `upgrade.strategy: WholeCluster` is the whole cluster's, all at once
        // (`upgrade.rs`): until it is done no member restarts alone, since its new pod would
        // run the new image beside the old (a drain's move, a restart asked for, waits too).
        if self.spec.whole_cluster_upgrade && !self.image_outdated().is_empty() {
            return;
        }
        // Nor does any on an image that takes it back to an older release, unless allowed.
        if let Some(b) = self.downgrade_block() {
            self.blocked = Some(b);
            return;
        }
        if let Err(b) = self.may_start_roll(outdated.len(), &asked, &restarts, &drains) {
            self.blocked = Some(b);
            return;
        }
        if self.mass.is_some() {
            self.held_back(HeldBy::MassFailure, "the rolling update");
            return;
        }
        if self.views_disagree() {
            self.held_back(HeldBy::Views, "the rolling update");
            return;
        }
        // The member this restart would take: its new pod must be admitted before it is
        // touched at all (its client traffic is cut as the restart starts).
        let next = drains
            .last()
            .map(|(o, _)| o)
            .or(asked.last())
            .or(restarts.last())
            .or(outdated.last());
        if !next.is_some_and(|&o| self.new_pod_admitted(o)) {
            return;
        }
        // A node being drained waits on this operator (its PDB allows no eviction of a member):
        // its members move first, the highest ordinal first.
        if let Some((o, node)) = drains.last().cloned() {
            let there = drains.iter().filter(|(_, n)| *n == node).count();
            self.start_roll_of(o, RollReason::NodeDrained { node: node.clone() });
            self.notes.push(normal(
                EventReason::NodeDrainStarted,
                format!(
                    "moving {} off node {node}, which is being drained ({there} member{} there): draining it, then letting the drain evict it once the others hold its data; it comes back on its own volume on another node",
                    self.spec.member_name(o),
                    if there == 1 { "" } else { "s" }
                ),
            ));
            return;
        }
        if let Some(&o) = asked.last() {
            let uid = self
                .obs(o)
                .pvc
                .as_ref()
                .expect("asked on a volume")
                .uid
                .clone();
            self.start_roll_of(o, RollReason::VolumeRequested { pvc: uid });
            self.notes.push(normal(
                EventReason::VolumeReplacementStarted,
                format!(
                    "moving {} to a fresh volume, as its pod asks: draining it, then replacing its volume once the others hold its data",
                    self.spec.member_name(o)
                ),
            ));
            return;
        }
        if let Some(&o) = restarts.last() {
            self.start_roll_of(o, RollReason::RestartRequested);
            self.notes.push(normal(
                EventReason::RestartStarted,
                format!(
                    "restarting {} on its own volume, as its pod asks: draining it, then deleting its pod once the others hold its data",
                    self.spec.member_name(o)
                ),
            ));
            return;
        }
        let o = *outdated.last().expect("not empty");
        self.start_roll_of(o, RollReason::SpecChanged);
        self.notes.push(normal(
            EventReason::UpdateStarted,
            format!(
                "restarting {} with the current spec ({} of {} members outdated)",
                self.spec.member_name(o),
                outdated.len(),
                self.members.len()
            ),
        ));
    }

    fn start_roll_of(&mut self, o: u32, reason: RollReason) {
        self.disruption = Some(Disruption::Roll(Roll {
            ordinal: o,
            reason,
            step: RollStep::Draining,
            handed_off_pvc: None,
            started_at: self.now,
            step_started_at: self.now,
            connections_cut_at: None,
        }));
        self.phases.insert(o, MemberPhase::Draining);
    }

    fn may_start_roll(
        &self,
        outdated: usize,
        asked: &[u32],
        restarts: &[u32],
        drains: &[(u32, String)],
    ) -> Result<(), Blocked> {
        // A drain waits on this operator: whatever holds it says so, naming the node.
        let moving = (!drains.is_empty()).then(|| {
            let on: Vec<String> = drains
                .iter()
                .map(|(o, _)| self.spec.member_name(*o))
                .collect();
            let mut nodes: Vec<&str> = drains.iter().map(|(_, n)| n.as_str()).collect();
            nodes.sort_unstable();
            nodes.dedup();
            format!(
                "moving {} off node {} (being drained)",
                on.join(", "),
                nodes.join(", ")
            )
        });
        let holding = moving.as_deref().unwrap_or("the rolling update");
        // Members that would move to a fresh volume: asked for on their pod, or on a volume
        // the spec cannot keep in place (another class or a smaller size, with replaceVolumes).
        let fresh: Vec<u32> = self
            .members
            .iter()
            .copied()
            .filter(|o| {
                asked.contains(o)
                    || self
                        .obs(*o)
                        .pvc
                        .as_ref()
                        .is_some_and(|v| v.outdated && !v.terminating)
            })
            .collect();
        if self.spec.replication_factor < 2 && !fresh.is_empty() {
            let names: Vec<String> = fresh.iter().map(|o| self.spec.member_name(*o)).collect();
            Err(super::removal::single_copy(&format!(
                "a fresh volume for {}",
                names.join(", ")
            )))
        } else if self.spec.paused {
            let names = |os: &[u32]| {
                os.iter()
                    .map(|o| self.spec.member_name(*o))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut held = Vec::new();
            if let Some(m) = &moving {
                held.push(m.clone());
            }
            if !asked.is_empty() {
                held.push(format!("the fresh volume asked for {}", names(asked)));
            }
            if !restarts.is_empty() {
                held.push(format!("the restart asked for {}", names(restarts)));
            }
            if outdated > 0 || held.is_empty() {
                held.push(format!("the rolling update of {outdated} outdated members"));
            }
            Err(Blocked {
                reason: BlockReason::Paused,
                message: format!("spec.paused is set: holding {}", held.join(" and ")),
            })
        } else if let Some(b) = self.fence_block(holding) {
            Err(b)
        } else if let Some(b) = self.look_alike_block(holding) {
            Err(b)
        } else if self.creating() || self.replacing {
            Err(Blocked {
                reason: BlockReason::Replacing,
                message: "a member is being (re-)created; waiting until it is Active and the cluster fully replicated".into(),
            })
        } else {
            self.gate_all(None).map_err(|b| match &moving {
                Some(m) => Blocked {
                    message: format!("holding {m}: {}", b.message),
                    ..b
                },
                None => b,
            })
        }
    }
}

/// What asked for this restart still asks for it: the restart annotation on its pod, or the
/// node it is moved off still being drained. A spec change is asked by `PodObs::outdated`.
fn still_asked(r: &Roll, p: &PodObs) -> bool {
    match &r.reason {
        RollReason::RestartRequested => p.restart,
        RollReason::NodeDrained { node } => p.draining_node() == Some(node.as_str()),
        RollReason::SpecChanged | RollReason::VolumeRequested { .. } => false,
    }
}
