//! The stand-in for the marekvs binary (`marekvs-standin`, not marekvs) behaves as the harness's
//! real-node mode needs: members bound to their own pod IPs run side by side on the same ports,
//! and a taken address fails the way marekvs fails.
//!
//! Addresses are unusual loopback IPs (127.78.0.x) and ports the kernel reports free on them,
//! so nothing else running on the machine (on 0.0.0.0 or elsewhere) can collide.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_marekvs-standin");

/// Ports (resp, mesh, gossip, metrics) free on `ip` right now.
fn free_ports(ip: Ipv4Addr) -> [u16; 4] {
    let tcp = || {
        TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .expect("binding a free TCP port")
            .port()
    };
    let udp = UdpSocket::bind((ip, 0))
        .and_then(|s| s.local_addr())
        .expect("binding a free UDP port")
        .port();
    [tcp(), tcp(), udp, tcp()]
}

fn env_for(ip: Ipv4Addr, ports: [u16; 4], node_id: &str) -> Vec<(String, String)> {
    let vars = [
        "MAREKVS_RESP_ADDR",
        "MAREKVS_MESH_ADDR",
        "MAREKVS_GOSSIP_ADDR",
        "MAREKVS_METRICS_ADDR",
    ];
    let mut env: Vec<(String, String)> = vars
        .iter()
        .zip(ports)
        .map(|(v, p)| (v.to_string(), format!("{ip}:{p}")))
        .collect();
    env.push(("MAREKVS_NODE_ID".into(), node_id.into()));
    env
}

/// A running stand-in, killed if the test ends early.
struct StandIn(Option<Child>);

impl StandIn {
    fn start(env: &[(String, String)]) -> Self {
        let child = Command::new(BIN)
            .env_clear()
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting marekvs-standin");
        StandIn(Some(child))
    }

    fn pid(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// SIGTERM, then its exit and output (killed after 10 s).
    fn terminate(mut self) -> Output {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success());
        self.wait()
    }

    fn wait(&mut self) -> Output {
        let mut child = self.0.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().expect("waiting").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait_with_output().expect("collecting output")
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `GET path` over HTTP/1.1: the status code and body.
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

fn wait_ready(metrics: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((200, _)) = http_get(metrics, "/ready") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{metrics}/ready never answered 200"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn resp(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("RESP connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).expect("RESP reply");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn two_stand_ins_on_two_ips_share_the_same_ports() {
    let (a, b) = (Ipv4Addr::new(127, 78, 0, 2), Ipv4Addr::new(127, 78, 0, 3));
    let ports = free_ports(a);
    let first = StandIn::start(&env_for(a, ports, "2"));
    let second = StandIn::start(&env_for(b, ports, "3"));
    for ip in [a, b] {
        let metrics = SocketAddr::from((ip, ports[3]));
        wait_ready(metrics);
        assert_eq!(http_get(metrics, "/alive").map(|r| r.0), Some(200));
        let (code, body) = http_get(metrics, "/metrics").expect("metrics");
        assert_eq!(code, 200);
        assert!(
            body.lines().any(|l| l == "marekvs_cluster_members 1"),
            "{body}"
        );
        assert!(
            body.lines().any(|l| l == "marekvs_standin_leaving 0"),
            "{body}"
        );
        let resp_addr = SocketAddr::from((ip, ports[0]));
        assert_eq!(resp(resp_addr, b"*1\r\n$4\r\nPING\r\n"), "+PONG\r\n");
        assert_eq!(
            resp(resp_addr, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
            "-ERR stand-in\r\n"
        );
    }
    // /drain turns one Leaving, and only that one.
    assert_eq!(
        http_get(SocketAddr::from((a, ports[3])), "/drain").map(|r| r.0),
        Some(200)
    );
    let (_, body) = http_get(SocketAddr::from((a, ports[3])), "/metrics").unwrap();
    assert!(
        body.lines().any(|l| l == "marekvs_standin_leaving 1"),
        "{body}"
    );
    let (_, body) = http_get(SocketAddr::from((b, ports[3])), "/metrics").unwrap();
    assert!(
        body.lines().any(|l| l == "marekvs_standin_leaving 0"),
        "{body}"
    );

    for (node, ip, id) in [(first, a, "2"), (second, b, "3")] {
        let out = node.terminate();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "SIGTERM exits 0; stdout:\n{stdout}"
        );
        let start = stdout.lines().next().unwrap_or_default();
        assert!(start.contains(&format!("node \"{id}\"")), "{start}");
        assert!(
            start.contains(&format!("gossip {ip}:{}/UDP", ports[2])),
            "{start}"
        );
        assert!(start.contains("not marekvs"), "{start}");
    }
}

#[test]
fn a_taken_address_fails_as_marekvs_does() {
    let ip = Ipv4Addr::new(127, 78, 0, 4);
    let ports = free_ports(ip);
    let first = StandIn::start(&env_for(ip, ports, "4"));
    wait_ready(SocketAddr::from((ip, ports[3])));

    // Only the gossip address is shared: the failure names the UDP listener.
    let other = Ipv4Addr::new(127, 78, 0, 5);
    let mut env = env_for(other, free_ports(other), "5");
    env[2].1 = format!("{ip}:{}", ports[2]);
    let out = StandIn::start(&env).wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "ERROR failed to bind to {ip}:{}/UDP for gossip: Address already in use",
            ports[2]
        )
    );

    // Every address shared: the first listener it binds, RESP, fails.
    let out = StandIn::start(&env_for(ip, ports, "6")).wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "ERROR failed to bind to {ip}:{}/TCP for resp: Address already in use",
            ports[0]
        )
    );
    assert_eq!(first.terminate().status.code(), Some(0));
}

#[test]
fn the_fail_switch_exits_1_with_its_error_line_after_starting() {
    let ip = Ipv4Addr::new(127, 78, 0, 6);
    let mut env = env_for(ip, free_ports(ip), "7");
    env.push(("MAREKVS_STANDIN_FAIL".into(), "disk on fire".into()));
    let out = StandIn::start(&env).wait();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "ERROR disk on fire"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("started"));
}
