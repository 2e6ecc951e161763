//! A group's "listed" flag: the lock-free half of the listing protocol (see `fair`).
//!
//! `true` while the group is in the scheduler's rotation or about to be inserted. A pusher pushes
//! to the group queue, then flips the flag from false to true and, if it did, lists the group. The
//! remover (a worker that emptied the queue, under the scheduler lock) clears the flag, then
//! re-checks the queue after releasing the lock and re-lists the group if a push slipped in. Both
//! sides write, fence, then read the other side's location, so one of them always sees the other:
//! no task is left in an unlisted queue (loom models in `tests/loom_runtime.rs`).

use crate::shim::{AtomicBool, Ordering, fence};

/// See the module docs.
pub struct ListFlag(AtomicBool);

impl Default for ListFlag {
    fn default() -> Self {
        ListFlag(AtomicBool::new(false))
    }
}

impl ListFlag {
    /// Pusher side, after pushing to the queue: true if the caller must insert the group.
    pub fn after_push(&self) -> bool {
        fence(Ordering::SeqCst);
        !self.0.load(Ordering::Relaxed) && !self.0.swap(true, Ordering::AcqRel)
    }

    /// Remover side, under the scheduler lock, having seen the queue empty.
    pub fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Remover side, after the lock is released: true if a push slipped in and the caller must
    /// insert the group again.
    pub fn after_clear(&self, queue_is_empty: impl FnOnce() -> bool) -> bool {
        fence(Ordering::SeqCst);
        !queue_is_empty() && !self.0.swap(true, Ordering::AcqRel)
    }
}
