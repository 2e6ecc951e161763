//! `JoinSet`'s spawning methods: they choose where a task of the set runs (the current group or
//! runtime, a given runtime, a group, a blocking pool), so they stand in the runtime layer. The set
//! itself, and everything that needs only the task layer, is in `task/join_set.rs`.

use std::future::Future;

use super::{Handle, spawn_blocking_current, spawn_current};
use crate::group::Group;
use crate::task::{AbortHandle, BOX_FUTURES_ABOVE, JoinSet};

impl<T: Send + 'static> JoinSet<T> {
    /// Spawns `future` into the set, where [`rondo::spawn`](crate::spawn) would spawn it: into
    /// the caller's group when called from a task, into the current runtime's default group
    /// otherwise (the global runtime's outside any). Returns an [`AbortHandle`] for the task (as
    /// every spawning method of the set does); the task stays in the set, and its result,
    /// cancelled if the abort came first, is still joined.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     set.spawn(async { 1 });
    ///     assert_eq!(set.join_next().await.unwrap().unwrap(), 1);
    ///     let abort = set.spawn(std::future::pending::<i32>());
    ///     abort.abort();
    ///     assert!(set.join_next().await.unwrap().unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn spawn<F>(&mut self, future: F) -> AbortHandle
    where
        F: Future<Output = T> + Send + 'static,
    {
        self.insert_future(future, |marked| {
            // Boxed above the size `rondo::spawn` boxes at, as `rondo::spawn` would box it.
            if std::mem::size_of_val(&marked) > BOX_FUTURES_ABOVE {
                return spawn_current(Box::pin(marked));
            }
            spawn_current(marked)
        })
    }

    /// Spawns `future` into the set on the runtime of `handle`, as [`Handle::spawn`] does.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let mut set = rondo::task::JoinSet::new();
    /// set.spawn_on(async { 2 }, rt.handle());
    /// assert_eq!(rt.block_on(set.join_next()).unwrap().unwrap(), 2);
    /// ```
    pub fn spawn_on<F>(&mut self, future: F, handle: &Handle) -> AbortHandle
    where
        F: Future<Output = T> + Send + 'static,
    {
        self.insert_future(future, |marked| handle.spawn(marked))
    }

    /// Spawns `future` into the set and into `group`, as [`Group::spawn`] does: if the group was
    /// cancelled or its runtime shut down, the task's result is cancelled at once.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let group = rt.group().weight(4).build().unwrap();
    /// let mut set = rondo::task::JoinSet::new();
    /// set.spawn_in_group(&group, async { rondo::current_group().unwrap().weight() });
    /// assert_eq!(rt.block_on(set.join_next()).unwrap().unwrap(), 4);
    /// ```
    pub fn spawn_in_group<F>(&mut self, group: &Group, future: F) -> AbortHandle
    where
        F: Future<Output = T> + Send + 'static,
    {
        self.insert_future(future, |marked| group.spawn(marked))
    }

    /// Runs `f` on the current runtime's blocking pool, as
    /// [`rondo::spawn_blocking`](crate::spawn_blocking) does, and puts it in the set. Aborting it
    /// only stops a closure that no pool thread has started.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     set.spawn_blocking(|| 40 + 2);
    ///     assert_eq!(set.join_next().await.unwrap().unwrap(), 42);
    /// });
    /// ```
    pub fn spawn_blocking<F>(&mut self, f: F) -> AbortHandle
    where
        F: FnOnce() -> T + Send + 'static,
    {
        self.insert_blocking(f, |marked| spawn_blocking_current(move || marked.call()))
    }

    /// Runs `f` on the blocking pool of `handle`'s runtime, as [`Handle::spawn_blocking`] does,
    /// and puts it in the set.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let mut set = rondo::task::JoinSet::new();
    /// set.spawn_blocking_on(|| "done", rt.handle());
    /// assert_eq!(rt.block_on(set.join_next()).unwrap().unwrap(), "done");
    /// ```
    pub fn spawn_blocking_on<F>(&mut self, f: F, handle: &Handle) -> AbortHandle
    where
        F: FnOnce() -> T + Send + 'static,
    {
        self.insert_blocking(f, |marked| handle.spawn_blocking(move || marked.call()))
    }
}

/// Spawns each future into the set, as [`JoinSet::spawn`] does (tokio's `Extend` for `JoinSet`).
///
/// ```
/// rondo::block_on(async {
///     let mut set = rondo::task::JoinSet::new();
///     set.extend((0..3).map(|i| async move { i }));
///     assert_eq!(set.len(), 3);
///     let mut sum = 0;
///     while let Some(r) = set.join_next().await {
///         sum += r.unwrap();
///     }
///     assert_eq!(sum, 3);
/// });
/// ```
impl<T, F> Extend<F> for JoinSet<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    fn extend<I: IntoIterator<Item = F>>(&mut self, iter: I) {
        for future in iter {
            self.spawn(future);
        }
    }
}

/// A set of the futures, each spawned as by [`JoinSet::spawn`] (tokio's `FromIterator` for
/// `JoinSet`).
///
/// ```
/// use rondo::task::JoinSet;
/// rondo::block_on(async {
///     let mut set: JoinSet<u32> = (1..=4).map(|i| async move { i * 10 }).collect();
///     let mut sum = 0;
///     while let Some(r) = set.join_next().await {
///         sum += r.unwrap();
///     }
///     assert_eq!(sum, 100);
/// });
/// ```
impl<T, F> FromIterator<F> for JoinSet<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    fn from_iter<I: IntoIterator<Item = F>>(iter: I) -> Self {
        let mut set = JoinSet::new();
        set.extend(iter);
        set
    }
}
