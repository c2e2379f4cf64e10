//! What every stage of a pass shares: the API client, the watch caches, the member client and
//! the operator's small per-cluster memories (passwords, admissions, failures, the ledger).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::reflector::Store;
use marekvs_core::Millis;

use crate::recreate_lock::RecreationLock;
use crate::scrape::MemberClient;
use crate::telemetry::Metrics;
use crate::views;

pub struct Ctx {
    pub client: Client,
    pub events: crate::events::Events,
    pub members: MemberClient,
    pub cluster_domain: String,
    /// Watch caches of the operator's children (labelled managed-by): read here instead of
    /// listing on every pass.
    pub pods: Store<Pod>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub services: Store<Service>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// Every node, slimmed to what a drain shows (`observe::slim_node`): a member on a node
    /// being drained is moved off it. Never synced without the RBAC to list nodes: then no
    /// node is known and nothing is moved.
    pub nodes: Store<Node>,
    pub metrics: Arc<Metrics>,
    /// Held while a deleted pod of a cluster is being re-created; a pass waits for it.
    pub recreation: Arc<RecreationLock>,
    /// Each member's client input since the last recorded pass (`input.rs`).
    pub inputs: Arc<crate::input::Ledger>,
    /// Each cluster's RESP password, read from its Secret at most once a minute.
    pub passwords: views::Passwords,
    /// What the API server said, lately, of each member's new pod (a dry run before a drain).
    pub admissions: crate::admission::Admissions,
    /// Each cluster's failed passes in a row: the wait before its next try grows with them.
    pub failures: Arc<crate::retry::Failures>,
}

/// The wall clock, in ms since the epoch: the `now` every decision is given.
pub fn now_ms() -> Millis {
    Timestamp::now().as_millisecond()
}
