//! Pod labels the runbook steers. Client traffic: the member leaving takes no new client
//! writes, so that what originated on it can reach every owner before it goes (gate G5).
//! Evictions: the member PDB allows none, except of the one member handed off and being moved
//! off a node being drained. Level-triggered: a label is set again while its pod is not
//! observed as asked.

use crate::types::*;

use super::Pass;

impl Pass<'_> {
    /// The removal victim (from its record on, while its pod lasts) and the member being
    /// restarted (until its pod is deleted) are labelled off; any other member's pod observed
    /// off (a removal cancelled, a restart given up) is labelled on again.
    /// Whatever holds every disruptive step (paused, fenced, a mass failure, disagreeing
    /// views, a look-alike) holds the label too: nothing is done to any member meanwhile.
    pub(super) fn steer_client_traffic(&mut self) {
        if self.spec.paused
            || !self.spec.fenced.is_empty()
            || self.mass.is_some()
            || self.views_disagree()
            || !self.look_alikes.is_empty()
        {
            return;
        }
        let members: Vec<u32> = self.members.iter().copied().collect();
        for o in members {
            // A pod deleted in this pass needs no label (a new pod is built with "on").
            if self.actions.contains(&Action::DeletePod(o))
                || self.actions.contains(&Action::DeleteUnstartedPod(o))
            {
                continue;
            }
            let Some(p) = self.obs(o).pod.as_ref().filter(|p| !p.terminating) else {
                continue;
            };
            let off = self.traffic_cut(o);
            if off != p.client_traffic_off {
                self.actions.insert(Action::SetClientTraffic {
                    ordinal: o,
                    on: !off,
                });
            }
        }
    }

    /// Whether member `o`'s client traffic must be off: the member leaving, or every member
    /// while a whole-cluster upgrade runs (until the views are checked after the start).
    fn traffic_cut(&self, o: u32) -> bool {
        match self.disruption.as_ref() {
            Some(Disruption::Removal(r)) => r.ordinal == o,
            Some(Disruption::Roll(r)) => r.ordinal == o && r.step != RollStep::Rejoining,
            Some(Disruption::Upgrade(_)) => true,
            None => false,
        }
    }

    /// Let evictions take only the member being moved off a node being drained, from the
    /// step its pod may go (`Deleting`, after its hand-off) while nothing holds disruptive
    /// steps; every other pod seen allowed is guarded again (a move given up, a hold since).
    pub(super) fn steer_evictions(&mut self) {
        let held = self.holder().is_some();
        let members: Vec<u32> = self.members.iter().copied().collect();
        for o in members {
            let Some(p) = self.obs(o).pod.as_ref().filter(|p| !p.terminating) else {
                continue;
            };
            // Only while its node is still being drained: nothing else would evict it.
            let allowed = !held
                && p.drained
                && matches!(self.disruption.as_ref(), Some(Disruption::Roll(r))
                    if r.ordinal == o
                        && r.step == RollStep::Deleting
                        && r.drained_node().is_some()
                        && p.draining_node() == r.drained_node());
            if allowed != p.eviction_allowed {
                self.actions.insert(Action::SetEviction {
                    ordinal: o,
                    allowed,
                });
            }
        }
    }
}
