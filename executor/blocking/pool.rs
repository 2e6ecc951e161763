//! The blocking pool's threads, and how a closure reaches one without a pool-wide lock.
//!
//! # The protocol
//! - A closure travels as a job (the `Runnable` of a task, see the module docs of `blocking`). The
//!   pool holds two lock-free queues: `jobs`, the jobs not yet taken, and `idle`, the threads
//!   waiting for work (each as its `Sleeper`).
//! - **Searching threads.** `searching` counts the threads that will look at `jobs` before they
//!   wait: threads just started or woken that have not taken a job yet, and threads between two
//!   jobs. While one searches, a spawner wakes nobody. This is what keeps a flood of spawns cheap:
//!   waking a thread per spawn would cost a futex call each, and soon hundreds of threads, each
//!   woken for one job.
//! - **Spawning** pushes the job to `jobs`, issues a SeqCst fence and reads `searching`. If nobody
//!   searches and a job is still queued, it *wakes one*: it counts one searcher on behalf of the
//!   thread it wakes (by compare-exchange from zero, see *Waiting*), pops a waiting thread from
//!   `idle`, claims it by compare-exchange of its state (`WAITING → NOTIFIED`) and unparks it; with
//!   none waiting it starts a thread (born searching), unless `max_threads` run already: then it
//!   takes its count back, and a running thread takes the job when its own ends. A queue found empty
//!   means a searcher took the job after the push (and stopped searching as it did): the spawner
//!   gives its count back and looks at `jobs` once more, the other half of the Dekker pair for a
//!   spawner that saw its count. Waking anyway would start a second thread in a
//!   `spawn_blocking(..).await` loop.
//! - **Ramping up.** A searcher that takes a job stops searching; if it was the last one and jobs
//!   remain, it wakes one more, by the spawner's rule (so a spawner and this searcher that both
//!   see a job with nobody searching wake one thread between them). So a burst of jobs that block
//!   gets one thread each, the threads started one after another, and a burst of short jobs is
//!   served by as many threads as keep up with it. The spawner and the searcher each publish
//!   (push, decrement), fence, then read what the other published, so at least one of them sees
//!   the other (a Dekker pair).
//! - **A thread** runs jobs from `jobs` until the queue is empty. After each job it counts itself
//!   searching again. It counts itself as soon as the closure returns, before the task completes
//!   and wakes whoever awaits it (`closure_returned`): otherwise a sequence of
//!   `spawn_blocking(..).await` would wake or start a thread for every spawn that came before the
//!   previous thread was back in its loop.
//! - **Waiting**: a thread that found `jobs` empty sets its state to `WAITING`, pushes its sleeper to
//!   `idle`, stops searching, fences and looks at `jobs` again (the other half of the spawner's Dekker
//!   pair: a spawner that saw it searching woke nobody). If a job arrived and still nobody
//!   searches, it claims a waiting thread itself (possibly itself), never starting one. When both
//!   sides see each other, both would wake a thread for one job, and the second wake, finding no
//!   thread waiting, would start one: so a spawner and a waiting thread each count a searcher
//!   only by compare-exchange from zero, and only the one that wins it wakes. Then it parks until
//!   its state is `NOTIFIED`.
//! - **Keep-alive.** A thread that waits `keep_alive` without being claimed leaves by
//!   compare-exchange `WAITING → GONE` (its stale entry in `idle` is skipped by whoever pops it).
//!   It then gives back its place in `threads`, fences, and looks at `jobs` once more: a spawner
//!   that found the pool full just before it left relied on it, so it takes its place back and
//!   searches if a job waits. A keep-alive too long for an `Instant` to express never ends: the
//!   thread waits until it is claimed.
//! - **Unwinding.** A thread whose loop unwinds (a job that panics out of `run`; the runtime's
//!   own jobs do not, as their tasks catch the closures' panics) leaves like a thread whose
//!   keep-alive ended, whatever step it was at: its state becomes `GONE` so nobody claims it, it
//!   gives back its place in `threads`, and if it counted as searching it stops, then wakes
//!   another thread if a job waits. Otherwise a dead thread would stay claimable, or hold a place
//!   or a search that no thread fulfils, and the next spawn would wait for it for good.
//! - **Shutdown** closes both queues (a later spawn's job is dropped by its spawner, so its handle
//!   resolves cancelled), drops the queued jobs on the shutting-down thread, and claims every
//!   waiting thread; threads then find both queues closed and exit. Running closures are waited
//!   for (`join`).
//! - **A thread that cannot start** (the system refuses it) leaves the job queued for a running
//!   thread. If none runs, nothing would ever take it: the spawner drops the queued jobs and
//!   panics with the system's reason (`no_thread_started`), so the failure surfaces where the
//!   spawn is made instead of as a handle that never resolves.
//!
//! - **Admission** (see `share`): a thread that pops a job whose group is not admitted *holds* it
//!   (in `held`, under its lock) and, still searching, goes on with the next job; the job goes
//!   back to `jobs` when a scan admits its group, and its releaser wakes a thread by the
//!   spawner's rule. While jobs are held, one waiting thread, the *timer* (`Share::take_timer`),
//!   wakes every `SCAN_EVERY` to scan and does not leave after its keep-alive; the others wait as
//!   usual. A thread that holds a job when no thread is the timer claims a waiting one, and a
//!   timer that is claimed for a job passes the role the same way (the claimed thread finds no
//!   job, waits again and takes the role), so while a thread waits, held jobs are rescanned; and
//!   every thread that takes a job rescans first if a scan is due. The group furthest behind is
//!   always admitted, so no job is held for good. Shutdown drops the held jobs with the queued
//!   ones.
//!
//! The only locks are the list of thread handles, taken when a thread starts and at shutdown, and
//! the list of held jobs, taken only when a job is held or a scan releases held ones.
//!
//! The pool is generic over its job type so that the loom models (`loom_models/blocking.rs`) run
//! this code with jobs of their own; the runtime's jobs are `Runnable`s.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use concurrent_queue::ConcurrentQueue;

use crate::group::{GroupInner, GroupScope};
use crate::shim::{AtomicBool, AtomicUsize, Mutex, Ordering, fence, lock};
use crate::task::Runnable;
use crate::task::future::report_deferred;

use super::share::{SCAN_EVERY, Share};

#[cfg(loom)]
use loom::thread::{self, Thread};
#[cfg(not(loom))]
use std::thread::{self, Thread};

/// Runs a pool thread's body inside the runtime's context (so `Handle::current` works in a
/// blocking closure); provided by the runtime layer.
pub(crate) type Enter = Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

/// What the pool runs. Dropping a job unrun cancels it.
pub(crate) trait Job: Send + 'static {
    /// Runs the job on a pool thread. A job that unwinds ends its thread (see the module docs,
    /// *Unwinding*); the pool goes on with its other threads.
    fn run(self);

    /// The group the job is charged to and admitted by (see `share`); a job of none always runs.
    fn group(&self) -> Option<&Arc<GroupInner>> {
        None
    }
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
        mark_cpu();
        Runnable::run(self);
        // A closure that unwound never reached `closure_returned`: its CPU time is charged here.
        if SEARCH
            .try_with(|c| matches!(c.get(), Search::Armed(_)))
            .unwrap_or(false)
        {
            charge_cpu(&group);
        }
        // A detached task drops its own output as it completes; a panic of the output's destructor
        // was caught and left on this thread for whoever knows the task's group, as a worker does
        // after a poll.
        report_deferred(&*group);
    }

    fn group(&self) -> Option<&Arc<GroupInner>> {
        Some(&self.metadata().group)
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

/// A runtime's blocking pool. Its default job type is the runtime's own; the loom models run it
/// with jobs of their own.
pub(crate) struct Pool<J: Job = Runnable> {
    jobs: ConcurrentQueue<J>,
    idle: ConcurrentQueue<Arc<Sleeper>>,
    /// Threads started and not yet left (a place is taken before a thread starts).
    threads: AtomicUsize,
    /// Threads that will look at `jobs` before they wait (see the module docs).
    searching: AtomicUsize,
    max_threads: usize,
    keep_alive: Duration,
    name: String,
    /// The stack size of the pool's threads; the standard library's default if `None`.
    stack_size: Option<usize>,
    shutdown: AtomicBool,
    /// Every thread started and not yet joined (finished ones are joined when a thread starts).
    handles: Mutex<Vec<thread::JoinHandle<()>>>,
    enter: Mutex<Option<Enter>>,
    /// What closures cost their groups, and which groups' jobs may run (see `share`).
    share: Share,
    /// Jobs popped from `jobs` whose groups were not admitted, in the order they were held.
    held: Mutex<Vec<J>>,
}

impl<J: Job> Pool<J> {
    /// An empty pool: no thread runs until a job is scheduled.
    pub(crate) fn new(max_threads: usize, keep_alive: Duration, name: String) -> Self {
        Pool {
            jobs: ConcurrentQueue::unbounded(),
            idle: ConcurrentQueue::unbounded(),
            threads: AtomicUsize::new(0),
            searching: AtomicUsize::new(0),
            max_threads,
            keep_alive,
            name,
            stack_size: None,
            shutdown: AtomicBool::new(false),
            handles: Mutex::new(Vec::new()),
            enter: Mutex::new(None),
            share: Share::new(),
            held: Mutex::new(Vec::new()),
        }
    }

    /// Gives the pool's threads a stack of `bytes` (the standard library's default if `None`).
    pub(crate) fn with_stack_size(mut self, bytes: Option<usize>) -> Self {
        self.stack_size = bytes;
        self
    }

    /// Sets what every pool thread runs its body inside (the runtime's context).
    pub(crate) fn set_enter(&self, enter: Enter) {
        *lock(&self.enter) = Some(enter);
    }

    /// The charging and admission state (see `share`).
    pub(crate) fn share(&self) -> &Share {
        &self.share
    }

    /// Decides whether a job just popped runs now: a job whose group is not admitted is held,
    /// and `None` returned (see `share`). Scans first if a scan is due.
    fn admit(self: &Arc<Self>, job: J) -> Option<J> {
        let Some(group) = job.group() else {
            return Some(job);
        };
        let now = crate::clock::stamp();
        if self.share.scan_due(now) {
            self.rescan(now, Some(group.clone()));
        }
        if self.share.admit(group) {
            return Some(job);
        }
        let mut held = lock(&self.held);
        held.push(job);
        self.share.set_holding(true);
        drop(held);
        // This thread may go on to run a long closure: a waiting thread rescans meanwhile.
        self.ensure_timer();
        None
    }

    /// Scans (see `share`), then moves the held jobs whose groups are admitted back to `jobs` and
    /// makes sure a thread searches for them. `any` is a group of the runtime, else the first
    /// held job's is used.
    fn rescan(self: &Arc<Self>, now: u64, any: Option<Arc<GroupInner>>) {
        let (ids, any) = {
            let held = lock(&self.held);
            let mut ids: Vec<u64> = held
                .iter()
                .filter_map(|j| j.group())
                .map(|g| g.id())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let any = any.or_else(|| held.iter().find_map(|j| j.group().cloned()));
            (ids, any)
        };
        let Some(any) = any else {
            return;
        };
        self.share.scan(now, &any, &ids);
        if ids.is_empty() {
            return;
        }
        let mut released = false;
        {
            let mut held = lock(&self.held);
            let mut i = 0;
            while i < held.len() {
                if held[i].group().is_none_or(|g| self.share.is_behind(g)) {
                    let job = held.remove(i);
                    if let Err(e) = self.jobs.push(job) {
                        // Closed: shutdown drops it (outside this lock: a destructor may run).
                        drop(held);
                        drop(e.into_inner());
                        return;
                    }
                    released = true;
                } else {
                    i += 1;
                }
            }
            self.share.set_holding(!held.is_empty());
        }
        if released {
            fence(Ordering::SeqCst);
            if let Err(e) = self.wake_if_unsearched() {
                self.no_thread_started(e);
            }
        }
    }

    /// The schedule function of a blocking task: queue it and make sure a thread will run it.
    pub(crate) fn schedule(self: &Arc<Self>, job: J) {
        if let Err(e) = self.jobs.push(job) {
            // Closed: the runtime is shutting down; the job is torn down here, by its spawner.
            drop(e.into_inner());
            return;
        }
        fence(Ordering::SeqCst);
        if let Err(e) = self.wake_if_unsearched() {
            self.no_thread_started(e);
        }
    }

    /// If a job waits and nobody searches, wakes one thread (see `wake_counted`). The caller has
    /// published what the other side of its Dekker pair reads (pushed a job, or stopped
    /// searching) and fenced. The error is the system's reason a thread could not start.
    fn wake_if_unsearched(self: &Arc<Self>) -> std::io::Result<()> {
        while self.start_search() {
            if !self.jobs.is_empty() {
                return self.wake_counted();
            }
            // A searcher took the job between its push and this read of `searching` (it stopped
            // searching as it took it): nobody needs waking, and a thread started now would have
            // no job. Give the count back, then look once more: a spawner that saw the count
            // meanwhile woke nobody for its job (a Dekker pair, as with a thread going to wait).
            self.searching.fetch_sub(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.jobs.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// If no thread searches, counts one on behalf of the thread the caller is to wake, and
    /// returns true. Several parties may see nobody searching for the same job (a spawner, the
    /// last searcher as it takes a job, a thread going to wait; see the module docs): the
    /// compare-exchange lets one of them wake a thread, where adding a count each would wake or
    /// start one each.
    fn start_search(&self) -> bool {
        self.searching.load(Ordering::SeqCst) == 0
            && self
                .searching
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// The spawner's answer to a thread that could not start: if some thread still runs, it takes
    /// the job when its own ends. With none, no thread would ever take the queued jobs: they are
    /// dropped (their handles resolve cancelled) and the spawner panics with the reason, as a
    /// spawn that cannot be served says so where it is made.
    fn no_thread_started(&self, e: std::io::Error) {
        if self.threads.load(Ordering::SeqCst) > 0 {
            return;
        }
        while let Ok(job) = self.jobs.pop() {
            drop(job);
        }
        panic!(
            "the blocking pool could not start a thread ({e}) and has none running, so the \
             blocking closure cannot run; the system's thread limit or memory may be exhausted"
        );
    }

    /// Makes one more thread search: a waiting one, claimed and unparked, else a new one. The
    /// caller has counted it in `searching` already, on its behalf: it may stop searching (and
    /// take its count back) as soon as it runs. At the thread limit (or if the thread cannot
    /// start) nobody is added and the count is taken back: every thread then runs a job or is
    /// about to look at `jobs`, and searches when its job ends. The error is the system's reason a
    /// thread could not start.
    fn wake_counted(self: &Arc<Self>) -> std::io::Result<()> {
        if self.claim_waiting() {
            return Ok(());
        }
        let started = self.start_thread();
        if !matches!(started, Ok(true)) {
            self.searching.fetch_sub(1, Ordering::SeqCst);
        }
        started.map(|_| ())
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

    /// Starts a thread (born searching) if a place is free; false if none is, the system's error
    /// if the thread could not start.
    fn start_thread(self: &Arc<Self>) -> std::io::Result<bool> {
        if !self.reserve() {
            return Ok(false);
        }
        let pool = self.clone();
        let mut handles = lock(&self.handles);
        // Threads that left after their keep-alive are joined here, so the list stays short.
        handles.retain(|h| !finished(h));
        let mut builder = thread::Builder::new().name(format!("{}-blocking", self.name));
        if let Some(n) = self.stack_size {
            builder = builder.stack_size(n);
        }
        let spawned = builder.spawn(move || pool.thread_main());
        match spawned {
            Ok(h) => {
                handles.push(h);
                Ok(true)
            }
            Err(e) => {
                drop(handles);
                // The job stays queued: a running thread takes it when its job ends (the spawner
                // decides what happens if none runs, see `no_thread_started`).
                self.threads.fetch_sub(1, Ordering::SeqCst);
                Err(e)
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
        let mut reg = Registration {
            pool: self,
            me: &me,
            placed: true,
            searching: true,
        };
        let _meter = Meter::start(&self.share);
        loop {
            if let Ok(job) = self.jobs.pop() {
                // Held (its group is ahead): this thread still searches, for the next job.
                let Some(job) = self.admit(job) else {
                    continue;
                };
                reg.searching = false;
                if self.searching.fetch_sub(1, Ordering::SeqCst) == 1 {
                    // The last searcher took a job: if more wait, one more thread must search. A
                    // thread that cannot start leaves the job to this one, after its own.
                    fence(Ordering::SeqCst);
                    let _ = self.wake_if_unsearched();
                }
                let _ = SEARCH.try_with(|c| c.set(Search::Armed(&self.searching)));
                let group = job.group().cloned();
                job.run();
                if let Some(g) = group {
                    self.share.finished(&g);
                }
                // Counted already if the closure returned (see `closure_returned`).
                let counted_early = SEARCH
                    .try_with(|c| c.replace(Search::Off))
                    .is_ok_and(|s| matches!(s, Search::Counted));
                if !counted_early {
                    self.searching.fetch_add(1, Ordering::SeqCst);
                }
                reg.searching = true;
                continue;
            }
            match self.wait(&me, &mut reg) {
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
            reg.placed = false;
            fence(Ordering::SeqCst);
            if self.jobs.is_empty() || self.shutdown.load(Ordering::SeqCst) || !self.reserve() {
                return;
            }
            reg.placed = true;
            me.state.store(RUNNING, Ordering::Relaxed);
            self.searching.fetch_add(1, Ordering::SeqCst);
            reg.searching = true;
        }
    }

    /// Waits to be claimed, after ending this thread's search (see the module docs).
    fn wait(self: &Arc<Self>, me: &Arc<Sleeper>, reg: &mut Registration<'_, J>) -> Woken {
        me.state.store(WAITING, Ordering::Relaxed);
        let pushed = self.idle.push(me.clone()).is_ok();
        self.searching.fetch_sub(1, Ordering::SeqCst);
        reg.searching = false;
        if !pushed {
            // Closed: shutdown.
            return Woken::Left;
        }
        fence(Ordering::SeqCst);
        if !self.jobs.is_empty() {
            // A spawner that saw this thread searching woke nobody for its job: if still nobody
            // searches, claim a waiting thread (possibly this one) for it, as the spawner would.
            // Never start one: this thread is in `idle`, so a claim that finds nobody means
            // another waker popped it first and claims it (only this thread moves itself off
            // `WAITING`, after its keep-alive).
            if self.start_search() && !self.claim_waiting() {
                self.searching.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // `None`: a keep-alive no `Instant` can express, which never ends.
        let deadline = Instant::now().checked_add(self.keep_alive);
        // True while this thread is the waiting thread that rescans for the held jobs.
        let mut timer = false;
        loop {
            if me
                .state
                .compare_exchange(NOTIFIED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // Counted by its claimer.
                reg.searching = true;
                if timer {
                    self.pass_timer();
                }
                if self.shutdown.load(Ordering::SeqCst) && self.jobs.is_empty() {
                    return Woken::Shutdown;
                }
                return Woken::Claimed;
            }
            if self.share.holding() && (timer || self.share.take_timer()) {
                // Jobs are held: this thread rescans every `SCAN_EVERY` while it waits, and does
                // not leave after its keep-alive.
                timer = true;
                let stamp = crate::clock::stamp();
                if self.share.scan_due(stamp) {
                    self.rescan(stamp, None);
                }
                if me.state.load(Ordering::Acquire) != NOTIFIED {
                    park_for(SCAN_EVERY);
                }
                continue;
            }
            if timer {
                timer = false;
                self.share.drop_timer();
            }
            let Some(deadline) = deadline else {
                thread::park();
                continue;
            };
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

    /// The rescanning thread was claimed: it gives the role up, and if jobs are still held,
    /// claims a waiting thread (counted searching for it, as shutdown's claims are), which finds
    /// no job, waits again and takes the role.
    fn pass_timer(&self) {
        self.share.drop_timer();
        self.ensure_timer();
    }

    /// If jobs are held and no waiting thread rescans for them, claims one to (see `pass_timer`).
    fn ensure_timer(&self) {
        if self.share.holding() && !self.share.has_timer() {
            self.searching.fetch_add(1, Ordering::SeqCst);
            if !self.claim_waiting() {
                self.searching.fetch_sub(1, Ordering::SeqCst);
            }
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
        let held = std::mem::take(&mut *lock(&self.held));
        self.share.set_holding(false);
        drop(held);
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
    pub(crate) fn threads(&self) -> usize {
        self.threads.load(Ordering::SeqCst)
    }

    /// Threads counted as searching (for the loom models' final checks).
    #[cfg(all(test, loom))]
    pub(crate) fn searching(&self) -> usize {
        self.searching.load(Ordering::SeqCst)
    }
}

/// What a pool thread holds of the pool while its loop runs, kept up to date at each step so
/// that a loop that unwinds gives it all back (see the module docs, *Unwinding*).
struct Registration<'a, J: Job> {
    pool: &'a Arc<Pool<J>>,
    me: &'a Sleeper,
    /// The thread holds a place in `threads`.
    placed: bool,
    /// The thread counts in `searching` on its own account (a claim not yet seen, or a count made
    /// by `closure_returned`, are found at unwinding time).
    searching: bool,
}

impl<J: Job> Drop for Registration<'_, J> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // The loop returned, and gave back what it held on the way out.
            return;
        }
        let pool = self.pool;
        // Nobody claims this thread from now on. A claim that came first counted it searching.
        let claimed = self.me.state.swap(GONE, Ordering::AcqRel) == NOTIFIED;
        let counted_early = SEARCH
            .try_with(|c| c.replace(Search::Off))
            .is_ok_and(|s| matches!(s, Search::Counted));
        let searches =
            usize::from(self.searching) + usize::from(claimed) + usize::from(counted_early);
        if searches > 0 {
            pool.searching.fetch_sub(searches, Ordering::SeqCst);
        }
        if self.placed {
            pool.threads.fetch_sub(1, Ordering::SeqCst);
        }
        // A spawner may have left its job to this thread (it searched, or it held the last place):
        // the other half of the spawner's Dekker pair, as a thread that leaves after its keep-alive.
        fence(Ordering::SeqCst);
        // If no thread can start, the job waits for the next spawn, whose spawner then finds the
        // pool empty and reports it (see `no_thread_started`).
        let _ = pool.wake_if_unsearched();
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
pub(crate) fn closure_returned() {
    crate::group::with_current(|g| {
        if let Some(g) = g {
            charge_cpu(g);
        }
    });
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

#[cfg(not(loom))]
thread_local! {
    /// The pool of the thread (its `Share`) and the thread's CPU time at its last reading: set
    /// while a pool thread serves (see `share`, *Charging*).
    static METER: Cell<(*const Share, Option<u64>)> = const { Cell::new((std::ptr::null(), None)) };
}

/// Marks this thread as serving a pool while it lives: closures' CPU time is charged from here.
struct Meter;

impl Meter {
    fn start(share: &Share) -> Meter {
        #[cfg(not(loom))]
        {
            let cpu = crate::fair::segment::thread_cpu_ns();
            let _ = METER.try_with(|m| m.set((share as *const Share, cpu)));
            crate::fair::segment::set_metered(true);
        }
        #[cfg(loom)]
        let _ = share;
        Meter
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        {
            let _ = METER.try_with(|m| m.set((std::ptr::null(), None)));
            crate::fair::segment::set_metered(false);
        }
    }
}

/// Reads this pool thread's CPU clock: the closure about to run is charged from here.
fn mark_cpu() {
    #[cfg(not(loom))]
    let _ = METER.try_with(|m| {
        let (share, _) = m.get();
        if !share.is_null() {
            m.set((share, crate::fair::segment::thread_cpu_ns()));
        }
    });
}

/// Charges the CPU time this pool thread burned since its last reading to `group` (see `share`,
/// *Charging*). Nothing on a thread that serves no pool, or without a thread CPU clock.
fn charge_cpu(group: &Arc<GroupInner>) {
    #[cfg(not(loom))]
    let _ = METER.try_with(|m| {
        let (share, last) = m.get();
        if share.is_null() {
            return;
        }
        let Some(now) = crate::fair::segment::thread_cpu_ns() else {
            return;
        };
        m.set((share, Some(now)));
        if let Some(last) = last {
            // SAFETY: `share` is the `Share` of the pool whose `serve` runs on this thread (it holds
            // an `Arc` of the pool); its `Meter` resets the cell before `serve` returns or unwinds.
            unsafe { &*share }.charge(group, now.saturating_sub(last));
        }
    });
    #[cfg(loom)]
    let _ = group;
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A job that unwinds out of `run` (after counting its thread searching again, as a returned
    /// closure does, if `early`), or one that sends `1` on its channel.
    enum TestJob {
        Unwind { early: bool },
        Send(mpsc::Sender<u32>),
    }

    impl Job for TestJob {
        fn run(self) {
            match self {
                TestJob::Unwind { early } => {
                    if early {
                        closure_returned();
                    }
                    panic!("a job unwound out of its pool thread");
                }
                TestJob::Send(tx) => {
                    let _ = tx.send(1);
                }
            }
        }
    }

    fn all_finished(pool: &Pool<TestJob>) -> bool {
        lock(&pool.handles).iter().all(finished)
    }

    #[test]
    fn a_spawn_no_thread_can_serve_panics_and_drops_its_job() {
        // A stack no system can map: every thread start fails.
        let pool = Arc::new(
            Pool::new(4, Duration::from_secs(60), "nostart".into()).with_stack_size(Some(1 << 45)),
        );
        let (tx, rx) = mpsc::channel();
        let spawn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.schedule(TestJob::Send(tx))
        }));
        let msg = spawn.expect_err("the spawn returned as if a thread would run its job");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("could not start a thread"),
            "unclear message: {msg:?}"
        );
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Err(mpsc::RecvTimeoutError::Disconnected),
            "the job stayed queued with no thread to run it"
        );
        assert_eq!(pool.threads(), 0);
        pool.close();
        pool.join(None);
    }

    #[test]
    fn a_thread_whose_loop_unwinds_leaves_the_pool_serving() {
        for early in [false, true] {
            let pool = Arc::new(Pool::new(1, Duration::from_secs(60), "unwind".into()));
            pool.schedule(TestJob::Unwind { early });
            let start = Instant::now();
            while !all_finished(&pool) && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(all_finished(&pool), "the thread did not end");
            assert_eq!(
                pool.threads(),
                0,
                "the dead thread kept its place (early: {early})"
            );
            let (tx, rx) = mpsc::channel();
            pool.schedule(TestJob::Send(tx));
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(10)),
                Ok(1),
                "no thread ran the next job (early: {early})"
            );
            pool.close();
            pool.join(None);
        }
    }
}
