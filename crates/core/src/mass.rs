//! Mass failure: so many members are down that copies may be missing. The operator then
//! re-creates pods on their own volumes and does nothing else to the data plane: no fresh
//! volume, no volume deleted, no member added or removed, no drain, no pod deleted.
//!
//! A member is **down** when it is in the recorded membership (`status.instanceNames`), holds
//! or held copies, and has no ready, non-terminating pod. Two kinds of recorded members hold
//! nothing the others rely on and never count: a member still `Joining` (created by a scale-up
//! or the cluster's creation, never Active, so never an owner: a new cluster is never in mass
//! failure), and the member of the removal or rollout in progress once its data was handed off
//! (its pod deleted by the operator after the hand-off gate passed). The cluster is in mass
//! failure while `replicationFactor` or more members are down: every copy of a partition may
//! be on them.
//!
//! A hibernating cluster (`spec.hibernation`, once no removal or restart is in progress) and
//! one waking from it (`Memory::hibernated`) stopped its members on purpose: neither is a mass
//! failure. A fenced member is down like any
//! other (its copies are unavailable), but it is never re-created.

use std::collections::BTreeMap;

use crate::types::*;

pub use crate::types::MassFailure;

/// Whether the member of the disruption in progress has had its data handed off (its pod was
/// deleted by the operator after the hand-off gate passed).
fn handed_off(memory: &Memory, o: u32) -> bool {
    match &memory.disruption {
        Some(Disruption::Removal(r)) => r.ordinal == o && r.step >= RemovalStep::Deleting,
        Some(Disruption::Roll(r)) => r.ordinal == o && r.handed_off_pvc.is_some(),
        // Its members are down on purpose only once stopped: `Memory::hibernated` says so.
        Some(Disruption::Upgrade(_)) | None => false,
    }
}

/// The rule, over the memory read back from status and what was observed.
pub fn mass_failure(
    spec: &ClusterSpec,
    memory: &Memory,
    observed: &BTreeMap<u32, MemberObs>,
) -> Option<MassFailure> {
    // Pods stopped on purpose, or starting again after that, are no failure (a wake past the
    // stale-volume grace is refused by the stepper itself).
    if (spec.hibernation && memory.disruption.is_none()) || memory.hibernated {
        return None;
    }
    let down: Vec<u32> = memory
        .members
        .iter()
        .copied()
        .filter(|o| memory.phases.get(o) != Some(&MemberPhase::Joining))
        .filter(|o| !handed_off(memory, *o))
        .filter(|o| {
            !observed
                .get(o)
                .and_then(|m| m.pod.as_ref())
                .is_some_and(|p| p.ready && !p.terminating)
        })
        .collect();
    let rf = spec.replication_factor.max(1);
    let members = memory.members.len();
    (down.len() >= rf as usize).then_some(MassFailure {
        down,
        members,
        replication_factor: spec.replication_factor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rf: u32) -> ClusterSpec {
        ClusterSpec {
            name: "demo".into(),
            nodes: 5,
            replication_factor: rf,
            remove_first: Default::default(),
            reclaim_pvcs: false,
            settle_ms: 1_000,
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
            new_pod: PodAdmission::Admitted,
        }
    }

    fn memory(phase: MemberPhase) -> Memory {
        Memory {
            members: (0..5).collect(),
            phases: (0..5).map(|o| (o, phase)).collect(),
            ..Memory::default()
        }
    }

    fn world() -> BTreeMap<u32, MemberObs> {
        (0..5).map(|o| (o, up())).collect()
    }

    #[test]
    fn replication_factor_members_down_is_a_mass_failure() {
        let mem = memory(MemberPhase::Active);
        let mut obs = world();
        assert_eq!(mass_failure(&spec(2), &mem, &obs), None);
        // Missing pod, unready pod, terminating pod: each is down.
        obs.get_mut(&1).unwrap().pod = None;
        assert_eq!(mass_failure(&spec(2), &mem, &obs), None, "one down of RF 2");
        obs.get_mut(&2).unwrap().pod.as_mut().unwrap().ready = false;
        let m = mass_failure(&spec(2), &mem, &obs).expect("two down of RF 2");
        assert_eq!(m.down, [1, 2]);
        obs.get_mut(&4).unwrap().pod.as_mut().unwrap().terminating = true;
        obs.remove(&4);
        let m = mass_failure(&spec(2), &mem, &obs).unwrap();
        assert_eq!(m.down, [1, 2, 4]);
        assert_eq!(
            m.message(&spec(2)),
            "3 of 5 members down (demo-1, demo-2, demo-4) with replicationFactor 2: copies may be missing; only pods on their own volumes are re-created"
        );
        assert_eq!(mass_failure(&spec(3), &mem, &obs).unwrap().down.len(), 3);
        assert_eq!(mass_failure(&spec(4), &mem, &obs), None);
    }

    #[test]
    fn a_new_cluster_and_joining_members_are_not_down() {
        // Created: nothing recorded yet, or recorded as Joining.
        assert_eq!(
            mass_failure(&spec(1), &Memory::default(), &BTreeMap::new()),
            None
        );
        assert_eq!(
            mass_failure(&spec(1), &memory(MemberPhase::Joining), &BTreeMap::new()),
            None
        );
        // Once Active (or anything after Joining), a member without a ready pod is down.
        let m = mass_failure(&spec(2), &memory(MemberPhase::Replacing), &BTreeMap::new());
        assert_eq!(m.unwrap().down, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_handed_off_member_is_not_down() {
        let mut mem = memory(MemberPhase::Active);
        let mut obs = world();
        obs.get_mut(&3).unwrap().pod = None;
        obs.get_mut(&4).unwrap().pod = None;
        let removal = |step| {
            Some(Disruption::Removal(Removal {
                ordinal: 4,
                reason: VictimReason::HighestOrdinal,
                step,
                started_at: 0,
                step_started_at: 0,
                connections_cut_at: None,
            }))
        };
        mem.disruption = removal(RemovalStep::Settling);
        assert_eq!(mass_failure(&spec(2), &mem, &obs), None);
        // Lost before its hand-off: it still holds copies.
        mem.disruption = removal(RemovalStep::HandingOff);
        assert_eq!(mass_failure(&spec(2), &mem, &obs).unwrap().down, [3, 4]);
        let roll = |handed_off_pvc: Option<&str>| {
            Some(Disruption::Roll(Roll {
                ordinal: 4,
                reason: RollReason::SpecChanged,
                step: RollStep::Rejoining,
                handed_off_pvc: handed_off_pvc.map(Into::into),
                started_at: 0,
                step_started_at: 0,
                connections_cut_at: None,
            }))
        };
        mem.disruption = roll(Some("v"));
        assert_eq!(mass_failure(&spec(2), &mem, &obs), None);
        mem.disruption = roll(None);
        assert!(mass_failure(&spec(2), &mem, &obs).is_some());
    }
}
