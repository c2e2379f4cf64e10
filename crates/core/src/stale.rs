//! Stale volumes: a volume whose member has been away from the cluster longer than the
//! tombstone grace (`gc_grace` on the nodes, `spec.storage.staleVolumeGraceSeconds` here) may
//! hold keys deleted meanwhile, their tombstones purged everywhere else; mounted as it is, it
//! would bring them back. Such a volume is never mounted again: its member gets a fresh one.
//!
//! The absence is recorded on the volume itself (the shell keeps it in a PVC annotation, so it
//! survives operator restarts and the re-creation of the cluster object): stamped when the
//! volume's member stops serving, cleared when it serves again. Both happen on transitions
//! only, so a cluster at rest writes nothing.
//!
//! A stale volume is replaced only if the others hold what it holds. Its member left without
//! a hand-off (a crash, a fence), so what it held is elsewhere only if its co-owners kept their
//! copies. A member on a volume that first served after it left may not have them: a fresh
//! volume copies each partition from the first other owner it sees and takes what that one
//! has, even nothing (`marekvs-repl/src/lib.rs`), and the leaver was not there to give it. No
//! figure a node exposes tells which. So each volume records, once, when a member first
//! served from it, and a stale volume whose member left before some other member's volume
//! first served is kept for the user to decide, never replaced by the operator.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::*;

/// The PVC annotation holding the start of an absence (RFC 3339; the shell writes and reads it).
pub const ANNOTATION_ABSENT_SINCE: &str = "marekvs.io/absent-since";
/// The PVC annotation recording since when a member has served from the volume (RFC 3339).
pub const ANNOTATION_SERVED_SINCE: &str = "marekvs.io/served-since";

/// Whether the member of `o` is part of the cluster's gossip right now, or has never been
/// away: a member whose pod exists, is not going away and is ready, or a member still joining
/// (a joining node already takes writes and deletes; one whose pod is not there yet, as the
/// caches may show a new member's PVC before its pod, never held data it could bring back, and
/// stamping it would cost two writes per new member).
fn present(
    o: u32,
    members: &BTreeSet<u32>,
    phases: &BTreeMap<u32, MemberPhase>,
    m: &MemberObs,
) -> bool {
    members.contains(&o)
        && (phases.get(&o) == Some(&MemberPhase::Joining)
            || m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating))
}

/// Whether the member of `o` serves: ready and not going away.
fn serving(o: u32, members: &BTreeSet<u32>, m: &MemberObs) -> bool {
    members.contains(&o) && m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating)
}

/// A change to a volume's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AbsenceChange {
    /// Its member stopped being part of the cluster (removed, pod gone, going away or not
    /// ready): record `now` as the start of its absence.
    Stamp(u32),
    /// Its member serves again: the record is dropped.
    Clear(u32),
    /// A member serves from it for the first time: record `now` as when (kept for good).
    FirstServed(u32),
}

impl AbsenceChange {
    pub fn ordinal(self) -> u32 {
        match self {
            AbsenceChange::Stamp(o) | AbsenceChange::Clear(o) | AbsenceChange::FirstServed(o) => o,
        }
    }
}

/// The absence records to write this pass, given the membership and phases just decided.
/// A volume already stamped keeps its first stamp while its member stays away; a joining
/// member neither stamps nor clears (its volume's age is what it was when it came back). A
/// volume a member serves from is marked served, once.
pub fn absence_changes(
    members: &BTreeSet<u32>,
    phases: &BTreeMap<u32, MemberPhase>,
    observed: &BTreeMap<u32, MemberObs>,
) -> Vec<AbsenceChange> {
    observed
        .iter()
        .flat_map(|(o, m)| {
            let Some(v) = m.pvc.as_ref().filter(|v| !v.terminating) else {
                return Vec::new();
            };
            let serves = serving(*o, members, m);
            let mut changes = Vec::new();
            match v.absent_since {
                None if !present(*o, members, phases, m) => changes.push(AbsenceChange::Stamp(*o)),
                Some(_) if serves => changes.push(AbsenceChange::Clear(*o)),
                _ => {}
            }
            if serves && v.served_since.is_none() {
                changes.push(AbsenceChange::FirstServed(*o));
            }
            changes
        })
        .collect()
}

/// The members other than `o` whose volume first served after `o`'s absence began, or has not
/// served yet (or is missing): they may lack what only `o`'s volume holds.
pub fn rebuilt_since_absence(
    o: u32,
    members: &BTreeSet<u32>,
    observed: &BTreeMap<u32, MemberObs>,
) -> Vec<u32> {
    let Some(since) = observed
        .get(&o)
        .and_then(|m| m.pvc.as_ref())
        .and_then(|v| v.absent_since)
    else {
        return Vec::new();
    };
    members
        .iter()
        .copied()
        .filter(|x| *x != o)
        .filter(|x| {
            observed
                .get(x)
                .and_then(|m| m.pvc.as_ref())
                .and_then(|v| v.served_since)
                .is_none_or(|served| served > since)
        })
        .collect()
}

/// Whether the volume has been away longer than the grace: it is never mounted again.
pub fn is_stale(v: &PvcObs, grace_ms: Millis, now: Millis) -> bool {
    v.absent_since.is_some_and(|since| now - since > grace_ms)
}

/// How long the volume has been away, in words ("2h 5m", "40s").
pub fn absence_in_words(v: &PvcObs, now: Millis) -> String {
    let secs = v
        .absent_since
        .map_or(0, |since| (now - since).max(0) / 1000);
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// A volume kept for an ordinal that is not a member (a removed member's, with
/// `reclaimPVCs: false`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptVolume {
    pub ordinal: u32,
    /// When its member left (`None`: not stamped yet, the pass stamps it now).
    pub absent_since: Option<Millis>,
    /// A scale-up onto this ordinal would mount it; false once it is stale (it would be
    /// deleted and replaced by a fresh one).
    pub reusable: bool,
}

/// The volumes of non-members, in ordinal order, and whether each is still reusable.
pub fn kept_volumes(
    members: &BTreeSet<u32>,
    observed: &BTreeMap<u32, MemberObs>,
    grace_ms: Millis,
    now: Millis,
) -> Vec<KeptVolume> {
    observed
        .iter()
        .filter(|(o, _)| !members.contains(o))
        .filter_map(|(o, m)| {
            let v = m.pvc.as_ref().filter(|v| !v.terminating)?;
            Some(KeptVolume {
                ordinal: *o,
                absent_since: v.absent_since,
                reusable: !is_stale(v, grace_ms, now),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_700_000_000_000;
    const HOUR: Millis = 3_600_000;

    fn obs(pod: Option<(bool, bool)>, absent_since: Option<Millis>) -> MemberObs {
        MemberObs {
            pod: pod.map(|(ready, terminating)| PodObs {
                ready,
                terminating,
                ..PodObs::default()
            }),
            pvc: Some(PvcObs {
                uid: "v".into(),
                absent_since,
                served_since: Some(NOW - 2 * HOUR),
                ..PvcObs::default()
            }),
            scrape: None,
            view: None,
            look_alike: false,
            password: Default::default(),
            client_input: Some(0),
            new_pod: PodAdmission::Admitted,
        }
    }

    #[test]
    fn a_volume_is_stamped_when_its_member_stops_serving_and_cleared_when_it_serves_again() {
        use AbsenceChange::*;
        let mut members: BTreeSet<u32> = (0..8).chain([11]).collect();
        let mut phases: BTreeMap<u32, MemberPhase> =
            members.iter().map(|o| (*o, MemberPhase::Active)).collect();
        phases.insert(4, MemberPhase::Joining);
        phases.insert(7, MemberPhase::Joining);
        phases.insert(11, MemberPhase::Joining);
        let mut observed: BTreeMap<u32, MemberObs> = [
            (0, obs(Some((true, false)), None)),              // serving
            (1, obs(None, None)),                             // pod gone
            (2, obs(Some((false, false)), None)),             // not ready
            (3, obs(Some((true, true)), None)),               // going away
            (4, obs(Some((false, false)), None)),             // joining on a fresh volume
            (5, obs(None, Some(NOW - HOUR))),                 // still away: keeps its first stamp
            (6, obs(Some((true, false)), Some(NOW - HOUR))),  // back and serving
            (7, obs(Some((false, false)), Some(NOW - HOUR))), // back, still joining
            (8, obs(None, None)),                             // not a member (removed, volume kept)
            (9, obs(None, Some(NOW))),                        // not a member, stamped
        ]
        .into();
        let mut terminating = obs(None, None);
        terminating.pvc.as_mut().unwrap().terminating = true;
        observed.insert(10, terminating);
        // A new member whose PVC the caches show before its pod: nothing to record.
        let mut new = obs(None, None);
        new.pvc.as_mut().unwrap().served_since = None;
        observed.insert(11, new.clone());
        // A member serving from a volume for the first time: recorded once.
        members.insert(12);
        new.pod = Some(PodObs {
            ready: true,
            ..PodObs::default()
        });
        observed.insert(12, new);
        assert_eq!(
            absence_changes(&members, &phases, &observed),
            [
                Stamp(1),
                Stamp(2),
                Stamp(3),
                Clear(6),
                Stamp(8),
                FirstServed(12)
            ]
        );
        // Once written, the same world asks for nothing more: a cluster at rest writes nothing.
        for (o, m) in observed.iter_mut() {
            let v = m.pvc.as_mut().unwrap();
            match *o {
                1 | 2 | 3 | 8 => v.absent_since = Some(NOW),
                6 => v.absent_since = None,
                12 => v.served_since = Some(NOW),
                _ => {}
            }
        }
        assert_eq!(absence_changes(&members, &phases, &observed), []);
    }

    #[test]
    fn members_whose_volume_first_served_after_an_absence_began_are_named() {
        let members: BTreeSet<u32> = (0..5).collect();
        let served = |since: Option<Millis>| {
            let mut m = obs(Some((true, false)), None);
            m.pvc.as_mut().unwrap().served_since = since;
            m
        };
        let observed: BTreeMap<u32, MemberObs> = [
            (0, obs(None, Some(NOW - HOUR))),  // away since an hour ago
            (1, served(Some(NOW - 2 * HOUR))), // served before: holds what it held
            (2, served(Some(NOW - HOUR + 1))), // a fresh volume since
            (3, served(None)),                 // still joining on a fresh volume
        ]
        .into();
        // 4 has no volume at all (being re-created).
        assert_eq!(rebuilt_since_absence(0, &members, &observed), [2, 3, 4]);
        // Served at the very moment the absence began: not after it.
        let mut at = observed.clone();
        at.insert(2, served(Some(NOW - HOUR)));
        at.insert(3, served(Some(NOW - 3 * HOUR)));
        at.insert(4, served(Some(NOW - 3 * HOUR)));
        assert_eq!(rebuilt_since_absence(0, &members, &at), [] as [u32; 0]);
        // No absence recorded: nothing to compare with.
        assert_eq!(
            rebuilt_since_absence(1, &members, &observed),
            [] as [u32; 0]
        );
    }

    #[test]
    fn a_volume_is_stale_only_past_the_grace() {
        let v = |since| PvcObs {
            absent_since: since,
            ..PvcObs::default()
        };
        assert!(!is_stale(&v(None), HOUR, NOW));
        assert!(!is_stale(&v(Some(NOW - HOUR)), HOUR, NOW), "at the grace");
        assert!(is_stale(&v(Some(NOW - HOUR - 1)), HOUR, NOW));
        assert!(!is_stale(&v(Some(NOW + 5_000)), HOUR, NOW), "a clock ahead");
        assert_eq!(absence_in_words(&v(Some(NOW - 40_000)), NOW), "40s");
        assert_eq!(absence_in_words(&v(Some(NOW - 125_000)), NOW), "2m 5s");
        assert_eq!(
            absence_in_words(&v(Some(NOW - 2 * HOUR - 300_000)), NOW),
            "2h 5m"
        );
        assert_eq!(absence_in_words(&v(Some(NOW + 5_000)), NOW), "0s");
    }

    #[test]
    fn kept_volumes_are_those_of_non_members_with_whether_each_is_reusable() {
        let members: BTreeSet<u32> = [0].into();
        let observed: BTreeMap<u32, MemberObs> = [
            (0, obs(None, Some(NOW - 2 * HOUR))),
            (1, obs(None, None)),
            (2, obs(None, Some(NOW - HOUR / 2))),
            (3, obs(None, Some(NOW - 2 * HOUR))),
        ]
        .into();
        let kept = kept_volumes(&members, &observed, HOUR, NOW);
        let summary: Vec<(u32, Option<Millis>, bool)> = kept
            .iter()
            .map(|k| (k.ordinal, k.absent_since, k.reusable))
            .collect();
        assert_eq!(
            summary,
            [
                (1, None, true),
                (2, Some(NOW - HOUR / 2), true),
                (3, Some(NOW - 2 * HOUR), false)
            ]
        );
    }
}
