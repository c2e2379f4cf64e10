//! The trace file format: what an operator could observe of a marekvs cluster during a
//! scenario, as serde structs (compact JSON on disk).
//!
//! Times are milliseconds since the scenario started. Each member's samples are stored by
//! column (entry `i` of every vector belongs to the sample taken at `t[i]`), so a trace of a
//! few minutes stays small; [`Member::points`] and [`Member::sample`] read them back by row.
//! A member is sampled only while its process runs (between its `start`/`restart` event and
//! its `exit` event).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The version of this format, in [`Trace::format`].
pub const FORMAT_VERSION: u32 = 1;

/// The `marekvs_*` series a trace keeps (names without the prefix); `commands_total` is kept
/// per `cmd` label in [`Samples::commands`].
pub const SERIES: [&str; 18] = [
    "cluster_members",
    "cluster_underreplicated_partitions",
    "cluster_owned_partitions",
    "join_gate_pending_pids",
    "bootstraps_completed_total",
    "ae_repair_ops_total",
    "ae_rounds_total",
    "ring_ops",
    "ring_bytes",
    "connected_clients",
    "net_input_bytes_total",
    "mesh_peers",
    "repl_ops_sent_total",
    "repl_ops_applied_total",
    "repl_inflight_bytes",
    "repl_window_stalls_total",
    "repl_send_failures_total",
    "uptime_seconds",
];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub format: u32,
    pub scenario: String,
    /// From `marekvs_info{version}`.
    pub marekvs_version: String,
    /// UTC date of the recording, `YYYY-MM-DD`.
    pub recorded_on: String,
    pub replicas_n: u32,
    /// The sampling period.
    pub interval_ms: u64,
    pub members: Vec<Member>,
    pub events: Vec<Event>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// `MAREKVS_NODE_ID`.
    pub ordinal: u16,
    /// The loopback IP all its listeners bind to.
    pub ip: String,
    pub samples: Samples,
    /// Its answers to `CLUSTER MYID` and `CLUSTER NODES`, recorded when they differ from its
    /// previous answer: at every sample where [`Samples::resp`] is 1, the answer is the last
    /// view recorded at or before that time.
    pub views: Vec<View>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    pub t: Vec<u64>,
    /// HTTP status of `GET /ready`; 0 when it did not answer.
    pub ready: Vec<u16>,
    /// 1 when the RESP port answered `CLUSTER MYID` and `CLUSTER NODES`, else 0.
    pub resp: Vec<u8>,
    /// Each series of [`SERIES`] by name; `null` where `/metrics` did not answer.
    pub metrics: BTreeMap<String, Vec<Option<u64>>>,
    /// `marekvs_commands_total` by `cmd` label (0 before a command's first use); `null` where
    /// `/metrics` did not answer.
    pub commands: BTreeMap<String, Vec<Option<u64>>>,
}

/// A member's topology as it answers it over RESP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub t: u64,
    /// `CLUSTER MYID`.
    pub myid: String,
    /// `CLUSTER NODES`, one entry per line.
    pub nodes: Vec<NodeEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    pub id: String,
    /// `ip:port@cport` as listed.
    pub addr: String,
    pub flags: String,
    /// The config-epoch field (marekvs lists its boot time there: it changes on restart).
    pub generation: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub t: u64,
    #[serde(flatten)]
    pub what: What,
}

/// What happened, as the driver did or saw it. `m` is the member's index in
/// [`Trace::members`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum What {
    /// The member's process was started on a fresh data directory.
    Start {
        m: usize,
    },
    /// The member's process was started again on its data directory.
    Restart {
        m: usize,
    },
    /// Pipelined `SET key:<i>` for `i` in `first..first + count`, through member `m`.
    WritesBegun {
        m: usize,
        first: u32,
        count: u32,
        value_bytes: u32,
    },
    /// The writes ended: how many were acknowledged `+OK`.
    WritesEnded {
        m: usize,
        acked: u32,
        failed: u32,
    },
    /// `GET /drain` and its answer (status 0: no answer).
    Drain {
        m: usize,
        status: u16,
        body: String,
    },
    Sigterm {
        m: usize,
    },
    /// The process exit was observed (`code` or the `signal` that ended it).
    Exit {
        m: usize,
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// `GET` of the written keys `first, first + step, ...` (`checked` of them) through member
    /// `m`, begun at `t` and lasting `ms`: how many came back with a value, and the indices of
    /// those that did not (at most [`MAX_MISSING_LISTED`], `truncated` if there were more).
    Reads {
        m: usize,
        first: u32,
        step: u32,
        checked: u32,
        found: u32,
        missing: u32,
        missing_keys: Vec<u32>,
        truncated: bool,
        ms: u64,
    },
    /// Something the driver states about the scenario (a phase it enters, a choice).
    Note {
        text: String,
    },
}

/// The most missing key indices a [`What::Reads`] lists.
pub const MAX_MISSING_LISTED: usize = 1000;

/// One sample of one member, by row.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleRow {
    pub t: u64,
    pub ready: u16,
    pub resp: bool,
    /// `None` when `/metrics` did not answer.
    pub metrics: Option<BTreeMap<String, u64>>,
}

impl SampleRow {
    pub fn metric(&self, name: &str) -> Option<u64> {
        self.metrics.as_ref()?.get(name).copied()
    }
}

impl Samples {
    pub fn len(&self) -> usize {
        self.t.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }
}

impl Member {
    /// The samples of series `name` that answered: `(t, value)`.
    pub fn points(&self, name: &str) -> Vec<(u64, u64)> {
        let Some(col) = self.samples.metrics.get(name) else {
            return Vec::new();
        };
        self.samples
            .t
            .iter()
            .zip(col)
            .filter_map(|(t, v)| v.map(|v| (*t, v)))
            .collect()
    }

    /// The sum of `commands_total` over its commands, per sample that answered.
    pub fn commands_sum(&self) -> Vec<(u64, u64)> {
        (0..self.samples.len())
            .filter_map(|i| {
                let mut sum = None;
                for col in self.samples.commands.values() {
                    if let Some(Some(v)) = col.get(i) {
                        sum = Some(sum.unwrap_or(0) + v);
                    }
                }
                sum.map(|s| (self.samples.t[i], s))
            })
            .collect()
    }

    /// Sample `i` by row.
    pub fn sample(&self, i: usize) -> SampleRow {
        let s = &self.samples;
        let answered = s
            .metrics
            .values()
            .any(|c| c.get(i).copied().flatten().is_some());
        SampleRow {
            t: s.t[i],
            ready: s.ready.get(i).copied().unwrap_or(0),
            resp: s.resp.get(i).copied().unwrap_or(0) == 1,
            metrics: answered.then(|| {
                s.metrics
                    .iter()
                    .filter_map(|(k, c)| c.get(i).copied().flatten().map(|v| (k.clone(), v)))
                    .collect()
            }),
        }
    }

    pub fn rows(&self) -> impl Iterator<Item = SampleRow> + '_ {
        (0..self.samples.len()).map(|i| self.sample(i))
    }

    /// The view it answered at time `t` (the last recorded at or before `t`).
    pub fn view_at(&self, t: u64) -> Option<&View> {
        self.views.iter().rev().find(|v| v.t <= t)
    }
}

impl Trace {
    /// Events of a kind, in time order: `(t, &What)`.
    pub fn events_where<'a>(
        &'a self,
        f: impl Fn(&What) -> bool + 'a,
    ) -> impl Iterator<Item = (u64, &'a What)> + 'a {
        self.events
            .iter()
            .filter(move |e| f(&e.what))
            .map(|e| (e.t, &e.what))
    }

    /// The lives of member `m`'s process: `(started, exited)`, `exited` `None` if it ran to
    /// the end of the trace.
    pub fn lives(&self, m: usize) -> Vec<(u64, Option<u64>)> {
        let mut lives: Vec<(u64, Option<u64>)> = Vec::new();
        for e in &self.events {
            match e.what {
                What::Start { m: x } | What::Restart { m: x } if x == m => lives.push((e.t, None)),
                What::Exit { m: x, .. } if x == m => {
                    if let Some(last) = lives.last_mut() {
                        last.1.get_or_insert(e.t);
                    }
                }
                _ => {}
            }
        }
        lives
    }

    /// The time of the trace's last sample or event.
    pub fn end(&self) -> u64 {
        let samples = self
            .members
            .iter()
            .filter_map(|m| m.samples.t.last().copied());
        let events = self.events.iter().map(|e| e.t);
        samples.chain(events).max().unwrap_or(0)
    }
}
