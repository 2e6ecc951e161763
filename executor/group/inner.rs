//! `GroupInner`: a group's shared state, and what a group needs from the runtime that serves it.
//!
//! A group owns a global FIFO queue of its runnable tasks, its scheduling state (weight and virtual
//! runtime; the rules live in `fair`), an optional concurrency limiter, and the registry of its
//! unfinished tasks. Tasks hold an `Arc<GroupInner>` in their metadata, so a group lives until its
//! last handle is dropped *and* its last task is gone; it then leaves the runtime's group list and
//! its memory is freed.
//!
//! Its fields are this layer's. The layers above reach them through methods named after what they
//! do, which keep the protocols the fields take part in: a push leaves the caller the listing
//! half it owes (`after_push`, a `#[must_use]` [`Listing`]), the remover's re-check reads the
//! queue itself (`after_unlist`), the wait and service counters only rise.
//!
//! # The host
//! A group is served by a runtime, which this layer knows only as a [`Host`]: where a woken task
//! goes, whether the runtime is shutting down, its list of groups and its panic hook. The type
//! that plays the part is named by the worker layer through [`HostBinding`], so this layer imports
//! nothing from the layers above it and every call stays static.

use std::sync::{Arc, OnceLock};

use async_task::ScheduleInfo;
use event_listener::Event;

use crate::shim::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};
use crate::task::hooks::TaskHooks;
use crate::task::{Runnable, TaskPanic};

use super::delay::Delays;
use super::limiter::Limiter;
use super::list::GroupList;
use super::listed::{LaneEntry, LaneFlag, ListFlag, Listing};
use super::queue::GroupQueue;
use super::registry::Registry;
use super::tree::{Node, NodeSlot};

/// The panic hook a runtime was built with.
pub(crate) type PanicHook = Arc<dyn Fn(&TaskPanic<'_>) + Send + Sync + 'static>;

/// What a group needs from the runtime that serves it (see the module docs).
pub(crate) trait Host: Send + Sync + Sized + 'static {
    /// Where a task goes when it is spawned or woken (the schedule function of every task).
    fn schedule(r: Runnable, info: ScheduleInfo);
    /// Where a new task goes: as `schedule` would send it, called directly rather than through
    /// the task's schedule function.
    fn schedule_new(r: Runnable);
    /// True once the runtime began shutting down.
    fn is_shutdown(&self) -> bool;
    /// The runtime's list of live groups.
    fn groups(&self) -> &GroupList<GroupInner>;
    /// The runtime's `on_task_panic` hook.
    fn panic_hook(&self) -> Option<&PanicHook>;
    /// The runtime's task hooks (`on_task_spawn` and the others), `None` if it has none.
    fn task_hooks(&self) -> Option<&TaskHooks>;
    /// Tasks of `g` waiting in workers' local queues (a snapshot, for metrics).
    fn locally_queued(&self, g: &GroupInner) -> usize;
    /// Links `child`, just built, under `parent` in the scheduler's tree of groups.
    fn attach_child(&self, parent: &Arc<GroupInner>, child: &Arc<GroupInner>);
    /// Sets `g`'s CPU cap to `quota` nanoseconds of service per `CPU_PERIOD` (0: none), making
    /// it a tree's root first if it is a flat group.
    fn set_cpu_quota(&self, g: &Arc<GroupInner>, quota: u64);
}

/// Names the runtime type that hosts groups. Implemented once, by the worker layer, for [`Hosts`].
pub(crate) trait HostBinding {
    type Host: Host;
}

/// The carrier of [`HostBinding`].
pub(crate) struct Hosts;

/// The runtime's shared state, as groups see it.
pub(crate) type HostOf = <Hosts as HostBinding>::Host;

/// A group's scheduling state. The scheduler (`fair`) owns the rules; the data lives in the group
/// and is only touched under this mutex.
///
/// Packed to 8-byte alignment: a `u128` would align it to 16 and pad it from 40 bytes to 48,
/// which would take the group over its 512 bytes. Fields are read and written by value (the
/// compiler refuses a reference to a field of a packed struct).
#[repr(C, packed(8))]
pub(crate) struct GroupSched {
    /// 1 to `MAX_WEIGHT`; `GroupInner::weight_hint` holds a copy of the effective weight
    /// (`effective_weight`).
    pub(crate) weight: u32,
    /// The heaviest weight lent to the group (`GroupInner::lend_weight`: a task of the group
    /// holds what a heavier group's task waits for), 0 for none; kept until every loan returns.
    /// In the padding after `weight`.
    pub(crate) lent: u16,
    /// Loans outstanding.
    pub(crate) loans: u16,
    /// The service charged to the group, scaled by `1 / weight` (the scale is `fair`'s). Only
    /// rises; `GroupInner::vtime_hint` holds a copy in virtual nanoseconds.
    pub(crate) vruntime: u128,
    /// True while the group is in its shard's rotation, under `key_vns` and `entered`; changed
    /// under the shard's lock and this one.
    pub(crate) in_rotation: bool,
    /// The group's key in the rotation while it is in it (see `fair::rotation`): the virtual
    /// runtime it was keyed at (at most `vruntime`: charges leave the key as it is), then the
    /// rotation's entry count when it was keyed.
    pub(crate) key_vns: u64,
    pub(crate) entered: u64,
}

/// The weight the scheduler serves a group by: its own, or a heavier one lent to it.
#[inline]
pub(crate) fn effective_weight(gs: &GroupSched) -> u32 {
    let (weight, lent) = (gs.weight, gs.lent);
    weight.max(u32::from(lent))
}

/// A group's shared state, in one allocation of a few hundred bytes (one per connection must be
/// affordable).
///
/// The fields are laid out in three regions, in order, so that threads writing one region do not
/// take the cache lines another thread reads (`#[repr(C)]` keeps the order; 64-byte gaps stand in
/// for cache-line alignment, which would send every group through the allocator's slower aligned
/// path):
/// 1. Written by every spawn and completion: the registry's counters. Before them, fields that
///    no hot path touches keep them off the line of the `Arc` counts.
/// 2. Written by workers at a task's first `Pending`, a pick or a segment's end: the registry's
///    slab, the scheduling state, the service counters, and the queue's cold tier.
/// 3. Read on every push and poll, rarely written: the queue's hot pointer, the host, the flags.
#[repr(C)]
pub(crate) struct GroupInner {
    // Rarely used: a buffer between the `Arc` counts and region 1.
    /// The name given to the builder; unnamed groups format `group-N` on first use.
    name: OnceLock<String>,
    /// Notified once no task is left while `idle_waiters` is above 0 (`wait_idle`).
    pub(super) idle_event: Event,
    /// Unique among the host's groups; never changes.
    id: u64,
    /// This group's key in the host's `GroupList`.
    key: usize,
    // Region 1 (and, after its last gap, the start of region 2).
    /// Counts the group's tasks and reaches the idle ones (see `registry`).
    pub(super) registry: Registry,
    // Region 2.
    /// Written only under its lock, by the scheduler's rules (`fair`) and `Group::set_weight`.
    pub(super) sched: Mutex<GroupSched>,
    /// `sched.vruntime` in virtual nanoseconds (charged nanoseconds ÷ weight), and `sched.weight`:
    /// copies written with them under the lock, read without it where a hint is enough (may a
    /// cross-group wake run beside the served group: `fair::Scheduler::may_run_beside`).
    vtime_hint: AtomicU64,
    pub(super) weight_hint: AtomicU32,
    /// Polls of the group's tasks and nanoseconds of worker time spent on them, as the workers
    /// flushed them (`record_service`); only rise.
    pub(super) polls: AtomicU64,
    pub(super) busy_ns: AtomicU64,
    /// The group's waits with work no worker took: their sum (`GroupMetrics::wait`) and
    /// histogram (`GroupMetrics::schedule_delay`), in a record its first wait allocates.
    pub(super) delays: Delays,
    /// The clock stamp (`clock::stamp`) at which the group entered the rotation with work no
    /// worker has taken since; 0 when none waits so. Read before a worker serving the group takes
    /// from its queue, so only the time before the first take counts as waiting.
    pub(super) waiting_since: AtomicU64,
    /// Runnable tasks of this group that no worker has taken yet (FIFO). Its cold tier ends region
    /// 2; its hot pointer, after a gap, starts region 3. A task pushed here is listed by its pusher
    /// (`after_push`) unless shutdown drains the queue.
    queue: GroupQueue<Runnable>,
    // Region 3.
    /// The runtime that serves the group; the same for the group's whole life.
    pub(super) host: Arc<HostOf>,
    /// In the scheduler's rotation, or about to be inserted (see `listed`).
    listed: ListFlag,
    /// A task of this group waits in the scheduler's lane (see `fair::lane`).
    in_lane: LaneFlag,
    /// Set once by `Group::cancel`; never cleared.
    pub(super) cancelled: AtomicBool,
    /// The runtime's default group (plain spawns go there): it cannot be cancelled. Beside the
    /// flags, where it takes no padding of its own.
    pub(super) is_default: bool,
    /// The host has task hooks (or the task dump): `host.task_hooks().is_some()`, copied at
    /// creation because a spawn tests it (`task::create`).
    pub(super) has_task_hooks: bool,
    /// `wait_idle` futures currently waiting.
    pub(super) idle_waiters: AtomicUsize,
    /// Boxed: few groups have one, and it is written on every poll of the group's tasks. Never
    /// added or removed after the group is built.
    limiter: Option<Box<Limiter>>,
    /// The group's place in a tenant tree (`group::tree`): set when it is built as a child, or
    /// when it gets its first child; never removed. Flat groups have none.
    node: NodeSlot,
}

impl GroupInner {
    /// A worker took the group's work at the stamp `now()`: the time it waited since it entered
    /// the rotation, if any, counts for its metrics. A load alone when nothing waited (the clock
    /// is read only if something did).
    #[inline]
    pub(crate) fn end_wait(&self, now: impl FnOnce() -> u64) {
        if self.waiting_since.load(Ordering::Relaxed) != 0 {
            let since = self.waiting_since.swap(0, Ordering::Relaxed);
            if since != 0 {
                self.delays.record(now().saturating_sub(since));
            }
        }
    }

    /// Creates a group on `host` and adds it to the host's list. A group created once shutdown
    /// began has closed queues, so nothing can be stranded in it.
    pub(crate) fn new(
        host: &Arc<HostOf>,
        name: Option<String>,
        weight: u32,
        limiter: Option<Limiter>,
        is_default: bool,
    ) -> Arc<GroupInner> {
        host.groups().insert(|id, key| {
            let name = name.map_or_else(OnceLock::new, OnceLock::from);
            // Built inside `Arc::new`: the allocation is made first and the fields written into it,
            // not a 512-byte value assembled on the stack and copied over.
            let g = Arc::new(GroupInner {
                name,
                idle_event: Event::new(),
                id,
                key,
                is_default,
                has_task_hooks: host.task_hooks().is_some(),
                registry: Registry::new(),
                sched: Mutex::new(GroupSched {
                    weight,
                    lent: 0,
                    loans: 0,
                    vruntime: 0,
                    in_rotation: false,
                    key_vns: 0,
                    entered: 0,
                }),
                vtime_hint: AtomicU64::new(0),
                weight_hint: AtomicU32::new(weight),
                polls: AtomicU64::new(0),
                busy_ns: AtomicU64::new(0),
                delays: Delays::new(),
                waiting_since: AtomicU64::new(0),
                queue: GroupQueue::new(),
                host: host.clone(),
                listed: ListFlag::default(),
                in_lane: LaneFlag::default(),
                cancelled: AtomicBool::new(false),
                idle_waiters: AtomicUsize::new(0),
                limiter: limiter.map(Box::new),
                node: NodeSlot::default(),
            });
            if host.is_shutdown() {
                g.close();
            }
            g
        })
    }

    /// Refuses every later push to the group's queue and limiter line (shutdown): a runnable that
    /// arrives later is dropped by whoever tried to queue it.
    fn close(&self) {
        self.queue.close();
        if let Some(l) = &self.limiter {
            l.close();
        }
    }

    /// The address of the runtime hosting this group, to compare runtimes by identity.
    #[inline]
    pub(crate) fn host_addr(&self) -> *const HostOf {
        Arc::as_ptr(&self.host)
    }

    pub(crate) fn name(&self) -> &str {
        self.name.get_or_init(|| format!("group-{}", self.id))
    }

    pub(crate) fn weight(&self) -> u32 {
        crate::shim::lock(&self.sched).weight
    }

    /// The group's id: unique among its runtime's groups.
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The group's place in a tree, if it has one (a snapshot: a flat group gets one when its
    /// first child is built, under its rotation shard's lock, see `fair::tree`).
    #[inline]
    pub(crate) fn node(&self) -> Option<&Node> {
        self.node.get()
    }

    /// Gives the group its place in a tree; `false` if it had one already.
    pub(crate) fn set_node(&self, node: Node) -> bool {
        self.node.set(Box::new(node)).is_ok()
    }

    /// The group's parent, if it is nested.
    #[inline]
    pub(crate) fn parent(&self) -> Option<&Arc<GroupInner>> {
        self.node().and_then(|n| n.parent.as_ref())
    }

    /// The top-level group above this one (itself if it is top-level).
    #[inline]
    pub(crate) fn top(&self) -> &GroupInner {
        let mut g = self;
        while let Some(p) = g.parent() {
            g = p;
        }
        g
    }

    /// The runtime that serves the group.
    #[inline]
    pub(crate) fn host(&self) -> &HostOf {
        &self.host
    }

    /// Appends `r` to the group's queue, or gives it back if the queue is closed (shutdown) for
    /// the caller to drop. Lists nothing: a pusher follows with [`after_push`](Self::after_push),
    /// once for a run of pushes; only a task left for shutdown's drain goes without.
    #[inline]
    pub(crate) fn push(&self, r: Runnable) -> Result<(), Runnable> {
        self.queue.push(r)
    }

    /// The pusher's half of the listing protocol, after its pushes (see `listed`):
    /// [`Listing::Insert`] if the caller must hand the group to the scheduler.
    #[inline]
    pub(crate) fn after_push(&self) -> Listing {
        self.listed.after_push()
    }

    /// The remover's half, under the group's rotation shard's lock, having seen its queue empty:
    /// the group leaves the rotation. The caller owes [`after_unlist`](Self::after_unlist) once it
    /// released the lock.
    #[inline]
    pub(crate) fn clear_listed(&self) {
        self.listed.clear();
    }

    /// The remover's re-check after the lock: [`Listing::Insert`] if a push slipped in and the
    /// caller must hand the group to the scheduler again.
    #[inline]
    pub(crate) fn after_unlist(&self) -> Listing {
        self.listed.after_clear(|| self.queue.is_empty())
    }

    /// True if the group is listed (a snapshot: a group that is not has nothing queued, but one
    /// that is may have been emptied since).
    #[inline]
    pub(crate) fn is_listed(&self) -> bool {
        self.listed.is_set()
    }

    /// Takes the oldest queued task.
    #[inline]
    pub(crate) fn pop(&self) -> Option<Runnable> {
        self.queue.pop()
    }

    /// Takes up to `count(len)` queued tasks (see `GroupQueue::pop_batch`).
    #[inline]
    pub(crate) fn pop_batch(
        &self,
        count: impl FnOnce(usize) -> usize,
        batch: &mut Vec<Runnable>,
    ) -> Option<Runnable> {
        self.queue.pop_batch(count, batch)
    }

    /// [`pop_batch`](Self::pop_batch), also returning how many tasks were left queued (see
    /// `GroupQueue::take_batch`): the scheduler unlists a group this empties.
    #[inline]
    pub(crate) fn take_batch(
        &self,
        count: impl FnOnce(usize) -> usize,
        batch: &mut Vec<Runnable>,
    ) -> Option<(Runnable, usize)> {
        self.queue.take_batch(count, batch)
    }

    /// Tasks queued now (a snapshot).
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Tasks queued now, without the queue's lock (see `GroupQueue::len_hint`).
    #[inline]
    pub(crate) fn queued_hint(&self) -> usize {
        self.queue.len_hint()
    }

    /// True if no task is queued (a snapshot).
    pub(crate) fn queue_is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The group's lane flag, which the lane clears as it gives the group's task back or out.
    #[inline]
    pub(crate) fn lane_flag(&self) -> &LaneFlag {
        &self.in_lane
    }

    /// Takes the group's lane flag: [`LaneEntry::Entered`] if the caller set it and must push
    /// the group's task to the lane.
    #[inline]
    pub(crate) fn enter_lane(&self) -> LaneEntry {
        self.in_lane.enter()
    }

    /// True while a task of the group waits in the lane (a snapshot).
    #[inline]
    pub(crate) fn has_task_in_lane(&self) -> bool {
        self.in_lane.is_set()
    }

    /// The group's limiter, if it was built with `max_concurrency`.
    #[inline]
    pub(crate) fn limiter(&self) -> Option<&Limiter> {
        self.limiter.as_deref()
    }

    /// Locks the group's scheduling state.
    #[inline]
    pub(crate) fn sched(&self) -> MutexGuard<'_, GroupSched> {
        crate::shim::lock(&self.sched)
    }

    /// The group's virtual runtime in virtual nanoseconds, as last stored (a hint, read without
    /// the lock).
    #[inline]
    pub(crate) fn vtime_hint(&self) -> u64 {
        self.vtime_hint.load(Ordering::Relaxed)
    }

    /// Stores the hint of the virtual runtime the caller just set, under the group's lock (see
    /// [`sched`](Self::sched)).
    #[inline]
    pub(crate) fn set_vtime_hint(&self, vns: u64) {
        self.vtime_hint.store(vns, Ordering::Relaxed);
    }

    /// Lends the group `weight` until [`return_weight`](Self::return_weight): while a loan is
    /// outstanding, the group is scheduled (charged) with the heaviest weight lent to it if that
    /// is above its own. Weight inheritance: a task of this group holds a group-fair permit or
    /// lock that a task of a heavier group waits for, so the holder runs at its waiter's weight
    /// until it releases, still charged to its own group.
    pub(crate) fn lend_weight(&self, weight: u32) {
        let mut gs = self.sched();
        gs.loans = gs.loans.saturating_add(1);
        let lent = u16::try_from(weight).unwrap_or(u16::MAX).max(gs.lent);
        gs.lent = lent;
        self.weight_hint
            .store(effective_weight(&gs), Ordering::Relaxed);
    }

    /// Returns one loan of [`lend_weight`](Self::lend_weight); with the last, the group is back at
    /// its own weight.
    pub(crate) fn return_weight(&self) {
        let mut gs = self.sched();
        gs.loans = gs.loans.saturating_sub(1);
        if gs.loans == 0 {
            gs.lent = 0;
        }
        self.weight_hint
            .store(effective_weight(&gs), Ordering::Relaxed);
    }

    /// The group's effective weight, as last set (a hint, read without the lock).
    #[inline]
    pub(crate) fn weight_hint(&self) -> u32 {
        self.weight_hint.load(Ordering::Relaxed)
    }

    /// The group counts as waiting from the stamp `since`, or not at all (`None`). The scheduler
    /// sets it as the group enters the rotation and clears it as it leaves, under the group's
    /// shard's lock.
    #[inline]
    pub(crate) fn set_waiting(&self, since: Option<u64>) {
        self.waiting_since
            .store(since.map_or(0, |s| s.max(1)), Ordering::Relaxed);
    }

    /// The group counts as waiting from the stamp `now`, unless it waits already (a worker left
    /// it with work still queued), under the group's shard's lock.
    pub(crate) fn start_waiting(&self, now: u64) {
        if self.waiting_since.load(Ordering::Relaxed) == 0 {
            self.waiting_since.store(now.max(1), Ordering::Relaxed);
        }
    }

    /// Records a wait of `ns` by one of the group's tasks (in the lane) in the group's waits.
    #[inline]
    pub(crate) fn add_wait(&self, ns: u64) {
        self.delays.record(ns);
    }

    /// Adds a worker's polls of the group's tasks and the nanoseconds it spent on them to the
    /// group's metrics.
    #[inline]
    pub(crate) fn record_service(&self, polls: u64, ns: u64) {
        if polls > 0 {
            self.polls.fetch_add(polls, Ordering::Relaxed);
        }
        if ns > 0 {
            self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Shutdown's step that reaches the tasks no queue holds: wakes every idle task and refuses
    /// every later registration (such a task wakes itself instead).
    pub(crate) fn wake_idle_for_shutdown(&self) {
        self.registry.wake_all(true);
    }

    /// One pass of shutdown's drain of the group: closes it (a later push is dropped by its
    /// pusher), wakes its idle tasks for good, then drops every task in its queue and limiter
    /// line, on this thread. Returns how many it dropped.
    pub(crate) fn drain_for_shutdown(&self) -> usize {
        self.close();
        self.wake_idle_for_shutdown();
        let mut dropped = 0;
        while let Some(r) = self.queue.pop() {
            drop(r);
            dropped += 1;
        }
        if let Some(l) = &self.limiter {
            let line = l.drain();
            dropped += line.len();
            drop(line);
        }
        dropped
    }
}

impl Drop for GroupInner {
    fn drop(&mut self) {
        self.host.groups().remove(self.key);
    }
}

// The cold fields before the registry must span at least 48 bytes: the `Arc` counts end 16 bytes
// into the allocation, and 48 more bytes put the registry's first counter on another cache line
// for any 16-byte-aligned allocation.
const _: () = assert!(
    std::mem::size_of::<OnceLock<String>>()
        + std::mem::size_of::<Event>()
        + std::mem::size_of::<u64>()
        + std::mem::size_of::<usize>()
        >= 48
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A group must stay affordable per connection (ARCHITECTURE.md and the README give its size).
    #[test]
    fn a_group_is_one_small_allocation() {
        let size = std::mem::size_of::<GroupInner>();
        let align = std::mem::align_of::<GroupInner>();
        assert!(size <= 512, "GroupInner grew to {size} bytes");
        assert!(
            align <= 16,
            "GroupInner needs {align}-byte alignment: the allocator's aligned path"
        );
    }
}
