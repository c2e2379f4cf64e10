//! A deterministic model of a marekvs cluster, as measured on real nodes (see
//! `shared/docs/marekvs-node-contract.md`): per-member membership views that lag the truth,
//! rendezvous placement over the members a view sees Active, data copies tracked per volume
//! and moved at a finite rate, and a counter of partitions whose every copy vanished.
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
    /// Partitions one member copies per second (bootstrap and anti-entropy repair).
    pub copy_rate_per_sec: f64,
    /// Bytes of data per partition, for the disk gauges.
    pub bytes_per_partition: u64,
    /// Cluster-wide command rate spread over the serving members.
    pub load_ops_per_sec: f64,
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
            bytes_per_partition: 64 * 1024,
            load_ops_per_sec: 0.0,
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
    pub commands_get_total: u64,
    pub commands_set_total: u64,
    pub held_partitions: u64,
    pub db_total_bytes: u64,
    pub disk_total_bytes: u64,
    pub disk_write_stopped: bool,
    pub uptime_seconds: f64,
}

/// One marekvs cluster: the members that gossip with each other, and their volumes.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub settings: Settings,
    /// Member key (for the harness: `namespace/pod`) → member.
    pub members: BTreeMap<String, Member>,
    /// Volume id → which partitions it holds. Outlives members: a member that returns on the
    /// same volume finds its data.
    volumes: BTreeMap<String, Vec<bool>>,
    /// A partition exists once some member held it; before that, bootstrapping it copies nothing.
    existed: Vec<bool>,
    /// Partitions currently without any copy on a running member.
    unavailable: Vec<bool>,
    pub lost_partitions_total: u64,
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

impl Cluster {
    pub fn new(settings: Settings, seed: u64) -> Self {
        let p = settings.partitions as usize;
        Cluster {
            settings,
            members: BTreeMap::new(),
            volumes: BTreeMap::new(),
            existed: vec![false; p],
            unavailable: vec![false; p],
            lost_partitions_total: 0,
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
        } = spec;
        let (key, node_id, volume) = (key.as_str(), node_id.as_str(), volume.as_str());
        let now_ms = ms(now);
        let p = self.settings.partitions as usize;
        self.volumes
            .entry(volume.to_string())
            .or_insert_with(|| vec![false; p]);
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

    /// Whether a running member other than `except` holds `pid`.
    fn has_online_copy(&self, pid: u32, except: Option<&str>) -> bool {
        self.members.iter().any(|(k, m)| {
            Some(k.as_str()) != except
                && m.is_up()
                && self.volumes.get(&m.volume).is_some_and(|v| v[pid as usize])
        })
    }

    /// Returns whether any partition's availability changed.
    fn account_availability(&mut self) -> bool {
        let mut changed = false;
        let p = self.settings.partitions as usize;
        let mut online = vec![false; p];
        for m in self.members.values().filter(|m| m.is_up()) {
            if let Some(v) = self.volumes.get(&m.volume) {
                for (i, held) in v.iter().enumerate() {
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
        let global_rate = self.settings.copy_rate_per_sec;
        for key in &keys {
            if !self.members[key].is_up() {
                continue;
            }
            let owned = self.owned(key);
            let (volume, joining, rate) = {
                let m = &self.members[key];
                (
                    m.volume.clone(),
                    m.phase == NodePhase::Joining,
                    m.faults.copy_rate_per_sec.unwrap_or(global_rate),
                )
            };
            let missing: Vec<u32> = owned
                .iter()
                .copied()
                .filter(|pid| !self.volumes[&volume][*pid as usize])
                .collect();
            let mut budget = {
                let m = self.members.get_mut(key).expect("member exists");
                m.copy_budget += rate.max(0.0) * dt;
                m.copy_budget
            };
            let mut copied = 0u64;
            let idle = missing.is_empty();
            changed |= !idle;
            for pid in missing {
                if budget < 1.0 {
                    break;
                }
                let i = pid as usize;
                // A partition that never existed, or whose every copy is already gone, starts
                // empty; otherwise it needs a running source.
                if self.existed[i] && !self.unavailable[i] && !self.has_online_copy(pid, Some(key))
                {
                    continue;
                }
                self.volumes.get_mut(&volume).expect("volume exists")[i] = true;
                self.existed[i] = true;
                self.unavailable[i] = false;
                budget -= 1.0;
                copied += 1;
            }
            {
                let m = self.members.get_mut(key).expect("member exists");
                // No banking of budget while idle, so a later hand-off is not copied in a burst.
                m.copy_budget = if idle { 0.0 } else { budget.min(rate.max(1.0)) };
                if joining {
                    m.bootstraps_completed += copied;
                } else {
                    m.ae_repair_ops += copied;
                }
            }
            if self.members[key].phase == NodePhase::Active {
                changed |= self.drop_unowned(key, &owned);
            }
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
                        && m.process == Process::Running
                        && m.phase != NodePhase::Joining)
            });
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

    /// Returns whether it dropped anything.
    fn drop_unowned(&mut self, key: &str, owned: &[u32]) -> bool {
        let mut dropped = false;
        let m = &self.members[key];
        let owned_set: BTreeSet<u32> = owned.iter().copied().collect();
        let cands: Vec<String> = Self::candidates(&m.view)
            .into_iter()
            .map(String::from)
            .collect();
        let cand_refs: Vec<&str> = cands.iter().map(String::as_str).collect();
        let n = m.replicas_n;
        let volume = m.volume.clone();
        let held: Vec<u32> = self.volumes[&volume]
            .iter()
            .enumerate()
            .filter(|(i, h)| **h && !owned_set.contains(&(*i as u32)))
            .map(|(i, _)| i as u32)
            .collect();
        for pid in held {
            // Hand-off: keep the copy until every owner in this view holds it on a running member.
            let owners: Vec<&str> = cand_refs
                .iter()
                .copied()
                .filter(|c| is_owner(c, &cand_refs, n, pid))
                .collect();
            let all_have = !owners.is_empty()
                && owners.iter().all(|o| {
                    self.members.values().any(|pm| {
                        pm.node_id == *o
                            && pm.is_up()
                            && self
                                .volumes
                                .get(&pm.volume)
                                .is_some_and(|v| v[pid as usize])
                    })
                });
            if all_have {
                self.volumes.get_mut(&volume).expect("volume exists")[pid as usize] = false;
                dropped = true;
            }
        }
        dropped
    }

    fn join_gate_pending(&mut self, key: &str) -> u64 {
        if self.members[key].phase != NodePhase::Joining {
            return 0;
        }
        let owned = self.owned(key);
        let v = &self.volumes[&self.members[key].volume];
        owned.iter().filter(|pid| !v[**pid as usize]).count() as u64
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
        let held = self.volumes[&m.volume].iter().filter(|h| **h).count() as u64;
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
                    .filter(|m| self.volumes.get(&m.volume).is_some_and(|v| v[i]))
                    .count()
                    >= n
        })
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
        let repairs = |c: &mut Cluster, t: f64| -> u64 {
            (0..3)
                .map(|i| {
                    c.figures(secs(t), &format!("ns/demo-{i}"))
                        .unwrap()
                        .ae_repair_ops_total
                })
                .sum()
        };
        assert_eq!(repairs(&mut c, 20.0), 0);
        // Slow copying so the hand-off is visibly in progress.
        c.settings.copy_rate_per_sec = 5.0;
        c.kill(secs(20.0), "ns/demo-3");
        run(&mut c, 20.1, 27.0);
        let at_27 = repairs(&mut c, 27.0);
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
        assert!(at_27 > 0, "survivors started repairing");
        assert!(!c.fully_replicated(2), "data is still being copied");
        run(&mut c, 27.1, 29.0);
        assert!(
            repairs(&mut c, 29.0) > at_27,
            "repair counters still move while the gauge reads 0"
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
            (1..80u8).prop_map(Event::Wait),
        ]
    }

    /// Everything the model shows: figures of every member, losses, availability.
    fn observable(c: &mut Cluster, now: Duration) -> Vec<(String, Option<MemberFigures>)> {
        let keys: Vec<String> = c.members.keys().cloned().collect();
        let mut out: Vec<(String, Option<MemberFigures>)> = keys
            .into_iter()
            .map(|k| {
                let f = c.figures(now, &k);
                (k, f)
            })
            .collect();
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
}
