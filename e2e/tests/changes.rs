//! Changes to a running cluster: rolling updates of the member pod spec, pausing them, and
//! the volume resize shown in status.
//!
//! Tests that inject faults into the data plane need the simulator and skip themselves without
//! it; the others also run against a cluster with real marekvs nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use marekvs_e2e::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(180);

fn spec(nodes: u32) -> Value {
    json!({
        "image": image(), "nodes": nodes, "replicationFactor": 2,
        "storage": {"size": "1Gi"},
        "scaleDown": {"settleSeconds": 2, "handoffTimeoutSeconds": 600},
    })
}

async fn create(env: &TestEnv, name: &str, spec: Value) -> anyhow::Result<Api<MarekvsCluster>> {
    let api: Api<MarekvsCluster> = env.api();
    api.create(&PostParams::default(), &cluster(name, spec)?)
        .await?;
    Ok(api)
}

async fn patch_spec(api: &Api<MarekvsCluster>, name: &str, spec: Value) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await?;
    Ok(())
}

/// Pod name → (uid, live and ready).
async fn pods_now(pods: &Api<Pod>) -> anyhow::Result<BTreeMap<String, (String, bool)>> {
    Ok(pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|p| {
            let up = p.metadata.deletion_timestamp.is_none() && pod_condition(&p, "Ready");
            (
                name_of(&p),
                (p.metadata.uid.clone().unwrap_or_default(), up),
            )
        })
        .collect())
}

fn env_of(p: &Pod, key: &str) -> Option<String> {
    p.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == key)
        .and_then(|e| e.value.clone())
}

#[tokio::test]
async fn a_spec_change_restarts_one_member_at_a_time_behind_the_hand_off_gate() -> anyhow::Result<()>
{
    let env = TestEnv::new("roll").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let sim = Sim::from_env();
    let api = create(&env, "demo", spec(3)).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    let pods: Api<Pod> = env.api();
    let before = pods_now(&pods).await?;

    // A change that reaches the pod spec (portable: a real node accepts it too).
    patch_spec(&api, "demo", json!({"extraEnv": {"RUST_LOG": "debug"}})).await?;
    let generation = api.get("demo").await?.metadata.generation;
    let mut order: Vec<String> = Vec::new();
    let mut gated = sim.is_none();
    let start = Instant::now();
    loop {
        let s = status_of(&api.get("demo").await?);
        if let Some(r) = &s.rollout
            && order.last() != Some(&r.member)
        {
            order.push(r.member.clone());
        }
        // Never two members down at once: at most one member without a live, ready pod.
        let now = pods_now(&pods).await?;
        let down: Vec<&String> = s
            .instance_names
            .iter()
            .filter(|n| !now.get(*n).is_some_and(|(_, up)| *up))
            .collect();
        assert!(down.len() <= 1, "two members down at once: {down:?}");

        // On the simulator: while demo-2 hands off, make demo-0 report under-replication and
        // check that the restart waits for it.
        if !gated
            && let Some(sim) = &sim
            && s.rollout
                .as_ref()
                .is_some_and(|r| r.member == "demo-2" && r.step == "HandingOff")
        {
            sim.set_faults(&ns, "demo-0", json!({"report_underreplicated": 5}))
                .await?;
            wait_cluster(&api, "demo", "the restart held by the gate", T, |s| {
                condition(s, "Progressing").is_some_and(|c| c.message.contains("under-replicated"))
            })
            .await?;
            let held = pods.get("demo-2").await?;
            assert_eq!(held.metadata.uid, Some(before["demo-2"].0.clone()));
            assert!(
                held.metadata.deletion_timestamp.is_none(),
                "restarted while under-replicated"
            );
            sim.set_faults(&ns, "demo-0", json!({"report_underreplicated": null}))
                .await?;
            gated = true;
        }
        if s.phase.as_deref() == Some("Healthy")
            && s.updated_nodes == Some(3)
            && s.observed_generation == generation
        {
            break;
        }
        assert!(
            start.elapsed() < T * 2,
            "rollout did not finish: {:?}",
            s.rollout
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gated, "the rollout never reached the hand-off of demo-2");
    assert_eq!(
        order,
        ["demo-2", "demo-1", "demo-0"],
        "highest ordinal first"
    );
    let after = pods_now(&pods).await?;
    for (name, (uid, _)) in &before {
        assert_ne!(&after[name].0, uid, "{name} was not restarted");
        let p = pods.get(name).await?;
        assert_eq!(env_of(&p, "RUST_LOG").as_deref(), Some("debug"));
    }
    let s = status_of(&api.get("demo").await?);
    assert_eq!(s.instance_names, ["demo-0", "demo-1", "demo-2"]);
    for m in &s.members {
        assert!(m.updated, "{} not updated", m.name);
        let c = m.conditions.iter().find(|c| c.type_ == "Updated").unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "UpToDate"));
    }
    let reasons = event_reasons(&env.client, &ns, "demo").await?;
    for r in [
        "UpdateStarted",
        "Draining",
        "MemberRestarting",
        "MemberUpdated",
    ] {
        assert!(
            reasons.iter().any(|x| x == r),
            "no {r} event in {reasons:?}"
        );
    }
    if let Some(sim) = &sim {
        assert_eq!(sim.lost_partitions(&ns).await?, 0);
    }
    env.cleanup().await
}

#[tokio::test]
async fn pause_holds_a_rollout_and_resuming_finishes_it() -> anyhow::Result<()> {
    let env = TestEnv::new("pause").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let sim = Sim::from_env();
    let api = create(&env, "demo", spec(3)).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    let pods: Api<Pod> = env.api();

    // Paused together with the change: nothing is restarted.
    let before = pods_now(&pods).await?;
    patch_spec(
        &api,
        "demo",
        json!({"paused": true, "extraEnv": {"RUST_LOG": "debug"}}),
    )
    .await?;
    let c = wait_cluster(&api, "demo", "Paused", T, |s| {
        s.phase.as_deref() == Some("Paused")
            && condition(s, "Blocked").is_some_and(|c| c.status == "True" && c.reason == "Paused")
    })
    .await?;
    let s = status_of(&c);
    assert_eq!(s.updated_nodes, Some(0));
    assert!(s.rollout.is_none());
    assert!(s.members.iter().all(|m| !m.updated));
    // Status keeps being reported while paused, and no pod changes.
    let seen = s.members[0].metrics.as_ref().unwrap().scraped_at.clone();
    wait_cluster(&api, "demo", "a fresh scrape while paused", T, |s| {
        s.members[0]
            .metrics
            .as_ref()
            .is_some_and(|m| m.scraped_at.0 > seen.0)
    })
    .await?;
    assert_eq!(pods_now(&pods).await?, before, "a pod changed while paused");

    // Resume: the rollout runs; pause it again after the first member.
    patch_spec(&api, "demo", json!({"paused": false})).await?;
    wait_cluster(&api, "demo", "one member updated", T, |s| {
        s.updated_nodes.unwrap_or(0) >= 1
    })
    .await?;
    patch_spec(&api, "demo", json!({"paused": true})).await?;
    let c = wait_cluster(&api, "demo", "Paused mid-rollout", T, |s| {
        s.phase.as_deref() == Some("Paused")
    })
    .await?;
    let held_at = status_of(&c).updated_nodes.unwrap_or(0);
    assert!(held_at < 3, "the rollout should be held, updated {held_at}");
    let snapshot: BTreeSet<String> = pods_now(&pods)
        .await?
        .values()
        .map(|(uid, _)| uid.clone())
        .collect();
    let seen = Instant::now();
    while seen.elapsed() < Duration::from_secs(5) {
        let now: BTreeSet<String> = pods_now(&pods)
            .await?
            .values()
            .map(|(uid, _)| uid.clone())
            .collect();
        assert_eq!(now, snapshot, "a pod was restarted while paused");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    patch_spec(&api, "demo", json!({"paused": false})).await?;
    let c = wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    assert_eq!(status_of(&c).updated_nodes, Some(3));
    let reasons = event_reasons(&env.client, &ns, "demo").await?;
    assert!(reasons.iter().any(|r| r == "Paused"), "{reasons:?}");
    if let Some(sim) = &sim {
        assert_eq!(sim.lost_partitions(&ns).await?, 0);
    }
    env.cleanup().await
}
