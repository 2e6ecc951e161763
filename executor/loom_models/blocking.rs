//! loom models of the blocking pool's own protocol, driving the runtime's pool (`blocking/pool.rs`)
//! with jobs of their own: a job is never lost whatever the pool's threads are doing (searching,
//! going to wait, leaving after their keep-alive), a burst of jobs that wait for one another gets a
//! thread each, and shutdown against a concurrent spawn runs or drops the job exactly once and
//! leaves no thread behind.
//!
//! A job that is lost shows as a deadlock: the model's main thread waits for it on a condition
//! variable, and loom reports the execution in which every thread is blocked.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models::blocking`.
use std::time::Duration;

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use crate::blocking::pool::{Job, Pool as BlockingPool, closure_returned};

// Bounded: unbounded, the pool's lock-free queues give more interleavings than a run can visit.
use super::{FOREVER, model_bounded};

/// What the jobs of a model report: how many ran, how many were dropped unrun.
#[derive(Default)]
struct Log {
    counts: Mutex<(usize, usize)>,
    changed: Condvar,
}

impl Log {
    fn record(&self, ran: bool) {
        let mut c = self.counts.lock().unwrap();
        if ran {
            c.0 += 1;
        } else {
            c.1 += 1;
        }
        self.changed.notify_all();
    }

    /// Waits until `n` jobs have run.
    fn wait_ran(&self, n: usize) {
        let mut c = self.counts.lock().unwrap();
        while c.0 < n {
            c = self.changed.wait(c).unwrap();
        }
    }

    /// Waits until `n` jobs have run or been dropped.
    fn wait_done(&self, n: usize) -> (usize, usize) {
        let mut c = self.counts.lock().unwrap();
        while c.0 + c.1 < n {
            c = self.changed.wait(c).unwrap();
        }
        *c
    }
}

/// A job that records whether it ran or was dropped unrun (a cancelled task).
struct Probe {
    log: Arc<Log>,
    /// Runs inside the job, before it counts as run.
    body: Option<Box<dyn FnOnce() + Send>>,
    /// Count the thread as searching as soon as the body returns, as a blocking task does.
    early: bool,
    done: bool,
}

impl Probe {
    fn new(log: &Arc<Log>) -> Self {
        Self::early(log, false)
    }

    /// A probe that counts its thread searching as its body returns if `early`.
    fn early(log: &Arc<Log>, early: bool) -> Self {
        Probe {
            log: log.clone(),
            body: None,
            early,
            done: false,
        }
    }
}

impl Job for Probe {
    fn run(mut self) {
        if let Some(body) = self.body.take() {
            body();
        }
        if self.early {
            closure_returned();
        }
        self.done = true;
        self.log.record(true);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.done {
            self.log.record(false);
        }
    }
}

/// A pool of at most `max_threads` threads and the log its jobs will report to.
fn pool(
    max_threads: usize,
    keep_alive: Duration,
) -> (std::sync::Arc<BlockingPool<Probe>>, Arc<Log>) {
    let pool = BlockingPool::new(max_threads, keep_alive, "m".to_string());
    (std::sync::Arc::new(pool), Arc::new(Log::default()))
}

/// Closes the pool and joins its threads; then no thread is left, and none counts as searching.
fn shut_down(pool: &BlockingPool<Probe>) {
    pool.close();
    pool.join(None);
    assert_eq!(pool.threads(), 0, "a thread kept its place after shutdown");
    assert_eq!(pool.searching(), 0, "a search was counted and never ended");
}

/// One thread runs a job and then searches, waits, or (with a zero keep-alive) leaves, while a
/// second job is spawned: the second job always runs. With one thread at most, a spawner that finds
/// the pool full relies on the thread that is leaving to look at the queue once more.
#[test]
fn a_job_spawned_while_the_thread_goes_idle_or_leaves_is_never_lost() {
    for (keep_alive, early) in [
        (Duration::ZERO, false),
        (Duration::ZERO, true),
        (FOREVER, false),
        (FOREVER, true),
    ] {
        model_bounded(move || {
            let (pool, log) = pool(1, keep_alive);
            for _ in 0..2 {
                pool.schedule(Probe::early(&log, early));
            }
            log.wait_ran(2);
            shut_down(&pool);
        });
    }
}

/// Two jobs that each wait for the other need two threads at once: the spawner wakes one thread,
/// and the searcher that takes the first job while the second waits must add a thread (the
/// ramp-up), or both jobs wait forever.
#[test]
fn jobs_that_wait_for_each_other_get_a_thread_each() {
    model_bounded(|| {
        let (pool, log) = pool(2, FOREVER);
        let arrived = Arc::new((Mutex::new(0usize), Condvar::new()));
        for _ in 0..2 {
            let mut job = Probe::new(&log);
            let arrived = arrived.clone();
            job.body = Some(Box::new(move || {
                let (m, cv) = &*arrived;
                let mut n = m.lock().unwrap();
                *n += 1;
                cv.notify_all();
                while *n < 2 {
                    n = cv.wait(n).unwrap();
                }
            }));
            pool.schedule(job);
        }
        log.wait_ran(2);
        shut_down(&pool);
    });
}

/// Shutdown races a spawn from another thread while the pool's only thread waits: the job either
/// runs or is dropped unrun (its handle would resolve cancelled), exactly once, and every thread
/// exits (a thread left waiting would make `join` deadlock).
#[test]
fn shutdown_against_a_concurrent_spawn_runs_or_drops_the_job_once() {
    model_bounded(|| {
        let (pool, log) = pool(1, FOREVER);
        // A thread that has run a job and waits (or is about to).
        pool.schedule(Probe::new(&log));
        log.wait_ran(1);
        let spawner = {
            let (pool, log) = (pool.clone(), log.clone());
            thread::spawn(move || pool.schedule(Probe::new(&log)))
        };
        pool.close();
        spawner.join().unwrap();
        pool.join(None);
        let (ran, dropped) = log.wait_done(2);
        assert_eq!(ran + dropped, 2, "a job ran twice, or was run and dropped");
        assert!(ran >= 1);
        assert_eq!(pool.threads(), 0);
        assert_eq!(pool.searching(), 0);
    });
}

/// Two spawners race each other and the pool's one thread, which may be between two jobs: both
/// jobs run (a spawner that saw a searcher woke nobody; the searcher must find its job).
#[test]
fn two_spawners_and_a_searching_thread_lose_no_job() {
    model_bounded(|| {
        let (pool, log) = pool(1, FOREVER);
        let other = {
            let (pool, log) = (pool.clone(), log.clone());
            thread::spawn(move || pool.schedule(Probe::new(&log)))
        };
        pool.schedule(Probe::new(&log));
        other.join().unwrap();
        log.wait_ran(2);
        shut_down(&pool);
    });
}

/// One closure at a time (a `spawn_blocking(..).await` loop): the pool's thread, counted searching
/// as its job's closure returned, goes to wait while the next job is spawned. Whichever of the two
/// sees the other, the thread that waits is the one that runs the job: no second thread starts.
#[test]
fn a_job_spawned_as_the_only_thread_goes_to_wait_starts_no_second_thread() {
    model_bounded(|| {
        let (pool, log) = pool(2, FOREVER);
        for n in 1..=2 {
            pool.schedule(Probe::early(&log, true));
            log.wait_ran(n);
        }
        assert_eq!(
            pool.threads(),
            1,
            "a second thread started for one job at a time"
        );
        shut_down(&pool);
    });
}

/// Two jobs spawned back to back: the spawner of the second and the thread that takes the first
/// (the last searcher, which then wakes one more thread for what waits) may both see the second
/// job with nobody searching. One of them wakes a thread for it, not both: two threads at most.
#[test]
fn a_spawner_and_the_searcher_that_ramps_up_wake_one_thread_between_them() {
    model_bounded(|| {
        let (pool, log) = pool(3, FOREVER);
        for _ in 0..2 {
            pool.schedule(Probe::new(&log));
        }
        log.wait_ran(2);
        assert!(
            pool.threads() <= 2,
            "{} threads started for two jobs",
            pool.threads()
        );
        shut_down(&pool);
    });
}
