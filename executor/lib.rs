#![doc = include_str!("guide.md")]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

// The layers, bottom to top, each importing only layers below it: `task` (a spawned future), `group`
// (sets of tasks and their queues), `fair` (which group is served, what it is charged), `worker`
// (cores, threads, the worker loop) and `runtime` (what users build and enter). `sync` stands
// beside them and needs none; `blocking` (the blocking pool) stands beside `worker`: it uses `task`
// and `group`, `runtime` uses it, and `worker` does not. `net` (sockets on async-io's reactor)
// uses only `spawn_blocking` (runtime), for name lookups; `signal` uses no other layer; `hyper`
// sits on top of `runtime`, `time` and `net`. `shim` is the std-or-loom facade they all use.
// `macros` comes first: its configuration helpers are for all of them.
#[macro_use]
mod macros;
mod blocking;
mod fair;
pub mod group;
#[cfg(feature = "hyper")]
pub mod hyper;
cfg_reactor! {
    pub mod net;
}
pub mod runtime;
mod shim;
#[cfg(all(feature = "signal", not(loom), not(miri)))]
pub mod signal;

/// The cheap clock: segment boundaries, the scheduler's times and the sync primitives' waits.
pub(crate) mod clock;
pub mod sync;
pub mod task;
pub mod time;
mod worker;

// The loom models of the lock-free protocols, driving the types above; built only by `cargo test`
// under `--cfg loom`.
#[cfg(all(test, loom))]
mod loom_models;

use std::future::Future;

pub use group::{Group, GroupBuilder, GroupMetrics, GroupPair, Scoped, current_group};
pub use runtime::{
    BuildError, Builder, EnterGuard, Handle, Runtime, RuntimeMetrics, WorkerMetrics,
};
pub use task::{JoinError, JoinHandle, TaskPanic, yield_now};

#[cfg(feature = "macros")]
pub use rondo_macros::{main, test};

/// Runs `future` to completion on the current thread.
///
/// Inside a runtime (a task, or another `block_on`) it uses that runtime; elsewhere it uses the
/// global runtime, started on first use with one worker per core. Nested inside a task, the
/// worker's queues are handed to another thread while this one waits, so other tasks keep running
/// (see [`Handle::block_on`]). A panic in `future` propagates to the caller.
///
/// ```
/// let v = rondo::block_on(async { rondo::spawn(async { 7 }).await.unwrap() });
/// assert_eq!(v, 7);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    match runtime::context::current_handle() {
        Some(h) => h.block_on(future),
        None => runtime::global().block_on(future),
    }
}

/// Spawns a task onto the current runtime: into the caller's group when called from a task,
/// into the default group when called inside `block_on`, and onto the global runtime otherwise.
///
/// A large future is boxed; a large output is not: it is moved by value on its worker's stack, so
/// an output of a megabyte or more must be returned boxed (or the stack raised with
/// [`Builder::thread_stack_size`]), as with other runtimes.
///
/// ```
/// rondo::block_on(async {
///     let handles: Vec<_> = (0..10).map(|i| rondo::spawn(async move { i * i })).collect();
///     let mut sum = 0;
///     for h in handles {
///         sum += h.await.unwrap();
///     }
///     assert_eq!(sum, 285);
/// });
/// ```
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if std::mem::size_of::<F>() > task::BOX_FUTURES_ABOVE {
        return runtime::spawn_current(Box::pin(future));
    }
    runtime::spawn_current(future)
}

/// Runs `f` on the current runtime's blocking pool (see [`Handle::spawn_blocking`]): the pool of
/// the runtime polling the calling task, or of the innermost `block_on` or `enter`, or of the
/// global runtime otherwise. Use it for code that blocks (file I/O, a synchronous library, a long
/// computation), so it never holds a worker.
///
/// ```
/// rondo::block_on(async {
///     let h = rondo::spawn_blocking(|| std::fs::read_to_string("Cargo.toml").map(|s| s.len()));
///     assert!(h.await.unwrap().unwrap() > 0);
/// });
/// ```
pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    runtime::spawn_blocking_current(f)
}

/// Runs blocking code inside a task without stalling its worker: this worker's run queues (its
/// next-task slot included) are handed to another thread first, so the worker's other tasks keep
/// running; then `f` runs on this thread, and afterwards the thread takes its queues back if no
/// other thread took them yet. Outside a task on a worker (anywhere else, or a second call in the
/// same poll once the queues are gone) it just runs `f`.
///
/// The task's group stays the current group, and its metrics count the task as usual. The CPU
/// time `f` burns (the thread's CPU time, not wall time: waiting costs nothing) is charged to that
/// group, to its share and its metrics' `busy`, as the workers' service is. A panic in `f`
/// propagates to the caller (inside a task, the task panics).
///
/// Prefer [`spawn_blocking`] where the code can move to another thread; `block_in_place` suits
/// blocking code that borrows from the task.
///
/// ```
/// rondo::block_on(async {
///     let h = rondo::spawn(async {
///         let data = vec![1u64, 2, 3];
///         // Borrows `data` from the task: a closure `spawn_blocking` could not take.
///         rondo::block_in_place(|| {
///             std::thread::sleep(std::time::Duration::from_millis(1));
///             data.iter().sum::<u64>()
///         })
///     });
///     assert_eq!(h.await.unwrap(), 6);
/// });
/// ```
pub fn block_in_place<F: FnOnce() -> R, R>(f: F) -> R {
    worker::block_in_place(f)
}

/// The README's examples, compiled and run as doctests (its HTTP servers need the `hyper`, `tower`
/// and `signal` features: `cargo test --all-features`, as CI runs).
#[cfg(all(doctest, feature = "hyper", feature = "tower", feature = "signal"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Runtime>();
    is::<Handle>();
    is::<Group>();
    is::<JoinHandle<u8>>();
    is::<JoinError>();
    is::<BuildError>();
    is::<GroupMetrics>();
    // hyper requires its sleeps to be `Send + Sync`; `rondo::hyper` relies on rondo's sleep being
    // both, so this keeps it so with or without the feature.
    is::<time::Sleep>();
}
