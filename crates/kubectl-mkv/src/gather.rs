//! `kubectl mkv report`: the reads. Everything goes through the API server, as the user's
//! kubeconfig allows: the objects and their Events, the operator's logs (`pods/log`), and each
//! member's `/metrics` and `CLUSTER NODES` through `pods/portforward`, never by dialling a pod
//! IP. A part that cannot be read is named in the bundle's README instead of failing the whole
//! report: a support bundle is most needed when something is broken.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};
use kubectl_mkv::report::{self, Bundle, Reply};
use marekvs_api::MarekvsCluster;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A member's HTTP port (`/metrics`) and its RESP port.
const METRICS_PORT: u16 = 9121;
const RESP_PORT: u16 = 6379;
/// One member read through the API server, from connect to the last byte.
const MEMBER_READ: Duration = Duration::from_secs(10);
/// The most of one member answer kept (a metrics page of a large member is well under this).
const MEMBER_ANSWER_MAX: usize = 16 << 20;

pub struct Options {
    /// Operator logs from this many seconds ago on.
    pub since_secs: i64,
    pub output: Option<PathBuf>,
    /// Where the operator runs (`None`: found by `operator_selector` in every namespace the
    /// user may list, else in the cluster's).
    pub operator_namespace: Option<String>,
    pub operator_selector: String,
}

/// Collect the bundle of cluster `cr` in `ns` and write it; the line to print.
pub async fn report(
    client: &Client,
    ns: &str,
    cr: &MarekvsCluster,
    opts: &Options,
    now: Timestamp,
) -> anyhow::Result<String> {
    let name = cr.name_any();
    let since = now
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(
            opts.since_secs,
        ))
        .map_err(|e| anyhow!("--since reaches before the epoch: {e}"))?;
    let mut bundle = Bundle::default();
    let events = list_values::<Event>(&Api::namespaced(client.clone(), ns), &ListParams::default())
        .await
        .unwrap_or_else(|e| {
            bundle.missing("events", e);
            Vec::new()
        });
    let cluster_value = serde_json::to_value(cr)?;
    bundle.add_object("cluster.yaml", cluster_value);
    bundle.add_objects(
        "cluster-events.yaml",
        report::events_about(&events, "MarekvsCluster", &name),
    );
    let pods = members(client, ns, cr, &events, &mut bundle).await;
    let mut secrets = secret_values(client, ns, cr, &pods, &mut bundle).await;
    let password = cr
        .spec
        .password_secret_ref()
        .and_then(|r| {
            secrets
                .iter()
                .find(|(k, _)| *k == (r.name.clone(), r.key.clone()))
        })
        .map(|(_, v)| v.clone());
    member_reads(client, ns, &pods, password.as_deref(), &mut bundle).await;
    let operator_secrets = operator(client, ns, cr, opts, since, &mut bundle).await;
    secrets.extend(operator_secrets);

    let header = format!(
        "kubectl mkv report: MarekvsCluster {ns}/{name}, collected {now} by kubectl-mkv {}; \
         operator logs since {since}.",
        env!("CARGO_PKG_VERSION")
    );
    let values: Vec<String> = secrets.into_iter().map(|(_, v)| v).collect();
    let zip = bundle.to_zip(&header, &values)?;
    let path = opts.output.clone().unwrap_or_else(|| {
        let stamp = now.strftime("%Y%m%dT%H%M%SZ").to_string();
        PathBuf::from(format!("mkv-report-{ns}-{name}-{stamp}.zip"))
    });
    write_new(&path, &zip)?;
    for (part, why) in bundle.missing_parts() {
        eprintln!("warning: not collected: {part}: {why}");
    }
    Ok(format!(
        "wrote {} ({} files, {} bytes{})\n",
        path.display(),
        bundle.names().count() + 1,
        zip.len(),
        match bundle.missing_parts().len() {
            0 => String::new(),
            n => format!("; {n} parts not collected, listed in its README.txt"),
        }
    ))
}

/// Never overwrite a file: a bundle pasted into an issue earlier stays what it was.
fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {} (choose another with -o)", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

async fn list_values<K>(api: &Api<K>, lp: &ListParams) -> anyhow::Result<Vec<Value>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let list = api.list(lp).await?;
    list.items
        .iter()
        .map(|o| serde_json::to_value(o).map_err(Into::into))
        .collect()
}

/// The cluster's pods and PVCs (by its label, and as its status names them), each with its
/// Events; the pods, for the member reads.
async fn members(
    client: &Client,
    ns: &str,
    cr: &MarekvsCluster,
    events: &[Value],
    bundle: &mut Bundle,
) -> Vec<Pod> {
    let selector = format!("app.kubernetes.io/instance={}", cr.name_any());
    let lp = ListParams::default().labels(&selector);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods = match pods_api.list(&lp).await {
        Ok(l) => l.items,
        Err(e) => {
            bundle.missing("pods", e);
            Vec::new()
        }
    };
    for pod in &pods {
        let name = pod.name_any();
        bundle.add_object(&format!("pods/{name}.yaml"), json!(pod));
        let about = report::events_about(events, "Pod", &name);
        bundle.add_objects(&format!("pods/{name}.events.yaml"), about);
    }
    let pvcs_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let mut claims: Vec<String> = match pvcs_api.list(&lp).await {
        Ok(l) => l.items.iter().map(ResourceExt::name_any).collect(),
        Err(e) => {
            bundle.missing("pvcs", e);
            Vec::new()
        }
    };
    let status = cr.status.clone().unwrap_or_default();
    claims.extend(status.members.iter().filter_map(|m| m.pvc.clone()));
    claims.extend(status.kept_volumes.iter().map(|v| v.name.clone()));
    claims.sort();
    claims.dedup();
    for claim in claims {
        match pvcs_api.get_opt(&claim).await {
            Ok(Some(pvc)) => bundle.add_object(&format!("pvcs/{claim}.yaml"), json!(pvc)),
            Ok(None) => {}
            Err(e) => bundle.missing(&format!("pvcs/{claim}.yaml"), e),
        }
        let about = report::events_about(events, "PersistentVolumeClaim", &claim);
        bundle.add_objects(&format!("pvcs/{claim}.events.yaml"), about);
    }
    pods
}

/// Every value of the Secret keys the cluster uses (spec.auth, its pods' env and envFrom), to
/// redact them wherever they appear, with the (Secret, key) each came from.
async fn secret_values(
    client: &Client,
    ns: &str,
    cr: &MarekvsCluster,
    pods: &[Pod],
    bundle: &mut Bundle,
) -> Vec<((String, String), String)> {
    let mut refs: Vec<String> = cr
        .spec
        .password_secret_ref()
        .map(|r| r.name)
        .into_iter()
        .collect();
    refs.extend(pods.iter().flat_map(secrets_of));
    refs.sort();
    refs.dedup();
    read_secrets(&Api::namespaced(client.clone(), ns), &refs, bundle).await
}

async fn read_secrets(
    api: &Api<Secret>,
    names: &[String],
    bundle: &mut Bundle,
) -> Vec<((String, String), String)> {
    let mut values = Vec::new();
    for name in names {
        match api.get_opt(name).await {
            Ok(Some(secret)) => {
                for (key, bytes) in secret.data.unwrap_or_default() {
                    let value = String::from_utf8_lossy(&bytes.0).into_owned();
                    values.push(((name.clone(), key), value));
                }
                for (key, value) in secret.string_data.unwrap_or_default() {
                    values.push(((name.clone(), key), value));
                }
            }
            Ok(None) => {}
            Err(e) => bundle.missing(
                &format!("redaction of Secret {name}"),
                anyhow!("{e}; its values are not redacted from logs or member answers"),
            ),
        }
    }
    values
}

/// The Secrets a pod's containers take env from.
fn secrets_of(pod: &Pod) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let mut names = Vec::new();
    for c in containers {
        for e in c.env.iter().flatten() {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                names.push(r.name.clone());
            }
        }
        for from in c.env_from.iter().flatten() {
            if let Some(r) = &from.secret_ref {
                names.push(r.name.clone());
            }
        }
    }
    names
}

/// Each running member's `/metrics` and `CLUSTER NODES`, through port-forward.
async fn member_reads(
    client: &Client,
    ns: &str,
    pods: &[Pod],
    password: Option<&str>,
    bundle: &mut Bundle,
) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for pod in pods {
        let name = pod.name_any();
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if !running {
            bundle.missing(&format!("members/{name}"), "the pod is not running");
            continue;
        }
        let request = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        let metrics = forwarded(&api, &name, METRICS_PORT, request, report::http_complete)
            .await
            .and_then(|r| report::http_body(&r));
        match metrics {
            Ok(body) => bundle.add_text(&format!("members/{name}/metrics.txt"), body),
            Err(e) => bundle.missing(&format!("members/{name}/metrics.txt"), e),
        }
        match cluster_nodes(&api, &name, password).await {
            Ok(text) => bundle.add_text(&format!("members/{name}/cluster-nodes.txt"), text),
            Err(e) => bundle.missing(&format!("members/{name}/cluster-nodes.txt"), e),
        }
    }
}

/// `[AUTH <password>]`, `CLUSTER NODES` on the member's RESP port: the second reply.
async fn cluster_nodes(
    api: &Api<Pod>,
    pod: &str,
    password: Option<&str>,
) -> anyhow::Result<String> {
    let mut request = Vec::new();
    let mut replies = 1;
    if let Some(p) = password {
        request.extend(report::resp_command(&["AUTH", p]));
        replies += 1;
    }
    request.extend(report::resp_command(&["CLUSTER", "NODES"]));
    let done = |buf: &[u8]| report::parse_replies(buf, replies).is_some();
    let answer = forwarded(api, pod, RESP_PORT, &request, done).await?;
    let parsed = report::parse_replies(&answer, replies)
        .ok_or_else(|| anyhow!("the connection closed after {} bytes", answer.len()))?;
    for reply in &parsed {
        if let Reply::Error(e) = reply {
            return Err(anyhow!("the member answered: {e}"));
        }
    }
    match parsed.into_iter().last() {
        Some(Reply::Text(t)) => Ok(t),
        _ => Err(anyhow!("no CLUSTER NODES reply")),
    }
}

/// Send `request` to `port` of `pod` through the API server's port-forward and read until
/// `done` says the answer is whole, or the stream ends.
async fn forwarded(
    api: &Api<Pod>,
    pod: &str,
    port: u16,
    request: &[u8],
    done: impl Fn(&[u8]) -> bool,
) -> anyhow::Result<Vec<u8>> {
    let read = async {
        let mut pf = api
            .portforward(pod, &[port])
            .await
            .with_context(|| format!("port-forward to {pod}:{port}"))?;
        let mut stream = pf
            .take_stream(port)
            .ok_or_else(|| anyhow!("port-forward to {pod}:{port} gave no stream"))?;
        stream.write_all(request).await?;
        let mut answer = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        while !done(&answer) {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..n]);
            anyhow::ensure!(
                answer.len() <= MEMBER_ANSWER_MAX,
                "{pod}:{port} answered more than {MEMBER_ANSWER_MAX} bytes"
            );
        }
        drop(stream);
        pf.abort();
        anyhow::Ok(answer)
    };
    tokio::time::timeout(MEMBER_READ, read)
        .await
        .map_err(|_| anyhow!("{pod}:{port} did not answer within {MEMBER_READ:?}"))?
}

/// The operator's pods (which leads, their image, args and env), each container's log since
/// `since`, and the version the cluster's status records; the Secret values its env uses.
async fn operator(
    client: &Client,
    cluster_ns: &str,
    cr: &MarekvsCluster,
    opts: &Options,
    since: Timestamp,
    bundle: &mut Bundle,
) -> Vec<((String, String), String)> {
    let pods = match operator_pods(client, cluster_ns, opts).await {
        Ok(p) if !p.is_empty() => p,
        Ok(_) => {
            bundle.missing(
                "operator",
                format!(
                    "no pod labelled {} found (--operator-namespace, --operator-selector)",
                    opts.operator_selector
                ),
            );
            return Vec::new();
        }
        Err(e) => {
            bundle.missing("operator", e);
            return Vec::new();
        }
    };
    let mut leaders = Vec::new();
    let mut namespaces: Vec<String> = pods.iter().filter_map(|p| p.namespace()).collect();
    namespaces.sort();
    namespaces.dedup();
    for ns in &namespaces {
        let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
        match leases.list(&ListParams::default()).await {
            Ok(l) => leaders.extend(l.items.into_iter().filter_map(|l| l.spec?.holder_identity)),
            Err(e) => bundle.missing(&format!("the leader Lease in {ns}"), e),
        }
    }
    let mut described = Vec::new();
    let mut secrets = Vec::new();
    for pod in &pods {
        let (name, ns) = (pod.name_any(), pod.namespace().unwrap_or_default());
        let role = if leaders.contains(&name) {
            "leader"
        } else {
            "standby"
        };
        described.push(describe_operator_pod(pod, role));
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
            let params = LogParams {
                container: Some(c.name.clone()),
                since_time: Some(since),
                timestamps: true,
                ..LogParams::default()
            };
            let file = format!("operator/{name}.{}.log", c.name);
            match api.logs(&name, &params).await {
                Ok(text) => bundle.add_text(&file, text),
                Err(e) => bundle.missing(&file, e),
            }
        }
        let refs = secrets_of(pod);
        secrets.extend(read_secrets(&Api::namespaced(client.clone(), &ns), &refs, bundle).await);
    }
    let recorded = cr.status.as_ref().and_then(|s| s.operator_version.clone());
    bundle.add_object(
        "operator/operator.yaml",
        json!({
            "operatorVersionRecorded": recorded,
            "pluginVersion": env!("CARGO_PKG_VERSION"),
            "pods": described,
        }),
    );
    secrets
}

/// What a maintainer asks first about an operator pod: its role, image (the version), args
/// (the flags), env, readiness and restarts.
fn describe_operator_pod(pod: &Pod, role: &str) -> Value {
    let status = pod.status.clone().unwrap_or_default();
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            let cs = status
                .container_statuses
                .iter()
                .flatten()
                .find(|s| s.name == c.name);
            json!({
                "name": c.name, "image": c.image, "command": c.command, "args": c.args,
                "env": c.env, "ready": cs.map(|s| s.ready),
                "restartCount": cs.map(|s| s.restart_count),
            })
        })
        .collect();
    json!({
        "name": pod.name_any(), "namespace": pod.namespace(), "role": role,
        "node": pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        "phase": status.phase, "startTime": status.start_time, "containers": containers,
    })
}

/// The operator's pods: in `--operator-namespace`, else in every namespace the user may list,
/// else in the cluster's (a namespace-scoped install runs there).
async fn operator_pods(
    client: &Client,
    cluster_ns: &str,
    opts: &Options,
) -> anyhow::Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&opts.operator_selector);
    if let Some(ns) = &opts.operator_namespace {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        return Ok(api.list(&lp).await?.items);
    }
    let all: Api<Pod> = Api::all(client.clone());
    match all.list(&lp).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            let api: Api<Pod> = Api::namespaced(client.clone(), cluster_ns);
            Ok(api.list(&lp).await?.items)
        }
        Err(e) => Err(e.into()),
    }
}
