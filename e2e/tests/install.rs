//! The two shipped installs, end to end: the kustomize tree (`deploy/`) and the Helm chart
//! (`deploy/helm/marekvs-operator`) are applied as a user applies them, the podlet runs the
//! Deployment's pods as the operator binary with the manifests' own args, env and
//! ServiceAccount (docs/local-cluster.md), and that operator brings a demo cluster to Healthy,
//! grows and shrinks it across a change of leader, and loses no key.
//!
//! Safe beside the rest of the suite: each install is namespace-scoped to the test's own
//! namespace (the operator runs there, watches only it, and elects through a Lease there), so it
//! never reconciles another test's cluster nor meets the Lease of `e2e/tests/ha.rs` in
//! `marekvs-system`. The cluster-wide defaults (`deploy/` and the chart's `scope: cluster`) are
//! sent to the API server as server-side dry runs only.
//!
//! A real `helm install` of an older chart and a `helm upgrade` to this one carry a change of
//! the CRD, which is cluster-wide: while the old CRD is served, the API server refuses every
//! status write of this operator, whichever namespace its cluster is in. So that test holds
//! [`crd_lock`] exclusively from the moment it changes the CRD until it has put it back, and
//! the other two hold it shared for their whole run (they may run beside each other, never
//! beside that window). hack/run-e2e.py runs this file's tests with no other file's beside them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use marekvs_e2e::harness;
use marekvs_e2e::install::{
    OPERATOR_LABEL, REPO, helm, kubectl, leader, namespaced_kustomization, operator_pods,
    operator_version, run, tool,
};
use marekvs_e2e::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(300);
const CRD: &str = "marekvsclusters.marekvs.io";
/// Where the CRD's status schema lists its fields.
const STATUS_PROPERTIES: &str =
    "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties";

/// Held exclusively while a test changes the cluster-wide CRD (or its ownership); shared by the
/// tests that need the CRD as the harness installed it. Each test runs in a process of its own.
async fn crd_lock(mode: LockMode) -> anyhow::Result<ClusterLock> {
    ClusterLock::take("crd", mode).await
}

/// What both installs must do once applied: two replicas, one leading; the shipped demo
/// cluster Healthy; grown to 4; keys written; the leader's pod deleted (SIGTERM) and a member
/// removed under the next leader; every key read back.
async fn operate_the_demo(env: &TestEnv, label: &str) -> anyhow::Result<String> {
    let pods = operator_pods(env, 2).await?;
    let first = leader(env, &pods).await?;
    eprintln!(
        "{label}: operator pods {:?}, leader {first}",
        pods.iter().map(name_of).collect::<Vec<_>>()
    );

    let api = demo_healthy(env).await?;
    patch_spec(&api, "demo", json!({"nodes": 4})).await?;
    let all = ["demo-0", "demo-1", "demo-2", "demo-3"];
    wait_healthy(&api, "demo", &all, T).await?;
    let data = write_keys(env, &all, "demo-0", label).await?;

    // The leader goes as a rollout or a drain would take it: SIGTERM through its pod. Only
    // once another pod leads is a member removed, so the removal is the next leader's work.
    let operator_pods_api: Api<Pod> = env.api();
    let deleted = std::time::Instant::now();
    operator_pods_api
        .delete(&first, &DeleteParams::default())
        .await?;
    let now = operator_pods(env, 2).await?;
    let next = leader(env, &now).await?;
    assert_ne!(next, first, "the deleted pod still leads");
    eprintln!(
        "{label}: {next} leads {:.1}s after {first} was deleted",
        deleted.elapsed().as_secs_f64()
    );
    patch_spec(
        &api,
        "demo",
        json!({"nodes": 3, "removeMembers": ["demo-1"]}),
    )
    .await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-2", "demo-3"], T).await?;
    eprintln!("{label}: demo-1 removed under {next}");
    read_back(env, &data).await?;
    Ok(next)
}

/// The shipped demo cluster (`deploy/examples/demo.yaml`, on the suite's member image),
/// created in the test's namespace and Healthy with its three members.
async fn demo_healthy(env: &TestEnv) -> anyhow::Result<Api<MarekvsCluster>> {
    let text = std::fs::read_to_string(format!("{REPO}/deploy/examples/demo.yaml"))?;
    let mut demo: Value = serde_yaml_ng::from_str(&text)?;
    demo["spec"]["image"] = json!(image());
    let demo: MarekvsCluster = serde_json::from_value(demo)?;
    let api: Api<MarekvsCluster> = env.api();
    api.create(&PostParams::default(), &demo).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    Ok(api)
}

/// The released image: the operator crate's version, as deploy/ and the chart name it.
fn released_image() -> anyhow::Result<String> {
    Ok(format!(
        "ghcr.io/marekvs/marekvs-operator:{}",
        operator_version()?
    ))
}

async fn the_kustomize_install_runs_the_operator_from_its_manifests() -> anyhow::Result<()> {
    let env = TestEnv::new("install-kustomize").await?;
    // The CRD as the harness installed it, for the whole test (its operator writes status).
    let _crd = crd_lock(LockMode::Shared).await?;
    // The cluster-wide default as shipped: the API server accepts every object of it.
    let deploy = format!("{REPO}/deploy");
    let dry = kubectl(
        &["apply", "-k", &deploy, "--server-side", "--dry-run=server"],
        None,
    )
    .await?;
    for kind in [
        "clusterrole.rbac.authorization.k8s.io/marekvs-operator",
        "deployment.apps/marekvs-operator",
    ] {
        anyhow::ensure!(
            dry.contains(kind),
            "the dry run did not reach {kind}: {dry}"
        );
    }
    let dir = namespaced_kustomization(&env.namespace)?;
    let dir_s = dir.display().to_string();
    let applied = kubectl(&["apply", "-k", &dir_s, "--server-side"], None).await?;
    eprintln!("kustomize install:\n{applied}");
    let deployed: Value = serde_json::from_str(
        &kubectl(
            &[
                "-n",
                &env.namespace,
                "get",
                "deploy/marekvs-operator",
                "-o",
                "json",
            ],
            None,
        )
        .await?,
    )?;
    let container = &deployed["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], json!(released_image()?));
    assert!(
        container["args"]
            .as_array()
            .is_some_and(|a| a.contains(&json!(format!("--namespace={}", env.namespace)))),
        "{container}"
    );
    operate_the_demo(&env, "kustomize").await?;
    let _ = std::fs::remove_dir_all(&dir);
    env.cleanup().await
}

async fn the_helm_install_runs_the_operator_from_its_chart() -> anyhow::Result<()> {
    let env = TestEnv::new("install-helm").await?;
    // The CRD as the harness installed it, for the whole test (its operator writes status).
    let _crd = crd_lock(LockMode::Shared).await?;
    let chart = format!("{REPO}/deploy/helm/marekvs-operator");
    // The chart's cluster-wide default, its CRD template included: accepted by the API server
    // (as `helm template --skip-tests | kubectl apply` sends it: the test hook is Helm's).
    let cluster_wide = helm(&[
        "template",
        "marekvs-operator",
        &chart,
        "--namespace",
        "marekvs-system",
        "--skip-tests",
    ])
    .await?;
    let dry = kubectl(
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&cluster_wide),
    )
    .await?;
    for object in [
        "clusterrolebinding.rbac.authorization.k8s.io/marekvs-operator",
        "customresourcedefinition.apiextensions.k8s.io/marekvsclusters.marekvs.io",
    ] {
        anyhow::ensure!(dry.contains(object), "{object} not in the dry run: {dry}");
    }
    // Watching the test's namespace only, installed there, release `mkv`; the CRD is the
    // harness's (crds.create=false, as for a second release beside the one that owns it).
    let ns = env.namespace.as_str();
    let rendered = helm(&[
        "template",
        "mkv",
        &chart,
        "--namespace",
        ns,
        "--skip-tests",
        "--set",
        "crds.create=false",
        "--set",
        "scope=namespace",
        "--set",
        "logFormat=json",
        // The members' NetworkPolicy, accepted by the API server (this control plane has no
        // network plugin to enforce it, so the demo below runs as without it).
        "--set",
        "networkPolicy.enabled=true",
        // A cluster whose DNS domain is not cluster.local, and a flag of the user's own.
        "--set",
        "clusterDomain=corp.example",
        "--set-json",
        r#"extraArgs=["--member-timeout-ms=2500"]"#,
    ])
    .await?;
    kubectl(
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&rendered),
    )
    .await?;
    let applied = kubectl(&["apply", "--server-side", "-f", "-"], Some(&rendered)).await?;
    eprintln!("helm install:\n{applied}");
    for object in [
        "role.rbac.authorization.k8s.io/mkv-marekvs-operator",
        "deployment.apps/mkv-marekvs-operator",
        "service/mkv-marekvs-operator-metrics",
        "networkpolicy.networking.k8s.io/mkv-marekvs-operator-members",
    ] {
        anyhow::ensure!(applied.contains(object), "{object} not applied: {applied}");
    }
    anyhow::ensure!(
        !applied.contains("customresourcedefinition") && !applied.contains("pod/"),
        "crds.create=false and --skip-tests still sent the CRD or the test pod: {applied}"
    );
    let leader = operate_the_demo(&env, "helm").await?;
    // logFormat=json reached the operator: the leader's output (the podlet's per-pod log,
    // after its own header lines) is JSON objects, one a line.
    let log = format!(
        "{}/{ns}_{leader}_operator.log",
        tool("MAREKVS_E2E_POD_LOGS")?
    );
    let text = std::fs::read_to_string(&log).with_context(|| format!("reading {log}"))?;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("----- marekvs-sim"))
        .collect();
    anyhow::ensure!(!lines.is_empty(), "{log} is empty");
    for line in &lines {
        serde_json::from_str::<Value>(line).with_context(|| format!("{log}: not JSON: {line}"))?;
    }
    eprintln!("helm: {} log lines of {leader}, all JSON", lines.len());
    // clusterDomain reached the operator: the members' gossip seeds name that domain.
    let pods: Api<Pod> = env.api();
    let member = pods.get("demo-0").await?;
    let seeds = member
        .spec
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.env)
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.name == "MAREKVS_SEEDS")
        .and_then(|e| e.value)
        .context("demo-0 has no MAREKVS_SEEDS")?;
    anyhow::ensure!(
        seeds == format!("demo-headless.{ns}.svc.corp.example:7946"),
        "demo-0's seeds: {seeds}"
    );
    let deployment = kubectl(
        &[
            "get",
            "deployment",
            "mkv-marekvs-operator",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ],
        None,
    )
    .await?;
    anyhow::ensure!(
        deployment.contains("--member-timeout-ms=2500"),
        "{deployment}"
    );
    eprintln!("helm: clusterDomain corp.example in demo-0's seeds ({seeds}); extraArgs passed");
    env.cleanup().await
}

/// The chart as it was before `status.lastPassTime`: a copy whose CRD lacks that field.
fn old_chart(ns: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("marekvs-e2e-old-chart-{ns}"));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&Path::new(REPO).join("deploy/helm/marekvs-operator"), &dir)?;
    let file = dir.join("files/marekvs.io_marekvsclusters.yaml");
    let mut crd: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&file)?)?;
    let removed = crd
        .pointer_mut(STATUS_PROPERTIES)
        .and_then(Value::as_object_mut)
        .and_then(|p| p.remove("lastPassTime"));
    anyhow::ensure!(
        removed.is_some(),
        "the chart's CRD has no status.lastPassTime to remove"
    );
    std::fs::write(&file, serde_yaml_ng::to_string(&crd)?)?;
    Ok(dir)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Whether the CRD the API server serves has `status.lastPassTime` in its schema.
async fn served_has_last_pass_time(crds: &Api<CustomResourceDefinition>) -> anyhow::Result<bool> {
    let crd = serde_json::to_value(crds.get(CRD).await?)?;
    Ok(crd
        .pointer(&format!("{STATUS_PROPERTIES}/lastPassTime"))
        .is_some())
}

/// Put the CRD's spec, labels and annotations back as `before` had them (a conflict reads it
/// again).
async fn restore_crd(
    crds: &Api<CustomResourceDefinition>,
    before: &CustomResourceDefinition,
) -> anyhow::Result<()> {
    for _ in 0..5 {
        let mut crd = crds.get(CRD).await?;
        crd.spec = before.spec.clone();
        crd.metadata.labels = before.metadata.labels.clone();
        crd.metadata.annotations = before.metadata.annotations.clone();
        match crds.replace(CRD, &PostParams::default(), &crd).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("the CRD kept changing while it was being restored")
}

/// What `helm test` found: the exit code of the hook pod's `marekvs-operator check` (its first
/// run) and the line it printed.
struct CheckRun {
    code: i32,
    line: String,
}

/// `helm test <release>`: its hook pod (the chart's `templates/tests/check.yaml`) runs the
/// operator image, which the podlet runs as the operator binary. Returns the check's first exit
/// and its line from the pod's log, once Helm's own verdict agrees with it: passed for exit 0,
/// failed otherwise. That verdict needs the pod to reach phase Succeeded or Failed, as the
/// podlet reports a pod whose restartPolicy keeps its exited container down.
async fn helm_test(env: &TestEnv, release: &str) -> anyhow::Result<CheckRun> {
    let ns = env.namespace.clone();
    let pod_name = format!("{release}-marekvs-operator-test");
    let pods: Api<Pod> = env.api();
    // The pod's log is appended to by every pod of that name: this run's output follows.
    let log = format!(
        "{}/{ns}_{pod_name}_check.log",
        tool("MAREKVS_E2E_POD_LOGS")?
    );
    let offset = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    let helm_bin = tool("MAREKVS_E2E_HELM")?;
    let (release_s, ns_s) = (release.to_string(), ns.clone());
    let mut verdict = tokio::spawn(async move {
        run(
            &helm_bin,
            &["test", &release_s, "-n", &ns_s, "--timeout", "150s"],
            None,
        )
        .await
    });
    let mut helm_said = None;
    let deadline = std::time::Instant::now() + T;
    let (code, phase) = loop {
        let pod = pods.get_opt(&pod_name).await?;
        let exited = pod.as_ref().and_then(|p| {
            let status = p.status.clone()?;
            let terminated = status
                .container_statuses?
                .into_iter()
                .find(|c| c.name == "check")
                .and_then(|c| {
                    c.state
                        .and_then(|s| s.terminated)
                        .or(c.last_state.and_then(|s| s.terminated))
                })?;
            Some((terminated.exit_code, status.phase.unwrap_or_default()))
        });
        if let Some(exited) = exited {
            break exited;
        }
        // Helm returned first: a pod that succeeded is deleted at once (hook-succeeded).
        if verdict.is_finished() {
            let said = (&mut verdict).await?;
            anyhow::ensure!(
                said.is_ok(),
                "helm test failed before its pod showed an exit: {said:?}"
            );
            helm_said = Some(said);
            break (0, "Succeeded".to_string());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the helm test pod's check to exit: {:?}",
            pod.as_ref().map(pod_summary)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let text = std::fs::read_to_string(&log).with_context(|| format!("reading {log}"))?;
    let line = text
        .get(offset..)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("ok: ") || l.starts_with("marekvs-operator check: "))
        .with_context(|| format!("{log} has no line of this run's check: {text}"))?
        .to_string();
    eprintln!("helm test {release}: check exited {code}: {line}");
    if phase != "Succeeded" && phase != "Failed" {
        verdict.abort();
        bail!(
            "the helm test pod's check exited {code} but its phase is {phase:?}, so helm test cannot return"
        );
    }
    let said = match helm_said {
        Some(said) => said,
        None => tokio::time::timeout(Duration::from_secs(60), &mut verdict)
            .await
            .context("helm test did not return once its pod had finished")??,
    };
    anyhow::ensure!(
        said.is_ok() == (code == 0),
        "helm test said {said:?} of a check that exited {code}"
    );
    // Gone before the next run: Helm deletes it then too (before-hook-creation), but a stale
    // one must not be read as the next run's.
    match pods.delete(&pod_name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    wait_until("the helm test pod gone", T, || async {
        Ok(pods.get_opt(&pod_name).await?.is_none().then_some(()))
    })
    .await?;
    Ok(CheckRun { code, line })
}

/// A real `helm install` of the chart as it was before `status.lastPassTime`, adopting the CRD
/// that was applied apart (as docs/install.md says): the operator's status writes are refused
/// and `helm test` fails, naming the missing field. `helm upgrade` to this chart brings the
/// field back into the served CRD, the cluster turns Healthy and `helm test` passes; with the
/// operator scaled to nothing it fails on the Lease; `helm uninstall` keeps the CRD and the
/// cluster.
async fn the_helm_upgrade_upgrades_the_crd_and_uninstall_keeps_it() -> anyhow::Result<()> {
    let env = TestEnv::new("install-upgrade").await?;
    let ns = env.namespace.clone();
    let old = old_chart(&ns)?;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd_held = crd_lock(LockMode::Exclusive).await?;
    let before = crds.get(CRD).await?;
    let result = upgrade_and_uninstall(&env, &old, &crds).await;
    let restored = restore_crd(&crds, &before).await;
    drop(crd_held);
    let _ = std::fs::remove_dir_all(&old);
    result?;
    restored.context("restoring the CRD")?;
    env.cleanup().await
}

async fn upgrade_and_uninstall(
    env: &TestEnv,
    old: &Path,
    crds: &Api<CustomResourceDefinition>,
) -> anyhow::Result<()> {
    let ns = env.namespace.as_str();
    let release = "mkvup";
    let chart = format!("{REPO}/deploy/helm/marekvs-operator");
    let old_s = old.display().to_string();
    // The cluster as an install of the old chart left it: its CRD served. (Helm's adoption
    // patches in only what a chart adds, so the harness's CRD is made the old one here.)
    let old_crd: CustomResourceDefinition = serde_yaml_ng::from_str(&std::fs::read_to_string(
        old.join("files/marekvs.io_marekvsclusters.yaml"),
    )?)?;
    for _ in 0..5 {
        let mut crd = crds.get(CRD).await?;
        crd.spec = old_crd.spec.clone();
        match crds.replace(CRD, &PostParams::default(), &crd).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::ensure!(
        !served_has_last_pass_time(crds).await?,
        "the old CRD is not served"
    );
    // Helm adopts a CRD applied apart once it carries the release's ownership (docs/install.md).
    kubectl(
        &[
            "annotate",
            "--overwrite",
            "crd",
            CRD,
            &format!("meta.helm.sh/release-name={release}"),
            &format!("meta.helm.sh/release-namespace={ns}"),
        ],
        None,
    )
    .await?;
    kubectl(
        &[
            "label",
            "--overwrite",
            "crd",
            CRD,
            "app.kubernetes.io/managed-by=Helm",
        ],
        None,
    )
    .await?;
    let installed = helm(&[
        "install",
        release,
        &old_s,
        "-n",
        ns,
        "--set",
        "scope=namespace",
    ])
    .await?;
    eprintln!("helm install (old chart):\n{installed}");
    let pods = operator_pods(env, 2).await?;
    let leading = leader(env, &pods).await?;
    // Under the old CRD the API server refuses the operator's status writes: the gap this
    // upgrade closes.
    let text = std::fs::read_to_string(format!("{REPO}/deploy/examples/demo.yaml"))?;
    let mut demo: Value = serde_yaml_ng::from_str(&text)?;
    demo["spec"]["image"] = json!(image());
    let api: Api<MarekvsCluster> = env.api();
    api.create(&PostParams::default(), &serde_json::from_value(demo)?)
        .await?;
    let log = format!(
        "{}/{ns}_{leading}_operator.log",
        tool("MAREKVS_E2E_POD_LOGS")?
    );
    let refused = wait_until("the old CRD refusing a status write", T, || async {
        let text = std::fs::read_to_string(&log).with_context(|| format!("reading {log}"))?;
        Ok(text
            .lines()
            .find(|l| l.contains(".status.lastPassTime: field not declared in schema"))
            .map(str::to_string))
    })
    .await?;
    eprintln!("old CRD: {leading} logged {refused}");
    // helm test says so.
    let stale = helm_test(env, release).await?;
    anyhow::ensure!(
        stale.code != 0
            && stale
                .line
                .contains("the served MarekvsCluster CRD is older than this operator")
            && stale.line.contains("status.lastPassTime"),
        "helm test under the old CRD: exit {}: {}",
        stale.code,
        stale.line
    );

    let upgraded = helm(&[
        "upgrade",
        release,
        &chart,
        "-n",
        ns,
        "--set",
        "scope=namespace",
    ])
    .await?;
    eprintln!("helm upgrade:\n{upgraded}");
    anyhow::ensure!(
        served_has_last_pass_time(crds).await?,
        "helm upgrade left the CRD without status.lastPassTime"
    );
    let crd = crds.get(CRD).await?;
    let annotations = crd.metadata.annotations.unwrap_or_default();
    anyhow::ensure!(
        annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str)
            == Some(release)
            && annotations
                .get("helm.sh/resource-policy")
                .map(String::as_str)
                == Some("keep"),
        "the upgraded CRD is not the release's, kept: {annotations:?}"
    );
    // The operator's writes go through now (its retry after the refusals): the demo cluster
    // turns Healthy, with the field in its status.
    let demo = wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
    anyhow::ensure!(
        status_of(&demo).last_pass_time.is_some(),
        "Healthy without status.lastPassTime"
    );
    eprintln!(
        "upgraded: demo Healthy, status.lastPassTime {:?}",
        status_of(&demo).last_pass_time
    );
    let passed = helm_test(env, release).await?;
    anyhow::ensure!(
        passed.code == 0
            && passed
                .line
                .contains(&format!("MarekvsClusters are served in namespace {ns}"))
            && passed
                .line
                .contains("with every field of this operator's CRD")
            && passed
                .line
                .contains(&format!("the Lease {ns}/marekvs-operator is held by")),
        "helm test of a working install: exit {}: {}",
        passed.code,
        passed.line
    );

    // helm test of an install that does not work: the operator scaled to nothing, its Lease
    // given up.
    kubectl(
        &[
            "-n",
            ns,
            "scale",
            &format!("deployment/{release}-marekvs-operator"),
            "--replicas=0",
        ],
        None,
    )
    .await?;
    let operator_pods_api: Api<Pod> = env.api();
    wait_until("the operator pods gone", T, || async {
        let left = operator_pods_api
            .list(&ListParams::default().labels(OPERATOR_LABEL))
            .await?
            .items;
        Ok(left.is_empty().then_some(()))
    })
    .await?;
    let failed = helm_test(env, release).await?;
    anyhow::ensure!(
        failed.code != 0
            && failed.line.starts_with("marekvs-operator check: ")
            && failed
                .line
                .contains(&format!("the Lease {ns}/marekvs-operator")),
        "helm test of a stopped operator: exit {}: {}",
        failed.code,
        failed.line
    );

    let uninstalled = helm(&["uninstall", release, "-n", ns]).await?;
    eprintln!("helm uninstall:\n{uninstalled}");
    // Kept: the CRD, and with it every cluster.
    let crd = crds.get_opt(CRD).await?;
    anyhow::ensure!(
        crd.as_ref()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "helm uninstall deleted the CRD"
    );
    anyhow::ensure!(
        api.get_opt("demo").await?.is_some(),
        "the cluster went with the release"
    );
    anyhow::ensure!(
        operator_pods_api
            .list(&ListParams::default().labels(OPERATOR_LABEL))
            .await?
            .items
            .is_empty(),
        "operator pods left after helm uninstall"
    );
    eprintln!("uninstalled: the CRD and demo kept");
    Ok(())
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        the_kustomize_install_runs_the_operator_from_its_manifests needs [Installs],
        the_helm_install_runs_the_operator_from_its_chart needs [Installs],
        the_helm_upgrade_upgrades_the_crd_and_uninstall_keeps_it needs [Installs],
    ])
}
