//! `JoinHandle`, `JoinError` and `TaskPanic`: what a spawner gets back.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use async_task::FallibleTask;

use crate::coop;
use crate::shim::Ordering;
use crate::task::{Payload, TaskMeta};

/// An owned permission to await a spawned task's output.
///
/// Awaiting it yields `Ok(output)`, or a [`JoinError`] if the task panicked or was cancelled.
/// Dropping it detaches the task, which keeps running. [`abort`](JoinHandle::abort) cancels it.
///
/// ```
/// rondo::block_on(async {
///     let h = rondo::spawn(async { 6 * 7 });
///     assert_eq!(h.await.unwrap(), 42);
/// });
/// ```
pub struct JoinHandle<T> {
    task: Option<FallibleTask<Result<T, Payload>, TaskMeta>>,
    /// The task's metadata, inside the allocation that `task` keeps alive.
    meta: NonNull<TaskMeta>,
}

// SAFETY: the handle only reads `meta` through atomics and `Sync` types (`TaskMeta` is `Sync`),
// and moves the output `T` out when it completes, so it may move to and be shared with another
// thread whenever `T` may be sent.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: every `&self` method (`abort`, `is_finished`) only touches atomics and mutex-protected
// state; the output is only reached through `&mut self` (poll).
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T> Unpin for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    pub(crate) fn new(task: async_task::Task<Result<T, Payload>, TaskMeta>) -> Self {
        let meta = NonNull::from(task.metadata());
        JoinHandle {
            task: Some(task.fallible()),
            meta,
        }
    }

    fn meta(&self) -> &TaskMeta {
        // SAFETY: `self.task` holds the task's handle reference until `self` drops, so the
        // allocation (and the metadata inside it) outlives this borrow of `self`.
        unsafe { self.meta.as_ref() }
    }

    /// Cancels the task. A queued task is dropped without running; a running one is dropped at
    /// its next suspension point. The future is always dropped by a worker, never inline here.
    /// Awaiting the handle then yields a [`JoinError`] with [`is_cancelled`](JoinError::is_cancelled),
    /// unless the task had already completed, in which case its output is kept.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(std::future::pending::<()>());
    ///     h.abort();
    ///     assert!(h.await.unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn abort(&self) {
        let meta = self.meta();
        // Store, then read the slot (see `registry`): either this sees the task's entry, or the
        // task, registering, sees the flag and wakes itself.
        meta.aborted.store(true, Ordering::SeqCst);
        meta.group.registry.wake(meta.slot.load(Ordering::SeqCst));
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
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        let task = self
            .task
            .as_mut()
            .expect("JoinHandle polled after it returned Ready: poll it to completion only once");
        match Pin::new(task).poll(cx) {
            Poll::Pending => {
                coop::refund();
                Poll::Pending
            }
            Poll::Ready(Some(Ok(v))) => Poll::Ready(Ok(v)),
            Poll::Ready(Some(Err(p))) => Poll::Ready(Err(JoinError {
                repr: Repr::Panic(SyncPayload(p)),
            })),
            Poll::Ready(None) => Poll::Ready(Err(JoinError {
                repr: Repr::Cancelled,
            })),
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.detach();
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Why a task produced no output: it panicked, or it was cancelled.
///
/// ```
/// rondo::block_on(async {
///     let err = rondo::spawn(async { panic!("oops") }).await.unwrap_err();
///     assert!(err.is_panic());
///     assert_eq!(err.to_string(), "task panicked: oops");
///     let payload = err.into_panic();
///     assert_eq!(payload.downcast_ref::<&str>(), Some(&"oops"));
/// });
/// ```
pub struct JoinError {
    repr: Repr,
}

enum Repr {
    Cancelled,
    Panic(SyncPayload),
}

/// A panic payload that is never shared by reference, so the error can be `Sync`.
struct SyncPayload(Payload);

// SAFETY: no `&SyncPayload` ever gives access to the payload: it is only read through `&mut` or by
// value (`into_panic`) and formatted via `panic_message`, which downcasts to `&str`/`String`
// (both `Sync`).
unsafe impl Sync for SyncPayload {}

impl JoinError {
    /// True if the task was cancelled (aborted, its group cancelled, or the runtime shut down).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(std::future::pending::<()>());
    ///     h.abort();
    ///     assert!(h.await.unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, Repr::Cancelled)
    }

    /// True if the task panicked.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let err = rondo::spawn(async { panic!("x") }).await.unwrap_err();
    ///     assert!(err.is_panic());
    /// });
    /// ```
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, Repr::Panic(_))
    }

    /// The panic payload.
    ///
    /// # Panics
    /// If the task was cancelled rather than panicking; check [`is_panic`](Self::is_panic) or use
    /// [`try_into_panic`](Self::try_into_panic).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let err = rondo::spawn(async { std::panic::panic_any(7u32) }).await.unwrap_err();
    ///     assert_eq!(err.into_panic().downcast_ref::<u32>(), Some(&7));
    /// });
    /// ```
    pub fn into_panic(self) -> Box<dyn Any + Send + 'static> {
        self.try_into_panic()
            .expect("JoinError::into_panic called on a cancelled task: check is_panic() first")
    }

    /// The panic payload, or the error itself if the task was cancelled.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(std::future::pending::<()>());
    ///     h.abort();
    ///     let err = h.await.unwrap_err();
    ///     assert!(err.try_into_panic().unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn try_into_panic(self) -> Result<Box<dyn Any + Send + 'static>, JoinError> {
        match self.repr {
            Repr::Panic(p) => Ok(p.0),
            Repr::Cancelled => Err(self),
        }
    }
}

pub(crate) fn panic_message(p: &(dyn Any + Send)) -> Option<&str> {
    p.downcast_ref::<&'static str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::Cancelled => f.write_str("task was cancelled"),
            Repr::Panic(p) => match panic_message(&*p.0) {
                Some(m) => write!(f, "task panicked: {m}"),
                None => f.write_str("task panicked"),
            },
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::Cancelled => f.write_str("JoinError::Cancelled"),
            Repr::Panic(p) => write!(f, "JoinError::Panic({:?})", panic_message(&*p.0)),
        }
    }
}

impl std::error::Error for JoinError {}

/// A task panic, as the [`on_task_panic`](crate::Builder::on_task_panic) hook sees it.
pub struct TaskPanic<'a> {
    pub(crate) payload: &'a (dyn Any + Send),
    pub(crate) group: &'a str,
}

impl TaskPanic<'_> {
    /// The panic payload (the value passed to `panic!`).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let seen = Arc::new(Mutex::new(None));
    /// let s = seen.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_panic(move |p| *s.lock().unwrap() = p.payload().downcast_ref::<u8>().copied())
    ///     .build()
    ///     .unwrap();
    /// let _ = rt.block_on(rt.spawn(async { std::panic::panic_any(3u8) }));
    /// assert_eq!(*seen.lock().unwrap(), Some(3));
    /// ```
    pub fn payload(&self) -> &(dyn Any + Send) {
        self.payload
    }

    /// The panic message, when the payload is a string.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let seen = Arc::new(Mutex::new(String::new()));
    /// let s = seen.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_panic(move |p| *s.lock().unwrap() = p.message().unwrap_or("").to_string())
    ///     .build()
    ///     .unwrap();
    /// let _ = rt.block_on(rt.spawn(async { panic!("out of cheese") }));
    /// assert_eq!(*seen.lock().unwrap(), "out of cheese");
    /// ```
    pub fn message(&self) -> Option<&str> {
        panic_message(self.payload)
    }

    /// The name of the group the task belonged to (`"default"` for the default group).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let seen = Arc::new(Mutex::new(String::new()));
    /// let s = seen.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_panic(move |p| *s.lock().unwrap() = p.group_name().to_string())
    ///     .build()
    ///     .unwrap();
    /// let g = rt.group().name("jobs").build().unwrap();
    /// let _ = rt.block_on(g.spawn(async { panic!("boom") }));
    /// assert_eq!(*seen.lock().unwrap(), "jobs");
    /// ```
    pub fn group_name(&self) -> &str {
        self.group
    }
}

impl fmt::Debug for TaskPanic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskPanic")
            .field("message", &self.message())
            .field("group", &self.group)
            .finish()
    }
}
