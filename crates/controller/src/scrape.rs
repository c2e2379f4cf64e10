//! HTTP to a member's port 9121, straight at its pod IP (no Service, no API-server proxy).

use std::time::Duration;

use marekvs_core::Scrape;
use marekvs_core::metrics::ScrapeParser;
use tracing::{debug, warn};

use crate::budget::{ByteBudget, DEFAULT_MEMBER_READ_BUDGET_BYTES};
use crate::build::PORT_METRICS;

/// A real node's `/metrics` is a few KiB. A body larger than this is not a node answering
/// (or a broken one): the scrape is refused once this many bytes have come.
pub const MAX_METRICS_BYTES: usize = 4 << 20;
/// A real node's longest `/metrics` line is well under 1 KiB. The body is parsed a line at a
/// time as it arrives and never held whole; only the line being read is held (paid from the
/// byte budget), and a longer one makes the scrape unknown.
pub const MAX_METRICS_LINE_BYTES: usize = 64 << 10;

/// Why a body was not parsed to the end (logged; the scrape is unknown).
fn refused(ip: &str, why: &str) -> Option<Scrape> {
    warn!(ip, "metrics refused: {why}");
    None
}

/// One complete line to the parser: text is UTF-8 in the exposition format, and a line that is
/// not is not a node answering (skipping it could hide a gate figure's sample).
fn feed(parser: &mut ScrapeParser, line: &[u8]) -> Result<(), &'static str> {
    if line.len() > MAX_METRICS_LINE_BYTES {
        return Err("a line past the line cap");
    }
    parser.line(std::str::from_utf8(line).map_err(|_| "a line not UTF-8")?);
    Ok(())
}

/// The body parsed as it arrives: never held whole, never copied. `None` once it passes
/// [`MAX_METRICS_BYTES`], holds a line past [`MAX_METRICS_LINE_BYTES`] or not UTF-8, or fails
/// mid-way.
async fn parse_streamed(mut r: reqwest::Response, budget: &ByteBudget, ip: &str) -> Option<Scrape> {
    if r.content_length()
        .is_some_and(|n| n > MAX_METRICS_BYTES as u64)
    {
        return refused(ip, "body too large");
    }
    let mut parser = ScrapeParser::default();
    // The start of a line whose end has not come yet.
    let mut partial = budget.buffer(MAX_METRICS_LINE_BYTES).await;
    let mut total = 0usize;
    loop {
        let chunk = match r.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                debug!(ip, "reading metrics failed: {e}");
                return None;
            }
        };
        total += chunk.len();
        if total > MAX_METRICS_BYTES {
            return refused(ip, "body too large");
        }
        let mut rest: &[u8] = &chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = &after[1..];
            let fed = if partial.is_empty() {
                feed(&mut parser, line)
            } else {
                if partial.extend(line).is_err() {
                    return refused(ip, "a line past the line cap");
                }
                let fed = feed(&mut parser, partial.as_slice());
                partial.clear();
                fed
            };
            if let Err(why) = fed {
                return refused(ip, why);
            }
        }
        if partial.extend(rest).is_err() {
            return refused(ip, "a line past the line cap");
        }
    }
    if let Err(why) = feed(&mut parser, partial.as_slice()) {
        return refused(ip, why);
    }
    parser.finish()
}

/// Scrapes in flight at once across the whole operator, unless `--max-concurrent-scrapes`
/// says otherwise. A scrape of a live member takes milliseconds, so 64 slots serve thousands of
/// members every 10 s; what the bound stops is a new leader (or a restart) opening a
/// connection to every member of every cluster at the same moment.
pub const DEFAULT_MAX_CONCURRENT_SCRAPES: usize = 64;

#[derive(Clone)]
pub struct MemberClient {
    http: reqwest::Client,
    timeout: Duration,
    /// One permit per scrape in flight, shared by every clone (every reconcile).
    slots: std::sync::Arc<tokio::sync::Semaphore>,
    /// What every read in flight may hold of member bytes, shared by every clone.
    budget: ByteBudget,
    metrics: Option<std::sync::Arc<crate::telemetry::Metrics>>,
}

impl MemberClient {
    pub fn new(timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(timeout)
            .timeout(timeout)
            // Keep a member's connection only while its cluster is looked at often (gate waits
            // every 250 ms, busy every 1 s); a quiet cluster (every 10 s) reconnects. Each idle
            // connection holds buffers: at 1,600 members they were most of the RSS.
            .pool_idle_timeout(Duration::from_secs(3))
            // A member is asked about itself only: a 3xx is a failed call (a drain not done, a
            // scrape unknown), never a reason to call whatever address it names.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("plain HTTP client builds");
        MemberClient {
            http,
            timeout,
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_CONCURRENT_SCRAPES)),
            budget: ByteBudget::new(DEFAULT_MEMBER_READ_BUDGET_BYTES),
            metrics: None,
        }
    }

    /// The short timeout of every call to a member (views over RESP use it too).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// At most `n` scrapes in flight at once (at least 1), across every clone of this client.
    pub fn with_max_concurrent(mut self, n: usize) -> Self {
        self.slots = std::sync::Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    /// Member reads in flight hold at most `bytes` of what members sent, together (at least one
    /// whole view, [`crate::budget::MAX_VIEW_BYTES`], so every read can finish).
    pub fn with_read_budget(mut self, bytes: usize) -> Self {
        self.budget = ByteBudget::new(bytes.max(crate::budget::MIN_READ_BUDGET_BYTES));
        self
    }

    /// The byte budget every read of a member draws on.
    pub fn budget(&self) -> &ByteBudget {
        &self.budget
    }

    /// Record scrape latency and failures here.
    pub fn with_metrics(mut self, metrics: std::sync::Arc<crate::telemetry::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn url(ip: &str, path: &str) -> String {
        if ip.contains(':') {
            format!("http://[{ip}]:{PORT_METRICS}{path}")
        } else {
            format!("http://{ip}:{PORT_METRICS}{path}")
        }
    }

    /// `/metrics`, parsed; `None` on any failure (unknown is never safe), any status but 2xx
    /// included: a redirect is not followed.
    ///
    /// Waits for one of the shared slots first, at most one timeout: a scrape that got no
    /// slot in that time did not run and is unknown too. The wait does not eat into the call's
    /// own timeout (a member is never judged on less time than that), and is itself capped,
    /// so however many members hang, one scrape takes at most two timeouts.
    pub async fn scrape(&self, ip: &str) -> Option<Scrape> {
        let timed = async {
            let start = std::time::Instant::now();
            (self.scrape_once(ip).await, start.elapsed())
        };
        let (scrape, took) = self.bounded(ip, timed).await?;
        if let Some(m) = &self.metrics {
            m.scrape_duration.observe(took);
            if scrape.is_none() {
                m.scrape_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        scrape
    }

    /// Runs one read of a member (a `/metrics` scrape, or its view over RESP) in one of the
    /// shared slots: `None` when no slot came free within one timeout (the read did not run,
    /// and is unknown). The wait is capped and does not eat into the read's own timeout.
    pub async fn bounded<T>(
        &self,
        ip: &str,
        read: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let Ok(Ok(_slot)) = tokio::time::timeout(self.timeout, self.slots.acquire()).await else {
            debug!(ip, "no member-read slot free within the timeout; unknown");
            if let Some(m) = &self.metrics {
                m.scrapes_not_run
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return None;
        };
        let _in_flight = self.metrics.as_ref().map(|m| m.scrapes_in_flight.enter());
        Some(read.await)
    }

    async fn scrape_once(&self, ip: &str) -> Option<Scrape> {
        let r = match self.http.get(Self::url(ip, "/metrics")).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                debug!(ip, status = %r.status(), "scrape refused");
                return None;
            }
            Err(e) => {
                debug!(ip, "scrape failed: {e}");
                return None;
            }
        };
        parse_streamed(r, &self.budget, ip).await
    }

    /// `/drain`: true once the node answered 2xx (it is Leaving). Any other status, a
    /// redirect included (it is not followed), is a drain not done.
    pub async fn drain(&self, ip: &str) -> bool {
        // Draining may take a moment longer than a scrape.
        match self
            .http
            .get(Self::url(ip, "/drain"))
            .timeout(self.timeout * 5)
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => true,
            Ok(r) => {
                debug!(ip, status = %r.status(), "drain refused");
                false
            }
            Err(e) => {
                debug!(ip, "drain failed: {e}");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Instant;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use std::sync::Arc;

    use futures::future::join_all;

    /// Each member's figures alone, read concurrently.
    pub async fn scrape_all(
        client: &MemberClient,
        pods: &BTreeMap<u32, Arc<Pod>>,
    ) -> BTreeMap<u32, Option<Scrape>> {
        let futs = pods.iter().map(|(o, p)| {
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            async move {
                let s = match ip {
                    Some(ip) => client.scrape(&ip).await,
                    None => None,
                };
                (*o, s)
            }
        });
        join_all(futs).await.into_iter().collect()
    }

    /// A member that accepts connections on `ip:9121` and never answers.
    async fn hung_member(ip: &str) -> tokio::net::TcpListener {
        tokio::net::TcpListener::bind((ip, PORT_METRICS as u16))
            .await
            .expect("bind loopback")
    }

    #[tokio::test]
    async fn dead_members_cost_one_timeout_not_one_each() {
        let ips = ["127.42.0.1", "127.42.0.2", "127.42.0.3", "127.42.0.4"];
        let mut listeners = Vec::new();
        for ip in ips {
            listeners.push(hung_member(ip).await);
        }
        let client = MemberClient::new(Duration::from_millis(300));
        let start = Instant::now();
        let pods = ips
            .iter()
            .enumerate()
            .map(|(o, ip)| {
                let pod: Pod =
                    serde_json::from_value(serde_json::json!({"status": {"podIP": ip}})).unwrap();
                (o as u32, std::sync::Arc::new(pod))
            })
            .collect();
        let results = scrape_all(&client, &pods).await;
        let took = start.elapsed();
        assert_eq!(results.len(), 4);
        assert!(
            results.values().all(Option::is_none),
            "a hung member is unknown, never healthy"
        );
        assert!(
            took < Duration::from_millis(900),
            "4 hung members took {took:?}"
        );
        drop(listeners);
    }

    const GOOD: &str = "marekvs_cluster_members 3\nmarekvs_cluster_underreplicated_partitions 0\n\
        marekvs_join_gate_pending_pids 0\nmarekvs_bootstraps_completed_total 1\n\
        marekvs_ae_repair_ops_total 0\n";

    /// A member on `ip:9121` that answers every connection with `answer`, raw bytes.
    async fn raw_member(ip: &'static str, answer: Vec<u8>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind((ip, PORT_METRICS as u16))
            .await
            .expect("bind loopback");
        tokio::spawn(async move {
            while let Ok((mut io, _)) = l.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut req = [0u8; 1024];
                    let _ = io.read(&mut req).await;
                    let _ = io.write_all(&answer).await;
                    let _ = io.shutdown().await;
                });
            }
        });
    }

    fn chunked(body: &[u8]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for c in body.chunks(64 << 10) {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    #[tokio::test]
    async fn hostile_answers_are_unknown_and_huge_bodies_are_not_buffered() {
        let client = MemberClient::new(Duration::from_secs(5));
        // The same valid figures, small: parsed.
        raw_member("127.42.1.1", chunked(GOOD.as_bytes())).await;
        assert!(client.scrape("127.42.1.1").await.is_some());
        // Valid figures padded with comments past the cap, no length announced: refused
        // while streaming (parsing it would have succeeded).
        let mut huge = GOOD.to_string();
        let line = format!("# {}\n", "x".repeat(1021));
        while huge.len() <= MAX_METRICS_BYTES {
            huge.push_str(&line);
        }
        assert!(marekvs_core::metrics::parse_scrape(&huge).is_some());
        raw_member("127.42.1.2", chunked(huge.as_bytes())).await;
        assert!(client.scrape("127.42.1.2").await.is_none());
        // A length announced past the cap: refused before reading.
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{GOOD}",
            MAX_METRICS_BYTES + 1
        );
        raw_member("127.42.1.3", head.into_bytes()).await;
        assert!(client.scrape("127.42.1.3").await.is_none());
        // Not HTTP at all.
        raw_member("127.42.1.4", b"\x00\xffSSH-2.0-nope\r\n\x1b[31m".to_vec()).await;
        assert!(client.scrape("127.42.1.4").await.is_none());
        // HTTP, but the body is binary junk.
        let mut junk = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n".to_vec();
        junk.extend_from_slice(&[0xff, 0xfe, 0, 1, 2, 3]);
        raw_member("127.42.1.5", junk).await;
        assert!(client.scrape("127.42.1.5").await.is_none());
    }

    /// HTTP/1.1 with the body sent in chunks of the given sizes, however they cut lines.
    fn chunked_at(body: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        let mut rest = body;
        for &n in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (c, after) = rest.split_at(n.min(rest.len()));
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
            rest = after;
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    #[tokio::test]
    async fn a_body_is_parsed_line_by_line_as_it_arrives_and_never_held_whole() {
        let client = MemberClient::new(Duration::from_secs(5)).with_read_budget(2 << 20);
        // Samples that only read right if every line is whole: two under-replication samples
        // (the maximum, 7, counts), CRLF endings, and no ending on the last line.
        let body = format!(
            "{GOOD}marekvs_cluster_underreplicated_partitions{{shard=\"a\"}} 7\r\n\
             marekvs_ring_ops 123456"
        );
        let whole = marekvs_core::metrics::parse_scrape(&body).expect("parses whole");
        assert_eq!(whole.underreplicated, 7);
        assert_eq!(whole.ring_ops, Some(123_456));
        // Chunks of 1, 2, 3, 5, 7 and 11 bytes: most lines arrive in pieces.
        raw_member(
            "127.42.2.1",
            chunked_at(body.as_bytes(), &[1, 2, 3, 5, 7, 11]),
        )
        .await;
        assert_eq!(client.scrape("127.42.2.1").await, Some(whole));
        // While it reads, a scrape holds its line buffer, no more; after, nothing.
        assert_eq!(client.budget().available(), 2 << 20);
        // One line past the line cap (a comment, so parsing it whole would have succeeded):
        // refused, as a line that is not UTF-8 is.
        let long = format!("{GOOD}# {}\n", "x".repeat(MAX_METRICS_LINE_BYTES));
        assert!(marekvs_core::metrics::parse_scrape(&long).is_some());
        raw_member("127.42.2.2", chunked(long.as_bytes())).await;
        assert_eq!(client.scrape("127.42.2.2").await, None);
        let mut latin1 = GOOD.as_bytes().to_vec();
        latin1.extend_from_slice(b"# caf\xe9\n");
        raw_member("127.42.2.3", chunked(&latin1)).await;
        assert_eq!(client.scrape("127.42.2.3").await, None);
    }

    fn pods_at(ips: &[&str]) -> BTreeMap<u32, std::sync::Arc<Pod>> {
        ips.iter()
            .enumerate()
            .map(|(o, ip)| {
                let pod: Pod =
                    serde_json::from_value(serde_json::json!({"status": {"podIP": ip}})).unwrap();
                (o as u32, std::sync::Arc::new(pod))
            })
            .collect()
    }

    /// A member on `ip:9121` that answers [`GOOD`] after `delay`.
    async fn slow_member(ip: &'static str, delay: Duration) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind((ip, PORT_METRICS as u16))
            .await
            .expect("bind loopback");
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{GOOD}",
            GOOD.len()
        );
        tokio::spawn(async move {
            while let Ok((mut io, _)) = l.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut req = [0u8; 1024];
                    let _ = io.read(&mut req).await;
                    tokio::time::sleep(delay).await;
                    let _ = io.write_all(answer.as_bytes()).await;
                    let _ = io.shutdown().await;
                });
            }
        });
    }

    /// Six live members behind two slots: every scrape waits its turn and succeeds, never
    /// more than two at once, and the peak is what the metrics say.
    #[tokio::test]
    async fn scrapes_beyond_the_bound_wait_for_a_slot_and_the_peak_is_counted() {
        let ips = [
            "127.42.3.1",
            "127.42.3.2",
            "127.42.3.3",
            "127.42.3.4",
            "127.42.3.5",
            "127.42.3.6",
        ];
        for ip in ips {
            slow_member(ip, Duration::from_millis(100)).await;
        }
        let metrics = std::sync::Arc::new(crate::telemetry::Metrics::default());
        let client = MemberClient::new(Duration::from_secs(2))
            .with_max_concurrent(2)
            .with_metrics(metrics.clone());
        let start = Instant::now();
        let results = scrape_all(&client, &pods_at(&ips)).await;
        let took = start.elapsed();
        assert_eq!(results.len(), 6);
        assert!(results.values().all(Option::is_some), "{results:?}");
        assert_eq!(metrics.scrapes_in_flight.high_water(), 2);
        assert_eq!(metrics.scrapes_in_flight.current(), 0);
        assert!(
            took >= Duration::from_millis(300),
            "3 rounds of 2: {took:?}"
        );
        let text = metrics.render();
        assert!(text.contains("marekvs_operator_member_scrapes_in_flight_max 2\n"));
        assert!(text.contains("marekvs_operator_member_scrapes_not_run_total 0\n"));
    }

    /// Hung members holding every slot cannot stall a pass: a scrape waits for a slot at
    /// most one timeout, then is unknown without being run. Six hung members behind one slot
    /// would otherwise take six timeouts.
    #[tokio::test]
    async fn hung_members_cannot_turn_a_bounded_pool_into_a_stall() {
        let ips = [
            "127.42.4.1",
            "127.42.4.2",
            "127.42.4.3",
            "127.42.4.4",
            "127.42.4.5",
            "127.42.4.6",
        ];
        let mut listeners = Vec::new();
        for ip in ips {
            listeners.push(hung_member(ip).await);
        }
        let metrics = std::sync::Arc::new(crate::telemetry::Metrics::default());
        let timeout = Duration::from_millis(300);
        let client = MemberClient::new(timeout)
            .with_max_concurrent(1)
            .with_metrics(metrics.clone());
        let start = Instant::now();
        let results = scrape_all(&client, &pods_at(&ips)).await;
        let took = start.elapsed();
        assert!(
            results.values().all(Option::is_none),
            "a scrape that could not run is unknown, never healthy"
        );
        assert!(took < timeout * 4, "6 hung members, 1 slot: {took:?}");
        let not_run = metrics
            .scrapes_not_run
            .load(std::sync::atomic::Ordering::Relaxed);
        let failed = metrics
            .scrape_failures
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(not_run + failed, 6);
        assert!(not_run >= 4, "at most 2 could have had the slot: {not_run}");
        assert_eq!(metrics.scrapes_in_flight.high_water(), 1);
        drop(listeners);
    }

    /// Like [`raw_member`], counting the connections it accepts.
    async fn counting_member(
        ip: &'static str,
        answer: Vec<u8>,
    ) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let seen = std::sync::Arc::new(AtomicUsize::new(0));
        let l = tokio::net::TcpListener::bind((ip, PORT_METRICS as u16))
            .await
            .expect("bind loopback");
        let counter = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut io, _)) = l.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut req = [0u8; 1024];
                    let _ = io.read(&mut req).await;
                    let _ = io.write_all(&answer).await;
                    let _ = io.shutdown().await;
                });
            }
        });
        seen
    }

    /// A member answering `/drain` or `/metrics` with a redirect to another member: the
    /// call failed (drain not done, scrape unknown) and the other member is never called,
    /// although it would have answered both well.
    #[tokio::test]
    async fn a_redirect_is_a_failed_call_and_is_never_followed() {
        use std::sync::atomic::Ordering;
        let client = MemberClient::new(Duration::from_secs(2));
        let b = "127.42.2.9";
        let good = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{GOOD}",
            GOOD.len()
        )
        .into_bytes();
        let b_seen = counting_member(b, good).await;
        let members = [
            ("127.42.2.1", 301),
            ("127.42.2.2", 302),
            ("127.42.2.3", 303),
            ("127.42.2.4", 307),
            ("127.42.2.5", 308),
        ];
        for (a, status) in members {
            let answer = format!(
                "HTTP/1.1 {status} Redirect\r\nlocation: http://{b}:{PORT_METRICS}/drain\r\n\
                 content-length: 0\r\nconnection: close\r\n\r\n"
            );
            let a_seen = counting_member(a, answer.into_bytes()).await;
            assert!(!client.drain(a).await, "{status}: a drain not done");
            assert!(client.scrape(a).await.is_none(), "{status}: unknown");
            assert_eq!(a_seen.load(Ordering::SeqCst), 2, "{status}: A was asked");
            assert_eq!(
                b_seen.load(Ordering::SeqCst),
                0,
                "{status}: the operator called the address A named"
            );
        }
        // B answers both well when asked itself: the redirects were refused, not B.
        assert!(client.drain(b).await);
        assert!(client.scrape(b).await.is_some());
        assert_eq!(b_seen.load(Ordering::SeqCst), 2);
    }
}
