//! Deterministic simulation of the controller: the operator's own decision code (`decide`)
//! against a model world with data, gossip views, faults and users, over thousands of seeded
//! schedules. Every schedule replays exactly from its seed:
//!
//! ```sh
//! DST_SEED=1234 cargo test -p marekvs-core --test dst -- --nocapture   # one schedule, traced
//! DST_SCHEDULES=100000 cargo test -p marekvs-core --test dst --release  # more schedules
//! DST_THREADS=1 cargo test -p marekvs-core --test dst                    # one thread (default: one per core; same figures)
//! ```
//!
//! The world is modelled on marekvs 0.2 as its source behaves (ticks of 1 s):
//! - Placement: rendezvous hashing over the Active and Leaving members of each member's own
//!   view (a drained member still owns its partitions; Joining owns nothing). Views lag the
//!   truth by a per-member delay, and a stopped process stays in them for `DETECT_TICKS` (the
//!   failure detector): partitions move only once the views drop it.
//! - Writes: a client write commits on the member it was sent to (any member, owner or not)
//!   and is acknowledged at once. Its origin ships it through its replication ring to the
//!   partition's other owners (by its view): up to `RING_RATE` a tick, the rest are ring gaps;
//!   each shipped write may be silently skipped for one peer (`SKIP_CHANCE`), and an owner
//!   that is down gets nothing. Received writes are never relayed. A gapped or skipped write
//!   reaches that owner only by anti-entropy.
//! - Anti-entropy, per member: a round every 5-7 ticks (seeded jitter per member),
//!   `marekvs_ae_rounds_total` bumped as it begins; for every partition it owns, one exchange
//!   (both ways) with one random other owner; rounds numbered by a multiple of 3 also offer
//!   every partition it holds but does not own to one random owner (push only). Exchanges are
//!   delivered the next tick if both ends still run, and may be dropped (`AE_DROP`); an owner
//!   that is down is skipped. Each record received moves the receiver's repair counter.
//! - Bootstrap: a member that would own a partition asks its first other owner by its own view
//!   (none: not asked) for a whole copy, only into a locally empty partition and never on a
//!   returning member (its volume carries the heartbeat a node writes while Active or Leaving),
//!   plus the copies its last join left unfinished (persisted on the volume until Active). The
//!   donor answers only when running and an owner by its own view, with what it holds,
//!   possibly nothing, and the partition is done; `COPY_RATE` answers a tick, each moving the
//!   bootstrap counter. A request may get no answer anyway (`ASK_LOST`); one not answered is
//!   asked again every `ASK_AGAIN_TICKS` while the partition is still empty, and an Active
//!   member keeps one that anti-entropy filled meanwhile in its join-gate gauge (never asked
//!   again) until ownership moves or the process restarts, so a ready member's gauge can stay
//!   above 0 for good. A started node is Joining for at least 2 ticks, until nothing is left
//!   to ask; its RESP port (client writes, views read over RESP) opens once Active.
//! - SIGTERM (pod deleted): Leaving, 2 ticks, then the wait on the ring backlog (nothing is
//!   pending at a tick's end: shipped writes are on their peers, the wait is blind to gaps and
//!   skips), exit. Whatever only it held dies with it unless its volume comes back.
//! - Non-owners drop a partition's base once every owner holds it on a volume not being
//!   deleted (the adversarial case), never a write they hold beyond it (a real node never
//!   evicts).
//! - Metrics: gauges (members in view, under-replicated, join-gate pending, ring occupancy)
//!   refreshed every 2 ticks, 0 before the first refresh after a start; counters (rounds,
//!   RESP input bytes, write commands, repairs, bootstraps) reset on restart; uptime.
//!   `marekvs_ring_ops` is occupancy: every commit enters the ring, nothing leaves it.
//!
//! Clients: `CLIENTS` pooled clients share the write rate (none, half, once, 1.5 and 3 times
//! the ring-gap rate `nodes x RING_RATE`, redrawn during the schedule); each opens its
//! connection on a member the client Service selects (ready, not deleted, not labelled
//! `client-traffic: off`, the label `Action::SetClientTraffic` sets) and stays pinned to it:
//! after its label turns off it keeps writing until it stops by itself (an idle one closes at
//! once). A rogue client dials one member's pod address whatever its label. Reads through the
//! Service (the autoscaler's load) are RESP input too. A new connection never opens on a pod
//! being deleted (a client racing the operator's deletion is beyond what it can see). Each
//! pass the operator reads every member's view over RESP, bytes it counts as its own (unknown
//! when the read is cut off); the shell's ledger (`marekvs_core::input`, in the operator's
//! memory, lost when it crashes) takes them off the node's input counter and hands the core
//! each member's client input (`MemberObs::client_input`).
//!
//! Faults: the write rate moves, a rogue client writes to one member; the operator crashes
//! (after a random prefix of its actions) and reads a stale status (its write then conflicts,
//! as the shell's status write is conditional on the resourceVersion read); status writes
//! fail; members crash and restart (a restarted node is no longer drained, its counters back
//! at 0); scrapes, single figures and views time out; gossip splits in two halves, or one
//! member's view holds a stranger in place of a member (the right count); drains hang; users
//! delete pods, delete a pod with its PVC, ask for a fresh volume of a member (annotate its
//! pod), and edit the spec (size, pod template, volume class, pause, hibernation, fenced
//! members).
//!
//! Invariants, after every step: no partition loses its last copy among the members' volumes;
//! no acknowledged write is lost: every write is on the volume of a member or of a pod (a
//! volume the operator deletes, or whose member it removes, must hold no write found nowhere
//! else; a stale volume's are counted apart: the stale-volume rule discards them, a known
//! gap; so are those of volumes a user discards); the operator never deletes a removal
//! victim's pod while the victim received client input in the interval its last scrape covered;
//! at most one member is disrupted by the operator (drained, or its pod deleted by it), but
//! for a whole-cluster upgrade that has flushed and stops every member (a third of the
//! schedules draw `upgrade.strategy: WholeCluster`; every other spec change is a new image,
//! whose release each member reports), and once it starts them no pod of one image runs
//! beside one of another; a
//! removal never leaves fewer than replicationFactor + 1 members, and none starts with
//! replicationFactor 1; a PVC is deleted only when every partition on it is held by another
//! member's volume that can serve it again (a running pod's, or one not stale: a stale volume
//! is never mounted again, so a removal victim's kept stale volume is no copy); in a mass failure (replicationFactor or more members down,
//! `mass_failure`) the operator only re-creates pods on their own volumes; no drain, pod or
//! volume deletion, and no new removal or restart, while the ready members' views disagree by
//! identity or a suspected partition is reported; no pod is ever (re)created on a volume away
//! from the cluster longer than the stale-volume grace (the absence as the operator recorded
//! it on the volume, `stale`): a wake from hibernation included; no pod or PVC is created for
//! a fenced member, nor while hibernated; no disruptive step (drain, pod or volume deletion
//! other than stopping a fenced or hibernated pod, a new removal or restart) while a member is
//! fenced; a scale-up adds members only while those joining stay within its batch (the larger
//! of `spec.scale_up_batch`, drawn small here, replicationFactor + 1 and the members serving).
//! Once faults stop, the cluster converges to the spec (with replicationFactor 1 a
//! scale-down is refused, `SingleCopy`: the user keeps the members).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use marekvs_core::autoscale::{LoadMemory, Policy, ScaleMemory};
use marekvs_core::input;
use marekvs_core::password::{PasswordPlan, PasswordRecord, PasswordState, PasswordTaken};
use marekvs_core::recreate::{creations_before_scrapes, still_to_do};
use marekvs_core::rng::SplitMix64;
use marekvs_core::sizing::unscraped_target;
use marekvs_core::stale::{AbsenceChange, is_stale};
use marekvs_core::transitions::{Reported, Reporting, transition_notes};
use marekvs_core::volumes::{StorageWish, Volume};
use marekvs_core::*;

const PARTITIONS: usize = 32;
/// How often a pod made cannot start at once (unscheduled, its image not pulled): it starts
/// 3 to 62 ticks later, unless deleted first.
const UNSTARTABLE: f64 = 0.05;
/// An Active member's bootstrap a donor did not answer is asked again after this many ticks
/// (the node's first backoff), only while the partition is still empty on its volume.
const ASK_AGAIN_TICKS: u64 = 5;
/// The chance that such a request gets no answer from a donor that could give one: sent while
/// the bulk connection to it is down (dropped without a word), or taken for a duplicate of a
/// stream it served lately. Not measured one by one; on real members one fresh-volume
/// replacement left 67 requests unanswered for minutes.
const ASK_LOST: f64 = 0.1;
/// Partitions one member bootstraps per tick (a tick is a second).
const COPY_RATE: usize = 6;
/// Writes one member ships through its replication ring per tick (R); the cluster's ring-gap
/// rate is `n x R` over `n` serving members.
const RING_RATE: u64 = 20;
/// Writes a member's ring holds not yet shipped (its backlog behind a full send window);
/// past it the oldest are evicted unshipped (ring gaps). Measured on 0.2: a member that took
/// 50,000 SETs of 1 KiB in 6.5 s still shipped 40 s later, its 4 MiB window full.
const RING_BACKLOG: u64 = 600;
/// Chance that an exchange of a member whose ring still ships is dropped (its queue to the
/// peer full behind the same blocked connection).
const SHIPPING_AE_DROP: f64 = 0.5;
/// Chance a tick that a member's ring, while it ships, stalls for good: a peer's
/// acknowledgement dropped on a full queue leaves the window full, and nothing more is sent
/// until a connection drops (a process on either end exits or starts). Measured once on real
/// members (4.2 MB held for 10 minutes); its exchanges then pass, nothing else on the line.
/// (A window that only pauses, as measured in the RF 3 trap, is not modelled: here a ring
/// ships at its rate or stalls for good.)
const WEDGE_CHANCE: f64 = 0.01;
/// Bytes of unacknowledged shipments a sender keeps in flight to one peer (4 MiB).
const REPL_WINDOW_BYTES: u64 = 4 << 20;
/// Ticks an exiting member waits for its ring backlog after the first `EXIT_TICKS` (7 s).
const RING_WAIT_TICKS: u64 = 7;
/// Chance that one shipped write batch is silently skipped for one peer (measured on 0.2:
/// 9 of 2,000 SETs at idle reached the other node only by anti-entropy).
const SKIP_CHANCE: f64 = 0.005;
/// Anti-entropy rounds begin every `AE_MIN + 0..AE_JITTER` ticks (5 s + 0-1999 ms).
const AE_MIN: u64 = 5;
const AE_JITTER: u64 = 3;
/// Chance that one anti-entropy exchange is dropped (a full send queue: silent).
const AE_DROP: f64 = 0.002;
/// Messages one member's round puts on its queue to one peer before the queue is full and the
/// rest are dropped, silently. On the node an exchange is its root and one message per bucket
/// that differs, each put on the connection's 4,096-message queue without waiting, which
/// holds three times the roots a round sends one peer (1,365 of 4,096 partitions at 3
/// members, RF 2); here 3 x 16 of the 32 partitions. A batch stands for a differing bucket.
const AE_QUEUE: u64 = 48;
/// Records a partition's base counts for in a repair counter.
const BASE_RECORDS: u64 = 50;
/// Ticks a stopped process stays in the others' views (the failure detector).
const DETECT_TICKS: u64 = 4;
/// Ticks from SIGTERM to exit (2 s, then the ring wait: nothing pending at a tick's end).
const EXIT_TICKS: u64 = 2;
/// Ticks a started node sleeps before its join gate may let it turn Active.
const JOIN_TICKS: u64 = 2;
/// Ticks between two refreshes of the gauges.
const GAUGE_TICKS: u64 = 2;
/// The ring's capacity (entries): occupancy climbs to it and stays.
const RING_CAP: u64 = 262_144;
/// Pooled clients sharing the write rate.
const CLIENTS: usize = 4;
/// Chance a tick that a pooled client pinned to a member no longer selected stops by itself.
const CLIENT_STOP: f64 = 0.1;
/// RESP bytes of one write command, one read command, and the operator's view read.
const WRITE_BYTES: u64 = 48;
const READ_BYTES: u64 = 24;
const VIEW_READ_BYTES: u64 = 58;
const FAULT_TICKS: u64 = 150;
const CONVERGE_TICKS: u64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Joining,
    Active,
    Leaving,
}

/// The gauges as the stats task last refreshed them.
#[derive(Clone, Copy, Debug, Default)]
struct Gauges {
    view_members: u64,
    underreplicated: u64,
    join_pending: u64,
    ring_ops: u64,
    /// `marekvs_repl_inflight_bytes`: a full window per connected peer while it ships.
    inflight: u64,
}

#[derive(Clone, Debug)]
struct Pod {
    version: u32,
    drained: bool,
    /// A user annotated it to ask for a fresh volume.
    replace_volume: bool,
    /// A user annotated it to ask for a restart on its own volume.
    restart: bool,
    /// The tick it was created at.
    created_at: u64,
    phase: Phase,
    /// Deleted at this tick (SIGTERM); exits `EXIT_TICKS` later.
    deleted_at: Option<u64>,
    crashed_until: Option<u64>,
    /// Its container has started at least once (what the kubelet reports). A pod made
    /// unstartable (unscheduled, its image not pulled) waits, `crashed_until` its start.
    ever_started: bool,
    /// When its process last stopped (a crash), for the failure detector.
    stopped_at: u64,
    /// When its process last started.
    started_at: u64,
    /// Started on a volume it served from before (the node's heartbeat `alive:last` is on
    /// it): it bootstraps none of its empty partitions.
    returning: bool,
    /// Bootstraps left unfinished on its volume by an earlier process (the node's persisted
    /// join-pending set): asked again even into a partition that is no longer empty.
    resume: BTreeSet<usize>,
    /// Bootstraps a donor answered in this process (even empty-handed): never asked again.
    done: BTreeSet<usize>,
    /// Bootstraps it asked for that no donor answered, with the tick it may ask again (the
    /// node's pending set).
    asked: BTreeMap<usize, u64>,
    /// Counters, reset when the process restarts.
    boots: u64,
    repairs: u64,
    /// `marekvs_commands_total` (reads and writes) and its write commands.
    commands: u64,
    writes: u64,
    /// `marekvs_net_input_bytes_total`: clients' bytes and the operator's own.
    input_bytes: u64,
    /// `marekvs_ae_rounds_total` (the number of its last round) and when the next begins.
    rounds: u64,
    next_round: u64,
    /// Ring occupancy: every commit enters, nothing leaves.
    ring: u64,
    /// Its client writes not shipped yet, oldest first: (partition, writes).
    unshipped: VecDeque<(usize, u64)>,
    /// `marekvs_repl_ops_sent_total`: write copies shipped to peers.
    sent: u64,
    gauges: Gauges,
    /// The last tick a client (not the operator) sent it a command, in this process.
    last_input: Option<u64>,
    /// Labelled `marekvs.io/client-traffic: "off"`: the client Service does not select it.
    client_off: bool,
    /// Its ring's window is stuck full: nothing ships, nothing is acknowledged.
    wedged: bool,
    /// Its ring evicted writes it had not shipped since it started: on the node a ring gaps
    /// only past its cap, so its occupancy gauge reads the cap from then on.
    gapped: bool,
    /// `marekvs_repl_ops_applied_total`: writes shipped to it by others and applied.
    applied: u64,
    /// The node it was scheduled to (one of `NODES`).
    node: u32,
    /// Labelled `marekvs.io/eviction: allowed`: the PDB no longer protects it.
    eviction_allowed: bool,
    /// The password its process takes: the Secret's when it started, then the last set live.
    pass: u32,
    /// The member image it runs (`World::image` when it was made): its release is
    /// `0.<image + 2>.0`.
    image: u32,
}

impl Pod {
    fn new(version: u32, t: u64) -> Pod {
        Pod {
            version,
            drained: false,
            replace_volume: false,
            restart: false,
            created_at: t,
            phase: Phase::Joining,
            deleted_at: None,
            crashed_until: None,
            ever_started: true,
            stopped_at: 0,
            started_at: t,
            returning: false,
            resume: BTreeSet::new(),
            done: BTreeSet::new(),
            asked: BTreeMap::new(),
            boots: 0,
            repairs: 0,
            commands: 0,
            writes: 0,
            input_bytes: 0,
            rounds: 0,
            next_round: t,
            ring: 0,
            unshipped: VecDeque::new(),
            sent: 0,
            gauges: Gauges::default(),
            last_input: None,
            client_off: false,
            wedged: false,
            gapped: false,
            applied: 0,
            node: 0,
            eviction_allowed: false,
            pass: 0,
            image: 0,
        }
    }

    fn running(&self) -> bool {
        self.crashed_until.is_none()
    }

    /// Its process (re)starts at `t`: Joining, undrained, counters at 0.
    fn start(&mut self, t: u64, vol: Option<&Vol>, rng: &mut SplitMix64) {
        self.crashed_until = None;
        self.ever_started = true;
        self.phase = Phase::Joining;
        self.drained = false;
        self.started_at = t;
        self.returning = vol.is_some_and(|v| v.heartbeat);
        self.resume = vol.map(|v| v.join_pending.clone()).unwrap_or_default();
        self.done.clear();
        self.asked.clear();
        self.boots = 0;
        self.repairs = 0;
        self.commands = 0;
        self.writes = 0;
        self.input_bytes = 0;
        self.rounds = 0;
        self.next_round = t + AE_MIN + rng.below(AE_JITTER);
        self.ring = 0;
        self.unshipped.clear();
        self.sent = 0;
        self.gauges = Gauges::default();
        self.last_input = None;
        self.wedged = false;
        self.gapped = false;
        self.applied = 0;
    }

    /// RESP port open: client writes and view reads.
    fn resp_open(&self) -> bool {
        self.running() && self.phase != Phase::Joining
    }
}

#[derive(Clone, Debug)]
struct Vol {
    uid: u64,
    /// The partitions' base (everything before the writes still tracked one by one).
    data: Vec<bool>,
    /// What its spec requests, in GiB, and its storage class.
    size_gi: u64,
    class: u8,
    deleting: bool,
    /// Since when its member has been away (the PVC annotation the shell writes), in ms.
    absent_since: Option<Millis>,
    /// When a member first served from it, in ms (the shell's `served-since` annotation).
    served_since: Option<Millis>,
    /// A node served from it (Active or Leaving at a refresh of its stats: the heartbeat
    /// `alive:last` it writes then), so a node started on it is a returning member.
    heartbeat: bool,
    /// The bootstraps of a join in progress on it (the node persists them; cleared once the
    /// node is Active).
    join_pending: BTreeSet<usize>,
    /// A user discards it (a careful replacement): what only it holds is the user's choice.
    user_discarded: bool,
    /// Pods made for it (the shell's `pods-made` count, counted before each creation).
    pods_made: u32,
}

impl Vol {
    fn volume(&self) -> Volume {
        Volume {
            requested: Some(format!("{}Gi", self.size_gi)),
            class_name: Some(format!("class-{}", self.class)),
            terminating: self.deleting,
        }
    }
}

/// Acknowledged writes of one origin, tick and partition, held by the same volumes (a bit
/// per ordinal), tracked until every volume holding the partition's base holds them (then
/// they are part of the base).
#[derive(Clone, Copy, Debug)]
struct Batch {
    n: u64,
    holders: u64,
}

fn bit(o: u32) -> u64 {
    assert!(o < 64, "ordinal {o}");
    1 << o
}

/// One anti-entropy exchange in flight: `from` probes `to` for partition `p`; both ways for an
/// owner's probe, push only for an offer.
#[derive(Clone, Copy, Debug)]
struct Exchange {
    from: u32,
    to: u32,
    p: usize,
    both: bool,
    /// Differing batches it carries: those past its queue's room were dropped.
    room: u64,
}

/// A rogue client dialling one member's pod address.
#[derive(Clone, Copy, Debug)]
struct Rogue {
    member: u32,
    until: u64,
    rate: u64,
    /// Its connection opened (on a pod not being deleted).
    open: bool,
}

/// `spec.storage` as the user last set it (with `replaceVolumes`).
#[derive(Clone, Copy, Debug)]
struct Storage {
    size_gi: u64,
    class: u8,
}

impl Storage {
    fn wish(&self) -> StorageWish {
        StorageWish {
            size: format!("{}Gi", self.size_gi),
            class_name: Some(format!("class-{}", self.class)),
        }
    }

    /// The volume is what the spec asks: in place, and grown to the size asked.
    fn satisfied_by(&self, v: &Vol) -> bool {
        self.wish().fits_in_place(&v.volume()) && v.size_gi >= self.size_gi
    }
}

struct World {
    t: u64,
    rf: usize,
    /// The bytes the operator sent to each member's RESP port in its last read (`None`: cut
    /// off midway).
    own_sent: BTreeMap<u32, Option<u64>>,
    version: u32,
    /// A version whose pods the API server refuses (a spec naming a ServiceAccount that does
    /// not exist, say): no pod of it is created, and a dry run of one is refused. The user's
    /// next change (the next version) fixes it.
    refused_version: Option<u32>,
    /// The member image the spec names: every other spec change (odd versions) is a new one.
    image: u32,
    /// A whole-cluster upgrade is recorded: new pods start with their client traffic off.
    new_pods_off: bool,
    /// A whole-cluster upgrade has stopped, or is starting, every member (recorded).
    whole_down: bool,
    /// It is starting them: every pod left is one it made.
    whole_starting: bool,
    /// The last dry run of each member's new pod: the version asked about, whether it was
    /// admitted, and the tick it was asked at (`Action::CheckPod`; the shell keeps answers per template hash).
    admissions: BTreeMap<u32, (u32, bool, u64)>,
    pods: BTreeMap<u32, Pod>,
    vols: BTreeMap<u32, Vol>,
    next_uid: u64,
    /// Truth of the gossip (members in views and their phase), last ticks first.
    history: VecDeque<BTreeMap<u32, Phase>>,
    /// Processes that exited: in views until the failure detector drops them.
    exited: BTreeMap<u32, (u64, Phase)>,
    view_lag: BTreeMap<u32, usize>,
    scrape_hang_until: BTreeMap<u32, u64>,
    drain_hang_until: BTreeMap<u32, u64>,
    born: bool,
    /// Gossip split in two until a tick: each member sees only its own side.
    split: Option<(u64, BTreeSet<u32>)>,
    /// A member's view holds a stranger in place of one member (the same count) until a tick.
    stranger_until: BTreeMap<u32, u64>,
    /// Members whose pod the operator deleted and that have no pod yet.
    op_deleted: BTreeSet<u32>,
    /// Pods the operator deleted as never started (each checked to hold nothing).
    unstarted_deleted: u64,
    storage: Storage,
    /// `spec.storage.staleVolumeGraceSeconds`, in ms.
    stale_grace_ms: Millis,
    /// Look-alikes: pods a user made with a member's name and the cluster's labels that the
    /// cluster does not control, by ordinal, until the tick the user deletes them.
    look_alikes: BTreeMap<u32, u64>,
    /// Client writes a tick, shared by the pooled clients.
    write_rate: u64,
    /// The member each pooled client's connection is pinned to.
    clients: [Option<u32>; CLIENTS],
    rogue: Option<Rogue>,
    /// Writes not yet part of their partition's base, by partition.
    batches: Vec<Vec<Batch>>,
    /// Anti-entropy exchanges sent this tick, delivered the next.
    exchanges: Vec<Exchange>,
    /// The broken variants: anti-entropy rounds that deliver nothing, client input not counted.
    broken: Broken,
    rng: SplitMix64,
    load: LoadCounts,
    trace: bool,
    /// Nodes being drained (cordoned), each until the tick it is uncordoned. A drain evicts a
    /// pod on it only where the PDB lets it: labelled `marekvs.io/eviction: allowed`.
    draining: BTreeMap<u32, u64>,
    /// Apart from the schedule's stream, so that drains leave its other draws as they were.
    drain_rng: SplitMix64,
    /// Pods a drain evicted.
    evictions: u64,
    /// The password's Secret, as a version: a user changes it (`pass_rng`).
    secret: u32,
    /// The operator's record of its members' passwords (`<cluster>-password-applied`): the
    /// settled one and the values it began to set since, newest first.
    settled: Option<u32>,
    since: Vec<u32>,
    /// Apart from the schedule's stream, as `drain_rng`.
    pass_rng: SplitMix64,
}

/// The nodes of the world, pods spread over them by ordinal.
const NODES: u32 = 3;

fn weight(p: usize, o: u32) -> u64 {
    let mut r = SplitMix64((p as u64) << 32 | u64::from(o));
    r.next_u64()
}

/// Placement candidates of a view: its Active and Leaving members.
fn candidates(view: &BTreeMap<u32, Phase>) -> BTreeSet<u32> {
    view.iter()
        .filter(|(_, ph)| **ph != Phase::Joining)
        .map(|(o, _)| *o)
        .collect()
}

impl World {
    fn new(rf: usize, stale_grace_ms: Millis, seed: u64, trace: bool) -> World {
        World {
            t: 0,
            rf,
            version: 1,
            refused_version: None,
            image: 0,
            new_pods_off: false,
            whole_down: false,
            whole_starting: false,
            admissions: BTreeMap::new(),
            pods: BTreeMap::new(),
            vols: BTreeMap::new(),
            next_uid: 1,
            own_sent: BTreeMap::new(),
            history: VecDeque::new(),
            exited: BTreeMap::new(),
            view_lag: BTreeMap::new(),
            scrape_hang_until: BTreeMap::new(),
            drain_hang_until: BTreeMap::new(),
            born: false,
            split: None,
            stranger_until: BTreeMap::new(),
            op_deleted: BTreeSet::new(),
            unstarted_deleted: 0,
            storage: Storage {
                size_gi: 4,
                class: 0,
            },
            stale_grace_ms,
            look_alikes: BTreeMap::new(),
            write_rate: 0,
            clients: [None; CLIENTS],
            rogue: None,
            batches: vec![Vec::new(); PARTITIONS],
            exchanges: Vec::new(),
            broken: Broken::None,
            rng: SplitMix64(seed ^ 0x776f_726c_6421),
            load: LoadCounts::default(),
            trace,
            draining: BTreeMap::new(),
            drain_rng: SplitMix64(seed ^ 0x6472_6169_6e21),
            evictions: 0,
            secret: 1,
            settled: None,
            since: Vec::new(),
            pass_rng: SplitMix64(seed ^ 0x7061_7373_776f),
        }
    }

    /// The recorded passwords other than the Secret's, in the order the shell tries them.
    fn fallbacks(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for p in self.since.iter().chain(&self.settled) {
            if *p != self.secret && !out.contains(p) {
                out.push(*p);
            }
        }
        out
    }

    /// Where the record stands against the Secret's password (`Credentials::record`).
    fn password_record(&self) -> PasswordRecord {
        match self.settled {
            None if self.since.is_empty() => PasswordRecord::Missing,
            Some(s) if s == self.secret && self.since.is_empty() => PasswordRecord::Current,
            _ => PasswordRecord::Older {
                listed: self.since.contains(&self.secret) || self.settled == Some(self.secret),
            },
        }
    }

    /// Which password member `o`'s RESP port takes of those the operator tries.
    fn password_taken(&self, o: u32) -> PasswordTaken {
        match self.pods.get(&o).map(|p| p.pass) {
            Some(p) if p == self.secret => PasswordTaken::Secret,
            Some(p) if self.fallbacks().contains(&p) => PasswordTaken::Recorded,
            _ => PasswordTaken::Neither,
        }
    }

    /// Carries out a pass's password plan as the shell does: the record first, then the
    /// Secret's password set live on each member named that still takes a recorded one.
    fn carry_out_password(&mut self, plan: &PasswordPlan, counts: &mut Counts) {
        if plan.record {
            if self.settled.is_some() && self.settled != Some(self.secret) {
                counts.rotations_recorded += 1;
            }
            self.settled = Some(self.secret);
            self.since.clear();
        } else if plan.remember {
            self.since.retain(|p| *p != self.secret);
            self.since.insert(0, self.secret);
            self.since.truncate(16);
            counts.passwords_remembered += 1;
        }
        let fallbacks = self.fallbacks();
        for o in &plan.set_on {
            let secret = self.secret;
            if let Some(p) = self
                .pods
                .get_mut(o)
                .filter(|p| p.resp_open() && fallbacks.contains(&p.pass))
            {
                p.pass = secret;
                counts.passwords_set += 1;
            }
        }
    }

    /// The node the scheduler puts a new pod of `o` on: its own by ordinal, else the next
    /// one not being drained (a cordoned node takes no new pod).
    fn schedule(&self, o: u32) -> u32 {
        (0..NODES)
            .map(|i| (o + i) % NODES)
            .find(|n| !self.draining.contains_key(n))
            .unwrap_or(o % NODES)
    }

    /// Drains: uncordon the nodes whose maintenance is over; the drain's retried evictions
    /// take the pods on a node being drained that the PDB lets go. Returns the pods evicted.
    fn drain_nodes(&mut self, members: &BTreeSet<u32>) -> Vec<u32> {
        let t = self.t;
        self.draining.retain(|_, until| t < *until);
        let evict: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.deleted_at.is_none() && p.eviction_allowed && self.draining.contains_key(&p.node)
            })
            .map(|(o, _)| *o)
            .collect();
        // `kubectl drain` asks again every 5 s: about every other tick here.
        let evict: Vec<u32> = evict
            .into_iter()
            .filter(|_| self.drain_rng.chance(0.5))
            .collect();
        for o in &evict {
            self.apply(Action::DeletePod(*o), members)
                .expect("a pod deletion is always allowed");
            self.evictions += 1;
        }
        evict
    }

    /// Members in the gossip now: running processes, and stopped ones the failure detector
    /// has not dropped yet (as last seen).
    fn truth(&self) -> BTreeMap<u32, Phase> {
        let t = self.t;
        let mut v: BTreeMap<u32, Phase> = self
            .exited
            .iter()
            .filter(|(_, (at, _))| t < at + DETECT_TICKS)
            .map(|(o, (_, ph))| (*o, *ph))
            .collect();
        for (o, p) in &self.pods {
            // Running, or stopped lately: in the gossip as last seen.
            if p.running() || t < p.stopped_at + DETECT_TICKS {
                v.insert(*o, p.phase);
            } else {
                v.remove(o);
            }
        }
        v
    }

    fn owners(&self, p: usize, candidates: &BTreeSet<u32>) -> Vec<u32> {
        let mut c: Vec<u32> = candidates.iter().copied().collect();
        c.sort_by_key(|o| std::cmp::Reverse(weight(p, *o)));
        c.truncate(self.rf);
        c
    }

    fn active(&self) -> BTreeSet<u32> {
        self.pods
            .iter()
            .filter(|(_, p)| p.running() && p.phase == Phase::Active)
            .map(|(o, _)| *o)
            .collect()
    }

    fn running(&self, o: u32) -> bool {
        self.pods.get(&o).is_some_and(Pod::running)
    }

    fn holds(&self, o: u32, p: usize) -> bool {
        self.vols.get(&o).is_some_and(|v| v.data[p])
    }

    /// The member's volume holds anything of partition `p` (its base or a write).
    fn has_local(&self, o: u32, p: usize) -> bool {
        self.holds(o, p) || self.batches[p].iter().any(|b| b.holders & bit(o) != 0)
    }

    /// Partitions member `o` owns (or would own, joining) by its own view.
    fn wants(&self, o: u32) -> Vec<usize> {
        let mut cands = candidates(&self.view(o));
        cands.insert(o);
        (0..PARTITIONS)
            .filter(|p| self.owners(*p, &cands).contains(&o))
            .collect()
    }

    /// Partitions member `o` would ask a bootstrap of: wanted, not answered yet in this
    /// process, and locally empty unless it is returning, or left unfinished by its last join;
    /// one with no other owner by its view is not asked (there is no one to ask).
    fn pending(&self, o: u32) -> Vec<usize> {
        let Some(pod) = self.pods.get(&o).filter(|_| self.born) else {
            return vec![];
        };
        self.wants(o)
            .into_iter()
            .filter(|p| !pod.done.contains(p))
            .filter(|p| (!pod.returning && !self.has_local(o, *p)) || pod.resume.contains(p))
            .filter(|p| self.first_other_owner(o, *p).is_some())
            .collect()
    }

    /// The first owner of `p` other than `o` by `o`'s own view (itself a candidate): whom it
    /// asks for a bootstrap.
    fn first_other_owner(&self, o: u32, p: usize) -> Option<u32> {
        let mut mine = candidates(&self.view(o));
        mine.insert(o);
        self.owners(p, &mine).into_iter().find(|s| *s != o)
    }

    fn step(&mut self) {
        self.t += 1;
        let t = self.t;
        self.look_alikes.retain(|_, until| t < *until);
        self.processes();
        self.deliver_exchanges();
        // Data is born once rf members are Active: each partition on its owners.
        let active = self.active();
        if !self.born && active.len() >= self.rf {
            for p in 0..PARTITIONS {
                for o in self.owners(p, &active) {
                    self.vols.get_mut(&o).unwrap().data[p] = true;
                }
            }
            self.born = true;
        }
        self.bootstrap();
        // Joining members turn Active after their sleep, once their bootstraps are done.
        let joined: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.running() && p.phase == Phase::Joining && p.deleted_at.is_none())
            .filter(|(_, p)| t >= p.started_at + JOIN_TICKS && p.asked.is_empty())
            .map(|(o, _)| *o)
            .filter(|o| self.pending(*o).is_empty())
            .collect();
        for o in joined {
            let pod = self.pods.get_mut(&o).unwrap();
            pod.phase = Phase::Active;
            pod.resume.clear();
            if let Some(v) = self.vols.get_mut(&o) {
                v.join_pending.clear();
            }
        }
        self.drop_copies();
        self.take_writes();
        self.ship();
        self.anti_entropy();
        self.fold();
        // Gossip: each member sees the truth of a few ticks ago.
        self.history.push_front(self.truth());
        self.history.truncate(6);
        self.refresh_gauges();
    }

    /// Processes: exits after SIGTERM, restarts after a crash.
    fn processes(&mut self) {
        let t = self.t;
        let mut gone = Vec::new();
        for (o, p) in self.pods.iter_mut() {
            if let Some(d) = p.deleted_at {
                p.phase = Phase::Leaving;
                // It waits for its ring backlog, at most `RING_WAIT_TICKS`; what is left goes
                // with the process.
                if t >= d + EXIT_TICKS
                    && (p.unshipped.is_empty() || t >= d + EXIT_TICKS + RING_WAIT_TICKS)
                {
                    gone.push(*o);
                }
            }
        }
        for o in gone.iter().copied() {
            let p = self.pods.remove(&o).unwrap();
            self.load.exited_unshipped += p.unshipped.iter().map(|(_, n)| n).sum::<u64>();
            self.exited.insert(o, (t, p.phase));
            if self.vols.get(&o).is_some_and(|v| v.deleting) {
                let discarded = self.vols[&o].user_discarded;
                if discarded {
                    self.load.user_writes_discarded += self.drop_unique(o, None);
                }
                self.forget_volume(o);
                self.vols.remove(&o);
            }
        }
        let restarts: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.crashed_until.is_some_and(|u| t >= u))
            .map(|(o, _)| *o)
            .collect();
        // A process that exits or starts drops its connections, and its peers' windows to it
        // start over: a stalled one is freed (every one, for simplicity).
        if !gone.is_empty() || !restarts.is_empty() {
            self.pods.values_mut().for_each(|p| p.wedged = false);
        }
        for o in restarts {
            let p = self.pods.get_mut(&o).unwrap();
            p.start(t, self.vols.get(&o), &mut self.rng);
            // Its env names the Secret's key: read as the container starts.
            p.pass = self.secret;
        }
    }

    /// Bootstrap: a member asks the first other owner by its own view for each partition it
    /// would own and holds nothing of (unless returning), or whose copy its last join left
    /// unfinished. A donor that answers streams what it holds, possibly nothing, and the
    /// partition is done; one that does not is asked again `ASK_AGAIN_TICKS` later while the
    /// partition is still to ask. Joining and Active members alike (`marekvs-repl/src/lib.rs`).
    fn bootstrap(&mut self) {
        let copiers: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.running() && p.deleted_at.is_none() && p.phase != Phase::Leaving)
            .map(|(o, _)| *o)
            .collect();
        for o in copiers {
            // Ownership moved away: the node prunes what it no longer would own.
            let wants: BTreeSet<usize> = self.wants(o).into_iter().collect();
            self.pods
                .get_mut(&o)
                .unwrap()
                .asked
                .retain(|p, _| wants.contains(p));
            // A joining member's request still unanswered for a partition that meanwhile got
            // data (a write shipped by a peer whose view still held it Active) is asked again:
            // the node would keep it pending and never turn Active, a stall not seen on real
            // members, so the world does not model it (an Active member keeps it in its
            // gauge, as measured).
            let mut ask: BTreeSet<usize> = self.pending(o).into_iter().collect();
            if self.pods[&o].phase == Phase::Joining {
                ask.extend(self.pods[&o].asked.keys());
            }
            let mut answered = Vec::new();
            for p in ask {
                match self.pods[&o].asked.get(&p) {
                    Some(again) if self.t < *again => continue,
                    _ => {}
                }
                let lost = self.rng.chance(ASK_LOST);
                match self.answering_donor(o, p).filter(|_| !lost) {
                    Some(s) => answered.push((p, s)),
                    None => {
                        let again = self.t + ASK_AGAIN_TICKS;
                        self.pods.get_mut(&o).unwrap().asked.insert(p, again);
                    }
                }
                if answered.len() == COPY_RATE {
                    break;
                }
            }
            let mut copied = 0u64;
            for (p, s) in &answered {
                let pod = self.pods.get_mut(&o).unwrap();
                pod.asked.remove(p);
                pod.done.insert(*p);
                if self.holds(*s, *p) {
                    self.vols.get_mut(&o).unwrap().data[*p] = true;
                    copied += 1;
                }
                for b in self.batches[*p].iter_mut() {
                    if b.holders & bit(*s) != 0 {
                        b.holders |= bit(o);
                    }
                }
            }
            let pod = self.pods.get_mut(&o).unwrap();
            pod.boots += answered.len() as u64;
            pod.ring += copied * BASE_RECORDS;
            // A join in progress persists what it still has to copy.
            if pod.phase == Phase::Joining {
                let unfinished: BTreeSet<usize> = self
                    .pending(o)
                    .into_iter()
                    .chain(self.pods[&o].asked.keys().copied())
                    .collect();
                if let Some(v) = self.vols.get_mut(&o) {
                    v.join_pending = unfinished;
                }
            }
        }
    }

    /// The donor member `o` asks for partition `p`: the first other owner by its own view
    /// (itself a candidate), which answers only when running and, by its own view, an owner
    /// (a node refuses a bootstrap of a partition it does not own, without a reply).
    fn answering_donor(&self, o: u32, p: usize) -> Option<u32> {
        let donor = self.first_other_owner(o, p)?;
        let theirs = candidates(&self.view(donor));
        (self.running(donor) && self.owners(p, &theirs).contains(&donor)).then_some(donor)
    }

    /// Non-owners drop a partition's base once every owner holds it (copies do vanish); the
    /// writes they hold beyond it stay (offered to an owner every third round).
    fn drop_copies(&mut self) {
        let truth: BTreeSet<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.running() && p.phase != Phase::Joining)
            .map(|(o, _)| *o)
            .collect();
        if truth.len() < self.rf {
            return;
        }
        for o in self.active() {
            for p in 0..PARTITIONS {
                if !self.holds(o, p) {
                    continue;
                }
                // A copy on a volume being deleted is no copy to rely on.
                let owners = self.owners(p, &truth);
                let kept =
                    |w: &u32| self.holds(*w, p) && self.vols.get(w).is_some_and(|v| !v.deleting);
                if !owners.contains(&o) && owners.iter().all(kept) {
                    self.vols.get_mut(&o).unwrap().data[p] = false;
                }
            }
        }
    }

    /// Members the client Service selects: running, Active or Leaving (ready), not being
    /// deleted, labelled "on".
    fn serving(&self) -> Vec<u32> {
        self.pods
            .iter()
            .filter(|(_, p)| p.resp_open() && p.deleted_at.is_none() && !p.client_off)
            .map(|(o, _)| *o)
            .collect()
    }

    /// Client writes of this tick: the pooled clients' connections (kept, stopped or opened)
    /// and the rogue's; each member commits what it received.
    fn take_writes(&mut self) {
        if !self.born {
            return;
        }
        let serving = self.serving();
        let mut sent: BTreeMap<u32, u64> = BTreeMap::new();
        for i in 0..CLIENTS {
            let n = self.write_rate / CLIENTS as u64
                + u64::from((i as u64) < self.write_rate % CLIENTS as u64);
            if let Some(o) = self.clients[i] {
                let open = self.pods.get(&o).is_some_and(Pod::resp_open);
                // Pinned: it stays on a member no longer selected until it stops by itself
                // (at once when idle); pools also recycle connections now and then.
                let stops = !serving.contains(&o) && (n == 0 || self.rng.chance(CLIENT_STOP));
                if !open || stops || self.rng.chance(0.01) {
                    self.clients[i] = None;
                }
            }
            if self.clients[i].is_none() && n > 0 && !serving.is_empty() {
                let k = self.rng.below(serving.len() as u64) as usize;
                self.clients[i] = Some(serving[k]);
            }
            if let Some(o) = self.clients[i] {
                *sent.entry(o).or_default() += n;
            }
        }
        if let Some(mut r) = self.rogue {
            let pod = self.pods.get(&r.member);
            if self.t >= r.until || (r.open && !pod.is_some_and(Pod::resp_open)) {
                self.rogue = None;
            } else {
                if !r.open && pod.is_some_and(|p| p.resp_open() && p.deleted_at.is_none()) {
                    r.open = true;
                }
                if r.open {
                    *sent.entry(r.member).or_default() += r.rate;
                    self.load.rogue_writes += r.rate;
                }
                self.rogue = Some(r);
            }
        }
        for (o, n) in sent {
            if n > 0 {
                self.commit(o, n);
            }
        }
    }

    /// `n` client writes commit on `o` (acknowledged), and its ring ships what it can.
    fn commit(&mut self, o: u32, n: u64) {
        let t = self.t;
        let p = (weight(t as usize, o) % PARTITIONS as u64) as usize;
        let invisible = self.broken == Broken::InvisibleInputAndShipping;
        let pod = self.pods.get_mut(&o).unwrap();
        pod.writes += n;
        pod.commands += n;
        if !invisible {
            pod.input_bytes += n * WRITE_BYTES;
        }
        pod.last_input = Some(t);
        pod.ring += n;
        self.load.writes += n;
        // Held by its origin alone until its ring ships it (`ship`).
        self.batches[p].push(Batch { n, holders: bit(o) });
        pod.unshipped.push_back((p, n));
        // Past the backlog the oldest are evicted before they were shipped: ring gaps.
        let mut over = pod.unshipped.iter().map(|(_, n)| n).sum::<u64>();
        while over > RING_BACKLOG {
            let Some((_, front)) = pod.unshipped.front_mut() else {
                break;
            };
            let k = (*front).min(over - RING_BACKLOG);
            *front -= k;
            over -= k;
            self.load.gapped += k;
            pod.gapped = true;
            if *front == 0 {
                pod.unshipped.pop_front();
            }
        }
    }

    /// Every running member's sender ships up to `RING_RATE` writes of its backlog, oldest
    /// first, to the owners of their partition by its view (a peer not running gets nothing,
    /// and a write copy is silently skipped for a peer at `SKIP_CHANCE`).
    fn ship(&mut self) {
        let senders: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.running() && !p.unshipped.is_empty() && !p.wedged)
            .map(|(o, _)| *o)
            .collect();
        for o in senders {
            if self.rng.chance(WEDGE_CHANCE) {
                self.pods.get_mut(&o).unwrap().wedged = true;
                self.load.wedges += 1;
                continue;
            }
            let cands = candidates(&self.view(o));
            let mut budget = RING_RATE;
            while budget > 0 {
                let Some(&(p, n)) = self.pods[&o].unshipped.front() else {
                    break;
                };
                let k = n.min(budget);
                budget -= k;
                let mut to = 0;
                let mut copies = 0;
                for w in self.owners(p, &cands).into_iter().filter(|w| *w != o) {
                    if self.running(w) && !self.rng.chance(SKIP_CHANCE) {
                        to |= bit(w);
                        copies += k;
                        let peer = self.pods.get_mut(&w).unwrap();
                        peer.ring += k;
                        peer.applied += k;
                    } else {
                        self.load.skipped += k;
                    }
                }
                self.shipped(o, p, k, to);
                let pod = self.pods.get_mut(&o).unwrap();
                pod.sent += copies;
                let front = pod.unshipped.front_mut().expect("front");
                front.1 -= k;
                if front.1 == 0 {
                    pod.unshipped.pop_front();
                }
            }
        }
    }

    /// `k` writes of partition `p` held by `o` alone (if still so) now also reach `to`.
    fn shipped(&mut self, o: u32, p: usize, k: u64, to: u64) {
        if to == 0 {
            return;
        }
        let mut left = k;
        let mut moved = 0;
        for b in self.batches[p].iter_mut().filter(|b| b.holders == bit(o)) {
            let m = b.n.min(left);
            b.n -= m;
            left -= m;
            moved += m;
            if left == 0 {
                break;
            }
        }
        self.batches[p].retain(|b| b.n > 0);
        if moved > 0 {
            self.batches[p].push(Batch {
                n: moved,
                holders: bit(o) | to,
            });
        }
    }

    /// Rounds that begin this tick: the counter, then one exchange per owned partition with
    /// one random other owner, and on every third round an offer of each partition held but
    /// not owned to one random owner.
    fn anti_entropy(&mut self) {
        let t = self.t;
        let due: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.running() && t >= p.next_round)
            .map(|(o, _)| *o)
            .collect();
        for o in due {
            let pod = self.pods.get_mut(&o).unwrap();
            pod.rounds += 1;
            pod.next_round = t + AE_MIN + self.rng.below(AE_JITTER);
            let round = pod.rounds;
            if self.broken == Broken::HollowRounds {
                continue;
            }
            let cands = candidates(&self.view(o));
            let mut queued: BTreeMap<u32, u64> = BTreeMap::new();
            for p in 0..PARTITIONS {
                let owners = self.owners(p, &cands);
                let (peers, both): (Vec<u32>, bool) = if owners.contains(&o) {
                    (owners.into_iter().filter(|w| *w != o).collect(), true)
                } else if round.is_multiple_of(3) && self.has_local(o, p) {
                    (owners, false)
                } else {
                    continue;
                };
                if peers.is_empty() {
                    continue;
                }
                let to = peers[self.rng.below(peers.len() as u64) as usize];
                // An unreachable owner: skipped this round. A full queue: dropped silently.
                if !self.running(to) || self.rng.chance(AE_DROP) {
                    continue;
                }
                // Its exchanges share the connections its ring still ships over, their
                // windows full: a queue that fills drops them (on real members, a leaver still
                // shipping 40 s after its writes delivered neither to one peer).
                let shipping = !self.pods[&o].unshipped.is_empty() && !self.pods[&o].wedged;
                if shipping && self.rng.chance(SHIPPING_AE_DROP) {
                    self.load.exchanges_dropped_shipping += 1;
                    continue;
                }
                // Its root, then one message per differing batch while the queue has room.
                let used = queued.entry(to).or_insert(0);
                if *used >= AE_QUEUE {
                    self.load.exchanges_cut_by_queue += 1;
                    continue;
                }
                *used += 1;
                let differing = self.differing(o, to, p, both);
                let room = differing.min(AE_QUEUE - *used);
                *used += room;
                if room < differing {
                    self.load.exchanges_cut_by_queue += 1;
                }
                self.exchanges.push(Exchange {
                    from: o,
                    to,
                    p,
                    both,
                    room,
                });
            }
        }
    }

    /// Exchanges sent last tick, between processes that still run.
    fn deliver_exchanges(&mut self) {
        for x in std::mem::take(&mut self.exchanges) {
            let up = |o| self.running(o) && self.vols.contains_key(&o);
            if !up(x.from) || !up(x.to) {
                continue;
            }
            let left = self.merge(x.from, x.to, x.p, x.room);
            if x.both {
                self.merge(x.to, x.from, x.p, left);
            }
        }
    }

    /// Batches (a missing base counts as one) that differ between `a` and `b` in partition
    /// `p`: what `a` has and `b` lacks, and the other way too for an owner's exchange.
    fn differing(&self, a: u32, b: u32, p: usize, both: bool) -> u64 {
        let one_way = |a: u32, b: u32| {
            u64::from(self.holds(a, p) && !self.holds(b, p))
                + self.batches[p]
                    .iter()
                    .filter(|x| x.holders & bit(a) != 0 && x.holders & bit(b) == 0)
                    .count() as u64
        };
        one_way(a, b) + if both { one_way(b, a) } else { 0 }
    }

    /// What `a` holds of partition `p` and `b` lacks reaches `b`, at most `room` batches (a
    /// base counts as one); returns the room left.
    fn merge(&mut self, a: u32, b: u32, p: usize, mut room: u64) -> u64 {
        let mut records = 0;
        if room > 0 && self.holds(a, p) && !self.holds(b, p) {
            self.vols.get_mut(&b).unwrap().data[p] = true;
            records += BASE_RECORDS;
            room -= 1;
        }
        for x in self.batches[p].iter_mut() {
            if room > 0 && x.holders & bit(a) != 0 && x.holders & bit(b) == 0 {
                x.holders |= bit(b);
                records += x.n;
                self.load.ae_delivered += x.n;
                room -= 1;
            }
        }
        let pod = self.pods.get_mut(&b).unwrap();
        pod.repairs += records;
        pod.ring += records;
        room
    }

    /// Writes on every volume holding their partition's base become part of it.
    fn fold(&mut self) {
        for p in 0..PARTITIONS {
            let base = self
                .vols
                .iter()
                .filter(|(_, v)| v.data[p])
                .fold(0, |m, (o, _)| m | bit(*o));
            if base != 0 {
                self.batches[p].retain(|b| b.holders & base != base);
            }
        }
    }

    /// The stats task: every `GAUGE_TICKS` since the process started.
    fn refresh_gauges(&mut self) {
        let t = self.t;
        let due: Vec<u32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.running() && t > p.started_at)
            .filter(|(_, p)| (t - p.started_at).is_multiple_of(GAUGE_TICKS))
            .map(|(o, _)| *o)
            .collect();
        for o in due {
            let view = self.view(o);
            let g = Gauges {
                view_members: view.len() as u64,
                underreplicated: if candidates(&view).len() < self.rf {
                    PARTITIONS as u64
                } else {
                    0
                },
                join_pending: self.join_gate(o),
                // The broken worlds stand for gates before v4, which never read the cap.
                ring_ops: match self.pods[&o].gapped {
                    true if self.broken == Broken::None => RING_CAP,
                    _ => self.pods[&o].ring.min(RING_CAP - 1),
                },
                inflight: {
                    let unshipped: u64 = self.pods[&o].unshipped.iter().map(|(_, n)| n).sum();
                    let peers = view
                        .keys()
                        .filter(|w| **w != o && self.running(**w))
                        .count();
                    (unshipped * WRITE_BYTES).min(REPL_WINDOW_BYTES) * peers as u64
                },
            };
            let serving = matches!(self.pods[&o].phase, Phase::Active | Phase::Leaving);
            self.pods.get_mut(&o).unwrap().gauges = g;
            // The node's heartbeat, written by the same stats task while it serves.
            if serving && let Some(v) = self.vols.get_mut(&o) {
                v.heartbeat = true;
            }
        }
    }

    /// The join-gate gauge: partitions still to bootstrap, and requests no donor answered.
    fn join_gate(&self, o: u32) -> u64 {
        let mut gate: BTreeSet<usize> = self.pending(o).into_iter().collect();
        gate.extend(self.pods[&o].asked.keys());
        gate.len() as u64
    }

    /// Volumes that keep their data for the cluster: a member's, or a pod's.
    fn keep_mask(&self, members: &BTreeSet<u32>) -> u64 {
        self.vols
            .keys()
            .filter(|o| members.contains(o) || self.pods.contains_key(o))
            .fold(0, |m, o| m | bit(*o))
    }

    /// Writes held by `o` and by no volume in `keep` (every other volume when `None`).
    fn unique_writes(&self, o: u32, keep: Option<u64>) -> u64 {
        let others = keep.unwrap_or(u64::MAX) & !bit(o);
        self.batches
            .iter()
            .flatten()
            .filter(|b| b.holders & bit(o) != 0 && b.holders & others == 0)
            .map(|b| b.n)
            .sum()
    }

    /// Drop the writes held by `o` and by no volume in `keep`; returns how many.
    fn drop_unique(&mut self, o: u32, keep: Option<u64>) -> u64 {
        let n = self.unique_writes(o, keep);
        let others = keep.unwrap_or(u64::MAX) & !bit(o);
        for bs in self.batches.iter_mut() {
            bs.retain(|b| b.holders & bit(o) == 0 || b.holders & others != 0);
        }
        n
    }

    /// Volume `o` no longer holds anything (it goes, or left the cluster).
    fn forget_volume(&mut self, o: u32) {
        for bs in self.batches.iter_mut() {
            for b in bs.iter_mut() {
                b.holders &= !bit(o);
            }
        }
        if let Some(v) = self.vols.get_mut(&o) {
            v.data.fill(false);
        }
    }

    fn view(&self, o: u32) -> BTreeMap<u32, Phase> {
        let lag = self.view_lag.get(&o).copied().unwrap_or(0);
        let mut v = self
            .history
            .get(lag.min(self.history.len().saturating_sub(1)))
            .cloned()
            .unwrap_or_default();
        if let Some(p) = self.pods.get(&o) {
            v.insert(o, p.phase);
        }
        if let Some((until, side)) = &self.split
            && self.t < *until
        {
            let mine = side.contains(&o);
            v.retain(|peer, _| side.contains(peer) == mine);
        }
        v
    }

    /// The view by identity (what `CLUSTER NODES` lists), with a stranger in place of its
    /// highest other peer while that fault lasts.
    fn view_by_id(&self, o: u32, view: &BTreeMap<u32, Phase>) -> View {
        let mut v = View::of_ordinals(o, view.keys().copied());
        if self.stranger_until.get(&o).is_some_and(|u| self.t < *u)
            && let Some(peer) = view.keys().rev().find(|p| **p != o)
        {
            v.peers.remove(&View::ordinal_id(*peer));
            v.peers
                .insert(View::ordinal_id(1000 + *peer), "127.9.9.9:6379".into());
        }
        v
    }

    /// What one pass observes. `read` is false for the creations before the scrapes (caches
    /// only): nothing is read over RESP or scraped.
    fn observe(
        &mut self,
        rng: &mut SplitMix64,
        members: &BTreeSet<u32>,
        timeouts: f64,
        read: bool,
    ) -> BTreeMap<u32, MemberObs> {
        let mut out = BTreeMap::new();
        let shipping_hidden = matches!(
            self.broken,
            Broken::InvisibleShipping | Broken::InvisibleInputAndShipping
        );
        let ords: BTreeSet<u32> = self
            .pods
            .keys()
            .chain(self.vols.keys())
            .chain(members.iter())
            .chain(self.look_alikes.keys())
            .copied()
            .collect();
        for o in ords {
            let hang = self.scrape_hang_until.get(&o).is_some_and(|u| self.t < *u);
            // The view, read over RESP before the scrape: its bytes count as RESP input.
            let resp = self.pods.get(&o).is_some_and(Pod::resp_open);
            let (view, own) = if !read || !resp {
                (None, Some(0))
            } else if hang || rng.chance(timeouts) {
                // Cut off midway: how much was sent is unknown.
                let sent = rng.below(VIEW_READ_BYTES + 1);
                self.pods.get_mut(&o).unwrap().input_bytes += sent;
                (None, None)
            } else {
                self.pods.get_mut(&o).unwrap().input_bytes += VIEW_READ_BYTES;
                // A member that takes no password the operator tries answers no view.
                let taken = self.password_taken(o) != PasswordTaken::Neither;
                (
                    taken.then(|| self.view_by_id(o, &self.view(o))),
                    Some(VIEW_READ_BYTES),
                )
            };
            let password = match (&view, resp && read) {
                (Some(_), _) => self.password_taken(o),
                (None, true) if own.is_some() => PasswordTaken::Neither,
                _ => PasswordTaken::Unknown,
            };
            let pod = self.pods.get(&o);
            let scrape = pod.filter(|p| read && p.running()).and_then(|p| {
                if hang || rng.chance(timeouts) {
                    return None;
                }
                let g = p.gauges;
                Some(Scrape {
                    view_members: g.view_members,
                    underreplicated: g.underreplicated,
                    join_pending: g.join_pending,
                    // A figure may be missing or not a number: unknown.
                    // Read always in the broken worlds: gates before v4 never read it.
                    ring_ops: (!rng.chance(timeouts) || self.broken != Broken::None)
                        .then_some(g.ring_ops),
                    ae_rounds: (!rng.chance(timeouts / 2.0)).then_some(p.rounds),
                    repl_sent: (!rng.chance(timeouts / 2.0)).then_some(if shipping_hidden {
                        0
                    } else {
                        p.sent
                    }),
                    repl_inflight_bytes: (!rng.chance(timeouts / 2.0))
                        .then_some(if shipping_hidden { 0 } else { g.inflight }),
                    client_input_bytes: (!rng.chance(timeouts / 2.0)).then_some(p.input_bytes),
                    write_commands: p.writes,
                    // Always read: a draw here would move every later one of the schedule.
                    repl_applied: Some(p.applied),
                    version: Some(format!("0.{}.0", p.image + 2)),
                    uptime_ms: Some((self.t - p.started_at) * 1000),
                    bootstraps_total: p.boots,
                    repairs_total: p.repairs,
                    commands_total: p.commands,
                    disk: self.vols.get(&o).map(|v| Disk {
                        used_bytes: (v.data.iter().filter(|x| **x).count() as u64) << 20,
                        total_bytes: 64 << 20,
                    }),
                    ..Scrape::default()
                })
            });
            out.insert(
                o,
                MemberObs {
                    pod: pod.map(|p| PodObs {
                        ready: p.resp_open(),
                        terminating: p.deleted_at.is_some(),
                        drained: p.drained,
                        outdated: p.version != self.version,
                        image_outdated: p.image != self.image,
                        replace_volume: p.replace_volume,
                        restart: p.restart,
                        client_traffic_off: p.client_off,
                        never_started: !p.ever_started,
                        node: Some(NodeObs {
                            name: format!("node-{}", p.node),
                            unschedulable: self.draining.contains_key(&p.node),
                            taints: vec![],
                        }),
                        eviction_allowed: p.eviction_allowed,
                    }),
                    pvc: self.vols.get(&o).map(|v| PvcObs {
                        uid: v.uid.to_string(),
                        terminating: v.deleting,
                        outdated: !self.storage.wish().fits_in_place(&v.volume()),
                        absent_since: v.absent_since,
                        served_since: v.served_since,
                        pods_made: Some(v.pods_made),
                    }),
                    scrape,
                    view,
                    look_alike: self.look_alikes.contains_key(&o),
                    password,
                    // The ledger's, filled in by the operator's pass.
                    client_input: None,
                    // As the shell keeps answers: per template (version), a refusal asked
                    // again once 10 s old.
                    new_pod: match self.admissions.get(&o) {
                        Some(&(v, true, _)) if v == self.version => PodAdmission::Admitted,
                        Some(&(v, false, at)) if v == self.version => PodAdmission::Refused {
                            message: "serviceaccount \"nope\" not found".into(),
                            ask_again: self.t >= at + 10,
                        },
                        _ => PodAdmission::Unchecked,
                    },
                },
            );
            self.own_sent.insert(o, own);
        }
        out
    }

    /// Clients read through the Service: `ops` commands a second over the members it selects.
    fn serve(&mut self, ops: u64) {
        let serving = self.serving();
        let invisible = self.broken == Broken::InvisibleInputAndShipping;
        for o in &serving {
            let n = ops / serving.len() as u64;
            let p = self.pods.get_mut(o).unwrap();
            p.commands += n;
            if n > 0 {
                if !invisible {
                    p.input_bytes += n * READ_BYTES;
                }
                p.last_input = Some(self.t);
            }
        }
    }

    /// Expand in place the volumes the core says to grow; a volume only ever grows, and only
    /// within its class.
    fn grow_volumes(&mut self, counts: &mut Counts, violations: &mut Vec<String>) {
        let wish = self.storage.wish();
        let volumes: BTreeMap<u32, Volume> =
            self.vols.iter().map(|(o, v)| (*o, v.volume())).collect();
        for o in wish.to_grow(&volumes) {
            let v = self.vols.get_mut(&o).unwrap();
            counts.invariant_checks += 1;
            if self.storage.size_gi <= v.size_gi || self.storage.class != v.class || v.deleting {
                violations.push(format!(
                    "t={}: resized data-{o} of {}Gi class-{} to {}Gi class-{}",
                    self.t, v.size_gi, v.class, self.storage.size_gi, self.storage.class
                ));
            }
            v.size_gi = self.storage.size_gi;
            counts.volumes_grown += 1;
        }
    }

    /// Write the absence records the core asks for (the shell's PVC annotations), each on the
    /// volume observed (by uid); counts those stamped and cleared.
    fn record_absences(
        &mut self,
        changes: &[AbsenceChange],
        observed: &BTreeMap<u32, MemberObs>,
        counts: &mut Counts,
    ) {
        let now = self.t as Millis * 1000;
        for c in changes {
            let o = c.ordinal();
            let seen = observed
                .get(&o)
                .and_then(|m| m.pvc.as_ref())
                .map(|v| &v.uid);
            let Some(v) = self
                .vols
                .get_mut(&o)
                .filter(|v| Some(&v.uid.to_string()) == seen)
            else {
                continue;
            };
            match c {
                AbsenceChange::Stamp(_) => {
                    v.absent_since = Some(now);
                    counts.absences_stamped += 1;
                }
                AbsenceChange::Clear(_) => {
                    v.absent_since = None;
                    counts.absences_cleared += 1;
                }
                AbsenceChange::FirstServed(_) => {
                    v.served_since = Some(now);
                    counts.volumes_first_served += 1;
                }
            }
        }
    }

    /// Partitions that no current member's volume holds.
    fn lost(&self, members: &BTreeSet<u32>) -> Vec<usize> {
        if !self.born {
            return vec![];
        }
        let current: BTreeSet<u32> = members.iter().chain(self.pods.keys()).copied().collect();
        (0..PARTITIONS)
            .filter(|p| !current.iter().any(|o| self.holds(*o, *p)))
            .collect()
    }

    fn apply(&mut self, a: Action, members: &BTreeSet<u32>) -> Result<(), String> {
        let t = self.t;
        let now = t as Millis * 1000;
        let o = a.ordinal();
        if self.look_alikes.contains_key(&o) {
            return Err(format!("{a:?}: its name is held by a look-alike"));
        }
        match a {
            // The invariant: no pod is (re)created on a volume away longer than the grace.
            Action::CreatePod(o)
                if !self.pods.contains_key(&o)
                    && self.vols.get(&o).is_some_and(|v| {
                        !v.deleting
                            && v.absent_since
                                .is_some_and(|since| now - since > self.stale_grace_ms)
                    }) =>
            {
                return Err(format!(
                    "created a pod on data-{o}, away since {:?} ms (grace {} ms)",
                    self.vols[&o].absent_since, self.stale_grace_ms
                ));
            }
            Action::CreatePvc(o) => {
                if !self.vols.contains_key(&o) {
                    self.next_uid += 1;
                    self.forget_volume(o);
                    self.vols.insert(
                        o,
                        Vol {
                            uid: self.next_uid,
                            data: vec![false; PARTITIONS],
                            size_gi: self.storage.size_gi,
                            class: self.storage.class,
                            deleting: false,
                            absent_since: None,
                            served_since: None,
                            heartbeat: false,
                            join_pending: BTreeSet::new(),
                            user_discarded: false,
                            pods_made: 0,
                        },
                    );
                }
            }
            // The API server refuses it: nothing is made (the shell counted it first).
            Action::CreatePod(o) if self.refused_version == Some(self.version) => {
                if let Some(v) = self.vols.get_mut(&o) {
                    v.pods_made += 1;
                }
            }
            Action::CheckPod(o) => {
                let admitted = self.refused_version != Some(self.version);
                self.admissions.insert(o, (self.version, admitted, t));
            }
            Action::CreatePod(o) => {
                if let Some(v) = self.vols.get_mut(&o) {
                    v.pods_made += 1;
                }
                if !self.pods.contains_key(&o) && self.vols.get(&o).is_some_and(|v| !v.deleting) {
                    let mut pod = Pod::new(self.version, t);
                    pod.image = self.image;
                    pod.client_off = self.new_pods_off;
                    pod.node = self.schedule(o);
                    pod.pass = self.secret;
                    if self.rng.chance(UNSTARTABLE) {
                        // Unscheduled or its image not pulled: it starts later, if ever.
                        pod.ever_started = false;
                        pod.crashed_until = Some(t + 3 + self.rng.below(60));
                        pod.stopped_at = t;
                    } else {
                        pod.start(t, self.vols.get(&o), &mut self.rng);
                    }
                    self.pods.insert(o, pod);
                    self.exited.remove(&o);
                    self.op_deleted.remove(&o);
                    self.view_lag.insert(o, 0);
                }
            }
            Action::Drain(o) => {
                if self.drain_hang_until.get(&o).is_none_or(|u| t >= *u)
                    && let Some(p) = self.pods.get_mut(&o)
                    && p.running()
                {
                    p.phase = Phase::Leaving;
                    p.drained = true;
                }
            }
            Action::DeletePod(o) => {
                if let Some(p) = self.pods.get_mut(&o)
                    && p.deleted_at.is_none()
                {
                    p.deleted_at = Some(t);
                    self.op_deleted.insert(o);
                }
            }
            // The shell reads the pod back first: deleted only while it still never started.
            // No disruption (nothing ran, nothing is served), but the claim is checked: its
            // volume holds nothing at all.
            Action::DeleteUnstartedPod(o) => {
                if self
                    .pods
                    .get(&o)
                    .is_some_and(|p| p.deleted_at.is_none() && !p.ever_started)
                {
                    if let Some(p) = (0..PARTITIONS).find(|p| self.has_local(o, *p)) {
                        return Err(format!(
                            "deleted the pod of {o} as never started, its volume holding partition {p}"
                        ));
                    }
                    self.pods.get_mut(&o).unwrap().deleted_at = Some(t);
                    self.unstarted_deleted += 1;
                }
            }
            Action::DeletePvc(o) => {
                self.delete_unique(o, members, now)?;
                if let Some(v) = self.vols.get(&o) {
                    // Every partition on it must be on another current member's volume that
                    // can serve it again: a running pod's, or one within the stale-volume
                    // grace (a stale volume is never mounted again: its copy is none).
                    let stale = |m: &u32| {
                        self.vols[m]
                            .absent_since
                            .is_some_and(|since| now - since > self.stale_grace_ms)
                    };
                    for p in 0..PARTITIONS {
                        let elsewhere = |m: &u32| {
                            *m != o && self.holds(*m, p) && (self.running(*m) || !stale(m))
                        };
                        if v.data[p] && !members.iter().chain(self.pods.keys()).any(elsewhere) {
                            let on: Vec<u32> = self
                                .vols
                                .iter()
                                .filter(|(m, w)| **m != o && w.data[p])
                                .map(|(m, _)| *m)
                                .collect();
                            return Err(format!(
                                "deleted data-{o} holding the last copy of partition {p} (other copies only on stale volumes or none: {on:?})"
                            ));
                        }
                    }
                    if self.pods.contains_key(&o) {
                        self.vols.get_mut(&o).unwrap().deleting = true;
                    } else {
                        self.forget_volume(o);
                        self.vols.remove(&o);
                    }
                }
            }
            // A label: the client Service selects the pod again, or no longer.
            Action::SetClientTraffic { ordinal, on } => {
                if let Some(p) = self.pods.get_mut(&ordinal) {
                    p.client_off = !on;
                    self.load.traffic_labels += 1;
                }
            }
            // Let go to evictions only a drained member on a node being drained.
            Action::SetEviction { ordinal, allowed } => {
                if let Some(p) = self.pods.get_mut(&ordinal) {
                    if allowed && !(p.drained && self.draining.contains_key(&p.node)) {
                        return Err(format!(
                            "{a:?}: its pod is not drained on a node being drained (drained {}, node {})",
                            p.drained, p.node
                        ));
                    }
                    p.eviction_allowed = allowed;
                }
            }
        }
        Ok(())
    }

    /// A volume deleted by the operator must hold no acknowledged write found on no other
    /// member's volume: a violation, but on a stale volume, where they are counted apart
    /// (`stale_writes_lost`): the operator never mounts a stale volume and cannot see what it
    /// holds (see `docs/reliability.md`).
    fn delete_unique(
        &mut self,
        o: u32,
        members: &BTreeSet<u32>,
        now: Millis,
    ) -> Result<(), String> {
        let keep = self.keep_mask(members);
        let unique = self.unique_writes(o, Some(keep));
        let grace = self.stale_grace_ms;
        let Some(v) = self.vols.get(&o).filter(|_| unique > 0) else {
            return Ok(());
        };
        if v.absent_since.is_none_or(|since| now - since <= grace) {
            return Err(format!(
                "deleted data-{o} holding {unique} acknowledged writes on no other member's volume"
            ));
        }
        self.load.stale_volumes_with_writes += 1;
        self.load.stale_writes_lost += self.drop_unique(o, Some(keep));
        Ok(())
    }

    /// A volume the user chose to discard (`storage.freshVolumesOnWake`): its data goes. When
    /// that was a partition's last copy, the cluster's data is gone: it is born again, empty,
    /// once enough members are Active (as for a new cluster).
    fn discard_volume(&mut self, a: &Action, members: &BTreeSet<u32>) {
        let Action::DeletePvc(o) = *a else {
            return;
        };
        // The user chose to discard it: its writes with it.
        let keep = self.keep_mask(members);
        self.load.user_writes_discarded += self.drop_unique(o, Some(keep));
        if self.pods.contains_key(&o) {
            if let Some(v) = self.vols.get_mut(&o) {
                v.deleting = true;
                v.user_discarded = true;
            }
        } else {
            self.forget_volume(o);
            self.vols.remove(&o);
        }
        let kept = |p: usize| self.vols.iter().any(|(m, v)| *m != o && v.data[p]);
        if (0..PARTITIONS).any(|p| !kept(p)) {
            self.born = false;
            self.vols.values_mut().for_each(|v| v.data.fill(false));
            self.batches.iter_mut().for_each(Vec::clear);
        }
    }

    /// Every partition has rf copies on running Active members and nothing is in motion.
    fn fully_replicated(&self) -> bool {
        let active = self.active();
        self.born
            && active.len() == self.pods.len()
            && (0..PARTITIONS)
                .all(|p| active.iter().filter(|o| self.holds(**o, p)).count() >= self.rf)
    }
}

/// What the operator keeps in the object's status between passes.
#[derive(Clone, Debug, Default)]
struct Status {
    memory: Memory,
    load: LoadMemory,
    scale: ScaleMemory,
    reported: Reported,
}

/// Counted over a schedule: what was checked, and how often each path of the shell's
/// composition was taken (the test asserts each is reached).
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    faults: u64,
    steps: u64,
    invariant_checks: u64,
    /// Pods or PVCs created before the scrapes (the watch's fast path or a pass's start).
    early_creations: u64,
    /// Early creations made from a stale status.
    early_creations_stale: u64,
    /// Passes in which the autoscaler asked for another size than the membership.
    autoscaler_moves: u64,
    /// Events derived from status changes (autoscaler target moved).
    transition_notes: u64,
    /// Volumes expanded in place.
    volumes_grown: u64,
    /// Fresh volumes asked for on a pod, and carried out (`VolumeReplaced` recorded).
    fresh_volumes: u64,
    /// Restarts on its own volume asked for on a pod, and carried out (`MemberRestarted`).
    restarts: u64,
    /// Passes that found the cluster in a mass failure (replicationFactor or more down).
    mass_failure_passes: u64,
    /// Passes whose ready members' views disagreed by identity, and those of them with a
    /// removal or a restart in progress or wanted (what the hold is for).
    views_disagree_passes: u64,
    views_held_passes: u64,
    /// Passes that reported a suspected partition.
    suspected_partition_passes: u64,
    /// Absence records written on volumes (stamped, cleared).
    absences_stamped: u64,
    absences_cleared: u64,
    /// Volumes recorded as first served from (`AbsenceChange::FirstServed`).
    volumes_first_served: u64,
    /// Stale volumes the operator kept for the user because another member's volume first
    /// served after they went away (`Decision::kept_stale`); the user kept their data once
    /// faults stopped (the annotation removed).
    stale_kept_for_user: u64,
    /// Pods created on a volume with an absence recorded, within the grace (reused).
    stamped_volumes_reused: u64,
    /// Creations checked against a stale volume's record (the invariant's branch: a pod
    /// created where the volume is stale would be a violation).
    stale_volume_checks: u64,
    /// Stale volumes replaced by fresh ones (`StaleVolumeReplaced` announced).
    stale_volumes_replaced: u64,
    /// Stale volumes of a mass failure held for the user, who kept their data once faults
    /// stopped (the annotation removed).
    stale_held_for_user: u64,
    /// Passes that observed a look-alike.
    look_alike_passes: u64,
    /// Of those, passes that held a wanted disruptive step for it (blocked: LookAlike).
    look_alike_blocked: u64,
    /// Pods stopped by hibernation, passes reporting `Hibernated`, and wakes completed.
    hibernation_stops: u64,
    hibernated_passes: u64,
    wakes: u64,
    /// Passes whose wake was refused (stale volumes), refusals the user answered by keeping
    /// the data (the absence record removed), and stale volumes replaced by a fresh-volume wake.
    wake_refused_passes: u64,
    wake_refused_kept_by_user: u64,
    fresh_volume_wakes: u64,
    /// Pods stopped by a fence, and passes in which a fence held a wanted disruptive step
    /// (blocked: Fenced).
    fence_stops: u64,
    fence_held_passes: u64,
    /// Stale volumes of members unfenced after the grace that the user kept (annotation
    /// removed) because their replacement could not pass the gate.
    fence_stale_kept_by_user: u64,
    /// Passes checked against the hibernation and fence invariants with a member fenced or
    /// the cluster hibernated.
    stop_checks: u64,
    /// Passes blocked by replicationFactor 1 (`SingleCopy`: a removal or a fresh volume refused).
    single_copy_passes: u64,
    /// Dry runs of a member's new pod asked for before a rolling change drains it.
    pod_checks: u64,
    /// Drains of a rolling change (each after its new pod was admitted).
    roll_drains: u64,
    /// Passes blocked because the API server refuses the new pod (`PodRefused`).
    pod_refused_passes: u64,
    /// Specs whose pods were refused, fixed by the user once faults stopped.
    refused_specs_fixed: u64,
    /// Loads the user stopped, once faults stopped, for a hand-off held by repairs still
    /// carrying a stalled window's backlog.
    loads_stopped_for_stalled_window: u64,
    /// Passes whose scale-up added members up to its batch and left others for later.
    scale_ups_batched: u64,
    /// Removals started of a member whose container never started (no gate, no drain).
    never_started_removals: u64,
    /// Pods deleted as never started, each with its volume checked to hold nothing.
    unstarted_pods_deleted: u64,
    /// Nodes cordoned for a drain, members moved off them (`MemberMovedOffNode`), and pods
    /// the drains evicted (each one the operator let go).
    node_drains: u64,
    node_moves: u64,
    evictions: u64,
    /// Whole-cluster upgrades started and done, steps checked while every member was down for
    /// one, passes with members on different releases, passes holding a downgrade.
    upgrades_started: u64,
    upgrades_done: u64,
    whole_down_steps: u64,
    mixed_version_passes: u64,
    downgrades_held: u64,
    /// Gate v4: readings that recorded a ring's possible loss (a restart with its ring not
    /// known to have shipped; its ring at the cap while writes of its own were unshipped), and
    /// passes a leaver was held for one.
    restart_losses: u64,
    ring_cap_losses: u64,
    window_loss_holds: u64,
    /// Password changes by the user (each once the operator recorded the one before), values
    /// remembered before they were set, passwords set live, and rotations recorded as over.
    password_changes: u64,
    passwords_remembered: u64,
    passwords_set: u64,
    rotations_recorded: u64,
    load: LoadCounts,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.faults += o.faults;
        self.steps += o.steps;
        self.invariant_checks += o.invariant_checks;
        self.early_creations += o.early_creations;
        self.early_creations_stale += o.early_creations_stale;
        self.autoscaler_moves += o.autoscaler_moves;
        self.transition_notes += o.transition_notes;
        self.volumes_grown += o.volumes_grown;
        self.fresh_volumes += o.fresh_volumes;
        self.restarts += o.restarts;
        self.mass_failure_passes += o.mass_failure_passes;
        self.views_disagree_passes += o.views_disagree_passes;
        self.views_held_passes += o.views_held_passes;
        self.suspected_partition_passes += o.suspected_partition_passes;
        self.absences_stamped += o.absences_stamped;
        self.absences_cleared += o.absences_cleared;
        self.volumes_first_served += o.volumes_first_served;
        self.stale_kept_for_user += o.stale_kept_for_user;
        self.stamped_volumes_reused += o.stamped_volumes_reused;
        self.stale_volume_checks += o.stale_volume_checks;
        self.stale_volumes_replaced += o.stale_volumes_replaced;
        self.stale_held_for_user += o.stale_held_for_user;
        self.look_alike_passes += o.look_alike_passes;
        self.look_alike_blocked += o.look_alike_blocked;
        self.hibernation_stops += o.hibernation_stops;
        self.hibernated_passes += o.hibernated_passes;
        self.wakes += o.wakes;
        self.wake_refused_passes += o.wake_refused_passes;
        self.wake_refused_kept_by_user += o.wake_refused_kept_by_user;
        self.fresh_volume_wakes += o.fresh_volume_wakes;
        self.fence_stops += o.fence_stops;
        self.fence_held_passes += o.fence_held_passes;
        self.fence_stale_kept_by_user += o.fence_stale_kept_by_user;
        self.stop_checks += o.stop_checks;
        self.single_copy_passes += o.single_copy_passes;
        self.pod_checks += o.pod_checks;
        self.roll_drains += o.roll_drains;
        self.pod_refused_passes += o.pod_refused_passes;
        self.refused_specs_fixed += o.refused_specs_fixed;
        self.loads_stopped_for_stalled_window += o.loads_stopped_for_stalled_window;
        self.scale_ups_batched += o.scale_ups_batched;
        self.never_started_removals += o.never_started_removals;
        self.unstarted_pods_deleted += o.unstarted_pods_deleted;
        self.node_drains += o.node_drains;
        self.node_moves += o.node_moves;
        self.upgrades_started += o.upgrades_started;
        self.upgrades_done += o.upgrades_done;
        self.whole_down_steps += o.whole_down_steps;
        self.mixed_version_passes += o.mixed_version_passes;
        self.downgrades_held += o.downgrades_held;
        self.restart_losses += o.restart_losses;
        self.ring_cap_losses += o.ring_cap_losses;
        self.window_loss_holds += o.window_loss_holds;
        self.password_changes += o.password_changes;
        self.passwords_remembered += o.passwords_remembered;
        self.passwords_set += o.passwords_set;
        self.rotations_recorded += o.rotations_recorded;
        self.evictions += o.evictions;
        self.load += o.load;
    }
}

/// Counted over a schedule: the write load, its ring gaps and skips, anti-entropy, and what
/// the gate did with them.
#[derive(Clone, Copy, Debug, Default)]
struct LoadCounts {
    /// Client writes acknowledged (the rogue client's included).
    writes: u64,
    /// Writes past the ring rate (gapped: on their origin only), and write copies skipped
    /// for one peer (or not shipped to an owner that was down).
    gapped: u64,
    skipped: u64,
    /// Write copies anti-entropy delivered to a volume that lacked them.
    ae_delivered: u64,
    /// Writes of a rogue client sent straight to one member, whatever its label.
    rogue_writes: u64,
    /// Pods the operator deleted (not a stop) while their volume held writes found nowhere
    /// else, and those writes (kept only while the volume stays a member's).
    pods_deleted_with_unique: u64,
    writes_at_risk: u64,
    /// Members removed (the removal completed), and those removed while clients were writing.
    removals: u64,
    removals_under_load: u64,
    /// Passes whose scale-down or restart hand-off was held because the leaver still received
    /// client commands, and because its anti-entropy rounds since it went quiet were too few.
    held_by_client_input: u64,
    held_by_rounds: u64,
    /// ... and because its ring still shipped the writes it took.
    held_by_shipping: u64,
    /// Writes still in an exiting process's ring backlog (they reach others by anti-entropy
    /// only), and exchanges dropped because their sender's ring still shipped.
    exited_unshipped: u64,
    /// Passes whose hand-off was held by repairs after the leaver's window stalled.
    held_by_stalled_window: u64,
    exchanges_dropped_shipping: u64,
    /// Exchanges cut short or dropped by a full queue (`AE_QUEUE`).
    exchanges_cut_by_queue: u64,
    /// Passes that read a member's rounds, input bytes or own RESP bytes as unknown.
    unknown_figure_passes: u64,
    /// Client-traffic labels set on pods (`Action::SetClientTraffic`).
    traffic_labels: u64,
    /// Removal victims' pods deleted by the operator, each checked for client input in the
    /// interval its last scrape covered.
    victim_deletions_checked: u64,
    /// Victims restarted on their own volume to close the client connections they still took
    /// writes over (`Removal::connections_cut_at`), each checked to keep its volume.
    connection_cuts: u64,
    /// Members of a rolling change whose restart was taken as the cut of the client
    /// connections still writing to them (`Roll::connections_cut_at`), each checked to keep
    /// its volume.
    roll_connection_cuts: u64,
    /// Rings whose window stalled for good while they shipped (`WEDGE_CHANCE`), and removal
    /// victims' pods deleted while their ring was stalled (what it held handed on by rounds).
    wedges: u64,
    victims_deleted_wedged: u64,
    /// Of those, deletions while another ready member's join-gate gauge read above 0 (a
    /// bootstrap no donor answered): the gauge holds nothing, the leaver's rounds cover it.
    deletions_past_join_gauge: u64,
    /// Stale volumes the operator replaced while they held writes found nowhere else, and
    /// those writes: lost (a known gap of the stale-volume rule, not of the hand-off gate).
    stale_volumes_with_writes: u64,
    stale_writes_lost: u64,
    /// Writes on volumes a user chose to discard (a careful replacement, a fresh-volume wake).
    user_writes_discarded: u64,
}

impl std::ops::AddAssign for LoadCounts {
    fn add_assign(&mut self, o: LoadCounts) {
        self.writes += o.writes;
        self.gapped += o.gapped;
        self.skipped += o.skipped;
        self.ae_delivered += o.ae_delivered;
        self.rogue_writes += o.rogue_writes;
        self.pods_deleted_with_unique += o.pods_deleted_with_unique;
        self.writes_at_risk += o.writes_at_risk;
        self.removals += o.removals;
        self.removals_under_load += o.removals_under_load;
        self.held_by_client_input += o.held_by_client_input;
        self.held_by_rounds += o.held_by_rounds;
        self.held_by_shipping += o.held_by_shipping;
        self.exited_unshipped += o.exited_unshipped;
        self.exchanges_dropped_shipping += o.exchanges_dropped_shipping;
        self.exchanges_cut_by_queue += o.exchanges_cut_by_queue;
        self.held_by_stalled_window += o.held_by_stalled_window;
        self.unknown_figure_passes += o.unknown_figure_passes;
        self.traffic_labels += o.traffic_labels;
        self.victim_deletions_checked += o.victim_deletions_checked;
        self.connection_cuts += o.connection_cuts;
        self.roll_connection_cuts += o.roll_connection_cuts;
        self.wedges += o.wedges;
        self.victims_deleted_wedged += o.victims_deleted_wedged;
        self.deletions_past_join_gauge += o.deletions_past_join_gauge;
        self.stale_volumes_with_writes += o.stale_volumes_with_writes;
        self.stale_writes_lost += o.stale_writes_lost;
        self.user_writes_discarded += o.user_writes_discarded;
    }
}

struct Outcome {
    violations: Vec<String>,
    counts: Counts,
}

/// A write rate relative to the ring-gap rate of `nodes` members: none, below, at, above.
fn draw_write_rate(rng: &mut SplitMix64, nodes: u32) -> u64 {
    let gap_rate = u64::from(nodes) * RING_RATE;
    match rng.below(5) {
        0 => 0,
        1 => gap_rate / 2,
        2 => gap_rate,
        3 => gap_rate * 3 / 2,
        _ => gap_rate * 3,
    }
}

/// The write load of one tick: the rate moves, a rogue client writes to one member; returns
/// how many changes were injected.
fn inject_load(w: &mut World, nodes: u32, rng: &mut SplitMix64) -> u64 {
    let mut faults = 0;
    if rng.chance(0.03) {
        w.write_rate = draw_write_rate(rng, nodes);
        faults += 1;
    }
    if rng.chance(0.01) && w.rogue.is_none_or(|r| w.t >= r.until) {
        let ords: Vec<u32> = w.pods.keys().copied().collect();
        if let Some(o) = ords.get(rng.below(ords.len() as u64) as usize) {
            w.rogue = Some(Rogue {
                member: *o,
                until: w.t + 5 + rng.below(30),
                rate: RING_RATE + 1 + rng.below(2 * RING_RATE),
                open: false,
            });
            faults += 1;
        }
    }
    faults
}

/// The users and the faults of one tick; returns how many were injected.
fn inject_faults(
    w: &mut World,
    members: &BTreeSet<u32>,
    spec: &mut ClusterSpec,
    ops: &mut u64,
    rng: &mut SplitMix64,
) -> u64 {
    let t = w.t;
    let rf = spec.replication_factor;
    let mut faults = 0;
    let ords: Vec<u32> = w.pods.keys().copied().collect();
    let pick = |rng: &mut SplitMix64| ords.get(rng.below(ords.len() as u64) as usize).copied();
    if rng.chance(0.02)
        && let Some(o) = pick(rng)
    {
        let p = w.pods.get_mut(&o).unwrap();
        if p.running() {
            p.crashed_until = Some(t + 2 + rng.below(8));
            p.stopped_at = t;
            faults += 1;
        }
    }
    if rng.chance(0.004) {
        // Several members crash at once (a node or a zone goes): replicationFactor of them.
        for _ in 0..rf {
            if let Some(o) = pick(rng)
                && let Some(p) = w.pods.get_mut(&o)
                && p.running()
            {
                p.crashed_until = Some(t + 2 + rng.below(8));
                p.stopped_at = t;
                faults += 1;
            }
        }
    }
    if rng.chance(0.02)
        && let Some(o) = pick(rng)
    {
        w.scrape_hang_until.insert(o, t + 1 + rng.below(10));
        faults += 1;
    }
    if rng.chance(0.02)
        && let Some(o) = pick(rng)
    {
        w.drain_hang_until.insert(o, t + 1 + rng.below(20));
        faults += 1;
    }
    if rng.chance(0.01)
        && let Some(o) = pick(rng)
    {
        // A user deletes a pod: it comes back on its volume.
        if let Some(p) = w.pods.get_mut(&o)
            && p.deleted_at.is_none()
        {
            p.deleted_at = Some(t);
            faults += 1;
        }
    }
    let all_up = members.iter().all(|o| {
        w.pods
            .get(o)
            .is_some_and(|p| p.running() && p.deleted_at.is_none() && p.phase == Phase::Active)
    });
    if rng.chance(0.01)
        && w.rf > 1
        && w.fully_replicated()
        && all_up
        && let Some(o) = pick(rng)
    {
        // A careful user replaces a member with a fresh volume, only when fully
        // replicated, every member up, and its data has other copies (never with
        // replicationFactor 1). What its pinned clients write meanwhile is theirs to lose.
        let others = w.active();
        let copied = (0..PARTITIONS)
            .all(|p| !w.holds(o, p) || others.iter().any(|m| *m != o && w.holds(*m, p)))
            && w.vols.contains_key(&o)
            && w.unique_writes(o, None) == 0;
        if copied
            && let Some(p) = w.pods.get_mut(&o)
            && p.deleted_at.is_none()
        {
            p.deleted_at = Some(t);
            let v = w.vols.get_mut(&o).unwrap();
            v.deleting = true;
            v.user_discarded = true;
            faults += 1;
        }
    }
    if rng.chance(0.01)
        && let Some(o) = pick(rng)
    {
        // A user asks for a fresh volume of a member (annotates its pod), at any moment.
        let p = w.pods.get_mut(&o).unwrap();
        if !p.replace_volume {
            p.replace_volume = true;
            faults += 1;
        }
    }
    if rng.chance(0.01)
        && let Some(o) = pick(rng)
    {
        // A user asks for a safe restart of a member on its own volume (annotates its pod).
        let p = w.pods.get_mut(&o).unwrap();
        if !p.restart {
            p.restart = true;
            faults += 1;
        }
    }
    if rng.chance(0.03) {
        spec.nodes = rf + 1 + rng.below(4) as u32;
        faults += 1;
    }
    if rng.chance(0.03) {
        // The client load moves (what the autoscaler follows, when it is on).
        *ops = rng.below(100 * u64::from(rf + 5));
        faults += 1;
    }
    if rng.chance(0.01) {
        w.version += 1;
        // Every other change of the pod spec is a new member image (no draw of its own: the
        // schedule's other draws stay as they were).
        if w.version % 2 == 1 {
            w.image += 1;
        }
        // One change in four makes pods the API server refuses, until the next change.
        if rng.chance(0.25) {
            w.refused_version = Some(w.version);
        }
        faults += 1;
    }
    if rng.chance(0.005) {
        // Another storage class: every volume is replaced, one member at a time.
        w.storage.class += 1;
        faults += 1;
    }
    if rng.chance(0.01) {
        // A larger size grows volumes in place; a smaller one replaces them.
        let size = &mut w.storage.size_gi;
        *size = if *size > 1 && rng.chance(0.3) {
            *size - 1
        } else {
            *size + 1 + rng.below(3)
        };
        faults += 1;
    }
    if rng.chance(0.02) {
        spec.paused = !spec.paused;
        faults += 1;
    }
    if rng.chance(0.008) {
        // Hibernate or wake; at times with fresh volumes asked for on a wake past the grace.
        spec.hibernation = !spec.hibernation;
        spec.fresh_volumes_on_wake = rng.chance(0.3);
        faults += 1;
    }
    if rng.chance(0.01) {
        // Fence a member (at times a second one), or unfence one.
        match pick(rng) {
            Some(o) if spec.fenced.len() < 2 && rng.chance(0.6) => spec.fenced.insert(o),
            _ => spec.fenced.pop_first().is_some(),
        };
        faults += 1;
    }
    if rng.chance(0.01) && w.split.as_ref().is_none_or(|(u, _)| t >= *u) {
        // Gossip splits in two halves, for long enough (at times) to be a suspected
        // partition.
        let side: BTreeSet<u32> = ords.iter().copied().filter(|_| rng.chance(0.5)).collect();
        w.split = Some((t + 5 + rng.below(50), side));
        faults += 1;
    }
    if rng.chance(0.01)
        && let Some(o) = pick(rng)
    {
        // One member's view swaps a member for a stranger: the count is right.
        w.stranger_until.insert(o, t + 5 + rng.below(50));
        faults += 1;
    }
    if rng.chance(0.01) {
        // A user makes a pod with a member's name and the cluster's labels, not controlled by
        // the cluster (or orphans one): on a name that is free, a member's or not. Deleted
        // again later.
        let o = rng.below(u64::from(spec.nodes) + 3) as u32;
        if !w.pods.contains_key(&o) {
            w.look_alikes.insert(o, t + 3 + rng.below(40));
            faults += 1;
        }
    }
    for o in w.pods.keys() {
        if !w.view_lag.contains_key(o) || rng.chance(0.1) {
            w.view_lag.insert(*o, rng.below(4) as usize);
        }
    }
    faults
}

fn trace_world(w: &World, status: &Status, spec: &ClusterSpec) {
    let pods: Vec<String> = w
        .pods
        .iter()
        .map(|(o, p)| {
            format!(
                "{o}:{:?}{}{}{} holds {} alone {} rounds {} input {}{}",
                p.phase,
                if p.running() { "" } else { "/crashed" },
                if p.drained { "/drained" } else { "" },
                if p.deleted_at.is_some() {
                    "/deleted"
                } else {
                    ""
                },
                w.vols
                    .get(o)
                    .map_or(0, |v| v.data.iter().filter(|x| **x).count()),
                w.unique_writes(*o, None),
                p.rounds,
                p.input_bytes,
                match (w.pending(*o), p.asked.keys().collect::<Vec<_>>()) {
                    (pending, asked) if pending.is_empty() && asked.is_empty() => String::new(),
                    (pending, asked) => format!(
                        " pending {pending:?} asked {asked:?}{}{}",
                        if p.returning { " returning" } else { "" },
                        if p.resume.is_empty() {
                            String::new()
                        } else {
                            format!(" resume {:?}", p.resume)
                        }
                    ),
                },
            )
        })
        .collect();
    eprintln!(
        "t={} world {pods:?} members {:?} nodes {} paused {} hibernation {} (recorded {}, fresh volumes on wake {}) fenced {:?}",
        w.t,
        status.memory.members,
        spec.nodes,
        spec.paused,
        spec.hibernation,
        status.memory.hibernated,
        spec.fresh_volumes_on_wake,
        spec.fenced
    );
}

/// The operator's side of one schedule: its status, and its restarts.
struct Operator {
    spec: ClusterSpec,
    policy: Option<Policy>,
    persisted: Status,
    /// The status before the last write: what a stale cache still shows.
    previous: Status,
    down_until: u64,
    /// The shell's client-input ledger: in memory, lost when the operator crashes.
    ledger: input::Ledger,
}

/// What one pass of the operator did.
struct Pass {
    phase: ClusterPhase,
    quiet: bool,
    target: u32,
    /// Down members of a mass failure whose volume is stale: the operator holds them for the
    /// user's decision (keep the data or discard it), as `docs/storage.md` says.
    held_stale: Vec<u32>,
    /// Members of a wake refused for their stale volumes (`WakeRefused`): the user decides
    /// too, as `docs/hibernation.md` says.
    refused_wake: Vec<u32>,
    /// Members without a pod on a stale volume (e.g. unfenced after the grace).
    away_stale: Vec<u32>,
    /// Stale volumes the operator keeps for the user (`Decision::kept_stale`).
    kept_stale: Vec<u32>,
    /// Why it is blocked, if it is.
    blocked: Option<BlockReason>,
    /// Its hand-off is held by repairs still carrying a stalled window's backlog.
    held_by_stalled_window: bool,
}

impl Operator {
    /// The watch's fast path, or the start of a pass: creations of an unchanged membership
    /// from the caches alone, before any scrape, on a status that may be stale.
    fn create_early(
        &self,
        w: &mut World,
        rng: &mut SplitMix64,
        faulty: bool,
        counts: &mut Counts,
        violations: &mut Vec<String>,
    ) -> Vec<Action> {
        let stale = faulty && rng.chance(0.15);
        let status = if stale {
            &self.previous
        } else {
            &self.persisted
        };
        let unscraped = w.observe(rng, &status.memory.members, 0.0, false);
        let last_asked = self.policy.as_ref().and(status.scale.desired);
        let target = unscraped_target(&self.spec, last_asked);
        let now = w.t as Millis * 1000;
        let made = creations_before_scrapes(&target, &status.memory, &unscraped, now).actions;
        let mass = mass_failure(&target, &status.memory, &unscraped);
        for a in &made {
            counts.invariant_checks += 2;
            if let Some(m) = &mass {
                mass_failure_allows(a, &status.memory, m, w.t, violations);
            }
            let o = ordinal_of(a);
            if target.fenced.contains(&o)
                || (target.hibernation && status.memory.disruption.is_none())
            {
                violations.push(format!(
                    "t={}: {a:?} before the scrapes while fenced or hibernated",
                    w.t
                ));
            }
            match a {
                Action::CreatePod(o) | Action::CreatePvc(o)
                    if status.memory.members.contains(o) => {}
                _ => violations.push(format!("t={}: {a:?} before the scrapes", w.t)),
            }
            count_creation(w, a, counts);
            if let Err(e) = w.apply(*a, &self.persisted.memory.members) {
                violations.push(format!("t={}: {e}", w.t));
            }
        }
        counts.early_creations += made.len() as u64;
        if stale {
            counts.early_creations_stale += made.len() as u64;
        }
        made
    }

    /// One pass as the shell runs it: size, decide, derive the Events, record, act.
    fn pass(
        &mut self,
        w: &mut World,
        rng: &mut SplitMix64,
        faulty: bool,
        counts: &mut Counts,
        violations: &mut Vec<String>,
    ) -> Pass {
        let t = w.t;
        let now = t as Millis * 1000;
        let made = if rng.chance(0.5) {
            self.create_early(w, rng, faulty, counts, violations)
        } else {
            Vec::new()
        };
        let stale = faulty && rng.chance(0.15);
        let status = if stale {
            &self.previous
        } else {
            &self.persisted
        };
        let timeouts = if faulty { 0.03 } else { 0.0 };
        let mut observed = w.observe(rng, &status.memory.members, timeouts, true);
        let reads = observed
            .iter()
            .filter_map(|(o, m)| {
                let p = w.pods.get(o)?;
                let read = input::Read {
                    pod_uid: format!("{o}@{}", p.created_at),
                    input: m.scrape.as_ref().and_then(|s| s.client_input_bytes),
                    sent: w.own_sent.get(o).copied().flatten(),
                };
                Some((*o, read))
            })
            .collect();
        for (o, client) in self.ledger.observe(&reads, w.t as Millis * 1000) {
            if let Some(m) = observed.get_mut(&o) {
                m.client_input = client;
            }
        }
        // The operator's one call into the core, as the shell makes it.
        let plan = pass::plan(&pass::PassInput {
            password: w.password_record(),
            spec: &self.spec,
            policy: self.policy.as_ref(),
            memory: &status.memory,
            observed: &observed,
            load: &status.load,
            scale: &status.scale,
            reported: &status.reported,
            removal_choices: &[],
            look_alikes: &[],
            now,
        });
        let (sizing, d) = (&plan.sizing, &plan.decision);
        if sizing.spec.target() as usize != status.memory.members.len() && sizing.scaling.is_some()
        {
            counts.autoscaler_moves += 1;
        }
        let reporting = Reporting {
            scaling: sizing.scaling.as_ref(),
            write_stopped: &plan.write_stopped,
            unknown_choices: &plan.unknown_choices,
            mass_failure: d.mass_failure.as_ref(),
            suspected_partition: d.suspected_partition.as_ref(),
        };
        let notes = &plan.changes;
        let (held_stale, away_stale, refused_wake) =
            away_on_stale_volumes(d, &observed, self.spec.stale_volume_grace_ms, now);
        let pass = Pass {
            phase: d.phase,
            // Nothing left to do, a rotation included.
            quiet: d.actions.is_empty()
                && plan.password.set_on.is_empty()
                && !plan.password.remember
                && !plan.password.record
                && !matches!(plan.password.state, PasswordState::Rotating { .. }),
            target: sizing.spec.target(),
            held_stale,
            refused_wake,
            away_stale,
            kept_stale: d.kept_stale.clone(),
            blocked: d.blocked.as_ref().map(|b| b.reason),
            // A removal reports its hold; a restart says it in its progress only.
            held_by_stalled_window: d.hold.as_ref().is_some_and(|h| {
                h.reason == BlockReason::LeaverBacklog && h.moving == Moving::Repairs
            }) || d.progress.as_ref().is_some_and(|p| {
                p.contains("'s replication window is stalled (")
                    || p.contains("'s replication ring may have dropped writes")
            }),
        };
        // The status write carries the resourceVersion the decision was based on: a decision
        // made on a stale status conflicts (409) and nothing is done.
        if stale || (faulty && rng.chance(0.05)) {
            return pass;
        }
        counts.invariant_checks += 2;
        if d.memory.members.len() < self.persisted.memory.members.len()
            && (d.memory.members.len() as u32) < self.spec.floor()
        {
            violations.push(format!(
                "t={t}: members {} below the floor {}",
                d.memory.members.len(),
                self.spec.floor()
            ));
        }
        let written = Status {
            memory: d.memory.clone(),
            load: sizing.load.clone(),
            scale: sizing
                .scaling
                .as_ref()
                .map(|s| s.memory.clone())
                .unwrap_or_default(),
            reported: Reported {
                autoscale_desired: sizing.scaling.as_ref().map(|s| s.desired),
                write_stopped: plan.write_stopped.clone(),
                mass_failure: d.mass_failure.is_some(),
                suspected_partition: d.suspected_partition.is_some(),
                ..Reported::default()
            },
        };
        look_alike_holds(&observed, d, &sizing.spec, t, counts, violations);
        count_load(w, &status.memory, d, &observed);
        check_victim(w, &status.memory, &sizing.spec, d, counts, violations);
        if d.memory.removal().is_some_and(|r| {
            r.reason == VictimReason::NeverStarted
                && status
                    .memory
                    .removal()
                    .is_none_or(|p| p.ordinal != r.ordinal)
        }) {
            counts.never_started_removals += 1;
        }
        scale_up_in_batches(
            &sizing.spec,
            &status.memory,
            &observed,
            d,
            t,
            counts,
            violations,
        );
        stops_hold(
            &sizing.spec,
            &status.memory,
            &observed,
            d,
            w,
            counts,
            violations,
        );
        // In a mass failure (by the rule itself, over what this pass was given), the operator
        // only re-creates pods on their own volumes (and volumes of members never Active).
        if let Some(m) = mass_failure(&sizing.spec, &status.memory, &observed) {
            counts.mass_failure_passes += 1;
            // Stopping a member for the user's hibernation or fence loses nothing: the volume stays.
            for a in d.actions.iter().filter(|a| !is_stop(a, &sizing.spec, d)) {
                counts.invariant_checks += 1;
                mass_failure_allows(a, &status.memory, &m, t, violations);
            }
            if !d.memory.members.is_superset(&status.memory.members) {
                violations.push(format!(
                    "t={t}: a member removed in a mass failure: {:?} → {:?}",
                    status.memory.members, d.memory.members
                ));
            }
            if d.mass_failure.as_ref() != Some(&m) {
                violations.push(format!("t={t}: mass failure {m:?} not reported"));
            }
        }
        views_hold(
            &status.memory,
            &observed,
            d,
            &sizing.spec,
            t,
            counts,
            violations,
        );
        // Events only on transitions: once written, the same report says nothing new.
        if !transition_notes(&sizing.spec, &written.reported, reporting).is_empty() {
            violations.push(format!("t={t}: a reported change would be reported again"));
        }
        counts.transition_notes += notes.len() as u64;
        // A fresh volume reported done: the member runs on another volume than the one it was
        // asked to leave.
        for n in d.notes.iter().filter(|n| n.reason == "VolumeReplaced") {
            counts.invariant_checks += 1;
            counts.fresh_volumes += 1;
            let left = match status.memory.roll().map(|r| (r.ordinal, &r.reason)) {
                Some((o, RollReason::VolumeRequested { pvc })) => {
                    w.vols.get(&o).is_some_and(|v| v.uid.to_string() != *pvc)
                }
                _ => false,
            };
            if !left {
                violations.push(format!("t={t}: {}: on the same volume", n.message));
            }
        }
        count_stale(w, d, &observed, counts, violations);
        check_restart(w, d, &status.memory, &observed, counts, violations);
        check_roll_cut(w, d, &observed, self.spec.replication_factor, violations);
        counts.node_moves += d
            .notes
            .iter()
            .filter(|n| n.reason == "MemberMovedOffNode")
            .count() as u64;
        self.previous = std::mem::replace(&mut self.persisted, written);
        self.ledger.recorded();
        let actions = still_to_do(&d.actions, &made);
        let n = if faulty && rng.chance(0.02) {
            counts.faults += 1;
            self.down_until = t + 1 + rng.below(5);
            self.ledger = input::Ledger::default();
            rng.below(actions.len() as u64 + 1) as usize
        } else {
            actions.len()
        };
        if w.trace {
            eprintln!(
                "t={t} progress {:?} blocked {:?} mass {:?}",
                d.progress, d.blocked, d.mass_failure
            );
        }
        if w.trace && !actions.is_empty() {
            eprintln!("t={t} {:?} actions {:?}", d.phase, &actions[..n]);
        }
        w.new_pods_off = d.memory.upgrade().is_some();
        w.whole_down = d
            .memory
            .upgrade()
            .is_some_and(|u| u.step >= UpgradeStep::Stopping);
        w.whole_starting = d
            .memory
            .upgrade()
            .is_some_and(|u| u.step == UpgradeStep::Starting);
        counts.upgrades_started += d
            .notes
            .iter()
            .filter(|n| n.reason == "WholeClusterUpgradeStarted")
            .count() as u64;
        counts.upgrades_done += d
            .notes
            .iter()
            .filter(|n| n.reason == "WholeClusterUpgraded")
            .count() as u64;
        counts.mixed_version_passes +=
            u64::from(plan.versions.mix() == marekvs_core::versions::Mix::Mixed);
        let pass_at = w.t as Millis * 1000;
        for l in d.memory.samples.values().filter_map(|s| s.window_lost) {
            if l.at == pass_at {
                match l.cause {
                    WindowLossCause::Restarted => counts.restart_losses += 1,
                    WindowLossCause::RingAtCap => counts.ring_cap_losses += 1,
                }
            }
        }
        counts.window_loss_holds += u64::from(
            d.progress
                .as_ref()
                .is_some_and(|p| p.contains("replication ring may have dropped writes")),
        );
        counts.downgrades_held += u64::from(
            d.blocked.as_ref().map(|b| b.reason) == Some(BlockReason::DowngradeNotAllowed),
        );
        let members = &self.persisted.memory.members;
        apply_actions(
            w,
            &actions[..n],
            &sizing.spec,
            d,
            members,
            counts,
            violations,
        );
        // Never locked out: every member takes a password the operator knows.
        for (o, m) in &observed {
            counts.invariant_checks += 1;
            if m.password == PasswordTaken::Neither {
                violations.push(format!(
                    "t={t}: member {o} takes none of the passwords the operator knows"
                ));
            }
        }
        if n == actions.len() {
            w.carry_out_password(&plan.password, counts);
        }
        if n == actions.len() {
            w.grow_volumes(counts, violations);
            w.record_absences(&plan.absences, &observed, counts);
        }
        pass
    }
}

/// While a look-alike holds a name, nothing disruptive is done (and `World::apply` refuses any
/// action in its name).
fn look_alike_holds(
    observed: &BTreeMap<u32, MemberObs>,
    d: &Decision,
    spec: &ClusterSpec,
    t: u64,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    if !observed.values().any(|m| m.look_alike) {
        return;
    }
    counts.look_alike_passes += 1;
    if d.blocked.as_ref().map(|b| b.reason) == Some(BlockReason::LookAlike) {
        counts.look_alike_blocked += 1;
    }
    for a in &d.actions {
        counts.invariant_checks += 1;
        if matches!(
            a,
            Action::Drain(_) | Action::DeletePod(_) | Action::DeletePvc(_)
        ) && !is_stop(a, spec, d)
        {
            violations.push(format!("t={t}: {a:?} while a look-alike is there"));
        }
    }
}

/// What the write load did to this pass: a hand-off held by the leaver's client input or by
/// its anti-entropy rounds, a member removed (under load), a gate figure read as unknown.
fn count_load(w: &mut World, before: &Memory, d: &Decision, observed: &BTreeMap<u32, MemberObs>) {
    if let Some(h) = d
        .hold
        .as_ref()
        .filter(|h| h.reason == BlockReason::LeaverBacklog)
    {
        if h.moving == Moving::ClientTraffic && h.message.contains("still receives client commands")
        {
            w.load.held_by_client_input += 1;
        }
        if h.moving == Moving::AntiEntropy && h.message.contains("anti-entropy rounds that hand on")
        {
            w.load.held_by_rounds += 1;
        }
        if h.moving == Moving::Shipping {
            w.load.held_by_shipping += 1;
        }
        if h.moving == Moving::Repairs {
            w.load.held_by_stalled_window += 1;
        }
    }
    if d.memory.members.len() < before.members.len() {
        w.load.removals += 1;
        if w.write_rate > 0 {
            w.load.removals_under_load += 1;
        }
    }
    let unknown = |m: &MemberObs| {
        m.client_input.is_none()
            || m.scrape
                .as_ref()
                .is_some_and(|s| s.ae_rounds.is_none() || s.client_input_bytes.is_none())
    };
    if observed.values().any(unknown) {
        w.load.unknown_figure_passes += 1;
    }
}

/// Members without a pod on a stale volume: those a mass failure holds, all of them, and
/// those whose wake was refused (`WakeRefused`): what the user decides about once faults stop.
fn away_on_stale_volumes(
    d: &Decision,
    observed: &BTreeMap<u32, MemberObs>,
    grace_ms: Millis,
    now: Millis,
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let away_stale: Vec<u32> = d
        .memory
        .members
        .iter()
        .copied()
        .filter(|o| {
            observed.get(o).is_some_and(|m| {
                m.pod.is_none()
                    && m.pvc
                        .as_ref()
                        .is_some_and(|v| !v.terminating && is_stale(v, grace_ms, now))
            })
        })
        .collect();
    let held_stale = away_stale
        .iter()
        .copied()
        .filter(|o| d.mass_failure.as_ref().is_some_and(|m| m.down.contains(o)))
        .collect();
    let refused = d.blocked.as_ref().map(|b| b.reason) == Some(BlockReason::WakeRefused);
    let refused_wake = if refused {
        away_stale.clone()
    } else {
        Vec::new()
    };
    (held_stale, away_stale, refused_wake)
}

/// The removal victim's pod is deleted only when no client sent it a command in the interval
/// its last scrape covered (since the sample before this pass); no removal starts with
/// replicationFactor 1.
fn check_victim(
    w: &mut World,
    before: &Memory,
    spec: &ClusterSpec,
    d: &Decision,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    let t = w.t;
    counts.invariant_checks += 1;
    if spec.replication_factor < 2 && before.removal().is_none() && d.memory.removal().is_some() {
        violations.push(format!(
            "t={t}: {:?} started with replicationFactor 1",
            d.memory.removal()
        ));
    }
    // The removal going on after this pass (a cancelled one's victim is recycled on its own
    // volume: nothing of it is lost).
    let Some(v) = d.memory.removal().map(|r| r.ordinal) else {
        return;
    };
    // A stop for a fence or hibernation keeps the volume and the membership: not a removal.
    let delete = Action::DeletePod(v);
    if !d.actions.contains(&delete) || is_stop(&delete, spec, d) {
        return;
    }
    let Some(p) = w.pods.get(&v).filter(|p| p.deleted_at.is_none()) else {
        return;
    };
    // A restart on its own volume to close its client connections: what it took stays on
    // its volume, which must stay (the removal goes on with the member back on it).
    let now = t as Millis * 1000;
    if d.memory
        .removal()
        .is_some_and(|r| r.connections_cut_at == Some(now))
    {
        w.load.connection_cuts += 1;
        if d.actions.contains(&Action::DeletePvc(v)) || !d.memory.members.contains(&v) {
            violations.push(format!(
                "t={t}: the restart of {v} to close its connections lost its volume or membership"
            ));
        }
        return;
    }
    w.load.victim_deletions_checked += 1;
    if p.wedged {
        w.load.victims_deleted_wedged += 1;
    }
    let joining_gauge = w
        .pods
        .iter()
        .any(|(o, q)| *o != v && q.resp_open() && q.gauges.join_pending > 0);
    if joining_gauge {
        w.load.deletions_past_join_gauge += 1;
    }
    let last_scraped = before.samples.get(&v).map(|s| s.sampled_at);
    if let Some(input) = p.last_input
        && last_scraped.is_none_or(|at| input as Millis * 1000 > at)
    {
        violations.push(format!(
            "t={t}: deleted the pod of the removal victim {v}, which received client input at t={input} (its sample before this pass: {last_scraped:?} ms)"
        ));
    }
}

/// The pass's actions, in order, on the world.
fn apply_actions(
    w: &mut World,
    actions: &[Action],
    spec: &ClusterSpec,
    d: &Decision,
    members: &BTreeSet<u32>,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    for a in actions {
        count_creation(w, a, counts);
        // A rolling change drains its member only once the API server admits the pod that
        // will replace it.
        if let Action::Drain(o) = a
            && matches!(&d.memory.disruption, Some(Disruption::Roll(r)) if r.ordinal == *o)
        {
            if w.refused_version == Some(w.version) {
                violations.push(format!(
                    "t={}: drained {o} for a rolling change whose new pod the API server refuses",
                    w.t
                ));
            }
            counts.roll_drains += 1;
        }
        if let Action::CheckPod(_) = a {
            counts.pod_checks += 1;
        }
        let at_risk = if w.vols.contains_key(&a.ordinal()) {
            w.unique_writes(a.ordinal(), Some(w.keep_mask(members)))
        } else {
            0
        };
        let running = w
            .pods
            .get(&a.ordinal())
            .is_some_and(|p| p.deleted_at.is_none());
        if matches!(a, Action::DeletePod(_) | Action::DeleteUnstartedPod(_))
            && !is_stop(a, spec, d)
            && running
            && at_risk > 0
        {
            w.load.pods_deleted_with_unique += 1;
            w.load.writes_at_risk += at_risk;
        }
        let discarded = matches!(a, Action::DeletePvc(o) if fresh_wake_of(d, *o));
        if discarded {
            w.discard_volume(a, members);
        } else if let Err(e) = w.apply(*a, members) {
            violations.push(format!("t={}: {e}", w.t));
        }
        // The shell builds the removal victim's pod labelled off (`build::pod`).
        if let Action::CreatePod(o) = a
            && d.memory.removal().is_some_and(|r| r.ordinal == *o)
            && let Some(p) = w.pods.get_mut(o)
        {
            p.client_off = true;
        }
        if let Action::DeletePod(o) = a
            && is_stop(a, spec, d)
        {
            // Stopped by the user's hibernation or fence, not a disruption of the runbook.
            w.op_deleted.remove(o);
        }
    }
}

/// A pod about to be created on a volume with an absence recorded: within the grace it is
/// reused; past it `World::apply` reports the violation.
fn count_creation(w: &World, a: &Action, counts: &mut Counts) {
    let now = w.t as Millis * 1000;
    if let Action::CreatePod(o) = a
        && !w.pods.contains_key(o)
        && let Some(since) = w.vols.get(o).and_then(|v| v.absent_since)
    {
        counts.invariant_checks += 1;
        if now - since <= w.stale_grace_ms {
            counts.stamped_volumes_reused += 1;
        }
    }
}

/// Members without a pod on a stale volume (the case the invariant guards), and stale volumes
/// announced as replaced: each such volume is stale, and the pass deletes it.
fn count_stale(
    w: &World,
    d: &Decision,
    observed: &BTreeMap<u32, MemberObs>,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    let now = w.t as Millis * 1000;
    let stale = |o: &u32| {
        observed
            .get(o)
            .and_then(|m| m.pvc.as_ref())
            .is_some_and(|v| !v.terminating && is_stale(v, w.stale_grace_ms, now))
    };
    counts.stale_volume_checks += d
        .memory
        .members
        .iter()
        .filter(|o| stale(o) && observed.get(o).is_none_or(|m| m.pod.is_none()))
        .count() as u64;
    for n in d.notes.iter().filter(|n| n.reason == "StaleVolumeReplaced") {
        counts.stale_volumes_replaced += 1;
        counts.invariant_checks += 1;
        let replaced = n
            .member
            .is_some_and(|o| stale(&o) && d.actions.contains(&Action::DeletePvc(o)));
        if !replaced {
            violations.push(format!("t={}: {} (not stale, or kept)", w.t, n.message));
        }
    }
}

/// A restart asked for on a pod keeps its member's volume (only an outdated or stale one may
/// go), and one reported done runs a pod created since the restart was recorded.
fn check_restart(
    w: &World,
    d: &Decision,
    before: &Memory,
    observed: &BTreeMap<u32, MemberObs>,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    let restarting = |m: &Memory| m.roll().filter(|r| r.restart_requested()).cloned();
    let Some(r) = restarting(&d.memory).or_else(|| restarting(before)) else {
        return;
    };
    let now = w.t as Millis * 1000;
    counts.invariant_checks += 1;
    // Only a volume the spec cannot keep (another class, with replaceVolumes) or a stale one
    // may go.
    let may_go = observed
        .get(&r.ordinal)
        .and_then(|m| m.pvc.as_ref())
        .is_some_and(|v| v.outdated || is_stale(v, w.stale_grace_ms, now));
    if d.actions.contains(&Action::DeletePvc(r.ordinal)) && !may_go {
        violations.push(format!(
            "t={}: the restart of {} deleted its volume",
            w.t, r.ordinal
        ));
    }
    for n in d.notes.iter().filter(|n| n.reason == "MemberRestarted") {
        counts.restarts += 1;
        let since_recorded = |p: &Pod| p.created_at as Millis * 1000 >= r.started_at;
        if !w.pods.get(&r.ordinal).is_some_and(since_recorded) {
            violations.push(format!("t={}: {}: not restarted", w.t, n.message));
        }
    }
}

/// A restart of a rolling change taken before its hand-off passed, to close the client
/// connections still writing to its member: only where its volume comes back with what they
/// wrote.
fn check_roll_cut(
    w: &mut World,
    d: &Decision,
    observed: &BTreeMap<u32, MemberObs>,
    replication_factor: u32,
    violations: &mut Vec<String>,
) {
    let now = w.t as Millis * 1000;
    let Some(r) = d
        .memory
        .roll()
        .filter(|r| r.connections_cut_at == Some(now))
    else {
        return;
    };
    w.load.roll_connection_cuts += 1;
    let leaves = observed
        .get(&r.ordinal)
        .and_then(|m| m.pvc.as_ref())
        // At replicationFactor 1 no restart moves its member off its volume (`SingleCopy`).
        .is_none_or(|v| replication_factor >= 2 && r.leaves_volume(v));
    if leaves || d.actions.contains(&Action::DeletePvc(r.ordinal)) {
        violations.push(format!(
            "t={}: the restart of {} to close its connections left its volume",
            w.t, r.ordinal
        ));
    }
}

/// The member an action is about.
fn ordinal_of(a: &Action) -> u32 {
    a.ordinal()
}

/// A pod deletion that stops a member for `spec.hibernation` or `spec.fencedMembers`.
fn is_stop(a: &Action, spec: &ClusterSpec, d: &Decision) -> bool {
    let hibernating = spec.hibernation && d.memory.hibernated && d.memory.disruption.is_none();
    matches!(a, Action::DeletePod(o) if spec.fenced.contains(o) || hibernating || upgrade_stop(d))
}

/// A whole-cluster upgrade stopping every member, once what each took was handed on.
fn upgrade_stop(d: &Decision) -> bool {
    d.memory
        .upgrade()
        .is_some_and(|u| u.step == UpgradeStep::Stopping)
}

/// The volume of `o` replaced by a fresh-volume wake (`FreshVolumeOnWake` announced).
fn fresh_wake_of(d: &Decision, o: u32) -> bool {
    d.notes
        .iter()
        .any(|n| n.reason == "FreshVolumeOnWake" && n.member == Some(o))
}

/// Hibernation and fences: no pod or PVC created for a fenced member or while hibernated (a
/// removal or restart in progress finishes first); while a member is fenced, no drain, no
/// volume deleted, no pod deleted but a stop, no removal or restart started; a fresh-volume
/// wake only replaces a stale volume of a wake, and only when asked for.
fn stops_hold(
    spec: &ClusterSpec,
    memory: &Memory,
    observed: &BTreeMap<u32, MemberObs>,
    d: &Decision,
    w: &World,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    let t = w.t;
    let hibernated = spec.hibernation && memory.disruption.is_none();
    counts.hibernated_passes += u64::from(d.phase == ClusterPhase::Hibernated);
    counts.wakes += d.notes.iter().filter(|n| n.reason == "Woken").count() as u64;
    counts.fence_stops += d
        .notes
        .iter()
        .filter(|n| n.reason == "MemberFenced")
        .count() as u64;
    match d.blocked.as_ref().map(|b| b.reason) {
        Some(BlockReason::WakeRefused) => counts.wake_refused_passes += 1,
        Some(BlockReason::Fenced) => counts.fence_held_passes += 1,
        _ => {}
    }
    if hibernated || !spec.fenced.is_empty() {
        counts.stop_checks += 1;
    }
    for a in &d.actions {
        counts.invariant_checks += 1;
        let o = ordinal_of(a);
        let creation = matches!(a, Action::CreatePod(_) | Action::CreatePvc(_));
        if creation && (spec.fenced.contains(&o) || hibernated) {
            violations.push(format!("t={t}: {a:?} while fenced or hibernated"));
        }
        if is_stop(a, spec, d) && hibernated {
            counts.hibernation_stops += 1;
        }
        // Guarding a pod against evictions again protects it: a hold asks for it.
        let guards = matches!(a, Action::SetEviction { allowed: false, .. });
        let disruptive = !creation && !guards && !is_stop(a, spec, d);
        if disruptive && !spec.fenced.is_empty() {
            violations.push(format!("t={t}: {a:?} while {:?} fenced", spec.fenced));
        }
        if fresh_wake_of(d, o) {
            counts.fresh_volume_wakes += 1;
            let stale = observed
                .get(&o)
                .and_then(|m| m.pvc.as_ref())
                .is_some_and(|v| is_stale(v, spec.stale_volume_grace_ms, t as Millis * 1000));
            let wake = memory.hibernated && !spec.hibernation && spec.fresh_volumes_on_wake;
            if !(stale && wake && *a == Action::DeletePvc(o)) {
                violations.push(format!("t={t}: fresh-volume wake of {o} not asked for"));
            }
        }
    }
    if !spec.fenced.is_empty() && memory.disruption.is_none() && d.memory.disruption.is_some() {
        violations.push(format!(
            "t={t}: {:?} started while {:?} fenced",
            d.memory.disruption, spec.fenced
        ));
    }
}

/// What the operator may do in a mass failure: a pod on an existing volume, and a volume for a
/// member that never held data (Joining). No fresh volume for a member that held data, no
/// volume deleted, no drain, no pod deleted.
fn mass_failure_allows(
    a: &Action,
    memory: &Memory,
    m: &MassFailure,
    t: u64,
    violations: &mut Vec<String>,
) {
    let ok = match a {
        Action::CreatePod(_) => true,
        Action::CreatePvc(o) => {
            memory.phases.get(o) == Some(&MemberPhase::Joining) && !m.down.contains(o)
        }
        Action::DeletePvc(_)
        | Action::Drain(_)
        | Action::DeletePod(_)
        | Action::DeleteUnstartedPod(_) => false,
        // A label: moves no data. A dry run: makes nothing.
        Action::SetClientTraffic { .. } | Action::CheckPod(_) => true,
        // Guarding a pod again is always allowed; letting evictions take one is not.
        Action::SetEviction { allowed, .. } => !allowed,
    };
    if !ok {
        violations.push(format!(
            "t={t}: {a:?} in a mass failure (down: {:?})",
            m.down
        ));
    }
}

/// No disruptive step (drain, pod or volume deletion) and no new removal or restart while the
/// ready members' views disagree by identity (recomputed here from what the pass was given),
/// or while a suspected partition is reported.
fn views_hold(
    memory: &Memory,
    observed: &BTreeMap<u32, MemberObs>,
    d: &Decision,
    spec: &ClusterSpec,
    t: u64,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    let views: BTreeSet<BTreeSet<&str>> = memory
        .members
        .iter()
        .filter_map(|o| observed.get(o))
        .filter(|m| m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating))
        .filter_map(|m| m.view.as_ref().map(View::ids))
        .collect();
    let disagree = views.len() > 1;
    if d.suspected_partition.is_some() {
        counts.suspected_partition_passes += 1;
    }
    if !disagree && d.suspected_partition.is_none() {
        return;
    }
    counts.views_disagree_passes += u64::from(disagree);
    if memory.disruption.is_some() || memory.members.len() > spec.target() as usize {
        counts.views_held_passes += 1;
    }
    counts.invariant_checks += 2;
    if let Some(a) = d.actions.iter().find(|a| {
        matches!(
            a,
            Action::Drain(_) | Action::DeletePod(_) | Action::DeletePvc(_)
        ) && !is_stop(a, spec, d)
    }) {
        violations.push(format!(
            "t={t}: {a:?} while views disagree (suspected partition: {:?})",
            d.suspected_partition
        ));
    }
    if memory.disruption.is_none() && d.memory.disruption.is_some() {
        violations.push(format!(
            "t={t}: {:?} started while views disagree",
            d.memory.disruption
        ));
    }
}

/// Scale-up adds members in batches: the members a pass adds (not adopted: no pod yet), with
/// those already Joining, never exceed the larger of the batch, replicationFactor + 1 and the
/// members serving.
fn scale_up_in_batches(
    spec: &ClusterSpec,
    before: &Memory,
    observed: &BTreeMap<u32, MemberObs>,
    d: &Decision,
    t: u64,
    counts: &mut Counts,
    violations: &mut Vec<String>,
) {
    let added = d
        .memory
        .members
        .difference(&before.members)
        .filter(|o| observed.get(o).is_none_or(|m| m.pod.is_none()))
        .count();
    if added == 0 {
        return;
    }
    let joining = before
        .members
        .iter()
        .filter(|o| before.phases.get(o) == Some(&MemberPhase::Joining))
        .count();
    let serving = before.members.len() - joining;
    let cap = (spec.scale_up_batch.max(spec.floor()) as usize).max(serving);
    counts.invariant_checks += 1;
    if joining + added > cap {
        violations.push(format!(
            "t={t}: {added} members added beside {joining} joining, past the batch of {cap} ({serving} serving)"
        ));
    }
    if joining + added == cap && before.members.len() + added < spec.target() as usize {
        counts.scale_ups_batched += 1;
    }
}

/// The invariants that hold after every step.
fn check_step(w: &mut World, members: &BTreeSet<u32>, counts: &mut Counts) -> Vec<String> {
    let t = w.t;
    let mut violations = Vec::new();
    w.op_deleted.retain(|o| members.contains(o));
    // A whole-cluster upgrade stops every member at once, after its flush; once it starts
    // them, never a pod of one image running beside one of another. (A member re-created
    // during the flush, or rolled before it, may run the new image beside the old until the
    // stop: its traffic is off.)
    if w.whole_down {
        w.op_deleted.clear();
    }
    if w.whole_starting {
        counts.invariant_checks += 1;
        counts.whole_down_steps += 1;
        let images: BTreeSet<u32> = w
            .pods
            .values()
            .filter(|p| p.running())
            .map(|p| p.image)
            .collect();
        if images.len() > 1 {
            violations.push(format!(
                "t={t}: images {images:?} run at once in a whole-cluster upgrade"
            ));
        }
    }
    // At most one member disrupted by the operator.
    let disrupted: BTreeSet<u32> = members
        .iter()
        .copied()
        .filter(|o| {
            w.op_deleted.contains(o)
                || w.pods
                    .get(o)
                    .is_some_and(|p| p.drained && p.deleted_at.is_none())
        })
        .collect();
    if disrupted.len() > 1 {
        violations.push(format!("t={t}: members disrupted at once: {disrupted:?}"));
    }
    let lost = w.lost(members);
    if !lost.is_empty() {
        violations.push(format!("t={t}: partitions lost: {lost:?}"));
    }
    violations.extend(writes_lost(w, members));
    counts.invariant_checks += 3;
    violations
}

/// No acknowledged write is lost: every write tracked is on the volume of a member or of a
/// pod. Volumes that left the cluster (no pod, no longer a member) are then forgotten: their
/// data is not the cluster's any more (reused, they count as empty).
fn writes_lost(w: &mut World, members: &BTreeSet<u32>) -> Vec<String> {
    let keep = w.keep_mask(members);
    let mut violations = Vec::new();
    for (p, bs) in w.batches.iter().enumerate() {
        for b in bs.iter().filter(|b| b.holders & keep == 0) {
            let on: Vec<u32> = (0..64).filter(|o| b.holders & bit(*o) != 0).collect();
            violations.push(format!(
                "t={}: {} acknowledged writes of partition {p} lost: on no member's volume (held by {on:?}: deleted, or left the cluster)",
                w.t, b.n
            ));
        }
    }
    for bs in w.batches.iter_mut() {
        bs.retain(|b| b.holders & keep != 0);
    }
    let left: Vec<u32> = w
        .vols
        .keys()
        .copied()
        .filter(|o| keep & bit(*o) == 0)
        .collect();
    for o in left {
        w.forget_volume(o);
    }
    violations
}

fn run(seed: u64, trace: bool) -> Outcome {
    run_world(seed, trace, Broken::None)
}

/// What the world's nodes get wrong, on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Broken {
    None,
    /// `marekvs_ae_rounds_total` counts rounds that deliver nothing (no exchange, no offer).
    HollowRounds,
    /// `marekvs_net_input_bytes_total` counts the operator's own bytes only, and the ring's
    /// figures never move: client input is invisible, and so is the ring it fills.
    InvisibleInputAndShipping,
    /// `marekvs_repl_ops_sent_total` and `marekvs_repl_inflight_bytes` never move: a ring still
    /// shipping looks settled (gate v3, which did not read them).
    InvisibleShipping,
}

/// One schedule of a world broken as `broken` says.
fn run_world(seed: u64, trace: bool, broken: Broken) -> Outcome {
    let mut rng = SplitMix64(seed);
    let rf = 1 + rng.below(3) as u32;
    let spec = ClusterSpec {
        name: "demo".into(),
        nodes: rf + 1 + rng.below(3) as u32,
        replication_factor: rf,
        remove_first: BTreeSet::new(),
        reclaim_pvcs: rng.chance(0.5),
        settle_ms: 3_000,
        handoff_timeout_ms: 60_000,
        paused: false,
        // Short, so that kept volumes and long-down members go stale within a schedule.
        stale_volume_grace_ms: (10 + SplitMix64(!seed).below(30) as Millis) * 1000,
        hibernation: false,
        fresh_volumes_on_wake: false,
        fenced: Default::default(),
        // Drawn apart from the schedule's stream (its other draws stay as they were): small
        // batches bind on these small clusters.
        scale_up_batch: [1, 2, SCALE_UP_BATCH][SplitMix64(seed ^ 0x5ca1_ab1e).below(3) as usize],
        // Drawn apart from the schedule's stream, as the batch is.
        whole_cluster_upgrade: SplitMix64(seed ^ 0x0b6a_de00).below(3) == 0,
        image_release: None,
        allow_downgrade: false,
    };
    let policy = rng.chance(0.3).then(|| Policy {
        min_nodes: rf + 1,
        max_nodes: rf + 4,
        target_ops_per_node: 100.0,
        scale_down_stabilization_ms: 20_000,
        scale_up_cooldown_ms: 10_000,
        disk_high_water: 0.9,
    });
    let mut op = Operator {
        spec,
        policy,
        persisted: Status::default(),
        previous: Status::default(),
        down_until: 0,
        ledger: input::Ledger::default(),
    };
    let mut ops = rng.below(100 * u64::from(rf + 3));
    let mut w = World::new(rf as usize, op.spec.stale_volume_grace_ms, seed, trace);
    w.write_rate = draw_write_rate(&mut rng, op.spec.nodes);
    w.broken = broken;
    let mut counts = Counts::default();
    let mut violations = Vec::new();
    let mut converged = None;
    let mut refused = false;
    let mut ever_fenced = BTreeSet::new();
    for _ in 0..(FAULT_TICKS + CONVERGE_TICKS) {
        w.step();
        w.serve(ops);
        let members = op.persisted.memory.members.clone();
        w.drain_nodes(&members);
        let faulty = w.t <= FAULT_TICKS;
        if faulty && w.born {
            counts.faults += inject_faults(
                &mut w,
                &op.persisted.memory.members,
                &mut op.spec,
                &mut ops,
                &mut rng,
            );
            counts.faults += inject_load(&mut w, op.spec.nodes, &mut rng);
            ever_fenced.extend(op.spec.fenced.iter().copied());
            // A node is drained (`kubectl drain`: cordoned, its pods evicted where the PDB
            // lets them go), uncordoned once its maintenance is over, which may be after
            // faults stop: the moves it started must finish and the cluster converge.
            if w.drain_rng.chance(0.004) {
                let node = w.drain_rng.below(u64::from(NODES)) as u32;
                let until = w.t + 20 + w.drain_rng.below(300);
                w.draining.insert(node, until);
                counts.node_drains += 1;
                counts.faults += 1;
            }
            // The user changes the password's Secret, even mid-rotation, once the operator
            // recorded the value before (it records a value the first pass it sees it).
            let seen = w.settled == Some(w.secret) || w.since.contains(&w.secret);
            if w.pass_rng.chance(0.003) && seen {
                w.secret += 1;
                counts.password_changes += 1;
                counts.faults += 1;
            }
        } else if !faulty {
            // The load goes on at its last rate (anti-entropy repairs whatever differs, with
            // no cap): a scale-down must finish under it. The rogue client stops.
            w.rogue = None;
            op.spec.paused = false;
            op.spec.hibernation = false;
            op.spec.fenced.clear();
            w.look_alikes.clear();
            w.view_lag.values_mut().for_each(|l| *l = 0);
            w.split = None;
            w.stranger_until.clear();
            // The user fixes a spec whose pods are refused, as the cluster's Blocked says.
            if w.refused_version == Some(w.version) {
                w.version += 1;
                counts.refused_specs_fixed += 1;
            }
        }
        if w.trace {
            trace_world(&w, &op.persisted, &op.spec);
        }
        if w.t >= op.down_until {
            let pass = op.pass(&mut w, &mut rng, faulty, &mut counts, &mut violations);
            if !faulty && pass.phase == ClusterPhase::Healthy && pass.quiet {
                converged = Some(pass.target);
            }
            // A leaver whose window stalled waits for repairs to stop, which under a load
            // that never ends they do not: once faults stop, the user stops the load, as the
            // hold says (`docs/scale-down.md`).
            if !faulty && pass.held_by_stalled_window && w.write_rate > 0 {
                w.write_rate = 0;
                counts.loads_stopped_for_stalled_window += 1;
            }
            // With replicationFactor 1 a scale-down or a fresh volume is refused (SingleCopy):
            // once faults stop, the user keeps the members, as the refusal says.
            // A volume the spec can no longer keep stays as it is (the refusal is the outcome).
            if pass.blocked == Some(BlockReason::PodRefused) {
                counts.pod_refused_passes += 1;
            }
            if pass.blocked == Some(BlockReason::SingleCopy) {
                counts.single_copy_passes += 1;
                if !faulty {
                    op.spec.nodes = op.persisted.memory.members.len() as u32;
                    op.policy = None;
                    w.pods.values_mut().for_each(|p| p.replace_volume = false);
                    if pass.quiet {
                        refused = true;
                        converged = Some(op.spec.nodes);
                    }
                }
            }
            // Once faults stop, the user answers a held stale volume as documented: keeping
            // its data (the annotation removed; the operator stamps it again from now). Its
            // deletion would lose the only copies with replicationFactor 1, which the user may
            // choose but invariant 1 would rightly report.
            if !faulty {
                for o in &pass.held_stale {
                    if let Some(v) = w.vols.get_mut(o) {
                        v.absent_since = None;
                        counts.stale_held_for_user += 1;
                    }
                }
                // A stale volume kept because another member's volume first served after it
                // left (it may hold the last copy): the user keeps its data, as documented.
                for o in &pass.kept_stale {
                    if let Some(v) = w.vols.get_mut(o) {
                        v.absent_since = None;
                        counts.stale_kept_for_user += 1;
                    }
                }
                // A wake refused for stale volumes: the user keeps the data (as documented,
                // the absence record removed), or would set freshVolumesOnWake.
                for o in &pass.refused_wake {
                    if let Some(v) = w.vols.get_mut(o) {
                        v.absent_since = None;
                        counts.wake_refused_kept_by_user += 1;
                    }
                }
                // A member unfenced after the grace whose stale volume cannot be replaced (the
                // others are not fully replicated without it, e.g. replicationFactor - 1
                // members fenced): the user keeps its data, as documented.
                if pass.quiet {
                    for o in pass.away_stale.iter().filter(|o| ever_fenced.contains(o)) {
                        if let Some(v) = w.vols.get_mut(o) {
                            v.absent_since = None;
                            counts.fence_stale_kept_by_user += 1;
                        }
                    }
                }
            }
        }
        violations.extend(check_step(
            &mut w,
            &op.persisted.memory.members,
            &mut counts,
        ));
        if !violations.is_empty() || converged.is_some() {
            break;
        }
    }
    counts.steps = w.t;
    counts.load = w.load;
    counts.unstarted_pods_deleted = w.unstarted_deleted;
    counts.evictions = w.evictions;
    if violations.is_empty() {
        violations.extend(check_converged(
            &w,
            &op.persisted.memory,
            converged,
            refused,
        ));
    }
    Outcome { violations, counts }
}

/// Once faults stop, the cluster reaches the size asked for, every member up to date (but a
/// volume replacement refused with replicationFactor 1, `refused`).
fn check_converged(
    w: &World,
    memory: &Memory,
    converged: Option<u32>,
    refused: bool,
) -> Vec<String> {
    let mut violations = Vec::new();
    let Some(target) = converged else {
        violations.push(format!(
            "did not converge within {CONVERGE_TICKS} fault-free ticks: members {:?}, {:?}",
            memory.members, memory.disruption
        ));
        return violations;
    };
    if memory.members.len() as u32 != target {
        violations.push(format!(
            "converged with {} members, want {target}",
            memory.members.len()
        ));
    }
    let member_vol_outdated = memory
        .members
        .iter()
        .any(|o| w.vols.get(o).is_none_or(|v| !w.storage.satisfied_by(v)));
    if !refused && (w.pods.values().any(|p| p.version != w.version) || member_vol_outdated) {
        violations.push("converged with outdated members".into());
    }
    // Every rotation finished: the Secret's password recorded alone, and every running member
    // on it.
    let on_old: Vec<u32> = w
        .pods
        .iter()
        .filter(|(_, p)| p.resp_open() && p.pass != w.secret)
        .map(|(o, _)| *o)
        .collect();
    if w.settled != Some(w.secret) || !w.since.is_empty() || !on_old.is_empty() {
        violations.push(format!(
            "converged with the password rotation unfinished: secret {}, recorded {:?} and {:?}, members on another {on_old:?}",
            w.secret, w.settled, w.since
        ));
    }
    violations
}

/// Schedules that fail with the stepper of this branch, each with the violation it must report
/// (asserted: one that passes or fails otherwise fails the test, so the entry is removed once
/// fixed; any other failing schedule fails the test).
///
/// 8101: a volume-replacing rolling update (a fresh volume asked for) passed its hand-off gate;
/// views then disagreed and held the pod's deletion while the drained member kept taking client
/// writes above its ring rate (nothing cuts its traffic); its pod and then its PVC were deleted
/// on the strength of the old hand-off: 13 gapped writes lost. Fixed by gate v2 (the leaver's
/// client traffic cut before its drain, its ring checked): the list is empty.
const KNOWN_FAILING: &[(u64, &str)] = &[];

#[test]
fn no_schedule_loses_data_or_disrupts_two_members_and_every_one_converges() {
    if let Ok(seed) = std::env::var("DST_SEED") {
        let seed: u64 = seed.parse().expect("DST_SEED is a number");
        let o = run(seed, true);
        assert!(o.violations.is_empty(), "seed {seed}: {:?}", o.violations);
        return;
    }
    let schedules: u64 = std::env::var("DST_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let started = std::time::Instant::now();
    let mut counts = Counts::default();
    let mut failed = Vec::new();
    let mut known_failing = 0;
    for (seed, o) in over_seeds(0..schedules, |seed| run(seed, false)) {
        counts += o.counts;
        match KNOWN_FAILING.iter().find(|(s, _)| *s == seed) {
            Some((_, what)) if o.violations.iter().any(|v| v.contains(what)) => known_failing += 1,
            Some((_, what)) => failed.push((
                seed,
                vec![format!(
                    "listed in KNOWN_FAILING ({what}) but reports {:?}: update the list",
                    o.violations
                )],
            )),
            None if !o.violations.is_empty() => failed.push((seed, o.violations)),
            None => {}
        }
    }
    println!(
        "dst: {schedules} schedules, {} steps, {} faults injected, {} invariant checks, {} failing (+ {known_failing} known failing, listed in KNOWN_FAILING); \
         {} early creations ({} from a stale status), {} passes with the autoscaler moving the target, {} transition Events, {} volumes grown in place, {} fresh volumes asked for on a pod and carried out, {} restarts asked for on a pod and carried out, {} passes in a mass failure, \
         {} passes with views disagreeing by identity ({} with a removal or restart held), {} passes reporting a suspected partition; \
         volume absences: {} stamped, {} cleared, {} volumes first served from, {} stale volumes kept for the user (another member's volume first served after they left), {} pods created on a volume away within the grace, {} passes with a member's stale volume and no pod, {} stale volumes replaced, {} stale volumes of a mass failure kept by the user; \
         {} passes with a look-alike ({} of them holding a wanted disruptive step for it); \
         hibernation: {} pods stopped, {} passes Hibernated, {} wakes, {} passes with a wake refused ({} refused volumes kept by the user), {} stale volumes replaced by a fresh-volume wake; \
         fences: {} pods stopped, {} passes holding a wanted step for a fence, {} stale volumes of unfenced members kept by the user; {} passes checked with a member fenced or the cluster hibernated; \
         new pods: {} dry runs before a rolling drain, {} rolling drains (each after its pod was admitted), {} passes blocked on a refused pod, {} refused specs fixed by the user; \
         {} scale-ups that added a batch and left members for later, {} removals of a member whose container never started (no gate, no drain), {} of its pods deleted (each volume checked empty); \
         node drains: {} nodes cordoned, {} members moved off one, {} pods evicted (each let go by the operator); \
         passwords: {} changes of the Secret, {} values remembered before being set, {} set live, {} rotations recorded as over (every member checked to take a password the operator knows); \
         versions: {} passes with members on different releases, {} whole-cluster upgrades started, {} done, {} steps with every member stopped or starting for one (each checked for two images running), {} passes holding a downgrade; gate v4: {} restarts and {} readings at the ring's cap that may have lost unshipped writes, {} passes holding a leaver for one",
        counts.steps,
        counts.faults,
        counts.invariant_checks,
        failed.len(),
        counts.early_creations,
        counts.early_creations_stale,
        counts.autoscaler_moves,
        counts.transition_notes,
        counts.volumes_grown,
        counts.fresh_volumes,
        counts.restarts,
        counts.mass_failure_passes,
        counts.views_disagree_passes,
        counts.views_held_passes,
        counts.suspected_partition_passes,
        counts.absences_stamped,
        counts.absences_cleared,
        counts.volumes_first_served,
        counts.stale_kept_for_user,
        counts.stamped_volumes_reused,
        counts.stale_volume_checks,
        counts.stale_volumes_replaced,
        counts.stale_held_for_user,
        counts.look_alike_passes,
        counts.look_alike_blocked,
        counts.hibernation_stops,
        counts.hibernated_passes,
        counts.wakes,
        counts.wake_refused_passes,
        counts.wake_refused_kept_by_user,
        counts.fresh_volume_wakes,
        counts.fence_stops,
        counts.fence_held_passes,
        counts.fence_stale_kept_by_user,
        counts.stop_checks,
        counts.pod_checks,
        counts.roll_drains,
        counts.pod_refused_passes,
        counts.refused_specs_fixed,
        counts.scale_ups_batched,
        counts.never_started_removals,
        counts.unstarted_pods_deleted,
        counts.node_drains,
        counts.node_moves,
        counts.evictions,
        counts.password_changes,
        counts.passwords_remembered,
        counts.passwords_set,
        counts.rotations_recorded,
        counts.mixed_version_passes,
        counts.upgrades_started,
        counts.upgrades_done,
        counts.whole_down_steps,
        counts.downgrades_held,
        counts.restart_losses,
        counts.ring_cap_losses,
        counts.window_loss_holds,
    );
    println!("dst: {schedules} schedules in {:.1?}", started.elapsed());
    let l = counts.load;
    println!(
        "dst write load: {} writes acknowledged ({} from a rogue client), {} past a ring gap, {} write copies skipped for a peer, {} write copies delivered by anti-entropy; \
         {} members removed ({} under load), {} removal victims' pods deleted and checked for client input ({} while another ready member's join-gate gauge read above 0), {} victims restarted on their volume to close client connections ({} restarts of a rolling change taken as the cut), {} rings stalled for good while shipping ({} removal victims' pods deleted while stalled), {} pods deleted by the operator holding {} writes found nowhere else (kept on their volume); \
         hand-offs held: {} passes by the leaver's client input, {} by its anti-entropy rounds, {} by its ring still shipping, {} by repairs after its window stalled ({} loads stopped by the user for it); {} writes still unshipped when their process exited, {} exchanges dropped beside a shipping ring, {} cut short by a full queue; {} passes reading rounds, input or own bytes as unknown; {} client-traffic labels set; {} passes refused at replicationFactor 1; \
         known gaps, not violations: {} stale volumes replaced while holding {} writes found nowhere else (lost), {} writes on volumes users discarded",
        l.writes,
        l.rogue_writes,
        l.gapped,
        l.skipped,
        l.ae_delivered,
        l.removals,
        l.removals_under_load,
        l.victim_deletions_checked,
        l.deletions_past_join_gauge,
        l.connection_cuts,
        l.roll_connection_cuts,
        l.wedges,
        l.victims_deleted_wedged,
        l.pods_deleted_with_unique,
        l.writes_at_risk,
        l.held_by_client_input,
        l.held_by_rounds,
        l.held_by_shipping,
        l.held_by_stalled_window,
        counts.loads_stopped_for_stalled_window,
        l.exited_unshipped,
        l.exchanges_dropped_shipping,
        l.exchanges_cut_by_queue,
        l.unknown_figure_passes,
        l.traffic_labels,
        counts.single_copy_passes,
        l.stale_volumes_with_writes,
        l.stale_writes_lost,
        l.user_writes_discarded,
    );
    assert!(
        failed.is_empty(),
        "{} of {schedules} schedules failed; replay with DST_SEED=<seed>. First: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    // The simulation drives every path of the shell's composition, not only `decide`.
    if schedules >= 1_000 {
        assert!(counts.early_creations_stale > 0, "{counts:?}");
        assert!(counts.autoscaler_moves > 0, "{counts:?}");
        assert!(counts.transition_notes > 0, "{counts:?}");
        assert!(counts.volumes_grown > 0, "{counts:?}");
        assert!(counts.fresh_volumes > 0, "{counts:?}");
        assert!(counts.restarts > 0, "{counts:?}");
        assert!(counts.mass_failure_passes > 0, "{counts:?}");
        assert!(counts.views_held_passes > 0, "{counts:?}");
        assert!(counts.suspected_partition_passes > 0, "{counts:?}");
        assert!(counts.absences_cleared > 0, "{counts:?}");
        assert!(counts.volumes_first_served > 0, "{counts:?}");
        assert!(counts.stale_kept_for_user > 0, "{counts:?}");
        assert!(counts.stamped_volumes_reused > 0, "{counts:?}");
        assert!(counts.stale_volume_checks > 0, "{counts:?}");
        assert!(counts.stale_volumes_replaced > 0, "{counts:?}");
        assert!(counts.hibernation_stops > 0, "{counts:?}");
        assert!(counts.hibernated_passes > 0, "{counts:?}");
        assert!(counts.wakes > 0, "{counts:?}");
        assert!(counts.wake_refused_passes > 0, "{counts:?}");
        assert!(counts.wake_refused_kept_by_user > 0, "{counts:?}");
        assert!(counts.fresh_volume_wakes > 0, "{counts:?}");
        assert!(counts.fence_stops > 0, "{counts:?}");
        assert!(counts.fence_held_passes > 0, "{counts:?}");
        assert!(counts.stop_checks > 0, "{counts:?}");
        assert!(counts.look_alike_blocked > 0, "{counts:?}");
        assert!(
            counts.node_drains > 0 && counts.node_moves > 0 && counts.evictions > 0,
            "{counts:?}"
        );
        assert!(
            counts.restart_losses > 0 && counts.ring_cap_losses > 0 && counts.window_loss_holds > 0,
            "{counts:?}"
        );
        assert!(
            counts.mixed_version_passes > 0
                && counts.upgrades_started > 0
                && counts.upgrades_done > 0
                && counts.whole_down_steps > 0,
            "{counts:?}"
        );
        assert!(
            counts.password_changes > 0
                && counts.passwords_remembered > 0
                && counts.passwords_set > 0
                && counts.rotations_recorded > 0,
            "{counts:?}"
        );
        assert!(
            counts.pod_checks > 0
                && counts.roll_drains > 0
                && counts.pod_refused_passes > 0
                && counts.refused_specs_fixed > 0,
            "{counts:?}"
        );
        assert!(
            l.gapped > 0 && l.skipped > 0 && l.ae_delivered > 0 && l.rogue_writes > 0,
            "{l:?}"
        );
        assert!(
            l.removals_under_load > 0 && l.held_by_client_input > 0 && l.held_by_rounds > 0,
            "{l:?}"
        );
        assert!(
            l.held_by_shipping > 0
                && l.held_by_stalled_window > 0
                && l.exited_unshipped > 0
                && l.exchanges_dropped_shipping > 0
                && l.exchanges_cut_by_queue > 0,
            "{l:?}"
        );
        assert!(counts.loads_stopped_for_stalled_window > 0, "{counts:?}");
        assert!(counts.scale_ups_batched > 0, "{counts:?}");
        assert!(counts.never_started_removals > 0, "{counts:?}");
        assert!(counts.unstarted_pods_deleted > 0, "{counts:?}");
        assert!(
            l.victim_deletions_checked > 0
                && l.deletions_past_join_gauge > 0
                && l.connection_cuts > 0
                && l.roll_connection_cuts > 0
                && l.wedges > 0
                && l.victims_deleted_wedged > 0
                && l.pods_deleted_with_unique > 0,
            "{l:?}"
        );
        assert!(l.unknown_figure_passes > 0, "{l:?}");
        assert!(counts.single_copy_passes > 0, "{counts:?}");
    }
}

/// The invariant fires: a member whose volume holds writes found nowhere else, its pod
/// deleted, is no violation while it stays a member (the writes wait on its volume) and one
/// once it is removed; deleting its volume is one too.
#[test]
fn writes_that_leave_the_cluster_are_reported() {
    let members: BTreeSet<u32> = (0..3).collect();
    let mut w = World::new(2, 30_000, 7, false);
    for o in 0..3 {
        w.apply(Action::CreatePvc(o), &members).unwrap();
        w.apply(Action::CreatePod(o), &members).unwrap();
    }
    while !w.fully_replicated() {
        w.step();
    }
    // Twice the ring backlog of three members for one tick, then none: half of it gapped.
    w.write_rate = 3 * 2 * RING_BACKLOG;
    w.step();
    w.write_rate = 0;
    let victim = (0..3)
        .find(|o| w.unique_writes(*o, None) > 0)
        .expect("a member gapped");
    w.apply(Action::DeletePod(victim), &members).unwrap();
    for _ in 0..EXIT_TICKS + RING_WAIT_TICKS + 1 {
        w.step();
    }
    assert!(!w.pods.contains_key(&victim) && w.unique_writes(victim, None) > 0);
    let mut counts = Counts::default();
    assert_eq!(
        check_step(&mut w, &members, &mut counts),
        Vec::<String>::new()
    );
    // Its volume deleted: a violation (the volume is not stale).
    let removed: BTreeSet<u32> = members.iter().copied().filter(|o| *o != victim).collect();
    assert!(
        w.apply(Action::DeletePvc(victim), &removed)
            .is_err_and(|e| e.contains("acknowledged writes on no other member's volume"))
    );
    let v = check_step(&mut w, &removed, &mut counts);
    assert!(
        !v.is_empty()
            && v.iter()
                .all(|v| v.contains("acknowledged writes of partition")),
        "{v:?}"
    );
}

/// `f` of every seed of `seeds`, in seed order, computed over `DST_THREADS` threads (by default
/// one per core). Each schedule replays from its seed alone, so the results, and every figure
/// summed from them, are the same for any number of threads.
fn over_seeds<T: Send>(seeds: std::ops::Range<u64>, f: impl Fn(u64) -> T + Sync) -> Vec<(u64, T)> {
    let threads = std::env::var("DST_THREADS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let mut out: Vec<(u64, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if seed >= seeds.end {
                            return mine;
                        }
                        mine.push((seed, f(seed)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    out.sort_unstable_by_key(|(seed, _)| *seed);
    out
}

/// Schedules of a broken world that lose acknowledged writes, and the first such schedule.
fn losses(broken: Broken, schedules: u64) -> (u64, Option<(u64, Vec<String>)>) {
    let mut lost = 0;
    let mut first = None;
    for (seed, o) in over_seeds(0..schedules, |seed| run_world(seed, false, broken)) {
        if o.violations
            .iter()
            .any(|v| v.contains("acknowledged writes"))
        {
            lost += 1;
            first.get_or_insert((seed, o.violations));
        }
    }
    (lost, first)
}

fn broken_schedules() -> u64 {
    std::env::var("DST_BROKEN_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000)
}

/// Gate v3 counts the leaver's own anti-entropy rounds since it went quiet: it relies on each
/// round doing its work. Rounds that are counted but deliver nothing lose the writes that only
/// the leaver held (gapped or skipped), and the invariant reports them.
#[test]
fn rounds_that_deliver_nothing_lose_writes_and_the_invariant_says_so() {
    let schedules = broken_schedules();
    let (lost, first) = losses(Broken::HollowRounds, schedules);
    println!(
        "dst broken variant (rounds that deliver nothing): of {schedules} schedules, {lost} lose acknowledged writes; first: {first:?}"
    );
    assert!(lost > 0, "hollow anti-entropy rounds never lost a write");
}

/// The gate counts rounds only while no client input reaches the leaver and its ring has
/// nothing unacknowledged. A pinned or rogue client writing to the leaver past its label
/// fills its ring, so either figure alone holds the hand-off here (with the input counter
/// counting the operator's bytes only, 0 of 1,000 schedules lost a write). With both unseen,
/// its last writes go with the pod.
#[test]
fn invisible_client_input_and_shipping_lose_writes_and_the_invariant_says_so() {
    let schedules = broken_schedules();
    let (lost, first) = losses(Broken::InvisibleInputAndShipping, schedules);
    println!(
        "dst broken variant (client input and shipping invisible): of {schedules} schedules, {lost} lose acknowledged writes; first: {first:?}"
    );
    assert!(
        lost > 0,
        "invisible client input and shipping never lost a write"
    );
}

/// Gate v3 counted the leaver's rounds from its last client input, while its ring still
/// shipped: a member that took writes faster than it ships exits with a backlog, and its
/// rounds were dropped beside the full windows (measured on real members: 764 to 5,420 of
/// 100,000 keys lost in a 5 → 3). With the shipping figures unread, the invariant says so.
#[test]
fn a_ring_still_shipping_unseen_loses_writes_and_the_invariant_says_so() {
    let schedules = broken_schedules();
    let (lost, first) = losses(Broken::InvisibleShipping, schedules);
    println!(
        "dst broken variant (ring shipping unseen): of {schedules} schedules, {lost} lose acknowledged writes; first: {first:?}"
    );
    assert!(lost > 0, "a ring shipping unseen never lost a write");
}
