//! A whole-cluster upgrade (`spec.upgrade.strategy: WholeCluster`), for a release that allows
//! no mixed-version mesh: a change of the member image stops every member at once and starts
//! them all on the new image, each on its own volume.
//!
//! 1. **Flushing.** Every member's client traffic is cut (the client Service selects none).
//!    Each member is then held to the hand-off gate's leaver checks, all at once: its pod
//!    labelled off, no client input since it went quiet, its ring shipped, and enough of its own
//!    anti-entropy rounds since; and the cluster's: every member ready, scraped, views
//!    converged, nothing under-replicated. What each member took has then reached its owners.
//! 2. **Stopping.** Every member's pod is deleted at once (each node ships what it can and
//!    exits on SIGTERM); no pod is created until none is left, so the two releases never mesh.
//! 3. **Starting.** Every member gets its new pod on its own volume, its client traffic still
//!    off. Once every member is ready and the gate passes over all of them (views converged by
//!    identity, nothing under-replicated or joining, bootstraps settled) and each member's own
//!    anti-entropy rounds since its restart have handed on what its volume holds (it came back
//!    with an empty ring: the leaver checks again), traffic returns.
//!
//! Anything that holds a disruptive step (pause, fence, mass failure, disagreeing views,
//! look-alikes) holds the flush's end and the start of the stop. Stopping and Starting run to
//! the end once begun: a cluster half stopped serves nothing, so the way out is forward.

use crate::handoff::{GateHold, Leaver};
use crate::types::*;

use super::removal::CUT_CONNECTIONS_AFTER_MS;
use super::{Pass, normal};

fn enter(u: &mut Upgrade, step: UpgradeStep, now: Millis) {
    u.step = step;
    u.step_started_at = now;
}

impl Pass<'_> {
    pub(super) fn upgrade(&self) -> Option<&Upgrade> {
        self.disruption.as_ref().and_then(Disruption::upgrade)
    }

    /// The upgrade is stopping members: no pod is created, every running one is deleted.
    /// Stopping, or starting while a member runs an earlier image than the spec's (the image
    /// changed again while they were down): no pod is created beside it, and every one stops
    /// again ([`Self::started`]).
    pub(super) fn upgrade_stopping(&self) -> bool {
        self.upgrade().is_some_and(|u| {
            u.step == UpgradeStep::Stopping
                || (u.step == UpgradeStep::Starting && !self.image_outdated().is_empty())
        })
    }

    /// Members whose pod runs another image than the spec's.
    pub(super) fn image_outdated(&self) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|o| {
                self.obs(*o)
                    .pod
                    .as_ref()
                    .is_some_and(|p| p.image_outdated && !p.terminating)
            })
            .collect()
    }

    /// A change of image that takes members to an older release, unless the spec allows it:
    /// nothing restarts on that image (`versions::downgrade`).
    pub(super) fn downgrade_block(&self) -> Option<Blocked> {
        if self.spec.allow_downgrade || self.image_outdated().is_empty() {
            return None;
        }
        let d = crate::versions::downgrade(
            self.spec.image_release.as_deref(),
            &self.members,
            self.observed,
        )?;
        Some(Blocked {
            reason: BlockReason::DowngradeNotAllowed,
            message: format!(
                "the spec's image runs marekvs {} where {} run {}: a downgrade, which an older release may not survive (it may not read what a newer one wrote); no member restarts on it. Set spec.upgrade.allowDowngrade: true to go ahead, or set the image back",
                d.to,
                self.names(&d.on),
                d.from
            ),
        })
    }

    /// Delete every running member's pod (the Stopping step).
    pub(super) fn stop_for_upgrade(&mut self) {
        let running: Vec<u32> = self
            .members
            .iter()
            .copied()
            .filter(|o| self.obs(*o).pod.as_ref().is_some_and(|p| !p.terminating))
            .collect();
        // Stopped on purpose: no mass failure, and the start is a wake.
        self.hibernated = true;
        if !running.is_empty() {
            self.actions
                .extend(running.iter().map(|o| Action::DeletePod(*o)));
            self.progress.push(format!(
                "whole-cluster upgrade: stopping {}",
                self.names(&running)
            ));
        }
    }

    /// Start a whole-cluster upgrade: with the strategy set, a member on another image, the
    /// membership complete, nothing else in progress, and the cluster settled.
    pub(super) fn start_upgrade(&mut self) {
        let outdated = self.image_outdated();
        if !self.spec.whole_cluster_upgrade
            || outdated.is_empty()
            || self.disruption.is_some()
            || self.rolled.is_some()
            || self.completed.is_some()
            || self.blocked.is_some()
            || self.members.len() != self.target
            || self.drained_bystander()
            || self.spec.hibernation
        {
            return;
        }
        if let Some(b) = self.downgrade_block() {
            self.blocked = Some(b);
            return;
        }
        if let Err(b) = self.may_start_upgrade() {
            self.blocked = Some(b);
            return;
        }
        if self.hold("the whole-cluster upgrade".into()) {
            return;
        }
        // The API server must admit the new pod before any member is touched.
        if !self.new_pod_admitted(outdated[0]) {
            return;
        }
        self.disruption = Some(Disruption::Upgrade(Upgrade {
            step: UpgradeStep::Flushing,
            started_at: self.now,
            step_started_at: self.now,
            stopped_at: None,
        }));
        let members: Vec<u32> = self.members.iter().copied().collect();
        for o in &members {
            self.phases.insert(*o, MemberPhase::Draining);
        }
        self.notes.push(normal(
            EventReason::WholeClusterUpgradeStarted,
            format!(
                "spec.upgrade.strategy WholeCluster: upgrading {} ({} of {} members on another image) all at once: cutting client traffic, then stopping every member once what each took has reached its owners",
                self.spec.name,
                outdated.len(),
                members.len()
            ),
        ));
    }

    fn may_start_upgrade(&self) -> Result<(), Blocked> {
        let holding = "the whole-cluster upgrade";
        if self.spec.paused {
            Err(Blocked {
                reason: BlockReason::Paused,
                message: format!("spec.paused is set: holding {holding}"),
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
            self.gate_all(None)
        }
    }

    pub(super) fn advance_upgrade(&mut self) {
        let Some(Disruption::Upgrade(mut u)) = self
            .disruption
            .take_if(|d| matches!(d, Disruption::Upgrade(_)))
        else {
            return;
        };
        let done = match u.step {
            UpgradeStep::Flushing => {
                self.flush(&mut u);
                false
            }
            UpgradeStep::Stopping => {
                self.stopped(&mut u);
                false
            }
            UpgradeStep::Starting => self.started(&mut u),
        };
        if done {
            self.upgraded = Some(u);
        } else {
            self.disruption = Some(Disruption::Upgrade(u));
        }
    }

    /// Every member held to the leaver checks at once, `since` the step began: `Ok`, or the
    /// first hold.
    fn every_member_handed_on(&self, since: Millis) -> Result<(), GateHold> {
        for &o in &self.members {
            let leaver = Leaver {
                ordinal: o,
                traffic_cut: true,
                keeps_volume: true,
            };
            self.gate_leaving(Some(since), leaver)?;
        }
        Ok(())
    }

    /// Every member held to the leaver checks at once; then stop them all. Writes that keep
    /// arriving over connections opened before the cut (a pooled client keeps them; a marekvs
    /// node closes one only when it exits) do not hold the stop past
    /// `CUT_CONNECTIONS_AFTER_MS`: the stop closes them, what they wrote stays on the
    /// writer's volume, and the start waits for every member's own anti-entropy rounds to hand
    /// it on before traffic returns.
    fn flush(&mut self, u: &mut Upgrade) {
        let members: Vec<u32> = self.members.iter().copied().collect();
        if let Err(h) = self.every_member_handed_on(u.step_started_at) {
            let pooled_writers = h.moving == Moving::ClientTraffic
                && h.rate_per_sec.is_some_and(|w| w > 0.0)
                && self.now - u.step_started_at >= CUT_CONNECTIONS_AFTER_MS
                && self.gate_all(None).is_ok();
            if !pooled_writers {
                self.report_hold(&h);
                let doing = "whole-cluster upgrade, flushing before every member stops";
                self.wait_on_gate(
                    h.blocked,
                    doing,
                    "the whole-cluster upgrade",
                    "flush before the stop",
                    u.step_started_at,
                );
                return;
            }
            self.progress.push(format!(
                "{} still take client writes over connections opened before the cut: stopping closes them, and the start waits for what they wrote to be handed on",
                self.names(&h.members)
            ));
        }
        if self.hold("stopping every member for the whole-cluster upgrade".into()) {
            return;
        }
        enter(u, UpgradeStep::Stopping, self.now);
        u.stopped_at = Some(self.now);
        self.notes.push(normal(
            EventReason::WholeClusterStopping,
            format!(
                "what every member of {} took has reached its owners: stopping {} at once, to start them all on the new image",
                self.spec.name,
                self.names(&members)
            ),
        ));
        self.stop_for_upgrade();
    }

    /// Once no member has a pod left, start them all (the children phase of the next pass
    /// creates every pod at once).
    fn stopped(&mut self, u: &mut Upgrade) {
        let left: Vec<u32> = self
            .members
            .iter()
            .copied()
            .filter(|o| self.obs(*o).pod.is_some())
            .collect();
        if left.is_empty() {
            enter(u, UpgradeStep::Starting, self.now);
            self.progress.push(format!(
                "whole-cluster upgrade: every member of {} stopped; starting them all on the new image",
                self.spec.name
            ));
        } else {
            self.progress.push(format!(
                "whole-cluster upgrade: waiting for {} to stop",
                self.names(&left)
            ));
        }
    }

    /// True once every member runs again and the gate passes over all of them. A new pod that
    /// is outdated again and not ready (the spec changed while they were down) is replaced.
    fn started(&mut self, u: &mut Upgrade) -> bool {
        let members: Vec<u32> = self.members.iter().copied().collect();
        // The image changed again while they started: a pod on the newer one beside this one
        // would mesh two releases, so every member stops again (this pass deleted them, see
        // `upgrade_stopping`) and all start on the newer image.
        let earlier = self.image_outdated();
        if !earlier.is_empty() {
            enter(u, UpgradeStep::Stopping, self.now);
            self.progress.push(format!(
                "whole-cluster upgrade: the member image changed again while {} started on an earlier one; stopping every member again",
                self.names(&earlier)
            ));
            return false;
        }
        for &o in &members {
            let again = self
                .obs(o)
                .pod
                .as_ref()
                .is_some_and(|p| p.outdated && !p.ready && !p.terminating);
            if again
                && !self.hold(format!(
                    "restarting {} again for the whole-cluster upgrade",
                    self.spec.member_name(o)
                ))
            {
                self.actions.insert(Action::DeletePod(o));
            }
        }
        // Each member back on its volume is a leaver restarted with its ring gone: what it
        // took and had not shipped is handed on by its own anti-entropy rounds only.
        match self
            .every_member_handed_on(u.step_started_at)
            .map_err(|h| h.blocked)
        {
            Ok(()) => {
                self.hibernated = false;
                let down = u.stopped_at.map_or(0, |t| self.now - t);
                let cut = self.now - u.started_at;
                self.notes.push(normal(
                    EventReason::WholeClusterUpgraded,
                    format!(
                        "every member of {} runs the current spec again and the views converged: client traffic returns (members down {:.1}s, client traffic cut {:.1}s)",
                        self.spec.name,
                        down as f64 / 1000.0,
                        cut as f64 / 1000.0
                    ),
                ));
                true
            }
            Err(b) => {
                self.wait_on_gate(
                    b,
                    "whole-cluster upgrade, starting every member",
                    "the whole-cluster upgrade",
                    "start of every member",
                    u.step_started_at,
                );
                false
            }
        }
    }
}
