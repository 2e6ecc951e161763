//! The core: a worker's run state, and its basic operations (the LIFO slot and local queue, the
//! service segment, the timers it fires, the counts it publishes). What a worker does with it is
//! split by concern, each file adding to `impl Core`: where it looks for its next task (`search`),
//! the end of a quantum (`quantum`), parking (`park`), leaving its thread (`handover`), and the
//! loop that runs its tasks (`run`).
//!
//! # Ownership
//! A core (its index, LIFO slot, tick counters, service segment and pending charges) is a `Box`
//! owned by whichever thread runs it. A thread that holds a core runs the worker loop (`run`);
//! between polls the core is a local of that loop, and during a poll it is lent through its slot
//! (`lent`; the thread keeps the lease in `lease`), where the polled task reaches it. A thread
//! that must wait (a nested `block_on`) takes it back and hands it to another thread (`threads`);
//! the stall monitor may claim it from a poll that is stuck (`monitor`). When the poll returns and
//! the core is gone, the loop ends and the thread becomes a spare. What other threads may reach of
//! a core (its local queue, parker, notification flag and served group) lives in
//! `Shared::cores()[idx]`.
//!
//! Tasks of a group with `max_concurrency` always go through the group's limiter and global queue,
//! never the LIFO slot, so their order is FIFO.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use crate::fair::{Scheduler, Service, WaitFrom};
use crate::group::GroupInner;
use crate::shim::{Ordering, fence};
use crate::task::{Runnable, future::drop_payload};
use crate::time::IfBusy;

use super::lent::LentSlot;
use super::local::LOCAL_CAPACITY;
use super::metrics::Counts;
use super::publish::spill_as;
use super::shared::{CoreBinding, Cores, Remote, Shared};

impl CoreBinding for Cores {
    type Core = Core;
}

/// A worker's run state; see the module docs.
pub(crate) struct Core {
    pub(crate) idx: usize,
    pub(crate) shared: Arc<Shared>,
    /// The runtime's default group, for the threads this core is handed to.
    pub(crate) default_group: Arc<GroupInner>,
    pub(super) lifo: Option<Runnable>,
    pub(super) lifo_streak: u32,
    pub(super) tick: u32,
    /// A quantum ended since the last look at the served group's global queue.
    pub(super) global_due: bool,
    pub(super) searching: bool,
    pub(crate) service: Service,
    /// The scheduler holds a "served" entry for this core (see `Scheduler::update_floor`).
    pub(super) reported_serving: bool,
    pub(super) rng: u32,
    /// Reused buffer for the batch `take_from_rotation` moves to the local queue.
    pub(super) batch: Vec<Runnable>,
    /// Tasks of the extra groups a scheduler visit took besides the picked one (see
    /// `Scheduler::pick_and_take`), run after the local queue, in the order taken.
    pub(super) extras: VecDeque<Runnable>,
    /// Reused buffer for the extras `take_from_rotation` receives.
    pub(super) extras_batch: Vec<Runnable>,
    /// The group of the poll a rescue took this core from (`claimed_in_poll`): the thread that
    /// takes the core over ends that poll's quantum before it runs anything (`resume_rescued`).
    pub(super) rescued_from: Option<Arc<GroupInner>>,
    /// The clock stamp at which the oldest of `extras` was taken: extras handed back to their
    /// groups' queues unrun count as waiting from then (`GroupMetrics::wait`).
    pub(super) extras_since: u64,
    /// Published to `Remote::counts` at parks, quantum ends and retirement.
    pub(super) counts: Counts,
    /// The core has not come to its first park yet, which the runtime's start waits for
    /// (`Threads::wait_for_first_parks`).
    pub(super) before_first_park: bool,
    /// Reused buffer for the wakers of fired timers.
    wakers: Vec<Waker>,
    /// The address of `shared.cores()[idx].lent`, computed once: every poll lends the core there.
    lent_slot: SlotPtr,
}

/// The address of a core's lent slot, kept by the core itself.
struct SlotPtr(*const LentSlot<Core>);

// SAFETY: the pointer targets `shared.cores()[idx].lent` of the core's own runtime, which the
// core's `shared` field keeps alive; the slot is `Sync` (atomics), so any thread holding the core
// may use it.
unsafe impl Send for SlotPtr {}

impl Core {
    pub(crate) fn new(idx: usize, shared: Arc<Shared>, default_group: Arc<GroupInner>) -> Self {
        // Derived from the whole `Remote` (not from a reference to the field), so that the pointer
        // may reach the rest of the `Remote` (`lease::lent_remote`).
        let remote: *const Remote = &shared.cores()[idx];
        // SAFETY: `remote` points to a live element of `shared.cores()`; taking a field's address
        // creates no reference.
        let lent_slot = SlotPtr(unsafe { std::ptr::addr_of!((*remote).lent) });
        let quantum = shared.config().quantum;
        Core {
            idx,
            shared,
            default_group,
            lifo: None,
            lifo_streak: 0,
            tick: 0,
            global_due: false,
            searching: false,
            service: Service::new(quantum),
            reported_serving: false,
            rng: 0x9E37_79B9 ^ (idx as u32).wrapping_mul(0x85EB_CA6B) | 1,
            batch: Vec::with_capacity(LOCAL_CAPACITY / 2),
            extras: VecDeque::new(),
            extras_batch: Vec::new(),
            extras_since: 0,
            rescued_from: None,
            counts: Counts::default(),
            before_first_park: true,
            wakers: Vec::new(),
            lent_slot,
        }
    }

    /// Fires the runtime's due timers and wakes their tasks, outside every lock (`busy`: what to do
    /// if another thread is at it). A waker that panics (a foreign executor's) is contained.
    pub(super) fn fire_timers(&mut self, now: Instant, busy: IfBusy) -> usize {
        let mut wakers = std::mem::take(&mut self.wakers);
        let fired = self.shared.timers().process(now, &mut wakers, busy);
        for w in wakers.drain(..) {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| w.wake())) {
                drop_payload(p);
            }
        }
        self.wakers = wakers;
        fired
    }

    /// Fires timers if the earliest is due at `now`.
    #[inline]
    pub(super) fn fire_due_timers(&mut self, now: Instant) {
        if self.shared.timers().any_due(now) {
            self.fire_timers(now, IfBusy::Skip);
        }
    }

    pub(super) fn publish_counts(&self) {
        self.remote().counts.publish(&self.counts);
    }

    #[inline]
    pub(super) fn remote(&self) -> &Remote {
        // SAFETY: the slot is the `lent` field of `shared.cores()[idx]`, and its pointer was derived
        // from the whole `Remote` (`Core::new`), which the core's `shared` keeps alive. This is
        // `&self.shared.cores()[self.idx]` without the loads and the bounds check, on every task run.
        unsafe {
            &*self
                .lent_slot
                .0
                .cast::<u8>()
                .sub(std::mem::offset_of!(Remote, lent))
                .cast::<Remote>()
        }
    }

    /// Routes a task woken or spawned by the task this core is polling (see `schedule`).
    #[inline]
    pub(crate) fn schedule_local(&mut self, r: Runnable, is_yield: bool) {
        if is_yield {
            self.push_local(r);
            self.new_stealable_work();
        } else {
            self.put_in_lifo(r);
        }
    }

    /// Routes a task of another group than the served one, woken or spawned by the task this core
    /// is polling: into the LIFO slot if fairness allows (see `schedule`), else back to the caller
    /// for the group's global queue.
    pub(crate) fn schedule_beside(&mut self, r: Runnable) -> Option<Runnable> {
        let Some(serving) = self.service.group() else {
            return Some(r);
        };
        let quantum = self.shared.config().quantum;
        if !Scheduler::may_run_beside(serving, &r.metadata().group, quantum) {
            return Some(r);
        }
        self.put_in_lifo(r);
        None
    }

    /// Puts `r` in the LIFO slot. The task it pushes out goes to the local queue, whatever its
    /// group: a task of another group reached the slot only if it may run beside the served group
    /// (`schedule_beside`), so it stays on this worker, runs in a segment charged to its own group,
    /// and is spilled to its own group's queue if the core switches. Its group's global queue
    /// would cost a listing and a scheduler pick per task pushed out, and a task that wakes many
    /// groups' tasks in one poll (a server replying to its clients) pushes out all but the last.
    fn put_in_lifo(&mut self, r: Runnable) {
        if let Some(prev) = self.lifo.replace(r) {
            self.push_local(prev);
            self.new_stealable_work();
        }
    }

    /// New stealable work: wake a sleeper if nobody is searching. A missed wake here costs
    /// parallelism, never a task: this core is awake and will run its own queue.
    fn new_stealable_work(&self) {
        if self.shared.idle().wants_notify() {
            fence(Ordering::SeqCst);
            self.shared.notify_work();
        }
    }

    pub(super) fn push_local(&mut self, r: Runnable) {
        if let Err(r) = self.try_push_local(r) {
            // Full: move half of the queue plus this task to their groups' global queues. The
            // served group does not wait for them: this worker keeps serving it.
            let served = self.service.group().map_or(ptr::null(), Arc::as_ptr);
            let half = (0..LOCAL_CAPACITY / 2).map_while(|_| self.pop_local());
            spill_as(half.chain(std::iter::once(r)), |g| served_or_now(g, served));
        }
    }

    /// Pushes at the back of the core's local queue; gives the task back if the queue is full.
    #[inline(always)]
    pub(super) fn try_push_local(&self, r: Runnable) -> Result<(), Runnable> {
        // SAFETY: this thread holds the core, so it owns the core's local queue.
        unsafe { self.remote().local.push(r) }
    }

    /// Pops the oldest task of the core's local queue.
    #[inline(always)]
    pub(super) fn pop_local(&self) -> Option<Runnable> {
        // SAFETY: this thread holds the core, so it owns the core's local queue.
        unsafe { self.remote().local.pop() }
    }

    /// Starts a segment on `g`, counting the scheduler visits that apply charges alone (see
    /// `Service::begin`, which says what borrowed and owned mean).
    pub(super) fn begin_segment(&mut self, g: Cow<'_, Arc<GroupInner>>, now: u64) {
        self.remote()
            .serving
            .store(Arc::as_ptr(&g) as *mut GroupInner, Ordering::Relaxed);
        self.service.begin(g, now, self.shared.scheduler());
    }

    /// Ends the current segment, if any; its service waits in the core's charges for the next
    /// scheduler visit.
    pub(super) fn end_segment(&mut self, now: u64) {
        self.remote()
            .serving
            .store(std::ptr::null_mut(), Ordering::Relaxed);
        if let Some(ns) = self.service.end(now) {
            self.counts.busy_ns += ns;
        }
    }

    /// Makes the current segment serve `group`: what follows on this core is charged to it.
    #[inline(always)]
    pub(crate) fn serve(&mut self, group: &Arc<GroupInner>) {
        if !self.service.serves(Arc::as_ptr(group)) {
            let now = crate::clock::stamp();
            self.end_segment(now);
            self.begin_segment(Cow::Borrowed(group), now);
        }
    }

    /// Sends the extras back to their groups' queues. They were taken but never run, so their
    /// groups have been waiting since they were taken.
    pub(super) fn return_extras(&mut self) {
        if !self.extras.is_empty() {
            let since = self.extras_since;
            spill_as(self.extras.drain(..), |_| WaitFrom::Stamp(since));
        }
    }

    /// Whether a task waits where only this core reaches it: its LIFO slot or its extras (the
    /// stall monitor's hint, carried by the lent word; other workers see the local queue).
    #[inline]
    pub(crate) fn has_private_work(&self) -> bool {
        self.lifo.is_some() || !self.extras.is_empty()
    }

    /// Where this core is lent for a poll (`lease::install`).
    #[inline]
    pub(crate) fn lent_slot(&self) -> *const LentSlot<Core> {
        self.lent_slot.0
    }
}

/// How a group listed by a spill of the core serving `served` waits: not at all if it is that
/// group (the core keeps serving it), from now otherwise.
pub(super) fn served_or_now(g: &GroupInner, served: *const GroupInner) -> WaitFrom {
    if ptr::eq(g, served) {
        WaitFrom::Served
    } else {
        WaitFrom::Now
    }
}

/// Consumes a wake flag. A failed compare-exchange writes nothing, so a waiting loop does not
/// generate stores (and loom models it exactly; see `loom_models/runtime.rs`).
pub(crate) fn take_flag(flag: &crate::shim::AtomicBool) -> bool {
    flag.compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}
