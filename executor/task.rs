//! Tasks: what rondo stores beside each future, the wrapper it polls, and `spawn_in`.
//!
//! A task is an `async_task` allocation holding a [`TaskFuture`] and a [`TaskMeta`]. The metadata
//! lives as long as the allocation, which is at least as long as the future, so the future borrows
//! it. The metadata owns an `Arc` of its group, and the group owns an `Arc` of the runtime's shared
//! state: a waker that fires after shutdown still finds live memory (no use-after-free).
//!
//! Cancellation is by marking: `abort` and `Group::cancel` set a flag and wake the task; whichever
//! worker next holds its `Runnable` drops it instead of polling it. A future is therefore dropped
//! by an executor thread, never inline on the thread that cancelled it.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_task::{Builder as TaskBuilder, ScheduleInfo, WithInfo};
use pin_project_lite::pin_project;

use crate::group::GroupInner;
use crate::join::JoinHandle;
use crate::registry::UNREGISTERED;
use crate::shim::{AtomicBool, AtomicUsize, Ordering};

/// A panic payload, as `catch_unwind` returns it.
pub(crate) type Payload = Box<dyn Any + Send + 'static>;

/// What a task's `Runnable` carries besides the future.
pub(crate) struct TaskMeta {
    /// The group the task belongs to, for routing, accounting and cancellation.
    pub(crate) group: Arc<GroupInner>,
    /// Set once by `JoinHandle::abort`; never cleared. A set flag means: drop, do not poll.
    pub(crate) aborted: AtomicBool,
    /// Where the task's waker sits in its group's registry, or `UNREGISTERED`. Written once, by
    /// the task's first poll that returns `Pending`.
    pub(crate) slot: AtomicUsize,
}

impl TaskMeta {
    /// True when the task must be dropped instead of polled.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.aborted.load(Ordering::SeqCst) || self.group.cancelled.load(Ordering::SeqCst)
    }
}

pub(crate) type Runnable = async_task::Runnable<TaskMeta>;

pin_project! {
    /// The future async-task polls: the user's future behind `catch_unwind`, plus the bookkeeping
    /// that must run exactly once when the future goes away (completed, cancelled or dropped at
    /// shutdown).
    pub(crate) struct TaskFuture<'a, F> {
        #[pin]
        future: Option<F>,
        meta: &'a TaskMeta,
        outcome: Outcome,
    }
    impl<'a, F> PinnedDrop for TaskFuture<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Drop the user's future first, so its destructor has run when the group counts the
            // task as finished.
            drop_future(this.future, this.meta);
            this.meta.group.registry.finished(this.meta, *this.outcome, &this.meta.group);
        }
    }
}

/// How a task ended, as the registry counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Dropped before completing: aborted, group cancelled, or runtime shut down.
    Cancelled,
    Completed,
    Panicked,
}

impl<F: Future> Future for TaskFuture<'_, F> {
    type Output = Result<F::Output, Payload>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(fut) = this.future.as_mut().as_pin_mut() else {
            // async-task never polls a future again after it returned Ready.
            return Poll::Pending;
        };
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => {
                let meta = *this.meta;
                if meta.slot.load(Ordering::Relaxed) == UNREGISTERED {
                    meta.group.registry.register_idle(meta, cx.waker());
                }
                Poll::Pending
            }
            Ok(Poll::Ready(v)) => {
                *this.outcome = Outcome::Completed;
                drop_future(this.future, this.meta);
                Poll::Ready(Ok(v))
            }
            Err(payload) => {
                *this.outcome = Outcome::Panicked;
                // The hook sees the panic before the future's destructor runs.
                this.meta.group.report_panic(&*payload);
                drop_future(this.future, this.meta);
                Poll::Ready(Err(payload))
            }
        }
    }
}

/// Drops the user's future in place. A panicking destructor must not unwind into a worker (or the
/// thread shutting the runtime down): it is caught and reported to the panic hook like a task
/// panic, and the task's outcome stands.
fn drop_future<F>(future: Pin<&mut Option<F>>, meta: &TaskMeta) {
    let mut future = future;
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| future.set(None))) {
        meta.group.report_panic(&*payload);
        // Dropping the payload could itself panic; nothing more can be done about that one.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

fn wrap<'a, F>(future: F) -> impl FnOnce(&'a TaskMeta) -> TaskFuture<'a, F> {
    move |meta| TaskFuture {
        future: Some(future),
        meta,
        outcome: Outcome::Cancelled,
    }
}

/// Creates a task in `group` and schedules it. If the group is cancelled or its runtime is shutting
/// down, the task is dropped unpolled and the handle resolves cancelled.
pub(crate) fn spawn_in<F>(group: &Arc<GroupInner>, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let meta = TaskMeta {
        group: group.clone(),
        aborted: AtomicBool::new(false),
        slot: AtomicUsize::new(UNREGISTERED),
    };
    let schedule = WithInfo(|r: Runnable, info: ScheduleInfo| crate::worker::schedule(r, info));
    let make = wrap(future);
    // SAFETY: `F` is `Send + 'static`; the only borrow in the future is of the task's own
    // metadata, which async-task keeps alive until after the future is dropped; the schedule
    // function captures nothing and is `Send + Sync + 'static`. So the conditions of
    // `spawn_unchecked` (non-Send futures used on one thread, borrowed non-metadata values outliving
    // the runnable) are met trivially.
    let (runnable, task) = unsafe {
        TaskBuilder::new()
            .metadata(meta)
            .spawn_unchecked(make, schedule)
    };
    let handle = JoinHandle::new(task);
    // Counted even when refused: its drop below counts it as cancelled.
    group.registry.spawned();
    if !group.cancelled.load(Ordering::Acquire) && !group.shared.is_shutdown() {
        runnable.schedule();
    } else {
        // Never polled: the user's future is dropped here, on the thread that created it.
        drop(runnable);
    }
    handle
}
