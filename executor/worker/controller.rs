//! The worker-count controller: how many of a runtime's cores run, between `worker_threads` and
//! `max_worker_threads` (`Builder::max_worker_threads`). It runs in the stall monitor's thread, at
//! the monitor's ticks; a runtime whose two counts are equal has none.
//!
//! A runtime with room to grow keeps all its cores from the start, each on its own thread; the
//! cores beyond the active count are dormant (`idle`, steps 6 and 7): parked, never woken for
//! work. The controller moves the count:
//!
//! 1. **Look.** At each tick the monitor notes the active cores in a poll (their lent word).
//!    While the active count is below the maximum, every active core is awake, and work waits to
//!    run (a listed group, the lane, a stealable local queue), it asks the operating system
//!    (`os_thread`) whether the threads of up to [`SAMPLE`] of those polls are blocked now
//!    (sleeping or waiting in the kernel) rather than running or waiting for a CPU. A sample at a
//!    random instant finds a poll blocked about as often as the share of its time it blocks, so a
//!    poll that computes and makes the odd short system call is rarely seen blocked, and one that
//!    waits for a millisecond in a blocking call is seen at once, without waiting a tick to see
//!    it span one. The ticks come every [`TICK`] while a worker is awake; each sample that finds
//!    no poll blocked doubles that interval, up to [`QUIET_TICK`], so a CPU-bound load costs the
//!    monitor a wake-up and a sample every 2 ms rather than every 250 µs; a blocked poll, or a
//!    wake from an idle spell, brings it back. The first worker to wake from an idle spell arms
//!    the monitor's alarm one `TICK` later (`idle`; a fixed count waits its longest tick), so a
//!    blocking load is looked at within a tick of its start.
//! 2. **Add.** If any is blocked, the blocked share of the sampled polls, times the awake cores,
//!    estimates the blocked workers, and the controller adds two cores for each: one takes the
//!    blocked poll's place on the CPU (Go's rule: a processor handed on for each thread in a
//!    system call), the other starts the next waiting task early, since tasks queued behind a
//!    blocking one tend to block alike and a wait only overlaps the others once its task has a
//!    core. The cores up to the target (at most the maximum) are activated at once: the active
//!    count is stored, then each newly active sleeper is woken (`idle`, step 6). Under a wholly
//!    blocking load each round triples the count (2, 6, 18, 54, 64: a few milliseconds); under a
//!    mixed one it grows by twice the blocked share while tasks wait. Polls that run on the CPU
//!    are never blocked, so CPU-bound work adds nothing.
//! 3. **Retire.** Over each window of [`WINDOW`] the controller keeps the most cores it saw awake
//!    at a tick. At the window's end, if it added nothing in the window and that peak is below
//!    the active count, it lowers the count by half the surplus (at least one), never below
//!    `worker_threads` nor the peak: after a blocking load ends, 64 cores are back to 2 within
//!    six windows (1.5 s). A retired core finishes its poll and its own queues, then parks
//!    dormant (`idle`, step 7).
//! 4. **Count.** Each decision is counted with its reason (`monitor_state::CoreCounts`, read by
//!    `RuntimeMetrics`) and traced (feature `tracing`).
//! 5. **Shares.** With more cores in polls than CPUs, the operating system shares the CPUs by
//!    thread: once every runnable task of a group is in a poll, a group with more tasks holds
//!    more threads and gets more CPU time whatever the weights (the rotation has nothing of the
//!    other group to pick). So each sample also says whether the CPUs are *saturated*: at least
//!    `worker_threads` of the awake cores run rather than block (the last sample's estimate is
//!    kept between samples; at the maximum the controller still asks every
//!    [`SAMPLE_AT_MAX_EVERY`]). And each tick reads from the group scheduler the spread of the
//!    virtual runtimes of the groups the workers reported serving within [`CEILING_FRESH`] and
//!    of the first listed group (`Scheduler::spread_hint`). While the CPUs are saturated and
//!    that spread exceeds [`FAIR_LEAD_QUANTA`] quanta, more cores would only run more of the
//!    group ahead: the controller adds none, and every [`SHED_EVERY`] it lowers the count by a
//!    quarter of the surplus over `worker_threads`, until the groups behind have tasks waiting
//!    again and the rotation, which picks the group behind first, restores the shares. A single
//!    group is never ahead of itself, so loads of one group are unaffected.
//!
//! While cores beyond `worker_threads` are active the monitor does not sleep through idle spells:
//! it keeps ticking (at most every half stall threshold) so that it can retire them. While any
//! worker is awake it ticks at least every [`Controller::tick`], so each round of additions takes
//! a tick.
//! Without `/proc` (no way to tell a blocked thread) the count never grows.

use std::time::{Duration, Instant};

use crate::shim::Ordering;

use super::shared::Shared;

/// The longest interval between the monitor's ticks while a worker is awake and the count may
/// grow.
pub(super) const TICK: Duration = Duration::from_micros(250);
/// The longest interval the tick grows to while samples find no blocked poll (step 1).
pub(super) const QUIET_TICK: Duration = Duration::from_millis(2);
/// The retirement window (step 3).
pub(super) const WINDOW: Duration = Duration::from_millis(250);
/// The most polls' threads asked at one tick (step 1).
pub(super) const SAMPLE: usize = 16;
/// How often the controller asks at the maximum count, to see whether the CPUs are saturated
/// (step 5).
const SAMPLE_AT_MAX_EVERY: Duration = Duration::from_millis(2);
/// How far, in quanta, the groups with work waiting may be ahead of the floor before the count
/// counts as unfair (step 5).
const FAIR_LEAD_QUANTA: u32 = 16;
/// How recent a worker's report of the group it serves must be to count for step 5.
const CEILING_FRESH: Duration = Duration::from_millis(2);
/// Least time between two retirements for the groups' shares (step 5).
const SHED_EVERY: Duration = Duration::from_millis(1);

/// What the controller saw at one tick (step 1).
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// Active cores now.
    pub(super) active: usize,
    /// Awake cores now (running, searching or blocked in a poll).
    pub(super) awake: usize,
    /// Polls' threads asked whether they are blocked.
    pub(super) asked: usize,
    /// Of those, blocked.
    pub(super) blocked: usize,
}

/// What the group scheduler shows at a tick (step 5).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Shares {
    /// Every group with work waiting is ahead of the floor (the smallest virtual runtime among
    /// the groups listed or served) by more than [`FAIR_LEAD_QUANTA`] quanta: the groups behind
    /// have all their runnable tasks in polls.
    pub(super) waiting_ahead: bool,
}

impl Shares {
    /// Reads the scheduler's hints.
    fn read(shared: &Shared) -> Shares {
        let scheduler = shared.scheduler();
        let fresh = crate::clock::nanos(CEILING_FRESH);
        let lead = u64::try_from((shared.config().quantum * FAIR_LEAD_QUANTA).as_nanos())
            .unwrap_or(u64::MAX);
        let spread = scheduler.spread_hint(fresh);
        Shares {
            waiting_ahead: spread.is_some_and(|(lo, hi)| hi > lo.saturating_add(lead)),
        }
    }
}

/// A decision (steps 2 and 3): the new active count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Keep the count.
    Keep,
    /// Raise it to this count: polls were blocked while work waited.
    Add(usize),
    /// Lower it to this count: fewer cores were awake than active over a window.
    Retire(usize),
    /// Lower it to this count: the CPUs are saturated and only groups ahead of their share wait.
    Shed(usize),
}

/// The controller's state across ticks.
pub(super) struct Controller {
    base: usize,
    max: usize,
    window_start: Instant,
    /// The most cores awake at a tick of this window.
    peak_awake: usize,
    added_in_window: bool,
    /// The last sample saw at least `base` polls running (step 5).
    saturated: bool,
    /// When the controller last asked at the maximum count, and last shed cores (step 5).
    sampled_at: std::cell::Cell<Instant>,
    shed_at: Instant,
    /// The interval between the monitor's ticks while a worker is awake (step 1): [`TICK`],
    /// doubled after each sample that found no poll blocked, up to [`QUIET_TICK`].
    tick: Duration,
}

impl Controller {
    /// A controller between `base` and `max` cores; `None` if they are equal (a fixed count).
    pub(super) fn new(base: usize, max: usize, now: Instant) -> Option<Self> {
        (max > base).then_some(Controller {
            base,
            max,
            window_start: now,
            peak_awake: 0,
            added_in_window: false,
            saturated: false,
            sampled_at: std::cell::Cell::new(now),
            shed_at: now,
            tick: TICK,
        })
    }

    /// The longest interval to the monitor's next tick while a worker is awake (step 1).
    pub(super) fn tick(&self) -> Duration {
        self.tick
    }

    /// The workers woke from an idle spell: a new load begins, look at it at once (step 1).
    pub(super) fn woke(&mut self) {
        self.tick = TICK;
    }

    /// True if the caller should look for blocked polls (step 1) before it decides.
    pub(super) fn wants_sample(&self, active: usize, awake: usize) -> bool {
        if awake < active {
            return false;
        }
        if active < self.max {
            return true;
        }
        let now = Instant::now();
        let due = now.saturating_duration_since(self.sampled_at.get()) >= SAMPLE_AT_MAX_EVERY;
        if due {
            self.sampled_at.set(now);
        }
        due
    }

    /// Decides from one tick's sample and the scheduler's hints (steps 2, 3 and 5).
    pub(super) fn decide(&mut self, now: Instant, s: Sample, shares: Shares) -> Decision {
        let awake = s.awake.min(s.active);
        self.peak_awake = self.peak_awake.max(awake);
        if s.asked > 0 {
            self.tick = if s.blocked > 0 {
                TICK
            } else {
                (self.tick * 2).min(QUIET_TICK)
            };
            let blocked = (s.blocked * s.awake).div_ceil(s.asked).min(s.awake);
            self.saturated = s.awake - blocked >= self.base;
        }
        if self.saturated && shares.waiting_ahead {
            // Step 5: more cores would only run more of the groups ahead.
            if s.active > self.base && now.saturating_duration_since(self.shed_at) >= SHED_EVERY {
                self.shed_at = now;
                let surplus = s.active - self.base;
                return Decision::Shed(s.active - surplus.div_ceil(4));
            }
            return Decision::Keep;
        }
        if s.blocked > 0 && s.asked > 0 && s.active < self.max && s.awake >= s.active {
            let blocked = (s.blocked * s.awake).div_ceil(s.asked);
            let target = (s.active + 2 * blocked).min(self.max);
            if target > s.active {
                self.added_in_window = true;
                return Decision::Add(target);
            }
        }
        if now.saturating_duration_since(self.window_start) < WINDOW {
            return Decision::Keep;
        }
        let peak = std::mem::replace(&mut self.peak_awake, awake);
        let added = std::mem::take(&mut self.added_in_window);
        self.window_start = now;
        if added || s.active <= self.base || peak >= s.active {
            return Decision::Keep;
        }
        let keep = self.base.max(peak);
        let surplus = s.active - keep;
        Decision::Retire(s.active - surplus.div_ceil(2))
    }
}

/// Decides from one tick's sample (steps 2, 3 and 5) and applies the decision (step 4).
pub(super) fn control(shared: &Shared, c: &mut Controller, now: Instant, sample: Sample) {
    let decision = c.decide(now, sample, Shares::read(shared));
    apply(shared, sample.active, decision);
}

/// Applies `decision` to `shared`'s cores (steps 2 to 4).
fn apply(shared: &Shared, active: usize, decision: Decision) {
    let idle = shared.idle();
    let counts = shared.monitor().core_counts();
    match decision {
        Decision::Keep => {}
        Decision::Add(to) => {
            idle.set_active(to);
            let cores = shared.cores();
            for idx in active..to {
                let mark = |i: usize| cores[i].notified.store(true, Ordering::Release);
                if idle.activate(idx, mark) {
                    cores[idx].parker.unpark();
                }
            }
            counts.added(to - active, to);
            trace_event!(
                DEBUG,
                from = active,
                to,
                reason = "polls blocked while tasks waited",
                "worker cores added"
            );
        }
        Decision::Retire(to) => {
            idle.set_active(to);
            counts.retired(active - to);
            trace_event!(
                DEBUG,
                from = active,
                to,
                reason = "fewer cores awake than active over a window",
                "worker cores retired"
            );
        }
        Decision::Shed(to) => {
            idle.set_active(to);
            counts.shed(active - to);
            trace_event!(
                DEBUG,
                from = active,
                to,
                reason = "CPUs saturated while only groups ahead of their share waited",
                "worker cores retired"
            );
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const FAIR: Shares = Shares {
        waiting_ahead: false,
    };
    const UNFAIR: Shares = Shares {
        waiting_ahead: true,
    };

    fn sample(active: usize, awake: usize, asked: usize, blocked: usize) -> Sample {
        Sample {
            active,
            awake,
            asked,
            blocked,
        }
    }

    #[test]
    fn the_tick_grows_while_samples_find_nothing_blocked_and_returns_at_a_blocked_poll_or_a_wake() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        assert_eq!(c.tick(), TICK);
        // A CPU-bound load: every sample finds its polls running.
        let mut ticks = Vec::new();
        for _ in 0..8 {
            c.decide(t0, sample(2, 2, 2, 0), FAIR);
            ticks.push(c.tick());
        }
        assert_eq!(ticks[0], TICK * 2);
        assert_eq!(ticks[1], TICK * 4);
        assert!(ticks.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*ticks.last().unwrap(), QUIET_TICK);
        // No sample (work does not wait): the tick stays.
        c.decide(t0, sample(2, 2, 0, 0), FAIR);
        assert_eq!(c.tick(), QUIET_TICK);
        // A blocked poll: back to the short tick, and cores are added.
        assert_eq!(c.decide(t0, sample(2, 2, 2, 1), FAIR), Decision::Add(4));
        assert_eq!(c.tick(), TICK);
        // After a quiet stretch, a wake from an idle spell also looks at once.
        for _ in 0..8 {
            c.decide(t0, sample(4, 4, 4, 0), FAIR);
        }
        assert_eq!(c.tick(), QUIET_TICK);
        c.woke();
        assert_eq!(c.tick(), TICK);
    }

    #[test]
    fn a_fixed_count_has_no_controller() {
        assert!(Controller::new(4, 4, Instant::now()).is_none());
    }

    #[test]
    fn blocked_polls_while_all_are_awake_add_two_cores_each() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        // All blocked: the count triples.
        assert_eq!(c.decide(t0, sample(2, 2, 2, 2), FAIR), Decision::Add(6));
        assert_eq!(c.decide(t0, sample(6, 6, 6, 6), FAIR), Decision::Add(18));
        assert_eq!(
            c.decide(t0, sample(18, 18, 16, 16), FAIR),
            Decision::Add(54)
        );
        // Three of four blocked: twice three quarters of the awake cores more.
        assert_eq!(c.decide(t0, sample(4, 4, 4, 3), FAIR), Decision::Add(10));
        assert_eq!(c.decide(t0, sample(16, 16, 8, 1), FAIR), Decision::Add(20));
        // Never past the maximum.
        assert_eq!(
            c.decide(t0, sample(40, 40, 16, 16), FAIR),
            Decision::Add(64)
        );
        assert_eq!(c.decide(t0, sample(64, 64, 16, 16), FAIR), Decision::Keep);
    }

    #[test]
    fn running_polls_add_nothing() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        assert_eq!(c.decide(t0, sample(2, 2, 2, 0), FAIR), Decision::Keep);
        assert_eq!(c.decide(t0, sample(2, 2, 0, 0), FAIR), Decision::Keep);
        // An idle active core means no core is missing.
        assert_eq!(c.decide(t0, sample(4, 3, 3, 3), FAIR), Decision::Keep);
    }

    #[test]
    fn unused_cores_retire_by_halves_once_per_window_down_to_the_base() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        let mut active = 64;
        let mut t = t0;
        let mut windows = 0;
        while active > 2 {
            t += WINDOW;
            windows += 1;
            match c.decide(t, sample(active, 0, 0, 0), FAIR) {
                Decision::Retire(to) => {
                    assert!(to < active && to >= 2);
                    active = to;
                }
                d => panic!("expected a retirement, got {d:?}"),
            }
            assert!(windows <= 8, "retiring 62 cores took too many windows");
        }
        // Not before a window has passed.
        assert_eq!(
            c.decide(t + WINDOW / 2, sample(2, 0, 0, 0), FAIR),
            Decision::Keep
        );
    }

    #[test]
    fn a_window_with_an_addition_or_all_cores_awake_retires_nothing() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        assert_eq!(c.decide(t0, sample(2, 2, 2, 2), FAIR), Decision::Add(6));
        assert_eq!(
            c.decide(t0 + WINDOW, sample(4, 0, 0, 0), FAIR),
            Decision::Keep
        );
        // All awake at some tick of the window: they pay.
        assert_eq!(
            c.decide(t0 + WINDOW, sample(4, 4, 0, 0), FAIR),
            Decision::Keep
        );
        assert_eq!(
            c.decide(t0 + 2 * WINDOW, sample(4, 1, 0, 0), FAIR),
            Decision::Keep
        );
        // The peak of that window was 4: retire only in the next one.
        assert_eq!(
            c.decide(t0 + 3 * WINDOW, sample(4, 1, 0, 0), FAIR),
            Decision::Retire(3)
        );
    }

    #[test]
    fn a_group_ahead_on_saturated_cpus_sheds_cores_instead_of_adding() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        // Polls blocked while tasks wait: cores are added, whatever the shares, while the
        // polls that run do not fill the CPUs.
        assert_eq!(c.decide(t0, sample(2, 2, 2, 2), UNFAIR), Decision::Add(6));
        // 32 active, 12 of 16 asked blocked: 8 run, more than the 2 CPUs. A group ahead: the
        // surplus sheds by a quarter, at most once per `SHED_EVERY`.
        assert_eq!(
            c.decide(t0 + SHED_EVERY, sample(32, 32, 16, 12), UNFAIR),
            Decision::Shed(24)
        );
        assert_eq!(
            c.decide(t0 + SHED_EVERY, sample(24, 24, 16, 12), UNFAIR),
            Decision::Keep
        );
        // The next one is due a `SHED_EVERY` later; the last sample said saturated.
        assert_eq!(
            c.decide(t0 + 2 * SHED_EVERY, sample(24, 24, 0, 0), UNFAIR),
            Decision::Shed(18)
        );
        // Never below the base.
        let mut c = Controller::new(2, 64, t0).unwrap();
        assert_eq!(
            c.decide(t0 + SHED_EVERY, sample(2, 2, 2, 0), UNFAIR),
            Decision::Keep
        );
        // Saturated but fair: additions go on as before.
        let mut c = Controller::new(2, 64, t0).unwrap();
        assert_eq!(c.decide(t0, sample(8, 8, 8, 4), FAIR), Decision::Add(16));
        // Unfair but the CPUs not saturated (every poll blocked): additions go on.
        assert_eq!(
            c.decide(t0, sample(16, 16, 16, 16), UNFAIR),
            Decision::Add(48)
        );
    }
}
