//! Publishing work to other workers: queueing a runnable where any worker finds it (a group's
//! global queue, the scheduler's lane), listing its group, and waking a sleeper if nobody searches
//! (`notify_work`, with the I/O-aware choice of whom to wake).
//!
//! The pusher's half of the listing and idle protocols (`group::listed`, `idle` step 1): push,
//! fence, then look for a sleeper.

use std::ptr;
use std::sync::Arc;

use crate::fair::WaitFrom;
use crate::group::GroupInner;
use crate::group::listed::{LaneEntry, Listing};
use crate::shim::{Ordering, fence};
use crate::task::Runnable;
use crate::time::{Lowered, TimerHost};

use super::shared::Shared;

impl TimerHost for Shared {
    fn timer_lowered(&self, tick: u64) {
        match self.keeper().lowered(tick) {
            Lowered::InTime => {}
            Lowered::Unpark(k) => self.cores()[k].parker.unpark(),
            // A woken core becomes the keeper when it parks again; if a core is searching or
            // awake, it sees the timer before it parks.
            Lowered::Notify => self.notify_work(),
        }
    }
}

cfg_reactor! {
    impl Shared {
        /// Wakes one sleeping core if nobody is searching (see `idle`), preferring the keeper for
        /// a wake from outside the runtime (see `reactor`). The caller has fenced after making its
        /// work visible.
        pub(crate) fn notify_work(&self) {
            use super::reacting::{note_io, on_fallback_thread, reacting_core};

            let cores = self.cores();
            let idle = self.idle();
            let mark = |idx: usize| cores[idx].notified.store(true, Ordering::Release);
            if let Some(idx) = reacting_core(self) {
                // This thread dispatches readiness wakes for the keeper `idx`: wake the keeper
                // itself, unless it is awake already (see `reactor`).
                if self.claim_keeper(idx) {
                    return;
                }
            }
            // Before working out whom to prefer: most notifications find a worker searching.
            if idle.nobody_to_wake() {
                return;
            }
            // A wake from outside the runtime (async-io's thread dispatching while it holds the
            // reactor, a foreign thread) goes to the keeper, which then retries the reactor when
            // it parks again; a worker's wake leaves the keeper where it is (see `reactor`).
            let ours = super::context::with_thread(|t| t.is_some_and(|t| ptr::eq(&*t.shared, self)));
            let prefer = if ours { None } else { self.keeper().core() };
            let chosen = idle.notify_preferring(prefer, mark);
            if chosen.is_some() && chosen == prefer && on_fallback_thread() {
                // async-io's thread dispatches because it holds the reactor: the keeper retries
                // the reactor at short intervals from now on (see `reactor`).
                note_io(self);
            }
            if let Some(idx) = chosen {
                cores[idx].parker.unpark();
            }
        }

        /// Wakes the keeper `idx` from its own thread's reactor dispatch, counted awake but not
        /// searching, unless it is awake already (see `reactor`): true if this call woke it.
        pub(crate) fn claim_keeper(&self, idx: usize) -> bool {
            use super::idle::Claim;
            use super::reacting::note_io;

            let remote = &self.cores()[idx];
            let claim = |_| {
                remote.claimed.set();
                remote.notified.store(true, Ordering::Release);
            };
            if self.idle().claim(idx, claim) == Claim::Claimed {
                note_io(self);
                remote.parker.unpark();
                return true;
            }
            false
        }
    }
}

cfg_not_reactor! {
    impl Shared {
        /// Wakes one sleeping core if nobody is searching (see `idle`). The caller has fenced after
        /// making its work visible.
        pub(crate) fn notify_work(&self) {
            let cores = self.cores();
            let mark = |idx: usize| cores[idx].notified.store(true, Ordering::Release);
            if let Some(idx) = self.idle().notify_one(mark) {
                cores[idx].parker.unpark();
            }
        }
    }
}

/// Queues a runnable on its group's global queue and makes sure a worker will see it.
pub(crate) fn push_global(g: &Arc<GroupInner>, r: Runnable) {
    if let Err(r) = g.push(r) {
        // Closed: the runtime is shutting down and has drained (or is draining) the queue; the task
        // is being torn down, and whoever queues it drops it.
        drop(r);
        return;
    }
    announce(g);
}

/// Queues a task woken or spawned by a thread that holds no core of `g`'s runtime: in the lane if
/// it has waited before (it returned `Pending`) and the scheduler admits its group there
/// (`fair::lane`), else in its group's global queue. A new task never takes the lane: spawns
/// from outside come in batches, whose first task would otherwise take a different path from the
/// rest.
pub(crate) fn push_from_outside(g: &Arc<GroupInner>, r: Runnable) {
    let scheduler = g.host().scheduler();
    if !r.metadata().has_waited() || scheduler.lane_admits(g) == LaneEntry::Refused {
        push_global(g, r);
        return;
    }
    match scheduler.push_lane(g, r) {
        Ok(()) => {
            // Orders the push before the idle check, as `ListFlag::after_push` does for a group
            // queue.
            fence(Ordering::SeqCst);
            g.host().notify_work();
        }
        // Shutting down: the task is torn down here, as a push to a closed group queue is.
        Err(r) => drop(r),
    }
}

/// After pushing to `g.queue`: makes sure the group is listed and a worker will look (the pusher's
/// half of the listing and idle protocols).
pub(crate) fn announce(g: &Arc<GroupInner>) {
    announce_as(g, WaitFrom::Now);
}

/// [`announce`], with the group counting as waiting from `wait` if this push lists it.
fn announce_as(g: &Arc<GroupInner>, wait: WaitFrom) {
    // The fence inside `after_push` also orders the push before the idle check below.
    if g.after_push() == Listing::Insert {
        g.host().scheduler().list(g, wait);
    }
    g.host().notify_work();
}

/// Moves runnables to their groups' global queues, listing each group and notifying once per run
/// of same-group tasks. A group these pushes list waits from now.
pub(crate) fn spill(batch: impl IntoIterator<Item = Runnable>) {
    spill_as(batch, |_| WaitFrom::Now);
}

/// [`spill`], with each group these pushes list waiting from `wait(group)` (see `WaitFrom`).
pub(crate) fn spill_as(
    batch: impl IntoIterator<Item = Runnable>,
    wait: impl Fn(&GroupInner) -> WaitFrom,
) {
    let mut current: Option<Arc<GroupInner>> = None;
    for r in batch {
        let same = current
            .as_ref()
            .is_some_and(|g| ptr::eq(Arc::as_ptr(g), Arc::as_ptr(&r.metadata().group)));
        if !same {
            if let Some(g) = current.take() {
                announce_as(&g, wait(&g));
            }
            current = Some(r.metadata().group.clone());
        }
        if let Some(g) = &current {
            if let Err(r) = g.push(r) {
                drop(r);
            }
        }
    }
    if let Some(g) = current {
        announce_as(&g, wait(&g));
    }
}
