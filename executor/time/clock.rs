//! A runtime's clock: the real clock until [`pause`](super::pause), then a clock that moves only
//! when told to ([`advance`](super::advance), or auto-advance when the runtime is idle).
//!
//! # States
//! The clock reads `base + (real now - unfrozen)` while it runs and `base` while it is paused, as
//! tokio's test clock does. `mode` mirrors the state for readers that take no lock:
//! - `REAL`: never paused; `now()` is the real clock and costs one relaxed load and a branch on
//!   top of it (the path every runtime that never pauses takes);
//! - `PAUSED`: `now()` is `base`, read under the lock;
//! - `SHIFTED`: paused once and resumed; `now()` is the real clock plus what `advance` added.
//!
//! `mode` is written under the lock only. A thread that reads a stale `REAL` while another pauses
//! reads the real clock, which is the clock's value at the moment of the pause.
//!
//! # Busy threads
//! Auto-advance (see `driver`, [`Timers::auto_advance`](super::Timers::auto_advance)) happens
//! only when nothing can run: every worker parked, nothing queued, and no thread in a `block_on`
//! poll of this runtime or woken into one. `busy` counts the last: a `block_on` future's wake
//! counts its thread busy (SeqCst) until the poll it causes ends; then the thread fences and
//! checks whether the runtime is idle before it parks. A parking worker registers as a sleeper,
//! fences and reads `busy`. Of the last two threads going idle, at least one sees the other idle
//! (a Dekker pair), so an idle runtime always advances; the checks and the advance run under
//! `advancing`, and the thread that advances counts itself awake (or busy) before it lets go, so
//! two threads never advance for the same idle moment (loom model: `loom_models/clock.rs`).

use std::sync::atomic::AtomicBool as StdAtomicBool;
use std::time::{Duration, Instant};

use crate::shim::{AtomicU32, AtomicUsize, Mutex, Ordering, fence, lock};

use super::later;

/// Never paused: the real clock.
const REAL: u32 = 0;
/// Paused: the clock stands still.
const PAUSED: u32 = 1;
/// Paused once, running again with what `advance` added.
const SHIFTED: u32 = 2;

/// Set once any runtime's clock was paused: until then, `Instant::now()` reads the real clock
/// without looking for the current runtime. A `std` atomic: loom has no static atomics, and the
/// flag only chooses a path (both give the same value while no clock is paused).
static ANY_PAUSED: StdAtomicBool = StdAtomicBool::new(false);

/// The runtime's clock; see the module docs.
pub(crate) struct Clock {
    mode: AtomicU32,
    inner: Mutex<Inner>,
    /// Threads in a `block_on` poll of this runtime (see the module docs).
    busy: AtomicUsize,
    /// Held while a thread checks for idleness and auto-advances.
    pub(super) advancing: Mutex<()>,
}

struct Inner {
    base: Instant,
    /// When the clock last started running; `None` while paused.
    unfrozen: Option<Instant>,
}

impl Clock {
    /// A running clock that reads the real clock.
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        Clock {
            mode: AtomicU32::new(REAL),
            inner: Mutex::new(Inner {
                base: now,
                unfrozen: Some(now),
            }),
            busy: AtomicUsize::new(0),
            advancing: Mutex::new(()),
        }
    }

    /// The clock's time.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        if self.mode.load(Ordering::Acquire) == REAL {
            return Instant::now();
        }
        self.now_slow()
    }

    #[cold]
    fn now_slow(&self) -> Instant {
        let inner = lock(&self.inner);
        match inner.unfrozen {
            Some(since) => later(inner.base, since.elapsed()),
            None => inner.base,
        }
    }

    /// The clock's time, given a reading `real` of the real clock: `real` itself unless the clock
    /// was ever paused.
    #[inline]
    pub(crate) fn at(&self, real: Instant) -> Instant {
        if self.mode.load(Ordering::Acquire) == REAL {
            return real;
        }
        self.now_slow()
    }

    /// True while the clock is paused.
    #[inline]
    pub(crate) fn is_paused(&self) -> bool {
        self.mode.load(Ordering::Acquire) == PAUSED
    }

    /// True unless the clock was never paused.
    #[inline]
    pub(crate) fn is_virtual(&self) -> bool {
        self.mode.load(Ordering::Acquire) != REAL
    }

    /// Stops the clock. Errs if it is paused already.
    pub(crate) fn pause(&self) -> Result<(), &'static str> {
        let mut inner = lock(&self.inner);
        let Some(since) = inner.unfrozen else {
            return Err("rondo::time::pause: the clock is paused already (call `resume` first)");
        };
        inner.base = later(inner.base, since.elapsed());
        inner.unfrozen = None;
        ANY_PAUSED.store(true, std::sync::atomic::Ordering::SeqCst);
        self.mode.store(PAUSED, Ordering::Release);
        Ok(())
    }

    /// Stops the clock at `at`, which becomes its time (the runtime's start, for a runtime built
    /// paused: timer ticks then fall on whole durations from the start).
    pub(crate) fn pause_at(&self, at: Instant) {
        let mut inner = lock(&self.inner);
        inner.base = at;
        inner.unfrozen = None;
        ANY_PAUSED.store(true, std::sync::atomic::Ordering::SeqCst);
        self.mode.store(PAUSED, Ordering::Release);
    }

    /// Starts the clock again from where it stands. Errs if it is not paused.
    pub(crate) fn resume(&self) -> Result<(), &'static str> {
        let mut inner = lock(&self.inner);
        if inner.unfrozen.is_some() {
            return Err("rondo::time::resume: the clock is not paused (call `pause` first)");
        }
        inner.unfrozen = Some(Instant::now());
        self.mode.store(SHIFTED, Ordering::Release);
        Ok(())
    }

    /// Moves a paused clock forward by `d`. Errs if it is not paused.
    pub(crate) fn advance(&self, d: Duration) -> Result<(), &'static str> {
        let mut inner = lock(&self.inner);
        if inner.unfrozen.is_some() {
            return Err("rondo::time::advance: the clock is not paused (call `pause` first)");
        }
        inner.base = later(inner.base, d);
        Ok(())
    }

    /// Moves a paused clock forward to `t`, if it is earlier. False if the clock is not paused.
    pub(crate) fn advance_to(&self, t: Instant) -> bool {
        let mut inner = lock(&self.inner);
        if inner.unfrozen.is_some() {
            return false;
        }
        inner.base = inner.base.max(t);
        true
    }

    /// Counts one more busy thread (a `block_on` future woken, or a thread that advanced and has
    /// wakers to call); it ends with [`Clock::not_busy`].
    pub(crate) fn add_busy(&self) {
        self.busy.fetch_add(1, Ordering::SeqCst);
    }

    /// Ends a count of [`Clock::add_busy`] or of a [`Busy`]; the caller checks for idleness next.
    pub(crate) fn not_busy(&self) {
        self.busy.fetch_sub(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// True if no `block_on` thread of this runtime is in a poll.
    pub(super) fn none_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
    }
}

/// A count of [`Clock::add_busy`] that ends when dropped (even if a poll unwinds).
pub(crate) struct Busy<'a>(&'a Clock);

impl<'a> Busy<'a> {
    /// Takes over a count made by [`Clock::add_busy`].
    pub(crate) fn adopt(clock: &'a Clock) -> Self {
        Busy(clock)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.not_busy();
    }
}

/// True once any runtime's clock was paused in this process.
#[inline]
pub(super) fn any_paused() -> bool {
    ANY_PAUSED.load(std::sync::atomic::Ordering::Relaxed)
}
