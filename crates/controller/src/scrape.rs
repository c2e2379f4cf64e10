//! HTTP to a member's port 9121, straight at its pod IP (no Service, no API-server proxy).

use std::time::Duration;

use marekvs_core::Scrape;
use marekvs_core::metrics::parse_scrape;
use tracing::debug;

use crate::build::PORT_METRICS;

#[derive(Clone)]
pub struct MemberClient {
    http: reqwest::Client,
    timeout: Duration,
}

impl MemberClient {
    pub fn new(timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()
            .expect("plain HTTP client builds");
        MemberClient { http, timeout }
    }

    fn url(ip: &str, path: &str) -> String {
        if ip.contains(':') {
            format!("http://[{ip}]:{PORT_METRICS}{path}")
        } else {
            format!("http://{ip}:{PORT_METRICS}{path}")
        }
    }

    /// `/metrics`, parsed; `None` on any failure (unknown is never safe).
    pub async fn scrape(&self, ip: &str) -> Option<Scrape> {
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
        parse_scrape(&r.text().await.ok()?)
    }

    /// `/drain`: true once the node answered 200 (it is Leaving).
    pub async fn drain(&self, ip: &str) -> bool {
        // Draining may take a moment longer than a scrape.
        match self
            .http
            .get(Self::url(ip, "/drain"))
            .timeout(self.timeout * 5)
            .send()
            .await
        {
            Ok(r) => r.status().is_success(),
            Err(e) => {
                debug!(ip, "drain failed: {e}");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::reconcile::scrape_all;

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
                (o as u32, pod)
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
}
