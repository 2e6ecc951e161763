//! A group's "listed" flag: the lock-free half of the listing protocol (see `fair`); and its
//! "in the lane" flag (see `fair::lane`).
//!
//! `true` while the group is in the scheduler's rotation or about to be inserted. A pusher pushes
//! to the group queue, then flips the flag from false to true and, if it did, lists the group. The
//! remover (a worker that emptied the queue, under its rotation shard's lock) clears the flag, then
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
    /// True if the group is listed (a snapshot, for choices a stale answer cannot make wrong).
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Pusher side, after pushing to the queue: true if the caller must insert the group.
    pub fn after_push(&self) -> bool {
        fence(Ordering::SeqCst);
        !self.0.load(Ordering::Relaxed) && !self.0.swap(true, Ordering::AcqRel)
    }

    /// Remover side, under the rotation shard's lock, having seen the queue empty.
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

/// A group's "has a task in the lane" flag (see `fair::lane`): set by the pusher that puts the
/// group's task there, cleared by the worker that takes it. At most one task of a group waits in
/// the lane.
pub struct LaneFlag(AtomicBool);

impl Default for LaneFlag {
    fn default() -> Self {
        LaneFlag(AtomicBool::new(false))
    }
}

impl LaneFlag {
    /// True if the caller set the flag and may push the group's task to the lane.
    pub fn enter(&self) -> bool {
        !self.0.load(Ordering::Relaxed) && !self.0.swap(true, Ordering::AcqRel)
    }

    /// The group's task left the lane (or never entered it).
    pub fn leave(&self) {
        // Under loom, a read-modify-write with the same effect: loom 0.7 lets a plain store fall
        // between the read and the write of a concurrent `swap` (its issues #254 and #389), which
        // would show a pusher's `enter` overwriting this store, an execution the memory model
        // forbids.
        #[cfg(not(loom))]
        self.0.store(false, Ordering::Release);
        #[cfg(loom)]
        self.0.swap(false, Ordering::AcqRel);
    }

    /// True while a task of the group waits in the lane (a snapshot).
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
