//! Changes to a running cluster: rolling updates of the member pod spec, pausing them, and
//! the volume resize shown in status.
//!
//! Tests that inject faults into the data plane need the simulator and skip themselves without
//! it; the others also run against a cluster with real marekvs nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use marekvs_api::UpgradeStep;
use marekvs_e2e::*;
use serde_json::json;

const T: Duration = Duration::from_secs(180);

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
    let data = write_keys(&env, &["demo-0", "demo-1", "demo-2"], "demo-1", "rollout").await?;
    // A pooled client: 2 connections opened on demo-1 keep writing through the whole update
    // (reopened through the client Service when they break). A marekvs node closes them only
    // when it exits, so demo-1's hand-off can never see its writes stop: its own restart must
    // be the cut.
    let load = load::SteadyLoad::start(
        env.client.clone(),
        &ns,
        load::LoadTarget::PooledFrom {
            member: "demo-1".into(),
            service: "demo".into(),
            connections: 2,
        },
        40.0,
        "demo-0",
        "rollout-pooled",
    )?;
    wait_until("the pooled client writes through demo-1", T, || async {
        Ok((load.acked() > 0).then_some(()))
    })
    .await?;

    // An image change (portable: by default the same image spelled differently).
    patch_spec(&api, "demo", json!({"image": image_next()})).await?;
    let generation = api.get("demo").await?.metadata.generation;
    let mut order: Vec<String> = Vec::new();
    // Without the simulator the fault cannot be made: counted as a skipped sub-check.
    let mut gated = sim.is_none();
    if gated {
        skipped_check(
            "a restart held while another member reports under-replication",
            "the fault needs the simulator's control API (members here are not simulated)",
        );
    }
    let start = Instant::now();
    let mut cut: BTreeSet<String> = BTreeSet::new();
    loop {
        let s = status_of(&api.get("demo").await?);
        if let Some(r) = &s.rollout
            && order.last() != Some(&r.member)
        {
            order.push(r.member.clone());
        }
        if let Some(r) = s
            .rollout
            .as_ref()
            .filter(|r| r.connections_cut_at.is_some())
        {
            cut.insert(r.member.clone());
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
                .is_some_and(|r| r.member == "demo-2" && r.step == RolloutStep::HandingOff)
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
        if s.phase == Some(ClusterPhase::Healthy)
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
    let pooled = load.stop().await?;
    eprintln!(
        "roll: the pooled client wrote {} keys ({} failed) through {:?}; its connections first broke {:?} after it started; restarts taken as the cut: {cut:?}",
        pooled.data.len(),
        pooled.failed,
        pooled.per_member,
        pooled.first_cut
    );
    anyhow::ensure!(
        cut.contains("demo-1") && pooled.first_cut.is_some(),
        "demo-1's restart was never taken as the cut of its pooled connections (cut: {cut:?}; the client's first break {:?})",
        pooled.first_cut
    );
    read_back(&env, &data).await?;
    read_back(&env, &pooled.data).await?;
    assert_eq!(
        order,
        ["demo-2", "demo-1", "demo-0"],
        "highest ordinal first"
    );
    let after = pods_now(&pods).await?;
    for (name, (uid, _)) in &before {
        assert_ne!(&after[name].0, uid, "{name} was not restarted");
        let p = pods.get(name).await?;
        assert_eq!(
            p.spec.as_ref().unwrap().containers[0].image.as_deref(),
            Some(image_next().as_str())
        );
    }
    let s = status_of(&api.get("demo").await?);
    assert_eq!(s.instance_names, ["demo-0", "demo-1", "demo-2"]);
    for m in &s.members {
        assert!(m.updated, "{} not updated", m.name);
        let c = m.conditions.iter().find(|c| c.type_ == "Updated").unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "UpToDate"));
    }
    wait_events(
        &env.client,
        &ns,
        "demo",
        &[
            "UpdateStarted",
            "Draining",
            "MemberRestarting",
            "MemberUpdated",
            "ClientConnectionsCut",
        ],
    )
    .await?;
    no_lost_partitions(&sim, &ns).await?;
    env.cleanup().await
}

async fn pause_holds_a_rollout_and_resuming_finishes_it() -> anyhow::Result<()> {
    let env = TestEnv::new("pause").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let sim = Sim::from_env();
    let api = create(&env, "demo", spec(3)).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    let pods: Api<Pod> = env.api();
    let data = write_keys(&env, &["demo-0", "demo-1", "demo-2"], "demo-1", "pause").await?;

    // Paused together with a change (here of the environment): nothing is restarted.
    let before = pods_now(&pods).await?;
    patch_spec(
        &api,
        "demo",
        json!({"paused": true, "extraEnv": {"RUST_LOG": "debug"}}),
    )
    .await?;
    let c = wait_cluster(&api, "demo", "Paused", T, |s| {
        s.phase == Some(ClusterPhase::Paused)
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
        s.phase == Some(ClusterPhase::Paused)
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
    for p in pods.list(&Default::default()).await?.items {
        assert_eq!(env_of(&p, "RUST_LOG").as_deref(), Some("debug"));
    }
    wait_events(&env.client, &ns, "demo", &["Paused"]).await?;
    read_back(&env, &data).await?;
    no_lost_partitions(&sim, &ns).await?;
    env.cleanup().await
}

/// The autoscaler's wish, as status shows it.
fn wanted(s: &MarekvsClusterStatus) -> Option<i32> {
    s.autoscale.as_ref().and_then(|a| a.desired_nodes)
}

/// Wait until the measured load is within 15 % of `ops`.
async fn wait_load(api: &Api<MarekvsCluster>, ops: f64) -> anyhow::Result<MarekvsCluster> {
    wait_cluster(api, "demo", &format!("ops/s near {ops}"), T, |s| {
        s.ops_per_second
            .is_some_and(|o| (o as f64 - ops).abs() <= ops * 0.15 + 50.0)
    })
    .await
}

/// Watch for `d` that the autoscaler's wish and the membership stay as they are.
async fn holds(api: &Api<MarekvsCluster>, want: i32, d: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < d {
        let s = status_of(&api.get("demo").await?);
        assert_eq!(wanted(&s), Some(want), "{:?}", s.autoscale);
        assert_eq!(s.instance_names.len(), want as usize);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

async fn the_autoscaler_follows_load_within_bounds_with_hysteresis() -> anyhow::Result<()> {
    let sim = Sim::required()?;
    let env = TestEnv::new("autoscale").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let mut s = spec(3);
    s["autoscale"] = json!({
        "minNodes": 3, "maxNodes": 5, "targetOpsPerNode": 1000,
        "scaleDownStabilizationSeconds": 10, "scaleUpCooldownSeconds": 5,
    });
    // 4500 ops/s over a target of 1000 per member, from the start: straight from 3 to 5.
    sim.patch_settings(json!({"load_ops_per_sec": 4500.0}))
        .await?;
    let api = create(&env, "demo", s).await?;
    // Every wish of the autoscaler, in order, as status shows it.
    let history = std::sync::Arc::new(std::sync::Mutex::new(Vec::<i32>::new()));
    let watcher = {
        let (api, history) = (api.clone(), history.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(c) = api.get("demo").await
                    && let Some(w) = wanted(&status_of(&c))
                {
                    let mut h = history.lock().unwrap();
                    if h.last() != Some(&w) {
                        h.push(w);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let members = |n: usize| (0..n).map(|i| format!("demo-{i}")).collect::<Vec<_>>();
    let healthy_with = |n: usize| {
        let want = members(n);
        move |s: &MarekvsClusterStatus| {
            s.phase == Some(ClusterPhase::Healthy) && s.instance_names == want
        }
    };
    wait_cluster(&api, "demo", "grown to 5", T, healthy_with(5)).await?;
    let data = write_keys(
        &env,
        &["demo-0", "demo-1", "demo-2", "demo-3", "demo-4"],
        "demo-0",
        "autoscale-down",
    )
    .await?;
    // 20000 ops/s would need 20: capped at maxNodes.
    sim.patch_settings(json!({"load_ops_per_sec": 20000.0}))
        .await?;
    wait_load(&api, 20000.0).await?;
    holds(&api, 5, Duration::from_secs(6)).await?;
    // 2800 ops/s: ceil says 3, but removing one would leave 700 per member, above 60 % of the
    // target: no change however long it lasts (the hysteresis band).
    sim.patch_settings(json!({"load_ops_per_sec": 2800.0}))
        .await?;
    let c = wait_load(&api, 2800.0).await?;
    assert!(
        condition(&status_of(&c), "Autoscaling")
            .is_some_and(|c| c.message.contains("a removal needs below 2400")),
        "{:?}",
        condition(&status_of(&c), "Autoscaling")
    );
    holds(&api, 5, Duration::from_secs(25)).await?;
    // 2000 ops/s: 5 → 4 after the window; 4 → 3 would leave 1000 per member (> 600): stays 4.
    sim.patch_settings(json!({"load_ops_per_sec": 2000.0}))
        .await?;
    wait_cluster(&api, "demo", "shrunk to 4", T, healthy_with(4)).await?;
    wait_load(&api, 2000.0).await?;
    holds(&api, 4, Duration::from_secs(25)).await?;
    // Idle: back to the floor.
    sim.patch_settings(json!({"load_ops_per_sec": 0.0})).await?;
    let c = wait_cluster(&api, "demo", "shrunk to 3", T, healthy_with(3)).await?;
    assert_eq!(wanted(&status_of(&c)), Some(3));
    read_back(&env, &data).await?;

    // Every change the autoscaler asked for, in order: no flapping.
    watcher.abort();
    assert_eq!(*history.lock().unwrap(), [3, 5, 4, 3]);
    wait_events(&env.client, &ns, "demo", &["AutoscaleUp", "AutoscaleDown"]).await?;
    sim.patch_settings(json!({"load_ops_per_sec": 0.0})).await?;
    assert_eq!(sim.lost_partitions(&ns).await?, 0);
    env.cleanup().await
}

async fn a_full_disk_grows_the_cluster_blocks_shrinking_and_a_write_stop_is_reported()
-> anyhow::Result<()> {
    let sim = Sim::required()?;
    let env = TestEnv::new("disk").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let mut s = spec(3);
    s["autoscale"] = json!({
        "minNodes": 3, "maxNodes": 4, "targetOpsPerNode": 1000000,
        "scaleDownStabilizationSeconds": 5, "scaleUpCooldownSeconds": 1,
        "diskHighWaterPercent": 80,
    });
    let api = create(&env, "demo", s).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    let data = write_keys(&env, &["demo-0", "demo-1", "demo-2"], "demo-0", "disk").await?;

    // One volume at 85 %: one member more, and none removed while it stays that full (with
    // one member fewer it would pass the mark), although the load is far below target.
    sim.set_faults(&ns, "demo-0", json!({"disk_fill_percent": 85}))
        .await?;
    wait_cluster(&api, "demo", "grown to 4 for disk", T, |s| {
        s.phase == Some(ClusterPhase::Healthy) && s.instance_names.len() == 4
    })
    .await?;
    holds(&api, 4, Duration::from_secs(15)).await?;
    let c = api.get("demo").await?;
    let msg = condition(&status_of(&c), "Autoscaling")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(msg.contains("would be") && msg.contains("full"), "{msg}");
    sim.set_faults(&ns, "demo-0", json!({"disk_fill_percent": null}))
        .await?;
    wait_cluster(&api, "demo", "back to 3", T, |s| {
        s.phase == Some(ClusterPhase::Healthy) && s.instance_names.len() == 3
    })
    .await?;
    read_back(&env, &data).await?;

    // A member that stops writes: its condition, a Warning event naming it, and Ready says so.
    sim.set_faults(&ns, "demo-1", json!({"disk_write_stopped": true}))
        .await?;
    let c = wait_cluster(&api, "demo", "write stop reported", T, |s| {
        condition(s, "Ready").is_some_and(|c| c.status == "False" && c.reason == "DiskHighWater")
    })
    .await?;
    let st = status_of(&c);
    assert!(condition(&st, "Ready").unwrap().message.contains("demo-1"));
    let m1 = st.members.iter().find(|m| m.name == "demo-1").unwrap();
    let cond = m1
        .conditions
        .iter()
        .find(|c| c.type_ == "DiskWriteStopped")
        .unwrap();
    assert_eq!(cond.status, "True");
    assert!(
        cond.message.contains("storage.size"),
        "says what to do: {}",
        cond.message
    );
    wait_events(&env.client, &ns, "demo", &["DiskWriteStopped"]).await?;
    sim.set_faults(&ns, "demo-1", json!({"disk_write_stopped": false}))
        .await?;
    wait_cluster(&api, "demo", "Ready again", T, |s| {
        condition(s, "Ready").is_some_and(|c| c.status == "True")
    })
    .await?;
    assert_eq!(sim.lost_partitions(&ns).await?, 0);
    env.cleanup().await
}

async fn another_storage_class_is_refused_unless_volumes_may_be_replaced_then_moves_one_at_a_time()
-> anyhow::Result<()> {
    let env = TestEnv::new("class").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let sim = Sim::from_env();
    let mut s = spec(3);
    s["storage"] = json!({"size": "1Gi", "className": "standard"});
    let api = create(&env, "demo", s).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = env.api();
    let mut before = BTreeMap::new();
    for i in 0..3 {
        let p = pvcs.get(&format!("data-demo-{i}")).await?;
        before.insert(i, p.metadata.uid.unwrap());
    }
    let data = write_keys(
        &env,
        &["demo-0", "demo-1", "demo-2"],
        "demo-0",
        "replace-volumes",
    )
    .await?;

    // Refused at apply time without the opt-in, with what to do.
    let err = patch_spec(
        &api,
        "demo",
        json!({"storage": {"size": "1Gi", "className": "fast"}}),
    )
    .await
    .expect_err("a class change must be refused");
    assert!(err.to_string().contains("storage.replaceVolumes"), "{err}");
    let err = patch_spec(
        &api,
        "demo",
        json!({"storage": {"size": "512Mi", "className": "standard"}}),
    )
    .await
    .expect_err("shrinking must be refused");
    assert!(err.to_string().contains("cannot shrink"), "{err}");

    // With it: each member moves to a fresh volume of the new class, one at a time.
    patch_spec(
        &api,
        "demo",
        json!({"storage": {"size": "1Gi", "className": "fast", "replaceVolumes": true}}),
    )
    .await?;
    let generation = api.get("demo").await?.metadata.generation;
    let start = Instant::now();
    loop {
        let s = status_of(&api.get("demo").await?);
        let list = pvcs.list(&Default::default()).await?.items;
        let fresh_or_missing = (0..3)
            .filter(|i| {
                let name = format!("data-demo-{i}");
                list.iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
                    .is_none_or(|p| {
                        p.metadata.uid.as_ref() != Some(&before[i])
                            || p.metadata.deletion_timestamp.is_some()
                    })
            })
            .count();
        let moved = (0..3)
            .filter(|i| {
                let name = format!("data-demo-{i}");
                list.iter().any(|p| {
                    p.metadata.name.as_deref() == Some(name.as_str())
                        && p.spec
                            .as_ref()
                            .and_then(|s| s.storage_class_name.as_deref())
                            == Some("fast")
                })
            })
            .count();
        // Never more than one member away from a ready volume beyond those already moved.
        assert!(
            fresh_or_missing <= moved + 1,
            "two volumes replaced at once"
        );
        if s.phase == Some(ClusterPhase::Healthy)
            && s.observed_generation == generation
            && moved == 3
        {
            break;
        }
        assert!(start.elapsed() < T * 2, "did not finish: {:?}", s.rollout);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for i in 0..3 {
        let p = pvcs.get(&format!("data-demo-{i}")).await?;
        assert_ne!(
            p.metadata.uid.as_ref(),
            Some(&before[&i]),
            "demo-{i} kept its old volume"
        );
    }
    // Every member is on a fresh volume now: each key was handed over at least once.
    read_back(&env, &data).await?;
    no_lost_partitions(&sim, &ns).await?;
    env.cleanup().await
}

/// Watch a rolling update to its end: never more than one member without a live, ready pod;
/// done when the cluster is Healthy with every one of `members` updated for the generation
/// the spec has now. Returns the members in the order they were restarted.
async fn watch_rollout(
    api: &Api<MarekvsCluster>,
    pods: &Api<Pod>,
    members: &[&str],
) -> anyhow::Result<Vec<String>> {
    let generation = api.get("demo").await?.metadata.generation;
    let mut order: Vec<String> = Vec::new();
    let start = Instant::now();
    let mut cut: BTreeSet<String> = BTreeSet::new();
    loop {
        let s = status_of(&api.get("demo").await?);
        if let Some(r) = &s.rollout
            && order.last() != Some(&r.member)
        {
            order.push(r.member.clone());
        }
        if let Some(r) = s
            .rollout
            .as_ref()
            .filter(|r| r.connections_cut_at.is_some())
        {
            cut.insert(r.member.clone());
        }
        let now = pods_now(pods).await?;
        let down: Vec<&String> = s
            .instance_names
            .iter()
            .filter(|n| !now.get(*n).is_some_and(|(_, up)| *up))
            .collect();
        assert!(down.len() <= 1, "two members down at once: {down:?}");
        if s.phase == Some(ClusterPhase::Healthy)
            && s.updated_nodes == Some(members.len() as i32)
            && s.instance_names == members
            && s.observed_generation == generation
        {
            return Ok(order);
        }
        anyhow::ensure!(
            start.elapsed() < T * 2,
            "rollout did not finish: {:?} {:?}",
            s.phase,
            s.rollout
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every pod has been replaced (its uid differs from `before`).
fn all_replaced(
    before: &BTreeMap<String, (String, bool)>,
    after: &BTreeMap<String, (String, bool)>,
) {
    for (name, (uid, _)) in after {
        assert_ne!(
            before.get(name).map(|b| &b.0),
            Some(uid),
            "{name} was not restarted"
        );
    }
}

/// The client Service once it carries what `want` says (each field of its spec, in JSON).
async fn wait_client_service(
    env: &TestEnv,
    what: &str,
    want: impl Fn(&serde_json::Value) -> bool,
) -> anyhow::Result<serde_json::Value> {
    let services: Api<Service> = env.api();
    wait_until(what, T, || async {
        let svc = serde_json::to_value(services.get("demo").await?)?;
        if want(&svc) {
            Ok(Some(svc))
        } else {
            Err(anyhow::anyhow!("last seen: {}", svc["spec"]))
        }
    })
    .await
}

/// The pod template options of a real cluster (pull secrets, labels, annotations, a
/// PriorityClass, a ServiceAccount, env from a Secret and a ConfigMap) roll the members one at
/// a time behind the gate, and each pod gets them; a podAnnotations change alone rolls them
/// too. The client Service's type, annotations, source ranges and traffic distribution are
/// applied in place, restarting no member, and going back to ClusterIP drops the node ports.
/// The password given as `env` `MAREKVS_REQUIREPASS` from a Secret works as `spec.auth`: the
/// members want it, views are read after `AUTH` and a scale-down proceeds. Every key reads
/// back.
async fn pod_template_options_roll_and_client_service_options_apply_in_place() -> anyhow::Result<()>
{
    let env = TestEnv::new("template").await?;
    let ns = env.namespace.clone();
    env.create::<Secret>(json!({"metadata": {"name": "kv-auth"},
        "stringData": {"password": "s3cret-env"}}))
        .await?;
    env.create::<Secret>(json!({"metadata": {"name": "s3"}, "stringData": {"token": "t0k"}}))
        .await?;
    env.create::<Secret>(json!({"metadata": {"name": "regcred"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{}}"}}))
        .await?;
    env.create::<ConfigMap>(json!({"metadata": {"name": "kv-config"}, "data": {"mode": "fast"}}))
        .await?;
    env.create::<ServiceAccount>(json!({"metadata": {"name": "marekvs"}}))
        .await?;
    // Cluster-scoped: named after the namespace, deleted at the end.
    let classes: Api<PriorityClass> = Api::all(env.client.clone());
    let class = format!("kv-{ns}");
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": class}, "value": 1000}))?,
        )
        .await?;
    let _op = Operator::start(&ns)?;
    let password_env = json!({"name": "MAREKVS_REQUIREPASS",
        "valueFrom": {"secretKeyRef": {"name": "kv-auth", "key": "password"}}});
    let mut s = spec(4);
    s["env"] = json!([password_env]);
    let api = create(&env, "demo", s).await?;
    let four = ["demo-0", "demo-1", "demo-2", "demo-3"];
    wait_healthy(&api, "demo", &four, T).await?;
    let pods: Api<Pod> = env.api();
    // The members want the password from the Secret.
    let ip = pod_ip(&pods.get("demo-0").await?).context("pod IP")?;
    let r = data::Resp::connect_auth(ip, Some(""))
        .await?
        .call(&[b"CLUSTER", b"NODES"])
        .await?;
    assert!(format!("{r:?}").contains("NOAUTH"), "{r:?}");
    let data = DataSet::write_with_password(
        &pods,
        &four,
        "demo-0",
        data::default_keys(),
        "template",
        Some("s3cret-env".into()),
    )
    .await?;
    let svc = wait_client_service(&env, "the default client Service", |v| {
        v["spec"]["type"] == "ClusterIP"
    })
    .await?;
    assert_eq!(svc["spec"]["trafficDistribution"], "PreferClose");
    // It routes to the members taking client traffic: each pod is made labelled so.
    assert_eq!(svc["spec"]["selector"]["marekvs.io/client-traffic"], "on");
    for p in pods.list(&Default::default()).await?.items {
        let traffic = kube::ResourceExt::labels(&p)
            .get("marekvs.io/client-traffic")
            .cloned();
        assert_eq!(traffic.as_deref(), Some("on"), "{}", name_of(&p));
    }

    // The pod template options: a rolling update, one member at a time.
    let before = pods_now(&pods).await?;
    patch_spec(
        &api,
        "demo",
        json!({
            "imagePullSecrets": [{"name": "regcred"}],
            "podLabels": {"team": "payments"},
            "podAnnotations": {"example.com/owner": "payments"},
            "priorityClassName": class, "serviceAccountName": "marekvs",
            "env": [password_env,
                {"name": "S3_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "token"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "kv-config", "key": "mode"}}}],
        }),
    )
    .await?;
    let order = watch_rollout(&api, &pods, &four).await?;
    assert_eq!(order, ["demo-3", "demo-2", "demo-1", "demo-0"]);
    let after = pods_now(&pods).await?;
    all_replaced(&before, &after);
    for p in pods.list(&Default::default()).await?.items {
        let name = name_of(&p);
        let (meta, spec) = (&p.metadata, p.spec.as_ref().context("spec")?);
        assert_eq!(meta.labels.as_ref().unwrap()["team"], "payments", "{name}");
        assert_eq!(
            meta.annotations.as_ref().unwrap()["example.com/owner"],
            "payments",
            "{name}"
        );
        assert_eq!(spec.priority_class_name.as_deref(), Some(class.as_str()));
        // Resolved by the API server's admission: the class exists.
        assert_eq!(spec.priority, Some(1000), "{name}");
        assert_eq!(spec.service_account_name.as_deref(), Some("marekvs"));
        let pulls = spec.image_pull_secrets.clone().unwrap_or_default();
        assert_eq!(pulls.len(), 1, "{name}");
        assert_eq!(pulls[0].name, "regcred");
        let env_json = serde_json::to_value(&spec.containers[0].env)?;
        let by_name = |n: &str| {
            env_json
                .as_array()
                .and_then(|a| a.iter().find(|e| e["name"] == n).cloned())
                .unwrap_or_default()
        };
        assert_eq!(
            by_name("S3_TOKEN")["valueFrom"]["secretKeyRef"]["name"],
            "s3"
        );
        assert_eq!(
            by_name("MODE")["valueFrom"]["configMapKeyRef"]["name"],
            "kv-config"
        );
        let pass = by_name("MAREKVS_REQUIREPASS");
        assert!(pass.get("value").is_none(), "never in plain env: {pass}");
        assert_eq!(pass["valueFrom"]["secretKeyRef"]["name"], "kv-auth");
        let count = env_json.as_array().map(|a| {
            a.iter()
                .filter(|e| e["name"] == "MAREKVS_REQUIREPASS")
                .count()
        });
        assert_eq!(count, Some(1), "{name}: the password once");
    }
    wait_events(
        &env.client,
        &ns,
        "demo",
        &["UpdateStarted", "MemberUpdated"],
    )
    .await?;

    // The client Service's options: applied in place, no member restarted.
    let before = pods_now(&pods).await?;
    patch_spec(
        &api,
        "demo",
        json!({"clientService": {"type": "NodePort",
            "annotations": {"example.com/lb": "internal"}, "trafficDistribution": "PreferSameZone"}}),
    )
    .await?;
    let svc = wait_client_service(&env, "a NodePort client Service", |v| {
        v["spec"]["type"] == "NodePort"
    })
    .await?;
    assert_eq!(svc["spec"]["trafficDistribution"], "PreferSameZone");
    assert_eq!(svc["metadata"]["annotations"]["example.com/lb"], "internal");
    assert!(
        svc["spec"]["ports"][0]["nodePort"].as_u64().is_some(),
        "{svc}"
    );
    patch_spec(
        &api,
        "demo",
        json!({"clientService": {"type": "LoadBalancer",
            "loadBalancerSourceRanges": ["10.0.0.0/8"]}}),
    )
    .await?;
    let svc = wait_client_service(&env, "a LoadBalancer client Service", |v| {
        v["spec"]["type"] == "LoadBalancer"
    })
    .await?;
    assert_eq!(
        svc["spec"]["loadBalancerSourceRanges"],
        json!(["10.0.0.0/8"])
    );
    // Back to ClusterIP: the operator owns the type, the API server drops the node ports it
    // allocated, and the options the operator no longer sends go.
    patch_spec(&api, "demo", json!({"clientService": null})).await?;
    let svc = wait_client_service(&env, "the client Service back to ClusterIP", |v| {
        v["spec"]["type"] == "ClusterIP"
    })
    .await?;
    assert!(svc["spec"]["ports"][0].get("nodePort").is_none(), "{svc}");
    assert!(
        svc["spec"].get("loadBalancerSourceRanges").is_none(),
        "{svc}"
    );
    assert_eq!(svc["spec"]["trafficDistribution"], "PreferClose");
    assert!(
        svc["metadata"]["annotations"]
            .get("example.com/lb")
            .is_none(),
        "{svc}"
    );
    let c = wait_healthy(&api, "demo", &four, T).await?;
    assert_eq!(status_of(&c).updated_nodes, Some(4));
    assert_eq!(
        pods_now(&pods).await?,
        before,
        "a member restarted for a Service change"
    );

    // The password from env works as spec.auth: the views are read and a scale-down proceeds.
    patch_spec(&api, "demo", json!({"nodes": 3})).await?;
    let three = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &three, T).await?;

    // A podAnnotations change alone rolls the members too.
    let before = pods_now(&pods).await?;
    patch_spec(
        &api,
        "demo",
        json!({"podAnnotations": {"example.com/owner": "orders"}}),
    )
    .await?;
    watch_rollout(&api, &pods, &three).await?;
    all_replaced(&before, &pods_now(&pods).await?);
    for p in pods.list(&Default::default()).await?.items {
        assert_eq!(
            p.metadata.annotations.as_ref().unwrap()["example.com/owner"],
            "orders"
        );
    }
    data.verify(&pods).await?;
    classes.delete(&class, &Default::default()).await?;
    env.cleanup().await
}

/// A change whose new pod the API server refuses (`change`, with `refusal` in the server's
/// words): the cluster turns Blocked `PodRefused` with that message, and no member is touched:
/// no pod drained, relabelled or deleted. Changed back, the cluster is Healthy again with the
/// same pods (no member was ever restarted).
async fn a_refused_pod_drains_no_one(
    label: &str,
    change: serde_json::Value,
    refusal: &str,
) -> anyhow::Result<()> {
    let env = TestEnv::new(label).await?;
    let ns = env.namespace.clone();
    let op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(3)).await?;
    let three = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &three, T).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let before = pods_now(&pods).await?;
    patch_spec(&api, "demo", change.clone()).await?;
    let c = wait_cluster(&api, "demo", "Blocked on PodRefused", T, |s| {
        condition(s, "Blocked").is_some_and(|c| c.status == "True" && c.reason == "PodRefused")
    })
    .await?;
    let status = status_of(&c);
    let blocked = condition(&status, "Blocked").context("Blocked")?;
    eprintln!("{label}: {}", blocked.message);
    assert!(
        blocked.message.contains(refusal) && blocked.message.contains("demo-2"),
        "{}",
        blocked.message
    );
    // It stays so, touching no member.
    op.quiet_window(Duration::from_secs(10)).await?;
    let c = api.get("demo").await?;
    assert_eq!(status_of(&c).phase, Some(ClusterPhase::Blocked));
    assert_eq!(
        pods_now(&pods).await?,
        before,
        "a pod was deleted or restarted"
    );
    for p in pods.list(&Default::default()).await?.items {
        let meta = &p.metadata;
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert!(
            !annotations.contains_key("marekvs.io/drained-at"),
            "{} drained",
            name_of(&p)
        );
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("marekvs.io/client-traffic").map(String::as_str),
            Some("on"),
            "{}",
            name_of(&p)
        );
    }
    // Changed back: the same pods, Healthy.
    let undo: serde_json::Map<String, serde_json::Value> = change
        .as_object()
        .context("a change is an object")?
        .keys()
        .map(|k| (k.clone(), serde_json::Value::Null))
        .collect();
    patch_spec(&api, "demo", serde_json::Value::Object(undo)).await?;
    wait_healthy(&api, "demo", &three, T).await?;
    assert_eq!(
        pods_now(&pods).await?,
        before,
        "changed back, no member restarted"
    );
    env.cleanup().await
}

async fn an_unknown_service_account_blocks_the_update_and_drains_no_one() -> anyhow::Result<()> {
    a_refused_pod_drains_no_one(
        "refused-sa",
        json!({"serviceAccountName": "no-such-account"}),
        "no-such-account",
    )
    .await
}

async fn an_unknown_priority_class_blocks_the_update_and_drains_no_one() -> anyhow::Result<()> {
    a_refused_pod_drains_no_one(
        "refused-pc",
        json!({"priorityClassName": "no-such-class"}),
        "no-such-class",
    )
    .await
}

async fn an_invalid_env_name_blocks_the_update_and_drains_no_one() -> anyhow::Result<()> {
    a_refused_pod_drains_no_one(
        "refused-env",
        json!({"env": [{"name": "BAD=NAME", "value": "x"}]}),
        "BAD=NAME",
    )
    .await
}

/// The image a whole-cluster upgrade goes to: `MAREKVS_IMAGE_UPGRADE`, or the member image's
/// repository tagged `0.3.0`. The simulator reports the release its tag names; a real
/// marekvs-server run by the harness is the same binary whatever the tag (0.2.0).
fn upgrade_image() -> String {
    std::env::var("MAREKVS_IMAGE_UPGRADE").unwrap_or_else(|_| {
        let image = image();
        let repo = match image.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => repo.to_string(),
            _ => image,
        };
        format!("{repo}:0.3.0")
    })
}

/// The member container's image of each pod there (terminating or not).
async fn images_now(pods: &Api<Pod>) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| {
            let image = p.spec.as_ref()?.containers.first()?.image.clone()?;
            Some((name_of(&p), image))
        })
        .collect())
}

/// `upgrade.strategy: WholeCluster` with a new image, under a pooled client load through the
/// client Service: every member's traffic is cut, the members flushed, all stopped, and only
/// then all started on the new image; no pod of the new image exists beside one of the old;
/// traffic returns once the views converged. Every key written before reads back, and every
/// write the load had acknowledged, before, during and after. The members' down time and the
/// client outage are printed.
async fn a_whole_cluster_upgrade_under_load_loses_nothing() -> anyhow::Result<()> {
    let env = TestEnv::new("whole-upgrade").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let all = ["demo-0", "demo-1", "demo-2"];
    let mut s = spec(3);
    s["upgrade"] = json!({"strategy": "WholeCluster"});
    let api = create(&env, "demo", s).await?;
    wait_healthy(&api, "demo", &all, T).await?;
    let pods: Api<Pod> = env.api();
    let data = write_keys(&env, &all, "demo-0", "whole-upgrade").await?;
    let before = status_of(&api.get("demo").await?);
    let old_versions: Vec<Option<String>> =
        before.members.iter().map(|m| m.version.clone()).collect();
    println!("versions before: {old_versions:?}");
    anyhow::ensure!(
        old_versions.iter().all(Option::is_some),
        "every member's version read: {old_versions:?}"
    );

    let pooled = load::LoadTarget::Pooled {
        service: "demo".into(),
        connections: 4,
    };
    let load = load::SteadyLoad::start(
        env.client.clone(),
        &ns,
        pooled,
        100.0,
        "demo-0",
        "whole-upgrade-load",
    )?;
    // Writes acknowledged through the client Service before the change.
    let warm = Instant::now();
    while load.acked() == 0 {
        anyhow::ensure!(
            warm.elapsed() < Duration::from_secs(60),
            "the load writes through the client Service: nothing acknowledged in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let old_image = image();
    let new_image = upgrade_image();
    patch_spec(&api, "demo", json!({"image": new_image})).await?;
    let start = Instant::now();
    let mut steps: Vec<UpgradeStep> = Vec::new();
    let (mut stopped_at, mut done_at) = (None, None);
    let acked_at_patch = load.acked();
    let mut acked_when_stopped = 0;
    while done_at.is_none() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(420),
            "the upgrade did not finish in 420 s; steps {steps:?}"
        );
        let st = status_of(&api.get("demo").await?);
        if let Some(u) = &st.upgrade {
            if steps.last() != Some(&u.step) {
                println!("{:>6.1}s: {:?}", start.elapsed().as_secs_f64(), u.step);
                steps.push(u.step);
            }
            if u.step != UpgradeStep::Flushing && stopped_at.is_none() {
                stopped_at = Some(start.elapsed());
                acked_when_stopped = load.acked();
            }
        } else if !steps.is_empty() && st.phase == Some(ClusterPhase::Healthy) {
            done_at = Some(start.elapsed());
        }
        // Never a pod of the new image beside one of the old: no mixed mesh.
        let images = images_now(&pods).await?;
        let olds: Vec<&String> = images
            .iter()
            .filter(|(_, i)| **i == old_image)
            .map(|(n, _)| n)
            .collect();
        let news: Vec<&String> = images
            .iter()
            .filter(|(_, i)| **i == new_image)
            .map(|(n, _)| n)
            .collect();
        anyhow::ensure!(
            olds.is_empty() || news.is_empty(),
            "old pods {olds:?} beside new ones {news:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (stopped_at, done_at) = (stopped_at.context("never stopped")?, done_at.unwrap());
    // Stopping may pass between two looks on the simulator (its pods exit at once).
    anyhow::ensure!(
        steps.first() == Some(&UpgradeStep::Flushing)
            && steps.last() == Some(&UpgradeStep::Starting)
            && steps.windows(2).all(|w| w[0] < w[1]),
        "the steps, in order: {steps:?}"
    );
    // Clients are served again: new writes are acknowledged after the upgrade.
    let acked_at_end = load.acked();
    let back = Instant::now();
    while load.acked() <= acked_at_end {
        anyhow::ensure!(
            back.elapsed() < Duration::from_secs(60),
            "no write acknowledged in the 60 s after the upgrade ({acked_at_end} in all)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = load.stop().await?;
    wait_events(
        &env.client,
        &ns,
        "demo",
        &[
            "WholeClusterUpgradeStarted",
            "WholeClusterStopping",
            "WholeClusterUpgraded",
        ],
    )
    .await?;
    let upgraded = event_notes(&env.client, &ns, "demo", "WholeClusterUpgraded").await?;
    println!(
        "whole-cluster upgrade {old_image} → {new_image}: flushed in {:.1}s, members down and back with views converged {:.1}s later, done {:.1}s after the patch; {}",
        stopped_at.as_secs_f64(),
        (done_at - stopped_at).as_secs_f64(),
        done_at.as_secs_f64(),
        upgraded.first().map(String::as_str).unwrap_or("")
    );
    println!(
        "load: {} writes acknowledged ({} before the patch, {} more before the stop, {} after traffic returned), {} not acknowledged, through {:?}",
        report.data.len(),
        acked_at_patch,
        acked_when_stopped.saturating_sub(acked_at_patch),
        report.data.len() - acked_at_end,
        report.failed,
        report.data.written_through()
    );
    let after = status_of(&api.get("demo").await?);
    for m in &after.members {
        assert!(m.updated, "{} runs the current spec", m.name);
    }
    let mixed = after
        .conditions
        .iter()
        .find(|c| c.type_ == "MixedVersions")
        .context("MixedVersions")?;
    assert_eq!(mixed.status, "False", "{mixed:?}");
    let versions: Vec<Option<String>> = after.members.iter().map(|m| m.version.clone()).collect();
    println!("versions after: {versions:?}");
    if Sim::from_env().is_some() {
        assert!(
            versions.iter().all(|v| v.as_deref() == Some("0.3.0")),
            "the simulator runs the release the tag names: {versions:?}"
        );
    } else {
        skipped_check(
            "the new release reported by every member",
            "real members run one marekvs-server binary whatever the image tag",
        );
    }
    let kept = data.verify(&pods).await?;
    let loaded = report.data.verify(&pods).await?;
    println!(
        "read back: {} keys written before ({} overwritten, {} deleted), {} written by the load",
        kept.keys, kept.overwritten, kept.deleted, loaded.keys
    );
    env.cleanup().await
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        a_spec_change_restarts_one_member_at_a_time_behind_the_hand_off_gate,
        pause_holds_a_rollout_and_resuming_finishes_it,
        the_autoscaler_follows_load_within_bounds_with_hysteresis needs [Simulator],
        a_full_disk_grows_the_cluster_blocks_shrinking_and_a_write_stop_is_reported needs [Simulator],
        another_storage_class_is_refused_unless_volumes_may_be_replaced_then_moves_one_at_a_time,
        pod_template_options_roll_and_client_service_options_apply_in_place,
        an_unknown_service_account_blocks_the_update_and_drains_no_one,
        an_unknown_priority_class_blocks_the_update_and_drains_no_one,
        an_invalid_env_name_blocks_the_update_and_drains_no_one,
        a_whole_cluster_upgrade_under_load_loses_nothing,
    ])
}
