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

pub(crate) mod driver;
mod interval;
pub(crate) mod keeper;
mod sleep;
mod timeout;
mod wheel;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use interval::{Interval, MissedTickBehavior, interval, interval_at};
pub use sleep::{Sleep, sleep, sleep_until};
pub use timeout::{Elapsed, Timeout, timeout, timeout_at};

pub(crate) use driver::{IfBusy, NEVER, Shard, TimerHost, Timers};
pub(crate) use keeper::{Keeper, Lowered};

/// `t + d`, or, where an `Instant` cannot hold that, about 30 years from `t`: a deadline no
/// wait reaches. Every deadline the timers compute goes through it, so no length of sleep,
/// timeout or period overflows.
pub(crate) fn later(t: Instant, d: Duration) -> Instant {
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
}

/// The carrier of [`Source`].
pub(crate) struct Current;
