//! The committed traces of real marekvs clusters (`tests/traces/*.json`) and the property
//! checker agree: every property holds on every trace, and the properties each scenario is
//! about do apply there. Then each property is shown to fail on a deliberately wrong version
//! of a real trace (the old model's assumptions: a ring that drains to 0, a drain that moves
//! partitions, gauges right from the first scrape, ...).

use std::collections::BTreeSet;
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
const APPLIES: [(&str, &[&str]); 6] = [
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
    (
        "handoff-load",
        &[
            "ring_holds_writes",
            "ring_holds_applies",
            "ring_never_drains",
            "drain_moves_nothing",
            "sigterm_exit_delay",
            "views_drop_exited",
            "ae_rounds_since_start",
            "repairs_after_skips",
            "counters_reset_on_restart",
            "returning_member_no_bootstrap",
            "myid_stable",
            "generation_changes_on_restart",
            "missing_never_grows",
            "drained_exit_loses_nothing",
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
    assert_eq!(
        seen,
        [
            "drain",
            "gap",
            "handoff-load",
            "idle-start",
            "restart",
            "writes"
        ]
    );
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

// ----- the simulator model, driven through the same scenarios -----
//
// Each scenario runs on `ModelBackend` (the simulator's model in virtual time, fixed seed)
// through the same scenario code and recorder as the real traces, at full scale: the gap
// scenario's 180,000 SETs of 1 KiB cost about 3 s of CPU and 270 MB in a debug build, so it
// needs no shrinking (which would also have left the 128 MiB ring cap of the properties
// unreached). Every property that holds on the real trace must hold on the model's, with the
// same checker and thresholds; a headline comparison per scenario follows.

use std::sync::OnceLock;

use marekvs_sim::trace::model::{ModelBackend, ModelConfig};
use marekvs_sim::trace::recorder::Recorder;
use marekvs_sim::trace::scenario;

/// Model seed: fixed, so every run of a scenario is the same.
const SEED: u64 = 1;

fn run_model(name: &str) -> Trace {
    let plan = scenario::plan(name).expect("a scenario");
    let mut cfg = ModelConfig::new(plan.members, plan.replicas_n);
    cfg.seed = SEED;
    let backend = ModelBackend::new(cfg);
    let mut rec = Recorder::new(backend, name, plan.deadline_ms);
    for m in 0..plan.members {
        let ip = rec.backend.ip(m);
        rec.set_member_ip(m, ip);
    }
    let t0 = std::time::Instant::now();
    let outcome = futures::executor::block_on(scenario::run(&mut rec, name));
    let trace = futures::executor::block_on(rec.finish());
    eprintln!(
        "model {name}: {} ms of scenario time in {:?}",
        trace.end(),
        t0.elapsed()
    );
    outcome.unwrap_or_else(|e| panic!("model {name}: {e:#}"));
    trace
}

/// The model's trace of scenario `name`, run once per test binary.
fn model(name: &str) -> &'static Trace {
    static RUNS: [OnceLock<Trace>; scenario::SCENARIOS.len()] =
        [const { OnceLock::new() }; scenario::SCENARIOS.len()];
    let i = scenario::SCENARIOS
        .iter()
        .position(|s| *s == name)
        .expect("a scenario");
    RUNS[i].get_or_init(|| run_model(name))
}

/// Known gaps of the model: properties that hold on the real trace and fail on the model's,
/// with what differs: (scenario, property, what). Each is printed, never passed silently, and
/// must still fail on the model: once the model meets it, the entry has to go.
const KNOWN_MODEL_GAPS: &[(&str, &str, &str)] = &[(
    "handoff-load",
    "drained_exit_loses_nothing",
    "a member restarted on its data right after a burst its ring never shipped: through \
     another member the node repaired the burst in about 30 s (483 of 4,000 sampled keys \
     missing 9 s after the restart, 0 at 31 s); the model leaves tens of them missing for \
     minutes (45 at 110 s), and this property reads the scenario's last read",
)];

/// Every property that holds on the real trace of `name` holds on the model's; none fails there.
fn model_matches_real_properties(name: &str) {
    let real = props::check_all(&load(name));
    let sim = props::check_all(model(name));
    let mut bad = Vec::new();
    for (r, m) in real.iter().zip(&sim) {
        assert_eq!(r.name, m.name);
        if let Some((_, _, what)) = KNOWN_MODEL_GAPS
            .iter()
            .find(|(s, p, _)| *s == name && *p == r.name)
        {
            println!("{name}: {} is a known gap of the model: {what}", r.name);
            assert_eq!(
                m.verdict,
                Verdict::Fails,
                "{name}: the model now meets {}: take it out of KNOWN_MODEL_GAPS\n{m}",
                r.name
            );
            continue;
        }
        let must_hold = r.verdict == Verdict::Holds;
        if m.verdict == Verdict::Fails || (must_hold && m.verdict != Verdict::Holds) {
            bad.push(format!("real:\n{r}\nmodel:\n{m}"));
        }
    }
    println!("{name} on the model:\n{}", show(&sim));
    assert!(bad.is_empty(), "{name}:\n{}", bad.join("\n"));
}

#[test]
fn model_writes_shows_the_real_properties() {
    model_matches_real_properties("writes");
}

#[test]
fn model_drain_shows_the_real_properties() {
    model_matches_real_properties("drain");
}

#[test]
fn model_gap_shows_the_real_properties() {
    model_matches_real_properties("gap");
}

#[test]
fn model_restart_shows_the_real_properties() {
    model_matches_real_properties("restart");
}

#[test]
fn model_idle_start_shows_the_real_properties() {
    model_matches_real_properties("idle-start");
}

#[test]
fn model_handoff_load_shows_the_real_properties() {
    model_matches_real_properties("handoff-load");
}

// ----- headline figures: the real trace and the model's, against the same tolerances -----

/// The answered values of series `name` of member `m`: `(t, value)`.
fn series(t: &Trace, m: usize, name: &str) -> Vec<(u64, u64)> {
    t.members[m].points(name)
}

/// The first value at or after `from`.
fn value_from(t: &Trace, m: usize, name: &str, from: u64) -> Option<(u64, u64)> {
    series(t, m, name).into_iter().find(|(ts, _)| *ts >= from)
}

/// The last value at or before `until`.
fn value_until(t: &Trace, m: usize, name: &str, until: u64) -> Option<(u64, u64)> {
    series(t, m, name).into_iter().rfind(|(ts, _)| *ts <= until)
}

/// `(begun, ended, acked)` of the scenario's one burst of writes.
fn burst(t: &Trace) -> (u64, u64, u32) {
    let begun = event_time(t, |w| matches!(w, What::WritesBegun { .. }));
    let (ended, acked) = t
        .events
        .iter()
        .find_map(|e| match e.what {
            What::WritesEnded { acked, .. } => Some((e.t, acked)),
            _ => None,
        })
        .expect("writes ended");
    (begun, ended, acked)
}

/// Whether `ring_ops` of member `m` never decreases within any life.
fn ring_never_decreases(t: &Trace, m: usize) -> bool {
    t.lives(m).into_iter().all(|(s, e)| {
        let e = e.unwrap_or(u64::MAX);
        let pts: Vec<u64> = series(t, m, "ring_ops")
            .into_iter()
            .filter(|(ts, _)| *ts >= s && *ts <= e)
            .map(|x| x.1)
            .collect();
        pts.windows(2).all(|w| w[1] >= w[0])
    })
}

/// Intervals (ms) between successive anti-entropy rounds of member `m` (times of the samples
/// first showing each), leaving out those overlapping `[from, to]`.
fn round_spacing(t: &Trace, m: usize, (from, to): (u64, u64)) -> Vec<u64> {
    let pts = series(t, m, "ae_rounds_total");
    let incs: Vec<u64> = pts
        .windows(2)
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| w[1].0)
        .collect();
    incs.windows(2)
        .filter(|w| w[1] < from || w[0] > to)
        .map(|w| w[1] - w[0])
        .collect()
}

/// Rounds every 5 s + 0-2 s, seen by 500 ms samples: 5-7 s, one sample either way.
const ROUND_SPACING_MS: (u64, u64) = (4_500, 7_500);

/// The delay from SIGTERM to exit and the exit code.
fn exit_after_sigterm(t: &Trace) -> (u64, Option<i32>) {
    let ts = event_time(t, |w| matches!(w, What::Sigterm { .. }));
    t.events
        .iter()
        .find_map(|e| match e.what {
            What::Exit { code, .. } if e.t >= ts => Some((e.t - ts, code)),
            _ => None,
        })
        .expect("an exit after SIGTERM")
}

/// The reads events: `(t, m, checked, missing)`.
fn reads(t: &Trace) -> Vec<(u64, usize, u32, u32)> {
    t.events
        .iter()
        .filter_map(|e| match e.what {
            What::Reads {
                m,
                checked,
                missing,
                ..
            } => Some((e.t, m, checked, missing)),
            _ => None,
        })
        .collect()
}

/// Check `figures` (name, pass, shown) of the real trace and of the model's.
fn compare(name: &str, figures: impl Fn(&Trace) -> Vec<(&'static str, bool, String)>) {
    let mut bad = Vec::new();
    for (who, t) in [("real", &load(name)), ("model", model(name))] {
        for (what, pass, shown) in figures(t) {
            println!("{name} {who:5} {what}: {shown}");
            if !pass {
                bad.push(format!("{who}: {what}: {shown}"));
            }
        }
    }
    assert!(bad.is_empty(), "{name}:\n{}", bad.join("\n"));
}

#[test]
fn writes_headlines_real_and_model() {
    compare("writes", |t| {
        let (begun, ended, n) = burst(t);
        let n = u64::from(n);
        let origin = value_from(t, 0, "ring_ops", ended + 4_000);
        let receiver = series(t, 1, "ring_ops")
            .into_iter()
            .find(|(ts, v)| *ts >= ended && *ts <= ended + 20_000 && *v >= n);
        let applied = value_until(t, 1, "repl_ops_applied_total", ended + 2_000);
        let spacing: Vec<u64> = (0..2)
            .flat_map(|m| round_spacing(t, m, (begun, ended + 10_000)))
            .collect();
        let late_missing: Vec<u32> = reads(t)
            .into_iter()
            .filter(|r| r.0 >= ended + 5_000)
            .map(|r| r.3)
            .collect();
        vec![
            (
                "origin ring_ops >= N 4 s after N writes",
                origin.is_some_and(|o| o.1 >= n),
                format!("{origin:?}, N {n}"),
            ),
            (
                "receiver ring_ops >= N within 20 s",
                receiver.is_some(),
                format!("{:?}", receiver.map(|r| (r.0 - ended, r.1))),
            ),
            (
                "ring_ops never decreasing on both",
                (0..2).all(|m| ring_never_decreases(t, m)),
                String::new(),
            ),
            (
                "receiver applied 99-100 % of the writes 2 s after them (replication, not AE)",
                applied.is_some_and(|a| a.1 * 100 >= n * 99 && a.1 <= n),
                format!("{applied:?} of {n}"),
            ),
            (
                "AE round spacing 5-7 s (+-500 ms) away from the writes",
                !spacing.is_empty()
                    && spacing
                        .iter()
                        .all(|s| (ROUND_SPACING_MS.0..=ROUND_SPACING_MS.1).contains(s)),
                format!("{spacing:?}"),
            ),
            (
                "no key missing through the receiver from 5 s after the writes",
                !late_missing.is_empty() && late_missing.iter().all(|m| *m == 0),
                format!("{late_missing:?}"),
            ),
        ]
    });
}

#[test]
fn drain_headlines_real_and_model() {
    compare("drain", |t| {
        let drain = event_time(t, |w| matches!(w, What::Drain { .. }));
        let (delay, code) = exit_after_sigterm(t);
        let exit = event_time(t, |w| matches!(w, What::Exit { .. }));
        let owned: Vec<usize> = (0..3)
            .map(|m| {
                series(t, m, "cluster_owned_partitions")
                    .into_iter()
                    .filter(|(ts, _)| *ts >= drain && *ts <= exit)
                    .map(|x| x.1)
                    .collect::<BTreeSet<u64>>()
                    .len()
            })
            .collect();
        let dropped: Vec<Option<u64>> = (0..2)
            .map(|m| {
                series(t, m, "cluster_members")
                    .into_iter()
                    .find(|(ts, v)| *ts > exit && *v == 2)
                    .map(|x| x.0 - exit)
            })
            .collect();
        let took_over: Vec<Option<u64>> = (0..2)
            .map(|m| series(t, m, "cluster_owned_partitions").last().map(|x| x.1))
            .collect();
        let last = reads(t).last().copied();
        vec![
            (
                "owned partitions unchanged between /drain and exit, every member",
                owned.iter().all(|n| *n == 1),
                format!("distinct values {owned:?}"),
            ),
            (
                "exit 2-9.5 s after SIGTERM, code 0",
                (2_000..=9_500).contains(&delay) && code == Some(0),
                format!("{delay} ms, {code:?}"),
            ),
            (
                "survivors count 2 members 1-20 s after the exit",
                dropped
                    .iter()
                    .all(|d| d.is_some_and(|d| (1_000..=20_000).contains(&d))),
                format!("{dropped:?}"),
            ),
            (
                "survivors own all 4096 partitions in the end",
                took_over.iter().all(|o| *o == Some(4096)),
                format!("{took_over:?}"),
            ),
            (
                "last read through a survivor finds every key",
                last.is_some_and(|r| r.3 == 0 && r.2 == 5_000),
                format!("{last:?}"),
            ),
        ]
    });
}

#[test]
fn gap_headlines_real_and_model() {
    compare("gap", |t| {
        let (begun, ended, n) = burst(t);
        let n = u64::from(n);
        let origin_ops = value_from(t, 0, "ring_ops", ended + 4_000);
        let origin_bytes = value_from(t, 0, "ring_bytes", ended + 4_000);
        let end = t.end();
        let receivers: Vec<Option<u64>> = (1..3)
            .map(|m| value_until(t, m, "ring_ops", end).map(|x| x.1))
            .collect();
        let rs = reads(t);
        let (first, last) = (rs.first().copied(), rs.last().copied());
        let repairs = |at: u64| -> u64 {
            (0..3)
                .filter_map(|m| value_until(t, m, "ae_repair_ops_total", at).map(|x| x.1))
                .sum()
        };
        let repaired = repairs(end) - repairs(ended);
        // Anti-entropy takes rounds, not one: the node's per-bucket messages go through bounded
        // queues that drop what does not fit, so a round repairs a few thousand records.
        let early = repairs(ended + 20_000).saturating_sub(repairs(ended));
        let late = repairs(end).saturating_sub(repairs(ended + 60_000));
        let at_40s = rs.iter().find(|r| r.0 >= ended + 40_000).copied();
        // The node did not read every key back within 186 s; a model that does so in under
        // half that (90 s) converges too fast.
        let at_90s = rs.iter().find(|r| r.0 >= ended + 90_000).copied();
        let spacing: Vec<u64> = (0..3)
            .flat_map(|m| round_spacing(t, m, (begun, ended + 10_000)))
            .collect();
        vec![
            (
                "origin ring full (>= 99 % of 128 MiB) and below N (evicted) after the writes",
                origin_bytes.is_some_and(|b| b.1 >= props::RING_FULL_BYTES)
                    && origin_ops.is_some_and(|o| o.1 < n),
                format!("ring_ops {origin_ops:?}, ring_bytes {origin_bytes:?}, N {n}"),
            ),
            (
                "receivers' ring_ops at the end at least half the origin's",
                receivers
                    .iter()
                    .all(|r| r.zip(origin_ops).is_some_and(|(r, o)| r * 2 >= o.1)),
                format!("{receivers:?}"),
            ),
            (
                "more than 10 % of the sampled keys missing right after the writes, fewer at the last read",
                first
                    .zip(last)
                    .is_some_and(|(f, l)| f.3 * 10 > f.2 && l.3 < f.3),
                format!("first {first:?}, last {last:?}"),
            ),
            (
                "anti-entropy repaired at least 10,000 records after the writes",
                repaired >= 10_000,
                format!("{repaired}"),
            ),
            (
                "repairs spread over rounds: under half within 20 s of the writes, some 60 s or more after",
                repaired > 0 && early * 2 < repaired && late > 0,
                format!("{early} of {repaired} within 20 s, {late} after 60 s"),
            ),
            (
                "at least a quarter of the first read's missing keys still missing 40 s after the writes",
                first.zip(at_40s).is_some_and(|(f, r)| r.3 * 4 >= f.3),
                format!("first {first:?}, 40 s on {at_40s:?}"),
            ),
            (
                "a read 90 s after the writes still misses keys (within 2x of the node's time)",
                at_90s.is_some_and(|r| r.3 > 0),
                format!("{at_90s:?}"),
            ),
            (
                "AE round spacing 5-7 s (+-500 ms) away from the writes",
                !spacing.is_empty()
                    && spacing
                        .iter()
                        .all(|s| (ROUND_SPACING_MS.0..=ROUND_SPACING_MS.1).contains(s)),
                format!("{spacing:?}"),
            ),
        ]
    });
}

#[test]
fn restart_headlines_real_and_model() {
    compare("restart", |t| {
        let (delay, code) = exit_after_sigterm(t);
        let tr = event_time(t, |w| matches!(w, What::Restart { .. }));
        let boots: BTreeSet<u64> = series(t, 1, "bootstraps_completed_total")
            .into_iter()
            .filter(|(ts, _)| *ts >= tr)
            .map(|x| x.1)
            .collect();
        let s = &t.members[1].samples;
        let ready = (0..s.len())
            .find(|i| s.t[*i] >= tr && s.ready[*i] == 200)
            .map(|i| s.t[i] - tr);
        let uptime = value_from(t, 1, "uptime_seconds", tr).map(|x| x.1);
        let last = reads(t).last().copied();
        vec![
            (
                "exit 2-9.5 s after SIGTERM, code 0",
                (2_000..=9_500).contains(&delay) && code == Some(0),
                format!("{delay} ms, {code:?}"),
            ),
            (
                "returning member's bootstraps stay 0",
                boots.iter().all(|b| *b == 0) && !boots.is_empty(),
                format!("{boots:?}"),
            ),
            (
                "returning member ready 2-4 s after its restart (among Active peers)",
                ready.is_some_and(|r| (2_000..=4_000).contains(&r)),
                format!("{ready:?}"),
            ),
            (
                "uptime at most 3 s at its first scrape",
                uptime.is_some_and(|u| u <= 3),
                format!("{uptime:?}"),
            ),
            (
                "last read through it finds every key",
                last.is_some_and(|r| r.1 == 1 && r.3 == 0 && r.2 == 3_000),
                format!("{last:?}"),
            ),
        ]
    });
}

#[test]
fn idle_start_headlines_real_and_model() {
    compare("idle-start", |t| {
        let readies: Vec<Option<u64>> = (0..3)
            .map(|m| {
                let s = &t.members[m].samples;
                let start = t.lives(m)[0].0;
                (0..s.len())
                    .find(|i| s.ready[*i] == 200)
                    .map(|i| s.t[i] - start)
            })
            .collect();
        let full: Vec<Option<u64>> = (0..3)
            .map(|m| {
                let start = t.lives(m)[0].0;
                series(t, m, "cluster_members")
                    .into_iter()
                    .find(|x| x.1 == 3)
                    .map(|x| x.0 - start)
            })
            .collect();
        let first_round: Vec<Option<u64>> = (0..3)
            .map(|m| {
                let start = t.lives(m)[0].0;
                series(t, m, "ae_rounds_total")
                    .into_iter()
                    .find(|x| x.1 >= 1)
                    .map(|x| x.0 - start)
            })
            .collect();
        vec![
            (
                "cold start: ready 6-8 s after the start (join gate settle)",
                readies
                    .iter()
                    .all(|r| r.is_some_and(|r| (6_000..=8_000).contains(&r))),
                format!("{readies:?}"),
            ),
            (
                "full views in the gauges 2-4 s after the start (first refresh)",
                full.iter()
                    .all(|f| f.is_some_and(|f| (2_000..=4_000).contains(&f))),
                format!("{full:?}"),
            ),
            (
                "first AE round seen 5-7.5 s after the start",
                first_round
                    .iter()
                    .all(|f| f.is_some_and(|f| (5_000..=7_500).contains(&f))),
                format!("{first_round:?}"),
            ),
        ]
    });
}
