//! The simulator's own availability figures (no real node reports these): a partition that
//! some member once owned with a complete copy is unavailable while no running member owns
//! it in its own view; each time one becomes so counts in `lost_partitions_total`. Removing
//! two members of an RF 2 cluster at once makes the partitions they both owned unavailable
//! until the survivors' views drop them, and what only they held is gone for good.

use super::Cluster;

impl Cluster {
    /// Recount availability if placement or processes changed.
    pub(crate) fn account_availability(&mut self) {
        if !self.availability_dirty {
            return;
        }
        self.availability_dirty = false;
        let p = self.settings.partitions as usize;
        let mut owned = vec![false; p];
        let keys = self.running_keys();
        for key in keys {
            for pid in self.owned(&key) {
                owned[pid as usize] = true;
            }
        }
        for (i, on) in owned.iter().enumerate() {
            if !self.existed[i] {
                continue;
            }
            if !on && !self.unavailable[i] {
                self.unavailable[i] = true;
                self.lost_partitions_total += 1;
            } else if *on {
                self.unavailable[i] = false;
            }
        }
    }

    /// Partitions that currently no running member owns.
    pub fn unavailable_partitions(&self) -> u64 {
        self.unavailable.iter().filter(|u| **u).count() as u64
    }
}
