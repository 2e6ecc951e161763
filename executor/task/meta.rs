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

use crate::shim::{AtomicBool, AtomicUsize, Ordering};

use super::hooks::{self, Id, TaskHooks};

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
    /// The runtime's task hooks, or `None` when it has none (the one test a spawn, a task's end
    /// and a poll pay without hooks).
    fn task_hooks(&self) -> Option<&TaskHooks>;
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
    /// Set once by `JoinHandle::abort`; never cleared. A set flag means: drop, do not poll.
    aborted: AtomicBool,
    /// Where the task's waker sits in its owner's registry, or `UNREGISTERED`. Written by the
    /// task's first poll that returns `Pending`, and reset to `UNREGISTERED` when its future is
    /// dropped, so a later `abort` cannot reach a slot reused by another task. While the future
    /// lives, a slot also says the task has waited before ([`has_waited`](Self::has_waited)).
    slot: AtomicUsize,
    /// The name given with `task::Builder::name` (`Box::into_raw`), null for an unnamed task.
    /// It belongs to the task's future: read only by whoever holds the future (the spawner
    /// before the task is queued, the worker polling it, the thread dropping it), and freed when
    /// the future is dropped ([`take_name`](Self::take_name)). A plain pointer, so the metadata
    /// has no destructor beyond its group's `Arc`: an unnamed task pays one null store at its
    /// spawn and one test at its end. Atomic only so that the metadata stays `Sync`; every access
    /// is by the future's holder, in its order.
    name: std::sync::atomic::AtomicPtr<TaskName>,
}

/// A task's name, behind one thin pointer in its metadata.
pub(crate) struct TaskName(pub(crate) String);

/// The name pointer of an unnamed task spawned while a runtime with hooks exists (see
/// `TaskMeta::has_extras`): not null, never freed, read as no name.
static HOOKED: TaskName = TaskName(String::new());

fn hooked() -> *mut TaskName {
    std::ptr::addr_of!(HOOKED).cast_mut()
}

/// A task as a panic report names it: its id, and its name while its future lives.
pub(crate) type TaskRef<'a> = (Id, Option<&'a str>);

impl TaskMeta {
    #[inline(always)]
    pub(crate) fn new(group: Arc<OwnerOf>) -> Self {
        TaskMeta {
            group,
            aborted: AtomicBool::new(false),
            slot: AtomicUsize::new(UNREGISTERED),
            name: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The metadata of a task called `name` (`None`: unnamed).
    pub(crate) fn named(group: Arc<OwnerOf>, name: Option<Box<TaskName>>) -> Self {
        let meta = Self::new(group);
        if let Some(name) = name {
            meta.name
                .store(Box::into_raw(name), std::sync::atomic::Ordering::Relaxed);
        }
        meta
    }

    /// The task's id: the address of this metadata (see `hooks`).
    #[inline]
    pub(crate) fn id(&self) -> Id {
        Id::from_addr(task_id(self))
    }

    /// The task's name, if it was given one.
    ///
    /// # Safety
    /// The caller holds the task's future (see the field), which is not dropped while the
    /// returned borrow lives.
    #[inline]
    pub(crate) unsafe fn name(&self) -> Option<&str> {
        let p = self.name.load(std::sync::atomic::Ordering::Relaxed);
        if p == hooked() {
            return None;
        }
        // SAFETY: `p` is null or came from `Box::into_raw` in `named`; it is freed only by
        // `end_extras` when the future is dropped, which the caller's hold on the future precedes
        // (this function's contract).
        unsafe { p.as_ref() }.map(|n| n.0.as_str())
    }

    /// The task as a panic report names it; see [`name`](Self::name) for the contract.
    #[inline]
    pub(crate) unsafe fn as_ref_named(&self) -> TaskRef<'_> {
        // SAFETY: the caller's contract is `name`'s.
        (self.id(), unsafe { self.name() })
    }

    /// True if the task has a name, or was spawned while a runtime of the process has task
    /// hooks: its polls and its end then take the path that runs hooks and frees names. One
    /// load and test, of a word its holder reads anyway.
    #[inline(always)]
    pub(crate) fn has_extras(&self) -> bool {
        !self
            .name
            .load(std::sync::atomic::Ordering::Relaxed)
            .is_null()
    }

    /// At the spawn, while a runtime of the process has hooks: marks the task so that its polls
    /// and its end look for them, and runs the spawn hook. The spawner holds the future.
    #[cold]
    #[inline(never)]
    pub(crate) fn spawned_with_hooks(&self) {
        let name = &self.name;
        let ordering = std::sync::atomic::Ordering::Relaxed;
        if name.load(ordering).is_null() {
            name.store(hooked(), ordering);
        }
        self.run_hook(|h| h.on_spawn.as_ref());
    }

    /// As the task's future is dropped (by its holder), for a task with
    /// [`has_extras`](Self::has_extras): runs the end hook, then frees the name, so the metadata
    /// frees nothing later.
    #[cold]
    #[inline(never)]
    pub(crate) fn end_extras(&self) {
        self.run_hook(|h| h.on_terminate.as_ref());
        let p = self
            .name
            .swap(std::ptr::null_mut(), std::sync::atomic::Ordering::Relaxed);
        if !p.is_null() && p != hooked() {
            // SAFETY: `p` came from `Box::into_raw` in `named` and was just replaced by null, so
            // it is freed once; only the future's holder reads it, and it is dropping the future.
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// Runs the hook `pick` chooses from the task's runtime's hooks, with this task's view, if
    /// that runtime has it. Out of line and cold: callers first test [`hooks::maybe`] or
    /// [`has_extras`](Self::has_extras). The caller
    /// holds the task's future (the spawner before queueing it, the worker before its poll, the
    /// thread dropping it, before the name goes), so the name can be read.
    #[cold]
    #[inline(never)]
    pub(crate) fn run_hook(&self, pick: fn(&TaskHooks) -> Option<&hooks::TaskCallback>) {
        // SAFETY: see above.
        let name = unsafe { self.name() };
        self.run_hook_named(pick, name);
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

    /// True when the task must be dropped instead of polled.
    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.aborted.load(Ordering::SeqCst) || self.group.is_cancelled()
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
        self.aborted.store(true, Ordering::SeqCst);
        self.group.wake_idle(self);
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
