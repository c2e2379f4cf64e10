//! Helpers for end-to-end tests against a real Kubernetes API server.
//!
//! Every test gets its own namespace ([`TestEnv::new`]) and waits on conditions, never on
//! fixed sleeps. The cluster comes from `KUBECONFIG` (`make test` brings up the local control
//! plane and sets it). Each test file runs its cases through [`harness::run`]: a case that
//! needs what the data plane cannot give here (the simulator's control API on real members,
//! say) is reported skipped with the reason, never passed. Every disruptive test writes keys
//! over RESP before the disruption and reads every one back after it ([`data`]).
#![forbid(unsafe_code)]

pub mod data;
pub mod harness;
pub mod install;
pub mod load;

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// A namespace of its own for one test; [`TestEnv::cleanup`] deletes it.
pub struct TestEnv {
    pub client: Client,
    pub namespace: String,
}

/// How long a new namespace may wait for its default ServiceAccount (made by the controller
/// manager).
const SERVICE_ACCOUNT_WAIT: Duration = Duration::from_secs(60);

impl TestEnv {
    pub async fn new(prefix: &str) -> anyhow::Result<Self> {
        Self::new_within(prefix, SERVICE_ACCOUNT_WAIT).await
    }

    /// A new namespace whose default ServiceAccount may take up to `wait` to appear.
    pub async fn new_within(prefix: &str, wait: Duration) -> anyhow::Result<Self> {
        if std::env::var_os("KUBECONFIG").is_none() {
            bail!(
                "KUBECONFIG is not set: run the e2e tests through `make test` (or point KUBECONFIG at a cluster)"
            );
        }
        let client = Client::try_default()
            .await
            .context("connecting to the cluster in KUBECONFIG")?;
        let suffix = format!("{:08x}", rand_u32());
        Self::on_within(client, &format!("e2e-{prefix}-{suffix}"), wait).await
    }

    /// The namespace `namespace` on the cluster of `client` (e.g. a second cluster).
    pub async fn on(client: Client, namespace: &str) -> anyhow::Result<Self> {
        Self::on_within(client, namespace, SERVICE_ACCOUNT_WAIT).await
    }

    async fn on_within(client: Client, namespace: &str, wait: Duration) -> anyhow::Result<Self> {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": namespace, "labels": {"marekvs.io/e2e": "true"}}
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        // Pods are refused until the namespace's default ServiceAccount exists.
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), namespace);
        wait_until("default service account", wait, || async {
            Ok(sa.get_opt("default").await?.map(|_| ()))
        })
        .await?;
        Ok(TestEnv {
            client,
            namespace: namespace.to_string(),
        })
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Create an object from JSON in this namespace.
    pub async fn create<K>(&self, value: Value) -> anyhow::Result<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
        <K as kube::Resource>::DynamicType: Default,
    {
        let obj: K = serde_json::from_value(value)?;
        Ok(self.api::<K>().create(&PostParams::default(), &obj).await?)
    }

    pub async fn cleanup(self) -> anyhow::Result<()> {
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.namespace, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

/// Poll `check` until it yields `Some`, or fail after `timeout` with what it last said.
/// The interval is short and fixed; the wait ends on the condition, not on the clock.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if start.elapsed() > timeout {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The pod's condition `type_` is `True`.
pub fn pod_condition(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

pub fn pod_ip(pod: &Pod) -> Option<std::net::Ipv4Addr> {
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

pub fn pod_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

pub fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map(|c| c.restart_count)
        .unwrap_or(0)
}

/// Plain HTTP client for member endpoints (pod IPs are reached directly).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client builds")
}

/// GET `http://{ip}:9121{path}`: status code and body.
pub async fn member_get(ip: std::net::Ipv4Addr, path: &str) -> anyhow::Result<(u16, String)> {
    let r = http().get(format!("http://{ip}:9121{path}")).send().await?;
    let status = r.status().as_u16();
    Ok((status, r.text().await?))
}

/// Value of an unlabelled sample in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Wait until every one of `members` has handed on what it holds, as the operator's hand-off
/// gate judges it: each began the anti-entropy rounds the gate counts
/// (`marekvs_core::handoff::rounds_needed`, counted from this call: its last client write is
/// before it) and the repair and bootstrap counters, summed, stood still for `settle`. On
/// marekvs 0.2 nothing else says that a member's writes reached the other owners (its ring
/// figure is occupancy, not backlog): a raw delete of a member's volume loses what only that
/// member holds, so anyone deleting a volume by hand waits for this first.
pub async fn wait_replication_quiet(
    pods: &Api<Pod>,
    members: &[&str],
    settle: Duration,
    timeout: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    // Each member's rounds when counting began (again, after a restart).
    let mut from: Vec<Option<u64>> = vec![None; members.len()];
    // Counter sum, and since when it has stood still.
    let mut still: Option<(f64, Instant)> = None;
    loop {
        let mut waiting = Vec::new();
        match replication_counters(pods, members).await {
            Ok(read) => {
                for (i, (m, rounds, _)) in read.iter().enumerate() {
                    let at = *from[i].get_or_insert(*rounds);
                    if *rounds < at {
                        from[i] = Some(*rounds);
                        waiting.push(format!("{m} restarted"));
                    } else if *rounds < marekvs_core::handoff::rounds_needed(at) {
                        waiting.push(format!(
                            "{m} at round {rounds} of {}",
                            marekvs_core::handoff::rounds_needed(at)
                        ));
                    }
                }
                let sum: f64 = read.iter().map(|(_, _, c)| c).sum();
                match still {
                    Some((prev, since)) if prev == sum => {
                        if since.elapsed() >= settle && waiting.is_empty() {
                            return Ok(());
                        }
                    }
                    _ => still = Some((sum, Instant::now())),
                }
            }
            Err(e) => {
                still = None;
                if start.elapsed() > timeout {
                    return Err(e.context(format!("re-replication not quiet after {timeout:?}")));
                }
            }
        }
        anyhow::ensure!(
            start.elapsed() <= timeout,
            "re-replication not quiet after {timeout:?}: the repair counters kept moving, or anti-entropy did not come round ({})",
            waiting.join(", ")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Per member, its anti-entropy rounds (`marekvs_ae_rounds_total`) and its repair and
/// bootstrap counters summed; an error while any member cannot be read or does not report
/// its rounds.
async fn replication_counters(
    pods: &Api<Pod>,
    members: &[&str],
) -> anyhow::Result<Vec<(String, u64, f64)>> {
    let mut out = Vec::new();
    for m in members {
        let pod = pods.get(m).await?;
        let ip = pod_ip(&pod).with_context(|| format!("no pod IP for {m}"))?;
        let (code, text) = member_get(ip, "/metrics").await?;
        anyhow::ensure!(code == 200, "{m} /metrics answered {code}");
        let rounds = metric(&text, "marekvs_ae_rounds_total")
            .with_context(|| format!("{m} reports no marekvs_ae_rounds_total"))?;
        let counters = metric(&text, "marekvs_ae_repair_ops_total").unwrap_or(0.0)
            + metric(&text, "marekvs_bootstraps_completed_total").unwrap_or(0.0);
        out.push((m.to_string(), rounds as u64, counters));
    }
    Ok(out)
}

/// The simulator's control API, present only on the local control plane.
pub struct Sim {
    base: String,
    http: reqwest::Client,
}

impl Sim {
    /// `None` where no simulator runs (real members, kind): tests that only use it as a
    /// second check go on without it.
    pub fn from_env() -> Option<Sim> {
        let base = std::env::var("MAREKVS_SIM_CONTROL_URL")
            .ok()
            .filter(|s| !s.is_empty())?;
        Some(Sim { base, http: http() })
    }

    /// For tests declared `needs [Simulator]`: an error (not a pass) where it is absent.
    pub fn required() -> anyhow::Result<Sim> {
        Self::from_env().context(
            "this test needs the simulator's control API (MAREKVS_SIM_CONTROL_URL is not set)",
        )
    }

    pub async fn state(&self) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!("{}/state", self.base))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// One member's report (`None` until its pod has run).
    pub async fn member(&self, ns: &str, pod: &str) -> anyhow::Result<Option<Value>> {
        let r = self
            .http
            .get(format!("{}/members/{ns}/{pod}", self.base))
            .send()
            .await?;
        if r.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(Some(r.error_for_status()?.json().await?))
    }

    pub async fn set_faults(&self, ns: &str, pod: &str, faults: Value) -> anyhow::Result<()> {
        self.http
            .patch(format!("{}/members/{ns}/{pod}/faults", self.base))
            .json(&faults)
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    pub async fn crash(&self, ns: &str, pod: &str) -> anyhow::Result<()> {
        self.http
            .post(format!("{}/members/{ns}/{pod}/crash", self.base))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// The simulator's settings (ring and anti-entropy rates among them).
    pub async fn settings(&self) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!("{}/settings", self.base))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    pub async fn patch_settings(&self, settings: Value) -> anyhow::Result<Value> {
        Ok(self
            .http
            .patch(format!("{}/settings", self.base))
            .json(&settings)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Wait until every running member of the clusters in `ns` holds exactly the partitions
    /// it owns: no copy left over from a join still waiting to be released. Until then a write
    /// can land on more volumes than its owners, and a test that counts copies cannot predict
    /// where they are.
    pub async fn wait_placed(&self, ns: &str, timeout: Duration) -> anyhow::Result<()> {
        self.wait_every_member(ns, timeout, "partitions not placed", |m, _| {
            let f = &m["figures"];
            f["held_partitions"].as_u64() == f["owned_partitions"].as_u64()
                && f["join_gate_pending_pids"].as_u64() == Some(0)
        })
        .await
    }

    /// Wait until every running member of the clusters in `ns` is connected to all the others
    /// and has shipped every write it took (the simulator's own `ring_backlog`, read now; the
    /// node's gauges lag). Until then a write acknowledged by one member may live only there,
    /// and crashing that member loses it whatever its partition's owners.
    pub async fn wait_shipped(&self, ns: &str, timeout: Duration) -> anyhow::Result<()> {
        self.wait_every_member(ns, timeout, "writes not shipped", |m, running| {
            m["figures"]["mesh_peers"].as_u64() == Some(running.saturating_sub(1))
                && m["ring_backlog"].as_u64() == Some(0)
        })
        .await
    }

    /// Poll the simulator until `ok(member report, running members of its cluster)` holds for
    /// every running member in `ns`.
    async fn wait_every_member(
        &self,
        ns: &str,
        timeout: Duration,
        what: &str,
        ok: impl Fn(&Value, u64) -> bool,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let prefix = format!("{ns}/");
        loop {
            let state = self.state().await?;
            let clusters = state["clusters"].as_array().into_iter().flatten();
            let mut running = 0;
            let mut waiting = Vec::new();
            for c in clusters.filter(|c| c["key"].as_str().is_some_and(|k| k.starts_with(&prefix)))
            {
                let up: Vec<&Value> = c["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|m| m["running"].as_bool() == Some(true))
                    .collect();
                running += up.len();
                let n = up.len() as u64;
                waiting.extend(
                    up.iter()
                        .filter(|m| !ok(m, n))
                        .map(|m| m["key"].as_str().unwrap_or("?").to_string()),
                );
            }
            if running > 0 && waiting.is_empty() {
                return Ok(());
            }
            anyhow::ensure!(
                start.elapsed() <= timeout,
                "{what} after {timeout:?}: {waiting:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Partitions whose every copy vanished, summed over the clusters in `ns`.
    pub async fn lost_partitions(&self, ns: &str) -> anyhow::Result<u64> {
        let state = self.state().await?;
        Ok(state["clusters"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter(|c| {
                        c["key"]
                            .as_str()
                            .is_some_and(|k| k.starts_with(&format!("{ns}/")))
                    })
                    .filter_map(|c| c["lost_partitions_total"].as_u64())
                    .sum()
            })
            .unwrap_or(0))
    }
}

/// The status says the spec of `generation` is reached: Healthy, exactly `members`, every one
/// of them on the current pod spec.
pub fn converged(s: &MarekvsClusterStatus, generation: Option<i64>, members: &[&str]) -> bool {
    s.phase == Some(ClusterPhase::Healthy)
        && s.observed_generation == generation
        && s.instance_names == members
        && s.updated_nodes == Some(members.len() as i32)
}

/// Members named in `status.instanceNames` whose pod is missing, terminating or not Ready.
/// `None` while the API answers nothing (the API server is down).
pub async fn members_down(pods: &Api<Pod>, status: &MarekvsClusterStatus) -> Option<Vec<String>> {
    let live: std::collections::BTreeSet<String> = pods
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_condition(p, "Ready"))
        .filter_map(|p| p.metadata.name)
        .collect();
    Some(
        status
            .instance_names
            .iter()
            .filter(|n| !live.contains(*n))
            .cloned()
            .collect(),
    )
}

/// Name of a pod, for messages.
pub fn name_of(pod: &Pod) -> String {
    pod.name_any()
}

/// Where the one Lease is that the shipped RBAC lets the operator hold (`deploy/rbac`: a Role
/// in this namespace, `resourceNames: [marekvs-operator]`).
pub const LEASE_NAMESPACE: &str = "marekvs-system";
/// The name of that Lease (the operator's default `--lease-name`).
pub const LEASE_NAME: &str = "marekvs-operator";

/// A lock on something the tests of the cluster under test share, seen by every process: tests
/// run in parallel, each in a process of its own (hack/run-e2e.py). Held until dropped (or the
/// process ends). `Shared` holders run beside each other, never beside an `Exclusive` one.
pub struct ClusterLock {
    _file: std::fs::File,
}

/// How a [`ClusterLock`] is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    Shared,
    Exclusive,
}

impl ClusterLock {
    /// Wait for the lock `name` of the cluster under test (`MAREKVS_E2E_CLUSTER`).
    pub async fn take(name: &str, mode: LockMode) -> anyhow::Result<ClusterLock> {
        let cluster = std::env::var("MAREKVS_E2E_CLUSTER").unwrap_or_else(|_| "any".into());
        let path = std::env::temp_dir().join(format!("marekvs-e2e-{cluster}-{name}.lock"));
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            match mode {
                LockMode::Shared => file.lock_shared()?,
                LockMode::Exclusive => file.lock()?,
            }
            Ok(file)
        })
        .await
        .with_context(|| format!("waiting for the lock {name}"))?
        .with_context(|| format!("locking {name}"))?;
        Ok(ClusterLock { _file: file })
    }
}

/// A test's turn at the Lease `marekvs-operator` in `marekvs-system`, the only one the
/// operator's RBAC allows: held for the whole test, it is what [`Operator::start_electing`]
/// asks for. Declare it before the operators, so it is dropped after they are killed.
pub struct LeaseTurn {
    _turn: ClusterLock,
}

impl LeaseTurn {
    /// Wait for the turn, then delete whatever Lease an earlier turn left (a killed leader does
    /// not release it), so that every turn starts from a free Lease. The delete is the test's
    /// own client's (the cluster admin's), not the operator's.
    pub async fn take(env: &TestEnv) -> anyhow::Result<LeaseTurn> {
        anyhow::ensure!(
            !Operator::external(),
            "the Lease belongs to the deployed operator here"
        );
        // Two tests electing leaders through the same Lease would depose each other's.
        let turn = ClusterLock::take("lease-turn", LockMode::Exclusive).await?;
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(env.client.clone(), LEASE_NAMESPACE);
        match leases.delete(LEASE_NAME, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).context("deleting the Lease an earlier test left"),
        }
        Ok(LeaseTurn { _turn: turn })
    }

    /// The Lease, read with the test's own client.
    pub fn api(env: &TestEnv) -> Api<k8s_openapi::api::coordination::v1::Lease> {
        Api::namespaced(env.client.clone(), LEASE_NAMESPACE)
    }
}

/// The operator under test, scoped to one namespace, as its own process (so a test can kill
/// and restart it). Where `MAREKVS_E2E_EXTERNAL_OPERATOR` is set (a cluster with the operator
/// deployed), nothing is started and [`Operator::kill`] is unavailable.
///
/// [`Operator::start`] runs a single replica, `--leader-elect=false`: the shipped RBAC allows
/// one Lease only, in `marekvs-system`, and tests run in parallel. The tests of leader election
/// use [`Operator::start_electing`], which takes that Lease during a [`LeaseTurn`].
pub struct Operator {
    namespace: String,
    env: Vec<(String, String)>,
    leader_elect: bool,
    child: Option<tokio::process::Child>,
    /// Where the running process serves its metrics: a free loopback port picked at each
    /// start, unless the test's environment names one.
    metrics_addr: Option<String>,
}

impl Operator {
    pub fn external() -> bool {
        std::env::var_os("MAREKVS_E2E_EXTERNAL_OPERATOR").is_some()
    }

    pub fn start(namespace: &str) -> anyhow::Result<Operator> {
        Self::start_with(namespace, &[])
    }

    /// Start with extra environment (e.g. `RUST_LOG`), without leader election.
    pub fn start_with(namespace: &str, env: &[(&str, &str)]) -> anyhow::Result<Operator> {
        Self::start_as(namespace, env, false)
    }

    /// Start with leader election on, as deployed: through the Lease `marekvs-operator` in
    /// `marekvs-system`, during the test's turn at it. Extra environment as [`Operator::start_with`]
    /// (e.g. `MAREKVS_OPERATOR_LEASE_SECONDS`).
    pub fn start_electing(
        namespace: &str,
        _turn: &LeaseTurn,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Operator> {
        Self::start_as(namespace, env, true)
    }

    fn start_as(
        namespace: &str,
        env: &[(&str, &str)],
        leader_elect: bool,
    ) -> anyhow::Result<Operator> {
        let mut op = Operator {
            namespace: namespace.to_string(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            leader_elect,
            child: None,
            metrics_addr: None,
        };
        if !Self::external() {
            op.spawn()?;
        }
        Ok(op)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let bin = std::env::var("MAREKVS_OPERATOR_BIN")
            .context("MAREKVS_OPERATOR_BIN is not set (make test sets it; or set MAREKVS_E2E_EXTERNAL_OPERATOR)")?;
        let log_dir = std::env::var("MAREKVS_E2E_LOG_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(format!("{log_dir}/operator-{}.log", self.namespace))?;
        let mut cmd = tokio::process::Command::new(bin);
        if let Ok(kubeconfig) = std::env::var("MAREKVS_OPERATOR_KUBECONFIG") {
            cmd.env("KUBECONFIG", kubeconfig);
        }
        // Many operator processes run at once: each serves its metrics on a free port, which
        // the test reads its pass counter from.
        let metrics_addr = match self
            .env
            .iter()
            .find(|(k, _)| k == "MAREKVS_OPERATOR_METRICS_ADDR")
        {
            Some((_, addr)) => addr.clone(),
            None => std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .to_string(),
        };
        cmd.env("MAREKVS_OPERATOR_METRICS_ADDR", &metrics_addr);
        self.metrics_addr = Some(metrics_addr);
        // The one Lease the RBAC allows, whatever a shell exported; or none at all.
        cmd.env("MAREKVS_OPERATOR_LEASE_NAMESPACE", LEASE_NAMESPACE);
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let leader_elect = format!("--leader-elect={}", self.leader_elect);
        let child = cmd
            .args(["run", "--namespace", &self.namespace, &leader_elect])
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL, as a crashed or evicted operator.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().context("no operator process to kill")?;
        child.kill().await?;
        Ok(())
    }

    /// Send it `SIGSTOP` (`"STOP"`: frozen, as a process the kernel stops scheduling or a node
    /// that hangs; its monotonic clock runs on) or `SIGCONT` (`"CONT"`).
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid().context("no operator process")?;
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -{signal} {pid}: {status}");
        Ok(())
    }

    /// Its process id (its leader-election identity ends with `-<pid>`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Its exit code, once it has exited.
    pub fn exit_code(&mut self) -> Option<Option<i32>> {
        let child = self.child.as_mut()?;
        child.try_wait().ok().flatten().map(|s| s.code())
    }

    /// The passes this process has run (`marekvs_operator_reconciles_total`, counted as each
    /// begins; one cluster's passes run one after another).
    pub async fn passes(&self) -> anyhow::Result<u64> {
        let addr = self
            .metrics_addr
            .as_ref()
            .context("no operator process here")?;
        let text = http()
            .get(format!("http://{addr}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        let n = metric(&text, "marekvs_operator_reconciles_total")
            .context("the operator reports marekvs_operator_reconciles_total")?;
        Ok(n as u64)
    }

    /// A window in which nothing is to happen: `at_least` long, and then until a whole pass
    /// of the operator has run inside it (a window no pass saw would pass without testing
    /// anything). With the operator deployed elsewhere, only the time, said as a skipped check.
    pub async fn quiet_window(&self, at_least: Duration) -> anyhow::Result<()> {
        if Self::external() {
            skipped_check(
                "a whole operator pass inside a quiet window",
                "the operator runs elsewhere: its pass counter is not read",
            );
            tokio::time::sleep(at_least).await;
            return Ok(());
        }
        let before = wait_until(
            "the operator's pass counter",
            Duration::from_secs(60),
            || async { Ok(Some(self.passes().await?)) },
        )
        .await?;
        tokio::time::sleep(at_least).await;
        // The pass after `before` began inside the window; once the one after it begins, it
        // has ended.
        let after = wait_until(
            "a whole pass inside the window",
            Duration::from_secs(120),
            || async {
                let n = self.passes().await?;
                Ok((n >= before + 2).then_some(n))
            },
        )
        .await?;
        eprintln!("quiet window: {} passes began in it", after - before);
        Ok(())
    }

    pub fn restart(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.child.is_none(), "still running");
        self.spawn()
    }

    /// What a Deployment's `restartPolicy: Always` does: if the process has exited, start it
    /// again. Returns the exit code it had, if it was restarted.
    pub fn supervise(&mut self) -> anyhow::Result<Option<Option<i32>>> {
        match self.exit_code() {
            Some(code) => {
                self.child = None;
                self.spawn()?;
                Ok(Some(code))
            }
            None => Ok(None),
        }
    }
}

pub use data::DataSet;
pub use marekvs_api::{
    ClusterPhase, MarekvsCluster, MarekvsClusterStatus, MemberPhase, PlanHoldKind, RemovalStep,
    RolloutReason, RolloutStep, VictimReason,
};

/// The uid of a PVC of the test's namespace: a new one means a fresh, empty volume.
pub async fn pvc_uid(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = env.api().get(name).await?;
    pvc.metadata.uid.context("a stored PVC has a uid")
}

/// The data check's first half: [`data::default_keys`] keys written over RESP before a
/// disruption, spread over `members` except `reader`, the survivor they will be read back
/// through (a real member keeps a copy of what was written through it). Read nothing back
/// before the disruption is over.
pub async fn write_keys(
    env: &TestEnv,
    members: &[&str],
    reader: &str,
    label: &str,
) -> anyhow::Result<DataSet> {
    DataSet::write(&env.api(), members, reader, data::default_keys(), label).await
}

/// `MAREKVS_CLUSTER` of a member pod's marekvs container, if set.
pub fn gossip_env(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == "MAREKVS_CLUSTER")
        .and_then(|e| e.value.clone())
}

/// The data check's second half: every key read back through its reader.
pub async fn read_back(env: &TestEnv, data: &DataSet) -> anyhow::Result<()> {
    data.verify(&env.api()).await.map(|_| ())
}

/// The spec most tests start from: `nodes` members, replicationFactor 2, 1Gi volumes, and a
/// short settle window so hand-offs are quick.
pub fn spec(nodes: u32) -> Value {
    json!({
        "image": image(), "nodes": nodes, "replicationFactor": 2,
        "storage": {"size": "1Gi"},
        "scaleDown": {"settleSeconds": 2, "handoffTimeoutSeconds": 600},
    })
}

/// Create a MarekvsCluster in the test's namespace.
pub async fn create(env: &TestEnv, name: &str, spec: Value) -> anyhow::Result<Api<MarekvsCluster>> {
    let api: Api<MarekvsCluster> = env.api();
    api.create(&PostParams::default(), &cluster(name, spec)?)
        .await?;
    Ok(api)
}

/// Merge-patch the spec.
pub async fn patch_spec(api: &Api<MarekvsCluster>, name: &str, spec: Value) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await?;
    Ok(())
}

/// A MarekvsCluster from its spec JSON.
pub fn cluster(name: &str, spec: Value) -> anyhow::Result<MarekvsCluster> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
        "metadata": {"name": name}, "spec": spec,
    }))?)
}

/// The `kubectl-mkv` binary: `MAREKVS_KUBECTL_MKV_BIN` (hack/test-e2e.sh builds it), else the
/// workspace's debug build.
pub fn plugin_bin() -> std::path::PathBuf {
    std::env::var_os("MAREKVS_KUBECTL_MKV_BIN")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/kubectl-mkv")
        })
}

/// The image the member pods use: any string on the simulator, the real image on kind.
pub fn image() -> String {
    std::env::var("MAREKVS_IMAGE").unwrap_or_else(|_| "ghcr.io/yannick/marekvs:latest".into())
}

/// Another image for a rolling update: `MAREKVS_IMAGE_NEXT`, or by default the same image
/// spelled differently (`:latest` dropped or added), so a real cluster pulls nothing new.
pub fn image_next() -> String {
    std::env::var("MAREKVS_IMAGE_NEXT").unwrap_or_else(|_| {
        let current = image();
        match current.strip_suffix(":latest") {
            Some(bare) => bare.to_string(),
            None if !current.rsplit('/').next().unwrap_or("").contains(':') => {
                format!("{current}:latest")
            }
            None => format!("{current}-next"),
        }
    })
}

pub fn status_of(c: &MarekvsCluster) -> MarekvsClusterStatus {
    c.status.clone().unwrap_or_default()
}

/// Wait until the cluster's status satisfies `pred`; returns that object.
pub async fn wait_cluster(
    api: &Api<MarekvsCluster>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&MarekvsClusterStatus) -> bool,
) -> anyhow::Result<MarekvsCluster> {
    let waited = wait_until(what, timeout, || async {
        let c = api.get(name).await?;
        let s = status_of(&c);
        if pred(&s) {
            Ok(Some(c))
        } else {
            Err(anyhow!(
                "last seen: phase {:?}, members {:?}, removal {:?}, rollout {:?}, progress {:?}",
                s.phase,
                s.instance_names,
                s.removal.as_ref().map(|r| (&r.member, &r.step)),
                s.rollout.as_ref().map(|r| (&r.member, &r.step)),
                condition(&s, "Progressing").map(|c| &c.message)
            ))
        }
    })
    .await;
    match waited {
        Ok(c) => Ok(c),
        // What the pods were doing, for the failure message.
        Err(e) => {
            let ns = api.get(name).await.ok().and_then(|c| c.metadata.namespace);
            let pods = match ns {
                Some(ns) => Api::<Pod>::namespaced(api.clone().into_client(), &ns)
                    .list(&Default::default())
                    .await
                    .map(|l| l.items.iter().map(pod_summary).collect::<Vec<_>>())
                    .unwrap_or_default(),
                None => Vec::new(),
            };
            Err(e.context(format!("pods then: {pods:?}")))
        }
    }
}

/// `name node=… phase=… ready=… terminating`, for failure messages.
pub fn pod_summary(p: &Pod) -> String {
    format!(
        "{} node={} phase={} ready={}{}",
        p.name_any(),
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("-"),
        p.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("-"),
        pod_condition(p, "Ready"),
        if p.metadata.deletion_timestamp.is_some() {
            " terminating"
        } else {
            ""
        }
    )
}

/// Healthy, with exactly these members, for the current generation.
pub async fn wait_healthy(
    api: &Api<MarekvsCluster>,
    name: &str,
    members: &[&str],
    timeout: Duration,
) -> anyhow::Result<MarekvsCluster> {
    let want: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    let generation = api.get(name).await?.metadata.generation;
    wait_cluster(api, name, &format!("Healthy with {want:?}"), timeout, |s| {
        s.phase == Some(ClusterPhase::Healthy)
            && s.instance_names == want
            && s.observed_generation == generation
    })
    .await
}

pub fn condition<'a>(
    s: &'a MarekvsClusterStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == type_)
}

/// Reasons of the Events recorded for an object in `ns`.
/// The Events (`events.k8s.io`) regarding the object `name` in `ns`.
pub async fn events_of(
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Vec<k8s_openapi::api::events::v1::Event>> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect())
}

pub async fn event_reasons(client: &Client, ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
    Ok(events_of(client, ns, name)
        .await?
        .into_iter()
        .filter_map(|e| e.reason)
        .collect())
}

/// The notes of the Events with `reason` regarding `name`.
pub async fn event_notes(
    client: &Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<Vec<String>> {
    Ok(events_of(client, ns, name)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect())
}

/// Wait until Events with every one of `reasons` were recorded for `name` in `ns`. The
/// operator writes status before it posts a transition's Events, so a test that has just seen
/// the status must wait for them, not assert at once.
pub async fn wait_events(
    client: &Client,
    ns: &str,
    name: &str,
    reasons: &[&str],
) -> anyhow::Result<()> {
    wait_until(
        &format!("events {reasons:?}"),
        Duration::from_secs(60),
        || async {
            let seen = event_reasons(client, ns, name).await?;
            let missing: Vec<&&str> = reasons
                .iter()
                .filter(|r| !seen.iter().any(|s| s == **r))
                .collect();
            if missing.is_empty() {
                Ok(Some(()))
            } else {
                Err(anyhow!("no {missing:?} event among {seen:?}"))
            }
        },
    )
    .await
}

/// The first path under `sent` whose value `kept` does not hold as sent (objects may gain
/// fields: defaults); `None` when everything sent was kept.
pub fn first_not_kept(sent: &Value, kept: &Value, path: &str) -> Option<String> {
    match (sent, kept) {
        (Value::Object(s), Value::Object(k)) => s.iter().find_map(|(key, v)| {
            first_not_kept(
                v,
                k.get(key).unwrap_or(&Value::Null),
                &format!("{path}.{key}"),
            )
        }),
        _ => (sent != kept).then(|| path.to_string()),
    }
}

/// A check this run cannot make here: printed as `skipped sub-check <what>: <why>` and counted
/// in the suite's summary (`hack/test-e2e.sh`), never passed silently.
pub fn skipped_check(what: &str, why: &str) {
    eprintln!("skipped sub-check {what}: {why}");
}

/// A real member's log as far as it is written (every start of its pod appends to it), from
/// the directory hack/test-e2e.sh has the podlet write them to (`MAREKVS_E2E_POD_LOGS`):
/// `Err` says why it cannot be read.
pub fn member_log(namespace: &str, pod: &str) -> Result<String, String> {
    let dir = std::env::var("MAREKVS_E2E_POD_LOGS")
        .map_err(|_| "MAREKVS_E2E_POD_LOGS is not set (hack/test-e2e.sh sets it)".to_string())?;
    let path = std::path::Path::new(&dir).join(format!("{namespace}_{pod}_marekvs.log"));
    std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// Why the simulator's checks are not made on real members.
pub const NOT_SIMULATED: &str = "members here are not simulated (MAREKVS_BIN): the data check, every key read back through a member that neither wrote nor read it, stands in";

/// On the simulator, no partition of the clusters in `ns` lost every copy; on real members,
/// which count nothing of the kind, the check is reported skipped.
pub async fn no_lost_partitions(sim: &Option<Sim>, ns: &str) -> anyhow::Result<()> {
    match sim {
        Some(sim) => {
            let lost = sim.lost_partitions(ns).await?;
            anyhow::ensure!(
                lost == 0,
                "the simulator counted {lost} lost partitions in {ns}"
            );
        }
        None => skipped_check("the simulator's count of lost partitions", NOT_SIMULATED),
    }
    Ok(())
}
