//! The marekvs data-plane simulator and the harness that "runs" member pods on the fake
//! (kwok) nodes of the local control plane.
//!
//! - [`model`]: a pure, deterministic model of a marekvs cluster (views, placement, rings,
//!   anti-entropy, bootstrap, reads and writes, and the keys stored on its volumes).
//! - [`world`]: the model shared by the member servers, the pod runner and the control API.
//! - [`node_http`]: the node contract on each member's pod IP, port 9121.
//! - [`resp`]: the Redis protocol (RESP2/RESP3) codec, pure.
//! - [`node_resp`]: each member's Redis-protocol port, 6379, serving keys through the model.
//! - [`podlet`]: a minimal kubelet for pods on fake nodes (IPs, probes, restarts, preStop,
//!   grace periods).
//! - [`container_state`]: the container statuses it reports and its restart back-off.
//! - [`real_node`]: a real marekvs binary as a member (listeners on the pod IP, per-pod log).
//! - [`cri_log`]: that log copied in the CRI format, for `kubectl logs` through kwok.
//! - [`operator_pod`]: the operator image's pods, run as the local operator binary.
//! - [`provisioner`]: binds PVCs of the harness StorageClass to PVs it creates.
//! - [`control`]: the loopback control API tests use to read state and inject faults.
//! - [`trace`]: recorded traces of real marekvs clusters (`marekvs-trace`) and the properties
//!   checked over them.
#![forbid(unsafe_code)]

pub mod container_state;
pub mod control;
pub mod cri_log;
pub mod model;
pub mod node_http;
pub mod node_resp;
pub mod operator_pod;
pub mod podlet;
pub mod provisioner;
pub mod real_node;
pub mod resp;
pub mod trace;
pub mod world;
