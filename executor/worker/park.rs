//! Parking a core: the last place a worker looks for work (step 8 of `search`), the core's half of
//! the idle protocol (`idle`, steps 3 and 4) and of keeping time (`time::keeper`).
//!
//! A dormant core (`idle`, steps 6 and 7) parks without a timer or keeper role and passes the
//! work its re-check sees to an active sleeper.
//!
//! Due timers are fired first; one parked core, the keeper, sleeps until the earliest timer (see
//! `time::driver`), the others until woken. With the `io` feature the keeper sleeps in the I/O
//! reactor (see `reactor`), which runs the worker loop as a future with the same steps
//! (`park_begin`, `park_step`, `park_end`).
//!
//! While the runtime's clock is paused, a parking core first tries auto-advance (`time::clock`):
//! registered as a sleeper and fenced (`park_begin`), it finds the whole runtime idle, counts
//! itself awake and moves the clock to the earliest timer; `advance_if_idle` is the same for a
//! `block_on` thread between polls. The keeper parks without a deadline meanwhile.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Waker;
use std::time::Instant;

use crate::shim::{Ordering, fence};
use crate::task::future::drop_payload;
use crate::time::{IfBusy, NEVER};

use super::core::{Core, take_flag};
use super::shared::Shared;

/// What a parking core does next (`Core::park_step`).
pub(super) enum Step {
    /// Awake: notified, shut down, or it fired due timers.
    Woke,
    /// The timers' bound moved while the keeper published its tick: look again.
    Retry,
    /// Sleep until unparked.
    Park,
    /// Sleep until unparked or the instant a capped group's quota returns (`unthrottle_due`):
    /// a core that is not the keeper while a group is throttled. The keeper may have gone to
    /// sleep before the throttle, with no deadline for it; so every parked core wakes then, one
    /// puts the group back, the others park again.
    Nap(Instant),
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
        // Read after the fence: a core activated meanwhile sees it here (`idle`, step 6).
        if shared.idle().is_dormant(self.idx) && !shared.is_shutdown() {
            // Dormant: what it sees goes to an active sleeper (`idle`, step 7).
            if shared.has_visible_work(self.idx) {
                shared.notify_work();
            }
        } else if shared.has_visible_work(self.idx) || shared.is_shutdown() {
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
        // A dormant core keeps no time and takes back no quota: it waits for activation
        // (`idle`, step 6) or shutdown.
        if shared.idle().is_dormant(self.idx) {
            if std::mem::take(keeping) {
                shared.keeper().stop();
            }
            return Step::Park;
        }
        if shared.timers().clock().is_paused() && self.auto_advance() {
            if std::mem::take(keeping) {
                self.shared.keeper().stop();
            }
            return Step::Woke;
        }
        let shared = &*self.shared;
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
            return match unthrottle {
                Some(at) => Step::Nap(at),
                None => Step::Park,
            };
        }
        *keeping = true;
        // Publish the wake-up tick, then re-read the bound (see `time::keeper`).
        shared.keeper().publish(shared.timers().keeper_tick(due));
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
        let at = shared.timers().wake_at(due);
        Step::Keep(match (at, unthrottle) {
            (Some(a), Some(u)) => Some(a.min(u)),
            (a, u) => a.or(u),
        })
    }

    /// Auto-advance from a parking core (see the module docs): true if it advanced the paused
    /// clock, counted awake.
    #[cold]
    fn auto_advance(&mut self) -> bool {
        let shared = self.shared.clone();
        let mut wakers = Vec::new();
        let idx = self.idx;
        let advanced = shared.timers().auto_advance(
            || all_idle(&shared, idx),
            || self.wake_self(),
            &mut wakers,
        );
        wake_all(&mut wakers);
        advanced
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

/// True if nothing of the runtime can run: no worker awake and nothing queued (the caller is
/// registered as a sleeper, or is a `block_on` thread; `time::clock` checks the `block_on` polls).
fn all_idle(shared: &Shared, idx: usize) -> bool {
    shared.idle().counts().0 == 0 && !shared.has_visible_work(idx) && !shared.is_shutdown()
}

/// Wakes `wakers`, outside every lock; a panicking waker is dropped, as in `fire_timers`.
fn wake_all(wakers: &mut Vec<Waker>) {
    for w in wakers.drain(..) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| w.wake())) {
            drop_payload(p);
        }
    }
}

/// Auto-advance from a `block_on` thread between polls of its future (see the module docs): true
/// if it advanced the paused clock and woke what fired; the caller checks its own flag next.
pub(super) fn advance_if_idle(shared: &Shared) -> bool {
    let timers = shared.timers();
    if !timers.clock().is_paused() {
        return false;
    }
    let mut wakers = Vec::new();
    let advanced = timers.auto_advance(
        || all_idle(shared, usize::MAX),
        || timers.clock().add_busy(),
        &mut wakers,
    );
    wake_all(&mut wakers);
    if advanced {
        timers.clock().not_busy();
    }
    advanced
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
                    Step::Nap(at) => self
                        .remote()
                        .parker
                        .park_timeout(at.saturating_duration_since(Instant::now())),
                    Step::Keep(deadline) => {
                        // A real instant (`Timers::wake_at`).
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
