//! Golden test of the child objects: every object `build` makes, for specs that cover each
//! optional branch, as JSON, compared with `tests/golden/<case>.json`.
//!
//! A change to these objects changes what every running cluster is sent on upgrade: a changed
//! pod spec changes `marekvs.io/template-hash` and rolls every member, and a changed Service or
//! PDB changes `marekvs.io/applied-hash` and is applied again. If a change is meant, regenerate
//! with `UPDATE_GOLDEN=1 cargo test -p marekvs-operator --lib build_golden` and review the diff.
//!
//! The JSON is `serde_json::Value` (object keys sorted), which holds everything of the typed
//! objects: the pod and the PVC are sent as these typed values (`Api::create`), and the
//! Services and the PDB as exactly the `Value` recorded here (`build::applied`), hash included.

use std::path::PathBuf;

use marekvs_api::{MarekvsCluster, MarekvsClusterSpec};
use serde_json::{Value, json};

use crate::build;

struct Case {
    name: &'static str,
    cluster: &'static str,
    spec: Value,
    ordinals: &'static [u32],
    cluster_domain: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        // Every optional field set; resources with both CPU and memory.
        Case {
            name: "full",
            cluster: "demo",
            spec: json!({
                "image": "registry.example/marekvs:1.4.2", "nodes": 5, "replicationFactor": 3,
                "storage": {"size": "5Gi", "className": "fast-ssd"},
                "resources": {"cpu": "500m", "memory": "1Gi"},
                "extraEnv": {"RUST_LOG": "debug", "MAREKVS_CACHE_MB": "256"},
                "nodeSelector": {"disk": "ssd", "kubernetes.io/arch": "amd64"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kv", "effect": "NoSchedule"}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100,
                    "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}}}}]}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}}}],
                "auth": {"passwordSecretRef": {"name": "demo-auth", "key": "password"}},
                "env": [{"name": "S3_KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "key"}}},
                        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "kv-config", "key": "mode"}}}],
                "imagePullSecrets": [{"name": "regcred"}],
                "podLabels": {"team": "payments"},
                "podAnnotations": {"prometheus.io/scrape": "true"},
                "priorityClassName": "kv-critical", "serviceAccountName": "marekvs",
                "clientService": {"type": "LoadBalancer", "annotations": {"lb.example/internal": "true"},
                    "loadBalancerSourceRanges": ["10.0.0.0/8", "192.168.0.0/16"],
                    "trafficDistribution": "PreferSameZone"},
            }),
            ordinals: &[0, 1, 7],
            cluster_domain: "cluster.local",
        },
        // Nothing optional: default storage class, default resources (500m CPU, 1Gi memory), no
        // extra env, the default soft spread over hosts and zones.
        Case {
            name: "minimal",
            cluster: "kv",
            spec: json!({"image": "marekvs:1"}),
            ordinals: &[0, 2],
            cluster_domain: "cluster.local",
        },
        // CPU only (memory takes its default), the default spread with a hard hostname spread,
        // another cluster domain, a two-digit ordinal.
        Case {
            name: "cpu-only",
            cluster: "orders-eu",
            spec: json!({
                "image": "marekvs:2", "nodes": 4, "replicationFactor": 1,
                "storage": {"size": "100Gi"},
                "resources": {"cpu": "2"},
                "hostnameSpreadWhenUnsatisfiable": "DoNotSchedule",
                "extraEnv": {"RUST_LOG": "info"},
            }),
            ordinals: &[3, 12],
            cluster_domain: "k8s.example.org",
        },
        // Memory only (CPU takes its default); a storage class; empty collections that are set
        // (`{}`, `[]`: an empty topologySpreadConstraints is no spread at all).
        Case {
            name: "memory-only",
            cluster: "cache",
            spec: json!({
                "image": "marekvs:3", "replicationFactor": 2,
                "storage": {"size": "1Ti", "className": "standard"},
                "resources": {"memory": "512Mi"},
                "nodeSelector": {}, "tolerations": [], "topologySpreadConstraints": [],
            }),
            ordinals: &[1],
            cluster_domain: "cluster.local",
        },
        // The password given as marekvs's own operator's users give it (env from a Secret), a
        // NodePort client Service with the default traffic distribution.
        Case {
            name: "env-password",
            cluster: "legacy",
            spec: json!({
                "image": "marekvs:1",
                "env": [{"name": "MAREKVS_REQUIREPASS",
                         "valueFrom": {"secretKeyRef": {"name": "legacy-auth", "key": "pass"}}}],
                "clientService": {"type": "NodePort"},
            }),
            ordinals: &[0],
            cluster_domain: "cluster.local",
        },
        // Resources present but empty (both take their defaults), and fields that do not reach
        // any child.
        Case {
            name: "empty-resources",
            cluster: "sessions",
            spec: json!({
                "image": "marekvs:1", "nodes": 9, "replicationFactor": 4, "paused": true,
                "reclaimPvcs": true, "removeMembers": ["sessions-4"],
                "resources": {},
                "autoscale": {"minNodes": 5, "maxNodes": 20, "targetOpsPerNode": 10000},
            }),
            ordinals: &[4],
            cluster_domain: "cluster.local",
        },
    ]
}

fn cr(case: &Case) -> MarekvsCluster {
    let spec: MarekvsClusterSpec = serde_json::from_value(case.spec.clone()).unwrap();
    let mut cr = MarekvsCluster::new(case.cluster, spec);
    cr.metadata.namespace = Some("team-a".into());
    cr.metadata.uid = Some(format!("uid-of-{}", case.cluster));
    cr
}

/// What server-side apply sends for a Service or the PDB, and its hash.
fn applied<K: serde::Serialize>(desired: &K) -> Value {
    let (value, hash) = build::applied(desired).unwrap();
    json!({"appliedHash": hash, "applied": value})
}

/// Everything built for a case, as one JSON document.
fn render(case: &Case) -> String {
    let cr = cr(case);
    let members: Vec<Value> = case
        .ordinals
        .iter()
        .map(|&o| {
            json!({
                "ordinal": o,
                "desiredTemplateHash": build::desired_template_hash(&cr, o, case.cluster_domain).unwrap(),
                "pvc": serde_json::to_value(build::pvc(&cr, o, 1).unwrap()).unwrap(),
                "pod": serde_json::to_value(build::pod(&cr, o, case.cluster_domain).unwrap()).unwrap(),
            })
        })
        .collect();
    let doc = json!({
        "headlessService": applied(&build::headless_service(&cr).unwrap()),
        "clientService": applied(&build::client_service(&cr).unwrap()),
        "pdb": applied(&build::pdb(&cr).unwrap()),
        "members": members,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap();
    text.push('\n');
    text
}

fn golden_path(case: &Case) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{}.json", case.name))
}

#[test]
fn children_match_the_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut failures = Vec::new();
    for case in cases() {
        let path = golden_path(&case);
        let got = render(&case);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = match std::fs::read_to_string(&path) {
            Ok(w) => w,
            Err(e) => {
                failures.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        if got != want {
            let (line, (g, w)) = got
                .lines()
                .zip(want.lines())
                .enumerate()
                .find(|(_, (g, w))| g != w)
                .map(|(i, gw)| (i + 1, gw))
                .unwrap_or((got.lines().count().min(want.lines().count()) + 1, ("", "")));
            failures.push(format!(
                "{}: first difference at line {line}:\n  golden: {w}\n  built:  {g}",
                path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "child objects differ from the golden files (UPDATE_GOLDEN=1 rewrites them if the \
         change is meant):\n{}",
        failures.join("\n")
    );
}

/// The pod's template-hash annotation is the hash the observer compares with, and it is
/// different for each member (hostname and claim name differ).
#[test]
fn each_member_carries_its_desired_hash() {
    for case in cases() {
        let cr = cr(&case);
        let mut seen = std::collections::BTreeSet::new();
        for &o in case.ordinals {
            let pod = build::pod(&cr, o, case.cluster_domain).unwrap();
            let hash = &pod.metadata.annotations.as_ref().unwrap()[build::ANNOTATION_TEMPLATE_HASH];
            assert_eq!(
                *hash,
                build::desired_template_hash(&cr, o, case.cluster_domain).unwrap()
            );
            assert!(seen.insert(hash.clone()), "{}: {o}", case.name);
        }
    }
}
