//! A deterministic model of a marekvs cluster, following what the real node does (see
//! `docs/marekvs-node.md`). Pure: no I/O, no clock. Time is passed in as a `Duration` since
//! an arbitrary epoch, and all randomness comes from a seeded generator, so a run is
//! reproducible. One module per job:
//!
//! - [`settings`]: tunables and per-member faults.
//! - [`member`]: a member process and what lives in its memory.
//! - [`volume`]: what a member's volume stores, with per-partition digests.
//! - [`placement`]: partitions of keys, rendezvous placement over Active + Leaving members.
//! - [`views`]: membership views and their gossip lag.
//! - [`lifecycle`]: start, `/drain`, SIGTERM, kill.
//! - [`keys`]: writes (local commit) and reads (owners local, non-owners read through).
//! - [`ring`]: every commit's ring entry (occupancy) and shipping of originated writes.
//! - [`anti_entropy`]: rounds of per-bucket exchanges between owners, and offers of
//!   stranded data.
//! - [`mesh`]: the bounded send queues and the sequential handler the exchanges go through.
//! - [`bootstrap`]: whole-partition copies into locally empty partitions, and the join gate.
//! - [`metrics`]: gauges refreshed every 2 s, counters, figures.
//! - [`loss`]: the simulator's own availability and loss figures.
//! - [`tick`]: the engine that advances all of it.

use std::collections::BTreeMap;
use std::time::Duration;

mod anti_entropy;
mod bootstrap;
mod keys;
mod lifecycle;
mod loss;
mod member;
mod mesh;
mod metrics;
mod placement;
mod ring;
mod settings;
mod tick;
mod views;
mod volume;

#[cfg(test)]
mod tests;

pub use member::{
    MODELLED_VERSION, Member, MemberSpec, NodePhase, PeerState, Process, version_of_image,
};
pub use metrics::MemberFigures;
pub use placement::{node_myid, partition_of, run_id};
pub use settings::{DEFAULT_PARTITIONS, Faults, Settings};
pub use views::{MemberView, ViewPeer};
pub use volume::RING_ENTRY_OVERHEAD_BYTES;

use volume::Volume;

/// The member a command was sent to is not running (or not known): it serves nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotServing;

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the member is not running")
    }
}

impl std::error::Error for NotServing {}

pub(crate) fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// One marekvs cluster: the members that gossip with each other, and their volumes.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub settings: Settings,
    /// Member key (for the harness: `namespace/pod`) → member.
    pub members: BTreeMap<String, Member>,
    /// Volume id → what it stores. Outlives members.
    volumes: BTreeMap<String, Volume>,
    /// Node id → the address it last started with, for views that still list a departed peer.
    addrs: BTreeMap<String, String>,
    /// Node id → when its latest process started.
    boots: BTreeMap<String, u64>,
    /// Node id → key of the member running it.
    up_by_id: BTreeMap<String, String>,
    /// Last write version handed out.
    write_version: u64,
    /// A partition exists once some member owned it with a complete copy.
    existed: Vec<bool>,
    /// Partitions currently owned by no running member.
    unavailable: Vec<bool>,
    /// Placement or processes changed: availability must be recounted.
    availability_dirty: bool,
    /// Times a partition became owned by no running member (the simulator's loss figure).
    pub lost_partitions_total: u64,
    /// Anti-entropy send queues between member processes.
    mesh: BTreeMap<mesh::Link, std::collections::VecDeque<anti_entropy::AeMsg>>,
    /// Anti-entropy messages dropped (full queue, frame limit, no peer).
    ae_dropped: u64,
    rng: u64,
    seq: u64,
    last_tick_ms: Option<u64>,
}

impl Cluster {
    pub fn new(settings: Settings, seed: u64) -> Self {
        let p = settings.partitions as usize;
        Cluster {
            settings,
            members: BTreeMap::new(),
            volumes: BTreeMap::new(),
            addrs: BTreeMap::new(),
            boots: BTreeMap::new(),
            up_by_id: BTreeMap::new(),
            write_version: 0,
            existed: vec![false; p],
            unavailable: vec![false; p],
            availability_dirty: false,
            lost_partitions_total: 0,
            mesh: BTreeMap::new(),
            ae_dropped: 0,
            rng: seed | 1,
            seq: 0,
            last_tick_ms: None,
        }
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*: deterministic, good enough for jitter.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A uniform draw in [0, 1).
    fn rand_unit(&mut self) -> f64 {
        (self.next_rand() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn jitter(&mut self, (lo, hi): (u64, u64)) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_rand() % (hi - lo + 1)
        }
    }

    fn serving(&self, member: &str) -> Result<&Member, NotServing> {
        self.members
            .get(member)
            .filter(|m| m.is_up())
            .ok_or(NotServing)
    }

    /// Key of the running member with node id `id`.
    fn up_member_by_id(&self, id: &str) -> Option<&str> {
        self.up_by_id.get(id).map(String::as_str)
    }
}
