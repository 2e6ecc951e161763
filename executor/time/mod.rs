//! Timers: [`sleep`], [`timeout`] and [`interval`], with the names a tokio user expects.
//!
//! Timers belong to a runtime: inside a task, `block_on` or `enter` they use that runtime's
//! timers; anywhere else they use the global runtime's (started on first use, as
//! [`spawn`](crate::spawn) does), so `rondo::block_on(rondo::time::sleep(d))` works from `main`.
//!
//! - Resolution: a timer fires between its deadline and about 131 µs (one tick) after it, plus
//!   the time a worker takes to notice: a parked worker sleeps until the next deadline, a busy
//!   one checks at the end of each quantum. Never before its deadline.
//! - Cost: arming (the first poll) and cancelling (the drop) lock only the shard of the worker
//!   that armed the timer, and cost the same with a thousand or a million live timers. A dropped
//!   sleep leaves nothing behind.
//! - Idle: a runtime whose tasks all sleep has one worker parked until the earliest deadline and
//!   the others parked without one; it uses no CPU between deadlines.
//! - Coalescing: [`Sleep::with_slack`] lets a timer fire up to a window late, so timers whose
//!   windows overlap fire in one wakeup.
//!
//! # The runtime's clock, and pausing it for tests
//! Every runtime has a clock, which every timer of the runtime and [`Instant::now`] read: the
//! real clock until [`pause`] (or [`Builder::start_paused`](crate::Builder::start_paused), or
//! `#[rondo::test(start_paused = true)]`), with tokio's names and rules:
//! - while paused, the clock stands still; [`advance`] moves it and fires what is due;
//!   [`resume`] lets it run again from where it stands;
//! - auto-advance: while paused, when nothing of the runtime can run (every worker parked,
//!   nothing queued, no thread in a `block_on` poll of the runtime or about to be woken into
//!   one), the clock jumps to the earliest timer's tick and fires it. A sleep of an hour in a
//!   paused test completes at once, the clock an hour (and less than a tick) later;
//! - [`pause`] panics outside a runtime or if the clock is paused; [`resume`] and [`advance`]
//!   panic outside a runtime or if it is not.
//!
//! With several workers: the clock belongs to the runtime, so every worker, task and `block_on`
//! of it sees the same time. tokio allows pausing only its one-thread runtime; rondo allows it
//! at any number of workers, and auto-advance waits until every worker is idle, so the timers of
//! one tick still fire before the clock moves on (the tasks they wake may then run in parallel,
//! in any order). What the runtime cannot see does not hold auto-advance back: a
//! `spawn_blocking` closure or a `block_in_place` still running, or another thread about to send
//! to a task, may find the clock moved on meanwhile. A runtime that never pauses reads the real
//! clock as before, behind one load and a branch.
//!
//! Resolution under a paused clock: [`advance`] moves the clock exactly, and a sleep whose
//! deadline it reaches completes when next polled; auto-advance moves to the timer's tick, up to
//! one tick (about 131 µs) past its deadline.
//!
//! ```
//! use std::time::Duration;
//! use rondo::time::{interval, sleep, timeout};
//!
//! rondo::block_on(async {
//!     sleep(Duration::from_millis(1)).await;
//!     let r = timeout(Duration::from_millis(1), std::future::pending::<()>()).await;
//!     assert!(r.is_err());
//!     let mut iv = interval(Duration::from_millis(1));
//!     iv.tick().await;
//!     iv.tick().await;
//! });
//! ```

pub(crate) mod clock;
pub(crate) mod driver;
mod instant;
mod interval;
pub(crate) mod keeper;
mod sleep;
mod timeout;
mod wheel;

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

pub use instant::Instant;
pub use interval::{Interval, MissedTickBehavior, interval, interval_at};
pub use sleep::{Sleep, sleep, sleep_until};
pub use timeout::{Elapsed, Timeout, timeout, timeout_at};

pub(crate) use driver::{IfBusy, NEVER, Shard, TimerHost, Timers};
pub(crate) use keeper::{Keeper, Lowered};

/// `t + d`, or, where an `Instant` cannot hold that, about 30 years from `t`: a deadline no
/// wait reaches. Every deadline the timers compute goes through it, so no length of sleep,
/// timeout or period overflows.
pub(crate) fn later(t: StdInstant, d: Duration) -> StdInstant {
    t.checked_add(d).unwrap_or_else(|| {
        let far = Duration::from_secs(86_400 * 365 * 30);
        t.checked_add(far).unwrap_or(t)
    })
}

/// How a timer finds the shard to arm in: the runtime layer implements it for [`Current`] (it
/// knows which runtime and worker are current), so this layer needs nothing above it.
pub(crate) trait Source {
    /// Runs `f` with the shard a timer armed on this thread belongs in.
    fn with_shard<R>(f: impl FnOnce(&Arc<Shard>) -> R) -> R;

    /// Runs `f` with the current runtime's timers, or `None` outside every runtime (the global
    /// runtime is not started for it).
    fn with_timers<R>(f: impl FnOnce(Option<&Timers>) -> R) -> R;
}

/// The carrier of [`Source`].
pub(crate) struct Current;

/// Pauses the current runtime's clock, as tokio's `time::pause`: [`Instant::now`] stands still
/// and every timer of the runtime waits for the clock to be moved, by [`advance`] or by
/// auto-advance: whenever nothing of the runtime can run (every worker parked, nothing queued, no
/// thread in a `block_on` poll of it), the clock jumps to the earliest timer's tick and fires it.
/// For tests: a test of timeouts and retries runs in no real time, and in the same order every
/// time.
///
/// The clock belongs to the runtime, not to the thread: every worker, task and `block_on` of the
/// runtime sees the same paused clock. Unlike tokio, which allows pausing only its current-thread
/// runtime, rondo allows it at any number of workers; auto-advance waits until all of them are
/// idle, so timers still fire in deadline order (several due at one tick fire together, and their
/// tasks then run in parallel). Time the clock does not see does not hold auto-advance back: a
/// `spawn_blocking` closure or a `block_in_place` still running, or a thread outside the runtime
/// about to send to a task.
///
/// # Panics
/// Outside a runtime (a task, `block_on` or `enter`), or if the clock is paused already, with a
/// message saying so (as tokio's).
///
/// ```
/// use std::time::Duration;
/// use rondo::time::{Instant, pause, sleep};
///
/// rondo::Runtime::new().unwrap().block_on(async {
///     pause();
///     let start = Instant::now();
///     sleep(Duration::from_secs(3600)).await; // auto-advance: no real hour passes
///     assert!(start.elapsed() >= Duration::from_secs(3600));
/// });
/// ```
#[track_caller]
pub fn pause() {
    with_clock(|t| t.clock().pause());
}

/// Resumes the current runtime's paused clock, as tokio's `time::resume`: it runs again from the
/// time it was paused at (plus what [`advance`] added), at the real clock's pace.
///
/// # Panics
/// Outside a runtime, or if the clock is not paused, with a message saying so.
///
/// ```
/// use std::time::Duration;
/// use rondo::time::{Instant, advance, pause, resume};
///
/// rondo::Runtime::new().unwrap().block_on(async {
///     pause();
///     let start = Instant::now();
///     advance(Duration::from_secs(60)).await;
///     resume();
///     assert!(start.elapsed() >= Duration::from_secs(60));
/// });
/// ```
#[track_caller]
pub fn resume() {
    with_clock(|t| {
        t.clock().resume()?;
        // A keeper parked without a deadline while the clock stood still sleeps until it again.
        t.clock_resumed();
        Ok(())
    });
}

/// Moves the current runtime's paused clock forward by `duration`, fires every timer due by then
/// (their tasks are woken) and yields once, as tokio's `time::advance`.
///
/// A timer fires when the clock reaches its tick (about 131 µs): a sleep whose deadline falls
/// short of the next tick boundary completes when polled after its deadline, and otherwise when
/// auto-advance reaches its tick.
///
/// # Panics
/// Outside a runtime, or if the clock is not paused, with a message saying so.
///
/// ```
/// use std::time::Duration;
/// use rondo::time::{Instant, advance};
///
/// rondo::Builder::new().start_paused(true).build().unwrap().block_on(async {
///     let start = Instant::now();
///     advance(Duration::from_millis(250)).await;
///     assert_eq!(start.elapsed(), Duration::from_millis(250));
/// });
/// ```
pub async fn advance(duration: Duration) {
    let mut wakers = Vec::new();
    with_clock(|t| t.advance(duration, &mut wakers));
    for w in wakers {
        w.wake();
    }
    crate::task::yield_now().await;
}

/// Runs `f` on the current runtime's timers and panics with its error, or if there is no runtime.
#[track_caller]
fn with_clock(f: impl FnOnce(&Timers) -> Result<(), &'static str>) {
    let r = Current::with_timers(|t| match t {
        Some(t) => f(t),
        None => Err(
            "rondo::time: the clock can be paused, resumed or advanced only inside a \
                     rondo runtime (a task, `block_on` or `Runtime::enter`)",
        ),
    });
    if let Err(msg) = r {
        panic!("{msg}");
    }
}
