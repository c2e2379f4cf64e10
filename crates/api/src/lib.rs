//! The `MarekvsCluster` custom resource (`marekvs.io/v1alpha1`), its validation rules, and the
//! condition types and reasons the operator reports.
//!
//! Field names follow marekvs's own operator so its users can move over; the additions
//! (`removeMembers`, `scaleDown`, scheduling fields) are documented on each field.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, EnvVar, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod conditions;
pub mod convert;

/// A marekvs cluster: its members' Pods and PVCs are created by the operator, with ordinal
/// identity (`<name>-<ordinal>`), and scaled down one chosen, drained member at a time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "marekvs.io",
    version = "v1alpha1",
    kind = "MarekvsCluster",
    namespaced,
    shortname = "mkv",
    status = "MarekvsClusterStatus",
    category = "all",
    scale(
        spec_replicas_path = ".spec.nodes",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Desired","type":"integer","description":"Members the cluster should have","jsonPath":".status.desiredNodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","description":"Members ready","jsonPath":".status.readyNodes"}"#,
    printcolumn = r#"{"name":"Updated","type":"integer","priority":1,"description":"Members running the current pod spec","jsonPath":".status.updatedNodes"}"#,
    printcolumn = r#"{"name":"Underrep","type":"integer","description":"Under-replicated partitions (max over members)","jsonPath":".status.underreplicatedPartitions"}"#,
    printcolumn = r#"{"name":"Ops/s","type":"integer","description":"Commands per second over all members","jsonPath":".status.opsPerSecond"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Next-Out","type":"string","priority":1,"description":"The member that would leave next (status.plan)","jsonPath":".status.plan[0].member"}"#,
    printcolumn = r#"{"name":"Held-By","type":"string","priority":1,"description":"What keeps moving while the next scale-down step is held (status.handoffHold)","jsonPath":".status.handoffHold.moving"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("size(self.metadata.name) <= 52")
        .message("metadata.name must be at most 52 characters: member pods are <name>-<ordinal> and their hostname must fit in 63"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit, no '.'): it names the cluster's Services"),
    validation = Rule::new("!self.metadata.name.endsWith('-headless')")
        .message("metadata.name must not end in -headless: the cluster <name> beside it would name its headless Service <name>-headless, this cluster's client Service"),
    validation = Rule::new("!has(self.spec.removeMembers) || self.spec.removeMembers.all(m, m.startsWith(self.metadata.name + '-'))")
        .message("spec.removeMembers: each entry must name a member of this cluster, <metadata.name>-<ordinal> (e.g. demo-1)"),
    validation = Rule::new("!has(self.spec.fencedMembers) || self.spec.fencedMembers.all(m, m.startsWith(self.metadata.name + '-'))")
        .message("spec.fencedMembers: each entry must name a member of this cluster, <metadata.name>-<ordinal> (e.g. demo-1)")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.nodes >= self.replicationFactor + 1")
    .message("spec.nodes must be at least replicationFactor + 1: with fewer members, a single failure leaves partitions under-replicated"))]
#[x_kube(validation = Rule::new("self.replicationFactor > 1 || self.nodes >= oldSelf.nodes")
    .message("spec.nodes cannot be lowered with replicationFactor 1: each partition has one copy, on its owner, and marekvs moves a member's partitions only after it has exited, so a removed member's data would be lost"))]
#[x_kube(validation = Rule::new("!has(self.auth) || !has(self.env) || !self.env.exists(e, e.name == 'MAREKVS_REQUIREPASS')")
    .message("spec.auth and env MAREKVS_REQUIREPASS cannot both be set: give the password one way, spec.auth.passwordSecretRef or env valueFrom.secretKeyRef"))]
#[x_kube(validation = Rule::new("!has(self.fencedMembers) || size(self.fencedMembers) < self.replicationFactor || (has(self.fencedMembersAcknowledged) && self.fencedMembersAcknowledged)")
    .message("fencedMembers names replicationFactor or more members: their pods would all stop at once, without drain, and partitions held only by them would be unavailable until they are unfenced. Fence fewer, or set fencedMembersAcknowledged: true"))]
#[x_kube(validation = Rule::new("!has(self.env) || !has(self.extraEnv) || self.env.all(e, !(e.name in self.extraEnv))")
    .message("a variable cannot be set in both extraEnv and env: keep it in one of them"))]
#[x_kube(validation = Rule::new("!has(self.storage) || self.storage.staleVolumeGraceSeconds <= (has(self.extraEnv) && 'MAREKVS_GC_GRACE_SECS' in self.extraEnv && self.extraEnv['MAREKVS_GC_GRACE_SECS'].matches('^[1-9][0-9]{0,8}$') ? int(self.extraEnv['MAREKVS_GC_GRACE_SECS']) : 3600)")
    .message("storage.staleVolumeGraceSeconds cannot exceed the nodes' tombstone grace (extraEnv MAREKVS_GC_GRACE_SECS, 3600 s when unset): a volume away longer may hold keys deleted meanwhile whose tombstones the other members have purged, and mounting it would bring them back"))]
#[x_kube(validation = Rule::new("!has(self.storage) || self.storage.staleVolumeGraceSeconds >= 300 || self.storage.staleVolumeGraceSeconds >= (has(self.extraEnv) && 'MAREKVS_GC_GRACE_SECS' in self.extraEnv && self.extraEnv['MAREKVS_GC_GRACE_SECS'].matches('^[1-9][0-9]{0,8}$') ? int(self.extraEnv['MAREKVS_GC_GRACE_SECS']) : 3600)")
    .message("storage.staleVolumeGraceSeconds must be at least 300 s (or the nodes' tombstone grace, extraEnv MAREKVS_GC_GRACE_SECS, when that is shorter): a routine restart (a node reboot, a slow image pull) must not cost a member its volume"))]
pub struct MarekvsClusterSpec {
    /// Container image for the marekvs nodes.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,

    /// Number of members (what `kubectl scale` sets). With `autoscale` set this is only the
    /// initial size: the autoscaler then owns the count within `[minNodes, maxNodes]`. Never
    /// below `replicationFactor + 1`.
    #[serde(default = "default_nodes")]
    #[schemars(range(min = 2, max = 1000))]
    pub nodes: i32,

    /// Home replicas per partition (`MAREKVS_REPLICAS_N`). Cannot be changed once the cluster
    /// exists.
    #[serde(default = "default_replication_factor")]
    #[schemars(range(min = 1, max = 16))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("replicationFactor cannot be changed on an existing cluster"))]
    pub replication_factor: i32,

    /// The volume of each member.
    #[serde(default)]
    pub storage: StorageSpec,

    /// CPU and memory of each member (default 500m CPU request, 1Gi memory request and limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesSpec>,

    /// Size the cluster by its command rate (and volume fill), as marekvs's own operator does.
    /// Every step the autoscaler asks for still goes through the safety stepper. Omit for a
    /// fixed-size cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleSpec>,

    /// Delete the PVC of a removed member once the cluster is fully replicated again. By
    /// default volumes are kept, so a later scale-up of that ordinal resumes from its data.
    #[serde(default)]
    pub reclaim_pvcs: bool,

    /// Extra environment for the marekvs container (e.g. `RUST_LOG: info`). The variables the
    /// operator manages (`MAREKVS_SEEDS`, `MAREKVS_REPLICAS_N`, `MAREKVS_DATA_DIR`,
    /// `MAREKVS_ADVERTISE_IP`, `MAREKVS_NODE_ID`, `MAREKVS_REQUIREPASS`) cannot be set here.
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("!('MAREKVS_SEEDS' in self) && !('MAREKVS_REPLICAS_N' in self) && !('MAREKVS_DATA_DIR' in self) && !('MAREKVS_ADVERTISE_IP' in self) && !('MAREKVS_NODE_ID' in self) && !('MAREKVS_REQUIREPASS' in self)")
        .message("extraEnv cannot set MAREKVS_SEEDS, MAREKVS_REPLICAS_N, MAREKVS_DATA_DIR, MAREKVS_ADVERTISE_IP, MAREKVS_NODE_ID or MAREKVS_REQUIREPASS: the operator manages them (a password goes in spec.auth.passwordSecretRef)"))]
    #[x_kube(validation = Rule::new("!('MAREKVS_AE_PARTITIONS_PER_ROUND' in self)")
        .message("extraEnv cannot set MAREKVS_AE_PARTITIONS_PER_ROUND: the hand-off gate counts anti-entropy rounds that each cover every partition a member owns"))]
    #[x_kube(validation = Rule::new("!('MAREKVS_GC_GRACE_SECS' in self) || self['MAREKVS_GC_GRACE_SECS'].matches('^[1-9][0-9]{0,8}$')")
        .message("extraEnv MAREKVS_GC_GRACE_SECS, the nodes' tombstone grace, must be a whole number of seconds from 1 to 999999999, digits only: storage.staleVolumeGraceSeconds is checked against it"))]
    pub extra_env: BTreeMap<String, String>,

    /// Environment of the marekvs container as Kubernetes `EnvVar`s, for values from a Secret
    /// or a ConfigMap (`valueFrom`); set after `extraEnv` (a name may not be in both). The
    /// variables the operator manages cannot be set here either, except `MAREKVS_REQUIREPASS`
    /// from a Secret (`valueFrom.secretKeyRef`, as marekvs's own operator's users set it): it
    /// is then exactly `spec.auth.passwordSecretRef` (the operator reads that key to `AUTH`),
    /// and cannot be given together with `spec.auth`. At most 64 entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = Rule::new("self.all(e, !(e.name in ['MAREKVS_SEEDS', 'MAREKVS_REPLICAS_N', 'MAREKVS_DATA_DIR', 'MAREKVS_ADVERTISE_IP', 'MAREKVS_NODE_ID']))")
        .message("env cannot set MAREKVS_SEEDS, MAREKVS_REPLICAS_N, MAREKVS_DATA_DIR, MAREKVS_ADVERTISE_IP or MAREKVS_NODE_ID: the operator manages them"))]
    #[x_kube(validation = Rule::new("self.all(e, e.name != 'MAREKVS_GC_GRACE_SECS')")
        .message("env cannot set MAREKVS_GC_GRACE_SECS: set it in extraEnv, where storage.staleVolumeGraceSeconds is checked against it"))]
    #[x_kube(validation = Rule::new("self.all(e, e.name != 'MAREKVS_AE_PARTITIONS_PER_ROUND')")
        .message("env cannot set MAREKVS_AE_PARTITIONS_PER_ROUND: the hand-off gate counts anti-entropy rounds that each cover every partition a member owns"))]
    #[x_kube(validation = Rule::new("self.all(e, e.name != 'MAREKVS_REQUIREPASS' || (!has(e.value) && has(e.valueFrom) && has(e.valueFrom.secretKeyRef) && !has(e.valueFrom.configMapKeyRef) && !has(e.valueFrom.fieldRef) && !has(e.valueFrom.resourceFieldRef) && has(e.valueFrom.secretKeyRef.name) && e.valueFrom.secretKeyRef.name != '' && (!has(e.valueFrom.secretKeyRef.optional) || !e.valueFrom.secretKeyRef.optional)))")
        .message("env MAREKVS_REQUIREPASS must come from a Secret (valueFrom.secretKeyRef with a name, not optional), never a plain value or a ConfigMap"))]
    pub env: Vec<EnvVar>,

    /// Secrets to pull `image` with (each `{name: <Secret>}`, in the cluster's namespace). At
    /// most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub image_pull_secrets: Vec<ImagePullSecret>,

    /// Extra labels of the members' pods. The operator's own keys (`app.kubernetes.io/name`,
    /// `app.kubernetes.io/instance`, `app.kubernetes.io/managed-by`, any `marekvs.io/` key)
    /// cannot be set. A change restarts the members one at a time (a rolling update).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 32), extend("additionalProperties" = {"type": "string", "maxLength": 63, "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('marekvs.io/') && !(k in ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by']))")
        .message("podLabels cannot set app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/managed-by or any marekvs.io/ key: the operator sets them"))]
    pub pod_labels: BTreeMap<String, String>,

    /// Extra annotations of the members' pods. No `marekvs.io/` key (the operator's). A change
    /// restarts the members one at a time (a rolling update).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('marekvs.io/'))")
        .message("podAnnotations cannot set a marekvs.io/ key: the operator sets them"))]
    pub pod_annotations: BTreeMap<String, String>,

    /// PriorityClass of the members' pods (it must exist for them to be admitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub priority_class_name: Option<String>,

    /// ServiceAccount of the members' pods (it must exist for them to be admitted). Its token
    /// is still not mounted: members never call the Kubernetes API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub service_account_name: Option<String>,

    /// The client Service (`<name>`, port 6379 of ready members): its type, annotations and
    /// traffic distribution. Changes are applied to the Service in place; no member restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_service: Option<ClientServiceSpec>,

    /// Node labels a member's pod must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// Tolerations of the members' pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,

    /// Affinity of the members' pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Topology spread of the members' pods. Their label selector may use
    /// `app.kubernetes.io/instance: <name>`. Unset: the members spread softly
    /// (`ScheduleAnyway`, maxSkew 1) over `kubernetes.io/hostname` and
    /// `topology.kubernetes.io/zone`. Set (even to `[]`): exactly these constraints replace
    /// that default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,

    /// Whether the default spread over `kubernetes.io/hostname` is soft (`ScheduleAnyway`, the
    /// default) or hard (`DoNotSchedule`: a member stays Pending rather than share a node
    /// beyond a skew of 1). The zone spread stays soft. No effect when
    /// `topologySpreadConstraints` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname_spread_when_unsatisfiable: Option<WhenUnsatisfiable>,

    /// Members to remove first when `nodes` is lowered, e.g. `[demo-1]`. Each entry must be
    /// `<metadata.name>-<ordinal>`. Listing a member does not remove it by itself: only lowering
    /// `nodes` does, one member at a time, listed members first (lowest ordinal first), then the
    /// highest ordinal. An entry that is not a current member is ignored and reported (Warning
    /// event, `RemovalChoices` condition). Scale-ups skip listed ordinals. At most 10 entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10), inner(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-(0|[1-9][0-9]*)$")), extend("x-kubernetes-list-type" = "set"))]
    pub remove_members: Vec<String>,

    /// How a scale-down step decides that a hand-off is over.
    #[serde(default)]
    pub scale_down: ScaleDownSpec,

    /// Hold every disruptive action: no member is drained, restarted or removed and no volume
    /// is deleted while this is true. Members are still created and re-created (a deleted pod
    /// comes back), and status keeps being reported. A rolling update or a scale-down in
    /// progress stops at its next step and resumes when this is set back to false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// Stop every member's pod and keep every volume (and the membership): the cluster reports
    /// phase `Hibernated`. Setting it back to false wakes the same members on their own volumes,
    /// behind the hand-off gate. A volume away longer than `storage.staleVolumeGraceSeconds` is
    /// never mounted again, so waking after longer than the grace is refused (and reported)
    /// unless `storage.freshVolumesOnWake` is true. A removal or restart in progress finishes
    /// its current step first: hibernation starts only between steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hibernation: bool,

    /// Members whose pod is stopped without removing them from the membership, e.g.
    /// `[demo-1]` (a member to keep off a suspect node while it is examined). Its volume is
    /// kept and it stays in `status.instanceNames`; no disruptive step (drain, removal,
    /// restart, volume replacement) runs while any member is fenced, and the `Blocked`
    /// condition says so. Removing an entry brings the member back on its own volume (unless
    /// it was away past `storage.staleVolumeGraceSeconds`). At most 10 entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10), inner(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-(0|[1-9][0-9]*)$")), extend("x-kubernetes-list-type" = "set"))]
    pub fenced_members: Vec<String>,

    /// Set to fence `replicationFactor` or more members at once. Their pods are then stopped
    /// together, without drain or hand-off, so a partition whose every copy is on them can be
    /// read or written nowhere until they are unfenced (their volumes are kept). Without it such
    /// a `fencedMembers` is refused at apply time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fenced_members_acknowledged: bool,

    /// How a change of `image` reaches the members (docs/upgrades.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeSpec>,

    /// A password for the members' RESP port. Each member gets it as `MAREKVS_REQUIREPASS`
    /// (from the Secret, never in plain env), and the operator reads it to `AUTH` before it
    /// reads each member's view (`CLUSTER MYID`, `CLUSTER NODES`). The same can be given as
    /// `env` `MAREKVS_REQUIREPASS` from `valueFrom.secretKeyRef`, but not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,
}

impl MarekvsClusterSpec {
    /// Where the members' RESP password is: `spec.auth.passwordSecretRef`, or the same thing
    /// given as `env` `MAREKVS_REQUIREPASS` from `valueFrom.secretKeyRef` (the schema refuses
    /// both at once). The pod gets it and the operator reads it from this one value.
    pub fn password_secret_ref(&self) -> Option<SecretKeyRef> {
        if let Some(auth) = &self.auth {
            return Some(auth.password_secret_ref.clone());
        }
        self.env
            .iter()
            .find(|e| e.name == REQUIREPASS)
            .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .map(|r| SecretKeyRef {
                name: r.name.clone(),
                key: r.key.clone(),
            })
    }
}

/// The variable a member's RESP password is given in.
pub const REQUIREPASS: &str = "MAREKVS_REQUIREPASS";

/// A Secret to pull the image with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullSecret {
    /// The Secret's name (in the cluster's namespace).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
}

/// The client Service's options.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.loadBalancerSourceRanges) || size(self.loadBalancerSourceRanges) == 0 || self.type == 'LoadBalancer'")
    .message("clientService.loadBalancerSourceRanges applies only with clientService.type: LoadBalancer"))]
pub struct ClientServiceSpec {
    /// `ClusterIP` (the default), `NodePort` or `LoadBalancer`.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations of the Service (e.g. a cloud load balancer's options). No `marekvs.io/`
    /// key (the operator's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('marekvs.io/'))")
        .message("clientService.annotations cannot set a marekvs.io/ key: the operator sets them"))]
    pub annotations: BTreeMap<String, String>,
    /// Client CIDRs a `LoadBalancer` accepts (e.g. `10.0.0.0/8`). Only with type
    /// `LoadBalancer`. At most 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 43)))]
    #[x_kube(validation = Rule::new("self.all(r, isCIDR(r))")
        .message("clientService.loadBalancerSourceRanges: each entry must be a CIDR, e.g. 10.0.0.0/8"))]
    pub load_balancer_source_ranges: Vec<String>,
    /// How the Service spreads connections over members: `PreferClose` (the default, as
    /// marekvs's own operator sets it: members in the client's zone first), `PreferSameZone`
    /// or `PreferSameNode` (Kubernetes 1.34 and later).
    #[serde(default)]
    pub traffic_distribution: TrafficDistribution,
}

// The client Service's `type`. Not a doc comment: the field's own text goes in the schema.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

// The client Service's `trafficDistribution`. Not a doc comment: the field's own text goes in
// the schema.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TrafficDistribution {
    #[default]
    PreferClose,
    PreferSameZone,
    PreferSameNode,
}

impl TrafficDistribution {
    pub fn as_str(self) -> &'static str {
        match self {
            TrafficDistribution::PreferClose => "PreferClose",
            TrafficDistribution::PreferSameZone => "PreferSameZone",
            TrafficDistribution::PreferSameNode => "PreferSameNode",
        }
    }
}

/// The RESP password of the members.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    /// The Secret (in the cluster's namespace) and the key in it that hold the password.
    pub password_secret_ref: SecretKeyRef,
}

/// A key of a Secret in the cluster's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
    /// The key in its data.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

fn default_nodes() -> i32 {
    3
}
fn default_replication_factor() -> i32 {
    2
}

/// The volume of each member (one PVC `data-<name>-<ordinal>` per member).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.replaceVolumes) && self.replaceVolumes) || (has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className))")
    .message("storage.className cannot be changed in place: existing volumes cannot move to another class. Set storage.replaceVolumes: true to move each member to a fresh volume of the new class, one member at a time, each gated on full replication"))]
#[x_kube(validation = Rule::new("(has(self.replaceVolumes) && self.replaceVolumes) || !isQuantity(self.size) || !isQuantity(oldSelf.size) || quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0")
    .message("storage.size cannot shrink in place. Set storage.replaceVolumes: true to move each member to a fresh, smaller volume, one member at a time, each gated on full replication"))]
pub struct StorageSpec {
    /// Size of each member's volume, a Kubernetes quantity (e.g. `10Gi`). Growing it expands
    /// existing PVCs in place (if their StorageClass allows expansion); shrinking it needs
    /// `replaceVolumes`.
    #[serde(default = "default_size")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("storage.size must be a positive quantity, e.g. 10Gi"))]
    pub size: String,

    /// StorageClass of the volumes; the cluster's default class when unset. Changing it needs
    /// `replaceVolumes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub class_name: Option<String>,

    /// Allow changes that cannot be made to a volume in place (another `className`, a smaller
    /// `size`): each member is then drained, its data handed off to the others, and it restarts
    /// on a fresh, empty volume and bootstraps, one member at a time, each gated on full
    /// replication. Its old PVC is deleted. Off by default: such changes are refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace_volumes: bool,

    /// How long, in seconds, a volume may be away from the cluster (its member removed with
    /// the volume kept, or its pod gone or not ready) and still be mounted again. Past it the
    /// volume may hold keys deleted meanwhile whose tombstones the other members have purged:
    /// it is deleted and its member rejoins on a fresh volume. Never above the nodes' tombstone
    /// grace (extraEnv `MAREKVS_GC_GRACE_SECS`, 3600 s when unset), and at least 300 s (or that
    /// grace, when shorter): a routine restart (a node reboot, a slow image pull) must not cost
    /// a member its volume.
    #[serde(default = "default_stale_volume_grace")]
    #[schemars(range(min = 1, max = 2592000))]
    pub stale_volume_grace_seconds: i32,

    /// Waking from `hibernation` after longer than `staleVolumeGraceSeconds` starts every
    /// member on a fresh, empty volume: the cluster's data is gone. Off by default: such a
    /// wake is refused (phase `Blocked`) and the volumes are kept, so that the user decides
    /// (docs/storage.md). It has no effect on a wake within the grace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh_volumes_on_wake: bool,
}

fn default_size() -> String {
    "10Gi".into()
}

fn default_stale_volume_grace() -> i32 {
    3600
}

impl Default for StorageSpec {
    fn default() -> Self {
        StorageSpec {
            size: default_size(),
            class_name: None,
            replace_volumes: false,
            stale_volume_grace_seconds: default_stale_volume_grace(),
            fresh_volumes_on_wake: false,
        }
    }
}

// What the scheduler does with a member that would break a spread constraint (the values of a
// `TopologySpreadConstraint`'s `whenUnsatisfiable`). Not a doc comment on purpose: the schema of
// `hostnameSpreadWhenUnsatisfiable` would take this text instead of the field's own.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WhenUnsatisfiable {
    /// Schedule it anyway, preferring the placements that reduce the skew.
    #[default]
    ScheduleAnyway,
    /// Leave it Pending.
    DoNotSchedule,
}

impl WhenUnsatisfiable {
    pub fn as_str(self) -> &'static str {
        match self {
            WhenUnsatisfiable::ScheduleAnyway => "ScheduleAnyway",
            WhenUnsatisfiable::DoNotSchedule => "DoNotSchedule",
        }
    }
}

/// The CPU request of a member whose `resources.cpu` is unset (marekvs's own operator's).
pub const DEFAULT_CPU: &str = "500m";
/// The memory request and limit of a member whose `resources.memory` is unset (marekvs's own
/// operator's).
pub const DEFAULT_MEMORY: &str = "1Gi";

/// CPU and memory of each member. CPU is a request only (no limit: throttling hurts tail
/// latency); memory is both request and limit (no burst-OOM). Each one unset takes marekvs's
/// own operator's default (500m CPU, 1Gi memory), so a member is never BestEffort by accident.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesSpec {
    /// CPU request, a quantity (e.g. `"1"`, `500m`). Default 500m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("resources.cpu must be a positive quantity, e.g. 500m"))]
    pub cpu: Option<String>,

    /// Memory request and limit, a quantity (e.g. `1Gi`). Default 1Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("resources.memory must be a positive quantity, e.g. 1Gi"))]
    pub memory: Option<String>,
}

/// Autoscaling as marekvs's own operator defines it, plus a disk-fill signal (see
/// docs/autoscaling.md).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.minNodes <= self.maxNodes").message("autoscale.minNodes must not exceed autoscale.maxNodes"))]
pub struct AutoscaleSpec {
    /// Smallest cluster size (never below `replicationFactor + 1` whatever this says).
    #[schemars(range(min = 2, max = 1000))]
    pub min_nodes: i32,
    /// Largest cluster size.
    #[schemars(range(min = 2, max = 1000))]
    pub max_nodes: i32,
    /// Commands per second one member should serve.
    #[schemars(range(min = 1))]
    pub target_ops_per_node: i64,
    /// At most one scale-down per this many seconds, and only after the load stayed low for
    /// that long (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_down_stabilization_seconds: Option<i32>,
    /// Wait this long after a scale before scaling up again (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_up_cooldown_seconds: Option<i32>,
    /// Volume fill, in percent, no member should reach: at or above it the cluster grows by
    /// one member, and no member is removed if the survivors would reach it (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 99))]
    pub disk_high_water_percent: Option<i32>,
}

/// The hand-off gate of a scale-down step (see docs/scale-down.md).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDownSpec {
    /// Every member's bootstrap and repair counters must stay still this many seconds (across
    /// consecutive scrapes) before a step counts as settled.
    #[serde(default = "default_settle")]
    #[schemars(range(min = 1, max = 3600))]
    pub settle_seconds: i32,
    /// A hand-off that has not settled after this many seconds blocks the cluster (phase
    /// Blocked, reason HandoffTimeout); it never proceeds blindly.
    #[serde(default = "default_handoff_timeout")]
    #[schemars(range(min = 10, max = 86400))]
    pub handoff_timeout_seconds: i32,
}

fn default_settle() -> i32 {
    10
}
fn default_handoff_timeout() -> i32 {
    600
}

impl Default for ScaleDownSpec {
    fn default() -> Self {
        ScaleDownSpec {
            settle_seconds: default_settle(),
            handoff_timeout_seconds: default_handoff_timeout(),
        }
    }
}

/// Observed state, written by the operator through the status subresource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MarekvsClusterStatus {
    /// Where the cluster stands (see `ClusterPhase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// Why a wanted disruptive step is held, while the `Blocked` condition is True: the
    /// operator reads it back to announce only changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_reason: Option<BlockReason>,
    /// Ready, Progressing, Blocked, RemovalChoices, Autoscaling.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operator last recorded a pass over this cluster: with every change of status,
    /// and at least once a minute while nothing changes. Much older than a minute, no operator
    /// is acting on the cluster (unless its spec is invalid: then it waits for a change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pass_time: Option<Time>,
    /// The version of the operator that recorded that pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,
    /// The RESP password, by hash (never the value): the Secret's and the one recorded as
    /// what every running member takes. They differ while a rotation runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<PasswordStatus>,
    /// Members the cluster should have (spec.nodes, never below replicationFactor + 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_nodes: Option<i32>,
    /// Members that belong to the cluster (the scale subresource's current replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label selector of the member pods (for the scale subresource, e.g. an HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Members whose pod is Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_nodes: Option<i32>,
    /// Members whose pod runs the current pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_nodes: Option<i32>,
    /// Commands per second over all members, from two samples of `marekvs_commands_total`
    /// (absent until two good samples exist, or while a member cannot be read). Read
    /// leniently: marekvs's own operator wrote it as a string (`"4231.0"`), and an object it
    /// left behind must still be read (and its status overwritten), not stall the watch.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_ops_per_second"
    )]
    pub ops_per_second: Option<i64>,
    /// The command counters the next rate is computed from (survives an operator restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_sample: Option<LoadSampleStatus>,
    /// What the autoscaler wants and why (with `spec.autoscale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleStatus>,
    /// What holds the next scale-down step (the removal in progress, or the one that would
    /// start): what keeps moving, on which members, how fast, since when, and whether it is
    /// stuck.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_hold: Option<HandoffHoldStatus>,
    /// Repairs that keep moving without holding anything (writes under load being repaired
    /// by anti-entropy), for information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_repair: Option<BackgroundRepairStatus>,
    /// The maximum of `marekvs_cluster_underreplicated_partitions` over the members scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underreplicated_partitions: Option<i64>,
    /// The members that belong to the cluster, in ordinal order.
    #[serde(default)]
    pub instance_names: Vec<String>,
    /// Per-member state.
    #[serde(default)]
    pub members: Vec<MemberStatus>,
    /// The member being removed, written before anything is done to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal: Option<RemovalStatus>,
    /// The member being restarted with the current pod spec (rolling update), written before
    /// anything is done to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// The whole-cluster upgrade in progress (`spec.upgrade.strategy: WholeCluster`), written
    /// before anything is done to the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
    /// The removals that would come next, in the order they would happen (the one in progress
    /// first), and what would hold each right now. Empty when the cluster is at or below its
    /// target. Reported only: the operator re-derives it every pass and acts on none of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<PlanStep>,
    /// Since when the ready members' views (read over RESP, by identity) have disagreed;
    /// absent while they agree. After 30 s of disagreement the `SuspectedPartition`
    /// condition is True and every removal, restart and volume replacement is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub views_disagree_since: Option<Time>,
    /// Volumes kept for ordinals that are not members (a removed member's, with
    /// `reclaimPvcs: false`), in ordinal order, and whether a scale-up may still mount each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_volumes: Vec<KeptVolume>,
    /// Objects with a member's name and the cluster's labels that are not the cluster's (a pod
    /// it does not control, a PVC the operator did not create): never adopted, scraped,
    /// drained, deleted or counted as ready. While one is listed, nothing is created in its
    /// member's name and every disruptive step waits (`blockReason: LookAlike`). Delete it (or,
    /// for a volume that is the member's data, see docs/replacing-members.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub look_alikes: Vec<LookAlikeStatus>,
    /// True from the pass that stops the pods for `spec.hibernation` until every member
    /// (but the fenced) has a pod again after the wake: the operator reads it back to tell a
    /// wake (refused past the stale-volume grace) from members lost one by one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hibernated: bool,
    /// The gossip cluster name the members run with (`MAREKVS_CLUSTER`): `<namespace>/<name>`
    /// for a cluster this operator created, `marekvs` (the server's default, no variable set)
    /// for one that already ran before it was recorded. Recorded once, before any pod is
    /// built with it; never changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gossip_cluster: Option<String>,
}

/// `opsPerSecond` as this operator writes it (an integer) or as marekvs's own operator did (a
/// float, or a string holding one, e.g. `"4231.0"`); anything else reads as absent: it is
/// only reported, never acted on, and the next status write replaces it.
fn lenient_ops_per_second<'de, D>(d: D) -> Result<Option<i64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = Option::<serde_json::Value>::deserialize(d)?;
    let number = match value {
        Some(serde_json::Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().and_then(round)),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok().and_then(round),
        _ => None,
    };
    Ok(number)
}

fn round(f: f64) -> Option<i64> {
    (f.is_finite() && f.abs() < 9.0e18).then(|| f.round() as i64)
}

/// A volume kept for an ordinal that is not a member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeptVolume {
    /// The PVC, `data-<member>`.
    pub name: String,
    /// The member it belonged to (and would belong to again on a scale-up).
    pub member: String,
    /// When its member left the cluster, as recorded on the PVC (the annotation
    /// `marekvs.io/absent-since`); absent until the operator has recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent_since: Option<Time>,
    /// When it stops being reusable: `absentSince` plus `storage.staleVolumeGraceSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_at: Option<Time>,
    /// A scale-up onto this ordinal would mount it; false once it is stale (it would be
    /// deleted and the member would join on a fresh volume).
    pub reusable: bool,
}

/// An object that looks like a member's but is not the cluster's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LookAlikeStatus {
    /// `Pod` or `PersistentVolumeClaim`.
    pub kind: LookAlikeKind,
    /// The object's name.
    pub name: String,
    /// The member whose name it holds.
    pub member: String,
    /// Why it is not the cluster's, in words.
    pub why: String,
}

/// The kind of a look-alike.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum LookAlikeKind {
    Pod,
    PersistentVolumeClaim,
}

/// One member that would leave, and what holds it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    /// The member that would leave.
    pub member: String,
    /// Its ordinal.
    pub ordinal: i32,
    /// Why this member: listed in `spec.removeMembers`, not ready, the highest ordinal, or its
    /// container never started (removed without the gate).
    pub reason: VictimReason,
    /// What would hold this step right now; absent when it is under way, or when the next
    /// pass may start it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<PlanHold>,
}

/// What holds a planned removal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanHold {
    /// Which kind of hold (see `PlanHoldKind`).
    pub kind: PlanHoldKind,
    /// With `Gate`: the gate's reason, as `blockReason` would give it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<BlockReason>,
    /// The hold in words.
    pub message: String,
}

/// What holds a planned removal.
///
/// - `Gate`: the hand-off gate has not passed, or members are being (re-)created or replaced
///   (`reason` says which, as `blockReason` would).
/// - `Floor`: it would take the cluster below `replicationFactor + 1`; it never happens.
/// - `Paused`: `spec.paused` holds it.
/// - `InProgress`: another disruption comes first (the removal or the restart in progress, an
///   earlier step of the plan, a drained member being restarted): one member at a time.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PlanHoldKind {
    Gate,
    Floor,
    Paused,
    InProgress,
}

/// The cluster's RESP password, by hash: `sha256:` and 16 hex digits of the SHA-256 of the
/// cluster's uid and the password (a hash no other cluster shares), never the value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordStatus {
    /// The password in the Secret (`spec.auth`, or `MAREKVS_REQUIREPASS` from a Secret).
    /// Absent while the Secret or its key cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_hash: Option<String>,
    /// The password the operator recorded as the one its members run (it keeps the value in
    /// the Secret `<cluster>-password-applied`, owned by the cluster). While it differs from
    /// `secretHash`, the operator sets the Secret's password on each member still on this
    /// one; once every running member takes the Secret's, it records that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_hash: Option<String>,
}

/// One member's state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// `<cluster>-<ordinal>`: the pod name and the node's hostname.
    pub name: String,
    /// The member's ordinal: its node id.
    pub ordinal: i32,
    /// Its pod, when one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Its PVC (`data-<name>`), when one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<String>,
    /// UID of its PVC: a new UID means the member rejoined on a fresh, empty volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_uid: Option<String>,
    /// The size its PVC asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_request: Option<String>,
    /// The size its volume has (the PVC's status capacity); below `volumeRequest` while an
    /// expansion is in progress (condition `VolumeResizing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_capacity: Option<String>,
    /// The hash of the password its RESP port took at the last read (as in
    /// `status.password`); absent when unknown (no pod IP, no answer, or neither password).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    /// The marekvs release it runs, as its /metrics says (`marekvs_info{version}`); kept
    /// while a scrape fails, as `metrics` is; absent while it has no pod or never said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its pod's IP, where the operator reads /metrics and calls /drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// Where the member stands (see `MemberPhase`).
    pub phase: MemberPhase,
    /// Its pod is Ready.
    pub ready: bool,
    /// Its pod runs the current pod spec (false while a rolling update has yet to reach it).
    #[serde(default)]
    pub updated: bool,
    /// Figures of the last successful scrape of its /metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MemberMetrics>,
    /// When its bootstrap/repair counters last moved (the hand-off gate's settle clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters_changed_at: Option<Time>,
    /// When its bootstrap counter last moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstraps_changed_at: Option<Time>,
    /// When its repair counter last moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repairs_changed_at: Option<Time>,
    /// The repair counter and when it was read, before its last move (for the repair rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repairs_previous: Option<CounterSample>,
    /// Since when it has been quiet: no client input, no restart, no change of its view,
    /// every figure read. The hand-off gate counts its anti-entropy rounds from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_since: Option<Time>,
    /// Why its quiet time last started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_reset: Option<QuietReset>,
    /// `marekvs_ae_rounds_total` at the first scrape that read it once it went quiet: rounds
    /// numbered above it began after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds_at_quiet: Option<i64>,
    /// The members its view holds, as a digest (16 hex digits): a change starts its quiet
    /// time again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view_digest: Option<String>,
    /// Its write commands and when they were read, before their last move (for the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_previous: Option<CounterSample>,
    /// When its `marekvs_repl_ops_sent_total` last moved: a window holding bytes while nothing
    /// more is sent for 60 s is stalled, not shipping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_changed_at: Option<Time>,
    /// The last reading at which its replication ring may have dropped writes it had not
    /// shipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_lost: Option<WindowLoss>,
    /// Ready, Scraped, Draining, Updated, VolumeResizing, DiskWriteStopped.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Figures read from a member's /metrics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberMetrics {
    /// When these figures were read. Status is written only when something in it changes, so
    /// figures that stay the same keep the time they were first read; the `Scraped` condition
    /// says whether the latest scrape succeeded.
    pub scraped_at: Time,
    /// Members in this node's view.
    pub view_members: i64,
    /// `marekvs_cluster_underreplicated_partitions` (computed from membership only).
    pub underreplicated_partitions: i64,
    /// `marekvs_join_gate_pending_pids`: partitions still bootstrapping.
    pub join_gate_pending: i64,
    /// `marekvs_bootstraps_completed_total`.
    pub bootstraps_completed_total: i64,
    /// `marekvs_ae_repair_ops_total`.
    pub ae_repair_ops_total: i64,
    /// Sum of `marekvs_commands_total` over its series (resets when the node restarts).
    pub commands_total: i64,
    /// `marekvs_commands_total` over the write commands only.
    #[serde(default)]
    pub write_commands_total: i64,
    /// `marekvs_ae_rounds_total`: anti-entropy rounds begun since the node started (absent:
    /// not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ae_rounds_total: Option<i64>,
    /// `marekvs_ring_ops`: how many entries its in-memory replication ring holds. Every write
    /// enters it and nothing leaves it when shipped, so it is not a backlog: it climbs to
    /// 262,144 and stays (absent: not reported). Shown only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_ops: Option<i64>,
    /// `marekvs_repl_ops_sent_total`: ring entries shipped to peers since the node started. A
    /// leaver whose count still moves still ships the writes it took (absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repl_ops_sent_total: Option<i64>,
    /// `marekvs_repl_inflight_bytes`: bytes shipped to peers and not yet acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repl_inflight_bytes: Option<i64>,
    /// `marekvs_ring_bytes`: the same ring's occupancy in bytes (capped at 128 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_bytes: Option<i64>,
    /// `marekvs_repl_ops_applied_total`: ops replicated from other members and applied here
    /// since the node started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repl_ops_applied_total: Option<i64>,
}

/// A reading at which a member's replication ring may have dropped writes it had not shipped
/// to every owner (the hand-off gate's v4 rule): those reach their owners by anti-entropy
/// alone, so a leaver with a recent one waits until repairs are quiet on every member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowLoss {
    pub cause: WindowLossCause,
    pub at: Time,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum WindowLossCause {
    /// It restarted while its last reading showed bytes not yet acknowledged, or its ring near
    /// a cap while it took client input.
    Restarted,
    /// Its ring read near a cap (262,144 entries or 128 MiB) while entries still entered it
    /// and its own writes were not all shipped.
    RingAtCap,
}

/// Why a member's quiet time (the hand-off gate's count of its anti-entropy rounds) last
/// started.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum QuietReset {
    FirstSeen,
    /// RESP input beyond the operator's own reads: a client wrote (or may have).
    ClientInput,
    Restarted,
    /// Its replication ring still shipped the writes it took.
    Shipping,
    /// The members its view holds changed.
    ViewChanged,
    /// A figure the count needs was not read.
    Unknown,
}

/// A counter's value at one instant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CounterSample {
    pub value: i64,
    pub at: Time,
}

/// How a change of the member image is carried out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeSpec {
    /// `Rolling` (the default): one member at a time, each behind the hand-off gate, as any
    /// change of the pod spec. `WholeCluster`: for a marekvs release that allows no
    /// mixed-version mesh, every member stops at once once what each took has reached its
    /// owners, and all start on the new image on their own volumes; client traffic is cut from
    /// the flush until the views are checked. Other changes of the pod spec still roll.
    #[serde(default)]
    pub strategy: UpgradeStrategy,
    /// Let a change of `image` take members to an older marekvs release than one they run
    /// (known by the image's tag, or by what the first member restarted on it reports).
    /// Without it such a change restarts no member (`blockReason: DowngradeNotAllowed`). An
    /// older release may not read what a newer one wrote: read its release notes first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_downgrade: bool,
}

/// See [`UpgradeSpec::strategy`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpgradeStrategy {
    #[default]
    Rolling,
    WholeCluster,
}

/// A whole-cluster upgrade in progress (`spec.upgrade.strategy: WholeCluster`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// `Flushing`: every member's client traffic is cut, waiting until what each took reached
    /// its owners. `Stopping`: every member's pod is being deleted. `Starting`: every member
    /// runs again on the new image, waiting until all are ready and the views converged;
    /// client traffic returns after.
    pub step: UpgradeStep,
    /// When it began (client traffic was cut).
    pub started_at: Time,
    /// When the current step began (the hand-off timeout counts from here).
    pub step_started_at: Time,
    /// When the members were stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<Time>,
}

/// See [`UpgradeStatus::step`].
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum UpgradeStep {
    Flushing,
    Stopping,
    Starting,
}

/// The member being removed and the step it is at.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemovalStatus {
    /// The member being removed.
    pub member: String,
    /// Its ordinal.
    pub ordinal: i32,
    /// Why this member was chosen.
    pub reason: VictimReason,
    /// The step the removal is at.
    pub step: RemovalStep,
    /// When the removal was recorded.
    pub started_at: Time,
    /// When the current step began (the hand-off timeout counts from here).
    pub step_started_at: Time,
    /// When the operator restarted the member on its own volume to close the client
    /// connections it still took writes over after its client traffic was cut (at most once
    /// per removal); absent if it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_cut_at: Option<Time>,
}

/// Each member's `marekvs_commands_total` at one instant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadSampleStatus {
    /// When the counters were read.
    pub sampled_at: Time,
    /// Member name → its command counter.
    pub command_totals: BTreeMap<String, i64>,
}

/// The autoscaler's state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscaleStatus {
    /// The size the autoscaler asks for (the stepper gets there one safe step at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_nodes: Option<i32>,
    /// When it last asked for more members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_up_time: Option<Time>,
    /// When it last asked for one member fewer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_down_time: Option<Time>,
    /// Since when the load has been low enough for a removal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_load_since: Option<Time>,
    /// Its wish and the stepper's hold, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The reason a removal it asked for is held (as in `handoffHold.reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<BlockReason>,
}

/// The member being restarted with the current pod spec and the step it is at.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The member being restarted.
    pub member: String,
    /// Its ordinal.
    pub ordinal: i32,
    /// The step the restart is at.
    pub step: RolloutStep,
    /// Why it is restarted: `SpecChanged` (a rolling update), `VolumeRequested` (its pod
    /// asked for a fresh volume with the annotation `marekvs.io/replace-volume: "true"`), or
    /// `RestartRequested` (its pod asked for a restart on its own volume with the annotation
    /// `marekvs.io/restart: "true"`), or `NodeDrained` (its node is being drained: it moves off
    /// it on its own volume).
    #[serde(default)]
    pub reason: RolloutReason,
    /// With `NodeDrained`: the node being drained that the member moves off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// With `VolumeRequested`: UID of the PVC it was asked to leave. The request is carried
    /// here once recorded: the annotation goes with the pod that is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_pvc: Option<String>,
    /// UID of the PVC whose data the others took over while the member was drained (the
    /// hand-off gate passed); only that volume may be replaced by a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_off_pvc: Option<String>,
    /// When its restart was recorded.
    pub started_at: Time,
    /// When the current step began (the hand-off timeout counts from here).
    pub step_started_at: Time,
    /// When the operator restarted it before its hand-off passed, because client writes
    /// still arrived over connections opened before its client traffic was cut (a marekvs
    /// node closes one only when it exits); it comes back on its own volume with what they
    /// wrote. Absent if it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_cut_at: Option<Time>,
}

/// Where the cluster stands.
///
/// - `Reconciling`: members are not all ready yet, for no reason below.
/// - `Healthy`: every member Active, the count matches the spec, all on the current pod spec.
/// - `ScalingUp`: new members are being created or are joining.
/// - `ScalingDown`: a member is being removed.
/// - `Replacing`: a member's pod (and maybe its volume) is being re-created, or a member is
///   moved to a fresh volume its pod asked for.
/// - `Updating`: outdated members are being restarted one at a time, or a member whose pod
///   asked for a restart (`marekvs.io/restart`) is.
/// - `Paused`: `spec.paused` holds a wanted disruptive step.
/// - `Blocked`: a wanted disruptive step may not happen now (see `blockReason`); a wake from
///   hibernation refused because volumes are stale is `Blocked` with `WakeRefused`.
/// - `Hibernated`: `spec.hibernation` is set; every member's pod is stopped (or being
///   stopped), volumes and membership kept.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClusterPhase {
    Reconciling,
    Healthy,
    ScalingUp,
    ScalingDown,
    Replacing,
    Updating,
    Paused,
    Blocked,
    Hibernated,
}

/// Where a member stands.
///
/// - `Joining`: a new member bootstrapping (not ready yet).
/// - `Active`: ready and scraped.
/// - `Unready`: its pod exists but is not ready (e.g. after a crash).
/// - `Replacing`: its pod (and maybe its volume) is being re-created, or it rejoins after that.
/// - `Draining`: chosen for removal or restart; drained, handing its data off while serving.
/// - `Leaving`: its pod is being deleted or is gone; waiting for the hand-off to settle.
/// - `Updating`: being restarted with the current pod spec on its own volume, or moved to a
///   fresh volume (a `status.rollout` says which).
/// - `Fenced`: listed in `spec.fencedMembers`; its pod is stopped, its volume and membership
///   kept.
/// - `Hibernated`: stopped by `spec.hibernation`, its volume kept.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MemberPhase {
    #[default]
    Joining,
    Active,
    Unready,
    Replacing,
    Draining,
    Leaving,
    Updating,
    Fenced,
    Hibernated,
}

/// The step a removal is at.
///
/// - `Draining`: calling `/drain` on the member until it answers 200.
/// - `HandingOff`: it is Leaving and still serving; the others take over its data.
/// - `Deleting`: its pod is being deleted; its node flushes and exits.
/// - `Settling`: its pod is gone; waiting for every view to drop it and repairs to go quiet.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RemovalStep {
    Draining,
    HandingOff,
    Deleting,
    Settling,
}

/// The step a rolling restart of one member is at.
///
/// - `Draining`: calling `/drain` on the member until it answers 200.
/// - `HandingOff`: it is Leaving and still serving; the others take over its data.
/// - `Deleting`: its outdated pod is being deleted.
/// - `Rejoining`: its new pod runs on its volume; waiting until it is Active and settled.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RolloutStep {
    Draining,
    HandingOff,
    Deleting,
    Rejoining,
}

/// Why a member is restarted.
///
/// - `SpecChanged`: its pod or its volume differs from what the spec asks (a rolling update).
/// - `VolumeRequested`: its pod asked for a fresh volume (`marekvs.io/replace-volume: "true"`);
///   it is drained, its data handed off, and it restarts on a fresh, empty volume.
/// - `RestartRequested`: its pod asked for a restart (`marekvs.io/restart: "true"`); it is
///   drained, its data handed off, and it restarts on its own volume.
/// - `NodeDrained`: its pod runs on a node being drained (cordoned, or tainted for a drain); it
///   is drained, its data handed off, its pod let go to the drain's eviction, and it restarts
///   on its own volume on another node.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutReason {
    #[default]
    SpecChanged,
    VolumeRequested,
    RestartRequested,
    NodeDrained,
}

/// Why a member was chosen for removal.
///
/// - `UserChosen`: listed in `spec.removeMembers`.
/// - `NotReady`: it had no pod or was not ready.
/// - `HighestOrdinal`: the highest ordinal.
/// - `NeverStarted`: its container never started, on a volume no pod used before: it holds
///   no data, so it is removed without the hand-off gate and without a drain.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum VictimReason {
    UserChosen,
    NotReady,
    HighestOrdinal,
    NeverStarted,
}

/// Why a wanted disruptive step is held (docs/scale-down.md lists each gate).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BlockReason {
    NotAllReady,
    MetricsUnavailable,
    Underreplicated,
    JoinPending,
    ViewsNotConverged,
    RepairInProgress,
    Replacing,
    HandoffTimeout,
    Paused,
    /// An object that is not the cluster's holds a member's name (`status.lookAlikes`).
    LookAlike,
    /// A member is listed in `spec.fencedMembers`: no drain, removal, restart or volume
    /// replacement runs until it is unfenced.
    Fenced,
    /// Waking from hibernation would mount volumes away longer than
    /// `storage.staleVolumeGraceSeconds`: the cluster stays stopped (see the message) unless
    /// `storage.freshVolumesOnWake` is set.
    WakeRefused,
    /// The leaving member may still hold data that is nowhere else: the client Service still
    /// routes to it, a client still sends it commands, or too few of its own anti-entropy
    /// rounds have begun since it went quiet (or a figure that says so is unknown).
    LeaverBacklog,
    /// `replicationFactor` 1: removing a member, or its volume, would lose its partitions
    /// (marekvs moves them only after the member has exited). Refused.
    SingleCopy,
    /// The API server refuses the pod the spec now builds for the member a rolling change
    /// would restart next (a server-side dry run of its creation; the message gives the
    /// server's words): no member is drained until the spec is fixed.
    PodRefused,
    /// A member refuses both the password in the Secret and the one the operator recorded
    /// as its members' before it (condition `PasswordCurrent`): its view cannot be read.
    PasswordRefused,
    /// The spec's image would take members to an older marekvs release than one that runs
    /// (by its tag, or as members restarted on it report) and `upgrade.allowDowngrade` is not
    /// set: no member restarts on it.
    DowngradeNotAllowed,
}

/// What keeps a held scale-down step from passing.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Moving {
    /// Written by operators before 0.2 (the leaver's ring figure, which on marekvs 0.2 is no
    /// backlog); read as `AntiEntropy`, never written.
    ReplicationRing,
    /// The leaver's anti-entropy rounds since it went quiet are not enough yet, or unknown.
    AntiEntropy,
    /// The client Service still routes to the leaver, or clients still send it commands.
    ClientTraffic,
    /// The leaver's replication ring still ships the writes it took.
    Shipping,
    /// Partition bootstraps keep completing.
    Bootstraps,
    /// Anti-entropy repairs keep being applied.
    Repairs,
    /// Views have not converged.
    Views,
    /// Anything else the gate checks (readiness, scrapes, gauges, replacements).
    Other,
}

/// A held scale-down step: what keeps moving, where, how fast and since when.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffHoldStatus {
    /// The gate's reason (as in `blockReason`).
    pub reason: BlockReason,
    /// The gate's message.
    pub message: String,
    /// What keeps moving.
    pub moving: Moving,
    /// The members where it moves.
    #[serde(default)]
    pub members: Vec<String>,
    /// Repairs or bootstraps per second summed over `members`; for `ClientTraffic`, the
    /// leaver's write commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_second: Option<f64>,
    /// Since when it has held for this reason.
    pub since: Time,
    /// Held longer than `spec.scaleDown.handoffTimeoutSeconds`: reported as stuck
    /// (`Blocked`, reason `HandoffTimeout`). It never proceeds blindly.
    #[serde(default)]
    pub stuck: bool,
}

/// Anti-entropy repairs that move without holding anything (background repair under load).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackgroundRepairStatus {
    /// The members applying repairs.
    #[serde(default)]
    pub members: Vec<String>,
    /// Repairs per second summed over `members`.
    pub rate_per_second: f64,
    /// Since when repairs have kept moving.
    pub since: Time,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_crd_carries_the_validation_rules_and_printer_columns() {
        let crd = serde_json::to_string(&MarekvsCluster::crd()).unwrap();
        for needle in [
            "self.nodes >= self.replicationFactor + 1",
            "replicationFactor cannot be changed",
            "isQuantity(self)",
            "storage.size cannot shrink",
            "spec.removeMembers: each entry must name a member",
            "\"shortNames\":[\"mkv\"]",
            "\"name\":\"Underrep\"",
            "\"jsonPath\":\".status.plan[0].member\"",
            "\"status\":{}",
            "\"specReplicasPath\":\".spec.nodes\"",
            "\"staleVolumeGraceSeconds\":{\"default\":3600",
            "env cannot set MAREKVS_SEEDS",
            "env MAREKVS_REQUIREPASS must come from a Secret",
            "spec.auth and env MAREKVS_REQUIREPASS cannot both be set",
            "a variable cannot be set in both extraEnv and env",
            "podLabels cannot set app.kubernetes.io/name",
            "podAnnotations cannot set a marekvs.io/ key",
            "clientService.annotations cannot set a marekvs.io/ key",
            "loadBalancerSourceRanges applies only with clientService.type: LoadBalancer",
            "isCIDR(r)",
        ] {
            assert!(crd.contains(needle), "CRD lacks {needle}");
        }
    }

    /// `kubectl get mkv -o wide` shows the next member to leave and what holds it (priority 1:
    /// wide only).
    #[test]
    fn the_wide_view_shows_the_next_member_to_leave() {
        let crd = serde_json::to_value(MarekvsCluster::crd()).unwrap();
        let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap();
        let next = columns
            .iter()
            .find(|c| c["name"] == "Next-Out")
            .expect("a Next-Out column");
        assert_eq!(next["jsonPath"], ".status.plan[0].member");
        assert_eq!(next["priority"], 1);
        assert_eq!(next["type"], "string");
        // And what holds that member's step (wide only too).
        let held = columns
            .iter()
            .find(|c| c["name"] == "Held-By")
            .expect("a Held-By column");
        assert_eq!(held["jsonPath"], ".status.handoffHold.moving");
        assert_eq!(held["priority"], 1);
        let plan = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]["plan"]["items"]["properties"];
        assert_eq!(
            plan["reason"]["enum"],
            serde_json::json!(["UserChosen", "NotReady", "HighestOrdinal", "NeverStarted"]),
            "{plan}"
        );
        assert_eq!(
            plan["heldBy"]["properties"]["kind"]["enum"],
            serde_json::json!(["Gate", "Floor", "Paused", "InProgress"]),
            "{plan}"
        );
    }

    #[test]
    fn defaults_match_marekvs_own_operator() {
        let spec: MarekvsClusterSpec =
            serde_json::from_value(serde_json::json!({"image": "marekvs:1"})).unwrap();
        assert_eq!(spec.nodes, 3);
        assert_eq!(spec.replication_factor, 2);
        assert_eq!(spec.storage.size, "10Gi");
        assert!(!spec.reclaim_pvcs);
        // Unset resources and spread: marekvs's own operator's defaults are applied when the
        // pod is built (500m CPU, 1Gi memory; a soft hostname spread).
        assert_eq!(spec.resources, None);
        assert_eq!((DEFAULT_CPU, DEFAULT_MEMORY), ("500m", "1Gi"));
        assert_eq!(spec.hostname_spread_when_unsatisfiable, None);
        assert_eq!(
            spec.hostname_spread_when_unsatisfiable.unwrap_or_default(),
            WhenUnsatisfiable::ScheduleAnyway
        );
        assert_eq!(spec.topology_spread_constraints, None);
        // Its field name and values, as marekvs's own operator spells them.
        for (value, want) in [
            ("ScheduleAnyway", WhenUnsatisfiable::ScheduleAnyway),
            ("DoNotSchedule", WhenUnsatisfiable::DoNotSchedule),
        ] {
            let spec: MarekvsClusterSpec = serde_json::from_value(serde_json::json!(
                {"image": "marekvs:1", "hostnameSpreadWhenUnsatisfiable": value}
            ))
            .unwrap();
            assert_eq!(spec.hostname_spread_when_unsatisfiable, Some(want));
            assert_eq!(want.as_str(), value);
        }
        assert!(
            serde_json::from_value::<MarekvsClusterSpec>(serde_json::json!(
                {"image": "marekvs:1", "hostnameSpreadWhenUnsatisfiable": "Sometimes"}
            ))
            .is_err()
        );
        // The schema holds the two values as an enum (refused at apply time).
        let crd = serde_json::to_value(MarekvsCluster::crd()).unwrap();
        let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["hostnameSpreadWhenUnsatisfiable"];
        assert_eq!(
            field["enum"],
            serde_json::json!(["ScheduleAnyway", "DoNotSchedule"]),
            "{field}"
        );
        assert!(
            field["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("Whether the default spread")),
            "kubectl explain shows the field's own text: {field}"
        );
        // The upstream example manifest deserializes unchanged.
        let upstream = serde_json::json!({
            "image": "ghcr.io/yannick/marekvs:latest", "replicationFactor": 2,
            "storage": {"size": "10Gi"}, "resources": {"cpu": "1", "memory": "1Gi"},
            "autoscale": {"minNodes": 3, "maxNodes": 8, "targetOpsPerNode": 5000,
                          "scaleDownStabilizationSeconds": 300, "scaleUpCooldownSeconds": 60},
            "reclaimPvcs": false, "extraEnv": {"RUST_LOG": "info"}
        });
        let spec: MarekvsClusterSpec = serde_json::from_value(upstream).unwrap();
        assert_eq!(spec.autoscale.unwrap().max_nodes, 8);
    }

    /// An object marekvs's own operator wrote (its shipped example, and the status it kept:
    /// `opsPerSecond` as a string, its sample and scale epochs, a message) reads as a
    /// `MarekvsCluster`: the watch does not stall on it, and the operator overwrites the status.
    #[test]
    fn an_object_left_by_marekvs_own_operator_is_read() {
        let old = serde_json::json!({
            "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
            "metadata": {"name": "demo", "namespace": "default", "uid": "u1"},
            "spec": {
                "image": "ghcr.io/yannick/marekvs:latest",
                "replicationFactor": 2,
                "storage": {"size": "10Gi"},
                "resources": {"cpu": "1", "memory": "1Gi"},
                "autoscale": {"minNodes": 3, "maxNodes": 8, "targetOpsPerNode": 5000,
                    "scaleDownStabilizationSeconds": 300, "scaleUpCooldownSeconds": 60},
                "reclaimPvcs": false,
                "extraEnv": {"RUST_LOG": "info"},
                "hostnameSpreadWhenUnsatisfiable": "ScheduleAnyway"
            },
            "status": {
                "phase": "Healthy", "desiredNodes": 3, "readyNodes": 3,
                "underreplicatedPartitions": 0, "opsPerSecond": "4231.0",
                "lastScaleEpoch": 1_764_000_000, "lastOpsTotal": 987_654_321_u64,
                "lastSampleEpoch": 1_764_000_030, "message": "3/3 nodes ready"
            }
        });
        let cr: MarekvsCluster = serde_json::from_value(old).unwrap();
        let status = cr.status.unwrap();
        assert_eq!(status.ops_per_second, Some(4231));
        assert_eq!(status.phase, Some(ClusterPhase::Healthy));
        assert_eq!(status.ready_nodes, Some(3));
        assert!(status.instance_names.is_empty());
        assert!(cr.spec.autoscale.is_some());
        assert_eq!(cr.spec.extra_env["RUST_LOG"], "info");
        // Each old phase is one of ours.
        for phase in [
            "Reconciling",
            "Healthy",
            "ScalingUp",
            "ScalingDown",
            "Blocked",
        ] {
            let s: MarekvsClusterStatus =
                serde_json::from_value(serde_json::json!({"phase": phase})).unwrap();
            assert!(s.phase.is_some(), "{phase}");
        }
    }

    #[test]
    fn ops_per_second_reads_as_either_operator_wrote_it() {
        let ops = |v: serde_json::Value| {
            serde_json::from_value::<MarekvsClusterStatus>(serde_json::json!({"opsPerSecond": v}))
                .unwrap()
                .ops_per_second
        };
        assert_eq!(ops(serde_json::json!(420)), Some(420));
        assert_eq!(ops(serde_json::json!(4231.6)), Some(4232));
        assert_eq!(ops(serde_json::json!("4231.0")), Some(4231));
        assert_eq!(ops(serde_json::json!(" 17 ")), Some(17));
        for unreadable in [
            serde_json::json!("n/a"),
            serde_json::json!("NaN"),
            serde_json::json!(null),
            serde_json::json!(true),
            serde_json::json!("1e300"),
        ] {
            assert_eq!(ops(unreadable.clone()), None, "{unreadable}");
        }
        let absent: MarekvsClusterStatus = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(absent.ops_per_second, None);
        // Written back as this operator's integer.
        let written = serde_json::to_value(MarekvsClusterStatus {
            ops_per_second: Some(4231),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(written["opsPerSecond"], serde_json::json!(4231));
    }
}
