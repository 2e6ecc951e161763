//! `Runtime` and `Handle`: starting, entering and shutting down a runtime (the top layer).
//!
//! - `builder`: `Builder` and `BuildError`; `context`: which runtime is current, `EnterGuard`.
//!
//! # Shutdown protocol
//! Dropping a `Runtime` (or calling [`Runtime::shutdown_timeout`]) runs these steps, in order:
//!
//! 1. Set the `shutdown` flag (SeqCst). From now on no worker starts a new poll, every registry
//!    refuses new tasks (spawns return handles that resolve cancelled), and a group created from
//!    now on is born closed. Close the blocking pool: blocking closures no pool thread has taken
//!    yet are dropped unrun (their handles resolve cancelled), later ones are refused, and idle
//!    pool threads exit.
//! 2. Wake every parked core and every spare thread. Each checks the flag under its parker's (or
//!    the spares') lock before it waits, so none can miss it.
//! 3. Close every group's registry and wake every unfinished task, outside any lock. Woken tasks
//!    land in their group's global queue.
//! 4. Wait for every core to retire, at most the timeout (forever for `Drop`). A core retires on
//!    the thread that runs it, which moves the runnables of its LIFO slot, local queue and extras
//!    (only it can reach its LIFO slot) to their groups' queues for step 5 to drop: a destructor
//!    that waits for a timer would wait forever here, before step 5 closes the timers. A core
//!    waiting for a thread (handed off, or claimed by a rescue just before shutdown) is retired
//!    here. Then the stall monitor stops and its thread is joined.
//! 5. Repeat until a pass drops nothing: close the timers, the scheduler's lane, every group queue
//!    and limiter line (a later push is dropped by its pusher, so nothing can be stranded), wake
//!    every task still registered and every waker a timer held (a waiter outside this runtime
//!    then polls its timer and learns the runtime shut down), and drop every runnable in the
//!    lane, the group queues, limiter lines and local queues, on this thread.
//!    The wake is repeated because a worker may have taken a task just before step 3 (absorbing
//!    that wake) and polled it to `Pending` before it stopped.
//! 6. Wait for the blocking closures still running and join the pool's threads, at most until the
//!    timeout (forever for `Drop`, as tokio does: a closure may hold resources the caller expects
//!    released once the runtime is gone). Then join every runtime thread, except this one and
//!    those blocked in user code (a nested `block_on` or `block_in_place` whose code may never
//!    finish), at most until the timeout. A thread whose core a rescue took is joined like the
//!    others: every task's poll is over when `Drop` returns.
//! 7. Empty the scheduler's rotation and inbox: they hold the groups, which hold the runtime's
//!    shared state, so leaving them would keep the whole runtime alive. For the same reason, with
//!    the `io` feature, make async-io's reactor apply the removals of the async-io timers the
//!    dropped tasks held: it applies them only at its next pass, and may sleep until their
//!    deadlines meanwhile.
//!
//! Every task's future is dropped exactly once, here in step 5 (or by the core that held its
//! runnable, if step 5 began before that core retired), with its runtime current and its group
//! the current group, as a worker drops a cancelled task. Schedule functions reach the runtime
//! through `Arc`s held by the task itself, so a waker firing after shutdown touches live memory
//! only.

mod builder;
pub(crate) mod context;
mod dump;
mod join_set;
mod metrics;
mod observe;
mod task_builder;
#[cfg(all(test, not(loom)))]
mod tests;

use std::fmt;
use std::future::Future;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::blocking::{self, Pool};
use crate::fair::scheduler::Charge;
use crate::group::{GroupBuilder, GroupInner, GroupScope, Host, HostOf, spawn_in, with_current};
use crate::task::JoinHandle;
use crate::worker::run_hook;
use crate::worker::threads::Threads;
use crate::worker::{Blocking, BlockingBinding, Config, Drained, Shared};

impl BlockingBinding for Blocking {
    type Pool = Pool;
}

pub use crate::task::dump::{Dump, DumpError, TaskDump, TaskState};
pub use crate::task::hooks::TaskMeta;
pub use builder::{
    BuildError, Builder, DEFAULT_BLOCKING_KEEP_ALIVE, DEFAULT_MAX_BLOCKING_THREADS,
    DEFAULT_MAX_RESCUE_THREADS, DEFAULT_QUANTUM, DEFAULT_STALL_THRESHOLD, MAX_QUANTUM,
    MAX_THREAD_STACK, MAX_WORKERS, MIN_QUANTUM, MIN_THREAD_STACK,
};
pub use context::EnterGuard;
pub use metrics::{RuntimeMetrics, WorkerMetrics};
pub use observe::Id;

/// A handle to a runtime: spawn onto it, enter it, make groups. Cheap to clone; `Send + Sync`.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let handle = rt.handle().clone();
/// std::thread::spawn(move || {
///     let h = handle.spawn(async { 1 });
///     assert_eq!(handle.block_on(h).unwrap(), 1);
/// })
/// .join()
/// .unwrap();
/// ```
#[derive(Clone)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
    pub(crate) default_group: Arc<GroupInner>,
}

// A handle is a pair of `Arc`s to state that a panic cannot leave half-updated: every mutation
// behind them is an atomic step or happens under a lock the runtime never panics while holding.
impl UnwindSafe for Handle {}
impl RefUnwindSafe for Handle {}
impl UnwindSafe for Runtime {}
impl RefUnwindSafe for Runtime {}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("workers", &self.shared.cores().len())
            .finish()
    }
}

impl Handle {
    /// The handle of the runtime this thread is in (a worker thread, or inside `block_on`).
    ///
    /// # Panics
    /// Outside any runtime, with a message saying so; use [`try_current`](Self::try_current) to
    /// check instead.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let h = rondo::Handle::current();
    ///     assert_eq!(h.spawn(async { 3 }).await.unwrap(), 3);
    /// });
    /// ```
    #[track_caller]
    pub fn current() -> Handle {
        Self::try_current().expect(
            "rondo::Handle::current() called outside a rondo runtime: call it from a rondo task or \
             inside Runtime::block_on, or use Handle::try_current()",
        )
    }

    /// The current runtime's handle, or `None` outside any runtime.
    ///
    /// ```
    /// assert!(rondo::Handle::try_current().is_none());
    /// ```
    pub fn try_current() -> Option<Handle> {
        context::current_handle()
    }

    /// Spawns a task. Called from a task of this runtime, the new task joins the caller's group;
    /// otherwise it joins the runtime's default group.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.handle().spawn(async { "hi" });
    /// assert_eq!(rt.block_on(h).unwrap(), "hi");
    /// ```
    #[inline]
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let own = Arc::as_ptr(&self.shared) as *const HostOf;
        with_current(|g| match g {
            Some(g) if std::ptr::eq(g.host_addr(), own) => spawn_in(g, future),
            _ => spawn_in(&self.default_group, future),
        })
    }

    /// Runs `f` on the runtime's blocking pool and returns a handle to its result. Called from a
    /// task of this runtime, the closure counts as a task of the caller's group; otherwise of the
    /// runtime's default group.
    ///
    /// Pool threads are started on demand, up to
    /// [`Builder::max_blocking_threads`]; beyond that, closures wait in a queue for a thread. A
    /// thread idle for [`Builder::blocking_keep_alive`] exits. The handle resolves with the
    /// closure's value, with a panic [`JoinError`](crate::JoinError) if it panicked (the panic
    /// also reaches [`Builder::on_task_panic`]), or cancelled if it was aborted, or its group
    /// cancelled, before a pool thread took it, or the runtime shut down first. Dropping the
    /// handle does not stop the closure.
    ///
    /// The closure runs with this runtime entered ([`Handle::current`] works inside) and its
    /// group current. The CPU time it burns (the thread's CPU time: a closure that sleeps or
    /// waits for I/O costs nearly nothing) is charged to that group, to its share and its
    /// metrics' `busy`; a group whose share is used up on the workers and in the pool has its
    /// closures wait in the pool until the others catch up. A group's `max_concurrency` does not
    /// count blocking closures.
    ///
    /// # Panics
    ///
    /// If the system refuses to start a pool thread while the pool has none running (its thread
    /// limit or memory is exhausted), nothing could ever run the closure: it is dropped and this
    /// call panics with the system's reason. Called from a task, the panic ends that task, as any
    /// panic in a task does. While some pool thread runs, a refused start only means the closure
    /// waits for that thread.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.handle().spawn_blocking(|| {
    ///     std::thread::sleep(std::time::Duration::from_millis(1));
    ///     "slept"
    /// });
    /// assert_eq!(rt.block_on(h).unwrap(), "slept");
    /// ```
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let own = Arc::as_ptr(&self.shared) as *const HostOf;
        let pool = &self.shared.blocking();
        with_current(|g| match g {
            Some(g) if std::ptr::eq(g.host_addr(), own) => blocking::spawn_blocking(pool, g, f),
            _ => blocking::spawn_blocking(pool, &self.default_group, f),
        })
    }

    /// The number of blocking-pool threads started and not yet exited.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.handle().blocking_threads(), 0);
    /// rt.block_on(rt.spawn_blocking(|| ())).unwrap();
    /// assert_eq!(rt.handle().blocking_threads(), 1);
    /// ```
    pub fn blocking_threads(&self) -> usize {
        self.shared.blocking().threads()
    }

    /// Runs `future` to completion on this thread, with this runtime as the current one. A panic
    /// in `future` propagates to the caller.
    ///
    /// Nested in a task (on a worker thread), it first polls `future` once; if `future` waits for a
    /// task that has not started and sits in this worker's queues, it runs that task inline;
    /// otherwise it hands the worker's queues to another thread and blocks this one, so other tasks
    /// keep running and no task ever waits under another's frame. Each waiting nested `block_on`
    /// keeps a thread: awaiting is cheaper where it is possible.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.handle().block_on(async { 2 + 2 }), 4);
    /// ```
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        // Nested in a task of another runtime, `future` belongs to this runtime: its spawns go to
        // this runtime's default group, not to the task's group.
        let own = Arc::as_ptr(&self.shared) as *const HostOf;
        let foreign = with_current(|g| g.is_some_and(|g| !std::ptr::eq(g.host_addr(), own)));
        let _outside = foreign.then(GroupScope::leave);
        let _enter = context::enter(self.clone());
        crate::worker::block_on(&self.shared, future)
    }

    /// Makes this runtime the current one on this thread until the guard drops: `rondo::spawn`,
    /// `rondo::block_on` and [`Handle::current`] then use it instead of the global runtime.
    /// Inside a task the runtime polling it stays the current one, guard or not (so a task's
    /// spawns stay on its runtime); to reach another runtime from a task, call that runtime's
    /// handle directly ([`Handle::spawn`]).
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    /// let _guard = rt.handle().enter();
    /// let h = rondo::spawn(async { std::thread::current().name().map(String::from) });
    /// assert_eq!(rondo::block_on(h).unwrap().as_deref(), Some("rondo-worker-0"));
    /// ```
    pub fn enter(&self) -> EnterGuard<'_> {
        context::enter(self.clone())
    }

    /// Starts building a fairness group on this runtime.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.handle().group().weight(2).build().unwrap();
    /// assert_eq!(g.weight(), 2);
    /// ```
    pub fn group(&self) -> GroupBuilder {
        GroupBuilder::new(self.shared.clone())
    }

    /// The number of worker threads: with [`Builder::max_worker_threads`] above
    /// `worker_threads`, all of them (they exist from the start), as
    /// [`RuntimeMetrics::num_workers`] reports; how many run now is
    /// [`RuntimeMetrics::worker_cores`].
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    /// assert_eq!(rt.handle().worker_count(), 2);
    /// ```
    pub fn worker_count(&self) -> usize {
        self.shared.cores().len()
    }

    /// A snapshot of the runtime's counters; see [`RuntimeMetrics`].
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    /// rt.block_on(rt.spawn(async {})).unwrap();
    /// assert_eq!(rt.handle().metrics().workers.len(), 1);
    /// ```
    pub fn metrics(&self) -> RuntimeMetrics {
        RuntimeMetrics::collect(&self.shared)
    }

    /// The number of groups alive on this runtime, the default group included. A group is alive
    /// while a handle to it or one of its tasks exists.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert_eq!(rt.handle().group_count(), 2);
    /// drop(g);
    /// assert_eq!(rt.handle().group_count(), 1);
    /// ```
    pub fn group_count(&self) -> usize {
        self.shared.groups().live()
    }
}

/// A rondo runtime: a set of worker threads, their queues, and the groups they serve.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let out = rt.block_on(async {
///     let a = rondo::spawn(async { 20 });
///     let b = rondo::spawn(async { 22 });
///     a.await.unwrap() + b.await.unwrap()
/// });
/// assert_eq!(out, 42);
/// ```
pub struct Runtime {
    handle: Handle,
    shut_down: bool,
    /// The runtime's span (feature `tracing`), `runtime` at level INFO with fields `runtime.id`,
    /// `runtime.name` (when named) and `workers`: opened as the runtime starts, closed when it is
    /// dropped, after its shutdown (the `runtime.shutdown` span, nested in it).
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.handle.shared.cores().len())
            .finish()
    }
}

impl Runtime {
    /// A runtime with the default settings (one worker per core).
    ///
    /// # Errors
    /// A [`BuildError`] if a worker thread cannot be started (the same error type as
    /// [`Builder::build`]).
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.block_on(async { 1 }), 1);
    /// ```
    pub fn new() -> Result<Runtime, BuildError> {
        Builder::new().build()
    }

    /// A [`Builder`] to configure a runtime.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    /// assert_eq!(rt.handle().worker_count(), 1);
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    pub(crate) fn start(config: Config, pool: Pool) -> Result<Runtime, BuildError> {
        #[cfg(feature = "tracing")]
        let span = tracing::info_span!(
            target: "rondo",
            parent: None,
            "runtime",
            runtime.id = config.runtime_id,
            runtime.name = config.runtime_name.as_deref(),
            workers = config.workers,
        );
        let shared = Shared::new(config, Arc::new(pool));
        let default_group = GroupInner::new(&shared, Some("default".to_string()), 1, None, true);
        let rt = Runtime {
            handle: Handle {
                shared: shared.clone(),
                default_group: default_group.clone(),
            },
            shut_down: false,
            #[cfg(feature = "tracing")]
            span,
        };
        // Pool threads run with the runtime entered, and are runtime threads for the thread hooks
        // (as tokio's blocking threads are). The pool holds this handle until shutdown closes it.
        // Blocking closures' CPU time is charged to their groups' virtual runtimes.
        shared.blocking().share().set_charger(
            |g, ns| {
                let charge = Charge {
                    group: g.clone(),
                    ns,
                    polls: 0,
                };
                g.host().scheduler().charge(&charge);
            },
            shared.config().workers,
        );
        let handle = rt.handle.clone();
        shared.blocking().set_enter(Arc::new(move |body| {
            let _enter = handle.enter();
            let config = &handle.shared.config();
            run_hook(config.on_thread_start.as_ref());
            body();
            run_hook(config.on_thread_stop.as_ref());
        }));
        // On failure `rt` drops here and shuts down the threads already started.
        Threads::start(&shared, &default_group).map_err(BuildError::new)?;
        Ok(rt)
    }

    /// The runtime's handle.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.handle().clone();
    /// assert_eq!(h.block_on(h.spawn(async { 2 })).unwrap(), 2);
    /// ```
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `f` on the blocking pool; see [`Handle::spawn_blocking`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.spawn_blocking(|| 6 * 7);
    /// assert_eq!(rt.block_on(h).unwrap(), 42);
    /// ```
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.handle.spawn_blocking(f)
    }

    /// Spawns a task; see [`Handle::spawn`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.spawn(async { 1 + 1 });
    /// assert_eq!(rt.block_on(h).unwrap(), 2);
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// Runs `future` to completion on this thread; see [`Handle::block_on`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.block_on(async { 5 }), 5);
    /// ```
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// A snapshot of the runtime's counters; see [`RuntimeMetrics`].
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    /// let m = rt.metrics();
    /// assert_eq!(m.workers.len(), 2);
    /// ```
    pub fn metrics(&self) -> RuntimeMetrics {
        self.handle.metrics()
    }

    /// Makes this runtime the current one on this thread until the guard drops; see
    /// [`Handle::enter`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let _guard = rt.enter();
    /// let h = rondo::spawn(async { 1 });
    /// assert_eq!(rt.block_on(h).unwrap(), 1);
    /// ```
    pub fn enter(&self) -> EnterGuard<'_> {
        self.handle.enter()
    }

    /// Starts building a fairness group; see [`GroupBuilder`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().name("io").build().unwrap();
    /// assert_eq!(g.name(), "io");
    /// ```
    pub fn group(&self) -> GroupBuilder {
        self.handle.group()
    }

    /// Shuts the runtime down (see the module docs), waiting at most `timeout` for the workers to
    /// finish their current polls and for running blocking closures. Tasks still running after
    /// the timeout (blocked in a poll) are left to their threads, which exit when the poll returns;
    /// so are blocking closures. Blocking closures not started yet are dropped unrun and their
    /// handles resolve cancelled. Dropping the runtime does the same without a timeout: it waits
    /// for running blocking closures however long they take, and for a task's poll stuck in
    /// blocking code (the tasks queued behind it were rescued, see [`Builder::stall_threshold`],
    /// but the poll itself is waited for). A timeout longer than the clock can express
    /// ([`Duration::MAX`], say) waits as long as it takes, as dropping does.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// rt.shutdown_timeout(Duration::from_secs(1));
    /// assert!(h.is_finished());
    ///
    /// let rt = rondo::Runtime::new().unwrap();
    /// let b = rt.spawn_blocking(|| std::thread::sleep(Duration::from_millis(10)));
    /// rt.shutdown_timeout(Duration::MAX);
    /// assert!(b.is_finished());
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) {
        self.shutdown(Some(timeout));
    }

    fn shutdown(&mut self, timeout: Option<Duration>) {
        // `None` waits as long as it takes: no timeout, or one past what an `Instant` can hold.
        // Computed before the flag is set, so nothing between them can leave the runtime marked
        // shut down with its workers still running.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        if std::mem::replace(&mut self.shut_down, true) {
            return;
        }
        #[cfg(feature = "tracing")]
        let _span =
            tracing::info_span!(target: "rondo", parent: &self.span, "runtime.shutdown").entered();
        trace_event!(INFO, timeout = ?timeout, "runtime shutting down");
        let shared = &self.handle.shared;
        // The futures dropped on this thread (steps 4 and 5) see this runtime as the current one,
        // as those its workers drop do, whatever this thread had entered.
        let _enter = context::enter(self.handle.clone());
        // 1 and 2.
        shared.begin_shutdown();
        shared.blocking().close();
        // 3.
        for g in shared.groups().snapshot() {
            g.wake_idle_for_shutdown();
        }
        // 4. A runtime dropped inside one of its own tasks: the core this thread polls with
        // retires here (the thread leaves the worker loop when the poll returns).
        if let Some(core) = crate::worker::lease::take() {
            if Arc::ptr_eq(&core.shared, shared) {
                shared.threads().retire(core);
            } else {
                crate::worker::lease::install(core);
            }
        }
        shared.threads().wait_retired(deadline);
        shared.threads().stop_monitor(shared);
        // 5.
        while shared.drain_once() == Drained::Dropped {}
        // 6.
        shared.blocking().join(deadline);
        shared.threads().join(deadline);
        // 7.
        shared.scheduler().clear();
        // The async-io timers of the dropped tasks still hold their wakers, and so this runtime,
        // until the reactor's next pass.
        cfg_reactor! {{
            crate::worker::apply_dropped_timers();
        }}
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown(None);
    }
}

static GLOBAL: OnceLock<Runtime> = OnceLock::new();

/// The global runtime, started on first use with one worker per core.
pub(crate) fn global() -> &'static Handle {
    GLOBAL
        .get_or_init(|| {
            Builder::new()
                .thread_name("rondo-global")
                .build()
                .unwrap_or_else(|e| panic!("rondo: cannot start the global runtime: {e}"))
        })
        .handle()
}

/// Spawns `future` where [`rondo::spawn`](crate::spawn) spawns: into the caller's group when called
/// from a task, into the current runtime's default group inside `block_on` or `enter`, and into the
/// global runtime's default group otherwise. The future is not boxed here, whatever its size.
pub(crate) fn spawn_current<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut future = Some(future);
    let in_group = with_current(|g| g.map(|g| spawn_in(g, future.take().unwrap())));
    if let Some(h) = in_group {
        return h;
    }
    let future = future.take().unwrap();
    // The handle is cloned out of the thread-local before spawning (no borrow is held): a refused
    // task's future is dropped during the spawn, and its destructor may use the thread-local.
    match context::current_handle() {
        Some(h) => spawn_in(&h.default_group, future),
        None => spawn_in(&global().default_group, future),
    }
}

/// Runs `f` on the current runtime's blocking pool, as
/// [`rondo::spawn_blocking`](crate::spawn_blocking) does: the pool of the runtime polling the
/// calling task, or of the innermost `block_on` or `enter`, or of the global runtime otherwise.
pub(crate) fn spawn_blocking_current<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    match context::current_handle() {
        Some(h) => h.spawn_blocking(f),
        None => global().spawn_blocking(f),
    }
}
