//! `JoinError` and `TaskPanic`: how a task failed, as its spawner and the panic hook see it.

use std::any::Any;
use std::fmt;

use super::future::NamedPanic;
use super::hint::{TOKIO_HINT, needs_tokio, panic_message};
use super::hooks::Id;
use super::meta::{Payload, TaskMeta, TaskRef};

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
pub struct JoinError(Box<Failed>);

/// What a `JoinError` says, boxed: a failure is rare, and one pointer keeps a task's
/// `Result<T, JoinError>` small on every successful join.
struct Failed {
    repr: Repr,
    id: Option<Id>,
    /// The task's name, copied from its metadata.
    name: Option<Box<str>>,
}

impl JoinError {
    fn new(repr: Repr) -> Self {
        JoinError(Box::new(Failed {
            repr,
            id: None,
            name: None,
        }))
    }

    pub(crate) fn cancelled() -> Self {
        Self::new(Repr::Cancelled)
    }

    pub(crate) fn panic(payload: Payload) -> Self {
        Self::new(Repr::Panic(SyncPayload(payload)))
    }

    /// The error of the task `meta` describes, for an output `out` that is a panic payload or
    /// nothing (cancelled): its id, and for a named task's panic its name, which the payload
    /// carries (the task's future, and its name, are gone). Out of line: failed joins are rare.
    #[cold]
    #[inline(never)]
    pub(crate) fn of_task(out: Option<Payload>, meta: &TaskMeta) -> Self {
        let mut e = match out {
            Some(p) => match p.downcast::<NamedPanic>() {
                Ok(named) => {
                    let NamedPanic { payload, name } = *named;
                    let mut e = Self::panic(payload);
                    e.0.name = Some(name);
                    e
                }
                Err(p) => Self::panic(p),
            },
            None => Self::cancelled(),
        };
        e.0.id = Some(meta.id());
        e
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
        matches!(self.0.repr, Repr::Cancelled)
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
        matches!(self.0.repr, Repr::Panic(_))
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
        let Failed { repr, id, name } = *self.0;
        match repr {
            Repr::Panic(p) => Ok(p.0),
            Repr::Cancelled => Err(JoinError(Box::new(Failed { repr, id, name }))),
        }
    }

    /// The id of the task that failed (tokio's `JoinError::id`).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(std::future::pending::<()>());
    ///     let id = h.id();
    ///     h.abort();
    ///     assert_eq!(h.await.unwrap_err().id(), id);
    /// });
    /// ```
    pub fn id(&self) -> Id {
        // Every error a `JoinHandle` returns names its task; `NonZeroU64::MIN` is never reached.
        self.0.id.unwrap_or(Id::from_addr(1))
    }

    /// The name of the task that panicked, if it was given one with
    /// [`Builder::name`](crate::task::Builder::name); the error then also shows the name when
    /// displayed: `task 'name' panicked: message`. `None` for a cancelled task: a task's name
    /// goes with its future (so the metadata of every task, named or not, frees nothing later),
    /// and a cancelled task's error names it by [`id`](Self::id).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::task::Builder::new().name("parser").spawn(async { panic!("bad input") });
    ///     let err = h.unwrap().await.unwrap_err();
    ///     assert_eq!(err.task_name(), Some("parser"));
    ///     assert_eq!(err.to_string(), "task 'parser' panicked: bad input");
    /// });
    /// ```
    pub fn task_name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }
}

/// `task` or `task 'name'`.
struct Subject<'a>(Option<&'a str>);

impl fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(name) => write!(f, "task '{name}'"),
            None => f.write_str("task"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let task = Subject(self.0.name.as_deref());
        match &self.0.repr {
            Repr::Cancelled => write!(f, "{task} was cancelled"),
            Repr::Panic(p) => match panic_message(&*p.0) {
                Some(m) if needs_tokio(m) => write!(f, "{task} panicked: {m}\n{TOKIO_HINT}"),
                Some(m) => write!(f, "{task} panicked: {m}"),
                None => write!(f, "{task} panicked"),
            },
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.0.repr, &self.0.name) {
            (Repr::Cancelled, None) => f.write_str("JoinError::Cancelled"),
            (Repr::Cancelled, Some(n)) => write!(f, "JoinError::Cancelled({n:?})"),
            (Repr::Panic(p), None) => write!(f, "JoinError::Panic({:?})", panic_message(&*p.0)),
            (Repr::Panic(p), Some(n)) => {
                write!(f, "JoinError::Panic({n:?}, {:?})", panic_message(&*p.0))
            }
        }
    }
}

impl std::error::Error for JoinError {}

/// A task panic, as the [`on_task_panic`](crate::Builder::on_task_panic) hook sees it.
pub struct TaskPanic<'a> {
    pub(crate) payload: &'a (dyn Any + Send),
    pub(crate) group: &'a str,
    /// The task's id and name, where the reporter knows the task (not for a panic in the
    /// destructor of an output its task dropped itself).
    pub(crate) task: Option<TaskRef<'a>>,
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

    /// The name of the task that panicked, if it was given one with
    /// [`Builder::name`](crate::task::Builder::name).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let seen = Arc::new(Mutex::new(None));
    /// let s = seen.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_panic(move |p| *s.lock().unwrap() = p.task_name().map(String::from))
    ///     .build()
    ///     .unwrap();
    /// let h = rondo::task::Builder::new().name("parser").spawn_on(async { panic!("x") }, rt.handle());
    /// let _ = rt.block_on(h.unwrap());
    /// assert_eq!(seen.lock().unwrap().as_deref(), Some("parser"));
    /// ```
    pub fn task_name(&self) -> Option<&str> {
        self.task.and_then(|(_, name)| name)
    }

    /// The id of the task that panicked. `None` only for a panic in the destructor of an output
    /// that a detached task's worker dropped, where the task is already gone.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let seen = Arc::new(Mutex::new(None));
    /// let s = seen.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_panic(move |p| *s.lock().unwrap() = p.task_id())
    ///     .build()
    ///     .unwrap();
    /// let h = rt.spawn(async { panic!("x") });
    /// let id = h.id();
    /// let _ = rt.block_on(h);
    /// assert_eq!(*seen.lock().unwrap(), Some(id));
    /// ```
    pub fn task_id(&self) -> Option<Id> {
        self.task.map(|(id, _)| id)
    }
}

/// One line: `task 'name' (id N) in group 'g' panicked: message`, and a second pointing to the
/// remedy when the message is tokio's for a missing runtime.
impl fmt::Display for TaskPanic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Subject(self.task_name()))?;
        if let Some(id) = self.task_id() {
            write!(f, " (id {id})")?;
        }
        write!(f, " in group '{}' panicked", self.group)?;
        match self.message() {
            Some(m) if needs_tokio(m) => write!(f, ": {m}\n{TOKIO_HINT}"),
            Some(m) => write!(f, ": {m}"),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for TaskPanic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskPanic")
            .field("message", &self.message())
            .field("group", &self.group)
            .field("task_id", &self.task_id())
            .field("task_name", &self.task_name())
            .finish()
    }
}
