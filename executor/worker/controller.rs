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
//!    it span one.
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
//!
//! While cores beyond `worker_threads` are active the monitor does not sleep through idle spells:
//! it keeps ticking (at most every half stall threshold) so that it can retire them. While any
//! worker is awake it ticks at least every [`TICK`], so each round of additions takes a tick.
//! Without `/proc` (no way to tell a blocked thread) the count never grows.

use std::time::{Duration, Instant};

use crate::shim::Ordering;

use super::shared::Shared;

/// The longest interval between the monitor's ticks while a worker is awake and the count may
/// grow.
pub(super) const TICK: Duration = Duration::from_micros(250);
/// The retirement window (step 3).
pub(super) const WINDOW: Duration = Duration::from_millis(250);
/// The most polls' threads asked at one tick (step 1).
pub(super) const SAMPLE: usize = 16;

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

/// A decision (steps 2 and 3): the new active count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Keep the count.
    Keep,
    /// Raise it to this count: polls were blocked while work waited.
    Add(usize),
    /// Lower it to this count: fewer cores were awake than active over a window.
    Retire(usize),
}

/// The controller's state across ticks.
pub(super) struct Controller {
    base: usize,
    max: usize,
    window_start: Instant,
    /// The most cores awake at a tick of this window.
    peak_awake: usize,
    added_in_window: bool,
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
        })
    }

    /// True if the caller should look for blocked polls (step 1) before it decides.
    pub(super) fn wants_sample(&self, active: usize, awake: usize) -> bool {
        active < self.max && awake >= active
    }

    /// Decides from one tick's sample (steps 2 and 3).
    pub(super) fn decide(&mut self, now: Instant, s: Sample) -> Decision {
        let awake = s.awake.min(s.active);
        self.peak_awake = self.peak_awake.max(awake);
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

/// Applies `decision` to `shared`'s cores (steps 2 to 4).
pub(super) fn apply(shared: &Shared, active: usize, decision: Decision) {
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
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sample(active: usize, awake: usize, asked: usize, blocked: usize) -> Sample {
        Sample {
            active,
            awake,
            asked,
            blocked,
        }
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
        assert_eq!(c.decide(t0, sample(2, 2, 2, 2)), Decision::Add(6));
        assert_eq!(c.decide(t0, sample(6, 6, 6, 6)), Decision::Add(18));
        assert_eq!(c.decide(t0, sample(18, 18, 16, 16)), Decision::Add(54));
        // Three of four blocked: twice three quarters of the awake cores more.
        assert_eq!(c.decide(t0, sample(4, 4, 4, 3)), Decision::Add(10));
        assert_eq!(c.decide(t0, sample(16, 16, 8, 1)), Decision::Add(20));
        // Never past the maximum.
        assert_eq!(c.decide(t0, sample(40, 40, 16, 16)), Decision::Add(64));
        assert_eq!(c.decide(t0, sample(64, 64, 16, 16)), Decision::Keep);
    }

    #[test]
    fn running_polls_add_nothing() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        assert_eq!(c.decide(t0, sample(2, 2, 2, 0)), Decision::Keep);
        assert_eq!(c.decide(t0, sample(2, 2, 0, 0)), Decision::Keep);
        // An idle active core means no core is missing.
        assert_eq!(c.decide(t0, sample(4, 3, 3, 3)), Decision::Keep);
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
            match c.decide(t, sample(active, 0, 0, 0)) {
                Decision::Retire(to) => {
                    assert!(to < active && to >= 2);
                    active = to;
                }
                d => panic!("expected a retirement, got {d:?}"),
            }
            assert!(windows <= 8, "retiring 62 cores took too many windows");
        }
        // Not before a window has passed.
        assert_eq!(c.decide(t + WINDOW / 2, sample(2, 0, 0, 0)), Decision::Keep);
    }

    #[test]
    fn a_window_with_an_addition_or_all_cores_awake_retires_nothing() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 64, t0).unwrap();
        assert_eq!(c.decide(t0, sample(2, 2, 2, 2)), Decision::Add(6));
        assert_eq!(c.decide(t0 + WINDOW, sample(4, 0, 0, 0)), Decision::Keep);
        // All awake at some tick of the window: they pay.
        assert_eq!(c.decide(t0 + WINDOW, sample(4, 4, 0, 0)), Decision::Keep);
        assert_eq!(
            c.decide(t0 + 2 * WINDOW, sample(4, 1, 0, 0)),
            Decision::Keep
        );
        // The peak of that window was 4: retire only in the next one.
        assert_eq!(
            c.decide(t0 + 3 * WINDOW, sample(4, 1, 0, 0)),
            Decision::Retire(3)
        );
    }
}
