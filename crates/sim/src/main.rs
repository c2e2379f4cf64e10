//! `marekvs-sim`: runs the pods of the local control plane's fake nodes as simulated (or real)
//! marekvs members, provisions their volumes, and serves the control API.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use marekvs_sim::model::Settings;
use marekvs_sim::podlet::Podlet;
use marekvs_sim::provisioner::Provisioner;
use marekvs_sim::world::SharedWorld;
use marekvs_sim::{control, model};
use tracing::info;

/// Simulated marekvs data plane and pod runner for the local control plane.
///
/// Watches every pod scheduled to a fake (kwok) node, gives it a loopback IP from the node's
/// podCIDR, and runs a simulated marekvs member there serving the node contract on port
/// 9121 (or, with --real-bin, a real marekvs server with its listeners bound to the pod IP
/// and its output in --pod-logs-dir). Readiness follows the pod's readiness probe; a member
/// that exits is restarted with the kubelet's back-off (CrashLoopBackOff); deletion runs the
/// preStop hook and waits for the member to exit. Also provisions the volumes of the
/// `marekvs.io/sim-hostpath` StorageClass. With --operator-bin, pods of the operator image run
/// as that binary (their args and env, a token of their ServiceAccount as KUBECONFIG).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Control API address (loopback only).
    #[arg(
        long,
        default_value = "127.0.0.1:9190",
        env = "MAREKVS_SIM_CONTROL_ADDR"
    )]
    control: SocketAddr,
    /// Directory for volume data (one directory per PVC).
    #[arg(long, default_value = ".state/volumes", env = "MAREKVS_SIM_VOLUMES")]
    volumes_dir: PathBuf,
    /// Run this marekvs server binary for each member pod instead of the simulator.
    #[arg(long, env = "MAREKVS_BIN")]
    real_bin: Option<PathBuf>,
    /// Directory for the output of real members (--real-bin) and operator pods (--operator-bin), one file per pod and container:
    /// `<namespace>_<pod>_<container>.log`, appended across restarts. Default: `pods` beside
    /// the volumes directory.
    #[arg(long, env = "MAREKVS_SIM_POD_LOGS")]
    pod_logs_dir: Option<PathBuf>,
    /// Run pods of the operator image (repository `…/marekvs-operator`) as this binary, with
    /// their args and env and a token of their ServiceAccount (see docs/local-cluster.md).
    #[arg(long, env = "MAREKVS_SIM_OPERATOR_BIN")]
    operator_bin: Option<PathBuf>,
    /// TAG=PATH: pods of the operator image with this tag run as PATH instead (an older build,
    /// for the upgrade test); repeatable.
    #[arg(long, value_parser = marekvs_sim::operator_pod::parse_tag_binary)]
    operator_bin_for_tag: Vec<(String, PathBuf)>,
    /// Seed of the simulator's jitter, for reproducible runs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Partitions bootstrapped per second per member.
    #[arg(long, default_value_t = Settings::default().copy_rate_per_sec)]
    copy_rate: f64,
    /// Seconds a member sleeps after SIGTERM before it waits (at most 7 s) for its ring
    /// backlog to empty.
    #[arg(long, default_value_t = Settings::default().flush_ms as f64 / 1000.0)]
    flush_seconds: f64,
    /// Writes a member's replication ring ships per second; above it writes wait in the ring,
    /// and past its capacity they gap and wait for anti-entropy (0: unlimited).
    #[arg(long, default_value_t = Settings::default().ring_ops_per_sec)]
    ring_ops_per_sec: f64,
    /// Fraction of a member's writes its ring silently never ships to a given peer.
    #[arg(long, default_value_t = Settings::default().ring_skip_fraction)]
    ring_skip_fraction: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let args = Args::parse();
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server (KUBECONFIG)")?;
    std::fs::create_dir_all(&args.volumes_dir)?;
    let volumes_dir = std::fs::canonicalize(&args.volumes_dir)?;

    let settings = model::Settings {
        copy_rate_per_sec: args.copy_rate,
        flush_ms: (args.flush_seconds * 1000.0) as u64,
        ring_ops_per_sec: args.ring_ops_per_sec,
        ring_skip_fraction: args.ring_skip_fraction,
        ..Settings::default()
    };
    let world = SharedWorld::new(settings, args.seed);
    let pod_logs_dir = match args.pod_logs_dir {
        Some(dir) => dir,
        None => volumes_dir.parent().unwrap_or(&volumes_dir).join("pods"),
    };
    if args.real_bin.is_some() || args.operator_bin.is_some() {
        std::fs::create_dir_all(&pod_logs_dir)
            .with_context(|| format!("creating {}", pod_logs_dir.display()))?;
    }
    if let Some(bin) = &args.operator_bin {
        info!(bin = %bin.display(), "running pods of the operator image as this binary");
    }
    if let Some(bin) = &args.real_bin {
        info!(bin = %bin.display(), pod_logs = %pod_logs_dir.display(),
            "running real marekvs nodes instead of the simulator");
    }

    let ticker = {
        let world = world.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_millis(100));
            loop {
                t.tick().await;
                world.lock().tick();
            }
        })
    };
    let podlet = Podlet::new(
        client.clone(),
        world.clone(),
        args.real_bin.clone(),
        volumes_dir.clone(),
        pod_logs_dir,
        args.operator_bin.clone(),
        args.operator_bin_for_tag.iter().cloned().collect(),
    );
    let provisioner = Provisioner {
        client,
        volumes_dir,
    };
    info!(control = %args.control, "marekvs-sim running");
    tokio::select! {
        r = podlet.run() => r.context("pod runner")?,
        r = provisioner.run() => r.context("provisioner")?,
        r = control::serve(world, args.control) => r.context("control API")?,
        _ = ticker => {},
        _ = tokio::signal::ctrl_c() => info!("interrupted"),
    }
    Ok(())
}
