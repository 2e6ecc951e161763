//! A group's global FIFO of runnable tasks, sized to what the group needs.
//!
//! Most groups are small and short-lived (one per connection or per batch): a few tasks are pushed
//! by one thread and taken by one worker. A few groups are hot: one thread or several push into
//! them without pause while several workers take from them (the default group under `Runtime::spawn`
//! from outside, a flood group). The queue serves both with two tiers:
//!
//! - **Cold** (every queue starts here): a `VecDeque` behind a mutex, inline in the group. An idle
//!   group costs no allocation; a busy small one costs one buffer.
//! - **Hot**: a lock-free `ConcurrentQueue`, allocated once the mutex was found contended
//!   [`PROMOTE_AFTER`] times. It needs about 760 bytes in two allocations (one of them 128-byte
//!   aligned), which is why small groups do without it.
//!
//! ## Protocol
//! `hot` goes from null to a queue once (a *promotion*) and then never changes until the queue is
//! dropped. A promotion happens under the cold lock: it moves every cold item into the new queue
//! in order, then publishes the pointer. Every cold push and pop re-reads `hot` under the cold lock
//! and goes to the hot queue if it is set, so once the pointer is published nothing enters the cold
//! tier again and it stays empty: items are taken in push order across a promotion. `close` marks
//! the cold tier and closes the hot queue, both under the cold lock, so no push succeeds after it.
//!
//! loom model: `loom_models/runtime.rs` (`promotion_keeps_order_and_loses_nothing`).

use std::collections::VecDeque;
use std::ptr;

use concurrent_queue::ConcurrentQueue;

use crate::shim::{AtomicPtr, AtomicUsize, Mutex, MutexGuard, Ordering, TryLockError, lock};

/// Moves the first `n` items of `items` to the end of `batch`, item by item (`extend` over a
/// `VecDeque` drain costs about twice as much per item). Out of line: a pick's code, which the
/// worker loop's may take in, keeps a call here.
#[inline(never)]
fn move_front<T>(items: &mut VecDeque<T>, n: usize, batch: &mut Vec<T>) {
    batch.reserve(n);
    for _ in 0..n {
        if let Some(item) = items.pop_front() {
            batch.push(item);
        }
    }
}

/// Contended acquisitions of the cold lock after which the queue is promoted to the hot tier.
pub(crate) const PROMOTE_AFTER: u32 = 4;
/// Capacity reserved by the first cold push: a group's first handful of tasks costs one allocation.
const FIRST_CAPACITY: usize = 16;

/// A multi-producer multi-consumer FIFO that starts as a locked `VecDeque` and promotes itself to a
/// lock-free queue when it is contended (see the module docs).
///
/// Laid out in order: the cold tier, which its users write, then a gap, then the hot pointer, which
/// every push and pop reads once the queue is hot; the group places the queue so that the pointer
/// starts its read-mostly fields.
#[repr(C)]
pub(crate) struct GroupQueue<T> {
    cold: Mutex<Cold<T>>,
    /// The cold tier's length, stored under the cold lock at every change: read without the lock
    /// by [`GroupQueue::len_hint`].
    cold_len: AtomicUsize,
    _gap: [u8; GAP - std::mem::size_of::<AtomicUsize>()],
    /// The hot tier: null, or a queue from `Box::into_raw` that lives until `self` is dropped.
    hot: AtomicPtr<ConcurrentQueue<T>>,
}

/// Bytes that keep the cold tier's lock and items off the hot pointer's cache line, whatever the
/// alignment. The cold length takes the gap's first word: it is written only while the queue is
/// cold, when its pushes and pops take the lock anyway.
const GAP: usize = 64;

struct Cold<T> {
    items: VecDeque<T>,
    closed: bool,
    /// Times a thread found the lock taken.
    contended: u32,
    /// Promote once `contended` reaches this...
    promote_after: u32,
    /// ...or once a push finds this many items queued.
    promote_at_len: usize,
}

impl<T> Default for GroupQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> GroupQueue<T> {
    /// An empty queue in the cold tier; allocates nothing.
    pub(crate) fn new() -> Self {
        Self::with_promotion(PROMOTE_AFTER, usize::MAX)
    }

    /// An empty queue that promotes itself at the push that follows `contended` contended
    /// acquisitions (`0`: at its first push), or at a push that finds `len` items queued. For tests
    /// and models (loom cannot make `try_lock` fail, so its models promote by length); the runtime
    /// uses `(PROMOTE_AFTER, usize::MAX)`.
    pub(crate) fn with_promotion(contended: u32, len: usize) -> Self {
        GroupQueue {
            cold: Mutex::new(Cold {
                items: VecDeque::new(),
                closed: false,
                contended: 0,
                promote_after: contended,
                promote_at_len: len,
            }),
            cold_len: AtomicUsize::new(0),
            _gap: [0; GAP - std::mem::size_of::<AtomicUsize>()],
            hot: AtomicPtr::new(ptr::null_mut()),
        }
    }

    fn hot(&self) -> Option<&ConcurrentQueue<T>> {
        let p = self.hot.load(Ordering::Acquire);
        // SAFETY: `hot` is null or a pointer from `Box::into_raw` that is published once (with
        // Release, read here with Acquire, so the queue is fully initialised) and freed only in
        // `Drop`, which has `&mut self`: the queue outlives the `&self` borrow this ref is tied to.
        unsafe { p.as_ref() }
    }

    /// Locks the cold tier, counting the acquisition if another thread held the lock.
    fn lock_cold(&self) -> MutexGuard<'_, Cold<T>> {
        match self.cold.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let mut guard = lock(&self.cold);
                guard.contended = guard.contended.saturating_add(1);
                guard
            }
        }
    }

    /// Under the cold lock, with `hot` null: moves the cold items into a new hot queue and
    /// publishes it.
    fn promote(&self, cold: &mut Cold<T>) -> &ConcurrentQueue<T> {
        let q = ConcurrentQueue::unbounded();
        for item in cold.items.drain(..) {
            if q.push(item).is_err() {
                unreachable!("a new unbounded queue is open");
            }
        }
        cold.items = VecDeque::new();
        self.cold_len.store(0, Ordering::Relaxed);
        let p = Box::into_raw(Box::new(q));
        self.hot.store(p, Ordering::Release);
        // SAFETY: `p` came from `Box::into_raw` just above and is freed only in `Drop`.
        unsafe { &*p }
    }

    /// Appends `item`; gives it back if the queue was closed.
    pub(crate) fn push(&self, item: T) -> Result<(), T> {
        if let Some(h) = self.hot() {
            return h.push(item).map_err(|e| e.into_inner());
        }
        let mut cold = self.lock_cold();
        if let Some(h) = self.hot() {
            drop(cold);
            return h.push(item).map_err(|e| e.into_inner());
        }
        if cold.closed {
            return Err(item);
        }
        if cold.contended >= cold.promote_after || cold.items.len() >= cold.promote_at_len {
            let h = self.promote(&mut cold);
            let pushed = h.push(item).map_err(|e| e.into_inner());
            drop(cold);
            return pushed;
        }
        if cold.items.capacity() == 0 {
            cold.items.reserve(FIRST_CAPACITY);
        }
        cold.items.push_back(item);
        self.cold_len.store(cold.items.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Takes the oldest item.
    pub(crate) fn pop(&self) -> Option<T> {
        let mut batch = Vec::new();
        self.pop_batch(|_| 1, &mut batch)
    }

    /// Takes up to `count(len)` items at once, where `len` is the queue's length: returns the
    /// oldest and appends the others to `batch`, in order. Returns `None` if the queue is empty,
    /// or if `count` is 0 (the caller looked at the length and declined).
    #[inline]
    pub(crate) fn pop_batch(
        &self,
        count: impl FnOnce(usize) -> usize,
        batch: &mut Vec<T>,
    ) -> Option<T> {
        self.pop_batch_counting(count, batch, false)
            .map(|(first, _)| first)
    }

    /// [`pop_batch`](Self::pop_batch), also returning how many items were left queued just after
    /// (a snapshot, as [`len`](Self::len) would give; read under the same lock in the cold tier).
    #[inline]
    pub(crate) fn take_batch(
        &self,
        count: impl FnOnce(usize) -> usize,
        batch: &mut Vec<T>,
    ) -> Option<(T, usize)> {
        self.pop_batch_counting(count, batch, true)
    }

    /// Both of the above; the count of items left is 0 unless `count_left` (the hot tier's count
    /// reads two contended words, which plain pops do without).
    #[inline]
    fn pop_batch_counting(
        &self,
        count: impl FnOnce(usize) -> usize,
        batch: &mut Vec<T>,
        count_left: bool,
    ) -> Option<(T, usize)> {
        let cold = match self.hot() {
            Some(h) => Err(h),
            None => {
                let cold = self.lock_cold();
                match self.hot() {
                    Some(h) => Err(h),
                    None => Ok(cold),
                }
            }
        };
        let mut cold = match cold {
            Ok(cold) => cold,
            Err(h) => {
                let n = count(h.len());
                if n == 0 {
                    return None;
                }
                let first = pop_batch_hot(h, n, batch)?;
                return Some((first, if count_left { h.len() } else { 0 }));
            }
        };
        let n = count(cold.items.len());
        if n == 0 {
            return None;
        }
        let first = cold.items.pop_front()?;
        let rest = (n.saturating_sub(1)).min(cold.items.len());
        move_front(&mut cold.items, rest, batch);
        let left = cold.items.len();
        self.cold_len.store(left, Ordering::Relaxed);
        Some((first, left))
    }

    /// Items queued now (a snapshot).
    pub(crate) fn len(&self) -> usize {
        if let Some(h) = self.hot() {
            return h.len();
        }
        let cold = lock(&self.cold);
        match self.hot() {
            Some(h) => h.len(),
            None => cold.items.len(),
        }
    }

    /// Items queued now, without taking the cold lock: a snapshot that may miss a push or a pop
    /// still in progress on another thread. For choices that a stale answer only makes worse, never
    /// wrong (which groups to look at); [`len`](Self::len) and [`is_empty`](Self::is_empty) take
    /// part in the listing protocol and stay exact.
    pub(crate) fn len_hint(&self) -> usize {
        match self.hot() {
            Some(h) => h.len(),
            None => self.cold_len.load(Ordering::Relaxed),
        }
    }

    /// True if nothing is queued (a snapshot).
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the queue moved to the hot tier.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_hot(&self) -> bool {
        self.hot().is_some()
    }

    /// Refuses every later push. Items already queued stay and can still be popped.
    pub(crate) fn close(&self) {
        let mut cold = lock(&self.cold);
        cold.closed = true;
        if let Some(h) = self.hot() {
            h.close();
        }
    }
}

/// Pops the oldest item and up to `n - 1` more into `batch`.
fn pop_batch_hot<T>(h: &ConcurrentQueue<T>, n: usize, batch: &mut Vec<T>) -> Option<T> {
    let first = h.pop().ok()?;
    for _ in 1..n {
        match h.pop() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
    Some(first)
}

impl<T> Drop for GroupQueue<T> {
    fn drop(&mut self) {
        let p = self.hot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `p` came from `Box::into_raw` in `promote` and was never freed; with
            // `&mut self` no reference from `hot()` is alive.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn cold_queue_is_fifo_and_batches_in_order() {
        let q = GroupQueue::new();
        for i in 0..40 {
            q.push(i).unwrap();
        }
        assert!(!q.is_hot());
        assert_eq!(q.len(), 40);
        let mut batch = Vec::new();
        assert_eq!(q.pop_batch(|len| len / 2, &mut batch), Some(0));
        assert_eq!(batch, (1..20).collect::<Vec<_>>());
        assert_eq!(q.pop(), Some(20));
        assert_eq!(q.len(), 19);
    }

    /// The scheduler unlists a group by what `take_batch` left, and picks extra groups by
    /// `len_hint`: both must follow every push and pop, in both tiers.
    #[test]
    fn take_batch_counts_what_is_left_and_the_hint_follows_the_queue() {
        for promote_after in [0, u32::MAX] {
            let q = GroupQueue::with_promotion(promote_after, usize::MAX);
            assert_eq!(q.len_hint(), 0);
            for i in 0..5 {
                q.push(i).unwrap();
                assert_eq!(q.len_hint(), i + 1);
            }
            assert_eq!(q.is_hot(), promote_after == 0);
            let mut batch = Vec::new();
            assert_eq!(q.take_batch(|len| len.min(2), &mut batch), Some((0, 3)));
            assert_eq!(batch, vec![1]);
            assert_eq!(q.len_hint(), 3);
            assert_eq!(q.pop(), Some(2));
            assert_eq!(q.len_hint(), 2);
            assert_eq!(q.take_batch(|len| len, &mut batch), Some((3, 0)));
            assert_eq!(q.len_hint(), 0);
            assert_eq!(q.take_batch(|len| len, &mut batch), None);
            // Declining (a count of 0) takes nothing.
            q.push(7).unwrap();
            assert_eq!(q.take_batch(|_| 0, &mut batch), None);
            assert_eq!(q.pop_batch(|_| 0, &mut batch), None);
            assert_eq!(q.len_hint(), 1);
            assert_eq!(q.pop(), Some(7));
        }
        // A promotion moves the cold items out: the cold count goes to zero with them.
        let q = GroupQueue::with_promotion(1, usize::MAX);
        q.push(0).unwrap();
        lock(&q.cold).contended = 1;
        q.push(1).unwrap();
        assert!(q.is_hot());
        assert_eq!(q.cold_len.load(Ordering::Relaxed), 0);
        assert_eq!(q.len_hint(), 2);
    }

    #[test]
    fn promotion_keeps_queued_items_in_order() {
        let q = GroupQueue::with_promotion(1, usize::MAX);
        for i in 0..5 {
            q.push(i).unwrap();
        }
        assert!(!q.is_hot());
        // As if another thread had held the lock once.
        lock(&q.cold).contended = 1;
        q.push(5).unwrap();
        assert!(q.is_hot());
        q.push(6).unwrap();
        assert_eq!(q.len(), 7);
        let mut batch = Vec::new();
        assert_eq!(q.pop_batch(|_| 10, &mut batch), Some(0));
        assert_eq!(batch, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn close_refuses_pushes_in_both_tiers_and_keeps_queued_items() {
        for promote_after in [0, u32::MAX] {
            let q = GroupQueue::with_promotion(promote_after, usize::MAX);
            q.push(1).unwrap();
            q.close();
            assert_eq!(q.push(2), Err(2));
            assert_eq!(q.pop(), Some(1));
            assert_eq!(q.pop(), None);
        }
    }

    #[test]
    fn dropping_the_queue_drops_its_items() {
        for promote_after in [0, u32::MAX] {
            let item = Arc::new(());
            let q = GroupQueue::with_promotion(promote_after, usize::MAX);
            q.push(item.clone()).unwrap();
            q.push(item.clone()).unwrap();
            drop(q);
            assert_eq!(Arc::strong_count(&item), 1);
        }
    }

    /// Four pushers and two poppers hammer one queue, which promotes itself at its first
    /// contended acquisition (when that happens is up to the machine; the loom model covers every
    /// interleaving): nothing is lost, and every pusher's items come out in the order it pushed.
    #[test]
    fn contention_promotes_without_loss_or_reordering() {
        const PER: u64 = 50_000;
        let q = Arc::new(GroupQueue::with_promotion(1, usize::MAX));
        let start = Arc::new(std::sync::Barrier::new(6));
        let pushers: Vec<_> = (0..4u64)
            .map(|p| {
                let q = q.clone();
                let start = start.clone();
                thread::spawn(move || {
                    start.wait();
                    for i in 0..PER {
                        q.push((p, i)).unwrap();
                    }
                })
            })
            .collect();
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                let start = start.clone();
                thread::spawn(move || {
                    start.wait();
                    let mut last = [None::<u64>; 4];
                    let mut got = 0u64;
                    let mut batch = Vec::new();
                    let mut idle_rounds = 0;
                    while idle_rounds < 1_000_000 {
                        match q.pop_batch(|len| len / 2 + 1, &mut batch) {
                            Some(first) => {
                                idle_rounds = 0;
                                for (p, i) in std::iter::once(first).chain(batch.drain(..)) {
                                    let slot = &mut last[p as usize];
                                    assert!(slot.is_none_or(|l| l < i), "pusher {p} reordered");
                                    *slot = Some(i);
                                    got += 1;
                                }
                            }
                            None => {
                                idle_rounds += 1;
                                thread::yield_now();
                            }
                        }
                    }
                    got
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        let popped: u64 = poppers.into_iter().map(|p| p.join().unwrap()).sum();
        let mut rest = 0;
        while q.pop().is_some() {
            rest += 1;
        }
        assert_eq!(popped + rest, 4 * PER);
    }
}
