//! Where readiness wakes are dispatched with the `io` feature: on the worker sleeping in the
//! reactor, not on async-io's fallback thread; and what a dropped runtime leaves in the reactor.
//! In a file of its own: async-io has one reactor per process, and the runtimes of other tests
//! would compete for it (and make its passes).
#![cfg(not(any(loom, miri)))]

mod common;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use async_io::Async;
use common::{builder, eventually, watchdog};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

const MS: Duration = Duration::from_millis(1);

/// Wraps a future's waker so that every wake records the name of the thread it happens on.
struct RecordWakes<F> {
    fut: Pin<Box<F>>,
    names: Arc<Mutex<Vec<String>>>,
}

struct Recorder {
    inner: Waker,
    names: Arc<Mutex<Vec<String>>>,
}

impl Wake for Recorder {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.names.lock().unwrap().push(name);
        self.inner.wake_by_ref();
    }
}

impl<F: Future> Future for RecordWakes<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let waker = Waker::from(Arc::new(Recorder {
            inner: cx.waker().clone(),
            names: self.names.clone(),
        }));
        self.fut.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

/// A future whose every poll first keeps its thread for `.0`.
struct SlowPolls<F>(Duration, Pin<Box<F>>);

impl<F: Future> Future for SlowPolls<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if !self.0.is_zero() {
            std::thread::sleep(self.0);
        }
        self.1.as_mut().poll(cx)
    }
}

/// The index of the first wake `dispatch_names` recorded on a worker; panics if there is none.
fn first_wake_on_a_worker(workers: usize, names: &[String]) -> usize {
    let Some(first) = names.iter().position(|n| n.starts_with("io-wake")) else {
        panic!("{workers} workers: no readiness wake on a worker: {names:?}");
    };
    first
}

/// The tests of this file run one at a time: two runtimes would compete for the one reactor.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A task awaits a readable socket `rounds` times while the workers are idle; a foreign thread
/// writes to the peer every `spacing`; every poll of the task keeps its worker's thread for
/// `work` more (a slow machine). Returns the names of the threads the wakes happened on.
fn dispatch_names(workers: usize, spacing: Duration, rounds: usize, work: Duration) -> Vec<String> {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(60, move || {
        let rt = builder(workers).thread_name("io-wake").build().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut ack = [0u8; 1];
            for i in 0..rounds {
                std::thread::sleep(spacing);
                s.write_all(&[i as u8]).unwrap();
                s.read_exact(&mut ack).unwrap();
            }
        });
        let names = Arc::new(Mutex::new(Vec::new()));
        let n = names.clone();
        rt.block_on(rt.spawn(SlowPolls(
            work,
            Box::pin(async move {
                let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
                let mut b = [0u8; 1];
                for _ in 0..rounds {
                    let readable = RecordWakes {
                        fut: Box::pin(s.readable()),
                        names: n.clone(),
                    };
                    readable.await.unwrap();
                    s.read_exact(&mut b).await.unwrap();
                    s.write_all(&b).await.unwrap();
                }
            }),
        )))
        .unwrap();
        peer.join().unwrap();
        names.lock().unwrap().clone()
    })
}

/// A task awaits a readable socket while the workers are idle; a foreign thread writes to the
/// peer. The wake must come from the worker sleeping in the reactor, not from async-io's thread.
#[test]
fn readiness_wakes_are_dispatched_on_a_worker_when_workers_are_idle() {
    const ROUNDS: usize = 40;
    for workers in [1, 2, 4] {
        // Long enough for every worker to park, short enough that async-io's thread keeps
        // backing off instead of queueing for the reactor.
        let names = dispatch_names(workers, 2 * MS, ROUNDS, Duration::ZERO);
        let on_workers = names.iter().filter(|n| n.starts_with("io-wake")).count();
        eprintln!(
            "{workers} workers: {on_workers} of {} wakes on a worker",
            names.len()
        );
        // async-io's thread may hold the reactor when the keeper first parks (it queues for the
        // lock after a quiet stretch), and keeps it until the keeper wins it back between two of
        // its passes: on a slow, sanitized run the first 23 of 40 wakes were its own, the 17
        // after all the keeper's. So the wakes are judged from the keeper's first dispatch on,
        // and that must come with room to judge; from it on, a loaded machine may still delay a
        // worker past async-io's back-off: most, not all.
        let first = first_wake_on_a_worker(workers, &names);
        assert!(
            first * 4 <= names.len() * 3,
            "{workers} workers: the first wake on a worker came only after {first} of {}: \
             {names:?}",
            names.len()
        );
        let after = &names[first..];
        let on_workers_after = after.iter().filter(|n| n.starts_with("io-wake")).count();
        assert!(
            on_workers_after * 2 > after.len(),
            "{workers} workers: {on_workers_after} of the {} readiness wakes from the keeper's \
             first on were on a worker: {names:?}",
            after.len()
        );
    }
}

/// Light load: a readiness event every 25 ms, longer than async-io's fallback thread backs off
/// before it queues for the reactor's lock. While I/O is recent the keeper wakes every few
/// milliseconds, so that thread keeps backing off and the keeper keeps the reactor: the wakes
/// come from a worker. (Before, the fallback thread took the reactor whenever the keeper left it
/// to run a request, and dispatched a third of the wakes: 8 or 9 of 26 or 27 here.)
#[test]
fn under_light_load_the_keeper_keeps_the_reactor() {
    const ROUNDS: usize = 20;
    for workers in [1, 2] {
        let names = dispatch_names(workers, 25 * MS, ROUNDS, Duration::ZERO);
        // The first wakes may be async-io's, until a reactor wake of the keeper's wins the
        // reactor from that thread (one on a quiet machine; 7 of 23 were in one run on a slow,
        // loaded one).
        assert_the_keeper_keeps_the_reactor(workers, &names, "");
    }
}

/// async-io's fallback thread holds the reactor when the runtime starts (with no `block_on` in
/// the process it takes the reactor at once), and each request keeps its worker for a
/// millisecond, longer than that thread backs off after a pass (50 µs): it retakes the reactor
/// every time the keeper leaves it to run a request. The wakes it dispatches wake the keeper,
/// which then wakes at least every few milliseconds as while it dispatches I/O itself: one of
/// those wakes, with nothing to run, retries the reactor before the fallback thread does, and
/// from then on the keeper keeps it. (Before, only the keeper's own dispatch counted as I/O: it
/// slept until the next request, lost the reactor at every one, and the fallback thread
/// dispatched every wake here; a slow sanitized run saw the same with requests of no work.)
#[test]
fn the_keeper_wins_the_reactor_back_from_async_io_thread() {
    const ROUNDS: usize = 20;
    for workers in [1, 2] {
        {
            let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            // Starts the reactor (and async-io's thread) if no test has yet, then leaves it to
            // that thread for a while with no runtime in the process.
            drop(Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap());
            std::thread::sleep(30 * MS);
        }
        let names = dispatch_names(workers, 25 * MS, ROUNDS, MS);
        assert_the_keeper_keeps_the_reactor(workers, &names, ", a request keeping the worker 1 ms");
    }
}

/// Checks the wakes `dispatch_names` recorded: a worker dispatched one within the first half, and
/// async-io's thread at most one in five from that one on.
fn assert_the_keeper_keeps_the_reactor(workers: usize, names: &[String], what: &str) {
    let on_fallback = names.iter().filter(|n| *n == "async-io").count();
    eprintln!(
        "{workers} workers: {on_fallback} of {} wakes on async-io's thread{what}",
        names.len()
    );
    let first = first_wake_on_a_worker(workers, names);
    assert!(
        first * 2 <= names.len(),
        "{workers} workers: the first wake on a worker came only after {first} of {}: {names:?}",
        names.len()
    );
    let after = &names[first..];
    let fallback_after = after.iter().filter(|n| *n == "async-io").count();
    assert!(
        fallback_after * 5 <= after.len(),
        "{workers} workers: {fallback_after} of the {} readiness wakes from the keeper's first on \
         were on async-io's thread: {names:?}",
        after.len()
    );
}

/// A runtime dropped while a task waits on an async-io `Timer` frees its state at once. The task's
/// drop deregisters the timer, but async-io applies a removal only at its reactor's next pass and
/// does not wake the reactor for it, so the task's waker, which holds the runtime, stayed in the
/// reactor's timer list until something else woke it: in an idle process, the timer's deadline
/// (an hour here). Alone in the process, or another test's I/O would make that pass.
#[test]
fn a_runtime_dropped_with_an_async_io_timer_pending_frees_its_state() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for workers in [1, 2] {
        watchdog(30, move || {
            // Captured by the runtime: released when the runtime's state is freed.
            let witness = Arc::new(());
            let held = witness.clone();
            let rt = builder(workers)
                .on_task_panic(move |_| {
                    let _ = &held;
                })
                .build()
                .unwrap();
            let started = Arc::new(AtomicBool::new(false));
            let s = started.clone();
            rt.spawn(async move {
                s.store(true, Ordering::SeqCst);
                async_io::Timer::after(Duration::from_secs(3600)).await;
            });
            assert!(eventually(10, || started.load(Ordering::SeqCst)));
            // Every worker parks; the reactor's holder sleeps until the hour's timer is due.
            std::thread::sleep(50 * MS);
            drop(rt);
            assert!(
                eventually(5, || Arc::strong_count(&witness) == 1),
                "{workers} workers: the runtime's state outlived it"
            );
        });
    }
}
