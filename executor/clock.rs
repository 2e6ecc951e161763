//! A cheaper reading of the monotonic clock, for the service segments' boundaries (and the other
//! places that read the time often and need it only to about a microsecond: the scheduler's
//! times, and how long a barging sync primitive's waiters have waited).
//!
//! A worker reads the clock at every switch between groups (to end one segment and begin the
//! next), so a message between two groups costs a clock read on each side, and `Instant::now()`
//! (a system call's fast path, with its own ordering and conversion) costs several times a read
//! of the counter behind it (BENCHMARKS.md has the figures).
//!
//! Where the kernel itself keeps time with the processor's time-stamp counter (x86-64 Linux with
//! the `tsc` clocksource, which the kernel selects only when the counter is invariant and
//! synchronized across CPUs), [`stamp`] reads the counter and adds the ticks
//! since the thread's last real reading, converted with a rate measured once per process. The
//! thread takes a real reading again once about a millisecond's worth of ticks have passed, or
//! when the counter reads lower than at its last real reading (another CPU's counter), so a value
//! is never further from `Instant::now()` than the rate's error over a millisecond (well under a
//! microsecond). Everywhere else, and under Miri and loom, [`stamp`] reads `Instant::now()`.
//!
//! [`stamp`] is the same reading as nanoseconds since the clock's epoch (its first use in the
//! process), a `u64`: the segments keep stamps, so that a segment's length is one subtraction
//! rather than `Instant` arithmetic (a normalised seconds-and-nanoseconds pair).
//!
//! The service segments (charged service, busy time, the quantum) and the scheduler's own times
//! (how long a listed group waited, how old a worker's served entry is) use it, so each of those
//! differences is taken between two readings of the same clock; deadlines and timers read the
//! real clock.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The clock as nanoseconds since its epoch (its first use in the process): what the segments
/// keep, so that a segment's length is one subtraction, not `Instant` arithmetic.
#[inline]
pub(crate) fn stamp() -> u64 {
    imp::stamp()
}

/// The instant of a [`stamp`].
pub(crate) fn instant_of(stamp: u64) -> Instant {
    epoch() + Duration::from_nanos(stamp)
}

/// The [`stamp`] of an instant (0 for one before the epoch).
pub(crate) fn stamp_of(t: Instant) -> u64 {
    nanos(t.saturating_duration_since(epoch()))
}

/// A duration in nanoseconds as a `u64`, saturating (585 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
mod imp {
    use std::cell::Cell;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// How long the rate is measured for, once per process.
    const CALIBRATION: Duration = Duration::from_micros(200);
    /// About how long a thread extrapolates from one real reading.
    const REBASE_AFTER: Duration = Duration::from_millis(1);

    struct Rate {
        /// Nanoseconds per tick, in 32.32 fixed point.
        ns_per_tick: u64,
        /// Ticks after which a thread takes a real reading again (about `REBASE_AFTER`; small
        /// enough that `ticks * ns_per_tick` fits in 64 bits).
        rebase_ticks: u64,
    }

    static RATE: OnceLock<Option<Rate>> = OnceLock::new();

    thread_local! {
        /// This thread's last real reading (as a stamp) and the counter beside it.
        static BASE: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
    }

    #[inline]
    fn ticks() -> u64 {
        // SAFETY: `rdtsc` has no preconditions, and every x86-64 processor has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// A real reading and the counter at the same moment: the counter's reading is the midpoint
    /// of two taken around the real one, from the tightest of up to `tries` tries (stopping at
    /// one whose two counter readings are at most `good_gap` apart). A thread preempted between
    /// the real reading and a single counter reading (a busy virtual machine) would otherwise pair
    /// them wrongly by the preemption's length: a calibration skewed by it, or a base that keeps
    /// this thread's clock that far behind until its next real reading.
    fn paired(tries: usize, good_gap: u64) -> (Instant, u64) {
        let mut best: Option<(u64, Instant, u64)> = None;
        for _ in 0..tries.max(1) {
            let before = ticks();
            let t = Instant::now();
            let after = ticks();
            let gap = after.wrapping_sub(before);
            if best.is_none_or(|(g, _, _)| gap < g) {
                best = Some((gap, t, before.wrapping_add(gap / 2)));
            }
            if gap <= good_gap {
                break;
            }
        }
        let (_, t, c) = best.expect("at least one try");
        (t, c)
    }

    /// The counter's rate, if the kernel keeps time with it.
    fn calibrate() -> Option<Rate> {
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .ok()?;
        if source.trim() != "tsc" {
            return None;
        }
        let (t0, c0) = paired(8, 0);
        let (elapsed, spent) = loop {
            let (t1, c1) = paired(8, 0);
            let elapsed = t1.saturating_duration_since(t0);
            if elapsed >= CALIBRATION {
                break (elapsed, c1.checked_sub(c0)?);
            }
        };
        if spent == 0 {
            return None;
        }
        let ns_per_tick = u64::try_from((elapsed.as_nanos() << 32) / u128::from(spent)).ok()?;
        if ns_per_tick == 0 {
            return None;
        }
        let per_ms = u128::from(spent) * REBASE_AFTER.as_nanos() / elapsed.as_nanos().max(1);
        let fits = u64::MAX / ns_per_tick;
        Some(Rate {
            ns_per_tick,
            rebase_ticks: u64::try_from(per_ms).unwrap_or(u64::MAX).min(fits).max(1),
        })
    }

    #[inline]
    pub(super) fn stamp() -> u64 {
        let Some(rate) = RATE.get_or_init(calibrate) else {
            return super::stamp_of(Instant::now());
        };
        let c = ticks();
        BASE.try_with(|base| match base.get() {
            Some((at, c0)) if c.wrapping_sub(c0) < rate.rebase_ticks => {
                at + ((c.wrapping_sub(c0) * rate.ns_per_tick) >> 32)
            }
            _ => {
                // About 2 µs of ticks: a pair further apart was split by a preemption.
                let (t, c0) = paired(4, rate.rebase_ticks >> 9);
                let at = super::stamp_of(t);
                base.set(Some((at, c0)));
                at
            }
        })
        .unwrap_or_else(|_| super::stamp_of(Instant::now()))
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
mod imp {
    use std::time::Instant;

    #[inline]
    pub(super) fn stamp() -> u64 {
        super::stamp_of(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    /// Over many readings, interleaved with real ones, the cheap clock never runs ahead of the
    /// real one by more than a few microseconds nor falls behind it by more, and a thread's
    /// readings measure a sleep as the real clock does.
    #[test]
    fn stays_within_microseconds_of_the_real_clock() {
        let slack = Duration::from_micros(20);
        for _ in 0..10_000 {
            let before = Instant::now();
            let cheap = super::instant_of(super::stamp());
            let after = Instant::now();
            assert!(cheap + slack >= before, "{cheap:?} behind {before:?}");
            assert!(cheap <= after + slack, "{cheap:?} ahead of {after:?}");
        }
        let start = super::instant_of(super::stamp());
        let start_stamp = super::stamp();
        std::thread::sleep(Duration::from_millis(3));
        let slept = super::instant_of(super::stamp()).saturating_duration_since(start);
        let stamped = Duration::from_nanos(super::stamp().saturating_sub(start_stamp));
        for d in [slept, stamped] {
            assert!(
                d >= Duration::from_millis(3) - slack && d < Duration::from_secs(1),
                "{d:?}"
            );
        }
    }
}
