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
//! when something waited: a division, a leading-zero count and two atomic read-modify-writes (an
//! addition to the sum, and a bucket's count). The group's first [`INLINE_SAMPLES`] samples are
//! inline in it: their sum, and their buckets packed in one word that a compare-and-swap extends
//! by one sample. Later samples count in a record of their sum and every bucket's count,
//! allocated by the first sample that finds the inline word full (a compare-and-swap publishes
//! it; a loser frees its own). A short-lived group (one per connection or per batch, which waits
//! a few times) allocates nothing for its delays.
//!
//! Protocol. The inline word holds its sample count in its low [`COUNT_BITS`] bits and the
//! bucket of sample `i` in the [`BUCKET_BITS`] bits at `COUNT_BITS + i * BUCKET_BITS`. A sample
//! goes to the word while it has room (a compare-and-swap from the value it read; a loser
//! re-reads), else to the record; it is never in both. The record exists only once the word is
//! full, so a sample that finds it goes there directly. A reader adds the word's samples to the
//! record's, each word read once: samples landing meanwhile may or may not be included.
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

/// Samples the inline word holds (see the module docs).
pub(crate) const INLINE_SAMPLES: u32 = 12;
/// Bits of the inline word's sample count.
const COUNT_BITS: u32 = 4;
/// Bits of one inline sample's bucket.
const BUCKET_BITS: u32 = 5;

const _: () = {
    assert!(DELAY_BUCKETS <= 1 << BUCKET_BITS);
    assert!(INLINE_SAMPLES < 1 << COUNT_BITS);
    assert!(COUNT_BITS + INLINE_SAMPLES * BUCKET_BITS <= u64::BITS);
};

/// The samples the inline word had no room for, allocated by the first of them: their sum and
/// their counts.
struct Record {
    sum_ns: AtomicU64,
    buckets: [AtomicU64; DELAY_BUCKETS],
}

/// A group's schedule delays (see the module docs): the sum and the buckets of the first
/// samples inline, and a pointer to the record of later ones, null until one is needed.
pub(crate) struct Delays {
    sum_ns: AtomicU64,
    inline: AtomicU64,
    record: AtomicPtr<Record>,
}

impl Delays {
    pub(crate) fn new() -> Self {
        Delays {
            sum_ns: AtomicU64::new(0),
            inline: AtomicU64::new(0),
            record: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The record, if a sample allocated it.
    #[inline]
    fn get(&self) -> Option<&Record> {
        let p = self.record.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was published (Release, matched by the Acquire above) by
        // `allocate` after the record was fully initialized, and it is freed only in `drop`,
        // which has `&mut self`, so it outlives this borrow of `self`.
        unsafe { p.as_ref() }
    }

    /// One wait of `ns` nanoseconds ended.
    #[inline]
    pub(crate) fn record(&self, ns: u64) {
        let r = match self.get() {
            // The record exists only once the inline word is full.
            Some(r) => r,
            None => match self.record_early(ns) {
                Some(r) => r,
                None => return,
            },
        };
        r.sum_ns.fetch_add(ns, Ordering::Relaxed);
        r.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// [`record`](Self::record) before the record exists: into the inline word while it has
    /// room (`None`), else the record, allocated first, for the caller to count the sample in.
    /// Out of line: most groups' samples are few.
    #[cold]
    #[inline(never)]
    fn record_early(&self, ns: u64) -> Option<&Record> {
        let bucket = bucket_of(ns);
        let mut word = self.inline.load(Ordering::Relaxed);
        loop {
            let n = (word & ((1 << COUNT_BITS) - 1)) as u32;
            if n >= INLINE_SAMPLES {
                break;
            }
            let with = word + 1 + ((bucket as u64) << (COUNT_BITS + n * BUCKET_BITS));
            match self.inline.compare_exchange_weak(
                word,
                with,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.sum_ns.fetch_add(ns, Ordering::Relaxed);
                    return None;
                }
                Err(now) => word = now,
            }
        }
        Some(match self.get() {
            Some(r) => r,
            None => self.allocate(),
        })
    }

    /// Allocates the record and publishes it; a thread that lost the race frees its own and uses
    /// the winner's.
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

    /// True once the samples outgrew the inline word and allocated the record.
    #[cfg(test)]
    pub(crate) fn has_record(&self) -> bool {
        self.get().is_some()
    }

    /// Nanoseconds of all recorded waits.
    pub(crate) fn sum_ns(&self) -> u64 {
        self.sum_ns.load(Ordering::Relaxed)
            + self.get().map_or(0, |r| r.sum_ns.load(Ordering::Relaxed))
    }

    /// The counts as they stand (the inline word and each bucket read once; samples landing
    /// meanwhile may or may not be included).
    pub(crate) fn snapshot(&self) -> ScheduleDelayHistogram {
        let mut h = ScheduleDelayHistogram::default();
        let word = self.inline.load(Ordering::Relaxed);
        let n = (word & ((1 << COUNT_BITS) - 1)) as u32;
        for i in 0..n.min(INLINE_SAMPLES) {
            let b = (word >> (COUNT_BITS + i * BUCKET_BITS)) & ((1 << BUCKET_BITS) - 1);
            h.counts[(b as usize).min(DELAY_BUCKETS - 1)] += 1;
        }
        if let Some(r) = self.get() {
            for (c, b) in h.counts.iter_mut().zip(&r.buckets) {
                *c += b.load(Ordering::Relaxed);
            }
        }
        h.sum = Duration::from_nanos(self.sum_ns());
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

    /// The first `INLINE_SAMPLES` samples allocate nothing and count in their buckets; the next
    /// one allocates the record, and the snapshot adds both.
    #[test]
    fn first_samples_stay_inline_then_the_record_takes_the_rest() {
        let d = Delays::new();
        let waits: Vec<u64> = (0..u64::from(INLINE_SAMPLES))
            .map(|i| if i % 3 == 0 { u64::MAX } else { i * 1_000 })
            .collect();
        for &ns in &waits {
            d.record(ns.min(1 << 50));
        }
        assert!(!d.has_record(), "{INLINE_SAMPLES} samples need no record");
        let mut want = [0u64; DELAY_BUCKETS];
        for &ns in &waits {
            want[bucket_of(ns.min(1 << 50))] += 1;
        }
        assert_eq!(d.snapshot().counts(), &want);
        d.record(5_000);
        d.record(5_000);
        assert!(d.has_record());
        want[bucket_of(5_000)] += 2;
        let h = d.snapshot();
        assert_eq!(h.counts(), &want);
        assert_eq!(h.count(), u64::from(INLINE_SAMPLES) + 2);
        let sum: u64 = waits.iter().map(|&ns| ns.min(1 << 50)).sum::<u64>() + 10_000;
        assert_eq!(d.sum_ns(), sum);
        assert_eq!(h.sum(), Duration::from_nanos(sum));
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
