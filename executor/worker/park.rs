//! Parking a core: the last place a worker looks for work (step 8 of `search`), the core's half of
//! the idle protocol (`idle`, steps 3 and 4) and of keeping time (`time::keeper`).
//!
//! Due timers are fired first; one parked core, the keeper, sleeps until the earliest timer (see
//! `time::driver`), the others until woken. With the `io` feature the keeper sleeps in the I/O
//! reactor (see `reactor`), which runs the worker loop as a future with the same steps
//! (`park_begin`, `park_step`, `park_end`).

use std::time::Instant;

use crate::shim::{Ordering, fence};
use crate::time::{IfBusy, NEVER};

use super::core::{Core, take_flag};

/// What a parking core does next (`Core::park_step`).
pub(super) enum Step {
    /// Awake: notified, shut down, or it fired due timers.
    Woke,
    /// The timers' bound moved while the keeper published its tick: look again.
    Retry,
    /// Sleep until unparked.
    Park,
    /// Keep time: sleep until unparked or the deadline (`None`: no timer is armed).
    Keep(Option<Instant>),
}

impl Core {
    /// The start of a park: ends the segment, fires due timers, registers as a sleeper and
    /// re-checks for work. False if the core stays awake (work appeared, or shutdown).
    pub(super) fn park_begin(&mut self) -> bool {
        let now = Instant::now();
        self.end_segment(crate::clock::stamp_of(now));
        // Tell the scheduler this core serves nothing now (if it said otherwise), so the group it
        // served no longer holds the floor down.
        let parking = std::mem::replace(&mut self.reported_serving, false).then_some(self.idx);
        let shared = self.shared.clone();
        shared
            .scheduler()
            .charge_all(self.service.charges(), parking);
        self.service.settle();
        // What due timers wake is work: the re-check below sees it.
        self.fire_due_timers(now);
        shared
            .idle()
            .sleep(self.idx, std::mem::replace(&mut self.searching, false));
        fence(Ordering::SeqCst);
        if shared.has_visible_work(self.idx) || shared.is_shutdown() {
            self.wake_self();
            self.first_park_reached();
            return false;
        }
        self.counts.parks += 1;
        self.publish_counts();
        self.first_park_reached();
        true
    }

    /// Tells the runtime's start, once, that this core came to its first park (counted and
    /// published, or given up for work or shutdown).
    #[inline]
    pub(super) fn first_park_reached(&mut self) {
        if std::mem::take(&mut self.before_first_park) {
            self.shared.threads().reached_first_park();
        }
    }

    /// One turn of the parking loop: woken (a notification, shutdown, a due timer fired), or how
    /// to sleep. `keeping` says whether this core is the keeper; with `keep_without_timers` it
    /// takes the keeper role even when no timer is armed (the keeper sleeps in the reactor).
    pub(super) fn park_step(&mut self, keeping: &mut bool, keep_without_timers: bool) -> Step {
        let shared = &*self.shared;
        let remote = &shared.cores()[self.idx];
        if take_flag(&remote.notified) {
            // The notifier counted us awake and searching (the keeper's own claim: awake only,
            // and its flag was written before `notified`).
            self.searching = !remote.claimed.take();
            return Step::Woke;
        }
        if shared.is_shutdown() {
            self.wake_self();
            return Step::Woke;
        }
        // A capped group's quota returns at `unthrottle`: whoever finds it due puts the group
        // back and looks for work; the keeper sleeps no longer than that.
        let unthrottle = shared.scheduler().next_unthrottle();
        if let Some(at) = unthrottle {
            let now = crate::clock::stamp();
            if now >= at {
                if shared.scheduler().unthrottle_due(now) {
                    shared.notify_work();
                }
                if std::mem::take(keeping) {
                    shared.keeper().stop();
                }
                self.wake_self();
                return Step::Woke;
            }
        }
        let unthrottle = unthrottle.map(crate::clock::instant_of);
        let due = shared.timers().earliest();
        if (due == NEVER && unthrottle.is_none() && !keep_without_timers)
            || !(*keeping || shared.keeper().try_keep(self.idx))
        {
            if std::mem::take(keeping) {
                shared.keeper().stop();
            }
            return Step::Park;
        }
        *keeping = true;
        // Publish the wake-up tick, then re-read the bound (see `time::keeper`).
        shared.keeper().publish(due);
        if shared.timers().earliest() < due {
            return Step::Retry;
        }
        if due == NEVER {
            return Step::Keep(unthrottle);
        }
        let now = Instant::now();
        if shared.timers().now_tick(now) >= due {
            shared.keeper().stop();
            *keeping = false;
            self.wake_self();
            self.fire_timers(now, IfBusy::Wait);
            return Step::Woke;
        }
        let at = shared.timers().instant_of(due);
        Step::Keep(Some(unthrottle.map_or(at, |u| u.min(at))))
    }

    /// The end of a park: gives up the keeper role and starts a fresh quantum.
    pub(super) fn park_end(&mut self, keeping: bool) {
        if keeping {
            self.shared.keeper().stop();
        }
        self.service.restart_quantum(crate::clock::stamp());
    }

    pub(super) fn wake_self(&mut self) {
        let remote = &self.shared.cores()[self.idx];
        let mut searching = true;
        self.shared.idle().wake_self(self.idx, || {
            remote.notified.store(false, Ordering::Relaxed);
            // The keeper's own claim counted it awake only (see `reactor`).
            if remote.claimed.take() {
                searching = false;
            }
        });
        self.searching = searching;
    }
}

cfg_not_reactor! {
    impl Core {
        /// Parks until notified or shut down; as the keeper, until the earliest timer too.
        #[inline(never)]
        pub(super) fn park(&mut self) {
            if !self.park_begin() {
                return;
            }
            let mut keeping = false;
            loop {
                match self.park_step(&mut keeping, false) {
                    Step::Woke => break,
                    Step::Retry => {}
                    Step::Park => self.remote().parker.park(),
                    Step::Keep(deadline) => {
                        let wait = deadline.map_or(std::time::Duration::MAX, |d| {
                            d.saturating_duration_since(Instant::now())
                        });
                        self.remote().parker.park_timeout(wait);
                    }
                }
            }
            self.park_end(keeping);
        }
    }
}
