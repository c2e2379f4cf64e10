//! [`Backend`] over real marekvs server processes, on loopback only.
//!
//! Member `m` gets its own IP `127.77.0.<m + 1>` (or the base chosen) and binds its four
//! listeners there on the standard ports (RESP 6379, mesh 7373, gossip 7946/UDP, metrics
//! 9121), advertises it, and has every member's gossip address as seeds. Each runs with a
//! cleared environment (only `PATH` and the `MAREKVS_*` set here), its data in
//! `<data_root>/n<m>` and its output appended to `<data_root>/n<m>.log`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Range;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use tokio::process::{Child, Command};

use super::backend::{Backend, ExitInfo, Observation, RespView, parse_metrics, parse_nodes};
use super::client::RespConn;
use crate::resp::{Reply, encode_command};

pub const RESP_PORT: u16 = 6379;
pub const MESH_PORT: u16 = 7373;
pub const GOSSIP_PORT: u16 = 7946;
pub const METRICS_PORT: u16 = 9121;

/// How long one observation request (RESP, `/ready`, `/metrics`) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one pipelined batch of writes or reads may take.
const BATCH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct RealConfig {
    pub bin: PathBuf,
    pub members: usize,
    pub replicas_n: u32,
    /// A directory that does not exist yet: the members' data and logs go there.
    pub data_root: PathBuf,
    /// Member `m` binds `first_ip + m`; must stay in 127.0.0.0/8.
    pub first_ip: Ipv4Addr,
}

struct Proc {
    child: Child,
}

pub struct RealBackend {
    cfg: RealConfig,
    epoch: Instant,
    procs: Vec<Option<Proc>>,
    observers: Vec<Option<RespConn>>,
    data: Vec<Option<RespConn>>,
    http: reqwest::Client,
}

impl RealBackend {
    pub fn new(cfg: RealConfig) -> anyhow::Result<Self> {
        ensure!(cfg.members >= 1 && cfg.members <= 200, "1 to 200 members");
        for m in 0..cfg.members {
            let ip = ip_of(&cfg, m);
            ensure!(ip.is_loopback(), "member {m} would bind {ip}: not loopback");
        }
        ensure!(
            !cfg.data_root.exists(),
            "{} exists: the data root must be fresh",
            cfg.data_root.display()
        );
        std::fs::create_dir_all(&cfg.data_root)
            .with_context(|| format!("creating {}", cfg.data_root.display()))?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(PROBE_TIMEOUT)
            .build()?;
        let n = cfg.members;
        Ok(RealBackend {
            cfg,
            epoch: Instant::now(),
            procs: (0..n).map(|_| None).collect(),
            observers: (0..n).map(|_| None).collect(),
            data: (0..n).map(|_| None).collect(),
            http,
        })
    }

    /// Start the scenario clock now.
    pub fn reset_clock(&mut self) {
        self.epoch = Instant::now();
    }

    pub fn ip(&self, m: usize) -> Ipv4Addr {
        ip_of(&self.cfg, m)
    }

    fn data_dir(&self, m: usize) -> PathBuf {
        self.cfg.data_root.join(format!("n{m}"))
    }

    fn log_path(&self, m: usize) -> PathBuf {
        self.cfg.data_root.join(format!("n{m}.log"))
    }

    fn env(&self, m: usize) -> BTreeMap<String, String> {
        let ip = self.ip(m);
        let seeds: Vec<String> = (0..self.cfg.members)
            .map(|i| format!("{}:{GOSSIP_PORT}", self.ip(i)))
            .collect();
        let mut env = BTreeMap::new();
        for (var, port) in [
            ("MAREKVS_RESP_ADDR", RESP_PORT),
            ("MAREKVS_MESH_ADDR", MESH_PORT),
            ("MAREKVS_GOSSIP_ADDR", GOSSIP_PORT),
            ("MAREKVS_METRICS_ADDR", METRICS_PORT),
        ] {
            env.insert(var.to_string(), format!("{ip}:{port}"));
        }
        env.insert("MAREKVS_ADVERTISE_IP".into(), ip.to_string());
        env.insert("MAREKVS_NODE_ID".into(), m.to_string());
        env.insert("MAREKVS_SEEDS".into(), seeds.join(","));
        env.insert("MAREKVS_REPLICAS_N".into(), self.cfg.replicas_n.to_string());
        env.insert(
            "MAREKVS_DATA_DIR".into(),
            self.data_dir(m).display().to_string(),
        );
        env
    }

    fn spawn(&mut self, m: usize, what: &str) -> anyhow::Result<()> {
        ensure!(self.procs[m].is_none(), "member {m} is running");
        let log_path = self.log_path(m);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        writeln!(
            log,
            "----- marekvs-trace: {what} member {m} at {} ms -----",
            self.now_ms()
        )?;
        let err = log.try_clone()?;
        let child = Command::new(&self.cfg.bin)
            .env_clear()
            .envs(self.env(m))
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .current_dir(&self.cfg.data_root)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.cfg.bin.display()))?;
        self.procs[m] = Some(Proc { child });
        self.observers[m] = None;
        self.data[m] = None;
        Ok(())
    }

    fn resp_addr(&self, m: usize) -> SocketAddr {
        SocketAddr::from((self.ip(m), RESP_PORT))
    }

    async fn data_conn(&mut self, m: usize) -> anyhow::Result<&mut RespConn> {
        if self.data[m].is_none() {
            let conn = RespConn::connect(self.resp_addr(m), PROBE_TIMEOUT).await?;
            self.data[m] = Some(conn);
        }
        Ok(self.data[m].as_mut().expect("just set"))
    }

    /// `count` pipelined requests on member `m`'s data connection; a failed one drops the
    /// connection (the next call opens a new one).
    async fn pipelined(
        &mut self,
        m: usize,
        req: &[u8],
        count: usize,
    ) -> anyhow::Result<Vec<Reply>> {
        let conn = self.data_conn(m).await?;
        match conn.pipeline(req, count, BATCH_TIMEOUT).await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.data[m] = None;
                Err(e)
            }
        }
    }

    async fn resp_view(&mut self, m: usize) -> Option<RespView> {
        for _attempt in 0..2 {
            if self.observers[m].is_none() {
                let conn = RespConn::connect(self.resp_addr(m), PROBE_TIMEOUT)
                    .await
                    .ok()?;
                self.observers[m] = Some(conn);
            }
            let conn = self.observers[m].as_mut()?;
            let myid = conn.call(&["CLUSTER", "MYID"], PROBE_TIMEOUT).await;
            let nodes = match &myid {
                Ok(_) => conn.call(&["CLUSTER", "NODES"], PROBE_TIMEOUT).await,
                Err(_) => Err(anyhow::anyhow!("no MYID")),
            };
            match (myid, nodes) {
                (Ok(myid), Ok(nodes)) => {
                    return Some(RespView {
                        myid: text(&myid),
                        nodes: parse_nodes(&text(&nodes)),
                    });
                }
                // A connection from before a restart: once more on a new one.
                _ => self.observers[m] = None,
            }
        }
        None
    }

    async fn http_get(&self, m: usize, path: &str) -> Option<(u16, String)> {
        let url = format!("http://{}:{METRICS_PORT}{path}", self.ip(m));
        let resp = self.http.get(url).send().await.ok()?;
        let status = resp.status().as_u16();
        let body = resp.text().await.ok()?;
        Some((status, body))
    }
}

fn ip_of(cfg: &RealConfig, m: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(cfg.first_ip).wrapping_add(m as u32))
}

fn text(reply: &Reply) -> String {
    match reply {
        Reply::Simple(s) | Reply::Error(s) => s.clone(),
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Integer(i) => i.to_string(),
        _ => String::new(),
    }
}

/// The value written to `key:<i>`: the index, then `x` up to `bytes` (at least the index).
pub fn value_of(i: u32, bytes: usize) -> Vec<u8> {
    let mut v = i.to_string().into_bytes();
    if v.len() < bytes {
        v.resize(bytes, b'x');
    }
    v
}

pub fn key_of(i: u32) -> String {
    format!("key:{i}")
}

impl Backend for RealBackend {
    fn members(&self) -> usize {
        self.cfg.members
    }

    fn replicas_n(&self) -> u32 {
        self.cfg.replicas_n
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    async fn sleep_ms(&mut self, ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn start(&mut self, m: usize) -> anyhow::Result<()> {
        let dir = self.data_dir(m);
        ensure!(!dir.exists(), "{} exists: not fresh", dir.display());
        std::fs::create_dir_all(&dir)?;
        self.spawn(m, "start")
    }

    async fn restart(&mut self, m: usize) -> anyhow::Result<()> {
        let dir = self.data_dir(m);
        ensure!(dir.is_dir(), "{} missing", dir.display());
        self.spawn(m, "restart")
    }

    fn running(&self, m: usize) -> bool {
        self.procs[m].is_some()
    }

    fn take_exit(&mut self, m: usize) -> Option<ExitInfo> {
        let status = match self.procs[m].as_mut()?.child.try_wait() {
            Ok(Some(status)) => Some(status),
            Ok(None) => None,
            Err(_) => return None,
        }?;
        self.procs[m] = None;
        self.observers[m] = None;
        self.data[m] = None;
        Some(ExitInfo {
            code: status.code(),
            signal: status.signal(),
        })
    }

    async fn observe(&mut self, m: usize) -> Observation {
        if self.procs[m].is_none() {
            return Observation::default();
        }
        // RESP first: it binds only once the member is Active, so a member answering it
        // must already read ready.
        let resp = self.resp_view(m).await;
        let ready = self.http_get(m, "/ready").await.map(|(s, _)| s);
        let metrics = match self.http_get(m, "/metrics").await {
            Some((200, body)) => Some(parse_metrics(&body)),
            _ => None,
        };
        Observation {
            ready,
            resp,
            metrics,
        }
    }

    async fn set(&mut self, m: usize, keys: Range<u32>, value_bytes: usize) -> anyhow::Result<u32> {
        let mut req = Vec::new();
        let count = keys.len();
        for i in keys {
            let key = key_of(i);
            let value = value_of(i, value_bytes);
            req.extend(encode_command(&[b"SET".as_slice(), key.as_bytes(), &value]));
        }
        let replies = self.pipelined(m, &req, count).await?;
        Ok(replies
            .iter()
            .filter(|r| matches!(r, Reply::Simple(s) if s == "OK"))
            .count() as u32)
    }

    async fn get(&mut self, m: usize, keys: &[u32]) -> anyhow::Result<Vec<bool>> {
        let mut req = Vec::new();
        for i in keys {
            req.extend(encode_command(&["GET".to_string(), key_of(*i)]));
        }
        let replies = self.pipelined(m, &req, keys.len()).await?;
        Ok(replies
            .iter()
            .map(|r| matches!(r, Reply::Bulk(_)))
            .collect())
    }

    async fn drain(&mut self, m: usize) -> (u16, String) {
        self.http_get(m, "/drain")
            .await
            .map(|(s, b)| (s, b.trim().to_string()))
            .unwrap_or((0, String::new()))
    }

    async fn sigterm(&mut self, m: usize) -> anyhow::Result<()> {
        let Some(pid) = self.procs[m].as_ref().and_then(|p| p.child.id()) else {
            bail!("member {m} is not running");
        };
        // `kill(1)` keeps this crate free of unsafe code.
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .await?;
        ensure!(status.success(), "kill -TERM {pid}: {status}");
        Ok(())
    }

    async fn stop_all(&mut self) {
        self.observers.iter_mut().for_each(|o| *o = None);
        self.data.iter_mut().for_each(|d| *d = None);
        for p in self.procs.iter_mut() {
            if let Some(mut proc) = p.take() {
                let _ = proc.child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), proc.child.wait()).await;
            }
        }
    }
}

/// Where the members' data of a recording go by default: a fresh directory under `base`.
pub fn fresh_root(base: &Path, scenario: &str) -> PathBuf {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    base.join(format!("{scenario}-{stamp}"))
}
