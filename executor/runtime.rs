//! `Runtime` and `Handle`: starting, entering and shutting down a runtime.
//!
//! # Shutdown protocol
//! Dropping a `Runtime` (or calling [`Runtime::shutdown_timeout`]) runs these steps, in order:
//!
//! 1. Set the `shutdown` flag (SeqCst). From now on no worker starts a new poll, and every
//!    registry refuses new tasks (spawns return handles that resolve cancelled).
//! 2. Unpark every worker thread.
//! 3. Close every group's registry and wake every unfinished task, outside any lock. Woken tasks
//!    land in their group's global queue. Each worker, on leaving its loop, drops the runnables in
//!    its LIFO slot and local queue (it is the only thread that can reach its LIFO slot).
//! 4. Join the worker threads, waiting at most the timeout (forever for `Drop`). A runtime dropped
//!    from one of its own workers does not join that thread.
//! 5. Wake every task still registered and drain every group queue, limiter line and local queue,
//!    dropping each runnable (and so its future) on this thread; repeat until a pass drops nothing
//!    (destructors may wake other tasks). The wake is repeated because a worker may have taken a
//!    task just before step 3 (absorbing that wake) and polled it to `Pending` before it stopped.
//! 6. Close every group queue: a late wake (from a thread still holding a waker) finds the task
//!    already closed by step 5, and any straggling push is dropped where it happens.
//!
//! Every task's future is dropped exactly once: by the worker that held its runnable (step 3) or
//! here (step 5). Schedule functions reach the runtime through `Arc`s held by the task itself, so
//! a waker firing after shutdown touches live memory only.

use std::fmt;
use std::future::Future;
use std::io;
use std::mem::ManuallyDrop;
use std::sync::{Arc, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use slab::Slab;

use crate::builder::{BuildError, Builder, Config};
use crate::context;
use crate::group::{GroupBuilder, GroupInner};
use crate::idle::Idle;
use crate::join::JoinHandle;
use crate::scheduler::Scheduler;
use crate::shim::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, lock};
use crate::task::spawn_in;
use crate::worker::{WorkerShared, worker_main};

/// State shared by a runtime's workers, groups, handles and tasks.
pub(crate) struct Shared {
    pub(crate) workers: Box<[WorkerShared]>,
    pub(crate) scheduler: Scheduler,
    pub(crate) idle: Idle,
    shutdown: AtomicBool,
    pub(crate) config: Config,
    /// Every live group (weak: a group lives as long as its handles and tasks).
    pub(crate) groups: Mutex<Slab<Weak<GroupInner>>>,
    pub(crate) live_groups: AtomicUsize,
    pub(crate) next_group_id: AtomicU64,
}

impl Shared {
    pub(crate) fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Wakes one sleeping worker if nobody is searching (see `idle`). The caller has fenced after
    /// making its work visible.
    pub(crate) fn notify_work(&self) {
        let chosen = self.idle.notify_one(|idx| {
            self.workers[idx].notified.store(true, Ordering::Release);
        });
        if let Some(idx) = chosen {
            self.workers[idx].unpark();
        }
    }

    /// Work that worker `idx` could take: a listed group or another worker's local queue.
    pub(crate) fn has_visible_work(&self, idx: usize) -> bool {
        self.scheduler.has_listed()
            || self
                .workers
                .iter()
                .enumerate()
                .any(|(i, w)| i != idx && !w.local.is_empty())
    }

    /// True if a worker other than `idx` is serving a group other than `g`.
    pub(crate) fn others_serve_other_groups(&self, idx: usize, g: &GroupInner) -> bool {
        let p = g as *const GroupInner as *mut GroupInner;
        self.workers.iter().enumerate().any(|(i, w)| {
            let s = w.serving.load(Ordering::Relaxed);
            i != idx && !s.is_null() && s != p
        })
    }

    /// Tasks of `g` waiting in the local queues of the workers serving it (a snapshot).
    pub(crate) fn locally_queued(&self, g: &GroupInner) -> usize {
        let p = g as *const GroupInner as *mut GroupInner;
        self.workers
            .iter()
            .filter(|w| w.serving.load(Ordering::Relaxed) == p)
            .map(|w| w.local.len())
            .sum()
    }

    /// One pass of shutdown step 5: wakes every task still registered, then drops every runnable
    /// in the group queues, limiter lines and local queues. Returns how many it dropped. Run by the
    /// thread shutting down, and by workers waiting in a nested `block_on`, whose future may be
    /// waiting for one of these tasks (they must not keep step 4 waiting for them).
    pub(crate) fn drain_once(&self) -> usize {
        let mut dropped = 0usize;
        for g in self.live_group_list() {
            g.registry.wake_all(true);
            while let Some(r) = g.queue.pop() {
                drop(r);
                dropped += 1;
            }
            if let Some(l) = &g.limiter {
                let line = l.drain();
                dropped += line.len();
                drop(line);
            }
        }
        for w in self.workers.iter() {
            while let Some(r) = w.local.pop() {
                drop(r);
                dropped += 1;
            }
        }
        dropped
    }

    fn live_group_list(&self) -> Vec<Arc<GroupInner>> {
        lock(&self.groups)
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }
}

/// A handle to a runtime: spawn onto it, enter it, make groups. Cheap to clone; `Send + Sync`.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let handle = rt.handle().clone();
/// std::thread::spawn(move || {
///     let h = handle.spawn(async { 1 });
///     assert_eq!(handle.block_on(h).unwrap(), 1);
/// })
/// .join()
/// .unwrap();
/// ```
#[derive(Clone)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
    pub(crate) default_group: Arc<GroupInner>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("workers", &self.shared.workers.len())
            .finish()
    }
}

impl Handle {
    /// The handle of the runtime this thread is in (a worker thread, or inside `block_on`).
    ///
    /// # Panics
    /// Outside any runtime, with a message saying so; use [`try_current`](Self::try_current) to
    /// check instead.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let h = rondo::Handle::current();
    ///     assert_eq!(h.spawn(async { 3 }).await.unwrap(), 3);
    /// });
    /// ```
    pub fn current() -> Handle {
        Self::try_current().expect(
            "rondo::Handle::current() called outside a rondo runtime: call it from a rondo task or \
             inside Runtime::block_on, or use Handle::try_current()",
        )
    }

    /// The current runtime's handle, or `None` outside any runtime.
    ///
    /// ```
    /// assert!(rondo::Handle::try_current().is_none());
    /// ```
    pub fn try_current() -> Option<Handle> {
        context::current_handle()
    }

    /// Spawns a task. Called from a task of this runtime, the new task joins the caller's group;
    /// otherwise it joins the runtime's default group.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.handle().spawn(async { "hi" });
    /// assert_eq!(rt.block_on(h).unwrap(), "hi");
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        with_current_group(|g| match g {
            Some(g) if Arc::ptr_eq(&g.shared, &self.shared) => spawn_in(g, future),
            _ => spawn_in(&self.default_group, future),
        })
    }

    /// Runs `future` to completion on this thread, with this runtime as the current one. On a
    /// worker thread (a `block_on` nested in a task) the worker keeps running queued tasks while
    /// it waits, so it neither deadlocks nor idles. A panic in `future` propagates to the caller.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.handle().block_on(async { 2 + 2 }), 4);
    /// ```
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        // Nested in a task of another runtime, `future` belongs to this runtime: its spawns go to
        // this runtime's default group, not to the task's group.
        let foreign =
            with_current_group(|g| g.is_some_and(|g| !Arc::ptr_eq(&g.shared, &self.shared)));
        let _outside = foreign.then(context::leave_group);
        let _enter = context::enter(self.clone());
        crate::worker::block_on(future)
    }

    /// Starts building a fairness group on this runtime.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.handle().group().weight(2).build().unwrap();
    /// assert_eq!(g.weight(), 2);
    /// ```
    pub fn group(&self) -> GroupBuilder {
        GroupBuilder::new(self.clone())
    }

    /// The number of worker threads.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    /// assert_eq!(rt.handle().worker_count(), 2);
    /// ```
    pub fn worker_count(&self) -> usize {
        self.shared.workers.len()
    }

    /// The number of groups alive on this runtime, the default group included. A group is alive
    /// while a handle to it or one of its tasks exists.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().build().unwrap();
    /// assert_eq!(rt.handle().group_count(), 2);
    /// drop(g);
    /// assert_eq!(rt.handle().group_count(), 1);
    /// ```
    pub fn group_count(&self) -> usize {
        self.shared.live_groups.load(Ordering::Relaxed)
    }
}

/// Runs `f` with the group of the task being polled on this thread, without touching its
/// reference count.
pub(crate) fn with_current_group<R>(f: impl FnOnce(Option<&Arc<GroupInner>>) -> R) -> R {
    let p = context::with(|c| c.group_ptr());
    if p.is_null() {
        return f(None);
    }
    // SAFETY: the pointer was set from the polled task's `Arc<GroupInner>`, which its metadata keeps
    // alive for the whole poll we are inside. `ManuallyDrop` makes this a borrowed view: the strong
    // count is neither incremented nor decremented.
    let arc = ManuallyDrop::new(unsafe { Arc::from_raw(p) });
    f(Some(&arc))
}

/// A rondo runtime: a set of worker threads, their queues, and the groups they serve.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// let out = rt.block_on(async {
///     let a = rondo::spawn(async { 20 });
///     let b = rondo::spawn(async { 22 });
///     a.await.unwrap() + b.await.unwrap()
/// });
/// assert_eq!(out, 42);
/// ```
pub struct Runtime {
    handle: Handle,
    threads: Vec<thread::JoinHandle<()>>,
    shut_down: bool,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.threads.len())
            .finish()
    }
}

impl Runtime {
    /// A runtime with the default settings (one worker per core).
    ///
    /// # Errors
    /// If a worker thread cannot be started.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.block_on(async { 1 }), 1);
    /// ```
    pub fn new() -> io::Result<Runtime> {
        Builder::new().build().map_err(io::Error::other)
    }

    /// A [`Builder`] to configure a runtime.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    /// assert_eq!(rt.handle().worker_count(), 1);
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    pub(crate) fn start(config: Config) -> Result<Runtime, BuildError> {
        let n = config.workers;
        let shared = Arc::new(Shared {
            workers: (0..n).map(|_| WorkerShared::new()).collect(),
            scheduler: Scheduler::new(n),
            idle: Idle::new(n),
            shutdown: AtomicBool::new(false),
            config,
            groups: Mutex::new(Slab::new()),
            live_groups: AtomicUsize::new(1),
            next_group_id: AtomicU64::new(0),
        });
        let default_group = GroupInner::new(&shared, None, 1, None);
        let handle = Handle {
            shared: shared.clone(),
            default_group,
        };
        let mut rt = Runtime {
            handle,
            threads: Vec::with_capacity(n),
            shut_down: false,
        };
        for idx in 0..n {
            let name = format!("{}-{idx}", rt.handle.shared.config.thread_name);
            let h = rt.handle.clone();
            match thread::Builder::new()
                .name(name)
                .spawn(move || worker_main(idx, h))
            {
                Ok(t) => rt.threads.push(t),
                Err(e) => {
                    // `rt` drops here and shuts down the workers already started.
                    return Err(BuildError::new(format!(
                        "could not start worker thread {idx} of {n}: {e}"
                    )));
                }
            }
        }
        Ok(rt)
    }

    /// The runtime's handle.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.handle().clone();
    /// assert_eq!(h.block_on(h.spawn(async { 2 })).unwrap(), 2);
    /// ```
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Spawns a task; see [`Handle::spawn`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.spawn(async { 1 + 1 });
    /// assert_eq!(rt.block_on(h).unwrap(), 2);
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// Runs `future` to completion on this thread; see [`Handle::block_on`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert_eq!(rt.block_on(async { 5 }), 5);
    /// ```
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// Starts building a fairness group; see [`GroupBuilder`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().name("io").build().unwrap();
    /// assert_eq!(g.name(), "io");
    /// ```
    pub fn group(&self) -> GroupBuilder {
        self.handle.group()
    }

    /// Shuts the runtime down (see the module docs), waiting at most `timeout` for the workers to
    /// finish their current polls. Tasks still running after the timeout (blocked in a poll) are
    /// left to their threads, which exit when the poll returns.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// rt.shutdown_timeout(Duration::from_secs(1));
    /// assert!(h.is_finished());
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) {
        self.shutdown(Some(timeout));
    }

    fn shutdown(&mut self, timeout: Option<Duration>) {
        if std::mem::replace(&mut self.shut_down, true) {
            return;
        }
        let shared = &self.handle.shared;
        // 1.
        shared.shutdown.store(true, Ordering::SeqCst);
        // 2.
        for w in shared.workers.iter() {
            w.unpark();
        }
        // 3.
        let groups = shared.live_group_list();
        for g in &groups {
            g.registry.wake_all(true);
        }
        // 4.
        let deadline = timeout.map(|t| Instant::now() + t);
        let me = thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() == me {
                continue;
            }
            match deadline {
                None => {
                    let _ = t.join();
                }
                Some(d) => {
                    while !t.is_finished() && Instant::now() < d {
                        thread::sleep(Duration::from_millis(1));
                    }
                    if t.is_finished() {
                        let _ = t.join();
                    }
                }
            }
        }
        // 5.
        while shared.drain_once() > 0 {}
        // 6.
        for g in shared.live_group_list() {
            g.queue.close();
        }
        drop(groups);
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown(None);
    }
}

static GLOBAL: OnceLock<Runtime> = OnceLock::new();

/// The global runtime, started on first use with one worker per core.
pub(crate) fn global() -> &'static Handle {
    GLOBAL
        .get_or_init(|| {
            Builder::new()
                .thread_name("rondo-global")
                .build()
                .unwrap_or_else(|e| panic!("rondo: cannot start the global runtime: {e}"))
        })
        .handle()
}
