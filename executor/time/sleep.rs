//! `Sleep`: a future that completes at a deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::driver::{Armed, Registration, Shard};
use super::instant::now_std;
use super::{Current, Instant, Source, later};

/// Waits until `duration` has passed; see [`Sleep`]. A zero duration completes at the first poll,
/// spending a unit of the task's cooperative budget (`rondo::task::BUDGET`), so a loop of them
/// still gives the worker back now and then.
///
/// Inside a runtime (a task, `block_on`, or `enter`) the timer belongs to that runtime; anywhere
/// else it belongs to the global runtime, started on first use, as [`spawn`](crate::spawn) does.
///
/// The deadline is `duration` from now on the current runtime's clock ([`Instant::now`]), which
/// a paused clock holds still.
///
/// ```
/// use std::time::{Duration, Instant};
/// rondo::block_on(async {
///     let start = Instant::now();
///     rondo::time::sleep(Duration::from_millis(5)).await;
///     assert!(start.elapsed() >= Duration::from_millis(5));
/// });
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    let mut s = sleep_until(Instant::from_std(later(now_std(), duration)));
    // Over at once: no trip through the timer wheel, which processes a passed deadline only at
    // its next pass (up to a tick later).
    s.done = duration.is_zero();
    s
}

/// Waits until `deadline`; see [`Sleep`]. A deadline in the past completes at the next poll that
/// finds it processed (at most a timer tick later). The deadline is a [`rondo::time::Instant`]
/// (tokio's type) or a [`std::time::Instant`]; both mean the same moment.
///
/// [`rondo::time::Instant`]: Instant
///
/// ```
/// use std::time::{Duration, Instant};
/// rondo::block_on(async {
///     let deadline = Instant::now() + Duration::from_millis(3);
///     rondo::time::sleep_until(deadline).await;
///     assert!(Instant::now() >= deadline);
/// });
/// ```
pub fn sleep_until(deadline: impl Into<Instant>) -> Sleep {
    Sleep {
        deadline: deadline.into().into_std(),
        slack: Duration::ZERO,
        entry: None,
        done: false,
    }
}

/// A future that completes at its deadline, never before. Made by [`sleep`] and [`sleep_until`].
///
/// It arms its timer when first polled, in the shard of the worker polling it (no runtime-wide
/// lock), and dropping it removes the timer: a cancelled sleep leaves nothing behind. Timers
/// fire with a resolution of about 131 µs; [`with_slack`](Self::with_slack) lets the runtime fire
/// a timer later, up to a window, so that timers whose windows overlap fire in one wakeup.
///
/// # Panics
/// Polling a sleep whose runtime has shut down panics with a message saying so.
pub struct Sleep {
    deadline: std::time::Instant,
    slack: Duration,
    entry: Option<Registration>,
    /// Completed without an entry (the deadline had been processed when first polled).
    done: bool,
}

impl Sleep {
    /// The instant this sleep completes at (or after).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(rondo::time::sleep_until(deadline).deadline(), deadline);
    /// ```
    pub fn deadline(&self) -> Instant {
        Instant::from_std(self.deadline)
    }

    /// True once the sleep has completed or its timer has fired, as tokio's: a sleep never polled
    /// is not elapsed, even with its deadline passed.
    ///
    /// ```
    /// use std::time::Duration;
    /// rondo::block_on(async {
    ///     let mut s = rondo::time::sleep(Duration::from_millis(2));
    ///     assert!(!s.is_elapsed());
    ///     (&mut s).await;
    ///     assert!(s.is_elapsed());
    /// });
    /// ```
    pub fn is_elapsed(&self) -> bool {
        self.done || self.entry.as_ref().is_some_and(Registration::is_fired)
    }

    /// Moves the deadline (earlier or later), whether or not the sleep has completed; a completed
    /// sleep becomes pending again.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// rondo::block_on(async {
    ///     let start = Instant::now();
    ///     let mut s = std::pin::pin!(rondo::time::sleep(Duration::from_secs(3600)));
    ///     s.as_mut().reset(Instant::now() + Duration::from_millis(2));
    ///     s.await;
    ///     assert!(start.elapsed() < Duration::from_secs(60));
    /// });
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: impl Into<Instant>) {
        let this = self.get_mut();
        let deadline = deadline.into().into_std();
        this.deadline = deadline;
        this.done = false;
        if let Some(e) = &this.entry {
            e.reset(deadline, this.slack);
        }
    }

    /// Lets the runtime complete this sleep up to `window` after its deadline (never before it),
    /// so that timers whose windows overlap fire in a single wakeup: for timeouts that need not
    /// be exact, it saves wakeups and context switches.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// rondo::block_on(async {
    ///     let start = Instant::now();
    ///     rondo::time::sleep(Duration::from_millis(2)).with_slack(Duration::from_millis(5)).await;
    ///     assert!(start.elapsed() >= Duration::from_millis(2));
    /// });
    /// ```
    pub fn with_slack(mut self, window: Duration) -> Sleep {
        self.slack = window;
        if let Some(e) = &self.entry {
            e.reset(self.deadline, window);
        }
        self
    }

    /// Arms the timer in the current runtime.
    fn arm(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let (deadline, slack) = (self.deadline, self.slack);
        let armed = Current::with_shard(|shard: &Arc<Shard>| {
            Registration::arm(shard, deadline, slack, cx.waker())
        });
        match armed {
            Armed::Waiting(e) => {
                self.entry = Some(e);
                Poll::Pending
            }
            Armed::Due => {
                self.done = true;
                Poll::Ready(())
            }
            Armed::Closed => shut_down(),
        }
    }
}

#[cold]
fn shut_down() -> ! {
    panic!(
        "rondo::time: a timer was polled after its runtime shut down; timers work only while \
         their runtime runs"
    )
}

impl Future for Sleep {
    type Output = ();

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.done {
            // A zero duration is over at once (`sleep`): a loop of them must still give the
            // worker back now and then, as any loop over ready rondo futures does.
            return crate::task::coop::poll_proceed(cx);
        }
        match &this.entry {
            // Woken (by the timer, most likely) with the deadline passed: complete without taking
            // the shard's lock, which the firing worker may hold; the drop removes the entry.
            Some(e) if e.now() >= this.deadline => {
                this.done = true;
                Poll::Ready(())
            }
            Some(e) => match e.poll(cx.waker()) {
                Some(true) => Poll::Ready(()),
                Some(false) => Poll::Pending,
                None => shut_down(),
            },
            None => this.arm(cx),
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("slack", &self.slack)
            .field("armed", &self.entry.is_some())
            .finish()
    }
}
