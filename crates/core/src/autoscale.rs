//! The autoscaler: from the members' command counters and disk figures, how many members the
//! cluster should have. Pure: the samples it needs live in the object's status, the clock is
//! passed in, and every answer says why.
//!
//! - Load is the cluster's ops/s from two consecutive samples of each member's
//!   `marekvs_commands_total`, at least [`SAMPLE_INTERVAL_MS`] apart. A member whose counter
//!   went down (it restarted), a member set that changed, or a member not ready or not scraped
//!   discards the sample and starts again; without a rate the autoscaler holds, it never
//!   guesses.
//! - Up: straight to `ceil(ops / targetOpsPerNode)` once the up-cooldown has passed since the
//!   last change; also one member up when any member's volume is at or above the high-water
//!   mark.
//! - Down: one member at a time, only after the load stayed below 60 % of what the remaining
//!   members would be targeted to serve for a whole stabilization window, at most once per
//!   window, never while the fullest volume, grown by `n / (n - 1)` when its share is spread
//!   over the survivors, would reach the high-water mark (or any fill is unknown), and never
//!   while the cluster has not reached the last size asked.
//! - Always within `[max(minNodes, replicationFactor + 1), maxNodes]`.

use std::collections::BTreeMap;

use crate::types::{Disk, Millis};

/// Minimum time between the two samples a rate is computed from.
pub const SAMPLE_INTERVAL_MS: Millis = 10_000;
/// Scale down only while the load would stay below this share of the survivors' target.
pub const SCALE_DOWN_HEADROOM: f64 = 0.6;

#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub min_nodes: u32,
    pub max_nodes: u32,
    pub target_ops_per_node: f64,
    pub scale_down_stabilization_ms: Millis,
    pub scale_up_cooldown_ms: Millis,
    /// Fill ratio (0..1) of a member's volume the cluster must stay below.
    pub disk_high_water: f64,
}

/// Counter totals of the members at one instant, by ordinal.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadSample {
    pub at: Millis,
    pub totals: BTreeMap<u32, u64>,
}

/// Kept in status between reconciles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadMemory {
    pub sample: Option<LoadSample>,
    /// The last rate computed; `None` until two good samples exist.
    pub ops_per_sec: Option<f64>,
}

/// Update the load rate from this pass's counters (`None` for a member not scraped).
pub fn update_load(
    memory: &LoadMemory,
    counters: &BTreeMap<u32, Option<u64>>,
    now: Millis,
) -> LoadMemory {
    let totals: Option<BTreeMap<u32, u64>> =
        counters.iter().map(|(o, c)| c.map(|c| (*o, c))).collect();
    let Some(totals) = totals.filter(|t| !t.is_empty()) else {
        // A member that cannot be read: no signal.
        return LoadMemory::default();
    };
    let current = LoadSample { at: now, totals };
    let Some(prev) = &memory.sample else {
        return LoadMemory {
            sample: Some(current),
            ops_per_sec: None,
        };
    };
    let same_members = prev.totals.keys().eq(current.totals.keys());
    let monotonic = current
        .totals
        .iter()
        .all(|(o, c)| prev.totals.get(o).is_some_and(|p| c >= p));
    if !same_members || !monotonic || now < prev.at {
        // A restarted member (counter reset) or a membership change: start again.
        return LoadMemory {
            sample: Some(current),
            ops_per_sec: None,
        };
    }
    let dt = now - prev.at;
    if dt < SAMPLE_INTERVAL_MS {
        return memory.clone();
    }
    let delta: u64 = current.totals.iter().map(|(o, c)| c - prev.totals[o]).sum();
    if delta == 0 && memory.ops_per_sec == Some(0.0) {
        // Still idle: the old sample gives the same rate, and keeping it keeps the status (and
        // so the API server) untouched while nothing happens.
        return memory.clone();
    }
    LoadMemory {
        sample: Some(current),
        ops_per_sec: Some(delta as f64 * 1000.0 / dt as f64),
    }
}

/// The autoscaler's own memory, kept in status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaleMemory {
    /// The size it asked for last.
    pub desired: Option<u32>,
    pub last_scale_up_at: Option<Millis>,
    pub last_scale_down_at: Option<Millis>,
    /// Since when the load has been low enough to remove a member.
    pub low_since: Option<Millis>,
}

pub struct ScaleInput<'a> {
    pub policy: &'a Policy,
    /// `replicationFactor + 1`.
    pub rf_floor: u32,
    /// `spec.nodes`: the size before the autoscaler has asked for anything.
    pub initial: u32,
    /// How many members the cluster has now.
    pub members: u32,
    pub ops_per_sec: Option<f64>,
    /// Every member's disk figures; `None` for a member that does not report them.
    pub disks: &'a BTreeMap<u32, Option<Disk>>,
    pub memory: &'a ScaleMemory,
    pub now: Millis,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScaleDecision {
    pub desired: u32,
    pub memory: ScaleMemory,
    /// Why it wants this size, in words.
    pub reason: String,
}

pub fn decide_size(input: &ScaleInput) -> ScaleDecision {
    let p = input.policy;
    let now = input.now;
    let floor = p.min_nodes.max(input.rf_floor);
    let ceiling = p.max_nodes.max(floor);
    let clamp = |n: u32| n.clamp(floor, ceiling);
    let current = clamp(input.memory.desired.unwrap_or(input.initial));
    let mut memory = input.memory.clone();
    memory.desired = Some(current);
    let hold = |memory: ScaleMemory, reason: String| ScaleDecision {
        desired: current,
        memory,
        reason,
    };
    let since = |t: Option<Millis>| t.map_or(Millis::MAX, |t| now - t);
    let last_change = since(memory.last_scale_up_at).min(since(memory.last_scale_down_at));

    // Disk: the fullest member, and the fill the survivors would have after one removal
    // (the same data over one member fewer).
    let disks: Option<Vec<Disk>> = input.disks.values().copied().collect();
    let fullest = disks.as_ref().and_then(|d| {
        d.iter()
            .map(|d| d.used_bytes as f64 / d.total_bytes.max(1) as f64)
            .reduce(f64::max)
    });
    let disk_full = fullest.is_some_and(|f| f >= p.disk_high_water);

    // Up.
    let load_want = input
        .ops_per_sec
        .map(|ops| clamp((ops / p.target_ops_per_node).ceil() as u32));
    let disk_want = disk_full.then(|| clamp(current.max(input.members) + 1));
    let up_want = load_want.into_iter().chain(disk_want).max();
    if let Some(want) = up_want.filter(|w| *w > current) {
        memory.low_since = None;
        let why = if disk_want.is_some_and(|d| d >= want) {
            format!(
                "a member's volume is {:.0}% full (high-water mark {:.0}%)",
                fullest.unwrap_or(0.0) * 100.0,
                p.disk_high_water * 100.0
            )
        } else {
            format!(
                "{:.0} ops/s over {:.0} per member",
                input.ops_per_sec.unwrap_or(0.0),
                p.target_ops_per_node
            )
        };
        if last_change < p.scale_up_cooldown_ms {
            return hold(
                memory,
                format!("wants {want} ({why}); holding at {current} until the up-cooldown ends"),
            );
        }
        memory.desired = Some(want);
        memory.last_scale_up_at = Some(now);
        return ScaleDecision {
            desired: want,
            memory,
            reason: format!("scaling up to {want}: {why}"),
        };
    }

    // Down.
    let Some(ops) = input.ops_per_sec else {
        memory.low_since = None;
        return hold(memory, format!("holding at {current}: no load figure yet"));
    };
    if current <= floor {
        memory.low_since = None;
        return hold(
            memory,
            format!("{ops:.0} ops/s; at the floor of {floor} members"),
        );
    }
    let survivors = current - 1;
    let limit = SCALE_DOWN_HEADROOM * p.target_ops_per_node * f64::from(survivors);
    if ops >= limit {
        memory.low_since = None;
        return hold(
            memory,
            format!("{ops:.0} ops/s; {current} members (a removal needs below {limit:.0} ops/s)"),
        );
    }
    // Rendezvous hashing spreads the removed member's share over the survivors: each grows by
    // current / survivors. Judged on the fullest member, so one full volume is never made worse.
    let projected = fullest.map(|f| f * f64::from(current) / f64::from(survivors));
    match projected {
        None => {
            memory.low_since = None;
            return hold(
                memory,
                format!("holding at {current}: volume fill unknown, so a removal is not safe"),
            );
        }
        Some(f) if f >= p.disk_high_water => {
            memory.low_since = None;
            return hold(
                memory,
                format!(
                    "holding at {current}: {survivors} members would be {:.0}% full (high-water mark {:.0}%)",
                    f * 100.0,
                    p.disk_high_water * 100.0
                ),
            );
        }
        Some(_) => {}
    }
    if input.members != current {
        return hold(
            memory,
            format!("{ops:.0} ops/s; waiting for the cluster to reach {current} members"),
        );
    }
    let low_since = *memory.low_since.get_or_insert(now);
    let window = p.scale_down_stabilization_ms;
    if now - low_since < window || since(memory.last_scale_down_at) < window {
        return hold(
            memory,
            format!(
                "{ops:.0} ops/s is below {limit:.0}: removing a member once it stays so for {}s",
                window / 1000
            ),
        );
    }
    memory.desired = Some(survivors);
    memory.last_scale_down_at = Some(now);
    memory.low_since = None;
    ScaleDecision {
        desired: survivors,
        memory,
        reason: format!(
            "scaling down to {survivors}: {ops:.0} ops/s stayed below {limit:.0} for {}s",
            window / 1000
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            min_nodes: 3,
            max_nodes: 8,
            target_ops_per_node: 1000.0,
            scale_down_stabilization_ms: 60_000,
            scale_up_cooldown_ms: 30_000,
            disk_high_water: 0.8,
        }
    }

    fn counters(v: &[(u32, Option<u64>)]) -> BTreeMap<u32, Option<u64>> {
        v.iter().copied().collect()
    }

    #[test]
    fn the_rate_needs_two_samples_an_interval_apart() {
        let m0 = LoadMemory::default();
        let m1 = update_load(&m0, &counters(&[(0, Some(100)), (1, Some(100))]), 0);
        assert_eq!(m1.ops_per_sec, None);
        let m2 = update_load(&m1, &counters(&[(0, Some(200)), (1, Some(200))]), 5_000);
        assert_eq!(m2, m1, "too soon: the first sample is kept");
        let m3 = update_load(&m2, &counters(&[(0, Some(5100)), (1, Some(5100))]), 10_000);
        assert_eq!(m3.ops_per_sec, Some(1000.0));
        assert_eq!(m3.sample.as_ref().unwrap().at, 10_000);
    }

    #[test]
    fn an_idle_cluster_keeps_its_sample_so_its_status_stays_unchanged() {
        let m1 = update_load(&LoadMemory::default(), &counters(&[(0, Some(7))]), 0);
        let m2 = update_load(&m1, &counters(&[(0, Some(7))]), 10_000);
        assert_eq!(m2.ops_per_sec, Some(0.0));
        assert_eq!(
            m2.sample.as_ref().unwrap().at,
            10_000,
            "first idle rate is recorded"
        );
        let m3 = update_load(&m2, &counters(&[(0, Some(7))]), 600_000);
        assert_eq!(m3, m2, "still idle: nothing to record");
        // The first command after a long quiet spell is a rate over that whole spell, and
        // the sample moves on again.
        let m4 = update_load(&m3, &counters(&[(0, Some(6007))]), 610_000);
        assert_eq!(m4.ops_per_sec, Some(10.0));
        assert_eq!(m4.sample.unwrap().at, 610_000);
    }

    #[test]
    fn a_counter_reset_or_a_lost_member_discards_the_sample() {
        let m = LoadMemory {
            sample: Some(LoadSample {
                at: 0,
                totals: [(0, 500), (1, 500)].into(),
            }),
            ops_per_sec: Some(40.0),
        };
        let reset = update_load(&m, &counters(&[(0, Some(900)), (1, Some(3))]), 20_000);
        assert_eq!(reset.ops_per_sec, None, "restarted member: re-baseline");
        assert_eq!(reset.sample.unwrap().at, 20_000);
        let lost = update_load(&m, &counters(&[(0, Some(900)), (1, None)]), 20_000);
        assert_eq!(lost, LoadMemory::default(), "no signal");
        let grown = update_load(
            &m,
            &counters(&[(0, Some(900)), (1, Some(900)), (2, Some(0))]),
            20_000,
        );
        assert_eq!(grown.ops_per_sec, None);
    }

    fn disks(n: u32, fill: f64) -> BTreeMap<u32, Option<Disk>> {
        (0..n)
            .map(|o| {
                (
                    o,
                    Some(Disk {
                        used_bytes: (fill * 1000.0) as u64,
                        total_bytes: 1000,
                    }),
                )
            })
            .collect()
    }

    fn size(
        mem: &ScaleMemory,
        members: u32,
        ops: Option<f64>,
        d: &BTreeMap<u32, Option<Disk>>,
        now: Millis,
    ) -> ScaleDecision {
        decide_size(&ScaleInput {
            policy: &policy(),
            rf_floor: 3,
            initial: 3,
            members,
            ops_per_sec: ops,
            disks: d,
            memory: mem,
            now,
        })
    }

    #[test]
    fn up_jumps_to_the_needed_size_within_bounds_after_the_cooldown() {
        let d = disks(3, 0.1);
        let up = size(&ScaleMemory::default(), 3, Some(4_500.0), &d, 0);
        assert_eq!(up.desired, 5);
        let more = size(&up.memory, 5, Some(50_000.0), &disks(5, 0.1), 10_000);
        assert_eq!(more.desired, 5, "cooldown");
        assert!(more.reason.contains("cooldown"), "{}", more.reason);
        let more = size(&more.memory, 5, Some(50_000.0), &disks(5, 0.1), 40_000);
        assert_eq!(more.desired, 8, "capped at maxNodes");
    }

    #[test]
    fn no_load_figure_holds() {
        let mem = ScaleMemory {
            desired: Some(6),
            ..ScaleMemory::default()
        };
        for now in [0, 100_000, 1_000_000] {
            let d = size(&mem, 6, None, &disks(6, 0.1), now);
            assert_eq!(d.desired, 6);
        }
    }

    #[test]
    fn down_one_member_per_window_only_below_60_percent_of_the_survivors_target() {
        let mut mem = ScaleMemory {
            desired: Some(6),
            ..ScaleMemory::default()
        };
        // 3200 ops/s: ceil says 4, but 3200 >= 0.6 * 1000 * 5 = 3000, so hold at 6.
        let mut now = 0;
        for _ in 0..20 {
            let d = size(&mem, 6, Some(3_200.0), &disks(6, 0.1), now);
            assert_eq!(d.desired, 6);
            mem = d.memory;
            now += 10_000;
        }
        // 2000 ops/s: below 3000, removed only after a full window.
        let mut history = vec![];
        let mut members = 6;
        for _ in 0..40 {
            let d = size(&mem, members, Some(2_000.0), &disks(members, 0.1), now);
            mem = d.memory;
            history.push((now, d.desired));
            members = d.desired; // the cluster follows at once in this test
            now += 10_000;
        }
        let changes: Vec<(Millis, u32)> = history
            .windows(2)
            .filter(|w| w[0].1 != w[1].1)
            .map(|w| w[1])
            .collect();
        // 6→5 (2000 < 3000), 5→4 (2000 < 2400), then 4 holds (2000 >= 1800).
        assert_eq!(changes.iter().map(|c| c.1).collect::<Vec<_>>(), vec![5, 4]);
        assert!(changes[1].0 - changes[0].0 >= 60_000, "one per window");
        assert_eq!(history.last().unwrap().1, 4);
    }

    #[test]
    fn the_disk_signal_scales_up_and_blocks_a_removal_the_survivors_could_not_hold() {
        let mem = ScaleMemory {
            desired: Some(4),
            ..ScaleMemory::default()
        };
        let up = size(&mem, 4, Some(10.0), &disks(4, 0.85), 0);
        assert_eq!(up.desired, 5);
        assert!(up.reason.contains("full"), "{}", up.reason);
        // 4 members at 65%: 3 would be at 87% ≥ 80%: hold however low the load.
        let mut m = mem.clone();
        for now in (0..300_000).step_by(10_000) {
            let d = size(&m, 4, Some(0.0), &disks(4, 0.65), now);
            assert_eq!(d.desired, 4, "{}", d.reason);
            m = d.memory;
        }
        // Unknown fill: never scale down.
        let mut unknown = disks(4, 0.1);
        unknown.insert(2, None);
        let mut m = mem;
        for now in (0..300_000).step_by(10_000) {
            let d = size(&m, 4, Some(0.0), &unknown, now);
            assert_eq!(d.desired, 4);
            m = d.memory;
        }
    }

    #[test]
    fn never_below_the_replication_floor_or_min_nodes() {
        let mut mem = ScaleMemory::default();
        for now in (0..1_000_000).step_by(10_000) {
            let d = decide_size(&ScaleInput {
                policy: &Policy {
                    min_nodes: 2,
                    ..policy()
                },
                rf_floor: 4,
                initial: 9,
                members: mem.desired.unwrap_or(8),
                ops_per_sec: Some(0.0),
                disks: &disks(8, 0.0),
                memory: &mem,
                now,
            });
            assert!(d.desired >= 4 && d.desired <= 8);
            mem = d.memory;
        }
        assert_eq!(mem.desired, Some(4));
    }
}
