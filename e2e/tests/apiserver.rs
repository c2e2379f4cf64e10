//! Chaos on the control plane itself: the API server is killed with SIGKILL and restarted
//! while a scale-down and a rolling update are in flight, and (on the simulator) a member
//! crashes mid-hand-off. Every key written before reads back afterwards.
//!
//! This file is its own test binary on purpose: cargo runs test binaries one after another, so
//! while this test takes the API server away, no other test is running against it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_e2e::*;
use serde_json::json;

const T: Duration = Duration::from_secs(120);
/// How long the API server stays dead each time, before it is started again.
const DOWN_SECONDS: &str = "2";
const MAX_RESTARTS: usize = 5;

/// kill -9 the API server of the e2e cluster, wait `DOWN_SECONDS`, start it again with the
/// same command line, wait until it is ready. Returns how long the API was unavailable.
async fn restart_api_server(cluster: &str) -> anyhow::Result<f64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../hack/restart-apiserver.sh");
    let out = tokio::process::Command::new("bash")
        .args([script, cluster, DOWN_SECONDS])
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "restart-apiserver.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

async fn api_server_restarts_and_a_member_crash_mid_operation_lose_nothing() -> anyhow::Result<()> {
    let sim = Sim::from_env();
    let cluster = std::env::var("MAREKVS_E2E_CLUSTER")
        .context("MAREKVS_E2E_CLUSTER names the local cluster whose API server is restarted")?;
    let env = TestEnv::new("apichaos").await?;
    let ns = env.namespace.clone();
    // As deployed: leader election on, through the one Lease the RBAC allows. A leader that
    // cannot renew while the API is away exits, and is restarted as a Deployment would restart
    // it.
    let turn = LeaseTurn::take(&env).await?;
    let mut op = Operator::start_electing(&ns, &turn, &[("MAREKVS_OPERATOR_LEASE_SECONDS", "6")])?;
    let api = create(&env, "demo", spec(5)).await?;
    let all = ["demo-0", "demo-1", "demo-2", "demo-3", "demo-4"];
    wait_healthy(&api, "demo", &all, T).await?;
    let pods: Api<Pod> = env.api();
    let data = write_keys(&env, &all, "demo-0", "apiserver-chaos").await?;

    patch_spec(
        &api,
        "demo",
        json!({"nodes": 3, "extraEnv": {"RUST_LOG": "debug"}}),
    )
    .await?;
    let generation = api.get("demo").await?.metadata.generation;

    if sim.is_none() {
        skipped_check(
            "no partition lost every copy at any poll through the restarts",
            NOT_SIMULATED,
        );
    }
    let start = Instant::now();
    let mut steps_seen = BTreeSet::new();
    let mut outages = Vec::new();
    let mut operator_exits = Vec::new();
    let mut crashed = None;
    loop {
        if let Some(code) = op.supervise()? {
            operator_exits.push(code);
        }
        // The simulator answers whatever the API server does: losses are checked every poll.
        if let Some(sim) = &sim {
            assert_eq!(
                sim.lost_partitions(&ns).await?,
                0,
                "a partition lost all its copies (steps so far {steps_seen:?})"
            );
        }
        let Ok(c) = api.get("demo").await else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let s = status_of(&c);
        if let Some(down) = members_down(&pods, &s).await {
            // The crashed member is down by our hand, not the operator's.
            let by_operator = down
                .iter()
                .filter(|n| crashed.as_deref() != Some(n.as_str()))
                .count();
            assert!(
                by_operator <= 1,
                "two members down at once: {down:?} (crashed {crashed:?})"
            );
        }
        if converged(&s, generation, &["demo-0", "demo-1", "demo-2"]) {
            break;
        }
        if start.elapsed() >= T * 4 {
            let pods_now: Vec<String> = pods
                .list(&Default::default())
                .await
                .map(|l| l.items.iter().map(pod_summary).collect())
                .unwrap_or_default();
            panic!(
                "did not finish: {:?} {:?}; conditions {:?}; pods {pods_now:?}; outages {outages:?}",
                s.removal, s.rollout, s.conditions
            );
        }
        let step = match (&s.removal, &s.rollout) {
            (Some(r), _) => Some((format!("removal/{}", r.step.as_str()), r.member.clone())),
            (None, Some(r)) => Some((format!("rollout/{}", r.step.as_str()), r.member.clone())),
            _ => None,
        };
        let Some((step, victim)) = step else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        // Each step kind seen for the first time gets an API server restart, while the
        // operator is in the middle of it.
        if steps_seen.insert(step.clone()) && outages.len() < MAX_RESTARTS {
            let secs = restart_api_server(&cluster).await?;
            eprintln!("API server restarted during {step} ({victim}): unavailable {secs:.1}s");
            outages.push((step.clone(), secs));
        }
        // Once, during a hand-off: another member crashes (on the simulator, which can crash
        // one). The victim may not go until it is back and ready.
        if let Some(sim) = &sim
            && crashed.is_none()
            && step.ends_with("/HandingOff")
        {
            let other = s
                .instance_names
                .iter()
                .find(|n| **n != victim)
                .cloned()
                .expect("another member");
            sim.crash(&ns, &other).await?;
            eprintln!("crashed {other} while {victim} was handing off");
            crashed = Some(other);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "api chaos: {} API server restarts {outages:?}, operator exits {operator_exits:?}, \
         finished in {:.0}s",
        outages.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        outages.len() >= 3,
        "only {} restarts: {outages:?}",
        outages.len()
    );
    read_back(&env, &data).await?;
    if sim.is_some() {
        assert!(
            crashed.is_some(),
            "no hand-off was seen to crash a member in"
        );
    } else {
        skipped_check(
            "another member crashed in the middle of a hand-off",
            "only the simulator's control API crashes a member on cue",
        );
    }
    no_lost_partitions(&sim, &ns).await?;
    env.cleanup().await?;
    // The tests after this one need the controller manager, which lived through every
    // restart: once, its service-account controller took over a minute after the last one
    // to give new namespaces their default ServiceAccount, and the next tests (which wait
    // 60 s for it) failed. The chaos ends only once the control plane serves new
    // namespaces again.
    let recovering = Instant::now();
    let probe = TestEnv::new_within("apichaos-after", Duration::from_secs(300)).await?;
    eprintln!(
        "api chaos: a new namespace got its default ServiceAccount {:.1}s after the chaos",
        recovering.elapsed().as_secs_f64()
    );
    probe.cleanup().await
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        api_server_restarts_and_a_member_crash_mid_operation_lose_nothing needs [OwnOperator, LocalControlPlane],
    ])
}
