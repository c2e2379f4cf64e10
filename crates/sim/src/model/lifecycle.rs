//! The life of a member process: start (Joining, on its volume), `/drain` (Leaving, nothing
//! else), SIGTERM (Leaving at once, a fixed sleep, then a wait for its ring backlog to
//! connected peers to empty, bounded, then exit), kill (gone at once). Peers drop an exited
//! member from their views only after their failure detector noticed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use super::member::{Counters, Member, MemberSpec, NodePhase, PeerState, Process};
use super::ring::Ring;
use super::volume::Volume;
use super::{Cluster, ms};

impl Cluster {
    /// A member process starts (pod running): it joins on `volume`, learning the current
    /// members from its seeds at once; they learn of it after a gossip delay.
    pub fn start_member(&mut self, now: Duration, spec: MemberSpec) {
        let now_ms = ms(now);
        if self.members.get(&spec.key).is_some_and(Member::is_up) {
            self.exit(&spec.key, now_ms, 137, self.settings.crash_detect_ms);
        }
        let MemberSpec {
            key,
            node_id,
            replicas_n,
            volume,
            disk_bytes,
            faults,
            addr,
            version,
        } = spec;
        let p = self.settings.partitions as usize;
        let vol = self
            .volumes
            .entry(volume.clone())
            .or_insert_with(|| Volume::new(p));
        // Returning: it served from this volume before (the node's heartbeat is on it), within
        // the grace; a node that crashed before it ever turned Active is not.
        let returning = vol
            .heartbeat_ms
            .is_some_and(|t| now_ms.saturating_sub(t) < self.settings.returning_grace_ms);
        self.addrs.insert(node_id.clone(), addr.clone());
        self.boots.insert(node_id.clone(), now_ms);
        self.up_by_id.insert(node_id.clone(), key.clone());
        let mut view = BTreeMap::new();
        for m in self
            .members
            .values()
            .filter(|m| m.is_up() && m.node_id != node_id)
        {
            view.insert(m.node_id.clone(), PeerState { phase: m.phase });
        }
        view.insert(
            node_id.clone(),
            PeerState {
                phase: NodePhase::Joining,
            },
        );
        self.seq += 1;
        let boot = self.seq;
        let next_ae_ms = self.next_ae_at(now_ms);
        let member = Member {
            node_id: node_id.clone(),
            version,
            addr,
            replicas_n: replicas_n.max(1),
            volume,
            disk_bytes,
            process: Process::Running,
            phase: NodePhase::Joining,
            started_ms: now_ms,
            faults,
            view,
            view_seq: BTreeMap::new(),
            pending: Vec::new(),
            boot,
            returning,
            activated: false,
            counters: Counters::default(),
            owned: None,
            would_own: BTreeSet::new(),
            placement_dirty: true,
            bootstrap: BTreeSet::new(),
            asked: BTreeMap::new(),
            copy_budget: 0.0,
            ring: Ring::new(
                self.settings.ring_ops_per_sec.max(0.0),
                self.settings.ring_ship_bytes_per_sec.max(0.0),
            ),
            ae_round: 0,
            next_ae_ms,
            ae_inbox: Default::default(),
            ae_credit: 0.0,
            gauges: None,
            next_gauges_ms: now_ms + self.settings.gauge_refresh_ms.max(1),
            leases: HashMap::new(),
            interests: HashMap::new(),
            exit_code: None,
        };
        self.members.insert(key.clone(), member);
        let delay = self.settings.gossip_delay_ms;
        self.announce(
            now_ms,
            &node_id,
            Some(PeerState {
                phase: NodePhase::Joining,
            }),
            delay,
        );
        self.refresh_placement(&key);
    }

    /// `/drain`: the member turns Leaving and gossips it; nothing else. Idempotent.
    pub fn drain(&mut self, now: Duration, key: &str) -> bool {
        let Some(m) = self.members.get(key) else {
            return false;
        };
        if !m.is_up() {
            return false;
        }
        if m.phase != NodePhase::Leaving {
            self.set_phase(key, ms(now), NodePhase::Leaving);
        }
        true
    }

    /// SIGTERM: Leaving at once; after `flush_ms` it exits as soon as its ring backlog to
    /// connected peers is empty, at the latest `flush_backlog_max_ms` later.
    pub fn terminate(&mut self, now: Duration, key: &str) {
        let now_ms = ms(now);
        let Some(m) = self.members.get_mut(key) else {
            return;
        };
        if m.process != Process::Running {
            return;
        }
        let sleep_until_ms = now_ms + self.settings.flush_ms;
        m.process = Process::Flushing {
            sleep_until_ms,
            deadline_ms: sleep_until_ms + self.settings.flush_backlog_max_ms,
        };
        if m.phase != NodePhase::Leaving {
            self.set_phase(key, now_ms, NodePhase::Leaving);
        }
    }

    /// SIGKILL or a crash: gone at once; peers notice after the crash-detection delay.
    pub fn kill(&mut self, now: Duration, key: &str) {
        if self.members.get(key).is_some_and(Member::is_up) {
            self.exit(key, ms(now), 137, self.settings.crash_detect_ms);
        }
    }

    /// Forget a member whose pod is gone (its volume stays).
    pub fn remove_member(&mut self, now: Duration, key: &str) {
        self.kill(now, key);
        self.members.remove(key);
    }

    pub fn set_faults(&mut self, key: &str, faults: super::settings::Faults) -> bool {
        match self.members.get_mut(key) {
            Some(m) => {
                m.faults = faults;
                true
            }
            None => false,
        }
    }

    /// The process of member `key` ends; peers drop it after a delay drawn from `detect`.
    /// What only its memory held (its ring: unshipped, gapped and skipped writes) is gone.
    pub(crate) fn exit(&mut self, key: &str, now_ms: u64, code: i32, detect: (u64, u64)) {
        let m = self.members.get_mut(key).expect("member exists");
        m.process = Process::Exited;
        m.exit_code = Some(code);
        m.pending.clear();
        let (id, volume) = (m.node_id.clone(), m.volume.clone());
        if let Some(v) = self.volumes.get_mut(&volume) {
            v.last_exit_ms = Some(now_ms);
        }
        if self.up_by_id.get(&id).is_some_and(|k| k == key) {
            self.up_by_id.remove(&id);
        }
        self.availability_dirty = true;
        self.drop_links(key);
        self.announce(now_ms, &id, None, detect);
    }
}
