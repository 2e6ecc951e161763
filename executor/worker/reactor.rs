//! Workers drive the `async-io` reactor: the keeper sleeps in it (feature `io`; compiled out
//! under loom and Miri, where the worker loop of `run` runs as without the feature).
//!
//! # Who holds the reactor
//! async-io lets a thread drive its reactor only from `async_io::block_on`: while the future it
//! polls is pending, block_on takes the reactor's lock if it is free and waits for I/O events
//! (and async-io timers) there; otherwise it parks the thread until the future's waker is woken.
//! So each runtime thread runs its worker loop as the future of one `async_io::block_on` ([`run`]),
//! for as long as it holds a core (a block_on that returned would wake async-io's fallback thread,
//! which then takes the reactor). Running tasks happens inside that poll.
//!
//! When the loop has nothing to run, the core parks (`Core::park_begin`, `Core::park_step`). With
//! this feature a parking core takes the keeper role whether or not a timer is armed (at most
//! one core holds it, see `time::keeper`); the keeper does not block in its parker but returns
//! `Pending` from the loop's poll, after it
//! - armed an async-io `Timer` at the next rondo timer deadline (if any; a timer from an earlier
//!   park that is due no later stays armed, since async-io interrupts the reactor's wait for every
//!   timer inserted), and
//! - registered block_on's waker in its parker ([`Parker::poll_park`](super::parker::Parker)).
//!
//! block_on then sleeps in the reactor, with the timer as its timeout. The other parking cores
//! block in their parkers as without the feature. Whoever unparks the keeper (a notification,
//! shutdown, an armer whose timer is earlier than the keeper's deadline: `Lowered::Unpark`) wakes
//! that waker, and async-io's waker interrupts the reactor's wait (`Reactor::notify`) when it is
//! woken from another thread while its thread is blocked on I/O. The keeper's loop then polls
//! again, re-checks every reason to wake, and runs what it found or returns `Pending` again.
//!
//! async-io has one reactor per process. If another thread holds it (async-io's fallback thread,
//! a foreign `block_on`), block_on parks the keeper without it until the waker is woken, and that
//! thread dispatches the I/O events and fires the keeper's timer; when every worker is busy, the
//! fallback thread keeps I/O flowing as it does without the feature. But a block_on thread that
//! leaves the reactor hands it to nobody: a thread parked without it waits for its waker, and the
//! fallback thread notices an unattended reactor only after a back-off of up to 10 ms. So the
//! keepers of several runtimes in one process do not all rely on the reactor for their
//! deadlines: a process-wide flag ([`REACTOR`]) lets one keeper at a time sleep in the reactor;
//! the keeper of another runtime parks in its parker with a timeout at its deadline, as without
//! the feature, and takes the flag at a later park if it is free.
//!
//! # Keeping the reactor
//! async-io's fallback thread exists as long as any `block_on` does (so always, with this
//! feature). It polls the reactor's tick counter with a back-off from 50 µs to 10 ms and, once
//! the tick has not moved for about 10 ms, blocks on the reactor's lock; it then takes the reactor
//! the moment the keeper leaves it to run what a readiness event woke, and dispatches the next
//! event from outside the runtime, which costs that request a second thread wake-up (async-io
//! 2.6, `driver.rs`). So while I/O is recent (within the last second a readiness wake claimed the
//! keeper, or the fallback thread's dispatch woke it), the keeper wakes at least every 8 ms: each
//! wake is a reactor pass, which moves the tick, and the fallback thread keeps backing off instead
//! of queueing for the lock. An idle runtime (no I/O for a second) sleeps without a timeout again.
//!
//! The fallback thread's dispatch counts because once that thread holds the reactor (it takes it
//! at once while no `block_on` runs), it retakes it after its first back-off (50 µs) following
//! each pass unless another thread took it meanwhile, which a keeper running a request for longer
//! never does. The keeper's 8 ms wakes find nothing to run and retry the reactor within that
//! back-off. That thread is known by the name async-io gives it
//! (`reacting::on_fallback_thread`); other wakes from outside do not count: without I/O the reactor is worth nothing to the keeper, and
//! winning it back would cost a runtime fed from another thread a keeper pass every 8 ms, and
//! the fallback thread a round of its back-off after each.
//!
//! # Where readiness wakes go
//! The wakes a reactor pass dispatches run on the keeper's thread, between two polls of its loop,
//! where it holds no lent core. While the keeper waits, its thread is marked
//! (`reacting::reacting_core`), and a woken task that the lane would admit (`Scheduler::lane_admits`:
//! it waited before; its group is idle, flat, not ahead of the rotation's first group by more than
//! an eighth of its own quantum nor of the floor by more than a quantum, and has no task in the
//! lane or kept) is kept on the thread for the keeper (`reacting::keep_dispatched`), holding its
//! group's lane flag until the keeper takes it, so a second wake of that group in the same pass
//! goes through the group's queue, as with the lane. The first
//! one kept claims the keeper itself as the woken core (`Idle::claim`: counted awake, not
//! searching; no other thread woken, no system call, since async-io's waker skips the reactor
//! notification on the reactor's own thread). When block_on polls the loop again, right after the
//! pass, the keeper leaves its park and puts what was kept on its own core: the first task in its
//! LIFO slot, the others in its local queue in the order woken (where a sleeper is woken to steal
//! them only if nobody searches, as for any local push). It runs them as its next tasks, each in a
//! segment charged to its own group, as a lane task is: so a group's share is what it would be had
//! its task gone through the lane, and no other worker is woken for work the keeper is about to
//! run. A task of a group that is not due (listed, ahead, a tree's group, or with a task in the
//! lane or kept) or a new one goes the way of any wake from outside (`schedule`): the lane or its group's
//! global queue, whose notification claims the keeper the same way (`Remote::claimed` tells its
//! parking loop so) and, for a second such wake in the same pass, wakes a sleeping core, as for
//! any batch.
//!
//! A wake from outside the runtime (async-io's fallback thread dispatching while it holds the
//! reactor, any foreign thread) that must wake a sleeping core wakes the keeper if it sleeps
//! (`Idle::notify_preferring`): a keeper that found the reactor taken sleeps without it and would
//! otherwise never try again, so the fallback thread would keep dispatching. A wake from one of
//! the runtime's own threads wakes another sleeper, leaving the keeper in the reactor.

use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;

use crate::task::Runnable;

use super::core::Core;
use super::park::Step;
use super::publish::spill;
use super::reacting::{io_recent, set_reacting, take_dispatched};

/// Held by the one keeper in the process that sleeps in the reactor (see the module docs).
static REACTOR: AtomicBool = AtomicBool::new(false);

/// The longest the keeper waits in the reactor while I/O is recent (see the module docs, *Keeping
/// the reactor*; how long I/O counts as recent is `reacting`'s).
const REACTOR_TICK: Duration = Duration::from_millis(8);

/// Runs `core` inside `async_io::block_on` (see the module docs); returns as `run::run` does without the feature.
pub(crate) fn run(core: Box<Core>) -> Option<Box<Core>> {
    async_io::block_on(RunLoop {
        core: Some(core),
        park: None,
        timer: None,
        dispatched: Vec::new(),
    })
}

/// The worker loop as a future: runs tasks, and returns `Pending` only while its core keeps time
/// in the reactor.
struct RunLoop {
    core: Option<Box<Core>>,
    /// Set while the core is parked (between `park_begin` and `park_end`).
    park: Option<Parking>,
    /// The async-io timer that ends the keeper's wait in the reactor, with its deadline. It
    /// outlives a park: async-io interrupts the reactor's wait (an `eventfd` write, and one more
    /// pass of `epoll_wait`) every time a timer is inserted, so a keeper that parks again before
    /// the timer fires keeps it rather than insert a new one (see [`Parking::poll`]).
    timer: Option<(Instant, Timer)>,
    /// Reused buffer for the tasks this thread's reactor dispatch kept for the core
    /// (`reacting::take_dispatched`).
    dispatched: Vec<Runnable>,
}

/// A parked core's state across polls.
struct Parking {
    /// The core holds the keeper role.
    keeping: bool,
    /// A waker is registered in the core's parker (`Parker::poll_park`).
    waiting: bool,
    /// The keeper holds [`REACTOR`].
    reacting: bool,
}

impl Future for RunLoop {
    type Output = Option<Box<Core>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        set_reacting((ptr::null(), 0));
        let Some(mut core) = this.core.take() else {
            // Polled after completion: block_on never does that.
            return Poll::Ready(None);
        };
        take_dispatched(&mut this.dispatched);
        if !this.dispatched.is_empty() {
            // The reactor's dispatch kept tasks for this core while it waited there: it wakes
            // and runs them first (see the module docs, *Where readiness wakes go*).
            if let Some(mut park) = this.park.take() {
                core.wake_self();
                park.stop_waiting(&core);
                core.park_end(park.keeping);
            }
            let mut kept = this.dispatched.drain(..).inspect(|r| {
                // Taken: the group's next wake may be kept, or use the lane, again.
                r.metadata().group.lane_flag().leave();
            });
            if let Some(first) = kept.next() {
                core.schedule_local(first, false);
            }
            for r in kept {
                // The local queue, where other workers may steal it: a sleeper is woken if
                // nobody searches (`Core::schedule_local`).
                core.schedule_local(r, true);
            }
        }
        loop {
            // Looked at before it is taken: `take` would copy the whole (large) state out on every
            // turn of the loop, one per task run.
            if this.park.is_some() {
                let mut park = this.park.take().expect("checked above");
                if park.poll(&mut core, &mut this.timer, cx).is_pending() {
                    set_reacting((&*core.shared, core.idx));
                    this.park = Some(park);
                    this.core = Some(core);
                    return Poll::Pending;
                }
                core.park_end(park.keeping);
            }
            if core.shared.is_shutdown() {
                return Poll::Ready(Some(core));
            }
            match core.next_task() {
                Some(r) => {
                    core.found_work();
                    core = match core.run_task(r) {
                        Some(c) => c,
                        None => return Poll::Ready(None),
                    };
                }
                None => {
                    if core.park_begin() {
                        this.park = Some(Parking {
                            keeping: false,
                            waiting: false,
                            reacting: false,
                        });
                    }
                }
            }
        }
    }
}

impl Parking {
    /// The parking loop (`Core::park`'s, with the keeper sleeping in the reactor): `Ready` once
    /// the core is awake.
    ///
    /// `timer` is the run loop's reactor timer, kept from one park to the next: a keeper whose
    /// deadline is later than the kept timer's (while I/O is recent, the deadline is `REACTOR_TICK`
    /// from now at every park) keeps the timer and wakes at its deadline, early, re-checks and
    /// parks again; one insert per tick instead of one per park.
    fn poll(
        &mut self,
        core: &mut Core,
        timer: &mut Option<(Instant, Timer)>,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        loop {
            match core.park_step(&mut self.keeping, true) {
                Step::Woke => {
                    self.stop_waiting(core);
                    return Poll::Ready(());
                }
                Step::Retry => {}
                Step::Park => {
                    self.stop_waiting(core);
                    // Not the keeper: nothing of this thread waits in the reactor.
                    *timer = None;
                    core.remote().parker.park();
                }
                Step::Nap(at) => {
                    self.stop_waiting(core);
                    *timer = None;
                    core.remote()
                        .parker
                        .park_timeout(at.saturating_duration_since(Instant::now()));
                }
                Step::Keep(deadline) => {
                    if !self.reacting {
                        self.reacting = REACTOR
                            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
                            .is_ok();
                    }
                    if !self.reacting {
                        // Another runtime's keeper sleeps in the reactor: keep time as without
                        // the feature (see the module docs).
                        *timer = None;
                        let parker = &core.remote().parker;
                        match deadline {
                            Some(at) => {
                                parker.park_timeout(at.saturating_duration_since(Instant::now()))
                            }
                            None => parker.park(),
                        }
                        continue;
                    }
                    // While I/O is recent, wake at least every `REACTOR_TICK` (see the module docs).
                    let now = Instant::now();
                    let deadline = if io_recent(&core.shared, now) {
                        let tick = now + REACTOR_TICK;
                        Some(deadline.map_or(tick, |d| d.min(tick)))
                    } else {
                        deadline
                    };
                    if let Some(at) = deadline {
                        // A kept timer due no later than `at` wakes the keeper in time (a timer
                        // already due is ready at once below).
                        let t = match timer {
                            Some((due, t)) if *due <= at => t,
                            _ => {
                                #[cfg(test)]
                                core.shared.count_reactor_timer();
                                &mut timer.insert((at, Timer::at(at))).1
                            }
                        };
                        if Pin::new(t).poll(cx).is_ready() {
                            // The deadline passed: the next step fires the timers.
                            *timer = None;
                            continue;
                        }
                    } else {
                        *timer = None;
                    }
                    match core.remote().parker.poll_park(cx) {
                        Poll::Ready(()) => self.waiting = false,
                        Poll::Pending => {
                            self.waiting = true;
                            return Poll::Pending;
                        }
                    }
                }
            }
        }
    }

    /// Takes back a registered waker: the core no longer waits through block_on. The reactor
    /// timer stays with the run loop for the next park.
    fn stop_waiting(&mut self, core: &Core) {
        if std::mem::take(&mut self.waiting) {
            core.remote().parker.cancel_wait();
        }
        if std::mem::take(&mut self.reacting) {
            REACTOR.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for RunLoop {
    fn drop(&mut self) {
        // Unwinding out of the loop (a runtime bug: user panics are caught in `run_task`) with the
        // core parked: leave no waker behind in its parker.
        if let (Some(park), Some(core)) = (&mut self.park, &self.core) {
            park.stop_waiting(core);
        }
        // Tasks a dispatch kept for the core and no poll took: to their groups' queues.
        take_dispatched(&mut self.dispatched);
        spill(
            self.dispatched
                .drain(..)
                .inspect(|r| r.metadata().group.lane_flag().leave()),
        );
    }
}

/// Makes async-io's reactor apply the timer removals queued so far; shutdown calls it once every
/// task is dropped. A dropped async-io `Timer` queues its removal, which the reactor applies only
/// at its next pass and without being woken for it; until then the timer's waker (a task's, which
/// holds the runtime through its group) stays in the reactor, which may sleep until that timer's
/// deadline. Inserting a timer wakes whoever holds the reactor, and every pass applies the queued
/// operations.
pub(crate) fn apply_dropped_timers() {
    // Far in the future, so it is inserted (a timer already due never is); its waker holds
    // nothing, and its own removal is applied by a later pass.
    let mut nudge = Timer::after(Duration::from_secs(3600));
    let _ = Pin::new(&mut nudge).poll(&mut Context::from_waker(std::task::Waker::noop()));
}
