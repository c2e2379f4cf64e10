//! A member's membership view by identity, over RESP on port 6379 straight at its pod IP:
//! `AUTH <password>` when the cluster has one (`spec.auth`, or `env`
//! `MAREKVS_REQUIREPASS` from a Secret), then `CLUSTER MYID` and `CLUSTER
//! NODES`, pipelined on one connection under one short timeout (the scrape's). Anything but a
//! clean answer (refused, timed out, `AUTH` refused, an error reply, a line that does not
//! parse, its own id missing from its view) is unknown: `None`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use marekvs_api::MarekvsCluster;
use marekvs_core::View;
use marekvs_core::password::{PasswordRecord, PasswordTaken};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tracing::{debug, warn};

use crate::budget::{Buffer, ByteBudget};

/// The RESP port of a member.
pub const PORT_RESP: u16 = 6379;
pub use crate::budget::{MAX_VIEW_BYTES, MIN_READ_BUDGET_BYTES};
/// `CLUSTER MYID` is a 40-hex id; a longer reply is not a node answering.
const MAX_ID_BYTES: usize = 64;
/// A status or length line of a reply (`+OK`, `$123`, an error) is short; a longer one is not
/// a node answering.
const MAX_REPLY_LINE_BYTES: u64 = 4 << 10;

/// The password members want on their RESP port. Its `Debug` never shows the password: a
/// `{:?}` in a log line or a panic message must not leak it.
#[derive(Clone, PartialEq, Eq)]
pub enum Password {
    /// The cluster has no password (no `spec.auth`, no `MAREKVS_REQUIREPASS` in `env`).
    None,
    Known(String),
    /// A password is set but its Secret or key could not be read: every view is unknown.
    Unreadable,
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Password::None => f.write_str("None"),
            Password::Known(_) => f.write_str("Known(<redacted>)"),
            Password::Unreadable => f.write_str("Unreadable"),
        }
    }
}

/// What the operator recorded of its members' passwords, in the cluster's own Secret
/// `<cluster>-password-applied`: the one every running member last took, and the values it
/// has begun to set since (newest first). Its `Debug` shows none of them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    pub settled: Option<String>,
    pub since: Vec<String>,
}

impl std::fmt::Debug for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Recorded {{ settled: {}, since: {} values }}",
            if self.settled.is_some() {
                "<redacted>"
            } else {
                "None"
            },
            self.since.len()
        )
    }
}

/// The passwords to try on a member: the Secret's, then, where it is refused, the recorded
/// ones (a rotation under way). Its `Debug` shows none of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub secret: Password,
    /// `None`: the record could not be read (nothing is decided on the password then).
    pub recorded: Option<Recorded>,
}

impl Credentials {
    /// No password at all.
    pub fn none() -> Self {
        Credentials {
            secret: Password::None,
            recorded: Some(Recorded::default()),
        }
    }

    /// The recorded passwords other than the Secret's, in the order to try them: the newest
    /// set first, the settled one last; each once.
    pub fn fallbacks(&self) -> Vec<&str> {
        let Password::Known(secret) = &self.secret else {
            return Vec::new();
        };
        let Some(r) = &self.recorded else {
            return Vec::new();
        };
        let mut out: Vec<&str> = Vec::new();
        for p in r.since.iter().chain(&r.settled) {
            if p != secret && !out.contains(&p.as_str()) {
                out.push(p);
            }
        }
        out
    }

    /// Where the record stands against the Secret's password.
    pub fn record(&self) -> PasswordRecord {
        let (Password::Known(secret), Some(r)) = (&self.secret, &self.recorded) else {
            return PasswordRecord::NoPassword;
        };
        match &r.settled {
            None if r.since.is_empty() => PasswordRecord::Missing,
            Some(s) if s == secret && r.since.is_empty() => PasswordRecord::Current,
            _ => PasswordRecord::Older {
                listed: r.since.contains(secret) || r.settled.as_ref() == Some(secret),
            },
        }
    }
}

/// How long a password read from its Secret is used before the Secret is read again. A pass
/// runs every second or two while a gate waits; a GET of the Secret on each one is load on the
/// API server for nothing. So a rotation starts at most this long after the Secret changed.
pub const PASSWORD_REUSE: Duration = Duration::from_secs(30);
/// How long an unreadable password (Secret or key missing, GET failed) is remembered: a user
/// who creates the Secret after the cluster waits no longer than this.
pub const UNREADABLE_REUSE: Duration = Duration::from_secs(5);

/// Where a cluster's password is: namespace, Secret, key.
type SecretKey = (String, String, String);

/// The passwords read, per Secret key, with when they were read.
#[derive(Default)]
pub struct Passwords {
    read: std::sync::Mutex<std::collections::HashMap<SecretKey, (Password, tokio::time::Instant)>>,
    /// The recorded passwords per cluster (`None`: unreadable).
    records: std::sync::Mutex<
        std::collections::HashMap<SecretKey, (Option<Recorded>, tokio::time::Instant)>,
    >,
}

impl Passwords {
    /// `cr`'s passwords: the Secret's and the recorded one, each as read within its reuse
    /// span, else read now.
    pub async fn get(&self, client: &kube::Client, cr: &MarekvsCluster) -> Credentials {
        let Some(r) = cr.spec.password_secret_ref() else {
            return Credentials::none();
        };
        let ns = cr.namespace().unwrap_or_default();
        let key = (ns.clone(), r.name, r.key);
        let secret = match self.reusable(&key, tokio::time::Instant::now()) {
            Some(p) => p,
            None => {
                let p = password(client, cr).await;
                self.remember(key, p.clone(), tokio::time::Instant::now());
                p
            }
        };
        let key = recorded_key(cr);
        let recorded = match self.reusable_record(&key, tokio::time::Instant::now()) {
            Some(r) => r,
            None => {
                let r = read_recorded(client, cr).await;
                self.remember_record(key, r.clone(), tokio::time::Instant::now());
                r
            }
        };
        Credentials { secret, recorded }
    }

    /// The record, once written: used from the next pass on.
    pub fn recorded(&self, cr: &MarekvsCluster, record: Recorded) {
        self.remember_record(recorded_key(cr), Some(record), tokio::time::Instant::now());
    }

    fn reusable_record(
        &self,
        key: &SecretKey,
        now: tokio::time::Instant,
    ) -> Option<Option<Recorded>> {
        let read = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let (r, at) = read.get(key)?;
        let span = if r.is_some() {
            PASSWORD_REUSE
        } else {
            UNREADABLE_REUSE
        };
        (now.duration_since(*at) < span).then(|| r.clone())
    }

    fn remember_record(&self, key: SecretKey, r: Option<Recorded>, now: tokio::time::Instant) {
        let mut read = self.records.lock().unwrap_or_else(|p| p.into_inner());
        read.retain(|_, (_, at)| now.duration_since(*at) < PASSWORD_REUSE);
        read.insert(key, (r, now));
    }

    fn reusable(&self, key: &SecretKey, now: tokio::time::Instant) -> Option<Password> {
        let read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        let (p, at) = read.get(key)?;
        (now.duration_since(*at) < reuse_span(p)).then(|| p.clone())
    }

    fn remember(&self, key: SecretKey, p: Password, now: tokio::time::Instant) {
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        // Entries past their span go, so a deleted cluster's password is not kept.
        read.retain(|_, (p, at)| now.duration_since(*at) < reuse_span(p));
        read.insert(key, (p, now));
    }
}

// The recorded passwords: the cluster's own Secret `<cluster>-password-applied` (written by
// `password.rs`).

/// The key of the settled password in `<cluster>-password-applied`.
pub const APPLIED_KEY: &str = "password";
/// The prefix of the keys of the values set since.
pub const SINCE_PREFIX: &str = "since-";

/// The cluster's own Secret holding the password its members last all took.
pub fn applied_secret_name(cluster: &str) -> String {
    format!("{cluster}-password-applied")
}

/// The recorded passwords, only from the Secret the cluster owns (a Secret of that name that
/// is not the cluster's is never trusted, nor overwritten); empty when there is none yet;
/// `None` when it cannot be read.
pub async fn read_recorded(client: &kube::Client, cr: &MarekvsCluster) -> Option<Recorded> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cr.namespace().unwrap_or_default());
    match secrets.get_opt(&applied_secret_name(&cr.name_any())).await {
        Ok(Some(s)) if owned_by(&s, cr) => Some(recorded_in(&s)),
        Ok(Some(_)) => {
            warn!(
                secret = applied_secret_name(&cr.name_any()),
                "a Secret with the name of the cluster's recorded password is not the cluster's: ignored"
            );
            None
        }
        Ok(None) => Some(Recorded::default()),
        Err(e) => {
            warn!("reading the recorded password failed: {e}");
            None
        }
    }
}

pub fn recorded_in(s: &Secret) -> Recorded {
    let text = |v: &ByteString| String::from_utf8_lossy(&v.0).into_owned();
    let data = s.data.clone().unwrap_or_default();
    let mut since: Vec<(usize, String)> = data
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(SINCE_PREFIX)?.parse().ok()?, text(v))))
        .collect();
    since.sort();
    Recorded {
        settled: data.get(APPLIED_KEY).map(text),
        since: since.into_iter().map(|(_, v)| v).collect(),
    }
}

pub fn owned_by(s: &Secret, cr: &MarekvsCluster) -> bool {
    let uid = cr.uid();
    s.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

fn recorded_key(cr: &MarekvsCluster) -> SecretKey {
    (
        cr.namespace().unwrap_or_default(),
        applied_secret_name(&cr.name_any()),
        APPLIED_KEY.to_string(),
    )
}

fn reuse_span(p: &Password) -> Duration {
    match p {
        Password::Unreadable => UNREADABLE_REUSE,
        Password::None | Password::Known(_) => PASSWORD_REUSE,
    }
}

/// Reads the password's Secret key (`MarekvsClusterSpec::password_secret_ref`; one GET of one
/// Secret, in the cluster's namespace). [`Passwords::get`] reuses what it read.
pub async fn password(client: &kube::Client, cr: &MarekvsCluster) -> Password {
    let Some(r) = cr.spec.password_secret_ref() else {
        return Password::None;
    };
    let ns = cr.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    match secrets.get(&r.name).await {
        Ok(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Password::Known(String::from_utf8_lossy(&v.0).into_owned()),
            None => {
                warn!(
                    ns,
                    secret = r.name,
                    key = r.key,
                    "the password key is missing"
                );
                Password::Unreadable
            }
        },
        Err(e) => {
            warn!(ns, secret = r.name, "reading the password failed: {e}");
            Password::Unreadable
        }
    }
}

/// One member's view, read at `ip` in one of the member client's shared slots (like a scrape),
/// with the Secret's password, or, where that is refused, the recorded one (a rotation under
/// way): which one it took comes back with it.
pub async fn read_one(
    client: &crate::scrape::MemberClient,
    ip: &str,
    credentials: &Credentials,
) -> ViewRead {
    let first = match &credentials.secret {
        Password::None => None,
        Password::Known(p) => Some(p.as_str()),
        Password::Unreadable => return ViewRead::none(),
    };
    let read = |pass: Option<&str>| {
        let pass = pass.map(str::to_string);
        async move {
            client
                .bounded(
                    ip,
                    read_view(ip, pass.as_deref(), client.timeout(), client.budget()),
                )
                .await
                .unwrap_or_else(ViewRead::none)
        }
    };
    let mut r = read(first).await;
    r.taken = match r.auth {
        AuthAnswer::Accepted => PasswordTaken::Secret,
        AuthAnswer::NotAsked | AuthAnswer::NoAnswer => PasswordTaken::Unknown,
        AuthAnswer::Refused => {
            // The recorded ones, in turn, until one is taken or one gets no answer.
            let mut sent = r.sent;
            for (i, p) in credentials.fallbacks().into_iter().enumerate() {
                let next = read(Some(p)).await;
                sent = sent.zip(next.sent).map(|(a, b)| a + b);
                match next.auth {
                    AuthAnswer::Refused => continue,
                    AuthAnswer::Accepted => {
                        return ViewRead {
                            sent,
                            taken: PasswordTaken::Recorded,
                            fallback: Some(i),
                            ..next
                        };
                    }
                    AuthAnswer::NotAsked | AuthAnswer::NoAnswer => {
                        return ViewRead { sent, ..next };
                    }
                }
            }
            r.sent = sent;
            r.view = None;
            PasswordTaken::Neither
        }
    };
    r
}

/// What a member answered to `AUTH`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthAnswer {
    /// No password was sent.
    #[default]
    NotAsked,
    /// No answer to it (refused connection, timeout, cut short).
    NoAnswer,
    Accepted,
    /// An error reply (`WRONGPASS`, or a node with no password set).
    Refused,
}

/// One member's view read: the view (`None`: unknown) and how many bytes the operator sent to
/// its RESP port (`None`: unknown, the read was cut off after bytes may have gone).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ViewRead {
    pub view: Option<View>,
    pub sent: Option<u64>,
    /// What the member answered to the last `AUTH` of the read.
    pub auth: AuthAnswer,
    /// Which password it took (`read_one` sets it).
    pub taken: PasswordTaken,
    /// Which of `Credentials::fallbacks` it took, when it took a recorded one.
    pub fallback: Option<usize>,
}

impl ViewRead {
    /// No read was made: nothing sent.
    pub fn none() -> Self {
        ViewRead {
            view: None,
            sent: Some(0),
            auth: AuthAnswer::NotAsked,
            taken: PasswordTaken::Unknown,
            fallback: None,
        }
    }
}

/// One member's view, or `None` (unknown), with the bytes sent: counted only once every reply
/// came back, since only then has the node read them all (it counts its input as it reads).
pub async fn read_view(
    ip: &str,
    password: Option<&str>,
    timeout: Duration,
    budget: &ByteBudget,
) -> ViewRead {
    let mut sent = Some(0);
    let mut auth = if password.is_some() {
        AuthAnswer::NoAnswer
    } else {
        AuthAnswer::NotAsked
    };
    let view = match tokio::time::timeout(
        timeout,
        exchange(ip, password, budget, &mut sent, &mut auth),
    )
    .await
    {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            debug!(ip, "view not read: {e}");
            None
        }
        Err(_) => {
            debug!(ip, "view not read: timed out");
            sent = None;
            None
        }
    };
    ViewRead {
        view,
        sent,
        auth,
        taken: PasswordTaken::Unknown,
        fallback: None,
    }
}

fn command(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// `sent` becomes unknown once the request is on its way, and the request's length once every
/// reply has been read.
async fn exchange(
    ip: &str,
    password: Option<&str>,
    budget: &ByteBudget,
    sent: &mut Option<u64>,
    auth_answer: &mut AuthAnswer,
) -> Result<View, String> {
    let mut stream = connect(ip).await?;
    let mut req = Vec::new();
    if let Some(p) = password {
        command(&mut req, &["AUTH", p]);
    }
    command(&mut req, &["CLUSTER", "MYID"]);
    command(&mut req, &["CLUSTER", "NODES"]);
    *sent = None;
    stream
        .write_all(&req)
        .await
        .map_err(|e| format!("write: {e}"))?;
    // The whole answer: one view at most, with the short replies before it.
    let mut r = BufReader::new(stream.take(MAX_VIEW_BYTES + (64 << 10)));
    let auth = match password {
        Some(_) => Some(line(&mut r).await?),
        None => None,
    };
    if let Some(a) = &auth {
        *auth_answer = auth_answer_of(a);
    }
    let id = bulk(&mut r, &ByteBudget::new(MAX_ID_BYTES + 2)).await;
    let nodes = bulk(&mut r, budget).await?;
    *sent = Some(req.len() as u64);
    if let Some(auth) = auth.filter(|a| a != "+OK") {
        return Err(format!("AUTH refused: {auth}"));
    }
    let id = id?;
    parse_view(utf8(&id)?.trim(), utf8(&nodes)?)
}

async fn connect(ip: &str) -> Result<tokio::net::TcpStream, String> {
    let addr = if ip.contains(':') {
        format!("[{ip}]:{PORT_RESP}")
    } else {
        format!("{ip}:{PORT_RESP}")
    };
    tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// One member's own id read alone, with the bytes sent (as [`ViewRead`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdRead {
    /// Its `CLUSTER MYID`, lower case (`None`: unknown).
    pub id: Option<String>,
    pub sent: Option<u64>,
}

/// A member's own id (`CLUSTER MYID`, after `AUTH` when the cluster has a password: the
/// Secret's, or the recorded one where that is refused), read just before the operator drains
/// it: the address must still answer as the member the drain is for.
pub async fn read_id(ip: &str, credentials: &Credentials, timeout: Duration) -> IdRead {
    let first = match &credentials.secret {
        Password::None => None,
        Password::Known(p) => Some(p.as_str()),
        Password::Unreadable => {
            return IdRead {
                id: None,
                sent: Some(0),
            };
        }
    };
    let (mut read, mut auth) = read_id_with(ip, first, timeout).await;
    for p in credentials.fallbacks() {
        if auth != AuthAnswer::Refused {
            break;
        }
        let (next, next_auth) = read_id_with(ip, Some(p), timeout).await;
        read = IdRead {
            id: next.id,
            sent: read.sent.zip(next.sent).map(|(a, b)| a + b),
        };
        auth = next_auth;
    }
    read
}

async fn read_id_with(ip: &str, pass: Option<&str>, timeout: Duration) -> (IdRead, AuthAnswer) {
    let mut sent = Some(0);
    let mut auth = AuthAnswer::NoAnswer;
    let id = match tokio::time::timeout(timeout, ask_id(ip, pass, &mut sent, &mut auth)).await {
        Ok(Ok(id)) => Some(id),
        Ok(Err(e)) => {
            debug!(ip, "id not read: {e}");
            None
        }
        Err(_) => {
            debug!(ip, "id not read: timed out");
            sent = None;
            None
        }
    };
    (IdRead { id, sent }, auth)
}

async fn ask_id(
    ip: &str,
    password: Option<&str>,
    sent: &mut Option<u64>,
    auth_answer: &mut AuthAnswer,
) -> Result<String, String> {
    let mut stream = connect(ip).await?;
    let mut req = Vec::new();
    if let Some(p) = password {
        command(&mut req, &["AUTH", p]);
    }
    command(&mut req, &["CLUSTER", "MYID"]);
    *sent = None;
    stream
        .write_all(&req)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut r = BufReader::new(stream.take(64 << 10));
    let auth = match password {
        Some(_) => Some(line(&mut r).await?),
        None => None,
    };
    if let Some(a) = &auth {
        *auth_answer = auth_answer_of(a);
    }
    let id = bulk(&mut r, &ByteBudget::new(MAX_ID_BYTES + 2)).await?;
    *sent = Some(req.len() as u64);
    if let Some(auth) = auth.filter(|a| a != "+OK") {
        return Err(format!("AUTH refused: {}", shown(&auth)));
    }
    Ok(node_id(utf8(&id)?.trim())?.to_ascii_lowercase())
}

fn auth_answer_of(reply: &str) -> AuthAnswer {
    if reply == "+OK" {
        AuthAnswer::Accepted
    } else {
        AuthAnswer::Refused
    }
}

/// Sets `new` as the password of the member at `ip`, live (`AUTH` with `old`, then `CONFIG
/// SET requirepass`): both must answer `+OK`. The bytes sent are counted as a read's are.
pub async fn set_password(ip: &str, old: &str, new: &str, timeout: Duration) -> PasswordSet {
    let mut sent = Some(0);
    let result = match tokio::time::timeout(timeout, config_set(ip, old, new, &mut sent)).await {
        Ok(r) => r,
        Err(_) => {
            sent = None;
            Err("timed out".into())
        }
    };
    PasswordSet { result, sent }
}

/// What `set_password` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordSet {
    pub result: Result<(), String>,
    pub sent: Option<u64>,
}

async fn config_set(ip: &str, old: &str, new: &str, sent: &mut Option<u64>) -> Result<(), String> {
    let mut stream = connect(ip).await?;
    let mut req = Vec::new();
    command(&mut req, &["AUTH", old]);
    command(&mut req, &["CONFIG", "SET", "requirepass", new]);
    *sent = None;
    stream
        .write_all(&req)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut r = BufReader::new(stream.take(64 << 10));
    let auth = line(&mut r).await?;
    let set = line(&mut r).await?;
    *sent = Some(req.len() as u64);
    if auth != "+OK" {
        return Err(format!("AUTH refused: {}", shown(&auth)));
    }
    if set != "+OK" {
        return Err(format!("CONFIG SET refused: {}", shown(&set)));
    }
    Ok(())
}

fn utf8(b: &Buffer) -> Result<&str, String> {
    std::str::from_utf8(b.as_slice()).map_err(|_| "reply not UTF-8".into())
}

/// One reply line, without its CRLF.
async fn line<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Result<String, String> {
    let mut buf = Vec::new();
    (&mut *r)
        .take(MAX_REPLY_LINE_BYTES)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(|e| format!("read: {e}"))?;
    if !buf.ends_with(b"\r\n") {
        return Err("reply cut short".into());
    }
    buf.truncate(buf.len() - 2);
    String::from_utf8(buf).map_err(|_| "reply not UTF-8".into())
}

/// A bulk string reply, read into a buffer of the announced length, paid from `budget` before
/// it is allocated (the id's reply has a small budget of its own: paying for it from the
/// shared one while holding the view's buffer could make reads wait on one another); an error
/// reply, a reply longer than the budget or anything else is an error.
async fn bulk<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    budget: &ByteBudget,
) -> Result<Buffer, String> {
    let head = line(r).await?;
    let Some(n) = head.strip_prefix('$') else {
        return Err(format!("not a bulk string: {}", shown(&head)));
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("bad length: {}", shown(&head)))?;
    let whole = n.saturating_add(2);
    if n > MAX_VIEW_BYTES || whole > budget.total() as u64 {
        return Err(format!("reply of {n} bytes refused"));
    }
    let whole = whole as usize;
    let mut body = budget.buffer(whole).await;
    while body.len() < whole {
        let came = r.fill_buf().await.map_err(|e| format!("read: {e}"))?;
        if came.is_empty() {
            return Err("reply cut short".into());
        }
        let take = came.len().min(whole - body.len());
        body.extend(&came[..take])
            .map_err(|_| "reply past its length".to_string())?;
        r.consume(take);
    }
    if !body.as_slice().ends_with(b"\r\n") {
        return Err("bulk string without its CRLF".into());
    }
    body.truncate(n as usize);
    Ok(body)
}

/// At most the first 64 characters of member text, for an error message (which a log shows).
fn shown(text: &str) -> String {
    text.chars().take(64).collect()
}

fn node_id(s: &str) -> Result<&str, String> {
    if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s)
    } else {
        Err(format!("not a 40-hex node id: {:?}", shown(s)))
    }
}

/// `CLUSTER MYID` and `CLUSTER NODES` (one line per member of its view: `<id> <ip:port@cport>
/// <flags> ...`) as a view; its own id must be in it, each id once.
/// The most members a view may list: a cluster has at most 1,000 members (the CRD's bound), and
/// a view can lag a few behind. More is not a node answering, and the view is unknown.
pub const MAX_VIEW_PEERS: usize = 1_100;

/// A peer's address as a node gives it, `<ip>:<port>` (IPv6 with or without brackets, or
/// `<host>:<port>`):
/// anything else is not a node answering. It can reach status messages (a stranger's
/// address), so it is checked here, never passed on as it came.
fn node_address(addr: &str) -> Result<&str, String> {
    let refuse = || format!("not a node address: {:?}", shown(addr));
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(addr);
    }
    let (host, port) = addr.rsplit_once(':').ok_or_else(refuse)?;
    // A real node writes an IPv6 address without brackets (`::1:6379`).
    let host_ok = host.parse::<std::net::IpAddr>().is_ok()
        || !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if host_ok && port.parse::<u16>().is_ok() {
        Ok(addr)
    } else {
        Err(refuse())
    }
}

pub fn parse_view(myid: &str, nodes: &str) -> Result<View, String> {
    let id = node_id(myid)?.to_ascii_lowercase();
    let mut peers = BTreeMap::new();
    for l in nodes.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut f = l.split_whitespace();
        let (Some(peer), Some(addr), Some(_flags)) = (f.next(), f.next(), f.next()) else {
            return Err(format!("short CLUSTER NODES line: {:?}", shown(l)));
        };
        let peer = node_id(peer)?.to_ascii_lowercase();
        let addr = node_address(addr.split('@').next().unwrap_or_default())?.to_string();
        if peers.insert(peer, addr).is_some() {
            return Err(format!("an id listed twice: {:?}", shown(l)));
        }
        if peers.len() > MAX_VIEW_PEERS {
            return Err(format!("more than {MAX_VIEW_PEERS} members in a view"));
        }
    }
    if !peers.contains_key(&id) {
        return Err("its own id is not in its view".into());
    }
    Ok(View { id, peers })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn a_password_is_reused_within_its_span_and_an_unreadable_one_briefly() {
        let t0 = tokio::time::Instant::now();
        let passwords = Passwords::default();
        let key = |s: &str| ("ns".to_string(), s.to_string(), "password".to_string());
        assert_eq!(passwords.reusable(&key("a"), t0), None, "nothing read yet");
        passwords.remember(key("a"), Password::Known("p".into()), t0);
        passwords.remember(key("b"), Password::Unreadable, t0);
        let at = |d: Duration| t0 + d;
        assert_eq!(
            passwords.reusable(&key("a"), at(PASSWORD_REUSE - Duration::from_millis(1))),
            Some(Password::Known("p".into()))
        );
        assert_eq!(passwords.reusable(&key("a"), at(PASSWORD_REUSE)), None);
        assert_eq!(
            passwords.reusable(&key("b"), at(UNREADABLE_REUSE - Duration::from_millis(1))),
            Some(Password::Unreadable)
        );
        assert_eq!(passwords.reusable(&key("b"), at(UNREADABLE_REUSE)), None);
        // Another Secret or key of the same cluster is another entry.
        assert_eq!(passwords.reusable(&key("c"), t0), None);
        // Expired entries go when another is remembered.
        passwords.remember(key("c"), Password::None, at(PASSWORD_REUSE));
        assert_eq!(passwords.read.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_view_with_an_address_that_is_not_a_nodes_or_too_many_members_is_unknown() {
        let line = |id: &str, addr: &str| format!("{id} {addr}@7373 master - 0 0 0 connected\n");
        for good in [
            "127.0.0.1:6379",
            "[::1]:6379",
            "demo-0.demo-headless.ns.svc:6379",
        ] {
            let nodes = line(A, "127.0.0.1:6379") + &line(B, good);
            let v = parse_view(A, &nodes).unwrap();
            assert_eq!(v.peers[B], good);
        }
        let huge = "x".repeat(1 << 20);
        for bad in [
            huge.as_str(),
            "127.0.0.1",
            "127.0.0.1:99999",
            "evil host:6379",
            "a\u{202e}b:6379",
            ":6379",
        ] {
            let nodes = line(A, "127.0.0.1:6379") + &line(B, bad);
            let e = parse_view(A, &nodes).unwrap_err();
            assert!(
                e.len() < 200,
                "the error carries the member's text cut: {} bytes",
                e.len()
            );
        }
        let mut nodes = line(A, "127.0.0.1:6379");
        for n in 0..MAX_VIEW_PEERS {
            nodes += &line(&format!("{n:040x}"), "127.0.0.2:6379");
        }
        assert!(
            parse_view(A, &nodes)
                .unwrap_err()
                .contains("more than 1100 members")
        );
    }

    #[test]
    fn a_password_never_shows_in_debug_output() {
        let known = Password::Known("hunter2-secret".into());
        for shown in [
            format!("{known:?}"),
            format!("{known:#?}"),
            format!("{:?}", Some(&known)),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("redacted"), "{shown}");
        }
        assert_eq!(format!("{:?}", Password::None), "None");
        assert_eq!(format!("{:?}", Password::Unreadable), "Unreadable");
    }

    #[test]
    fn cluster_nodes_lines_are_a_view_by_identity() {
        let nodes = format!(
            "{A} 127.0.0.1:6379@7373 myself,master - 0 0 0 connected\n{B} 127.0.0.2:6379@7373 master - 0 0 0 connected\n"
        );
        let v = parse_view(A, &nodes).unwrap();
        assert_eq!(v.id, A);
        assert_eq!(
            v.peers,
            [
                (A.into(), "127.0.0.1:6379".into()),
                (B.into(), "127.0.0.2:6379".into())
            ]
            .into()
        );
        // Its own id missing, a bad id, a short line, a duplicate: unknown, never a guess.
        let b_only = format!("{B} 127.0.0.2:6379@7373 master - 0 0 0 connected\n");
        assert!(parse_view(A, &b_only).is_err());
        assert!(parse_view("xyz", &nodes).is_err());
        assert!(parse_view(A, &format!("{A} 127.0.0.1:6379@7373\n")).is_err());
        assert!(parse_view(A, &format!("{nodes}{B} 127.0.0.9:6379@7373 master\n")).is_err());
        assert!(parse_view(A, "").is_err());
    }

    /// A member on `ip:6379` that answers every connection with `answer` after reading.
    async fn member(ip: &'static str, answer: Vec<u8>) {
        let l = tokio::net::TcpListener::bind((ip, PORT_RESP))
            .await
            .expect("bind loopback");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 512];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(&answer).await;
                    let mut rest = Vec::new();
                    let _ = s.read_to_end(&mut rest).await;
                });
            }
        });
    }

    fn bulk_reply(s: &str) -> String {
        format!("${}\r\n{s}\r\n", s.len())
    }

    #[tokio::test]
    async fn unreachable_refused_or_garbled_is_unknown() {
        let nodes = format!("{A} 127.43.0.1:6379@7373 myself,master - 0 0 0 connected\n");
        let good = format!("{}{}", bulk_reply(A), bulk_reply(&nodes));
        member("127.43.0.1", good.clone().into_bytes()).await;
        member("127.43.0.2", format!("+OK\r\n{good}").into_bytes()).await;
        member(
            "127.43.0.3",
            b"-WRONGPASS invalid username-password pair\r\n".to_vec(),
        )
        .await;
        member(
            "127.43.0.4",
            b"-NOAUTH Authentication required.\r\n".to_vec(),
        )
        .await;
        member("127.43.0.5", b"$999999999\r\n".to_vec()).await;
        let t = Duration::from_millis(500);
        let budget = ByteBudget::new(MIN_READ_BUDGET_BYTES);
        let r = read_view("127.43.0.1", None, t, &budget).await;
        assert_eq!(r.view.expect("read").id, A);
        // CLUSTER MYID and CLUSTER NODES, as RESP arrays: 27 + 28 bytes the node counts.
        assert_eq!(r.sent, Some(55));
        let r = read_view("127.43.0.2", Some("pw"), t, &budget).await;
        assert!(r.view.is_some());
        assert_eq!(r.sent, Some(55 + 22), "AUTH pw too");
        // Refused or cut short: no view, and what the node read of the request is unknown.
        for ip in ["127.43.0.3", "127.43.0.4", "127.43.0.5"] {
            let pass = (ip == "127.43.0.3").then_some("bad");
            let r = read_view(ip, pass, t, &budget).await;
            assert_eq!((r.view, r.sent), (None, None), "{ip}");
            let auth = if pass.is_some() {
                AuthAnswer::Refused
            } else {
                AuthAnswer::NotAsked
            };
            assert_eq!(r.auth, auth, "{ip}");
        }
        // Nothing listening: nothing sent.
        assert_eq!(
            read_view("127.43.0.6", None, t, &budget).await,
            ViewRead::none()
        );
        // A member that accepts and never answers costs one timeout.
        let _hung = tokio::net::TcpListener::bind(("127.43.0.7", PORT_RESP))
            .await
            .unwrap();
        let start = std::time::Instant::now();
        assert_eq!(read_view("127.43.0.7", None, t, &budget).await.sent, None);
        assert!(start.elapsed() < Duration::from_millis(900));
    }

    fn only(secret: Password) -> Credentials {
        Credentials {
            secret,
            recorded: Some(Recorded::default()),
        }
    }

    /// The recorded passwords are tried newest first, the settled one last, never the
    /// Secret's again; where they stand against the Secret's says whether a rotation runs.
    #[test]
    fn credentials_fall_back_to_the_recorded_passwords_other_than_the_secrets() {
        let known = |s: &str| Password::Known(s.into());
        let with = |secret, settled: Option<&str>, since: &[&str]| Credentials {
            secret,
            recorded: Some(Recorded {
                settled: settled.map(String::from),
                since: since.iter().map(|s| s.to_string()).collect(),
            }),
        };
        let c = with(known("new"), Some("old"), &[]);
        assert_eq!(c.fallbacks(), ["old"]);
        assert_eq!(c.record(), PasswordRecord::Older { listed: false });
        // The new value remembered, then changed again: try the one set since first.
        let c = with(known("newer"), Some("old"), &["new"]);
        assert_eq!(c.fallbacks(), ["new", "old"]);
        assert_eq!(c.record(), PasswordRecord::Older { listed: false });
        let c = with(known("new"), Some("old"), &["new"]);
        assert_eq!(c.fallbacks(), ["old"]);
        assert_eq!(c.record(), PasswordRecord::Older { listed: true });
        let c = with(known("new"), Some("new"), &[]);
        assert_eq!(
            (c.fallbacks().len(), c.record()),
            (0, PasswordRecord::Current)
        );
        let c = with(known("new"), None, &[]);
        assert_eq!(
            (c.fallbacks().len(), c.record()),
            (0, PasswordRecord::Missing)
        );
        for secret in [Password::None, Password::Unreadable] {
            let c = with(secret, Some("old"), &[]);
            assert_eq!(
                (c.fallbacks().len(), c.record()),
                (0, PasswordRecord::NoPassword)
            );
        }
        // An unreadable record decides nothing.
        let c = Credentials {
            secret: known("new"),
            recorded: None,
        };
        assert_eq!(
            (c.fallbacks().len(), c.record()),
            (0, PasswordRecord::NoPassword)
        );
        let shown = format!(
            "{:?}",
            with(known("hunter2"), Some("hunter1"), &["hunter3"])
        );
        assert!(!shown.contains("hunter"), "{shown}");
    }

    #[tokio::test]
    async fn an_id_read_alone_answers_the_members_own_id_or_unknown() {
        let t = Duration::from_millis(500);
        member("127.43.1.1", bulk_reply(A).into_bytes()).await;
        member(
            "127.43.1.2",
            format!("+OK\r\n{}", bulk_reply(A)).into_bytes(),
        )
        .await;
        member("127.43.1.3", bulk_reply("not-an-id").into_bytes()).await;
        member(
            "127.43.1.4",
            b"-WRONGPASS invalid username-password pair\r\n$40\r\n".to_vec(),
        )
        .await;
        let r = read_id("127.43.1.1", &only(Password::None), t).await;
        assert_eq!(r.id.as_deref(), Some(A));
        // CLUSTER MYID as a RESP array: 27 bytes the node counts.
        assert_eq!(r.sent, Some(27));
        let pw = only(Password::Known("pw".into()));
        let r = read_id("127.43.1.2", &pw, t).await;
        assert_eq!((r.id.as_deref(), r.sent), (Some(A), Some(27 + 22)));
        // Not an id: unknown, though the node read every byte.
        let r = read_id("127.43.1.3", &only(Password::None), t).await;
        assert_eq!((r.id, r.sent), (None, Some(27)));
        // AUTH refused and the rest cut short: unknown, and so is what the node read.
        let r = read_id("127.43.1.4", &only(Password::Known("bad".into())), t).await;
        assert_eq!((r.id, r.sent), (None, None));
        // A password that could not be read: nothing is sent.
        let r = read_id("127.43.1.1", &only(Password::Unreadable), t).await;
        assert_eq!((r.id, r.sent), (None, Some(0)));
        // Nothing listening: nothing sent.
        let r = read_id("127.43.1.5", &only(Password::None), t).await;
        assert_eq!((r.id, r.sent), (None, Some(0)));
    }

    #[tokio::test]
    async fn a_view_is_paid_from_the_byte_budget_before_it_is_buffered() {
        // A whole 1 MiB view: its member's line, then blank lines (which a view may hold).
        let mut nodes = format!("{A} 127.43.0.8:6379@7373 myself,master - 0 0 0 connected\n");
        nodes.push_str(&" ".repeat(MAX_VIEW_BYTES as usize - nodes.len() - 1));
        nodes.push('\n');
        assert_eq!(nodes.len() as u64, MAX_VIEW_BYTES);
        let answer = format!("{}{}", bulk_reply(A), bulk_reply(&nodes));
        member("127.43.0.8", answer.into_bytes()).await;
        let t = Duration::from_secs(2);
        let budget = ByteBudget::new(MIN_READ_BUDGET_BYTES);
        let r = read_view("127.43.0.8", None, t, &budget).await;
        assert_eq!(r.view.expect("a whole view fits the smallest budget").id, A);
        assert_eq!(budget.available(), MIN_READ_BUDGET_BYTES, "given back");
        // While other reads hold the budget, this one waits, and past its timeout is unknown.
        let held = budget.buffer(1).await;
        let r = read_view("127.43.0.8", None, Duration::from_millis(300), &budget).await;
        assert_eq!(r.view, None);
        drop(held);
        // A view the budget can never pay for is refused at once, not waited for.
        let small = ByteBudget::new(100_000);
        let start = std::time::Instant::now();
        assert_eq!(read_view("127.43.0.8", None, t, &small).await.view, None);
        assert!(start.elapsed() < t / 2, "refused, not timed out");
        assert_eq!(small.available(), 100_000);
    }
}
