//! 1,000 tasks × 1,000 operations on rondo's own runtime, checking invariants only: a writer never
//! shares the lock with anyone, a semaphore never has more holders than permits, and every final count
//! is exact. Some waits are cancelled on purpose (by dropping half-polled acquire futures). Run for the
//! fair primitives and for bounded-barging ones with a bound short enough (20 µs) that they switch
//! between barging and hand-off all the time. Then a few tasks with long holds on a barging lock, on
//! 1, 2, 4 and 8 workers, where woken waiters are often still on their way when the next release
//! comes.
#![cfg(not(loom))]

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rondo::sync::{AsyncOneManyLock, Semaphore};

// Scaled down under Miri; OPS stays a multiple of 10 (the op mix repeats every 10).
const TASKS: usize = if cfg!(miri) { 10 } else { 1_000 };
const OPS: usize = if cfg!(miri) { 100 } else { 1_000 };
const PERMITS: usize = 8;

struct Shared {
    lock: AsyncOneManyLock<u64>,
    sem: Semaphore,
    readers_inside: AtomicUsize,
    writers_inside: AtomicUsize,
    permit_holders: AtomicUsize,
}

/// Polls `f` once and drops it: a cancelled wait if it was pending.
fn poll_once_and_drop<F: Future>(f: F) {
    let mut f = pin!(f);
    let waker = futures::task::noop_waker();
    let _ = f.as_mut().poll(&mut Context::from_waker(&waker));
}

async fn worker(s: Arc<Shared>, task: usize) -> (u64, u64) {
    let (mut writes, mut sem_ops) = (0u64, 0u64);
    for op in 0..OPS {
        match (task * 7 + op) % 10 {
            0 => {
                let mut g = s.lock.exclusive().await;
                assert_eq!(
                    s.writers_inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two writers"
                );
                assert_eq!(
                    s.readers_inside.load(Ordering::SeqCst),
                    0,
                    "reader during a write"
                );
                *g += 1;
                writes += 1;
                if op % 100 == 0 {
                    rondo::yield_now().await; // hold the lock across a suspension
                }
                assert_eq!(
                    s.readers_inside.load(Ordering::SeqCst),
                    0,
                    "reader during a write"
                );
                s.writers_inside.fetch_sub(1, Ordering::SeqCst);
            }
            1 => {
                let p = s.sem.acquire_many(2).await.unwrap();
                let now = s.permit_holders.fetch_add(2, Ordering::SeqCst) + 2;
                assert!(now <= PERMITS, "{now} permits in use of {PERMITS}");
                s.permit_holders.fetch_sub(2, Ordering::SeqCst);
                drop(p);
                sem_ops += 1;
            }
            4 if op % 2 == 0 => {
                // An upgradable hold reads alongside readers, then becomes the writer.
                let up = s.lock.upgradable().await;
                assert_eq!(
                    s.writers_inside.load(Ordering::SeqCst),
                    0,
                    "upgradable during a write"
                );
                let before = *up;
                let mut g = up.upgrade().await;
                assert_eq!(*g, before, "a writer got in during the upgrade");
                assert_eq!(
                    s.writers_inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two writers"
                );
                assert_eq!(s.readers_inside.load(Ordering::SeqCst), 0);
                *g += 1;
                writes += 1;
                s.writers_inside.fetch_sub(1, Ordering::SeqCst);
            }
            2 if op % 3 == 0 => {
                // Cancel waits part-way: queued, maybe granted, then dropped.
                poll_once_and_drop(s.lock.exclusive());
                poll_once_and_drop(s.sem.acquire());
                let g = s.lock.shared().await;
                assert_eq!(s.writers_inside.load(Ordering::SeqCst), 0);
                drop(g);
            }
            3 => {
                let p = s.sem.acquire().await.unwrap();
                let now = s.permit_holders.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= PERMITS, "{now} permits in use of {PERMITS}");
                s.permit_holders.fetch_sub(1, Ordering::SeqCst);
                drop(p);
                sem_ops += 1;
            }
            _ => {
                let g = s.lock.shared().await;
                s.readers_inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(
                    s.writers_inside.load(Ordering::SeqCst),
                    0,
                    "reader during a write"
                );
                let _ = *g;
                s.readers_inside.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
    (writes, sem_ops)
}

fn thousand_tasks_thousand_ops(lock: AsyncOneManyLock<u64>, sem: Semaphore) {
    let s = Arc::new(Shared {
        lock,
        sem,
        readers_inside: AtomicUsize::new(0),
        writers_inside: AtomicUsize::new(0),
        permit_holders: AtomicUsize::new(0),
    });
    // A runtime of its own (not the global one), so its worker threads end with the test.
    let rt = rondo::Runtime::new().unwrap();
    let (writes, sem_ops) = rt.block_on(async {
        let handles: Vec<_> = (0..TASKS)
            .map(|t| rondo::spawn(worker(s.clone(), t)))
            .collect();
        let (mut w, mut n) = (0, 0);
        for h in handles {
            let (a, b) = h.await.expect("task panicked");
            w += a;
            n += b;
        }
        (w, n)
    });
    // Every task does OPS/10 plain writes, OPS/20 upgrades and 2*OPS/10 semaphore operations.
    assert_eq!(writes, (TASKS * (OPS / 10 + OPS / 20)) as u64);
    assert_eq!(sem_ops, (2 * TASKS * OPS / 10) as u64);
    assert_eq!(*s.lock.try_shared().unwrap(), writes);
    assert_eq!(s.sem.available_permits(), PERMITS);
    assert!(s.lock.try_exclusive().is_some(), "lock leaked");
    assert!(s.lock.try_upgradable().is_some(), "upgradable hold leaked");
    assert!(matches!(
        pin!(s.lock.exclusive()).poll(&mut Context::from_waker(&futures::task::noop_waker())),
        Poll::Ready(_)
    ));
}

#[test]
fn thousand_tasks_thousand_ops_on_rondo() {
    thousand_tasks_thousand_ops(AsyncOneManyLock::new(0), Semaphore::new(PERMITS));
}

#[test]
fn thousand_tasks_thousand_ops_barging() {
    let bound = Duration::from_micros(20);
    thousand_tasks_thousand_ops(
        AsyncOneManyLock::with_barging(0, bound),
        Semaphore::with_barging(PERMITS, bound),
    );
}

/// Busy work for about `n` loop turns.
fn spin(n: u64) {
    for i in 0..n {
        std::hint::black_box(i);
    }
}

/// Ten tasks, half their operations writes, holds of a few microseconds (some across a yield), on a
/// barging lock: releases keep arriving while woken waiters are on their way, with bounds that
/// expire all the time, now and then, and almost never. Checks that readers and writers never
/// overlap, that no write is lost, and that nothing hangs (a lost wake-up would leave every task
/// waiting).
#[test]
#[cfg_attr(
    miri,
    ignore = "minutes under Miri; the loom models cover the protocol"
)]
fn barging_lock_few_tasks_long_holds_on_1_2_4_8_workers() {
    const OPS: u64 = 300;
    for workers in [1, 2, 4, 8] {
        for bound in [5, 50, 1_000].map(Duration::from_micros) {
            let rt = rondo::Runtime::builder()
                .worker_threads(workers)
                .build()
                .unwrap();
            let lock = Arc::new(AsyncOneManyLock::with_barging(0u64, bound));
            let inside = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..10u64)
                .map(|t| {
                    let (lock, inside) = (lock.clone(), inside.clone());
                    rt.spawn(async move {
                        for op in 0..OPS {
                            if (op + t) % 2 == 0 {
                                let mut g = lock.exclusive().await;
                                assert_eq!(
                                    inside.fetch_add(1_000, Ordering::SeqCst),
                                    0,
                                    "a writer shared the lock"
                                );
                                *g += 1;
                                spin((op * 37 + t) % 3_000);
                                if op % 50 == 0 {
                                    rondo::yield_now().await;
                                }
                                inside.fetch_sub(1_000, Ordering::SeqCst);
                            } else {
                                let g = lock.shared().await;
                                assert!(
                                    inside.fetch_add(1, Ordering::SeqCst) < 1_000,
                                    "a reader met a writer"
                                );
                                std::hint::black_box(*g);
                                spin((op * 13 + t) % 2_000);
                                if op % 70 == 0 {
                                    rondo::yield_now().await;
                                }
                                inside.fetch_sub(1, Ordering::SeqCst);
                            }
                        }
                    })
                })
                .collect();
            let (done, finished) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                rt.block_on(async {
                    for t in tasks {
                        t.await.expect("task panicked");
                    }
                });
                let _ = done.send(());
            });
            finished
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("hung: {workers} workers, bound {bound:?}"));
            waiter.join().unwrap();
            assert_eq!(*lock.try_shared().unwrap(), 10 * OPS / 2);
            assert!(lock.try_exclusive().is_some(), "lock leaked");
        }
    }
}
