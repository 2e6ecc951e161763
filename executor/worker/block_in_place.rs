//! `block_in_place`: running blocking code inside a task's poll without stalling the worker.
//!
//! On a runtime thread that polls a task, the thread's core (its LIFO task first moved to the
//! local queue, where idle workers may steal it) is handed to another thread with the hand-off
//! protocol of `threads`, exactly as a waiting nested `block_on` does; then the closure runs on
//! this thread, and afterwards the thread takes its core back if no thread took it yet. While the
//! core is away, the thread is marked blocked, so shutdown does not wait for it.
//!
//! - A second call in the same poll, after the core was taken by another thread, finds the lent
//!   slot empty and just runs its closure (nothing left to hand over). The same holds inside a
//!   waiting nested `block_on`, and on any thread that holds no core.
//! - If the runtime already runs its thread limit and no spare is idle, the core cannot be handed
//!   over; the closure then runs with the core kept, as a blocking call in a task would.
//! - Accounting: the task's group stays the current group throughout, and its metrics count the
//!   task as usual. The hand-off ends the core's service segment, so the time the closure runs is
//!   charged to no group (it is not worker time: the core serves other tasks meanwhile); after a
//!   reclaim, the rest of the poll is charged to the task's group again.

use super::block_on::HandedOff;
use super::context;

/// Runs `f` on this thread; see the module docs.
pub(crate) fn block_in_place<F: FnOnce() -> R, R>(f: F) -> R {
    let Some(core) = context::take() else {
        return f();
    };
    match HandedOff::hand_off(core) {
        Ok(handed) => {
            // Reclaims even if `f` panics: the panic unwinds into the task's poll, which catches it.
            let _reclaim = Reclaim(Some(handed));
            f()
        }
        Err(core) => {
            context::install(core);
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
