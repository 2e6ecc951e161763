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
//!    wakes one more sleeper ([`Idle::stop_searching`] returns true), so a batch ramps all workers
//!    up one hop at a time but in parallel with the work, never one sleeper per task.
//! 3. A worker with nothing to do calls [`Idle::sleep`] (registering itself under the sleepers lock
//!    and leaving the counts), issues a SeqCst fence, and re-checks every place work can appear.
//!    Only if it still finds nothing does it block. A pusher and a parker thus each write then
//!    read across a fence: either the pusher sees the parker registered, or the parker sees the
//!    work (loom model: `tests/loom_runtime.rs`).
//! 4. A sleeper leaves either because a notifier chose it (the notifier removed it from the list
//!    and set its flag under the lock) or on its own ([`Idle::wake_self`]): shutdown, a `block_on`
//!    future was woken, or the re-check found work.
//! 5. At most half the workers search (steal) at once ([`Idle::try_search`]).

use crate::shim::{AtomicUsize, Mutex, Ordering, lock};

const SEARCHING: usize = 1;
const AWAKE: usize = 1 << 16;
const SEARCH_MASK: usize = AWAKE - 1;

/// The parking state of a runtime's workers (see the module docs).
pub struct Idle {
    state: AtomicUsize,
    sleepers: Mutex<Vec<usize>>,
    workers: usize,
}

impl Idle {
    /// All `workers` start awake and not searching.
    pub fn new(workers: usize) -> Self {
        Idle {
            state: AtomicUsize::new(workers * AWAKE),
            sleepers: Mutex::new(Vec::with_capacity(workers)),
            workers,
        }
    }

    /// Cheap check (no fence) for local pushes: is waking someone worth the slow path?
    pub fn wants_notify(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & SEARCH_MASK == 0 && s / AWAKE < self.workers
    }

    /// Chooses a sleeper to wake (step 1). `mark(idx)` runs under the lock and must set that
    /// worker's notified flag; the caller unparks the returned worker's thread afterwards.
    pub fn notify_one(&self, mark: impl FnOnce(usize)) -> Option<usize> {
        let s = self.state.load(Ordering::SeqCst);
        if s & SEARCH_MASK != 0 || s / AWAKE >= self.workers {
            return None;
        }
        let mut sleepers = lock(&self.sleepers);
        let s = self.state.load(Ordering::SeqCst);
        if s & SEARCH_MASK != 0 {
            return None;
        }
        let idx = sleepers.pop()?;
        self.state.fetch_add(AWAKE + SEARCHING, Ordering::SeqCst);
        mark(idx);
        Some(idx)
    }

    /// Enters the searching state unless half the workers already search (step 5).
    pub fn try_search(&self) -> bool {
        let s = self.state.load(Ordering::SeqCst);
        if 2 * (s & SEARCH_MASK) >= self.workers {
            return false;
        }
        self.state.fetch_add(SEARCHING, Ordering::SeqCst);
        true
    }

    /// Leaves the searching state; true if this was the last searcher (step 2).
    pub fn stop_searching(&self) -> bool {
        let prev = self.state.fetch_sub(SEARCHING, Ordering::SeqCst);
        prev & SEARCH_MASK == 1
    }

    /// Registers worker `idx` as asleep (step 3). The caller fences and re-checks for work next.
    pub fn sleep(&self, idx: usize, searching: bool) {
        let mut sleepers = lock(&self.sleepers);
        let dec = AWAKE + if searching { SEARCHING } else { 0 };
        self.state.fetch_sub(dec, Ordering::SeqCst);
        sleepers.push(idx);
    }

    /// Worker `idx` wakes on its own (step 4). If it is still registered it removes itself;
    /// otherwise a notifier already did, and `consume` clears the flag that notifier set. Either
    /// way the worker ends up counted awake and searching.
    pub fn wake_self(&self, idx: usize, consume: impl FnOnce()) {
        let mut sleepers = lock(&self.sleepers);
        if let Some(pos) = sleepers.iter().position(|&i| i == idx) {
            sleepers.swap_remove(pos);
            self.state.fetch_add(AWAKE + SEARCHING, Ordering::SeqCst);
        } else {
            consume();
        }
    }

    /// (awake, searching), for tests and models.
    #[allow(dead_code)]
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state.load(Ordering::SeqCst);
        (s / AWAKE, s & SEARCH_MASK)
    }
}
