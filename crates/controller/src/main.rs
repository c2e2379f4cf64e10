//! `marekvs-operator`: runs the MarekvsCluster controller, or prints its CRD.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use marekvs_api::MarekvsCluster;
use tracing::{debug, error, info, warn};

mod build;
mod lease;
mod reconcile;
mod scrape;

/// Kubernetes operator for marekvs: creates each member's Pod and PVC with ordinal identity,
/// scales down one chosen, drained member at a time behind a hand-off gate, and replaces
/// members whose pod or PVC is deleted.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (uses KUBECONFIG, or the in-cluster service account).
    Run {
        /// Watch only this namespace (default: all namespaces).
        #[arg(long, env = "MAREKVS_OPERATOR_NAMESPACE")]
        namespace: Option<String>,
        /// Timeout of one member scrape or drain call, in milliseconds.
        #[arg(long, default_value_t = 1500)]
        member_timeout_ms: u64,
        /// Cluster DNS domain, for the gossip seed name.
        #[arg(long, default_value = "cluster.local")]
        cluster_domain: String,
        /// Run only while holding the leader Lease, so several replicas can run (the others
        /// stand by). `--leader-elect=false` for a single replica.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
        /// Namespace of the leader Lease (default: POD_NAMESPACE, else --namespace, else
        /// marekvs-system).
        #[arg(long, env = "MAREKVS_OPERATOR_LEASE_NAMESPACE")]
        lease_namespace: Option<String>,
        /// Name of the leader Lease.
        #[arg(long, default_value = "marekvs-operator")]
        lease_name: String,
        /// A leader that has not renewed for this long may be replaced; it stops itself after
        /// two thirds of it.
        #[arg(long, default_value_t = 15, env = "MAREKVS_OPERATOR_LEASE_SECONDS")]
        lease_duration_seconds: u64,
    },
    /// Print the CustomResourceDefinition as YAML.
    Crd,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Command::Crd => {
            print!("{}", serde_yaml_ng::to_string(&MarekvsCluster::crd())?);
            Ok(())
        }
        Command::Run {
            namespace,
            member_timeout_ms,
            cluster_domain,
            leader_elect,
            lease_namespace,
            lease_name,
            lease_duration_seconds,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,kube=warn".into()),
                )
                .init();
            let client = Client::try_default().await?;
            let controller = run(
                client.clone(),
                namespace.clone(),
                Duration::from_millis(member_timeout_ms),
                cluster_domain,
            );
            if !leader_elect {
                return controller.await;
            }
            let lease_ns = lease_namespace
                .or_else(|| std::env::var("POD_NAMESPACE").ok())
                .or(namespace)
                .unwrap_or_else(|| "marekvs-system".into());
            let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
                format!(
                    "{}-{}",
                    std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into()),
                    std::process::id()
                )
            });
            let elector = lease::Elector::new(
                client,
                &lease_ns,
                &lease_name,
                &identity,
                Duration::from_secs(lease_duration_seconds.max(2)),
            );
            elector.acquire().await;
            tokio::select! {
                r = controller => {
                    elector.release().await;
                    r
                }
                lost = elector.hold() => {
                    // Exit at once: a deposed leader must not write anything more.
                    error!(lease = %lease_name, "leadership lost: {lost}; exiting");
                    std::process::exit(3);
                }
            }
        }
    }
}

async fn run(
    client: Client,
    namespace: Option<String>,
    member_timeout: Duration,
    cluster_domain: String,
) -> anyhow::Result<()> {
    let (crs, pods, pvcs) = match &namespace {
        Some(ns) => (
            Api::<MarekvsCluster>::namespaced(client.clone(), ns),
            Api::<Pod>::namespaced(client.clone(), ns),
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    let reporter = Reporter {
        controller: build::MANAGER.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(reconcile::Ctx {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        members: scrape::MemberClient::new(member_timeout),
        cluster_domain,
    });
    let managed = watcher::Config::default().labels(&format!(
        "{}={}",
        build::LABEL_MANAGED_BY,
        build::MANAGER
    ));
    info!(
        namespace = namespace.as_deref().unwrap_or("<all>"),
        "marekvs-operator running"
    );
    Controller::new(crs, watcher::Config::default())
        .owns(pods, managed.clone())
        // PVCs carry no owner reference (they outlive the cluster object): map them by label.
        .watches(pvcs, managed, |pvc: PersistentVolumeClaim| {
            let ns = pvc.namespace()?;
            pvc.labels()
                .get(build::LABEL_INSTANCE)
                .map(|name| ObjectRef::new(name).within(&ns))
        })
        .shutdown_on_signal()
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|r| async move {
            match r {
                // A stale copy of the object: expected now and then, retried at once.
                Err(kube::runtime::controller::Error::ReconcilerFailed(
                    reconcile::Error::Kube(kube::Error::Api(e)),
                    obj,
                )) if e.code == 409 => debug!(object = %obj, "status conflict; retrying"),
                Err(e) => warn!("{e}"),
                Ok(_) => {}
            }
        })
        .await;
    Ok(())
}
