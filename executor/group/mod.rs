//! Fairness groups: sets of tasks that share worker time by weight.
//!
//! A [`Group`] is built with [`Runtime::group`](crate::Runtime::group) (a [`GroupBuilder`]: name,
//! weight up to [`MAX_WEIGHT`], optional `max_concurrency`). While several groups have runnable
//! tasks, each gets worker time in proportion to its weight, charged in CPU time. Tasks spawned
//! from a task join its group ([`current_group`]). A group lives until its last handle is dropped
//! *and* its last task is gone; dropping every `Group` handle never cancels its tasks.
//!
//! ```
//! let rt = rondo::Runtime::new().unwrap();
//! let tenant = rt.group().name("tenant-a").weight(2).build().unwrap();
//! let h = tenant.spawn(async { rondo::current_group().unwrap().name().to_string() });
//! assert_eq!(rt.block_on(h).unwrap(), "tenant-a");
//! ```
//!
//! Inside the runtime, this layer holds a group's shared state (its global queue, registry of
//! unfinished tasks, limiter and scheduling data) and spawns tasks into it. It knows the runtime
//! that serves it only through a small interface (where a woken task goes, whether the runtime is
//! shutting down, its list of groups, its panic hook) that the worker layer implements.

mod current;
pub(crate) mod inner;
pub(crate) mod limiter;
pub(crate) mod list;
pub(crate) mod listed;
mod owner;
pub(crate) mod queue;
mod registry;
mod scope;
mod spawn;

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::shim::{AtomicUsize, Ordering, lock};
use crate::task::JoinHandle;

pub(crate) use current::{GroupScope, with_current};
pub(crate) use inner::{GroupInner, Host, HostBinding, HostOf, Hosts, PanicHook};
pub use scope::Scoped;
pub(crate) use spawn::{spawn_in, spawn_meta, spawn_named_in};

/// The group of the task being polled on this thread (or of the
/// [`spawn_blocking`](crate::spawn_blocking) closure it runs), or `None` outside a task. A task
/// spawned with `rondo::spawn` or `Runtime::spawn` is in its runtime's default group, which cannot
/// be cancelled ([`Group::cancel`](crate::Group::cancel) panics on it).
///
/// ```
/// assert!(rondo::current_group().is_none());
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().name("x").build().unwrap();
/// let name = rt.block_on(g.spawn(async { rondo::current_group().map(|g| g.name().to_string()) }));
/// assert_eq!(name.unwrap().as_deref(), Some("x"));
/// ```
pub fn current_group() -> Option<Group> {
    with_current(|g| g.map(|g| Group { inner: g.clone() }))
}

/// The largest weight a group may have.
pub const MAX_WEIGHT: u32 = 10_000;

/// What was wrong with a group setting.
///
/// ```
/// use rondo::group::GroupErrorKind;
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().build().unwrap();
/// match g.set_weight(20_000) {
///     Err(e) if e.kind() == GroupErrorKind::InvalidWeight => {}
///     other => panic!("unexpected: {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupErrorKind {
    /// A weight of 0 or above [`MAX_WEIGHT`].
    InvalidWeight,
    /// A `max_concurrency` of 0.
    InvalidConcurrency,
}

/// A group setting was rejected; [`kind`](GroupError::kind) says which, the message says what is
/// allowed.
///
/// ```
/// use rondo::group::GroupErrorKind;
/// let rt = rondo::Runtime::new().unwrap();
/// let err = rt.group().weight(0).build().unwrap_err();
/// assert_eq!(err.kind(), GroupErrorKind::InvalidWeight);
/// assert!(err.to_string().contains("between 1 and 10000"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupError {
    kind: GroupErrorKind,
    message: String,
}

impl GroupError {
    /// Which setting was wrong.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let err = rt.group().max_concurrency(0).build().unwrap_err();
    /// assert_eq!(err.kind(), rondo::group::GroupErrorKind::InvalidConcurrency);
    /// ```
    pub fn kind(&self) -> GroupErrorKind {
        self.kind
    }
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for GroupError {}

fn check_weight(weight: u32) -> Result<(), GroupError> {
    if weight == 0 || weight > MAX_WEIGHT {
        return Err(GroupError {
            kind: GroupErrorKind::InvalidWeight,
            message: format!("group weight must be between 1 and {MAX_WEIGHT} (got {weight})"),
        });
    }
    Ok(())
}

/// Configures a new [`Group`]; get one from [`Runtime::group`](crate::Runtime::group) or
/// [`Handle::group`](crate::Handle::group).
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().name("batch").weight(3).max_concurrency(4).build().unwrap();
/// assert_eq!(g.weight(), 3);
/// assert!(rt.group().weight(0).build().is_err());
/// ```
#[must_use = "a GroupBuilder does nothing until build() is called"]
pub struct GroupBuilder {
    host: Arc<HostOf>,
    name: Option<String>,
    weight: u32,
    max_concurrency: Option<usize>,
}

impl GroupBuilder {
    pub(crate) fn new(host: Arc<HostOf>) -> Self {
        GroupBuilder {
            host,
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
    /// assert!(rt.group().weight(rondo::group::MAX_WEIGHT + 1).build().is_err());
    /// ```
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// At most `n` of the group's tasks are polled at the same instant (`n >= 1`); `1` makes a
    /// serial group that polls its tasks one at a time in the order they became runnable.
    ///
    /// Weights share the workers' time, but a poll is never interrupted: a tenant whose handlers
    /// compute for a millisecond in one poll can hold every worker, and another tenant's request
    /// waits for one of those polls to end. With `n` below the worker count the group never holds
    /// them all, so the other groups always find a worker (at the price of this group's throughput
    /// when it is alone).
    ///
    /// A task keeps its slot for its whole poll, including a [`block_on`](crate::block_on) nested
    /// in it. So a task of a group with `max_concurrency(1)` must await, not `block_on`, work of its
    /// own group (and `rondo::spawn` from it spawns into its group): that work can never get the
    /// slot, and the `block_on` never returns. With `n` slots, the same happens once `n` tasks
    /// block on the group's own work at the same time.
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
    pub fn build(self) -> Result<Group, GroupError> {
        check_weight(self.weight)?;
        if self.max_concurrency == Some(0) {
            return Err(GroupError {
                kind: GroupErrorKind::InvalidConcurrency,
                message: "group max_concurrency must be at least 1 (got 0)".to_string(),
            });
        }
        Ok(Group {
            inner: GroupInner::new(
                &self.host,
                self.name,
                self.weight,
                self.max_concurrency,
                false,
            ),
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
    /// Spawns a task into this group. If the group was cancelled, or its runtime shut down, the
    /// task is dropped unpolled and its handle resolves cancelled at once.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert_eq!(rt.block_on(g.spawn(async { 5 })).unwrap(), 5);
    /// ```
    #[inline]
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        spawn_in(&self.inner, future)
    }

    /// Runs `future` as a task of this group and waits for it: every poll of it is charged to and
    /// scheduled by this group, and tasks it spawns join this group. Use it when the right group
    /// is known only mid-flight, for example a connection's tenant after its first request was
    /// parsed. Unlike dropping a [`JoinHandle`], dropping the returned [`Scoped`] cancels the
    /// work; a panic or a cancellation of the work comes back as a [`JoinError`](crate::JoinError).
    ///
    /// The future must be `Send + 'static`, because it runs as a task of its own.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let tenant = rt.group().name("tenant-b").build().unwrap();
    /// let name = rt.block_on(rondo::spawn(async move {
    ///     // ... parse the request, learn the tenant, then serve it in the tenant's group:
    ///     tenant
    ///         .scope(async { rondo::current_group().unwrap().name().to_string() })
    ///         .await
    /// }));
    /// assert_eq!(name.unwrap().unwrap(), "tenant-b");
    /// ```
    pub fn scope<F>(&self, future: F) -> Scoped<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Scoped::new(spawn_in(&self.inner, future))
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
    pub fn set_weight(&self, weight: u32) -> Result<(), GroupError> {
        check_weight(weight)?;
        let mut gs = lock(&self.inner.sched);
        gs.weight = weight;
        self.inner.weight_hint.store(weight, Ordering::Relaxed);
        drop(gs);
        Ok(())
    }

    /// Cancels every unfinished task of the group: queued ones are dropped without running,
    /// running ones at their next suspension point, and their handles resolve cancelled. Tasks
    /// spawned into the group afterwards are cancelled at once. Cancellation is permanent.
    ///
    /// # Panics
    ///
    /// On the runtime's default group (the one [`current_group`] returns
    /// in a task spawned with `rondo::spawn` or `Runtime::spawn`): every plain spawn on the
    /// runtime goes there, and would be cancelled for good. Give the tasks you may cancel a group
    /// of their own ([`Runtime::group`](crate::Runtime::group)).
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// let h = g.spawn(std::future::pending::<()>());
    /// g.cancel();
    /// assert!(rt.block_on(h).unwrap_err().is_cancelled());
    /// ```
    #[track_caller]
    pub fn cancel(&self) {
        assert!(
            !self.inner.is_default,
            "rondo: the default group cannot be cancelled: every plain spawn on its runtime goes \
             there. Spawn the tasks you may cancel into a group of their own (`Runtime::group`)"
        );
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
    /// A task of the group that awaits its own group's `wait_idle` never completes: it is itself
    /// unfinished while it waits.
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
        let weight = lock(&inner.sched).weight;
        let pending_wait = match inner.waiting_since.load(Ordering::Relaxed) {
            0 => 0,
            since => crate::clock::stamp().saturating_sub(since),
        };
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
            runnable: inner.queued()
                + usize::from(inner.has_task_in_lane())
                + inner.host.locally_queued(inner)
                + inner.limiter().map_or(0, |l| l.waiting()),
            wait: Duration::from_nanos(inner.wait_ns.load(Ordering::Relaxed) + pending_wait),
            id: inner.id(),
        }
    }
}

/// Counters of one group, as [`Group::metrics`] returns them.
///
/// `polls` and `busy` are flushed by each worker after its visits to the scheduler (at most about
/// a quantum late, and when it goes idle); the other counts are exact at the time of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Tasks runnable now and not running, including those waiting for a `max_concurrency` slot
    /// (approximate: a snapshot across workers; tasks in a worker's LIFO slot, or taken by a
    /// worker to run next, are left out, and a worker's local queue counts toward the group that
    /// worker serves, though it may hold tasks of other groups).
    pub runnable: usize,
    /// Time the group had queued work that no worker had picked up yet (its "starve time"):
    /// from the moment it became runnable with no worker serving it to the first time a worker
    /// took its work. A group a worker keeps serving does not wait; it starts waiting again when
    /// its worker leaves it with work still queued, and work a worker took but handed back unrun
    /// counts as waiting from when it was taken.
    pub wait: Duration,
    /// The group's id ([`Group::id`]): unique among its runtime's groups, so that groups of equal
    /// names stay apart.
    pub id: u64,
}

/// The group's id, for telling groups of equal names apart (listings, exported metrics).
impl Group {
    /// The group's id: unique among its runtime's groups while it lives, never changes.
    /// Unnamed groups are called `group-{id}`.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let a = rt.group().name("same").build().unwrap();
    /// let b = rt.group().name("same").build().unwrap();
    /// assert_ne!(a.id(), b.id());
    /// let c = rt.group().build().unwrap();
    /// assert_eq!(c.name(), format!("group-{}", c.id()));
    /// ```
    pub fn id(&self) -> u64 {
        self.inner.id()
    }
}

/// One line: `group 'name' (id N, weight W): tasks S spawned, C completed, X cancelled, P
/// panicked, U unfinished; polls N, busy T, runnable R, wait T`.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let g = rt.group().name("api").weight(3).build().unwrap();
/// rt.block_on(g.spawn(async {})).unwrap();
/// rt.block_on(g.wait_idle());
/// let line = g.metrics().to_string();
/// assert!(line.starts_with(&format!("group 'api' (id {}, weight 3): tasks 1 spawned, 1 completed", g.id())));
/// ```
impl fmt::Display for GroupMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "group '{}' (id {}, weight {}): tasks {} spawned, {} completed, {} cancelled, {} \
             panicked, {} unfinished; polls {}, busy {:.1?}, runnable {}, wait {:.1?}",
            self.name,
            self.id,
            self.weight,
            self.spawned,
            self.completed,
            self.cancelled,
            self.panicked,
            self.unfinished,
            self.polls,
            self.busy,
            self.runnable,
            self.wait
        )
    }
}
