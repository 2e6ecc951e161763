//! The configuration a runtime runs with: its validated settings ([`Config`]), the hooks its
//! threads run ([`ThreadHook`]), and the name of its blocking pool's type ([`BlockingBinding`]).

use std::sync::Arc;
use std::time::Duration;

use crate::group::PanicHook;
use crate::task::hooks::TaskHooks;

/// Names the blocking pool's type, so that `Shared` owns the pool without this layer importing
/// it: workers never use the pool, only the runtime layer does, which implements this once, for
/// [`Blocking`].
pub(crate) trait BlockingBinding {
    type Pool: Send + Sync;
}

/// The carrier of [`BlockingBinding`].
pub(crate) struct Blocking;

/// The blocking pool's type.
pub(crate) type PoolOf = <Blocking as BlockingBinding>::Pool;

/// The validated settings a runtime runs with.
pub(crate) struct Config {
    /// The cores that run at first, and at least (`Builder::worker_threads`).
    pub(crate) workers: usize,
    /// All the cores, the most that run at once (`Builder::max_worker_threads`, at least
    /// `workers`): the controller (`controller`) activates the cores beyond `workers`.
    pub(crate) max_workers: usize,
    /// The CPUs the process may use (`cpus`), read at build; the controller (`controller`,
    /// step 5) may shed active cores down to the smaller of this and `workers`, so a runtime with
    /// more workers than CPUs runs a controller even with `max_workers == workers`.
    pub(crate) cpus: usize,
    pub(crate) thread_name: String,
    pub(crate) quantum: Duration,
    pub(crate) on_task_panic: Option<PanicHook>,
    /// Most threads the runtime may run at once: its workers plus the threads that hand-offs
    /// (a nested `block_on`) start.
    pub(crate) max_threads: usize,
    /// How long a spare thread waits for a core before it exits.
    pub(crate) spare_keep_alive: Duration,
    pub(crate) on_thread_start: Option<ThreadHook>,
    pub(crate) on_thread_stop: Option<ThreadHook>,
    pub(crate) thread_stack_size: Option<usize>,
    /// How long one poll may hold a core while work waits before the monitor rescues the core.
    pub(crate) stall_threshold: Duration,
    /// Most rescued threads (stuck in a poll, their core taken over) at once.
    pub(crate) max_rescue_threads: usize,
    /// The task hooks; `None` when none is set (see `task::hooks` for what a task pays).
    pub(crate) task_hooks: Option<Box<TaskHooks>>,
    /// The runtime's id, unique in the process.
    pub(crate) runtime_id: u64,
    /// The name given to `Builder::name`.
    pub(crate) runtime_name: Option<String>,
}

/// A hook runtime threads run when they start or stop.
pub(crate) type ThreadHook = Arc<dyn Fn() + Send + Sync + 'static>;

/// Runs a user hook; its panic is caught, so it cannot take the thread down.
pub(crate) fn run_hook(hook: Option<&ThreadHook>) {
    if let Some(h) = hook {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h())) {
            crate::task::future::drop_payload(p);
        }
    }
}
