//! The upgrade path: the operator as it stood at the commit `e2e/upgrade-from.env` pins (its
//! binary and its `deploy/` manifests, built by hack/build-upgrade-from.sh) is installed as a
//! user installs it, runs a cluster that holds keys, and is upgraded by applying this tree's
//! manifests over it. Checked against what CHANGELOG.md promises: the new CRD is served (the
//! old one would prune the new status fields), the new operator leads and records its version,
//! no member rolls (the pod template hash has not moved since the pinned commit), and every key
//! is read back.
//!
//! The CRD is cluster-wide: this file is its own test binary, so no other test runs while the
//! older CRD is served, and the current one is applied again however the test ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use marekvs_e2e::install::{
    OPERATOR_LABEL, REPO, kubectl, kustomization_over, leader, namespaced_kustomization,
    operator_version, tool,
};
use marekvs_e2e::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(300);
/// The tag the podlet runs as the older build (hack/test-e2e.sh).
const OLD_TAG: &str = "upgrade-from";
const PINNED: &str = include_str!("../upgrade-from.env");

/// The pinned commit, from the file hack/build-upgrade-from.sh builds it from.
fn pinned_commit() -> anyhow::Result<&'static str> {
    PINNED
        .lines()
        .find_map(|l| l.strip_prefix("UPGRADE_FROM_COMMIT="))
        .context("no UPGRADE_FROM_COMMIT in e2e/upgrade-from.env")
}

/// A kustomization over the older tree's namespaced overlay, as `namespaced_kustomization`
/// makes one over this tree's, with the image tagged for the older build.
fn old_kustomization(old: &Path, ns: &str) -> anyhow::Result<PathBuf> {
    let images =
        format!("images:\n  - name: ghcr.io/marekvs/marekvs-operator\n    newTag: {OLD_TAG}\n");
    kustomization_over(
        &old.join(format!("install-{ns}")),
        "../deploy/overlays/namespaced",
        ns,
        &images,
    )
}

/// Whether the served CRD's status schema has `field`.
async fn crd_status_has(field: &str) -> anyhow::Result<bool> {
    let crd: Value = serde_json::from_str(
        &kubectl(
            &["get", "crd", "marekvsclusters.marekvs.io", "-o", "json"],
            None,
        )
        .await?,
    )?;
    let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    Ok(status["properties"].get(field).is_some())
}

/// The operator pods once exactly two run Ready with image tag `tag` and none with another.
async fn operator_pods_tagged(env: &TestEnv, tag: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = env.api();
    wait_until(&format!("two operator pods of :{tag}"), T, || async {
        let all = pods
            .list(&ListParams::default().labels(OPERATOR_LABEL))
            .await?
            .items;
        let image = |p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default()
        };
        let others: Vec<String> = all
            .iter()
            .filter(|p| !image(p).ends_with(&format!(":{tag}")))
            .map(pod_summary)
            .collect();
        let ready: Vec<Pod> = all
            .iter()
            .filter(|p| {
                image(p).ends_with(&format!(":{tag}"))
                    && p.metadata.deletion_timestamp.is_none()
                    && pod_condition(p, "Ready")
            })
            .cloned()
            .collect();
        if ready.len() != 2 || !others.is_empty() {
            return Err(anyhow!(
                "{} ready of :{tag}; others: {others:?}",
                ready.len()
            ));
        }
        Ok(Some(ready))
    })
    .await
}

/// Each member pod's uid and restart count.
async fn member_pods(
    env: &TestEnv,
    members: &[&str],
) -> anyhow::Result<BTreeMap<String, (String, i32)>> {
    let pods: Api<Pod> = env.api();
    let mut out = BTreeMap::new();
    for m in members {
        let p = pods.get(m).await?;
        out.insert(
            m.to_string(),
            (
                p.metadata.uid.clone().unwrap_or_default(),
                restart_count(&p),
            ),
        );
    }
    Ok(out)
}

async fn upgrade(env: &TestEnv, old: &Path) -> anyhow::Result<()> {
    let ns = env.namespace.as_str();
    let built = std::fs::read_to_string(old.join("COMMIT"))?;
    ensure!(
        built.trim() == pinned_commit()?,
        "{} holds {}, not the pinned {}",
        old.display(),
        built.trim(),
        pinned_commit()?
    );
    // The older install, CRD included, as a user applied it then.
    let dir = old_kustomization(old, ns)?.display().to_string();
    kubectl(
        &["apply", "-k", &dir, "--server-side", "--force-conflicts"],
        None,
    )
    .await?;
    ensure!(
        !crd_status_has("lastPassTime").await?,
        "the older CRD is not served: it has status.lastPassTime"
    );
    let pods = operator_pods_tagged(env, OLD_TAG).await?;
    let old_leader = leader(env, &pods).await?;
    let api = create(env, "demo", spec(3)).await?;
    let members = ["demo-0", "demo-1", "demo-2"];
    let before = wait_healthy(&api, "demo", &members, T).await?;
    let recorded = before
        .status
        .as_ref()
        .and_then(|s| s.operator_version.clone());
    ensure!(
        recorded.is_none(),
        "the older operator recorded a version: {recorded:?}"
    );
    let data = write_keys(env, &members, "demo-0", "upgrade").await?;
    let pods_before = member_pods(env, &members).await?;
    eprintln!(
        "upgrade: {old_leader} (built at {}) leads; demo Healthy; {} keys written",
        &pinned_commit()?[..7],
        data.len()
    );

    // The upgrade: this tree's manifests applied over the older ones.
    let dir = namespaced_kustomization(ns)?.display().to_string();
    kubectl(
        &["apply", "-k", &dir, "--server-side", "--force-conflicts"],
        None,
    )
    .await?;
    ensure!(
        crd_status_has("lastPassTime").await? && crd_status_has("operatorVersion").await?,
        "the upgraded CRD lacks the new status fields"
    );
    let version = operator_version()?;
    let pods = operator_pods_tagged(env, &version).await?;
    let new_leader = leader(env, &pods).await?;
    // The new operator's passes are recorded, and kept: the CRD no longer prunes them.
    let after = wait_cluster(
        &api,
        "demo",
        "a pass recorded by the new operator",
        T,
        |s| s.operator_version.as_deref() == Some(version.as_str()) && s.last_pass_time.is_some(),
    )
    .await?;
    let first_pass = after
        .status
        .and_then(|s| s.last_pass_time)
        .context("no lastPassTime")?;
    // Long enough for a roll to begin had the new operator wanted one: a later pass.
    wait_cluster(&api, "demo", "a second pass by the new operator", T, |s| {
        s.last_pass_time
            .as_ref()
            .is_some_and(|t| t.0 > first_pass.0)
    })
    .await?;
    let healthy = wait_healthy(&api, "demo", &members, T).await?;
    let pods_after = member_pods(env, &members).await?;
    let rolled: Vec<&String> = pods_before
        .iter()
        .filter(|(m, before)| pods_after.get(*m) != Some(before))
        .map(|(m, _)| m)
        .collect();
    ensure!(
        rolled.is_empty(),
        "members rolled by the upgrade, which CHANGELOG.md promises not: {rolled:?} \
         (before {pods_before:?}, after {pods_after:?}); rollout: {:?}",
        healthy.status.and_then(|s| s.rollout)
    );
    read_back(env, &data).await?;
    eprintln!(
        "upgrade: {new_leader} ({version}) leads; CRD has lastPassTime and operatorVersion; \
         0 of {} members rolled; every key read back",
        members.len()
    );
    Ok(())
}

async fn an_upgrade_from_the_pinned_commit_keeps_members_and_keys() -> anyhow::Result<()> {
    let old = PathBuf::from(tool("MAREKVS_E2E_UPGRADE_FROM")?);
    let env = TestEnv::new("upgrade").await?;
    let result = upgrade(&env, &old).await;
    // However it ended, this tree's CRD is served again for whatever runs next.
    let crd = format!("{REPO}/deploy/crd/marekvs.io_marekvsclusters.yaml");
    kubectl(
        &["apply", "--server-side", "--force-conflicts", "-f", &crd],
        None,
    )
    .await?;
    result?;
    env.cleanup().await
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        an_upgrade_from_the_pinned_commit_keeps_members_and_keys needs [Installs, UpgradeFrom],
    ])
}
