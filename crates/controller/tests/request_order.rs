//! The exact order of a pass's requests, without a cluster.
//!
//! The API server is a `tower_test` mock under a real `kube::Client` (the pattern of kube-rs's
//! controller-rs `fixtures.rs`): a task answers each expected request in turn, from a script,
//! and notes any request that is not the next one expected. The members are tiny HTTP servers,
//! one per pod, on their own loopback address (`127.x.y.z`, port 9121 as in production: Linux
//! routes all of 127.0.0.0/8 on `lo`), so `MemberClient` reaches them at the pod IP exactly as
//! it reaches a real node. Both write to one shared log, so a test asserts the interleaving of
//! API requests and member calls: the record (status) before the act (`/drain`, pod DELETE).
//!
//! Events (`events.k8s.io`) are answered wherever they come and kept out of the asserted
//! sequence: a pass reports them on a best-effort basis (a failed publication never stops it)
//! and they change nothing the next pass reads. Their reasons are asserted on their own.
//!
//! A pass is run through `reconcile::pass`, the pipeline itself; its `Next` is what
//! `reconcile` turns into the controller's requeue (`AwaitChange` is `Action::await_change()`).
//!
//! Each member also answers its RESP port (6379) with its view by identity, not logged.
//!
//! The concurrent `/metrics` scrapes of one pass arrive in any order among themselves: a run
//! of them is compared as a set (sorted), everything else in exact order.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, Uri};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::client::Body;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Client, Resource};
use marekvs_api::MarekvsCluster;
use marekvs_operator::build::{
    self, ANNOTATION_DRAINED_AT, ANNOTATION_DRAINED_RESTARTS, ANNOTATION_TEMPLATE_HASH,
    LABEL_CLIENT_TRAFFIC, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, LABEL_ORDINAL, MANAGER,
    PORT_METRICS,
};
use marekvs_operator::error::Error;
use marekvs_operator::events::Events;
use marekvs_operator::reconcile::{Ctx, NAME_TAKEN_LOOK_AGAIN, Next, now_ms, pass};
use marekvs_operator::recreate::RecreationLock;
use marekvs_operator::scrape::MemberClient;
use marekvs_operator::status::to_time;
use marekvs_operator::telemetry::Metrics;
use marekvs_operator::views::PORT_RESP;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower_test::mock::{self, Handle};

const NS: &str = "ns";
const NAME: &str = "demo";
const MEMBERS: u32 = 4;
const CLUSTER_DOMAIN: &str = "cluster.local";
const STATUS_PATH: &str = "/apis/marekvs.io/v1alpha1/namespaces/ns/marekvsclusters/demo/status";

type Shared<T> = Arc<Mutex<Vec<T>>>;

fn pod_path(o: u32) -> String {
    format!("/api/v1/namespaces/{NS}/pods/{NAME}-{o}")
}

/// A request the API mock received: its line in the log, its query and its JSON body.
#[derive(Clone, Debug)]
struct Sent {
    line: String,
    query: String,
    body: Value,
}

/// How the API mock answers an expected request.
#[derive(Clone, Debug)]
enum Reply {
    /// 200 with this object.
    Ok(Value),
    /// A `Status` failure with this code.
    Fail(u16),
}

impl Reply {
    fn response(&self) -> Response<Body> {
        let (code, body) = match self {
            Reply::Ok(v) => (200, v.clone()),
            Reply::Fail(code) => (
                *code,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "answered by the test's API mock", "reason": "Conflict", "code": code}),
            ),
        };
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    }
}

/// One step of an expected sequence.
enum Step {
    /// Every member's `/metrics`, in any order among themselves.
    Scrapes,
    /// An API request and the mock's answer to it.
    Api(Method, String, Reply),
    /// A call on a member's HTTP port.
    Member(u32, Method, &'static str),
}

fn status_write(reply: Reply) -> Step {
    Step::Api(Method::PATCH, STATUS_PATH.into(), reply)
}

fn line(method: &Method, path: &str) -> String {
    format!("API {method} {path}")
}

fn member_line(o: u32, method: &Method, path: &str) -> String {
    format!("{NAME}-{o} {method} {path}")
}

/// A run of concurrent scrapes is a set: sort each run of consecutive `/metrics` lines.
fn normalized(log: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut run: Vec<String> = Vec::new();
    for l in log {
        if l.ends_with(" GET /metrics") {
            run.push(l.clone());
        } else {
            run.sort();
            out.append(&mut run);
            out.push(l.clone());
        }
    }
    run.sort();
    out.append(&mut run);
    out
}

/// The API server: answers every request in arrival order. Events anywhere; every other
/// request must be the next one of the script, or it is noted and answered 500 (so the pass
/// stops there rather than act on an answer nobody meant to give).
async fn api_server(
    mut handle: Handle<Request<Body>, Response<Body>>,
    script: Shared<(Method, String, Reply)>,
    log: Shared<String>,
    sent: Shared<Sent>,
    failures: Shared<String>,
) {
    while let Some((request, respond)) = handle.next_request().await {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or_default().to_string();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if path.starts_with("/apis/events.k8s.io/") {
            let reason = body["reason"].as_str().unwrap_or("?");
            log.lock().unwrap().push(format!("event {reason}"));
            respond.send_response(
                Response::builder()
                    .status(201)
                    .body(Body::from(bytes.to_vec()))
                    .unwrap(),
            );
            continue;
        }
        let got = line(&method, &path);
        log.lock().unwrap().push(got.clone());
        sent.lock().unwrap().push(Sent {
            line: got.clone(),
            query,
            body,
        });
        let next = {
            let mut script = script.lock().unwrap();
            (!script.is_empty()).then(|| script.remove(0))
        };
        let reply = match next {
            Some((m, p, reply)) if m == method && p == path => reply,
            Some((m, p, _)) => {
                failures
                    .lock()
                    .unwrap()
                    .push(format!("expected {}, got {got}", line(&m, &p)));
                Reply::Fail(500)
            }
            None => {
                failures.lock().unwrap().push(format!("unexpected {got}"));
                Reply::Fail(500)
            }
        };
        respond.send_response(reply.response());
    }
}

/// Figures of a settled member of a 4-member cluster: converged views, nothing
/// under-replicated or joining, counters as in [`healthy_status`]; its anti-entropy rounds
/// and the RESP bytes it read (the operator's view reads) as the world has them.
fn metrics(rounds: u64, input: u64) -> String {
    format!(
        "marekvs_cluster_members 4\nmarekvs_cluster_underreplicated_partitions 0\n\
         marekvs_join_gate_pending_pids 0\nmarekvs_bootstraps_completed_total 1\n\
         marekvs_ae_repair_ops_total 0\nmarekvs_commands_total{{cmd=\"get\"}} 10\n\
         marekvs_ring_ops 0\nmarekvs_ae_rounds_total {rounds}\n\
         marekvs_net_input_bytes_total {input}\nmarekvs_uptime_seconds 600\n\
         marekvs_repl_inflight_bytes 0\nmarekvs_ring_bytes 0\n\
         marekvs_repl_ops_applied_total 0\n"
    )
}

/// A member's counters the world moves: anti-entropy rounds (shared), RESP bytes read (its own).
#[derive(Clone, Default)]
struct Counters {
    rounds: Arc<AtomicU64>,
    input: Arc<AtomicU64>,
    /// The ordinal whose id the member answers `CLUSTER MYID` with when it is asked alone (not
    /// with `CLUSTER NODES`, as the identity check before a drain asks); `u32::MAX`: its own.
    alone_as: Arc<AtomicU32>,
}

/// A member's HTTP port: `/metrics` and `/drain`, each call logged.
async fn member_server(listener: TcpListener, o: u32, log: Shared<String>, c: Counters) {
    let router = axum::Router::new().fallback(move |method: Method, uri: Uri| {
        let (log, c) = (log.clone(), c.clone());
        async move {
            log.lock()
                .unwrap()
                .push(member_line(o, &method, uri.path()));
            match uri.path() {
                "/metrics" => (
                    StatusCode::OK,
                    metrics(
                        c.rounds.load(Ordering::Relaxed),
                        c.input.load(Ordering::Relaxed),
                    ),
                ),
                "/drain" => (StatusCode::OK, "leaving".to_string()),
                _ => (StatusCode::NOT_FOUND, String::new()),
            }
        }
    });
    let _ = axum::serve(listener, router).await;
}

/// A member's RESP port: every connection gets its id (`CLUSTER MYID`) and a converged view
/// of the 4 members (`CLUSTER NODES`), by identity. Not logged: reads change nothing.
async fn member_resp(
    listener: TcpListener,
    o: u32,
    ips: Vec<String>,
    c: Counters,
    strangers: usize,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let id = |o: u32| format!("{o:040x}");
    let mut nodes: String = (0..MEMBERS)
        .map(|p| {
            format!(
                "{} {}:6379@7373 master - 0 0 0 connected\n",
                id(p),
                ips[p as usize]
            )
        })
        .collect();
    // A hostile member's view: strangers of its own (so views disagree), each with the longest
    // address a node may give.
    let host = "h".repeat(253);
    for n in 0..strangers {
        nodes += &format!(
            "{:08x}{:032x} {host}:6379@7373 master - 0 0 0 connected\n",
            0xdead_0000_u32 + o,
            n
        );
    }

    let answer = format!("${}\r\n{}\r\n${}\r\n{nodes}\r\n", 40, id(o), nodes.len());
    while let Ok((mut s, _)) = listener.accept().await {
        let (mut answer, c) = (answer.clone(), c.clone());
        tokio::spawn(async move {
            let mut buf = [0u8; 256];
            // Counted as read, as a node counts `marekvs_net_input_bytes_total`.
            let mut authed = false;
            let mut alone = false;
            if let Ok(n) = s.read(&mut buf).await {
                c.input.fetch_add(n as u64, Ordering::Relaxed);
                authed = buf[..n].windows(4).any(|w| w == b"AUTH");
                alone = !buf[..n].windows(5).any(|w| w == b"NODES");
            }
            let alone_as = c.alone_as.load(Ordering::Relaxed);
            if alone && alone_as != u32::MAX {
                answer = format!("${}\r\n{}\r\n", 40, id(alone_as));
            }
            let answer = if authed {
                format!("+OK\r\n{answer}")
            } else {
                answer
            };
            let _ = s.write_all(answer.as_bytes()).await;
        });
    }
}

/// One loopback address per member, all on the production ports (metrics, then RESP): a
/// block `127.a.b.1..=4` free on this machine (another test, or another checkout's run, may
/// hold one).
async fn bind_members() -> (Vec<String>, Vec<(TcpListener, TcpListener)>) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(7919);
    for _ in 0..200 {
        let n = seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let (a, b) = (160 + (n / 256) % 40, n % 256);
        let ips: Vec<String> = (1..=MEMBERS).map(|d| format!("127.{a}.{b}.{d}")).collect();
        let mut listeners = Vec::new();
        for ip in &ips {
            let metrics = TcpListener::bind((ip.as_str(), PORT_METRICS as u16)).await;
            let resp = TcpListener::bind((ip.as_str(), PORT_RESP)).await;
            match (metrics, resp) {
                (Ok(m), Ok(r)) => listeners.push((m, r)),
                _ => break,
            }
        }
        if listeners.len() == ips.len() {
            return (ips, listeners);
        }
    }
    panic!("no free block of loopback addresses for the members");
}

fn ready_store<K>(objects: Vec<K>) -> (Store<K>, Writer<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (reader, writer)
}

fn labels(o: Option<u32>) -> Value {
    let mut l = json!({LABEL_NAME: "marekvs", LABEL_INSTANCE: NAME, LABEL_MANAGED_BY: MANAGER});
    if let Some(o) = o {
        l[LABEL_ORDINAL] = json!(o.to_string());
    }
    l
}

/// A ready pod on `ip`, running the current pod spec and taking client traffic (as the
/// operator makes it); drained, its client traffic cut, when `drained`.
fn pod(cr: &MarekvsCluster, o: u32, ip: &str, drained: bool) -> Pod {
    let mut p = unlabelled_pod(cr, o, ip, drained);
    let traffic = if drained { "off" } else { "on" };
    p.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_CLIENT_TRAFFIC.into(), traffic.into());
    p
}

/// [`pod`] as an operator before the client-traffic label made it.
fn unlabelled_pod(cr: &MarekvsCluster, o: u32, ip: &str, drained: bool) -> Pod {
    let mut annotations = json!({ANNOTATION_TEMPLATE_HASH: build::desired_template_hash(cr, o, CLUSTER_DOMAIN).unwrap()});
    if drained {
        annotations[ANNOTATION_DRAINED_AT] = json!("2026-01-01T00:00:00Z");
        annotations[ANNOTATION_DRAINED_RESTARTS] = json!("0");
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("{NAME}-{o}"), "namespace": NS, "uid": format!("uid-{NAME}-{o}"),
            "labels": labels(Some(o)), "annotations": annotations,
            // Controlled by the cluster object (`cluster`'s uid), as the operator makes it.
            "ownerReferences": [{"apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
                "name": NAME, "uid": "uid-demo", "controller": true}]},
        "status": {"phase": "Running", "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "marekvs", "image": "marekvs:1", "imageID": "",
                "ready": true, "restartCount": 0}]}
    }))
    .unwrap()
}

fn pvc(o: u32) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": format!("data-{NAME}-{o}"), "namespace": NS,
            "uid": format!("uid-data-{NAME}-{o}"), "labels": labels(Some(o)),
            // Stamped with the cluster object's uid, as the operator makes it, and served
            // from since its member first turned ready.
            "annotations": {"marekvs.io/cluster-uid": "uid-demo",
                "marekvs.io/served-since": "2026-01-01T00:00:00Z"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
        "status": {"capacity": {"storage": "10Gi"}}
    }))
    .unwrap()
}

/// A child as the cache holds it once applied: with the hash of its content, so the pass does
/// not apply it again.
/// A child as the operator last applied it (with its applied-hash annotation).
fn applied<K: serde::Serialize + serde::de::DeserializeOwned>(
    desired: Result<K, marekvs_operator::error::Error>,
) -> K {
    let (value, _) = build::applied(&desired.unwrap()).unwrap();
    serde_json::from_value(value).unwrap()
}

fn cluster(replication_factor: i32, mut status: Value) -> MarekvsCluster {
    // The gossip cluster name is recorded in a pass of its own first (tested alone below).
    if status.get("gossipCluster").is_none() && status.is_object() {
        status["gossipCluster"] = json!("marekvs");
    }
    serde_json::from_value(json!({
        "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-demo", "resourceVersion": "41",
            "generation": 2},
        "spec": {"image": "marekvs:1", "nodes": 3, "replicationFactor": replication_factor},
        "status": status
    }))
    .unwrap()
}

fn time_ago(ms: i64) -> Value {
    serde_json::to_value(to_time(now_ms() - ms)).unwrap()
}

/// 4 Active members, all scraped with the figures of [`METRICS`], whose re-replication
/// counters have been quiet for two minutes (the settle window is 10 s): spec.nodes 3 with
/// replicationFactor 2 wants one member fewer, and every precondition of a removal holds.
fn healthy_status() -> Value {
    let members: Vec<Value> = (0..MEMBERS)
        .map(|o| {
            json!({"name": format!("{NAME}-{o}"), "ordinal": o, "phase": "Active", "ready": true,
                "updated": true, "countersChangedAt": time_ago(120_000),
                "metrics": {"scrapedAt": time_ago(1_000), "viewMembers": 4,
                    "underreplicatedPartitions": 0, "joinGatePending": 0,
                    "bootstrapsCompletedTotal": 1, "aeRepairOpsTotal": 0, "commandsTotal": 10}})
        })
        .collect();
    json!({
        "phase": "Healthy",
        "instanceNames": (0..MEMBERS).map(|o| format!("{NAME}-{o}")).collect::<Vec<_>>(),
        "members": members,
    })
}

/// A pass's world: the mocked API server, the members, and the caches and context a pass
/// reads.
struct World {
    ctx: Arc<Ctx>,
    /// Every member's `marekvs_ae_rounds_total`.
    rounds: Arc<AtomicU64>,
    /// Per member, [`Counters::alone_as`].
    alone_as: Vec<Arc<AtomicU32>>,
    log: Shared<String>,
    sent: Shared<Sent>,
    script: Shared<(Method, String, Reply)>,
    failures: Shared<String>,
    tasks: Vec<JoinHandle<()>>,
    _writers: (
        Writer<Pod>,
        Writer<PersistentVolumeClaim>,
        Writer<Service>,
        Writer<PodDisruptionBudget>,
    ),
}

impl Drop for World {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl World {
    /// Members `0..4` with ready pods (those in `drained` drained), their PVCs, and the
    /// Services and the PDB up to date.
    async fn start(cr: &MarekvsCluster, drained: &[u32]) -> World {
        World::start_as(cr, drained, false).await
    }

    /// [`World::start`] as an operator before the client-traffic label left it (`before_label`):
    /// pods without the label, the client Service selecting every member.
    async fn start_as(cr: &MarekvsCluster, drained: &[u32], before_label: bool) -> World {
        World::start_with(cr, drained, before_label, 0).await
    }

    /// [`World::start_as`] with members whose views also list `strangers` strangers each.
    async fn start_with(
        cr: &MarekvsCluster,
        drained: &[u32],
        before_label: bool,
        strangers: usize,
    ) -> World {
        let log: Shared<String> = Arc::default();
        let (ips, listeners) = bind_members().await;
        let mut tasks = Vec::new();
        let rounds = Arc::new(AtomicU64::new(100));
        let alone_as: Vec<Arc<AtomicU32>> = (0..MEMBERS)
            .map(|_| Arc::new(AtomicU32::new(u32::MAX)))
            .collect();
        for (o, (l, r)) in (0..MEMBERS).zip(listeners) {
            let c = Counters {
                rounds: rounds.clone(),
                input: Arc::default(),
                alone_as: alone_as[o as usize].clone(),
            };
            tasks.push(tokio::spawn(member_server(l, o, log.clone(), c.clone())));
            tasks.push(tokio::spawn(member_resp(r, o, ips.clone(), c, strangers)));
        }
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, NS);
        let (sent, script, failures): (Shared<Sent>, Shared<_>, Shared<String>) =
            Default::default();
        tasks.push(tokio::spawn(api_server(
            handle,
            script.clone(),
            log.clone(),
            sent.clone(),
            failures.clone(),
        )));
        let make = if before_label { unlabelled_pod } else { pod };
        let pods = (0..MEMBERS)
            .map(|o| make(cr, o, &ips[o as usize], drained.contains(&o)))
            .collect();
        let (pods, pod_writer) = ready_store(pods);
        let (pvcs, pvc_writer) = ready_store((0..MEMBERS).map(pvc).collect());
        let mut client_svc = build::client_service(cr).unwrap();
        if before_label {
            let selector = client_svc.spec.as_mut().unwrap().selector.as_mut().unwrap();
            selector.remove(LABEL_CLIENT_TRAFFIC);
        }
        let (services, service_writer) = ready_store(vec![
            applied(build::headless_service(cr)),
            applied(Ok(client_svc)),
        ]);
        let (pdbs, pdb_writer) = ready_store(vec![applied(build::pdb(cr))]);
        let ctx = Arc::new(Ctx {
            client: client.clone(),
            events: Events::new(client, MANAGER, None),
            members: MemberClient::new(Duration::from_secs(2)),
            cluster_domain: CLUSTER_DOMAIN.into(),
            pods,
            pvcs,
            services,
            pdbs,
            nodes: kube::runtime::reflector::store::<Node>().0,
            metrics: Arc::new(Metrics::default()),
            recreation: Arc::new(RecreationLock::default()),
            inputs: Default::default(),
            passwords: Default::default(),
            admissions: Default::default(),
            failures: Default::default(),
        });
        World {
            ctx,
            rounds,
            alone_as,
            log,
            sent,
            script,
            failures,
            tasks,
            _writers: (pod_writer, pvc_writer, service_writer, pdb_writer),
        }
    }

    /// Run one pass of `cr` against `steps`; returns its result and the requests sent.
    async fn pass(
        &self,
        cr: &MarekvsCluster,
        steps: Vec<Step>,
    ) -> (Result<Next, Error>, Vec<Sent>) {
        self.log.lock().unwrap().clear();
        self.sent.lock().unwrap().clear();
        let mut expected = Vec::new();
        {
            let mut script = self.script.lock().unwrap();
            script.clear();
            for step in steps {
                match step {
                    Step::Scrapes => expected
                        .extend((0..MEMBERS).map(|o| member_line(o, &Method::GET, "/metrics"))),
                    Step::Api(method, path, reply) => {
                        expected.push(line(&method, &path));
                        script.push((method, path, reply));
                    }
                    Step::Member(o, method, path) => expected.push(member_line(o, &method, path)),
                }
            }
        }
        let result = pass(cr, &self.ctx).await;
        let log = self.log.lock().unwrap().clone();
        let calls: Vec<String> = log
            .iter()
            .filter(|l| !l.starts_with("event "))
            .cloned()
            .collect();
        assert_eq!(
            normalized(&calls),
            expected,
            "the pass's requests, in order (full log with events: {log:#?})"
        );
        assert_eq!(
            *self.failures.lock().unwrap(),
            Vec::<String>::new(),
            "requests out of script"
        );
        assert!(
            self.script.lock().unwrap().is_empty(),
            "expected requests never sent"
        );
        (result, self.sent.lock().unwrap().clone())
    }

    /// Member `o`'s pod as the cache holds it, as the API server would answer a GET of it.
    fn pod(&self, o: u32) -> Value {
        let pod = self
            .ctx
            .pods
            .get(&reflector::ObjectRef::new(&format!("{NAME}-{o}")).within(NS))
            .expect("the member's pod");
        serde_json::to_value(&*pod).unwrap()
    }

    fn events(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.strip_prefix("event ").map(str::to_string))
            .collect()
    }
}

/// The cluster object as the API server would answer a write of it.
fn answer(cr: &MarekvsCluster) -> Reply {
    Reply::Ok(serde_json::to_value(cr).unwrap())
}

fn pod_answer(o: u32) -> Reply {
    Reply::Ok(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{NAME}-{o}"), "namespace": NS, "uid": format!("uid-{NAME}-{o}")}}))
}

fn sent_to<'a>(sent: &'a [Sent], method: &Method, path: &str) -> &'a Sent {
    let l = line(method, path);
    sent.iter()
        .find(|s| s.line == l)
        .unwrap_or_else(|| panic!("{l} not sent"))
}

/// The status a write sent: what the next pass reads back.
fn written_status(sent: &[Sent]) -> Value {
    sent_to(sent, &Method::PATCH, STATUS_PATH).body["status"].clone()
}

fn next_version(cr: &MarekvsCluster, status: Value) -> MarekvsCluster {
    let mut next = cr.clone();
    next.status = Some(serde_json::from_value(status).unwrap());
    let rv: u64 = cr
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    next.metadata.resource_version = Some((rv + 1).to_string());
    next
}

/// A removal from its start to its pod's deletion: each pass writes its record before it acts,
/// and the victim's pod is deleted only after the drain and the hand-off, after the status
/// write that records the step.
#[tokio::test]
async fn a_removal_is_recorded_before_each_of_its_actions() {
    // Pass 1: every precondition holds; the removal of demo-3 is recorded, then (only then)
    // its client traffic is cut: a label on its pod.
    let cr = cluster(2, healthy_status());
    let world = World::start(&cr, &[]).await;
    let (result, sent) = world
        .pass(
            &cr,
            vec![
                Step::Scrapes,
                status_write(answer(&cr)),
                Step::Api(Method::PATCH, pod_path(3), pod_answer(3)),
            ],
        )
        .await;
    assert_eq!(
        result.unwrap(),
        Next::LookAgainIn(Duration::from_millis(50)),
        "a new step is acted on at once"
    );
    let write = sent_to(&sent, &Method::PATCH, STATUS_PATH);
    assert_eq!(
        write.body["metadata"]["resourceVersion"], "41",
        "conditional on the version decided on"
    );
    assert!(
        write.query.contains("fieldManager=marekvs-operator") && write.query.contains("force=true"),
        "{}",
        write.query
    );
    let removal = &write.body["status"]["removal"];
    assert_eq!(removal["member"], "demo-3");
    assert_eq!(removal["reason"], "HighestOrdinal");
    assert_eq!(removal["step"], "Draining");
    assert_eq!(
        sent_to(&sent, &Method::PATCH, &pod_path(3)).body["metadata"]["labels"]
            [LABEL_CLIENT_TRAFFIC],
        "off"
    );
    assert_eq!(world.events(), ["ScaleDownStarted"]);

    // Pass 2, reading that record back: the step's status first, then the victim's pod read
    // past the cache (still the pod observed), /drain on it, then the drain recorded on that
    // pod (the patch names its uid).
    let cr = next_version(&cr, written_status(&sent));
    let victim = world.pod(3);
    let (result, sent) = world
        .pass(
            &cr,
            vec![
                Step::Scrapes,
                status_write(answer(&cr)),
                Step::Api(Method::GET, pod_path(3), Reply::Ok(victim.clone())),
                Step::Member(3, Method::GET, "/drain"),
                Step::Api(Method::PATCH, pod_path(3), pod_answer(3)),
                // The label again: this world's pod cache never sees pass 1's patch, and the
                // cut is level-triggered (re-sent while the pod is not seen off).
                Step::Api(Method::PATCH, pod_path(3), pod_answer(3)),
            ],
        )
        .await;
    assert_eq!(
        result.unwrap(),
        Next::LookAgainIn(Duration::from_millis(250)),
        "a removal waiting on its victim is looked at at the gate's pace"
    );
    let status = written_status(&sent);
    assert_eq!(status["removal"]["step"], "Draining");
    assert_eq!(status["removal"]["member"], "demo-3");
    let annotations = &sent_to(&sent, &Method::PATCH, &pod_path(3)).body["metadata"]["annotations"];
    assert!(
        annotations[ANNOTATION_DRAINED_AT].is_string(),
        "{annotations}"
    );
    assert_eq!(annotations[ANNOTATION_DRAINED_RESTARTS], "0");
    assert_eq!(
        sent_to(&sent, &Method::PATCH, &pod_path(3)).body["metadata"]["uid"],
        "uid-demo-3",
        "only the pod observed"
    );
    assert_eq!(world.events(), Vec::<String>::new());

    // The same pass where the pod was re-created under its name meanwhile (another uid): no
    // /drain to an address that may no longer be the member's, nothing recorded.
    let mut recreated = victim.clone();
    recreated["metadata"]["uid"] = json!("uid-demo-3-new");
    let (result_again, _) = world
        .pass(
            &cr,
            vec![
                Step::Scrapes,
                status_write(answer(&cr)),
                Step::Api(Method::GET, pod_path(3), Reply::Ok(recreated)),
                Step::Api(Method::PATCH, pod_path(3), pod_answer(3)),
            ],
        )
        .await;
    result_again.unwrap();

    // The same pass where the pod is still the one observed, but its address answers
    // `CLUSTER MYID`, asked alone just before the drain, as node 7: another node's process.
    // No /drain, nothing recorded.
    world.alone_as[3].store(7, Ordering::Relaxed);
    let (result_again, _) = world
        .pass(
            &cr,
            vec![
                Step::Scrapes,
                status_write(answer(&cr)),
                Step::Api(Method::GET, pod_path(3), Reply::Ok(victim.clone())),
                Step::Api(Method::PATCH, pod_path(3), pod_answer(3)),
            ],
        )
        .await;
    result_again.unwrap();
    world.alone_as[3].store(u32::MAX, Ordering::Relaxed);

    // And where the pod observed has ended (Failed: its IP let go, maybe another pod's now).
    let mut ended = victim.clone();
    ended["status"]["phase"] = json!("Failed");
    let (result_again, _) = world
        .pass(
            &cr,
            vec![
                Step::Scrapes,
                status_write(answer(&cr)),
                Step::Api(Method::GET, pod_path(3), Reply::Ok(ended)),
                Step::Api(Method::PATCH, pod_path(3), pod_answer(3)),
            ],
        )
        .await;
    result_again.unwrap();
    drop(world);

    // Pass 3: the victim is drained and its hand-off has been quiet past the settle window.
    // This operator has no earlier reading of its RESP input (a new World: as after a
    // restart), so it cannot tell that no client wrote to it: it holds, and its count of
    // anti-entropy rounds starts from here.
    let mut status = status;
    status["removal"]["step"] = json!("HandingOff");
    status["removal"]["stepStartedAt"] = time_ago(60_000);
    let cr = next_version(&cr, status);
    let world = World::start(&cr, &[3]).await;
    let (_, sent) = world
        .pass(&cr, vec![Step::Scrapes, status_write(answer(&cr))])
        .await;
    let status = written_status(&sent);
    assert_eq!(status["handoffHold"]["reason"], "LeaverBacklog");
    assert_eq!(status["handoffHold"]["moving"], "AntiEntropy");
    let victim = &status["members"][3];
    assert_eq!(victim["quietReset"], "Unknown");
    assert_eq!(victim["roundsAtQuiet"], 100);
    // Pass 4: no client input since, and rounds 101..=106 began (107 is under way): the
    // Deleting step is written, then (only then) its pod is deleted, that pod exactly.
    world.rounds.store(107, Ordering::Relaxed);
    let cr = next_version(&cr, status);
    let (result, sent) = world
        .pass(
            &cr,
            vec![
                Step::Scrapes,
                status_write(answer(&cr)),
                Step::Api(Method::DELETE, pod_path(3), pod_answer(3)),
            ],
        )
        .await;
    assert_eq!(
        result.unwrap(),
        Next::LookAgainIn(Duration::from_millis(50))
    );
    assert_eq!(written_status(&sent)["removal"]["step"], "Deleting");
    let delete = sent_to(&sent, &Method::DELETE, &pod_path(3));
    assert_eq!(delete.body["preconditions"]["uid"], "uid-demo-3");
}

/// A status write answered 409 (our copy was stale): the pass fails and acts on nothing, the
/// drain of a victim and the deletion of its pod alike.
#[tokio::test]
async fn a_conflicting_status_write_stops_the_pass_before_any_action() {
    // A removal at Draining: the pass would call /drain after its write.
    let mut status = healthy_status();
    status["phase"] = json!("ScalingDown");
    status["removal"] = json!({"member": "demo-3", "ordinal": 3, "reason": "HighestOrdinal",
        "step": "Draining", "startedAt": time_ago(5_000), "stepStartedAt": time_ago(5_000)});
    let cr = cluster(2, status.clone());
    let world = World::start(&cr, &[]).await;
    let (result, _) = world
        .pass(&cr, vec![Step::Scrapes, status_write(Reply::Fail(409))])
        .await;
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Record { .. }), "{err}");
    assert_eq!(err.code(), Some(409));
    assert_eq!(world.events(), Vec::<String>::new());
    drop(world);

    // A drained victim past its hand-off: the pass would delete its pod after its write.
    status["removal"]["step"] = json!("HandingOff");
    status["removal"]["stepStartedAt"] = time_ago(60_000);
    let cr = cluster(2, status);
    let world = World::start(&cr, &[3]).await;
    let (result, _) = world
        .pass(&cr, vec![Step::Scrapes, status_write(Reply::Fail(409))])
        .await;
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Record { .. }), "{err}");
    assert_eq!(err.code(), Some(409));
    assert_eq!(world.events(), Vec::<String>::new());
}

/// A spec the operator cannot act on: one status write saying so, nothing else (no scrape, no
/// child applied, no action), and the pass waits for the object to change.
#[tokio::test]
async fn an_invalid_spec_is_written_once_and_nothing_else() {
    let cr = cluster(0, healthy_status());
    let world = World::start(&cr, &[]).await;
    let (result, sent) = world.pass(&cr, vec![status_write(answer(&cr))]).await;
    assert_eq!(result.unwrap(), Next::AwaitChange);
    let status = written_status(&sent);
    let ready = ready_condition(&status);
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "InvalidSpec");
    // The pass is recorded (the operator looked, and waits for a change).
    assert!(status["lastPassTime"].is_string(), "{status}");
    assert_eq!(status["operatorVersion"], env!("CARGO_PKG_VERSION"));
    // Everything else is as it was.
    let mut rest = status.clone();
    let mut before = serde_json::to_value(cr.status.as_ref().unwrap()).unwrap();
    for field in ["conditions", "lastPassTime", "operatorVersion"] {
        rest.as_object_mut().unwrap().remove(field);
        before.as_object_mut().unwrap().remove(field);
    }
    assert_eq!(rest, before);
    assert_eq!(world.events(), Vec::<String>::new());
}

/// The upgrade that brought the client-traffic label: the pods made before it get "on" (each
/// patch naming its pod's uid) before the client Service is applied with the selector that
/// requires it, so the Service never selects fewer members; the headless Service and the PDB
/// are not touched. The next pass, its cache up to date, sends neither again.
#[tokio::test]
async fn pods_are_labelled_for_client_traffic_before_the_client_service_selects_the_label() {
    let mut cr = cluster(2, healthy_status());
    cr.spec.nodes = MEMBERS as i32;
    let world = World::start_as(&cr, &[], true).await;
    let service_path = format!("/api/v1/namespaces/{NS}/services/{NAME}");
    let mut steps: Vec<Step> = (0..MEMBERS)
        .map(|o| Step::Api(Method::PATCH, pod_path(o), pod_answer(o)))
        .collect();
    steps.push(Step::Api(
        Method::PATCH,
        service_path.clone(),
        Reply::Ok(serde_json::to_value(applied(build::client_service(&cr))).unwrap()),
    ));
    steps.extend([Step::Scrapes, status_write(answer(&cr))]);
    let (result, sent) = world.pass(&cr, steps).await;
    result.unwrap();
    for o in 0..MEMBERS {
        let patch = &sent_to(&sent, &Method::PATCH, &pod_path(o)).body;
        assert_eq!(
            patch,
            &json!({"metadata": {"uid": format!("uid-{NAME}-{o}"),
                "labels": {LABEL_CLIENT_TRAFFIC: "on"}}})
        );
    }
    let apply = sent_to(&sent, &Method::PATCH, &service_path);
    assert!(
        apply.query.contains("fieldManager=marekvs-operator"),
        "{}",
        apply.query
    );
    assert_eq!(
        apply.body["spec"]["selector"],
        json!({LABEL_NAME: "marekvs", LABEL_INSTANCE: NAME, LABEL_CLIENT_TRAFFIC: "on"})
    );
    drop(world);

    // Once the caches show the label and the new selector: no label patch, no apply.
    let cr = next_version(&cr, written_status(&sent));
    let world = World::start(&cr, &[]).await;
    let (result, _) = world
        .pass(&cr, vec![Step::Scrapes, status_write(answer(&cr))])
        .await;
    result.unwrap();
}

/// A quiet cluster's status is written once a minute, to record that a pass ran
/// (`lastPassTime`, for `kubectl mkv status` to tell a quiet cluster from one no operator acts
/// on), and not on every pass: the pass after a write sends none; a pass a minute after the
/// last recorded one writes the same status with only `lastPassTime` moved.
#[tokio::test]
async fn a_quiet_clusters_status_is_written_once_a_minute_as_a_heartbeat() {
    let mut cr = cluster(2, healthy_status());
    cr.spec.nodes = MEMBERS as i32;
    let world = World::start(&cr, &[]).await;
    let (result, sent) = world
        .pass(&cr, vec![Step::Scrapes, status_write(answer(&cr))])
        .await;
    result.unwrap();
    let first = written_status(&sent);
    assert_eq!(first["operatorVersion"], env!("CARGO_PKG_VERSION"));

    // The same world (the same members at the same addresses), the status read back.
    let cr = next_version(&cr, first.clone());
    let (result, sent) = world.pass(&cr, vec![Step::Scrapes]).await;
    result.unwrap();
    let status_line = line(&Method::PATCH, STATUS_PATH);
    assert!(
        sent.iter().all(|s| s.line != status_line),
        "a pass right after a write writes nothing"
    );

    let mut recorded_earlier = first.clone();
    recorded_earlier["lastPassTime"] = time_ago(60_000);
    let cr = next_version(&cr, recorded_earlier);
    let (result, sent) = world
        .pass(&cr, vec![Step::Scrapes, status_write(answer(&cr))])
        .await;
    result.unwrap();
    let beat = written_status(&sent);
    assert_ne!(beat["lastPassTime"], time_ago(60_000));
    let without_time = |mut v: Value| {
        v.as_object_mut().unwrap().remove("lastPassTime");
        v
    };
    assert_eq!(
        without_time(beat),
        without_time(first),
        "nothing else moved"
    );
}

/// A cluster without a recorded gossip cluster name (here one that already runs, from before
/// it was recorded): one status write recording the name its members run with (the server's
/// default), nothing else (no scrape, no action), then the pass looks again.
#[tokio::test]
async fn the_gossip_cluster_name_is_recorded_alone_before_anything_else() {
    let mut status = healthy_status();
    status["gossipCluster"] = Value::Null;
    let cr = cluster(2, status);
    assert_eq!(cr.status.as_ref().unwrap().gossip_cluster, None);
    let world = World::start(&cr, &[]).await;
    let (result, sent) = world.pass(&cr, vec![status_write(answer(&cr))]).await;
    assert_eq!(
        result.unwrap(),
        Next::LookAgainIn(Duration::from_millis(200))
    );
    let written = written_status(&sent);
    assert_eq!(written["gossipCluster"], "marekvs");
    let mut rest = written.clone();
    rest.as_object_mut().unwrap().remove("gossipCluster");
    let before = serde_json::to_value(cr.status.as_ref().unwrap()).unwrap();
    assert_eq!(rest, before, "everything else as it was");
    assert_eq!(world.events(), Vec::<String>::new());
}

/// A cluster with a password: the first pass reads its Secret and the cluster's own record
/// of its members' passwords (one GET each, before the views are read), and the passes after
/// it, as while a gate waits, reuse them instead of reading them again. No view was read, so
/// nothing is recorded (no write of the record).
#[tokio::test]
async fn the_password_secret_is_read_once_not_on_every_pass() {
    let mut cr = cluster(2, healthy_status());
    cr.spec.nodes = MEMBERS as i32;
    cr.spec.auth = Some(
        serde_json::from_value(json!({
        "passwordSecretRef": {"name": "demo-auth", "key": "password"}}))
        .unwrap(),
    );
    let world = World::start(&cr, &[]).await;
    let secret_path = format!("/api/v1/namespaces/{NS}/secrets/demo-auth");
    let secret = Reply::Ok(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "demo-auth", "namespace": NS},
        "data": {"password": "c2VjcmV0"}}));
    let applied_path = format!("/api/v1/namespaces/{NS}/secrets/demo-password-applied");
    let (result, sent) = world
        .pass(
            &cr,
            vec![
                Step::Api(Method::GET, secret_path, secret),
                Step::Api(Method::GET, applied_path, Reply::Fail(404)),
                Step::Scrapes,
                status_write(answer(&cr)),
            ],
        )
        .await;
    result.unwrap();
    // The next passes find nothing changed: they scrape and write nothing; no GET of the Secret.
    let cr = next_version(&cr, written_status(&sent));
    for _ in 0..3 {
        let (result, _) = world.pass(&cr, vec![Step::Scrapes]).await;
        result.unwrap();
    }
}

/// This cluster's headless Service as another object (the cluster `demo-headless`, whose
/// client Service it is) made it: controlled by that object.
fn taken_headless_service(cr: &MarekvsCluster) -> Service {
    let mut taken = applied(build::headless_service(cr));
    taken.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "marekvs.io/v1alpha1".into(),
            kind: "MarekvsCluster".into(),
            name: "demo-headless".into(),
            uid: "uid-demo-headless".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    taken
}

/// The Ready condition of a written status.
fn ready_condition(status: &Value) -> &Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("a Ready condition")
}

fn assert_name_taken(status: &Value) {
    let ready = ready_condition(status);
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "NameTaken");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("Service demo-headless is controlled by MarekvsCluster demo-headless"),
        "{message}"
    );
}

/// A Service name this cluster derives is held by another object (in the watch cache: it
/// carries the operator's labels, as another cluster's Service does): the pass applies nothing
/// over it (it would fail on every pass, the API server refusing a second controller), creates
/// and scrapes nothing, says so in Ready, and looks again; a pass that finds it unchanged
/// writes nothing.
#[tokio::test]
async fn a_service_another_object_controls_is_never_applied_over_and_ready_says_so() {
    let cr = cluster(2, healthy_status());
    let mut world = World::start(&cr, &[]).await;
    world
        ._writers
        .2
        .apply_watcher_event(&watcher::Event::Apply(taken_headless_service(&cr)));
    let (result, sent) = world.pass(&cr, vec![status_write(answer(&cr))]).await;
    assert_eq!(result.unwrap(), Next::LookAgainIn(NAME_TAKEN_LOOK_AGAIN));
    assert_name_taken(&written_status(&sent));
    assert_eq!(world.events(), Vec::<String>::new());
    let cr = next_version(&cr, written_status(&sent));
    let (result, _) = world.pass(&cr, vec![]).await;
    assert_eq!(result.unwrap(), Next::LookAgainIn(NAME_TAKEN_LOOK_AGAIN));
}

/// The same held name, found by a GET: the watch does not show the object (it lacks the
/// operator's labels), so a child missing from the cache is read before it is applied. A
/// missing one (404) is then applied as before.
#[tokio::test]
async fn a_child_missing_from_the_cache_is_read_before_it_is_applied() {
    let cr = cluster(2, healthy_status());
    let mut world = World::start(&cr, &[]).await;
    let headless = applied(build::headless_service(&cr));
    world
        ._writers
        .2
        .apply_watcher_event(&watcher::Event::Delete(headless.clone()));
    let headless_path = format!("/api/v1/namespaces/{NS}/services/demo-headless");
    let taken = serde_json::to_value(taken_headless_service(&cr)).unwrap();
    let (result, sent) = world
        .pass(
            &cr,
            vec![
                Step::Api(Method::GET, headless_path.clone(), Reply::Ok(taken)),
                status_write(answer(&cr)),
            ],
        )
        .await;
    assert_eq!(result.unwrap(), Next::LookAgainIn(NAME_TAKEN_LOOK_AGAIN));
    assert_name_taken(&written_status(&sent));

    // Gone (404): applied, and the pass goes on as usual.
    let (result, sent) = world
        .pass(
            &cr,
            vec![
                Step::Api(Method::GET, headless_path.clone(), Reply::Fail(404)),
                Step::Api(
                    Method::PATCH,
                    headless_path.clone(),
                    Reply::Ok(serde_json::to_value(&headless).unwrap()),
                ),
                Step::Scrapes,
                status_write(answer(&cr)),
                Step::Api(Method::PATCH, pod_path(3), pod_answer(3)),
            ],
        )
        .await;
    result.unwrap();
    let apply = sent_to(&sent, &Method::PATCH, &headless_path);
    assert!(
        apply.query.contains("fieldManager=marekvs-operator"),
        "{}",
        apply.query
    );
}

/// Members answering hostile views: each lists 1,096 strangers of its own (so the views
/// disagree), each at the longest address a node may give, about 330 KiB a view. What they say
/// reaches status only cut (a few strangers named, the rest counted; hold messages and
/// conditions bounded): the status written stays under 24 KiB (14,333 bytes when written; uncut,
/// the hold alone would carry about 1.3 MB).
#[tokio::test]
async fn hostile_views_reach_status_only_cut_and_the_status_stays_small() {
    const STATUS_BOUND: usize = 24 * 1024;
    let cr = cluster(2, healthy_status());
    let world = World::start_with(&cr, &[], false, 1_096).await;
    let (result, sent) = world
        .pass(&cr, vec![Step::Scrapes, status_write(answer(&cr))])
        .await;
    result.unwrap();
    let status = written_status(&sent);
    let size = serde_json::to_vec(&status).unwrap().len();
    let hold = status["handoffHold"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        hold.contains("more strangers"),
        "the views reached the hold: {hold}"
    );
    assert!(size < STATUS_BOUND, "status of {size} bytes: {status:#}");
    eprintln!("status with hostile views: {size} bytes");
}
