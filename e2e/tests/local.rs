//! The local harness as a user meets it: members that form one cluster and see each other by
//! identity, and (with a second local cluster beside the first) two clusters that run side by
//! side on disjoint pod networks.
//!
//! Runs unchanged on simulated members and on real ones (`MAREKVS_BIN`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use marekvs_e2e::data::{self, DataSet, Reply, Resp};
use marekvs_e2e::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(120);

/// Every member answers `CLUSTER MYID`, and every member's `CLUSTER NODES` lists exactly the
/// members of the cluster, at their pod IPs: the members formed one cluster.
async fn members_form_one_cluster_and_see_each_other_by_identity() -> anyhow::Result<()> {
    let env = TestEnv::new("formed").await?;
    let _op = Operator::start(&env.namespace)?;
    let api = create(&env, "demo", spec(3)).await?;
    let all = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &all, T).await?;
    let pods: Api<Pod> = env.api();
    let mut ids = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    for m in all {
        let ip = pod_ip(&pods.get(m).await?).expect("a Ready pod has an IP");
        let mut conn = Resp::connect(ip).await?;
        match conn.call(&[b"CLUSTER", b"MYID"]).await? {
            Reply::Bulk(id) => {
                let id = String::from_utf8(id)?;
                assert!(
                    id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{m}: CLUSTER MYID {id:?}"
                );
                ids.insert(id);
            }
            other => anyhow::bail!("{m}: CLUSTER MYID answered {other:?}"),
        }
        addrs.insert(ip.to_string());
    }
    assert_eq!(ids.len(), 3, "three distinct node ids: {ids:?}");
    // Views converge within seconds after the cluster turned Healthy.
    for m in all {
        wait_until(&format!("{m} sees every member"), T, || async {
            let ip = pod_ip(&pods.get(m).await?).expect("a Ready pod has an IP");
            let (seen_ids, seen_addrs) = cluster_nodes(ip).await?;
            Ok((seen_ids == ids && seen_addrs == addrs).then_some(()))
        })
        .await?;
    }
    let data = write_keys(&env, &all, "demo-1", "formed").await?;
    read_back(&env, &data).await?;
    env.cleanup().await
}

/// Node ids and addresses (without port) of the `CLUSTER NODES` lines of the member at `ip`.
async fn cluster_nodes(
    ip: std::net::Ipv4Addr,
) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let mut conn = Resp::connect(ip).await?;
    let text = match conn.call(&[b"CLUSTER", b"NODES"]).await? {
        Reply::Bulk(t) => String::from_utf8(t)?,
        other => anyhow::bail!("CLUSTER NODES at {ip} answered {other:?}"),
    };
    let mut ids = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let id = fields.next().unwrap_or_default().to_string();
        let addr = fields.next().unwrap_or_default();
        let host = addr
            .split([':', '@'])
            .next()
            .unwrap_or_default()
            .to_string();
        ids.insert(id);
        addrs.insert(host);
    }
    Ok((ids, addrs))
}

/// Whether `ip` lies in the CIDR `net` (`a.b.c.d/n`).
fn in_network(ip: Ipv4Addr, net: &str) -> anyhow::Result<bool> {
    let (base, prefix) = net.split_once('/').context("a CIDR")?;
    let (base, prefix): (Ipv4Addr, u32) = (base.parse()?, prefix.parse()?);
    anyhow::ensure!(prefix <= 32, "bad prefix in {net}");
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    Ok(u32::from(ip) & mask == u32::from(base) & mask)
}

/// A member pod run by the side cluster's stand-in binary (not by the operator): the same
/// container shape the operator builds, without a volume.
fn standin_pod(name: &str, extra_env: &[(&str, &str)]) -> Value {
    let mut env = vec![
        json!({"name": "MAREKVS_REPLICAS_N", "value": "2"}),
        json!({"name": "MAREKVS_SEEDS", "value": "demo-headless:7946"}),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v})),
    );
    json!({
        "metadata": {"name": name},
        "spec": {
            "hostname": name,
            "terminationGracePeriodSeconds": 10,
            "containers": [{
                "name": "marekvs", "image": "marekvs:standin", "env": env,
                "ports": [{"name": "metrics", "containerPort": 9121}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "metrics"}, "periodSeconds": 1},
            }],
        }
    })
}

fn member_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

/// `make demo` and `make test` side by side, as the `test` and `side` clusters: each has its
/// own ports and pod network, so the operator's members here and three members there, with the
/// same namespace and pod names, run at the same time without a collision. The side cluster's
/// members run a real binary (marekvs-standin, which binds its listeners like marekvs): all
/// three share one network namespace, so each must have bound its four listeners to its own
/// pod IP; each keeps a log of its own; one that keeps failing is shown as a kubelet shows it
/// and restarted with a growing back-off.
async fn two_local_clusters_side_by_side_and_real_binary_members_on_their_pod_ips()
-> anyhow::Result<()> {
    let env = TestEnv::new("side").await?;
    let ns = env.namespace.clone();
    let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
    let side_config = kube::config::Kubeconfig::read_from(var("MAREKVS_E2E_SIDE_KUBECONFIG")?)?;
    let side_client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(side_config, &Default::default()).await?,
    )?;
    let side = TestEnv::on(side_client, &ns).await?;
    let here_net = var("MAREKVS_E2E_POD_NETWORK")?;
    let side_net = var("MAREKVS_E2E_SIDE_POD_NETWORK")?;

    let _op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(3)).await?;
    let all = ["demo-0", "demo-1", "demo-2"];
    for m in all {
        side.create::<Pod>(standin_pod(m, &[])).await?;
    }
    wait_healthy(&api, "demo", &all, T).await?;
    let side_pods: Api<Pod> = side.api();
    for m in all {
        wait_until(&format!("side {m} Ready"), T, || async {
            Ok(side_pods
                .get_opt(m)
                .await?
                .filter(|p| pod_condition(p, "Ready"))
                .map(|_| ()))
        })
        .await?;
    }

    let pods: Api<Pod> = env.api();
    let mut ips = BTreeSet::new();
    for m in all {
        let here = pod_ip(&pods.get(m).await?).context("pod IP")?;
        let there = pod_ip(&side_pods.get(m).await?).context("side pod IP")?;
        assert!(
            in_network(here, &here_net)?,
            "{m}: {here} outside {here_net}"
        );
        assert!(
            in_network(there, &side_net)?,
            "{m}: {there} outside {side_net}"
        );
        ips.insert(here);
        ips.insert(there);
        // Both answer at once, each at its own address.
        let (code, _) = member_get(here, "/metrics").await?;
        assert_eq!(code, 200, "{m} at {here}");
        let (code, _) = member_get(there, "/metrics").await?;
        assert_eq!(code, 200, "side {m} at {there}");
        let mut conn = Resp::connect(there).await?;
        assert_eq!(
            conn.call(&[b"PING"]).await?,
            Reply::Simple("PONG".into()),
            "side {m}: its RESP listener is its own"
        );
        // Its output went to a log of its own, which names the address it bound.
        let log_dir = var("MAREKVS_E2E_SIDE_POD_LOGS")?;
        let log = std::fs::read_to_string(format!("{log_dir}/{ns}_{m}_marekvs.log"))
            .with_context(|| format!("the per-pod log of side {m}"))?;
        assert!(
            log.contains(&format!("{there}:7946")),
            "side {m}'s log names its gossip address {there}:7946: {log}"
        );
    }
    assert_eq!(ips.len(), 6, "six members, six addresses: {ips:?}");
    let data = write_keys(&env, &all, "demo-2", "side-by-side").await?;
    read_back(&env, &data).await?;

    // A member that fails at start: its exit and last error line are in its status, and each
    // restart waits longer than the one before (10 s, then 20 s), never a hot loop.
    side.create::<Pod>(standin_pod(
        "broken-0",
        &[("MAREKVS_STANDIN_FAIL", "cannot open /data: disk on fire")],
    ))
    .await?;
    for (backoff, restarts) in [("back-off 10s", 1), ("back-off 20s", 2)] {
        let pod = wait_until(&format!("broken-0 in {backoff}"), T, || async {
            Ok(side_pods.get_opt("broken-0").await?.filter(|p| {
                member_status(p)
                    .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.clone())
                    .is_some_and(|m| m.starts_with(backoff))
            }))
        })
        .await?;
        let c = member_status(&pod).context("container status")?;
        let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
        assert_eq!(
            waiting.and_then(|w| w.reason.as_deref()),
            Some("CrashLoopBackOff")
        );
        let last = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .context("a last state")?;
        assert_eq!(last.exit_code, 1);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert!(
            last.message
                .as_deref()
                .is_some_and(|m| m.contains("disk on fire")),
            "the last error line: {:?}",
            last.message
        );
        assert_eq!(c.restart_count, restarts, "{backoff}");
        assert!(!c.ready);
    }
    side.cleanup().await?;
    env.cleanup().await
}

/// The data check can fail: with both copies of some partitions made unreachable (two members
/// of an RF 2 cluster crashed and held down by the simulator), it returns its `Lost` verdict
/// naming about a sixth of the keys, while the simulator counts lost partitions too; once the
/// members are back, every key reads back again.
async fn the_data_check_names_the_keys_whose_copies_are_gone() -> anyhow::Result<()> {
    let sim = Sim::required()?;
    let env = TestEnv::new("datacheck").await?;
    let ns = env.namespace.clone();
    let _op = Operator::start(&ns)?;
    let api = create(&env, "demo", spec(4)).await?;
    let all = ["demo-0", "demo-1", "demo-2", "demo-3"];
    wait_healthy(&api, "demo", &all, T).await?;
    let pods: Api<Pod> = env.api();
    // Copies a join has not yet released would make more keys survive than RF predicts.
    sim.wait_placed(&ns, T).await?;
    let data = DataSet::write(&pods, &all, "demo-0", 1_000, "negative-control").await?;
    // A write not yet shipped lives only on the member that took it: crashing demo-2 and
    // demo-3 then would lose every key written through them (two thirds, not a sixth).
    sim.wait_shipped(&ns, T).await?;
    for m in ["demo-2", "demo-3"] {
        sim.set_faults(&ns, m, json!({"hold_down": true})).await?;
        sim.crash(&ns, m).await?;
    }
    let err = data
        .verify_within(&pods, Duration::from_secs(15))
        .await
        .expect_err("keys whose every copy is down cannot read back");
    let lost = err
        .downcast_ref::<data::Lost>()
        .with_context(|| format!("a verdict of lost keys, not: {err:#}"))?;
    let missing = lost.missing.len();
    eprintln!("negative control: {missing} of 1000 keys reported lost with demo-2 and demo-3 down");
    // RF 2 over 4 members: the partitions homed on exactly {demo-2, demo-3} are a sixth.
    assert!(
        (50..400).contains(&missing),
        "about a sixth of the keys: {missing}"
    );
    assert!(
        lost.missing
            .iter()
            .all(|k| k.starts_with("e2e:negative-control:")),
        "names the keys: {:?}",
        &lost.missing[..missing.min(5)]
    );
    assert!(format!("{err:#}").contains("LOST"), "{err:#}");
    assert!(
        sim.lost_partitions(&ns).await? > 0,
        "the simulator counts lost partitions too"
    );
    for m in ["demo-2", "demo-3"] {
        sim.set_faults(&ns, m, json!({"hold_down": false})).await?;
    }
    wait_healthy(&api, "demo", &all, T).await?;
    read_back(&env, &data).await?;
    env.cleanup().await
}

/// The data check can fail on real members too: 40,000 keys of 4 KiB (160 MiB, more than the
/// node's 128 MiB ring) written, overwritten and deleted through demo-2 alone, then at once its
/// PVC deleted and its pod force-deleted by hand, which no operator can gate. What it had not
/// shipped and no anti-entropy round had yet delivered was only on its volume. Measured on
/// real members: 20,000 small keys and a graceful delete 5 s on lost none; 40,000 of 4 KiB
/// and a forced delete 5 s on lost 205 alone but none beside two other tests in CI, so the
/// delete follows the writes at once. The check returns its `Lost` verdict, and every key it
/// names as missing is held by no member.
async fn a_raw_pod_and_pvc_delete_seconds_after_writes_loses_keys_the_check_names()
-> anyhow::Result<()> {
    let env = TestEnv::new("raw-delete").await?;
    let _op = Operator::start(&env.namespace)?;
    let api = create(&env, "demo", spec(3)).await?;
    let all = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &all, T).await?;
    let pods: Api<Pod> = env.api();
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    let data =
        DataSet::write_sized(&pods, &["demo-2"], "demo-0", 40_000, "raw-delete", 4096).await?;
    let old = pvc_uid(&env, "data-demo-2").await?;
    pvcs.delete("data-demo-2", &DeleteParams::default()).await?;
    // Forced, as `kubectl delete --force --grace-period=0`: the process is killed at once,
    // without the up to 7 s its SIGTERM gives the ring to ship.
    pods.delete("demo-2", &DeleteParams::default().grace_period(0))
        .await?;
    wait_until("demo-2 re-created on a fresh volume", T, || async {
        let fresh = pvcs.get_opt("data-demo-2").await?;
        Ok(fresh
            .filter(|p| p.metadata.uid.as_ref() != Some(&old))
            .map(|_| ()))
    })
    .await?;
    // The fresh member joins by bootstrapping the others' copies of 160 MiB of values: it
    // took more than 120 s once on a cold CI machine busy with compiles. Its join can also
    // stall for good on marekvs 0.2 (docs/marekvs-node.md): then that is reported, and the
    // check goes on through the two members that serve; what demo-2 holds it copied from them.
    let serving: &[&str] = match healthy_or_join_stalled(&api, "demo-2", T * 3).await? {
        None => &all,
        Some(stalled) => {
            skipped_check(
                "raw-delete: the cluster Healthy again after the replacement",
                &stalled,
            );
            &all[..2]
        }
    };
    let err = data
        .verify_within(&pods, Duration::from_secs(60))
        .await
        .expect_err("writes only demo-2's volume held cannot read back once it is gone");
    let lost = err
        .downcast_ref::<data::Lost>()
        .with_context(|| format!("a verdict of lost keys, not: {err:#}"))?;
    let named: Vec<String> = [&lost.missing, &lost.stale, &lost.resurrected]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    eprintln!(
        "real negative control: {} of {} keys lost ({} missing, {} on their first value, {} deleted and back) with demo-2's pod and volume",
        named.len(),
        lost.total,
        lost.missing.len(),
        lost.stale.len(),
        lost.resurrected.len()
    );
    assert!(!named.is_empty(), "{err:#}");
    assert!(named.len() < lost.total, "what demo-2 shipped survived");
    assert!(format!("{err:#}").contains("LOST"), "{err:#}");
    // Missing keys are gone from every volume, not merely unread through demo-0.
    for (member, held) in data.local_holders(&pods, serving, &lost.missing).await {
        assert_eq!(held?, 0, "{member} holds keys the check named lost");
    }
    env.cleanup().await
}

/// How long a joining member's bootstrap figures may stand still, while it is not ready and
/// partitions are still pending, before its join counts as stalled. A join of 160 MiB moves
/// `marekvs_bootstraps_completed_total` every few seconds.
const JOIN_STALL: Duration = Duration::from_secs(90);

/// Waits for the cluster to be Healthy within `limit` (`None`), or returns why member `name`'s
/// join stalled: not ready, partitions still pending, and neither its pending count nor its
/// bootstraps moved for [`JOIN_STALL`]. Seen on real marekvs 0.2 after this test's loss: a
/// fresh member Joining for 23 minutes with 650 partitions pending, its log silent 6 s after it
/// started. Anything else is the Healthy wait's own error.
async fn healthy_or_join_stalled(
    api: &Api<MarekvsCluster>,
    name: &str,
    limit: Duration,
) -> anyhow::Result<Option<String>> {
    let started = std::time::Instant::now();
    let mut last: Option<((i64, i64), std::time::Instant)> = None;
    loop {
        let s = status_of(&api.get("demo").await?);
        if s.phase == Some(ClusterPhase::Healthy) {
            return Ok(None);
        }
        let figures = s
            .members
            .iter()
            .find(|m| m.name == name && !m.ready)
            .and_then(|m| m.metrics.as_ref())
            .map(|x| (x.join_gate_pending, x.bootstraps_completed_total))
            .filter(|(pending, _)| *pending > 0);
        last = match (figures, last) {
            (Some(f), Some((g, since))) if f == g => {
                if since.elapsed() >= JOIN_STALL {
                    return Ok(Some(format!(
                        "{name}'s join stalled (marekvs 0.2): not ready, {} partitions pending and {} bootstraps completed, unchanged for {} s, {:.0} s after the replacement; the operator does not restart a stalled join yet",
                        f.0,
                        f.1,
                        JOIN_STALL.as_secs(),
                        started.elapsed().as_secs_f64()
                    )));
                }
                Some((g, since))
            }
            (Some(f), _) => Some((f, std::time::Instant::now())),
            (None, _) => None,
        };
        if started.elapsed() > limit {
            return wait_healthy(api, "demo", &["demo-0", "demo-1", "demo-2"], Duration::ZERO)
                .await
                .map(|_| None);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        members_form_one_cluster_and_see_each_other_by_identity,
        two_local_clusters_side_by_side_and_real_binary_members_on_their_pod_ips needs [SideCluster, OwnOperator],
        the_data_check_names_the_keys_whose_copies_are_gone needs [Simulator],
        a_raw_pod_and_pvc_delete_seconds_after_writes_loses_keys_the_check_names needs [RealDataPlane],
    ])
}
