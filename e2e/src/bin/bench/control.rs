//! The control for the hand-off tests that write fast through the leaver: the same load with
//! no operator action at all, then every acknowledged key read back through a member that
//! wrote none. A rate (or burst) at which this alone loses keys is beyond what the data plane
//! converges on here, and a loss claimed above it proves nothing about the gate.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_e2e::*;

use crate::common::{five_members, read_back, read_back_set};

/// For each rate: `connections` connections all opened on bench-4's pod address writing
/// `rate` SET/s of `value_bytes` for `seconds` (none of them ever cut), then the read-back.
/// With `burst` above 0, first a burst of that many keys of `burst_value_bytes` through
/// bench-4 as fast as the harness writes them (with the data check's overwrites and deletes),
/// then its read-back.
pub async fn control(
    rates: &[u64],
    seconds: Duration,
    connections: usize,
    value_bytes: usize,
    burst: usize,
    burst_value_bytes: usize,
    bound: Duration,
) -> anyhow::Result<()> {
    if burst > 0 {
        let (env, _op, _api) = five_members("bench-burst", "bench").await?;
        let pods: Api<Pod> = env.api();
        let started = Instant::now();
        let set = data::DataSet::write_sized(
            &pods,
            &["bench-4"],
            "bench-0",
            burst,
            "burst",
            burst_value_bytes,
        )
        .await?;
        let wrote = started.elapsed().as_secs_f64();
        let (lost, read_s) = read_back_set(&pods, &set, bound).await?;
        println!(
            "RESULT\tcontrol_burst\tkeys={burst}\tvalue_bytes={burst_value_bytes}\twrite_s={wrote:.1}\tlost={lost}\tread_s={read_s:.1}\tbound_s={}",
            bound.as_secs()
        );
        env.cleanup().await?;
    }
    for rate in rates {
        let (env, _op, _api) = five_members("bench-control", "bench").await?;
        let writer = load::SteadyLoad::start_sized(
            env.client.clone(),
            &env.namespace,
            load::LoadTarget::PooledFrom {
                member: "bench-4".into(),
                service: "bench".into(),
                connections,
            },
            *rate as f64,
            "bench-0",
            "control",
            value_bytes,
        )?;
        tokio::time::sleep(seconds).await;
        let report = writer.stop().await?;
        let pods: Api<Pod> = env.api();
        let (lost, read_s) = read_back(&pods, &report, bound).await?;
        println!(
            "RESULT\tcontrol_pinned\trate={rate}/s\tachieved={:.0}/s\tvalue_bytes={value_bytes}\tconnections={connections}\tseconds={}\twritten={}\tfailed={}\tlost={lost}\tread_s={read_s:.1}\tbound_s={}\tper_member={:?}",
            report.rate(),
            seconds.as_secs(),
            report.data.len(),
            report.failed,
            bound.as_secs(),
            report.per_member
        );
        env.cleanup().await?;
    }
    Ok(())
}
