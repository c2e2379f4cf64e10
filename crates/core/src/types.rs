//! Plain data: what the operator observed, what it remembers (in the object's status), and
//! what it decided. Nothing here knows Kubernetes.

use std::collections::{BTreeMap, BTreeSet};

/// Milliseconds since the Unix epoch. The clock is always passed in.
pub type Millis = i64;

/// Figures read from one member's `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scrape {
    /// `marekvs_cluster_members`: members in this node's own view (every sample the same
    /// whole number, or the scrape is unknown).
    pub view_members: u64,
    /// `marekvs_cluster_underreplicated_partitions`: the largest sample, rounded up.
    pub underreplicated: u64,
    /// `marekvs_join_gate_pending_pids`: the largest sample, rounded up.
    pub join_pending: u64,
    /// `marekvs_bootstraps_completed_total`, summed over its series.
    pub bootstraps_total: u64,
    /// `marekvs_ae_repair_ops_total`, summed over its series.
    pub repairs_total: u64,
    /// Sum of `marekvs_commands_total` over its series.
    pub commands_total: u64,
    /// The disk-fill signal, when the node reports it.
    pub disk: Option<Disk>,
    /// `marekvs_disk_write_stopped` is 1: the node refuses writes at its disk high-water mark.
    pub write_stopped: bool,
    /// `marekvs_ring_ops` (largest sample, rounded up): the occupancy of the node's in-memory
    /// replication ring. On marekvs 0.2 every committed write enters it and nothing leaves it
    /// when shipped, so it is not a backlog: shown to users, never gated on.
    pub ring_ops: Option<u64>,
    /// `marekvs_ring_bytes` (largest sample, rounded up): the same ring's occupancy in bytes.
    /// A ring at either cap ([`crate::handoff::RING_NEAR_CAP_OPS`]) evicts its oldest entry
    /// for every new one, shipped or not. `None`: unknown.
    pub ring_bytes: Option<u64>,
    /// `marekvs_repl_ops_applied_total`: replicated ops this node applied from other members
    /// since it started; each one enters its ring too. `None`: unknown.
    pub repl_applied: Option<u64>,
    /// `marekvs_ae_rounds_total`: anti-entropy rounds begun since the process started (the
    /// node bumps it as each round begins, so it is the round's number). `None`: unknown.
    pub ae_rounds: Option<u64>,
    /// `marekvs_net_input_bytes_total`: bytes read from RESP client connections since the
    /// process started, the operator's own reads included. `None`: unknown.
    pub client_input_bytes: Option<u64>,
    /// `marekvs_commands_total` summed over the write commands only (for reports).
    pub write_commands: u64,
    /// `marekvs_uptime_seconds`, in milliseconds (rounded down). `None`: not reported.
    pub uptime_ms: Option<u64>,
    /// `marekvs_repl_ops_sent_total`: ring entries shipped to peers since the process
    /// started (shown only). `None`: unknown.
    pub repl_sent: Option<u64>,
    /// `marekvs_repl_inflight_bytes` (largest sample, rounded up): shipped bytes no peer has
    /// acknowledged yet; above 0 at every reading while the ring ships a backlog behind its
    /// full 4 MiB windows. `None`: unknown.
    pub repl_inflight_bytes: Option<u64>,
    /// The release the node runs: the `version` label of `marekvs_info` (the crate version it
    /// was built from). `None`: not reported, not a plain version string, or samples that
    /// disagree. Shown and compared only: the gate never reads it.
    pub version: Option<String>,
}

impl Default for Scrape {
    /// Figures of a settled member: its ring empty, up for long, many anti-entropy rounds
    /// begun, no client input.
    fn default() -> Self {
        Scrape {
            view_members: 0,
            underreplicated: 0,
            join_pending: 0,
            bootstraps_total: 0,
            repairs_total: 0,
            commands_total: 0,
            disk: None,
            write_stopped: false,
            ring_ops: Some(0),
            ring_bytes: Some(0),
            repl_applied: Some(0),
            ae_rounds: Some(1_000),
            client_input_bytes: Some(0),
            write_commands: 0,
            uptime_ms: Some(1 << 40),
            repl_sent: Some(0),
            repl_inflight_bytes: Some(0),
            version: None,
        }
    }
}

/// A member's volume usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Disk {
    /// `marekvs_disk_total_bytes - marekvs_disk_avail_bytes` (the largest capacity less the
    /// least space available, over their samples).
    pub used_bytes: u64,
    /// `marekvs_disk_total_bytes` (its largest sample).
    pub total_bytes: u64,
}

/// The desired state, from the object's spec (already validated).
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSpec {
    pub name: String,
    pub nodes: u32,
    pub replication_factor: u32,
    /// Ordinals the user asked to remove first (from `spec.removeMembers`).
    pub remove_first: BTreeSet<u32>,
    pub reclaim_pvcs: bool,
    /// Re-replication counters must stay still this long before a step counts as settled.
    pub settle_ms: Millis,
    /// A hand-off step that has not settled after this long blocks the cluster.
    pub handoff_timeout_ms: Millis,
    /// `spec.paused`: hold every disruptive action (drain, pod or volume deletion); members
    /// are still created and re-created, and status keeps being reported.
    pub paused: bool,
    /// A volume away from the cluster longer than this is stale: never mounted again, its
    /// member gets a fresh one (`spec.storage.staleVolumeGraceSeconds`; see `stale`).
    pub stale_volume_grace_ms: Millis,
    /// `spec.hibernation`: every member's pod is stopped, volumes and membership kept (see
    /// `stepper/stop.rs`).
    pub hibernation: bool,
    /// `spec.storage.freshVolumesOnWake`: a wake past the stale-volume grace starts each stale
    /// member on a fresh, empty volume instead of being refused.
    pub fresh_volumes_on_wake: bool,
    /// Ordinals of `spec.fencedMembers`: their pods are stopped and not re-created, their
    /// volumes and membership kept; no disruptive step runs while any is fenced.
    pub fenced: BTreeSet<u32>,
    /// Scale-up adds members in batches: at most this many joining at once, or more as the
    /// cluster grows (as many as serve already, their donors; see `scale_up`). The operator
    /// uses [`SCALE_UP_BATCH`]; the DST draws smaller ones, so that the batch binds.
    pub scale_up_batch: u32,
    /// `spec.upgrade.strategy: WholeCluster`: a change of the member image stops every member
    /// at once and starts them all on the new image (see `stepper/upgrade.rs`); any other
    /// change of the pod spec still rolls one member at a time.
    pub whole_cluster_upgrade: bool,
    /// The release `spec.image`'s tag names, when it names one (`versions::release_of_image`).
    pub image_release: Option<String>,
    /// `spec.upgrade.allowDowngrade`: members may go to an older release than one they run.
    pub allow_downgrade: bool,
}

/// The fewest members a scale-up may have joining at once (a cluster's first members
/// included): a 1,000-member spec starts 16, then as many as are serving, doubling.
pub const SCALE_UP_BATCH: u32 = 16;

impl ClusterSpec {
    /// Never fewer than replicationFactor + 1 members.
    pub fn floor(&self) -> u32 {
        self.replication_factor + 1
    }

    /// How many members the cluster should have.
    pub fn target(&self) -> u32 {
        self.nodes.max(self.floor())
    }

    pub fn member_name(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.name)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodObs {
    pub ready: bool,
    /// Has a deletion timestamp.
    pub terminating: bool,
    /// The operator has drained this pod's node (`/drain` answered 200), as recorded on the
    /// pod, and the drain still stands ([`PodObs::drain_stands`]).
    pub drained: bool,
    /// Its spec differs from the member's desired pod (compared by template hash).
    pub outdated: bool,
    /// Its member container runs another image than the spec's (`spec.image`): with
    /// `upgrade.strategy: WholeCluster`, an upgrade of the whole cluster.
    pub image_outdated: bool,
    /// The user asked for this member to move to a fresh, empty volume (the annotation
    /// `marekvs.io/replace-volume: "true"` on its pod). Gone with the pod it is on: once the
    /// replacement starts, the rollout record carries the request.
    pub replace_volume: bool,
    /// The user asked for this member to be restarted on its own volume, safely (the
    /// annotation `marekvs.io/restart: "true"` on its pod). Gone with the pod it is on.
    pub restart: bool,
    /// The pod carries `marekvs.io/client-traffic: "off"`: the client Service no longer
    /// selects it, so no new client writes originate on it (see `Action::SetClientTraffic`).
    pub client_traffic_off: bool,
    /// No container of this pod has ever started: it is Pending, not one of its containers
    /// is or was running or has exited, none has restarted (unscheduled, its image not pulled,
    /// its volume not attached). `false` when unknown.
    pub never_started: bool,
    /// The node it is scheduled to; `None` while unscheduled, or when that node is not known
    /// (not in the operator's cache, or nodes cannot be read): a drain is never guessed.
    pub node: Option<NodeObs>,
    /// The pod carries `marekvs.io/eviction: "allowed"`: the member PDB no longer selects it,
    /// so a drain's eviction may take it (see `Action::SetEviction`).
    pub eviction_allowed: bool,
}

/// The node a member's pod runs on, as far as a drain of it goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeObs {
    pub name: String,
    /// `spec.unschedulable`: cordoned (`kubectl cordon`, the first step of `kubectl drain`).
    pub unschedulable: bool,
    /// The keys of its taints with effect `NoSchedule` or `NoExecute`.
    pub taints: Vec<String>,
}

/// Taints that tools put on a node they are about to drain: the cordon's own (added by the
/// node lifecycle controller), the cluster autoscaler's and Karpenter's.
pub const DRAIN_TAINTS: &[&str] = &[
    "node.kubernetes.io/unschedulable",
    "ToBeDeletedByClusterAutoscaler",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
];

impl NodeObs {
    /// Being drained: cordoned, or tainted by a tool that drains it next.
    pub fn draining(&self) -> bool {
        self.unschedulable
            || self
                .taints
                .iter()
                .any(|t| DRAIN_TAINTS.contains(&t.as_str()))
    }
}

impl PodObs {
    /// The node it runs on, when that node is being drained.
    pub fn draining_node(&self) -> Option<&str> {
        self.node
            .as_ref()
            .filter(|n| n.draining())
            .map(|n| n.name.as_str())
    }

    /// Whether a drain recorded on a pod still stands: `restarts_at_drain` is the pod's
    /// container restarts when it was drained (`None`: never drained). A restart voids it: the
    /// node came back serving and takes data again, so it must be drained again before
    /// anything counts on it.
    pub fn drain_stands(restarts_at_drain: Option<u64>, restarts_now: u64) -> bool {
        restarts_at_drain == Some(restarts_now)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PvcObs {
    pub uid: String,
    pub terminating: bool,
    /// It cannot become what the spec asks in place (another class, or smaller), and the user
    /// opted into replacing volumes: a rolling update moves the member to a fresh volume.
    pub outdated: bool,
    /// Since when its member has been away from the cluster (removed, or its pod gone, going
    /// away or not ready), as recorded on the volume; `None` while its member serves, or
    /// before the operator first saw it away (see `stale`).
    pub absent_since: Option<Millis>,
    /// Since when a member has served from it (first seen ready on it), as recorded on the
    /// volume once; `None` until then. A member whose volume first served after another
    /// member left may lack what only that one's volume holds (see `stale`).
    pub served_since: Option<Millis>,
    /// How many pods the operator has made for it, as recorded on the volume (counted up
    /// before each attempt to create one, so never fewer). `None` when unknown: a volume made by an
    /// earlier version of the operator, or by a StatefulSet, or an unreadable count.
    pub pods_made: Option<u32>,
}

/// Which password a member's RESP port took this pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum PasswordTaken {
    /// Not asked (no live pod IP, no password), or no clean answer: unknown.
    #[default]
    Unknown,
    /// The Secret's.
    Secret,
    /// The one recorded as the members' last, where the Secret's was refused.
    Recorded,
    /// Both refused (or the Secret's refused and none recorded).
    Neither,
}

/// Everything observed about one ordinal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberObs {
    pub pod: Option<PodObs>,
    pub pvc: Option<PvcObs>,
    /// `None`: no pod IP, or the scrape failed or timed out.
    pub scrape: Option<Scrape>,
    /// Its membership view by identity, read over RESP. `None`: no pod IP, the port did not
    /// answer in time, `AUTH` failed, or the answer did not parse (unknown, never safe).
    pub view: Option<View>,
    /// A look-alike (a pod or PVC with this member's name and the cluster's labels that is not
    /// the cluster's, see `ownership`) holds its name: nothing is created in its name, and no
    /// disruptive step starts or continues while it is there.
    pub look_alike: bool,
    /// Which password its RESP port took (see `password`): read with its view.
    pub password: PasswordTaken,
    /// RESP input from clients since the last recorded pass (`marekvs_net_input_bytes_total`
    /// less the operator's own reads, worked out by the shell). `None`: unknown (the first read
    /// since the operator started, a read cut off midway, a counter that went back), which
    /// counts as client input.
    pub client_input: Option<u64>,
    /// Whether the API server admits the pod the spec now builds for this member (a
    /// server-side dry run of its creation, `Action::CheckPod`). Only asked before a rolling
    /// change drains it: a pod that cannot be made must never cost a member.
    pub new_pod: PodAdmission,
}

/// What a server-side dry run of a member's new pod said, as recently as the shell keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PodAdmission {
    /// Not asked, or asked too long ago: unknown, which is never safe.
    #[default]
    Unchecked,
    Admitted,
    /// Refused, with the API server's message. `ask_again`: the answer is old enough to ask
    /// again (something outside the spec, a ServiceAccount created, may have fixed it); the
    /// refusal stands meanwhile, so the cluster stays Blocked while it asks.
    Refused {
        message: String,
        ask_again: bool,
    },
}

/// One member's view by identity: its own id (`CLUSTER MYID`) and every member in its view
/// (`CLUSTER NODES`: id → address, the address possibly empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub id: String,
    pub peers: BTreeMap<String, String>,
}

impl View {
    /// The ids it sees.
    pub fn ids(&self) -> BTreeSet<&str> {
        self.peers.keys().map(String::as_str).collect()
    }

    /// The id simulations give ordinal `o` (a real node's is 40 hex digits).
    pub fn ordinal_id(o: u32) -> String {
        format!("{o:040x}")
    }

    /// Member `me`'s view holding `sees`, with simulation ids.
    pub fn of_ordinals(me: u32, sees: impl IntoIterator<Item = u32>) -> View {
        View {
            id: Self::ordinal_id(me),
            peers: sees
                .into_iter()
                .map(|o| (Self::ordinal_id(o), format!("127.0.0.{o}:6379")))
                .collect(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RemovalStep {
    /// Calling `/drain` on the victim until it answers 200.
    Draining,
    /// The victim is Leaving and still serving; waiting for the others to take over its data.
    HandingOff,
    /// Deleting the victim's pod; its node flushes and exits on SIGTERM.
    Deleting,
    /// The pod is gone; waiting for every view to drop it and re-replication to go quiet.
    Settling,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimReason {
    /// Listed in `spec.removeMembers`.
    UserChosen,
    /// Had no pod or was not ready.
    NotReady,
    /// The highest ordinal.
    HighestOrdinal,
    /// No process ever ran on it: its only pod, the first the operator made for its volume
    /// (or it has no volume), is Pending and its container never started (unscheduled, an
    /// image that cannot be pulled). It holds no data and never joined, so it is removed
    /// without the hand-off gate and without a drain (`Action::DeleteUnstartedPod`).
    NeverStarted,
}

/// The member being removed: written to status before anything is done to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    pub ordinal: u32,
    pub reason: VictimReason,
    pub step: RemovalStep,
    pub started_at: Millis,
    pub step_started_at: Millis,
    /// When the operator restarted the victim on its own volume to close the client
    /// connections it still took writes over after its traffic was cut (at most once a
    /// removal; see `stepper::removal`).
    pub connections_cut_at: Option<Millis>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RollStep {
    /// Calling `/drain` on the member until it answers 200.
    Draining,
    /// It is Leaving and still serving; waiting for the others to hold its data.
    HandingOff,
    /// Deleting its outdated pod.
    Deleting,
    /// Its new pod runs on the same volume; waiting until it is Active and the cluster settled.
    Rejoining,
}

/// Why a member is being restarted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollReason {
    /// Its pod or its volume differs from what the spec asks (a rolling update).
    SpecChanged,
    /// Its pod asked for a fresh volume (`PodObs::replace_volume`) in place of the PVC with
    /// this uid: it moves to a fresh volume whatever the storage spec.
    VolumeRequested { pvc: String },
    /// Its pod asked to be restarted on its own volume (`PodObs::restart`): drained, its data
    /// handed off, its pod deleted and re-created on the same volume.
    RestartRequested,
    /// Its pod runs on this node, which is being drained (`NodeObs::draining`): drained, its
    /// data handed off, then let go to the drain's eviction (or deleted, when no eviction
    /// comes) and re-created on its own volume, which the scheduler puts on another node.
    NodeDrained { node: String },
}

/// The member being restarted with the current pod spec (a rolling update, one at a time),
/// or moved to a fresh volume on request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roll {
    pub ordinal: u32,
    pub reason: RollReason,
    pub step: RollStep,
    /// The PVC (uid) whose data the others took over while the member was drained (the
    /// hand-off gate passed): only that volume may be replaced by a fresh one.
    pub handed_off_pvc: Option<String>,
    pub started_at: Millis,
    pub step_started_at: Millis,
    /// When its restart was taken, before its hand-off passed, to close client connections
    /// that still wrote to it after its traffic was cut (see `stepper::rollout`): its own
    /// volume comes back with what they wrote.
    pub connections_cut_at: Option<Millis>,
}

impl Roll {
    /// Whether this restart moves its member off volume `v` to a fresh one: a volume the spec
    /// cannot have in place (with `replaceVolumes`), or the one the user asked to replace.
    pub fn leaves_volume(&self, v: &PvcObs) -> bool {
        v.outdated || matches!(&self.reason, RollReason::VolumeRequested { pvc } if *pvc == v.uid)
    }

    /// Asked by the user (a fresh volume), not by a spec change.
    pub fn requested(&self) -> bool {
        matches!(self.reason, RollReason::VolumeRequested { .. })
    }

    /// Asked by the user (a restart on its own volume), not by a spec change.
    pub fn restart_requested(&self) -> bool {
        self.reason == RollReason::RestartRequested
    }

    /// The node being drained that this restart moves its member off.
    pub fn drained_node(&self) -> Option<&str> {
        match &self.reason {
            RollReason::NodeDrained { node } => Some(node),
            _ => None,
        }
    }
}

/// Why a member's anti-entropy count starts over (`Sample::quiet_since`): since then it may
/// hold data that is nowhere else, which only its own anti-entropy rounds hand on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum QuietReset {
    /// First sampled by this cluster's status.
    #[default]
    FirstSeen,
    /// RESP input beyond the operator's own reads: a client wrote (or may have).
    ClientInput,
    /// Its counters went back or its uptime is shorter than the time since the last sample.
    Restarted,
    /// Its replication ring still shipped: bytes it shipped were not acknowledged yet
    /// (`marekvs_repl_inflight_bytes` above 0).
    Shipping,
    /// The members its view holds changed (another member left or came back).
    ViewChanged,
    /// A figure the count needs was not read (rounds, input bytes, the operator's own bytes,
    /// the view): unknown is never quiet.
    Unknown,
}

impl QuietReset {
    pub fn as_str(self) -> &'static str {
        match self {
            QuietReset::FirstSeen => "first seen",
            QuietReset::ClientInput => "client input",
            QuietReset::Restarted => "a restart",
            QuietReset::Shipping => "its ring shipping",
            QuietReset::ViewChanged => "a view change",
            QuietReset::Unknown => "an unknown reading",
        }
    }
}

/// Re-replication counters of one member as last seen, and when they last moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub bootstraps_total: u64,
    pub repairs_total: u64,
    /// Either counter last moved (or the member was first seen).
    pub changed_at: Millis,
    /// The bootstrap counter last moved (or the member was first seen).
    pub bootstraps_changed_at: Millis,
    /// The repair counter last moved (or the member was first seen).
    pub repairs_changed_at: Millis,
    /// The repair counter and the time of the sample before its last move: the repair rate
    /// is `(repairs_total - prev.0) / (repairs_changed_at - prev.1)`.
    pub repairs_prev: Option<(u64, Millis)>,
    /// `marekvs_ring_ops` as last read (`None`: unknown). Shown, never gated on.
    pub ring_ops: Option<u64>,
    /// When this sample's scrape was taken.
    pub sampled_at: Millis,
    /// `marekvs_ae_rounds_total` as last read (`None`: unknown).
    pub ae_rounds: Option<u64>,
    /// The members its view held, as a stable digest of their ids (`None`: not read).
    pub view_digest: Option<u64>,
    /// Write commands (`marekvs_commands_total` over the write commands) as last read, and
    /// the count and time of the sample before they last moved (the write rate).
    pub writes_total: u64,
    pub writes_prev: Option<(u64, Millis)>,
    /// Since when the member has been quiet: no client input, restart or view change, every
    /// figure read. Its anti-entropy rounds count from here.
    pub quiet_since: Millis,
    /// Why `quiet_since` was last set.
    pub quiet_reset: QuietReset,
    /// `marekvs_ae_rounds_total` at the first scrape at or after `quiet_since` that read it:
    /// rounds numbered above it began after the member went quiet.
    pub rounds_at_quiet: Option<u64>,
    /// `marekvs_repl_ops_sent_total` as last read (`None`: unknown), and when it last moved (or
    /// the member was first seen): a ring whose window holds bytes while nothing more leaves it
    /// is stalled, not shipping (`handoff::SHIPPING_STALL_MS`).
    pub sent_total: Option<u64>,
    pub sent_changed_at: Millis,
    /// `marekvs_repl_inflight_bytes`, `marekvs_ring_bytes` and
    /// `marekvs_repl_ops_applied_total` as last read (`None`: unknown): at a restart, what
    /// the ring held just before it.
    pub inflight_bytes: Option<u64>,
    pub ring_bytes: Option<u64>,
    pub applied_total: Option<u64>,
    /// The last reading at which its ring may have lost entries it had not shipped (gate v4):
    /// those reach their owners by anti-entropy alone.
    pub window_lost: Option<WindowLoss>,
}

/// A reading at which a member's replication ring may have dropped entries it had not shipped
/// to every owner: what they carried is on its volume, and only anti-entropy hands it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowLoss {
    pub at: Millis,
    pub cause: WindowLossCause,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowLossCause {
    /// It restarted while its last reading showed bytes unacknowledged, its ring near a cap,
    /// or either unknown: a node waits at most 7 s for its backlog before it exits, and comes
    /// back with an empty ring.
    Restarted,
    /// Its ring read near a cap while entries still entered it (its own writes, ops applied
    /// from others, repairs, bootstraps): every new entry evicts the oldest, and a peer's
    /// cursor behind it jumps the gap.
    RingAtCap,
}

impl WindowLossCause {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowLossCause::Restarted => "it restarted with its ring not known to have shipped",
            WindowLossCause::RingAtCap => "its ring was at its cap while entries still entered it",
        }
    }
}

impl Sample {
    /// Counters last moved at `changed_at` (both of them), first seen then at round 0 with no
    /// input: quiet since.
    pub fn new(bootstraps_total: u64, repairs_total: u64, changed_at: Millis) -> Self {
        Sample {
            bootstraps_total,
            repairs_total,
            changed_at,
            bootstraps_changed_at: changed_at,
            repairs_changed_at: changed_at,
            repairs_prev: None,
            ring_ops: Some(0),
            sampled_at: changed_at,
            ae_rounds: Some(0),
            view_digest: None,
            sent_total: None,
            sent_changed_at: changed_at,
            inflight_bytes: Some(0),
            ring_bytes: Some(0),
            applied_total: Some(0),
            window_lost: None,
            writes_total: 0,
            writes_prev: None,
            quiet_since: changed_at,
            quiet_reset: QuietReset::FirstSeen,
            rounds_at_quiet: Some(0),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemberPhase {
    /// A new member bootstrapping (not ready yet).
    Joining,
    Active,
    /// Its pod exists but is not ready (e.g. after a crash).
    Unready,
    /// Its pod (and maybe its PVC) is being re-created, or it is rejoining after that.
    Replacing,
    /// Chosen for removal: drained, handing its data off while still serving.
    Draining,
    /// Its pod is being deleted or is gone; waiting for the hand-off to settle.
    Leaving,
    /// Being restarted with the current pod spec on its own volume (rolling update).
    Updating,
    /// Listed in `spec.fencedMembers`: its pod is stopped, its volume and membership kept.
    Fenced,
    /// Stopped by `spec.hibernation`, its volume kept.
    Hibernated,
}

/// Where a whole-cluster upgrade stands (`spec.upgrade.strategy: WholeCluster`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum UpgradeStep {
    /// Every member's client traffic is cut; waiting until what each member took has reached
    /// its owners (the hand-off gate's leaver checks, on every member at once).
    Flushing,
    /// Every member's pod is deleted; waiting until none is left.
    Stopping,
    /// Every member's new pod is created on its own volume; waiting until all are Ready and
    /// the views converged, before client traffic returns.
    Starting,
}

/// A whole-cluster upgrade in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upgrade {
    pub step: UpgradeStep,
    pub started_at: Millis,
    pub step_started_at: Millis,
    /// When the members were stopped (the client outage began with the flush, at
    /// `started_at`; the members went down here).
    pub stopped_at: Option<Millis>,
}

/// The one disruptive change in progress: a member being removed, a member being restarted
/// with the current spec, or the whole cluster being upgraded. Never two at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disruption {
    Removal(Removal),
    Roll(Roll),
    Upgrade(Upgrade),
}

impl Disruption {
    /// The disruption a status records. The operator never records both; a status that holds
    /// both (edited by hand) is read as the removal, and the restart is dropped: it starts
    /// again once the removal is done, if a member is still outdated.
    /// A whole-cluster upgrade recorded beside either is read as the upgrade: it stops
    /// members only after a flush, which any later step waits for.
    pub fn recorded(
        removal: Option<Removal>,
        roll: Option<Roll>,
        upgrade: Option<Upgrade>,
    ) -> Option<Disruption> {
        removal
            .map(Disruption::Removal)
            .or(roll.map(Disruption::Roll))
            .or(upgrade.map(Disruption::Upgrade))
    }

    /// The one member it is about (`None`: the whole cluster).
    pub fn ordinal(&self) -> Option<u32> {
        match self {
            Disruption::Removal(r) => Some(r.ordinal),
            Disruption::Roll(r) => Some(r.ordinal),
            Disruption::Upgrade(_) => None,
        }
    }

    pub fn removal(&self) -> Option<&Removal> {
        match self {
            Disruption::Removal(r) => Some(r),
            Disruption::Roll(_) | Disruption::Upgrade(_) => None,
        }
    }

    pub fn roll(&self) -> Option<&Roll> {
        match self {
            Disruption::Roll(r) => Some(r),
            Disruption::Removal(_) | Disruption::Upgrade(_) => None,
        }
    }

    pub fn upgrade(&self) -> Option<&Upgrade> {
        match self {
            Disruption::Upgrade(u) => Some(u),
            Disruption::Removal(_) | Disruption::Roll(_) => None,
        }
    }
}

/// What the operator keeps in the object's status between reconciles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// Ordinals that belong to the cluster (`status.instanceNames`).
    pub members: BTreeSet<u32>,
    /// The removal or the rolling update in progress.
    pub disruption: Option<Disruption>,
    pub samples: BTreeMap<u32, Sample>,
    pub phases: BTreeMap<u32, MemberPhase>,
    /// The blocking reason last reported, so events fire only on transitions.
    pub blocked: Option<BlockReason>,
    /// Since when the ready members' views have disagreed by identity (`views.rs`).
    pub views_split_since: Option<Millis>,
    /// The pods were stopped by `spec.hibernation` and have not all been started again
    /// (`status.hibernated`): a wake is told apart from members lost one by one.
    pub hibernated: bool,
    /// The gate hold last reported and since when (`status.handoffHold.since`), so the
    /// hold's age survives a restart and only a change of reason restarts it.
    pub hold_since: Option<(BlockReason, Millis)>,
}

impl Memory {
    /// The removal in progress.
    pub fn removal(&self) -> Option<&Removal> {
        self.disruption.as_ref().and_then(Disruption::removal)
    }

    /// The rolling update in progress.
    pub fn roll(&self) -> Option<&Roll> {
        self.disruption.as_ref().and_then(Disruption::roll)
    }

    /// The whole-cluster upgrade in progress.
    pub fn upgrade(&self) -> Option<&Upgrade> {
        self.disruption.as_ref().and_then(Disruption::upgrade)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BlockReason {
    NotAllReady,
    MetricsUnavailable,
    Underreplicated,
    JoinPending,
    ViewsNotConverged,
    RepairInProgress,
    Replacing,
    HandoffTimeout,
    Paused,
    /// A look-alike holds a member's name (see `ownership`): unknown is never safe.
    LookAlike,
    /// A member is listed in `spec.fencedMembers`: no disruptive step runs.
    Fenced,
    /// A wake from hibernation would mount volumes away longer than the stale-volume grace:
    /// refused (the cluster stays stopped) unless `storage.freshVolumesOnWake`.
    WakeRefused,
    /// The leaving member may still hold data that is nowhere else: its client traffic is
    /// not cut yet, clients still send it commands, or its own anti-entropy rounds have not
    /// yet covered its data since it went quiet (or a figure that says so is unknown).
    LeaverBacklog,
    /// `replicationFactor` 1 keeps one copy of each partition, on its owner: on marekvs 0.2 a
    /// member's partitions move only after it has exited, so removing a member (or its
    /// volume) would lose them. Refused, never attempted.
    SingleCopy,
    /// The API server refuses the pod the spec now builds for the member a rolling change
    /// would restart (`PodAdmission::Refused`): draining it would leave it down.
    PodRefused,
    /// A member refuses the Secret's password and the one recorded before it: its view
    /// cannot be read (see `password`).
    PasswordRefused,
    /// The spec's image would take members to an older release than one that runs (by its
    /// tag, or as the members already restarted on it report), and `upgrade.allowDowngrade`
    /// is not set: no member restarts on it (see `versions::downgrade`).
    DowngradeNotAllowed,
}

impl BlockReason {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockReason::NotAllReady => "NotAllReady",
            BlockReason::MetricsUnavailable => "MetricsUnavailable",
            BlockReason::Underreplicated => "Underreplicated",
            BlockReason::JoinPending => "JoinPending",
            BlockReason::ViewsNotConverged => "ViewsNotConverged",
            BlockReason::RepairInProgress => "RepairInProgress",
            BlockReason::Replacing => "Replacing",
            BlockReason::HandoffTimeout => "HandoffTimeout",
            BlockReason::Paused => "Paused",
            BlockReason::LookAlike => "LookAlike",
            BlockReason::Fenced => "Fenced",
            BlockReason::WakeRefused => "WakeRefused",
            BlockReason::LeaverBacklog => "LeaverBacklog",
            BlockReason::SingleCopy => "SingleCopy",
            BlockReason::PodRefused => "PodRefused",
            BlockReason::PasswordRefused => "PasswordRefused",
            BlockReason::DowngradeNotAllowed => "DowngradeNotAllowed",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterPhase {
    Reconciling,
    Healthy,
    ScalingUp,
    ScalingDown,
    Replacing,
    /// Restarting outdated members with the current pod spec, one at a time.
    Updating,
    /// `spec.paused` holds a disruptive step that is wanted.
    Paused,
    Blocked,
    /// `spec.hibernation`: every member's pod is stopped (or being stopped), volumes kept.
    Hibernated,
}

impl ClusterPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterPhase::Reconciling => "Reconciling",
            ClusterPhase::Healthy => "Healthy",
            ClusterPhase::ScalingUp => "ScalingUp",
            ClusterPhase::ScalingDown => "ScalingDown",
            ClusterPhase::Replacing => "Replacing",
            ClusterPhase::Updating => "Updating",
            ClusterPhase::Paused => "Paused",
            ClusterPhase::Blocked => "Blocked",
            ClusterPhase::Hibernated => "Hibernated",
        }
    }
}

/// Something to do to the world. Every action is idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    CreatePvc(u32),
    CreatePod(u32),
    /// Call `/drain` on the member; on 200 record it on the pod.
    Drain(u32),
    /// Ask the API server, with a server-side dry run, whether it admits the pod the spec now
    /// builds for the member (`MemberObs::new_pod` reports the answer). Creates nothing.
    CheckPod(u32),
    DeletePod(u32),
    /// Delete the pod of a member whose container never started (`VictimReason::NeverStarted`),
    /// only if it still never has: read back past the cache, and deleted only as that exact
    /// version of it (uid and resourceVersion), so a container that starts meanwhile keeps it.
    DeleteUnstartedPod(u32),
    DeletePvc(u32),
    /// Set the pod's label `marekvs.io/client-traffic` to `"on"` or `"off"` (a label patch,
    /// never a restart): the client Service selects only `"on"`.
    SetClientTraffic {
        ordinal: u32,
        on: bool,
    },
    /// Set the pod's label `marekvs.io/eviction` to `"allowed"`, or remove it (a label patch):
    /// the member PDB, which allows no eviction, selects only pods without it. Allowed only
    /// for a member handed off and being moved off a node being drained.
    SetEviction {
        ordinal: u32,
        allowed: bool,
    },
}

impl Action {
    /// The member it acts on.
    pub fn ordinal(&self) -> u32 {
        match *self {
            Action::CreatePvc(o)
            | Action::CreatePod(o)
            | Action::Drain(o)
            | Action::CheckPod(o)
            | Action::DeletePod(o)
            | Action::DeleteUnstartedPod(o)
            | Action::DeletePvc(o)
            | Action::SetClientTraffic { ordinal: o, .. }
            | Action::SetEviction { ordinal: o, .. } => o,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// Every Event reason the operator gives, the core's (`Note`) and the shell's alike: the
/// `reason` field of its Events is `as_str()` of one of these, nothing else.
macro_rules! event_reasons {
    ($($reason:ident),+ $(,)?) => {
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum EventReason {
            $($reason),+
        }

        impl EventReason {
            /// Every reason, in order.
            pub const ALL: &[EventReason] = &[$(EventReason::$reason),+];

            /// The Event's `reason`: the variant's name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventReason::$reason => stringify!($reason)),+
                }
            }
        }
    };
}

event_reasons!(
    ActionFailed,
    AutoscaleDown,
    AutoscaleUp,
    ClientConnectionsCut,
    DiskWriteStopped,
    Draining,
    FreshVolumeOnWake,
    HandoffHeld,
    HandoffStuck,
    HeldByFence,
    Hibernating,
    LookAlike,
    LookAlikeGone,
    LostBeforeHandOff,
    MassFailure,
    MassFailureOver,
    MemberAdopted,
    MemberCounted,
    MemberCreated,
    MemberFenced,
    MemberMovedOffNode,
    MemberRemoved,
    MemberReplaced,
    MemberRestarted,
    MemberRestarting,
    MemberUpdated,
    NodeDrainStarted,
    PasswordRotated,
    PasswordSet,
    Paused,
    RemovalCancelled,
    RestartStarted,
    RestartedOnOldVolume,
    RestartedWhileDraining,
    ScaleDownBlocked,
    ScaleDownDeferred,
    ScaleDownStarted,
    StaleVolumeReplaced,
    SuspectedPartition,
    Unblocked,
    UnknownRemovalChoice,
    UpdateBlocked,
    UpdateCancelled,
    UpdateStarted,
    ViewsAgree,
    VolumeRestamped,
    VolumeRestampFailed,
    VolumeExpansionFailed,
    VolumeReplaced,
    VolumeReplacementStarted,
    WakeRefused,
    WholeClusterStopping,
    WholeClusterUpgradeStarted,
    WholeClusterUpgraded,
    Woken,
);

/// As the text it stands for, quoted: a note reads in a log (and in the decide digest) as it
/// did when reasons were strings.
impl std::fmt::Debug for EventReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for EventReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason compares with the text an Event carries (tests read Events as text).
impl PartialEq<&str> for EventReason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A transition worth an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub kind: EventKind,
    pub reason: EventReason,
    pub message: String,
    /// The member it is about, where the shell needs to know (a replacement already made by
    /// the operator's fast path is not announced twice).
    pub member: Option<u32>,
}

/// Why the cluster is waiting, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub reason: BlockReason,
    pub message: String,
}

/// What would hold a planned removal right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The hand-off gate, or members being (re-)created or replaced: what `start_removal`
    /// would block on if it ran now.
    Gate(Blocked),
    /// It would take the cluster below replicationFactor + 1 (`spec.nodes` is lower than
    /// that): it never happens.
    Floor { floor: u32 },
    /// `spec.paused` holds it.
    Paused,
    /// A disruption comes first: the removal or the restart in progress, an earlier step of
    /// this plan, or a drained member being recycled (one member at a time).
    InProgress { message: String },
}

impl Hold {
    /// The hold in words.
    pub fn message(&self) -> String {
        match self {
            Hold::Gate(b) => b.message.clone(),
            Hold::Floor { floor } => format!(
                "never below replicationFactor + 1 = {floor} members, whatever spec.nodes says"
            ),
            Hold::Paused => "spec.paused is set".into(),
            Hold::InProgress { message } => message.clone(),
        }
    }
}

/// One member that would leave, in the order removals would happen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedRemoval {
    pub ordinal: u32,
    pub reason: VictimReason,
    /// What would hold this step right now; `None`: it is under way (the removal in progress,
    /// not held), or the next pass may start it.
    pub held_by: Option<Hold>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The memory to write to status *before* any action is taken.
    pub memory: Memory,
    pub actions: Vec<Action>,
    pub phase: ClusterPhase,
    /// Set when a scale-down is wanted but may not happen now.
    pub blocked: Option<Blocked>,
    /// What is in progress, in words (Progressing condition).
    pub progress: Option<String>,
    pub notes: Vec<Note>,
    /// When to look again.
    pub requeue_ms: Millis,
    /// The removals that would come next, in order, and what holds each (empty at or below
    /// the target). Reported only: nothing in it is acted on.
    pub plan: Vec<PlannedRemoval>,
    /// So many members are down that copies may be missing (`mass::mass_failure`): only pods
    /// on their own volumes were re-created.
    pub mass_failure: Option<MassFailure>,
    /// Views have disagreed by identity for too long: every disruptive step is held.
    pub suspected_partition: Option<SuspectedPartition>,
    /// What holds the next scale-down step (the removal in progress or the one that would
    /// start), what keeps moving, where, how fast and since when (`status.handoffHold`).
    pub hold: Option<HoldReport>,
    /// Anti-entropy repair that does not hold anything (background repair of writes under
    /// load), reported so a user sees it (`status.backgroundRepair`).
    pub background_repair: Option<BackgroundRepair>,
    /// Members away on a stale volume that is kept for the user instead of replaced: another
    /// member's volume first served after it left, so it may hold the last copy of some data
    /// (`stale::rebuilt_since_absence`). Reported in the progress message.
    pub kept_stale: Vec<u32>,
}

/// What keeps a gate from passing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moving {
    /// The leaver's anti-entropy rounds since it went quiet (`marekvs_ae_rounds_total`) are
    /// not enough yet, or unknown.
    AntiEntropy,
    /// The leaver still gets client traffic (its pod is not labelled off yet).
    ClientTraffic,
    /// The leaver's replication ring still ships what it took
    /// (`marekvs_repl_ops_sent_total`, `marekvs_repl_inflight_bytes`).
    Shipping,
    /// Partition bootstraps (`marekvs_bootstraps_completed_total`) keep completing.
    Bootstraps,
    /// Anti-entropy repairs (`marekvs_ae_repair_ops_total`) keep being applied while a
    /// leaver's stalled replication window leaves what its ring held to anti-entropy.
    Repairs,
    /// Views have not converged.
    Views,
    /// Anything else the gate checks (readiness, scrapes, gauges, replacements).
    Other,
}

impl Moving {
    pub fn as_str(self) -> &'static str {
        match self {
            Moving::AntiEntropy => "AntiEntropy",
            Moving::ClientTraffic => "ClientTraffic",
            Moving::Shipping => "Shipping",
            Moving::Bootstraps => "Bootstraps",
            Moving::Repairs => "Repairs",
            Moving::Views => "Views",
            Moving::Other => "Other",
        }
    }
}

/// A held scale-down step, reported while it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct HoldReport {
    pub reason: BlockReason,
    pub message: String,
    /// What keeps moving.
    pub moving: Moving,
    /// The members where it moves (ordinals).
    pub members: Vec<u32>,
    /// How fast, where there is a rate (repairs or bootstraps per second, summed over
    /// `members`; the leaver's ring backlog in ops for `ReplicationRing`).
    pub rate_per_sec: Option<f64>,
    /// Since when it has held for this reason.
    pub since: Millis,
    /// It has held longer than `spec.scaleDown.handoffTimeoutSeconds`: the cluster reports
    /// it as stuck (Blocked, HandoffTimeout). It never proceeds blindly.
    pub stuck: bool,
}

/// Repairs that move while nothing is held by them.
#[derive(Clone, Debug, PartialEq)]
pub struct BackgroundRepair {
    pub members: Vec<u32>,
    /// Repairs per second, summed over `members`.
    pub rate_per_sec: f64,
    pub since: Millis,
}

/// The members down, in a cluster in mass failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MassFailure {
    /// The down members, by ordinal (at least replicationFactor of them).
    pub down: Vec<u32>,
    /// How many members the membership records.
    pub members: usize,
    pub replication_factor: u32,
}

impl MassFailure {
    /// What the `MassFailure` condition and its Event say.
    pub fn message(&self, spec: &ClusterSpec) -> String {
        let names: Vec<String> = self.down.iter().map(|o| spec.member_name(*o)).collect();
        format!(
            "{} of {} members down ({}) with replicationFactor {}: copies may be missing; only pods on their own volumes are re-created",
            self.down.len(),
            self.members,
            names.join(", "),
            self.replication_factor
        )
    }
}

/// A suspected partition: views have disagreed (or been unknown after disagreeing) since
/// `since`, longer than [`crate::views::SUSPECT_PARTITION_AFTER_MS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuspectedPartition {
    pub since: Millis,
    /// Who sees whom (or which views are unknown), for the condition and its Event.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::PodObs;

    #[test]
    fn a_restart_voids_a_drain() {
        assert!(PodObs::drain_stands(Some(2), 2));
        assert!(!PodObs::drain_stands(Some(2), 3));
        assert!(!PodObs::drain_stands(None, 0));
    }
}
