//! Membership views: every member holds its own view of the others (node id and phase).
//! Views lag the truth: a join, a phase change or a departure reaches each peer after its own
//! jittered gossip or failure-detection delay, so views disagree for a while.

use super::member::{NodePhase, PeerState, PendingViewChange};
use super::{Cluster, NotServing};

/// A member's view, as `CLUSTER NODES` and `CLUSTER INFO` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub node_id: String,
    pub replicas_n: usize,
    /// Every node id in the view (itself included), in node id order.
    pub peers: Vec<ViewPeer>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewPeer {
    pub node_id: String,
    /// The address it last started with; `None` if this cluster never ran it.
    pub addr: Option<String>,
    pub phase: NodePhase,
    pub myself: bool,
    /// When its latest process started (model time, ms): its `CLUSTER NODES` generation.
    pub started_ms: Option<u64>,
}

impl MemberView {
    /// Peers the view sees Active.
    pub fn active(&self) -> usize {
        self.peers
            .iter()
            .filter(|p| p.phase == NodePhase::Active)
            .count()
    }
}

impl Cluster {
    /// Tell every other running member about `subject` after a delay drawn from `delay`.
    pub(crate) fn announce(
        &mut self,
        now_ms: u64,
        subject: &str,
        state: Option<PeerState>,
        delay: (u64, u64),
    ) {
        self.seq += 1;
        let seq = self.seq;
        let observers: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.is_up() && m.node_id != subject)
            .map(|(k, _)| k.clone())
            .collect();
        for key in observers {
            let due_ms = now_ms + self.jitter(delay);
            if let Some(m) = self.members.get_mut(&key) {
                m.pending.push(PendingViewChange {
                    due_ms,
                    subject: subject.to_string(),
                    state,
                    seq,
                });
            }
        }
    }

    /// Member `key` turns `phase` and gossips it.
    pub(crate) fn set_phase(&mut self, key: &str, now_ms: u64, phase: NodePhase) {
        let m = self.members.get_mut(key).expect("member exists");
        m.phase = phase;
        let id = m.node_id.clone();
        m.view.insert(id.clone(), PeerState { phase });
        m.placement_dirty = true;
        let delay = self.settings.gossip_delay_ms;
        self.announce(now_ms, &id, Some(PeerState { phase }), delay);
    }

    /// Deliver the gossip due to member `key` by `now_ms`.
    pub(crate) fn deliver_gossip(&mut self, key: &str, now_ms: u64) {
        let m = self.members.get_mut(key).expect("member exists");
        if !m.is_up() {
            m.pending.clear();
            return;
        }
        if m.pending.iter().all(|c| c.due_ms > now_ms) {
            return;
        }
        let mut due: Vec<PendingViewChange> = Vec::new();
        m.pending.retain(|c| {
            if c.due_ms <= now_ms {
                due.push(c.clone());
                false
            } else {
                true
            }
        });
        due.sort_by_key(|c| c.seq);
        for c in due {
            if m.view_seq.get(&c.subject).is_some_and(|s| *s > c.seq) || c.subject == m.node_id {
                continue;
            }
            m.view_seq.insert(c.subject.clone(), c.seq);
            match c.state {
                Some(s) => m.view.insert(c.subject.clone(), s),
                None => m.view.remove(&c.subject),
            };
            m.placement_dirty = true;
        }
    }

    /// `member`'s membership view with its peers' addresses.
    pub fn view(&self, member: &str) -> Result<MemberView, NotServing> {
        let m = self.serving(member)?;
        let peers = m
            .view
            .iter()
            .map(|(id, state)| ViewPeer {
                node_id: id.clone(),
                addr: self.addrs.get(id).cloned(),
                phase: state.phase,
                myself: *id == m.node_id,
                started_ms: self.boots.get(id).copied(),
            })
            .collect();
        Ok(MemberView {
            node_id: m.node_id.clone(),
            replicas_n: m.replicas_n,
            peers,
        })
    }
}
