//! The stall monitor: one thread per runtime that notices a worker stuck in one poll while tasks
//! wait behind it, and has a rescue thread take over that worker's core.
//!
//! # Detection
//! Every poll lends the core through its slot (`lent`) under a new generation, so the monitor
//! needs no clock read and no counter on the hot path: it reads each slot's word at each tick. A
//! core whose word shows the same generation, still lent, for `stall_threshold` is *stalled*: one
//! poll has held it that long. It is rescued if work waits that only it would run: its LIFO slot
//! (the lent word's hint, `lent::hint`) or its local queue holds a task, or groups are listed and every awake
//! worker is stalled. A stalled core with nothing waiting is left alone (rescuing it would only add
//! a thread); the monitor looks again at the next tick.
//!
//! A poll's thread may also have been preempted rather than stuck: on a machine with more busy
//! threads than cores, the operating system lets it wait for a CPU for milliseconds. A rescue
//! would not serve anything sooner (its thread would wait for the same CPUs), so when a poll is
//! first seen spanning a tick the monitor samples its thread (`os_thread`), and at the threshold
//! it rescues only if the thread is blocked now or ran on a CPU for at least half the time since;
//! otherwise it looks again a short tick later (a CPU-bound poll is rescued once the kernel's
//! accounting, which lags by up to one of its clock ticks, shows it running).
//!
//! # Rescue
//! [`Threads::rescue`](super::threads::Threads::rescue) claims the core (`lent`, step 4: exactly
//! one of the claim and the poll's own access wins), ends its service segment (the stuck poll's
//! group is charged for the time up to the claim: it held a worker that long; what follows runs on
//! a thread that is no worker, and is charged to nobody, as `block_in_place` is) and hands the core
//! over like a nested `block_on` does. The rescued core keeps its index, queues, pending charges
//! and its group's served entry: the scheduler sees a worker that kept running.
//!
//! # Cost and backing off
//! - While every worker is parked the monitor sleeps without a timeout ([`Idle::wait_for_awake`]):
//!   an idle runtime never wakes it, and the first worker to wake unparks it (a rare transition,
//!   one read of a flag).
//! - While workers are awake it ticks every `stall_threshold / 4` at most, or exactly when a poll
//!   it saw span a tick would reach the threshold, while some poll does; while none does, it
//!   doubles its interval up to `stall_threshold / 2`. A stall is thus noticed between
//!   `stall_threshold` and `1.5 × stall_threshold` after it began (plus the operating system's
//!   wake-up latency). Each tick reads one word per core; with the default threshold (5 ms) a
//!   busy runtime's monitor wakes 400 to 800 times a second.
//!
//! # Shutdown
//! Once shutdown begins the monitor rescues nothing: shutdown waits for every poll, a stuck one
//! included (at most its timeout), as it would without rescue; a rescued thread still in its poll
//! is joined like any runtime thread. The monitor stops, and is joined, once the cores retired.

use std::io;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::shim::{AtomicBool, AtomicU64, Ordering};

use super::lent::{generation, hint, is_lent};
use super::os_thread::Sample;
use super::parker::Parker;
use super::shared::Shared;

/// The shortest interval between two ticks, whatever the threshold.
const MIN_TICK: Duration = Duration::from_micros(100);

/// The monitor's shared state (in `Shared`).
pub(crate) struct Monitor {
    /// The monitor's timed sleep between ticks.
    parker: Parker,
    stop: AtomicBool,
    /// Times the monitor thread woke up (timed ticks and wakes from an idle sleep).
    wakeups: AtomicU64,
}

impl Monitor {
    pub(crate) fn new() -> Self {
        Monitor {
            parker: Parker::new(),
            stop: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
        }
    }

    /// Ends the monitor thread (shutdown, once the cores retired).
    pub(crate) fn stop(&self, idle: &super::idle::Idle) {
        self.stop.store(true, Ordering::SeqCst);
        self.parker.unpark();
        idle.wake_watcher();
    }

    pub(crate) fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }
}

/// Starts the monitor thread of `shared`'s runtime.
pub(crate) fn start(shared: &Arc<Shared>) -> io::Result<thread::JoinHandle<()>> {
    let s = shared.clone();
    thread::Builder::new()
        .name(format!("{}-monitor", shared.config.thread_name))
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
    /// Its thread when the poll was first seen spanning a tick (`None`: not yet, or unknown).
    thread: Option<Sample>,
}

fn run(shared: &Shared) {
    let threshold = shared.config.stall_threshold;
    let short = (threshold / 4).max(MIN_TICK);
    let long = (threshold / 2).max(MIN_TICK);
    let monitor = &shared.monitor;
    let stopped = || monitor.stop.load(Ordering::Acquire);
    let now = Instant::now();
    let mut seen = vec![
        Seen {
            generation: u64::MAX,
            since: now,
            thread: None,
        };
        shared.cores.len()
    ];
    let mut stalled = Vec::with_capacity(shared.cores.len());
    let mut tick = short;
    while !stopped() {
        if shared.idle.wait_for_awake(stopped) {
            // Slept through an idle spell: every poll seen before it is over.
            monitor.wakeups.fetch_add(1, Ordering::Relaxed);
            tick = short;
            continue;
        }
        monitor.parker.park_timeout(tick);
        monitor.wakeups.fetch_add(1, Ordering::Relaxed);
        if stopped() {
            break;
        }
        let now = Instant::now();
        // The earliest moment a poll seen now could count as stalled, if one spans a tick.
        let mut next_due: Option<Instant> = None;
        stalled.clear();
        for (i, c) in shared.cores.iter().enumerate() {
            let word = c.lent.observe();
            let s = &mut seen[i];
            if generation(word) != s.generation {
                *s = Seen {
                    generation: generation(word),
                    since: now,
                    thread: None,
                };
            } else if is_lent(word) {
                let due = s.since.checked_add(threshold).unwrap_or(now);
                let tid = c.tid.load(Ordering::Relaxed);
                let due = match s.thread {
                    // The first tick this poll spans: the baseline.
                    None => {
                        s.thread = Sample::of(tid);
                        due
                    }
                    // Preempted, not stuck: look again a short tick later.
                    Some(earlier)
                        if due <= now
                            && Sample::of(tid).is_some_and(|t| t.preempted_since(&earlier)) =>
                    {
                        now + short
                    }
                    Some(_) => due,
                };
                if due <= now {
                    stalled.push((i, word));
                } else {
                    next_due = Some(next_due.map_or(due, |d| d.min(due)));
                }
            }
        }
        if !stalled.is_empty() {
            rescue(shared, &stalled);
        }
        tick = match next_due {
            // A poll spans a tick: wake when it would be stalled, or sooner.
            Some(due) => due.saturating_duration_since(now).clamp(MIN_TICK, short),
            None if !stalled.is_empty() => short,
            None => (tick * 2).min(long),
        };
    }
}

/// Rescues the stalled cores behind which work waits.
fn rescue(shared: &Shared, stalled: &[(usize, u64)]) {
    let (awake, _) = shared.idle.counts();
    let nobody_free = awake <= stalled.len() && shared.scheduler.has_queued_work();
    for &(i, word) in stalled {
        let c = &shared.cores[i];
        let waits = nobody_free || hint(word) || !c.local.is_empty();
        if waits {
            shared.threads.rescue(shared, i, word);
        }
    }
}
