//! Service segments: how a worker measures the time it gives each group.
//!
//! A *segment* is a stretch of time a worker spends on one group. It ends when the worker switches
//! group, parks, hands its core to another thread, or its quantum ends; its polls and busy time
//! are then flushed to the group's metrics, and its measured duration is charged to the group's
//! virtual runtime at the worker's next visit to the scheduler (a pick, a quantum end, parking, or
//! once charges to [`MAX_PENDING_CHARGES`] groups are pending), so a charge is never more than a
//! quantum late and costs no extra lock.
//!
//! The clock is read at segment boundaries and every `interval` polls, an interval adapted so that
//! reading it costs about one read per [`CLOCK_EVERY`] of work.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::group::GroupInner;
use crate::shim::Ordering;

use super::scheduler::{Charge, Scheduler};

/// Segment charges a worker may hold before it takes the scheduler lock just to apply them: the
/// groups one pick hands it (the picked group and its extras) and one more, so the groups of a pick
/// are charged at the next pick, under the lock it takes anyway.
const MAX_PENDING_CHARGES: usize = super::scheduler::EXTRA_GROUPS + 2;
/// Target amount of work between two clock reads.
const CLOCK_EVERY: Duration = Duration::from_micros(10);
/// Most polls between two clock reads.
const MAX_CLOCK_INTERVAL: u32 = 256;

/// A worker's current segment, its quantum, its adaptive clock and its pending charges.
pub(crate) struct Service {
    group: Option<Arc<GroupInner>>,
    /// The address of `group` (0 for none), for cheap comparisons on every schedule.
    addr: usize,
    start: Instant,
    polls: u64,
    quantum_start: Instant,
    last_clock: Instant,
    interval: u32,
    countdown: u32,
    /// Finished segments not yet charged to the scheduler.
    pending: Vec<Charge>,
}

impl Service {
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        Service {
            group: None,
            addr: 0,
            start: now,
            polls: 0,
            quantum_start: now,
            last_clock: now,
            interval: 1,
            countdown: 1,
            pending: Vec::with_capacity(MAX_PENDING_CHARGES),
        }
    }

    /// True if the current segment serves the group at `g`.
    #[inline]
    pub(crate) fn serves(&self, g: *const GroupInner) -> bool {
        self.addr == g as usize
    }

    /// The group of the current segment.
    #[inline]
    pub(crate) fn group(&self) -> Option<&Arc<GroupInner>> {
        self.group.as_ref()
    }

    /// Starts a segment on `g`.
    pub(crate) fn begin(&mut self, g: Arc<GroupInner>, now: Instant) {
        self.addr = Arc::as_ptr(&g) as usize;
        self.group = Some(g);
        self.start = now;
        self.polls = 0;
    }

    /// Ends the current segment: flushes its polls and busy time to the group's metrics and returns
    /// the group with the nanoseconds to charge.
    pub(crate) fn end(&mut self, now: Instant) -> Option<Charge> {
        let g = self.group.take()?;
        self.addr = 0;
        let ns = now.saturating_duration_since(self.start).as_nanos() as u64;
        g.polls.fetch_add(self.polls, Ordering::Relaxed);
        g.busy_ns.fetch_add(ns, Ordering::Relaxed);
        self.polls = 0;
        Some((g, ns))
    }

    /// Keeps `charge` for the next scheduler visit, or applies everything now if several groups'
    /// charges piled up; true if it visited the scheduler. Charges to one group are summed, so a
    /// worker alternating between two groups (a message and its reply) visits the scheduler at its
    /// quantum end, not every few segments.
    pub(crate) fn defer(&mut self, charge: Charge, scheduler: &Scheduler) -> bool {
        let (g, ns) = charge;
        if let Some(same) = self.pending.iter_mut().find(|(p, _)| Arc::ptr_eq(p, &g)) {
            same.1 += ns;
            return false;
        }
        self.pending.push((g, ns));
        if self.pending.len() < MAX_PENDING_CHARGES {
            return false;
        }
        scheduler.charge_all(&mut self.pending, None);
        true
    }

    /// The charges not applied yet, for a scheduler visit to apply.
    pub(crate) fn pending(&mut self) -> &mut Vec<Charge> {
        &mut self.pending
    }

    /// Counts a poll of the current segment's group.
    #[inline]
    pub(crate) fn polled(&mut self) {
        self.polls += 1;
    }

    /// Counts down to the next clock read; true when it is due.
    #[inline]
    pub(crate) fn tick(&mut self) -> bool {
        self.countdown -= 1;
        self.countdown == 0
    }

    /// Reads the clock, adapts the interval to the measured poll length, and returns the time if the
    /// quantum is over.
    pub(crate) fn read_clock(&mut self, quantum: Duration) -> Option<Instant> {
        let now = super::clock::now();
        let elapsed = now.saturating_duration_since(self.last_clock);
        self.last_clock = now;
        let per_poll = elapsed.as_nanos() as u64 / u64::from(self.interval).max(1);
        let interval = (CLOCK_EVERY.as_nanos() as u64 / per_poll.max(1))
            .clamp(1, u64::from(MAX_CLOCK_INTERVAL)) as u32;
        self.interval = interval;
        self.countdown = interval;
        (now.saturating_duration_since(self.quantum_start) >= quantum).then_some(now)
    }

    /// True while the current quantum lasts, as of the last clock read.
    pub(crate) fn in_quantum(&self, quantum: Duration) -> bool {
        self.last_clock
            .saturating_duration_since(self.quantum_start)
            < quantum
    }

    /// Starts a new quantum (after a quantum end, or when the worker wakes from parking).
    pub(crate) fn restart_quantum(&mut self, now: Instant) {
        self.quantum_start = now;
        self.last_clock = now;
    }
}
