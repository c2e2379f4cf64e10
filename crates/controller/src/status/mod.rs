//! Status in both directions: what the operator remembers, read back from the object's status
//! (`read`), the status a decision is reported as (`write`), and its conditions
//! (`conditions`).

mod conditions;
mod read;
mod write;

pub use conditions::{HOLD_MESSAGE_MAX_BYTES, hold_summary};
pub use read::*;
pub use write::*;

use std::collections::{BTreeMap, BTreeSet};

use marekvs_api::{MarekvsCluster, MarekvsClusterStatus};
use marekvs_core::pass::{AutoscaleReport, PassPlan};
use marekvs_core::sizing::Sizing;
use marekvs_core::{Decision, MemberObs, Millis};

use crate::observe::Children;

/// Everything a status is made from: the pass's plan, translated.
pub struct StatusInput<'a> {
    pub cr: &'a MarekvsCluster,
    pub prev: &'a MarekvsClusterStatus,
    pub decision: &'a Decision,
    pub observed: &'a BTreeMap<u32, MemberObs>,
    pub children: &'a Children,
    pub unknown_choices: &'a [String],
    pub sizing: &'a Sizing,
    pub write_stopped: &'a BTreeSet<u32>,
    pub autoscale: Option<&'a AutoscaleReport>,
    /// `status.password` (`None`: the cluster has no password).
    pub password: Option<marekvs_api::PasswordStatus>,
    pub password_state: &'a marekvs_core::password::PasswordState,
    pub versions: &'a marekvs_core::versions::Versions,
    pub now: Millis,
}

impl<'a> StatusInput<'a> {
    pub fn of(
        cr: &'a MarekvsCluster,
        prev: &'a MarekvsClusterStatus,
        plan: &'a PassPlan,
        observed: &'a BTreeMap<u32, MemberObs>,
        children: &'a Children,
        password: Option<marekvs_api::PasswordStatus>,
        now: Millis,
    ) -> Self {
        StatusInput {
            cr,
            prev,
            decision: &plan.decision,
            observed,
            children,
            unknown_choices: &plan.unknown_choices,
            sizing: &plan.sizing,
            write_stopped: &plan.write_stopped,
            autoscale: plan.autoscale.as_ref(),
            password,
            password_state: &plan.password.state,
            versions: &plan.versions,
            now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use marekvs_api::conditions::*;
    use marekvs_api::{
        LookAlikeStatus, MarekvsCluster, MarekvsClusterStatus, MemberMetrics, MemberStatus,
        PlanHoldKind,
    };
    use marekvs_core::EventReason;
    use marekvs_core::autoscale::{LoadMemory, LoadSample, ScaleMemory};
    use marekvs_core::sizing::Sizing;
    use marekvs_core::{
        ClusterPhase, Decision, Disruption, EventKind, Hold, HoldReport, MemberObs, Memory, Millis,
        Moving, PlannedRemoval, Removal, Roll, Sample,
    };

    use crate::observe::Children;
    use marekvs_api::MarekvsClusterSpec;
    use marekvs_core::RollReason;
    use marekvs_core::autoscale::ScaleDecision;
    use marekvs_core::pass::{autoscale_report, look_alike_notes, write_stopped};
    use marekvs_core::{
        BlockReason, Blocked, MemberPhase, PodAdmission, PodObs, QuietReset, RemovalStep, RollStep,
        Scrape, VictimReason, WindowLoss, WindowLossCause,
    };
    use serde_json::{Value, json};

    use crate::spec::{autoscale_policy, cluster_spec};

    fn cr(spec: Value) -> MarekvsCluster {
        let spec: MarekvsClusterSpec = serde_json::from_value(spec).unwrap();
        let mut c = MarekvsCluster::new("demo", spec);
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c.metadata.generation = Some(4);
        c
    }

    fn no_children() -> Children {
        Children {
            pods: BTreeMap::new(),
            pvcs: BTreeMap::new(),
            look_alikes: Vec::new(),
            to_stamp: Vec::new(),
            orphans: Vec::new(),
        }
    }

    fn decision(memory: Memory, phase: ClusterPhase, blocked: Option<Blocked>) -> Decision {
        Decision {
            memory,
            actions: vec![],
            phase,
            blocked,
            progress: None,
            notes: vec![],
            requeue_ms: 1_000,
            plan: vec![],
            mass_failure: None,
            suspected_partition: None,
            hold: None,
            background_repair: None,
            kept_stale: vec![],
        }
    }

    fn status_of(
        cr: &MarekvsCluster,
        d: &Decision,
        sizing: &Sizing,
        observed: &BTreeMap<u32, MemberObs>,
        now: Millis,
    ) -> MarekvsClusterStatus {
        let plan = PassPlan {
            sizing: sizing.clone(),
            decision: d.clone(),
            unknown_choices: vec![],
            write_stopped: write_stopped(&d.memory.members, observed, &BTreeSet::new()),
            autoscale: autoscale_report(sizing, d, cr.spec.nodes as u32),
            changes: vec![],
            absences: vec![],
            password: marekvs_core::password::PasswordPlan {
                remember: false,
                set_on: Default::default(),
                record: false,
                state: marekvs_core::password::PasswordState::NoPassword,
                notes: vec![],
            },
            versions: marekvs_core::versions::versions(&d.memory.members, observed),
            next_look_ms: d.requeue_ms,
        };
        let prev = MarekvsClusterStatus::default();
        status_from(&StatusInput::of(
            cr,
            &prev,
            &plan,
            observed,
            &no_children(),
            None,
            now,
        ))
    }

    fn scraped(view: u64, boots: u64) -> MemberObs {
        MemberObs {
            pod: Some(PodObs {
                ready: true,
                ..PodObs::default()
            }),
            pvc: None,
            scrape: Some(Scrape {
                view_members: view,
                bootstraps_total: boots,
                commands_total: 100,
                ..Scrape::default()
            }),
            view: None,
            look_alike: false,
            password: Default::default(),
            client_input: Some(0),
            new_pod: PodAdmission::Admitted,
        }
    }

    /// A look-alike is announced once when it appears and once when it goes, naming the
    /// member and the object: what status listed is read back for the core to compare.
    #[test]
    fn look_alikes_are_announced_on_their_transitions_only() {
        let listed = |names: &[&str]| MarekvsClusterStatus {
            look_alikes: names
                .iter()
                .map(|n| LookAlikeStatus {
                    kind: marekvs_api::LookAlikeKind::Pod,
                    name: n.to_string(),
                    member: n.to_string(),
                    why: "has no controller".into(),
                })
                .collect(),
            ..MarekvsClusterStatus::default()
        };
        let was = |names: &[&str]| reported(&listed(names)).look_alikes;
        let is = |names: &[&str]| was(names);
        let notes = look_alike_notes(&was(&[]), &is(&["demo-3"]));
        assert_eq!(notes.len(), 1);
        assert_eq!(
            (notes[0].kind, notes[0].reason),
            (EventKind::Warning, EventReason::LookAlike)
        );
        assert!(
            notes[0]
                .message
                .contains("Pod demo-3 holds the name of member demo-3"),
            "{}",
            notes[0].message
        );
        assert!(look_alike_notes(&was(&["demo-3"]), &is(&["demo-3"])).is_empty());
        let notes = look_alike_notes(&was(&["demo-3"]), &is(&["demo-4"]));
        let reasons: Vec<_> = notes.iter().map(|n| (n.reason, n.kind)).collect();
        assert_eq!(
            reasons,
            [
                (EventReason::LookAlike, EventKind::Warning),
                (EventReason::LookAlikeGone, EventKind::Normal)
            ]
        );
        assert!(notes[1].message.contains("demo-3"));
    }

    #[test]
    fn a_rescrape_with_the_same_figures_is_no_reason_to_write_status() {
        // Time, rounds, commands (the operator's own reads count there) and ring occupancy
        // move with every pass or round: they alone write nothing.
        let member = |at: i64, under: i64| MemberStatus {
            name: "demo-0".into(),
            metrics: Some(MemberMetrics {
                scraped_at: to_time(at),
                view_members: 3,
                underreplicated_partitions: under,
                join_gate_pending: 0,
                bootstraps_completed_total: 1,
                ae_repair_ops_total: 0,
                commands_total: 5 + at,
                write_commands_total: 0,
                ae_rounds_total: Some(at / 6_000),
                ring_ops: Some(at),
                repl_ops_sent_total: Some(0),
                repl_inflight_bytes: Some(0),
                ring_bytes: Some(at * 1_000),
                repl_ops_applied_total: Some(at),
            }),
            ..MemberStatus::default()
        };
        let status = |m: MemberStatus| MarekvsClusterStatus {
            members: vec![m],
            ..MarekvsClusterStatus::default()
        };
        let first = for_comparison(&status(member(1_000, 0)));
        assert_eq!(first, for_comparison(&status(member(11_000, 0))));
        assert_ne!(first, for_comparison(&status(member(11_000, 4))));
    }

    /// Everything the stepper remembers survives a trip through status: a restarted operator
    /// continues the same removal or rolling update from the same step and settle clock.
    #[test]
    fn memory_survives_a_round_trip_through_status() {
        let c = cr(json!({"image": "x", "nodes": 3}));
        let now: Millis = 1_700_000_000_000;
        let base = Memory {
            members: [0, 1, 2, 3].into(),
            samples: (0..4)
                .map(|o| {
                    let sample = Sample {
                        bootstraps_total: u64::from(o) * 10,
                        repairs_total: u64::from(o),
                        changed_at: now - 1_000 * i64::from(o),
                        bootstraps_changed_at: now - 2_000 * i64::from(o),
                        repairs_changed_at: now - 1_000 * i64::from(o),
                        repairs_prev: (o > 1).then(|| (1, now - 9_000)),
                        ring_ops: Some(0),
                        // The scrape's own figures (below): status keeps them in `metrics`.
                        sampled_at: now,
                        ae_rounds: Some(40 + u64::from(o)),
                        view_digest: (o != 1).then_some(0x0123_4567_89ab_cdef + u64::from(o)),
                        writes_total: 100 * u64::from(o),
                        writes_prev: (o > 2).then(|| (250, now - 3_000)),
                        quiet_since: now - 30_000 * i64::from(o),
                        quiet_reset: [
                            QuietReset::FirstSeen,
                            QuietReset::ClientInput,
                            QuietReset::Shipping,
                            QuietReset::ViewChanged,
                        ][o as usize],
                        rounds_at_quiet: (o != 2).then_some(30 + u64::from(o)),
                        // The scrape's figure (kept in `metrics`), and when it last moved.
                        sent_total: (o != 3).then_some(500 + u64::from(o)),
                        sent_changed_at: now - 5_000 * i64::from(o),
                        // The scrape's figures (kept in `metrics`).
                        inflight_bytes: (o != 1).then_some(7 * u64::from(o)),
                        ring_bytes: (o != 2).then_some(1_000 + u64::from(o)),
                        applied_total: (o != 0).then_some(60 + u64::from(o)),
                        window_lost: [
                            None,
                            Some(WindowLoss {
                                at: now - 40_000,
                                cause: WindowLossCause::Restarted,
                            }),
                            Some(WindowLoss {
                                at: now - 1_000,
                                cause: WindowLossCause::RingAtCap,
                            }),
                            None,
                        ][o as usize],
                    };
                    (o, sample)
                })
                .collect(),
            phases: [
                (0, MemberPhase::Active),
                (1, MemberPhase::Updating),
                (2, MemberPhase::Active),
                (3, MemberPhase::Leaving),
            ]
            .into(),
            blocked: Some(BlockReason::Paused),
            views_split_since: Some(now - 12_000),
            hibernated: true,
            ..Memory::default()
        };
        let removing = Memory {
            disruption: Some(Disruption::Removal(Removal {
                ordinal: 3,
                reason: VictimReason::UserChosen,
                step: RemovalStep::Settling,
                started_at: now - 9_000,
                step_started_at: now - 2_000,
                connections_cut_at: None,
            })),
            ..base.clone()
        };
        let replacing = Memory {
            disruption: Some(Disruption::Roll(Roll {
                ordinal: 2,
                reason: RollReason::VolumeRequested {
                    pvc: "pvc-uid-2".into(),
                },
                step: RollStep::HandingOff,
                handed_off_pvc: None,
                started_at: now - 20_000,
                step_started_at: now - 3_000,
                connections_cut_at: None,
            })),
            ..base.clone()
        };
        let rolling = Memory {
            disruption: Some(Disruption::Roll(Roll {
                ordinal: 1,
                reason: RollReason::SpecChanged,
                step: RollStep::Rejoining,
                handed_off_pvc: Some("pvc-uid-1".into()),
                started_at: now - 30_000,
                step_started_at: now - 4_000,
                connections_cut_at: None,
            })),
            ..base.clone()
        };
        let observed: BTreeMap<u32, MemberObs> = (0..4)
            .map(|o| {
                let mut m = scraped(4, u64::from(o) * 10);
                let s = m.scrape.as_mut().unwrap();
                s.repairs_total = u64::from(o);
                s.ae_rounds = Some(40 + u64::from(o));
                s.repl_sent = (o != 3).then_some(500 + u64::from(o));
                s.write_commands = 100 * u64::from(o);
                s.repl_inflight_bytes = (o != 1).then_some(7 * u64::from(o));
                s.ring_bytes = (o != 2).then_some(1_000 + u64::from(o));
                s.repl_applied = (o != 0).then_some(60 + u64::from(o));
                (o, m)
            })
            .collect();
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        for memory in [base.clone(), removing, rolling, replacing] {
            let blocked = Blocked {
                reason: BlockReason::Paused,
                message: "held".into(),
            };
            let d = decision(memory.clone(), ClusterPhase::Paused, Some(blocked));
            let st = status_of(&c, &d, &sizing, &observed, now);
            assert_eq!(st.instance_names, ["demo-0", "demo-1", "demo-2", "demo-3"]);
            assert_eq!(memory_from_status("demo", &st), memory);
        }
    }

    /// The core's plan is written as `status.plan`: members by name, in order, each with its
    /// reason and a typed hold (the gate's own reason and message); it survives the JSON the
    /// API server stores, and an empty plan is left out.
    #[test]
    fn the_plan_is_written_in_order_with_typed_holds() {
        use marekvs_api::{BlockReason as ApiBlock, VictimReason as ApiVictim};
        let c = cr(json!({"image": "x", "nodes": 3}));
        let now: Millis = 1_700_000_000_000;
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let gate = Blocked {
            reason: BlockReason::RepairInProgress,
            message: "re-replication not settled".into(),
        };
        let step = |ordinal, reason, held_by| PlannedRemoval {
            ordinal,
            reason,
            held_by,
        };
        let mut d = decision(Memory::default(), ClusterPhase::Blocked, Some(gate.clone()));
        d.plan = vec![
            step(5, VictimReason::UserChosen, Some(Hold::Gate(gate))),
            step(
                2,
                VictimReason::NotReady,
                Some(Hold::InProgress {
                    message: "the removal of demo-5 comes first".into(),
                }),
            ),
            step(4, VictimReason::HighestOrdinal, Some(Hold::Paused)),
            step(
                3,
                VictimReason::HighestOrdinal,
                Some(Hold::Floor { floor: 3 }),
            ),
            step(1, VictimReason::HighestOrdinal, None),
        ];
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        type Row<'a> = (
            &'a str,
            i32,
            ApiVictim,
            Option<(PlanHoldKind, Option<ApiBlock>)>,
        );
        let got: Vec<Row> = st
            .plan
            .iter()
            .map(|p| {
                (
                    p.member.as_str(),
                    p.ordinal,
                    p.reason,
                    p.held_by.as_ref().map(|h| (h.kind, h.reason)),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "demo-5",
                    5,
                    ApiVictim::UserChosen,
                    Some((PlanHoldKind::Gate, Some(ApiBlock::RepairInProgress)))
                ),
                (
                    "demo-2",
                    2,
                    ApiVictim::NotReady,
                    Some((PlanHoldKind::InProgress, None))
                ),
                (
                    "demo-4",
                    4,
                    ApiVictim::HighestOrdinal,
                    Some((PlanHoldKind::Paused, None))
                ),
                (
                    "demo-3",
                    3,
                    ApiVictim::HighestOrdinal,
                    Some((PlanHoldKind::Floor, None))
                ),
                ("demo-1", 1, ApiVictim::HighestOrdinal, None),
            ]
        );
        assert_eq!(
            st.plan[0].held_by.as_ref().unwrap().message,
            "re-replication not settled"
        );
        assert_eq!(
            st.plan[1].held_by.as_ref().unwrap().message,
            "the removal of demo-5 comes first"
        );
        let stored = serde_json::to_value(&st).unwrap();
        assert_eq!(stored["plan"][0]["heldBy"]["kind"], "Gate");
        assert_eq!(stored["plan"][0]["heldBy"]["reason"], "RepairInProgress");
        assert_eq!(stored["plan"][4].get("heldBy"), None);
        let back: MarekvsClusterStatus = serde_json::from_value(stored).unwrap();
        assert_eq!(back.plan, st.plan);
        // At the target: no plan, and no field.
        d.plan.clear();
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(serde_json::to_value(&st).unwrap().get("plan").is_none());
    }

    /// The operator never records a removal and a rollout at once; a status edited to hold
    /// both is read as the removal alone.
    #[test]
    fn a_status_with_both_a_removal_and_a_rollout_is_read_as_the_removal() {
        let c = cr(json!({"image": "x", "nodes": 3}));
        let now: Millis = 1_700_000_000_000;
        let removal = Removal {
            ordinal: 3,
            reason: VictimReason::HighestOrdinal,
            step: RemovalStep::HandingOff,
            started_at: now - 9_000,
            step_started_at: now - 2_000,
            connections_cut_at: None,
        };
        let roll = Roll {
            ordinal: 1,
            reason: RollReason::SpecChanged,
            step: RollStep::Draining,
            handed_off_pvc: None,
            started_at: now - 30_000,
            step_started_at: now - 4_000,
            connections_cut_at: None,
        };
        let base = Memory {
            members: [0, 1, 2, 3].into(),
            ..Memory::default()
        };
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let status = |memory: Memory| {
            let d = decision(memory, ClusterPhase::ScalingDown, None);
            status_of(&c, &d, &sizing, &BTreeMap::new(), now)
        };
        let mut st = status(Memory {
            disruption: Some(Disruption::Removal(removal.clone())),
            ..base.clone()
        });
        st.rollout = status(Memory {
            disruption: Some(Disruption::Roll(roll.clone())),
            ..base.clone()
        })
        .rollout;
        assert!(st.removal.is_some() && st.rollout.is_some());
        let memory = memory_from_status("demo", &st);
        assert_eq!(memory.removal(), Some(&removal));
        assert_eq!(memory.roll(), None);
    }

    /// A fresh volume asked for is recorded with its reason and the volume to leave, and read
    /// back from a status stored as JSON; a rollout recorded before rollouts had a reason is a
    /// rolling update; one asking for a fresh volume without naming the volume is dropped.
    #[test]
    fn a_fresh_volume_asked_for_is_read_back_from_the_stored_rollout() {
        let stored = |rollout: serde_json::Value| -> MarekvsClusterStatus {
            serde_json::from_value(json!({
                "instanceNames": ["demo-0", "demo-1", "demo-2"],
                "rollout": rollout,
            }))
            .unwrap()
        };
        let mut rollout = json!({"member": "demo-2", "ordinal": 2, "step": "Deleting",
            "handedOffPvc": "uid-2", "startedAt": "2026-11-23T10:00:00Z",
            "stepStartedAt": "2026-11-23T10:00:05Z"});
        let reason = |st: &MarekvsClusterStatus| {
            memory_from_status("demo", st)
                .roll()
                .map(|r| r.reason.clone())
        };
        assert_eq!(
            reason(&stored(rollout.clone())),
            Some(RollReason::SpecChanged)
        );
        rollout["reason"] = json!("VolumeRequested");
        assert_eq!(reason(&stored(rollout.clone())), None);
        rollout["replacedPvc"] = json!("uid-2");
        let st = stored(rollout);
        assert_eq!(
            reason(&st),
            Some(RollReason::VolumeRequested {
                pvc: "uid-2".into()
            })
        );
        assert_eq!(
            serde_json::to_value(&st).unwrap()["rollout"]["reason"],
            json!("VolumeRequested")
        );
        // A restart asked for on a pod: no volume to remember.
        let mut restart = serde_json::to_value(&st).unwrap()["rollout"].clone();
        restart["reason"] = json!("RestartRequested");
        restart.as_object_mut().unwrap().remove("replacedPvc");
        assert_eq!(reason(&stored(restart)), Some(RollReason::RestartRequested));
        let unknown = json!({"instanceNames": [], "rollout": {"member": "demo-2", "ordinal": 2,
            "step": "Deleting", "reason": "Whim", "startedAt": "2026-11-23T10:00:00Z",
            "stepStartedAt": "2026-11-23T10:00:05Z"}});
        assert!(serde_json::from_value::<MarekvsClusterStatus>(unknown).is_err());
    }

    #[test]
    fn load_and_autoscaler_state_survive_a_round_trip_through_status() {
        let c = cr(
            json!({"image": "x", "nodes": 3, "autoscale": {"minNodes": 3, "maxNodes": 6, "targetOpsPerNode": 100}}),
        );
        let now: Millis = 1_700_000_000_000;
        let load = LoadMemory {
            sample: Some(LoadSample {
                at: now,
                totals: [(0, 5), (1, 7), (2, 9)].into(),
            }),
            ops_per_sec: Some(420.0),
        };
        let scaling = ScaleDecision {
            desired: 5,
            memory: ScaleMemory {
                desired: Some(5),
                last_scale_up_at: Some(now - 60_000),
                last_scale_down_at: None,
                low_since: Some(now - 5_000),
            },
            reason: "scaling up to 5: 420 ops/s over 100 per member".into(),
        };
        assert!(c.spec.autoscale.as_ref().map(autoscale_policy).is_some());
        let mut spec = cluster_spec(&c).unwrap();
        spec.nodes = 5;
        let sizing = Sizing {
            spec,
            load: load.clone(),
            scaling: Some(scaling.clone()),
        };
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let d = decision(memory, ClusterPhase::ScalingUp, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert_eq!(load_from_status("demo", &st), load);
        assert_eq!(scale_from_status(&st), scaling.memory);
        assert_eq!(autoscale_last_asked(&st), Some(5));
        assert_eq!(st.ops_per_second, Some(420));
        assert_eq!(st.desired_nodes, Some(5));
        let condition = st
            .conditions
            .iter()
            .find(|c| c.type_ == AUTOSCALING)
            .unwrap();
        let msg = &condition.message;
        assert!(
            msg.starts_with("autoscaler wants 5, cluster has 3"),
            "{msg}"
        );
        assert!(
            msg.contains("spec.nodes (3) is only the initial size"),
            "{msg}"
        );
    }

    /// A removal the autoscaler asked for, held by the gate: `handoffHold`, the autoscaler's
    /// `heldBy` and message, and the Progressing condition say what keeps moving, where, how
    /// fast and since when; once stuck, the Blocked condition says it too. Repairs that hold
    /// nothing are `backgroundRepair`. Without a hold, `heldBy` is absent.
    #[test]
    fn a_held_scale_down_says_what_moves_where_how_fast_and_since_when() {
        let c = cr(
            json!({"image": "x", "nodes": 4, "autoscale": {"minNodes": 3, "maxNodes": 6, "targetOpsPerNode": 100}}),
        );
        let now: Millis = 1_764_090_000_000;
        let mut spec = cluster_spec(&c).unwrap();
        spec.nodes = 3;
        let sizing = Sizing {
            spec,
            load: LoadMemory::default(),
            scaling: Some(ScaleDecision {
                desired: 3,
                memory: ScaleMemory::default(),
                reason: "scaling down to 3: 100 ops/s".into(),
            }),
        };
        let memory = Memory {
            members: [0, 1, 2, 3].into(),
            ..Memory::default()
        };
        let hold = HoldReport {
            reason: BlockReason::LeaverBacklog,
            message: "demo-3 still receives client commands past its Service".into(),
            moving: Moving::ClientTraffic,
            members: vec![3],
            rate_per_sec: Some(1200.0),
            since: now - 95_000,
            stuck: false,
        };
        let mut d = decision(memory.clone(), ClusterPhase::ScalingDown, None);
        d.progress = Some("removing demo-3: handing off".into());
        d.hold = Some(hold.clone());
        d.background_repair = Some(marekvs_core::BackgroundRepair {
            members: vec![0, 2],
            rate_per_sec: 12.5,
            since: now - 30_000,
        });
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let summary =
            "ClientTraffic moving on demo-3 at 1200.0 writes/s since 2025-11-25T16:58:25Z";
        assert_eq!(hold_summary(&hold, "demo"), summary);
        let h = st.handoff_hold.as_ref().unwrap();
        assert_eq!(h.reason, marekvs_api::BlockReason::LeaverBacklog);
        assert_eq!(h.moving, marekvs_api::Moving::ClientTraffic);
        assert_eq!(h.members, ["demo-3"]);
        assert_eq!(h.rate_per_second, Some(1200.0));
        assert!(!h.stuck);
        let b = st.background_repair.as_ref().unwrap();
        assert_eq!(
            (b.members.as_slice(), b.rate_per_second),
            (&["demo-0".to_string(), "demo-2".to_string()][..], 12.5)
        );
        let auto = st.autoscale.as_ref().unwrap();
        assert_eq!(auto.held_by, Some(marekvs_api::BlockReason::LeaverBacklog));
        let message = auto.message.as_deref().unwrap();
        assert!(
            message.starts_with(
                "autoscaler wants 3, holding at 4: demo-3 still receives client commands"
            ),
            "{message}"
        );
        assert!(message.contains(summary), "{message}");
        let condition = |st: &MarekvsClusterStatus, t: &str| {
            st.conditions.iter().find(|c| c.type_ == t).unwrap().clone()
        };
        assert_eq!(
            condition(&st, PROGRESSING).message,
            format!("removing demo-3: handing off; held: {summary}")
        );
        assert_eq!(condition(&st, BLOCKED).status, "False");

        // Stuck: Blocked (HandoffTimeout, from the core) carries the hold too.
        let stuck = HoldReport {
            moving: Moving::Repairs,
            members: vec![0, 1],
            rate_per_sec: Some(7.5),
            stuck: true,
            ..hold
        };
        let mut d = decision(
            memory.clone(),
            ClusterPhase::Blocked,
            Some(Blocked {
                reason: BlockReason::HandoffTimeout,
                message: "hand-off of demo-3 past 600s".into(),
            }),
        );
        d.hold = Some(stuck);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let blocked = condition(&st, BLOCKED);
        assert_eq!(blocked.reason, "HandoffTimeout");
        assert_eq!(
            blocked.message,
            "hand-off of demo-3 past 600s; held: Repairs moving on demo-0, demo-1 at 7.5/s since 2025-11-25T16:58:25Z (stuck: past spec.scaleDown.handoffTimeoutSeconds)"
        );
        assert!(st.handoff_hold.unwrap().stuck);

        // No hold: nothing held by, and the conditions say nothing of one.
        let d = decision(memory, ClusterPhase::ScalingDown, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert_eq!(st.autoscale.as_ref().unwrap().held_by, None);
        assert!(st.handoff_hold.is_none() && st.background_repair.is_none());
        assert!(!condition(&st, PROGRESSING).message.contains("held"));
    }

    /// A suspected partition is a condition naming who sees whom, read back so its Events
    /// fire only on transitions; the start of the disagreement is in status.
    #[test]
    fn hibernation_and_fences_are_conditions_and_the_hibernation_is_read_back() {
        let c = cr(json!({
            "image": "x", "nodes": 3, "replicationFactor": 2,
            "hibernation": true, "fencedMembers": ["demo-1", "other-2"],
        }));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        assert_eq!(
            sizing.spec.fenced,
            [1].into(),
            "only this cluster's members"
        );
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            phases: [
                (0, MemberPhase::Hibernated),
                (1, MemberPhase::Fenced),
                (2, MemberPhase::Hibernated),
            ]
            .into(),
            hibernated: true,
            ..Memory::default()
        };
        let cond = |st: &MarekvsClusterStatus, t: &str| {
            let c = st.conditions.iter().find(|c| c.type_ == t).unwrap();
            (c.status.clone(), c.reason.clone(), c.message.clone())
        };
        let d = decision(memory.clone(), ClusterPhase::Hibernated, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(st.hibernated);
        assert_eq!(st.phase, Some(marekvs_api::ClusterPhase::Hibernated));
        assert_eq!(st.members[1].phase, marekvs_api::MemberPhase::Fenced);
        let (status, reason, _) = cond(&st, HIBERNATED);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", REASON_HIBERNATED)
        );
        let (status, reason, message) = cond(&st, FENCED);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", REASON_MEMBERS_FENCED)
        );
        assert!(message.contains("demo-1 stopped"), "{message}");
        assert_eq!(memory_from_status("demo", &st), memory);
        // A refused wake: still hibernated, the condition says why.
        let refused = Blocked {
            reason: BlockReason::WakeRefused,
            message: "not waking: ...".into(),
        };
        let d = decision(memory, ClusterPhase::Blocked, Some(refused));
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert_eq!(st.block_reason, Some(marekvs_api::BlockReason::WakeRefused));
        let (status, reason, message) = cond(&st, HIBERNATED);
        assert_eq!(
            (status.as_str(), reason.as_str(), message.as_str()),
            ("True", REASON_WAKING, "not waking: ...")
        );
        // Awake, nothing fenced.
        let awake = cr(json!({"image": "x", "nodes": 3, "replicationFactor": 2}));
        let sizing = Sizing {
            spec: cluster_spec(&awake).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let d = decision(Memory::default(), ClusterPhase::Healthy, None);
        let st = status_of(&awake, &d, &sizing, &BTreeMap::new(), now);
        assert!(!st.hibernated);
        assert_eq!(cond(&st, HIBERNATED).1, REASON_AWAKE);
        assert_eq!(cond(&st, FENCED).1, REASON_NONE_FENCED);
    }

    #[test]
    fn a_suspected_partition_is_a_condition_read_back_for_its_events() {
        let c = cr(json!({"image": "x", "nodes": 3, "replicationFactor": 2}));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            views_split_since: Some(now - 40_000),
            ..Memory::default()
        };
        let mut d = decision(memory, ClusterPhase::Healthy, None);
        d.suspected_partition = Some(marekvs_core::views::SuspectedPartition {
            since: now - 40_000,
            message: "demo-0 sees demo-0, demo-1; demo-2 sees demo-2".into(),
        });
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let sp = st
            .conditions
            .iter()
            .find(|c| c.type_ == SUSPECTED_PARTITION)
            .unwrap();
        assert_eq!(
            (sp.status.as_str(), sp.reason.as_str(), sp.message.as_str()),
            (
                "True",
                REASON_VIEWS_DISAGREE,
                "demo-0 sees demo-0, demo-1; demo-2 sees demo-2"
            )
        );
        assert_eq!(st.views_disagree_since, Some(to_time(now - 40_000)));
        assert!(reported(&st).suspected_partition);
        d.suspected_partition = None;
        d.memory.views_split_since = None;
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(!reported(&st).suspected_partition);
        assert_eq!(st.views_disagree_since, None);
    }

    /// Each member's release is in its status, and MixedVersions says whether they differ:
    /// True while two run, False once one runs everywhere, Unknown while one is not read.
    #[test]
    fn each_members_version_is_shown_and_a_mixed_mesh_is_a_condition() {
        let c = cr(json!({"image": "x", "nodes": 3, "replicationFactor": 2}));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let now: Millis = 1_700_000_000_000;
        let d = decision(
            Memory {
                members: [0, 1, 2].into(),
                ..Memory::default()
            },
            ClusterPhase::Healthy,
            None,
        );
        let on = |v: Option<&str>| {
            let mut m = scraped(3, 0);
            m.scrape.as_mut().unwrap().version = v.map(str::to_string);
            m
        };
        let condition = |st: &MarekvsClusterStatus| {
            let c = st
                .conditions
                .iter()
                .find(|c| c.type_ == MIXED_VERSIONS)
                .unwrap();
            (c.status.clone(), c.reason.clone(), c.message.clone())
        };
        let mut observed: BTreeMap<u32, MemberObs> =
            (0..3).map(|o| (o, on(Some("0.2.0")))).collect();
        observed.insert(2, on(Some("0.3.0")));
        let st = status_of(&c, &d, &sizing, &observed, now);
        let versions: Vec<Option<&str>> = st.members.iter().map(|m| m.version.as_deref()).collect();
        assert_eq!(versions, [Some("0.2.0"), Some("0.2.0"), Some("0.3.0")]);
        assert_eq!(
            condition(&st),
            (
                "True".into(),
                REASON_MIXED_VERSIONS.into(),
                "demo-0, demo-1 run 0.2.0; demo-2 runs 0.3.0".into()
            )
        );
        observed.insert(2, on(Some("0.2.0")));
        let st = status_of(&c, &d, &sizing, &observed, now);
        assert_eq!(condition(&st).0, "False");
        assert_eq!(condition(&st).1, REASON_ONE_VERSION);
        observed.insert(1, on(None));
        let st = status_of(&c, &d, &sizing, &observed, now);
        assert_eq!(
            condition(&st),
            (
                "Unknown".into(),
                REASON_VERSIONS_UNKNOWN.into(),
                "demo-0, demo-2 run 0.2.0; no version read from demo-1".into()
            )
        );
        assert_eq!(st.members[1].version, None);
    }

    /// The mass failure is a condition, read back so its Events fire only on transitions.
    #[test]
    fn a_mass_failure_is_a_condition_read_back_for_its_events() {
        let c = cr(json!({"image": "x", "nodes": 3, "replicationFactor": 2}));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let mut d = decision(memory.clone(), ClusterPhase::Replacing, None);
        d.mass_failure = Some(marekvs_core::MassFailure {
            down: vec![1, 2],
            members: 3,
            replication_factor: 2,
        });
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        let mf = st
            .conditions
            .iter()
            .find(|c| c.type_ == MASS_FAILURE)
            .unwrap();
        assert_eq!(
            (mf.status.as_str(), mf.reason.as_str()),
            ("True", REASON_MEMBERS_DOWN)
        );
        assert!(
            mf.message
                .starts_with("2 of 3 members down (demo-1, demo-2) with replicationFactor 2"),
            "{}",
            mf.message
        );
        assert!(reported(&st).mass_failure);
        let d = decision(memory, ClusterPhase::Healthy, None);
        let st = status_of(&c, &d, &sizing, &BTreeMap::new(), now);
        assert!(!reported(&st).mass_failure);
        let mf = st
            .conditions
            .iter()
            .find(|c| c.type_ == MASS_FAILURE)
            .unwrap();
        assert_eq!(mf.status, "False");
    }

    /// Kept volumes of non-members, with when they left and whether they are reusable; a
    /// later pass over the same world yields the same list (no age that would need a write).
    #[test]
    fn kept_volumes_list_non_members_with_their_absence_and_reusability() {
        let c = cr(json!({"image": "x", "nodes": 3,
            "storage": {"size": "1Gi", "staleVolumeGraceSeconds": 60}}));
        let sizing = Sizing {
            spec: cluster_spec(&c).unwrap(),
            load: LoadMemory::default(),
            scaling: None,
        };
        let now: Millis = 1_700_000_000_000;
        let memory = Memory {
            members: [0, 1, 2].into(),
            ..Memory::default()
        };
        let kept = |since: Option<Millis>| MemberObs {
            pod: None,
            pvc: Some(marekvs_core::PvcObs {
                uid: "v".into(),
                absent_since: since,
                ..Default::default()
            }),
            ..MemberObs::default()
        };
        let mut observed: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, scraped(3, 0))).collect();
        observed.insert(3, kept(Some(now - 30_000)));
        observed.insert(4, kept(Some(now - 61_000)));
        observed.insert(5, kept(None));
        let d = decision(memory, ClusterPhase::Healthy, None);
        let st = status_of(&c, &d, &sizing, &observed, now);
        type Row<'a> = (&'a str, &'a str, Option<Millis>, Option<Millis>, bool);
        let summary: Vec<Row> = st
            .kept_volumes
            .iter()
            .map(|k| {
                (
                    k.name.as_str(),
                    k.member.as_str(),
                    k.absent_since.as_ref().map(from_time),
                    k.stale_at.as_ref().map(from_time),
                    k.reusable,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "data-demo-3",
                    "demo-3",
                    Some(now - 30_000),
                    Some(now + 30_000),
                    true
                ),
                (
                    "data-demo-4",
                    "demo-4",
                    Some(now - 61_000),
                    Some(now - 1_000),
                    false
                ),
                ("data-demo-5", "demo-5", None, None, true),
            ]
        );
        let later = status_of(&c, &d, &sizing, &observed, now + 10_000);
        assert_eq!(later.kept_volumes, st.kept_volumes);
    }
}
