//! Lets a deleted pod's re-creation reach the API server before the reconcile that the same
//! deletion triggers. Measured from the API server's audit log (docs/benchmarks.md), that
//! pass's status write landed in the middle of the re-creation's POST, and the pass then
//! created the pod a second time (409) in 14 of 20 replacements; with the gate, 1 of 20.
//!
//! The gate is held from the moment the watch reports the deletion (synchronously, before
//! the controller sees the event) until the re-creation's request is answered; a reconcile of
//! the same cluster waits for it before it writes anything. It is a scheduling hint, not
//! state: lost on a restart, nothing is owed. A pass never waits longer than
//! [`GATE_TIMEOUT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

/// The longest a reconcile waits for a re-creation in flight.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(2);

/// A cluster's namespace and name.
type ClusterKey = (String, String);

/// Per cluster: held while its deleted pods are being re-created.
#[derive(Default)]
pub struct Gate {
    clusters: Mutex<HashMap<ClusterKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl Gate {
    fn entry(&self, ns: &str, cluster: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut clusters = self.clusters.lock().unwrap_or_else(|p| p.into_inner());
        clusters
            .entry((ns.to_owned(), cluster.to_owned()))
            .or_default()
            .clone()
    }

    /// Taken synchronously, in the watch's event handler. `None` when a re-creation for the
    /// same cluster already holds it: that one's guard covers this deletion's pass too.
    pub fn hold(&self, ns: &str, cluster: &str) -> Option<OwnedMutexGuard<()>> {
        self.entry(ns, cluster).try_lock_owned().ok()
    }

    /// Returns once no re-creation of this cluster is in flight, or after [`GATE_TIMEOUT`].
    pub async fn wait(&self, ns: &str, cluster: &str) {
        let gate = {
            let clusters = self.clusters.lock().unwrap_or_else(|p| p.into_inner());
            match clusters.get(&(ns.to_owned(), cluster.to_owned())) {
                Some(g) => g.clone(),
                None => return,
            }
        };
        let _ = tokio::time::timeout(GATE_TIMEOUT, gate.lock()).await;
    }

    /// A deleted cluster's entry goes with it.
    pub fn forget(&self, ns: &str, cluster: &str) {
        let mut clusters = self.clusters.lock().unwrap_or_else(|p| p.into_inner());
        clusters.remove(&(ns.to_owned(), cluster.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pass_waits_for_the_recreation_in_flight_of_its_own_cluster_only() {
        let gate = Arc::new(Gate::default());
        // Nothing in flight: no wait.
        let t0 = tokio::time::Instant::now();
        gate.wait("ns", "a").await;
        assert_eq!(t0.elapsed(), Duration::ZERO);

        let held = gate.hold("ns", "a").expect("free");
        assert!(gate.hold("ns", "a").is_none(), "one holder per cluster");
        let other = gate.hold("ns", "b").expect("another cluster is not held");
        drop(other);
        gate.wait("ns", "b").await;
        assert_eq!(t0.elapsed(), Duration::ZERO);

        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move {
                gate.wait("ns", "a").await;
                tokio::time::Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            !waiter.is_finished(),
            "waits while the re-creation is in flight"
        );
        drop(held);
        let released = waiter.await.unwrap();
        assert_eq!(released - t0, Duration::from_millis(30));
        assert!(gate.hold("ns", "a").is_some(), "free again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_recreation_holds_a_pass_back_no_longer_than_the_timeout() {
        let gate = Gate::default();
        let _held = gate.hold("ns", "a").unwrap();
        let t0 = tokio::time::Instant::now();
        gate.wait("ns", "a").await;
        assert_eq!(t0.elapsed(), GATE_TIMEOUT);
        gate.forget("ns", "a");
        let t1 = tokio::time::Instant::now();
        gate.wait("ns", "a").await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
}
