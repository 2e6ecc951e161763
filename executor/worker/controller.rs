//! The worker-count controller: how many of a runtime's cores run, between `worker_threads` and
//! `max_worker_threads` (`Builder::max_worker_threads`), and below `worker_threads` down to the
//! CPUs the process may use (`cpus`) when there are fewer. It runs in the stall monitor's thread,
//! at the monitor's ticks; a runtime whose two counts are equal and within the CPUs has none (no
//! ticks of its own, no `/proc` reads).
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
//!    the *floor* of the awake cores run rather than block (the last sample's estimate is kept
//!    between samples; at the maximum the controller still asks every [`SAMPLE_AT_MAX_EVERY`]).
//!    The floor is `worker_threads`, or the CPUs the process may use (`cpus`: affinity and cgroup
//!    quota, read at build) if there are fewer. And each tick reads from the group scheduler the
//!    spread of the virtual runtimes of the groups the workers reported serving within
//!    [`CEILING_FRESH`] and of the first listed group, and the lag of the tree paths they
//!    reported (`Scheduler::spread_hint`). While the CPUs
//!    are saturated and that spread exceeds [`FAIR_LEAD_QUANTA`] quanta
//!    ([`OVERSUBSCRIBED_LEAD_QUANTA`] while the floor is below `worker_threads`: a group behind
//!    there may be a heavy one whose virtual runtime moves slowly), more cores would only run
//!    more of the group ahead: the controller adds none, and every [`SHED_EVERY`] it lowers the
//!    count by a quarter of the surplus over the floor, until the groups behind have tasks
//!    waiting again and the rotation, which picks the group behind first, restores the shares.
//!    While the floor is below `worker_threads` it sheds the whole surplus at once, and an
//!    uneven reading counts for [`UNEVEN_MEMORY`]: there the monitor's own thread shares the
//!    CPUs with more threads than CPUs, so its ticks come late, and a worker reports its group
//!    late, so the readings flicker.
//!    A single group is never ahead of itself (the spread counts only while the workers served
//!    two groups or more), so loads of one group are unaffected. Within a tenant tree the
//!    workers also publish the lag of the path they serve (`fair::tree`, step 6: two entities
//!    of one node apart, scaled to the root's frame): a lag of more than a
//!    [`TREE_LEAD_DIVISOR`]th of the lead is uneven too, so a tree whose groups drift from
//!    their shares sheds as groups that spread do, one top-level group or several. The tree's
//!    lag is read under its lock at one instant and does not flicker, and a group with a small
//!    share of its tree lags most in its share for a given lag in the root's frame, hence the
//!    smaller lead.
//! 6. **Give back.** Cores shed below `worker_threads` (only where it exceeds the CPUs) come
//!    back all at once, to `worker_threads`, once the shares have read even, with no two groups
//!    competing (two top-level groups served, or a tree path served beside another active
//!    entity), at every tick for a *hold* (from [`MIN_HOLD`]), or as step 2 adds them when polls
//!    block. Even shares while groups still compete are the shed's own doing: cores given back
//!    then would share the CPUs by thread again until the next shed, and the groups' shares
//!    would swing over those milliseconds. The hold is the hysteresis: if the first shed after a
//!    give-back comes within the hold (the load that needed the shed is back), the hold
//!    doubles, up to [`MAX_HOLD`]; a first shed later than that starts again from [`MIN_HOLD`].
//!    A steady load that needs the shed thus stays at the floor while it lasts, and a user who
//!    asked for more threads than CPUs for blocking work keeps them.
//!
//! While the active count differs from `worker_threads` the monitor does not sleep through idle
//! spells: it keeps ticking (at most every half stall threshold) so that it can retire the extra
//! cores or give the shed ones back (an idle runtime's shares read even). While any worker is
//! awake it ticks at least every [`Controller::tick`]: step 1's interval if the count may grow
//! past `worker_threads` (so each round of additions takes a tick), [`SHED_EVERY`] at a fixed
//! count above the CPUs (where additions only give shed cores back). Without `/proc` (no way to
//! tell a blocked thread) the count never grows, and the CPUs never read as saturated, so nothing
//! is shed.

use std::time::{Duration, Instant};

use crate::shim::Ordering;

use super::idle::Idle;
use super::monitor_state::CoreCounts;
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
/// How far, in quanta, the groups with work waiting may be ahead of the floor before the count
/// counts as unfair, while more cores are active than CPUs (step 5): a group behind there gets
/// at most its threads' part of the CPUs, however heavy, so the signal must come early.
const OVERSUBSCRIBED_LEAD_QUANTA: u32 = 4;
/// A tree's lag (`Scheduler::spread_hint`) counts as unfair from this fraction of the lead
/// between groups: it is read at one instant under the tree's lock, so it does not flicker as
/// the groups' spread does, and the groups of a tree with a small share of it lag the most in
/// their share for a given lag in the root's frame.
const TREE_LEAD_DIVISOR: u64 = 4;
/// How long one uneven reading counts, while more cores are active than CPUs (step 5): the
/// spread reads a group only while its worker's report is fresh, and a worker that shares a CPU
/// with several threads reports late, so the readings flicker.
const UNEVEN_MEMORY: Duration = Duration::from_millis(10);
/// The shortest time the shares must read even before cores shed below `worker_threads` come
/// back (step 6).
const MIN_HOLD: Duration = WINDOW;
/// The longest: the hold doubles after each give-back that had to be shed again within it.
const MAX_HOLD: Duration = Duration::from_secs(4);

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
    /// the groups listed or served) by more than the lead ([`FAIR_LEAD_QUANTA`] or
    /// [`OVERSUBSCRIBED_LEAD_QUANTA`] quanta), or a tree being served lags by more than a
    /// [`TREE_LEAD_DIVISOR`]th of it: the groups behind have all their runnable tasks in polls.
    pub(super) waiting_ahead: bool,
    /// Two or more top-level groups were served within [`CEILING_FRESH`], or a tree path being
    /// served has another active entity beside it at some node: the groups compete for the
    /// CPUs, so cores given back would share them by thread again (step 6 waits).
    pub(super) contended: bool,
}

impl Shares {
    /// Reads the scheduler's hints; a spread between groups of more than `lead_quanta` quanta
    /// is unfair, and a lag within a tree of more than a [`TREE_LEAD_DIVISOR`]th of that.
    fn read(shared: &Shared, lead_quanta: u32) -> Shares {
        let scheduler = shared.scheduler();
        let fresh = crate::clock::nanos(CEILING_FRESH);
        let lead =
            u64::try_from((shared.config().quantum * lead_quanta).as_nanos()).unwrap_or(u64::MAX);
        let spread = scheduler.spread_hint(fresh);
        Shares {
            waiting_ahead: spread.groups.is_some_and(|s| s > lead)
                || spread.tree_lag > lead / TREE_LEAD_DIVISOR,
            contended: spread.groups.is_some() || spread.tree_lag > 0,
        }
    }
}

/// A decision (steps 2, 3, 5 and 6): the new active count.
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
    /// Raise it to this count (`worker_threads`): the shares read even for the hold since cores
    /// were shed below it.
    Restore(usize),
}

/// The controller's state across ticks.
pub(super) struct Controller {
    /// The least active count: `base`, or the CPUs if fewer (step 5).
    floor: usize,
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
    /// Since when the shares read even while the count is below `base` (step 6).
    even_since: Option<Instant>,
    /// How long they must read even before the shed cores come back (step 6).
    hold: Duration,
    /// The last tick whose shares read uneven (step 5).
    uneven_at: Option<Instant>,
    /// When `saturated` was last sampled.
    saturated_at: Instant,
    /// When the shed cores last came back, until the next shed (step 6).
    restored_at: Option<Instant>,
}

impl Controller {
    /// A controller between `base` and `max` cores, shedding for the shares down to `cpus` if
    /// there are fewer; `None` for a fixed count (`base == max`) within the CPUs.
    pub(super) fn new(cpus: usize, base: usize, max: usize, now: Instant) -> Option<Self> {
        let floor = base.min(cpus.max(1));
        (max > base || floor < base).then_some(Controller {
            floor,
            base,
            max,
            window_start: now,
            peak_awake: 0,
            added_in_window: false,
            saturated: false,
            sampled_at: std::cell::Cell::new(now),
            shed_at: now,
            tick: TICK,
            even_since: None,
            hold: MIN_HOLD,
            uneven_at: None,
            saturated_at: now,
            restored_at: None,
        })
    }

    /// How far, in quanta, the groups served may spread before step 5 sheds.
    pub(super) fn lead_quanta(&self) -> u32 {
        if self.floor < self.base {
            OVERSUBSCRIBED_LEAD_QUANTA
        } else {
            FAIR_LEAD_QUANTA
        }
    }

    /// The longest interval between the monitor's ticks while a worker is awake: step 1's
    /// interval ([`TICK`] to [`QUIET_TICK`]) if the count may grow past `worker_threads`, else
    /// [`SHED_EVERY`] (a fixed count above the
    /// CPUs: steps 5 and 6, and step 2 only to give shed cores back).
    pub(super) fn tick(&self) -> Duration {
        if self.max > self.base {
            self.tick
        } else {
            SHED_EVERY
        }
    }

    /// The workers woke from an idle spell: a new load begins, look at it at once (step 1).
    pub(super) fn woke(&mut self) {
        self.tick = TICK;
    }

    /// True if the caller should look for blocked polls (step 1) before it decides: at every
    /// tick while all active cores are awake and the count may grow, else every
    /// [`SAMPLE_AT_MAX_EVERY`] for step 5, while all active cores are awake. While the floor is
    /// below `worker_threads`, step 5 samples at once on an uneven reading (`shares`, read
    /// first) and then as usual for [`UNEVEN_MEMORY`], never otherwise (loads of one group read
    /// no `/proc`), once more cores than the floor are awake (cores still waking on an
    /// oversubscribed machine can already saturate its CPUs).
    pub(super) fn wants_sample(&self, active: usize, awake: usize, shares: Shares) -> bool {
        if awake >= active && active < self.max {
            return true;
        }
        let now = Instant::now();
        let saturating = if self.floor < self.base {
            if awake > self.floor && shares.waiting_ahead {
                // The first uneven reading: whether to shed depends on this sample.
                return true;
            }
            awake > self.floor && self.uneven_within(now)
        } else {
            awake >= active
        };
        if !saturating {
            return false;
        }
        let due = now.saturating_duration_since(self.sampled_at.get()) >= SAMPLE_AT_MAX_EVERY;
        if due {
            self.sampled_at.set(now);
        }
        due
    }

    /// True if an uneven reading came within [`UNEVEN_MEMORY`] before `now`.
    fn uneven_within(&self, now: Instant) -> bool {
        self.uneven_at
            .is_some_and(|t| now.saturating_duration_since(t) < UNEVEN_MEMORY)
    }

    /// Decides from one tick's sample and the scheduler's hints (steps 2, 3, 5 and 6).
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
            self.saturated = s.awake - blocked >= self.floor;
            self.saturated_at = now;
        }
        let oversubscribed = self.floor < self.base;
        if shares.waiting_ahead {
            self.uneven_at = Some(now);
        }
        let uneven = shares.waiting_ahead || (oversubscribed && self.uneven_within(now));
        // Oversubscribed, samples are taken only after uneven readings: an old one is no news.
        let saturated = self.saturated
            && (!oversubscribed
                || now.saturating_duration_since(self.saturated_at) < UNEVEN_MEMORY);
        if saturated && uneven {
            // Step 5: more cores would only run more of the groups ahead.
            self.even_since = None;
            if s.active > self.floor && now.saturating_duration_since(self.shed_at) >= SHED_EVERY {
                self.shed_at = now;
                if s.active >= self.base {
                    self.regret(now);
                }
                let surplus = s.active - self.floor;
                let step = if oversubscribed {
                    surplus
                } else {
                    surplus.div_ceil(4)
                };
                return Decision::Shed(s.active - step);
            }
            return Decision::Keep;
        }
        if let Some(d) = self.give_back(now, s.active, shares.contended) {
            return d;
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

impl Controller {
    /// Step 6: the cores shed below `base` come back once the shares read even, with no groups
    /// `contended` for the CPUs, for the hold.
    fn give_back(&mut self, now: Instant, active: usize, contended: bool) -> Option<Decision> {
        if active >= self.base || contended {
            self.even_since = None;
            return None;
        }
        let since = *self.even_since.get_or_insert(now);
        if now.saturating_duration_since(since) < self.hold {
            return None;
        }
        self.even_since = None;
        self.restored_at = Some(now);
        Some(Decision::Restore(self.base))
    }

    /// Step 6's hysteresis, at the first shed from `base` or more: a give-back that had to be
    /// shed again within its hold doubles the hold; a shed long after one (or without one)
    /// starts again from [`MIN_HOLD`].
    fn regret(&mut self, now: Instant) {
        self.hold = match self.restored_at.take() {
            Some(at) if now.saturating_duration_since(at) < self.hold => {
                (self.hold * 2).min(MAX_HOLD)
            }
            _ => MIN_HOLD,
        };
    }
}

/// The scheduler's hints at one tick (step 5), read before the sample (step 1), which an
/// uneven reading asks for.
pub(super) fn read_shares(shared: &Shared, c: &Controller) -> Shares {
    Shares::read(shared, c.lead_quanta())
}

/// Decides from one tick's sample and hints (steps 2, 3, 5 and 6) and applies the decision
/// (step 4).
pub(super) fn control(
    shared: &Shared,
    c: &mut Controller,
    now: Instant,
    sample: Sample,
    shares: Shares,
) {
    let decision = c.decide(now, sample, shares);
    apply(shared, sample.active, decision);
}

/// Applies `decision` to `shared`'s cores (steps 2 to 4).
fn apply(shared: &Shared, active: usize, decision: Decision) {
    let cores = shared.cores();
    apply_to(
        shared.idle(),
        shared.monitor().core_counts(),
        active,
        decision,
        |idx| {
            let mark = |i: usize| cores[i].notified.store(true, Ordering::Release);
            if shared.idle().activate(idx, mark) {
                cores[idx].parker.unpark();
            }
        },
    );
}

/// [`apply`]'s steps on the active count, its statistics and `activate` (which wakes core
/// `idx` if it sleeps). The decision is counted before the active count changes: whoever reads
/// the new count (a `SeqCst` store and load, `Idle::set_active`, `Idle::active`) then reads the
/// decision among the statistics too, as the metrics' readers expect.
fn apply_to(
    idle: &Idle,
    counts: &CoreCounts,
    active: usize,
    decision: Decision,
    mut activate: impl FnMut(usize),
) {
    match decision {
        Decision::Keep => {}
        Decision::Add(to) | Decision::Restore(to) => {
            if matches!(decision, Decision::Add(_)) {
                counts.added(to - active, to);
                trace_event!(
                    DEBUG,
                    from = active,
                    to,
                    reason = "polls blocked while tasks waited",
                    "worker cores added"
                );
            } else {
                counts.restored(to - active);
                trace_event!(
                    DEBUG,
                    from = active,
                    to,
                    reason = "the groups' shares stayed even since cores were shed",
                    "worker cores restored"
                );
            }
            idle.set_active(to);
            for idx in active..to {
                activate(idx);
            }
        }
        Decision::Retire(to) => {
            counts.retired(active - to);
            idle.set_active(to);
            trace_event!(
                DEBUG,
                from = active,
                to,
                reason = "fewer cores awake than active over a window",
                "worker cores retired"
            );
        }
        Decision::Shed(to) => {
            counts.shed(active - to);
            idle.set_active(to);
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
        contended: false,
    };
    const UNFAIR: Shares = Shares {
        waiting_ahead: true,
        contended: true,
    };
    /// Groups served side by side, their shares even.
    const EVEN: Shares = Shares {
        waiting_ahead: false,
        contended: true,
    };

    fn sample(active: usize, awake: usize, asked: usize, blocked: usize) -> Sample {
        Sample {
            active,
            awake,
            asked,
            blocked,
        }
    }

    /// Regression: the active count changed before the decision was counted, so a metrics
    /// reader that saw the cores back could read no restore (`tests/oversubscribed.rs` failed
    /// one run in about ten). Every decision is counted by the time its new count is visible.
    #[test]
    fn a_decision_is_counted_before_its_active_count_is_visible() {
        let idle = Idle::with_active(8, 2);
        let counts = CoreCounts::default();
        let mut seen = Vec::new();
        apply_to(&idle, &counts, 2, Decision::Restore(8), |idx| {
            seen.push((idx, idle.active(), counts.snapshot().restores));
        });
        assert_eq!(seen.len(), 6);
        assert!(
            seen.iter()
                .all(|&(_, active, restores)| active == 8 && restores == 1),
            "{seen:?}"
        );
        let snap = counts.snapshot();
        assert_eq!((snap.restores, snap.restored), (1, 6));
        for (decision, to) in [
            (Decision::Shed(2), 2),
            (Decision::Add(6), 6),
            (Decision::Retire(4), 4),
        ] {
            let before = counts.snapshot();
            let from = idle.active();
            apply_to(&idle, &counts, from, decision, |_| {
                assert_ne!(
                    counts.snapshot(),
                    before,
                    "{decision:?}: woke a core before counting"
                );
            });
            assert_eq!(idle.active(), to);
            assert_ne!(counts.snapshot(), before, "{decision:?} not counted");
        }
    }

    #[test]
    fn the_tick_grows_while_samples_find_nothing_blocked_and_returns_at_a_blocked_poll_or_a_wake() {
        let t0 = Instant::now();
        let mut c = Controller::new(2, 2, 64, t0).unwrap();
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
    fn a_fixed_count_within_the_cpus_has_no_controller() {
        assert!(Controller::new(8, 4, 4, Instant::now()).is_none());
        assert!(Controller::new(4, 4, 4, Instant::now()).is_none());
        // More workers than CPUs: a controller, for the shares only.
        assert!(Controller::new(2, 8, 8, Instant::now()).is_some());
    }

    /// A fixed 8-worker runtime on 2 CPUs, every core active, `t0` a `SHED_EVERY` after its
    /// start.
    fn oversubscribed() -> (Controller, Instant) {
        let t0 = Instant::now();
        (Controller::new(2, 8, 8, t0).unwrap(), t0 + SHED_EVERY)
    }

    /// Sheds from `active` down to the floor on saturated CPUs with the shares uneven, one
    /// `SHED_EVERY` apart from `t`; returns the time of the last shed.
    fn shed_to_floor(c: &mut Controller, mut active: usize, mut t: Instant) -> Instant {
        let mut steps = 0;
        while active > 2 {
            match c.decide(t, sample(active, active, active, 0), UNFAIR) {
                Decision::Shed(to) => {
                    assert!(to < active && to >= 2, "{active} -> {to}");
                    active = to;
                }
                d => panic!("expected a shed at {active}, got {d:?}"),
            }
            steps += 1;
            assert!(steps <= 8, "shedding to the CPUs took too many steps");
            t += SHED_EVERY;
        }
        t - SHED_EVERY
    }

    #[test]
    fn more_workers_than_cpus_shed_down_to_the_cpus_and_never_below() {
        let (mut c, t0) = oversubscribed();
        assert_eq!(
            c.decide(t0, sample(8, 8, 8, 0), UNFAIR),
            Decision::Shed(2),
            "the whole surplus over the CPUs at once"
        );
        // At the CPU count: nothing more to shed, however uneven.
        assert_eq!(
            c.decide(t0 + SHED_EVERY, sample(2, 2, 2, 0), UNFAIR),
            Decision::Keep
        );
        // An uneven reading counts for `UNEVEN_MEMORY`: the shares of a tick that missed the
        // group behind read even, and the shedding goes on (here after step 2 added cores).
        let (mut c, t0) = oversubscribed();
        assert_eq!(c.decide(t0, sample(8, 8, 8, 0), UNFAIR), Decision::Shed(2));
        assert_eq!(
            c.decide(t0 + SHED_EVERY, sample(2, 2, 2, 2), FAIR),
            Decision::Add(6)
        );
        assert_eq!(
            c.decide(t0 + 2 * SHED_EVERY, sample(6, 6, 6, 0), FAIR),
            Decision::Shed(2)
        );
        // Once the memory has passed, an even reading sheds nothing.
        assert_eq!(
            c.decide(
                t0 + 2 * SHED_EVERY + UNEVEN_MEMORY,
                sample(6, 6, 6, 0),
                FAIR
            ),
            Decision::Keep
        );
        // No more cores awake than CPUs: nothing to shed, so no look.
        assert!(!c.wants_sample(8, 2, UNFAIR));
        // Every core active and awake, the shares even: no look at `/proc` either (the second
        // is past `SAMPLE_AT_MAX_EVERY`).
        let c = Controller::new(2, 8, 8, Instant::now()).unwrap();
        assert!(!c.wants_sample(8, 8, FAIR));
        std::thread::sleep(SAMPLE_AT_MAX_EVERY + SAMPLE_AT_MAX_EVERY / 2);
        assert!(!c.wants_sample(8, 8, FAIR));
        // An uneven reading asks at once.
        assert!(c.wants_sample(8, 8, UNFAIR));
        // Saturation counts against the CPUs: 8 cores, 7 of 8 polls blocked, 1 runs: not
        // saturated, so no shed; every core is active, so no addition either.
        let (mut c, t0) = oversubscribed();
        assert_eq!(c.decide(t0, sample(8, 8, 8, 7), UNFAIR), Decision::Keep);
        // Even shares: nothing shed.
        let (mut c, t0) = oversubscribed();
        assert_eq!(c.decide(t0, sample(8, 8, 8, 0), FAIR), Decision::Keep);
    }

    #[test]
    fn shed_cores_come_back_after_the_shares_read_even_for_the_hold() {
        let (mut c, t0) = oversubscribed();
        // Even from `t` on (the last uneven reading's memory over): nothing until the hold has
        // passed.
        let t = shed_to_floor(&mut c, 8, t0) + UNEVEN_MEMORY;
        assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Keep);
        assert_eq!(
            c.decide(t + MIN_HOLD / 2, sample(2, 2, 2, 0), FAIR),
            Decision::Keep
        );
        // One uneven reading starts the hold again, once its memory has passed.
        assert_eq!(
            c.decide(t + MIN_HOLD / 2, sample(2, 2, 2, 0), UNFAIR),
            Decision::Keep
        );
        let first = t;
        let t = t + MIN_HOLD / 2 + UNEVEN_MEMORY;
        assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Keep);
        assert_eq!(
            c.decide(first + MIN_HOLD, sample(2, 2, 2, 0), FAIR),
            Decision::Keep,
            "the hold went on through an uneven reading"
        );
        assert_eq!(
            c.decide(t + MIN_HOLD - SHED_EVERY, sample(2, 2, 2, 0), FAIR),
            Decision::Keep
        );
        assert_eq!(
            c.decide(t + MIN_HOLD, sample(2, 2, 2, 0), FAIR),
            Decision::Restore(8),
            "all the shed cores come back at once"
        );
        // Back at `worker_threads`: nothing more to give back.
        assert_eq!(
            c.decide(t + 3 * MIN_HOLD, sample(8, 8, 8, 0), FAIR),
            Decision::Keep
        );
    }

    /// Regression: the shed cores came back after every hold while the groups that needed the
    /// shed still competed, and the tree bench's 100 ms windows around each give-back and the
    /// shed that followed lost their shares (up to 19% at 16 workers on 2 CPUs). Even shares
    /// of groups served side by side hold no give-back; the hold starts once they stop.
    #[test]
    fn shed_cores_stay_shed_while_groups_compete_even_with_even_shares() {
        let (mut c, t0) = oversubscribed();
        let t = shed_to_floor(&mut c, 8, t0) + UNEVEN_MEMORY;
        for i in 0..=(4 * MAX_HOLD.as_millis() as u32) {
            assert_eq!(
                c.decide(t + SHED_EVERY * i, sample(2, 2, 2, 0), EVEN),
                Decision::Keep,
                "given back while the groups compete, {i} ms after the shed"
            );
        }
        let t = t + 4 * MAX_HOLD + SHED_EVERY;
        assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Keep);
        assert_eq!(
            c.decide(t + MIN_HOLD - SHED_EVERY, sample(2, 2, 2, 0), FAIR),
            Decision::Keep
        );
        // One contended reading starts the hold again.
        assert_eq!(
            c.decide(t + MIN_HOLD - SHED_EVERY, sample(2, 2, 2, 0), EVEN),
            Decision::Keep
        );
        assert_eq!(
            c.decide(t + MIN_HOLD, sample(2, 2, 2, 0), FAIR),
            Decision::Keep
        );
        assert_eq!(
            c.decide(t + 2 * MIN_HOLD, sample(2, 2, 2, 0), FAIR),
            Decision::Restore(8)
        );
    }

    #[test]
    fn a_give_back_shed_again_within_its_hold_doubles_the_hold_up_to_the_most() {
        let (mut c, t0) = oversubscribed();
        let mut t = shed_to_floor(&mut c, 8, t0) + UNEVEN_MEMORY;
        let mut hold = MIN_HOLD;
        for _ in 0..8 {
            assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Keep);
            assert_eq!(
                c.decide(t + hold - SHED_EVERY, sample(2, 2, 2, 0), FAIR),
                Decision::Keep,
                "given back before a hold of {hold:?}"
            );
            t += hold;
            assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Restore(8));
            // The load that needed the shed is still there: uneven again soon after.
            t = shed_to_floor(&mut c, 8, t + 10 * SHED_EVERY) + UNEVEN_MEMORY;
            hold = (hold * 2).min(MAX_HOLD);
        }
        assert_eq!(hold, MAX_HOLD);
        // A give-back that stands longer than its hold: the next shed starts from the least hold.
        assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Keep);
        t += MAX_HOLD;
        assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Restore(8));
        let t = shed_to_floor(&mut c, 8, t + MAX_HOLD + SHED_EVERY) + UNEVEN_MEMORY;
        assert_eq!(c.decide(t, sample(2, 2, 2, 0), FAIR), Decision::Keep);
        assert_eq!(
            c.decide(t + MIN_HOLD, sample(2, 2, 2, 0), FAIR),
            Decision::Restore(8)
        );
    }

    #[test]
    fn blocked_polls_bring_shed_cores_back_at_once() {
        let (mut c, t0) = oversubscribed();
        let t = shed_to_floor(&mut c, 8, t0);
        // Both polls blocked while tasks wait: two cores each, up to `worker_threads`, whatever
        // the shares (the CPUs are not saturated).
        assert_eq!(
            c.decide(t + SHED_EVERY, sample(2, 2, 2, 2), UNFAIR),
            Decision::Add(6)
        );
        assert_eq!(
            c.decide(t + SHED_EVERY, sample(6, 6, 6, 6), FAIR),
            Decision::Add(8)
        );
    }

    #[test]
    fn blocked_polls_while_all_are_awake_add_two_cores_each() {
        let t0 = Instant::now();
        let mut c = Controller::new(64, 2, 64, t0).unwrap();
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
        let mut c = Controller::new(64, 2, 64, t0).unwrap();
        assert_eq!(c.decide(t0, sample(2, 2, 2, 0), FAIR), Decision::Keep);
        assert_eq!(c.decide(t0, sample(2, 2, 0, 0), FAIR), Decision::Keep);
        // An idle active core means no core is missing.
        assert_eq!(c.decide(t0, sample(4, 3, 3, 3), FAIR), Decision::Keep);
    }

    #[test]
    fn unused_cores_retire_by_halves_once_per_window_down_to_the_base() {
        let t0 = Instant::now();
        let mut c = Controller::new(64, 2, 64, t0).unwrap();
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
        let mut c = Controller::new(64, 2, 64, t0).unwrap();
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
        let mut c = Controller::new(64, 2, 64, t0).unwrap();
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
        let mut c = Controller::new(64, 2, 64, t0).unwrap();
        assert_eq!(
            c.decide(t0 + SHED_EVERY, sample(2, 2, 2, 0), UNFAIR),
            Decision::Keep
        );
        // Saturated but fair: additions go on as before.
        let mut c = Controller::new(64, 2, 64, t0).unwrap();
        assert_eq!(c.decide(t0, sample(8, 8, 8, 4), FAIR), Decision::Add(16));
        // Unfair but the CPUs not saturated (every poll blocked): additions go on.
        assert_eq!(
            c.decide(t0, sample(16, 16, 16, 16), UNFAIR),
            Decision::Add(48)
        );
    }
}
