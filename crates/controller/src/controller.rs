//! Wires the watches, their caches and the controller: one watch per kind, each feeding a
//! cache the reconciler reads, and the pod watch's deletions to the fast re-creation path.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use marekvs_api::MarekvsCluster;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::recreate::{DeletedPod, RecreationLock, on_pod_deleted};
use crate::{build, observe, reconcile, scrape, telemetry};

/// How the operator talks to members.
pub struct Members {
    /// Of one scrape or drain call.
    pub timeout: Duration,
    /// Scrapes in flight at once across every cluster.
    pub max_concurrent_scrapes: usize,
    /// Bytes of member answers all reads in flight may hold together.
    pub read_budget_bytes: usize,
}

impl Members {
    fn client(&self, metrics: &Arc<telemetry::Metrics>) -> scrape::MemberClient {
        scrape::MemberClient::new(self.timeout)
            .with_max_concurrent(self.max_concurrent_scrapes)
            .with_read_budget(self.read_budget_bytes)
            .with_metrics(metrics.clone())
    }
}

/// Run the controller until a shutdown signal.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    members: Members,
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
    // A cluster's re-creation lock is taken when the watch reports one of its pods deleted,
    // before the controller sees the event, so that the pass the same deletion triggers lets
    // the re-creation go first (see `recreate`).
    let recreation = Arc::new(RecreationLock::default());
    let inputs = Arc::new(crate::input::Ledger::default());
    let failures = Arc::new(crate::retry::Failures::default());
    let (cr_lock, cr_inputs, cr_failures) = (recreation.clone(), inputs.clone(), failures.clone());
    let (crs, cr_stream) = cached!(
        MarekvsCluster,
        "marekvsclusters",
        watcher::Config::default(),
        move |cr: &MarekvsCluster| {
            let (ns, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
            cr_lock.forget(&ns, &name);
            cr_failures.succeeded(&(ns.clone(), name.clone()));
            cr_inputs.forget(&(ns, name));
        }
    );
    // Deleted pods also go to the fast re-creation path (see `recreate::on_pod_deleted`).
    let (deleted_tx, deleted_rx) = tokio::sync::mpsc::unbounded_channel::<DeletedPod>();
    let pod_lock = recreation.clone();
    let (pods, pod_stream) = cached!(Pod, "pods", managed.clone(), move |p: &Pod| {
        let held = p
            .namespace()
            .zip(p.labels().get(build::LABEL_INSTANCE))
            .and_then(|(ns, cluster)| pod_lock.hold(&ns, cluster));
        let _ = deleted_tx.send((p.clone(), held));
    });
    let (pvcs, pvc_stream) = cached!(
        PersistentVolumeClaim,
        "persistentvolumeclaims",
        managed.clone()
    );
    let (services, service_stream) = cached!(Service, "services", managed.clone());
    let (pdbs, pdb_stream) = cached!(PodDisruptionBudget, "poddisruptionbudgets", managed.clone());
    // Nodes are cluster-wide, whatever namespace the operator watches: a member on a node
    // being drained is moved off it (`core::NodeObs::draining`).
    let (nodes, node_writer) = reflector::store::<Node>();
    let node_stream = cache_and_trigger(
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .backoff(watch_backoff()),
        node_writer,
        metrics.clone(),
        "nodes",
        |_: &Node| {},
    )
    // Only a change a drain makes (cordoned, its taints) wakes a cluster: not its heartbeats.
    .predicate_filter(drain_marks, Default::default());
    let ctx = Arc::new(reconcile::Ctx {
        client: client.clone(),
        events: crate::events::Events::new(
            client.clone(),
            build::MANAGER,
            std::env::var("POD_NAME").ok(),
        ),
        members: members.client(&metrics),
        cluster_domain,
        pods: pods.clone(),
        pvcs: pvcs.clone(),
        services: services.clone(),
        pdbs: pdbs.clone(),
        nodes: nodes.clone(),
        metrics: metrics.clone(),
        recreation,
        inputs,
        passwords: Default::default(),
        admissions: Default::default(),
        failures,
    });
    tokio::spawn(on_pod_deleted(deleted_rx, crs.clone(), ctx.clone()));
    // Queue bookkeeping for the metrics: note when a watch event asks for a cluster.
    info!(
        namespace = namespace.as_deref().unwrap_or("<all>"),
        "marekvs-operator running"
    );
    let cr_stream = cr_stream.predicate_filter(spec_labels_or_annotations, Default::default());
    let m = metrics.clone();
    let cr_stream = cr_stream.inspect(move |r| {
        if let Ok(cr) = r {
            m.triggered(&cr.namespace().unwrap_or_default(), &cr.name_any());
        }
    });
    let pod_stream = noted(pod_stream, &metrics);
    let pvc_stream = noted(pvc_stream, &metrics);
    let service_stream = noted(service_stream, &metrics);
    let pdb_stream = noted(pdb_stream, &metrics);
    let first_pass = (metrics.clone(), crs.clone());
    tokio::spawn(ready_when_synced(
        (
            crs.clone(),
            pods.clone(),
            pvcs.clone(),
            services.clone(),
            pdbs.clone(),
        ),
        metrics.clone(),
    ));
    let node_pods = pods.clone();
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
        // A node cordoned or tainted for a drain (or no longer): every cluster with a member
        // on it.
        .watches_stream(node_stream, move |node: Node| {
            clusters_on_node(&node_pods, &node.name_any())
        })
        .shutdown_on_signal()
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|r| {
            note_first_pass(&first_pass.0, &first_pass.1, &r);
            log_outcome(r);
            futures::future::ready(())
        })
        .await;
    Ok(())
}

/// What of a node a drain changes: whether it is cordoned, and its taints.
fn drain_marks(node: &Node) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let o = observe::node_obs(node);
    (o.name, o.unschedulable, o.taints).hash(&mut h);
    Some(h.finish())
}

/// The clusters with a member pod on node `name`.
fn clusters_on_node(pods: &Store<Pod>, name: &str) -> Vec<ObjectRef<MarekvsCluster>> {
    let mut clusters: Vec<ObjectRef<MarekvsCluster>> = pods
        .state()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
        .filter_map(|p| {
            let ns = p.namespace()?;
            let cluster = p.labels().get(build::LABEL_INSTANCE)?;
            Some(ObjectRef::new(cluster).within(&ns))
        })
        .collect();
    clusters.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    clusters.dedup();
    clusters
}

/// What of the cluster object starts a pass when it changes: its identity and generation (the
/// spec), its labels and its annotations (the adoption opt-in, a user's hints). Not its status:
/// the operator writes it every pass that changed a figure, and each write would start the
/// next pass at once (back-to-back passes, a status write each, measured at 11 a second on real
/// members mid hand-off). The pace between passes is the decision's own (`pace::next_look_ms`),
/// and the children's watches wake it too.
fn spec_labels_or_annotations(cr: &MarekvsCluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cr.metadata.uid.hash(&mut h);
    cr.metadata.generation.hash(&mut h);
    cr.labels().hash(&mut h);
    cr.annotations().hash(&mut h);
    cr.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

type Caches = (
    Store<MarekvsCluster>,
    Store<Pod>,
    Store<PersistentVolumeClaim>,
    Store<Service>,
    Store<PodDisruptionBudget>,
);

/// Report ready (`/readyz`) once every cache holds its first LIST.
///
/// Looked at every 100 ms rather than awaited: a store's readiness is a oneshot with one waker
/// slot, and every pass's `observe::synced` check (polled once, with a no-op waker) takes that
/// slot over, so an await here was never woken and a new leader stayed unready for good.
async fn ready_when_synced(caches: Caches, metrics: Arc<telemetry::Metrics>) {
    let (crs, pods, pvcs, services, pdbs) = caches;
    loop {
        let synced = observe::synced(&crs)
            && observe::synced(&pods)
            && observe::synced(&pvcs)
            && observe::synced(&services)
            && observe::synced(&pdbs);
        if synced {
            info!("watch caches synced");
            metrics.ready.store(true, Ordering::Relaxed);
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Outcome = Result<
    (ObjectRef<MarekvsCluster>, kube::runtime::controller::Action),
    kube::runtime::controller::Error<Error, watcher::Error>,
>;

/// A completed pass counts towards the term's first full pass (see `first_pass`).
fn note_first_pass(metrics: &telemetry::Metrics, crs: &Store<MarekvsCluster>, r: &Outcome) {
    let Ok((obj, _)) = r else { return };
    let key = (obj.namespace.clone().unwrap_or_default(), obj.name.clone());
    metrics.passed(key, || {
        observe::synced(crs).then(|| {
            crs.state()
                .iter()
                .map(|cr| (cr.namespace().unwrap_or_default(), cr.name_any()))
                .collect()
        })
    });
}

/// Log a pass's outcome: expected retries at debug, anything else as a warning.
fn log_outcome(r: Outcome) {
    use kube::runtime::controller::Error::ReconcilerFailed;
    match r {
        // A stale copy of the object: expected now and then, retried at once.
        Err(ReconcilerFailed(e, obj)) if e.code() == Some(409) => {
            debug!(object = %obj, "conflict; retrying: {e}")
        }
        // Expected for a moment after start: retried in 100 ms.
        Err(ReconcilerFailed(Error::NotSynced, obj)) => {
            debug!(object = %obj, "watch caches not synced yet")
        }
        Err(e) => warn!("{e}"),
        Ok(_) => {}
    }
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
impl Slim for Node {
    fn slim(&mut self) {
        self.managed_fields_mut().clear();
        observe::slim_node(self);
    }
}
impl Slim for Pod {
    fn slim(&mut self) {
        self.managed_fields_mut().clear();
        observe::slim_pod(self);
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
/// A child watch's events, each noted in the metrics as a trigger of its cluster's pass.
fn noted<K, S>(
    events: S,
    metrics: &Arc<telemetry::Metrics>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + use<K, S>
where
    K: ResourceExt,
    S: futures::Stream<Item = Result<K, watcher::Error>>,
{
    let m = metrics.clone();
    events.inspect(move |r| note_child(&m, r))
}

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

    /// The per-pass `synced` checks, polled once each with a no-op waker, must not keep
    /// `/readyz` from turning ready once every cache holds its first LIST.
    #[tokio::test]
    async fn ready_once_synced_although_passes_checked_the_caches_meanwhile() {
        let (crs, mut crs_w) = reflector::store::<MarekvsCluster>();
        let (pods, mut pods_w) = reflector::store::<Pod>();
        let (pvcs, mut pvcs_w) = reflector::store::<PersistentVolumeClaim>();
        let (services, mut services_w) = reflector::store::<Service>();
        let (pdbs, mut pdbs_w) = reflector::store::<PodDisruptionBudget>();
        let metrics = Arc::new(telemetry::Metrics::default());
        let caches = (
            crs.clone(),
            pods.clone(),
            pvcs.clone(),
            services.clone(),
            pdbs.clone(),
        );
        let waiting = tokio::spawn(ready_when_synced(caches, metrics.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Passes look at the caches before they are synced.
        assert!(!observe::synced(&crs) && !observe::synced(&pods) && !observe::synced(&pvcs));
        assert!(!observe::synced(&services) && !observe::synced(&pdbs));
        assert!(!metrics.ready.load(Ordering::Relaxed));
        crs_w.apply_watcher_event(&watcher::Event::InitDone);
        pods_w.apply_watcher_event(&watcher::Event::InitDone);
        pvcs_w.apply_watcher_event(&watcher::Event::InitDone);
        services_w.apply_watcher_event(&watcher::Event::InitDone);
        pdbs_w.apply_watcher_event(&watcher::Event::InitDone);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("ready within 5 s of the caches syncing")
            .unwrap();
        assert!(metrics.ready.load(Ordering::Relaxed));
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
