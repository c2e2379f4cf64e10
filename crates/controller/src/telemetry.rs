//! The operator's own telemetry: Prometheus text on `/metrics`, `/healthz`, `/readyz`, and a
//! client layer that counts the operator's API requests by verb.
//!
//! Hand-rolled on purpose: a handful of counters and histograms, no registry crate.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tracing::info;

use crate::first_pass::{ClusterKey, FirstPass};

/// Bucket bounds (seconds) shared by every latency histogram: 1 ms to 30 s.
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
];

#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in microseconds (atomic integer; rendered as seconds).
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                self.counts[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// Counters keyed by one label value.
#[derive(Default)]
pub struct LabeledCounter(Mutex<BTreeMap<String, u64>>);

impl LabeledCounter {
    pub fn inc(&self, label: &str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(label.to_string())
            .or_insert(0) += 1;
    }

    #[cfg(test)]
    pub fn get(&self, label: &str) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(label)
            .copied()
            .unwrap_or(0)
    }

    fn render(&self, out: &mut String, name: &str, label: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (v, n) in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "{name}{{{label}=\"{v}\"}} {n}");
        }
    }
}

/// A gauge of work in flight and its high-water mark since the start.
#[derive(Default)]
pub struct InFlight {
    now: AtomicU64,
    max: AtomicU64,
}

impl InFlight {
    /// One more in flight until the guard is dropped.
    pub fn enter(&self) -> InFlightGuard<'_> {
        let n = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.max.fetch_max(n, Ordering::Relaxed);
        InFlightGuard(self)
    }

    pub fn current(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    pub fn high_water(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

pub struct InFlightGuard<'a>(&'a InFlight);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Who is waiting to be reconciled, and since when: filled by the watch triggers and by the
/// requeues the reconciler asks for, drained when a reconcile starts.
#[derive(Default)]
struct Queue {
    triggered: HashMap<(String, String), Instant>,
    scheduled: HashMap<(String, String), Instant>,
}

#[derive(Default)]
pub struct Metrics {
    pub reconcile_duration: Histogram,
    pub queue_wait: Histogram,
    pub scrape_duration: Histogram,
    pub reconciles: AtomicU64,
    pub errors: LabeledCounter,
    pub watch_errors: LabeledCounter,
    pub actions: LabeledCounter,
    pub api_requests: LabeledCounter,
    pub scrape_failures: AtomicU64,
    /// Member scrapes holding one of the shared slots (`--max-concurrent-scrapes`).
    pub scrapes_in_flight: InFlight,
    /// Scrapes that found no free slot within their timeout: not run, unknown.
    pub scrapes_not_run: AtomicU64,
    /// This term's first full pass over every cluster.
    pub first_pass: Mutex<FirstPass>,
    queue: Mutex<Queue>,
    /// Caches synced (leader) or standing by: see `/readyz`.
    pub ready: AtomicBool,
    pub leading: AtomicBool,
}

impl Metrics {
    /// A watch event (or our own requeue) asks for `(ns, name)` to be reconciled.
    pub fn triggered(&self, ns: &str, name: &str) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.triggered
            .entry((ns.to_string(), name.to_string()))
            .or_insert_with(Instant::now);
    }

    /// The reconciler asked to be run again after `after`, or (`None`) only on a change.
    pub fn scheduled(&self, ns: &str, name: &str, after: Option<Duration>) {
        let key = (ns.to_string(), name.to_string());
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        match after.and_then(|after| Instant::now().checked_add(after)) {
            Some(at) => q.scheduled.insert(key, at),
            None => q.scheduled.remove(&key),
        };
    }

    /// A reconcile of `(ns, name)` starts: record how long it waited in the queue.
    pub fn started(&self, ns: &str, name: &str) {
        let now = Instant::now();
        let key = (ns.to_string(), name.to_string());
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let since_trigger = q.triggered.remove(&key);
        let since_schedule = q.scheduled.remove(&key).filter(|t| *t <= now);
        if let Some(since) = [since_trigger, since_schedule].into_iter().flatten().min() {
            drop(q);
            self.queue_wait
                .observe(now.saturating_duration_since(since));
        }
    }

    /// This replica leads from now on.
    pub fn lead(&self) {
        self.leading.store(true, Ordering::Relaxed);
        self.first_pass
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lead(Instant::now(), std::time::SystemTime::now());
    }

    /// A pass over `key` completed; `known` lists every cluster (`None` until known). Logs
    /// the first full pass's duration when this pass completes it.
    pub fn passed(&self, key: ClusterKey, known: impl FnOnce() -> Option<Vec<ClusterKey>>) {
        let mut first = self.first_pass.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(took) = first.passed(key, Instant::now(), known) {
            let clusters = first.clusters_passed();
            drop(first);
            info!(
                clusters,
                seconds = took.as_secs_f64(),
                "first full pass over every cluster since leading"
            );
        }
    }

    /// Objects due for a reconcile that has not started yet.
    fn queue_depth(&self) -> usize {
        let now = Instant::now();
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut due: std::collections::HashSet<&(String, String)> = q.triggered.keys().collect();
        due.extend(
            q.scheduled
                .iter()
                .filter(|(_, t)| **t <= now)
                .map(|(k, _)| k),
        );
        due.len()
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.reconcile_duration.render(
            &mut out,
            "marekvs_operator_reconcile_duration_seconds",
            "Time spent in one reconcile (observe, decide, record, act).",
        );
        self.queue_wait.render(
            &mut out,
            "marekvs_operator_reconcile_queue_wait_seconds",
            "From the triggering watch event (or the requeue time asked for) to the reconcile start.",
        );
        self.scrape_duration.render(
            &mut out,
            "marekvs_operator_member_scrape_duration_seconds",
            "One member /metrics scrape, success or not.",
        );
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_reconciles_total Reconciles run.\n# TYPE marekvs_operator_reconciles_total counter\nmarekvs_operator_reconciles_total {}",
            self.reconciles.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_member_scrape_failures_total Scrapes that gave no usable figures.\n# TYPE marekvs_operator_member_scrape_failures_total counter\nmarekvs_operator_member_scrape_failures_total {}",
            self.scrape_failures.load(Ordering::Relaxed)
        );
        self.errors.render(
            &mut out,
            "marekvs_operator_reconcile_errors_total",
            "kind",
            "Failed reconciles by kind of error.",
        );
        self.watch_errors.render(
            &mut out,
            "marekvs_operator_watch_errors_total",
            "resource",
            "Errors of the operator's watches (each is retried with its own backoff).",
        );
        self.actions.render(
            &mut out,
            "marekvs_operator_actions_total",
            "action",
            "What the operator did (or skipped because nothing changed), by type.",
        );
        self.api_requests.render(
            &mut out,
            "marekvs_operator_api_requests_total",
            "verb",
            "Requests this process sent to the Kubernetes API, by verb.",
        );
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_queue_depth Clusters due for a reconcile that has not started.\n# TYPE marekvs_operator_queue_depth gauge\nmarekvs_operator_queue_depth {}",
            self.queue_depth()
        );
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_leader Whether this replica leads.\n# TYPE marekvs_operator_leader gauge\nmarekvs_operator_leader {}",
            u8::from(self.leading.load(Ordering::Relaxed))
        );
        self.render_scrape_slots(&mut out);
        self.render_first_pass(&mut out);
        out
    }

    fn render_scrape_slots(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_member_scrapes_in_flight Member scrapes holding a slot now.\n# TYPE marekvs_operator_member_scrapes_in_flight gauge\nmarekvs_operator_member_scrapes_in_flight {}",
            self.scrapes_in_flight.current()
        );
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_member_scrapes_in_flight_max The most member scrapes in flight at once since the start.\n# TYPE marekvs_operator_member_scrapes_in_flight_max gauge\nmarekvs_operator_member_scrapes_in_flight_max {}",
            self.scrapes_in_flight.high_water()
        );
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_member_scrapes_not_run_total Scrapes that found no free slot within their timeout (unknown).\n# TYPE marekvs_operator_member_scrapes_not_run_total counter\nmarekvs_operator_member_scrapes_not_run_total {}",
            self.scrapes_not_run.load(Ordering::Relaxed)
        );
    }

    /// Written only once known: no leading time before leading, no duration before the
    /// first full pass is done.
    fn render_first_pass(&self, out: &mut String) {
        let first = self.first_pass.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = first.leading_since_unix() else {
            return;
        };
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_leading_since_seconds When this replica began to lead (Unix time).\n# TYPE marekvs_operator_leading_since_seconds gauge\nmarekvs_operator_leading_since_seconds {since:.3}"
        );
        let _ = writeln!(
            out,
            "# HELP marekvs_operator_first_pass_clusters Distinct clusters with a completed pass since leading, up to the first full pass.\n# TYPE marekvs_operator_first_pass_clusters gauge\nmarekvs_operator_first_pass_clusters {}",
            first.clusters_passed()
        );
        if let Some(took) = first.duration() {
            let _ = writeln!(
                out,
                "# HELP marekvs_operator_first_pass_seconds From leading to the end of the first completed pass over every cluster.\n# TYPE marekvs_operator_first_pass_seconds gauge\nmarekvs_operator_first_pass_seconds {:.3}",
                took.as_secs_f64()
            );
        }
    }
}

/// Serve `/metrics`, `/healthz` and `/readyz` on `addr`; returns the bound address.
pub async fn serve(metrics: Arc<Metrics>, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(metrics);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    info!(%bound, "serving /metrics, /healthz, /readyz");
    Ok(bound)
}

async fn render(State(m): State<Arc<Metrics>>) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "text/plain; version=0.0.4")], m.render())
}

/// Ready once this replica can do its job: standing by for the Lease, or leading with its
/// watch caches synced.
async fn readyz(State(m): State<Arc<Metrics>>) -> (StatusCode, &'static str) {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "watch caches not synced yet\n",
        )
    }
}

/// The `User-Agent` the operator sends the API server: its version and its replica's identity
/// (the Lease holder's), so that an audit log tells the replicas apart. Characters a header
/// cannot hold are replaced.
pub fn user_agent(identity: &str) -> http::HeaderValue {
    let identity: String = identity
        .chars()
        .take(253)
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    let text = format!("marekvs-operator/{} ({identity})", crate::VERSION);
    http::HeaderValue::from_str(&text).unwrap_or(http::HeaderValue::from_static("marekvs-operator"))
}

/// The verb of a Kubernetes API request, as the API server counts it.
pub fn verb<B>(req: &http::Request<B>) -> &'static str {
    let query = req.uri().query().unwrap_or("");
    match *req.method() {
        http::Method::GET => {
            if query
                .split('&')
                .any(|kv| kv == "watch=true" || kv == "watch=1")
            {
                "WATCH"
            } else if is_collection(req.uri().path()) {
                "LIST"
            } else {
                "GET"
            }
        }
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// `/api/v1/namespaces/ns/pods` or `/apis/g/v/things` (a collection) rather than one object.
fn is_collection(path: &str) -> bool {
    let rest: Vec<&str> = if let Some(r) = path.strip_prefix("/api/") {
        r.split('/').skip(1).collect()
    } else if let Some(r) = path.strip_prefix("/apis/") {
        r.split('/').skip(2).collect()
    } else {
        return false;
    };
    let rest: Vec<&str> = rest.into_iter().filter(|s| !s.is_empty()).collect();
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        rest.len() == 3
    } else {
        rest.len() == 1
    }
}

/// A tower layer for the kube client that counts every request by verb.
#[derive(Clone)]
pub struct CountRequests(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.metrics.api_requests.inc(verb(&req));
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_version_and_the_replica() {
        let ua = user_agent("marekvs-operator-7c9f-x2");
        assert_eq!(
            ua.to_str().unwrap(),
            format!(
                "marekvs-operator/{} (marekvs-operator-7c9f-x2)",
                crate::VERSION
            )
        );
        // What a header cannot hold is replaced, never a panic.
        let ua = user_agent("a b\nc\u{e9}");
        assert!(ua.to_str().unwrap().ends_with("(a_b_c_)"), "{ua:?}");
    }

    fn req(method: &str, uri: &str) -> http::Request<()> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap()
    }

    #[test]
    fn verbs_are_classified_as_the_api_server_counts_them() {
        let cases = [
            ("GET", "/api/v1/namespaces/a/pods?labelSelector=x", "LIST"),
            (
                "GET",
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion=5",
                "WATCH",
            ),
            ("GET", "/api/v1/namespaces/a/pods/demo-0", "GET"),
            ("GET", "/api/v1/pods", "LIST"),
            ("GET", "/api/v1/namespaces", "LIST"),
            ("GET", "/api/v1/namespaces/a", "GET"),
            (
                "GET",
                "/apis/marekvs.io/v1alpha1/namespaces/a/marekvsclusters",
                "LIST",
            ),
            (
                "GET",
                "/apis/marekvs.io/v1alpha1/namespaces/a/marekvsclusters/demo/status",
                "GET",
            ),
            (
                "GET",
                "/apis/marekvs.io/v1alpha1/marekvsclusters?watch=1",
                "WATCH",
            ),
            (
                "PATCH",
                "/apis/marekvs.io/v1alpha1/namespaces/a/marekvsclusters/demo/status",
                "PATCH",
            ),
            ("POST", "/api/v1/namespaces/a/pods", "POST"),
            ("DELETE", "/api/v1/namespaces/a/pods/demo-1", "DELETE"),
        ];
        for (m, uri, want) in cases {
            assert_eq!(verb(&req(m, uri)), want, "{m} {uri}");
        }
    }

    #[test]
    fn histograms_are_cumulative_and_render_as_prometheus_text() {
        let m = Metrics::default();
        m.reconcile_duration.observe(Duration::from_millis(3));
        m.reconcile_duration.observe(Duration::from_millis(700));
        m.actions.inc("create_pod");
        m.actions.inc("create_pod");
        let text = m.render();
        assert!(
            text.contains("marekvs_operator_reconcile_duration_seconds_bucket{le=\"0.0025\"} 0")
        );
        assert!(
            text.contains("marekvs_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 1")
        );
        assert!(text.contains("marekvs_operator_reconcile_duration_seconds_bucket{le=\"1\"} 2"));
        assert!(text.contains("marekvs_operator_reconcile_duration_seconds_count 2"));
        assert!(text.contains("marekvs_operator_actions_total{action=\"create_pod\"} 2"));
        // Our own parser of the exposition format reads it back.
        assert!(
            text.lines()
                .all(|l| l.starts_with('#') || l.split_whitespace().count() == 2)
        );
    }

    /// Nothing about leading is written before leading, and the duration only once every
    /// cluster had a completed pass.
    #[test]
    fn the_first_pass_is_rendered_once_known() {
        let m = Metrics::default();
        let key = |n: &str| ("ns".to_string(), n.to_string());
        let known = || Some(vec![key("a"), key("b")]);
        assert!(
            !m.render()
                .contains("marekvs_operator_leading_since_seconds")
        );
        m.lead();
        m.passed(key("a"), known);
        let text = m.render();
        assert!(text.contains("marekvs_operator_leading_since_seconds "));
        assert!(text.contains("marekvs_operator_first_pass_clusters 1\n"));
        assert!(!text.contains("marekvs_operator_first_pass_seconds"));
        m.passed(key("b"), known);
        let text = m.render();
        assert!(text.contains("marekvs_operator_first_pass_clusters 2\n"));
        assert!(text.contains("marekvs_operator_first_pass_seconds "));
        assert!(
            text.lines()
                .all(|l| l.starts_with('#') || l.split_whitespace().count() == 2)
        );
    }

    #[test]
    fn queue_wait_runs_from_the_earliest_trigger_and_depth_counts_what_is_due() {
        let m = Metrics::default();
        m.triggered("a", "x");
        m.scheduled("a", "y", Some(Duration::from_secs(3600)));
        assert_eq!(m.queue_depth(), 1, "a requeue far ahead is not due");
        m.scheduled("a", "z", Some(Duration::ZERO));
        assert_eq!(m.queue_depth(), 2);
        std::thread::sleep(Duration::from_millis(20));
        m.started("a", "x");
        assert_eq!(m.queue_wait.count.load(Ordering::Relaxed), 1);
        assert!(m.queue_wait.sum_us.load(Ordering::Relaxed) >= 20_000);
        assert_eq!(m.queue_depth(), 1);
        // A reconcile that starts before its requeue was due (a watch event came first) and
        // had no trigger recorded adds no sample.
        m.started("a", "y");
        assert_eq!(m.queue_wait.count.load(Ordering::Relaxed), 1);
        // Waiting for a change (an invalid spec, a deletion) is never due, and never panics,
        // however far ahead a requeue might have been asked for.
        m.scheduled("a", "w", Some(Duration::ZERO));
        m.scheduled("a", "w", None);
        m.scheduled("a", "v", Some(Duration::MAX));
        assert_eq!(m.queue_depth(), 1, "only z is due");
    }
}
