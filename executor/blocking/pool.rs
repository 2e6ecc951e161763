//! The blocking pool's threads, and how a closure reaches one without a pool-wide lock.
//!
//! # The protocol
//! - A closure travels as the `Runnable` of a task (see the module docs of `blocking`). The pool
//!   holds two lock-free queues: `jobs`, the runnables not yet taken, and `idle`, the threads
//!   waiting for a job (each as its `Sleeper`).
//! - **Spawning** pushes the runnable to `jobs` and issues a SeqCst fence. Then it looks for a
//!   thread to take the job, each found thread answering for one job: first a *searching* thread
//!   (one that just finished a job and has not looked at `jobs` yet; claiming it is one
//!   decrement of `searching`, and no wake-up is needed), then a *waiting* thread, popped from
//!   `idle` and claimed by compare-exchange of its state (`WAITING → NOTIFIED`), then unparked.
//!   If there is neither, it starts a thread, unless `max_threads` run already: then a running
//!   thread takes the job when its current one ends.
//! - **A thread** runs jobs from `jobs` until the queue is empty. After each job it counts itself
//!   in `searching` and looks at `jobs`; it ends its search by taking its count back, and if a
//!   spawner took it first (a job was queued before), it looks again. Without this, a sequence of
//!   `spawn_blocking(..).await` started a new thread whenever the next spawn came before the
//!   previous thread had gone back to wait.
//! - **Waiting**: the thread sets its state to `WAITING`, pushes its sleeper to `idle`, issues a
//!   SeqCst fence and looks at `jobs` again: the spawner and the thread each publish, fence, then
//!   read what the other published, so at least one sees the other (a Dekker pair). If a job
//!   arrived, the thread claims a waiting thread itself (possibly itself). Then it parks until its
//!   state is `NOTIFIED`.
//! - **Keep-alive.** A thread that waits `keep_alive` without being claimed leaves by
//!   compare-exchange `WAITING → GONE` (its stale entry in `idle` is skipped by whoever pops it).
//!   It then gives back its place in `threads`, fences, and looks at `jobs` once more: a spawner
//!   that found the pool full just before it left relied on it, so it takes its place back and
//!   carries on if a job waits.
//! - **Shutdown** closes both queues (a later spawn's runnable is dropped by its spawner, so its
//!   handle resolves cancelled), drops the queued runnables on the shutting-down thread, and claims
//!   every waiting thread; threads then find both queues closed and exit. Running closures are
//!   waited for (`join`).
//!
//! The only lock is the list of thread handles, taken when a thread starts and at shutdown.

use std::cell::Cell;
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use concurrent_queue::ConcurrentQueue;

use crate::group::GroupScope;
use crate::shim::{AtomicBool, AtomicUsize, Mutex, Ordering, fence, lock};
use crate::task::Runnable;

/// Runs a pool thread's body inside the runtime's context (so `Handle::current` works in a
/// blocking closure); provided by the runtime layer.
pub(crate) type Enter = Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

const RUNNING: usize = 0;
const WAITING: usize = 1;
const NOTIFIED: usize = 2;
const GONE: usize = 3;

/// A pool thread as the `idle` queue holds it.
struct Sleeper {
    state: AtomicUsize,
    thread: Thread,
}

/// A runtime's blocking pool.
pub(crate) struct Pool {
    jobs: ConcurrentQueue<Runnable>,
    idle: ConcurrentQueue<Arc<Sleeper>>,
    /// Threads started and not yet left (a place is taken before a thread starts).
    threads: AtomicUsize,
    /// Threads between two jobs whose search no spawner has claimed yet.
    searching: AtomicUsize,
    max_threads: usize,
    keep_alive: Duration,
    name: String,
    shutdown: AtomicBool,
    /// Every thread started and not yet joined (finished ones are joined when a thread starts).
    handles: Mutex<Vec<thread::JoinHandle<()>>>,
    enter: Mutex<Option<Enter>>,
}

impl Pool {
    pub(crate) fn new(max_threads: usize, keep_alive: Duration, name: String) -> Self {
        Pool {
            jobs: ConcurrentQueue::unbounded(),
            idle: ConcurrentQueue::unbounded(),
            threads: AtomicUsize::new(0),
            searching: AtomicUsize::new(0),
            max_threads,
            keep_alive,
            name,
            shutdown: AtomicBool::new(false),
            handles: Mutex::new(Vec::new()),
            enter: Mutex::new(None),
        }
    }

    /// Sets what every pool thread runs its body inside (the runtime's context).
    pub(crate) fn set_enter(&self, enter: Enter) {
        *lock(&self.enter) = Some(enter);
    }

    /// The schedule function of a blocking task: queue it and make sure a thread will run it.
    pub(crate) fn schedule(self: &Arc<Self>, r: Runnable) {
        if let Err(e) = self.jobs.push(r) {
            // Closed: the runtime is shutting down; the task is torn down here, by its spawner.
            drop(e.into_inner());
            return;
        }
        fence(Ordering::SeqCst);
        if !self.take_searcher() && !self.claim_waiting() {
            self.start_thread();
        }
    }

    /// Claims one unclaimed search (a thread between two jobs, which looks at `jobs` before it
    /// waits); false if there is none. A thread ending its own search calls it too.
    fn take_searcher(&self) -> bool {
        self.searching
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Claims one waiting thread and wakes it; false if none waits.
    fn claim_waiting(&self) -> bool {
        while let Ok(s) = self.idle.pop() {
            if s.state
                .compare_exchange(WAITING, NOTIFIED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                s.thread.unpark();
                return true;
            }
            // GONE (left after its keep-alive): its entry just goes.
        }
        false
    }

    /// Takes a place in `threads` if one is free.
    fn reserve(&self) -> bool {
        self.threads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max_threads).then_some(n + 1)
            })
            .is_ok()
    }

    fn start_thread(self: &Arc<Self>) {
        if !self.reserve() {
            return;
        }
        let pool = self.clone();
        let mut handles = lock(&self.handles);
        // Threads that left after their keep-alive are joined here, so the list stays short.
        handles.retain(|h| !h.is_finished());
        let spawned = thread::Builder::new()
            .name(format!("{}-blocking", self.name))
            .spawn(move || pool.thread_main());
        match spawned {
            Ok(h) => handles.push(h),
            Err(_) => {
                drop(handles);
                // The job stays queued: a running thread takes it when its job ends, or the next
                // spawn starts a thread. There is no caller to report the failure to.
                self.threads.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn thread_main(self: Arc<Self>) {
        let enter = lock(&self.enter).clone();
        let mut body = || self.serve();
        match enter {
            Some(enter) => enter(&mut body),
            None => body(),
        }
    }

    /// A pool thread's loop: run jobs, search for the next one, wait to be claimed, leave after
    /// the keep-alive.
    fn serve(&self) {
        let me = Arc::new(Sleeper {
            state: AtomicUsize::new(RUNNING),
            thread: thread::current(),
        });
        // True while this thread counts in `searching`.
        let mut counted = false;
        loop {
            if let Ok(r) = self.jobs.pop() {
                if counted {
                    // Claimed or not, the search ends with a job taken.
                    let _ = self.take_searcher();
                }
                let _ = SEARCH.try_with(|c| c.set(Search::Armed(self)));
                run(r);
                // Counted already if the closure returned (see `closure_returned`).
                let counted_early = SEARCH
                    .try_with(|c| c.replace(Search::Off))
                    .is_ok_and(|s| matches!(s, Search::Counted));
                if !counted_early {
                    self.searching.fetch_add(1, Ordering::SeqCst);
                }
                counted = true;
                continue;
            }
            if counted {
                counted = false;
                if !self.take_searcher() {
                    // A spawner claimed this search after it queued a job: look again.
                    continue;
                }
            }
            if self.wait(&me) {
                continue;
            }
            // Left: give the place back, then look once more (see the module docs).
            self.threads.fetch_sub(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.jobs.is_empty() || self.shutdown.load(Ordering::SeqCst) || !self.reserve() {
                return;
            }
            me.state.store(RUNNING, Ordering::Relaxed);
        }
    }

    /// Waits to be claimed; false if the thread should leave (keep-alive, shutdown).
    fn wait(&self, me: &Arc<Sleeper>) -> bool {
        me.state.store(WAITING, Ordering::Relaxed);
        if self.idle.push(me.clone()).is_err() {
            // Closed: shutdown.
            return false;
        }
        fence(Ordering::SeqCst);
        if !self.jobs.is_empty() {
            // A spawner may have missed this thread: claim a waiting thread for its job.
            self.claim_waiting();
        }
        let deadline = Instant::now() + self.keep_alive;
        loop {
            if me
                .state
                .compare_exchange(NOTIFIED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return !self.shutdown.load(Ordering::SeqCst) || !self.jobs.is_empty();
            }
            let now = Instant::now();
            if now >= deadline
                && me
                    .state
                    .compare_exchange(WAITING, GONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return false;
            }
            thread::park_timeout(deadline.saturating_duration_since(now));
        }
    }

    /// Shutdown, first part: refuse new closures, drop the queued ones (their handles resolve
    /// cancelled) and wake the waiting threads, which exit.
    pub(crate) fn close(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.jobs.close();
        self.idle.close();
        while let Ok(r) = self.jobs.pop() {
            drop(r);
        }
        self.claim_all();
        // The context holds the runtime's handle: dropping it breaks the cycle pool → handle.
        let enter = lock(&self.enter).take();
        drop(enter);
    }

    fn claim_all(&self) {
        while self.claim_waiting() {}
    }

    /// Shutdown, second part: waits for the pool's threads (closures still running) until
    /// `deadline`, or forever with none. A thread still running a closure then is left to finish
    /// it on its own; it exits afterwards. The calling thread is never waited for (a runtime
    /// dropped inside a blocking closure).
    pub(crate) fn join(&self, deadline: Option<Instant>) {
        let handles = std::mem::take(&mut *lock(&self.handles));
        let me = thread::current().id();
        for h in handles {
            if h.thread().id() == me {
                continue;
            }
            match deadline {
                None => {
                    let _ = h.join();
                }
                Some(d) => {
                    while !h.is_finished() && Instant::now() < d {
                        thread::sleep(Duration::from_millis(1));
                    }
                    if h.is_finished() {
                        let _ = h.join();
                    }
                }
            }
        }
    }

    /// Threads started and not yet left.
    pub(crate) fn threads(&self) -> usize {
        self.threads.load(Ordering::SeqCst)
    }
}

/// Whether the job running on this pool thread has counted the thread as searching yet.
#[derive(Clone, Copy)]
enum Search {
    Off,
    /// A job of this pool runs; its closure has not returned yet.
    Armed(*const Pool),
    Counted,
}

thread_local! {
    static SEARCH: Cell<Search> = const { Cell::new(Search::Off) };
}

/// Called by a blocking task right after its closure returns, before the task completes and wakes
/// whoever awaits it: from here the thread only finishes the task, then looks at `jobs`, so it
/// counts as searching already. A `spawn_blocking(..).await` loop then finds this thread for its
/// next closure instead of starting another one (the awaiting task is woken by the completion,
/// typically before this thread is back in its loop).
pub(crate) fn closure_returned() {
    let _ = SEARCH.try_with(|c| {
        if let Search::Armed(pool) = c.get() {
            // SAFETY: `Armed` holds the pool whose `serve` is running on this thread and set it
            // just before running this job; it resets the cell before it returns.
            unsafe { &*pool }.searching.fetch_add(1, Ordering::SeqCst);
            c.set(Search::Counted);
        }
    });
}

/// Runs one blocking task on this thread, as a task of its group (current for the closure's
/// length, so `rondo::spawn` inside it joins that group). An aborted or cancelled task is dropped
/// unrun.
fn run(r: Runnable) {
    if r.metadata().is_cancelled() {
        drop(r);
        return;
    }
    let group = r.metadata().group.clone();
    let _scope = GroupScope::enter(&group);
    r.run();
}
