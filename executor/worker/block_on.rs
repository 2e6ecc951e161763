//! `block_on`: running a future to completion on the calling thread.
//!
//! Outside a runtime thread's poll, the thread parks between polls of the future. Inside a task's
//! poll (a `block_on` nested in a task), the thread holds a core that other tasks need, so:
//!
//! 1. The future is polled once, with the core still lent as in the enclosing task's poll: a
//!    future that blocks there is seen and rescued by the stall monitor like any blocking poll,
//!    and a `block_in_place` inside it hands the core over. If it is ready, nothing else happens.
//! 2. If the future waits for a `JoinHandle` whose task has never been polled and sits in this
//!    core's LIFO slot or local queue, the core is taken back and that one task is run inline (the
//!    .NET inlining idea, where it is safe: the waiting frame depends on that task, and the task
//!    has not started), then the core is lent again and the future polled again. At most
//!    `MAX_INLINED` tasks run inline on top of one another.
//! 3. Otherwise the core is handed to another thread (`threads`, steps 2 to 7 of the hand-off
//!    protocol) and this thread parks between polls of the future. It never runs unrelated tasks on
//!    top of the waiting frame, so no task can end up waiting under another's frame (the deadlock
//!    of two tasks each blocking on the other) and recursion does not grow one thread's stack.
//!
//! A `block_on` of another runtime on this worker polls its future with the core taken aside
//! (the future's timers must arm in its own runtime's wheels, not this core's shard), and goes to
//! step 3 if it waits.

use std::cell::Cell;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use crate::group::with_current;
use crate::shim::{AtomicU32, Ordering};
use crate::task::coop::PollBudget;
use crate::task::{BOX_FUTURES_ABOVE, end_probe, start_probe};

use crate::time::clock::{Busy, Clock};

use super::core::Core;
use super::lease;
use super::runner::hand_off;
use super::shared::Shared;

/// Wakes a thread blocked in `block_on`.
///
/// A pending wake counts the thread busy on its runtime's clock (`time::clock`): the wake that
/// sets `WOKEN` counts one, and the poll that consumes it ends the count ([`BlockOnWaker::take`]),
/// so a paused clock never auto-advances while a `block_on` future is being polled or is about to
/// be. When `block_on` returns it sets `DONE` and ends a count still pending ([`Retire`]); a wake
/// after that (a waker kept past the call) counts nothing. Both bits live in one word, so a wake
/// and the retirement agree on who ends the count.
struct BlockOnWaker {
    state: AtomicU32,
    thread: Thread,
    clock: Arc<Clock>,
}

/// The future was woken and not yet polled for it.
const WOKEN: u32 = 1;
/// `block_on` returned.
const DONE: u32 = 2;

impl BlockOnWaker {
    /// Marks the future woken.
    fn set(&self) {
        if self.state.fetch_or(WOKEN, Ordering::AcqRel) == 0 {
            self.clock.add_busy();
        }
    }

    /// Consumes a wake: `Some` (ending the wake's busy count when dropped, after the poll) if the
    /// future was woken.
    fn take(&self) -> Option<Busy<'_>> {
        (self.state.fetch_and(!WOKEN, Ordering::AcqRel) & WOKEN != 0)
            .then(|| Busy::adopt(&self.clock))
    }
}

impl Wake for BlockOnWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.set();
        self.thread.unpark();
    }
}

/// Retires a `block_on`'s waker when the call returns or unwinds (see [`BlockOnWaker`]).
struct Retire<'a>(&'a BlockOnWaker);

impl Drop for Retire<'_> {
    fn drop(&mut self) {
        // A pending wake counted one (its `set` saw neither bit), which ends here. The count may
        // briefly read one lower, if that `set` has not added it yet: it only holds advance back.
        if self.0.state.fetch_or(DONE, Ordering::AcqRel) == WOKEN {
            self.0.clock.not_busy();
        }
    }
}

/// Most tasks run inline on top of one another on one thread (each inlined task may block on its
/// own child): the stack stays bounded, and deeper nesting hands the core over instead.
const MAX_INLINED: u32 = 8;

thread_local! {
    /// Inlined tasks currently running on this thread.
    static INLINED: Cell<u32> = const { Cell::new(0) };
}

/// Counts one inlined task for as long as it lives, even if the task's poll unwinds.
struct InlineDepth;

impl InlineDepth {
    fn enter() -> Self {
        let _ = INLINED.try_with(|d| d.set(d.get() + 1));
        InlineDepth
    }
}

impl Drop for InlineDepth {
    fn drop(&mut self) {
        let _ = INLINED.try_with(|d| d.set(d.get() - 1));
    }
}

/// Runs `future` to completion on this thread (see the module docs), with `shared`'s runtime as
/// the current one.
pub(crate) fn block_on<F: Future>(shared: &Shared, future: F) -> F::Output {
    if std::mem::size_of::<F>() > BOX_FUTURES_ABOVE {
        // A worker thread's stack must not hold a large future by value.
        return block_on_pinned(shared, Box::pin(future).as_mut());
    }
    block_on_pinned(shared, pin!(future))
}

fn block_on_pinned<F: Future + ?Sized>(shared: &Shared, mut future: Pin<&mut F>) -> F::Output {
    // Set as already woken, so the future is polled once before anything waits.
    let state = Arc::new(BlockOnWaker {
        state: AtomicU32::new(0),
        thread: std::thread::current(),
        clock: shared.timers().clock().clone(),
    });
    let _retire = Retire(&state);
    state.set();
    let waker = Waker::from(state.clone());
    let mut cx = Context::from_waker(&waker);
    if !lease::lends_core_of(shared) {
        // No core (a plain thread, or a poll whose core was claimed), or a worker of another
        // runtime: that core is held aside while this runtime's future is polled (the future's
        // timers must not arm in that core's shard), and handed over if the future waits. None of
        // this runtime's tasks sits in its queues to run inline.
        let Some(core) = lease::take() else {
            return park_loop(shared, future, &state, &mut cx);
        };
        let held = Held(Some(core));
        if let (Poll::Ready(v), _) = poll_once(future.as_mut(), &state, &mut cx) {
            drop(held);
            return v;
        }
        return hand_off_and_wait(shared, held, future, &state, &mut cx);
    }
    loop {
        // Polled with the core still lent, as in the poll that called `block_on`: if the future
        // blocks, the stall monitor can claim the core, and a `block_in_place` finds it.
        let (out, awaited) = poll_once(future.as_mut(), &state, &mut cx);
        if let Poll::Ready(v) = out {
            return v;
        }
        let Some(core) = lease::take() else {
            // Claimed by a rescue during the poll, or handed away by a nested call: wait
            // without a core.
            return park_loop(shared, future, &state, &mut cx);
        };
        let mut held = Held(Some(core));
        if INLINED.try_with(Cell::get).unwrap_or(MAX_INLINED) >= MAX_INLINED {
            return hand_off_and_wait(shared, held, future, &state, &mut cx);
        }
        let Some(r) = awaited.and_then(|id| held.core().take_unstarted(id)) else {
            return hand_off_and_wait(shared, held, future, &state, &mut cx);
        };
        let _depth = InlineDepth::enter();
        let Some(mut core) = held.take().run_task(r) else {
            // The inlined task handed this core away (a nested `block_on` of its own that has
            // finished): wait without one.
            return park_loop(shared, future, &state, &mut cx);
        };
        // The rest of this poll is the caller's: charged to its group, not the inlined task's.
        with_current(|g| {
            if let Some(g) = g {
                core.serve(g);
            }
        });
        lease::install(core);
        state.set();
    }
}

/// One poll of a nested `block_on`'s future, with a fresh budget, and the task it found itself
/// waiting for (its `JoinHandle` probe), if any.
fn poll_once<F: Future + ?Sized>(
    future: Pin<&mut F>,
    state: &BlockOnWaker,
    cx: &mut Context<'_>,
) -> (Poll<F::Output>, Option<usize>) {
    let _woken = state.take();
    start_probe();
    let out = {
        let _budget = PollBudget::start();
        future.poll(cx)
    };
    (out, end_probe())
}

/// Hands the held core to another thread (step 3) and parks between polls of `future` until it is
/// ready, then takes the core back if no thread took it.
fn hand_off_and_wait<F: Future + ?Sized>(
    shared: &Shared,
    mut held: Held,
    future: Pin<&mut F>,
    state: &BlockOnWaker,
    cx: &mut Context<'_>,
) -> F::Output {
    let handed = match hand_off(held.take()) {
        Ok(h) => h,
        Err(core) => {
            let limit = core.shared.config().max_threads;
            lease::install(core);
            panic!(
                "rondo: a block_on nested in a task cannot hand its worker over: the runtime \
                 already runs {limit} threads, most of them waiting in nested block_on calls. \
                 Await the future instead of blocking on it, or nest fewer block_on calls"
            );
        }
    };
    let v = park_loop(shared, future, state, cx);
    handed.reclaim();
    v
}

/// The core a nested `block_on` holds between a poll of its future and the hand-off or the inline
/// run: installed again if anything unwinds there, so the worker keeps it; the poll that called
/// `block_on` then ends as after any poll, and its worker takes the core back.
struct Held(Option<Box<Core>>);

impl Held {
    fn core(&mut self) -> &mut Core {
        self.0
            .as_mut()
            .expect("the held core is taken only on the way out")
    }

    fn take(&mut self) -> Box<Core> {
        self.0.take().expect("the held core is taken once")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(core) = self.0.take() {
            lease::install(core);
        }
    }
}

/// Polls `future` whenever it is woken, parking the thread in between. Each poll gets a fresh
/// cooperative budget: nested in a task, the task's own budget may be spent, and a future that only
/// sees ready rondo futures must still hand control back between polls.
///
/// A woken future counts the thread busy on the runtime's clock until its poll ends
/// ([`BlockOnWaker`]), and before parking the thread tries auto-advance, as a parking worker does
/// (`park`, `time::clock`): while the clock is paused, the last of the runtime's threads to go
/// idle moves it to the next timer.
fn park_loop<F: Future + ?Sized>(
    shared: &Shared,
    mut future: Pin<&mut F>,
    state: &BlockOnWaker,
    cx: &mut Context<'_>,
) -> F::Output {
    loop {
        if let Some(_woken) = state.take() {
            let _budget = PollBudget::start();
            if let Poll::Ready(v) = future.as_mut().poll(cx) {
                return v;
            }
        } else if !super::park::advance_if_idle(shared) {
            std::thread::park();
        }
    }
}
