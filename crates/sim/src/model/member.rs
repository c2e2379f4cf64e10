//! One member process: its phase, its view of the others, and the state that lives in its
//! memory (ring, counters, leases) and so starts afresh with every start.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::metrics::Gauges;
use super::ring::Ring;
use super::settings::Faults;

/// Lifecycle phase of a node, as it gossips it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodePhase {
    Joining,
    Active,
    Leaving,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Process {
    Running,
    /// Got SIGTERM: Leaving and still serving; exits once `sleep_until_ms` passed and its ring
    /// backlog to connected peers is empty, or at `deadline_ms`.
    Flushing {
        sleep_until_ms: u64,
        deadline_ms: u64,
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
    /// The release it reports (`marekvs_info{version}`): see [`version_of_image`].
    pub version: String,
}

/// The release a simulated node reports when its image's tag names none: the one modelled.
pub const MODELLED_VERSION: &str = "0.2.0";

/// The release a simulated member of `image` reports: its tag when the tag is a version
/// (`marekvs:0.3.0`, `marekvs:v0.3.1-rc.1`, the leading `v` dropped), else
/// [`MODELLED_VERSION`]. So a test can run a mixed-version mesh by image alone.
pub fn version_of_image(image: &str) -> String {
    marekvs_core::versions::release_of_image(image).unwrap_or_else(|| MODELLED_VERSION.to_string())
}

/// What a member's view holds about a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerState {
    pub phase: NodePhase,
}

#[derive(Clone, Debug)]
pub(crate) struct PendingViewChange {
    pub due_ms: u64,
    pub subject: String,
    /// `None`: the subject is gone from the view.
    pub state: Option<PeerState>,
    /// Order of announcement, so a late delivery of an older fact never overwrites a newer one.
    pub seq: u64,
}

/// Counters of one process (they restart at 0 with it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    pub bootstraps_completed: u64,
    pub ae_repair_ops: u64,
    pub ae_rounds: u64,
    pub repl_ops_applied: u64,
    pub repl_ops_sent: u64,
    /// Lowercase command name → count (fractional: the synthetic load adds shares).
    pub commands: BTreeMap<String, f64>,
    pub net_input_bytes: u64,
    pub connections_accepted: u64,
    pub connections_closed: u64,
}

#[derive(Clone, Debug)]
pub struct Member {
    pub node_id: String,
    pub version: String,
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
    pub(crate) view_seq: BTreeMap<String, u64>,
    pub(crate) pending: Vec<PendingViewChange>,
    /// Unique per process start, so a connection of an earlier process is never mistaken
    /// for one of this one.
    pub(crate) boot: u64,
    /// Came back on a volume left less than the grace ago: bootstraps nothing.
    pub(crate) returning: bool,
    /// Turned Active in this process: its RESP port is open.
    pub(crate) activated: bool,
    pub(crate) counters: Counters,
    /// Partitions it owns (Active or Leaving; none while Joining), sorted; `None`: stale.
    pub(crate) owned: Option<Vec<u32>>,
    /// Partitions it would own (as owned, or as if Active while Joining), for bootstrap.
    pub(crate) would_own: BTreeSet<u32>,
    /// Placement must be recomputed (view or phase changed).
    pub(crate) placement_dirty: bool,
    /// Partitions it still has to bootstrap (the join-gate gauge counts them).
    pub(crate) bootstrap: BTreeSet<u32>,
    /// Bootstraps asked for that no donor answered: when it may ask again, and how often it
    /// asked. Asked again only while the partition is still empty on its volume; once
    /// something else filled it, the entry stays in `bootstrap` (and the gauge) for good.
    pub(crate) asked: BTreeMap<u32, (u64, u32)>,
    pub(crate) copy_budget: f64,
    pub(crate) ring: Ring,
    pub(crate) ae_round: u64,
    pub(crate) next_ae_ms: u64,
    /// Its anti-entropy lane: messages received, with their sender, handled in order.
    pub(crate) ae_inbox: std::collections::VecDeque<(String, super::anti_entropy::AeMsg)>,
    /// Records its anti-entropy task may still scan this tick (negative: a debt).
    pub(crate) ae_credit: f64,
    pub(crate) gauges: Option<Gauges>,
    pub(crate) next_gauges_ms: u64,
    /// Keys it fetched as a non-owner → until when its copy is fresh.
    pub(crate) leases: HashMap<Vec<u8>, u64>,
    /// Keys peers fetched from it → subscriber node id → lease end.
    pub(crate) interests: HashMap<Vec<u8>, BTreeMap<String, u64>>,
    /// Exit code once exited: 0 after SIGTERM, 137 when killed.
    pub exit_code: Option<i32>,
}

impl Member {
    pub fn is_up(&self) -> bool {
        !matches!(self.process, Process::Exited)
    }

    pub(crate) fn serves_reads_as_owner(&self) -> bool {
        matches!(self.phase, NodePhase::Active | NodePhase::Leaving)
    }
}
