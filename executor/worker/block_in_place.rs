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
//!   task as usual. The hand-off ends the core's service segment (the core serves other tasks
//!   meanwhile), so the section is charged on its own: the thread's CPU time over the closure
//!   (`fair::segment::thread_cpu_ns`, read before and after it) goes to the group's virtual
//!   runtime and its metrics' `busy`, as a blocking closure's does. So is a section that runs
//!   without a core to hand over (a later call in the same poll, a thread outside the workers),
//!   if a group is current. A section that keeps its core (nobody to hand it to) is inside the
//!   open segment, which charges it; a section nested in another, or in a blocking closure, is
//!   charged by the enclosing one (`fair::segment::is_metered`). The rest of the poll after the
//!   hand-off, outside the closure, is charged to no group.

use std::sync::Arc;

use crate::fair::scheduler::Charge;
use crate::fair::segment::{is_metered, set_metered, thread_cpu_ns};
use crate::group::{GroupInner, with_current};

use super::handoff::{HandedOff, defer};
use super::lease;
use super::runner::hand_off;

/// Runs `f` on this thread; see the module docs.
pub(crate) fn block_in_place<F: FnOnce() -> R, R>(f: F) -> R {
    let Some(core) = lease::take() else {
        let _charge = Section::start();
        return f();
    };
    match hand_off(core) {
        Ok(handed) => {
            let handed = defer(handed);
            // Thread teardown, where the cell is gone: take the core back after `f` (even if `f`
            // panics; the panic unwinds into the task's poll, which catches it).
            let _reclaim = Reclaim(handed);
            // Dropped before the reclaim: the section ends with the closure.
            let _charge = Section::start();
            f()
        }
        Err(core) => {
            lease::install(core);
            f()
        }
    }
}

/// A section whose CPU time is charged to the current group when it ends (even by unwinding);
/// see the module docs.
struct Section(Option<(Arc<GroupInner>, u64)>);

impl Section {
    fn start() -> Section {
        if is_metered() {
            return Section(None);
        }
        let Some(group) = with_current(|g| g.cloned()) else {
            return Section(None);
        };
        let Some(cpu) = thread_cpu_ns() else {
            return Section(None);
        };
        set_metered(true);
        Section(Some((group, cpu)))
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        let Some((group, start)) = self.0.take() else {
            return;
        };
        set_metered(false);
        let ns = thread_cpu_ns().map_or(0, |now| now.saturating_sub(start));
        if ns == 0 {
            return;
        }
        let charge = Charge {
            group,
            ns,
            polls: 0,
        };
        charge.group.host().scheduler().charge(&charge);
        charge.group.record_service(0, ns);
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
