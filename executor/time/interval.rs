//! `Interval`: a stream of ticks at a fixed period.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant as StdInstant};

use super::instant::now_std;
use super::sleep::{Sleep, sleep_until};
use super::{Instant, later};

/// Ticks every `period`, the first tick at once; see [`Interval`].
///
/// # Panics
/// If `period` is zero, with a message saying so.
///
/// ```
/// use std::time::{Duration, Instant};
/// rondo::block_on(async {
///     let start = Instant::now();
///     let mut iv = rondo::time::interval(Duration::from_millis(2));
///     for _ in 0..3 {
///         iv.tick().await;
///     }
///     // Ticks at 0, 2 and 4 ms.
///     assert!(start.elapsed() >= Duration::from_millis(4));
/// });
/// ```
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    interval_at(now_std(), period)
}

/// Ticks every `period`, the first tick at `start` (a [`rondo::time::Instant`](Instant) or a
/// [`std::time::Instant`]); see [`Interval`].
///
/// # Panics
/// If `period` is zero, with a message saying so.
///
/// ```
/// use std::time::{Duration, Instant};
/// rondo::block_on(async {
///     let start = Instant::now() + Duration::from_millis(3);
///     let mut iv = rondo::time::interval_at(start, Duration::from_millis(2));
///     assert_eq!(iv.tick().await, start);
///     assert_eq!(iv.tick().await, start + Duration::from_millis(2));
/// });
/// ```
#[track_caller]
pub fn interval_at(start: impl Into<Instant>, period: Duration) -> Interval {
    let start = start.into().into_std();
    assert!(
        !period.is_zero(),
        "rondo::time::interval: the period must be greater than zero"
    );
    Interval {
        next: start,
        period,
        behavior: MissedTickBehavior::Burst,
        sleep: sleep_until(start),
    }
}

/// What an [`Interval`] does after ticks were missed (the task was late to call `tick`, or the
/// runtime was busy): with ticks scheduled every 10 ms from 0 and a tick observed at 35 ms,
/// - `Burst` (the default) keeps the schedule: ticks for 10, 20 and 30 complete at once, then 40;
/// - `Delay` restarts the schedule from the late tick: the next is at 45;
/// - `Skip` drops the missed ticks and keeps the phase: the next is at 40.
///
/// `Burst` and `Skip` only differ from the schedule once a whole period was missed. `Delay` also
/// applies to a tick observed late by less than a period, so that the next tick never comes
/// sooner than a period after it: a tick counts as late when it is observed more than 5 ms after
/// its scheduled instant, or a whole period after it for periods shorter than that (as with
/// tokio's `Delay`, the 5 ms keep a timer's own lateness from shifting the schedule at every
/// tick). With ticks every 100 ms and the tick of 0 observed at 60 ms, `Delay` schedules the next
/// at 160, the others at 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedTickBehavior {
    /// Catch up with every missed tick, as fast as they are asked for.
    #[default]
    Burst,
    /// Schedule the next tick a full period after the late one: ticks are never closer than a
    /// period, less 5 ms.
    Delay,
    /// Skip the missed ticks: the next tick is the next one of the original schedule.
    Skip,
}

/// How late a tick may be observed and still count as on time for [`MissedTickBehavior::Delay`]
/// (a whole period, for periods shorter than this): tokio's threshold, well above a timer's own
/// lateness, so that `Delay` does not drift by that lateness at every tick.
const LATE_TICK: Duration = Duration::from_millis(5);

impl MissedTickBehavior {
    /// The tick after `tick`, observed at `now`.
    fn next(self, tick: StdInstant, now: StdInstant, period: Duration) -> StdInstant {
        let on_time = later(tick, period);
        if self == MissedTickBehavior::Delay {
            let late = now.saturating_duration_since(tick);
            if late > LATE_TICK || late >= period {
                return later(now, period);
            }
        }
        if now < on_time {
            return on_time;
        }
        match self {
            MissedTickBehavior::Burst => on_time,
            MissedTickBehavior::Delay => later(now, period),
            MissedTickBehavior::Skip => {
                // The first instant of the schedule after `now`, in u128 nanoseconds: a
                // `Duration` holds under 2^64 seconds (under 2^94 ns), so `periods * p`, at most
                // `behind + p`, cannot overflow. When the result does not fit a `Duration` or an
                // `Instant`, a period from now.
                const NANOS: u128 = 1_000_000_000;
                let behind = now.duration_since(tick).as_nanos();
                let p = period.as_nanos();
                let skip = (behind / p + 1) * p;
                u64::try_from(skip / NANOS)
                    .ok()
                    .map(|secs| Duration::new(secs, (skip % NANOS) as u32))
                    .and_then(|skip| tick.checked_add(skip))
                    .unwrap_or_else(|| later(now, period))
            }
        }
    }
}

/// Ticks at a fixed period; made by [`interval`] and [`interval_at`]. Each tick returns the
/// instant it was scheduled for. Missed ticks follow [`MissedTickBehavior`].
///
/// Each tick spends a unit of the task's cooperative budget ([`BUDGET`](crate::task::BUDGET)), so
/// a task catching up with many missed ticks in `Burst` mode still gives its worker back.
#[derive(Debug)]
pub struct Interval {
    next: StdInstant,
    period: Duration,
    behavior: MissedTickBehavior,
    sleep: Sleep,
}

impl Interval {
    /// Waits for the next tick and returns the instant it was scheduled for.
    ///
    /// ```
    /// use std::time::Duration;
    /// rondo::block_on(async {
    ///     let mut iv = rondo::time::interval(Duration::from_millis(1));
    ///     let a = iv.tick().await;
    ///     let b = iv.tick().await;
    ///     assert_eq!(b - a, Duration::from_millis(1));
    /// });
    /// ```
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick; wakes `cx`'s waker when it is due.
    ///
    /// ```
    /// use std::time::Duration;
    /// rondo::block_on(async {
    ///     let mut iv = rondo::time::interval(Duration::from_millis(1));
    ///     let first = std::future::poll_fn(|cx| iv.poll_tick(cx)).await;
    ///     assert!(first <= std::time::Instant::now());
    /// });
    /// ```
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        let mut now = now_std();
        if now < self.next {
            if Pin::new(&mut self.sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
            now = now_std();
        }
        // A ready tick spends a unit of the task's cooperative budget, as a zero-length sleep
        // does: an interval bursting through a backlog still gives the worker back.
        if crate::task::coop::poll_proceed(cx).is_pending() {
            return Poll::Pending;
        }
        let tick = self.next;
        self.next = self.behavior.next(tick, now, self.period);
        Pin::new(&mut self.sleep).reset(self.next);
        Poll::Ready(Instant::from_std(tick))
    }

    /// Restarts the schedule: the next tick is one period from now.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// rondo::block_on(async {
    ///     let mut iv = rondo::time::interval(Duration::from_millis(2));
    ///     iv.tick().await;
    ///     iv.reset();
    ///     let before = Instant::now();
    ///     assert!(iv.tick().await >= before);
    /// });
    /// ```
    pub fn reset(&mut self) {
        self.reset_at(later(now_std(), self.period));
    }

    /// Restarts the schedule: the next tick is at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// rondo::block_on(async {
    ///     let mut iv = rondo::time::interval(Duration::from_secs(3600));
    ///     iv.tick().await;
    ///     iv.reset_immediately();
    ///     iv.tick().await;
    /// });
    /// ```
    pub fn reset_immediately(&mut self) {
        self.reset_at(now_std());
    }

    /// Restarts the schedule: the next tick is `after` from now (about 30 years from now for an
    /// `after` too long for an `Instant`, as with [`sleep`](crate::time::sleep())).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// rondo::block_on(async {
    ///     let mut iv = rondo::time::interval(Duration::from_secs(3600));
    ///     iv.tick().await;
    ///     let before = Instant::now();
    ///     iv.reset_after(Duration::from_millis(2));
    ///     let tick = iv.tick().await;
    ///     assert!(tick >= before + Duration::from_millis(2));
    ///     assert!(before.elapsed() < Duration::from_secs(60));
    /// });
    /// ```
    pub fn reset_after(&mut self, after: Duration) {
        self.reset_at(later(now_std(), after));
    }

    /// Restarts the schedule: the next tick is at `deadline`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// rondo::block_on(async {
    ///     let mut iv = rondo::time::interval(Duration::from_secs(3600));
    ///     iv.tick().await;
    ///     let at = Instant::now() + Duration::from_millis(1);
    ///     iv.reset_at(at);
    ///     assert_eq!(iv.tick().await, at);
    /// });
    /// ```
    pub fn reset_at(&mut self, deadline: impl Into<Instant>) {
        let deadline = deadline.into().into_std();
        self.next = deadline;
        Pin::new(&mut self.sleep).reset(deadline);
    }

    /// The period.
    ///
    /// ```
    /// use std::time::Duration;
    /// let iv = rondo::time::interval(Duration::from_millis(5));
    /// assert_eq!(iv.period(), Duration::from_millis(5));
    /// ```
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What happens to missed ticks.
    ///
    /// ```
    /// use rondo::time::MissedTickBehavior;
    /// let iv = rondo::time::interval(std::time::Duration::from_millis(5));
    /// assert_eq!(iv.missed_tick_behavior(), MissedTickBehavior::Burst);
    /// ```
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.behavior
    }

    /// Sets what happens to missed ticks.
    ///
    /// ```
    /// use rondo::time::MissedTickBehavior;
    /// let mut iv = rondo::time::interval(std::time::Duration::from_millis(5));
    /// iv.set_missed_tick_behavior(MissedTickBehavior::Skip);
    /// assert_eq!(iv.missed_tick_behavior(), MissedTickBehavior::Skip);
    /// ```
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.behavior = behavior;
    }
}

#[cfg(test)]
mod tests {
    use super::MissedTickBehavior::*;
    use std::time::{Duration, Instant};

    #[test]
    fn missed_tick_rules() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let p = ms(10);
        // On time: the schedule holds whatever the behavior.
        for b in [Burst, Delay, Skip] {
            assert_eq!(b.next(t0, t0 + ms(3), p), t0 + ms(10));
        }
        // Observed 35 ms after the tick at 0.
        assert_eq!(Burst.next(t0, t0 + ms(35), p), t0 + ms(10));
        assert_eq!(Delay.next(t0, t0 + ms(35), p), t0 + ms(45));
        assert_eq!(Skip.next(t0, t0 + ms(35), p), t0 + ms(40));
        // Exactly on a later tick: Skip goes to the one after.
        assert_eq!(Skip.next(t0, t0 + ms(30), p), t0 + ms(40));
        // Late by less than a period: Delay keeps a full period after the late tick, once the
        // lateness exceeds `LATE_TICK`; the others keep the schedule.
        let p = ms(100);
        assert_eq!(Delay.next(t0, t0 + ms(60), p), t0 + ms(160));
        assert_eq!(Burst.next(t0, t0 + ms(60), p), t0 + ms(100));
        assert_eq!(Skip.next(t0, t0 + ms(60), p), t0 + ms(100));
        assert_eq!(Delay.next(t0, t0 + ms(5), p), t0 + ms(100));
        assert_eq!(
            Delay.next(t0, t0 + ms(5) + Duration::from_nanos(1), p),
            t0 + ms(105) + Duration::from_nanos(1)
        );
        // A period shorter than `LATE_TICK`: a whole period late is late.
        let p = ms(2);
        assert_eq!(Delay.next(t0, t0 + ms(1), p), t0 + ms(2));
        assert_eq!(Delay.next(t0, t0 + ms(2), p), t0 + ms(4));
        // More nanoseconds behind than a u64 holds: still the next tick of the schedule.
        let Some(old) = t0.checked_sub(Duration::from_secs(600 * 365 * 86_400)) else {
            return;
        };
        let p = Duration::from_secs(7);
        let next = Skip.next(old, t0, p);
        assert!(next > t0 && next <= t0 + p);
        assert_eq!(next.duration_since(old).as_nanos() % p.as_nanos(), 0);
    }
}
