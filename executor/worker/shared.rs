//! `Shared`: the state a runtime's cores, threads, groups and tasks share, and `Remote`, the part
//! of each core other threads reach. State only: work is published to it in `publish`, tasks are
//! routed in `schedule`, and shutdown drains it in `shutdown`.
//!
//! Its parts are reached through methods: each part keeps its own protocol (`Idle`, `Scheduler`,
//! `Threads`, the timers), and `Shared` keeps its own: the shutdown flag is set once, by
//! [`Shared::begin_shutdown`], which wakes every sleeper with it.

use std::ptr;
use std::sync::{Arc, Weak};

use crate::fair::Scheduler;
use crate::group::list::GroupList;
use crate::group::{GroupInner, HostBinding, Hosts};
use crate::shim::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use crate::task::Runnable;
use crate::time::{Keeper, Timers};

use super::config::{Config, PoolOf};
use super::idle::Idle;
use super::lent::LentSlot;
use super::local::LocalQueue;
use super::metrics::Published;
use super::monitor_state::{Monitor, longest_tick};
use super::parker::Parker;
use super::threads::Threads;

impl HostBinding for Hosts {
    type Host = Shared;
}

/// Names the core type the runtime's threads pass around, so that `Shared` holds cores (in the
/// hand-off rendezvous, in the lent slots) without this file importing the core, which holds the
/// `Shared`: `core` implements this once, for [`Cores`].
pub(crate) trait CoreBinding {
    type Core;
}

/// The carrier of [`CoreBinding`].
pub(crate) struct Cores;

/// The runtime's core type (`core::Core`).
pub(crate) type CoreOf = <Cores as CoreBinding>::Core;

/// The part of a core that other threads reach.
pub(crate) struct Remote {
    pub(crate) local: LocalQueue<Runnable>,
    /// Set (under the sleepers lock) by the notifier that chose this core.
    pub(crate) notified: AtomicBool,
    /// Set with `notified` when the keeper's own thread woke it (`Idle::claim`): it is counted
    /// awake but not searching.
    pub(crate) claimed: Claimed,
    pub(crate) parker: Parker,
    /// The group this core serves now, or null. Read by other cores to decide whether to expose
    /// their local surplus (`others_serve_other_groups`) and by metrics.
    pub(crate) serving: AtomicPtr<GroupInner>,
    /// The core's counters, as last published by the thread running it.
    pub(crate) counts: Published,
    /// Where the core is lent to the poll running it, and where a rescue claims it (`lent`).
    pub(crate) lent: LentSlot<CoreOf>,
    /// The timer shard of this core: a task it polls arms its timers there, found through the
    /// poll's lease with no access to the core (`time::Source for Current`).
    pub(crate) timer_shard: Arc<crate::time::Shard>,
    /// The kernel thread id of the thread running this core (0: unknown), for the stall
    /// monitor's question to the operating system (`os_thread`).
    pub(crate) tid: AtomicU32,
}

impl Remote {
    fn new(timer_shard: Arc<crate::time::Shard>) -> Self {
        Remote {
            local: LocalQueue::new(),
            notified: AtomicBool::new(false),
            claimed: Claimed::new(),
            parker: Parker::new(),
            serving: AtomicPtr::new(ptr::null_mut()),
            counts: Published::default(),
            lent: LentSlot::new(),
            timer_shard,
            tid: AtomicU32::new(0),
        }
    }
}

cfg_reactor! {
    /// [`Remote::claimed`]: whether the keeper's own thread woke the core (see `reactor`).
    pub(crate) struct Claimed(AtomicBool);

    impl Claimed {
        fn new() -> Self {
            Claimed(AtomicBool::new(false))
        }

        /// Marks the core as woken by the keeper's own thread (under the sleepers lock, before
        /// `notified`).
        pub(crate) fn set(&self) {
            self.0.store(true, Ordering::Relaxed);
        }

        /// Consumes the mark: true if the keeper's own thread woke the core.
        #[inline]
        pub(crate) fn take(&self) -> bool {
            self.0.swap(false, Ordering::Relaxed)
        }
    }

    /// The I/O state of a runtime (see `reactor`).
    #[derive(Default)]
    struct Io {
        /// The timer tick at which a readiness wake last claimed the keeper (0: none yet).
        seen: AtomicU64,
        /// The async-io timers the keepers inserted into the reactor, for tests.
        #[cfg(test)]
        reactor_timers: AtomicU64,
    }

    impl Shared {
        /// Records `tick` as the time of the latest readiness wake (see `reactor`).
        pub(crate) fn note_io_at(&self, tick: u64) {
            self.io.seen.store(tick, Ordering::Relaxed);
        }

        /// The tick of the latest readiness wake, 0 if none yet.
        pub(crate) fn io_seen(&self) -> u64 {
            self.io.seen.load(Ordering::Relaxed)
        }

        /// Counts an async-io timer a keeper inserted into the reactor (tests).
        #[cfg(test)]
        pub(crate) fn count_reactor_timer(&self) {
            self.io.reactor_timers.fetch_add(1, Ordering::Relaxed);
        }

        /// The async-io timers the keepers inserted into the reactor so far (tests).
        #[cfg(test)]
        pub(crate) fn reactor_timers(&self) -> u64 {
            self.io.reactor_timers.load(Ordering::Relaxed)
        }
    }
}

cfg_not_reactor! {
    /// A runtime's I/O state without the reactor: none. Zero-sized, and never read (a
    /// `PhantomData` field counts as used).
    type Io = std::marker::PhantomData<()>;

    /// [`Remote::claimed`] without the reactor: no thread dispatches readiness wakes, so no core
    /// is ever claimed.
    pub(crate) struct Claimed;

    impl Claimed {
        fn new() -> Self {
            Claimed
        }

        /// Never set: false.
        #[inline]
        pub(crate) fn take(&self) -> bool {
            false
        }
    }
}

/// State shared by a runtime's cores, threads, groups, handles and tasks.
pub(crate) struct Shared {
    cores: Box<[Remote]>,
    scheduler: Scheduler,
    idle: Idle,
    shutdown: AtomicBool,
    config: Config,
    groups: GroupList<GroupInner>,
    threads: Threads<CoreOf>,
    /// The stall monitor's state (see `monitor`).
    monitor: Monitor,
    /// Cores handed to another thread by `block_in_place` or a waiting nested `block_on` (a
    /// statistic: relaxed).
    hand_offs: AtomicU64,
    /// The runtime's blocking pool (see `config::BlockingBinding`).
    blocking: Arc<PoolOf>,
    timers: Timers,
    /// The parked core that sleeps until the earliest timer (see `time::keeper`).
    keeper: Keeper,
    /// The reactor's readiness wakes (see `reactor`); nothing without the reactor.
    io: Io,
}

impl Shared {
    pub(crate) fn new(config: Config, blocking: Arc<PoolOf>) -> Arc<Shared> {
        let n = config.max_workers;
        Arc::new_cyclic(|me: &Weak<Shared>| {
            let timers = Timers::new(n, me.clone());
            let cores = (0..n)
                .map(|i| Remote::new(timers.shard(Some(i), 0).clone()))
                .collect();
            Shared {
                timers,
                keeper: Keeper::new(),
                io: Io::default(),
                cores,
                scheduler: Scheduler::new(n, config.quantum),
                // A runtime whose count may grow looks at a new busy spell within the
                // controller's tick (`controller`, step 1): a blocking load is seen at once.
                idle: Idle::with_active(n, config.workers).watching_after(
                    if config.max_workers > config.workers {
                        super::controller::TICK
                    } else {
                        longest_tick(config.stall_threshold)
                    },
                ),
                shutdown: AtomicBool::new(false),
                config,
                groups: GroupList::new(),
                threads: Threads::new(),
                monitor: Monitor::new(),
                hand_offs: AtomicU64::new(0),
                blocking,
            }
        })
    }

    /// The cores' remote parts, by index.
    #[inline]
    pub(crate) fn cores(&self) -> &[Remote] {
        &self.cores
    }

    /// The group scheduler (`fair`).
    #[inline]
    pub(crate) fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The parking state of the workers (`idle`).
    #[inline]
    pub(crate) fn idle(&self) -> &Idle {
        &self.idle
    }

    /// The settings the runtime runs with.
    #[inline]
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The runtime's live groups (outside this layer: `Host::groups`).
    pub(super) fn groups(&self) -> &GroupList<GroupInner> {
        &self.groups
    }

    /// The runtime's threads and the cores waiting for one (`threads`).
    #[inline]
    pub(crate) fn threads(&self) -> &Threads<CoreOf> {
        &self.threads
    }

    /// The stall monitor's state.
    pub(crate) fn monitor(&self) -> &Monitor {
        &self.monitor
    }

    /// The runtime's blocking pool.
    pub(crate) fn blocking(&self) -> &Arc<PoolOf> {
        &self.blocking
    }

    /// The runtime's timers.
    #[inline]
    pub(crate) fn timers(&self) -> &Timers {
        &self.timers
    }

    /// Who keeps time among the parked cores (`time::keeper`).
    #[inline]
    pub(crate) fn keeper(&self) -> &Keeper {
        &self.keeper
    }

    /// Counts a core handed to another thread.
    pub(crate) fn count_hand_off(&self) {
        self.hand_offs.fetch_add(1, Ordering::Relaxed);
    }

    /// Cores handed to another thread so far.
    pub(crate) fn hand_offs(&self) -> u64 {
        self.hand_offs.load(Ordering::Relaxed)
    }

    /// Whether shutdown has begun (outside this layer: `Host::is_shutdown`).
    #[inline]
    pub(super) fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Shutdown's first two steps: sets the flag (SeqCst), then wakes every parked core and every
    /// spare thread. Each sleeper checks the flag under its parker's (or the spares') lock before
    /// it waits, so none can miss this.
    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for c in self.cores.iter() {
            c.parker.unpark();
        }
        self.threads.wake_spares();
    }

    /// Work that core `idx` could take: a listed group a pick can find, a task in the lane, or
    /// another core's local queue that a thief could take from now. Neither of the others counts,
    /// so a parker never waits awake for a thread that may be off the CPU:
    /// - a group counted as listed that no pick can find yet is on its way into an inbox: its
    ///   pusher wakes a sleeper after its push (`Scheduler::may_pick`);
    /// - a local queue another thief is copying out of: that thief is searching, and takes its
    ///   share; if it was the last searcher it then wakes a sleeper (`Core::found_work`), and
    ///   otherwise another searcher sees the rest. A local queue's owner is awake and runs it
    ///   anyway: a missed steal costs parallelism, never a task.
    pub(crate) fn has_visible_work(&self, idx: usize) -> bool {
        self.scheduler.has_pickable()
            || self.scheduler.lane_has_work()
            || self
                .cores
                .iter()
                .enumerate()
                .any(|(i, c)| i != idx && c.local.is_stealable())
    }

    /// True if a core other than `idx` is serving a group other than `g`.
    pub(crate) fn others_serve_other_groups(&self, idx: usize, g: &GroupInner) -> bool {
        let p = g as *const GroupInner as *mut GroupInner;
        self.cores.iter().enumerate().any(|(i, c)| {
            let s = c.serving.load(Ordering::Relaxed);
            i != idx && !s.is_null() && s != p
        })
    }

    /// The tasks of `g` in the local queues of the cores serving it (outside this layer:
    /// `Host::locally_queued`).
    pub(super) fn locally_queued(&self, g: &GroupInner) -> usize {
        let p = g as *const GroupInner as *mut GroupInner;
        self.cores
            .iter()
            .filter(|c| c.serving.load(Ordering::Relaxed) == p)
            .map(|c| c.local.len())
            .sum()
    }
}
