//! The MarekvsCluster controller as a library; `main.rs` is its command line.
#![forbid(unsafe_code)]

/// The operator's version (its crate's): in its User-Agent, its metrics and `status.operatorVersion`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod act;
pub mod admission;
pub mod adopt;
pub mod budget;
pub mod build;
#[cfg(test)]
mod build_golden;
pub mod check;
pub mod controller;
pub mod ctx;
pub mod error;
pub mod events;
pub mod first_pass;
pub mod input;
pub mod lease;
#[cfg(test)]
mod lease_sim;
pub mod observe;
pub mod password;
pub mod reconcile;
pub mod record;
pub mod recreate;
pub mod recreate_lock;
pub mod report;
pub mod retry;
pub mod scrape;
pub mod spec;
pub mod status;
pub mod telemetry;
pub mod term;
pub mod views;
