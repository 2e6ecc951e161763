//! A core leaving its thread: prepared for a hand-off to another thread (`threads`, step 3),
//! resumed when the hand-off is undone, claimed by a rescue in the middle of a poll (`monitor`),
//! searched for a task a nested `block_on` waits for (`block_on`, step 2), and retired at
//! shutdown.

use std::borrow::Cow;
use std::ptr;
use std::sync::Arc;

use crate::group::GroupInner;
use crate::shim::{Ordering, fence};
use crate::task::Runnable;
use crate::task::meta::task_id;

use super::core::Core;
use super::publish::push_global;
use super::threads::HandedCore;

impl HandedCore for Core {
    fn idx(&self) -> usize {
        self.idx
    }
    fn prepare(&mut self) {
        self.prepare_hand_off();
    }
    fn retire(self: Box<Self>) {
        Core::retire(*self);
    }
}

impl Core {
    /// Takes the task `id` out of this core's LIFO slot or local queue if it sits there and has
    /// never been polled (for a nested `block_on` that awaits it: see `block_on`).
    pub(crate) fn take_unstarted(&mut self, id: usize) -> Option<Runnable> {
        let unstarted = |r: &Runnable| task_id(r.metadata()) == id && !r.metadata().has_waited();
        if self.lifo.as_ref().is_some_and(unstarted) {
            return self.lifo.take();
        }
        let mut found = None;
        for _ in 0..self.remote().local.len() {
            let Some(r) = self.pop_local() else {
                break;
            };
            if found.is_none() && unstarted(&r) {
                found = Some(r);
            } else if let Err(r) = self.try_push_local(r) {
                // Cannot happen (we popped first); never lose a task.
                let g = r.metadata().group.clone();
                push_global(&g, r);
            }
        }
        found
    }

    /// Prepares the core to be run by another thread: ends the segment (the time this thread
    /// spends waiting is nobody's service) and moves the LIFO task to the local queue, where idle
    /// workers can steal it while the core waits for its new thread.
    pub(crate) fn prepare_hand_off(&mut self) {
        self.end_segment(crate::clock::stamp());
        if let Some(r) = self.lifo.take() {
            self.push_local(r);
        }
        self.lifo_streak = 0;
        // Extras are reachable only through the core: back to their groups, where any worker can
        // take them while the core waits for its thread.
        self.return_extras();
        fence(Ordering::SeqCst);
        self.shared.notify_work();
    }

    /// After a hand-off is undone (`HandedOff::reclaim`): the rest of the poll is served to the
    /// polled task's group `group` (kept by the hand-off), if it is one of this runtime's.
    pub(crate) fn resume_segment(&mut self, group: Option<Arc<GroupInner>>) {
        let host = Arc::as_ptr(&self.shared);
        if let Some(g) = group.filter(|g| ptr::eq(g.host_addr(), host)) {
            self.begin_segment(Cow::Owned(g), crate::clock::stamp());
        }
    }

    /// A rescue claimed this core during a poll that has not returned: counts that poll, for this
    /// core and in the segment (its group's), and returns the segment's group for the stuck
    /// thread. The thread that takes the core over ends the stuck poll's quantum first
    /// (`resume_rescued`).
    pub(crate) fn claimed_in_poll(&mut self) -> Option<Arc<GroupInner>> {
        self.counts.polls += 1;
        self.service.polled();
        let group = self.service.group().cloned();
        self.rescued_from = group.clone();
        self.global_due = true;
        group
    }

    /// Shutdown: empties what only this core can reach into the tasks' group queues, where step 5
    /// of the shutdown drops them. Not dropped here: a future's destructor may wait for a timer
    /// (`block_on` of a sleep), which only fires, or fails, once step 5 has closed the timers, and
    /// step 5 waits for this core to retire. A drop here (a group already closed) may wake
    /// another task into this core's LIFO slot or queue (this thread has no core in its cell, so
    /// such wakes go to the global queues; the loop is a safeguard), so repeat until all are
    /// empty.
    pub(crate) fn retire(mut self) {
        self.first_park_reached();
        self.end_segment(crate::clock::stamp());
        // Nothing is charged any more; the service still goes to the groups' metrics.
        self.service.settle();
        self.publish_counts();
        loop {
            let mut moved = false;
            while let Some(r) = self.lifo.take() {
                leave_for_drain(r);
                moved = true;
            }
            while let Some(r) = self.pop_local() {
                leave_for_drain(r);
                moved = true;
            }
            while let Some(r) = self.extras.pop_front() {
                leave_for_drain(r);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }
}

/// Shutdown: queues a retiring core's runnable in its group's queue for step 5 to drop; if that
/// queue is closed already (step 5 has begun, after a timeout), drops it here.
fn leave_for_drain(r: Runnable) {
    let group = r.metadata().group.clone();
    if let Err(r) = group.push(r) {
        drop(r);
    }
}
