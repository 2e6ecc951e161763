//! What rondo stores beside each future, and what a task needs from the set it belongs to.
//!
//! A task is an `async_task` allocation holding a [`TaskFuture`](super::future::TaskFuture) and a
//! [`TaskMeta`]. The metadata lives as long as the allocation, which is at least as long as the
//! future, so the future borrows it.
//!
//! # Who owns a task
//! Every task belongs to an *owner* (a fairness group) that counts it, can reach it while it is
//! idle, and may cancel it. This layer only needs the [`Owner`] behaviour; which type plays the
//! part is named by the layer above through [`Binding`], so the task layer imports nothing from
//! the layers built on it and every call is still static (no vtable, no generic parameter on the
//! public types).

use std::any::Any;
use std::sync::Arc;
use std::task::Waker;

use crate::shim::{AtomicU32, AtomicUsize, Ordering};

use super::dump::DumpTable;
use super::hooks::{self, Id, TaskHooks};
use super::names;

/// A panic payload, as `catch_unwind` returns it.
pub(crate) type Payload = Box<dyn Any + Send + 'static>;

/// `TaskMeta::slot` of a task that has no entry in its owner's registry of idle tasks.
const UNREGISTERED: usize = usize::MAX;

/// How a task ended, as its owner counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Dropped before completing: aborted, group cancelled, or runtime shut down.
    Cancelled,
    Completed,
    Panicked,
}

/// What a task needs from the set that owns it.
pub(crate) trait Owner: Send + Sync + Sized + 'static {
    /// A poll returned `Pending` and the task has no registry entry yet: store its waker so that
    /// cancellation and shutdown can reach it while it is idle.
    fn register_idle(&self, meta: &TaskMeta, waker: &Waker);
    /// The task's future was dropped (completed, panicked or cancelled): count it, forget its
    /// entry.
    fn finished(&self, meta: &TaskMeta, outcome: Outcome);
    /// Wakes the task if it is registered as idle (used by `abort`).
    fn wake_idle(&self, meta: &TaskMeta);
    /// A copy of the task's waker if it is registered as idle (used by `AbortHandle::abort`,
    /// which wakes it after releasing its own lock).
    fn idle_waker(&self, meta: &TaskMeta) -> Option<Waker>;
    /// True once the whole set was cancelled.
    fn is_cancelled(&self) -> bool;
    /// Reports a panic caught in the task's future, its destructor or its output's destructor;
    /// `task` is the task, where the reporting code knows it (for its id and name).
    fn report_panic(&self, payload: &(dyn Any + Send), task: Option<TaskRef<'_>>);
    /// Whether `report_panic` goes anywhere (a hook is installed).
    fn reports_panics(&self) -> bool;
    /// Runs `f` (the destructor of a task's unfinished future) with `this` as the current set, as
    /// during a poll of the task: the future is the task's code wherever it is dropped (a worker,
    /// the thread shutting the runtime down, a thread whose push found the queues closed), so what
    /// it spawns joins its set instead of whatever runtime that thread has current.
    fn as_current<R>(this: &Arc<Self>, f: impl FnOnce() -> R) -> R;
    /// The set's name, as hooks and panic reports show it.
    fn owner_name(&self) -> &str;
    /// The set's id, unique among its runtime's sets.
    fn owner_id(&self) -> u64;
    /// The runtime's task hooks, or `None` when it has none (looked up only for tasks marked at
    /// their spawn, see `hooks`).
    fn task_hooks(&self) -> Option<&TaskHooks>;
    /// Whether the runtime has task hooks (or the task dump): a copy the set keeps beside its
    /// task counts, so a spawn tests one byte it already has in cache.
    fn has_task_hooks(&self) -> bool;
}

/// Names the type that owns tasks. Implemented once, by the group layer, for [`Tasks`].
pub(crate) trait Binding {
    type Owner: Owner;
}

/// The carrier of [`Binding`]: `<Tasks as Binding>::Owner` is the task owner type.
pub(crate) struct Tasks;

/// The type that owns tasks (a fairness group).
pub(crate) type OwnerOf = <Tasks as Binding>::Owner;

/// What a task's `Runnable` carries besides the future.
pub(crate) struct TaskMeta {
    /// The set the task belongs to, for routing, accounting and cancellation.
    pub(crate) group: Arc<OwnerOf>,
    /// `ABORTED`, set once by `JoinHandle::abort` and never cleared (a set flag means: drop, do
    /// not poll); `ABORTABLE`, set once by `JoinHandle::abort_handle`; `EXTRAS` and `NAMED`, set
    /// by the spawner before the task is queued (see
    /// [`has_extras`](Self::has_extras)). In the padding beside the group's pointer: free.
    flags: AtomicU32,
    /// Where the task's waker sits in its owner's registry, or `UNREGISTERED`. Written by the
    /// task's first poll that returns `Pending`, and reset to `UNREGISTERED` when its future is
    /// dropped, so a later `abort` cannot reach a slot reused by another task. While the future
    /// lives, a slot also says the task has waited before ([`has_waited`](Self::has_waited)).
    slot: AtomicUsize,
}

/// `TaskMeta::flags`: the task was aborted.
const ABORTED: u32 = 1;
/// `TaskMeta::flags`: the task's polls and end take the path that runs hooks and forgets names.
const EXTRAS: u32 = 2;
/// `TaskMeta::flags`: the task has an entry in the table of names.
const NAMED: u32 = 4;

/// `TaskMeta::flags`: the task has an abort cell (`task::abort`): its `JoinHandle`'s drop goes
/// through it.
const ABORTABLE: u32 = 8;

/// A task's name, as `task::Builder` hands it to the spawn path.
pub(crate) struct TaskName(pub(crate) String);

/// A task as a panic report names it: its id, and its name while its future lives.
pub(crate) type TaskRef<'a> = (Id, Option<&'a str>);

impl TaskMeta {
    #[inline(always)]
    pub(crate) fn new(group: Arc<OwnerOf>) -> Self {
        TaskMeta {
            group,
            flags: AtomicU32::new(0),
            slot: AtomicUsize::new(UNREGISTERED),
        }
    }

    /// The task's id: the address of this metadata (see `hooks`).
    #[inline]
    pub(crate) fn id(&self) -> Id {
        Id::from_addr(task_id(self))
    }

    /// Names the task (its spawner, after creating it and before queueing it).
    #[cold]
    #[inline(never)]
    pub(crate) fn set_name(&self, name: TaskName) {
        names::insert(task_id(self), name.0);
        self.flags.fetch_or(EXTRAS | NAMED, Ordering::Relaxed);
    }

    /// A copy of the task's name, if it was given one and its future lives.
    pub(crate) fn name(&self) -> Option<String> {
        if self.flags.load(Ordering::Relaxed) & NAMED == 0 {
            return None;
        }
        names::get(task_id(self))
    }

    /// True if the task has a name, or was spawned while a runtime of the process has task
    /// hooks: its polls and its end then take the path that runs hooks and forgets names. One
    /// load and test of a word in the metadata's first line.
    #[inline(always)]
    pub(crate) fn has_extras(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & EXTRAS != 0
    }

    /// At the spawn, while a runtime of the process has hooks: marks the task so that its polls
    /// and its end look for them, and runs the spawn hook. The spawner holds the task.
    #[cold]
    #[inline(never)]
    pub(crate) fn spawned_with_hooks(&self) {
        self.flags.fetch_or(EXTRAS, Ordering::Relaxed);
        if let Some(dump) = self.dump_table() {
            dump.spawned(task_id(self), self.name(), self.group.clone());
        }
        self.run_hook(|h| h.on_spawn.as_ref());
    }

    /// Whether the task's runtime has task hooks or the task dump (one byte of its group).
    #[inline(always)]
    pub(crate) fn runtime_has_hooks(&self) -> bool {
        self.group.has_task_hooks()
    }

    /// The task dump's table of the task's runtime, if it keeps one (`task::dump`).
    #[inline]
    pub(crate) fn dump_table(&self) -> Option<&DumpTable> {
        self.group.task_hooks().and_then(|h| h.dump.as_deref())
    }

    /// A wake scheduled the task while it was not running: it is queued in the task dump. Only
    /// tasks of a runtime with the dump have a schedule function that calls this (`task::create`).
    #[cold]
    #[inline(never)]
    pub(crate) fn woken_for_dump(&self) {
        if let Some(dump) = self.dump_table() {
            dump.woken(task_id(self));
        }
    }

    /// As the task's future is dropped (by its holder), for a task with
    /// [`has_extras`](Self::has_extras): runs the end hook, removes the task from the task dump,
    /// then forgets the name.
    #[cold]
    #[inline(never)]
    pub(crate) fn end_extras(&self) {
        self.run_hook(|h| h.on_terminate.as_ref());
        if let Some(dump) = self.dump_table() {
            dump.ended(task_id(self));
        }
        if self.flags.load(Ordering::Relaxed) & NAMED != 0 {
            names::remove(task_id(self));
        }
    }

    /// Runs the hook `pick` chooses from the task's runtime's hooks, with this task's view, if
    /// that runtime has it. Out of line and cold: callers first test
    /// [`runtime_has_hooks`](Self::runtime_has_hooks) or [`has_extras`](Self::has_extras).
    #[cold]
    #[inline(never)]
    pub(crate) fn run_hook(&self, pick: fn(&TaskHooks) -> Option<&hooks::TaskCallback>) {
        if self.group.task_hooks().and_then(pick).is_some() {
            let name = self.name();
            self.run_hook_named(pick, name.as_deref());
        }
    }

    /// `run_hook` with the name given: the after-poll hook's, taken before the poll, since the
    /// poll may end the future and its name.
    #[cold]
    #[inline(never)]
    pub(crate) fn run_hook_named(
        &self,
        pick: fn(&TaskHooks) -> Option<&hooks::TaskCallback>,
        name: Option<&str>,
    ) {
        if let Some(hook) = self.group.task_hooks().and_then(pick) {
            let group = &*self.group;
            let view = hooks::TaskMeta::new(self.id(), name, group.owner_name(), group.owner_id());
            hooks::call(hook, &view);
        }
    }

    /// Records that the task has an abort cell (`task::abort`); its `JoinHandle` holds the task.
    pub(crate) fn mark_abortable(&self) {
        self.flags.fetch_or(ABORTABLE, Ordering::Relaxed);
    }

    /// True if the task has (or had) an abort cell. Read by its `JoinHandle` as it drops, which
    /// made the cell itself or through a shared borrow (so the mark happened before).
    #[inline]
    pub(crate) fn is_abortable(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & ABORTABLE != 0
    }

    /// Before a poll: whether the task must be dropped instead ([`is_cancelled`]) and whether its
    /// poll takes the hooks' path ([`has_extras`]), from one load of the flags.
    ///
    /// [`is_cancelled`]: Self::is_cancelled
    /// [`has_extras`]: Self::has_extras
    #[inline(always)]
    pub(crate) fn cancelled_and_extras(&self) -> (bool, bool) {
        let flags = self.flags.load(Ordering::SeqCst);
        (
            flags & ABORTED != 0 || self.group.is_cancelled(),
            flags & EXTRAS != 0,
        )
    }

    /// True when the task must be dropped instead of polled.
    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.flags.load(Ordering::SeqCst) & ABORTED != 0 || self.group.is_cancelled()
    }

    /// Where the task's waker sits in its owner's registry, if it has an entry there (its owner's
    /// protocol gives the ordering).
    #[inline]
    pub(crate) fn slot(&self, order: Ordering) -> Option<usize> {
        match self.slot.load(order) {
            UNREGISTERED => None,
            slot => Some(slot),
        }
    }

    /// Records the task's entry at `slot` in its owner's registry (its first `Pending`). SeqCst:
    /// the registration's half of the pair with `abort`, which stores its flag, then reads this.
    #[inline]
    pub(crate) fn set_slot(&self, slot: usize) {
        self.slot.store(slot, Ordering::SeqCst);
    }

    /// Forgets the task's entry as its future is dropped. A plain store: only whoever holds the
    /// task writes the slot, and a racing `abort` that read the old one finds another task's
    /// entry or none, and wakes nobody.
    #[inline]
    pub(crate) fn clear_slot(&self) {
        self.slot.store(UNREGISTERED, Ordering::Relaxed);
    }

    /// True if the task has an entry in its owner's registry. Read by the task's own poll, which
    /// alone registers it, so a plain load is exact.
    #[inline]
    pub(crate) fn is_registered(&self) -> bool {
        self.slot.load(Ordering::Relaxed) != UNREGISTERED
    }

    /// True if the task returned `Pending` before (and its future lives): its first `Pending`
    /// registered it with its owner, and only its end removes the entry. The lane's rule for a
    /// task woken from outside (`fair::lane`: a new task never takes the lane). The same word as
    /// the registry's slot, so it costs the task nothing; a task whose owner refused its
    /// registration (shutdown) reads as new, which only sends it to its group's queue.
    #[inline]
    pub(crate) fn has_waited(&self) -> bool {
        self.slot.load(Ordering::Relaxed) != UNREGISTERED
    }

    /// Marks the task aborted and wakes it if it is idle, so a worker drops it on its next turn.
    ///
    /// Store, then read the slot: either this sees the task's entry, or the task, registering,
    /// sees the flag and wakes itself (the registry's half of the pair).
    pub(crate) fn abort(&self) {
        self.flags.fetch_or(ABORTED, Ordering::SeqCst);
        self.group.wake_idle(self);
    }

    /// `abort` for a caller holding a lock: marks the task aborted and returns its waker if it is
    /// idle, for the caller to wake once the lock is released (the same pair as `abort`'s).
    pub(crate) fn abort_deferred(&self) -> Option<Waker> {
        self.flags.fetch_or(ABORTED, Ordering::SeqCst);
        self.group.idle_waker(self)
    }
}

/// Where `JoinHandle::abort` and the registry identify a task: the address of its metadata,
/// stable for the task's whole life.
#[inline]
pub(crate) fn task_id(meta: &TaskMeta) -> usize {
    meta as *const TaskMeta as usize
}

/// The runnable half of a task, as the workers move it.
pub(crate) type Runnable = async_task::Runnable<TaskMeta>;
