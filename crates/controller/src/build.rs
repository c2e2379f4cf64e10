//! Desired child objects of a MarekvsCluster, built as plain values (no I/O): the headless
//! and client Services, the PodDisruptionBudget, and each member's PVC and Pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Lifecycle,
    LifecycleHandler, LocalObjectReference, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretKeySelector, SecurityContext, Service, ServicePort,
    ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use marekvs_api::{DEFAULT_CPU, DEFAULT_MEMORY, MarekvsCluster, REQUIREPASS, ResourcesSpec};
use serde_json::{Value, json};

use crate::error::Error;

pub const MANAGER: &str = "marekvs-operator";
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_ORDINAL: &str = "marekvs.io/ordinal";
/// `"on"` or `"off"`: whether the client Service routes to the member (off for a leaver, so
/// that no new client writes originate on it before its hand-off).
pub const LABEL_CLIENT_TRAFFIC: &str = "marekvs.io/client-traffic";
pub const CLIENT_TRAFFIC_ON: &str = "on";
pub const CLIENT_TRAFFIC_OFF: &str = "off";
/// Set on a member's pod once its node answered `/drain` with 200.
pub const ANNOTATION_DRAINED_AT: &str = "marekvs.io/drained-at";
/// The pod's container restart count when it was drained: a node that restarted since is no
/// longer Leaving (the drain does not survive a restart) and must be drained again.
pub const ANNOTATION_DRAINED_RESTARTS: &str = "marekvs.io/drained-restarts";
/// A hash of the pod spec the member was created from; a different desired hash means the
/// member is outdated and a rolling update restarts it.
pub const ANNOTATION_TEMPLATE_HASH: &str = "marekvs.io/template-hash";
/// Set by a user on a member's pod (`"true"`): move this member to a fresh, empty volume,
/// safely (drained, its data handed off first, one member at a time). Read into
/// `PodObs::replace_volume`; once the replacement is recorded in `status.rollout`, the record
/// carries the request (the annotation goes with the pod that is deleted).
pub const ANNOTATION_REPLACE_VOLUME: &str = "marekvs.io/replace-volume";
/// Set by a user on a member's pod (`"true"`): restart this member on its own volume, safely
/// (drained, its data handed off first, one member at a time, like one step of a rolling
/// update). Read into `PodObs::restart`; once recorded in `status.rollout` (reason
/// `RestartRequested`) the record carries the request.
pub const ANNOTATION_RESTART: &str = "marekvs.io/restart";
/// On a member's PVC: since when its member has been away from the cluster (RFC 3339), written
/// when it stops serving or is removed and dropped when it serves again (`core::stale`). A
/// volume away longer than `storage.staleVolumeGraceSeconds` is never mounted again. Removing
/// the annotation by hand accepts the volume as it is (it is stamped again from then).
pub const ANNOTATION_ABSENT_SINCE: &str = marekvs_core::stale::ANNOTATION_ABSENT_SINCE;
/// On a member's PVC: since when a member has served from it (RFC 3339), written once, the
/// first time its member is seen ready on it. A stale volume whose member left before another
/// member's volume first served is kept for the user instead of replaced (`core::stale`).
pub const ANNOTATION_SERVED_SINCE: &str = marekvs_core::stale::ANNOTATION_SERVED_SINCE;
/// On a member's PVC: the uid of the cluster object it was created for. PVCs have no owner
/// reference (data outlives the object), so this is how the operator tells its own volumes
/// from look-alikes (`marekvs_core::ownership`); a later object of the same name re-adopts a
/// volume stamped with an earlier uid and stamps it again.
pub const ANNOTATION_CLUSTER_UID: &str = "marekvs.io/cluster-uid";
/// On a member's PVC: how many pods the operator has made for it, counted up before each
/// attempt to create one ("0" when the PVC is made; an attempt that reads its pod already
/// there is not counted; two racing attempts may both count: never fewer). `"1"` with that pod's container never started
/// proves that no process ever ran on the volume (`PvcObs::pods_made`).
pub const ANNOTATION_PODS_MADE: &str = "marekvs.io/pods-made";
/// On the Services and the PDB: the hash of the content last applied, so an unchanged object is
/// not applied again on every pass.
pub const ANNOTATION_APPLIED_HASH: &str = "marekvs.io/applied-hash";

/// On the cluster object: adopt the orphaned pods of a StatefulSet that ran its members
/// (migration from marekvs's own operator, docs/migration.md). Only this value opts in.
pub const ANNOTATION_ADOPT: &str = "marekvs.io/adopt";
pub const ADOPT_STATEFULSET_ORPHANS: &str = "statefulset-orphans";

/// The cluster object opts in to adopting a StatefulSet's orphaned members.
pub fn opted_in(cr: &MarekvsCluster) -> bool {
    cr.annotations()
        .get(ANNOTATION_ADOPT)
        .is_some_and(|v| v.trim() == ADOPT_STATEFULSET_ORPHANS)
}
pub const PORT_RESP: i32 = 6379;
pub const PORT_MESH: i32 = 7373;
pub const PORT_GOSSIP: i32 = 7946;
pub const PORT_METRICS: i32 = 9121;
/// The image runs as nobody (uid/gid 65534), from scratch.
const NOBODY: i64 = 65534;

pub fn selector_labels(cr: &MarekvsCluster) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.into(), "marekvs".into()),
        (LABEL_INSTANCE.into(), cr.name_any()),
    ])
}

/// `app.kubernetes.io/name=marekvs,app.kubernetes.io/instance=<name>`
pub fn selector_string(cr: &MarekvsCluster) -> String {
    selector_labels(cr)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn labels(cr: &MarekvsCluster, ordinal: Option<u32>) -> BTreeMap<String, String> {
    let mut l = selector_labels(cr);
    l.insert(LABEL_MANAGED_BY.into(), MANAGER.into());
    if let Some(o) = ordinal {
        l.insert(LABEL_ORDINAL.into(), o.to_string());
    }
    l
}

pub fn headless_service_name(cr: &MarekvsCluster) -> String {
    format!("{}-headless", cr.name_any())
}

pub fn member_name(cr: &MarekvsCluster, ordinal: u32) -> String {
    format!("{}-{ordinal}", cr.name_any())
}

pub fn pvc_name(cr: &MarekvsCluster, ordinal: u32) -> String {
    format!("data-{}-{ordinal}", cr.name_any())
}

/// The cluster object as the controller owner of a child. An object read from the API always
/// has the name and uid this needs.
fn owner_refs(cr: &MarekvsCluster) -> Result<Vec<OwnerReference>, Error> {
    cr.controller_owner_ref(&())
        .map(|r| vec![r])
        .ok_or_else(|| Error::NoUid(cr.name_any()))
}

/// The metadata of a child owned by the cluster object.
fn owned_meta(
    cr: &MarekvsCluster,
    name: String,
    namespace: Option<String>,
    ordinal: Option<u32>,
) -> Result<ObjectMeta, Error> {
    Ok(ObjectMeta {
        name: Some(name),
        namespace,
        labels: Some(labels(cr, ordinal)),
        owner_references: Some(owner_refs(cr)?),
        ..Default::default()
    })
}

fn service_port(name: &str, port: i32, protocol: &str) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

fn ports() -> Vec<ServicePort> {
    vec![
        service_port("resp", PORT_RESP, "TCP"),
        service_port("mesh", PORT_MESH, "TCP"),
        service_port("gossip", PORT_GOSSIP, "UDP"),
        service_port("metrics", PORT_METRICS, "TCP"),
    ]
}

/// Headless Service for member DNS (`<name>-<ordinal>.<name>-headless.<ns>.svc`) and gossip
/// seeds; it publishes not-ready addresses because a Joining node is unready by design yet must
/// resolve its peers.
pub fn headless_service(cr: &MarekvsCluster) -> Result<Service, Error> {
    Ok(Service {
        metadata: owned_meta(cr, headless_service_name(cr), cr.namespace(), None)?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(cr)),
            ports: Some(ports()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The client Service's selector: the members whose pod carries `client-traffic: "on"` (a
/// leaver's pod is labelled off before its drain, so no new client write originates on it).
/// The headless Service, the PDB and the topology spread keep [`selector_labels`]: they
/// count every member.
pub fn client_selector_labels(cr: &MarekvsCluster) -> BTreeMap<String, String> {
    let mut l = selector_labels(cr);
    l.insert(LABEL_CLIENT_TRAFFIC.into(), CLIENT_TRAFFIC_ON.into());
    l
}

/// Client Service: the Redis protocol port of ready members that take client traffic, of the
/// type and with the annotations `spec.clientService` asks for. Traffic goes `PreferClose` unless told
/// otherwise, as marekvs's own operator sets it. The type is always sent (`ClusterIP` by
/// default), so going back to `ClusterIP` is a change of a field the operator owns: the API
/// server then drops the node ports it allocated.
pub fn client_service(cr: &MarekvsCluster) -> Result<Service, Error> {
    let options = cr.spec.client_service.clone().unwrap_or_default();
    let mut metadata = owned_meta(cr, cr.name_any(), cr.namespace(), None)?;
    if !options.annotations.is_empty() {
        metadata.annotations = Some(options.annotations);
    }
    let ranges = options.load_balancer_source_ranges;
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(options.type_.as_str().into()),
            selector: Some(client_selector_labels(cr)),
            ports: Some(vec![service_port("resp", PORT_RESP, "TCP")]),
            load_balancer_source_ranges: (!ranges.is_empty()).then_some(ranges),
            traffic_distribution: Some(options.traffic_distribution.as_str().into()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// minAvailable = replicationFactor: voluntary evictions never take the last copy.
pub fn pdb(cr: &MarekvsCluster) -> Result<PodDisruptionBudget, Error> {
    Ok(PodDisruptionBudget {
        metadata: owned_meta(cr, cr.name_any(), cr.namespace(), None)?,
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(cr.spec.replication_factor)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(cr)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// A member's volume. No owner reference: data outlives the custom resource on purpose, and a
/// resource re-created with the same name adopts it (by the cluster-uid stamp). `pods_made`:
/// 1 when its pod is created right after it (counted before that pod), else 0.
pub fn pvc(
    cr: &MarekvsCluster,
    ordinal: u32,
    pods_made: u32,
) -> Result<PersistentVolumeClaim, Error> {
    let uid = cr.uid().ok_or_else(|| Error::NoUid(cr.name_any()))?;
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(pvc_name(cr, ordinal)),
            namespace: cr.namespace(),
            labels: Some(labels(cr, Some(ordinal))),
            annotations: Some(BTreeMap::from([
                (ANNOTATION_CLUSTER_UID.into(), uid),
                (ANNOTATION_PODS_MADE.into(), pods_made.to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(cr.spec.storage.size.clone()),
                )])),
                ..Default::default()
            }),
            storage_class_name: cr.spec.storage.class_name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn env_var(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    }
}

fn container_port(name: &str, port: i32, protocol: &str) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

/// GET `path` on the metrics port (the image has no shell for exec probes or hooks).
fn http_get(path: &str) -> HTTPGetAction {
    HTTPGetAction {
        path: Some(path.into()),
        port: IntOrString::String("metrics".into()),
        ..Default::default()
    }
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(http_get(path)),
        period_seconds: Some(period),
        timeout_seconds: Some(1),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

/// CPU is a request only (no limit: throttling hurts tail latency); memory is both request
/// and limit. Each one unset takes marekvs's own operator's default (500m CPU, 1Gi memory),
/// so a member is never BestEffort by accident; an explicit value always wins.
fn resources(r: Option<&ResourcesSpec>) -> ResourceRequirements {
    let cpu = r.and_then(|r| r.cpu.clone()).unwrap_or(DEFAULT_CPU.into());
    let mem = r
        .and_then(|r| r.memory.clone())
        .unwrap_or(DEFAULT_MEMORY.into());
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu)),
            ("memory".to_string(), Quantity(mem.clone())),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), Quantity(mem))])),
        ..Default::default()
    }
}

pub const TOPOLOGY_HOSTNAME: &str = "kubernetes.io/hostname";
pub const TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// The user's `topologySpreadConstraints` when set (even to `[]`), else marekvs's own
/// operator's: maxSkew 1 over `kubernetes.io/hostname` (soft unless
/// `hostnameSpreadWhenUnsatisfiable: DoNotSchedule`) and over `topology.kubernetes.io/zone`
/// (soft), counting the cluster's member pods (the Services' and the PDB's selector).
fn topology_spread(cr: &MarekvsCluster) -> Vec<TopologySpreadConstraint> {
    if let Some(theirs) = &cr.spec.topology_spread_constraints {
        return theirs.clone();
    }
    let hostname = cr
        .spec
        .hostname_spread_when_unsatisfiable
        .unwrap_or_default();
    let constraint = |key: &str, when: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: when.into(),
        label_selector: Some(LabelSelector {
            match_labels: Some(selector_labels(cr)),
            ..Default::default()
        }),
        ..Default::default()
    };
    vec![
        constraint(TOPOLOGY_HOSTNAME, hostname.as_str()),
        constraint(TOPOLOGY_ZONE, "ScheduleAnyway"),
    ]
}

/// The variable naming the gossip cluster (a node refuses gossip from another name).
const GOSSIP_CLUSTER: &str = "MAREKVS_CLUSTER";

/// `MAREKVS_CLUSTER` for the members: the name recorded in status (before any pod is built,
/// `reconcile.rs`), or, if none is, what would be recorded (a cluster with members keeps the
/// server's default). `None` for the server's default: no variable, pods unchanged.
fn gossip_env_value(cr: &MarekvsCluster) -> Option<String> {
    let status = cr.status.as_ref();
    let recorded = status.and_then(|s| s.gossip_cluster.clone());
    let name = recorded.unwrap_or_else(|| {
        let has_members = status.is_some_and(|s| !s.instance_names.is_empty());
        let ns = cr.namespace().unwrap_or_default();
        marekvs_core::gossip::first_name(&ns, &cr.name_any(), has_members, false)
    });
    marekvs_core::gossip::env_value(&name).map(str::to_string)
}

/// A member's pod spec: the same hostname and subdomain a StatefulSet would give it, so DNS
/// names and node ids are unchanged; probes and the preStop hook are HTTP.
pub fn pod_spec(cr: &MarekvsCluster, ordinal: u32, cluster_domain: &str) -> PodSpec {
    let ns = cr.namespace().unwrap_or_default();
    let spec = &cr.spec;
    let seeds = format!(
        "{}.{ns}.svc.{cluster_domain}:{PORT_GOSSIP}",
        headless_service_name(cr)
    );
    let mut env = vec![
        env_var("MAREKVS_SEEDS", seeds),
        env_var("MAREKVS_REPLICAS_N", spec.replication_factor.to_string()),
        env_var("MAREKVS_ADVERTISE_IP", "auto".into()),
        env_var("MAREKVS_DATA_DIR", "/data".into()),
    ];
    let user_named = spec.extra_env.contains_key(GOSSIP_CLUSTER)
        || spec.env.iter().any(|e| e.name == GOSSIP_CLUSTER);
    if !user_named && let Some(gossip) = gossip_env_value(cr) {
        env.push(env_var(GOSSIP_CLUSTER, gossip));
    }
    env.extend(spec.extra_env.iter().map(|(k, v)| env_var(k, v.clone())));
    // The password, whichever way it was given, is added once below.
    env.extend(spec.env.iter().filter(|e| e.name != REQUIREPASS).cloned());
    if let Some(password) = spec.password_secret_ref() {
        // From the Secret, never in plain env: the operator reads the same key to AUTH.
        env.push(EnvVar {
            name: REQUIREPASS.into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: password.name,
                    key: password.key,
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let image_pull_secrets = (!spec.image_pull_secrets.is_empty()).then(|| {
        spec.image_pull_secrets
            .iter()
            .map(|s| LocalObjectReference {
                name: s.name.clone(),
            })
            .collect()
    });
    PodSpec {
        image_pull_secrets,
        priority_class_name: spec.priority_class_name.clone(),
        service_account_name: spec.service_account_name.clone(),
        hostname: Some(member_name(cr, ordinal)),
        subdomain: Some(headless_service_name(cr)),
        termination_grace_period_seconds: Some(60),
        enable_service_links: Some(false),
        // Members never call the Kubernetes API: no ServiceAccount token in their pods.
        automount_service_account_token: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_user: Some(NOBODY),
            run_as_group: Some(NOBODY),
            run_as_non_root: Some(true),
            fs_group: Some(NOBODY),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        containers: vec![Container {
            name: "marekvs".into(),
            image: Some(spec.image.clone()),
            env: Some(env),
            ports: Some(vec![
                container_port("resp", PORT_RESP, "TCP"),
                container_port("mesh", PORT_MESH, "TCP"),
                container_port("gossip", PORT_GOSSIP, "UDP"),
                container_port("metrics", PORT_METRICS, "TCP"),
            ]),
            // A joining node bootstraps its partitions before /ready answers 200: allow it an
            // hour.
            startup_probe: Some(probe("/ready", 2, 1800)),
            readiness_probe: Some(probe("/ready", 2, 2)),
            liveness_probe: Some(probe("/alive", 10, 6)),
            lifecycle: Some(Lifecycle {
                pre_stop: Some(LifecycleHandler {
                    http_get: Some(http_get("/drain")),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            resources: Some(resources(spec.resources.as_ref())),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".into(),
                mount_path: "/data".into(),
                ..Default::default()
            }]),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        volumes: Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc_name(cr, ordinal),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        node_selector: spec.node_selector.clone(),
        tolerations: spec.tolerations.clone(),
        affinity: spec.affinity.clone(),
        topology_spread_constraints: Some(topology_spread(cr)),
        ..Default::default()
    }
}

/// A member's pod: the user's `podLabels` and `podAnnotations` under the operator's own
/// (which the schema keeps them from setting, and which win here anyway), annotated with the
/// hash of its template.
pub fn pod(cr: &MarekvsCluster, ordinal: u32, cluster_domain: &str) -> Result<Pod, Error> {
    let spec = pod_spec(cr, ordinal, cluster_domain);
    let hash = pod_template_hash(cr, &spec)?;
    // The pod's namespace is always set (empty for a cluster object without one), as it was.
    let mut metadata = owned_meta(
        cr,
        member_name(cr, ordinal),
        Some(cr.namespace().unwrap_or_default()),
        Some(ordinal),
    )?;
    let mut labels = cr.spec.pod_labels.clone();
    labels.extend(metadata.labels.take().unwrap_or_default());
    // Not in the template hash (a label the core flips, never a reason to roll): a new
    // member takes client traffic, the member being removed does not (its pod re-created mid
    // removal: lost, or restarted to close its client connections) from its first moment.
    let removing = cr
        .status
        .as_ref()
        .and_then(|s| s.removal.as_ref())
        .is_some_and(|r| u32::try_from(r.ordinal) == Ok(ordinal));
    let traffic = if removing {
        CLIENT_TRAFFIC_OFF
    } else {
        CLIENT_TRAFFIC_ON
    };
    labels.insert(LABEL_CLIENT_TRAFFIC.into(), traffic.into());
    metadata.labels = Some(labels);
    let mut annotations = cr.spec.pod_annotations.clone();
    annotations.insert(ANNOTATION_TEMPLATE_HASH.into(), hash);
    metadata.annotations = Some(annotations);
    Ok(Pod {
        metadata,
        spec: Some(spec),
        ..Default::default()
    })
}

/// The hash a member's pod must carry to be up to date.
pub fn desired_template_hash(
    cr: &MarekvsCluster,
    ordinal: u32,
    cluster_domain: &str,
) -> Result<String, Error> {
    pod_template_hash(cr, &pod_spec(cr, ordinal, cluster_domain))
}

/// [`template_hash`] of a pod's template: its spec and the user's `podLabels` and
/// `podAnnotations` (a change to either rolls the members). Without labels or annotations it
/// is the hash of the spec alone, as it was before they existed, so no running member is
/// rolled by the upgrade that added them.
pub fn pod_template_hash(cr: &MarekvsCluster, spec: &PodSpec) -> Result<String, Error> {
    let spec_value = pod_spec_value(spec)?;
    let (labels, annotations) = (&cr.spec.pod_labels, &cr.spec.pod_annotations);
    if labels.is_empty() && annotations.is_empty() {
        return Ok(template_hash(&spec_value));
    }
    Ok(template_hash(&json!({
        "podSpec": spec_value, "podLabels": labels, "podAnnotations": annotations,
    })))
}

/// A pod spec as a `serde_json::Value`, the form its hash is taken over: the hash every
/// running member carries was taken over the `Value` the former `json!` builder made, whose
/// object keys are sorted (serde_json's map is a `BTreeMap` without its `preserve_order`
/// feature) and which held exactly the fields set here (unset fields are omitted, a set empty
/// list or map is kept). The typed spec serialized to a `Value` is that same `Value`, so the
/// hash is unchanged; serializing the typed spec straight to text would write the fields in
/// struct order instead and change every hash (rolling every member). The golden test
/// (`build_golden`) holds the hashes.
fn pod_spec_value(spec: &PodSpec) -> Result<Value, Error> {
    serde_json::to_value(spec).map_err(|source| Error::Serialize {
        what: format!("pod spec {}", spec.hostname.as_deref().unwrap_or_default()),
        source,
    })
}

/// FNV-1a (64 bit) of a JSON value's text (a pod spec's, or a Service's or the PDB's for the
/// applied hash): stable across runs and operator restarts (serde_json
/// writes object keys in a fixed order), and any change to image, env, resources or scheduling
/// changes it.
pub fn template_hash(value: &Value) -> String {
    // `Display` of a `Value` is its compact JSON, the same text as `serde_json::to_string`.
    let text = value.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What server-side apply sends for a Service or the PDB: `desired` as JSON with its
/// applied-hash annotation (the hash of that JSON without it) beside its own annotations
/// (the client Service's), and the hash.
pub fn applied<K: serde::Serialize>(desired: &K) -> Result<(Value, String), serde_json::Error> {
    let mut value = serde_json::to_value(desired)?;
    let hash = template_hash(&value);
    let annotations = &mut value["metadata"]["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[ANNOTATION_APPLIED_HASH] = json!(hash);
    Ok((value, hash))
}

/// Ordinal from `<cluster>-<n>` (or `data-<cluster>-<n>` with `prefix = "data-"`).
pub fn ordinal_from_name(cr_name: &str, prefix: &str, name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix(prefix)?
        .strip_prefix(cr_name)?
        .strip_prefix('-')?;
    if rest.is_empty()
        || (rest.len() > 1 && rest.starts_with('0'))
        || !rest.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    rest.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use marekvs_api::MarekvsClusterSpec;

    fn cr() -> MarekvsCluster {
        let spec: MarekvsClusterSpec = serde_json::from_value(json!({
            "image": "marekvs:1", "replicationFactor": 2, "storage": {"size": "5Gi", "className": "fast"},
            "resources": {"cpu": "1", "memory": "1Gi"}, "extraEnv": {"RUST_LOG": "debug"},
            "nodeSelector": {"disk": "ssd"}
        }))
        .unwrap();
        let mut cr = MarekvsCluster::new("demo", spec);
        cr.metadata.namespace = Some("ns".into());
        cr.metadata.uid = Some("uid-1".into());
        cr
    }

    #[test]
    fn pod_has_statefulset_identity_and_the_node_contract() {
        let p = serde_json::to_value(pod(&cr(), 3, "cluster.local").unwrap()).unwrap();
        assert_eq!(p["metadata"]["name"], "demo-3");
        assert_eq!(p["spec"]["hostname"], "demo-3");
        assert_eq!(p["spec"]["subdomain"], "demo-headless");
        assert_eq!(p["spec"]["securityContext"]["fsGroup"], 65534);
        assert_eq!(
            p["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let sc = &p["spec"]["containers"][0]["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"][0], "ALL");
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["kind"],
            "MarekvsCluster"
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/alive");
        assert_eq!(c["lifecycle"]["preStop"]["httpGet"]["path"], "/drain");
        assert_eq!(c["resources"]["requests"]["cpu"], "1");
        assert!(
            c["resources"]["limits"].get("cpu").is_none(),
            "no CPU limit"
        );
        assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
        let env: BTreeMap<String, String> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["value"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            env["MAREKVS_SEEDS"],
            "demo-headless.ns.svc.cluster.local:7946"
        );
        assert_eq!(env["MAREKVS_REPLICAS_N"], "2");
        assert_eq!(env["MAREKVS_DATA_DIR"], "/data");
        assert_eq!(env["RUST_LOG"], "debug");
        assert!(
            !env.contains_key("MAREKVS_NODE_ID"),
            "the node id comes from the hostname ordinal"
        );
        assert_eq!(
            p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "data-demo-3"
        );
        assert_eq!(p["spec"]["nodeSelector"]["disk"], "ssd");
    }

    /// `MAREKVS_REQUIREPASS` given in `env` from a Secret is the same password as
    /// `spec.auth`: the pod gets the same single variable and the operator reads the same key.
    #[test]
    fn a_password_in_env_is_the_same_as_spec_auth() {
        let via_auth = json!({"image": "x", "extraEnv": {"RUST_LOG": "info"},
            "auth": {"passwordSecretRef": {"name": "kv-auth", "key": "password"}}});
        let via_env = json!({"image": "x", "extraEnv": {"RUST_LOG": "info"},
            "env": [{"name": "MAREKVS_REQUIREPASS",
                     "valueFrom": {"secretKeyRef": {"name": "kv-auth", "key": "password"}}}]});
        let a: MarekvsClusterSpec = serde_json::from_value(via_auth.clone()).unwrap();
        let e: MarekvsClusterSpec = serde_json::from_value(via_env.clone()).unwrap();
        assert_eq!(a.password_secret_ref(), e.password_secret_ref());
        assert_eq!(
            e.password_secret_ref().map(|r| (r.name, r.key)),
            Some(("kv-auth".into(), "password".into()))
        );
        let (pa, pe) = (spec_of(via_auth), spec_of(via_env));
        assert_eq!(pa.containers[0].env, pe.containers[0].env);
        let named = |p: &PodSpec| {
            p.containers[0]
                .env
                .iter()
                .flatten()
                .filter(|v| v.name == REQUIREPASS)
                .count()
        };
        assert_eq!(named(&pe), 1, "the pod gets it once");
        // Same pod, same hash: moving the password from spec.auth to env restarts nothing.
        let mut c = cr();
        c.spec.auth = a.auth.clone();
        let h = desired_template_hash(&c, 0, "cluster.local").unwrap();
        c.spec.auth = None;
        c.spec.env = e.env.clone();
        assert_eq!(h, desired_template_hash(&c, 0, "cluster.local").unwrap());
        // Without either, no password.
        let none: MarekvsClusterSpec = serde_json::from_value(json!({"image": "x",
            "env": [{"name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}))
        .unwrap();
        assert_eq!(none.password_secret_ref(), None);
    }

    #[test]
    fn env_from_secrets_and_config_maps_follows_extra_env() {
        let p = spec_of(
            json!({"image": "x", "extraEnv": {"RUST_LOG": "info"}, "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}},
            {"name": "PLAIN", "value": "1"}]}),
        );
        let names: Vec<&str> = p.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "MAREKVS_SEEDS",
                "MAREKVS_REPLICAS_N",
                "MAREKVS_ADVERTISE_IP",
                "MAREKVS_DATA_DIR",
                "MAREKVS_CLUSTER",
                "RUST_LOG",
                "TOKEN",
                "MODE",
                "PLAIN"
            ]
        );
        let v = serde_json::to_value(&p.containers[0].env).unwrap();
        assert_eq!(v[7]["valueFrom"]["configMapKeyRef"]["name"], "cm");
        assert_eq!(v[6]["valueFrom"]["secretKeyRef"]["key"], "t");
    }

    #[test]
    fn pod_template_options_reach_the_pod() {
        let mut c = cr();
        c.spec = serde_json::from_value(json!({"image": "x",
            "imagePullSecrets": [{"name": "regcred"}, {"name": "other"}],
            "priorityClassName": "kv-critical", "serviceAccountName": "kv",
            "podLabels": {"team": "a", "app.kubernetes.io/instance": "sneaky"},
            "podAnnotations": {"prometheus.io/scrape": "true"}}))
        .unwrap();
        let p = pod(&c, 2, "cluster.local").unwrap();
        let spec = p.spec.as_ref().unwrap();
        let pulls: Vec<&str> = spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(pulls, ["regcred", "other"]);
        assert_eq!(spec.priority_class_name.as_deref(), Some("kv-critical"));
        assert_eq!(spec.service_account_name.as_deref(), Some("kv"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        // The operator's own labels win (the schema refuses them anyway).
        assert_eq!(labels[LABEL_INSTANCE], "demo");
        assert_eq!(labels[LABEL_ORDINAL], "2");
        let annotations = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["prometheus.io/scrape"], "true");
        assert_eq!(
            annotations[ANNOTATION_TEMPLATE_HASH],
            desired_template_hash(&c, 2, "cluster.local").unwrap()
        );
        // Unset: none of them is in the pod.
        let plain = serde_json::to_value(spec_of(json!({"image": "x"}))).unwrap();
        for field in [
            "imagePullSecrets",
            "priorityClassName",
            "serviceAccountName",
        ] {
            assert!(plain.get(field).is_none(), "{field}: {plain}");
        }
    }

    /// Every pod-level option rolls the members (it changes the hash); the client Service's
    /// options do not. Without labels and annotations the hash is the pod spec's alone, as it
    /// was before they existed.
    #[test]
    fn pod_template_options_are_in_the_hash_and_service_options_are_not() {
        let base = cr();
        let h = desired_template_hash(&base, 1, "cluster.local").unwrap();
        assert_eq!(
            h,
            template_hash(&serde_json::to_value(pod_spec(&base, 1, "cluster.local")).unwrap())
        );
        let changes: Vec<(&str, Value)> = vec![
            ("podLabels", json!({"team": "a"})),
            ("podAnnotations", json!({"a.example/x": "1"})),
            ("priorityClassName", json!("high")),
            ("serviceAccountName", json!("kv")),
            ("imagePullSecrets", json!([{"name": "regcred"}])),
            (
                "env",
                json!([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
            ),
        ];
        let mut seen = std::collections::BTreeSet::from([h.clone()]);
        for (field, value) in changes {
            let mut spec = serde_json::to_value(&base.spec).unwrap();
            spec[field] = value;
            let mut c = base.clone();
            c.spec = serde_json::from_value(spec).unwrap();
            let changed = desired_template_hash(&c, 1, "cluster.local").unwrap();
            assert!(seen.insert(changed), "{field} must change the hash");
        }
        // A different annotation value is a different hash too.
        let mut a = base.clone();
        a.spec
            .pod_annotations
            .insert("a.example/x".into(), "2".into());
        assert!(seen.insert(desired_template_hash(&a, 1, "cluster.local").unwrap()));
        let mut svc = base.clone();
        svc.spec.client_service = Some(
            serde_json::from_value(json!({"type": "LoadBalancer",
                "annotations": {"lb.example/internal": "true"},
                "loadBalancerSourceRanges": ["10.0.0.0/8"], "trafficDistribution": "PreferSameZone"}))
            .unwrap(),
        );
        assert_eq!(h, desired_template_hash(&svc, 1, "cluster.local").unwrap());
    }

    #[test]
    fn the_client_service_takes_its_options_and_prefers_close_members() {
        let v = serde_json::to_value(client_service(&cr()).unwrap()).unwrap();
        assert_eq!(v["spec"]["type"], "ClusterIP");
        assert_eq!(v["spec"]["trafficDistribution"], "PreferClose");
        assert!(v["spec"].get("loadBalancerSourceRanges").is_none());
        assert!(v["metadata"].get("annotations").is_none());
        let mut c = cr();
        c.spec.client_service = Some(
            serde_json::from_value(json!({"type": "LoadBalancer",
                "annotations": {"lb.example/internal": "true"},
                "loadBalancerSourceRanges": ["10.0.0.0/8"], "trafficDistribution": "PreferSameZone"}))
            .unwrap(),
        );
        let svc = client_service(&c).unwrap();
        let v = serde_json::to_value(&svc).unwrap();
        assert_eq!(v["spec"]["type"], "LoadBalancer");
        assert_eq!(v["spec"]["trafficDistribution"], "PreferSameZone");
        assert_eq!(v["spec"]["loadBalancerSourceRanges"], json!(["10.0.0.0/8"]));
        // What is applied keeps the user's annotations beside the applied hash.
        let (sent, hash) = applied(&svc).unwrap();
        assert_eq!(
            sent["metadata"]["annotations"],
            json!({"lb.example/internal": "true", ANNOTATION_APPLIED_HASH: hash})
        );
        assert_ne!(hash, applied(&client_service(&cr()).unwrap()).unwrap().1);
    }

    /// Only the client Service selects the client-traffic label; a new pod carries "on",
    /// and the label is no input of the template hash (existing members do not roll).
    #[test]
    fn only_the_client_service_selects_members_taking_client_traffic() {
        let c = cr();
        let every_member = json!({LABEL_NAME: "marekvs", LABEL_INSTANCE: "demo"});
        let client = serde_json::to_value(client_service(&c).unwrap()).unwrap();
        assert_eq!(
            client["spec"]["selector"],
            json!({LABEL_NAME: "marekvs", LABEL_INSTANCE: "demo", LABEL_CLIENT_TRAFFIC: "on"})
        );
        let headless = serde_json::to_value(headless_service(&c).unwrap()).unwrap();
        assert_eq!(headless["spec"]["selector"], every_member);
        let pdb = serde_json::to_value(pdb(&c).unwrap()).unwrap();
        assert_eq!(pdb["spec"]["selector"]["matchLabels"], every_member);
        assert_eq!(
            selector_string(&c),
            "app.kubernetes.io/instance=demo,app.kubernetes.io/name=marekvs"
        );
        let p = pod(&c, 2, "cluster.local").unwrap();
        for spread in p
            .spec
            .as_ref()
            .unwrap()
            .topology_spread_constraints
            .iter()
            .flatten()
        {
            let selector = spread.label_selector.as_ref().unwrap().match_labels.clone();
            assert_eq!(selector, Some(selector_labels(&c)));
        }
        assert_eq!(p.labels()[LABEL_CLIENT_TRAFFIC], "on");
        let spec_only = template_hash(&pod_spec_value(p.spec.as_ref().unwrap()).unwrap());
        assert_eq!(p.annotations()[ANNOTATION_TEMPLATE_HASH], spec_only);
    }

    #[test]
    fn the_password_comes_from_the_secret_never_in_plain_env() {
        let plain = spec_of(json!({"image": "x"}));
        let env = |p: &PodSpec| p.containers[0].env.clone().unwrap_or_default();
        assert!(env(&plain).iter().all(|e| e.name != "MAREKVS_REQUIREPASS"));
        let with = spec_of(json!({"image": "x",
            "auth": {"passwordSecretRef": {"name": "kv-auth", "key": "password"}}}));
        let e = env(&with)
            .into_iter()
            .find(|e| e.name == "MAREKVS_REQUIREPASS")
            .expect("set");
        assert_eq!(e.value, None);
        let r = e.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!((r.name.as_str(), r.key.as_str()), ("kv-auth", "password"));
        assert_eq!(r.optional, Some(false));
    }

    fn spec_of(spec: Value) -> PodSpec {
        let mut cr = MarekvsCluster::new("demo", serde_json::from_value(spec).unwrap());
        cr.metadata.namespace = Some("ns".into());
        pod_spec(&cr, 0, "cluster.local")
    }

    #[test]
    fn members_gossip_under_their_clusters_own_name_unless_it_ran_with_the_default() {
        use marekvs_api::MarekvsClusterStatus;
        let gossip = |status: Option<MarekvsClusterStatus>, spec: Value| {
            let mut cr = MarekvsCluster::new("demo", serde_json::from_value(spec).unwrap());
            cr.metadata.namespace = Some("ns".into());
            cr.status = status;
            let env = pod_spec(&cr, 0, "cluster.local").containers[0]
                .env
                .clone()
                .unwrap_or_default();
            env.iter()
                .filter(|e| e.name == "MAREKVS_CLUSTER")
                .map(|e| e.value.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        let image = json!({"image": "x"});
        let recorded = |name: &str| MarekvsClusterStatus {
            gossip_cluster: Some(name.into()),
            instance_names: vec!["demo-0".into()],
            ..Default::default()
        };
        // New (nothing recorded yet, no members): its own name, as the first pass records.
        assert_eq!(gossip(None, image.clone()), ["ns/demo"]);
        assert_eq!(
            gossip(Some(recorded("ns/demo")), image.clone()),
            ["ns/demo"]
        );
        // Ran with the server's default (recorded so, or members from before it was
        // recorded): no variable, so its pods are unchanged.
        assert!(gossip(Some(recorded("marekvs")), image.clone()).is_empty());
        let legacy = MarekvsClusterStatus {
            instance_names: vec!["demo-0".into()],
            ..Default::default()
        };
        assert!(gossip(Some(legacy), image).is_empty());
        // The user's own name wins, once.
        let own = json!({"image": "x", "extraEnv": {"MAREKVS_CLUSTER": "prod-kv"}});
        assert_eq!(gossip(Some(recorded("ns/demo")), own), ["prod-kv"]);
    }

    fn resources_of(spec: &PodSpec) -> Value {
        serde_json::to_value(&spec.containers[0].resources).unwrap()
    }

    #[test]
    fn unset_resources_take_marekvs_own_operators_defaults_and_explicit_values_win() {
        let want =
            json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}});
        for unset in [
            json!({"image": "marekvs:1"}),
            json!({"image": "marekvs:1", "resources": {}}),
        ] {
            assert_eq!(resources_of(&spec_of(unset)), want);
        }
        // One field set: it wins, the other keeps its default.
        assert_eq!(
            resources_of(&spec_of(
                json!({"image": "marekvs:1", "resources": {"cpu": "2"}})
            )),
            json!({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "1Gi"}})
        );
        assert_eq!(
            resources_of(&spec_of(
                json!({"image": "marekvs:1", "resources": {"memory": "4Gi"}})
            )),
            json!({"requests": {"cpu": "500m", "memory": "4Gi"}, "limits": {"memory": "4Gi"}})
        );
        // Both set: exactly them, still no CPU limit.
        assert_eq!(
            resources_of(&spec_of(
                json!({"image": "marekvs:1", "resources": {"cpu": "250m", "memory": "512Mi"}})
            )),
            json!({"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}})
        );
    }

    fn spread_of(spec: &PodSpec) -> Value {
        serde_json::to_value(&spec.topology_spread_constraints).unwrap()
    }

    fn default_spread(hostname: &str) -> Value {
        let selector = json!({"matchLabels": {
            "app.kubernetes.io/instance": "demo", "app.kubernetes.io/name": "marekvs"}});
        json!([
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
             "whenUnsatisfiable": hostname, "labelSelector": selector},
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
             "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector},
        ])
    }

    #[test]
    fn members_spread_softly_over_hosts_and_zones_by_default() {
        let s = spec_of(json!({"image": "marekvs:1"}));
        assert_eq!(spread_of(&s), default_spread("ScheduleAnyway"));
        // The selector is the one of the Services and the PDB: it counts this cluster's members.
        let c = MarekvsCluster::new(
            "demo",
            serde_json::from_value(json!({"image": "m"})).unwrap(),
        );
        assert_eq!(
            s.topology_spread_constraints.unwrap()[0]
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels,
            Some(selector_labels(&c))
        );
        assert_eq!(
            spread_of(&spec_of(json!(
                {"image": "marekvs:1", "hostnameSpreadWhenUnsatisfiable": "ScheduleAnyway"}
            ))),
            default_spread("ScheduleAnyway")
        );
    }

    #[test]
    fn do_not_schedule_makes_the_hostname_spread_hard_and_only_it() {
        assert_eq!(
            spread_of(&spec_of(json!(
                {"image": "marekvs:1", "hostnameSpreadWhenUnsatisfiable": "DoNotSchedule"}
            ))),
            default_spread("DoNotSchedule")
        );
    }

    #[test]
    fn explicit_topology_spread_constraints_replace_the_defaults() {
        let theirs = json!([{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule",
                             "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}}}]);
        for hostname in ["ScheduleAnyway", "DoNotSchedule"] {
            let s = spec_of(
                json!({"image": "marekvs:1", "topologySpreadConstraints": theirs,
                                   "hostnameSpreadWhenUnsatisfiable": hostname}),
            );
            assert_eq!(spread_of(&s), theirs, "theirs, whatever {hostname}");
        }
        // An explicit empty list is no spread at all.
        assert_eq!(
            spread_of(&spec_of(
                json!({"image": "marekvs:1", "topologySpreadConstraints": []})
            )),
            json!([])
        );
    }

    #[test]
    fn members_get_no_service_account_token() {
        assert_eq!(
            spec_of(json!({"image": "marekvs:1"})).automount_service_account_token,
            Some(false)
        );
    }

    #[test]
    fn the_template_hash_follows_the_pod_spec_only() {
        let base = cr();
        let h = desired_template_hash(&base, 1, "cluster.local").unwrap();
        assert_eq!(h.len(), 16);
        assert_eq!(
            h,
            desired_template_hash(&base, 1, "cluster.local").unwrap(),
            "stable"
        );
        let mut changed = base.clone();
        changed.spec.image = "marekvs:2".into();
        assert_ne!(
            h,
            desired_template_hash(&changed, 1, "cluster.local").unwrap()
        );
        let mut changed = base.clone();
        changed
            .spec
            .extra_env
            .insert("RUST_LOG".into(), "info".into());
        assert_ne!(
            h,
            desired_template_hash(&changed, 1, "cluster.local").unwrap()
        );
        // Fields that do not reach the pod do not restart anything.
        let mut same = base.clone();
        same.spec.nodes = 7;
        same.spec.paused = true;
        same.spec.storage.size = "50Gi".into();
        assert_eq!(h, desired_template_hash(&same, 1, "cluster.local").unwrap());
        // The hard hostname spread reaches the pod: members are rolled onto it.
        let mut changed = base.clone();
        changed.spec.hostname_spread_when_unsatisfiable =
            Some(marekvs_api::WhenUnsatisfiable::DoNotSchedule);
        assert_ne!(
            h,
            desired_template_hash(&changed, 1, "cluster.local").unwrap()
        );
    }

    #[test]
    fn pvc_outlives_the_cluster_object() {
        let v = serde_json::to_value(pvc(&cr(), 0, 1).unwrap()).unwrap();
        assert_eq!(v["metadata"]["name"], "data-demo-0");
        // Stamped with the uid of the object it was made for: how the operator knows its own.
        assert_eq!(
            v["metadata"]["annotations"][ANNOTATION_CLUSTER_UID],
            cr().metadata.uid.unwrap()
        );
        assert!(v["metadata"].get("ownerReferences").is_none());
        assert_eq!(v["spec"]["storageClassName"], "fast");
        assert_eq!(v["spec"]["resources"]["requests"]["storage"], "5Gi");
    }

    #[test]
    fn services_and_pdb() {
        let h = serde_json::to_value(headless_service(&cr()).unwrap()).unwrap();
        assert_eq!(h["spec"]["clusterIP"], "None");
        assert_eq!(h["spec"]["publishNotReadyAddresses"], true);
        let p = serde_json::to_value(pdb(&cr()).unwrap()).unwrap();
        assert_eq!(p["spec"]["minAvailable"], 2);
    }

    #[test]
    fn a_cluster_without_uid_is_an_error_not_a_panic() {
        let mut c = cr();
        c.metadata.uid = None;
        assert!(matches!(headless_service(&c), Err(Error::NoUid(n)) if n == "demo"));
        assert!(matches!(client_service(&c), Err(Error::NoUid(_))));
        assert!(matches!(pdb(&c), Err(Error::NoUid(_))));
        assert!(matches!(pod(&c, 0, "cluster.local"), Err(Error::NoUid(_))));
        // The hash needs no owner; a PVC has none, but is stamped with the uid.
        assert!(desired_template_hash(&c, 0, "cluster.local").is_ok());
        assert!(matches!(pvc(&c, 0, 0), Err(Error::NoUid(_))));
    }

    #[test]
    fn ordinals_parse_strictly() {
        assert_eq!(ordinal_from_name("demo", "", "demo-3"), Some(3));
        assert_eq!(ordinal_from_name("demo", "data-", "data-demo-12"), Some(12));
        assert_eq!(ordinal_from_name("demo", "", "demo-03"), None);
        assert_eq!(ordinal_from_name("demo", "", "demo-x"), None);
        assert_eq!(ordinal_from_name("demo", "", "demo2-1"), None);
        assert_eq!(ordinal_from_name("demo", "", "demo-"), None);
    }
}
