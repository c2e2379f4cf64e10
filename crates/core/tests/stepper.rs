//! The stepper against a small in-memory world, and properties over random observations.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use marekvs_core::stepper::{REQUEUE_BUSY_MS, REQUEUE_IDLE_MS};
use marekvs_core::*;
use proptest::prelude::*;

use common::spec;

/// A toy world: pods and PVCs appear and disappear as actions ask; every running member sees
/// all running members; bootstrap counters move for `copying_ms` after a member is created or
/// its pod deleted (a drain moves nothing, as on marekvs 0.2: a Leaving member still owns its
/// partitions); repair counters move under load.
/// Each member begins an anti-entropy round every [`ROUND_MS`] from its start; client writes
/// reach it as RESP input (what the shell hands the core: its own reads already taken off).
struct World {
    obs: BTreeMap<u32, MemberObs>,
    pvc_seq: u32,
    copying_until: Millis,
    copying_ms: Millis,
    repairs: u64,
    bootstraps: u64,
    last_repair_at: Millis,
    /// Steady client load, when on.
    load: Option<Load>,
    /// When each member's process started, and its RESP input and write commands since.
    started: BTreeMap<u32, Millis>,
    input: BTreeMap<u32, (u64, u64)>,
    last_scrape: Millis,
    /// Members do not report `marekvs_ae_rounds_total`.
    hide_rounds: bool,
    /// The removal victim after the last decision: its pod is built labelled off, as the
    /// shell builds it (`build::pod`).
    victim: Option<u32>,
    /// The API server refuses new pods, with this message.
    refusing: Option<String>,
}

const ROUND_MS: Millis = 6_000;

/// Steady client write load: every member taking client traffic gets `per_sec` writes a
/// second (every scrape, anti-entropy applies repairs on every member: background repair).
/// A member whose traffic is cut keeps getting them from a pooled client for `pinned_ms`:
/// until its process restarts, unless the client dials its pod address (`dials_pod`), which it
/// dials again once the member is back.
#[derive(Clone, Debug)]
struct Load {
    per_sec: u64,
    pinned_ms: Millis,
    cut_at: BTreeMap<u32, Millis>,
    dials_pod: bool,
    /// Members whose pod was deleted while their traffic was cut: the pooled connections to
    /// them closed, and their clients reconnected through the Service.
    reconnected: BTreeSet<u32>,
}

impl Load {
    fn new(per_sec: u64, pinned_ms: Millis) -> Self {
        Load {
            per_sec,
            pinned_ms,
            cut_at: BTreeMap::new(),
            dials_pod: false,
            reconnected: BTreeSet::new(),
        }
    }

    /// Writes member `o` gets a second now.
    fn writes(&self, o: u32, traffic_off: bool, now: Millis) -> u64 {
        match (traffic_off, self.cut_at.get(&o)) {
            (false, _) => self.per_sec,
            (true, _) if self.reconnected.contains(&o) && !self.dials_pod => 0,
            (true, Some(at)) if now < at + self.pinned_ms => self.per_sec,
            (true, _) => 0,
        }
    }
}

impl World {
    fn new(copying_ms: Millis) -> Self {
        World {
            obs: BTreeMap::new(),
            pvc_seq: 0,
            copying_until: 0,
            copying_ms,
            repairs: 0,
            bootstraps: 0,
            last_repair_at: 0,
            load: None,
            started: BTreeMap::new(),
            input: BTreeMap::new(),
            last_scrape: 0,
            hide_rounds: false,
            victim: None,
            refusing: None,
        }
    }

    fn apply(&mut self, actions: &[Action], now: Millis) {
        for a in actions {
            match *a {
                Action::CreatePvc(o) => {
                    self.pvc_seq += 1;
                    self.obs.entry(o).or_default().pvc = Some(PvcObs {
                        uid: format!("uid-{}", self.pvc_seq),
                        terminating: false,
                        outdated: false,
                        absent_since: None,
                        served_since: None,
                        pods_made: Some(0),
                    });
                }
                Action::CreatePod(o) => {
                    let m = self.obs.entry(o).or_default();
                    if let Some(n) = m.pvc.as_mut().and_then(|v| v.pods_made.as_mut()) {
                        *n += 1;
                    }
                    m.pod = Some(PodObs {
                        ready: true,
                        terminating: false,
                        drained: false,
                        outdated: false,
                        image_outdated: false,
                        replace_volume: false,
                        restart: false,
                        client_traffic_off: self.victim == Some(o),
                        never_started: false,
                        node: None,
                        eviction_allowed: false,
                    });
                    self.copying_until = now + self.copying_ms;
                    self.started.insert(o, now);
                    self.input.insert(o, (0, 0));
                }
                Action::Drain(o) => {
                    if let Some(p) = self.obs.get_mut(&o).and_then(|m| m.pod.as_mut()) {
                        p.drained = true;
                    }
                }
                Action::CheckPod(o) => {
                    self.obs.entry(o).or_default().new_pod = match &self.refusing {
                        Some(why) => PodAdmission::Refused {
                            message: why.clone(),
                            ask_again: false,
                        },
                        None => PodAdmission::Admitted,
                    };
                }
                Action::DeletePod(o) => {
                    if let Some(m) = self.obs.get_mut(&o) {
                        let off = m.pod.as_ref().is_some_and(|p| p.client_traffic_off);
                        if let Some(l) = self.load.as_mut().filter(|_| off) {
                            l.reconnected.insert(o);
                        }
                        m.pod = None;
                        m.scrape = None;
                    }
                    self.copying_until = now + self.copying_ms;
                }
                // As the shell: only a pod whose container still never started.
                Action::DeleteUnstartedPod(o) => {
                    if let Some(m) = self.obs.get_mut(&o)
                        && m.pod.as_ref().is_some_and(|p| p.never_started)
                    {
                        m.pod = None;
                        m.scrape = None;
                    }
                }
                Action::DeletePvc(o) => {
                    if let Some(m) = self.obs.get_mut(&o) {
                        m.pvc = None;
                    }
                }
                Action::SetEviction { ordinal, allowed } => {
                    if let Some(p) = self.obs.get_mut(&ordinal).and_then(|m| m.pod.as_mut()) {
                        p.eviction_allowed = allowed;
                    }
                }
                Action::SetClientTraffic { ordinal, on } => {
                    if let Some(p) = self.obs.get_mut(&ordinal).and_then(|m| m.pod.as_mut()) {
                        p.client_traffic_off = !on;
                    }
                    if let Some(l) = self.load.as_mut() {
                        l.cut_at.insert(ordinal, now);
                    }
                }
            }
        }
        self.obs
            .retain(|_, m| m.pod.is_some() || m.pvc.is_some() || m.look_alike);
    }

    fn scrape(&mut self, now: Millis) {
        let running = self.obs.values().filter(|m| m.pod.is_some()).count() as u64;
        // A restarted member's pod is ready one scrape after it was created.
        if now < self.copying_until {
            self.bootstraps += 1;
        }
        if self.load.is_some() {
            self.repairs += 1;
            self.last_repair_at = now;
        }
        let (repairs, bootstraps) = (self.repairs, self.bootstraps);
        let secs = ((now - self.last_scrape).max(0) / 1_000) as u64;
        self.last_scrape = now;
        for (o, m) in self.obs.iter_mut() {
            let Some(p) = m.pod.as_ref() else {
                m.scrape = None;
                continue;
            };
            let writes = self
                .load
                .as_ref()
                .map_or(0, |l| l.writes(*o, p.client_traffic_off, now))
                * secs;
            let (bytes, commands) = self.input.entry(*o).or_insert((0, 0));
            *bytes += writes * 40;
            *commands += writes;
            let started = self.started.get(o).copied().unwrap_or(0);
            m.client_input = Some(writes * 40);
            m.scrape = Some(Scrape {
                view_members: running,
                repairs_total: repairs,
                bootstraps_total: bootstraps,
                ae_rounds: (!self.hide_rounds)
                    .then_some(((now - started).max(0) / ROUND_MS) as u64),
                client_input_bytes: Some(*bytes),
                write_commands: *commands,
                uptime_ms: Some((now - started).max(0) as u64),
                ..Scrape::default()
            });
        }
        self.obs = with_views(std::mem::take(&mut self.obs));
    }
}

/// Each scraped member's view by identity: every scraped member, as its count says.
fn with_views(mut obs: BTreeMap<u32, MemberObs>) -> BTreeMap<u32, MemberObs> {
    let seen: Vec<u32> = obs
        .iter()
        .filter(|(_, m)| m.scrape.is_some())
        .map(|(o, _)| *o)
        .collect();
    for (o, m) in obs.iter_mut() {
        m.view = m
            .scrape
            .as_ref()
            .map(|_| View::of_ordinals(*o, seen.iter().copied()));
    }
    obs
}

/// The lowest ready member with a view sees a stranger in place of another member (the
/// same count): views disagree by identity. Whether it did.
fn swap_a_view(obs: &mut BTreeMap<u32, MemberObs>) -> bool {
    let Some(m) = obs
        .values_mut()
        .find(|m| m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating) && m.view.is_some())
    else {
        return false;
    };
    let v = m.view.as_mut().expect("found with a view");
    let Some(other) = v.peers.keys().find(|id| **id != v.id).cloned() else {
        return false;
    };
    v.peers.remove(&other);
    v.peers.insert("f".repeat(40), "127.9.9.9:6379".into());
    true
}

/// Whether the ready members' views (those read) hold different ids.
fn ready_views_disagree(obs: &BTreeMap<u32, MemberObs>, members: &BTreeSet<u32>) -> bool {
    let sets: BTreeSet<BTreeSet<&str>> = members
        .iter()
        .filter_map(|o| obs.get(o))
        .filter(|m| m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating))
        .filter_map(|m| m.view.as_ref().map(View::ids))
        .collect();
    sets.len() > 1
}

/// Run reconciles every second until `done` or `limit` rounds; returns the decisions.
fn drive(
    spec: &ClusterSpec,
    world: &mut World,
    memory: &mut Memory,
    start: Millis,
    limit: usize,
) -> Vec<Decision> {
    let mut out = Vec::new();
    let mut now = start;
    for _ in 0..limit {
        world.scrape(now);
        let d = decide(&Input {
            spec,
            memory,
            observed: &world.obs,
            now,
        });
        *memory = d.memory.clone();
        world.apply(&d.actions, now);
        let done = d.phase == ClusterPhase::Healthy && d.actions.is_empty();
        out.push(d);
        if done {
            break;
        }
        now += 1_000;
    }
    out
}

/// Reconcile every second from `now` until `done(memory)`; returns the time reached.
fn run_until(
    spec: &ClusterSpec,
    world: &mut World,
    memory: &mut Memory,
    mut now: Millis,
    done: impl Fn(&Memory) -> bool,
) -> Millis {
    while !done(memory) {
        world.scrape(now);
        let d = decide(&Input {
            spec,
            memory,
            observed: &world.obs,
            now,
        });
        *memory = d.memory;
        world.apply(&d.actions, now);
        now += 1_000;
        assert!(now < 100_000_000, "never done");
    }
    now
}

fn names(m: &Memory) -> Vec<u32> {
    m.members.iter().copied().collect()
}

#[test]
fn creates_three_members_and_becomes_healthy() {
    let s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    let ds = drive(&s, &mut w, &mut mem, 0, 30);
    assert_eq!(
        ds[0].actions,
        vec![
            Action::CreatePvc(0),
            Action::CreatePvc(1),
            Action::CreatePvc(2),
            Action::CreatePod(0),
            Action::CreatePod(1),
            Action::CreatePod(2)
        ]
    );
    assert_eq!(ds[0].phase, ClusterPhase::ScalingUp);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 1, 2]);
}

/// A cluster whose members only wait for their pods to turn ready is left to the pod watch
/// (the idle pace); once a ready member waits on what only a scrape shows, it is polled.
#[test]
fn members_waiting_only_for_their_pods_are_not_polled() {
    let s = spec(3, 2);
    let memory = Memory {
        members: [0, 1, 2].into(),
        phases: [
            (0, MemberPhase::Joining),
            (1, MemberPhase::Joining),
            (2, MemberPhase::Joining),
        ]
        .into(),
        ..Memory::default()
    };
    let member = |ready: bool, scraped: bool| MemberObs {
        pod: Some(PodObs {
            ready,
            ..PodObs::default()
        }),
        pvc: Some(PvcObs {
            uid: "v".into(),
            ..PvcObs::default()
        }),
        scrape: scraped.then(|| Scrape {
            view_members: 3,
            ..Scrape::default()
        }),
        view: None,
        look_alike: false,
        password: Default::default(),
        client_input: Some(0),
        new_pod: PodAdmission::Admitted,
    };
    let requeue = |observed: BTreeMap<u32, MemberObs>| {
        let observed = with_views(observed);
        decide(&Input {
            spec: &s,
            memory: &memory,
            observed: &observed,
            now: 10_000,
        })
        .requeue_ms
    };
    // Pods scheduled, none ready yet.
    let pending: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, member(false, false))).collect();
    assert_eq!(requeue(pending.clone()), REQUEUE_IDLE_MS);
    // One pod ready but its member not answering yet: only a scrape will show it.
    let mut one_ready = pending;
    one_ready.insert(0, member(true, false));
    assert_eq!(requeue(one_ready), REQUEUE_BUSY_MS);
    // A pod missing: there is something to do at once.
    let missing: BTreeMap<u32, MemberObs> = (0..3)
        .map(|o| {
            let mut m = member(false, false);
            if o == 2 {
                m.pod = None;
            }
            (o, m)
        })
        .collect();
    assert_eq!(requeue(missing), REQUEUE_BUSY_MS);
}

#[test]
fn scales_down_one_at_a_time_user_choice_first_and_waits_for_quiet_counters() {
    let mut s = spec(5, 2);
    let mut w = World::new(4_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    assert_eq!(names(&mem), vec![0, 1, 2, 3, 4]);

    s.nodes = 3;
    s.remove_first = [1].into();
    let ds = drive(&s, &mut w, &mut mem, 100_000, 200);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 2, 3]);

    // The order of pod deletions: the user's choice, then the highest ordinal; never two at once.
    let deletions: Vec<u32> = ds
        .iter()
        .flat_map(|d| d.actions.iter())
        .filter_map(|a| {
            if let Action::DeletePod(o) = a {
                Some(*o)
            } else {
                None
            }
        })
        .collect();
    let mut distinct = deletions.clone();
    distinct.dedup();
    assert_eq!(distinct, vec![1, 4]);
    // Every pod deletion came only after the counters had been still for the settle window.
    for d in &ds {
        assert!(
            d.actions
                .iter()
                .filter(|a| matches!(a, Action::DeletePod(_)))
                .count()
                <= 1
        );
    }
    // Volumes are kept by default.
    assert!(w.obs.get(&1).and_then(|m| m.pvc.as_ref()).is_some());
}

#[test]
fn the_gauge_alone_does_not_complete_a_removal_while_bootstraps_move() {
    let mut s = spec(4, 2);
    // Copying takes 20 s after each change.
    let mut w = World::new(20_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 120);
    s.nodes = 3;
    let mut now = 200_000;
    // Drain, hand-off, delete: the removal may not complete while bootstraps still move
    // (new owners copying the partitions the leaver held, once it is gone).
    let mut deleted_at = None;
    let mut completed_at = None;
    for _ in 0..120 {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        mem = d.memory.clone();
        if d.actions.contains(&Action::DeletePod(3)) && deleted_at.is_none() {
            deleted_at = Some(now);
        }
        if !mem.members.contains(&3) && completed_at.is_none() {
            completed_at = Some(now);
        }
        w.apply(&d.actions, now);
        now += 1_000;
    }
    let (deleted, completed) = (deleted_at.unwrap(), completed_at.unwrap());
    // Bootstraps moved until 19 s after the deletion, every gauge at 0 meanwhile.
    assert!(
        completed - (deleted + 19_000) >= s.settle_ms,
        "completed {} ms after the deletion, while copying",
        completed - deleted
    );
}

#[test]
fn blocked_while_underreplicated_then_proceeds() {
    let mut s = spec(4, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    s.nodes = 3;
    w.scrape(100_000);
    for m in w.obs.values_mut() {
        m.scrape.as_mut().unwrap().underreplicated = 7;
    }
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now: 100_000,
    });
    assert_eq!(d.phase, ClusterPhase::Blocked);
    assert_eq!(
        d.blocked.as_ref().unwrap().reason,
        BlockReason::Underreplicated
    );
    assert!(d.memory.removal().is_none());
    assert!(d.notes.iter().any(|n| n.reason == "ScaleDownBlocked"));
    mem = d.memory;
    // Once the gauge clears, the removal starts (recorded first, nothing done yet but cutting
    // its client traffic).
    let ds = drive(&s, &mut w, &mut mem, 101_000, 1);
    assert!(ds[0].memory.removal().is_some());
    assert_eq!(ds[0].actions, vec![traffic_off(3)]);
    assert!(ds[0].notes.iter().any(|n| n.reason == "Unblocked"));
}

#[test]
fn never_below_the_floor() {
    let s = spec(2, 2); // asks for 2, floor is 3
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    assert_eq!(names(&mem), vec![0, 1, 2]);
}

#[test]
fn a_deleted_pod_comes_back_on_its_volume_and_a_deleted_pvc_is_replaced() {
    let s = spec(3, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let uid = w.obs[&1].pvc.clone().unwrap().uid;
    w.obs.get_mut(&1).unwrap().pod = None;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 60);
    assert_eq!(ds[0].actions, vec![Action::CreatePod(1)]);
    assert_eq!(ds[0].phase, ClusterPhase::Replacing);
    assert!(ds[0].notes.iter().any(|n| n.reason == "MemberReplaced"));
    assert_eq!(w.obs[&1].pvc.clone().unwrap().uid, uid, "same volume");

    // Pod and PVC deleted; the PVC lingers Terminating first: nothing is created on it.
    w.obs.get_mut(&2).unwrap().pod = None;
    w.obs.get_mut(&2).unwrap().pvc.as_mut().unwrap().terminating = true;
    w.scrape(200_000);
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now: 200_000,
    });
    assert!(
        d.actions.is_empty(),
        "waits for the terminating PVC: {:?}",
        d.actions
    );
    mem = d.memory;
    w.obs.get_mut(&2).unwrap().pvc = None;
    w.obs.remove(&2);
    let ds = drive(&s, &mut w, &mut mem, 201_000, 60);
    assert_eq!(
        ds[0].actions,
        vec![Action::CreatePvc(2), Action::CreatePod(2)]
    );
    assert_ne!(w.obs[&2].pvc.clone().unwrap().uid, uid);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
}

#[test]
fn growing_back_during_a_drain_cancels_and_recycles_the_drained_member() {
    let mut s = spec(4, 2);
    let mut w = World::new(30_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 100);
    s.nodes = 3;
    // Until the victim is drained and handing off.
    let mut now = 200_000;
    now = run_until(&s, &mut w, &mut mem, now, |m| {
        m.removal()
            .is_some_and(|r| r.step == RemovalStep::HandingOff)
    });
    s.nodes = 4;
    w.scrape(now);
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now,
    });
    assert!(d.memory.removal().is_none());
    assert!(d.notes.iter().any(|n| n.reason == "RemovalCancelled"));
    assert_eq!(
        d.actions,
        vec![Action::DeletePod(3)],
        "the drained node restarts on its volume"
    );
    assert_eq!(d.memory.members.len(), 4);
}

#[test]
fn reclaims_the_volume_only_after_the_hand_off_settled() {
    let mut s = spec(4, 2);
    s.reclaim_pvcs = true;
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    s.nodes = 3;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 120);
    let del_pod = ds
        .iter()
        .position(|d| d.actions.contains(&Action::DeletePod(3)))
        .unwrap();
    let del_pvc = ds
        .iter()
        .position(|d| d.actions.contains(&Action::DeletePvc(3)))
        .unwrap();
    assert!(del_pvc > del_pod);
    assert!(
        ds[del_pvc]
            .notes
            .iter()
            .any(|n| n.reason == "MemberRemoved")
    );
    assert!(!w.obs.contains_key(&3));
}

/// Every member's pod spec changed (the shell compares template hashes).
fn change_spec(w: &mut World) {
    for m in w.obs.values_mut() {
        if let Some(p) = m.pod.as_mut() {
            p.outdated = true;
        }
    }
}

fn deleted_pods(ds: &[Decision]) -> Vec<u32> {
    let mut v: Vec<u32> = ds
        .iter()
        .flat_map(|d| d.actions.iter())
        .filter_map(|a| match a {
            Action::DeletePod(o) => Some(*o),
            _ => None,
        })
        .collect();
    v.dedup();
    v
}

#[test]
fn a_spec_change_restarts_one_member_at_a_time_each_drained_and_gated() {
    let s = spec(4, 2);
    let mut w = World::new(4_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    change_spec(&mut w);
    let ds = drive(&s, &mut w, &mut mem, 100_000, 400);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert!(w.obs.values().all(|m| !m.pod.as_ref().unwrap().outdated));
    // Highest ordinal first, each restarted exactly once.
    assert_eq!(deleted_pods(&ds), vec![3, 2, 1, 0]);
    // Each was drained before its pod was deleted, and the next one started only after the
    // previous one was back and settled.
    let mut drained: Option<u32> = None;
    for d in &ds {
        for a in &d.actions {
            match a {
                Action::Drain(o) => drained = Some(*o),
                Action::DeletePod(o) => assert_eq!(drained, Some(*o), "deleted before drained"),
                _ => {}
            }
        }
        assert!(d.phase == ClusterPhase::Updating || d.phase == ClusterPhase::Healthy);
    }
    assert!(
        ds.iter()
            .filter(|d| d.notes.iter().any(|n| n.reason == "MemberUpdated"))
            .count()
            == 4
    );
    // Membership never changed.
    assert_eq!(names(&mem), vec![0, 1, 2, 3]);
}

#[test]
fn a_spec_change_whose_new_pod_is_refused_touches_no_member_until_the_spec_is_fixed() {
    let s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    change_spec(&mut w);
    let why = "pods \"demo-2\" is forbidden: error looking up service account default/nope";
    w.refusing = Some(why.into());
    let ds = drive(&s, &mut w, &mut mem, 100_000, 30);
    // Asked once, then blocked with the server's words: no drain, no label, no deletion.
    assert_eq!(actions_of(&ds), [Action::CheckPod(2)]);
    assert_eq!(mem.roll(), None);
    let last = ds.last().unwrap();
    assert_eq!(last.phase, ClusterPhase::Blocked);
    let blocked = last.blocked.as_ref().expect("blocked");
    assert_eq!(blocked.reason, BlockReason::PodRefused);
    assert!(
        blocked.message.contains("demo-2") && blocked.message.contains(why),
        "{}",
        blocked.message
    );
    // The user fixes the spec (a new template: every answer is stale): the update goes on,
    // each member asked about, drained and restarted in turn.
    w.refusing = None;
    change_spec(&mut w);
    for m in w.obs.values_mut() {
        m.new_pod = PodAdmission::Unchecked;
    }
    let ds = drive(&s, &mut w, &mut mem, 200_000, 400);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(deleted_pods(&ds), vec![2, 1, 0]);
}

#[test]
fn pause_holds_a_rollout_and_resume_continues_it() {
    let mut s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    change_spec(&mut w);
    // One member through, then pause.
    let mut now = 100_000;
    let mut updated = 0;
    while updated < 1 {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        updated += d
            .notes
            .iter()
            .filter(|n| n.reason == "MemberUpdated")
            .count();
        mem = d.memory;
        w.apply(&d.actions, now);
        now += 1_000;
    }
    s.paused = true;
    let ds = drive(&s, &mut w, &mut mem, now, 50);
    assert!(
        ds.iter().all(|d| d.actions.is_empty()),
        "nothing happens while paused"
    );
    let last = ds.last().unwrap();
    assert_eq!(last.phase, ClusterPhase::Paused);
    assert_eq!(last.blocked.as_ref().unwrap().reason, BlockReason::Paused);
    assert_eq!(
        w.obs
            .values()
            .filter(|m| m.pod.as_ref().unwrap().outdated)
            .count(),
        2
    );
    s.paused = false;
    let ds = drive(&s, &mut w, &mut mem, now + 60_000, 400);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(deleted_pods(&ds), vec![1, 0]);
}

#[test]
fn pausing_mid_step_holds_that_step() {
    // Each step of a rolling update and of a removal, paused right there: nothing disruptive
    // happens until it is resumed.
    for (roll_step, removal_step) in [
        (Some(RollStep::Draining), None),
        (Some(RollStep::HandingOff), None),
        (None, Some(RemovalStep::Draining)),
        (None, Some(RemovalStep::HandingOff)),
    ] {
        let mut s = spec(4, 2);
        let mut w = World::new(3_000);
        let mut mem = Memory::default();
        drive(&s, &mut w, &mut mem, 0, 60);
        if roll_step.is_some() {
            change_spec(&mut w);
        } else {
            s.nodes = 3;
        }
        let mut now = 100_000;
        now = run_until(&s, &mut w, &mut mem, now, |m| {
            m.roll().map(|r| r.step) == roll_step && m.removal().map(|r| r.step) == removal_step
        });
        s.paused = true;
        let ds = drive(&s, &mut w, &mut mem, now, 40);
        for d in &ds {
            assert!(
                !d.actions.iter().any(|a| matches!(
                    a,
                    Action::Drain(_) | Action::DeletePod(_) | Action::DeletePvc(_)
                )),
                "paused at {roll_step:?} {removal_step:?} but {:?}",
                d.actions
            );
        }
        assert_eq!(ds.last().unwrap().phase, ClusterPhase::Paused);
        s.paused = false;
        let ds = drive(&s, &mut w, &mut mem, now + 100_000, 600);
        assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    }
}

#[test]
fn a_scale_down_with_a_spec_change_removes_first_then_restarts_only_the_survivors() {
    let mut s = spec(5, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    change_spec(&mut w);
    s.nodes = 3;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 600);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 1, 2]);
    // 4 and 3 are removed (not restarted), then 2, 1, 0 restarted: 5 pod deletions, not 7.
    assert_eq!(deleted_pods(&ds), vec![4, 3, 2, 1, 0]);
    let first_update = ds.iter().position(|d| d.memory.roll().is_some()).unwrap();
    let last_removal = ds
        .iter()
        .rposition(|d| d.memory.removal().is_some())
        .unwrap();
    assert!(last_removal < first_update);
}

#[test]
fn an_update_waits_for_an_unready_member_and_never_restarts_two() {
    let s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    change_spec(&mut w);
    w.obs.get_mut(&0).unwrap().pod.as_mut().unwrap().ready = false;
    let mut now = 100_000;
    for _ in 0..30 {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        assert!(d.memory.roll().is_none());
        assert_eq!(d.phase, ClusterPhase::Blocked);
        assert_eq!(d.blocked.as_ref().unwrap().reason, BlockReason::NotAllReady);
        assert!(d.actions.is_empty());
        mem = d.memory;
        now += 1_000;
    }
}

#[test]
fn replacing_volumes_moves_each_member_to_a_fresh_one_after_its_hand_off() {
    let s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let old: BTreeMap<u32, String> = w
        .obs
        .iter()
        .map(|(o, m)| (*o, m.pvc.as_ref().unwrap().uid.clone()))
        .collect();
    for m in w.obs.values_mut() {
        m.pvc.as_mut().unwrap().outdated = true;
    }
    let ds = drive(&s, &mut w, &mut mem, 100_000, 600);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    for (o, uid) in &old {
        let now = w.obs[o].pvc.as_ref().unwrap();
        assert_ne!(&now.uid, uid, "{o} kept its old volume");
        assert!(!now.outdated);
    }
    // Per member: ask the API server about its new pod, drain, delete the pod, delete the
    // volume, then a new volume and pod; one member at a time, highest first.
    let seq: Vec<Action> = ds
        .iter()
        .flat_map(|d| d.actions.iter().copied())
        .filter(|a| !matches!(a, Action::Drain(_) | Action::SetClientTraffic { .. }))
        .collect();
    let mut expected = Vec::new();
    for o in [2, 1, 0] {
        expected.extend([
            Action::CheckPod(o),
            Action::DeletePod(o),
            Action::DeletePvc(o),
            Action::CreatePvc(o),
            Action::CreatePod(o),
        ]);
    }
    assert_eq!(seq, expected);
}

#[test]
fn a_pod_lost_before_its_hand_off_keeps_its_old_volume() {
    let s = spec(3, 2);
    let mut w = World::new(20_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    for m in w.obs.values_mut() {
        m.pvc.as_mut().unwrap().outdated = true;
    }
    let mut now = 100_000;
    // Until demo-2 is drained (handing off), then its pod is deleted by hand.
    now = run_until(&s, &mut w, &mut mem, now, |m| {
        m.roll().is_some_and(|r| r.step == RollStep::HandingOff)
    });
    let uid = w.obs[&2].pvc.as_ref().unwrap().uid.clone();
    w.apply(&[Action::DeletePod(2)], now);
    for _ in 0..5 {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        assert!(
            !d.actions.contains(&Action::DeletePvc(2)),
            "volume deleted before its hand-off"
        );
        mem = d.memory;
        w.apply(&d.actions, now);
        now += 1_000;
    }
    assert_eq!(w.obs[&2].pvc.as_ref().unwrap().uid, uid);
    assert!(w.obs[&2].pod.is_some(), "restarted on its old volume");
}

// ---- a fresh volume asked for on a member's pod ----

/// The user annotates the pod of member `o`: it asks for a fresh volume.
fn ask_fresh_volume(w: &mut World, o: u32) {
    w.obs
        .get_mut(&o)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .replace_volume = true;
}

fn uid_of(w: &World, o: u32) -> String {
    w.obs[&o].pvc.as_ref().unwrap().uid.clone()
}

/// Only disruptive actions and creations, in order (not the client-traffic labels).
fn actions_of(ds: &[Decision]) -> Vec<Action> {
    ds.iter()
        .flat_map(|d| d.actions.iter().copied())
        .filter(|a| !matches!(a, Action::SetClientTraffic { .. }))
        .collect()
}

fn traffic_off(ordinal: u32) -> Action {
    Action::SetClientTraffic { ordinal, on: false }
}

fn notes_named(ds: &[Decision], reason: &str) -> Vec<String> {
    ds.iter()
        .flat_map(|d| d.notes.iter())
        .filter(|n| n.reason == reason)
        .map(|n| n.message.clone())
        .collect()
}

#[test]
fn a_fresh_volume_asked_on_a_pod_drains_waits_for_the_gate_then_replaces_pod_and_volume() {
    let s = spec(3, 2);
    let mut w = World::new(5_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let old = uid_of(&w, 1);
    let others = (uid_of(&w, 0), uid_of(&w, 2));
    // Whatever the storage spec: no volume is outdated.
    assert!(w.obs.values().all(|m| !m.pvc.as_ref().unwrap().outdated));
    ask_fresh_volume(&mut w, 1);

    let ds = drive(&s, &mut w, &mut mem, 100_000, 600);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    // First the API server is asked whether it admits the new pod, touching nothing.
    assert_eq!(ds[0].actions, vec![Action::CheckPod(1)]);
    assert_eq!(ds[0].memory.roll(), None);
    // Recorded before anything is done to it but cutting its client traffic, with the volume
    // it is to leave.
    assert_eq!(ds[1].actions, vec![traffic_off(1)]);
    let roll = ds[1].memory.roll().expect("recorded");
    assert_eq!(
        (roll.ordinal, &roll.reason),
        (1, &RollReason::VolumeRequested { pvc: old.clone() })
    );
    assert_eq!(ds[0].phase, ClusterPhase::Replacing);
    // Ask the API server about the new pod, drain, delete the pod, then the volume, then a
    // fresh volume and a pod on it.
    let mut seq = actions_of(&ds);
    seq.dedup();
    assert_eq!(
        seq,
        [
            Action::CheckPod(1),
            Action::Drain(1),
            Action::DeletePod(1),
            Action::DeletePvc(1),
            Action::CreatePvc(1),
            Action::CreatePod(1)
        ]
    );
    // The pod went only once the hand-off gate passed: bootstraps still for the settle window
    // (3 s) since the step began (a drain moves nothing), its own rounds long covered.
    let at = |a: Action| ds.iter().position(|d| d.actions.contains(&a)).unwrap();
    assert!(at(Action::DeletePod(1)) - at(Action::Drain(1)) >= 3);
    assert!(at(Action::DeletePvc(1)) > at(Action::DeletePod(1)));
    // A fresh volume; the others kept theirs.
    assert_ne!(uid_of(&w, 1), old);
    assert_eq!((uid_of(&w, 0), uid_of(&w, 2)), others);
    // An Event when it starts and when it completes, each naming the member.
    let started = notes_named(&ds, "VolumeReplacementStarted");
    let done = notes_named(&ds, "VolumeReplaced");
    assert_eq!(started.len(), 1);
    assert_eq!(done.len(), 1);
    assert!(started[0].contains("demo-1") && done[0].contains("demo-1"));
    assert!(notes_named(&ds, "MemberUpdated").is_empty());
    // The new pod carries no request: nothing more happens.
    let after = drive(&s, &mut w, &mut mem, 1_000_000, 30);
    assert!(actions_of(&after).is_empty(), "{:?}", actions_of(&after));
    assert!(mem.disruption.is_none());
}

// ---- a restart asked for on a member's pod ----

fn ask_restart(w: &mut World, o: u32) {
    w.obs.get_mut(&o).unwrap().pod.as_mut().unwrap().restart = true;
}

#[test]
fn a_restart_asked_on_a_pod_drains_waits_for_the_gate_then_restarts_it_on_its_own_volume() {
    let s = spec(3, 2);
    let mut w = World::new(5_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let uids = (uid_of(&w, 0), uid_of(&w, 1), uid_of(&w, 2));
    ask_restart(&mut w, 1);

    let ds = drive(&s, &mut w, &mut mem, 100_000, 600);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    // First the API server is asked whether it admits the new pod, touching nothing.
    assert_eq!(ds[0].actions, vec![Action::CheckPod(1)]);
    assert_eq!(ds[0].memory.roll(), None);
    // Recorded before anything is done to it but cutting its client traffic.
    assert_eq!(ds[1].actions, vec![traffic_off(1)]);
    let roll = ds[1].memory.roll().expect("recorded");
    assert_eq!(
        (roll.ordinal, &roll.reason),
        (1, &RollReason::RestartRequested)
    );
    assert_eq!(ds[0].phase, ClusterPhase::Updating);
    // Ask the API server about the new pod, drain, delete the pod once the gate passed, a new
    // pod on the same volume.
    let mut seq = actions_of(&ds);
    seq.dedup();
    assert_eq!(
        seq,
        [
            Action::CheckPod(1),
            Action::Drain(1),
            Action::DeletePod(1),
            Action::CreatePod(1)
        ]
    );
    // The pod went only once the hand-off gate passed: bootstraps still for the settle window
    // (3 s) since the step began (a drain moves nothing), its own rounds long covered.
    let at = |a: Action| ds.iter().position(|d| d.actions.contains(&a)).unwrap();
    assert!(at(Action::DeletePod(1)) - at(Action::Drain(1)) >= 3);
    // Every member on the volume it had.
    assert_eq!((uid_of(&w, 0), uid_of(&w, 1), uid_of(&w, 2)), uids);
    let started = notes_named(&ds, "RestartStarted");
    let done = notes_named(&ds, "MemberRestarted");
    assert_eq!((started.len(), done.len()), (1, 1));
    assert!(started[0].contains("demo-1") && done[0].contains("demo-1"));
    assert!(notes_named(&ds, "MemberUpdated").is_empty());
    assert!(notes_named(&ds, "VolumeReplaced").is_empty());
    // The new pod carries no request: nothing more happens.
    let after = drive(&s, &mut w, &mut mem, 1_000_000, 30);
    assert!(actions_of(&after).is_empty(), "{:?}", actions_of(&after));
    assert!(mem.disruption.is_none());
}

#[test]
fn a_restart_asked_for_is_held_while_paused_and_cancelled_if_the_pod_stops_asking() {
    let mut s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    ask_restart(&mut w, 2);
    s.paused = true;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 20);
    assert!(actions_of(&ds).is_empty(), "{:?}", actions_of(&ds));
    let last = ds.last().unwrap();
    assert_eq!(last.phase, ClusterPhase::Paused);
    let held = &last.blocked.as_ref().expect("held").message;
    assert!(held.contains("the restart asked for demo-2"), "{held}");
    // Unpaused, it starts once its new pod is admitted; the annotation removed before the
    // drain took: not restarted.
    s.paused = false;
    let asked = drive(&s, &mut w, &mut mem, 199_000, 1);
    assert_eq!(actions_of(&asked), [Action::CheckPod(2)]);
    w.scrape(200_000);
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now: 200_000,
    });
    assert_eq!(
        d.memory.roll().map(|r| (r.ordinal, r.reason.clone())),
        Some((2, RollReason::RestartRequested))
    );
    mem = d.memory;
    w.obs.get_mut(&2).unwrap().pod.as_mut().unwrap().restart = false;
    let ds = drive(&s, &mut w, &mut mem, 201_000, 30);
    assert_eq!(notes_named(&ds, "UpdateCancelled").len(), 1);
    assert!(
        !actions_of(&ds).contains(&Action::DeletePod(2)),
        "{:?}",
        actions_of(&ds)
    );
    assert!(mem.disruption.is_none());
}

#[test]
fn a_fresh_volume_asked_for_is_held_while_paused_before_and_during_its_steps() {
    let mut s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let old = uid_of(&w, 2);
    ask_fresh_volume(&mut w, 2);
    s.paused = true;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 20);
    assert!(actions_of(&ds).is_empty(), "{:?}", actions_of(&ds));
    let last = ds.last().unwrap();
    assert_eq!(last.phase, ClusterPhase::Paused);
    assert!(mem.disruption.is_none(), "not even recorded while paused");
    let why = &last.blocked.as_ref().unwrap().message;
    assert!(why.contains("the fresh volume asked for demo-2"), "{why}");

    // Resumed, it starts; paused again at each step until its pod is gone, nothing moves.
    s.paused = false;
    let mut now = 200_000;
    now = run_until(&s, &mut w, &mut mem, now, |m| {
        m.roll().is_some_and(|r| r.step == RollStep::HandingOff)
    });
    s.paused = true;
    let ds = drive(&s, &mut w, &mut mem, now, 30);
    assert!(actions_of(&ds).is_empty(), "{:?}", actions_of(&ds));
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Paused);
    s.paused = false;
    now = run_until(&s, &mut w, &mut mem, now + 30_000, |m| {
        m.roll().is_some_and(|r| r.step == RollStep::Deleting)
    });
    // Its pod is gone, its volume not yet: paused again, the volume stays.
    s.paused = true;
    let ds = drive(&s, &mut w, &mut mem, now, 10);
    assert!(
        !actions_of(&ds).contains(&Action::DeletePvc(2)),
        "{:?}",
        actions_of(&ds)
    );
    assert_eq!(uid_of(&w, 2), old);
    s.paused = false;
    let ds = drive(&s, &mut w, &mut mem, now + 10_000, 300);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_ne!(uid_of(&w, 2), old);
}

#[test]
fn a_fresh_volume_asked_for_never_starts_beside_a_removal() {
    let mut s = spec(4, 2);
    let mut w = World::new(3_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let old = uid_of(&w, 1);
    s.nodes = 3;
    let now = run_until(&s, &mut w, &mut mem, 100_000, |m| m.removal().is_some());
    ask_fresh_volume(&mut w, 1);
    let ds = drive(&s, &mut w, &mut mem, now, 600);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 1, 2]);
    // Member 1 is touched only after member 3 is removed.
    let removed = ds
        .iter()
        .position(|d| d.notes.iter().any(|n| n.reason == "MemberRemoved"))
        .unwrap();
    let started = ds
        .iter()
        .position(|d| {
            d.notes
                .iter()
                .any(|n| n.reason == "VolumeReplacementStarted")
        })
        .unwrap();
    assert!(started > removed);
    for d in &ds[..started] {
        assert!(
            !d.actions.iter().any(|a| matches!(
                a,
                Action::Drain(1) | Action::DeletePod(1) | Action::DeletePvc(1)
            )),
            "{:?}",
            d.actions
        );
    }
    assert_ne!(uid_of(&w, 1), old);
}

/// The annotated pod deleted by hand before the hand-off: the old volume is kept (it may hold
/// the only copy of recent writes), the member restarts on it, and the request, carried by
/// the rollout record, is carried out anyway once it is drained and handed off again.
#[test]
fn a_fresh_volume_asked_for_never_deletes_the_old_one_before_its_hand_off() {
    let s = spec(3, 2);
    let mut w = World::new(20_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let old = uid_of(&w, 2);
    ask_fresh_volume(&mut w, 2);
    let mut now = run_until(&s, &mut w, &mut mem, 100_000, |m| {
        m.roll().is_some_and(|r| r.step == RollStep::HandingOff)
    });
    // Deleted by hand, annotation and all, while its data is still being handed off.
    w.apply(&[Action::DeletePod(2)], now);
    let mut ds = Vec::new();
    let mut handed_off = false;
    for _ in 0..400 {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        if d.actions.contains(&Action::DeletePvc(2)) {
            assert!(handed_off, "the old volume went before its hand-off");
            assert_eq!(
                d.memory.roll().and_then(|r| r.handed_off_pvc.clone()),
                Some(old.clone())
            );
        }
        handed_off |= d.memory.roll().is_some_and(|r| r.handed_off_pvc.is_some())
            && d.actions.contains(&Action::DeletePod(2));
        mem = d.memory.clone();
        w.apply(&d.actions, now);
        let done = d.phase == ClusterPhase::Healthy && d.actions.is_empty();
        ds.push(d);
        if done {
            break;
        }
        now += 1_000;
    }
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(notes_named(&ds, "RestartedOnOldVolume").len(), 1);
    assert_eq!(notes_named(&ds, "VolumeReplaced").len(), 1);
    assert_ne!(uid_of(&w, 2), old, "the request survived its pod");
    // First back on its old volume, then drained again.
    let seq = actions_of(&ds);
    let first_create = seq.iter().position(|a| *a == Action::CreatePod(2)).unwrap();
    let delete_pvc = seq.iter().position(|a| *a == Action::DeletePvc(2)).unwrap();
    assert!(first_create < delete_pvc);
    assert!(seq[first_create..delete_pvc].contains(&Action::Drain(2)));
}

// ---- properties over arbitrary observations ----

fn arb_obs() -> impl Strategy<Value = MemberObs> {
    (
        prop::option::weighted(
            0.85,
            (
                any::<bool>(),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.3),
                prop::bool::weighted(0.05),
                prop::bool::weighted(0.7),
                prop::bool::weighted(0.5),
            ),
        ),
        prop::option::weighted(
            0.9,
            (
                prop::bool::weighted(0.05),
                prop::bool::weighted(0.2),
                // Mostly a first pod, so that removals without the gate are reached.
                prop::option::weighted(0.8, prop_oneof![3 => Just(1u32), 1 => 0u32..3]),
            ),
        ),
        prop::option::weighted(
            0.8,
            (
                2u64..7,
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
                0u64..3,
                // Anti-entropy rounds: mostly growing, so a leaver is at times covered; a
                // lower figure than before reads as a restart.
                prop::option::weighted(0.95, 1_000u64..1_040),
            ),
        ),
    )
        .prop_map(|(pod, pvc, scrape)| MemberObs {
            pod: pod.map(
                |(
                    ready,
                    terminating,
                    drained,
                    outdated,
                    replace_volume,
                    traffic_off,
                    unstarted,
                )| {
                    PodObs {
                        ready,
                        terminating,
                        drained,
                        outdated,
                        image_outdated: false,
                        replace_volume,
                        restart: false,
                        client_traffic_off: traffic_off,
                        never_started: unstarted,
                        node: None,
                        eviction_allowed: false,
                    }
                },
            ),
            pvc: pvc.map(|(terminating, outdated, pods_made)| PvcObs {
                uid: "u".into(),
                terminating,
                outdated,
                absent_since: None,
                served_since: None,
                pods_made,
            }),
            scrape: scrape.map(|(view, under, join, rep, rounds)| Scrape {
                view_members: view,
                underreplicated: u64::from(under) * 5,
                join_pending: u64::from(join) * 3,
                bootstraps_total: 0,
                repairs_total: rep,
                ae_rounds: rounds,
                uptime_ms: Some(1 << 40),
                ..Scrape::default()
            }),
            view: None,
            look_alike: false,
            password: Default::default(),
            client_input: Some(0),
            new_pod: PodAdmission::Admitted,
        })
}

/// What one case reached, by guarded branch: the property below is only as good as the
/// branches its inputs reach, so the test counts them and asserts a minimum of each.
#[derive(Clone, Copy, Debug, Default)]
struct Reached {
    removal_started: u64,
    handoff_deleted: u64,
    removal_completed: u64,
    volume_deleted: u64,
    paused_rounds: u64,
    roll_started: u64,
    roll_handoff_deleted: u64,
    pods_deleted: u64,
    fresh_volume_started: u64,
    fresh_volume_deleted: u64,
    /// Rounds whose ready members' views disagreed by identity, while a removal or a restart
    /// was in progress or wanted.
    views_held: u64,
    /// Removals started of a member whose container never started: no gate, its pod deleted
    /// at once.
    never_started_removals_started: u64,
    /// Passes that deleted a pod as never started (the start, or a later pass of the step).
    unstarted_pods_deleted: u64,
    /// Removals of a member that never started completed.
    never_started_completed: u64,
}

impl std::ops::AddAssign for Reached {
    fn add_assign(&mut self, o: Reached) {
        self.removal_started += o.removal_started;
        self.handoff_deleted += o.handoff_deleted;
        self.removal_completed += o.removal_completed;
        self.volume_deleted += o.volume_deleted;
        self.paused_rounds += o.paused_rounds;
        self.roll_started += o.roll_started;
        self.roll_handoff_deleted += o.roll_handoff_deleted;
        self.pods_deleted += o.pods_deleted;
        self.fresh_volume_started += o.fresh_volume_started;
        self.fresh_volume_deleted += o.fresh_volume_deleted;
        self.views_held += o.views_held;
        self.never_started_removals_started += o.never_started_removals_started;
        self.unstarted_pods_deleted += o.unstarted_pods_deleted;
        self.never_started_completed += o.never_started_completed;
    }
}

/// What a calm cluster would show for `mem`: every member up, scraped and converged, counters
/// still, the member being disrupted drained (its pod gone once the removal deleted it). Rounds
/// drawn independently almost never let a removal or a rollout start; calm rounds between
/// arbitrary ones do, and the arbitrary ones then hit them mid-step.
fn calm(mem: &Memory, outdated: bool) -> BTreeMap<u32, MemberObs> {
    calm_asking(mem, outdated, None)
}

/// `calm`, the pod of member `asking` asking for a fresh volume. A member moving to a fresh
/// volume has no pod once it is being deleted, and is back, on a fresh volume, rejoining.
fn calm_asking(mem: &Memory, outdated: bool, asking: Option<u32>) -> BTreeMap<u32, MemberObs> {
    let disrupted = mem.disruption.as_ref().and_then(|d| d.ordinal());
    let fresh = mem.roll().filter(|r| r.requested());
    let moving = fresh
        .filter(|r| r.step == RollStep::Deleting)
        .map(|r| r.ordinal);
    let moved = fresh
        .filter(|r| r.step == RollStep::Rejoining)
        .map(|r| r.ordinal);
    let gone = mem
        .removal()
        .filter(|r| matches!(r.step, RemovalStep::Deleting | RemovalStep::Settling))
        .map(|r| r.ordinal)
        .or(moving);
    let serving = mem.members.iter().filter(|o| Some(**o) != gone).count() as u64;
    mem.members
        .iter()
        .map(|o| {
            let pod = (Some(*o) != gone).then(|| PodObs {
                ready: true,
                terminating: false,
                drained: Some(*o) == disrupted && Some(*o) != moved,
                outdated,
                image_outdated: false,
                replace_volume: Some(*o) == asking,
                restart: false,
                // The label the stepper asks for has taken (a restarted pod is built "on").
                client_traffic_off: Some(*o) == disrupted && Some(*o) != moved,
                never_started: false,
                node: None,
                eviction_allowed: false,
            });
            let scrape = pod.as_ref().map(|_| Scrape {
                view_members: serving,
                ..Scrape::default()
            });
            let pvc = Some(PvcObs {
                uid: if Some(*o) == moved { "fresh" } else { "u" }.into(),
                terminating: false,
                outdated: false,
                absent_since: None,
                served_since: None,
                pods_made: None,
            });
            (
                *o,
                MemberObs {
                    pod,
                    pvc,
                    scrape,
                    view: None,
                    look_alike: false,
                    password: Default::default(),
                    client_input: Some(0),
                    new_pod: PodAdmission::Admitted,
                },
            )
        })
        .collect::<BTreeMap<_, _>>()
        .pipe(with_views)
}

trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<T> Pipe for T {}

type Rounds = Vec<(BTreeMap<u32, MemberObs>, i64, bool)>;

/// No sequence of observations makes the stepper take a step while anything is unknown or
/// unsafe, remove two members at once, or go below replicationFactor + 1.
fn no_unsafe_step(
    (rf, extra, spec_changes, paused, reclaim, outdated_from, rounds): (
        u32,
        u32,
        Vec<u32>,
        Vec<bool>,
        bool,
        usize,
        Rounds,
    ),
) -> Result<Reached, TestCaseError> {
    let mut reached = Reached::default();
    let mut s = spec(rf + extra, rf);
    s.reclaim_pvcs = reclaim;
    let mut mem = Memory::default();
    let mut now: Millis = 1_000_000;
    for (i, (arbitrary, dt, is_calm)) in rounds.iter().enumerate() {
        let mut observed = if *is_calm {
            // Now and then a member asks for a fresh volume (the lowest ordinal, for a while).
            let asking = (i % 20 < 4).then(|| mem.members.first().copied()).flatten();
            calm_asking(&mem, i >= outdated_from, asking)
        } else {
            with_views(arbitrary.clone())
        };
        // Rounds follow time (one a second, so calm spells cover a leaver now and then); a
        // figure generated unknown stays unknown.
        for m in observed.values_mut() {
            if let Some(x) = m.scrape.as_mut().filter(|x| x.ae_rounds.is_some()) {
                x.ae_rounds = Some(((now + dt) / 1_000) as u64);
            }
        }
        // Now and then a view holds a stranger in place of a member, with the right count.
        if i % 9 == 4 {
            swap_a_view(&mut observed);
        }
        let disagree = ready_views_disagree(&observed, &mem.members);
        let observed = &observed;
        s.nodes = (spec_changes[i % spec_changes.len()]).max(rf + 1);
        s.paused = paused[i % paused.len()];
        now += dt;
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed,
            now,
        });

        // At most one removal, and at most one pod deleted per decision.
        let deletes: Vec<u32> = d
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod(o) | Action::DeleteUnstartedPod(o) => Some(*o),
                _ => None,
            })
            .collect();
        prop_assert!(deletes.len() <= 1, "deletes {:?}", deletes);
        // A pod is deleted as never started only for the removal of that member, recorded
        // as such, with its pod seen never started on a volume with no pod before it.
        for a in &d.actions {
            if let Action::DeleteUnstartedPod(o) = a {
                reached.unstarted_pods_deleted += 1;
                prop_assert!(
                    d.memory
                        .removal()
                        .is_some_and(|r| r.ordinal == *o && r.reason == VictimReason::NeverStarted)
                );
                let m = &observed[o];
                prop_assert!(m.pod.as_ref().is_some_and(|p| p.never_started && !p.ready));
                prop_assert!(
                    m.pvc
                        .as_ref()
                        .is_none_or(|v| v.pods_made == Some(1) && v.served_since.is_none())
                );
            }
        }

        // Views that disagree by identity hold every disruptive step, and a new removal or
        // restart.
        if disagree {
            if mem.disruption.is_some() || d.memory.members.len() > s.target() as usize {
                reached.views_held += 1;
            }
            prop_assert!(
                !d.actions.iter().any(|a| matches!(
                    a,
                    Action::Drain(_)
                        | Action::DeletePod(_)
                        | Action::DeleteUnstartedPod(_)
                        | Action::DeletePvc(_)
                )),
                "views disagree, yet {:?}",
                d.actions
            );
            prop_assert!(mem.disruption.is_some() || d.memory.disruption.is_none());
        }

        // The plan: the members that would leave, each once, the removal in progress first;
        // only its first step may go unheld, and paused holds every step not under way.
        let planned: Vec<u32> = d.plan.iter().map(|p| p.ordinal).collect();
        prop_assert_eq!(
            planned.len(),
            d.memory.members.len().saturating_sub(s.target() as usize)
        );
        prop_assert!(planned.iter().all(|o| d.memory.members.contains(o)));
        prop_assert_eq!(planned.iter().collect::<BTreeSet<_>>().len(), planned.len());
        if let Some(r) = d.memory.removal() {
            prop_assert_eq!(planned.first(), Some(&r.ordinal), "{:?}", d.plan);
            prop_assert_eq!(d.plan[0].reason, r.reason);
        }
        for (k, p) in d.plan.iter().enumerate() {
            let under_way = k == 0 && d.memory.removal().is_some();
            prop_assert!(k == 0 || p.held_by.is_some(), "{:?}", d.plan);
            if s.paused && !under_way {
                prop_assert_eq!(&p.held_by, &Some(Hold::Paused));
            }
        }

        // A new removal starts only above the floor and with every member known and safe.
        let started = mem.removal().is_none() && d.memory.removal().is_some();
        let never_started = d
            .memory
            .removal()
            .is_some_and(|r| r.reason == VictimReason::NeverStarted);
        if started && never_started {
            // Without the gate, but only a member whose container never started, on a volume
            // with no pod before it; its pod deleted (after the record) only as such, nothing
            // else disrupted (members created, pods labelled to take client traffic: nothing
            // taken away).
            reached.never_started_removals_started += 1;
            prop_assert!(d.memory.members.len() as u32 > s.floor());
            prop_assert!(s.replication_factor >= 2);
            let victim = d.memory.removal().map(|r| r.ordinal).expect("started");
            let m = &observed[&victim];
            prop_assert!(
                m.pod
                    .as_ref()
                    .is_some_and(|p| p.never_started && !p.ready && !p.terminating)
            );
            prop_assert!(
                m.pvc
                    .as_ref()
                    .is_none_or(|v| v.pods_made == Some(1) && v.served_since.is_none())
            );
            for a in &d.actions {
                prop_assert!(
                    matches!(a, Action::CreatePvc(o) | Action::CreatePod(o) if *o != victim)
                        || matches!(a, Action::SetClientTraffic { ordinal, on: true } if *ordinal != victim)
                        || *a == Action::DeleteUnstartedPod(victim),
                    "{:?}",
                    d.actions
                );
            }
        } else if started {
            reached.removal_started += 1;
            prop_assert!(d.memory.members.len() as u32 > s.floor());
            // The record is written before acting: only its client traffic is cut with it.
            let victim = d.memory.removal().map(|r| r.ordinal).expect("started");
            prop_assert!(
                d.actions.iter().all(|a| *a
                    == Action::SetClientTraffic {
                        ordinal: victim,
                        on: false
                    }),
                "the record is written before acting: {:?}",
                d.actions
            );
            for o in &d.memory.members {
                let m = observed
                    .get(o)
                    .expect("a victim-eligible member is observed");
                prop_assert!(m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating));
                let sc = m.scrape.as_ref().expect("scraped");
                prop_assert_eq!(sc.underreplicated, 0);
                prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
            }
        }
        // Deleting the victim's pod (leaving the hand-off step) needs every other member known and settled.
        if let Some(r) = mem.removal() {
            // (A removal cancelled because the spec grew back recycles its drained victim
            // instead: the member stays, on its volume.)
            let continues = d.memory.removal().is_some_and(|n| n.ordinal == r.ordinal);
            if r.step == RemovalStep::HandingOff
                && continues
                && d.actions.contains(&Action::DeletePod(r.ordinal))
            {
                reached.handoff_deleted += 1;
                let quiet = |at: Millis| now - at.max(r.step_started_at) >= s.settle_ms;
                for o in d.memory.members.iter().filter(|o| **o != r.ordinal) {
                    let m = &observed[o];
                    prop_assert!(m.pod.as_ref().is_some_and(|p| p.ready));
                    let sc = m.scrape.as_ref().expect("scraped");
                    prop_assert_eq!(sc.underreplicated, 0);
                    prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
                    let x = &d.memory.samples[o];
                    prop_assert!(quiet(x.bootstraps_changed_at));
                }
                // The leaver takes no client writes, and enough of its anti-entropy rounds,
                // read in this pass, began since it went quiet.
                let leaver = &observed[&r.ordinal];
                prop_assert!(leaver.pod.as_ref().is_some_and(|p| p.client_traffic_off));
                let rounds = leaver.scrape.as_ref().and_then(|x| x.ae_rounds);
                let x = &d.memory.samples[&r.ordinal];
                prop_assert_eq!(x.sampled_at, now);
                prop_assert!(rounds >= x.rounds_at_quiet.map(handoff::rounds_needed));
                prop_assert!(x.rounds_at_quiet.is_some());
            }
            // Completing a removal needs the others known, converged without it and settled;
            // one of a member that never started, only its pod gone.
            if d.memory.removal().is_none() && !d.memory.members.contains(&r.ordinal) {
                reached.removal_completed += 1;
                prop_assert!(observed.get(&r.ordinal).is_none_or(|m| m.pod.is_none()));
                let others = if r.reason == VictimReason::NeverStarted {
                    reached.never_started_completed += 1;
                    BTreeSet::new()
                } else {
                    d.memory.members.clone()
                };
                for o in &others {
                    let sc = observed[o].scrape.as_ref().expect("scraped");
                    prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
                    prop_assert_eq!(sc.underreplicated, 0);
                }
                prop_assert!(d.memory.members.len() as u32 >= s.floor());
            }
        }
        // A volume is deleted only when reclaiming a removed member's (with reclaimPvcs), or
        // replacing the volume of a member whose data was handed off and whose pod is gone.
        for a in &d.actions {
            if let Action::DeletePvc(o) = a {
                reached.volume_deleted += 1;
                let reclaim = s.reclaim_pvcs && !d.memory.members.contains(o);
                let replace = d.memory.roll().is_some_and(|r| {
                    r.ordinal == *o
                        && r.handed_off_pvc.as_deref()
                            == observed
                                .get(o)
                                .and_then(|m| m.pvc.as_ref())
                                .map(|v| v.uid.as_str())
                }) && observed.get(o).is_some_and(|m| {
                    m.pod.is_none()
                        && m.pvc
                            .as_ref()
                            .is_some_and(|v| d.memory.roll().is_some_and(|r| r.leaves_volume(v)))
                });
                if replace && d.memory.roll().is_some_and(Roll::requested) {
                    reached.fresh_volume_deleted += 1;
                }
                prop_assert!(reclaim || replace, "deleted the volume of {}", o);
            }
        }
        // Paused: nothing disruptive at all.
        if s.paused {
            reached.paused_rounds += 1;
            prop_assert!(
                !d.actions.iter().any(|a| matches!(
                    a,
                    Action::Drain(_) | Action::DeletePod(_) | Action::DeletePvc(_)
                )),
                "paused but {:?}",
                d.actions
            );
        }
        // A rolling update starts only with the membership complete and every member safe.
        if mem.roll().is_none() && d.memory.roll().is_some() {
            reached.roll_started += 1;
            if let Some(r) = d.memory.roll().filter(|r| r.requested()) {
                reached.fresh_volume_started += 1;
                let m = &observed[&r.ordinal];
                prop_assert!(m.pod.as_ref().is_some_and(|p| p.replace_volume));
                prop_assert_eq!(
                    &r.reason,
                    &RollReason::VolumeRequested {
                        pvc: m.pvc.as_ref().expect("on a volume").uid.clone()
                    }
                );
            }
            prop_assert!(
                d.actions
                    .iter()
                    .all(|a| !matches!(a, Action::Drain(_) | Action::DeletePod(_)))
            );
            prop_assert_eq!(d.memory.members.len() as u32, s.target());
            for o in &d.memory.members {
                let m = &observed[o];
                prop_assert!(m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating));
                let sc = m.scrape.as_ref().expect("scraped");
                prop_assert_eq!(sc.underreplicated, 0);
                prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
            }
        }
        // Restarting a drained member of a rolling update needs the others known and settled.
        if let Some(r) = mem.roll()
            && r.step == RollStep::HandingOff
            && d.actions.contains(&Action::DeletePod(r.ordinal))
        {
            reached.roll_handoff_deleted += 1;
            for o in d.memory.members.iter().filter(|o| **o != r.ordinal) {
                let m = &observed[o];
                prop_assert!(m.pod.as_ref().is_some_and(|p| p.ready));
                let sc = m.scrape.as_ref().expect("scraped");
                prop_assert_eq!(sc.underreplicated, 0);
                prop_assert_eq!(sc.view_members, d.memory.members.len() as u64);
            }
        }
        // A member's pod is only deleted if it is the victim, a drained pod being recycled,
        // or the member of the rolling update (drained, or outdated and not serving).
        reached.pods_deleted += deletes.len() as u64;
        for o in deletes {
            let victim = d.memory.removal().is_some_and(|r| r.ordinal == o);
            let pod = observed.get(&o).and_then(|m| m.pod.as_ref());
            let recycled = pod.is_some_and(|p| p.drained);
            let rolled = mem.roll().is_some_and(|r| r.ordinal == o)
                && pod.is_some_and(|p| p.drained || (p.outdated && !p.ready));
            prop_assert!(victim || recycled || rolled, "deleted {} {:?}", o, pod);
        }
        mem = d.memory;
    }
    Ok(reached)
}

/// The property over `cases` cases drawn by `rng` (at random without one); what they reached.
fn no_unsafe_step_over(cases: u32, rng: Option<proptest::test_runner::TestRng>) -> Reached {
    use proptest::test_runner::{Config, TestRunner};
    let strategy = (
        1u32..4,
        1u32..4,
        prop::collection::vec(0u32..8, 1..4),
        prop::collection::vec(prop::bool::weighted(0.2), 1..4),
        any::<bool>(),
        0usize..60,
        prop::collection::vec(
            (
                prop::collection::btree_map(0u32..8, arb_obs(), 0..8),
                0i64..5_000,
                prop::bool::weighted(0.7),
            ),
            1..60,
        ),
    );
    let total = std::cell::RefCell::new(Reached::default());
    let config = Config {
        cases,
        ..Config::default()
    };
    let mut runner = match rng {
        Some(rng) => TestRunner::new_with_rng(config, rng),
        None => TestRunner::new(config),
    };
    let result = runner.run(&strategy, |case| {
        *total.borrow_mut() += no_unsafe_step(case)?;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    total.into_inner()
}

/// Over a fixed seed, so that what the cases reach is the same in every run: the floors below
/// are asserted on it (drawn at random, the rarest branch was reached 4 to 15 times in 400
/// cases, and a run at 4 failed its floor of 5 in CI).
#[test]
fn no_unsafe_step_under_any_observations() {
    use proptest::test_runner::{RngAlgorithm, TestRng};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[37; 32]);
    let reached = no_unsafe_step_over(2_000, Some(rng));
    println!("stepper property: 2,000 cases of the fixed seed reached {reached:?}");
    // Each guarded branch must be reached: a property whose inputs never get there proves nothing.
    assert!(reached.removal_started >= 20, "{reached:?}");
    assert!(reached.never_started_removals_started >= 1, "{reached:?}");
    assert!(reached.unstarted_pods_deleted >= 1, "{reached:?}");
    assert!(reached.handoff_deleted >= 5, "{reached:?}");
    assert!(reached.removal_completed >= 5, "{reached:?}");
    assert!(reached.volume_deleted >= 5, "{reached:?}");
    assert!(reached.paused_rounds >= 20, "{reached:?}");
    assert!(reached.roll_started >= 5, "{reached:?}");
    assert!(reached.roll_handoff_deleted >= 5, "{reached:?}");
    assert!(reached.pods_deleted >= 20, "{reached:?}");
    assert!(reached.fresh_volume_started >= 5, "{reached:?}");
    assert!(reached.fresh_volume_deleted >= 5, "{reached:?}");
    assert!(reached.views_held >= 20, "{reached:?}");
}

/// The same property over cases drawn at random, in addition: new inputs in every run. What
/// they reach varies, so only the property is asserted.
#[test]
fn no_unsafe_step_under_random_observations() {
    let reached = no_unsafe_step_over(500, None);
    println!("stepper property: 500 random cases reached {reached:?}");
}

/// A drained member that is not the one disrupted (a cancelled removal's victim still waiting
/// for its restart) counts as disrupted: no removal or rollout starts beside it, and its
/// restart waits for the rollout in progress (whose next step may delete a pod in the same
/// pass). Found by the property above once its inputs reached rollouts.
#[test]
fn a_drained_bystander_is_never_disrupted_beside_another_member() {
    let now: Millis = 1_000_000;
    let samples = |mem: &Memory| -> BTreeMap<u32, Sample> {
        mem.members
            .iter()
            .map(|o| (*o, Sample::new(0, 0, 0)))
            .collect()
    };
    let mut mem = Memory {
        members: [0, 1, 2, 3].into(),
        ..Memory::default()
    };
    mem.samples = samples(&mem);
    let mut observed = calm(&mem, false);
    let calm_decision = |s: &ClusterSpec, mem: &Memory, observed: &BTreeMap<u32, MemberObs>| {
        decide(&Input {
            spec: s,
            memory: mem,
            observed,
            now,
        })
    };
    // Healthy and one too many: a removal starts. With member 0 drained, it does not.
    let s = spec(3, 2);
    assert!(
        calm_decision(&s, &mem, &observed)
            .memory
            .removal()
            .is_some()
    );
    observed.get_mut(&0).unwrap().pod.as_mut().unwrap().drained = true;
    let d = calm_decision(&s, &mem, &observed);
    assert!(d.memory.disruption.is_none(), "{:?}", d.memory.disruption);
    assert_eq!(d.actions, [Action::DeletePod(0)], "it restarts first");

    // At the target size with every pod outdated: a rollout starts, but not beside it.
    let s = spec(4, 2);
    let mut outdated = calm(&mem, true);
    assert!(calm_decision(&s, &mem, &outdated).memory.roll().is_some());
    outdated.get_mut(&0).unwrap().pod.as_mut().unwrap().drained = true;
    let d = calm_decision(&s, &mem, &outdated);
    assert!(d.memory.disruption.is_none(), "{:?}", d.memory.disruption);
    assert_eq!(d.actions, [Action::DeletePod(0)]);

    // A rollout already deleting its member's pod: the bystander waits for it.
    mem.disruption = Some(Disruption::Roll(Roll {
        ordinal: 3,
        reason: RollReason::SpecChanged,
        step: RollStep::Deleting,
        handed_off_pvc: Some("u".into()),
        started_at: now - 60_000,
        step_started_at: now - 1_000,
        connections_cut_at: None,
    }));
    let mut rolling = calm(&mem, true);
    rolling.get_mut(&0).unwrap().pod.as_mut().unwrap().drained = true;
    let d = calm_decision(&s, &mem, &rolling);
    let deletes: Vec<&Action> = d
        .actions
        .iter()
        .filter(|a| matches!(a, Action::DeletePod(_)))
        .collect();
    assert_eq!(deletes, [&Action::DeletePod(3)], "{:?}", d.actions);
}

/// A member whose node restarted in place after its hand-off (it served, and took writes,
/// since) is drained again, and the earlier hand-off no longer lets its volume go: if its pod
/// then disappears before the new hand-off, it restarts on that volume.
#[test]
fn a_hand_off_does_not_outlive_a_restart_of_the_node() {
    let now: Millis = 1_000_000;
    let mut mem = Memory {
        members: [0, 1, 2, 3].into(),
        ..Memory::default()
    };
    mem.samples = mem
        .members
        .iter()
        .map(|o| (*o, Sample::new(0, 0, 0)))
        .collect();
    mem.disruption = Some(Disruption::Roll(Roll {
        ordinal: 3,
        step: RollStep::Deleting,
        handed_off_pvc: Some("u".into()),
        started_at: now - 60_000,
        step_started_at: now - 1_000,
        connections_cut_at: None,
        reason: RollReason::SpecChanged,
    }));
    let s = spec(4, 2);
    let mut observed = calm(&mem, false);
    // Its volume is to be replaced (another class), and its node restarted: not drained.
    observed.get_mut(&3).unwrap().pvc.as_mut().unwrap().outdated = true;
    observed.get_mut(&3).unwrap().pod.as_mut().unwrap().drained = false;
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &observed,
        now,
    });
    let roll = d.memory.roll().expect("still rolling");
    assert_eq!(roll.step, RollStep::Draining);
    assert_eq!(roll.handed_off_pvc, None);
    // Its pod goes before the new hand-off: the volume stays, the member restarts on it.
    observed.get_mut(&3).unwrap().pod = None;
    let d = decide(&Input {
        spec: &s,
        memory: &d.memory,
        observed: &observed,
        now: now + 1_000,
    });
    assert!(
        !d.actions.contains(&Action::DeletePvc(3)),
        "{:?}",
        d.actions
    );
    assert!(d.actions.contains(&Action::CreatePod(3)), "{:?}", d.actions);
}

fn decide_once(s: &ClusterSpec, w: &mut World, mem: &mut Memory, now: Millis) -> Decision {
    w.scrape(now);
    let d = decide(&Input {
        spec: s,
        memory: mem,
        observed: &w.obs,
        now,
    });
    *mem = d.memory.clone();
    w.victim = d.memory.removal().map(|r| r.ordinal);
    w.apply(&d.actions, now);
    d
}

/// replicationFactor members down: only pods on their own volumes come back; a member whose
/// volume is gone gets none, and no removal starts, until enough members are up again.
#[test]
fn a_mass_failure_recreates_only_pods_on_their_own_volumes_until_members_recover() {
    let mut s = spec(5, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    assert_eq!(names(&mem), vec![0, 1, 2, 3, 4]);
    let uids: BTreeMap<u32, String> = (0..5).map(|o| (o, uid_of(&w, o))).collect();
    // demo-1 crashed (unready), demo-2 lost its pod and its volume, demo-4 lost its pod; and
    // the spec shrank.
    w.obs.get_mut(&1).unwrap().pod.as_mut().unwrap().ready = false;
    w.obs.remove(&2);
    w.obs.get_mut(&4).unwrap().pod = None;
    s.nodes = 4;
    let d = decide_once(&s, &mut w, &mut mem, 100_000);
    assert_eq!(
        d.actions,
        vec![Action::CreatePod(4)],
        "only on its own volume"
    );
    let m = d.mass_failure.clone().expect("a mass failure");
    assert_eq!(m.down, vec![1, 2, 4]);
    assert_eq!(
        m.message(&s),
        "3 of 5 members down (demo-1, demo-2, demo-4) with replicationFactor 2: copies may be missing; only pods on their own volumes are re-created"
    );
    assert!(d.memory.removal().is_none(), "no removal starts");
    assert!(
        d.progress
            .as_deref()
            .unwrap()
            .contains("a fresh volume for demo-2"),
        "{:?}",
        d.progress
    );
    // demo-4 is back, demo-1 still down: still RF down, still no fresh volume, no removal.
    for t in 1..10 {
        let d = decide_once(&s, &mut w, &mut mem, 100_000 + t * 1_000);
        assert_eq!(d.mass_failure.as_ref().unwrap().down, vec![1, 2]);
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        assert!(d.memory.removal().is_none());
    }
    assert_eq!(uid_of(&w, 4), uids[&4], "re-created on its own volume");
    // demo-1 recovers: one down, below RF: the fresh volume, then the scale-down.
    w.obs.get_mut(&1).unwrap().pod.as_mut().unwrap().ready = true;
    let d = decide_once(&s, &mut w, &mut mem, 200_000);
    assert_eq!(d.mass_failure, None);
    assert_eq!(d.actions, vec![Action::CreatePvc(2), Action::CreatePod(2)]);
    let ds = drive(&s, &mut w, &mut mem, 201_000, 200);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 1, 2, 3]);
    assert_ne!(uid_of(&w, 2), uids[&2], "demo-2 on a fresh volume");
    assert!(ds.iter().all(|d| d.mass_failure.is_none()));
}

/// A removal in progress does not delete its victim's pod, and a rollout deletes no pod, while
/// replicationFactor other members are down.
#[test]
fn a_mass_failure_holds_a_removal_and_a_rollout_at_their_pod_deletion() {
    let mut s = spec(4, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    s.nodes = 3;
    let now = run_until(&s, &mut w, &mut mem, 100_000, |m| {
        m.removal().is_some_and(|r| r.step == RemovalStep::Deleting)
    });
    // The deletion has not taken yet (its pod is still there, drained), and two others crash.
    w.obs.get_mut(&3).unwrap().pod = Some(PodObs {
        ready: true,
        drained: true,
        ..PodObs::default()
    });
    for o in [0, 1] {
        w.obs.get_mut(&o).unwrap().pod.as_mut().unwrap().ready = false;
    }
    let d = decide_once(&s, &mut w, &mut mem, now);
    assert_eq!(d.mass_failure.as_ref().unwrap().down, vec![0, 1]);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.memory.removal().unwrap().step, RemovalStep::Deleting);
    for o in [0, 1] {
        w.obs.get_mut(&o).unwrap().pod.as_mut().unwrap().ready = true;
    }
    let d = decide_once(&s, &mut w, &mut mem, now + 1_000);
    assert_eq!(d.actions, vec![Action::DeletePod(3)]);
    drive(&s, &mut w, &mut mem, now + 2_000, 200);
    assert_eq!(names(&mem), vec![0, 1, 2]);

    // A rollout: its member handed off and about to be deleted when two others go down.
    change_spec(&mut w);
    let now = run_until(&s, &mut w, &mut mem, 500_000, |m| {
        m.roll().is_some_and(|r| r.step == RollStep::HandingOff)
    });
    let rolling = mem.roll().unwrap().ordinal;
    let others: Vec<u32> = [0, 1, 2].into_iter().filter(|o| *o != rolling).collect();
    for o in &others {
        w.obs.get_mut(o).unwrap().pod.as_mut().unwrap().ready = false;
    }
    for t in 0..20 {
        let d = decide_once(&s, &mut w, &mut mem, now + t * 1_000);
        assert!(d.mass_failure.is_some());
        assert!(d.actions.is_empty(), "{:?}", d.actions);
    }
    for o in &others {
        w.obs.get_mut(o).unwrap().pod.as_mut().unwrap().ready = true;
    }
    let ds = drive(&s, &mut w, &mut mem, now + 30_000, 400);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
}

/// A new cluster is never in a mass failure: every member is Joining until it was Active.
#[test]
fn creating_a_cluster_is_not_a_mass_failure() {
    let s = spec(3, 1);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    let d = decide_once(&s, &mut w, &mut mem, 0);
    assert_eq!(d.mass_failure, None);
    // Its volumes are lost before any pod ran: they are created again.
    w.obs.clear();
    let d = decide_once(&s, &mut w, &mut mem, 1_000);
    assert_eq!(d.mass_failure, None);
    assert!(d.actions.contains(&Action::CreatePvc(0)));
    let ds = drive(&s, &mut w, &mut mem, 2_000, 60);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
}

/// Views that disagree by identity with the right count hold a removal's next step; once they
/// have disagreed for the bound it is a suspected partition (its start kept in the memory,
/// whatever pass comes next), which holds the drained bystander's restart too; agreeing views
/// clear it and the step proceeds.
#[test]
fn a_suspected_partition_holds_every_disruptive_step_until_views_agree() {
    use marekvs_core::views::SUSPECT_PARTITION_AFTER_MS;
    let s = spec(3, 2);
    let mut mem = Memory {
        members: (0..4).collect(),
        phases: (0..4).map(|o| (o, MemberPhase::Active)).collect(),
        samples: (0..4).map(|o| (o, Sample::new(0, 0, 0))).collect(),
        disruption: Some(Disruption::Removal(Removal {
            ordinal: 3,
            reason: VictimReason::HighestOrdinal,
            step: RemovalStep::HandingOff,
            started_at: 99_000,
            step_started_at: 99_000,
            connections_cut_at: None,
        })),
        ..Memory::default()
    };
    let calm: BTreeMap<u32, MemberObs> = (0..4)
        .map(|o| {
            (
                o,
                MemberObs {
                    pod: Some(PodObs {
                        ready: true,
                        drained: o == 3,
                        // The victim's client traffic was cut when its removal was recorded.
                        client_traffic_off: o == 3,
                        ..PodObs::default()
                    }),
                    pvc: Some(PvcObs {
                        uid: format!("u{o}"),
                        ..PvcObs::default()
                    }),
                    scrape: Some(Scrape {
                        view_members: 4,
                        ..Scrape::default()
                    }),
                    view: None,
                    look_alike: false,
                    password: Default::default(),
                    client_input: Some(0),
                    new_pod: PodAdmission::Admitted,
                },
            )
        })
        .collect::<BTreeMap<_, _>>()
        .pipe(with_views);
    let mut split = calm.clone();
    assert!(swap_a_view(&mut split));
    let decide_at = |mem: &Memory, obs: &BTreeMap<u32, MemberObs>, now| {
        decide(&Input {
            spec: &s,
            memory: mem,
            observed: obs,
            now,
        })
    };

    let t0 = 100_000;
    let d = decide_at(&mem, &split, t0);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.memory.views_split_since, Some(t0));
    assert_eq!(d.suspected_partition, None, "not yet the bound");
    assert_eq!(d.blocked, None);
    let progress = d.progress.unwrap_or_default();
    assert!(
        progress.contains("views not converged by identity")
            && progress.contains("demo-0 sees demo-0, demo-2, demo-3, stranger ffffffff"),
        "{progress}"
    );
    mem = d.memory;

    // Unknown views neither clear nor restart the clock.
    let mut unread = split.clone();
    unread.values_mut().for_each(|m| m.view = None);
    let d = decide_at(&mem, &unread, t0 + 10_000);
    assert_eq!(d.memory.views_split_since, Some(t0));
    mem = d.memory;

    let late = t0 + SUSPECT_PARTITION_AFTER_MS;
    let d = decide_at(&mem, &split, late);
    let p = d
        .suspected_partition
        .clone()
        .expect("suspected at the bound");
    assert_eq!(p.since, t0);
    assert!(
        p.message.contains("demo-0 sees") && p.message.contains("stranger ffffffff"),
        "{}",
        p.message
    );
    assert!(d.actions.is_empty(), "{:?}", d.actions);

    // A drained bystander waiting for its restart is held too (not by the gate: by the hold).
    let mut bystander = mem.clone();
    bystander.disruption = None;
    let mut obs = split.clone();
    obs.get_mut(&2).unwrap().pod.as_mut().unwrap().drained = true;
    obs.get_mut(&3).unwrap().pod.as_mut().unwrap().drained = false;
    let held = decide_at(&bystander, &obs, late);
    assert!(!held.actions.contains(&Action::DeletePod(2)), "{held:?}");
    let calm_bystander: BTreeMap<u32, MemberObs> = {
        let mut c = calm.clone();
        c.get_mut(&2).unwrap().pod.as_mut().unwrap().drained = true;
        c.get_mut(&3).unwrap().pod.as_mut().unwrap().drained = false;
        c
    };
    let freed = decide_at(&bystander, &calm_bystander, late);
    assert!(freed.actions.contains(&Action::DeletePod(2)), "{freed:?}");

    // Views agree again: cleared. The victim's view went unread meanwhile, so its count of
    // anti-entropy rounds started over: its pod goes once enough of them began.
    let d = decide_at(&d.memory, &calm, late + 1_000);
    assert_eq!(d.memory.views_split_since, None);
    assert_eq!(d.suspected_partition, None);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(
        d.hold.as_ref().map(|h| (h.reason, h.moving)),
        Some((BlockReason::LeaverBacklog, Moving::AntiEntropy))
    );
    let mut later = calm.clone();
    later
        .get_mut(&3)
        .unwrap()
        .scrape
        .as_mut()
        .unwrap()
        .ae_rounds = Some(1_007);
    let d = decide_at(&d.memory, &later, late + 2_000);
    assert_eq!(d.actions, vec![Action::DeletePod(3)]);
}

/// Disagreeing views hold the start of a rolling update and of a fresh volume asked for on a
/// pod, as they hold a removal; agreeing views let them start.
#[test]
fn disagreeing_views_hold_a_rolling_update_and_a_requested_fresh_volume() {
    let s = spec(4, 2);
    let mem = Memory {
        members: (0..4).collect(),
        phases: (0..4).map(|o| (o, MemberPhase::Active)).collect(),
        samples: (0..4)
            .map(|o| {
                let quiet = Sample::new(0, 0, 0);
                (o, quiet)
            })
            .collect(),
        ..Memory::default()
    };
    for asking in [None, Some(1)] {
        let calm = calm_asking(&mem, asking.is_none(), asking);
        let mut split = calm.clone();
        assert!(swap_a_view(&mut split));
        let at = |obs: &BTreeMap<u32, MemberObs>| {
            decide(&Input {
                spec: &s,
                memory: &mem,
                observed: obs,
                now: 100_000,
            })
        };
        let held = at(&split);
        assert_eq!(held.memory.disruption, None, "{asking:?}: {held:?}");
        // The gate says why, by identity.
        let b = held.blocked.expect("held");
        assert_eq!(b.reason, BlockReason::ViewsNotConverged);
        assert!(b.message.contains("by identity"), "{}", b.message);
        assert!(held.actions.is_empty(), "{:?}", held.actions);
        let started = at(&calm)
            .memory
            .disruption
            .expect("starts once views agree");
        let want = asking.unwrap_or(3);
        assert_eq!(started.ordinal(), Some(want));
        assert_eq!(started.roll().map(Roll::requested), Some(asking.is_some()));
    }
}

fn disruptive(d: &Decision) -> bool {
    d.actions.iter().any(|a| {
        matches!(
            a,
            Action::Drain(_) | Action::DeletePod(_) | Action::DeletePvc(_)
        )
    })
}

/// A look-alike (an object with a member's name that is not the cluster's) on the name of a
/// member whose pod is gone: nothing is created in its name, no scale-down starts, and the
/// cluster says why; once it is deleted the member comes back and the scale-down proceeds.
#[test]
fn a_look_alike_on_a_members_name_holds_every_disruptive_step_until_it_is_gone() {
    let mut s = spec(4, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    assert_eq!(names(&mem), vec![0, 1, 2, 3]);
    // Its pod went, and a look-alike took its name before the operator re-created it.
    let m = w.obs.get_mut(&1).unwrap();
    m.pod = None;
    m.scrape = None;
    m.look_alike = true;
    s.nodes = 3;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 30);
    for d in &ds {
        assert!(!disruptive(d), "{:?}", d.actions);
        assert!(
            !d.actions
                .iter()
                .any(|a| matches!(a, Action::CreatePod(1) | Action::CreatePvc(1))),
            "{:?}",
            d.actions
        );
    }
    let last = ds.last().unwrap();
    assert_eq!(last.phase, ClusterPhase::Blocked);
    let b = last.blocked.as_ref().unwrap();
    assert_eq!(b.reason, BlockReason::LookAlike);
    assert!(b.message.contains("demo-1"), "{}", b.message);
    assert!(
        last.progress.as_deref().unwrap_or("").contains("demo-1"),
        "{:?}",
        last.progress
    );
    assert_eq!(names(&mem), vec![0, 1, 2, 3], "nobody removed");
    // The user deletes the look-alike: the member's pod comes back, then one member leaves.
    w.obs.get_mut(&1).unwrap().look_alike = false;
    let ds = drive(&s, &mut w, &mut mem, 200_000, 300);
    assert!(ds[0].actions.contains(&Action::CreatePod(1)));
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), vec![0, 1, 2]);
}

/// A look-alike on a free name: a scale-up never picks that name, and a removal in progress
/// holds its next disruptive step while it is there.
#[test]
fn a_look_alike_on_a_free_name_is_skipped_by_a_scale_up_and_holds_a_removal_mid_step() {
    let mut s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    w.obs.insert(
        3,
        MemberObs {
            look_alike: true,
            client_input: Some(0),
            ..MemberObs::default()
        },
    );
    s.nodes = 4;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 60);
    assert!(ds[0].actions.contains(&Action::CreatePod(4)));
    assert!(!ds.iter().any(|d| d.actions.contains(&Action::CreatePod(3))));
    assert_eq!(names(&mem), vec![0, 1, 2, 4]);
    // A removal under way when the look-alike appears: held at its step, then finished.
    w.obs.remove(&3);
    s.nodes = 3;
    let now = run_until(&s, &mut w, &mut mem, 200_000, |m| m.removal().is_some());
    w.obs.insert(
        3,
        MemberObs {
            look_alike: true,
            client_input: Some(0),
            ..MemberObs::default()
        },
    );
    let ds = drive(&s, &mut w, &mut mem, now, 30);
    for d in &ds {
        assert!(
            !disruptive(d),
            "{:?} {:?} {:?}",
            d.actions,
            d.memory.disruption,
            d.blocked
        );
    }
    assert_eq!(
        ds.last().unwrap().blocked.as_ref().map(|b| b.reason),
        Some(BlockReason::LookAlike)
    );
    assert!(mem.removal().is_some(), "still under way, not dropped");
    w.obs.remove(&3);
    let ds = drive(&s, &mut w, &mut mem, now + 100_000, 300);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(mem.members.len(), 3);
}

/// The cluster object deleted with `--cascade=orphan` and created again: its volumes are its
/// own (restamped), the orphaned pods on their names are look-alikes. The members come back
/// on those names, waiting for them (no fresh member beside the strangers, nothing disruptive),
/// and get their pods on their own volumes once the user deletes the orphans.
#[test]
fn orphaned_pods_on_kept_volumes_make_their_members_wait_not_new_ones() {
    let s = spec(3, 2);
    let mut w = World::new(2_000);
    for o in 0..3 {
        w.obs.insert(
            o,
            MemberObs {
                pvc: Some(PvcObs {
                    uid: format!("kept-{o}"),
                    terminating: false,
                    outdated: false,
                    absent_since: None,
                    served_since: None,
                    pods_made: None,
                }),
                look_alike: true,
                client_input: Some(0),
                ..MemberObs::default()
            },
        );
    }
    let mut mem = Memory::default();
    let ds = drive(&s, &mut w, &mut mem, 0, 20);
    for d in &ds {
        assert!(d.actions.is_empty(), "{:?}", d.actions);
    }
    assert_eq!(
        names(&mem),
        vec![0, 1, 2],
        "the members of the kept volumes"
    );
    for o in 0..3 {
        w.obs.get_mut(&o).unwrap().look_alike = false;
    }
    let ds = drive(&s, &mut w, &mut mem, 100_000, 60);
    assert_eq!(
        ds[0].actions,
        vec![
            Action::CreatePod(0),
            Action::CreatePod(1),
            Action::CreatePod(2)
        ],
        "on their own volumes"
    );
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    for o in 0..3 {
        assert_eq!(uid_of(&w, o), format!("kept-{o}"));
    }
}

// ---- scale-down under steady write load (gate v2) ----

/// A healthy 5-member cluster under steady load, asked for 4.
fn loaded_5_to_4(load: Load) -> (ClusterSpec, World, Memory) {
    let mut s = spec(5, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    assert_eq!(names(&mem), vec![0, 1, 2, 3, 4]);
    w.load = Some(load);
    s.nodes = 4;
    (s, w, mem)
}

fn run(s: &ClusterSpec, w: &mut World, mem: &mut Memory, from: Millis, n: i64) -> Vec<Decision> {
    (0..n)
        .map(|t| decide_once(s, w, mem, from + t * 1_000))
        .collect()
}

#[test]
fn under_background_repair_a_5_to_4_completes_once_its_pinned_client_stops() {
    let (s, mut w, mut mem) = loaded_5_to_4(Load::new(500, 4_000));
    let ds = run(&s, &mut w, &mut mem, 100_000, 90);
    assert_eq!(names(&mem), vec![0, 1, 2, 3], "demo-4 removed under load");
    // Repairs moved on every pass: the old rule ("every counter still for the window")
    // would never have let it go. They were reported as background, not as a hold.
    let deleted = ds
        .iter()
        .position(|d| d.actions.contains(&Action::DeletePod(4)))
        .expect("its pod deleted");
    assert!(ds[..=deleted].iter().all(|d| {
        d.memory
            .samples
            .values()
            .all(|x| x.repairs_changed_at == x.changed_at && x.changed_at > 100_000 - 1_000)
    }));
    let bg = ds[deleted].background_repair.clone().expect("background");
    assert_eq!(bg.members, vec![0, 1, 2, 3, 4]);
    assert_eq!(bg.rate_per_sec, 5.0, "one repair a second on each of 5");
    // Its client traffic was cut with its record, before its drain; a pooled client kept
    // writing to it for 4 s (its last input read 3 s after the cut), and its pod went only
    // once the rounds it needs had begun since then.
    let at = |a: Action| ds.iter().position(|d| d.actions.contains(&a)).unwrap();
    assert!(at(traffic_off(4)) < at(Action::Drain(4)));
    let cut = at(traffic_off(4));
    let x = ds[deleted].memory.samples[&4];
    assert_eq!(x.quiet_reset, QuietReset::ClientInput);
    assert_eq!(x.quiet_since, 100_000 + (cut as i64 + 3) * 1_000);
    let rounds = x.ae_rounds.unwrap();
    assert_eq!(rounds, handoff::rounds_needed(x.rounds_at_quiet.unwrap()));
    // Held meanwhile by its client, then its rounds, never by the repairs.
    let mut holds: Vec<(BlockReason, Moving)> = ds
        .iter()
        .filter_map(|d| d.hold.as_ref().map(|h| (h.reason, h.moving)))
        .collect();
    holds.dedup();
    assert_eq!(
        holds[..2],
        [
            (BlockReason::LeaverBacklog, Moving::ClientTraffic),
            (BlockReason::LeaverBacklog, Moving::AntiEntropy),
        ]
    );
    assert!(
        holds.iter().all(|(_, m)| *m != Moving::Repairs),
        "{holds:?}"
    );
}

#[test]
fn a_client_pinned_to_the_leaver_holds_its_hand_off_naming_it_and_its_writes() {
    let (s, mut w, mut mem) = loaded_5_to_4(Load::new(1_234, 20_000));
    let ds = run(&s, &mut w, &mut mem, 100_000, 15);
    let held: Vec<&HoldReport> = ds.iter().filter_map(|d| d.hold.as_ref()).collect();
    let h = held.last().unwrap();
    assert_eq!(
        (h.reason, h.moving, h.members.clone()),
        (BlockReason::LeaverBacklog, Moving::ClientTraffic, vec![4])
    );
    assert_eq!(h.rate_per_sec.map(|r| r.round()), Some(1_234.0));
    assert!(
        h.message
            .contains("demo-4 still receives client commands past its Service"),
        "{}",
        h.message
    );
    // Since when: kept from the first pass that held for this reason.
    assert!(held.iter().all(|x| x.since == held[0].since));
    assert!(!h.stuck);
    assert_eq!(
        mem.hold_since,
        Some((BlockReason::LeaverBacklog, held[0].since))
    );
    // One Event when it began holding, naming the member, what moves and the rate.
    let notes = notes_named(&ds, "HandoffHeld");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("ClientTraffic moving on demo-4, 1234.0 writes/s"),
        "{}",
        notes[0]
    );
    assert!(!ds.iter().any(|d| d.actions.contains(&Action::DeletePod(4))));
    // The plan shows the same gate result.
    let last = ds.last().unwrap();
    assert!(matches!(
        &last.plan[0].held_by,
        Some(Hold::Gate(b)) if b.reason == BlockReason::LeaverBacklog
    ));
    // Once its client stops and its rounds have begun, it goes.
    run(&s, &mut w, &mut mem, 115_000, 80);
    assert_eq!(names(&mem), vec![0, 1, 2, 3]);
    assert_eq!(mem.hold_since, None);
}

#[test]
fn a_leaver_whose_rounds_are_not_reported_is_never_removed() {
    let (s, mut w, mut mem) = loaded_5_to_4(Load::new(0, 0));
    w.hide_rounds = true;
    let ds = run(&s, &mut w, &mut mem, 100_000, 120);
    assert_eq!(names(&mem), vec![0, 1, 2, 3, 4]);
    assert!(!ds.iter().any(|d| d.actions.contains(&Action::Drain(4))));
    let h = ds.last().unwrap().hold.clone().expect("held");
    assert_eq!(
        (h.reason, h.moving, h.members.clone()),
        (BlockReason::LeaverBacklog, Moving::AntiEntropy, vec![4])
    );
    assert!(h.message.contains("unknown"), "{}", h.message);
}

#[test]
fn replication_factor_1_refuses_a_removal_and_a_fresh_volume() {
    let mut s = spec(3, 1);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    s.nodes = 2;
    let ds = run(&s, &mut w, &mut mem, 100_000, 30);
    assert_eq!(names(&mem), vec![0, 1, 2]);
    assert!(mem.removal().is_none());
    let b = ds.last().unwrap().blocked.clone().expect("blocked");
    assert_eq!(b.reason, BlockReason::SingleCopy);
    assert!(b.message.contains("replicationFactor 1"), "{}", b.message);
    assert!(
        ds.iter()
            .all(|d| !d.actions.iter().any(|a| matches!(a, Action::Drain(_))))
    );
    // A fresh volume asked for a member: refused too, its volume kept.
    s.nodes = 3;
    w.obs
        .get_mut(&1)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .replace_volume = true;
    let ds = run(&s, &mut w, &mut mem, 200_000, 10);
    assert_eq!(
        ds.last().unwrap().blocked.as_ref().map(|b| b.reason),
        Some(BlockReason::SingleCopy)
    );
    assert!(
        ds.iter().all(|d| d.actions.is_empty()),
        "{:?}",
        ds.last().unwrap().actions
    );
}

#[test]
fn a_hold_past_the_bound_is_stuck_reported_once_and_never_proceeds() {
    // A client that dials demo-4's pod address: restarting it (once) does not help.
    let mut load = Load::new(800, 1_000_000);
    load.dials_pod = true;
    let (mut s, mut w, mut mem) = loaded_5_to_4(load);
    s.handoff_timeout_ms = 20_000;
    let ds = run(&s, &mut w, &mut mem, 100_000, 120);
    let deletions = ds
        .iter()
        .filter(|d| d.actions.contains(&Action::DeletePod(4)))
        .count();
    assert_eq!(
        deletions, 1,
        "restarted once to close its connections, no more"
    );
    assert_eq!(notes_named(&ds, "ClientConnectionsCut").len(), 1);
    assert_eq!(names(&mem), vec![0, 1, 2, 3, 4]);
    let last = ds.last().unwrap();
    let h = last.hold.as_ref().unwrap();
    assert!(h.stuck);
    assert_eq!(h.reason, BlockReason::LeaverBacklog);
    assert_eq!(last.phase, ClusterPhase::Blocked);
    assert_eq!(
        last.blocked.as_ref().map(|b| b.reason),
        Some(BlockReason::HandoffTimeout)
    );
    let stuck = notes_named(&ds, "HandoffStuck");
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    assert!(
        stuck[0].contains("demo-4") && stuck[0].contains("20s"),
        "{}",
        stuck[0]
    );
    // Not stuck until its step has waited past the bound.
    let first = ds
        .iter()
        .position(|d| d.hold.as_ref().is_some_and(|h| h.stuck))
        .unwrap();
    let step = ds[first].memory.removal().unwrap().step_started_at;
    assert!(100_000 + first as i64 * 1_000 - step > 20_000);
    assert!(100_000 + (first as i64 - 1) * 1_000 - step <= 20_000);
}

/// Pooled clients opened their connections to demo-4 through the client Service before its
/// traffic was cut, and keep them for good: 15 s into its hand-off the operator restarts it
/// on its own volume, once, which closes them; they reconnect to the other members, and the
/// removal completes. Its new pod is labelled off from the start, and no Warning says it was
/// lost.
#[test]
fn pooled_connections_pinned_to_the_leaver_are_closed_by_one_restart_and_the_removal_completes() {
    let (s, mut w, mut mem) = loaded_5_to_4(Load::new(600, 1_000_000));
    let ds = run(&s, &mut w, &mut mem, 100_000, 150);
    assert_eq!(names(&mem), vec![0, 1, 2, 3], "demo-4 removed");
    let deletions: Vec<usize> = ds
        .iter()
        .enumerate()
        .filter(|(_, d)| d.actions.contains(&Action::DeletePod(4)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        deletions.len(),
        2,
        "the restart, then the removal's own deletion"
    );
    let cut = &ds[deletions[0]];
    let r = cut.memory.removal().unwrap();
    assert_eq!(r.step, RemovalStep::HandingOff);
    assert_eq!(
        r.connections_cut_at,
        Some(100_000 + deletions[0] as i64 * 1_000)
    );
    assert!(100_000 + deletions[0] as i64 * 1_000 - r.step_started_at >= 15_000);
    let notes = notes_named(&ds, "ClientConnectionsCut");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("demo-4 still took client input (600 write commands/s)"),
        "{}",
        notes[0]
    );
    assert!(notes_named(&ds, "LostBeforeHandOff").is_empty());
    // Held by its clients until the restart, never deleted for good before it.
    assert!(ds[..deletions[0]].iter().all(|d| {
        d.hold
            .as_ref()
            .is_none_or(|h| h.moving == Moving::ClientTraffic || h.moving == Moving::AntiEntropy)
    }));
    // Back on its volume, drained again, handed off again, removed.
    let again = ds[deletions[0] + 1..]
        .iter()
        .position(|d| d.actions.contains(&Action::Drain(4)))
        .expect("drained again");
    assert!(deletions[0] + 1 + again < deletions[1]);
}

/// A rolling update under pooled clients that keep, for good, the connections they opened to
/// each member before its traffic was cut: without a cut the update would hold on its first
/// member for ever. 15 s into each member's hand-off its own restart (on its own volume, which
/// comes back with what they wrote) is taken as the cut, once a member, and the update
/// completes.
#[test]
fn pooled_connections_pinned_to_a_restarting_member_are_closed_by_its_own_restart() {
    let s = spec(3, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    w.load = Some(Load::new(300, 1_000_000));
    change_spec(&mut w);
    let ds = run(&s, &mut w, &mut mem, 100_000, 200);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert!(
        w.obs.values().all(|m| !m.pod.as_ref().unwrap().outdated),
        "every member restarted with the new spec"
    );
    assert_eq!(deleted_pods(&ds), vec![2, 1, 0], "each restarted once");
    let notes = notes_named(&ds, "ClientConnectionsCut");
    assert_eq!(notes.len(), 3, "{notes:?}");
    for (note, o) in notes.iter().zip([2, 1, 0]) {
        assert!(
            note.contains(&format!(
                "demo-{o} still took client input (300 write commands/s)"
            )) && note.contains("comes back on its own volume"),
            "{note}"
        );
    }
    for (i, d) in ds.iter().enumerate() {
        let Some(o) = d.actions.iter().find_map(|a| match a {
            Action::DeletePod(o) => Some(*o),
            _ => None,
        }) else {
            continue;
        };
        // Taken as the cut: 15 s into its hand-off, held by the client writes alone until then.
        let r = d.memory.roll().expect("a restart");
        assert_eq!((r.ordinal, r.step), (o, RollStep::Deleting));
        let now = 100_000 + i as i64 * 1_000;
        assert_eq!(r.connections_cut_at, Some(now));
        let handing_off = ds[..i]
            .iter()
            .rev()
            .take_while(|d| {
                d.memory
                    .roll()
                    .is_some_and(|r| r.step == RollStep::HandingOff)
            })
            .collect::<Vec<_>>();
        assert!(handing_off.len() >= 15, "{o}: {} passes", handing_off.len());
        assert!(handing_off.iter().all(|d| {
            d.hold.as_ref().is_none_or(|h| {
                h.moving == Moving::ClientTraffic || h.moving == Moving::AntiEntropy
            })
        }));
    }
}

/// The same pooled clients on a member asked to move to a fresh volume: what they wrote would
/// go with the volume, so no restart cuts them; the move waits, saying why.
#[test]
fn pooled_connections_hold_a_move_to_a_fresh_volume() {
    let s = spec(3, 2);
    let mut w = World::new(1_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    w.load = Some(Load::new(300, 1_000_000));
    w.obs
        .get_mut(&1)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .replace_volume = true;
    let ds = run(&s, &mut w, &mut mem, 100_000, 120);
    assert!(
        ds.iter()
            .all(|d| !d.actions.contains(&Action::DeletePod(1))),
        "moved with client writes still arriving"
    );
    assert!(notes_named(&ds, "ClientConnectionsCut").is_empty());
    let last = ds.last().unwrap();
    assert_eq!(
        last.memory.roll().map(|r| (r.ordinal, r.step)),
        Some((1, RollStep::HandingOff))
    );
    let said = last.progress.clone().unwrap_or_default();
    assert!(
        said.starts_with("updating demo-1: demo-1 still receives client commands past its Service")
            && said.contains("300/s"),
        "{said}"
    );
}

#[test]
fn traffic_is_cut_before_the_drain_and_restored_when_the_removal_is_cancelled() {
    let (mut s, mut w, mut mem) = loaded_5_to_4(Load::new(10, 1_000));
    let d = decide_once(&s, &mut w, &mut mem, 100_000);
    assert_eq!(
        d.actions,
        vec![traffic_off(4)],
        "with its record, before its drain"
    );
    assert!(w.obs[&4].pod.as_ref().unwrap().client_traffic_off);
    // The spec grows back before the drain: its traffic comes back.
    s.nodes = 5;
    let d = decide_once(&s, &mut w, &mut mem, 101_000);
    assert!(d.memory.removal().is_none());
    assert_eq!(
        d.actions,
        vec![Action::SetClientTraffic {
            ordinal: 4,
            on: true
        }]
    );
    assert!(!w.obs[&4].pod.as_ref().unwrap().client_traffic_off);
    let d = decide_once(&s, &mut w, &mut mem, 102_000);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

/// A pod deletion held after the hand-off passed is not taken on the strength of that old
/// hand-off when a client wrote to the leaver meanwhile (directly, at its pod address): the
/// removal goes back to `HandingOff` and the gate waits again.
#[test]
fn a_held_deletion_is_gated_again_when_a_client_wrote_to_the_leaver_meanwhile() {
    let mut s = spec(4, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    s.nodes = 3;
    let now = run_until(&s, &mut w, &mut mem, 100_000, |m| {
        m.removal().is_some_and(|r| r.step == RemovalStep::Deleting)
    });
    // Its deletion did not take (its pod still there, drained, traffic cut), and a client
    // writes to it directly for 5 s.
    w.obs.get_mut(&3).unwrap().pod = Some(PodObs {
        ready: true,
        drained: true,
        client_traffic_off: true,
        ..PodObs::default()
    });
    let mut load = Load::new(7, 5_000);
    load.cut_at.insert(3, now);
    w.load = Some(load);
    let d = decide_once(&s, &mut w, &mut mem, now);
    assert!(
        !d.actions.contains(&Action::DeletePod(3)),
        "{:?}",
        d.actions
    );
    assert_eq!(d.memory.removal().unwrap().step, RemovalStep::HandingOff);
    let d = decide_once(&s, &mut w, &mut mem, now + 1_000);
    assert!(
        !d.actions.contains(&Action::DeletePod(3)),
        "{:?}",
        d.actions
    );
    assert_eq!(d.hold.as_ref().unwrap().reason, BlockReason::LeaverBacklog);
    // Its client stops after 5 s: handed off once more, then removed.
    drive(&s, &mut w, &mut mem, now + 2_000, 200);
    assert_eq!(names(&mem), vec![0, 1, 2]);
}

/// How many pods each pass that created any created, in order.
fn pods_created_per_pass(ds: &[Decision]) -> Vec<usize> {
    ds.iter()
        .map(|d| {
            d.actions
                .iter()
                .filter(|a| matches!(a, Action::CreatePod(_)))
                .count()
        })
        .filter(|n| *n > 0)
        .collect()
}

/// A 40-member spec from nothing: 16 join first (`SCALE_UP_BATCH`), the next ones only once
/// those serve, and never more at once than already serve (their donors); each pass that
/// leaves members for later says so.
#[test]
fn a_scale_up_adds_members_in_batches_no_larger_than_the_members_serving() {
    let s = spec(40, 2);
    assert_eq!(s.scale_up_batch, 16);
    let mut w = World::new(0);
    let mut mem = Memory::default();
    let ds = drive(&s, &mut w, &mut mem, 0, 60);
    let created = pods_created_per_pass(&ds);
    assert_eq!(created, [16, 16, 8]);
    let held: Vec<&str> = ds.iter().filter_map(|d| d.progress.as_deref()).collect();
    assert!(
        held.iter().any(|p| p.contains(
            "adding 0 of 24 members now: at most 16 join at once (as many as serve already)"
        )),
        "{held:?}"
    );
    assert!(
        held.iter()
            .any(|p| p.contains("adding 0 of 8 members now: at most 16")),
        "{held:?}"
    );
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    assert_eq!(names(&mem), (0..40).collect::<Vec<_>>());

    // A batch of 1 still starts a new cluster with replicationFactor + 1 members.
    let one = ClusterSpec {
        scale_up_batch: 1,
        whole_cluster_upgrade: false,
        image_release: None,
        allow_downgrade: false,
        ..spec(5, 2)
    };
    let mut w = World::new(0);
    let mut mem = Memory::default();
    let ds = drive(&one, &mut w, &mut mem, 0, 60);
    let created = pods_created_per_pass(&ds);
    assert_eq!(created, [3, 2]);
}

/// 3 → 5 where the two new members' containers never start (unscheduled, an image that
/// cannot be pulled), and demo-1 is down as well: back to 3, the two are removed at once,
/// highest first, without the gate and without a drain, because they hold nothing. A member
/// whose volume had a pod before, or whose count is unknown, goes through the gate like any
/// other; so does one whose container starts before its pod is deleted.
#[test]
fn a_member_that_never_started_is_removed_without_the_gate_and_without_a_drain() {
    let s = spec(3, 2);
    let member = |ready: bool, unstarted: bool, pods_made: Option<u32>| MemberObs {
        pod: Some(PodObs {
            ready,
            never_started: unstarted,
            ..PodObs::default()
        }),
        pvc: Some(PvcObs {
            uid: "v".into(),
            served_since: ready.then_some(1_000),
            pods_made,
            ..PvcObs::default()
        }),
        scrape: ready.then(|| Scrape {
            view_members: 2,
            ..Scrape::default()
        }),
        view: None,
        look_alike: false,
        password: Default::default(),
        client_input: Some(0),
        new_pod: PodAdmission::Admitted,
    };
    let five = || Memory {
        members: [0, 1, 2, 3, 4].into(),
        phases: [
            (0, MemberPhase::Active),
            (1, MemberPhase::Unready),
            (2, MemberPhase::Active),
            (3, MemberPhase::Joining),
            (4, MemberPhase::Joining),
        ]
        .into(),
        ..Memory::default()
    };
    let unstarted = |made: [Option<u32>; 2]| {
        with_views(BTreeMap::from([
            (0, member(true, false, Some(1))),
            (1, member(false, false, Some(1))),
            (2, member(true, false, Some(1))),
            (3, member(false, true, made[0])),
            (4, member(false, true, made[1])),
        ]))
    };
    let pass = |memory: &Memory, observed: &BTreeMap<u32, MemberObs>, now: Millis| {
        decide(&Input {
            spec: &s,
            memory,
            observed,
            now,
        })
    };
    let mut memory = five();
    let mut observed = unstarted([Some(1), Some(1)]);
    let mut now = 10_000;
    let d = pass(&memory, &observed, now);
    assert_eq!(d.plan[0].reason, VictimReason::NeverStarted);
    for gone in [4, 3] {
        let d = pass(&memory, &observed, now);
        assert_eq!(
            d.actions,
            [Action::DeleteUnstartedPod(gone)],
            "{:?}",
            d.progress
        );
        let r = d.memory.removal().expect("a removal");
        assert_eq!(
            (r.ordinal, r.reason, r.step),
            (gone, VictimReason::NeverStarted, RemovalStep::Deleting)
        );
        memory = d.memory;
        // Its pod goes: the removal completes, no gate over the others.
        observed.get_mut(&gone).unwrap().pod = None;
        now += 1_000;
        let d = pass(&memory, &observed, now);
        now += 1_000;
        let d = if d.memory.removal().is_some() {
            memory = d.memory;
            pass(&memory, &observed, now)
        } else {
            d
        };
        assert!(!d.memory.members.contains(&gone), "{:?}", d.memory);
        assert!(
            d.notes.iter().any(|n| n.reason == "MemberRemoved"
                && n.message
                    .contains("its container never started, so it held no data")),
            "{:?}",
            d.notes
        );
        memory = d.memory;
        observed.remove(&gone);
        now += 1_000;
    }
    assert_eq!(names(&memory), [0, 1, 2]);

    // A pod made before this one on its volume (it may have run and crashed unseen), or a
    // count unknown: the gate decides, and demo-1 is not ready.
    for made in [Some(2), None] {
        let d = pass(&five(), &unstarted([made, made]), now);
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        assert_eq!(
            d.blocked.as_ref().map(|b| b.reason),
            Some(BlockReason::NotAllReady)
        );
        assert_eq!(d.plan[0].reason, VictimReason::NotReady);
    }

    // Its container starts before its pod is deleted: the removal is given up, and the gate
    // decides the next.
    let observed = unstarted([Some(1), Some(1)]);
    let d = pass(&five(), &observed, now);
    let memory = d.memory;
    let mut started = observed.clone();
    started
        .get_mut(&4)
        .unwrap()
        .pod
        .as_mut()
        .unwrap()
        .never_started = false;
    let d = pass(&memory, &started, now + 1_000);
    assert!(d.memory.removal().is_none(), "{:?}", d.memory);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.memory.phases.get(&4), Some(&MemberPhase::Joining));
    assert!(
        d.notes.iter().any(|n| n.reason == "ScaleDownDeferred"),
        "{:?}",
        d.notes
    );
    // demo-4 is still the victim (not ready, highest), now behind the gate, though demo-3
    // has still not started.
    let d = pass(&d.memory, &started, now + 2_000);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(
        d.blocked.as_ref().map(|b| b.reason),
        Some(BlockReason::NotAllReady)
    );

    // And at replicationFactor 1 no scale-down starts at all.
    let one = spec(3, 1);
    let d = decide(&Input {
        spec: &one,
        memory: &five(),
        observed: &unstarted([Some(1), Some(1)]),
        now,
    });
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(
        d.blocked.as_ref().map(|b| b.reason),
        Some(BlockReason::SingleCopy)
    );
}

/// Put the pods of members `on` on node `node`, cordoned.
fn cordon(w: &mut World, node: &str, on: &[u32]) {
    for o in on {
        w.obs.get_mut(o).unwrap().pod.as_mut().unwrap().node = Some(NodeObs {
            name: node.into(),
            unschedulable: true,
            taints: vec![],
        });
    }
}

fn drain_of(m: &Memory) -> Option<(u32, String, RollStep)> {
    m.roll()
        .and_then(|r| Some((r.ordinal, r.drained_node()?.to_string(), r.step)))
}

#[test]
fn members_on_a_node_being_drained_move_off_one_at_a_time_behind_the_gate() {
    let s = spec(4, 2);
    let mut w = World::new(5_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    let uids: Vec<String> = (0..4).map(|o| uid_of(&w, o)).collect();
    cordon(&mut w, "node-a", &[1, 3]);

    let ds = drive(&s, &mut w, &mut mem, 100_000, 600);
    assert_eq!(ds.last().unwrap().phase, ClusterPhase::Healthy);
    // The highest ordinal first, recorded with the node; one member at a time.
    let moved: Vec<(u32, String)> = ds
        .iter()
        .filter_map(|d| drain_of(&d.memory).map(|(o, n, _)| (o, n)))
        .fold(Vec::new(), |mut v, x| {
            if v.last() != Some(&x) {
                v.push(x);
            }
            v
        });
    assert_eq!(moved, [(3, "node-a".into()), (1, "node-a".into())]);
    // Each: asked whether its new pod is admitted, drained, let go to evictions only once
    // handed off, and, with no eviction coming, deleted by the operator after the wait.
    let mut seq = actions_of(&ds);
    seq.dedup();
    let allow = |o| Action::SetEviction {
        ordinal: o,
        allowed: true,
    };
    assert_eq!(
        seq,
        [
            Action::CheckPod(3),
            Action::Drain(3),
            allow(3),
            Action::DeletePod(3),
            Action::CreatePod(3),
            Action::CheckPod(1),
            Action::Drain(1),
            allow(1),
            Action::DeletePod(1),
            Action::CreatePod(1),
        ]
    );
    let at = |a: &Action| ds.iter().position(|d| d.actions.contains(a)).unwrap();
    for o in [3, 1] {
        // Let go only in the step after its hand-off, never while it hands off.
        let allowed = &ds[at(&allow(o))];
        assert_eq!(
            drain_of(&allowed.memory).map(|x| x.2),
            Some(RollStep::Deleting)
        );
        assert!(at(&allow(o)) - at(&Action::Drain(o)) >= 3);
        // The drain had EVICTION_WAIT_MS (one pass a second here) to evict it.
        let waited = (at(&Action::DeletePod(o)) - at(&allow(o))) as Millis * 1_000;
        assert!(
            waited >= marekvs_core::stepper::EVICTION_WAIT_MS,
            "{o}: {waited}"
        );
    }
    // Back on their own volumes; Events name the node.
    assert_eq!((0..4).map(|o| uid_of(&w, o)).collect::<Vec<_>>(), uids);
    let started = notes_named(&ds, "NodeDrainStarted");
    let done = notes_named(&ds, "MemberMovedOffNode");
    assert_eq!((started.len(), done.len()), (2, 2));
    assert!(
        started[0].contains("demo-3")
            && started[0].contains("node-a")
            && started[0].contains("2 members there"),
        "{}",
        started[0]
    );
    assert!(done[1].contains("demo-1") && done[1].contains("node-a"));
    // The new pods run elsewhere (not on a node being drained): nothing more happens.
    let after = drive(&s, &mut w, &mut mem, 1_000_000, 30);
    assert!(actions_of(&after).is_empty(), "{:?}", actions_of(&after));
}

#[test]
fn a_drains_eviction_takes_the_member_it_was_let_go_and_a_hold_guards_it_again() {
    let mut s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    cordon(&mut w, "node-b", &[0]);
    let mut now = 100_000;
    let mut decided = Vec::new();
    let mut evicted = false;
    let mut paused_once = false;
    while now < 400_000 {
        w.scrape(now);
        let d = decide(&Input {
            spec: &s,
            memory: &mem,
            observed: &w.obs,
            now,
        });
        mem = d.memory.clone();
        w.apply(&d.actions, now);
        let allowed = w.obs[&0].pod.as_ref().is_some_and(|p| p.eviction_allowed);
        if allowed && !paused_once {
            // Paused while it may be evicted: guarded again at once.
            paused_once = true;
            s.paused = true;
        } else if s.paused && !allowed {
            s.paused = false;
        } else if allowed && !evicted {
            // The drain's eviction, as the API server carries it out: the pod goes.
            evicted = true;
            let m = w.obs.get_mut(&0).unwrap();
            m.pod = None;
            m.scrape = None;
        }
        decided.push(d);
        now += 1_000;
        if evicted && decided.last().unwrap().phase == ClusterPhase::Healthy {
            break;
        }
    }
    assert!(paused_once && evicted, "never let go to evictions");
    let acts = actions_of(&decided);
    assert!(
        acts.contains(&Action::SetEviction {
            ordinal: 0,
            allowed: false
        }),
        "not guarded again while paused: {acts:?}"
    );
    // The eviction took it: the operator deleted nothing itself, and re-created it.
    assert!(!acts.contains(&Action::DeletePod(0)), "{acts:?}");
    assert!(acts.contains(&Action::CreatePod(0)));
    assert_eq!(notes_named(&decided, "MemberMovedOffNode").len(), 1);
}

#[test]
fn a_node_no_longer_drained_before_its_member_was_drained_cancels_the_move() {
    let mut s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    cordon(&mut w, "node-c", &[1, 2]);
    s.paused = true;
    let ds = drive(&s, &mut w, &mut mem, 100_000, 10);
    assert!(actions_of(&ds).is_empty(), "{:?}", actions_of(&ds));
    let held = &ds.last().unwrap().blocked.as_ref().expect("held").message;
    assert!(
        held.contains("moving demo-1, demo-2 off node node-c (being drained)"),
        "{held}"
    );
    s.paused = false;
    // Recorded once its new pod is admitted; then uncordoned before its drain took.
    let mut d = drive(&s, &mut w, &mut mem, 200_000, 2);
    assert_eq!(
        drain_of(&mem).map(|(o, n, _)| (o, n)),
        Some((2, "node-c".to_string()))
    );
    for o in [1, 2] {
        w.obs.get_mut(&o).unwrap().pod.as_mut().unwrap().node = None;
    }
    d.extend(drive(&s, &mut w, &mut mem, 202_000, 30));
    assert_eq!(
        notes_named(&d, "UpdateCancelled").len(),
        1,
        "{:?}",
        notes_named(&d, "UpdateCancelled")
    );
    assert!(
        notes_named(&d, "UpdateCancelled")[0]
            .contains("node node-c is no longer being drained; not moving it")
    );
    assert!(!actions_of(&d).contains(&Action::DeletePod(2)));
    assert!(mem.disruption.is_none());
}

#[test]
fn a_drain_held_by_the_gate_says_which_node_and_members_it_holds() {
    let s = spec(3, 2);
    let mut w = World::new(2_000);
    let mut mem = Memory::default();
    drive(&s, &mut w, &mut mem, 0, 60);
    cordon(&mut w, "node-d", &[2]);
    // Another member down: the move waits, and says what for.
    w.obs.get_mut(&0).unwrap().pod.as_mut().unwrap().ready = false;
    w.scrape(100_000);
    let d = decide(&Input {
        spec: &s,
        memory: &mem,
        observed: &w.obs,
        now: 100_000,
    });
    assert!(
        !d.actions.iter().any(|a| matches!(
            a,
            Action::Drain(_) | Action::DeletePod(_) | Action::SetEviction { .. }
        )),
        "{:?}",
        d.actions
    );
    let b = d.blocked.expect("blocked");
    assert!(
        b.message
            .starts_with("holding moving demo-2 off node node-d (being drained): "),
        "{b:?}"
    );
}
