//! 1 and 2: scale-down steps, observed from the simulator every POLL.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use marekvs_e2e::*;
use serde_json::{Value, json};

use crate::common::{T, summary};

const POLL: Duration = Duration::from_millis(20);

/// What one poll of the simulator says about one cluster.
struct Snapshot {
    at: Instant,
    /// node id → (running, flushing, phase, ready, underrep, join pending, counters, view)
    members: BTreeMap<String, MemberSnap>,
}

#[derive(Clone, PartialEq)]
struct MemberSnap {
    running: bool,
    flushing: bool,
    phase: String,
    ready: bool,
    underrep: u64,
    join_pending: u64,
    counters: u64,
    view: Value,
}

async fn snapshot(sim: &Sim, key: &str) -> anyhow::Result<Snapshot> {
    let state = sim.state().await?;
    let at = Instant::now();
    let mut members = BTreeMap::new();
    for c in state["clusters"].as_array().into_iter().flatten() {
        // The simulator keys a cluster by namespace and gossip seed: one cluster per namespace here.
        if !c["key"].as_str().is_some_and(|k| k.starts_with(key)) {
            continue;
        }
        for m in c["members"].as_array().into_iter().flatten() {
            let f = &m["figures"];
            members.insert(
                m["node_id"].as_str().unwrap_or_default().to_string(),
                MemberSnap {
                    running: m["running"].as_bool().unwrap_or(false),
                    flushing: m["flushing"].as_bool().unwrap_or(false),
                    phase: m["phase"].as_str().unwrap_or_default().to_string(),
                    ready: f["ready"].as_bool().unwrap_or(false),
                    underrep: f["underreplicated_partitions"].as_u64().unwrap_or(u64::MAX),
                    join_pending: f["join_gate_pending_pids"].as_u64().unwrap_or(u64::MAX),
                    counters: f["bootstraps_completed_total"].as_u64().unwrap_or(0)
                        + f["ae_repair_ops_total"].as_u64().unwrap_or(0),
                    view: m["view"].clone(),
                },
            );
        }
    }
    Ok(Snapshot { at, members })
}

/// The runbook's safe condition, judged from the simulator's truth: every running member
/// ready (the victim may be Leaving) with 0 under-replicated, every view
/// holding exactly the running members, and the re-replication counters unchanged for `settle`
/// since `since`. `Err` says what is missing.
fn unsafe_reason(
    s: &Snapshot,
    counters_changed: &BTreeMap<String, Instant>,
    since: Instant,
    settle: Duration,
) -> Result<(), String> {
    let running: Vec<(&String, &MemberSnap)> =
        s.members.iter().filter(|(_, m)| m.running).collect();
    if running.is_empty() {
        return Err("nothing running".into());
    }
    let ids: BTreeSet<&str> = running.iter().map(|(id, _)| id.as_str()).collect();
    for (id, m) in &running {
        let view: BTreeSet<&str> = m
            .view
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        if view != ids {
            return Err(format!("{id}: view {view:?} ≠ running {ids:?}"));
        }
        if m.flushing {
            return Err(format!("{id}: flushing"));
        }
        if !(m.ready || m.phase == "Leaving") {
            return Err(format!(
                "{id}: not ready ({}, {} partitions to copy)",
                m.phase, m.join_pending
            ));
        }
        // (A ready member's join-gate figure can stay above 0 for good: not the runbook's.)
        if m.underrep != 0 {
            return Err(format!("{id}: underrep {}", m.underrep));
        }
        if let Some(t) = counters_changed.get(*id) {
            let quiet = s.at.saturating_duration_since((*t).max(since));
            if quiet < settle {
                return Err(format!("{id}: counters quiet {quiet:?}"));
            }
        }
    }
    Ok(())
}

fn safe(
    s: &Snapshot,
    counters_changed: &BTreeMap<String, Instant>,
    since: Instant,
    settle: Duration,
) -> bool {
    unsafe_reason(s, counters_changed, since, settle).is_ok()
}

#[derive(Default, Debug)]
struct StepTimes {
    drain: Option<Instant>,
    handoff_safe: Option<Instant>,
    terminated: Option<Instant>,
    exited: Option<Instant>,
    safe_after: Option<Instant>,
}

pub async fn steps(runs: u64) -> anyhow::Result<()> {
    let sim = Sim::from_env().context("the steps benchmark needs the simulator")?;
    let settings = sim.patch_settings(json!({})).await?;
    let flush = Duration::from_millis(settings["flush_ms"].as_u64().unwrap_or(3000));
    let settle = Duration::from_secs(2);
    let mut latencies = Vec::new();
    let mut delete_latencies = Vec::new();
    let mut ratios = Vec::new();
    for run in 0..runs {
        let env = TestEnv::new("bench-steps").await?;
        let ns = env.namespace.clone();
        let log = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
        let _op = Operator::start_with(&ns, &[("RUST_LOG", log.as_str())])?;
        let mut sp = spec(8);
        sp["scaleDown"]["settleSeconds"] = json!(settle.as_secs());
        let api = create(&env, "bench", sp).await?;
        let all: Vec<String> = (0..8).map(|i| format!("bench-{i}")).collect();
        let all_ref: Vec<&str> = all.iter().map(String::as_str).collect();
        wait_healthy(&api, "bench", &all_ref, T).await?;
        let key = format!("{ns}/");

        let started = Instant::now();
        patch_spec(&api, "bench", json!({"nodes": 3})).await?;
        let mut counters: BTreeMap<String, (u64, Instant)> = BTreeMap::new();
        let mut steps: Vec<(String, StepTimes)> = Vec::new();
        let mut last_exit: Option<Instant> = None;
        let done;
        loop {
            let s = snapshot(&sim, &key).await?;
            for (id, m) in &s.members {
                let e = counters.entry(id.clone()).or_insert((m.counters, s.at));
                if e.0 != m.counters {
                    *e = (m.counters, s.at);
                }
            }
            let changed: BTreeMap<String, Instant> =
                counters.iter().map(|(k, (_, t))| (k.clone(), *t)).collect();
            // A new victim: the first member seen Leaving that is not a known step.
            for (id, m) in &s.members {
                if m.running && m.phase == "Leaving" && !steps.iter().any(|(v, _)| v == id) {
                    steps.push((
                        id.clone(),
                        StepTimes {
                            drain: Some(s.at),
                            ..Default::default()
                        },
                    ));
                }
            }
            if let Some((victim, t)) = steps.last_mut() {
                let drain = t.drain.unwrap();
                if t.handoff_safe.is_none() && safe(&s, &changed, drain, settle) {
                    t.handoff_safe = Some(s.at);
                }
                let vm = s.members.get(victim.as_str());
                if t.terminated.is_none() && vm.is_some_and(|m| m.flushing) {
                    if std::env::var_os("BENCH_DEBUG").is_some() && t.handoff_safe.is_none() {
                        eprintln!(
                            "  SIGTERM of {victim} before the bench judged it safe: {:?}",
                            unsafe_reason(&s, &changed, drain, settle)
                        );
                    }
                    t.terminated = Some(s.at);
                    // The operator went ahead first (its last scrape before deciding saw a
                    // quiet cluster; a counter may move in the ~0.1–0.3 s between that scrape
                    // and SIGTERM): the hand-off took at most this long.
                    t.handoff_safe.get_or_insert(s.at);
                }
                if t.exited.is_none() && vm.is_none_or(|m| !m.running) {
                    t.exited = Some(s.at);
                    last_exit = Some(s.at);
                }
                if let Some(exited) = t.exited
                    && t.safe_after.is_none()
                    && safe(&s, &changed, exited, settle)
                {
                    t.safe_after = Some(s.at);
                }
            }
            let c = status_of(&api.get("bench").await?);
            if c.phase == Some(ClusterPhase::Healthy) && c.instance_names.len() == 3 {
                done = Instant::now();
                break;
            }
            anyhow::ensure!(started.elapsed() < T * 2, "8 → 3 did not finish");
            tokio::time::sleep(POLL).await;
        }
        let _ = last_exit;
        // The data plane's own minimum per step: the hand-off (drain → safe with the victim
        // still serving), the node's flush after SIGTERM, and the settling after it exits.
        let mut minimum = Duration::ZERO;
        for (i, (victim, t)) in steps.iter().enumerate() {
            let (Some(drain), Some(hs), Some(ex), Some(sa)) =
                (t.drain, t.handoff_safe, t.exited, t.safe_after)
            else {
                anyhow::bail!("step {i} ({victim}) incomplete: {t:?}");
            };
            minimum += (hs - drain) + flush + (sa - ex);
            let at = |t: Option<Instant>| t.map(|t| format!("{:.2}", (t - started).as_secs_f64()));
            eprintln!(
                "  step {i} {victim}: drain {:?} handoff-safe {:?} sigterm {:?} exit {:?} safe {:?}",
                at(t.drain),
                at(t.handoff_safe),
                at(t.terminated),
                at(t.exited),
                at(t.safe_after)
            );
            if let Some(term) = t.terminated {
                delete_latencies.push(term.saturating_duration_since(hs).as_secs_f64());
            }
            if let Some((_, next)) = steps.get(i + 1) {
                latencies.push(
                    next.drain
                        .unwrap()
                        .saturating_duration_since(sa)
                        .as_secs_f64(),
                );
            }
        }
        let wall = done - started;
        let ratio = wall.as_secs_f64() / minimum.as_secs_f64();
        ratios.push(ratio);
        println!(
            "RESULT\t8→3 run {run}\twall={:.2}s\tdata-plane minimum={:.2}s\tratio={ratio:.3}\tsteps={}",
            wall.as_secs_f64(),
            minimum.as_secs_f64(),
            steps.len()
        );
        env.cleanup().await?;
    }
    summary("step latency: safe → next /drain", "s", latencies);
    summary("hand-off safe → victim SIGTERM", "s", delete_latencies);
    summary("8→3 wall / data-plane minimum", "x", ratios);
    Ok(())
}
