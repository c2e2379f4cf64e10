//! A member's volume (its PVC): the keys it stores, per partition, with a digest per
//! partition so anti-entropy skips identical partitions without looking at their keys. A
//! volume outlives its member: a member returning on it finds its data.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::placement::{fnv, mix64};

/// Bytes an entry counts for besides its key and value, in the ring's byte figure.
pub const RING_ENTRY_OVERHEAD_BYTES: u64 = 32;

/// One version of a key as a volume stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// `None`: a tombstone.
    pub value: Option<Arc<[u8]>>,
    /// Cluster-wide write counter: the highest version of a key is its current value.
    pub version: u64,
}

impl Entry {
    /// What the entry counts in a ring: key + value + 32.
    pub fn ring_bytes(&self, key: &[u8]) -> u64 {
        let value = self.value.as_ref().map_or(0, |v| v.len());
        (key.len() + value) as u64 + RING_ENTRY_OVERHEAD_BYTES
    }
}

fn entry_digest(key: &[u8], version: u64) -> u64 {
    mix64(fnv(key) ^ version.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The keys of one partition on one volume.
#[derive(Clone, Debug, Default)]
pub(crate) struct PartitionData {
    pub entries: BTreeMap<Vec<u8>, Entry>,
    /// Sum of the entries' ring bytes, for the copy cost and the disk gauges.
    pub bytes: u64,
    /// XOR of a hash of every (key, version): equal digests, equal partitions.
    pub digest: u64,
}

impl PartitionData {
    /// Keep `entry` unless this partition already has it or a newer version of `key`.
    /// Returns whether it changed anything.
    fn merge(&mut self, key: &[u8], entry: Entry) -> bool {
        let (new_bytes, new_digest) = (entry.ring_bytes(key), entry_digest(key, entry.version));
        match self.entries.get_mut(key) {
            Some(old) if old.version >= entry.version => false,
            Some(old) => {
                self.bytes = self.bytes - old.ring_bytes(key) + new_bytes;
                self.digest ^= entry_digest(key, old.version) ^ new_digest;
                *old = entry;
                true
            }
            None => {
                self.bytes += new_bytes;
                self.digest ^= new_digest;
                self.entries.insert(key.to_vec(), entry);
                true
            }
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Volume {
    /// Partitions a member on it owned with a complete copy (bootstrapped, or trusted), for
    /// the simulator's own availability figures.
    pub held: Vec<bool>,
    /// Key data, only for partitions that have any, so empty partitions cost nothing.
    pub data: BTreeMap<u32, PartitionData>,
    /// Sum of the partitions' bytes.
    pub bytes: u64,
    /// When the last member process on it exited.
    pub last_exit_ms: Option<u64>,
    /// The node's heartbeat: when a member last served from it (Active or Leaving at a stats
    /// refresh). A member started on it within the grace since is a returning member.
    pub heartbeat_ms: Option<u64>,
}

impl Volume {
    pub fn new(partitions: usize) -> Self {
        Volume {
            held: vec![false; partitions],
            data: BTreeMap::new(),
            bytes: 0,
            last_exit_ms: None,
            heartbeat_ms: None,
        }
    }

    pub fn entry(&self, pid: u32, key: &[u8]) -> Option<&Entry> {
        self.data.get(&pid)?.entries.get(key)
    }

    /// Whether it has no key of `pid` (what bootstrap asks).
    pub fn is_empty(&self, pid: u32) -> bool {
        self.data.get(&pid).is_none_or(|d| d.entries.is_empty())
    }

    pub fn digest(&self, pid: u32) -> u64 {
        self.data.get(&pid).map_or(0, |d| d.digest)
    }

    /// Merge one entry; whether it changed anything (a commit).
    pub fn merge(&mut self, pid: u32, key: &[u8], entry: Entry) -> bool {
        let data = self.data.entry(pid).or_default();
        let before = data.bytes;
        let changed = data.merge(key, entry);
        self.bytes = self.bytes - before + data.bytes;
        changed
    }

    pub fn live_keys(&self) -> u64 {
        self.data
            .values()
            .flat_map(|d| d.entries.values())
            .filter(|e| e.value.is_some())
            .count() as u64
    }
}
