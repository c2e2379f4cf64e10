//! Reads the figures the operator needs from a member's Prometheus text exposition.

use crate::types::{Disk, Scrape};

/// Parse `/metrics`. A figure the hand-off gate relies on that is missing makes the whole
/// scrape unusable (`None`): unknown is never safe.
pub fn parse_scrape(text: &str) -> Option<Scrape> {
    let mut view = None;
    let mut underrep = None;
    let mut join = None;
    let mut boots = None;
    let mut repairs = None;
    let mut commands: u64 = 0;
    let mut disk_total = None;
    let mut disk_avail = None;
    let mut write_stopped = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((series, rest)) = split_sample(line) else {
            continue;
        };
        let value = match rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            Some(v) if v.is_finite() && v >= 0.0 => v as u64,
            _ => continue,
        };
        let name = series.split('{').next().unwrap_or(series);
        match name {
            "marekvs_cluster_members" => view = Some(value),
            "marekvs_cluster_underreplicated_partitions" => underrep = Some(value),
            "marekvs_join_gate_pending_pids" => join = Some(value),
            "marekvs_bootstraps_completed_total" => boots = Some(value),
            "marekvs_ae_repair_ops_total" => repairs = Some(value),
            "marekvs_commands_total" => commands = commands.saturating_add(value),
            "marekvs_disk_total_bytes" => disk_total = Some(value),
            "marekvs_disk_avail_bytes" => disk_avail = Some(value),
            "marekvs_disk_write_stopped" => write_stopped = value >= 1,
            _ => {}
        }
    }
    Some(Scrape {
        view_members: view?,
        underreplicated: underrep?,
        join_pending: join?,
        bootstraps_total: boots?,
        repairs_total: repairs?,
        commands_total: commands,
        disk: match (disk_total, disk_avail) {
            (Some(total), Some(avail)) if total > 0 => Some(Disk {
                used_bytes: total.saturating_sub(avail),
                total_bytes: total,
            }),
            _ => None,
        },
        write_stopped,
    })
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
            }
        );
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
}
