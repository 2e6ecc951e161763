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
use meta::TaskName;
pub(crate) use meta::{Runnable, TaskMeta};
pub use yield_now::yield_now;

/// Futures larger than this travel boxed through the spawn path, so a large future is copied onto
/// the stack once (by its caller), not once per frame (copied per frame, a 1 MiB future overflows a
/// worker's stack).
pub(crate) const BOX_FUTURES_ABOVE: usize = 16 * 1024;

/// Allocates a task for `future` with `meta`, called `name` (`None`: unnamed); `schedule` is
/// called on each wake. A task that is named, or spawned on a runtime with task hooks (or the
/// task dump), is made out of line ([`create_with_extras`]); any other costs a load of its
/// group's flag and a test more than the allocation.
#[inline(always)]
pub(crate) fn create<F, S>(
    meta: TaskMeta,
    name: Option<TaskName>,
    future: F,
    schedule: S,
) -> (Runnable, JoinHandle<F::Output>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Fn(Runnable, ScheduleInfo) + Send + Sync + 'static,
{
    // Both paths return two pointers (in registers), the handle is built after they meet.
    let (runnable, task) = if name.is_some() || meta.runtime_has_hooks() {
        create_with_extras(meta, name, future, schedule)
    } else {
        allocate(meta, future, schedule)
    };
    (runnable, JoinHandle::new(task))
}

/// A task as async-task returns it: its runnable and its output's handle.
type Allocated<T> = (Runnable, async_task::Task<future::TaskOutput<T>, TaskMeta>);

/// [`create`] for a named task, or one of a runtime with hooks: a task of a runtime
/// with the task dump gets a schedule function that tells the dump of each wake (`task::dump`);
/// the task is named, marked, entered in the dump and seen by the spawn hook, all before its
/// spawner queues it.
#[cold]
#[inline(never)]
fn create_with_extras<F, S>(
    meta: TaskMeta,
    name: Option<TaskName>,
    future: F,
    schedule: S,
) -> Allocated<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Fn(Runnable, ScheduleInfo) + Send + Sync + 'static,
{
    let dump = meta.dump_table().is_some();
    let (runnable, task) = if dump {
        let schedule = move |r: Runnable, info: ScheduleInfo| {
            // A wake during a poll is recorded by the poll's end; any other, before the task is
            // queued, so no poll can start before it.
            if !info.woken_while_running {
                r.metadata().woken_for_dump();
            }
            schedule(r, info)
        };
        allocate(meta, future, schedule)
    } else {
        allocate(meta, future, schedule)
    };
    if let Some(name) = name {
        runnable.metadata().set_name(name);
    }
    if runnable.metadata().runtime_has_hooks() {
        runnable.metadata().spawned_with_hooks();
    }
    (runnable, task)
}

/// The allocation itself.
#[inline(always)]
fn allocate<F, S>(meta: TaskMeta, future: F, schedule: S) -> Allocated<F::Output>
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
    (runnable, task)
}
