//! Properties of the autoscaler over arbitrary load and disk histories.

use std::collections::BTreeMap;

use marekvs_core::autoscale::*;
use marekvs_core::{Disk, Millis};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Whatever the load does: always within bounds, never more than one member down per
    /// stabilization window, never down while the load is at or above 60 % of the survivors'
    /// target or the fill is unknown or too high, and never up within the cooldown.
    #[test]
    fn bounded_and_stable(
        min in 2u32..6, span in 0u32..6, rf_floor in 2u32..5, initial in 2u32..12,
        target in 100u32..5000,
        steps in prop::collection::vec((prop::option::weighted(0.9, 0u32..40_000), 1i64..30_000, prop::option::weighted(0.95, 0u32..100)), 1..80),
    ) {
        let policy = Policy {
            min_nodes: min, max_nodes: min + span, target_ops_per_node: f64::from(target),
            scale_down_stabilization_ms: 60_000, scale_up_cooldown_ms: 20_000, disk_high_water: 0.8,
        };
        let floor = min.max(rf_floor);
        let ceiling = (min + span).max(floor);
        let mut mem = ScaleMemory::default();
        let mut members = initial.clamp(floor, ceiling);
        let mut now: Millis = 0;
        let mut last_down: Option<Millis> = None;
        let mut last_change: Option<Millis> = None;
        for (ops, dt, fill) in steps {
            now += dt;
            let disks: BTreeMap<u32, Option<Disk>> = (0..members)
                .map(|o| (o, fill.map(|f| Disk { used_bytes: u64::from(f) * 10, total_bytes: 1000 })))
                .collect();
            let ops = ops.map(f64::from);
            let before = mem.desired.unwrap_or(initial).clamp(floor, ceiling);
            let d = decide_size(&ScaleInput {
                policy: &policy, rf_floor, initial, members, ops_per_sec: ops,
                disks: &disks, memory: &mem, now,
            });
            prop_assert!(d.desired >= floor && d.desired <= ceiling, "{} outside [{floor}, {ceiling}]", d.desired);
            if d.desired < before {
                prop_assert_eq!(d.desired, before - 1, "one member at a time");
                prop_assert!(last_down.is_none_or(|t| now - t >= 60_000), "two removals in one window");
                let ops = ops.expect("a removal needs a load figure");
                prop_assert!(ops < 0.6 * f64::from(target) * f64::from(d.desired));
                let f = fill.expect("a removal needs the fill");
                prop_assert!(f64::from(f) / 100.0 * f64::from(members) / f64::from(d.desired) < 0.8);
                prop_assert_eq!(members, before, "the cluster had reached the last size");
                last_down = Some(now);
                last_change = Some(now);
            }
            if d.desired > before {
                prop_assert!(last_change.is_none_or(|t| now - t >= 20_000), "up within the cooldown");
                last_change = Some(now);
            }
            mem = d.memory;
            // The cluster follows, sometimes late.
            if dt % 3 != 0 {
                members = d.desired;
            }
        }
    }
}
