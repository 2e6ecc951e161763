//! The stall monitor's state in `Shared`: its timed sleep between ticks, its stop flag and its
//! count of wake-ups. The monitor's thread and its detection are in `monitor`.

use std::time::Duration;

use crate::shim::{AtomicBool, AtomicU64, Ordering};

use super::idle::Idle;
use super::parker::Parker;

/// The monitor's shared state (in `Shared`).
pub(crate) struct Monitor {
    /// The monitor's timed sleep between ticks.
    parker: Parker,
    stop: AtomicBool,
    /// Times the monitor thread woke up (timed ticks and wakes from an idle sleep).
    wakeups: AtomicU64,
}

impl Monitor {
    pub(crate) fn new() -> Self {
        Monitor {
            parker: Parker::new(),
            stop: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
        }
    }

    /// Ends the monitor thread (shutdown, once the cores retired).
    pub(crate) fn stop(&self, idle: &Idle) {
        self.stop.store(true, Ordering::SeqCst);
        self.parker.unpark();
        idle.wake_watcher();
    }

    /// Whether [`stop`](Self::stop) was called.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The monitor's sleep between two ticks: `tick` at most, less if stopped meanwhile.
    pub(crate) fn sleep(&self, tick: Duration) {
        self.parker.park_timeout(tick);
    }

    /// Counts one wake-up of the monitor thread.
    pub(crate) fn woke(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }
}
