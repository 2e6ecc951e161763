//! What each core counts for `Runtime::metrics`.
//!
//! The thread running a core counts in plain fields ([`Counts`]), and copies them to the core's
//! [`Published`] atomics when it parks, at each quantum end and when the core retires, so the hot
//! path pays no atomic operation and a reader sees figures at most a quantum old (exact once the
//! core is idle).

use crate::shim::{AtomicU64, Ordering};

/// A core's counters since the runtime started.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) polls: u64,
    pub(crate) steals: u64,
    pub(crate) parks: u64,
    pub(crate) lifo_hits: u64,
    pub(crate) picks: u64,
    pub(crate) empty_picks: u64,
    pub(crate) lane_takes: u64,
    pub(crate) busy_ns: u64,
}

/// The copy of a core's counters other threads read. On a cache line of its own: only its core
/// writes it, and only rarely.
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct Published {
    polls: AtomicU64,
    steals: AtomicU64,
    parks: AtomicU64,
    lifo_hits: AtomicU64,
    picks: AtomicU64,
    empty_picks: AtomicU64,
    lane_takes: AtomicU64,
    busy_ns: AtomicU64,
}

impl Published {
    /// Called only by the thread running the core (one writer): plain stores suffice.
    pub(crate) fn publish(&self, c: &Counts) {
        self.polls.store(c.polls, Ordering::Relaxed);
        self.steals.store(c.steals, Ordering::Relaxed);
        self.parks.store(c.parks, Ordering::Relaxed);
        self.lifo_hits.store(c.lifo_hits, Ordering::Relaxed);
        self.picks.store(c.picks, Ordering::Relaxed);
        self.empty_picks.store(c.empty_picks, Ordering::Relaxed);
        self.lane_takes.store(c.lane_takes, Ordering::Relaxed);
        self.busy_ns.store(c.busy_ns, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> Counts {
        Counts {
            polls: self.polls.load(Ordering::Relaxed),
            steals: self.steals.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
            lifo_hits: self.lifo_hits.load(Ordering::Relaxed),
            picks: self.picks.load(Ordering::Relaxed),
            empty_picks: self.empty_picks.load(Ordering::Relaxed),
            lane_takes: self.lane_takes.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
        }
    }
}
