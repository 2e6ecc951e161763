//! A runtime's threads from start to shutdown: starting a thread per core and the stall monitor,
//! and at shutdown stopping the monitor (the rest of shutdown's waits are `Threads`' own).

use std::sync::Arc;
use std::thread;

use crate::group::GroupInner;

use super::core::Core;
use super::monitor;
use super::runner::spawn_thread;
use super::shared::Shared;
use super::threads::Threads;

/// What only the runtime's cores do: start their threads, and stop the monitor.
impl Threads<Core> {
    /// Starts the runtime's first threads, one per core, then the stall monitor.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        default_group: &Arc<GroupInner>,
    ) -> Result<(), String> {
        let n = shared.cores().len();
        shared.threads().open(n);
        for idx in 0..n {
            let core = Box::new(Core::new(idx, shared.clone(), default_group.clone()));
            if let Err((core, e)) = spawn_thread(shared, default_group, Some(core), false) {
                // The caller shuts the runtime down; this core never ran.
                if let Some(core) = core {
                    shared.threads().retire(core);
                }
                // The cores after this one were never created.
                for _ in idx + 1..n {
                    shared.threads().count_retired();
                }
                return Err(match shared.config().thread_stack_size {
                    // The setting is within its bounds, but the system may still refuse (or have
                    // no room for) stacks that large: say which setting to change.
                    Some(size) => format!(
                        "could not start worker thread {idx} of {n} with a stack of {size} bytes \
                         (thread_stack_size; a smaller one may start): {e}"
                    ),
                    None => format!("could not start worker thread {idx} of {n}: {e}"),
                });
            }
        }
        let monitor = monitor::start(shared)
            .map_err(|e| format!("could not start the stall monitor thread: {e}"))?;
        shared.threads().set_monitor(monitor);
        // A thread just started may not run for milliseconds on a loaded machine (the scheduler
        // puts a new thread behind the threads that were runnable before it). Returning only once
        // every worker came to its first park makes a new runtime's workers idle from the start:
        // its metrics count a park for each, and its first tasks do not wait for a thread that
        // has not run yet.
        shared.threads().wait_for_first_parks();
        Ok(())
    }

    /// Shutdown: stops the stall monitor and waits for its thread (it runs no user code), then
    /// retires any core it claimed meanwhile.
    pub(crate) fn stop_monitor(&self, shared: &Shared) {
        shared.monitor().stop(shared.idle());
        let handle = self.take_monitor();
        if let Some(h) = handle {
            if h.thread().id() != thread::current().id() {
                let _ = h.join();
            }
        }
        self.retire_waiting();
    }
}
