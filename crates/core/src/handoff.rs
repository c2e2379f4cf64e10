//! The hand-off gate (v2): has the data of the step being gated reached every owner?
//!
//! On real marekvs the under-replication gauge is computed from membership alone and reads 0
//! while data is still moving, so it is necessary but never sufficient. The gate passes only
//! when, for every member that must carry the data:
//! - G1 its pod exists and is Ready, and its metrics were actually read;
//! - G2 it reports 0 under-replicated and 0 join-gate-pending partitions;
//! - G3 its membership view holds exactly the expected number of members, and by identity
//!   exactly the expected members: the ids the gated members give as their own (read over
//!   RESP; an unread view is unknown, and holds);
//! - G4 its bootstrap counter (whole-partition copies) has not moved for the settle window,
//!   counted from the later of its last move and `since` (the start of the step being gated);
//! - G5 the leaver, when there is one: its client traffic is cut (its pod is labelled off) and
//!   its replication ring (`marekvs_ring_ops`) is known, 0 now, and has been neither above 0
//!   nor unknown for the settle window: every write that originated on it is on every owner;
//! - G6 its repair counter has not moved for the settle window, unless the repairs are
//!   explained by ring backlog: some gated member's ring read a known figure above 0 within
//!   the window. Those repairs copy writes past a ring gap to their owners (background repair
//!   under load); they say nothing about the step being gated and hold nothing. Unknown never
//!   relaxes: a ring not read explains nothing.
//!
//! docs/scale-down.md argues each condition.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{
    BackgroundRepair, BlockReason, Blocked, MemberObs, Millis, Moving, Sample, Scrape, View,
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
    /// Summed repairs per second (`Repairs`), or the leaver's ring backlog in ops
    /// (`ReplicationRing`).
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
        self.check_bootstraps()?;
        self.check_repairs()
    }

    fn who(&self, ords: &[u32]) -> String {
        ords.iter()
            .map(|o| format!("{}-{o}", self.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// G1: every gated pod Ready and scraped.
    fn check_pods(&self) -> Result<(), GateHold> {
        let not_ready: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| !m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating))
            .map(|(o, _)| *o)
            .collect();
        if !not_ready.is_empty() {
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

    /// G2 and G3 by count: gauges at 0, views of the expected size.
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
        let joining: Vec<u32> = scrapes
            .iter()
            .filter(|(_, s)| s.join_pending > 0)
            .map(|(o, _)| *o)
            .collect();
        if !joining.is_empty() {
            let message = format!("still bootstrapping partitions: {}", self.who(&joining));
            let reason = BlockReason::JoinPending;
            return hold(reason, message, Moving::Bootstraps, joining, None);
        }
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

    /// G5: the leaver takes no client writes and every write that originated on it is on
    /// every owner (its ring known, empty, and quiet for the settle window).
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
        let ring = m.scrape.as_ref().and_then(|s| s.ring_ops);
        let Some(ops) = ring else {
            let message = format!(
                "the replication ring of {name} is unknown (marekvs_ring_ops not read): its writes may not be on every owner"
            );
            return backlog(message, Moving::ReplicationRing, None);
        };
        if !l.traffic_cut {
            return Ok(());
        }
        if !m.pod.as_ref().is_some_and(|p| p.client_traffic_off) {
            let message = format!(
                "{name} still takes client writes: waiting for its pod to be labelled marekvs.io/client-traffic=off"
            );
            return backlog(message, Moving::ClientTraffic, None);
        }
        let busy_at = self.samples.get(&l.ordinal).map(|s| s.ring_busy_at);
        let quiet = busy_at.map_or(0, |at| self.quiet_for(at));
        if ops > 0 || quiet < self.settle_ms {
            let last = busy_at.flatten().map_or("never".to_string(), |at| {
                format!("{:.1}s ago", secs(self.now - at))
            });
            let message = format!(
                "{name} still holds {ops} writes not yet on every owner (marekvs_ring_ops); its ring was last busy {last}, quiet for {:.1}s of {:.1}s",
                secs(quiet),
                secs(self.settle_ms)
            );
            return backlog(message, Moving::ReplicationRing, Some(ops as f64));
        }
        Ok(())
    }

    /// G6: repairs quiet for the settle window, or explained by ring backlog (background).
    fn check_repairs(&self) -> Result<(), GateHold> {
        let quiet = self.quiet(|s| s.repairs_changed_at);
        let moving: Vec<u32> = quiet
            .iter()
            .filter(|(_, q)| *q < self.settle_ms)
            .map(|(o, _)| *o)
            .collect();
        let gated: Vec<u32> = self.members.iter().map(|(o, _)| *o).collect();
        if moving.is_empty() || rings_explain(&gated, self.samples, self.now, self.settle_ms) {
            return Ok(());
        }
        let least = quiet.iter().map(|(_, q)| *q).min().unwrap_or(0);
        let rate = repair_rate(&moving, self.samples);
        let message = format!(
            "re-replication not settled: repairs quiet for {:.1}s of {:.1}s on {} (no replication ring busy to explain them)",
            secs(least),
            secs(self.settle_ms),
            self.who(&moving)
        );
        hold(
            BlockReason::RepairInProgress,
            message,
            Moving::Repairs,
            moving,
            Some(rate),
        )
    }
}

/// Some member's ring read a known figure above 0 within the settle window. A ring read
/// unknown, or a member not sampled, explains nothing.
fn rings_explain(
    members: &[u32],
    samples: &BTreeMap<u32, Sample>,
    now: Millis,
    settle_ms: Millis,
) -> bool {
    members.iter().any(|o| {
        samples.get(o).is_some_and(|s| match s.ring_ops {
            Some(n) if n > 0 => true,
            // Known now, and busy within the window. `ring_busy_at` also marks unknown reads,
            // so a ring read unknown and then 0 within the window counts here: a node whose
            // gauge is missing reads unknown on every scrape and never gets this far.
            Some(_) => s.ring_busy_at.is_some_and(|at| now - at < settle_ms),
            None => false,
        })
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

/// Repairs that move on `members` (within the settle window) while rings explain them: they
/// hold nothing and are reported as background. `None`: no repair moves, or nothing explains
/// them (they hold the gate instead).
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
    if moving.is_empty() || !rings_explain(members, samples, now, settle_ms) {
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

/// Update the counter samples with this round's scrapes: a counter that moved (or was never
/// seen) restarts its own quiet time now (a repair move keeps the sample before it, for the
/// rate); a ring read above 0 or unknown marks it busy now; a member not scraped keeps its old
/// sample.
pub fn update_samples(
    prev: &BTreeMap<u32, Sample>,
    observed: &BTreeMap<u32, MemberObs>,
    now: Millis,
) -> BTreeMap<u32, Sample> {
    let mut next = BTreeMap::new();
    for (o, m) in observed {
        let sample = match (&m.scrape, prev.get(o)) {
            (Some(s), Some(p)) => Some(next_sample(p, s, now)),
            (Some(s), None) => Some(Sample {
                ring_ops: s.ring_ops,
                ring_busy_at: (s.ring_ops != Some(0)).then_some(now),
                ..Sample::new(s.bootstraps_total, s.repairs_total, now)
            }),
            (None, p) => p.copied(),
        };
        if let Some(sample) = sample {
            next.insert(*o, sample);
        }
    }
    next
}

fn next_sample(p: &Sample, s: &Scrape, now: Millis) -> Sample {
    let bootstraps_moved = p.bootstraps_total != s.bootstraps_total;
    let repairs_moved = p.repairs_total != s.repairs_total;
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
        ring_busy_at: if s.ring_ops == Some(0) {
            p.ring_busy_at
        } else {
            Some(now)
        },
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
                replace_volume: false,
                restart: false,
                client_traffic_off: false,
            }),
            pvc: None,
            scrape: Some(Scrape {
                view_members: view,
                ..Scrape::default()
            }),
            look_alike: false,
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

        let mut joining = ok.clone();
        joining[0].scrape.as_mut().unwrap().join_pending = 4;
        assert_eq!(
            reason(check(&joining, &samples, 3, None, 10_000)),
            Some(BlockReason::JoinPending)
        );

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

    // ---- gate v2: the leaver, bootstraps, repairs explained by ring backlog ----

    const NOW: Millis = 100_000;

    /// Members 0..n converged, their counters quiet since 0; member `leaver` drained, its
    /// client traffic off.
    fn quiet_cluster(n: u32, leaver: u32) -> (Vec<MemberObs>, BTreeMap<u32, Sample>) {
        let mut ms = numbered((0..n).map(|_| member(n as u64)).collect());
        let p = ms[leaver as usize].pod.as_mut().unwrap();
        p.drained = true;
        p.client_traffic_off = true;
        (ms, quiet_since(0, n))
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
        })
    }

    /// Member `o`'s ring reads `ops` now, and its sample says so (busy at `busy_at`).
    fn ring(
        ms: &mut [MemberObs],
        samples: &mut BTreeMap<u32, Sample>,
        o: u32,
        ops: Option<u64>,
        busy_at: Option<Millis>,
    ) {
        ms[o as usize].scrape.as_mut().unwrap().ring_ops = ops;
        let s = samples.get_mut(&o).unwrap();
        s.ring_ops = ops;
        s.ring_busy_at = busy_at;
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
    fn a_quiet_leaver_with_its_traffic_cut_passes() {
        let (ms, samples) = quiet_cluster(4, 3);
        assert_eq!(evaluate(&ms, &samples, leaving(3), Some(0)), Ok(()));
    }

    #[test]
    fn the_leaver_must_take_no_client_writes() {
        let (mut ms, samples) = quiet_cluster(4, 3);
        ms[3].pod.as_mut().unwrap().client_traffic_off = false;
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(3), None)),
            Some((BlockReason::LeaverBacklog, Moving::ClientTraffic, vec![3]))
        );
        // Before its traffic was ever asked to be cut (the start check), it need not be.
        let before = Some(Leaver {
            ordinal: 3,
            traffic_cut: false,
        });
        assert_eq!(evaluate(&ms, &samples, before, None), Ok(()));
    }

    #[test]
    fn the_leavers_ring_must_be_known_empty_and_quiet_for_the_window() {
        let (mut ms, mut samples) = quiet_cluster(4, 3);
        // Busy: held, naming the member and its backlog.
        ring(&mut ms, &mut samples, 3, Some(1_234), Some(NOW));
        let h = evaluate(&ms, &samples, leaving(3), None).unwrap_err();
        assert_eq!(
            (
                h.blocked.reason,
                h.moving,
                h.members.clone(),
                h.rate_per_sec
            ),
            (
                BlockReason::LeaverBacklog,
                Moving::ReplicationRing,
                vec![3],
                Some(1_234.0)
            )
        );
        assert!(
            h.blocked.message.contains("demo-3 still holds 1234 writes")
                && h.blocked.message.contains("last busy 0.0s ago"),
            "{}",
            h.blocked.message
        );
        // Empty now, but busy 2 s ago: not yet quiet for the 5 s window.
        ring(&mut ms, &mut samples, 3, Some(0), Some(NOW - 2_000));
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(3), None)),
            Some((BlockReason::LeaverBacklog, Moving::ReplicationRing, vec![3]))
        );
        // Quiet for the window, but the step began 1 s ago: the window counts from the step.
        ring(&mut ms, &mut samples, 3, Some(0), Some(NOW - 6_000));
        assert_eq!(evaluate(&ms, &samples, leaving(3), Some(0)), Ok(()));
        assert!(evaluate(&ms, &samples, leaving(3), Some(NOW - 1_000)).is_err());
        // Unknown: held, before its traffic is cut too (the start check).
        ring(&mut ms, &mut samples, 3, None, Some(NOW));
        let before = Some(Leaver {
            ordinal: 3,
            traffic_cut: false,
        });
        for l in [leaving(3), before] {
            let h = evaluate(&ms, &samples, l, Some(0)).unwrap_err();
            assert_eq!(
                (h.blocked.reason, h.moving, h.rate_per_sec),
                (BlockReason::LeaverBacklog, Moving::ReplicationRing, None)
            );
            assert!(
                h.blocked.message.contains("unknown"),
                "{}",
                h.blocked.message
            );
        }
        // Busy before its traffic is cut: it still takes client writes, so not held yet.
        ring(&mut ms, &mut samples, 3, Some(50), Some(NOW));
        assert_eq!(evaluate(&ms, &samples, before, Some(0)), Ok(()));
    }

    #[test]
    fn moving_bootstraps_hold_whatever_the_rings_say() {
        let (mut ms, mut samples) = quiet_cluster(4, 3);
        ring(&mut ms, &mut samples, 0, Some(900), Some(NOW));
        samples.get_mut(&1).unwrap().bootstraps_changed_at = NOW - 1_000;
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(3), None)),
            Some((BlockReason::RepairInProgress, Moving::Bootstraps, vec![1]))
        );
    }

    #[test]
    fn repairs_explained_by_a_busy_ring_are_background_and_hold_nothing() {
        let (mut ms, mut samples) = quiet_cluster(5, 4);
        for o in 0..4 {
            repairing(&mut samples, o, NOW - 500, 40);
        }
        // No ring busy: unexplained, held, with the summed rate.
        let h = evaluate(&ms, &samples, leaving(4), Some(0)).unwrap_err();
        assert_eq!(
            (
                h.blocked.reason,
                h.moving,
                h.members.clone(),
                h.rate_per_sec
            ),
            (
                BlockReason::RepairInProgress,
                Moving::Repairs,
                vec![0, 1, 2, 3],
                Some(160.0)
            )
        );
        // The old rule, "every counter still", is what v2 falls back to with every ring
        // empty: it holds here, under background repair, for as long as the load lasts.
        assert!(samples.values().any(|s| NOW - s.changed_at < 5_000));
        assert_eq!(
            background_repair(&[0, 1, 2, 3, 4], &samples, NOW, 5_000),
            None
        );
        // Member 1's ring holds gapped writes now: the repairs are explained, the gate
        // passes, and they are reported as background.
        ring(&mut ms, &mut samples, 1, Some(300), Some(NOW));
        assert_eq!(evaluate(&ms, &samples, leaving(4), Some(0)), Ok(()));
        let bg = background_repair(&[0, 1, 2, 3, 4], &samples, NOW, 5_000).unwrap();
        assert_eq!(bg.members, vec![0, 1, 2, 3]);
        assert_eq!(bg.rate_per_sec, 160.0);
        assert_eq!(bg.since, NOW - 1_500);
        // Empty now but busy 1 s ago (within the window): still explained.
        ring(&mut ms, &mut samples, 1, Some(0), Some(NOW - 1_000));
        assert_eq!(evaluate(&ms, &samples, leaving(4), Some(0)), Ok(()));
        // Busy longer ago than the window: nothing explains them any more.
        ring(&mut ms, &mut samples, 1, Some(0), Some(NOW - 6_000));
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(4), Some(0))).map(|m| m.1),
            Some(Moving::Repairs)
        );
    }

    #[test]
    fn an_unknown_ring_never_relaxes_the_gate() {
        let (mut ms, mut samples) = quiet_cluster(4, 3);
        repairing(&mut samples, 0, NOW - 500, 10);
        // Member 1's ring is unknown (and was marked busy for it): it explains nothing.
        ring(&mut ms, &mut samples, 1, None, Some(NOW));
        assert_eq!(
            moving(evaluate(&ms, &samples, leaving(3), Some(0))).map(|m| m.1),
            Some(Moving::Repairs)
        );
        assert_eq!(background_repair(&[0, 1, 2, 3], &samples, NOW, 5_000), None);
        // A member never sampled is unknown too: its counters are not quiet.
        samples.remove(&2);
        assert_eq!(
            moving(evaluate(&ms, &samples, None, Some(0))).map(|m| m.1),
            Some(Moving::Bootstraps)
        );
    }

    #[test]
    fn samples_keep_one_clock_per_counter_a_repair_rate_and_when_the_ring_was_busy() {
        let mut observed = BTreeMap::new();
        observed.insert(0, member(3));
        let set = |obs: &mut BTreeMap<u32, MemberObs>, b: u64, r: u64, ring: Option<u64>| {
            let s = obs.get_mut(&0).unwrap().scrape.as_mut().unwrap();
            s.bootstraps_total = b;
            s.repairs_total = r;
            s.ring_ops = ring;
        };
        // First seen with a busy ring: busy now.
        set(&mut observed, 0, 0, Some(7));
        let s1 = update_samples(&BTreeMap::new(), &observed, 1_000);
        assert_eq!(s1[&0].ring_busy_at, Some(1_000));
        // Repairs move: only their clock restarts, with the sample before kept for the rate.
        set(&mut observed, 0, 40, Some(0));
        let s2 = update_samples(&s1, &observed, 3_000);
        let x = s2[&0];
        assert_eq!(
            (x.bootstraps_changed_at, x.repairs_changed_at, x.changed_at),
            (1_000, 3_000, 3_000)
        );
        assert_eq!(x.repairs_prev, Some((0, 1_000)));
        assert_eq!(repair_rate(&[0], &s2), 20.0);
        // An empty ring keeps when it was last busy; an unknown one is busy now.
        assert_eq!(x.ring_busy_at, Some(1_000));
        set(&mut observed, 0, 40, None);
        let s3 = update_samples(&s2, &observed, 4_000);
        assert_eq!(s3[&0].ring_busy_at, Some(4_000));
        assert_eq!(s3[&0].repairs_prev, Some((0, 1_000)), "kept while still");
        // Bootstraps move alone.
        set(&mut observed, 2, 40, Some(0));
        let s4 = update_samples(&s3, &observed, 5_000);
        assert_eq!(
            (s4[&0].bootstraps_changed_at, s4[&0].repairs_changed_at),
            (5_000, 3_000)
        );
        // The node restarted, its counter back to 3: it moved, but gives no rate.
        set(&mut observed, 2, 3, Some(0));
        let s5 = update_samples(&s4, &observed, 6_000);
        assert_eq!(
            (s5[&0].repairs_changed_at, s5[&0].repairs_prev),
            (6_000, None)
        );
    }
}
