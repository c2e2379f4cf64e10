//! The member pod state machine: start, readiness probe, restarts with back-off, preStop and
//! termination.

use std::net::Ipv4Addr;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::container_state::{
    ContainerState, MemberStatus, Terminated, crash_loop_message, finished_phase, next_crash_count,
    restart_backoff, restarts_after_exit,
};
use crate::real_node::Exit;

use super::Podlet;
use super::process::MemberSlot;

/// The readiness probe's settings, with the API's defaults.
#[derive(Clone, Debug, PartialEq)]
struct ProbeSpec {
    get: Option<HTTPGetAction>,
    period: Duration,
    timeout: Duration,
    success_threshold: i32,
    failure_threshold: i32,
    initial_delay: Duration,
}

impl ProbeSpec {
    fn of(container: &Container) -> Self {
        let p = container.readiness_probe.as_ref();
        let secs = |v: Option<i32>, default: i32, min: i32| {
            Duration::from_secs(v.unwrap_or(default).max(min) as u64)
        };
        ProbeSpec {
            get: p.and_then(|p| p.http_get.clone()),
            period: secs(p.and_then(|p| p.period_seconds), 10, 1),
            timeout: secs(p.and_then(|p| p.timeout_seconds), 1, 1),
            success_threshold: p.and_then(|p| p.success_threshold).unwrap_or(1).max(1),
            failure_threshold: p.and_then(|p| p.failure_threshold).unwrap_or(3).max(1),
            initial_delay: secs(p.and_then(|p| p.initial_delay_seconds), 0, 0),
        }
    }

    fn timer(&self) -> tokio::time::Interval {
        tokio::time::interval_at(Instant::now() + self.initial_delay, self.period)
    }
}

/// A member pod while its worker runs it: the container's status and what decides the next
/// start, probe and termination step.
pub(super) struct MemberPod {
    podlet: Arc<Podlet>,
    pods: Api<Pod>,
    pod: Pod,
    container: Container,
    key: String,
    ip: Ipv4Addr,
    started: Timestamp,
    status: MemberStatus,
    probe: ProbeSpec,
    successes: i32,
    failures: i32,
    probe_timer: tokio::time::Interval,
    /// Set once the pod is being deleted: when the grace period ends.
    terminating: Option<Instant>,
    /// The process; kept after it exits (a simulated member stays in the model, a real one
    /// in its cluster's seeds) until it is started again or the pod is done.
    member: MemberSlot,
    /// Set while the member is down: when it may be started again.
    restart_at: Option<Instant>,
    /// Whether the container has run before: only then does a start count as a restart.
    has_run: bool,
    crashes_in_a_row: u32,
    run_since: Instant,
    starts: u64,
}

impl MemberPod {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        podlet: Arc<Podlet>,
        pods: Api<Pod>,
        pod: Pod,
        container: Container,
        key: String,
        ip: Ipv4Addr,
        started: Timestamp,
        status: MemberStatus,
    ) -> Self {
        let probe = ProbeSpec::of(&container);
        let member = MemberSlot::new(
            podlet.world.clone(),
            podlet.real_members.clone(),
            key.clone(),
        );
        MemberPod {
            podlet,
            pods,
            pod,
            container,
            key,
            ip,
            started,
            status,
            probe_timer: probe.timer(),
            probe,
            successes: 0,
            failures: 0,
            terminating: None,
            member,
            restart_at: Some(Instant::now()),
            has_run: false,
            crashes_in_a_row: 0,
            run_since: Instant::now(),
            starts: 0,
        }
    }

    /// Until the pod is gone: start the member, follow the pod, its probe and its process.
    pub(super) async fn run(
        &mut self,
        rx: &mut watch::Receiver<Option<Pod>>,
    ) -> anyhow::Result<()> {
        let mut exit_check = tokio::time::interval(Duration::from_millis(200));
        loop {
            if self.may_start() {
                self.start().await?;
            }
            let probing = self.probe.get.is_some() && self.status.is_running();
            let flow = tokio::select! {
                changed = rx.changed() => {
                    let cur = if changed.is_ok() { rx.borrow().clone() } else { None };
                    self.on_pod_change(cur).await?
                }
                _ = self.probe_timer.tick(), if probing => {
                    self.on_probe_tick().await?;
                    ControlFlow::Continue(())
                }
                _ = exit_check.tick() => self.on_exit_check().await?,
            };
            if flow.is_break() {
                return Ok(());
            }
        }
    }

    /// The member is down, its back-off is over, and the pod is not being deleted.
    /// `hold_down` keeps a member that has run down after it exits.
    fn may_start(&self) -> bool {
        self.terminating.is_none()
            && self.restart_at.is_some_and(|at| Instant::now() >= at)
            && !(self.has_run && self.podlet.world.lock().faults(&self.key).hold_down)
    }

    /// Start (or restart) the member; a failure to start waits out the back-off.
    async fn start(&mut self) -> anyhow::Result<()> {
        self.restart_at = None;
        self.member.stop();
        self.starts += 1;
        let restart_count = self.status.restart_count + i32::from(self.has_run);
        let started = self
            .podlet
            .start_member(
                &self.pod,
                &self.container,
                &self.key,
                self.ip,
                self.starts,
                restart_count,
            )
            .await;
        match started {
            Ok(m) => {
                self.member.set(m);
                // The first start is the one the pod status already reports.
                let at = if self.starts == 1 {
                    self.started
                } else {
                    Timestamp::now()
                };
                self.status.start(at, self.has_run);
                self.has_run = true;
                self.run_since = Instant::now();
                (self.successes, self.failures) = (0, 0);
                self.probe_timer = self.probe.timer();
                // Without a probe the container is ready once it runs.
                self.status.ready = self.probe.get.is_none();
                info!(pod = %self.key, ip = %self.ip, restarts = self.status.restart_count, "member started");
                if self.starts > 1 || self.status.ready {
                    self.report().await?;
                }
            }
            Err(failure) => {
                self.crashes_in_a_row = self.crashes_in_a_row.saturating_add(1);
                let backoff = restart_backoff(self.crashes_in_a_row);
                warn!(pod = %self.key, reason = failure.reason, retry_in = ?backoff,
                    "member could not be started: {}", failure.message);
                self.status.failed_to_start(failure.reason, failure.message);
                self.restart_at = Some(Instant::now() + backoff);
                self.report().await?;
            }
        }
        Ok(())
    }

    /// The pod changed in the API (`None`: it is gone): a Ready someone else set, or deletion.
    async fn on_pod_change(&mut self, cur: Option<Pod>) -> anyhow::Result<ControlFlow<()>> {
        let Some(cur) = cur else {
            // Force-deleted from the API: the container is killed at once.
            self.member.stop();
            return Ok(ControlFlow::Break(()));
        };
        if self.terminating.is_some() {
            return Ok(ControlFlow::Continue(()));
        }
        if cur.metadata.deletion_timestamp.is_some() {
            self.begin_termination(&cur).await;
        } else if pod_ready_condition(&cur).is_some_and(|r| r != self.status.reported_ready()) {
            // Someone else changed Ready (the node lifecycle controller, after a missed
            // heartbeat): report what the probe says, as a kubelet would.
            self.report().await?;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The pod is being deleted: preStop hook and SIGTERM, then wait for the exit (or the end
    /// of the grace period, see [`Self::on_exit_check`]).
    async fn begin_termination(&mut self, cur: &Pod) {
        let grace = cur
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or(30)
            .max(0) as u64;
        self.terminating = Some(Instant::now() + Duration::from_secs(grace));
        // A container that is not running gets neither hook nor signal.
        if self.member.process.is_some() && self.status.is_running() {
            info!(pod = %self.key, grace, "terminating: preStop, then SIGTERM");
            self.podlet
                .run_pre_stop(&self.container, self.ip, Duration::from_secs(grace))
                .await;
            self.member.terminate().await;
        }
    }

    async fn on_probe_tick(&mut self) -> anyhow::Result<()> {
        let Some(get) = &self.probe.get else {
            return Ok(());
        };
        let ok = self
            .podlet
            .probe(get, &self.container, self.ip, self.probe.timeout)
            .await;
        *self
            .podlet
            .world
            .lock()
            .probes
            .entry(self.key.clone())
            .or_insert(0) += 1;
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let ready = self.status.ready;
        let next = if ready {
            self.failures < self.probe.failure_threshold
        } else {
            self.successes >= self.probe.success_threshold
        };
        if next != ready {
            self.status.ready = next;
            debug!(pod = %self.key, ready = next, "readiness changed");
            self.report().await?;
        }
        Ok(())
    }

    /// While terminating: remove the pod once the member is gone. Otherwise: notice an exit.
    async fn on_exit_check(&mut self) -> anyhow::Result<ControlFlow<()>> {
        if let Some(deadline) = self.terminating {
            if self.member.exited() {
                info!(pod = %self.key, "member exited; removing pod");
            } else if Instant::now() >= deadline {
                info!(pod = %self.key, "grace period over: SIGKILL");
            } else {
                return Ok(ControlFlow::Continue(()));
            }
            self.member.stop();
            self.podlet.delete_now(&self.pod).await?;
            return Ok(ControlFlow::Break(()));
        }
        if self.status.is_running()
            && let Some(exit) = self.member.exit()
        {
            self.on_exit(exit).await?;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// It exited on its own: restart it in place, as restartPolicy Always does, after the
    /// kubelet's back-off; under `Never` (or `OnFailure` after exit code 0) the pod is done,
    /// `Succeeded` or `Failed`, as a `helm test` pod's is.
    async fn on_exit(&mut self, exit: Exit) -> anyhow::Result<()> {
        let started_at = match self.status.state {
            ContainerState::Running { started_at } => started_at,
            _ => self.started,
        };
        let policy = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone());
        if !restarts_after_exit(policy.as_deref(), exit.code) {
            let phase = finished_phase(exit.code);
            info!(pod = %self.key, code = exit.code, phase, "container finished; not restarted (restartPolicy {policy:?})");
            self.status.finished(Terminated::new(
                exit.code,
                exit.message,
                started_at,
                Timestamp::now(),
            ));
            self.restart_at = None;
            return self
                .podlet
                .patch_member(
                    &self.pods,
                    &self.pod,
                    &self.started,
                    &self.container.name,
                    &self.status,
                    Some(phase),
                )
                .await;
        }
        self.crashes_in_a_row = next_crash_count(self.crashes_in_a_row, self.run_since.elapsed());
        let backoff = restart_backoff(self.crashes_in_a_row);
        warn!(pod = %self.key, code = exit.code, retry_in = ?backoff,
            "member exited unexpectedly: {}", exit.message);
        let message = crash_loop_message(backoff, &self.container.name, &self.pod);
        self.status.exited(
            Terminated::new(exit.code, exit.message, started_at, Timestamp::now()),
            backoff,
            message,
        );
        self.restart_at = Some(Instant::now() + backoff);
        self.report().await
    }

    /// Patch the member container's status and readiness.
    async fn report(&self) -> anyhow::Result<()> {
        self.podlet
            .patch_member(
                &self.pods,
                &self.pod,
                &self.started,
                &self.container.name,
                &self.status,
                None,
            )
            .await
    }
}

fn pod_ready_condition(pod: &Pod) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

fn probe_url(get: &HTTPGetAction, container: &Container, ip: Ipv4Addr) -> Option<String> {
    let port = match &get.port {
        IntOrString::Int(p) => *p,
        IntOrString::String(name) => {
            container
                .ports
                .as_ref()?
                .iter()
                .find(|p| p.name.as_deref() == Some(name))?
                .container_port
        }
    };
    let host = get.host.clone().unwrap_or_else(|| ip.to_string());
    let path = get.path.clone().unwrap_or_else(|| "/".into());
    Some(format!("http://{host}:{port}{path}"))
}

impl Podlet {
    async fn run_pre_stop(&self, container: &Container, ip: Ipv4Addr, grace: Duration) {
        let Some(get) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.http_get.as_ref())
        else {
            return;
        };
        let Some(url) = probe_url(get, container, ip) else {
            return;
        };
        match self
            .http
            .get(&url)
            .timeout(grace.max(Duration::from_secs(1)))
            .send()
            .await
        {
            Ok(r) => info!(%url, status = %r.status(), "preStop hook"),
            Err(e) => warn!(%url, "preStop hook failed: {e}"),
        }
    }

    async fn probe(
        &self,
        get: &HTTPGetAction,
        container: &Container,
        ip: Ipv4Addr,
        timeout: Duration,
    ) -> bool {
        let Some(url) = probe_url(get, container, ip) else {
            return false;
        };
        match self.http.get(&url).timeout(timeout).send().await {
            // As the kubelet: any 2xx or 3xx is success.
            Ok(r) => r.status().is_success() || r.status().is_redirection(),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_settings_default_as_the_api_does() {
        let mut c = Container::default();
        let none = ProbeSpec::of(&c);
        assert_eq!(none.get, None);
        assert_eq!(
            (none.period, none.timeout, none.initial_delay),
            (
                Duration::from_secs(10),
                Duration::from_secs(1),
                Duration::ZERO
            )
        );
        assert_eq!((none.success_threshold, none.failure_threshold), (1, 3));
        c.readiness_probe = Some(k8s_openapi::api::core::v1::Probe {
            http_get: Some(HTTPGetAction::default()),
            period_seconds: Some(0),
            timeout_seconds: Some(5),
            initial_delay_seconds: Some(-1),
            failure_threshold: Some(0),
            ..Default::default()
        });
        let p = ProbeSpec::of(&c);
        assert!(p.get.is_some());
        assert_eq!(
            (p.period, p.timeout, p.initial_delay),
            (
                Duration::from_secs(1),
                Duration::from_secs(5),
                Duration::ZERO
            )
        );
        assert_eq!((p.success_threshold, p.failure_threshold), (1, 1));
    }
}
