//! `kubectl mkv` end to end: the plugin binary against the local control plane and a real
//! operator. Every command that disrupts a member runs between a write of keys over RESP and
//! a read of every one back.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use marekvs_api::{BlockReason, ClusterPhase, MarekvsCluster, MemberPhase, RolloutReason};
use marekvs_e2e::*;
use serde_json::json;

const T: Duration = Duration::from_secs(120);

/// What one run of the plugin said.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// `kubectl-mkv -n <ns> <args>`, with the suite's KUBECONFIG.
async fn mkv(env: &TestEnv, args: &[&str]) -> anyhow::Result<Ran> {
    let out = tokio::process::Command::new(plugin_bin())
        .arg("-n")
        .arg(&env.namespace)
        .args(args)
        .output()
        .await
        .with_context(|| format!("running {}", plugin_bin().display()))?;
    Ok(Ran {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A command that must succeed; its one line.
async fn done(env: &TestEnv, args: &[&str]) -> anyhow::Result<String> {
    let r = mkv(env, args).await?;
    if !r.ok {
        bail!("kubectl mkv {args:?} failed: {}", r.stderr);
    }
    Ok(r.stdout)
}

/// A command that must be refused, with `why` in its message; the cluster's spec unchanged.
async fn refused(
    env: &TestEnv,
    api: &Api<MarekvsCluster>,
    args: &[&str],
    why: &str,
) -> anyhow::Result<()> {
    let before = api.get("demo").await?.spec;
    let r = mkv(env, args).await?;
    assert!(!r.ok, "kubectl mkv {args:?} was not refused: {}", r.stdout);
    assert!(
        r.stderr.contains("refused: ") && r.stderr.contains(why),
        "kubectl mkv {args:?}: {}",
        r.stderr
    );
    assert_eq!(
        api.get("demo").await?.spec,
        before,
        "{args:?} changed the spec"
    );
    Ok(())
}

/// The member names in the first column of `status`'s table.
fn members_listed(status: &str) -> Vec<String> {
    status
        .lines()
        .skip_while(|l| !l.starts_with("NAME "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

async fn kubectl_mkv_status_lists_every_member_and_remove_removes_exactly_the_named_one()
-> anyhow::Result<()> {
    let env = TestEnv::new("mkv-remove").await?;
    let _op = Operator::start(&env.namespace)?;
    let api = create(&env, "demo", spec(4)).await?;
    let all = ["demo-0", "demo-1", "demo-2", "demo-3"];
    wait_healthy(&api, "demo", &all, T).await?;
    let status = done(&env, &["status", "demo"]).await?;
    assert!(
        status.starts_with("demo: Healthy, 4/4 ready (spec.nodes 4)"),
        "{status}"
    );
    assert_eq!(members_listed(&status), all, "{status}");
    let json: serde_json::Value =
        serde_json::from_str(&done(&env, &["status", "demo", "-o", "json"]).await?)?;
    assert_eq!(json["instanceNames"], json!(all));
    // How fresh it is: a pass recorded moments ago, by this operator, on the latest spec.
    let freshness = status.lines().nth(1).unwrap_or_default();
    let version = env!("CARGO_PKG_VERSION");
    let generation = api
        .get("demo")
        .await?
        .metadata
        .generation
        .unwrap_or_default();
    assert!(
        freshness.starts_with("  as of a pass ")
            && freshness.ends_with(&format!(
                "s ago by operator {version}, spec generation {generation}"
            )),
        "{status}"
    );
    let plan = done(&env, &["plan", "demo"]).await?;
    assert!(plan.starts_with("nothing to do: 4 members"), "{plan}");
    let plan: serde_json::Value =
        serde_yaml_ng::from_str(&done(&env, &["plan", "demo", "-o", "yaml"]).await?)?;
    assert_eq!(plan["cluster"], "demo");
    assert!(
        plan["statements"][0]
            .as_str()
            .is_some_and(|s| s.starts_with("nothing to do: 4 members")),
        "{plan}"
    );
    let versions = mkv(&env, &["version"]).await?;
    assert!(versions.ok, "{}", versions.stderr);
    assert_eq!(
        versions.stdout,
        format!(
            "kubectl-mkv {version}\noperator {version}: the last pass over demo in namespace {}\n",
            env.namespace
        )
    );
    assert!(!versions.stderr.contains("warning"), "{}", versions.stderr);
    let clusters = done(&env, &["__complete", "status", "de"]).await?;
    assert_eq!(clusters, "demo\n:4\n");
    let members = done(&env, &["__complete", "remove", "demo", ""]).await?;
    assert_eq!(members, "demo-0\ndemo-1\ndemo-2\ndemo-3\n:4\n");
    // Through kubectl itself, as a plugin on PATH, when the suite says where kubectl is.
    if let Some(kubectl) = std::env::var_os("MAREKVS_E2E_KUBECTL") {
        let dir = plugin_bin().parent().unwrap().to_path_buf();
        let path = std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))?;
        let out = tokio::process::Command::new(kubectl)
            .args(["mkv", "status", "demo", "-n", &env.namespace])
            .env("PATH", &path)
            .output()
            .await?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(members_listed(&String::from_utf8_lossy(&out.stdout)), all);
        eprintln!("kubectl mkv status: found on PATH by kubectl");
        // kubectl's own completion of the plugin: it runs kubectl_complete-mkv from PATH.
        let shim_dir = std::env::temp_dir().join(format!("mkv-complete-{}", env.namespace));
        std::fs::create_dir_all(&shim_dir)?;
        let shim = shim_dir.join("kubectl_complete-mkv");
        std::fs::write(&shim, "#!/bin/sh\nexec kubectl-mkv __complete \"$@\"\n")?;
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755))?;
        let path = std::env::join_paths(
            std::iter::once(shim_dir.clone()).chain(std::env::split_paths(&path)),
        )?;
        let out = tokio::process::Command::new(std::env::var_os("MAREKVS_E2E_KUBECTL").unwrap())
            .args([
                "__complete",
                "mkv",
                "-n",
                &env.namespace,
                "remove",
                "demo",
                "demo-",
            ])
            .env("PATH", path)
            .output()
            .await?;
        let completed = String::from_utf8_lossy(&out.stdout);
        assert!(
            completed.starts_with("demo-0\ndemo-1\ndemo-2\ndemo-3\n:4"),
            "kubectl __complete mkv: {completed} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::remove_dir_all(&shim_dir)?;
        eprintln!("kubectl __complete mkv: completed through kubectl_complete-mkv");
    } else {
        eprintln!("MAREKVS_E2E_KUBECTL is unset: plugin discovery through kubectl not checked");
    }

    refused(
        &env,
        &api,
        &["remove", "demo", "demo-9"],
        "demo-9 is not a member of demo",
    )
    .await?;
    // A patch made from a copy read before someone else's change is refused by the API server.
    let stale = api.get("demo").await?;
    patch_spec(&api, "demo", json!({"scaleDown": {"settleSeconds": 3}})).await?;
    let e = kubectl_mkv::edit::remove(&stale, "demo-1").map_err(anyhow::Error::msg)?;
    match api
        .patch("demo", &PatchParams::default(), &Patch::Merge(&e.patch))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        other => bail!("a stale removal was not refused: {other:?}"),
    }
    assert_eq!(api.get("demo").await?.spec.nodes, 4);

    let data = write_keys(&env, &all, "demo-0", "mkv-remove").await?;
    let out = done(&env, &["remove", "demo", "demo-1"]).await?;
    assert!(
        out.starts_with("demo: removing demo-1 (spec.nodes 4 → 3"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    // One at a time: a second removal is refused while this one is under way.
    refused(&env, &api, &["remove", "demo", "demo-2"], "wait until").await?;
    let survivors = ["demo-0", "demo-2", "demo-3"];
    let c = wait_healthy(&api, "demo", &survivors, T).await?;
    assert_eq!(c.spec.remove_members, ["demo-1"]);
    let status = done(&env, &["status", "demo"]).await?;
    assert_eq!(members_listed(&status), survivors, "{status}");
    // At replicationFactor + 1 = 3: no further removal.
    refused(
        &env,
        &api,
        &["remove", "demo", "demo-3"],
        "below replicationFactor + 1 = 3",
    )
    .await?;
    read_back(&env, &data).await?;
    env.cleanup().await
}

async fn pod_uid(env: &TestEnv, name: &str) -> anyhow::Result<Option<String>> {
    Ok(env
        .api::<Pod>()
        .get_opt(name)
        .await?
        .and_then(|p| p.metadata.uid))
}

async fn kubectl_mkv_replace_restarts_on_the_same_volume_or_a_fresh_one_behind_the_gate()
-> anyhow::Result<()> {
    let env = TestEnv::new("mkv-replace").await?;
    let _op = Operator::start(&env.namespace)?;
    let api = create(&env, "demo", spec(3)).await?;
    let all = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &all, T).await?;
    let volume = pvc_uid(&env, "data-demo-1").await?;
    let first_pod = pod_uid(&env, "demo-1").await?;
    // Written through demo-1 just before: a raw restart or delete would lose what it holds.
    let data = write_keys(&env, &["demo-1"], "demo-0", "mkv-replace").await?;

    refused(
        &env,
        &api,
        &["replace", "demo", "demo-7"],
        "demo-7 is not a member",
    )
    .await?;
    // Paused: the restart asked for is held, and the cluster says so.
    done(&env, &["pause", "demo"]).await?;
    assert!(api.get("demo").await?.spec.paused);
    let out = done(&env, &["replace", "demo", "demo-1"]).await?;
    assert!(out.contains("held while paused"), "{out}");
    let c = wait_cluster(&api, "demo", "the restart held", T, |s| {
        s.phase == Some(ClusterPhase::Paused) && s.block_reason == Some(BlockReason::Paused)
    })
    .await?;
    assert!(status_of(&c).rollout.is_none());
    assert_eq!(pod_uid(&env, "demo-1").await?, first_pod);
    done(&env, &["resume", "demo"]).await?;
    assert!(!api.get("demo").await?.spec.paused);

    // Restart: drained, gated, its pod re-created on the same volume.
    wait_cluster(&api, "demo", "the restart recorded", T, |s| {
        s.rollout
            .as_ref()
            .is_some_and(|r| r.member == "demo-1" && r.reason == RolloutReason::RestartRequested)
    })
    .await?;
    let plan = done(&env, &["plan", "demo"]).await?;
    assert!(
        plan.contains("restarting demo-1 on its own volume") || plan.starts_with("nothing to do"),
        "{plan}"
    );
    wait_until("a new pod for demo-1", T, || async {
        let now = pod_uid(&env, "demo-1").await?;
        Ok((now.is_some() && now != first_pod).then_some(()))
    })
    .await?;
    wait_healthy(&api, "demo", &all, T).await?;
    assert_eq!(
        pvc_uid(&env, "data-demo-1").await?,
        volume,
        "the same volume"
    );
    wait_events(
        &env.client,
        &env.namespace,
        "demo",
        &["RestartStarted", "MemberRestarted"],
    )
    .await?;
    read_back(&env, &data).await?;

    // A fresh volume: the existing safe replacement.
    let data = write_keys(&env, &["demo-1"], "demo-0", "mkv-fresh").await?;
    let out = done(&env, &["replace", "demo", "demo-1", "--fresh-volume"]).await?;
    assert!(out.contains("marekvs.io/replace-volume=true"), "{out}");
    wait_until("demo-1 on a fresh volume", T, || async {
        Ok((pvc_uid(&env, "data-demo-1").await? != volume).then_some(()))
    })
    .await?;
    let c = wait_healthy(&api, "demo", &all, T).await?;
    assert!(status_of(&c).rollout.is_none());
    wait_events(
        &env.client,
        &env.namespace,
        "demo",
        &["VolumeReplacementStarted", "VolumeReplaced"],
    )
    .await?;
    read_back(&env, &data).await?;
    env.cleanup().await
}

async fn kubectl_mkv_hibernate_wake_fence_and_unfence_stop_and_bring_back_members()
-> anyhow::Result<()> {
    let env = TestEnv::new("mkv-fields").await?;
    let _op = Operator::start(&env.namespace)?;
    let api = create(&env, "demo", spec(3)).await?;
    let all = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &all, T).await?;
    let data = write_keys(&env, &all, "demo-0", "mkv-fields").await?;
    let volumes = volume_uids(&env, &all).await?;
    let spec = || async { anyhow::Ok(api.get("demo").await?.spec) };
    let pods: Api<Pod> = env.api();
    let live_pods = || async {
        let listed = pods.list(&Default::default()).await?.items;
        anyhow::Ok(
            listed
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect::<Vec<_>>(),
        )
    };

    // hibernate: every pod stops, the volumes stay; wake: the same members on the same volumes.
    done(&env, &["hibernate", "demo"]).await?;
    assert!(spec().await?.hibernation);
    wait_cluster(&api, "demo", "Hibernated", T, |s| {
        s.phase == Some(ClusterPhase::Hibernated)
    })
    .await?;
    wait_until("no member pod", T, || async {
        Ok(live_pods().await?.is_empty().then_some(()))
    })
    .await?;
    refused(
        &env,
        &api,
        &["wake", "demo", "--fresh-volumes"],
        "--yes-lose-data",
    )
    .await?;
    done(&env, &["wake", "demo"]).await?;
    let s = spec().await?;
    assert!(!s.hibernation && !s.storage.fresh_volumes_on_wake);
    wait_healthy(&api, "demo", &all, T).await?;
    assert_eq!(
        volume_uids(&env, &all).await?,
        volumes,
        "woken on the same volumes"
    );
    read_back(&env, &data).await?;
    done(
        &env,
        &["wake", "demo", "--fresh-volumes", "--yes-lose-data"],
    )
    .await?;
    let s = spec().await?;
    assert!(!s.hibernation && s.storage.fresh_volumes_on_wake);

    // fence: the member's pod stops, it stays a member; unfence: back on its own volume.
    refused(
        &env,
        &api,
        &["fence", "demo", "demo-9"],
        "demo-9 is not a member",
    )
    .await?;
    // Keys written just before, through demo-1 among others, read back through demo-2, which
    // neither wrote nor read any of them (demo-0 read the first set back: it holds them now).
    let fenced_data = write_keys(&env, &all, "demo-2", "mkv-fence").await?;
    let out = done(&env, &["fence", "demo", "demo-1"]).await?;
    assert!(out.starts_with("demo: fenced demo-1"), "{out}");
    assert_eq!(spec().await?.fenced_members, ["demo-1"]);
    wait_until("demo-1 stopped", T, || async {
        Ok((!live_pods().await?.contains(&"demo-1".to_string())).then_some(()))
    })
    .await?;
    let fenced = wait_cluster(&api, "demo", "demo-1 Fenced", T, |s| {
        s.members
            .iter()
            .any(|m| m.name == "demo-1" && m.phase == MemberPhase::Fenced)
    })
    .await?;
    assert_eq!(
        status_of(&fenced).instance_names,
        all,
        "a fenced member stays a member"
    );
    let out = done(&env, &["fence", "demo", "demo-1"]).await?;
    assert!(out.contains("already fenced"), "{out}");
    done(&env, &["unfence", "demo", "demo-1"]).await?;
    assert!(spec().await?.fenced_members.is_empty());
    refused(
        &env,
        &api,
        &["unfence", "demo", "demo-1"],
        "demo-1 is not fenced",
    )
    .await?;

    wait_healthy(&api, "demo", &all, T).await?;
    assert_eq!(
        volume_uids(&env, &all).await?,
        volumes,
        "unfenced on its own volume"
    );
    read_back(&env, &fenced_data).await?;
    env.cleanup().await
}

/// The uids of the members' PVCs, in order.
async fn volume_uids(env: &TestEnv, members: &[&str]) -> anyhow::Result<Vec<String>> {
    let mut uids = Vec::new();
    for m in members {
        uids.push(pvc_uid(env, &format!("data-{m}")).await?);
    }
    Ok(uids)
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        kubectl_mkv_status_lists_every_member_and_remove_removes_exactly_the_named_one,
        kubectl_mkv_replace_restarts_on_the_same_volume_or_a_fresh_one_behind_the_gate,
        kubectl_mkv_hibernate_wake_fence_and_unfence_stop_and_bring_back_members,
    ])
}
