//! The blocking pool: threads that run closures which block, beside the workers.
//!
//! A blocking closure becomes a task of a group (the caller's, or the runtime's default group)
//! whose future calls the closure once, and whose schedule function is the pool's instead of the
//! workers'. So it has an ordinary [`JoinHandle`]: `abort` (or [`Group::cancel`](crate::Group::cancel))
//! before a pool thread takes it skips the closure, a panic resolves the handle with a panic
//! `JoinError` and reaches `on_task_panic`, and the group counts it in its metrics (`spawned`,
//! `completed`, ...). The CPU time a closure burns is charged to its group, to its virtual
//! runtime and its metrics' `busy` (not its `polls`, which count workers' polls), and the pool
//! admits a group's closures by share, so more closures in flight buy a group no more CPU time
//! (`share` states both rules, and the rule for closures that wait rather than compute). A
//! group's `max_concurrency` does not limit blocking closures.
//!
//! `pool` holds the threads and the protocol that hands them closures without a pool-wide lock;
//! `share` what closures are charged and which may run.
//!
//! This layer sits beside the workers: it uses `task`, `group` and the thread CPU clock of
//! `fair::segment`, the runtime layer uses it, and
//! the workers never do (their shared state owns the pool through a binding the runtime layer
//! names, as `group` names its host).

pub(crate) mod pool;
pub(crate) mod share;

use std::sync::Arc;

use crate::group::{GroupInner, spawn_meta};
use crate::task::meta::TaskName;
use crate::task::{BOX_FUTURES_ABOVE, JoinHandle, Runnable};

pub(crate) use pool::Pool;

/// Creates a task in `group` that runs `f` on `pool`, and queues it there. A large closure is boxed
/// first, as a large future is (see `BOX_FUTURES_ABOVE`).
pub(crate) fn spawn_blocking<F, R>(pool: &Arc<Pool>, group: &Arc<GroupInner>, f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    spawn_named_blocking(pool, group, None, f)
}

/// [`spawn_blocking`] for a task called `name` (`task::Builder`).
pub(crate) fn spawn_named_blocking<F, R>(
    pool: &Arc<Pool>,
    group: &Arc<GroupInner>,
    name: Option<TaskName>,
    f: F,
) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    if std::mem::size_of::<F>() > BOX_FUTURES_ABOVE {
        return spawn_sized(pool, group, name, Box::new(f));
    }
    spawn_sized(pool, group, name, f)
}

fn spawn_sized<F, R>(
    pool: &Arc<Pool>,
    group: &Arc<GroupInner>,
    name: Option<TaskName>,
    f: F,
) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let p = pool.clone();
    let run = async move {
        let v = f();
        pool::closure_returned();
        v
    };
    spawn_meta(
        group,
        name,
        run,
        move |r, _| p.schedule(r),
        Runnable::schedule,
    )
}
