//! The hand-off gate (v3): has the data of the step being gated reached a member that stays?
//!
//! On real marekvs 0.2 the under-replication gauge is computed from membership alone, and the
//! ring gauges are occupancy, not backlog; nothing says which writes reached which owner. What
//! the node does offer is its own anti-entropy: every round a member compares each partition it
//! owns with one other owner and pushes what that owner lacks, and every third round it offers
//! what it holds but does not own. The gate passes only when, for every member that must carry
//! the data:
//! - G1 its pod exists and is Ready, and its metrics were actually read;
//! - G2 it reports 0 under-replicated and 0 join-gate-pending partitions;
//! - G3 its membership view holds exactly the expected number of members, and by identity
//!   exactly the expected members: the ids the gated members give as their own (read over
//!   RESP; an unread view is unknown, and holds);
//! - G4 its bootstrap counter (whole-partition copies) has not moved for the settle window,
//!   counted from the later of its last move and `since` (the start of the step being gated);
//! - G5 the leaver, when there is one: its client traffic is cut (its pod is labelled off), no
//!   client input reached it since it went quiet, and since then enough of its own
//!   anti-entropy rounds began ([`rounds_needed`]) to have handed what it holds to members
//!   that stay. Client input is counted in RESP bytes less the operator's own reads
//!   (`MemberObs::client_input`); a restart, a change of its view or any figure not read
//!   starts the count again.
//!
//! Anti-entropy repairs (`marekvs_ae_repair_ops_total`) hold nothing: on the node they say
//! neither whose data they carry nor that an exchange finished, and under write load they never
//! stop. They are reported as background repair.
//!
//! docs/scale-down.md argues each condition from the node's behaviour.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{
    BackgroundRepair, BlockReason, Blocked, MemberObs, Millis, Moving, QuietReset, Sample, Scrape,
    View, WindowLoss, WindowLossCause,
};
use crate::views::describe;

/// The member leaving (removed, or restarted): the gate also checks that what originated on it
/// reached every owner (G5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaver {
    pub ordinal: u32,
    /// Its client traffic was asked to be cut (the removal or restart is recorded). Before
    /// that only its ring must be known: it still takes client writes, so its ring may be busy.
    pub traffic_cut: bool,
    /// It comes back on the volume it has now (a restart): what its ring could not ship waits
    /// there. A removal or a move to a fresh volume takes the volume away.
    pub keeps_volume: bool,
}

pub struct HandoffGate<'a> {
    /// The members that must carry the data, by ordinal.
    pub members: Vec<(u32, &'a MemberObs)>,
    pub samples: &'a BTreeMap<u32, Sample>,
    /// How many members every view must hold.
    pub expected_view: u64,
    pub since: Option<Millis>,
    pub now: Millis,
    pub settle_ms: Millis,
    /// For messages.
    pub name: &'a str,
    /// The member leaving, if the step has one (it is among `members`).
    pub leaver: Option<Leaver>,
}

/// Why the gate holds: the block, what keeps moving, where and how fast.
#[derive(Clone, Debug, PartialEq)]
pub struct GateHold {
    pub blocked: Blocked,
    pub moving: Moving,
    pub members: Vec<u32>,
    /// Summed repairs per second (`Repairs`), or the leaver's write commands per second
    /// (`ClientTraffic`).
    pub rate_per_sec: Option<f64>,
}

fn hold(
    reason: BlockReason,
    message: String,
    moving: Moving,
    members: Vec<u32>,
    rate_per_sec: Option<f64>,
) -> Result<(), GateHold> {
    Err(GateHold {
        blocked: Blocked { reason, message },
        moving,
        members,
        rate_per_sec,
    })
}

fn secs(ms: Millis) -> f64 {
    ms.max(0) as f64 / 1000.0
}

impl HandoffGate<'_> {
    pub fn check(&self) -> Result<(), Blocked> {
        self.evaluate().map_err(|h| h.blocked)
    }

    /// The gate, with what keeps moving when it holds.
    pub fn evaluate(&self) -> Result<(), GateHold> {
        self.check_pods()?;
        let scrapes: Vec<(u32, &Scrape)> = self
            .members
            .iter()
            .filter_map(|(o, m)| m.scrape.as_ref().map(|s| (*o, s)))
            .collect();
        self.check_gauges(&scrapes)?;
        self.check_identities().map_err(|blocked| GateHold {
            blocked,
            moving: Moving::Views,
            members: self.members.iter().map(|(o, _)| *o).collect(),
            rate_per_sec: None,
        })?;
        // The leaver first: under load its backlog is what a user needs to see.
        self.check_leaver()?;
        self.check_bootstraps()
    }

    fn who(&self, ords: &[u32]) -> String {
        ords.iter()
            .map(|o| format!("{}-{o}", self.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// G1: every gated pod Ready and scraped.
    fn check_pods(&self) -> Result<(), GateHold> {
        let unready: Vec<&(u32, &MemberObs)> = self
            .members
            .iter()
            .filter(|(_, m)| !m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating))
            .collect();
        let not_ready: Vec<u32> = unready.iter().map(|(o, _)| *o).collect();
        if !not_ready.is_empty() {
            // Said as joining when every unready member is still bootstrapping: its join gate
            // is what keeps it unready, and the figure says how far it has to go.
            let pending: Option<Vec<String>> = unready
                .iter()
                .map(|(o, m)| {
                    let n = m.scrape.as_ref()?.join_pending;
                    (n > 0).then(|| format!("{}-{o} ({n} partitions)", self.name))
                })
                .collect();
            if let Some(pending) = pending {
                let message = format!("still joining: {}", pending.join(", "));
                let reason = BlockReason::JoinPending;
                return hold(reason, message, Moving::Bootstraps, not_ready, None);
            }
            let message = format!("not ready: {}", self.who(&not_ready));
            return hold(
                BlockReason::NotAllReady,
                message,
                Moving::Other,
                not_ready,
                None,
            );
        }
        let unscraped: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| m.scrape.is_none())
            .map(|(o, _)| *o)
            .collect();
        if !unscraped.is_empty() {
            let message = format!("metrics not read from: {}", self.who(&unscraped));
            let reason = BlockReason::MetricsUnavailable;
            return hold(reason, message, Moving::Other, unscraped, None);
        }
        Ok(())
    }

    /// G2 and G3 by count: under-replication at 0, views of the expected size.
    fn check_gauges(&self, scrapes: &[(u32, &Scrape)]) -> Result<(), GateHold> {
        let under: Vec<u32> = scrapes
            .iter()
            .filter(|(_, s)| s.underreplicated > 0)
            .map(|(o, _)| *o)
            .collect();
        if !under.is_empty() {
            let worst = scrapes.iter().map(|(_, s)| s.underreplicated).max();
            let message = format!(
                "{} partitions under-replicated (max over members)",
                worst.unwrap_or(0)
            );
            return hold(
                BlockReason::Underreplicated,
                message,
                Moving::Other,
                under,
                None,
            );
        }
        // The join-gate gauge of a ready member holds nothing: a ready node is past its join
        // gate, and what it counts then are bootstraps asked after a later view change, some
        // of which no donor ever answers (the gauge can stay above 0 for good). Data they would
        // bring is the leaver's rounds' to push (G5), and a copy that does arrive moves G4.
        let diverged: Vec<(u32, u64)> = scrapes
            .iter()
            .filter(|(_, s)| s.view_members != self.expected_view)
            .map(|(o, s)| (*o, s.view_members))
            .collect();
        if !diverged.is_empty() {
            let seen: Vec<String> = diverged
                .iter()
                .map(|(o, n)| format!("{}-{o} sees {n}", self.name))
                .collect();
            let message = format!(
                "views not converged on {} members: {}",
                self.expected_view,
                seen.join(", ")
            );
            let members = diverged.iter().map(|(o, _)| *o).collect();
            return hold(
                BlockReason::ViewsNotConverged,
                message,
                Moving::Views,
                members,
                None,
            );
        }
        Ok(())
    }

    /// How long a clock last set at `at` has been quiet, counted from `since` at the earliest.
    fn quiet_for(&self, at: Option<Millis>) -> Millis {
        let start = at
            .unwrap_or(Millis::MIN)
            .max(self.since.unwrap_or(Millis::MIN));
        self.now.saturating_sub(start)
    }

    /// Per gated member, how long a counter has been quiet (a member never sampled: 0,
    /// unknown is never quiet).
    fn quiet(&self, clock: impl Fn(&Sample) -> Millis) -> Vec<(u32, Millis)> {
        self.members
            .iter()
            .map(|(o, _)| {
                let at = self.samples.get(o).map(&clock).unwrap_or(self.now);
                (*o, self.quiet_for(Some(at)))
            })
            .collect()
    }

    /// G4: no partition bootstrap completed for the settle window (counted from the step's
    /// start: right after a step began, the window has not passed even with nothing moving).
    fn check_bootstraps(&self) -> Result<(), GateHold> {
        let quiet = self.quiet(|s| s.bootstraps_changed_at);
        let short: Vec<u32> = quiet
            .iter()
            .filter(|(_, q)| *q < self.settle_ms)
            .map(|(o, _)| *o)
            .collect();
        if short.is_empty() {
            return Ok(());
        }
        let least = quiet.iter().map(|(_, q)| *q).min().unwrap_or(0);
        let window = format!("{:.1}s of {:.1}s", secs(least), secs(self.settle_ms));
        // Members whose own counter moved within the window (or never sampled).
        let moved: Vec<u32> = short
            .iter()
            .copied()
            .filter(|o| {
                self.samples
                    .get(o)
                    .is_none_or(|s| self.now - s.bootstraps_changed_at < self.settle_ms)
            })
            .collect();
        if moved.is_empty() {
            let message = format!("settle window since the step began: {window}");
            return hold(
                BlockReason::RepairInProgress,
                message,
                Moving::Other,
                vec![],
                None,
            );
        }
        let message = format!(
            "partition hand-off not settled: bootstraps quiet for {window} on {}",
            self.who(&moved)
        );
        hold(
            BlockReason::RepairInProgress,
            message,
            Moving::Bootstraps,
            moved,
            None,
        )
    }

    /// G5: the leaver takes no client input, and its own anti-entropy has handed on what it
    /// holds: enough rounds began after it went quiet ([`rounds_needed`]).
    fn check_leaver(&self) -> Result<(), GateHold> {
        let Some(l) = self.leaver else {
            return Ok(());
        };
        let Some((_, m)) = self.members.iter().find(|(o, _)| *o == l.ordinal) else {
            return Ok(());
        };
        let name = format!("{}-{}", self.name, l.ordinal);
        let backlog = |message: String, moving, rate| {
            hold(
                BlockReason::LeaverBacklog,
                message,
                moving,
                vec![l.ordinal],
                rate,
            )
        };
        let Some(rounds) = m.scrape.as_ref().and_then(|s| s.ae_rounds) else {
            let message = format!(
                "the anti-entropy rounds of {name} are unknown (marekvs_ae_rounds_total not read): what it holds may be nowhere else"
            );
            return backlog(message, Moving::AntiEntropy, None);
        };
        // Before its traffic is cut it still takes client writes: only its rounds must be
        // known (the start check).
        if !l.traffic_cut {
            return Ok(());
        }
        if m.client_input.is_none() {
            let message = format!(
                "the client input of {name} is unknown (marekvs_net_input_bytes_total not read, or the operator has no earlier reading to compare): what it holds may be nowhere else"
            );
            return backlog(message, Moving::AntiEntropy, None);
        }
        if !m.pod.as_ref().is_some_and(|p| p.client_traffic_off) {
            let message = format!(
                "{name} still takes client writes: waiting for its pod to be labelled marekvs.io/client-traffic=off"
            );
            return backlog(message, Moving::ClientTraffic, None);
        }
        let Some(sample) = self.samples.get(&l.ordinal) else {
            let message = format!("{name} has not been sampled yet");
            return backlog(message, Moving::AntiEntropy, None);
        };
        match covered(sample, rounds) {
            Coverage::Covered => self.check_stalled_leaver(l.ordinal, &name, m),
            Coverage::ClientInput => {
                let rate = write_rate(sample);
                let message = format!(
                    "{name} still receives client commands past its Service ({} write commands so far, {rate:.0}/s; its last input {:.1}s ago): a client keeps a connection to it or dials its pod address",
                    sample.writes_total,
                    secs(self.now - sample.quiet_since)
                );
                backlog(message, Moving::ClientTraffic, Some(rate))
            }
            Coverage::Shipping => {
                let s = m.scrape.as_ref();
                let message = format!(
                    "{name} still ships the writes it took to their owners ({} bytes not yet acknowledged, marekvs_repl_ops_sent_total {}): its anti-entropy rounds count once every byte is",
                    s.and_then(|s| s.repl_inflight_bytes).unwrap_or(0),
                    s.and_then(|s| s.repl_sent).unwrap_or(0),
                );
                backlog(message, Moving::Shipping, None)
            }
            Coverage::Rounds { begun, needed } => {
                let stalled = m
                    .scrape
                    .as_ref()
                    .and_then(|s| s.repl_inflight_bytes)
                    .filter(|b| *b > 0)
                    .map_or(String::new(), |b| {
                        format!(
                            "; its replication window has held {b} bytes with nothing more sent for {:.0}s (an acknowledgement lost): what its ring still held goes by these rounds",
                            secs(self.now - sample.sent_changed_at)
                        )
                    });
                let message = format!(
                    "{name} has begun {begun} of the {needed} anti-entropy rounds that hand on what it holds, counted since {} {:.1}s ago (marekvs_ae_rounds_total {rounds}){stalled}",
                    sample.quiet_reset.as_str(),
                    secs(self.now - sample.quiet_since)
                );
                backlog(message, Moving::AntiEntropy, None)
            }
        }
    }

    /// G5b, a leaver whose rounds counted over a stalled window, or whose ring may have lost
    /// entries it had not shipped since shortly before the step began (gate v4: a restart
    /// with its ring not known to have shipped, or its ring at a cap while entries entered):
    /// what its ring still held goes by anti-entropy alone, possibly a whole backlog, whose
    /// exchanges share queues that drop messages when full. Its rounds are enough only once
    /// no member has received a repair for [`STALLED_REPAIRS_QUIET_MS`], counted from the
    /// later of the step's start and the loss: a difference left between it and an owner
    /// that stays shows up as repairs within a few rounds.
    fn check_stalled_leaver(&self, leaver: u32, name: &str, m: &MemberObs) -> Result<(), GateHold> {
        if self.leaver.is_some_and(|l| l.keeps_volume) {
            return Ok(());
        }
        let inflight = m.scrape.as_ref().and_then(|s| s.repl_inflight_bytes);
        let sample = self.samples.get(&leaver);
        let lost = sample.and_then(|s| s.window_lost).filter(|w| {
            self.since
                .is_none_or(|since| w.at >= since.saturating_sub(WINDOW_LOSS_LOOKBACK_MS))
        });
        if inflight == Some(0) && lost.is_none() {
            return Ok(());
        }
        let from = lost.map_or(Millis::MIN, |w| w.at);
        let quiet = self.quiet(|s| s.repairs_changed_at.max(from));
        let least = quiet.iter().map(|(_, q)| *q).min().unwrap_or(0);
        if least >= STALLED_REPAIRS_QUIET_MS {
            return Ok(());
        }
        let moved: Vec<u32> = quiet
            .iter()
            .filter(|(_, q)| *q < STALLED_REPAIRS_QUIET_MS)
            .map(|(o, _)| *o)
            .collect();
        let repairs = format!(
            "repairs are still received ({}; quiet for {:.1}s of {:.0}s)",
            self.who(&moved),
            secs(least),
            secs(STALLED_REPAIRS_QUIET_MS),
        );
        let message = match lost {
            Some(w) if inflight == Some(0) => format!(
                "{name}'s replication ring may have dropped writes it had not shipped ({}, {:.0}s ago): what it held goes by anti-entropy, and {repairs}",
                w.cause.as_str(),
                secs(self.now - w.at),
            ),
            _ => format!(
                "{name}'s replication window is stalled ({} bytes unacknowledged, nothing sent for {:.0}s): what its ring held goes by anti-entropy, and {repairs}",
                inflight.unwrap_or(0),
                sample.map_or(0.0, |s| secs(self.now - s.sent_changed_at)),
            ),
        };
        hold(
            BlockReason::LeaverBacklog,
            message,
            Moving::Repairs,
            moved,
            None,
        )
    }
}

/// How long no member may have received a repair before a leaver whose window stalled may go
/// (see [`HandoffGate::check_stalled_leaver`]): about ten rounds of every node, in each of
/// which an owner that stays compares every partition with one other owner.
pub const STALLED_REPAIRS_QUIET_MS: Millis = 60_000;

/// How long before the step began a ring's loss still counts ([`WindowLoss`]): a burst just
/// before the step is as unshipped as one during it, while one long before has had the
/// rounds and repairs of a quiet cluster since.
pub const WINDOW_LOSS_LOOKBACK_MS: Millis = STALLED_REPAIRS_QUIET_MS;

/// A ring reading at or above these is near its caps (`RING_MAX_OPS` 262,144 entries and
/// `RING_MAX_BYTES` 128 MiB in `marekvs-repl/src/ring.rs`, less a tenth: between two readings
/// a busy ring fills the rest, and at a cap every new entry evicts the oldest).
pub const RING_NEAR_CAP_OPS: u64 = 262_144 - 262_144 / 10;
pub const RING_NEAR_CAP_BYTES: u64 = (128 << 20) - (128 << 20) / 10;

/// Anti-entropy rounds of a member, once quiet, that must have begun for what it holds to
/// have been offered to a member that stays:
/// - every round probes each partition it owns with one other owner, pushing what that owner
///   lacks (at any replication factor one survivor owner is enough: the survivors repair each
///   other later, and the next leaver's own rounds cover what it received);
/// - rounds whose number is a multiple of 3 also offer what it holds but does not own to one
///   owner (its copies of writes it took for partitions it does not own);
/// - exchanges are sent without waiting, so a round counts as done once the next one began
///   (5-7 s later).
///
/// So: [`OWNER_ROUNDS`] done owner rounds and [`OFFER_ROUNDS`] done offer rounds, all numbered
/// above `at_quiet` (begun after the member went quiet). More than one of each because a
/// message dropped on a full queue is lost silently; the next round sends it again.
pub fn rounds_needed(at_quiet: u64) -> u64 {
    let first_offer = (at_quiet / 3 + 1) * 3;
    let last_offer = first_offer + 3 * (OFFER_ROUNDS - 1);
    (last_offer + 1).max(at_quiet + OWNER_ROUNDS + 1)
}

/// Done owner rounds required after a member went quiet.
pub const OWNER_ROUNDS: u64 = 2;

/// How long a ring may hold unacknowledged bytes with nothing more leaving it before it counts
/// as stalled rather than shipping. A node sends its acknowledgements without waiting and drops
/// one when its queue to the sender is full (`marekvs-repl/src/lib.rs`, `mesh.rs`); the sender,
/// its window full, sends nothing more, so nothing acknowledges the rest: the window stays
/// full until the connection drops (measured on real members: 4.2 MB stuck for 10 minutes, the
/// sent count still, the peer idle). A slow window also pauses: up to 58 s between two moves
/// of the count measured in the RF 3 trap, so a stall is a guess, and rounds counted over it
/// prove nothing on their own ([`HandoffGate::check_stalled_leaver`]).
pub const SHIPPING_STALL_MS: Millis = 60_000;
/// Done offer rounds (every third round) required after a member went quiet.
pub const OFFER_ROUNDS: u64 = 2;

/// Whether a member's own anti-entropy has handed on what it holds, at `rounds` now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    Covered,
    /// Its last quiet reset was client input: clients still send it commands.
    ClientInput,
    /// Its last quiet reset was its ring shipping: it still ships what it took.
    Shipping,
    /// Quiet, but too few rounds begun since (`begun` of `needed`, counted from the reset).
    Rounds {
        begun: u64,
        needed: u64,
    },
}

/// G5's rule over one member's sample, with the rounds it reads now.
pub fn covered(sample: &Sample, rounds: u64) -> Coverage {
    let Some(at) = sample.rounds_at_quiet else {
        return Coverage::Rounds {
            begun: 0,
            needed: rounds_needed(0),
        };
    };
    let needed = rounds_needed(at);
    if rounds >= needed {
        return Coverage::Covered;
    }
    if sample.sampled_at == sample.quiet_since {
        match sample.quiet_reset {
            QuietReset::ClientInput => return Coverage::ClientInput,
            QuietReset::Shipping => return Coverage::Shipping,
            _ => {}
        }
    }
    Coverage::Rounds {
        begun: rounds.saturating_sub(at),
        needed: needed - at,
    }
}

/// The member's write commands per second between its last two samples (0 when they did not
/// move).
fn write_rate(s: &Sample) -> f64 {
    s.writes_prev.map_or(0.0, |(prev, at)| {
        let dt = s.sampled_at - at;
        if dt > 0 {
            s.writes_total.saturating_sub(prev) as f64 * 1000.0 / dt as f64
        } else {
            0.0
        }
    })
}

/// Repairs per second summed over `members`, from each one's last two counter moves.
fn repair_rate(members: &[u32], samples: &BTreeMap<u32, Sample>) -> f64 {
    members
        .iter()
        .filter_map(|o| samples.get(o))
        .filter_map(|s| {
            let (prev, at) = s.repairs_prev?;
            let dt = s.repairs_changed_at - at;
            (dt > 0).then(|| s.repairs_total.saturating_sub(prev) as f64 * 1000.0 / dt as f64)
        })
        .sum()
}

/// Repairs that move on `members` (within the settle window). On marekvs 0.2 nothing says
/// whose data a repair carries, and under write load they never stop, so they hold nothing:
/// they are reported (`status.backgroundRepair`). `None`: no repair moves.
pub fn background_repair(
    members: &[u32],
    samples: &BTreeMap<u32, Sample>,
    now: Millis,
    settle_ms: Millis,
) -> Option<BackgroundRepair> {
    let moving: Vec<(u32, &Sample)> = members
        .iter()
        .filter_map(|o| samples.get(o).map(|s| (*o, s)))
        .filter(|(_, s)| now - s.repairs_changed_at < settle_ms && s.repairs_prev.is_some())
        .collect();
    if moving.is_empty() {
        return None;
    }
    let ords: Vec<u32> = moving.iter().map(|(o, _)| *o).collect();
    let since = moving
        .iter()
        .filter_map(|(_, s)| s.repairs_prev.map(|p| p.1))
        .min()
        .unwrap_or(now);
    Some(BackgroundRepair {
        rate_per_sec: repair_rate(&ords, samples),
        members: ords,
        since,
    })
}

impl HandoffGate<'_> {
    /// Every gated member's view holds exactly the ids of the gated members.
    fn check_identities(&self) -> Result<(), Blocked> {
        let fail = |message: String| {
            Err(Blocked {
                reason: BlockReason::ViewsNotConverged,
                message,
            })
        };
        let unread: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.view.is_none())
            .map(|(o, _)| format!("{}-{o}", self.name))
            .collect();
        if !unread.is_empty() {
            return fail(format!(
                "views not read over RESP (unreachable, AUTH refused or unparseable) from: {}",
                unread.join(", ")
            ));
        }
        let views: BTreeMap<u32, &View> = self
            .members
            .iter()
            .filter_map(|(o, m)| m.view.as_ref().map(|v| (*o, v)))
            .collect();
        let expected: BTreeSet<&str> = views.values().map(|v| v.id.as_str()).collect();
        if expected.len() != views.len() {
            return fail("two members report the same id (CLUSTER MYID)".into());
        }
        // A node takes its id from its hostname's ordinal (`demo-3` is node 3): a member whose
        // address answers with another id is another node at that address (a pod IP reused).
        let mut strangers: Vec<String> = views
            .iter()
            .filter(|(o, v)| v.id != View::ordinal_id(**o))
            .map(|(o, v)| format!("{}-{o} answers as {}", self.name, id_name(&v.id)))
            .collect();
        if strangers.len() > crate::views::STRANGERS_NAMED {
            let more = strangers.len() - crate::views::STRANGERS_NAMED;
            strangers.truncate(crate::views::STRANGERS_NAMED);
            strangers.push(format!("{more} more"));
        }
        if !strangers.is_empty() {
            return fail(format!(
                "a member's address answers with another node's id (CLUSTER MYID; a node's id is its ordinal): {}",
                strangers.join(", ")
            ));
        }
        let names: BTreeMap<String, String> = views
            .iter()
            .map(|(o, v)| (v.id.clone(), format!("{}-{o}", self.name)))
            .collect();
        let differ: Vec<String> = views
            .iter()
            .filter(|(_, v)| v.ids() != expected)
            .map(|(o, v)| format!("{}-{o} sees {}", self.name, describe(v, &names)))
            .collect();
        if !differ.is_empty() {
            let want: Vec<String> = views.keys().map(|o| format!("{}-{o}", self.name)).collect();
            return fail(format!(
                "views not converged by identity on {}: {}",
                want.join(", "),
                differ.join("; ")
            ));
        }
        Ok(())
    }
}

/// A node id as a person reads it: `node 7` for an ordinal's id, else its first 12 digits.
fn id_name(id: &str) -> String {
    match u32::from_str_radix(id, 16) {
        Ok(n) if View::ordinal_id(n) == id => format!("node {n}"),
        _ => format!("node {}", id.chars().take(12).collect::<String>()),
    }
}

/// Update the samples with this pass's scrapes: a counter that moved restarts its own quiet
/// time now (a repair move keeps the sample before it, for the rate); a member that shows
/// client input, restarted, changed its view or could not be fully read goes quiet again from
/// now ([`QuietReset`]); a member not scraped keeps its old sample (the shell keeps counting
/// its client input until a pass is recorded).
pub fn update_samples(
    prev: &BTreeMap<u32, Sample>,
    observed: &BTreeMap<u32, MemberObs>,
    now: Millis,
) -> BTreeMap<u32, Sample> {
    let mut next = BTreeMap::new();
    for (o, m) in observed {
        let sample = match (&m.scrape, prev.get(o)) {
            (Some(s), Some(p)) => Some(next_sample(p, s, m, now)),
            (Some(s), None) => Some(Sample {
                ring_ops: s.ring_ops,
                ae_rounds: s.ae_rounds,
                view_digest: m.view.as_ref().map(view_digest),
                writes_total: s.write_commands,
                rounds_at_quiet: s.ae_rounds,
                sent_total: s.repl_sent,
                inflight_bytes: s.repl_inflight_bytes,
                ring_bytes: s.ring_bytes,
                applied_total: s.repl_applied,
                // Its ring's past is unknown: near a cap, it may have dropped entries.
                window_lost: near_cap(s.ring_ops, s.ring_bytes).then_some(WindowLoss {
                    at: now,
                    cause: WindowLossCause::RingAtCap,
                }),
                ..Sample::new(s.bootstraps_total, s.repairs_total, now)
            }),
            (None, Some(p)) => Some(*p),
            (None, None) => None,
        };
        if let Some(sample) = sample {
            next.insert(*o, sample);
        }
    }
    next
}

/// A digest of the ids a view holds, stable across processes (FNV-1a over the sorted ids).
pub fn view_digest(v: &View) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in v.ids() {
        for b in id.bytes().chain([b'\n']) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Why a member goes quiet again in this scrape, if it does.
fn quiet_reset(p: &Sample, s: &Scrape, m: &MemberObs, now: Millis) -> Option<QuietReset> {
    let went_back = matches!((s.ae_rounds, p.ae_rounds), (Some(a), Some(b)) if a < b);
    // Up for less time than has passed since the last sample: it started after it.
    let younger = s.uptime_ms.is_some_and(|u| (u as i64) < now - p.sampled_at);
    if went_back || younger {
        return Some(QuietReset::Restarted);
    }
    let (Some(input), Some(_), Some(_), Some(view), Some(inflight)) = (
        m.client_input,
        s.ae_rounds,
        s.uptime_ms,
        m.view.as_ref(),
        s.repl_inflight_bytes,
    ) else {
        return Some(QuietReset::Unknown);
    };
    if input > 0 {
        return Some(QuietReset::ClientInput);
    }
    // Bytes its ring shipped that a peer has not acknowledged: behind a full window it ships
    // a backlog (the writes it took: received entries are never relayed), its exchanges wait
    // on the same connections, and a node exits after at most 7 s of waiting for it. A
    // trickle (expiry tombstones) is acknowledged between two readings of the 2 s gauge.
    let sent_moved = s.repl_sent.is_none() || s.repl_sent != p.sent_total;
    if inflight > 0 && (sent_moved || now - p.sent_changed_at < SHIPPING_STALL_MS) {
        return Some(QuietReset::Shipping);
    }
    if p.view_digest.is_some_and(|d| d != view_digest(view)) {
        return Some(QuietReset::ViewChanged);
    }
    None
}

/// Whether a ring that read `ops` entries and `bytes` bytes is at or near one of its caps
/// (unknown: it may be). Near, because between two readings a busy ring fills the rest.
pub fn near_cap(ops: Option<u64>, bytes: Option<u64>) -> bool {
    ops.is_none_or(|o| o >= RING_NEAR_CAP_OPS) || bytes.is_none_or(|b| b >= RING_NEAR_CAP_BYTES)
}

/// Gate v4: whether this reading shows that the member's ring may have dropped entries it had
/// not shipped ([`WindowLoss`]).
/// - A restart after a reading with bytes unacknowledged (or unknown), or with its ring near
///   a cap while it took client input: the node waits at most 7 s for its backlog, then exits,
///   and comes back with an empty ring.
/// - A ring near a cap while entries entered it since the last reading and its own writes
///   were not all shipped: each new entry evicts the oldest, and a cursor behind it jumps the
///   gap (`marekvs-repl/src/ring.rs`). Entries it applied from others are never shipped on
///   by it, so once its own are, evictions take nothing it owes.
fn window_loss(
    p: &Sample,
    s: &Scrape,
    m: &MemberObs,
    reset: Option<QuietReset>,
    now: Millis,
) -> Option<WindowLoss> {
    let loss = |cause| Some(WindowLoss { at: now, cause });
    if reset == Some(QuietReset::Restarted) {
        let took_input = p.quiet_reset == QuietReset::ClientInput && p.quiet_since == p.sampled_at;
        if p.inflight_bytes != Some(0) || (near_cap(p.ring_ops, p.ring_bytes) && took_input) {
            return loss(WindowLossCause::Restarted);
        }
        return None;
    }
    let own_input = m.client_input != Some(0) || s.write_commands != p.writes_total;
    let entered = own_input
        || s.repl_applied.is_none()
        || s.repl_applied != p.applied_total
        || s.repairs_total != p.repairs_total
        || s.bootstraps_total != p.bootstraps_total;
    let unshipped = own_input
        || s.repl_inflight_bytes != Some(0)
        || p.inflight_bytes != Some(0)
        || s.repl_sent.is_none()
        || s.repl_sent != p.sent_total;
    if near_cap(s.ring_ops, s.ring_bytes) && entered && unshipped {
        return loss(WindowLossCause::RingAtCap);
    }
    None
}

fn next_sample(p: &Sample, s: &Scrape, m: &MemberObs, now: Millis) -> Sample {
    let bootstraps_moved = p.bootstraps_total != s.bootstraps_total;
    let repairs_moved = p.repairs_total != s.repairs_total;
    let writes_moved = p.writes_total != s.write_commands;
    let reset = quiet_reset(p, s, m, now);
    let window_lost = window_loss(p, s, m, reset, now).or(p.window_lost);
    Sample {
        bootstraps_total: s.bootstraps_total,
        repairs_total: s.repairs_total,
        changed_at: if bootstraps_moved || repairs_moved {
            now
        } else {
            p.changed_at
        },
        bootstraps_changed_at: if bootstraps_moved {
            now
        } else {
            p.bootstraps_changed_at
        },
        repairs_changed_at: if repairs_moved {
            now
        } else {
            p.repairs_changed_at
        },
        // A counter that went down (the node restarted) gives no rate.
        repairs_prev: if !repairs_moved {
            p.repairs_prev
        } else if s.repairs_total > p.repairs_total {
            Some((p.repairs_total, p.repairs_changed_at))
        } else {
            None
        },
        ring_ops: s.ring_ops,
        sampled_at: now,
        ae_rounds: s.ae_rounds,
        view_digest: m.view.as_ref().map(view_digest),
        sent_total: s.repl_sent,
        sent_changed_at: if s.repl_sent != p.sent_total {
            now
        } else {
            p.sent_changed_at
        },
        writes_total: s.write_commands,
        // The rate is of the writes between this sample and the one before: none moved, none
        // a second (an old move's rate would name writes that stopped long ago).
        writes_prev: if writes_moved && s.write_commands > p.writes_total {
            Some((p.writes_total, p.sampled_at))
        } else {
            None
        },
        quiet_since: if reset.is_some() { now } else { p.quiet_since },
        quiet_reset: reset.unwrap_or(p.quiet_reset),
        rounds_at_quiet: match reset {
            Some(_) => s.ae_rounds,
            None => p.rounds_at_quiet.or(s.ae_rounds),
        },
        inflight_bytes: s.repl_inflight_bytes,
        ring_bytes: s.ring_bytes,
        applied_total: s.repl_applied,
        window_lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PodObs, Scrape};

    fn member(view: u64) -> MemberObs {
        MemberObs {
            view: Some(View::of_ordinals(0, 0..view as u32)),
            pod: Some(PodObs {
                ready: true,
                terminating: false,
                drained: false,
                outdated: false,
                image_outdated: false,
                replace_volume: false,
                restart: false,
                client_traffic_off: false,
                never_started: false,
                node: None,
                eviction_allowed: false,
            }),
            pvc: None,
            scrape: Some(Scrape {
                view_members: view,
                ..Scrape::default()
            }),
            look_alike: false,
            password: Default::default(),
            client_input: Some(0),
            new_pod: crate::types::PodAdmission::Admitted,
        }
    }

    /// Member `i` gives its own id as ordinal `i`'s.
    fn numbered(mut ms: Vec<MemberObs>) -> Vec<MemberObs> {
        for (i, m) in ms.iter_mut().enumerate() {
            m.view.as_mut().unwrap().id = View::ordinal_id(i as u32);
        }
        ms
    }

    /// Members 0..n, member `i` seeing `sees[i]`.
    fn seeing(sees: &[&[u32]]) -> Vec<MemberObs> {
        sees.iter()
            .enumerate()
            .map(|(i, s)| {
                let mut m = member(s.len() as u64);
                m.view = Some(View::of_ordinals(i as u32, s.iter().copied()));
                m
            })
            .collect()
    }

    #[test]
    fn views_must_hold_the_expected_members_by_identity() {
        let samples = quiet_since(0, 3);
        let ok = seeing(&[&[0, 1, 2], &[0, 1, 2], &[0, 1, 2]]);
        assert_eq!(check(&ok, &samples, 3, None, 10_000), Ok(()));

        // The right count, but member 2 sees a stranger (ordinal 7's id) in place of 1.
        let swapped = seeing(&[&[0, 1, 2], &[0, 1, 2], &[0, 2, 7]]);
        let b = check(&swapped, &samples, 3, None, 10_000).unwrap_err();
        assert_eq!(b.reason, BlockReason::ViewsNotConverged);
        assert!(
            b.message
                .contains("demo-2 sees demo-0, demo-2, stranger 00000000 at 127.0.0.7"),
            "{}",
            b.message
        );

        // Two halves of a four-member cluster, each padded to the right count by strangers.
        let mut halves = seeing(&[&[0, 1, 8, 9], &[0, 1, 8, 9], &[2, 3, 8, 9], &[2, 3, 8, 9]]);
        let all4 = quiet_since(0, 4);
        assert_eq!(
            reason(check(&halves, &all4, 4, None, 10_000)),
            Some(BlockReason::ViewsNotConverged)
        );
        // Every view the same, but not the gated members: still held.
        for m in halves.iter_mut() {
            m.view.as_mut().unwrap().peers = View::of_ordinals(0, [0, 1, 2, 9]).peers;
        }
        assert_eq!(
            reason(check(&halves, &all4, 4, None, 10_000)),
            Some(BlockReason::ViewsNotConverged)
        );

        // A view not read is unknown, and holds, naming the member.
        let mut unread = ok.clone();
        unread[1].view = None;
        let b = check(&unread, &samples, 3, None, 10_000).unwrap_err();
        assert_eq!(b.reason, BlockReason::ViewsNotConverged);
        assert!(b.message.ends_with("from: demo-1"), "{}", b.message);

        // Two members claiming one id.
        let mut twins = ok.clone();
        twins[1].view.as_mut().unwrap().id = View::ordinal_id(0);
        assert_eq!(
            reason(check(&twins, &samples, 3, None, 10_000)),
            Some(BlockReason::ViewsNotConverged)
        );

        // Each view whole and the same, but member 1's address answers as node 7: another
        // node's process, not demo-1.
        let mut other = seeing(&[&[0, 2, 7], &[0, 2, 7], &[0, 2, 7]]);
        other[1].view.as_mut().unwrap().id = View::ordinal_id(7);
        let b = check(&other, &samples, 3, None, 10_000).unwrap_err();
        assert_eq!(b.reason, BlockReason::ViewsNotConverged);
        assert!(
            b.message.ends_with("demo-1 answers as node 7"),
            "{}",
            b.message
        );
    }

    fn check(
        members: &[MemberObs],
        samples: &BTreeMap<u32, Sample>,
        expected: u64,
        since: Option<Millis>,
        now: Millis,
    ) -> Result<(), Blocked> {
        gate(members, samples, expected, None, since, now).check()
    }

    /// The gate over `members` (member `i` is ordinal `i`), a 5 s settle window.
    fn gate<'a>(
        members: &'a [MemberObs],
        samples: &'a BTreeMap<u32, Sample>,
        expected_view: u64,
        leaver: Option<Leaver>,
        since: Option<Millis>,
        now: Millis,
    ) -> HandoffGate<'a> {
        HandoffGate {
            members: members
                .iter()
                .enumerate()
                .map(|(i, m)| (i as u32, m))
                .collect(),
            samples,
            expected_view,
            since,
            now,
            settle_ms: 5_000,
            name: "demo",
            leaver,
        }
    }

    fn quiet_since(t: Millis, n: u32) -> BTreeMap<u32, Sample> {
        (0..n)
            .map(|o| {
                (
                    o,
                    Sample {
                        bootstraps_total: 0,
                        repairs_total: 0,
                        changed_at: t,
                        bootstraps_changed_at: t,
                        repairs_changed_at: t,
                        ring_ops: Some(0),
                        ..Sample::default()
                    },
                )
            })
            .collect()
    }

    fn reason(r: Result<(), Blocked>) -> Option<BlockReason> {
        r.err().map(|b| b.reason)
    }

    #[test]
    fn passes_only_when_every_condition_holds() {
        let ok = numbered(vec![member(3), member(3), member(3)]);
        let samples = quiet_since(0, 3);
        assert_eq!(check(&ok, &samples, 3, None, 10_000), Ok(()));

        let mut unready = ok.clone();
        unready[1].pod.as_mut().unwrap().ready = false;
        assert_eq!(
            reason(check(&unready, &samples, 3, None, 10_000)),
            Some(BlockReason::NotAllReady)
        );

        let mut unscraped = ok.clone();
        unscraped[2].scrape = None;
        assert_eq!(
            reason(check(&unscraped, &samples, 3, None, 10_000)),
            Some(BlockReason::MetricsUnavailable)
        );

        let mut under = ok.clone();
        under[0].scrape.as_mut().unwrap().underreplicated = 1;
        assert_eq!(
            reason(check(&under, &samples, 3, None, 10_000)),
            Some(BlockReason::Underreplicated)
        );

        // Unready while its join gate still counts partitions: said as joining.
        let mut joining = unready.clone();
        joining[1].scrape.as_mut().unwrap().join_pending = 4;
        let held = check(&joining, &samples, 3, None, 10_000).unwrap_err();
        assert_eq!(held.reason, BlockReason::JoinPending);
        assert!(held.message.contains("-1 (4 partitions)"), "{held:?}");
        // Two unready, one of them not joining: just not ready.
        let mut both = joining.clone();
        both[2].pod.as_mut().unwrap().ready = false;
        assert_eq!(
            reason(check(&both, &samples, 3, None, 10_000)),
            Some(BlockReason::NotAllReady)
        );
        // A ready member's join-gate figure holds nothing (a real node's can stay above 0
        // after a later view change: bootstraps no donor answers).
        let mut stuck = ok.clone();
        stuck[0].scrape.as_mut().unwrap().join_pending = 67;
        assert_eq!(check(&stuck, &samples, 3, None, 10_000), Ok(()));

        // One view still holds the member that left.
        let diverged = numbered(vec![member(3), member(4), member(3)]);
        assert_eq!(
            reason(check(&diverged, &samples, 3, None, 10_000)),
            Some(BlockReason::ViewsNotConverged)
        );
        let too_small = numbered(vec![member(2), member(3), member(3)]);
        assert_eq!(
            reason(check(&too_small, &samples, 3, None, 10_000)),
            Some(BlockReason::ViewsNotConverged)
        );
    }

    #[test]
    fn counters_must_be_quiet_for_the_settle_window_since_the_step_began() {
        let ok = numbered(vec![member(3), member(3), member(3)]);
        // Counters moved 2 s ago.
        assert_eq!(
            reason(check(&ok, &quiet_since(8_000, 3), 3, None, 10_000)),
            Some(BlockReason::RepairInProgress)
        );
        // Quiet for long, but the step began 1 s ago: the window counts from the step.
        assert_eq!(
            reason(check(&ok, &quiet_since(0, 3), 3, Some(9_000), 10_000)),
            Some(BlockReason::RepairInProgress)
        );
        assert_eq!(
            check(&ok, &quiet_since(0, 3), 3, Some(4_000), 10_000),
            Ok(())
        );
        // Never sampled: unknown, so not quiet.
        assert_eq!(
            reason(check(&ok, &BTreeMap::new(), 3, None, 10_000)),
            Some(BlockReason::RepairInProgress)
        );
    }

    #[test]
    fn samples_restart_their_quiet_time_when_counters_move() {
        let mut observed = BTreeMap::new();
        observed.insert(0, member(3));
        let prev = quiet_since(1_000, 1);
        assert_eq!(
            update_samples(&prev, &observed, 5_000)[&0].changed_at,
            1_000,
            "unchanged"
        );
        observed
            .get_mut(&0)
            .unwrap()
            .scrape
            .as_mut()
            .unwrap()
            .repairs_total = 9;
        assert_eq!(
            update_samples(&prev, &observed, 5_000)[&0].changed_at,
            5_000,
            "moved"
        );
        observed.get_mut(&0).unwrap().scrape = None;
        assert_eq!(
            update_samples(&prev, &observed, 5_000)[&0],
            prev[&0],
            "not scraped: kept"
        );
    }

    // ---- gate v3: the leaver's anti-entropy since it went quiet ----

    const NOW: Millis = 100_000;

    /// Members 0..n converged, their counters quiet since 0; member `leaver` drained, its
    /// client traffic off, quiet since 0 at round 10 and now at round 40 (well covered).
    fn quiet_cluster(n: u32, leaver: u32) -> (Vec<MemberObs>, BTreeMap<u32, Sample>) {
        let mut ms = numbered((0..n).map(|_| member(n as u64)).collect());
        let p = ms[leaver as usize].pod.as_mut().unwrap();
        p.drained = true;
        p.client_traffic_off = true;
        let mut samples = quiet_since(0, n);
        rounds(&mut ms, &mut samples, leaver, Some(10), Some(40));
        (ms, samples)
    }

    /// Member `o` went quiet at round `at_quiet` and reads `now` rounds.
    fn rounds(
        ms: &mut [MemberObs],
        samples: &mut BTreeMap<u32, Sample>,
        o: u32,
        at_quiet: Option<u64>,
        now: Option<u64>,
    ) {
        ms[o as usize].scrape.as_mut().unwrap().ae_rounds = now;
        let s = samples.get_mut(&o).unwrap();
        s.rounds_at_quiet = at_quiet;
        s.ae_rounds = now;
        s.quiet_reset = QuietReset::ViewChanged;
        s.sampled_at = NOW;
    }

    fn evaluate(
        members: &[MemberObs],
        samples: &BTreeMap<u32, Sample>,
        leaver: Option<Leaver>,
        since: Option<Millis>,
    ) -> Result<(), GateHold> {
        gate(members, samples, members.len() as u64, leaver, since, NOW).evaluate()
    }

    fn leaving(ordinal: u32) -> Option<Leaver> {
        Some(Leaver {
            ordinal,
            traffic_cut: true,
            keeps_volume: false,
        })
    }

    /// Member `o`'s repairs moved at `at`, `per_sec` a second since the move before.
    fn repairing(samples: &mut BTreeMap<u32, Sample>, o: u32, at: Millis, per_sec: u64) {
        let s = samples.get_mut(&o).unwrap();
        s.repairs_prev = Some((s.repairs_total, at - 1_000));
        s.repairs_total += per_sec;
        s.repairs_changed_at = at;
        s.changed_at = at;
    }

    fn moving(r: Result<(), GateHold>) -> Option<(BlockReason, Moving, Vec<u32>)> {
        r.err().map(|h| (h.blocked.reason, h.moving, h.members))
    }

    #[test]
    fn rounds_needed_covers_two_done_owner_rounds_and_two_done_offer_rounds() {
        assert_eq!(
            (0..8).map(rounds_needed).collect::<Vec<_>>(),
            vec![7, 7, 7, 10, 10, 10, 13, 13]
        );
        for at in 0..3_000u64 {
            let needed = rounds_needed(at);
            // With round `needed` begun, every round numbered from at + 1 to needed - 1
            // began after the member went quiet and is done (the next one began).
            let owner = (at + 1..needed).count() as u64;
            let offer = (at + 1..needed).filter(|r| r % 3 == 0).count() as u64;
            assert!(owner >= OWNER_ROUNDS && offer >= OFFER_ROUNDS, "at {at}");
            // And no fewer would do.
            let offer_less = (at + 1..needed - 1).filter(|r| r % 3 == 0).count() as u64;
            assert!(
                offer_less < OFFER_ROUNDS,
                "at {at}: {needed} is not the least"
            );
        }
    }

    #[test]
    fn a_quiet_leaver_passes_once_enough_rounds_began_after_it_went_quiet() {
        let (mut ms, mut samples) = quiet_cluster(4, 3);
        assert_eq!(evaluate(&ms, &samples, leaving(3), Some(0)), Ok(()));
        // Quiet at round 10: 16 must have begun (offers 12 and 15 done).
        rounds(&mut ms, &mut samples, 3, Some(10), Some(12));
        let h = evaluate(&ms, &samples, leaving(3), Some(0)).unwrap_err();
        assert_eq!(
            (h.blocked.reason, h.moving, h.members.clone()),
            (BlockReason::LeaverBacklog, Moving::AntiEntropy, vec![3])
        );
        assert!(
            h.blocked.message.contains("demo-3 has begun 2 of the 6")
                && h.blocked.message.contains("since a view change"),
            "{}",
            h.blocked.message
        );
        rounds(&mut ms, &mut samples, 3, Some(10), Some(15));
        assert!(evaluate(&ms, &samples, leaving(3), Some(0)).is_err());
        rounds(&mut ms, &mut samples, 3, Some(10), Some(16));
        assert_eq!(evaluate(&ms, &samples, leaving(3), Some(0)), Ok(()));
        // The count's start not read yet: nothing counts.
        rounds(&mut ms, &mut samples, 3, None, Some(90));
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(3), Some(0))),
            Some((BlockReason::LeaverBacklog, Moving::AntiEntropy, vec![3]))
        );
    }

    #[test]
    fn the_leaver_must_take_no_client_writes() {
        let (mut ms, mut samples) = quiet_cluster(4, 3);
        ms[3].pod.as_mut().unwrap().client_traffic_off = false;
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(3), None)),
            Some((BlockReason::LeaverBacklog, Moving::ClientTraffic, vec![3]))
        );
        // Before its traffic was ever asked to be cut (the start check), it need not be.
        let before = Some(Leaver {
            ordinal: 3,
            traffic_cut: false,
            keeps_volume: false,
        });
        assert_eq!(evaluate(&ms, &samples, before, None), Ok(()));
        // Labelled off, but a client still sends it commands (a pooled connection, or its
        // pod address): held, naming the member and the write rate.
        ms[3].pod.as_mut().unwrap().client_traffic_off = true;
        rounds(&mut ms, &mut samples, 3, Some(40), Some(40));
        let s = samples.get_mut(&3).unwrap();
        s.quiet_reset = QuietReset::ClientInput;
        s.quiet_since = NOW;
        s.writes_total = 900;
        s.writes_prev = Some((500, NOW - 2_000));
        let h = evaluate(&ms, &samples, leaving(3), None).unwrap_err();
        assert_eq!(
            (h.blocked.reason, h.moving, h.rate_per_sec),
            (
                BlockReason::LeaverBacklog,
                Moving::ClientTraffic,
                Some(200.0)
            )
        );
        assert!(
            h.blocked
                .message
                .contains("demo-3 still receives client commands")
                && h.blocked
                    .message
                    .contains("900 write commands so far, 200/s"),
            "{}",
            h.blocked.message
        );
        // Its input stopped one scrape ago: now it waits on its rounds.
        samples.get_mut(&3).unwrap().sampled_at = NOW + 2_000;
        assert_eq!(
            moving(gate(&ms, &samples, 4, leaving(3), None, NOW + 2_000).evaluate()),
            Some((BlockReason::LeaverBacklog, Moving::AntiEntropy, vec![3]))
        );
    }

    #[test]
    fn unknown_rounds_or_input_never_pass() {
        let (ms, samples) = quiet_cluster(4, 3);
        let before = Some(Leaver {
            ordinal: 3,
            traffic_cut: false,
            keeps_volume: false,
        });
        for unknown in [
            |m: &mut MemberObs| m.scrape.as_mut().unwrap().ae_rounds = None,
            |m: &mut MemberObs| m.client_input = None,
        ] {
            let mut ms = ms.clone();
            unknown(&mut ms[3]);
            // Before the cut only the rounds must be known.
            let checks = if ms[3].client_input.is_none() {
                vec![leaving(3)]
            } else {
                vec![leaving(3), before]
            };
            for l in checks {
                let h = evaluate(&ms, &samples, l, Some(0)).unwrap_err();
                assert_eq!(
                    (h.blocked.reason, h.moving),
                    (BlockReason::LeaverBacklog, Moving::AntiEntropy)
                );
                assert!(
                    h.blocked.message.contains("unknown"),
                    "{}",
                    h.blocked.message
                );
            }
        }
        // Not sampled at all.
        let mut none = samples.clone();
        none.remove(&3);
        assert!(evaluate(&ms, &none, leaving(3), Some(0)).is_err());
    }

    #[test]
    fn moving_bootstraps_hold() {
        let (ms, mut samples) = quiet_cluster(4, 3);
        samples.get_mut(&1).unwrap().bootstraps_changed_at = NOW - 1_000;
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(3), None)),
            Some((BlockReason::RepairInProgress, Moving::Bootstraps, vec![1]))
        );
    }

    #[test]
    fn repairs_hold_nothing_and_are_reported_as_background() {
        let (ms, mut samples) = quiet_cluster(5, 4);
        for o in 0..4 {
            repairing(&mut samples, o, NOW - 500, 40);
        }
        assert_eq!(evaluate(&ms, &samples, leaving(4), Some(0)), Ok(()));
        let b = background_repair(&[0, 1, 2, 3, 4], &samples, NOW, 5_000).unwrap();
        assert_eq!(b.members, vec![0, 1, 2, 3]);
        assert_eq!(b.rate_per_sec, 160.0);
        assert_eq!(b.since, NOW - 1_500);
        // Quiet for the window: nothing to report.
        assert_eq!(
            background_repair(&[0, 1, 2, 3, 4], &samples, NOW + 5_000, 5_000),
            None
        );
    }

    // ---- samples: when a member goes quiet again ----

    /// One member seen at round 20 with 1,000 input bytes, up 60 s, at t = 10 s.
    fn seen() -> (BTreeMap<u32, MemberObs>, BTreeMap<u32, Sample>) {
        let mut m = member(3);
        let s = m.scrape.as_mut().unwrap();
        s.ae_rounds = Some(20);
        s.uptime_ms = Some(60_000);
        m.client_input = Some(0);
        let observed = BTreeMap::from([(0, m)]);
        let first = update_samples(&BTreeMap::new(), &observed, 10_000);
        (observed, first)
    }

    /// The next scrape at `now`: `f` changes what it reads.
    fn next(
        observed: &BTreeMap<u32, MemberObs>,
        prev: &BTreeMap<u32, Sample>,
        now: Millis,
        f: impl FnOnce(&mut MemberObs),
    ) -> Sample {
        let mut observed = observed.clone();
        let m = observed.get_mut(&0).unwrap();
        let s = m.scrape.as_mut().unwrap();
        s.uptime_ms = Some(60_000 + (now - 10_000) as u64);
        f(m);
        update_samples(prev, &observed, now)[&0]
    }

    #[test]
    fn a_first_sample_counts_rounds_from_now() {
        let (_, first) = seen();
        let s = first[&0];
        assert_eq!(
            (s.quiet_since, s.quiet_reset),
            (10_000, QuietReset::FirstSeen)
        );
        assert_eq!(s.rounds_at_quiet, Some(20));
    }

    #[test]
    fn client_input_restarts_the_count_and_unknown_input_too() {
        let (observed, first) = seen();
        let quiet = next(&observed, &first, 12_000, |m| {
            m.scrape.as_mut().unwrap().ae_rounds = Some(21);
        });
        assert_eq!(
            (quiet.quiet_since, quiet.rounds_at_quiet),
            (10_000, Some(20))
        );
        let input = next(&observed, &first, 12_000, |m| {
            m.client_input = Some(1);
            m.scrape.as_mut().unwrap().ae_rounds = Some(21);
        });
        assert_eq!(
            (input.quiet_since, input.quiet_reset, input.rounds_at_quiet),
            (12_000, QuietReset::ClientInput, Some(21))
        );
        // A member not scraped keeps its sample as it was.
        let mut missed = observed.clone();
        missed.get_mut(&0).unwrap().scrape = None;
        assert_eq!(update_samples(&first, &missed, 11_000)[&0], first[&0]);
        // Unknown input (a read cut off, the operator just started): not quiet.
        let cut = next(&observed, &first, 12_000, |m| m.client_input = None);
        assert_eq!(
            (cut.quiet_since, cut.quiet_reset),
            (12_000, QuietReset::Unknown)
        );
    }

    #[test]
    fn a_ring_still_shipping_restarts_the_count_and_holds_the_leaver() {
        let (observed, first) = seen();
        let shipping = next(&observed, &first, 12_000, |m| {
            m.scrape.as_mut().unwrap().ae_rounds = Some(21);
            m.scrape.as_mut().unwrap().repl_inflight_bytes = Some(4_263_490);
        });
        assert_eq!(
            (
                shipping.quiet_since,
                shipping.quiet_reset,
                shipping.rounds_at_quiet
            ),
            (12_000, QuietReset::Shipping, Some(21))
        );
        // Unread: unknown, not quiet.
        let unread = next(&observed, &first, 12_000, |m| {
            m.scrape.as_mut().unwrap().repl_inflight_bytes = None;
        });
        assert_eq!(unread.quiet_reset, QuietReset::Unknown);
        // A trickle acknowledged between readings moves the sent count only: still quiet.
        let trickle = next(&observed, &first, 12_000, |m| {
            m.scrape.as_mut().unwrap().ae_rounds = Some(21);
            m.scrape.as_mut().unwrap().repl_sent = Some(9_000);
        });
        assert_eq!(
            (trickle.quiet_since, trickle.rounds_at_quiet),
            (10_000, Some(20))
        );
        // The leaver whose rounds were well covered holds while its ring ships, naming the
        // bytes, and its rounds count again from the first reading at 0.
        let (mut ms, mut samples) = quiet_cluster(3, 2);
        ms[2].scrape.as_mut().unwrap().repl_inflight_bytes = Some(4_263_490);
        samples = update_samples(&samples, &(0u32..).zip(ms.iter().cloned()).collect(), NOW);
        let held = evaluate(&ms, &samples, leaving(2), Some(0));
        assert_eq!(
            moving(held.clone()),
            Some((BlockReason::LeaverBacklog, Moving::Shipping, vec![2]))
        );
        assert!(
            held.unwrap_err()
                .blocked
                .message
                .contains("4263490 bytes not yet acknowledged")
        );
        ms[2].scrape.as_mut().unwrap().repl_inflight_bytes = Some(0);
        let later = update_samples(
            &samples,
            &(0u32..).zip(ms.iter().cloned()).collect(),
            NOW + 2_000,
        );
        assert_eq!(
            later[&2].quiet_since, NOW,
            "quiet since the last reading above 0"
        );
        assert_eq!(
            moving(evaluate(&ms, &later, leaving(2), Some(0))),
            Some((BlockReason::LeaverBacklog, Moving::AntiEntropy, vec![2]))
        );
    }

    /// Gate v4 (b): a leaver restarted while its last reading showed bytes unacknowledged
    /// comes back with an empty ring and window, its rounds counted again; what the ring had
    /// not shipped rides anti-entropy alone, so it goes only once no member received a repair
    /// for `STALLED_REPAIRS_QUIET_MS` since the restart. After a reading with nothing
    /// unacknowledged and the ring far from its caps, the same restart holds nothing more.
    #[test]
    fn a_leaver_restarted_with_bytes_unacknowledged_waits_for_quiet_repairs() {
        let run = |inflight_before: u64| {
            let (mut ms, mut samples) = quiet_cluster(3, 2);
            let step = |ms: &Vec<MemberObs>, samples: &mut BTreeMap<u32, Sample>, at: Millis| {
                *samples = update_samples(samples, &(0u32..).zip(ms.iter().cloned()).collect(), at);
                samples[&2]
            };
            step(&ms, &mut samples, NOW - 4_000);
            let s = ms[2].scrape.as_mut().unwrap();
            s.repl_inflight_bytes = Some(inflight_before);
            step(&ms, &mut samples, NOW - 2_000);
            // Restarted: counters back at 0, up for 3 s, an empty window.
            let s = ms[2].scrape.as_mut().unwrap();
            (s.repl_inflight_bytes, s.repl_sent, s.ae_rounds, s.uptime_ms) =
                (Some(0), Some(0), Some(1), Some(3_000));
            let restarted = step(&ms, &mut samples, NOW);
            assert_eq!(restarted.quiet_reset, QuietReset::Restarted);
            // Its rounds after the restart cover it (G5).
            let s = ms[2].scrape.as_mut().unwrap();
            (s.ae_rounds, s.uptime_ms) = (Some(rounds_needed(1)), Some(43_000));
            step(&ms, &mut samples, NOW + 40_000);
            let eval_at =
                |at: Millis| gate(&ms, &samples, 3, leaving(2), Some(NOW - 10_000), at).evaluate();
            (
                restarted.window_lost,
                eval_at(NOW + 40_000),
                eval_at(NOW + 60_000),
            )
        };
        let (lost, early, late) = run(4_000_000);
        assert_eq!(
            lost,
            Some(WindowLoss {
                at: NOW,
                cause: WindowLossCause::Restarted
            })
        );
        let h = early.unwrap_err();
        assert_eq!(
            (h.blocked.reason, h.moving, h.members.clone()),
            (BlockReason::LeaverBacklog, Moving::Repairs, vec![0, 1, 2])
        );
        assert!(
            h.blocked.message.contains(
                "demo-2's replication ring may have dropped writes it had not shipped (it restarted with its ring not known to have shipped, 40s ago)"
            ) && h.blocked.message.contains("quiet for 40.0s of 60s"),
            "{}",
            h.blocked.message
        );
        assert!(late.is_ok(), "{late:?}");
        let (lost, early, _) = run(0);
        assert_eq!(lost, None);
        assert!(early.is_ok(), "{early:?}");
    }

    /// Gate v4 (a): a leaver's ring read near a cap while entries still entered it and its
    /// own writes were not all shipped may have evicted some before they shipped; at the cap
    /// with its own all shipped (window empty, the sent count still, no input), entries
    /// applied from others evict nothing it owes. A loss long before the step holds nothing.
    #[test]
    fn a_leaver_ring_at_its_cap_while_it_ships_waits_for_quiet_repairs() {
        let (mut ms, mut samples) = quiet_cluster(3, 2);
        let step = |ms: &Vec<MemberObs>, samples: &mut BTreeMap<u32, Sample>, at: Millis| {
            *samples = update_samples(samples, &(0u32..).zip(ms.iter().cloned()).collect(), at);
            samples[&2]
        };
        step(&ms, &mut samples, NOW - 30_000);
        // At the op cap, ops applied from others entering: nothing of its own unshipped.
        let s = ms[2].scrape.as_mut().unwrap();
        (s.ring_ops, s.repl_applied) = (Some(262_144), Some(5_000));
        assert_eq!(step(&ms, &mut samples, NOW - 28_000).window_lost, None);
        // Nothing entering: nothing evicted, whatever it owes.
        let s = ms[2].scrape.as_mut().unwrap();
        s.repl_inflight_bytes = Some(1_000_000);
        assert_eq!(step(&ms, &mut samples, NOW - 26_000).window_lost, None);
        // Entries entering while its window holds bytes: a loss.
        let s = ms[2].scrape.as_mut().unwrap();
        s.repl_applied = Some(9_000);
        let loss = WindowLoss {
            at: NOW - 24_000,
            cause: WindowLossCause::RingAtCap,
        };
        assert_eq!(
            step(&ms, &mut samples, NOW - 24_000).window_lost,
            Some(loss)
        );
        // Shipped since, and its rounds cover it: still held until repairs are quiet for the
        // bound from the loss.
        let s = ms[2].scrape.as_mut().unwrap();
        (s.repl_inflight_bytes, s.ae_rounds) = (Some(0), Some(100));
        step(&ms, &mut samples, NOW);
        assert_eq!(samples[&2].window_lost, Some(loss));
        let s = ms[2].scrape.as_mut().unwrap();
        s.ae_rounds = Some(100 + rounds_needed(100));
        step(&ms, &mut samples, NOW + 30_000);
        let eval_at = |since: Millis, at: Millis| {
            gate(&ms, &samples, 3, leaving(2), Some(since), at).evaluate()
        };
        let h = eval_at(NOW - 30_000, NOW + 30_000).unwrap_err();
        assert!(
            h.blocked
                .message
                .contains("its ring was at its cap while entries still entered it, 54s ago"),
            "{}",
            h.blocked.message
        );
        assert!(eval_at(NOW - 30_000, NOW + 36_000).is_ok());
        // A step that began more than the lookback after the loss: not this step's loss.
        let later = loss.at + WINDOW_LOSS_LOOKBACK_MS + 1;
        assert!(eval_at(later, later + 10_000).is_ok());
        assert!(eval_at(later - 1, later + 10_000).is_err());
        // An unknown ring size counts as near its cap.
        assert!(near_cap(Some(0), None) && near_cap(None, Some(0)));
        assert!(!near_cap(
            Some(RING_NEAR_CAP_OPS - 1),
            Some(RING_NEAR_CAP_BYTES - 1)
        ));
    }

    /// A window that holds bytes while nothing more is sent for `SHIPPING_STALL_MS` (an
    /// acknowledgement lost: the sender waits for it for good) is stalled, not shipping: the
    /// rounds count again from the last reading that counted it shipping, and the hold says so.
    #[test]
    fn a_stalled_window_stops_counting_as_shipping_after_the_stall_bound() {
        let (mut ms, mut samples) = quiet_cluster(3, 2);
        let scrape = |ms: &mut Vec<MemberObs>, sent: u64, rounds: u64| {
            let s = ms[2].scrape.as_mut().unwrap();
            s.repl_inflight_bytes = Some(4_199_888);
            s.repl_sent = Some(sent);
            s.ae_rounds = Some(rounds);
        };
        let step = |ms: &Vec<MemberObs>, samples: &mut BTreeMap<u32, Sample>, at: Millis| {
            *samples = update_samples(samples, &(0u32..).zip(ms.iter().cloned()).collect(), at);
            samples[&2]
        };
        // Sent moving: shipping, whatever the window says.
        scrape(&mut ms, 100, 50);
        let s = step(&ms, &mut samples, NOW);
        assert_eq!(
            (s.quiet_reset, s.sent_changed_at),
            (QuietReset::Shipping, NOW)
        );
        scrape(&mut ms, 200, 51);
        let s = step(&ms, &mut samples, NOW + 10_000);
        assert_eq!(s.quiet_since, NOW + 10_000);
        // Still, within the bound: shipping still (a slow peer).
        scrape(&mut ms, 200, 52);
        let s = step(&ms, &mut samples, NOW + 10_000 + SHIPPING_STALL_MS - 1);
        assert_eq!(
            (s.quiet_since, s.quiet_reset),
            (NOW + 10_000 + SHIPPING_STALL_MS - 1, QuietReset::Shipping)
        );
        // Past it: stalled; quiet since that last reading, its rounds counting from there.
        scrape(&mut ms, 200, 53);
        let s = step(&ms, &mut samples, NOW + 10_000 + SHIPPING_STALL_MS);
        assert_eq!(s.quiet_since, NOW + 10_000 + SHIPPING_STALL_MS - 1);
        assert_eq!(s.rounds_at_quiet, Some(52));
        let h = evaluate(&ms, &samples, leaving(2), Some(0)).unwrap_err();
        assert_eq!(h.moving, Moving::AntiEntropy);
        assert!(
            h.blocked.message.contains(
                "its replication window has held 4199888 bytes with nothing more sent for"
            ),
            "{}",
            h.blocked.message
        );
        // Enough rounds later, it is covered although the window never cleared, while no
        // member received a repair for the quiet bound...
        scrape(&mut ms, 200, 52 + rounds_needed(52));
        step(&ms, &mut samples, NOW + 120_000);
        assert!(evaluate(&ms, &samples, leaving(2), Some(0)).is_ok());
        // ...but not while one still does: anti-entropy still carries what the ring held.
        let eval_at = |ms: &Vec<MemberObs>, samples: &BTreeMap<u32, Sample>, at: Millis| {
            gate(ms, samples, 3, leaving(2), Some(0), at).evaluate()
        };
        ms[0].scrape.as_mut().unwrap().repairs_total += 7;
        step(&ms, &mut samples, NOW + 121_000);
        let h = eval_at(&ms, &samples, NOW + 121_000).unwrap_err();
        assert_eq!(
            (h.blocked.reason, h.moving, h.members.clone()),
            (BlockReason::LeaverBacklog, Moving::Repairs, vec![0])
        );
        assert!(
            h.blocked
                .message
                .contains("repairs are still received (demo-0; quiet for 0.0s of 60s)"),
            "{}",
            h.blocked.message
        );
        // A restart comes back on its volume, where what the ring could not ship waits.
        let restart = Some(Leaver {
            keeps_volume: true,
            ..leaving(2).unwrap()
        });
        assert!(
            gate(&ms, &samples, 3, restart, Some(0), NOW + 121_000)
                .evaluate()
                .is_ok()
        );
        let later = NOW + 121_000 + STALLED_REPAIRS_QUIET_MS;
        step(&ms, &mut samples, later - 1);
        assert!(eval_at(&ms, &samples, later - 1).is_err());
        step(&ms, &mut samples, later);
        assert!(eval_at(&ms, &samples, later).is_ok());
        // A window that did clear needs no such quiet: repairs under load never stop.
        ms[0].scrape.as_mut().unwrap().repairs_total += 7;
        ms[2].scrape.as_mut().unwrap().repl_inflight_bytes = Some(0);
        step(&ms, &mut samples, later + 1_000);
        assert!(eval_at(&ms, &samples, later + 1_000).is_ok());
        ms[2].scrape.as_mut().unwrap().repl_inflight_bytes = Some(4_199_888);
        // An unknown sent count is shipping (unknown is never safe).
        let s = ms[2].scrape.as_mut().unwrap();
        s.repl_sent = None;
        let s = step(&ms, &mut samples, NOW + 122_000);
        assert_eq!(s.quiet_reset, QuietReset::Shipping);
    }

    #[test]
    fn a_restart_a_view_change_or_an_unknown_figure_restarts_the_count() {
        let (observed, first) = seen();
        let back = next(&observed, &first, 12_000, |m| {
            m.scrape.as_mut().unwrap().ae_rounds = Some(1);
        });
        assert_eq!(back.quiet_reset, QuietReset::Restarted);
        assert_eq!(back.rounds_at_quiet, Some(1));
        // Counters past their old values, but up for less than the time since the sample.
        let younger = next(&observed, &first, 400_000, |m| {
            let s = m.scrape.as_mut().unwrap();
            s.ae_rounds = Some(60);
            s.uptime_ms = Some(300_000);
        });
        assert_eq!(younger.quiet_reset, QuietReset::Restarted);
        let view = next(&observed, &first, 12_000, |m| {
            m.view = Some(View::of_ordinals(0, [0, 1]));
        });
        assert_eq!(
            (view.quiet_since, view.quiet_reset),
            (12_000, QuietReset::ViewChanged)
        );
        for unknown in [
            |m: &mut MemberObs| m.view = None,
            |m: &mut MemberObs| m.scrape.as_mut().unwrap().uptime_ms = None,
            |m: &mut MemberObs| m.client_input = None,
        ] {
            let s = next(&observed, &first, 12_000, unknown);
            assert_eq!(
                (s.quiet_since, s.quiet_reset),
                (12_000, QuietReset::Unknown)
            );
        }
        // Rounds unknown at the reset: counted from the next reading, not from before.
        let s = next(&observed, &first, 12_000, |m| {
            m.scrape.as_mut().unwrap().ae_rounds = None
        });
        assert_eq!(
            (s.quiet_reset, s.rounds_at_quiet),
            (QuietReset::Unknown, None)
        );
        let prev = BTreeMap::from([(0, s)]);
        let later = next(&observed, &prev, 14_000, |m| {
            m.scrape.as_mut().unwrap().ae_rounds = Some(22)
        });
        assert_eq!(
            (later.quiet_since, later.rounds_at_quiet),
            (12_000, Some(22))
        );
    }
}
