//! Tasks, the bottom layer: what a spawned future becomes, how it ends, and what its spawner holds.
//!
//! - `meta`: the metadata stored beside each future, and the [`Owner`](meta::Owner) behaviour a
//!   task needs from the set it belongs to (a group, named by the layer above).
//! - `future`: the wrapper a worker polls (panics caught, bookkeeping exactly once), and the
//!   output wrapper whose destructor never unwinds.
//! - `join`: [`JoinHandle`]; `error`: [`JoinError`] and [`TaskPanic`].
//! - `coop`: the cooperative budget; `yield_now`.
//!
//! This layer imports no other runtime layer: groups, the fair scheduler, workers and the runtime
//! are built on it.

pub(crate) mod coop;
mod error;
pub(crate) mod future;
mod join;
pub(crate) mod meta;
mod yield_now;

use std::future::Future;

use async_task::{Builder as TaskBuilder, ScheduleInfo, WithInfo};

pub use coop::{BUDGET, consume_budget};
pub use error::{JoinError, TaskPanic};
pub use join::JoinHandle;
pub(crate) use join::{end_probe, start_probe};
pub(crate) use meta::{Runnable, TaskMeta};
pub use yield_now::yield_now;

/// Futures larger than this travel boxed through the spawn path, so a large future is copied onto
/// the stack once (by its caller), not once per frame (a 1 MiB future overflowed a worker's stack).
pub(crate) const BOX_FUTURES_ABOVE: usize = 16 * 1024;

/// Allocates a task for `future` with `meta`; `schedule` is called on each wake.
pub(crate) fn create<F, S>(
    meta: TaskMeta,
    future: F,
    schedule: S,
) -> (Runnable, JoinHandle<F::Output>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Fn(Runnable, ScheduleInfo) + Send + Sync + 'static,
{
    let make = future::TaskFuture::wrap(future);
    // SAFETY: `F` is `Send + 'static`; the only borrow in the wrapper is of the task's own
    // metadata, which async-task keeps alive until after the future is dropped; the schedule
    // function is `Send + Sync + 'static`. So the conditions of `spawn_unchecked` (non-Send futures
    // used on one thread, borrowed non-metadata values outliving the runnable) are met trivially.
    let (runnable, task) = unsafe {
        TaskBuilder::new()
            .metadata(meta)
            .spawn_unchecked(make, WithInfo(schedule))
    };
    (runnable, JoinHandle::new(task))
}
