//! Scale-down under a steady write load: a member removed by hand right after writes went
//! through it loses what its ring had not shipped (the trap), and the operator's 5 → 4 under
//! load loses nothing: it completes once the leaver's own anti-entropy rounds began after its
//! last client input, or it holds and says why in `status.handoffHold`. Rates are absolute
//! SET/s: the simulator ships a member's writes at the real node's pace, which this harness's
//! writer cannot outrun; what the node's ring misses at any rate (silent skips) only
//! anti-entropy delivers.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use marekvs_api::{BlockReason, ClusterPhase, MarekvsCluster};
use marekvs_e2e::load::{LoadReport, LoadTarget, SteadyLoad};
use marekvs_e2e::*;
use serde_json::json;

const T: Duration = Duration::from_secs(120);
/// Writes a second through the member deleted in the trap: more than this harness achieves.
const TRAP_RATE: f64 = 20_000.0;
const FIVE: [&str; 5] = ["demo-0", "demo-1", "demo-2", "demo-3", "demo-4"];

/// The trap, without the operator disrupting anything: writes go through demo-2 as fast as the
/// harness can, and its pod and PVC are deleted by hand, the pod forced, while they do. What its ring skipped
/// and no anti-entropy round delivered was only on its volume: the data check counts it lost.
async fn a_member_deleted_right_after_writes_went_past_its_ring_loses_them() -> anyhow::Result<()> {
    let env = TestEnv::new("ring-trap").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(3)).await?;
    let all = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &all, T).await?;
    let rate = TRAP_RATE;
    let load = SteadyLoad::start(
        env.client.clone(),
        &ns,
        LoadTarget::Pod("demo-2".into()),
        rate,
        "demo-0",
        "ring-trap",
    )?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<Pod> = env.api();
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    // Forced, as a node lost with its disk: a graceful delete let the member flush and run
    // anti-entropy through its grace, and the trap then lost 5 to 65 of about 92,000 keys in
    // CI, and once none at all.
    pvcs.delete("data-demo-2", &DeleteParams::default()).await?;
    pods.delete("demo-2", &DeleteParams::default().grace_period(0))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = load.stop().await?;
    eprintln!(
        "ring trap: {} writes acknowledged through demo-2 at {:.0}/s ({} failed)",
        report.data.len(),
        report.rate(),
        report.failed
    );
    wait_healthy(&api, "demo", &all, T).await?;
    let err = report
        .data
        .verify_within(&pods, Duration::from_secs(20))
        .await
        .expect_err("writes past the ring of a deleted member cannot read back");
    let lost = err
        .downcast_ref::<data::Lost>()
        .with_context(|| format!("a verdict of lost keys, not: {err:#}"))?;
    eprintln!(
        "ring trap: {} of {} acknowledged keys lost with demo-2's pod and volume",
        lost.missing.len(),
        lost.total
    );
    assert!(!lost.missing.is_empty());
    assert!(
        lost.missing.len() < lost.total,
        "what went through its ring survived"
    );
    env.cleanup().await
}

/// How a 5 → 4 under load ended.
enum Outcome {
    Completed(Duration),
    /// Held by the gate, with what `status.handoffHold` said.
    Held(String),
}

/// What status showed while the 5 → 4 ran.
#[derive(Default)]
struct Seen {
    /// `status.backgroundRepair` was set: repairs moved that held nothing (the old gate,
    /// "every counter still for the settle window", would have held on them).
    background_repair: bool,
    /// `status.handoffHold` said the leaver still took client input or had not yet begun the
    /// anti-entropy rounds that hand on what it holds (`LeaverBacklog`).
    leaver_backlog: bool,
    /// `status.removal.connectionsCutAt` was set: the leaver was restarted on its own volume
    /// to close the client connections it still took writes over.
    connections_cut: bool,
}

/// A 5 → 4 by the operator while clients write `rate` SET/s through the client Service (as
/// `target` says: pooled connections kept, or endpoints followed); every acknowledged key
/// reads back whatever the outcome. It must complete within `bound`, or hold with
/// `status.handoffHold` naming what keeps moving, where and how fast; neither fails.
async fn scale_down_under_load(
    rate: f64,
    target: LoadTarget,
    label: &str,
    bound: Duration,
) -> anyhow::Result<(Outcome, Seen)> {
    let env = TestEnv::new(label).await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(5)).await?;
    wait_healthy(&api, "demo", &FIVE, T).await?;
    let load = SteadyLoad::start(env.client.clone(), &ns, target, rate, "demo-0", label)?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    anyhow::ensure!(
        load.acked() > 0,
        "the load writes through the client Service"
    );
    patch_spec(&api, "demo", json!({"nodes": 4})).await?;
    let start = Instant::now();
    let mut seen = Seen::default();
    let outcome = wait_outcome(&api, start, bound, &mut seen).await;
    let report = load.stop().await?;
    eprintln!(
        "{label}: {} keys acknowledged at {:.0}/s ({rate:.0}/s asked), {} failed, through {:?}",
        report.data.len(),
        report.rate(),
        report.failed,
        report.data.written_through()
    );
    // Every acknowledged key reads back whatever the outcome, held or completed, through
    // demo-0, which wrote none of them (the writer skips it) and stays (the highest ordinal
    // goes).
    let c = api.get("demo").await?;
    anyhow::ensure!(
        status_of(&c).instance_names.iter().any(|m| m == "demo-0"),
        "demo-0 was removed: {:?}",
        status_of(&c).instance_names
    );
    read_back(&env, &report.data).await?;
    let outcome = outcome?;
    env.cleanup().await?;
    Ok((outcome, seen))
}

/// Completed (Healthy with four members), or held with a populated `status.handoffHold` once
/// `bound` has passed; an error if neither.
async fn wait_outcome(
    api: &Api<MarekvsCluster>,
    start: Instant,
    bound: Duration,
    seen: &mut Seen,
) -> anyhow::Result<Outcome> {
    loop {
        let s = status_of(&api.get("demo").await?);
        seen.background_repair |= s.background_repair.is_some();
        seen.leaver_backlog |= s
            .handoff_hold
            .as_ref()
            .is_some_and(|h| h.reason == BlockReason::LeaverBacklog);
        seen.connections_cut |= s
            .removal
            .as_ref()
            .is_some_and(|r| r.connections_cut_at.is_some());
        if s.phase == Some(ClusterPhase::Healthy)
            && s.instance_names.len() == 4
            && s.removal.is_none()
        {
            return Ok(Outcome::Completed(start.elapsed()));
        }
        if start.elapsed() > bound {
            let hold = s.handoff_hold.with_context(|| {
                format!(
                    "the 5 → 4 neither completed within {bound:?} nor reported a hold in status.handoffHold (phase {:?}, blocked {:?}, removal {:?})",
                    s.phase, s.block_reason, s.removal
                )
            })?;
            anyhow::ensure!(
                !hold.members.is_empty(),
                "the hold names where it moves: {hold:?}"
            );
            anyhow::ensure!(!hold.message.is_empty(), "the hold says why: {hold:?}");
            return Ok(Outcome::Held(format!(
                "{:?}: {:?} on {:?} at {:?}/s since {:?}: {}",
                hold.reason,
                hold.moving,
                hold.members,
                hold.rate_per_second,
                hold.since,
                hold.message
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// At 250 SET/s over 8 pooled connections, opened through the client Service before the
/// scale-down and kept (as behind kube-proxy: a Service change closes none, and a marekvs node
/// cannot), the 5 → 4 completes: the leaver keeps taking writes over the connections it has,
/// so 15 s into its hand-off the operator restarts it on its own volume, which closes them;
/// they reopen on the other members, and the leaver's own anti-entropy rounds then hand on
/// what it holds. Every acknowledged key reads back. Real members and simulated alike.
async fn a_scale_down_under_a_steady_load_completes_and_loses_nothing() -> anyhow::Result<()> {
    let pooled = LoadTarget::Pooled {
        service: "demo".into(),
        connections: 8,
    };
    let (outcome, seen) =
        scale_down_under_load(250.0, pooled, "load-250", Duration::from_secs(300)).await?;
    eprintln!(
        "load-250: background repair reported {}, the leaver held its hand-off {}, its connections cut {}",
        seen.background_repair, seen.leaver_backlog, seen.connections_cut
    );
    match outcome {
        Outcome::Completed(took) => {
            eprintln!("load-250: 5 → 4 completed in {:.1}s", took.as_secs_f64());
        }
        Outcome::Held(why) => anyhow::bail!("held at 250 SET/s: {why}"),
    }
    anyhow::ensure!(
        seen.connections_cut,
        "the pooled connections to the leaver were never cut (status.removal.connectionsCutAt)"
    );
    Ok(())
}

/// A client writing to the leaver's pod address (as one that dials per-pod DNS or the
/// addresses `CLUSTER NODES` gives): no Service change stops it, and restarting the leaver
/// does not either (it dials the new pod). It holds the removal, and status names the member
/// and the writes still arriving; nothing it wrote is lost; once it stops, the removal
/// completes. Real members and simulated alike.
async fn a_client_writing_to_the_leavers_pod_address_holds_the_removal_until_it_stops()
-> anyhow::Result<()> {
    let env = TestEnv::new("pinned").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(5)).await?;
    wait_healthy(&api, "demo", &FIVE, T).await?;
    let load = SteadyLoad::start(
        env.client.clone(),
        &ns,
        LoadTarget::Pod("demo-4".into()),
        100.0,
        "demo-0",
        "pinned",
    )?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    patch_spec(&api, "demo", json!({"nodes": 4})).await?;
    let held = wait_cluster(
        &api,
        "demo",
        "the removal held by the pinned client",
        T,
        |s| {
            s.handoff_hold.as_ref().is_some_and(|h| {
                h.moving == marekvs_api::Moving::ClientTraffic
                    && h.members == ["demo-4"]
                    && h.rate_per_second.is_some_and(|r| r > 0.0)
            })
        },
    )
    .await?;
    let h = status_of(&held).handoff_hold.unwrap();
    eprintln!(
        "pinned: held: {:?} {:?}/s: {}",
        h.reason, h.rate_per_second, h.message
    );
    anyhow::ensure!(
        h.message.contains("demo-4") && h.message.contains("write commands"),
        "the hold names the member and its writes: {}",
        h.message
    );
    // Past the restart that closes pooled connections (15 s in): still held, demo-4 still a
    // member, while its client writes.
    let holding = Instant::now();
    while holding.elapsed() < Duration::from_secs(45) {
        let s = status_of(&api.get("demo").await?);
        anyhow::ensure!(
            s.instance_names.iter().any(|m| m == "demo-4"),
            "demo-4 removed while its client still wrote to it"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let report = load.stop().await?;
    eprintln!(
        "pinned: {} keys acknowledged through demo-4, {} failed (its restart)",
        report.data.len(),
        report.failed
    );
    let stopped = Instant::now();
    wait_healthy(&api, "demo", &FIVE[..4], Duration::from_secs(300)).await?;
    eprintln!(
        "pinned: 5 → 4 completed {:.1}s after the client stopped",
        stopped.elapsed().as_secs_f64()
    );
    read_back(&env, &report.data).await?;
    env.cleanup().await
}

/// At 3,000 SET/s (as fast as this harness writes), through a client that follows the
/// Service's endpoints (it leaves a member taken out of the Service within half a second),
/// repairs move on the members all the time: the 5 → 4 still completes (repairs hold nothing;
/// the leaver's client traffic stops once it leaves the Service), and no acknowledged key is
/// lost. A hold past the bound fails the test,
/// with what the cluster said.
async fn a_scale_down_under_a_heavy_load_loses_nothing_and_completes() -> anyhow::Result<()> {
    let _sim = Sim::required()?;
    let (outcome, seen) = scale_down_under_load(
        3_000.0,
        LoadTarget::Service("demo".into()),
        "load-3000",
        Duration::from_secs(120),
    )
    .await?;
    match outcome {
        Outcome::Completed(took) => {
            eprintln!("load-3000: 5 → 4 completed in {:.1}s", took.as_secs_f64())
        }
        Outcome::Held(why) => anyhow::bail!("held at 3,000 SET/s: {why}"),
    }
    eprintln!(
        "load-3000: background repair reported {}, the leaver held its hand-off {}",
        seen.background_repair, seen.leaver_backlog
    );
    // Skipped ring entries are repaired: repairs move that the old gate would have waited on.
    anyhow::ensure!(
        seen.background_repair,
        "no background repair seen under load"
    );
    Ok(())
}

/// The control both fast-leaver tests rely on, measured with no operator action at all
/// (`MAREKVS_BIN=<marekvs-server> hack/bench.sh control`, docs/benchmarks.md): at this rate,
/// over [`CONTROL_CONNECTIONS`] connections all on one member, values of [`CONTROL_VALUE`]
/// bytes, for [`CONTROL_SECONDS`], and after a burst of [`CONTROL_BURST`] keys of
/// [`CONTROL_BURST_VALUE`] bytes through one member, every acknowledged key read back through another member within the data
/// check's bound. A loss at a rate above it would prove nothing about the gate.
const CONTROL_RATE: f64 = 1_000.0;
const CONTROL_CONNECTIONS: usize = 4;
const CONTROL_VALUE: usize = 1024;
const CONTROL_SECONDS: u64 = 30;
const CONTROL_BURST: usize = 20_000;
/// Bytes of each burst value: 20,000 of them with the data check's overwrites (about 360 MB)
/// outrun the leaver's shipping by more than its 128 MiB ring, so its cursors gap (9,000 of
/// them passed the cap but never gapped: what the ring evicted had shipped). Values of 1 KiB
/// (140,000 keys) pass it too, but ship slowly: 896 s for the removal. (A burst past its 262,144-entry cap in 64-byte values, 300,000
/// keys, did not converge in the control: 163,158 keys still unreadable at the bound with no
/// member removed.)
const CONTROL_BURST_VALUE: usize = 16_384;

/// What a marekvs 0.2 node logs when a peer's cursor falls behind the oldest entry its ring
/// keeps, so entries it never shipped to that peer are left to anti-entropy
/// (`marekvs-repl/src/lib.rs`).
const RING_GAP_LOG: &str = "ring gap for peer";

fn control_line(test: &str) {
    eprintln!(
        "{test}: relies on the control (docs/benchmarks.md, hack/bench.sh control): with no member removed, {CONTROL_RATE:.0} SET/s of {CONTROL_VALUE} B over {CONTROL_CONNECTIONS} connections on one member for {CONTROL_SECONDS} s, and a burst of {CONTROL_BURST} keys of {CONTROL_BURST_VALUE} B through one member, read back in full"
    );
}

/// What status showed about the leaver while a 5 → 4 ran, until it completed.
#[derive(Default, Debug)]
struct LeaverSeen {
    /// `status.members[demo-4].windowLost`, the first reading of each cause.
    restarted: bool,
    ring_at_cap: bool,
    /// The highest `metrics.ringBytes` and `metrics.ringOps` read on demo-4.
    ring_bytes: i64,
    ring_ops: i64,
    /// `status.removal.connectionsCutAt` was set.
    connections_cut: bool,
    /// Each distinct `status.handoffHold` message, in order.
    holds: Vec<String>,
    /// The phase and block reason at the last reading.
    last: String,
}

/// One reading of status: what it says about demo-4 goes into `seen`; true once the 5 → 4
/// completed (Healthy with four members and no removal).
async fn observe_leaver(api: &Api<MarekvsCluster>, seen: &mut LeaverSeen) -> anyhow::Result<bool> {
    let s = status_of(&api.get("demo").await?);
    if let Some(m) = s.members.iter().find(|m| m.name == "demo-4") {
        match m.window_lost.as_ref().map(|w| w.cause) {
            Some(marekvs_api::WindowLossCause::Restarted) => seen.restarted = true,
            Some(marekvs_api::WindowLossCause::RingAtCap) => seen.ring_at_cap = true,
            None => {}
        }
        if let Some(x) = &m.metrics {
            seen.ring_bytes = seen.ring_bytes.max(x.ring_bytes.unwrap_or(0));
            seen.ring_ops = seen.ring_ops.max(x.ring_ops.unwrap_or(0));
        }
    }
    seen.connections_cut |= s
        .removal
        .as_ref()
        .is_some_and(|r| r.connections_cut_at.is_some());
    if let Some(h) = &s.handoff_hold
        && seen.holds.last() != Some(&h.message)
    {
        seen.holds.push(h.message.clone());
    }
    seen.last = format!("phase {:?}, blocked {:?}", s.phase, s.block_reason);
    Ok(
        s.phase == Some(ClusterPhase::Healthy)
            && s.instance_names.len() == 4
            && s.removal.is_none(),
    )
}

/// Wait for the 5 → 4 to complete within `bound` of `since`, recording what status says
/// about demo-4, and stop `load` once it has run for `load_for`; an error, with what was
/// seen, if it does not complete.
async fn leaver_until_removed(
    api: &Api<MarekvsCluster>,
    since: Instant,
    bound: Duration,
    seen: &mut LeaverSeen,
    load: &mut Option<(SteadyLoad, Instant, Duration)>,
    report: &mut Option<LoadReport>,
) -> anyhow::Result<Duration> {
    loop {
        if load
            .as_ref()
            .is_some_and(|(_, started, load_for)| started.elapsed() >= *load_for)
            && let Some((l, _, _)) = load.take()
        {
            *report = Some(l.stop().await?);
        }
        if observe_leaver(api, seen).await? {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(
            since.elapsed() < bound,
            "the 5 → 4 did not complete within {bound:?}; seen: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A fast client pooled on the leaver: 4 connections opened on demo-4's pod address write
/// 1 KiB values at the control's rate, past the Service change, until the operator restarts
/// demo-4 to close them; then they reopen through the Service on the others, until the load
/// has lasted as long as the control's. What demo-4's
/// ring had not shipped when it exited (it waits at most 7 s) is on its volume only, and its
/// restarted ring is empty, so `marekvs_repl_inflight_bytes` reads 0 with those writes still
/// unshipped. Gate v4 records the restart (`windowLost: Restarted`, from the reading before
/// it with bytes unacknowledged) and lets demo-4 go only once repairs have been quiet on every
/// member. Every acknowledged key reads back, and the 5 → 4 completes. Where demo-4's ring
/// had shipped everything at its last reading before the restart (a calm machine), the
/// v4 sub-check is reported skipped, saying so. Real members only:
/// the simulator's ring is not what is tested.
async fn a_fast_client_on_the_leaver_cut_by_its_restart_loses_nothing() -> anyhow::Result<()> {
    let test = "fast-leaver";
    control_line(test);
    let env = TestEnv::new(test).await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(5)).await?;
    wait_healthy(&api, "demo", &FIVE, T).await?;
    let load = SteadyLoad::start_sized(
        env.client.clone(),
        &ns,
        LoadTarget::PooledFrom {
            member: "demo-4".into(),
            service: "demo".into(),
            connections: CONTROL_CONNECTIONS,
        },
        CONTROL_RATE,
        "demo-0",
        test,
        CONTROL_VALUE,
    )?;
    let load_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    anyhow::ensure!(load.acked() > 0, "the client writes through demo-4");
    patch_spec(&api, "demo", json!({"nodes": 4})).await?;
    // The load lasts as long as the control's, then stops: the control shows the data plane
    // converging after that much, not after an endless load.
    let mut seen = LeaverSeen::default();
    let mut load = Some((load, load_started, Duration::from_secs(CONTROL_SECONDS)));
    let mut report = None;
    let took = leaver_until_removed(
        &api,
        Instant::now(),
        Duration::from_secs(900),
        &mut seen,
        &mut load,
        &mut report,
    )
    .await;
    let report = match (report, load) {
        (Some(r), _) => r,
        (None, Some((l, _, _))) => l.stop().await?,
        (None, None) => anyhow::bail!("the load was taken and not reported"),
    };
    eprintln!(
        "{test}: {} keys acknowledged at {:.0}/s, {} failed, through {:?}; its connections to demo-4 first broke {:?} after it started",
        report.data.len(),
        report.rate(),
        report.failed,
        report.per_member,
        report.first_cut
    );
    eprintln!("{test}: holds seen: {:#?}", seen.holds);
    read_back(&env, &report.data).await?;
    let took = took?;
    eprintln!(
        "{test}: 5 → 4 completed in {:.1}s; demo-4 restarted with bytes unacknowledged (windowLost Restarted) {}",
        took.as_secs_f64(),
        seen.restarted
    );
    anyhow::ensure!(
        seen.connections_cut && report.first_cut.is_some(),
        "the operator never cut the client's connections to demo-4 (connectionsCutAt {}, the client's first cut {:?})",
        seen.connections_cut,
        report.first_cut
    );
    // Whether the restart leaves writes unshipped depends on how fast the leaver ships, so on
    // the machine's load: in 2 of 4 runs it did (and gate v4 held demo-4 on quiet repairs); in 2
    // runs on a calmer machine its last reading showed every byte acknowledged.
    if seen.restarted {
        eprintln!(
            "{test}: demo-4 restarted after a reading with bytes unacknowledged: gate v4's restart rule held it until repairs were quiet"
        );
    } else {
        skipped_check(
            "gate v4's restart rule (fast-leaver)",
            "demo-4's last reading before its restart showed every byte acknowledged: at this rate its ring had shipped, so the restart left no write unshipped (no windowLost Restarted); what the test asserts besides (the cut, completion, every key read back) held",
        );
    }
    env.cleanup().await
}

/// A burst past the leaver's ring: [`CONTROL_BURST`] keys of 16 KiB (more than its 128 MiB
/// cap, with the data check's overwrites and deletes) through demo-4 as fast as the harness
/// writes, then at once a 5 → 4 that removes demo-4. Its ring evicts entries it never shipped
/// and its cursors jump the gap; once the rest ships, `marekvs_repl_inflight_bytes` reads 0
/// with the evicted writes on its volume only. Gate v4 records the ring near its cap while
/// its own writes were unshipped (`windowLost: RingAtCap`) and lets demo-4 go only once
/// repairs have been quiet on every member. Every key reads back, and the 5 → 4 completes.
/// Real members only: what it tests is the node's own ring, eviction and shipping.
async fn a_burst_past_the_leavers_ring_loses_nothing() -> anyhow::Result<()> {
    let test = "ring-burst";
    control_line(test);
    let env = TestEnv::new(test).await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(5)).await?;
    wait_healthy(&api, "demo", &FIVE, T).await?;
    let pods: Api<Pod> = env.api();
    let written = Instant::now();
    let set = data::DataSet::write_sized(
        &pods,
        &["demo-4"],
        "demo-0",
        CONTROL_BURST,
        test,
        CONTROL_BURST_VALUE,
    )
    .await?;
    eprintln!(
        "{test}: {} keys of {CONTROL_BURST_VALUE} B written through demo-4 in {:.1}s",
        set.len(),
        written.elapsed().as_secs_f64()
    );
    patch_spec(&api, "demo", json!({"nodes": 4})).await?;
    let mut seen = LeaverSeen::default();
    let took = leaver_until_removed(
        &api,
        Instant::now(),
        Duration::from_secs(1200),
        &mut seen,
        &mut None,
        &mut None,
    )
    .await;
    eprintln!("{test}: holds seen: {:#?}", seen.holds);
    // The node's own word that its cursors jumped evicted entries: marekvs-repl warns "ring
    // gap for peer; relying on anti-entropy" each time a peer's cursor falls behind the
    // oldest entry kept.
    let gaps = member_log(&ns, "demo-4").map(|log| log.matches(RING_GAP_LOG).count());
    read_back(&env, &set).await?;
    let took = took?;
    eprintln!(
        "{test}: 5 → 4 completed in {:.1}s; demo-4's ring read up to {} entries, {} bytes; windowLost RingAtCap {}; ring gaps in demo-4's log: {gaps:?}",
        took.as_secs_f64(),
        seen.ring_ops,
        seen.ring_bytes,
        seen.ring_at_cap
    );
    match gaps {
        Ok(n) => anyhow::ensure!(
            n > 0,
            "demo-4's log shows no ring gap: every entry its ring evicted had shipped, so the burst left nothing to anti-entropy alone and the test did not test the case (raise CONTROL_BURST)"
        ),
        Err(why) => skipped_check("ring-burst: demo-4's ring gapped (its log)", &why),
    }
    anyhow::ensure!(
        seen.ring_at_cap,
        "demo-4's ring was never read near its cap while its writes were unshipped (up to {} entries, {} bytes): the test did not test the case",
        seen.ring_ops,
        seen.ring_bytes
    );
    env.cleanup().await
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        a_member_deleted_right_after_writes_went_past_its_ring_loses_them needs [SimulatedDataPlane],
        a_scale_down_under_a_steady_load_completes_and_loses_nothing,
        a_client_writing_to_the_leavers_pod_address_holds_the_removal_until_it_stops,
        a_scale_down_under_a_heavy_load_loses_nothing_and_completes needs [SimulatedDataPlane],
        a_fast_client_on_the_leaver_cut_by_its_restart_loses_nothing needs [RealDataPlane],
        a_burst_past_the_leavers_ring_loses_nothing needs [RealDataPlane],
    ])
}
