//! A group's **schedule delay**: how long each of its waits for a worker lasted, as a histogram.
//!
//! What is measured. A wait starts when the group becomes runnable with no worker serving it
//! (the scheduler stamps it as the group enters the rotation with queued work, or as a worker
//! leaves it with work still queued) and ends when a worker next takes its work; a task woken
//! from outside into the scheduler's lane waits from its push to its take. Each wait that ends is
//! one sample: its length goes to the group's sum (`GroupMetrics::wait`) and one count goes to
//! its bucket. A group a worker keeps serving records no sample, so the histogram describes the
//! waits there were, not every poll (tokio's `poll_time_histogram` samples every poll; this one
//! samples per group, where rondo's scheduler decides).
//!
//! Cost. A sample is recorded where the wait's end is stamped already, on the path taken only
//! when something waited: a division, a leading-zero count and two relaxed additions. The
//! buckets live in a record allocated by the group's first sample (a compare-and-swap publishes
//! it; a loser frees its own), so a group that never waits carries one null pointer.
//!
//! Buckets. [`DELAY_BUCKETS`] of them, by powers of two of microseconds: bucket 0 holds waits
//! under 1 µs, bucket `k` (1 to 20) waits in `[2^(k-1), 2^k)` µs, and the last one every wait of
//! 2^20 µs (about 1.05 s) or more.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use crate::shim::{AtomicPtr, AtomicU64, Ordering};

/// How many buckets a [`ScheduleDelayHistogram`] has.
pub const DELAY_BUCKETS: usize = 22;

/// The bucket of a wait of `ns` nanoseconds (see the module docs).
#[inline]
fn bucket_of(ns: u64) -> usize {
    let us = ns / 1_000;
    ((u64::BITS - us.leading_zeros()) as usize).min(DELAY_BUCKETS - 1)
}

/// The waits' sum and counts, allocated by the first sample.
struct Record {
    sum_ns: AtomicU64,
    buckets: [AtomicU64; DELAY_BUCKETS],
}

/// A group's schedule delays (see the module docs): a pointer to its record, null until the first
/// sample.
pub(crate) struct Delays {
    record: AtomicPtr<Record>,
}

impl Delays {
    pub(crate) fn new() -> Self {
        Delays {
            record: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The record, if a sample allocated it.
    #[inline]
    fn get(&self) -> Option<&Record> {
        let p = self.record.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was published (Release, matched by the Acquire above) by
        // `record_slow` after the record was fully initialized, and it is freed only in `drop`,
        // which has `&mut self`, so it outlives this borrow of `self`.
        unsafe { p.as_ref() }
    }

    /// One wait of `ns` nanoseconds ended.
    #[inline]
    pub(crate) fn record(&self, ns: u64) {
        let r = match self.get() {
            Some(r) => r,
            None => self.allocate(),
        };
        r.sum_ns.fetch_add(ns, Ordering::Relaxed);
        r.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// Allocates the record and publishes it; a thread that lost the race frees its own and uses
    /// the winner's.
    #[cold]
    fn allocate(&self) -> &Record {
        let new = Box::into_raw(Box::new(Record {
            sum_ns: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }));
        match self.record.compare_exchange(
            std::ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `new` is ours, just published; it lives until `drop` (see `get`).
            Ok(_) => unsafe { &*new },
            Err(winner) => {
                // SAFETY: `new` came from `Box::into_raw` above and was never published.
                drop(unsafe { Box::from_raw(new) });
                // SAFETY: the winner published a fully initialized record (Acquire on failure),
                // freed only in `drop`.
                unsafe { &*winner }
            }
        }
    }

    /// Nanoseconds of all recorded waits.
    pub(crate) fn sum_ns(&self) -> u64 {
        self.get().map_or(0, |r| r.sum_ns.load(Ordering::Relaxed))
    }

    /// The counts as they stand (each bucket read once; samples landing meanwhile may or may
    /// not be included).
    pub(crate) fn snapshot(&self) -> ScheduleDelayHistogram {
        let mut h = ScheduleDelayHistogram::default();
        if let Some(r) = self.get() {
            for (c, b) in h.counts.iter_mut().zip(&r.buckets) {
                *c = b.load(Ordering::Relaxed);
            }
            h.sum = Duration::from_nanos(r.sum_ns.load(Ordering::Relaxed));
        }
        h
    }
}

impl Drop for Delays {
    fn drop(&mut self) {
        let p = self.record.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a published record came from `Box::into_raw` in `allocate`; `&mut self`
            // means no reader is left.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// A group's schedule delays: how long each of its waits for a worker lasted, from the moment
/// it had runnable work and no worker serving it to the moment a worker took that work, counted
/// in [`DELAY_BUCKETS`] buckets by powers of two of microseconds (part of
/// [`GroupMetrics`](crate::GroupMetrics)).
///
/// A group a worker keeps serving records no wait: the histogram describes the waits there
/// were. Unlike tokio's `poll_time_histogram`, it is always on, and per group, not per worker.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().build().unwrap();
/// rt.block_on(g.spawn(async {})).unwrap();
/// let h = g.metrics().schedule_delay;
/// assert_eq!(h.counts().iter().sum::<u64>(), h.count());
/// assert_eq!(h.p99().is_some(), h.count() > 0);
/// assert!(h.sum() <= g.metrics().wait);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleDelayHistogram {
    counts: [u64; DELAY_BUCKETS],
    sum: Duration,
}

impl ScheduleDelayHistogram {
    /// The waits counted in each bucket, bucket 0 first ([`bucket_range`](Self::bucket_range)
    /// gives each bucket's bounds).
    ///
    /// ```
    /// let h = rondo::group::ScheduleDelayHistogram::default();
    /// assert_eq!(h.counts().len(), rondo::group::DELAY_BUCKETS);
    /// ```
    pub fn counts(&self) -> &[u64; DELAY_BUCKETS] {
        &self.counts
    }

    /// The waits recorded in all.
    ///
    /// ```
    /// assert_eq!(rondo::group::ScheduleDelayHistogram::default().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The recorded waits' total length (the ended waits of
    /// [`GroupMetrics::wait`](crate::GroupMetrics::wait)).
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(rondo::group::ScheduleDelayHistogram::default().sum(), Duration::ZERO);
    /// ```
    pub fn sum(&self) -> Duration {
        self.sum
    }

    /// The waits bucket `i` holds: from its start (inclusive) to its end (exclusive); the last
    /// bucket ends at `Duration::MAX`. `None` for `i` of [`DELAY_BUCKETS`] or more.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rondo::group::ScheduleDelayHistogram;
    /// assert_eq!(ScheduleDelayHistogram::bucket_range(0), Some(Duration::ZERO..Duration::from_micros(1)));
    /// assert_eq!(ScheduleDelayHistogram::bucket_range(3), Some(Duration::from_micros(4)..Duration::from_micros(8)));
    /// assert_eq!(ScheduleDelayHistogram::bucket_range(22), None);
    /// ```
    pub fn bucket_range(i: usize) -> Option<Range<Duration>> {
        let start = match i {
            0 => Duration::ZERO,
            DELAY_BUCKETS.. => return None,
            _ => Duration::from_micros(1 << (i - 1)),
        };
        let end = if i == DELAY_BUCKETS - 1 {
            Duration::MAX
        } else {
            Duration::from_micros(1 << i)
        };
        Some(start..end)
    }

    /// An upper bound of the `q` quantile (`q` in `0.0..=1.0`, clamped) of the recorded waits:
    /// the end of the bucket that holds it, or, in the last, open bucket, its start. `None` when
    /// nothing was recorded.
    ///
    /// ```
    /// let h = rondo::group::ScheduleDelayHistogram::default();
    /// assert_eq!(h.quantile(0.5), None);
    /// ```
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        // The rank of the sample sought, 1-based: at least the first.
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let r = Self::bucket_range(i).expect("i is a bucket");
                return Some(if i == DELAY_BUCKETS - 1 {
                    r.start
                } else {
                    r.end
                });
            }
        }
        unreachable!("the counts add up to total")
    }

    /// [`quantile(0.99)`](Self::quantile): 99 of 100 recorded waits were shorter than this.
    ///
    /// ```
    /// assert_eq!(rondo::group::ScheduleDelayHistogram::default().p99(), None);
    /// ```
    pub fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }

    /// The waits recorded after `earlier`, a snapshot of the same group taken before this one:
    /// counts and sum less `earlier`'s (at zero where `earlier` is not in fact earlier). For a
    /// view over the last interval, as `top` shows.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// let before = g.metrics().schedule_delay;
    /// rt.block_on(g.spawn(async {})).unwrap();
    /// let after = g.metrics().schedule_delay;
    /// assert_eq!(after.since(&before).count(), after.count() - before.count());
    /// assert_eq!(after.since(&after).count(), 0);
    /// ```
    pub fn since(&self, earlier: &ScheduleDelayHistogram) -> ScheduleDelayHistogram {
        let mut h = self.clone();
        for (c, e) in h.counts.iter_mut().zip(&earlier.counts) {
            *c = c.saturating_sub(*e);
        }
        h.sum = h.sum.saturating_sub(earlier.sum);
        h
    }

    /// Adds `other`'s counts and sum to these (a subtree's total).
    pub(crate) fn add(&mut self, other: &ScheduleDelayHistogram) {
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.sum += other.sum;
    }
}

/// `count N, p99 T` (or `count 0`).
impl fmt::Display for ScheduleDelayHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.p99() {
            Some(p) => write!(f, "count {}, p99 {:.1?}", self.count(), p),
            None => write!(f, "count 0"),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn waits_fall_in_their_buckets() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(999), 0);
        assert_eq!(bucket_of(1_000), 1);
        assert_eq!(bucket_of(1_999), 1);
        assert_eq!(bucket_of(2_000), 2);
        assert_eq!(bucket_of(1_000_000), 10); // 1 ms is in [512, 1024) µs
        assert_eq!(bucket_of(u64::MAX), DELAY_BUCKETS - 1);
        for ns in [0, 5, 999, 1_000, 3_500, 1_000_000, 1 << 40] {
            let range = ScheduleDelayHistogram::bucket_range(bucket_of(ns)).unwrap();
            // The bounds are in whole microseconds; a wait's bucket is by its whole microseconds.
            let us = Duration::from_micros(ns / 1_000);
            assert!(range.contains(&us), "{ns} ns in {range:?}");
        }
    }

    #[test]
    fn quantiles_read_the_cumulative_counts() {
        let d = Delays::new();
        for _ in 0..98 {
            d.record(500); // bucket 0
        }
        d.record(5_000); // bucket 3: [4, 8) µs
        d.record(3_000_000_000); // the last bucket
        let h = d.snapshot();
        assert_eq!(h.count(), 100);
        assert_eq!(
            h.sum(),
            Duration::from_nanos(98 * 500 + 5_000 + 3_000_000_000)
        );
        assert_eq!(h.quantile(0.5), Some(Duration::from_micros(1)));
        assert_eq!(h.p99(), Some(Duration::from_micros(8)));
        assert_eq!(h.quantile(1.0), Some(Duration::from_micros(1 << 20)));
        assert_eq!(h.quantile(f64::NAN), h.quantile(1.0));
        assert_eq!(d.sum_ns(), h.sum().as_nanos() as u64);
    }
}
