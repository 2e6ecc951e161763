//! The blocking pool's threads, and how a closure reaches one without a pool-wide lock.
//!
//! # The protocol
//! - A closure travels as a job (the `Runnable` of a task, see the module docs of `blocking`). The
//!   pool holds two lock-free queues: `jobs`, the jobs not yet taken, and `idle`, the threads
//!   waiting for work (each as its `Sleeper`).
//! - **Searching threads.** `searching` counts the threads that will look at `jobs` before they
//!   wait: threads just started or woken that have not taken a job yet, and threads between two
//!   jobs. While one searches, a spawner wakes nobody. This is what keeps a flood of spawns cheap:
//!   waking a thread per spawn (a futex call each, and soon hundreds of threads, each woken for one
//!   job) made 16 spawning threads 2–3× slower than tokio with 8 or 16 workers.
//! - **Spawning** pushes the job to `jobs`, issues a SeqCst fence and reads `searching`. If nobody
//!   searches, it *wakes one*: it counts one more searcher on behalf of the thread it wakes, pops a
//!   waiting thread from `idle`, claims it by compare-exchange of its state (`WAITING → NOTIFIED`)
//!   and unparks it; with none waiting it starts a thread (born searching), unless `max_threads`
//!   run already: then it takes its count back, and a running thread takes the job when its own
//!   ends.
//! - **Ramping up.** A searcher that takes a job stops searching; if it was the last one and jobs
//!   remain, it wakes one more. So a burst of jobs that block gets one thread each, the threads
//!   started one after another, and a burst of short jobs is served by as many threads as keep up
//!   with it. The spawner and the searcher each publish (push, decrement), fence, then read what the
//!   other published, so at least one of them sees the other (a Dekker pair).
//! - **A thread** runs jobs from `jobs` until the queue is empty. After each job it counts itself
//!   searching again. It counts itself as soon as the closure returns, before the task completes
//!   and wakes whoever awaits it (`closure_returned`): without this, a sequence of
//!   `spawn_blocking(..).await` woke or started a thread for every spawn that came before the
//!   previous thread was back in its loop.
//! - **Waiting**: a thread that found `jobs` empty sets its state to `WAITING`, pushes its sleeper to
//!   `idle`, stops searching, fences and looks at `jobs` again (the other half of the spawner's Dekker
//!   pair: a spawner that saw it searching woke nobody). If a job arrived, it wakes one thread
//!   itself (possibly itself). Then it parks until its state is `NOTIFIED`.
//! - **Keep-alive.** A thread that waits `keep_alive` without being claimed leaves by
//!   compare-exchange `WAITING → GONE` (its stale entry in `idle` is skipped by whoever pops it).
//!   It then gives back its place in `threads`, fences, and looks at `jobs` once more: a spawner
//!   that found the pool full just before it left relied on it, so it takes its place back and
//!   searches if a job waits.
//! - **Shutdown** closes both queues (a later spawn's job is dropped by its spawner, so its handle
//!   resolves cancelled), drops the queued jobs on the shutting-down thread, and claims every
//!   waiting thread; threads then find both queues closed and exit. Running closures are waited
//!   for (`join`).
//!
//! The only lock is the list of thread handles, taken when a thread starts and at shutdown.
//!
//! The pool is generic over its job type so that the loom models (`tests/loom_blocking.rs`) run
//! this code with jobs of their own; the runtime's jobs are `Runnable`s.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use concurrent_queue::ConcurrentQueue;

use crate::group::GroupScope;
use crate::shim::{AtomicBool, AtomicUsize, Mutex, Ordering, fence, lock};
use crate::task::Runnable;

#[cfg(loom)]
use loom::thread::{self, Thread};
#[cfg(not(loom))]
use std::thread::{self, Thread};

/// Runs a pool thread's body inside the runtime's context (so `Handle::current` works in a
/// blocking closure); provided by the runtime layer.
pub(crate) type Enter = Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

/// What the pool runs. Dropping a job unrun cancels it.
pub trait Job: Send + 'static {
    /// Runs the job on a pool thread.
    fn run(self);
}

impl Job for Runnable {
    /// Runs one blocking task on this thread, as a task of its group (current for the closure's
    /// length, so `rondo::spawn` inside it joins that group). An aborted or cancelled task is
    /// dropped unrun.
    fn run(self) {
        if self.metadata().is_cancelled() {
            drop(self);
            return;
        }
        let group = self.metadata().group.clone();
        let _scope = GroupScope::enter(&group);
        Runnable::run(self);
    }
}

const RUNNING: usize = 0;
const WAITING: usize = 1;
const NOTIFIED: usize = 2;
const GONE: usize = 3;

/// A pool thread as the `idle` queue holds it.
struct Sleeper {
    state: AtomicUsize,
    thread: Thread,
}

/// How a wait ended.
enum Woken {
    /// Claimed by a spawner or a searcher: this thread searches (counted by its claimer).
    Claimed,
    /// Claimed at shutdown (counted by its claimer): leave.
    Shutdown,
    /// Left unclaimed (keep-alive, or `idle` closed by shutdown).
    Left,
}

/// A runtime's blocking pool. Public (in a private module) only for the loom models; its default
/// job type is the runtime's own.
#[allow(private_interfaces)]
pub struct Pool<J: Job = Runnable> {
    jobs: ConcurrentQueue<J>,
    idle: ConcurrentQueue<Arc<Sleeper>>,
    /// Threads started and not yet left (a place is taken before a thread starts).
    threads: AtomicUsize,
    /// Threads that will look at `jobs` before they wait (see the module docs).
    searching: AtomicUsize,
    max_threads: usize,
    keep_alive: Duration,
    name: String,
    shutdown: AtomicBool,
    /// Every thread started and not yet joined (finished ones are joined when a thread starts).
    handles: Mutex<Vec<thread::JoinHandle<()>>>,
    enter: Mutex<Option<Enter>>,
}

impl<J: Job> Pool<J> {
    /// An empty pool: no thread runs until a job is scheduled.
    pub fn new(max_threads: usize, keep_alive: Duration, name: String) -> Self {
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
    pub fn schedule(self: &Arc<Self>, job: J) {
        if let Err(e) = self.jobs.push(job) {
            // Closed: the runtime is shutting down; the job is torn down here, by its spawner.
            drop(e.into_inner());
            return;
        }
        fence(Ordering::SeqCst);
        if self.searching.load(Ordering::SeqCst) == 0 {
            self.wake_one();
        }
    }

    /// Makes one more thread search: a waiting one, claimed and unparked, else a new one. At the
    /// thread limit (or if the thread cannot start) nobody is added: every thread then runs a job
    /// or is about to look at `jobs`, and searches when its job ends.
    fn wake_one(self: &Arc<Self>) {
        // Counted first, on behalf of the thread woken or started: it may stop searching (and
        // take its count back) as soon as it runs.
        self.searching.fetch_add(1, Ordering::SeqCst);
        if self.claim_waiting() || self.start_thread() {
            return;
        }
        self.searching.fetch_sub(1, Ordering::SeqCst);
    }

    /// Claims one waiting thread and wakes it; false if none waits. The caller has counted it
    /// searching.
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

    /// Starts a thread (born searching) if a place is free; false otherwise.
    fn start_thread(self: &Arc<Self>) -> bool {
        if !self.reserve() {
            return false;
        }
        let pool = self.clone();
        let mut handles = lock(&self.handles);
        // Threads that left after their keep-alive are joined here, so the list stays short.
        handles.retain(|h| !finished(h));
        let spawned = thread::Builder::new()
            .name(format!("{}-blocking", self.name))
            .spawn(move || pool.thread_main());
        match spawned {
            Ok(h) => {
                handles.push(h);
                true
            }
            Err(_) => {
                drop(handles);
                // The job stays queued: a running thread takes it when its job ends, or the next
                // spawn starts a thread. There is no caller to report the failure to.
                self.threads.fetch_sub(1, Ordering::SeqCst);
                false
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
    fn serve(self: &Arc<Self>) {
        let me = Arc::new(Sleeper {
            state: AtomicUsize::new(RUNNING),
            thread: thread::current(),
        });
        // At the top of the loop this thread counts in `searching` (a new thread was counted by
        // its starter, a woken one by its claimer).
        loop {
            if let Ok(job) = self.jobs.pop() {
                if self.searching.fetch_sub(1, Ordering::SeqCst) == 1 {
                    // The last searcher took a job: if more wait, one more thread must search.
                    fence(Ordering::SeqCst);
                    if !self.jobs.is_empty() {
                        self.wake_one();
                    }
                }
                let _ = SEARCH.try_with(|c| c.set(Search::Armed(&self.searching)));
                job.run();
                // Counted already if the closure returned (see `closure_returned`).
                let counted_early = SEARCH
                    .try_with(|c| c.replace(Search::Off))
                    .is_ok_and(|s| matches!(s, Search::Counted));
                if !counted_early {
                    self.searching.fetch_add(1, Ordering::SeqCst);
                }
                continue;
            }
            match self.wait(&me) {
                Woken::Claimed => continue,
                Woken::Shutdown => {
                    self.searching.fetch_sub(1, Ordering::SeqCst);
                    self.threads.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
                Woken::Left => {}
            }
            // Left: give the place back, then look once more (see the module docs).
            self.threads.fetch_sub(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.jobs.is_empty() || self.shutdown.load(Ordering::SeqCst) || !self.reserve() {
                return;
            }
            me.state.store(RUNNING, Ordering::Relaxed);
            self.searching.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Waits to be claimed, after ending this thread's search (see the module docs).
    fn wait(self: &Arc<Self>, me: &Arc<Sleeper>) -> Woken {
        me.state.store(WAITING, Ordering::Relaxed);
        let pushed = self.idle.push(me.clone()).is_ok();
        self.searching.fetch_sub(1, Ordering::SeqCst);
        if !pushed {
            // Closed: shutdown.
            return Woken::Left;
        }
        fence(Ordering::SeqCst);
        if !self.jobs.is_empty() {
            // A spawner that saw this thread searching woke nobody for its job.
            self.wake_one();
        }
        let deadline = Instant::now() + self.keep_alive;
        loop {
            if me
                .state
                .compare_exchange(NOTIFIED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                if self.shutdown.load(Ordering::SeqCst) && self.jobs.is_empty() {
                    return Woken::Shutdown;
                }
                return Woken::Claimed;
            }
            let now = Instant::now();
            if now >= deadline
                && me
                    .state
                    .compare_exchange(WAITING, GONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return Woken::Left;
            }
            park_for(deadline.saturating_duration_since(now));
        }
    }

    /// Shutdown, first part: refuse new closures, drop the queued ones (their handles resolve
    /// cancelled) and wake the waiting threads, which exit.
    pub fn close(&self) {
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
        loop {
            // Counted for the claimed thread, which takes its count back as it leaves.
            self.searching.fetch_add(1, Ordering::SeqCst);
            if !self.claim_waiting() {
                self.searching.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        }
    }

    /// Shutdown, second part: waits for the pool's threads (closures still running) until
    /// `deadline`, or forever with none. A thread still running a closure then is left to finish
    /// it on its own; it exits afterwards. The calling thread is never waited for (a runtime
    /// dropped inside a blocking closure).
    pub fn join(&self, deadline: Option<Instant>) {
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
                    while !finished(&h) && Instant::now() < d {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    if finished(&h) {
                        let _ = h.join();
                    }
                }
            }
        }
    }

    /// Threads started and not yet left.
    pub fn threads(&self) -> usize {
        self.threads.load(Ordering::SeqCst)
    }

    /// Threads counted as searching (for the loom models' final checks).
    #[cfg(loom)]
    pub fn searching(&self) -> usize {
        self.searching.load(Ordering::SeqCst)
    }
}

/// Whether a thread has ended (loom's handles cannot tell; the models never join with a deadline).
fn finished(h: &thread::JoinHandle<()>) -> bool {
    #[cfg(loom)]
    {
        let _ = h;
        false
    }
    #[cfg(not(loom))]
    h.is_finished()
}

/// Parks this thread for at most `d`, or until unparked. Under loom, which has no timed park, it
/// parks until unparked: the models use a zero keep-alive (never parks) or a keep-alive that never
/// ends.
fn park_for(d: Duration) {
    #[cfg(loom)]
    {
        let _ = d;
        thread::park();
    }
    #[cfg(not(loom))]
    thread::park_timeout(d);
}

/// Whether the job running on this pool thread has counted the thread as searching yet.
#[derive(Clone, Copy)]
enum Search {
    Off,
    /// A job runs; its closure has not returned yet. The pool's `searching` counter.
    Armed(*const AtomicUsize),
    Counted,
}

#[cfg(not(loom))]
thread_local! {
    static SEARCH: Cell<Search> = const { Cell::new(Search::Off) };
}
#[cfg(loom)]
loom::thread_local! {
    static SEARCH: Cell<Search> = Cell::new(Search::Off);
}

/// Called by a blocking task right after its closure returns, before the task completes and wakes
/// whoever awaits it: from here the thread only finishes the task, then looks at `jobs`, so it
/// counts as searching already. A `spawn_blocking(..).await` loop then finds this thread for its
/// next closure instead of waking or starting another one (the awaiting task is woken by the
/// completion, typically before this thread is back in its loop).
pub fn closure_returned() {
    let _ = SEARCH.try_with(|c| {
        if let Search::Armed(searching) = c.get() {
            // SAFETY: `Armed` holds the counter of the pool whose `serve` is running on this
            // thread (it holds an `Arc` of the pool) and set it just before running this job; it
            // resets the cell before it returns.
            unsafe { &*searching }.fetch_add(1, Ordering::SeqCst);
            c.set(Search::Counted);
        }
    });
}
