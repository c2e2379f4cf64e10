//! What a member reports: gauges refreshed every `gauge_refresh_ms` by a stats task (0 before
//! the first refresh after a start), counters of the process (reset by a restart), and
//! what is computed at scrape time (uptime, connected clients, phase). Also the counters the
//! RESP server feeds (commands, input bytes, connections).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::member::NodePhase;
use super::placement::candidates;
use super::{Cluster, ms};

/// A sender's unacknowledged bytes per peer, at most (marekvs 0.2).
const REPL_WINDOW_BYTES: u64 = 4 << 20;

/// Gauges as the stats task last computed them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Gauges {
    pub view_members: u64,
    pub underreplicated_partitions: u64,
    pub effective_rf_min: u64,
    pub owned_partitions: u64,
    pub join_gate_pending_pids: u64,
    pub held_partitions: u64,
    pub ring_ops: u64,
    pub ring_bytes: u64,
    pub mesh_peers: u64,
    pub repl_inflight_bytes: u64,
    pub interest_entries: u64,
    pub db_total_bytes: u64,
}

/// Per-member figures, as `/metrics` reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberFigures {
    pub node_id: String,
    /// `marekvs_info{version}`.
    pub version: String,
    pub phase: Option<NodePhase>,
    pub ready: bool,
    pub view_members: u64,
    pub underreplicated_partitions: u64,
    pub effective_rf_min: u64,
    pub owned_partitions: u64,
    pub join_gate_pending_pids: u64,
    pub bootstraps_completed_total: u64,
    pub ae_repair_ops_total: u64,
    pub ae_rounds_total: u64,
    /// Entries retained in its replication ring (`marekvs_ring_ops`): occupancy, not backlog.
    pub ring_ops: u64,
    /// Their bytes (`marekvs_ring_bytes`).
    pub ring_bytes: u64,
    pub mesh_peers: u64,
    pub repl_ops_applied_total: u64,
    pub repl_ops_sent_total: u64,
    /// Shipped bytes not yet acknowledged (`marekvs_repl_inflight_bytes`), up to the 4 MiB
    /// window per peer.
    pub repl_inflight_bytes: u64,
    pub interest_entries: u64,
    /// Lowercase command name → commands served (`marekvs_commands_total{cmd}`).
    pub commands: BTreeMap<String, u64>,
    pub net_input_bytes_total: u64,
    pub connected_clients: u64,
    pub connections_accepted_total: u64,
    pub connections_closed_total: u64,
    /// Simulator only: owned partitions not waiting for a bootstrap.
    pub held_partitions: u64,
    pub db_total_bytes: u64,
    pub disk_total_bytes: u64,
    pub disk_write_stopped: bool,
    pub uptime_seconds: f64,
}

impl Cluster {
    /// Refresh member `key`'s gauges if due.
    pub(crate) fn refresh_gauges(&mut self, key: &str, now_ms: u64) {
        if self.members[key].next_gauges_ms > now_ms {
            return;
        }
        let owned = self.owned(key).len() as u64;
        let mesh_peers = self.connected_peers(key).len() as u64;
        let m = &self.members[key];
        let n = m.replicas_n as u64;
        let cands = candidates(&m.view).len() as u64;
        let pending = m.bootstrap.len() as u64;
        let gauges = Gauges {
            view_members: m.view.len() as u64,
            underreplicated_partitions: if cands < n {
                u64::from(self.settings.partitions)
            } else {
                0
            },
            effective_rf_min: cands.min(n),
            owned_partitions: owned,
            join_gate_pending_pids: pending,
            held_partitions: self.members[key]
                .owned
                .as_ref()
                .map_or(0, |o| o.iter().filter(|p| !m.bootstrap.contains(p)).count())
                as u64,
            ring_ops: m.ring.ops(),
            ring_bytes: m.ring.bytes(),
            mesh_peers,
            repl_inflight_bytes: m.ring.unsent_bytes(mesh_peers as usize, REPL_WINDOW_BYTES),
            interest_entries: m.interests.values().map(|s| s.len() as u64).sum(),
            db_total_bytes: self.volumes[&m.volume].bytes,
        };
        let every = self.settings.gauge_refresh_ms.max(1);
        // The node's heartbeat `alive:last`, written to its volume by the same stats task while
        // it serves (Active or Leaving): what makes a later start on it a returning member.
        if matches!(m.phase, NodePhase::Active | NodePhase::Leaving)
            && let Some(v) = self.volumes.get_mut(&m.volume)
        {
            v.heartbeat_ms = Some(now_ms);
        }
        let m = self.members.get_mut(key).expect("member exists");
        m.gauges = Some(gauges);
        while m.next_gauges_ms <= now_ms {
            m.next_gauges_ms += every;
        }
    }

    /// What `/metrics` and `/ready` report for a member; `None` when it is not running.
    pub fn figures(&self, now: Duration, key: &str) -> Option<MemberFigures> {
        let m = self.members.get(key)?;
        if !m.is_up() {
            return None;
        }
        let g = m.gauges.clone().unwrap_or_default();
        let c = &m.counters;
        Some(MemberFigures {
            node_id: m.node_id.clone(),
            version: m.version.clone(),
            phase: Some(m.phase),
            ready: matches!(m.phase, NodePhase::Active | NodePhase::Leaving),
            view_members: g.view_members,
            underreplicated_partitions: m
                .faults
                .report_underreplicated
                .unwrap_or(g.underreplicated_partitions),
            effective_rf_min: g.effective_rf_min,
            owned_partitions: g.owned_partitions,
            join_gate_pending_pids: g.join_gate_pending_pids,
            bootstraps_completed_total: c.bootstraps_completed,
            ae_repair_ops_total: c.ae_repair_ops,
            ae_rounds_total: c.ae_rounds,
            ring_ops: g.ring_ops,
            ring_bytes: g.ring_bytes,
            mesh_peers: g.mesh_peers,
            repl_ops_applied_total: c.repl_ops_applied,
            repl_ops_sent_total: c.repl_ops_sent,
            repl_inflight_bytes: g.repl_inflight_bytes,
            interest_entries: g.interest_entries,
            commands: c
                .commands
                .iter()
                .map(|(k, v)| (k.clone(), *v as u64))
                .collect(),
            net_input_bytes_total: c.net_input_bytes,
            connected_clients: c.connections_accepted - c.connections_closed,
            connections_accepted_total: c.connections_accepted,
            connections_closed_total: c.connections_closed,
            held_partitions: g.held_partitions,
            db_total_bytes: match m.faults.disk_fill_percent {
                Some(pct) => m.disk_bytes / 100 * u64::from(pct.min(100)),
                None => g.db_total_bytes,
            },
            disk_total_bytes: m.disk_bytes,
            disk_write_stopped: m.faults.disk_write_stopped,
            uptime_seconds: ms(now).saturating_sub(m.started_ms) as f64 / 1000.0,
        })
    }

    /// The running process of member `key`, if `boot` is still it.
    fn process_of(&mut self, key: &str, boot: u64) -> Option<&mut super::member::Member> {
        self.members
            .get_mut(key)
            .filter(|m| m.is_up() && m.boot == boot)
    }

    /// The process id (boot) of member `key` while it runs.
    pub fn boot_of(&self, key: &str) -> Option<u64> {
        self.members.get(key).filter(|m| m.is_up()).map(|m| m.boot)
    }

    /// Whether member `key`'s RESP port is open: it turned Active in this process.
    pub fn resp_open(&self, key: &str) -> bool {
        self.members
            .get(key)
            .is_some_and(|m| m.is_up() && m.activated)
    }

    /// A client connection was accepted by process `boot` of member `key`.
    pub fn connection_accepted(&mut self, key: &str, boot: u64) {
        if let Some(m) = self.process_of(key, boot) {
            m.counters.connections_accepted += 1;
        }
    }

    /// A client connection of process `boot` closed.
    pub fn connection_closed(&mut self, key: &str, boot: u64) {
        if let Some(m) = self.process_of(key, boot) {
            m.counters.connections_closed += 1;
        }
    }

    /// Bytes read from a client connection of process `boot`.
    pub fn input_bytes(&mut self, key: &str, boot: u64, bytes: u64) {
        if let Some(m) = self.process_of(key, boot) {
            m.counters.net_input_bytes += bytes;
        }
    }

    /// A command (lowercase name) that process `boot` executed.
    pub fn count_command(&mut self, key: &str, boot: u64, cmd: &str) {
        if let Some(m) = self.process_of(key, boot) {
            *m.counters.commands.entry(cmd.to_string()).or_default() += 1.0;
        }
    }

    /// Load: commands spread over the serving (Active or Leaving) members.
    pub(crate) fn add_load(&mut self, dt: f64) {
        if self.settings.load_ops_per_sec <= 0.0 {
            return;
        }
        let serving = |m: &super::member::Member| m.is_up() && m.phase != NodePhase::Joining;
        let count = self.members.values().filter(|m| serving(m)).count();
        if count == 0 {
            return;
        }
        let each = self.settings.load_ops_per_sec * dt / count as f64;
        for m in self.members.values_mut().filter(|m| serving(m)) {
            *m.counters.commands.entry("get".into()).or_default() += each * 0.8;
            *m.counters.commands.entry("set".into()).or_default() += each * 0.2;
        }
    }
}
