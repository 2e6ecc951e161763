//! Tasks: what a spawned future becomes, how it ends, and what its spawner holds.
//!
//! [`spawn`](crate::spawn) (or [`Group::spawn`](crate::Group::spawn),
//! [`Handle::spawn`](crate::Handle::spawn)) returns a [`JoinHandle`]; awaiting it yields the
//! output, or a [`JoinError`] if the task panicked or was cancelled. [`yield_now`] and
//! [`consume_budget`] give the worker back; [`BUDGET`] is what one poll may spend on ready rondo
//! futures.
//!
//! A [`Builder`] spawns a task with a name, into a chosen group; every task has an [`Id`].
//!
//! A [`JoinSet`] spawns tasks and yields their results as they complete; dropping it aborts
//! the tasks still in it. [`task_local!`](crate::task_local) declares a [`LocalKey`], a value set
//! for a future's polls by [`LocalKey::scope`] and read inside with [`LocalKey::with`].
//!
//! ```
//! rondo::block_on(async {
//!     let h: rondo::task::JoinHandle<i32> = rondo::spawn(async { 1 + 1 });
//!     assert_eq!(h.await.unwrap(), 2);
//! });
//! ```
//!
//! Inside the runtime this is the bottom layer: it imports no other runtime layer. `JoinSet` is
//! defined here with everything that needs only this layer (its ready list, the marker each task
//! carries, joining, aborting); its spawning methods, which choose a group, a runtime or a blocking
//! pool, are an `impl` block in the runtime layer (`runtime/join_set.rs`), which hands each task
//! to the set through `JoinSet::insert_future` or `insert_blocking`. A task's metadata points at
//! the set that owns it (a group), which the group layer names; the wrapper a worker polls catches
//! panics and does the task's bookkeeping exactly once; the output travels in a wrapper whose
//! destructor never unwinds.

mod abort;
mod builder;
pub(crate) mod coop;
pub(crate) mod dump;
mod error;
pub(crate) mod future;
mod hint;
pub(crate) mod hooks;
mod join;
mod join_set;
mod local;
pub(crate) mod meta;
mod names;
mod yield_now;

use std::future::Future;

use async_task::{Builder as TaskBuilder, ScheduleInfo, WithInfo};

pub use abort::AbortHandle;
pub use builder::Builder;
pub use coop::{BUDGET, consume_budget};
pub use error::{JoinError, TaskPanic};
pub use hooks::Id;
pub use join::JoinHandle;
pub(crate) use join::{end_probe, start_probe};
pub use join_set::JoinSet;
pub use local::{AccessError, LocalKey, TaskLocalFuture};
pub(crate) use meta::{Runnable, TaskMeta};
pub use yield_now::yield_now;

/// Futures larger than this travel boxed through the spawn path, so a large future is copied onto
/// the stack once (by its caller), not once per frame (copied per frame, a 1 MiB future overflows a
/// worker's stack).
pub(crate) const BOX_FUTURES_ABOVE: usize = 16 * 1024;

/// Allocates a task for `future` with `meta`; `schedule` is called on each wake. The caller runs
/// the spawn hook ([`spawned`]) before it queues the task.
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
    // A wake tells the task dump only for a task marked at its spawn (`has_extras`): one test of
    // a word in the metadata, which the schedule function reads next anyway.
    let schedule = move |r: Runnable, info: ScheduleInfo| {
        if r.metadata().has_extras() {
            r.metadata().scheduled_with_extras(info.woken_while_running);
        }
        schedule(r, info)
    };
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

/// Runs the spawn hook of the runtime of the task `r` just created, if any runtime of the process
/// has hooks: one load of a static and a test otherwise.
#[inline(always)]
pub(crate) fn spawned(r: &Runnable) {
    if hooks::maybe() {
        r.metadata().spawned_with_hooks();
    }
}
