//! A rotation shard's inbox: the groups just listed, waiting to enter the shard's rotation, and a
//! hint of where the first of them will enter.
//!
//! # Why the hint
//! Picks and quantum ends compare shards by their first group without taking their locks. A
//! group in an inbox is not in any rotation yet, and it enters at `max(own, floor)`, which may be
//! far ahead of the floor: counting a shard with listed groups as "at the floor" drew every pick
//! to a group far ahead of another. So each lister lowers the hint to where its item enters.
//!
//! # Protocol
//! The lister pushes, then lowers the hint (`fetch_min`, skipped when it would not lower it). The
//! visitor, under its shard's lock, resets the hint to "unknown" (`u64::MAX`), then drains. A
//! hint may be too low (its item was drained already): the shard is visited once too early,
//! which resets it. It is never too high while an item waits, except "unknown" (a lister between
//! its push and its `fetch_min`, or a `fetch_min` ordered before a concurrent reset), which
//! [`Inbox::front`] reports as the floor, so a waiting item is never hidden behind other shards.
//! loom model: `loom_models/runtime.rs`, `an_inbox_never_hides_a_listed_group`.

use concurrent_queue::ConcurrentQueue;

use crate::shim::{AtomicU64, Ordering};

/// See the module docs.
pub(crate) struct Inbox<T> {
    queue: ConcurrentQueue<T>,
    /// At most where the first queued item enters, in virtual nanoseconds; `u64::MAX` when
    /// unknown.
    front: AtomicU64,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Inbox {
            queue: ConcurrentQueue::unbounded(),
            front: AtomicU64::new(u64::MAX),
        }
    }
}

impl<T> Inbox<T> {
    /// Queues `item`, which enters at `enters_at` or later. Gives it back if the inbox is closed
    /// (never, in the scheduler).
    pub(crate) fn push(&self, item: T, enters_at: u64) -> Result<(), T> {
        self.queue.push(item).map_err(|e| e.into_inner())?;
        if enters_at < self.front.load(Ordering::Relaxed) {
            self.front.fetch_min(enters_at, Ordering::SeqCst);
        }
        Ok(())
    }

    /// At most where the first queued item enters (a hint), or `None` if nothing waits. `floor`
    /// stands in for a hint not set yet: no item enters below the floor.
    pub(crate) fn front(&self, floor: u64) -> Option<u64> {
        if self.queue.is_empty() {
            return None;
        }
        match self.front.load(Ordering::SeqCst) {
            u64::MAX => Some(floor),
            front => Some(front),
        }
    }

    /// Under the shard's lock: resets the hint, then takes every queued item, oldest first.
    pub(crate) fn drain(&self, mut each: impl FnMut(T)) {
        if self.queue.is_empty() {
            return;
        }
        self.front.store(u64::MAX, Ordering::SeqCst);
        while let Ok(item) = self.queue.pop() {
            each(item);
        }
    }

    /// True if nothing waits (a snapshot).
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}
