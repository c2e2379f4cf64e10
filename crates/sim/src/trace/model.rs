//! [`Backend`] over the in-process simulator model ([`crate::model::Cluster`]), in virtual
//! time: sleeping advances the model's clock with `tick` (every 50 ms of scenario time, the
//! real sender loop's period), so a scenario of minutes runs in a fraction of a second of CPU
//! and, with a fixed seed, always the same way.
//!
//! Member `m` is node id `m` at `127.77.0.<m + 1>` (as the real backend lays them out) on
//! volume `v<m>`. What the recorder reads is what the simulator's member servers serve:
//! `/ready` 200 once Active or Leaving (503 while Joining), `/metrics` rendered by
//! [`crate::node_http::render_metrics`] and parsed back like a real scrape, RESP (`CLUSTER
//! MYID` / `NODES` as `crate::world` renders them) only once the member turned Active. Like
//! the real recorder it holds one observer connection and one data connection per member
//! process, and its commands count in the member's `commands_total`, `net_input_bytes_total`
//! and `connected_clients`.
//!
//! Client commands take virtual time too: pipelined `SET`s and `GET`s cost
//! [`SET_COST_NS`] and [`GET_COST_NS`] each (about what the real traces show for small
//! values on loopback), during which the model keeps ticking (its rings ship meanwhile).

use std::ops::Range;
use std::time::Duration;

use anyhow::{bail, ensure};

use super::backend::{Backend, ExitInfo, Metrics, Observation, RespView, parse_metrics};
use super::format::NodeEntry;
use super::real::{GOSSIP_PORT, RESP_PORT, key_of, value_of};
use crate::model::{Cluster, Faults, MemberSpec, Process, Settings, node_myid};
use crate::node_http::render_metrics;

/// The model's tick period (the real node's sender loop runs every 50 ms).
pub const TICK_MS: u64 = 50;
/// Virtual time one pipelined `SET` takes (real: 2,000 in 19 ms, 5,000 in 53 ms, 180,000 of
/// 1 KiB in 5.5 s).
pub const SET_COST_NS: u64 = 30_000;
/// Virtual time one pipelined `GET` takes (real: 2,000 in 10-17 ms).
pub const GET_COST_NS: u64 = 8_000;
/// Unix time of the scenario's start, for `CLUSTER NODES` generations (boot times).
const EPOCH_UNIX: u64 = 1_790_000_000;
/// What the model backend reports as `info{version}`.
pub const MODEL_VERSION: &str = "sim-model";

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub members: usize,
    pub replicas_n: u32,
    pub settings: Settings,
    pub seed: u64,
}

impl ModelConfig {
    /// `members` with RF `replicas_n`, the model's default settings, seed 1.
    pub fn new(members: usize, replicas_n: u32) -> Self {
        ModelConfig {
            members,
            replicas_n,
            settings: Settings::default(),
            seed: 1,
        }
    }
}

/// The connections the recorder holds to one member process: which process (boot) each was
/// accepted by.
#[derive(Clone, Copy, Debug, Default)]
struct Conns {
    observer: Option<u64>,
    data: Option<u64>,
}

pub struct ModelBackend {
    cfg: ModelConfig,
    pub cluster: Cluster,
    /// Scenario time in microseconds.
    now_us: u64,
    /// When the model was last ticked (ms).
    ticked_ms: u64,
    /// Whether member `m` was started and its exit not yet reported.
    running: Vec<bool>,
    conns: Vec<Conns>,
}

impl ModelBackend {
    pub fn new(cfg: ModelConfig) -> Self {
        let cluster = Cluster::new(cfg.settings.clone(), cfg.seed);
        let n = cfg.members;
        ModelBackend {
            cfg,
            cluster,
            now_us: 0,
            ticked_ms: 0,
            running: vec![false; n],
            conns: vec![Conns::default(); n],
        }
    }

    pub fn ip(&self, m: usize) -> String {
        format!("127.77.0.{}", m + 1)
    }

    fn key(m: usize) -> String {
        format!("m{m}")
    }

    fn now(&self) -> Duration {
        Duration::from_micros(self.now_us)
    }

    /// Advance virtual time by `us`, ticking the model every [`TICK_MS`] and at the end.
    fn advance_us(&mut self, us: u64) {
        let until = self.now_us + us;
        loop {
            let next = (self.ticked_ms + TICK_MS) * 1000;
            if next > until {
                break;
            }
            self.now_us = next;
            self.ticked_ms += TICK_MS;
            self.cluster.tick(Duration::from_millis(self.ticked_ms));
        }
        self.now_us = until;
    }

    fn spec(&self, m: usize) -> MemberSpec {
        MemberSpec {
            key: Self::key(m),
            node_id: m.to_string(),
            replicas_n: self.cfg.replicas_n as usize,
            volume: format!("v{m}"),
            disk_bytes: 10 << 30,
            faults: Faults::default(),
            addr: self.ip(m),
            version: crate::model::MODELLED_VERSION.into(),
        }
    }

    fn boot(&self, m: usize) -> Option<u64> {
        self.cluster.boot_of(&Self::key(m))
    }

    /// The recorder's connection to member `m`'s RESP port (`data` or the observer's): the
    /// process it is accepted by, connecting anew to a new process. `None`: refused.
    fn connect(&mut self, m: usize, data: bool) -> Option<u64> {
        let key = Self::key(m);
        if !self.cluster.resp_open(&key) {
            return None;
        }
        let boot = self.boot(m)?;
        let slot = if data {
            &mut self.conns[m].data
        } else {
            &mut self.conns[m].observer
        };
        if *slot != Some(boot) {
            *slot = Some(boot);
            self.cluster.connection_accepted(&key, boot);
        }
        Some(boot)
    }

    /// A command served on a connection of process `boot` of member `m`: counted, with its
    /// request bytes.
    fn count(&mut self, m: usize, boot: u64, cmd: &str, args: &[usize]) {
        let key = Self::key(m);
        self.cluster.count_command(&key, boot, cmd);
        self.cluster.input_bytes(&key, boot, resp_request_len(args));
    }

    fn resp_view(&mut self, m: usize) -> Option<RespView> {
        let boot = self.connect(m, false)?;
        let key = Self::key(m);
        self.count(m, boot, "cluster", &[7, 4]);
        self.count(m, boot, "cluster", &[7, 5]);
        let view = self.cluster.view(&key).ok()?;
        let nodes = view
            .peers
            .iter()
            .map(|p| NodeEntry {
                id: node_myid(&p.node_id),
                addr: format!(
                    "{}:{RESP_PORT}@{GOSSIP_PORT}",
                    p.addr.as_deref().unwrap_or("")
                ),
                flags: if p.myself { "myself,master" } else { "master" }.to_string(),
                generation: p.started_ms.map_or(0, |t| EPOCH_UNIX + t / 1000),
            })
            .collect();
        Some(RespView {
            myid: node_myid(&view.node_id),
            nodes,
        })
    }
}

/// Bytes of a RESP request whose arguments have these lengths.
fn resp_request_len(args: &[usize]) -> u64 {
    let digits = |n: usize| n.to_string().len();
    let head = 3 + digits(args.len());
    let body: usize = args.iter().map(|a| 1 + digits(*a) + 2 + a + 2).sum();
    (head + body) as u64
}

impl Backend for ModelBackend {
    fn members(&self) -> usize {
        self.cfg.members
    }

    fn replicas_n(&self) -> u32 {
        self.cfg.replicas_n
    }

    fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    async fn sleep_ms(&mut self, ms: u64) {
        self.advance_us(ms * 1000);
    }

    async fn start(&mut self, m: usize) -> anyhow::Result<()> {
        ensure!(m < self.cfg.members, "no member {m}");
        ensure!(
            !self.cluster.members.contains_key(&Self::key(m)),
            "member {m} was started before: not fresh"
        );
        let spec = self.spec(m);
        self.cluster.start_member(self.now(), spec);
        self.running[m] = true;
        Ok(())
    }

    async fn restart(&mut self, m: usize) -> anyhow::Result<()> {
        let key = Self::key(m);
        match self.cluster.members.get(&key) {
            None => bail!("member {m} has no data to restart on"),
            Some(x) if x.is_up() || self.running[m] => bail!("member {m} is running"),
            Some(_) => {}
        }
        let spec = self.spec(m);
        self.cluster.start_member(self.now(), spec);
        self.running[m] = true;
        Ok(())
    }

    fn running(&self, m: usize) -> bool {
        self.running[m]
    }

    fn take_exit(&mut self, m: usize) -> Option<ExitInfo> {
        if !self.running[m] {
            return None;
        }
        let member = self.cluster.members.get(&Self::key(m))?;
        if member.process != Process::Exited {
            return None;
        }
        self.running[m] = false;
        self.conns[m] = Conns::default();
        Some(match member.exit_code {
            Some(137) => ExitInfo {
                code: None,
                signal: Some(9),
            },
            code => ExitInfo { code, signal: None },
        })
    }

    async fn observe(&mut self, m: usize) -> Observation {
        let key = Self::key(m);
        if self.boot(m).is_none() {
            return Observation::default();
        }
        // RESP first, as the real recorder does: its commands count in the scrape.
        let resp = self.resp_view(m);
        let Some(figures) = self.cluster.figures(self.now(), &key) else {
            return Observation::default();
        };
        let mut metrics: Metrics = parse_metrics(&render_metrics(&figures));
        metrics.version = Some(MODEL_VERSION.to_string());
        Observation {
            ready: Some(if figures.ready { 200 } else { 503 }),
            resp,
            metrics: Some(metrics),
        }
    }

    async fn set(&mut self, m: usize, keys: Range<u32>, value_bytes: usize) -> anyhow::Result<u32> {
        let Some(boot) = self.connect(m, true) else {
            bail!("member {m}: connection refused");
        };
        let key = Self::key(m);
        let count = keys.len() as u64;
        let now = self.now();
        let mut acked = 0;
        for i in keys {
            let (k, v) = (key_of(i), value_of(i, value_bytes));
            self.count(m, boot, "set", &[3, k.len(), v.len()]);
            if self.cluster.set(now, &key, k.as_bytes(), &v).is_ok() {
                acked += 1;
            }
        }
        self.advance_us(count * SET_COST_NS / 1000);
        Ok(acked)
    }

    async fn get(&mut self, m: usize, keys: &[u32]) -> anyhow::Result<Vec<bool>> {
        let Some(boot) = self.connect(m, true) else {
            bail!("member {m}: connection refused");
        };
        let key = Self::key(m);
        let now = self.now();
        let mut found = Vec::with_capacity(keys.len());
        for i in keys {
            let k = key_of(*i);
            self.count(m, boot, "get", &[3, k.len()]);
            found.push(matches!(
                self.cluster.get(now, &key, k.as_bytes()),
                Ok(Some(_))
            ));
        }
        self.advance_us(keys.len() as u64 * GET_COST_NS / 1000);
        Ok(found)
    }

    async fn drain(&mut self, m: usize) -> (u16, String) {
        if self.cluster.drain(self.now(), &Self::key(m)) {
            (200, "draining".to_string())
        } else {
            (0, String::new())
        }
    }

    async fn sigterm(&mut self, m: usize) -> anyhow::Result<()> {
        ensure!(self.boot(m).is_some(), "member {m} is not running");
        self.cluster.terminate(self.now(), &Self::key(m));
        Ok(())
    }

    async fn stop_all(&mut self) {
        let now = self.now();
        for m in 0..self.cfg.members {
            self.cluster.kill(now, &Self::key(m));
            self.running[m] = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::encode_command;

    #[test]
    fn request_lengths_match_the_encoder() {
        let v = vec![b'x'; 1024];
        let enc = encode_command(&[b"SET".as_slice(), b"key:12345", &v]);
        assert_eq!(resp_request_len(&[3, 9, 1024]), enc.len() as u64);
        let enc = encode_command(&["CLUSTER", "NODES"]);
        assert_eq!(resp_request_len(&[7, 5]), enc.len() as u64);
    }
}
