//! The simulated data plane as one shared, lockable value: every marekvs cluster the harness
//! runs, keyed by the gossip seeds its members were given (members that share seeds form one
//! cluster, as they would over gossip), and a monotonic clock that drives the model.
//!
//! The key commands (`set`, `get`, ...) are what a member's RESP port serves; they fail with
//! `NotServing` for a member that is not running (or not known).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::model::{
    Cluster, Faults, MemberFigures, MemberSpec, MemberView, NodePhase, NotServing, Settings,
    node_myid, run_id,
};

/// The port `CLUSTER NODES` shows after `@`, where Redis shows its cluster bus port: marekvs's
/// gossip port.
pub const GOSSIP_PORT: u16 = 7946;
/// The members' RESP port, as in the node's `MAREKVS_RESP_ADDR` default.
pub const RESP_PORT: u16 = 6379;

#[derive(Clone)]
pub struct SharedWorld(Arc<Mutex<World>>);

pub struct World {
    epoch: Instant,
    /// The epoch in Unix seconds, for boot times (`CLUSTER NODES` generations).
    epoch_unix: f64,
    /// Settings for clusters not created yet; `PUT /settings` also applies them to existing ones.
    pub settings: Settings,
    pub clusters: BTreeMap<String, Cluster>,
    /// Member key → cluster key.
    member_cluster: BTreeMap<String, String>,
    /// Faults set for a member before (or after) its process starts; they survive restarts.
    pub preset_faults: BTreeMap<String, Faults>,
    /// Readiness probes the pod runner has made, per member key (for tests that must see a
    /// probe before asserting on readiness).
    pub probes: BTreeMap<String, u64>,
    /// Requests to `/drain` each member's HTTP server received, per member key, whatever it
    /// answered (for tests that must see who was asked to drain). Kept across restarts and
    /// removal, like the faults.
    pub drain_requests: BTreeMap<String, u64>,
    seed: u64,
}

/// What the control API reports about one member.
#[derive(Clone, Debug, Serialize)]
pub struct MemberReport {
    pub key: String,
    pub cluster: String,
    pub node_id: String,
    pub volume: String,
    pub running: bool,
    /// Got SIGTERM and is flushing before it exits.
    pub flushing: bool,
    pub phase: NodePhase,
    /// Node ids this member's view holds, with their phase as it sees it.
    pub view: BTreeMap<String, NodePhase>,
    pub figures: Option<MemberFigures>,
    pub faults: Faults,
    pub readiness_probes: u64,
    /// Requests to its `/drain`, whatever it answered.
    pub drain_requests: u64,
    /// Simulator only: ring entries not yet walked for a connected peer, now (no node gauge
    /// shows this, and `figures` are refreshed only every `gauge_refresh_ms`).
    pub ring_backlog: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClusterReport {
    pub key: String,
    pub lost_partitions_total: u64,
    pub unavailable_partitions: u64,
    /// Keys whose newest version on a running member is a value (not a tombstone).
    pub live_keys: u64,
    pub members: Vec<MemberReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WorldReport {
    pub settings: Settings,
    /// Sum over clusters: partitions whose every copy vanished from the running members.
    pub lost_partitions_total: u64,
    pub clusters: Vec<ClusterReport>,
}

impl SharedWorld {
    pub fn new(settings: Settings, seed: u64) -> Self {
        let epoch_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        SharedWorld(Arc::new(Mutex::new(World {
            epoch: Instant::now(),
            epoch_unix,
            settings,
            clusters: BTreeMap::new(),
            member_cluster: BTreeMap::new(),
            preset_faults: BTreeMap::new(),
            probes: BTreeMap::new(),
            drain_requests: BTreeMap::new(),
            seed,
        })))
    }

    pub fn lock(&self) -> MutexGuard<'_, World> {
        // A panic while holding the lock is a bug in the model; keep serving what is left.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl World {
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    pub fn tick(&mut self) {
        let now = self.now();
        for c in self.clusters.values_mut() {
            c.tick(now);
        }
    }

    fn cluster_of(&mut self, key: &str) -> Option<&mut Cluster> {
        let ck = self.member_cluster.get(key)?;
        self.clusters.get_mut(ck)
    }

    /// The cluster key and cluster of a member, for the key commands.
    fn serving_cluster(&mut self, key: &str) -> Result<(String, &mut Cluster), NotServing> {
        let ck = self.member_cluster.get(key).ok_or(NotServing)?;
        let cluster = self.clusters.get_mut(ck).ok_or(NotServing)?;
        Ok((ck.clone(), cluster))
    }

    pub fn start_member(&mut self, cluster: &str, mut spec: MemberSpec) {
        let now = self.now();
        if let Some(f) = self.preset_faults.get(&spec.key) {
            spec.faults = f.clone();
        }
        self.seed = self.seed.wrapping_add(0x9e37_79b9);
        let (settings, seed) = (self.settings.clone(), self.seed);
        self.member_cluster
            .insert(spec.key.clone(), cluster.to_string());
        self.clusters
            .entry(cluster.to_string())
            .or_insert_with(|| Cluster::new(settings, seed))
            .start_member(now, spec);
    }

    pub fn drain(&mut self, key: &str) -> bool {
        let now = self.now();
        self.cluster_of(key).is_some_and(|c| c.drain(now, key))
    }

    pub fn terminate(&mut self, key: &str) {
        let now = self.now();
        if let Some(c) = self.cluster_of(key) {
            c.terminate(now, key);
        }
    }

    pub fn kill(&mut self, key: &str) {
        let now = self.now();
        if let Some(c) = self.cluster_of(key) {
            c.kill(now, key);
        }
    }

    pub fn remove_member(&mut self, key: &str) {
        let now = self.now();
        if let Some(c) = self.cluster_of(key) {
            c.remove_member(now, key);
        }
        self.member_cluster.remove(key);
        self.probes.remove(key);
    }

    pub fn is_running(&self, key: &str) -> bool {
        self.member_cluster
            .get(key)
            .and_then(|ck| self.clusters.get(ck))
            .and_then(|c| c.members.get(key))
            .is_some_and(|m| m.is_up())
    }

    fn cluster_ref(&self, key: &str) -> Option<&Cluster> {
        self.clusters.get(self.member_cluster.get(key)?)
    }

    /// The id of member `key`'s running process (it changes with every start).
    pub fn boot_of(&self, key: &str) -> Option<u64> {
        self.cluster_ref(key)?.boot_of(key)
    }

    /// Whether member `key`'s RESP port is open (it turned Active since it started).
    pub fn resp_open(&self, key: &str) -> bool {
        self.cluster_ref(key).is_some_and(|c| c.resp_open(key))
    }

    /// A RESP connection accepted by process `boot` of member `key`.
    pub fn connection_accepted(&mut self, key: &str, boot: u64) {
        if let Some(c) = self.cluster_of(key) {
            c.connection_accepted(key, boot);
        }
    }

    /// A RESP connection of process `boot` of member `key` closed.
    pub fn connection_closed(&mut self, key: &str, boot: u64) {
        if let Some(c) = self.cluster_of(key) {
            c.connection_closed(key, boot);
        }
    }

    /// Bytes read from a RESP connection of process `boot` of member `key`.
    pub fn input_bytes(&mut self, key: &str, boot: u64, bytes: u64) {
        if let Some(c) = self.cluster_of(key) {
            c.input_bytes(key, boot, bytes);
        }
    }

    /// A command (lowercase name) process `boot` of member `key` executed.
    pub fn count_command(&mut self, key: &str, boot: u64, cmd: &str) {
        if let Some(c) = self.cluster_of(key) {
            c.count_command(key, boot, cmd);
        }
    }

    pub fn faults(&self, key: &str) -> Faults {
        self.member_cluster
            .get(key)
            .and_then(|ck| self.clusters.get(ck))
            .and_then(|c| c.members.get(key))
            .map(|m| m.faults.clone())
            .or_else(|| self.preset_faults.get(key).cloned())
            .unwrap_or_default()
    }

    pub fn set_faults(&mut self, key: &str, faults: Faults) {
        self.preset_faults.insert(key.to_string(), faults.clone());
        if let Some(c) = self.cluster_of(key) {
            c.set_faults(key, faults);
        }
    }

    pub fn figures(&mut self, key: &str) -> Option<MemberFigures> {
        let now = self.now();
        self.cluster_of(key)?.figures(now, key)
    }

    pub fn apply_settings(&mut self, settings: Settings) {
        for c in self.clusters.values_mut() {
            let partitions = c.settings.partitions;
            c.settings = Settings {
                partitions,
                ..settings.clone()
            };
        }
        self.settings = settings;
    }

    /// `SET` through member `key`.
    pub fn set(&mut self, key: &str, k: &[u8], value: &[u8]) -> Result<(), NotServing> {
        let now = self.now();
        self.serving_cluster(key)?.1.set(now, key, k, value)
    }

    /// `GET` through member `key`: `None` for a missing, deleted or not yet visible key.
    pub fn get(&mut self, key: &str, k: &[u8]) -> Result<Option<Vec<u8>>, NotServing> {
        let now = self.now();
        self.serving_cluster(key)?.1.get(now, key, k)
    }

    /// `DEL` through member `key`: how many of `keys` existed.
    pub fn del(&mut self, key: &str, keys: &[Vec<u8>]) -> Result<u64, NotServing> {
        let now = self.now();
        self.serving_cluster(key)?.1.del(now, key, keys)
    }

    /// `EXISTS` through member `key`.
    pub fn exists(&mut self, key: &str, keys: &[Vec<u8>]) -> Result<u64, NotServing> {
        let now = self.now();
        self.serving_cluster(key)?.1.exists(now, key, keys)
    }

    /// `DBSIZE` of member `key`: the keys on its own volume.
    pub fn dbsize(&mut self, key: &str) -> Result<u64, NotServing> {
        self.serving_cluster(key)?.1.dbsize(key)
    }

    /// `CLUSTER MYID`: the node id as 40 hex digits, the same for every run of the member.
    pub fn myid(&mut self, key: &str) -> Result<String, NotServing> {
        let view = self.serving_cluster(key)?.1.view(key)?;
        Ok(node_myid(&view.node_id))
    }

    /// `CLUSTER NODES`: one Redis-format line per node in the member's own view (Joining and
    /// Leaving ones too), `<id> <ip>:6379@7946 <flags> - 0 0 <generation> connected`, flags
    /// `myself,master` for the member and `master` for the others, the generation being the
    /// node's boot time in Unix seconds (a view only holds peers it believes up, so no `fail`).
    pub fn cluster_nodes(&mut self, key: &str) -> Result<String, NotServing> {
        let swapped = self.faults(key).view_stranger_for;
        let epoch_unix = self.epoch_unix;
        let (ck, cluster) = self.serving_cluster(key)?;
        let view = cluster.view(key)?;
        let mut out = String::new();
        for peer in &view.peers {
            let flags = if peer.myself {
                "myself,master"
            } else {
                "master"
            };
            // The fault: a stranger's id and a loopback address nobody serves.
            let (id, addr) = if !peer.myself && swapped.as_deref() == Some(&peer.node_id) {
                (
                    run_id(&ck, &format!("stranger-{}", peer.node_id)),
                    "127.0.0.254",
                )
            } else {
                (node_myid(&peer.node_id), peer.addr.as_deref().unwrap_or(""))
            };
            let generation = peer
                .started_ms
                .map_or(0, |t| (epoch_unix + t as f64 / 1000.0) as u64);
            let _ = writeln!(
                out,
                "{id} {addr}:{}@{} {flags} - 0 0 {generation} connected",
                RESP_PORT, GOSSIP_PORT,
            );
        }
        Ok(out)
    }

    /// `CLUSTER INFO`: `cluster_state` is `fail` while the member sees fewer Active members
    /// than its replica count.
    pub fn cluster_info(&mut self, key: &str) -> Result<String, NotServing> {
        let view: MemberView = self.serving_cluster(key)?.1.view(key)?;
        let state = if view.active() < view.replicas_n {
            "fail"
        } else {
            "ok"
        };
        Ok(format!(
            "cluster_state:{state}\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\n",
            view.peers.len(),
            view.active(),
        ))
    }

    pub fn report(&mut self) -> WorldReport {
        let now = self.now();
        let mut clusters = Vec::new();
        let mut lost = 0;
        for (ck, c) in self.clusters.iter_mut() {
            lost += c.lost_partitions_total;
            let keys: Vec<String> = c.members.keys().cloned().collect();
            let mut members = Vec::new();
            for key in keys {
                let figures = c.figures(now, &key);
                let ring_backlog = if c.members[&key].is_up() {
                    c.ring_backlog(&key)
                } else {
                    0
                };
                let m = &c.members[&key];
                members.push(MemberReport {
                    key: key.clone(),
                    cluster: ck.clone(),
                    node_id: m.node_id.clone(),
                    volume: m.volume.clone(),
                    running: m.is_up(),
                    flushing: matches!(m.process, crate::model::Process::Flushing { .. }),
                    phase: m.phase,
                    view: m.view.iter().map(|(k, s)| (k.clone(), s.phase)).collect(),
                    figures,
                    faults: m.faults.clone(),
                    readiness_probes: self.probes.get(&key).copied().unwrap_or(0),
                    drain_requests: self.drain_requests.get(&key).copied().unwrap_or(0),
                    ring_backlog,
                });
            }
            clusters.push(ClusterReport {
                key: ck.clone(),
                lost_partitions_total: c.lost_partitions_total,
                unavailable_partitions: c.unavailable_partitions(),
                live_keys: c.live_keys(),
                members,
            });
        }
        WorldReport {
            settings: self.settings.clone(),
            lost_partitions_total: lost,
            clusters,
        }
    }
}

/// A view made huge with lines of spaces (blank: a reader skips them), to `bytes` in all.
/// (The `view_padding_bytes` fault; the RESP server pads after it lets the world go.)
pub fn pad_with_blank_lines(text: &mut String, bytes: usize) {
    let line = format!("{}\n", " ".repeat(1023));
    text.reserve(bytes.saturating_sub(text.len()));
    while text.len() + line.len() <= bytes {
        text.push_str(&line);
    }
    if text.len() < bytes {
        text.push_str(&" ".repeat(bytes - text.len() - 1));
        text.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_padded_view_is_exactly_as_long_as_asked_and_its_lines_are_blank() {
        for bytes in [0, 90, 1024, 1025, 1 << 20, (1 << 20) + 7] {
            let line = "0123 127.0.0.1:6379@7373 myself,master - 0 0 0 connected\n".to_string();
            let mut text = line.clone();
            pad_with_blank_lines(&mut text, bytes);
            assert_eq!(text.len(), bytes.max(line.len()), "{bytes}");
            assert!(text[line.len()..].lines().all(|l| l.trim().is_empty()));
        }
    }

    fn spec(i: usize) -> MemberSpec {
        MemberSpec {
            key: format!("ns/demo-{i}"),
            node_id: i.to_string(),
            replicas_n: 2,
            volume: format!("vol-{i}"),
            disk_bytes: 1 << 30,
            faults: Faults::default(),
            addr: format!("127.51.0.{i}"),
            version: crate::model::MODELLED_VERSION.into(),
        }
    }

    #[test]
    fn cluster_commands_describe_the_members_own_view() {
        let world = SharedWorld::new(Settings::default(), 1);
        let mut w = world.lock();
        w.start_member("ns/demo", spec(0));
        let id = w.myid("ns/demo-0").unwrap();
        assert_eq!(id, format!("{:040x}", 0), "the node id as 40 hex digits");
        let generation = w.epoch_unix as u64;
        let nodes = w.cluster_nodes("ns/demo-0").unwrap();
        let gen_of = |line: &str| -> u64 { line.split(' ').nth(6).unwrap().parse().unwrap() };
        assert!(
            nodes.starts_with(&format!("{id} 127.51.0.0:6379@7946 myself,master - 0 0 ")),
            "{nodes}"
        );
        assert!(nodes.ends_with(" connected\n"), "{nodes}");
        assert!(
            gen_of(&nodes).abs_diff(generation) <= 1,
            "the generation is the boot time in Unix seconds: {nodes}"
        );
        assert_eq!(
            w.cluster_info("ns/demo-0").unwrap(),
            "cluster_state:fail\r\ncluster_known_nodes:1\r\ncluster_size:0\r\n",
            "a lone joining member of an RF 2 cluster sees nobody Active"
        );
        w.start_member("ns/demo", spec(1));
        let nodes = w.cluster_nodes("ns/demo-1").unwrap();
        let lines: Vec<&str> = nodes.lines().collect();
        assert_eq!(
            lines.len(),
            2,
            "the newcomer learns the members from its seeds, Joining ones included"
        );
        assert!(lines[0].starts_with(&format!("{id} 127.51.0.0:6379@7946 master - 0 0 ")));
        assert!(lines[1].starts_with(&format!(
            "{:040x} 127.51.0.1:6379@7946 myself,master - 0 0 ",
            1
        )));
        assert_eq!(w.myid("ns/other"), Err(NotServing));
        w.set("ns/demo-1", b"k", b"v").unwrap();
        assert_eq!(w.get("ns/demo-1", b"k"), Ok(Some(b"v".to_vec())));
        assert_eq!(w.report().clusters[0].live_keys, 1);
    }
}
