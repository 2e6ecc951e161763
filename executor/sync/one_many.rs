//! [`AsyncOneManyLock`]: an async reader-writer lock ("one writer or many readers").

use core::cell::UnsafeCell;
use core::fmt;
use core::future::Future;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::pin::Pin;
use core::ptr::NonNull;
use core::task::{Context, Poll};
use core::time::Duration;
use std::sync::Arc;

use super::raw_one_many::{RawOneMany, Req, Wait};

/// Which kind of access [`AsyncOneManyLock::acquire`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OneManyMode {
    /// Many holders at once, read-only access ([`SharedGuard`]).
    Shared,
    /// One holder, read-write access ([`ExclusiveGuard`]).
    Exclusive,
}

/// An async reader-writer lock: many [`shared`](Self::shared) holders or one
/// [`exclusive`](Self::exclusive) holder, with an [`upgradable`](Self::upgradable) shared hold that can
/// become exclusive.
///
/// * Uncontended acquires complete on their first poll with a single atomic CAS, no allocation.
/// * Waiters form one FIFO line. Once a writer waits, readers arriving later queue behind it; when a
///   writer releases, every reader queued before the next writer gets in before that writer
///   (phase-fair): in a fair lock they are admitted at once and woken in one batch, in a
///   bounded-barging lock each is woken by the one before it once that one holds the lock.
/// * [`new`](Self::new) makes a *fair* lock: the lock is handed directly to the head of the line, and
///   while anyone waits, newcomers queue (and `try_*` fails): no barging.
/// * [`with_barging`](Self::with_barging) makes a *bounded-barging* lock (Go's `sync.Mutex` scheme): a
///   release wakes the head of the line without handing it the lock, so a running task may take the
///   free lock first and no context switch is needed per hand-off. Once the head has waited longer
///   than the bound, the lock switches to direct hand-off until the line catches up.
/// * In a bounded-barging lock, a newcomer that finds the lock busy (and no hand-off under way)
///   looks again a few times over a few hundred nanoseconds before it joins the line: a holder on
///   another thread usually releases sooner than a park and a wake take. A lock held across an
///   `.await`, or for longer than that, costs such a newcomer that short wait once per acquire.
/// * Dropping a pending acquire future never loses a wakeup or leaks the lock.
///
/// # Names in other crates
///
/// | rondo | tokio::sync::RwLock | async_lock::RwLock |
/// |---|---|---|
/// | [`shared`](Self::shared) / [`try_shared`](Self::try_shared) | `read` / `try_read` | `read` / `try_read` |
/// | [`exclusive`](Self::exclusive) / [`try_exclusive`](Self::try_exclusive) | `write` / `try_write` | `write` / `try_write` |
/// | [`shared_arc`](Self::shared_arc) / [`exclusive_arc`](Self::exclusive_arc) | `read_owned` / `write_owned` | `read_arc` / `write_arc` |
/// | [`upgradable`](Self::upgradable) / [`try_upgradable`](Self::try_upgradable) | — | `upgradable_read` / `try_upgradable_read` |
/// | [`upgradable_arc`](Self::upgradable_arc) / [`try_upgradable_arc`](Self::try_upgradable_arc) | — | `upgradable_read_arc` / `try_upgradable_read_arc` |
/// | [`UpgradableGuard::upgrade`] / [`UpgradableGuard::try_upgrade`] / [`UpgradableGuard::downgrade`] | — | `RwLockUpgradableReadGuard::upgrade` / `try_upgrade` / `downgrade` |
/// | [`UpgradableGuardArc::upgrade`] / [`UpgradableGuardArc::try_upgrade`] / [`UpgradableGuardArc::downgrade`] | — | `RwLockUpgradableReadGuardArc::upgrade` / `try_upgrade` / `downgrade` |
/// | [`UpgradableGuard::upgrade_blocking`] / [`UpgradableGuardArc::upgrade_blocking`] | — | `RwLockUpgradableReadGuard::upgrade_blocking` / `RwLockUpgradableReadGuardArc::upgrade_blocking` |
/// | [`ExclusiveGuard::downgrade`] / [`ExclusiveGuardArc::downgrade`] | `RwLockWriteGuard::downgrade` / `OwnedRwLockWriteGuard::downgrade` | `RwLockWriteGuard::downgrade` / `RwLockWriteGuardArc::downgrade` |
/// | [`ExclusiveGuard::downgrade_to_upgradable`] / [`ExclusiveGuardArc::downgrade_to_upgradable`] | — | `RwLockWriteGuard::downgrade_to_upgradable` / `RwLockWriteGuardArc::downgrade_to_upgradable` |
/// | [`SharedGuard::map`] / [`ExclusiveGuard::map`] | `RwLockReadGuard::map` / `RwLockWriteGuard::map` | — |
/// | [`shared_blocking`](Self::shared_blocking) / [`exclusive_blocking`](Self::exclusive_blocking) | `blocking_read` / `blocking_write` | `read_blocking` / `write_blocking` |
/// | [`upgradable_blocking`](Self::upgradable_blocking) | — | `upgradable_read_blocking` |
/// | [`shared_arc_blocking`](Self::shared_arc_blocking) / [`exclusive_arc_blocking`](Self::exclusive_arc_blocking) / [`upgradable_arc_blocking`](Self::upgradable_arc_blocking) | — | `read_arc_blocking` / `write_arc_blocking` / `upgradable_read_arc_blocking` |
/// | [`with_barging`](Self::with_barging) | — (always FIFO) | — (always barging, unbounded) |
///
/// A future that is polled once and then never polled or dropped while at the head of the line
/// blocks everyone behind it: this is inherent to direct hand-off (the lock is already its own).
///
/// The lock is `Send` when `T: Send` and `Sync` when `T: Send + Sync`. Its guards are `Send` and
/// `Sync` exactly when `T: Send + Sync`:
///
/// ```compile_fail
/// fn assert_send<S: Send>() {}
/// // `Cell` is not `Sync`, so a shared guard of it must not cross threads.
/// assert_send::<rondo::sync::SharedGuard<'static, std::cell::Cell<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_sync<S: Sync>() {}
/// assert_sync::<rondo::sync::SharedGuard<'static, std::cell::Cell<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_send<S: Send>() {}
/// // `Rc` is not `Send`: an exclusive guard would let another thread mutate it.
/// assert_send::<rondo::sync::ExclusiveGuard<'static, std::rc::Rc<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_sync<S: Sync>() {}
/// assert_sync::<rondo::sync::ExclusiveGuard<'static, std::cell::Cell<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_send<S: Send>() {}
/// assert_send::<rondo::sync::ExclusiveGuardArc<std::rc::Rc<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_send<S: Send>() {}
/// assert_send::<rondo::sync::SharedGuardArc<std::cell::Cell<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_sync<S: Sync>() {}
/// assert_sync::<rondo::sync::SharedGuardArc<std::cell::Cell<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_send<S: Send>() {}
/// // `MutexGuard` is `Sync` but not `Send`: the last `SharedGuardArc` drops the value.
/// assert_send::<rondo::sync::SharedGuardArc<std::sync::MutexGuard<'static, u8>>>();
/// ```
/// ```compile_fail
/// fn assert_sync<S: Sync>() {}
/// assert_sync::<rondo::sync::SharedGuardArc<std::sync::MutexGuard<'static, u8>>>();
/// ```
/// ```compile_fail
/// fn assert_sync<S: Sync>() {}
/// assert_sync::<rondo::sync::UpgradableGuard<'static, std::cell::Cell<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_send<S: Send>() {}
/// assert_send::<rondo::sync::MappedExclusiveGuard<'static, std::rc::Rc<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_send<S: Send>() {}
/// assert_send::<rondo::sync::UpgradableGuardArc<std::cell::Cell<u8>>>();
/// ```
/// ```compile_fail
/// fn assert_sync<S: Sync>() {}
/// assert_sync::<rondo::sync::UpgradableGuardArc<std::sync::MutexGuard<'static, u8>>>();
/// ```
/// ```
/// // The positive cases, so the negative ones above fail for the right reason.
/// fn assert_send_sync<S: Send + Sync>() {}
/// assert_send_sync::<rondo::sync::AsyncOneManyLock<Vec<u8>>>();
/// assert_send_sync::<rondo::sync::SharedGuard<'static, Vec<u8>>>();
/// assert_send_sync::<rondo::sync::ExclusiveGuard<'static, Vec<u8>>>();
/// assert_send_sync::<rondo::sync::SharedGuardArc<Vec<u8>>>();
/// assert_send_sync::<rondo::sync::ExclusiveGuardArc<Vec<u8>>>();
/// assert_send_sync::<rondo::sync::UpgradableGuard<'static, Vec<u8>>>();
/// assert_send_sync::<rondo::sync::MappedExclusiveGuard<'static, Vec<u8>>>();
/// assert_send_sync::<rondo::sync::UpgradableGuardArc<Vec<u8>>>();
/// ```
///
/// Shared guards are covariant in `T` (they only ever read it), exclusive guards in their lifetime:
///
/// ```
/// use rondo::sync::{ExclusiveGuard, SharedGuard, SharedGuardArc};
/// fn shorten<'a, 'b: 'a>(g: SharedGuard<'a, &'b str>) -> SharedGuard<'a, &'a str> {
///     g
/// }
/// fn shorten_arc<'a>(g: SharedGuardArc<&'static str>) -> SharedGuardArc<&'a str> {
///     g
/// }
/// fn shorter_borrow<'a, 'b: 'a>(g: ExclusiveGuard<'b, u8>) -> ExclusiveGuard<'a, u8> {
///     g
/// }
/// ```
///
/// An exclusive or upgradable guard must stay invariant in `T`, or it could store a short-lived
/// reference in a lock that outlives it:
///
/// ```compile_fail
/// use rondo::sync::ExclusiveGuard;
/// fn shorten<'a, 'b: 'a>(g: ExclusiveGuard<'a, &'b str>) -> ExclusiveGuard<'a, &'a str> {
///     g
/// }
/// ```
/// ```compile_fail
/// use rondo::sync::UpgradableGuard;
/// fn shorten<'a, 'b: 'a>(g: UpgradableGuard<'a, &'b str>) -> UpgradableGuard<'a, &'a str> {
///     g
/// }
/// ```
/// ```compile_fail
/// use rondo::sync::UpgradableGuardArc;
/// fn shorten<'a>(g: UpgradableGuardArc<&'static str>) -> UpgradableGuardArc<&'a str> {
///     g
/// }
/// ```
/// ```compile_fail
/// use rondo::sync::ExclusiveGuardArc;
/// fn shorten<'a>(g: ExclusiveGuardArc<&'static str>) -> ExclusiveGuardArc<&'a str> {
///     g
/// }
/// ```
/// ```compile_fail
/// use rondo::sync::MappedExclusiveGuard;
/// fn shorten<'a, 'b: 'a>(g: MappedExclusiveGuard<'a, &'b str>) -> MappedExclusiveGuard<'a, &'a str> {
///     g
/// }
/// ```
pub struct AsyncOneManyLock<T: ?Sized> {
    raw: RawOneMany,
    value: UnsafeCell<T>,
}

// SAFETY: the lock owns its `T`; moving the lock moves the `T`.
unsafe impl<T: ?Sized + Send> Send for AsyncOneManyLock<T> {}
// SAFETY: through `&AsyncOneManyLock` several threads may read `T` at once (needs `T: Sync`) and one
// thread at a time may mutate it or move values out of it (needs `T: Send`); the state word enforces
// one writer or many readers.
unsafe impl<T: ?Sized + Send + Sync> Sync for AsyncOneManyLock<T> {}

impl<T> AsyncOneManyLock<T> {
    /// Creates an unlocked, fair lock holding `value`: strict FIFO hand-off, no barging.
    ///
    /// This is a `const fn`, except when built with `--cfg loom` (loom's atomics and mutexes have no
    /// `const` constructors), where it is an ordinary `fn`.
    ///
    /// ```
    /// use rondo::sync::AsyncOneManyLock;
    /// static CONFIG: AsyncOneManyLock<u32> = AsyncOneManyLock::new(7);
    /// assert_eq!(*CONFIG.try_shared().unwrap(), 7);
    /// ```
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Self::with_barging(value, Duration::ZERO)
    }

    /// Creates an unlocked lock holding `value` that lets running tasks barge past sleeping waiters
    /// for at most `bound` (Go's `sync.Mutex` uses 1 ms).
    ///
    /// A release wakes the head of the line but leaves the lock free, so a task that is already
    /// running may take it first; this saves a context switch per hand-off under contention. Once the
    /// head of the line has waited `bound` or longer, each release hands the lock directly to it (and
    /// newcomers queue) until the head has waited less than `bound` again. `Duration::ZERO` gives the
    /// fair lock of [`new`](Self::new).
    ///
    /// What barging gives up, within the bound: strict FIFO order between waiters and newcomers, and
    /// phase fairness (a newcomer writer may take a free lock before readers that queued before it).
    /// Readers never barge past a waiting writer, so neither kind starves the other for longer than
    /// `bound` plus one round of the line.
    ///
    /// Not `const` under `--cfg loom`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rondo::sync::AsyncOneManyLock;
    /// static COUNTS: AsyncOneManyLock<u64> =
    ///     AsyncOneManyLock::with_barging(0, Duration::from_millis(1));
    /// futures::executor::block_on(async { *COUNTS.exclusive().await += 1 });
    /// assert_eq!(*COUNTS.try_shared().unwrap(), 1);
    /// ```
    #[cfg(not(loom))]
    pub const fn with_barging(value: T, bound: Duration) -> Self {
        AsyncOneManyLock {
            raw: RawOneMany::new(bound),
            value: UnsafeCell::new(value),
        }
    }

    /// Creates an unlocked, fair lock holding `value` (not `const` under `--cfg loom`).
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Self::with_barging(value, Duration::ZERO)
    }

    /// Creates a bounded-barging lock (not `const` under `--cfg loom`).
    #[cfg(loom)]
    pub fn with_barging(value: T, bound: Duration) -> Self {
        AsyncOneManyLock {
            raw: RawOneMany::new(bound),
            value: UnsafeCell::new(value),
        }
    }

    /// Creates an unlocked *group-fair* lock holding `value`: waiters are granted the lock in
    /// proportion to the weights of their tasks' groups.
    ///
    /// It hands the lock over as [`new`](Self::new) does and keeps every guarantee of that mode
    /// (no barging, cancel-safe acquires, upgradable holds, the `_arc` and `_blocking` variants);
    /// only the order in which waiters are served differs:
    ///
    /// * Waiters are grouped by the group of the task that first polled the acquire
    ///   ([`Group`](crate::group::Group)). The waiting groups form a weighted fair queue: each has
    ///   a virtual finish tag that every grant, shared or exclusive, advances by `1 ÷ weight`, and
    ///   a release serves the group with the smallest tag. Within a group, waiters are served in
    ///   FIFO order. A group that starts waiting enters at the queue's current virtual time, so an
    ///   idle group banks no credit.
    /// * Phase-fair batches by weight: a release admits, in the queue's order, every reader it
    ///   picks for as long as no writer holds the lock, and stops at the first writer it picks;
    ///   newcomers queue behind. So reader batches and writers alternate while both wait, and
    ///   which readers a batch holds is decided by the weights.
    /// * A waiting upgrade goes first, as in every mode (its holder already holds part of the
    ///   lock), and is not charged.
    /// * Waiters outside any group (a thread outside the runtime, [`block_on`](crate::block_on),
    ///   another executor, the `_blocking` methods) count together as one more group of weight 1.
    /// * Weight inheritance: while a group waits, every group holding the lock (the group of the
    ///   task that took each hold) is scheduled at the heaviest waiting group's weight if that is
    ///   above its own, up its tenant tree, and still charged for its own service, until it
    ///   releases or nobody waits. So a light holder does not make a heavy waiter wait at the
    ///   light group's pace. For this, an uncontended acquire and release also take the lock's
    ///   internal mutex once each to count the hold by group.
    ///
    /// tokio's `RwLock` has no such mode.
    ///
    /// ```
    /// use rondo::sync::AsyncOneManyLock;
    /// let cache = AsyncOneManyLock::group_fair(vec![1, 2]);
    /// futures::executor::block_on(async { cache.exclusive().await.push(3) });
    /// assert_eq!(cache.try_shared().unwrap().len(), 3);
    /// ```
    pub fn group_fair(value: T) -> Self {
        AsyncOneManyLock {
            raw: RawOneMany::group_fair(),
            value: UnsafeCell::new(value),
        }
    }

    /// Consumes the lock and returns the value.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(String::from("hi"));
    /// assert_eq!(lock.into_inner(), "hi");
    /// ```
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> AsyncOneManyLock<T> {
    fn value(&self) -> NonNull<T> {
        // SAFETY: `UnsafeCell::get` never returns null.
        unsafe { NonNull::new_unchecked(self.value.get()) }
    }

    fn shared_guard(&self) -> SharedGuard<'_, T> {
        SharedGuard {
            raw: &self.raw,
            value: self.value(),
            _marker: PhantomData,
        }
    }

    fn exclusive_guard(&self) -> ExclusiveGuard<'_, T> {
        ExclusiveGuard { lock: self }
    }

    /// The largest weight among the groups with a waiter in a group-fair lock's line; 0 when
    /// nobody waits in a group, and always 0 for a lock not made by
    /// [`group_fair`](AsyncOneManyLock::group_fair). One relaxed load: a snapshot, as fresh as the
    /// latest change to the line.
    ///
    /// This is the weight the holders' groups are scheduled at while they hold the lock, when it
    /// is above their own (weight inheritance).
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::group_fair(());
    /// assert_eq!(lock.heaviest_waiting_weight(), 0);
    /// ```
    pub fn heaviest_waiting_weight(&self) -> u32 {
        self.raw.heaviest_waiting_weight()
    }

    /// For tests: see `RawOneMany::inheritance_snapshot`.
    #[cfg(test)]
    pub(crate) fn inheritance_snapshot(&self) -> (usize, usize, u32, usize) {
        self.raw.inheritance_snapshot()
    }

    /// For tests: see `RawOneMany::uncounted_loan_is_current`.
    #[cfg(test)]
    pub(crate) fn uncounted_loan_is_current(&self) -> bool {
        self.raw.uncounted_loan_is_current()
    }

    /// Waits for shared (read) access.
    ///
    /// Completes on the first poll when no writer holds the lock and nobody waits; otherwise joins the
    /// FIFO line. Readers that arrive while a writer waits queue behind that writer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future before it completes removes it from the line; if the lock had
    /// already been handed to it, the hold is released and passed on, and anyone it was blocking is
    /// admitted at once. The place in line is lost.
    ///
    /// ```
    /// use rondo::sync::AsyncOneManyLock;
    /// let lock = AsyncOneManyLock::new(1);
    /// futures::executor::block_on(async {
    ///     let a = lock.shared().await;
    ///     let b = lock.shared().await; // readers share
    ///     assert_eq!(*a + *b, 2);
    /// });
    /// ```
    pub async fn shared(&self) -> SharedGuard<'_, T> {
        if !self.raw.try_shared() {
            Wait::new(&self.raw, Req::Shared).await;
        }
        self.shared_guard()
    }

    /// Waits for exclusive (write) access.
    ///
    /// Completes on the first poll when the lock is free and nobody waits; otherwise joins the FIFO
    /// line. Writers are served one at a time in arrival order.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future before it completes removes it from the line; readers queued
    /// behind it are admitted at once if no writer holds the lock, and a hold already handed to it is
    /// passed on. The place in line is lost.
    ///
    /// ```
    /// use rondo::sync::AsyncOneManyLock;
    /// let lock = AsyncOneManyLock::new(vec![1]);
    /// futures::executor::block_on(async {
    ///     lock.exclusive().await.push(2);
    ///     assert_eq!(*lock.shared().await, [1, 2]);
    /// });
    /// ```
    pub async fn exclusive(&self) -> ExclusiveGuard<'_, T> {
        if !self.raw.try_exclusive() {
            Wait::new(&self.raw, Req::Exclusive).await;
        }
        self.exclusive_guard()
    }

    /// Waits for an upgradable shared hold: it shares the lock with plain readers, excludes writers
    /// and other upgradable holds, and can later be [upgraded](UpgradableGuard::upgrade) to exclusive
    /// access atomically (no writer can get in between).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`shared`](Self::shared).
    ///
    /// ```
    /// use rondo::sync::AsyncOneManyLock;
    /// let lock = AsyncOneManyLock::new(1);
    /// futures::executor::block_on(async {
    ///     let up = lock.upgradable().await;
    ///     let reader = lock.shared().await; // shares with readers
    ///     assert!(lock.try_upgradable().is_none()); // but not with another upgradable
    ///     assert_eq!(*up + *reader, 2);
    ///     drop(reader);
    ///     let mut w = up.upgrade().await;
    ///     *w = 5;
    /// });
    /// assert_eq!(*lock.try_shared().unwrap(), 5);
    /// ```
    pub async fn upgradable(&self) -> UpgradableGuard<'_, T> {
        if !self.raw.try_upgradable() {
            Wait::new(&self.raw, Req::Upgradable).await;
        }
        UpgradableGuard { lock: self }
    }

    /// Waits for access in the given mode.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`shared`](Self::shared) and [`exclusive`](Self::exclusive).
    ///
    /// ```
    /// use rondo::sync::{AsyncOneManyLock, OneManyGuard, OneManyMode};
    /// let lock = AsyncOneManyLock::new(5);
    /// futures::executor::block_on(async {
    ///     match lock.acquire(OneManyMode::Exclusive).await {
    ///         OneManyGuard::Exclusive(mut g) => *g += 1,
    ///         OneManyGuard::Shared(_) => unreachable!(),
    ///     }
    ///     let g = lock.acquire(OneManyMode::Shared).await;
    ///     assert_eq!(*g, 6); // `OneManyGuard` derefs to the value
    /// });
    /// ```
    pub async fn acquire(&self, mode: OneManyMode) -> OneManyGuard<'_, T> {
        match mode {
            OneManyMode::Shared => OneManyGuard::Shared(self.shared().await),
            OneManyMode::Exclusive => OneManyGuard::Exclusive(self.exclusive().await),
        }
    }

    /// Takes shared access if that is possible right now without waiting: no writer holds the lock,
    /// no writer waits, and (in a fair lock) nobody waits at all.
    ///
    /// # Panics
    ///
    /// If [`MAX_READERS`](Self::MAX_READERS) shared holds already exist (only reachable by leaking
    /// guards with `mem::forget`).
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(0);
    /// let r = lock.try_shared().unwrap();
    /// assert!(lock.try_shared().is_some());
    /// assert!(lock.try_exclusive().is_none());
    /// drop(r);
    /// ```
    pub fn try_shared(&self) -> Option<SharedGuard<'_, T>> {
        self.raw.try_shared().then(|| self.shared_guard())
    }

    /// Takes exclusive access if the lock is free and (in a fair lock) nobody waits.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(0);
    /// let mut w = lock.try_exclusive().unwrap();
    /// *w = 3;
    /// assert!(lock.try_shared().is_none());
    /// drop(w);
    /// assert_eq!(*lock.try_shared().unwrap(), 3);
    /// ```
    pub fn try_exclusive(&self) -> Option<ExclusiveGuard<'_, T>> {
        self.raw.try_exclusive().then(|| self.exclusive_guard())
    }

    /// Takes an upgradable hold if that is possible right now: no writer holds or waits, no other
    /// upgradable hold exists, and (in a fair lock) nobody waits.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(0);
    /// let up = lock.try_upgradable().unwrap();
    /// assert!(lock.try_upgradable().is_none());
    /// assert!(lock.try_shared().is_some());
    /// drop(up);
    /// ```
    pub fn try_upgradable(&self) -> Option<UpgradableGuard<'_, T>> {
        // `then`, not `then_some`: a guard built eagerly would release a hold it never had.
        self.raw
            .try_upgradable()
            .then(|| UpgradableGuard { lock: self })
    }

    /// Like [`shared`](Self::shared), returning a guard that owns an `Arc` of the lock. The future
    /// owns a clone of the `Arc` too, so it is `'static` when `T` is: it can be stored, returned or
    /// spawned.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`shared`](Self::shared).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rondo::sync::{AsyncOneManyLock, SharedGuardArc};
    /// let lock = Arc::new(AsyncOneManyLock::new(4));
    /// let fut = lock.shared_arc();
    /// drop(lock); // the future keeps the lock alive
    /// let guard: SharedGuardArc<i32> = futures::executor::block_on(fut);
    /// let handle = std::thread::spawn(move || *guard * 2);
    /// assert_eq!(handle.join().unwrap(), 8);
    /// ```
    pub fn shared_arc(self: &Arc<Self>) -> impl Future<Output = SharedGuardArc<T>> + use<T> {
        let lock = Arc::clone(self);
        async move {
            // The hold moves from the borrowed guard into the owned one.
            core::mem::forget(lock.shared().await);
            SharedGuardArc::new(lock)
        }
    }

    /// Like [`exclusive`](Self::exclusive), returning a guard that owns an `Arc` of the lock. The
    /// future owns a clone of the `Arc`, so it is `'static` when `T` is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`exclusive`](Self::exclusive).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(4));
    /// let mut guard = futures::executor::block_on(lock.exclusive_arc());
    /// std::thread::spawn(move || *guard += 1).join().unwrap();
    /// assert_eq!(*lock.try_shared().unwrap(), 5);
    /// ```
    pub fn exclusive_arc(self: &Arc<Self>) -> impl Future<Output = ExclusiveGuardArc<T>> + use<T> {
        let lock = Arc::clone(self);
        async move {
            core::mem::forget(lock.exclusive().await);
            ExclusiveGuardArc { lock }
        }
    }

    /// Like [`try_shared`](Self::try_shared), returning a guard that owns an `Arc` of the lock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let g = lock.try_shared_arc().unwrap();
    /// assert!(lock.try_exclusive_arc().is_none());
    /// drop(g);
    /// assert!(lock.try_exclusive_arc().is_some());
    /// ```
    pub fn try_shared_arc(self: &Arc<Self>) -> Option<SharedGuardArc<T>> {
        self.raw
            .try_shared()
            .then(|| SharedGuardArc::new(Arc::clone(self)))
    }

    /// Like [`try_exclusive`](Self::try_exclusive), returning a guard that owns an `Arc` of the lock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// *lock.try_exclusive_arc().unwrap() += 1;
    /// assert_eq!(*lock.try_shared().unwrap(), 2);
    /// ```
    pub fn try_exclusive_arc(self: &Arc<Self>) -> Option<ExclusiveGuardArc<T>> {
        self.raw.try_exclusive().then(|| ExclusiveGuardArc {
            lock: Arc::clone(self),
        })
    }

    /// Like [`upgradable`](Self::upgradable), returning a guard that owns an `Arc` of the lock. The
    /// future owns a clone of the `Arc`, so it is `'static` when `T` is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`upgradable`](Self::upgradable): dropping the future before it completes
    /// removes it from the line, and a hold already handed to it is released and passed on.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rondo::sync::AsyncOneManyLock;
    /// let lock = Arc::new(AsyncOneManyLock::new(1));
    /// let fut = lock.upgradable_arc();
    /// let up = futures::executor::block_on(fut);
    /// assert!(lock.try_shared().is_some()); // shares with readers
    /// assert!(lock.try_upgradable().is_none()); // not with another upgradable
    /// let mut w = std::thread::spawn(move || futures::executor::block_on(up.upgrade()))
    ///     .join()
    ///     .unwrap();
    /// *w += 1;
    /// drop(w);
    /// assert_eq!(*lock.try_shared().unwrap(), 2);
    /// ```
    pub fn upgradable_arc(
        self: &Arc<Self>,
    ) -> impl Future<Output = UpgradableGuardArc<T>> + use<T> {
        let lock = Arc::clone(self);
        async move {
            // The hold moves from the borrowed guard into the owned one.
            core::mem::forget(lock.upgradable().await);
            UpgradableGuardArc { lock }
        }
    }

    /// Like [`try_upgradable`](Self::try_upgradable), returning a guard that owns an `Arc` of the
    /// lock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let up = lock.try_upgradable_arc().unwrap();
    /// assert!(lock.try_upgradable_arc().is_none());
    /// assert!(lock.try_shared_arc().is_some());
    /// drop(up);
    /// assert!(lock.try_exclusive_arc().is_some());
    /// ```
    pub fn try_upgradable_arc(self: &Arc<Self>) -> Option<UpgradableGuardArc<T>> {
        self.raw.try_upgradable().then(|| UpgradableGuardArc {
            lock: Arc::clone(self),
        })
    }

    /// Blocks the current thread until shared access is granted. For synchronous code; do not call it
    /// on an async runtime's worker thread (it would block the worker).
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(1);
    /// assert_eq!(*lock.shared_blocking(), 1);
    /// ```
    pub fn shared_blocking(&self) -> SharedGuard<'_, T> {
        match self.try_shared() {
            Some(g) => g,
            None => futures_lite::future::block_on(self.shared()),
        }
    }

    /// Blocks the current thread until exclusive access is granted. For synchronous code; do not call
    /// it on an async runtime's worker thread.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(1);
    /// *lock.exclusive_blocking() += 1;
    /// assert_eq!(*lock.shared_blocking(), 2);
    /// ```
    pub fn exclusive_blocking(&self) -> ExclusiveGuard<'_, T> {
        match self.try_exclusive() {
            Some(g) => g,
            None => futures_lite::future::block_on(self.exclusive()),
        }
    }

    /// Blocks the current thread until an upgradable hold is granted. For synchronous code; do not
    /// call it on an async runtime's worker thread.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let w = lock.try_exclusive_arc().unwrap();
    /// let waiter = {
    ///     let lock = Arc::clone(&lock);
    ///     std::thread::spawn(move || *lock.upgradable_blocking() * 10)
    /// };
    /// drop(w); // wakes the waiting thread
    /// assert_eq!(waiter.join().unwrap(), 10);
    /// ```
    pub fn upgradable_blocking(&self) -> UpgradableGuard<'_, T> {
        match self.try_upgradable() {
            Some(g) => g,
            None => futures_lite::future::block_on(self.upgradable()),
        }
    }

    /// Like [`shared_blocking`](Self::shared_blocking), returning a guard that owns an `Arc` of the
    /// lock. For synchronous code; do not call it on an async runtime's worker thread.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let r = lock.shared_arc_blocking();
    /// drop(lock); // the guard keeps the lock alive
    /// assert_eq!(*r, 1);
    /// ```
    pub fn shared_arc_blocking(self: &Arc<Self>) -> SharedGuardArc<T> {
        let lock = Arc::clone(self);
        // The hold moves from the borrowed guard into the owned one.
        core::mem::forget(lock.shared_blocking());
        SharedGuardArc::new(lock)
    }

    /// Like [`exclusive_blocking`](Self::exclusive_blocking), returning a guard that owns an `Arc`
    /// of the lock. For synchronous code; do not call it on an async runtime's worker thread.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let mut w = lock.exclusive_arc_blocking();
    /// std::thread::spawn(move || *w += 1).join().unwrap();
    /// assert_eq!(*lock.shared_arc_blocking(), 2);
    /// ```
    pub fn exclusive_arc_blocking(self: &Arc<Self>) -> ExclusiveGuardArc<T> {
        let lock = Arc::clone(self);
        core::mem::forget(lock.exclusive_blocking());
        ExclusiveGuardArc { lock }
    }

    /// Like [`upgradable_blocking`](Self::upgradable_blocking), returning a guard that owns an
    /// `Arc` of the lock. For synchronous code; do not call it on an async runtime's worker thread.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let up = lock.upgradable_arc_blocking();
    /// let r = lock.shared_arc_blocking(); // shares with readers
    /// let up = up.try_upgrade().unwrap_err(); // but cannot upgrade while they read
    /// drop(r);
    /// *up.try_upgrade().unwrap() = 3;
    /// assert_eq!(*lock.shared_arc_blocking(), 3);
    /// ```
    pub fn upgradable_arc_blocking(self: &Arc<Self>) -> UpgradableGuardArc<T> {
        let lock = Arc::clone(self);
        core::mem::forget(lock.upgradable_blocking());
        UpgradableGuardArc { lock }
    }

    /// Mutable access without locking: the `&mut` borrow proves nobody else holds the lock.
    ///
    /// ```
    /// let mut lock = rondo::sync::AsyncOneManyLock::new(1);
    /// *lock.get_mut() = 9;
    /// assert_eq!(lock.into_inner(), 9);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// The most shared holds that may exist at once. Going beyond it panics rather than corrupting the
    /// lock's state.
    pub const MAX_READERS: usize = super::raw_one_many::MAX_READERS;
}

impl<T: Default> Default for AsyncOneManyLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> From<T> for AsyncOneManyLock<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for AsyncOneManyLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("AsyncOneManyLock");
        match self.try_shared() {
            Some(guard) => d.field("value", &&*guard),
            None => d.field("value", &format_args!("<locked>")),
        };
        d.finish_non_exhaustive()
    }
}

/// Shared (read) access to an [`AsyncOneManyLock`], or to a part of its value after
/// [`map`](Self::map); released on drop. Covariant in `T`.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SharedGuard<'a, T: ?Sized> {
    raw: &'a RawOneMany,
    value: NonNull<T>,
    _marker: PhantomData<&'a T>,
}

// SAFETY: the guard gives `&T` access from whichever thread holds it, and its drop releases a shared
// hold, which any thread may do. Requiring `Send + Sync` (not just `Sync`) is the conservative bound
// documented on the lock.
unsafe impl<T: ?Sized + Send + Sync> Send for SharedGuard<'_, T> {}
// SAFETY: `&SharedGuard` only gives `&T`.
unsafe impl<T: ?Sized + Send + Sync> Sync for SharedGuard<'_, T> {}

impl<'a, T: ?Sized> SharedGuard<'a, T> {
    /// Narrows the guard to a part of the value; the lock stays held in shared mode until the new
    /// guard is dropped. An associated function (`SharedGuard::map(g, ..)`) so it cannot shadow a
    /// method of `T`.
    ///
    /// ```
    /// use rondo::sync::{AsyncOneManyLock, SharedGuard};
    /// let lock = AsyncOneManyLock::new((1, String::from("b")));
    /// let name: SharedGuard<'_, str> = SharedGuard::map(lock.try_shared().unwrap(), |v| v.1.as_str());
    /// assert_eq!(&*name, "b");
    /// assert!(lock.try_exclusive().is_none());
    /// ```
    pub fn map<U: ?Sized>(this: Self, f: impl FnOnce(&T) -> &U) -> SharedGuard<'a, U> {
        // `f` runs while `this` still owns the hold, so a panic in it releases the hold.
        // SAFETY: `this` is a shared hold, so `&T` is valid; `f` can only return a reference that
        // lives as long as that borrow, i.e. no longer than the hold, which moves into the new
        // guard below.
        let value = NonNull::from(f(unsafe { this.value.as_ref() }));
        SharedGuard {
            raw: ManuallyDrop::new(this).raw,
            value,
            _marker: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for SharedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is a shared hold on the lock, so no exclusive hold (the only source of
        // `&mut T`) exists until it is dropped.
        unsafe { self.value.as_ref() }
    }
}

impl<T: ?Sized> Drop for SharedGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.release_shared();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for SharedGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Exclusive (write) access to an [`AsyncOneManyLock`]; released on drop. Covariant in its lifetime,
/// invariant in `T` (like `&mut T`).
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ExclusiveGuard<'a, T: ?Sized> {
    lock: &'a AsyncOneManyLock<T>,
}

impl<'a, T: ?Sized> ExclusiveGuard<'a, T> {
    fn into_lock(self) -> &'a AsyncOneManyLock<T> {
        ManuallyDrop::new(self).lock
    }

    /// Turns exclusive access into shared access atomically: the lock is never free in between, so no
    /// writer can slip in. Readers waiting at the head of the line are admitted alongside.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(1);
    /// let mut w = lock.try_exclusive().unwrap();
    /// *w = 2;
    /// let r = w.downgrade();
    /// assert!(lock.try_exclusive().is_none());
    /// assert_eq!(*lock.try_shared().unwrap(), *r);
    /// ```
    pub fn downgrade(self) -> SharedGuard<'a, T> {
        let lock = self.into_lock();
        // Made first, so that a panic in a waker the downgrade calls (after the state has changed)
        // releases the shared hold.
        let shared = lock.shared_guard();
        lock.raw.downgrade();
        shared
    }

    /// Turns exclusive access into an upgradable hold atomically: readers may join, writers and other
    /// upgradable holds stay out.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(1);
    /// let up = lock.try_exclusive().unwrap().downgrade_to_upgradable();
    /// assert!(lock.try_shared().is_some());
    /// assert!(lock.try_upgradable().is_none());
    /// assert_eq!(*up.try_upgrade().unwrap(), 1);
    /// ```
    pub fn downgrade_to_upgradable(self) -> UpgradableGuard<'a, T> {
        let lock = self.into_lock();
        // Made first, so that a panic in a waker the downgrade calls (after the state has changed)
        // releases the upgradable hold.
        let upgradable = UpgradableGuard { lock };
        lock.raw.downgrade_to_upgradable();
        upgradable
    }

    /// Narrows the guard to a part of the value. The result cannot be downgraded: a part reached
    /// through `&mut T` (say, the inside of a `Mutex` via `get_mut`) may be unsafe to share with the
    /// readers a downgrade would admit. An associated function, so it cannot shadow a method of `T`.
    ///
    /// ```
    /// use rondo::sync::{AsyncOneManyLock, ExclusiveGuard};
    /// let lock = AsyncOneManyLock::new((1, vec![2]));
    /// let mut v = ExclusiveGuard::map(lock.try_exclusive().unwrap(), |t| &mut t.1);
    /// v.push(3);
    /// drop(v);
    /// assert_eq!(lock.try_shared().unwrap().1, [2, 3]);
    /// ```
    pub fn map<U: ?Sized>(
        this: Self,
        f: impl FnOnce(&mut T) -> &mut U,
    ) -> MappedExclusiveGuard<'a, U> {
        let lock = this.lock;
        // `f` runs while `this` still owns the hold, so a panic in it releases the hold.
        // SAFETY: `this` is the only hold on the lock and is not used while `f` runs, so this is
        // the only access to the value; `f` can only return a borrow of it (or of something that
        // outlives it), and the hold moves into the new guard below.
        let value = NonNull::from(f(unsafe { &mut *lock.value.get() }));
        let lock = this.into_lock();
        MappedExclusiveGuard {
            raw: &lock.raw,
            value,
            _marker: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for ExclusiveGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only hold on the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> DerefMut for ExclusiveGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only hold on the lock, and `&mut self` makes this the only borrow
        // through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for ExclusiveGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw.release_exclusive();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for ExclusiveGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Exclusive access to a part of an [`AsyncOneManyLock`]'s value, from [`ExclusiveGuard::map`];
/// released on drop. It has no `downgrade` (see [`ExclusiveGuard::map`]).
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct MappedExclusiveGuard<'a, T: ?Sized> {
    raw: &'a RawOneMany,
    value: NonNull<T>,
    _marker: PhantomData<&'a mut T>,
}

// SAFETY: as `ExclusiveGuard`: `&mut T` across threads needs `T: Send`, `&T` needs `T: Sync`, and the
// release is thread-agnostic.
unsafe impl<T: ?Sized + Send + Sync> Send for MappedExclusiveGuard<'_, T> {}
// SAFETY: `&MappedExclusiveGuard` only gives `&T`.
unsafe impl<T: ?Sized + Send + Sync> Sync for MappedExclusiveGuard<'_, T> {}

impl<'a, T: ?Sized> MappedExclusiveGuard<'a, T> {
    /// Narrows the guard further.
    ///
    /// ```
    /// use rondo::sync::{AsyncOneManyLock, ExclusiveGuard, MappedExclusiveGuard};
    /// let lock = AsyncOneManyLock::new(((0, 1), 2));
    /// let pair = ExclusiveGuard::map(lock.try_exclusive().unwrap(), |t| &mut t.0);
    /// *MappedExclusiveGuard::map(pair, |p| &mut p.1) = 7;
    /// assert_eq!(*lock.try_shared().unwrap(), ((0, 7), 2));
    /// ```
    pub fn map<U: ?Sized>(
        this: Self,
        f: impl FnOnce(&mut T) -> &mut U,
    ) -> MappedExclusiveGuard<'a, U> {
        let mut part = this.value;
        // `f` runs while `this` still owns the hold, so a panic in it releases the hold.
        // SAFETY: `this` is the only hold on the lock and is not used while `f` runs, so this is
        // the only access to the part; the hold moves into the new guard below.
        let value = NonNull::from(f(unsafe { part.as_mut() }));
        MappedExclusiveGuard {
            raw: ManuallyDrop::new(this).raw,
            value,
            _marker: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for MappedExclusiveGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only hold on the lock, and `value` points into (or was reached
        // from) the locked value.
        unsafe { self.value.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for MappedExclusiveGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as `deref`, and `&mut self` makes this the only borrow through the guard.
        unsafe { self.value.as_mut() }
    }
}

impl<T: ?Sized> Drop for MappedExclusiveGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.release_exclusive();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MappedExclusiveGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// An upgradable shared hold on an [`AsyncOneManyLock`], from
/// [`upgradable`](AsyncOneManyLock::upgradable): reads alongside plain readers, keeps writers and
/// other upgradable holds out, and can become exclusive without letting anyone in between. Released on
/// drop. Invariant in `T`, since an upgrade gives write access.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct UpgradableGuard<'a, T: ?Sized> {
    lock: &'a AsyncOneManyLock<T>,
}

impl<'a, T: ?Sized> UpgradableGuard<'a, T> {
    fn into_lock(self) -> &'a AsyncOneManyLock<T> {
        ManuallyDrop::new(self).lock
    }

    /// Waits until the other readers have left, then turns this hold into exclusive access. No
    /// writer can take the lock in between, and readers arriving meanwhile wait.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases the lock entirely (the upgradable hold moved
    /// into the future).
    ///
    /// ```
    /// use rondo::sync::AsyncOneManyLock;
    /// let lock = AsyncOneManyLock::new(1);
    /// futures::executor::block_on(async {
    ///     let up = lock.upgradable().await;
    ///     let mut w = up.upgrade().await;
    ///     *w += 1;
    ///     assert!(lock.try_shared().is_none());
    /// });
    /// assert_eq!(*lock.try_shared().unwrap(), 2);
    /// ```
    pub fn upgrade(self) -> Upgrade<'a, T> {
        let lock = self.into_lock();
        Upgrade {
            lock,
            wait: Wait::new(&lock.raw, Req::Upgrade),
        }
    }

    /// Blocks the current thread until the other readers have left, then turns this hold into
    /// exclusive access, as [`upgrade`](Self::upgrade). For synchronous code; do not call it on an
    /// async runtime's worker thread.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(1);
    /// std::thread::scope(|s| {
    ///     let up = lock.upgradable_blocking();
    ///     let reader = lock.shared_blocking();
    ///     s.spawn(move || drop(reader)); // the upgrade waits for this release
    ///     *up.upgrade_blocking() += 1;
    /// });
    /// assert_eq!(*lock.shared_blocking(), 2);
    /// ```
    pub fn upgrade_blocking(self) -> ExclusiveGuard<'a, T> {
        match self.try_upgrade() {
            Ok(w) => w,
            Err(up) => futures_lite::future::block_on(up.upgrade()),
        }
    }

    /// Turns this hold into exclusive access if no other reader holds the lock; otherwise gives the
    /// guard back unchanged.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(1);
    /// let up = lock.try_upgradable().unwrap();
    /// let reader = lock.try_shared().unwrap();
    /// let up = up.try_upgrade().unwrap_err(); // a reader is still in
    /// drop(reader);
    /// assert!(up.try_upgrade().is_ok());
    /// ```
    pub fn try_upgrade(self) -> Result<ExclusiveGuard<'a, T>, Self> {
        if self.lock.raw.try_upgrade() {
            Ok(ExclusiveGuard {
                lock: self.into_lock(),
            })
        } else {
            Err(self)
        }
    }

    /// Turns this hold into a plain shared one, letting another upgradable hold in.
    ///
    /// ```
    /// let lock = rondo::sync::AsyncOneManyLock::new(1);
    /// let r = lock.try_upgradable().unwrap().downgrade();
    /// assert!(lock.try_upgradable().is_some());
    /// assert_eq!(*r, 1);
    /// ```
    pub fn downgrade(self) -> SharedGuard<'a, T> {
        let lock = self.into_lock();
        // Made first, so that a panic in a waker the downgrade calls (after the state has changed)
        // releases the shared hold.
        let shared = lock.shared_guard();
        lock.raw.upgradable_to_shared();
        shared
    }
}

impl<T: ?Sized> Deref for UpgradableGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: an upgradable hold is a shared hold: no `&mut T` exists while it lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for UpgradableGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw.release_upgradable();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for UpgradableGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The future of [`UpgradableGuard::upgrade`]. It owns the upgradable hold until it completes.
#[must_use = "futures do nothing unless polled; dropping this one releases the lock"]
pub struct Upgrade<'a, T: ?Sized> {
    lock: &'a AsyncOneManyLock<T>,
    wait: Wait<'a>,
}

impl<'a, T: ?Sized> Future for Upgrade<'a, T> {
    type Output = ExclusiveGuard<'a, T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let lock = self.lock;
        Pin::new(&mut self.wait)
            .poll(cx)
            .map(|()| ExclusiveGuard { lock })
    }
}

impl<T: ?Sized> fmt::Debug for Upgrade<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upgrade").finish_non_exhaustive()
    }
}

/// A guard of either kind, from [`AsyncOneManyLock::acquire`]. Derefs to the value.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[derive(Debug)]
pub enum OneManyGuard<'a, T: ?Sized> {
    /// Shared access.
    Shared(SharedGuard<'a, T>),
    /// Exclusive access.
    Exclusive(ExclusiveGuard<'a, T>),
}

impl<T: ?Sized> OneManyGuard<'_, T> {
    /// The mode this guard holds the lock in.
    ///
    /// ```
    /// use rondo::sync::{AsyncOneManyLock, OneManyMode};
    /// let lock = AsyncOneManyLock::new(());
    /// let g = futures::executor::block_on(lock.acquire(OneManyMode::Shared));
    /// assert_eq!(g.mode(), OneManyMode::Shared);
    /// ```
    pub fn mode(&self) -> OneManyMode {
        match self {
            OneManyGuard::Shared(_) => OneManyMode::Shared,
            OneManyGuard::Exclusive(_) => OneManyMode::Exclusive,
        }
    }
}

impl<T: ?Sized> Deref for OneManyGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            OneManyGuard::Shared(g) => g,
            OneManyGuard::Exclusive(g) => g,
        }
    }
}

/// Shared access owning an `Arc` of the lock, from [`AsyncOneManyLock::shared_arc`]; released on
/// drop. Covariant in `T`, like [`SharedGuard`]: it only ever reads the value, and it never hands
/// out the lock or its `Arc`, through which a `T` could be written.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SharedGuardArc<T: ?Sized> {
    /// The pointer `Arc::into_raw` gave for the lock's `Arc`, whose strong count this guard owns.
    /// It points at the `AsyncOneManyLock<T>`, not at a `T`: it is typed `NonNull<T>` because a
    /// pointer to the lock would make the guard invariant in `T` (the lock holds its value in an
    /// `UnsafeCell`). The value is the lock's last field, so both pointer types carry the same
    /// metadata, and [`lock`](Self::lock) casts it back without loss.
    lock: NonNull<T>,
    /// The guard owns a strong count of an `Arc` holding a `T` (for the drop check, which must
    /// see that dropping the guard may drop a `T`).
    _owns: PhantomData<Arc<T>>,
}

// SAFETY: the same bounds as `Arc<AsyncOneManyLock<T>>`, which this guard owns: the guard gives
// `&T` on whichever thread holds it (needs `T: Sync`), and its drop may drop the last `Arc` and with
// it the `T`, on that thread (needs `T: Send`); releasing a shared hold is thread-agnostic.
unsafe impl<T: ?Sized + Send + Sync> Send for SharedGuardArc<T> {}
// SAFETY: `&SharedGuardArc` only gives `&T` (needs `T: Sync`); `T: Send` as for the `Arc` it owns.
unsafe impl<T: ?Sized + Send + Sync> Sync for SharedGuardArc<T> {}

impl<T: ?Sized> SharedGuardArc<T> {
    /// Wraps an `Arc` of a lock on which the caller holds a shared hold, which moves into the guard.
    fn new(lock: Arc<AsyncOneManyLock<T>>) -> Self {
        let lock = Arc::into_raw(lock) as *mut T;
        SharedGuardArc {
            // SAFETY: `Arc::into_raw` never returns null, and the cast keeps the address.
            lock: unsafe { NonNull::new_unchecked(lock) },
            _owns: PhantomData,
        }
    }

    /// The lock. Used only to read the value and to release the hold: through a guard whose `T`
    /// was shortened by covariance, writing a `T` into the lock would store a value that the lock's
    /// other owners may outlive.
    fn lock(&self) -> &AsyncOneManyLock<T> {
        // SAFETY: `self.lock` came from `Arc::into_raw` of an `Arc<AsyncOneManyLock<T>>` (cast
        // back with its metadata, see the field), and this guard owns a strong count of that
        // `Arc`, so the lock lives at least as long as `&self`.
        unsafe { &*(self.lock.as_ptr() as *const AsyncOneManyLock<T>) }
    }
}

impl<T: ?Sized> Deref for SharedGuardArc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is a shared hold on the lock (see `SharedGuard::deref`).
        unsafe { &*self.lock().value.get() }
    }
}

impl<T: ?Sized> Drop for SharedGuardArc<T> {
    fn drop(&mut self) {
        // SAFETY: `self.lock` came from `Arc::into_raw` of an `Arc<AsyncOneManyLock<T>>`, and the
        // strong count it owns is given back here, once: `self` is not used again. Made before the
        // release, so a panic in a waker the release calls still drops the `Arc`.
        let lock = unsafe { Arc::from_raw(self.lock.as_ptr() as *const AsyncOneManyLock<T>) };
        lock.raw.release_shared();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for SharedGuardArc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Exclusive access owning an `Arc` of the lock, from [`AsyncOneManyLock::exclusive_arc`].
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ExclusiveGuardArc<T: ?Sized> {
    lock: Arc<AsyncOneManyLock<T>>,
}

impl<T: ?Sized> ExclusiveGuardArc<T> {
    /// Turns exclusive access into shared access atomically (see [`ExclusiveGuard::downgrade`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let w = futures::executor::block_on(lock.exclusive_arc());
    /// let r = w.downgrade();
    /// assert_eq!(*r, 1);
    /// assert!(lock.try_exclusive().is_none());
    /// ```
    pub fn downgrade(self) -> SharedGuardArc<T> {
        // Made first, so that a panic in a waker the downgrade calls (after the state has changed)
        // releases the shared hold (and the `Arc`).
        let shared = SharedGuardArc::new(self.into_arc());
        shared.lock().raw.downgrade();
        shared
    }

    /// Turns exclusive access into an upgradable hold atomically (see
    /// [`ExclusiveGuard::downgrade_to_upgradable`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let up = lock.try_exclusive_arc().unwrap().downgrade_to_upgradable();
    /// assert!(lock.try_shared_arc().is_some());
    /// assert!(lock.try_upgradable_arc().is_none());
    /// assert_eq!(*up.try_upgrade().unwrap(), 1);
    /// ```
    pub fn downgrade_to_upgradable(self) -> UpgradableGuardArc<T> {
        // Made first, so that a panic in a waker the downgrade calls (after the state has changed)
        // releases the upgradable hold (and the `Arc`).
        let upgradable = UpgradableGuardArc {
            lock: self.into_arc(),
        };
        upgradable.lock.raw.downgrade_to_upgradable();
        upgradable
    }

    /// Moves the `Arc` out without releasing the hold, which passes to the caller.
    fn into_arc(self) -> Arc<AsyncOneManyLock<T>> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the `Arc` is moved out exactly once.
        unsafe { core::ptr::read(&this.lock) }
    }
}

impl<T: ?Sized> Deref for ExclusiveGuardArc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only hold on the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> DerefMut for ExclusiveGuardArc<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only hold on the lock, and `&mut self` is the only borrow of it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for ExclusiveGuardArc<T> {
    fn drop(&mut self) {
        self.lock.raw.release_exclusive();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for ExclusiveGuardArc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// An upgradable shared hold owning an `Arc` of the lock, from
/// [`AsyncOneManyLock::upgradable_arc`]: reads alongside plain readers, keeps writers and other
/// upgradable holds out, and can become exclusive without letting anyone in between (see
/// [`UpgradableGuard`]). Released on drop. Invariant in `T`, since an upgrade gives write access.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct UpgradableGuardArc<T: ?Sized> {
    lock: Arc<AsyncOneManyLock<T>>,
}

impl<T: ?Sized> UpgradableGuardArc<T> {
    /// Moves the `Arc` out without releasing the hold, which passes to the caller.
    fn into_arc(self) -> Arc<AsyncOneManyLock<T>> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the `Arc` is moved out exactly once.
        unsafe { core::ptr::read(&this.lock) }
    }

    /// Waits until the other readers have left, then turns this hold into exclusive access, as
    /// [`UpgradableGuard::upgrade`]. The future owns the guard, so it is `'static` when `T` is.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases the lock entirely (the upgradable hold
    /// moved into the future).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rondo::sync::AsyncOneManyLock;
    /// let lock = Arc::new(AsyncOneManyLock::new(1));
    /// let up = lock.try_upgradable_arc().unwrap();
    /// let reader = lock.try_shared_arc().unwrap();
    /// let upgrade = std::thread::spawn(move || {
    ///     let mut w = futures::executor::block_on(up.upgrade()); // waits for `reader`
    ///     *w += 1;
    /// });
    /// drop(reader);
    /// upgrade.join().unwrap();
    /// assert_eq!(*lock.try_shared().unwrap(), 2);
    /// ```
    pub async fn upgrade(self) -> ExclusiveGuardArc<T> {
        // Until the first poll the future owns `self`, whose drop releases the hold. Then the hold
        // passes at once (no await in between) to a borrowed guard, whose upgrade future owns it
        // until it completes and releases it if dropped before.
        let lock = self.into_arc();
        let upgrade = UpgradableGuard { lock: &*lock }.upgrade();
        core::mem::forget(upgrade.await);
        ExclusiveGuardArc { lock }
    }

    /// Blocks the current thread until the other readers have left, then turns this hold into
    /// exclusive access, as [`upgrade`](Self::upgrade). For synchronous code; do not call it on an
    /// async runtime's worker thread.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let up = lock.upgradable_arc_blocking();
    /// let reader = lock.shared_arc_blocking();
    /// let writer = std::thread::spawn(move || *up.upgrade_blocking() += 1);
    /// drop(reader); // the upgrade waits for this release
    /// writer.join().unwrap();
    /// assert_eq!(*lock.shared_arc_blocking(), 2);
    /// ```
    pub fn upgrade_blocking(self) -> ExclusiveGuardArc<T> {
        match self.try_upgrade() {
            Ok(w) => w,
            Err(up) => futures_lite::future::block_on(up.upgrade()),
        }
    }

    /// Turns this hold into exclusive access if no other reader holds the lock; otherwise gives the
    /// guard back unchanged.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let up = lock.try_upgradable_arc().unwrap();
    /// let reader = lock.try_shared_arc().unwrap();
    /// let up = up.try_upgrade().unwrap_err(); // a reader is still in
    /// drop(reader);
    /// *up.try_upgrade().unwrap() = 2;
    /// assert_eq!(*lock.try_shared().unwrap(), 2);
    /// ```
    pub fn try_upgrade(self) -> Result<ExclusiveGuardArc<T>, Self> {
        if self.lock.raw.try_upgrade() {
            Ok(ExclusiveGuardArc {
                lock: self.into_arc(),
            })
        } else {
            Err(self)
        }
    }

    /// Turns this hold into a plain shared one, letting another upgradable hold in.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let lock = Arc::new(rondo::sync::AsyncOneManyLock::new(1));
    /// let r = lock.try_upgradable_arc().unwrap().downgrade();
    /// assert!(lock.try_upgradable_arc().is_some());
    /// assert_eq!(*r, 1);
    /// ```
    pub fn downgrade(self) -> SharedGuardArc<T> {
        // Made first, so that a panic in a waker the downgrade calls (after the state has changed)
        // releases the shared hold (and the `Arc`).
        let shared = SharedGuardArc::new(self.into_arc());
        shared.lock().raw.upgradable_to_shared();
        shared
    }
}

impl<T: ?Sized> Deref for UpgradableGuardArc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: an upgradable hold is a shared hold: no `&mut T` exists while it lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for UpgradableGuardArc<T> {
    fn drop(&mut self) {
        self.lock.raw.release_upgradable();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for UpgradableGuardArc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
