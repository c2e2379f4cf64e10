//! High availability: two operator replicas, one leader through a Lease.
//!
//! Both tests elect through the one Lease the shipped RBAC allows (`marekvs-operator` in
//! `marekvs-system`), each during its turn at it ([`LeaseTurn`]): they run one after the other.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use marekvs_e2e::*;
use serde_json::json;

const T: Duration = Duration::from_secs(120);
const LEASE_SECONDS: u64 = 6;

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(LEASE_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

async fn wait_holder(leases: &Api<Lease>, op: &Operator) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let suffix = format!("-{}", op.pid().expect("running"));
    wait_until(&format!("lease held by pid {suffix}"), T, || async {
        Ok(holder(leases)
            .await
            .filter(|h| h.ends_with(&suffix))
            .map(|_| ()))
    })
    .await?;
    Ok(start.elapsed())
}

async fn a_standby_takes_over_within_the_lease_and_a_deposed_leader_stops_at_once()
-> anyhow::Result<()> {
    let env = TestEnv::new("ha").await?;
    let ns = env.namespace.clone();
    let turn = LeaseTurn::take(&env).await?;
    let leases: Api<Lease> = LeaseTurn::api(&env);
    let lease_env = [("MAREKVS_OPERATOR_LEASE_SECONDS", "6")];
    let mut a = Operator::start_electing(&ns, &turn, &lease_env)?;
    wait_holder(&leases, &a).await?;
    let mut b = Operator::start_electing(&ns, &turn, &lease_env)?;
    let api = create(&env, "demo", spec(3)).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    assert!(
        holder(&leases)
            .await
            .unwrap()
            .ends_with(&format!("-{}", a.pid().unwrap())),
        "the first replica still leads"
    );

    // Kill the leader: the standby takes over once the lease expires.
    let killed = Instant::now();
    a.kill().await?;
    wait_holder(&leases, &b).await?;
    let handover = killed.elapsed();
    eprintln!(
        "handover after kill -9: {:.1}s (lease {LEASE_SECONDS}s)",
        handover.as_secs_f64()
    );
    assert!(
        handover <= Duration::from_secs(LEASE_SECONDS + 3),
        "handover took {handover:?}"
    );
    // And it acts.
    patch_spec(&api, "demo", json!({"nodes": 4})).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2", "demo-3"], T).await?;

    // Depose it (someone else holds a fresh lease): it stops at once, before writing more.
    // The leader renews every 2.1 s: a renewal between the read and the write conflicts, and
    // the write is made again on the lease as it is then.
    let deposed = loop {
        let mut lease = leases.get(LEASE_NAME).await?;
        let spec = lease.spec.as_mut().unwrap();
        spec.holder_identity = Some("someone-else".into());
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        match leases
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => break Instant::now(),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let code = wait_until("the deposed leader exits", T, || {
        let code = b.exit_code();
        async move { Ok(code) }
    })
    .await?;
    eprintln!(
        "deposed leader exited after {:.1}s with {code:?}",
        deposed.elapsed().as_secs_f64()
    );
    assert_eq!(code, Some(3));
    assert!(deposed.elapsed() <= Duration::from_secs(LEASE_SECONDS));
    env.cleanup().await
}

/// Chaos: the operator is killed with SIGKILL again and again (every 1.5–4 s, at whatever step it
/// is in, [`KILLS`] times) through a scale-down from 5 to 3 combined with a rolling update, then
/// left to finish. At no poll may two members be down at once; every key written before reads
/// back afterwards (and the simulator, where it runs, counts no lost partition); the end state
/// is the spec. The kills end because a restarted operator has no earlier reading of the
/// leaver's RESP input (the ledger lives in its memory): it counts the leaver's anti-entropy
/// rounds again from there (docs/scale-down.md), so under kills every few seconds no hand-off
/// can finish; safe, not live.
async fn kill_9_the_operator_again_and_again_through_a_scale_down_and_a_rollout()
-> anyhow::Result<()> {
    let sim = Sim::from_env();
    let env = TestEnv::new("chaos").await?;
    let ns = env.namespace.clone();
    let turn = LeaseTurn::take(&env).await?;
    let lease_env = [("MAREKVS_OPERATOR_LEASE_SECONDS", "2")];
    let mut op = Operator::start_electing(&ns, &turn, &lease_env)?;
    let api = create(&env, "demo", spec(5)).await?;
    wait_healthy(
        &api,
        "demo",
        &["demo-0", "demo-1", "demo-2", "demo-3", "demo-4"],
        T,
    )
    .await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = env.api();
    let data = write_keys(
        &env,
        &["demo-0", "demo-1", "demo-2", "demo-3", "demo-4"],
        "demo-0",
        "operator-chaos",
    )
    .await?;

    patch_spec(
        &api,
        "demo",
        json!({"nodes": 3, "extraEnv": {"RUST_LOG": "debug"}}),
    )
    .await?;
    let generation = api.get("demo").await?.metadata.generation;
    let mut seed: u64 = 0x5eed;
    let mut next_kill = Instant::now() + Duration::from_millis(1500);
    let mut kills = 0;
    let mut steps_seen = std::collections::BTreeSet::new();
    let start = Instant::now();
    loop {
        let s = status_of(&api.get("demo").await?);
        if let Some(r) = &s.removal {
            steps_seen.insert(format!("removal/{}", r.step.as_str()));
        }
        if let Some(r) = &s.rollout {
            steps_seen.insert(format!("rollout/{}", r.step.as_str()));
        }
        let down = members_down(&pods, &s).await.context("listing pods")?;
        assert!(
            down.len() <= 1,
            "two members down at once: {down:?} (after {kills} kills)"
        );
        if converged(&s, generation, &["demo-0", "demo-1", "demo-2"]) {
            break;
        }
        assert!(
            start.elapsed() < T * 4,
            "did not finish after {kills} kills: {:?} {:?}",
            s.removal,
            s.rollout
        );
        if kills < KILLS && Instant::now() >= next_kill {
            op.kill().await?;
            op.restart()?;
            kills += 1;
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            next_kill = Instant::now() + Duration::from_millis(1500 + (seed >> 33) % 2500);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "chaos: {kills} kills in {:.0}s; steps seen {steps_seen:?}",
        start.elapsed().as_secs_f64()
    );
    assert!(
        kills >= 10,
        "only {kills} kills: the scenario ended too fast to be chaos"
    );
    read_back(&env, &data).await?;
    no_lost_partitions(&sim, &ns).await?;
    env.cleanup().await
}

/// How many times the chaos test kills the operator.
const KILLS: u32 = 25;

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        a_standby_takes_over_within_the_lease_and_a_deposed_leader_stops_at_once needs [OwnOperator],
        kill_9_the_operator_again_and_again_through_a_scale_down_and_a_rollout needs [OwnOperator],
    ])
}
