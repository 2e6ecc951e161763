//! The worker loop: where tasks are found, polled, charged and parked.
//!
//! # Where a worker looks for its next task (in order)
//! 1. Every `GLOBAL_INTERVAL` ticks, the global queue of the group it serves, so tasks woken from
//!    outside are not starved by local ping-pong.
//! 2. The LIFO slot, at most `LIFO_CAP` times in a row (a message-passing pair stays on one warm
//!    core without starving the local queue).
//! 3. The local queue (FIFO).
//! 4. While its quantum lasts, a batch of the served group's global queue, without the scheduler
//!    lock (`len / workers + 1`, at most half a local queue).
//! 5. The group scheduler: the listed group with the smallest virtual runtime; it takes a batch of
//!    that group's global queue (a short queue whole).
//! 6. Stealing half of another worker's local queue (at most half the workers search at once).
//! 7. Parking (see `idle`).
//!
//! # Who may touch what
//! `Worker` lives on its thread's stack and is only touched by that thread (its fields are `Cell`s,
//! reached re-entrantly from `schedule` and nested `block_on`; no `RefCell` borrow is ever held
//! while a task is polled). `WorkerShared` (local queue, parking flag, thread handle, serving
//! pointer) is reachable by every thread through `Shared::workers`.
//!
//! # Service segments and the quantum
//! A *segment* is a stretch of time a worker spends on one group. It ends when the worker switches
//! group, parks, or its quantum ends; its polls and busy time are then flushed to the group's
//! metrics, and its measured duration is charged to the group's virtual runtime at the worker's next
//! visit to the scheduler (a pick, a quantum end, parking, or once eight charges are pending), so a
//! charge is never more than a quantum late and costs no extra lock. The clock is read at
//! segment boundaries and every `clock_interval` polls, an interval adapted so that reading it costs
//! about one read per `CLOCK_EVERY` of work. When the quantum ends and another listed group is
//! behind the served one, the worker spills its LIFO slot and local queue back to their groups'
//! global queues and picks again: no local structure holds a worker on one group for more than a
//! quantum while another group waits. When it stays and other groups are active, it moves the older
//! half of its local queue to the group's global queue, so other workers see the group's surplus
//! and can serve it when it is behind (fairness is global, not per worker).
//!
//! Tasks of a group with `max_concurrency` always go through the group's limiter and global queue,
//! never the LIFO slot, so their order is FIFO.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::pin;
use std::ptr;
use std::sync::atomic::AtomicPtr;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use async_task::ScheduleInfo;

use crate::context;
use crate::coop;
use crate::group::GroupInner;
use crate::queue::{LOCAL_CAPACITY, LocalQueue};
use crate::runtime::Shared;
use crate::scheduler::{Charge, Verdict};
use crate::shim::{AtomicBool, Ordering, fence};
use crate::task::Runnable;

/// Consecutive polls from the LIFO slot before it must yield to the local queue.
const LIFO_CAP: u32 = 3;
/// Every this many ticks, look at the served group's global queue first.
const GLOBAL_INTERVAL: u32 = 61;
/// Segment charges a worker may hold before it takes the scheduler lock just to apply them.
const MAX_PENDING_CHARGES: usize = 8;
/// Target amount of work between two clock reads.
const CLOCK_EVERY: Duration = Duration::from_micros(10);
/// Most polls between two clock reads.
const MAX_CLOCK_INTERVAL: u32 = 256;

/// The part of a worker every thread may reach.
pub(crate) struct WorkerShared {
    pub(crate) local: LocalQueue,
    /// Set (under the sleepers lock) by the notifier that chose this worker.
    pub(crate) notified: AtomicBool,
    pub(crate) thread: OnceLock<Thread>,
    /// The group this worker serves now (for metrics only), or null.
    pub(crate) serving: AtomicPtr<GroupInner>,
}

impl WorkerShared {
    pub(crate) fn new() -> Self {
        WorkerShared {
            local: LocalQueue::new(),
            notified: AtomicBool::new(false),
            thread: OnceLock::new(),
            serving: AtomicPtr::new(ptr::null_mut()),
        }
    }

    pub(crate) fn unpark(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}

/// A worker's private state; see the module docs.
pub(crate) struct Worker {
    idx: usize,
    /// This worker's runtime (also what `Handle::current()` returns in the tasks it polls).
    handle: crate::runtime::Handle,
    lifo: Cell<Option<Runnable>>,
    lifo_streak: Cell<u32>,
    tick: Cell<u32>,
    searching: Cell<bool>,
    /// The group of the current segment; `seg_ptr` mirrors it for cheap comparisons.
    seg_group: RefCell<Option<Arc<GroupInner>>>,
    seg_ptr: Cell<*const GroupInner>,
    seg_start: Cell<Instant>,
    seg_polls: Cell<u64>,
    /// The scheduler holds a "serving" entry for this worker (see `Scheduler::update_floor`).
    reported_serving: Cell<bool>,
    quantum_start: Cell<Instant>,
    last_clock: Cell<Instant>,
    clock_interval: Cell<u32>,
    clock_countdown: Cell<u32>,
    rng: Cell<u32>,
    /// Reused buffer for the batch `take_from_rotation` moves to the local queue.
    batch: RefCell<Vec<Runnable>>,
    /// Finished segments not yet charged to the scheduler (see `defer_charge`).
    pending: RefCell<Vec<Charge>>,
}

/// Wakes a thread blocked in `block_on`.
struct BlockOnWaker {
    woken: AtomicBool,
    thread: Thread,
}

impl BlockOnWaker {
    /// A waker that unparks the current thread, set as already woken so the future is polled once
    /// before anything waits.
    fn for_this_thread() -> (Arc<BlockOnWaker>, Waker) {
        let state = Arc::new(BlockOnWaker {
            woken: AtomicBool::new(true),
            thread: std::thread::current(),
        });
        let waker = Waker::from(state.clone());
        (state, waker)
    }
}

impl Wake for BlockOnWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// The schedule function of every task: where a woken or new task goes.
pub(crate) fn schedule(r: Runnable, info: ScheduleInfo) {
    let meta = r.metadata();
    if meta.group.limiter.is_some() {
        let g = meta.group.clone();
        let admitted = g.limiter.as_ref().and_then(|l| l.admit(r));
        if let Some(r) = admitted {
            g.push_global(r);
        }
        return;
    }
    let gptr = Arc::as_ptr(&meta.group);
    let sptr = Arc::as_ptr(&meta.group.shared);
    let r = context::with(|c| match c.worker() {
        // During shutdown this may still fill the LIFO slot or local queue of a worker that is
        // leaving: its exit drain loops until both are empty.
        Some(w) if ptr::eq(Arc::as_ptr(w.shared()), sptr) && w.seg_ptr.get() == gptr => {
            w.schedule_local(r, info.woken_while_running);
            None
        }
        _ => Some(r),
    });
    if let Some(r) = r {
        let g = r.metadata().group.clone();
        g.push_global(r);
    }
}

impl Worker {
    /// The shared state of this worker's runtime.
    #[inline]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The runtime this worker belongs to.
    pub(crate) fn handle(&self) -> &crate::runtime::Handle {
        &self.handle
    }

    pub(crate) fn new(idx: usize, handle: crate::runtime::Handle) -> Self {
        let now = Instant::now();
        Worker {
            idx,
            handle,
            lifo: Cell::new(None),
            lifo_streak: Cell::new(0),
            tick: Cell::new(0),
            searching: Cell::new(false),
            seg_group: RefCell::new(None),
            seg_ptr: Cell::new(ptr::null()),
            seg_start: Cell::new(now),
            seg_polls: Cell::new(0),
            reported_serving: Cell::new(false),
            quantum_start: Cell::new(now),
            last_clock: Cell::new(now),
            clock_interval: Cell::new(1),
            clock_countdown: Cell::new(1),
            rng: Cell::new(0x9E37_79B9 ^ (idx as u32).wrapping_mul(0x85EB_CA6B) | 1),
            batch: RefCell::new(Vec::with_capacity(LOCAL_CAPACITY / 2)),
            pending: RefCell::new(Vec::with_capacity(MAX_PENDING_CHARGES)),
        }
    }

    fn ws(&self) -> &WorkerShared {
        &self.shared().workers[self.idx]
    }

    /// The worker thread's main loop.
    pub(crate) fn run(&self) {
        while !self.shared().is_shutdown() {
            match self.next_task() {
                Some(r) => {
                    self.found_work();
                    self.run_task(r);
                }
                None => self.park(None),
            }
        }
        self.end_segment(Instant::now());
        // Shutdown step 3 (see `runtime`): drop what only this thread can reach. Dropping a
        // future may wake another task into this worker's LIFO slot or queue, so repeat until
        // both are empty.
        loop {
            let mut dropped = false;
            while let Some(r) = self.lifo.take() {
                drop(r);
                dropped = true;
            }
            while let Some(r) = self.ws().local.pop() {
                drop(r);
                dropped = true;
            }
            if !dropped {
                break;
            }
        }
    }

    /// Runs other tasks while waiting for `future` (nested `block_on` on a worker thread).
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        let (waker_state, waker) = BlockOnWaker::for_this_thread();
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(future);
        loop {
            if take_flag(&waker_state.woken) {
                let budget = coop::start_poll();
                let out = future.as_mut().poll(&mut cx);
                coop::end_poll(budget);
                if let Poll::Ready(v) = out {
                    return v;
                }
            }
            if self.shared().is_shutdown() {
                // The runtime is shutting down and this worker cannot exit until `future` is done;
                // it may be waiting for a queued task, which shutdown would only drop after joining
                // this worker. Drop what is queued (shutdown step 5) so such futures resolve.
                drop(self.lifo.take());
                self.shared().drain_once();
                if !waker_state.woken.load(Ordering::Acquire) {
                    std::thread::park_timeout(Duration::from_millis(1));
                }
                continue;
            }
            match self.next_task() {
                Some(r) => {
                    self.found_work();
                    self.run_task(r);
                }
                None => self.park(Some(&waker_state.woken)),
            }
        }
    }

    fn schedule_local(&self, r: Runnable, is_yield: bool) {
        if is_yield {
            self.push_local(r);
        } else if let Some(prev) = self.lifo.replace(Some(r)) {
            self.push_local(prev);
        } else {
            return;
        }
        // New stealable work: wake a sleeper if nobody is searching. A missed wake here costs
        // parallelism, never a task: this worker is awake and will run its own queue.
        if self.shared().idle.wants_notify() {
            fence(Ordering::SeqCst);
            self.shared().notify_work();
        }
    }

    fn push_local(&self, r: Runnable) {
        if let Err(r) = self.ws().local.push(r) {
            // Full: move half of the queue plus this task to their groups' global queues.
            let mut batch = Vec::with_capacity(LOCAL_CAPACITY / 2 + 1);
            for _ in 0..LOCAL_CAPACITY / 2 {
                match self.ws().local.pop() {
                    Some(r) => batch.push(r),
                    None => break,
                }
            }
            batch.push(r);
            spill(batch);
        }
    }

    fn next_task(&self) -> Option<Runnable> {
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if tick % GLOBAL_INTERVAL == 0 {
            let r = self.seg_group.borrow().as_ref().and_then(|g| g.queue.pop());
            if r.is_some() {
                return r;
            }
        }
        if let Some(r) = self.lifo.take() {
            if self.lifo_streak.get() < LIFO_CAP {
                self.lifo_streak.set(self.lifo_streak.get() + 1);
                return Some(r);
            }
            self.push_local(r);
        }
        self.lifo_streak.set(0);
        if let Some(r) = self.ws().local.pop() {
            return Some(r);
        }
        self.find_work()
    }

    fn find_work(&self) -> Option<Runnable> {
        if let Some(r) = self.take_from_own_group() {
            return Some(r);
        }
        if self.shared().scheduler.has_listed() {
            if let Some(r) = self.take_from_rotation() {
                return Some(r);
            }
        }
        if !self.searching.get() {
            if !self.shared().idle.try_search() {
                return None;
            }
            self.searching.set(true);
        }
        self.steal()
    }

    /// While its quantum lasts, a worker takes its next batch straight from the global queue of
    /// the group it serves (lock-free), instead of asking the scheduler. The quantum end still
    /// decides whether it must switch (`quantum_end`), so this changes no share, only how often
    /// workers serving one busy group meet at the scheduler lock.
    fn take_from_own_group(&self) -> Option<Runnable> {
        let seg = self.seg_group.borrow();
        let g = seg.as_ref()?;
        let served = self
            .last_clock
            .get()
            .saturating_duration_since(self.quantum_start.get());
        if served >= self.shared().config.quantum {
            return None;
        }
        let workers = self.shared().workers.len();
        let mut batch = self.batch.borrow_mut();
        let first = g.queue.pop_batch(
            |len| (len / workers + 1).min(LOCAL_CAPACITY / 2),
            &mut batch,
        )?;
        drop(seg);
        for r in batch.drain(..) {
            self.push_local(r);
        }
        Some(first)
    }

    fn take_from_rotation(&self) -> Option<Runnable> {
        let now = Instant::now();
        let mut batch = std::mem::take(&mut *self.batch.borrow_mut());
        let mut pending = std::mem::take(&mut *self.pending.borrow_mut());
        let found = loop {
            if let Some(c) = self.end_segment(now) {
                pending.push(c);
            }
            let picked =
                self.shared()
                    .scheduler
                    .pick_and_take(&mut pending, now, self.idx, &mut batch);
            match picked {
                None => break None,
                Some((g, Some(first))) => {
                    self.reported_serving.set(true);
                    self.start_segment(g, now);
                    break Some(first);
                }
                // Another worker emptied the group first; the scheduler unlisted it.
                Some((_, None)) => continue,
            }
        };
        for r in batch.drain(..) {
            self.push_local(r);
        }
        *self.batch.borrow_mut() = batch;
        *self.pending.borrow_mut() = pending;
        found
    }

    /// Records a finished segment's charge; applied at the next scheduler visit, or now if
    /// several have piled up.
    fn defer_charge(&self, charge: Charge) {
        let mut pending = self.pending.borrow_mut();
        pending.push(charge);
        if pending.len() >= MAX_PENDING_CHARGES {
            self.shared().scheduler.charge_all(&mut pending, None);
        }
    }

    fn steal(&self) -> Option<Runnable> {
        let n = self.shared().workers.len();
        if n == 1 {
            return None;
        }
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng.set(x);
        let start = x as usize % n;
        for i in 0..n {
            let v = (start + i) % n;
            if v == self.idx {
                continue;
            }
            if let Some(r) = self.shared().workers[v]
                .local
                .steal_half_into(&self.ws().local)
            {
                return Some(r);
            }
        }
        None
    }

    fn found_work(&self) {
        if self.searching.replace(false) && self.shared().idle.stop_searching() {
            // The last searcher found work: more may be queued, so wake one more (idle step 2).
            fence(Ordering::SeqCst);
            self.shared().notify_work();
        }
    }

    fn run_task(&self, r: Runnable) {
        let meta = r.metadata();
        let gptr = Arc::as_ptr(&meta.group);
        if gptr != self.seg_ptr.get() {
            let g = meta.group.clone();
            let now = Instant::now();
            if let Some(c) = self.end_segment(now) {
                self.defer_charge(c);
            }
            self.start_segment(g, now);
        }
        let limited = meta.group.limiter.is_some().then(|| meta.group.clone());
        if meta.is_cancelled() {
            // Cancelled by marking: the future is dropped here, on a worker.
            drop(r);
        } else {
            // One thread-local access to enter the task's context and one to leave it.
            let (prev_group, prev_budget) =
                context::with(|c| (c.replace_group(gptr), c.budget.replace(coop::BUDGET)));
            r.run();
            context::with(|c| {
                c.replace_group(prev_group);
                c.budget.set(prev_budget);
            });
            self.seg_polls.set(self.seg_polls.get() + 1);
        }
        if let Some(g) = limited {
            if let Some(next) = g.limiter.as_ref().and_then(|l| l.release()) {
                g.push_global(next);
            }
        }
        let c = self.clock_countdown.get() - 1;
        if c == 0 {
            self.clock_check();
        } else {
            self.clock_countdown.set(c);
        }
    }

    fn clock_check(&self) {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.last_clock.get());
        self.last_clock.set(now);
        let per_poll = elapsed.as_nanos() as u64 / u64::from(self.clock_interval.get()).max(1);
        let interval = (CLOCK_EVERY.as_nanos() as u64 / per_poll.max(1))
            .clamp(1, u64::from(MAX_CLOCK_INTERVAL)) as u32;
        self.clock_interval.set(interval);
        self.clock_countdown.set(interval);
        if now.saturating_duration_since(self.quantum_start.get()) >= self.shared().config.quantum {
            self.quantum_end(now);
        }
    }

    #[inline(never)]
    fn quantum_end(&self, now: Instant) {
        self.quantum_start.set(now);
        let Some((g, ns)) = self.end_segment(now) else {
            return;
        };
        let verdict = {
            let mut pending = self.pending.borrow_mut();
            self.reported_serving.set(true);
            self.shared()
                .scheduler
                .charge_and_check(&mut pending, self.idx, &g, ns)
        };
        let others_active = match verdict {
            Verdict::Switch => true,
            Verdict::Stay { others_listed } => {
                others_listed || self.shared().others_serve_other_groups(self.idx, &g)
            }
        };
        self.start_segment(g, now);
        let local = &self.ws().local;
        let mut batch: Vec<Runnable> = Vec::new();
        match verdict {
            Verdict::Switch => {
                // Another group is behind this one: hand all local work back and end the segment,
                // so `next_task` finds nothing local, does not take from this group's queue, and
                // asks the scheduler, which picks the group that is behind.
                batch.extend(self.lifo.take());
                while let Some(r) = local.pop() {
                    batch.push(r);
                }
                if let Some(c) = self.end_segment(now) {
                    self.defer_charge(c);
                }
            }
            Verdict::Stay { .. } if others_active => {
                // Other workers serve other groups and only see this group's global queue: expose
                // the older half of the local backlog there, so a group with more runnable tasks
                // than one worker can run gets the other workers' time its weight entitles it to.
                // A group with a single runnable task keeps it (half of one is none).
                for _ in 0..local.len() / 2 {
                    match local.pop() {
                        Some(r) => batch.push(r),
                        None => break,
                    }
                }
            }
            Verdict::Stay { .. } => {}
        }
        if !batch.is_empty() {
            spill(batch);
        }
    }

    fn start_segment(&self, g: Arc<GroupInner>, now: Instant) {
        self.seg_ptr.set(Arc::as_ptr(&g));
        self.ws()
            .serving
            .store(Arc::as_ptr(&g) as *mut GroupInner, Ordering::Relaxed);
        *self.seg_group.borrow_mut() = Some(g);
        self.seg_start.set(now);
        self.seg_polls.set(0);
    }

    /// Ends the current segment: flushes its polls and busy time to the group's metrics and returns
    /// the group with the nanoseconds to charge (the caller charges the scheduler).
    fn end_segment(&self, now: Instant) -> Option<(Arc<GroupInner>, u64)> {
        let g = self.seg_group.borrow_mut().take()?;
        self.seg_ptr.set(ptr::null());
        self.ws().serving.store(ptr::null_mut(), Ordering::Relaxed);
        let ns = now
            .saturating_duration_since(self.seg_start.get())
            .as_nanos() as u64;
        g.polls.fetch_add(self.seg_polls.get(), Ordering::Relaxed);
        g.busy_ns.fetch_add(ns, Ordering::Relaxed);
        self.seg_polls.set(0);
        Some((g, ns))
    }

    /// Parks until notified, shut down, or `extra` (a nested `block_on`'s wake flag) is set.
    #[inline(never)]
    fn park(&self, extra: Option<&AtomicBool>) {
        if let Some(c) = self.end_segment(Instant::now()) {
            self.pending.borrow_mut().push(c);
        }
        // Tell the scheduler this worker serves nothing now (if it said otherwise), so the group it
        // served no longer holds the floor down.
        let parking = self.reported_serving.replace(false).then_some(self.idx);
        self.shared()
            .scheduler
            .charge_all(&mut self.pending.borrow_mut(), parking);
        let idle = &self.shared().idle;
        let ws = self.ws();
        let extra_set = || extra.is_some_and(|f| f.load(Ordering::Acquire));
        idle.sleep(self.idx, self.searching.replace(false));
        fence(Ordering::SeqCst);
        if self.shared().has_visible_work(self.idx) || self.shared().is_shutdown() || extra_set() {
            self.wake_self();
            return;
        }
        loop {
            if take_flag(&ws.notified) {
                // The notifier counted us awake and searching.
                self.searching.set(true);
                break;
            }
            if self.shared().is_shutdown() || extra_set() {
                self.wake_self();
                break;
            }
            std::thread::park();
        }
        let now = Instant::now();
        self.quantum_start.set(now);
        self.last_clock.set(now);
    }

    fn wake_self(&self) {
        let ws = self.ws();
        self.shared()
            .idle
            .wake_self(self.idx, || ws.notified.store(false, Ordering::Relaxed));
        self.searching.set(true);
    }
}

/// Consumes a wake flag. A failed compare-exchange writes nothing, so a waiting loop does not
/// generate stores (and loom models it exactly; see `tests/loom_runtime.rs`).
fn take_flag(flag: &AtomicBool) -> bool {
    flag.compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Moves runnables to their groups' global queues, listing each group and notifying once per run
/// of same-group tasks.
fn spill(batch: Vec<Runnable>) {
    let mut current: Option<Arc<GroupInner>> = None;
    for r in batch {
        let same = current
            .as_ref()
            .is_some_and(|g| ptr::eq(Arc::as_ptr(g), Arc::as_ptr(&r.metadata().group)));
        if !same {
            if let Some(g) = current.take() {
                g.announce();
            }
            current = Some(r.metadata().group.clone());
        }
        if let Some(g) = &current {
            if let Err(r) = g.queue.push(r) {
                drop(r);
            }
        }
    }
    if let Some(g) = current {
        g.announce();
    }
}

/// Runs `future` to completion on the current thread: inline-executing tasks if this is a worker
/// thread, otherwise parking between polls.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let worker = context::with(|c| c.worker().map(|w| w as *const Worker));
    if let Some(w) = worker {
        // SAFETY: the pointer came from this thread's context, which only holds the worker that
        // lives on this thread's stack for as long as the pointer is set; we are on that thread and
        // inside that lifetime (block_on is called from a task the worker is polling).
        return unsafe { &*w }.block_on(future);
    }
    let (waker_state, waker) = BlockOnWaker::for_this_thread();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if take_flag(&waker_state.woken) {
            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                return v;
            }
        } else {
            std::thread::park();
        }
    }
}

/// Entry point of a worker thread.
pub(crate) fn worker_main(idx: usize, handle: crate::runtime::Handle) {
    let _ = handle.shared.workers[idx]
        .thread
        .set(std::thread::current());
    let _enter = context::enter(handle.clone());
    let worker = Worker::new(idx, handle);
    context::with(|c| c.set_worker(&worker));
    worker.run();
    context::with(|c| c.set_worker(ptr::null()));
}
