//! The task dump: a runtime's table of live tasks, kept only when the runtime was built with
//! [`Builder::enable_task_dump`](crate::Builder::enable_task_dump), and the snapshot
//! [`Handle::dump`](crate::Handle::dump) takes of it ([`Dump`]).
//!
//! # Protocol
//! 1. The switch rides on the task hooks' path (`task::hooks`): a runtime with the dump stores a
//!    hook set holding its [`DumpTable`], as a hooked runtime stores its hooks. A spawn on it
//!    takes the out-of-line path of named and hooked tasks, which gives the task a schedule
//!    function that reports its wakes (step 4), marks it (`EXTRAS`, the flag names and hooks use)
//!    and enters it here, on the spawning thread, before it is queued, in the state `Queued`. A
//!    runtime without the switch stores no table, and its tasks pay only the tests the hooks
//!    already cost: nothing is added to a spawn, a poll or a wake.
//! 2. The table is split into shards by the task's id, each a plain lock held only to enter,
//!    update, copy or remove one entry (never while user code runs, never while a waker is
//!    called): spawns and polls on different workers meet on a shard only when their tasks hash to
//!    the same one.
//! 3. The worker sets `Running` before a poll and counts the poll (the poll's number is its
//!    ticket); after the poll, if the entry still shows `Running` with that ticket, it sets
//!    `Queued` if the task was woken during the poll (a yield, or a wake that came while it ran:
//!    the task went back to a run queue), `Idle` otherwise. A later poll on another worker has a
//!    newer ticket, which the check leaves alone.
//! 4. A wake of a task that is not running calls the task's schedule function, which sets
//!    `Queued` here before the task goes to a run queue, so no poll can start before it. Such a
//!    wake may come after the poll's future returned and before the worker's step 3: step 3 then
//!    finds `Queued`, not `Running`, and leaves it. A wake during a poll is left to step 3.
//! 5. The task's entry is removed as its future is dropped (completed, panicked or cancelled),
//!    before its group counts it finished: a dump lists exactly the tasks whose futures live.
//! 6. A dump locks one shard at a time and copies its entries, so it never stops the workers for
//!    longer than one shard's copy; it is a consistent view of each task, not of all tasks at one
//!    instant.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::hooks::Id;
use super::meta::{Owner, OwnerOf};

const SHARDS: usize = 64;

/// What a dump shows of a task: where it is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// A worker is polling it now.
    Running,
    /// In a run queue: never polled yet (spawned), woken during its last poll (a yield, or a
    /// wake that came while it ran), or woken since, and not yet polled again. A
    /// [`spawn_blocking`](crate::spawn_blocking) closure shows queued until it ends: the blocking
    /// pool's threads are not tracked.
    Queued,
    /// Its last poll returned `Pending` and nothing has woken it since: waiting for a wake.
    Idle,
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            TaskState::Running => "running",
            TaskState::Queued => "queued",
            TaskState::Idle => "idle",
        })
    }
}

/// One task's entry in the table.
struct Entry {
    name: Option<String>,
    group: Arc<OwnerOf>,
    state: TaskState,
    polls: u64,
    /// When its last poll began (`None`: never polled).
    last_poll: Option<Instant>,
}

type Shard = Mutex<HashMap<usize, Entry>>;

/// A runtime's table of live tasks (see the module docs).
pub(crate) struct DumpTable {
    shards: Box<[Shard]>,
}

impl DumpTable {
    pub(crate) fn new() -> Self {
        DumpTable {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }

    fn shard(&self, task: usize) -> MutexGuard<'_, HashMap<usize, Entry>> {
        // Metadata addresses are 8-aligned and allocations at least 64 bytes apart. Nothing
        // panics while a shard is locked, so a poisoned shard is whole.
        self.shards[(task >> 6) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Enters a task just spawned (step 1).
    pub(crate) fn spawned(&self, task: usize, name: Option<String>, group: Arc<OwnerOf>) {
        let entry = Entry {
            name,
            group,
            state: TaskState::Queued,
            polls: 0,
            last_poll: None,
        };
        self.shard(task).insert(task, entry);
    }

    /// A poll of the task begins; returns its ticket (step 3).
    pub(crate) fn poll_started(&self, task: usize) -> u64 {
        let now = Instant::now();
        match self.shard(task).get_mut(&task) {
            Some(e) => {
                e.polls += 1;
                e.state = TaskState::Running;
                e.last_poll = Some(now);
                e.polls
            }
            None => 0,
        }
    }

    /// The poll with `ticket` ended; `woken` if the task was woken during it (step 3).
    pub(crate) fn poll_ended(&self, task: usize, ticket: u64, woken: bool) {
        if let Some(e) = self.shard(task).get_mut(&task) {
            if e.polls == ticket && e.state == TaskState::Running {
                e.state = if woken {
                    TaskState::Queued
                } else {
                    TaskState::Idle
                };
            }
        }
    }

    /// A wake scheduled the task while it was not running (step 4): it waits in a run queue.
    pub(crate) fn woken(&self, task: usize) {
        if let Some(e) = self.shard(task).get_mut(&task) {
            e.state = TaskState::Queued;
        }
    }

    /// The task's future was dropped (step 5).
    pub(crate) fn ended(&self, task: usize) {
        let entry = self.shard(task).remove(&task);
        // The name and the group's reference are released outside the lock.
        drop(entry);
    }

    /// A snapshot of every live task (step 6).
    pub(crate) fn snapshot(&self) -> Dump {
        let now = Instant::now();
        let mut copied = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            copied.extend(shard.iter().map(|(&task, e)| {
                (
                    task,
                    e.name.clone(),
                    e.group.clone(),
                    e.state,
                    e.polls,
                    e.last_poll,
                )
            }));
        }
        // Group names are read, and the groups' references dropped, with no shard locked.
        let mut tasks: Vec<TaskDump> = copied
            .into_iter()
            .map(|(task, name, group, state, polls, last)| TaskDump {
                id: Id::from_addr(task),
                name,
                group_name: group.owner_name().to_string(),
                group_id: group.owner_id(),
                state,
                polls,
                since_last_poll: last.map(|t| now.saturating_duration_since(t)),
            })
            .collect();
        tasks.sort_by(|a, b| {
            (a.group_id, a.name.as_deref(), a.id).cmp(&(b.group_id, b.name.as_deref(), b.id))
        });
        Dump { tasks }
    }
}

/// A snapshot of a runtime's live tasks, taken by [`Handle::dump`](crate::Handle::dump).
///
/// Its `Display` prints a table, one line per task, ordered by group, then name:
///
/// ```text
///          id  name          group           state     polls  last poll
/// 94812345600  accept        default (0)     idle          3  1.2ms ago
/// ```
///
/// ```
/// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
/// let h = rondo::task::Builder::new()
///     .name("sleeper")
///     .spawn_on(std::future::pending::<()>(), rt.handle())
///     .unwrap();
/// let dump = rt.dump().unwrap();
/// assert_eq!(dump.tasks().len(), 1);
/// assert_eq!(dump.tasks()[0].name(), Some("sleeper"));
/// assert!(dump.to_string().contains("sleeper"));
/// h.abort();
/// ```
#[derive(Clone, Debug)]
pub struct Dump {
    tasks: Vec<TaskDump>,
}

impl Dump {
    /// The tasks, ordered by group id, then name, then id.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// assert!(rt.dump().unwrap().tasks().is_empty());
    /// ```
    pub fn tasks(&self) -> &[TaskDump] {
        &self.tasks
    }
}

impl fmt::Display for Dump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>16}  {:<20}  {:<24}  {:<7}  {:>8}  last poll",
            "id", "name", "group", "state", "polls"
        )?;
        for t in &self.tasks {
            let group = format!("{} ({})", t.group_name, t.group_id);
            let last = match t.since_last_poll {
                Some(d) => format!("{d:.1?} ago"),
                None => "never".to_string(),
            };
            writeln!(
                f,
                "{:>16}  {:<20}  {:<24}  {:<7}  {:>8}  {}",
                t.id,
                t.name.as_deref().unwrap_or("-"),
                group,
                t.state,
                t.polls,
                last
            )?;
        }
        Ok(())
    }
}

/// One task in a [`Dump`].
///
/// ```
/// use rondo::runtime::TaskState;
/// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
/// let jobs = rt.group().name("jobs").build().unwrap();
/// let h = rondo::task::Builder::new()
///     .name("job")
///     .group(&jobs)
///     .spawn(std::future::pending::<()>())
///     .unwrap();
/// // Wait for its first poll to end.
/// while rt.dump().unwrap().tasks()[0].state() != TaskState::Idle {
///     std::thread::yield_now();
/// }
/// let dump = rt.dump().unwrap();
/// let t = &dump.tasks()[0];
/// assert_eq!((t.id(), t.name(), t.group_name()), (h.id(), Some("job"), "jobs"));
/// assert_eq!(t.group_id(), jobs.id());
/// assert_eq!(t.state(), TaskState::Idle);
/// assert!(t.since_last_poll().is_some());
/// h.abort();
/// ```
#[derive(Clone, Debug)]
pub struct TaskDump {
    id: Id,
    name: Option<String>,
    group_name: String,
    group_id: u64,
    state: TaskState,
    polls: u64,
    since_last_poll: Option<Duration>,
}

impl TaskDump {
    /// The task's id, as [`JoinHandle::id`](crate::JoinHandle::id) returns it.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// assert_eq!(rt.dump().unwrap().tasks()[0].id(), h.id());
    /// h.abort();
    /// ```
    pub fn id(&self) -> Id {
        self.id
    }

    /// The name given with [`task::Builder::name`](crate::task::Builder::name), or `None`.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// assert_eq!(rt.dump().unwrap().tasks()[0].name(), None);
    /// h.abort();
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The name of the task's group (`"default"` for the runtime's default group).
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// assert_eq!(rt.dump().unwrap().tasks()[0].group_name(), "default");
    /// h.abort();
    /// ```
    pub fn group_name(&self) -> &str {
        &self.group_name
    }

    /// The id of the task's group ([`Group::id`](crate::Group::id)).
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let g = rt.group().build().unwrap();
    /// let h = g.spawn(std::future::pending::<()>());
    /// assert_eq!(rt.dump().unwrap().tasks()[0].group_id(), g.id());
    /// h.abort();
    /// ```
    pub fn group_id(&self) -> u64 {
        self.group_id
    }

    /// Where the task was when the dump copied its entry.
    ///
    /// ```
    /// use rondo::runtime::TaskState;
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let state = rt.block_on(async {
    ///     let me = rondo::spawn(async {
    ///         let dump = rondo::Handle::current().dump().unwrap();
    ///         dump.tasks()[0].state()
    ///     });
    ///     me.await.unwrap()
    /// });
    /// assert_eq!(state, TaskState::Running);
    /// ```
    pub fn state(&self) -> TaskState {
        self.state
    }

    /// How many polls of the task began so far (the one under way included).
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let polls = rt.block_on(rt.spawn(async {
    ///     rondo::yield_now().await;
    ///     rondo::Handle::current().dump().unwrap().tasks()[0].polls()
    /// }));
    /// assert_eq!(polls.unwrap(), 2);
    /// ```
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// The time from the start of the task's last poll to the dump, or `None` if it was never
    /// polled. For a running task: how long its current poll has run.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// while rt.dump().unwrap().tasks()[0].since_last_poll().is_none() {
    ///     std::thread::yield_now(); // not polled yet
    /// }
    /// h.abort();
    /// ```
    pub fn since_last_poll(&self) -> Option<Duration> {
        self.since_last_poll
    }
}

/// [`Handle::dump`](crate::Handle::dump) on a runtime built without
/// [`Builder::enable_task_dump`](crate::Builder::enable_task_dump).
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let err = rt.dump().unwrap_err();
/// assert!(err.to_string().contains("enable_task_dump"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpError(());

impl DumpError {
    pub(crate) fn disabled() -> Self {
        DumpError(())
    }
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "task dump not enabled: this runtime keeps no table of its tasks; build it with \
             Builder::enable_task_dump() to list them",
        )
    }
}

impl std::error::Error for DumpError {}
