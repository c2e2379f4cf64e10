//! The hand-off gate: has the cluster finished re-replicating after the last change?
//!
//! On real marekvs the under-replication gauge is computed from membership alone and reads 0
//! while data is still moving, so it is necessary but never sufficient. The gate passes only
//! when, for every member that must carry the data:
//! 1. its pod exists and is Ready, and its metrics were actually read;
//! 2. it reports 0 under-replicated and 0 join-gate-pending partitions;
//! 3. its membership view holds exactly the expected number of members, and by identity
//!    exactly the expected members: the ids the gated members give as their own (read over
//!    RESP; an unread view is unknown, and holds);
//! 4. its bootstrap and repair counters have not moved for the settle window, counted from
//!    the later of their last change and `since` (the start of the step being gated).

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{BlockReason, Blocked, MemberObs, Millis, Sample, View};
use crate::views::describe;

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
}

impl HandoffGate<'_> {
    pub fn check(&self) -> Result<(), Blocked> {
        let who = |ords: Vec<u32>| -> String {
            ords.iter()
                .map(|o| format!("{}-{o}", self.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let fail = |reason, message: String| Err(Blocked { reason, message });

        let not_ready: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| !m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating))
            .map(|(o, _)| *o)
            .collect();
        if !not_ready.is_empty() {
            return fail(
                BlockReason::NotAllReady,
                format!("not ready: {}", who(not_ready)),
            );
        }
        let unscraped: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| m.scrape.is_none())
            .map(|(o, _)| *o)
            .collect();
        if !unscraped.is_empty() {
            return fail(
                BlockReason::MetricsUnavailable,
                format!("metrics not read from: {}", who(unscraped)),
            );
        }
        let scrapes: Vec<(u32, &crate::types::Scrape)> = self
            .members
            .iter()
            .filter_map(|(o, m)| m.scrape.as_ref().map(|s| (*o, s)))
            .collect();
        let worst = scrapes
            .iter()
            .map(|(_, s)| s.underreplicated)
            .max()
            .unwrap_or(0);
        if worst > 0 {
            return fail(
                BlockReason::Underreplicated,
                format!("{worst} partitions under-replicated (max over members)"),
            );
        }
        let joining: Vec<u32> = scrapes
            .iter()
            .filter(|(_, s)| s.join_pending > 0)
            .map(|(o, _)| *o)
            .collect();
        if !joining.is_empty() {
            return fail(
                BlockReason::JoinPending,
                format!("still bootstrapping partitions: {}", who(joining)),
            );
        }
        let diverged: Vec<String> = scrapes
            .iter()
            .filter(|(_, s)| s.view_members != self.expected_view)
            .map(|(o, s)| format!("{}-{o} sees {}", self.name, s.view_members))
            .collect();
        if !diverged.is_empty() {
            return fail(
                BlockReason::ViewsNotConverged,
                format!(
                    "views not converged on {} members: {}",
                    self.expected_view,
                    diverged.join(", ")
                ),
            );
        }
        self.check_identities()?;
        let mut moving: Vec<u32> = Vec::new();
        let mut quiet_for = Millis::MAX;
        for (o, _) in &scrapes {
            let changed = self
                .samples
                .get(o)
                .map(|s| s.changed_at)
                .unwrap_or(self.now);
            let start = changed.max(self.since.unwrap_or(Millis::MIN));
            let q = self.now - start;
            if q < self.settle_ms {
                moving.push(*o);
            }
            quiet_for = quiet_for.min(q);
        }
        if !moving.is_empty() {
            return fail(
                BlockReason::RepairInProgress,
                format!(
                    "re-replication not settled: counters quiet for {:.1}s of {:.1}s on {}",
                    quiet_for.max(0) as f64 / 1000.0,
                    self.settle_ms as f64 / 1000.0,
                    who(moving)
                ),
            );
        }
        Ok(())
    }
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
/// seen) restarts its quiet time now; a member not scraped keeps its old sample.
pub fn update_samples(
    prev: &BTreeMap<u32, Sample>,
    observed: &BTreeMap<u32, MemberObs>,
    now: Millis,
) -> BTreeMap<u32, Sample> {
    let mut next = BTreeMap::new();
    for (o, m) in observed {
        let prev_s = prev.get(o);
        match (&m.scrape, prev_s) {
            (Some(s), Some(p))
                if p.bootstraps_total == s.bootstraps_total
                    && p.repairs_total == s.repairs_total =>
            {
                next.insert(*o, *p);
            }
            (Some(s), _) => {
                next.insert(
                    *o,
                    Sample {
                        bootstraps_total: s.bootstraps_total,
                        repairs_total: s.repairs_total,
                        changed_at: now,
                        bootstraps_changed_at: now,
                        repairs_changed_at: now,
                        repairs_prev: None,
                        ring_ops: s.ring_ops,
                        ring_busy_at: None,
                    },
                );
            }
            (None, Some(p)) => {
                next.insert(*o, *p);
            }
            (None, None) => {}
        }
    }
    next
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
        HandoffGate {
            members: members
                .iter()
                .enumerate()
                .map(|(i, m)| (i as u32, m))
                .collect(),
            samples,
            expected_view: expected,
            since,
            now,
            settle_ms: 5_000,
            name: "demo",
        }
        .check()
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
}
