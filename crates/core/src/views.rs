//! Membership by identity: each member's view read over RESP (`CLUSTER MYID`, `CLUSTER
//! NODES`), not just its count. Two partitioned halves, or a view that swapped a member for a
//! stranger, can show the expected count; they cannot show the expected ids.
//!
//! Views **disagree** when two ready members' views hold different sets of ids. Views lag for
//! seconds after any change (a member joins, crashes or leaves), so a disagreement alone only
//! holds the steps the hand-off gate guards; one that lasts [`SUSPECT_PARTITION_AFTER_MS`] is a
//! **suspected partition**, which holds every disruptive step until the views agree again.
//! Its start is remembered (`Memory::views_split_since`, in status), so a restarted operator
//! does not restart the clock. Views that cannot be read are unknown: they neither start nor
//! clear the clock.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::*;

/// How long views may disagree before it is a suspected partition. Measured on real nodes,
/// views disagree for 3–6 s after a crash or a leave; 30 s is well clear of that.
pub const SUSPECT_PARTITION_AFTER_MS: Millis = 30_000;

/// How the ready members' views compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// Every ready member's view is known and they hold the same ids.
    Agree,
    /// Two known views differ: who sees whom, in words.
    Disagree(String),
    /// Some ready member's view could not be read, and the known ones agree.
    Unknown(Vec<u32>),
}

pub use crate::types::SuspectedPartition;

fn ready(m: &MemberObs) -> bool {
    m.pod.as_ref().is_some_and(|p| p.ready && !p.terminating)
}

/// Names for the ids the members report as their own; other ids are strangers.
pub fn names_by_id(spec: &ClusterSpec, views: &BTreeMap<u32, &View>) -> BTreeMap<String, String> {
    views
        .iter()
        .map(|(o, v)| (v.id.clone(), spec.member_name(*o)))
        .collect()
}

/// How many strangers a description names; the rest are counted. A view is a member's
/// answer, and its description goes into status and Events.
pub const STRANGERS_NAMED: usize = 3;

/// A view's members in words: known members by name, strangers by short id and address (the
/// first [`STRANGERS_NAMED`], then how many more).
pub fn describe(view: &View, names: &BTreeMap<String, String>) -> String {
    let mut known: Vec<String> = Vec::new();
    let mut strangers: Vec<String> = Vec::new();
    let mut more = 0usize;
    for (id, addr) in &view.peers {
        match names.get(id) {
            Some(n) => known.push(n.clone()),
            None if strangers.len() < STRANGERS_NAMED => {
                let addr: String = addr.chars().take(64).collect();
                strangers.push(format!(
                    "stranger {} at {}",
                    id.chars().take(8).collect::<String>(),
                    if addr.is_empty() { "?" } else { &addr }
                ))
            }
            None => more += 1,
        }
    }
    if more > 0 {
        strangers.push(format!("{more} more strangers"));
    }
    // Members in ordinal order (`demo-2` before `demo-10`), not in id order.
    known.sort_by_key(|n| {
        let ord = n.rsplit('-').next().and_then(|o| o.parse::<u32>().ok());
        (ord, n.clone())
    });
    known.extend(strangers);
    if known.is_empty() {
        "nobody".into()
    } else {
        known.join(", ")
    }
}

/// How the ready recorded members' views compare.
pub fn agreement(
    spec: &ClusterSpec,
    members: &BTreeSet<u32>,
    observed: &BTreeMap<u32, MemberObs>,
) -> Agreement {
    let mut known: BTreeMap<u32, &View> = BTreeMap::new();
    let mut unknown = Vec::new();
    for o in members {
        match observed.get(o) {
            Some(m) if ready(m) => match &m.view {
                Some(v) => {
                    known.insert(*o, v);
                }
                None => unknown.push(*o),
            },
            _ => {}
        }
    }
    // Members grouped by the set of ids they see.
    let mut groups: BTreeMap<BTreeSet<&str>, Vec<u32>> = BTreeMap::new();
    for (o, v) in &known {
        groups.entry(v.ids()).or_default().push(*o);
    }
    if groups.len() > 1 {
        let names = names_by_id(spec, &known);
        // Groups in the order of their first member.
        let mut groups: Vec<&Vec<u32>> = groups.values().collect();
        groups.sort();
        let said: Vec<String> = groups
            .iter()
            .map(|os| {
                let who: Vec<String> = os.iter().map(|o| spec.member_name(*o)).collect();
                let verb = if os.len() == 1 { "sees" } else { "see" };
                format!(
                    "{} {verb} {}",
                    who.join(", "),
                    describe(known[&os[0]], &names)
                )
            })
            .collect();
        return Agreement::Disagree(said.join("; "));
    }
    if unknown.is_empty() {
        Agreement::Agree
    } else {
        Agreement::Unknown(unknown)
    }
}

/// When views started to disagree, carried over from the memory: set at the first
/// disagreement, cleared once they agree, kept while they are unknown.
pub fn split_since(prev: Option<Millis>, agreement: &Agreement, now: Millis) -> Option<Millis> {
    match agreement {
        Agreement::Agree => None,
        Agreement::Disagree(_) => Some(prev.unwrap_or(now).min(now)),
        Agreement::Unknown(_) => prev,
    }
}

/// A suspected partition, if views have disagreed longer than the bound.
pub fn suspected_partition(
    spec: &ClusterSpec,
    agreement: &Agreement,
    since: Option<Millis>,
    now: Millis,
) -> Option<SuspectedPartition> {
    let since = since?;
    if now - since < SUSPECT_PARTITION_AFTER_MS {
        return None;
    }
    let what = match agreement {
        Agreement::Agree => return None,
        Agreement::Disagree(who) => who.clone(),
        Agreement::Unknown(os) => {
            let who: Vec<String> = os.iter().map(|o| spec.member_name(*o)).collect();
            format!("views of {} unknown", who.join(", "))
        }
    };
    Some(SuspectedPartition {
        since,
        // Nothing in it moves while the views stay as they are: the status is not rewritten
        // every pass (the start is in `status.viewsDisagreeSince`).
        message: format!(
            "members' views have disagreed by identity for {}s or more (suspected partition): {what}; holding every removal, restart and volume replacement",
            SUSPECT_PARTITION_AFTER_MS / 1000
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ClusterSpec {
        ClusterSpec {
            name: "demo".into(),
            nodes: 4,
            replication_factor: 2,
            remove_first: BTreeSet::new(),
            reclaim_pvcs: false,
            settle_ms: 0,
            handoff_timeout_ms: 60_000,
            paused: false,
            stale_volume_grace_ms: 3_600_000,
            hibernation: false,
            fresh_volumes_on_wake: false,
            scale_up_batch: crate::SCALE_UP_BATCH,
            whole_cluster_upgrade: false,
            image_release: None,
            allow_downgrade: false,
            fenced: Default::default(),
        }
    }

    fn up(me: u32, sees: &[u32]) -> MemberObs {
        MemberObs {
            pod: Some(PodObs {
                ready: true,
                ..PodObs::default()
            }),
            view: Some(View::of_ordinals(me, sees.iter().copied())),
            ..MemberObs::default()
        }
    }

    fn observed(views: &[(u32, &[u32])]) -> BTreeMap<u32, MemberObs> {
        views.iter().map(|(o, s)| (*o, up(*o, s))).collect()
    }

    fn all() -> BTreeSet<u32> {
        (0..4).collect()
    }

    #[test]
    fn halves_disagree_naming_who_sees_whom() {
        let obs = observed(&[(0, &[0, 1]), (1, &[0, 1]), (2, &[2, 3]), (3, &[2, 3])]);
        assert_eq!(
            agreement(&spec(), &all(), &obs),
            Agreement::Disagree(
                "demo-0, demo-1 see demo-0, demo-1; demo-2, demo-3 see demo-2, demo-3".into()
            )
        );
    }

    #[test]
    fn a_stranger_in_place_of_a_member_is_a_disagreement_with_the_same_count() {
        let mut obs = observed(&[
            (0, &[0, 1, 2, 3]),
            (1, &[0, 1, 2, 3]),
            (2, &[0, 1, 2, 3]),
            (3, &[0, 1, 2, 3]),
        ]);
        let v = obs.get_mut(&3).unwrap().view.as_mut().unwrap();
        v.peers.remove(&View::ordinal_id(2));
        v.peers
            .insert("ffffffffffff".into(), "127.9.9.9:6379".into());
        let Agreement::Disagree(who) = agreement(&spec(), &all(), &obs) else {
            panic!("a swapped member must disagree");
        };
        assert!(
            who.contains("demo-3 sees demo-0, demo-1, demo-3, stranger ffffffff at 127.9.9.9:6379"),
            "{who}"
        );
    }

    #[test]
    fn members_are_named_in_ordinal_order_whatever_their_ids() {
        let view = View {
            id: "b".into(),
            peers: [
                ("a", ""),
                ("b", ""),
                ("c", ""),
                ("zzzzzzzzzz", "127.0.0.254:6379"),
            ]
            .map(|(i, a)| (i.to_string(), a.to_string()))
            .into(),
        };
        let names = [("a", "demo-10"), ("b", "demo-2"), ("c", "demo-0")]
            .map(|(i, n)| (i.to_string(), n.to_string()))
            .into();
        assert_eq!(
            describe(&view, &names),
            "demo-0, demo-2, demo-10, stranger zzzzzzzz at 127.0.0.254:6379"
        );
    }

    #[test]
    fn a_view_full_of_strangers_is_described_in_a_bounded_line() {
        let long_addr = format!("{}:6379", "h".repeat(253));
        let mut peers: BTreeMap<String, String> = (0..1_100)
            .map(|n| (format!("{n:040x}"), long_addr.clone()))
            .collect();
        peers.insert("a".into(), String::new());
        let view = View {
            id: "a".into(),
            peers,
        };
        let names = [("a".to_string(), "demo-0".to_string())].into();
        let said = describe(&view, &names);
        assert!(
            said.starts_with("demo-0, stranger 00000000 at hhh"),
            "{said}"
        );
        assert!(said.ends_with(", 1097 more strangers"), "{said}");
        assert_eq!(said.matches("stranger ").count(), STRANGERS_NAMED);
        assert!(said.len() < 300, "{} bytes", said.len());
    }

    #[test]
    fn agree_and_unknown_and_unready() {
        let mut obs = observed(&[
            (0, &[0, 1, 2, 3]),
            (1, &[0, 1, 2, 3]),
            (2, &[0, 1, 2, 3]),
            (3, &[0, 1, 2, 3]),
        ]);
        assert_eq!(agreement(&spec(), &all(), &obs), Agreement::Agree);
        obs.get_mut(&1).unwrap().view = None;
        assert_eq!(
            agreement(&spec(), &all(), &obs),
            Agreement::Unknown(vec![1])
        );
        // An unready member's (lagging) view is not compared.
        obs.get_mut(&1).unwrap().view = Some(View::of_ordinals(1, [1]));
        obs.get_mut(&1).unwrap().pod.as_mut().unwrap().ready = false;
        assert_eq!(agreement(&spec(), &all(), &obs), Agreement::Agree);
    }

    #[test]
    fn the_clock_starts_on_disagreement_survives_unknown_and_clears_on_agreement() {
        let d = Agreement::Disagree("x".into());
        let u = Agreement::Unknown(vec![1]);
        assert_eq!(split_since(None, &d, 5_000), Some(5_000));
        assert_eq!(split_since(Some(1_000), &d, 5_000), Some(1_000));
        assert_eq!(split_since(Some(1_000), &u, 5_000), Some(1_000));
        assert_eq!(split_since(None, &u, 5_000), None);
        assert_eq!(split_since(Some(1_000), &Agreement::Agree, 5_000), None);

        let s = spec();
        let bound = SUSPECT_PARTITION_AFTER_MS;
        assert_eq!(suspected_partition(&s, &d, Some(0), bound - 1), None);
        let p = suspected_partition(&s, &d, Some(0), bound).expect("suspected at the bound");
        assert_eq!(p.since, 0);
        assert!(p.message.contains(": x;"), "{}", p.message);
        let p = suspected_partition(&s, &u, Some(0), bound).expect("unknown is not agreement");
        assert!(
            p.message.contains("views of demo-1 unknown"),
            "{}",
            p.message
        );
        assert_eq!(
            suspected_partition(&s, &Agreement::Agree, Some(0), bound),
            None
        );
        assert_eq!(suspected_partition(&s, &d, None, bound), None);
    }
}
