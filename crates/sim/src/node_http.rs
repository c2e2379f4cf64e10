//! The node contract on a member's pod IP, port 9121: `/ready`, `/alive`, `/drain`, `/metrics`.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use tokio::sync::oneshot;

use crate::model::{MemberFigures, NodePhase};
use crate::world::SharedWorld;

pub const METRICS_PORT: u16 = 9121;

#[derive(Clone)]
struct Ctx {
    world: SharedWorld,
    key: String,
}

/// A running member HTTP server; dropping the handle stops it.
pub struct NodeServer {
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for NodeServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Serve the node contract for member `key` on `ip:9121`.
pub async fn serve(world: SharedWorld, key: String, ip: IpAddr) -> anyhow::Result<NodeServer> {
    let addr = SocketAddr::new(ip, METRICS_PORT);
    // A restarted member binds the address its previous process is still releasing.
    let mut tries = 0;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let app = Router::new()
        .route("/ready", get(ready))
        .route("/alive", get(alive))
        .route("/drain", get(drain).post(drain))
        .route("/metrics", get(metrics))
        .with_state(Ctx {
            world: world.clone(),
            key: key.clone(),
        });
    let listener = FaultyListener {
        inner: listener,
        world,
        key,
    };
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    });
    Ok(NodeServer { stop: Some(tx) })
}

/// While the member is hung, its endpoints do not answer; the caller's timeout decides.
async fn wait_while_hung(ctx: &Ctx) {
    while ctx.world.lock().faults(&ctx.key).hang {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ready(State(ctx): State<Ctx>) -> (StatusCode, &'static str) {
    wait_while_hung(&ctx).await;
    match ctx.world.lock().figures(&ctx.key) {
        Some(f) if f.ready => (StatusCode::OK, "ready\n"),
        Some(_) => (StatusCode::SERVICE_UNAVAILABLE, "joining\n"),
        None => (StatusCode::SERVICE_UNAVAILABLE, "stopped\n"),
    }
}

async fn alive(State(ctx): State<Ctx>) -> (StatusCode, &'static str) {
    wait_while_hung(&ctx).await;
    if ctx.world.lock().is_running(&ctx.key) {
        (StatusCode::OK, "alive\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "stopped\n")
    }
}

async fn drain(State(ctx): State<Ctx>) -> Response {
    *ctx.world
        .lock()
        .drain_requests
        .entry(ctx.key.clone())
        .or_default() += 1;
    wait_while_hung(&ctx).await;
    let mut world = ctx.world.lock();
    if let Some(to) = world.faults(&ctx.key).redirect_drain_to {
        // Not drained: whoever follows this drains someone else.
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, to)],
            "drain elsewhere\n",
        )
            .into_response();
    }
    if world.drain(&ctx.key) {
        (StatusCode::OK, "leaving\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "stopped\n").into_response()
    }
}

async fn metrics(State(ctx): State<Ctx>) -> (StatusCode, String) {
    wait_while_hung(&ctx).await;
    let delay = ctx.world.lock().faults(&ctx.key).metrics_delay_ms;
    if let Some(ms) = delay {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut world = ctx.world.lock();
    let faults = world.faults(&ctx.key);
    if faults.refuse_metrics {
        return (StatusCode::SERVICE_UNAVAILABLE, "metrics refused\n".into());
    }
    if let Some(body) = faults.metrics_body {
        return (StatusCode::OK, body);
    }
    let figures = world.figures(&ctx.key);
    // The world is shared by every member of every test: a padded body (MiBs) is built after
    // it is let go.
    drop(world);
    match figures {
        Some(f) => {
            let mut body = render_metrics(&f);
            if let Some(pad) = faults.metrics_padding_bytes {
                pad_with_comments(&mut body, pad as usize);
            }
            (StatusCode::OK, body)
        }
        None => (StatusCode::SERVICE_UNAVAILABLE, "stopped\n".into()),
    }
}

/// Valid exposition made huge: comment lines, which a parser must skip.
fn pad_with_comments(body: &mut String, bytes: usize) {
    let line = format!("# {}\n", "x".repeat(1021));
    body.reserve(bytes);
    while bytes > 0 && body.len() < bytes {
        body.push_str(&line);
    }
}

/// The member's listener. While `garbage_http` is set, whatever the server writes on any
/// connection (new or kept alive) is replaced by bytes that are not HTTP, and the connection
/// is closed.
struct FaultyListener {
    inner: tokio::net::TcpListener,
    world: SharedWorld,
    key: String,
}

impl axum::serve::Listener for FaultyListener {
    type Io = FaultyIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let io = FaultyIo {
            inner: io,
            world: self.world.clone(),
            key: self.key.clone(),
        };
        (io, addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

const GARBAGE: &[u8] = b"\x00\xffSSH-2.0-not-http\r\n\x1b[31m\x00\x00garbage";

struct FaultyIo {
    inner: tokio::net::TcpStream,
    world: SharedWorld,
    key: String,
}

impl tokio::io::AsyncRead for FaultyIo {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for FaultyIo {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.world.lock().faults(&self.key).garbage_http {
            // Best effort: the garbage, then an error so the server drops the connection.
            let _ = std::pin::Pin::new(&mut self.inner).poll_write(cx, GARBAGE);
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "garbage_http fault",
            )));
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Prometheus text exposition 0.0.4, with the metric names of a real node.
pub fn render_metrics(f: &MemberFigures) -> String {
    let mut out = String::new();
    let mut one = |name: &str, help: &str, kind: &str, value: String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {value}");
    };
    for (name, help, value) in gauges(f) {
        one(name, help, "gauge", value.to_string());
    }
    for (name, help, value) in counters(f) {
        one(name, help, "counter", value.to_string());
    }
    one(
        "marekvs_uptime_seconds",
        "Process uptime.",
        "gauge",
        format!("{:.3}", f.uptime_seconds),
    );
    // As marekvs 0.2 exports it (engine metrics.rs): value 1, labels version and node_id.
    let _ = writeln!(
        out,
        "# HELP marekvs_info Static build/runtime info (value is 1)"
    );
    let _ = writeln!(out, "# TYPE marekvs_info gauge");
    let _ = writeln!(
        out,
        "marekvs_info{{version=\"{}\",node_id=\"{}\"}} 1",
        f.version, f.node_id
    );
    let _ = writeln!(out, "# HELP marekvs_commands_total Commands executed.");
    let _ = writeln!(out, "# TYPE marekvs_commands_total counter");
    for (cmd, n) in &f.commands {
        let _ = writeln!(out, "marekvs_commands_total{{cmd=\"{cmd}\"}} {n}");
    }
    let phase = match f.phase {
        Some(NodePhase::Joining) => "joining",
        Some(NodePhase::Active) => "active",
        Some(NodePhase::Leaving) => "leaving",
        None => "stopped",
    };
    let _ = writeln!(
        out,
        "# HELP marekvs_sim_phase Simulator only: the node's phase."
    );
    let _ = writeln!(out, "# TYPE marekvs_sim_phase gauge");
    let _ = writeln!(out, "marekvs_sim_phase{{phase=\"{phase}\"}} 1");
    out
}

/// The gauges a node exports: name, help, value.
fn gauges(f: &MemberFigures) -> [(&'static str, &'static str, u64); 15] {
    [
        (
            "marekvs_cluster_underreplicated_partitions",
            "Partitions with fewer than REPLICAS_N candidate owners in this node's view.",
            f.underreplicated_partitions,
        ),
        (
            "marekvs_cluster_members",
            "Members in this node's view.",
            f.view_members,
        ),
        (
            "marekvs_cluster_effective_rf_min",
            "Smallest replica count of any partition.",
            f.effective_rf_min,
        ),
        (
            "marekvs_cluster_owned_partitions",
            "Partitions this node homes.",
            f.owned_partitions,
        ),
        (
            "marekvs_join_gate_pending_pids",
            "Partitions still to bootstrap.",
            f.join_gate_pending_pids,
        ),
        (
            "marekvs_ring_ops",
            "Entries retained in the replication ring.",
            f.ring_ops,
        ),
        (
            "marekvs_ring_bytes",
            "Bytes retained in the replication ring.",
            f.ring_bytes,
        ),
        (
            "marekvs_mesh_peers",
            "Live control connections to peers.",
            f.mesh_peers,
        ),
        (
            "marekvs_repl_inflight_bytes",
            "Replicated bytes sent and not yet acknowledged.",
            f.repl_inflight_bytes,
        ),
        (
            "marekvs_interest_entries",
            "Live interest leases held for peers.",
            f.interest_entries,
        ),
        (
            "marekvs_connected_clients",
            "Client connections open.",
            f.connected_clients,
        ),
        ("marekvs_db_total_bytes", "Data size.", f.db_total_bytes),
        (
            "marekvs_disk_total_bytes",
            "Volume capacity.",
            f.disk_total_bytes,
        ),
        (
            "marekvs_disk_avail_bytes",
            "Volume space available.",
            f.disk_total_bytes.saturating_sub(f.db_total_bytes),
        ),
        (
            "marekvs_disk_write_stopped",
            "1 when writes are refused at the disk high-water mark.",
            u64::from(f.disk_write_stopped),
        ),
    ]
}

/// The counters a node exports (per command, apart): name, help, value.
fn counters(f: &MemberFigures) -> [(&'static str, &'static str, u64); 8] {
    [
        (
            "marekvs_bootstraps_completed_total",
            "Partition bootstraps finished.",
            f.bootstraps_completed_total,
        ),
        (
            "marekvs_ae_repair_ops_total",
            "Records received through anti-entropy repair.",
            f.ae_repair_ops_total,
        ),
        (
            "marekvs_ae_rounds_total",
            "Anti-entropy rounds started.",
            f.ae_rounds_total,
        ),
        (
            "marekvs_repl_ops_applied_total",
            "Replicated operations applied.",
            f.repl_ops_applied_total,
        ),
        (
            "marekvs_repl_ops_sent_total",
            "Replicated operations sent.",
            f.repl_ops_sent_total,
        ),
        (
            "marekvs_net_input_bytes_total",
            "Bytes read from client connections.",
            f.net_input_bytes_total,
        ),
        (
            "marekvs_connections_accepted_total",
            "Client connections accepted.",
            f.connections_accepted_total,
        ),
        (
            "marekvs_connections_closed_total",
            "Client connections closed.",
            f.connections_closed_total,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::model::{Faults, MemberSpec, Settings};

    fn phase(world: &SharedWorld, key: &str) -> NodePhase {
        let report = world.lock().report();
        report
            .clusters
            .iter()
            .flat_map(|c| &c.members)
            .find(|m| m.key == key)
            .map(|m| m.phase)
            .expect("member reported")
    }

    /// `redirect_drain_to`: `/drain` answers 307 to the address given and does not drain;
    /// every request is counted, and the member named is asked nothing by the redirect itself.
    #[tokio::test]
    async fn a_redirected_drain_drains_nobody_and_is_counted() {
        let world = SharedWorld::new(Settings::default(), 7);
        let ips = [Ipv4Addr::new(127, 78, 0, 2), Ipv4Addr::new(127, 78, 0, 3)];
        let mut servers = Vec::new();
        for (i, ip) in ips.iter().enumerate() {
            let key = format!("ns/demo-{i}");
            world.lock().start_member(
                "ns/demo",
                MemberSpec {
                    key: key.clone(),
                    node_id: i.to_string(),
                    replicas_n: 2,
                    volume: format!("vol-{i}"),
                    disk_bytes: 1 << 30,
                    faults: Faults::default(),
                    addr: ip.to_string(),
                    version: crate::model::MODELLED_VERSION.into(),
                },
            );
            servers.push(serve(world.clone(), key, IpAddr::V4(*ip)).await.unwrap());
        }
        let elsewhere = format!("http://{}:{METRICS_PORT}/drain", ips[1]);
        world.lock().set_faults(
            "ns/demo-0",
            Faults {
                redirect_drain_to: Some(elsewhere.clone()),
                ..Faults::default()
            },
        );
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let drain0 = format!("http://{}:{METRICS_PORT}/drain", ips[0]);
        let r = http.get(&drain0).send().await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(r.headers()["location"], elsewhere.as_str());
        assert_ne!(phase(&world, "ns/demo-0"), NodePhase::Leaving);
        assert_ne!(phase(&world, "ns/demo-1"), NodePhase::Leaving);
        let counts = |w: &SharedWorld| {
            let w = w.lock();
            [
                w.drain_requests.get("ns/demo-0").copied().unwrap_or(0),
                w.drain_requests.get("ns/demo-1").copied().unwrap_or(0),
            ]
        };
        assert_eq!(counts(&world), [1, 0]);

        // Cleared: it drains.
        world.lock().set_faults("ns/demo-0", Faults::default());
        let r = http.get(&drain0).send().await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        assert_eq!(phase(&world, "ns/demo-0"), NodePhase::Leaving);
        assert_ne!(phase(&world, "ns/demo-1"), NodePhase::Leaving);
        assert_eq!(counts(&world), [2, 0]);
        assert_eq!(
            world.lock().report().clusters[0].members[0].drain_requests,
            2
        );
        drop(servers);
    }

    /// A simulated member reports its release as a real one does, read by the operator's
    /// parser, and takes it from its image's tag: a mixed-version mesh by image alone.
    #[test]
    fn the_release_is_reported_as_marekvs_info_and_follows_the_image_tag() {
        let f = MemberFigures {
            node_id: "3".into(),
            version: crate::model::version_of_image("ghcr.io/yannick/marekvs:0.3.0"),
            ..Default::default()
        };
        let text = render_metrics(&f);
        assert!(text.contains("\nmarekvs_info{version=\"0.3.0\",node_id=\"3\"} 1\n"));
        let scrape = marekvs_core::metrics::parse_scrape(&text).unwrap();
        assert_eq!(scrape.version.as_deref(), Some("0.3.0"));
        for (image, version) in [
            ("marekvs:v0.3.1-rc.1", "0.3.1-rc.1"),
            ("localhost:5000/marekvs:0.4", "0.4"),
            (
                "ghcr.io/yannick/marekvs:latest",
                crate::model::MODELLED_VERSION,
            ),
            ("ghcr.io/yannick/marekvs", crate::model::MODELLED_VERSION),
            ("localhost:5000/marekvs", crate::model::MODELLED_VERSION),
            ("marekvs:0.3.0@sha256:abc", "0.3.0"),
            ("marekvs:1.x.0", crate::model::MODELLED_VERSION),
        ] {
            assert_eq!(crate::model::version_of_image(image), version, "{image}");
        }
    }

    #[test]
    fn metrics_use_the_contract_names() {
        let f = MemberFigures {
            underreplicated_partitions: 4096,
            view_members: 3,
            commands: [("get".to_string(), 7)].into(),
            ..Default::default()
        };
        let text = render_metrics(&f);
        assert!(text.contains("\nmarekvs_cluster_underreplicated_partitions 4096\n"));
        assert!(text.contains("\nmarekvs_cluster_members 3\n"));
        for name in [
            "marekvs_join_gate_pending_pids",
            "marekvs_bootstraps_completed_total",
            "marekvs_ae_repair_ops_total",
            "marekvs_commands_total{cmd=\"get\"}",
            "marekvs_disk_avail_bytes",
            "marekvs_uptime_seconds",
            "marekvs_ae_rounds_total",
            "marekvs_net_input_bytes_total",
            "marekvs_connected_clients",
            "marekvs_connections_accepted_total",
            "marekvs_mesh_peers",
            "marekvs_repl_inflight_bytes",
            "marekvs_repl_ops_applied_total",
            "marekvs_ring_ops",
            "marekvs_ring_bytes",
        ] {
            assert!(text.contains(&format!("\n{name} ")), "missing {name}");
        }
    }
}
