//! What a member owns, and bootstrap: whole-partition copies into partitions a member newly
//! (would) own(s) that are empty on its volume, unless it is a returning member (back on its
//! own volume within the grace: it trusts its data and waits for anti-entropy). A Joining
//! member bootstraps what it would own once Active, and turns Active once nothing is left to
//! bootstrap and `join_delay_ms` passed; on a cold start (its view holds other members but
//! none Active) not before `cold_start_settle_ms` after its start. Each copy counts in the receiver's
//! `marekvs_bootstraps_completed_total`, and its records enter the receiver's ring.
//!
//! A copy is asked of the partition's first other owner by the asker's own view (rendezvous
//! order), which answers only when it is up, connected, and an owner by its own view; else
//! nothing comes back (`marekvs-repl/src/lib.rs`: a non-owner refuses without a reply, a send
//! to an unconnected peer is dropped). The asker asks again after 5, 10, then 20 s, but only
//! while the partition is still empty on its volume: once anti-entropy or a client write put
//! anything there, the request stays pending, and counted by the join-gate gauge, until
//! ownership moves or the process restarts. An Active member's gauge can so stay above 0.

use std::collections::BTreeSet;

use super::Cluster;
use super::member::{NodePhase, PeerState};
use super::placement::{candidates, owners_of};

/// The node's first wait before asking again for a copy nobody answered.
const BOOTSTRAP_RETRY_MS: u64 = 5_000;

/// Who answers a request for a copy.
enum Donor {
    /// No other owner in the asker's view: nothing to copy.
    Nobody,
    /// The first other owner, which is down, not connected, or no owner by its own view.
    Unanswered,
    Answers(String),
}

impl Cluster {
    /// The partitions member `key` owns (sorted): none while Joining.
    pub(crate) fn owned(&mut self, key: &str) -> Vec<u32> {
        let partitions = self.settings.partitions;
        let m = self.members.get_mut(key).expect("member exists");
        if let Some(o) = &m.owned {
            return o.clone();
        }
        let owned: Vec<u32> = if m.phase == NodePhase::Joining {
            Vec::new()
        } else {
            let cands = candidates(&m.view);
            (0..partitions)
                .filter(|pid| owners_of(&cands, m.replicas_n, *pid).contains(&m.node_id.as_str()))
                .collect()
        };
        m.owned = Some(owned.clone());
        owned
    }

    /// What member `key` would own: what it owns, or while Joining what it would own Active.
    fn would_own(&mut self, key: &str) -> BTreeSet<u32> {
        let m = &self.members[key];
        if m.phase != NodePhase::Joining {
            return self.owned(key).into_iter().collect();
        }
        let mut view = m.view.clone();
        view.insert(
            m.node_id.clone(),
            PeerState {
                phase: NodePhase::Active,
            },
        );
        let cands = candidates(&view);
        (0..self.settings.partitions)
            .filter(|pid| owners_of(&cands, m.replicas_n, *pid).contains(&m.node_id.as_str()))
            .collect()
    }

    /// After a view or phase change: recompute placement and queue the bootstraps it calls for.
    pub(crate) fn refresh_placement(&mut self, key: &str) {
        if !self.members[key].placement_dirty {
            return;
        }
        let m = self.members.get_mut(key).expect("member exists");
        m.placement_dirty = false;
        m.owned = None;
        self.availability_dirty = true;
        let would = self.would_own(key);
        let m = &self.members[key];
        let volume = &self.volumes[&m.volume];
        let gained: Vec<u32> = would
            .difference(&m.would_own)
            .copied()
            .filter(|pid| !m.returning && volume.is_empty(*pid))
            .collect();
        let m = self.members.get_mut(key).expect("member exists");
        m.bootstrap.retain(|pid| would.contains(pid));
        m.asked.retain(|pid, _| would.contains(pid));
        m.bootstrap.extend(gained);
        m.would_own = would;
        self.mark_held(key);
    }

    /// Bootstrap what member `key` has queued, within its copy budget.
    pub(crate) fn run_bootstrap(&mut self, key: &str, dt: f64, now_ms: u64) {
        let m = &self.members[key];
        let rate = m
            .faults
            .copy_rate_per_sec
            .unwrap_or(self.settings.copy_rate_per_sec)
            .max(0.0);
        if m.bootstrap.is_empty() {
            let m = self.members.get_mut(key).expect("member exists");
            m.copy_budget = 0.0;
            return;
        }
        let mut budget = m.copy_budget + rate * dt;
        let queue: Vec<u32> = m.bootstrap.iter().copied().collect();
        let mut blocked_cost = 0.0f64;
        let mut done = false;
        for pid in queue {
            if budget < 1.0 {
                break;
            }
            if !self.may_ask(key, pid, now_ms) {
                continue;
            }
            let source = match self.donor(key, pid) {
                Donor::Nobody => {
                    // Nobody else owns it: nothing to copy.
                    let m = self.members.get_mut(key).expect("member exists");
                    m.bootstrap.remove(&pid);
                    m.asked.remove(&pid);
                    done = true;
                    continue;
                }
                Donor::Unanswered => {
                    self.unanswered(key, pid, now_ms);
                    continue;
                }
                Donor::Answers(source) => source,
            };
            let src_volume = &self.volumes[&self.members[&source].volume];
            let bytes = src_volume.data.get(&pid).map_or(0, |d| d.bytes);
            let cost = 1.0 + bytes as f64 / self.settings.copy_bytes_per_unit.max(1) as f64;
            if budget < cost {
                blocked_cost = cost;
                break;
            }
            budget -= cost;
            let records: Vec<_> = src_volume
                .data
                .get(&pid)
                .map(|d| {
                    d.entries
                        .iter()
                        .map(|(k, e)| (k.clone(), e.clone()))
                        .collect()
                })
                .unwrap_or_default();
            for (k, e) in records {
                self.apply_received(key, pid, &k, e);
            }
            let m = self.members.get_mut(key).expect("member exists");
            m.bootstrap.remove(&pid);
            m.asked.remove(&pid);
            m.counters.bootstraps_completed += 1;
            done = true;
        }
        let m = self.members.get_mut(key).expect("member exists");
        // No banking of budget beyond a second (or the partition waiting), so a later
        // bootstrap is not copied in a burst.
        m.copy_budget = budget.min(rate.max(1.0).max(blocked_cost));
        if done {
            self.mark_held(key);
        }
    }

    /// Whether member `key` asks for `pid` now: the first time, or once its wait is over and
    /// only while the partition is still empty on its volume.
    fn may_ask(&self, key: &str, pid: u32, now_ms: u64) -> bool {
        let m = &self.members[key];
        m.asked.get(&pid).is_none_or(|(again_ms, _)| {
            now_ms >= *again_ms && self.volumes[&m.volume].is_empty(pid)
        })
    }

    /// A request no donor answered: asked again after 5, 10, then 20 s.
    fn unanswered(&mut self, key: &str, pid: u32, now_ms: u64) {
        let m = self.members.get_mut(key).expect("member exists");
        let asked = m.asked.get(&pid).map_or(0, |(_, n)| *n);
        let wait = BOOTSTRAP_RETRY_MS << asked.min(2);
        m.asked.insert(pid, (now_ms + wait, asked + 1));
    }

    /// Who is asked to copy `pid` to member `key`: its first other owner by `key`'s own view
    /// (itself not counted while Joining), answering when up, connected to `key`, and an
    /// owner by its own view.
    fn donor(&mut self, key: &str, pid: u32) -> Donor {
        let m = &self.members[key];
        let owners = owners_of(&candidates(&m.view), m.replicas_n, pid);
        let Some(first) = owners.into_iter().find(|o| *o != m.node_id) else {
            return Donor::Nobody;
        };
        let first = first.to_string();
        let Some((_, donor)) = self
            .connected_peers(key)
            .into_iter()
            .find(|(id, _)| *id == first)
        else {
            return Donor::Unanswered;
        };
        if self.owned(&donor).contains(&pid) {
            Donor::Answers(donor)
        } else {
            Donor::Unanswered
        }
    }

    /// Owned partitions not waiting for a bootstrap count as held on its volume.
    fn mark_held(&mut self, key: &str) {
        let owned = self.owned(key);
        let m = &self.members[key];
        let volume = self.volumes.get_mut(&m.volume).expect("volume exists");
        for pid in owned {
            if !m.bootstrap.contains(&pid) && !volume.held[pid as usize] {
                volume.held[pid as usize] = true;
                self.existed[pid as usize] = true;
            }
        }
    }

    /// A member not yet activated whose gate is empty (and whose start delay passed) turns
    /// Active. A drain that came while it was joining is lost then: the node's join gate sets
    /// Active whatever the phase (`marekvs-server/src/main.rs`), and its RESP port opens.
    pub(crate) fn maybe_activate(&mut self, key: &str, now_ms: u64) {
        let m = &self.members[key];
        if !m.is_up()
            || m.activated
            || !matches!(m.phase, NodePhase::Joining | NodePhase::Leaving)
            || m.faults.hold_join
            || now_ms < m.started_ms + self.settings.join_delay_ms
            || !m.bootstrap.is_empty()
            || m.placement_dirty
        {
            return;
        }
        let others = m.view.iter().filter(|(id, _)| **id != m.node_id);
        let (mut any_other, mut active_other) = (false, false);
        for (_, state) in others {
            any_other = true;
            active_other |= state.phase == NodePhase::Active;
        }
        if any_other && !active_other && now_ms < m.started_ms + self.settings.cold_start_settle_ms
        {
            return;
        }
        self.set_phase(key, now_ms, NodePhase::Active);
        let m = self.members.get_mut(key).expect("member exists");
        m.activated = true;
    }
}
