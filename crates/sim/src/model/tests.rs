//! Tests of the model, one or more per behaviour of the real node it follows.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn settings() -> Settings {
    Settings {
        partitions: 256,
        copy_rate_per_sec: 512.0,
        ..Settings::default()
    }
}

/// Settings without silent skips, so tests of other things are exact.
fn exact() -> Settings {
    Settings {
        ring_skip_fraction: 0.0,
        ..settings()
    }
}

/// Run the model from `from` to `to` in 100 ms ticks.
fn run(c: &mut Cluster, from: f64, to: f64) {
    let mut t = from;
    while t <= to + 1e-9 {
        c.tick(secs(t));
        t += 0.1;
    }
}

fn spec(i: usize, rf: usize) -> MemberSpec {
    MemberSpec {
        key: member(i),
        node_id: i.to_string(),
        replicas_n: rf,
        volume: format!("vol-{i}"),
        disk_bytes: 1 << 30,
        faults: Faults::default(),
        addr: format!("127.50.0.{i}"),
        version: crate::model::MODELLED_VERSION.into(),
    }
}

fn boot_with(settings: Settings, n: usize, rf: usize) -> Cluster {
    let mut c = Cluster::new(settings, 7);
    for i in 0..n {
        c.start_member(secs(0.0), spec(i, rf));
    }
    run(&mut c, 0.0, 20.0);
    c
}

fn boot(n: usize, rf: usize) -> Cluster {
    boot_with(exact(), n, rf)
}

fn member(i: usize) -> String {
    format!("ns/demo-{i}")
}

fn figure(c: &Cluster, t: f64, i: usize) -> MemberFigures {
    c.figures(secs(t), &member(i)).expect("running")
}

fn owned_sets(c: &mut Cluster, n: usize) -> Vec<Vec<u32>> {
    (0..n).map(|i| c.owned(&member(i))).collect()
}

/// Owners of `key`'s partition as member `i` sees them, by node index.
fn owners(c: &Cluster, i: usize, key: &[u8]) -> Vec<usize> {
    let m = &c.members[&member(i)];
    let pid = partition_of(key, c.settings.partitions);
    placement::owners_of(&placement::candidates(&m.view), m.replicas_n, pid)
        .into_iter()
        .map(|o| o.parse().unwrap())
        .collect()
}

/// A key whose owners (in member 0's view) are exactly `want`, in any order.
fn key_owned_by(c: &Cluster, want: &[usize]) -> Vec<u8> {
    (0..100_000)
        .map(|i| format!("k-{i}").into_bytes())
        .find(|k| {
            let mut o = owners(c, 0, k);
            o.sort();
            o == want
        })
        .expect("such a key")
}

/// What member `i`'s volume holds for `key` (no read-through).
fn on_volume(c: &Cluster, i: usize, key: &[u8]) -> Option<Vec<u8>> {
    let m = &c.members[&member(i)];
    let pid = partition_of(key, c.settings.partitions);
    c.volumes[&m.volume]
        .entry(pid, key)
        .and_then(|e| e.value.as_ref().map(|v| v.to_vec()))
}

#[test]
fn a_fresh_cluster_bootstraps_to_active_and_converged_views() {
    let c = boot(3, 2);
    for i in 0..3 {
        let f = figure(&c, 20.0, i);
        assert_eq!(f.phase, Some(NodePhase::Active));
        assert!(f.ready);
        assert_eq!(f.view_members, 3);
        assert_eq!(f.mesh_peers, 2);
        assert_eq!(f.underreplicated_partitions, 0);
        assert_eq!(f.join_gate_pending_pids, 0);
        assert_eq!(f.held_partitions, f.owned_partitions);
    }
    let owned: u64 = (0..3).map(|i| figure(&c, 20.0, i).owned_partitions).sum();
    assert_eq!(owned, 2 * 256, "every partition on two owners");
    assert_eq!(c.lost_partitions_total, 0);
}

// 1. The ring is occupancy; shipping is apart.

#[test]
fn ring_occupancy_never_returns_to_zero_after_a_write() {
    let mut c = boot(3, 2);
    let k = key_owned_by(&c, &[1, 2]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    let mut t = 20.1;
    while t < 80.0 {
        c.tick(secs(t));
        if t > 22.5 {
            let rings: Vec<u64> = (0..3).map(|i| figure(&c, t, i).ring_ops).collect();
            assert_eq!(rings, [1, 1, 1], "the write and its two applies, at {t:.1}");
        }
        t += 0.1;
    }
    let f = figure(&c, 80.0, 0);
    assert_eq!(
        f.ring_bytes,
        (k.len() + 1) as u64 + RING_ENTRY_OVERHEAD_BYTES
    );
    assert_eq!(f.repl_ops_sent_total, 2);
    assert_eq!(figure(&c, 80.0, 1).repl_ops_applied_total, 1);
    // A restart empties it.
    c.kill(secs(80.0), &member(1));
    c.start_member(secs(81.0), spec(1, 2));
    run(&mut c, 80.1, 90.0);
    assert_eq!(figure(&c, 90.0, 1).ring_ops, 0);
}

#[test]
fn the_ring_evicts_only_past_its_capacity() {
    let mut c = boot_with(
        Settings {
            ring_capacity_ops: 50,
            ..exact()
        },
        3,
        2,
    );
    for i in 0..120 {
        c.set(secs(20.0), &member(0), format!("e-{i}").as_bytes(), b"v")
            .unwrap();
    }
    run(&mut c, 20.1, 23.0);
    assert_eq!(figure(&c, 23.0, 0).ring_ops, 50);
}

#[test]
fn received_writes_are_never_relayed() {
    let mut c = boot(4, 2);
    let k = key_owned_by(&c, &[1, 2]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    run(&mut c, 20.1, 21.0);
    assert_eq!(figure(&c, 21.0, 0).repl_ops_sent_total, 2);
    for i in 1..4 {
        assert_eq!(figure(&c, 21.0, i).repl_ops_sent_total, 0);
    }
    assert_eq!(on_volume(&c, 3, &k), None, "a non-owner gets nothing");
}

#[test]
fn load_above_the_ship_rate_waits_in_the_ring_and_gaps_past_its_capacity() {
    let mut c = boot_with(
        Settings {
            ring_ops_per_sec: 10.0,
            ring_capacity_ops: 40,
            ae_interval_ms: 1_000_000,
            ..exact()
        },
        3,
        2,
    );
    let keys: Vec<Vec<u8>> = (0..100).map(|i| format!("g-{i}").into_bytes()).collect();
    for k in &keys {
        c.set(secs(20.0), &member(0), k, b"v").unwrap();
    }
    run(&mut c, 20.1, 40.0);
    // Everything past the first 60 that fell out of the ring unshipped never reached an
    // owner other than its origin.
    let reached = |c: &Cluster| {
        keys.iter()
            .filter(|k| {
                owners(c, 0, k)
                    .into_iter()
                    .filter(|o| *o != 0)
                    .all(|o| on_volume(c, o, k).is_some())
            })
            .count()
    };
    let before = reached(&c);
    assert!(
        (10..100).contains(&before),
        "the first second's worth shipped, the evicted ones gapped: {before}"
    );
    // Anti-entropy brings the rest.
    c.settings.ae_interval_ms = 5000;
    for i in 0..3 {
        c.members.get_mut(&member(i)).unwrap().next_ae_ms = 41_000;
    }
    run(&mut c, 40.1, 70.0);
    assert_eq!(reached(&c), 100);
}

/// `marekvs_repl_inflight_bytes` reads above 0 at every refresh while a backlog ships behind
/// the window, and 0 once it shipped (on real members: 4.2-4.3 MB for 40 s after 50,000 SETs
/// of 1 KiB).
#[test]
fn inflight_bytes_stay_above_zero_while_a_backlog_ships_and_return_to_zero() {
    let mut c = boot_with(
        Settings {
            ring_ops_per_sec: 10.0,
            ae_interval_ms: 1_000_000,
            ..exact()
        },
        3,
        2,
    );
    for i in 0..60 {
        c.set(secs(20.0), &member(0), format!("b-{i}").as_bytes(), b"v")
            .unwrap();
    }
    let mut readings = Vec::new();
    let mut t = 20.1;
    while t < 40.0 {
        c.tick(secs(t));
        readings.push((t, figure(&c, t, 0).repl_inflight_bytes));
        t += 0.5;
    }
    // 60 entries at 10 a second: shipping until about 26 s, the gauge refreshed every 2 s.
    let shipping: Vec<_> = readings
        .iter()
        .filter(|(t, _)| (22.5..25.0).contains(t))
        .collect();
    assert!(
        !shipping.is_empty() && shipping.iter().all(|(_, b)| *b > 0),
        "{readings:?}"
    );
    let after: Vec<_> = readings.iter().filter(|(t, _)| *t > 30.0).collect();
    assert!(after.iter().all(|(_, b)| *b == 0), "{readings:?}");
    for i in 1..3 {
        assert_eq!(
            figure(&c, 39.0, i).repl_inflight_bytes,
            0,
            "received writes ship nothing"
        );
    }
}

/// The real node's pace (crates/sim/tests/traces): 2,000 SETs of 16 B were applied on the
/// other owner within 0.5 s of the writes; a burst of 1 KiB SETs shipped about 4,500 entries a
/// second.
#[test]
fn the_default_ship_pace_is_the_measured_one() {
    let mut c = boot(2, 2);
    for i in 0..2_000 {
        let k = format!("key:{i}");
        c.set(secs(20.0), &member(0), k.as_bytes(), b"0123456789abcdef")
            .unwrap();
    }
    run(&mut c, 20.1, 20.5);
    assert_eq!(
        figure(&c, 20.5, 1).repl_ops_applied_total,
        2_000,
        "small: at once"
    );
    let v = vec![b'x'; 1024];
    for i in 0..20_000 {
        let k = format!("big:{i}");
        c.set(secs(21.0), &member(0), k.as_bytes(), &v).unwrap();
    }
    // The byte bucket holds a second's worth: 1 s of bucket, then 4 s of pace.
    run(&mut c, 21.1, 25.0);
    let shipped = figure(&c, 25.0, 1).repl_ops_applied_total - 2_000;
    assert!(
        (4_000 * 4..=4_800 * 5).contains(&shipped),
        "about 4,500 1 KiB entries a second: {shipped} in 4 s"
    );
}

#[test]
fn a_silently_skipped_write_is_readable_through_an_owner_only_after_an_ae_round() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ..settings()
        },
        3,
        2,
    );
    let k = key_owned_by(&c, &[0, 1]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    let next_round = c.members[&member(0)]
        .next_ae_ms
        .min(c.members[&member(1)].next_ae_ms);
    let before = next_round as f64 / 1000.0 - 0.2;
    run(&mut c, 20.1, before);
    assert_eq!(
        c.get(secs(before), &member(1), &k).unwrap(),
        None,
        "skipped: only its origin has it"
    );
    run(&mut c, before + 0.1, before + 0.5);
    assert_eq!(
        c.get(secs(before + 0.5), &member(1), &k).unwrap(),
        Some(b"v".to_vec())
    );
    assert_eq!(figure(&c, before + 0.5, 1).ae_repair_ops_total, 1);
}

/// Keys `s-0..n` member 1 does not hold, after writing them through member 0 with every
/// ring entry skipped, and running until both members' first round after the writes is over.
fn missing_after_one_round(queue: usize, n: usize) -> (usize, u64) {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ae_queue_capacity: queue,
            ..settings()
        },
        2,
        2,
    );
    for i in 0..n {
        c.set(secs(20.0), &member(0), format!("s-{i}").as_bytes(), b"v")
            .unwrap();
    }
    let round = |c: &Cluster, i: usize| c.members[&member(i)].next_ae_ms as f64 / 1000.0;
    let both = round(&c, 0).max(round(&c, 1)) + 0.5;
    assert!(
        both < round(&c, 0).min(round(&c, 1)) + 5.0,
        "one round each"
    );
    run(&mut c, 20.1, both);
    let missing = (0..n)
        .filter(|i| on_volume(&c, 1, format!("s-{i}").as_bytes()).is_none())
        .count();
    (missing, c.ae_messages_dropped())
}

#[test]
fn a_round_repairs_only_what_fits_its_queues() {
    // 256 partitions, 3,000 keys: about 12 differing buckets a partition, so a round's
    // bucket messages (about 3,000 each way) overflow a queue of 500 but not one of 100,000.
    let (missing, dropped) = missing_after_one_round(100_000, 3_000);
    assert_eq!(
        (missing, dropped),
        (0, 0),
        "everything fits: one round repairs all"
    );
    let (missing, dropped) = missing_after_one_round(500, 3_000);
    assert!(dropped > 0, "a full queue drops messages");
    assert!(
        (500..3_000).contains(&missing),
        "what was dropped waits for a later round: {missing} of 3,000 missing"
    );
}

#[test]
fn a_bucket_message_over_the_frame_limit_is_dropped_and_never_repairs() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            // Above the 2 KiB of a partition's bucket digests, below the large value.
            ae_frame_limit_bytes: 3_000,
            ..settings()
        },
        2,
        2,
    );
    let small = key_owned_by(&c, &[0, 1]);
    c.set(secs(20.0), &member(0), &small, b"v").unwrap();
    let big = b"b".repeat(4_000);
    let large = format!("{}-large", String::from_utf8_lossy(&small));
    c.set(secs(20.0), &member(0), large.as_bytes(), &big)
        .unwrap();
    run(&mut c, 20.1, 60.0);
    assert_eq!(
        on_volume(&c, 1, &small),
        Some(b"v".to_vec()),
        "a small repair goes through"
    );
    assert_eq!(
        on_volume(&c, 1, large.as_bytes()),
        None,
        "its repair exceeds the frame"
    );
    assert!(c.ae_messages_dropped() > 0);
}

#[test]
fn the_default_skip_fraction_is_the_measured_one() {
    let s = Settings::default();
    assert!((s.ring_skip_fraction - 0.0045).abs() < 1e-9);
    let mut c = boot_with(settings(), 2, 2);
    for i in 0..20_000 {
        c.set(secs(20.0), &member(0), format!("s-{i}").as_bytes(), b"v")
            .unwrap();
    }
    c.settings.ring_ops_per_sec = 0.0;
    c.tick(secs(20.1));
    let missing = (0..20_000)
        .filter(|i| on_volume(&c, 1, format!("s-{i}").as_bytes()).is_none())
        .count();
    assert!((40..150).contains(&missing), "about 0.45 %: {missing}");
}

// 2. A Leaving member still owns; nothing moves until it exits.

#[test]
fn drain_changes_no_ownership_until_the_member_exits() {
    let mut c = boot(4, 2);
    let before = owned_sets(&mut c, 4);
    let boots: Vec<u64> = (0..4)
        .map(|i| figure(&c, 20.0, i).bootstraps_completed_total)
        .collect();
    assert!(c.drain(secs(20.0), &member(3)));
    run(&mut c, 20.1, 45.0);
    let f = figure(&c, 45.0, 3);
    assert_eq!(f.phase, Some(NodePhase::Leaving));
    assert!(f.ready, "a Leaving member stays ready");
    assert_eq!(owned_sets(&mut c, 4), before, "the drain moved nothing");
    let after: Vec<u64> = (0..4)
        .map(|i| figure(&c, 45.0, i).bootstraps_completed_total)
        .collect();
    assert_eq!(after, boots, "nothing copied at drain");
    c.terminate(secs(45.0), &member(3));
    run(&mut c, 45.1, 47.5);
    assert!(!c.members[&member(3)].is_up(), "exited");
    assert_eq!(
        owned_sets(&mut c, 3),
        before[..3].to_vec(),
        "not until the views drop it"
    );
    run(&mut c, 47.6, 60.0);
    let now: u64 = (0..3).map(|i| figure(&c, 60.0, i).owned_partitions).sum();
    assert_eq!(now, 2 * 256, "its share moved to the survivors");
    assert_eq!(c.lost_partitions_total, 0);
}

// 3. SIGTERM and kill.

#[test]
fn sigterm_exits_after_two_seconds_with_an_empty_backlog() {
    let mut c = boot(3, 2);
    c.terminate(secs(20.0), &member(2));
    assert_eq!(
        c.members[&member(2)].phase,
        NodePhase::Leaving,
        "Leaving at once"
    );
    run(&mut c, 20.1, 21.9);
    assert!(c.members[&member(2)].is_up());
    run(&mut c, 22.0, 22.1);
    assert!(!c.members[&member(2)].is_up());
    assert_eq!(c.members[&member(2)].exit_code, Some(0));
}

#[test]
fn sigterm_waits_at_most_nine_seconds_for_a_backlog() {
    let mut c = boot_with(
        Settings {
            ring_ops_per_sec: 10.0,
            ..exact()
        },
        3,
        2,
    );
    for i in 0..500 {
        c.set(secs(20.0), &member(0), format!("b-{i}").as_bytes(), b"v")
            .unwrap();
    }
    c.terminate(secs(20.0), &member(0));
    run(&mut c, 20.1, 28.9);
    assert!(c.members[&member(0)].is_up(), "still shipping its backlog");
    run(&mut c, 29.0, 29.1);
    assert!(!c.members[&member(0)].is_up(), "gone at 2 + 7 s");
}

#[test]
fn kill_is_immediate() {
    let mut c = boot(3, 2);
    c.kill(secs(20.0), &member(1));
    assert!(c.figures(secs(20.0), &member(1)).is_none());
    assert_eq!(c.members[&member(1)].exit_code, Some(137));
}

#[test]
fn a_write_through_a_member_killed_before_its_skip_was_repaired_is_lost() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ..settings()
        },
        4,
        2,
    );
    let k = key_owned_by(&c, &[1, 2]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    assert_eq!(
        c.get(secs(20.0), &member(0), &k).unwrap(),
        Some(b"v".to_vec())
    );
    c.kill(secs(20.1), &member(0));
    run(&mut c, 20.1, 80.0);
    for i in 1..4 {
        assert_eq!(c.get(secs(80.0), &member(i), &k).unwrap(), None, "{i}");
    }
}

// 4. Anti-entropy rounds.

#[test]
fn ae_rounds_are_five_to_seven_seconds_apart_and_count_from_the_start() {
    let mut c = Cluster::new(exact(), 11);
    c.start_member(secs(0.0), spec(0, 1));
    let mut starts = Vec::new();
    let mut last = 0;
    let mut t = 0.0;
    while t < 60.0 {
        c.tick(secs(t));
        let rounds = figure(&c, t, 0).ae_rounds_total;
        if rounds != last {
            assert_eq!(rounds, last + 1);
            starts.push(t);
            last = rounds;
        }
        t += 0.1;
    }
    assert!(starts.len() >= 8, "{starts:?}");
    assert!((5.0..7.05).contains(&starts[0]), "{starts:?}");
    for w in starts.windows(2) {
        assert!((4.95..7.05).contains(&(w[1] - w[0])), "{starts:?}");
    }
    assert!(
        starts.windows(2).any(|w| (w[1] - w[0]) > 5.5),
        "jittered: {starts:?}"
    );
    c.kill(secs(60.0), &member(0));
    c.start_member(secs(61.0), spec(0, 1));
    c.tick(secs(61.0));
    assert_eq!(
        figure(&c, 61.0, 0).ae_rounds_total,
        0,
        "counts from 0 again"
    );
}

#[test]
fn anti_entropy_keeps_running_while_leaving() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ..settings()
        },
        3,
        2,
    );
    let k = key_owned_by(&c, &[0, 1]);
    c.drain(secs(20.0), &member(0));
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    run(&mut c, 20.1, 30.0);
    assert_eq!(on_volume(&c, 1, &k), Some(b"v".to_vec()));
}

#[test]
fn stranded_data_is_offered_to_an_owner_every_third_round() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ..settings()
        },
        3,
        1,
    );
    let k = key_owned_by(&c, &[1]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    let mut t = 20.1;
    let reached = loop {
        c.tick(secs(t));
        if on_volume(&c, 1, &k).is_some() {
            break t;
        }
        assert!(t < 45.0, "never offered");
        t += 0.1;
    };
    let rounds = figure(&c, reached, 0).ae_rounds_total;
    assert!(rounds.is_multiple_of(3), "an offer round: {rounds}");
}

#[test]
fn identical_partitions_exchange_nothing() {
    let mut c = boot(3, 2);
    for i in 0..200 {
        c.set(
            secs(20.0),
            &member(i % 3),
            format!("i-{i}").as_bytes(),
            b"v",
        )
        .unwrap();
    }
    run(&mut c, 20.1, 60.0);
    let repairs: Vec<u64> = (0..3)
        .map(|i| figure(&c, 60.0, i).ae_repair_ops_total)
        .collect();
    run(&mut c, 60.1, 100.0);
    let later: Vec<u64> = (0..3)
        .map(|i| figure(&c, 100.0, i).ae_repair_ops_total)
        .collect();
    assert_eq!(repairs, later, "converged: the counters stand still");
}

// 5. Bootstrap only into locally empty partitions, never on a returning member.

#[test]
fn a_fresh_member_bootstraps_and_a_returning_one_does_not() {
    let mut c = boot(3, 2);
    for i in 0..300 {
        c.set(
            secs(20.0),
            &member(i % 3),
            format!("r-{i}").as_bytes(),
            b"v",
        )
        .unwrap();
    }
    run(&mut c, 20.1, 30.0);
    c.start_member(secs(30.0), spec(3, 2));
    run(&mut c, 30.0, 45.0);
    assert!(figure(&c, 45.0, 3).bootstraps_completed_total > 0);
    assert_eq!(figure(&c, 45.0, 3).phase, Some(NodePhase::Active));

    c.kill(secs(45.0), &member(1));
    run(&mut c, 45.1, 46.0);
    c.start_member(secs(46.0), spec(1, 2));
    run(&mut c, 46.0, 80.0);
    let f = figure(&c, 80.0, 1);
    assert_eq!(f.phase, Some(NodePhase::Active));
    assert_eq!(f.bootstraps_completed_total, 0, "it trusts its volume");
    assert!(f.owned_partitions > 0);
}

/// A member that crashed on a fresh volume before it ever turned Active is not a returning
/// member: the node's heartbeat (`alive:last`) is written only while it serves, so its next
/// start bootstraps the partitions still empty.
#[test]
fn a_member_that_never_served_from_its_volume_bootstraps_after_a_restart() {
    let mut c = boot(3, 2);
    for i in 0..300 {
        c.set(
            secs(20.0),
            &member(i % 3),
            format!("n-{i}").as_bytes(),
            b"v",
        )
        .unwrap();
    }
    // A copy rate so slow that the join cannot finish before the crash.
    c.settings.copy_rate_per_sec = 0.5;
    run(&mut c, 20.1, 25.0);
    c.start_member(secs(25.0), spec(3, 2));
    run(&mut c, 25.0, 28.0);
    assert_eq!(figure(&c, 28.0, 3).phase, Some(NodePhase::Joining));
    c.kill(secs(28.0), &member(3));
    c.settings.copy_rate_per_sec = 200.0;
    run(&mut c, 28.1, 29.0);
    c.start_member(secs(29.0), spec(3, 2));
    run(&mut c, 29.0, 60.0);
    let f = figure(&c, 60.0, 3);
    assert_eq!(f.phase, Some(NodePhase::Active));
    assert!(
        f.bootstraps_completed_total > 0,
        "not a returning member: it copies again"
    );
    // Once it served, a restart on the same volume is a returning one.
    c.kill(secs(60.0), &member(3));
    run(&mut c, 60.1, 61.0);
    c.start_member(secs(61.0), spec(3, 2));
    run(&mut c, 61.0, 90.0);
    assert_eq!(figure(&c, 90.0, 3).bootstraps_completed_total, 0);
}

#[test]
fn a_joining_member_is_unready_and_counts_its_gate_down() {
    let mut c = boot(3, 2);
    for i in 0..300 {
        c.set(
            secs(20.0),
            &member(i % 3),
            format!("j-{i}").as_bytes(),
            b"v",
        )
        .unwrap();
    }
    c.settings.copy_rate_per_sec = 20.0;
    run(&mut c, 20.1, 25.0);
    c.start_member(secs(25.0), spec(3, 2));
    run(&mut c, 25.0, 27.0);
    let f0 = figure(&c, 27.0, 3);
    assert!(!f0.ready);
    assert!(f0.join_gate_pending_pids > 0);
    run(&mut c, 27.1, 29.0);
    let f1 = figure(&c, 29.0, 3);
    assert!(f1.join_gate_pending_pids < f0.join_gate_pending_pids);
    assert!(f1.bootstraps_completed_total > 0);
    assert_eq!(f1.owned_partitions, 0, "a Joining member owns nothing");
    run(&mut c, 29.1, 60.0);
    assert!(figure(&c, 60.0, 3).ready);
}

// 6. Reads.

#[test]
fn a_key_held_only_by_a_non_owner_is_not_found_until_an_offer() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ..settings()
        },
        4,
        2,
    );
    let k = key_owned_by(&c, &[1, 2]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    assert_eq!(
        c.get(secs(20.0), &member(0), &k).unwrap(),
        Some(b"v".to_vec()),
        "the member written through keeps its copy"
    );
    assert_eq!(c.get(secs(20.0), &member(1), &k).unwrap(), None);
    assert_eq!(
        c.get(secs(20.0), &member(3), &k).unwrap(),
        None,
        "non-owners are never asked"
    );
    // The first answer is leased for 60 s, even an empty one.
    run(&mut c, 20.1, 50.0);
    assert_eq!(
        c.get(secs(50.0), &member(1), &k).unwrap(),
        Some(b"v".to_vec()),
        "offered by now"
    );
    assert_eq!(c.get(secs(50.0), &member(3), &k).unwrap(), None, "leased");
    run(&mut c, 50.1, 80.5);
    assert_eq!(
        c.get(secs(80.5), &member(3), &k).unwrap(),
        Some(b"v".to_vec()),
        "asked again once the lease ran out"
    );
}

#[test]
fn an_owner_answers_from_its_own_volume_only() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ae_interval_ms: 1_000_000,
            ..settings()
        },
        3,
        2,
    );
    let k = key_owned_by(&c, &[0, 1]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    run(&mut c, 20.1, 25.0);
    assert_eq!(c.get(secs(25.0), &member(1), &k).unwrap(), None);
    // A non-owner asks the primary first; its answer wins, even an empty one, and is merged.
    let pid = partition_of(&k, c.settings.partitions);
    let primary = placement::read_order(&c.members[&member(2)].view, 2, pid)[0].to_string();
    let got = c.get(secs(25.0), &member(2), &k).unwrap();
    assert_eq!(got.is_some(), primary == "0", "primary {primary}");
    assert_eq!(on_volume(&c, 2, &k).is_some(), primary == "0");
}

#[test]
fn deletes_are_tombstones_that_win_over_older_values() {
    let mut c = boot(3, 2);
    c.set(secs(20.0), &member(0), b"a", b"1").unwrap();
    c.set(secs(20.0), &member(0), b"b", b"2").unwrap();
    run(&mut c, 20.1, 21.0);
    assert_eq!(c.live_keys(), 2);
    let deleted = c.del(
        secs(21.0),
        &member(1),
        &[b"a".to_vec(), b"a".to_vec(), b"nope".to_vec()],
    );
    assert_eq!(deleted, Ok(1), "a key given twice counts once");
    assert_eq!(c.get(secs(21.0), &member(1), b"a").unwrap(), None);
    run(&mut c, 21.1, 22.0);
    assert_eq!(c.live_keys(), 1);
    for i in 0..3 {
        if owners(&c, 0, b"a").contains(&i) {
            assert_eq!(c.get(secs(22.0), &member(i), b"a").unwrap(), None);
        }
    }
}

#[test]
fn a_delete_through_an_owner_that_lacks_the_key_writes_no_tombstone() {
    let mut c = boot_with(
        Settings {
            ring_skip_fraction: 1.0,
            ..exact()
        },
        2,
        2,
    );
    let k = key_owned_by(&c, &[0, 1]);
    c.set(secs(20.0), &member(0), &k, b"v").unwrap();
    let next_round = c.members[&member(0)]
        .next_ae_ms
        .min(c.members[&member(1)].next_ae_ms) as f64
        / 1000.0;
    assert!(next_round > 20.3, "no round before the delete");
    run(&mut c, 20.1, 20.2);
    assert_eq!(
        on_volume(&c, 1, &k),
        None,
        "skipped: only its origin has it"
    );
    assert_eq!(
        c.del(secs(20.2), &member(1), std::slice::from_ref(&k)),
        Ok(0)
    );
    run(&mut c, 20.3, next_round + 8.0);
    assert_eq!(
        c.get(secs(next_round + 8.0), &member(1), &k).unwrap(),
        Some(b"v".to_vec()),
        "nothing deleted: the value reaches it by anti-entropy"
    );
}

#[test]
fn a_stopped_member_serves_nothing() {
    let mut c = boot(3, 2);
    c.kill(secs(20.0), &member(2));
    assert_eq!(c.set(secs(20.0), &member(2), b"k", b"v"), Err(NotServing));
    assert_eq!(c.get(secs(20.0), &member(2), b"k"), Err(NotServing));
    assert_eq!(c.get(secs(20.0), &member(9), b"k"), Err(NotServing));
    assert!(c.view(&member(2)).is_err());
}

// 7. Gauges.

#[test]
fn gauges_read_zero_before_the_first_refresh_and_counters_restart() {
    let mut c = boot(3, 2);
    c.set(secs(20.0), &member(1), b"x", b"v").unwrap();
    c.count_command(&member(1), c.boot_of(&member(1)).unwrap(), "set");
    run(&mut c, 20.1, 23.0);
    let f = figure(&c, 23.0, 1);
    assert!(f.ring_ops > 0 && f.view_members == 3 && f.owned_partitions > 0);
    assert_eq!(f.commands.get("set"), Some(&1));
    c.kill(secs(23.0), &member(1));
    c.start_member(secs(24.0), spec(1, 2));
    run(&mut c, 24.0, 25.9);
    let f = figure(&c, 25.9, 1);
    assert_eq!(
        (f.view_members, f.mesh_peers, f.ring_ops, f.effective_rf_min),
        (0, 0, 0, 0),
        "no refresh yet"
    );
    assert!(f.commands.is_empty() && f.ae_rounds_total == 0);
    assert!((f.uptime_seconds - 1.9).abs() < 0.01, "computed at scrape");
    run(&mut c, 26.0, 26.1);
    assert_eq!(figure(&c, 26.1, 1).view_members, 3);
}

// 8. Counters the RESP server feeds.

#[test]
fn connection_counters_belong_to_one_process() {
    let mut c = boot(2, 1);
    let b = c.boot_of(&member(0)).unwrap();
    c.connection_accepted(&member(0), b);
    c.connection_accepted(&member(0), b);
    c.input_bytes(&member(0), b, 14);
    c.connection_closed(&member(0), b);
    let f = figure(&c, 20.0, 0);
    assert_eq!(
        (
            f.connected_clients,
            f.connections_accepted_total,
            f.net_input_bytes_total
        ),
        (1, 2, 14)
    );
    c.kill(secs(20.0), &member(0));
    c.start_member(secs(21.0), spec(0, 1));
    c.connection_closed(&member(0), b);
    assert_eq!(figure(&c, 21.0, 0).connections_closed_total, 0);
}

// 9. RESP only once Active; topology.

/// A drain while joining is lost once the join gate opens, as on the node: the member turns
/// Active and serves RESP (a drain that never let it open would hold every read of its view).
#[test]
fn a_drain_while_joining_is_lost_when_the_member_turns_active() {
    let mut c = Cluster::new(exact(), 3);
    c.start_member(secs(0.0), spec(0, 1));
    run(&mut c, 0.0, 0.5);
    assert!(c.drain(secs(0.5), &member(0)));
    assert!(!c.resp_open(&member(0)), "still joining");
    run(&mut c, 0.5, 10.0);
    assert!(c.resp_open(&member(0)), "its join gate opened");
}

#[test]
fn resp_opens_only_once_active_after_every_start() {
    let mut c = Cluster::new(exact(), 3);
    c.start_member(secs(0.0), spec(0, 1));
    run(&mut c, 0.0, 1.5);
    assert!(!c.resp_open(&member(0)), "Joining");
    run(&mut c, 1.6, 3.0);
    assert!(c.resp_open(&member(0)));
    c.drain(secs(3.0), &member(0));
    assert!(c.resp_open(&member(0)), "stays open while Leaving");
    c.kill(secs(3.0), &member(0));
    c.start_member(secs(4.0), spec(0, 1));
    assert!(!c.resp_open(&member(0)), "closed again after a restart");
}

/// marekvs-repl `join_ready`: with other members in its view but none Active (a cold start),
/// the gate holds until 6 s after the start (`COLD_START_SETTLE`); alone, or with an Active
/// peer, only the 2 s sleep and bootstrap hold it. Real traces: a cold cluster of 2 or 3 reads
/// ready 6.5-7 s after starting, a member restarting among Active peers 2.4 s after.
#[test]
fn a_cold_start_stays_joining_six_seconds_a_start_among_active_peers_two() {
    let mut c = Cluster::new(exact(), 3);
    for i in 0..3 {
        c.start_member(secs(0.0), spec(i, 2));
    }
    run(&mut c, 0.0, 5.9);
    for i in 0..3 {
        assert!(!c.resp_open(&member(i)), "cold: still Joining at 5.9 s");
        assert!(!figure(&c, 5.9, i).ready);
    }
    run(&mut c, 6.0, 6.5);
    for i in 0..3 {
        assert!(c.resp_open(&member(i)), "cold: Active once 6 s passed");
    }
    c.terminate(secs(20.0), &member(1));
    run(&mut c, 6.6, 40.0);
    c.start_member(secs(40.0), spec(1, 2));
    run(&mut c, 40.0, 42.5);
    assert!(
        c.resp_open(&member(1)),
        "among Active peers: after the 2 s sleep"
    );
    // Alone: nobody to settle with.
    let mut alone = Cluster::new(exact(), 3);
    alone.start_member(secs(0.0), spec(0, 1));
    run(&mut alone, 0.0, 2.5);
    assert!(alone.resp_open(&member(0)));
}

#[test]
fn myid_is_the_node_id_in_40_hex_digits() {
    assert_eq!(node_myid("3"), format!("{:040x}", 3));
    assert_eq!(node_myid("65535").len(), 40);
    assert_eq!(node_myid("x"), node_myid("x"));
    assert_eq!(node_myid("x").len(), 40);
}

#[test]
fn a_view_lists_every_peer_with_its_address_and_boot() {
    let mut c = boot(3, 2);
    c.kill(secs(20.0), &member(2));
    let v = c.view(&member(0)).unwrap();
    let peers: Vec<(&str, Option<&str>, bool, Option<u64>)> = v
        .peers
        .iter()
        .map(|p| {
            (
                p.node_id.as_str(),
                p.addr.as_deref(),
                p.myself,
                p.started_ms,
            )
        })
        .collect();
    assert_eq!(
        peers,
        [
            ("0", Some("127.50.0.0"), true, Some(0)),
            ("1", Some("127.50.0.1"), false, Some(0)),
            ("2", Some("127.50.0.2"), false, Some(0)),
        ],
        "a crashed peer stays in the view until it is detected"
    );
    run(&mut c, 20.1, 30.0);
    assert_eq!(c.view(&member(0)).unwrap().peers.len(), 2);
}

// Membership and loss.

#[test]
fn views_lag_and_disagree_after_a_crash() {
    let mut c = boot(4, 2);
    c.kill(secs(20.0), &member(3));
    run(&mut c, 20.1, 22.0);
    for i in 0..3 {
        assert_eq!(figure(&c, 22.0, i).view_members, 4);
    }
    run(&mut c, 22.1, 26.0);
    for i in 0..3 {
        assert_eq!(figure(&c, 26.0, i).view_members, 3);
    }
}

#[test]
fn underreplication_rises_when_fewer_than_n_candidates_remain() {
    let mut c = boot(3, 3);
    c.kill(secs(20.0), &member(2));
    run(&mut c, 20.1, 30.0);
    let f = figure(&c, 30.0, 0);
    assert_eq!(f.underreplicated_partitions, 256);
    assert_eq!(f.effective_rf_min, 2);
}

#[test]
fn removing_two_members_at_once_is_counted_as_loss() {
    let mut c = boot(5, 2);
    c.kill(secs(20.0), &member(3));
    c.kill(secs(20.2), &member(4));
    run(&mut c, 20.3, 22.0);
    assert!(c.lost_partitions_total > 0);
    assert!(c.unavailable_partitions() > 0);
    run(&mut c, 22.1, 30.0);
    assert_eq!(
        c.unavailable_partitions(),
        0,
        "owned again once views dropped them"
    );
}

#[test]
fn a_graceful_one_at_a_time_scale_down_at_rf2_keeps_every_key() {
    let mut c = boot(5, 2);
    let keys: Vec<Vec<u8>> = (0..500).map(|i| format!("d-{i}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        c.set(secs(20.0), &member(i % 5), k, b"v").unwrap();
    }
    let mut t = 20.0;
    for leaver in [4, 3] {
        // Wait until repairs stand still, drain, SIGTERM, wait out the views.
        run(&mut c, t + 0.1, t + 40.0);
        t += 40.0;
        c.drain(secs(t), &member(leaver));
        c.terminate(secs(t + 1.0), &member(leaver));
        run(&mut c, t + 0.1, t + 20.0);
        t += 20.0;
        c.remove_member(secs(t), &member(leaver));
    }
    run(&mut c, t + 0.1, t + 40.0);
    t += 40.0;
    let missing: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| c.get(secs(t), &member(0), k).unwrap().is_none())
        .collect();
    assert!(missing.is_empty(), "{} missing", missing.len());
}

#[test]
fn a_bootstrap_takes_longer_the_more_data_moves() {
    let ticks = |keys: usize| {
        let mut c = boot(3, 2);
        c.settings.copy_rate_per_sec = 256.0;
        c.settings.copy_bytes_per_unit = 256;
        for i in 0..keys {
            c.set(
                secs(20.0),
                &member(i % 3),
                format!("h-{i}").as_bytes(),
                &[7u8; 100],
            )
            .unwrap();
        }
        run(&mut c, 20.1, 25.0);
        c.start_member(secs(25.0), spec(3, 2));
        let mut t = 25.0;
        c.tick(secs(t));
        while !c.members[&member(3)].bootstrap.is_empty() {
            t += 0.1;
            c.tick(secs(t));
            assert!(t < 200.0);
        }
        t - 25.0
    };
    let (empty, full) = (ticks(0), ticks(5000));
    assert!(full > empty + 2.0, "{empty} s without data, {full} s with");
}

/// Many keys, many partitions: a round must stay cheap when little differs.
#[test]
#[ignore = "a measurement: cargo test --release -p marekvs-sim --lib -- --ignored large"]
fn large_cluster_rounds_stay_cheap() {
    let mut c = Cluster::new(
        Settings {
            copy_rate_per_sec: 1e9,
            ..Settings::default()
        },
        5,
    );
    for i in 0..5 {
        c.start_member(secs(0.0), spec(i, 2));
    }
    run(&mut c, 0.0, 20.0);
    let value = vec![7u8; 1024];
    let start = std::time::Instant::now();
    let mut t = 20.0;
    for batch in 0..200 {
        for j in 0..1000 {
            let i = batch * 1000 + j;
            c.set(
                secs(t),
                &member(i % 5),
                format!("big-{i}").as_bytes(),
                &value,
            )
            .unwrap();
        }
        t += 0.1;
        c.tick(secs(t));
    }
    eprintln!("200,000 writes: {:?}", start.elapsed());
    c.settings.ring_ops_per_sec = 0.0;
    let start = std::time::Instant::now();
    run(&mut c, t + 0.1, t + 60.0);
    eprintln!("60 s of ticks after them: {:?}", start.elapsed());
    let start = std::time::Instant::now();
    run(&mut c, t + 60.1, t + 120.0);
    let quiet = start.elapsed();
    eprintln!("60 s more (converged): {quiet:?}");
    let per_member: BTreeMap<String, u64> = (0..5)
        .map(|i| (member(i), figure(&c, t + 120.0, i).ae_rounds_total))
        .collect();
    eprintln!("rounds: {per_member:?}");
    assert!(quiet < Duration::from_secs(5), "{quiet:?}");
}

#[test]
fn an_active_members_unanswered_bootstrap_stays_in_its_join_gauge_once_its_partition_fills() {
    let mut c = boot(4, 2);
    // demo-2 stops; one second later demo-3 too. When demo-0's view drops demo-2 it asks for
    // what it gains, some of it of demo-3, down but still in its view: nobody answers.
    c.kill(secs(20.0), &member(2));
    run(&mut c, 20.1, 21.0);
    c.kill(secs(21.0), &member(3));
    let mut unanswered = None;
    let mut t = 21.1;
    while unanswered.is_none() && t < 40.0 {
        c.tick(secs(t));
        unanswered = c.members[&member(0)].asked.keys().next().copied();
        t += 0.1;
    }
    let pid = unanswered.expect("demo-0 asked demo-3, down, for a partition");
    // A client write fills that partition on demo-0 before it asks again: it never does.
    let key = (0..)
        .map(|i| format!("fill-{i}"))
        .find(|k| partition_of(k.as_bytes(), c.settings.partitions) == pid)
        .expect("a key of the partition");
    c.set(secs(t), &member(0), key.as_bytes(), b"v").unwrap();
    run(&mut c, t, 120.0);
    let f = figure(&c, 120.0, 0);
    assert!(f.ready, "{f:?}");
    assert!(f.join_gate_pending_pids > 0, "{f:?}");
    assert_eq!(
        f.view_members, 2,
        "both gone from its view: ownership settled"
    );
    assert!(c.members[&member(0)].bootstrap.contains(&pid));
    assert_eq!(
        c.members[&member(0)].asked[&pid].1,
        1,
        "asked once, never again"
    );
    // A restart clears it: the gauge counts only this process's requests.
    c.kill(secs(120.0), &member(0));
    c.start_member(secs(121.0), spec(0, 2));
    run(&mut c, 121.0, 160.0);
    assert_eq!(figure(&c, 160.0, 0).join_gate_pending_pids, 0);
}
