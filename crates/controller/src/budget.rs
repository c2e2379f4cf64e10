//! One byte budget for everything the operator holds of what members send: the line of
//! `/metrics` being parsed and the `CLUSTER NODES` reply being read, across every read in
//! flight. A member cannot make the operator hold more than its read's own cap, and all members
//! together cannot make it hold more than the budget: a read whose buffer does not fit waits
//! for bytes to come free (within its own timeout; past it the read is unknown, which is never
//! safe). Each read pays for its one buffer in one go, before it allocates it, and never asks
//! for more while holding it, so reads never wait on one another in a circle.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What all member reads in flight may hold at once, unless `--member-read-budget-bytes`
/// says otherwise. A real node's view is about 100 bytes a member (about 100 KiB at the CRD's
/// 1,000 members) and a metrics line well under 1 KiB, so honest reads never come near it.
pub const DEFAULT_MEMBER_READ_BUDGET_BYTES: usize = 64 << 20;

/// The budget, shared by every clone of the member client.
#[derive(Clone, Debug)]
pub struct ByteBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

impl ByteBudget {
    /// A budget of `total` bytes (the semaphore counts bytes; it holds at most `u32::MAX`).
    pub fn new(total: usize) -> Self {
        let total = total.clamp(1, u32::MAX as usize);
        ByteBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes free now (for tests and the log).
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// An empty buffer of `cap` bytes (at most the whole budget), allocated once it is paid
    /// for: this waits while the budget has less than `cap` free.
    pub async fn buffer(&self, cap: usize) -> Buffer {
        let cap = cap.min(self.total);
        // `cap` is at most `total`, which fits a u32; the semaphore is never closed.
        let held = self
            .bytes
            .clone()
            .acquire_many_owned(cap as u32)
            .await
            .expect("the byte budget is never closed");
        Buffer {
            data: Vec::with_capacity(cap),
            _held: held,
            cap,
        }
    }
}

/// A buffer of member bytes paid for from the budget, and given back when it is dropped.
#[derive(Debug)]
pub struct Buffer {
    data: Vec<u8>,
    _held: OwnedSemaphorePermit,
    cap: usize,
}

/// A buffer would pass its cap: the member sent more than a node ever does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverCap {
    pub cap: usize,
}

impl Buffer {
    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Keeps the first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.data.truncate(len);
    }

    /// Empties it, keeping its allocation (and what it holds of the budget).
    pub fn clear(&mut self) {
        self.data.clear();
    }

    /// Appends `bytes`, unless that passes the cap (it never allocates again).
    pub fn extend(&mut self, bytes: &[u8]) -> Result<(), OverCap> {
        if self.data.len() + bytes.len() > self.cap {
            return Err(OverCap { cap: self.cap });
        }
        self.data.extend_from_slice(bytes);
        Ok(())
    }
}

/// A real node's `CLUSTER NODES` is about 100 bytes a member; more than this is not a node
/// answering, and is refused before it is buffered.
pub const MAX_VIEW_BYTES: u64 = 1 << 20;
/// The smallest byte budget for member reads: one whole view (and its CRLF) must fit.
pub const MIN_READ_BUDGET_BYTES: usize = MAX_VIEW_BYTES as usize + 2;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_buffer_pays_for_its_cap_up_front_and_gives_it_back() {
        let budget = ByteBudget::new(1 << 20);
        let mut b = budget.buffer(300_000).await;
        assert_eq!(budget.available(), (1 << 20) - 300_000);
        b.extend(&[7; 100_000]).unwrap();
        b.extend(&[8; 200_000]).unwrap();
        assert_eq!(b.len(), 300_000);
        assert_eq!(b.extend(&[9]), Err(OverCap { cap: 300_000 }));
        assert_eq!(b.len(), 300_000, "a refused extend adds nothing");
        drop(b);
        assert_eq!(budget.available(), 1 << 20);
        // Never more than the whole budget, so a buffer can always be paid for at last.
        let all = budget.buffer(5 << 20).await;
        assert_eq!(budget.available(), 0);
        drop(all);
    }

    #[tokio::test]
    async fn a_buffer_waits_for_bytes_held_by_others() {
        let budget = ByteBudget::new(1_000);
        let first = budget.buffer(800).await;
        let waiting = tokio::time::timeout(Duration::from_millis(50), budget.buffer(500));
        assert!(waiting.await.is_err(), "500 bytes were paid from 200 free");
        drop(first);
        let mut second = budget.buffer(500).await;
        second.extend(&[2; 500]).unwrap();
        assert_eq!(second.as_slice(), &[2; 500][..]);
    }
}
