//! The data check: keys written over RESP before a disruption and every one read back after
//! it, on the simulator, on real marekvs members and on kind alike.
//!
//! Designed so that a real node cannot hide a loss:
//! - The survivor the keys will be read back through is named before they are written, and
//!   writes none of them: a real member keeps a cached copy of what was written through it.
//!   The keys are spread (round robin) over every other member, so every member about to be
//!   disrupted is the origin of some of them.
//! - Nothing is read before the disruption (a read would leave a cached copy on the reader).
//! - Afterwards every key is read through one survivor. Reads are eventually consistent, so a
//!   key missing once (nil, or an error reply) is not yet lost: the check reads again until
//!   none is missing or [`bound`] has passed, and then fails with [`Lost`], naming the keys.
//! - Each value is derived from its key and a per-run nonce, so a stale, foreign or corrupted
//!   value is caught, not just a missing one. A wrong value fails at once.
//! - A tenth of the keys is then overwritten through a member other than the one that wrote
//!   it (when there is one), and another tenth deleted through the one that wrote it:
//!   afterwards an overwritten key must read its second value and a deleted key (one whose
//!   `DEL` answered 1) must read nil. A first value, or a deleted key
//!   that reads back, may be a copy not yet repaired, so it is read again like a missing key,
//!   and named at the bound as stale or resurrected.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
pub use marekvs_sim::resp::Reply;
use marekvs_sim::resp::{self, Parsed};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pod_ip;

/// The RESP port of every member.
pub const RESP_PORT: u16 = 6379;
/// Commands sent per round trip.
const PIPELINE: usize = 256;
/// One reply (or a connect) that takes longer than this is an error.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the check keeps reading before it calls a missing key lost:
/// `MAREKVS_E2E_DATA_BOUND_SECONDS`, by default 300 s. On real marekvs, anti-entropy can need
/// minutes after heavy writes before every key reads back (10 keys were missing for 20 s
/// after a 5 → 3, and all came back); the simulator converges within seconds.
pub fn bound() -> Duration {
    let secs = std::env::var("MAREKVS_E2E_DATA_BOUND_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(300);
    Duration::from_secs(secs)
}

/// Keys a data check writes: `MAREKVS_E2E_KEYS`, by default 2,000.
pub fn default_keys() -> usize {
    std::env::var("MAREKVS_E2E_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

/// A byte stream to a member's RESP port.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A minimal RESP client over one connection, using the simulator's codec: replies are
/// parsed with its limits (1 MiB per bulk, 4 MiB buffered), never trusted blindly.
pub struct Resp {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    /// With a port-forward, the forwarder the stream belongs to (dropped with it).
    _forward: Option<kube::api::Portforwarder>,
}

/// Whether the data check reaches members through the API server's port-forward
/// (`MAREKVS_E2E_PORT_FORWARD`) rather than at their pod IPs. On kind the pod IPs are not the
/// host's to reach, and the API server is on 127.0.0.1: every connection the tests make stays
/// on loopback.
pub(crate) fn port_forward() -> bool {
    std::env::var_os("MAREKVS_E2E_PORT_FORWARD").is_some_and(|v| !v.is_empty())
}

/// Connect to `member`'s RESP port (through its pod IP, or a port-forward) and authenticate
/// as [`Resp::connect_auth`] does.
pub async fn connect_member(
    pods: &Api<Pod>,
    member: &str,
    password: Option<&str>,
) -> anyhow::Result<Resp> {
    if !port_forward() {
        let ip = member_ip(pods, member).await?;
        return Resp::connect_auth(ip, password).await;
    }
    let mut forward = tokio::time::timeout(IO_TIMEOUT, pods.portforward(member, &[RESP_PORT]))
        .await
        .map_err(|_| anyhow!("port-forward to {member} timed out"))?
        .with_context(|| format!("port-forward to {member}:{RESP_PORT}"))?;
    let stream = forward
        .take_stream(RESP_PORT)
        .with_context(|| format!("port-forward to {member}:{RESP_PORT}: no stream"))?;
    let resp = Resp {
        stream: Box::new(stream),
        buf: Vec::new(),
        _forward: Some(forward),
    };
    resp.authenticated(member, password).await
}

impl Resp {
    /// Connect to `ip:6379`; with `MAREKVS_E2E_REQUIREPASS` set, authenticate first.
    pub async fn connect(ip: Ipv4Addr) -> anyhow::Result<Resp> {
        Resp::connect_auth(ip, None).await
    }

    /// Connect to `ip:6379` and authenticate with `password` (`Some("")`: not at all; `None`:
    /// with `MAREKVS_E2E_REQUIREPASS`, if set).
    pub async fn connect_auth(ip: Ipv4Addr, password: Option<&str>) -> anyhow::Result<Resp> {
        let stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect((ip, RESP_PORT)))
            .await
            .map_err(|_| anyhow!("connecting to {ip}:{RESP_PORT} timed out"))?
            .with_context(|| format!("connecting to {ip}:{RESP_PORT}"))?;
        stream.set_nodelay(true)?;
        let resp = Resp {
            stream: Box::new(stream),
            buf: Vec::new(),
            _forward: None,
        };
        resp.authenticated(&ip.to_string(), password).await
    }

    async fn authenticated(mut self, at: &str, password: Option<&str>) -> anyhow::Result<Resp> {
        let pass = match password {
            Some(p) => p.to_string(),
            None => std::env::var("MAREKVS_E2E_REQUIREPASS").unwrap_or_default(),
        };
        if !pass.is_empty() {
            match self.call(&[b"AUTH", pass.as_bytes()]).await? {
                Reply::Simple(ok) if ok == "OK" => {}
                other => bail!("AUTH at {at}: {other:?}"),
            }
        }
        Ok(self)
    }

    /// One command, one reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut replies = self
            .pipeline(&[args.iter().map(|a| a.to_vec()).collect()])
            .await?;
        replies.pop().context("no reply")
    }

    /// Send every command, then read one reply per command, in order.
    pub async fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> anyhow::Result<Vec<Reply>> {
        let out: Vec<u8> = commands
            .iter()
            .flat_map(|c| resp::encode_command(c))
            .collect();
        tokio::time::timeout(IO_TIMEOUT, self.stream.write_all(&out))
            .await
            .map_err(|_| anyhow!("sending commands timed out"))??;
        let mut replies = Vec::with_capacity(commands.len());
        while replies.len() < commands.len() {
            match resp::parse_reply(&self.buf) {
                Parsed::Complete { value, consumed } => {
                    self.buf.drain(..consumed);
                    replies.push(value);
                }
                Parsed::Error(e) => bail!("not a RESP reply: {}", e.0),
                Parsed::NeedMore => {
                    let n = tokio::time::timeout(IO_TIMEOUT, self.stream.read_buf(&mut self.buf))
                        .await
                        .map_err(|_| anyhow!("no reply within {IO_TIMEOUT:?}"))??;
                    anyhow::ensure!(n > 0, "connection closed");
                }
            }
        }
        Ok(replies)
    }
}

/// The pod IP of `member`, from the API (a re-created pod has a new one).
pub(crate) async fn member_ip(pods: &Api<Pod>, member: &str) -> anyhow::Result<Ipv4Addr> {
    let pod = pods
        .get(member)
        .await
        .with_context(|| format!("reading pod {member}"))?;
    pod_ip(&pod).with_context(|| format!("pod {member} has no IP yet"))
}

/// A per-run nonce: the clock and the process id.
fn new_nonce() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id()) << 32
}

/// FNV-1a over the nonce and the key: the checksum a value carries.
fn checksum(nonce: u64, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nonce.to_le_bytes().iter().chain(key.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Keys written for one data check: the members they were written through, and the one
/// survivor they will be read back through, which wrote none of them.
pub struct DataSet {
    label: String,
    nonce: u64,
    keys: Vec<String>,
    /// Member → keys written through it.
    written_through: BTreeMap<String, usize>,
    /// Member → the keys first written through it (for [`DataSet::revise`]).
    first_writer: BTreeMap<String, Vec<usize>>,
    /// Keys written a second time, with [`DataSet::second_value_of`].
    overwritten: BTreeSet<String>,
    /// Keys deleted after they were written.
    deleted: BTreeSet<String>,
    reader: String,
    /// The RESP password (`None`: `MAREKVS_E2E_REQUIREPASS`, if set).
    password: Option<String>,
    /// Bytes of each value.
    value_len: usize,
}

/// Bytes of a value unless asked otherwise.
const VALUE_LEN: usize = 64;

/// What a successful check counted.
#[derive(Clone, Debug)]
pub struct Verified {
    pub keys: usize,
    pub reads: usize,
    pub rounds: usize,
    pub elapsed: Duration,
    /// Of the keys, those that read their second value, and those that read nil as deleted.
    pub overwritten: usize,
    pub deleted: usize,
}

/// The check's verdict when keys stayed unreadable for the whole bound.
#[derive(Clone, Debug)]
pub struct Lost {
    pub label: String,
    pub total: usize,
    /// The keys that never read back.
    pub missing: Vec<String>,
    /// Of those, the ones whose last read was an error reply (not nil), with the reply.
    pub errors: Vec<String>,
    /// Overwritten keys that still read their first value.
    pub stale: Vec<String>,
    /// Deleted keys that still read a value.
    pub resurrected: Vec<String>,
    pub via: String,
    pub limit: Duration,
    pub written_through: BTreeMap<String, usize>,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first = |keys: &[String]| -> Vec<String> { keys.iter().take(20).cloned().collect() };
        write!(
            f,
            "data check {}: {} of {} keys LOST ({} of them error replies, first: {:?}; not readable through {} for {:?}; written through {:?}); first missing: {:?}",
            self.label,
            self.missing.len(),
            self.total,
            self.errors.len(),
            self.errors.first(),
            self.via,
            self.limit,
            self.written_through,
            first(&self.missing)
        )?;
        if !self.stale.is_empty() {
            write!(
                f,
                "; {} overwritten keys still read their FIRST value: {:?}",
                self.stale.len(),
                first(&self.stale)
            )?;
        }
        if !self.resurrected.is_empty() {
            write!(
                f,
                "; {} deleted keys read back (RESURRECTED): {:?}",
                self.resurrected.len(),
                first(&self.resurrected)
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Lost {}

impl DataSet {
    /// Write `n` keys spread round robin over `members` (pod names) except `reader`, through
    /// their pod IPs. `reader` is the survivor the keys will be read back through: a real
    /// member keeps a copy of what was written through it, so it writes none of them.
    pub async fn write(
        pods: &Api<Pod>,
        members: &[&str],
        reader: &str,
        n: usize,
        label: &str,
    ) -> anyhow::Result<DataSet> {
        Self::write_with_password(pods, members, reader, n, label, None).await
    }

    /// [`DataSet::write`] with values of `value_len` bytes.
    pub async fn write_sized(
        pods: &Api<Pod>,
        members: &[&str],
        reader: &str,
        n: usize,
        label: &str,
        value_len: usize,
    ) -> anyhow::Result<DataSet> {
        Self::write_inner(pods, members, reader, n, label, None, value_len).await
    }

    /// [`DataSet::write`] to members that want `password` (kept for the reads too).
    pub async fn write_with_password(
        pods: &Api<Pod>,
        members: &[&str],
        reader: &str,
        n: usize,
        label: &str,
        password: Option<String>,
    ) -> anyhow::Result<DataSet> {
        Self::write_inner(pods, members, reader, n, label, password, VALUE_LEN).await
    }

    async fn write_inner(
        pods: &Api<Pod>,
        members: &[&str],
        reader: &str,
        n: usize,
        label: &str,
        password: Option<String>,
        value_len: usize,
    ) -> anyhow::Result<DataSet> {
        let mut set =
            Self::write_first(pods, members, reader, n, label, password, value_len).await?;
        set.revise(pods).await?;
        Ok(set)
    }

    /// [`DataSet::write`] without the overwrites and deletes: for a test that makes them later
    /// ([`DataSet::revise`]), while a member is away, say.
    pub async fn write_unrevised(
        pods: &Api<Pod>,
        members: &[&str],
        reader: &str,
        n: usize,
        label: &str,
    ) -> anyhow::Result<DataSet> {
        Self::write_first(pods, members, reader, n, label, None, VALUE_LEN).await
    }

    /// Every key's first value, spread round robin over `members` except `reader`.
    async fn write_first(
        pods: &Api<Pod>,
        members: &[&str],
        reader: &str,
        n: usize,
        label: &str,
        password: Option<String>,
        value_len: usize,
    ) -> anyhow::Result<DataSet> {
        let writers: Vec<&str> = members.iter().copied().filter(|m| *m != reader).collect();
        anyhow::ensure!(
            !writers.is_empty(),
            "no member to write through but {reader}"
        );
        let nonce = new_nonce();
        let mut set = DataSet {
            label: label.to_string(),
            nonce,
            keys: (0..n)
                .map(|i| format!("e2e:{label}:{nonce:016x}:{i:06}"))
                .collect(),
            written_through: BTreeMap::new(),
            first_writer: BTreeMap::new(),
            overwritten: BTreeSet::new(),
            deleted: BTreeSet::new(),
            reader: reader.to_string(),
            password,
            value_len,
        };
        for (m, member) in writers.iter().enumerate() {
            let mine: Vec<usize> = (m..n).step_by(writers.len()).collect();
            let commands: Vec<Vec<Vec<u8>>> = mine
                .iter()
                .map(|&i| set.set_command(&set.keys[i]))
                .collect();
            set.send(pods, member, &commands, Reply::Simple("OK".into()))
                .await?;
            set.written_through.insert(member.to_string(), mine.len());
            set.first_writer.insert(member.to_string(), mine);
        }
        eprintln!(
            "data check {}: wrote {} keys through {:?}; will read them back through {reader}",
            set.label,
            set.keys.len(),
            set.written_through
        );
        Ok(set)
    }

    /// Overwrite one key in ten (index 3 mod 10) through the next member that wrote keys (the
    /// same one if it was the only one), and delete another (7 mod 10) through the member that
    /// wrote it; never through the reader. Each overwrite must answer `OK`. A delete answering
    /// `1` wrote a tombstone and the key must read nil; one answering `0` found no key there
    /// (marekvs writes no tombstone for a key the member cannot see), so the key must still
    /// read as written. At least one delete must answer `1`.
    pub async fn revise(&mut self, pods: &Api<Pod>) -> anyhow::Result<()> {
        let writers: Vec<String> = self.first_writer.keys().cloned().collect();
        let through: Vec<&str> = writers.iter().map(String::as_str).collect();
        self.revise_through(pods, &through).await
    }

    /// [`DataSet::revise`] through `through` only (members still there while another is away,
    /// say): the keys first written through the `w`-th writer are overwritten through the next
    /// of `through` after position `w` that is not that writer, if there is one, and deleted
    /// through that writer if it is in `through`, else through the same next member.
    pub async fn revise_through(
        &mut self,
        pods: &Api<Pod>,
        through: &[&str],
    ) -> anyhow::Result<()> {
        anyhow::ensure!(
            !through.is_empty() && !through.contains(&self.reader.as_str()),
            "revise through members other than the reader {}: {through:?}",
            self.reader
        );
        anyhow::ensure!(
            self.overwritten.is_empty() && self.deleted.is_empty(),
            "data check {}: revised once already",
            self.label
        );
        // Values are ordered by the hybrid clock's milliseconds first: a second write within the
        // millisecond of the first could lose to it on the origin's id alone.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let writers: Vec<String> = self.first_writer.keys().cloned().collect();
        let mut unseen = 0;
        for (w, first) in writers.iter().enumerate() {
            let next = (1..=through.len())
                .map(|step| through[(w + step) % through.len()])
                .find(|m| *m != first)
                .unwrap_or(through[0]);
            let picked = |rest: usize| -> Vec<usize> {
                self.first_writer[first]
                    .iter()
                    .copied()
                    .filter(|i| i % 10 == rest)
                    .collect()
            };
            let (rewrite, delete) = (picked(3), picked(7));
            let commands: Vec<Vec<Vec<u8>>> = rewrite
                .iter()
                .map(|&i| {
                    let k = &self.keys[i];
                    vec![
                        b"SET".to_vec(),
                        k.as_bytes().to_vec(),
                        self.second_value_of(k).into_bytes(),
                    ]
                })
                .collect();
            let deletes: Vec<Vec<Vec<u8>>> = delete
                .iter()
                .map(|&i| vec![b"DEL".to_vec(), self.keys[i].as_bytes().to_vec()])
                .collect();
            self.send(pods, next, &commands, Reply::Simple("OK".into()))
                .await?;
            // A DEL is a no-op, without a tombstone, on a member that does not see the key
            // (marekvs reads through only as a non-owner, and a non-owner's lease may hold an
            // empty answer for 60 s): deletes go through the member that wrote the key. Even
            // so, while a member is away the key's new owner may not hold it yet, and the DEL
            // answers 0: that key was not deleted, so it must still read as written.
            let deleter = if through.contains(&first.as_str()) {
                first.as_str()
            } else {
                next
            };
            let replies = self.replies(pods, deleter, &deletes).await?;
            for (&i, reply) in delete.iter().zip(replies) {
                match reply {
                    Reply::Integer(1) => {
                        self.deleted.insert(self.keys[i].clone());
                    }
                    Reply::Integer(0) => unseen += 1,
                    other => bail!("DEL {} through {deleter}: {other:?}", self.keys[i]),
                }
            }
            self.overwritten
                .extend(rewrite.iter().map(|&i| self.keys[i].clone()));
        }
        eprintln!(
            "data check {}: overwrote {} keys and deleted {} through {through:?} ({unseen} DELs \
             answered 0, the deleting member not seeing the key: those keys stay as written)",
            self.label,
            self.overwritten.len(),
            self.deleted.len()
        );
        anyhow::ensure!(
            !self.deleted.is_empty(),
            "data check {}: no DEL deleted a key ({unseen} answered 0)",
            self.label
        );
        Ok(())
    }

    /// Send `commands` through `member`, pipelined: the replies, one per command.
    async fn replies(
        &self,
        pods: &Api<Pod>,
        member: &str,
        commands: &[Vec<Vec<u8>>],
    ) -> anyhow::Result<Vec<Reply>> {
        let mut conn = connect_member(pods, member, self.password.as_deref()).await?;
        let mut out = Vec::with_capacity(commands.len());
        for chunk in commands.chunks(PIPELINE) {
            out.extend(conn.pipeline(chunk).await?);
        }
        Ok(out)
    }

    /// Send `commands` through `member`, pipelined, and fail unless every reply is `expected`.
    async fn send(
        &self,
        pods: &Api<Pod>,
        member: &str,
        commands: &[Vec<Vec<u8>>],
        expected: Reply,
    ) -> anyhow::Result<()> {
        let mut conn = connect_member(pods, member, self.password.as_deref()).await?;
        for chunk in commands.chunks(PIPELINE) {
            for (command, reply) in chunk.iter().zip(conn.pipeline(chunk).await?) {
                if reply != expected {
                    let shown: Vec<String> = command
                        .iter()
                        .take(2)
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect();
                    bail!("{} through {member}: {reply:?}", shown.join(" "));
                }
            }
        }
        Ok(())
    }

    /// An empty set for a writer that records each acknowledged key ([`crate::load`]), to be
    /// read back through `reader`, with values of `value_len` bytes (0: [`VALUE_LEN`]).
    pub(crate) fn empty(label: &str, reader: &str, value_len: usize) -> DataSet {
        DataSet {
            label: label.to_string(),
            nonce: new_nonce(),
            keys: Vec::new(),
            written_through: BTreeMap::new(),
            first_writer: BTreeMap::new(),
            overwritten: BTreeSet::new(),
            deleted: BTreeSet::new(),
            reader: reader.to_string(),
            password: None,
            value_len: if value_len == 0 { VALUE_LEN } else { value_len },
        }
    }

    /// A set of no keys with this one's label, nonce, reader and value length.
    #[cfg(test)]
    fn clone_empty(&self) -> DataSet {
        DataSet {
            label: self.label.clone(),
            nonce: self.nonce,
            keys: Vec::new(),
            written_through: BTreeMap::new(),
            first_writer: BTreeMap::new(),
            overwritten: BTreeSet::new(),
            deleted: BTreeSet::new(),
            reader: self.reader.clone(),
            password: self.password.clone(),
            value_len: self.value_len,
        }
    }

    /// The `i`-th key of this set's label and nonce.
    pub(crate) fn key_at(&self, i: usize) -> String {
        format!("e2e:{}:{:016x}:{i:07}", self.label, self.nonce)
    }

    /// `SET key value` for `key`.
    pub(crate) fn set_command(&self, key: &str) -> Vec<Vec<u8>> {
        vec![
            b"SET".to_vec(),
            key.as_bytes().to_vec(),
            self.value_of(key).into_bytes(),
        ]
    }

    /// `key` was acknowledged by `member`.
    pub(crate) fn record(&mut self, key: String, member: &str) {
        self.keys.push(key);
        *self.written_through.entry(member.to_string()).or_default() += 1;
    }

    /// The member the keys will be read back through.
    /// Reads from now on authenticate with `password` (the members' was rotated).
    pub fn set_password(&mut self, password: &str) {
        self.password = Some(password.to_string());
    }

    pub fn reader(&self) -> &str {
        &self.reader
    }

    /// Keys acknowledged through each member.
    pub fn written_through(&self) -> &BTreeMap<String, usize> {
        &self.written_through
    }

    /// The value written for `key`: the key, a checksum of key and nonce, padding to the
    /// set's value length (64 bytes unless [`DataSet::write_sized`]).
    fn value_of(&self, key: &str) -> String {
        let v = format!("{key}|{:016x}|", checksum(self.nonce, key));
        format!("{v:.<width$}", width = self.value_len)
    }

    /// The value an overwrite gives `key`: another checksum, marked `v2`.
    fn second_value_of(&self, key: &str) -> String {
        let v = format!("{key}|{:016x}|v2|", checksum(!self.nonce, key));
        format!("{v:.<width$}", width = self.value_len)
    }

    /// What a read of `key` through the reader says, against what was last written to it.
    fn judge(&self, key: &str, reply: Reply) -> Read {
        let deleted = self.deleted.contains(key);
        let current = if self.overwritten.contains(key) {
            self.second_value_of(key)
        } else {
            self.value_of(key)
        };
        match reply {
            Reply::Null if deleted => Read::Good,
            // An error (a member still loading, say) is not a value: read again.
            Reply::Null => Read::Missing(None),
            Reply::Error(e) => Read::Missing(Some(e)),
            Reply::Bulk(v) if !deleted && v == current.as_bytes() => Read::Good,
            // An older value, or one a delete should have ended: perhaps not yet repaired.
            Reply::Bulk(v) if v == self.value_of(key).as_bytes() => Read::Stale,
            other => Read::Wrong(format!("{other:?}")),
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Read every key back until none is missing, or fail after [`bound`] with [`Lost`]. A key
    /// with a wrong value fails at once.
    pub async fn verify(&self, pods: &Api<Pod>) -> anyhow::Result<Verified> {
        self.verify_within(pods, bound()).await
    }

    /// [`DataSet::verify`] with the bound given.
    pub async fn verify_within(
        &self,
        pods: &Api<Pod>,
        limit: Duration,
    ) -> anyhow::Result<Verified> {
        let via = self.reader.as_str();
        self.refuse_empty()?;
        let start = Instant::now();
        let mut rounds = 0;
        let mut reads = 0;
        // Each round reads only the keys the rounds before it did not find as written: a key
        // found is never read again, so no round counts a copy an earlier read left.
        let mut to_read: Vec<String> = self.keys.clone();
        let mut last_unsettled: Option<usize> = None;
        loop {
            rounds += 1;
            reads += to_read.len();
            match self.read_keys(pods, via, &to_read).await {
                Ok(pass) if !pass.wrong.is_empty() => bail!(
                    "data check {}: {} keys read back through {via} with a wrong value: {:?}",
                    self.label,
                    pass.wrong.len(),
                    pass.wrong.iter().take(10).collect::<Vec<_>>()
                ),
                Ok(pass) if pass.settled() => {
                    let v = Verified {
                        keys: self.keys.len(),
                        reads,
                        rounds,
                        elapsed: start.elapsed(),
                        overwritten: self.overwritten.len(),
                        deleted: self.deleted.len(),
                    };
                    eprintln!(
                        "data check {}: all {} keys read back through {via} as last written ({} overwritten, {} deleted) after {:.1}s ({} rounds, {} GETs)",
                        self.label,
                        v.keys,
                        v.overwritten,
                        v.deleted,
                        v.elapsed.as_secs_f64(),
                        v.rounds,
                        v.reads
                    );
                    return Ok(v);
                }
                Ok(pass) => {
                    let unsettled = pass.missing.len() + pass.stale.len();
                    if last_unsettled != Some(unsettled) {
                        eprintln!(
                            "data check {}: {} of {} keys not readable through {via} and {} reading an older value after {:.1}s; reading again",
                            self.label,
                            pass.missing.len(),
                            self.keys.len(),
                            pass.stale.len(),
                            start.elapsed().as_secs_f64()
                        );
                    }
                    last_unsettled = Some(unsettled);
                    to_read = pass.missing.iter().chain(&pass.stale).cloned().collect();
                    if start.elapsed() > limit {
                        let (resurrected, stale) = pass
                            .stale
                            .into_iter()
                            .partition(|k| self.deleted.contains(k));
                        return Err(Lost {
                            label: self.label.clone(),
                            total: self.keys.len(),
                            missing: pass.missing,
                            errors: pass.errors,
                            stale,
                            resurrected,
                            via: via.to_string(),
                            limit,
                            written_through: self.written_through.clone(),
                        }
                        .into());
                    }
                }
                // The survivor may be restarting (its pod, or the API server): not a loss.
                Err(e) if start.elapsed() > limit => {
                    return Err(e.context(format!(
                        "data check {}: could not read through {via} for {limit:?}",
                        self.label
                    )));
                }
                Err(e) => eprintln!(
                    "data check {}: reading through {via}: {e:#}; retrying",
                    self.label
                ),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// A check over no key passes whatever happened to the data: it is a failure of the test
    /// (a writer that recorded nothing, a key count of 0), never a pass.
    fn refuse_empty(&self) -> anyhow::Result<()> {
        if self.keys.is_empty() {
            bail!(
                "data check {}: no key was written, so reading back proves nothing",
                self.label
            );
        }
        Ok(())
    }

    /// One pass over `keys` through `via`. An error is a failure to read at all.
    async fn read_keys(&self, pods: &Api<Pod>, via: &str, keys: &[String]) -> anyhow::Result<Pass> {
        let mut conn = connect_member(pods, via, self.password.as_deref()).await?;
        let mut pass = Pass::default();
        for chunk in keys.chunks(PIPELINE) {
            let commands: Vec<Vec<Vec<u8>>> = chunk
                .iter()
                .map(|k| vec![b"GET".to_vec(), k.as_bytes().to_vec()])
                .collect();
            for (k, reply) in chunk.iter().zip(conn.pipeline(&commands).await?) {
                match self.judge(k, reply) {
                    Read::Good => {}
                    Read::Missing(error) => {
                        pass.missing.push(k.clone());
                        if let Some(e) = error {
                            pass.errors.push(format!("{k}: {e}"));
                        }
                    }
                    Read::Stale => pass.stale.push(k.clone()),
                    Read::Wrong(reply) => pass.wrong.push(format!("{k}: {reply}")),
                }
            }
        }
        Ok(pass)
    }

    /// Which of `keys` each of `members` holds in its own store (`SCAN` answers from the
    /// member's local data only; a `GET` at a member that does not own a key asks an owner).
    /// For the reports of a loss; a member that cannot be asked is left out, with the error.
    pub async fn local_holders(
        &self,
        pods: &Api<Pod>,
        members: &[&str],
        keys: &[String],
    ) -> BTreeMap<String, anyhow::Result<usize>> {
        let pattern = format!("e2e:{}:{:016x}:*", self.label, self.nonce);
        let wanted: std::collections::BTreeSet<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let mut out = BTreeMap::new();
        for m in members {
            let held = async {
                let mut conn = connect_member(pods, m, self.password.as_deref()).await?;
                // SCAN, not KEYS: one reply must stay within the codec's buffer.
                let mut cursor = b"0".to_vec();
                let mut count = 0;
                loop {
                    let reply = conn
                        .call(&[
                            b"SCAN",
                            &cursor,
                            b"MATCH",
                            pattern.as_bytes(),
                            b"COUNT",
                            b"20000",
                        ])
                        .await?;
                    let Reply::Array(parts) = reply else {
                        bail!("SCAN through {m}: {reply:?}");
                    };
                    let [Reply::Bulk(next), Reply::Array(items)] = parts.as_slice() else {
                        bail!("SCAN through {m}: {parts:?}");
                    };
                    count += items
                        .iter()
                        .filter(|i| matches!(i, Reply::Bulk(k) if wanted.contains(k.as_slice())))
                        .count();
                    if next.as_slice() == b"0" {
                        return Ok(count);
                    }
                    // marekvs 0.2 spends a call's budget (64 × COUNT records) from the start of
                    // its store: past it, the cursor stops moving.
                    if *next == cursor {
                        bail!("SCAN through {m}: the cursor did not move");
                    }
                    cursor = next.clone();
                }
            }
            .await;
            out.insert(m.to_string(), held);
        }
        out
    }
}

/// What one read of a key says.
#[derive(Debug, PartialEq)]
enum Read {
    /// As last written: its value, or nil for a deleted key.
    Good,
    /// Nil, or an error reply (given).
    Missing(Option<String>),
    /// The first value of a key since overwritten or deleted.
    Stale,
    /// Neither value: another run's, corrupted, or not a string.
    Wrong(String),
}

/// What one pass over every key found.
#[derive(Default)]
struct Pass {
    /// Keys that read back as nil or an error.
    missing: Vec<String>,
    /// `key: error` of the keys that read back as an error reply.
    errors: Vec<String>,
    /// Keys overwritten or deleted that still read their first value.
    stale: Vec<String>,
    /// `key: reply` of keys whose value was neither written.
    wrong: Vec<String>,
}

impl Pass {
    /// Every key read as last written.
    fn settled(&self) -> bool {
        self.missing.is_empty() && self.stale.is_empty() && self.wrong.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_a_checksum_of_key_and_nonce() {
        let set = DataSet {
            label: "t".into(),
            nonce: 7,
            keys: vec![],
            written_through: BTreeMap::new(),
            first_writer: BTreeMap::new(),
            overwritten: BTreeSet::new(),
            deleted: BTreeSet::new(),
            reader: "demo-0".into(),
            password: None,
            value_len: VALUE_LEN,
        };
        let v = set.value_of("e2e:t:1");
        assert_eq!(v.len(), 64);
        let kib = DataSet {
            value_len: 1024,
            ..set.clone_empty()
        };
        assert_eq!(kib.value_of("e2e:t:1").len(), 1024);
        assert!(v.starts_with("e2e:t:1|"));
        assert_ne!(v, set.value_of("e2e:t:2"));
        let other = DataSet { nonce: 8, ..set };
        assert_ne!(v, other.value_of("e2e:t:1"), "another run's value is wrong");
    }

    #[test]
    fn a_check_over_no_key_fails_and_one_over_keys_may_run() {
        let mut set = DataSet::empty("t", "demo-0", 0);
        let err = set.refuse_empty().expect_err("0 keys must not pass");
        assert!(err.to_string().contains("no key was written"), "{err}");
        set.record(set.key_at(0), "demo-1");
        set.refuse_empty().expect("one key written");
    }

    #[test]
    fn a_read_is_judged_against_what_was_last_written() {
        let mut set = DataSet::empty("t", "demo-0", 0);
        for i in 0..3 {
            set.record(set.key_at(i), "demo-1");
        }
        let (kept, rewritten, gone) = (set.key_at(0), set.key_at(1), set.key_at(2));
        set.overwritten.insert(rewritten.clone());
        set.deleted.insert(gone.clone());
        let bulk = |v: String| Reply::Bulk(v.into_bytes());
        assert_eq!(set.judge(&kept, bulk(set.value_of(&kept))), Read::Good);
        assert_eq!(set.judge(&kept, Reply::Null), Read::Missing(None));
        assert!(matches!(
            set.judge(&kept, bulk(set.second_value_of(&kept))),
            Read::Wrong(_)
        ));
        assert_eq!(
            set.judge(&rewritten, bulk(set.second_value_of(&rewritten))),
            Read::Good
        );
        assert_eq!(
            set.judge(&rewritten, bulk(set.value_of(&rewritten))),
            Read::Stale
        );
        assert_eq!(set.judge(&rewritten, Reply::Null), Read::Missing(None));
        assert_eq!(set.judge(&gone, Reply::Null), Read::Good);
        assert_eq!(set.judge(&gone, bulk(set.value_of(&gone))), Read::Stale);
        assert!(matches!(
            set.judge(&gone, bulk(set.value_of(&kept))),
            Read::Wrong(_)
        ));
        assert_eq!(
            set.judge(&kept, Reply::Error("LOADING".into())),
            Read::Missing(Some("LOADING".into()))
        );
    }

    #[test]
    fn a_verdict_names_stale_and_resurrected_keys() {
        let lost = Lost {
            label: "t".into(),
            total: 10,
            missing: vec![],
            errors: vec![],
            stale: vec!["e2e:t:1".into()],
            resurrected: vec!["e2e:t:2".into()],
            via: "demo-0".into(),
            limit: Duration::from_secs(1),
            written_through: BTreeMap::new(),
        };
        let text = lost.to_string();
        assert!(
            text.contains("1 overwritten keys still read their FIRST value: [\"e2e:t:1\"]"),
            "{text}"
        );
        assert!(
            text.contains("1 deleted keys read back (RESURRECTED): [\"e2e:t:2\"]"),
            "{text}"
        );
    }
}
