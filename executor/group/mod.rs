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
pub(crate) mod delay;
pub(crate) mod inner;
pub(crate) mod limiter;
pub(crate) mod list;
pub(crate) mod listed;
mod owner;
pub(crate) mod queue;
mod registry;
mod scope;
mod spawn;
pub(crate) mod tree;

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::shim::{AtomicUsize, Ordering, lock};
use crate::task::JoinHandle;

pub(crate) use current::{GroupScope, with_current};
pub use delay::{DELAY_BUCKETS, ScheduleDelayHistogram};
pub(crate) use inner::{GroupInner, Host, HostBinding, HostOf, Hosts, PanicHook};
use limiter::Limiter;
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
    /// A CPU limit that is not a finite number of cores above 0.
    InvalidCpuLimit,
    /// A group pair asked for under a cancelled group.
    Cancelled,
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

/// The period over which a CPU cap ([`GroupBuilder::cpu_limit`]) is measured, as cgroup v2's
/// `cpu.max` default: a group capped at `c` cores gets at most `c × 100 ms` of service in each
/// 100 ms period, across all workers.
pub const CPU_PERIOD: Duration = Duration::from_millis(100);

/// The service per [`CPU_PERIOD`] a cap of `cores` allows, in nanoseconds; an error for a cap
/// that is not a finite number of cores above 0.
fn cpu_quota(cores: f64) -> Result<u64, GroupError> {
    if !cores.is_finite() || cores <= 0.0 {
        return Err(GroupError {
            kind: GroupErrorKind::InvalidCpuLimit,
            message: format!(
                "group cpu_limit must be a finite number of cores above 0, such as 0.5 or 2 \
                 (got {cores})"
            ),
        });
    }
    let quota = cores * CPU_PERIOD.as_nanos() as f64;
    // At least a nanosecond; at most what a u64 holds (thousands of years per period).
    Ok((quota as u64).max(1))
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
    parent: Option<Arc<GroupInner>>,
    name: Option<String>,
    weight: u32,
    max_concurrency: Option<usize>,
    cpu_limit: Option<f64>,
}

impl GroupBuilder {
    pub(crate) fn new(host: Arc<HostOf>) -> Self {
        GroupBuilder {
            host,
            parent: None,
            name: None,
            weight: 1,
            max_concurrency: None,
            cpu_limit: None,
        }
    }

    /// A hard CPU cap: the group and every group nested under it use at most `cores` cores of
    /// worker time, measured over each [`CPU_PERIOD`] (100 ms) across all workers, even when the
    /// rest of the runtime is idle, as cgroup v2's `cpu.max` holds a container. A capped group
    /// that has used its quota is not served until the next period; its tasks stay queued and
    /// nothing else waits for it. Caps nest: a child never gets more than its parent's cap.
    ///
    /// A poll is never interrupted and charges reach the cap up to a quantum late, so a period
    /// may overshoot by up to a quantum ([`Builder::quantum`](crate::Builder::quantum)) plus four
    /// polls per worker (a worker reads the clock after every poll while polls are long, after
    /// every fourth while they are short); the overshoot is taken from the next period, so the
    /// average over several periods stays at the cap. Change or remove it on a live group with
    /// [`Group::set_cpu_limit`].
    ///
    /// # Errors
    /// [`build`](Self::build) fails for a cap that is not a finite number above 0 (zero,
    /// negative, NaN, infinite).
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let batch = rt.group().name("batch").cpu_limit(0.5).build().unwrap();
    /// assert_eq!(batch.cpu_limit(), Some(0.5));
    /// let err = rt.group().cpu_limit(f64::NAN).build().unwrap_err();
    /// assert_eq!(err.kind(), rondo::group::GroupErrorKind::InvalidCpuLimit);
    /// ```
    pub fn cpu_limit(mut self, cores: f64) -> Self {
        self.cpu_limit = Some(cores);
        self
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
        let quota = self.cpu_limit.map(cpu_quota).transpose()?;
        let inner = GroupInner::new(
            &self.host,
            self.name,
            self.weight,
            self.max_concurrency.map(Limiter::new),
            false,
        );
        if let Some(quota) = quota {
            // Before the parent link: a group with no node yet becomes a root here, while it
            // has no task.
            if self.parent.is_none() {
                self.host.set_cpu_quota(&inner, quota);
            }
        }
        if let Some(parent) = &self.parent {
            self.host.attach_child(parent, &inner);
            // `cancel` sets the parent's flag, then walks its children; the child is in the
            // parent's list now, so one of the two sees the other.
            if parent.cancelled.load(Ordering::SeqCst) {
                cancel_one(&inner);
            }
            if let Some(quota) = quota {
                self.host.set_cpu_quota(&inner, quota);
            }
        }
        trace_event!(
            DEBUG,
            group = inner.name(),
            group_id = inner.id(),
            weight = self.weight,
            parent = self.parent.as_ref().map(|p| p.id()),
            "group created"
        );
        Ok(Group { inner })
    }
}

impl GroupBuilder {
    /// Builds a [`GroupPair`]: a group (with this builder's name, weight, cap and place in the
    /// tree) holding two children, a concurrent side and an exclusive side, like .NET's
    /// `ConcurrentExclusiveSchedulerPair`. Polls of the concurrent side's tasks overlap freely
    /// (up to this builder's `max_concurrency`, if set); a poll of an exclusive task never
    /// overlaps any other poll of the pair; when both sides have work waiting, the exclusive
    /// side goes first (concurrent tasks already admitted finish their polls, then exclusive
    /// tasks run one at a time until none waits). The pair shares the workers by its weight with
    /// the rest of the runtime, as any group does.
    ///
    /// # Errors
    /// As [`build`](Self::build); and building a pair under a cancelled group
    /// ([`GroupErrorKind::Cancelled`]).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let rt = rondo::Runtime::new().unwrap();
    /// let pair = rt.group().name("cache").build_pair().unwrap();
    /// let value = Arc::new(AtomicUsize::new(0));
    /// let v = value.clone();
    /// // Writers run alone; readers run side by side.
    /// rt.block_on(pair.exclusive().spawn(async move { v.store(7, Ordering::Relaxed) })).unwrap();
    /// let v = value.clone();
    /// let read = pair.concurrent().spawn(async move { v.load(Ordering::Relaxed) });
    /// assert_eq!(rt.block_on(read).unwrap(), 7);
    /// assert_eq!(pair.exclusive().parent().unwrap().name(), "cache");
    /// ```
    pub fn build_pair(mut self) -> Result<GroupPair, GroupError> {
        if let Some(parent) = &self.parent {
            if parent.cancelled.load(Ordering::SeqCst) {
                return Err(GroupError {
                    kind: GroupErrorKind::Cancelled,
                    message: format!(
                        "cannot build a group pair under the cancelled group `{}`: a cancelled \
                         group's subtree runs nothing; build it under a live group",
                        parent.name()
                    ),
                });
            }
        }
        let max = self.max_concurrency.take();
        if max == Some(0) {
            return Err(GroupError {
                kind: GroupErrorKind::InvalidConcurrency,
                message: "group max_concurrency must be at least 1 (got 0)".to_string(),
            });
        }
        let host = self.host.clone();
        let group = self.build()?;
        let (concurrent, exclusive) = Limiter::pair(max.unwrap_or(usize::MAX));
        let side = |suffix: &str, limiter: Limiter| {
            let inner = GroupInner::new(
                &host,
                Some(format!("{}.{suffix}", group.name())),
                1,
                Some(limiter),
                false,
            );
            host.attach_child(&group.inner, &inner);
            if group.inner.cancelled.load(Ordering::SeqCst) {
                cancel_one(&inner);
            }
            Group { inner }
        };
        let concurrent = side("concurrent", concurrent);
        let exclusive = side("exclusive", exclusive);
        Ok(GroupPair {
            group,
            concurrent,
            exclusive,
        })
    }
}

/// A concurrent/exclusive pair of groups ([`GroupBuilder::build_pair`]): two children of one
/// group whose polls never overlap across the sides, and never overlap at all on the exclusive
/// side.
#[derive(Clone, Debug)]
pub struct GroupPair {
    group: Group,
    concurrent: Group,
    exclusive: Group,
}

impl GroupPair {
    /// The side whose tasks' polls overlap freely, but never an exclusive task's.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let pair = rt.group().build_pair().unwrap();
    /// assert_eq!(rt.block_on(pair.concurrent().spawn(async { 1 })).unwrap(), 1);
    /// ```
    pub fn concurrent(&self) -> &Group {
        &self.concurrent
    }

    /// The side whose tasks are polled one at a time, never beside a concurrent task's poll.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let pair = rt.group().build_pair().unwrap();
    /// assert_eq!(rt.block_on(pair.exclusive().spawn(async { 2 })).unwrap(), 2);
    /// ```
    pub fn exclusive(&self) -> &Group {
        &self.exclusive
    }

    /// The group holding both sides: its weight is the pair's share, cancelling it cancels both.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let pair = rt.group().name("p").weight(3).build_pair().unwrap();
    /// assert_eq!(pair.group().weight(), 3);
    /// assert_eq!(pair.group().children().len(), 2);
    /// ```
    pub fn group(&self) -> &Group {
        &self.group
    }
}

/// Cancels one group's tasks (not its children's): see [`Group::cancel`].
fn cancel_one(g: &GroupInner) {
    trace_event!(INFO, group = g.name(), group_id = g.id(), "group cancelled");
    g.cancelled.store(true, Ordering::SeqCst);
    g.registry.wake_all(false);
}

/// `g` and every group below it, parents before children (a snapshot).
fn subtree(g: &Arc<GroupInner>) -> Vec<Arc<GroupInner>> {
    let mut all = vec![g.clone()];
    let mut i = 0;
    while i < all.len() {
        if let Some(node) = all[i].node() {
            let children = node.children();
            all.extend(children);
        }
        i += 1;
    }
    all
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

    /// A builder for a group nested under this one (name, weight and `max_concurrency` as for
    /// [`Runtime::group`](crate::Runtime::group)). Weights are relative among siblings: while
    /// every group is busy, a group gets its weight over its siblings' total times its parent's
    /// share, at any depth; a group with idle siblings gets their share too. All the service of a
    /// subtree is charged to its top-level group, so a request that fans out into a child group
    /// stays within its tenant's share.
    ///
    /// Tasks spawned into a group that has children compete with those children as one more
    /// child of the default weight (1), as tasks beside child cgroups do under Linux's CFS.
    ///
    /// A child keeps its parent alive; [`cancel`](Self::cancel) cancels the whole subtree and
    /// [`wait_idle`](Self::wait_idle) waits for it. Code running in a task reaches its group with
    /// [`current_group`], so `current_group().unwrap().child()` builds a group where the work is.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let tenant = rt.group().name("tenant-a").weight(5).build().unwrap();
    /// let fan_out = rt.block_on(tenant.spawn(async {
    ///     let request = rondo::current_group().unwrap().child().name("request").build().unwrap();
    ///     let parts: Vec<_> = (0..4).map(|i| request.spawn(async move { i * 2 })).collect();
    ///     let mut sum = 0;
    ///     for p in parts {
    ///         sum += p.await.unwrap();
    ///     }
    ///     (request.parent().unwrap().name().to_string(), sum)
    /// }));
    /// assert_eq!(fan_out.unwrap(), ("tenant-a".to_string(), 12));
    /// ```
    pub fn child(&self) -> GroupBuilder {
        let mut b = GroupBuilder::new(self.inner.host.clone());
        b.parent = Some(self.inner.clone());
        b
    }

    /// The group this one is nested under, or `None` for a top-level group.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let tenant = rt.group().name("t").build().unwrap();
    /// assert!(tenant.parent().is_none());
    /// let conn = tenant.child().build().unwrap();
    /// assert_eq!(conn.parent().unwrap().name(), "t");
    /// ```
    pub fn parent(&self) -> Option<Group> {
        self.inner.parent().map(|p| Group { inner: p.clone() })
    }

    /// The groups nested directly under this one that are alive (a snapshot).
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let tenant = rt.group().build().unwrap();
    /// let a = tenant.child().name("a").build().unwrap();
    /// assert_eq!(tenant.children().len(), 1);
    /// drop(a);
    /// assert!(tenant.children().is_empty());
    /// ```
    pub fn children(&self) -> Vec<Group> {
        self.inner.node().map_or_else(Vec::new, |n| {
            n.children()
                .into_iter()
                .map(|inner| Group { inner })
                .collect()
        })
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
        self.inner
            .weight_hint
            .store(inner::effective_weight(&gs), Ordering::Relaxed);
        drop(gs);
        Ok(())
    }

    /// The group's CPU cap in cores ([`GroupBuilder::cpu_limit`]), if it has one.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.group().build().unwrap().cpu_limit(), None);
    /// ```
    pub fn cpu_limit(&self) -> Option<f64> {
        let quota = self.inner.node()?.cap_quota.load(Ordering::Relaxed);
        (quota != 0).then(|| quota as f64 / CPU_PERIOD.as_nanos() as f64)
    }

    /// Sets (`Some(cores)`) or removes (`None`) the group's CPU cap; see
    /// [`GroupBuilder::cpu_limit`]. It applies from the next scheduling decision; a group held
    /// back by the cap it had is let back at once if the new one leaves it room.
    ///
    /// # Errors
    /// A cap that is not a finite number of cores above 0; the cap is then unchanged.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// g.set_cpu_limit(Some(1.5)).unwrap();
    /// assert_eq!(g.cpu_limit(), Some(1.5));
    /// assert!(g.set_cpu_limit(Some(0.0)).is_err());
    /// g.set_cpu_limit(None).unwrap();
    /// assert_eq!(g.cpu_limit(), None);
    /// ```
    pub fn set_cpu_limit(&self, cores: Option<f64>) -> Result<(), GroupError> {
        let quota = cores.map(cpu_quota).transpose()?.unwrap_or(0);
        if quota == 0 && self.inner.node().is_none() {
            return Ok(());
        }
        self.inner.host.set_cpu_quota(&self.inner, quota);
        Ok(())
    }

    /// Cancels every unfinished task of the group and of every group nested under it: queued
    /// ones are dropped without running, running ones at their next suspension point, and their
    /// handles resolve cancelled. Tasks spawned into these groups afterwards, and groups built
    /// under them afterwards, are cancelled at once. Cancellation is permanent.
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
        for g in subtree(&self.inner) {
            cancel_one(&g);
        }
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

    /// Resolves when the group and every group nested under it have no unfinished task (at a
    /// moment when one pass over the subtree found every group idle).
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
        loop {
            let all = subtree(&self.inner);
            if all.iter().all(|g| g.registry.is_empty()) {
                return;
            }
            for g in &all {
                wait_own_idle(g).await;
            }
        }
    }
}

/// Resolves when `inner` (not its children) has no unfinished task.
async fn wait_own_idle(inner: &GroupInner) {
    {
        struct Announce<'a>(&'a AtomicUsize);
        impl Drop for Announce<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
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
}

impl Group {
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
            wait: Duration::from_nanos(inner.delays.sum_ns() + pending_wait),
            throttled: Duration::from_nanos(
                inner
                    .node()
                    .map_or(0, |n| n.throttled_ns(crate::clock::stamp())),
            ),
            id: inner.id(),
            parent: inner.parent().map(|p| p.id()),
            schedule_delay: inner.delays.snapshot(),
        }
    }
}

impl Group {
    /// [`metrics`](Self::metrics) summed over the group and every group nested under it (a
    /// snapshot, one group after another): counts, polls, busy, runnable, waiting time and the
    /// schedule-delay histogram add up; the name, the weight and the throttled time are this group's (a cap holds back the
    /// whole subtree at once).
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let tenant = rt.group().build().unwrap();
    /// let conn = tenant.child().build().unwrap();
    /// rt.block_on(conn.spawn(async {})).unwrap();
    /// rt.block_on(tenant.spawn(async {})).unwrap();
    /// rt.block_on(tenant.wait_idle());
    /// assert_eq!(tenant.metrics().completed, 1);
    /// assert_eq!(tenant.subtree_metrics().completed, 2);
    /// ```
    pub fn subtree_metrics(&self) -> GroupMetrics {
        let mut total = self.metrics();
        for g in subtree(&self.inner).into_iter().skip(1) {
            let m = Group { inner: g }.metrics();
            total.spawned += m.spawned;
            total.completed += m.completed;
            total.cancelled += m.cancelled;
            total.panicked += m.panicked;
            total.unfinished += m.unfinished;
            total.polls += m.polls;
            total.busy += m.busy;
            total.runnable += m.runnable;
            total.wait += m.wait;
            total.schedule_delay.add(&m.schedule_delay);
        }
        total
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
    /// Time the group's CPU cap ([`GroupBuilder::cpu_limit`]) held it back: from the moment it
    /// used its quota to the start of the period that gave it room again.
    pub throttled: Duration,
    /// The group's id ([`Group::id`]): unique among its runtime's groups, so that groups of equal
    /// names stay apart.
    pub id: u64,
    /// The id of the group this one is nested under ([`Group::parent`]); `None` for a top-level
    /// group.
    pub parent: Option<u64>,
    /// The group's waits one by one, as a histogram: each time the group had runnable work and
    /// no worker serving it, how long until a worker took that work (the waits whose sum is
    /// [`wait`](Self::wait), a wait still under way left out); a task woken from outside into
    /// the scheduler's lane counts its own wait there. Its [`p99`](ScheduleDelayHistogram::p99)
    /// is the group's p99 schedule delay. A tenant tree waits as one (its root is what the
    /// scheduler's rotation holds): its waits are recorded on its root group, and
    /// [`Group::subtree_metrics`] adds up every group's.
    pub schedule_delay: ScheduleDelayHistogram,
}

impl GroupMetrics {
    /// The group's p99 schedule delay: [`schedule_delay`](Self::schedule_delay)'s
    /// [`p99`](ScheduleDelayHistogram::p99), `None` before any wait is recorded.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert_eq!(g.metrics().schedule_delay_p99(), None);
    /// ```
    pub fn schedule_delay_p99(&self) -> Option<Duration> {
        self.schedule_delay.p99()
    }
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
/// panicked, U unfinished; polls N, busy T, runnable R, wait T, p99 delay T` (the p99 of
/// [`schedule_delay`](GroupMetrics::schedule_delay); `-` before any wait is recorded).
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
             panicked, {} unfinished; polls {}, busy {:.1?}, runnable {}, wait {:.1?}, p99 delay ",
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
        )?;
        match self.schedule_delay_p99() {
            Some(p) => write!(f, "{p:.1?}"),
            None => f.write_str("-"),
        }
    }
}
