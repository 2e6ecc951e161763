//! Spawning a task into a group.

use std::future::Future;
use std::sync::Arc;

use crate::shim::Ordering;
use crate::task::meta::TaskName;
use crate::task::{self, BOX_FUTURES_ABOVE, JoinHandle, TaskMeta};

use super::inner::{GroupInner, Host, HostOf};

/// Creates a task in `group` and schedules it. If the group is cancelled or its runtime is shutting
/// down, the task is dropped unpolled (on this thread, which created it) and the handle resolves
/// cancelled. A large future is boxed first, so it is not copied by value through every frame.
#[inline(always)]
pub(crate) fn spawn_in<F>(group: &Arc<GroupInner>, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if std::mem::size_of::<F>() > BOX_FUTURES_ABOVE {
        spawn_sized(group, Box::pin(future))
    } else {
        spawn_sized(group, future)
    }
}

fn spawn_sized<F>(group: &Arc<GroupInner>, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    spawn_with(
        group,
        future,
        <HostOf as Host>::schedule,
        <HostOf as Host>::schedule_new,
    )
}

/// Creates a task in `group` whose wakes go to `schedule` (the runtime's run queues for a task, the
/// blocking pool for a blocking closure) and hands it to `first`, which schedules it the same way,
/// or drops it unpolled as [`spawn_in`] does.
#[inline(always)]
pub(crate) fn spawn_with<F, S>(
    group: &Arc<GroupInner>,
    future: F,
    schedule: S,
    first: impl FnOnce(crate::task::Runnable),
) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Fn(crate::task::Runnable, async_task::ScheduleInfo) + Send + Sync + 'static,
{
    spawn_meta(group, None, future, schedule, first)
}

/// [`spawn_in`] for a task called `name` (`task::Builder`).
pub(crate) fn spawn_named_in<F>(
    group: &Arc<GroupInner>,
    name: Option<TaskName>,
    future: F,
) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (schedule, first) = (<HostOf as Host>::schedule, <HostOf as Host>::schedule_new);
    if std::mem::size_of::<F>() > BOX_FUTURES_ABOVE {
        spawn_meta(group, name, Box::pin(future), schedule, first)
    } else {
        spawn_meta(group, name, future, schedule, first)
    }
}

/// [`spawn_with`] for a task called `name` (`None`: unnamed).
#[inline(always)]
pub(crate) fn spawn_meta<F, S>(
    group: &Arc<GroupInner>,
    name: Option<TaskName>,
    future: F,
    schedule: S,
    first: impl FnOnce(crate::task::Runnable),
) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Fn(crate::task::Runnable, async_task::ScheduleInfo) + Send + Sync + 'static,
{
    // The task's span (feature `tracing`), if a subscriber wants it: the future is wrapped to
    // enter it around each poll, and the span closes as the future is dropped. A task whose
    // span is disabled is created exactly as without the feature.
    trace_event!(
        TRACE,
        task = name.as_ref().map(|n| n.0.as_str()),
        group = group.name(),
        group_id = group.id(),
        "task spawned"
    );
    #[cfg(feature = "tracing")]
    if let Some(span) = task_span(group, name.as_ref()) {
        let record = span.clone();
        let (runnable, handle) = task::create(
            TaskMeta::new(group.clone()),
            name,
            Spanned { future, span },
            schedule,
        );
        // The id is the task's address: known once the task exists.
        record.record("task.id", runnable.metadata().id().as_u64());
        return start(group, runnable, handle, first);
    }
    // Named, marked for the hooks and seen by the spawn hook inside, before it is queued.
    let (runnable, handle) = task::create(TaskMeta::new(group.clone()), name, future, schedule);
    start(group, runnable, handle, first)
}

/// The rest of [`spawn_meta`], once the task exists (named and seen by the spawn hook): counts it
/// and hands it to `first`, or drops it unpolled if its group is cancelled or its runtime shutting
/// down.
#[inline(always)]
fn start<T>(
    group: &Arc<GroupInner>,
    runnable: crate::task::Runnable,
    handle: JoinHandle<T>,
    first: impl FnOnce(crate::task::Runnable),
) -> JoinHandle<T> {
    // Counted even when refused: its drop below counts it as cancelled.
    group.registry.spawned();
    if !group.cancelled.load(Ordering::Acquire) && !group.host.is_shutdown() {
        first(runnable);
    } else {
        drop(runnable);
    }
    handle
}

cfg_tracing! {
    /// The task's span, `runtime.spawn` (tokio's name), at level TRACE, with fields `task.name`
    /// (when named), `task.id` (recorded once the task exists), `group` and `group.id`; `None`
    /// if no subscriber wants it. As tokio's, it has no parent, so a task spawned inside another
    /// task's span is not nested under it.
    #[inline(always)]
    fn task_span(group: &GroupInner, name: Option<&TaskName>) -> Option<tracing::Span> {
        // The span's level against the one all subscribers together want: one load.
        if !tracing::level_enabled!(tracing::Level::TRACE) {
            return None;
        }
        let span = tracing::trace_span!(
            target: "rondo",
            parent: None,
            "runtime.spawn",
            task.name = name.map(|n| n.0.as_str()),
            task.id = tracing::field::Empty,
            group = group.name(),
            group.id = group.id(),
        );
        (!span.is_disabled()).then_some(span)
    }

    pin_project_lite::pin_project! {
        /// A task's future and its span: the span is entered around each poll, and closes as
        /// the task's future is dropped (after it).
        pub(crate) struct Spanned<F> {
            #[pin]
            future: F,
            span: tracing::Span,
        }
    }

    impl<F: Future> Future for Spanned<F> {
        type Output = F::Output;

        #[inline]
        fn poll(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<F::Output> {
            let this = self.project();
            let _entered = this.span.enter();
            this.future.poll(cx)
        }
    }
}
