//! Shutdown's drain (step 5 of `Runtime`'s shutdown): dropping every runnable still queued, once
//! the cores retired. Setting the flag and waking the sleepers (steps 1 and 2) is
//! `Shared::begin_shutdown`; a retiring core's part is `Core::retire` (`handover`).

use super::shared::Shared;

/// What a pass of the drain found (`Shared::drain_once`).
#[must_use = "a pass that dropped runnables may have queued more: drain again"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Nothing was left to drop.
    Empty,
    /// Runnables were dropped: their destructors may have woken or spawned more.
    Dropped,
}

impl Shared {
    /// One pass of shutdown's drain: closes the timers, the lane and every group (a later push is
    /// dropped by its pusher), wakes every task still registered and every waker a timer held,
    /// then drops every runnable in the lane, the group queues, limiter lines and local queues, on
    /// this thread.
    pub(crate) fn drain_once(&self) -> Drained {
        // Timers hold their tasks' wakers; after this, arming fails and no timer holds a task.
        let timer_wakers = self.timers().close();
        let lane = self.scheduler().close_lane();
        let mut dropped = lane.len();
        drop(lane);
        for g in self.groups().snapshot() {
            dropped += g.drain_for_shutdown();
        }
        // Woken, not just dropped: a waiter outside this runtime (a `block_on` on another thread,
        // a task of another runtime) would otherwise wait for good; polled again, its timer says
        // the runtime shut down. This runtime's own tasks find their groups closed, and their
        // pushes drop them here, as any push after the close.
        for w in timer_wakers {
            w.wake();
        }
        for c in self.cores().iter() {
            // A core whose thread is stuck in a poll may still run: take from its queue as a
            // thief does.
            while let Some(r) = c.local.steal() {
                drop(r);
                dropped += 1;
            }
        }
        if dropped > 0 {
            Drained::Dropped
        } else {
            Drained::Empty
        }
    }
}
