//! The schedule function of every task (`Shared`'s part as the groups' `Host`): where a woken or
//! new task goes.
//!
//! - A task of a group with `max_concurrency` goes through the group's limiter, then its global
//!   queue (never the LIFO slot, so a strand runs in FIFO order).
//! - A task woken or spawned by a task this thread polls, on a core of the same runtime that
//!   serves the same group: a yield (woken while running) to the back of the local queue, anything
//!   else to the LIFO slot. Both go through an access to the lent core (`lease::with_core`):
//!   only the core's holder pushes to its local queue.
//! - A task of another group, woken or spawned the same way: to the LIFO slot as well if the
//!   scheduler says that group may run beside the served one (it is not ahead of it by more than
//!   a quantum: `Scheduler::may_run_beside`), so a message between groups is handled on the core
//!   that sent it, with its time charged to the receiver's group; otherwise as below.
//! - A task of a group that is ahead of the served one: the group's global queue, which lists the
//!   group and wakes a sleeping worker if nobody searches.
//! - Woken by the reactor's dispatch on the thread of a keeper waiting there (feature `io`): a task
//!   that the lane would admit (it has waited before, its group was idle at the floor:
//!   `Scheduler::lane_admits`, which takes the group's lane flag) is kept for that keeper, which
//!   runs it next, from its LIFO slot (the first) or its local queue (see `reactor`, *Where
//!   readiness wakes go*); no other core is woken for it.
//! - Anywhere else (a thread that holds no core of the runtime: async-io's fallback thread, a
//!   channel's sender, a `block_on` caller, a thread-local destructor, shutdown), and a reactor
//!   wake of a group that is not due: a task that has waited before goes to the scheduler's lane
//!   if its group was idle at the floor (`fair::lane`); a new task, and any other, to the group's
//!   global queue as above.

use std::ptr;
use std::sync::Arc;

use async_task::ScheduleInfo;

use crate::group::limiter::Admit;
use crate::group::list::GroupList;
use crate::group::{GroupInner, Host, PanicHook};
use crate::task::Runnable;
use crate::task::hooks::TaskHooks;

use super::lease;
use super::publish::{push_from_outside, push_global};
use super::shared::Shared;

/// `Shared` hosts the groups: their tasks are scheduled here.
impl Host for Shared {
    #[inline]
    fn schedule(r: Runnable, info: ScheduleInfo) {
        schedule(r, info);
    }

    #[inline]
    fn schedule_new(r: Runnable) {
        schedule_new(r);
    }

    #[inline]
    fn is_shutdown(&self) -> bool {
        Shared::is_shutdown(self)
    }

    fn groups(&self) -> &GroupList<GroupInner> {
        Shared::groups(self)
    }

    fn panic_hook(&self) -> Option<&PanicHook> {
        self.config().on_task_panic.as_ref()
    }

    #[inline]
    fn task_hooks(&self) -> Option<&TaskHooks> {
        self.config().task_hooks.as_deref()
    }

    fn locally_queued(&self, g: &GroupInner) -> usize {
        Shared::locally_queued(self, g)
    }

    fn attach_child(&self, parent: &Arc<GroupInner>, child: &Arc<GroupInner>) {
        self.scheduler().attach_child(parent, child);
    }

    fn set_cpu_quota(&self, g: &Arc<GroupInner>, quota: u64) {
        let scheduler = self.scheduler();
        scheduler.make_root(g);
        scheduler.set_cap(g, quota);
        // A group the old cap held back may return now: a worker must look.
        if scheduler.unthrottle_due(crate::clock::stamp()) {
            self.notify_work();
        }
    }
}

/// See the module docs.
pub(crate) fn schedule(r: Runnable, info: ScheduleInfo) {
    route(r, info.woken_while_running);
}

/// Where a new task goes: `schedule` for a task not woken while running, without the detour
/// through the task's schedule function.
pub(crate) fn schedule_new(r: Runnable) {
    route(r, false);
}

/// See the module docs. One function for both entries, with the access to the lent core inlined
/// into it: the entries above jump here without a frame of their own.
#[inline(never)]
fn route(r: Runnable, woken_while_running: bool) {
    if r.metadata().group.limiter().is_some() {
        let g = r.metadata().group.clone();
        let Some(limiter) = g.limiter() else { return };
        match limiter.admit(r) {
            Admit::Run(r) => push_global(&g, r),
            Admit::Queued => {}
            // Shutting down: the task is torn down here, on the thread that woke it.
            Admit::Closed(r) => drop(r),
        }
        return;
    }
    let g = &r.metadata().group;
    let gptr = Arc::as_ptr(g);
    let host = g.host_addr();
    let routed = lease::with_core(|core| match core {
        Some(core) if ptr::eq(Arc::as_ptr(&core.shared), host) => {
            if core.service.serves(gptr) {
                core.schedule_local(r, woken_while_running);
                Ok(None)
            } else {
                Ok(core.schedule_beside(r))
            }
        }
        _ => Err(r),
    });
    match routed {
        Ok(None) => {}
        Ok(Some(r)) => {
            let g = r.metadata().group.clone();
            push_global(&g, r);
        }
        Err(r) => from_outside(r),
    }
}

cfg_reactor! {
    /// A task woken or spawned on a thread that polls no task with a core of its runtime. On
    /// the thread of a keeper waiting in the reactor (its dispatch woke the task), a task that
    /// waited before, of a group a pick would choose first, is kept for that keeper to run itself
    /// (see `reactor`, *Where readiness wakes go*); the first kept wakes the keeper. Any other
    /// task takes [`push_from_outside`].
    #[inline(never)]
    fn from_outside(r: Runnable) {
        use crate::group::listed::LaneEntry;

        use super::reacting::{keep_dispatched, reacting_core};

        let g = r.metadata().group.clone();
        // A new task (a spawn from outside) is neither kept nor admitted to the lane: straight to
        // its group's queue, before any thread-local is read.
        if !r.metadata().has_waited() {
            return push_global(&g, r);
        }
        let shared = g.host();
        let Some(idx) = reacting_core(shared) else {
            return push_from_outside(&g, r);
        };
        if shared.scheduler().lane_admits(&g) == LaneEntry::Refused {
            return push_from_outside(&g, r);
        }
        // The group's lane flag, now held, stays set until the keeper takes the task, so a
        // second wake of the group in this pass goes through its queue, as with the lane.
        match keep_dispatched(r) {
            Ok(first) => {
                if first {
                    shared.claim_keeper(idx);
                }
            }
            Err(r) => {
                g.lane_flag().leave();
                push_global(&g, r);
            }
        }
    }
}

cfg_not_reactor! {
    /// A task woken or spawned on a thread that polls no task with a core of its runtime.
    #[inline(never)]
    fn from_outside(r: Runnable) {
        let g = r.metadata().group.clone();
        push_from_outside(&g, r);
    }
}
