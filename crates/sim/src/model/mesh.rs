//! The mesh connections anti-entropy travels on, as marekvs 0.2 has them (`marekvs-repl`'s
//! mesh): per pair of processes a control connection with a send queue of
//! `ae_queue_capacity` messages (4,096 on the node). A message is put on it without waiting
//! (`try_send`): when the queue is full it is dropped, silently, and so is one whose encoding
//! exceeds the frame limit (8 MiB), and one to a peer with no connection. The queue drains
//! into the receiver's anti-entropy lane (`ae_inbox_capacity`, 8,192), which one task works
//! through in order at `ae_scan_records_per_sec`; while that lane is full the connection
//! stalls and its queue fills. A process that exits takes its queues and lane with it: what
//! was queued is lost.

use std::collections::VecDeque;

use super::Cluster;
use super::anti_entropy::AeMsg;

/// A directed connection: (sender key, receiver key).
pub(crate) type Link = (String, String);

impl Cluster {
    /// Put `msg` on the queue from `from` to `to`, or drop it (full, too large, no peer).
    /// Returns whether it was queued.
    pub(crate) fn try_send(&mut self, from: &str, to: &str, msg: AeMsg) -> bool {
        let up = |k: &str| self.members.get(k).is_some_and(|m| m.is_up());
        if !up(from) || !up(to) || msg.bytes() > self.settings.ae_frame_limit_bytes {
            self.ae_dropped += 1;
            return false;
        }
        let drop = self.settings.ae_drop_probability;
        if drop > 0.0 && self.rand_unit() < drop {
            self.ae_dropped += 1;
            return false;
        }
        let cap = self.settings.ae_queue_capacity;
        let queue = self
            .mesh
            .entry((from.to_string(), to.to_string()))
            .or_default();
        if queue.len() >= cap {
            self.ae_dropped += 1;
            return false;
        }
        queue.push_back(msg);
        true
    }

    /// Move queued messages into their receivers' lanes while there is room.
    fn drain_queues(&mut self) {
        let cap = self.settings.ae_inbox_capacity;
        let links: Vec<Link> = self.mesh.keys().cloned().collect();
        for link in links {
            let Some(m) = self.members.get_mut(&link.1) else {
                continue;
            };
            let queue = self.mesh.get_mut(&link).expect("link");
            while m.ae_inbox.len() < cap {
                let Some(msg) = queue.pop_front() else { break };
                m.ae_inbox.push_back((link.0.clone(), msg));
            }
        }
        self.mesh.retain(|_, q| !q.is_empty());
    }

    /// Every running member's anti-entropy task works through its lane for `dt` seconds.
    /// Messages travel at once on loopback: a conversation goes on within the tick while
    /// the handlers have time left.
    pub(crate) fn run_mesh(&mut self, keys: &[String], dt: f64) {
        let rate = self.settings.ae_scan_records_per_sec;
        for key in keys {
            if let Some(m) = self.members.get_mut(key) {
                // At most a second of time saved up; a debt (a message begun is finished) is
                // carried into the next tick.
                m.ae_credit = (m.ae_credit + rate * dt).min(rate);
            }
        }
        loop {
            self.drain_queues();
            let mut progressed = false;
            for key in keys {
                while let Some((from, msg)) = self.members.get_mut(key).and_then(|m| {
                    let ready = m.is_up() && (rate <= 0.0 || m.ae_credit > 0.0);
                    ready.then(|| m.ae_inbox.pop_front()).flatten()
                }) {
                    progressed = true;
                    let cost = self.handle_ae(key, &from, msg);
                    if rate > 0.0 {
                        let m = self.members.get_mut(key).expect("member exists");
                        m.ae_credit -= cost.max(1) as f64;
                    }
                }
            }
            if !progressed {
                break;
            }
        }
    }

    /// The process of `key` is gone: its connections, their queues and its lane with it.
    pub(crate) fn drop_links(&mut self, key: &str) {
        self.mesh.retain(|(a, b), _| a != key && b != key);
        if let Some(m) = self.members.get_mut(key) {
            m.ae_inbox = VecDeque::new();
            m.ae_credit = 0.0;
        }
    }

    /// Messages dropped on a full queue, over the frame limit or with no peer.
    pub fn ae_messages_dropped(&self) -> u64 {
        self.ae_dropped
    }
}
