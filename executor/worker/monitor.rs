//! The stall monitor: one thread per runtime that notices a worker stuck in one poll while tasks
//! wait behind it, and has a rescue thread take over that worker's core (`runner`'s rescue). Its
//! state in `Shared` is `monitor_state`'s.
//!
//! # Detection
//! Every poll lends the core through its slot (`lent`) under a new generation, so the monitor
//! needs no clock read and no counter on the hot path: it reads each slot's word at each tick. A
//! core whose word shows the same generation, still lent, for `stall_threshold` is *stalled*: one
//! poll has held it that long. It is rescued if work waits that only it would run: its LIFO slot
//! or its extras (the lent word's hint, `lent::hint`) or its local queue holds a task, or groups
//! are listed and every awake worker is stalled. A stalled core with nothing waiting is left
//! alone (rescuing it would only add a thread); the monitor looks again at the next tick.
//!
//! A poll's thread may also have been preempted rather than stuck: on a machine with more busy
//! threads than cores, the operating system lets it wait for a CPU for milliseconds. A rescue
//! would not serve anything sooner (its thread would wait for the same CPUs), so when a poll is
//! first seen spanning a tick the monitor samples its thread (`os_thread`), and at the threshold
//! it rescues only if the thread is blocked now or ran on a CPU for at least half the time since;
//! otherwise it looks again a short tick later (a CPU-bound poll is rescued once the kernel's
//! accounting, which lags by up to one of its clock ticks, shows it running). The monitor's own
//! thread may wait for a CPU past a poll's threshold; a first look that finds the poll due
//! already has no window to measure, so it rescues only a blocked thread at once (`stall_due`).
//!
//! # Probation
//! A rescued core goes to a thread that runs what waited behind the stuck poll, often more tasks
//! of the same kind: a batch of blocking calls queued together. For one threshold after a
//! rescue, a poll that begins on that core is *on probation*: it counts as stalled after
//! `stall_threshold / 32` (at least one minimum tick) instead of the whole threshold, and until
//! the probation ends the monitor looks at least that often (its first look a minimum tick after
//! the rescue), so a poll that begins late in the probation is seen in time to be on it, and is
//! stalled one short threshold later. So a batch of blocking tasks costs
//! one detection and a fraction of a millisecond per further wave, not a threshold per wave (with
//! four sleepers on two workers, the small tasks behind them would otherwise wait two thresholds). The
//! same check of the poll's thread applies (a poll the operating system merely preempted is not
//! rescued), and a CPU-bound poll shows as running only once the kernel's accounting catches up,
//! so probation rescues blocked polls early and busy ones hardly sooner than outside probation.
//!
//! # Rescue
//! [`Threads::rescue`](super::threads::Threads::rescue) claims the core (`lent`, step 4: exactly
//! one of the claim and the poll's own access wins), ends its service segment (the stuck poll's
//! group is charged for the time up to the claim: it held a worker that long; what follows runs on
//! a thread that is no worker, and is charged to nobody, as `block_in_place` is) and hands the core
//! over like a nested `block_on` does. The rescued core keeps its index, queues, pending charges
//! and its group's served entry: the scheduler sees a worker that kept running. The thread that
//! takes it over first does what the stuck poll's return would have done, a quantum end for the
//! poll's group (`Core::resume_rescued`): due timers fire, and a group behind in the rotation (or
//! a task in the lane) makes it switch before it runs the local queue, whose tasks may block too.
//!
//! # Cost and backing off
//! - While every worker is parked (and no core is on probation) the monitor sleeps without a
//!   timeout ([`Idle::wait_for_awake`]): an idle runtime never wakes it.
//! - On Linux it sleeps on a kernel timer (`idle`, *The stall monitor's idle sleep*): the first
//!   worker to wake arms it to fire one bound (below) later, and the last worker to park disarms
//!   it. A busy spell shorter than that (a request under light load) never wakes the monitor; a
//!   longer one wakes it once the bound has passed, and it looks at once: a poll that began at the
//!   wake is seen within one bound, as with its regular ticks.
//! - Elsewhere the first worker to wake unparks it (one read of a flag, and a system call when
//!   the monitor sleeps), and it looks a minimum tick later: a poll is timed from the first tick
//!   that sees it, so a full tick there would add a tick to the detection of the first stall.
//!   Except for [`IDLE_GRACE`] after it last saw a worker awake or a poll begin: then it keeps
//!   ticking on its timer (doubling its interval up to the bound below), and nobody unparks it.
//!   Under light load the unpark would be made by the worker that starts serving the request,
//!   before it reads it, and the woken monitor would often preempt that worker on its CPU; the
//!   ticks instead land at random, rarely during a request.
//! - While workers are awake it ticks every `stall_threshold / 2` at most: exactly when a poll it
//!   saw span a tick would reach the threshold, if that is sooner; while no poll spans a tick, it
//!   doubles its interval (from `stall_threshold / 4` after a stall) up to that bound. A new poll
//!   is first seen within one bound, so a stall is noticed between `stall_threshold` and
//!   `1.5 × stall_threshold` after it began (plus the operating system's wake-up latency). Each
//!   tick reads one word per core; with the default threshold (5 ms) a busy runtime's monitor
//!   wakes about 400 to 550 times a second (polls that span a tick are common under load: a
//!   worker preempted in the middle of one). A rescue adds at most 32 ticks, in the threshold
//!   after it (the probation).
//!
//! # Shutdown
//! Once shutdown begins the monitor rescues nothing: shutdown waits for every poll, a stuck one
//! included (at most its timeout), as it would without rescue; a rescued thread still in its poll
//! is joined like any runtime thread. The monitor stops, and is joined, once the cores retired.

use std::io;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::shim::Ordering;

use super::controller::{self, Controller, SAMPLE, Sample, Shares};
use super::lent::{generation, hint, is_lent};
use super::monitor_state::{MIN_TICK, longest_tick};
use super::os_thread::{CpuTime, ThreadFiles, preempted};
use super::shared::Shared;

/// Without a kernel timer for its idle sleep, for this long after it last saw a worker awake or a
/// poll begin, the monitor keeps ticking on its own timer while every worker is parked, instead of
/// sleeping until the first worker wakes (see the module docs, *Cost and backing off*).
const IDLE_GRACE: Duration = Duration::from_millis(20);
/// The threshold of a poll on probation (see the module docs, *Probation*) is the stall threshold
/// divided by this, and at least [`MIN_TICK`].
const PROBATION_DIVISOR: u32 = 32;

/// Starts the monitor thread of `shared`'s runtime.
pub(crate) fn start(shared: &Arc<Shared>) -> io::Result<thread::JoinHandle<()>> {
    let s = shared.clone();
    thread::Builder::new()
        .name(format!("{}-monitor", shared.config().thread_name))
        // It runs no user code: a small stack does.
        .stack_size(64 * 1024)
        .spawn(move || {
            // Registers the process for the claim's barrier now, not at the first stall.
            crate::shim::prepare_heavy_barrier();
            run(&s)
        })
}

/// What the monitor last saw of one core.
#[derive(Clone, Copy)]
struct Seen {
    generation: u64,
    since: Instant,
    /// Its thread's CPU time when the poll was first seen spanning a tick (`None`: not yet, or
    /// unknown).
    thread: Option<CpuTime>,
    /// The poll began while its core was on probation: it is stalled after the short threshold.
    probation: bool,
}

fn run(shared: &Shared) {
    let threshold = shared.config().stall_threshold;
    let probation = (threshold / PROBATION_DIVISOR).max(MIN_TICK);
    let short = (threshold / 4).max(MIN_TICK);
    let long = longest_tick(threshold);
    let monitor = shared.monitor();
    let stopped = || monitor.stopped();
    let now = Instant::now();
    let mut seen = vec![
        Seen {
            generation: u64::MAX,
            since: now,
            thread: None,
            probation: false,
        };
        shared.cores().len()
    ];
    // Per core: until when a poll that begins on it is on probation (set when it is rescued).
    let mut probation_until: Vec<Option<Instant>> = vec![None; shared.cores().len()];
    // Per core: its thread's `/proc` files, kept open while the core stays on that thread.
    let mut files: Vec<Option<ThreadFiles>> = shared.cores().iter().map(|_| None).collect();
    let mut stalled = Vec::with_capacity(shared.cores().len());
    // The worker-count controller, if the count may grow (see `controller`), and the active
    // cores in a poll at this tick.
    let config = shared.config();
    let mut control = Controller::new(config.cpus, config.workers, config.max_workers, now);
    let mut polling = Vec::with_capacity(shared.cores().len());
    let mut tick = short;
    // The last tick that saw a worker awake or a poll begin.
    let mut active_at = now;
    // With a kernel timer, the first worker to wake arms the monitor's idle sleep to end one
    // `long` tick later instead of waking it (`idle`, *The stall monitor's idle sleep*).
    let deferred = shared.idle().defers_watch();
    while !stopped() {
        // Cores beyond `worker_threads` retire, and cores shed below it come back, only at
        // ticks: no idle sleep while the count differs from it. A core on probation needs ticks
        // that see its next poll in time, from its first.
        let probing_now = {
            let now = Instant::now();
            probation_until.iter().any(|u| u.is_some_and(|u| now < u))
        };
        let resting = (deferred || active_at.elapsed() >= IDLE_GRACE)
            && !probing_now
            && shared.idle().active() == shared.config().workers;
        let mut look_now = false;
        if resting && shared.idle().wait_for_awake(stopped) {
            // Slept through an idle spell: every poll seen before it is over.
            monitor.woke();
            if let Some(c) = control.as_mut() {
                c.woke();
            }
            if deferred {
                // The alarm fired a `long` tick after the first worker woke, and a worker is
                // awake still: look now.
                look_now = true;
            } else {
                // Look again soon: a poll is timed from the first tick that sees it, and a worker
                // just woke.
                tick = MIN_TICK;
                continue;
            }
        }
        if !look_now {
            monitor.sleep(tick);
            monitor.woke();
        }
        if stopped() {
            break;
        }
        let now = Instant::now();
        // The earliest moment a poll seen now could count as stalled, if one spans a tick.
        let mut next_due: Option<Instant> = None;
        stalled.clear();
        polling.clear();
        let active = shared.idle().active();
        if shared.idle().counts().0 > 0 {
            active_at = now;
        }
        // While a core is on probation, look at least every `probation`: a poll that begins
        // there is seen within one and is due at the next, however late in the probation.
        let mut probing = false;
        for (i, c) in shared.cores().iter().enumerate() {
            let word = c.lent.observe();
            let s = &mut seen[i];
            let on_probation = probation_until[i].is_some_and(|until| now < until);
            probing |= on_probation;
            if control.is_some() && i < active && is_lent(word) {
                polling.push(i);
            }
            if generation(word) != s.generation {
                active_at = now;
                *s = Seen {
                    generation: generation(word),
                    since: now,
                    thread: None,
                    probation: on_probation,
                };
            } else if is_lent(word) {
                let limit = if s.probation { probation } else { threshold };
                let thread = thread_files(&mut files[i], c.tid.load(Ordering::Relaxed));
                let due = stall_due(s, thread, limit, short, now);
                if due <= now {
                    stalled.push((i, word));
                } else {
                    next_due = Some(next_due.map_or(due, |d| d.min(due)));
                }
            }
        }
        let mut rescued = false;
        if !stalled.is_empty() {
            for i in rescue(shared, &stalled) {
                probation_until[i] = Some(now + threshold);
                rescued = true;
                probing = true;
            }
        }
        if let Some(c) = control.as_mut() {
            let shares = controller::read_shares(shared, c);
            let sample = look_for_blocked(shared, c, shares, &polling, &mut files);
            controller::control(shared, c, now, sample, shares);
        }
        let regular = match next_due {
            // A poll spans a tick: wake when it would be stalled, or at the bound that lets the
            // next tick see new polls in time.
            Some(due) => due.saturating_duration_since(now).clamp(MIN_TICK, long),
            // Look soon at the first poll of the threads that took the rescued cores.
            None if rescued => MIN_TICK,
            None if !stalled.is_empty() => short,
            None => (tick * 2).min(long),
        };
        tick = if probing {
            regular.min(probation)
        } else {
            regular
        };
        if let Some(c) = control.as_ref().filter(|_| shared.idle().counts().0 > 0) {
            // Each round of additions takes a tick (see `controller`, step 1).
            tick = tick.min(c.tick());
        }
    }
}

/// The controller's look at one tick (`controller`, step 1): the counts, and whether the threads
/// of up to [`SAMPLE`] active cores in a poll are blocked, asked only while the count may grow
/// and work waits.
fn look_for_blocked(
    shared: &Shared,
    c: &Controller,
    shares: Shares,
    polling: &[usize],
    files: &mut [Option<ThreadFiles>],
) -> Sample {
    let active = shared.idle().active();
    let (awake, _) = shared.idle().counts();
    let mut sample = Sample {
        active,
        awake,
        asked: 0,
        blocked: 0,
    };
    let waits = || shared.has_visible_work(usize::MAX) || shared.scheduler().has_queued_work();
    if polling.is_empty() || !c.wants_sample(active, awake, shares) || !waits() {
        return sample;
    }
    for &i in polling.iter().take(SAMPLE) {
        let tid = shared.cores()[i].tid.load(Ordering::Relaxed);
        if let Some(blocked) = thread_files(&mut files[i], tid).and_then(ThreadFiles::blocked) {
            sample.asked += 1;
            sample.blocked += usize::from(blocked);
        }
    }
    sample
}

/// What the monitor can learn about a poll's thread: [`ThreadFiles`] (tests use a fake).
trait ThreadLook {
    /// The thread's CPU time now; `None` if unknown.
    fn cpu_time(&self) -> Option<CpuTime>;
    /// True if the thread sleeps or waits now; `None` if unknown.
    fn blocked(&self) -> Option<bool>;
    /// True if the thread is runnable and ran less than half the time since `earlier`.
    fn preempted_since(&self, earlier: &CpuTime) -> Option<bool> {
        let blocked = self.blocked()?;
        Some(preempted(blocked, earlier, &self.cpu_time()?))
    }
}

impl ThreadLook for ThreadFiles {
    fn cpu_time(&self) -> Option<CpuTime> {
        ThreadFiles::cpu_time(self)
    }
    fn blocked(&self) -> Option<bool> {
        ThreadFiles::blocked(self)
    }
}

/// When the poll `s` (lent since `s.since`, on the same core) counts as stalled: at or before
/// `now` means stalled now. `limit` is its threshold; `recheck`, how much later a poll whose
/// thread was only preempted is looked at again.
///
/// The first tick that sees a poll span it takes its thread's CPU time as the baseline for the
/// preemption check of later ticks. If that tick finds the poll due already (the monitor's own
/// thread waited for a CPU past the poll's threshold, which happens whenever busy threads
/// outnumber cores), there is no window yet to tell a preempted thread from a running one: only
/// a blocked thread is judged stalled at once, and any other is looked at again `recheck` later,
/// against the baseline. Without a way to look at the thread, every due poll is stalled.
fn stall_due(
    s: &mut Seen,
    thread: Option<&impl ThreadLook>,
    limit: Duration,
    recheck: Duration,
    now: Instant,
) -> Instant {
    let due = s.since.checked_add(limit).unwrap_or(now);
    match s.thread {
        None => {
            s.thread = thread.and_then(ThreadLook::cpu_time);
            let measurable = s.thread.is_some();
            if due <= now && measurable && thread.and_then(ThreadLook::blocked) != Some(true) {
                now + recheck
            } else {
                due
            }
        }
        // Preempted, not stuck: look again a short tick later.
        Some(earlier)
            if due <= now && thread.and_then(|t| t.preempted_since(&earlier)) == Some(true) =>
        {
            now + recheck
        }
        Some(_) => due,
    }
}

/// The open `/proc` files of thread `tid`, opened again when the core moved to another thread.
fn thread_files(slot: &mut Option<ThreadFiles>, tid: u32) -> Option<&ThreadFiles> {
    if slot.as_ref().is_none_or(|f| f.tid() != tid) {
        *slot = ThreadFiles::open(tid);
    }
    slot.as_ref()
}

/// Rescues the stalled cores behind which work waits; yields the index of each core rescued.
///
/// A due timer is work too: only workers fire timers, so with every core stalled a timer armed
/// before the stall would wait for one of them to return. One rescue serves it (the thread that
/// takes the core fires what is due).
fn rescue<'a>(shared: &'a Shared, stalled: &'a [(usize, u64)]) -> impl Iterator<Item = usize> + 'a {
    let (awake, _) = shared.idle().counts();
    let nobody_free = awake <= stalled.len() && shared.scheduler().has_queued_work();
    let mut timer_waits =
        stalled.len() >= shared.idle().active() && shared.timers().any_due(Instant::now());
    stalled.iter().filter_map(move |&(i, word)| {
        let c = &shared.cores()[i];
        // The first core looked at takes the timers, whatever else waits behind it.
        let timers = std::mem::take(&mut timer_waits);
        if !(timers || nobody_free || hint(word) || !c.local.is_empty()) {
            return None;
        }
        // The rescue of core `i`, as a span while it runs (feature `tracing`).
        trace_span!(
            WARN,
            "stall.rescue",
            runtime.id = shared.config().runtime_id,
            worker = i
        );
        let rescued = shared.threads().rescue(shared, i, word);
        if rescued {
            trace_event!(WARN, worker = i, "a stalled poll's core rescued");
        }
        rescued.then_some(i)
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A thread as the monitor would see it: blocked or not, and its CPU time at each look.
    struct Fake {
        blocked: bool,
        on_cpu_ns: u64,
        at: Instant,
    }

    impl ThreadLook for Fake {
        fn cpu_time(&self) -> Option<CpuTime> {
            Some(CpuTime {
                on_cpu_ns: self.on_cpu_ns,
                at: self.at,
            })
        }
        fn blocked(&self) -> Option<bool> {
            Some(self.blocked)
        }
    }

    const LIMIT: Duration = Duration::from_millis(5);
    const RECHECK: Duration = Duration::from_micros(1250);

    fn seen(since: Instant) -> Seen {
        Seen {
            generation: 1,
            since,
            thread: None,
            probation: false,
        }
    }

    /// The monitor's tick came late: the first look at a poll finds it past its threshold.
    #[test]
    fn a_poll_first_measured_past_its_threshold_is_stalled_only_if_its_thread_is_blocked() {
        let t0 = Instant::now();
        let late = t0 + 3 * LIMIT;
        let runnable = Fake {
            blocked: false,
            on_cpu_ns: 1_000_000,
            at: late,
        };
        let mut s = seen(t0);
        let due = stall_due(&mut s, Some(&runnable), LIMIT, RECHECK, late);
        assert!(
            due > late,
            "a runnable thread was judged without a window to measure"
        );
        assert_eq!(due, late + RECHECK);

        let blocked = Fake {
            blocked: true,
            ..runnable
        };
        let mut s = seen(t0);
        assert!(stall_due(&mut s, Some(&blocked), LIMIT, RECHECK, late) <= late);

        // No way to look at the thread: every due poll is stalled, as before.
        let mut s = seen(t0);
        assert!(stall_due(&mut s, None::<&Fake>, LIMIT, RECHECK, late) <= late);
    }

    #[test]
    fn a_postponed_poll_is_stalled_once_its_thread_ran_and_looked_at_again_if_it_did_not() {
        let t0 = Instant::now();
        let late = t0 + 3 * LIMIT;
        let first = Fake {
            blocked: false,
            on_cpu_ns: 1_000_000,
            at: late,
        };
        let mut s = seen(t0);
        let again = stall_due(&mut s, Some(&first), LIMIT, RECHECK, late);
        // Waited for a CPU the whole window: preempted, looked at again later.
        let waited = Fake { at: again, ..first };
        let mut s2 = s;
        assert_eq!(
            stall_due(&mut s2, Some(&waited), LIMIT, RECHECK, again),
            again + RECHECK
        );
        // Ran the whole window: stuck in its poll.
        let ran = Fake {
            on_cpu_ns: first.on_cpu_ns + RECHECK.as_nanos() as u64,
            at: again,
            blocked: false,
        };
        assert!(stall_due(&mut s, Some(&ran), LIMIT, RECHECK, again) <= again);
    }

    #[test]
    fn a_poll_first_measured_before_its_threshold_is_due_at_the_threshold() {
        let t0 = Instant::now();
        let early = t0 + LIMIT / 2;
        let look = Fake {
            blocked: false,
            on_cpu_ns: 0,
            at: early,
        };
        let mut s = seen(t0);
        assert_eq!(
            stall_due(&mut s, Some(&look), LIMIT, RECHECK, early),
            t0 + LIMIT
        );
        assert!(s.thread.is_some(), "the first look takes the baseline");
    }
}
