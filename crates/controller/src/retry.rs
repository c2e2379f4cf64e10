//! How long a cluster whose pass failed waits before the next try: each cluster's failures in a
//! row are counted here (in memory: after a restart the count starts again, which only makes
//! the first retry sooner), and the wait is `marekvs_core::pace::error_retry_ms`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use marekvs_core::pace::error_retry_ms;
use marekvs_core::rng::SplitMix64;

use crate::error::Error;

/// A cluster's namespace and name.
type ClusterKey = (String, String);

/// Consecutive failed passes, per cluster; a pass that succeeds clears its cluster's count.
#[derive(Default)]
pub struct Failures {
    in_a_row: Mutex<HashMap<ClusterKey, u32>>,
}

impl Failures {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterKey, u32>> {
        self.in_a_row.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a failed pass of `cluster`, unless the error is one retried at once without
    /// backing off (see [`retry_after`]).
    pub fn failed(&self, cluster: &ClusterKey, err: &Error) {
        if backs_off(err) {
            *self.counts().entry(cluster.clone()).or_default() += 1;
        }
    }

    /// A pass of `cluster` succeeded (or the cluster is gone): its count starts again.
    pub fn succeeded(&self, cluster: &ClusterKey) {
        self.counts().remove(cluster);
    }

    /// `cluster`'s failed passes in a row.
    pub fn in_a_row(&self, cluster: &ClusterKey) -> u32 {
        self.counts().get(cluster).copied().unwrap_or(0)
    }
}

/// Caches not yet synced and conflicts (our copy was stale) are not failures of the cluster:
/// they clear as soon as the watch catches up.
fn backs_off(err: &Error) -> bool {
    !matches!((err, err.code()), (Error::NotSynced, _) | (_, Some(409)))
}

/// How long to wait after a failed pass, the `failures`-th in a row, with `jitter` in `[0, 1)`.
pub fn retry_after(err: &Error, failures: u32, jitter: f64) -> Duration {
    match (err, err.code()) {
        (Error::NotSynced, _) => Duration::from_millis(100),
        // Our copy was stale: look again as soon as the watch catches up.
        (_, Some(409)) => Duration::from_millis(200),
        _ => Duration::from_millis(error_retry_ms(failures, jitter) as u64),
    }
}

/// A jitter in `[0, 1)` that differs between clusters and between tries.
pub fn jitter(cluster: &ClusterKey, failures: u32) -> f64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(cluster.0.as_bytes());
    h.write(cluster.1.as_bytes());
    h.write_u32(failures);
    let mut rng = SplitMix64(h.finish());
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> Error {
        Error::Record {
            name: "demo".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("refused", "Refused")
                    .with_code(code)
                    .boxed(),
            ),
        }
    }

    /// The reported bug: a pass failing for ever was retried every 3 s for ever.
    #[test]
    fn a_cluster_failing_again_and_again_waits_longer_each_time_up_to_the_cap() {
        let failures = Failures::default();
        let key = ("ns".to_string(), "demo".to_string());
        let refused = api_error(500);
        let mut waits = Vec::new();
        for _ in 0..12 {
            failures.failed(&key, &refused);
            waits.push(retry_after(&refused, failures.in_a_row(&key), 0.0));
        }
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(waits[0], Duration::from_secs(1));
        assert_eq!(*waits.last().unwrap(), Duration::from_secs(300));
        // Another cluster's count is its own; a success starts the count again.
        let other = ("ns".to_string(), "other".to_string());
        assert_eq!(failures.in_a_row(&other), 0);
        failures.succeeded(&key);
        assert_eq!(failures.in_a_row(&key), 0);
        // Stale caches and conflicts are retried at once and are not counted.
        failures.failed(&key, &Error::NotSynced);
        failures.failed(&key, &api_error(409));
        assert_eq!(failures.in_a_row(&key), 0);
        assert_eq!(
            retry_after(&Error::NotSynced, 7, 0.0),
            Duration::from_millis(100)
        );
        assert_eq!(
            retry_after(&api_error(409), 7, 0.0),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn jitter_stays_in_its_range_and_varies() {
        let key = ("ns".to_string(), "demo".to_string());
        let draws: Vec<f64> = (0..200).map(|n| jitter(&key, n)).collect();
        assert!(draws.iter().all(|j| (0.0..1.0).contains(j)));
        let distinct: std::collections::BTreeSet<u64> = draws.iter().map(|j| j.to_bits()).collect();
        assert!(distinct.len() > 190, "{} distinct of 200", distinct.len());
    }
}
