//! The keeper: which parked core sleeps until the earliest timer, and when an armer must wake it.
//!
//! At most one parked core keeps time: it parks with a timeout at the timers' `earliest` bound;
//! the others park without one. With the `io` feature a parking core takes the role even when no
//! timer is armed (it publishes `NEVER`, so any arm unparks it), and sleeps in the I/O reactor
//! (`worker::reactor`). The protocol with an armer (see `driver`) is a Dekker pair:
//! - the armer lowers `earliest`, fences (SeqCst), then reads the keeper's wake-up tick
//!   ([`Keeper::lowered`]): if the keeper wakes too late (or there is none), the armer wakes it
//!   (or a sleeping core, which becomes the keeper when it parks again);
//! - the keeper publishes its wake-up tick and fences ([`Keeper::publish`]), then re-reads
//!   `earliest` before it parks.
//!
//! So either the keeper sees the new timer, or the armer sees the keeper's stale tick and wakes
//! it. loom model: `loom_models/runtime.rs` (`an_earlier_timer_always_reaches_the_keeper`).

use crate::shim::{AtomicU64, AtomicUsize, Ordering, fence};

use super::driver::NEVER;

/// No core keeps time.
const NONE: usize = usize::MAX;

/// What an armer must do after lowering `earliest` to a tick ([`Keeper::lowered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Lowered {
    /// The keeper wakes at or before the tick: nothing.
    InTime,
    /// Unpark this core: it keeps time but would wake too late (or has not chosen its tick yet).
    Unpark(usize),
    /// Nobody keeps time: wake a sleeping core (if no core is awake to see the timer first).
    Notify,
}

/// See the module docs.
pub(crate) struct Keeper {
    core: AtomicUsize,
    until: AtomicU64,
}

impl Default for Keeper {
    fn default() -> Self {
        Self::new()
    }
}

impl Keeper {
    /// Nobody keeps time.
    pub(crate) fn new() -> Self {
        Keeper {
            core: AtomicUsize::new(NONE),
            until: AtomicU64::new(NEVER),
        }
    }

    /// Core `idx`, about to park, becomes the keeper unless another core is.
    pub(crate) fn try_keep(&self, idx: usize) -> bool {
        self.core
            .compare_exchange(NONE, idx, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The keeper publishes the tick it will wake at; it re-reads `earliest` next.
    pub(crate) fn publish(&self, tick: u64) {
        self.until.store(tick, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The keeper stops keeping time (it woke up).
    pub(crate) fn stop(&self) {
        self.until.store(NEVER, Ordering::SeqCst);
        self.core.store(NONE, Ordering::SeqCst);
    }

    /// The armer's half: `earliest` was just lowered to `tick`, and the armer fenced.
    pub(crate) fn lowered(&self, tick: u64) -> Lowered {
        if self.until.load(Ordering::SeqCst) <= tick {
            return Lowered::InTime;
        }
        match self.core.load(Ordering::SeqCst) {
            NONE => Lowered::Notify,
            k => Lowered::Unpark(k),
        }
    }
}

cfg_reactor! {
    impl Keeper {
        /// The core that keeps time now, if any.
        pub(crate) fn core(&self) -> Option<usize> {
            match self.core.load(Ordering::SeqCst) {
                NONE => None,
                k => Some(k),
            }
        }
    }
}
