//! A core's parker: where the thread running a core sleeps while the core has nothing to do.
//!
//! It belongs to the core, not to a thread, because cores move between threads: whoever wakes a
//! parked core unparks this, whichever thread is waiting in it. The waker sets its flag (shutdown,
//! a notification), then the token (SeqCst); the sleeper checks the flags, then consumes the
//! token or registers itself as parked under the lock before it waits, and a waker that finds it
//! registered takes the same lock before it signals. An unpark that comes before the wait is never
//! lost (loom model: `tests/loom_runtime.rs`, `shutdown_never_misses_a_parking_core`).

use std::time::Duration;

use crate::shim::{AtomicUsize, Condvar, Mutex, Ordering, lock};

const EMPTY: usize = 0;
const PARKED: usize = 1;
const NOTIFIED: usize = 2;

/// See the module docs. The state word lets `unpark` skip the lock and the condition variable's
/// system call when nobody sleeps (the common case: the woken core has not parked yet, or is
/// awake already).
pub struct Parker {
    state: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Default for Parker {
    fn default() -> Self {
        Self::new()
    }
}

impl Parker {
    /// A parker with no token.
    pub fn new() -> Self {
        Parker {
            state: AtomicUsize::new(EMPTY),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Blocks until the token is set, then consumes it.
    pub fn park(&self) {
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

    /// Sets the token and wakes the sleeper, if any.
    pub fn unpark(&self) {
        if self.state.swap(NOTIFIED, Ordering::SeqCst) != PARKED {
            return;
        }
        // The sleeper set PARKED under the lock and waits on the condition variable: taking the
        // lock here means it is waiting (or about to re-check the state), so the notification
        // cannot fall between its check and its wait.
        drop(lock(&self.lock));
        self.cv.notify_one();
    }
}
