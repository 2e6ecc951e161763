//! Parking and waking workers, without lost wakeups or thundering herds.
//!
//! The state word counts *awake* workers and, among them, *searching* ones (looking for work
//! outside their own queue). The protocol:
//!
//! 1. Whoever makes work visible to other workers (a push to a group queue) issues a SeqCst fence
//!    and then calls [`Idle::notify_one`]. If some worker is searching, that searcher will find the
//!    work (or re-check before it parks), so nobody is woken. Otherwise one sleeper is woken and
//!    counted as awake *and searching* before it runs: a burst of spawns wakes at most one worker.
//! 2. A searching worker that finds work leaves the searching state; if it was the last searcher it
//!    wakes one more sleeper ([`Idle::stop_searching`] returns [`Stopped::Last`]), so a batch ramps
//!    all workers up one hop at a time but in parallel with the work, never one sleeper per task.
//! 3. A worker with nothing to do calls [`Idle::sleep`] (registering itself under the sleepers lock
//!    and leaving the counts), issues a SeqCst fence, and re-checks every place work can appear.
//!    Only if it still finds nothing does it block. A pusher and a parker thus each write then
//!    read across a fence: either the pusher sees the parker registered, or the parker sees the
//!    work (loom model: `loom_models/runtime.rs`).
//! 4. A sleeper leaves either because a notifier chose it (the notifier removed it from the list
//!    and set its flag under the lock) or on its own ([`Idle::wake_self`]): shutdown, a `block_on`
//!    future was woken, or the re-check found work.
//! 5. At most half the workers search (steal) at once ([`Idle::try_search`]).
//!
//! # Active cores
//! A runtime with `max_worker_threads` above `worker_threads` has more cores than it runs at once:
//! the cores with an index below the *active* count run; the others are *dormant*. A dormant
//! core parks as any sleeper does (registered, so shutdown and activation reach it) but is never
//! chosen by a notifier (step 1 chooses among the active sleepers only), takes no keeper role and
//! no work from outside its own queues (`park`, `search`). The protocol of a change:
//!
//! 6. The controller (`controller`) stores the new count (SeqCst). Raising it, it then wakes each
//!    newly active core that sleeps ([`Idle::activate`]: under the lock, counted awake and
//!    searching, its notified flag set); a core not registered is awake, or between its
//!    registration's fence and its re-check, which reads the count after the fence and so sees it
//!    active. Lowering it wakes nobody: each newly dormant core finds out at its next quantum end
//!    (where it hands its local work back to the global queues, `quantum`), search or park.
//! 7. A dormant core that parks re-checks for work after its fence as any parker (step 3), but
//!    instead of waking itself it calls a notification for the work it saw: a pusher that read it
//!    as awake (and so woke nobody) is thus covered by an active sleeper.
//!
//! # The stall monitor's idle sleep
//! The stall monitor sleeps without a timeout while no worker is awake ([`Idle::wait_for_awake`]):
//! it sets its `sleeping` flag, issues a SeqCst fence and re-reads the state word before it
//! sleeps; whoever makes the first worker awake (the counts' read-modify-write in
//! [`Idle::notify_one`] or [`Idle::wake_self`]) then issues a SeqCst fence and reads the flag. One
//! of the two sees the other, so the monitor never sleeps through a stall, and an idle runtime
//! never wakes it (loom model: `loom_models/rescue.rs`). What the first waker does depends on the
//! system:
//! - **With a kernel timer** (Linux `timerfd`): the monitor sleeps in a read of the timer, and the
//!   first waker *arms* it to fire one watch delay later (half the stall threshold: the monitor's
//!   longest tick, so a poll that begins at the wake is still seen within one tick; the
//!   controller's tick in a runtime whose count may grow, see `controller` step 1). The last
//!   worker to park *disarms* it. Both happen under the sleepers lock, where every change of the
//!   awake count happens, so arms and disarms follow the count's order: a disarm never cancels
//!   the alarm of a later wake (loom model: `loom_models/rescue.rs`, with a stand-in timer). A
//!   busy spell shorter than the delay (a request under light load) thus costs two timer calls on
//!   the workers' side and no wake-up of the monitor's thread.
//! - **Otherwise** the first waker unparks the monitor at once, which then keeps ticking on its
//!   own timer for a grace period after activity (`monitor`, *Cost and backing off*).

use std::time::Duration;

use crate::shim::{AtomicBool, AtomicUsize, Mutex, Ordering, fence, lock};

use super::parker::Parker;

const SEARCHING: usize = 1;
const AWAKE: usize = 1 << 16;
const SEARCH_MASK: usize = AWAKE - 1;

/// What [`Idle::try_search`] did (step 5).
#[must_use = "`Started`: the caller is counted searching and must leave with `stop_searching`"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Search {
    /// The caller searches now, and is counted so until [`Idle::stop_searching`] or it sleeps.
    Started,
    /// Half the workers search already: the caller does not.
    Enough,
}

/// What [`Idle::stop_searching`] found (step 2).
#[must_use = "`Last`: pushers left their work to the searchers, so the caller must wake one more"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// The caller was the last searcher: it wakes one more sleeper, since the pushers that saw it
    /// searching woke nobody.
    Last,
    /// Other workers still search, and see what the pushers published.
    OthersSearch,
}

/// The parking state of a runtime's workers (see the module docs).
pub(crate) struct Idle {
    state: AtomicUsize,
    sleepers: Mutex<Vec<usize>>,
    workers: usize,
    /// The cores that run (step 6): `workers` unless the controller changed it.
    active: AtomicUsize,
    /// The stall monitor waits here while no worker is awake, without a kernel timer.
    watcher: Parker,
    /// The kernel timer the stall monitor waits on while no worker is awake, if the system has
    /// one (see the module docs).
    alarm: Option<alarm::Alarm>,
    /// How long after the first worker wakes the alarm wakes the monitor.
    watch_delay: Duration,
    /// The monitor is (about to be) asleep without a timeout.
    watcher_sleeping: AtomicBool,
    /// The monitor was told to stop waiting for good ([`Idle::wake_watcher`]): no disarm may
    /// cancel that wake. Written under the sleepers lock.
    watcher_kicked: AtomicBool,
    /// Times a waking worker unparked the monitor, for tests.
    #[cfg(test)]
    pub(crate) watcher_unparks: std::sync::atomic::AtomicU64,
    /// Times a waking worker armed the monitor's alarm, for tests.
    #[cfg(test)]
    pub(crate) watcher_alarms: std::sync::atomic::AtomicU64,
}

impl Idle {
    /// All `workers` start awake and not searching, and all are active (the loom models).
    #[cfg(all(test, loom))]
    pub(crate) fn new(workers: usize) -> Self {
        Self::with_active(workers, workers)
    }

    /// All `workers` cores start awake and not searching; the first `active` of them are active
    /// (the others go dormant at their first park, step 6).
    pub(crate) fn with_active(workers: usize, active: usize) -> Self {
        Idle {
            state: AtomicUsize::new(workers * AWAKE),
            sleepers: Mutex::new(Vec::with_capacity(workers)),
            workers,
            active: AtomicUsize::new(active.clamp(1, workers.max(1))),
            watcher: Parker::new(),
            alarm: alarm::Alarm::new(),
            watch_delay: Duration::from_millis(1),
            watcher_sleeping: AtomicBool::new(false),
            watcher_kicked: AtomicBool::new(false),
            #[cfg(test)]
            watcher_unparks: std::sync::atomic::AtomicU64::new(0),
            #[cfg(test)]
            watcher_alarms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Sets how long after the first worker wakes the monitor's alarm fires (see the module
    /// docs): the monitor's longest tick.
    pub(crate) fn watching_after(mut self, delay: Duration) -> Self {
        self.watch_delay = delay.max(Duration::from_micros(1));
        self
    }

    /// The same without the kernel timer: the first waker unparks the monitor (loom models both).
    #[cfg(all(loom, test))]
    pub(crate) fn without_alarm(mut self) -> Self {
        self.alarm = None;
        self
    }

    /// True if the first waker arms a kernel timer for the monitor instead of unparking it (see
    /// the module docs): a wait that returns true has lasted the watch delay already.
    pub(crate) fn defers_watch(&self) -> bool {
        self.alarm.is_some()
    }

    /// Cheap check (no fence) for local pushes: is waking someone worth the slow path?
    pub(crate) fn wants_notify(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & SEARCH_MASK == 0 && s / AWAKE < self.active.load(Ordering::Relaxed)
    }

    /// True if a notification would wake nobody now (a worker searches, or none sleeps): the
    /// first check of [`Idle::notify_preferring`], with its ordering, for a caller that has more
    /// to compute before it. A caller that fenced after making its work visible may return on it.
    pub(crate) fn nobody_to_wake(&self) -> bool {
        let s = self.state.load(Ordering::SeqCst);
        s & SEARCH_MASK != 0 || s / AWAKE >= self.active.load(Ordering::SeqCst)
    }

    /// [`Idle::notify_one`], choosing sleeper `prefer` if it is one (the keeper, see `reactor`),
    /// otherwise the one that slept last.
    pub(crate) fn notify_preferring(
        &self,
        prefer: Option<usize>,
        mark: impl FnOnce(usize),
    ) -> Option<usize> {
        if self.nobody_to_wake() {
            return None;
        }
        let mut sleepers = lock(&self.sleepers);
        let s = self.state.load(Ordering::SeqCst);
        if s & SEARCH_MASK != 0 {
            return None;
        }
        // Only active cores are chosen (step 6); with none dormant, the last is the last.
        let active = self.active.load(Ordering::SeqCst);
        let preferred = prefer
            .filter(|&p| p < active)
            .and_then(|p| sleepers.iter().position(|&i| i == p));
        let idx = match preferred {
            Some(pos) => sleepers.swap_remove(pos),
            None => {
                let pos = sleepers.iter().rposition(|&i| i < active)?;
                sleepers.remove(pos)
            }
        };
        let prev = self.state.fetch_add(AWAKE + SEARCHING, Ordering::SeqCst);
        mark(idx);
        self.first_awake(prev);
        Some(idx)
    }

    /// Enters the searching state unless half the workers already search (step 5).
    pub(crate) fn try_search(&self) -> Search {
        let s = self.state.load(Ordering::SeqCst);
        if 2 * (s & SEARCH_MASK) >= self.active.load(Ordering::Relaxed) {
            return Search::Enough;
        }
        self.state.fetch_add(SEARCHING, Ordering::SeqCst);
        Search::Started
    }

    /// Leaves the searching state (step 2).
    pub(crate) fn stop_searching(&self) -> Stopped {
        let prev = self.state.fetch_sub(SEARCHING, Ordering::SeqCst);
        if prev & SEARCH_MASK == 1 {
            Stopped::Last
        } else {
            Stopped::OthersSearch
        }
    }

    /// Registers worker `idx` as asleep (step 3). The caller fences and re-checks for work next.
    pub(crate) fn sleep(&self, idx: usize, searching: bool) {
        let mut sleepers = lock(&self.sleepers);
        let dec = AWAKE + if searching { SEARCHING } else { 0 };
        let prev = self.state.fetch_sub(dec, Ordering::SeqCst);
        if prev / AWAKE == 1 {
            self.last_asleep();
        }
        sleepers.push(idx);
    }

    /// Under the sleepers lock, after the awake count fell to zero: disarms the monitor's alarm
    /// if it sleeps on one, so a busy spell that ends before the alarm does not wake it (see the
    /// module docs). The count changes only under this lock, so the alarm being disarmed is the
    /// one armed for the busy spell that ends here.
    #[inline]
    fn last_asleep(&self) {
        if let Some(alarm) = &self.alarm {
            if self.watcher_sleeping.load(Ordering::SeqCst)
                && !self.watcher_kicked.load(Ordering::SeqCst)
            {
                alarm.set(Duration::ZERO);
            }
        }
    }

    /// Worker `idx` wakes on its own (step 4). If it is still registered it removes itself;
    /// otherwise a notifier already did, and `consume` clears the flag that notifier set. Either
    /// way the worker ends up counted awake and searching.
    pub(crate) fn wake_self(&self, idx: usize, consume: impl FnOnce()) {
        let mut sleepers = lock(&self.sleepers);
        if let Some(pos) = sleepers.iter().position(|&i| i == idx) {
            sleepers.swap_remove(pos);
            let prev = self.state.fetch_add(AWAKE + SEARCHING, Ordering::SeqCst);
            self.first_awake(prev);
        } else {
            consume();
        }
    }

    /// Under the sleepers lock, after a SeqCst increment of the awake count from `prev`: the first
    /// awake worker arms the stall monitor's alarm, or wakes it, if it sleeps (see the module
    /// docs). Only when every worker slept.
    #[inline]
    fn first_awake(&self, prev: usize) {
        if prev / AWAKE == 0 {
            // The read-modify-write is SeqCst already; the fence makes the pair a fence pair,
            // which loom models exactly (it treats SeqCst accesses as acquire/release).
            fence(Ordering::SeqCst);
            if self.watcher_sleeping.load(Ordering::SeqCst) {
                match &self.alarm {
                    Some(alarm) => {
                        #[cfg(test)]
                        self.watcher_alarms
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        alarm.set(self.watch_delay);
                    }
                    None => {
                        #[cfg(test)]
                        self.watcher_unparks
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        self.watcher.unpark();
                    }
                }
            }
        }
    }

    /// The stall monitor's wait: returns at once if a worker is awake or `stop()` holds, otherwise
    /// sleeps until the first worker wakes (with a kernel timer: until its alarm, one watch delay
    /// after that wake, if a worker is still awake then) or [`Idle::wake_watcher`] is called. True
    /// if it waited.
    pub(crate) fn wait_for_awake(&self, stop: impl Fn() -> bool) -> bool {
        let mut waited = false;
        loop {
            if stop() || self.state.load(Ordering::SeqCst) / AWAKE > 0 {
                return waited;
            }
            self.watcher_sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if stop() || self.state.load(Ordering::SeqCst) / AWAKE > 0 {
                self.watcher_sleeping.store(false, Ordering::Relaxed);
                return waited;
            }
            match &self.alarm {
                Some(alarm) => {
                    if !alarm.wait() {
                        // The timer failed to read (it never does): no busy loop on it.
                        self.watcher.park_timeout(self.watch_delay);
                    }
                }
                None => self.watcher.park(),
            }
            self.watcher_sleeping.store(false, Ordering::Relaxed);
            waited = true;
        }
    }

    /// Wakes the stall monitor from [`Idle::wait_for_awake`] for good (shutdown), or makes its
    /// next wait return at once.
    pub(crate) fn wake_watcher(&self) {
        let _sleepers = lock(&self.sleepers);
        self.watcher_kicked.store(true, Ordering::SeqCst);
        if let Some(alarm) = &self.alarm {
            // The shortest wait a timer takes: zero would disarm it.
            alarm.set(Duration::from_nanos(1));
        }
        self.watcher.unpark();
    }

    /// The number of active cores (step 6).
    #[inline]
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// True if core `idx` is dormant (step 6).
    #[inline]
    pub(crate) fn is_dormant(&self, idx: usize) -> bool {
        idx >= self.active.load(Ordering::SeqCst)
    }

    /// Sets the number of active cores (step 6), within 1 and all the cores; the caller wakes
    /// the newly active sleepers with [`Idle::activate`].
    pub(crate) fn set_active(&self, n: usize) {
        self.active
            .store(n.clamp(1, self.workers.max(1)), Ordering::SeqCst);
    }

    /// Wakes core `idx` if it sleeps (step 6): counted awake and searching, `mark` run under the
    /// lock. True if it slept: the caller unparks its thread.
    pub(crate) fn activate(&self, idx: usize, mark: impl FnOnce(usize)) -> bool {
        let mut sleepers = lock(&self.sleepers);
        let Some(pos) = sleepers.iter().position(|&i| i == idx) else {
            return false;
        };
        sleepers.swap_remove(pos);
        let prev = self.state.fetch_add(AWAKE + SEARCHING, Ordering::SeqCst);
        mark(idx);
        self.first_awake(prev);
        true
    }

    /// (awake, searching): for the monitor, a pick's extras (a group is left for each other
    /// searcher), tests and models.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let s = self.state.load(Ordering::SeqCst);
        (s / AWAKE, s & SEARCH_MASK)
    }
}

cfg_not_reactor! {
    impl Idle {
        /// Chooses a sleeper to wake (step 1). `mark(idx)` runs under the lock and must set that
        /// worker's notified flag; the caller unparks the returned worker's thread afterwards.
        // With the reactor the runtime states a preference (`notify_preferring`); the loom models
        // and the build without the reactor call this.
        pub(crate) fn notify_one(&self, mark: impl FnOnce(usize)) -> Option<usize> {
            self.notify_preferring(None, mark)
        }
    }
}

cfg_reactor! {
    impl Idle {
        /// Wakes sleeper `idx` if it is still registered: the keeper, on whose thread the reactor
        /// dispatches this wake (see `reactor`). Unlike [`Idle::notify_one`] it counts the sleeper
        /// awake but not searching: it runs the work its own thread dispatched, so finding it must not
        /// wake another sleeper (step 2); a second wake in the same dispatch sees no searcher and wakes
        /// one. `mark` runs under the lock.
        pub(crate) fn claim(&self, idx: usize, mark: impl FnOnce(usize)) -> Claim {
            let mut sleepers = lock(&self.sleepers);
            let Some(pos) = sleepers.iter().position(|&i| i == idx) else {
                return Claim::Awake;
            };
            sleepers.swap_remove(pos);
            let prev = self.state.fetch_add(AWAKE, Ordering::SeqCst);
            mark(idx);
            self.first_awake(prev);
            Claim::Claimed
        }
    }

    /// What [`Idle::claim`] did.
    #[must_use = "`Claimed`: the sleeper is counted awake, so the caller must unpark it"]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Claim {
        /// The sleeper was registered: it is counted awake now, and its thread must be unparked.
        Claimed,
        /// It is awake already: nobody was claimed.
        Awake,
    }
}

/// The monitor's kernel timer (Linux `timerfd`; see the module docs). Not under Miri, which does
/// not emulate it; loom has a stand-in below.
#[cfg(all(
    not(loom),
    not(miri),
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod alarm {
    use std::ffi::{c_int, c_long, c_void};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::ptr;
    use std::time::Duration;

    const CLOCK_MONOTONIC: c_int = 1;
    const TFD_CLOEXEC: c_int = 0o2_000_000;

    /// `struct timespec` on the 64-bit targets this module is built for.
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: c_long,
    }

    /// `struct itimerspec`.
    #[repr(C)]
    struct Itimerspec {
        it_interval: Timespec,
        it_value: Timespec,
    }

    unsafe extern "C" {
        fn timerfd_create(clockid: c_int, flags: c_int) -> c_int;
        fn timerfd_settime(
            fd: c_int,
            flags: c_int,
            new: *const Itimerspec,
            old: *mut Itimerspec,
        ) -> c_int;
        fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize;
    }

    /// A one-shot monotonic timer that one thread waits on.
    pub(super) struct Alarm {
        fd: OwnedFd,
    }

    impl Alarm {
        /// A disarmed timer; `None` if the system refuses one (then the monitor is unparked).
        pub(super) fn new() -> Option<Alarm> {
            // SAFETY: timerfd_create takes two integers and touches no memory of this process.
            let fd = unsafe { timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC) };
            if fd < 0 {
                return None;
            }
            // SAFETY: `fd` is a descriptor this call just opened and nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            Some(Alarm { fd })
        }

        /// Arms the timer to fire once `after` from now, replacing any earlier setting (a
        /// pending expiry included); zero disarms it.
        pub(super) fn set(&self, after: Duration) {
            let spec = Itimerspec {
                it_interval: Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: Timespec {
                    tv_sec: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: c_long::from(after.subsec_nanos()),
                },
            };
            // SAFETY: `spec` is a valid `itimerspec` that outlives the call, and a null `old` asks
            // for no previous setting; the descriptor is open while `self` lives. The call fails
            // only for a bad descriptor or setting, neither of which this passes.
            unsafe { timerfd_settime(self.fd.as_raw_fd(), 0, &spec, ptr::null_mut()) };
        }

        /// Blocks until the timer fires (at once if it fired since the last wait); false if the
        /// read failed for another reason than a signal.
        pub(super) fn wait(&self) -> bool {
            loop {
                let mut expiries = 0u64;
                // SAFETY: the buffer is 8 writable bytes that outlive the call, the size a timer
                // descriptor's read needs; the descriptor is open while `self` lives.
                let n = unsafe {
                    read(
                        self.fd.as_raw_fd(),
                        (&raw mut expiries).cast::<c_void>(),
                        size_of::<u64>(),
                    )
                };
                if n == 8 {
                    return true;
                }
                if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    return false;
                }
            }
        }
    }
}

/// loom's stand-in for the kernel timer: an armed alarm fires eventually (a wait returns), a
/// disarmed one never; a new setting replaces a pending expiry, as `timerfd_settime` does.
#[cfg(loom)]
mod alarm {
    use std::time::Duration;

    use crate::shim::{Condvar, Mutex, lock};

    pub(super) struct Alarm {
        armed: Mutex<bool>,
        cv: Condvar,
    }

    impl Alarm {
        pub(super) fn new() -> Option<Alarm> {
            Some(Alarm {
                armed: Mutex::new(false),
                cv: Condvar::new(),
            })
        }

        pub(super) fn set(&self, after: Duration) {
            let mut armed = lock(&self.armed);
            *armed = !after.is_zero();
            if *armed {
                self.cv.notify_one();
            }
        }

        pub(super) fn wait(&self) -> bool {
            let mut armed = lock(&self.armed);
            while !*armed {
                armed = match self.cv.wait(armed) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
            }
            *armed = false;
            true
        }
    }
}

/// No kernel timer here (another system, Miri): the first waker unparks the monitor.
#[cfg(all(
    not(loom),
    not(all(
        not(miri),
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))
))]
mod alarm {
    use std::time::Duration;

    /// Never built: [`Alarm::new`] has none.
    pub(super) enum Alarm {}

    impl Alarm {
        pub(super) fn new() -> Option<Alarm> {
            None
        }

        pub(super) fn set(&self, _after: Duration) {
            match *self {}
        }

        pub(super) fn wait(&self) -> bool {
            match *self {}
        }
    }
}
