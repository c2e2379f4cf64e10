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

/// One change an operator asked the API server for, as its audit log has it.
#[derive(Debug)]
struct Change {
    user_agent: String,
    verb: String,
    what: String,
    code: u16,
    received: k8s_openapi::jiff::Timestamp,
    completed: k8s_openapi::jiff::Timestamp,
}

/// Every change in the audit log (`MAREKVS_E2E_AUDIT_LOG`: the changes the operator's
/// ServiceAccount asks for, `APISERVER_AUDIT=mutations` in hack/cluster-up.sh).
fn audited_changes() -> anyhow::Result<Vec<Change>> {
    let path = std::env::var("MAREKVS_E2E_AUDIT_LOG").context("MAREKVS_E2E_AUDIT_LOG")?;
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!("the API server wrote no audit log at {path}: was the cluster started without APISERVER_AUDIT=mutations? (hack/cluster-down.sh test, then run again)")
    })?;
    let time =
        |e: &serde_json::Value, field: &str| -> anyhow::Result<k8s_openapi::jiff::Timestamp> {
            Ok(e[field].as_str().context("a timestamp")?.parse()?)
        };
    text.lines()
        .map(|line| {
            let e: serde_json::Value = serde_json::from_str(line)?;
            let o = &e["objectRef"];
            Ok(Change {
                user_agent: e["userAgent"].as_str().unwrap_or_default().to_string(),
                verb: e["verb"].as_str().unwrap_or_default().to_string(),
                what: format!(
                    "{}/{}{}",
                    o["resource"].as_str().unwrap_or_default(),
                    o["name"].as_str().unwrap_or_default(),
                    o["subresource"]
                        .as_str()
                        .map(|s| format!("/{s}"))
                        .unwrap_or_default()
                ),
                code: e["responseStatus"]["code"].as_u64().unwrap_or_default() as u16,
                received: time(&e, "requestReceivedTimestamp")?,
                completed: time(&e, "stageTimestamp")?,
            })
        })
        .collect()
}

/// Three times over, the leader is frozen (SIGSTOP) in the middle of a scale-up's creations,
/// past its lease, and woken (SIGCONT) as soon as the standby holds the Lease, with its next
/// creation ready to send; the woken one exits and comes back as the standby. Counted from the
/// API server's own audit log, where each replica's User-Agent names it: once the new leader
/// has written, not one change of the old leader reaches the API server (its client's guard
/// refuses them unsent past its term, and it exits on finding the Lease lost).
async fn a_leader_frozen_past_its_lease_gets_no_change_through_after_the_new_leaders_first_write()
-> anyhow::Result<()> {
    let started = k8s_openapi::jiff::Timestamp::now();
    let env = TestEnv::new("frozen").await?;
    let ns = env.namespace.clone();
    let turn = LeaseTurn::take(&env).await?;
    let leases: Api<Lease> = LeaseTurn::api(&env);
    let lease_env = [("MAREKVS_OPERATOR_LEASE_SECONDS", "6")];
    let mut leader = Operator::start_electing(&ns, &turn, &lease_env)?;
    wait_holder(&leases, &leader).await?;
    let mut standby = Operator::start_electing(&ns, &turn, &lease_env)?;
    let api = create(&env, "demo", spec(3)).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = env.api();
    let mut reached = Vec::new();
    for round in 1..=ROUNDS {
        let (old, new) = (leader.pid().unwrap(), standby.pid().unwrap());
        // A scale-up by 8: the leader creates 16 objects (PVCs, then pods) one after
        // another; it is frozen once the first two exist (the kernel stops running it, its
        // monotonic clock runs on).
        let before = pvcs.list(&Default::default()).await?.items.len();
        let nodes = before + 8;
        patch_spec(&api, "demo", json!({"nodes": nodes})).await?;
        let asked = Instant::now();
        let made = loop {
            let n = pvcs.list(&Default::default()).await?.items.len();
            if n >= before + 2 {
                break n - before;
            }
            anyhow::ensure!(asked.elapsed() < T, "the leader created nothing");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        leader.signal("STOP")?;
        let frozen = Instant::now();
        // Woken as soon as the standby holds the Lease: its first write.
        let suffix = format!("-{new}");
        loop {
            if holder(&leases).await.is_some_and(|h| h.ends_with(&suffix)) {
                break;
            }
            anyhow::ensure!(frozen.elapsed() < T, "the standby never took over");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let took_over = frozen.elapsed();
        leader.signal("CONT")?;
        let woken = Instant::now();
        let code = wait_until("the woken leader exits", T, || {
            let code = leader.exit_code();
            async move { Ok(code) }
        })
        .await?;
        let exited = woken.elapsed();
        assert_eq!(code, Some(3), "a deposed leader exits with 3");
        let all: Vec<String> = (0..nodes).map(|o| format!("demo-{o}")).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        wait_healthy(&api, "demo", &all, T * 2).await?;

        let changes = audited_changes()?;
        let of = |pid: u32| {
            let tail = format!("-{pid})");
            changes
                .iter()
                .filter(move |c| c.user_agent.ends_with(&tail) && c.received > started)
                .collect::<Vec<_>>()
        };
        let (old_changes, new_changes) = (of(old), of(new));
        // The log names each replica: the old leader's own changes while it led are in it.
        anyhow::ensure!(
            old_changes.iter().any(|c| (200..300).contains(&c.code)),
            "no change of the old leader (pid {old}) in the audit log: {} changes there",
            changes.len()
        );
        let first_write = new_changes
            .iter()
            .filter(|c| (200..300).contains(&c.code))
            .map(|c| c.completed)
            .min()
            .context("the new leader's first write is in the audit log")?;
        // Work was still pending when the leader froze: the scale-up's creations it had not
        // made are the new leader's. Without any, its guard had nothing to refuse, and "none
        // reached the API server" below would hold whatever the guard does.
        let left_to_the_new_leader = new_changes
            .iter()
            .filter(|c| c.verb == "create" && (200..300).contains(&c.code))
            .filter(|c| {
                c.what.starts_with("persistentvolumeclaims/") || c.what.starts_with("pods/")
            })
            .count();
        anyhow::ensure!(
            left_to_the_new_leader > 0,
            "round {round}: the new leader created none of the scale-up's 16 objects: the old one had made them all before it froze, so nothing was left for its guard to refuse"
        );
        let after: Vec<String> = old_changes
            .iter()
            .filter(|c| c.received > first_write)
            .map(|c| format!("{} {} -> {}", c.verb, c.what, c.code))
            .collect();
        eprintln!(
            "frozen leader, round {round}: frozen after {made} of 8 PVCs; the standby took over {:.1}s after SIGSTOP (lease {LEASE_SECONDS}s) and the frozen one was woken at once; the new leader made {left_to_the_new_leader} of the scale-up's creations; after its first write ({first_write}) {} changes of the old leader reached the API server {after:?}; it exited {:.1}s after SIGCONT",
            took_over.as_secs_f64(),
            after.len(),
            exited.as_secs_f64()
        );
        reached.extend(after);
        // The woken one comes back as the standby.
        leader.supervise()?;
        std::mem::swap(&mut leader, &mut standby);
    }
    // Not one reaches the API server, let alone succeeds: its guard refuses them unsent.
    assert!(
        reached.is_empty(),
        "changes of a deposed leader reached the API server: {reached:?}"
    );
    drop((leader, standby));
    env.cleanup().await
}

/// How many times the frozen-leader test freezes a leader.
const ROUNDS: usize = 3;

/// How many times the chaos test kills the operator.
const KILLS: u32 = 25;

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        a_standby_takes_over_within_the_lease_and_a_deposed_leader_stops_at_once needs [OwnOperator],
        kill_9_the_operator_again_and_again_through_a_scale_down_and_a_rollout needs [OwnOperator],
        a_leader_frozen_past_its_lease_gets_no_change_through_after_the_new_leaders_first_write needs [OwnOperator, AuditLog],
    ])
}
