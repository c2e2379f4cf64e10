//! `make bench`: reported numbers, not pass/fail. Runs against the local control plane and the
//! simulator that `hack/bench.sh` brings up (the same environment variables as the e2e suite).
//!
//!   bench steps    [--runs N]                 8 → 3 scale-downs: step latency, wall time vs the
//!                                             data plane's own minimum
//!   bench replace  [--runs N]                 pod deleted → replacement created, ours vs the
//!                                             StatefulSet controller
//!   bench scale    [--clusters N] [--members N] [--steady-seconds N] [--batch N]
//!                                             many clusters (created N at a time, default 20):
//!                                             reconcile latency, RSS, CPU, API requests by
//!                                             verb in steady state
//!   bench failover [--clusters N] [--members N] [--runs N] [--batch N] [--after-seconds N]
//!                                             N clusters under a leader with a standby (both
//!                                             electing); SIGKILL the leader: kill → lease
//!                                             acquired, acquired → first full pass, peak
//!                                             scrapes in flight, API writes during the pass
//!                                             and the N seconds after
//!   bench load     [--bound-seconds N] [--percent P,...]
//!                                             5 → 4 under a steady write load through the
//!                                             client Service at P % of the simulated
//!                                             ring-gap rate (default 0,25,50,100,150): time
//!                                             to complete (or held, why, after N s, default
//!                                             120), keys written, keys lost
//!   bench ladder   [--rates R,...] [--seconds N] [--connections N] [--bound-seconds N]
//!                                             at each rate (default 250,500,1000 SET/s) over
//!                                             N pooled connections (default 8) opened through
//!                                             the client Service before anything else and
//!                                             kept, as behind kube-proxy: first the data
//!                                             plane alone (N s of load, default 120, then
//!                                             every key read back through one member that
//!                                             wrote none, within the bound, default 300 s),
//!                                             then a 5 → 4 under the same load (time, keys
//!                                             lost). Real members (MAREKVS_BIN) or simulated
//!   bench pinned   [--rate R] [--seconds N]   a client writing R SET/s (default 200) to the
//!                                             leaver's pod address through a 5 → 4: how long
//!                                             it holds, what status says, and, once it stops
//!                                             after N s (default 60), the time to complete
//!                                             and keys lost
//!   bench trap     [--rf R] [--keys N] [--bound-seconds N]
//!                                             the hand-off trap: N keys of 1 KiB (default
//!                                             200,000) written through the two members a
//!                                             scale-down from R + 3 to R + 1 members removes
//!                                             (5 → 3 at RF 2), then that; every key read
//!                                             back through a survivor that wrote none: keys
//!                                             lost, write, scale-down and read times. Meant
//!                                             for real members (MAREKVS_BIN); not in `all`
//!
//! Every figure is printed as a line starting with `RESULT` (tab-separated), for the table in
//! docs/benchmarks.md.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use marekvs_e2e::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(300);

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list of numbers (`--rates 250,500`), or the default.
fn list(args: &[String], name: &str, default: &[u64]) -> Vec<u64> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(name: &str, unit: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    println!(
        "RESULT\t{name}\tn={}\tp50={:.3}{unit}\tp99={:.3}{unit}\tmin={:.3}{unit}\tmax={:.3}{unit}",
        v.len(),
        pct(&v, 0.5),
        pct(&v, 0.99),
        v.first().copied().unwrap_or(f64::NAN),
        v.last().copied().unwrap_or(f64::NAN),
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map(String::as_str).unwrap_or("all");
    let scale_with_args = || {
        scale(
            arg(&args, "--clusters", 200),
            arg(&args, "--members", 8),
            arg(&args, "--steady-seconds", 120),
            arg(&args, "--batch", 20),
        )
    };
    let failover_with_args = || {
        failover(
            arg(&args, "--clusters", 200),
            arg(&args, "--members", 8),
            arg(&args, "--runs", 3),
            arg(&args, "--batch", 20),
            arg(&args, "--after-seconds", 60),
        )
    };
    match what {
        "steps" => steps(arg(&args, "--runs", 3)).await,
        "replace" => replace(arg(&args, "--runs", 20)).await,
        "scale" => scale_with_args().await,
        "failover" => failover_with_args().await,
        "load" => load(&percents(&args), arg(&args, "--bound-seconds", 120)).await,
        "ladder" => {
            ladder(
                &list(&args, "--rates", &[250, 500, 1000]),
                Duration::from_secs(arg(&args, "--seconds", 120)),
                arg(&args, "--connections", 8) as usize,
                Duration::from_secs(arg(&args, "--bound-seconds", 300)),
            )
            .await
        }
        "pinned" => {
            pinned(
                arg(&args, "--rate", 200) as f64,
                Duration::from_secs(arg(&args, "--seconds", 60)),
            )
            .await
        }
        "trap" => {
            trap(
                arg(&args, "--rf", 2) as u32,
                arg(&args, "--keys", 200_000) as usize,
                Duration::from_secs(arg(&args, "--bound-seconds", 1800)),
            )
            .await
        }
        "all" => {
            steps(arg(&args, "--runs", 3)).await?;
            replace(arg(&args, "--runs", 20)).await?;
            scale_with_args().await?;
            failover_with_args().await?;
            load(&percents(&args), arg(&args, "--bound-seconds", 120)).await
        }
        other => {
            anyhow::bail!(
                "unknown benchmark {other:?}: steps, replace, scale, failover, load, ladder, pinned, trap or all"
            )
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1 and 2: scale-down steps, observed from the simulator every POLL.

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

async fn steps(runs: u64) -> anyhow::Result<()> {
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

// ---------------------------------------------------------------------------------------------
// 3: replacement latency, ours vs the StatefulSet controller, in the same run.

/// Delete `name` and time, from the watch, its DELETED event to the ADDED event of the pod
/// that replaces it.
async fn time_replacement(pods: &Api<Pod>, name: &str, label: &str) -> anyhow::Result<f64> {
    let stream =
        watcher::watcher(pods.clone(), watcher::Config::default().labels(label)).default_backoff();
    let mut stream = Box::pin(stream);
    // Drain the initial list first.
    loop {
        match stream.next().await {
            Some(Ok(Event::InitDone)) => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("watch ended"),
        }
    }
    let old_uid = pods.get(name).await?.metadata.uid;
    pods.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    let mut deleted = None;
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        let ev = tokio::time::timeout(T, stream.next()).await?;
        match ev {
            Some(Ok(Event::Delete(p))) if p.metadata.name.as_deref() == Some(name) => {
                deleted = Some(Instant::now());
            }
            Some(Ok(Event::Apply(p)))
                if p.metadata.name.as_deref() == Some(name) && p.metadata.uid != old_uid =>
            {
                let created = Instant::now();
                let from = deleted.context("replacement seen before the deletion")?;
                return Ok((created - from).as_secs_f64());
            }
            Some(Err(e)) => return Err(e.into()),
            _ => {}
        }
    }
    anyhow::bail!("no replacement for {name}")
}

/// Until the cluster's object has not changed for `quiet`.
async fn wait_status_quiet(
    api: &Api<MarekvsCluster>,
    name: &str,
    quiet: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + T;
    let mut last = (
        api.get(name).await?.metadata.resource_version,
        Instant::now(),
    );
    while last.1.elapsed() < quiet {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name}'s status never stayed unchanged"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let rv = api.get(name).await?.metadata.resource_version;
        if rv != last.0 {
            last = (rv, Instant::now());
        }
    }
    Ok(())
}

/// A StatefulSet `name` of 3 whose pod is the operator's pod of cluster `ours` (the same
/// containers, probes and volume), as it would run under a StatefulSet: a volume claim
/// template for the data volume, its own seeds, and none of what admission or scheduling
/// added (the API server's work on a create grows with the pod, so both create the same one).
fn statefulset_like(pod: &Value, pvc: &Value, ours: &str, name: &str) -> Value {
    let mut spec = pod["spec"].clone();
    let s = spec.as_object_mut().expect("a pod spec");
    for added in [
        "nodeName",
        "hostname",
        "subdomain",
        "priority",
        "tolerations",
        "serviceAccount",
    ] {
        s.remove(added);
    }
    let is_token = |v: &Value| {
        v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access"))
    };
    if let Some(vs) = s.get_mut("volumes").and_then(Value::as_array_mut) {
        vs.retain(|v| !is_token(v) && v["name"] != "data");
    }
    let containers = s["containers"].as_array_mut().expect("containers");
    for c in containers {
        if let Some(ms) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
            ms.retain(|m| !is_token(m));
        }
        if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
            for e in env {
                if e["name"] == "MAREKVS_SEEDS"
                    && let Some(v) = e["value"].as_str()
                {
                    e["value"] =
                        json!(v.replace(&format!("{ours}-headless"), &format!("{name}-headless")));
                }
            }
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 3, "serviceName": format!("{name}-headless"),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"bench": name}},
            "template": {"metadata": {"labels": {"bench": name}}, "spec": spec},
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": pvc["spec"]["accessModes"],
                    "storageClassName": pvc["spec"]["storageClassName"],
                    "resources": {"requests": pvc["spec"]["resources"]["requests"]}
                }
            }]
        }
    })
}

async fn replace(runs: u64) -> anyhow::Result<()> {
    let env = TestEnv::new("bench-replace").await?;
    let ns = env.namespace.clone();
    let log = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
    let _op = Operator::start_with(&ns, &[("RUST_LOG", log.as_str())])?;
    let api = create(&env, "rep", spec(3)).await?;
    wait_healthy(&api, "rep", &["rep-0", "rep-1", "rep-2"], T).await?;
    // A plain StatefulSet of the same size and the same pod, on the same fake nodes: the
    // simulator runs its pods as the members of a second marekvs cluster.
    let our_pod = serde_json::to_value(env.api::<Pod>().get("rep-0").await?)?;
    let our_pvc =
        serde_json::to_value(env.api::<PersistentVolumeClaim>().get("data-rep-0").await?)?;
    let sts: StatefulSet =
        serde_json::from_value(statefulset_like(&our_pod, &our_pvc, "rep", "sts"))?;
    env.api::<StatefulSet>()
        .create(&PostParams::default(), &sts)
        .await?;
    let pods: Api<Pod> = env.api();
    wait_until("the StatefulSet's 3 pods ready", T, || async {
        let ready = pods
            .list(&ListParams::default().labels("bench=sts"))
            .await?
            .items
            .iter()
            .filter(|p| pod_condition(p, "Ready"))
            .count();
        Ok((ready == 3).then_some(()))
    })
    .await?;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..runs {
        // In steady state, as a pod is usually lost: right after Healthy, the operator is
        // still writing status, and a reconcile in flight delays the next one.
        wait_status_quiet(&api, "rep", Duration::from_secs(3)).await?;
        let m = format!("rep-{}", i % 3);
        ours.push(time_replacement(&pods, &m, "app.kubernetes.io/instance=rep").await?);
        wait_healthy(&api, "rep", &["rep-0", "rep-1", "rep-2"], T).await?;
        let s = format!("sts-{}", i % 3);
        theirs.push(time_replacement(&pods, &s, "bench=sts").await?);
        wait_until("the StatefulSet's 3 pods ready again", T, || async {
            let ready = pods
                .list(&ListParams::default().labels("bench=sts"))
                .await?
                .items
                .iter()
                .filter(|p| pod_condition(p, "Ready") && p.metadata.deletion_timestamp.is_none())
                .count();
            Ok((ready == 3).then_some(()))
        })
        .await?;
    }
    summary(
        "replacement: pod deleted → new pod (marekvs-operator)",
        "s",
        ours,
    );
    summary(
        "replacement: pod deleted → new pod (StatefulSet controller)",
        "s",
        theirs,
    );
    env.cleanup().await
}

// ---------------------------------------------------------------------------------------------
// 4: many clusters.

fn metric_sum(text: &str, name: &str, label: Option<(&str, &str)>) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let series = l.split_whitespace().next().unwrap_or("");
            let base = series.split('{').next().unwrap_or("");
            base == name && label.is_none_or(|(k, v)| series.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum()
}

/// Histogram quantile from cumulative buckets (upper bound of the bucket that holds it).
fn histogram_quantile(text: &str, name: &str, q: f64) -> f64 {
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{le=\"")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.split_whitespace().nth(1)?.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    buckets
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| *le)
        .unwrap_or(f64::NAN)
}

fn diff_histogram(after: &str, before: &str, name: &str) -> String {
    // Cumulative buckets subtract bucket by bucket.
    let read = |t: &str| -> BTreeMap<String, f64> {
        t.lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket")))
            .filter_map(|l| {
                let (s, v) = l.split_once(' ')?;
                Some((s.to_string(), v.parse().ok()?))
            })
            .collect()
    };
    let b = read(before);
    read(after)
        .into_iter()
        .map(|(s, v)| format!("{s} {}\n", v - b.get(&s).copied().unwrap_or(0.0)))
        .collect()
}

fn proc_stat(pid: u32) -> Option<(f64, u64)> {
    // CPU seconds (utime + stime) and RSS in KiB.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit(") ").next()?.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((ticks / 100.0, rss))
}

/// `clusters` clusters of `members` members each, created `batch` at a time, each batch
/// Healthy before the next: what is measured is the steady state, and a 2-core machine
/// bringing up 1,600 members at once mostly measures its own control plane (the PV binder
/// managed about 1.3 claims a second). Returns how long it took.
async fn create_clusters(
    env: &TestEnv,
    clusters: u64,
    members: u64,
    batch: u64,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let all: Api<MarekvsCluster> = env.api();
    let batch = batch.clamp(1, clusters.max(1));
    let mut created = 0;
    while created < clusters {
        let upto = (created + batch).min(clusters);
        for i in created..upto {
            let name = format!("c{i}");
            let mut sp = spec(members as u32);
            sp["scaleDown"]["settleSeconds"] = json!(2);
            create(env, &name, sp).await?;
        }
        created = upto;
        wait_until(
            &format!("{created} clusters × {members} members Healthy"),
            Duration::from_secs(3600),
            || async {
                let healthy = all
                    .list(&Default::default())
                    .await?
                    .items
                    .iter()
                    .filter(|c| status_of(c).phase == Some(ClusterPhase::Healthy))
                    .count();
                eprintln!(
                    "  {healthy}/{created} Healthy after {:.0}s",
                    started.elapsed().as_secs_f64()
                );
                Ok((healthy as u64 == created).then_some(()))
            },
        )
        .await?;
    }
    Ok(started.elapsed())
}

async fn scale(clusters: u64, members: u64, steady: u64, batch: u64) -> anyhow::Result<()> {
    let env = TestEnv::new("bench-scale").await?;
    let ns = env.namespace.clone();
    let op = Operator::start_with(
        &ns,
        &[
            ("RUST_LOG", "warn"),
            ("MAREKVS_OPERATOR_METRICS_ADDR", "127.0.0.1:31081"),
        ],
    )?;
    let pid = op.pid().context("operator pid")?;
    let metrics_url = "http://127.0.0.1:31081/metrics";
    let http = http();
    let scrape_op = || async { anyhow::Ok(http.get(metrics_url).send().await?.text().await?) };
    let bring_up = create_clusters(&env, clusters, members, batch).await?;
    println!(
        "RESULT\tscale: {clusters}×{members} created and Healthy\t{:.0}s",
        bring_up.as_secs_f64()
    );
    // Let the first rounds of status settle, then measure a steady window.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let apiserver_metrics = || async {
        anyhow::Ok(
            env.client
                .request_text(http::Request::get("/metrics").body(vec![])?)
                .await?,
        )
    };
    let api_before = apiserver_metrics().await?;
    let before = scrape_op().await?;
    let (cpu0, _) = proc_stat(pid).context("operator /proc")?;
    let t0 = Instant::now();
    let mut rss_max = 0;
    while t0.elapsed() < Duration::from_secs(steady) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if let Some((_, rss)) = proc_stat(pid) {
            rss_max = rss_max.max(rss);
        }
    }
    let after = scrape_op().await?;
    let api_after = apiserver_metrics().await?;
    let (cpu1, rss) = proc_stat(pid).context("operator /proc")?;
    let minutes = t0.elapsed().as_secs_f64() / 60.0;
    // How much a counter of the operator's grew over the window.
    let grew = |name: &str, label: (&str, &str)| {
        metric_sum(&after, name, Some(label)) - metric_sum(&before, name, Some(label))
    };
    for verb in ["GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"] {
        let n = grew("marekvs_operator_api_requests_total", ("verb", verb));
        println!(
            "RESULT\tscale steady: API {verb} per minute\t{:.1}",
            n / minutes
        );
    }
    for verb in [
        "GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE", "APPLY",
    ] {
        let n = metric_sum(&api_after, "apiserver_request_total", Some(("verb", verb)))
            - metric_sum(&api_before, "apiserver_request_total", Some(("verb", verb)));
        println!(
            "RESULT\tscale steady: apiserver_request_total (all clients) {verb} per minute\t{:.1}",
            n / minutes
        );
    }
    for (action, label) in [
        ("status_write", "status writes"),
        ("status_unchanged", "status unchanged"),
    ] {
        let n = grew("marekvs_operator_actions_total", ("action", action));
        println!(
            "RESULT\tscale steady: {label} per minute\t{:.1}",
            n / minutes
        );
    }
    let window = |name: &str| diff_histogram(&after, &before, name);
    let wait = window("marekvs_operator_reconcile_queue_wait_seconds");
    let work = window("marekvs_operator_reconcile_duration_seconds");
    let reconciles = metric_sum(&after, "marekvs_operator_reconciles_total", None)
        - metric_sum(&before, "marekvs_operator_reconciles_total", None);
    println!(
        "RESULT\tscale steady: reconciles per minute\t{:.0}",
        reconciles / minutes
    );
    for (label, text, name) in [
        (
            "queue wait",
            &wait,
            "marekvs_operator_reconcile_queue_wait_seconds",
        ),
        (
            "reconcile work",
            &work,
            "marekvs_operator_reconcile_duration_seconds",
        ),
    ] {
        println!(
            "RESULT\tscale steady: {label} p50 ≤ {}s, p99 ≤ {}s (bucket bounds)",
            histogram_quantile(text, name, 0.5),
            histogram_quantile(text, name, 0.99)
        );
    }
    println!(
        "RESULT\tscale steady: operator CPU\t{:.1}% of one core",
        (cpu1 - cpu0) / t0.elapsed().as_secs_f64() * 100.0
    );
    println!(
        "RESULT\tscale steady: operator RSS\t{:.1} MiB (max {:.1} MiB)",
        rss as f64 / 1024.0,
        rss_max as f64 / 1024.0
    );
    env.cleanup().await
}

// ---------------------------------------------------------------------------------------------
// 5: failover at scale.

/// The metrics ports of the two replicas (beside the scale benchmark's 31081).
const FAILOVER_PORTS: [u16; 2] = [31082, 31083];
/// What the API server counts as writes.
const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "DELETE", "APPLY"];

/// One operator replica with leader election on, its metrics on a fixed port.
struct Replica {
    op: Operator,
    port: u16,
}

impl Replica {
    fn start(ns: &str, turn: &LeaseTurn, port: u16) -> anyhow::Result<Replica> {
        let log = std::env::var("BENCH_OPERATOR_LOG")
            .unwrap_or_else(|_| "warn,marekvs_operator=info".into());
        let addr = format!("127.0.0.1:{port}");
        let op = Operator::start_electing(
            ns,
            turn,
            &[
                ("RUST_LOG", log.as_str()),
                ("MAREKVS_OPERATOR_METRICS_ADDR", addr.as_str()),
            ],
        )?;
        Ok(Replica { op, port })
    }

    async fn metrics(&self, http: &reqwest::Client) -> anyhow::Result<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        Ok(http
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?)
    }

    /// Until its `marekvs_operator_leader` gauge says `leading`.
    async fn wait_role(&self, http: &reqwest::Client, leading: bool) -> anyhow::Result<()> {
        let what = if leading { "leading" } else { "standing by" };
        wait_until(&format!(":{} {what}", self.port), T, || async {
            let Ok(text) = self.metrics(http).await else {
                return Ok(None);
            };
            let leader = metric(&text, "marekvs_operator_leader");
            Ok((leader == Some(f64::from(u8::from(leading)))).then_some(()))
        })
        .await
    }
}

/// The value of an unlabelled series, if it is there.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// Every value of `label` of a counter, with its value.
fn by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let prefix = format!("{name}{{");
    let key = format!("{label}=\"");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let value = series.split(&key).nth(1)?.split('"').next()?;
            Some((value.to_string(), v.parse::<f64>().ok()?))
        })
        .fold(BTreeMap::new(), |mut m, (k, v)| {
            *m.entry(k).or_insert(0.0) += v;
            m
        })
}

/// How much each label value of a counter grew between two readings (only those that did).
fn grew_by_label(before: &str, after: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let b = by_label(before, name, label);
    by_label(after, name, label)
        .into_iter()
        .map(|(k, v)| (k.clone(), v - b.get(&k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// API server writes (all clients) between two readings, by verb then by resource.
fn apiserver_writes(before: &str, after: &str) -> (f64, BTreeMap<String, f64>) {
    let name = "apiserver_request_total";
    let write = |l: &&str| {
        WRITE_VERBS
            .iter()
            .any(|v| l.contains(&format!("verb=\"{v}\"")))
    };
    let only_writes = |t: &str| t.lines().filter(write).collect::<Vec<_>>().join("\n");
    let (b, a) = (only_writes(before), only_writes(after));
    let by_resource = grew_by_label(&b, &a, name, "resource");
    (by_resource.values().sum(), by_resource)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn fmt_counts(m: &BTreeMap<String, f64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One failover's figures.
struct FailoverRun {
    to_acquire: f64,
    first_pass: f64,
    peak_scrapes: f64,
    /// The new leader's own writes (its client's count, by verb), during the first pass and
    /// in the `after` window that follows.
    writes_pass: f64,
    writes_after: f64,
}

async fn failover(
    clusters: u64,
    members: u64,
    runs: u64,
    batch: u64,
    after: u64,
) -> anyhow::Result<()> {
    let env = TestEnv::new("bench-failover").await?;
    let ns = env.namespace.clone();
    let turn = LeaseTurn::take(&env).await?;
    let http = http();
    let mut leader = Replica::start(&ns, &turn, FAILOVER_PORTS[0])?;
    leader.wait_role(&http, true).await?;
    let mut standby = Replica::start(&ns, &turn, FAILOVER_PORTS[1])?;
    let bring_up = create_clusters(&env, clusters, members, batch).await?;
    println!(
        "RESULT\tfailover: {clusters}×{members} created and Healthy\t{:.0}s",
        bring_up.as_secs_f64()
    );
    let mut results = Vec::new();
    for run in 0..runs {
        let r = failover_once(&env, &http, &mut leader, &standby, after, run).await?;
        results.push(r);
        // The standby leads now; a fresh standby takes the killed leader's port.
        let fresh = Replica::start(&ns, &turn, leader.port)?;
        leader = std::mem::replace(&mut standby, fresh);
    }
    let col = |f: fn(&FailoverRun) -> f64| results.iter().map(f).collect::<Vec<_>>();
    summary(
        "failover: kill → lease acquired",
        "s",
        col(|r| r.to_acquire),
    );
    summary(
        "failover: lease acquired → first full pass",
        "s",
        col(|r| r.first_pass),
    );
    summary(
        "failover: peak member scrapes in flight",
        "",
        col(|r| r.peak_scrapes),
    );
    summary(
        "failover: new leader's writes during the first pass",
        "",
        col(|r| r.writes_pass),
    );
    summary(
        &format!("failover: new leader's writes in the {after} s after it"),
        "",
        col(|r| r.writes_after),
    );
    drop((leader, standby));
    env.cleanup().await
}

/// Kill the leader (SIGKILL) with `standby` standing by; time the take-over and the first
/// full pass, and count the writes around it.
async fn failover_once(
    env: &TestEnv,
    http: &reqwest::Client,
    leader: &mut Replica,
    standby: &Replica,
    after: u64,
    run: u64,
) -> anyhow::Result<FailoverRun> {
    let apiserver = || async {
        anyhow::Ok(
            env.client
                .request_text(http::Request::get("/metrics").body(vec![])?)
                .await?,
        )
    };
    standby.wait_role(http, false).await?;
    // A baseline of the API server's writes (kwok, the simulator's kubelet, the leader) while
    // the standby reads the Lease a few times.
    let baseline_window = Duration::from_secs(30);
    let api_base = apiserver().await?;
    tokio::time::sleep(baseline_window).await;
    let api0 = apiserver().await?;
    let op0 = standby.metrics(http).await?;
    let load_at_kill = loadavg();
    let (killed_at, killed) = (std::time::SystemTime::now(), Instant::now());
    leader.op.kill().await?;
    let deadline = Instant::now() + T;
    // A poll that gets no answer in time is retried (and counted): a new leader busy with
    // its first pass may answer its own /metrics late.
    let mut late_polls = 0;
    let op1 = loop {
        match standby.metrics(http).await {
            Ok(text) if metric(&text, "marekvs_operator_first_pass_seconds").is_some() => {
                break text;
            }
            Ok(_) => {}
            Err(_) => late_polls += 1,
        }
        anyhow::ensure!(Instant::now() < deadline, "no first full pass after {T:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let api1 = apiserver().await?;
    let pass_end = Instant::now();
    tokio::time::sleep(Duration::from_secs(after)).await;
    let op2 = standby.metrics(http).await?;
    let api2 = apiserver().await?;
    let load_after = loadavg();
    let since = metric(&op1, "marekvs_operator_leading_since_seconds").context("leading since")?;
    let killed_unix = killed_at
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let first_pass = metric(&op1, "marekvs_operator_first_pass_seconds").unwrap_or(f64::NAN);
    let peak = metric(&op2, "marekvs_operator_member_scrapes_in_flight_max").unwrap_or(f64::NAN);
    let own = "marekvs_operator_api_requests_total";
    let writes = |a: &str, b: &str| -> BTreeMap<String, f64> {
        grew_by_label(a, b, own, "verb")
            .into_iter()
            .filter(|(v, _)| WRITE_VERBS.contains(&v.as_str()))
            .collect()
    };
    let (w_pass, w_after) = (writes(&op0, &op1), writes(&op1, &op2));
    let r = FailoverRun {
        to_acquire: since - killed_unix,
        first_pass,
        peak_scrapes: peak,
        writes_pass: w_pass.values().sum(),
        writes_after: w_after.values().sum(),
    };
    let tag = format!("failover run {run}");
    println!("RESULT\t{tag}: kill → lease acquired\t{:.2}s", r.to_acquire);
    println!(
        "RESULT\t{tag}: lease acquired → first full pass over {} clusters\t{:.2}s",
        metric(&op1, "marekvs_operator_first_pass_clusters").unwrap_or(f64::NAN),
        r.first_pass
    );
    println!(
        "RESULT\t{tag}: member scrapes in flight, peak\t{peak:.0} (not run for want of a slot: {:.0})",
        metric(&op2, "marekvs_operator_member_scrapes_not_run_total").unwrap_or(f64::NAN)
    );
    let grew =
        |a: &str, b: &str, name: &str, label: &str| fmt_counts(&grew_by_label(a, b, name, label));
    println!(
        "RESULT\t{tag}: new leader's requests during the first pass\t{}; actions: {}; errors: {}",
        grew(&op0, &op1, own, "verb"),
        grew(&op0, &op1, "marekvs_operator_actions_total", "action"),
        grew(
            &op0,
            &op1,
            "marekvs_operator_reconcile_errors_total",
            "kind"
        ),
    );
    println!(
        "RESULT\t{tag}: new leader's requests in the {after} s after\t{}; actions: {}",
        grew(&op1, &op2, own, "verb"),
        grew(&op1, &op2, "marekvs_operator_actions_total", "action"),
    );
    let per_minute = |n: f64, d: Duration| n / d.as_secs_f64() * 60.0;
    let windows = [
        ("baseline (leader alive)", &api_base, &api0, baseline_window),
        (
            "kill → first pass done",
            &api0,
            &api1,
            pass_end.duration_since(killed),
        ),
        ("the window after", &api1, &api2, Duration::from_secs(after)),
    ];
    for (label, a, b, d) in windows {
        let (n, by) = apiserver_writes(a, b);
        println!(
            "RESULT\t{tag}: API server writes, all clients, {label}\t{:.0}/min ({n:.0} in {:.1}s: {})",
            per_minute(n, d),
            d.as_secs_f64(),
            fmt_counts(&by)
        );
    }
    println!(
        "RESULT\t{tag}: polls of the new leader's /metrics unanswered within 10 s during the first pass\t{late_polls}"
    );
    println!(
        "RESULT\t{tag}: load average (1, 5, 15 min)\tat the kill {load_at_kill}; after {load_after}"
    );
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// 5 → 4 under a steady write load.

/// `--percent 0,25,50`: the loads to run, in percent of the ring-gap rate.
fn percents(args: &[String]) -> Vec<u64> {
    args.iter()
        .position(|a| a == "--percent")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 25, 50, 100, 150])
}

async fn load(percents: &[u64], bound_seconds: u64) -> anyhow::Result<()> {
    let sim = Sim::from_env().context("the load benchmark needs the simulator")?;
    let settings = sim.settings().await?;
    let ring = settings["ring_ops_per_sec"].as_f64().unwrap_or(0.0);
    anyhow::ensure!(
        ring > 0.0,
        "the simulator's rings are unlimited: no ring-gap rate"
    );
    let gap_rate = 5.0 * ring;
    println!(
        "# ring-gap rate of 5 members: {gap_rate:.0} SET/s (R = {ring:.0}/s; anti-entropy every {} ms + up to {} ms)",
        settings["ae_interval_ms"], settings["ae_jitter_ms"]
    );
    for pct in percents {
        load_once(*pct, gap_rate, Duration::from_secs(bound_seconds)).await?;
    }
    Ok(())
}

/// One 5 → 4 with `pct` % of `gap_rate` written through the client Service from 5 s before
/// the scale-down until it completed or `bound` passed; then every acknowledged key is read
/// back through a survivor.
async fn load_once(pct: u64, gap_rate: f64, bound: Duration) -> anyhow::Result<()> {
    let env = TestEnv::new("bench-load").await?;
    let ns = env.namespace.clone();
    let log = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
    let _op = Operator::start_with(&ns, &[("RUST_LOG", log.as_str())])?;
    let api = create(&env, "bench", spec(5)).await?;
    let all: Vec<String> = (0..5).map(|i| format!("bench-{i}")).collect();
    let all_ref: Vec<&str> = all.iter().map(String::as_str).collect();
    wait_healthy(&api, "bench", &all_ref, T).await?;
    let rate = gap_rate * pct as f64 / 100.0;
    let target = load::LoadTarget::Service("bench".into());
    let writer = load::SteadyLoad::start(
        env.client.clone(),
        &ns,
        target,
        rate,
        "bench-0",
        "bench-load",
    )?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let started = Instant::now();
    patch_spec(&api, "bench", json!({"nodes": 4})).await?;
    let outcome = loop {
        let s = status_of(&api.get("bench").await?);
        if s.phase == Some(marekvs_api::ClusterPhase::Healthy)
            && s.instance_names.len() == 4
            && s.removal.is_none()
        {
            break format!("completed\ttime={:.1}s", started.elapsed().as_secs_f64());
        }
        if started.elapsed() > bound {
            let why = match &s.handoff_hold {
                Some(h) => format!("{:?}/{:?} on {:?}", h.reason, h.moving, h.members),
                None => format!(
                    "no handoffHold: phase {:?}, blocked {:?}, removal {:?}",
                    s.phase,
                    s.block_reason,
                    s.removal.as_ref().map(|r| (&r.member, r.step))
                ),
            };
            break format!("held\ttime>{}s\twhy={why}", bound.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let report = writer.stop().await?;
    let written = report.data.len();
    let achieved = report.rate();
    let failed = report.failed;
    // Read back through bench-0, which the writer skipped and the scale-down keeps.
    let c = api.get("bench").await?;
    anyhow::ensure!(
        status_of(&c).instance_names.iter().any(|m| m == "bench-0"),
        "bench-0 was removed"
    );
    let pods: Api<Pod> = env.api();
    let lost = match report
        .data
        .verify_within(&pods, Duration::from_secs(60))
        .await
    {
        Ok(_) => 0,
        Err(e) => match e.downcast_ref::<data::Lost>() {
            Some(l) => l.missing.len(),
            None => return Err(e),
        },
    };
    println!(
        "RESULT\tload_5_to_4\tload={pct}%\trate={rate:.0}/s\tachieved={achieved:.0}/s\t{outcome}\twritten={written}\tfailed={failed}\tlost={lost}"
    );
    env.cleanup().await
}

// ---------------------------------------------------------------------------------------------
// The hand-off trap: everything written through the two members a 5 → 3 removes.

/// `keys` keys of 1 KiB written through the two highest ordinals, which the scale-down to
/// replicationFactor + 1 members removes (5 → 3 at RF 2, 6 → 4 at RF 3: the floor), then that
/// scale-down, then every key read back through trap-0, which wrote none.
async fn trap(rf: u32, keys: usize, bound: Duration) -> anyhow::Result<()> {
    let env = TestEnv::new("bench-trap").await?;
    let ns = env.namespace.clone();
    let log = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
    let _op = Operator::start_with(&ns, &[("RUST_LOG", log.as_str())])?;
    let (from, to) = (rf + 3, rf + 1);
    let mut cluster = spec(from);
    cluster["replicationFactor"] = json!(rf);
    let api = create(&env, "trap", cluster).await?;
    let all: Vec<String> = (0..from).map(|i| format!("trap-{i}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    wait_healthy(&api, "trap", &all, T).await?;
    let pods: Api<Pod> = env.api();
    let written = Instant::now();
    let leavers = &all[to as usize..];
    let data = data::DataSet::write_sized(&pods, leavers, "trap-0", keys, "trap", 1024).await?;
    let write_s = written.elapsed().as_secs_f64();
    println!(
        "# trap rf {rf}: {} keys of 1 KiB written through {:?} in {write_s:.1}s; {from} → {to}",
        data.len(),
        data.written_through()
    );
    let started = Instant::now();
    let recorder = record_status(api.clone(), "trap", &ns);
    patch_spec(&api, "trap", json!({"nodes": to})).await?;
    let scaled = wait_healthy(&api, "trap", &all[..to as usize], bound).await;
    recorder.abort();
    let scale_s = started.elapsed().as_secs_f64();
    if let Err(e) = &scaled {
        println!("# trap rf {rf}: the {from} → {to} did not complete within {bound:?}: {e:#}");
    }
    let reading = Instant::now();
    let lost = match data.verify_within(&pods, data::bound()).await {
        Ok(_) => 0,
        Err(e) => match e.downcast_ref::<data::Lost>() {
            Some(l) => {
                println!("# trap rf {rf}: {l}");
                for k in &l.missing {
                    eprintln!("trap lost key: {k}");
                }
                // Where the lost keys are: a survivor's own store, read without read-through.
                for (member, held) in data
                    .local_holders(&pods, &all[..to as usize], &l.missing)
                    .await
                {
                    match held {
                        Ok(n) => println!(
                            "# trap rf {rf}: {member} holds {n} of the {} lost keys",
                            l.missing.len()
                        ),
                        Err(e) => println!("# trap rf {rf}: {member}: {e:#}"),
                    }
                }
                l.missing.len()
            }
            None => return Err(e),
        },
    };
    let read_s = reading.elapsed().as_secs_f64();
    let outcome = if scaled.is_ok() { "completed" } else { "held" };
    println!(
        "RESULT\ttrap\trf={rf}\tkeys={}\tlost={lost}\t{from}to{to}={outcome}\tscale_s={scale_s:.1}\twrite_s={write_s:.1}\tread_s={read_s:.1}",
        data.len()
    );
    env.cleanup().await
}

/// Every 2 s until aborted, the cluster's removal, hand-off hold and each member's quiet
/// record (rounds, bytes unacknowledged, sent count) as one JSON line, when any of them changed,
/// appended to `status-<namespace>.log` beside the operator's log: what the gate saw, to read
/// after a run that lost keys.
fn record_status(
    api: Api<marekvs_api::MarekvsCluster>,
    name: &'static str,
    namespace: &str,
) -> tokio::task::JoinHandle<()> {
    let dir = std::env::var("MAREKVS_E2E_LOG_DIR")
        .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    let path = format!("{dir}/status-{namespace}.log");
    tokio::spawn(async move {
        use std::io::Write;
        let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        else {
            eprintln!("# status recorder: cannot open {path}");
            return;
        };
        let mut last = String::new();
        loop {
            if let Ok(c) = api.get(name).await {
                let status = serde_json::to_value(&c.status).unwrap_or(Value::Null);
                let members: Vec<Value> = status["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        let x = &m["metrics"];
                        json!([
                            m["name"],
                            m["phase"],
                            m["quietReset"],
                            m["quietSince"],
                            m["roundsAtQuiet"],
                            x["aeRoundsTotal"],
                            x["replInflightBytes"],
                            x["replOpsSentTotal"],
                            m["sentChangedAt"],
                            x["aeRepairOpsTotal"],
                            x["underreplicatedPartitions"]
                        ])
                    })
                    .collect();
                let line = json!({"removal": status["removal"], "hold": status["handoffHold"], "members": members})
                    .to_string();
                if line != last {
                    let unix = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    let _ = writeln!(file, "{unix:.3} {line}");
                    last = line;
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Steady load over pooled connections: the data plane alone, then a 5 → 4 under the same load.

/// A healthy five-member cluster `name` (RF 2) with its own operator, in a namespace of its
/// own.
async fn five_members(
    prefix: &str,
    name: &str,
) -> anyhow::Result<(TestEnv, Operator, Api<marekvs_api::MarekvsCluster>)> {
    let env = TestEnv::new(prefix).await?;
    let log = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
    let op = Operator::start_with(&env.namespace, &[("RUST_LOG", log.as_str())])?;
    let api = create(&env, name, spec(5)).await?;
    let all: Vec<String> = (0..5).map(|i| format!("{name}-{i}")).collect();
    let all_ref: Vec<&str> = all.iter().map(String::as_str).collect();
    wait_healthy(&api, name, &all_ref, T).await?;
    Ok((env, op, api))
}

/// Read every acknowledged key back through the report's reader within `bound`: (keys lost,
/// seconds to the first pass that found every key, or the bound).
async fn read_back(
    pods: &Api<Pod>,
    report: &load::LoadReport,
    bound: Duration,
) -> anyhow::Result<(usize, f64)> {
    let started = Instant::now();
    let lost = match report.data.verify_within(pods, bound).await {
        Ok(_) => 0,
        Err(e) => match e.downcast_ref::<data::Lost>() {
            Some(l) => {
                println!("# {l}");
                l.missing.len()
            }
            None => return Err(e),
        },
    };
    Ok((lost, started.elapsed().as_secs_f64()))
}

async fn ladder(
    rates: &[u64],
    seconds: Duration,
    connections: usize,
    bound: Duration,
) -> anyhow::Result<()> {
    for rate in rates {
        // The data plane alone: the same load, nobody removed.
        let (env, _op, _api) = five_members("bench-alone", "bench").await?;
        let target = load::LoadTarget::Pooled {
            service: "bench".into(),
            connections,
        };
        let writer = load::SteadyLoad::start(
            env.client.clone(),
            &env.namespace,
            target.clone(),
            *rate as f64,
            "bench-0",
            "alone",
        )?;
        tokio::time::sleep(seconds).await;
        let report = writer.stop().await?;
        let pods: Api<Pod> = env.api();
        let (lost, read_s) = read_back(&pods, &report, bound).await?;
        println!(
            "RESULT\tladder_alone\trate={rate}/s\tachieved={:.0}/s\tseconds={}\twritten={}\tfailed={}\tlost={lost}\tread_s={read_s:.1}\tper_member={:?}",
            report.rate(),
            seconds.as_secs(),
            report.data.len(),
            report.failed,
            report.per_member
        );
        env.cleanup().await?;

        // A 5 → 4 under the same load: connections opened first, kept through the removal.
        let (env, _op, api) = five_members("bench-ladder", "bench").await?;
        let writer = load::SteadyLoad::start(
            env.client.clone(),
            &env.namespace,
            target,
            *rate as f64,
            "bench-0",
            "ladder",
        )?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let started = Instant::now();
        patch_spec(&api, "bench", json!({"nodes": 4})).await?;
        let mut cut = None;
        let outcome = loop {
            let st = status_of(&api.get("bench").await?);
            if let Some(at) = st
                .removal
                .as_ref()
                .and_then(|r| r.connections_cut_at.as_ref())
            {
                cut.get_or_insert_with(|| at.0.to_string());
            }
            if st.phase == Some(marekvs_api::ClusterPhase::Healthy)
                && st.instance_names.len() == 4
                && st.removal.is_none()
            {
                break format!("completed\ttime={:.1}s", started.elapsed().as_secs_f64());
            }
            if started.elapsed() > bound {
                let why = st.handoff_hold.as_ref().map_or_else(
                    || format!("phase {:?}", st.phase),
                    |h| {
                        format!(
                            "{:?}/{:?} on {:?}: {}",
                            h.reason, h.moving, h.members, h.message
                        )
                    },
                );
                break format!("held\ttime>{}s\twhy={why}", bound.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        // The load goes on as long as the 5 → 4 took (it never stops for the removal).
        let report = writer.stop().await?;
        let pods: Api<Pod> = env.api();
        let (lost, read_s) = read_back(&pods, &report, bound).await?;
        println!(
            "RESULT\tladder_5_to_4\trate={rate}/s\tachieved={:.0}/s\t{outcome}\tconnections_cut={}\twritten={}\tfailed={}\tlost={lost}\tread_s={read_s:.1}\tper_member={:?}",
            report.rate(),
            cut.unwrap_or_else(|| "no".into()),
            report.data.len(),
            report.failed,
            report.per_member
        );
        env.cleanup().await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A client pinned to the leaver's pod address: it holds the removal until it stops.

async fn pinned(rate: f64, seconds: Duration) -> anyhow::Result<()> {
    let (env, _op, api) = five_members("bench-pinned", "bench").await?;
    let writer = load::SteadyLoad::start(
        env.client.clone(),
        &env.namespace,
        load::LoadTarget::Pod("bench-4".into()),
        rate,
        "bench-0",
        "pinned",
    )?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let started = Instant::now();
    patch_spec(&api, "bench", json!({"nodes": 4})).await?;
    let mut last_hold = String::new();
    while started.elapsed() < seconds {
        let st = status_of(&api.get("bench").await?);
        anyhow::ensure!(
            st.instance_names.len() == 5,
            "bench-4 removed while its client still wrote to it"
        );
        if let Some(h) = &st.handoff_hold {
            last_hold = format!(
                "{:?}/{:?} on {:?} at {:?}/s: {}",
                h.reason, h.moving, h.members, h.rate_per_second, h.message
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let report = writer.stop().await?;
    println!("# pinned: held {}s by: {last_hold}", seconds.as_secs());
    let stopped = Instant::now();
    let all: Vec<String> = (0..4).map(|i| format!("bench-{i}")).collect();
    let all_ref: Vec<&str> = all.iter().map(String::as_str).collect();
    wait_healthy(&api, "bench", &all_ref, T).await?;
    let after_s = stopped.elapsed().as_secs_f64();
    let pods: Api<Pod> = env.api();
    let (lost, read_s) = read_back(&pods, &report, data::bound()).await?;
    println!(
        "RESULT\tpinned\trate={rate:.0}/s\twritten={}\tfailed={}\theld_s={}\tcompleted_after_stop_s={after_s:.1}\tlost={lost}\tread_s={read_s:.1}",
        report.data.len(),
        report.failed,
        seconds.as_secs()
    );
    env.cleanup().await
}
