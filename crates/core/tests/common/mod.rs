//! What the core's integration tests share.

use std::collections::BTreeSet;

use marekvs_core::ClusterSpec;

/// A cluster `demo` of `nodes` members with replication factor `rf`: 3 s settle window, 60 s
/// hand-off timeout, kept volumes, the default stale-volume grace (1 h), not paused.
pub fn spec(nodes: u32, rf: u32) -> ClusterSpec {
    ClusterSpec {
        name: "demo".into(),
        nodes,
        replication_factor: rf,
        remove_first: BTreeSet::new(),
        reclaim_pvcs: false,
        settle_ms: 3_000,
        handoff_timeout_ms: 60_000,
        paused: false,
        stale_volume_grace_ms: 3_600_000,
        hibernation: false,
        fresh_volumes_on_wake: false,
        scale_up_batch: marekvs_core::SCALE_UP_BATCH,
        whole_cluster_upgrade: false,
        image_release: None,
        allow_downgrade: false,
        fenced: Default::default(),
    }
}
