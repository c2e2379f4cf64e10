//! Reads the figures the operator needs from a member's Prometheus text exposition.

use crate::types::{Disk, Scrape};

/// How the samples of one metric (one per label set) combine into the one figure read, and
/// which way a fraction rounds. Each figure reads on the side where the operator errs safe:
/// a gauge is never read low because another sample came last or a fraction was cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Combine {
    /// The largest sample, rounded up: a gauge the operator holds back on while it is above
    /// 0 (under-replicated partitions, partitions pending the join gate, writes stopped).
    /// Any one sample saying "not safe" is enough.
    Max,
    /// The smallest sample, rounded down: the disk space available, so that the fill worked
    /// out from it (with [`Combine::Max`] for the capacity) is never lower than any one
    /// sample's. A fuller disk means no scale-down, never fewer members.
    Min,
    /// Every sample the same whole number, or unknown: the member count of the node's view.
    /// The gate asks for an exact match with the expected members, so neither a maximum nor
    /// a minimum is safe (either can equal the expected count while another sample
    /// disagrees), and a fraction is not a count. A node contradicting itself is unknown,
    /// which the gate treats as not safe.
    Agree,
    /// The sum over the series, rounded up: a counter split over labels (the repair and
    /// bootstrap totals, the commands served). The gate waits until the counters stand
    /// still; the sum moves when any series moves, where the last or largest series may not.
    Sum,
}

/// One figure's samples so far.
#[derive(Clone, Debug)]
struct Figure {
    how: Combine,
    /// A sample whose value is not a finite number at least 0 makes the figure unknown
    /// (the gate figures), or is skipped (the rest: load and disk, where unknown is not the
    /// safe side).
    strict: bool,
    acc: Option<f64>,
    unknown: bool,
}

impl Figure {
    const fn new(how: Combine, strict: bool) -> Self {
        Figure {
            how,
            strict,
            acc: None,
            unknown: false,
        }
    }

    fn add(&mut self, value: Option<f64>) {
        let Some(v) = value.filter(|v| v.is_finite() && *v >= 0.0) else {
            self.unknown |= self.strict;
            return;
        };
        self.acc = Some(match (self.how, self.acc) {
            (_, None) => {
                self.unknown |= self.how == Combine::Agree && v.fract() != 0.0;
                v
            }
            (Combine::Max, Some(a)) => a.max(v),
            (Combine::Min, Some(a)) => a.min(v),
            (Combine::Sum, Some(a)) => a + v,
            (Combine::Agree, Some(a)) => {
                self.unknown |= a != v;
                a
            }
        });
    }

    /// The figure, `None` if it was not reported or is unknown. Out of range saturates.
    fn read(&self) -> Option<u64> {
        if self.unknown {
            return None;
        }
        let v = self.acc?;
        Some(match self.how {
            Combine::Min => v.floor(),
            Combine::Max | Combine::Sum | Combine::Agree => v.ceil(),
        } as u64)
    }
}

/// Parse `/metrics`. A figure the hand-off gate relies on that is missing (or unknown: a
/// sample that is not a number, a view count the node contradicts) makes the whole scrape
/// unusable (`None`): unknown is never safe. How the samples of each metric combine is
/// [`Combine`]'s: gauges the gate blocks on read as their maximum, rounded up.
pub fn parse_scrape(text: &str) -> Option<Scrape> {
    let mut parser = ScrapeParser::default();
    for line in text.lines() {
        parser.line(line);
    }
    parser.finish()
}

/// [`parse_scrape`] a line at a time, so a body can be parsed as it arrives and never held
/// whole: feed every line (with or without its line ending), then [`ScrapeParser::finish`].
#[derive(Clone, Debug)]
pub struct ScrapeParser {
    view: Figure,
    underrep: Figure,
    join: Figure,
    boots: Figure,
    repairs: Figure,
    commands: Figure,
    // The fill is used / total = 1 - avail / total: highest with the most capacity and the
    // least space available any sample reports.
    disk_total: Figure,
    disk_avail: Figure,
    write_stopped: Figure,
    // Occupancy, not a backlog: shown, and a leaver's ring at its cap while entries still
    // enter it (its own writes, or ops applied from others) may evict what it never shipped.
    ring: Figure,
    ring_bytes: Figure,
    applied: Figure,
    // Strict, but not needed for the scrape: a leaver whose rounds or input are unknown holds
    // its hand-off, nothing else does.
    rounds: Figure,
    input: Figure,
    // Strict too, for the leaver only: a ring still shipping holds its hand-off.
    sent: Figure,
    inflight: Figure,
    writes: Figure,
    uptime: Figure,
    version: Version,
}

/// The `version` label of `marekvs_info`, as far as its samples agree.
#[derive(Clone, Debug, Default)]
enum Version {
    #[default]
    Unseen,
    Seen(String),
    /// Two samples named different versions, or one named no plain version.
    Unknown,
}

/// The longest version string kept: member-supplied text that goes into status.
const MAX_VERSION_LEN: usize = 64;

/// A plain release string (`0.2.0`, `0.3.0-rc.1+abc`): ASCII letters, digits, `.`, `-`, `+`
/// and `_`, at most [`MAX_VERSION_LEN`] long.
fn plain_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_VERSION_LEN
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_'))
}

impl Version {
    fn add(&mut self, label: Option<&str>) {
        *self = match (std::mem::take(self), label) {
            (Version::Unseen, Some(v)) if plain_version(v) => Version::Seen(v.to_string()),
            (Version::Seen(seen), Some(v)) if seen == v => Version::Seen(seen),
            _ => Version::Unknown,
        };
    }

    fn read(self) -> Option<String> {
        match self {
            Version::Seen(v) => Some(v),
            Version::Unseen | Version::Unknown => None,
        }
    }
}

impl Default for ScrapeParser {
    fn default() -> Self {
        ScrapeParser {
            view: Figure::new(Combine::Agree, true),
            underrep: Figure::new(Combine::Max, true),
            join: Figure::new(Combine::Max, true),
            boots: Figure::new(Combine::Sum, true),
            repairs: Figure::new(Combine::Sum, true),
            commands: Figure::new(Combine::Sum, false),
            disk_total: Figure::new(Combine::Max, false),
            disk_avail: Figure::new(Combine::Min, false),
            write_stopped: Figure::new(Combine::Max, false),
            ring: Figure::new(Combine::Max, true),
            ring_bytes: Figure::new(Combine::Max, true),
            applied: Figure::new(Combine::Sum, false),
            rounds: Figure::new(Combine::Sum, true),
            input: Figure::new(Combine::Sum, true),
            sent: Figure::new(Combine::Sum, false),
            inflight: Figure::new(Combine::Max, true),
            writes: Figure::new(Combine::Sum, false),
            uptime: Figure::new(Combine::Min, false),
            version: Version::Unseen,
        }
    }
}

impl ScrapeParser {
    /// One line of the body; a trailing `\r\n` or `\n` is ignored.
    pub fn line(&mut self, line: &str) {
        let Some(Sample {
            name,
            series,
            value,
        }) = sample(line)
        else {
            return;
        };
        if name == "marekvs_commands_total" && label(series, "cmd").is_some_and(is_write_command) {
            self.writes.add(value);
        }
        if name == "marekvs_info" {
            self.version.add(label(series, "version"));
            return;
        }
        if name == "marekvs_uptime_seconds" {
            self.uptime.add(value.map(|v| v * 1000.0));
            return;
        }
        let figure = match name {
            "marekvs_cluster_members" => &mut self.view,
            "marekvs_cluster_underreplicated_partitions" => &mut self.underrep,
            "marekvs_join_gate_pending_pids" => &mut self.join,
            "marekvs_bootstraps_completed_total" => &mut self.boots,
            "marekvs_ae_repair_ops_total" => &mut self.repairs,
            "marekvs_commands_total" => &mut self.commands,
            "marekvs_disk_total_bytes" => &mut self.disk_total,
            "marekvs_disk_avail_bytes" => &mut self.disk_avail,
            "marekvs_disk_write_stopped" => &mut self.write_stopped,
            "marekvs_ring_ops" => &mut self.ring,
            "marekvs_ring_bytes" => &mut self.ring_bytes,
            "marekvs_repl_ops_applied_total" => &mut self.applied,
            "marekvs_ae_rounds_total" => &mut self.rounds,
            "marekvs_net_input_bytes_total" => &mut self.input,
            "marekvs_repl_ops_sent_total" => &mut self.sent,
            "marekvs_repl_inflight_bytes" => &mut self.inflight,
            _ => return,
        };
        figure.add(value);
    }

    /// The scrape the lines fed make, as [`parse_scrape`] reads it.
    pub fn finish(self) -> Option<Scrape> {
        Some(Scrape {
            view_members: self.view.read()?,
            underreplicated: self.underrep.read()?,
            join_pending: self.join.read()?,
            bootstraps_total: self.boots.read()?,
            repairs_total: self.repairs.read()?,
            commands_total: self.commands.read().unwrap_or(0),
            disk: match (self.disk_total.read(), self.disk_avail.read()) {
                (Some(total), Some(avail)) if total > 0 => Some(Disk {
                    used_bytes: total.saturating_sub(avail),
                    total_bytes: total,
                }),
                _ => None,
            },
            write_stopped: self.write_stopped.read().is_some_and(|v| v >= 1),
            ring_ops: self.ring.read(),
            ring_bytes: self.ring_bytes.read(),
            repl_applied: self.applied.read(),
            ae_rounds: self.rounds.read(),
            client_input_bytes: self.input.read(),
            write_commands: self.writes.read().unwrap_or(0),
            uptime_ms: self.uptime.read(),
            repl_sent: self.sent.read(),
            repl_inflight_bytes: self.inflight.read(),
            version: self.version.read(),
        })
    }
}

/// One sample line of a Prometheus text exposition, `name{a="x",b="y"} value [timestamp]`,
/// as [`sample`] splits it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample<'a> {
    /// The metric name, without labels: `name`.
    pub name: &'a str,
    /// The name with its labels as written: `name{a="x",b="y"}` (`name` when unlabelled).
    pub series: &'a str,
    /// The value, if it is a number (a timestamp after it is not read).
    pub value: Option<f64>,
}

impl<'a> Sample<'a> {
    /// The value of label `key`, if the series has it (escapes kept as they are).
    pub fn label(&self, key: &str) -> Option<&'a str> {
        label(self.series, key)
    }
}

/// Split one line of a Prometheus text exposition (with or without its line ending) into a
/// [`Sample`]; `None` for a comment (`# HELP`, `# TYPE`, ...), a blank line or a bare name.
/// A value that is missing or not a number reads as `value: None`.
pub fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (series, rest) = split_sample(line)?;
    Some(Sample {
        name: series.split('{').next().unwrap_or(series),
        series,
        value: rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok()),
    })
}

/// The value of label `name` in a series `metric{a="x",b="y"}` (escapes kept as they are:
/// the command names compared against have none).
fn label<'s>(series: &'s str, name: &str) -> Option<&'s str> {
    let inner = series.split_once('{')?.1.strip_suffix('}')?;
    let mut rest = inner;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.strip_prefix('"')?;
        let end = after.find('"')?;
        if key.trim().trim_start_matches(',').trim() == name {
            return Some(&after[..end]);
        }
        rest = after[end + 1..].trim_start_matches(',');
    }
    None
}

/// Commands that change data (lowercase, as the node labels `marekvs_commands_total`). Only
/// reported: the hand-off gate counts a leaver's client input in bytes, which also sees
/// what the node leaves uncounted (commands queued in MULTI and run by EXEC, calls inside a
/// script).
pub fn is_write_command(cmd: &str) -> bool {
    const WRITES: &[&str] = &[
        "append",
        "copy",
        "decr",
        "decrby",
        "del",
        "eval",
        "evalsha",
        "expire",
        "expireat",
        "fcall",
        "getdel",
        "getex",
        "getset",
        "hdel",
        "hincrby",
        "hincrbyfloat",
        "hmset",
        "hset",
        "hsetnx",
        "incr",
        "incrby",
        "incrbyfloat",
        "linsert",
        "lmove",
        "lpop",
        "lpush",
        "lpushx",
        "lrem",
        "lset",
        "ltrim",
        "mset",
        "msetnx",
        "persist",
        "pexpire",
        "pexpireat",
        "psetex",
        "rename",
        "renamenx",
        "restore",
        "rpop",
        "rpoplpush",
        "rpush",
        "rpushx",
        "sadd",
        "sdiffstore",
        "set",
        "setex",
        "setnx",
        "setrange",
        "sinterstore",
        "smove",
        "spop",
        "srem",
        "sunionstore",
        "unlink",
        "xadd",
        "xdel",
        "xtrim",
        "zadd",
        "zincrby",
        "zpopmax",
        "zpopmin",
        "zrem",
        "zremrangebyrank",
        "zremrangebyscore",
        "flushall",
        "flushdb",
    ];
    WRITES.contains(&cmd)
}

/// Split `name{labels} value [timestamp]` into the series and the rest; label values may
/// contain spaces.
fn split_sample(line: &str) -> Option<(&str, &str)> {
    if let Some(open) = line.find('{') {
        let close = line[open..].find('}')? + open;
        Some((&line[..=close], line[close + 1..].trim_start()))
    } else {
        let mut it = line.splitn(2, char::is_whitespace);
        Some((it.next()?, it.next()?.trim_start()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP marekvs_cluster_members x\n# TYPE marekvs_cluster_members gauge\n\
        marekvs_cluster_members 4\nmarekvs_cluster_underreplicated_partitions 0\n\
        marekvs_join_gate_pending_pids 12\nmarekvs_bootstraps_completed_total 4096\n\
        marekvs_ae_repair_ops_total 7\nmarekvs_commands_total{cmd=\"get\"} 10\n\
        marekvs_commands_total{cmd=\"set x\"} 5 1700000000000\nmarekvs_uptime_seconds 3.5\n";

    #[test]
    fn reads_the_version_marekvs_info_names_and_nothing_unclear() {
        let with = |more: &str| parse_scrape(&format!("{TEXT}{more}")).unwrap().version;
        // As marekvs 0.2 writes it (engine metrics.rs: labels version, node_id; value 1).
        let info = "marekvs_info{version=\"0.2.0\",node_id=\"3\"} 1\n";
        assert_eq!(with(info).as_deref(), Some("0.2.0"));
        assert_eq!(
            with("marekvs_info{node_id=\"3\",version=\"0.3.0-rc.1+g1\"} 1\n").as_deref(),
            Some("0.3.0-rc.1+g1")
        );
        // Not reported, or the label missing: unknown.
        assert_eq!(with(""), None);
        assert_eq!(with("marekvs_info{node_id=\"3\"} 1\n"), None);
        // Two samples that agree are one version; two that disagree are none.
        assert_eq!(with(&format!("{info}{info}")).as_deref(), Some("0.2.0"));
        assert_eq!(
            with(&format!(
                "{info}marekvs_info{{version=\"0.3.0\",node_id=\"3\"}} 1\n"
            )),
            None
        );
        // Text that is not a plain version never reaches status.
        assert_eq!(with("marekvs_info{version=\"0.2 0\"} 1\n"), None);
        assert_eq!(with("marekvs_info{version=\"\"} 1\n"), None);
        let long = "9".repeat(MAX_VERSION_LEN + 1);
        assert_eq!(
            with(&format!("marekvs_info{{version=\"{long}\"}} 1\n")),
            None
        );
        // The version is shown only: the gate figures read as before without it.
        assert!(parse_scrape(TEXT).is_some());
    }

    #[test]
    fn reads_the_gate_figures_and_sums_commands() {
        let s = parse_scrape(TEXT).unwrap();
        assert_eq!(
            s,
            Scrape {
                view_members: 4,
                underreplicated: 0,
                join_pending: 12,
                bootstraps_total: 4096,
                repairs_total: 7,
                commands_total: 15,
                disk: None,
                write_stopped: false,
                // Not reported: unknown.
                ring_ops: None,
                ring_bytes: None,
                repl_applied: None,
                ae_rounds: None,
                client_input_bytes: None,
                // `set x` is no command the node has.
                write_commands: 0,
                uptime_ms: Some(3500),
                repl_sent: None,
                repl_inflight_bytes: None,
                version: None,
            }
        );
    }

    #[test]
    fn reads_rounds_input_and_write_commands() {
        let text = format!(
            "{TEXT}marekvs_ae_rounds_total 12\nmarekvs_net_input_bytes_total 4096\n\
             marekvs_commands_total{{cmd=\"set\"}} 30\nmarekvs_commands_total{{x=\"a=b,c\",cmd=\"del\"}} 2\n\
             marekvs_commands_total{{cmd=\"cluster\"}} 9\nmarekvs_ring_ops 262144\n\
             marekvs_repl_ops_sent_total 79599\nmarekvs_repl_inflight_bytes 4.2581e+06\n\
             marekvs_ring_bytes 1.34217e+08\nmarekvs_repl_ops_applied_total 5120\n"
        );
        let s = parse_scrape(&text).unwrap();
        assert_eq!(s.ring_bytes, Some(134_217_000));
        assert_eq!(s.repl_applied, Some(5_120));
        assert_eq!(s.ae_rounds, Some(12));
        assert_eq!(s.repl_sent, Some(79_599));
        assert_eq!(s.repl_inflight_bytes, Some(4_258_100));
        assert_eq!(s.client_input_bytes, Some(4096));
        assert_eq!(s.write_commands, 32, "set and del, not get or cluster");
        assert_eq!(s.commands_total, 56);
        assert_eq!(s.ring_ops, Some(262_144));
        // A round count that is not a number is unknown, and only it: the scrape stands.
        let bad = text.replace("marekvs_ae_rounds_total 12", "marekvs_ae_rounds_total NaN");
        let s = parse_scrape(&bad).unwrap();
        assert_eq!((s.ae_rounds, s.client_input_bytes), (None, Some(4096)));
    }

    #[test]
    fn a_missing_gate_figure_makes_the_scrape_unknown() {
        let without = TEXT.replace("marekvs_cluster_underreplicated_partitions 0\n", "");
        assert_eq!(parse_scrape(&without), None);
        assert_eq!(parse_scrape(""), None);
        assert_eq!(parse_scrape("<html>503</html>"), None);
    }

    #[test]
    fn reads_the_disk_signal_when_present() {
        let text = format!(
            "{TEXT}marekvs_disk_total_bytes 1000\nmarekvs_disk_avail_bytes 250\nmarekvs_disk_write_stopped 1\n"
        );
        let s = parse_scrape(&text).unwrap();
        assert_eq!(
            s.disk,
            Some(Disk {
                used_bytes: 750,
                total_bytes: 1000
            })
        );
        assert!(s.write_stopped);
        let no_total = text.replace("marekvs_disk_total_bytes 1000\n", "");
        assert_eq!(parse_scrape(&no_total).unwrap().disk, None);
    }

    #[test]
    fn garbage_values_are_ignored_not_trusted() {
        let bad = TEXT.replace("marekvs_cluster_members 4", "marekvs_cluster_members NaN");
        assert_eq!(parse_scrape(&bad), None);
    }

    /// `TEXT` with `lines` in place of the unlabelled sample of `name`.
    fn with(name: &str, lines: &str) -> String {
        let mut out: String = TEXT
            .lines()
            .filter(|l| !l.starts_with(&format!("{name} ")))
            .map(|l| format!("{l}\n"))
            .collect();
        out.push_str(lines);
        out
    }

    #[test]
    fn a_blocking_gauge_reads_as_its_largest_sample_rounded_up() {
        let s = parse_scrape(&with(
            "marekvs_cluster_underreplicated_partitions",
            "marekvs_cluster_underreplicated_partitions{shard=\"a\"} 7\n\
             marekvs_cluster_underreplicated_partitions{shard=\"b\"} 0\n",
        ))
        .unwrap();
        assert_eq!(s.underreplicated, 7, "not the last sample");
        let s = parse_scrape(&with(
            "marekvs_cluster_underreplicated_partitions",
            "marekvs_cluster_underreplicated_partitions 0.5\n",
        ))
        .unwrap();
        assert_eq!(s.underreplicated, 1, "a fraction rounds up");
        let s = parse_scrape(&with(
            "marekvs_join_gate_pending_pids",
            "marekvs_join_gate_pending_pids{a=\"1\"} 2.01\nmarekvs_join_gate_pending_pids{a=\"2\"} 1\n",
        ))
        .unwrap();
        assert_eq!(s.join_pending, 3);
        let s = parse_scrape(&format!(
            "{TEXT}marekvs_disk_write_stopped{{v=\"a\"}} 0.2\nmarekvs_disk_write_stopped{{v=\"b\"}} 0\n"
        ))
        .unwrap();
        assert!(s.write_stopped, "any sample above 0 is writes stopped");
    }

    #[test]
    fn a_view_count_the_node_contradicts_is_unknown() {
        let two = with(
            "marekvs_cluster_members",
            "marekvs_cluster_members{a=\"1\"} 4\nmarekvs_cluster_members{a=\"2\"} 3\n",
        );
        assert_eq!(parse_scrape(&two), None);
        let same = with(
            "marekvs_cluster_members",
            "marekvs_cluster_members{a=\"1\"} 4\nmarekvs_cluster_members{a=\"2\"} 4.0\n",
        );
        assert_eq!(parse_scrape(&same).unwrap().view_members, 4);
        let half = with("marekvs_cluster_members", "marekvs_cluster_members 3.5\n");
        assert_eq!(parse_scrape(&half), None, "a fraction is not a count");
    }

    #[test]
    fn counters_split_over_labels_are_summed() {
        let s = parse_scrape(&with(
            "marekvs_ae_repair_ops_total",
            "marekvs_ae_repair_ops_total{peer=\"a\"} 7\nmarekvs_ae_repair_ops_total{peer=\"b\"} 5\n",
        ))
        .unwrap();
        assert_eq!(s.repairs_total, 12);
        let s = parse_scrape(&with(
            "marekvs_bootstraps_completed_total",
            "marekvs_bootstraps_completed_total{a=\"1\"} 4096\nmarekvs_bootstraps_completed_total{a=\"2\"} 0.5\n",
        ))
        .unwrap();
        assert_eq!(s.bootstraps_total, 4097);
    }

    #[test]
    fn one_garbage_sample_of_a_gate_figure_makes_it_unknown() {
        for bad in ["NaN", "-1", "+Inf", "x"] {
            let text = with(
                "marekvs_cluster_underreplicated_partitions",
                &format!(
                    "marekvs_cluster_underreplicated_partitions{{a=\"1\"}} 0\n\
                     marekvs_cluster_underreplicated_partitions{{a=\"2\"}} {bad}\n"
                ),
            );
            assert_eq!(parse_scrape(&text), None, "{bad}");
        }
    }

    #[test]
    fn the_disk_reads_as_full_as_any_sample_says() {
        let text = format!(
            "{TEXT}marekvs_disk_total_bytes{{d=\"a\"}} 100\nmarekvs_disk_avail_bytes{{d=\"a\"}} 90\n\
             marekvs_disk_total_bytes{{d=\"b\"}} 1000\nmarekvs_disk_avail_bytes{{d=\"b\"}} 100.5\n"
        );
        let d = parse_scrape(&text).unwrap().disk.unwrap();
        assert_eq!((d.used_bytes, d.total_bytes), (910, 1000));
        // Every sample's fill is at most the one read.
        for (total, avail) in [(100.0, 90.0), (1000.0, 100.5)] {
            assert!(1.0 - avail / total <= d.used_bytes as f64 / d.total_bytes as f64);
        }
    }

    #[test]
    fn a_plain_sample_splits_into_name_and_value() {
        let s = sample("marekvs_cluster_members 4\n").unwrap();
        assert_eq!(s.name, "marekvs_cluster_members");
        assert_eq!(s.series, "marekvs_cluster_members");
        assert_eq!(s.value, Some(4.0));
        assert_eq!(s.label("cmd"), None);
    }

    #[test]
    fn a_labelled_sample_keeps_its_series_and_reads_its_labels() {
        let s = sample("marekvs_commands_total{cmd=\"set x\",shard=\"2\"} 5.5").unwrap();
        assert_eq!(s.name, "marekvs_commands_total");
        assert_eq!(
            s.series,
            "marekvs_commands_total{cmd=\"set x\",shard=\"2\"}"
        );
        assert_eq!(s.value, Some(5.5));
        assert_eq!(s.label("cmd"), Some("set x"));
        assert_eq!(s.label("shard"), Some("2"));
        assert_eq!(s.label("md"), None);
    }

    #[test]
    fn comments_and_blank_lines_are_no_sample() {
        assert_eq!(sample("# HELP marekvs_cluster_members x"), None);
        assert_eq!(sample("# TYPE marekvs_cluster_members gauge"), None);
        assert_eq!(sample("  \r\n"), None);
        assert_eq!(sample("marekvs_cluster_members"), None);
    }

    #[test]
    fn a_timestamp_after_the_value_is_not_the_value() {
        let s = sample("marekvs_commands_total{cmd=\"get\"} 10 1700000000000").unwrap();
        assert_eq!(s.series, "marekvs_commands_total{cmd=\"get\"}");
        assert_eq!(s.value, Some(10.0));
        let s = sample("marekvs_uptime_seconds 3.5 1700000000000").unwrap();
        assert_eq!((s.name, s.value), ("marekvs_uptime_seconds", Some(3.5)));
        // A value that is not a number is a sample without one.
        assert_eq!(sample("marekvs_cluster_members NaNa").unwrap().value, None);
    }
}
