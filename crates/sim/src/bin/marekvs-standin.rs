//! `marekvs-standin`: **not marekvs**. A stand-in for the real marekvs server binary, so the
//! harness's real-node mode (`marekvs-sim --real-bin`) can be exercised where the real binary
//! is not at hand. It reproduces only what that mode must cope with:
//!
//! - the four listeners, from the same env variables with the same `0.0.0.0` defaults
//!   (`MAREKVS_RESP_ADDR` :6379 TCP, `MAREKVS_MESH_ADDR` :7373 TCP, `MAREKVS_GOSSIP_ADDR`
//!   :7946 UDP, `MAREKVS_METRICS_ADDR` :9121 TCP), and on a bind failure the line
//!   `ERROR failed to bind to <addr>/<TCP|UDP> for <listener>: <os error>` on stderr, exit 1;
//! - a start line on stdout naming `MAREKVS_NODE_ID` and the addresses;
//! - `/ready` (200), `/alive` (200), `/drain` (200, turns Leaving) and a minimal `/metrics` on
//!   the metrics listener; `+PONG` to `PING` on the RESP listener, `-ERR stand-in` to all else;
//! - exit 0 on SIGTERM (at once: it has nothing to flush);
//! - `MAREKVS_STANDIN_FAIL=<text>`: `ERROR <text>` on stderr and exit 1 right after starting,
//!   to exercise the harness's crash-loop handling.
//!
//! It stores nothing, gossips with no one and always reports a cluster of one: it must not be
//! taken for a cluster member.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use clap::Parser;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use marekvs_sim::resp::{Command, Parsed, Protocol, Reply, parse_command};

/// NOT marekvs: a stand-in for the marekvs server binary, for testing marekvs-sim's real-node
/// mode (--real-bin) without the real binary.
///
/// It binds the four listeners a marekvs node binds, from the same env variables and defaults,
/// and fails the same way when an address is taken. It answers the node's HTTP endpoints and a
/// RESP PING, always reports a cluster of one member, stores nothing and exits 0 on SIGTERM.
/// With MAREKVS_STANDIN_FAIL=<text> it prints `ERROR <text>` and exits 1 right after starting.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// RESP (Redis protocol) listener, TCP.
    #[arg(long, env = "MAREKVS_RESP_ADDR", default_value = "0.0.0.0:6379")]
    resp_addr: String,
    /// Mesh listener, TCP (accepts and ignores connections).
    #[arg(long, env = "MAREKVS_MESH_ADDR", default_value = "0.0.0.0:7373")]
    mesh_addr: String,
    /// Gossip listener, UDP (reads and ignores datagrams).
    #[arg(long, env = "MAREKVS_GOSSIP_ADDR", default_value = "0.0.0.0:7946")]
    gossip_addr: String,
    /// HTTP listener for /ready, /alive, /drain and /metrics.
    #[arg(long, env = "MAREKVS_METRICS_ADDR", default_value = "0.0.0.0:9121")]
    metrics_addr: String,
    /// Node id, only shown in the start line.
    #[arg(long, env = "MAREKVS_NODE_ID", default_value = "")]
    node_id: String,
    /// Print `ERROR <text>` to stderr and exit 1 right after starting.
    #[arg(long, env = "MAREKVS_STANDIN_FAIL")]
    fail: Option<String>,
}

struct Node {
    started: Instant,
    leaving: AtomicBool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(line) => {
            eprintln!("ERROR {line}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    // In the order a node binds them; the first that fails ends the process.
    let resp = bind_tcp(&args.resp_addr, "resp").await?;
    let mesh = bind_tcp(&args.mesh_addr, "mesh").await?;
    let gossip = UdpSocket::bind(&args.gossip_addr)
        .await
        .map_err(|e| bind_error(&args.gossip_addr, "UDP", "gossip", &e))?;
    let metrics = bind_tcp(&args.metrics_addr, "metrics").await?;
    let local = |r: std::io::Result<std::net::SocketAddr>| {
        r.map(|a| a.to_string()).unwrap_or_else(|e| e.to_string())
    };
    println!(
        "INFO marekvs-standin (not marekvs) node {:?} started: resp {} mesh {} gossip {}/UDP metrics {}",
        args.node_id,
        local(resp.local_addr()),
        local(mesh.local_addr()),
        local(gossip.local_addr()),
        local(metrics.local_addr()),
    );
    if let Some(text) = args.fail {
        return Err(text);
    }

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("installing the SIGTERM handler: {e}"))?;
    let node = Arc::new(Node {
        started: Instant::now(),
        leaving: AtomicBool::new(false),
    });
    let app = Router::new()
        .route("/ready", get(|| async { "ready\n" }))
        .route("/alive", get(|| async { "alive\n" }))
        .route("/drain", get(drain).post(drain))
        .route("/metrics", get(metrics_handler))
        .with_state(node);
    tokio::spawn(async move {
        let _ = axum::serve(metrics, app).await;
    });
    tokio::spawn(serve_resp(resp));
    tokio::spawn(async move {
        // Mesh connections are accepted and what they send is ignored: nothing is replicated.
        while let Ok((mut conn, _)) = mesh.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while gossip.recv_from(&mut buf).await.is_ok() {}
    });

    tokio::select! {
        _ = sigterm.recv() => println!("INFO SIGTERM: exiting"),
        _ = tokio::signal::ctrl_c() => println!("INFO interrupted: exiting"),
    }
    Ok(())
}

async fn bind_tcp(addr: &str, what: &str) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(addr, "TCP", what, &e))
}

/// The line marekvs prints when a listener cannot be bound (without the `ERROR ` prefix).
fn bind_error(addr: &str, proto: &str, what: &str, e: &std::io::Error) -> String {
    format!(
        "failed to bind to {addr}/{proto} for {what}: {}",
        os_error_text(e)
    )
}

/// An I/O error as the OS words it: `Address already in use`, without Rust's `(os error 98)`.
fn os_error_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

async fn drain(State(node): State<Arc<Node>>) -> &'static str {
    node.leaving.store(true, Ordering::Relaxed);
    "leaving\n"
}

async fn metrics_handler(State(node): State<Arc<Node>>) -> String {
    render_metrics(
        node.started.elapsed().as_secs_f64(),
        node.leaving.load(Ordering::Relaxed),
    )
}

/// A node's metrics as a cluster of one that holds nothing: every gauge the operator reads,
/// every counter at 0.
fn render_metrics(uptime_seconds: f64, leaving: bool) -> String {
    let mut out = String::new();
    for (name, kind, value) in [
        ("marekvs_cluster_members", "gauge", "1".to_string()),
        (
            "marekvs_cluster_underreplicated_partitions",
            "gauge",
            "0".into(),
        ),
        ("marekvs_join_gate_pending_pids", "gauge", "0".into()),
        (
            "marekvs_uptime_seconds",
            "gauge",
            format!("{uptime_seconds:.3}"),
        ),
        ("marekvs_bootstraps_completed_total", "counter", "0".into()),
        ("marekvs_ae_repair_ops_total", "counter", "0".into()),
        (
            "marekvs_standin_leaving",
            "gauge",
            u8::from(leaving).to_string(),
        ),
    ] {
        let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {value}");
    }
    let _ = writeln!(out, "# TYPE marekvs_commands_total counter");
    for cmd in ["get", "set"] {
        let _ = writeln!(out, "marekvs_commands_total{{cmd=\"{cmd}\"}} 0");
    }
    out
}

async fn serve_resp(listener: TcpListener) {
    while let Ok((conn, _)) = listener.accept().await {
        tokio::spawn(resp_connection(conn));
    }
}

async fn resp_connection(mut conn: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match parse_command(&buf) {
            Parsed::Complete { value, consumed } => {
                buf.drain(..consumed);
                if conn.write_all(&answer(&value)).await.is_err() {
                    return;
                }
                continue;
            }
            // Including a request too big to buffer.
            Parsed::Error(_) => {
                let _ = conn.write_all(&stand_in_error()).await;
                return;
            }
            Parsed::NeedMore => {}
        }
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// `+PONG` to `PING`, `-ERR stand-in` to anything else: it serves no data.
fn answer(command: &Command) -> Vec<u8> {
    let is_ping = command
        .first()
        .is_some_and(|c| c.eq_ignore_ascii_case(b"PING"));
    if is_ping {
        Reply::Simple("PONG".into()).to_bytes(Protocol::Resp2)
    } else {
        stand_in_error()
    }
}

fn stand_in_error() -> Vec<u8> {
    Reply::err("ERR stand-in").to_bytes(Protocol::Resp2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply to what the shared RESP parser makes of a request.
    fn reply_to(request: &[u8]) -> Option<Vec<u8>> {
        match parse_command(request) {
            Parsed::Complete { value, .. } => Some(answer(&value)),
            Parsed::Error(_) => Some(stand_in_error()),
            Parsed::NeedMore => None,
        }
    }

    #[test]
    fn resp_requests_get_pong_or_the_stand_in_error() {
        let pong = Some(b"+PONG\r\n".to_vec());
        let err = Some(b"-ERR stand-in\r\n".to_vec());
        assert_eq!(reply_to(b"*1\r\n$4\r\nPING\r\n"), pong);
        assert_eq!(reply_to(b"ping\r\n"), pong);
        assert_eq!(reply_to(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1"), err);
        assert_eq!(reply_to(b"*1\r\n$4\r\nPI"), None);
        assert_eq!(reply_to(b"*1\r\n"), None);
        assert_eq!(reply_to(b""), None);
        for invalid in [
            &b"*x\r\n"[..],
            b"*1\r\n:4\r\n",
            b"*1\r\n$4\r\nPINGxx",
            b"*99999\r\n",
        ] {
            assert_eq!(reply_to(invalid), err, "{invalid:?}");
        }
        // What a request takes is consumed, so the next is parsed after it.
        let Parsed::Complete { consumed, .. } = parse_command(b"*1\r\n$4\r\nPING\r\nPING\r\n")
        else {
            panic!("PING did not parse");
        };
        assert_eq!(consumed, 14);
    }

    #[test]
    fn bind_errors_read_as_marekvs_prints_them() {
        let e = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        assert_eq!(
            bind_error("0.0.0.0:7946", "UDP", "gossip", &e),
            format!("failed to bind to 0.0.0.0:7946/UDP for gossip: {e}")
        );
        #[cfg(target_os = "linux")]
        assert_eq!(
            os_error_text(&std::io::Error::from_raw_os_error(98)),
            "Address already in use"
        );
    }

    #[test]
    fn metrics_are_a_cluster_of_one_with_nothing_to_do() {
        let text = render_metrics(2.5, true);
        for line in [
            "marekvs_cluster_members 1",
            "marekvs_cluster_underreplicated_partitions 0",
            "marekvs_join_gate_pending_pids 0",
            "marekvs_uptime_seconds 2.500",
            "marekvs_bootstraps_completed_total 0",
            "marekvs_commands_total{cmd=\"get\"} 0",
            "marekvs_standin_leaving 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
        }
        assert!(render_metrics(0.0, false).contains("\nmarekvs_standin_leaving 0\n"));
    }
}
