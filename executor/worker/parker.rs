//! A core's parker: where the thread running a core sleeps while the core has nothing to do.
//!
//! It belongs to the core, not to a thread, because cores move between threads: whoever wakes a
//! parked core unparks this, whichever thread is waiting in it. The waker sets its flag (shutdown,
//! a notification), then the token (SeqCst); the sleeper checks the flags, then consumes the
//! token or registers itself as parked under the lock before it waits, and a waker that finds it
//! registered takes the same lock before it signals. An unpark that comes before the wait is never
//! lost (loom model: `loom_models/runtime.rs`, `shutdown_never_misses_a_parking_core`).
//!
//! # Waiting through a waker
//! A core that sleeps in the I/O reactor does not block here: it waits inside
//! `async_io::block_on`, which parks in the reactor while the future it polls is pending. So the
//! parker has a second mode, [`Parker::poll_park`]: the sleeper stores the block_on waker in the
//! slot under the lock and sets the state to `WAITING` (still under the lock), then returns
//! `Pending`. `unpark` swaps in the token; if it replaced `WAITING`, it takes the waker out under
//! the lock and wakes it after releasing the lock (a waker may run arbitrary code: the reactor's
//! notification). The sleeper registers under the lock and the waker takes under the lock, so a
//! token set before the registration is seen by the registration's compare-exchange, and one set
//! after finds the waker (loom model: `loom_models/runtime.rs`,
//! `an_unpark_always_wakes_a_waiting_core`).
//! When the sleeper stops waiting for another reason (its timer), [`Parker::cancel_wait`] takes the
//! waker back and consumes any token, as `park_timeout` does.

use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::shim::{AtomicUsize, Condvar, Mutex, Ordering, lock};

const EMPTY: usize = 0;
const PARKED: usize = 1;
const NOTIFIED: usize = 2;
/// A waker is registered in the slot (see the module docs).
const WAITING: usize = 3;

/// See the module docs. The state word lets `unpark` skip the lock and the condition variable's
/// system call when nobody sleeps (the common case: the woken core has not parked yet, or is
/// awake already).
pub(crate) struct Parker {
    state: AtomicUsize,
    /// The waker of a sleeper that waits through [`Parker::poll_park`].
    lock: Mutex<Option<Waker>>,
    cv: Condvar,
}

impl Default for Parker {
    fn default() -> Self {
        Self::new()
    }
}

impl Parker {
    /// A parker with no token.
    pub(crate) fn new() -> Self {
        Parker {
            state: AtomicUsize::new(EMPTY),
            lock: Mutex::new(None),
            cv: Condvar::new(),
        }
    }

    /// Blocks until the token is set, then consumes it.
    pub(crate) fn park(&self) {
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
        let mut g = lock(&self.lock);
        if let Err(actual) =
            self.state
                .compare_exchange(EMPTY, PARKED, Ordering::SeqCst, Ordering::SeqCst)
        {
            // The token arrived between the first check and the lock.
            debug_assert_eq!(actual, NOTIFIED);
            self.state.store(EMPTY, Ordering::SeqCst);
            return;
        }
        loop {
            g = match self.cv.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if self
                .state
                .compare_exchange(NOTIFIED, EMPTY, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Blocks until the token is set or `timeout` passes; consumes the token if it was set.
    pub(crate) fn park_timeout(&self, timeout: Duration) {
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
        let g = lock(&self.lock);
        if self
            .state
            .compare_exchange(EMPTY, PARKED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.state.store(EMPTY, Ordering::SeqCst);
            return;
        }
        let _g = match self.cv.wait_timeout(g, timeout) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
        // Woken, timed out, or spuriously: either way the token (if any) is consumed.
        self.state.store(EMPTY, Ordering::SeqCst);
    }

    /// Consumes the token if it is set; otherwise registers `cx`'s waker, which the next
    /// `unpark` wakes, and returns `Pending`. After `Pending`, the caller either polls again
    /// (woken or not) or calls [`Parker::cancel_wait`].
    #[cfg_attr(
        not(any(all(test, loom), all(feature = "io", not(loom), not(miri)))),
        allow(dead_code)
    )]
    pub(crate) fn poll_park(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return Poll::Ready(());
        }
        let mut slot = lock(&self.lock);
        match self
            .state
            .compare_exchange(EMPTY, WAITING, Ordering::SeqCst, Ordering::SeqCst)
        {
            // Registered now, or still registered from the previous poll: only the waker may
            // have changed.
            Ok(_) | Err(WAITING) => {
                let old = match &mut *slot {
                    Some(w) if w.will_wake(cx.waker()) => None,
                    s => s.replace(cx.waker().clone()),
                };
                drop(slot);
                drop(old);
                Poll::Pending
            }
            Err(actual) => {
                // The token arrived between the first check and the lock.
                debug_assert_eq!(actual, NOTIFIED);
                self.state.store(EMPTY, Ordering::SeqCst);
                let old = slot.take();
                drop(slot);
                drop(old);
                Poll::Ready(())
            }
        }
    }

    /// The sleeper of [`Parker::poll_park`] stops waiting for another reason: takes its waker
    /// back and consumes the token, if any (the caller re-checks every reason to wake anyway).
    #[cfg_attr(
        not(any(all(test, loom), all(feature = "io", not(loom), not(miri)))),
        allow(dead_code)
    )]
    pub(crate) fn cancel_wait(&self) {
        let mut slot = lock(&self.lock);
        // A read-modify-write: if it consumes a token, it synchronises with the unparker, so the
        // caller's re-check sees the flag that unparker set first.
        self.state.swap(EMPTY, Ordering::SeqCst);
        let old = slot.take();
        drop(slot);
        drop(old);
    }

    /// Sets the token and wakes the sleeper, if any.
    pub(crate) fn unpark(&self) {
        match self.state.swap(NOTIFIED, Ordering::SeqCst) {
            PARKED => {
                // The sleeper set PARKED under the lock and waits on the condition variable:
                // taking the lock here means it is waiting (or about to re-check the state), so
                // the notification cannot fall between its check and its wait.
                drop(lock(&self.lock));
                self.cv.notify_one();
            }
            WAITING => {
                // The waker is woken after the lock is released (see the module docs). It may be
                // gone already: the sleeper cancelled its wait, or another unpark took it.
                let waker = lock(&self.lock).take();
                if let Some(w) = waker {
                    w.wake();
                }
            }
            _ => {}
        }
    }
}
