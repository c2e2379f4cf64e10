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
//!
//! The jobs, one file each: `ips` hands out loopback pod IPs; `member` runs a member pod
//! (its start, readiness probe, restarts and termination); `start` starts its process
//! (simulated, or a real binary) with the environment of `env`; `process` keeps that
//! process and stops it; `operator` runs the operator image's pods as the operator binary;
//! `api` writes pod status and deletes pods through the API server; `debugging` writes what
//! kwok needs to serve `kubectl logs` and `kubectl port-forward` for them.

mod api;
mod debugging;
mod env;
mod ips;
mod member;
mod operator;
mod process;
mod start;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::container_state::MemberStatus;
use crate::node_http::METRICS_PORT;
use crate::real_node::PodLog;
use crate::world::SharedWorld;

use ips::IpPool;
use member::MemberPod;

/// Annotation kwok uses to pick the nodes it manages; the harness runs pods on those nodes.
pub const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

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
    /// Pods of the operator image with one of these tags run as its binary instead (an older
    /// build: the upgrade test).
    pub operator_bins_by_tag: BTreeMap<String, PathBuf>,
    http: reqwest::Client,
    ips: Mutex<IpPool>,
    /// Real-node members: cluster key → member key → pod IP (to rewrite seeds).
    real_members: RealMembers,
}

/// Real-node members: cluster key → member key → pod IP. Shared with each pod's
/// [`process::MemberSlot`].
type RealMembers = Arc<Mutex<BTreeMap<String, BTreeMap<String, Ipv4Addr>>>>;

impl Podlet {
    pub fn new(
        client: Client,
        world: SharedWorld,
        real_bin: Option<PathBuf>,
        volumes_dir: PathBuf,
        pod_logs_dir: PathBuf,
        operator_bin: Option<PathBuf>,
        operator_bins_by_tag: BTreeMap<String, PathBuf>,
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
            operator_bins_by_tag,
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
            self.publish_debugging(&pod, ip, None).await;
            info!(pod = %key, %ip, "running (not a marekvs member)");
            return self.wait_and_finish_plain(rx, &pods, &pod).await;
        };

        // Report the pod Running first: if it is gone already, no member is started for it.
        let status = MemberStatus::running(started, restarts, None);
        let member = Some((container.name.as_str(), &status));
        self.patch_status(&pods, &pod, ip, &host_ip, &started, member)
            .await?;
        // A container run as a process has a log for `kubectl logs`; a simulated member none.
        let process_log = (self.real_bin.is_some() || self.is_operator(&container)).then(|| {
            let ns = pod.namespace().unwrap_or_default();
            let log = PodLog::new(&self.pod_logs_dir, &ns, &pod.name_any(), &container.name);
            (container.name.clone(), log.cri_path())
        });
        self.publish_debugging(&pod, ip, process_log).await;
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
