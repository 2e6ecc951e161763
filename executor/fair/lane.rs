//! The lane: a shared FIFO of tasks woken from outside the workers whose groups were idle and at
//! the scheduler's floor.
//!
//! # Why
//! A task woken by a thread that holds no core (the I/O reactor's, a channel's sender, a
//! `block_on` caller) goes to its group's global queue. When its group was idle, that push lists
//! the group: the group goes through the scheduler's inbox into the rotation, and a worker picks
//! it there and takes it out again, a scheduler visit per group. With a group per connection, each
//! woken once per request, that is a visit per request. Yet such a group is the one a pick would
//! choose first: it enters the rotation at the floor, and the floor is at most every other active
//! group's virtual runtime.
//!
//! So a woken task (one that returned `Pending` before) of an idle group that a pick would choose
//! first goes to the lane instead (`Scheduler::lane_admits`): the group is at most an eighth of a
//! quantum of its own service ahead of the rotation's first group (a group waiting in the rotation
//! is passed over only by groups about as far along as it is), and it is within one quantum of its
//! own service (`quantum / weight`) of the floor. Workers take the lane's tasks
//! before they visit the scheduler. Such a task runs in a segment charged to its own group like
//! any other, so what it runs there counts against its share as if a pick had chosen it. A worker
//! whose quantum ends while a task waits in the lane switches for it, as for a listed group behind
//! the one it serves (`Core::quantum_end`); the quantum bound caps what that switch can cost the
//! served group, as for a task run beside another group (`Scheduler::may_run_beside`). A group
//! listed a moment ago still waits in the inbox, where the lane does not see it, until the next
//! scheduler visit (a pick, a quantum end, or a worker charging a full list of charges while the
//! inbox is not empty). A worker takes
//! its share of the lane at once (the oldest task, and up to `LANE_BATCH` more if that many per
//! worker wait), keeping the rest in its extras: each pop meets the pushers at the lane's ends,
//! and a batch makes fewer of those meetings.
//!
//! # Bounds
//! - A group has at most one task in the lane (its `LaneFlag`): a group woken many times while
//!   its task waits goes through its global queue and the rotation, so a flood of one group never
//!   fills the lane ahead of other groups. A task the lane admits that was woken by the reactor's
//!   dispatch on a keeper's thread does not enter the lane: that keeper runs it
//!   (`worker::reactor`), and the group's flag stays set until the keeper takes it, with the
//!   same effect.
//! - A group that is listed (its global queue holds tasks) never uses the lane, so its tasks stay
//!   in its queue's order.
//! - A group with `max_concurrency` never uses it (its tasks go through its limiter).
//! - New tasks never use it: spawns from outside come in batches (a job's tasks, a request's
//!   subtasks), and a batch whose first task took the lane and the rest the group's queue would
//!   pay for both paths.
//!
//! # Protocol
//! The pusher sets the group's flag (`LaneFlag::enter`), pushes, fences and notifies a worker, as
//! a push to a group queue does; a worker about to park re-checks the lane after registering as a
//! sleeper (`Shared::has_visible_work`). A worker clears the flag when it takes the task, before it
//! runs it. Shutdown closes the lane: a push after that gives the task back to its pusher, which
//! drops it, as a closed group queue does. loom models (`loom_models/runtime.rs`):
//! `lane_loses_no_task_and_keeps_one_per_group`, `closing_the_lane_races_a_push`,
//! `a_push_into_the_lane_reaches_a_parking_worker`.

use concurrent_queue::ConcurrentQueue;

use crate::group::listed::LaneFlag;

/// See the module docs. Each task travels with the clock stamp of its push, so the time its group
/// waited counts in the group's metrics.
pub(crate) struct Lane<T> {
    queue: ConcurrentQueue<(T, u64)>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Lane {
            queue: ConcurrentQueue::unbounded(),
        }
    }
}

impl<T> Lane<T> {
    /// Pushes `item` of the group whose flag is `flag`, which the caller set with
    /// [`LaneFlag::enter`]. Gives the item back (and clears the flag) if the lane is closed.
    pub(crate) fn push(&self, flag: &LaneFlag, item: T, stamp: u64) -> Result<(), T> {
        self.queue.push((item, stamp)).map_err(|e| {
            flag.leave();
            e.into_inner().0
        })
    }

    /// Takes the oldest task and clears its group's flag (`flag_of`), so the group's next wake may
    /// use the lane again.
    pub(crate) fn pop(&self, flag_of: impl FnOnce(&T) -> &LaneFlag) -> Option<(T, u64)> {
        let (item, stamp) = self.queue.pop().ok()?;
        flag_of(&item).leave();
        Some((item, stamp))
    }

    /// True if no task waits (a snapshot).
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Tasks waiting (a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Refuses every later push (shutdown).
    pub(crate) fn close(&self) {
        self.queue.close();
    }
}
