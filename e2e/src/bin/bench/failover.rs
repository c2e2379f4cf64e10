//! 5: failover at scale.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use marekvs_e2e::*;

use crate::common::{T, create_clusters, loadavg, summary};
use crate::prom::{WRITE_VERBS, apiserver_writes, grew_by_label, metric};

/// The metrics ports of the two replicas (beside the scale benchmark's 31081).
const FAILOVER_PORTS: [u16; 2] = [31082, 31083];
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

pub async fn failover(
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
