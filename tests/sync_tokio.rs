//! The primitives are runtime-agnostic: the same invariants hold under tokio's multi-thread runtime,
//! including when waits are cancelled by `tokio::time::timeout` and `select!`.
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rondo::sync::{AsyncOneManyLock, Semaphore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_semaphore_under_tokio_with_cancellation() {
    let lock = Arc::new(AsyncOneManyLock::new(0u64));
    let sem = Arc::new(Semaphore::new(3));
    let readers = Arc::new(AtomicUsize::new(0));
    let holders = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let (lock, sem, readers, holders) =
            (lock.clone(), sem.clone(), readers.clone(), holders.clone());
        tasks.push(tokio::spawn(async move {
            let mut writes = 0u64;
            for i in 0..500u64 {
                if (i + t) % 5 == 0 {
                    let mut g = lock.exclusive().await;
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "reader during a write");
                    *g += 1;
                    writes += 1;
                    if i % 50 == 0 {
                        tokio::task::yield_now().await; // hold across an await
                    }
                } else {
                    let g = lock.shared().await;
                    readers.fetch_add(1, Ordering::SeqCst);
                    let _ = *g;
                    readers.fetch_sub(1, Ordering::SeqCst);
                }
                // Cancelled waits: a zero timeout drops pending acquires at random points.
                if i % 7 == 0 {
                    let _ = tokio::time::timeout(Duration::ZERO, lock.exclusive()).await;
                    let _ = tokio::time::timeout(Duration::ZERO, sem.acquire_many(2)).await;
                }
                let p = sem.acquire().await.unwrap();
                assert!(holders.fetch_add(1, Ordering::SeqCst) < 3);
                tokio::task::yield_now().await;
                holders.fetch_sub(1, Ordering::SeqCst);
                drop(p);
            }
            writes
        }));
    }
    let mut expected = 0;
    for t in tasks {
        expected += t.await.unwrap();
    }
    assert_eq!(*lock.shared().await, expected);
    assert_eq!(sem.available_permits(), 3);
    // Nothing leaked: both are free again.
    assert!(lock.try_exclusive().is_some());
    assert_eq!(sem.try_acquire_many(3).unwrap().count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_cancellation_keeps_the_line_moving() {
    let lock = Arc::new(AsyncOneManyLock::new(()));
    let guard = lock.shared().await;
    let w = lock.clone();
    let writer = tokio::spawn(async move {
        drop(w.exclusive().await);
    });
    // Wait until the writer is queued: newcomers can then no longer get a shared hold.
    while lock.try_shared().is_some() {
        tokio::task::yield_now().await;
    }
    writer.abort(); // cancel the queued writer
    let _ = writer.await;
    // The reader behind the cancelled writer is admitted although `guard` still holds the lock.
    let r = tokio::select! {
        r = lock.shared() => r,
    };
    drop((r, guard));
    assert!(lock.try_exclusive().is_some());
}
