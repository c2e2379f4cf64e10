//! The simulated data plane as one shared, lockable value: every marekvs cluster the harness
//! runs, keyed by the gossip seeds its members were given (members that share seeds form one
//! cluster, as they would over gossip), and a monotonic clock that drives the model.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::model::{Cluster, Faults, MemberFigures, MemberSpec, NodePhase, Settings};

#[derive(Clone)]
pub struct SharedWorld(Arc<Mutex<World>>);

pub struct World {
    epoch: Instant,
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
}

#[derive(Clone, Debug, Serialize)]
pub struct ClusterReport {
    pub key: String,
    pub lost_partitions_total: u64,
    pub unavailable_partitions: u64,
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
        SharedWorld(Arc::new(Mutex::new(World {
            epoch: Instant::now(),
            settings,
            clusters: BTreeMap::new(),
            member_cluster: BTreeMap::new(),
            preset_faults: BTreeMap::new(),
            probes: BTreeMap::new(),
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
            c.wake();
        }
        self.settings = settings;
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
                });
            }
            clusters.push(ClusterReport {
                key: ck.clone(),
                lost_partitions_total: c.lost_partitions_total,
                unavailable_partitions: c.unavailable_partitions(),
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
