//! `Instant`: a moment on the current runtime's clock.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

use super::{Current, Source, clock};

/// A moment of the current runtime's clock, as tokio's `Instant`: the same as
/// [`std::time::Instant`] unless the runtime's clock is paused ([`pause`](super::pause)), in which
/// case [`Instant::now`] reads the paused clock.
///
/// Differences from tokio's: it also compares with and subtracts from and to a
/// [`std::time::Instant`] (both ways), and every rondo function or method that takes an instant
/// also takes a `std::time::Instant`.
///
/// ```
/// use std::time::Duration;
/// use rondo::time::Instant;
///
/// let a = Instant::now();
/// let b = a + Duration::from_millis(5);
/// assert_eq!(b - a, Duration::from_millis(5));
/// assert_eq!(a - b, Duration::ZERO); // saturating, as tokio's
/// assert_eq!(b.duration_since(a), Duration::from_millis(5));
/// assert_eq!(Instant::from_std(a.into_std()), a);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    std: std::time::Instant,
}

impl Instant {
    /// The current runtime's clock now (the real clock outside a runtime, or in a runtime whose
    /// clock was never paused).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let a = rondo::time::Instant::now();
    ///     let b = rondo::time::Instant::now();
    ///     assert!(b >= a);
    /// });
    /// ```
    #[inline]
    pub fn now() -> Instant {
        Instant { std: now_std() }
    }

    /// The `Instant` of a `std::time::Instant`.
    ///
    /// ```
    /// let t = std::time::Instant::now();
    /// assert_eq!(rondo::time::Instant::from_std(t).into_std(), t);
    /// ```
    pub fn from_std(std: std::time::Instant) -> Instant {
        Instant { std }
    }

    /// The `std::time::Instant` of this one.
    ///
    /// ```
    /// let t = rondo::time::Instant::now();
    /// let s: std::time::Instant = t.into_std();
    /// assert_eq!(t, s);
    /// ```
    pub fn into_std(self) -> std::time::Instant {
        self.std
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later (as tokio's).
    ///
    /// ```
    /// use std::time::Duration;
    /// let a = rondo::time::Instant::now();
    /// let b = a + Duration::from_secs(1);
    /// assert_eq!(b.duration_since(a), Duration::from_secs(1));
    /// assert_eq!(a.duration_since(b), Duration::ZERO);
    /// ```
    pub fn duration_since(&self, earlier: impl Into<Instant>) -> Duration {
        self.std.saturating_duration_since(earlier.into().std)
    }

    /// The time from `earlier` to `self`, or `None` if `earlier` is later.
    ///
    /// ```
    /// use std::time::Duration;
    /// let a = rondo::time::Instant::now();
    /// let b = a + Duration::from_secs(1);
    /// assert_eq!(b.checked_duration_since(a), Some(Duration::from_secs(1)));
    /// assert_eq!(a.checked_duration_since(b), None);
    /// ```
    pub fn checked_duration_since(&self, earlier: impl Into<Instant>) -> Option<Duration> {
        self.std.checked_duration_since(earlier.into().std)
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    ///
    /// ```
    /// use std::time::Duration;
    /// let a = rondo::time::Instant::now();
    /// assert_eq!(a.saturating_duration_since(a + Duration::from_secs(1)), Duration::ZERO);
    /// ```
    pub fn saturating_duration_since(&self, earlier: impl Into<Instant>) -> Duration {
        self.std.saturating_duration_since(earlier.into().std)
    }

    /// The time since `self` on the current runtime's clock (zero if `self` is later).
    ///
    /// ```
    /// use std::time::Duration;
    /// rondo::Builder::new().start_paused(true).build().unwrap().block_on(async {
    ///     let start = rondo::time::Instant::now();
    ///     rondo::time::advance(Duration::from_secs(3)).await;
    ///     assert_eq!(start.elapsed(), Duration::from_secs(3));
    /// });
    /// ```
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(*self)
    }

    /// `self + d`, or `None` if an `Instant` cannot hold it.
    ///
    /// ```
    /// use std::time::Duration;
    /// let a = rondo::time::Instant::now();
    /// assert!(a.checked_add(Duration::from_secs(1)).is_some());
    /// assert!(a.checked_add(Duration::MAX).is_none());
    /// ```
    pub fn checked_add(&self, d: Duration) -> Option<Instant> {
        self.std.checked_add(d).map(Instant::from_std)
    }

    /// `self - d`, or `None` if an `Instant` cannot hold it.
    ///
    /// ```
    /// use std::time::Duration;
    /// let a = rondo::time::Instant::now();
    /// assert!(a.checked_sub(Duration::MAX).is_none());
    /// ```
    pub fn checked_sub(&self, d: Duration) -> Option<Instant> {
        self.std.checked_sub(d).map(Instant::from_std)
    }
}

/// The current runtime's clock: the real clock unless some clock in the process was ever paused
/// (one relaxed load), then the current runtime's.
#[inline]
pub(crate) fn now_std() -> std::time::Instant {
    if !clock::any_paused() {
        return std::time::Instant::now();
    }
    Current::with_timers(|t| t.map_or_else(std::time::Instant::now, |t| t.now()))
}

impl From<std::time::Instant> for Instant {
    fn from(std: std::time::Instant) -> Instant {
        Instant { std }
    }
}

impl From<Instant> for std::time::Instant {
    fn from(t: Instant) -> std::time::Instant {
        t.std
    }
}

impl PartialEq<std::time::Instant> for Instant {
    fn eq(&self, other: &std::time::Instant) -> bool {
        self.std == *other
    }
}

impl PartialEq<Instant> for std::time::Instant {
    fn eq(&self, other: &Instant) -> bool {
        *self == other.std
    }
}

impl PartialOrd<std::time::Instant> for Instant {
    fn partial_cmp(&self, other: &std::time::Instant) -> Option<std::cmp::Ordering> {
        self.std.partial_cmp(other)
    }
}

impl PartialOrd<Instant> for std::time::Instant {
    fn partial_cmp(&self, other: &Instant) -> Option<std::cmp::Ordering> {
        self.partial_cmp(&other.std)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// # Panics
    /// If the result does not fit an `Instant`, as `std`'s.
    fn add(self, d: Duration) -> Instant {
        Instant { std: self.std + d }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// # Panics
    /// If the result does not fit an `Instant`, as `std`'s.
    fn sub(self, d: Duration) -> Instant {
        Instant { std: self.std - d }
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, d: Duration) {
        *self = *self - d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating, as tokio's: zero if `earlier` is later.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Sub<std::time::Instant> for Instant {
    type Output = Duration;
    /// Saturating: zero if `earlier` is later.
    fn sub(self, earlier: std::time::Instant) -> Duration {
        self.std.saturating_duration_since(earlier)
    }
}

impl Sub<Instant> for std::time::Instant {
    type Output = Duration;
    /// Saturating: zero if `earlier` is later.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier.std)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.std.fmt(f)
    }
}
