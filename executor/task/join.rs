//! `JoinHandle`: what a spawner gets back.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use async_task::FallibleTask;

use super::abort::{self, AbortHandle};
use super::coop;
use super::error::JoinError;
use super::future::{
    TaskOutput, defer_panic, drop_reporting, report_deferred, take_deferred_panic,
};
use super::meta::{Owner, OwnerOf, TaskMeta, task_id};

/// An owned permission to await a spawned task's output.
///
/// Awaiting it yields `Ok(output)`, or a [`JoinError`] if the task panicked or was cancelled.
/// Dropping it detaches the task, which keeps running. [`abort`](JoinHandle::abort) cancels it.
///
/// An output nobody reads is dropped by the worker that completes a detached task, or, if the task
/// finished first, by the thread that drops the handle. A panic in its destructor goes to the
/// [`on_task_panic`](crate::Builder::on_task_panic) hook, never to the code dropping it.
///
/// # Panics
/// If polled again after it returned `Ready`.
///
/// ```
/// rondo::block_on(async {
///     let h = rondo::spawn(async { 6 * 7 });
///     assert_eq!(h.await.unwrap(), 42);
/// });
/// ```
pub struct JoinHandle<T> {
    task: Option<FallibleTask<TaskOutput<T>, TaskMeta>>,
    /// The task's metadata, inside the allocation that `task` keeps alive.
    meta: NonNull<TaskMeta>,
    polled: Polled,
}

/// What the handle's last poll returned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Polled {
    Never,
    /// `Pending`: the task holds the poller's waker until it completes, or until the handle takes
    /// the waker back when it drops.
    Pending,
    /// `Ready`: polling it again is a bug in the caller.
    Ready,
}

// SAFETY: the handle only reads `meta` through atomics and `Sync` types (`TaskMeta` is `Sync`),
// and moves the output `T` out when it completes, so it may move to and be shared with another
// thread whenever `T` may be sent.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: every `&self` method (`abort`, `is_finished`) only touches atomics and mutex-protected
// state; the output is only reached through `&mut self` (poll, drop).
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T> Unpin for JoinHandle<T> {}
// A panic while a handle is borrowed cannot leave it half-updated: its state changes are single
// atomic steps or happen in `poll`, which completes or leaves the task untouched.
impl<T> UnwindSafe for JoinHandle<T> {}
impl<T> RefUnwindSafe for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    pub(crate) fn new(task: async_task::Task<TaskOutput<T>, TaskMeta>) -> Self {
        let meta = NonNull::from(task.metadata());
        JoinHandle {
            task: Some(task.fallible()),
            meta,
            polled: Polled::Never,
        }
    }

    /// The task's metadata, for an abort cell.
    pub(crate) fn meta_ptr(&self) -> NonNull<TaskMeta> {
        self.meta
    }

    /// The handle's task reference (`None` only while the handle is dropped).
    pub(crate) fn task_ref(&self) -> Option<&FallibleTask<TaskOutput<T>, TaskMeta>> {
        self.task.as_ref()
    }

    /// Marks the task as having an abort cell (`task::abort`); called under the cells' lock.
    pub(crate) fn mark_abortable(&self) {
        self.meta().mark_abortable();
    }

    fn meta(&self) -> &TaskMeta {
        // SAFETY: `self.task` holds the task's handle reference until `self` drops, so the
        // allocation (and the metadata inside it) outlives this borrow of `self`.
        unsafe { self.meta.as_ref() }
    }

    /// Cancels the task. A queued task is dropped without running; a running one is dropped at
    /// its next suspension point. The future is always dropped by a worker, never inline here.
    /// Awaiting the handle then yields a [`JoinError`] with [`is_cancelled`](JoinError::is_cancelled),
    /// unless the task completed first (before the call, or in the poll under way when it was
    /// made), in which case its output is kept. A
    /// [`spawn_blocking`](crate::spawn_blocking) closure that a pool thread has started cannot be
    /// interrupted: it runs to its end and its output is kept.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(std::future::pending::<()>());
    ///     h.abort();
    ///     assert!(h.await.unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn abort(&self) {
        self.meta().abort();
    }

    /// True once the task has completed, panicked or been cancelled.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(async {});
    ///     while !h.is_finished() {
    ///         rondo::yield_now().await;
    ///     }
    ///     assert!(h.await.is_ok());
    /// });
    /// ```
    pub fn is_finished(&self) -> bool {
        self.polled == Polled::Ready || self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// The task's id (tokio's `JoinHandle::id`): unique among the tasks alive at one time.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(async { panic!("boom") });
    ///     let id = h.id();
    ///     assert_eq!(h.await.unwrap_err().id(), id);
    /// });
    /// ```
    pub fn id(&self) -> super::Id {
        self.meta().id()
    }

    /// The identity of the task, for the nested `block_on`'s inline check and the abort cells.
    pub(crate) fn task_id(&self) -> usize {
        task_id(self.meta())
    }
}

impl<T: Send + 'static> JoinHandle<T> {
    /// An [`AbortHandle`] for the task (tokio's `JoinHandle::abort_handle`): aborts it, and tells
    /// whether it finished, without this handle. Every call returns a handle to the same task.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(std::future::pending::<()>());
    ///     let abort = h.abort_handle();
    ///     std::thread::spawn(move || abort.abort()).join().unwrap();
    ///     assert!(h.await.unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn abort_handle(&self) -> AbortHandle {
        abort::of(self)
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        assert!(
            self.polled != Polled::Ready,
            "JoinHandle polled after it returned Ready: a handle yields its task's result once"
        );
        if coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        let task = self
            .task
            .as_mut()
            .expect("a live JoinHandle holds its task");
        match Pin::new(task).poll(cx) {
            Poll::Pending => {
                coop::refund();
                self.polled = Polled::Pending;
                note_awaited(self.task_id());
                Poll::Pending
            }
            Poll::Ready(out) => {
                self.polled = Polled::Ready;
                Poll::Ready(match out.map(TaskOutput::into_inner) {
                    Some(Ok(v)) => Ok(v),
                    Some(Err(p)) => Err(JoinError::of_task(Some(p), self.meta())),
                    None => Err(JoinError::of_task(None, self.meta())),
                })
            }
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        // A handle polled `Pending` and dropped (a `select` or `timeout` that gave up on it) gets
        // the same treatment as a finished one: `detach` leaves the awaiter registered, and the
        // task would keep the poller's waker, and with it the polling task and its group, until
        // it completes, which may be never. A handle dropped right after its spawn (a detached
        // task) pays only the `is_finished` load.
        let take_back = match self.polled {
            Polled::Ready => false,
            Polled::Pending => true,
            Polled::Never => self.task.as_ref().is_some_and(|t| t.is_finished()),
        };
        self.release(take_back);
    }
}

impl<T> JoinHandle<T> {
    /// Gives up the handle's hold on its task: takes the output back first if `take_back` (see
    /// `drop_output`), then detaches the task.
    ///
    /// A task that completes after the caller looked (between `is_finished` and `detach`) has its
    /// output dropped inside `detach`, on this thread, where `TaskOutput` can only defer a panic
    /// of its destructor; and `detach` may free the task, and its group with it, before it
    /// returns. So for an output with a destructor the group is kept alive across `detach`, and a
    /// panic deferred during it is reported to that group. Outputs without a destructor, and
    /// runtimes without an `on_task_panic` hook, skip the reference count (an `Arc` increment and
    /// decrement on a line the workers write).
    fn release(&mut self, take_back: bool) {
        if self.meta().is_abortable() && self.hand_to_abort_handles() {
            return;
        }
        let Some(mut task) = self.task.take() else {
            return;
        };
        // SAFETY: see `meta`; `task` is still alive here. `meta` is not used after `detach`,
        // which may free it.
        let meta = unsafe { self.meta.as_ref() };
        let taken = take_back && drop_output(&mut task, meta);
        if !taken && std::mem::needs_drop::<T>() && meta.group.reports_panics() {
            detach_reporting(task, meta.group.clone());
        } else {
            task.detach();
        }
    }

    /// The handle of a task with abort handles is being dropped: its hold on the task goes to
    /// them if the task is unfinished and one is left (`task::abort`). Returns true if it went.
    /// Out of line: only a handle whose task has abort handles gets here (and the handle the
    /// cell took, as it drops, which finds no cell and returns false).
    #[cold]
    #[inline(never)]
    fn hand_to_abort_handles(&mut self) -> bool {
        let finished = self.is_finished();
        abort::handle_dropped(self.task_id(), finished, || {
            let moved = JoinHandle {
                task: self.task.take(),
                meta: self.meta,
                polled: self.polled,
            };
            (self.meta, Box::into_raw(Box::new(moved)) as *mut ())
        })
    }

    /// Drops the handle the way `Drop` does when the task completes between the handle's look
    /// at it (`is_finished`) and its `detach`.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn drop_as_if_it_finished_after_the_look(mut self) {
        self.release(false);
    }
}

#[inline(never)]
fn detach_reporting<T>(task: FallibleTask<TaskOutput<T>, TaskMeta>, group: Arc<OwnerOf>) {
    // A panic deferred earlier on this thread is not this task's: set aside and put back.
    let earlier = take_deferred_panic();
    task.detach();
    report_deferred(&*group);
    if let Some(p) = earlier {
        defer_panic(p);
    }
}

/// Polls the task once more with a waker that holds nothing, before the handle detaches it:
/// - the output of a finished task whose handle is dropped unread would be dropped inside
///   `detach`, on this thread: it is taken and dropped here, so a panicking destructor is reported
///   to the task's group instead of unwinding into the caller;
/// - an unfinished task's awaiter is replaced by the no-op waker, which drops the waker of the
///   handle's last `Pending` poll now instead of when the task completes.
///
/// Returns whether the task is over (its output, if any, dropped here), so that `detach` has
/// nothing left to drop. Out of line: a handle dropped right after its spawn (a detached task)
/// never gets here.
#[inline(never)]
fn drop_output<T>(task: &mut FallibleTask<TaskOutput<T>, TaskMeta>, meta: &TaskMeta) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(task).poll(&mut cx) {
        Poll::Ready(Some(out)) => {
            // The task's future, and its name, are gone: the report names its id.
            drop_reporting(out.into_inner(), &*meta.group, Some((meta.id(), None)));
            true
        }
        Poll::Ready(None) => true,
        Poll::Pending => false,
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

thread_local! {
    /// While a nested `block_on` probes its future: the task of the last `JoinHandle` that
    /// returned `Pending` on this thread (0: none). Null-free `usize` so the cell needs no
    /// destructor.
    static AWAITED: Cell<Option<usize>> = const { Cell::new(None) };
}

fn note_awaited(id: usize) {
    let _ = AWAITED.try_with(|a| {
        if a.get().is_some() {
            a.set(Some(id));
        }
    });
}

/// Starts recording which task the next polls wait for (see `worker::block_on`).
pub(crate) fn start_probe() {
    let _ = AWAITED.try_with(|a| a.set(Some(0)));
}

/// Stops recording; returns the task a `JoinHandle` polled since `start_probe` waits for.
pub(crate) fn end_probe() -> Option<usize> {
    AWAITED
        .try_with(|a| a.take())
        .ok()
        .flatten()
        .filter(|&id| id != 0)
}
