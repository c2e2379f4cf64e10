//! The committed traces of real marekvs clusters (`tests/traces/*.json`) and the property
//! checker agree: every property holds on every trace, and the properties each scenario is
//! about do apply there. Then each property is shown to fail on a deliberately wrong version
//! of a real trace (the old model's assumptions: a ring that drains to 0, a drain that moves
//! partitions, gauges right from the first scrape, ...).

use std::path::PathBuf;

use marekvs_sim::trace::format::{Member, Trace, What};
use marekvs_sim::trace::props::{self, Outcome, Verdict};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/traces")
}

fn load(name: &str) -> Trace {
    let path = dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn show(outcomes: &[Outcome]) -> String {
    outcomes
        .iter()
        .map(|o| o.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The properties each scenario must exercise (hold, not merely "not applicable").
const APPLIES: [(&str, &[&str]); 5] = [
    (
        "writes",
        &[
            "ring_holds_writes",
            "ring_holds_applies",
            "ring_never_drains",
            "ae_round_cadence",
            "ae_rounds_since_start",
            "repairs_after_skips",
            "gauges_zero_before_refresh",
            "resp_closed_while_joining",
            "myid_stable",
            "missing_never_grows",
        ],
    ),
    (
        "drain",
        &[
            "ring_holds_writes",
            "ring_holds_applies",
            "ring_never_drains",
            "drain_moves_nothing",
            "sigterm_exit_delay",
            "views_drop_exited",
            "ae_round_cadence",
            "drained_exit_loses_nothing",
        ],
    ),
    (
        "gap",
        &[
            "ring_holds_writes",
            "ring_holds_applies",
            "ring_never_drains",
            "repairs_after_skips",
            "missing_never_grows",
            "ae_round_cadence",
        ],
    ),
    (
        "restart",
        &[
            "sigterm_exit_delay",
            "views_drop_exited",
            "counters_reset_on_restart",
            "returning_member_no_bootstrap",
            "resp_closed_while_joining",
            "myid_stable",
            "generation_changes_on_restart",
            "gauges_zero_before_refresh",
        ],
    ),
    (
        "idle-start",
        &[
            "gauges_zero_before_refresh",
            "resp_closed_while_joining",
            "ae_rounds_since_start",
        ],
    ),
];

#[test]
fn every_property_holds_on_every_real_trace() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(dir()).expect("tests/traces") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable trace");
        let trace: Trace = serde_json::from_str(&text).expect("a trace");
        assert_eq!(trace.marekvs_version, "0.2.0", "{}", path.display());
        assert!(text.len() < 400 * 1024, "{} over 400 KB", path.display());
        let outcomes = props::check_all(&trace);
        assert!(
            outcomes.iter().all(Outcome::holds),
            "{}:\n{}",
            path.display(),
            show(&outcomes)
        );
        if let Some((_, applies)) = APPLIES.iter().find(|(s, _)| *s == trace.scenario) {
            for name in *applies {
                let o = outcomes
                    .iter()
                    .find(|o| o.name == *name)
                    .expect("known property");
                assert_eq!(o.verdict, Verdict::Holds, "{}: {o}", path.display());
            }
        }
        seen.push(trace.scenario);
    }
    seen.sort();
    assert_eq!(seen, ["drain", "gap", "idle-start", "restart", "writes"]);
}

// ----- wrong traces: each property fails -----

fn fails(o: Outcome) {
    assert_eq!(o.verdict, Verdict::Fails, "expected a failure:\n{o}");
}

fn holds(o: Outcome) {
    assert_eq!(o.verdict, Verdict::Holds, "expected it to hold:\n{o}");
}

/// Set series `name` of member `m` to `f(t, old)` wherever `/metrics` answered.
fn rewrite(trace: &mut Trace, m: usize, name: &str, f: impl Fn(u64, u64) -> u64) {
    let member: &mut Member = &mut trace.members[m];
    let col = member.samples.metrics.get_mut(name).expect("series");
    for (v, t) in col.iter_mut().zip(&member.samples.t) {
        if let Some(x) = v {
            *x = f(*t, *x);
        }
    }
}

fn event_time(trace: &Trace, f: impl Fn(&What) -> bool) -> u64 {
    trace.events.iter().find(|e| f(&e.what)).expect("event").t
}

fn writes_end(trace: &Trace) -> u64 {
    event_time(trace, |w| matches!(w, What::WritesEnded { .. }))
}

#[test]
fn a_ring_that_drains_back_to_zero_fails_the_ring_properties() {
    // The old model: ring_ops is the backlog to peers, seen at a refresh right after the
    // writes and back to 0 once they acknowledged.
    let mut t = load("writes");
    let end = writes_end(&t);
    for m in 0..t.members.len() {
        rewrite(
            &mut t,
            m,
            "ring_ops",
            |ts, v| if ts > end + 3_000 { 0 } else { v },
        );
    }
    fails(props::ring_holds_writes(&t));
    fails(props::ring_holds_applies(&t));
    fails(props::ring_never_drains(&t));
}

#[test]
fn a_ring_that_only_holds_part_of_the_applies_fails() {
    let mut t = load("drain");
    rewrite(&mut t, 0, "ring_ops", |_, v| v / 2);
    fails(props::ring_holds_applies(&t));
}

#[test]
fn partitions_moving_at_drain_fail() {
    let mut t = load("drain");
    holds(props::drain_moves_nothing(&t));
    let drain = event_time(&t, |w| matches!(w, What::Drain { .. }));
    let exit = event_time(&t, |w| matches!(w, What::Exit { .. }));
    // The drained member's partitions go to the others at the drain.
    rewrite(&mut t, 0, "cluster_owned_partitions", |ts, v| {
        if ts > drain + 2_000 && ts < exit {
            4096
        } else {
            v
        }
    });
    fails(props::drain_moves_nothing(&t));
}

#[test]
fn a_drained_member_that_turns_unready_fails() {
    let mut t = load("drain");
    let drain = event_time(&t, |w| matches!(w, What::Drain { .. }));
    let s = &mut t.members[2].samples;
    for (r, ts) in s.ready.iter_mut().zip(&s.t) {
        if *ts > drain + 1_000 {
            *r = 503;
        }
    }
    fails(props::drain_moves_nothing(&t));
}

fn move_exit(t: &mut Trace, delay: u64) {
    let term = event_time(t, |w| matches!(w, What::Sigterm { .. }));
    let e = t
        .events
        .iter_mut()
        .find(|e| matches!(e.what, What::Exit { .. }))
        .expect("exit");
    e.t = term + delay;
}

#[test]
fn an_exit_at_once_or_too_late_after_sigterm_fails() {
    let mut t = load("restart");
    holds(props::sigterm_exit_delay(&t));
    move_exit(&mut t, 300);
    fails(props::sigterm_exit_delay(&t));
    let mut t = load("restart");
    move_exit(&mut t, 12_000);
    fails(props::sigterm_exit_delay(&t));
}

#[test]
fn views_that_drop_at_once_or_never_fail() {
    let exit = |t: &Trace| event_time(t, |w| matches!(w, What::Exit { .. }));
    // At once: the first view without member 2 right at its exit.
    let mut t = load("drain");
    holds(props::views_drop_exited(&t));
    let te = exit(&t);
    for v in t.members[0].views.iter_mut().filter(|v| v.t > te) {
        v.t = te + 100;
    }
    fails(props::views_drop_exited(&t));
    // Never.
    let mut t = load("drain");
    let te = exit(&t);
    t.members[1].views.retain(|v| v.t <= te);
    fails(props::views_drop_exited(&t));
    // Owned partitions moving before the view dropped the member.
    let mut t = load("drain");
    let te = exit(&t);
    rewrite(&mut t, 1, "cluster_owned_partitions", |ts, v| {
        if ts > te { 4096 } else { v }
    });
    fails(props::views_drop_exited(&t));
}

#[test]
fn rounds_at_the_wrong_pace_fail() {
    // A round per sample (500 ms).
    let mut t = load("writes");
    let start = t.members[0].samples.t[0];
    rewrite(&mut t, 0, "ae_rounds_total", |ts, _| (ts - start) / 500);
    fails(props::ae_round_cadence(&t));
    fails(props::ae_rounds_since_start(&t));
    // Every 12 s.
    let mut t = load("writes");
    rewrite(&mut t, 1, "ae_rounds_total", |ts, _| ts / 12_000);
    fails(props::ae_round_cadence(&t));
    fails(props::ae_rounds_since_start(&t));
    // A counter that counts something else than rounds since start.
    let mut t = load("idle-start");
    rewrite(&mut t, 2, "ae_rounds_total", |_, v| v + 5);
    fails(props::ae_rounds_since_start(&t));
}

#[test]
fn skipped_writes_never_repaired_fail() {
    let mut t = load("writes");
    holds(props::repairs_after_skips(&t));
    rewrite(&mut t, 1, "ae_repair_ops_total", |_, _| 0);
    fails(props::repairs_after_skips(&t));
    let mut t = load("gap");
    for m in 0..t.members.len() {
        rewrite(&mut t, m, "ae_repair_ops_total", |_, _| 0);
    }
    fails(props::repairs_after_skips(&t));
}

#[test]
fn gauges_right_from_the_first_scrape_fail() {
    let mut t = load("idle-start");
    holds(props::gauges_zero_before_refresh(&t));
    rewrite(&mut t, 0, "cluster_members", |_, _| 3);
    fails(props::gauges_zero_before_refresh(&t));
}

#[test]
fn counters_kept_across_a_restart_fail() {
    let mut t = load("restart");
    holds(props::counters_reset_on_restart(&t));
    let restart = event_time(&t, |w| matches!(w, What::Restart { .. }));
    for name in ["uptime_seconds", "ae_rounds_total", "net_input_bytes_total"] {
        let last = {
            let m = &t.members[1];
            let col = &m.samples.metrics[name];
            m.samples
                .t
                .iter()
                .zip(col)
                .rfind(|(ts, v)| **ts < restart && v.is_some())
                .and_then(|(_, v)| *v)
                .unwrap_or(0)
        };
        rewrite(
            &mut t,
            1,
            name,
            |ts, v| if ts > restart { v + last } else { v },
        );
    }
    fails(props::counters_reset_on_restart(&t));
}

#[test]
fn a_returning_member_that_bootstraps_fails() {
    let mut t = load("restart");
    holds(props::returning_member_no_bootstrap(&t));
    let restart = event_time(&t, |w| matches!(w, What::Restart { .. }));
    rewrite(&mut t, 1, "bootstraps_completed_total", |ts, v| {
        if ts > restart + 3_000 { 2_768 } else { v }
    });
    fails(props::returning_member_no_bootstrap(&t));
}

#[test]
fn resp_served_while_joining_fails() {
    let mut t = load("restart");
    holds(props::resp_closed_while_joining(&t));
    let s = &mut t.members[1].samples;
    for (resp, ready) in s.resp.iter_mut().zip(&s.ready) {
        if *ready == 503 {
            *resp = 1;
        }
    }
    fails(props::resp_closed_while_joining(&t));
}

#[test]
fn a_new_myid_after_restart_fails() {
    let mut t = load("restart");
    holds(props::myid_stable(&t));
    let v = t.members[1].views.last_mut().expect("views");
    let new = format!("{:040x}", 77);
    for n in v.nodes.iter_mut().filter(|n| n.id == v.myid) {
        n.id = new.clone();
    }
    v.myid = new;
    fails(props::myid_stable(&t));
}

#[test]
fn an_unchanged_generation_after_restart_fails() {
    let mut t = load("restart");
    holds(props::generation_changes_on_restart(&t));
    let first = t.members[1].views[0].nodes[0].generation;
    for m in &mut t.members {
        for v in &mut m.views {
            for n in &mut v.nodes {
                n.generation = first;
            }
        }
    }
    fails(props::generation_changes_on_restart(&t));
}

#[test]
fn keys_going_missing_again_fail() {
    let mut t = load("gap");
    holds(props::missing_never_grows(&t));
    let last = t
        .events
        .iter_mut()
        .rev()
        .find(|e| matches!(e.what, What::Reads { .. }))
        .expect("reads");
    if let What::Reads { missing, found, .. } = &mut last.what {
        *missing += 5_000;
        *found -= 5_000;
    }
    fails(props::missing_never_grows(&t));
}

#[test]
fn keys_lost_with_a_drained_member_fail() {
    let mut t = load("drain");
    holds(props::drained_exit_loses_nothing(&t));
    let last = t
        .events
        .iter_mut()
        .rev()
        .find(|e| matches!(e.what, What::Reads { .. }))
        .expect("reads");
    if let What::Reads { missing, found, .. } = &mut last.what {
        *missing = 12;
        *found -= 12;
    }
    fails(props::drained_exit_loses_nothing(&t));
}
