//! The shell's side of the client-input ledger (`marekvs_core::input`): one ledger per
//! cluster, in the operator's memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

pub use marekvs_core::input::Read;

/// Per cluster (namespace, name).
#[derive(Default)]
pub struct Ledger {
    clusters: Mutex<HashMap<(String, String), marekvs_core::input::Ledger>>,
}

impl Ledger {
    /// See `marekvs_core::input::Ledger::observe`.
    pub fn observe(
        &self,
        cluster: &(String, String),
        reads: &BTreeMap<u32, Read>,
        now: marekvs_core::Millis,
    ) -> BTreeMap<u32, Option<u64>> {
        let mut all = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(cluster.clone()).or_default().observe(reads, now)
    }

    /// See `marekvs_core::input::Ledger::sent_between_passes`.
    pub fn sent_between_passes(
        &self,
        cluster: &(String, String),
        ordinal: u32,
        pod_uid: &str,
        sent: Option<u64>,
        now: marekvs_core::Millis,
    ) {
        let mut all = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = all.get_mut(cluster) {
            l.sent_between_passes(ordinal, pod_uid, sent, now);
        }
    }

    /// A pass of the cluster was recorded (its status written, or unchanged).
    pub fn recorded(&self, cluster: &(String, String)) {
        let mut all = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = all.get_mut(cluster) {
            l.recorded();
        }
    }

    /// The cluster is gone.
    pub fn forget(&self, cluster: &(String, String)) {
        let mut all = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        all.remove(cluster);
    }
}
