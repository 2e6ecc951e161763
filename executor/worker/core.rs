//! The core: a worker's run state, and the worker loop that runs it.
//!
//! # Ownership
//! A core (its index, LIFO slot, tick counters, service segment and pending charges) is a `Box`
//! owned by whichever thread runs it. A thread that holds a core runs [`run`]; between polls the
//! core is a local of that loop, and during a poll it is lent through its slot (`lent`, with the
//! lease in the thread's `context`), where the polled task reaches it. A thread that must wait (a
//! nested `block_on`) takes it back and hands it to another thread (`threads`); the stall monitor
//! may claim it from a poll that is stuck (`monitor`). When the poll returns and the core is gone,
//! the loop ends and the thread becomes a spare. What other threads may reach of a core (its local
//! queue, parker, notification flag and served group) lives in `Shared::cores[idx]`.
//!
//! # Where a worker looks for its next task (in order)
//! 1. Every `GLOBAL_INTERVAL` ticks and after every quantum end, the global queue of the group it
//!    serves, so tasks woken from outside are not starved by local ping-pong (short polls: the
//!    tick count comes first) or by a local queue of long polls (the quantum end comes first: 61
//!    polls of a millisecond would keep a woken task waiting for 61 ms).
//! 2. The LIFO slot, at most `LIFO_CAP` times in a row (a message-passing pair stays on one warm
//!    core without starving the local queue).
//! 3. The local queue (FIFO: the served group's tasks, and tasks of other groups pushed out of the
//!    LIFO slot, which were due when they were woken), then the extras: tasks of further groups
//!    that were due when the last scheduler visit took them along with the picked group
//!    (`Scheduler::pick_and_take`), or that the last visit to the lane took.
//! 4. While its quantum lasts, a batch of the served group's global queue, without a scheduler
//!    lock (`len / workers + 1`, at most half a local queue).
//! 5. The scheduler's lane: tasks woken from outside whose groups were idle at the floor
//!    (`fair::lane`), without a scheduler lock: the oldest, and this worker's share of the
//!    others (`lane length / workers`, at most `LANE_BATCH`) for its extras.
//! 6. The group scheduler: the listed group with the smallest virtual runtime (one shard of the
//!    rotation's lock); it takes a batch of that group's global queue (a short queue whole).
//! 7. Stealing half of another core's local queue (at most half the workers search at once).
//! 8. Parking (see `idle`). Due timers are fired first; one parked core, the keeper, sleeps
//!    until the earliest timer (see `time::driver`), the others until woken. With the `io`
//!    feature the keeper sleeps in the I/O reactor (see `reactor`), which runs this loop as a
//!    future with the same steps (`park_begin`, `park_step`, `park_end`).
//!
//! # Service segments and the quantum
//! See `fair::segment`. When the quantum ends and another listed group is behind the served one,
//! or a task waits in the scheduler's lane, the worker spills its LIFO slot and local queue back
//! to their groups' global queues and picks again: no local structure holds a worker on one group
//! for more than a quantum while another group waits. Extras left at a quantum end go back to
//! their groups' queues first, so the check sees those groups: a task of the served group that
//! yields again and again keeps the local queue from ever emptying, and the extras behind it
//! would otherwise wait for as long as it runs. When it stays and other groups are active,
//! it moves the older half of its local queue to the group's global queue, so other workers see
//! the group's surplus and can serve it when it is behind (fairness is global, not per worker).
//!
//! A core a rescue took from a stuck poll starts on its new thread with that poll's quantum end
//! (`resume_rescued`, run from step 1, which the rescue makes due): the poll held the core for
//! the stall threshold, many quanta, with no timer fired and no switch.
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

use crate::fair::{Picker, Scheduler, Service, Verdict, WaitFrom};
use crate::group::Host;
use crate::group::{GroupInner, GroupScope};
use crate::shim::{Ordering, fence};
use crate::task::coop::PollBudget;
use crate::task::future::take_deferred_panic;
use crate::task::meta::{Owner, task_id};
use crate::task::{Runnable, future::drop_payload};
use crate::time::{IfBusy, NEVER};

use super::context;
use super::local::LOCAL_CAPACITY;
use super::metrics::Counts;
use super::shared::{Remote, Shared, push_global, spill, spill_as};

/// Consecutive polls from the LIFO slot before it must yield to the local queue.
const LIFO_CAP: u32 = 3;
/// Most tasks a worker takes from the lane for its extras, besides the one it runs next.
const LANE_BATCH: usize = 8;
/// Every this many ticks, look at the served group's global queue first.
const GLOBAL_INTERVAL: u32 = 61;

/// A worker's run state; see the module docs.
pub(crate) struct Core {
    pub(crate) idx: usize,
    pub(crate) shared: Arc<Shared>,
    /// The runtime's default group, for the threads this core is handed to.
    pub(crate) default_group: Arc<GroupInner>,
    lifo: Option<Runnable>,
    lifo_streak: u32,
    tick: u32,
    /// A quantum ended since the last look at the served group's global queue.
    global_due: bool,
    searching: bool,
    pub(crate) service: Service,
    /// The scheduler holds a "served" entry for this core (see `Scheduler::update_floor`).
    reported_serving: bool,
    rng: u32,
    /// Reused buffer for the batch `take_from_rotation` moves to the local queue.
    batch: Vec<Runnable>,
    /// Tasks of the extra groups a scheduler visit took besides the picked one (see
    /// `Scheduler::pick_and_take`), run after the local queue, in the order taken.
    extras: VecDeque<Runnable>,
    /// Reused buffer for the extras `take_from_rotation` receives.
    extras_batch: Vec<Runnable>,
    /// The group of the poll a rescue took this core from (`claimed_in_poll`): the thread that
    /// takes the core over ends that poll's quantum before it runs anything (`resume_rescued`).
    rescued_from: Option<Arc<GroupInner>>,
    /// The clock stamp at which the oldest of `extras` was taken: extras handed back to their
    /// groups' queues unrun count as waiting from then (`GroupMetrics::wait`).
    extras_since: u64,
    /// Published to `Remote::counts` at parks, quantum ends and retirement.
    counts: Counts,
    /// The core has not come to its first park yet, which `Threads::start` waits for.
    before_first_park: bool,
    /// Reused buffer for the wakers of fired timers.
    wakers: Vec<Waker>,
    /// The address of `shared.cores[idx].lent`, computed once: every poll lends the core there.
    lent_slot: SlotPtr,
}

/// The address of a core's lent slot, kept by the core itself.
struct SlotPtr(*const super::lent::LentSlot<Core>);

// SAFETY: the pointer targets `shared.cores[idx].lent` of the core's own runtime, which the
// core's `shared` field keeps alive; the slot is `Sync` (atomics), so any thread holding the core
// may use it.
unsafe impl Send for SlotPtr {}

/// What a parking core does next (`Core::park_step`).
pub(super) enum Step {
    /// Awake: notified, shut down, or it fired due timers.
    Woke,
    /// The timers' bound moved while the keeper published its tick: look again.
    Retry,
    /// Sleep until unparked.
    Park,
    /// Keep time: sleep until unparked or the deadline (`None`: no timer is armed).
    Keep(Option<Instant>),
}

/// Runs `core` until the runtime shuts down (returns the core, for the caller to retire) or the
/// core is handed to another thread during a poll (returns `None`). With the `io` feature,
/// `reactor::run` runs the same steps as a future instead.
#[cfg(not(all(feature = "io", not(loom), not(miri))))]
pub(crate) fn run(mut core: Box<Core>) -> Option<Box<Core>> {
    while !core.shared.is_shutdown() {
        match core.next_task() {
            Some(r) => {
                core.found_work();
                core = core.run_task(r)?;
            }
            None => core.park(),
        }
    }
    Some(core)
}

impl Core {
    pub(crate) fn new(idx: usize, shared: Arc<Shared>, default_group: Arc<GroupInner>) -> Self {
        // Derived from the whole `Remote` (not from a reference to the field), so that the pointer
        // may reach the rest of the `Remote` (`context::lent_remote`).
        let remote: *const Remote = &shared.cores[idx];
        // SAFETY: `remote` points to a live element of `shared.cores`; taking a field's address
        // creates no reference.
        let lent_slot = SlotPtr(unsafe { std::ptr::addr_of!((*remote).lent) });
        Core {
            idx,
            shared,
            default_group,
            lifo: None,
            lifo_streak: 0,
            tick: 0,
            global_due: false,
            searching: false,
            service: Service::new(),
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
    fn fire_timers(&mut self, now: Instant, busy: IfBusy) -> usize {
        let mut wakers = std::mem::take(&mut self.wakers);
        let fired = self.shared.timers.process(now, &mut wakers, busy);
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
    fn fire_due_timers(&mut self, now: Instant) {
        if self.shared.timers.any_due(now) {
            self.fire_timers(now, IfBusy::Skip);
        }
    }

    fn publish_counts(&self) {
        self.remote().counts.publish(&self.counts);
    }

    #[inline]
    pub(super) fn remote(&self) -> &Remote {
        // SAFETY: the slot is the `lent` field of `shared.cores[idx]`, and its pointer was derived
        // from the whole `Remote` (`Core::new`), which the core's `shared` keeps alive. This is
        // `&self.shared.cores[self.idx]` without the loads and the bounds check, on every task run.
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
        let quantum = self.shared.config.quantum;
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
        if self.shared.idle.wants_notify() {
            fence(Ordering::SeqCst);
            self.shared.notify_work();
        }
    }

    fn push_local(&mut self, r: Runnable) {
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
    fn try_push_local(&self, r: Runnable) -> Result<(), Runnable> {
        // SAFETY: this thread holds the core, so it owns the core's local queue.
        unsafe { self.remote().local.push(r) }
    }

    /// Pops the oldest task of the core's local queue.
    #[inline(always)]
    fn pop_local(&self) -> Option<Runnable> {
        // SAFETY: this thread holds the core, so it owns the core's local queue.
        unsafe { self.remote().local.pop() }
    }

    #[inline(always)]
    pub(super) fn next_task(&mut self) -> Option<Runnable> {
        self.tick = self.tick.wrapping_add(1);
        if std::mem::take(&mut self.global_due) | (self.tick % GLOBAL_INTERVAL == 0) {
            // A rescue sets `global_due` too, so this costs the hot path nothing.
            if let Some(g) = self.rescued_from.take() {
                self.resume_rescued(g);
            }
            let r = self.service.group().and_then(|g| {
                let r = g.pop();
                if r.is_some() {
                    g.end_wait(crate::clock::stamp);
                }
                r
            });
            if r.is_some() {
                return r;
            }
        }
        if let Some(r) = self.lifo.take() {
            if self.lifo_streak < LIFO_CAP {
                self.lifo_streak += 1;
                self.counts.lifo_hits += 1;
                return Some(r);
            }
            self.push_local(r);
        }
        self.lifo_streak = 0;
        if let Some(r) = self.pop_local() {
            return Some(r);
        }
        if let Some(r) = self.extras.pop_front() {
            return Some(r);
        }
        self.find_work()
    }

    fn find_work(&mut self) -> Option<Runnable> {
        if let Some(r) = self.take_from_own_group() {
            return Some(r);
        }
        if let Some(r) = self.take_from_lane() {
            return Some(r);
        }
        // Not while a group is counted as listed that no pick can find yet: its pusher is between
        // the count and the inbox (`Scheduler::may_pick`).
        if self.shared.scheduler.has_pickable() {
            if let Some(r) = self.take_from_rotation() {
                return Some(r);
            }
        }
        if !self.searching {
            if !self.shared.idle.try_search() {
                return None;
            }
            self.searching = true;
        }
        self.steal()
    }

    /// While its quantum lasts, a worker takes its next batch straight from the global queue of
    /// the group it serves (lock-free), instead of asking the scheduler. The quantum end still
    /// decides whether it must switch (`quantum_end`), so this changes no share, only how often
    /// workers serving one busy group meet at its rotation shard's lock.
    fn take_from_own_group(&mut self) -> Option<Runnable> {
        // A group that is not listed has nothing queued (a push lists it), so its queue's lock is
        // not worth taking: the last group served is often one whose only task came from the lane.
        let listed = self.service.group().is_some_and(|g| g.is_listed());
        if !listed || !self.service.in_quantum(self.shared.config.quantum) {
            return None;
        }
        let workers = self.shared.cores.len();
        let mut batch = std::mem::take(&mut self.batch);
        let first = self.service.group().and_then(|g| {
            let first = g.pop_batch(
                |len| (len / workers + 1).min(LOCAL_CAPACITY / 2),
                &mut batch,
            );
            // Work taken without a pick: whatever waited since the group was listed was taken.
            if first.is_some() {
                g.end_wait(crate::clock::stamp);
            }
            first
        });
        for r in batch.drain(..) {
            self.push_local(r);
        }
        self.batch = batch;
        first
    }

    /// The lane's oldest task (see `fair::lane`), and this worker's share of the others for its
    /// extras; the time each waited counts for its group.
    #[inline]
    fn take_from_lane(&mut self) -> Option<Runnable> {
        let (first, since) = self.shared.scheduler.pop_lane()?;
        let now = crate::clock::stamp();
        self.took_from_lane(&first, now, since);
        // This worker's share of what else waits there, for its extras, so that the next few
        // lane tasks cost it no visit to the lane (where each pop meets the pushers) and are not
        // passed to another worker.
        let share = self.shared.scheduler.lane_len() / self.shared.cores.len();
        if share > 0 && self.extras.is_empty() {
            self.extras_since = now;
        }
        for _ in 0..share.min(LANE_BATCH) {
            let Some((r, since)) = self.shared.scheduler.pop_lane() else {
                break;
            };
            self.took_from_lane(&r, now, since);
            self.extras.push_back(r);
        }
        Some(first)
    }

    /// Counts a task taken from the lane; the time it waited there counts for its group.
    #[inline]
    fn took_from_lane(&mut self, r: &Runnable, now: u64, since: u64) {
        r.metadata().group.add_wait(now.saturating_sub(since));
        self.counts.lane_takes += 1;
    }

    fn take_from_rotation(&mut self) -> Option<Runnable> {
        let stamp = crate::clock::stamp();
        let now = crate::clock::instant_of(stamp);
        let mut batch = std::mem::take(&mut self.batch);
        let mut extras = std::mem::take(&mut self.extras_batch);
        let shared = self.shared.clone();
        let found = loop {
            self.end_segment(stamp);
            let picked = shared.scheduler.pick_and_take(
                self.service.charges(),
                now,
                Picker {
                    worker: self.idx,
                    max_batch: LOCAL_CAPACITY / 2,
                    // Workers woken to take work and on their way: a group each is left for them.
                    leave: || {
                        let searching = shared.idle.counts().1;
                        searching.saturating_sub(usize::from(self.searching))
                    },
                },
                &mut batch,
                &mut extras,
            );
            self.service.settle();
            match picked {
                None => {
                    self.counts.empty_picks += 1;
                    break None;
                }
                Some((g, Some(first))) => {
                    self.counts.picks += 1;
                    self.reported_serving = true;
                    self.begin_segment(Cow::Owned(g), stamp);
                    break Some(first);
                }
                // Another worker emptied the group first; the scheduler unlisted it.
                Some((_, None)) => {
                    self.counts.empty_picks += 1;
                    continue;
                }
            }
        };
        for r in batch.drain(..) {
            self.push_local(r);
        }
        self.batch = batch;
        if self.extras.is_empty() && !extras.is_empty() {
            self.extras_since = stamp;
        }
        self.extras.extend(extras.drain(..));
        self.extras_batch = extras;
        found
    }

    fn steal(&mut self) -> Option<Runnable> {
        let n = self.shared.cores.len();
        if n == 1 {
            return None;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        let start = x as usize % n;
        for i in 0..n {
            let v = (start + i) % n;
            if v == self.idx {
                continue;
            }
            let push_back = |r: Runnable| {
                let g = r.metadata().group.clone();
                push_global(&g, r);
            };
            // SAFETY: this thread holds the core, so it owns the core's local queue.
            let stolen = unsafe {
                self.shared.cores[v]
                    .local
                    .steal_half_into(&self.remote().local, push_back)
            };
            if let Some(r) = stolen {
                self.counts.steals += 1;
                return Some(r);
            }
        }
        None
    }

    pub(super) fn found_work(&mut self) {
        if std::mem::replace(&mut self.searching, false) && self.shared.idle.stop_searching() {
            // The last searcher found work: more may be queued, so wake one more (idle step 2).
            fence(Ordering::SeqCst);
            self.shared.notify_work();
        }
    }

    /// Starts a segment on `g`, counting the scheduler visits that apply charges alone (see
    /// `Service::begin`, which says what borrowed and owned mean).
    fn begin_segment(&mut self, g: Cow<'_, Arc<GroupInner>>, now: u64) {
        self.remote()
            .serving
            .store(Arc::as_ptr(&g) as *mut GroupInner, Ordering::Relaxed);
        self.service.begin(g, now, &self.shared.scheduler);
    }

    /// Ends the current segment, if any; its service waits in the core's charges for the next
    /// scheduler visit.
    fn end_segment(&mut self, now: u64) {
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

    /// Runs one task. Returns the core, or `None` if the task's poll handed it to another thread.
    #[inline(always)]
    pub(crate) fn run_task(mut self: Box<Self>, r: Runnable) -> Option<Box<Self>> {
        let meta = r.metadata();
        let group = &meta.group;
        self.serve(group);
        let limited = group.limiter().is_some().then(|| group.clone());
        // The polled task's group when a rescue took the core during the poll (the segment that
        // would name it went with the core).
        let mut rescued_from: Option<Arc<GroupInner>> = None;
        let cancelled = meta.is_cancelled();
        let core = {
            // Restored when they drop, even if the poll unwinds.
            let _group = GroupScope::enter(group);
            let _budget = PollBudget::start();
            context::install(self);
            if cancelled {
                // Cancelled by marking (`abort`, `Group::cancel`): the future is dropped here, on
                // a worker, as a poll would end it. Its destructor is the task's own code and may
                // do what a poll does (`block_on`, `block_in_place`, spawn into its group, block
                // until rescued), so it runs with the core lent and the group current, as a poll.
                drop(r);
            } else {
                r.run();
            }
            // A `block_in_place` in this poll handed the core over (so the lease is gone) and left
            // its reclaim for now: take the core back if no thread took it. Off the hot path.
            let taken = match context::take_after_poll() {
                Err(false) if super::block_in_place::reclaim_deferred() => {
                    context::take_after_poll()
                }
                taken => taken,
            };
            match taken {
                Ok(core) => Some(core),
                Err(claimed) => {
                    // A rescue took the core while the poll was stuck, counted the poll in the
                    // segment it ended and kept the poll's group for this thread (a hand-off counts
                    // its own in `reclaim`). The thread's current group is no use here: the task
                    // may have dropped its hold on the group in the poll, the group's last.
                    if claimed {
                        rescued_from = context::with_thread(|t| {
                            t.and_then(|t| t.shared.threads.take_stuck_group())
                        });
                    }
                    None
                }
            }
        };
        if let Some(p) = take_deferred_panic() {
            // An output's destructor panicked inside the task (detached, it dropped its own
            // output). The segment's group is the task's.
            let segment = core.as_ref().and_then(|c| c.service.group());
            if let Some(g) = segment.or(rescued_from.as_ref()) {
                g.report_panic(&*p);
            }
            drop_payload(p);
        }
        if let Some(g) = limited {
            if let Some(next) = g.limiter().and_then(|l| l.release()) {
                push_global(&g, next);
            }
        }
        let mut core = core?;
        // Dropping a cancelled task's future is no poll of it.
        if !cancelled {
            core.service.polled();
            core.counts.polls += 1;
        }
        if core.service.tick() {
            if let Some(now) = core.service.read_clock(core.shared.config.quantum) {
                core.quantum_end(now);
            }
        }
        Some(core)
    }

    #[inline(never)]
    fn quantum_end(&mut self, now: u64) {
        self.global_due = true;
        // The real clock for timers (`now` may come from the cheaper segment clock, which a
        // deadline must never run ahead of).
        self.fire_due_timers(Instant::now());
        self.service.restart_quantum(now);
        self.publish_counts();
        let Some(g) = self.service.group().cloned() else {
            return;
        };
        self.end_segment(now);
        self.reported_serving = true;
        // Extras (groups a pick took along, or lane tasks) run after the local queue, which a
        // task that yields again and again never leaves empty: back to their groups' queues, so
        // the check below sees those groups and switches to them when they are behind.
        self.return_extras();
        let shared = self.shared.clone();
        let verdict = shared.scheduler.charge_and_check(
            self.service.charges(),
            self.idx,
            &g,
            crate::clock::instant_of(now),
        );
        self.service.settle();
        // A task in the lane belongs to a group that was idle at the floor, which a pick would
        // choose about as soon as a group behind this one: switch for it as for that group. (Run
        // beside this group's local work instead, a group's task would queue behind that work
        // once it yields.)
        let verdict = match verdict {
            Verdict::Stay { .. } if shared.scheduler.lane_has_work() => Verdict::Switch,
            v => v,
        };
        let others_active = match verdict {
            Verdict::Switch => true,
            Verdict::Stay { others_listed } => {
                others_listed || shared.others_serve_other_groups(self.idx, &g)
            }
        };
        self.begin_segment(Cow::Owned(g), now);
        let mut batch: Vec<Runnable> = Vec::new();
        match verdict {
            Verdict::Switch => {
                // Another group is behind this one: hand all local work back and end the segment,
                // so `next_task` finds nothing local, does not take from this group's queue, and
                // asks the scheduler, which picks the group that is behind.
                batch.extend(self.lifo.take());
                while let Some(r) = self.pop_local() {
                    batch.push(r);
                }
                self.end_segment(now);
            }
            Verdict::Stay { .. } if others_active => {
                // Other workers serve other groups and only see this group's global queue: expose
                // the older half of the local backlog there, so a group with more runnable tasks
                // than one worker can run gets the other workers' time its weight entitles it to.
                // A group with a single runnable task keeps it (half of one is none). The next
                // pick must not take the spilled tasks straight back from the global queue, so it
                // skips the look that follows a quantum end; the local queue halves at every
                // quantum end meanwhile, so what waits in the global queue is reached soon. The
                // group does not wait for them (this worker still serves it) until this worker
                // leaves it (`Scheduler::charge_and_check`).
                self.global_due = false;
                for _ in 0..self.remote().local.len() / 2 {
                    match self.pop_local() {
                        Some(r) => batch.push(r),
                        None => break,
                    }
                }
                if !batch.is_empty() {
                    let served = self.service.group().map_or(ptr::null(), Arc::as_ptr);
                    spill_as(batch, |g| served_or_now(g, served));
                }
                return;
            }
            Verdict::Stay { .. } => {}
        }
        if !batch.is_empty() {
            spill(batch);
        }
    }

    /// Parks until notified or shut down; as the keeper, until the earliest timer too.
    #[cfg(not(all(feature = "io", not(loom), not(miri))))]
    #[inline(never)]
    fn park(&mut self) {
        if !self.park_begin() {
            return;
        }
        let mut keeping = false;
        loop {
            match self.park_step(&mut keeping, false) {
                Step::Woke => break,
                Step::Retry => {}
                Step::Park => self.remote().parker.park(),
                Step::Keep(deadline) => {
                    let wait = deadline.map_or(std::time::Duration::MAX, |d| {
                        d.saturating_duration_since(Instant::now())
                    });
                    self.remote().parker.park_timeout(wait);
                }
            }
        }
        self.park_end(keeping);
    }

    /// The start of a park: ends the segment, fires due timers, registers as a sleeper and
    /// re-checks for work. False if the core stays awake (work appeared, or shutdown).
    pub(super) fn park_begin(&mut self) -> bool {
        let now = Instant::now();
        self.end_segment(crate::clock::stamp_of(now));
        // Tell the scheduler this core serves nothing now (if it said otherwise), so the group it
        // served no longer holds the floor down.
        let parking = std::mem::replace(&mut self.reported_serving, false).then_some(self.idx);
        let shared = self.shared.clone();
        shared.scheduler.charge_all(self.service.charges(), parking);
        self.service.settle();
        // What due timers wake is work: the re-check below sees it.
        self.fire_due_timers(now);
        shared
            .idle
            .sleep(self.idx, std::mem::replace(&mut self.searching, false));
        fence(Ordering::SeqCst);
        if shared.has_visible_work(self.idx) || shared.is_shutdown() {
            self.wake_self();
            self.first_park_reached();
            return false;
        }
        self.counts.parks += 1;
        self.publish_counts();
        self.first_park_reached();
        true
    }

    /// Tells `Threads::start`, once, that this core came to its first park (counted and
    /// published, or given up for work or shutdown).
    #[inline]
    fn first_park_reached(&mut self) {
        if std::mem::take(&mut self.before_first_park) {
            self.shared.threads.reached_first_park();
        }
    }

    /// One turn of the parking loop: woken (a notification, shutdown, a due timer fired), or how
    /// to sleep. `keeping` says whether this core is the keeper; with `keep_without_timers` it
    /// takes the keeper role even when no timer is armed (the keeper sleeps in the reactor).
    pub(super) fn park_step(&mut self, keeping: &mut bool, keep_without_timers: bool) -> Step {
        let shared = &*self.shared;
        let remote = &shared.cores[self.idx];
        if take_flag(&remote.notified) {
            // The notifier counted us awake and searching (the keeper's own claim: awake only,
            // and its flag was written before `notified`).
            #[cfg(all(feature = "io", not(loom), not(miri)))]
            let searching = !remote.claimed.swap(false, Ordering::Relaxed);
            #[cfg(not(all(feature = "io", not(loom), not(miri))))]
            let searching = true;
            self.searching = searching;
            return Step::Woke;
        }
        if shared.is_shutdown() {
            self.wake_self();
            return Step::Woke;
        }
        let due = shared.timers.earliest();
        if (due == NEVER && !keep_without_timers) || !(*keeping || shared.keeper.try_keep(self.idx))
        {
            if std::mem::take(keeping) {
                shared.keeper.stop();
            }
            return Step::Park;
        }
        *keeping = true;
        // Publish the wake-up tick, then re-read the bound (see `time::keeper`).
        shared.keeper.publish(due);
        if shared.timers.earliest() < due {
            return Step::Retry;
        }
        if due == NEVER {
            return Step::Keep(None);
        }
        let now = Instant::now();
        if shared.timers.now_tick(now) >= due {
            shared.keeper.stop();
            *keeping = false;
            self.wake_self();
            self.fire_timers(now, IfBusy::Wait);
            return Step::Woke;
        }
        Step::Keep(Some(shared.timers.instant_of(due)))
    }

    /// The end of a park: gives up the keeper role and starts a fresh quantum.
    pub(super) fn park_end(&mut self, keeping: bool) {
        if keeping {
            self.shared.keeper.stop();
        }
        self.service.restart_quantum(crate::clock::stamp());
    }

    fn wake_self(&mut self) {
        let remote = &self.shared.cores[self.idx];
        #[cfg_attr(not(all(feature = "io", not(loom), not(miri))), allow(unused_mut))]
        let mut searching = true;
        self.shared.idle.wake_self(self.idx, || {
            remote.notified.store(false, Ordering::Relaxed);
            // The keeper's own claim counted it awake only (see `reactor`).
            #[cfg(all(feature = "io", not(loom), not(miri)))]
            if remote.claimed.swap(false, Ordering::Relaxed) {
                searching = false;
            }
        });
        self.searching = searching;
    }

    /// Where this core is lent for a poll (`context::install`).
    #[inline]
    pub(crate) fn lent_slot(&self) -> *const super::lent::LentSlot<Core> {
        self.lent_slot.0
    }

    /// A rescue claimed this core during a poll that has not returned: counts that poll, for this
    /// core and in the segment (its group's), and returns the segment's group for the stuck
    /// thread. The thread that takes the core over ends the stuck poll's quantum first
    /// (`resume_rescued`).
    pub(crate) fn claimed_in_poll(&mut self) -> Option<Arc<GroupInner>> {
        self.counts.polls += 1;
        self.service.polled();
        let group = self.service.group().cloned();
        self.rescued_from = group.clone();
        self.global_due = true;
        group
    }

    /// The first thing the thread that took over a rescued core does: what the stuck poll's
    /// return would have done, a quantum end for its group `g`. The poll held the core for at
    /// least the stall threshold, ten quanta, with no timer fired and no switch: without this,
    /// the thread ran the core's local queue first, and when those tasks block too (a tenant
    /// whose every task blocks), each thread that took the core over blocked in the next one, so
    /// due timers never fired and no other group was served until the stall ended.
    #[cold]
    #[inline(never)]
    fn resume_rescued(&mut self, g: Arc<GroupInner>) {
        let now = crate::clock::stamp();
        self.end_segment(now);
        self.begin_segment(Cow::Owned(g), now);
        self.quantum_end(now);
    }

    /// Sends the extras back to their groups' queues. They were taken but never run, so their
    /// groups have been waiting since they were taken.
    fn return_extras(&mut self) {
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

    /// Takes the task `id` out of this core's LIFO slot or local queue if it sits there and has
    /// never been polled (for a nested `block_on` that awaits it: see `block_on`).
    pub(crate) fn take_unstarted(&mut self, id: usize) -> Option<Runnable> {
        let unstarted = |r: &Runnable| task_id(r.metadata()) == id && !r.metadata().has_waited();
        if self.lifo.as_ref().is_some_and(unstarted) {
            return self.lifo.take();
        }
        let mut found = None;
        for _ in 0..self.remote().local.len() {
            let Some(r) = self.pop_local() else {
                break;
            };
            if found.is_none() && unstarted(&r) {
                found = Some(r);
            } else if let Err(r) = self.try_push_local(r) {
                // Cannot happen (we popped first); never lose a task.
                let g = r.metadata().group.clone();
                push_global(&g, r);
            }
        }
        found
    }

    /// Prepares the core to be run by another thread: ends the segment (the time this thread
    /// spends waiting is nobody's service) and moves the LIFO task to the local queue, where idle
    /// workers can steal it while the core waits for its new thread.
    pub(crate) fn prepare_hand_off(&mut self) {
        self.end_segment(crate::clock::stamp());
        if let Some(r) = self.lifo.take() {
            self.push_local(r);
        }
        self.lifo_streak = 0;
        // Extras are reachable only through the core: back to their groups, where any worker can
        // take them while the core waits for its thread.
        self.return_extras();
        fence(Ordering::SeqCst);
        self.shared.notify_work();
    }

    /// After a hand-off is undone (`HandedOff::reclaim`): the rest of the poll is served to the
    /// polled task's group `group` (kept by the hand-off), if it is one of this runtime's.
    pub(crate) fn resume_segment(&mut self, group: Option<Arc<GroupInner>>) {
        let host = Arc::as_ptr(&self.shared);
        if let Some(g) = group.filter(|g| ptr::eq(g.host_addr(), host)) {
            self.begin_segment(Cow::Owned(g), crate::clock::stamp());
        }
    }

    /// Shutdown: empties what only this core can reach into the tasks' group queues, where step 5
    /// of the shutdown drops them. Not dropped here: a future's destructor may wait for a timer
    /// (`block_on` of a sleep), which only fires, or fails, once step 5 has closed the timers, and
    /// step 5 waits for this core to retire. A drop here (a group already closed) may wake
    /// another task into this core's LIFO slot or queue (this thread has no core in its cell, so
    /// such wakes go to the global queues; the loop is a safeguard), so repeat until all are
    /// empty.
    pub(crate) fn retire(mut self) {
        self.first_park_reached();
        self.end_segment(crate::clock::stamp());
        // Nothing is charged any more; the service still goes to the groups' metrics.
        self.service.settle();
        self.publish_counts();
        loop {
            let mut moved = false;
            while let Some(r) = self.lifo.take() {
                leave_for_drain(r);
                moved = true;
            }
            while let Some(r) = self.pop_local() {
                leave_for_drain(r);
                moved = true;
            }
            while let Some(r) = self.extras.pop_front() {
                leave_for_drain(r);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }
}

/// Shutdown: queues a retiring core's runnable in its group's queue for step 5 to drop; if that
/// queue is closed already (step 5 has begun, after a timeout), drops it here.
fn leave_for_drain(r: Runnable) {
    let group = r.metadata().group.clone();
    if let Err(r) = group.push(r) {
        drop(r);
    }
}

/// How a group listed by a spill of the core serving `served` waits: not at all if it is that
/// group (the core keeps serving it), from now otherwise.
fn served_or_now(g: &GroupInner, served: *const GroupInner) -> WaitFrom {
    if ptr::eq(g, served) {
        WaitFrom::Served
    } else {
        WaitFrom::Now
    }
}

/// Consumes a wake flag. A failed compare-exchange writes nothing, so a waiting loop does not
/// generate stores (and loom models it exactly; see `tests/loom_runtime.rs`).
pub(crate) fn take_flag(flag: &crate::shim::AtomicBool) -> bool {
    flag.compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}
