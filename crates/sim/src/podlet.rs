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
//! With an operator binary (`--operator-bin`), a pod whose container runs the operator image
//! is run as that binary, with the same probes, restarts and termination
//! ([`crate::operator_pod`]). Other pods that are not marekvs members (no container with
//! `MAREKVS_REPLICAS_N` or port 9121) are reported Running and Ready, as a container without
//! probes would be.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::ops::ControlFlow;
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
use tokio::time::Instant;
use tracing::{debug, info, warn};

use marekvs_core::units::quantity_bytes;

use crate::container_state::{
    ContainerState, MemberStatus, Terminated, container_statuses, crash_loop_message,
    next_crash_count, restart_backoff,
};
use crate::model::{Faults, MemberSpec};
use crate::node_http::{self, METRICS_PORT, NodeServer};
use crate::node_resp::{self, RESP_PORT, RespServer};
use crate::operator_pod;
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
    /// Run pods of the operator image as this binary (`None`: they are reported Running only).
    pub operator_bin: Option<PathBuf>,
    http: reqwest::Client,
    ips: Mutex<IpPool>,
    /// Real-node members: cluster key → member key → pod IP (to rewrite seeds).
    real_members: RealMembers,
}

/// Real-node members: cluster key → member key → pod IP. Shared with each pod's [`MemberSlot`].
type RealMembers = Arc<Mutex<BTreeMap<String, BTreeMap<String, Ipv4Addr>>>>;

impl Podlet {
    pub fn new(
        client: Client,
        world: SharedWorld,
        real_bin: Option<PathBuf>,
        volumes_dir: PathBuf,
        pod_logs_dir: PathBuf,
        operator_bin: Option<PathBuf>,
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
            operator_bin,
            http,
            ips: Mutex::default(),
            real_members: Arc::new(Mutex::new(BTreeMap::new())),
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
        self.ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allocate(base, prefix, wanted)
    }

    fn free_ip(&self, ip: Ipv4Addr) {
        self.ips.lock().unwrap_or_else(|e| e.into_inner()).free(ip);
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
        let host_ip = node_ip(&node);
        let started = Timestamp::now();
        let restarts: i32 = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .map(|c| c.restart_count)
            .unwrap_or(0);

        let container = member_container(&pod).or_else(|| self.operator_container(&pod));
        let Some(container) = container.cloned() else {
            // Not a marekvs member: run it as a container without probes.
            self.patch_status(&pods, &pod, ip, &host_ip, &started, None)
                .await?;
            info!(pod = %key, %ip, "running (not a marekvs member)");
            return self.wait_and_finish_plain(rx, &pods, &pod).await;
        };

        // Report the pod Running first: if it is gone already, no member is started for it.
        let status = MemberStatus::running(started, restarts, None);
        let member = Some((container.name.as_str(), &status));
        self.patch_status(&pods, &pod, ip, &host_ip, &started, member)
            .await?;
        // However `run` returns, dropping it stops and forgets its member.
        let mut run = MemberPod::new(self, pods, pod, container, key, ip, started, status);
        run.run(rx).await
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
        if self.is_operator(container) {
            return self
                .start_operator(pod, container, ip, start, restart_count)
                .await;
        }
        let ns = pod.namespace().unwrap_or_default();
        let mut env = resolve_env(pod, container, ip);
        env.extend(self.secret_env(&ns, container).await?);
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
            let (env, warnings) = match node_env(&env, &add) {
                Ok(composed) => composed,
                Err(e) => {
                    // Not running: not a seed for the others either.
                    self.forget_real(&cluster, key);
                    return Err(e);
                }
            };
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

    fn forget_real(&self, cluster: &str, key: &str) {
        forget_real(&self.real_members, cluster, key);
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
    /// The operator binary, for a pod of the operator image ([`crate::operator_pod`]).
    Operator { node: Box<RealNode> },
}

impl MemberProcess {
    async fn terminate(&mut self, world: &SharedWorld) {
        match self {
            MemberProcess::Sim { key, .. } => world.lock().terminate(key),
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => {
                node.terminate().await
            }
        }
    }

    fn kill(&mut self, world: &SharedWorld) {
        match self {
            MemberProcess::Sim { key, .. } => world.lock().kill(key),
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => node.kill(),
        }
    }

    fn exited(&mut self, world: &SharedWorld) -> bool {
        match self {
            MemberProcess::Sim { key, .. } => !world.lock().is_running(key),
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => node.exited(),
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
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => node.exit(),
        }
    }
}

fn forget_real(registry: &RealMembers, cluster: &str, key: &str) {
    let mut reg = registry.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = reg.get_mut(cluster) {
        m.remove(key);
    }
}

/// The one place a pod's member process is kept. Whenever it is emptied or dropped (the pod's
/// worker returned, failed on any `?`, or was cancelled), the process is killed and taken out
/// of the model or the seeds: a member left behind would stay up in the model (its volume still
/// answering reads and counting as a copy) or stay a seed, on a pod IP that is handed out again.
struct MemberSlot {
    world: SharedWorld,
    real_members: RealMembers,
    key: String,
    process: Option<MemberProcess>,
}

impl MemberSlot {
    fn new(world: SharedWorld, real_members: RealMembers, key: String) -> Self {
        MemberSlot {
            world,
            real_members,
            key,
            process: None,
        }
    }

    fn set(&mut self, process: MemberProcess) {
        self.stop();
        self.process = Some(process);
    }

    /// SIGKILL (nothing, if it has exited already) and forget it.
    fn stop(&mut self) {
        let Some(mut m) = self.process.take() else {
            return;
        };
        m.kill(&self.world);
        match &m {
            MemberProcess::Sim { .. } => self.world.lock().remove_member(&self.key),
            MemberProcess::Real { cluster, .. } => {
                forget_real(&self.real_members, cluster, &self.key)
            }
            MemberProcess::Operator { .. } => {}
        }
        // Dropping it frees its ports before a new process binds them.
        drop(m);
    }

    /// Whether there is no process, or it has exited.
    fn exited(&mut self) -> bool {
        let world = &self.world;
        self.process.as_mut().is_none_or(|m| m.exited(world))
    }

    /// How the process ended, once it has.
    fn exit(&mut self) -> Option<Exit> {
        let world = &self.world;
        self.process.as_mut()?.exit(world)
    }

    async fn terminate(&mut self) {
        if let Some(m) = self.process.as_mut() {
            m.terminate(&self.world).await;
        }
    }
}

impl Drop for MemberSlot {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The readiness probe's settings, with the API's defaults.
#[derive(Clone, Debug, PartialEq)]
struct ProbeSpec {
    get: Option<HTTPGetAction>,
    period: Duration,
    timeout: Duration,
    success_threshold: i32,
    failure_threshold: i32,
    initial_delay: Duration,
}

impl ProbeSpec {
    fn of(container: &Container) -> Self {
        let p = container.readiness_probe.as_ref();
        let secs = |v: Option<i32>, default: i32, min: i32| {
            Duration::from_secs(v.unwrap_or(default).max(min) as u64)
        };
        ProbeSpec {
            get: p.and_then(|p| p.http_get.clone()),
            period: secs(p.and_then(|p| p.period_seconds), 10, 1),
            timeout: secs(p.and_then(|p| p.timeout_seconds), 1, 1),
            success_threshold: p.and_then(|p| p.success_threshold).unwrap_or(1).max(1),
            failure_threshold: p.and_then(|p| p.failure_threshold).unwrap_or(3).max(1),
            initial_delay: secs(p.and_then(|p| p.initial_delay_seconds), 0, 0),
        }
    }

    fn timer(&self) -> tokio::time::Interval {
        tokio::time::interval_at(Instant::now() + self.initial_delay, self.period)
    }
}

/// A member pod while its worker runs it: the container's status and what decides the next
/// start, probe and termination step.
struct MemberPod {
    podlet: Arc<Podlet>,
    pods: Api<Pod>,
    pod: Pod,
    container: Container,
    key: String,
    ip: Ipv4Addr,
    started: Timestamp,
    status: MemberStatus,
    probe: ProbeSpec,
    successes: i32,
    failures: i32,
    probe_timer: tokio::time::Interval,
    /// Set once the pod is being deleted: when the grace period ends.
    terminating: Option<Instant>,
    /// The process; kept after it exits (a simulated member stays in the model, a real one
    /// in its cluster's seeds) until it is started again or the pod is done.
    member: MemberSlot,
    /// Set while the member is down: when it may be started again.
    restart_at: Option<Instant>,
    /// Whether the container has run before: only then does a start count as a restart.
    has_run: bool,
    crashes_in_a_row: u32,
    run_since: Instant,
    starts: u64,
}

impl MemberPod {
    #[allow(clippy::too_many_arguments)]
    fn new(
        podlet: Arc<Podlet>,
        pods: Api<Pod>,
        pod: Pod,
        container: Container,
        key: String,
        ip: Ipv4Addr,
        started: Timestamp,
        status: MemberStatus,
    ) -> Self {
        let probe = ProbeSpec::of(&container);
        let member = MemberSlot::new(
            podlet.world.clone(),
            podlet.real_members.clone(),
            key.clone(),
        );
        MemberPod {
            podlet,
            pods,
            pod,
            container,
            key,
            ip,
            started,
            status,
            probe_timer: probe.timer(),
            probe,
            successes: 0,
            failures: 0,
            terminating: None,
            member,
            restart_at: Some(Instant::now()),
            has_run: false,
            crashes_in_a_row: 0,
            run_since: Instant::now(),
            starts: 0,
        }
    }

    /// Until the pod is gone: start the member, follow the pod, its probe and its process.
    async fn run(&mut self, rx: &mut watch::Receiver<Option<Pod>>) -> anyhow::Result<()> {
        let mut exit_check = tokio::time::interval(Duration::from_millis(200));
        loop {
            if self.may_start() {
                self.start().await?;
            }
            let probing = self.probe.get.is_some() && self.status.is_running();
            let flow = tokio::select! {
                changed = rx.changed() => {
                    let cur = if changed.is_ok() { rx.borrow().clone() } else { None };
                    self.on_pod_change(cur).await?
                }
                _ = self.probe_timer.tick(), if probing => {
                    self.on_probe_tick().await?;
                    ControlFlow::Continue(())
                }
                _ = exit_check.tick() => self.on_exit_check().await?,
            };
            if flow.is_break() {
                return Ok(());
            }
        }
    }

    /// The member is down, its back-off is over, and the pod is not being deleted.
    /// `hold_down` keeps a member that has run down after it exits.
    fn may_start(&self) -> bool {
        self.terminating.is_none()
            && self.restart_at.is_some_and(|at| Instant::now() >= at)
            && !(self.has_run && self.podlet.world.lock().faults(&self.key).hold_down)
    }

    /// Start (or restart) the member; a failure to start waits out the back-off.
    async fn start(&mut self) -> anyhow::Result<()> {
        self.restart_at = None;
        self.member.stop();
        self.starts += 1;
        let restart_count = self.status.restart_count + i32::from(self.has_run);
        let started = self
            .podlet
            .start_member(
                &self.pod,
                &self.container,
                &self.key,
                self.ip,
                self.starts,
                restart_count,
            )
            .await;
        match started {
            Ok(m) => {
                self.member.set(m);
                // The first start is the one the pod status already reports.
                let at = if self.starts == 1 {
                    self.started
                } else {
                    Timestamp::now()
                };
                self.status.start(at, self.has_run);
                self.has_run = true;
                self.run_since = Instant::now();
                (self.successes, self.failures) = (0, 0);
                self.probe_timer = self.probe.timer();
                // Without a probe the container is ready once it runs.
                self.status.ready = self.probe.get.is_none();
                info!(pod = %self.key, ip = %self.ip, restarts = self.status.restart_count, "member started");
                if self.starts > 1 || self.status.ready {
                    self.report().await?;
                }
            }
            Err(failure) => {
                self.crashes_in_a_row = self.crashes_in_a_row.saturating_add(1);
                let backoff = restart_backoff(self.crashes_in_a_row);
                warn!(pod = %self.key, reason = failure.reason, retry_in = ?backoff,
                    "member could not be started: {}", failure.message);
                self.status.failed_to_start(failure.reason, failure.message);
                self.restart_at = Some(Instant::now() + backoff);
                self.report().await?;
            }
        }
        Ok(())
    }

    /// The pod changed in the API (`None`: it is gone): a Ready someone else set, or deletion.
    async fn on_pod_change(&mut self, cur: Option<Pod>) -> anyhow::Result<ControlFlow<()>> {
        let Some(cur) = cur else {
            // Force-deleted from the API: the container is killed at once.
            self.member.stop();
            return Ok(ControlFlow::Break(()));
        };
        if self.terminating.is_some() {
            return Ok(ControlFlow::Continue(()));
        }
        if cur.metadata.deletion_timestamp.is_some() {
            self.begin_termination(&cur).await;
        } else if pod_ready_condition(&cur).is_some_and(|r| r != self.status.reported_ready()) {
            // Someone else changed Ready (the node lifecycle controller, after a missed
            // heartbeat): report what the probe says, as a kubelet would.
            self.report().await?;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The pod is being deleted: preStop hook and SIGTERM, then wait for the exit (or the end
    /// of the grace period, see [`Self::on_exit_check`]).
    async fn begin_termination(&mut self, cur: &Pod) {
        let grace = cur
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or(30)
            .max(0) as u64;
        self.terminating = Some(Instant::now() + Duration::from_secs(grace));
        // A container that is not running gets neither hook nor signal.
        if self.member.process.is_some() && self.status.is_running() {
            info!(pod = %self.key, grace, "terminating: preStop, then SIGTERM");
            self.podlet
                .run_pre_stop(&self.container, self.ip, Duration::from_secs(grace))
                .await;
            self.member.terminate().await;
        }
    }

    async fn on_probe_tick(&mut self) -> anyhow::Result<()> {
        let Some(get) = &self.probe.get else {
            return Ok(());
        };
        let ok = self
            .podlet
            .probe(get, &self.container, self.ip, self.probe.timeout)
            .await;
        *self
            .podlet
            .world
            .lock()
            .probes
            .entry(self.key.clone())
            .or_insert(0) += 1;
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let ready = self.status.ready;
        let next = if ready {
            self.failures < self.probe.failure_threshold
        } else {
            self.successes >= self.probe.success_threshold
        };
        if next != ready {
            self.status.ready = next;
            debug!(pod = %self.key, ready = next, "readiness changed");
            self.report().await?;
        }
        Ok(())
    }

    /// While terminating: remove the pod once the member is gone. Otherwise: notice an exit.
    async fn on_exit_check(&mut self) -> anyhow::Result<ControlFlow<()>> {
        if let Some(deadline) = self.terminating {
            if self.member.exited() {
                info!(pod = %self.key, "member exited; removing pod");
            } else if Instant::now() >= deadline {
                info!(pod = %self.key, "grace period over: SIGKILL");
            } else {
                return Ok(ControlFlow::Continue(()));
            }
            self.member.stop();
            self.podlet.delete_now(&self.pod).await?;
            return Ok(ControlFlow::Break(()));
        }
        if self.status.is_running()
            && let Some(exit) = self.member.exit()
        {
            self.on_exit(exit).await?;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// It exited on its own: restart it in place, as restartPolicy Always does, after the
    /// kubelet's back-off.
    async fn on_exit(&mut self, exit: Exit) -> anyhow::Result<()> {
        self.crashes_in_a_row = next_crash_count(self.crashes_in_a_row, self.run_since.elapsed());
        let backoff = restart_backoff(self.crashes_in_a_row);
        warn!(pod = %self.key, code = exit.code, retry_in = ?backoff,
            "member exited unexpectedly: {}", exit.message);
        let started_at = match self.status.state {
            ContainerState::Running { started_at } => started_at,
            _ => self.started,
        };
        let message = crash_loop_message(backoff, &self.container.name, &self.pod);
        self.status.exited(
            Terminated::new(exit.code, exit.message, started_at, Timestamp::now()),
            backoff,
            message,
        );
        self.restart_at = Some(Instant::now() + backoff);
        self.report().await
    }

    /// Patch the member container's status and readiness.
    async fn report(&self) -> anyhow::Result<()> {
        self.podlet
            .patch_member(
                &self.pods,
                &self.pod,
                &self.started,
                &self.container.name,
                &self.status,
            )
            .await
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

impl Podlet {
    /// The container's variables from Secret keys (`valueFrom.secretKeyRef`), read as a
    /// kubelet does: a missing Secret or key (not optional) keeps the container from starting.
    async fn secret_env(
        &self,
        ns: &str,
        container: &Container,
    ) -> Result<BTreeMap<String, String>, StartFailure> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), ns);
        let mut env = BTreeMap::new();
        for e in container.env.as_deref().unwrap_or_default() {
            let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|vf| vf.secret_key_ref.as_ref())
            else {
                continue;
            };
            let value = match secrets.get_opt(&r.name).await {
                Ok(s) => s
                    .and_then(|s| s.data)
                    .and_then(|d| d.get(&r.key).cloned())
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned()),
                Err(err) => {
                    return Err(StartFailure::create(format!(
                        "reading secret {ns}/{}: {err}",
                        r.name
                    )));
                }
            };
            match value {
                Some(v) => {
                    env.insert(e.name.clone(), v);
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(StartFailure::create(format!(
                        "secret {ns}/{} has no key {} (CreateContainerConfigError)",
                        r.name, r.key
                    )));
                }
            }
        }
        Ok(env)
    }
}

impl Podlet {
    /// With `--operator-bin`: the container that runs the operator image.
    fn operator_container<'a>(&self, pod: &'a Pod) -> Option<&'a Container> {
        self.operator_bin.as_ref()?;
        pod.spec
            .as_ref()?
            .containers
            .iter()
            .find(|c| self.is_operator(c))
    }

    fn is_operator(&self, container: &Container) -> bool {
        self.operator_bin.is_some()
            && container
                .image
                .as_deref()
                .is_some_and(operator_pod::is_operator_image)
    }

    /// Run the operator binary as the container would run the image: its args (after the
    /// image's entrypoint), its env, its listener on the pod IP, the ServiceAccount's token.
    async fn start_operator(
        &self,
        pod: &Pod,
        container: &Container,
        ip: Ipv4Addr,
        start: u64,
        restart_count: i32,
    ) -> Result<MemberProcess, StartFailure> {
        let bin = self
            .operator_bin
            .as_ref()
            .ok_or_else(|| StartFailure::create("no --operator-bin"))?;
        let ns = pod.namespace().unwrap_or_default();
        let mut env = resolve_env(pod, container, ip);
        env.extend(self.secret_env(&ns, container).await?);
        env.insert("HOSTNAME".into(), pod.name_any());
        let args = operator_args(container).map_err(StartFailure::create)?;
        let (args, mut env) =
            operator_pod::on_pod_ip(&args, &env, ip).map_err(StartFailure::create)?;
        let kubeconfig = self
            .service_account_kubeconfig(pod)
            .await
            .map_err(|e| StartFailure::create(format!("{e:#}")))?;
        env.insert("KUBECONFIG".into(), kubeconfig.display().to_string());
        let log = PodLog::new(&self.pod_logs_dir, &ns, &pod.name_any(), &container.name);
        let header = start_header(start, restart_count, &Timestamp::now(), bin);
        let node = RealNode::spawn(bin, &env, &args, &log, &header)?;
        Ok(MemberProcess::Operator {
            node: Box::new(node),
        })
    }

    /// What stands in for the in-cluster config: a kubeconfig with a token of the pod's
    /// ServiceAccount (TokenRequest, bound to the pod, as the kubelet's projected token is) and
    /// the API server and CA of the podlet's own kubeconfig. Written 0600 beside the volumes.
    async fn service_account_kubeconfig(&self, pod: &Pod) -> anyhow::Result<PathBuf> {
        use k8s_openapi::api::authentication::v1::{
            BoundObjectReference, TokenRequest, TokenRequestSpec,
        };
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let ns = pod.namespace().unwrap_or_default();
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(24 * 3600),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.name_any()),
                    uid: pod.uid(),
                }),
            },
            ..TokenRequest::default()
        };
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), &ns);
        let token = accounts
            .create_token_request(&account, &Default::default(), &request)
            .await
            .with_context(|| format!("requesting a token of ServiceAccount {ns}/{account}"))?
            .status
            .map(|s| s.token)
            .ok_or_else(|| anyhow!("the TokenRequest for {ns}/{account} has no token"))?;
        let config = kube::config::Kubeconfig::read().context("reading the podlet's KUBECONFIG")?;
        let context = config.current_context.clone().unwrap_or_default();
        let cluster_name = config
            .contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone())
            .ok_or_else(|| anyhow!("the podlet's KUBECONFIG has no context {context:?}"))?;
        let cluster = config
            .clusters
            .iter()
            .find(|c| c.name == cluster_name)
            .and_then(|c| c.cluster.as_ref())
            .ok_or_else(|| anyhow!("the podlet's KUBECONFIG has no cluster {cluster_name:?}"))?;
        let kubeconfig =
            operator_pod::kubeconfig(&serde_json::to_value(cluster)?, &account, &token);
        let dir = self
            .volumes_dir
            .parent()
            .unwrap_or(&self.volumes_dir)
            .join("pod-credentials");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{ns}_{}.kubeconfig", pod.name_any()));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        file.write_all(serde_json::to_string_pretty(&kubeconfig)?.as_bytes())?;
        Ok(path)
    }
}

/// The operator's arguments: the container's `args`, after its `command` if that is the
/// image's entrypoint (anything else is not the operator, so it cannot be run here).
fn operator_args(container: &Container) -> Result<Vec<String>, String> {
    let args = container.args.clone().unwrap_or_default();
    match container.command.as_deref() {
        None | Some([]) => Ok(args),
        Some([entry, rest @ ..]) if entry.rsplit('/').next() == Some("marekvs-operator") => {
            Ok(rest.iter().cloned().chain(args).collect())
        }
        Some(command) => Err(format!(
            "command {command:?} is not the operator image's entrypoint /marekvs-operator: the harness runs only the operator binary"
        )),
    }
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

/// The pod IPs handed out, over every node's range.
#[derive(Default)]
struct IpPool {
    used: BTreeSet<Ipv4Addr>,
    /// Per range (by its first address), the offset of the last address handed out.
    last: std::collections::HashMap<u32, u32>,
}

impl IpPool {
    /// `wanted` if it is free, else the next free address of `base/prefix` after the last one
    /// handed out there: round robin, as a kubelet's host-local IPAM does, so a freed address
    /// is reused only after the rest of the range. Real members keep dialing a departed peer's
    /// address for a while; a new pod given it at once (another cluster's member, with the
    /// same node id) was taken for that peer, and its cluster never formed.
    fn allocate(
        &mut self,
        base: Ipv4Addr,
        prefix: u8,
        wanted: Option<Ipv4Addr>,
    ) -> anyhow::Result<Ipv4Addr> {
        if let Some(ip) = wanted.filter(|ip| ip.is_loopback() && !self.used.contains(ip)) {
            self.used.insert(ip);
            return Ok(ip);
        }
        let size = 1u32 << (32 - u32::from(prefix));
        let start = u32::from(base);
        // Not the network address, .1 or the broadcast address of the range.
        let first = 2u32;
        let span = size.saturating_sub(3).max(1);
        let cursor = self.last.entry(start).or_insert(first + span - 1);
        for step in 1..=span {
            let off = first + (*cursor - first + step) % span;
            let ip = Ipv4Addr::from(start + off);
            if self.used.insert(ip) {
                *cursor = off;
                return Ok(ip);
            }
        }
        bail!("no free pod IP in {base}/{prefix}")
    }

    fn free(&mut self, ip: Ipv4Addr) {
        self.used.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_pod_ip_is_reused_only_after_the_rest_of_the_range() {
        let mut pool = IpPool::default();
        let base = Ipv4Addr::new(127, 2, 0, 0);
        let a = pool.allocate(base, 29, None).unwrap();
        let b = pool.allocate(base, 29, None).unwrap();
        assert_eq!(
            (a, b),
            (Ipv4Addr::new(127, 2, 0, 2), Ipv4Addr::new(127, 2, 0, 3))
        );
        pool.free(a);
        // .2 is free again, but .4, .5 and .6 come first; then .2; .3 is still in use.
        let next: Vec<Ipv4Addr> = (0..4)
            .map(|_| pool.allocate(base, 29, None).unwrap())
            .collect();
        assert_eq!(
            next,
            [4, 5, 6, 2].map(|d| Ipv4Addr::new(127, 2, 0, d)),
            "round robin over .2-.6"
        );
        assert!(pool.allocate(base, 29, None).is_err(), "the range is full");
        // A wanted free address is given as asked.
        pool.free(Ipv4Addr::new(127, 2, 0, 5));
        let wanted = Ipv4Addr::new(127, 2, 0, 5);
        assert_eq!(pool.allocate(base, 29, Some(wanted)).unwrap(), wanted);
    }

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
    fn the_operator_runs_with_its_args_after_the_images_entrypoint_only() {
        let mut c = Container {
            args: Some(vec!["run".into(), "--namespace=x".into()]),
            ..Container::default()
        };
        assert_eq!(operator_args(&c).unwrap(), ["run", "--namespace=x"]);
        c.command = Some(vec!["/marekvs-operator".into(), "run".into()]);
        c.args = Some(vec!["--leader-elect=false".into()]);
        assert_eq!(operator_args(&c).unwrap(), ["run", "--leader-elect=false"]);
        c.command = Some(vec!["/bin/sh".into(), "-c".into()]);
        let err = operator_args(&c).unwrap_err();
        assert!(err.contains("/bin/sh"), "{err}");
    }

    #[test]
    fn node_id_is_the_hostname_ordinal() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("demo-12".into());
        assert_eq!(ordinal_of(&pod), "12");
        pod.metadata.name = Some("standalone".into());
        assert_eq!(ordinal_of(&pod), "standalone");
    }

    #[test]
    fn probe_settings_default_as_the_api_does() {
        let mut c = Container::default();
        let none = ProbeSpec::of(&c);
        assert_eq!(none.get, None);
        assert_eq!(
            (none.period, none.timeout, none.initial_delay),
            (
                Duration::from_secs(10),
                Duration::from_secs(1),
                Duration::ZERO
            )
        );
        assert_eq!((none.success_threshold, none.failure_threshold), (1, 3));
        c.readiness_probe = Some(k8s_openapi::api::core::v1::Probe {
            http_get: Some(HTTPGetAction::default()),
            period_seconds: Some(0),
            timeout_seconds: Some(5),
            initial_delay_seconds: Some(-1),
            failure_threshold: Some(0),
            ..Default::default()
        });
        let p = ProbeSpec::of(&c);
        assert!(p.get.is_some());
        assert_eq!(
            (p.period, p.timeout, p.initial_delay),
            (
                Duration::from_secs(1),
                Duration::from_secs(5),
                Duration::ZERO
            )
        );
        assert_eq!((p.success_threshold, p.failure_threshold), (1, 1));
    }

    /// A worker that fails (any `?`) drops its slot: a simulated member must not stay up in
    /// the model, nor keep its ports.
    #[tokio::test]
    async fn a_dropped_slot_stops_and_forgets_a_simulated_member() {
        let world = SharedWorld::new(crate::model::Settings::default(), 1);
        let ip = Ipv4Addr::new(127, 79, 0, 2);
        let key = "ns/demo-0";
        world.lock().start_member(
            "ns/demo",
            MemberSpec {
                key: key.into(),
                node_id: "0".into(),
                replicas_n: 2,
                volume: "vol-0".into(),
                disk_bytes: 1 << 30,
                faults: Faults::default(),
                addr: ip.to_string(),
            },
        );
        let http = node_http::serve(world.clone(), key.into(), IpAddr::V4(ip))
            .await
            .unwrap();
        let resp = node_resp::serve(world.clone(), key.into(), IpAddr::V4(ip), None)
            .await
            .unwrap();
        let registry = RealMembers::default();
        let patch_gave_up = || Err::<(), _>(anyhow!("patching status of demo-0: gave up"));
        let failing_worker = async {
            let mut slot = MemberSlot::new(world.clone(), registry.clone(), key.into());
            slot.set(MemberProcess::Sim {
                key: key.into(),
                _http: http,
                _resp: resp,
            });
            assert!(world.lock().is_running(key));
            patch_gave_up()?;
            slot.stop();
            anyhow::Ok(())
        };
        assert!(failing_worker.await.is_err());
        assert!(!world.lock().is_running(key));
        assert!(
            world
                .lock()
                .clusters
                .values()
                .all(|c| !c.members.contains_key(key)),
            "the member is still in the model"
        );
        // Its servers stop: the pod IP is free for the next pod.
        let deadline = Instant::now() + Duration::from_secs(5);
        while tokio::net::TcpStream::connect((ip, RESP_PORT))
            .await
            .is_ok()
        {
            assert!(Instant::now() < deadline, "{ip}:{RESP_PORT} still answers");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_dropped_slot_kills_a_real_member_and_takes_it_out_of_the_seeds() {
        let dir = std::env::temp_dir().join(format!("marekvs-sim-slot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = PodLog::new(&dir, "ns", "demo-0", "marekvs");
        let args = ["-c".to_string(), "echo started; exec sleep 30".to_string()];
        let node = RealNode::spawn(
            std::path::Path::new("/bin/sh"),
            &BTreeMap::new(),
            &args,
            &log,
            "start 1",
        )
        .unwrap();
        let registry = RealMembers::default();
        let ip = Ipv4Addr::new(127, 79, 0, 3);
        registry
            .lock()
            .unwrap()
            .entry("ns/demo".into())
            .or_default()
            .insert("ns/demo-0".into(), ip);
        let world = SharedWorld::new(crate::model::Settings::default(), 1);
        let mut slot = MemberSlot::new(world, registry.clone(), "ns/demo-0".into());
        slot.set(MemberProcess::Real {
            node: Box::new(node),
            cluster: "ns/demo".into(),
        });
        assert!(!slot.exited());
        // Stopping is what dropping does; it leaves the slot empty.
        slot.stop();
        assert!(slot.exited());
        assert!(registry.lock().unwrap()["ns/demo"].is_empty());
        drop(slot);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
