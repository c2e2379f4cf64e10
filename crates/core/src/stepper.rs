//! The runbook as one pure function: from what was observed and what was remembered, decide
//! what to remember, what to do, and how to report it.
//!
//! - Scale up: every missing member at once, lowest free ordinals first (adding members never
//!   removes copies).
//! - Scale down: one member at a time, never below replicationFactor + 1, and only while every
//!   member is ready, scraped, and the hand-off gate passes. The victim is recorded (in the
//!   returned memory, which the shell writes to status first) before anything is done to it;
//!   then: drain → hand-off gate (victim still serving, its client traffic cut and its
//!   replication ring empty) → delete its pod → hand-off gate (views without it,
//!   re-replication quiet) → drop it from the members. Its client traffic is cut with the
//!   record (`traffic.rs`).
//! - Replacement: a member without a pod gets a new pod on its PVC; without a PVC, a fresh
//!   PVC (it rejoins empty). A PVC that is still terminating delays the re-creation.
//! - A fresh volume on request (`PodObs::replace_volume`): the rolling update's path, one
//!   member at a time: drain → hand-off gate → delete its pod → delete its PVC (only the one
//!   whose data was handed off) → a fresh PVC and pod → gate.
//! - A restart on request (`PodObs::restart`): the same path on its own volume: drain →
//!   hand-off gate → delete its pod → a new pod on the same PVC → gate.
//! - A new image with `upgrade.strategy: WholeCluster`: every member's traffic cut → the
//!   leaver checks on every member at once → every pod deleted → every pod created on its own
//!   volume → the gate and the leaver checks again → traffic back (`upgrade.rs`).
//!
//! `decide` runs the phases of one pass in order over a shared [`Pass`]; each phase lives in
//! the submodule named after it.

use std::collections::{BTreeMap, BTreeSet};

use crate::handoff::{GateHold, HandoffGate, Leaver, update_samples};
use crate::mass::{MassFailure, mass_failure};
use crate::types::*;
use crate::views::{Agreement, SuspectedPartition, agreement, split_since, suspected_partition};

mod members;
mod removal;
mod report;
mod rollout;
mod stop;
mod traffic;
mod upgrade;

pub use rollout::EVICTION_WAIT_MS;

/// How soon to look again. While a removal or a restart is waiting on a hand-off gate, the
/// pace bounds how late the next step starts after the cluster became safe (a counter's last
/// move is seen at most this late, and the quiet window's end at most this late again): 250 ms
/// keeps that under 1 s. Other busy states (members being created or joining) are also woken
/// by pod events, so once a second is enough; a quiet cluster's health is polled every 10 s.
pub const REQUEUE_GATE_MS: Millis = 250;
pub const REQUEUE_BUSY_MS: Millis = 1_000;
pub const REQUEUE_IDLE_MS: Millis = 10_000;

pub struct Input<'a> {
    pub spec: &'a ClusterSpec,
    pub memory: &'a Memory,
    /// Every ordinal that has a pod or a PVC, or is remembered as a member.
    pub observed: &'a BTreeMap<u32, MemberObs>,
    pub now: Millis,
}

pub fn decide(input: &Input) -> Decision {
    let mut pass = Pass::new(input);
    pass.count_members_with_pods();
    pass.cancel_removal();
    pass.scale_up();
    let drained = if pass.hibernating() {
        pass.hibernate();
        Vec::new()
    } else if pass.upgrade_stopping() {
        pass.stop_for_upgrade();
        Vec::new()
    } else if pass.refuse_stale_wake() {
        Vec::new()
    } else {
        pass.children()
    };
    pass.recycle(&drained);
    pass.member_phases();
    pass.advance_removal();
    pass.advance_roll();
    pass.advance_upgrade();
    pass.start_removal();
    pass.start_upgrade();
    pass.start_roll();
    pass.hold_for_wake();
    pass.hold_for_pause();
    pass.hold_for_fence();
    pass.hold_for_look_alikes();
    pass.settle_hibernation();
    pass.reclaim_volumes();
    pass.plan_removals();
    pass.steer_client_traffic();
    pass.steer_evictions();
    pass.report()
}

/// What an ordinal without any pod, PVC or record looks like.
static UNSEEN: MemberObs = MemberObs {
    pod: None,
    pvc: None,
    scrape: None,
    view: None,
    look_alike: false,
    password: crate::types::PasswordTaken::Unknown,
    client_input: Some(0),
    new_pod: PodAdmission::Unchecked,
};

/// What holds back every disruptive step of a pass (`Pass::holder`), in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum HeldBy {
    /// `spec.paused`.
    Pause,
    /// A member listed in `spec.fencedMembers`.
    Fence,
    /// replicationFactor or more members down (`mass::mass_failure`).
    MassFailure,
    /// The ready members' views disagree by identity, or a partition is suspected.
    Views,
    /// An object that is not the cluster's holds a member's name.
    LookAlikes,
}

/// One pass of the runbook: what it was given, what it derived, and what it decided so far.
/// Each phase of `decide` reads and extends it.
struct Pass<'a> {
    spec: &'a ClusterSpec,
    /// The memory read back from status.
    memory: &'a Memory,
    observed: &'a BTreeMap<u32, MemberObs>,
    /// Never before the epoch.
    now: Millis,
    /// How many members the spec asks for.
    target: usize,
    /// The counter samples updated with this pass's scrapes.
    samples: BTreeMap<u32, Sample>,

    /// The memory being built.
    members: BTreeSet<u32>,
    disruption: Option<Disruption>,
    phases: BTreeMap<u32, MemberPhase>,

    /// Members added by this pass's scale-up.
    created: BTreeSet<u32>,
    /// Members this pass moves off a stale volume: they rejoin as new (`Joining`).
    fresh: BTreeSet<u32>,
    /// Whether `member_phases` found a member Replacing, or Joining (before any removal or
    /// rollout step moved this pass).
    replacing: bool,
    joining: bool,
    /// The member whose removal this pass completed.
    completed: Option<u32>,
    /// The restart this pass completed.
    rolled: Option<Roll>,
    /// The whole-cluster upgrade this pass completed.
    upgraded: Option<Upgrade>,

    /// What the decision says.
    actions: BTreeSet<Action>,
    notes: Vec<Note>,
    progress: Vec<String>,
    /// What each holder held back this pass, in words (`Pass::hold`).
    held: BTreeMap<HeldBy, Vec<String>>,
    blocked: Option<Blocked>,
    /// The removals that would come next (reported only).
    plan: Vec<PlannedRemoval>,
    /// RF or more members down (`mass::mass_failure`): only pods on their own volumes are
    /// re-created; every other creation and every disruptive action waits.
    mass: Option<MassFailure>,
    /// Members whose stale volume is kept for the user (it may hold the last copy of some data).
    kept_stale: Vec<u32>,
    /// How the ready members' views compare by identity, and since when they disagree.
    agreement: Agreement,
    views_split_since: Option<Millis>,
    /// Views disagreed too long: every disruptive step waits.
    partition: Option<SuspectedPartition>,
    /// The pods are stopped by hibernation and not all started again (`Memory::hibernated`).
    hibernated: bool,
    /// A wake refused for stale volumes, reported whatever else blocks.
    wake_refused: Option<Blocked>,
    /// What holds the next scale-down step at the hand-off gate (`Decision::hold`).
    hold_report: Option<HoldReport>,
    /// Ordinals whose name a look-alike holds (`MemberObs::look_alike`).
    look_alikes: Vec<u32>,
}

impl<'a> Pass<'a> {
    fn new(input: &Input<'a>) -> Self {
        let now = input.now.max(0);
        let agreement = agreement(input.spec, &input.memory.members, input.observed);
        let views_split_since = split_since(input.memory.views_split_since, &agreement, now);
        let partition = suspected_partition(input.spec, &agreement, views_split_since, now);
        Pass {
            spec: input.spec,
            memory: input.memory,
            observed: input.observed,
            now,
            target: input.spec.target() as usize,
            samples: update_samples(&input.memory.samples, input.observed, now),
            members: input.memory.members.clone(),
            disruption: input.memory.disruption.clone(),
            phases: BTreeMap::new(),
            created: BTreeSet::new(),
            fresh: BTreeSet::new(),
            replacing: false,
            joining: false,
            completed: None,
            rolled: None,
            upgraded: None,
            actions: BTreeSet::new(),
            notes: Vec::new(),
            progress: Vec::new(),
            held: BTreeMap::new(),
            blocked: None,
            plan: Vec::new(),
            mass: mass_failure(input.spec, input.memory, input.observed),
            kept_stale: Vec::new(),
            agreement,
            views_split_since,
            partition,
            hibernated: input.memory.hibernated,
            wake_refused: None,
            hold_report: None,
            look_alikes: input
                .observed
                .iter()
                .filter(|(_, m)| m.look_alike)
                .map(|(o, _)| *o)
                .collect(),
        }
    }

    fn obs(&self, o: u32) -> &'a MemberObs {
        self.observed.get(&o).unwrap_or(&UNSEEN)
    }

    fn removal(&self) -> Option<&Removal> {
        self.disruption.as_ref().and_then(Disruption::removal)
    }

    fn roll(&self) -> Option<&Roll> {
        self.disruption.as_ref().and_then(Disruption::roll)
    }

    /// The hand-off gate over `ordinals`, every view expected to hold `expected_view` members.
    fn gate(
        &self,
        ordinals: impl Iterator<Item = u32>,
        expected_view: usize,
        since: Option<Millis>,
    ) -> Result<(), Blocked> {
        self.gate_with(ordinals, expected_view, since, None)
            .map_err(|h| h.blocked)
    }

    /// The hand-off gate, with the member leaving if the step has one.
    fn gate_with(
        &self,
        ordinals: impl Iterator<Item = u32>,
        expected_view: usize,
        since: Option<Millis>,
        leaver: Option<Leaver>,
    ) -> Result<(), GateHold> {
        HandoffGate {
            members: ordinals.map(|o| (o, self.obs(o))).collect(),
            samples: &self.samples,
            expected_view: expected_view as u64,
            since,
            now: self.now,
            settle_ms: self.spec.settle_ms,
            name: &self.spec.name,
            leaver,
        }
        .evaluate()
    }

    /// The hand-off gate over every member, each view expected to hold them all.
    fn gate_all(&self, since: Option<Millis>) -> Result<(), Blocked> {
        self.gate(self.members.iter().copied(), self.members.len(), since)
    }

    /// The hand-off gate over every member, `leaver` among them.
    fn gate_leaving(&self, since: Option<Millis>, leaver: Leaver) -> Result<(), GateHold> {
        let members = self.members.iter().copied();
        self.gate_with(members, self.members.len(), since, Some(leaver))
    }

    /// The gate's hold as reported: since when it holds for this reason (kept from the last
    /// report while the reason stays), and whether it is stuck (held past the hand-off
    /// timeout).
    fn report_hold(&mut self, h: &GateHold) -> HoldReport {
        let since = match self.memory.hold_since {
            Some((reason, at)) if reason == h.blocked.reason => at.min(self.now),
            _ => self.now,
        };
        let report = HoldReport {
            reason: h.blocked.reason,
            message: h.blocked.message.clone(),
            moving: h.moving,
            members: h.members.clone(),
            rate_per_sec: h.rate_per_sec,
            since,
            stuck: self.now - since > self.spec.handoff_timeout_ms,
        };
        self.hold_report = Some(report.clone());
        report
    }

    /// A removal step waits on its gate: report the hold, and block once the step or the
    /// hold is older than the hand-off timeout.
    fn wait_on_removal_gate(&mut self, h: GateHold, doing: &str, what: &str, r: &Removal) {
        let step_started_at = r.step_started_at;
        let subject = &format!("removing {}", self.spec.member_name(r.ordinal));
        let report = self.report_hold(&h);
        self.wait_on_gate(h.blocked.clone(), doing, subject, what, step_started_at);
        if report.stuck && self.blocked.is_none() {
            self.blocked = Some(timeout(subject, what, self.now - report.since, &h.blocked));
        }
        // Blocked by the step's age: stuck too, whatever the hold's own age.
        if let (Some(b), Some(r)) = (&self.blocked, self.hold_report.as_mut())
            && b.reason == BlockReason::HandoffTimeout
        {
            r.stuck = true;
        }
    }

    /// A step waits on a hand-off gate that has not passed: say what it is `doing`, and block
    /// once the step has waited longer than the hand-off timeout (`subject`: `what` has not
    /// settled).
    fn wait_on_gate(
        &mut self,
        gate: Blocked,
        doing: &str,
        subject: &str,
        what: &str,
        step_started_at: Millis,
    ) {
        self.progress.push(format!("{doing}: {}", gate.message));
        let age = self.now - step_started_at;
        if age > self.spec.handoff_timeout_ms {
            self.blocked = Some(timeout(subject, what, age, &gate));
        }
    }

    /// Whether a disruptive step (`what`, in words) is held, and if so it is noted under its
    /// holder (`holder`).
    fn hold(&mut self, what: String) -> bool {
        match self.holder() {
            Some(by) => {
                self.held_back(by, what);
                true
            }
            None => false,
        }
    }

    /// What holds every disruptive step this pass, the first that applies: `spec.paused`
    /// (which blocks the cluster), a fenced member (which blocks it too), a mass failure,
    /// members' views that disagree by identity (a suspected partition, or a disagreement not
    /// yet that old), or a look-alike.
    fn holder(&self) -> Option<HeldBy> {
        if self.spec.paused {
            Some(HeldBy::Pause)
        } else if !self.spec.fenced.is_empty() {
            Some(HeldBy::Fence)
        } else if self.mass.is_some() {
            Some(HeldBy::MassFailure)
        } else if self.views_disagree() {
            Some(HeldBy::Views)
        } else if !self.look_alikes.is_empty() {
            Some(HeldBy::LookAlikes)
        } else {
            None
        }
    }

    /// Note `what` as held back by `by`, whatever else would hold it.
    fn held_back(&mut self, by: HeldBy, what: impl Into<String>) {
        self.held.entry(by).or_default().push(what.into());
    }

    /// What `by` held back this pass, joined for a message; `None` if nothing.
    fn held_by(&self, by: HeldBy) -> Option<String> {
        self.held.get(&by).map(|w| w.join("; "))
    }

    /// Ready members' views disagree by identity now, or a suspected partition is reported.
    fn views_disagree(&self) -> bool {
        self.partition.is_some() || matches!(self.agreement, Agreement::Disagree(_))
    }

    /// The names look-alikes hold, in words.
    fn look_alike_names(&self) -> String {
        self.look_alikes
            .iter()
            .map(|o| self.spec.member_name(*o))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What blocks a disruptive step while look-alikes are there (`None`: none is).
    fn look_alike_block(&self, holding: &str) -> Option<Blocked> {
        (!self.look_alikes.is_empty()).then(|| Blocked {
            reason: BlockReason::LookAlike,
            message: format!(
                "objects that are not this cluster's hold the names of {} (status.lookAlikes): holding {holding} until they are gone",
                self.look_alike_names()
            ),
        })
    }

    /// Members (being) created by this pass, PVCs or pods.
    fn creating(&self) -> bool {
        !self.created.is_empty()
            || self
                .actions
                .iter()
                .any(|a| matches!(a, Action::CreatePod(_) | Action::CreatePvc(_)))
    }

    /// A drained member that is not the one being disrupted: it is Leaving, as good as
    /// disrupted, until it is recycled. No other disruption starts beside it.
    fn drained_bystander(&self) -> bool {
        let disrupted = self.disruption.as_ref().and_then(Disruption::ordinal);
        self.members.iter().any(|o| {
            Some(*o) != disrupted
                && self
                    .obs(*o)
                    .pod
                    .as_ref()
                    .is_some_and(|p| p.drained && !p.terminating)
        })
    }

    /// Members whose pod or volume differs from what the spec asks.
    fn outdated(&self) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|o| {
                let m = self.obs(*o);
                m.pod.as_ref().is_some_and(|p| p.outdated)
                    || m.pvc.as_ref().is_some_and(|v| v.outdated && !v.terminating)
            })
            .collect()
    }

    /// Members whose pod asks for a fresh volume, on a volume that is not already going.
    fn asked_fresh_volume(&self) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|o| {
                let m = self.obs(*o);
                m.pod
                    .as_ref()
                    .is_some_and(|p| p.replace_volume && !p.terminating)
                    && m.pvc.as_ref().is_some_and(|v| !v.terminating)
            })
            .collect()
    }

    /// Members whose pod runs on a node being drained, with that node, by ordinal.
    fn on_draining_nodes(&self) -> Vec<(u32, String)> {
        self.members
            .iter()
            .filter_map(|o| {
                let p = self.obs(*o).pod.as_ref().filter(|p| !p.terminating)?;
                Some((*o, p.draining_node()?.to_string()))
            })
            .collect()
    }

    /// Members whose pod asks to be restarted on its own volume (and asks no fresh volume).
    fn asked_restart(&self) -> Vec<u32> {
        self.members
            .iter()
            .copied()
            .filter(|o| {
                self.obs(*o)
                    .pod
                    .as_ref()
                    .is_some_and(|p| p.restart && !p.replace_volume && !p.terminating)
            })
            .collect()
    }
}

fn normal(reason: EventReason, message: String) -> Note {
    Note {
        kind: EventKind::Normal,
        reason,
        member: None,
        message,
    }
}

fn restarted_while_draining(name: &str) -> Note {
    Note {
        kind: EventKind::Warning,
        reason: EventReason::RestartedWhileDraining,
        member: None,
        message: format!(
            "{name} restarted after its drain and may own data again: draining it again, then waiting for a fresh hand-off"
        ),
    }
}

fn timeout(subject: &str, what: &str, age: Millis, cause: &Blocked) -> Blocked {
    Blocked {
        reason: BlockReason::HandoffTimeout,
        message: format!(
            "{subject}: {what} has not settled after {}s ({}); not proceeding",
            age / 1000,
            cause.message
        ),
    }
}
