//! 3: replacement latency, ours vs the StatefulSet controller, in the same run.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use marekvs_e2e::*;
use serde_json::{Value, json};

use crate::common::{T, summary};

/// Delete `name` and time, from the watch, its DELETED event to the ADDED event of the pod
/// that replaces it.
async fn time_replacement(pods: &Api<Pod>, name: &str, label: &str) -> anyhow::Result<f64> {
    let stream =
        watcher::watcher(pods.clone(), watcher::Config::default().labels(label)).default_backoff();
    let mut stream = Box::pin(stream);
    // Drain the initial list first.
    loop {
        match stream.next().await {
            Some(Ok(Event::InitDone)) => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("watch ended"),
        }
    }
    let old_uid = pods.get(name).await?.metadata.uid;
    pods.delete(
        name,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    let mut deleted = None;
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        let ev = tokio::time::timeout(T, stream.next()).await?;
        match ev {
            Some(Ok(Event::Delete(p))) if p.metadata.name.as_deref() == Some(name) => {
                deleted = Some(Instant::now());
            }
            Some(Ok(Event::Apply(p)))
                if p.metadata.name.as_deref() == Some(name) && p.metadata.uid != old_uid =>
            {
                let created = Instant::now();
                let from = deleted.context("replacement seen before the deletion")?;
                return Ok((created - from).as_secs_f64());
            }
            Some(Err(e)) => return Err(e.into()),
            _ => {}
        }
    }
    anyhow::bail!("no replacement for {name}")
}

/// Until the cluster's object has not changed for `quiet`.
async fn wait_status_quiet(
    api: &Api<MarekvsCluster>,
    name: &str,
    quiet: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + T;
    let mut last = (
        api.get(name).await?.metadata.resource_version,
        Instant::now(),
    );
    while last.1.elapsed() < quiet {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name}'s status never stayed unchanged"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let rv = api.get(name).await?.metadata.resource_version;
        if rv != last.0 {
            last = (rv, Instant::now());
        }
    }
    Ok(())
}

/// A StatefulSet `name` of 3 whose pod is the operator's pod of cluster `ours` (the same
/// containers, probes and volume), as it would run under a StatefulSet: a volume claim
/// template for the data volume, its own seeds, and none of what admission or scheduling
/// added (the API server's work on a create grows with the pod, so both create the same one).
fn statefulset_like(pod: &Value, pvc: &Value, ours: &str, name: &str) -> Value {
    let mut spec = pod["spec"].clone();
    let s = spec.as_object_mut().expect("a pod spec");
    for added in [
        "nodeName",
        "hostname",
        "subdomain",
        "priority",
        "tolerations",
        "serviceAccount",
    ] {
        s.remove(added);
    }
    let is_token = |v: &Value| {
        v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access"))
    };
    if let Some(vs) = s.get_mut("volumes").and_then(Value::as_array_mut) {
        vs.retain(|v| !is_token(v) && v["name"] != "data");
    }
    let containers = s["containers"].as_array_mut().expect("containers");
    for c in containers {
        if let Some(ms) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
            ms.retain(|m| !is_token(m));
        }
        if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
            for e in env {
                if e["name"] == "MAREKVS_SEEDS"
                    && let Some(v) = e["value"].as_str()
                {
                    e["value"] =
                        json!(v.replace(&format!("{ours}-headless"), &format!("{name}-headless")));
                }
            }
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 3, "serviceName": format!("{name}-headless"),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"bench": name}},
            "template": {"metadata": {"labels": {"bench": name}}, "spec": spec},
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": pvc["spec"]["accessModes"],
                    "storageClassName": pvc["spec"]["storageClassName"],
                    "resources": {"requests": pvc["spec"]["resources"]["requests"]}
                }
            }]
        }
    })
}

pub async fn replace(runs: u64) -> anyhow::Result<()> {
    let env = TestEnv::new("bench-replace").await?;
    let ns = env.namespace.clone();
    let log = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
    let _op = Operator::start_with(&ns, &[("RUST_LOG", log.as_str())])?;
    let api = create(&env, "rep", spec(3)).await?;
    wait_healthy(&api, "rep", &["rep-0", "rep-1", "rep-2"], T).await?;
    // A plain StatefulSet of the same size and the same pod, on the same fake nodes: the
    // simulator runs its pods as the members of a second marekvs cluster.
    let our_pod = serde_json::to_value(env.api::<Pod>().get("rep-0").await?)?;
    let our_pvc =
        serde_json::to_value(env.api::<PersistentVolumeClaim>().get("data-rep-0").await?)?;
    let sts: StatefulSet =
        serde_json::from_value(statefulset_like(&our_pod, &our_pvc, "rep", "sts"))?;
    env.api::<StatefulSet>()
        .create(&PostParams::default(), &sts)
        .await?;
    let pods: Api<Pod> = env.api();
    wait_until("the StatefulSet's 3 pods ready", T, || async {
        let ready = pods
            .list(&ListParams::default().labels("bench=sts"))
            .await?
            .items
            .iter()
            .filter(|p| pod_condition(p, "Ready"))
            .count();
        Ok((ready == 3).then_some(()))
    })
    .await?;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..runs {
        // In steady state, as a pod is usually lost: right after Healthy, the operator is
        // still writing status, and a reconcile in flight delays the next one.
        wait_status_quiet(&api, "rep", Duration::from_secs(3)).await?;
        let m = format!("rep-{}", i % 3);
        ours.push(time_replacement(&pods, &m, "app.kubernetes.io/instance=rep").await?);
        wait_healthy(&api, "rep", &["rep-0", "rep-1", "rep-2"], T).await?;
        let s = format!("sts-{}", i % 3);
        theirs.push(time_replacement(&pods, &s, "bench=sts").await?);
        wait_until("the StatefulSet's 3 pods ready again", T, || async {
            let ready = pods
                .list(&ListParams::default().labels("bench=sts"))
                .await?
                .items
                .iter()
                .filter(|p| pod_condition(p, "Ready") && p.metadata.deletion_timestamp.is_none())
                .count();
            Ok((ready == 3).then_some(()))
        })
        .await?;
    }
    summary(
        "replacement: pod deleted → new pod (marekvs-operator)",
        "s",
        ours,
    );
    summary(
        "replacement: pod deleted → new pod (StatefulSet controller)",
        "s",
        theirs,
    );
    env.cleanup().await
}
