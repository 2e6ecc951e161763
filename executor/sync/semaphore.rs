//! [`Semaphore`]: an async counting semaphore with a FIFO line, `acquire_many` and `close`.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;
use std::sync::Arc;

use self::state::{AtomicState, HandOver, Join, Put, PutPastLine, Retake, Take};
use super::group_fair::{
    FastHolds, GroupLine, Released, current_addr, current_group, share_of_current,
};
use super::waiters::{Status, WaitList, WakeList, serve_line, update};
use crate::shim::{AtomicU32, AtomicUsize, Mutex, Ordering, lock};

mod state;

const NOT_QUEUED: usize = usize::MAX;

/// An async counting semaphore.
///
/// * Uncontended acquires complete on their first poll with one atomic CAS, no allocation.
/// * Waiters form one FIFO line and are served in order: an `acquire_many(5)` at the head is never
///   overtaken by later waiters' `acquire(1)`.
/// * [`new`](Self::new) makes a *fair* semaphore: released permits are handed directly to the waiters
///   they satisfy (N single releases wake N waiters, each exactly once), and while anyone waits a
///   newcomer queues (and `try_acquire` fails) even if permits are free.
/// * [`with_barging`](Self::with_barging) makes a *bounded-barging* one: a release wakes the waiters
///   the free permits could serve without handing the permits over, so a running task may take them
///   first; once the head has waited past the bound, permits are handed off as in the fair one.
/// * [`close`](Self::close) fails every waiting and future acquire with [`AcquireError`].
/// * Dropping a pending acquire future never loses permits or a wakeup.
///
/// A future polled once and then neither polled nor dropped while at the head of the line blocks
/// everyone behind it: inherent to direct hand-off.
///
/// # Names in other crates
///
/// | rondo | tokio::sync::Semaphore | async_lock::Semaphore |
/// |---|---|---|
/// | [`acquire`](Self::acquire) / [`try_acquire`](Self::try_acquire) | `acquire` / `try_acquire` | `acquire` / `try_acquire` |
/// | [`acquire_many`](Self::acquire_many) / [`try_acquire_many`](Self::try_acquire_many) | `acquire_many` / `try_acquire_many` | — |
/// | [`acquire_arc`](Self::acquire_arc) / [`try_acquire_arc`](Self::try_acquire_arc) | `acquire_owned` / `try_acquire_owned` | `acquire_arc` / `try_acquire_arc` |
/// | [`acquire_many_arc`](Self::acquire_many_arc) / [`try_acquire_many_arc`](Self::try_acquire_many_arc) | `acquire_many_owned` / `try_acquire_many_owned` | — |
/// | [`acquire_blocking`](Self::acquire_blocking) / [`acquire_arc_blocking`](Self::acquire_arc_blocking) | — | `acquire_blocking` / `acquire_arc_blocking` |
/// | [`acquire_many_blocking`](Self::acquire_many_blocking) / [`acquire_many_arc_blocking`](Self::acquire_many_arc_blocking) | — | — |
/// | [`add_permits`](Self::add_permits) / [`forget_permits`](Self::forget_permits) | `add_permits` / `forget_permits` | — |
/// | [`close`](Self::close) / [`is_closed`](Self::is_closed) | `close` / `is_closed` | — |
/// | [`SemaphorePermit::forget`] / [`split`](SemaphorePermit::split) / [`merge`](SemaphorePermit::merge) | `forget` / `split` / `merge` | — |
/// | [`with_barging`](Self::with_barging) | — (always FIFO) | — (always barging, unbounded) |
pub struct Semaphore {
    /// The free permits and the flags that decide how releases serve the line (`state.rs`).
    state: AtomicState,
    /// Permits in existence: free, held, and handed to waiters. Only `add_permits` raises it, after
    /// checking it stays at most `MAX_PERMITS` (before anything is published), so the free count,
    /// a part of it, cannot exceed `MAX_PERMITS` either: a release needs no overflow check, and in
    /// a fair semaphore it is one `fetch_add`.
    circulating: AtomicUsize,
    /// How long a waiter may be overtaken before permits are handed off; zero for a fair semaphore.
    bound: Duration,
    /// `bound` is zero (strict FIFO hand-off). Every release reads it: one byte rather than the
    /// two words of `bound`.
    fair: bool,
    /// Barging mode: the permits promised to the waiters woken to compete, so one release does not
    /// wake more waiters than its permits can serve and two releases wake two. Changed only under
    /// the mutex; read outside it by a release deciding whether it may skip the line, which only
    /// when the free permits, its own included, are all promised.
    promised: AtomicUsize,
    /// Group-fair mode: the largest weight among the waiting groups, published under the mutex
    /// (see `group_fair.rs`); 0 otherwise.
    heaviest: AtomicU32,
    /// Group-fair mode: whose held permits are uncounted, for weight inheritance
    /// (`group_fair.rs`). Read by a fast-path acquire before and after its CAS and by every
    /// release, beside `fair`.
    group_fair: bool,
    /// Group-fair mode: the fast paths' view of the holders (`group_fair.rs`).
    fast: FastHolds,
    line: Mutex<Line>,
}

/// The waiters.
struct Line {
    waiters: WaitList<usize>,
    /// Group-fair mode only: the weighted fair queue that picks whom releases serve.
    groups: Option<Box<GroupLine>>,
}

/// Error from [`Semaphore::acquire`] and friends: the semaphore was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireError(());

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("semaphore closed")
    }
}

impl std::error::Error for AcquireError {}

/// Error from [`Semaphore::try_acquire`] and [`Semaphore::try_acquire_many`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryAcquireError {
    /// Not enough permits are free right now, or others are waiting in line.
    NoPermits,
    /// The semaphore was closed.
    Closed,
}

impl fmt::Display for TryAcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryAcquireError::NoPermits => f.write_str("no permits available"),
            TryAcquireError::Closed => f.write_str("semaphore closed"),
        }
    }
}

impl std::error::Error for TryAcquireError {}

/// Error from [`Semaphore::group_fair`]: the permit count it was given cannot make a group-fair
/// semaphore. Nothing was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupFairError {
    /// Zero permits. A group-fair semaphore shares its permits among groups by weight; with none,
    /// every acquire of every group would wait until [`Semaphore::add_permits`], which is almost
    /// always a capacity computed wrong. Give at least 1 (a semaphore that is to start closed
    /// can [`forget_permits`](Semaphore::forget_permits) it and add permits later), or use
    /// [`Semaphore::new(0)`](Semaphore::new).
    NoPermits,
    /// More than [`Semaphore::MAX_PERMITS`] permits.
    TooManyPermits {
        /// The count that was asked for.
        permits: usize,
    },
}

impl fmt::Display for GroupFairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupFairError::NoPermits => f.write_str(
                "Semaphore::group_fair: 0 permits; a group-fair semaphore needs at least 1 \
                 (Semaphore::new(0) makes an empty fair one)",
            ),
            GroupFairError::TooManyPermits { permits } => write!(
                f,
                "Semaphore::group_fair: {permits} permits is more than Semaphore::MAX_PERMITS ({})",
                Semaphore::MAX_PERMITS
            ),
        }
    }
}

impl std::error::Error for GroupFairError {}

#[cold]
#[inline(never)]
fn too_many(what: &str, n: usize) -> ! {
    panic!(
        "Semaphore::{what}: {n} permits is more than Semaphore::MAX_PERMITS ({})",
        Semaphore::MAX_PERMITS
    )
}

#[cold]
#[inline(never)]
fn overflow(n: usize, existing: usize) -> ! {
    panic!(
        "Semaphore::add_permits: adding {n} permits to the {existing} this semaphore has (free and \
         held) would exceed Semaphore::MAX_PERMITS ({}); nothing was added",
        Semaphore::MAX_PERMITS
    )
}

impl Semaphore {
    /// The most permits a semaphore can hold (`usize::MAX >> 8`).
    pub const MAX_PERMITS: usize = state::MAX_PERMITS;

    /// Creates a fair semaphore with `permits` permits: strict FIFO hand-off, no barging.
    ///
    /// This is a `const fn`, except under `--cfg loom`, where it is an ordinary `fn`.
    ///
    /// # Panics
    ///
    /// If `permits > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// use rondo::sync::Semaphore;
    /// static LIMIT: Semaphore = Semaphore::new(3);
    /// assert_eq!(LIMIT.available_permits(), 3);
    /// ```
    #[cfg(not(loom))]
    pub const fn new(permits: usize) -> Self {
        Self::with_barging(permits, Duration::ZERO)
    }

    /// Creates a semaphore with `permits` permits that lets running tasks take free permits ahead
    /// of sleeping waiters for at most `bound` (Go's `sync.Mutex` uses 1 ms).
    ///
    /// A release wakes as many waiters, from the head, as the free permits can serve, without handing
    /// the permits over; a running task may take them first, which saves a context switch per
    /// hand-off under contention. Once the head of the line has waited `bound` or longer, released
    /// permits are handed directly to the line (and newcomers queue) until the head has waited less
    /// than `bound` again. Waiters are still served among themselves in FIFO order: a woken waiter
    /// takes permits only if enough stay free for every waiter ahead of it in line. `Duration::ZERO`
    /// gives the fair semaphore of [`new`](Self::new).
    ///
    /// A head that was woken and whose task has not run yet is not handed permits, even past the
    /// bound: they would sit idle until its task runs, which on a busy machine can mean until the
    /// OS runs its worker's thread again. When that task polls and finds the permits taken past the
    /// bound, the semaphore switches to hand-off, and the next release hands them to it before
    /// any newcomer. (Go's `sync.Mutex` decides the same way: the woken waiter that fails to
    /// acquire switches the mutex to starvation mode.)
    ///
    /// Not `const` under `--cfg loom`.
    ///
    /// # Panics
    ///
    /// If `permits > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rondo::sync::Semaphore;
    /// static LIMIT: Semaphore = Semaphore::with_barging(2, Duration::from_millis(1));
    /// let p = LIMIT.try_acquire().unwrap();
    /// assert_eq!(LIMIT.available_permits(), 1);
    /// drop(p);
    /// ```
    #[cfg(not(loom))]
    pub const fn with_barging(permits: usize, bound: Duration) -> Self {
        assert!(
            permits <= Self::MAX_PERMITS,
            "Semaphore::new: more than Semaphore::MAX_PERMITS permits"
        );
        Semaphore {
            state: AtomicState::new(permits),
            circulating: AtomicUsize::new(permits),
            bound,
            fair: bound.is_zero(),
            promised: AtomicUsize::new(0),
            heaviest: AtomicU32::new(0),
            group_fair: false,
            fast: FastHolds::new(),
            line: Mutex::new(Line {
                waiters: WaitList::new(),
                groups: None,
            }),
        }
    }

    /// Creates a fair semaphore with `permits` permits (not `const` under `--cfg loom`).
    #[cfg(loom)]
    pub fn new(permits: usize) -> Self {
        Self::with_barging(permits, Duration::ZERO)
    }

    /// Creates a bounded-barging semaphore (not `const` under `--cfg loom`).
    #[cfg(loom)]
    pub fn with_barging(permits: usize, bound: Duration) -> Self {
        assert!(
            permits <= Self::MAX_PERMITS,
            "Semaphore::new: more than Semaphore::MAX_PERMITS permits"
        );
        Semaphore {
            state: AtomicState::new(permits),
            circulating: AtomicUsize::new(permits),
            bound,
            fair: bound.is_zero(),
            promised: AtomicUsize::new(0),
            heaviest: AtomicU32::new(0),
            group_fair: false,
            fast: FastHolds::new(),
            line: Mutex::new(Line {
                waiters: WaitList::new(),
                groups: None,
            }),
        }
    }

    /// Creates a *group-fair* semaphore with `permits` permits: waiters are granted permits in
    /// proportion to the weights of their tasks' groups.
    ///
    /// It serves its line by hand-off, as [`new`](Self::new) does, and keeps every guarantee of
    /// that mode (no barging, cancel-safe acquires, [`close`](Self::close),
    /// [`add_permits`](Self::add_permits), the `_arc` and `_blocking` variants); only the order in
    /// which waiters are served differs:
    ///
    /// * Waiters are grouped by the group of the task that first polled the acquire
    ///   ([`Group`](crate::group::Group)). The waiting groups form a weighted fair queue: each has
    ///   a virtual finish tag that a grant of `n` permits advances by `n ÷ weight`, and a release
    ///   serves the group with the smallest tag. A weight-6 group and a weight-1 group that both
    ///   keep waiters queued receive permits 6 to 1.
    /// * The charge is the permits granted, not how long they are held: a group that holds its
    ///   permits longer gets no fewer grants for it.
    /// * Within a group, waiters are served in FIFO order, and a request at the front of the
    ///   queue is never overtaken by a smaller one: it waits until the free permits cover it.
    /// * A group that starts waiting enters at the queue's current virtual time: an idle group
    ///   banks no credit for the time it did not wait.
    /// * Waiters outside any group (a thread outside the runtime, [`block_on`](crate::block_on),
    ///   another executor, the `_blocking` methods) count together as one more group of weight 1.
    ///
    /// * Weight inheritance: while a group waits, every group holding permits (the group of the
    ///   task that took them) is scheduled at the heaviest waiting group's weight if that is above
    ///   its own, up its tenant tree, and still charged for its own service, until its last permit
    ///   is returned or nobody waits. For this, an uncontended acquire and release also take the
    ///   semaphore's internal mutex once each to count the permits by group.
    ///
    /// tokio has no such mode; its `Semaphore::new` corresponds to [`new`](Self::new).
    ///
    /// # Errors
    ///
    /// [`GroupFairError::NoPermits`] for `permits == 0`, [`GroupFairError::TooManyPermits`] above
    /// [`Semaphore::MAX_PERMITS`]; nothing is created then.
    ///
    /// ```
    /// use rondo::sync::{GroupFairError, Semaphore};
    /// let pool = Semaphore::group_fair(2).unwrap();
    /// assert_eq!(pool.available_permits(), 2);
    /// assert_eq!(Semaphore::group_fair(0).unwrap_err(), GroupFairError::NoPermits);
    /// ```
    pub fn group_fair(permits: usize) -> Result<Self, GroupFairError> {
        if permits == 0 {
            return Err(GroupFairError::NoPermits);
        }
        if permits > Self::MAX_PERMITS {
            return Err(GroupFairError::TooManyPermits { permits });
        }
        let mut sem = Self::with_barging(permits, Duration::ZERO);
        sem.group_fair = true;
        lock(&sem.line).groups = Some(Box::new(GroupLine::new()));
        Ok(sem)
    }

    /// The permits held (in existence and not free), in group-fair mode, where every change of
    /// the permits in existence happens under the mutex: exact there.
    fn held(&self) -> usize {
        self.circulating
            .load(Ordering::Relaxed)
            .saturating_sub(self.state.free())
    }

    /// For tests, in group-fair mode: the holds the state shows, the holds counted by group, the
    /// weight lent for the uncounted holds and the fast word's flags, read under the mutex.
    #[cfg(test)]
    pub(crate) fn inheritance_snapshot(&self) -> (usize, usize, u32, usize) {
        let line = lock(&self.line);
        let (counted, lent) = line.groups.as_ref().map_or((0, 0), |g| g.inheritance());
        (self.held(), counted, lent, self.fast.flags())
    }

    /// Under the mutex: publishes the line's heaviest waiting weight and the fast word, and lends
    /// to the holders (`group_fair.rs`).
    fn publish(&self, g: &mut GroupLine, released: &mut Released) {
        g.publish(&self.heaviest, &self.fast, self.held(), released);
    }

    /// Under the mutex, once `n` permits were taken for the current task (in the state word, not
    /// counted yet): settles who they are held by (`GroupLine::settle`).
    fn settle(&self, line: &mut Line, n: usize, released: &mut Released) {
        let Some(g) = &mut line.groups else { return };
        let s0 = self.state.snapshot();
        let held = self
            .circulating
            .load(Ordering::Relaxed)
            .saturating_sub(AtomicState::free_in(s0));
        g.settle(n, held, &self.fast, || self.state.confirm(s0), released);
        self.publish(g, released);
    }

    /// A group-fair take by a group whose holds are counted: under the mutex.
    #[cold]
    #[inline(never)]
    fn take_counted(&self, n: usize) -> Result<(), TryAcquireError> {
        let mut released = Released::new();
        let mut line = lock(&self.line);
        let taken = match self.state.try_take(n) {
            Take::Taken => Ok(()),
            Take::Short => Err(TryAcquireError::NoPermits),
            Take::Closed => Err(TryAcquireError::Closed),
        };
        if taken.is_ok() {
            self.settle(&mut line, n, &mut released);
        }
        drop(line);
        drop(released);
        taken
    }

    /// After a fast-path take whose group turned out not to be the cached one after all (it
    /// changed between the two looks): settles it under the mutex.
    #[cold]
    #[inline(never)]
    fn settle_taken(&self, n: usize) {
        let mut released = Released::new();
        let mut line = lock(&self.line);
        self.settle(&mut line, n, &mut released);
        drop(line);
        drop(released);
    }

    /// A group-fair release while some holds are counted: the permits are published and
    /// uncounted under the mutex (`counted_only` for a grant given back), and the line is
    /// served.
    #[cold]
    #[inline(never)]
    fn release_counted(&self, n: usize) {
        serve_line(&self.line, |line| {
            let _ = self.state.put(n);
            let mut released = Released::new();
            if let Some(g) = &mut line.groups {
                g.release(n, self.held(), false, &mut released);
            }
            let mut wakers = self.dispatch(line);
            wakers.released.append(&mut released);
            wakers
        });
    }

    /// Group-fair `forget`: `n` held permits leave the permits in existence under the mutex (so
    /// the holds the state shows stay exact there).
    #[cold]
    #[inline(never)]
    fn forget_held(&self, n: usize) {
        let mut released = Released::new();
        let mut line = lock(&self.line);
        self.circulating.fetch_sub(n, Ordering::Relaxed);
        if let Some(g) = &mut line.groups {
            g.release(n, self.held(), false, &mut released);
            self.publish(g, &mut released);
        }
        drop(line);
        drop(released);
    }

    /// The largest weight among the groups with a waiter in a group-fair semaphore's line; 0 when
    /// nobody waits, and always 0 for a semaphore not made by [`group_fair`](Self::group_fair).
    /// One relaxed load: a snapshot, as fresh as the latest change to the line.
    ///
    /// This is the weight the holders' groups are scheduled at while they hold permits, when it is
    /// above their own (weight inheritance).
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::group_fair(1).unwrap();
    /// assert_eq!(sem.heaviest_waiting_weight(), 0);
    /// ```
    pub fn heaviest_waiting_weight(&self) -> u32 {
        self.heaviest.load(Ordering::Relaxed)
    }

    /// Waits for one permit. Fails only if the semaphore is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future before it completes removes it from the line; permits already
    /// handed to it are returned and passed on to the next waiters. The place in line is lost.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(1);
    /// futures::executor::block_on(async {
    ///     let permit = sem.acquire().await.unwrap();
    ///     assert_eq!(sem.available_permits(), 0);
    ///     drop(permit);
    ///     assert_eq!(sem.available_permits(), 1);
    /// });
    /// ```
    pub fn acquire(&self) -> impl Future<Output = Result<SemaphorePermit<'_>, AcquireError>> {
        // The future of `acquire_many` itself, not one wrapped around it: one state machine less
        // on the uncontended path.
        self.acquire_many(1)
    }

    /// Waits for `n` permits at once. Fails only if the semaphore is closed. `n == 0` completes at
    /// once (unless closed).
    ///
    /// The request waits in the FIFO line as one unit: while it is at the head, no later waiter takes
    /// permits ahead of it, however small.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS` (such a request could never be satisfied).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire); waiters behind a cancelled request are served at
    /// once if the free permits now cover them.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(5);
    /// futures::executor::block_on(async {
    ///     let permit = sem.acquire_many(3).await.unwrap();
    ///     assert_eq!(permit.count(), 3);
    ///     assert_eq!(sem.available_permits(), 2);
    /// });
    /// ```
    pub async fn acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, AcquireError> {
        match self.try_acquire_many(n) {
            Ok(permit) => Ok(permit),
            Err(TryAcquireError::Closed) => Err(AcquireError(())),
            Err(TryAcquireError::NoPermits) => {
                SemWait::new(self, n).await?;
                Ok(SemaphorePermit { sem: self, n })
            }
        }
    }

    /// Takes one permit if one is free and (in a fair semaphore) nobody waits.
    ///
    /// ```
    /// use rondo::sync::{Semaphore, TryAcquireError};
    /// let sem = Semaphore::new(1);
    /// let p = sem.try_acquire().unwrap();
    /// assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    /// drop(p);
    /// sem.close();
    /// assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.try_acquire_many(1)
    }

    /// Takes `n` permits if they are free and (in a fair semaphore) nobody waits.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(4);
    /// let p = sem.try_acquire_many(3).unwrap();
    /// assert!(sem.try_acquire_many(2).is_err());
    /// assert_eq!(p.count(), 3);
    /// ```
    #[inline]
    pub fn try_acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.take(n).map(|()| SemaphorePermit { sem: self, n })
    }

    /// The fast path: one CAS when `n` permits are free and no hand-off is under way.
    #[inline]
    fn take(&self, n: usize) -> Result<(), TryAcquireError> {
        if n > Self::MAX_PERMITS {
            too_many("acquire_many", n);
        }
        if !self.group_fair {
            return self.state.try_take(n).ok();
        }
        self.take_group_fair(n)
    }

    /// The group-fair fast path: the CAS, if the current task's group is the one whose holds go
    /// uncounted (checked again after it); otherwise the take happens under the mutex
    /// (`group_fair.rs`).
    #[inline]
    fn take_group_fair(&self, n: usize) -> Result<(), TryAcquireError> {
        if n == 0 {
            return self.state.try_take(0).ok();
        }
        let me = current_addr();
        if !self.fast.uncounted(me) {
            return self.take_counted(n);
        }
        self.state.try_take(n).ok()?;
        // Checked again after the CAS: a switch of the cached group may have come first.
        if !self.fast.uncounted(me) {
            self.settle_taken(n);
        }
        Ok(())
    }

    /// Like [`try_acquire`](Self::try_acquire), returning a permit that owns an `Arc` of the
    /// semaphore.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(1));
    /// let p = sem.try_acquire_arc().unwrap();
    /// assert!(sem.try_acquire_arc().is_err());
    /// drop(p);
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn try_acquire_arc(self: &Arc<Self>) -> Result<SemaphorePermitArc, TryAcquireError> {
        self.try_acquire_many_arc(1)
    }

    /// Like [`try_acquire_many`](Self::try_acquire_many), returning a permit that owns an `Arc` of
    /// the semaphore.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(3));
    /// let p = sem.try_acquire_many_arc(2).unwrap();
    /// assert_eq!((p.count(), sem.available_permits()), (2, 1));
    /// ```
    pub fn try_acquire_many_arc(
        self: &Arc<Self>,
        n: usize,
    ) -> Result<SemaphorePermitArc, TryAcquireError> {
        self.take(n).map(|()| SemaphorePermitArc {
            sem: Arc::clone(self),
            n,
        })
    }

    /// Like [`acquire`](Self::acquire), returning a permit that owns an `Arc` of the semaphore. The
    /// future owns a clone of the `Arc`, so it is `'static`: it can be stored, returned or spawned.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(1));
    /// let permit = futures::executor::block_on(sem.acquire_arc()).unwrap();
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn acquire_arc(
        self: &Arc<Self>,
    ) -> impl Future<Output = Result<SemaphorePermitArc, AcquireError>> + use<> {
        self.acquire_many_arc(1)
    }

    /// Like [`acquire_many`](Self::acquire_many), returning a permit that owns an `Arc` of the
    /// semaphore. The future owns a clone of the `Arc`, so it is `'static`.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire_many`](Self::acquire_many).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(3));
    /// let fut = sem.acquire_many_arc(2);
    /// let permit = futures::executor::block_on(fut).unwrap();
    /// assert_eq!((permit.count(), sem.available_permits()), (2, 1));
    /// ```
    pub fn acquire_many_arc(
        self: &Arc<Self>,
        n: usize,
    ) -> impl Future<Output = Result<SemaphorePermitArc, AcquireError>> + use<> {
        let sem = Arc::clone(self);
        async move {
            let permit = sem.acquire_many(n).await?;
            core::mem::forget(permit);
            Ok(SemaphorePermitArc { sem, n })
        }
    }

    /// Blocks the current thread until a permit is free. Fails only if the semaphore is closed. For
    /// synchronous code; do not call it on an async runtime's worker thread (it would block the
    /// worker).
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(1);
    /// let p = sem.acquire_blocking().unwrap();
    /// assert_eq!(p.count(), 1);
    /// ```
    pub fn acquire_blocking(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_many_blocking(1)
    }

    /// Blocks the current thread until `n` permits are free, waiting in the FIFO line as
    /// [`acquire_many`](Self::acquire_many) does. Fails only if the semaphore is closed, before or
    /// while it waits. For synchronous code; do not call it on an async runtime's worker thread.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(3));
    /// let held = sem.acquire_many_blocking(2).unwrap();
    /// let sem2 = Arc::clone(&sem);
    /// // Needs 3 permits; 1 is free until `held` is returned.
    /// let waiter = std::thread::spawn(move || sem2.acquire_many_blocking(3).unwrap().count());
    /// drop(held);
    /// assert_eq!(waiter.join().unwrap(), 3);
    /// assert_eq!(sem.available_permits(), 3);
    /// ```
    pub fn acquire_many_blocking(&self, n: usize) -> Result<SemaphorePermit<'_>, AcquireError> {
        match self.try_acquire_many(n) {
            Ok(p) => Ok(p),
            Err(TryAcquireError::Closed) => Err(AcquireError(())),
            Err(TryAcquireError::NoPermits) => futures_lite::future::block_on(self.acquire_many(n)),
        }
    }

    /// Like [`acquire_blocking`](Self::acquire_blocking), returning a permit that owns an `Arc` of
    /// the semaphore. For synchronous code; do not call it on an async runtime's worker thread.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(1));
    /// let permit = sem.acquire_arc_blocking().unwrap();
    /// drop(sem); // the permit keeps the semaphore alive
    /// assert_eq!(permit.count(), 1);
    /// ```
    pub fn acquire_arc_blocking(self: &Arc<Self>) -> Result<SemaphorePermitArc, AcquireError> {
        self.acquire_many_arc_blocking(1)
    }

    /// Like [`acquire_many_blocking`](Self::acquire_many_blocking), returning a permit that owns
    /// an `Arc` of the semaphore. For synchronous code; do not call it on an async runtime's
    /// worker thread.
    ///
    /// # Panics
    ///
    /// If `n > Semaphore::MAX_PERMITS`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(2));
    /// let permit = sem.acquire_many_arc_blocking(2).unwrap();
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(sem.available_permits(), 2);
    /// sem.close();
    /// assert!(sem.acquire_many_arc_blocking(1).is_err());
    /// ```
    pub fn acquire_many_arc_blocking(
        self: &Arc<Self>,
        n: usize,
    ) -> Result<SemaphorePermitArc, AcquireError> {
        let sem = Arc::clone(self);
        // The permits move from the borrowing permit into the owning one.
        core::mem::forget(sem.acquire_many_blocking(n)?);
        Ok(SemaphorePermitArc { sem, n })
    }

    /// Adds `n` permits, waking every waiter they satisfy (in line order).
    ///
    /// # Panics
    ///
    /// If the semaphore's permits, free and held together, would exceed `Semaphore::MAX_PERMITS`;
    /// nothing is added then.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(0);
    /// sem.add_permits(2);
    /// assert_eq!(sem.available_permits(), 2);
    /// ```
    pub fn add_permits(&self, n: usize) {
        if n > Self::MAX_PERMITS {
            too_many("add_permits", n);
        }
        // Group-fair: the permits in existence change under the mutex, with the free ones, so
        // the holds the state shows stay exact there (`held`).
        let line = self.group_fair.then(|| lock(&self.line));
        if let Err(existing) = update(&self.circulating, |c| {
            c.checked_add(n)
                .filter(|&t| t <= Self::MAX_PERMITS)
                .ok_or(c)
        }) {
            drop(line);
            overflow(n, existing);
        }
        if let Some(mut line) = line {
            let _ = self.state.put(n);
            let wakers = self.dispatch(&mut line);
            drop(line);
            wakers.wake_all();
            return;
        }
        self.release(n);
    }

    /// Removes up to `n` free permits for good and returns how many were removed (fewer than `n` if
    /// fewer are free). Permits held by others are not affected.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(5);
    /// let held = sem.try_acquire_many(2).unwrap();
    /// assert_eq!(sem.forget_permits(4), 3);
    /// assert_eq!(sem.available_permits(), 0);
    /// drop(held);
    /// assert_eq!(sem.available_permits(), 2);
    /// ```
    pub fn forget_permits(&self, n: usize) -> usize {
        // Group-fair: under the mutex, as in `add_permits`.
        let line = self.group_fair.then(|| lock(&self.line));
        let removed = self.state.forget(n);
        self.circulating.fetch_sub(removed, Ordering::Relaxed);
        drop(line);
        removed
    }

    /// The number of permits free right now.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(2);
    /// let _p = sem.try_acquire().unwrap();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn available_permits(&self) -> usize {
        self.state.free()
    }

    /// Closes the semaphore: every waiting acquire completes with [`AcquireError`], and so does every
    /// later one (`try_*` return [`TryAcquireError::Closed`]). Permits already held stay valid and are
    /// returned on drop as usual. A waiter that had already been handed its permits before the close
    /// keeps them.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(0);
    /// sem.close();
    /// assert!(sem.is_closed());
    /// assert!(futures::executor::block_on(sem.acquire()).is_err());
    /// ```
    pub fn close(&self) {
        serve_line(&self.line, |line| {
            self.state.close();
            let mut wakers = WakeList::new();
            line.waiters.close_all(&mut wakers);
            if let Some(g) = &mut line.groups {
                g.clear();
                self.publish(g, &mut wakers.released);
            }
            self.promised.store(0, Ordering::Relaxed);
            self.state.line_emptied();
            wakers
        });
    }

    /// Whether [`close`](Self::close) was called.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(1);
    /// assert!(!sem.is_closed());
    /// sem.close();
    /// assert!(sem.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.state.is_closed()
    }

    /// Returns `n` permits: one `fetch_add` in a fair semaphore, and in a barging one while nobody
    /// waits; then the line is served under the mutex if anyone waits.
    #[inline]
    fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        // Group-fair: with no hold counted, the released permits were uncounted ones, and the
        // release is the fair one's (with waiters it serves the line under the mutex, which
        // lends anew).
        if self.group_fair && !self.fast.release_uncounted() {
            self.release_counted(n);
            return;
        }
        // Fair: in hand-off mode no newcomer can take the permits while anyone waits, so they are
        // published at once and the mutex is held only to hand them on. Barging, with nobody in
        // line a moment ago: any waiter the add finds joined since, so it has not waited past the
        // bound and may compete for the permits like anyone else. No overflow check: see
        // `circulating`.
        if self.fair || !self.state.maybe_queued() {
            match self.state.put(n) {
                Put::Done => {}
                Put::ServeLine => self.serve(),
            }
            return;
        }
        self.release_to_line(n);
    }

    /// A barging release while waiters are in line. In barging mode the permits are published
    /// under the mutex, after the head's wait was checked, so a waiter past the bound gets them
    /// before any newcomer; in hand-off mode (`HANDOFF`: the head waited past the bound) they are
    /// published at once, as in a fair semaphore.
    #[cold]
    fn release_to_line(&self, n: usize) {
        // Woken waiters on their way will look at the permits under the mutex: while all the free
        // ones are promised to them, the release skips the line (and counts the skip).
        match self
            .state
            .put_past_line(n, || self.promised.load(Ordering::Relaxed))
        {
            PutPastLine::Done => {}
            PutPastLine::ServeLine => self.serve(),
            PutPastLine::UnderMutex => self.release_slow(n),
        }
    }

    #[cold]
    fn release_slow(&self, n: usize) {
        let mut line = lock(&self.line);
        self.state.put_serving(n);
        let wakers = self.dispatch(&mut line);
        drop(line);
        wakers.wake_all();
    }

    /// Hands on permits that a release already published.
    #[cold]
    fn serve(&self) {
        serve_line(&self.line, |line| self.dispatch(line));
    }

    /// Whether permits must be handed to the head directly rather than the head woken to compete.
    /// Never to a barging head that was woken and has not polled yet: its own poll decides (see
    /// the module docs of `sync`, "woken waiters on their way").
    fn handoff_due(&self, line: &Line, head: usize) -> bool {
        self.fair
            || (line.waiters.status(head) == Status::Waiting
                && line.waiters.waited(head, self.bound, line.waiters.now()))
    }

    /// Serves the line after permits were returned. In hand-off mode it hands free permits to the
    /// head for as long as they cover its request; in barging mode it wakes, without handing
    /// anything over, as many waiters from the head as the free permits not yet promised to woken
    /// waiters can serve. Clears `QUEUED` when the line empties. Mutex held; returns the wakers to
    /// call after unlocking.
    fn dispatch(&self, line: &mut Line) -> WakeList {
        let mut wakers = WakeList::new();
        loop {
            let Some(head) = Self::next_waiter(line) else {
                self.state.line_emptied();
                break;
            };
            if !self.handoff_due(line, head) {
                self.state.leave_handoff();
                self.notify_fitting(line, head, &mut wakers);
                break;
            }
            self.state.enter_handoff();
            let n = line.waiters.request(head);
            match self.state.hand_over(n) {
                HandOver::Granted => {}
                HandOver::Short => break,
            }
            let was_notified = line.waiters.status(head) == Status::Notified;
            if was_notified {
                self.promised.fetch_sub(n, Ordering::Relaxed);
            }
            line.waiters.finish(head, Status::Granted, &mut wakers);
            if let Some(g) = &mut line.groups {
                g.granted(head, n, n);
            }
            self.forget_notified(line, was_notified);
        }
        if let Some(g) = &mut line.groups {
            self.publish(g, &mut wakers.released);
        }
        wakers
    }

    /// The waiter releases serve next: the head of the line, or in group-fair mode the waiter the
    /// weighted fair queue picks (every waiter of a group-fair semaphore is in both).
    fn next_waiter(line: &Line) -> Option<usize> {
        match &line.groups {
            None => line.waiters.head(),
            Some(g) => {
                let next = g.next();
                debug_assert_eq!(next.is_some(), line.waiters.head().is_some());
                next
            }
        }
    }

    /// Clears `NOTIFIED` when the last woken waiter leaves the line without polling (handed its
    /// permits, or cancelled).
    fn forget_notified(&self, line: &Line, was_notified: bool) {
        if was_notified && line.waiters.notified() == 0 {
            self.state.none_notified();
        }
    }

    /// Barging mode: wakes waiters from `head` on, in order, while the free permits cover them on top
    /// of what earlier woken waiters may take.
    fn notify_fitting(&self, line: &mut Line, head: usize, wakers: &mut WakeList) {
        let free = self.state.free();
        let mut budget = free.saturating_sub(self.promised.load(Ordering::Relaxed));
        let mut key = Some(head);
        while let Some(k) = key {
            if line.waiters.status(k) == Status::Waiting {
                let n = line.waiters.request(k);
                if n > budget {
                    break;
                }
                budget -= n;
                self.promised.fetch_add(n, Ordering::Relaxed);
                if line.waiters.notified() == 0 {
                    self.state.first_notified();
                }
                line.waiters.notify(k, wakers);
            }
            key = line.waiters.next(k);
        }
    }

    /// First slow-path attempt: takes the permits under the mutex if a newcomer may, otherwise joins
    /// the line. `Ok(None)`: acquired; `Ok(Some(key))`: queued.
    fn acquire_or_enqueue(&self, n: usize, waker: &Waker) -> Result<Option<usize>, AcquireError> {
        // Cloning runs the waker's code, so not under the mutex. Declared before `line`: a clone
        // the retry below leaves unused is dropped after the mutex is unlocked.
        let waker = waker.clone();
        // Declared before `line`: groups let go of under the mutex are dropped after unlocking.
        let mut released = Released::new();
        let mut line = lock(&self.line);
        match self.state.take_or_queue(n, self.fair) {
            Join::Taken => {
                if n > 0 {
                    self.settle(&mut line, n, &mut released);
                }
                return Ok(None);
            }
            Join::Closed => return Err(AcquireError(())),
            // Every release now takes the slow path, which needs this mutex and so sees our node.
            Join::Queued => {}
        }
        let since = (!self.fair).then(|| line.waiters.now());
        let key = line.waiters.push_back(n, waker, since);
        if let Some(g) = &mut line.groups {
            // A thread-local read and an atomic load: no user code runs under the mutex.
            let from = current_group().map(|g| Arc::downgrade(&g));
            g.join(key, share_of_current(), from);
            self.publish(g, &mut released);
        }
        Ok(Some(key))
    }

    fn poll_waiting(&self, key: usize, waker: &Waker) -> Poll<Result<(), AcquireError>> {
        // A waiter that waits on needs a clone of `waker` in its node, unless the node holds one
        // that wakes the same task. Cloning runs the waker's code, so it is made before the mutex
        // is taken: at once if the waiter was probably woken to compete (its node gave its waker
        // up then), otherwise only once the node turns out to need it, which costs a second look
        // under the mutex.
        let mut fresh = self.state.maybe_notified().then(|| waker.clone());
        loop {
            // Declared before `line`, so dropped after it.
            let mut spent = None;
            let mut wakers = WakeList::new();
            let mut line = lock(&self.line);
            let status = line.waiters.poll(key);
            let got = match status {
                Status::Waiting => false,
                Status::Notified => self.compete(&mut line, key, &mut spent),
                Status::Granted => return Poll::Ready(Ok(())),
                Status::Closed => return Poll::Ready(Err(AcquireError(()))),
                Status::Overflow => unreachable!("semaphore waiters never overflow"),
            };
            let parked = got || line.waiters.park(key, waker, &mut fresh, &mut spent);
            // A release that skipped the line while we were on our way may have read the promises
            // before this poll withdrew ours: wake the waiters that free permits nobody is
            // promised can serve, as the release would have (us too, if we deferred to waiters
            // ahead that no longer need the permits). In hand-off mode the releases serve the
            // line themselves.
            if status == Status::Notified && !self.state.in_handoff() {
                if let Some(head) = line.waiters.head() {
                    self.notify_fitting(&mut line, head, &mut wakers);
                }
            }
            drop(line);
            wakers.wake_all();
            drop(spent);
            if got {
                return Poll::Ready(Ok(()));
            }
            if parked {
                return Poll::Pending;
            }
            fresh = Some(waker.clone());
        }
    }

    /// A woken waiter's retry, under the mutex: takes its permits if they are free and the waiters
    /// ahead of it in line can still be served (it may have been woken by the same release as
    /// they were, and a newcomer may have taken some of the permits since), so waiters are served
    /// among themselves in FIFO order. Otherwise it waits again in the same place; the last woken
    /// waiter clears `NOTIFIED` in the same CAS, so holders it finds release through the mutex and
    /// wake it again. Returns whether it took the permits; its node is gone then, and the waker the
    /// node held is in `spent`.
    fn compete(&self, line: &mut Line, key: usize, spent: &mut Option<Waker>) -> bool {
        let n = line.waiters.request(key);
        self.promised.fetch_sub(n, Ordering::Relaxed);
        let last_woken = line.waiters.notified() == 0;
        let head = line.waiters.head() == Some(key);
        let need = if head {
            Some(n)
        } else {
            Self::needed_through(line, key, self.state.free())
        };
        // Overtaken at the head past the bound: `HANDOFF` goes in with the same CAS that finds the
        // permits gone, so no release can slip by unserved in between.
        let overdue = || head && line.waiters.waited(key, self.bound, line.waiters.now());
        match self.state.retake(n, need, last_woken, overdue) {
            Retake::Taken => {
                *spent = line.waiters.take(key);
                true
            }
            Retake::Overtaken => false,
        }
    }

    /// The permits the waiters from the head of the line through `key` ask for together, or `None`
    /// once they exceed `free` (so the walk ends after at most `free + 1` waiters: each asks for at
    /// least one permit).
    fn needed_through(line: &Line, key: usize, free: usize) -> Option<usize> {
        let mut need = 0;
        let mut at = line.waiters.head();
        while let Some(k) = at {
            // At most `free` plus one request, each at most `MAX_PERMITS`: no overflow.
            need += line.waiters.request(k);
            if need > free {
                return None;
            }
            if k == key {
                return Some(need);
            }
            at = line.waiters.next(k);
        }
        unreachable!("a waiting node is in the line")
    }

    fn cancel(&self, key: usize) {
        // The node's waker, dropped after the mutex is unlocked: dropping it runs its code, which
        // may even return permits to this semaphore.
        let mut spent = None;
        // Declared before the closure's lock: dropped after unlocking.
        let mut released = Released::new();
        serve_line(&self.line, |line| {
            let (status, n, waker) = line.waiters.remove(key);
            spent = waker;
            if status == Status::Granted {
                self.state.give_back(n);
                if let Some(g) = &mut line.groups {
                    // The permits were counted for it when they were granted.
                    g.release(n, self.held(), true, &mut released);
                }
            }
            self.forget_notified(line, status == Status::Notified);
            if let (Status::Waiting | Status::Notified, Some(g)) = (status, &mut line.groups) {
                // Left before being served: no charge. (A waiter granted in a race with its drop
                // was charged; its permits went back above and are passed on.)
                g.leave(key);
            }
            if status == Status::Notified {
                self.promised.fetch_sub(n, Ordering::Relaxed);
            }
            self.dispatch(line)
        });
        drop(spent);
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("available_permits", &self.available_permits())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// The slow-path future of an acquire: waits in line for `n` permits.
struct SemWait<'a> {
    sem: &'a Semaphore,
    n: usize,
    key: usize,
}

impl<'a> SemWait<'a> {
    fn new(sem: &'a Semaphore, n: usize) -> Self {
        SemWait {
            sem,
            n,
            key: NOT_QUEUED,
        }
    }
}

impl Future for SemWait<'_> {
    type Output = Result<(), AcquireError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.key == NOT_QUEUED {
            match self.sem.acquire_or_enqueue(self.n, cx.waker()) {
                Ok(None) => Poll::Ready(Ok(())),
                Ok(Some(key)) => {
                    self.key = key;
                    Poll::Pending
                }
                Err(e) => Poll::Ready(Err(e)),
            }
        } else {
            let ready = self.sem.poll_waiting(self.key, cx.waker());
            if ready.is_ready() {
                self.key = NOT_QUEUED;
            }
            ready
        }
    }
}

impl Drop for SemWait<'_> {
    fn drop(&mut self) {
        if self.key != NOT_QUEUED {
            self.sem.cancel(self.key);
        }
    }
}

#[cold]
#[inline(never)]
fn merge_foreign() -> ! {
    panic!("merge: both permits must come from the same Semaphore")
}

/// Permits taken from a [`Semaphore`]; returned on drop.
#[must_use = "the permits are returned as soon as the permit is dropped"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
    n: usize,
}

impl<'a> SemaphorePermit<'a> {
    /// Keeps the permits out of the semaphore for good: its capacity shrinks by [`count`](Self::count).
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(2);
    /// sem.try_acquire().unwrap().forget();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn forget(mut self) {
        if self.sem.group_fair && self.n > 0 {
            self.sem.forget_held(self.n);
        } else {
            self.sem.circulating.fetch_sub(self.n, Ordering::Relaxed);
        }
        self.n = 0;
    }

    /// How many permits this holds.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(2);
    /// assert_eq!(sem.try_acquire_many(2).unwrap().count(), 2);
    /// ```
    pub fn count(&self) -> usize {
        self.n
    }

    /// Moves `n` of this permit's permits into a new permit, or returns `None` (changing nothing) if
    /// it holds fewer than `n`.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(3);
    /// let mut p = sem.try_acquire_many(3).unwrap();
    /// let q = p.split(1).unwrap();
    /// assert_eq!((p.count(), q.count()), (2, 1));
    /// assert!(p.split(5).is_none());
    /// drop(q);
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn split(&mut self, n: usize) -> Option<Self> {
        self.n = self.n.checked_sub(n)?;
        Some(SemaphorePermit { sem: self.sem, n })
    }

    /// Moves `other`'s permits into this one.
    ///
    /// # Panics
    ///
    /// If the two permits come from different semaphores.
    ///
    /// ```
    /// let sem = rondo::sync::Semaphore::new(3);
    /// let mut p = sem.try_acquire().unwrap();
    /// p.merge(sem.try_acquire_many(2).unwrap());
    /// assert_eq!(p.count(), 3);
    /// ```
    pub fn merge(&mut self, mut other: Self) {
        if !core::ptr::eq(self.sem, other.sem) {
            merge_foreign();
        }
        self.n += core::mem::take(&mut other.n);
    }
}

impl Drop for SemaphorePermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.sem.release(self.n);
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("count", &self.n)
            .finish_non_exhaustive()
    }
}

/// Permits owning an `Arc` of their [`Semaphore`]; returned on drop.
#[must_use = "the permits are returned as soon as the permit is dropped"]
pub struct SemaphorePermitArc {
    sem: Arc<Semaphore>,
    n: usize,
}

impl SemaphorePermitArc {
    /// Keeps the permits out of the semaphore for good.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(2));
    /// futures::executor::block_on(sem.acquire_arc()).unwrap().forget();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn forget(mut self) {
        if self.sem.group_fair && self.n > 0 {
            self.sem.forget_held(self.n);
        } else {
            self.sem.circulating.fetch_sub(self.n, Ordering::Relaxed);
        }
        self.n = 0;
    }

    /// How many permits this holds.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(2));
    /// assert_eq!(futures::executor::block_on(sem.acquire_arc()).unwrap().count(), 1);
    /// ```
    pub fn count(&self) -> usize {
        self.n
    }

    /// Moves `n` of this permit's permits into a new permit (sharing the `Arc`), or returns `None` if
    /// it holds fewer than `n`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(2));
    /// let mut p = sem.try_acquire_many_arc(2).unwrap();
    /// let q = p.split(1).unwrap();
    /// assert_eq!((p.count(), q.count()), (1, 1));
    /// ```
    pub fn split(&mut self, n: usize) -> Option<Self> {
        self.n = self.n.checked_sub(n)?;
        Some(SemaphorePermitArc {
            sem: Arc::clone(&self.sem),
            n,
        })
    }

    /// Moves `other`'s permits into this one.
    ///
    /// # Panics
    ///
    /// If the two permits come from different semaphores.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(rondo::sync::Semaphore::new(2));
    /// let mut p = sem.try_acquire_arc().unwrap();
    /// p.merge(sem.try_acquire_arc().unwrap());
    /// assert_eq!(p.count(), 2);
    /// ```
    pub fn merge(&mut self, mut other: Self) {
        if !Arc::ptr_eq(&self.sem, &other.sem) {
            merge_foreign();
        }
        self.n += core::mem::take(&mut other.n);
    }
}

impl Drop for SemaphorePermitArc {
    #[inline]
    fn drop(&mut self) {
        self.sem.release(self.n);
    }
}

impl fmt::Debug for SemaphorePermitArc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermitArc")
            .field("count", &self.n)
            .finish_non_exhaustive()
    }
}
