//! `kubectl mkv`: the pure half. What the plugin prints (the status table, the plan in words)
//! and what it writes (each command's patch, behind its guards) are plain functions over the
//! `MarekvsCluster` it read and a clock passed in; `main.rs` only reads, patches and prints.
#![forbid(unsafe_code)]

pub mod age;
pub mod complete;
pub mod edit;
pub mod plan;
pub mod report;
pub mod table;
pub mod version;

/// A `MarekvsCluster` as the API server returns it, for the unit tests.
#[cfg(test)]
pub(crate) mod fixture {
    use marekvs_api::MarekvsCluster;
    use serde_json::{Value, json};

    /// Milliseconds of an RFC 3339 time.
    pub fn t(rfc3339: &str) -> i64 {
        let time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
            serde_json::from_value(json!(rfc3339)).unwrap();
        crate::age::millis(&time)
    }

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-11-25T09:00:00Z"})
    }

    fn member(name: &str, phase: &str, ready: bool, metrics: Option<[i64; 3]>) -> Value {
        let mut m = json!({"name": name, "ordinal": name[5..].parse::<i32>().unwrap(),
            "pod": name, "pvc": format!("data-{name}"), "phase": phase, "ready": ready,
            "updated": true});
        if let Some([view, under, join]) = metrics {
            m["metrics"] = json!({"scrapedAt": "2026-11-25T09:59:59Z", "viewMembers": view,
                "underreplicatedPartitions": under, "joinGatePending": join,
                "bootstrapsCompletedTotal": 3, "aeRepairOpsTotal": 10, "commandsTotal": 100});
        }
        m
    }

    /// Cluster `demo` in namespace `ns` (resourceVersion 42) with `spec` (over an image), three
    /// members, demo-2 not ready, a kept volume, a stale one and a look-alike.
    pub fn cluster(spec: Value) -> MarekvsCluster {
        let mut spec_full = json!({"image": "marekvs:1"});
        spec_full
            .as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        let mut demo0 = member("demo-0", "Active", true, Some([3, 0, 0]));
        demo0["countersChangedAt"] = json!("2026-11-25T09:58:45Z");
        // demo-0 quiet for 75 s, 12 rounds begun since; demo-1's node does not report its
        // rounds.
        demo0["metrics"]["ringOps"] = json!(262_144);
        demo0["metrics"]["aeRoundsTotal"] = json!(40);
        demo0["quietSince"] = json!("2026-11-25T09:58:45Z");
        demo0["roundsAtQuiet"] = json!(28);
        demo0["version"] = json!("0.2.0");
        let mut demo1 = member("demo-1", "Active", true, Some([2, 4, 1]));
        demo1["version"] = json!("0.3.0");
        demo1["quietSince"] = json!("2026-11-25T09:58:30Z");
        serde_json::from_value(json!({
            "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
            "metadata": {"name": "demo", "namespace": "ns", "resourceVersion": "42", "uid": "u-1",
                         "generation": 4},
            "spec": spec_full,
            "status": {
                "observedGeneration": 4, "lastPassTime": "2026-11-25T09:59:48Z",
                "operatorVersion": "0.1.0",
                "phase": "Blocked", "blockReason": "Underreplicated", "readyNodes": 2,
                "desiredNodes": 3, "replicas": 3, "updatedNodes": 3,
                "instanceNames": ["demo-0", "demo-1", "demo-2"],
                "conditions": [
                    condition("Ready", "False", "NotReady", "demo-2 is not ready"),
                    condition("Progressing", "False", "Idle", ""),
                    condition("Blocked", "True", "Underreplicated", "4 partitions under-replicated"),
                    condition("MassFailure", "False", "EnoughMembersUp", ""),
                    condition("SuspectedPartition", "True", "ViewsDisagree", "demo-1 sees a stranger"),
                    condition("MixedVersions", "True", "MixedVersions",
                              "demo-0 runs 0.2.0; demo-1 runs 0.3.0; no version read from demo-2"),
                    condition("RemovalChoices", "True", "Valid", ""),
                    condition("Autoscaling", "False", "Idle", ""),
                ],
                "members": [demo0, demo1,
                            member("demo-2", "Unready", false, None)],
                "keptVolumes": [
                    {"name": "data-demo-3", "member": "demo-3",
                     "absentSince": "2026-11-25T09:58:00Z", "reusable": true},
                    {"name": "data-demo-4", "member": "demo-4", "reusable": false}],
                "lookAlikes": [{"kind": "Pod", "name": "demo-5", "member": "demo-5",
                                "why": "not controlled by demo"}],
                "handoffHold": {"reason": "Underreplicated", "moving": "Other",
                    "members": ["demo-1"], "since": "2026-11-25T09:58:25Z", "stuck": false,
                    "message": "4 partitions under-replicated"},
                "backgroundRepair": {"members": ["demo-0", "demo-1"], "ratePerSecond": 12.5,
                    "since": "2026-11-25T09:59:30Z"},
            }
        }))
        .unwrap()
    }
}
