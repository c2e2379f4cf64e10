//! Per cluster, a lock held while its deleted pods are being re-created by the watch's fast
//! path (`recreate.rs`); a pass of the same cluster waits for it, so the two never race to
//! make the same pod.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

/// The longest a reconcile waits for a re-creation in flight.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// A cluster's namespace and name.
type ClusterKey = (String, String);

/// Per cluster: held while its deleted pods are being re-created. An entry lives only while
/// someone holds or waits on it: every pod deletion takes one, whatever cluster its label
/// names, so entries kept until their cluster is deleted would grow without bound.
#[derive(Default)]
pub struct RecreationLock {
    clusters: Mutex<HashMap<ClusterKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// A cluster's lock, held; dropping it frees the lock and, when no one else holds or waits on
/// it, its entry.
pub struct RecreationGuard {
    guard: Option<OwnedMutexGuard<()>>,
    lock: Arc<RecreationLock>,
    key: ClusterKey,
}

impl Drop for RecreationGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.lock.release(&self.key);
    }
}

impl RecreationLock {
    fn entries(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ClusterKey, Arc<tokio::sync::Mutex<()>>>> {
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops `key`'s entry if the map's is its only reference: every holder and waiter clones
    /// it under the same map lock, so no one can be about to use it.
    fn release(&self, key: &ClusterKey) {
        let mut clusters = self.entries();
        if clusters.get(key).is_some_and(|e| Arc::strong_count(e) == 1) {
            clusters.remove(key);
        }
    }

    /// Taken synchronously, in the watch's event handler. `None` when a re-creation for the
    /// same cluster already holds it: that one's guard covers this deletion's pass too.
    pub fn hold(self: &Arc<Self>, ns: &str, cluster: &str) -> Option<RecreationGuard> {
        let key = (ns.to_owned(), cluster.to_owned());
        let entry = self.entries().entry(key.clone()).or_default().clone();
        match entry.try_lock_owned() {
            Ok(guard) => Some(RecreationGuard {
                guard: Some(guard),
                lock: self.clone(),
                key,
            }),
            Err(_) => {
                // `entry` is gone with the failed try; the holder may have let go meanwhile,
                // and then the map's was the last reference.
                self.release(&key);
                None
            }
        }
    }

    /// Returns once no re-creation of this cluster is in flight, or after [`LOCK_TIMEOUT`].
    pub async fn wait(&self, ns: &str, cluster: &str) {
        let key = (ns.to_owned(), cluster.to_owned());
        let Some(lock) = self.entries().get(&key).cloned() else {
            return;
        };
        let _ = tokio::time::timeout(LOCK_TIMEOUT, lock.lock()).await;
        drop(lock);
        self.release(&key);
    }

    /// A deleted cluster's entry goes with it.
    pub fn forget(&self, ns: &str, cluster: &str) {
        self.entries().remove(&(ns.to_owned(), cluster.to_owned()));
    }

    /// How many clusters have an entry.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pass_waits_for_the_recreation_in_flight_of_its_own_cluster_only() {
        let lock = Arc::new(RecreationLock::default());
        // Nothing in flight: no wait.
        let t0 = tokio::time::Instant::now();
        lock.wait("ns", "a").await;
        assert_eq!(t0.elapsed(), Duration::ZERO);

        let held = lock.hold("ns", "a").expect("free");
        assert!(lock.hold("ns", "a").is_none(), "one holder per cluster");
        let other = lock.hold("ns", "b").expect("another cluster is not held");
        drop(other);
        lock.wait("ns", "b").await;
        assert_eq!(t0.elapsed(), Duration::ZERO);

        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                lock.wait("ns", "a").await;
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
        assert!(lock.hold("ns", "a").is_some(), "free again");
        assert_eq!(lock.len(), 0, "no entry outlives its holders and waiters");
    }

    /// Every pod deletion takes its cluster's lock, whatever cluster its label names: entries
    /// kept until a cluster is deleted would grow with every name ever seen.
    #[tokio::test(start_paused = true)]
    async fn the_lock_keeps_no_entry_once_nobody_holds_or_waits_on_it() {
        let lock = Arc::new(RecreationLock::default());
        for i in 0..1000 {
            let held = lock.hold("ns", &format!("c{i}")).expect("free");
            assert_eq!(lock.len(), 1);
            drop(held);
        }
        assert_eq!(lock.len(), 0);

        // A second deletion finds the cluster held, and the holder's drop frees the entry.
        let held = lock.hold("ns", "a").expect("free");
        assert!(lock.hold("ns", "a").is_none());
        drop(held);
        assert_eq!(lock.len(), 0);

        // A waiter that times out against a stuck holder leaves the entry to the holder.
        let held = lock.hold("ns", "a").expect("free");
        lock.wait("ns", "a").await;
        assert_eq!(lock.len(), 1, "still held");
        drop(held);
        assert_eq!(lock.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_recreation_holds_a_pass_back_no_longer_than_the_timeout() {
        let lock = Arc::new(RecreationLock::default());
        let _held = lock.hold("ns", "a").unwrap();
        let t0 = tokio::time::Instant::now();
        lock.wait("ns", "a").await;
        assert_eq!(t0.elapsed(), LOCK_TIMEOUT);
        lock.forget("ns", "a");
        let t1 = tokio::time::Instant::now();
        lock.wait("ns", "a").await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
}
