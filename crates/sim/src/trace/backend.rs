//! What a scenario drives: a cluster of members it can start, write to, read from, drain,
//! terminate and observe, in its own time. [`super::real::RealBackend`] runs real marekvs
//! processes in wall-clock time; a simulator model can implement the same trait in virtual
//! time, so the same scenarios record comparable traces from both.

use std::collections::BTreeMap;
use std::ops::Range;

use super::format::{NodeEntry, SERIES};

/// What one member shows an operator at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// `GET /ready` status, `None` without an answer.
    pub ready: Option<u16>,
    /// `CLUSTER MYID` and `CLUSTER NODES`, when the RESP port answered.
    pub resp: Option<RespView>,
    /// `/metrics`, when it answered.
    pub metrics: Option<Metrics>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespView {
    pub myid: String,
    pub nodes: Vec<NodeEntry>,
}

/// The kept series of one scrape (names without `marekvs_`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    pub values: BTreeMap<String, u64>,
    /// `commands_total` by `cmd`.
    pub commands: BTreeMap<String, u64>,
    /// `info{version}`.
    pub version: Option<String>,
}

impl Metrics {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.values.get(name).copied()
    }
}

/// How a member's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// A cluster under a scenario's control. Member `m` is `0..members()`; keys are `key:<i>`.
///
/// Used through generics on one task, so its futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Backend {
    fn members(&self) -> usize;
    fn replicas_n(&self) -> u32;
    /// Milliseconds since the scenario started.
    fn now_ms(&self) -> u64;
    async fn sleep_ms(&mut self, ms: u64);
    /// Start member `m` on a fresh data directory.
    async fn start(&mut self, m: usize) -> anyhow::Result<()>;
    /// Start member `m` again on its data directory (after it exited).
    async fn restart(&mut self, m: usize) -> anyhow::Result<()>;
    /// Whether member `m`'s process runs (started and its exit not yet seen).
    fn running(&self, m: usize) -> bool;
    /// The exit of member `m`'s process, once it ended (each exit reported once).
    fn take_exit(&mut self, m: usize) -> Option<ExitInfo>;
    /// What member `m` shows now.
    async fn observe(&mut self, m: usize) -> Observation;
    /// `SET key:<i> <value of value_bytes>` for each `i` in `keys` through member `m`,
    /// pipelined: how many were acknowledged.
    async fn set(&mut self, m: usize, keys: Range<u32>, value_bytes: usize) -> anyhow::Result<u32>;
    /// `GET key:<i>` for each key through member `m`, pipelined: whether each had a value.
    async fn get(&mut self, m: usize, keys: &[u32]) -> anyhow::Result<Vec<bool>>;
    /// `GET /drain`: status (0 without an answer) and body.
    async fn drain(&mut self, m: usize) -> (u16, String);
    async fn sigterm(&mut self, m: usize) -> anyhow::Result<()>;
    /// Stop every member at once (the end of a scenario).
    async fn stop_all(&mut self);
}

/// The kept series of a `/metrics` text exposition.
pub fn parse_metrics(text: &str) -> Metrics {
    let mut out = Metrics::default();
    for line in text.lines() {
        let line = line.trim();
        let Some(name) = line.strip_prefix("marekvs_") else {
            continue;
        };
        let (series, value) = match name.find('{') {
            Some(open) => {
                let Some(close) = name[open..].find('}').map(|c| c + open) else {
                    continue;
                };
                (&name[..=close], name[close + 1..].trim())
            }
            None => match name.split_once(char::is_whitespace) {
                Some((s, v)) => (s, v.trim()),
                None => continue,
            },
        };
        let base = series.split('{').next().unwrap_or(series);
        let value = value.split_whitespace().next().and_then(parse_count);
        if base == "info" {
            out.version = label(series, "version");
        } else if base == "commands_total" {
            if let (Some(cmd), Some(v)) = (label(series, "cmd"), value) {
                *out.commands.entry(cmd).or_default() += v;
            }
        } else if SERIES.contains(&base)
            && let Some(v) = value
        {
            *out.values.entry(base.to_string()).or_default() += v;
        }
    }
    out
}

/// A sample value as a whole count (rounded; negative or not a number: none).
fn parse_count(v: &str) -> Option<u64> {
    let f: f64 = v.parse().ok()?;
    (f.is_finite() && f >= 0.0).then(|| f.round() as u64)
}

/// The value of label `name` in `series{a="x",b="y"}`.
fn label(series: &str, name: &str) -> Option<String> {
    let inner = series.split_once('{')?.1.strip_suffix('}')?;
    let pat = format!("{name}=\"");
    let start = inner
        .match_indices(&pat)
        .find(|(i, _)| *i == 0 || inner[..*i].ends_with(','))?
        .0
        + pat.len();
    let rest = &inner[start..];
    Some(rest[..rest.find('"')?].to_string())
}

/// `CLUSTER NODES`: one entry per well-formed line (`id addr flags master ping pong epoch
/// link ...`).
pub fn parse_nodes(text: &str) -> Vec<NodeEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            Some(NodeEntry {
                id: f[0].to_string(),
                addr: f[1].to_string(),
                flags: f[2].to_string(),
                generation: f[6].parse().unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_listed_series_and_commands_by_label() {
        let text = "# HELP marekvs_ring_ops x\n# TYPE marekvs_ring_ops gauge\nmarekvs_ring_ops 2000\n\
            marekvs_ring_bytes 1.5e3\nmarekvs_db_total_bytes 9\n\
            marekvs_commands_total{cmd=\"set\"} 7\nmarekvs_commands_total{cmd=\"cluster\"} 2\n\
            marekvs_info{node_id=\"0\",version=\"0.2.0\"} 1\nmarekvs_uptime_seconds 4\n";
        let m = parse_metrics(text);
        assert_eq!(m.get("ring_ops"), Some(2000));
        assert_eq!(m.get("ring_bytes"), Some(1500));
        assert_eq!(m.get("uptime_seconds"), Some(4));
        assert_eq!(m.get("db_total_bytes"), None);
        assert_eq!(m.commands.get("set"), Some(&7));
        assert_eq!(m.commands.get("cluster"), Some(&2));
        assert_eq!(m.version.as_deref(), Some("0.2.0"));
    }

    #[test]
    fn parses_cluster_nodes_lines() {
        let id = format!("{:040x}", 1);
        let text = format!(
            "{id} 127.77.0.2:6379@7946 myself,master - 0 0 1790000000 connected 0-5460\n\
             short line\n"
        );
        let nodes = parse_nodes(&text);
        assert_eq!(
            nodes,
            vec![NodeEntry {
                id,
                addr: "127.77.0.2:6379@7946".into(),
                flags: "myself,master".into(),
                generation: 1_790_000_000,
            }]
        );
    }
}
