//! Re-creation before the scrapes: a missing pod or PVC of an unchanged membership is created
//! again at once, from the caches alone, by the watch's fast path or at the start of a pass.
//! No member figure bears on it, and a deleted pod comes back sooner.

use std::collections::BTreeMap;

use crate::stepper::{Input, decide};
use crate::types::{Action, ClusterSpec, MemberObs, Memory, Millis, Note};

/// What may be created before the scrapes, and the notes about it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Creations {
    pub actions: Vec<Action>,
    pub notes: Vec<Note>,
}

/// The creations a pass would make before any member is scraped, when that is all it would
/// do: the membership, the removal and the rollout stay as recorded, so there is nothing to
/// record first, and doing them again is harmless (409). Whatever else the pass decides waits
/// for the scrapes. `spec` is the size to aim for (see `sizing::unscraped_target`).
pub fn creations_before_scrapes(
    spec: &ClusterSpec,
    memory: &Memory,
    unscraped: &BTreeMap<u32, MemberObs>,
    now: Millis,
) -> Creations {
    let d = decide(&Input {
        spec,
        memory,
        observed: unscraped,
        now,
    });
    let only_creations = d
        .actions
        .iter()
        .all(|a| matches!(a, Action::CreatePod(_) | Action::CreatePvc(_)));
    if only_creations
        && d.memory.members == memory.members
        && d.memory.disruption == memory.disruption
    {
        Creations {
            actions: d.actions,
            notes: d.notes,
        }
    } else {
        Creations::default()
    }
}

/// The actions of a pass that are still to do, given those made before the scrapes.
pub fn still_to_do(decided: &[Action], made: &[Action]) -> Vec<Action> {
    decided
        .iter()
        .filter(|a| !made.contains(a))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PodObs, PvcObs};

    fn spec(nodes: u32) -> ClusterSpec {
        ClusterSpec {
            name: "demo".into(),
            nodes,
            replication_factor: 1,
            remove_first: Default::default(),
            reclaim_pvcs: false,
            settle_ms: 5_000,
            handoff_timeout_ms: 600_000,
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

    fn up() -> MemberObs {
        MemberObs {
            pod: Some(PodObs {
                ready: true,
                ..PodObs::default()
            }),
            pvc: Some(PvcObs {
                uid: "v".into(),
                ..PvcObs::default()
            }),
            scrape: None,
            view: None,
            look_alike: false,
            password: Default::default(),
            client_input: Some(0),
            new_pod: crate::types::PodAdmission::Admitted,
        }
    }

    /// Before the scrapes, only the re-creation of a missing child of an unchanged membership
    /// is done; anything that needs a record first (a new member) waits for the full pass.
    #[test]
    fn a_missing_pod_is_recreated_before_the_scrapes_but_a_new_member_is_not() {
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let now: Millis = 1_700_000_000_000;
        let mut observed: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, up())).collect();
        let made = |nodes| creations_before_scrapes(&spec(nodes), &memory, &observed, now);
        assert_eq!(made(3), Creations::default());

        observed.get_mut(&1).unwrap().pod = None;
        let made = |nodes| creations_before_scrapes(&spec(nodes), &memory, &observed, now);
        assert_eq!(made(3).actions, [Action::CreatePod(1)]);
        assert!(
            made(3).notes.iter().any(|n| n.member == Some(1)),
            "the re-creation is announced"
        );
        // A scale-down is wanted: still only the re-creation (no removal starts meanwhile).
        assert_eq!(made(2).actions, [Action::CreatePod(1)]);
        // A scale-up would add a member, which is recorded in status before it is created.
        let rf2 = ClusterSpec {
            replication_factor: 2,
            ..spec(4)
        };
        assert_eq!(
            creations_before_scrapes(&rf2, &memory, &observed, now),
            Creations::default()
        );
        // With replicationFactor 1, one member down is a mass failure: no member is added,
        // the pod on its own volume is re-created.
        assert_eq!(made(4).actions, [Action::CreatePod(1)]);
    }

    #[test]
    fn what_was_made_before_the_scrapes_is_not_made_again() {
        let decided = [Action::CreatePod(1), Action::CreatePod(2), Action::Drain(3)];
        assert_eq!(
            still_to_do(&decided, &[Action::CreatePod(1)]),
            [Action::CreatePod(2), Action::Drain(3)]
        );
        assert_eq!(still_to_do(&decided, &[]), decided);
    }
}
