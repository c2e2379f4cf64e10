//! The child objects themselves, built as plain values: the headless and client Services,
//! the PodDisruptionBudget, and each member's PVC and Pod.

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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use marekvs_api::{DEFAULT_CPU, DEFAULT_MEMORY, MarekvsCluster, REQUIREPASS, ResourcesSpec};

use crate::error::Error;

use super::hash::*;
use super::names::*;

/// The image runs as nobody (uid/gid 65534), from scratch.
const NOBODY: i64 = 65534;

/// The cluster object as the controller owner of a child. An object read from the API always
/// has the name and uid this needs.
pub(super) fn owner_refs(cr: &MarekvsCluster) -> Result<Vec<OwnerReference>, Error> {
    cr.controller_owner_ref(&())
        .map(|r| vec![r])
        .ok_or_else(|| Error::NoUid(cr.name_any()))
}

/// The metadata of a child owned by the cluster object.
pub(super) fn owned_meta(
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

pub(super) fn service_port(name: &str, port: i32, protocol: &str) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

pub(super) fn ports() -> Vec<ServicePort> {
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

/// maxUnavailable 0: no eviction takes a member whose data was not handed off. An eviction
/// skips the hand-off gate (no `/drain`, the node ships what its ring holds for a few seconds),
/// and at more members than replicationFactor a budget of "keep RF" let a drain take several
/// at once. A node's drain waits for the operator instead, which moves its members off one at
/// a time, behind the gate, and labels the one handed off `marekvs.io/eviction: allowed`,
/// which this selector leaves out, so that the drain's eviction takes it.
pub fn pdb(cr: &MarekvsCluster) -> Result<PodDisruptionBudget, Error> {
    Ok(PodDisruptionBudget {
        metadata: owned_meta(cr, cr.name_any(), cr.namespace(), None)?,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(0)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(cr)),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: LABEL_EVICTION.into(),
                    operator: "NotIn".into(),
                    values: Some(vec![EVICTION_ALLOWED.into()]),
                }]),
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

pub(super) fn env_var(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    }
}

pub(super) fn container_port(name: &str, port: i32, protocol: &str) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

/// GET `path` on the metrics port (the image has no shell for exec probes or hooks).
pub(super) fn http_get(path: &str) -> HTTPGetAction {
    HTTPGetAction {
        path: Some(path.into()),
        port: IntOrString::String("metrics".into()),
        ..Default::default()
    }
}

pub(super) fn probe(path: &str, period: i32, failures: i32) -> Probe {
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
pub(super) fn resources(r: Option<&ResourcesSpec>) -> ResourceRequirements {
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
pub(super) fn topology_spread(cr: &MarekvsCluster) -> Vec<TopologySpreadConstraint> {
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
pub(super) const GOSSIP_CLUSTER: &str = "MAREKVS_CLUSTER";

/// `MAREKVS_CLUSTER` for the members: the name recorded in status (before any pod is built,
/// `reconcile.rs`), or, if none is, what would be recorded (a cluster with members keeps the
/// server's default). `None` for the server's default: no variable, pods unchanged.
pub(super) fn gossip_env_value(cr: &MarekvsCluster) -> Option<String> {
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
            name: MEMBER_CONTAINER.into(),
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
    // removal: lost, or restarted to close its client connections) from its first moment, and
    // no member does while a whole-cluster upgrade starts them (traffic returns once the
    // views are checked: the core labels them on).
    let status = cr.status.as_ref();
    let removing = status
        .and_then(|s| s.removal.as_ref())
        .is_some_and(|r| u32::try_from(r.ordinal) == Ok(ordinal));
    let upgrading = status.is_some_and(|s| s.upgrade.is_some());
    let traffic = if removing || upgrading {
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
