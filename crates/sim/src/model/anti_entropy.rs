//! Anti-entropy: each member process runs rounds every `ae_interval_ms` plus a jitter below
//! `ae_jitter_ms`. A round first counts itself (`marekvs_ae_rounds_total` is the round number
//! since the process started), then, for every partition the member owns, exchanges it with
//! ONE randomly chosen other owner in its view: each side receives the records it lacks or
//! has older, counted in the receiver's `marekvs_ae_repair_ops_total`. Every third round it
//! also offers each partition it has data for but does not own to one random owner, which
//! takes what it lacks. Identical partitions (equal digests) cost nothing. An unreachable
//! peer's exchange is skipped for the round, and `ae_drop_probability` drops exchanges
//! silently. The exchange completes within the tick the round starts in. Rounds go on while
//! the member is Leaving and stop when it exits.

use super::Cluster;
use super::placement::{candidates, owners_of};
use super::volume::newer_in;

impl Cluster {
    /// When the next round after `now_ms` starts.
    pub(crate) fn next_ae_at(&mut self, now_ms: u64) -> u64 {
        let jitter = self.settings.ae_jitter_ms;
        let j = if jitter > 0 {
            self.next_rand() % jitter
        } else {
            0
        };
        now_ms + self.settings.ae_interval_ms.max(1) + j
    }

    /// Run member `key`'s round if it is due.
    pub(crate) fn anti_entropy(&mut self, key: &str, now_ms: u64) {
        if self.members[key].next_ae_ms > now_ms {
            return;
        }
        let next = self.next_ae_at(now_ms);
        let m = self.members.get_mut(key).expect("member exists");
        m.next_ae_ms = next;
        m.ae_round += 1;
        m.counters.ae_rounds += 1;
        let round = m.ae_round;
        m.interests.retain(|_, subs| {
            subs.retain(|_, until| *until > now_ms);
            !subs.is_empty()
        });

        let owned = self.owned(key);
        let m = &self.members[key];
        let (me, n) = (m.node_id.clone(), m.replicas_n);
        let cands: Vec<String> = candidates(&m.view).into_iter().map(String::from).collect();
        let cand_refs: Vec<&str> = cands.iter().map(String::as_str).collect();
        let mut exchanges: Vec<(u32, String, bool)> = Vec::new();
        for pid in &owned {
            let others: Vec<&str> = owners_of(&cand_refs, n, *pid)
                .into_iter()
                .filter(|o| *o != me)
                .collect();
            if let Some(peer) = self.pick(&others) {
                exchanges.push((*pid, peer, true));
            }
        }
        if round.is_multiple_of(3) {
            let volume = &self.volumes[&self.members[key].volume];
            let stranded: Vec<u32> = volume
                .data
                .iter()
                .filter(|(pid, d)| !d.entries.is_empty() && owned.binary_search(pid).is_err())
                .map(|(pid, _)| *pid)
                .collect();
            for pid in stranded {
                let others: Vec<&str> = owners_of(&cand_refs, n, pid)
                    .into_iter()
                    .filter(|o| *o != me)
                    .collect();
                if let Some(peer) = self.pick(&others) {
                    exchanges.push((pid, peer, false));
                }
            }
        }
        for (pid, peer, both) in exchanges {
            // Unreachable (its process is gone while the view still lists it): skipped.
            let Some(peer_key) = self.up_member_by_id(&peer).map(str::to_string) else {
                continue;
            };
            let drop = self.settings.ae_drop_probability;
            if drop > 0.0 && self.rand_unit() < drop {
                continue;
            }
            self.exchange(key, &peer_key, pid, both);
        }
    }

    /// One of `choices` at random.
    fn pick(&mut self, choices: &[&str]) -> Option<String> {
        if choices.is_empty() {
            return None;
        }
        let i = (self.next_rand() % choices.len() as u64) as usize;
        Some(choices[i].to_string())
    }

    /// Exchange partition `pid` between members `a` and `b`: `b` gets what it lacks from `a`,
    /// and, if `both`, `a` what it lacks from `b`. Returns the records moved.
    pub(crate) fn exchange(&mut self, a: &str, b: &str, pid: u32, both: bool) -> u64 {
        let (va, vb) = (&self.members[a].volume, &self.members[b].volume);
        let (va, vb) = (&self.volumes[va], &self.volumes[vb]);
        if va.digest(pid) == vb.digest(pid) {
            return 0;
        }
        let to_b = newer_in(va, vb, pid);
        let to_a = if both {
            newer_in(vb, va, pid)
        } else {
            Vec::new()
        };
        let moved = (to_a.len() + to_b.len()) as u64;
        for (to, records) in [(b, to_b), (a, to_a)] {
            if records.is_empty() {
                continue;
            }
            let count = records.len() as u64;
            for (k, e) in records {
                self.apply_received(to, pid, &k, e);
            }
            if let Some(m) = self.members.get_mut(to) {
                m.counters.ae_repair_ops += count;
            }
        }
        moved
    }
}
