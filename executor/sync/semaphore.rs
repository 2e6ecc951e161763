//! [`Semaphore`]: an async counting semaphore with a FIFO line, `acquire_many` and `close`.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::sync::Arc;

use super::waiters::{Status, WaitList, WakeList};
use crate::shim::{AtomicUsize, Mutex, Ordering, lock};

/// Bit 0: the semaphore is closed.
const CLOSED: usize = 1;
/// Bit 1: the FIFO line is non-empty; acquires and releases go through the internal mutex.
const QUEUED: usize = 2;
/// Bits 2..: available permits.
const SHIFT: u32 = 2;

const NOT_QUEUED: usize = usize::MAX;

/// An async counting semaphore.
///
/// * Uncontended acquires complete on their first poll with one atomic CAS, no allocation.
/// * Waiters form one FIFO line and are served strictly in order: an `acquire_many(5)` at the head is
///   never overtaken by later `acquire(1)` calls, and while anyone waits a newcomer queues (and
///   `try_acquire` fails) even if permits are free.
/// * Released permits are handed directly to the waiters they satisfy: N single releases wake N
///   waiters, each exactly once.
/// * [`close`](Self::close) fails every waiting and future acquire with [`AcquireError`].
/// * Dropping a pending acquire future never loses permits or a wakeup.
///
/// A future polled once and then neither polled nor dropped while at the head of the line blocks
/// everyone behind it: inherent to direct hand-off.
pub struct Semaphore {
    state: AtomicUsize,
    line: Mutex<WaitList<usize>>,
}

/// Error from [`Semaphore::acquire`] and friends: the semaphore was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireError(());

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("semaphore closed")
    }
}

impl std::error::Error for AcquireError {}

/// Error from [`Semaphore::try_acquire`] and [`Semaphore::try_acquire_many`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryAcquireError {
    /// Not enough permits are free right now, or others are waiting in line.
    NoPermits,
    /// The semaphore was closed.
    Closed,
}

impl fmt::Display for TryAcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryAcquireError::NoPermits => f.write_str("no permits available"),
            TryAcquireError::Closed => f.write_str("semaphore closed"),
        }
    }
}

impl std::error::Error for TryAcquireError {}

#[cold]
#[inline(never)]
fn too_many(what: &str, n: usize) -> ! {
    panic!(
        "Semaphore::{what}: {n} permits is more than Semaphore::MAX_PERMITS ({})",
        Semaphore::MAX_PERMITS
    )
}

impl Semaphore {
    /// The most permits a semaphore can hold (`usize::MAX >> 3`).
    pub const MAX_PERMITS: usize = usize::MAX >> 3;

    /// Creates a semaphore with `permits` permits.
    ///
    /// This is a `const fn`, except under `--cfg loom`, where it is an ordinary `fn`.
    ///
    /// # Panics
    ///
    /// If `permits > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// use rondo::sync::Semaphore;
    /// static LIMIT: Semaphore = Semaphore::new(3);
    /// assert_eq!(LIMIT.available_permits(), 3);
    /// ```
    #[cfg(not(loom))]
    pub const fn new(permits: usize) -> Self {
        assert!(
            permits <= Self::MAX_PERMITS,
            "Semaphore::new: more than Semaphore::MAX_PERMITS permits"
        );
        Semaphore {
            state: AtomicUsize::new(permits << SHIFT),
            line: Mutex::new(WaitList::new()),
        }
    }

    /// Creates a semaphore with `permits` permits (not `const` under `--cfg loom`).
    #[cfg(loom)]
    pub fn new(permits: usize) -> Self {
        assert!(
            permits <= Self::MAX_PERMITS,
            "Semaphore::new: more than Semaphore::MAX_PERMITS permits"
        );
        Semaphore {
            state: AtomicUsize::new(permits << SHIFT),
            line: Mutex::new(WaitList::new()),
        }
    }

    /// Waits for one permit. Fails only if the semaphore is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future before it completes removes it from the line; permits already
    /// handed to it are returned and passed on to the next waiters. The place in line is lost.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(1);
    /// futures::executor::block_on(async {
    ///     let permit = sem.acquire().await.unwrap();
    ///     assert_eq!(sem.available_permits(), 0);
    ///     drop(permit);
    ///     assert_eq!(sem.available_permits(), 1);
    /// });
    /// ```
    pub async fn acquire(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        match self.try_acquire_many(1) {
            Ok(permit) => Ok(permit),
            Err(TryAcquireError::Closed) => Err(AcquireError(())),
            Err(TryAcquireError::NoPermits) => {
                SemWait::new(self, 1).await?;
                Ok(SemaphorePermit { sem: self, n: 1 })
            }
        }
    }

    /// Waits for `n` permits at once. Fails only if the semaphore is closed. `n == 0` completes at
    /// once (unless closed).
    ///
    /// The request waits in the FIFO line as one unit: while it is at the head, no later request takes
    /// permits ahead of it, however small.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS` (such a request could never be satisfied).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire); waiters behind a cancelled request are served at
    /// once if the free permits now cover them.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(5);
    /// futures::executor::block_on(async {
    ///     let permit = sem.acquire_many(3).await.unwrap();
    ///     assert_eq!(permit.count(), 3);
    ///     assert_eq!(sem.available_permits(), 2);
    /// });
    /// ```
    pub async fn acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, AcquireError> {
        match self.try_acquire_many(n) {
            Ok(permit) => Ok(permit),
            Err(TryAcquireError::Closed) => Err(AcquireError(())),
            Err(TryAcquireError::NoPermits) => {
                SemWait::new(self, n).await?;
                Ok(SemaphorePermit { sem: self, n })
            }
        }
    }

    /// Takes one permit if one is free and nobody waits.
    ///
    /// ```
    /// use rondo::sync::{Semaphore, TryAcquireError};
    /// let sem = Semaphore::new(1);
    /// let p = sem.try_acquire().unwrap();
    /// assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    /// drop(p);
    /// sem.close();
    /// assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
    /// ```
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.try_acquire_many(1)
    }

    /// Takes `n` permits if they are free and nobody waits.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(4);
    /// let p = sem.try_acquire_many(3).unwrap();
    /// assert!(sem.try_acquire_many(2).is_err());
    /// assert_eq!(p.count(), 3);
    /// ```
    #[inline]
    pub fn try_acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        if n > Self::MAX_PERMITS {
            too_many("acquire_many", n);
        }
        let take = n << SHIFT;
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & CLOSED != 0 {
                return Err(TryAcquireError::Closed);
            }
            // `n == 0` takes nothing from anyone, so it need not wait its turn.
            if (s & QUEUED != 0 && n != 0) || s < take {
                return Err(TryAcquireError::NoPermits);
            }
            match self.state.compare_exchange_weak(
                s,
                s - take,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(SemaphorePermit { sem: self, n }),
                Err(actual) => s = actual,
            }
        }
    }

    /// Like [`acquire`](Self::acquire), returning a permit that owns an `Arc` of the semaphore.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(1));
    /// let permit = futures::executor::block_on(sem.acquire_arc()).unwrap();
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub async fn acquire_arc(self: &Arc<Self>) -> Result<SemaphorePermitArc, AcquireError> {
        self.acquire_many_arc(1).await
    }

    /// Like [`acquire_many`](Self::acquire_many), returning a permit that owns an `Arc` of the
    /// semaphore.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire_many`](Self::acquire_many).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(3));
    /// let permit = futures::executor::block_on(sem.acquire_many_arc(2)).unwrap();
    /// assert_eq!((permit.count(), sem.available_permits()), (2, 1));
    /// ```
    pub async fn acquire_many_arc(
        self: &Arc<Self>,
        n: usize,
    ) -> Result<SemaphorePermitArc, AcquireError> {
        let permit = self.acquire_many(n).await?;
        let n = permit.count();
        core::mem::forget(permit);
        Ok(SemaphorePermitArc {
            sem: Arc::clone(self),
            n,
        })
    }

    /// Blocks the current thread until a permit is free. For synchronous code; do not call it on an
    /// async runtime's worker thread.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(1);
    /// let p = sem.acquire_blocking().unwrap();
    /// assert_eq!(p.count(), 1);
    /// ```
    pub fn acquire_blocking(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        match self.try_acquire() {
            Ok(p) => Ok(p),
            Err(TryAcquireError::Closed) => Err(AcquireError(())),
            Err(TryAcquireError::NoPermits) => futures_lite::future::block_on(self.acquire()),
        }
    }

    /// Adds `n` permits, waking every waiter they satisfy (in line order).
    ///
    /// # Panics
    ///
    /// If the free permits would exceed `Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(0);
    /// sem.add_permits(2);
    /// assert_eq!(sem.available_permits(), 2);
    /// ```
    pub fn add_permits(&self, n: usize) {
        self.release(n, false);
    }

    /// The number of permits free right now.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(2);
    /// let _p = sem.try_acquire().unwrap();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn available_permits(&self) -> usize {
        self.state.load(Ordering::Acquire) >> SHIFT
    }

    /// Closes the semaphore: every waiting acquire completes with [`AcquireError`], and so does every
    /// later one (`try_*` return [`TryAcquireError::Closed`]). Permits already held stay valid and are
    /// returned on drop as usual. A waiter that had already been handed its permits before the close
    /// keeps them.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(0);
    /// sem.close();
    /// assert!(sem.is_closed());
    /// assert!(futures::executor::block_on(sem.acquire()).is_err());
    /// ```
    pub fn close(&self) {
        let mut line = lock(&self.line);
        self.state.fetch_or(CLOSED, Ordering::AcqRel);
        let mut wakers = WakeList::new();
        line.close_all(&mut wakers);
        self.state.fetch_and(!QUEUED, Ordering::AcqRel);
        drop(line);
        wakers.wake_all();
    }

    /// Whether [`close`](Self::close) was called.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(1);
    /// assert!(!sem.is_closed());
    /// sem.close();
    /// assert!(sem.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Returns `n` permits with one atomic add. With `saturate`, the free count is clamped at
    /// `MAX_PERMITS` (permit drops must not panic); otherwise exceeding it panics.
    ///
    /// The add happens even while waiters queue: the permits then sit in the state word until the
    /// slow path, under the mutex, hands them to the head of the line. No fast path can take them
    /// meanwhile, because `QUEUED` is set.
    #[inline]
    fn release(&self, n: usize, saturate: bool) {
        if n == 0 {
            return;
        }
        if n > Self::MAX_PERMITS {
            too_many("add_permits", n);
        }
        // No wrap-around: free <= MAX_PERMITS and n <= MAX_PERMITS, and the field holds 2 * MAX_PERMITS.
        let prev = self.state.fetch_add(n << SHIFT, Ordering::AcqRel);
        if (prev >> SHIFT) + n > Self::MAX_PERMITS {
            self.clamp(n, saturate);
        }
        if prev & QUEUED != 0 {
            self.release_slow();
        }
    }

    /// Brings the free count back to at most `MAX_PERMITS` after an add overshot it.
    #[cold]
    fn clamp(&self, n: usize, saturate: bool) {
        if !saturate {
            self.state.fetch_sub(n << SHIFT, Ordering::AcqRel);
            too_many("add_permits", n);
        }
        let mut s = self.state.load(Ordering::Relaxed);
        while s >> SHIFT > Self::MAX_PERMITS {
            let new = (Self::MAX_PERMITS << SHIFT) | (s & (CLOSED | QUEUED));
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
    }

    /// `s` with `n` more free permits, clamped at `MAX_PERMITS`.
    fn add_saturating(s: usize, n: usize) -> usize {
        let total = (s >> SHIFT).saturating_add(n).min(Self::MAX_PERMITS);
        (total << SHIFT) | (s & (CLOSED | QUEUED))
    }

    #[cold]
    fn release_slow(&self) {
        let mut line = lock(&self.line);
        let wakers = self.dispatch(&mut line);
        drop(line);
        wakers.wake_all();
    }

    /// Hands free permits to the head of the line for as long as they cover its request; clears
    /// `QUEUED` when the line empties. Mutex held; returns the wakers to call after unlocking.
    fn dispatch(&self, line: &mut WaitList<usize>) -> WakeList {
        let mut wakers = WakeList::new();
        loop {
            let Some(n) = line.head() else {
                self.state.fetch_and(!QUEUED, Ordering::AcqRel);
                break;
            };
            // With `QUEUED` set every acquire runs under the mutex we hold; releases outside it only
            // add permits, so the permits seen here are still there for the subtraction.
            let s = self.state.load(Ordering::Acquire);
            if s >> SHIFT < n {
                break;
            }
            self.state.fetch_sub(n << SHIFT, Ordering::AcqRel);
            line.finish_head(Status::Granted, &mut wakers);
        }
        wakers
    }

    /// First slow-path attempt: takes the permits under the mutex if nobody waits and they are free,
    /// otherwise joins the line. `Ok(None)`: acquired; `Ok(Some(key))`: queued.
    fn acquire_or_enqueue(&self, n: usize, waker: &Waker) -> Result<Option<usize>, AcquireError> {
        let mut line = lock(&self.line);
        let take = n << SHIFT;
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & CLOSED != 0 {
                return Err(AcquireError(()));
            }
            if s & QUEUED != 0 {
                break;
            }
            let free = s >= take;
            let new = if free { s - take } else { s | QUEUED };
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) if free => return Ok(None),
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
        Ok(Some(line.push_back(n, waker.clone())))
    }

    fn poll_waiting(&self, key: usize, waker: &Waker) -> Poll<Result<(), AcquireError>> {
        let mut line = lock(&self.line);
        match line.poll(key, waker) {
            Status::Waiting => Poll::Pending,
            Status::Granted => Poll::Ready(Ok(())),
            Status::Closed => Poll::Ready(Err(AcquireError(()))),
            Status::Overflow => unreachable!("semaphore waiters never overflow"),
        }
    }

    fn cancel(&self, key: usize) {
        let mut line = lock(&self.line);
        let (status, n) = line.remove(key);
        if status == Status::Granted {
            // Permits never exceed MAX_PERMITS in total unless `add_permits` was misused; clamp.
            let mut s = self.state.load(Ordering::Relaxed);
            loop {
                let new = Self::add_saturating(s, n);
                match self
                    .state
                    .compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(actual) => s = actual,
                }
            }
        }
        let wakers = self.dispatch(&mut line);
        drop(line);
        wakers.wake_all();
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("available_permits", &self.available_permits())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// The slow-path future of an acquire: waits in line for `n` permits.
struct SemWait<'a> {
    sem: &'a Semaphore,
    n: usize,
    key: usize,
}

impl<'a> SemWait<'a> {
    fn new(sem: &'a Semaphore, n: usize) -> Self {
        SemWait {
            sem,
            n,
            key: NOT_QUEUED,
        }
    }
}

impl Future for SemWait<'_> {
    type Output = Result<(), AcquireError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.key == NOT_QUEUED {
            match self.sem.acquire_or_enqueue(self.n, cx.waker()) {
                Ok(None) => Poll::Ready(Ok(())),
                Ok(Some(key)) => {
                    self.key = key;
                    Poll::Pending
                }
                Err(e) => Poll::Ready(Err(e)),
            }
        } else {
            let ready = self.sem.poll_waiting(self.key, cx.waker());
            if ready.is_ready() {
                self.key = NOT_QUEUED;
            }
            ready
        }
    }
}

impl Drop for SemWait<'_> {
    fn drop(&mut self) {
        if self.key != NOT_QUEUED {
            self.sem.cancel(self.key);
        }
    }
}

/// Permits taken from a [`Semaphore`]; returned on drop.
#[must_use = "the permits are returned as soon as the permit is dropped"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
    n: usize,
}

impl SemaphorePermit<'_> {
    /// Keeps the permits out of the semaphore for good: its capacity shrinks by [`count`](Self::count).
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(2);
    /// sem.try_acquire().unwrap().forget();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn forget(mut self) {
        self.n = 0;
    }

    /// How many permits this holds.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(2);
    /// assert_eq!(sem.try_acquire_many(2).unwrap().count(), 2);
    /// ```
    pub fn count(&self) -> usize {
        self.n
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.sem.release(self.n, true);
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("count", &self.n)
            .finish_non_exhaustive()
    }
}

/// Permits owning an `Arc` of their [`Semaphore`]; returned on drop.
#[must_use = "the permits are returned as soon as the permit is dropped"]
pub struct SemaphorePermitArc {
    sem: Arc<Semaphore>,
    n: usize,
}

impl SemaphorePermitArc {
    /// Keeps the permits out of the semaphore for good.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(2));
    /// futures::executor::block_on(sem.acquire_arc()).unwrap().forget();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn forget(mut self) {
        self.n = 0;
    }

    /// How many permits this holds.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(2));
    /// assert_eq!(futures::executor::block_on(sem.acquire_arc()).unwrap().count(), 1);
    /// ```
    pub fn count(&self) -> usize {
        self.n
    }
}

impl Drop for SemaphorePermitArc {
    fn drop(&mut self) {
        self.sem.release(self.n, true);
    }
}

impl fmt::Debug for SemaphorePermitArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermitArc")
            .field("count", &self.n)
            .finish_non_exhaustive()
    }
}
