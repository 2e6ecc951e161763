//! Behaviour of `Semaphore`: FIFO hand-off, exact wake counts, `acquire_many`, `close`, `forget`,
//! cancellation. Futures are polled by hand with counting wakers; no assertion depends on time.
#![cfg(not(loom))]

mod common;

use common::Probe;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rondo::sync::{AcquireError, Semaphore, TryAcquireError};

#[test]
fn acquire_and_try_acquire() {
    let sem = Semaphore::new(2);
    let a = sem.try_acquire().unwrap();
    let b = futures::executor::block_on(sem.acquire()).unwrap();
    assert_eq!(sem.available_permits(), 0);
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    assert_eq!((a.count(), b.count()), (1, 1));
    drop(a);
    assert_eq!(sem.available_permits(), 1);
    drop(b);
    assert_eq!(sem.available_permits(), 2);
}

#[test]
fn n_releases_wake_n_waiters_each_once() {
    releases_wake_as_many_waiters_as_they_free_permits(Semaphore::new(3));
}

/// In barging mode the releases wake (rather than grant) the same waiters, each once.
#[test]
fn barging_releases_wake_n_waiters_each_once() {
    let bound = std::time::Duration::from_secs(3600);
    releases_wake_as_many_waiters_as_they_free_permits(Semaphore::with_barging(3, bound));
}

fn releases_wake_as_many_waiters_as_they_free_permits(sem: Semaphore) {
    let held: Vec<_> = (0..3).map(|_| sem.try_acquire().unwrap()).collect();
    let mut waiters: Vec<_> = (0..5).map(|_| Probe::new(sem.acquire())).collect();
    for w in &mut waiters {
        w.pending();
    }
    // Two back-to-back releases, no poll in between, must wake two distinct waiters (async-lock #18).
    let mut held = held.into_iter();
    drop(held.next());
    drop(held.next());
    let wakes: Vec<_> = waiters.iter().map(Probe::wakes).collect();
    assert_eq!(wakes, [1, 1, 0, 0, 0]);
    let p0 = waiters[0].ready().unwrap();
    let p1 = waiters[1].ready().unwrap();
    for w in &mut waiters[2..] {
        w.pending();
    }
    // add_permits(2) wakes exactly the next two.
    sem.add_permits(2);
    let wakes: Vec<_> = waiters.iter().map(Probe::wakes).collect();
    assert_eq!(wakes, [1, 1, 1, 1, 0]);
    let p2 = waiters[2].ready().unwrap();
    let p3 = waiters[3].ready().unwrap();
    waiters[4].pending();
    assert_eq!(sem.available_permits(), 0);
    drop((p0, p1, p2, p3));
    assert_eq!(waiters[4].wakes(), 1);
    let p4 = waiters[4].ready().unwrap();
    drop(p4);
    drop(held);
    assert_eq!(sem.available_permits(), 5);
}

#[test]
fn acquire_many_is_not_starved_by_acquire_one() {
    let sem = Semaphore::new(4);
    let held: Vec<_> = (0..4).map(|_| sem.try_acquire().unwrap()).collect();
    let mut big = Probe::new(sem.acquire_many(3));
    big.pending();
    let mut small: Vec<_> = (0..10).map(|_| Probe::new(sem.acquire())).collect();
    for s in &mut small {
        s.pending();
    }
    let mut held = held.into_iter();
    drop(held.next());
    // One permit is free, but the head wants three: nobody behind may take it.
    assert_eq!(sem.available_permits(), 1);
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    for s in &mut small {
        s.pending();
        assert_eq!(s.wakes(), 0);
    }
    drop(held.next());
    assert_eq!(big.wakes(), 0);
    drop(held.next());
    assert_eq!(big.wakes(), 1);
    let permit = big.ready().unwrap();
    assert_eq!(permit.count(), 3);
    assert_eq!(sem.available_permits(), 0);
    drop(held.next());
    assert_eq!(small[0].wakes(), 1);
    assert!(small[1..].iter().all(|s| s.wakes() == 0));
    drop(permit);
    let wakes: Vec<_> = small.iter().map(Probe::wakes).collect();
    assert_eq!(wakes, [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn cancelling_the_head_lets_smaller_requests_through() {
    let sem = Semaphore::new(2);
    let p = sem.try_acquire().unwrap();
    let mut big = Probe::new(sem.acquire_many(2));
    big.pending();
    let mut small = Probe::new(sem.acquire());
    small.pending();
    drop(big);
    assert_eq!(small.wakes(), 1);
    let q = small.ready().unwrap();
    drop((p, q));
    assert_eq!(sem.available_permits(), 2);
}

#[test]
fn a_granted_but_dropped_waiter_passes_its_permits_on() {
    let sem = Semaphore::new(1);
    let p = sem.try_acquire().unwrap();
    let mut a = Probe::new(sem.acquire());
    let mut b = Probe::new(sem.acquire());
    a.pending();
    b.pending();
    drop(p);
    assert_eq!((a.wakes(), b.wakes()), (1, 0));
    drop(a);
    assert_eq!(b.wakes(), 1);
    drop(b.ready().unwrap());
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn close_fails_waiters_and_later_acquires() {
    let sem = Semaphore::new(1);
    let held = sem.try_acquire().unwrap();
    let mut waiters: Vec<_> = (0..3).map(|_| Probe::new(sem.acquire_many(1))).collect();
    for w in &mut waiters {
        w.pending();
    }
    sem.close();
    assert!(sem.is_closed());
    for w in &mut waiters {
        assert_eq!(w.wakes(), 1);
        assert_eq!(w.ready().unwrap_err(), w_err());
    }
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
    assert!(futures::executor::block_on(sem.acquire()).is_err());
    assert!(sem.acquire_blocking().is_err());
    // Held permits are still returned.
    drop(held);
    assert_eq!(sem.available_permits(), 1);
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
    assert_eq!(w_err().to_string(), "semaphore closed");
}

fn w_err() -> AcquireError {
    let sem = Semaphore::new(0);
    sem.close();
    futures::executor::block_on(sem.acquire()).unwrap_err()
}

#[test]
fn forget_shrinks_capacity() {
    let sem = Arc::new(Semaphore::new(3));
    sem.try_acquire().unwrap().forget();
    futures::executor::block_on(sem.acquire_many_arc(1))
        .unwrap()
        .forget();
    assert_eq!(sem.available_permits(), 1);
    let p = sem.try_acquire_many(1).unwrap();
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    drop(p);
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn zero_permits_never_wait() {
    let sem = Semaphore::new(0);
    let mut w = Probe::new(sem.acquire());
    w.pending();
    assert_eq!(sem.try_acquire_many(0).unwrap().count(), 0);
    assert_eq!(
        futures::executor::block_on(sem.acquire_many(0))
            .unwrap()
            .count(),
        0
    );
    sem.add_permits(1);
    drop(w.ready().unwrap());
}

#[test]
#[should_panic(expected = "MAX_PERMITS")]
fn acquire_many_beyond_the_maximum_panics() {
    let sem = Semaphore::new(1);
    let _ = futures::executor::block_on(sem.acquire_many(Semaphore::MAX_PERMITS + 1));
}

#[test]
#[should_panic(expected = "MAX_PERMITS")]
fn add_permits_overflow_panics() {
    let sem = Semaphore::new(Semaphore::MAX_PERMITS);
    sem.add_permits(1);
}

/// Held permits count towards `MAX_PERMITS`: adding one to a full semaphore with one permit out
/// panics and adds nothing, so the held permit's release cannot overflow the free count. Forgotten
/// permits (held or free) leave room for new ones.
#[test]
fn add_permits_counts_held_and_forgotten_permits() {
    let sem = Semaphore::new(Semaphore::MAX_PERMITS);
    let p = sem.try_acquire().unwrap();
    let add = std::panic::catch_unwind(AssertUnwindSafe(|| sem.add_permits(1)));
    let msg = add.expect_err("adding to a full semaphore must panic");
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.contains("free and held"), "{msg}");
    assert_eq!(sem.available_permits(), Semaphore::MAX_PERMITS - 1);
    drop(p);
    assert_eq!(sem.available_permits(), Semaphore::MAX_PERMITS);

    sem.try_acquire_many(2).unwrap().forget();
    sem.add_permits(1);
    assert_eq!(sem.forget_permits(3), 3);
    sem.add_permits(4);
    assert_eq!(sem.available_permits(), Semaphore::MAX_PERMITS);
    assert!(std::panic::catch_unwind(AssertUnwindSafe(|| sem.add_permits(1))).is_err());
}

#[test]
fn arc_permits_cross_threads_and_limit_concurrency() {
    let sem = Arc::new(Semaphore::new(3));
    let inside = Arc::new(AtomicUsize::new(0));
    let n = if cfg!(miri) { 20 } else { 2_000 };
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let sem = sem.clone();
            let inside = inside.clone();
            std::thread::spawn(move || {
                for _ in 0..n {
                    let p = futures::executor::block_on(sem.acquire_arc()).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now <= 3, "{now} holders of 3 permits");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(p);
                    let p = sem.acquire_blocking().unwrap();
                    drop(p);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(sem.available_permits(), 3);
}

/// Regression: `add_permits` beyond the maximum must panic *without* publishing the permits first.
/// Thread A keeps trying to add `MAX_PERMITS` permits to a one-permit semaphore (each call panics);
/// thread B keeps trying to take `MAX_PERMITS` at once. Only one permit ever legitimately exists, so
/// B must never succeed and the semaphore must end with exactly one free permit.
#[test]
fn add_permits_overflow_never_mints_permits() {
    const ADDER: &str = "add-permits-overflow";
    let prev = std::sync::Arc::new(std::panic::take_hook());
    {
        let prev = prev.clone();
        // The adder's expected panics would flood the output; other threads' panics still print.
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() != Some(ADDER) {
                prev(info)
            }
        }));
    }
    let sem = Arc::new(Semaphore::new(1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let adder = {
        let (sem, stop) = (sem.clone(), stop.clone());
        std::thread::Builder::new()
            .name(ADDER.into())
            .spawn(move || {
                let mut panics = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        sem.add_permits(Semaphore::MAX_PERMITS)
                    }));
                    panics += u64::from(r.is_err());
                }
                panics
            })
            .unwrap()
    };
    let mut minted = 0u64;
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(500) {
        if let Ok(p) = sem.try_acquire_many(Semaphore::MAX_PERMITS) {
            minted += 1;
            p.forget();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let panics = adder.join().unwrap();
    std::panic::set_hook(Box::new(move |info| prev(info)));
    assert!(
        panics > 0,
        "add_permits(MAX_PERMITS) on a non-empty semaphore must panic"
    );
    assert_eq!(minted, 0, "took MAX_PERMITS permits that were never added");
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn try_acquire_arc_and_static_arc_futures() {
    fn spawnable<F: std::future::Future + Send + 'static>(f: F) -> F {
        f
    }
    let sem = Arc::new(Semaphore::new(2));
    let one = spawnable(sem.acquire_arc());
    let two = spawnable(sem.acquire_many_arc(1));
    let a = sem.try_acquire_arc().unwrap();
    let b = std::thread::spawn(move || futures::executor::block_on(one).unwrap())
        .join()
        .unwrap();
    assert_eq!(
        sem.try_acquire_arc().unwrap_err(),
        TryAcquireError::NoPermits
    );
    assert_eq!(
        sem.try_acquire_many_arc(1).unwrap_err(),
        TryAcquireError::NoPermits
    );
    drop(a);
    let c = futures::executor::block_on(two).unwrap();
    drop((b, c));
    sem.close();
    assert_eq!(sem.try_acquire_arc().unwrap_err(), TryAcquireError::Closed);
}

#[test]
fn split_and_merge_move_permits_between_handles() {
    let sem = Semaphore::new(5);
    let mut p = sem.try_acquire_many(4).unwrap();
    let q = p.split(3).unwrap();
    assert_eq!((p.count(), q.count()), (1, 3));
    assert!(p.split(2).is_none());
    assert_eq!(p.count(), 1, "a failed split changes nothing");
    drop(q);
    assert_eq!(sem.available_permits(), 4);
    p.merge(sem.try_acquire_many(2).unwrap());
    assert_eq!(p.count(), 3);
    assert_eq!(sem.available_permits(), 2);
    drop(p);
    assert_eq!(sem.available_permits(), 5);

    let sem = Arc::new(Semaphore::new(3));
    let mut a = sem.try_acquire_many_arc(3).unwrap();
    let b = a.split(2).unwrap();
    assert_eq!((a.count(), b.count()), (1, 2));
    drop(b);
    assert_eq!(sem.available_permits(), 2);
    a.merge(sem.try_acquire_arc().unwrap());
    assert_eq!(a.count(), 2);
    drop(a);
    assert_eq!(sem.available_permits(), 3);
}

#[test]
#[should_panic(expected = "same Semaphore")]
fn merging_permits_of_different_semaphores_panics() {
    let (s1, s2) = (Semaphore::new(1), Semaphore::new(1));
    let mut p = s1.try_acquire().unwrap();
    p.merge(s2.try_acquire().unwrap());
}

#[test]
#[should_panic(expected = "same Semaphore")]
fn merging_arc_permits_of_different_semaphores_panics() {
    let (s1, s2) = (Arc::new(Semaphore::new(1)), Arc::new(Semaphore::new(1)));
    let mut p = s1.try_acquire_arc().unwrap();
    p.merge(s2.try_acquire_arc().unwrap());
}

#[test]
fn forget_permits_removes_only_free_ones() {
    let sem = Semaphore::new(4);
    let held = sem.try_acquire().unwrap();
    assert_eq!(sem.forget_permits(2), 2);
    assert_eq!(sem.available_permits(), 1);
    assert_eq!(sem.forget_permits(5), 1, "only the free permit can go");
    assert_eq!(sem.available_permits(), 0);
    drop(held);
    assert_eq!(sem.available_permits(), 1);
    assert_eq!(sem.forget_permits(0), 0);
}

#[test]
fn forget_permits_does_not_disturb_the_line() {
    let sem = Semaphore::new(2);
    let mut held = sem.try_acquire_many(2).unwrap();
    let mut big = Probe::new(sem.acquire_many(2));
    big.pending();
    drop(held.split(1));
    // One permit free, the head needs two; forgetting it leaves the head waiting for two releases.
    assert_eq!(sem.forget_permits(1), 1);
    drop(held);
    big.pending();
    sem.add_permits(1);
    assert_eq!(big.wakes(), 1);
    assert_eq!(big.ready().unwrap().count(), 2);
}

/// The fair and the barging semaphore, with `permits` permits.
fn both_kinds(permits: usize) -> [Arc<Semaphore>; 2] {
    [
        Arc::new(Semaphore::new(permits)),
        Arc::new(Semaphore::with_barging(permits, Duration::from_secs(3600))),
    ]
}

/// Cancelling a waiter drops the waker stored in its node. That drop may return permits to the
/// same semaphore (here it does), so it must happen after the internal mutex is unlocked.
#[test]
fn cancelling_a_waiter_drops_its_waker_outside_the_semaphore() {
    for sem in both_kinds(2) {
        common::watchdog(10, move || {
            let p1 = Box::new(sem.try_acquire_arc().unwrap());
            let _p2 = sem.try_acquire_arc().unwrap();
            {
                let fut = pin!(sem.acquire());
                common::wait_with_last_waker_holding(fut, p1);
            } // cancel: drops the node's waker, which returns `p1`
            assert_eq!(sem.available_permits(), 1);
        });
    }
}

/// Polls `fut` until it completes, at most twice (a barging waiter that was woken completes at its
/// next poll, a fair one at once).
fn ready_within_two_polls<F: Future>(mut fut: Pin<&mut F>, cx: &mut Context<'_>) -> F::Output {
    for _ in 0..2 {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return v;
        }
    }
    panic!("the waiter was not served after the release");
}

/// Re-polling a waiter with another waker replaces the one in its node; dropping the old one may
/// return permits to the same semaphore, so it must happen after the internal mutex is unlocked.
#[test]
fn re_polling_a_waiter_drops_its_old_waker_outside_the_semaphore() {
    for sem in both_kinds(2) {
        common::watchdog(10, move || {
            let p1 = Box::new(sem.try_acquire_arc().unwrap());
            let _p2 = sem.try_acquire_arc().unwrap();
            let mut fut = pin!(sem.acquire());
            common::wait_with_last_waker_holding(fut.as_mut(), p1);
            // Replacing it returns `p1`, which then goes to this waiter.
            let p = ready_within_two_polls(fut, &mut Context::from_waker(Waker::noop())).unwrap();
            assert_eq!(sem.available_permits(), 0);
            drop(p);
            assert_eq!(sem.available_permits(), 1);
        });
    }
}

/// Each wait stores a clone of the waiter's waker; the clone may return permits to the same
/// semaphore, so it must not run under the internal mutex.
#[test]
fn waiting_clones_the_waker_outside_the_semaphore() {
    for sem in both_kinds(1) {
        common::watchdog(10, move || {
            // Joining the line stores the waker of the first poll.
            let waker = common::waker_releasing_on_clone(Box::new(sem.try_acquire_arc().unwrap()));
            let fut = pin!(sem.acquire());
            drop(ready_within_two_polls(fut, &mut Context::from_waker(&waker)).unwrap());
            // A later poll with another waker stores that one.
            let blocker = sem.try_acquire_arc().unwrap();
            let mut fut = pin!(sem.acquire());
            let mut noop = Context::from_waker(Waker::noop());
            assert!(fut.as_mut().poll(&mut noop).is_pending());
            let waker = common::waker_releasing_on_clone(Box::new(blocker));
            drop(ready_within_two_polls(fut, &mut Context::from_waker(&waker)).unwrap());
            assert_eq!(sem.available_permits(), 1);
        });
    }
}

/// Waits until a waiter has joined a fair semaphore's line: from then on `try_acquire` fails even
/// while a permit is free (`free` must be at least one and less than the waiter's request).
fn until_a_waiter_queues(sem: &Semaphore) {
    assert!(sem.available_permits() >= 1);
    while let Ok(p) = sem.try_acquire() {
        drop(p);
        std::thread::yield_now();
    }
}

#[test]
fn blocking_acquire_many_is_woken_by_a_release_on_another_thread_and_keeps_its_place() {
    common::watchdog(30, || {
        let sem = Arc::new(Semaphore::new(3));
        let held = sem.try_acquire_many_arc(2).unwrap();
        let waiter = {
            let sem = sem.clone();
            std::thread::spawn(move || sem.acquire_many_blocking(3).map(|p| p.count()))
        };
        until_a_waiter_queues(&sem);
        // FIFO: the free permit is not taken past the waiting request, however small the taker.
        assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
        let mut later = Probe::new(sem.acquire());
        later.pending();
        std::thread::spawn(move || drop(held)).join().unwrap();
        assert_eq!(waiter.join().unwrap(), Ok(3));
        assert_eq!(
            later.wakes(),
            1,
            "served after the blocking request returned its permits"
        );
        assert_eq!(later.ready().unwrap().count(), 1);
        assert_eq!(sem.available_permits(), 3);
    });
}

#[test]
fn blocking_arc_acquires_are_woken_by_releases_on_other_threads() {
    common::watchdog(30, || {
        for sem in [
            Semaphore::new(2),
            Semaphore::with_barging(2, Duration::from_millis(1)),
        ] {
            let sem = Arc::new(sem);
            let held = sem.acquire_many_arc_blocking(2).unwrap();
            assert_eq!((held.count(), Arc::strong_count(&sem)), (2, 2));
            let waiters = [1, 2].map(|n| {
                let sem = sem.clone();
                std::thread::spawn(move || {
                    let p = if n == 1 {
                        sem.acquire_arc_blocking()
                    } else {
                        sem.acquire_many_arc_blocking(2)
                    };
                    p.map(|p| p.count())
                })
            });
            // The permits go back from another thread; both waiters get in, one after the other.
            std::thread::spawn(move || drop(held)).join().unwrap();
            assert_eq!(waiters.map(|t| t.join().unwrap()), [Ok(1), Ok(2)]);
            assert_eq!((sem.available_permits(), Arc::strong_count(&sem)), (2, 1));
        }
    });
}

#[test]
fn close_fails_a_waiting_blocking_acquire() {
    common::watchdog(30, || {
        let sem = Arc::new(Semaphore::new(2));
        let held = sem.try_acquire().unwrap();
        let waiter = {
            let sem = sem.clone();
            std::thread::spawn(move || sem.acquire_many_arc_blocking(2).map(|p| p.count()))
        };
        until_a_waiter_queues(&sem);
        sem.close();
        assert!(waiter.join().unwrap().is_err());
        assert!(sem.acquire_blocking().is_err());
        assert!(sem.acquire_many_blocking(1).is_err());
        assert!(sem.acquire_arc_blocking().is_err());
        assert!(sem.acquire_many_arc_blocking(0).is_err());
        drop(held);
        assert_eq!((sem.available_permits(), Arc::strong_count(&sem)), (2, 1));
    });
}

#[test]
#[should_panic(expected = "MAX_PERMITS")]
fn blocking_acquire_many_of_more_than_max_permits_panics() {
    let sem = Semaphore::new(1);
    let _ = sem.acquire_many_blocking(Semaphore::MAX_PERMITS + 1);
}
