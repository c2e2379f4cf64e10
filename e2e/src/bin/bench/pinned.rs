//! A client pinned to the leaver's pod address: it holds the removal until it stops.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_e2e::*;
use serde_json::json;

use crate::common::{T, five_members, read_back};

pub async fn pinned(rate: f64, seconds: Duration) -> anyhow::Result<()> {
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
