//! A deterministic model of a marekvs cluster, mirroring what real nodes were measured to do.
//!
//! - Membership: every member holds its own view of the others (node id and phase). Views lag
//!   the truth: a join, a phase change or a departure reaches each peer after its own jittered
//!   gossip or failure-detection delay, so views disagree for a while.
//! - Placement: the key space is cut into `Settings::partitions` partitions; a member places
//!   each partition on the `replicas_n` highest rendezvous scores among the members its view
//!   sees Active.
//! - Data: each volume (the member's PVC) holds a set of partitions and, for partitions that
//!   have any, their keys. New owners copy what they gained at a finite rate (bootstrap while
//!   joining, anti-entropy repair otherwise), taking the newest version of every key from
//!   every running holder; copying a partition costs more the more data it holds. An old
//!   holder hands a partition off (its keys merged into the owners) and drops it only once
//!   every owner holds it. A partition whose every copy vanished from the running members is
//!   counted as lost; a new owner then starts it with whatever its own volume already had.
//! - Keys: any running member serves any key. A write goes to every running holder of the
//!   key's partition and to every running owner in the writing member's view (through the
//!   origin's replication ring, see below); a read returns
//!   the newest version across running members' volumes, but a write is visible through other
//!   members only after a jittered delay (reads are eventually consistent). Deletes write
//!   tombstones.
//! - Replication ring and anti-entropy: the member a write is sent to (its origin) ships it to
//!   the other targets through its ring, at most `Settings::ring_ops_per_sec` writes a second
//!   (a token bucket holding one second of that rate). A write beyond that is a ring gap: it
//!   stays only on the origin's volume until the origin's anti-entropy delivers it to the
//!   partition's owners in its view, oldest first, once it is `Settings::ae_round_ms` old (a
//!   round), at most `Settings::ae_ops_per_sec` entries
//!   a second; each entry delivered counts in `marekvs_ae_repair_ops_total` of the member that
//!   receives it. `marekvs_ring_ops`/`marekvs_ring_bytes` report the origin's writes not yet on
//!   every owner. No other path carries a gapped write (a copy, a hand-off or a returning
//!   volume leaves it out), and anti-entropy stops at SIGTERM: a member that exits with gapped
//!   writes takes them out of the cluster's reads (its kept volume is not read). Whole
//!   partition copies (while joining, or active) count in `marekvs_bootstraps_completed_total`.
//!   The cluster's ring-gap rate is n × R: writes spread evenly over n members above it gap.
//!
//! Pure: no I/O, no clock. Time is passed in as a `Duration` since an arbitrary epoch, and all
//! randomness comes from a seeded generator, so a run is reproducible.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Partitions of the key space; the contract speaks of "partitions this node homes (of 4096)".
pub const DEFAULT_PARTITIONS: u32 = 4096;

/// Lifecycle phase of a node, as it gossips it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodePhase {
    Joining,
    Active,
    Leaving,
}

/// Tunables of the simulated data plane. Defaults follow the measurements, scaled where that
/// keeps tests quick (copy rate).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub partitions: u32,
    /// Spread of the delay before another member's view reflects a phase change or a join.
    pub gossip_delay_ms: (u64, u64),
    /// Delay before peers drop a member that exited after SIGTERM (measured: about 6 s).
    pub leave_detect_ms: (u64, u64),
    /// Delay before peers drop a member that crashed (measured: 3 s to 5 s).
    pub crash_detect_ms: (u64, u64),
    /// How long a member flushes after SIGTERM before it exits.
    pub flush_ms: u64,
    /// Empty partitions one member copies per second (bootstrap and anti-entropy repair).
    pub copy_rate_per_sec: f64,
    /// Copying a partition costs one unit of the copy budget plus one per this many bytes of
    /// key data it holds (each entry counts its key, its value and `ENTRY_OVERHEAD_BYTES`),
    /// so a hand-off takes longer the more data moves.
    pub copy_bytes_per_unit: u64,
    /// Spread of the delay before a write is visible to reads through members other than
    /// the one it was written through (through that one it is visible at once).
    pub read_visibility_ms: (u64, u64),
    /// Bytes of data per partition, for the disk gauges.
    pub bytes_per_partition: u64,
    /// Cluster-wide command rate spread over the serving members (counters only: these
    /// commands carry no keys and use no replication ring).
    pub load_ops_per_sec: f64,
    /// Writes a member's replication ring ships per second (R), with a burst of one second of
    /// it; a write beyond that is a ring gap. 0: unlimited (no gaps).
    pub ring_ops_per_sec: f64,
    /// Gapped entries a member's anti-entropy delivers per second (A).
    pub ae_ops_per_sec: f64,
    /// Anti-entropy works in rounds: a gapped write waits this long before it can be
    /// delivered, so between rounds it shows in its origin's ring figure (a gap repaired
    /// within the same instant would be invisible to any scrape).
    pub ae_round_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            partitions: DEFAULT_PARTITIONS,
            gossip_delay_ms: (300, 1200),
            leave_detect_ms: (4000, 6500),
            crash_detect_ms: (3000, 5000),
            flush_ms: 3000,
            copy_rate_per_sec: 2048.0,
            copy_bytes_per_unit: 64 * 1024,
            read_visibility_ms: (200, 2000),
            bytes_per_partition: 64 * 1024,
            load_ops_per_sec: 0.0,
            // Measured on real marekvs 0.2: 5 members gap at about 2,000 SET/s.
            ring_ops_per_sec: 400.0,
            // Far above the gap excess at the bench's rates (150 %: 200 a second a member),
            // so a gap is repaired in the first round after it (`ae_round_ms`).
            ae_ops_per_sec: 4000.0,
            ae_round_ms: 2000,
        }
    }
}

/// Faults a test can inject into one member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Its HTTP endpoints stop answering (requests hang).
    pub hang: bool,
    /// `/metrics` answers 503.
    pub refuse_metrics: bool,
    /// Report this many under-replicated partitions whatever the view says.
    pub report_underreplicated: Option<u64>,
    /// Copy at this rate instead of the cluster's.
    pub copy_rate_per_sec: Option<f64>,
    /// Stay Joining (and unready) however far bootstrap got.
    pub hold_join: bool,
    /// After a crash, stay down instead of being restarted by the pod runner.
    pub hold_down: bool,
    /// Report `marekvs_disk_write_stopped 1` (writes refused at the disk high-water mark).
    pub disk_write_stopped: bool,
    /// Report the volume this full (percent) whatever the data size.
    pub disk_fill_percent: Option<u8>,
    /// `/metrics` answers 200 with exactly this body instead of its figures.
    pub metrics_body: Option<String>,
    /// `/metrics` answers its figures followed by this many bytes of comment lines.
    pub metrics_padding_bytes: Option<u64>,
    /// `/metrics` answers only after this long.
    pub metrics_delay_ms: Option<u64>,
    /// Every connection to its port 9121 gets bytes that are not HTTP, then is closed.
    pub garbage_http: bool,
    /// `/drain` answers `307 Temporary Redirect` to this URL (another member's `/drain`,
    /// say) instead of draining.
    pub redirect_drain_to: Option<String>,
    /// Its `CLUSTER NODES` lists a stranger (another id, another address) in place of the
    /// member with this node id: its view holds the right count but not the right members,
    /// as one side of a partition healed over an unknown node would. Only what it reports
    /// changes (its gossip, placement and metrics do not).
    pub view_stranger_for: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Process {
    Running,
    /// Got SIGTERM: still serving and a copy source while it flushes, until the instant given.
    Flushing {
        until_ms: u64,
    },
    Exited,
}

/// What the harness knows of a member process when it starts it.
#[derive(Clone, Debug)]
pub struct MemberSpec {
    /// Unique key of the member (the harness uses `namespace/pod`).
    pub key: String,
    /// Node id: the pod hostname's ordinal, or `MAREKVS_NODE_ID`.
    pub node_id: String,
    /// `MAREKVS_REPLICAS_N`.
    pub replicas_n: usize,
    /// Volume id (the PVC's UID): data on it survives the member.
    pub volume: String,
    pub disk_bytes: u64,
    pub faults: Faults,
    /// Its address (the pod IP), which peers list in `CLUSTER NODES`.
    pub addr: String,
}

/// What a member's view holds about a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerState {
    pub phase: NodePhase,
}

#[derive(Clone, Debug)]
struct PendingViewChange {
    due_ms: u64,
    subject: String,
    /// `None`: the subject is gone from the view.
    state: Option<PeerState>,
    /// Order of announcement, so a late delivery of an older fact never overwrites a newer one.
    seq: u64,
}

#[derive(Clone, Debug)]
pub struct Member {
    pub node_id: String,
    pub addr: String,
    pub replicas_n: usize,
    pub volume: String,
    pub disk_bytes: u64,
    pub process: Process,
    pub phase: NodePhase,
    pub started_ms: u64,
    pub faults: Faults,
    /// This member's membership view: node id → state. Always holds itself while running.
    pub view: BTreeMap<String, PeerState>,
    view_seq: BTreeMap<String, u64>,
    pending: Vec<PendingViewChange>,
    pub commands_get: f64,
    pub commands_set: f64,
    pub bootstraps_completed: u64,
    pub ae_repair_ops: u64,
    copy_budget: f64,
    owned_cache: Option<Vec<u32>>,
    /// Replication-ring tokens, refilled at `ring_ops_per_sec` up to one second of it.
    ring_tokens: f64,
    ring_refilled_ms: u64,
    /// Writes it originated past a ring gap, oldest first, not yet on every owner.
    gapped: std::collections::VecDeque<GapWrite>,
    ae_budget: f64,
}

/// A write past a ring gap, waiting on its origin's volume for anti-entropy.
#[derive(Clone, Debug)]
struct GapWrite {
    pid: u32,
    key: Vec<u8>,
    version: u64,
    bytes: u64,
    /// When it gapped: anti-entropy takes it up in its first round after `ae_round_ms`.
    at_ms: u64,
}

impl Member {
    pub fn is_up(&self) -> bool {
        !matches!(self.process, Process::Exited)
    }
}

/// Per-member figures, as `/metrics` reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberFigures {
    pub phase: Option<NodePhase>,
    pub ready: bool,
    pub view_members: u64,
    pub underreplicated_partitions: u64,
    pub effective_rf_min: u64,
    pub owned_partitions: u64,
    pub join_gate_pending_pids: u64,
    pub bootstraps_completed_total: u64,
    pub ae_repair_ops_total: u64,
    /// Writes this member originated that are not yet on every owner (`marekvs_ring_ops`).
    pub ring_ops: u64,
    /// Their bytes (`marekvs_ring_bytes`).
    pub ring_bytes: u64,
    pub commands_get_total: u64,
    pub commands_set_total: u64,
    pub held_partitions: u64,
    pub db_total_bytes: u64,
    pub disk_total_bytes: u64,
    pub disk_write_stopped: bool,
    pub uptime_seconds: f64,
}

/// Bytes an entry counts for besides its key and value (version, visibility, writer), for the
/// copy cost.
pub const ENTRY_OVERHEAD_BYTES: u64 = 48;

/// The member a command was sent to is not running (or not known): it serves nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotServing;

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the member is not running")
    }
}

impl std::error::Error for NotServing {}

/// Versions of a key an entry remembers besides its own, for reads through members that do
/// not see the newest ones yet.
const MAX_REPLACED_VERSIONS: usize = 8;

/// One version of a key as a volume stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// `None`: a tombstone.
    value: Option<Vec<u8>>,
    /// Cluster-wide write counter: the highest version of a key is its current value.
    version: u64,
    written_ms: u64,
    /// Before this instant only reads through `written_via` see it.
    visible_at_ms: u64,
    /// Node id of the member the write was sent to.
    written_via: String,
    /// The version this one replaced, while some member may still read it.
    replaced: Option<Box<Entry>>,
}

impl Entry {
    fn bytes(&self, key: &[u8]) -> u64 {
        let value = self.value.as_ref().map_or(0, Vec::len);
        (key.len() + value) as u64 + ENTRY_OVERHEAD_BYTES
    }

    /// The newest version, this one or one it replaced, that a read through `node_id` sees.
    fn visible_version(&self, node_id: &str, now_ms: u64) -> Option<&Entry> {
        let mut version = Some(self);
        while let Some(v) = version {
            if v.visible_at_ms <= now_ms || v.written_via == node_id {
                return Some(v);
            }
            version = v.replaced.as_deref();
        }
        None
    }

    /// This (newer) version in place of `older`, remembering it unless this one already
    /// brings its own history (a copy).
    fn replacing(mut self, mut older: Entry) -> Entry {
        if self.replaced.is_none() {
            older.forget_unreadable(self.written_ms);
            self.replaced = Some(Box::new(older));
        }
        self
    }

    /// Drop the versions no read can return any more: those behind one every member saw by
    /// `at_ms` (time only moves on), and any beyond `MAX_REPLACED_VERSIONS`.
    fn forget_unreadable(&mut self, at_ms: u64) {
        let mut version = self;
        for _ in 0..MAX_REPLACED_VERSIONS {
            if version.visible_at_ms <= at_ms {
                break;
            }
            match version.replaced {
                Some(ref mut older) => version = older,
                None => return,
            }
        }
        version.replaced = None;
    }
}

/// The keys of one partition on one volume.
#[derive(Clone, Debug, Default)]
struct PartitionData {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// Sum of `Entry::bytes`, kept up to date for the copy cost.
    bytes: u64,
}

impl PartitionData {
    /// Keep `entry` unless this partition already has a newer (or the same) version of `key`.
    fn merge(&mut self, key: &[u8], entry: Entry) {
        let entry = match self.entries.remove(key) {
            Some(old) if old.version >= entry.version => old,
            Some(old) => {
                self.bytes = self.bytes - old.bytes(key) + entry.bytes(key);
                entry.replacing(old)
            }
            None => {
                self.bytes += entry.bytes(key);
                entry
            }
        };
        self.entries.insert(key.to_vec(), entry);
    }
}

/// A member's volume: outlives the member, so a member returning on it finds its data.
#[derive(Clone, Debug)]
struct Volume {
    /// Which partitions it holds (has a complete copy of).
    held: Vec<bool>,
    /// Key data, only for partitions that have any, so empty partitions cost nothing. It may
    /// hold a partition it does not (yet) hold in full: writes reach a new owner while it copies.
    data: BTreeMap<u32, PartitionData>,
}

impl Volume {
    fn new(partitions: usize) -> Self {
        Volume {
            held: vec![false; partitions],
            data: BTreeMap::new(),
        }
    }

    fn entry(&self, pid: u32, key: &[u8]) -> Option<&Entry> {
        self.data.get(&pid)?.entries.get(key)
    }

    fn merge_all(&mut self, pid: u32, entries: Vec<(Vec<u8>, Entry)>) {
        if entries.is_empty() {
            return;
        }
        let data = self.data.entry(pid).or_default();
        for (key, entry) in entries {
            data.merge(&key, entry);
        }
    }

    fn live_keys(&self) -> u64 {
        self.data
            .values()
            .flat_map(|d| d.entries.values())
            .filter(|e| e.value.is_some())
            .count() as u64
    }
}

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
    /// The address it last started with; `None` if this cluster never ran it (cannot happen
    /// for a view built by the model, but a view is not the member list).
    pub addr: Option<String>,
    pub phase: NodePhase,
    pub myself: bool,
}

impl MemberView {
    /// Peers the view sees Active: the placement candidates.
    pub fn active(&self) -> usize {
        self.peers
            .iter()
            .filter(|p| p.phase == NodePhase::Active)
            .count()
    }
}

/// Partition of a key: FNV-1a (64 bit) of the key's bytes, finished with the splitmix64 mixer
/// so the low bits are well spread, modulo the number of partitions.
pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (mix64(h) % u64::from(partitions.max(1))) as u32
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A node's 40-hex run id (`CLUSTER MYID`): fixed for a (cluster, node id) pair, so it is
/// stable across restarts of the same member and differs between clusters.
pub fn run_id(cluster: &str, node_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in cluster.bytes().chain([0]).chain(node_id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let words = [1u64, 2, 3].map(|i| mix64(h ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    let mut id = format!("{:016x}{:016x}{:016x}", words[0], words[1], words[2]);
    id.truncate(40);
    id
}

/// One marekvs cluster: the members that gossip with each other, and their volumes.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub settings: Settings,
    /// Member key (for the harness: `namespace/pod`) → member.
    pub members: BTreeMap<String, Member>,
    /// Volume id → the partitions and keys it holds. Outlives members: a member that returns
    /// on the same volume finds its data.
    volumes: BTreeMap<String, Volume>,
    /// Node id → the address it last started with, for views that still list a departed peer.
    addrs: BTreeMap<String, String>,
    /// Last write version handed out.
    write_version: u64,
    /// A partition exists once some member held it; before that, bootstrapping it copies nothing.
    existed: Vec<bool>,
    /// Partitions currently without any copy on a running member.
    unavailable: Vec<bool>,
    pub lost_partitions_total: u64,
    /// Versions of writes past a ring gap still waiting for anti-entropy: no copy, hand-off or
    /// returning volume may carry them.
    gapped_versions: BTreeSet<u64>,
    /// Gapped writes whose origin exited before anti-entropy delivered them.
    pub gapped_lost_total: u64,
    rng: u64,
    seq: u64,
    last_tick_ms: Option<u64>,
    /// The last full tick changed nothing and nothing can change without an event (a call
    /// below, or new settings): ticks only add load until then. At 1,600 members the full
    /// tick of every quiet cluster, ten times a second under the world lock, starved the
    /// members' HTTP servers and the pods' readiness probes.
    quiet: bool,
    /// Tests turn this off to check that skipping quiet ticks changes nothing.
    skip_quiet_ticks: bool,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Rendezvous score of `node` for partition `pid`: a fixed, well-mixed 64-bit hash.
fn score(node: &str, pid: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h ^ u64::from(pid).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether `me` is among the `n` highest-scoring `candidates` for `pid`.
fn is_owner(me: &str, candidates: &[&str], n: usize, pid: u32) -> bool {
    let mine = score(me, pid);
    let better = candidates
        .iter()
        .filter(|c| **c != me && score(c, pid) > mine)
        .count();
    better < n
}

/// The owners of `pid` among `candidates`: those with fewer than `n` strictly higher scores
/// (the rule of `is_owner`, with one sort instead of a scan per candidate).
fn owners_of<'a>(candidates: &[&'a str], n: usize, pid: u32) -> Vec<&'a str> {
    let mut scored: Vec<(u64, &'a str)> = candidates.iter().map(|c| (score(c, pid), *c)).collect();
    scored.sort_by(|a, b| b.cmp(a));
    let mut owners = Vec::new();
    let mut higher = 0;
    for (i, (s, c)) in scored.iter().enumerate() {
        if i > 0 && scored[i - 1].0 != *s {
            higher = i;
        }
        if higher >= n {
            break;
        }
        owners.push(*c);
    }
    owners
}

impl Cluster {
    pub fn new(settings: Settings, seed: u64) -> Self {
        let p = settings.partitions as usize;
        Cluster {
            settings,
            members: BTreeMap::new(),
            volumes: BTreeMap::new(),
            addrs: BTreeMap::new(),
            write_version: 0,
            existed: vec![false; p],
            unavailable: vec![false; p],
            lost_partitions_total: 0,
            gapped_versions: BTreeSet::new(),
            gapped_lost_total: 0,
            rng: seed | 1,
            seq: 0,
            last_tick_ms: None,
            quiet: false,
            skip_quiet_ticks: true,
        }
    }

    /// Something happened from outside: the next tick runs in full.
    pub fn wake(&mut self) {
        self.quiet = false;
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

    fn jitter(&mut self, (lo, hi): (u64, u64)) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_rand() % (hi - lo + 1)
        }
    }

    /// Tell every other running member about `subject` after a delay drawn from `delay`.
    fn announce(
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

    /// A member process starts (pod running): it joins on `volume`, learning the current
    /// members from its seeds at once; they learn of it after a gossip delay.
    pub fn start_member(&mut self, now: Duration, spec: MemberSpec) {
        self.wake();
        let MemberSpec {
            key,
            node_id,
            replicas_n,
            volume,
            disk_bytes,
            faults,
            addr,
        } = spec;
        let (key, node_id, volume) = (key.as_str(), node_id.as_str(), volume.as_str());
        let now_ms = ms(now);
        let p = self.settings.partitions as usize;
        self.volumes
            .entry(volume.to_string())
            .or_insert_with(|| Volume::new(p));
        self.addrs.insert(node_id.to_string(), addr.clone());
        let mut view = BTreeMap::new();
        for m in self
            .members
            .values()
            .filter(|m| m.is_up() && m.node_id != node_id)
        {
            view.insert(m.node_id.clone(), PeerState { phase: m.phase });
        }
        view.insert(
            node_id.to_string(),
            PeerState {
                phase: NodePhase::Joining,
            },
        );
        self.members.insert(
            key.to_string(),
            Member {
                node_id: node_id.to_string(),
                addr,
                replicas_n: replicas_n.max(1),
                volume: volume.to_string(),
                disk_bytes,
                process: Process::Running,
                phase: NodePhase::Joining,
                started_ms: now_ms,
                faults,
                view,
                view_seq: BTreeMap::new(),
                pending: Vec::new(),
                commands_get: 0.0,
                commands_set: 0.0,
                bootstraps_completed: 0,
                ae_repair_ops: 0,
                copy_budget: 0.0,
                owned_cache: None,
                ring_tokens: self.settings.ring_ops_per_sec.max(0.0),
                ring_refilled_ms: now_ms,
                gapped: Default::default(),
                ae_budget: 0.0,
            },
        );
        let delay = self.settings.gossip_delay_ms;
        self.announce(
            now_ms,
            node_id,
            Some(PeerState {
                phase: NodePhase::Joining,
            }),
            delay,
        );
        self.reconcile_returning_volume(volume);
    }

    /// A member (re)starting on a volume with data: anti-entropy brings it and the running
    /// holders of the partitions it holds to the newest version of every key. It may bring
    /// keys the others lost (they started those partitions empty) and may have missed writes
    /// while it was down; left apart, the copies would diverge and the next failure would
    /// lose or roll back keys. Real nodes repair over time; here it happens at once, which
    /// reads cannot tell apart (they take the newest version of all running copies anyway).
    fn reconcile_returning_volume(&mut self, volume: &str) {
        let running: BTreeSet<String> = self
            .members
            .values()
            .filter(|m| m.is_up())
            .map(|m| m.volume.clone())
            .collect();
        let with_data: BTreeSet<u32> = running
            .iter()
            .filter_map(|v| self.volumes.get(v))
            .flat_map(|v| v.data.keys().copied())
            .collect();
        let Some(returning) = self.volumes.get(volume) else {
            return;
        };
        let pids: Vec<u32> = with_data
            .into_iter()
            .filter(|pid| returning.held[*pid as usize])
            .collect();
        for pid in pids {
            let holders: Vec<String> = running
                .iter()
                .filter(|v| self.volumes.get(*v).is_some_and(|v| v.held[pid as usize]))
                .cloned()
                .collect();
            let entries = self.entries_of(pid, &holders);
            for holder in &holders {
                if let Some(v) = self.volumes.get_mut(holder) {
                    v.merge_all(pid, entries.clone());
                }
            }
        }
    }

    /// `/drain`: the member turns Leaving and gossips it. Idempotent.
    pub fn drain(&mut self, now: Duration, key: &str) -> bool {
        self.wake();
        let now_ms = ms(now);
        let Some(m) = self.members.get_mut(key) else {
            return false;
        };
        if !m.is_up() {
            return false;
        }
        if m.phase == NodePhase::Leaving {
            return true;
        }
        m.phase = NodePhase::Leaving;
        let id = m.node_id.clone();
        m.view.insert(
            id.clone(),
            PeerState {
                phase: NodePhase::Leaving,
            },
        );
        m.owned_cache = None;
        let delay = self.settings.gossip_delay_ms;
        self.announce(
            now_ms,
            &id,
            Some(PeerState {
                phase: NodePhase::Leaving,
            }),
            delay,
        );
        true
    }

    /// SIGTERM: the member keeps serving while it flushes, then exits.
    pub fn terminate(&mut self, now: Duration, key: &str) {
        self.wake();
        let until_ms = ms(now) + self.settings.flush_ms;
        if let Some(m) = self.members.get_mut(key)
            && m.process == Process::Running
        {
            m.process = Process::Flushing { until_ms };
        }
    }

    /// SIGKILL or a crash: gone at once; peers notice after the crash-detection delay.
    pub fn kill(&mut self, now: Duration, key: &str) {
        self.wake();
        let now_ms = ms(now);
        let Some(m) = self.members.get_mut(key) else {
            return;
        };
        if !m.is_up() {
            return;
        }
        m.process = Process::Exited;
        let id = m.node_id.clone();
        let delay = self.settings.crash_detect_ms;
        self.announce(now_ms, &id, None, delay);
        self.lose_gapped(key);
        self.account_availability();
    }

    /// Forget a member whose pod is gone (its volume stays).
    pub fn remove_member(&mut self, now: Duration, key: &str) {
        self.kill(now, key);
        self.members.remove(key);
    }

    pub fn set_faults(&mut self, key: &str, faults: Faults) -> bool {
        self.wake();
        match self.members.get_mut(key) {
            Some(m) => {
                m.faults = faults;
                true
            }
            None => false,
        }
    }

    /// The members a view counts as placement candidates: those it sees Active, plus the
    /// viewer itself while it is Joining (for its own join gate).
    fn candidates(view: &BTreeMap<String, PeerState>) -> Vec<&str> {
        view.iter()
            .filter(|(_, s)| s.phase == NodePhase::Active)
            .map(|(k, _)| k.as_str())
            .collect()
    }

    fn owned(&mut self, key: &str) -> Vec<u32> {
        let partitions = self.settings.partitions;
        let m = self.members.get_mut(key).expect("member exists");
        if let Some(c) = &m.owned_cache {
            return c.clone();
        }
        let mut cands = Self::candidates(&m.view);
        if m.phase == NodePhase::Joining {
            cands.push(m.node_id.as_str());
        }
        let owned: Vec<u32> =
            if m.phase == NodePhase::Leaving || !cands.contains(&m.node_id.as_str()) {
                Vec::new()
            } else {
                (0..partitions)
                    .filter(|pid| is_owner(&m.node_id, &cands, m.replicas_n, *pid))
                    .collect()
            };
        m.owned_cache = Some(owned.clone());
        owned
    }

    /// Copy sources of `pid`: the volumes of running members other than `except` that hold
    /// it; only the first one found unless `all` (with no key data anywhere, one will do and
    /// a large cluster's hand-off does not scan every member per partition).
    fn copy_sources(&self, pid: u32, except: &str, all: bool) -> BTreeSet<String> {
        self.members
            .iter()
            .filter(|(k, m)| k.as_str() != except && m.is_up())
            .filter(|(_, m)| {
                self.volumes
                    .get(&m.volume)
                    .is_some_and(|v| v.held[pid as usize])
            })
            .map(|(_, m)| m.volume.clone())
            .take(if all { usize::MAX } else { 1 })
            .collect()
    }

    /// Budget units copying `pid` from `sources` costs: one, plus one per
    /// `copy_bytes_per_unit` of the largest source's key data.
    fn copy_cost(&self, pid: u32, sources: &BTreeSet<String>) -> f64 {
        let bytes = sources
            .iter()
            .filter_map(|v| self.volumes.get(v)?.data.get(&pid))
            .map(|d| d.bytes)
            .max()
            .unwrap_or(0);
        1.0 + bytes as f64 / self.settings.copy_bytes_per_unit.max(1) as f64
    }

    /// Copy `pid` into `volume`: every key of every source, newest version winning (newer
    /// entries the volume already has stay).
    fn copy_partition(&mut self, volume: &str, pid: u32, sources: &BTreeSet<String>) {
        let entries = self.entries_of(pid, sources);
        if let Some(v) = self.volumes.get_mut(volume) {
            v.merge_all(pid, entries);
            v.held[pid as usize] = true;
        }
    }

    /// Every entry of `pid` on `volumes`, leaving out writes past a ring gap (only their
    /// origin's anti-entropy delivers those).
    fn entries_of<'a>(
        &self,
        pid: u32,
        volumes: impl IntoIterator<Item = &'a String>,
    ) -> Vec<(Vec<u8>, Entry)> {
        volumes
            .into_iter()
            .filter_map(|v| self.volumes.get(v)?.data.get(&pid))
            .flat_map(|d| d.entries.iter())
            .filter(|(_, e)| !self.gapped_versions.contains(&e.version))
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }

    /// Returns whether any partition's availability changed.
    fn account_availability(&mut self) -> bool {
        let mut changed = false;
        let p = self.settings.partitions as usize;
        let mut online = vec![false; p];
        for m in self.members.values().filter(|m| m.is_up()) {
            if let Some(v) = self.volumes.get(&m.volume) {
                for (i, held) in v.held.iter().enumerate() {
                    online[i] |= *held;
                }
            }
        }
        for (i, on) in online.iter().enumerate() {
            if !self.existed[i] {
                continue;
            }
            if !on && !self.unavailable[i] {
                self.unavailable[i] = true;
                self.lost_partitions_total += 1;
                changed = true;
            } else if *on && self.unavailable[i] {
                self.unavailable[i] = false;
                changed = true;
            }
        }
        changed
    }

    /// Advance the model to `now`.
    pub fn tick(&mut self, now: Duration) {
        let now_ms = ms(now);
        let dt = self
            .last_tick_ms
            .map(|t| now_ms.saturating_sub(t) as f64 / 1000.0)
            .unwrap_or(0.0);
        self.last_tick_ms = Some(now_ms);
        if self.quiet && self.skip_quiet_ticks {
            self.add_load(dt);
            return;
        }
        let keys: Vec<String> = self.members.keys().cloned().collect();
        // Whether this tick changed anything but the load counters.
        let mut changed = false;

        // Flushing members whose time is up exit; peers notice after the leave delay.
        for key in &keys {
            let exit = matches!(self.members[key].process, Process::Flushing { until_ms } if until_ms <= now_ms);
            if exit {
                changed = true;
                let m = self.members.get_mut(key).expect("member exists");
                m.process = Process::Exited;
                let id = m.node_id.clone();
                let delay = self.settings.leave_detect_ms;
                self.announce(now_ms, &id, None, delay);
                self.lose_gapped(key);
            }
        }

        // Deliver due gossip.
        for key in &keys {
            let m = self.members.get_mut(key).expect("member exists");
            if !m.is_up() {
                m.pending.clear();
                continue;
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
                if m.view_seq.get(&c.subject).is_some_and(|s| *s > c.seq) || c.subject == m.node_id
                {
                    continue;
                }
                changed = true;
                m.view_seq.insert(c.subject.clone(), c.seq);
                match c.state {
                    Some(s) => m.view.insert(c.subject.clone(), s),
                    None => m.view.remove(&c.subject),
                };
                m.owned_cache = None;
            }
        }

        // Copy what each member owns but lacks; drop what it no longer owns once every owner has it.
        // Without key data anywhere, a copy carries nothing: one source is enough.
        let any_data = self.volumes.values().any(|v| !v.data.is_empty());
        for key in &keys {
            if self.members[key].is_up() {
                changed |= self.copy_and_hand_off(key, dt, any_data);
            }
        }
        for key in &keys {
            changed |= self.anti_entropy(key, dt, now_ms);
        }

        // Joining members whose gate is empty turn Active.
        for key in &keys {
            let m = &self.members[key];
            if !m.is_up() || m.phase != NodePhase::Joining || m.faults.hold_join {
                continue;
            }
            if self.join_gate_pending(key) == 0 {
                changed = true;
                let m = self.members.get_mut(key).expect("member exists");
                m.phase = NodePhase::Active;
                let id = m.node_id.clone();
                m.view.insert(
                    id.clone(),
                    PeerState {
                        phase: NodePhase::Active,
                    },
                );
                m.owned_cache = None;
                let delay = self.settings.gossip_delay_ms;
                self.announce(
                    now_ms,
                    &id,
                    Some(PeerState {
                        phase: NodePhase::Active,
                    }),
                    delay,
                );
            }
        }

        self.add_load(dt);
        changed |= self.account_availability();

        // Quiet until an event: nothing moved, and nothing is timed to move (gossip in
        // flight, a flush running out, a member still joining).
        self.quiet = !changed
            && self.members.values().all(|m| {
                !m.is_up()
                    || (m.pending.is_empty()
                        && m.gapped.is_empty()
                        && m.process == Process::Running
                        && m.phase != NodePhase::Joining)
            });
    }

    /// Copy what member `key` owns but lacks, within its copy budget; if Active, hand off
    /// what it no longer owns. Returns whether anything moved or is waiting to.
    fn copy_and_hand_off(&mut self, key: &str, dt: f64, any_data: bool) -> bool {
        let owned = self.owned(key);
        let (volume, rate) = {
            let m = &self.members[key];
            (
                m.volume.clone(),
                m.faults
                    .copy_rate_per_sec
                    .unwrap_or(self.settings.copy_rate_per_sec),
            )
        };
        let missing: Vec<u32> = owned
            .iter()
            .copied()
            .filter(|pid| !self.volumes[&volume].held[*pid as usize])
            .collect();
        let mut budget = {
            let m = self.members.get_mut(key).expect("member exists");
            m.copy_budget += rate.max(0.0) * dt;
            m.copy_budget
        };
        let mut copied = 0u64;
        let idle = missing.is_empty();
        // Cost of a partition the budget did not cover yet: the budget may grow to it.
        let mut blocked_cost = 0.0f64;
        for pid in missing {
            if budget < 1.0 {
                break;
            }
            let i = pid as usize;
            let sources = self.copy_sources(pid, key, any_data);
            // A partition that never existed, or whose every copy is already gone, starts
            // with what this volume has (usually nothing); otherwise it needs a running source.
            if sources.is_empty() && self.existed[i] && !self.unavailable[i] {
                continue;
            }
            let cost = self.copy_cost(pid, &sources);
            if budget < cost {
                blocked_cost = cost;
                break;
            }
            self.copy_partition(&volume, pid, &sources);
            self.existed[i] = true;
            self.unavailable[i] = false;
            budget -= cost;
            copied += 1;
        }
        let m = self.members.get_mut(key).expect("member exists");
        // No banking of budget while idle, so a later hand-off is not copied in a burst; but
        // enough to copy the largest partition that is waiting.
        m.copy_budget = if idle {
            0.0
        } else {
            budget.min(rate.max(1.0).max(blocked_cost))
        };
        // Whole-partition copies, joining or active; gap repairs count apart (`anti_entropy`).
        m.bootstraps_completed += copied;
        let dropped = m.phase == NodePhase::Active && self.drop_unowned(key, &owned);
        !idle || dropped
    }

    /// Load: commands spread over serving members.
    fn add_load(&mut self, dt: f64) {
        if self.settings.load_ops_per_sec <= 0.0 {
            return;
        }
        let serving = self
            .members
            .values()
            .filter(|m| m.is_up() && m.phase != NodePhase::Joining)
            .count();
        if serving == 0 {
            return;
        }
        let each = self.settings.load_ops_per_sec * dt / serving as f64;
        for m in self
            .members
            .values_mut()
            .filter(|m| m.is_up() && m.phase != NodePhase::Joining)
        {
            m.commands_get += each * 0.8;
            m.commands_set += each * 0.2;
        }
    }

    /// Hand off and drop what this member no longer owns, once every owner in its view holds
    /// it on a running member: its keys are merged into those owners first, so a write that
    /// reached only this copy survives. Partial data (writes that reached it as an owner in
    /// another member's view) goes the same way. Returns whether it dropped anything.
    fn drop_unowned(&mut self, key: &str, owned: &[u32]) -> bool {
        let m = &self.members[key];
        let owned_set: BTreeSet<u32> = owned.iter().copied().collect();
        let cands: Vec<String> = Self::candidates(&m.view)
            .into_iter()
            .map(String::from)
            .collect();
        let cand_refs: Vec<&str> = cands.iter().map(String::as_str).collect();
        let n = m.replicas_n;
        let volume = m.volume.clone();
        // Its gapped writes stay with it until anti-entropy delivered them.
        let gapped: BTreeSet<u32> = m.gapped.iter().map(|g| g.pid).collect();
        let v = &self.volumes[&volume];
        let unowned: BTreeSet<u32> = (0..self.settings.partitions)
            .filter(|pid| v.held[*pid as usize])
            .chain(v.data.keys().copied())
            .filter(|pid| !owned_set.contains(pid) && !gapped.contains(pid))
            .collect();
        let mut dropped = false;
        for pid in unowned {
            let owner_volumes: Option<Vec<String>> = owners_of(&cand_refs, n, pid)
                .into_iter()
                .map(|o| self.running_volume_holding(o, pid))
                .collect();
            let Some(owner_volumes) = owner_volumes.filter(|ov| !ov.is_empty()) else {
                continue;
            };
            let v = self.volumes.get_mut(&volume).expect("volume exists");
            v.held[pid as usize] = false;
            let entries: Vec<(Vec<u8>, Entry)> = v
                .data
                .remove(&pid)
                .map(|d| d.entries.into_iter().collect())
                .unwrap_or_default();
            for ov in owner_volumes.iter().filter(|ov| **ov != volume) {
                if let Some(target) = self.volumes.get_mut(ov) {
                    target.merge_all(pid, entries.clone());
                }
            }
            dropped = true;
        }
        dropped
    }

    /// Anti-entropy of member `key`: deliver its gapped writes, oldest first, to the owners
    /// of their partitions in its view, within its budget; each delivery counts as a repair on
    /// the member receiving it. Not while flushing or down. Returns whether any is waiting.
    fn anti_entropy(&mut self, key: &str, dt: f64, now_ms: u64) -> bool {
        let rate = self.settings.ae_ops_per_sec.max(0.0);
        let m = self.members.get_mut(key).expect("member exists");
        if m.process != Process::Running || m.gapped.is_empty() {
            m.ae_budget = 0.0;
            return !m.gapped.is_empty();
        }
        m.ae_budget = (m.ae_budget + rate * dt).min(rate.max(1.0));
        while self.members[key].ae_budget >= 1.0 {
            let Some(gap) = self.members[key].gapped.front().cloned() else {
                break;
            };
            if gap.at_ms + self.settings.ae_round_ms > now_ms {
                break;
            }
            if !self.deliver_gapped(key, &gap) {
                break;
            }
            self.gapped_versions.remove(&gap.version);
            let m = self.members.get_mut(key).expect("member exists");
            m.gapped.pop_front();
            m.ae_budget -= 1.0;
        }
        true
    }

    /// Merge a gapped write of origin `key` into the running owners of its partition in the
    /// origin's view; false when it has no owner to go to yet.
    fn deliver_gapped(&mut self, key: &str, gap: &GapWrite) -> bool {
        let m = &self.members[key];
        let owners: Vec<String> = owners_of(&Self::candidates(&m.view), m.replicas_n, gap.pid)
            .into_iter()
            .map(String::from)
            .collect();
        let (volume, origin) = (m.volume.clone(), m.node_id.clone());
        let Some(entry) = self.volumes[&volume].entry(gap.pid, &gap.key).cloned() else {
            return true;
        };
        let receivers: Vec<String> = self
            .members
            .iter()
            .filter(|(_, r)| r.is_up() && r.volume != volume && owners.contains(&r.node_id))
            .map(|(k, _)| k.clone())
            .collect();
        // No owner to go to yet (none in the view, or none but itself running): wait.
        if receivers.is_empty() && !owners.contains(&origin) {
            return false;
        }
        for r in receivers {
            let rv = self.members[&r].volume.clone();
            if let Some(v) = self.volumes.get_mut(&rv) {
                v.merge_all(gap.pid, vec![(gap.key.clone(), entry.clone())]);
            }
            self.members
                .get_mut(&r)
                .expect("member exists")
                .ae_repair_ops += 1;
        }
        true
    }

    /// Member `key` exited: its gapped writes leave the cluster's reads with it.
    fn lose_gapped(&mut self, key: &str) {
        let Some(m) = self.members.get_mut(key) else {
            return;
        };
        let lost = std::mem::take(&mut m.gapped);
        m.ae_budget = 0.0;
        self.gapped_lost_total += lost.len() as u64;
        for g in lost {
            self.gapped_versions.remove(&g.version);
        }
    }

    /// Take a replication-ring token of `member` at `now_ms`: false past a ring gap.
    fn ring_token(&mut self, member: &str, now_ms: u64) -> bool {
        let rate = self.settings.ring_ops_per_sec;
        let Some(m) = self.members.get_mut(member) else {
            return true;
        };
        if rate <= 0.0 {
            return true;
        }
        let elapsed = now_ms.saturating_sub(m.ring_refilled_ms) as f64 / 1000.0;
        m.ring_tokens = (m.ring_tokens + rate * elapsed).min(rate);
        m.ring_refilled_ms = m.ring_refilled_ms.max(now_ms);
        if m.ring_tokens >= 1.0 {
            m.ring_tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The volume of a running member with node id `node_id` that holds `pid`.
    fn running_volume_holding(&self, node_id: &str, pid: u32) -> Option<String> {
        self.members
            .values()
            .filter(|m| m.node_id == node_id && m.is_up())
            .find(|m| {
                self.volumes
                    .get(&m.volume)
                    .is_some_and(|v| v.held[pid as usize])
            })
            .map(|m| m.volume.clone())
    }

    fn join_gate_pending(&mut self, key: &str) -> u64 {
        if self.members[key].phase != NodePhase::Joining {
            return 0;
        }
        let owned = self.owned(key);
        let v = &self.volumes[&self.members[key].volume];
        owned.iter().filter(|pid| !v.held[**pid as usize]).count() as u64
    }

    /// What `/metrics` and `/ready` report for a member; `None` when it is not running.
    pub fn figures(&mut self, now: Duration, key: &str) -> Option<MemberFigures> {
        let m = self.members.get(key)?;
        if !m.is_up() {
            return None;
        }
        let n = m.replicas_n as u64;
        let cands = Self::candidates(&m.view).len() as u64;
        let underrep = if cands < n {
            u64::from(self.settings.partitions)
        } else {
            0
        };
        let held = self.volumes[&m.volume].held.iter().filter(|h| **h).count() as u64;
        let mut f = MemberFigures {
            phase: Some(m.phase),
            ready: matches!(m.phase, NodePhase::Active | NodePhase::Leaving),
            view_members: m.view.len() as u64,
            underreplicated_partitions: m.faults.report_underreplicated.unwrap_or(underrep),
            effective_rf_min: cands.min(n),
            owned_partitions: 0,
            join_gate_pending_pids: 0,
            bootstraps_completed_total: m.bootstraps_completed,
            ae_repair_ops_total: m.ae_repair_ops,
            ring_ops: m.gapped.len() as u64,
            ring_bytes: m.gapped.iter().map(|g| g.bytes).sum(),
            commands_get_total: m.commands_get as u64,
            commands_set_total: m.commands_set as u64,
            held_partitions: held,
            db_total_bytes: match m.faults.disk_fill_percent {
                Some(pct) => m.disk_bytes / 100 * u64::from(pct.min(100)),
                None => held * self.settings.bytes_per_partition,
            },
            disk_total_bytes: m.disk_bytes,
            disk_write_stopped: m.faults.disk_write_stopped,
            uptime_seconds: (ms(now).saturating_sub(m.started_ms)) as f64 / 1000.0,
        };
        f.owned_partitions = self.owned(key).len() as u64;
        f.join_gate_pending_pids = self.join_gate_pending(key);
        Some(f)
    }

    /// Partitions that currently have no copy on any running member.
    pub fn unavailable_partitions(&self) -> u64 {
        self.unavailable.iter().filter(|u| **u).count() as u64
    }

    /// Whether every existing partition has at least `n` copies on running, non-leaving members.
    pub fn fully_replicated(&self, n: usize) -> bool {
        (0..self.settings.partitions as usize).all(|i| {
            !self.existed[i]
                || self
                    .members
                    .values()
                    .filter(|m| m.is_up() && m.phase != NodePhase::Leaving)
                    .filter(|m| self.volumes.get(&m.volume).is_some_and(|v| v.held[i]))
                    .count()
                    >= n
        })
    }
}

/// Keys: the commands a member serves. Any running member serves any key.
impl Cluster {
    fn serving(&self, member: &str) -> Result<&Member, NotServing> {
        self.members
            .get(member)
            .filter(|m| m.is_up())
            .ok_or(NotServing)
    }

    fn partition(&self, key: &[u8]) -> u32 {
        partition_of(key, self.settings.partitions)
    }

    /// `SET key value` through `member`.
    pub fn set(
        &mut self,
        now: Duration,
        member: &str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), NotServing> {
        self.write(now, member, key, Some(value.to_vec()))?;
        if let Some(m) = self.members.get_mut(member) {
            m.commands_set += 1.0;
        }
        Ok(())
    }

    /// `GET key` through `member`: the newest version it can see; `None` for a key that is
    /// missing, deleted, or not visible to it yet.
    pub fn get(
        &mut self,
        now: Duration,
        member: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, NotServing> {
        let value = self.read(now, member, key)?;
        if let Some(m) = self.members.get_mut(member) {
            m.commands_get += 1.0;
        }
        Ok(value)
    }

    /// `DEL key...` through `member`: writes a tombstone for each key and answers how many of
    /// them existed as `member` saw them (a key given twice counts once, as in Redis).
    pub fn del(
        &mut self,
        now: Duration,
        member: &str,
        keys: &[Vec<u8>],
    ) -> Result<u64, NotServing> {
        let mut existed = 0;
        for key in keys {
            if self.read(now, member, key)?.is_some() {
                existed += 1;
            }
            self.write(now, member, key, None)?;
        }
        Ok(existed)
    }

    /// `EXISTS key...` through `member`: how many of the keys it sees (repeats count again).
    pub fn exists(&self, now: Duration, member: &str, keys: &[Vec<u8>]) -> Result<u64, NotServing> {
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
            })
            .collect();
        Ok(MemberView {
            node_id: m.node_id.clone(),
            replicas_n: m.replicas_n,
            peers,
        })
    }

    /// Keys whose newest version on the running members' volumes is a value (visibility aside):
    /// what the cluster would answer once every write is visible.
    pub fn live_keys(&self) -> u64 {
        let mut newest: BTreeMap<&[u8], &Entry> = BTreeMap::new();
        for v in self.running_volumes() {
            for (key, e) in v.data.values().flat_map(|d| d.entries.iter()) {
                let slot = newest.entry(key.as_slice()).or_insert(e);
                if e.version > slot.version {
                    *slot = e;
                }
            }
        }
        newest.values().filter(|e| e.value.is_some()).count() as u64
    }

    /// Distinct volumes of running members.
    fn running_volumes(&self) -> impl Iterator<Item = &Volume> {
        let names: BTreeSet<&str> = self
            .members
            .values()
            .filter(|m| m.is_up())
            .map(|m| m.volume.as_str())
            .collect();
        names.into_iter().filter_map(|n| self.volumes.get(n))
    }

    /// What `GET` answers, without counting the command.
    fn read(&self, now: Duration, member: &str, key: &[u8]) -> Result<Option<Vec<u8>>, NotServing> {
        let me = self.serving(member)?;
        let pid = self.partition(key);
        let now_ms = ms(now);
        let newest = self
            .running_volumes()
            .filter_map(|v| v.entry(pid, key)?.visible_version(&me.node_id, now_ms))
            .max_by_key(|e| e.version);
        Ok(newest.and_then(|e| e.value.clone()))
    }

    /// Store a new version of `key` (`None`: a tombstone) through `member`.
    fn write(
        &mut self,
        now: Duration,
        member: &str,
        key: &[u8],
        value: Option<Vec<u8>>,
    ) -> Result<(), NotServing> {
        let me = self.serving(member)?;
        let (written_via, own_volume) = (me.node_id.clone(), me.volume.clone());
        let pid = self.partition(key);
        let mut targets = self.write_targets(member, pid);
        self.wake();
        self.write_version += 1;
        let visibility = self.settings.read_visibility_ms;
        let entry = Entry {
            value,
            version: self.write_version,
            written_ms: ms(now),
            visible_at_ms: ms(now) + self.jitter(visibility),
            written_via,
            replaced: None,
        };
        if targets.is_empty() {
            // No running member holds or owns the partition: this member keeps the write as
            // the partition's one copy, which the owners then copy from it.
            if let Some(v) = self.volumes.get_mut(&own_volume) {
                v.held[pid as usize] = true;
                self.existed[pid as usize] = true;
            }
            targets.insert(own_volume.clone());
        } else if targets.iter().any(|t| *t != own_volume) && !self.ring_token(member, ms(now)) {
            // A ring gap: only the origin keeps it until its anti-entropy delivers it.
            let bytes = entry.bytes(key);
            let m = self.members.get_mut(member).expect("member exists");
            m.gapped.push_back(GapWrite {
                pid,
                key: key.to_vec(),
                version: entry.version,
                bytes,
                at_ms: ms(now),
            });
            self.gapped_versions.insert(entry.version);
            targets = BTreeSet::from([own_volume]);
        }
        for target in targets {
            if let Some(v) = self.volumes.get_mut(&target) {
                v.merge_all(pid, vec![(key.to_vec(), entry.clone())]);
            }
        }
        Ok(())
    }

    /// Volumes a write of `pid` through `member` reaches: every running member that holds the
    /// partition, and every running member among its owners in `member`'s view (a new owner
    /// still copying it included).
    fn write_targets(&self, member: &str, pid: u32) -> BTreeSet<String> {
        let m = &self.members[member];
        let cands = Self::candidates(&m.view);
        let owners: BTreeSet<&str> = owners_of(&cands, m.replicas_n, pid).into_iter().collect();
        self.members
            .values()
            .filter(|pm| pm.is_up())
            .filter(|pm| {
                owners.contains(pm.node_id.as_str())
                    || self
                        .volumes
                        .get(&pm.volume)
                        .is_some_and(|v| v.held[pid as usize])
            })
            .map(|pm| pm.volume.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn settings() -> Settings {
        Settings {
            partitions: 256,
            copy_rate_per_sec: 512.0,
            ..Settings::default()
        }
    }

    /// Run the model from `from` to `to` in 100 ms ticks.
    fn run(c: &mut Cluster, from: f64, to: f64) {
        let mut t = from;
        while t <= to {
            c.tick(secs(t));
            t += 0.1;
        }
    }

    fn spec(i: usize, rf: usize) -> MemberSpec {
        MemberSpec {
            key: format!("ns/demo-{i}"),
            node_id: i.to_string(),
            replicas_n: rf,
            volume: format!("vol-{i}"),
            disk_bytes: 1 << 30,
            faults: Faults::default(),
            addr: format!("127.50.0.{i}"),
        }
    }

    fn boot(n: usize, rf: usize) -> Cluster {
        let mut c = Cluster::new(settings(), 7);
        for i in 0..n {
            c.start_member(secs(0.0), spec(i, rf));
        }
        run(&mut c, 0.0, 20.0);
        c
    }

    #[test]
    fn a_fresh_cluster_bootstraps_to_active_and_converged_views() {
        let mut c = boot(3, 2);
        for i in 0..3 {
            let f = c.figures(secs(20.0), &format!("ns/demo-{i}")).unwrap();
            assert_eq!(f.phase, Some(NodePhase::Active));
            assert!(f.ready);
            assert_eq!(f.view_members, 3);
            assert_eq!(f.underreplicated_partitions, 0);
            assert_eq!(f.join_gate_pending_pids, 0);
        }
        assert!(c.fully_replicated(2));
        assert_eq!(c.lost_partitions_total, 0);
    }

    #[test]
    fn drain_flips_phase_but_keeps_the_member_ready_and_running() {
        let mut c = boot(4, 2);
        assert!(c.drain(secs(20.0), "ns/demo-3"));
        run(&mut c, 20.1, 40.0);
        let f = c.figures(secs(40.0), "ns/demo-3").unwrap();
        assert_eq!(f.phase, Some(NodePhase::Leaving));
        assert!(f.ready, "a Leaving member stays ready");
        // Survivors took over its share: full replication without it.
        assert!(c.fully_replicated(2));
    }

    #[test]
    fn gauge_reads_zero_while_data_is_still_moving_after_a_crash() {
        let mut c = boot(4, 2);
        let copies = |c: &mut Cluster, t: f64| -> u64 {
            (0..3)
                .map(|i| {
                    c.figures(secs(t), &format!("ns/demo-{i}"))
                        .unwrap()
                        .bootstraps_completed_total
                })
                .sum()
        };
        let before = copies(&mut c, 20.0);
        // Slow copying so the hand-off is visibly in progress.
        c.settings.copy_rate_per_sec = 5.0;
        c.kill(secs(20.0), "ns/demo-3");
        run(&mut c, 20.1, 27.0);
        let at_27 = copies(&mut c, 27.0);
        for i in 0..3 {
            let f = c.figures(secs(27.0), &format!("ns/demo-{i}")).unwrap();
            assert_eq!(
                f.view_members, 3,
                "crash detected within the detection delay"
            );
            assert_eq!(
                f.underreplicated_partitions, 0,
                "the gauge is computed from membership only"
            );
        }
        assert!(
            at_27 > before,
            "survivors started copying what they took over"
        );
        assert!(!c.fully_replicated(2), "data is still being copied");
        run(&mut c, 27.1, 29.0);
        assert!(
            copies(&mut c, 29.0) > at_27,
            "copy counters still move while the gauge reads 0"
        );
    }

    #[test]
    fn views_lag_and_disagree_after_a_crash() {
        let mut c = boot(4, 2);
        c.kill(secs(20.0), "ns/demo-3");
        c.tick(secs(20.5));
        for i in 0..3 {
            assert_eq!(
                c.figures(secs(20.5), &format!("ns/demo-{i}"))
                    .unwrap()
                    .view_members,
                4
            );
        }
        run(&mut c, 20.6, 26.0);
        for i in 0..3 {
            assert_eq!(
                c.figures(secs(26.0), &format!("ns/demo-{i}"))
                    .unwrap()
                    .view_members,
                3
            );
        }
    }

    #[test]
    fn underreplication_rises_when_fewer_than_n_candidates_remain() {
        let mut c = boot(3, 3);
        c.kill(secs(20.0), "ns/demo-2");
        run(&mut c, 20.1, 30.0);
        let f = c.figures(secs(30.0), "ns/demo-0").unwrap();
        assert_eq!(f.underreplicated_partitions, 256);
        assert_eq!(f.effective_rf_min, 2);
    }

    #[test]
    fn removing_two_members_before_repair_loses_data_and_is_counted() {
        let mut c = boot(5, 2);
        c.settings.copy_rate_per_sec = 1.0;
        c.kill(secs(20.0), "ns/demo-3");
        c.kill(secs(20.2), "ns/demo-4");
        run(&mut c, 20.3, 22.0);
        assert!(
            c.lost_partitions_total > 0,
            "partitions held only by members 3 and 4 vanished"
        );
    }

    #[test]
    fn removing_one_member_at_rf2_loses_nothing() {
        let mut c = boot(4, 2);
        c.drain(secs(20.0), "ns/demo-3");
        run(&mut c, 20.1, 30.0);
        c.terminate(secs(30.0), "ns/demo-3");
        run(&mut c, 30.1, 45.0);
        assert_eq!(c.lost_partitions_total, 0);
        assert!(c.fully_replicated(2));
        assert!(
            c.figures(secs(45.0), "ns/demo-3").is_none(),
            "exited after its flush"
        );
        for i in 0..3 {
            assert_eq!(
                c.figures(secs(45.0), &format!("ns/demo-{i}"))
                    .unwrap()
                    .view_members,
                3
            );
        }
    }

    #[test]
    fn a_joining_member_is_unready_and_counts_its_gate_down() {
        let mut c = boot(3, 2);
        c.settings.copy_rate_per_sec = 20.0;
        c.start_member(secs(20.0), spec(3, 2));
        c.tick(secs(20.0));
        let f0 = c.figures(secs(20.0), "ns/demo-3").unwrap();
        assert!(!f0.ready);
        assert!(f0.join_gate_pending_pids > 0);
        run(&mut c, 20.1, 21.0);
        let f1 = c.figures(secs(21.0), "ns/demo-3").unwrap();
        assert!(f1.join_gate_pending_pids < f0.join_gate_pending_pids);
        assert!(f1.bootstraps_completed_total > 0);
        run(&mut c, 21.1, 60.0);
        assert!(c.figures(secs(60.0), "ns/demo-3").unwrap().ready);
    }

    #[test]
    fn a_member_returning_on_its_volume_resumes_its_data() {
        let mut c = boot(3, 2);
        let held = c.figures(secs(20.0), "ns/demo-1").unwrap().held_partitions;
        c.remove_member(secs(20.0), "ns/demo-1");
        c.start_member(secs(20.5), spec(1, 2));
        let f = c.figures(secs(20.5), "ns/demo-1").unwrap();
        assert_eq!(f.held_partitions, held);
    }

    #[derive(Clone, Debug)]
    enum Event {
        Start(usize),
        Drain(usize),
        Terminate(usize),
        Kill(usize),
        Remove(usize),
        Set(usize, u8),
        Del(usize, u8),
        Wait(u8),
    }

    fn event() -> impl proptest::strategy::Strategy<Value = Event> {
        use proptest::prelude::*;
        prop_oneof![
            (0..6usize).prop_map(Event::Start),
            (0..6usize).prop_map(Event::Drain),
            (0..6usize).prop_map(Event::Terminate),
            (0..6usize).prop_map(Event::Kill),
            (0..6usize).prop_map(Event::Remove),
            (0..6usize, 0..PROP_KEYS).prop_map(|(i, k)| Event::Set(i, k)),
            (0..6usize, 0..PROP_KEYS).prop_map(|(i, k)| Event::Del(i, k)),
            (1..80u8).prop_map(Event::Wait),
        ]
    }

    /// Keys the property test writes.
    const PROP_KEYS: u8 = 8;

    fn prop_key(k: u8) -> Vec<u8> {
        format!("key-{k}").into_bytes()
    }

    /// Everything the model shows: figures of every member, what each member reads for every
    /// key and holds, losses, availability.
    fn observable(c: &mut Cluster, now: Duration) -> Vec<(String, Option<MemberFigures>)> {
        let keys: Vec<String> = c.members.keys().cloned().collect();
        let mut out: Vec<(String, Option<MemberFigures>)> = keys
            .into_iter()
            .map(|k| {
                let reads: Vec<_> = (0..PROP_KEYS)
                    .map(|i| c.read(now, &k, &prop_key(i)))
                    .collect();
                let dbsize = c.dbsize(&k);
                let f = c.figures(now, &k);
                (format!("{k} reads={reads:?} dbsize={dbsize:?}"), f)
            })
            .collect();
        out.push((format!("live_keys={}", c.live_keys()), None));
        out.push((
            format!(
                "lost={} unavailable={}",
                c.lost_partitions_total,
                c.unavailable_partitions()
            ),
            None,
        ));
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Skipping the ticks of a quiet cluster is invisible: the same events give the same
        /// figures, tick by tick, as running every tick in full.
        #[test]
        fn skipping_quiet_ticks_changes_nothing(events in proptest::collection::vec(event(), 1..40)) {
            let mut fast = boot(4, 2);
            let mut full = fast.clone();
            full.skip_quiet_ticks = false;
            let mut t = 20.1;
            for e in events {
                let now = secs(t);
                for c in [&mut fast, &mut full] {
                    match &e {
                        Event::Start(i) => {
                            if !c.members.get(&format!("ns/demo-{i}")).is_some_and(Member::is_up) {
                                c.start_member(now, spec(*i, 2));
                            }
                        }
                        Event::Drain(i) => { c.drain(now, &format!("ns/demo-{i}")); }
                        Event::Terminate(i) => c.terminate(now, &format!("ns/demo-{i}")),
                        Event::Kill(i) => c.kill(now, &format!("ns/demo-{i}")),
                        Event::Remove(i) => c.remove_member(now, &format!("ns/demo-{i}")),
                        Event::Set(i, k) => {
                            let value = format!("{t:.1}");
                            let _ = c.set(now, &format!("ns/demo-{i}"), &prop_key(*k), value.as_bytes());
                        }
                        Event::Del(i, k) => {
                            let _ = c.del(now, &format!("ns/demo-{i}"), &[prop_key(*k)]);
                        }
                        Event::Wait(_) => {}
                    }
                }
                let ticks = if let Event::Wait(n) = e { u32::from(n) } else { 1 };
                for _ in 0..ticks {
                    t += 0.1;
                    fast.tick(secs(t));
                    full.tick(secs(t));
                    proptest::prop_assert_eq!(observable(&mut fast, secs(t)), observable(&mut full, secs(t)));
                }
            }
        }
    }

    #[test]
    fn a_settled_cluster_goes_quiet_and_any_event_wakes_it() {
        let mut c = boot(4, 2);
        run(&mut c, 20.1, 40.0);
        assert!(c.quiet, "a converged, idle cluster is quiet");
        c.drain(secs(40.1), "ns/demo-3");
        assert!(!c.quiet);
        c.tick(secs(40.2));
        assert!(!c.quiet, "gossip of the drain is in flight");
        run(&mut c, 40.3, 80.0);
        assert!(c.quiet, "settled again after the hand-off");
    }

    fn member(i: usize) -> String {
        format!("ns/demo-{i}")
    }

    fn key(i: usize) -> Vec<u8> {
        format!("user:{i}").into_bytes()
    }

    fn value(i: usize) -> Vec<u8> {
        format!("value-{i}").into_bytes()
    }

    /// Write keys `0..n` through the members in turn, at `t`.
    fn write_keys(c: &mut Cluster, t: f64, n: usize, through: &[usize]) {
        for i in 0..n {
            let m = member(through[i % through.len()]);
            c.set(secs(t), &m, &key(i), &value(i)).unwrap();
        }
    }

    /// Keys `0..n` that `GET` through `m` does not return with their value.
    fn unreadable(c: &mut Cluster, t: f64, m: usize, n: usize) -> Vec<usize> {
        (0..n)
            .filter(|i| c.get(secs(t), &member(m), &key(*i)).unwrap() != Some(value(*i)))
            .collect()
    }

    /// Partitions whose only copies on running members are on the given members' volumes.
    fn held_only_by(c: &Cluster, only: &[usize]) -> BTreeSet<u32> {
        let only: Vec<String> = only.iter().map(|i| member(*i)).collect();
        (0..c.settings.partitions)
            .filter(|pid| {
                let holders: Vec<&String> = c
                    .members
                    .iter()
                    .filter(|(_, m)| m.is_up() && c.volumes[&m.volume].held[*pid as usize])
                    .map(|(k, _)| k)
                    .collect();
                !holders.is_empty() && holders.iter().all(|k| only.contains(k))
            })
            .collect()
    }

    #[test]
    fn keys_survive_a_one_at_a_time_scale_down_at_rf2() {
        let mut c = boot(5, 2);
        write_keys(&mut c, 20.0, 1000, &[0, 1, 2, 3, 4]);
        run(&mut c, 20.1, 23.0);
        let mut t = 23.0;
        for leaving in [4, 3] {
            c.drain(secs(t), &member(leaving));
            run(&mut c, t + 0.1, t + 20.0);
            c.terminate(secs(t + 20.0), &member(leaving));
            run(&mut c, t + 20.1, t + 35.0);
            t += 35.0;
            assert!(c.figures(secs(t), &member(leaving)).is_none());
        }
        assert_eq!(c.lost_partitions_total, 0);
        for survivor in 0..3 {
            assert_eq!(unreadable(&mut c, t, survivor, 1000), Vec::<usize>::new());
        }
        assert_eq!(c.live_keys(), 1000);
    }

    #[test]
    fn losing_both_copies_loses_exactly_the_keys_of_those_partitions() {
        let mut c = boot(5, 2);
        write_keys(&mut c, 20.0, 2000, &[0, 1, 2]);
        run(&mut c, 20.1, 23.0);
        let doomed = held_only_by(&c, &[3, 4]);
        assert!(!doomed.is_empty(), "some partitions live only on 3 and 4");
        c.kill(secs(23.0), &member(3));
        c.kill(secs(23.2), &member(4));
        // Long enough for the survivors to notice, take over, and start the lost ones empty.
        run(&mut c, 23.3, 45.0);
        assert_eq!(c.lost_partitions_total, doomed.len() as u64);
        let expected_lost: Vec<usize> = (0..2000)
            .filter(|i| doomed.contains(&partition_of(&key(*i), c.settings.partitions)))
            .collect();
        assert!(!expected_lost.is_empty());
        for survivor in 0..3 {
            assert_eq!(unreadable(&mut c, 45.0, survivor, 2000), expected_lost);
        }
        assert!(
            c.fully_replicated(2),
            "the lost partitions were started again, empty"
        );
        assert_eq!(c.live_keys(), (2000 - expected_lost.len()) as u64);
    }

    #[test]
    fn a_write_is_visible_through_other_members_only_after_the_delay() {
        let mut c = boot(3, 2);
        let (lo, hi) = c.settings.read_visibility_ms;
        assert!(lo > 0);
        c.set(secs(20.0), &member(0), b"k", b"v1").unwrap();
        assert_eq!(
            c.get(secs(20.0), &member(0), b"k").unwrap(),
            Some(b"v1".to_vec())
        );
        assert_eq!(c.get(secs(20.0), &member(1), b"k").unwrap(), None);
        let later = 20.0 + hi as f64 / 1000.0;
        assert_eq!(
            c.get(secs(later), &member(1), b"k").unwrap(),
            Some(b"v1".to_vec())
        );
        assert_eq!(
            c.get(secs(later), &member(2), b"k").unwrap(),
            Some(b"v1".to_vec())
        );
        // An overwrite: other members read the older version until the new one is visible.
        c.set(secs(later), &member(0), b"k", b"v2").unwrap();
        assert_eq!(
            c.get(secs(later), &member(2), b"k").unwrap(),
            Some(b"v1".to_vec())
        );
        assert_eq!(
            c.get(secs(later), &member(0), b"k").unwrap(),
            Some(b"v2".to_vec())
        );
        let f = c.figures(secs(later), &member(0)).unwrap();
        assert_eq!((f.commands_set_total, f.commands_get_total), (2, 2));
    }

    #[test]
    fn a_member_returning_on_its_volume_brings_its_keys_back() {
        let mut c = boot(4, 2);
        write_keys(&mut c, 20.0, 500, &[0, 1]);
        run(&mut c, 20.1, 23.0);
        c.remove_member(secs(23.0), &member(2));
        c.remove_member(secs(23.0), &member(3));
        // The survivors notice, take over, and start the lost partitions empty.
        run(&mut c, 23.1, 35.0);
        let missing = unreadable(&mut c, 35.0, 0, 500);
        assert!(!missing.is_empty(), "partitions only on 2 and 3 are gone");
        assert!(c.lost_partitions_total > 0);
        assert!(c.fully_replicated(2));
        c.start_member(secs(35.0), spec(2, 2));
        assert_eq!(unreadable(&mut c, 35.0, 0, 500), Vec::<usize>::new());
        // The owners already hold those partitions (empty): its keys reach them only by the
        // hand-off before it drops what it no longer owns.
        run(&mut c, 35.1, 75.0);
        assert!(c.figures(secs(75.0), &member(2)).unwrap().ready);
        assert!(c.fully_replicated(2));
        for m in 0..3 {
            assert_eq!(unreadable(&mut c, 75.0, m, 500), Vec::<usize>::new());
        }
        c.remove_member(secs(75.0), &member(2));
        assert_eq!(
            unreadable(&mut c, 75.0, 0, 500),
            Vec::<usize>::new(),
            "the survivors hold every key without it"
        );
    }

    #[test]
    fn a_write_to_a_partition_nobody_holds_makes_it_available_again() {
        let mut c = boot(2, 1);
        c.drain(secs(20.0), &member(0));
        c.kill(secs(20.0), &member(1));
        run(&mut c, 20.1, 40.0);
        assert!(
            c.quiet,
            "nobody is Active: nothing to copy, nothing to drop"
        );
        let unavailable = c.unavailable_partitions();
        assert!(unavailable > 0, "what only 1 held is gone");
        let lost_key = (0..)
            .map(key)
            .find(|k| c.unavailable[partition_of(k, c.settings.partitions) as usize])
            .unwrap();
        c.set(secs(40.0), &member(0), &lost_key, b"v").unwrap();
        c.tick(secs(40.1));
        assert_eq!(c.unavailable_partitions(), unavailable - 1);
        assert_eq!(
            c.get(secs(40.1), &member(0), &lost_key),
            Ok(Some(b"v".to_vec()))
        );
    }

    #[test]
    fn keys_a_member_holds_for_a_partition_it_does_not_own_are_handed_off() {
        let mut c = boot(3, 2);
        c.set(secs(20.0), &member(0), b"k", b"old").unwrap();
        run(&mut c, 20.1, 25.0);
        let pid = partition_of(b"k", c.settings.partitions);
        let outsider = (0..3)
            .find(|i| !c.volumes[&c.members[&member(*i)].volume].held[pid as usize])
            .unwrap();
        // A newer write that reached only the outsider (an owner in some stale view).
        c.write_version += 1;
        let stray = Entry {
            value: Some(b"new".to_vec()),
            version: c.write_version,
            written_ms: 25_000,
            visible_at_ms: 25_000,
            written_via: outsider.to_string(),
            replaced: None,
        };
        let volume = c.members[&member(outsider)].volume.clone();
        c.volumes
            .get_mut(&volume)
            .unwrap()
            .merge_all(pid, vec![(b"k".to_vec(), stray)]);
        c.wake();
        c.tick(secs(25.1));
        assert!(!c.volumes[&volume].data.contains_key(&pid), "dropped");
        for i in (0..3).filter(|i| *i != outsider) {
            let own = c.volumes[&c.members[&member(i)].volume].entry(pid, b"k");
            assert_eq!(own.and_then(|e| e.value.as_deref()), Some(&b"new"[..]));
        }
        assert_eq!(
            c.get(secs(25.1), &member(outsider), b"k"),
            Ok(Some(b"new".to_vec()))
        );
    }

    #[test]
    fn deletes_are_tombstones_that_win_over_older_values() {
        let mut c = boot(3, 2);
        c.set(secs(20.0), &member(0), b"a", b"1").unwrap();
        c.set(secs(20.0), &member(0), b"b", b"2").unwrap();
        assert_eq!(c.live_keys(), 2);
        let t = 23.0;
        let deleted = c.del(
            secs(t),
            &member(1),
            &[b"a".to_vec(), b"a".to_vec(), b"nope".to_vec()],
        );
        assert_eq!(
            deleted,
            Ok(1),
            "a key given twice counts once, a missing one not at all"
        );
        assert_eq!(c.get(secs(t), &member(1), b"a").unwrap(), None);
        assert_eq!(
            c.get(secs(t), &member(2), b"a").unwrap(),
            Some(b"1".to_vec()),
            "not visible yet"
        );
        assert_eq!(c.get(secs(t + 2.0), &member(2), b"a").unwrap(), None);
        let keys = [b"a".to_vec(), b"b".to_vec(), b"b".to_vec()];
        assert_eq!(c.exists(secs(t + 2.0), &member(0), &keys), Ok(2));
        assert_eq!(c.live_keys(), 1);
        let dbsizes: u64 = (0..3).map(|i| c.dbsize(&member(i)).unwrap()).sum();
        assert_eq!(dbsizes, 2, "b on its two replicas; tombstones are not keys");
        c.set(secs(t + 2.0), &member(2), b"a", b"3").unwrap();
        assert_eq!(
            c.get(secs(t + 4.0), &member(1), b"a").unwrap(),
            Some(b"3".to_vec())
        );
    }

    #[test]
    fn a_stopped_member_serves_nothing() {
        let mut c = boot(3, 2);
        c.kill(secs(20.0), &member(2));
        assert_eq!(c.set(secs(20.0), &member(2), b"k", b"v"), Err(NotServing));
        assert_eq!(c.get(secs(20.0), &member(2), b"k"), Err(NotServing));
        assert_eq!(c.get(secs(20.0), &member(9), b"k"), Err(NotServing));
        assert!(c.view(&member(2)).is_err());
    }

    #[test]
    fn a_view_lists_every_peer_with_its_address() {
        let mut c = boot(3, 2);
        c.kill(secs(20.0), &member(2));
        let v = c.view(&member(0)).unwrap();
        let peers: Vec<(&str, Option<&str>, bool)> = v
            .peers
            .iter()
            .map(|p| (p.node_id.as_str(), p.addr.as_deref(), p.myself))
            .collect();
        assert_eq!(
            peers,
            [
                ("0", Some("127.50.0.0"), true),
                ("1", Some("127.50.0.1"), false),
                ("2", Some("127.50.0.2"), false),
            ],
            "a crashed peer stays in the view until it is detected"
        );
        assert_eq!(v.active(), 3);
        run(&mut c, 20.1, 30.0);
        assert_eq!(c.view(&member(0)).unwrap().peers.len(), 2);
    }

    /// Ticks until the survivors hold every partition twice after `demo-3` drains.
    fn hand_off_ticks(keys: usize) -> u32 {
        let mut c = Cluster::new(
            Settings {
                copy_bytes_per_unit: 4096,
                gossip_delay_ms: (300, 300),
                ..settings()
            },
            7,
        );
        for i in 0..4 {
            c.start_member(secs(0.0), spec(i, 2));
        }
        run(&mut c, 0.0, 20.0);
        let big = vec![b'x'; 1024];
        for i in 0..keys {
            c.set(secs(20.0), &member(i % 4), &key(i), &big).unwrap();
        }
        run(&mut c, 20.1, 25.0);
        c.settings.copy_rate_per_sec = 16.0;
        c.drain(secs(25.0), &member(3));
        let mut ticks = 0;
        let mut t = 25.0;
        while !c.fully_replicated(2) {
            t += 0.1;
            ticks += 1;
            c.tick(secs(t));
            assert!(ticks < 10_000, "the hand-off never finished");
        }
        ticks
    }

    #[test]
    fn a_hand_off_takes_longer_the_more_data_moves() {
        let empty = hand_off_ticks(0);
        let loaded = hand_off_ticks(2000);
        // 2,000 KiB over 256 partitions: about 8 KiB each, so about three units a partition.
        assert!(
            empty >= 20,
            "the empty hand-off is measurable: {empty} ticks"
        );
        assert!(
            loaded >= 2 * empty,
            "empty: {empty} ticks, loaded: {loaded} ticks"
        );
    }

    #[test]
    fn copies_carry_the_data_and_drops_free_it() {
        let mut c = boot(3, 2);
        write_keys(&mut c, 20.0, 300, &[0]);
        run(&mut c, 20.1, 23.0);
        let held_keys =
            |c: &Cluster, i: usize| c.volumes[&c.members[&member(i)].volume].live_keys();
        let before: u64 = (0..3).map(|i| held_keys(&c, i)).sum();
        assert_eq!(before, 600, "every key on two volumes");
        c.start_member(secs(23.0), spec(3, 2));
        run(&mut c, 23.1, 60.0);
        assert!(held_keys(&c, 3) > 0, "the new member copied keys");
        let after: u64 = (0..4).map(|i| held_keys(&c, i)).sum();
        assert_eq!(after, 600, "old holders dropped what they handed off");
        assert_eq!(unreadable(&mut c, 60.0, 3, 300), Vec::<usize>::new());
    }

    /// Steady writes of fresh keys `*next..` at `rate` SET/s spread evenly over `through`,
    /// from `from` to `to` in 100 ms ticks, each tick followed by its writes; calls `each`
    /// after every tick's writes.
    fn steady(
        c: &mut Cluster,
        (from, to): (f64, f64),
        rate: f64,
        through: &[usize],
        next: &mut usize,
        mut each: impl FnMut(&mut Cluster, f64),
    ) {
        let per_tick = (rate / 10.0).round() as usize;
        let mut t = from;
        while t <= to {
            c.tick(secs(t));
            for _ in 0..per_tick {
                let m = member(through[*next % through.len()]);
                c.set(secs(t), &m, &key(*next), &value(*next)).unwrap();
                *next += 1;
            }
            // What a scrape between two ticks sees.
            each(c, t);
            t += 0.1;
        }
    }

    fn figure(c: &mut Cluster, t: f64, i: usize) -> MemberFigures {
        c.figures(secs(t), &member(i)).unwrap()
    }

    /// The cluster's ring-gap rate with `settings()`: n × R.
    fn gap_rate(c: &Cluster, n: usize) -> f64 {
        n as f64 * c.settings.ring_ops_per_sec
    }

    #[test]
    fn below_the_ring_gap_rate_no_write_gaps_and_no_repair_ticks() {
        let mut c = boot(5, 2);
        let repairs_before: Vec<u64> = (0..5)
            .map(|i| figure(&mut c, 20.0, i).ae_repair_ops_total)
            .collect();
        let rate = 0.5 * gap_rate(&c, 5);
        let (mut next, mut samples) = (0, 0u64);
        steady(
            &mut c,
            (20.1, 50.0),
            rate,
            &[0, 1, 2, 3, 4],
            &mut next,
            |c, t| {
                for i in 0..5 {
                    assert_eq!(figure(c, t, i).ring_ops, 0, "no gap at {t:.1} s on {i}");
                    samples += 1;
                }
            },
        );
        assert!(next >= 29_000, "{next} writes");
        assert!(samples >= 5 * 295, "{samples} samples");
        let repairs_after: Vec<u64> = (0..5)
            .map(|i| figure(&mut c, 50.0, i).ae_repair_ops_total)
            .collect();
        assert_eq!(
            repairs_after, repairs_before,
            "no repair from load below the gap rate"
        );
        run(&mut c, 50.1, 53.0);
        assert_eq!(unreadable(&mut c, 53.0, 0, next), Vec::<usize>::new());
    }

    #[test]
    fn above_the_ring_gap_rate_repairs_tick_on_every_member_in_every_settle_window() {
        let mut c = boot(5, 2);
        let rate = 1.5 * gap_rate(&c, 5);
        let mut last: Vec<(u64, f64)> = (0..5)
            .map(|i| (figure(&mut c, 20.0, i).ae_repair_ops_total, 20.0))
            .collect();
        // Longest time any member's repair counter stood still, and ring figures above 0 seen.
        let (mut longest_still, mut busy_rings, mut changes) = (0.0f64, [0u64; 5], 0u64);
        let mut next = 0;
        steady(
            &mut c,
            (20.1, 140.0),
            rate,
            &[0, 1, 2, 3, 4],
            &mut next,
            |c, t| {
                for i in 0..5 {
                    let f = figure(c, t, i);
                    if f.ring_ops > 0 {
                        busy_rings[i] += 1;
                    }
                    if f.ae_repair_ops_total != last[i].0 {
                        longest_still = longest_still.max(t - last[i].1);
                        last[i] = (f.ae_repair_ops_total, t);
                        changes += 1;
                    }
                }
            },
        );
        for (i, (_, at)) in last.iter().enumerate() {
            longest_still = longest_still.max(140.0 - at);
            assert!(busy_rings[i] > 0, "member {i}'s ring never gapped");
        }
        // The current gate's "every counter still for the 10 s settle window" never holds.
        assert!(
            longest_still < 10.0,
            "a counter stood still for {longest_still:.1} s"
        );
        assert!(
            changes > 5 * 12,
            "{changes} counter changes over 120 s on 5 members"
        );
        assert!(c.gapped_lost_total == 0);
        // Traffic stops: every ring drains to 0 and every key reads back.
        run(&mut c, 140.1, 143.0);
        for i in 0..5 {
            assert_eq!(figure(&mut c, 143.0, i).ring_ops, 0);
        }
        assert_eq!(unreadable(&mut c, 143.0, 0, next), Vec::<usize>::new());
    }

    /// Under load above the gap rate through all five, stop demo-4 either at once or once its
    /// ring reads 0 (its own traffic stopped); the keys the survivors cannot read back.
    fn remove_under_load(wait_for_empty_ring: bool) -> (Vec<usize>, BTreeSet<usize>) {
        let mut c = boot(5, 2);
        let rate = 1.5 * gap_rate(&c, 5);
        let mut next = 0;
        steady(
            &mut c,
            (20.1, 25.0),
            rate,
            &[0, 1, 2, 3, 4],
            &mut next,
            |_, _| {},
        );
        let mut t = 25.1;
        if wait_for_empty_ring {
            while figure(&mut c, t, 4).ring_ops > 0 {
                steady(&mut c, (t, t), rate, &[0, 1, 2, 3], &mut next, |_, _| {});
                t += 0.1;
            }
        }
        let gapped: BTreeSet<usize> = c.members[&member(4)]
            .gapped
            .iter()
            .map(|g| String::from_utf8_lossy(&g.key)[5..].parse().unwrap())
            .collect();
        assert_eq!(gapped.len() as u64, figure(&mut c, t, 4).ring_ops);
        c.terminate(secs(t), &member(4));
        run(&mut c, t + 0.1, t + 25.0);
        assert!(c.figures(secs(t + 25.0), &member(4)).is_none(), "it exited");
        assert_eq!(c.gapped_lost_total, gapped.len() as u64);
        assert_eq!(c.lost_partitions_total, 0, "no partition lost both copies");
        (unreadable(&mut c, t + 25.0, 0, next), gapped)
    }

    #[test]
    fn removing_a_member_whose_ring_gapped_loses_exactly_its_gapped_keys() {
        let (lost, gapped) = remove_under_load(false);
        assert!(!gapped.is_empty(), "its writes gapped");
        assert_eq!(lost.into_iter().collect::<BTreeSet<_>>(), gapped);
    }

    #[test]
    fn removing_a_member_once_its_ring_reads_0_loses_nothing() {
        let (lost, gapped) = remove_under_load(true);
        assert!(gapped.is_empty());
        assert_eq!(lost, Vec::<usize>::new());
    }

    #[test]
    fn a_gapped_write_reaches_every_owner_once_its_origins_traffic_stops() {
        let mut c = boot(5, 2);
        let burst = 1000;
        write_keys(&mut c, 20.0, burst, &[1]);
        let r = c.settings.ring_ops_per_sec as usize;
        let f = figure(&mut c, 20.0, 1);
        assert_eq!(
            f.ring_ops as usize,
            burst - r,
            "one second of R shipped, the rest gapped"
        );
        assert!(f.ring_bytes > f.ring_ops);
        // Anti-entropy takes gaps up in rounds: until the first one the ring shows them.
        run(&mut c, 20.1, 21.5);
        assert_eq!(figure(&mut c, 21.5, 1).ring_ops as usize, burst - r);
        run(&mut c, 21.6, 23.0);
        assert_eq!(figure(&mut c, 23.0, 1).ring_ops, 0, "drained");
        let repairs: u64 = (0..5)
            .map(|i| figure(&mut c, 23.0, i).ae_repair_ops_total)
            .sum();
        assert!(repairs >= (burst - r) as u64, "{repairs} repairs");
        let view: Vec<String> = c.members[&member(1)].view.keys().cloned().collect();
        let cands: Vec<&str> = view.iter().map(String::as_str).collect();
        let mut checked = 0;
        for i in 0..burst {
            let pid = partition_of(&key(i), c.settings.partitions);
            for owner in owners_of(&cands, 2, pid) {
                let v = &c.volumes[&c.members[&member(owner.parse().unwrap())].volume];
                assert_eq!(
                    v.entry(pid, &key(i)).and_then(|e| e.value.clone()),
                    Some(value(i))
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 2 * burst);
    }

    #[test]
    fn no_copy_carries_a_gapped_write_for_free() {
        let mut c = boot(3, 2);
        c.settings.ae_ops_per_sec = 0.0;
        write_keys(&mut c, 20.0, 1000, &[0]);
        let gapped = figure(&mut c, 20.0, 0).ring_ops;
        assert!(gapped > 0);
        // A joining member copies its partitions; the origin hands nothing off.
        c.start_member(secs(20.0), spec(3, 2));
        run(&mut c, 20.1, 60.0);
        assert_eq!(figure(&mut c, 60.0, 0).ring_ops, gapped, "still waiting");
        let on_others: usize = (1..4)
            .map(|m| {
                let v = &c.volumes[&c.members[&member(m)].volume];
                v.data
                    .values()
                    .flat_map(|d| d.entries.values())
                    .filter(|e| c.gapped_versions.contains(&e.version))
                    .count()
            })
            .sum();
        assert_eq!(on_others, 0);
        c.kill(secs(60.0), &member(0));
        run(&mut c, 60.1, 70.0);
        assert_eq!(unreadable(&mut c, 70.0, 1, 1000).len() as u64, gapped);
    }

    #[test]
    fn run_ids_are_40_hex_and_fixed_per_cluster_and_node() {
        let id = run_id("cluster-a", "0");
        assert_eq!(id.len(), 40);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(id, run_id("cluster-a", "0"));
        assert_ne!(id, run_id("cluster-a", "1"));
        assert_ne!(id, run_id("cluster-b", "0"));
        assert_ne!(run_id("a", "b0"), run_id("ab", "0"));
    }
}
