//! Service segments: how a worker measures the time it gives each group.
//!
//! A *segment* is a stretch of time a worker spends on one group. It ends when the worker switches
//! group, parks, hands its core to another thread, or its quantum ends. Its measured duration and
//! polls are added to the group's entry in the worker's list of *charges*, one entry per group
//! served since the worker's last visit to the scheduler. At the next visit (a pick, a quantum
//! end, parking) the scheduler charges them to the groups' virtual runtimes, each under its
//! group's own lock (no scheduler lock: see `scheduler`, lazy keys); then the durations and polls
//! are flushed to the groups' metrics and the list is emptied. So a charge is never more than a
//! quantum late, and a worker alternating between groups (a message and its reply) touches no
//! group's shared counters and no reference count per segment: the entry holds the group's `Arc`
//! for the whole stretch between two visits.
//!
//! When a segment for a new group finds [`MAX_PENDING_CHARGES`] groups listed, the list is charged
//! early, under each group's own lock. A worker serving one group after another (tasks woken from
//! outside into groups of their own, through the lane) so visits the scheduler at its picks and
//! quantum ends only.
//!
//! The clock is read at segment boundaries, and after every poll while polls are long; while they
//! are short (the polls since the last read took less than [`CLOCK_EVERY`] together), after every
//! second, then every fourth poll ([`MAX_CLOCK_INTERVAL`]), so that the read (a time-stamp counter
//! read, several nanoseconds on a virtual machine) costs little against polls of tens of
//! nanoseconds. The interval is bounded by a count, not adapted to the polls' mean length, because
//! a poll's length is known only after it: a worker notices that its quantum ended within
//! `MAX_CLOCK_INTERVAL` polls, counting the one in which it ran out, however the lengths of its
//! polls change. (A task that yielded in polls of nanoseconds and then computes in polls of a
//! millisecond is switched within four of them; an interval grown to hundreds of short polls would
//! let it keep its worker for hundreds of milliseconds, whatever its weight.)
//!
//! # Preempted time is not service
//! Segments are measured with the wall clock, but the operating system may preempt a worker in the
//! middle of one (more runnable threads than cores: blocking closures, other processes). That time
//! is not service, so charges are corrected by the worker thread's own CPU time
//! ([`thread_cpu_ns`]). Reading it is a system call (several hundred nanoseconds, far more than a
//! segment boundary's clock read), so it is read at a scheduler visit only, and only once at
//! least [`CPU_READ_EVERY`] of segment time was measured since the last reading: the ratio of the
//! CPU time the thread burned to the segment time it measured over that stretch (at most 1) scales
//! the charges of that visit, and of the visits after it until the next reading. Parking burns no
//! CPU time and is no segment time, so it does not bias the ratio; the worker's own work between
//! segments (searching, picks) counts as CPU time, which errs towards charging a little more,
//! never more than the wall time. The scaled charges go to both the virtual runtimes and the
//! groups' metrics (`busy`); the worker's own metrics keep wall time.
//!
//! # Slices in a tenant tree
//! A segment on a group of a tenant tree ends the quantum after a *slice*: the quantum scaled by
//! the group's share of the workers (`Node::share`: its path's share of its tree times the tree's
//! measured share of the workers, stored by the tree's last pick of the group or quantum end on
//! it, `fair::tree` step 5), at least a sixteenth of the quantum and [`LEAST_SLICE`] (the
//! quantum, if that is shorter). The lag a group suffers is about a slice of whoever runs before
//! it, and its relative error over a window is that lag over the small service the window owes
//! a small share: short slices for small shares keep that error small, and the least slice
//! bounds what the extra quantum ends cost (one per 50 µs at most). The segment's start moves the
//! quantum's start back so that the quantum ends at the slice's end, if that is sooner; nothing
//! else changes, so a flat group (no node), and a tree group whose path has the whole tree, keep
//! the full quantum, and a flat group's segment costs one load more when it begins. A visit after
//! a sliced segment reads the thread's CPU clock once the segment time since the last reading
//! reaches the least slice, however short of [`CPU_READ_EVERY`]: a ratio measured over earlier
//! slices, of other groups, would charge one group the time the system preempted the worker in
//! another's slice. Shorter sliced segments (the tasks of many small groups) read no clock: a
//! preemption in one makes its measured time long.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::group::GroupInner;
use crate::group::tree::SHARE_ONE;
use crate::shim::Ordering;

use super::scheduler::{Charge, Scheduler};

/// Groups whose service a worker may list before it charges them early (see the module docs):
/// the groups one pick hands it (the picked group and its extras) and one more, so the groups of a
/// pick are charged at the next pick.
const MAX_PENDING_CHARGES: usize = super::scheduler::EXTRA_GROUPS + 2;
/// Polls since the last clock read shorter than this together double the interval between reads.
const CLOCK_EVERY: u64 = 10_000;
/// Most polls between two clock reads (see the module docs).
const MAX_CLOCK_INTERVAL: u32 = 4;
/// `Service::current` when no segment is open.
const NONE: usize = usize::MAX;
/// Least segment time (nanoseconds) between two readings of the thread's CPU clock (see the
/// module docs).
const CPU_READ_EVERY: u64 = 250_000;
/// `Service::ratio` of a worker that was not preempted: 1 in fixed point.
const RATIO_ONE: u64 = 1 << 16;
/// The least slice (nanoseconds) of a group with a small share of its tree (see the module docs),
/// unless the quantum is shorter.
const LEAST_SLICE: u64 = 50_000;

/// The CPU time the calling thread has burned, in nanoseconds, or `None` where the system offers
/// no per-thread CPU clock (then charges stay in wall time). A system call on Linux.
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    #[cfg(all(target_os = "linux", not(miri), not(loom)))]
    {
        #[repr(C)]
        struct Timespec {
            tv_sec: std::ffi::c_long,
            tv_nsec: std::ffi::c_long,
        }
        unsafe extern "C" {
            fn clock_gettime(clock: std::ffi::c_int, tp: *mut Timespec) -> std::ffi::c_int;
        }
        /// Linux's `CLOCK_THREAD_CPUTIME_ID`.
        const CLOCK_THREAD_CPUTIME_ID: std::ffi::c_int = 3;
        let mut ts = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `clock_gettime` is the C library's, with the signature declared above (a clock
        // id and a pointer to a `struct timespec`, two `long`s on Linux); `ts` is a valid,
        // writable `Timespec` for the call's length, and the function writes nothing else.
        let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return None;
        }
        let secs = u64::try_from(ts.tv_sec).ok()?;
        let nanos = u64::try_from(ts.tv_nsec).ok()?;
        Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    }
    #[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
    {
        None
    }
}

/// A worker's current segment, its quantum, its adaptive clock and its pending charges.
pub(crate) struct Service {
    /// The groups served since the last scheduler visit, with their uncharged service.
    charges: Vec<Charge>,
    /// The index in `charges` of the current segment's group, or `NONE`.
    current: usize,
    /// The address of the current segment's group (0 for none), for cheap comparisons on every
    /// schedule.
    addr: usize,
    /// Stamps (`clock::stamp`) of the segment's start, the quantum's start and the last clock
    /// read.
    start: u64,
    polls: u64,
    quantum_start: u64,
    last_clock: u64,
    /// Polls between two clock reads (1 to `MAX_CLOCK_INTERVAL`), and polls left to the next.
    interval: u32,
    countdown: u32,
    /// The thread's CPU time at the last reading (see the module docs), if the system has the
    /// clock, and which thread read it (a core moves between threads: a reading is compared only
    /// with one of the same thread).
    cpu_mark: Option<(u64, usize)>,
    /// Segment time measured since that reading.
    measured: u64,
    /// CPU time ÷ segment time over the last stretch, in fixed point (`RATIO_ONE` is 1): the
    /// factor the charges are scaled by.
    ratio: u64,
    /// The runtime's quantum, and the least slice (see the module docs), in nanoseconds.
    quantum: u64,
    least_slice: u64,
    /// A segment since the last reading of the thread's CPU clock ran in a slice shorter than
    /// the quantum: the next visit reads the clock once the segment time measured reaches the
    /// least slice (see the module docs).
    sliced: bool,
}

impl Service {
    /// A worker's service, with no segment open, for a runtime whose quantum is `quantum`.
    pub(crate) fn new(quantum: Duration) -> Self {
        let quantum = crate::clock::nanos(quantum);
        let now = crate::clock::stamp();
        Service {
            charges: Vec::with_capacity(MAX_PENDING_CHARGES),
            current: NONE,
            addr: 0,
            start: now,
            polls: 0,
            quantum_start: now,
            last_clock: now,
            interval: 1,
            countdown: 1,
            cpu_mark: None,
            measured: 0,
            ratio: RATIO_ONE,
            quantum,
            least_slice: (quantum / 16).max(LEAST_SLICE).min(quantum),
            sliced: false,
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
        self.charges.get(self.current).map(|c| &c.group)
    }

    /// Starts a segment on `g` (no segment may be open): borrowed, the list clones it if it needs
    /// an `Arc`; owned (a pick hands the worker one), the list keeps that one. If the list of
    /// charges is full and has no entry for `g`, charges it first (under the groups' own locks).
    pub(crate) fn begin(&mut self, g: Cow<'_, Arc<GroupInner>>, now: u64, scheduler: &Scheduler) {
        debug_assert_eq!(self.current, NONE, "a segment is already open");
        if let Some(node) = g.node() {
            self.slice(node.share.load(Ordering::Relaxed), now);
        }
        // From the newest: a worker alternating between two groups finds either at once.
        let addr = Arc::as_ptr(&g) as usize;
        let at = match self
            .charges
            .iter()
            .rposition(|c| Arc::as_ptr(&c.group) as usize == addr)
        {
            Some(i) => i,
            None => {
                if self.charges.len() >= MAX_PENDING_CHARGES {
                    // Groups nothing else holds (no handle, no task, not in the rotation) can
                    // never be scheduled again: their virtual runtimes no longer matter, and
                    // nothing can make them reachable again but shutdown's snapshot of the live
                    // groups. A task in a group of its own (a group per request) then costs no
                    // charge under its lock.
                    self.settle_where(|c| Arc::strong_count(&c.group) == 1);
                }
                if self.charges.len() >= MAX_PENDING_CHARGES {
                    self.scale_to_cpu_time();
                    self.settle_where(|c| scheduler.charge(c));
                }
                self.charges.push(Charge {
                    group: g.into_owned(),
                    ns: 0,
                    polls: 0,
                });
                self.charges.len() - 1
            }
        };
        self.current = at;
        self.addr = addr;
        self.start = now;
        self.polls = 0;
    }

    /// A segment on a tree group whose path has `share` of its tree begins at `now`: the quantum
    /// ends at the end of the group's slice, if that is sooner (see the module docs).
    fn slice(&mut self, share: u32, now: u64) {
        if share >= SHARE_ONE {
            return;
        }
        let slice = (self.quantum.saturating_mul(u64::from(share)) / u64::from(SHARE_ONE))
            .max(self.least_slice);
        let start = now.saturating_add(slice).saturating_sub(self.quantum);
        self.quantum_start = self.quantum_start.min(start);
        self.sliced = true;
    }

    /// Ends the current segment: adds its duration and polls to its group's charge. Returns the
    /// duration, or `None` if no segment was open.
    pub(crate) fn end(&mut self, now: u64) -> Option<u64> {
        let c = self.charges.get_mut(self.current)?;
        let ns = now.saturating_sub(self.start);
        c.ns += ns;
        c.polls += self.polls;
        self.measured += ns;
        self.current = NONE;
        self.addr = 0;
        self.polls = 0;
        Some(ns)
    }

    /// The charges for a scheduler visit (no segment may be open), in CPU time (see the module
    /// docs); the caller settles them after the visit.
    pub(crate) fn charges(&mut self) -> &[Charge] {
        debug_assert_eq!(self.current, NONE, "charges taken with a segment open");
        self.scale_to_cpu_time();
        &self.charges
    }

    /// Scales the pending charges from wall time to CPU time: re-reads the thread's CPU clock if
    /// enough segment time passed since the last reading, then applies the ratio (see the module
    /// docs).
    fn scale_to_cpu_time(&mut self) {
        let thread = this_thread();
        if self.measured >= CPU_READ_EVERY
            || (self.sliced && self.measured >= self.least_slice)
            || self.cpu_mark.is_none_or(|(_, t)| t != thread)
        {
            self.sliced = false;
            let cpu = thread_cpu_ns().map(|ns| (ns, thread));
            if let (Some((now, _)), Some((mark, t))) = (cpu, self.cpu_mark) {
                let burned = now.saturating_sub(mark);
                self.ratio = (u128::from(burned) * u128::from(RATIO_ONE)
                    / u128::from(self.measured.max(1)))
                .min(u128::from(RATIO_ONE)) as u64;
                if t != thread {
                    // Another thread's reading: no stretch to measure.
                    self.ratio = RATIO_ONE;
                }
            }
            self.cpu_mark = cpu;
            self.measured = 0;
        }
        if self.ratio < RATIO_ONE {
            let ratio = self.ratio;
            for c in &mut self.charges {
                // A charge is at most a few quanta: far from overflowing 48 bits.
                c.ns = c.ns.saturating_mul(ratio) / RATIO_ONE;
            }
        }
    }

    /// After the scheduler charged the list (or at shutdown, where nothing is charged): flushes
    /// each group's service and polls to its metrics and empties the list, dropping the `Arc`s
    /// outside any scheduler lock.
    pub(crate) fn settle(&mut self) {
        debug_assert_eq!(self.current, NONE, "charges settled with a segment open");
        self.charges.drain(..).for_each(flush);
    }

    /// Flushes and removes the charges for which `done` is true (it has dealt with their service,
    /// or the service no longer matters), keeping the others for the next visit.
    fn settle_where(&mut self, mut done: impl FnMut(&Charge) -> bool) {
        let mut i = 0;
        while i < self.charges.len() {
            if done(&self.charges[i]) {
                flush(self.charges.swap_remove(i));
            } else {
                i += 1;
            }
        }
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

    /// Reads the clock, sets the interval to the next read (doubled while the polls are short,
    /// one poll once they are not), and returns the stamp if the quantum is over.
    pub(crate) fn read_clock(&mut self, quantum: Duration) -> Option<u64> {
        let now = crate::clock::stamp();
        let short = now.saturating_sub(self.last_clock) < CLOCK_EVERY;
        self.last_clock = now;
        self.interval = if short {
            (self.interval * 2).min(MAX_CLOCK_INTERVAL)
        } else {
            1
        };
        self.countdown = self.interval;
        (now.saturating_sub(self.quantum_start) >= crate::clock::nanos(quantum)).then_some(now)
    }

    /// True while the current quantum lasts, as of the last clock read.
    pub(crate) fn in_quantum(&self, quantum: Duration) -> bool {
        self.last_clock.saturating_sub(self.quantum_start) < crate::clock::nanos(quantum)
    }

    /// Starts a new quantum (after a quantum end, or when the worker wakes from parking), at the
    /// stamp `now`.
    pub(crate) fn restart_quantum(&mut self, now: u64) {
        self.quantum_start = now;
        self.last_clock = now;
    }
}

thread_local! {
    /// Set while something charges this thread's CPU time as it goes (a blocking pool thread, a
    /// `block_in_place` section): a section inside it is charged by it, not again.
    static METERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread's CPU time as charged by the caller (`true`) or no longer (`false`); returns
/// the previous mark.
pub(crate) fn set_metered(on: bool) -> bool {
    METERED.try_with(|m| m.replace(on)).unwrap_or(true)
}

/// True while this thread's CPU time is charged by an enclosing measurement (see `set_metered`).
pub(crate) fn is_metered() -> bool {
    METERED.try_with(|m| m.get()).unwrap_or(true)
}

/// An identity of the calling thread, cheaper than its `ThreadId`: the address of a thread-local.
fn this_thread() -> usize {
    thread_local! {
        static MARK: u8 = const { 0 };
    }
    MARK.with(|m| m as *const u8 as usize)
}

/// Adds a charge's service and polls to its group's metrics.
fn flush(c: Charge) {
    c.group.record_service(c.polls, c.ns);
}
