//! `kubectl mkv status`: the cluster line, the conditions worth reading, and a table of the
//! members from `status.members` (kept volumes and look-alikes below it when there are any).

use std::collections::BTreeMap;

use marekvs_api::conditions::{
    AUTOSCALING, READY, REASON_INVALID_SPEC, REASON_NAME_TAKEN, REMOVAL_CHOICES,
};
use marekvs_api::{MarekvsCluster, MarekvsClusterStatus, MemberStatus, Moving};

use crate::age::{millis, since};

/// When each PVC was created (its `metadata.creationTimestamp`, in ms), by PVC name.
pub type VolumeBirths = BTreeMap<String, i64>;

/// The whole `status` output at `now_ms`.
pub fn status_text(cr: &MarekvsCluster, births: &VolumeBirths, now_ms: i64) -> String {
    let status = cr.status.clone().unwrap_or_default();
    let mut out = cluster_line(cr, &status);
    out.push('\n');
    out.push_str(&format!("  {}\n", freshness_line(cr, &status, now_ms)));
    for line in condition_lines(&status)
        .into_iter()
        .chain(hold_lines(&status, now_ms))
    {
        out.push_str(&format!("  {line}\n"));
    }
    out.push('\n');
    out.push_str(&members_table(&status, births, now_ms));
    if !status.kept_volumes.is_empty() {
        out.push_str("\nKept volumes (not members):\n");
        out.push_str(&kept_volumes_table(&status, now_ms));
    }
    if !status.look_alikes.is_empty() {
        out.push_str("\nLook-alikes (not this cluster's; nothing is done in their name):\n");
        out.push_str(&look_alikes_table(&status));
    }
    out
}

/// `demo: Healthy, 3/3 ready (spec.nodes 3), blocked: Underreplicated, paused`.
pub fn cluster_line(cr: &MarekvsCluster, s: &MarekvsClusterStatus) -> String {
    let name = cr.metadata.name.as_deref().unwrap_or("?");
    let phase = s.phase.map_or("Unknown".to_string(), |p| format!("{p:?}"));
    let members = s.instance_names.len();
    let ready = s.ready_nodes.unwrap_or(0);
    let mut line = format!(
        "{name}: {phase}, {ready}/{members} ready (spec.nodes {})",
        cr.spec.nodes
    );
    if let Some(b) = s.block_reason {
        line.push_str(&format!(", blocked: {b:?}"));
    }
    if cr.spec.paused {
        line.push_str(", paused");
    }
    if cr.spec.hibernation {
        line.push_str(", hibernation asked");
    }
    if !cr.spec.fenced_members.is_empty() {
        line.push_str(&format!(", fenced: {}", cr.spec.fenced_members.join(", ")));
    }
    line
}

/// A recorded pass older than this (three of the operator's once-a-minute heartbeats in
/// `status.lastPassTime`) means no operator is acting on the cluster.
pub const STALE_AFTER_MS: i64 = 3 * 60_000;

/// How fresh what follows is: the age of the last pass the operator recorded, by which
/// version, and whether it has acted on the spec's latest generation, so that an operator
/// outage never reads as a healthy cluster. `STALE:` leads when it is not fresh.
pub fn freshness_line(cr: &MarekvsCluster, s: &MarekvsClusterStatus, now_ms: i64) -> String {
    let Some(last) = s.last_pass_time.as_ref().map(millis) else {
        return "STALE: no pass recorded in status.lastPassTime: no operator has acted on this \
                cluster, or only one older than this plugin"
            .into();
    };
    let by = s
        .operator_version
        .as_deref()
        .map_or(String::new(), |v| format!(" by operator {v}"));
    let age = since(last, now_ms);
    let waits_for_spec = s.conditions.iter().any(|c| {
        c.type_ == READY && (c.reason == REASON_INVALID_SPEC || c.reason == REASON_NAME_TAKEN)
    });
    if waits_for_spec {
        return format!(
            "the operator waits for a change (see Ready); its last pass was {age} ago{by}"
        );
    }
    if now_ms - last > STALE_AFTER_MS {
        return format!(
            "STALE: the last pass recorded was {age} ago{by}: no operator is acting on this \
             cluster; what follows is as it was then"
        );
    }
    match (cr.metadata.generation, s.observed_generation) {
        (Some(g), Some(o)) if o >= g => format!("as of a pass {age} ago{by}, spec generation {g}"),
        (Some(g), o) => format!(
            "spec generation {g} not acted on yet (status describes {}); last pass {age} ago{by}",
            o.map_or("none".to_string(), |o| o.to_string())
        ),
        (None, _) => format!("as of a pass {age} ago{by}"),
    }
}

/// Conditions away from their quiet value (`Ready` not True, `RemovalChoices` not True, any
/// other True), as `Type: Reason: message`; the autoscaler's is in `plan`.
pub fn condition_lines(s: &MarekvsClusterStatus) -> Vec<String> {
    s.conditions
        .iter()
        .filter(|c| c.type_ != AUTOSCALING)
        .filter(|c| {
            let quiet = if c.type_ == READY || c.type_ == REMOVAL_CHOICES {
                "True"
            } else {
                "False"
            };
            c.status != quiet
        })
        .map(|c| {
            if c.message.is_empty() {
                format!("{}={}: {}", c.type_, c.status, c.reason)
            } else {
                format!("{}={}: {}: {}", c.type_, c.status, c.reason, c.message)
            }
        })
        .collect()
}

/// What holds the next scale-down step and the repairs that hold nothing, with their ages:
/// `HandoffHold: LeaverBacklog (ClientTraffic on demo-3 at 800.0 writes/s, for 95s): …`.
pub fn hold_lines(s: &MarekvsClusterStatus, now_ms: i64) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(h) = &s.handoff_hold {
        let rate = match (h.moving, h.rate_per_second) {
            (Moving::ClientTraffic, Some(r)) => format!(" at {r:.1} writes/s"),
            (_, Some(r)) => format!(" at {r:.1}/s"),
            (_, None) => String::new(),
        };
        let stuck = if h.stuck { ", stuck" } else { "" };
        lines.push(format!(
            "HandoffHold: {:?} ({:?} on {}{rate}, for {}{stuck}): {}",
            h.reason,
            h.moving,
            names(&h.members),
            since(millis(&h.since), now_ms),
            h.message
        ));
    }
    if let Some(b) = &s.background_repair {
        lines.push(format!(
            "BackgroundRepair: {} at {:.1}/s for {} (holds nothing)",
            names(&b.members),
            b.rate_per_second,
            since(millis(&b.since), now_ms)
        ));
    }
    lines
}

fn names(members: &[String]) -> String {
    if members.is_empty() {
        "-".into()
    } else {
        members.join(", ")
    }
}

/// One row per member, in ordinal order.
pub fn members_table(s: &MarekvsClusterStatus, births: &VolumeBirths, now_ms: i64) -> String {
    let header = [
        "NAME",
        "PHASE",
        "READY",
        "VERSION",
        "VIEW",
        "UNDERREP",
        "JOIN-PENDING",
        "QUIET",
        "LAST-REPAIR",
        "VOLUME-AGE",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    let want = s.instance_names.len() as i64;
    rows.extend(
        s.members
            .iter()
            .map(|m| member_row(m, want, births, now_ms)),
    );
    render(&rows)
}

fn member_row(m: &MemberStatus, want: i64, births: &VolumeBirths, now_ms: i64) -> Vec<String> {
    let figure = |f: fn(&marekvs_api::MemberMetrics) -> i64| {
        m.metrics.as_ref().map_or("-".into(), |x| f(x).to_string())
    };
    let view = m.metrics.as_ref().map_or("-".into(), |x| {
        if x.view_members == want {
            x.view_members.to_string()
        } else {
            format!("{} (want {want})", x.view_members)
        }
    });
    let volume_age = m
        .pvc
        .as_ref()
        .and_then(|p| births.get(p))
        .map_or("-".into(), |b| since(*b, now_ms));
    vec![
        m.name.clone(),
        format!("{:?}", m.phase),
        if m.ready { "yes" } else { "no" }.into(),
        m.version.clone().unwrap_or_else(|| "-".into()),
        view,
        figure(|x| x.underreplicated_partitions),
        figure(|x| x.join_gate_pending),
        quiet(m, now_ms),
        m.counters_changed_at
            .as_ref()
            .map_or("-".into(), |t| format!("{} ago", since(millis(t), now_ms))),
        volume_age,
    ]
}

/// Since when the member has been quiet (no client input, restart or view change) and how many
/// anti-entropy rounds it began since: what the hand-off gate counts. `?` rounds when its
/// node does not report them.
fn quiet(m: &MemberStatus, now_ms: i64) -> String {
    let Some(at) = &m.quiet_since else {
        return "-".into();
    };
    let rounds = match (
        m.metrics.as_ref().and_then(|x| x.ae_rounds_total),
        m.rounds_at_quiet,
    ) {
        (Some(now), Some(then)) => (now - then).max(0).to_string(),
        _ => "?".into(),
    };
    format!("{} ({rounds} rounds)", since(millis(at), now_ms))
}

fn kept_volumes_table(s: &MarekvsClusterStatus, now_ms: i64) -> String {
    let mut rows = vec![
        ["PVC", "MEMBER", "AWAY", "REUSABLE"]
            .map(String::from)
            .to_vec(),
    ];
    rows.extend(s.kept_volumes.iter().map(|k| {
        vec![
            k.name.clone(),
            k.member.clone(),
            k.absent_since
                .as_ref()
                .map_or("-".into(), |t| since(millis(t), now_ms)),
            if k.reusable { "yes" } else { "no (stale)" }.into(),
        ]
    }));
    render(&rows)
}

fn look_alikes_table(s: &MarekvsClusterStatus) -> String {
    let mut rows = vec![["KIND", "NAME", "MEMBER", "WHY"].map(String::from).to_vec()];
    rows.extend(s.look_alikes.iter().map(|l| {
        vec![
            format!("{:?}", l.kind),
            l.name.clone(),
            l.member.clone(),
            l.why.clone(),
        ]
    }));
    render(&rows)
}

/// Left-aligned columns three spaces apart, as kubectl prints them.
pub fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 3;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{cluster, t};
    use serde_json::json;

    #[test]
    fn the_status_of_a_cluster_renders_exactly() {
        let cr = cluster(json!({"nodes": 3, "paused": true}));
        let births = VolumeBirths::from([
            ("data-demo-0".into(), t("2026-11-20T10:00:00Z")),
            ("data-demo-1".into(), t("2026-11-25T09:00:00Z")),
        ]);
        let now = t("2026-11-25T10:00:00Z");
        let want = "\
demo: Blocked, 2/3 ready (spec.nodes 3), blocked: Underreplicated, paused
  as of a pass 12s ago by operator 0.1.0, spec generation 4
  Ready=False: NotReady: demo-2 is not ready
  Blocked=True: Underreplicated: 4 partitions under-replicated
  SuspectedPartition=True: ViewsDisagree: demo-1 sees a stranger
  MixedVersions=True: MixedVersions: demo-0 runs 0.2.0; demo-1 runs 0.3.0; no version read from demo-2
  HandoffHold: Underreplicated (Other on demo-1, for 95s): 4 partitions under-replicated
  BackgroundRepair: demo-0, demo-1 at 12.5/s for 30s (holds nothing)

NAME     PHASE     READY   VERSION   VIEW         UNDERREP   JOIN-PENDING   QUIET             LAST-REPAIR   VOLUME-AGE
demo-0   Active    yes     0.2.0     3            0          0              75s (12 rounds)   75s ago       5d
demo-1   Active    yes     0.3.0     2 (want 3)   4          1              90s (? rounds)    -             60m
demo-2   Unready   no      -         -            -          -              -                 -             -

Kept volumes (not members):
PVC           MEMBER   AWAY   REUSABLE
data-demo-3   demo-3   2m     yes
data-demo-4   demo-4   -      no (stale)

Look-alikes (not this cluster's; nothing is done in their name):
KIND   NAME     MEMBER   WHY
Pod    demo-5   demo-5   not controlled by demo
";
        assert_eq!(status_text(&cr, &births, now), want);
    }

    /// A client still writing to the leaver and a stuck hold on repairs read as such.
    #[test]
    fn the_freshness_line_says_when_no_operator_acts_or_the_spec_is_not_acted_on_yet() {
        let now = t("2026-11-25T10:00:00Z");
        let line = |edit: &dyn Fn(&mut MarekvsCluster)| {
            let mut cr = cluster(json!({}));
            edit(&mut cr);
            freshness_line(&cr, cr.status.as_ref().unwrap(), now)
        };
        assert_eq!(
            line(&|_| {}),
            "as of a pass 12s ago by operator 0.1.0, spec generation 4"
        );
        let passed_at = |at: &'static str| {
            move |cr: &mut MarekvsCluster| {
                cr.status.as_mut().unwrap().last_pass_time =
                    Some(serde_json::from_value(json!(at)).unwrap())
            }
        };
        assert_eq!(
            line(&passed_at("2026-11-25T09:57:00Z")),
            "as of a pass 3m ago by operator 0.1.0, spec generation 4",
            "three minutes is not yet stale"
        );
        assert_eq!(
            line(&passed_at("2026-11-25T09:56:59Z")),
            "STALE: the last pass recorded was 3m1s ago by operator 0.1.0: no operator is acting \
             on this cluster; what follows is as it was then"
        );
        assert_eq!(
            line(&|cr| cr.metadata.generation = Some(5)),
            "spec generation 5 not acted on yet (status describes 4); last pass 12s ago by \
             operator 0.1.0"
        );
        assert!(
            line(&|cr| cr.status.as_mut().unwrap().last_pass_time = None)
                .starts_with("STALE: no pass recorded")
        );
        let invalid = |cr: &mut MarekvsCluster| {
            passed_at("2026-11-25T09:00:00Z")(cr);
            let ready = cr.status.as_mut().unwrap().conditions.iter_mut();
            for c in ready.filter(|c| c.type_ == READY) {
                c.reason = REASON_INVALID_SPEC.into();
            }
        };
        assert_eq!(
            line(&invalid),
            "the operator waits for a change (see Ready); its last pass was 60m ago by operator 0.1.0"
        );
    }

    #[test]
    fn a_hold_on_a_client_writing_to_the_leaver_or_stuck_on_repairs() {
        let mut cr = cluster(json!({"nodes": 3}));
        let now = t("2026-11-25T10:00:00Z");
        let status = cr.status.as_mut().unwrap();
        status.handoff_hold = Some(
            serde_json::from_value(json!({"reason": "LeaverBacklog", "moving": "ClientTraffic",
                "members": ["demo-2"], "ratePerSecond": 1200.0, "since": "2026-11-25T09:58:00Z",
                "message": "demo-2 still receives client commands"}))
            .unwrap(),
        );
        status.background_repair = None;
        assert_eq!(
            hold_lines(status, now),
            [
                "HandoffHold: LeaverBacklog (ClientTraffic on demo-2 at 1200.0 writes/s, for 2m): demo-2 still receives client commands"
            ]
        );
        status.handoff_hold = Some(
            serde_json::from_value(json!({"reason": "HandoffTimeout", "moving": "Repairs",
                "members": ["demo-0", "demo-1"], "ratePerSecond": 3.0,
                "since": "2026-11-25T09:00:00Z", "stuck": true, "message": "repairs keep moving"}))
            .unwrap(),
        );
        assert_eq!(
            hold_lines(status, now),
            [
                "HandoffHold: HandoffTimeout (Repairs on demo-0, demo-1 at 3.0/s, for 60m, stuck): repairs keep moving"
            ]
        );
    }

    #[test]
    fn a_cluster_without_status_yet_shows_no_member() {
        let mut cr = cluster(json!({"nodes": 3}));
        cr.status = None;
        let text = status_text(&cr, &VolumeBirths::new(), 0);
        assert!(
            text.starts_with("demo: Unknown, 0/0 ready (spec.nodes 3)\n"),
            "{text}"
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("demo-")).count(), 0);
    }
}
