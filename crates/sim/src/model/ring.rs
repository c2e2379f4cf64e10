//! The replication ring of a member process, and shipping from it.
//!
//! Every commit on a member (its clients' writes, replicated applies and anti-entropy repairs
//! it received, bootstrap chunks, read-through merges) enters its ring; nothing leaves it on
//! ship, only the oldest entries past the capacity are evicted. `marekvs_ring_ops` and
//! `marekvs_ring_bytes` are its occupancy: after one write they never read 0 again until
//! the process restarts.
//!
//! Shipping is apart: the sender walks the ring at most `ring_ops_per_sec` originated entries
//! and `ring_ship_bytes_per_sec` of their bytes a second, and ships each entry this member
//! originated to the owners of its partition in its view (and, when it is the partition's
//! primary, to non-owners holding a live read lease on the key). Received entries are never relayed. Each connected peer has a cursor: a peer
//! not connected keeps its place and catches up when it is back; a cursor behind the oldest
//! retained entry jumps over what was evicted (a ring gap), and a small fraction of entries
//! is silently skipped for a peer (`ring_skip_fraction`). Gaps and skips reach that peer only
//! through anti-entropy.

use std::collections::{BTreeMap, VecDeque};

use super::Cluster;
use super::placement::{owners_of, read_order};
use super::volume::Entry;

#[derive(Clone, Debug)]
pub(crate) struct RingEntry {
    pub bytes: u64,
    /// For an entry this member originated: where to find it on its volume.
    pub origin: Option<(u32, Vec<u8>)>,
}

#[derive(Clone, Debug)]
pub(crate) struct Ring {
    entries: VecDeque<RingEntry>,
    /// Sequence number of `entries[0]` (the first entry ever gets 1).
    first_seq: u64,
    bytes: u64,
    /// The sender's position: every entry up to it was walked.
    sent: u64,
    /// Peer node id → the last sequence number walked for it.
    cursors: BTreeMap<String, u64>,
    tokens: f64,
    /// The byte bucket beside the ops bucket.
    byte_tokens: f64,
}

impl Ring {
    pub fn new(tokens: f64, byte_tokens: f64) -> Self {
        Ring {
            entries: VecDeque::new(),
            first_seq: 1,
            bytes: 0,
            sent: 0,
            cursors: BTreeMap::new(),
            tokens,
            byte_tokens,
        }
    }

    pub fn ops(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Sequence number of the newest entry (0 before the first).
    pub fn head(&self) -> u64 {
        self.first_seq + self.entries.len() as u64 - 1
    }

    fn get(&self, seq: u64) -> Option<&RingEntry> {
        let i = seq.checked_sub(self.first_seq)?;
        self.entries.get(i as usize)
    }

    /// Append an entry, evicting the oldest past `max_ops` or `max_bytes`.
    pub fn push(&mut self, entry: RingEntry, max_ops: u64, max_bytes: u64) {
        self.bytes += entry.bytes;
        self.entries.push_back(entry);
        while self.entries.len() as u64 > max_ops.max(1) || self.bytes > max_bytes {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.bytes;
            self.first_seq += 1;
        }
    }

    /// Bytes of the entries this member originated that its sender has yet to walk, at most
    /// `window` per connected peer: `marekvs_repl_inflight_bytes` while the sender keeps each
    /// peer's window of unacknowledged bytes full.
    pub fn unsent_bytes(&self, peers: usize, window: u64) -> u64 {
        let unsent: u64 = (self.sent + 1..=self.head())
            .filter_map(|seq| self.get(seq))
            .filter(|e| e.origin.is_some())
            .map(|e| e.bytes)
            .sum();
        unsent.min(window) * peers as u64
    }

    /// What SIGTERM waits for: entries not yet walked for the connected peers.
    pub fn backlog(&self, connected: &[String]) -> u64 {
        let head = self.head();
        connected
            .iter()
            .map(|p| head.saturating_sub(self.cursors.get(p).copied().unwrap_or(head)))
            .max()
            .unwrap_or(0)
    }
}

/// One delivery of a shipped entry.
struct Shipment {
    to: String,
    pid: u32,
    key: Vec<u8>,
    entry: Entry,
}

impl Cluster {
    /// Record a commit on member `key`'s volume in its ring.
    pub(crate) fn ring_push(&mut self, key: &str, bytes: u64, origin: Option<(u32, Vec<u8>)>) {
        let (max_ops, max_bytes) = (
            self.settings.ring_capacity_ops,
            self.settings.ring_capacity_bytes,
        );
        if let Some(m) = self.members.get_mut(key) {
            m.ring.push(RingEntry { bytes, origin }, max_ops, max_bytes);
        }
    }

    /// Peers of member `key` it is connected to: those in its view (itself aside) whose
    /// process runs, as (node id, member key).
    pub(crate) fn connected_peers(&self, key: &str) -> Vec<(String, String)> {
        let m = &self.members[key];
        m.view
            .keys()
            .filter(|id| **id != m.node_id)
            .filter_map(|id| {
                self.up_member_by_id(id)
                    .map(|k| (id.clone(), k.to_string()))
            })
            .collect()
    }

    /// Entries of member `key`'s ring its sender has yet to walk for a connected peer: what
    /// SIGTERM waits for. Simulator only (the node's gauges show no backlog).
    pub fn ring_backlog(&self, key: &str) -> u64 {
        let connected: Vec<String> = self
            .connected_peers(key)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        self.members[key].ring.backlog(&connected)
    }

    /// Run member `key`'s sender for `dt` seconds.
    pub(crate) fn ship(&mut self, key: &str, dt: f64) {
        let peers = self.connected_peers(key);
        let rate = self.settings.ring_ops_per_sec;
        let byte_rate = self.settings.ring_ship_bytes_per_sec;
        let m = self.members.get_mut(key).expect("member exists");
        let ring = &mut m.ring;
        ring.tokens = if rate > 0.0 {
            (ring.tokens + rate * dt).min(rate.max(1.0))
        } else {
            f64::INFINITY
        };
        let byte_cap = byte_rate.max(1.0);
        ring.byte_tokens = if byte_rate > 0.0 {
            (ring.byte_tokens + byte_rate * dt).min(byte_cap)
        } else {
            f64::INFINITY
        };
        let (head, oldest) = (ring.head(), ring.first_seq - 1);
        // A sender that fell behind the oldest retained entry jumps the gap.
        ring.sent = ring.sent.max(oldest);
        // New peers start at the sender's position; gapped ones jump.
        for (id, _) in &peers {
            let c = ring.cursors.entry(id.clone()).or_insert(ring.sent);
            *c = (*c).max(oldest);
        }
        // Walk: lagging connected peers catch up to the sender (no token), then everyone
        // moves on together while tokens last.
        let mut walk: Vec<(u64, &str)> = Vec::new();
        for (id, _) in &peers {
            let from = ring.cursors[id];
            for seq in from + 1..=ring.sent {
                walk.push((seq, id));
            }
        }
        let mut sent = ring.sent;
        while sent < head {
            let origin_bytes = ring
                .get(sent + 1)
                .filter(|e| e.origin.is_some())
                .map(|e| e.bytes as f64);
            if let Some(bytes) = origin_bytes {
                // An entry above a whole second's bytes goes once the bucket is full.
                if ring.tokens < 1.0 || ring.byte_tokens < bytes.min(byte_cap) {
                    break;
                }
                ring.tokens -= 1.0;
                ring.byte_tokens -= bytes;
            }
            sent += 1;
            for (id, _) in &peers {
                walk.push((sent, id));
            }
        }
        ring.sent = sent;
        for (id, _) in &peers {
            ring.cursors.insert(id.clone(), sent);
        }
        let walked: Vec<(u32, Vec<u8>, String)> = walk
            .into_iter()
            .filter_map(|(seq, id)| {
                let (pid, k) = m.ring.get(seq)?.origin.clone()?;
                Some((pid, k, id.to_string()))
            })
            .collect();
        if walked.is_empty() {
            return;
        }
        let shipments = self.shipments(key, walked, &peers);
        self.deliver(key, shipments);
    }

    /// Which walked (partition, key, peer) go out: to owners, and to lease holders when this
    /// member is the primary; minus the silent skips.
    fn shipments(
        &mut self,
        key: &str,
        walked: Vec<(u32, Vec<u8>, String)>,
        peers: &[(String, String)],
    ) -> Vec<Shipment> {
        let now_ms = self.last_tick_ms.unwrap_or(0);
        let skip = self.settings.ring_skip_fraction;
        let mut out = Vec::new();
        for (pid, k, peer) in walked {
            let m = &self.members[key];
            let Some(entry) = self.volumes[&m.volume].entry(pid, &k).cloned() else {
                continue;
            };
            let cands = super::placement::candidates(&m.view);
            let owner = owners_of(&cands, m.replicas_n, pid).contains(&peer.as_str());
            let subscriber = !owner
                && read_order(&m.view, m.replicas_n, pid).first() == Some(&m.node_id.as_str())
                && m.interests
                    .get(&k)
                    .and_then(|s| s.get(&peer))
                    .is_some_and(|until| *until > now_ms);
            if !(owner || subscriber) {
                continue;
            }
            if skip > 0.0 && self.rand_unit() < skip {
                continue;
            }
            let to = peers
                .iter()
                .find(|(id, _)| *id == peer)
                .map(|(_, mk)| mk.clone())
                .expect("a connected peer");
            out.push(Shipment {
                to,
                pid,
                key: k,
                entry,
            });
        }
        out
    }

    fn deliver(&mut self, from: &str, shipments: Vec<Shipment>) {
        for s in shipments {
            if let Some(m) = self.members.get_mut(from) {
                m.counters.repl_ops_sent += 1;
            }
            self.apply_received(&s.to, s.pid, &s.key, s.entry);
            if let Some(m) = self.members.get_mut(&s.to) {
                m.counters.repl_ops_applied += 1;
            }
        }
    }

    /// Commit a record member `to` received (a replicated write, a repair, a bootstrap chunk,
    /// a fetched copy): merged into its volume and, if it changed anything, into its ring
    /// (never to be shipped on). Whether it changed anything.
    pub(crate) fn apply_received(&mut self, to: &str, pid: u32, key: &[u8], entry: Entry) -> bool {
        let bytes = entry.ring_bytes(key);
        let volume = self.members[to].volume.clone();
        let changed = self
            .volumes
            .get_mut(&volume)
            .is_some_and(|v| v.merge(pid, key, entry));
        if changed {
            self.ring_push(to, bytes, None);
        }
        changed
    }
}
