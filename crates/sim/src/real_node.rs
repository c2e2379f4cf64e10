//! A real marekvs server process standing in for a member pod (`--real-bin` / `MAREKVS_BIN`):
//! the environment it gets, its per-pod log file, and how it exited.
//!
//! In a pod each member has its own network namespace, so its listeners' `0.0.0.0` defaults are
//! right. Here every member shares the host's: a second member could not bind `0.0.0.0:7946`.
//! So each listener is bound to the pod IP unless the pod's env chose an address itself, and
//! then only a loopback one: everything the harness runs stays on 127.0.0.0/8.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use tokio::process::{Child, Command};
use tracing::info;

use crate::container_state::{REASON_CREATE_ERROR, REASON_RUN_ERROR};

/// A real node's listeners: env variable and the port of its `0.0.0.0` default.
pub const LISTENERS: [(&str, u16); 4] = [
    ("MAREKVS_RESP_ADDR", 6379),
    ("MAREKVS_MESH_ADDR", 7373),
    ("MAREKVS_GOSSIP_ADDR", 7946),
    ("MAREKVS_METRICS_ADDR", 9121),
];
pub const GOSSIP_PORT: u16 = 7946;
/// The longest termination message kept from the log (the kubelet keeps a few KiB).
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// How much of the end of a run's log is searched for its last error line.
const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// What the harness adds to a real member's env from the pod's.
pub struct NodeEnv<'a> {
    pub ip: Ipv4Addr,
    pub node_id: &'a str,
    pub data_dir: &'a Path,
    /// The other members' gossip addresses.
    pub seeds: &'a [String],
}

/// The environment of a real member, and a warning for each listener address the pod set
/// itself that is on loopback but not on its pod IP (it may collide with the other members
/// here). A listener address the pod set off loopback (or not an `ip:port`) is a
/// `CreateContainerError`: the member must not listen beyond 127.0.0.0/8.
pub fn node_env(
    pod_env: &BTreeMap<String, String>,
    add: &NodeEnv<'_>,
) -> Result<(BTreeMap<String, String>, Vec<String>), StartFailure> {
    let mut env = pod_env.clone();
    let mut warnings = Vec::new();
    let mut refused = Vec::new();
    env.insert("MAREKVS_NODE_ID".into(), add.node_id.into());
    env.insert("MAREKVS_ADVERTISE_IP".into(), add.ip.to_string());
    env.insert(
        "MAREKVS_DATA_DIR".into(),
        add.data_dir.display().to_string(),
    );
    // Services have no endpoints for loopback pods and there is no cluster DNS here.
    env.insert("MAREKVS_SEEDS".into(), add.seeds.join(","));
    for (var, port) in LISTENERS {
        match pod_env.get(var) {
            None => {
                env.insert(
                    var.into(),
                    SocketAddr::new(IpAddr::V4(add.ip), port).to_string(),
                );
            }
            Some(value) => match value.parse::<SocketAddr>() {
                Ok(SocketAddr::V4(a)) if a.ip().is_loopback() => {
                    if *a.ip() != add.ip {
                        warnings.push(format!(
                            "{var}={value} (set by the pod) is not bound to the pod IP {}: \
                             members share one network namespace here, so it may collide with \
                             another member's",
                            add.ip
                        ));
                    }
                }
                Ok(_) => refused.push(format!("{var}={value} is not a loopback address")),
                Err(_) => refused.push(format!("{var}={value} is not an IPv4 address and port")),
            },
        }
    }
    if !refused.is_empty() {
        return Err(StartFailure::create(format!(
            "{} (set by the pod): the harness binds each member to its pod IP {} and allows \
             only loopback (127.0.0.0/8) listener addresses",
            refused.join(", "),
            add.ip
        )));
    }
    Ok((env, warnings))
}

/// `<namespace>_<pod>_<container>.log`. Anything but `[A-Za-z0-9.-]` (and `..`) becomes `-`, so
/// whatever a name holds, the file stays in its directory.
pub fn log_file_name(namespace: &str, pod: &str, container: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .replace("..", "--")
    };
    format!(
        "{}_{}_{}.log",
        clean(namespace),
        clean(pod),
        clean(container)
    )
}

/// The last line of a run's output that tells what went wrong: the last non-empty line with
/// "error", "ERROR", "panicked" or "fatal", else the last non-empty line; at most 1 KiB.
pub fn last_error_line(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let is_error = |l: &&&str| {
        ["error", "ERROR", "panicked", "fatal"]
            .iter()
            .any(|w| l.contains(w))
    };
    let line = lines.iter().rev().find(is_error).or_else(|| lines.last())?;
    Some(truncate_utf8(line, MAX_MESSAGE_BYTES).to_string())
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A member's log file: every start of the member appends to it.
#[derive(Clone, Debug)]
pub struct PodLog {
    path: PathBuf,
}

impl PodLog {
    pub fn new(dir: &Path, namespace: &str, pod: &str, container: &str) -> Self {
        PodLog {
            path: dir.join(log_file_name(namespace, pod, container)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same output in the CRI log format, for `kubectl logs` (crate::cri_log).
    pub fn cri_path(&self) -> PathBuf {
        self.path.with_extension("cri")
    }

    /// Open for appending and write `header` as one line; returns the file and the offset
    /// where this start's output begins.
    fn begin(&self, header: &str) -> std::io::Result<(File, u64)> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        writeln!(f, "{}", header.replace('\n', " "))?;
        let offset = f.seek(SeekFrom::End(0))?;
        Ok((f, offset))
    }

    /// Append one line of the harness's own (e.g. why a start failed). Best effort.
    pub fn note(&self, line: &str) {
        let _ = self.begin(line);
    }

    /// The last error line written since `offset` (see [`last_error_line`]).
    pub fn last_error_since(&self, offset: u64) -> Option<String> {
        let mut f = File::open(&self.path).ok()?;
        let len = f.metadata().ok()?.len();
        let from = offset.max(len.saturating_sub(LOG_TAIL_BYTES));
        f.seek(SeekFrom::Start(from)).ok()?;
        let mut buf = Vec::new();
        f.take(LOG_TAIL_BYTES).read_to_end(&mut buf).ok()?;
        last_error_line(&String::from_utf8_lossy(&buf))
    }
}

/// The harness line that opens each start in the log.
pub fn start_header(
    start: u64,
    restart_count: i32,
    at: &impl std::fmt::Display,
    bin: &Path,
) -> String {
    format!(
        "----- marekvs-sim: start {start} (restartCount {restart_count}) at {at}: {} -----",
        bin.display()
    )
}

/// Why a member could not be started, with the reason a kubelet would show.
#[derive(Debug)]
pub struct StartFailure {
    pub reason: &'static str,
    pub message: String,
}

impl StartFailure {
    pub fn create(e: impl std::fmt::Display) -> Self {
        StartFailure {
            reason: REASON_CREATE_ERROR,
            message: e.to_string(),
        }
    }
}

/// How a real node's process ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Exit {
    /// The exit code, or 128 + the signal that ended it (as a container runtime reports it).
    pub code: i32,
    pub message: String,
}

pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

pub struct RealNode {
    child: Child,
    exit: Option<Exit>,
    log: PodLog,
    log_offset: u64,
    /// Dropped with the node: the CRI copy of its log takes what is left and ends.
    _cri_follower: Option<tokio::sync::watch::Sender<()>>,
}

impl RealNode {
    /// Start `bin` with exactly `env` (plus PATH), so nothing of the harness leaks into it, its
    /// stdout and stderr appended to `log` after `header`.
    pub fn spawn(
        bin: &Path,
        env: &BTreeMap<String, String>,
        args: &[String],
        log: &PodLog,
        header: &str,
    ) -> Result<Self, StartFailure> {
        let (out, log_offset) = log
            .begin(header)
            .map_err(|e| StartFailure::create(format!("opening {}: {e}", log.path().display())))?;
        let err = out
            .try_clone()
            .map_err(|e| StartFailure::create(format!("opening {}: {e}", log.path().display())))?;
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env_clear()
            .envs(env)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| {
            let failure = StartFailure {
                reason: REASON_RUN_ERROR,
                message: format!("starting {}: {e}", bin.display()),
            };
            log.note(&format!("marekvs-sim: {}", failure.message));
            failure
        })?;
        info!(pid = child.id(), bin = %bin.display(), log = %log.path().display(), "real marekvs node started");
        let cri_follower = tokio::runtime::Handle::try_current().ok().map(|_| {
            let (tx, rx) = tokio::sync::watch::channel(());
            crate::cri_log::follow(log.path().to_path_buf(), log_offset, log.cri_path(), rx);
            tx
        });
        Ok(RealNode {
            child,
            exit: None,
            log: log.clone(),
            log_offset,
            _cri_follower: cri_follower,
        })
    }

    /// SIGTERM, as the kubelet sends on pod deletion. `kill(1)` keeps this crate free of unsafe code.
    pub async fn terminate(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
    }

    /// How it ended, once it has: its exit code and the last error line it logged.
    pub fn exit(&mut self) -> Option<Exit> {
        if self.exit.is_none() {
            let code = match self.child.try_wait() {
                Ok(None) => return None,
                Ok(Some(status)) => exit_code(status),
                // Not ours to wait for any more: report it gone rather than running for ever.
                Err(_) => 128,
            };
            let message = self
                .log
                .last_error_since(self.log_offset)
                .unwrap_or_else(|| {
                    if code > 128 {
                        format!("killed by signal {}", code - 128)
                    } else {
                        String::new()
                    }
                });
            self.exit = Some(Exit { code, message });
        }
        self.exit.clone()
    }

    pub fn exited(&mut self) -> bool {
        self.exit().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn add<'a>(seeds: &'a [String]) -> NodeEnv<'a> {
        NodeEnv {
            ip: Ipv4Addr::new(127, 1, 0, 5),
            node_id: "5",
            data_dir: Path::new("/data/pvc-1"),
            seeds,
        }
    }

    #[test]
    fn listeners_are_bound_to_the_pod_ip() {
        let seeds = vec!["127.1.0.2:7946".to_string(), "127.1.0.3:7946".to_string()];
        let pod = env(&[
            ("MAREKVS_REPLICAS_N", "2"),
            ("MAREKVS_SEEDS", "demo-0.demo:7946"),
        ]);
        let (e, warnings) = node_env(&pod, &add(&seeds)).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(e["MAREKVS_RESP_ADDR"], "127.1.0.5:6379");
        assert_eq!(e["MAREKVS_MESH_ADDR"], "127.1.0.5:7373");
        assert_eq!(e["MAREKVS_GOSSIP_ADDR"], "127.1.0.5:7946");
        assert_eq!(e["MAREKVS_METRICS_ADDR"], "127.1.0.5:9121");
        assert_eq!(e["MAREKVS_ADVERTISE_IP"], "127.1.0.5");
        assert_eq!(e["MAREKVS_NODE_ID"], "5");
        assert_eq!(e["MAREKVS_DATA_DIR"], "/data/pvc-1");
        assert_eq!(e["MAREKVS_SEEDS"], "127.1.0.2:7946,127.1.0.3:7946");
        assert_eq!(e["MAREKVS_REPLICAS_N"], "2");
    }

    #[test]
    fn a_loopback_listener_the_pod_set_is_kept_and_warned_about_unless_on_the_pod_ip() {
        let pod = env(&[
            ("MAREKVS_RESP_ADDR", "127.0.0.1:6380"),
            ("MAREKVS_METRICS_ADDR", "127.1.0.5:9999"),
            ("MAREKVS_MESH_ADDR", "127.255.0.9:7373"),
        ]);
        let (e, warnings) = node_env(&pod, &add(&[])).unwrap();
        assert_eq!(e["MAREKVS_RESP_ADDR"], "127.0.0.1:6380");
        assert_eq!(e["MAREKVS_METRICS_ADDR"], "127.1.0.5:9999");
        assert_eq!(e["MAREKVS_MESH_ADDR"], "127.255.0.9:7373");
        assert_eq!(e["MAREKVS_GOSSIP_ADDR"], "127.1.0.5:7946");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("MAREKVS_RESP_ADDR=127.0.0.1:6380"));
        assert!(warnings[1].starts_with("MAREKVS_MESH_ADDR=127.255.0.9:7373"));
        assert_eq!(e["MAREKVS_SEEDS"], "");
    }

    fn refused(var: &str, value: &str) -> StartFailure {
        match node_env(&env(&[(var, value)]), &add(&[])) {
            Ok((e, _)) => panic!("{var}={value} was accepted: {e:?}"),
            Err(f) => f,
        }
    }

    #[test]
    fn a_listener_on_every_interface_is_a_create_error() {
        let f = refused("MAREKVS_RESP_ADDR", "0.0.0.0:6380");
        assert_eq!(f.reason, "CreateContainerError");
        assert!(
            f.message.starts_with(
                "MAREKVS_RESP_ADDR=0.0.0.0:6380 is not a loopback address (set by the pod): \
                 the harness binds each member to its pod IP 127.1.0.5 and allows only loopback"
            ),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_listener_on_another_network_is_a_create_error() {
        let f = refused("MAREKVS_GOSSIP_ADDR", "10.1.2.3:6379");
        assert_eq!(f.reason, "CreateContainerError");
        assert!(
            f.message
                .starts_with("MAREKVS_GOSSIP_ADDR=10.1.2.3:6379 is not a loopback address"),
            "{}",
            f.message
        );
        // IPv6 loopback is outside 127.0.0.0/8 too.
        let f = refused("MAREKVS_METRICS_ADDR", "[::1]:9121");
        assert!(f.message.contains("[::1]:9121 is not a loopback address"));
    }

    #[test]
    fn a_listener_that_is_not_an_ip_and_port_is_a_create_error() {
        for value in ["mesh.local:7373", "127.1.0.5", ""] {
            let f = refused("MAREKVS_MESH_ADDR", value);
            assert_eq!(f.reason, "CreateContainerError");
            assert!(
                f.message.starts_with(&format!(
                    "MAREKVS_MESH_ADDR={value} is not an IPv4 address and port (set by the pod)"
                )),
                "{}",
                f.message
            );
        }
    }

    #[test]
    fn every_refused_listener_is_named() {
        let pod = env(&[
            ("MAREKVS_RESP_ADDR", "0.0.0.0:6380"),
            ("MAREKVS_METRICS_ADDR", "127.1.0.5:9999"),
            ("MAREKVS_MESH_ADDR", "mesh.local:7373"),
        ]);
        let Err(f) = node_env(&pod, &add(&[])) else {
            panic!("accepted");
        };
        assert!(f.message.contains("MAREKVS_RESP_ADDR=0.0.0.0:6380"));
        assert!(f.message.contains("MAREKVS_MESH_ADDR=mesh.local:7373"));
        assert!(!f.message.contains("MAREKVS_METRICS_ADDR"));
    }

    #[test]
    fn log_file_names_stay_in_their_directory() {
        assert_eq!(
            log_file_name("default", "demo-0", "marekvs"),
            "default_demo-0_marekvs.log"
        );
        assert_eq!(log_file_name("a/..", "b_c", ".."), "a---_b-c_--.log");
        let log = PodLog::new(Path::new("/logs"), "ns", "../../etc", "c");
        assert_eq!(log.path().parent(), Some(Path::new("/logs")));
    }

    #[test]
    fn the_last_error_line_is_the_message() {
        let text = "INFO starting\nERROR failed to bind to 0.0.0.0:7946/UDP for gossip: Address already in use\nINFO shutting down\n\n";
        assert_eq!(
            last_error_line(text).unwrap(),
            "ERROR failed to bind to 0.0.0.0:7946/UDP for gossip: Address already in use"
        );
        let panic =
            "thread 'main' panicked at src/main.rs:3:5:\nboom\nnote: run with RUST_BACKTRACE=1\n";
        assert_eq!(
            last_error_line(panic).unwrap(),
            "thread 'main' panicked at src/main.rs:3:5:"
        );
        assert_eq!(
            last_error_line("a\nlast words  \n   \n").unwrap(),
            "last words"
        );
        assert_eq!(
            last_error_line("fatal: x\nan error: y\n").unwrap(),
            "an error: y"
        );
        assert_eq!(last_error_line("\n \n"), None);
        assert_eq!(last_error_line(""), None);
    }

    #[test]
    fn a_long_message_is_cut_to_1_kib_on_a_char_boundary() {
        let line = format!("error {}", "é".repeat(1000));
        let m = last_error_line(&line).unwrap();
        assert!(m.len() <= MAX_MESSAGE_BYTES && m.len() > 1000);
        assert!(line.starts_with(&m));
    }

    #[test]
    fn each_start_appends_and_the_message_comes_from_its_own_run() {
        let dir = std::env::temp_dir().join(format!("marekvs-sim-podlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = PodLog::new(&dir, "ns", "p-0", "marekvs");
        let (mut f, first) = log.begin("start 1").unwrap();
        writeln!(f, "ERROR first run failed").unwrap();
        drop(f);
        let (mut f, second) = log.begin("start 2").unwrap();
        writeln!(f, "all good").unwrap();
        drop(f);
        // The second run's message ignores the first run's error.
        assert_eq!(log.last_error_since(second).unwrap(), "all good");
        assert_eq!(
            log.last_error_since(first).unwrap(),
            "ERROR first run failed"
        );
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert_eq!(text, "start 1\nERROR first run failed\nstart 2\nall good\n");
        assert_eq!(first, "start 1\n".len() as u64);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_binary_that_cannot_run_is_a_run_error_noted_in_the_log() {
        let dir = std::env::temp_dir().join(format!("marekvs-sim-norun-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = PodLog::new(&dir, "ns", "p-0", "marekvs");
        let bin = dir.join("not-there");
        let Err(e) = RealNode::spawn(&bin, &BTreeMap::new(), &[], &log, "start 1") else {
            panic!("a missing binary started");
        };
        assert_eq!(e.reason, "RunContainerError");
        assert!(e.message.contains("not-there"), "{}", e.message);
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(
            text.starts_with("start 1\nmarekvs-sim: starting "),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn an_exit_reports_its_code_and_last_error_line() {
        let dir = std::env::temp_dir().join(format!("marekvs-sim-exit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = PodLog::new(&dir, "ns", "p-0", "marekvs");
        let args = [
            "-c".to_string(),
            "echo starting; echo 'ERROR it broke' >&2; exit 3".to_string(),
        ];
        let mut node = RealNode::spawn(
            Path::new("/bin/sh"),
            &BTreeMap::new(),
            &args,
            &log,
            "start 1",
        )
        .unwrap();
        let exit = loop {
            if let Some(e) = node.exit() {
                break e;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(
            exit,
            Exit {
                code: 3,
                message: "ERROR it broke".into()
            }
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
