//! `marekvs-operator`: runs the MarekvsCluster controller, or prints its CRD.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, CustomResourceExt, Resource, ResourceExt};
use marekvs_api::MarekvsCluster;
use std::sync::atomic::Ordering;
use tracing::{debug, error, info, warn};

mod build;
mod fastpath;
mod lease;
mod reconcile;
mod scrape;
mod telemetry;

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
        /// Where to serve /metrics (Prometheus text), /healthz and /readyz. Port 0 picks a
        /// free port (it is logged).
        #[arg(
            long,
            default_value = "0.0.0.0:8080",
            env = "MAREKVS_OPERATOR_METRICS_ADDR"
        )]
        metrics_addr: std::net::SocketAddr,
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
            metrics_addr,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,kube=warn".into()),
                )
                .init();
            let metrics = Arc::new(telemetry::Metrics::default());
            telemetry::serve(metrics.clone(), metrics_addr).await?;
            let config = kube::Config::infer().await?;
            let client = kube::client::ClientBuilder::try_from(config)?
                .with_layer(&telemetry::CountRequests(metrics.clone()))
                .build();
            let controller = run(
                client.clone(),
                namespace.clone(),
                Duration::from_millis(member_timeout_ms),
                cluster_domain,
                metrics.clone(),
            );
            if !leader_elect {
                metrics.leading.store(true, Ordering::Relaxed);
                return controller.await;
            }
            // A standby is ready: it is doing its job (waiting to take over).
            metrics.ready.store(true, Ordering::Relaxed);
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
            metrics.leading.store(true, Ordering::Relaxed);
            metrics.ready.store(false, Ordering::Relaxed);
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
    metrics: Arc<telemetry::Metrics>,
) -> anyhow::Result<()> {
    fn api<K>(client: &Client, namespace: &Option<String>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let reporter = Reporter {
        controller: build::MANAGER.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let managed = watcher::Config::default().labels(&format!(
        "{}={}",
        build::LABEL_MANAGED_BY,
        build::MANAGER
    ));
    // One watch per kind, each feeding a cache the reconciler reads: after the first LIST,
    // nothing is listed again (a LIST per reconcile was a LIST per cluster every 10 s).
    // The caches keep only what the operator reads (`Slim`).
    // Each watch backs off on its own errors, and its errors stop here: handed to the
    // controller, they would put *all* watches to sleep behind its trigger backoff, which
    // grows with every error of any watch. After an API server restart, five watches each
    // reporting one "resource version too old" froze every cache for three minutes.
    macro_rules! cached {
        ($kind:ty, $what:literal, $config:expr) => {
            cached!($kind, $what, $config, |_: &$kind| {})
        };
        ($kind:ty, $what:literal, $config:expr, $on_delete:expr) => {{
            let (reader, writer) = reflector::store::<$kind>();
            let events =
                watcher(api::<$kind>(&client, &namespace), $config).backoff(watch_backoff());
            (
                reader,
                cache_and_trigger(events, writer, metrics.clone(), $what, $on_delete),
            )
        }};
    }
    // A cluster's gate is taken when the watch reports one of its pods deleted, before the
    // controller sees the event, so that the pass the same deletion triggers lets the
    // re-creation go first (see `fastpath`).
    let gate = Arc::new(fastpath::Gate::default());
    let cr_gate = gate.clone();
    let (crs, cr_stream) = cached!(
        MarekvsCluster,
        "marekvsclusters",
        watcher::Config::default(),
        move |cr: &MarekvsCluster| cr_gate
            .forget(&cr.namespace().unwrap_or_default(), &cr.name_any())
    );
    // Deleted pods also go to the fast re-creation path (see `recreate_deleted_pods`).
    let (deleted_tx, deleted_rx) = tokio::sync::mpsc::unbounded_channel::<DeletedPod>();
    let pod_gate = gate.clone();
    let (pods, pod_stream) = cached!(Pod, "pods", managed.clone(), move |p: &Pod| {
        let held = p
            .namespace()
            .zip(p.labels().get(build::LABEL_INSTANCE))
            .and_then(|(ns, cluster)| pod_gate.hold(&ns, cluster));
        let _ = deleted_tx.send((p.clone(), held));
    });
    let (pvcs, pvc_stream) = cached!(
        PersistentVolumeClaim,
        "persistentvolumeclaims",
        managed.clone()
    );
    let (services, service_stream) = cached!(Service, "services", managed.clone());
    let (pdbs, pdb_stream) = cached!(PodDisruptionBudget, "poddisruptionbudgets", managed.clone());
    let ctx = Arc::new(reconcile::Ctx {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        members: scrape::MemberClient::new(member_timeout).with_metrics(metrics.clone()),
        cluster_domain,
        pods: pods.clone(),
        pvcs: pvcs.clone(),
        services: services.clone(),
        pdbs: pdbs.clone(),
        metrics: metrics.clone(),
        gate,
    });
    tokio::spawn(recreate_deleted_pods(deleted_rx, crs.clone(), ctx.clone()));
    // Queue bookkeeping for the metrics: note when a watch event asks for a cluster.
    info!(
        namespace = namespace.as_deref().unwrap_or("<all>"),
        "marekvs-operator running"
    );
    let m = metrics.clone();
    let cr_stream = cr_stream.inspect(move |r| {
        if let Ok(cr) = r {
            m.triggered(&cr.namespace().unwrap_or_default(), &cr.name_any());
        }
    });
    let m = metrics.clone();
    let pod_stream = pod_stream.inspect(move |r| note_child(&m, r));
    let m = metrics.clone();
    let pvc_stream = pvc_stream.inspect(move |r| note_child(&m, r));
    let m = metrics.clone();
    let service_stream = service_stream.inspect(move |r| note_child(&m, r));
    let m = metrics.clone();
    let pdb_stream = pdb_stream.inspect(move |r| note_child(&m, r));
    let ready = {
        let (crs, pods, pvcs, services, pdbs, m) = (
            crs.clone(),
            pods.clone(),
            pvcs.clone(),
            services.clone(),
            pdbs.clone(),
            metrics.clone(),
        );
        async move {
            let synced = crs.wait_until_ready().await.is_ok()
                && pods.wait_until_ready().await.is_ok()
                && pvcs.wait_until_ready().await.is_ok()
                && services.wait_until_ready().await.is_ok()
                && pdbs.wait_until_ready().await.is_ok();
            if synced {
                info!("watch caches synced");
                m.ready.store(true, Ordering::Relaxed);
            }
        }
    };
    tokio::spawn(ready);
    Controller::for_stream(cr_stream, crs)
        .owns_stream(pod_stream)
        .owns_stream(service_stream)
        .owns_stream(pdb_stream)
        // PVCs carry no owner reference (they outlive the cluster object): map them by label.
        .watches_stream(pvc_stream, |pvc: PersistentVolumeClaim| {
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
                // Expected for a moment after start: retried in 100 ms.
                Err(kube::runtime::controller::Error::ReconcilerFailed(
                    reconcile::Error::NotSynced,
                    obj,
                )) => debug!(object = %obj, "watch caches not synced yet"),
                Err(e) => warn!("{e}"),
                Ok(_) => {}
            }
        })
        .await;
    Ok(())
}

/// What a cache keeps of an object. managedFields go from every kind: they are most of an
/// object's size.
trait Slim: Resource + Sized {
    fn slim(&mut self) {
        self.managed_fields_mut().clear();
    }
}
impl Slim for MarekvsCluster {}
impl Slim for PersistentVolumeClaim {}
impl Slim for Service {}
impl Slim for PodDisruptionBudget {}
impl Slim for Pod {
    fn slim(&mut self) {
        self.managed_fields_mut().clear();
        reconcile::slim_pod(self);
    }
}

/// One watch's events: fed into its cache (slimmed, see `Slim`), then handed on as the
/// objects to reconcile for. Errors are logged and counted here and go no further (see `run`).
fn cache_and_trigger<K, S>(
    events: S,
    writer: reflector::store::Writer<K>,
    metrics: Arc<telemetry::Metrics>,
    what: &'static str,
    on_delete: impl Fn(&K) + Send + 'static,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Slim + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    events
        .modify(K::slim)
        .reflect(writer)
        // After the cache saw it: whoever acts on a deletion finds the object gone there.
        .inspect(move |e| {
            if let Ok(watcher::Event::Delete(o)) = e {
                on_delete(o);
            }
        })
        .touched_objects()
        .filter(move |r| {
            if let Err(e) = r {
                warn!(watch = what, "watch error (retried with backoff): {e}");
                metrics.watch_errors.inc(what);
            }
            futures::future::ready(r.is_ok())
        })
}

/// A deleted pod, with its cluster's gate if this deletion took it.
type DeletedPod = (Pod, Option<tokio::sync::OwnedMutexGuard<()>>);

/// Re-creates the pod of a member as soon as the watch reports it deleted, beside the
/// controller rather than behind it: the controller runs one pass per cluster at a time, and
/// a pass in flight (writing status takes 10–20 ms) held the re-creation back. The pass that
/// the same event triggers still runs and re-derives everything, after the re-creation's POST
/// (the gate, see `fastpath`); what it finds made already is not made again (409) nor
/// announced twice.
async fn recreate_deleted_pods(
    mut deleted: tokio::sync::mpsc::UnboundedReceiver<DeletedPod>,
    crs: reflector::Store<MarekvsCluster>,
    ctx: Arc<reconcile::Ctx>,
) {
    while let Some((pod, held)) = deleted.recv().await {
        debug!(pod = %pod.name_any(), "pod deleted");
        let (Some(ns), Some(cluster)) = (
            pod.namespace(),
            pod.labels().get(build::LABEL_INSTANCE).cloned(),
        ) else {
            continue;
        };
        let Some(cr) = crs.get(&ObjectRef::new(&cluster).within(&ns)) else {
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            if let Err(e) = reconcile::recreate_deleted(&ctx, &cr).await {
                // The pass triggered by the same event retries it.
                debug!(cluster = %cr.name_any(), "fast re-creation: {e}");
            }
            drop(held);
        });
    }
}

/// Retry pacing of one watch: 250 ms doubling to 5 s, with jitter, reset by any event.
/// Capped at 5 s (client-go's reflector goes to 30 s) so that a cache is at most a few
/// seconds stale after the API server comes back; five watches cost one request a second
/// while it is away.
fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// A child changed: its cluster (the instance label) is due for a reconcile.
fn note_child<K: ResourceExt>(m: &telemetry::Metrics, r: &Result<K, watcher::Error>) {
    if let Ok(o) = r
        && let (Some(ns), Some(name)) = (o.namespace(), o.labels().get(build::LABEL_INSTANCE))
    {
        m.triggered(&ns, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    /// An error passed on to the controller would stall every watch behind its trigger
    /// backoff; here errors are counted and dropped, and the objects still reach the cache.
    /// A deletion is handed to the fast re-creation path once the cache no longer has it.
    #[tokio::test]
    async fn watch_errors_stop_here_and_deletions_reach_the_fast_path() {
        let (cache, writer) = reflector::store::<Pod>();
        let metrics = Arc::new(telemetry::Metrics::default());
        let events = futures::stream::iter(vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("a"))),
            Ok(watcher::Event::InitDone),
            Err(watcher::Error::NoResourceVersion),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Apply(pod("b"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Apply(pod("c"))),
            Ok(watcher::Event::Delete(pod("a"))),
        ]);
        // Deletions reach the fast path after the cache has dropped the object.
        let deleted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let on_delete = {
            let (deleted, cache) = (deleted.clone(), cache.clone());
            move |p: &Pod| {
                let still_cached = cache.get(&ObjectRef::from_obj(p)).is_some();
                deleted.lock().unwrap().push((p.name_any(), still_cached));
            }
        };
        let out: Vec<Result<Pod, watcher::Error>> =
            cache_and_trigger(events, writer, metrics.clone(), "pods", on_delete)
                .collect()
                .await;
        let names: Vec<String> = out
            .iter()
            .map(|r| r.as_ref().expect("no error is handed on").name_any())
            .collect();
        assert_eq!(names, ["a", "b", "c", "a"]);
        assert_eq!(metrics.watch_errors.get("pods"), 3);
        assert_eq!(*deleted.lock().unwrap(), [("a".to_string(), false)]);
        let mut cached: Vec<String> = cache.state().iter().map(|p| p.name_any()).collect();
        cached.sort();
        assert_eq!(cached, ["b", "c"]);
        assert!(cache.state().iter().all(|p| {
            p.metadata
                .managed_fields
                .as_ref()
                .is_none_or(|m| m.is_empty())
        }));
    }
}
