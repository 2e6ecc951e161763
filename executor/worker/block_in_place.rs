//! `block_in_place`: running blocking code inside a task's poll without stalling the worker.
//!
//! On a runtime thread that polls a task, the thread's core (its LIFO task first moved to the
//! local queue, where idle workers may steal it) is handed to another thread with the hand-off
//! protocol of `threads`, exactly as a waiting nested `block_on` does; then the closure runs on
//! this thread. The thread takes its core back when the task's poll returns
//! (`handoff::reclaim_deferred`, called by the worker loop when it finds the poll's lease gone),
//! if no thread took it meanwhile; otherwise it becomes a spare. While the core is away, the thread is marked
//! blocked, so shutdown does not wait for it.
//!
//! - The reclaim waits for the end of the poll, not of the closure, so that more calls in the
//!   same poll are free: they find no core to hand over and just run their closures. The rest of
//!   the poll runs without a core, so the tasks it wakes or spawns go to their groups' global
//!   queues instead of this worker's LIFO slot. The same holds inside a waiting nested
//!   `block_on`, and on any thread that holds no core.
//! - If the runtime already runs its thread limit and no spare is idle, the core cannot be handed
//!   over; the closure then runs with the core kept, as a blocking call in a task would.
//! - Accounting: the task's group stays the current group throughout, and its metrics count the
//!   task as usual. The hand-off ends the core's service segment, so the time from the hand-off to
//!   the end of the poll is charged to no group (it is not worker time: the core serves other
//!   tasks meanwhile).

use super::handoff::{HandedOff, defer};
use super::lease;
use super::runner::hand_off;

/// Runs `f` on this thread; see the module docs.
pub(crate) fn block_in_place<F: FnOnce() -> R, R>(f: F) -> R {
    let Some(core) = lease::take() else {
        return f();
    };
    match hand_off(core) {
        Ok(handed) => {
            let handed = defer(handed);
            // Thread teardown, where the cell is gone: take the core back after `f` (even if `f`
            // panics; the panic unwinds into the task's poll, which catches it).
            let _reclaim = Reclaim(handed);
            f()
        }
        Err(core) => {
            lease::install(core);
            f()
        }
    }
}

struct Reclaim(Option<HandedOff>);

impl Drop for Reclaim {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.reclaim();
        }
    }
}
