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
use tracing::{info, warn};

mod build;
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
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,kube=warn".into()),
                )
                .init();
            run(
                namespace,
                Duration::from_millis(member_timeout_ms),
                cluster_domain,
            )
            .await
        }
    }
}

async fn run(
    namespace: Option<String>,
    member_timeout: Duration,
    cluster_domain: String,
) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
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
            if let Err(e) = r {
                warn!("{e}");
            }
        })
        .await;
    Ok(())
}
