//! A core's parker: where the thread running a core sleeps while the core has nothing to do.
//!
//! It belongs to the core, not to a thread, because cores move between threads: whoever wakes a
//! parked core unparks this, whichever thread is waiting in it. A token behind a mutex makes it a
//! proper Dekker pair with any flag the waker sets first (shutdown, a notification): the waker sets
//! its flag, then the token under the lock; the sleeper checks the flags, then waits on the token
//! under the same lock. An unpark that comes before the wait is never lost.

use std::time::Duration;

use crate::shim::{Condvar, Mutex, lock};

/// See the module docs.
pub struct Parker {
    token: Mutex<bool>,
    cv: Condvar,
}

impl Parker {
    /// A parker with no token.
    pub fn new() -> Self {
        Parker {
            token: Mutex::new(false),
            cv: Condvar::new(),
        }
    }

    /// Blocks until the token is set, then consumes it.
    pub fn park(&self) {
        let mut t = lock(&self.token);
        while !*t {
            t = match self.cv.wait(t) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        *t = false;
    }

    /// Blocks until the token is set or `timeout` passes; consumes the token if it was set.
    #[allow(dead_code)]
    pub(crate) fn park_timeout(&self, timeout: Duration) {
        let t = lock(&self.token);
        let mut t = if *t {
            t
        } else {
            match self.cv.wait_timeout(t, timeout) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            }
        };
        *t = false;
    }

    /// Sets the token and wakes the sleeper, if any.
    pub fn unpark(&self) {
        *lock(&self.token) = true;
        self.cv.notify_one();
    }
}
