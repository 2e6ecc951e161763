#![doc = include_str!("guide.md")]
#![warn(missing_docs)]

mod builder;
mod context;
mod coop;
mod group;
mod group_queue;
mod idle;
mod join;
mod limiter;
mod queue;
mod registry;
mod runtime;
mod scheduler;
mod shim;
pub mod sync;
mod task;
mod worker;
mod yield_now;

use std::future::Future;

pub use builder::{BuildError, Builder, DEFAULT_QUANTUM, MAX_QUANTUM, MAX_WORKERS, MIN_QUANTUM};
pub use coop::{BUDGET, consume_budget};
pub use group::{Group, GroupBuilder, GroupMetrics, MAX_WEIGHT, current_group};
pub use join::{JoinError, JoinHandle, TaskPanic};
pub use runtime::{Handle, Runtime};
pub use yield_now::yield_now;

#[cfg(feature = "macros")]
pub use rondo_macros::{main, test};

/// Runs `future` to completion on the current thread.
///
/// Inside a runtime (a task, or another `block_on`) it uses that runtime; elsewhere it uses the
/// global runtime, started on first use with one worker per core. On a worker thread the worker
/// keeps running queued tasks while it waits. A panic in `future` propagates to the caller.
///
/// ```
/// let v = rondo::block_on(async { rondo::spawn(async { 7 }).await.unwrap() });
/// assert_eq!(v, 7);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    match context::current_handle() {
        Some(h) => h.block_on(future),
        None => runtime::global().block_on(future),
    }
}

/// Spawns a task onto the current runtime: into the caller's group when called from a task,
/// into the default group when called inside `block_on`, and onto the global runtime otherwise.
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
    let mut future = Some(future);
    let in_group =
        runtime::with_current_group(|g| g.map(|g| task::spawn_in(g, future.take().unwrap())));
    if let Some(h) = in_group {
        return h;
    }
    let in_block_on = context::with_handle(|h| {
        h.map(|h| task::spawn_in(&h.default_group, future.take().unwrap()))
    });
    if let Some(h) = in_block_on {
        return h;
    }
    runtime::global().spawn(future.take().unwrap())
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The runtime's lock-free protocols, exposed only to the loom models in `tests/loom_runtime.rs`.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_support {
    pub use crate::group_queue::GroupQueue;
    pub use crate::idle::Idle;
    pub use crate::scheduler::ListFlag;
}

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
}
