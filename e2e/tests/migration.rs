//! Migration from marekvs's own operator (docs/migration.md): its objects are reproduced on
//! the cluster (the MarekvsCluster with the status it wrote, a StatefulSet owned by it, its
//! Services and PDB), then the documented commands are run and this operator adopts the
//! members without restarting any of them or losing a key.
//!
//! Runs unchanged on simulated members and on real ones (`MAREKVS_BIN`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use marekvs_e2e::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(240);
const CRD: &str = "marekvsclusters.marekvs.io";
/// The field manager marekvs's own operator applies with (the same name as this one's).
const OLD_MANAGER: &str = "marekvs-operator";
const MEMBERS: [&str; 4] = ["demo-0", "demo-1", "demo-2", "demo-3"];

/// The status marekvs's own operator kept: `opsPerSecond` as a string, its sample and scale
/// epochs, a message.
fn old_status() -> Value {
    json!({
        "phase": "Healthy", "desiredNodes": 4, "readyNodes": 4,
        "underreplicatedPartitions": 0, "opsPerSecond": "4231.0",
        "lastScaleEpoch": 1_764_000_000, "lastOpsTotal": 987_654_321_u64,
        "lastSampleEpoch": 1_764_000_030, "message": "4/4 nodes ready",
    })
}

/// The object as marekvs's own operator's users wrote it (its field names), fixed-size here
/// so that the scale-down at the end is asked by `nodes`.
fn old_spec() -> Value {
    json!({
        "image": image(), "nodes": 4, "replicationFactor": 2,
        "storage": {"size": "1Gi"},
        "resources": {"cpu": "1", "memory": "1Gi"},
        "reclaimPvcs": false,
        "extraEnv": {"RUST_LOG": "info"},
        "hostnameSpreadWhenUnsatisfiable": "ScheduleAnyway",
    })
}

/// Run `body` while the CRD's status schema accepts anything (as marekvs's own operator's CRD
/// accepted its status), then put the schema back, whatever `body` did. Only the status schema
/// changes, for a few seconds: specs are validated and defaulted as before.
async fn with_old_status_schema<F, Fut>(env: &TestEnv, body: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let original = status_schema(&crds, None).await?;
    status_schema(
        &crds,
        Some(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
    )
    .await?;
    let result = body().await;
    status_schema(&crds, Some(original)).await?;
    result
}

/// The CRD's status schema, replaced by `new` if given; returns the one it had.
async fn status_schema(
    crds: &Api<CustomResourceDefinition>,
    new: Option<Value>,
) -> anyhow::Result<Value> {
    const PATH: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/status";
    // Another test may apply the CRD meanwhile (the installs do): a conflict reads it again.
    for _ in 0..5 {
        let mut crd = serde_json::to_value(crds.get(CRD).await?)?;
        let slot = crd
            .pointer_mut(PATH)
            .context("the CRD has a status schema")?;
        let old = slot.clone();
        let Some(new) = new.clone() else {
            return Ok(old);
        };
        *slot = new;
        match crds
            .replace(CRD, &Default::default(), &serde_json::from_value(crd)?)
            .await
        {
            Ok(_) => return Ok(old),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("the CRD kept changing while its status schema was being replaced")
}

fn owner(cr: &MarekvsCluster) -> Value {
    json!([{"apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster", "name": cr.name_any(),
        "uid": cr.uid(), "controller": true, "blockOwnerDeletion": true}])
}

fn labels() -> Value {
    json!({"app.kubernetes.io/name": "marekvs", "app.kubernetes.io/instance": "demo"})
}

/// Server-side apply with marekvs's own operator's field manager.
async fn apply_old<K>(api: &Api<K>, name: &str, value: Value) -> anyhow::Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(OLD_MANAGER).force(),
        &Patch::Apply(value),
    )
    .await?;
    Ok(())
}

/// The Services, the PDB and the StatefulSet marekvs's own operator made for `cr`.
async fn old_children(env: &TestEnv, cr: &MarekvsCluster) -> anyhow::Result<()> {
    let ns = &env.namespace;
    let headless = "demo-headless";
    let ports = json!([
        {"name": "resp", "port": 6379, "targetPort": 6379, "protocol": "TCP"},
        {"name": "mesh", "port": 7373, "targetPort": 7373, "protocol": "TCP"},
        {"name": "gossip", "port": 7946, "targetPort": 7946, "protocol": "UDP"},
        {"name": "metrics", "port": 9121, "targetPort": 9121, "protocol": "TCP"},
    ]);
    let meta = |name: &str| json!({"name": name, "namespace": ns, "labels": labels(), "ownerReferences": owner(cr)});
    let services: Api<Service> = env.api();
    apply_old(&services, headless, json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(headless),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": labels(), "ports": ports}})).await?;
    apply_old(&services, "demo", json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("demo"),
        "spec": {"selector": labels(), "ports": [{"name": "resp", "port": 6379, "targetPort": 6379, "protocol": "TCP"}]}})).await?;
    let pdbs: Api<PodDisruptionBudget> = env.api();
    apply_old(
        &pdbs,
        "demo",
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta("demo"),
        "spec": {"minAvailable": 2, "selector": {"matchLabels": labels()}}}),
    )
    .await?;
    let http = |path: &str| json!({"path": path, "port": 9121});
    let container = json!({
        "name": "marekvs", "image": image(),
        "env": [
            {"name": "MAREKVS_SEEDS", "value": format!("{headless}.{ns}.svc.cluster.local:7946")},
            {"name": "MAREKVS_REPLICAS_N", "value": "2"},
            {"name": "MAREKVS_ADVERTISE_IP", "value": "auto"},
            {"name": "MAREKVS_DATA_DIR", "value": "/data"},
            {"name": "RUST_LOG", "value": "info"},
        ],
        "ports": [
            {"name": "resp", "containerPort": 6379}, {"name": "mesh", "containerPort": 7373},
            {"name": "gossip", "containerPort": 7946, "protocol": "UDP"},
            {"name": "metrics", "containerPort": 9121},
        ],
        "readinessProbe": {"httpGet": http("/ready"), "periodSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {"httpGet": http("/alive"), "periodSeconds": 10, "failureThreshold": 6},
        "lifecycle": {"preStop": {"httpGet": http("/drain")}},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    });
    let sts: Api<StatefulSet> = env.api();
    apply_old(&sts, "demo", json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("demo"),
        "spec": {
            "serviceName": headless, "replicas": 4, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels()},
            "template": {"metadata": {"labels": labels()}, "spec": {
                "terminationGracePeriodSeconds": 60, "containers": [container]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": labels()},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        }})).await
}

/// Each member's pod: (uid, container startedAt, restartCount).
async fn pod_lives(pods: &Api<Pod>) -> anyhow::Result<BTreeMap<String, (String, String, i32)>> {
    let mut lives = BTreeMap::new();
    for m in MEMBERS {
        let p = pods.get(m).await?;
        let started = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        lives.insert(
            m.to_string(),
            (p.uid().unwrap_or_default(), started, restart_count(&p)),
        );
    }
    Ok(lives)
}

fn controller_uid(meta: &kube::api::ObjectMeta) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// The status as stored, without this operator's types.
async fn raw_status(env: &TestEnv) -> anyhow::Result<Value> {
    let ar = ApiResource::erase::<MarekvsCluster>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.namespace, &ar);
    Ok(api.get("demo").await?.data["status"].clone())
}

/// marekvs's own operator ran 4 members in a StatefulSet; keys are written through them; the
/// documented migration (orphan the StatefulSet's pods, label them and their volumes, opt in
/// with `marekvs.io/adopt`, pause, start this operator) adopts every member: each pod keeps
/// its uid, its container start and its restart count; each volume is stamped; the old status
/// is read and overwritten. Then resuming rolls the adopted members behind the hand-off gate,
/// a scale-down by this operator removes one, and every key reads back.
async fn a_statefulset_left_by_marekvs_own_operator_is_adopted_without_a_restart_or_a_lost_key()
-> anyhow::Result<()> {
    let env = TestEnv::new("migr").await?;
    let api: Api<MarekvsCluster> = env.api();
    // The object, and the status marekvs's own operator wrote through the status subresource.
    with_old_status_schema(&env, || async {
        api.create(&Default::default(), &cluster("demo", old_spec())?)
            .await?;
        let body = json!({"apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
            "status": old_status()});
        // The API server takes a moment to serve the CRD's new schema: until then the old
        // status is refused ("field not declared in schema").
        wait_until(
            "the old status stored under the replaced schema",
            T,
            || async {
                match api
                    .patch_status(
                        "demo",
                        &PatchParams::apply(OLD_MANAGER).force(),
                        &Patch::Apply(&body),
                    )
                    .await
                {
                    Ok(_) => Ok(Some(())),
                    Err(kube::Error::Api(e)) if e.message.contains("not declared in schema") => {
                        Ok(None)
                    }
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await?;
        Ok(())
    })
    .await?;
    // Served as marekvs's own operator left it, under this operator's CRD: the API server
    // prunes the fields the schema does not know (lastScaleEpoch …) when it reads the object,
    // but not a value of another type, which reaches the operator's watch.
    let stored = raw_status(&env).await?;
    assert_eq!(stored["opsPerSecond"], json!("4231.0"), "{stored}");
    let cr = api.get("demo").await?;
    let uid = cr.uid().context("uid")?;
    old_children(&env, &cr).await?;
    let pods: Api<Pod> = env.api();
    wait_until("the StatefulSet's 4 members Ready", T, || async {
        let ready = pods
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|p| pod_condition(p, "Ready"))
            .count();
        Ok((ready == 4).then_some(()))
    })
    .await?;
    let data = write_keys(&env, &MEMBERS, "demo-0", "migration").await?;

    // docs/migration.md: the old operator is stopped (none runs here); the StatefulSet goes,
    // its pods stay (kubectl delete statefulset demo --cascade=orphan).
    let sts: Api<StatefulSet> = env.api();
    sts.delete("demo", &DeleteParams::orphan()).await?;
    wait_until("the pods orphaned", T, || async {
        let list = pods.list(&Default::default()).await?.items;
        Ok(
            (list.len() == 4 && list.iter().all(|p| controller_uid(&p.metadata).is_none()))
                .then_some(()),
        )
    })
    .await?;
    let before = pod_lives(&pods).await?;
    // kubectl label pod,pvc -l app.kubernetes.io/instance=demo app.kubernetes.io/managed-by=marekvs-operator
    let managed =
        json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "marekvs-operator"}}});
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    for m in MEMBERS {
        pods.patch(m, &PatchParams::default(), &Patch::Merge(&managed))
            .await?;
        pvcs.patch(
            &format!("data-{m}"),
            &PatchParams::default(),
            &Patch::Merge(&managed),
        )
        .await?;
    }
    // kubectl annotate mkv demo marekvs.io/adopt=statefulset-orphans; kubectl patch … paused
    api.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {"marekvs.io/adopt": "statefulset-orphans"}},
            "spec": {"paused": true},
        })),
    )
    .await?;
    let _op = Operator::start(&env.namespace)?;

    // Every member adopted, every volume stamped, the status this operator's own.
    let adopted = wait_cluster(
        &api,
        "demo",
        "the members adopted, held by the pause",
        T,
        |s| s.instance_names == MEMBERS && s.phase == Some(ClusterPhase::Paused),
    )
    .await?;
    for m in MEMBERS {
        let p = pods.get(m).await?;
        assert_eq!(
            controller_uid(&p.metadata).as_deref(),
            Some(uid.as_str()),
            "{m}"
        );
        // Labelled for client traffic (a label patch, no restart: `pod_lives` below).
        assert_eq!(
            p.labels()
                .get("marekvs.io/client-traffic")
                .map(String::as_str),
            Some("on"),
            "{m}"
        );
    }
    wait_until("every volume stamped with the cluster's uid", T, || async {
        let mut stamped = 0;
        for m in MEMBERS {
            let v = pvcs.get(&format!("data-{m}")).await?;
            stamped += usize::from(v.annotations().get("marekvs.io/cluster-uid") == Some(&uid));
        }
        Ok((stamped == 4).then_some(()))
    })
    .await?;
    let after = pod_lives(&pods).await?;
    assert_eq!(
        before, after,
        "a pod was restarted or replaced by the adoption"
    );
    // The status is this operator's now (its conditions), the string gone.
    let stored = raw_status(&env).await?;
    assert!(!stored["opsPerSecond"].is_string(), "{stored}");
    assert!(
        stored["conditions"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "{stored}"
    );
    assert!(status_of(&adopted).look_alikes.is_empty());
    let reasons = event_reasons(&env.client, &env.namespace, "demo").await?;
    assert!(reasons.iter().any(|r| r == "MemberAdopted"), "{reasons:?}");
    wait_member_events(&env, "MemberAdopted").await?;
    // The old Services and PDB are this operator's now (same names, same field manager).
    let services: Api<Service> = env.api();
    wait_until(
        "the Services and the PDB applied by this operator",
        T,
        || async {
            let applied = |a: &std::collections::BTreeMap<String, String>| {
                a.contains_key("marekvs.io/applied-hash")
            };
            let ok = applied(services.get("demo").await?.annotations())
                && applied(services.get("demo-headless").await?.annotations())
                && applied(
                    env.api::<PodDisruptionBudget>()
                        .get("demo")
                        .await?
                        .annotations(),
                );
            Ok(ok.then_some(()))
        },
    )
    .await?;
    // The client Service selects the members taking client traffic: every adopted one.
    let selector = services.get("demo").await?.spec.and_then(|s| s.selector);
    assert_eq!(
        selector
            .as_ref()
            .and_then(|s| s.get("marekvs.io/client-traffic"))
            .map(String::as_str),
        Some("on"),
        "{selector:?}"
    );
    read_back(&env, &data).await?;

    // Resuming rolls the adopted members onto this operator's pod spec, behind the gate; then
    // a scale-down of this operator's own removes one. Keys written just before, through every
    // member but demo-2, are read back through demo-2, which neither wrote nor read any of
    // them (demo-0 just read the first set back: it holds a copy of each now).
    let rolled_data = write_keys(&env, &MEMBERS, "demo-2", "migration-roll").await?;
    patch_spec(&api, "demo", json!({"paused": false})).await?;
    wait_healthy(&api, "demo", &MEMBERS, Duration::from_secs(600)).await?;
    let rolled = pod_lives(&pods).await?;
    for m in MEMBERS {
        assert_ne!(
            before[m].0, rolled[m].0,
            "{m} was not moved to this operator's pod spec"
        );
        // Still the server's default gossip name: old and new members hear each other.
        assert_eq!(gossip_env(&pods.get(m).await?), None, "{m}");
    }
    let recorded = status_of(&api.get("demo").await?).gossip_cluster;
    assert_eq!(recorded.as_deref(), Some("marekvs"));
    patch_spec(&api, "demo", json!({"nodes": 3})).await?;
    wait_healthy(&api, "demo", &MEMBERS[..3], T).await?;
    read_back(&env, &rolled_data).await?;
    env.cleanup().await
}

/// Wait until a `reason` Event names each member.
async fn wait_member_events(env: &TestEnv, reason: &str) -> anyhow::Result<()> {
    let events: Api<k8s_openapi::api::events::v1::Event> = env.api();
    wait_until(&format!("a {reason} Event for each member"), T, || async {
        let notes: Vec<String> = events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect();
        let named = MEMBERS
            .iter()
            .all(|m| notes.iter().any(|n| n.starts_with(&format!("{m}:"))));
        Ok(named.then_some(()))
    })
    .await
}

/// The example marekvs's own operator ships (autoscale, reclaimPvcs, extraEnv, resources)
/// applies unchanged under this CRD, and reads back as written.
async fn the_example_of_marekvs_own_operator_applies_unchanged() -> anyhow::Result<()> {
    let env = TestEnv::new("oldex").await?;
    let spec = json!({
        "image": "ghcr.io/yannick/marekvs:latest",
        "replicationFactor": 2,
        "storage": {"size": "10Gi"},
        "resources": {"cpu": "1", "memory": "1Gi"},
        "autoscale": {"minNodes": 3, "maxNodes": 8, "targetOpsPerNode": 5000,
            "scaleDownStabilizationSeconds": 300, "scaleUpCooldownSeconds": 60},
        "reclaimPvcs": false,
        "extraEnv": {"RUST_LOG": "info"},
        "hostnameSpreadWhenUnsatisfiable": "ScheduleAnyway",
    });
    let api = create(&env, "demo", spec.clone()).await?;
    let stored = serde_json::to_value(api.get("demo").await?.spec)?;
    // The server may add defaults; every field sent must come back as sent.
    for (field, value) in spec.as_object().context("an object")? {
        let lost = first_not_kept(value, &stored[field], field);
        assert!(lost.is_none(), "spec.{lost:?} was not kept: {stored}");
    }
    env.cleanup().await
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        a_statefulset_left_by_marekvs_own_operator_is_adopted_without_a_restart_or_a_lost_key,
        the_example_of_marekvs_own_operator_applies_unchanged,
    ])
}
