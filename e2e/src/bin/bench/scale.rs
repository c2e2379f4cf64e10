//! 4: many clusters.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use marekvs_e2e::*;

use crate::common::{create_clusters, proc_stat};
use crate::prom::{diff_histogram, histogram_quantile, metric_sum};

pub async fn scale(clusters: u64, members: u64, steady: u64, batch: u64) -> anyhow::Result<()> {
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
