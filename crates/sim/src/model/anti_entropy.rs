//! Anti-entropy, as marekvs 0.2 runs it (`marekvs-repl`: the round loop, the per-bucket
//! Merkle exchange, and the mesh connection it travels on):
//!
//! - Each member process runs rounds every `ae_interval_ms` plus a jitter below
//!   `ae_jitter_ms`. A round first counts itself (`marekvs_ae_rounds_total` is the round number
//!   since the process started), then, for every partition the member owns, sends its root to
//!   ONE randomly chosen other owner in its view. Every third round it also offers each
//!   partition it has data for but does not own to one random owner. Nothing waits for a
//!   reply: every message is put on the connection's send queue or dropped (see `mesh`).
//! - A partition's exchange is a conversation of messages, each handled by the receiver's one
//!   sequential anti-entropy task: `Root` (initiator → responder); equal roots end it
//!   (`RootMatch`), else `Buckets` (the 256 bucket digests, responder → initiator); the
//!   initiator sends one `BucketKeys` (the keys and versions it holds in that bucket) per
//!   bucket that differs; the responder answers each with a `Repair` of the records it holds
//!   newer (only keys the initiator offered, when the initiator does not own the partition)
//!   and a `Request` for the keys the initiator holds newer, which the initiator answers
//!   with a `Repair`. Repairs are counted on receipt, per record, in the receiver's
//!   `marekvs_ae_repair_ops_total`. Nothing is ever sent again: a message dropped anywhere
//!   ends that bucket's repair until a later round finds it still differing.
//! - Scans cost the handler time: a message that looks at a partition costs its records
//!   (`Buckets` once per differing bucket, as the node scans the whole partition for each),
//!   at `ae_scan_records_per_sec`.

use std::sync::Arc;

use super::Cluster;
use super::placement::{candidates, fnv, mix64, owners_of};
use super::volume::{Entry, Volume};

/// Buckets of a partition's Merkle exchange.
pub(crate) const BUCKETS: usize = 256;

/// Bytes a key's entry takes in a `BucketKeys` (its hash, version and value hash).
const BUCKET_KEY_BYTES: u64 = 30;

/// One anti-entropy message between two member processes.
#[derive(Clone, Debug)]
pub(crate) enum AeMsg {
    Root {
        pid: u32,
        root: u64,
    },
    RootMatch,
    Buckets {
        pid: u32,
        digests: Arc<[u64; BUCKETS]>,
    },
    BucketKeys {
        pid: u32,
        bucket: u8,
        /// Key → version, as the initiator held them when it sent this.
        entries: Vec<(Vec<u8>, u64)>,
        /// The initiator does not own the partition: push nothing it did not offer.
        no_backfill: bool,
    },
    Repair {
        pid: u32,
        ops: Vec<(Vec<u8>, Entry)>,
    },
    Request {
        pid: u32,
        keys: Vec<Vec<u8>>,
    },
}

impl AeMsg {
    /// Its encoded size, for the frame limit.
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            AeMsg::Root { .. } | AeMsg::RootMatch => 16,
            AeMsg::Buckets { .. } => 8 * BUCKETS as u64,
            AeMsg::BucketKeys { entries, .. } => BUCKET_KEY_BYTES * entries.len() as u64,
            AeMsg::Repair { ops, .. } => ops.iter().map(|(k, e)| e.ring_bytes(k)).sum(),
            AeMsg::Request { keys, .. } => keys.iter().map(|k| k.len() as u64 + 8).sum(),
        }
    }
}

/// The bucket of a key: high bits of its hash (the partition takes the low ones).
pub(crate) fn bucket_of(key: &[u8]) -> u8 {
    (mix64(fnv(key) ^ 0x5bd1_e995) >> 56) as u8
}

fn entry_hash(key: &[u8], version: u64) -> u64 {
    mix64(fnv(key) ^ version.wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
}

/// The 256 bucket digests of `pid` on `volume`: XOR of each entry's (key, version) hash.
pub(crate) fn bucket_digests(volume: &Volume, pid: u32) -> [u64; BUCKETS] {
    let mut out = [0; BUCKETS];
    if let Some(d) = volume.data.get(&pid) {
        for (k, e) in &d.entries {
            out[bucket_of(k) as usize] ^= entry_hash(k, e.version);
        }
    }
    out
}

/// Records (tombstones included) of `pid` on `volume`: what a scan of it visits.
fn records(volume: &Volume, pid: u32) -> u64 {
    volume.data.get(&pid).map_or(0, |d| d.entries.len() as u64)
}

impl Cluster {
    /// When the next round after `now_ms` starts.
    pub(crate) fn next_ae_at(&mut self, now_ms: u64) -> u64 {
        let jitter = self.settings.ae_jitter_ms;
        let j = if jitter > 0 {
            self.next_rand() % jitter
        } else {
            0
        };
        now_ms + self.settings.ae_interval_ms.max(1) + j
    }

    /// Run member `key`'s round if it is due: its roots go on the send queues.
    pub(crate) fn anti_entropy(&mut self, key: &str, now_ms: u64) {
        if self.members[key].next_ae_ms > now_ms {
            return;
        }
        let next = self.next_ae_at(now_ms);
        let m = self.members.get_mut(key).expect("member exists");
        m.next_ae_ms = next;
        m.ae_round += 1;
        m.counters.ae_rounds += 1;
        let round = m.ae_round;
        m.interests.retain(|_, subs| {
            subs.retain(|_, until| *until > now_ms);
            !subs.is_empty()
        });

        let owned = self.owned(key);
        let m = &self.members[key];
        let (me, n) = (m.node_id.clone(), m.replicas_n);
        let cands: Vec<String> = candidates(&m.view).into_iter().map(String::from).collect();
        let cand_refs: Vec<&str> = cands.iter().map(String::as_str).collect();
        let mut roots: Vec<(u32, String)> = Vec::new();
        for pid in &owned {
            let others: Vec<&str> = owners_of(&cand_refs, n, *pid)
                .into_iter()
                .filter(|o| *o != me)
                .collect();
            if let Some(peer) = self.pick(&others) {
                roots.push((*pid, peer));
            }
        }
        if round.is_multiple_of(3) {
            let volume = &self.volumes[&self.members[key].volume];
            let stranded: Vec<u32> = volume
                .data
                .iter()
                .filter(|(pid, d)| !d.entries.is_empty() && owned.binary_search(pid).is_err())
                .map(|(pid, _)| *pid)
                .collect();
            for pid in stranded {
                let others: Vec<&str> = owners_of(&cand_refs, n, pid)
                    .into_iter()
                    .filter(|o| *o != me)
                    .collect();
                if let Some(peer) = self.pick(&others) {
                    roots.push((pid, peer));
                }
            }
        }
        for (pid, peer) in roots {
            // Unreachable (its process is gone while the view still lists it): not sent.
            let Some(peer_key) = self.up_member_by_id(&peer).map(str::to_string) else {
                continue;
            };
            let root = self.volumes[&self.members[key].volume].digest(pid);
            self.try_send(key, &peer_key, AeMsg::Root { pid, root });
        }
    }

    /// One of `choices` at random.
    fn pick(&mut self, choices: &[&str]) -> Option<String> {
        if choices.is_empty() {
            return None;
        }
        let i = (self.next_rand() % choices.len() as u64) as usize;
        Some(choices[i].to_string())
    }

    /// Whether member `key` owns `pid` by its own view.
    fn owns(&mut self, key: &str, pid: u32) -> bool {
        self.owned(key).binary_search(&pid).is_ok()
    }

    /// Member `to` handles `msg` from `from`: what it costs the handler, in records scanned.
    pub(crate) fn handle_ae(&mut self, to: &str, from: &str, msg: AeMsg) -> u64 {
        let volume = &self.volumes[&self.members[to].volume];
        match msg {
            AeMsg::Root { pid, root } => {
                if volume.digest(pid) == root {
                    self.try_send(to, from, AeMsg::RootMatch);
                    return 1;
                }
                let digests = Arc::new(bucket_digests(volume, pid));
                let cost = records(volume, pid);
                self.try_send(to, from, AeMsg::Buckets { pid, digests });
                cost
            }
            AeMsg::RootMatch => 1,
            AeMsg::Buckets { pid, digests } => {
                let mine = bucket_digests(volume, pid);
                let per_scan = records(volume, pid);
                let no_backfill = !self.owns(to, pid);
                let volume = &self.volumes[&self.members[to].volume];
                let mut sends = Vec::new();
                for b in (0..BUCKETS).filter(|b| mine[*b] != digests[*b]) {
                    let entries: Vec<(Vec<u8>, u64)> = volume
                        .data
                        .get(&pid)
                        .map(|d| {
                            d.entries
                                .iter()
                                .filter(|(k, _)| bucket_of(k) as usize == b)
                                .map(|(k, e)| (k.clone(), e.version))
                                .collect()
                        })
                        .unwrap_or_default();
                    sends.push(AeMsg::BucketKeys {
                        pid,
                        bucket: b as u8,
                        entries,
                        no_backfill,
                    });
                }
                let cost = per_scan * (1 + sends.len() as u64);
                for m in sends {
                    self.try_send(to, from, m);
                }
                cost
            }
            AeMsg::BucketKeys {
                pid,
                bucket,
                entries,
                no_backfill,
            } => {
                let theirs: std::collections::HashMap<&[u8], u64> =
                    entries.iter().map(|(k, v)| (k.as_slice(), *v)).collect();
                let mut push = Vec::new();
                if let Some(d) = volume.data.get(&pid) {
                    for (k, e) in d.entries.iter().filter(|(k, _)| bucket_of(k) == bucket) {
                        let newer = match theirs.get(k.as_slice()) {
                            Some(v) => *v < e.version,
                            None => !no_backfill,
                        };
                        if newer {
                            push.push((k.clone(), e.clone()));
                        }
                    }
                }
                let want: Vec<Vec<u8>> = entries
                    .iter()
                    .filter(|(k, v)| volume.entry(pid, k).is_none_or(|have| have.version < *v))
                    .map(|(k, _)| k.clone())
                    .collect();
                let cost = records(volume, pid);
                if !push.is_empty() {
                    self.try_send(to, from, AeMsg::Repair { pid, ops: push });
                }
                if !want.is_empty() {
                    self.try_send(to, from, AeMsg::Request { pid, keys: want });
                }
                cost
            }
            AeMsg::Request { pid, keys } => {
                let ops: Vec<(Vec<u8>, Entry)> = keys
                    .into_iter()
                    .filter_map(|k| volume.entry(pid, &k).cloned().map(|e| (k, e)))
                    .collect();
                let cost = records(volume, pid);
                if !ops.is_empty() {
                    self.try_send(to, from, AeMsg::Repair { pid, ops });
                }
                cost
            }
            AeMsg::Repair { pid, ops } => {
                let count = ops.len() as u64;
                if let Some(m) = self.members.get_mut(to) {
                    m.counters.ae_repair_ops += count;
                }
                for (k, e) in ops {
                    self.apply_received(to, pid, &k, e);
                }
                count
            }
        }
    }
}
