//! Client input per member: `marekvs_net_input_bytes_total` less what the operator itself sent
//! to the member's RESP port (its view reads), counted until a pass is recorded.
//!
//! The hand-off gate must know whether a leaver took client input since it went quiet: a
//! client writing to it past its Service (a pooled connection, its pod address) may leave data
//! only it holds. The node counts every RESP byte it reads, the operator's own included. The
//! ledger lives in the operator's memory, not in status: the counter moves with every pass,
//! and writing it would write status every pass. Losing it is safe: a member the operator has
//! no baseline for (it just started, or the pod is new) reads as unknown, which starts its
//! count again. The shell keeps one [`Ledger`] per cluster.

use std::collections::BTreeMap;

use crate::types::Millis;

/// How long after a view read was cut off (its bytes sent, its reply never read) the node may
/// still count those bytes: a busy node reads its RESP sockets late, after it answered the
/// scrape that follows. Until then the member's client input is unknown. Measured on real
/// members mid hand-off: bytes of a timed-out read counted more than a pass later, taken for
/// a client's.
pub const LATE_BYTES_MS: Millis = 10_000;

/// One member's baseline.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// The pod the baseline was read from: a new pod is a new process.
    pod_uid: String,
    /// The counter at the last read that was used, and the operator's bytes sent since.
    input: u64,
    own_since: u64,
    /// Client bytes seen since the last recorded pass; `None`: unknown since.
    pending: Option<u64>,
    /// Until when bytes the operator sent in a read cut off may still be counted.
    late_until: Option<Millis>,
}

/// What one pass read of one member for the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub pod_uid: String,
    /// `marekvs_net_input_bytes_total` from this pass's scrape (`None`: not read).
    pub input: Option<u64>,
    /// Bytes the operator sent to the member's RESP port in this pass, before that scrape
    /// (`None`: unknown).
    pub sent: Option<u64>,
}

/// One cluster's members, by ordinal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    entries: BTreeMap<u32, Entry>,
}

impl Ledger {
    /// Fold this pass's reads (made at `now`) in; the client input since the last recorded
    /// pass of each member read (`None`: unknown). Members not read are forgotten.
    pub fn observe(
        &mut self,
        reads: &BTreeMap<u32, Read>,
        now: Millis,
    ) -> BTreeMap<u32, Option<u64>> {
        self.entries.retain(|o, _| reads.contains_key(o));
        reads
            .iter()
            .map(|(o, r)| (*o, fold(&mut self.entries, *o, r, now)))
            .collect()
    }

    /// Bytes the operator sent to member `o`'s RESP port between two passes' reads (the
    /// identity check before a drain), at `now`: taken off its next scrape's figure, like a
    /// pass's own (`None`: cut off, so the member's client input is unknown for a while).
    pub fn sent_between_passes(&mut self, o: u32, pod_uid: &str, sent: Option<u64>, now: Millis) {
        let read = Read {
            pod_uid: pod_uid.to_string(),
            input: None,
            sent,
        };
        fold(&mut self.entries, o, &read, now);
    }

    /// A pass was recorded (its status written, or unchanged): what it saw is in status now.
    pub fn recorded(&mut self) {
        for e in self.entries.values_mut() {
            e.pending = Some(0);
        }
    }
}

fn fold(entries: &mut BTreeMap<u32, Entry>, o: u32, r: &Read, now: Millis) -> Option<u64> {
    let fresh = |input| Entry {
        pod_uid: r.pod_uid.clone(),
        input,
        own_since: 0,
        pending: None,
        late_until: None,
    };
    let late = Some(now + LATE_BYTES_MS);
    let Some(e) = entries.get_mut(&o).filter(|e| e.pod_uid == r.pod_uid) else {
        // No baseline for this process: unknown until the next read.
        if let Some(input) = r.input {
            entries.insert(o, fresh(input));
        } else {
            entries.remove(&o);
        }
        return None;
    };
    let (input, sent) = match (r.input, r.sent) {
        (Some(input), Some(sent)) => (input, sent),
        // Not scraped: the bytes sent wait for the next scrape's figure.
        (None, Some(sent)) => {
            e.own_since += sent;
            return e.pending;
        }
        // Cut off: what the node read is unknown, and the bytes may still be counted later;
        // start again once they can no longer be.
        (None, None) => {
            e.own_since = 0;
            e.pending = None;
            e.late_until = late;
            return None;
        }
        (Some(input), None) => {
            *e = Entry {
                late_until: late,
                ..fresh(input)
            };
            return None;
        }
    };
    if e.late_until.is_some_and(|t| now < t) {
        // Bytes of a read cut off may land in this reading: a new baseline, still unknown.
        *e = Entry {
            late_until: e.late_until,
            ..fresh(input)
        };
        return None;
    }
    let own = e.own_since + sent;
    if input < e.input + own {
        // The counter went back (a restart), or counted less than the operator sent.
        *e = fresh(input);
        return None;
    }
    let client = input - e.input - own;
    e.input = input;
    e.own_since = 0;
    e.pending = e.pending.map(|p| p + client);
    e.pending
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(input: Option<u64>, sent: Option<u64>) -> BTreeMap<u32, Read> {
        BTreeMap::from([(
            0,
            Read {
                pod_uid: "p1".into(),
                input,
                sent,
            },
        )])
    }

    /// A ledger read a pass (1 s) apart each time.
    #[derive(Default)]
    struct Clocked {
        ledger: Ledger,
        clock: Millis,
    }

    impl Clocked {
        fn observe_at(&mut self, reads: &BTreeMap<u32, Read>) -> BTreeMap<u32, Option<u64>> {
            self.clock += 1_000;
            self.ledger.observe(reads, self.clock)
        }

        fn recorded(&mut self) {
            self.ledger.recorded();
        }
    }

    #[test]
    fn the_operators_own_bytes_are_taken_off_and_client_bytes_kept_until_recorded() {
        let mut l = Clocked::default();
        // First read: no baseline, unknown.
        assert_eq!(l.observe_at(&read(Some(1_000), Some(55)))[&0], None);
        // Still unknown until a pass is recorded with it.
        assert_eq!(l.observe_at(&read(Some(1_055), Some(55)))[&0], None);
        l.recorded();
        assert_eq!(l.observe_at(&read(Some(1_110), Some(55)))[&0], Some(0));
        // A client sent 30 bytes: seen, and seen again until recorded.
        assert_eq!(l.observe_at(&read(Some(1_195), Some(55)))[&0], Some(30));
        assert_eq!(l.observe_at(&read(Some(1_250), Some(55)))[&0], Some(30));
        l.recorded();
        assert_eq!(l.observe_at(&read(Some(1_305), Some(55)))[&0], Some(0));
        // A pass whose scrape failed: its bytes are taken off the next scrape's.
        assert_eq!(l.observe_at(&read(None, Some(55)))[&0], Some(0));
        assert_eq!(l.observe_at(&read(Some(1_415), Some(55)))[&0], Some(0));
        // A read cut off: unknown, and so is every reading until its bytes can no longer
        // land (a busy node counts them late: here 3 s later, taken off, not a client's).
        assert_eq!(l.observe_at(&read(Some(1_470), None))[&0], None);
        let mut input = 1_470;
        for late in [0, 0, 55, 0, 0, 0, 0, 0, 0] {
            input += 55 + late;
            assert_eq!(l.observe_at(&read(Some(input), Some(55)))[&0], None);
            l.recorded();
        }
        input += 55;
        assert_eq!(l.observe_at(&read(Some(input), Some(55)))[&0], Some(0));
        // Once past, a client's bytes count again.
        input += 55 + 30;
        assert_eq!(l.observe_at(&read(Some(input), Some(55)))[&0], Some(30));
    }

    #[test]
    fn bytes_sent_between_passes_are_taken_off_the_next_scrape_not_counted_as_a_clients() {
        let mut l = Clocked::default();
        l.observe_at(&read(Some(1_000), Some(55)));
        l.recorded();
        assert_eq!(l.observe_at(&read(Some(1_055), Some(55)))[&0], Some(0));
        // The identity check before a drain sends AUTH and CLUSTER MYID (49 bytes).
        l.ledger
            .sent_between_passes(0, "p1", Some(49), l.clock + 500);
        assert_eq!(l.observe_at(&read(Some(1_159), Some(55)))[&0], Some(0));
        // Without it, those bytes would have read as a client's.
        let mut without = Clocked::default();
        without.observe_at(&read(Some(1_000), Some(55)));
        without.recorded();
        without.observe_at(&read(Some(1_055), Some(55)));
        assert_eq!(
            without.observe_at(&read(Some(1_159), Some(55)))[&0],
            Some(49)
        );
        // A check cut off: unknown until its bytes can no longer land.
        l.recorded();
        l.ledger.sent_between_passes(0, "p1", None, l.clock + 500);
        assert_eq!(l.observe_at(&read(Some(1_300), Some(55)))[&0], None);
        // Sent to another pod under the name: no baseline holds, unknown until one is read.
        l.ledger.sent_between_passes(0, "p2", Some(49), l.clock);
        assert_eq!(l.observe_at(&read(Some(1_355), Some(55)))[&0], None);
    }

    #[test]
    fn a_restart_or_a_new_pod_is_unknown() {
        let mut l = Clocked::default();
        l.observe_at(&read(Some(5_000), Some(55)));
        l.recorded();
        assert_eq!(l.observe_at(&read(Some(5_055), Some(55)))[&0], Some(0));
        // The counter went back: the process restarted.
        assert_eq!(l.observe_at(&read(Some(55), Some(55)))[&0], None);
        l.recorded();
        assert_eq!(l.observe_at(&read(Some(110), Some(55)))[&0], Some(0));
        // Another pod with the member's name.
        let mut other = read(Some(9_999), Some(55));
        other.get_mut(&0).unwrap().pod_uid = "p2".into();
        assert_eq!(l.observe_at(&other)[&0], None);
        // Fewer bytes counted than the operator sent: not trusted.
        l.recorded();
        let mut short = read(Some(10_000), Some(55));
        short.get_mut(&0).unwrap().pod_uid = "p2".into();
        assert_eq!(l.observe_at(&short)[&0], None);
    }
}
