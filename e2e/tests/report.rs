//! `kubectl mkv report` end to end: the operator installed from the shipped namespaced overlay
//! (its pods run by the podlet, so their logs are served by `kubectl logs`), a cluster whose
//! members take a password from a Secret, and the bundle opened and checked part by part. The
//! Secret's value is planted where a careless user would leave it too (an annotation, a plain
//! env value named like a token): it must appear nowhere in the bundle.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use marekvs_e2e::install::{kubectl, leader, namespaced_kustomization, operator_pods};
use marekvs_e2e::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(300);

/// Run `kubectl mkv report demo` with `args`; the zip's files by name.
async fn report(env: &TestEnv, args: &[&str]) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let dir = std::env::temp_dir().join(format!("mkv-report-{}", env.namespace));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.zip", args.join("_").replace('/', "-")));
    let _ = std::fs::remove_file(&path);
    let out = tokio::process::Command::new(plugin_bin())
        .args(["-n", &env.namespace, "report", "demo", "-o"])
        .arg(&path)
        .args(args)
        .output()
        .await
        .context("running kubectl-mkv report")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "kubectl mkv report failed: {stderr}");
    eprintln!(
        "report {args:?}: {}{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&path)?)?;
    let mut files = BTreeMap::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i)?;
        let name = f.name()?.to_string();
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        files.insert(name, bytes);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(files)
}

fn text<'a>(files: &'a BTreeMap<String, Vec<u8>>, name: &str) -> anyhow::Result<&'a str> {
    let bytes = files
        .get(name)
        .ok_or_else(|| anyhow!("{name} is not in the bundle: {:?}", files.keys()))?;
    Ok(std::str::from_utf8(bytes)?)
}

fn yaml(files: &BTreeMap<String, Vec<u8>>, name: &str) -> anyhow::Result<Value> {
    serde_yaml_ng::from_str(text(files, name)?).with_context(|| format!("{name} is not YAML"))
}

/// The RFC 3339 time that opens a `kubectl logs --timestamps` line.
fn line_time(line: &str) -> anyhow::Result<k8s_openapi::jiff::Timestamp> {
    let stamp = line.split(' ').next().unwrap_or_default();
    stamp
        .parse()
        .with_context(|| format!("no timestamp opens {line:?}"))
}

async fn the_support_bundle_holds_each_part_and_no_secret() -> anyhow::Result<()> {
    let env = TestEnv::new("report").await?;
    let ns = env.namespace.clone();
    let dir = namespaced_kustomization(&ns)?;
    kubectl(
        &["apply", "-k", &dir.display().to_string(), "--server-side"],
        None,
    )
    .await?;
    let pods = operator_pods(&env, 2).await?;
    let first_leader = leader(&env, &pods).await?;

    let planted = format!("planted-{}-pw", std::process::id());
    let secrets: Api<Secret> = env.api();
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "demo-auth"},
                "stringData": {"password": planted},
            }))?,
        )
        .await?;
    let mut demo = spec(3);
    demo["auth"] = json!({"passwordSecretRef": {"name": "demo-auth", "key": "password"}});
    demo["env"] = json!([{"name": "BACKUP_TOKEN", "value": planted}]);
    let mut cluster = cluster("demo", demo)?;
    cluster.metadata.annotations = Some(BTreeMap::from([(
        "team.example/notes".to_string(),
        format!("password rotated to {planted}"),
    )]));
    let api: Api<MarekvsCluster> = env.api();
    api.create(&PostParams::default(), &cluster).await?;
    let members = ["demo-0", "demo-1", "demo-2"];
    wait_healthy(&api, "demo", &members, T).await?;

    let files = report(&env, &["--since", "1h"]).await?;

    // Everything was readable with the suite's admin kubeconfig: nothing listed as missing.
    let readme = text(&files, "README.txt")?;
    eprintln!("{readme}");
    ensure!(
        readme.contains("Everything asked for was collected."),
        "{readme}"
    );
    // The cluster and its Events.
    let cr = yaml(&files, "cluster.yaml")?;
    ensure!(
        cr["kind"] == "MarekvsCluster" && cr["metadata"]["name"] == "demo",
        "{cr}"
    );
    ensure!(cr["metadata"].get("managedFields").is_none(), "{cr}");
    ensure!(
        text(&files, "cluster.yaml")?.contains("<redacted>"),
        "nothing redacted in cluster.yaml"
    );
    let events = yaml(&files, "cluster-events.yaml")?;
    let events = events
        .as_array()
        .context("cluster-events.yaml is not a list")?;
    ensure!(
        !events.is_empty() && events.iter().all(|e| e["involvedObject"]["name"] == "demo"),
        "cluster events: {events:?}"
    );
    // Pods and PVCs, each with its Events (the scheduler's Scheduled at least).
    let status = api.get("demo").await?.status.context("no status")?;
    for m in &status.members {
        let pod = yaml(&files, &format!("pods/{}.yaml", m.name))?;
        ensure!(pod["metadata"]["name"] == m.name.as_str(), "{pod}");
        let pod_events = yaml(&files, &format!("pods/{}.events.yaml", m.name))?;
        ensure!(
            pod_events
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["reason"] == "Scheduled")),
            "{}'s events: {pod_events}",
            m.name
        );
        let pvc_name = m.pvc.as_deref().context("member without a PVC")?;
        let pvc = yaml(&files, &format!("pvcs/{pvc_name}.yaml"))?;
        ensure!(pvc["kind"] == "PersistentVolumeClaim", "{pvc}");
        yaml(&files, &format!("pvcs/{pvc_name}.events.yaml"))?;
        // Each member's own answers, read through port-forward.
        let metrics = text(&files, &format!("members/{}/metrics.txt", m.name))?;
        ensure!(
            metric(metrics, "marekvs_cluster_members").is_some(),
            "{}: {metrics:.300}",
            m.name
        );
        let nodes = text(&files, &format!("members/{}/cluster-nodes.txt", m.name))?;
        ensure!(
            nodes.lines().count() == members.len()
                && nodes.lines().filter(|l| l.contains("myself")).count() == 1,
            "{}'s CLUSTER NODES: {nodes}",
            m.name
        );
    }
    // The operator: its pods with their role, image and flags, the version it records.
    let operator = yaml(&files, "operator/operator.yaml")?;
    let described = operator["pods"].as_array().context("no operator pods")?;
    ensure!(described.len() == 2, "{operator}");
    let leaders: Vec<&Value> = described.iter().filter(|p| p["role"] == "leader").collect();
    ensure!(
        leaders.len() == 1 && leaders[0]["name"] == first_leader.as_str(),
        "{operator}"
    );
    let container = &described[0]["containers"][0];
    ensure!(
        container["image"]
            .as_str()
            .is_some_and(|i| i.contains("marekvs-operator"))
            && container["args"]
                .as_array()
                .is_some_and(|a| a.contains(&json!(format!("--namespace={ns}")))),
        "{container}"
    );
    ensure!(
        operator["operatorVersionRecorded"] == status.operator_version.as_deref().unwrap_or("none"),
        "{operator}"
    );
    // Both pods' logs, every line stamped; the leader's holds its reconciles.
    let mut leader_lines = 0;
    for pod in described {
        let name = pod["name"].as_str().context("pod without a name")?;
        let file = format!(
            "operator/{name}.{}.log",
            pod["containers"][0]["name"].as_str().unwrap_or("")
        );
        let log = text(&files, &file)?;
        ensure!(!log.is_empty(), "{file} is empty");
        for line in log.lines() {
            line_time(line)?;
        }
        if name == first_leader {
            leader_lines = log.lines().count();
        }
    }
    ensure!(leader_lines > 0, "no leader log");

    // The planted value: nowhere, in any file, plain or base64.
    let b64 = base64_of(planted.as_bytes());
    for (name, bytes) in &files {
        for needle in [planted.as_bytes(), b64.as_bytes()] {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                bail!("{name} holds the planted secret");
            }
        }
    }

    // --since takes the operator's logs from that moment on only.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cut = k8s_openapi::jiff::Timestamp::now() - Duration::from_secs(2);
    let recent = report(&env, &["--since", "2s"]).await?;
    let log = text(
        &recent,
        &format!(
            "operator/{first_leader}.{}.log",
            described[0]["containers"][0]["name"].as_str().unwrap_or("")
        ),
    )?;
    ensure!(
        log.lines().count() < leader_lines,
        "--since 2s kept {} of {leader_lines} lines",
        log.lines().count()
    );
    for line in log.lines() {
        let at = line_time(line)?;
        // The kubelet's cut is by the second.
        ensure!(
            at >= cut - Duration::from_secs(1),
            "{line:?} is before {cut}"
        );
    }
    eprintln!(
        "report: {} files; {} leader log lines in an hour, {} in the last 2 s; the planted secret in none",
        files.len(),
        leader_lines,
        log.lines().count()
    );
    env.cleanup().await
}

fn base64_of(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

fn main() -> std::process::ExitCode {
    harness::run(marekvs_e2e::cases![
        the_support_bundle_holds_each_part_and_no_secret needs [Installs],
    ])
}
