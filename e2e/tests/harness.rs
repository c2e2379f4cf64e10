//! The local harness behaves like a kubelet running real marekvs nodes: a pod with a PVC runs
//! on a fake node at a loopback IP, turns Ready only once its member's `/ready` answers 200,
//! serves `/metrics` there, and on deletion is drained, flushes and goes away.
//!
//! Simulator-only: skipped where `MAREKVS_SIM_CONTROL_URL` is not set.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use marekvs_e2e::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

fn member_pod(name: &str, claim: &str, rf: u32) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "hostname": name,
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "marekvs",
                "image": "marekvs:sim",
                "env": [
                    {"name": "MAREKVS_REPLICAS_N", "value": rf.to_string()},
                    {"name": "MAREKVS_SEEDS", "value": "harness:7946"},
                ],
                "ports": [{"name": "metrics", "containerPort": 9121}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "metrics"}, "periodSeconds": 1, "failureThreshold": 1},
                "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": "metrics"}}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        }
    })
}

fn claim(name: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })
}

async fn a_member_pod_with_a_pvc_runs_at_a_loopback_ip_and_is_ready_only_when_its_node_is()
-> anyhow::Result<()> {
    let sim = Sim::required()?;
    let env = TestEnv::new("harness").await?;
    let ns = env.namespace.clone();
    // Keep the member Joining until we let it go, so "not ready yet" is observable.
    sim.set_faults(&ns, "m-0", json!({"hold_join": true}))
        .await?;
    env.create::<PersistentVolumeClaim>(claim("data-m-0"))
        .await?;
    env.create::<Pod>(member_pod("m-0", "data-m-0", 1)).await?;
    let pods: Api<Pod> = env.api();

    let pod = wait_until("pod Running with an IP", T, || async {
        let p = pods.get("m-0").await?;
        Ok((pod_running(&p) && pod_ip(&p).is_some()).then_some(p))
    })
    .await?;
    let ip = pod_ip(&pod).unwrap();
    assert!(ip.is_loopback(), "pod IP {ip} must be in 127.0.0.0/8");
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("scheduled");
    assert!(
        node.starts_with("kwok-node-"),
        "scheduled to a fake node, got {node}"
    );
    let pvc: PersistentVolumeClaim = env.api().get("data-m-0").await?;
    assert_eq!(
        pvc.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Bound")
    );

    // The probe has run (twice) against a Joining member: /ready is 503 and the pod is not Ready.
    wait_until("two readiness probes", T, || async {
        let m = sim.member(&ns, "m-0").await?;
        Ok(
            m.filter(|m| m["readiness_probes"].as_u64().unwrap_or(0) >= 2)
                .map(|_| ()),
        )
    })
    .await?;
    let (code, _) = member_get(ip, "/ready").await?;
    assert_eq!(code, 503, "a Joining member is not ready");
    assert!(
        !pod_condition(&pods.get("m-0").await?, "Ready"),
        "pod must not be Ready before /ready answers 200"
    );

    // Let it finish joining: the pod turns Ready, and /ready answers 200.
    sim.set_faults(&ns, "m-0", json!({"hold_join": false}))
        .await?;
    wait_until("pod Ready", T, || async {
        Ok(pod_condition(&pods.get("m-0").await?, "Ready").then_some(()))
    })
    .await?;
    let (code, _) = member_get(ip, "/ready").await?;
    assert_eq!(code, 200);

    let (code, metrics) = member_get(ip, "/metrics").await?;
    assert_eq!(code, 200);
    assert_eq!(metric(&metrics, "marekvs_cluster_members"), Some(1.0));
    assert_eq!(
        metric(&metrics, "marekvs_cluster_underreplicated_partitions"),
        Some(0.0)
    );
    assert_eq!(
        metric(&metrics, "marekvs_join_gate_pending_pids"),
        Some(0.0)
    );

    // Delete: the preStop hook drains it, it flushes, exits, and only then is the pod gone.
    pods.delete("m-0", &DeleteParams::default()).await?;
    let m = wait_until("member Leaving after preStop /drain", T, || async {
        let m = sim.member(&ns, "m-0").await?;
        Ok(m.filter(|m| m["phase"] == "Leaving"))
    })
    .await?;
    assert_eq!(
        m["running"], true,
        "a draining member keeps running until it has flushed"
    );
    wait_until("pod gone", T, || async {
        Ok(pods.get_opt("m-0").await?.is_none().then_some(()))
    })
    .await?;
    assert!(
        sim.member(&ns, "m-0").await?.is_none(),
        "the member went away with its pod"
    );
    assert!(
        member_get(ip, "/ready").await.is_err(),
        "nothing listens on {ip}:9121 any more"
    );

    // The volume outlives the pod; deleting the claim releases and removes it.
    let pv_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .expect("bound");
    env.api::<PersistentVolumeClaim>()
        .delete("data-m-0", &DeleteParams::default())
        .await?;
    let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
    wait_until("PV deleted", T, || async {
        Ok(pvs.get_opt(&pv_name).await?.is_none().then_some(()))
    })
    .await?;
    env.cleanup().await
}

async fn members_sharing_seeds_form_one_cluster_and_a_crashed_member_is_restarted_on_its_volume()
-> anyhow::Result<()> {
    let sim = Sim::required()?;
    let env = TestEnv::new("gossip").await?;
    let ns = env.namespace.clone();
    let pods: Api<Pod> = env.api();
    for i in 0..3 {
        env.create::<PersistentVolumeClaim>(claim(&format!("data-g-{i}")))
            .await?;
        env.create::<Pod>(member_pod(&format!("g-{i}"), &format!("data-g-{i}"), 2))
            .await?;
    }
    let mut ips = Vec::new();
    for i in 0..3 {
        let name = format!("g-{i}");
        let p = wait_until("pod Ready", T, || async {
            let p = pods.get(&name).await?;
            Ok(pod_condition(&p, "Ready").then_some(p))
        })
        .await?;
        ips.push(pod_ip(&p).unwrap());
    }
    // Every view converges on three members.
    for ip in &ips {
        wait_until("view of 3 members", T, || async {
            let (_, m) = member_get(*ip, "/metrics").await?;
            Ok((metric(&m, "marekvs_cluster_members") == Some(3.0)).then_some(()))
        })
        .await?;
    }
    let volume_before = sim.member(&ns, "g-1").await?.unwrap()["volume"].clone();
    let data = write_keys(&env, &["g-0", "g-1", "g-2"], "g-0", "crash").await?;

    // A crash: peers drop it after the detection delay; the pod runner restarts it in place.
    sim.crash(&ns, "g-1").await?;
    wait_until("restartCount 1", T, || async {
        Ok((restart_count(&pods.get("g-1").await?) == 1).then_some(()))
    })
    .await?;
    wait_until("g-1 Ready again", T, || async {
        Ok(pod_condition(&pods.get("g-1").await?, "Ready").then_some(()))
    })
    .await?;
    let after = sim.member(&ns, "g-1").await?.unwrap();
    assert_eq!(
        after["volume"], volume_before,
        "restarted on the same volume"
    );
    assert_eq!(
        sim.lost_partitions(&ns).await?,
        0,
        "one crash at RF 2 loses nothing"
    );
    read_back(&env, &data).await?;
    env.cleanup().await
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        a_member_pod_with_a_pvc_runs_at_a_loopback_ip_and_is_ready_only_when_its_node_is needs [Simulator],
        members_sharing_seeds_form_one_cluster_and_a_crashed_member_is_restarted_on_its_volume needs [Simulator],
    ])
}
