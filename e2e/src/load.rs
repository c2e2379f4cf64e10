//! A steady write load: distinct keys `SET` over RESP at a fixed rate, like clients behind the
//! cluster's client Service, every acknowledged key recorded for the data check.
//!
//! Through the Service ([`LoadTarget::Service`]) the writes are spread round robin over its
//! ready endpoints (the Ready, not terminating pods its selector matches), re-read every
//! 500 ms: a member taken out of the Service (unready, or its client-traffic label off) stops
//! receiving writes within about half a second, as a client that re-resolves its endpoints
//! would. [`LoadTarget::Pooled`] is a connection pool behind kube-proxy: each connection is
//! opened through the Service on the endpoint it picks then, and stays on that member until
//! the connection breaks (the member exited), however the Service changes meanwhile; a marekvs
//! node has no `CLIENT KILL`, so nothing else closes it. [`LoadTarget::Pod`] writes through one
//! member's pod IP whatever the Service says (a client that dials pod addresses).
//! A write that fails (connection refused or closed, an error reply) is not acknowledged and
//! not read back; the connection is opened again on the next round.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use marekvs_sim::resp::Reply;

use crate::data::{self, DataSet, Resp};
use crate::{pod_condition, pod_ip};

/// How often the writer sends a round, and re-reads its endpoints at most.
const ROUND: Duration = Duration::from_millis(100);
const RESOLVE_EVERY: Duration = Duration::from_millis(500);
/// At most this much backlog is sent at once after a slow round; the rest is skipped.
const MAX_CATCH_UP: Duration = Duration::from_secs(1);

/// Where the writes go.
#[derive(Clone, Debug)]
pub enum LoadTarget {
    /// The ready endpoints of this Service's EndpointSlices.
    Service(String),
    /// This member's pod IP.
    Pod(String),
    /// `connections` pooled connections through this Service, all opened when the load
    /// starts, each on the endpoint it picked when it opened (round robin, as kube-proxy
    /// spreads new connections), until it breaks; then opened again through the Service.
    Pooled { service: String, connections: usize },
    /// `connections` pooled connections all opened on `member`'s pod address when the load
    /// starts (a pool that dialled that member, or landed all on it), each opened again
    /// through `service` once it breaks, as [`LoadTarget::Pooled`] does: a client the
    /// member's exit moves to the others.
    PooledFrom {
        member: String,
        service: String,
        connections: usize,
    },
}

/// One pooled connection: the member it opened on, while it lasts.
struct Slot {
    member: Option<(String, Ipv4Addr)>,
    conn: Option<Resp>,
}

/// What a finished load wrote.
pub struct LoadReport {
    /// Every acknowledged key, to read back.
    pub data: DataSet,
    /// Writes sent but not acknowledged.
    pub failed: usize,
    pub elapsed: Duration,
    /// Acknowledged writes by the member they went through.
    pub per_member: BTreeMap<String, usize>,
    /// For [`LoadTarget::PooledFrom`]: when its first connection to that member broke,
    /// counted from the load's start.
    pub first_cut: Option<Duration>,
}

impl LoadReport {
    /// Acknowledged writes a second.
    pub fn rate(&self) -> f64 {
        self.data.len() as f64 / self.elapsed.as_secs_f64().max(0.001)
    }
}

/// A running load; [`SteadyLoad::stop`] ends it.
pub struct SteadyLoad {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<anyhow::Result<LoadReport>>,
}

impl SteadyLoad {
    /// Start writing `rate` keys a second to `target` in namespace of `pods`, labelled
    /// `label`, to be read back through `reader`, which it never writes through.
    pub fn start(
        client: kube::Client,
        namespace: &str,
        target: LoadTarget,
        rate: f64,
        reader: &str,
        label: &str,
    ) -> anyhow::Result<SteadyLoad> {
        Self::start_sized(client, namespace, target, rate, reader, label, 0)
    }

    /// [`SteadyLoad::start`] with values of `value_len` bytes (0: the data check's default).
    pub fn start_sized(
        client: kube::Client,
        namespace: &str,
        target: LoadTarget,
        rate: f64,
        reader: &str,
        label: &str,
        value_len: usize,
    ) -> anyhow::Result<SteadyLoad> {
        anyhow::ensure!(
            !data::port_forward(),
            "a steady load writes to pod IPs; not through port-forwards"
        );
        let writer = Writer {
            pods: Api::namespaced(client.clone(), namespace),
            services: Api::namespaced(client, namespace),
            target,
            rate,
            set: DataSet::empty(label, reader, value_len),
            conns: BTreeMap::new(),
            pool: Vec::new(),
            opened: 0,
            per_member: BTreeMap::new(),
            failed: 0,
            started: Instant::now(),
            first_cut: None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(writer.run(stop.clone(), acked.clone()));
        Ok(SteadyLoad { stop, acked, task })
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    pub async fn stop(self) -> anyhow::Result<LoadReport> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await?
    }
}

struct Writer {
    pods: Api<Pod>,
    services: Api<Service>,
    target: LoadTarget,
    rate: f64,
    set: DataSet,
    /// Open connections by member.
    conns: BTreeMap<String, Resp>,
    /// The pool of [`LoadTarget::Pooled`], and how many connections it has opened (the round
    /// robin's position).
    pool: Vec<Slot>,
    opened: usize,
    /// Acknowledged writes by member.
    per_member: BTreeMap<String, usize>,
    failed: usize,
    started: Instant,
    first_cut: Option<Duration>,
}

impl Writer {
    async fn run(
        mut self,
        stop: Arc<AtomicBool>,
        acked: Arc<AtomicUsize>,
    ) -> anyhow::Result<LoadReport> {
        let start = self.started;
        let mut endpoints: Vec<(String, Ipv4Addr)> = Vec::new();
        let mut resolved: Option<Instant> = None;
        let (mut sent, mut next) = (0usize, 0usize);
        match &self.target {
            LoadTarget::Pooled { connections, .. } => {
                // Every connection opened before the first write, as a pool warms up.
                self.pool = (0..*connections)
                    .map(|_| Slot {
                        member: None,
                        conn: None,
                    })
                    .collect();
                self.open_pool().await;
            }
            LoadTarget::PooledFrom {
                member,
                connections,
                ..
            } => {
                let ip = data::member_ip(&self.pods, member).await?;
                for _ in 0..*connections {
                    let conn = Resp::connect(ip).await?;
                    self.pool.push(Slot {
                        member: Some((member.clone(), ip)),
                        conn: Some(conn),
                    });
                }
            }
            LoadTarget::Service(_) | LoadTarget::Pod(_) => {}
        }
        while !stop.load(Ordering::Relaxed) {
            if matches!(
                self.target,
                LoadTarget::Pooled { .. } | LoadTarget::PooledFrom { .. }
            ) {
                let due = (self.rate * start.elapsed().as_secs_f64()) as usize;
                let max = (self.rate * MAX_CATCH_UP.as_secs_f64()) as usize;
                let n = due.saturating_sub(sent).min(max.max(1));
                sent = due;
                if n > 0 {
                    self.open_pool().await;
                    self.pooled_round(next, n).await;
                    next += n;
                    acked.store(self.set.len(), Ordering::Relaxed);
                }
                tokio::time::sleep(ROUND).await;
                continue;
            }
            if resolved.is_none_or(|t| t.elapsed() >= RESOLVE_EVERY) {
                // On an API error keep the last endpoints: a client keeps its last answer too.
                // Never through the member the keys will be read back through: a real member
                // keeps a copy of what was written through it, which would hide a loss.
                if let Ok(e) = resolve(&self.pods, &self.services, &self.target).await {
                    endpoints = e
                        .into_iter()
                        .filter(|(m, _)| m != self.set.reader())
                        .collect();
                }
                resolved = Some(Instant::now());
            }
            let due = (self.rate * start.elapsed().as_secs_f64()) as usize;
            let max = (self.rate * MAX_CATCH_UP.as_secs_f64()) as usize;
            let n = due.saturating_sub(sent).min(max.max(1));
            sent = due;
            if !endpoints.is_empty() && n > 0 {
                self.round(&endpoints, next, n).await;
                next += n;
                acked.store(self.set.len(), Ordering::Relaxed);
            }
            tokio::time::sleep(ROUND).await;
        }
        Ok(LoadReport {
            data: self.set,
            failed: self.failed,
            elapsed: start.elapsed(),
            per_member: self.per_member,
            first_cut: self.first_cut,
        })
    }

    /// Open every pooled connection that is not open, each on the next of the Service's
    /// endpoints now (never the reader).
    async fn open_pool(&mut self) {
        if self.pool.iter().all(|s| s.conn.is_some()) {
            return;
        }
        let Ok(endpoints) = resolve(&self.pods, &self.services, &self.target).await else {
            return;
        };
        let endpoints: Vec<(String, Ipv4Addr)> = endpoints
            .into_iter()
            .filter(|(m, _)| m != self.set.reader())
            .collect();
        if endpoints.is_empty() {
            return;
        }
        for slot in self.pool.iter_mut().filter(|s| s.conn.is_none()) {
            let (member, ip) = endpoints[self.opened % endpoints.len()].clone();
            self.opened += 1;
            if let Ok(conn) = Resp::connect(ip).await {
                slot.member = Some((member, ip));
                slot.conn = Some(conn);
            }
        }
    }

    /// Keys `next..next + n`, round robin over the open pooled connections, each one's share
    /// pipelined on it, all at once. A connection that fails is dropped (its writes not
    /// acknowledged) and opened again through the Service on the next round.
    async fn pooled_round(&mut self, next: usize, n: usize) {
        let open: Vec<usize> = (0..self.pool.len())
            .filter(|i| self.pool[*i].conn.is_some())
            .collect();
        if open.is_empty() {
            self.failed += n;
            return;
        }
        let mut shares: Vec<Vec<String>> = vec![Vec::new(); open.len()];
        for i in next..next + n {
            shares[i % open.len()].push(self.set.key_at(i));
        }
        let mut jobs = Vec::new();
        for (i, keys) in open.iter().zip(shares) {
            let conn = self.pool[*i].conn.take();
            let member = self.pool[*i].member.clone();
            let commands: Vec<Vec<Vec<u8>>> =
                keys.iter().map(|k| self.set.set_command(k)).collect();
            jobs.push((*i, member, keys, conn, commands));
        }
        let sends = jobs
            .into_iter()
            .map(|(i, member, keys, conn, commands)| async move {
                let result = match conn {
                    Some(mut c) => c.pipeline(&commands).await.map(|r| (c, r)),
                    None => Err(anyhow::anyhow!("no connection")),
                };
                (i, member, keys, result)
            });
        let results = futures::future::join_all(sends).await;
        for (i, member, keys, result) in results {
            let Some((name, _)) = member else {
                self.failed += keys.len();
                continue;
            };
            match result {
                Ok((conn, replies)) => {
                    self.pool[i].conn = Some(conn);
                    for (k, reply) in keys.into_iter().zip(replies) {
                        if reply == Reply::Simple("OK".into()) {
                            self.set.record(k, &name);
                            *self.per_member.entry(name.clone()).or_default() += 1;
                        } else {
                            self.failed += 1;
                        }
                    }
                }
                Err(_) => {
                    if let LoadTarget::PooledFrom { member, .. } = &self.target
                        && *member == name
                    {
                        self.first_cut.get_or_insert(self.started.elapsed());
                    }
                    self.pool[i].member = None;
                    self.failed += keys.len();
                }
            }
        }
    }

    /// Keys `next..next + n`, round robin over `endpoints`, each member's share pipelined on
    /// its connection, all members at once.
    async fn round(&mut self, endpoints: &[(String, Ipv4Addr)], next: usize, n: usize) {
        let mut shares: Vec<(String, Ipv4Addr, Vec<String>)> = endpoints
            .iter()
            .map(|(m, ip)| (m.clone(), *ip, Vec::new()))
            .collect();
        for i in next..next + n {
            let k = shares.len();
            shares[i % k].2.push(self.set.key_at(i));
        }
        let sends = shares.into_iter().map(|(member, ip, keys)| {
            let conn = self.conns.remove(&member);
            let commands: Vec<Vec<Vec<u8>>> =
                keys.iter().map(|k| self.set.set_command(k)).collect();
            async move {
                let result = send(conn, ip, &commands).await;
                (member, keys, result)
            }
        });
        for (member, keys, result) in futures::future::join_all(sends).await {
            match result {
                Ok((conn, replies)) => {
                    self.conns.insert(member.clone(), conn);
                    for (k, reply) in keys.into_iter().zip(replies) {
                        if reply == Reply::Simple("OK".into()) {
                            self.set.record(k, &member);
                            *self.per_member.entry(member.clone()).or_default() += 1;
                        } else {
                            self.failed += 1;
                        }
                    }
                }
                Err(_) => self.failed += keys.len(),
            }
        }
    }
}

/// The members to write through now, with their IPs. For a Service, the endpoints its
/// EndpointSlices would list: its selector's pods that are Ready and not terminating. (The
/// local cluster's pod IPs are loopback addresses, which the EndpointSlice controller never
/// publishes, so the writer reads the same facts from the pods.)
async fn resolve(
    pods: &Api<Pod>,
    services: &Api<Service>,
    target: &LoadTarget,
) -> anyhow::Result<Vec<(String, Ipv4Addr)>> {
    let svc = match target {
        LoadTarget::Pod(name) => {
            return Ok(vec![(name.clone(), data::member_ip(pods, name).await?)]);
        }
        LoadTarget::Service(svc)
        | LoadTarget::Pooled { service: svc, .. }
        | LoadTarget::PooledFrom { service: svc, .. } => services.get(svc).await?,
    };
    let selector = svc.spec.and_then(|s| s.selector).unwrap_or_default();
    anyhow::ensure!(!selector.is_empty(), "the Service selects no pods");
    let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let lp = ListParams::default().labels(&labels.join(","));
    let mut out: Vec<(String, Ipv4Addr)> = pods
        .list(&lp)
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_condition(p, "Ready"))
        .filter_map(|p| Some((p.metadata.name.clone()?, pod_ip(p)?)))
        .collect();
    out.sort();
    Ok(out)
}

/// Send `commands` on `conn` (or a new connection to `ip`).
async fn send(
    conn: Option<Resp>,
    ip: Ipv4Addr,
    commands: &[Vec<Vec<u8>>],
) -> anyhow::Result<(Resp, Vec<Reply>)> {
    let mut conn = match conn {
        Some(c) => c,
        None => Resp::connect(ip).await?,
    };
    let replies = conn.pipeline(commands).await?;
    Ok((conn, replies))
}
