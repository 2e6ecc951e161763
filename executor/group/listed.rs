//! A group's "listed" flag: the lock-free half of the listing protocol (see `fair`); and its
//! "in the lane" flag (see `fair::lane`).
//!
//! `true` while the group is in the scheduler's rotation or about to be inserted. A pusher pushes
//! to the group queue, then flips the flag from false to true and, if it did, lists the group. The
//! remover (a worker that emptied the queue, under its rotation shard's lock) clears the flag, then
//! re-checks the queue after releasing the lock and re-lists the group if a push slipped in. Both
//! sides write, fence, then read the other side's location, so one of them always sees the other:
//! no task is left in an unlisted queue (loom models in `loom_models/runtime.rs`).

use crate::shim::{AtomicBool, Ordering, fence};

/// What a half of the listing protocol leaves its caller to do. Ignoring [`Listing::Insert`]
/// strands the group's queued tasks: its flag says listed, and no rotation holds it.
#[must_use = "`Listing::Insert` leaves the group to the caller: insert it into the rotation, \
              or its queued tasks are stranded"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listing {
    /// The caller flipped the flag from false to true: it must insert the group into the
    /// rotation (`Scheduler::list`).
    Insert,
    /// Another thread flipped the flag (or the group is still in the rotation): that thread
    /// inserts it, or did.
    Listed,
    /// After a clear: the queue is empty, so the group stays out of the rotation.
    Empty,
}

/// See the module docs.
pub(crate) struct ListFlag(AtomicBool);

impl Default for ListFlag {
    fn default() -> Self {
        ListFlag(AtomicBool::new(false))
    }
}

impl ListFlag {
    /// True if the group is listed (a snapshot, for choices a stale answer cannot make wrong).
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Pusher side, after pushing to the queue: [`Listing::Insert`] if the caller must insert
    /// the group, else [`Listing::Listed`].
    pub(crate) fn after_push(&self) -> Listing {
        fence(Ordering::SeqCst);
        if self.0.load(Ordering::Relaxed) || self.0.swap(true, Ordering::AcqRel) {
            Listing::Listed
        } else {
            Listing::Insert
        }
    }

    /// Remover side, under the rotation shard's lock, having seen the queue empty. The caller
    /// owes [`after_clear`](Self::after_clear) once it released the lock.
    pub(crate) fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Remover side, after the lock is released: [`Listing::Insert`] if a push slipped in and the
    /// caller must insert the group again; [`Listing::Listed`] if the pusher flipped the flag
    /// itself; [`Listing::Empty`] if nothing was pushed.
    pub(crate) fn after_clear(&self, queue_is_empty: impl FnOnce() -> bool) -> Listing {
        fence(Ordering::SeqCst);
        if queue_is_empty() {
            Listing::Empty
        } else if self.0.swap(true, Ordering::AcqRel) {
            Listing::Listed
        } else {
            Listing::Insert
        }
    }
}

/// What a try to put a group's task into the lane gave. Ignoring [`LaneEntry::Entered`] leaves
/// the group's lane flag set with no task in the lane: the group never uses the lane again.
#[must_use = "`LaneEntry::Entered` holds the group's lane flag: push the task to the lane \
              (a failed push clears it)"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaneEntry {
    /// The caller set the group's lane flag: it must push the group's task to the lane.
    Entered,
    /// The task may not take the lane (another task of the group waits there, or the scheduler
    /// refused the group): it goes to its group's queue.
    Refused,
}

/// A group's "has a task in the lane" flag (see `fair::lane`): set by the pusher that puts the
/// group's task there, cleared by the worker that takes it. At most one task of a group waits in
/// the lane.
pub(crate) struct LaneFlag(AtomicBool);

impl Default for LaneFlag {
    fn default() -> Self {
        LaneFlag(AtomicBool::new(false))
    }
}

impl LaneFlag {
    /// [`LaneEntry::Entered`] if the caller set the flag and must push the group's task to the
    /// lane.
    pub(crate) fn enter(&self) -> LaneEntry {
        if self.0.load(Ordering::Relaxed) || self.0.swap(true, Ordering::AcqRel) {
            LaneEntry::Refused
        } else {
            LaneEntry::Entered
        }
    }

    /// The group's task left the lane (or never entered it).
    pub(crate) fn leave(&self) {
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
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
