//! `Shared`: the state a runtime's cores, threads, groups and tasks share, and the way work is
//! published to it (`push_global`, `spill`, `notify_work`).

use std::ptr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_task::ScheduleInfo;

use crate::fair::{Scheduler, WaitFrom};
use crate::group::list::GroupList;
use crate::group::listed::{LaneEntry, Listing};
use crate::group::{GroupInner, Host, HostBinding, Hosts, PanicHook};
use crate::shim::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};
use crate::task::Runnable;
use crate::time::{Keeper, Lowered, TimerHost, Timers};

use super::core::Core;
use super::idle::Idle;
use super::lent::LentSlot;
use super::local::LocalQueue;
use super::metrics::Published;
use super::monitor::Monitor;
use super::parker::Parker;
use super::threads::Threads;

impl HostBinding for Hosts {
    type Host = Shared;
}

/// Names the blocking pool's type, so that `Shared` owns the pool without this layer importing
/// it: workers never use the pool, only the runtime layer does, which implements this once, for
/// [`Blocking`].
pub(crate) trait BlockingBinding {
    type Pool: Send + Sync;
}

/// The carrier of [`BlockingBinding`].
pub(crate) struct Blocking;

/// The blocking pool's type.
pub(crate) type PoolOf = <Blocking as BlockingBinding>::Pool;

/// The validated settings a runtime runs with.
pub(crate) struct Config {
    pub(crate) workers: usize,
    pub(crate) thread_name: String,
    pub(crate) quantum: Duration,
    pub(crate) on_task_panic: Option<PanicHook>,
    /// Most threads the runtime may run at once: its workers plus the threads that hand-offs
    /// (a nested `block_on`) start.
    pub(crate) max_threads: usize,
    /// How long a spare thread waits for a core before it exits.
    pub(crate) spare_keep_alive: Duration,
    pub(crate) on_thread_start: Option<ThreadHook>,
    pub(crate) on_thread_stop: Option<ThreadHook>,
    pub(crate) thread_stack_size: Option<usize>,
    /// How long one poll may hold a core while work waits before the monitor rescues the core.
    pub(crate) stall_threshold: Duration,
    /// Most rescued threads (stuck in a poll, their core taken over) at once.
    pub(crate) max_rescue_threads: usize,
}

/// A hook runtime threads run when they start or stop.
pub(crate) type ThreadHook = Arc<dyn Fn() + Send + Sync + 'static>;

/// Runs a user hook; its panic is caught, so it cannot take the thread down.
pub(crate) fn run_hook(hook: Option<&ThreadHook>) {
    if let Some(h) = hook {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h())) {
            crate::task::future::drop_payload(p);
        }
    }
}

/// The part of a core that other threads reach.
pub(crate) struct Remote {
    pub(crate) local: LocalQueue<Runnable>,
    /// Set (under the sleepers lock) by the notifier that chose this core.
    pub(crate) notified: AtomicBool,
    /// Set with `notified` when the keeper's own thread woke it (`Idle::claim`): it is counted
    /// awake but not searching.
    #[cfg(all(feature = "io", not(loom), not(miri)))]
    pub(crate) claimed: AtomicBool,
    pub(crate) parker: Parker,
    /// The group this core serves now, or null. Read by other cores to decide whether to expose
    /// their local surplus (`others_serve_other_groups`) and by metrics.
    pub(crate) serving: AtomicPtr<GroupInner>,
    /// The core's counters, as last published by the thread running it.
    pub(crate) counts: Published,
    /// Where the core is lent to the poll running it, and where a rescue claims it (`lent`).
    pub(crate) lent: LentSlot<super::core::Core>,
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
            #[cfg(all(feature = "io", not(loom), not(miri)))]
            claimed: AtomicBool::new(false),
            parker: Parker::new(),
            serving: AtomicPtr::new(ptr::null_mut()),
            counts: Published::default(),
            lent: LentSlot::new(),
            timer_shard,
            tid: AtomicU32::new(0),
        }
    }
}

/// State shared by a runtime's cores, threads, groups, handles and tasks.
pub(crate) struct Shared {
    pub(crate) cores: Box<[Remote]>,
    pub(crate) scheduler: Scheduler,
    pub(crate) idle: Idle,
    shutdown: AtomicBool,
    pub(crate) config: Config,
    pub(crate) groups: GroupList<GroupInner>,
    pub(crate) threads: Threads<Core>,
    /// The stall monitor's state (see `monitor`).
    pub(crate) monitor: Monitor,
    /// Cores handed to another thread by `block_in_place` or a waiting nested `block_on` (a
    /// statistic: relaxed).
    pub(crate) hand_offs: AtomicU64,
    /// The runtime's blocking pool (see [`BlockingBinding`]).
    pub(crate) blocking: Arc<PoolOf>,
    pub(crate) timers: Timers,
    /// The parked core that sleeps until the earliest timer (see `time::keeper`).
    pub(crate) keeper: Keeper,
    /// The timer tick at which a readiness wake last claimed the keeper (see `reactor`).
    #[cfg(all(feature = "io", not(loom), not(miri)))]
    pub(crate) io_seen: AtomicU64,
    /// The async-io timers the keepers inserted into the reactor (see `reactor`), for tests.
    #[cfg(all(test, feature = "io", not(loom), not(miri)))]
    pub(crate) reactor_timers: AtomicU64,
}

impl TimerHost for Shared {
    fn timer_lowered(&self, tick: u64) {
        match self.keeper.lowered(tick) {
            Lowered::InTime => {}
            Lowered::Unpark(k) => self.cores[k].parker.unpark(),
            // A woken core becomes the keeper when it parks again; if a core is searching or
            // awake, it sees the timer before it parks.
            Lowered::Notify => self.notify_work(),
        }
    }
}

impl Host for Shared {
    #[inline]
    fn schedule(r: Runnable, info: ScheduleInfo) {
        super::schedule::schedule(r, info);
    }

    #[inline]
    fn schedule_new(r: Runnable) {
        super::schedule::schedule_new(r);
    }

    #[inline]
    fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    fn groups(&self) -> &GroupList<GroupInner> {
        &self.groups
    }

    fn panic_hook(&self) -> Option<&PanicHook> {
        self.config.on_task_panic.as_ref()
    }

    fn locally_queued(&self, g: &GroupInner) -> usize {
        let p = g as *const GroupInner as *mut GroupInner;
        self.cores
            .iter()
            .filter(|c| c.serving.load(Ordering::Relaxed) == p)
            .map(|c| c.local.len())
            .sum()
    }
}

impl Shared {
    pub(crate) fn new(config: Config, blocking: Arc<PoolOf>) -> Arc<Shared> {
        let n = config.workers;
        Arc::new_cyclic(|me: &Weak<Shared>| {
            let timers = Timers::new(n, me.clone());
            let cores = (0..n)
                .map(|i| Remote::new(timers.shard(Some(i), 0).clone()))
                .collect();
            Shared {
                timers,
                keeper: Keeper::new(),
                #[cfg(all(feature = "io", not(loom), not(miri)))]
                io_seen: AtomicU64::new(0),
                #[cfg(all(test, feature = "io", not(loom), not(miri)))]
                reactor_timers: AtomicU64::new(0),
                cores,
                scheduler: Scheduler::new(n, config.quantum),
                idle: Idle::new(n),
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

    /// Wakes one sleeping core if nobody is searching (see `idle`). The caller has fenced after
    /// making its work visible.
    pub(crate) fn notify_work(&self) {
        let mark = |idx: usize| self.cores[idx].notified.store(true, Ordering::Release);
        #[cfg(all(feature = "io", not(loom), not(miri)))]
        let prefer = {
            if let Some(idx) = super::reactor::reacting_core(self) {
                // This thread dispatches readiness wakes for the keeper `idx`: wake the keeper
                // itself, unless it is awake already (see `reactor`).
                let claim = |i: usize| {
                    self.cores[i].claimed.store(true, Ordering::Relaxed);
                    mark(i);
                };
                if self.idle.claim(idx, claim) {
                    super::reactor::note_io(self);
                    self.cores[idx].parker.unpark();
                    return;
                }
            }
            // Before working out whom to prefer: most notifications find a worker searching.
            if self.idle.nobody_to_wake() {
                return;
            }
            // A wake from outside the runtime (async-io's thread dispatching while it holds the
            // reactor, a foreign thread) goes to the keeper, which then retries the reactor when
            // it parks again; a worker's wake leaves the keeper where it is (see `reactor`).
            let ours =
                super::context::with_thread(|t| t.is_some_and(|t| ptr::eq(&*t.shared, self)));
            if ours { None } else { self.keeper.core() }
        };
        #[cfg(all(feature = "io", not(loom), not(miri)))]
        let chosen = {
            let chosen = self.idle.notify_preferring(prefer, mark);
            if chosen.is_some() && chosen == prefer && super::reactor::on_fallback_thread() {
                // async-io's thread dispatches because it holds the reactor: the keeper retries
                // the reactor at short intervals from now on (see `reactor`).
                super::reactor::note_io(self);
            }
            chosen
        };
        #[cfg(not(all(feature = "io", not(loom), not(miri))))]
        let chosen = self.idle.notify_one(mark);
        if let Some(idx) = chosen {
            self.cores[idx].parker.unpark();
        }
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

    /// One pass of shutdown's drain: closes the timers, the lane and every group (a later push is
    /// dropped by its pusher), wakes every task still registered and every waker a timer held,
    /// then drops every runnable in the lane, the group queues, limiter lines and local queues, on
    /// this thread. Returns how many it dropped.
    pub(crate) fn drain_once(&self) -> usize {
        // Timers hold their tasks' wakers; after this, arming fails and no timer holds a task.
        let timer_wakers = self.timers.close();
        let lane = self.scheduler.close_lane();
        let mut dropped = lane.len();
        drop(lane);
        for g in self.groups.snapshot() {
            dropped += g.drain_for_shutdown();
        }
        // Woken, not just dropped: a waiter outside this runtime (a `block_on` on another thread,
        // a task of another runtime) would otherwise wait for good; polled again, its timer says
        // the runtime shut down. This runtime's own tasks find their groups closed, and their
        // pushes drop them here, as any push after the close.
        for w in timer_wakers {
            w.wake();
        }
        for c in self.cores.iter() {
            // A core whose thread is stuck in a poll may still run: take from its queue as a
            // thief does.
            while let Some(r) = c.local.steal() {
                drop(r);
                dropped += 1;
            }
        }
        dropped
    }
}

/// Queues a runnable on its group's global queue and makes sure a worker will see it.
pub(crate) fn push_global(g: &Arc<GroupInner>, r: Runnable) {
    if let Err(r) = g.push(r) {
        // Closed: the runtime is shutting down and has drained (or is draining) the queue; the task
        // is being torn down, and whoever queues it drops it.
        drop(r);
        return;
    }
    announce(g);
}

/// Queues a task woken or spawned by a thread that holds no core of `g`'s runtime: in the lane if
/// it has waited before (it returned `Pending`) and the scheduler admits its group there
/// (`fair::lane`), else in its group's global queue. A new task never takes the lane: spawns
/// from outside come in batches, whose first task would otherwise take a different path from the
/// rest.
pub(crate) fn push_from_outside(g: &Arc<GroupInner>, r: Runnable) {
    let scheduler = &g.host().scheduler;
    if !r.metadata().has_waited() || scheduler.lane_admits(g) == LaneEntry::Refused {
        push_global(g, r);
        return;
    }
    match scheduler.push_lane(g, r) {
        Ok(()) => {
            // Orders the push before the idle check, as `ListFlag::after_push` does for a group
            // queue.
            fence(Ordering::SeqCst);
            g.host().notify_work();
        }
        // Shutting down: the task is torn down here, as a push to a closed group queue is.
        Err(r) => drop(r),
    }
}

/// After pushing to `g.queue`: makes sure the group is listed and a worker will look (the pusher's
/// half of the listing and idle protocols).
pub(crate) fn announce(g: &Arc<GroupInner>) {
    announce_as(g, WaitFrom::Now);
}

/// [`announce`], with the group counting as waiting from `wait` if this push lists it.
fn announce_as(g: &Arc<GroupInner>, wait: WaitFrom) {
    // The fence inside `after_push` also orders the push before the idle check below.
    if g.after_push() == Listing::Insert {
        g.host().scheduler.list(g, wait);
    }
    g.host().notify_work();
}

/// Moves runnables to their groups' global queues, listing each group and notifying once per run
/// of same-group tasks. A group these pushes list waits from now.
pub(crate) fn spill(batch: impl IntoIterator<Item = Runnable>) {
    spill_as(batch, |_| WaitFrom::Now);
}

/// [`spill`], with each group these pushes list waiting from `wait(group)` (see `WaitFrom`).
pub(crate) fn spill_as(
    batch: impl IntoIterator<Item = Runnable>,
    wait: impl Fn(&GroupInner) -> WaitFrom,
) {
    let mut current: Option<Arc<GroupInner>> = None;
    for r in batch {
        let same = current
            .as_ref()
            .is_some_and(|g| ptr::eq(Arc::as_ptr(g), Arc::as_ptr(&r.metadata().group)));
        if !same {
            if let Some(g) = current.take() {
                announce_as(&g, wait(&g));
            }
            current = Some(r.metadata().group.clone());
        }
        if let Some(g) = &current {
            if let Err(r) = g.push(r) {
                drop(r);
            }
        }
    }
    if let Some(g) = current {
        announce_as(&g, wait(&g));
    }
}
