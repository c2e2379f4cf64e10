//! The engine: advancing the model to a point in time. Each member only does what is due
//! (gossip arrived, a flush over, an anti-entropy round, a gauge refresh), so an idle
//! cluster's tick costs little more than a look at each member's timers.

use std::time::Duration;

use super::member::Process;
use super::{Cluster, ms};

impl Cluster {
    /// Advance the model to `now`.
    /// The members whose process is up, by key.
    pub(crate) fn running_keys(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|(_, m)| m.is_up())
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn tick(&mut self, now: Duration) {
        let now_ms = ms(now);
        let dt = self
            .last_tick_ms
            .map(|t| now_ms.saturating_sub(t) as f64 / 1000.0)
            .unwrap_or(0.0);
        self.last_tick_ms = Some(now_ms);
        let keys = self.running_keys();

        for key in &keys {
            self.deliver_gossip(key, now_ms);
        }
        for key in &keys {
            self.refresh_placement(key);
            self.run_bootstrap(key, dt, now_ms);
            self.maybe_activate(key, now_ms);
            self.refresh_placement(key);
        }
        for key in &keys {
            self.ship(key, dt);
        }
        for key in &keys {
            self.anti_entropy(key, now_ms);
        }
        self.run_mesh(&keys, dt);
        // SIGTERM'd members whose ring drained (or whose time is up) exit.
        for key in &keys {
            self.maybe_exit_after_flush(key, now_ms);
        }
        for key in &keys {
            if self.members[key].is_up() {
                self.refresh_gauges(key, now_ms);
            }
        }
        self.add_load(dt);
        self.account_availability();
    }

    fn maybe_exit_after_flush(&mut self, key: &str, now_ms: u64) {
        let Process::Flushing {
            sleep_until_ms,
            deadline_ms,
        } = self.members[key].process
        else {
            return;
        };
        if now_ms < sleep_until_ms {
            return;
        }
        if now_ms >= deadline_ms || self.ring_backlog(key) == 0 {
            self.exit(key, now_ms, 0, self.settings.leave_detect_ms);
        }
    }
}
