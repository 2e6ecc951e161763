//! [`AsyncOneManyLock`]: an async reader-writer lock ("one writer or many readers").

use core::cell::UnsafeCell;
use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::raw_one_many::{RawOneMany, Wait};

/// Which kind of access [`AsyncOneManyLock::acquire`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OneManyMode {
    /// Many holders at once, read-only access ([`SharedGuard`]).
    Shared,
    /// One holder, read-write access ([`ExclusiveGuard`]).
    Exclusive,
}

/// An async reader-writer lock: many [`shared`](Self::shared) holders or one
/// [`exclusive`](Self::exclusive) holder, served in strict FIFO order with phase-fair admission.
///
/// * Uncontended acquires complete on their first poll with a single atomic CAS, no allocation.
/// * Waiters form one FIFO line. While anyone waits, newcomers queue (and `try_*` fails): no barging.
/// * Once a writer waits, readers arriving later queue behind it; when a writer releases, every reader
///   queued before the next writer is admitted at once and woken in one batch.
/// * Dropping a pending acquire future never loses a wakeup or leaks the lock.
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
/// ```
/// // The positive cases, so the negative ones above fail for the right reason.
/// fn assert_send_sync<S: Send + Sync>() {}
/// assert_send_sync::<rondo::sync::AsyncOneManyLock<Vec<u8>>>();
/// assert_send_sync::<rondo::sync::SharedGuard<'static, Vec<u8>>>();
/// assert_send_sync::<rondo::sync::ExclusiveGuard<'static, Vec<u8>>>();
/// assert_send_sync::<rondo::sync::SharedGuardArc<Vec<u8>>>();
/// assert_send_sync::<rondo::sync::ExclusiveGuardArc<Vec<u8>>>();
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
    /// Creates an unlocked lock holding `value`.
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
        AsyncOneManyLock {
            raw: RawOneMany::new(),
            value: UnsafeCell::new(value),
        }
    }

    /// Creates an unlocked lock holding `value` (not `const` under `--cfg loom`).
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        AsyncOneManyLock {
            raw: RawOneMany::new(),
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
            Wait::new(&self.raw, OneManyMode::Shared).await;
        }
        SharedGuard { lock: self }
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
            Wait::new(&self.raw, OneManyMode::Exclusive).await;
        }
        ExclusiveGuard { lock: self }
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

    /// Takes shared access if that is possible right now without waiting: no writer holds the lock and
    /// nobody waits in line.
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
        self.raw.try_shared().then(|| SharedGuard { lock: self })
    }

    /// Takes exclusive access if the lock is free and nobody waits.
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
        self.raw
            .try_exclusive()
            .then(|| ExclusiveGuard { lock: self })
    }

    /// Like [`shared`](Self::shared), returning a guard that owns an `Arc` of the lock (`'static` when
    /// `T` is).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`shared`](Self::shared).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rondo::sync::{AsyncOneManyLock, SharedGuardArc};
    /// let lock = Arc::new(AsyncOneManyLock::new(4));
    /// let guard: SharedGuardArc<i32> = futures::executor::block_on(lock.shared_arc());
    /// let handle = std::thread::spawn(move || *guard * 2);
    /// assert_eq!(handle.join().unwrap(), 8);
    /// ```
    pub async fn shared_arc(self: &Arc<Self>) -> SharedGuardArc<T> {
        // The hold moves from the borrowed guard into the owned one.
        core::mem::forget(self.shared().await);
        SharedGuardArc {
            lock: Arc::clone(self),
        }
    }

    /// Like [`exclusive`](Self::exclusive), returning a guard that owns an `Arc` of the lock.
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
    pub async fn exclusive_arc(self: &Arc<Self>) -> ExclusiveGuardArc<T> {
        core::mem::forget(self.exclusive().await);
        ExclusiveGuardArc {
            lock: Arc::clone(self),
        }
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

/// Shared (read) access to an [`AsyncOneManyLock`]; released on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SharedGuard<'a, T: ?Sized> {
    lock: &'a AsyncOneManyLock<T>,
}

impl<T: ?Sized> Deref for SharedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is a shared hold on the lock, so no exclusive hold (the only source of
        // `&mut T`) exists until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for SharedGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw.release_shared();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for SharedGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Exclusive (write) access to an [`AsyncOneManyLock`]; released on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ExclusiveGuard<'a, T: ?Sized> {
    lock: &'a AsyncOneManyLock<T>,
}

impl<'a, T: ?Sized> ExclusiveGuard<'a, T> {
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
        let this = ManuallyDrop::new(self);
        this.lock.raw.downgrade();
        SharedGuard { lock: this.lock }
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

/// Shared access owning an `Arc` of the lock, from [`AsyncOneManyLock::shared_arc`].
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SharedGuardArc<T: ?Sized> {
    lock: Arc<AsyncOneManyLock<T>>,
}

impl<T: ?Sized> Deref for SharedGuardArc<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is a shared hold on the lock (see `SharedGuard::deref`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for SharedGuardArc<T> {
    fn drop(&mut self) {
        self.lock.raw.release_shared();
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
        let this = ManuallyDrop::new(self);
        this.lock.raw.downgrade();
        // SAFETY: `this` is never used or dropped again, so the `Arc` is moved out exactly once.
        let lock = unsafe { core::ptr::read(&this.lock) };
        SharedGuardArc { lock }
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
