//! Fairness groups: the public `Group` API and the shared `GroupInner`.
//!
//! A group owns a global FIFO queue of its runnable tasks, its scheduling state (weight and virtual
//! runtime, see `scheduler`), an optional concurrency limiter, and the registry of its unfinished
//! tasks. Tasks hold an `Arc<GroupInner>` in their metadata, so a group lives until its last
//! handle is dropped *and* its last task is gone; it then leaves the runtime's group list and its
//! memory is freed. Dropping every `Group` handle never cancels its tasks.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use event_listener::Event;

use crate::builder::BuildError;
use crate::context;
use crate::group_queue::GroupQueue;
use crate::join::{JoinHandle, TaskPanic};
use crate::limiter::Limiter;
use crate::registry::Registry;
use crate::runtime::{Handle, Shared};
use crate::scheduler::{GroupSched, ListFlag};
use crate::shim::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, lock};
use crate::task::{Runnable, spawn_in};

/// The largest weight a group may have.
pub const MAX_WEIGHT: u32 = 10_000;

/// A group's shared state, in one allocation of a few hundred bytes (one per connection must be
/// affordable).
///
/// The fields are laid out in three regions, in order, so that threads writing one region do not
/// take the cache lines another thread reads (`#[repr(C)]` keeps the order; 64-byte gaps stand in
/// for cache-line alignment, which would send every group through the allocator's slower aligned
/// path):
/// 1. Written by every spawn and completion: the registry's counters. Before them, fields that
///    no hot path touches keep them off the line of the `Arc` counts.
/// 2. Written by workers at a task's first `Pending`, a pick or a segment's end: the registry's
///    slab, the scheduling state, the service counters, and the queue's cold tier.
/// 3. Read on every push and poll, rarely written: the queue's hot pointer, the runtime, the flags.
#[repr(C)]
pub(crate) struct GroupInner {
    // Rarely used: a buffer between the `Arc` counts and region 1.
    /// The name given to the builder; unnamed groups format `group-N` on first use.
    name: OnceLock<String>,
    pub(crate) idle_event: Event,
    pub(crate) id: u64,
    /// This group's key in `Shared::groups`.
    key: usize,
    // Region 1 (and, after its last gap, the start of region 2).
    pub(crate) registry: Registry,
    // Region 2.
    pub(crate) sched: Mutex<GroupSched>,
    pub(crate) polls: AtomicU64,
    pub(crate) busy_ns: AtomicU64,
    pub(crate) wait_ns: AtomicU64,
    /// Runnable tasks of this group that no worker has taken yet (FIFO). Its cold tier ends region
    /// 2; its hot pointer, after a gap, starts region 3.
    pub(crate) queue: GroupQueue<Runnable>,
    // Region 3.
    pub(crate) shared: Arc<Shared>,
    /// In the scheduler's rotation, or about to be inserted (see `scheduler`).
    pub(crate) listed: ListFlag,
    /// Set once by `Group::cancel`; never cleared.
    pub(crate) cancelled: AtomicBool,
    /// `wait_idle` futures currently waiting.
    pub(crate) idle_waiters: AtomicUsize,
    /// Boxed: few groups have one, and it is written on every poll of the group's tasks.
    pub(crate) limiter: Option<Box<Limiter>>,
}

impl GroupInner {
    pub(crate) fn new(
        shared: &Arc<Shared>,
        name: Option<String>,
        weight: u32,
        max_concurrency: Option<usize>,
    ) -> Arc<GroupInner> {
        let id = shared.next_group_id.fetch_add(1, Ordering::Relaxed);
        let name = match name {
            Some(n) => OnceLock::from(n),
            None if id == 0 => OnceLock::from("default".to_string()),
            None => OnceLock::new(),
        };
        let mut groups = lock(&shared.groups);
        let entry = groups.vacant_entry();
        let key = entry.key();
        let inner = Arc::new(GroupInner {
            name,
            idle_event: Event::new(),
            id,
            key,
            registry: Registry::new(),
            sched: Mutex::new(GroupSched::new(weight)),
            polls: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            queue: GroupQueue::new(),
            shared: shared.clone(),
            listed: ListFlag::default(),
            cancelled: AtomicBool::new(false),
            idle_waiters: AtomicUsize::new(0),
            limiter: max_concurrency.map(|n| Box::new(Limiter::new(n))),
        });
        entry.insert(Arc::downgrade(&inner));
        inner
    }

    /// Queues a runnable on this group's global queue and makes sure a worker will see it.
    pub(crate) fn push_global(self: &Arc<Self>, r: Runnable) {
        if let Err(r) = self.queue.push(r) {
            // The queue is only closed after shutdown drained it: the task is being torn down.
            drop(r);
            return;
        }
        self.announce();
    }

    /// After pushing to `queue`: makes sure the group is listed and a worker will look (the
    /// pusher's half of the listing and idle protocols).
    pub(crate) fn announce(self: &Arc<Self>) {
        // The fence inside `after_push` also orders the push before the idle check below.
        if self.listed.after_push() {
            self.shared.scheduler.list(self);
        }
        self.shared.notify_work();
    }

    pub(crate) fn name(&self) -> &str {
        self.name.get_or_init(|| format!("group-{}", self.id))
    }

    pub(crate) fn report_panic(&self, payload: &(dyn std::any::Any + Send)) {
        if let Some(hook) = &self.shared.config.on_task_panic {
            let p = TaskPanic {
                payload,
                group: self.name(),
            };
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&p)));
        }
    }

    pub(crate) fn spawn<F>(self: &Arc<Self>, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        spawn_in(self, future)
    }

    fn weight(&self) -> u32 {
        lock(&self.sched).weight
    }
}

impl Drop for GroupInner {
    fn drop(&mut self) {
        lock(&self.shared.groups).try_remove(self.key);
        self.shared.live_groups.fetch_sub(1, Ordering::Relaxed);
    }
}

fn check_weight(weight: u32) -> Result<(), BuildError> {
    if weight == 0 || weight > MAX_WEIGHT {
        return Err(BuildError::new(format!(
            "group weight must be between 1 and {MAX_WEIGHT} (got {weight})"
        )));
    }
    Ok(())
}

/// Configures a new [`Group`]; get one from [`Runtime::group`](crate::Runtime::group) or
/// [`Handle::group`].
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().name("batch").weight(3).max_concurrency(4).build().unwrap();
/// assert_eq!(g.weight(), 3);
/// assert!(rt.group().weight(0).build().is_err());
/// ```
#[must_use = "a GroupBuilder does nothing until build() is called"]
pub struct GroupBuilder {
    handle: Handle,
    name: Option<String>,
    weight: u32,
    max_concurrency: Option<usize>,
}

impl GroupBuilder {
    pub(crate) fn new(handle: Handle) -> Self {
        GroupBuilder {
            handle,
            name: None,
            weight: 1,
            max_concurrency: None,
        }
    }

    /// The group's name, shown in metrics and panic reports. Default `group-N`.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().name("ingest").build().unwrap();
    /// assert_eq!(g.name(), "ingest");
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The group's share of worker time relative to other groups, 1 to [`MAX_WEIGHT`]. Default 1.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.group().weight(5).build().unwrap().weight(), 5);
    /// assert!(rt.group().weight(rondo::MAX_WEIGHT + 1).build().is_err());
    /// ```
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// At most `n` of the group's tasks are polled at the same instant (`n >= 1`); `1` makes a
    /// serial group that polls its tasks one at a time in the order they became runnable.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let strand = rt.group().max_concurrency(1).build().unwrap();
    /// let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    /// let handles: Vec<_> = (0..5)
    ///     .map(|i| {
    ///         let o = order.clone();
    ///         strand.spawn(async move { o.lock().unwrap().push(i) })
    ///     })
    ///     .collect();
    /// for h in handles {
    ///     rt.block_on(h).unwrap();
    /// }
    /// assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    /// ```
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = Some(n);
        self
    }

    /// Creates the group.
    ///
    /// # Errors
    /// A weight of 0 or above [`MAX_WEIGHT`], or a `max_concurrency` of 0.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert!(rt.group().build().is_ok());
    /// let err = rt.group().max_concurrency(0).build().unwrap_err();
    /// assert!(err.to_string().contains("max_concurrency"));
    /// ```
    pub fn build(self) -> Result<Group, BuildError> {
        check_weight(self.weight)?;
        if self.max_concurrency == Some(0) {
            return Err(BuildError::new(
                "group max_concurrency must be at least 1 (got 0)".to_string(),
            ));
        }
        let shared = &self.handle.shared;
        shared.live_groups.fetch_add(1, Ordering::Relaxed);
        Ok(Group {
            inner: GroupInner::new(shared, self.name, self.weight, self.max_concurrency),
        })
    }
}

/// A set of tasks that shares worker time with other groups in proportion to its weight.
///
/// Tasks spawned from inside a task of the group (with [`rondo::spawn`](crate::spawn)) join the
/// same group. Cloning a `Group` clones the handle; dropping every handle leaves its tasks running.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().name("tenant-a").build().unwrap();
/// let h = g.spawn(async { rondo::current_group().unwrap().name().to_string() });
/// assert_eq!(rt.block_on(h).unwrap(), "tenant-a");
/// ```
#[derive(Clone)]
pub struct Group {
    pub(crate) inner: Arc<GroupInner>,
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("name", &self.inner.name())
            .field("weight", &self.weight())
            .finish()
    }
}

impl Group {
    /// Spawns a task into this group. If the group was cancelled, the task is dropped unpolled
    /// and its handle resolves cancelled at once.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert_eq!(rt.block_on(g.spawn(async { 5 })).unwrap(), 5);
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.spawn(future)
    }

    /// The group's name.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert!(g.name().starts_with("group-"));
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The group's weight.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.group().build().unwrap().weight(), 1);
    /// ```
    pub fn weight(&self) -> u32 {
        self.inner.weight()
    }

    /// Changes the group's weight; it applies from the next scheduling decision.
    ///
    /// # Errors
    /// A weight of 0 or above [`MAX_WEIGHT`]; the weight is then unchanged.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// g.set_weight(8).unwrap();
    /// assert_eq!(g.weight(), 8);
    /// assert!(g.set_weight(0).is_err());
    /// ```
    pub fn set_weight(&self, weight: u32) -> Result<(), BuildError> {
        check_weight(weight)?;
        self.inner.shared.scheduler.set_weight(&self.inner, weight);
        Ok(())
    }

    /// Cancels every unfinished task of the group: queued ones are dropped without running,
    /// running ones at their next suspension point, and their handles resolve cancelled. Tasks
    /// spawned into the group afterwards are cancelled at once. Cancellation is permanent.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// let h = g.spawn(std::future::pending::<()>());
    /// g.cancel();
    /// assert!(rt.block_on(h).unwrap_err().is_cancelled());
    /// ```
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.registry.wake_all(false);
    }

    /// True once [`cancel`](Self::cancel) was called.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert!(!g.is_cancelled());
    /// g.cancel();
    /// assert!(g.is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Resolves when the group has no unfinished task.
    ///
    /// # Cancel safety
    /// Dropping the future loses nothing; a new call waits afresh.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// for _ in 0..10 {
    ///     g.spawn(async { rondo::yield_now().await });
    /// }
    /// rt.block_on(g.wait_idle());
    /// assert_eq!(g.len(), 0);
    /// ```
    pub async fn wait_idle(&self) {
        struct Announce<'a>(&'a AtomicUsize);
        impl Drop for Announce<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let inner = &self.inner;
        loop {
            if inner.registry.is_empty() {
                return;
            }
            inner.idle_waiters.fetch_add(1, Ordering::SeqCst);
            let _announce = Announce(&inner.idle_waiters);
            let listener = inner.idle_event.listen();
            if inner.registry.is_empty() {
                return;
            }
            listener.await;
        }
    }

    /// The number of unfinished tasks (spawned and not yet completed, panicked or cancelled).
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// let h = g.spawn(std::future::pending::<()>());
    /// assert_eq!(g.len(), 1);
    /// h.abort();
    /// rt.block_on(g.wait_idle());
    /// assert_eq!(g.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.registry.counts().live
    }

    /// True if the group has no unfinished task.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert!(g.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.inner.registry.is_empty()
    }

    /// A snapshot of the group's counters.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().name("m").build().unwrap();
    /// rt.block_on(g.spawn(async {})).unwrap();
    /// rt.block_on(g.wait_idle());
    /// let m = g.metrics();
    /// assert_eq!((m.spawned, m.completed), (1, 1));
    /// ```
    pub fn metrics(&self) -> GroupMetrics {
        let inner = &self.inner;
        let counts = inner.registry.counts();
        let gs = lock(&inner.sched);
        let weight = gs.weight;
        let waiting_since = gs.listed_at;
        drop(gs);
        let pending_wait = waiting_since
            .map(|t| t.elapsed().as_nanos() as u64)
            .unwrap_or(0);
        GroupMetrics {
            name: inner.name().to_string(),
            weight,
            spawned: counts.spawned,
            completed: counts.completed,
            cancelled: counts.cancelled,
            panicked: counts.panicked,
            unfinished: counts.live,
            polls: inner.polls.load(Ordering::Relaxed),
            busy: Duration::from_nanos(inner.busy_ns.load(Ordering::Relaxed)),
            runnable: inner.queue.len() + inner.shared.locally_queued(inner),
            wait: Duration::from_nanos(inner.wait_ns.load(Ordering::Relaxed) + pending_wait),
        }
    }
}

/// Counters of one group, as [`Group::metrics`] returns them.
///
/// `polls` and `busy` are flushed by the workers at the end of each service segment (at most one
/// quantum late); the other counts are exact at the time of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetrics {
    /// The group's name.
    pub name: String,
    /// The group's weight.
    pub weight: u32,
    /// Tasks spawned into the group (including those cancelled at once because the group was
    /// cancelled or the runtime shut down).
    pub spawned: u64,
    /// Tasks that ran to completion.
    pub completed: u64,
    /// Tasks dropped before completing (aborted, group cancelled, runtime shut down).
    pub cancelled: u64,
    /// Tasks that panicked.
    pub panicked: u64,
    /// Tasks spawned and not yet finished.
    pub unfinished: usize,
    /// Polls of the group's tasks.
    pub polls: u64,
    /// Worker time spent serving the group.
    pub busy: Duration,
    /// Tasks runnable now and not running (approximate: a snapshot across workers).
    pub runnable: usize,
    /// Time the group had queued work that no worker had picked up yet (its "starve time").
    pub wait: Duration,
}

/// The group of the task being polled on this thread, or `None` outside a task.
///
/// ```
/// assert!(rondo::current_group().is_none());
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().name("x").build().unwrap();
/// let name = rt.block_on(g.spawn(async { rondo::current_group().map(|g| g.name().to_string()) }));
/// assert_eq!(name.unwrap().as_deref(), Some("x"));
/// ```
pub fn current_group() -> Option<Group> {
    current_group_inner().map(|inner| Group { inner })
}

pub(crate) fn current_group_inner() -> Option<Arc<GroupInner>> {
    let p = context::with(|c| c.group_ptr());
    if p.is_null() {
        return None;
    }
    // SAFETY: the pointer was set from the polled task's `Arc<GroupInner>` (its metadata), which
    // stays alive for the whole poll; we are inside that poll on the same thread, so the strong
    // count is at least one and may be incremented to make a new `Arc`.
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

// The cold fields before the registry must span at least 48 bytes: the `Arc` counts end 16 bytes
// into the allocation, and 48 more bytes put the registry's first counter on another cache line
// for any 16-byte-aligned allocation.
const _: () = assert!(
    std::mem::size_of::<OnceLock<String>>()
        + std::mem::size_of::<Event>()
        + std::mem::size_of::<u64>()
        + std::mem::size_of::<usize>()
        >= 48
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A group must stay affordable per connection (ARCHITECTURE.md and the README give its size).
    #[test]
    fn a_group_is_one_small_allocation() {
        let size = std::mem::size_of::<GroupInner>();
        let align = std::mem::align_of::<GroupInner>();
        assert!(size <= 560, "GroupInner grew to {size} bytes");
        assert!(
            align <= 16,
            "GroupInner needs {align}-byte alignment: the allocator's aligned path"
        );
    }
}
