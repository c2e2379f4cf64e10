//! A member's Redis-protocol port, `<podIP>:6379`: the key commands of the model, served
//! through this member, plus what clients send when they connect.
//!
//! Commands: `PING [msg]`, `ECHO msg`, `HELLO [2|3] [AUTH user pass] [SETNAME name]`,
//! `AUTH [user] pass`, `CLIENT SETNAME|SETINFO|GETNAME|ID`, `SELECT 0`, `SET key value` (no
//! options), `GET`, `DEL`, `EXISTS`, `DBSIZE`, `CLUSTER MYID|NODES|INFO`, `COMMAND` (empty),
//! `CONFIG SET|GET`, `QUIT`. Pipelined commands are answered in order. With a password
//! (`MAREKVS_REQUIREPASS`), everything but `AUTH`, `HELLO ... AUTH` and `QUIT` answers
//! `-NOAUTH` until the connection authenticates. As on a real node, `CONFIG SET requirepass`
//! changes the password of this process only (a restart starts on its env again) and leaves
//! connections that already authenticated authenticated. While the member is hung nothing is answered; once its process is gone its
//! connections are closed (after the answers already due), as a dead process's would be;
//! nothing else closes them.
//!
//! As on a real node, the port is bound at start but listens only once the member turned
//! Active (connections are refused while it is Joining after a start or restart). The server
//! feeds the member's counters: connections accepted and closed, bytes read, and every
//! command executed (`marekvs_commands_total{cmd}`, lowercase, counted after execution,
//! failures too, NOAUTH rejections and unknown commands not).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use crate::model::NotServing;
use crate::resp::{Command, Parsed, Protocol, Reply, parse_command};
pub use crate::world::RESP_PORT;
use crate::world::SharedWorld;

/// What `HELLO` reports as the server's version.
const SERVER_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "-sim");

/// A running RESP server; dropping the handle stops it and closes its connections.
pub struct RespServer {
    // Every task of the server waits for this sender to be dropped.
    _stop: watch::Sender<()>,
    addr: SocketAddr,
}

impl RespServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

struct Ctx {
    world: SharedWorld,
    key: String,
    /// The process's password: its env's at start, then the last `CONFIG SET requirepass`.
    requirepass: std::sync::Mutex<Option<String>>,
}

impl Ctx {
    fn requirepass(&self) -> Option<String> {
        self.requirepass
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Serve RESP for member `key` on `ip:6379`. An empty password counts as none, as Redis's
/// `requirepass ""` does. The address is bound at once; it listens once the member is Active.
pub async fn serve(
    world: SharedWorld,
    key: String,
    ip: IpAddr,
    requirepass: Option<String>,
) -> anyhow::Result<RespServer> {
    let addr = SocketAddr::new(ip, RESP_PORT);
    // A restarted member binds the address its previous process is still releasing.
    let mut tries = 0;
    let socket = loop {
        let socket = match ip {
            IpAddr::V4(_) => TcpSocket::new_v4()?,
            IpAddr::V6(_) => TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => break socket,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let ctx = Arc::new(Ctx {
        world,
        key,
        requirepass: std::sync::Mutex::new(requirepass.filter(|p| !p.is_empty())),
    });
    let (stop, stopped) = watch::channel(());
    tokio::spawn(listen_when_active(socket, ctx, stopped));
    Ok(RespServer { _stop: stop, addr })
}

/// Listen once the member turned Active, then accept until stopped.
async fn listen_when_active(socket: TcpSocket, ctx: Arc<Ctx>, mut stopped: watch::Receiver<()>) {
    while !ctx.world.lock().resp_open(&ctx.key) {
        tokio::select! {
            _ = stopped.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    let Ok(listener) = socket.listen(1024) else {
        return;
    };
    accept_loop(listener, ctx, stopped).await;
}

async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>, mut stopped: watch::Receiver<()>) {
    let for_connections = stopped.clone();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Some(boot) = ctx.world.lock().boot_of(&ctx.key) else {
                        // Its process is gone: nobody serves this connection.
                        continue;
                    };
                    ctx.world.lock().connection_accepted(&ctx.key, boot);
                    next_id += 1;
                    let session = Session::new(ctx.clone(), next_id, boot);
                    tokio::spawn(connection(stream, session, for_connections.clone()));
                }
                // Out of file descriptors and the like: do not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
}

/// Wait while the member is hung; `false` if the server stopped meanwhile.
async fn wait_while_hung(ctx: &Ctx, stopped: &mut watch::Receiver<()>) -> bool {
    while ctx.world.lock().faults(&ctx.key).hang {
        tokio::select! {
            _ = stopped.changed() => return false,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    true
}

/// Answers buffered before they are written, even in the middle of a pipeline, so a
/// pipeline of large answers does not pile up in memory.
const MAX_PENDING_ANSWER_BYTES: usize = 256 * 1024;

async fn connection(stream: TcpStream, mut session: Session, stopped: watch::Receiver<()>) {
    serve_connection(stream, &mut session, stopped).await;
    let (ctx, boot) = (session.ctx.clone(), session.boot);
    ctx.world.lock().connection_closed(&ctx.key, boot);
}

/// How often an idle connection looks whether its member's process is still there.
const PROCESS_CHECK: Duration = Duration::from_millis(250);

async fn serve_connection(
    mut stream: TcpStream,
    session: &mut Session,
    mut stopped: watch::Receiver<()>,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut out = Vec::new();
    loop {
        // Answer every complete command buffered, in order.
        let mut close = false;
        let mut parsed_up_to = 0;
        while !close {
            let args = match parse_command(&buf[parsed_up_to..]) {
                Parsed::NeedMore => break,
                Parsed::Error(e) => {
                    Reply::err(format!("ERR {e}")).encode(session.proto, &mut out);
                    close = true;
                    break;
                }
                Parsed::Complete { value, consumed } => {
                    parsed_up_to += consumed;
                    value
                }
            };
            if args.is_empty() {
                continue;
            }
            if !wait_while_hung(&session.ctx, &mut stopped).await {
                return;
            }
            let step = session.execute(&args);
            if let Some(reply) = &step.reply {
                reply.encode(session.proto, &mut out);
            }
            close = step.close;
            if out.len() >= MAX_PENDING_ANSWER_BYTES
                && !write_out(&mut stream, &mut out, &mut stopped).await
            {
                return;
            }
        }
        buf.drain(..parsed_up_to);
        // Answers due before a close still go out.
        if !write_out(&mut stream, &mut out, &mut stopped).await || close {
            return;
        }
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                read = stream.read_buf(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let ctx = &session.ctx;
                        ctx.world.lock().input_bytes(&ctx.key, session.boot, n as u64);
                        break;
                    }
                },
                _ = tokio::time::sleep(PROCESS_CHECK) => {
                    if !session.alive() {
                        return;
                    }
                }
            }
        }
    }
}

/// Write and clear the pending answers; `false` if the connection or the server is done.
async fn write_out(
    stream: &mut TcpStream,
    out: &mut Vec<u8>,
    stopped: &mut watch::Receiver<()>,
) -> bool {
    if out.is_empty() {
        return true;
    }
    let written = tokio::select! {
        _ = stopped.changed() => return false,
        written = stream.write_all(out) => written.is_ok(),
    };
    out.clear();
    written
}

/// What to do after a command.
struct Step {
    reply: Option<Reply>,
    close: bool,
}

impl Step {
    fn reply(reply: Reply) -> Step {
        Step {
            reply: Some(reply),
            close: false,
        }
    }
}

impl From<Reply> for Step {
    fn from(reply: Reply) -> Step {
        Step::reply(reply)
    }
}

/// The member stopped: close without an answer.
impl From<NotServing> for Step {
    fn from(_: NotServing) -> Step {
        Step {
            reply: None,
            close: true,
        }
    }
}

fn arity(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// A client-sent name or word, fit for an error text.
fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned()
}

fn upper(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_ascii_uppercase()
}

const NOAUTH: &str = "NOAUTH Authentication required.";

/// The commands this server knows, which it counts.
const KNOWN: &[&str] = &[
    "PING", "ECHO", "QUIT", "AUTH", "HELLO", "CLIENT", "SELECT", "COMMAND", "SET", "GET", "DEL",
    "EXISTS", "DBSIZE", "CLUSTER", "CONFIG",
];
const NOAUTH_HELLO: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// One connection's state.
struct Session {
    ctx: Arc<Ctx>,
    id: u64,
    /// The member process that accepted it.
    boot: u64,
    proto: Protocol,
    authenticated: bool,
    name: Option<Vec<u8>>,
}

impl Session {
    fn new(ctx: Arc<Ctx>, id: u64, boot: u64) -> Self {
        let authenticated = ctx.requirepass().is_none();
        Session {
            ctx,
            id,
            boot,
            proto: Protocol::Resp2,
            authenticated,
            name: None,
        }
    }

    /// Whether the process that accepted the connection still runs.
    fn alive(&self) -> bool {
        self.ctx.world.lock().boot_of(&self.ctx.key) == Some(self.boot)
    }

    fn execute(&mut self, args: &Command) -> Step {
        let Some((name, rest)) = args.split_first() else {
            return Step::reply(Reply::ok());
        };
        if !self.alive() {
            return NotServing.into();
        }
        let name = upper(name);
        if !self.authenticated && !matches!(name.as_str(), "AUTH" | "HELLO" | "QUIT") {
            return Reply::err(NOAUTH).into();
        }
        let step = self.dispatch(&name, rest, args);
        if KNOWN.contains(&name.as_str()) {
            let ctx = &self.ctx;
            ctx.world
                .lock()
                .count_command(&ctx.key, self.boot, &name.to_ascii_lowercase());
        }
        step
    }

    fn dispatch(&mut self, name: &str, rest: &[Vec<u8>], args: &Command) -> Step {
        let name = name.to_string();
        match name.as_str() {
            "PING" => match rest {
                [] => Reply::Simple("PONG".into()).into(),
                [msg] => Reply::bulk(msg.clone()).into(),
                _ => arity(&name).into(),
            },
            "ECHO" => match rest {
                [msg] => Reply::bulk(msg.clone()).into(),
                _ => arity(&name).into(),
            },
            "QUIT" => Step {
                reply: Some(Reply::ok()),
                close: true,
            },
            "AUTH" => self.auth(rest).into(),
            "HELLO" => self.hello(rest).into(),
            "CLIENT" => self.client(rest).into(),
            "SELECT" => select(rest).into(),
            "COMMAND" => command(rest).into(),
            "SET" | "GET" | "DEL" | "EXISTS" | "DBSIZE" => self.data(&name, rest),
            "CLUSTER" => self.cluster(rest),
            "CONFIG" => self.config(rest).into(),
            _ => Reply::err(format!("ERR unknown command '{}'", shown(&args[0]))).into(),
        }
    }

    /// Whether `user`/`pass` authenticate: the one user is `default`, and without a
    /// configured password any password does (Redis's `nopass` default user).
    fn credentials_match(&self, user: &[u8], pass: &[u8]) -> bool {
        user == b"default" && self.ctx.requirepass().is_none_or(|p| p.as_bytes() == pass)
    }

    /// `CONFIG SET <param> <value> [<param> <value> ...]` (a node takes `requirepass` live and
    /// accepts other parameters without acting on them; an empty password turns auth off) and
    /// `CONFIG GET requirepass`.
    fn config(&mut self, rest: &[Vec<u8>]) -> Reply {
        let Some((sub, args)) = rest.split_first() else {
            return arity("config");
        };
        match upper(sub).as_str() {
            "SET" => {
                if args.is_empty() || args.len() % 2 != 0 {
                    return arity("config|set");
                }
                for pair in args.chunks(2) {
                    if pair[0].eq_ignore_ascii_case(b"requirepass") {
                        let pass = String::from_utf8_lossy(&pair[1]).into_owned();
                        *self
                            .ctx
                            .requirepass
                            .lock()
                            .unwrap_or_else(|p| p.into_inner()) =
                            Some(pass).filter(|p| !p.is_empty());
                    }
                }
                Reply::ok()
            }
            "GET" => match args {
                [p] if p.eq_ignore_ascii_case(b"requirepass") => Reply::Array(vec![
                    Reply::bulk("requirepass"),
                    Reply::bulk(self.ctx.requirepass().unwrap_or_default()),
                ]),
                [_] => Reply::Array(Vec::new()),
                _ => arity("config|get"),
            },
            _ => Reply::err(format!(
                "ERR CONFIG subcommand '{}' not supported",
                shown(sub)
            )),
        }
    }

    fn auth(&mut self, rest: &[Vec<u8>]) -> Reply {
        let ok = match rest {
            [_] if self.ctx.requirepass().is_none() => {
                return Reply::err(
                    "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                );
            }
            [pass] => self.credentials_match(b"default", pass),
            [user, pass] => self.credentials_match(user, pass),
            _ => return arity("auth"),
        };
        if ok {
            self.authenticated = true;
            Reply::ok()
        } else {
            Reply::err(WRONGPASS)
        }
    }

    fn hello(&mut self, rest: &[Vec<u8>]) -> Reply {
        let mut proto = self.proto;
        let mut options = rest;
        if let Some((version, more)) = rest.split_first() {
            proto = match std::str::from_utf8(version)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
            {
                Some(2) => Protocol::Resp2,
                Some(3) => Protocol::Resp3,
                Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
                None => {
                    return Reply::err("ERR Protocol version is not an integer or out of range");
                }
            };
            options = more;
        }
        let mut auth = None;
        let mut name = None;
        while let Some((option, more)) = options.split_first() {
            match (upper(option).as_str(), more) {
                ("AUTH", [user, pass, after @ ..]) => {
                    auth = Some((user, pass));
                    options = after;
                }
                ("SETNAME", [n, after @ ..]) => {
                    name = Some(n.clone());
                    options = after;
                }
                _ => {
                    return Reply::err(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        shown(option)
                    ));
                }
            }
        }
        match auth {
            Some((user, pass)) if !self.credentials_match(user, pass) => {
                return Reply::err(WRONGPASS);
            }
            Some(_) => self.authenticated = true,
            None if !self.authenticated => return Reply::err(NOAUTH_HELLO),
            None => {}
        }
        self.proto = proto;
        if name.is_some() {
            self.name = name;
        }
        let field = |k: &str, v: Reply| (Reply::bulk(k), v);
        Reply::Map(vec![
            field("server", Reply::bulk("marekvs")),
            field("version", Reply::bulk(SERVER_VERSION)),
            field(
                "proto",
                Reply::Integer(if proto == Protocol::Resp3 { 3 } else { 2 }),
            ),
            field("id", Reply::Integer(self.id as i64)),
            // Any member serves any key, without redirections: to a client, a standalone server.
            field("mode", Reply::bulk("standalone")),
            field("role", Reply::bulk("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }

    fn client(&mut self, rest: &[Vec<u8>]) -> Reply {
        let Some((sub, args)) = rest.split_first() else {
            return arity("client");
        };
        match (upper(sub).as_str(), args) {
            ("SETNAME", [name]) => {
                self.name = Some(name.clone());
                Reply::ok()
            }
            ("SETINFO", [_, _]) => Reply::ok(),
            ("GETNAME", []) => self.name.clone().map_or(Reply::Null, Reply::Bulk),
            ("ID", []) => Reply::Integer(self.id as i64),
            ("SETNAME" | "SETINFO" | "GETNAME" | "ID", _) => Reply::err(format!(
                "ERR wrong number of arguments for 'client|{}' command",
                shown(sub).to_ascii_lowercase()
            )),
            _ => Reply::err(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                shown(sub)
            )),
        }
    }

    fn data(&mut self, name: &str, rest: &[Vec<u8>]) -> Step {
        let mut world = self.ctx.world.lock();
        let key = self.ctx.key.as_str();
        let reply = match (name, rest) {
            ("SET", [k, v]) => world.set(key, k, v).map(|()| Reply::ok()),
            ("SET", [_, _, ..]) => Ok(Reply::err(
                "ERR SET options are not supported by the simulator",
            )),
            ("GET", [k]) => world
                .get(key, k)
                .map(|v| v.map_or(Reply::Null, Reply::Bulk)),
            ("DEL", [_, ..]) => world.del(key, rest).map(count),
            ("EXISTS", [_, ..]) => world.exists(key, rest).map(count),
            ("DBSIZE", []) => world.dbsize(key).map(count),
            _ => Ok(arity(name)),
        };
        match reply {
            Ok(reply) => reply.into(),
            Err(e) => e.into(),
        }
    }

    fn cluster(&mut self, rest: &[Vec<u8>]) -> Step {
        let Some((sub, args)) = rest.split_first() else {
            return arity("cluster").into();
        };
        let mut world = self.ctx.world.lock();
        let key = self.ctx.key.as_str();
        let mut padding = None;
        let text = match (upper(sub).as_str(), args) {
            ("MYID", []) => world.myid(key),
            ("NODES", []) => {
                padding = world.faults(key).view_padding_bytes;
                world.cluster_nodes(key)
            }
            ("INFO", []) => world.cluster_info(key),
            ("MYID" | "NODES" | "INFO", _) => {
                return Reply::err(format!(
                    "ERR wrong number of arguments for 'cluster|{}' command",
                    shown(sub).to_ascii_lowercase()
                ))
                .into();
            }
            _ => {
                return Reply::err(format!(
                    "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
                    shown(sub)
                ))
                .into();
            }
        };
        // The world is shared by every member of every test: a padded view (MiBs) is built
        // after it is let go.
        drop(world);
        match text {
            Ok(mut text) => {
                if let Some(bytes) = padding {
                    crate::world::pad_with_blank_lines(&mut text, bytes as usize);
                }
                Reply::bulk(text).into()
            }
            Err(e) => e.into(),
        }
    }
}

fn count(n: u64) -> Reply {
    Reply::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

fn select(rest: &[Vec<u8>]) -> Reply {
    let [db] = rest else {
        return arity("select");
    };
    match std::str::from_utf8(db)
        .ok()
        .and_then(|d| d.parse::<i64>().ok())
    {
        Some(0) => Reply::ok(),
        Some(_) => Reply::err("ERR DB index is out of range"),
        None => Reply::err("ERR value is not an integer or out of range"),
    }
}

/// Clients ask for the command table to learn key positions; an empty one is valid.
fn command(rest: &[Vec<u8>]) -> Reply {
    match rest.first().map(|s| upper(s)) {
        Some(sub) if sub == "COUNT" => Reply::Integer(0),
        Some(sub) if sub == "DOCS" => Reply::Map(Vec::new()),
        _ => Reply::Array(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::model::{Faults, MemberSpec, NodePhase, Settings};
    use crate::resp::{encode_command, parse_reply};

    const WAIT: Duration = Duration::from_secs(5);

    struct Client {
        stream: TcpStream,
        buf: Vec<u8>,
    }

    impl Client {
        /// Connect, retrying while the port is not listening yet (within the wait).
        async fn connect(ip: Ipv4Addr) -> Client {
            let deadline = tokio::time::Instant::now() + WAIT;
            let stream = loop {
                match TcpStream::connect((ip, RESP_PORT)).await {
                    Ok(s) => break s,
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("cannot connect to {ip}: {e}"),
                }
            };
            Client {
                stream,
                buf: Vec::new(),
            }
        }

        async fn send(&mut self, args: &[&str]) {
            self.stream.write_all(&encode_command(args)).await.unwrap();
        }

        /// The next reply and its bytes on the wire, or `None` if none came within `wait`.
        async fn reply_within(&mut self, wait: Duration) -> Option<(Reply, Vec<u8>)> {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                match parse_reply(&self.buf) {
                    Parsed::Complete { value, consumed } => {
                        let wire = self.buf.drain(..consumed).collect();
                        return Some((value, wire));
                    }
                    Parsed::Error(e) => panic!("bad reply: {e}"),
                    Parsed::NeedMore => {}
                }
                let read = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf));
                match read.await {
                    Ok(Ok(0)) => panic!("connection closed while waiting for a reply"),
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => panic!("read failed: {e}"),
                    Err(_) => return None,
                }
            }
        }

        async fn reply(&mut self) -> (Reply, Vec<u8>) {
            self.reply_within(WAIT).await.expect("a reply")
        }

        async fn call(&mut self, args: &[&str]) -> Reply {
            self.send(args).await;
            self.reply().await.0
        }

        /// Whether the server closes the connection (within the wait) without answering more.
        async fn closed(&mut self) -> bool {
            let mut byte = [0u8; 1];
            matches!(
                tokio::time::timeout(WAIT, self.stream.read(&mut byte)).await,
                Ok(Ok(0) | Err(_))
            )
        }
    }

    fn error_starts_with(reply: &Reply, prefix: &str) -> bool {
        matches!(reply, Reply::Error(e) if e.starts_with(prefix))
    }

    fn bulk_text(reply: Reply) -> String {
        match reply {
            Reply::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("expected a bulk string, got {other:?}"),
        }
    }

    async fn start_cluster(world: &SharedWorld, ips: &[Ipv4Addr]) {
        for (i, ip) in ips.iter().enumerate() {
            world.lock().start_member(
                "ns/demo",
                MemberSpec {
                    key: format!("ns/demo-{i}"),
                    node_id: i.to_string(),
                    replicas_n: 2,
                    volume: format!("vol-{i}"),
                    disk_bytes: 1 << 30,
                    faults: Faults::default(),
                    addr: ip.to_string(),
                    version: crate::model::MODELLED_VERSION.into(),
                },
            );
        }
        let converged = || {
            let report = world.lock().report();
            report.clusters.iter().flat_map(|c| &c.members).all(|m| {
                m.view.len() == ips.len() && m.view.values().all(|p| *p == NodePhase::Active)
            })
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !converged() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "cluster never converged"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_speak_resp_over_tcp() {
        let settings = Settings {
            partitions: 256,
            ring_skip_fraction: 0.0,
            ..Settings::default()
        };
        let world = SharedWorld::new(settings, 7);
        let ticker = {
            let world = world.clone();
            tokio::spawn(async move {
                loop {
                    world.lock().tick();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let ips = [
            Ipv4Addr::new(127, 77, 0, 2),
            Ipv4Addr::new(127, 77, 0, 3),
            Ipv4Addr::new(127, 77, 0, 4),
        ];
        start_cluster(&world, &ips).await;
        let mut servers = Vec::new();
        for (i, ip) in ips.iter().enumerate() {
            let pass = (i == 2).then(|| "s3cret".to_string());
            let key = format!("ns/demo-{i}");
            servers.push(
                serve(world.clone(), key, IpAddr::V4(*ip), pass)
                    .await
                    .unwrap(),
            );
        }
        let mut c0 = Client::connect(ips[0]).await;
        let mut c1 = Client::connect(ips[1]).await;

        // Written through 0: visible there at once, through 1 only after the delay.
        assert_eq!(c0.call(&["SET", "greeting", "hello"]).await, Reply::ok());
        c1.send(&["GET", "greeting"]).await;
        assert_eq!(c1.reply().await.1, b"$-1\r\n");
        assert_eq!(c0.call(&["GET", "greeting"]).await, Reply::bulk("hello"));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(c1.call(&["GET", "greeting"]).await, Reply::bulk("hello"));

        password_before_anything(ips[2]).await;

        hello_3_switches_to_resp3(ips[2]).await;

        cluster_commands_describe_the_view(&mut c1, &ips).await;

        // A stranger in place of member 0 in 1's view: the same count, another id and address.
        let before = bulk_text(c1.call(&["CLUSTER", "NODES"]).await);
        world.lock().set_faults(
            "ns/demo-1",
            Faults {
                view_stranger_for: Some("0".into()),
                ..Faults::default()
            },
        );
        let swapped = bulk_text(c1.call(&["CLUSTER", "NODES"]).await);
        assert_eq!(swapped.lines().count(), 3, "{swapped}");
        assert!(
            !swapped.contains(&format!(" {}:6379@7946 ", ips[0])),
            "{swapped}"
        );
        assert!(
            swapped.contains(" 127.0.0.254:6379@7946 master "),
            "{swapped}"
        );
        let ids = |t: &str| -> Vec<String> {
            t.lines()
                .map(|l| l.split(' ').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            ids(&before)
                .iter()
                .filter(|i| ids(&swapped).contains(i))
                .count(),
            2,
            "one id replaced:\n{before}\n{swapped}"
        );
        world.lock().set_faults("ns/demo-1", Faults::default());
        assert_eq!(bulk_text(c1.call(&["CLUSTER", "NODES"]).await), before);

        pipelined_answers_come_in_order(&mut c0).await;

        // Hung: no answer until the fault is cleared.
        let hang = Faults {
            hang: true,
            ..Faults::default()
        };
        world.lock().set_faults("ns/demo-0", hang);
        c0.send(&["PING"]).await;
        assert!(c0.reply_within(Duration::from_millis(400)).await.is_none());
        world.lock().set_faults("ns/demo-0", Faults::default());
        assert_eq!(c0.reply().await.0, Reply::Simple("PONG".into()));

        // A member that is not running closes its connections.
        world.lock().kill("ns/demo-1");
        c1.send(&["PING"]).await;
        assert!(c1.closed().await);

        // Dropping the servers closes their connections and frees the port.
        drop(servers);
        assert!(c0.closed().await);
        let deadline = tokio::time::Instant::now() + WAIT;
        let rebound = loop {
            match TcpListener::bind((ips[0], RESP_PORT)).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "port still taken: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        drop(rebound);
        ticker.abort();
    }

    /// The port listens only once the member is Active; a connection then outlives a drain
    /// and closes only when the process exits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_port_refuses_connections_until_the_member_is_active() {
        let world = SharedWorld::new(
            Settings {
                partitions: 64,
                ..Settings::default()
            },
            3,
        );
        let ticker = {
            let world = world.clone();
            tokio::spawn(async move {
                loop {
                    world.lock().tick();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let ip = Ipv4Addr::new(127, 77, 1, 2);
        let key = "ns/demo-0".to_string();
        world.lock().start_member(
            "ns/demo",
            MemberSpec {
                key: key.clone(),
                node_id: "0".into(),
                replicas_n: 1,
                volume: "vol-0".into(),
                disk_bytes: 1 << 30,
                faults: Faults {
                    hold_join: true,
                    ..Faults::default()
                },
                addr: ip.to_string(),
                version: crate::model::MODELLED_VERSION.into(),
            },
        );
        let server = serve(world.clone(), key.clone(), IpAddr::V4(ip), None)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let refused = TcpStream::connect((ip, RESP_PORT)).await;
        assert_eq!(
            refused.map(|_| ()).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::ConnectionRefused),
            "Joining: not listening"
        );
        world.lock().set_faults(&key, Faults::default());
        let mut c = Client::connect(ip).await;
        assert_eq!(c.call(&["PING"]).await, Reply::Simple("PONG".into()));
        assert!(world.lock().drain(&key));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            c.call(&["PING"]).await,
            Reply::Simple("PONG".into()),
            "drained"
        );
        world.lock().terminate(&key);
        assert!(c.closed().await, "closed by the exit");
        drop(server);
        ticker.abort();
    }

    async fn password_before_anything(ip: Ipv4Addr) {
        // A password: nothing but AUTH until it is given.
        let mut c2 = Client::connect(ip).await;
        assert!(error_starts_with(
            &c2.call(&["PING"]).await,
            "NOAUTH Authentication required."
        ));
        assert!(error_starts_with(
            &c2.call(&["GET", "greeting"]).await,
            "NOAUTH"
        ));
        assert!(error_starts_with(&c2.call(&["HELLO", "3"]).await, "NOAUTH"));
        assert!(error_starts_with(
            &c2.call(&["AUTH", "wrong"]).await,
            "WRONGPASS"
        ));
        assert_eq!(c2.call(&["AUTH", "default", "s3cret"]).await, Reply::ok());
        assert_eq!(c2.call(&["GET", "greeting"]).await, Reply::bulk("hello"));
    }

    async fn hello_3_switches_to_resp3(ip: Ipv4Addr) {
        // HELLO 3 with AUTH: RESP3 from then on, so a missing key is the RESP3 null.
        let mut c3 = Client::connect(ip).await;
        let hello = c3.call(&["HELLO", "3", "AUTH", "default", "s3cret"]).await;
        let Reply::Map(fields) = hello else {
            panic!("HELLO 3 answers a map, got {hello:?}");
        };
        assert!(fields.contains(&(Reply::bulk("proto"), Reply::Integer(3))));
        c3.send(&["GET", "missing"]).await;
        assert_eq!(c3.reply().await.1, b"_\r\n");
        assert_eq!(c3.call(&["QUIT"]).await, Reply::ok());
        assert!(c3.closed().await);
    }

    async fn cluster_commands_describe_the_view(c1: &mut Client, ips: &[Ipv4Addr]) {
        // CLUSTER NODES: one line per member of 1's view, with its address.
        let nodes = bulk_text(c1.call(&["CLUSTER", "NODES"]).await);
        let lines: Vec<&str> = nodes.lines().collect();
        assert_eq!(lines.len(), 3, "{nodes}");
        for ip in ips {
            assert!(
                nodes.contains(&format!(" {ip}:6379@7946 ")),
                "{ip} missing: {nodes}"
            );
        }
        let mine: Vec<&&str> = lines.iter().filter(|l| l.contains("myself")).collect();
        assert_eq!(mine.len(), 1);
        assert!(mine[0].contains(&format!(" {}:6379@7946 myself,master ", ips[1])));
        let myid = bulk_text(c1.call(&["CLUSTER", "MYID"]).await);
        assert_eq!(myid.len(), 40);
        assert!(mine[0].starts_with(&format!("{myid} ")));
        let info = bulk_text(c1.call(&["CLUSTER", "INFO"]).await);
        assert!(
            info.contains("cluster_state:ok\r\ncluster_known_nodes:3\r\n"),
            "{info}"
        );
    }

    async fn pipelined_answers_come_in_order(c0: &mut Client) {
        // Pipelined: one write, the answers in order.
        let mut pipeline = Vec::new();
        for cmd in [
            &["SET", "p", "1"][..],
            &["GET", "p"],
            &["SELECT", "0"],
            &["ECHO", "x"],
            &["DEL", "p", "nope"],
            &["GET", "p"],
            &["EXISTS", "p"],
            &["FOO", "bar"],
        ] {
            pipeline.extend(encode_command(cmd));
        }
        pipeline.extend_from_slice(b"PING\r\n");
        c0.stream.write_all(&pipeline).await.unwrap();
        let mut answers = Vec::new();
        for _ in 0..9 {
            answers.push(c0.reply().await.0);
        }
        assert_eq!(
            answers,
            [
                Reply::ok(),
                Reply::bulk("1"),
                Reply::ok(),
                Reply::bulk("x"),
                Reply::Integer(1),
                Reply::Null,
                Reply::Integer(0),
                Reply::err("ERR unknown command 'FOO'"),
                Reply::Simple("PONG".into()),
            ]
        );
    }

    fn session(requirepass: Option<&str>) -> Session {
        let (ctx, boot) = member_ctx(requirepass);
        Session::new(ctx, 42, boot)
    }

    fn member_ctx(requirepass: Option<&str>) -> (Arc<Ctx>, u64) {
        let world = SharedWorld::new(Settings::default(), 1);
        world.lock().start_member(
            "ns/demo",
            MemberSpec {
                key: "ns/demo-0".into(),
                node_id: "0".into(),
                replicas_n: 1,
                volume: "vol-0".into(),
                disk_bytes: 1 << 30,
                faults: Faults::default(),
                addr: "127.52.0.1".into(),
                version: crate::model::MODELLED_VERSION.into(),
            },
        );
        let boot = world.lock().boot_of("ns/demo-0").unwrap();
        let ctx = Arc::new(Ctx {
            world,
            key: "ns/demo-0".into(),
            requirepass: std::sync::Mutex::new(requirepass.map(String::from)),
        });
        (ctx, boot)
    }

    /// As on a real node: the new password is wanted from the next `AUTH` on, the old one is
    /// refused, and a connection that authenticated before the change stays authenticated.
    #[test]
    fn config_set_requirepass_changes_the_password_live() {
        let (ctx, boot) = member_ctx(Some("old"));
        let mut before = Session::new(ctx.clone(), 1, boot);
        assert_eq!(run(&mut before, &["AUTH", "old"]), Some(Reply::ok()));
        assert_eq!(
            run(&mut before, &["CONFIG", "SET", "requirepass", "new"]),
            Some(Reply::ok())
        );
        assert_eq!(run(&mut before, &["GET", "k"]), Some(Reply::Null));
        let mut after = Session::new(ctx.clone(), 2, boot);
        assert!(!after.authenticated);
        let refused = run(&mut after, &["AUTH", "old"]).unwrap();
        assert!(error_starts_with(&refused, "WRONGPASS"), "{refused:?}");
        assert_eq!(run(&mut after, &["AUTH", "new"]), Some(Reply::ok()));
        assert_eq!(
            run(&mut after, &["CONFIG", "GET", "requirepass"]),
            Some(Reply::Array(vec![
                Reply::bulk("requirepass"),
                Reply::bulk("new")
            ]))
        );
        // Pairs only; other parameters are accepted and change nothing.
        let odd = run(&mut after, &["CONFIG", "SET", "requirepass"]).unwrap();
        assert!(
            error_starts_with(&odd, "ERR wrong number of arguments"),
            "{odd:?}"
        );
        assert_eq!(
            run(&mut after, &["CONFIG", "SET", "loglevel", "debug"]),
            Some(Reply::ok())
        );
        // An empty password turns auth off.
        assert_eq!(
            run(&mut after, &["CONFIG", "SET", "requirepass", ""]),
            Some(Reply::ok())
        );
        assert!(Session::new(ctx, 3, boot).authenticated);
    }

    fn run(session: &mut Session, args: &[&str]) -> Option<Reply> {
        let args: Command = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let step = session.execute(&args);
        assert!(!step.close || args[0].eq_ignore_ascii_case(b"QUIT") || step.reply.is_none());
        step.reply
    }

    #[test]
    fn commands_answer_as_redis_does() {
        let mut s = session(None);
        let answers = |s: &mut Session, cmds: &[&[&str]]| -> Vec<Reply> {
            cmds.iter().map(|c| run(s, c).expect("an answer")).collect()
        };
        assert_eq!(
            answers(
                &mut s,
                &[
                    &["ping", "hi"],
                    &["GET"],
                    &["SET", "k", "v", "EX", "10"],
                    &["SELECT", "1"],
                    &["SELECT", "x"],
                    &["HELLO", "4"],
                    &["CLIENT", "SETNAME", "app"],
                    &["CLIENT", "GETNAME"],
                    &["CLIENT", "ID"],
                    &["CLIENT", "KILL"],
                    &["COMMAND", "COUNT"],
                    &["COMMAND"],
                    &["CLUSTER", "SLOTS"],
                    &["DBSIZE"],
                    &["SET", "k", "v"],
                    &["DBSIZE"],
                ]
            ),
            [
                Reply::bulk("hi"),
                Reply::err("ERR wrong number of arguments for 'get' command"),
                Reply::err("ERR SET options are not supported by the simulator"),
                Reply::err("ERR DB index is out of range"),
                Reply::err("ERR value is not an integer or out of range"),
                Reply::err("NOPROTO unsupported protocol version"),
                Reply::ok(),
                Reply::bulk("app"),
                Reply::Integer(42),
                Reply::err("ERR unknown subcommand 'KILL'. Try CLIENT HELP."),
                Reply::Integer(0),
                Reply::Array(Vec::new()),
                Reply::err("ERR unknown subcommand 'SLOTS'. Try CLUSTER HELP."),
                Reply::Integer(0),
                Reply::ok(),
                Reply::Integer(1),
            ]
        );
        assert!(
            matches!(run(&mut s, &["AUTH", "x"]), Some(Reply::Error(e)) if e.starts_with("ERR AUTH <password> called without"))
        );
        assert_eq!(
            run(&mut s, &["AUTH", "default", "anything"]),
            Some(Reply::ok())
        );
        assert_eq!(s.proto, Protocol::Resp2);
        assert!(matches!(
            run(&mut s, &["HELLO", "3", "SETNAME", "n"]),
            Some(Reply::Map(_))
        ));
        assert_eq!(
            (s.proto, s.name.as_deref()),
            (Protocol::Resp3, Some(&b"n"[..]))
        );
    }

    #[test]
    fn a_wrong_password_leaves_the_connection_as_it_was() {
        let mut s = session(Some("pw"));
        assert_eq!(
            run(&mut s, &["HELLO", "3", "AUTH", "default", "nope"]),
            Some(Reply::err(WRONGPASS))
        );
        assert_eq!((s.proto, s.authenticated), (Protocol::Resp2, false));
        assert_eq!(
            run(&mut s, &["AUTH", "someone", "pw"]),
            Some(Reply::err(WRONGPASS))
        );
        assert_eq!(run(&mut s, &["DBSIZE"]), Some(Reply::err(NOAUTH)));
        assert_eq!(run(&mut s, &["AUTH", "pw"]), Some(Reply::ok()));
        assert_eq!(run(&mut s, &["DBSIZE"]), Some(Reply::Integer(0)));
    }

    #[test]
    fn a_member_that_is_not_running_closes_without_answering() {
        let mut s = session(None);
        s.ctx.world.lock().kill("ns/demo-0");
        let step = s.execute(&vec![b"PING".to_vec()]);
        assert!(step.reply.is_none() && step.close);
    }
}
