//! `JoinSet`: a set of spawned tasks whose outputs are taken in the order they complete.
//!
//! Every task's future (or blocking closure) carries a [`Finished`] marker; dropping it, which
//! happens once the future completes, panics or is cancelled, puts the task's key on the set's
//! shared ready list and wakes the set. `join_next` only looks at tasks on that list, so a call
//! costs the same whether the set holds ten tasks or a million.

use std::collections::VecDeque;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use slab::Slab;

use super::JoinHandle;
use super::abort::AbortHandle;
use super::error::JoinError;
use super::hooks::Id;

/// A set of tasks spawned by it, whose results are taken as they complete.
///
/// Tasks are spawned with [`spawn`](JoinSet::spawn) (and the other `spawn` methods);
/// [`join_next`](JoinSet::join_next) waits for any of them and yields its result, in completion
/// order. Dropping the set aborts every task still in it, as [`abort_all`](JoinSet::abort_all)
/// does; [`detach_all`](JoinSet::detach_all) lets them run on instead.
///
/// As tokio's, the `spawn` methods return an [`AbortHandle`] for the task; the set also
/// implements `Extend` and `FromIterator` for futures (each spawned as by `spawn`).
///
/// ```
/// use rondo::task::JoinSet;
/// rondo::block_on(async {
///     let mut set = JoinSet::new();
///     for i in 0..10u64 {
///         set.spawn(async move { i * i });
///     }
///     let mut sum = 0;
///     while let Some(res) = set.join_next().await {
///         sum += res.unwrap();
///     }
///     assert_eq!(sum, 285);
/// });
/// ```
pub struct JoinSet<T> {
    /// The handles of the tasks in the set, with the generation they were spawned in.
    tasks: Slab<(u64, JoinHandle<T>)>,
    /// Generation of the next task: a key of `tasks` is reused, a generation never is, so a
    /// notice from a task that left the set (detached) cannot be taken for a later one.
    next_gen: u64,
    /// Notices taken off the shared list and not yet looked at.
    notified: VecDeque<Notice>,
    /// Tasks whose future is gone but whose handle said `Pending` (the output is stored just
    /// after the future drops): their handles hold the set's waker, and are polled again first.
    finishing: Vec<Notice>,
    shared: Arc<Shared>,
}

/// A task's key in the set and its generation.
type Notice = (usize, u64);

/// What the tasks share with their set.
struct Shared {
    state: Mutex<SharedState>,
}

struct SharedState {
    /// Tasks whose future is gone, in the order they went.
    ready: Vec<Notice>,
    /// The waker of the set's last `Pending` poll.
    waker: Option<Waker>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SharedState> {
        // The lock is only held to push, swap or store a waker, none of which panics midway; a
        // poisoned lock's state is whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets the set's waker (the set is dropped, or holds no task any more), so that tasks
    /// left running do not keep the set's owner alive. The waker is dropped after the lock is
    /// released.
    fn forget_waker(&self) {
        let waker = self.lock().waker.take();
        drop(waker);
    }
}

/// Carried by a task's future; its drop tells the set that the task is over.
struct Finished {
    shared: Arc<Shared>,
    notice: Notice,
}

impl Drop for Finished {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock();
            s.ready.push(self.notice);
            s.waker.take()
        };
        // Woken after the lock is released: the waker may run arbitrary code.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

pin_project_lite::pin_project! {
    /// A task's future with its [`Finished`] marker, dropped together with it.
    pub(crate) struct Marked<F> {
        #[pin]
        future: F,
        _finished: Finished,
    }
}

impl<F: Future> Future for Marked<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().future.poll(cx)
    }
}

/// A blocking task's closure with its [`Finished`] marker.
pub(crate) struct MarkedFn<F> {
    f: F,
    finished: Finished,
}

impl<F> MarkedFn<F> {
    /// Runs the closure; the marker is dropped once it returns (or unwinds), or with the
    /// `MarkedFn` if it never runs.
    pub(crate) fn call<T>(self) -> T
    where
        F: FnOnce() -> T,
    {
        let MarkedFn { f, finished } = self;
        let _finished = finished;
        f()
    }
}

impl<T> JoinSet<T> {
    /// An empty set.
    ///
    /// ```
    /// let set = rondo::task::JoinSet::<()>::new();
    /// assert!(set.is_empty());
    /// ```
    pub fn new() -> Self {
        JoinSet {
            tasks: Slab::new(),
            next_gen: 0,
            notified: VecDeque::new(),
            finishing: Vec::new(),
            shared: Arc::new(Shared {
                state: Mutex::new(SharedState {
                    ready: Vec::new(),
                    waker: None,
                }),
            }),
        }
    }

    /// How many tasks are in the set: spawned and not yet joined, whether running or finished.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     set.spawn(async {});
    ///     set.spawn(async {});
    ///     assert_eq!(set.len(), 2);
    ///     set.join_next().await;
    ///     assert_eq!(set.len(), 1);
    /// });
    /// ```
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when the set holds no task.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     assert!(set.is_empty());
    ///     set.spawn(async {});
    ///     assert!(!set.is_empty());
    ///     set.join_next().await;
    ///     assert!(set.is_empty());
    /// });
    /// ```
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Puts a task in the set: `spawn` spawns `future` wrapped with the task's marker, and the
    /// handle it returns is kept. The spawning methods, which choose where the task runs, stand in
    /// the runtime layer (`runtime/join_set.rs`).
    pub(crate) fn insert_future<F>(
        &mut self,
        future: F,
        spawn: impl FnOnce(Marked<F>) -> JoinHandle<T>,
    ) -> AbortHandle
    where
        F: Future<Output = T>,
        T: Send + 'static,
    {
        self.insert(|finished| {
            spawn(Marked {
                future,
                _finished: finished,
            })
        })
    }

    /// Puts a blocking task in the set: `spawn` runs `f` wrapped with the task's marker (through
    /// [`MarkedFn::call`]), and the handle it returns is kept.
    pub(crate) fn insert_blocking<F>(
        &mut self,
        f: F,
        spawn: impl FnOnce(MarkedFn<F>) -> JoinHandle<T>,
    ) -> AbortHandle
    where
        F: FnOnce() -> T,
        T: Send + 'static,
    {
        self.insert(|finished| spawn(MarkedFn { f, finished }))
    }

    /// Spawns the task made by `spawn` with the marker, keeps its handle, and returns an abort
    /// handle for it.
    fn insert(&mut self, spawn: impl FnOnce(Finished) -> JoinHandle<T>) -> AbortHandle
    where
        T: Send + 'static,
    {
        let entry = self.tasks.vacant_entry();
        let notice = (entry.key(), self.next_gen);
        self.next_gen += 1;
        let handle = spawn(Finished {
            shared: self.shared.clone(),
            notice,
        });
        let abort = handle.abort_handle();
        entry.insert((notice.1, handle));
        abort
    }

    /// Aborts every task in the set, as [`JoinHandle::abort`] does. They stay in the set: each
    /// one's result, cancelled unless it completed first, is still taken by
    /// [`join_next`](JoinSet::join_next).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     set.spawn(std::future::pending::<()>());
    ///     set.abort_all();
    ///     assert!(set.join_next().await.unwrap().unwrap_err().is_cancelled());
    /// });
    /// ```
    pub fn abort_all(&mut self) {
        for (_, (_, h)) in &self.tasks {
            h.abort();
        }
    }

    /// Removes every task from the set without aborting it: the tasks run on, detached, and their
    /// outputs are dropped.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// rondo::block_on(async {
    ///     let ran = Arc::new(AtomicBool::new(false));
    ///     let r = ran.clone();
    ///     let mut set = rondo::task::JoinSet::new();
    ///     set.spawn(async move { r.store(true, Ordering::SeqCst) });
    ///     set.detach_all();
    ///     assert!(set.is_empty());
    ///     drop(set);
    ///     while !ran.load(Ordering::SeqCst) {
    ///         rondo::yield_now().await;
    ///     }
    /// });
    /// ```
    pub fn detach_all(&mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        self.notified.clear();
        self.finishing.clear();
        self.shared.lock().ready.clear();
        self.shared.forget_waker();
        // Dropped after the lock is released: dropping a handle may drop its task's output.
        drop(tasks);
    }

    /// Aborts every task and waits until all of them are over; the set is empty afterwards and
    /// their results are dropped.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     for _ in 0..4 {
    ///         set.spawn(std::future::pending::<()>());
    ///     }
    ///     set.shutdown().await;
    ///     assert!(set.is_empty());
    /// });
    /// ```
    pub async fn shutdown(&mut self) {
        self.abort_all();
        while self.join_next().await.is_some() {}
    }

    /// Waits for every task and returns their outputs in the order they finished. If a task
    /// panicked, the panic resumes here (the set drops, aborting the rest); a task cancelled from
    /// outside the set panics here too, as tokio's does.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     for i in 0..3 {
    ///         set.spawn(async move { i * 10 });
    ///     }
    ///     let mut all = set.join_all().await;
    ///     all.sort();
    ///     assert_eq!(all, [0, 10, 20]);
    /// });
    /// ```
    pub async fn join_all(mut self) -> Vec<T> {
        let mut outputs = Vec::with_capacity(self.len());
        while let Some(next) = self.join_next().await {
            match next {
                Ok(v) => outputs.push(v),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("{e}"),
            }
        }
        outputs
    }

    /// Waits for any task of the set to end and returns its result, or `None` if the set is
    /// empty. A task that panicked yields a [`JoinError`] with
    /// [`is_panic`](JoinError::is_panic), an aborted one [`is_cancelled`](JoinError::is_cancelled).
    ///
    /// Cancel safe: if the future is dropped before it completes, no result is lost.
    ///
    /// ```
    /// use std::time::Duration;
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     set.spawn(async {
    ///         rondo::time::sleep(Duration::from_millis(20)).await;
    ///         "slow"
    ///     });
    ///     set.spawn(async { "fast" });
    ///     assert_eq!(set.join_next().await.unwrap().unwrap(), "fast");
    ///     assert_eq!(set.join_next().await.unwrap().unwrap(), "slow");
    ///     assert!(set.join_next().await.is_none());
    /// });
    /// ```
    pub async fn join_next(&mut self) -> Option<Result<T, JoinError>> {
        poll_fn(|cx| self.poll_join_next(cx)).await
    }

    /// Returns the result of a task that has ended, without waiting: `None` if no task has ended
    /// yet, or the set is empty.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     assert!(set.try_join_next().is_none());
    ///     set.spawn(async { 3 });
    ///     let v = loop {
    ///         match set.try_join_next() {
    ///             Some(res) => break res.unwrap(),
    ///             None => rondo::yield_now().await,
    ///         }
    ///     };
    ///     assert_eq!(v, 3);
    /// });
    /// ```
    pub fn try_join_next(&mut self) -> Option<Result<T, JoinError>> {
        self.try_join_next_with_id().map(without_id)
    }

    /// [`join_next`](JoinSet::join_next) that also returns the id of the task whose output it
    /// is (as tokio's); a failed task's id is [`JoinError::id`].
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     let id = set.spawn(async { 7 }).id();
    ///     let (joined, v) = set.join_next_with_id().await.unwrap().unwrap();
    ///     assert_eq!((joined, v), (id, 7));
    ///     assert!(set.join_next_with_id().await.is_none());
    /// });
    /// ```
    pub async fn join_next_with_id(&mut self) -> Option<Result<(Id, T), JoinError>> {
        poll_fn(|cx| self.poll_join_next_with_id(cx)).await
    }

    /// [`try_join_next`](JoinSet::try_join_next) that also returns the id of the task whose
    /// output it is (as tokio's); a failed task's id is [`JoinError::id`].
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     let id = set.spawn(async { panic!("boom") }).id();
    ///     let err = loop {
    ///         match set.try_join_next_with_id() {
    ///             Some(res) => break res.unwrap_err(),
    ///             None => rondo::yield_now().await,
    ///         }
    ///     };
    ///     assert!(err.is_panic());
    ///     assert_eq!(err.id(), id);
    /// });
    /// ```
    pub fn try_join_next_with_id(&mut self) -> Option<Result<(Id, T), JoinError>> {
        // Not budgeted: with the task's budget spent, a finished task's handle would say
        // `Pending`, and this would answer that no task has finished.
        let _unlimited = super::coop::Unconstrained::start();
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll_ended(&mut cx) {
            Poll::Ready(res) => Some(res),
            Poll::Pending => None,
        }
    }

    /// Polls for the result of any task of the set: `Ready(None)` if the set is empty, `Pending`
    /// (waking `cx`'s waker when a task ends) if no task has ended yet.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     set.spawn(async { 'x' });
    ///     let res = std::future::poll_fn(|cx| set.poll_join_next(cx)).await;
    ///     assert_eq!(res.unwrap().unwrap(), 'x');
    /// });
    /// ```
    pub fn poll_join_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, JoinError>>> {
        self.poll_join_next_with_id(cx)
            .map(|next| next.map(without_id))
    }

    /// [`poll_join_next`](JoinSet::poll_join_next) that also returns the id of the task whose
    /// output it is (as tokio's); a failed task's id is [`JoinError::id`].
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let mut set = rondo::task::JoinSet::new();
    ///     let id = set.spawn(async { 'x' }).id();
    ///     let res = std::future::poll_fn(|cx| set.poll_join_next_with_id(cx)).await;
    ///     assert_eq!(res.unwrap().unwrap(), (id, 'x'));
    /// });
    /// ```
    pub fn poll_join_next_with_id(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<(Id, T), JoinError>>> {
        if self.tasks.is_empty() {
            return Poll::Ready(None);
        }
        // Register first, so that a task ending after the look below still wakes this waker.
        {
            let mut s = self.shared.lock();
            match &s.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => s.waker = Some(cx.waker().clone()),
            }
        }
        self.poll_ended(cx).map(Some)
    }

    /// Looks at the tasks whose future is gone, polling their handles with `cx`, and returns the
    /// first result found.
    fn poll_ended(&mut self, cx: &mut Context<'_>) -> Poll<Result<(Id, T), JoinError>> {
        // Those already seen finishing first: their handles hold an earlier waker.
        let mut i = 0;
        while i < self.finishing.len() {
            let notice = self.finishing[i];
            match self.poll_task(notice, cx) {
                Some(Poll::Ready(res)) => {
                    self.finishing.swap_remove(i);
                    return Poll::Ready(res);
                }
                Some(Poll::Pending) => i += 1,
                None => {
                    self.finishing.swap_remove(i);
                }
            }
        }
        loop {
            let notice = match self.notified.pop_front() {
                Some(n) => n,
                None => {
                    let ready = std::mem::take(&mut self.shared.lock().ready);
                    if ready.is_empty() {
                        return Poll::Pending;
                    }
                    self.notified.extend(ready);
                    continue;
                }
            };
            match self.poll_task(notice, cx) {
                Some(Poll::Ready(res)) => return Poll::Ready(res),
                // The handle wakes `cx` when it can go on (its output is stored, or the task's
                // cooperative budget is spent): the other notices wait until then, so a spent
                // budget does not move them all onto `finishing`, to be polled at every call.
                Some(Poll::Pending) => {
                    self.finishing.push(notice);
                    return Poll::Pending;
                }
                None => {}
            }
        }
    }

    /// Polls the handle `notice` names; removes it if it is ready. `None` if that task is no
    /// longer in the set.
    fn poll_task(
        &mut self,
        (key, generation): Notice,
        cx: &mut Context<'_>,
    ) -> Option<Poll<Result<(Id, T), JoinError>>> {
        let (g, handle) = self.tasks.get_mut(key)?;
        if *g != generation {
            return None;
        }
        match Pin::new(&mut *handle).poll(cx) {
            Poll::Ready(res) => {
                let id = handle.id();
                self.tasks.remove(key);
                Some(Poll::Ready(res.map(|v| (id, v))))
            }
            Poll::Pending => Some(Poll::Pending),
        }
    }
}

/// A result of the `_with_id` methods without the id.
fn without_id<T>(res: Result<(Id, T), JoinError>) -> Result<T, JoinError> {
    res.map(|(_, v)| v)
}

impl<T> Default for JoinSet<T> {
    /// An empty set, as [`JoinSet::new`].
    ///
    /// ```
    /// let set: rondo::task::JoinSet<u8> = Default::default();
    /// assert_eq!(set.len(), 0);
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for JoinSet<T> {
    /// Aborts every task still in the set (see [`JoinSet::abort_all`]).
    fn drop(&mut self) {
        self.abort_all();
        self.shared.forget_waker();
    }
}

impl<T> fmt::Debug for JoinSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinSet").field("len", &self.len()).finish()
    }
}
