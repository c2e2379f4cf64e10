//! A real marekvs server process standing in for a member pod (`MAREKVS_BIN`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use anyhow::Context as _;
use tokio::process::{Child, Command};
use tracing::info;

pub struct RealNode {
    child: Child,
    done: bool,
}

impl RealNode {
    /// Start `bin` with exactly `env` (plus PATH), so nothing of the harness leaks into it.
    pub fn spawn(
        bin: &Path,
        env: &BTreeMap<String, String>,
        args: &[String],
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env_clear()
            .envs(env)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        info!(pid = child.id(), bin = %bin.display(), "real marekvs node started");
        Ok(RealNode { child, done: false })
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

    pub fn exited(&mut self) -> bool {
        if !self.done {
            self.done = matches!(self.child.try_wait(), Ok(Some(_)) | Err(_));
        }
        self.done
    }
}
