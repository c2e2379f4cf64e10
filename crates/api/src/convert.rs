//! Exhaustive conversions between the status enums and the core's: a variant added on either
//! side fails to compile until both sides know it. No string parsing, no fallback.

use crate::{
    BlockReason, ClusterPhase, LookAlikeKind, LookAlikeStatus, MemberPhase, Moving, QuietReset,
    RemovalStep, RolloutReason, RolloutStep, UpgradeStep, VictimReason, WindowLossCause,
};

/// `From` both ways between two enums with the same unit variants.
macro_rules! same_variants {
    ($api:ident <=> $core:ident { $($v:ident),+ $(,)? }) => {
        impl From<$api> for marekvs_core::$core {
            fn from(x: $api) -> Self {
                match x {
                    $($api::$v => marekvs_core::$core::$v,)+
                }
            }
        }
        impl From<marekvs_core::$core> for $api {
            fn from(x: marekvs_core::$core) -> Self {
                match x {
                    $(marekvs_core::$core::$v => $api::$v,)+
                }
            }
        }
    };
}

same_variants!(ClusterPhase <=> ClusterPhase {
    Reconciling, Healthy, ScalingUp, ScalingDown, Replacing, Updating, Paused, Blocked,
    Hibernated,
});
same_variants!(MemberPhase <=> MemberPhase {
    Joining, Active, Unready, Replacing, Draining, Leaving, Updating, Fenced, Hibernated,
});
same_variants!(RemovalStep <=> RemovalStep { Draining, HandingOff, Deleting, Settling });
same_variants!(RolloutStep <=> RollStep { Draining, HandingOff, Deleting, Rejoining });
same_variants!(UpgradeStep <=> UpgradeStep { Flushing, Stopping, Starting });
same_variants!(VictimReason <=> VictimReason { UserChosen, NotReady, HighestOrdinal, NeverStarted });
same_variants!(BlockReason <=> BlockReason {
    NotAllReady, MetricsUnavailable, Underreplicated, JoinPending, ViewsNotConverged,
    RepairInProgress, Replacing, HandoffTimeout, Paused, LookAlike, Fenced, WakeRefused,
    LeaverBacklog, SingleCopy, PodRefused, PasswordRefused, DowngradeNotAllowed,
});
same_variants!(LookAlikeKind <=> ObjectKind { Pod, PersistentVolumeClaim });
same_variants!(WindowLossCause <=> WindowLossCause { Restarted, RingAtCap });
same_variants!(QuietReset <=> QuietReset {
    FirstSeen, ClientInput, Restarted, Shipping, ViewChanged, Unknown,
});

impl From<&LookAlikeStatus> for marekvs_core::LookAlikeSeen {
    fn from(x: &LookAlikeStatus) -> Self {
        marekvs_core::LookAlikeSeen {
            kind: x.kind.into(),
            name: x.name.clone(),
            member: x.member.clone(),
            why: x.why.clone(),
        }
    }
}

impl From<&marekvs_core::LookAlikeSeen> for LookAlikeStatus {
    fn from(x: &marekvs_core::LookAlikeSeen) -> Self {
        LookAlikeStatus {
            kind: x.kind.into(),
            name: x.name.clone(),
            member: x.member.clone(),
            why: x.why.clone(),
        }
    }
}

/// A rollout's reason as status records it: the fresh volume's old PVC uid goes to
/// `rollout.replacedPvc` ([`replaced_pvc`]).
impl From<&marekvs_core::RollReason> for RolloutReason {
    fn from(x: &marekvs_core::RollReason) -> Self {
        match x {
            marekvs_core::RollReason::SpecChanged => RolloutReason::SpecChanged,
            marekvs_core::RollReason::VolumeRequested { .. } => RolloutReason::VolumeRequested,
            marekvs_core::RollReason::RestartRequested => RolloutReason::RestartRequested,
            marekvs_core::RollReason::NodeDrained { .. } => RolloutReason::NodeDrained,
        }
    }
}

/// The uid of the volume a rollout leaves, for `rollout.replacedPvc`.
pub fn replaced_pvc(x: &marekvs_core::RollReason) -> Option<String> {
    match x {
        marekvs_core::RollReason::SpecChanged
        | marekvs_core::RollReason::RestartRequested
        | marekvs_core::RollReason::NodeDrained { .. } => None,
        marekvs_core::RollReason::VolumeRequested { pvc } => Some(pvc.clone()),
    }
}

/// The node a rollout moves its member off, for `rollout.node`.
pub fn drained_node(x: &marekvs_core::RollReason) -> Option<String> {
    match x {
        marekvs_core::RollReason::NodeDrained { node } => Some(node.clone()),
        marekvs_core::RollReason::SpecChanged
        | marekvs_core::RollReason::RestartRequested
        | marekvs_core::RollReason::VolumeRequested { .. } => None,
    }
}

/// A rollout's reason read back from status, with its `replacedPvc` and `node`. `None` for a
/// move to a fresh volume without the volume it leaves, or off a drained node without the
/// node: no operator writes either, and such a record is dropped rather than guessed.
pub fn roll_reason(
    reason: RolloutReason,
    replaced_pvc: Option<&str>,
    node: Option<&str>,
) -> Option<marekvs_core::RollReason> {
    Some(match reason {
        RolloutReason::SpecChanged => marekvs_core::RollReason::SpecChanged,
        RolloutReason::VolumeRequested => marekvs_core::RollReason::VolumeRequested {
            pvc: replaced_pvc?.to_string(),
        },
        RolloutReason::RestartRequested => marekvs_core::RollReason::RestartRequested,
        RolloutReason::NodeDrained => marekvs_core::RollReason::NodeDrained {
            node: node?.to_string(),
        },
    })
}

impl From<Moving> for marekvs_core::Moving {
    fn from(x: Moving) -> Self {
        match x {
            // Stored by an older operator: its hold is evaluated again on the next pass.
            Moving::ReplicationRing | Moving::AntiEntropy => marekvs_core::Moving::AntiEntropy,
            Moving::ClientTraffic => marekvs_core::Moving::ClientTraffic,
            Moving::Shipping => marekvs_core::Moving::Shipping,
            Moving::Bootstraps => marekvs_core::Moving::Bootstraps,
            Moving::Repairs => marekvs_core::Moving::Repairs,
            Moving::Views => marekvs_core::Moving::Views,
            Moving::Other => marekvs_core::Moving::Other,
        }
    }
}

impl From<marekvs_core::Moving> for Moving {
    fn from(x: marekvs_core::Moving) -> Self {
        match x {
            marekvs_core::Moving::AntiEntropy => Moving::AntiEntropy,
            marekvs_core::Moving::ClientTraffic => Moving::ClientTraffic,
            marekvs_core::Moving::Shipping => Moving::Shipping,
            marekvs_core::Moving::Bootstraps => Moving::Bootstraps,
            marekvs_core::Moving::Repairs => Moving::Repairs,
            marekvs_core::Moving::Views => Moving::Views,
            marekvs_core::Moving::Other => Moving::Other,
        }
    }
}

impl RemovalStep {
    /// The name, as the member's `Draining` condition gives it as its reason.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalStep::Draining => "Draining",
            RemovalStep::HandingOff => "HandingOff",
            RemovalStep::Deleting => "Deleting",
            RemovalStep::Settling => "Settling",
        }
    }
}

impl RolloutStep {
    /// The name, as the member's `Draining` condition gives it as its reason.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutStep::Draining => "Draining",
            RolloutStep::HandingOff => "HandingOff",
            RolloutStep::Deleting => "Deleting",
            RolloutStep::Rejoining => "Rejoining",
        }
    }
}

impl BlockReason {
    /// The name as status and the `Blocked` condition's reason show it.
    pub fn as_str(self) -> &'static str {
        marekvs_core::BlockReason::from(self).as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hold stored by an operator before gate v3 still reads, as the rounds it now waits on;
    /// every current value survives a round trip.
    #[test]
    fn a_stored_replication_ring_hold_reads_as_anti_entropy() {
        let old: Moving = serde_json::from_value(serde_json::json!("ReplicationRing")).unwrap();
        assert_eq!(
            marekvs_core::Moving::from(old),
            marekvs_core::Moving::AntiEntropy
        );
        for m in [
            marekvs_core::Moving::AntiEntropy,
            marekvs_core::Moving::ClientTraffic,
            marekvs_core::Moving::Bootstraps,
            marekvs_core::Moving::Repairs,
            marekvs_core::Moving::Views,
            marekvs_core::Moving::Other,
        ] {
            let api = Moving::from(m);
            assert_eq!(marekvs_core::Moving::from(api), m);
            assert_eq!(serde_json::to_value(api).unwrap(), m.as_str());
        }
        for q in [
            marekvs_core::QuietReset::FirstSeen,
            marekvs_core::QuietReset::ClientInput,
            marekvs_core::QuietReset::Restarted,
            marekvs_core::QuietReset::Shipping,
            marekvs_core::QuietReset::ViewChanged,
            marekvs_core::QuietReset::Unknown,
        ] {
            assert_eq!(marekvs_core::QuietReset::from(QuietReset::from(q)), q);
        }
        for c in [
            marekvs_core::WindowLossCause::Restarted,
            marekvs_core::WindowLossCause::RingAtCap,
        ] {
            assert_eq!(
                marekvs_core::WindowLossCause::from(WindowLossCause::from(c)),
                c
            );
        }
    }

    /// Every value survives a round trip, and its JSON is the name the core gives it.
    #[test]
    fn status_enums_round_trip_and_serialize_as_their_names() {
        for b in [
            marekvs_core::BlockReason::NotAllReady,
            marekvs_core::BlockReason::MetricsUnavailable,
            marekvs_core::BlockReason::Underreplicated,
            marekvs_core::BlockReason::JoinPending,
            marekvs_core::BlockReason::ViewsNotConverged,
            marekvs_core::BlockReason::RepairInProgress,
            marekvs_core::BlockReason::Replacing,
            marekvs_core::BlockReason::HandoffTimeout,
            marekvs_core::BlockReason::Paused,
            marekvs_core::BlockReason::LookAlike,
            marekvs_core::BlockReason::Fenced,
            marekvs_core::BlockReason::WakeRefused,
            marekvs_core::BlockReason::LeaverBacklog,
            marekvs_core::BlockReason::SingleCopy,
            marekvs_core::BlockReason::PodRefused,
            marekvs_core::BlockReason::PasswordRefused,
            marekvs_core::BlockReason::DowngradeNotAllowed,
        ] {
            let api = BlockReason::from(b);
            assert_eq!(marekvs_core::BlockReason::from(api), b);
            assert_eq!(serde_json::to_value(api).unwrap(), b.as_str());
        }
        for p in [
            marekvs_core::ClusterPhase::Reconciling,
            marekvs_core::ClusterPhase::Healthy,
            marekvs_core::ClusterPhase::ScalingUp,
            marekvs_core::ClusterPhase::ScalingDown,
            marekvs_core::ClusterPhase::Replacing,
            marekvs_core::ClusterPhase::Updating,
            marekvs_core::ClusterPhase::Paused,
            marekvs_core::ClusterPhase::Blocked,
            marekvs_core::ClusterPhase::Hibernated,
        ] {
            let api = ClusterPhase::from(p);
            assert_eq!(marekvs_core::ClusterPhase::from(api), p);
            assert_eq!(serde_json::to_value(api).unwrap(), p.as_str());
        }
        for s in [
            marekvs_core::RollStep::Draining,
            marekvs_core::RollStep::HandingOff,
            marekvs_core::RollStep::Deleting,
            marekvs_core::RollStep::Rejoining,
        ] {
            let api = RolloutStep::from(s);
            assert_eq!(marekvs_core::RollStep::from(api), s);
            assert_eq!(serde_json::to_value(api).unwrap(), api.as_str());
        }
        for s in [
            marekvs_core::RemovalStep::Draining,
            marekvs_core::RemovalStep::HandingOff,
            marekvs_core::RemovalStep::Deleting,
            marekvs_core::RemovalStep::Settling,
        ] {
            let api = RemovalStep::from(s);
            assert_eq!(marekvs_core::RemovalStep::from(api), s);
            assert_eq!(serde_json::to_value(api).unwrap(), api.as_str());
        }
    }

    /// A rollout's reason survives status, its fresh volume's old PVC with it; a fresh-volume
    /// move recorded without it is dropped, not guessed.
    #[test]
    fn a_rollout_reason_round_trips_through_status() {
        use marekvs_core::RollReason;
        for r in [
            RollReason::SpecChanged,
            RollReason::VolumeRequested {
                pvc: "uid-1".into(),
            },
            RollReason::RestartRequested,
            RollReason::NodeDrained {
                node: "node-1".into(),
            },
        ] {
            let stored = RolloutReason::from(&r);
            assert_eq!(
                roll_reason(
                    stored,
                    replaced_pvc(&r).as_deref(),
                    drained_node(&r).as_deref()
                ),
                Some(r)
            );
        }
        assert_eq!(
            roll_reason(RolloutReason::VolumeRequested, None, None),
            None
        );
        assert_eq!(roll_reason(RolloutReason::NodeDrained, None, None), None);
    }

    #[test]
    fn a_look_alike_round_trips_through_status() {
        for kind in [
            marekvs_core::ObjectKind::Pod,
            marekvs_core::ObjectKind::PersistentVolumeClaim,
        ] {
            let seen = marekvs_core::LookAlikeSeen {
                kind,
                name: "data-demo-2".into(),
                member: "demo-2".into(),
                why: "it has no controller".into(),
            };
            let status = crate::LookAlikeStatus::from(&seen);
            // The kind is stored under the core's name (an Event names it the same way).
            assert_eq!(
                serde_json::to_value(status.kind).unwrap(),
                serde_json::json!(format!("{kind:?}"))
            );
            assert_eq!(marekvs_core::LookAlikeSeen::from(&status), seen);
        }
    }

    #[test]
    fn an_unknown_value_is_an_error_not_a_default() {
        let e = serde_json::from_value::<VictimReason>(serde_json::json!("Whim")).unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }
}
