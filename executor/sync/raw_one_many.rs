//! The untyped core of [`AsyncOneManyLock`](super::AsyncOneManyLock): the state word, the FIFO line
//! and the hand-off rules. Kept free of `T` so it is compiled once, not once per protected type.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use super::waiters::{Status, WaitList, WakeList};
use crate::shim::{AtomicUsize, Mutex, Ordering, lock};

use super::OneManyMode;

/// Bit 0: a writer holds the lock.
const WRITER: usize = 1;
/// Bit 1: the FIFO line is non-empty; every acquire must go through the internal mutex.
const QUEUED: usize = 2;
/// Bits 2..: the number of readers holding the lock.
const ONE_READER: usize = 4;
const READERS: usize = !(WRITER | QUEUED);

/// The most readers that may hold the lock at once. Bits above stay clear, so a detected overflow
/// can never wrap into the flag bits.
pub(crate) const MAX_READERS: usize = usize::MAX >> 3;

/// Key value meaning "this future is not in the line".
const NOT_QUEUED: usize = usize::MAX;

#[cold]
#[inline(never)]
fn reader_overflow() -> ! {
    panic!(
        "AsyncOneManyLock: reader count overflow (more than {MAX_READERS} shared guards alive or forgotten)"
    )
}

pub(crate) struct RawOneMany {
    state: AtomicUsize,
    line: Mutex<WaitList<OneManyMode>>,
}

impl RawOneMany {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        RawOneMany {
            state: AtomicUsize::new(0),
            line: Mutex::new(WaitList::new()),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        RawOneMany {
            state: AtomicUsize::new(0),
            line: Mutex::new(WaitList::new()),
        }
    }

    /// Fast path for a shared hold: one CAS when the lock is free (the first guess is "free").
    #[inline]
    pub(crate) fn try_shared(&self) -> bool {
        let mut s = 0;
        loop {
            match self.state.compare_exchange_weak(
                s,
                s + ONE_READER,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => {
                    if actual & (WRITER | QUEUED) != 0 {
                        return false;
                    }
                    if actual >> 2 >= MAX_READERS {
                        reader_overflow();
                    }
                    s = actual;
                }
            }
        }
    }

    /// Fast path for an exclusive hold: one CAS from "free".
    #[inline]
    pub(crate) fn try_exclusive(&self) -> bool {
        self.state
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    pub(crate) fn release_shared(&self) {
        // AcqRel: the last reader out must see every other reader's accesses before it hands the lock
        // to a writer under the mutex.
        let prev = self.state.fetch_sub(ONE_READER, Ordering::AcqRel);
        debug_assert!(prev >> 2 >= 1 && prev & WRITER == 0);
        if prev == ONE_READER | QUEUED {
            self.release_slow(|_| {});
        }
    }

    #[inline]
    pub(crate) fn release_exclusive(&self) {
        // One RMW: clear the writer bit. If someone waits (`QUEUED`), the lock now reads "free but
        // queued", which no fast path can take, and the hand-off runs under the mutex.
        let prev = self.state.fetch_sub(WRITER, Ordering::AcqRel);
        debug_assert!(prev & WRITER != 0);
        if prev != WRITER {
            self.release_slow(|_| {});
        }
    }

    /// Turns the caller's exclusive hold into a shared one without ever letting the lock be free, so
    /// no writer can slip in between.
    pub(crate) fn downgrade(&self) {
        if self
            .state
            .compare_exchange(WRITER, ONE_READER, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.release_slow(|state| {
                // WRITER -> ONE_READER in one step.
                state.fetch_add(ONE_READER - WRITER, Ordering::AcqRel);
            });
        }
    }

    /// Applies `change` to the state under the mutex, then hands the lock to whoever at the head of
    /// the line can now have it, and wakes them after unlocking.
    #[cold]
    fn release_slow(&self, change: impl FnOnce(&AtomicUsize)) {
        let mut line = lock(&self.line);
        change(&self.state);
        let wakers = self.dispatch(&mut line);
        drop(line);
        wakers.wake_all();
    }

    /// Grants the lock to the head of the line for as long as the head can have it: one writer when
    /// the lock is free, or every reader up to the next waiting writer while no writer holds it.
    /// Clears `QUEUED` when the line empties. Must be called with the mutex held; returns the wakers to
    /// call after unlocking.
    fn dispatch(&self, line: &mut WaitList<OneManyMode>) -> WakeList {
        let mut wakers = WakeList::new();
        loop {
            match line.head() {
                None => {
                    self.state.fetch_and(!QUEUED, Ordering::AcqRel);
                    break;
                }
                Some(OneManyMode::Exclusive) => {
                    let s = self.state.load(Ordering::Acquire);
                    if s & (WRITER | READERS) != 0 {
                        break;
                    }
                    // Nobody holds the lock and `QUEUED` stops every fast path: no one else can
                    // change the state now.
                    self.state.fetch_or(WRITER, Ordering::AcqRel);
                    line.finish_head(Status::Granted, &mut wakers);
                }
                Some(OneManyMode::Shared) => {
                    let s = self.state.load(Ordering::Acquire);
                    if s & WRITER != 0 {
                        break;
                    }
                    if s >> 2 >= MAX_READERS {
                        // The waiter's own poll panics; the line moves on.
                        line.finish_head(Status::Overflow, &mut wakers);
                        continue;
                    }
                    self.state.fetch_add(ONE_READER, Ordering::AcqRel);
                    line.finish_head(Status::Granted, &mut wakers);
                }
            }
        }
        wakers
    }

    /// First slow-path attempt: acquires under the mutex if the lock is compatible and nobody waits,
    /// otherwise joins the line. Returns the line key, or `None` if the lock was acquired.
    fn acquire_or_enqueue(&self, mode: OneManyMode, waker: &Waker) -> Option<usize> {
        let mut line = lock(&self.line);
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & QUEUED != 0 {
                break;
            }
            let (free, add) = match mode {
                OneManyMode::Shared => (s & WRITER == 0, ONE_READER),
                OneManyMode::Exclusive => (s == 0, WRITER),
            };
            let result = if free {
                if mode == OneManyMode::Shared && s >> 2 >= MAX_READERS {
                    drop(line);
                    reader_overflow();
                }
                self.state
                    .compare_exchange_weak(s, s + add, Ordering::Acquire, Ordering::Relaxed)
            } else {
                // Publishing `QUEUED` while the lock is busy makes its holder's release take the slow
                // path, which needs this mutex and so sees our node.
                self.state.compare_exchange_weak(
                    s,
                    s | QUEUED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
            };
            match result {
                Ok(_) if free => return None,
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
        Some(line.push_back(mode, waker.clone()))
    }

    fn poll_waiting(&self, key: usize, waker: &Waker) -> Poll<()> {
        let mut line = lock(&self.line);
        match line.poll(key, waker) {
            Status::Waiting => Poll::Pending,
            Status::Granted => Poll::Ready(()),
            Status::Overflow => {
                drop(line);
                reader_overflow()
            }
            Status::Closed => unreachable!("AsyncOneManyLock is never closed"),
        }
    }

    /// A waiting future was dropped: leave the line, give back a grant that raced the drop, and let
    /// whoever that unblocks in (e.g. readers queued behind a cancelled writer).
    fn cancel(&self, key: usize) {
        let mut line = lock(&self.line);
        let (status, mode) = line.remove(key);
        if status == Status::Granted {
            match mode {
                OneManyMode::Shared => self.state.fetch_sub(ONE_READER, Ordering::AcqRel),
                OneManyMode::Exclusive => self.state.fetch_and(!WRITER, Ordering::AcqRel),
            };
        }
        let wakers = self.dispatch(&mut line);
        drop(line);
        wakers.wake_all();
    }
}

/// The slow-path future: waits in the line until the lock is granted in `mode`.
///
/// Dropping it before completion leaves the line (and passes on a grant that already arrived).
pub(crate) struct Wait<'a> {
    raw: &'a RawOneMany,
    mode: OneManyMode,
    key: usize,
}

impl<'a> Wait<'a> {
    pub(crate) fn new(raw: &'a RawOneMany, mode: OneManyMode) -> Self {
        Wait {
            raw,
            mode,
            key: NOT_QUEUED,
        }
    }
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.key == NOT_QUEUED {
            match self.raw.acquire_or_enqueue(self.mode, cx.waker()) {
                None => Poll::Ready(()),
                Some(key) => {
                    self.key = key;
                    Poll::Pending
                }
            }
        } else {
            let ready = self.raw.poll_waiting(self.key, cx.waker());
            if ready.is_ready() {
                self.key = NOT_QUEUED;
            }
            ready
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.key != NOT_QUEUED {
            self.raw.cancel(self.key);
        }
    }
}
