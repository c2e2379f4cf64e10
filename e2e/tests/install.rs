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

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use marekvs_e2e::harness;
use marekvs_e2e::*;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

const T: Duration = Duration::from_secs(300);
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The operator pods' label, in both installs.
const OPERATOR_LABEL: &str = "app.kubernetes.io/name=marekvs-operator";

fn tool(var: &str) -> anyhow::Result<String> {
    std::env::var(var).with_context(|| format!("{var} is not set (hack/test-e2e.sh sets it)"))
}

/// Run `program args…` (stdin from `input`); its stdout, or an error with its stderr.
async fn run(program: &str, args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    if let Some(text) = input {
        stdin.write_all(text.as_bytes()).await?;
    }
    drop(stdin);
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn kubectl(args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    run(&tool("MAREKVS_E2E_KUBECTL")?, args, input).await
}

async fn helm(args: &[&str]) -> anyhow::Result<String> {
    run(&tool("MAREKVS_E2E_HELM")?, args, None).await
}

/// The operator pods of the install, once `want` of them run Ready on their pod IPs and
/// each serves its metrics there (the listener the podlet moved from 0.0.0.0).
async fn operator_pods(env: &TestEnv, want: usize) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = env.api();
    wait_until("the operator pods ready", T, || async {
        let all = pods
            .list(&ListParams::default().labels(OPERATOR_LABEL))
            .await?;
        let ready: Vec<Pod> = all
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_condition(p, "Ready"))
            .collect();
        if ready.len() != want {
            return Err(anyhow!(
                "{} of {want} ready: {:?}",
                ready.len(),
                ready.iter().map(pod_summary).collect::<Vec<_>>()
            ));
        }
        for p in &ready {
            let ip = pod_ip(p).context("no pod IP")?;
            let metrics = http()
                .get(format!("http://{ip}:8080/metrics"))
                .send()
                .await?
                .text()
                .await?;
            anyhow::ensure!(
                metrics.contains("marekvs_operator"),
                "{ip}:8080/metrics has no operator metric"
            );
        }
        Ok(Some(ready))
    })
    .await
}

/// The holder of the Lease `marekvs-operator` in the test's namespace, once it is one of
/// `pods` (its identity is POD_NAME, from the downward API).
async fn leader(env: &TestEnv, pods: &[Pod]) -> anyhow::Result<String> {
    let leases: Api<Lease> = env.api();
    let names: Vec<String> = pods.iter().map(name_of).collect();
    wait_until("a leader among the operator pods", T, || async {
        let holder = leases
            .get_opt("marekvs-operator")
            .await?
            .and_then(|l| l.spec?.holder_identity);
        match holder {
            Some(h) if names.contains(&h) => Ok(Some(h)),
            other => Err(anyhow!("holder {other:?}, pods {names:?}")),
        }
    })
    .await
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

    let text = std::fs::read_to_string(format!("{REPO}/deploy/examples/demo.yaml"))?;
    let mut demo: Value = serde_yaml_ng::from_str(&text)?;
    demo["spec"]["image"] = json!(image());
    let demo: MarekvsCluster = serde_json::from_value(demo)?;
    let api: Api<MarekvsCluster> = env.api();
    api.create(&PostParams::default(), &demo).await?;
    wait_healthy(&api, "demo", &["demo-0", "demo-1", "demo-2"], T).await?;
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

/// The released image: the operator crate's version, as deploy/ and the chart name it.
fn released_image() -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(format!("{REPO}/crates/controller/Cargo.toml"))?;
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .context("no version in crates/controller/Cargo.toml")?;
    Ok(format!("ghcr.io/marekvs/marekvs-operator:{version}"))
}

/// A kustomization of the test's own over the shipped namespaced overlay, as a user installs
/// into their namespace: everything in `ns`, the overlay's watched namespace `marekvs` replaced
/// by `ns` (the `test` op fails if the overlay's args move), and the overlay's Namespace
/// `marekvs-system` left out (the test's namespace exists). Kustomize refuses absolute paths,
/// so it lives under the repository's `.state/`.
fn namespaced_kustomization(ns: &str) -> anyhow::Result<PathBuf> {
    let dir = Path::new(REPO).join(".state/e2e-install").join(ns);
    std::fs::create_dir_all(&dir)?;
    let text = format!(
        r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {ns}
resources:
  - ../../../deploy/overlays/namespaced
patches:
  - target: {{kind: Namespace, name: marekvs-system}}
    patch: |-
      $patch: delete
      apiVersion: v1
      kind: Namespace
      metadata:
        name: marekvs-system
  - target: {{group: apps, kind: Deployment, name: marekvs-operator}}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/args/2
        value: --namespace=marekvs
      - op: replace
        path: /spec/template/spec/containers/0/args/2
        value: --namespace={ns}
"#
    );
    std::fs::write(dir.join("kustomization.yaml"), text)?;
    Ok(dir)
}

async fn the_kustomize_install_runs_the_operator_from_its_manifests() -> anyhow::Result<()> {
    let env = TestEnv::new("install-kustomize").await?;
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
    let chart = format!("{REPO}/deploy/helm/marekvs-operator");
    // The chart's cluster-wide default, CRD included: accepted by the API server.
    let cluster_wide = helm(&[
        "template",
        "marekvs-operator",
        &chart,
        "--namespace",
        "marekvs-system",
        "--include-crds",
    ])
    .await?;
    let dry = kubectl(
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&cluster_wide),
    )
    .await?;
    anyhow::ensure!(
        dry.contains("clusterrolebinding.rbac.authorization.k8s.io/marekvs-operator"),
        "{dry}"
    );
    // Watching the test's namespace only, installed there, release `mkv`.
    let ns = env.namespace.as_str();
    let rendered = helm(&[
        "template",
        "mkv",
        &chart,
        "--namespace",
        ns,
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

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        the_kustomize_install_runs_the_operator_from_its_manifests needs [Installs],
        the_helm_install_runs_the_operator_from_its_chart needs [Installs],
    ])
}
