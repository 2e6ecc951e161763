//! The stall monitor's state in `Shared`: its timed sleep between ticks, its stop flag, its
//! count of wake-ups, and the worker-count controller's counts (`controller`). The monitor's thread and its detection are in `monitor`.

use std::time::Duration;

use std::sync::atomic::{AtomicU64 as StatU64, AtomicUsize as StatUsize};

use crate::shim::{AtomicBool, AtomicU64, Ordering};

use super::idle::Idle;
use super::parker::Parker;

/// The shortest interval between two ticks of the monitor, whatever the threshold.
pub(crate) const MIN_TICK: Duration = Duration::from_micros(100);

/// The longest interval between two ticks of the monitor while a worker is awake: half the stall
/// threshold. Also how long after the first worker wakes an idle monitor looks (`idle`, *The
/// stall monitor's idle sleep*).
pub(crate) fn longest_tick(stall_threshold: Duration) -> Duration {
    (stall_threshold / 2).max(MIN_TICK)
}

/// The monitor's shared state (in `Shared`).
pub(crate) struct Monitor {
    /// The monitor's timed sleep between ticks.
    parker: Parker,
    stop: AtomicBool,
    /// Times the monitor thread woke up (timed ticks and wakes from an idle sleep).
    wakeups: AtomicU64,
    /// The controller's decisions (statistics: relaxed).
    cores: CoreCounts,
}

/// The worker-count controller's decisions, by reason (`controller`, step 4). Statistics, outside
/// every protocol: plain atomics, also under loom.
#[derive(Default)]
pub(crate) struct CoreCounts {
    /// The most cores active at once, once the controller added any (0 before).
    peak: StatUsize,
    /// Decisions to add cores (polls blocked while tasks waited), and the cores they added.
    adds: StatU64,
    added: StatU64,
    /// Decisions to retire cores (fewer awake than active over a window), and the cores retired.
    retires: StatU64,
    retired: StatU64,
    /// Decisions to retire cores for the groups' shares (the CPUs saturated while a group ran
    /// ahead), and the cores retired.
    sheds: StatU64,
    shed: StatU64,
    /// Decisions to bring cores shed below `worker_threads` back (the shares stayed even for
    /// the hold), and the cores they brought back.
    restores: StatU64,
    restored: StatU64,
}

/// A snapshot of [`CoreCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CoreCountsSnapshot {
    pub(crate) peak: usize,
    pub(crate) adds: u64,
    pub(crate) added: u64,
    pub(crate) retires: u64,
    pub(crate) retired: u64,
    pub(crate) sheds: u64,
    pub(crate) shed: u64,
    pub(crate) restores: u64,
    pub(crate) restored: u64,
}

impl CoreCounts {
    /// Counts a decision that added `n` cores, to `now` active.
    pub(crate) fn added(&self, n: usize, now: usize) {
        self.adds.fetch_add(1, Ordering::Relaxed);
        self.added.fetch_add(n as u64, Ordering::Relaxed);
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Counts a decision that retired `n` cores.
    pub(crate) fn retired(&self, n: usize) {
        self.retires.fetch_add(1, Ordering::Relaxed);
        self.retired.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a decision that retired `n` cores for the groups' shares.
    pub(crate) fn shed(&self, n: usize) {
        self.sheds.fetch_add(1, Ordering::Relaxed);
        self.shed.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a decision that brought `n` shed cores back.
    pub(crate) fn restored(&self, n: usize) {
        self.restores.fetch_add(1, Ordering::Relaxed);
        self.restored.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> CoreCountsSnapshot {
        CoreCountsSnapshot {
            peak: self.peak.load(Ordering::Relaxed),
            adds: self.adds.load(Ordering::Relaxed),
            added: self.added.load(Ordering::Relaxed),
            retires: self.retires.load(Ordering::Relaxed),
            retired: self.retired.load(Ordering::Relaxed),
            sheds: self.sheds.load(Ordering::Relaxed),
            shed: self.shed.load(Ordering::Relaxed),
            restores: self.restores.load(Ordering::Relaxed),
            restored: self.restored.load(Ordering::Relaxed),
        }
    }
}

impl Monitor {
    pub(crate) fn new() -> Self {
        Monitor {
            parker: Parker::new(),
            stop: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
            cores: CoreCounts::default(),
        }
    }

    /// Ends the monitor thread (shutdown, once the cores retired).
    pub(crate) fn stop(&self, idle: &Idle) {
        self.stop.store(true, Ordering::SeqCst);
        self.parker.unpark();
        idle.wake_watcher();
    }

    /// Whether [`stop`](Self::stop) was called.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The monitor's sleep between two ticks: `tick` at most, less if stopped meanwhile.
    pub(crate) fn sleep(&self, tick: Duration) {
        self.parker.park_timeout(tick);
    }

    /// Counts one wake-up of the monitor thread.
    pub(crate) fn woke(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    /// The worker-count controller's decisions.
    pub(crate) fn core_counts(&self) -> &CoreCounts {
        &self.cores
    }

    pub(crate) fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }
}
