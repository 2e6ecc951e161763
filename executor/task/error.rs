//! `JoinError` and `TaskPanic`: how a task failed, as its spawner and the panic hook see it.

use std::any::Any;
use std::fmt;

use super::meta::Payload;

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

impl JoinError {
    pub(crate) fn cancelled() -> Self {
        JoinError {
            repr: Repr::Cancelled,
        }
    }

    pub(crate) fn panic(payload: Payload) -> Self {
        JoinError {
            repr: Repr::Panic(SyncPayload(payload)),
        }
    }
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
    #[track_caller]
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
