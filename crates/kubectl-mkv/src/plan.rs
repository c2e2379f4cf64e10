//! `kubectl mkv plan`: what happens next and what holds it, in words, from `spec.paused`,
//! `status.removal`, `status.rollout`, `status.plan`, `blockReason` and the conditions.

use marekvs_api::conditions::{BLOCKED, MASS_FAILURE, SUSPECTED_PARTITION};
use marekvs_api::{
    MarekvsCluster, MarekvsClusterStatus, PlanHoldKind, PlanStep, RolloutReason, VictimReason,
};

use crate::age::{millis, since};

/// The plan of `cr` at `now_ms`, one statement a line.
pub fn plan_text(cr: &MarekvsCluster, now_ms: i64) -> String {
    let name = cr.metadata.name.as_deref().unwrap_or("?");
    let s = cr.status.clone().unwrap_or_default();
    let mut lines = Vec::new();
    if cr.spec.paused {
        lines.push(format!(
            "paused: spec.paused is set; no member is drained, restarted or removed until kubectl mkv resume {name}"
        ));
    }
    lines.extend(in_progress(&s, now_ms));
    lines.extend(s.plan.iter().enumerate().map(|(i, p)| next_out(i, p)));
    lines.extend(holds(&s));
    // What keeps moving, where, how fast, for how long (and repairs that hold nothing).
    lines.extend(crate::table::hold_lines(&s, now_ms));
    if lines.is_empty() {
        lines.push(nothing_to_do(cr, &s));
    }
    lines.join("\n") + "\n"
}

/// The plan as data (`plan -o json|yaml`): the status fields it is read from, as the operator
/// wrote them, and the same statements `plan` prints, one a string.
pub fn plan_object(cr: &MarekvsCluster, now_ms: i64) -> serde_json::Value {
    let s = cr.status.clone().unwrap_or_default();
    let text = plan_text(cr, now_ms);
    let statements: Vec<&str> = text.lines().collect();
    serde_json::json!({
        "cluster": cr.metadata.name,
        "paused": cr.spec.paused,
        "removal": s.removal,
        "rollout": s.rollout,
        "next": s.plan,
        "blockReason": s.block_reason,
        "handoffHold": s.handoff_hold,
        "backgroundRepair": s.background_repair,
        "autoscale": s.autoscale,
        "statements": statements,
    })
}

/// The removal and the restart under way.
fn in_progress(s: &MarekvsClusterStatus, now_ms: i64) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(r) = &s.removal {
        lines.push(format!(
            "removing {} ({}): step {:?} for {}, started {} ago",
            r.member,
            victim(r.reason),
            r.step,
            since(millis(&r.step_started_at), now_ms),
            since(millis(&r.started_at), now_ms),
        ));
    }
    if let Some(r) = &s.rollout {
        let why = match r.reason {
            RolloutReason::SpecChanged => "with the current pod spec (rolling update)",
            RolloutReason::VolumeRequested => "on a fresh volume, as its pod asked",
            RolloutReason::RestartRequested => "on its own volume, as its pod asked",
            RolloutReason::NodeDrained => "on its own volume, off a node being drained",
        };
        lines.push(format!(
            "restarting {} {why}: step {:?} for {}, started {} ago",
            r.member,
            r.step,
            since(millis(&r.step_started_at), now_ms),
            since(millis(&r.started_at), now_ms),
        ));
    }
    lines
}

fn victim(reason: VictimReason) -> &'static str {
    match reason {
        VictimReason::UserChosen => "listed in spec.removeMembers",
        VictimReason::NotReady => "not ready",
        VictimReason::NeverStarted => "container never started",
        VictimReason::HighestOrdinal => "the highest ordinal",
    }
}

/// One planned removal: `next out: 1. demo-3 (the highest ordinal), held: …`.
fn next_out(i: usize, p: &PlanStep) -> String {
    let held = match &p.held_by {
        None => "under way or next".to_string(),
        Some(h) => {
            let kind = match h.kind {
                PlanHoldKind::Gate => "held by the hand-off gate",
                PlanHoldKind::Floor => "never (it would go below replicationFactor + 1)",
                PlanHoldKind::Paused => "held by spec.paused",
                PlanHoldKind::InProgress => "after the step in progress",
            };
            match h.reason {
                Some(r) => format!("{kind} ({r:?}): {}", h.message),
                None => format!("{kind}: {}", h.message),
            }
        }
    };
    format!(
        "next out {}. {} ({}): {held}",
        i + 1,
        p.member,
        victim(p.reason)
    )
}

/// The block and the conditions that hold every disruptive step.
fn holds(s: &MarekvsClusterStatus) -> Vec<String> {
    let mut lines = Vec::new();
    let is_true = |t: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    if let Some(b) = s.block_reason {
        let message = is_true(BLOCKED).map_or("", |c| c.message.as_str());
        // Said already by the planned removal it holds (the condition may add the hold).
        let said = s.plan.iter().any(|p| {
            p.held_by.as_ref().is_some_and(|h| {
                h.message == message || message.starts_with(&format!("{}; held: ", h.message))
            })
        });
        if !said {
            lines.push(format!("held ({b:?}): {message}"));
        }
    }
    for (t, what) in [
        (MASS_FAILURE, "mass failure"),
        (SUSPECTED_PARTITION, "suspected partition"),
    ] {
        if let Some(c) = is_true(t) {
            lines.push(format!("{what}: {}", c.message));
        }
    }
    lines
}

fn nothing_to_do(cr: &MarekvsCluster, s: &MarekvsClusterStatus) -> String {
    let members = s.instance_names.len();
    let updated = s.updated_nodes.unwrap_or(0) as usize;
    if members as i32 == cr.spec.nodes && updated == members {
        format!("nothing to do: {members} members as spec.nodes asks, all on the current pod spec")
    } else {
        format!(
            "no step under way or held; {members} members (spec.nodes {}), {updated} on the current pod spec: the operator starts the next step when the gate passes",
            cr.spec.nodes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{cluster, t};
    use serde_json::json;

    #[test]
    fn a_held_removal_and_a_restart_read_in_words() {
        let mut cr = cluster(json!({"nodes": 2, "replicationFactor": 1, "paused": true}));
        let st = cr.status.as_mut().unwrap();
        st.rollout = Some(
            serde_json::from_value(json!({"member": "demo-1", "ordinal": 1,
            "step": "HandingOff", "reason": "RestartRequested",
            "startedAt": "2026-11-25T09:58:00Z", "stepStartedAt": "2026-11-25T09:59:30Z"}))
            .unwrap(),
        );
        st.plan = vec![
            serde_json::from_value(json!({"member": "demo-2", "ordinal": 2,
            "reason": "HighestOrdinal", "heldBy": {"kind": "InProgress",
            "message": "the restart of demo-1 comes first"}}))
            .unwrap(),
        ];
        let want = "\
paused: spec.paused is set; no member is drained, restarted or removed until kubectl mkv resume demo
restarting demo-1 on its own volume, as its pod asked: step HandingOff for 30s, started 2m ago
next out 1. demo-2 (the highest ordinal): after the step in progress: the restart of demo-1 comes first
held (Underreplicated): 4 partitions under-replicated
suspected partition: demo-1 sees a stranger
HandoffHold: Underreplicated (Other on demo-1, for 95s): 4 partitions under-replicated
BackgroundRepair: demo-0, demo-1 at 12.5/s for 30s (holds nothing)
";
        assert_eq!(plan_text(&cr, t("2026-11-25T10:00:00Z")), want);
    }

    #[test]
    fn the_plan_as_data_holds_the_status_fields_and_the_same_statements() {
        let cr = cluster(json!({"nodes": 2, "paused": true}));
        let now = t("2026-11-25T10:00:00Z");
        let got = plan_object(&cr, now);
        let statements: Vec<String> = plan_text(&cr, now).lines().map(String::from).collect();
        assert_eq!(got["statements"], json!(statements));
        assert_eq!(got["cluster"], "demo");
        assert_eq!(got["paused"], true);
        assert_eq!(got["blockReason"], "Underreplicated");
        assert_eq!(got["handoffHold"]["members"], json!(["demo-1"]));
        assert_eq!(got["backgroundRepair"]["ratePerSecond"], 12.5);
        assert_eq!(got["removal"], serde_json::Value::Null);
        assert_eq!(got["next"], json!([]));
    }

    /// The Blocked condition's message, with the hold added by the operator, is not said
    /// again when the planned removal it holds says it.
    #[test]
    fn a_block_said_by_the_plan_is_not_repeated() {
        let mut cr = cluster(json!({"nodes": 2}));
        let st = cr.status.as_mut().unwrap();
        st.background_repair = None;
        st.plan = vec![
            serde_json::from_value(json!({"member": "demo-2", "ordinal": 2,
            "reason": "HighestOrdinal", "heldBy": {"kind": "Gate", "reason": "Underreplicated",
            "message": "4 partitions under-replicated"}}))
            .unwrap(),
        ];
        let blocked = st
            .conditions
            .iter_mut()
            .find(|c| c.type_ == BLOCKED)
            .unwrap();
        blocked.message = "4 partitions under-replicated; held: Other moving on demo-1 since 2026-11-25T09:58:25Z".into();
        let text = plan_text(&cr, t("2026-11-25T10:00:00Z"));
        assert!(!text.contains("held (Underreplicated)"), "{text}");
        assert!(text.contains("next out 1. demo-2 (the highest ordinal): held by the hand-off gate (Underreplicated): 4 partitions under-replicated\n"), "{text}");
    }

    #[test]
    fn a_quiet_cluster_has_nothing_to_do() {
        let mut cr = cluster(json!({"nodes": 3}));
        let st = cr.status.as_mut().unwrap();
        st.block_reason = None;
        st.conditions.clear();
        st.handoff_hold = None;
        st.background_repair = None;
        assert_eq!(
            plan_text(&cr, 0),
            "nothing to do: 3 members as spec.nodes asks, all on the current pod spec\n"
        );
        let mut cr = cluster(json!({"nodes": 4}));
        let st = cr.status.as_mut().unwrap();
        st.block_reason = None;
        st.conditions.clear();
        st.handoff_hold = None;
        st.background_repair = None;
        assert!(
            plan_text(&cr, 0).starts_with("no step under way or held; 3 members (spec.nodes 4)")
        );
        // A removal under way, chosen by the user.
        let mut cr = cluster(json!({"nodes": 2, "replicationFactor": 1}));
        let st = cr.status.as_mut().unwrap();
        st.block_reason = None;
        st.conditions.clear();
        st.handoff_hold = None;
        st.background_repair = None;
        st.removal = Some(
            serde_json::from_value(json!({"member": "demo-0", "ordinal": 0,
            "reason": "UserChosen", "step": "Draining",
            "startedAt": "2026-11-25T09:59:50Z", "stepStartedAt": "2026-11-25T09:59:50Z"}))
            .unwrap(),
        );
        assert_eq!(
            plan_text(&cr, t("2026-11-25T10:00:00Z")),
            "removing demo-0 (listed in spec.removeMembers): step Draining for 10s, started 10s ago\n"
        );
    }
}
