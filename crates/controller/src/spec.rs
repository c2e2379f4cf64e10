//! Validate: the object's spec as the core's plain data. The CRD's schema and CEL rules reject
//! bad input at `kubectl apply`; what is left here is what they cannot see.

use kube::ResourceExt;
use marekvs_api::{AutoscaleSpec, MarekvsCluster};
use marekvs_core::ClusterSpec;
use marekvs_core::autoscale::Policy;
use marekvs_core::volumes::StorageWish;

use crate::build;
use crate::error::Error;

pub fn cluster_spec(cr: &MarekvsCluster) -> Result<ClusterSpec, Error> {
    let s = &cr.spec;
    if s.replication_factor < 1 || s.nodes < 1 {
        return Err(Error::InvalidSpec(
            "replicationFactor and nodes must be positive".into(),
        ));
    }
    let name = cr.name_any();
    Ok(ClusterSpec {
        name: name.clone(),
        nodes: s.nodes as u32,
        replication_factor: s.replication_factor as u32,
        remove_first: removal_choices(cr)
            .into_iter()
            .filter_map(|(_, o)| o)
            .collect(),
        reclaim_pvcs: s.reclaim_pvcs,
        settle_ms: i64::from(s.scale_down.settle_seconds.max(1)) * 1000,
        handoff_timeout_ms: i64::from(s.scale_down.handoff_timeout_seconds.max(1)) * 1000,
        paused: s.paused,
        stale_volume_grace_ms: i64::from(s.storage.stale_volume_grace_seconds.max(1)) * 1000,
        hibernation: s.hibernation,
        fresh_volumes_on_wake: s.storage.fresh_volumes_on_wake,
        scale_up_batch: marekvs_core::SCALE_UP_BATCH,
        whole_cluster_upgrade: s
            .upgrade
            .as_ref()
            .is_some_and(|u| u.strategy == marekvs_api::UpgradeStrategy::WholeCluster),
        image_release: marekvs_core::versions::release_of_image(&s.image),
        allow_downgrade: s.upgrade.as_ref().is_some_and(|u| u.allow_downgrade),
        // An entry that names no ordinal of this cluster fences nothing (the CEL rule rejects
        // most at apply time).
        fenced: s
            .fenced_members
            .iter()
            .filter_map(|m| build::ordinal_from_name(&name, "", m))
            .collect(),
    })
}

/// `spec.removeMembers`, each with the ordinal it names when it names one of this cluster.
pub fn removal_choices(cr: &MarekvsCluster) -> Vec<(String, Option<u32>)> {
    let name = cr.name_any();
    cr.spec
        .remove_members
        .iter()
        .map(|m| (m.clone(), build::ordinal_from_name(&name, "", m)))
        .collect()
}

pub fn autoscale_policy(a: &AutoscaleSpec) -> Policy {
    Policy {
        min_nodes: a.min_nodes.max(1) as u32,
        max_nodes: a.max_nodes.max(1) as u32,
        target_ops_per_node: a.target_ops_per_node.max(1) as f64,
        scale_down_stabilization_ms: i64::from(
            a.scale_down_stabilization_seconds.unwrap_or(300).max(0),
        ) * 1000,
        scale_up_cooldown_ms: i64::from(a.scale_up_cooldown_seconds.unwrap_or(60).max(0)) * 1000,
        disk_high_water: f64::from(a.disk_high_water_percent.unwrap_or(80).clamp(10, 99)) / 100.0,
    }
}

pub fn storage_wish(cr: &MarekvsCluster) -> StorageWish {
    StorageWish {
        size: cr.spec.storage.size.clone(),
        class_name: cr.spec.storage.class_name.clone(),
    }
}
