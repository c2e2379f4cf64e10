//! The first full pass of a term: how long after this replica began to lead every cluster had
//! had one completed reconcile. What a failover costs beyond the lease: the new leader's
//! initial LISTs, its queue of every cluster at once, and the scrapes of every member.
//!
//! Plain data with the clock passed in; the controller feeds it each pass's outcome.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

/// A cluster, as `(namespace, name)`.
pub type ClusterKey = (String, String);

#[derive(Default, Debug)]
pub struct FirstPass {
    /// When this replica began to lead: monotonic (for the duration) and wall (for others to
    /// compare with their own clocks, e.g. a benchmark's kill time).
    since: Option<(Instant, SystemTime)>,
    /// Clusters with a completed pass since then, until the first full pass is done.
    passed: HashSet<ClusterKey>,
    /// How many distinct clusters had a completed pass (kept after `passed` is dropped).
    count: usize,
    done: Option<Duration>,
}

impl FirstPass {
    /// This replica leads from `now` on. A second call (it cannot lose and lead again: a
    /// deposed leader exits) changes nothing.
    pub fn lead(&mut self, now: Instant, wall: SystemTime) {
        self.since.get_or_insert((now, wall));
    }

    /// A pass over `key` completed at `now`. `known` lists every cluster there is, `None`
    /// while that is not known yet (the cache holds no first LIST): nothing is judged
    /// complete against a partial list. Returns the first full pass's duration once, when
    /// this pass completes it.
    pub fn passed(
        &mut self,
        key: ClusterKey,
        now: Instant,
        known: impl FnOnce() -> Option<Vec<ClusterKey>>,
    ) -> Option<Duration> {
        let (since, _) = self.since?;
        if self.done.is_some() {
            return None;
        }
        if self.passed.insert(key) {
            self.count += 1;
        }
        let known = known()?;
        if known.is_empty() || !known.iter().all(|k| self.passed.contains(k)) {
            return None;
        }
        let took = now.saturating_duration_since(since);
        self.done = Some(took);
        self.passed = HashSet::new();
        Some(took)
    }

    /// Seconds since the Unix epoch at which this replica began to lead.
    pub fn leading_since_unix(&self) -> Option<f64> {
        let (_, wall) = self.since?;
        wall.duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs_f64())
    }

    /// Distinct clusters with a completed pass since this replica began to lead (counted up
    /// to the first full pass).
    pub fn clusters_passed(&self) -> usize {
        self.count
    }

    /// From leading to the end of the first full pass, once it is done.
    pub fn duration(&self) -> Option<Duration> {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> ClusterKey {
        ("ns".into(), n.into())
    }

    fn all(names: &[&str]) -> Option<Vec<ClusterKey>> {
        Some(names.iter().map(|n| key(n)).collect())
    }

    #[test]
    fn the_first_pass_ends_with_the_last_cluster_not_yet_passed() {
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut f = FirstPass::default();
        // Before leading, nothing counts (a standby reconciles nothing, but no pass is lost
        // to a race either way).
        assert_eq!(f.passed(key("a"), t0, || all(&["a"])), None);
        assert_eq!(f.clusters_passed(), 0);
        assert_eq!(f.leading_since_unix(), None);
        f.lead(t0, wall);
        f.lead(t0 + Duration::from_secs(9), SystemTime::UNIX_EPOCH);
        assert_eq!(f.leading_since_unix(), Some(1_800_000_000.0));
        let at = |ms| t0 + Duration::from_millis(ms);
        let known = ["a", "b", "c"];
        assert_eq!(f.passed(key("a"), at(100), || all(&known)), None);
        // The cache not synced yet: no judgement, but the pass is remembered.
        assert_eq!(f.passed(key("b"), at(200), || None), None);
        // A second pass over a cluster does not stand in for another.
        assert_eq!(f.passed(key("a"), at(300), || all(&known)), None);
        assert_eq!(f.clusters_passed(), 2);
        assert_eq!(f.duration(), None);
        let done = f.passed(key("c"), at(1_500), || all(&known));
        assert_eq!(done, Some(Duration::from_millis(1_500)));
        assert_eq!(f.duration(), done);
        assert_eq!(f.clusters_passed(), 3);
        // Reported once; later passes, new clusters included, change nothing.
        assert_eq!(f.passed(key("d"), at(9_000), || all(&["d"])), None);
        assert_eq!(f.duration(), Some(Duration::from_millis(1_500)));
        assert_eq!(f.clusters_passed(), 3);
    }

    #[test]
    fn a_cluster_created_during_the_pass_is_waited_for_and_an_empty_list_ends_nothing() {
        let t0 = Instant::now();
        let mut f = FirstPass::default();
        f.lead(t0, SystemTime::now());
        assert_eq!(f.passed(key("a"), t0, || Some(Vec::new())), None);
        assert_eq!(f.passed(key("b"), t0, || all(&["a", "b", "new"])), None);
        let end = t0 + Duration::from_secs(2);
        assert_eq!(
            f.passed(key("new"), end, || all(&["a", "b", "new"])),
            Some(Duration::from_secs(2))
        );
    }
}
