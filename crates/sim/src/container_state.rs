//! What the pod runner reports about a member's container, the way a kubelet reports it: the
//! state (running, waiting, terminated), the last termination, readiness and restarts, and the
//! back-off between restarts of a container that keeps exiting.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::{Value, json};

/// The first restart follows at once; this short pause lets the exited process's ports free up.
pub const FIRST_RESTART_DELAY: Duration = Duration::from_secs(1);
/// The kubelet's back-off after that: 10 s, doubling, at most 5 min.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A container that ran this long before it exited starts a fresh back-off (as the kubelet).
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(600);

pub const REASON_CRASH_LOOP: &str = "CrashLoopBackOff";
/// The process could not be started (e.g. the binary is not executable).
pub const REASON_RUN_ERROR: &str = "RunContainerError";
/// What it needs could not be prepared (its volume, data directory, log file or listener).
pub const REASON_CREATE_ERROR: &str = "CreateContainerError";

/// How long to wait before restarting a container that has failed `crashes_in_a_row` times in
/// a row (counting the failure just seen): at once (1 s), then 10 s, 20 s, … up to 300 s.
pub fn restart_backoff(crashes_in_a_row: u32) -> Duration {
    match crashes_in_a_row {
        0 => Duration::ZERO,
        1 => FIRST_RESTART_DELAY,
        // 10 s · 2^16 is far beyond the cap: no need to shift further (or overflow).
        n => BACKOFF_INITIAL
            .saturating_mul(1u32 << (n - 2).min(16))
            .min(BACKOFF_MAX),
    }
}

/// The failure count after a container that ran for `ran_for` failed again.
pub fn next_crash_count(crashes_in_a_row: u32, ran_for: Duration) -> u32 {
    if ran_for >= BACKOFF_RESET_AFTER {
        1
    } else {
        crashes_in_a_row.saturating_add(1)
    }
}

/// A container that exited.
#[derive(Clone, Debug, PartialEq)]
pub struct Terminated {
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
}

impl Terminated {
    /// Reason as the kubelet gives it: `Completed` for exit 0, else `Error`.
    pub fn new(
        exit_code: i32,
        message: String,
        started_at: Timestamp,
        finished_at: Timestamp,
    ) -> Self {
        let reason = if exit_code == 0 { "Completed" } else { "Error" };
        Terminated {
            exit_code,
            reason: reason.into(),
            message,
            started_at,
            finished_at,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ContainerState {
    Running { started_at: Timestamp },
    Waiting { reason: String, message: String },
    Terminated(Terminated),
}

/// The member container's status, as the pod runner knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberStatus {
    pub state: ContainerState,
    pub last_state: Option<Terminated>,
    /// What the readiness probe says; only reported while the container runs.
    pub ready: bool,
    pub restart_count: i32,
}

impl MemberStatus {
    pub fn running(
        started_at: Timestamp,
        restart_count: i32,
        last_state: Option<Terminated>,
    ) -> Self {
        MemberStatus {
            state: ContainerState::Running { started_at },
            last_state,
            ready: false,
            restart_count,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self.state, ContainerState::Running { .. })
    }

    /// Reported ready: a container that does not run is never ready.
    pub fn reported_ready(&self) -> bool {
        self.ready && self.is_running()
    }

    /// The member exited and waits `backoff` before it is started again. The first restart is
    /// immediate, so the kubelet shows the termination itself (`kubectl get pods`: `Error`);
    /// later ones wait in `CrashLoopBackOff` with the exit as the last state.
    pub fn exited(&mut self, exit: Terminated, backoff: Duration, crash_loop_message: String) {
        self.ready = false;
        if backoff <= FIRST_RESTART_DELAY {
            self.state = ContainerState::Terminated(exit);
        } else {
            self.last_state = Some(exit);
            self.state = ContainerState::Waiting {
                reason: REASON_CRASH_LOOP.into(),
                message: crash_loop_message,
            };
        }
    }

    /// Started (again, when `counts_as_restart`): an exit it showed becomes the last state.
    pub fn start(&mut self, started_at: Timestamp, counts_as_restart: bool) {
        if let ContainerState::Terminated(t) = &self.state {
            self.last_state = Some(t.clone());
        }
        if counts_as_restart {
            self.restart_count += 1;
        }
        self.ready = false;
        self.state = ContainerState::Running { started_at };
    }

    /// Exited for good (its pod's restartPolicy keeps it down): terminated, never ready.
    pub fn finished(&mut self, exit: Terminated) {
        self.ready = false;
        self.state = ContainerState::Terminated(exit);
    }

    /// Could not be started; the last state is kept.
    pub fn failed_to_start(&mut self, reason: &str, message: String) {
        if let ContainerState::Terminated(t) = &self.state {
            self.last_state = Some(t.clone());
        }
        self.ready = false;
        self.state = ContainerState::Waiting {
            reason: reason.into(),
            message,
        };
    }
}

/// Whether a container that exited with `code` is started again under the pod's
/// `restartPolicy` (`None`: the API's default, `Always`).
pub fn restarts_after_exit(restart_policy: Option<&str>, code: i32) -> bool {
    match restart_policy {
        Some("Never") => false,
        Some("OnFailure") => code != 0,
        _ => true,
    }
}

/// The pod's phase once its one container finished for good: `Succeeded` on exit code 0.
pub fn finished_phase(code: i32) -> &'static str {
    if code == 0 { "Succeeded" } else { "Failed" }
}

/// The kubelet's message while a container waits to be restarted.
pub fn crash_loop_message(backoff: Duration, container: &str, pod: &Pod) -> String {
    format!(
        "back-off {} restarting failed container={container} pod={}_{}({})",
        go_duration(backoff),
        pod.name_any(),
        pod.namespace().unwrap_or_default(),
        pod.uid().unwrap_or_default()
    )
}

/// A whole-second duration as Go prints it (`10s`, `5m0s`, `1h0m0s`), as in kubelet messages.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m{}s", s / 3600, s % 3600 / 60, s % 60),
    }
}

fn terminated_json(t: &Terminated) -> Value {
    json!({
        "exitCode": t.exit_code,
        "reason": t.reason,
        "message": t.message,
        "startedAt": t.started_at.to_string(),
        "finishedAt": t.finished_at.to_string(),
    })
}

/// One container state as the API's `ContainerState`. The other two kinds are sent as null so
/// that a merging patch cannot leave the previous kind beside the new one.
fn state_json(state: &ContainerState) -> Value {
    let (kind, value) = match state {
        ContainerState::Running { started_at } => {
            ("running", json!({"startedAt": started_at.to_string()}))
        }
        ContainerState::Waiting { reason, message } => {
            ("waiting", json!({"reason": reason, "message": message}))
        }
        ContainerState::Terminated(t) => ("terminated", terminated_json(t)),
    };
    let mut obj = json!({"running": null, "waiting": null, "terminated": null});
    obj[kind] = value;
    obj
}

/// `status.containerStatuses` of a pod. `member` is the marekvs container's name and status;
/// every other container runs (ready, never restarted) since `pod_started`, as one without
/// probes would.
pub fn container_statuses(
    pod: &Pod,
    member: Option<(&str, &MemberStatus)>,
    pod_started: &Timestamp,
) -> Value {
    let uid = pod.uid().unwrap_or_default();
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let statuses = containers
        .iter()
        .map(|c| {
            let base = json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": "",
                "containerID": format!("marekvs-sim://{uid}/{}", c.name),
            });
            let status = match member {
                Some((name, m)) if name == c.name => json!({
                    "ready": m.reported_ready(),
                    "started": m.is_running(),
                    "restartCount": m.restart_count,
                    "state": state_json(&m.state),
                    "lastState": match &m.last_state {
                        Some(t) => json!({"terminated": terminated_json(t)}),
                        None => json!({"terminated": null}),
                    },
                }),
                _ => json!({
                    "ready": true,
                    "started": true,
                    "restartCount": 0,
                    "state": state_json(&ContainerState::Running { started_at: *pod_started }),
                }),
            };
            let mut merged = base;
            if let (Value::Object(a), Value::Object(b)) = (&mut merged, status) {
                a.extend(b);
            }
            merged
        })
        .collect();
    Value::Array(statuses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod() -> Pod {
        let mut pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "marekvs".into(),
                        image: Some("marekvs:0.2".into()),
                        ..Container::default()
                    },
                    Container {
                        name: "sidecar".into(),
                        ..Container::default()
                    },
                ],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        pod.metadata.name = Some("demo-1".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u-1".into());
        pod
    }

    #[test]
    fn backoff_is_immediate_then_doubles_from_10s_to_300s() {
        let secs: Vec<u64> = (1..=9).map(|n| restart_backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(restart_backoff(u32::MAX), BACKOFF_MAX);
        assert_eq!(restart_backoff(0), Duration::ZERO);
    }

    #[test]
    fn backoff_resets_after_ten_minutes_of_running() {
        assert_eq!(next_crash_count(5, Duration::from_secs(30)), 6);
        assert_eq!(next_crash_count(5, Duration::from_secs(600)), 1);
        assert_eq!(next_crash_count(0, Duration::ZERO), 1);
        assert_eq!(next_crash_count(u32::MAX, Duration::ZERO), u32::MAX);
    }

    #[test]
    fn go_durations_read_as_in_kubelet_messages() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(3661)), "1h1m1s");
        assert_eq!(
            crash_loop_message(Duration::from_secs(20), "marekvs", &pod()),
            "back-off 20s restarting failed container=marekvs pod=demo-1_ns(u-1)"
        );
    }

    #[test]
    fn a_running_member_and_a_plain_sidecar() {
        let mut m = MemberStatus::running(ts("2025-01-01T00:00:05Z"), 0, None);
        m.ready = true;
        let v = container_statuses(&pod(), Some(("marekvs", &m)), &ts("2025-01-01T00:00:00Z"));
        let member = &v[0];
        assert_eq!(member["name"], "marekvs");
        assert_eq!(member["image"], "marekvs:0.2");
        assert_eq!(member["ready"], true);
        assert_eq!(member["started"], true);
        assert_eq!(member["restartCount"], 0);
        assert_eq!(
            member["state"]["running"]["startedAt"],
            "2025-01-01T00:00:05Z"
        );
        assert!(member["state"]["waiting"].is_null());
        assert!(member["lastState"]["terminated"].is_null());
        let sidecar = &v[1];
        assert_eq!(sidecar["ready"], true);
        assert_eq!(
            sidecar["state"]["running"]["startedAt"],
            "2025-01-01T00:00:00Z"
        );
    }

    #[test]
    fn first_exit_shows_terminated_then_running_with_last_state() {
        let mut m = MemberStatus::running(ts("2025-01-01T00:00:05Z"), 0, None);
        m.ready = true;
        let exit = Terminated::new(
            137,
            "killed".into(),
            ts("2025-01-01T00:00:05Z"),
            ts("2025-01-01T00:01:00Z"),
        );
        m.exited(exit.clone(), restart_backoff(1), "unused".into());
        let v = container_statuses(&pod(), Some(("marekvs", &m)), &ts("2025-01-01T00:00:00Z"));
        assert_eq!(v[0]["ready"], false, "an exited container is not ready");
        assert_eq!(v[0]["started"], false);
        let t = &v[0]["state"]["terminated"];
        assert_eq!(t["exitCode"], 137);
        assert_eq!(t["reason"], "Error");
        assert_eq!(t["message"], "killed");
        assert_eq!(t["finishedAt"], "2025-01-01T00:01:00Z");
        assert!(v[0]["state"]["running"].is_null());

        m.start(ts("2025-01-01T00:01:01Z"), true);
        m.ready = true;
        let v = container_statuses(&pod(), Some(("marekvs", &m)), &ts("2025-01-01T00:00:00Z"));
        assert_eq!(v[0]["restartCount"], 1);
        assert_eq!(v[0]["ready"], true);
        assert_eq!(
            v[0]["state"]["running"]["startedAt"],
            "2025-01-01T00:01:01Z"
        );
        assert!(v[0]["state"]["terminated"].is_null());
        assert_eq!(v[0]["lastState"]["terminated"]["exitCode"], 137);
    }

    #[test]
    fn a_later_exit_waits_in_crash_loop_back_off() {
        let mut m = MemberStatus::running(ts("2025-01-01T00:00:05Z"), 3, None);
        let exit = Terminated::new(
            1,
            "ERROR boom".into(),
            ts("2025-01-01T00:00:05Z"),
            ts("2025-01-01T00:00:06Z"),
        );
        let backoff = restart_backoff(3);
        m.exited(
            exit,
            backoff,
            crash_loop_message(backoff, "marekvs", &pod()),
        );
        let v = container_statuses(&pod(), Some(("marekvs", &m)), &ts("2025-01-01T00:00:00Z"));
        let w = &v[0]["state"]["waiting"];
        assert_eq!(w["reason"], "CrashLoopBackOff");
        assert_eq!(
            w["message"],
            "back-off 20s restarting failed container=marekvs pod=demo-1_ns(u-1)"
        );
        assert_eq!(v[0]["lastState"]["terminated"]["message"], "ERROR boom");
        assert_eq!(v[0]["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(v[0]["restartCount"], 3, "counted when it starts again");
        m.start(ts("2025-01-01T00:00:30Z"), true);
        assert_eq!(m.restart_count, 4);
        assert_eq!(m.last_state.as_ref().unwrap().message, "ERROR boom");
    }

    #[test]
    fn exit_zero_is_completed() {
        let t = Terminated::new(
            0,
            String::new(),
            ts("2025-01-01T00:00:00Z"),
            ts("2025-01-01T00:00:01Z"),
        );
        assert_eq!(t.reason, "Completed");
    }

    #[test]
    fn a_start_failure_waits_with_its_reason_and_keeps_the_last_exit() {
        let mut m = MemberStatus::running(ts("2025-01-01T00:00:05Z"), 0, None);
        let exit = Terminated::new(
            2,
            "x".into(),
            ts("2025-01-01T00:00:05Z"),
            ts("2025-01-01T00:00:06Z"),
        );
        m.exited(exit, FIRST_RESTART_DELAY, String::new());
        m.failed_to_start(
            REASON_RUN_ERROR,
            "starting /bin/x: Permission denied".into(),
        );
        let v = container_statuses(&pod(), Some(("marekvs", &m)), &ts("2025-01-01T00:00:00Z"));
        assert_eq!(v[0]["state"]["waiting"]["reason"], "RunContainerError");
        assert_eq!(
            v[0]["state"]["waiting"]["message"],
            "starting /bin/x: Permission denied"
        );
        assert_eq!(v[0]["lastState"]["terminated"]["exitCode"], 2);
        assert_eq!(v[0]["started"], false);
        assert_eq!(v[0]["restartCount"], 0);
        // A container that never ran does not count its first start as a restart.
        let mut fresh = MemberStatus::running(ts("2025-01-01T00:00:05Z"), 0, None);
        fresh.failed_to_start(REASON_RUN_ERROR, "no".into());
        fresh.start(ts("2025-01-01T00:00:15Z"), false);
        assert_eq!(fresh.restart_count, 0);
        assert!(fresh.is_running() && fresh.last_state.is_none());
    }

    #[test]
    fn a_pod_without_a_member_reports_every_container_running() {
        let m = MemberStatus::running(ts("2025-01-01T00:00:05Z"), 7, None);
        let v = container_statuses(&pod(), None, &ts("2025-01-01T00:00:00Z"));
        assert_eq!(v.as_array().unwrap().len(), 2);
        for c in v.as_array().unwrap() {
            assert_eq!(c["ready"], true);
            assert_eq!(c["restartCount"], 0);
        }
        // The member's status only applies to the container named for it.
        let v = container_statuses(&pod(), Some(("other", &m)), &ts("2025-01-01T00:00:00Z"));
        assert_eq!(v[0]["restartCount"], 0);
    }

    #[test]
    fn the_restart_policy_decides_whether_an_exit_is_restarted() {
        for (policy, code, again) in [
            (None, 0, true),
            (Some("Always"), 0, true),
            (Some("OnFailure"), 1, true),
            (Some("OnFailure"), 0, false),
            (Some("Never"), 1, false),
            (Some("Never"), 0, false),
        ] {
            assert_eq!(
                restarts_after_exit(policy, code),
                again,
                "{policy:?} {code}"
            );
        }
        assert_eq!(finished_phase(0), "Succeeded");
        assert_eq!(finished_phase(3), "Failed");
        let mut s = MemberStatus::running(Timestamp::UNIX_EPOCH, 0, None);
        s.ready = true;
        s.finished(Terminated::new(
            0,
            String::new(),
            Timestamp::UNIX_EPOCH,
            Timestamp::UNIX_EPOCH,
        ));
        assert!(!s.reported_ready() && !s.is_running());
    }
}
