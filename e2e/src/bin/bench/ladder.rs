//! Steady load over pooled connections: the data plane alone, then a 5 → 4 under the same load.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_e2e::*;
use serde_json::json;

use crate::common::{five_members, read_back};

pub async fn ladder(
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
