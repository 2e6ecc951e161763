//! The worker loop: takes the next task (`search`), runs it with the core lent to its poll
//! (`lease`), takes the core back afterwards, and parks when there is nothing to run (`park`).
//! It ends when the runtime shuts down, or when a poll handed the core to another thread or a
//! rescue claimed it. With the `io` feature, `reactor::run` runs the same steps as a future.

use std::sync::Arc;

use crate::group::{GroupInner, GroupScope};
use crate::task::Runnable;
use crate::task::TaskMeta;
use crate::task::coop::PollBudget;
use crate::task::future::{drop_payload, take_deferred_panic};
use crate::task::meta::{Owner, task_id};

use super::context;
use super::core::Core;
use super::handoff::reclaim_deferred;
use super::lease;
use super::publish::push_global;

cfg_not_reactor! {
    /// Runs `core` until the runtime shuts down (returns the core, for the caller to retire) or
    /// the core is handed to another thread during a poll (returns `None`).
    pub(crate) fn run(mut core: Box<Core>) -> Option<Box<Core>> {
        while !core.shared.is_shutdown() {
            match core.next_task() {
                Some(r) => {
                    core.found_work();
                    core = core.run_task(r)?;
                }
                None => core.park(),
            }
        }
        Some(core)
    }
}

impl Core {
    /// Runs one task. Returns the core, or `None` if the task's poll handed it to another thread.
    #[inline(always)]
    pub(crate) fn run_task(mut self: Box<Self>, r: Runnable) -> Option<Box<Self>> {
        let meta = r.metadata();
        let group = &meta.group;
        self.serve(group);
        let limited = group.limiter().is_some().then(|| group.clone());
        // The polled task's group when a rescue took the core during the poll (the segment that
        // would name it went with the core).
        let mut rescued_from: Option<Arc<GroupInner>> = None;
        // Cancelled, and the poll hooks' one test (see `task::hooks`): one load of the flags.
        let (cancelled, hooked) = meta.cancelled_and_extras();
        let core = {
            // Restored when they drop, even if the poll unwinds.
            let _group = GroupScope::enter(group);
            let _budget = PollBudget::start();
            lease::install(self);
            if cancelled {
                // Cancelled by marking (`abort`, `Group::cancel`): the future is dropped here, on
                // a worker, as a poll would end it. Its destructor is the task's own code and may
                // do what a poll does (`block_on`, `block_in_place`, spawn into its group, block
                // until rescued), so it runs with the core lent and the group current, as a poll.
                drop(r);
            } else if hooked {
                run_hooked(r);
            } else {
                r.run();
            }
            // A `block_in_place` in this poll handed the core over (so the lease is gone) and left
            // its reclaim for now: take the core back if no thread took it. Off the hot path.
            let taken = match lease::take_after_poll() {
                Err(false) if reclaim_deferred() => lease::take_after_poll(),
                taken => taken,
            };
            match taken {
                Ok(core) => Some(core),
                Err(claimed) => {
                    // A rescue took the core while the poll was stuck, counted the poll in the
                    // segment it ended and kept the poll's group for this thread (a hand-off counts
                    // its own in `reclaim`). The thread's current group is no use here: the task
                    // may have dropped its hold on the group in the poll, the group's last.
                    if claimed {
                        rescued_from = context::with_thread(|t| {
                            t.and_then(|t| t.shared.threads().take_stuck_group())
                        });
                    }
                    None
                }
            }
        };
        if let Some(p) = take_deferred_panic() {
            // An output's destructor panicked inside the task (detached, it dropped its own
            // output). The segment's group is the task's.
            let segment = core.as_ref().and_then(|c| c.service.group());
            if let Some(g) = segment.or(rescued_from.as_ref()) {
                g.report_panic(&*p, None);
            }
            drop_payload(p);
        }
        if let Some(g) = limited {
            if let Some(l) = g.limiter() {
                // In a pair, the slot may go to the other side's tasks: each to its own group.
                for next in l.release() {
                    let owner = next.metadata().group.clone();
                    push_global(&owner, next);
                }
            }
        }
        let mut core = core?;
        // Dropping a cancelled task's future is no poll of it.
        if !cancelled {
            core.service.polled();
            core.counts.polls += 1;
        }
        if core.service.tick() {
            if let Some(now) = core.service.read_clock(core.shared.config().quantum) {
                core.quantum_end(now);
            }
        }
        Some(core)
    }
}

/// Polls `r` between the runtime's `on_before_task_poll` and `on_after_task_poll` hooks, and
/// records the poll in the task dump if the runtime keeps one. Out of line and cold: only a
/// runtime with task hooks or the dump comes here.
#[cold]
#[inline(never)]
fn run_hooked(r: Runnable) {
    let Some(hooks) = r.metadata().group.task_hooks() else {
        // A named task, or another runtime of the process has hooks; this one has none.
        r.run();
        return;
    };
    let poll_hooks = hooks.before_poll.is_some() || hooks.after_poll.is_some();
    // The task dump's bookkeeping (`task::dump`): its table (held, since the poll may drop the
    // task's group, and the runtime with it), and the poll's ticket, taken before it.
    let id = task_id(r.metadata());
    let dump = hooks.dump.clone().map(|d| {
        let ticket = d.poll_started(id);
        (d, ticket)
    });
    if !poll_hooks {
        // Held across the poll, so the task's id cannot pass to a task spawned during it.
        let keep = r.waker();
        let woken = r.run();
        if let Some((d, ticket)) = dump {
            d.poll_ended(id, ticket, woken);
        }
        drop(keep);
        return;
    }
    let meta: *const TaskMeta = r.metadata();
    // A reference to the task, so its allocation, and the metadata in it, outlive the poll even
    // if the task completes and its handle is dropped during it.
    let keep = r.waker();
    // SAFETY: `r` holds the task until `run`, and `keep` from then on: async-task drops the
    // metadata only with the allocation, once no runnable, handle or waker refers to it.
    let meta = unsafe { &*meta };
    // The poll may end the future, and the name with it: the after-poll hook uses this copy.
    let name = meta.name();
    meta.run_hook_named(|h| h.before_poll.as_ref(), name.as_deref());
    let woken = r.run();
    meta.run_hook_named(|h| h.after_poll.as_ref(), name.as_deref());
    if let Some((d, ticket)) = dump {
        d.poll_ended(id, ticket, woken);
    }
    drop(keep);
}
