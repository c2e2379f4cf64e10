//! 5 → 4 under a steady write load.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_e2e::*;
use serde_json::json;

use crate::common::T;

pub async fn load(percents: &[u64], bound_seconds: u64) -> anyhow::Result<()> {
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
