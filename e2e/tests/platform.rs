//! What the platform around the operator does to members: a node drained with `kubectl drain`.
//!
//! Every test here cordons a node of the shared cluster, so the file runs with nothing beside
//! it (hack/test-e2e.sh names it exclusive). Each runs on the simulator and on real members.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_api::BlockReason;
use marekvs_e2e::install::tool;
use marekvs_e2e::*;

const T: Duration = Duration::from_secs(300);

/// The node each member pod is scheduled to.
async fn nodes_of(pods: &Api<Pod>) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.clone()?;
            Some((name_of(&p), node))
        })
        .collect())
}

/// Members without a live, ready pod.
async fn down(pods: &Api<Pod>, members: &[String]) -> anyhow::Result<Vec<String>> {
    let live: Vec<String> = pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_condition(p, "Ready"))
        .map(|p| name_of(&p))
        .collect();
    Ok(members
        .iter()
        .filter(|m| !live.contains(m))
        .cloned()
        .collect())
}

/// Held for a whole test: the runner may start this file's tests side by side, and each
/// cordons a node the other's members may run on.
async fn one_drain_at_a_time() -> anyhow::Result<ClusterLock> {
    ClusterLock::take("node-drains", LockMode::Exclusive).await
}

/// Uncordons its node when dropped, whatever the test's outcome: the cluster is shared.
struct Cordoned(String);

impl Drop for Cordoned {
    fn drop(&mut self) {
        if let Ok(kubectl) = tool("MAREKVS_E2E_KUBECTL") {
            let _ = std::process::Command::new(kubectl)
                .args(["uncordon", &self.0])
                .output();
        }
    }
}

/// The label (`spec.podLabels`) a drain test's member pods carry, its namespace as the value:
/// its drain evicts only them. Selecting `app.kubernetes.io/instance=demo` took every test's
/// cluster `demo` on the node, a failed test's leftover too, whose pods the PDB keeps: that
/// drain timed out after 600 s in CI.
const DRAIN_LABEL: &str = "e2e-drain";

/// The spec of a drain test's cluster: `spec(nodes)`, its pods labelled [`DRAIN_LABEL`].
fn drain_spec(nodes: u32, ns: &str) -> serde_json::Value {
    let mut s = spec(nodes);
    s["podLabels"] = serde_json::json!({ DRAIN_LABEL: ns });
    s
}

/// `kubectl drain <node>` of this test's member pods (those labelled [`DRAIN_LABEL`] with
/// `ns`), in the background; its output once it exits.
fn kubectl_drain(
    node: &str,
    ns: &str,
) -> anyhow::Result<tokio::task::JoinHandle<std::io::Result<std::process::Output>>> {
    let drain = tokio::process::Command::new(tool("MAREKVS_E2E_KUBECTL")?)
        .args([
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--pod-selector",
            &format!("{DRAIN_LABEL}={ns}"),
            "--timeout",
            "600s",
        ])
        .kill_on_drop(true)
        .output();
    Ok(tokio::spawn(drain))
}

/// Waits for a drain started by [`kubectl_drain`] to succeed, at most `limit`.
async fn drained(
    drain: tokio::task::JoinHandle<std::io::Result<std::process::Output>>,
    limit: Duration,
) -> anyhow::Result<()> {
    let out = tokio::time::timeout(limit, drain)
        .await
        .context("kubectl drain did not finish")???;
    if !out.status.success() {
        bail!(
            "kubectl drain failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `kubectl drain` of a node that runs 2 of 5 members (RF 2): the PDB lets no eviction take a
/// member, so the drain waits while the operator moves them off one at a time, each drained
/// and handed off, then let go to the drain's eviction. The drain completes by itself, no two
/// members are ever down at once, and every key reads back.
async fn a_node_drain_moves_its_members_off_one_at_a_time_and_completes() -> anyhow::Result<()> {
    let _drains = one_drain_at_a_time().await?;
    let env = TestEnv::new("node-drain").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let names: Vec<String> = (0..5).map(|o| format!("demo-{o}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let api = create(&env, "demo", drain_spec(5, &ns)).await?;
    wait_healthy(&api, "demo", &refs, T).await?;
    let pods: Api<Pod> = env.api();

    // The node with the most members (the soft spread puts 2, 2 and 1 on three nodes).
    let placed = nodes_of(&pods).await?;
    let mut per_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (member, node) in &placed {
        per_node.entry(node).or_default().push(member);
    }
    let (node, on_node) = per_node
        .iter()
        .max_by_key(|(_, ms)| ms.len())
        .map(|(n, ms)| (n.to_string(), ms.clone()))
        .context("no member scheduled")?;
    if on_node.len() < 2 {
        bail!("no node runs 2 members: {placed:?}");
    }
    println!("draining {node}, which runs {on_node:?}");
    let reader = refs
        .iter()
        .find(|m| !on_node.contains(m))
        .context("a member elsewhere")?;
    let data = write_keys(&env, &refs, reader, "node-drain").await?;

    let _uncordon = Cordoned(node.clone());
    let drain = kubectl_drain(&node, &ns)?;

    // While it runs: never two members down at once; record the order members moved in.
    let start = Instant::now();
    let mut moved: Vec<String> = Vec::new();
    let mut most_down = 0;
    while !drain.is_finished() {
        let s = status_of(&api.get("demo").await?);
        if let Some(r) = &s.rollout
            && r.reason == RolloutReason::NodeDrained
            && moved.last() != Some(&r.member)
        {
            assert_eq!(r.node.as_deref(), Some(node.as_str()), "{r:?}");
            moved.push(r.member.clone());
        }
        let now_down = down(&pods, &names).await?;
        most_down = most_down.max(now_down.len());
        assert!(
            now_down.len() <= 1,
            "two members down at once: {now_down:?}"
        );
        if start.elapsed() > T * 2 {
            bail!("the drain did not finish in {:?}; moved {moved:?}", T * 2);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drained(drain, T).await?;
    let took = start.elapsed();
    println!(
        "kubectl drain finished in {took:?}; members moved: {moved:?}; at most {most_down} down at once"
    );
    let mut expected: Vec<String> = on_node.iter().map(|m| m.to_string()).collect();
    expected.sort_by_key(|m| std::cmp::Reverse(m.clone()));
    assert_eq!(moved, expected, "the highest ordinal first, each once");

    // Every member is back, none on the drained node, each on its own volume.
    wait_healthy(&api, "demo", &refs, T).await?;
    let after = nodes_of(&pods).await?;
    for m in &names {
        assert_ne!(after.get(m), Some(&node), "{m} still on {node}");
    }
    read_back(&env, &data).await?;
    wait_events(
        &env.client,
        &ns,
        "demo",
        &["NodeDrainStarted", "MemberMovedOffNode"],
    )
    .await?;
    for m in &on_node {
        let started = event_notes(&env.client, &ns, "demo", "NodeDrainStarted").await?;
        assert!(
            started.iter().any(|n| n.contains(m) && n.contains(&node)),
            "no NodeDrainStarted naming {m} and {node}: {started:?}"
        );
    }
    let s = status_of(&api.get("demo").await?);
    if s.rollout.is_some() {
        return Err(anyhow!("a rollout is still recorded: {:?}", s.rollout));
    }
    env.cleanup().await
}

/// At the floor (3 members, RF 2) with one member fenced, only replicationFactor members
/// serve: moving another off a drained node would leave one copy. The drain is held, the
/// cluster Blocked with the reason naming the node and the member, the member untouched; once
/// unfenced, the drain completes and every key reads back.
async fn a_node_drain_at_replication_factor_is_blocked_with_the_reason_then_completes()
-> anyhow::Result<()> {
    let _drains = one_drain_at_a_time().await?;
    let env = TestEnv::new("drain-floor").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let three = ["demo-0", "demo-1", "demo-2"];
    let api = create(&env, "demo", drain_spec(3, &ns)).await?;
    wait_healthy(&api, "demo", &three, T).await?;
    let pods: Api<Pod> = env.api();
    let data = write_keys(&env, &three, "demo-1", "drain-floor").await?;
    patch_spec(
        &api,
        "demo",
        serde_json::json!({"fencedMembers": ["demo-0"]}),
    )
    .await?;
    wait_until("the pod of demo-0 gone", T, || async {
        Ok((!nodes_of(&pods).await?.contains_key("demo-0")).then_some(()))
    })
    .await?;
    let placed = nodes_of(&pods).await?;
    let node = placed["demo-2"].clone();
    let uid = pods.get("demo-2").await?.metadata.uid;

    let _uncordon = Cordoned(node.clone());
    let drain = kubectl_drain(&node, &ns)?;
    let want = format!("moving demo-2 off node {node} (being drained)");
    let c = wait_cluster(&api, "demo", "the drain held by the fence", T, |s| {
        s.block_reason == Some(BlockReason::Fenced)
            && condition(s, "Blocked").is_some_and(|c| c.message.contains(&want))
    })
    .await?;
    println!(
        "held: {}",
        condition(&status_of(&c), "Blocked").map_or("", |c| c.message.as_str())
    );
    // Held, not silent, and nothing done to demo-2 meanwhile.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!drain.is_finished(), "the drain got through while held");
    let held = pods.get("demo-2").await?;
    assert_eq!(held.metadata.uid, uid, "demo-2 restarted while held");
    assert!(held.metadata.deletion_timestamp.is_none());
    assert!(status_of(&api.get("demo").await?).rollout.is_none());

    patch_spec(&api, "demo", serde_json::json!({"fencedMembers": null})).await?;
    drained(drain, T * 2).await?;
    wait_healthy(&api, "demo", &three, T).await?;
    let after = nodes_of(&pods).await?;
    for m in three {
        assert_ne!(after.get(m), Some(&node), "{m} still on {node}");
    }
    read_back(&env, &data).await?;
    wait_events(&env.client, &ns, "demo", &["MemberMovedOffNode"]).await?;
    env.cleanup().await
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        a_node_drain_moves_its_members_off_one_at_a_time_and_completes,
        a_node_drain_at_replication_factor_is_blocked_with_the_reason_then_completes,
    ])
}
