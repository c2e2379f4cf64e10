//! The shipped installs as a user runs them: kubectl and helm (the binaries hack/test-e2e.sh
//! names), the namespaced kustomize install into a test's own namespace, and the operator pods
//! the podlet runs from it (`Need::Installs`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tokio::io::AsyncWriteExt as _;

use crate::{TestEnv, http, name_of, pod_condition, pod_ip, wait_until};

const T: Duration = Duration::from_secs(300);
/// The repository (for `deploy/`).
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The operator pods' label, in both installs.
pub const OPERATOR_LABEL: &str = "app.kubernetes.io/name=marekvs-operator";

/// The value of `var`, which hack/test-e2e.sh sets.
pub fn tool(var: &str) -> anyhow::Result<String> {
    std::env::var(var).with_context(|| format!("{var} is not set (hack/test-e2e.sh sets it)"))
}

/// Run `program args…` (stdin from `input`); its stdout, or an error with its stderr.
pub async fn run(program: &str, args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
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

pub async fn kubectl(args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    run(&tool("MAREKVS_E2E_KUBECTL")?, args, input).await
}

pub async fn helm(args: &[&str]) -> anyhow::Result<String> {
    run(&tool("MAREKVS_E2E_HELM")?, args, None).await
}

/// The operator pods of the install, once `want` of them run Ready on their pod IPs and
/// each serves its metrics there (the listener the podlet moved from 0.0.0.0).
pub async fn operator_pods(env: &TestEnv, want: usize) -> anyhow::Result<Vec<Pod>> {
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
                ready.iter().map(crate::pod_summary).collect::<Vec<_>>()
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
pub async fn leader(env: &TestEnv, pods: &[Pod]) -> anyhow::Result<String> {
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

/// A kustomization of the test's own over the shipped namespaced overlay, as a user installs
/// into their namespace: everything in `ns`, the overlay's watched namespace `marekvs` replaced
/// by `ns` (the `test` op fails if the overlay's args move), and the overlay's Namespace
/// `marekvs-system` left out (the test's namespace exists). Kustomize refuses absolute paths,
/// so it lives under the repository's `.state/`.
pub fn namespaced_kustomization(ns: &str) -> anyhow::Result<PathBuf> {
    let dir = Path::new(REPO).join(".state/e2e-install").join(ns);
    kustomization_over(&dir, "../../../deploy/overlays/namespaced", ns, "")
}

/// As [`namespaced_kustomization`], written to `dir`, over the namespaced overlay at `overlay`
/// (relative to `dir`), with `more` (e.g. an `images:` block) added.
pub fn kustomization_over(
    dir: &Path,
    overlay: &str,
    ns: &str,
    more: &str,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let text = format!(
        r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {ns}
resources:
  - {overlay}
{more}patches:
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
    Ok(dir.to_path_buf())
}

/// The operator crate's version: the image tag deploy/ and the chart name.
pub fn operator_version() -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(format!("{REPO}/crates/controller/Cargo.toml"))?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(String::from)
        .context("no version in crates/controller/Cargo.toml")
}
