//! Traces of real marekvs clusters, as an operator observes them, and properties they show.
//!
//! - [`format`]: the trace file (serde structs, compact JSON).
//! - [`backend`]: what a scenario drives ([`backend::Backend`]), and the parsers of what a
//!   member answers (`/metrics`, `CLUSTER NODES`).
//! - [`real`]: the backend over real server processes on loopback.
//! - [`model`]: the backend over the simulator's model, in virtual time.
//! - [`client`]: a small pipelining RESP client.
//! - [`recorder`]: samples members while a scenario runs and logs its events.
//! - [`scenario`]: the scenarios.
//! - [`props`]: properties checked over a trace, each with its measured figures.
//!
//! The committed traces are in `crates/sim/tests/traces/` (see the README there).

pub mod backend;
pub mod client;
pub mod format;
pub mod model;
pub mod props;
pub mod real;
pub mod recorder;
pub mod scenario;
