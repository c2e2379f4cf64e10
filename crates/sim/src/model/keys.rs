//! Keys: the data commands a member serves, any member any key.
//!
//! - A write commits on the member it was sent to (owner or not) and is acknowledged at
//!   once; it enters that member's ring as originated, and its sender ships it to the owners
//!   (see `ring`). The member keeps its copy for good.
//! - A read through an owner answers from its own volume only. A non-owner answers from its
//!   own volume while it holds a fresh lease on the key; otherwise it asks the owners in its
//!   view one at a time, primary first, and the first that answers wins, even with nothing:
//!   what it answered is merged locally (a commit, into the ring) and the key leased for
//!   `read_lease_ms`; the answering owner registers the reader's interest. Non-owners are
//!   never asked, so a key held only by non-owners is not found until an anti-entropy offer
//!   brings it to an owner. Deletes write tombstones.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::placement::{candidates, owners_of, partition_of, read_order};
use super::volume::{Entry, Volume};
use super::{Cluster, NotServing, ms};

impl Cluster {
    fn partition(&self, key: &[u8]) -> u32 {
        partition_of(key, self.settings.partitions)
    }

    /// `SET key value` through `member` (committed at once, whatever the time).
    pub fn set(
        &mut self,
        _now: Duration,
        member: &str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), NotServing> {
        self.write(member, key, Some(Arc::from(value)))
    }

    /// `GET key` through `member`.
    pub fn get(
        &mut self,
        now: Duration,
        member: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, NotServing> {
        Ok(self.read(now, member, key)?.map(|v| v.to_vec()))
    }

    /// `DEL key...` through `member`: writes a tombstone for each key `member` sees and
    /// answers how many it saw (a key given twice counts once, as in Redis).
    pub fn del(
        &mut self,
        now: Duration,
        member: &str,
        keys: &[Vec<u8>],
    ) -> Result<u64, NotServing> {
        let mut existed = 0;
        for key in keys {
            // A key the member does not see (an owner that lacks it, a non-owner whose owners
            // answered nothing) is left alone: no tombstone (marekvs `generic::del`).
            if self.read(now, member, key)?.is_some() {
                existed += 1;
                self.write(member, key, None)?;
            }
        }
        Ok(existed)
    }

    /// `EXISTS key...` through `member`: how many of the keys it finds (repeats count again).
    pub fn exists(
        &mut self,
        now: Duration,
        member: &str,
        keys: &[Vec<u8>],
    ) -> Result<u64, NotServing> {
        let mut found = 0;
        for key in keys {
            if self.read(now, member, key)?.is_some() {
                found += 1;
            }
        }
        Ok(found)
    }

    /// `DBSIZE`: keys (not tombstones) on `member`'s own volume.
    pub fn dbsize(&self, member: &str) -> Result<u64, NotServing> {
        let m = self.serving(member)?;
        Ok(self.volumes.get(&m.volume).map_or(0, Volume::live_keys))
    }

    /// Keys whose newest version on the running members' volumes is a value: what the
    /// cluster holds, wherever it is.
    pub fn live_keys(&self) -> u64 {
        let names: BTreeSet<&str> = self
            .members
            .values()
            .filter(|m| m.is_up())
            .map(|m| m.volume.as_str())
            .collect();
        let mut newest: std::collections::BTreeMap<&[u8], &Entry> = Default::default();
        for v in names.into_iter().filter_map(|n| self.volumes.get(n)) {
            for (key, e) in v.data.values().flat_map(|d| d.entries.iter()) {
                let slot = newest.entry(key.as_slice()).or_insert(e);
                if e.version > slot.version {
                    *slot = e;
                }
            }
        }
        newest.values().filter(|e| e.value.is_some()).count() as u64
    }

    /// Whether `member` owns `pid` as its reads see it.
    pub(crate) fn owns_for_reads(&self, member: &str, pid: u32) -> bool {
        let m = &self.members[member];
        m.serves_reads_as_owner()
            && owners_of(&candidates(&m.view), m.replicas_n, pid).contains(&m.node_id.as_str())
    }

    /// What `GET` answers through `member`.
    pub(crate) fn read(
        &mut self,
        now: Duration,
        member: &str,
        key: &[u8],
    ) -> Result<Option<Arc<[u8]>>, NotServing> {
        self.serving(member)?;
        let now_ms = ms(now);
        let pid = self.partition(key);
        if !self.owns_for_reads(member, pid) {
            let fresh = self.members[member]
                .leases
                .get(key)
                .is_some_and(|until| *until > now_ms);
            if !fresh {
                self.read_through(member, pid, key, now_ms);
            }
        }
        let volume = &self.volumes[&self.members[member].volume];
        Ok(volume.entry(pid, key).and_then(|e| e.value.clone()))
    }

    /// A non-owner asks the owners, primary first; the first that answers wins.
    fn read_through(&mut self, member: &str, pid: u32, key: &[u8], now_ms: u64) {
        let m = &self.members[member];
        let me = m.node_id.clone();
        let order: Vec<String> = read_order(&m.view, m.replicas_n, pid)
            .into_iter()
            .filter(|o| *o != me)
            .map(String::from)
            .collect();
        let lease = now_ms + self.settings.read_lease_ms;
        for owner in order {
            let Some(owner_key) = self.up_member_by_id(&owner).map(str::to_string) else {
                // Unreachable: the next one is asked after the timeout.
                continue;
            };
            let answer = self.volumes[&self.members[&owner_key].volume]
                .entry(pid, key)
                .cloned();
            if let Some(e) = answer {
                self.apply_received(member, pid, key, e);
            }
            let m = self.members.get_mut(member).expect("member exists");
            m.leases.insert(key.to_vec(), lease);
            let o = self.members.get_mut(&owner_key).expect("member exists");
            o.interests
                .entry(key.to_vec())
                .or_default()
                .insert(me, lease);
            return;
        }
    }

    /// Commit a new version of `key` (`None`: a tombstone) on `member`, originated there.
    fn write(
        &mut self,
        member: &str,
        key: &[u8],
        value: Option<Arc<[u8]>>,
    ) -> Result<(), NotServing> {
        let volume = self.serving(member)?.volume.clone();
        let pid = self.partition(key);
        self.write_version += 1;
        let entry = Entry {
            value,
            version: self.write_version,
        };
        let bytes = entry.ring_bytes(key);
        if let Some(v) = self.volumes.get_mut(&volume) {
            v.merge(pid, key, entry);
        }
        self.ring_push(member, bytes, Some((pid, key.to_vec())));
        Ok(())
    }
}
