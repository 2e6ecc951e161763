//! The runtime's part of the hand-off protocol (`threads`): handing a core to a spare or a new
//! thread (steps 2 and 3), the rescue's claim of a core stuck in a poll, starting a runtime thread,
//! and the body every runtime thread runs (steps 4 and 7).

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::group::{GroupInner, with_current};
use crate::shim::{AtomicBool, Mutex, Ordering, lock};

use super::config::run_hook;
use super::context::{ThreadCtx, ThreadGuard};
use super::core::Core;
use super::handoff::{HandedOff, set_blocked};
use super::shared::Shared;
use super::threads::{Placed, Threads};

cfg_reactor! {
    use super::reactor::run;
}
cfg_not_reactor! {
    use super::run::run;
}

/// Steps 2 and 3 of the hand-off protocol, in the middle of a poll: marks this thread blocked and
/// gives `core` to a spare thread or a new one. Gives it back, unmarked, if no thread can take it
/// (no spare is idle and the runtime already runs `Config::max_threads` threads: see
/// [`Threads::offer`]).
pub(crate) fn hand_off(core: Box<Core>) -> Result<HandedOff, Box<Core>> {
    let idx = core.idx;
    let shared = core.shared.clone();
    // During the poll: the pointer is valid, and the clone keeps the group for the reclaim.
    let group = with_current(|g| g.cloned());
    let blocked = set_blocked(true);
    let default_group = core.default_group.clone();
    let threads = shared.threads();
    match threads.offer(core, shared.config().max_threads, || shared.is_shutdown()) {
        Ok(placed) => {
            shared.count_hand_off();
            start_if_needed(placed, &shared, &default_group);
            Ok(HandedOff::new(idx, shared, blocked, group))
        }
        Err(core) => {
            set_blocked(false);
            Err(core)
        }
    }
}

/// The stall monitor's rescue (see `threads`, *Rescue*).
impl Threads<Core> {
    /// Claims core `idx`, observed lent under `observed` with work waiting, unless the runtime
    /// shuts down, the rescued threads already number `max_rescue_threads` or no thread could
    /// take it ([`Threads::claim_for_rescue`]); then gives it to a spare thread or a new one. True
    /// if it was claimed.
    pub(crate) fn rescue(&self, shared: &Shared, idx: usize, observed: u64) -> bool {
        let config = shared.config();
        let claimed = self.claim_for_rescue(
            idx,
            config.max_rescue_threads,
            config.max_threads,
            || shared.is_shutdown(),
            || shared.cores()[idx].lent.claim(observed),
            |core| core.claimed_in_poll(),
        );
        let Some(core) = claimed else {
            return false;
        };
        self.adopt(core);
        true
    }

    /// Steps 3 and 4 for a core this thread owns and no thread runs: prepares it and gives it to a
    /// spare thread or a new one.
    fn adopt(&self, core: Box<Core>) {
        let shared = core.shared.clone();
        let default_group = core.default_group.clone();
        let placed = self.place(core, || shared.is_shutdown());
        start_if_needed(placed, &shared, &default_group);
    }
}

/// Starts a spare thread for a core just placed, if no idle spare was woken for it. A failure
/// leaves the core waiting: a spare takes it when one frees up, and its local queue is stealable
/// meanwhile.
fn start_if_needed(placed: Placed, shared: &Arc<Shared>, default_group: &Arc<GroupInner>) {
    if placed == Placed::StartThread {
        let _ = spawn_thread(shared, default_group, None, true);
    }
}

/// Starts a runtime thread, running `first` (or waiting for a core as a spare). `reserved`: the
/// thread was reserved by a hand-off or rescue, and the reservation is released here.
#[allow(clippy::type_complexity)]
pub(super) fn spawn_thread(
    shared: &Arc<Shared>,
    default_group: &Arc<GroupInner>,
    first: Option<Box<Core>>,
    reserved: bool,
) -> Result<(), (Option<Box<Core>>, std::io::Error)> {
    let blocked = Arc::new(AtomicBool::new(false));
    let first_idx = first.as_ref().map(|c| c.idx);
    // The core travels through a shared slot so that it comes back if the thread cannot start.
    let slot = Arc::new(Mutex::new(first));
    let (s, g, b, sl) = (
        shared.clone(),
        default_group.clone(),
        blocked.clone(),
        slot.clone(),
    );
    let config = shared.config();
    let workers = shared.cores().len();
    let started = shared
        .threads()
        .start_thread(first_idx, workers, reserved, blocked, |index| {
            let mut builder =
                thread::Builder::new().name(format!("{}-{index}", config.thread_name));
            if let Some(n) = config.thread_stack_size {
                builder = builder.stack_size(n);
            }
            builder.spawn(move || {
                let first = lock(&sl).take();
                drop(sl);
                thread_main(s, g, b, first);
            })
        });
    started.map_err(|e| (lock(&slot).take(), e))
}

/// The body of every runtime thread: run a core until it is handed away or the runtime shuts down,
/// then wait as a spare for another.
fn thread_main(
    shared: Arc<Shared>,
    default_group: Arc<GroupInner>,
    blocked: Arc<AtomicBool>,
    first: Option<Box<Core>>,
) {
    let _thread = ThreadGuard::enter(ThreadCtx {
        shared: shared.clone(),
        default_group,
        blocked: blocked.clone(),
    });
    let config = shared.config();
    let threads = shared.threads();
    // The thread's span for its whole life (feature `tracing`): its runtime's id, its name.
    trace_span!(
        DEBUG,
        "runtime.worker",
        runtime.id = config.runtime_id,
        thread = thread::current().name()
    );
    run_hook(config.on_thread_start.as_ref());
    let tid = super::os_thread::current_tid();
    // A thread started without a core was counted on its way by `place` (`Placed::StartThread`).
    let mut coming = first.is_none();
    let mut next = first;
    loop {
        let core = match next.take() {
            Some(c) => c,
            None => match threads.wait_for_core(
                || shared.is_shutdown(),
                config.spare_keep_alive,
                Instant::now,
                std::mem::take(&mut coming),
            ) {
                Some(c) => c,
                None => break,
            },
        };
        threads.running(core.idx);
        shared.cores()[core.idx].tid.store(tid, Ordering::Relaxed);
        match run(core) {
            Some(core) => threads.retire(core),
            // The core was handed away or rescued during a poll that has now returned: back in
            // runtime code.
            None => {
                if !threads.core_lost(&blocked) {
                    break;
                }
                coming = true;
            }
        }
    }
    run_hook(config.on_thread_stop.as_ref());
    threads.exited();
}
