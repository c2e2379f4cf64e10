//! Tunables of the simulated data plane and the faults a test can inject into one member.

use serde::{Deserialize, Serialize};

/// Partitions of the key space; the contract speaks of "partitions this node homes (of 4096)".
pub const DEFAULT_PARTITIONS: u32 = 4096;

/// Tunables of the simulated data plane. Defaults follow what real nodes do or were measured
/// doing; rates are scaled where that keeps tests quick (the bootstrap copy rate).
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
    /// After SIGTERM a member sleeps this long (Leaving) before it looks at its ring.
    pub flush_ms: u64,
    /// ... then waits at most this long for its ring backlog to connected peers to empty.
    pub flush_backlog_max_ms: u64,
    /// A (re)started member stays Joining at least this long.
    pub join_delay_ms: u64,
    /// ... and, while its view holds other members but none of them Active (a cold start of
    /// the cluster), until this long after its start (the node's cold-start settle, 6 s).
    pub cold_start_settle_ms: u64,
    /// Whole partitions one member bootstraps per second.
    pub copy_rate_per_sec: f64,
    /// Bootstrapping a partition costs one unit of the copy budget plus one per this many
    /// bytes of key data it carries, so a bootstrap takes longer the more data moves.
    pub copy_bytes_per_unit: u64,
    /// Cluster-wide command rate spread over the serving members (command counters only:
    /// these commands carry no keys).
    pub load_ops_per_sec: f64,
    /// Originated writes a member's replication ring ships per second (a token bucket holding
    /// one second of it). Writes above it wait in the ring (the backlog SIGTERM waits for);
    /// past the ring's capacity the oldest are evicted unshipped: a ring gap. 0: unlimited.
    pub ring_ops_per_sec: f64,
    /// ... and at most this many of their ring bytes (key + value + 32) per second (a bucket
    /// of one second too), so large values ship slower than small ones. 0: unlimited.
    /// Measured on marekvs 0.2 (crates/sim/tests/traces): 2,000 to 5,000 writes of 16 B
    /// reached the other owners within 0.5-1 s; during a burst of 1 KiB writes about
    /// 4,500 entries a second (some 4.7 MB/s) went out.
    pub ring_ship_bytes_per_sec: f64,
    /// Ring capacity: entries are evicted oldest first past this many ...
    pub ring_capacity_ops: u64,
    /// ... or this many bytes (each entry counts key + value + 32).
    pub ring_capacity_bytes: u64,
    /// Fraction of originated entries silently never shipped to a given peer (measured: 9 of
    /// 2,000); they reach it only by anti-entropy. 0: none.
    pub ring_skip_fraction: f64,
    /// Anti-entropy rounds start every this long ...
    pub ae_interval_ms: u64,
    /// ... plus a jitter below this.
    pub ae_jitter_ms: u64,
    /// Probability that one anti-entropy message is silently dropped (beside the drops of a
    /// full queue).
    pub ae_drop_probability: f64,
    /// Messages a mesh connection's send queue holds; one put on a full queue is dropped
    /// (`WRITER_QUEUE` on the node: 4,096).
    pub ae_queue_capacity: usize,
    /// Messages a member's anti-entropy lane holds before its connections stall (8,192).
    pub ae_inbox_capacity: usize,
    /// An anti-entropy message encoded larger than this is dropped (`MAX_FRAME`: 8 MiB).
    pub ae_frame_limit_bytes: u64,
    /// Records a member's anti-entropy task scans a second: what its one sequential handler
    /// gets through (a bucket's keys, a diff, a request each scan their whole partition).
    /// Chosen against the real `gap` trace (crates/sim/tests/traces): repairs spread over
    /// rounds as there; at lower rates the lanes clog and repair stalls, which the node did
    /// not. The model still empties its backlog about twice as fast as the node. 0: unlimited.
    pub ae_scan_records_per_sec: f64,
    /// Lease of a copy a non-owner fetched for a read.
    pub read_lease_ms: u64,
    /// Gauges (cluster, ring, mesh, join gate, disk) are refreshed this often; they read 0
    /// before the first refresh after a start.
    pub gauge_refresh_ms: u64,
    /// A member starting on a volume a member served from (the node's heartbeat, written while
    /// Active or Leaving) less than this long ago is a returning member: it trusts its data and
    /// bootstraps nothing (`gc_grace` on the node).
    pub returning_grace_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            partitions: DEFAULT_PARTITIONS,
            gossip_delay_ms: (300, 1200),
            leave_detect_ms: (4000, 6500),
            crash_detect_ms: (3000, 5000),
            flush_ms: 2000,
            flush_backlog_max_ms: 7000,
            join_delay_ms: 2000,
            cold_start_settle_ms: 6000,
            copy_rate_per_sec: 2048.0,
            copy_bytes_per_unit: 64 * 1024,
            load_ops_per_sec: 0.0,
            ring_ops_per_sec: 20_000.0,
            ring_ship_bytes_per_sec: 4_500_000.0,
            ring_capacity_ops: 262_144,
            ring_capacity_bytes: 128 << 20,
            ring_skip_fraction: 9.0 / 2000.0,
            ae_interval_ms: 5000,
            ae_jitter_ms: 2000,
            ae_drop_probability: 0.0,
            ae_queue_capacity: 4096,
            ae_inbox_capacity: 8192,
            ae_frame_limit_bytes: 8 << 20,
            ae_scan_records_per_sec: 200_000.0,
            read_lease_ms: 60_000,
            gauge_refresh_ms: 2000,
            returning_grace_ms: 3_600_000,
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
    /// Bootstrap at this rate instead of the cluster's.
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
    /// Its `CLUSTER NODES` is padded with blank lines to this many bytes (still a valid view).
    pub view_padding_bytes: Option<u64>,
}
