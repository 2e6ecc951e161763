//! 1,000 tasks × 1,000 operations on rondo's own runtime, checking invariants only: a writer never
//! shares the lock with anyone, a semaphore never has more holders than permits, and every final count
//! is exact. Some waits are cancelled on purpose (by dropping half-polled acquire futures).
#![cfg(not(loom))]

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

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

#[test]
fn thousand_tasks_thousand_ops_on_rondo() {
    let s = Arc::new(Shared {
        lock: AsyncOneManyLock::new(0),
        sem: Semaphore::new(PERMITS),
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
    // Every task does exactly OPS/10 writes and 2*OPS/10 semaphore operations.
    assert_eq!(writes, (TASKS * OPS / 10) as u64);
    assert_eq!(sem_ops, (2 * TASKS * OPS / 10) as u64);
    assert_eq!(*s.lock.try_shared().unwrap(), writes);
    assert_eq!(s.sem.available_permits(), PERMITS);
    assert!(s.lock.try_exclusive().is_some(), "lock leaked");
    assert!(matches!(
        pin!(s.lock.exclusive()).poll(&mut Context::from_waker(&futures::task::noop_waker())),
        Poll::Ready(_)
    ));
}
