//! What several benchmarks share: the bound, the summary line, clusters to measure, and the
//! operator's process figures.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_e2e::*;
use serde_json::json;

pub const T: Duration = Duration::from_secs(300);

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn summary(name: &str, unit: &str, mut v: Vec<f64>) {
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

pub fn proc_stat(pid: u32) -> Option<(f64, u64)> {
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
pub async fn create_clusters(
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

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A healthy five-member cluster `name` (RF 2) with its own operator, in a namespace of its
/// own.
pub async fn five_members(
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
pub async fn read_back(
    pods: &Api<Pod>,
    report: &load::LoadReport,
    bound: Duration,
) -> anyhow::Result<(usize, f64)> {
    read_back_set(pods, &report.data, bound).await
}

/// [`read_back`] for a written set.
pub async fn read_back_set(
    pods: &Api<Pod>,
    set: &data::DataSet,
    bound: Duration,
) -> anyhow::Result<(usize, f64)> {
    let started = Instant::now();
    let lost = match set.verify_within(pods, bound).await {
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
