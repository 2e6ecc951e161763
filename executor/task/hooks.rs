//! Task identity and the runtime's task hooks: [`Id`], the hooks' view of a task ([`TaskMeta`]),
//! and the set of hooks a runtime was built with ([`TaskHooks`]).
//!
//! # Protocol
//! 1. A task's id is the address of its metadata inside its allocation: it costs no counter, no
//!    atomic and no byte, and it is unique among the tasks alive at one time (the guarantee
//!    tokio gives for its ids). An id may come back for a task spawned after another ended.
//! 2. A task's name, if it was given one ([`Builder::name`](crate::task::Builder::name)), lives
//!    in a table beside the tasks (`task/names.rs`), entered by the spawner before the task is
//!    queued and removed as the task's future is dropped; a flag in the metadata's padding says
//!    the task has one, so an unnamed task spends no byte and no look-up on names. What needs the
//!    name after the future is gone gets a copy: the after-poll hook (taken before the poll) and
//!    a panicked task's `JoinError` (carried in the panic's payload).
//! 3. A runtime without hooks stores no hook set at all. Each group keeps a copy of whether its
//!    runtime has one, written when the group is built (the hooks never change after the
//!    runtime is built). A spawn tests it (one byte of the group it already holds) and, only
//!    when it is set, makes the task out of line: it names it, marks its metadata and
//!    runs the spawn hook. A poll tests the mark (in the load of the metadata's first line that
//!    reads the abort flag), and so does the drop of a task's future; only when it is set do
//!    they look up their runtime's hooks, out of line. A wake tests nothing: only a task of a
//!    runtime with the task dump has a schedule function that records its wakes
//!    (`task::create`).
//! 4. With a set, `on_task_spawn` runs on the spawning thread after the task exists and before it
//!    is queued; `on_before_task_poll` and `on_after_task_poll` run on the worker around each poll
//!    of a task (not around the drop of a cancelled one); `on_task_terminate` runs once per task,
//!    on the thread that drops its future (completed, panicked or cancelled), after the future's
//!    destructor and before the task's group counts it as finished. A panic inside a hook is
//!    caught and ignored.

use std::fmt;
use std::num::NonZeroU64;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A task's id: unique among the tasks alive at one time (as tokio's `task::Id`); a task spawned
/// after another ended may get that task's id again. Ids are not ordered by spawn time.
///
/// ```
/// rondo::block_on(async {
///     let a = rondo::spawn(std::future::pending::<()>());
///     let b = rondo::spawn(std::future::pending::<()>());
///     assert_ne!(a.id(), b.id());
///     assert!(!a.id().to_string().is_empty());
///     a.abort();
///     b.abort();
/// });
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(NonZeroU64);

impl Id {
    /// The id of the task whose metadata is at `addr` (never null).
    pub(crate) fn from_addr(addr: usize) -> Self {
        Id(NonZeroU64::new(addr as u64).unwrap_or(NonZeroU64::MIN))
    }

    /// The id as a number.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(async {});
    ///     assert_ne!(h.id().as_u64(), 0);
    ///     h.await.unwrap();
    /// });
    /// ```
    pub fn as_u64(&self) -> u64 {
        self.0.get()
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.0)
    }
}

/// What a task hook sees of a task (tokio's `runtime::TaskMeta`): its id, its name and its group.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let s = seen.clone();
/// let rt = rondo::Runtime::builder()
///     .on_task_spawn(move |t| {
///         s.lock().unwrap().push((t.name().map(String::from), t.group_name().to_string()))
///     })
///     .build()
///     .unwrap();
/// let h = rondo::task::Builder::new().name("worker").spawn_on(async {}, rt.handle()).unwrap();
/// rt.block_on(h).unwrap();
/// assert_eq!(seen.lock().unwrap()[0], (Some("worker".to_string()), "default".to_string()));
/// ```
pub struct TaskMeta<'a> {
    id: Id,
    name: Option<&'a str>,
    group: &'a str,
    group_id: u64,
}

impl<'a> TaskMeta<'a> {
    pub(crate) fn new(id: Id, name: Option<&'a str>, group: &'a str, group_id: u64) -> Self {
        TaskMeta {
            id,
            name,
            group,
            group_id,
        }
    }

    /// The task's id (see [`Id`]).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let ids = Arc::new(Mutex::new(Vec::new()));
    /// let i = ids.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_spawn(move |t| i.lock().unwrap().push(t.id()))
    ///     .build()
    ///     .unwrap();
    /// let h = rt.spawn(async {});
    /// let id = h.id();
    /// rt.block_on(h).unwrap();
    /// assert_eq!(*ids.lock().unwrap(), [id]);
    /// ```
    pub fn id(&self) -> Id {
        self.id
    }

    /// The name given with [`Builder::name`](crate::task::Builder::name), or `None`.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let names = Arc::new(Mutex::new(Vec::new()));
    /// let n = names.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_terminate(move |t| n.lock().unwrap().push(t.name().map(String::from)))
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(rt.spawn(async {})).unwrap();
    /// assert_eq!(*names.lock().unwrap(), [None]);
    /// ```
    pub fn name(&self) -> Option<&'a str> {
        self.name
    }

    /// The name of the task's group (`"default"` for the runtime's default group).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let groups = Arc::new(Mutex::new(Vec::new()));
    /// let g = groups.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_spawn(move |t| g.lock().unwrap().push(t.group_name().to_string()))
    ///     .build()
    ///     .unwrap();
    /// let jobs = rt.group().name("jobs").build().unwrap();
    /// rt.block_on(jobs.spawn(async {})).unwrap();
    /// assert_eq!(*groups.lock().unwrap(), ["jobs"]);
    /// ```
    pub fn group_name(&self) -> &'a str {
        self.group
    }

    /// The id of the task's group ([`Group::id`](crate::Group::id)).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let ids = Arc::new(Mutex::new(Vec::new()));
    /// let i = ids.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_spawn(move |t| i.lock().unwrap().push(t.group_id()))
    ///     .build()
    ///     .unwrap();
    /// let g = rt.group().build().unwrap();
    /// rt.block_on(g.spawn(async {})).unwrap();
    /// assert_eq!(*ids.lock().unwrap(), [g.id()]);
    /// ```
    pub fn group_id(&self) -> u64 {
        self.group_id
    }
}

impl fmt::Debug for TaskMeta<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskMeta")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("group", &self.group)
            .finish()
    }
}

/// One task hook.
pub(crate) type TaskCallback = Arc<dyn Fn(&TaskMeta<'_>) + Send + Sync + 'static>;

/// The task hooks a runtime was built with; a runtime with none stores no set at all.
#[derive(Default, Clone)]
pub(crate) struct TaskHooks {
    pub(crate) on_spawn: Option<TaskCallback>,
    pub(crate) on_terminate: Option<TaskCallback>,
    pub(crate) before_poll: Option<TaskCallback>,
    pub(crate) after_poll: Option<TaskCallback>,
    /// The table of live tasks, on a runtime built with the task dump (`task::dump`).
    pub(crate) dump: Option<Arc<super::dump::DumpTable>>,
}

impl TaskHooks {
    /// True if no hook is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.on_spawn.is_none()
            && self.on_terminate.is_none()
            && self.before_poll.is_none()
            && self.after_poll.is_none()
            && self.dump.is_none()
    }
}

/// Runs `hook` with `meta`; a panic inside it is caught and dropped, so a hook never takes down
/// the thread that runs it.
#[inline(never)]
pub(crate) fn call(hook: &TaskCallback, meta: &TaskMeta<'_>) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| hook(meta))) {
        super::future::drop_payload(p);
    }
}
