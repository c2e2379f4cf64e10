//! The pure core of the marekvs operator: the safety runbook as functions over plain data.
//! No Kubernetes types, no I/O, no clock (time is passed in).
#![forbid(unsafe_code)]

pub mod adoption;
pub mod autoscale;
pub mod gossip;
pub mod handoff;
pub mod input;
pub mod mass;
pub mod metrics;
pub mod ownership;
pub mod pace;
pub mod pass;
pub mod password;
pub mod plan;
pub mod recreate;
pub mod rng;
pub mod sizing;
pub mod stale;
pub mod stepper;
pub mod transitions;
pub mod types;
pub mod units;
pub mod versions;
pub mod views;
pub mod volumes;

pub use mass::{MassFailure, mass_failure};
pub use ownership::{LookAlikeSeen, ObjectKind};
pub use stepper::{Input, decide};
pub use types::*;
