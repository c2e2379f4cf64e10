//! `marekvs-operator check`: does an install work? The Helm chart's `helm test` runs it in a
//! pod of the operator's own image, as the operator's ServiceAccount, with the operator's
//! scope and Lease (docs/install.md#testing-an-install). It passes when
//!
//! - the MarekvsCluster API is served: a list of `marekvsclusters` (in the watched namespace,
//!   or in every namespace) is answered, so the CRD is installed and the ServiceAccount may
//!   read what the operator watches;
//! - the served CRD is not older than this operator: its schema (as the API server publishes
//!   it, `/openapi/v3`, readable by every authenticated user) declares every field of this
//!   operator's own spec and status. A CRD left behind by an upgrade lacks the newer status
//!   fields, and the API server then refuses every status write of the operator (server-side
//!   apply: `field not declared in schema`), so no cluster's status moves; and,
//! - with leader election, the Lease has a holder that renews it: its record changes within a
//!   lease duration of the first read (every renewal writes a later `renewTime`, see
//!   [`crate::lease`]).
//!
//! As in [`crate::lease`], no wall clock is compared: the Lease is judged by whether its record
//! changes while this process watches it, timed on its own monotonic clock, so a node whose
//! clock is off cannot make a live leader look dead or a dead one live.
//!
//! [`crd_verdict`], [`missing_fields`], [`schema_verdict`] and [`lease_verdict`] are the rule,
//! pure and tested; [`run`] reads the API.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, ListParams};
use kube::{Client, CustomResourceExt as _};
use marekvs_api::MarekvsCluster;
use serde_json::Value;
use tokio::time::Instant;

/// What the check is told: the operator's own flags, as the chart passes them to `run`.
#[derive(Clone, Debug)]
pub struct Target {
    /// The watched namespace (`None`: every namespace).
    pub namespace: Option<String>,
    /// `None`: leader election is off, no Lease is checked.
    pub lease: Option<LeaseTarget>,
}

#[derive(Clone, Debug)]
pub struct LeaseTarget {
    pub namespace: String,
    pub name: String,
    pub duration: Duration,
}

/// How the list of MarekvsClusters was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListAnswer {
    /// Answered: this many items in the first page.
    Listed(usize),
    /// An HTTP status from the API server, with its message.
    Status(u16, String),
    /// No answer (connection, TLS, timeout).
    Unreachable(String),
}

fn scope_words(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("namespace {ns}"),
        None => "every namespace".into(),
    }
}

/// Whether the MarekvsCluster API is served and readable: `Ok` with what was seen, or the
/// one-line reason it is not.
pub fn crd_verdict(namespace: Option<&str>, answer: &ListAnswer) -> Result<String, String> {
    let scope = scope_words(namespace);
    match answer {
        ListAnswer::Listed(n) => Ok(format!(
            "MarekvsClusters are served in {scope} ({n} listed)"
        )),
        ListAnswer::Status(404, _) => Err(
            "the MarekvsCluster CRD is not served (404 on marekvsclusters.marekvs.io/v1alpha1): \
             install it (the chart's crds.create=true, or kubectl apply --server-side -f \
             deploy/crd/marekvs.io_marekvsclusters.yaml)"
                .into(),
        ),
        ListAnswer::Status(403, message) => Err(format!(
            "the ServiceAccount may not list marekvsclusters in {scope}: the operator's role is \
             missing or not bound to it (rbac.create, scope, watchNamespace): {message}"
        )),
        ListAnswer::Status(401, message) => Err(format!(
            "the API server refused the ServiceAccount's token (401): {message}"
        )),
        ListAnswer::Status(code, message) => Err(format!(
            "listing marekvsclusters in {scope} failed ({code}): {message}"
        )),
        ListAnswer::Unreachable(e) => Err(format!("the API server did not answer: {e}")),
    }
}

/// Where the API server publishes the served schema of the CRD's version.
const OPENAPI_PATH: &str = "/openapi/v3/apis/marekvs.io/v1alpha1";

/// This operator's own schema of a MarekvsCluster (the CRD it prints, `crd`).
pub fn own_schema() -> Value {
    let crd = serde_json::to_value(MarekvsCluster::crd()).unwrap_or_default();
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_default()
}

/// The MarekvsCluster schema in the API server's OpenAPI v3 document of `marekvs.io/v1alpha1`.
pub fn served_schema(document: &Value) -> Option<&Value> {
    document
        .pointer("/components/schemas")?
        .as_object()?
        .values()
        .find(|schema| {
            schema["x-kubernetes-group-version-kind"]
                .as_array()
                .is_some_and(|gvks| {
                    gvks.iter().any(|g| {
                        g["group"] == "marekvs.io"
                            && g["version"] == "v1alpha1"
                            && g["kind"] == "MarekvsCluster"
                    })
                })
        })
}

/// The fields under `spec` and `status` that `ours` declares and `served` does not, as paths
/// (`status.lastPassTime`, `status.members[].metrics.ringOps`). Only declared names are
/// compared (properties, array items, maps' values), not types or validation.
pub fn missing_fields(ours: &Value, served: &Value) -> Vec<String> {
    let mut missing = Vec::new();
    for top in ["spec", "status"] {
        if let Some(mine) = ours["properties"].get(top) {
            match served["properties"].get(top) {
                Some(theirs) => walk(mine, theirs, top, &mut missing),
                None => missing.push(top.to_string()),
            }
        }
    }
    missing
}

fn walk(ours: &Value, served: &Value, path: &str, missing: &mut Vec<String>) {
    if let Some(properties) = ours["properties"].as_object() {
        for (name, mine) in properties {
            let here = format!("{path}.{name}");
            match served["properties"].get(name) {
                Some(theirs) => walk(mine, theirs, &here, missing),
                None => missing.push(here),
            }
        }
    }
    if ours["items"].is_object() {
        walk(
            &ours["items"],
            &served["items"],
            &format!("{path}[]"),
            missing,
        );
    }
    if ours["additionalProperties"].is_object() {
        walk(
            &ours["additionalProperties"],
            &served["additionalProperties"],
            &format!("{path}{{}}"),
            missing,
        );
    }
}

/// Whether the served CRD declares every field this operator writes or reads.
pub fn schema_verdict(missing: &[String]) -> Result<(), String> {
    const NAMED: usize = 5;
    if missing.is_empty() {
        return Ok(());
    }
    let mut named = missing
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if missing.len() > NAMED {
        named.push_str(&format!(" and {} more", missing.len() - NAMED));
    }
    Err(format!(
        "the served MarekvsCluster CRD is older than this operator ({}): it lacks {named}, so the \
         API server refuses the operator's status writes; upgrade the CRD (helm upgrade with \
         crds.create=true, or kubectl apply --server-side -f \
         deploy/crd/marekvs.io_marekvsclusters.yaml)",
        crate::VERSION
    ))
}

/// One read of the Lease: its record (`None`: no such Lease), and when it was read, on this
/// process's monotonic clock from its first read.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseReading {
    pub record: Option<LeaseSpec>,
    pub at: Duration,
}

/// What the reads of the Lease so far say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseVerdict {
    /// A holder renewed it (its record changed) this long after the first read.
    Renewed { holder: String, after: Duration },
    /// Nothing changed yet, and a lease duration has not passed since the first read.
    Watching,
    /// It failed: the one-line reason.
    Failed(String),
}

fn holder_of(record: &LeaseSpec) -> Option<&str> {
    record.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// The rule. The first read must find the Lease held; it passes once a later read finds the
/// record changed and held (a renewal, or another replica taking over), and fails if the
/// record is still the same a lease duration after the first read (the longer of the duration
/// the holder declared and the chart's: what a standby waits before it takes over), or if the
/// Lease is released or deleted meanwhile.
pub fn lease_verdict(target: &LeaseTarget, readings: &[LeaseReading]) -> LeaseVerdict {
    let lease = format!("{}/{}", target.namespace, target.name);
    let Some(first) = readings.first() else {
        return LeaseVerdict::Watching;
    };
    let Some(first_record) = &first.record else {
        return LeaseVerdict::Failed(format!(
            "no Lease {lease}: no operator replica has led (is the Deployment running, with \
             --leader-elect and --lease-name={}?)",
            target.name
        ));
    };
    let Some(first_holder) = holder_of(first_record) else {
        return LeaseVerdict::Failed(format!(
            "the Lease {lease} is held by no one: no operator replica leads (its pods are not \
             running, or not ready to lead)"
        ));
    };
    let declared = first_record
        .lease_duration_seconds
        .map_or(Duration::ZERO, |s| Duration::from_secs(s.max(0) as u64));
    let bound = declared.max(target.duration);
    for r in &readings[1..] {
        let Some(record) = &r.record else {
            return LeaseVerdict::Failed(format!(
                "the Lease {lease} was deleted while it was being checked"
            ));
        };
        if record == first_record {
            continue;
        }
        return match holder_of(record) {
            Some(holder) => LeaseVerdict::Renewed {
                holder: holder.to_string(),
                after: r.at.saturating_sub(first.at),
            },
            None => LeaseVerdict::Failed(format!(
                "the Lease {lease} was released by {first_holder} and is held by no one"
            )),
        };
    }
    let last = readings.last().map_or(Duration::ZERO, |r| r.at);
    if last.saturating_sub(first.at) > bound {
        LeaseVerdict::Failed(format!(
            "the Lease {lease} held by {first_holder} was not renewed within {}s: its holder is \
             not running or cannot reach the API server (a standby takes over after that long)",
            bound.as_secs()
        ))
    } else {
        LeaseVerdict::Watching
    }
}

/// How often the Lease is read: often enough to see a renewal (every seventh of a lease
/// duration, at least every 0.5 s) well within the bound.
pub fn poll_interval(duration: Duration) -> Duration {
    (duration / 10).clamp(Duration::from_millis(200), Duration::from_secs(1))
}

/// The whole check: `Ok` with a line saying what passed, or `Err` with the one-line reason.
pub async fn run(client: Client, target: &Target) -> Result<String, String> {
    let clusters: Api<MarekvsCluster> = match &target.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let answer = match clusters.list(&ListParams::default().limit(1)).await {
        Ok(list) => ListAnswer::Listed(list.items.len()),
        Err(kube::Error::Api(e)) => ListAnswer::Status(e.code, e.message),
        Err(e) => ListAnswer::Unreachable(e.to_string()),
    };
    let mut served = crd_verdict(target.namespace.as_deref(), &answer)?;
    let request = http::Request::get(OPENAPI_PATH)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(text) => {
            let document: Value = serde_json::from_str(&text)
                .map_err(|e| format!("the API server's {OPENAPI_PATH} is no JSON: {e}"))?;
            let schema = served_schema(&document).ok_or_else(|| {
                format!("the API server's {OPENAPI_PATH} has no MarekvsCluster schema")
            })?;
            schema_verdict(&missing_fields(&own_schema(), schema))?;
            served.push_str(", with every field of this operator's CRD");
        }
        // Where discovery is locked down, the schema is not compared; the rest still is.
        Err(kube::Error::Api(e)) => served.push_str(&format!(
            " (its schema not compared: {OPENAPI_PATH} answered {})",
            e.code
        )),
        Err(e) => return Err(format!("reading {OPENAPI_PATH}: {e}")),
    }
    let Some(lease) = &target.lease else {
        return Ok(format!("{served}; leader election is off"));
    };
    let leases: Api<Lease> = Api::namespaced(client, &lease.namespace);
    let start = Instant::now();
    let mut readings = Vec::new();
    loop {
        let record = match leases.get_opt(&lease.name).await {
            Ok(found) => found.map(|l| l.spec.unwrap_or_default()),
            Err(kube::Error::Api(e)) if e.code == 403 => {
                return Err(format!(
                    "the ServiceAccount may not get the Lease {}/{}: the leader-election Role \
                     is missing or names another Lease (leaderElection.leaseName): {}",
                    lease.namespace, lease.name, e.message
                ));
            }
            Err(e) => {
                return Err(format!(
                    "reading the Lease {}/{}: {e}",
                    lease.namespace, lease.name
                ));
            }
        };
        readings.push(LeaseReading {
            record,
            at: start.elapsed(),
        });
        match lease_verdict(lease, &readings) {
            LeaseVerdict::Watching => tokio::time::sleep(poll_interval(lease.duration)).await,
            LeaseVerdict::Renewed { holder, after } => {
                return Ok(format!(
                    "{served}; the Lease {}/{} is held by {holder}, renewed {:.1}s after the \
                     first read (within {}s)",
                    lease.namespace,
                    lease.name,
                    after.as_secs_f64(),
                    lease.duration.as_secs()
                ));
            }
            LeaseVerdict::Failed(reason) => return Err(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    const L: Duration = Duration::from_secs(15);

    fn target() -> LeaseTarget {
        LeaseTarget {
            namespace: "ops".into(),
            name: "marekvs-operator".into(),
            duration: L,
        }
    }

    fn held(holder: &str, renewed_second: i64) -> Option<LeaseSpec> {
        Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                Timestamp::from_second(1_800_000_000 + renewed_second).unwrap(),
            )),
            ..LeaseSpec::default()
        })
    }

    fn read(record: Option<LeaseSpec>, at_ms: u64) -> LeaseReading {
        LeaseReading {
            record,
            at: Duration::from_millis(at_ms),
        }
    }

    #[test]
    fn a_served_list_passes_and_each_refusal_says_what_to_fix() {
        assert_eq!(
            crd_verdict(Some("apps"), &ListAnswer::Listed(1)),
            Ok("MarekvsClusters are served in namespace apps (1 listed)".into())
        );
        assert!(
            crd_verdict(None, &ListAnswer::Listed(0))
                .unwrap()
                .contains("every namespace")
        );
        let not_served = crd_verdict(None, &ListAnswer::Status(404, "not found".into()));
        assert!(not_served.unwrap_err().contains("CRD is not served"));
        let forbidden =
            crd_verdict(Some("apps"), &ListAnswer::Status(403, "no".into())).unwrap_err();
        assert!(
            forbidden.contains("may not list marekvsclusters in namespace apps"),
            "{forbidden}"
        );
        for bad in [
            ListAnswer::Status(401, "token".into()),
            ListAnswer::Status(500, "etcd".into()),
            ListAnswer::Unreachable("connection refused".into()),
        ] {
            let reason = crd_verdict(None, &bad).unwrap_err();
            assert!(!reason.contains('\n'), "one line: {reason}");
        }
    }

    /// The served schema is this operator's with `drop` (JSON pointers) removed.
    fn served_without(drop: &[&str]) -> Value {
        let mut served = own_schema();
        for pointer in drop {
            let (parent, name) = pointer.rsplit_once('/').unwrap();
            let removed = served
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .and_then(|o| o.remove(name));
            assert!(
                removed.is_some(),
                "{pointer} is not in the operator's schema"
            );
        }
        served
    }

    #[test]
    fn the_served_crd_must_declare_every_field_this_operator_has() {
        let ours = own_schema();
        assert!(missing_fields(&ours, &ours).is_empty());
        assert_eq!(schema_verdict(&[]), Ok(()));
        // The CRD of a chart from before status.lastPassTime and operatorVersion.
        let old = served_without(&[
            "/properties/status/properties/lastPassTime",
            "/properties/status/properties/operatorVersion",
        ]);
        let missing = missing_fields(&ours, &old);
        assert_eq!(missing, ["status.lastPassTime", "status.operatorVersion"]);
        let reason = schema_verdict(&missing).unwrap_err();
        assert!(
            reason.contains("lacks status.lastPassTime, status.operatorVersion"),
            "{reason}"
        );
        assert!(
            reason.contains("upgrade the CRD") && !reason.contains('\n'),
            "{reason}"
        );
        // Nested in array items: a member's metrics.
        let old = served_without(&[
            "/properties/status/properties/members/items/properties/metrics/properties/ringOps",
        ]);
        assert_eq!(
            missing_fields(&ours, &old),
            ["status.members[].metrics.ringOps"]
        );
        // A field the served CRD has and this operator does not is no matter.
        let newer = ours.clone();
        let older_operator = served_without(&["/properties/status/properties/lastPassTime"]);
        assert!(missing_fields(&older_operator, &newer).is_empty());
        // Many missing: five named, the rest counted.
        let many: Vec<String> = (0..8).map(|i| format!("status.f{i}")).collect();
        let reason = schema_verdict(&many).unwrap_err();
        assert!(
            reason.contains("status.f4 and 3 more") && !reason.contains("status.f5"),
            "{reason}"
        );
    }

    #[test]
    fn the_served_schema_is_found_by_its_group_version_kind() {
        let schema = own_schema();
        let document = serde_json::json!({"components": {"schemas": {
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object"},
            "io.marekvs.v1alpha1.MarekvsClusterList": {"x-kubernetes-group-version-kind":
                [{"group": "marekvs.io", "version": "v1alpha1", "kind": "MarekvsClusterList"}]},
            "io.marekvs.v1alpha1.MarekvsCluster": {
                "x-kubernetes-group-version-kind":
                    [{"group": "marekvs.io", "version": "v1alpha1", "kind": "MarekvsCluster"}],
                "properties": schema["properties"].clone()},
        }}});
        let found = served_schema(&document).expect("found");
        assert!(missing_fields(&schema, found).is_empty());
        assert!(served_schema(&serde_json::json!({"components": {"schemas": {}}})).is_none());
    }

    #[test]
    fn a_lease_that_changes_passes_whatever_its_renew_time_says() {
        // Renewed 2.1 s after the first read: passes, naming the holder.
        let r = [
            read(held("op-a", 0), 0),
            read(held("op-a", 0), 1000),
            read(held("op-a", 2), 2100),
        ];
        assert_eq!(
            lease_verdict(&target(), &r),
            LeaseVerdict::Renewed {
                holder: "op-a".into(),
                after: Duration::from_millis(2100)
            }
        );
        // A renewTime an hour in the past or the future is not judged: only the change is.
        let r = [read(held("op-a", -3600), 0), read(held("op-a", 3600), 500)];
        assert!(matches!(
            lease_verdict(&target(), &r),
            LeaseVerdict::Renewed { .. }
        ));
        // Another replica took over meanwhile: the Lease is held and written.
        let r = [read(held("op-a", 0), 0), read(held("op-b", 20), 900)];
        assert_eq!(
            lease_verdict(&target(), &r),
            LeaseVerdict::Renewed {
                holder: "op-b".into(),
                after: Duration::from_millis(900)
            }
        );
    }

    #[test]
    fn an_unchanged_lease_is_watched_for_one_lease_duration_then_fails() {
        let same = |ms| read(held("op-a", 0), ms);
        assert_eq!(lease_verdict(&target(), &[]), LeaseVerdict::Watching);
        assert_eq!(lease_verdict(&target(), &[same(0)]), LeaseVerdict::Watching);
        assert_eq!(
            lease_verdict(&target(), &[same(0), same(15_000)]),
            LeaseVerdict::Watching
        );
        let LeaseVerdict::Failed(reason) = lease_verdict(&target(), &[same(0), same(15_001)])
        else {
            panic!("not failed");
        };
        assert!(
            reason.contains("ops/marekvs-operator held by op-a was not renewed within 15s"),
            "{reason}"
        );
        // The holder declared a longer duration: that is the bound.
        let mut long = held("op-a", 0).unwrap();
        long.lease_duration_seconds = Some(40);
        let r = [
            read(Some(long.clone()), 0),
            read(Some(long.clone()), 30_000),
        ];
        assert_eq!(lease_verdict(&target(), &r), LeaseVerdict::Watching);
        let r = [read(Some(long.clone()), 0), read(Some(long), 40_001)];
        assert!(matches!(
            lease_verdict(&target(), &r),
            LeaseVerdict::Failed(_)
        ));
    }

    #[test]
    fn no_lease_no_holder_a_release_or_a_delete_fails_at_once() {
        let cases = [
            (vec![read(None, 0)], "no Lease ops/marekvs-operator"),
            (
                vec![read(Some(LeaseSpec::default()), 0)],
                "is held by no one",
            ),
            (vec![read(held("", 0), 0)], "is held by no one"),
            (
                vec![
                    read(held("op-a", 0), 0),
                    read(Some(LeaseSpec::default()), 700),
                ],
                "released by op-a",
            ),
            (
                vec![read(held("op-a", 0), 0), read(None, 700)],
                "was deleted",
            ),
        ];
        for (readings, words) in cases {
            match lease_verdict(&target(), &readings) {
                LeaseVerdict::Failed(reason) => {
                    assert!(reason.contains(words), "{reason} lacks {words}");
                    assert!(!reason.contains('\n'));
                }
                other => panic!("{readings:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_lease_is_read_often_enough_to_see_a_renewal() {
        // The holder renews every seventh of a lease duration (at least every 0.5 s).
        for secs in [2, 15, 60, 600] {
            let d = Duration::from_secs(secs);
            let renew_every = (d / 7).max(Duration::from_millis(500));
            assert!(poll_interval(d) <= renew_every, "{secs}s");
            assert!(poll_interval(d) >= Duration::from_millis(200));
        }
    }
}
