//! The future a worker polls: the user's future behind `catch_unwind`, the bookkeeping that runs
//! exactly once when it goes away, and the output wrapper whose destructor never unwinds.
//!
//! Cancellation is by marking: `abort` and `Group::cancel` set a flag and wake the task; whichever
//! worker next holds its `Runnable` drops it instead of polling it. A future is therefore dropped
//! by an executor thread, never inline on the thread that cancelled it. Wherever an unfinished
//! future is dropped (that worker, a spawn refused by a cancelled group, a queue closed by
//! shutdown), its destructor runs with the task's group current, as a poll would: what it
//! spawns joins that group, not the dropping thread's context.
//!
//! # Panics in user code
//! A panic in the future's `poll`, in its destructor, or in the destructor of its output (or of a
//! panic payload) must never unwind into a worker, the thread shutting a runtime down, or a thread
//! dropping a `JoinHandle`. `poll` and the future's destructor are caught here and reported to the
//! owner. The output travels as a [`TaskOutput`], whose destructor catches its own panic: where the
//! dropping code knows the task's owner (a `JoinHandle`, a worker that just ran the task) it takes
//! the caught payload with [`take_deferred_panic`] and reports it; elsewhere it is discarded.

use std::cell::Cell;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::hint;
use super::meta::{Outcome, Owner, OwnerOf, Payload, TaskMeta, TaskRef};

pin_project! {
    /// The future async-task polls (see the module docs).
    pub(crate) struct TaskFuture<'a, F> {
        #[pin]
        future: Option<F>,
        meta: &'a TaskMeta,
        outcome: Outcome,
    }
    impl<'a, F> PinnedDrop for TaskFuture<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Drop the user's future first, so its destructor has run when the owner counts the
            // task as finished. A future still here was cancelled (a completed one was dropped in
            // its last poll): it is dropped with its group current, wherever this runs, out of
            // line. Then a task with extras runs its end hook, leaves the task dump and forgets
            // its name (`hooks`), before its owner counts it finished.
            if this.future.as_ref().get_ref().is_some() {
                drop_cancelled(this.future, this.meta);
            }
            if this.meta.has_extras() {
                this.meta.end_extras();
            }
            this.meta.group.finished(this.meta, *this.outcome);
        }
    }
}

impl<'a, F: Future> TaskFuture<'a, F> {
    /// The closure async-task calls with the task's metadata to build the future it stores.
    pub(crate) fn wrap(future: F) -> impl FnOnce(&'a TaskMeta) -> TaskFuture<'a, F> {
        move |meta| TaskFuture {
            future: Some(future),
            meta,
            outcome: Outcome::Cancelled,
        }
    }
}

impl<F: Future> Future for TaskFuture<'_, F> {
    type Output = TaskOutput<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(fut) = this.future.as_mut().as_pin_mut() else {
            // async-task never polls a future again after it returned Ready.
            return Poll::Pending;
        };
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => {
                let meta = *this.meta;
                if !meta.is_registered() {
                    meta.group.register_idle(meta, cx.waker());
                }
                Poll::Pending
            }
            Ok(Poll::Ready(v)) => {
                *this.outcome = Outcome::Completed;
                drop_future(this.future, this.meta);
                Poll::Ready(TaskOutput::new(Ok(v)))
            }
            Err(payload) => {
                *this.outcome = Outcome::Panicked;
                // The hook sees the panic before the future's destructor runs.
                let payload = report_poll_panic(this.meta, payload);
                drop_future(this.future, this.meta);
                Poll::Ready(TaskOutput::new(Err(payload)))
            }
        }
    }
}

/// Drops the future of a task that did not complete, with its group current. Out of line: only
/// cancelled tasks come here.
#[cold]
#[inline(never)]
fn drop_cancelled<F>(future: Pin<&mut Option<F>>, meta: &TaskMeta) {
    OwnerOf::as_current(&meta.group, || drop_future(future, meta));
}

/// Drops the user's future in place; a panicking destructor is caught and reported like a task
/// panic, and the task's outcome stands.
fn drop_future<F>(future: Pin<&mut Option<F>>, meta: &TaskMeta) {
    let mut future = future;
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| future.set(None))) {
        report_destructor_panic(meta, payload);
    }
}

/// Reports a panic of the task's future's destructor, naming the task.
#[cold]
#[inline(never)]
fn report_destructor_panic(meta: &TaskMeta, payload: Payload) {
    let name = meta.name();
    report_and_drop(&*meta.group, payload, Some((meta.id(), name.as_deref())));
}

/// Reports a panic of the task's poll, naming the task, and returns the payload for its
/// `JoinError`: a named task's wrapped with its name, which goes with the future.
#[cold]
#[inline(never)]
fn report_poll_panic(meta: &TaskMeta, payload: Payload) -> Payload {
    let name = meta.name();
    if meta.group.reports_panics() {
        meta.group
            .report_panic(&*payload, Some((meta.id(), name.as_deref())));
    } else {
        hint::print_once(hint::panic_message(&*payload));
    }
    match name {
        Some(name) => Box::new(NamedPanic {
            payload,
            name: name.into(),
        }),
        None => payload,
    }
}

/// A named task's panic payload on its way to the task's `JoinError`, which unwraps it.
pub(crate) struct NamedPanic {
    pub(crate) payload: Payload,
    pub(crate) name: Box<str>,
}

/// Drops a panic payload whose own destructor may panic; a second panic is leaked, not raised.
pub(crate) fn drop_payload(payload: Payload) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// A task's result, from completion until its `JoinHandle` takes it. Its destructor never unwinds
/// (see the module docs).
pub(crate) struct TaskOutput<T>(ManuallyDrop<Result<T, Payload>>);

impl<T> TaskOutput<T> {
    fn new(v: Result<T, Payload>) -> Self {
        TaskOutput(ManuallyDrop::new(v))
    }

    /// Takes the result out; the caller owns its destructor from now on.
    pub(crate) fn into_inner(self) -> Result<T, Payload> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the value is moved out exactly once.
        unsafe { ManuallyDrop::take(&mut this.0) }
    }
}

impl<T> Drop for TaskOutput<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads the value afterwards.
        let caught = catch_unwind(AssertUnwindSafe(|| unsafe {
            ManuallyDrop::drop(&mut self.0)
        }));
        if let Err(payload) = caught {
            defer_panic(payload);
        }
    }
}

thread_local! {
    /// A panic caught in a `TaskOutput`'s destructor on this thread, waiting to be reported by code
    /// that knows the task's owner.
    static DEFERRED: Cell<Option<Payload>> = const { Cell::new(None) };
    /// True while `DEFERRED` may hold a payload: a destructor-free flag, so the check after every
    /// poll never touches the payload cell (whose destructor makes each access check its state).
    static ANY_DEFERRED: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn defer_panic(payload: Payload) {
    let mut slot = Some(payload);
    let _ = ANY_DEFERRED.try_with(|a| a.set(true));
    let _ = DEFERRED.try_with(|d| {
        if let Some(older) = d.replace(slot.take()) {
            drop_payload(older);
        }
    });
    // During thread-local teardown there is nobody to report to: discard.
    if let Some(p) = slot {
        drop_payload(p);
    }
}

/// Takes the panic a `TaskOutput` destructor caught on this thread, if any.
#[inline]
pub(crate) fn take_deferred_panic() -> Option<Payload> {
    if !ANY_DEFERRED.try_with(|a| a.replace(false)).unwrap_or(false) {
        return None;
    }
    DEFERRED.try_with(Cell::take).ok().flatten()
}

/// Drops `value` (a task's output) and reports a panic of its destructor to `owner`.
pub(crate) fn drop_reporting<T, O: Owner>(value: T, owner: &O, task: Option<TaskRef<'_>>) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        report_and_drop(owner, payload, task);
    }
}

/// Reports to `owner` a panic that a `TaskOutput` destructor deferred on this thread, if any.
pub(crate) fn report_deferred<O: Owner>(owner: &O) {
    if let Some(payload) = take_deferred_panic() {
        report_and_drop(owner, payload, None);
    }
}

fn report_and_drop<O: Owner>(owner: &O, payload: Payload, task: Option<TaskRef<'_>>) {
    owner.report_panic(&*payload, task);
    drop_payload(payload);
}
