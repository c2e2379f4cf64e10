//! A minimal kubelet for the pods that land on the harness's fake (kwok) nodes.
//!
//! kwok keeps the nodes alive; this runs their pods the way a kubelet would, so that what the
//! operator observes through the API is earned, never forced:
//! - gives the pod a loopback IP from its node's `spec.podCIDR` and reports it Running;
//! - starts the marekvs member (simulated, or a real binary) at that IP;
//! - follows the readiness probe: the Ready condition changes only after the probe's own
//!   success/failure thresholds against the member's `/ready`;
//! - restarts a member that exited, as with `restartPolicy: Always`: the exit shows as the
//!   container's last state, the restart waits out the kubelet's back-off (`CrashLoopBackOff`),
//!   then restartCount grows; one that cannot even start waits as `RunContainerError`
//!   (states and back-off: [`crate::container_state`]);
//! - runs a real member with its listeners on the pod IP and its output in a per-pod log
//!   file ([`crate::real_node`]);
//! - on deletion runs the preStop HTTP hook, sends SIGTERM, waits for the member to exit (or
//!   the grace period to run out, then SIGKILL), and only then removes the pod.
//!
//! Pods that are not marekvs members (no container with `MAREKVS_REPLICAS_N` or port 9121)
//! are reported Running and Ready, as a container without probes would be.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use marekvs_core::units::quantity_bytes;

use crate::container_state::{
    ContainerState, MemberStatus, Terminated, container_statuses, crash_loop_message,
    next_crash_count, restart_backoff,
};
use crate::model::{Faults, MemberSpec};
use crate::node_http::{self, METRICS_PORT, NodeServer};
use crate::node_resp::{self, RESP_PORT, RespServer};
use crate::real_node::{
    Exit, GOSSIP_PORT, NodeEnv, PodLog, RealNode, StartFailure, node_env, start_header,
};
use crate::world::SharedWorld;

/// Annotation kwok uses to pick the nodes it manages; the harness runs pods on those nodes.
pub const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Pool for nodes without a `spec.podCIDR`.
const FALLBACK_POOL: (Ipv4Addr, u8) = (Ipv4Addr::new(127, 240, 0, 0), 16);

pub struct Podlet {
    pub client: Client,
    pub world: SharedWorld,
    /// Run this marekvs server binary for member pods instead of the simulator.
    pub real_bin: Option<PathBuf>,
    /// Where real nodes keep their data, one directory per PVC.
    pub volumes_dir: PathBuf,
    /// Where real nodes' output goes, one file per pod and container.
    pub pod_logs_dir: PathBuf,
    http: reqwest::Client,
    used_ips: Mutex<BTreeSet<Ipv4Addr>>,
    /// Real-node members: cluster key → member key → pod IP (to rewrite seeds).
    real_members: Mutex<BTreeMap<String, BTreeMap<String, Ipv4Addr>>>,
}

impl Podlet {
    pub fn new(
        client: Client,
        world: SharedWorld,
        real_bin: Option<PathBuf>,
        volumes_dir: PathBuf,
        pod_logs_dir: PathBuf,
    ) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("plain HTTP client builds");
        Arc::new(Podlet {
            client,
            world,
            real_bin,
            volumes_dir,
            pod_logs_dir,
            http,
            used_ips: Mutex::new(BTreeSet::new()),
            real_members: Mutex::new(BTreeMap::new()),
        })
    }

    /// Watch every pod and give each its own worker.
    pub async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let mut workers: HashMap<String, watch::Sender<Option<Pod>>> = HashMap::new();
        let mut seen_in_init: BTreeSet<String> = BTreeSet::new();
        // Pods whose worker has finished (deleted, or never ours): late events must not revive them.
        let finished: Arc<Mutex<BTreeSet<String>>> = Arc::new(Mutex::new(BTreeSet::new()));
        let mut stream = watcher::watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    warn!("pod watch: {e}");
                    continue;
                }
            };
            match ev {
                Event::Init => seen_in_init.clear(),
                Event::InitApply(pod) | Event::Apply(pod) => {
                    let Some(uid) = pod.uid() else { continue };
                    seen_in_init.insert(uid.clone());
                    let alive = workers
                        .get(&uid)
                        .is_some_and(|tx| tx.send(Some(pod.clone())).is_ok());
                    let done = finished
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .contains(&uid);
                    if !alive && !done {
                        let (tx, rx) = watch::channel(Some(pod));
                        workers.insert(uid.clone(), tx);
                        let me = self.clone();
                        let finished = finished.clone();
                        tokio::spawn(async move {
                            if let Err(e) = me.clone().pod_worker(rx).await {
                                warn!("pod {uid}: {e:#}");
                            }
                            finished
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert(uid);
                        });
                    }
                }
                Event::Delete(pod) => {
                    if let Some(tx) = pod.uid().and_then(|u| workers.remove(&u)) {
                        let _ = tx.send(None);
                    }
                }
                Event::InitDone => {
                    workers.retain(|uid, tx| {
                        let keep = seen_in_init.contains(uid);
                        if !keep {
                            let _ = tx.send(None);
                        }
                        keep
                    });
                }
            }
            workers.retain(|_, tx| !tx.is_closed());
        }
        Ok(())
    }

    async fn fake_node(&self, name: &str) -> anyhow::Result<Option<Node>> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = nodes.get_opt(name).await?;
        Ok(node.filter(|n| {
            n.annotations()
                .get(FAKE_NODE_ANNOTATION)
                .is_some_and(|v| v == "fake")
        }))
    }

    fn allocate_ip(&self, node: &Node, wanted: Option<Ipv4Addr>) -> anyhow::Result<Ipv4Addr> {
        let (base, prefix) = match node.spec.as_ref().and_then(|s| s.pod_cidr.as_deref()) {
            Some(cidr) => parse_cidr(cidr)?,
            None => FALLBACK_POOL,
        };
        if !base.is_loopback() {
            bail!(
                "node {} has podCIDR {base}/{prefix}: the harness only assigns loopback pod IPs",
                node.name_any()
            );
        }
        let mut used = self.used_ips.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ip) = wanted.filter(|ip| ip.is_loopback() && !used.contains(ip)) {
            used.insert(ip);
            return Ok(ip);
        }
        let size = 1u32 << (32 - u32::from(prefix));
        let start = u32::from(base);
        // Skip the network address and .1 of the range.
        for off in 2..size.saturating_sub(1) {
            let ip = Ipv4Addr::from(start + off);
            if used.insert(ip) {
                return Ok(ip);
            }
        }
        bail!("no free pod IP in {base}/{prefix}")
    }

    fn free_ip(&self, ip: Ipv4Addr) {
        self.used_ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ip);
    }

    async fn pod_worker(
        self: Arc<Self>,
        mut rx: watch::Receiver<Option<Pod>>,
    ) -> anyhow::Result<()> {
        // Wait until the pod is scheduled to a fake node.
        let (pod, node) = loop {
            let cur = rx.borrow_and_update().clone();
            let Some(pod) = cur else { return Ok(()) };
            if pod.metadata.deletion_timestamp.is_some() {
                // Not started here (or already finished): nothing to stop.
                self.delete_now(&pod).await?;
                return Ok(());
            }
            if let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                match self.fake_node(&node_name).await? {
                    Some(node) => break (pod, node),
                    None => return Ok(()), // a real node's kubelet owns it
                }
            }
            if rx.changed().await.is_err() {
                return Ok(());
            }
        };
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let key = format!("{ns}/{name}");
        let wanted_ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok());
        let ip = self.allocate_ip(&node, wanted_ip)?;
        let result = self
            .clone()
            .run_pod(&mut rx, pod, node, key.clone(), ip)
            .await;
        self.free_ip(ip);
        result
    }

    async fn run_pod(
        self: Arc<Self>,
        rx: &mut watch::Receiver<Option<Pod>>,
        pod: Pod,
        node: Node,
        key: String,
        ip: Ipv4Addr,
    ) -> anyhow::Result<()> {
        let pods: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let container = member_container(&pod).cloned();
        let host_ip = node_ip(&node);
        let started = Timestamp::now();
        let restarts: i32 = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .map(|c| c.restart_count)
            .unwrap_or(0);

        let Some(container) = container else {
            // Not a marekvs member: run it as a container without probes.
            self.patch_status(&pods, &pod, ip, &host_ip, &started, None)
                .await?;
            info!(pod = %key, %ip, "running (not a marekvs member)");
            return self.wait_and_finish_plain(rx, &pods, &pod).await;
        };
        let cname = container.name.as_str();

        // Report the pod Running first: if it is gone already, no member is started for it.
        let mut status = MemberStatus::running(started, restarts, None);
        self.patch_status(&pods, &pod, ip, &host_ip, &started, Some((cname, &status)))
            .await?;

        let probe = container.readiness_probe.clone();
        let probe_get = probe.as_ref().and_then(|p| p.http_get.clone());
        let period = Duration::from_secs(
            probe
                .as_ref()
                .and_then(|p| p.period_seconds)
                .unwrap_or(10)
                .max(1) as u64,
        );
        let timeout = Duration::from_secs(
            probe
                .as_ref()
                .and_then(|p| p.timeout_seconds)
                .unwrap_or(1)
                .max(1) as u64,
        );
        let success_threshold = probe
            .as_ref()
            .and_then(|p| p.success_threshold)
            .unwrap_or(1)
            .max(1);
        let failure_threshold = probe
            .as_ref()
            .and_then(|p| p.failure_threshold)
            .unwrap_or(3)
            .max(1);
        let initial_delay = Duration::from_secs(
            probe
                .as_ref()
                .and_then(|p| p.initial_delay_seconds)
                .unwrap_or(0)
                .max(0) as u64,
        );
        let mut successes = 0;
        let mut failures = 0;
        let mut probe_timer =
            tokio::time::interval_at(tokio::time::Instant::now() + initial_delay, period);
        let mut exit_check = tokio::time::interval(Duration::from_millis(200));
        let mut terminating: Option<tokio::time::Instant> = None;

        // The process; kept after it exits (a simulated member stays in the model, a real one
        // in its cluster's seeds) until it is started again.
        let mut member: Option<MemberProcess> = None;
        // Set while the member is down: when it may be started again.
        let mut restart_at: Option<tokio::time::Instant> = Some(tokio::time::Instant::now());
        // Whether the container has run before: only then does a start count as a restart.
        let mut has_run = false;
        let mut crashes_in_a_row: u32 = 0;
        let mut run_since = tokio::time::Instant::now();
        let mut starts: u64 = 0;

        loop {
            // Start (or restart) the member once its back-off is over.
            // `hold_down` keeps a member that has run down after it exits.
            if terminating.is_none()
                && restart_at.is_some_and(|at| tokio::time::Instant::now() >= at)
                && !(has_run && self.world.lock().faults(&key).hold_down)
            {
                restart_at = None;
                if let Some(old) = member.take() {
                    self.forget_member(&key, &old);
                    drop(old); // frees its ports before the new process binds them
                }
                starts += 1;
                let restart_count = status.restart_count + i32::from(has_run);
                match self
                    .start_member(&pod, &container, &key, ip, starts, restart_count)
                    .await
                {
                    Ok(m) => {
                        member = Some(m);
                        // The first start is the one the pod status already reports.
                        let at = if starts == 1 {
                            started
                        } else {
                            Timestamp::now()
                        };
                        status.start(at, has_run);
                        has_run = true;
                        run_since = tokio::time::Instant::now();
                        (successes, failures) = (0, 0);
                        probe_timer = tokio::time::interval_at(
                            tokio::time::Instant::now() + initial_delay,
                            period,
                        );
                        // Without a probe the container is ready once it runs.
                        status.ready = probe_get.is_none();
                        info!(pod = %key, %ip, restarts = status.restart_count, "member started");
                        if starts > 1 || status.ready {
                            self.patch_member(&pods, &pod, &started, cname, &status)
                                .await?;
                        }
                    }
                    Err(failure) => {
                        crashes_in_a_row = crashes_in_a_row.saturating_add(1);
                        let backoff = restart_backoff(crashes_in_a_row);
                        warn!(pod = %key, reason = failure.reason, retry_in = ?backoff,
                            "member could not be started: {}", failure.message);
                        status.failed_to_start(failure.reason, failure.message);
                        restart_at = Some(tokio::time::Instant::now() + backoff);
                        self.patch_member(&pods, &pod, &started, cname, &status)
                            .await?;
                    }
                }
            }

            tokio::select! {
                changed = rx.changed() => {
                    let gone = changed.is_err() || rx.borrow().is_none();
                    if gone {
                        // Force-deleted from the API: the container is killed at once.
                        if let Some(mut m) = member.take() {
                            m.kill(&self.world);
                            self.forget_member(&key, &m);
                        }
                        return Ok(());
                    }
                    let cur = rx.borrow().clone().expect("checked above");
                    if terminating.is_none()
                        && cur.metadata.deletion_timestamp.is_none()
                        && pod_ready_condition(&cur).is_some_and(|r| r != status.reported_ready())
                    {
                        // Someone else changed Ready (the node lifecycle controller, after a
                        // missed heartbeat): report what the probe says, as a kubelet would.
                        self.patch_member(&pods, &pod, &started, cname, &status).await?;
                    }
                    if terminating.is_none() && cur.metadata.deletion_timestamp.is_some() {
                        let grace = cur.metadata.deletion_grace_period_seconds.unwrap_or(30).max(0) as u64;
                        let deadline = tokio::time::Instant::now() + Duration::from_secs(grace);
                        terminating = Some(deadline);
                        // A container that is not running gets neither hook nor signal.
                        if let Some(m) = member.as_mut().filter(|_| status.is_running()) {
                            info!(pod = %key, grace, "terminating: preStop, then SIGTERM");
                            self.run_pre_stop(&container, ip, Duration::from_secs(grace)).await;
                            m.terminate(&self.world).await;
                        }
                    }
                }
                _ = probe_timer.tick(), if probe_get.is_some() && status.is_running() => {
                    let ok = self.probe(probe_get.as_ref().expect("guarded"), &container, ip, timeout).await;
                    *self.world.lock().probes.entry(key.clone()).or_insert(0) += 1;
                    if ok { successes += 1; failures = 0; } else { failures += 1; successes = 0; }
                    let ready = status.ready;
                    let next = if ready { failures < failure_threshold } else { successes >= success_threshold };
                    if next != ready {
                        status.ready = next;
                        debug!(pod = %key, ready = next, "readiness changed");
                        self.patch_member(&pods, &pod, &started, cname, &status).await?;
                    }
                }
                _ = exit_check.tick() => {
                    if let Some(deadline) = terminating {
                        if member.as_mut().is_none_or(|m| m.exited(&self.world)) {
                            info!(pod = %key, "member exited; removing pod");
                            if let Some(m) = member.take() {
                                self.forget_member(&key, &m);
                            }
                            return self.delete_now(&pod).await;
                        }
                        if tokio::time::Instant::now() >= deadline {
                            info!(pod = %key, "grace period over: SIGKILL");
                            if let Some(mut m) = member.take() {
                                m.kill(&self.world);
                                self.forget_member(&key, &m);
                            }
                            return self.delete_now(&pod).await;
                        }
                    } else if status.is_running()
                        && let Some(exit) = member.as_mut().and_then(|m| m.exit(&self.world))
                    {
                        // It exited on its own: restart it in place, as restartPolicy Always
                        // does, after the kubelet's back-off.
                        crashes_in_a_row = next_crash_count(crashes_in_a_row, run_since.elapsed());
                        let backoff = restart_backoff(crashes_in_a_row);
                        warn!(pod = %key, code = exit.code, retry_in = ?backoff,
                            "member exited unexpectedly: {}", exit.message);
                        let started_at = match status.state {
                            ContainerState::Running { started_at } => started_at,
                            _ => started,
                        };
                        status.exited(
                            Terminated::new(exit.code, exit.message, started_at, Timestamp::now()),
                            backoff,
                            crash_loop_message(backoff, cname, &pod),
                        );
                        restart_at = Some(tokio::time::Instant::now() + backoff);
                        self.patch_member(&pods, &pod, &started, cname, &status).await?;
                    }
                }
            }
        }
    }

    async fn wait_and_finish_plain(
        &self,
        rx: &mut watch::Receiver<Option<Pod>>,
        _pods: &Api<Pod>,
        pod: &Pod,
    ) -> anyhow::Result<()> {
        loop {
            let deleting = match &*rx.borrow() {
                None => return Ok(()),
                Some(p) => p.metadata.deletion_timestamp.is_some(),
            };
            if deleting {
                return self.delete_now(pod).await;
            }
            if rx.changed().await.is_err() {
                return Ok(());
            }
        }
    }

    /// Start the member process: `start` counts the attempts for this pod (for the log).
    async fn start_member(
        &self,
        pod: &Pod,
        container: &Container,
        key: &str,
        ip: Ipv4Addr,
        start: u64,
        restart_count: i32,
    ) -> Result<MemberProcess, StartFailure> {
        let ns = pod.namespace().unwrap_or_default();
        let env = resolve_env(pod, container, ip);
        let node_id = env
            .get("MAREKVS_NODE_ID")
            .cloned()
            .unwrap_or_else(|| ordinal_of(pod));
        let replicas_n: usize = env
            .get("MAREKVS_REPLICAS_N")
            .and_then(|v| v.parse().ok())
            .unwrap_or(2);
        let cluster = format!(
            "{ns}/{}",
            env.get("MAREKVS_SEEDS").cloned().unwrap_or_default()
        );
        let (volume, disk_bytes) = self
            .volume_of(pod)
            .await
            .map_err(|e| StartFailure::create(format!("{e:#}")))?;

        if let Some(bin) = &self.real_bin {
            let data_dir = self.volumes_dir.join(&volume);
            std::fs::create_dir_all(&data_dir).map_err(|e| {
                StartFailure::create(format!("creating {}: {e}", data_dir.display()))
            })?;
            let seeds: Vec<String> = {
                let mut reg = self.real_members.lock().unwrap_or_else(|e| e.into_inner());
                let members = reg.entry(cluster.clone()).or_default();
                let seeds = members
                    .iter()
                    .filter(|(k, _)| k.as_str() != key)
                    .map(|(_, ip)| format!("{ip}:{GOSSIP_PORT}"))
                    .collect();
                members.insert(key.to_string(), ip);
                seeds
            };
            let add = NodeEnv {
                ip,
                node_id: &node_id,
                data_dir: &data_dir,
                seeds: &seeds,
            };
            let (env, warnings) = node_env(&env, &add);
            for w in warnings {
                warn!(pod = %key, "{w}");
            }
            let log = PodLog::new(&self.pod_logs_dir, &ns, &pod.name_any(), &container.name);
            let header = start_header(start, restart_count, &Timestamp::now(), bin);
            let args = container.args.clone().unwrap_or_default();
            return match RealNode::spawn(bin, &env, &args, &log, &header) {
                Ok(node) => Ok(MemberProcess::Real {
                    node: Box::new(node),
                    cluster,
                }),
                Err(e) => {
                    // Not running: not a seed for the others either.
                    self.forget_real(&cluster, key);
                    Err(e)
                }
            };
        }

        self.world.lock().start_member(
            &cluster,
            MemberSpec {
                key: key.to_string(),
                node_id,
                replicas_n,
                volume,
                disk_bytes,
                faults: Faults::default(),
                addr: ip.to_string(),
            },
        );
        let servers = async {
            let http = node_http::serve(self.world.clone(), key.to_string(), IpAddr::V4(ip))
                .await
                .with_context(|| format!("binding {ip}:{METRICS_PORT}"))?;
            let requirepass = env.get("MAREKVS_REQUIREPASS").cloned();
            let resp = node_resp::serve(
                self.world.clone(),
                key.to_string(),
                IpAddr::V4(ip),
                requirepass,
            )
            .await
            .with_context(|| format!("binding {ip}:{RESP_PORT}"))?;
            anyhow::Ok((http, resp))
        };
        match servers.await {
            Ok((http, resp)) => Ok(MemberProcess::Sim {
                key: key.to_string(),
                _http: http,
                _resp: resp,
            }),
            Err(e) => {
                // A member nobody can reach is no member: take it out of the model again.
                self.world.lock().remove_member(key);
                Err(StartFailure::create(format!("{e:#}")))
            }
        }
    }

    fn forget_member(&self, key: &str, member: &MemberProcess) {
        match member {
            MemberProcess::Sim { .. } => self.world.lock().remove_member(key),
            MemberProcess::Real { cluster, .. } => self.forget_real(cluster, key),
        }
    }

    fn forget_real(&self, cluster: &str, key: &str) {
        let mut reg = self.real_members.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = reg.get_mut(cluster) {
            m.remove(key);
        }
    }

    /// The volume a member keeps its data on: its PVC's UID (an emptyDir lives as long as the pod).
    async fn volume_of(&self, pod: &Pod) -> anyhow::Result<(String, u64)> {
        let claim = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .and_then(|vs| vs.iter().find_map(|v| v.persistent_volume_claim.as_ref()))
            .map(|c| c.claim_name.clone());
        let Some(claim) = claim else {
            return Ok((format!("pod-{}", pod.uid().unwrap_or_default()), 1 << 30));
        };
        let pvcs: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let pvc = pvcs
            .get(&claim)
            .await
            .with_context(|| format!("reading PVC {claim}"))?;
        let bytes = pvc
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .and_then(|q| quantity_bytes(&q.0))
            .map(|b| b as u64)
            .unwrap_or(1 << 30);
        Ok((
            pvc.uid().ok_or_else(|| anyhow!("PVC {claim} has no uid"))?,
            bytes,
        ))
    }

    async fn run_pre_stop(&self, container: &Container, ip: Ipv4Addr, grace: Duration) {
        let Some(get) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.http_get.as_ref())
        else {
            return;
        };
        let Some(url) = probe_url(get, container, ip) else {
            return;
        };
        match self
            .http
            .get(&url)
            .timeout(grace.max(Duration::from_secs(1)))
            .send()
            .await
        {
            Ok(r) => info!(%url, status = %r.status(), "preStop hook"),
            Err(e) => warn!(%url, "preStop hook failed: {e}"),
        }
    }

    async fn probe(
        &self,
        get: &HTTPGetAction,
        container: &Container,
        ip: Ipv4Addr,
        timeout: Duration,
    ) -> bool {
        let Some(url) = probe_url(get, container, ip) else {
            return false;
        };
        match self.http.get(&url).timeout(timeout).send().await {
            // As the kubelet: any 2xx or 3xx is success.
            Ok(r) => r.status().is_success() || r.status().is_redirection(),
            Err(_) => false,
        }
    }

    /// The pod's whole status; `member` is the marekvs container's name and status.
    async fn patch_status(
        &self,
        pods: &Api<Pod>,
        pod: &Pod,
        ip: Ipv4Addr,
        host_ip: &str,
        started: &Timestamp,
        member: Option<(&str, &MemberStatus)>,
    ) -> anyhow::Result<()> {
        let now = Timestamp::now().to_string();
        let ready = member.is_none_or(|(_, m)| m.reported_ready());
        let ready_s = if ready { "True" } else { "False" };
        let patch = json!({
            "status": {
                "phase": "Running",
                "podIP": ip.to_string(),
                "podIPs": [{"ip": ip.to_string()}],
                "hostIP": host_ip,
                "hostIPs": [{"ip": host_ip}],
                "startTime": started.to_string(),
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready_s, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready_s, "lastTransitionTime": now},
                ],
                "containerStatuses": container_statuses(pod, member, started),
            }
        });
        let (name, params, patch) = (
            pod.name_any(),
            PatchParams::default(),
            Patch::Strategic(patch),
        );
        with_api_retry(|| pods.patch_status(&name, &params, &patch))
            .await
            .with_context(|| format!("patching status of {name}"))?;
        Ok(())
    }

    /// The member container's status and the readiness that follows from it.
    async fn patch_member(
        &self,
        pods: &Api<Pod>,
        pod: &Pod,
        started: &Timestamp,
        container: &str,
        member: &MemberStatus,
    ) -> anyhow::Result<()> {
        let now = Timestamp::now().to_string();
        let ready_s = if member.reported_ready() {
            "True"
        } else {
            "False"
        };
        let patch = json!({
            "status": {
                "conditions": [
                    {"type": "ContainersReady", "status": ready_s, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready_s, "lastTransitionTime": now},
                ],
                "containerStatuses": container_statuses(pod, Some((container, member)), started),
            }
        });
        let (name, params, patch) = (
            pod.name_any(),
            PatchParams::default(),
            Patch::Strategic(patch),
        );
        match with_api_retry(|| pods.patch_status(&name, &params, &patch)).await {
            Ok(_) => Ok(()),
            // The pod may be gone already; the watch will tell the worker.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete_now(&self, pod: &Pod) -> anyhow::Result<()> {
        let pods: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let name = pod.name_any();
        match with_api_retry(|| pods.delete(&name, &dp)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Like a kubelet, keep trying while the API server is away or overloaded: transport errors,
/// 429 and 5xx are retried (0.2 s, doubling to 5 s) for up to two minutes. Without this, a pod
/// whose final delete fell into an API server restart stayed Terminating for ever.
async fn with_api_retry<T, F, Fut>(mut call: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut delay = Duration::from_millis(200);
    loop {
        match call().await {
            Err(e) if is_transient(&e) && tokio::time::Instant::now() < deadline => {
                debug!("API call failed, retrying in {delay:?}: {e}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            result => return result,
        }
    }
}

fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::SerdeError(_) => false,
        _ => true,
    }
}

/// The member process behind a pod.
enum MemberProcess {
    /// A simulated member: its HTTP and RESP servers stop when it is dropped.
    Sim {
        key: String,
        _http: NodeServer,
        _resp: RespServer,
    },
    Real {
        node: Box<RealNode>,
        cluster: String,
    },
}

impl MemberProcess {
    async fn terminate(&mut self, world: &SharedWorld) {
        match self {
            MemberProcess::Sim { key, .. } => world.lock().terminate(key),
            MemberProcess::Real { node, .. } => node.terminate().await,
        }
    }

    fn kill(&mut self, world: &SharedWorld) {
        match self {
            MemberProcess::Sim { key, .. } => world.lock().kill(key),
            MemberProcess::Real { node, .. } => node.kill(),
        }
    }

    fn exited(&mut self, world: &SharedWorld) -> bool {
        match self {
            MemberProcess::Sim { key, .. } => !world.lock().is_running(key),
            MemberProcess::Real { node, .. } => node.exited(),
        }
    }

    /// How it ended, once it has. A simulated member only ends on its own when the control
    /// API kills it.
    fn exit(&mut self, world: &SharedWorld) -> Option<Exit> {
        match self {
            MemberProcess::Sim { key, .. } => (!world.lock().is_running(key)).then(|| Exit {
                code: 137,
                message: "killed by the simulator control API (kill -9)".into(),
            }),
            MemberProcess::Real { node, .. } => node.exit(),
        }
    }
}

fn pod_ready_condition(pod: &Pod) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

/// The container that runs marekvs: it has `MAREKVS_REPLICAS_N` in its env or exposes 9121.
fn member_container(pod: &Pod) -> Option<&Container> {
    pod.spec.as_ref()?.containers.iter().find(|c| {
        c.env
            .as_ref()
            .is_some_and(|env| env.iter().any(|e| e.name == "MAREKVS_REPLICAS_N"))
            || c.ports.as_ref().is_some_and(|ps| {
                ps.iter()
                    .any(|p| p.container_port == i32::from(METRICS_PORT))
            })
    })
}

/// The node's InternalIP, which kwok reports (a loopback address in this harness).
fn node_ip(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_else(|| "127.0.0.1".into())
}

fn probe_url(get: &HTTPGetAction, container: &Container, ip: Ipv4Addr) -> Option<String> {
    let port = match &get.port {
        IntOrString::Int(p) => *p,
        IntOrString::String(name) => {
            container
                .ports
                .as_ref()?
                .iter()
                .find(|p| p.name.as_deref() == Some(name))?
                .container_port
        }
    };
    let host = get.host.clone().unwrap_or_else(|| ip.to_string());
    let path = get.path.clone().unwrap_or_else(|| "/".into());
    Some(format!("http://{host}:{port}{path}"))
}

/// The container's environment with the downward-API fields this harness can answer.
fn resolve_env(pod: &Pod, container: &Container, ip: Ipv4Addr) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for e in container.env.as_deref().unwrap_or_default() {
        let value = if let Some(v) = &e.value {
            Some(v.clone())
        } else if let Some(f) = e.value_from.as_ref().and_then(|vf| vf.field_ref.as_ref()) {
            match f.field_path.as_str() {
                "metadata.name" => Some(pod.name_any()),
                "metadata.namespace" => pod.namespace(),
                "status.podIP" => Some(ip.to_string()),
                "spec.nodeName" => pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                _ => None,
            }
        } else {
            None
        };
        if let Some(v) = value {
            env.insert(e.name.clone(), v);
        }
    }
    env
}

/// Node id from the hostname ordinal (`demo-3` → `3`), as a real node derives it.
fn ordinal_of(pod: &Pod) -> String {
    let host = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.name_any());
    match host.rsplit_once('-') {
        Some((_, ord)) if !ord.is_empty() && ord.chars().all(|c| c.is_ascii_digit()) => {
            ord.to_string()
        }
        _ => host,
    }
}

fn parse_cidr(cidr: &str) -> anyhow::Result<(Ipv4Addr, u8)> {
    let (ip, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| anyhow!("bad CIDR {cidr}"))?;
    let prefix: u8 = prefix.parse()?;
    if !(8..=30).contains(&prefix) {
        bail!("CIDR {cidr}: prefix must be between /8 and /30");
    }
    Ok((ip.parse()?, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_refuse_silly_prefixes() {
        assert_eq!(
            parse_cidr("127.1.0.0/24").unwrap(),
            (Ipv4Addr::new(127, 1, 0, 0), 24)
        );
        assert!(parse_cidr("127.1.0.0/32").is_err());
        assert!(parse_cidr("127.1.0.0").is_err());
    }

    #[test]
    fn node_id_is_the_hostname_ordinal() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("demo-12".into());
        assert_eq!(ordinal_of(&pod), "12");
        pod.metadata.name = Some("standalone".into());
        assert_eq!(ordinal_of(&pod), "standalone");
    }
}
