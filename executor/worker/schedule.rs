//! The schedule function of every task: where a woken or new task goes.
//!
//! - A task of a group with `max_concurrency` goes through the group's limiter, then its global
//!   queue (never the LIFO slot, so a strand runs in FIFO order).
//! - A task woken or spawned by a task this thread polls, on a core of the same runtime that
//!   serves the same group: a yield (woken while running) to the back of the local queue (pushed
//!   without an access to the lent core: the queue is shared), anything else to the LIFO slot.
//! - A task of another group, woken or spawned the same way: to the LIFO slot as well if the
//!   scheduler says that group may run beside the served one (it is not ahead of it by more than
//!   a quantum: `Scheduler::may_run_beside`), so a message between groups is handled on the core
//!   that sent it, with its time charged to the receiver's group; otherwise as below.
//! - A task of a group that is ahead of the served one: the group's global queue, which lists the
//!   group and wakes a sleeping worker if nobody searches.
//! - Anywhere else (a thread that holds no core of the runtime: the I/O reactor's, a channel's
//!   sender, a `block_on` caller, a thread-local destructor, shutdown): a task that has waited
//!   before goes to the scheduler's lane if its group was idle at the floor (`fair::lane`); a new
//!   task, and any other, to the group's global queue as above.

use std::ptr;
use std::sync::Arc;

use async_task::ScheduleInfo;

use crate::group::limiter::Admit;
use crate::shim::Ordering;
use crate::task::Runnable;

use super::context;
use super::shared::{push_from_outside, push_global};

/// See the module docs. The yield's path is kept apart from the rest, so that it pays for no more
/// than it uses (the rest needs a larger stack frame).
pub(crate) fn schedule(r: Runnable, info: ScheduleInfo) {
    if info.woken_while_running && r.metadata().group.limiter.is_none() {
        if let Some(remote) = context::lent_remote() {
            let g = &r.metadata().group;
            // SAFETY: `r` holds its group, which holds its host.
            let shared = unsafe { &*g.host_addr() };
            // A yield needs only the core's local queue, which any thread may push to: no access
            // to the lent core. The core serves the group (so the queue keeps only the served
            // group's tasks) and belongs to the group's runtime.
            if ptr::eq(remote.serving.load(Ordering::Relaxed), Arc::as_ptr(g))
                && shared.owns(remote)
            {
                shared.push_local(remote, r);
                return;
            }
        }
    }
    schedule_elsewhere(r, info.woken_while_running);
}

/// Where a new task goes: `schedule` for a task not woken while running, without the detour
/// through the task's schedule function.
pub(crate) fn schedule_new(r: Runnable) {
    schedule_elsewhere(r, false);
}

/// Everything but a yield to the local queue (see the module docs).
#[inline(never)]
fn schedule_elsewhere(r: Runnable, woken_while_running: bool) {
    if r.metadata().group.limiter.is_some() {
        let g = r.metadata().group.clone();
        let Some(limiter) = &g.limiter else { return };
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
    let routed = context::with_core(|core| match core {
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
        Err(r) => {
            let g = r.metadata().group.clone();
            push_from_outside(&g, r);
        }
    }
}
