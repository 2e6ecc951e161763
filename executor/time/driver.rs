//! The timer driver: a runtime's timers, sharded, and the protocol by which workers fire them.
//!
//! # Shards
//! Timers live in wheels (`wheel`), one per shard, each behind its own mutex. A timer is armed
//! in the shard of the worker whose task arms it (threads that are not workers share a few extra
//! shards), so arming takes a lock no other worker contends for; cancelling locks the timer's
//! own shard, wherever its owner was moved. No operation takes a runtime-wide lock.
//!
//! # Who fires timers, and when
//! `earliest` is a lower bound of the next tick at which some shard has a timer due (`u64::MAX`
//! for none): arming lowers it (`fetch_min`), processing recomputes it. Workers fire due timers
//! ([`Timers::process`]):
//! - a busy worker at the end of each quantum, if `earliest` has passed;
//! - a worker about to park, if it has passed;
//! - one parked worker, the *keeper*, parks with a timeout at `earliest` and processes when it
//!   wakes. Arming a timer earlier than the keeper's wake-up calls [`TimerHost::timer_lowered`],
//!   which wakes the keeper (or, with no keeper, a sleeping worker, which becomes one).
//!
//! The host's half (who keeps time, `timer_lowered`) is in `worker::park` and `worker::publish`.
//! The protocol between an arming thread and a parking keeper is a Dekker pair: the armer lowers
//! `earliest` then reads the keeper's wake-up tick; the keeper publishes its wake-up tick then
//! re-reads `earliest`; all four SeqCst, so one of them sees the other.
//!
//! One processing pass runs at a time (the `processing` mutex). A worker with other things to do
//! skips processing while another pass runs; the keeper, whose deadline has passed, waits for that
//! pass to end ([`IfBusy`]).
//!
//! Wakers are called outside every lock, after processing.
//!
//! # The runtime's clock
//! The driver reads time from its runtime's [`Clock`]. The instants its callers pass
//! ([`Timers::process`], [`Timers::any_due`], [`Timers::now_tick`]) are readings of the real
//! clock; while the runtime's clock was never paused they are used as they are (one load and a
//! branch), otherwise the runtime's clock is read instead. While the clock is paused the keeper
//! parks without a deadline and publishes `NEVER` (so every arm wakes it to look again), and the
//! clock moves only by `advance` or by auto-advance ([`Timers::auto_advance`]): a thread that
//! finds the whole runtime idle moves the clock to the earliest timer's tick and fires it.

use std::sync::{Arc, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::shim::{AtomicBool, AtomicU64, Mutex, Ordering, TryLockError, fence, lock};

use super::clock::Clock;
use super::later;
use super::wheel::{Polled, Wheel};

/// The driver's tick is 2^17 ns (about 131 µs): a timer fires at most one tick after its deadline
/// plus the time a worker takes to notice.
const TICK_SHIFT: u32 = 17;
/// Shards for threads that are not workers of the runtime (a `block_on` caller, a blocking-pool
/// thread).
const FOREIGN_SHARDS: usize = 4;
/// No timer.
pub(crate) const NEVER: u64 = u64::MAX;

/// What the driver needs from the runtime that owns it.
pub(crate) trait TimerHost: Send + Sync {
    /// A timer due at `tick` may be earlier than any worker planned to wake for: make sure one
    /// will process timers at `tick`.
    fn timer_lowered(&self, tick: u64);
}

/// The part of the driver every shard reaches.
struct Common {
    start: Instant,
    clock: Arc<Clock>,
    earliest: AtomicU64,
    closed: AtomicBool,
    host: Weak<dyn TimerHost>,
}

impl Common {
    /// The tick at or after `t`: a timer at this tick never fires before `t`.
    fn tick_ceil(&self, t: Instant) -> u64 {
        let ns = t.saturating_duration_since(self.start).as_nanos();
        ns.div_ceil(1 << TICK_SHIFT).min(u128::from(NEVER - 1)) as u64
    }

    /// After a shard's bound was lowered to `tick` (the caller fenced after that store): lowers
    /// `earliest` if it is later, and tells the host. Both sides of each Dekker pair (with a
    /// processing pass's reset of `earliest`, with the keeper's published tick) fence between
    /// their write and their read.
    fn lowered(&self, tick: u64) {
        if tick < self.earliest.load(Ordering::SeqCst) {
            self.earliest.fetch_min(tick, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if let Some(host) = self.host.upgrade() {
                host.timer_lowered(tick);
            }
        }
    }
}

/// One shard: a wheel and what others may read of it without its lock.
pub(crate) struct Shard {
    wheel: Mutex<Wheel>,
    /// A lower bound of the earliest latest tick in the wheel (`NEVER`: nothing linked). Written
    /// under the lock, read without it.
    next_at: AtomicU64,
    /// The earliest tick of a timer with a slack window (`NEVER`: none).
    slack_at: AtomicU64,
    common: Arc<Common>,
}

/// A runtime's timers; see the module docs.
pub(crate) struct Timers {
    common: Arc<Common>,
    shards: Box<[Arc<Shard>]>,
    workers: usize,
    /// Held by the thread in a processing pass: passes do not overlap.
    processing: Mutex<()>,
    fired: AtomicU64,
    wakeups: AtomicU64,
}

impl Timers {
    /// Timers for a runtime of `workers` workers, which calls `host` when a timer is armed earlier
    /// than planned.
    pub(crate) fn new(workers: usize, host: Weak<dyn TimerHost>) -> Self {
        let clock = Arc::new(Clock::new());
        let common = Arc::new(Common {
            start: clock.now(),
            clock,
            earliest: AtomicU64::new(NEVER),
            closed: AtomicBool::new(false),
            host,
        });
        let shards = (0..workers + FOREIGN_SHARDS)
            .map(|_| {
                Arc::new(Shard {
                    wheel: Mutex::new(Wheel::new()),
                    next_at: AtomicU64::new(NEVER),
                    slack_at: AtomicU64::new(NEVER),
                    common: common.clone(),
                })
            })
            .collect();
        Timers {
            common,
            shards,
            workers,
            processing: Mutex::new(()),
            fired: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
        }
    }

    /// The shard of worker `idx`, or, for `None` (a thread that is not a worker), one of the
    /// foreign shards chosen by `hint`.
    pub(crate) fn shard(&self, worker: Option<usize>, hint: usize) -> &Arc<Shard> {
        match worker {
            Some(i) if i < self.workers => &self.shards[i],
            _ => &self.shards[self.workers + hint % FOREIGN_SHARDS],
        }
    }

    /// The current tick (rounded down: this tick has begun), given a reading `now` of the real
    /// clock (see the module docs).
    #[inline]
    pub(crate) fn now_tick(&self, now: Instant) -> u64 {
        let now = self.common.clock.at(now);
        (now.saturating_duration_since(self.common.start).as_nanos() >> TICK_SHIFT) as u64
    }

    /// The runtime's clock.
    pub(crate) fn clock(&self) -> &Arc<Clock> {
        &self.common.clock
    }

    /// The runtime's clock now.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        self.common.clock.now()
    }

    /// Pauses the clock at the runtime's start (a runtime built paused): ticks fall on whole
    /// multiples of the tick from the clock's time.
    pub(crate) fn start_paused(&self) {
        self.common.clock.pause_at(self.common.start);
    }

    /// The real instant to wake at for timers due at `tick`: `None` while the clock is paused
    /// (only `advance` or auto-advance moves it).
    pub(crate) fn wake_at(&self, tick: u64) -> Option<Instant> {
        let clock = &self.common.clock;
        if !clock.is_virtual() {
            return Some(self.instant_of(tick));
        }
        if clock.is_paused() {
            return None;
        }
        let ahead = self.instant_of(tick).saturating_duration_since(clock.now());
        Some(later(Instant::now(), ahead))
    }

    /// The tick the keeper publishes for timers due at `due`: `NEVER` while the clock is paused,
    /// so that every arm wakes the keeper to check whether the runtime is idle.
    pub(crate) fn keeper_tick(&self, due: u64) -> u64 {
        if self.common.clock.is_paused() {
            NEVER
        } else {
            due
        }
    }

    /// After `resume`: a keeper parked without a deadline must sleep until the earliest timer.
    pub(crate) fn clock_resumed(&self) {
        let earliest = self.earliest();
        if earliest != NEVER {
            if let Some(host) = self.common.host.upgrade() {
                host.timer_lowered(earliest);
            }
        }
    }

    /// `advance`: moves the paused clock forward by `d` and fires what is due, pushing the
    /// wakers to `out` for the caller to wake outside every lock.
    ///
    /// A timer fires when the clock reaches its tick, which may lie up to a tick after its
    /// deadline: the timers of the tick the clock stands in are woken without firing, so that a
    /// sleep whose deadline has passed sees it when polled (an exact comparison with the clock)
    /// and the others give their timers a waker again.
    pub(crate) fn advance(&self, d: Duration, out: &mut Vec<Waker>) -> Result<(), &'static str> {
        self.common.clock.advance(d)?;
        let now = self.now();
        self.process(now, out, IfBusy::Wait);
        let within = self.common.tick_ceil(now);
        for shard in self.shards.iter() {
            lock(&shard.wheel).take_wakers_until(within, out);
        }
        Ok(())
    }

    /// Auto-advance (see the module docs): if the clock is paused, a timer is armed, and `idle()`
    /// holds under the `advancing` lock, calls `claim` (the caller counts itself awake or busy,
    /// so nobody else finds the runtime idle until it has run what fired), moves the clock to the
    /// earliest timer's tick and fires what is due there into `out`. True if it advanced.
    pub(crate) fn auto_advance(
        &self,
        idle: impl FnOnce() -> bool,
        claim: impl FnOnce(),
        out: &mut Vec<Waker>,
    ) -> bool {
        let clock = &self.common.clock;
        if !clock.is_paused() {
            return false;
        }
        let _advancing = lock(&clock.advancing);
        // The exact earliest tick (`earliest` is only a bound: a cancelled timer leaves it low).
        let next = self
            .shards
            .iter()
            .filter_map(|s| lock(&s.wheel).next_deadline())
            .min();
        let Some(next) = next else {
            return false;
        };
        if !clock.none_busy() || !idle() {
            return false;
        }
        claim();
        if !clock.advance_to(self.instant_of(next)) {
            return true;
        }
        self.process(self.now(), out, IfBusy::Wait);
        true
    }

    /// The instant tick `tick` begins; for a tick too far off for an `Instant` (or a `u64` of
    /// nanoseconds), about 30 years from the start, which no wait reaches.
    pub(crate) fn instant_of(&self, tick: u64) -> Instant {
        let ns = tick.saturating_mul(1 << TICK_SHIFT);
        later(self.common.start, Duration::from_nanos(ns))
    }

    /// A lower bound of the next tick at which a timer is due (`NEVER`: none).
    pub(crate) fn earliest(&self) -> u64 {
        self.common.earliest.load(Ordering::SeqCst)
    }

    /// True if a timer may be due at `now` (by the lower bound of [`earliest`](Self::earliest)).
    #[inline]
    pub(crate) fn any_due(&self, now: Instant) -> bool {
        let earliest = self.earliest();
        // `now_tick` reads the runtime's clock if it was ever paused.
        earliest != NEVER && earliest <= self.now_tick(now)
    }

    /// Fires the timers due at `now` and pushes their wakers to `out`, for the caller to wake
    /// outside every lock. Returns how many fired. If another thread is processing, `busy` says
    /// what to do: [`IfBusy::Skip`] returns 0 at once (that thread fires what is due);
    /// [`IfBusy::Wait`] blocks until its pass ends, then fires what is due by then.
    pub(crate) fn process(&self, now: Instant, out: &mut Vec<Waker>, busy: IfBusy) -> usize {
        // A reading of the real clock; under a clock that was ever paused, the runtime's clock.
        let now = self.common.clock.at(now);
        let (_pass, now) = match self.processing.try_lock() {
            Ok(pass) => (pass, now),
            Err(TryLockError::Poisoned(p)) => (p.into_inner(), now),
            Err(TryLockError::WouldBlock) => match busy {
                IfBusy::Skip => return 0,
                // The caller's `now` went stale while it waited.
                IfBusy::Wait => (lock(&self.processing), now.max(self.now())),
            },
        };
        let now_t =
            (now.saturating_duration_since(self.common.start).as_nanos() >> TICK_SHIFT) as u64;
        let mut fired = 0;
        for shard in self.shards.iter() {
            if shard.next_at.load(Ordering::SeqCst) > now_t
                && shard.slack_at.load(Ordering::SeqCst) > now_t
            {
                continue;
            }
            let mut w = lock(&shard.wheel);
            fired += w.process(now_t, out);
            shard.refresh(&w);
        }
        // Recompute the bound. An armer that lowered it meanwhile wrote its shard's `next_at`
        // first (SeqCst), so either its `fetch_min` lands after the reset, or the scan sees it.
        self.common.earliest.store(NEVER, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        for shard in self.shards.iter() {
            let next = shard.next_at.load(Ordering::SeqCst);
            if next != NEVER {
                self.common.earliest.fetch_min(next, Ordering::SeqCst);
            }
        }
        drop(_pass);
        if fired > 0 {
            self.fired.fetch_add(fired as u64, Ordering::Relaxed);
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        // A keeper that read the bound while it was reset parked without a deadline: hand the
        // recomputed bound to the host as if it had just been armed.
        let earliest = self.earliest();
        if earliest != NEVER {
            if let Some(host) = self.common.host.upgrade() {
                host.timer_lowered(earliest);
            }
        }
        fired
    }

    /// Shutdown: refuses every later arm and takes every waker out (they hold tasks, which hold
    /// this runtime). Returns the wakers, for the caller to drop outside every lock.
    pub(crate) fn close(&self) -> Vec<Waker> {
        self.common.closed.store(true, Ordering::SeqCst);
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            lock(&shard.wheel).take_wakers(&mut out);
        }
        out
    }

    /// Timers armed and not yet dropped, fired or not.
    pub(crate) fn live(&self) -> usize {
        self.shards.iter().map(|s| lock(&s.wheel).len()).sum()
    }

    /// Timers fired since the runtime started.
    pub(crate) fn fired(&self) -> u64 {
        self.fired.load(Ordering::Relaxed)
    }

    /// Processing passes that fired at least one timer.
    pub(crate) fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }
}

impl Shard {
    /// Publishes the wheel's bounds after a change that may have raised them.
    fn refresh(&self, w: &Wheel) {
        self.next_at
            .store(w.next_deadline().unwrap_or(NEVER), Ordering::SeqCst);
        self.slack_at
            .store(w.first_slack().unwrap_or(NEVER), Ordering::SeqCst);
    }

    /// Lowers the published bounds for a timer in `at..=latest`, under the wheel's lock. Returns
    /// true if `next_at` was lowered: then the caller must fence and call `Common::lowered` (if
    /// not, an earlier timer of this shard holds `earliest` at or below `latest` already).
    fn lower(&self, at: u64, latest: u64) -> bool {
        if latest > at && at < self.slack_at.load(Ordering::Relaxed) {
            self.slack_at.store(at, Ordering::SeqCst);
        }
        if latest < self.next_at.load(Ordering::Relaxed) {
            self.next_at.store(latest, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// After `lower` returned true and the wheel's lock was released.
    fn announce(&self, latest: u64) {
        fence(Ordering::SeqCst);
        self.common.lowered(latest);
    }
}

/// What [`Timers::process`] does when another thread is in a processing pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfBusy {
    /// Return at once: that pass fires what is due. For a thread with other work (a busy worker
    /// at a quantum end, a worker about to park that re-checks its queues next).
    Skip,
    /// Block until that pass ends. For the keeper, whose deadline has passed and which has
    /// nothing else to do: returning would send it round its parking loop, finding the same
    /// deadline passed each time, spinning on a CPU the processing thread may need.
    Wait,
}

/// What [`Registration::arm`] did.
pub(crate) enum Armed {
    /// The timer waits in a shard.
    Waiting(Registration),
    /// Its deadline has already been processed: it is due.
    Due,
    /// The runtime has shut down.
    Closed,
}

/// A timer armed in a shard; removed from it on drop.
pub(crate) struct Registration {
    shard: Arc<Shard>,
    key: usize,
}

/// The earliest and latest tick of a timer at `deadline` with a window of `slack`.
fn ticks(common: &Common, deadline: Instant, slack: Duration) -> (u64, u64) {
    let at = common.tick_ceil(deadline);
    let window = (slack.as_nanos() >> TICK_SHIFT).min(u128::from(NEVER)) as u64;
    (at, at.saturating_add(window).min(NEVER - 1))
}

impl Registration {
    /// Arms a timer in `shard` that wakes `waker` between `deadline` and `deadline + slack`.
    pub(crate) fn arm(
        shard: &Arc<Shard>,
        deadline: Instant,
        slack: Duration,
        waker: &Waker,
    ) -> Armed {
        let common = &shard.common;
        let (at, latest) = ticks(common, deadline, slack);
        // Cloned before the lock: a waker's clone is its owner's code, which may arm or cancel a
        // timer of this shard. Declared first, so an unused clone is dropped after the unlock.
        let waker = waker.clone();
        // Under a clock that was ever paused, the clock may have passed a deadline whose tick
        // no pass has reached yet (`advance` moves it by any amount).
        let passed = common.clock.is_virtual() && common.clock.now() >= deadline;
        let mut w = lock(&shard.wheel);
        if common.closed.load(Ordering::SeqCst) {
            return Armed::Closed;
        }
        if at <= w.elapsed() || passed {
            return Armed::Due;
        }
        let key = w.insert(at, latest, waker);
        let lowered = shard.lower(at, latest);
        drop(w);
        if lowered {
            shard.announce(latest);
        }
        Armed::Waiting(Registration {
            shard: shard.clone(),
            key,
        })
    }

    /// `Some(true)` if the timer fired; `Some(false)` if not, and `waker` is the one it will wake;
    /// `None` if the runtime has shut down (it will never fire).
    pub(crate) fn poll(&self, waker: &Waker) -> Option<bool> {
        let closed = || self.shard.common.closed.load(Ordering::SeqCst);
        let w = lock(&self.shard.wheel);
        if closed() {
            return w.is_fired(self.key).then_some(true);
        }
        match w.poll(self.key, waker) {
            Polled::Fired => return Some(true),
            Polled::Waiting => return Some(false),
            Polled::Stale => {}
        }
        drop(w);
        // A new waker: cloned outside the lock, as in `arm`, and dropped (with the one it
        // replaces) after the unlock.
        let new = waker.clone();
        let mut w = lock(&self.shard.wheel);
        if closed() {
            return w.is_fired(self.key).then_some(true);
        }
        let set = w.set_waker(self.key, new);
        drop(w);
        match set {
            Ok(old) => {
                drop(old);
                Some(false)
            }
            Err(unused) => {
                drop(unused);
                Some(true)
            }
        }
    }

    /// The clock of the timer's runtime now.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        self.shard.common.clock.now()
    }

    /// Whether the timer fired.
    pub(crate) fn is_fired(&self) -> bool {
        lock(&self.shard.wheel).is_fired(self.key)
    }

    /// Moves the timer to `deadline` with a window of `slack`, fired or not.
    pub(crate) fn reset(&self, deadline: Instant, slack: Duration) {
        let common = &self.shard.common;
        let (at, latest) = ticks(common, deadline, slack);
        let mut w = lock(&self.shard.wheel);
        w.reset(self.key, at, latest);
        let lowered = self.shard.lower(at, latest);
        drop(w);
        if lowered {
            self.shard.announce(latest);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let waker = lock(&self.shard.wheel).remove(self.key);
        drop(waker);
    }
}
